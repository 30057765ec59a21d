//! Two ranks that both `ssend` to each other before receiving can never
//! complete: each is reported as a deadlock naming both blocked
//! operations, once the cycle has held for `TANDEM_DEADLOCK_AFTER` (well
//! before the deadline), or by the deadline where that check is off. The
//! same exchange in a group completes.

mod common;
use std::time::{Duration, Instant};
use tandem_driver::{Comm, Error, OpKind, Wait};

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
        let wait = |rank, peer| Wait {
            rank,
            op: OpKind::Ssend,
            peer,
            tag: 5,
        };
        assert_eq!(*ours, wait(me, peer));
        assert_eq!(*theirs, [wait(peer, me)]);
        assert_eq!(
            ours.to_string(),
            format!("rank {me}: ssend to rank {peer} tag 5")
        );
        let msg = r.as_ref().unwrap_err().to_string();
        assert!(
            msg.contains("deadlock")
                && msg.contains(&format!("rank {me}: ssend to rank {peer} tag 5 waited"))
                && msg.contains(&format!("while rank {peer}: ssend to rank {me} tag 5 (")),
            "{msg}"
        );
        if std::env::var("TANDEM_DEADLOCK_AFTER").as_deref() == Ok("0") {
            // Only the deadline reports it.
            assert!(
                took >= Duration::from_secs(2),
                "reported after the deadline, not before: {took:?}"
            );
            assert!(
                took < Duration::from_secs(20),
                "reported by the deadline: {took:?}"
            );
        } else {
            // The cycle held for half a second: reported long before the
            // 60 s deadline.
            assert!(
                took >= Duration::from_millis(500) && took < Duration::from_secs(2),
                "reported once the cycle held, not at the deadline: {took:?}"
            );
        }
        return;
    }
    let name = "crossed_ssends_are_reported_as_a_deadlock_naming_both_operations";
    let o = common::launcher(2, name)
        .env("TANDEM_TIMEOUT", "60")
        .run()
        .unwrap();
    assert_eq!(o.code(), 0, "early: exit codes {:?}", o.codes);
    let o = common::launcher(2, name)
        .env("TANDEM_TIMEOUT", "2")
        .env("TANDEM_DEADLOCK_AFTER", "0")
        .run()
        .unwrap();
    assert_eq!(o.code(), 0, "at the deadline: exit codes {:?}", o.codes);
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

/// Three ranks each in a blocking `ssend` to the next (0 → 1 → 2 → 0): a
/// cycle longer than two is still a deadlock, and every rank's report names
/// all three operations in cycle order.
#[test]
fn a_three_rank_cycle_of_ssends_is_a_deadlock_naming_every_operation() {
    let name = "a_three_rank_cycle_of_ssends_is_a_deadlock_naming_every_operation";
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        let me = comm.rank();
        let next = (me + 1) % 3;
        let r = comm.ssend(b"x", next, 4);
        // Stay until the others reached their deadlines too.
        std::thread::sleep(Duration::from_secs(2));
        let Err(Error::Deadlock { ours, theirs, .. }) = &r else {
            panic!("rank {me}: expected a deadlock report, got {r:?}");
        };
        let wait = |rank, peer| Wait {
            rank,
            op: OpKind::Ssend,
            peer,
            tag: 4,
        };
        let n2 = (next + 1) % 3;
        assert_eq!(*ours, wait(me, next));
        assert_eq!(*theirs, [wait(next, n2), wait(n2, me)]);
        let msg = r.as_ref().unwrap_err().to_string();
        assert!(
            msg.contains(&format!(
                "while rank {next}: ssend to rank {n2} tag 4, which waits for rank {n2}: ssend to rank {me} tag 4 ("
            )),
            "{msg}"
        );
        return;
    }
    let o = common::launcher(3, name)
        .env("TANDEM_TIMEOUT", "2")
        .run()
        .unwrap();
    assert_eq!(o.code(), 0, "exit codes {:?}", o.codes);
}

/// A receive for tag 8 from rank 1, while rank 1's tag-7 message sits
/// unreceived: the timeout names that message. A wait on a rank that is
/// itself waiting on a third names the chain.
#[test]
fn timeouts_name_unmatched_messages_and_the_chain_of_waits() {
    let name = "timeouts_name_unmatched_messages_and_the_chain_of_waits";
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        match comm.rank() {
            0 => {
                let mut b = [0u8; 16];
                let e = comm.recv(&mut b, 1, 8).unwrap_err();
                let t = e.to_string();
                assert!(matches!(e, Error::Timeout { .. }), "{t}");
                assert!(
                    t.contains("rank 1 sent tag 7 (12 bytes), which no receive matches"),
                    "{t}"
                );
                assert!(
                    t.contains("it waits for rank 1: recv from rank 2 tag 3"),
                    "{t}"
                );
                // (No cycle: rank 2 is busy outside tandem, not waiting.)
                assert!(!t.contains("rank 2: "), "{t}");
            }
            1 => {
                comm.send(b"twelve bytes", 0, 7).unwrap();
                // Blocked on rank 2, which answers late (past this rank's
                // own deadline: try again after a timeout).
                let mut b = [0u8; 3];
                let mut tries = 0;
                loop {
                    match comm.recv(&mut b, 2, 3) {
                        Err(Error::Timeout { .. }) if tries < 5 => tries += 1,
                        r => {
                            r.unwrap();
                            break;
                        }
                    };
                }
            }
            _ => {
                // Busy with something else past rank 0's deadline.
                std::thread::sleep(Duration::from_secs(4));
                comm.send(b"ok!", 1, 3).unwrap();
            }
        }
        return;
    }
    let o = common::launcher(3, name)
        .env("TANDEM_TIMEOUT", "2")
        .run()
        .unwrap();
    assert_eq!(o.code(), 0, "exit codes {:?}", o.codes);
}

/// A send and the receive that matches it, both blocked for longer than
/// the cycle check's stillness (a 512 MiB message pulled in one piece,
/// then streamed, with `TANDEM_DEADLOCK_AFTER` at 10 ms): the two ends of
/// one message under way are not a deadlock; nor are two ranks whose
/// grouped ssends wait while their receives move the data.
#[test]
fn a_long_transfer_is_not_a_deadlock() {
    let name = "a_long_transfer_is_not_a_deadlock";
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        let me = comm.rank();
        let len = 512 << 20;
        // Both ranks ssend and receive in a group: each one's published
        // wait is its ssend, which looks like a cycle of two ssends while
        // the receives pull.
        let mine = vec![me as u8; len];
        let mut theirs = vec![0u8; len];
        comm.group(|g| {
            g.ssend(&mine, 1 - me, 6)?;
            g.recv(&mut theirs, 1 - me, 6)
        })
        .unwrap_or_else(|e| panic!("group: {e}"));
        assert!(theirs.iter().all(|&b| b as usize == 1 - me));
        drop((mine, theirs));
        for round in 0..2 {
            if me == 0 {
                let buf = vec![7u8; len];
                comm.send(&buf, 1, 5)
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
            } else {
                let mut buf = vec![0u8; len];
                comm.recv(&mut buf, 0, 5)
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
                assert!(buf.iter().all(|&b| b == 7));
            }
        }
        return;
    }
    for cma in ["1", "0"] {
        let o = common::launcher(2, name)
            .env("TANDEM_DEADLOCK_AFTER", "0.01")
            .env("TANDEM_CMA", cma)
            .run()
            .unwrap();
        assert_eq!(o.code(), 0, "TANDEM_CMA={cma}: exit codes {:?}", o.codes);
    }
}
