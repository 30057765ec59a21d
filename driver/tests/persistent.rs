//! Persistent requests (`Scope::send_init` / `recv_init`, `start`, `wait`,
//! `test`, and the blocking `send` / `recv`): MPI's ordering against
//! ordinary traffic to the same peer and tag, wildcards on the other side,
//! eager and rendezvous sizes, truncation, misuse, a dead peer.

mod common;
use std::time::{Duration, Instant};
use tandem_driver::{Comm, Config, Error, Layout, ANY_SOURCE, ANY_TAG};

fn cfg() -> Config {
    let mut c = Config::default();
    c.wait.spin = 200;
    c.timeout = Duration::from_secs(60);
    c
}

fn on_threads(n: usize, f: impl Fn(Comm) -> tandem_driver::Result<()> + Sync) {
    for (r, res) in Comm::threads(n, &Layout::default(), cfg(), f)
        .into_iter()
        .enumerate()
    {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

/// Message `i` of a sequence: its number, then a pattern, `len` bytes.
fn msg(i: u64, len: usize) -> Vec<u8> {
    let mut m = common::pattern(len.max(8), i);
    m[..8].copy_from_slice(&i.to_le_bytes());
    m.truncate(len.max(8));
    m
}

fn number(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

#[test]
fn persistent_and_ordinary_sends_to_one_peer_and_tag_arrive_in_order() {
    // Rank 0 mixes persistent sends (blocking form, and start + wait) with
    // ordinary blocking and non-blocking sends, all to rank 1 with tag 5;
    // rank 1 mixes a persistent receive (both forms) with ordinary
    // receives. Whatever the mix, message i is the i-th received. Sizes
    // cover one line, several lines and rendezvous.
    for len in [8, 24, 200, 8192, 100_000] {
        on_threads(2, move |comm| {
            let n = 300u64;
            let mut pbuf = vec![0u8; len];
            if comm.rank() == 0 {
                comm.scope(|s| {
                    let mut p = s.send_init(&mut pbuf, 1, 5)?;
                    for i in 0..n {
                        let m = msg(i, len);
                        match i % 4 {
                            0 => {
                                p.buf_mut().unwrap().copy_from_slice(&m);
                                p.send()?;
                            }
                            1 => {
                                p.buf_mut().unwrap().copy_from_slice(&m);
                                p.start()?;
                                assert!(p.buf_mut().is_none(), "rewritable while started");
                                p.wait()?;
                            }
                            2 => comm.send(&m, 1, 5)?,
                            _ => {
                                comm.scope(|t| t.isend(&m, 1, 5)?.wait())??;
                            }
                        }
                    }
                    Ok::<_, Error>(())
                })??;
            } else {
                comm.scope(|s| {
                    let mut p = s.recv_init(&mut pbuf, 0, 5)?;
                    let mut other = vec![0u8; len];
                    for i in 0..n {
                        let got = match i % 3 {
                            0 => {
                                let st = p.recv()?;
                                assert_eq!((st.source, st.tag, st.len), (0, 5, len));
                                p.data().unwrap().to_vec()
                            }
                            1 => {
                                p.start()?;
                                assert!(p.data().is_none(), "readable while started");
                                let st = p.wait()?;
                                assert_eq!(st.len, len);
                                p.data().unwrap().to_vec()
                            }
                            _ => {
                                comm.recv(&mut other, 0, 5)?;
                                other.clone()
                            }
                        };
                        assert_eq!(number(&got), i, "len {len}: out of order");
                        assert_eq!(got, msg(i, len), "len {len}: message {i} corrupted");
                    }
                    Ok::<_, Error>(())
                })??;
            }
            Ok(())
        });
    }
}

#[test]
fn a_started_persistent_receive_matches_before_receives_posted_after_it() {
    // A persistent receive started before an ordinary receive of the same
    // source and tag takes the first message, even when both messages are
    // there before either is waited for, and even if the later one is
    // waited for first.
    on_threads(2, |comm| {
        if comm.rank() == 0 {
            for round in 0..50u64 {
                comm.recv(&mut [0u8; 1], 1, 9)?; // ready
                comm.send(&msg(2 * round, 8), 1, 3)?;
                comm.send(&msg(2 * round + 1, 8), 1, 3)?;
            }
        } else {
            let mut pbuf = [0u8; 8];
            let mut later = [0u8; 8];
            comm.scope(|s| {
                let mut p = s.recv_init(&mut pbuf, 0, 3)?;
                for round in 0..50u64 {
                    p.start()?;
                    s.comm().scope(|t| {
                        let r = t.irecv(&mut later, 0, 3)?;
                        comm.send(&[1], 0, 9)?;
                        let st = r.wait()?;
                        assert_eq!(st.len, 8);
                        Ok::<_, Error>(())
                    })??;
                    let st = if round % 2 == 0 {
                        p.wait()?
                    } else {
                        loop {
                            if let Some(st) = p.test()? {
                                break st;
                            }
                        }
                    };
                    assert_eq!(st.len, 8);
                    assert_eq!(number(p.data().unwrap()), 2 * round);
                    assert_eq!(number(&later), 2 * round + 1);
                }
                Ok::<_, Error>(())
            })??;
        }
        Ok(())
    });
}

#[test]
fn wildcards_on_either_side_of_persistent_requests() {
    // Ranks 1 and 2 send with persistent sends to rank 0, which receives
    // with wildcards (ordinary receives with ANY_SOURCE and ANY_TAG, then
    // a persistent receive with both wildcards); per sender the order
    // holds, and statuses name the real source and tag.
    on_threads(3, |comm| {
        let n = 200u64;
        if comm.rank() == 0 {
            let mut next = [0u64; 3];
            let mut pbuf = [0u8; 16];
            comm.scope(|s| {
                let mut any = s.recv_init(&mut pbuf, ANY_SOURCE, ANY_TAG)?;
                for k in 0..2 * n {
                    let (st, got) = if k % 2 == 0 {
                        let mut b = [0u8; 16];
                        let st = comm.recv(&mut b, ANY_SOURCE, ANY_TAG)?;
                        (st, b.to_vec())
                    } else {
                        let st = any.recv()?;
                        (st, any.data().unwrap().to_vec())
                    };
                    assert!(st.source == 1 || st.source == 2);
                    assert_eq!(st.tag as usize, 10 + st.source);
                    assert_eq!(st.len, 16);
                    assert_eq!(number(&got), next[st.source], "from {}", st.source);
                    next[st.source] += 1;
                }
                Ok::<_, Error>(())
            })??;
            assert_eq!(next, [0, n, n]);
        } else {
            let r = comm.rank();
            let mut pbuf = [0u8; 16];
            comm.scope(|s| {
                let mut p = s.send_init(&mut pbuf, 0, 10 + r as u32)?;
                for i in 0..n {
                    p.buf_mut().unwrap().copy_from_slice(&msg(i, 16));
                    if i % 2 == 0 {
                        p.send()?;
                    } else {
                        p.start()?;
                        while !p.test()? {}
                    }
                }
                Ok::<_, Error>(())
            })??;
        }
        Ok(())
    });
}

#[test]
fn a_truncated_persistent_receive_errs_and_the_next_message_is_intact() {
    on_threads(2, |comm| {
        if comm.rank() == 0 {
            for len in [20, 4000, 50_000] {
                comm.send(&msg(1, len), 1, 0)?;
                comm.send(&msg(2, 8), 1, 0)?;
            }
        } else {
            let mut small = [0u8; 12];
            comm.scope(|s| {
                let mut p = s.recv_init(&mut small, 0, 0)?;
                for (k, len) in [20usize, 4000, 50_000].into_iter().enumerate() {
                    let r = if k % 2 == 0 {
                        p.recv()
                    } else {
                        p.start()?;
                        p.wait()
                    };
                    match r {
                        Err(Error::Truncated { needed, got }) => {
                            assert_eq!((needed, got), (len, 12))
                        }
                        other => panic!("len {len}: expected truncation, got {other:?}"),
                    }
                    assert_eq!(p.data().unwrap(), &msg(1, len)[..12]);
                    let st = p.recv()?;
                    assert_eq!(st.len, 8);
                    assert_eq!(number(p.data().unwrap()), 2);
                }
                Ok::<_, Error>(())
            })??;
        }
        Ok(())
    });
}

#[test]
fn misuse_of_persistent_requests_is_a_clear_error() {
    on_threads(2, |comm| {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        let (mut c, mut d) = ([0u8; 1], [0u8; 1]);
        comm.scope(|s| {
            assert!(matches!(
                s.send_init(&mut c, 2, 0),
                Err(Error::InvalidRank { rank: 2, size: 2 })
            ));
            assert!(matches!(
                s.recv_init(&mut d, 0, u32::MAX - 5),
                Err(Error::InvalidTag { .. })
            ));
            let mut tx = s.send_init(&mut a, 1 - comm.rank(), 1)?;
            let mut rx = s.recv_init(&mut b, 1 - comm.rank(), 1)?;
            assert!(matches!(tx.wait(), Err(Error::InvalidArgument(_))));
            assert!(matches!(rx.test(), Err(Error::InvalidArgument(_))));
            rx.start()?;
            assert!(rx.is_active());
            assert!(matches!(rx.start(), Err(Error::InvalidArgument(_))));
            assert!(matches!(rx.recv(), Err(Error::InvalidArgument(_))));
            tx.start()?;
            assert!(matches!(tx.start(), Err(Error::InvalidArgument(_))));
            assert!(matches!(tx.send(), Err(Error::InvalidArgument(_))));
            tx.wait()?;
            rx.wait()?;
            assert!(!rx.is_active() && !tx.is_active());
            // Dropped while started: the scope's end waits for both.
            tx.start()?;
            rx.start()?;
            Ok::<_, Error>(())
        })??;
        Ok(())
    });
}

#[test]
fn a_persistent_receive_from_a_dead_peer_is_peer_lost_within_the_deadline() {
    let name = "a_persistent_receive_from_a_dead_peer_is_peer_lost_within_the_deadline";
    if !common::is_rank() {
        let o = common::launcher(2, name)
            .env("TANDEM_TIMEOUT", "30")
            .run()
            .expect("launch");
        assert_eq!(o.code(), 0, "a rank failed: exit codes {:?}", o.codes);
        return;
    }
    let comm = Comm::from_env().expect("join the job");
    let mut buf = [0u8; 8];
    if comm.rank() == 1 {
        // Ten messages, then gone without a word.
        comm.scope(|s| {
            let mut p = s.send_init(&mut buf, 0, 4)?;
            for i in 0..10u64 {
                p.buf_mut().unwrap().copy_from_slice(&i.to_le_bytes());
                p.send()?;
            }
            Ok::<_, Error>(())
        })
        .and_then(|r| r)
        .expect("sends");
        std::process::exit(0);
    }
    let t0 = Instant::now();
    let r = comm.scope(|s| {
        let mut p = s.recv_init(&mut buf, 1, 4)?;
        for i in 0..10u64 {
            // Every message the peer sent before dying is still delivered.
            if i % 2 == 0 {
                p.recv()?;
            } else {
                p.start()?;
                p.wait()?;
            }
            assert_eq!(number(p.data().unwrap()), i);
        }
        p.start()?;
        Ok::<_, Error>(p.wait().err())
    });
    match r {
        Ok(Ok(Some(Error::PeerLost { rank: 1 }))) => {}
        other => panic!("expected PeerLost from rank 1, got {other:?}"),
    }
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    // The blocking form reports the loss the same way.
    let mut again = [0u8; 8];
    let r = comm.scope(|s| s.recv_init(&mut again, 1, 4)?.recv());
    assert!(
        matches!(r, Ok(Err(Error::PeerLost { rank: 1 }))),
        "blocking form: {r:?}"
    );
}
