//! Faults are real: a rank killed with SIGKILL mid-transfer, a stale
//! environment.

mod common;
use std::time::{Duration, Instant};
use tandem_driver::launch::shm_path;
use tandem_driver::{Comm, Error};

const BIG: usize = 1 << 30;

/// Rank `victim` kills itself (SIGKILL) 30 ms into a 1 GiB transfer; the
/// survivor must get `PeerLost` well within its deadline.
fn killed_mid_transfer(name: &str, victim_sends: bool, transport: &str) {
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        let victim = 1;
        let mut buf = vec![0u8; BIG];
        if comm.rank() == victim {
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                // SAFETY: raising a signal has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGKILL) };
            });
            let r = if victim_sends {
                comm.send(&buf, 0, 0).map(|_| ())
            } else {
                comm.recv(&mut buf, 0, 0).map(|_| ())
            };
            // Too fast to be killed mid-way: say so, the test then fails.
            eprintln!("victim finished before being killed: {r:?}");
            std::process::exit(3);
        }
        let t = Instant::now();
        let r = if victim_sends {
            comm.recv(&mut buf, victim, 0).map(|_| ())
        } else {
            comm.send(&buf, victim, 0).map(|_| ())
        };
        let took = t.elapsed();
        println!("survivor got {r:?} after {took:?}");
        // Shared memory sees the death (pidfd); TCP sees the connection end
        // (EOF, or a reset when the dead peer left data unread).
        assert_eq!(r, Err(Error::PeerLost { rank: victim }), "over {transport}");
        assert!(
            took < Duration::from_secs(10),
            "deadline is 60 s; detection took {took:?}"
        );
        return;
    }
    // Streamed through the slot ring, so the victim dies mid-stream (a
    // single-copy pull of the whole buffer may finish before the kill).
    let l = common::launcher(2, name)
        .env("TANDEM_TIMEOUT", "60")
        .env("TANDEM_CMA", "0")
        .env("TANDEM_TRANSPORT", transport)
        .kill_grace(Duration::from_secs(30));
    let job = l.job_id();
    let o = l.run().unwrap();
    assert_eq!(
        o.codes[1],
        128 + libc::SIGKILL,
        "the victim must die by SIGKILL: {:?}",
        o.codes
    );
    assert_eq!(
        o.codes[0], 0,
        "the survivor must pass its checks: {:?}",
        o.codes
    );
    assert!(!shm_path(job).exists(), "job file left behind in /dev/shm");
}

#[test]
fn sender_killed_mid_transfer() {
    killed_mid_transfer("sender_killed_mid_transfer", true, "shm");
}

#[test]
fn receiver_killed_mid_transfer() {
    killed_mid_transfer("receiver_killed_mid_transfer", false, "shm");
}

#[test]
fn sender_killed_mid_transfer_over_tcp() {
    killed_mid_transfer("sender_killed_mid_transfer_over_tcp", true, "tcp");
}

#[test]
fn receiver_killed_mid_transfer_over_tcp() {
    killed_mid_transfer("receiver_killed_mid_transfer_over_tcp", false, "tcp");
}

#[test]
fn sender_killed_mid_transfer_over_soft_rdma() {
    killed_mid_transfer("sender_killed_mid_transfer_over_soft_rdma", true, "soft");
}

#[test]
fn receiver_killed_mid_transfer_over_soft_rdma() {
    killed_mid_transfer("receiver_killed_mid_transfer_over_soft_rdma", false, "soft");
}

/// Rank 0's queue pair to rank 1 goes to the error state (as a hardware
/// fault would put it): both ends of that connection get a clear error
/// naming the verbs status, within the deadline, and the traffic of both
/// with rank 2 goes on unharmed.
#[test]
fn a_queue_pair_forced_to_error_fails_only_its_connection() {
    use tandem_driver::transport::Route;
    use tandem_driver::{Config, Layout, Links, WaitPolicy};
    use tandem_fabric::soft::force_error;
    let cfg = Config::default()
        .wait(WaitPolicy::SHARED_CORES)
        .timeout(Duration::from_secs(20));
    let out = Comm::threads_on(3, Links::Soft, &Layout::default(), cfg, |comm| {
        let me = comm.rank();
        // Everyone talks to everyone first.
        for p in (0..3).filter(|&p| p != me) {
            let mut b = [0u8; 4];
            comm.sendrecv(b"ping", p, 1, &mut b, p, 1)?;
        }
        // A completed eager send is only handed to the NIC: rank 0's ping
        // may still be queued in its send queue, and breaking the queue
        // pair flushes it. So rank 0 breaks it only once rank 1 says
        // (through rank 2) that it has its ping.
        let mut go = [0u8; 1];
        match me {
            0 => {
                comm.recv(&mut go, 2, 4)?;
            }
            1 => comm.send(b"d", 2, 4)?,
            _ => {
                comm.recv(&mut go, 1, 4)?;
                comm.send(b"d", 0, 4)?;
            }
        }
        // Rank 0 breaks its queue pair to rank 1, then (through rank 2)
        // lets rank 1 try to reach it.
        let t = Instant::now();
        let broken = match me {
            0 => {
                let Route::Rdma { qpn, .. } = comm.route(1).unwrap() else {
                    panic!("rank 1 is not reached over RDMA");
                };
                assert!(force_error(qpn));
                comm.send(b"g", 2, 5)?;
                Some(comm.ssend(&[1u8; 100], 1, 2).map(|_| ()))
            }
            1 => {
                comm.recv(&mut go, 2, 5)?;
                Some(comm.ssend(&[1u8; 100], 0, 2).map(|_| ()))
            }
            _ => {
                comm.recv(&mut go, 0, 5)?;
                comm.send(b"g", 1, 5)?;
                None
            }
        };
        if let Some(r) = broken {
            let took = t.elapsed();
            let e = r.expect_err("the broken connection must fail");
            let text = e.to_string();
            assert!(
                matches!(e, Error::ChannelBroken { .. }) && text.contains("IBV_WC_"),
                "rank {me}: {text}"
            );
            assert!(took < Duration::from_secs(10), "rank {me} took {took:?}");
        }
        // Rank 2's connections are untouched. It hears from rank 1 first,
        // so rank 0 stays until rank 1 has seen its own error (a rank that
        // exits makes its peers see it gone instead).
        let mut b = [0u8; 6];
        match me {
            2 => {
                for p in [1, 0] {
                    comm.recv(&mut b, p, 3)?;
                    comm.send(b"after!", p, 3)?;
                }
            }
            _ => {
                comm.send(b"after!", 2, 3)?;
                comm.recv(&mut b, 2, 3)?;
            }
        }
        Ok(b)
    });
    for (r, o) in out.iter().enumerate() {
        let all = format!("{out:?}");
        assert_eq!(
            o.as_ref().map(|b| &b[..]),
            Ok(&b"after!"[..]),
            "rank {r}; all ranks: {all}"
        );
    }
}

/// A rank that only waits to receive from a peer whose queue pair went to
/// the error state (a flushed eager message it will never get, here
/// none at all) sends nothing that could time out: it must still learn,
/// well within its deadline, that the connection is gone (the RDMA
/// link's keepalive), not wait for its timeout.
#[test]
fn a_passive_receiver_learns_its_peers_queue_pair_failed() {
    use std::sync::Barrier;
    use tandem_driver::transport::Route;
    use tandem_driver::{Config, Layout, Links, WaitPolicy};
    use tandem_fabric::soft::force_error;
    let cfg = Config::default()
        .wait(WaitPolicy::SHARED_CORES)
        .timeout(Duration::from_secs(30));
    // Rank 0 breaks its queue pair only once both have their ping (a
    // completed eager send may still sit in the send queue, which the
    // break flushes), and stays until rank 1 is done: a rank that leaves
    // closes its connections, which the peer would see at once.
    let (exchanged, done) = (Barrier::new(2), Barrier::new(2));
    let out = Comm::threads_on(2, Links::Soft, &Layout::default(), cfg, |comm| {
        let mut b = [0u8; 4];
        let peer = 1 - comm.rank();
        let first = comm.sendrecv(b"ping", peer, 1, &mut b, peer, 1);
        exchanged.wait();
        let r = match (first, comm.rank()) {
            (Err(e), _) => Err(e),
            (Ok(_), 0) => {
                let Ok(Route::Rdma { qpn, .. }) = comm.route(peer) else {
                    panic!("rank 1 is not reached over RDMA");
                };
                assert!(force_error(qpn));
                Ok(None)
            }
            (Ok(_), _) => {
                let t = Instant::now();
                let e = comm.recv(&mut b, 0, 2).map(|_| ());
                Ok(Some((t.elapsed(), e)))
            }
        };
        done.wait();
        r
    });
    assert!(matches!(out[0], Ok(None)), "{out:?}");
    let Ok(Some((took, r))) = &out[1] else {
        panic!("{out:?}");
    };
    let e = r
        .clone()
        .expect_err("nothing was sent: the receive must fail");
    let text = e.to_string();
    assert!(
        matches!(e, Error::ChannelBroken { .. }) && text.contains("IBV_WC_RETRY_EXC_ERR"),
        "{text}"
    );
    assert!(
        *took < Duration::from_secs(10),
        "the deadline is 30 s; detection took {took:?}"
    );
}

#[test]
fn no_job_file_remains_after_a_normal_run() {
    common::ranks(3, "no_job_file_remains_after_a_normal_run", |comm| {
        let next = (comm.rank() + 1) % 3;
        let prev = (comm.rank() + 2) % 3;
        comm.send(b"token", next, 0).unwrap();
        let mut b = [0u8; 5];
        comm.recv(&mut b, prev, 0).unwrap();
    });
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mine = format!("tandem-{uid}-");
    let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&mine))
        .collect();
    // Other tests of this binary may be starting ranks right now; their
    // files live only for that instant, so look twice.
    std::thread::sleep(Duration::from_millis(200));
    let still: Vec<_> = leftovers
        .into_iter()
        .filter(|e| e.path().exists())
        .collect();
    assert!(still.is_empty(), "left in /dev/shm: {still:?}");
}

#[test]
fn stale_environment_is_a_clear_error() {
    if common::is_rank() {
        return;
    }
    // This process was not started by a launcher at all.
    let e = Comm::from_env().unwrap_err();
    assert!(matches!(e, Error::NotLaunched(_)), "{e}");
}
