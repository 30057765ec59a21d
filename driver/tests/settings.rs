//! Settings in one place: every tuning variable is read by
//! `Config::from_env` (and its sub-structs), and a communicator built from
//! an explicit `Config` takes its tuning from that value alone, whatever
//! the environment says.
//!
//! This binary holds one test: it changes its own process's environment,
//! which no other test may read at the same time.

use std::time::Duration;
use tandem_driver::{
    Algorithm, CollConfig, Collective, Comm, Config, Error, Layout, Links, NetConfig, RdmaConfig,
    ReduceOp, Rendezvous, TransportChoice, WaitPolicy,
};

/// Every tuning variable, set to a value its reader refuses.
const BAD: [(&str, &str); 12] = [
    ("TANDEM_ALGO", "fastest"),
    ("TANDEM_COLL_TREE_MAX", "big"),
    ("TANDEM_COLL_CHUNK", "0"),
    ("TANDEM_COLL_LANES", "99"),
    ("TANDEM_TRANSPORT", "carrier-pigeon"),
    ("TANDEM_BOOT_TIMEOUT", "inf"),
    ("TANDEM_ADDR", "not-an-address"),
    ("TANDEM_DATA_PORT", "70000"),
    ("TANDEM_RDMA_RNDV", "telepathy"),
    ("TANDEM_RNR_RETRY", "9"),
    ("TANDEM_IB_PORT", "-1"),
    ("TANDEM_SOFT_DELAY_US", "soon"),
];

fn cfg() -> Config {
    Config::default()
        .wait(WaitPolicy::SHARED_CORES)
        .timeout(Duration::from_secs(30))
}

/// An allreduce, a broadcast and a message on `links`, with `cfg`.
fn world(links: Links, cfg: Config) -> Vec<tandem_driver::Result<u64>> {
    Comm::threads_on(2, links, &Layout::default(), cfg, |comm| {
        let mut sum = [0u64; 3];
        comm.allreduce(&[comm.rank() as u64 + 1; 3], &mut sum, ReduceOp::Sum)?;
        let mut b = [comm.rank() as u32; 5000];
        comm.broadcast(&mut b, 1)?;
        assert!(b.iter().all(|&x| x == 1));
        let mut m = [0u8; 100];
        if comm.rank() == 0 {
            comm.send(&[7u8; 100], 1, 3)?;
        } else {
            comm.recv(&mut m, 0, 3)?;
            assert_eq!(m, [7u8; 100]);
        }
        Ok(sum[2])
    })
}

#[test]
fn an_explicit_config_ignores_the_environments_tuning() {
    // Each variable is read: alone, it makes Config::from_env fail, naming it.
    for (name, value) in BAD {
        std::env::set_var(name, value);
        match Config::from_env() {
            Err(Error::Config(m)) => assert!(m.contains(name), "{name}={value}: {m}"),
            other => panic!("{name}={value} was not refused: {other:?}"),
        }
        std::env::remove_var(name);
    }
    assert_eq!(Config::from_env(), Ok(Config::default()));

    // All of them set at once: communicators built from a Config never look.
    for (name, value) in BAD {
        std::env::set_var(name, value);
    }
    for links in [Links::Shm, Links::Tcp, Links::Soft, Links::SoftRead] {
        for r in world(links, cfg()) {
            assert_eq!(r, Ok(3), "{links:?}");
        }
    }
    // Non-default settings given in the Config run correctly: a forced
    // ring with a pipeline of small chunks, a soft NIC with delays, read
    // rendezvous, a short bootstrap deadline. (That the explicit Config is
    // what the links read shows below: its invalid RNR retry is refused
    // while the environment's is ignored.)
    let mut c = cfg()
        .coll(
            CollConfig::default()
                .algorithm(Collective::Allreduce, Some(Algorithm::Ring))
                .pipeline(4096, 3)
                .unwrap(),
        )
        .net(NetConfig {
            boot_timeout: Duration::from_secs(5),
            ..NetConfig::default()
        })
        .transport(TransportChoice::Auto)
        .rdma(RdmaConfig {
            rendezvous: Rendezvous::Read,
            soft_delay_us: 50,
            ..RdmaConfig::default()
        });
    c.rdma.rnr_retry = 7;
    for links in [Links::Shm, Links::Soft] {
        for r in world(links, c.clone()) {
            assert_eq!(r, Ok(3), "{links:?} with {c:?}");
        }
    }
    // An explicit Config is still checked: an RNR retry count verbs cannot
    // take is refused when the RDMA links are made, not silently clamped.
    let mut bad = cfg();
    bad.rdma.rnr_retry = 8;
    for r in world(Links::Soft, bad) {
        assert!(
            matches!(&r, Err(Error::Config(m)) if m.contains("TANDEM_RNR_RETRY")),
            "{r:?}"
        );
    }
    for (name, _) in BAD {
        std::env::remove_var(name);
    }
}
