//! `tandem-perf allreduce|reduce|broadcast|allgather|reduce_scatter|alltoall`:
//! nccl-tests-style sweeps of tandem's collectives over `n` rank processes,
//! and the reduction kernel against memcpy.
//!
//! Columns as nccl-tests prints them: `size` (bytes, as nccl-tests defines
//! it per collective: the buffer for allreduce, reduce and broadcast, the
//! whole output of allgather, the whole input of reduce_scatter, the whole
//! send buffer of alltoall), `count` (elements), `type`, `redop`, `root`,
//! `time` (median µs per call over the slowest rank of each iteration),
//! `algbw` (size / time, GB/s) and `busbw` (algbw times nccl-tests' factor:
//! 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter and
//! alltoall, 1 for broadcast and reduce), and `#wrong` (elements that
//! differ from the expected result on any rank, checked once per size).

use crate::stats::{fmt_size, percentile};
use std::time::{Duration, Instant};
use tandem_driver::{bf16, bytemuck, f16, Collective, Comm, Dtype, Element, ReduceOp, Result};
use tandem_gpu::{coll, DeviceBuf, Gpu, GpuError};

/// A sweep's settings.
#[derive(Debug, Clone)]
pub struct CollOpts {
    /// Which collective.
    pub coll: Collective,
    /// Ranks.
    pub n: usize,
    /// Smallest and largest size in bytes.
    pub min: usize,
    /// Largest size in bytes.
    pub max: usize,
    /// Iterations for small sizes (fewer for large ones).
    pub iters: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Reduction.
    pub op: ReduceOp,
    /// Root of reduce and broadcast.
    pub root: usize,
}

/// One size's result (on rank 0).
#[derive(Debug, Clone, Copy)]
pub struct CollRow {
    /// Bytes, as nccl-tests defines them for the collective.
    pub size: usize,
    /// Elements of the buffer `size` describes.
    pub count: usize,
    /// Median µs per call (slowest rank per iteration).
    pub p50_us: f64,
    /// 99th percentile µs.
    pub p99_us: f64,
    /// size / time, GB/s.
    pub algbw: f64,
    /// algbw times the bus factor.
    pub busbw: f64,
    /// Elements differing from the expected result, over all ranks.
    pub wrong: u64,
}

/// nccl-tests' bus-bandwidth factor for `c` on `n` ranks.
pub fn bus_factor(c: Collective, n: usize) -> f64 {
    let n = n as f64;
    match c {
        Collective::Allreduce => 2.0 * (n - 1.0) / n,
        Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => (n - 1.0) / n,
        Collective::Reduce | Collective::Broadcast | Collective::Barrier => 1.0,
    }
}

/// Element types the benchmark fills with small exact integers.
trait Num: Element {
    fn of(x: u64) -> Self;
}
macro_rules! num {
    ($($t:ty),*) => {$(impl Num for $t { fn of(x: u64) -> Self { x as $t } })*};
}
num!(u8, i8, i32, u32, i64, u64, f32, f64);
impl Num for f16 {
    fn of(x: u64) -> Self {
        f16::from_f32(x as f32)
    }
}
impl Num for bf16 {
    fn of(x: u64) -> Self {
        bf16::from_f32(x as f32)
    }
}

/// Rank `r`'s value at `i`: 1..=4, so sums over up to 8 ranks stay exact
/// in every type (also 8-bit and 16-bit floats).
fn val(r: usize, i: usize) -> u64 {
    ((r + i) % 4) as u64 + 1
}

fn expect(op: ReduceOp, n: usize, i: usize) -> u64 {
    let xs = (0..n).map(|r| val(r, i));
    match op {
        ReduceOp::Sum => xs.sum(),
        ReduceOp::Prod => xs.product(),
        ReduceOp::Min => xs.min().unwrap_or(0),
        ReduceOp::Max => xs.max().unwrap_or(0),
        ReduceOp::BitAnd => xs.reduce(|a, b| a & b).unwrap_or(0),
        ReduceOp::BitOr => xs.reduce(|a, b| a | b).unwrap_or(0),
        ReduceOp::BitXor => xs.reduce(|a, b| a ^ b).unwrap_or(0),
    }
}

/// Element count per rank buffer for `size` bytes: (send, recv) lengths.
fn lens(c: Collective, n: usize, count: usize) -> (usize, usize) {
    match c {
        Collective::Allgather => (count / n, count),
        Collective::ReduceScatter => (count, count / n),
        _ => (count, count),
    }
}

/// Where a sweep's buffers live and how the collective is called on them.
trait Bufs {
    /// What a call can fail with.
    type Err: From<tandem_driver::Error>;
    /// Makes room for buffers of `count` elements (before the timed calls).
    fn prepare(
        &mut self,
        comm: &Comm,
        o: &CollOpts,
        count: usize,
    ) -> std::result::Result<(), Self::Err>;
    /// One call of the collective on `count` elements.
    fn call(
        &mut self,
        comm: &Comm,
        o: &CollOpts,
        count: usize,
    ) -> std::result::Result<(), Self::Err>;
    /// Fills the inputs, runs once, counts wrong elements on this rank.
    fn check(
        &mut self,
        comm: &Comm,
        o: &CollOpts,
        count: usize,
    ) -> std::result::Result<u64, Self::Err>;
}

/// The inputs of a checked call: this rank's send values, and its receive
/// buffer's (the root's data where broadcast reads it, zeros elsewhere).
fn fill<T: Num>(comm: &Comm, o: &CollOpts, send: &mut [T], recv: &mut [T]) {
    let me = comm.rank();
    for (i, x) in send.iter_mut().enumerate() {
        *x = T::of(val(me, i));
    }
    for (i, x) in recv.iter_mut().enumerate() {
        *x = if o.coll == Collective::Broadcast && me == o.root {
            T::of(val(me, i))
        } else {
            T::of(0)
        };
    }
}

/// The elements of `got` (this rank's result of a call on `count`
/// elements) that differ from what the collective must give.
fn wrong<T: Num>(comm: &Comm, o: &CollOpts, count: usize, got: &[T]) -> u64 {
    let (n, me) = (comm.size(), comm.rank());
    let m = count / n;
    let want = |i: usize| -> Option<u64> {
        Some(match o.coll {
            Collective::Allreduce => expect(o.op, n, i),
            Collective::Reduce if me == o.root => expect(o.op, n, i),
            Collective::Reduce => return None,
            Collective::Broadcast => val(o.root, i),
            Collective::Allgather => val(i / m.max(1), i % m.max(1)),
            Collective::ReduceScatter => expect(o.op, n, me * m + i),
            Collective::Alltoall => val(i / m.max(1), me * m + i % m.max(1)),
            Collective::Barrier => return None,
        })
    };
    (0..got.len())
        .filter(|&i| want(i).is_some_and(|w| got[i] != T::of(w)))
        .count() as u64
}

/// Host buffers, allocated once at the largest size.
struct Bench<T> {
    send: Vec<T>,
    recv: Vec<T>,
}

impl<T: Num> Bench<T> {
    fn new(max_count: usize) -> Self {
        Self {
            send: vec![T::of(0); max_count],
            recv: vec![T::of(0); max_count],
        }
    }
}

impl<T: Num> Bufs for Bench<T> {
    type Err = tandem_driver::Error;

    fn prepare(&mut self, _: &Comm, _: &CollOpts, _: usize) -> Result<()> {
        Ok(())
    }

    fn call(&mut self, comm: &Comm, o: &CollOpts, count: usize) -> Result<()> {
        let (s, r) = lens(o.coll, comm.size(), count);
        let (send, recv) = (&self.send[..s], &mut self.recv[..r]);
        match o.coll {
            Collective::Allreduce => comm.allreduce(send, recv, o.op),
            Collective::Reduce => comm.reduce(send, recv, o.op, o.root),
            Collective::Broadcast => comm.broadcast(recv, o.root),
            Collective::Allgather => comm.allgather(send, recv),
            Collective::ReduceScatter => comm.reduce_scatter(send, recv, o.op),
            Collective::Alltoall => comm.alltoall(send, recv),
            Collective::Barrier => comm.barrier(),
        }
    }

    fn check(&mut self, comm: &Comm, o: &CollOpts, count: usize) -> Result<u64> {
        let (s, r) = lens(o.coll, comm.size(), count);
        fill(comm, o, &mut self.send[..s], &mut self.recv[..r]);
        self.call(comm, o, count)?;
        Ok(wrong(comm, o, count, &self.recv[..r]))
    }
}

/// Device buffers of one GPU, allocated for each size before its timed
/// calls (tandem-gpu's collectives take whole buffers).
struct DevBench<'g, T> {
    gpu: &'g Gpu,
    send: DeviceBuf,
    recv: DeviceBuf,
    _t: std::marker::PhantomData<T>,
}

impl<T: Num> Bufs for DevBench<'_, T> {
    type Err = GpuError;

    fn prepare(
        &mut self,
        comm: &Comm,
        o: &CollOpts,
        count: usize,
    ) -> std::result::Result<(), GpuError> {
        let (s, r) = lens(o.coll, comm.size(), count);
        let es = std::mem::size_of::<T>();
        self.send = self.gpu.alloc(s * es)?;
        self.recv = self.gpu.alloc(r * es)?;
        Ok(())
    }

    fn call(&mut self, comm: &Comm, o: &CollOpts, _: usize) -> std::result::Result<(), GpuError> {
        let (g, send, recv) = (self.gpu, &self.send, &mut self.recv);
        match o.coll {
            Collective::Allreduce => coll::allreduce::<T>(comm, g, send, recv, o.op),
            Collective::Reduce => coll::reduce::<T>(comm, g, send, recv, o.op, o.root),
            Collective::Broadcast => coll::broadcast::<T>(comm, g, recv, o.root),
            Collective::Allgather => coll::allgather::<T>(comm, g, send, recv),
            Collective::ReduceScatter => coll::reduce_scatter::<T>(comm, g, send, recv, o.op),
            Collective::Alltoall => coll::alltoall::<T>(comm, g, send, recv),
            Collective::Barrier => Ok(comm.barrier()?),
        }
    }

    fn check(
        &mut self,
        comm: &Comm,
        o: &CollOpts,
        count: usize,
    ) -> std::result::Result<u64, GpuError> {
        let (s, r) = lens(o.coll, comm.size(), count);
        let (mut send, mut recv) = (vec![T::of(0); s], vec![T::of(0); r]);
        fill(comm, o, &mut send, &mut recv);
        self.send = self.gpu.upload(bytemuck::cast_slice(&send))?;
        self.recv = self.gpu.upload(bytemuck::cast_slice(&recv))?;
        self.call(comm, o, count)?;
        let got = self.gpu.download(&self.recv)?;
        // Downloaded bytes need not be aligned for `T`: read them one by one.
        let got: Vec<T> = got
            .chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect();
        Ok(wrong(comm, o, count, &got))
    }
}

/// `$m!(T)` for the element type `T` that the [`Dtype`] `$d` names.
macro_rules! by_dtype {
    ($d:expr, $m:ident) => {
        match $d {
            Dtype::U8 => $m!(u8),
            Dtype::I8 => $m!(i8),
            Dtype::I32 => $m!(i32),
            Dtype::U32 => $m!(u32),
            Dtype::I64 => $m!(i64),
            Dtype::U64 => $m!(u64),
            Dtype::F16 => $m!(f16),
            Dtype::Bf16 => $m!(bf16),
            Dtype::F32 => $m!(f32),
            Dtype::F64 => $m!(f64),
        }
    };
}

/// Iterations for `bytes`: `base` for small sizes, about 1 GiB of traffic
/// for large ones, at least 5.
fn iters_for(bytes: usize, base: u64) -> u64 {
    if bytes <= 64 << 10 {
        base
    } else {
        ((1u64 << 30) / bytes as u64).clamp(5, base)
    }
}

/// Runs the sweep on `comm`; rank 0 gets the rows.
///
/// # Errors
/// The first error of a collective ([`Comm::allreduce`] lists them): every
/// rank must run the same sweep, with `o` alike.
pub fn sweep(comm: &Comm, o: &CollOpts, sizes: &[usize]) -> Result<Vec<CollRow>> {
    macro_rules! host {
        ($t:ty) => {
            sweep_t::<$t, _>(comm, o, sizes, |m| Ok(Bench::<$t>::new(m)))
        };
    }
    by_dtype!(o.dtype, host)
}

/// [`sweep`] with device buffers on `gpu` (tandem-gpu's collectives,
/// staged through pinned host memory).
///
/// # Errors
/// As [`sweep`], and [`GpuError`] where a device allocation or copy
/// fails.
pub fn sweep_device(
    comm: &Comm,
    gpu: &Gpu,
    o: &CollOpts,
    sizes: &[usize],
) -> std::result::Result<Vec<CollRow>, GpuError> {
    macro_rules! device {
        ($t:ty) => {
            sweep_t::<$t, _>(comm, o, sizes, |_| {
                Ok(DevBench::<$t> {
                    gpu,
                    send: gpu.alloc(0)?,
                    recv: gpu.alloc(0)?,
                    _t: std::marker::PhantomData,
                })
            })
        };
    }
    by_dtype!(o.dtype, device)
}

/// The element count for `size` bytes: whole elements, divisible by the
/// rank count where the collective splits its buffer.
pub fn count_for(c: Collective, n: usize, es: usize, size: usize) -> usize {
    let count = size / es;
    match c {
        Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => count / n * n,
        _ => count,
    }
}

/// The sweep over buffers of `T`s that `make` provides (given the largest
/// element count).
fn sweep_t<T: Num, B: Bufs>(
    comm: &Comm,
    o: &CollOpts,
    sizes: &[usize],
    make: impl FnOnce(usize) -> std::result::Result<B, B::Err>,
) -> std::result::Result<Vec<CollRow>, B::Err> {
    let n = comm.size();
    let es = std::mem::size_of::<T>();
    let max_count = sizes
        .iter()
        .map(|&s| count_for(o.coll, n, es, s))
        .max()
        .unwrap_or(0);
    let mut b = make(max_count)?;
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    for &size in sizes {
        let count = count_for(o.coll, n, es, size);
        if seen.contains(&count) {
            continue;
        }
        seen.push(count);
        let bytes = count * es;
        b.prepare(comm, o, count)?;
        let iters = iters_for(bytes, o.iters);
        let batch = if bytes <= 64 << 10 { 8 } else { 1 };
        let samples_n = iters.div_ceil(batch) as usize;
        for _ in 0..(iters / 10).max(2) {
            b.call(comm, o, count)?;
        }
        comm.barrier()?;
        let mut t = vec![0f64; samples_n];
        for x in t.iter_mut() {
            let t0 = Instant::now();
            for _ in 0..batch {
                b.call(comm, o, count)?;
            }
            *x = t0.elapsed().as_nanos() as f64 / batch as f64;
        }
        // The slowest rank of each sample counts.
        let mut slowest = vec![0f64; samples_n];
        comm.allreduce(&t, &mut slowest, ReduceOp::Max)?;
        let wrong_here = b.check(comm, o, count)?;
        let mut wrong = [0u64];
        comm.allreduce(&[wrong_here], &mut wrong, ReduceOp::Sum)?;
        let p50 = percentile(&mut slowest, 50.0);
        let p99 = percentile(&mut slowest, 99.0);
        let algbw = bytes as f64 / p50;
        rows.push(CollRow {
            size: bytes,
            count,
            p50_us: p50 / 1e3,
            p99_us: p99 / 1e3,
            algbw,
            busbw: algbw * bus_factor(o.coll, n),
            wrong: wrong[0],
        });
    }
    Ok(rows)
}

/// The rows as a table with nccl-tests' columns.
pub fn print_table(o: &CollOpts, rows: &[CollRow]) {
    let root = matches!(o.coll, Collective::Reduce | Collective::Broadcast);
    let redop = matches!(
        o.coll,
        Collective::Allreduce | Collective::Reduce | Collective::ReduceScatter
    );
    println!(
        "{:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>10} {:>8} {:>8} {:>7}",
        "size", "count", "type", "redop", "root", "time(us)", "p99(us)", "algbw", "busbw", "#wrong"
    );
    for r in rows {
        println!(
            "{:>12} {:>12} {:>8} {:>6} {:>6} {:>10.2} {:>10.2} {:>8.2} {:>8.2} {:>7}",
            r.size,
            r.count,
            o.dtype.name(),
            if redop { o.op.name() } else { "none" },
            if root { o.root as i64 } else { -1 },
            r.p50_us,
            r.p99_us,
            r.algbw,
            r.busbw,
            r.wrong
        );
    }
}

/// The rows as a JSON array of `{"size","p50_us","p99_us","algbw","busbw","wrong"}`.
pub fn print_json(rows: &[CollRow]) {
    let objs: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"size\": {}, \"p50_us\": {:.4}, \"p99_us\": {:.4}, \"algbw\": {:.4}, \"busbw\": {:.4}, \"wrong\": {}}}",
                r.size, r.p50_us, r.p99_us, r.algbw, r.busbw, r.wrong
            )
        })
        .collect();
    println!("[\n  {}\n]", objs.join(",\n  "));
}

/// The reduction kernel (`dst = dst op src`) and memcpy on the same
/// `bytes`, one thread, in GB/s of output written: `(kernel, memcpy)`.
///
/// # Errors
/// [`Error::InvalidArgument`](tandem_driver::Error::InvalidArgument) if
/// `op` does not apply to `dtype` (a bitwise operator on a float type).
pub fn kernel_vs_memcpy(
    dtype: Dtype,
    op: ReduceOp,
    bytes: usize,
    budget: Duration,
) -> Result<(f64, f64)> {
    fn run<T: Num>(op: ReduceOp, bytes: usize, budget: Duration) -> Result<(f64, f64)> {
        let n = (bytes / std::mem::size_of::<T>()).max(1);
        let mut dst = vec![T::of(1); n];
        let src = vec![T::of(1); n];
        let time =
            |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
                f()?;
                let (mut reps, t0) = (0u64, Instant::now());
                while t0.elapsed() < budget {
                    f()?;
                    reps += 1;
                }
                Ok((n * std::mem::size_of::<T>()) as f64 * reps as f64
                    / t0.elapsed().as_nanos() as f64)
            };
        let k = time(&mut || {
            // Sums grow or wrap from call to call; the cost does not depend
            // on the values (integers, or floats that never go subnormal).
            tandem_driver::reduce_local(&mut dst, std::hint::black_box(&src), op)
        })?;
        let m = time(&mut || {
            dst.copy_from_slice(std::hint::black_box(&src));
            Ok(())
        })?;
        Ok((k, m))
    }
    macro_rules! kernel {
        ($t:ty) => {
            run::<$t>(op, bytes, budget)
        };
    }
    by_dtype!(dtype, kernel)
}

/// Parses an nccl-tests type name (`float`, `half`, `bfloat16`, `int32`,
/// ...) or a Rust one (`f32`, `f16`, `bf16`, `i32`, ...).
pub fn parse_dtype(s: &str) -> Option<Dtype> {
    let rust = [
        ("u8", Dtype::U8),
        ("i8", Dtype::I8),
        ("i32", Dtype::I32),
        ("u32", Dtype::U32),
        ("i64", Dtype::I64),
        ("u64", Dtype::U64),
        ("f16", Dtype::F16),
        ("bf16", Dtype::Bf16),
        ("f32", Dtype::F32),
        ("f64", Dtype::F64),
    ];
    Dtype::ALL
        .into_iter()
        .find(|d| d.name() == s)
        .or_else(|| rust.iter().find(|(n, _)| *n == s).map(|(_, d)| *d))
}

/// A one-line summary of a sweep: small-size latency and large-size busbw.
pub fn summary(o: &CollOpts, rows: &[CollRow]) -> String {
    let small = rows.iter().find(|r| r.size >= 8).or(rows.first());
    let big: Vec<&CollRow> = rows.iter().filter(|r| r.size >= 1 << 20).collect();
    let mut s = format!("# {} on {} ranks, {} {}", o.coll.name(), o.n, o.dtype, o.op);
    if let Some(r) = small {
        s += &format!(
            ": {} B in {:.2} us (p99/p50 {:.2})",
            r.size,
            r.p50_us,
            r.p99_us / r.p50_us
        );
    }
    if let (Some(lo), Some(hi)) = (big.first(), big.last()) {
        s += &format!(
            "; busbw {:.2} GB/s at {} .. {:.2} GB/s at {}",
            lo.busbw,
            fmt_size(lo.size),
            hi.busbw,
            fmt_size(hi.size)
        );
    }
    let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
    s += &format!("; {wrong} wrong");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_counts_and_names() {
        assert_eq!(bus_factor(Collective::Allreduce, 4), 1.5);
        assert_eq!(bus_factor(Collective::Allgather, 2), 0.5);
        assert_eq!(bus_factor(Collective::Broadcast, 8), 1.0);
        assert_eq!(count_for(Collective::Allgather, 3, 4, 100), 24);
        assert_eq!(count_for(Collective::Allreduce, 3, 4, 100), 25);
        assert_eq!(parse_dtype("float"), Some(Dtype::F32));
        assert_eq!(parse_dtype("bf16"), Some(Dtype::Bf16));
        assert_eq!(parse_dtype("float8"), None);
    }

    #[test]
    fn a_small_sweep_on_threads_has_no_wrong_elements() {
        use tandem_driver::{Config, Layout};
        for coll in Collective::ALL
            .into_iter()
            .filter(|c| *c != Collective::Barrier)
        {
            let o = CollOpts {
                coll,
                n: 3,
                min: 8,
                max: 4096,
                iters: 20,
                dtype: Dtype::F32,
                op: ReduceOp::Sum,
                root: 1,
            };
            let out = Comm::threads(3, &Layout::default(), Config::default(), |comm| {
                sweep(&comm, &o, &[12, 4096])
            });
            let rows = out.into_iter().next().unwrap().unwrap();
            assert_eq!(rows.len(), 2);
            assert!(
                rows.iter().all(|r| r.wrong == 0 && r.p50_us > 0.0),
                "{coll:?} {rows:?}"
            );
        }
    }
}
