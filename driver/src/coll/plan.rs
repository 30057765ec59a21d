//! The schedules: every collective as a fixed sequence of steps per lane,
//! computed on demand from a few numbers (no schedule is stored, so a call
//! allocates nothing). A step posts at most one receive and one send and,
//! once both finished, runs one local reduction. Lanes are independent
//! sequences over disjoint slices of the data that run concurrently: the
//! pipeline of NCCL's chunked rings.
//!
//! Every reduction has a fixed operand order that depends only on the
//! algorithm and the number of ranks, so results are identical on every
//! rank and from run to run.

use super::{Algorithm, Collective};

/// Which buffer a region lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buf {
    /// The caller's input (the output itself when in place).
    Src,
    /// The caller's output.
    Dst,
    /// Scratch slot `i` of the step's lane.
    Tmp(u8),
}

/// `len` elements at element offset `off` of `buf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub buf: Buf,
    pub off: usize,
    pub len: usize,
}

const fn reg(buf: Buf, off: usize, len: usize) -> Region {
    Region { buf, off, len }
}

/// A transfer: a region and the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Xfer {
    pub region: Region,
    pub peer: usize,
}

/// What a step does once its transfers finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    None,
    /// `out = op(a, b)`; `out` is `a`, `b`, or disjoint from both.
    Reduce {
        out: Region,
        a: Region,
        b: Region,
    },
}

/// One step of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub send: Option<Xfer>,
    pub recv: Option<Xfer>,
    pub after: After,
}

const EMPTY: Step = Step {
    send: None,
    recv: None,
    after: After::None,
};

impl Algorithm {
    /// What the algorithm is for collective `c` ("ring", "recursive
    /// doubling", "chain", "binomial tree", ...).
    pub fn describe(self, c: Collective) -> &'static str {
        use Collective::*;
        match (self, c) {
            (_, Barrier) => "dissemination",
            (_, Alltoall) => "pairwise exchange",
            (Algorithm::Ring, Reduce | Broadcast) => "pipelined chain",
            (Algorithm::Ring, _) => "pipelined ring",
            (Algorithm::Tree, Allreduce | Allgather) => "recursive doubling",
            (Algorithm::Tree, Reduce | Broadcast) => "binomial tree",
            (Algorithm::Tree, ReduceScatter) => "pipelined ring",
        }
    }
}

/// A collective call's schedule on one rank. Counts are in elements:
/// `count` is the whole buffer for allreduce, reduce and broadcast, and
/// one rank's block for allgather, reduce_scatter and alltoall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub coll: Collective,
    pub algo: Algorithm,
    pub n: usize,
    pub r: usize,
    pub root: usize,
    pub count: usize,
    /// Elements per slice of a block (the pipeline's chunk).
    pub chunk: usize,
    pub lanes: usize,
    pub in_place: bool,
}

/// Elements `[off, off + len)` of block `b` of `n` near-equal blocks of a
/// slice `[base, base + total)`.
fn even_block(base: usize, total: usize, n: usize, b: usize) -> (usize, usize) {
    let lo = (b as u128 * total as u128 / n as u128) as usize;
    let hi = ((b as u128 + 1) * total as u128 / n as u128) as usize;
    (base + lo, hi - lo)
}

/// Smallest power of two `>= n`.
fn ceil_pow2(n: usize) -> usize {
    n.next_power_of_two()
}

impl Plan {
    /// A one-rank barrier: no steps (what an empty program holds).
    pub(crate) const NONE: Plan = Plan {
        coll: Collective::Barrier,
        algo: Algorithm::Tree,
        n: 1,
        r: 0,
        root: 0,
        count: 0,
        chunk: 1,
        lanes: 1,
        in_place: true,
    };

    /// Slices of the data each lane takes in turn.
    fn slices(&self) -> usize {
        let span = match self.coll {
            Collective::Allreduce => self.n * self.chunk,
            _ => self.chunk,
        };
        self.count.div_ceil(span.max(1))
    }

    /// Whether the algorithm runs over slices in lanes (else one lane over
    /// the whole buffer).
    fn sliced(&self) -> bool {
        match self.coll {
            Collective::Allreduce | Collective::Reduce | Collective::Broadcast => {
                self.algo == Algorithm::Ring
            }
            Collective::ReduceScatter => true,
            Collective::Allgather => self.algo == Algorithm::Ring || !self.n.is_power_of_two(),
            Collective::Alltoall | Collective::Barrier => false,
        }
    }

    /// Lanes that have work.
    pub fn lanes_used(&self) -> usize {
        if self.n == 1 {
            return 0;
        }
        if self.sliced() {
            self.lanes.min(self.slices())
        } else {
            1
        }
    }

    /// Scratch slots per lane and elements per slot.
    pub fn scratch(&self) -> (usize, usize) {
        if self.n == 1 {
            return (0, 0);
        }
        match (self.coll, self.algo) {
            (Collective::Allreduce | Collective::ReduceScatter, Algorithm::Ring)
            | (Collective::ReduceScatter, _)
            | (Collective::Reduce, Algorithm::Ring) => (2, self.chunk.min(self.count)),
            (Collective::Allreduce, Algorithm::Tree) => (1, self.count),
            (Collective::Reduce, Algorithm::Tree) => (2, self.count),
            _ => (0, 0),
        }
    }

    /// A local copy to make before the first step (`from` → `to`).
    pub fn pre_copy(&self) -> Option<(Region, Region)> {
        let (n, r, m) = (self.n, self.r, self.count);
        match self.coll {
            Collective::Allreduce if self.in_place => None,
            Collective::Allreduce if n == 1 || self.algo == Algorithm::Tree => {
                Some((reg(Buf::Src, 0, m), reg(Buf::Dst, 0, m)))
            }
            Collective::Reduce if n == 1 => {
                (!self.in_place).then_some((reg(Buf::Src, 0, m), reg(Buf::Dst, 0, m)))
            }
            Collective::Reduce if self.algo == Algorithm::Tree => {
                let v = self.rel();
                let has_child = v % 2 == 0 && v + 1 < n;
                match (has_child, v == 0) {
                    (false, _) => None,
                    (true, true) => {
                        (!self.in_place).then_some((reg(Buf::Src, 0, m), reg(Buf::Dst, 0, m)))
                    }
                    (true, false) => Some((reg(Buf::Src, 0, m), reg(Buf::Tmp(1), 0, m))),
                }
            }
            Collective::Allgather if !self.in_place => {
                Some((reg(Buf::Src, 0, m), reg(Buf::Dst, r * m, m)))
            }
            Collective::ReduceScatter if n == 1 && !self.in_place => {
                Some((reg(Buf::Src, 0, m), reg(Buf::Dst, 0, m)))
            }
            Collective::Alltoall => Some((reg(Buf::Src, r * m, m), reg(Buf::Dst, r * m, m))),
            _ => None,
        }
    }

    /// Rank relative to the root.
    fn rel(&self) -> usize {
        (self.r + self.n - self.root) % self.n
    }

    /// The rank `v` places after the root.
    fn abs(&self, v: usize) -> usize {
        (v + self.root) % self.n
    }

    /// Step `k` of `lane`, `None` once the lane is done.
    pub fn step(&self, lane: usize, k: usize) -> Option<Step> {
        if self.n == 1 {
            return None;
        }
        if !self.sliced() {
            if lane != 0 {
                return None;
            }
            return match (self.coll, self.algo) {
                (Collective::Allreduce, _) => self.allreduce_rd(k),
                (Collective::Reduce, _) => self.reduce_tree(k),
                (Collective::Broadcast, _) => self.bcast_tree(k),
                (Collective::Allgather, _) => self.allgather_rd(k),
                (Collective::Alltoall, _) => self.alltoall(k),
                (Collective::Barrier, _) => self.barrier(k),
                (Collective::ReduceScatter, _) => None,
            };
        }
        let (n, lanes) = (self.n, self.lanes_used());
        if lane >= lanes {
            return None;
        }
        let per_lane = (self.slices() - lane).div_ceil(lanes);
        if self.coll == Collective::Broadcast {
            // Pipelined: step k sends slice k-1 on and receives slice k.
            return (k <= per_lane).then(|| self.bcast_chain(lane, k, per_lane));
        }
        let per_slice = match self.coll {
            Collective::Allreduce => 2 * (n - 1),
            Collective::ReduceScatter | Collective::Allgather => n - 1,
            Collective::Reduce => {
                let v = self.rel();
                if v == 0 || v == n - 1 {
                    1
                } else {
                    2
                }
            }
            _ => unreachable!("not sliced"),
        };
        let (i, s) = (k / per_slice, k % per_slice);
        if i >= per_lane {
            return None;
        }
        let j = lane + i * lanes;
        Some(match self.coll {
            Collective::Allreduce => {
                let base = j * n * self.chunk;
                let total = (n * self.chunk).min(self.count - base);
                let blk = |b: usize| even_block(base, total, n, b);
                if s < n - 1 {
                    self.rs_step(s, blk, blk(self.r).0)
                } else {
                    self.ag_step(s - (n - 1), blk)
                }
            }
            Collective::ReduceScatter => {
                let (m, off) = (self.count, j * self.chunk);
                let len = self.chunk.min(m - off);
                let out = if self.in_place { self.r * m + off } else { off };
                self.rs_step(s, |b| (b * m + off, len), out)
            }
            Collective::Allgather => {
                let (m, off) = (self.count, j * self.chunk);
                let len = self.chunk.min(m - off);
                self.ag_step(s, |b| (b * m + off, len))
            }
            Collective::Reduce => self.reduce_chain(j, s),
            _ => unreachable!("not sliced"),
        })
    }

    /// Ring reduce-scatter step `s` (of `n-1`) over blocks `blk(b)` (offset,
    /// len in `Src`); the rank's finished block lands at `out` in `Dst`.
    /// The partial sum of block `b` starts at rank `b+1` and travels the
    /// ring: `(((x[b+1] op x[b+2]) op ...) op x[b])`.
    fn rs_step(&self, s: usize, blk: impl Fn(usize) -> (usize, usize), out: usize) -> Step {
        let (n, r) = (self.n, self.r);
        let sb = (r + n - s - 1) % n;
        let rb = (r + 2 * n - s - 2) % n;
        let (soff, slen) = blk(sb);
        let (roff, rlen) = blk(rb);
        let send = if s == 0 {
            reg(Buf::Src, soff, slen)
        } else {
            reg(Buf::Tmp(((s - 1) % 2) as u8), 0, slen)
        };
        let tmp = reg(Buf::Tmp((s % 2) as u8), 0, rlen);
        let mine = reg(Buf::Src, roff, rlen);
        let after = if s + 2 < n {
            After::Reduce {
                out: tmp,
                a: tmp,
                b: mine,
            }
        } else {
            After::Reduce {
                out: reg(Buf::Dst, out, rlen),
                a: tmp,
                b: mine,
            }
        };
        Step {
            send: Some(Xfer {
                region: send,
                peer: (r + 1) % n,
            }),
            recv: Some(Xfer {
                region: tmp,
                peer: (r + n - 1) % n,
            }),
            after,
        }
    }

    /// Ring allgather step `s` (of `n-1`) over blocks `blk(b)` of `Dst`.
    fn ag_step(&self, s: usize, blk: impl Fn(usize) -> (usize, usize)) -> Step {
        let (n, r) = (self.n, self.r);
        let (so, sl) = blk((r + n - s) % n);
        let (ro, rl) = blk((r + 2 * n - s - 1) % n);
        Step {
            send: Some(Xfer {
                region: reg(Buf::Dst, so, sl),
                peer: (r + 1) % n,
            }),
            recv: Some(Xfer {
                region: reg(Buf::Dst, ro, rl),
                peer: (r + n - 1) % n,
            }),
            after: After::None,
        }
    }

    /// Recursive doubling over the whole buffer in `Dst`. With a rank
    /// count that is not a power of two, the first `2*rem` ranks fold in
    /// pairs first (the even one sends to the odd one and receives the
    /// result at the end). The lower half always comes first.
    fn allreduce_rd(&self, k: usize) -> Option<Step> {
        let (n, r, m) = (self.n, self.r, self.count);
        let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
        let rem = n - p;
        let log = p.trailing_zeros() as usize;
        let all = reg(Buf::Dst, 0, m);
        let tmp = reg(Buf::Tmp(0), 0, m);
        let to = |peer| Some(Xfer { region: all, peer });
        if r < 2 * rem && r % 2 == 0 {
            return match k {
                0 => Some(Step {
                    send: to(r + 1),
                    ..EMPTY
                }),
                1 => Some(Step {
                    recv: to(r + 1),
                    ..EMPTY
                }),
                _ => None,
            };
        }
        let (v, first) = if r < 2 * rem {
            if k == 0 {
                return Some(Step {
                    recv: Some(Xfer {
                        region: tmp,
                        peer: r - 1,
                    }),
                    after: After::Reduce {
                        out: all,
                        a: tmp,
                        b: all,
                    },
                    ..EMPTY
                });
            }
            if k == log + 1 {
                return Some(Step {
                    send: to(r - 1),
                    ..EMPTY
                });
            }
            (r / 2, 1)
        } else {
            (r - rem, 0)
        };
        if k < first || k - first >= log {
            return None;
        }
        let pv = v ^ (1 << (k - first));
        let peer = if pv < rem { 2 * pv + 1 } else { pv + rem };
        let after = if v < pv {
            After::Reduce {
                out: all,
                a: all,
                b: tmp,
            }
        } else {
            After::Reduce {
                out: all,
                a: tmp,
                b: all,
            }
        };
        Some(Step {
            send: to(peer),
            recv: Some(Xfer { region: tmp, peer }),
            after,
        })
    }

    /// Binomial-tree reduce toward the root over the whole buffer: at step
    /// `i` a rank with bit `i` set sends its partial to the rank `2^i`
    /// below it (relative to the root) and is done; the others fold in the
    /// partial from `2^i` above. Lower ranks come first.
    fn reduce_tree(&self, k: usize) -> Option<Step> {
        let (n, m) = (self.n, self.count);
        let v = self.rel();
        let bit = 1usize << k;
        if bit >= ceil_pow2(n) {
            return None;
        }
        let has_child = v % 2 == 0 && v + 1 < n;
        let w = match (has_child, v == 0) {
            (false, _) => reg(Buf::Src, 0, m),
            (true, true) => reg(Buf::Dst, 0, m),
            (true, false) => reg(Buf::Tmp(1), 0, m),
        };
        if v & (bit - 1) != 0 {
            return None; // sent at an earlier step
        }
        if v & bit != 0 {
            return Some(Step {
                send: Some(Xfer {
                    region: w,
                    peer: self.abs(v - bit),
                }),
                ..EMPTY
            });
        }
        if v + bit >= n {
            return Some(EMPTY);
        }
        let tmp = reg(Buf::Tmp(0), 0, m);
        Some(Step {
            recv: Some(Xfer {
                region: tmp,
                peer: self.abs(v + bit),
            }),
            after: After::Reduce {
                out: w,
                a: w,
                b: tmp,
            },
            ..EMPTY
        })
    }

    /// Chain reduce toward the root, slice `j`, step `s` of the slice: the
    /// last rank sends its slice down, each rank between folds its own in
    /// front, `x[v] op (x[v+1] op ...)`, and the root writes the result.
    fn reduce_chain(&self, j: usize, s: usize) -> Step {
        let n = self.n;
        let v = self.rel();
        let off = j * self.chunk;
        let len = self.chunk.min(self.count - off);
        let mine = reg(Buf::Src, off, len);
        let (t0, t1) = (reg(Buf::Tmp(0), 0, len), reg(Buf::Tmp(1), 0, len));
        if v == n - 1 {
            return Step {
                send: Some(Xfer {
                    region: mine,
                    peer: self.abs(v - 1),
                }),
                ..EMPTY
            };
        }
        if s == 1 {
            return Step {
                send: Some(Xfer {
                    region: t1,
                    peer: self.abs(v - 1),
                }),
                ..EMPTY
            };
        }
        let out = if v == 0 { reg(Buf::Dst, off, len) } else { t1 };
        Step {
            recv: Some(Xfer {
                region: t0,
                peer: self.abs(v + 1),
            }),
            after: After::Reduce {
                out,
                a: mine,
                b: t0,
            },
            ..EMPTY
        }
    }

    /// Pipelined chain broadcast, step `k` of lane `lane` (with `per_lane`
    /// slices): forward slice `k-1`, receive slice `k`.
    fn bcast_chain(&self, lane: usize, k: usize, per_lane: usize) -> Step {
        let n = self.n;
        let v = self.rel();
        let lanes = self.lanes_used();
        let slice = |i: usize| {
            let off = (lane + i * lanes) * self.chunk;
            reg(Buf::Dst, off, self.chunk.min(self.count - off))
        };
        Step {
            send: (k >= 1 && v + 1 < n).then(|| Xfer {
                region: slice(k - 1),
                peer: self.abs(v + 1),
            }),
            recv: (k < per_lane && v > 0).then(|| Xfer {
                region: slice(k),
                peer: self.abs(v - 1),
            }),
            after: After::None,
        }
    }

    /// Binomial-tree broadcast: receive from the parent, then send to each
    /// child, farthest first.
    fn bcast_tree(&self, k: usize) -> Option<Step> {
        let n = self.n;
        let v = self.rel();
        let all = reg(Buf::Dst, 0, self.count);
        let top = if v == 0 {
            ceil_pow2(n)
        } else {
            1 << v.trailing_zeros()
        };
        if k == 0 {
            return Some(if v == 0 {
                EMPTY
            } else {
                Step {
                    recv: Some(Xfer {
                        region: all,
                        peer: self.abs(v - top),
                    }),
                    ..EMPTY
                }
            });
        }
        let mask = top >> k;
        if mask == 0 {
            return None;
        }
        Some(if v + mask < n {
            Step {
                send: Some(Xfer {
                    region: all,
                    peer: self.abs(v + mask),
                }),
                ..EMPTY
            }
        } else {
            EMPTY
        })
    }

    /// Recursive-doubling allgather (a power-of-two number of ranks): at
    /// step `k` exchange the `2^k` blocks held with the partner `r ^ 2^k`.
    fn allgather_rd(&self, k: usize) -> Option<Step> {
        let (n, r, m) = (self.n, self.r, self.count);
        if 1 << k >= n {
            return None;
        }
        let peer = r ^ (1 << k);
        let span = (1 << k) * m;
        Some(Step {
            send: Some(Xfer {
                region: reg(Buf::Dst, ((r >> k) << k) * m, span),
                peer,
            }),
            recv: Some(Xfer {
                region: reg(Buf::Dst, ((peer >> k) << k) * m, span),
                peer,
            }),
            after: After::None,
        })
    }

    /// Pairwise alltoall: at step `s-1` send to `r+s`, receive from `r-s`.
    fn alltoall(&self, k: usize) -> Option<Step> {
        let (n, r, m) = (self.n, self.r, self.count);
        let s = k + 1;
        if s >= n {
            return None;
        }
        let (to, from) = ((r + s) % n, (r + n - s) % n);
        Some(Step {
            send: Some(Xfer {
                region: reg(Buf::Src, to * m, m),
                peer: to,
            }),
            recv: Some(Xfer {
                region: reg(Buf::Dst, from * m, m),
                peer: from,
            }),
            after: After::None,
        })
    }

    /// Dissemination barrier: at step `k` notify `r + 2^k` and hear from
    /// `r - 2^k`.
    fn barrier(&self, k: usize) -> Option<Step> {
        let (n, r) = (self.n, self.r);
        let d = 1usize.checked_shl(k as u32).filter(|d| *d < n)?;
        let none = reg(Buf::Dst, 0, 0);
        Some(Step {
            send: Some(Xfer {
                region: none,
                peer: (r + d) % n,
            }),
            recv: Some(Xfer {
                region: none,
                peer: (r + n - d) % n,
            }),
            after: After::None,
        })
    }
}

#[cfg(test)]
mod tests;
