//! The verbs fabric from the outside. On a machine without an RDMA device
//! (CI) asking for verbs is a clear error and `auto` falls back to TCP; on
//! a machine with one (`scripts/rdma-check.sh`) the same tests run a real
//! exchange over it.

mod common;
use tandem_driver::transport::Kind;
use tandem_driver::{Comm, Error};
use tandem_fabric::verbs;

fn has_device() -> bool {
    cfg!(feature = "verbs") && verbs::probe().is_ok()
}

#[test]
fn probe_names_what_is_missing() {
    match verbs::probe() {
        Ok(dev) => assert!(verbs::devices().contains(&dev)),
        Err(e) => {
            let t = e.to_string();
            assert!(t.starts_with("no RDMA device"), "{t}");
            assert!(
                t.contains("/sys/class/infiniband")
                    || t.contains("ACTIVE")
                    || t.contains("TANDEM_IB_DEV"),
                "{t}"
            );
        }
    }
}

#[test]
fn an_unknown_device_name_is_refused() {
    if common::is_rank() {
        return;
    }
    // A name no machine has: the error lists what there is instead.
    let e = verbs::probe_named(Some("no-such-hca"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no RDMA device"), "{e}");
}

#[cfg(feature = "verbs")]
#[test]
fn opening_a_missing_device_is_no_device() {
    use tandem_fabric::{verbs_qp, FabricError};
    if has_device() {
        return;
    }
    let caps = tandem_driver::transport::rdma::caps();
    match verbs_qp::open("mlx5_0", 1, None, caps) {
        Err(FabricError::NoDevice(why)) => eprintln!("as expected: {why}"),
        Err(e) => panic!("expected NoDevice, got {e}"),
        Ok(_) => panic!("a device that the probe did not see"),
    }
}

/// `TANDEM_TRANSPORT=verbs`: with no device every rank fails at once with
/// an error that says so; with one, the ranks exchange over it.
#[test]
fn verbs_jobs_fail_clearly_without_a_device() {
    let name = "verbs_jobs_fail_clearly_without_a_device";
    if common::is_rank() {
        match Comm::from_env() {
            Ok(comm) => {
                assert!(has_device(), "joined over verbs without a device");
                let peer = 1 - comm.rank();
                assert_eq!(comm.route(peer).unwrap().kind(), Kind::Rdma);
                let mut b = vec![0u8; 1 << 20];
                if comm.rank() == 0 {
                    b.fill(9);
                    comm.send(&b, peer, 1).unwrap();
                } else {
                    comm.recv(&mut b, peer, 1).unwrap();
                    assert!(b.iter().all(|&x| x == 9));
                }
            }
            Err(e) => {
                assert!(!has_device(), "a device is present, yet: {e}");
                let t = e.to_string();
                assert!(matches!(e, Error::Config(_)), "{t}");
                assert!(
                    t.contains("no RDMA device") || t.contains("built without verbs"),
                    "{t}"
                );
                println!("rank error, as expected: {t}");
            }
        }
        return;
    }
    let o = common::launcher(2, name)
        .env("TANDEM_TRANSPORT", "verbs")
        .env("TANDEM_BOOT_TIMEOUT", "20")
        .run()
        .unwrap();
    assert_eq!(o.code(), 0, "exit codes {:?}", o.codes);
}
