//! The schedules run on an in-memory network: every collective, every
//! algorithm, 1–9 ranks, awkward counts and chunk sizes, against a
//! sequential reference; plus fixed-order checks with a non-commutative,
//! non-associative operator (every rank must hold the same bits).

use super::*;
use std::collections::{HashMap, VecDeque};

type Op = fn(u64, u64) -> u64;

fn sum(a: u64, b: u64) -> u64 {
    a.wrapping_add(b)
}

/// Neither commutative nor associative: any difference in operand order
/// between ranks shows.
fn skew(a: u64, b: u64) -> u64 {
    a.wrapping_mul(31).wrapping_add(b) ^ (a >> 7)
}

struct RankState {
    src: Vec<u64>,
    dst: Vec<u64>,
    tmp: Vec<Vec<u64>>,
}

fn buf(st: &mut RankState, lane: usize, ntmp: usize, b: Buf) -> &mut Vec<u64> {
    match b {
        Buf::Src => &mut st.src,
        Buf::Dst => &mut st.dst,
        Buf::Tmp(i) => &mut st.tmp[lane * ntmp + i as usize],
    }
}

fn read(st: &mut RankState, lane: usize, ntmp: usize, r: Region, in_place: bool) -> Vec<u64> {
    let b = if in_place && r.buf == Buf::Src {
        Buf::Dst
    } else {
        r.buf
    };
    buf(st, lane, ntmp, b)[r.off..r.off + r.len].to_vec()
}

fn write(st: &mut RankState, lane: usize, ntmp: usize, r: Region, v: &[u64], in_place: bool) {
    let b = if in_place && r.buf == Buf::Src {
        Buf::Dst
    } else {
        r.buf
    };
    buf(st, lane, ntmp, b)[r.off..r.off + r.len].copy_from_slice(v);
}

/// Runs `plans` (one per rank) with inputs `src[r]` and outputs of
/// `dst_len` elements; returns the outputs.
fn run(plans: &[Plan], src: Vec<Vec<u64>>, dst_len: usize, op: Op) -> Vec<Vec<u64>> {
    let n = plans.len();
    let mut st: Vec<RankState> = plans
        .iter()
        .zip(src)
        .map(|(p, s)| {
            let (ntmp, elems) = p.scratch();
            let mut dst = vec![0u64; dst_len];
            if p.in_place {
                dst[..s.len()].copy_from_slice(&s);
            }
            RankState {
                src: if p.in_place { Vec::new() } else { s },
                dst,
                tmp: vec![vec![0; elems]; ntmp * p.lanes_used().max(1)],
            }
        })
        .collect();
    // (from, to, lane) -> FIFO of messages.
    let mut net: HashMap<(usize, usize, usize), VecDeque<Vec<u64>>> = HashMap::new();
    let mut k = vec![vec![0usize; 8]; n];
    let mut sent = vec![vec![false; 8]; n];
    for (r, p) in plans.iter().enumerate() {
        if let Some((from, to)) = p.pre_copy() {
            let (ntmp, _) = p.scratch();
            let v = read(&mut st[r], 0, ntmp, from, p.in_place);
            write(&mut st[r], 0, ntmp, to, &v, p.in_place);
        }
    }
    loop {
        let mut moved = false;
        let mut live = false;
        for (r, p) in plans.iter().enumerate() {
            let (ntmp, _) = p.scratch();
            for lane in 0..p.lanes_used() {
                let Some(step) = p.step(lane, k[r][lane]) else {
                    continue;
                };
                live = true;
                if let (Some(x), false) = (step.send, sent[r][lane]) {
                    assert_ne!(x.peer, r, "send to self");
                    let v = read(&mut st[r], lane, ntmp, x.region, p.in_place);
                    net.entry((r, x.peer, lane)).or_default().push_back(v);
                    sent[r][lane] = true;
                    moved = true;
                }
                if let Some(x) = step.recv {
                    let q = net.entry((x.peer, r, lane)).or_default();
                    let Some(v) = q.pop_front() else { continue };
                    assert_eq!(
                        v.len(),
                        x.region.len,
                        "{p:?} rank {r} lane {lane} step {}",
                        k[r][lane]
                    );
                    write(&mut st[r], lane, ntmp, x.region, &v, p.in_place);
                }
                if let After::Reduce { out, a, b } = step.after {
                    let x = read(&mut st[r], lane, ntmp, a, p.in_place);
                    let y = read(&mut st[r], lane, ntmp, b, p.in_place);
                    let z: Vec<u64> = x.iter().zip(&y).map(|(x, y)| op(*x, *y)).collect();
                    write(&mut st[r], lane, ntmp, out, &z, p.in_place);
                }
                k[r][lane] += 1;
                sent[r][lane] = false;
                moved = true;
            }
        }
        if !live {
            break;
        }
        assert!(moved, "schedule deadlocked: {:?}", plans[0]);
    }
    assert!(net.values().all(|q| q.is_empty()), "messages left over");
    st.into_iter().map(|s| s.dst).collect()
}

#[allow(clippy::too_many_arguments)]
fn plans(
    coll: Collective,
    algo: Algorithm,
    n: usize,
    count: usize,
    chunk: usize,
    lanes: usize,
    root: usize,
    in_place: bool,
) -> Vec<Plan> {
    (0..n)
        .map(|r| Plan {
            coll,
            algo,
            n,
            r,
            root,
            count,
            chunk,
            lanes,
            in_place,
        })
        .collect()
}

fn input(r: usize, len: usize) -> Vec<u64> {
    (0..len).map(|i| (r as u64 + 1) * 1000 + i as u64).collect()
}

/// Reference reduction of element `i` over ranks in rank order.
fn fold(n: usize, op: Op, at: impl Fn(usize) -> u64) -> u64 {
    (1..n).fold(at(0), |acc, r| op(acc, at(r)))
}

const SHAPES: [(usize, usize); 6] = [(1, 1), (7, 3), (100, 7), (64, 64), (1000, 33), (0, 4)];

#[test]
fn every_collective_matches_the_reference() {
    for n in 1..=9 {
        for (count, chunk) in SHAPES {
            for algo in [Algorithm::Ring, Algorithm::Tree] {
                for lanes in [1, 3] {
                    for in_place in [false, true] {
                        let root = n / 2;
                        let go = |c, src_len: usize, dst_len| {
                            let src = (0..n).map(|r| input(r, src_len)).collect();
                            run(
                                &plans(c, algo, n, count, chunk, lanes, root, in_place),
                                src,
                                dst_len,
                                sum,
                            )
                        };
                        let what = format!("n={n} count={count} chunk={chunk} {algo:?} lanes={lanes} in_place={in_place}");
                        // allreduce
                        let out = go(Collective::Allreduce, count, count);
                        for o in &out {
                            for (i, v) in o.iter().enumerate() {
                                assert_eq!(
                                    *v,
                                    fold(n, sum, |r| input(r, count)[i]),
                                    "allreduce {what}"
                                );
                            }
                        }
                        // reduce
                        let out = go(Collective::Reduce, count, count);
                        for (i, v) in out[root].iter().enumerate() {
                            assert_eq!(*v, fold(n, sum, |r| input(r, count)[i]), "reduce {what}");
                        }
                        // broadcast (in place by nature)
                        let src: Vec<Vec<u64>> = (0..n).map(|r| input(r, count)).collect();
                        let out = run(
                            &plans(
                                Collective::Broadcast,
                                algo,
                                n,
                                count,
                                chunk,
                                lanes,
                                root,
                                true,
                            ),
                            src,
                            count,
                            sum,
                        );
                        for o in &out {
                            assert_eq!(o, &input(root, count), "broadcast {what}");
                        }
                        // allgather: in place means the own block already sits in dst
                        let src: Vec<Vec<u64>> = (0..n)
                            .map(|r| {
                                if in_place {
                                    let mut v = vec![0; n * count];
                                    v[r * count..(r + 1) * count].copy_from_slice(&input(r, count));
                                    v
                                } else {
                                    input(r, count)
                                }
                            })
                            .collect();
                        let out = run(
                            &plans(
                                Collective::Allgather,
                                algo,
                                n,
                                count,
                                chunk,
                                lanes,
                                root,
                                in_place,
                            ),
                            src,
                            n * count,
                            sum,
                        );
                        let want: Vec<u64> = (0..n).flat_map(|r| input(r, count)).collect();
                        for o in &out {
                            assert_eq!(o, &want, "allgather {what}");
                        }
                        // reduce_scatter: in place leaves block r of the whole buffer
                        let out = go(
                            Collective::ReduceScatter,
                            n * count,
                            if in_place { n * count } else { count },
                        );
                        for (r, o) in out.iter().enumerate() {
                            let at = if in_place { r * count } else { 0 };
                            for i in 0..count {
                                let want = fold(n, sum, |q| input(q, n * count)[r * count + i]);
                                assert_eq!(o[at + i], want, "reduce_scatter {what} rank {r}");
                            }
                        }
                        // alltoall (not in place)
                        if !in_place {
                            let out = go(Collective::Alltoall, n * count, n * count);
                            for (r, o) in out.iter().enumerate() {
                                for q in 0..n {
                                    assert_eq!(
                                        &o[q * count..(q + 1) * count],
                                        &input(q, n * count)[r * count..(r + 1) * count],
                                        "alltoall {what}"
                                    );
                                }
                            }
                        }
                        // barrier
                        run(
                            &plans(Collective::Barrier, algo, n, 0, 1, 1, 0, false),
                            vec![vec![]; n],
                            0,
                            sum,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_rank_holds_the_same_bits_in_a_fixed_order() {
    for n in 1..=9 {
        for algo in [Algorithm::Ring, Algorithm::Tree] {
            let count = 50;
            let src: Vec<Vec<u64>> = (0..n).map(|r| input(r, count)).collect();
            let a = run(
                &plans(Collective::Allreduce, algo, n, count, 4, 2, 0, false),
                src.clone(),
                count,
                skew,
            );
            assert!(
                a.iter().all(|o| o == &a[0]),
                "n={n} {algo:?}: ranks disagree"
            );
            // The same again: the order is fixed.
            let b = run(
                &plans(Collective::Allreduce, algo, n, count, 4, 2, 0, false),
                src.clone(),
                count,
                skew,
            );
            assert_eq!(a, b);
            // Reduce's and reduce_scatter's results come from one fixed order too.
            let root = n - 1;
            let c = run(
                &plans(Collective::Reduce, algo, n, count, 4, 2, root, false),
                src.clone(),
                count,
                skew,
            );
            let d = run(
                &plans(Collective::Reduce, algo, n, count, 4, 2, root, false),
                src,
                count,
                skew,
            );
            assert_eq!(c[root], d[root]);
        }
    }
}

#[test]
fn steps_touch_only_their_buffers() {
    // Every region lies inside its buffer and scratch slot.
    for n in 1..=9 {
        for coll in Collective::ALL
            .into_iter()
            .filter(|c| *c != Collective::Barrier)
        {
            for algo in [Algorithm::Ring, Algorithm::Tree] {
                let count = 29;
                for p in plans(coll, algo, n, count, 5, 2, 1 % n, false) {
                    let (src_len, dst_len) = match coll {
                        Collective::Allreduce | Collective::Reduce | Collective::Broadcast => {
                            (count, count)
                        }
                        Collective::Allgather => (count, n * count),
                        Collective::ReduceScatter => (n * count, count),
                        _ => (n * count, n * count),
                    };
                    let (_, tmp) = p.scratch();
                    for lane in 0..p.lanes_used() {
                        let mut k = 0;
                        while let Some(s) = p.step(lane, k) {
                            let mut regions = vec![];
                            regions.extend(s.send.map(|x| x.region));
                            regions.extend(s.recv.map(|x| x.region));
                            if let After::Reduce { out, a, b } = s.after {
                                regions.extend([out, a, b]);
                            }
                            for r in regions {
                                let lim = match r.buf {
                                    Buf::Src => src_len,
                                    Buf::Dst => dst_len,
                                    Buf::Tmp(_) => tmp,
                                };
                                assert!(
                                    r.off + r.len <= lim,
                                    "{p:?} lane {lane} step {k}: {r:?} beyond {lim}"
                                );
                            }
                            k += 1;
                            assert!(k < 10_000);
                        }
                    }
                }
            }
        }
    }
}
