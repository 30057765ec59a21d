//! In-process worlds (ranks as threads): deadlines, the proxy thread and
//! request scopes.

use std::time::{Duration, Instant};
use tandem_driver::{Comm, Config, Error, Layout, OpKind, Request};

fn cfg() -> Config {
    Config::from_env().unwrap()
}

#[test]
fn a_receive_nobody_answers_times_out_with_a_named_operation() {
    let out = Comm::threads(
        2,
        &Layout::default(),
        cfg().timeout(Duration::from_millis(300)),
        |comm| {
            if comm.rank() == 0 {
                let t = Instant::now();
                let mut b = [0u8; 8];
                let e = comm.recv(&mut b, 1, 42).unwrap_err();
                assert!(t.elapsed() >= Duration::from_millis(300));
                assert!(
                    matches!(
                        e,
                        Error::Timeout {
                            op: OpKind::Recv,
                            peer: 1,
                            tag: 42,
                            ..
                        }
                    ),
                    "{e}"
                );
                assert!(e.to_string().contains("recv from rank 1 tag 42"), "{e}");
            }
            Ok(())
        },
    );
    assert!(out.iter().all(|r| r.is_ok()));
}

#[test]
fn a_stuck_bulk_send_times_out_and_breaks_only_that_channel() {
    let out = Comm::threads(
        3,
        &Layout::default(),
        cfg().timeout(Duration::from_millis(300)),
        |comm| {
            match comm.rank() {
                0 => {
                    // Far more than the slot ring holds; rank 1 never receives.
                    let big = vec![1u8; 4 << 20];
                    let e = comm.send(&big, 1, 0).unwrap_err();
                    assert!(
                        matches!(
                            e,
                            Error::Timeout {
                                op: OpKind::Send,
                                peer: 1,
                                ..
                            }
                        ),
                        "{e}"
                    );
                    // The half-sent stream cannot continue...
                    assert!(matches!(
                        comm.send(b"x", 1, 0),
                        Err(Error::ChannelBroken { peer: 1, .. })
                    ));
                    // ...but other peers are unaffected.
                    comm.send(b"still fine", 2, 0)?;
                }
                2 => {
                    // Rank 0 spends one timeout on its stuck send first.
                    let mut b = [0u8; 10];
                    let mut tries = 0;
                    loop {
                        match comm.recv(&mut b, 0, 0) {
                            Err(Error::Timeout { .. }) if tries < 20 => tries += 1,
                            r => break r.map(|_| ())?,
                        };
                    }
                    assert_eq!(&b, b"still fine");
                }
                _ => {}
            }
            Ok(())
        },
    );
    for r in out {
        r.unwrap();
    }
}

#[test]
fn proxy_thread_drives_progress() {
    let c = cfg().proxy_core(Some(0));
    let out = Comm::threads(2, &Layout::default(), c, |comm| {
        let peer = 1 - comm.rank();
        let data = vec![comm.rank() as u8 + 1; 3 << 20];
        let mut got = vec![0u8; 3 << 20];
        for _ in 0..20 {
            comm.scope(|s| {
                let r = s.irecv(&mut got, peer, 0)?;
                let w = s.isend(&data, peer, 0)?;
                Request::wait_all([r, w])
            })??;
            let bad = got.iter().position(|&b| b != peer as u8 + 1);
            assert_eq!(bad, None, "rank {} got wrong bytes", comm.rank());
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

#[test]
fn leaked_and_dropped_requests_are_waited_for_at_scope_end() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |comm| {
        let peer = 1 - comm.rank();
        let data = vec![7u8; 1 << 20];
        let mut got = vec![0u8; 1 << 20];
        comm.scope(|s| {
            let r = s.irecv(&mut got, peer, 0).unwrap();
            let w = s.isend(&data, peer, 0).unwrap();
            // Leaking a request must be harmless: the scope still waits.
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(r);
            drop(w);
        })?;
        // The scope returned, so the receive is complete.
        assert!(got.iter().all(|&b| b == 7));
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

#[test]
fn test_polls_without_blocking() {
    let out = Comm::threads(2, &Layout::default(), cfg(), |comm| {
        let peer = 1 - comm.rank();
        if comm.rank() == 0 {
            let mut b = [0u8; 4];
            comm.scope(|s| {
                let mut r = s.irecv(&mut b, peer, 3)?;
                assert_eq!(r.test()?, None, "nothing sent yet");
                comm.send(b"go", peer, 9)?;
                loop {
                    if let Some(st) = r.test()? {
                        assert_eq!(st.len, 4);
                        break;
                    }
                }
                Ok::<_, Error>(())
            })??;
            assert_eq!(&b, b"done");
        } else {
            let mut g = [0u8; 2];
            comm.recv(&mut g, peer, 9)?;
            comm.send(b"done", peer, 3)?;
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

#[test]
fn a_panic_in_a_scope_withdraws_its_operations() {
    let out = Comm::threads(1, &Layout::default(), cfg(), |comm| {
        let mut b = vec![0u8; 16];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = comm.scope(|s| {
                let _r = s.irecv(&mut b, 0, 1).unwrap();
                panic!("user code failed");
            });
        }));
        assert!(r.is_err());
        drop(b);
        // The withdrawn receive must not take this message (its buffer is
        // gone); a new receive gets it.
        comm.send(b"after", 0, 1)?;
        let mut c = [0u8; 5];
        comm.recv(&mut c, 0, 1)?;
        assert_eq!(&c, b"after");
        Ok(())
    });
    out.into_iter().for_each(|r| r.unwrap());
}

/// A duplicate communicator moved to its own thread runs alongside the
/// original: the two share one engine, whose lock `dup` made atomic.
#[test]
fn a_dup_on_another_thread_runs_alongside_the_original() {
    let cfg = cfg().wait(tandem_driver::WaitPolicy::SHARED_CORES);
    let out = Comm::threads(2, &Layout::default(), cfg, |world| {
        let lib = world.dup()?;
        let peer = 1 - world.rank();
        let exchange = |c: &Comm, seed: u8, n: usize| -> tandem_driver::Result<()> {
            for i in 0..n {
                let out = [seed.wrapping_add(i as u8); 8];
                let big = vec![seed; 20_000];
                let mut back = [0u8; 8];
                let mut big_back = vec![0u8; 20_000];
                c.sendrecv(&out, peer, 1, &mut back, peer, 1)?;
                assert_eq!(back, out, "the peer echoes the same pattern");
                c.sendrecv(&big, peer, 2, &mut big_back, peer, 2)?;
                assert!(big_back == big);
            }
            Ok(())
        };
        std::thread::scope(|s| {
            let h = s.spawn(move || exchange(&lib, 100, 300));
            let mine = exchange(&world, 7, 300);
            let theirs = h.join().expect("dup thread");
            mine.and(theirs)
        })
    });
    for r in out {
        r.unwrap();
    }
}
