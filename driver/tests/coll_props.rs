//! Reductions with adversarial values against an exact sequential
//! reference, compared bitwise on every rank.
//!
//! The values make operand order visible: `min`/`max` ties between `-0.0`
//! and `+0.0`, quiet and signalling NaNs with distinct payloads and signs
//! (a kernel keeps its first operand on a tie or a NaN), infinities, float
//! sums and products whose rounding depends on association (`1e16 + 1.0 -
//! 1e16`), signed zeros, and integers that wrap.
//!
//! The reference folds every element in the order the schedules fix
//! (`coll/plan.rs`), for a given algorithm, rank count and pipeline chunk:
//!
//! * allreduce, recursive doubling (`Algorithm::Tree`): with `p` the
//!   largest power of two `<= n` and `rem = n - p`, the first `2*rem` ranks
//!   fold in pairs, `x[2v] op x[2v+1]`, then the `p` partials combine as a
//!   balanced tree, lower half first: `((y0 op y1) op (y2 op y3))`;
//! * allreduce, ring: element `i` lies in block `b` of its slice of
//!   `n * chunk` elements (`n` near-equal blocks); its reduction starts at
//!   rank `b+1` and travels the ring, `((x[b+1] op x[b+2]) op ...) op x[b]`;
//! * reduce, binomial tree (`Tree`): over ranks relative to the root,
//!   `R[v, v+2s) = R[v, v+s) op R[v+s, v+2s)`, lower first;
//! * reduce, chain (`Ring`): `x[root] op (x[root+1] op (... op x[root-1]))`;
//! * reduce_scatter (either algorithm: always the pipelined ring): block
//!   `b` as the ring allreduce's, `((x[b+1] op x[b+2]) op ...) op x[b]`;
//! * automatic choice: the tree up to 2048 bytes (allreduce) or 32768
//!   (reduce), the ring above (`TANDEM_COLL_TREE_MAX` if set);
//!
//! with `op` exactly the kernels' scalar operation (`coll/types.rs`):
//! `min(x, y) = if y < x { y } else { x }`, `max` likewise, IEEE sums and
//! products in which a NaN operand propagates quieted (the first one if
//! both are), 16-bit floats computed in `f32` and rounded once, integers
//! wrapping. So the check is exact, and exactness implies the documented
//! promise: results bitwise identical on every rank and from run to run.
//!
//! Every call form runs, each with two operators (one order-sensitive):
//! blocking (the direct small-message paths up to 8192 bytes, the table
//! above), in place, non-blocking (waited for, tested to completion,
//! several in flight with a blocking one started among them), on 1–5
//! ranks, with both algorithms forced and chosen by size, with pipeline
//! chunks from one element up and 1–3 lanes; reduce at several roots.
//! Buffers a call must not write (a non-root's output, the other blocks of
//! an in-place reduce_scatter) must keep their contents. Broadcasts (from
//! random roots) and a barrier run in every world too.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::time::Duration;
use tandem_core::sync::{AtomicU64, Ordering};
use tandem_driver::bytemuck;
use tandem_driver::{
    bf16, f16, Algorithm, CollConfig, Collective, Comm, Config, Element, Layout, ReduceOp,
};

/// The direct (small-message) paths' limit in bytes (`coll::exec::FAST_MAX`).
const FAST_MAX: usize = 8192;
/// At most this many pipeline slices per call (keeps runs short).
const MAX_SLICES: usize = 40;

/// Spin briefly, then yield: more ranks than cores.
fn cfg() -> Config {
    // The crossover may be moved for a run (`TANDEM_COLL_TREE_MAX`).
    let mut c = Config::default().coll(CollConfig::from_env().expect("TANDEM_COLL_* settings"));
    c.wait.spin = 200;
    c.timeout = Duration::from_secs(60);
    c
}

use tandem_core::rng::mix;

fn hash(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5eed, |h, &p| mix(h ^ p))
}

/// An element type with the kernels' scalar semantics and adversarial
/// values.
trait Adv: Element + Send {
    /// The operators that apply.
    const OPS: &'static [ReduceOp];
    /// `op(x, y)` exactly as the kernel computes it.
    fn apply(op: ReduceOp, x: Self, y: Self) -> Self;
    /// An adversarial operand of `op`, from random bits.
    fn draw(op: ReduceOp, bits: u64) -> Self;
}

macro_rules! int_adv {
    ($($t:ty),*) => {$(
        impl Adv for $t {
            const OPS: &'static [ReduceOp] = &ReduceOp::ALL;
            fn apply(op: ReduceOp, x: Self, y: Self) -> Self {
                match op {
                    ReduceOp::Sum => x.wrapping_add(y),
                    ReduceOp::Prod => x.wrapping_mul(y),
                    ReduceOp::Min => x.min(y),
                    ReduceOp::Max => x.max(y),
                    ReduceOp::BitAnd => x & y,
                    ReduceOp::BitOr => x | y,
                    ReduceOp::BitXor => x ^ y,
                }
            }
            fn draw(op: ReduceOp, bits: u64) -> Self {
                let rest = bits >> 4;
                match bits % 16 {
                    0 if op == ReduceOp::Prod => 3,
                    0 => 0,
                    1 => 1,
                    2 => <$t>::MAX,
                    3 => <$t>::MIN,
                    4 => !0,
                    5 => 2,
                    _ => rest as $t,
                }
            }
        }
    )*};
}
int_adv!(u8, i8, i32, u32, i64, u64);

/// What the float values need of a type.
trait Float: Element + PartialOrd {
    /// Exponent all ones, the quiet bit, the sign bit.
    const EXP: u64;
    const QUIET: u64;
    const SIGN: u64;
    /// `BIG + 1` rounds back to `BIG`.
    const BIG: f64;
    /// `PBIG * PBIG` overflows.
    const PBIG: f64;
    fn of(x: f64) -> Self;
    fn raw(bits: u64) -> Self;
    fn bits(self) -> u64;
    fn add(x: Self, y: Self) -> Self;
    fn mul(x: Self, y: Self) -> Self;
    fn nan(self) -> bool;
}

macro_rules! float {
    ($t:ty, $u:ty, $exp:expr, $quiet:expr, $big:expr, $pbig:expr,
     of: $of:expr, add: $add:expr, mul: $mul:expr) => {
        impl Float for $t {
            const EXP: u64 = $exp;
            const QUIET: u64 = $quiet;
            const SIGN: u64 = 1 << (8 * std::mem::size_of::<$t>() - 1);
            const BIG: f64 = $big;
            const PBIG: f64 = $pbig;
            fn of(x: f64) -> Self {
                $of(x)
            }
            fn raw(bits: u64) -> Self {
                <$t>::from_bits(bits as $u)
            }
            fn bits(self) -> u64 {
                self.to_bits() as u64
            }
            fn add(x: Self, y: Self) -> Self {
                $add(x, y)
            }
            fn mul(x: Self, y: Self) -> Self {
                $mul(x, y)
            }
            fn nan(self) -> bool {
                self.is_nan()
            }
        }
    };
}
float!(f64, u64, 0x7ff0_0000_0000_0000, 0x0008_0000_0000_0000, 1e16, 1e200,
    of: |x| x, add: |x, y| x + y, mul: |x, y| x * y);
float!(f32, u32, 0x7f80_0000, 0x0040_0000, 1e8, 1e30,
    of: |x| x as f32, add: |x, y| x + y, mul: |x, y| x * y);
float!(f16, u16, 0x7c00, 0x0200, 2048.0, 300.0,
    of: f16::from_f64,
    add: |x: f16, y: f16| f16::from_f32(x.to_f32() + y.to_f32()),
    mul: |x: f16, y: f16| f16::from_f32(x.to_f32() * y.to_f32()));
float!(bf16, u16, 0x7f80, 0x0040, 256.0, 1e30,
    of: bf16::from_f64,
    add: |x: bf16, y: bf16| bf16::from_f32(x.to_f32() + y.to_f32()),
    mul: |x: bf16, y: bf16| bf16::from_f32(x.to_f32() * y.to_f32()));

/// A NaN with a small payload (1..=5) and a random sign; signalling if
/// `!quiet`.
fn nan_of<T: Float>(bits: u64, quiet: bool) -> T {
    let sign = if bits & 8 != 0 { T::SIGN } else { 0 };
    T::raw(T::EXP | if quiet { T::QUIET } else { 0 } | (1 + bits % 5) | sign)
}

/// A random finite value `±m * 2^e`, `m` in `[1, 2)`, `e` in `lo..=hi`.
fn finite<T: Float>(bits: u64, lo: i32, hi: i32) -> T {
    let m = 1.0 + (bits >> 12 & 0xf_ffff) as f64 / (1u64 << 20) as f64;
    let e = lo + (bits % (hi - lo + 1) as u64) as i32;
    let s = if bits & 1 << 40 != 0 { -1.0 } else { 1.0 };
    T::of(s * m * 2f64.powi(e))
}

fn float_draw<T: Float>(op: ReduceOp, bits: u64) -> T {
    let r = bits >> 8;
    let sign = if r & 1 << 50 != 0 { -1.0 } else { 1.0 };
    let big_e = T::BIG.log2() as i32;
    match op {
        // Mostly ties and NaNs.
        ReduceOp::Min | ReduceOp::Max => match bits % 16 {
            0..=2 => T::of(0.0),
            3..=5 => T::of(-0.0),
            6 | 7 => nan_of(r, true),
            8 => nan_of(r, false),
            9 => T::of(f64::INFINITY),
            10 => T::of(f64::NEG_INFINITY),
            11 => T::of(1.0),
            12 => T::of(-1.0),
            _ => finite(r, -2, 2),
        },
        ReduceOp::Sum => match bits % 64 {
            0..=11 => T::of(T::BIG),
            12..=23 => T::of(-T::BIG),
            24..=35 => T::of(sign * [1.0, 3.0, 0.5, 1.5][(r % 4) as usize]),
            36..=39 => T::of(0.0),
            40..=43 => T::of(-0.0),
            44 => T::of(f64::INFINITY),
            45 => T::of(f64::NEG_INFINITY),
            46 => nan_of(r, true),
            _ => finite(r, -4, big_e + 1),
        },
        _ => match bits % 64 {
            0..=9 => T::of(sign * T::PBIG),
            10..=19 => T::of(sign / T::PBIG),
            20..=29 => T::of([3.0, 1.0 / 3.0, -1.5, 1.1][(r % 4) as usize]),
            30 => T::of(0.0),
            31 => T::of(-0.0),
            32 => T::of(f64::INFINITY),
            33 => T::of(f64::NEG_INFINITY),
            34 => nan_of(r, r & 16 != 0),
            _ => finite(r, -3, 3),
        },
    }
}

macro_rules! float_adv {
    ($($t:ty),*) => {$(
        impl Adv for $t {
            const OPS: &'static [ReduceOp] =
                &[ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
            fn apply(op: ReduceOp, x: Self, y: Self) -> Self {
                // The first NaN operand, quieted.
                let nan = |v: Self| Self::raw(v.bits() | <Self as Float>::QUIET);
                match op {
                    ReduceOp::Sum | ReduceOp::Prod if x.nan() => nan(x),
                    ReduceOp::Sum | ReduceOp::Prod if y.nan() => nan(y),
                    ReduceOp::Sum => <Self as Float>::add(x, y),
                    ReduceOp::Prod => <Self as Float>::mul(x, y),
                    ReduceOp::Min => if y < x { y } else { x },
                    ReduceOp::Max => if y > x { y } else { x },
                    _ => unreachable!("bitwise operator on a float"),
                }
            }
            fn draw(op: ReduceOp, bits: u64) -> Self {
                float_draw(op, bits)
            }
        }
    )*};
}
float_adv!(f64, f32, f16, bf16);

/// The order one element's reduction follows.
#[derive(Debug, Clone, Copy)]
enum Order {
    RecursiveDoubling,
    Binomial { root: usize },
    Chain { root: usize },
    Ring { first: usize },
}

fn fold<T: Adv>(op: ReduceOp, order: Order, xs: &[T]) -> T {
    let n = xs.len();
    let f = |a, b| T::apply(op, a, b);
    /// The balanced tree over `ys[lo..lo + size)` (clipped at the end).
    fn tree<T: Copy>(ys: &[T], lo: usize, size: usize, f: &impl Fn(T, T) -> T) -> T {
        if size == 1 {
            return ys[lo];
        }
        let h = size / 2;
        let a = tree(ys, lo, h, f);
        if lo + h >= ys.len() {
            a
        } else {
            f(a, tree(ys, lo + h, h, f))
        }
    }
    match order {
        Order::RecursiveDoubling => {
            let p = 1 << (usize::BITS - 1 - n.leading_zeros());
            let rem = n - p;
            let ys: Vec<T> = (0..p)
                .map(|v| {
                    if v < rem {
                        f(xs[2 * v], xs[2 * v + 1])
                    } else {
                        xs[v + rem]
                    }
                })
                .collect();
            tree(&ys, 0, p, &f)
        }
        Order::Binomial { root } => {
            let rel: Vec<T> = (0..n).map(|v| xs[(v + root) % n]).collect();
            tree(&rel, 0, n.next_power_of_two(), &f)
        }
        Order::Chain { root } => {
            let mut acc = xs[(root + n - 1) % n];
            for v in (0..n - 1).rev() {
                acc = f(xs[(v + root) % n], acc);
            }
            acc
        }
        Order::Ring { first } => {
            let mut acc = xs[first % n];
            for k in 1..n {
                acc = f(acc, xs[(first + k) % n]);
            }
            acc
        }
    }
}

/// How the algorithms are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tree,
    Ring,
    /// Chosen by size.
    Auto,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Tree, Mode::Ring, Mode::Auto];

    fn forced(self) -> Option<Algorithm> {
        match self {
            Mode::Tree => Some(Algorithm::Tree),
            Mode::Ring => Some(Algorithm::Ring),
            Mode::Auto => None,
        }
    }

    /// The algorithm `c` runs for `bytes`.
    fn algo(self, c: Collective, bytes: usize) -> Algorithm {
        self.forced().unwrap_or_else(|| {
            let mut coll = cfg().coll;
            coll.force = [None; 7];
            coll.choose(c, bytes).0
        })
    }
}

/// One world's settings: ranks, algorithms, elements, pipeline.
#[derive(Debug, Clone, Copy)]
struct World {
    n: usize,
    mode: Mode,
    count: usize,
    /// Pipeline chunk in bytes, and lanes.
    chunk: usize,
    lanes: usize,
    seed: u64,
}

impl World {
    fn chunk_elems<T>(&self) -> usize {
        (self.chunk / std::mem::size_of::<T>()).max(1)
    }

    /// Ring block of element `i` of an allreduce.
    fn ring_block<T>(&self, i: usize) -> usize {
        let span = self.n * self.chunk_elems::<T>();
        let base = i / span * span;
        let total = span.min(self.count - base);
        let off = (i - base) as u128;
        (0..self.n)
            .find(|&b| {
                let lo = b as u128 * total as u128 / self.n as u128;
                let hi = (b as u128 + 1) * total as u128 / self.n as u128;
                lo <= off && off < hi
            })
            .expect("every element lies in a block")
    }

    fn allreduce_order<T>(&self, i: usize) -> Order {
        let bytes = self.count * std::mem::size_of::<T>();
        match self.mode.algo(Collective::Allreduce, bytes) {
            Algorithm::Tree => Order::RecursiveDoubling,
            Algorithm::Ring => Order::Ring {
                first: self.ring_block::<T>(i) + 1,
            },
        }
    }

    fn reduce_order<T>(&self, root: usize) -> Order {
        let bytes = self.count * std::mem::size_of::<T>();
        match self.mode.algo(Collective::Reduce, bytes) {
            Algorithm::Tree => Order::Binomial { root },
            Algorithm::Ring => Order::Chain { root },
        }
    }
}

/// A call form.
#[derive(Debug, Clone, Copy)]
enum Call {
    Allreduce {
        in_place: bool,
        nb: bool,
    },
    Reduce {
        root: usize,
        in_place: bool,
        nb: bool,
    },
    ReduceScatter {
        in_place: bool,
        nb: bool,
    },
    /// A non-blocking allreduce, reduce and reduce_scatter in flight
    /// together, a blocking allreduce among them, waited for out of order.
    Overlap {
        root: usize,
    },
    /// The root's buffer to every rank (no reduction: checks the direct
    /// path's binomial tree and the table's).
    Broadcast {
        root: usize,
        nb: bool,
    },
}

/// World `w`'s calls, in order: every form of allreduce and
/// reduce_scatter, reduce at roots 0, `n-1` and two random ones, the
/// overlapping ones, two broadcasts from random roots.
fn calls(w: &World) -> Vec<Call> {
    let n = w.n;
    let root = |k: u64| (hash(&[w.seed, k]) % n as u64) as usize;
    let mut v = Vec::new();
    for (in_place, nb) in [(false, false), (true, false), (false, true), (true, true)] {
        v.push(Call::Allreduce { in_place, nb });
        v.push(Call::ReduceScatter { in_place, nb });
    }
    for (k, (in_place, nb)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let root = match k {
            0 => 0,
            1 => n - 1,
            _ => root(k as u64),
        };
        v.push(Call::Reduce { root, in_place, nb });
    }
    v.push(Call::Overlap { root: root(9) });
    v.push(Call::Broadcast {
        root: root(10),
        nb: false,
    });
    v.push(Call::Broadcast {
        root: root(11),
        nb: true,
    });
    v
}

/// The values of call `ci` with operator `op`: element `i` of rank `r`'s
/// buffer `sub` is a function of all of them and the seed, so the checker
/// regenerates every rank's inputs.
struct Gen {
    seed: u64,
    op: ReduceOp,
    ci: usize,
}

/// The `sub` of the initial contents of output buffers (`SENTINEL + k`
/// for a call's `k`-th output): a call that must not write them leaves
/// them so.
const SENTINEL: u64 = 100;

impl Gen {
    fn buf<T: Adv>(&self, sub: u64, r: usize, len: usize) -> Vec<T> {
        let h = hash(&[self.seed, self.op as u64, self.ci as u64, sub, r as u64]);
        (0..len)
            .map(|i| T::draw(self.op, mix(h ^ i as u64)))
            .collect()
    }

    /// Every rank's element `i` of buffer `sub`.
    fn column<T: Adv>(&self, sub: u64, n: usize, i: usize) -> Vec<T> {
        (0..n)
            .map(|r| {
                let h = hash(&[self.seed, self.op as u64, self.ci as u64, sub, r as u64]);
                T::draw(self.op, mix(h ^ i as u64))
            })
            .collect()
    }

    fn allreduce<T: Adv>(&self, w: &World, sub: u64) -> Vec<T> {
        (0..w.count)
            .map(|i| {
                let xs = self.column::<T>(sub, w.n, i);
                fold(self.op, w.allreduce_order::<T>(i), &xs)
            })
            .collect()
    }

    fn reduce<T: Adv>(&self, w: &World, sub: u64, root: usize) -> Vec<T> {
        let order = w.reduce_order::<T>(root);
        (0..w.count)
            .map(|i| fold(self.op, order, &self.column::<T>(sub, w.n, i)))
            .collect()
    }

    /// Block `r` of a reduce_scatter of `n` blocks of `count`.
    fn reduce_scatter<T: Adv>(&self, w: &World, sub: u64, r: usize) -> Vec<T> {
        (r * w.count..(r + 1) * w.count)
            .map(|i| {
                let xs = self.column::<T>(sub, w.n, i);
                fold(self.op, Order::Ring { first: r + 1 }, &xs)
            })
            .collect()
    }
}

type Res<T> = tandem_driver::Result<T>;

/// Runs call `c` on this rank; its output buffers.
fn run_call<T: Adv>(comm: &Comm, w: &World, c: Call, g: &Gen) -> Res<Vec<Vec<T>>> {
    let (n, r, m) = (comm.size(), comm.rank(), w.count);
    let op = g.op;
    Ok(match c {
        Call::Allreduce { in_place: true, nb } => {
            let mut buf = g.buf::<T>(0, r, m);
            if nb {
                comm.scope(|s| -> Res<()> {
                    let mut q = s.iallreduce_in_place(&mut buf, op)?;
                    while q.test()?.is_none() {}
                    Ok(())
                })??;
            } else {
                comm.allreduce_in_place(&mut buf, op)?;
            }
            vec![buf]
        }
        Call::Allreduce {
            in_place: false,
            nb,
        } => {
            let send = g.buf::<T>(0, r, m);
            let mut out = g.buf::<T>(SENTINEL, r, m);
            if nb {
                comm.scope(|s| s.iallreduce(&send, &mut out, op)?.wait())??;
            } else {
                comm.allreduce(&send, &mut out, op)?;
            }
            vec![out]
        }
        Call::Reduce {
            root,
            in_place: true,
            nb,
        } => {
            let mut buf = g.buf::<T>(0, r, m);
            if nb {
                comm.scope(|s| s.ireduce_in_place(&mut buf, op, root)?.wait())??;
            } else {
                comm.reduce_in_place(&mut buf, op, root)?;
            }
            vec![buf]
        }
        Call::Reduce {
            root,
            in_place: false,
            nb,
        } => {
            let send = g.buf::<T>(0, r, m);
            // A non-root's output may be empty: the non-blocking call's is.
            let len = if nb && r != root { 0 } else { m };
            let mut out = g.buf::<T>(SENTINEL, r, len);
            if nb {
                comm.scope(|s| s.ireduce(&send, &mut out, op, root)?.wait())??;
            } else {
                comm.reduce(&send, &mut out, op, root)?;
            }
            vec![out]
        }
        Call::ReduceScatter { in_place: true, nb } => {
            let mut buf = g.buf::<T>(0, r, n * m);
            if nb {
                comm.scope(|s| s.ireduce_scatter_in_place(&mut buf, op)?.wait())??;
            } else {
                comm.reduce_scatter_in_place(&mut buf, op)?;
            }
            vec![buf]
        }
        Call::ReduceScatter {
            in_place: false,
            nb,
        } => {
            let send = g.buf::<T>(0, r, n * m);
            let mut out = g.buf::<T>(SENTINEL, r, m);
            if nb {
                comm.scope(|s| s.ireduce_scatter(&send, &mut out, op)?.wait())??;
            } else {
                comm.reduce_scatter(&send, &mut out, op)?;
            }
            vec![out]
        }
        Call::Overlap { root } => {
            let (a, b) = (g.buf::<T>(0, r, m), g.buf::<T>(1, r, m));
            let (c, d) = (g.buf::<T>(2, r, n * m), g.buf::<T>(3, r, m));
            let mut oa = g.buf::<T>(SENTINEL, r, m);
            let mut ob = g.buf::<T>(SENTINEL + 1, r, m);
            let mut oc = g.buf::<T>(SENTINEL + 2, r, m);
            let mut od = g.buf::<T>(SENTINEL + 3, r, m);
            comm.scope(|s| -> Res<()> {
                let qa = s.iallreduce(&a, &mut oa, op)?;
                let qb = s.ireduce(&b, &mut ob, op, root)?;
                let qc = s.ireduce_scatter(&c, &mut oc, op)?;
                comm.allreduce(&d, &mut od, op)?;
                qc.wait()?;
                qb.wait()?;
                drop(qa); // the scope's end waits for it
                Ok(())
            })??;
            vec![oa, ob, oc, od]
        }
        Call::Broadcast { root, nb } => {
            let mut buf = g.buf::<T>(if r == root { 0 } else { SENTINEL }, r, m);
            if nb {
                comm.scope(|s| s.ibroadcast(&mut buf, root)?.wait())??;
            } else {
                comm.broadcast(&mut buf, root)?;
            }
            vec![buf]
        }
    })
}

/// What rank `r`'s output buffers of call `c` must hold.
fn expect<T: Adv>(w: &World, c: Call, g: &Gen, r: usize) -> Vec<Vec<T>> {
    let (n, m) = (w.n, w.count);
    match c {
        Call::Allreduce { .. } => vec![g.allreduce(w, 0)],
        Call::Reduce {
            root,
            in_place: true,
            ..
        } => vec![if r == root {
            g.reduce(w, 0, root)
        } else {
            g.buf(0, r, m)
        }],
        Call::Reduce { root, nb, .. } => vec![if r == root {
            g.reduce(w, 0, root)
        } else {
            g.buf(SENTINEL, r, if nb { 0 } else { m })
        }],
        Call::ReduceScatter { in_place: true, .. } => {
            let mut buf = g.buf::<T>(0, r, n * m);
            buf[r * m..(r + 1) * m].copy_from_slice(&g.reduce_scatter(w, 0, r));
            vec![buf]
        }
        Call::ReduceScatter { .. } => vec![g.reduce_scatter(w, 0, r)],
        Call::Overlap { root } => vec![
            g.allreduce(w, 0),
            if r == root {
                g.reduce(w, 1, root)
            } else {
                g.buf(SENTINEL + 1, r, m)
            },
            g.reduce_scatter(w, 2, r),
            g.allreduce(w, 3),
        ],
        Call::Broadcast { root, .. } => vec![g.buf(0, root, m)],
    }
}

/// The two operators call `ci` runs with: for floats one of `min`/`max`
/// (ties, NaNs) and one of sum/product (rounding), in turn; for integers
/// operators three apart in `ReduceOp::ALL`, in turn.
fn ops_for<T: Adv>(w: &World, ci: usize) -> [ReduceOp; 2] {
    let (ops, k) = (T::OPS, ci + w.seed as usize % 7);
    [ops[k % ops.len()], ops[(k + ops.len() / 2) % ops.len()]]
}

/// Which input buffer and element output buffer `j`'s element `i` of
/// rank `r` reduces (`None`: not a reduction's element).
fn source(c: Call, j: usize, r: usize, m: usize, i: usize) -> Option<(u64, usize)> {
    match (c, j) {
        (
            Call::ReduceScatter {
                in_place: false, ..
            },
            _,
        )
        | (Call::Overlap { .. }, 2) => (i < m).then_some((j as u64, r * m + i)),
        (Call::ReduceScatter { in_place: true, .. }, _) => {
            (r * m <= i && i < (r + 1) * m).then_some((0, i))
        }
        _ => (i < m).then_some((j as u64, i)),
    }
}

fn hex<T: Element>(x: &T) -> String {
    let b = bytemuck::bytes_of(x);
    b.iter().rev().map(|x| format!("{x:02x}")).collect()
}

/// Runs every call form, each with two operators, in one world and checks
/// each rank's outputs bitwise. A barrier first: no rank may leave it
/// before every rank entered.
fn check_world<T: Adv>(w: World) -> Result<(), TestCaseError> {
    let entered = AtomicU64::new(0);
    let outs = Comm::threads(w.n, &Layout::default(), cfg(), |comm| {
        for c in Collective::ALL {
            comm.set_algorithm(c, w.mode.forced());
        }
        comm.set_pipeline(w.chunk, w.lanes)?;
        entered.fetch_add(1, Ordering::SeqCst);
        comm.barrier()?;
        let seen = entered.load(Ordering::SeqCst);
        if seen != w.n as u64 {
            return Err(tandem_driver::Error::from(std::io::Error::other(format!(
                "left the barrier after {seen} of {} ranks entered",
                w.n
            ))));
        }
        let mut outs = Vec::new();
        for (ci, c) in calls(&w).into_iter().enumerate() {
            for op in ops_for::<T>(&w, ci) {
                let g = Gen {
                    seed: w.seed,
                    op,
                    ci,
                };
                outs.push(run_call::<T>(&comm, &w, c, &g)?);
            }
        }
        Ok(outs)
    });
    let mut per_rank = Vec::new();
    for (r, o) in outs.into_iter().enumerate() {
        per_rank.push(o.map_err(|e| TestCaseError::fail(format!("{w:?}: rank {r}: {e}")))?);
    }
    let mut k = 0;
    for (ci, c) in calls(&w).into_iter().enumerate() {
        for op in ops_for::<T>(&w, ci) {
            let g = Gen {
                seed: w.seed,
                op,
                ci,
            };
            for (r, outs) in per_rank.iter().enumerate() {
                let want = expect::<T>(&w, c, &g, r);
                for (j, (got, want)) in outs[k].iter().zip(&want).enumerate() {
                    let same = got.len() == want.len()
                        && bytemuck::cast_slice::<T, u8>(got)
                            == bytemuck::cast_slice::<T, u8>(want);
                    if same {
                        continue;
                    }
                    let i = (0..got.len().min(want.len()))
                        .find(|&i| hex(&got[i]) != hex(&want[i]))
                        .unwrap_or(got.len().min(want.len()));
                    return Err(TestCaseError::fail(format!(
                        "{:?} {op} {c:?} buffer {j} on rank {r} of {w:?}: element {i} of {}/{} is {} ({:?}), want {} ({:?}); \
                         the ranks' inputs there (allreduce/reduce order): {:?}",
                        T::DTYPE,
                        got.len(),
                        want.len(),
                        got.get(i).map(hex).unwrap_or_default(),
                        got.get(i),
                        want.get(i).map(hex).unwrap_or_default(),
                        want.get(i),
                        source(c, j, r, w.count, i).map(|(sub, at)| g
                            .column::<T>(sub, w.n, at)
                            .iter()
                            .map(hex)
                            .collect::<Vec<_>>()),
                    )));
                }
                if outs[k].len() != want.len() {
                    return Err(TestCaseError::fail(format!("{c:?}: buffer count")));
                }
            }
            k += 1;
        }
    }
    Ok(())
}

/// A count for world `(n, mode)`: around the direct-path limit, the
/// automatic crossovers, pipelined sizes, small and odd ones.
fn count_for(seed: u64, es: usize, n: usize, mode: Mode) -> usize {
    let fm = FAST_MAX / es;
    let sizes = [
        0,
        1,
        2,
        3,
        5,
        7,
        13,
        2048 / es,
        2048 / es + 1,
        fm - 1,
        fm,
        fm + 1,
        fm / n,
        fm / n + 1,
        32768 / es,
        32768 / es + 1,
        3 * fm + 5,
    ];
    let h = hash(&[seed, n as u64, mode as u64, 77]);
    match h % 4 {
        0 => 1 + (h >> 8) as usize % 600,
        _ => sizes[(h >> 8) as usize % sizes.len()],
    }
}

/// Every rank count 1–5, each with a random mode, for type `T`.
fn sweep<T: Adv>(seed: u64, chunk: usize, lanes: usize) -> Result<(), TestCaseError> {
    let es = std::mem::size_of::<T>();
    for n in 1..=5 {
        let mode = Mode::ALL[(hash(&[seed, n as u64, 3]) % 3) as usize];
        let count = count_for(seed, es, n, mode);
        // At most MAX_SLICES slices of the largest pipelined buffer.
        let chunk = chunk.max((n * count * es).div_ceil(MAX_SLICES));
        check_world::<T>(World {
            n,
            mode,
            count,
            chunk,
            lanes,
            seed,
        })?;
    }
    Ok(())
}

fn chunks() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![1usize, 3, 8, 100, 1000, 4096, 8192, 8193, 1 << 20])
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 12,
        max_shrink_iters: 16,
        max_shrink_time: 30_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// f64, f32, f16 and bf16 sums, products, minima and maxima with
    /// adversarial values (signed-zero ties, NaN payloads, infinities,
    /// rounding that depends on association) equal the sequential fold in
    /// each algorithm's documented order, bitwise, on every rank, for every
    /// call form, 1–5 ranks, both algorithms and the automatic choice.
    #[test]
    fn float_reductions_follow_the_documented_order_bitwise(
        dt in 0usize..4,
        seed in any::<u64>(),
        chunk in chunks(),
        lanes in 1usize..=3,
    ) {
        match dt {
            0 => sweep::<f64>(seed, chunk, lanes)?,
            1 => sweep::<f32>(seed, chunk, lanes)?,
            2 => sweep::<f16>(seed, chunk, lanes)?,
            _ => sweep::<bf16>(seed, chunk, lanes)?,
        }
    }

    /// Integer reductions (wrapping sums and products, min, max, bitwise
    /// operators; values at the type's extremes) are exact on every rank,
    /// for every call form, 1–5 ranks and every algorithm.
    #[test]
    fn integer_reductions_are_exact_with_wrapping(
        dt in 0usize..6,
        seed in any::<u64>(),
        chunk in chunks(),
        lanes in 1usize..=3,
    ) {
        match dt {
            0 => sweep::<u8>(seed, chunk, lanes)?,
            1 => sweep::<i8>(seed, chunk, lanes)?,
            2 => sweep::<i32>(seed, chunk, lanes)?,
            3 => sweep::<u32>(seed, chunk, lanes)?,
            4 => sweep::<i64>(seed, chunk, lanes)?,
            _ => sweep::<u64>(seed, chunk, lanes)?,
        }
    }
}

/// The automatic choice takes the tree up to exactly 2048 bytes
/// (allreduce) and 32768 bytes (reduce) and the ring from one element
/// more, seen in the reduction order, which differs between the two; on 3
/// ranks (the table) and 4 (the direct paths for small messages).
#[test]
fn the_automatic_choice_switches_at_the_documented_sizes() {
    for n in [3, 4] {
        for count in [512, 513, 8192, 8193] {
            let w = World {
                n,
                mode: Mode::Auto,
                count,
                chunk: 1 << 20,
                lanes: 1,
                seed: 0xc0ffee + count as u64,
            };
            if let Err(e) = check_world::<f32>(w) {
                panic!("{e}");
            }
        }
    }
}

/// A float sum or product whose result is NaN is the same NaN on every
/// rank, whatever NaN payloads the ranks contribute: recursive doubling's
/// partners run the kernel with the output as the first operand on one
/// rank and as the second on the other, and the hardware's choice of which
/// NaN payload to propagate must not show (the kernels propagate the first
/// NaN operand). Blocking (the direct path on 2 and 4 ranks), in place and
/// non-blocking (the table), on 2, 3 and 4 ranks.
#[test]
fn nan_results_are_bitwise_identical_on_every_rank() {
    fn one<T: Adv + Float>(n: usize, op: ReduceOp) {
        let outs = Comm::threads(n, &Layout::default(), cfg(), |comm| {
            comm.set_algorithm(Collective::Allreduce, Some(Algorithm::Tree));
            let r = comm.rank() as u64;
            // Distinct payloads and signs; one rank adds an infinity of the
            // other sign to a NaN.
            let mine: Vec<T> = (0..9)
                .map(|i| match (i + r) % 3 {
                    0 => nan_of::<T>(r * 8 + i, true),
                    1 => T::of(if r % 2 == 0 { f64::INFINITY } else { -1e-3 }),
                    _ => nan_of::<T>(r * 8 + i + 3, i % 2 == 0),
                })
                .collect();
            let mut a = vec![T::of(0.0); mine.len()];
            comm.allreduce(&mine, &mut a, op)?;
            let mut b = mine.clone();
            comm.allreduce_in_place(&mut b, op)?;
            let mut c = vec![T::of(0.0); mine.len()];
            comm.scope(|s| s.iallreduce(&mine, &mut c, op)?.wait())??;
            let bits = |v: &[T]| bytemuck::cast_slice::<T, u8>(v).to_vec();
            Ok([bits(&a), bits(&b), bits(&c)])
        });
        let outs: Vec<_> = outs.into_iter().map(|o| o.unwrap()).collect();
        for (r, o) in outs.iter().enumerate() {
            for (form, v) in o.iter().enumerate() {
                assert_eq!(
                    v,
                    &outs[0][0],
                    "{:?} {op} on {n} ranks: rank {r}'s form {form} differs from rank 0",
                    T::DTYPE
                );
            }
        }
    }
    for n in [2, 3, 4] {
        for op in [ReduceOp::Sum, ReduceOp::Prod] {
            one::<f64>(n, op);
            one::<f32>(n, op);
            one::<f16>(n, op);
            one::<bf16>(n, op);
        }
    }
}
