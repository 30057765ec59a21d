//! Point-to-point between real processes over shared memory.

mod common;
use common::{pattern, ranks};
use tandem_driver::{Error, Layout, Request};

fn boundary_sizes() -> Vec<usize> {
    let l = Layout::default();
    let (eager, slot) = (l.eager_limit as usize, l.slot_bytes as usize);
    let mut v = vec![0, 1, 39, 40, 41, 55, 56, 57, 63, 64, 65, 1000];
    v.extend([
        eager - 1,
        eager,
        eager + 1,
        slot - 1,
        slot,
        slot + 1,
        3 * slot + 7,
        8 << 20,
    ]);
    v
}

#[test]
fn sizes_byte_exact_both_directions() {
    ranks(2, "sizes_byte_exact_both_directions", |comm| {
        let peer = 1 - comm.rank();
        for (i, &n) in boundary_sizes().iter().enumerate() {
            let msg = pattern(n, i as u64);
            // A receive buffer larger than the message, with a canary.
            let mut buf = vec![0xAAu8; n + 64];
            if comm.rank() == 0 {
                comm.send(&msg, peer, i as u32).unwrap();
                let st = comm.recv(&mut buf, peer, i as u32).unwrap();
                assert_eq!(st.len, n);
            } else {
                let st = comm.recv(&mut buf, peer, i as u32).unwrap();
                assert_eq!((st.len, st.source, st.tag), (n, peer, i as u32));
                comm.send(&buf[..n], peer, i as u32).unwrap();
            }
            assert!(buf[..n] == msg[..], "size {n}: payload differs");
            assert!(
                buf[n..].iter().all(|&b| b == 0xAA),
                "size {n}: wrote past the message"
            );
        }
    });
}

/// Eager messages that travel in lines (up to the cell threshold), both
/// received as they come and found waiting (the receive's shortcuts read
/// them straight from the lines), with wildcard tags and too-small buffers
/// among them: every byte lands, nothing past the buffer, in order.
#[test]
fn messages_in_lines_arrive_whole_waited_for_or_waiting() {
    ranks(
        2,
        "messages_in_lines_arrive_whole_waited_for_or_waiting",
        |comm| {
            let mut sizes: Vec<usize> = (0..=300).collect();
            sizes.extend([447, 448, 449, 500, 1000, 1023]);
            for batch in sizes.chunks(12) {
                if comm.rank() == 0 {
                    for &n in batch {
                        comm.send(&pattern(n, n as u64), 1, n as u32 % 7).unwrap();
                    }
                    comm.recv(&mut [], 1, 99).unwrap();
                    continue;
                }
                // Every other batch waits until the messages are there.
                if batch[0] % 24 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                for &n in batch {
                    let want = pattern(n, n as u64);
                    let tag = if n % 2 == 1 {
                        tandem_driver::ANY_TAG
                    } else {
                        n as u32 % 7
                    };
                    let short = n > 0 && n % 5 == 0;
                    let cap = if short { n - 1 } else { n };
                    let mut buf = vec![0xAAu8; cap + 8];
                    match comm.recv(&mut buf[..cap], 0, tag) {
                        Ok(st) => {
                            assert!(!short, "size {n}: a too-small buffer took it");
                            assert_eq!((st.len, st.tag), (n, n as u32 % 7), "size {n}");
                        }
                        Err(Error::Truncated { needed, got, .. }) => {
                            assert!(short, "size {n}: truncated into a big enough buffer");
                            assert_eq!((needed, got), (n, cap), "size {n}");
                        }
                        Err(e) => panic!("size {n}: {e}"),
                    }
                    assert_eq!(buf[..cap], want[..cap], "size {n}: payload differs");
                    assert!(
                        buf[cap..].iter().all(|&b| b == 0xAA),
                        "size {n}: wrote past the buffer"
                    );
                }
                comm.send(&[], 0, 99).unwrap();
            }
        },
    );
}

#[test]
fn one_gib_message() {
    ranks(2, "one_gib_message", |comm| {
        let n = 1usize << 30;
        if comm.rank() == 0 {
            let msg: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            comm.send(&msg, 1, 5).unwrap();
        } else {
            let mut buf = vec![0u8; n];
            let st = comm.recv(&mut buf, 0, 5).unwrap();
            assert_eq!(st.len, n);
            let bad = buf
                .iter()
                .enumerate()
                .position(|(i, &b)| b != (i % 251) as u8);
            assert_eq!(bad, None, "first wrong byte");
        }
    });
}

#[test]
fn ten_thousand_messages_in_order() {
    ranks(2, "ten_thousand_messages_in_order", |comm| {
        let eager = Layout::default().eager_limit as usize;
        // Mostly small, every 97th one bulk: order must hold across both rings.
        let len = |i: u64| {
            if i % 97 == 0 {
                eager + 1 + (i as usize % 5000)
            } else {
                8 + (i as usize % 48)
            }
        };
        if comm.rank() == 0 {
            for i in 0..10_000u64 {
                let mut m = pattern(len(i), i);
                m[..8].copy_from_slice(&i.to_le_bytes());
                comm.send(&m, 1, 3).unwrap();
            }
        } else {
            let mut buf = vec![0u8; eager + 6000];
            for i in 0..10_000u64 {
                let st = comm.recv(&mut buf, 0, 3).unwrap();
                assert_eq!(
                    u64::from_le_bytes(buf[..8].try_into().unwrap()),
                    i,
                    "out of order"
                );
                assert_eq!(st.len, len(i));
                assert!(
                    buf[8..st.len] == pattern(len(i), i)[8..],
                    "message {i} corrupt"
                );
            }
        }
    });
}

#[test]
fn both_isend_then_irecv_do_not_deadlock() {
    ranks(2, "both_isend_then_irecv_do_not_deadlock", |comm| {
        let peer = 1 - comm.rank();
        // Larger than every ring, so neither send can finish alone.
        for &n in &[8usize, 64 << 10, 8 << 20] {
            let out = pattern(n, comm.rank() as u64);
            let mut inb = vec![0u8; n];
            let st = comm
                .scope(|s| {
                    let a = s.isend(&out, peer, 1)?;
                    let b = s.irecv(&mut inb, peer, 1)?;
                    Request::wait_all([a, b])
                })
                .unwrap()
                .unwrap();
            assert_eq!(st[1].len, n);
            assert!(inb == pattern(n, peer as u64));
        }
    });
}

#[test]
fn truncation_is_reported_and_next_message_is_intact() {
    ranks(
        2,
        "truncation_is_reported_and_next_message_is_intact",
        |comm| {
            let slot = Layout::default().slot_bytes as usize;
            let sizes = [100usize, 3 * slot + 5];
            if comm.rank() == 0 {
                for (i, &n) in sizes.iter().enumerate() {
                    comm.send(&pattern(n, i as u64), 1, 0).unwrap();
                    comm.send(b"next", 1, 0).unwrap();
                }
            } else {
                for (i, &n) in sizes.iter().enumerate() {
                    let mut small = vec![0u8; 10];
                    let e = comm.recv(&mut small, 0, 0).unwrap_err();
                    assert_eq!(
                        e,
                        Error::Truncated {
                            needed: n,
                            got: 10,
                            source: 0,
                            tag: 0
                        }
                    );
                    assert_eq!(small, pattern(n, i as u64)[..10]);
                    let mut next = [0u8; 16];
                    let st = comm.recv(&mut next, 0, 0).unwrap();
                    assert_eq!(&next[..st.len], b"next");
                }
            }
        },
    );
}

#[test]
fn receives_match_by_tag_out_of_arrival_order() {
    ranks(2, "receives_match_by_tag_out_of_arrival_order", |comm| {
        let big = 1 << 20;
        if comm.rank() == 1 {
            // A blocking send of the large (rendezvous) message would wait
            // for its receive, which rank 0 posts last: post all three.
            let data = pattern(big, 9);
            comm.scope(|s| {
                drop(s.isend(b"first", 0, 1).unwrap());
                drop(s.isend(&data, 0, 3).unwrap());
                drop(s.isend(b"second", 0, 2).unwrap());
            })
            .unwrap();
        } else {
            let mut b = [0u8; 16];
            let st = comm.recv(&mut b, 1, 2).unwrap();
            assert_eq!(&b[..st.len], b"second");
            let st = comm.recv(&mut b, 1, 1).unwrap();
            assert_eq!(&b[..st.len], b"first");
            let mut l = vec![0u8; big];
            comm.recv(&mut l, 1, 3).unwrap();
            assert!(l == pattern(big, 9));
        }
    });
}

#[test]
fn bad_arguments_are_errors() {
    ranks(2, "bad_arguments_are_errors", |comm| {
        assert_eq!(
            comm.send(b"x", 2, 0),
            Err(Error::InvalidRank { rank: 2, size: 2 })
        );
        let mut b = [0u8; 1];
        assert_eq!(
            comm.recv(&mut b, 7, 0).unwrap_err(),
            Error::InvalidRank { rank: 7, size: 2 }
        );
        // Still usable afterwards.
        let peer = 1 - comm.rank();
        comm.send(b"y", peer, 0).unwrap();
        comm.recv(&mut b, peer, 0).unwrap();
        assert_eq!(&b, b"y");
    });
}

#[test]
fn four_ranks_all_to_all() {
    ranks(4, "four_ranks_all_to_all", |comm| {
        let (me, n) = (comm.rank(), comm.size());
        let sizes = [8usize, 5000, 300_000];
        let outs: Vec<Vec<u8>> = (0..n * sizes.len())
            .map(|i| pattern(sizes[i % 3], (me * 100 + i) as u64))
            .collect();
        let mut ins: Vec<Vec<u8>> = (0..n * sizes.len())
            .map(|i| vec![0u8; sizes[i % 3]])
            .collect();
        comm.scope(|s| {
            let mut reqs = Vec::new();
            for (i, b) in ins.iter_mut().enumerate() {
                reqs.push(s.irecv(b, i / 3, (i % 3) as u32).unwrap());
            }
            for (i, b) in outs.iter().enumerate() {
                reqs.push(s.isend(b, i / 3, (i % 3) as u32).unwrap());
            }
            Request::wait_all_vec(reqs).unwrap();
        })
        .unwrap();
        for (i, b) in ins.iter().enumerate() {
            let src = i / 3;
            let j = me * 3 + i % 3;
            assert!(
                *b == pattern(sizes[i % 3], (src * 100 + j) as u64),
                "from {src}"
            );
        }
    });
}

/// A job file is checked before it is used: another job's id, another rank
/// count, or a file shorter than its header says (truncated: mapping it
/// whole would fault on the missing pages) is a `JobMismatch`; the right
/// one opens and names its job and size.
#[test]
fn a_truncated_or_foreign_job_file_is_refused() {
    use tandem_driver::transport::shm::map::JobMap;
    let job = 0x1234_5678_9abc_def1;
    let (file, path) = JobMap::create_file(job, 2, &Layout::default()).expect("job file");
    let _ = std::fs::remove_file(&path);
    let m = JobMap::open(&file, job, 2).expect("its own job file");
    assert_eq!((m.job(), m.nranks()), (job, 2));
    drop(m);
    let refused = |r: tandem_driver::Result<JobMap>| matches!(r, Err(Error::JobMismatch { .. }));
    assert!(refused(JobMap::open(&file, job ^ 2, 2)), "another job");
    assert!(refused(JobMap::open(&file, job, 3)), "another size");
    let len = file.metadata().expect("metadata").len();
    file.set_len(len - 4096).expect("truncate");
    assert!(refused(JobMap::open(&file, job, 2)), "truncated");
}
