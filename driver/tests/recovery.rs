//! Surviving failures: revoke, agree, shrink, failed ranks, and detection
//! of silent peers with a bound (a stopped process, a busy one that must
//! not be declared dead). Ranks die for real: a thread's communicator is
//! dropped (its TCP connections close), a process is killed or stopped.

mod common;
use std::time::{Duration, Instant};
use tandem_driver::{Comm, Config, Error, Layout, Links, ReduceOp, WaitPolicy};

fn cfg() -> Config {
    Config::default()
        .wait(WaitPolicy::SHARED_CORES)
        .timeout(Duration::from_secs(30))
}

/// The allreduce loop of the recovery tests: `rounds` sums of every rank's
/// `rank + round`, checked; returns the first error.
fn sums(comm: &Comm, from: u64, rounds: u64) -> Result<(), Error> {
    for round in from..from + rounds {
        let mine = [comm.rank() as u64 + round; 4];
        let mut got = [0u64; 4];
        comm.allreduce(&mine, &mut got, ReduceOp::Sum)?;
        let n = comm.size() as u64;
        let want = n * (n - 1) / 2 + n * round;
        assert_eq!(got, [want; 4], "round {round} on {n} ranks");
    }
    Ok(())
}

/// What every survivor of a failed allreduce does: revoke (so those still
/// waiting on live peers stop), shrink, and go on.
fn recover(comm: &Comm, e: Error) -> Comm {
    assert!(
        matches!(
            e,
            Error::PeerLost { .. } | Error::PeerSilent { .. } | Error::Revoked { .. }
        ),
        "rank {}: {e:?}",
        comm.rank()
    );
    comm.revoke();
    comm.shrink()
        .unwrap_or_else(|e| panic!("rank {}: shrink: {e}", comm.rank()))
}

#[test]
fn agree_ands_the_flags_of_every_rank() {
    let out = Comm::threads(4, &Layout::default(), cfg(), |c| {
        let a = c.agree(!(1 << c.rank()))?;
        let b = c.agree(0xff)?;
        Ok((a, b))
    });
    for r in out {
        assert_eq!(r.unwrap(), (!0b1111, 0xff));
    }
}

/// A communicator of ranks 3, 1 and 0 in that order on a context the
/// caller chose: ranks renumbered, statuses in its numbering, collectives
/// and the whole agreement (flags ANDed, contexts free everywhere) on it;
/// bad lists refused.
#[test]
fn a_subset_in_any_order_agrees_on_flags_and_free_contexts() {
    let out = Comm::threads(4, &Layout::default(), cfg(), |c| {
        assert!(matches!(
            c.subset_with_context(&[0, 0, 1], 300),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            c.subset_with_context(&[0, 9], 300),
            Err(Error::InvalidRank { rank: 9, .. })
        ));
        assert!(matches!(
            c.subset_with_context(&[0, 1, 2, 3], tandem_driver::MAX_CONTEXTS / 2 - 1),
            Err(Error::InvalidArgument(_))
        ));
        if c.rank() == 2 {
            assert!(c.subset_with_context(&[3, 1, 0], 300).is_err());
            return Ok(None);
        }
        let s = c.subset_with_context(&[3, 1, 0], 300)?;
        let me = [3, 1, 0].iter().position(|&r| r == c.rank()).unwrap();
        assert_eq!((s.rank(), s.size()), (me, 3));
        // A ring in the subset's numbering; the status names its ranks.
        let (next, prev) = ((me + 1) % 3, (me + 2) % 3);
        let mut got = [0u8; 1];
        let st = s.sendrecv(&[me as u8], next, 5, &mut got, prev, 5)?;
        assert_eq!((got[0] as usize, st.source), (prev, prev));
        let mut sum = [0u64; 1];
        s.allreduce(&[c.rank() as u64], &mut sum, ReduceOp::Sum)?;
        assert_eq!(sum[0], 4);
        // Every rank has contexts 100.. free, and rank 1 also 64..100.
        let mut free = [0u64; tandem_driver::CONTEXT_WORDS];
        let from = if c.rank() == 1 { 64 } else { 100 };
        for ctx in from..200 {
            free[ctx / 64] |= 1 << (ctx % 64);
        }
        let a = s.agree_on(0b1100 | 1 << me, &free)?;
        Ok(Some(a))
    });
    let mut agreed = Vec::new();
    for r in out {
        if let Some(a) = r.unwrap() {
            agreed.push(a);
        }
    }
    assert_eq!(agreed.len(), 3);
    for a in &agreed {
        assert_eq!(a, &agreed[0]);
    }
    let a = &agreed[0];
    assert_eq!((a.flags, a.failed.len()), (0b1100, 0));
    let lowest = (0..512).find(|&c| a.free[c / 64] & (1 << (c % 64)) != 0);
    let highest = (0..512)
        .rev()
        .find(|&c| a.free[c / 64] & (1 << (c % 64)) != 0);
    assert_eq!((lowest, highest), (Some(100), Some(199)));
}

#[test]
fn iagree_stays_pending_while_a_rank_is_late_and_lets_other_traffic_through() {
    let out = Comm::threads(3, &Layout::default(), cfg(), |c| {
        let other = c.dup()?;
        if c.rank() == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut a = c.iagree(if c.rank() == 1 { 0b0110 } else { 0b1111 });
        if c.rank() != 0 {
            // Rank 0 has not started: nobody can have decided.
            assert_eq!(a.test(&c)?, None, "rank {}", c.rank());
            assert!(a.agreement().is_none());
        }
        // Testing on another communicator is refused and changes nothing.
        assert!(matches!(a.test(&other), Err(Error::InvalidArgument(_))));
        // Other traffic meanwhile, on the same ranks.
        let (next, prev) = ((c.rank() + 1) % 3, (c.rank() + 2) % 3);
        let mut got = [0u8; 1];
        c.sendrecv(&[c.rank() as u8], next, 3, &mut got, prev, 3)?;
        assert_eq!(got[0] as usize, prev);
        let flags = loop {
            if let Some(f) = a.test(&c)? {
                break f;
            }
            std::thread::yield_now();
        };
        assert_eq!(a.wait(&c)?, flags, "the outcome stays");
        let whole = a.agreement().expect("decided").clone();
        assert!(whole.failed.is_empty());
        // A blocking agreement after it takes the next place.
        let next_flags = c.agree(1 << c.rank() | 0b1000)?;
        Ok((flags, next_flags))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (flags, next) = o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert_eq!((flags, next), (0b0110, 0b1000), "rank {r}");
    }
}

#[test]
fn iagree_decides_without_a_rank_that_dies_before_joining() {
    let out = Comm::threads_on(3, Links::Tcp, &Layout::default(), cfg(), |comm| {
        sums(&comm, 0, 5)?;
        if comm.rank() == 2 {
            drop(comm);
            return Ok(None);
        }
        let mut a = comm.iagree(0b11);
        let f = a.wait(&comm)?;
        Ok(Some((f, a.agreement().expect("decided").failed.clone())))
    });
    for (r, o) in out.into_iter().enumerate() {
        if let Some((f, failed)) = o.unwrap_or_else(|e| panic!("rank {r}: {e}")) {
            assert_eq!((f, failed), (0b11, vec![2]), "rank {r}");
        }
    }
}

#[test]
fn a_rank_that_dies_is_left_out_and_the_survivors_go_on_with_three() {
    let out = Comm::threads_on(4, Links::Tcp, &Layout::default(), cfg(), |comm| {
        sums(&comm, 0, 20)?;
        if comm.rank() == 2 {
            // Dies: its connections close.
            drop(comm);
            return Ok(None);
        }
        let t = Instant::now();
        let e = sums(&comm, 20, 1_000_000).expect_err("rank 2 died");
        let small = recover(&comm, e);
        let took = t.elapsed();
        assert_eq!(small.size(), 3);
        assert_eq!(small.rank(), [0, 1, usize::MAX, 2][comm.rank()]);
        assert_eq!(comm.failed_ranks(), vec![2]);
        sums(&small, 100, 50)?;
        // Point-to-point on the shrunk communicator, ranks renumbered.
        let next = (small.rank() + 1) % 3;
        let prev = (small.rank() + 2) % 3;
        let mut got = [0u8; 1];
        let st = small.sendrecv(&[small.rank() as u8], next, 4, &mut got, prev, 4)?;
        assert_eq!((got[0] as usize, st.source), (prev, prev));
        Ok(Some(took))
    });
    for (r, o) in out.into_iter().enumerate() {
        let o = o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        if let Some(took) = o {
            assert!(took < Duration::from_secs(10), "rank {r}: {took:?}");
        }
    }
}

#[test]
fn revoke_stops_waits_on_live_peers_everywhere() {
    let out = Comm::threads(3, &Layout::default(), cfg(), |comm| {
        let t = Instant::now();
        if comm.rank() == 0 {
            std::thread::sleep(Duration::from_millis(50));
            comm.revoke();
        } else {
            // Each waits for the other, who never sends.
            let mut b = [0u8; 4];
            let e = comm.recv(&mut b, 3 - comm.rank(), 1).unwrap_err();
            assert_eq!(e, Error::Revoked { context: 0 });
        }
        // Later operations fail at once, blocking and collective.
        assert!(comm.is_revoked());
        assert_eq!(comm.send(b"x", 0, 1), Err(Error::Revoked { context: 0 }));
        let mut s = [0u32; 1];
        assert_eq!(
            comm.allreduce(&[1u32], &mut s, ReduceOp::Sum),
            Err(Error::Revoked { context: 0 })
        );
        // A shrink of the revoked communicator (no rank failed: all three) goes on.
        let all = comm.shrink()?;
        assert_eq!((all.size(), all.rank()), (3, comm.rank()));
        all.allreduce(&[1u32], &mut s, ReduceOp::Sum)?;
        assert_eq!(s[0], 3);
        Ok(t.elapsed())
    });
    for (r, o) in out.into_iter().enumerate() {
        let took = o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(took < Duration::from_secs(10), "rank {r}: {took:?}");
    }
}

// ---------------------------------------------------------------------------
// Processes: killed, stopped, busy
// ---------------------------------------------------------------------------

/// Four processes over `transport`; rank 3 SIGKILLs itself in the middle
/// of the allreduce loop; the three others revoke, shrink and go on with
/// correct sums.
fn killed_in_allreduce(name: &str, transport: &str) {
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        sums(&comm, 0, 10).unwrap();
        if comm.rank() == 3 {
            // SAFETY: raising a signal has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        let t = Instant::now();
        let e = sums(&comm, 10, 1_000_000).expect_err("rank 3 died");
        let small = recover(&comm, e);
        println!("rank {}: recovered in {:?}", comm.rank(), t.elapsed());
        assert_eq!((small.size(), small.rank()), (3, comm.rank()));
        sums(&small, 1000, 100).unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        return;
    }
    let o = common::launcher(4, name)
        .env("TANDEM_TRANSPORT", transport)
        .env("TANDEM_TIMEOUT", "30")
        .kill_grace(Duration::from_secs(30))
        .run()
        .unwrap();
    assert_eq!(
        o.codes,
        vec![0, 0, 0, 128 + libc::SIGKILL],
        "over {transport}"
    );
}

#[test]
fn survivors_of_a_kill_shrink_and_go_on_over_shm() {
    killed_in_allreduce("survivors_of_a_kill_shrink_and_go_on_over_shm", "shm");
}

#[test]
fn survivors_of_a_kill_shrink_and_go_on_over_tcp() {
    killed_in_allreduce("survivors_of_a_kill_shrink_and_go_on_over_tcp", "tcp");
}

/// Rank 1 stops itself (SIGSTOP) while rank 0 waits for it: rank 0 gets
/// `PeerSilent` naming rank 1 within the bound (1 s here), then kills it.
fn stopped_peer(name: &str, transport: &str) {
    const BOUND: f64 = 1.0;
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        let mut pid = [0u8; 4];
        if comm.rank() == 1 {
            comm.send(&std::process::id().to_le_bytes(), 0, 1).unwrap();
            // SAFETY: raising a signal has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
            unreachable!("rank 0 kills this process while it is stopped");
        }
        comm.recv(&mut pid, 1, 1).unwrap();
        let t = Instant::now();
        let e = comm.recv(&mut [0u8; 8], 1, 2).unwrap_err();
        let took = t.elapsed();
        println!("rank 0: {e} after {took:?}");
        // SAFETY: plain syscall; the pid is rank 1's, stopped, not reaped.
        unsafe { libc::kill(u32::from_le_bytes(pid) as libc::pid_t, libc::SIGKILL) };
        let Error::PeerSilent { rank, evidence, .. } = &e else {
            panic!("over {transport}: {e:?}");
        };
        assert_eq!(*rank, 1);
        assert!(!evidence.is_empty());
        assert!(
            took.as_secs_f64() < 2.5 * BOUND,
            "detected after {took:?}, bound {BOUND} s"
        );
        assert_eq!(comm.failed_ranks(), vec![1]);
        return;
    }
    let o = common::launcher(2, name)
        .env("TANDEM_TRANSPORT", transport)
        .env("TANDEM_TIMEOUT", "60")
        .env("TANDEM_FAILURE_TIMEOUT", BOUND.to_string())
        .kill_grace(Duration::from_secs(30))
        .run()
        .unwrap();
    assert_eq!(o.codes, vec![0, 128 + libc::SIGKILL], "over {transport}");
}

#[test]
fn a_stopped_rank_is_declared_silent_within_the_bound_over_tcp() {
    stopped_peer(
        "a_stopped_rank_is_declared_silent_within_the_bound_over_tcp",
        "tcp",
    );
}

#[test]
fn a_stopped_rank_is_declared_silent_within_the_bound_over_shm() {
    stopped_peer(
        "a_stopped_rank_is_declared_silent_within_the_bound_over_shm",
        "shm",
    );
}

/// Rank 1 computes for three times the bound without calling tandem
/// (its heartbeat thread keeps beating); rank 0, waiting for it all that
/// time, must not declare it failed.
#[test]
fn a_busy_rank_is_not_declared_dead() {
    const BOUND: Duration = Duration::from_millis(500);
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        if comm.rank() == 1 {
            let end = Instant::now() + 3 * BOUND + Duration::from_millis(200);
            let mut x = 1u64;
            while Instant::now() < end {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            comm.send(b"done", 0, 3).unwrap();
            // Stays until rank 0 has looked (its exit would be a failure).
            comm.recv(&mut [0u8; 2], 0, 4).unwrap();
        } else {
            let mut b = [0u8; 4];
            let st = comm.recv(&mut b, 1, 3).unwrap();
            assert_eq!((&b, st.source), (b"done", 1));
            assert!(comm.failed_ranks().is_empty());
            comm.send(b"ok", 1, 4).unwrap();
        }
        return;
    }
    let o = common::launcher(2, "a_busy_rank_is_not_declared_dead")
        .env("TANDEM_TRANSPORT", "tcp")
        .env("TANDEM_FAILURE_TIMEOUT", BOUND.as_secs_f64().to_string())
        .run()
        .unwrap();
    assert_eq!(o.codes, vec![0, 0]);
}
