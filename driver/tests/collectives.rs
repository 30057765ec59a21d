//! Collectives against a sequential reference: 1–8 ranks (threads, and
//! processes over real shared memory and over TCP), every operation, every
//! element type and reduction, sizes 0, 1, odd, not divisible by the rank
//! count, both algorithms; in place; non-blocking collectives interleaved
//! with each other and with point-to-point traffic; bad arguments; a rank
//! that dies mid-collective.

mod common;
use std::time::{Duration, Instant};
use tandem_driver::{
    bf16, f16, Algorithm, Collective, Comm, Config, Element, Error, Layout, Links, ReduceOp,
    ANY_SOURCE,
};

/// Small-integer test values: exact in every type, so float sums match.
trait Val: Element {
    fn of(x: i64) -> Self;
}
macro_rules! val {
    ($($t:ty),*) => {$(impl Val for $t { fn of(x: i64) -> Self { x as $t } })*};
}
val!(u8, i8, i32, u32, i64, u64, f32, f64);
impl Val for f16 {
    fn of(x: i64) -> Self {
        f16::from_f32(x as f32)
    }
}
impl Val for bf16 {
    fn of(x: i64) -> Self {
        bf16::from_f32(x as f32)
    }
}

/// Rank `r`'s element `i`: small, varied, with ties for min/max.
fn input(r: usize, i: usize) -> i64 {
    ((r * 3 + i * 5) % 7) as i64 + 1
}

fn reference(op: ReduceOp, n: usize, i: usize) -> i64 {
    let xs = (0..n).map(|r| input(r, i));
    match op {
        ReduceOp::Sum => xs.sum(),
        ReduceOp::Prod => xs.product(),
        ReduceOp::Min => xs.min().unwrap(),
        ReduceOp::Max => xs.max().unwrap(),
        ReduceOp::BitAnd => xs.reduce(|a, b| a & b).unwrap(),
        ReduceOp::BitOr => xs.reduce(|a, b| a | b).unwrap(),
        ReduceOp::BitXor => xs.reduce(|a, b| a ^ b).unwrap(),
    }
}

/// Products of up to 8 values up to 7 exceed 8-bit and 16-bit floats'
/// exact range; those are checked with `sum`, `min`, `max` only.
fn ops_for<T: Element>() -> Vec<ReduceOp> {
    let d = T::DTYPE;
    ReduceOp::ALL
        .into_iter()
        .filter(|o| {
            d.is_integer() || !matches!(o, ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor)
        })
        .filter(|o| *o != ReduceOp::Prod || d.size() >= 4)
        .collect()
}

/// Wraps like the type does (for u8/i8 sums and products).
fn wrap<T: Val>(x: i64) -> T {
    match T::DTYPE {
        tandem_driver::Dtype::U8 => T::of(x.rem_euclid(256)),
        tandem_driver::Dtype::I8 => T::of(((x + 128).rem_euclid(256)) - 128),
        _ => T::of(x),
    }
}

fn all_collectives<T: Val>(comm: &Comm, count: usize) -> tandem_driver::Result<()> {
    let (n, r) = (comm.size(), comm.rank());
    let mine: Vec<T> = (0..count).map(|i| T::of(input(r, i))).collect();
    for op in ops_for::<T>() {
        let want: Vec<T> = (0..count).map(|i| wrap(reference(op, n, i))).collect();
        let mut out = vec![T::of(0); count];
        comm.allreduce(&mine, &mut out, op)?;
        assert_eq!(
            out,
            want,
            "allreduce {op} {:?} n={n} count={count}",
            T::DTYPE
        );
        let mut buf = mine.clone();
        comm.allreduce_in_place(&mut buf, op)?;
        assert_eq!(buf, want, "allreduce_in_place {op}");
        let root = count % n;
        let mut out = vec![T::of(0); if r == root { count } else { 0 }];
        comm.reduce(&mine, &mut out, op, root)?;
        if r == root {
            assert_eq!(out, want, "reduce {op} root {root}");
        }
        let mut buf = mine.clone();
        comm.reduce_in_place(&mut buf, op, root)?;
        assert_eq!(
            buf,
            if r == root {
                want.clone()
            } else {
                mine.clone()
            },
            "reduce_in_place {op}"
        );
        // reduce_scatter: blocks of `count` from n*count inputs
        let big: Vec<T> = (0..n * count).map(|i| T::of(input(r, i))).collect();
        let mut out = vec![T::of(0); count];
        comm.reduce_scatter(&big, &mut out, op)?;
        let want_rs: Vec<T> = (0..count)
            .map(|i| wrap(reference(op, n, r * count + i)))
            .collect();
        assert_eq!(out, want_rs, "reduce_scatter {op}");
        let mut buf = big.clone();
        comm.reduce_scatter_in_place(&mut buf, op)?;
        assert_eq!(
            &buf[r * count..(r + 1) * count],
            &want_rs[..],
            "reduce_scatter_in_place {op}"
        );
    }
    let root = (count + 1) % n;
    let mut buf = if r == root {
        mine.clone()
    } else {
        vec![T::of(0); count]
    };
    comm.broadcast(&mut buf, root)?;
    let theirs: Vec<T> = (0..count).map(|i| T::of(input(root, i))).collect();
    assert_eq!(buf, theirs, "broadcast");
    let mut out = vec![T::of(0); n * count];
    comm.allgather(&mine, &mut out)?;
    let want: Vec<T> = (0..n)
        .flat_map(|q| (0..count).map(move |i| T::of(input(q, i))))
        .collect();
    assert_eq!(out, want, "allgather");
    let mut buf = vec![T::of(0); n * count];
    buf[r * count..(r + 1) * count].copy_from_slice(&mine);
    comm.allgather_in_place(&mut buf)?;
    assert_eq!(buf, want, "allgather_in_place");
    // alltoall: rank r sends block q = its elements q*count.. to rank q
    let send: Vec<T> = (0..n * count).map(|i| T::of(input(r, i))).collect();
    let mut out = vec![T::of(0); n * count];
    comm.alltoall(&send, &mut out)?;
    for q in 0..n {
        let want: Vec<T> = (0..count).map(|i| T::of(input(q, r * count + i))).collect();
        assert_eq!(
            &out[q * count..(q + 1) * count],
            &want[..],
            "alltoall from {q}"
        );
    }
    comm.barrier()?;
    Ok(())
}

fn every_type(comm: &Comm, count: usize) -> tandem_driver::Result<()> {
    all_collectives::<u8>(comm, count)?;
    all_collectives::<i8>(comm, count)?;
    all_collectives::<i32>(comm, count)?;
    all_collectives::<u32>(comm, count)?;
    all_collectives::<i64>(comm, count)?;
    all_collectives::<u64>(comm, count)?;
    all_collectives::<f16>(comm, count)?;
    all_collectives::<bf16>(comm, count)?;
    all_collectives::<f32>(comm, count)?;
    all_collectives::<f64>(comm, count)
}

/// Spin briefly, then yield: more ranks than cores.
fn cfg() -> Config {
    let mut c = Config::default();
    c.wait.spin = 200;
    c.timeout = Duration::from_secs(60);
    c
}

fn force(comm: &Comm, a: Algorithm) {
    for c in Collective::ALL {
        comm.set_algorithm(c, Some(a));
    }
}

fn on_threads(n: usize, f: impl Fn(Comm) -> tandem_driver::Result<()> + Sync) {
    on_links(n, Links::Shm, cfg(), "", f);
}

/// Runs `f` on `n` ranks connected as `links` say, with `c`; a rank's error
/// fails the test, named with `what`.
fn on_links(
    n: usize,
    links: Links,
    c: Config,
    what: &str,
    f: impl Fn(Comm) -> tandem_driver::Result<()> + Sync,
) {
    for (r, res) in Comm::threads_on(n, links, &Layout::default(), c, f)
        .into_iter()
        .enumerate()
    {
        res.unwrap_or_else(|e| panic!("{what} rank {r}: {e}"));
    }
}

#[test]
fn every_collective_type_and_op_on_1_to_8_ranks() {
    for n in 1..=8 {
        on_threads(n, |comm| {
            for count in [0, 1, 7, 13] {
                every_type(&comm, count)?;
            }
            Ok(())
        });
    }
}

#[test]
fn both_algorithms_and_pipelined_sizes() {
    // Sizes around the chunk and not divisible by the rank count, through
    // both algorithms.
    for algo in [Algorithm::Ring, Algorithm::Tree] {
        for n in [2, 3, 5] {
            on_threads(n, |comm| {
                force(&comm, algo);
                // Small chunks: many slices over three lanes.
                comm.set_pipeline(4096, 3)?;
                for count in [1, 4097, 100_003] {
                    all_collectives::<f32>(&comm, count)?;
                    all_collectives::<i64>(&comm, count)?;
                }
                Ok(())
            });
        }
    }
}

#[test]
fn results_are_bitwise_identical_on_every_rank_and_run() {
    // Non-integer floats whose sum depends on the order: every rank must
    // hold the same bits, and a second run the same bits again.
    for algo in [Algorithm::Ring, Algorithm::Tree] {
        for n in [3, 4, 7] {
            let run = || -> Vec<Vec<u32>> {
                Comm::threads(n, &Layout::default(), cfg(), |comm| {
                    force(&comm, algo);
                    let mine: Vec<f32> = (0..5000)
                        .map(|i| ((comm.rank() * 7919 + i * 104_729) % 1000) as f32 * 1e-3 + 1e-7)
                        .collect();
                    let mut out = vec![0f32; mine.len()];
                    comm.allreduce(&mine, &mut out, ReduceOp::Sum)?;
                    Ok(out.iter().map(|x| x.to_bits()).collect())
                })
                .into_iter()
                .map(|r| r.unwrap())
                .collect()
            };
            let a = run();
            assert!(
                a.iter().all(|o| o == &a[0]),
                "{algo:?} n={n}: ranks disagree"
            );
            assert_eq!(a, run(), "{algo:?} n={n}: runs disagree");
        }
    }
}

#[test]
fn nonblocking_collectives_interleave_with_each_other_and_point_to_point() {
    on_threads(4, |comm| {
        let (n, r) = (comm.size(), comm.rank());
        let a: Vec<i32> = (0..1000).map(|i| (r * 1000 + i) as i32).collect();
        let b: Vec<f64> = vec![r as f64 + 0.5; 300_000];
        let mut sum_a = vec![0i32; 1000];
        let mut max_b = vec![0f64; 300_000];
        let mut gathered = vec![0u8; n * 3];
        let mut bc = vec![0u64; 50];
        if r == 2 {
            bc.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = i as u64 * 3);
        }
        let msg = [r as u8; 64];
        let mut got = [0u8; 64];
        let next = (r + 1) % n;
        let prev = (r + n - 1) % n;
        let mine = [r as u8; 3];
        comm.scope(|s| {
            let c1 = s.iallreduce(&a, &mut sum_a, ReduceOp::Sum)?;
            let p_recv = s.irecv(&mut got, ANY_SOURCE, 9)?;
            let c2 = s.iallreduce(&b, &mut max_b, ReduceOp::Max)?;
            let c3 = s.iallgather(&mine, &mut gathered)?;
            let p_send = s.isend(&msg, next, 9)?;
            let c4 = s.ibroadcast(&mut bc, 2)?;
            // Wait in an order unrelated to the start order; the
            // point-to-point waits advance the collectives too.
            let st = p_recv.wait()?;
            assert_eq!(st.source, prev);
            c4.wait()?;
            c2.wait()?;
            let mut c1 = c1;
            while c1.test()?.is_none() {}
            p_send.wait()?;
            drop(c3); // the scope's end waits for it
            Ok::<_, Error>(())
        })??;
        for (i, x) in sum_a.iter().enumerate() {
            assert_eq!(*x, (0..n).map(|q| (q * 1000 + i) as i32).sum::<i32>());
        }
        assert!(max_b.iter().all(|x| *x == n as f64 - 0.5));
        assert_eq!(
            gathered,
            (0..n).flat_map(|q| [q as u8; 3]).collect::<Vec<_>>()
        );
        assert!(bc.iter().enumerate().all(|(i, x)| *x == i as u64 * 3));
        assert_eq!(got, [prev as u8; 64]);
        // User traffic with any tag never matches collective traffic.
        let mut x = [0u8; 1];
        if r == 0 {
            comm.send(&[42], 1, 0)?;
        }
        let mut y = [0i32; 1];
        comm.allreduce(&[1], &mut y, ReduceOp::Sum)?;
        assert_eq!(y[0], n as i32);
        if r == 1 {
            comm.recv(&mut x, ANY_SOURCE, tandem_driver::ANY_TAG)?;
            assert_eq!(x[0], 42);
        }
        Ok(())
    });
}

#[test]
fn bad_arguments_are_clear_errors() {
    on_threads(3, |comm| {
        let mut out = [0f32; 2];
        let e = comm
            .allreduce(&[1.0f32; 3], &mut out, ReduceOp::Sum)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let e = comm
            .allreduce(&[1.0f32; 2], &mut out, ReduceOp::BitXor)
            .unwrap_err();
        assert!(
            e.to_string().contains("bxor does not apply to float"),
            "{e}"
        );
        let e = comm.broadcast(&mut out, 3).unwrap_err();
        assert!(matches!(e, Error::InvalidRank { rank: 3, size: 3 }), "{e}");
        let mut big = [0u8; 7];
        assert!(matches!(
            comm.allgather(&[1u8, 2], &mut big),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            comm.alltoall(&[1u8; 7], &mut big),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            comm.reduce_scatter(&[1u8; 7], &mut [0u8; 2], ReduceOp::Sum),
            Err(Error::InvalidArgument(_))
        ));
        // Nothing was started: the next collective still works everywhere.
        let mut s = [0u64];
        comm.allreduce(&[comm.rank() as u64], &mut s, ReduceOp::Sum)?;
        assert_eq!(s[0], 3);
        Ok(())
    });
}

#[test]
fn mismatched_counts_are_reported_not_corrupting() {
    let mut c = cfg();
    c.timeout = Duration::from_secs(3);
    let out = Comm::threads(2, &Layout::default(), c, |comm| {
        // Two good calls first: the report names the third by its number.
        let mut two = [0i32; 2];
        comm.allreduce(&[1, 2], &mut two, ReduceOp::Sum)?;
        comm.allreduce(&[1, 2], &mut two, ReduceOp::Sum)?;
        let n = if comm.rank() == 0 { 4 } else { 8 };
        let mut out = vec![0i32; n];
        comm.allreduce(&vec![1i32; n], &mut out, ReduceOp::Sum)
    });
    assert!(
        out.iter()
            .any(|r| matches!(r, Err(Error::Mismatch { parameter, .. })
            if parameter == "the element count of allreduce #3")),
        "{out:?}"
    );
    assert!(out.iter().all(|r| r.is_err()), "{out:?}");
}

#[test]
fn collectives_over_tcp_and_mixed_links() {
    for links in [Links::Tcp, Links::Mixed { hosts: 2 }] {
        let res = Comm::threads_on(4, links, &Layout::default(), cfg(), |comm| {
            every_type(&comm, 5)?;
            all_collectives::<f32>(&comm, 70_001)
        });
        for (r, x) in res.into_iter().enumerate() {
            x.unwrap_or_else(|e| panic!("{links:?} rank {r}: {e}"));
        }
    }
}

#[test]
fn processes_over_shared_memory() {
    let name = "processes_over_shared_memory";
    if !common::is_rank() {
        // More ranks than cores: yield early.
        for n in [1, 2, 5, 8] {
            let o = common::launcher(n, name)
                .env("TANDEM_SPIN", "50")
                .run()
                .expect("launch");
            assert_eq!(o.code(), 0, "{n} ranks: exit codes {:?}", o.codes);
        }
        return;
    }
    let comm = Comm::from_env().expect("join the job");
    every_type(&comm, 3).unwrap();
    all_collectives::<f32>(&comm, 200_001).unwrap();
    comm.set_pipeline(8192, 3).unwrap();
    all_collectives::<i32>(&comm, 50_001).unwrap();
}

#[test]
fn a_quarter_gib_allreduce() {
    // 256 MiB of f32 per rank, two rank processes; one run.
    common::ranks(2, "a_quarter_gib_allreduce", |comm| {
        let count = 64 << 20;
        let r = comm.rank();
        let mine: Vec<f32> = (0..count).map(|i| ((i + r) % 1024) as f32).collect();
        let mut out = vec![0f32; count];
        comm.allreduce(&mine, &mut out, ReduceOp::Sum).unwrap();
        let bad = (0..count)
            .filter(|&i| out[i] != ((i % 1024) + ((i + 1) % 1024)) as f32)
            .count();
        assert_eq!(bad, 0, "{bad} wrong elements");
    });
}

#[test]
fn a_dead_rank_fails_every_survivor_within_the_deadline() {
    // Rank 2 of 4 exits in the middle of a run of allreduces; every
    // survivor must return an error well before a hang would.
    let name = "a_dead_rank_fails_every_survivor_within_the_deadline";
    if !common::is_rank() {
        let o = common::launcher(4, name)
            .env("TANDEM_TIMEOUT", "10")
            .run()
            .expect("launch");
        assert_eq!(o.code(), 0, "a rank failed: exit codes {:?}", o.codes);
        return;
    }
    {
        let comm = Comm::from_env().expect("join the job");
        let r = comm.rank();
        let mine = vec![1f32; 1 << 18];
        let mut out = vec![0f32; 1 << 18];
        let t0 = Instant::now();
        for i in 0..1000 {
            if r == 2 && i == 3 {
                std::process::exit(0);
            }
            if let Err(e) = comm.allreduce(&mine, &mut out, ReduceOp::Sum) {
                assert!(i >= 3, "rank {r} failed early: {e}");
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "took {:?}",
                    t0.elapsed()
                );
                eprintln!("rank {r}: {e}");
                return;
            }
        }
        panic!("rank {r}: every allreduce succeeded with a dead rank");
    }
}

#[test]
fn blocking_collectives_while_others_run_agree_with_ranks_that_run_them_alone() {
    // A blocking collective runs inline when no other collective of the
    // communicator is in flight, and through the table otherwise: ranks
    // that differ in that must still meet. Here odd ranks call the blocking
    // ones while a non-blocking collective of theirs still runs.
    for n in [2, 3, 4] {
        on_threads(n, |comm| {
            let r = comm.rank();
            for round in 0..50 {
                let mine = [r as u64 + round, 1];
                let mut a = [0u64; 2];
                let mut b = [0f32; 3];
                let mut c = vec![0u8; n];
                comm.scope(|s| {
                    let req = s.iallreduce(&mine, &mut a, ReduceOp::Sum)?;
                    if r % 2 == 0 {
                        req.wait()?;
                    }
                    comm.allreduce(&[1.0, r as f32, 2.0], &mut b, ReduceOp::Max)?;
                    comm.allgather(&[r as u8], &mut c)?;
                    let mut d = [r as u32; 4];
                    comm.broadcast(&mut d, n - 1)?;
                    assert_eq!(d, [(n - 1) as u32; 4]);
                    let mut e = [0i64; 2];
                    comm.reduce(&[r as i64, 1], &mut e, ReduceOp::Sum, 0)?;
                    if r == 0 {
                        assert_eq!(e, [(0..n as i64).sum::<i64>(), n as i64]);
                    }
                    comm.barrier()
                })??;
                let sum: u64 = (0..n as u64).map(|q| q + round).sum();
                assert_eq!(a, [sum, n as u64]);
                assert_eq!(b, [1.0, (n - 1) as f32, 2.0]);
                assert_eq!(c, (0..n as u8).collect::<Vec<_>>());
            }
            Ok(())
        });
    }
}

#[test]
fn typed_point_to_point() {
    on_threads(2, |comm| {
        let peer = 1 - comm.rank();
        let mine: Vec<u64> = (0..1000).map(|i| i * 3 + comm.rank() as u64).collect();
        let mut theirs = vec![0u64; 1000];
        let mut halves = [f16::ZERO; 5];
        comm.scope(|s| {
            let r = s.irecv_typed(&mut theirs, peer, 1)?;
            s.isend_typed(&mine, peer, 1)?.wait()?;
            assert_eq!(r.wait()?.len, 8000);
            Ok::<_, Error>(())
        })??;
        assert!(theirs
            .iter()
            .enumerate()
            .all(|(i, x)| *x == i as u64 * 3 + peer as u64));
        if comm.rank() == 0 {
            comm.ssend_typed(&[f16::from_f32(0.5); 5], 1, 2)?;
        } else {
            comm.recv_typed(&mut halves, 0, 2)?;
            assert_eq!(halves, [f16::from_f32(0.5); 5]);
        }
        Ok(())
    });
}

/// A collective refused on one rank leaves no trace: README promises that
/// bad arguments are refused before anything is sent, whatever the rank
/// count, the size or the form (blocking, in place, non-blocking). Rank 0
/// alone makes each bad call; every rank then runs a valid collective,
/// which must agree (a refused call that took a collective number would
/// put rank 0 one number ahead and deadlock or time out).
#[test]
fn a_collective_refused_on_one_rank_leaves_no_trace() {
    type Bad = fn(&Comm, usize) -> tandem_driver::Result<()>;
    // (what, the call); `m` elements: small (the direct paths) and large.
    let bad: [(&str, Bad); 16] = [
        ("allreduce bxor f32", |c, m| {
            c.allreduce(&vec![1f32; m], &mut vec![0f32; m], ReduceOp::BitXor)
        }),
        ("allreduce_in_place band f64", |c, m| {
            c.allreduce_in_place(&mut vec![1f64; m], ReduceOp::BitAnd)
        }),
        ("allreduce lengths", |c, m| {
            c.allreduce(&vec![1u32; m], &mut vec![0u32; m + 1], ReduceOp::Sum)
        }),
        ("reduce bor f32", |c, m| {
            c.reduce(&vec![1f32; m], &mut vec![0f32; m], ReduceOp::BitOr, 0)
        }),
        ("reduce bor f32, another root", |c, m| {
            c.reduce(&vec![1f32; m], &mut [], ReduceOp::BitOr, 1)
        }),
        ("reduce_in_place bxor f16", |c, m| {
            c.reduce_in_place(&mut vec![f16::ONE; m], ReduceOp::BitXor, 1)
        }),
        ("reduce root", |c, m| {
            let n = c.size();
            c.reduce(&vec![1u8; m], &mut vec![0u8; m], ReduceOp::Sum, n)
        }),
        ("reduce root's lengths", |c, m| {
            c.reduce(&vec![1u8; m], &mut vec![0u8; m + 1], ReduceOp::Sum, 0)
        }),
        ("broadcast root", |c, m| {
            let n = c.size();
            c.broadcast(&mut vec![0u8; m], n)
        }),
        ("allgather blocks", |c, m| {
            c.allgather(&vec![1u8; m], &mut vec![0u8; m * c.size() + 1])
        }),
        ("allgather_in_place blocks", |c, m| {
            c.allgather_in_place(&mut vec![0u8; m * c.size() + 1])
        }),
        ("reduce_scatter bxor f32", |c, m| {
            c.reduce_scatter(
                &vec![1f32; m * c.size()],
                &mut vec![0f32; m],
                ReduceOp::BitXor,
            )
        }),
        ("reduce_scatter_in_place band bf16", |c, m| {
            c.reduce_scatter_in_place(&mut vec![bf16::ONE; m * c.size()], ReduceOp::BitAnd)
        }),
        ("alltoall blocks", |c, m| {
            c.alltoall(
                &vec![1u8; m * c.size() + 1],
                &mut vec![0u8; m * c.size() + 1],
            )
        }),
        ("iallreduce bxor f32", |c, m| {
            let (a, mut b) = (vec![1f32; m], vec![0f32; m]);
            c.scope(|s| s.iallreduce(&a, &mut b, ReduceOp::BitXor).map(drop))?
        }),
        ("ireduce bor f64", |c, m| {
            let (a, mut b) = (vec![1f64; m], vec![0f64; m]);
            c.scope(|s| s.ireduce(&a, &mut b, ReduceOp::BitOr, 0).map(drop))?
        }),
    ];
    for n in [2, 3, 4] {
        on_threads(n, |comm| {
            let r = comm.rank();
            for m in [1, 7, 3000] {
                for (what, call) in &bad {
                    if r == 0 {
                        let e = call(&comm, m).expect_err(what);
                        assert!(
                            matches!(e, Error::InvalidArgument(_) | Error::InvalidRank { .. }),
                            "{what}, {m} elements on {n} ranks: {e}"
                        );
                    }
                    // Small and then large valid collectives of each
                    // direct path, on every rank.
                    for k in [7usize, 3000] {
                        let mine: Vec<u64> = (0..k).map(|i| (r * k + i) as u64).collect();
                        let mut sum = vec![0u64; k];
                        comm.allreduce(&mine, &mut sum, ReduceOp::Sum)?;
                        let mut red = vec![0u64; k];
                        comm.reduce(&mine, &mut red, ReduceOp::Max, n - 1)?;
                        let mut bc = vec![r as u32; k];
                        comm.broadcast(&mut bc, 0)?;
                        for i in 0..k {
                            let want: u64 = (0..n).map(|q| (q * k + i) as u64).sum();
                            assert_eq!(sum[i], want, "{what}: allreduce after it");
                            if r == n - 1 {
                                assert_eq!(red[i], ((n - 1) * k + i) as u64, "{what}: reduce");
                            }
                        }
                        assert!(bc.iter().all(|&x| x == 0), "{what}: broadcast after it");
                        comm.barrier()?;
                    }
                }
            }
            Ok(())
        });
    }
}

/// A rank blocked in a point-to-point call still advances its started
/// non-blocking collectives (MPI's progress rule): rank 0 starts a 4 MiB
/// allreduce (rendezvous chunks, so its peer needs rank 0's help to finish)
/// and then waits in a blocking `recv` for a message rank 1 sends only
/// once its own allreduce has completed.
#[test]
fn a_blocking_receive_drives_started_collectives() {
    let mut c = cfg();
    c.timeout = Duration::from_secs(10);
    for links in [Links::Shm, Links::Tcp] {
        on_links(2, links, c.clone(), &format!("{links:?}"), |comm| {
            let r = comm.rank();
            let mine = vec![r as u64 + 1; 1 << 19];
            let mut sum = vec![0u64; 1 << 19];
            comm.scope(|s| {
                let req = s.iallreduce(&mine, &mut sum, ReduceOp::Sum)?;
                let mut m = [0u8; 2];
                if r == 0 {
                    s.comm().recv(&mut m, 1, 5)?;
                    assert_eq!(&m, b"ok");
                    req.wait()
                } else {
                    req.wait()?;
                    s.comm().send(b"ok", 0, 5)
                }
            })??;
            assert!(sum.iter().all(|x| *x == 3));
            Ok(())
        });
    }
}

/// The collectives' names are an interface (`TANDEM_ALGO`, `tandem-perf`,
/// error messages): each is spelled as documented and parses back.
#[test]
fn collective_names_are_spelled_as_documented_and_parse_back() {
    let names: Vec<_> = Collective::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "allreduce",
            "reduce",
            "broadcast",
            "allgather",
            "reduce_scatter",
            "alltoall",
            "barrier"
        ]
    );
    for c in Collective::ALL {
        assert_eq!(Collective::parse(c.name()), Some(c));
    }
    assert_eq!(Collective::parse("allgatherv"), None);
}

/// A collective that fails (here: its peer never joins before the
/// deadline) withdraws its transfers before it returns: the peer's data,
/// arriving later, is never written into the buffers the caller got back.
#[test]
fn a_failed_collective_never_writes_its_buffers_afterwards() {
    let mut c = cfg();
    c.timeout = Duration::from_secs(2);
    on_links(2, Links::Shm, c, "", |comm| {
        let n = 1024; // 8 KiB: the pipelined ring, in eager pieces
        let mine = vec![comm.rank() as u64 + 1; n];
        if comm.rank() == 0 {
            let mut a = vec![0u64; n];
            let e = comm.allreduce(&mine, &mut a, ReduceOp::Sum);
            assert!(
                matches!(e, Err(Error::Timeout { .. } | Error::Deadlock { .. })),
                "{e:?}"
            );
            a.fill(0x5555);
            comm.send(b"go", 1, 1)?;
            let mut m = [0u8; 4];
            // Receiving drives this rank's collectives: a transfer left
            // posted would now take rank 1's pieces into `a`.
            comm.recv(&mut m, 1, 2)?;
            let end = Instant::now() + Duration::from_secs(30);
            while comm.iprobe(1, 3)?.is_none() {
                assert!(Instant::now() < end, "no message tag 1, 3");
                std::thread::sleep(Duration::from_millis(1));
            }
            comm.recv(&mut m, 1, 3)?;
            assert!(a.iter().all(|x| *x == 0x5555), "written after it failed");
        } else {
            // Wait past rank 0's deadline without one of our own.
            let end = Instant::now() + Duration::from_secs(30);
            while comm.iprobe(0, 1)?.is_none() {
                assert!(Instant::now() < end, "no message tag 0, 1");
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut m = [0u8; 2];
            comm.recv(&mut m, 0, 1)?;
            let mut late = vec![0u64; n];
            let r = comm.scope(|s| {
                let req = s.iallreduce(&mine, &mut late, ReduceOp::Sum)?;
                s.comm().send(b"sent", 0, 2)?;
                req.wait()
            });
            assert!(
                matches!(r, Ok(Err(_)) | Err(_)),
                "rank 0 never joins: {r:?}"
            );
            comm.send(b"done", 0, 3)?;
        }
        Ok(())
    });
}

/// A barrier, blocking or not, returns on no rank before every rank has
/// entered it: ranks enter one after another (rank r after r x 20 ms), and
/// each checks on leaving that all have entered. On 2 to 5 ranks, so every
/// dissemination distance is used; the non-blocking form runs the
/// schedule's steps, the blocking one the direct path.
#[test]
fn barriers_hold_every_rank_until_all_have_entered() {
    use tandem_core::sync::{AtomicU64, Ordering};
    for n in 2..=5 {
        for nonblocking in [false, true] {
            let entered = AtomicU64::new(0);
            let mut c = cfg();
            c.timeout = Duration::from_secs(10);
            let what = format!("{n} ranks, non-blocking {nonblocking},");
            on_links(n, Links::Shm, c, &what, |comm| {
                for round in 0..3 {
                    std::thread::sleep(Duration::from_millis(20 * comm.rank() as u64));
                    entered.fetch_add(1, Ordering::SeqCst);
                    if nonblocking {
                        comm.scope(|s| s.ibarrier()?.wait())??;
                    } else {
                        comm.barrier()?;
                    }
                    let seen = entered.load(Ordering::SeqCst) as usize;
                    assert!(
                        seen >= (round + 1) * n,
                        "rank {} left barrier {round} with {seen} entries of {}",
                        comm.rank(),
                        (round + 1) * n
                    );
                }
                Ok(())
            });
        }
    }
}

/// Collective traffic never matches a user's receive, not even a wildcard
/// one posted before the collective starts: rank 0 waits for any message
/// of any tag while both ranks run collectives, and gets exactly the user
/// message rank 1 sends after them.
#[test]
fn a_pending_wildcard_receive_never_takes_collective_traffic() {
    let mut c = cfg();
    c.timeout = Duration::from_secs(10);
    on_links(2, Links::Shm, c, "", |comm| {
        let mut sum = [0u64; 4];
        let mut big = vec![0u64; 4096];
        if comm.rank() == 0 {
            let mut got = [0u8; 8];
            let st = comm.scope(|s| {
                let r = s.irecv(&mut got, ANY_SOURCE, tandem_driver::ANY_TAG)?;
                s.comm().allreduce(&[1u64; 4], &mut sum, ReduceOp::Sum)?;
                s.comm()
                    .allreduce(&vec![1u64; 4096], &mut big, ReduceOp::Sum)?;
                s.comm().barrier()?;
                r.wait()
            })??;
            assert_eq!((st.source, st.tag, st.len), (1, 77, 8));
            assert_eq!(&got, b"the user");
        } else {
            comm.allreduce(&[1u64; 4], &mut sum, ReduceOp::Sum)?;
            comm.allreduce(&vec![1u64; 4096], &mut big, ReduceOp::Sum)?;
            comm.barrier()?;
            comm.send(b"the user", 0, 77)?;
        }
        assert_eq!(sum, [2; 4]);
        assert!(big.iter().all(|x| *x == 2));
        Ok(())
    });
}

/// Small blocking collectives run again from the program compiled for the
/// previous call of the same shape: a repeat must use this call's buffers
/// (same lengths, other addresses and values), and a change in between
/// (in place or not, another root, a forced algorithm, another collective,
/// a non-blocking one) must plan again. Every result against the reference.
#[test]
fn repeated_small_collectives_use_each_calls_own_buffers_and_settings() {
    for n in [2, 3, 4] {
        on_threads(n, |comm| {
            let (r, n) = (comm.rank(), comm.size());
            let sum = |k: i64| (0..n as i64).map(|q| q * 10 + k).sum::<i64>();
            for round in 0..6i64 {
                // Two buffers of one length, alternated: same shape, new addresses.
                let mine_a = [r as i64 * 10 + round, 1];
                let mine_b = [r as i64 * 10 + round + 1, 2];
                let (mut out_a, mut out_b) = ([0i64; 2], [0i64; 2]);
                comm.allreduce(&mine_a, &mut out_a, ReduceOp::Sum)?;
                comm.allreduce(&mine_b, &mut out_b, ReduceOp::Sum)?;
                assert_eq!(out_a, [sum(round), n as i64], "rank {r} round {round}");
                assert_eq!(
                    out_b,
                    [sum(round + 1), 2 * n as i64],
                    "rank {r} round {round}"
                );
                let mut inplace = [r as i64 * 10 + round, 3];
                comm.allreduce_in_place(&mut inplace, ReduceOp::Sum)?;
                assert_eq!(inplace, [sum(round), 3 * n as i64]);
                // The same call again after the in-place one.
                comm.allreduce(&mine_a, &mut out_b, ReduceOp::Sum)?;
                assert_eq!(out_b, [sum(round), n as i64]);
                // The same lengths with another operator, then another root,
                // back to back.
                comm.allreduce(&mine_a, &mut out_a, ReduceOp::Max)?;
                assert_eq!(out_a, [(n as i64 - 1) * 10 + round, 1]);
                for root in [round as usize % n, (round as usize + 1) % n] {
                    let mut b = if r == root {
                        [round, root as i64]
                    } else {
                        [-1, -1]
                    };
                    comm.broadcast(&mut b, root)?;
                    assert_eq!(b, [round, root as i64], "rank {r} broadcast from {root}");
                }
                for (root, op) in [
                    (0, ReduceOp::Max),
                    (n - 1, ReduceOp::Max),
                    (n - 1, ReduceOp::Min),
                ] {
                    let mut red = [0i64; 2];
                    comm.reduce(&mine_a, &mut red, op, root)?;
                    if r == root {
                        let want = if op == ReduceOp::Max {
                            (n as i64 - 1) * 10
                        } else {
                            0
                        };
                        assert_eq!(red, [want + round, 1], "rank {r} reduce to {root}");
                    }
                }
                comm.barrier()?;
                // A forced algorithm between two equal calls must be used
                // by the second, and a non-blocking call plans in between.
                comm.allreduce(&mine_b, &mut out_a, ReduceOp::Sum)?;
                let algo = if round % 2 == 0 {
                    Algorithm::Ring
                } else {
                    Algorithm::Tree
                };
                comm.set_algorithm(Collective::Allreduce, Some(algo));
                comm.allreduce(&mine_b, &mut out_a, ReduceOp::Sum)?;
                assert_eq!(out_a, [sum(round + 1), 2 * n as i64]);
                comm.set_algorithm(Collective::Allreduce, None);
                comm.scope(|s| s.iallreduce(&mine_a, &mut out_b, ReduceOp::Sum)?.wait())??;
                assert_eq!(out_b, [sum(round), n as i64]);
            }
            Ok(())
        });
    }
}

/// A blocking collective of the shape just run inline, called while a
/// non-blocking one runs: it must go through the table (a repeat of the
/// inline program would share the running one's scratch, into which the
/// running one's receives land), and both results must be right.
#[test]
fn a_repeat_while_a_nonblocking_collective_runs_keeps_both_results() {
    const BIG: usize = 64 * 1024;
    for n in [2, 3, 4] {
        on_threads(n, |comm| {
            let r = comm.rank() as u64;
            let n64 = n as u64;
            let sum = |base: u64| (0..n64).map(|q| q * 10 + base).sum::<u64>();
            let mut bg = vec![0u64; BIG];
            for round in 0..20u64 {
                let mut first = [0u64; 2];
                comm.allreduce(&[r * 10 + round, 1], &mut first, ReduceOp::Sum)?;
                assert_eq!(first, [sum(round), n64]);
                // Large: its receives are posted, into the scratch.
                let mine: Vec<u64> = (0..BIG as u64).map(|i| r * 10 + i % 7 + round).collect();
                let mut fg = [0u64; 2];
                comm.scope(|s| {
                    let req = s.iallreduce(&mine, &mut bg, ReduceOp::Sum)?;
                    comm.allreduce(&[r * 10 + 5000 + round, 3], &mut fg, ReduceOp::Sum)?;
                    req.wait()
                })??;
                assert_eq!(
                    fg,
                    [sum(5000 + round), 3 * n64],
                    "rank {r} round {round}: the blocking one"
                );
                for (i, x) in bg.iter().enumerate() {
                    let want = sum(i as u64 % 7 + round);
                    assert_eq!(
                        *x, want,
                        "rank {r} round {round}: element {i} of the non-blocking one"
                    );
                }
            }
            Ok(())
        });
    }
}
