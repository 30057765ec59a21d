//! Regression tests for the defects an outside black-box suite found
//! (issue 12): each failed before its fix.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use tandem_driver::{Comm, Config, Error, Layout, Links, WaitPolicy, ANY_SOURCE, TAG_UB};

fn cfg() -> Config {
    Config::default()
        .wait(WaitPolicy::SHARED_CORES)
        .timeout(Duration::from_secs(10))
}

/// A scope that ends by panic while one of its receives is in the middle
/// of its stream gives that operation's slot back: with room for 4
/// operations, 40 such panics in a row leave the communicator usable.
#[test]
fn a_scope_panicking_mid_stream_gives_its_slots_back() {
    const ROUNDS: usize = 40;
    const BIG: usize = 4 << 20;
    for links in [Links::Shm, Links::Tcp, Links::Soft] {
        let out = Comm::threads_on(
            2,
            links,
            &Layout::default(),
            cfg().max_requests(4),
            |comm| {
                if comm.rank() == 0 {
                    let buf = vec![7u8; BIG];
                    for _ in 0..ROUNDS {
                        comm.send(&buf, 1, 5)?;
                    }
                    comm.send(b"done", 1, 6)?;
                    return Ok(());
                }
                let mut buf = vec![0u8; BIG];
                for round in 0..ROUNDS {
                    // The announcement is here: the receive matches when posted.
                    comm.probe(0, 5)?;
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        comm.scope(|s| -> tandem_driver::Result<()> {
                            let mut req = s.irecv(&mut buf, 0, 5)?;
                            // Two passes start the stream (the message is far
                            // larger than the rings), then leave by panic.
                            for _ in 0..2 {
                                if req.test()?.is_some() {
                                    return Ok(());
                                }
                            }
                            panic!("scope ends by panic in round {round}");
                        })
                    }));
                    match r {
                        Err(_) | Ok(Ok(Ok(()))) => {}
                        Ok(Ok(Err(e))) | Ok(Err(e)) => return Err(e),
                    }
                }
                let mut d = [0u8; 4];
                comm.recv(&mut d, 0, 6)?;
                assert_eq!(&d, b"done");
                Ok(())
            },
        );
        for (r, o) in out.iter().enumerate() {
            assert!(o.is_ok(), "{links:?} rank {r}: {:?}", o);
        }
    }
}

/// `sendrecv` with an invalid send half fails at once with the send's
/// error and consumes nothing: the message its receive would have taken is
/// still there for the next receive.
#[test]
fn sendrecv_with_an_invalid_half_fails_at_once_and_takes_nothing() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |comm| {
        if comm.rank() == 0 {
            comm.send(b"keep me", 1, 3)?;
            let mut b = [0u8; 1];
            comm.recv(&mut b, 1, 4)?;
            return Ok(());
        }
        // Wait until the message is here, so a posted receive would take it.
        comm.probe(0, 3)?;
        let mut got = [0u8; 7];
        for (dst, tag, want) in [
            (9, 0, Error::InvalidRank { rank: 9, size: 2 }),
            (0, TAG_UB + 1, Error::InvalidTag { tag: TAG_UB + 1 }),
        ] {
            let t = Instant::now();
            let e = comm.sendrecv(b"x", dst, tag, &mut got, 0, 3).unwrap_err();
            assert_eq!(e, want);
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "took {:?}",
                t.elapsed()
            );
        }
        // An invalid receive half is refused the same way.
        let e = comm.sendrecv(b"x", 0, 1, &mut got, 7, 3).unwrap_err();
        assert_eq!(e, Error::InvalidRank { rank: 7, size: 2 });
        let st = comm.recv(&mut got, 0, 3)?;
        assert_eq!((st.len, &got), (7, b"keep me"));
        comm.send(&[1], 0, 4)?;
        Ok(())
    });
    for (r, o) in out.iter().enumerate() {
        assert!(o.is_ok(), "rank {r}: {o:?}");
    }
}

/// A group whose closure fails part-way (here its second operation names
/// rank 9) returns that error at once; its receive that had not matched is
/// cancelled, so the message it would have taken stays receivable.
#[test]
fn a_failing_group_leaves_its_unmatched_messages_receivable() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |comm| {
        if comm.rank() == 0 {
            let mut b = [0u8; 1];
            comm.recv(&mut b, 1, 9)?; // rank 1's group has failed by now
            comm.send(b"later", 1, 3)?;
            return Ok(());
        }
        let mut got = [0u8; 5];
        let t = Instant::now();
        let e = comm
            .group(|g| {
                g.recv(&mut got, ANY_SOURCE, 3)?;
                g.send(b"x", 9, 0)
            })
            .unwrap_err();
        assert_eq!(e, Error::InvalidRank { rank: 9, size: 2 });
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "took {:?}",
            t.elapsed()
        );
        comm.send(&[1], 0, 9)?;
        let st = comm.recv(&mut got, 0, 3)?;
        assert_eq!((st.len, &got), (5, b"later"));
        Ok(())
    });
    for (r, o) in out.iter().enumerate() {
        assert!(o.is_ok(), "rank {r}: {o:?}");
    }
}

/// A `sendrecv` that can post only one of its halves (here: room for two
/// operations, and a receive already pending) fails without
/// consuming the message its receive half would have matched: a later
/// `recv` still gets it. (The receive used to be posted first and took the
/// message before the send half failed.)
#[test]
fn a_sendrecv_whose_send_is_refused_consumes_no_message() {
    for links in [Links::Shm, Links::Tcp] {
        let out = Comm::threads_on(
            2,
            links,
            &Layout::default(),
            cfg().max_requests(2),
            |comm| {
                if comm.rank() == 1 {
                    comm.send(b"keep me", 0, 5)?;
                    // Stay until rank 0 is done (a TCP link closing would
                    // fail its pending receive).
                    comm.recv(&mut [0u8; 4], 0, 7)?;
                    return Ok(());
                }
                // The message is here before the call.
                comm.probe(1, 5)?;
                let mut other = [0u8; 4];
                let mut got = [0u8; 7];
                let mut refused = None;
                let scope = comm.scope(|s| {
                    // One of the two requests goes to a receive nobody answers.
                    let mut pending = s.irecv(&mut other, 1, 99)?;
                    refused = Some(s.comm().sendrecv(b"x", 1, 6, &mut got, 1, 5));
                    assert!(pending.cancel()?, "the pending receive is cancelled");
                    Ok(())
                });
                assert!(
                    matches!(
                        scope,
                        Ok(Ok(())) | Ok(Err(Error::Cancelled)) | Err(Error::Cancelled)
                    ),
                    "{links:?}: {scope:?}"
                );
                match refused {
                    Some(Err(Error::TooManyRequests { capacity: 2 })) => {}
                    other => panic!("{links:?}: {other:?}"),
                }
                let st = comm.recv(&mut got, 1, 5)?;
                assert_eq!((&got, st.len), (b"keep me", 7), "{links:?}");
                comm.send(b"done", 1, 7)?;
                Ok(())
            },
        );
        for r in out {
            r.unwrap_or_else(|e| panic!("{links:?}: {e}"));
        }
    }
}

/// On a communicator of some of the job's ranks, a rank at or beyond its
/// size is refused by every point-to-point call, blocking or not, plain
/// or persistent: the shortcuts must not take it for a world rank (here
/// ranks 2 and 3 exist in the job) and deliver the message there.
#[test]
fn a_rank_beyond_a_subset_is_refused_not_sent_to_the_world_rank() {
    let out = Comm::threads(4, &Layout::default(), cfg(), |c| {
        if c.rank() >= 2 {
            // Ranks 0 and 1 send a marker after their attempts; a link
            // keeps order, so a stray message would be here before it.
            for src in 0..2 {
                c.recv(&mut [0u8; 1], src, 9)?;
            }
            let view = c.subset_with_context(&[0, 1, 2, 3], 300)?;
            let stray = view.iprobe(ANY_SOURCE, tandem_driver::ANY_TAG)?;
            assert!(stray.is_none(), "rank {}: {stray:?} arrived", c.rank());
            return Ok(());
        }
        let s = c.subset_with_context(&[0, 1], 300)?;
        let refused = |r: tandem_driver::Result<()>| {
            assert!(
                matches!(
                    r,
                    Err(Error::InvalidRank {
                        rank: 2 | 3,
                        size: 2
                    })
                ),
                "{r:?}"
            );
        };
        refused(s.send(b"stray", 2, 1));
        refused(s.send(b"stray", 3, 1));
        refused(s.recv(&mut [0u8; 8], 2, 1).map(|_| ()));
        refused(s.ssend(b"stray", 3, 1));
        let (mut a, mut b, mut r) = ([0u8; 8], [0u8; 8], [0u8; 8]);
        s.scope(|sc| {
            refused(sc.isend(b"stray", 2, 1).map(|_| ()));
            refused(sc.irecv(&mut r, 3, 1).map(|_| ()));
            refused(sc.send_init(&mut a, 2, 1).map(|_| ()));
            refused(sc.recv_init(&mut b, 3, 1).map(|_| ()));
            Ok::<_, Error>(())
        })??;
        // The subset still works between its own ranks.
        let mut got = [0u8; 2];
        let st = s.sendrecv(b"ok", 1 - s.rank(), 1, &mut got, 1 - s.rank(), 1)?;
        assert_eq!((&got, st.source), (b"ok", 1 - s.rank()));
        for dst in 2..4 {
            c.send(&[1], dst, 9)?;
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A receive on a revoked communicator fails with `Revoked` even when a
/// matching eager message of several lines waits at the head of its link
/// (the shortcut for such messages used to take it).
#[test]
fn a_receive_on_a_revoked_comm_takes_no_waiting_eager_message() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |c| {
        if c.rank() == 0 {
            c.send(&[7u8; 100], 1, 1)?;
            // Stay until rank 1 has tried (it revokes, so receive on
            // another communicator, of context 1).
            let d = c.dup_with_context(1)?;
            d.recv(&mut [0u8; 1], 1, 2)?;
            return Ok(());
        }
        // The 100 bytes wait on the link.
        std::thread::sleep(Duration::from_millis(200));
        c.revoke();
        let r = c.recv(&mut [0u8; 100], 0, 1).map(|s| s.len);
        assert_eq!(r, Err(Error::Revoked { context: 0 }));
        c.dup_with_context(1)?.send(&[1], 0, 2)?;
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A blocking probe on a communicator of some of the job's ranks that
/// waits for a message is no deadlock: the wait it publishes names the
/// world rank it waits for (it used to name the communicator's rank, which
/// the cycle search read as a world rank).
#[test]
fn a_probe_on_a_subset_is_not_taken_for_a_deadlock() {
    let out = Comm::threads(3, &Layout::default(), cfg(), |c| {
        match c.rank() {
            0 => {
                c.recv(&mut [0u8; 1], 2, 5)?;
            }
            1 => {
                let s = c.subset_with_context(&[1, 2], 300)?;
                std::thread::sleep(Duration::from_secs(2));
                s.send(b"x", 1, 7)?;
            }
            _ => {
                let s = c.subset_with_context(&[1, 2], 300)?;
                let st = s.probe(0, 7)?;
                assert_eq!(st.source, 0);
                s.recv(&mut [0u8; 1], 0, 7)?;
                c.send(b"y", 0, 5)?;
            }
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// `Request::test_all` names sources in the communicator's numbering.
#[test]
fn test_all_names_sources_in_the_communicators_numbering() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |c| {
        // World rank 1 is rank 0 here.
        let s = c.subset_with_context(&[1, 0], 300)?;
        if s.rank() == 0 {
            return s.send(b"x", 1, 1);
        }
        let mut b = [0u8; 1];
        s.scope(|sc| {
            let mut reqs = [sc.irecv(&mut b, ANY_SOURCE, 1)?];
            loop {
                if let Some(st) = tandem_driver::Request::test_all(&mut reqs)? {
                    assert_eq!(st[0].source, 0);
                    return Ok::<_, Error>(());
                }
            }
        })?
    });
    for r in out {
        r.unwrap();
    }
}

/// `Request::test_all` on a revoked communicator reports `Revoked`, as
/// `Request::test` does, rather than "not yet" for ever.
#[test]
fn test_all_reports_a_revocation() {
    let out = Comm::threads(1, &Layout::default(), cfg(), |c| {
        let mut b = [0u8; 4];
        c.scope(|s| {
            let mut reqs = [s.irecv(&mut b, 0, 7)?];
            c.revoke();
            for _ in 0..10_000 {
                match tandem_driver::Request::test_all(&mut reqs) {
                    Err(e) => {
                        assert_eq!(e, Error::Revoked { context: 0 });
                        return Ok(());
                    }
                    Ok(Some(_)) => panic!("completed"),
                    Ok(None) => {}
                }
            }
            panic!("test_all never reported the revocation");
        })?
    });
    for r in out {
        r.unwrap();
    }
}

/// `Request::wait_any` names a finished request's source in the numbering
/// of that request's own communicator, whichever request comes first in
/// the array.
#[test]
fn wait_any_names_sources_in_each_requests_communicator() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |c| {
        // World rank 1 is rank 0 here.
        let s = c.subset_with_context(&[1, 0], 300)?;
        if c.rank() == 1 {
            s.send(b"x", 1, 1)?;
            c.recv(&mut [0u8; 1], 0, 2)?;
            return Ok(());
        }
        let (mut a, mut b) = ([0u8; 1], [0u8; 1]);
        let r = c.scope(|wc| {
            s.scope(|sc| {
                let mut reqs = [
                    Some(wc.irecv(&mut a, 1, 99)?),
                    Some(sc.irecv(&mut b, ANY_SOURCE, 1)?),
                ];
                let (i, st) = tandem_driver::Request::wait_any(&mut reqs).expect("pending");
                assert_eq!((i, st?.source), (1, 0));
                let mut first = reqs[0].take().expect("still pending");
                assert!(first.cancel()?);
                Ok::<_, Error>(())
            })
        });
        // The scope that ends the cancelled request may report it.
        assert!(
            matches!(
                r,
                Ok(Ok(Ok(())))
                    | Ok(Ok(Err(Error::Cancelled)))
                    | Ok(Err(Error::Cancelled))
                    | Err(Error::Cancelled)
            ),
            "{r:?}"
        );
        c.send(&[1], 1, 2)?;
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A receive that times out on a communicator of some of the job's ranks
/// names the awaited rank in that communicator's numbering.
#[test]
fn a_timeout_on_a_subset_names_the_peer_in_its_numbering() {
    let cfg = cfg().timeout(Duration::from_millis(300));
    let out = Comm::threads(2, &Layout::default(), cfg, |c| {
        // World rank 1 is rank 0 here.
        let s = c.subset_with_context(&[1, 0], 300)?;
        if c.rank() == 1 {
            // Waits in nothing, so the receive below times out rather than
            // closing a cycle.
            std::thread::sleep(Duration::from_millis(1500));
            return Ok(());
        }
        match s.recv(&mut [0u8; 1], 0, 5) {
            Err(Error::Timeout { peer, .. }) => assert_eq!(peer, 0),
            other => panic!("{other:?}"),
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A blocking probe on a revoked communicator fails with `Revoked`, as a
/// receive does, even when a matching message is there.
#[test]
fn a_probe_on_a_revoked_comm_fails_even_with_a_message_there() {
    let out = Comm::threads(1, &Layout::default(), cfg(), |c| {
        c.send(b"here", 0, 3)?;
        assert_eq!(c.iprobe(0, 3)?.map(|s| s.len), Some(4), "it is there");
        c.revoke();
        assert_eq!(c.probe(0, 3), Err(Error::Revoked { context: 0 }));
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}
