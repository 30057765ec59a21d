//! Two ranks that both `ssend` to each other before receiving can never
//! complete: each is reported as a deadlock by the deadline, naming both
//! blocked operations. The same exchange in a group completes.

mod common;
use std::time::{Duration, Instant};
use tandem_driver::{Comm, Error};

#[test]
fn crossed_ssends_are_reported_as_a_deadlock_naming_both_operations() {
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        let me = comm.rank();
        let peer = 1 - me;
        let t = Instant::now();
        let r = comm.ssend(b"hello", peer, 5);
        let took = t.elapsed();
        println!("rank {me}: {r:?}");
        // Stay alive until the peer reached its own deadline too (else it
        // sees this rank exit first and reports PeerLost instead).
        std::thread::sleep(Duration::from_secs(2));
        let Err(Error::Deadlock { ours, theirs, .. }) = &r else {
            panic!("expected a deadlock report, got {r:?}");
        };
        assert_eq!(ours, &format!("rank {me}: ssend to rank {peer} tag 5"));
        assert_eq!(theirs, &format!("rank {peer}: ssend to rank {me} tag 5"));
        let msg = r.as_ref().unwrap_err().to_string();
        assert!(
            msg.contains("deadlock") && msg.contains(ours.as_str()),
            "{msg}"
        );
        assert!(
            took >= Duration::from_secs(2),
            "reported after the deadline, not before"
        );
        assert!(
            took < Duration::from_secs(20),
            "reported by the deadline: {took:?}"
        );
        return;
    }
    let o = common::launcher(
        2,
        "crossed_ssends_are_reported_as_a_deadlock_naming_both_operations",
    )
    .env("TANDEM_TIMEOUT", "2")
    .run()
    .unwrap();
    assert_eq!(o.code(), 0, "exit codes {:?}", o.codes);
}

#[test]
fn the_same_exchange_in_a_group_completes_at_any_size() {
    common::ranks(
        2,
        "the_same_exchange_in_a_group_completes_at_any_size",
        |comm| {
            let me = comm.rank();
            let peer = 1 - me;
            for len in [0usize, 8, 512, 513, 1 << 16, 4 << 20] {
                let mine = common::pattern(len, me as u64);
                let mut theirs = vec![0u8; len];
                comm.group(|g| {
                    g.ssend(&mine, peer, 5)?;
                    g.recv(&mut theirs, peer, 5)
                })
                .unwrap();
                assert!(theirs == common::pattern(len, peer as u64), "len {len}");
            }
        },
    );
}
