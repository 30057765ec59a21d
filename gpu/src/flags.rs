//! Flag-polling handshakes between a GPU and a CPU thread, and between
//! two kernels resident at once on one GPU, in nanoseconds: what a proxy
//! thread and a kernel pay to hand each other work (`tandem-perf
//! gpu-flags`, `tandem-gpu-check`).
//!
//! - **GPU ↔ CPU**: a one-block kernel and a CPU thread bounce a counter
//!   through host-mapped pinned memory (the kernel reads and writes it
//!   over the bus; the CPU in its cache). The CPU times every round trip.
//! - **GPU ↔ GPU**: two one-block kernels on two streams of one process
//!   bounce it through device memory; the first reads the device's global
//!   timer at every round trip. Two *processes* on one GPU are not
//!   measured: without MPS their contexts take turns on the GPU, and what
//!   would be measured is the time-slice scheduler, not a handshake.
//! - Each **two ways**: a flag word and 8 bytes of data in separate cache
//!   lines (the data written first, then the flag, a fence between), and
//!   the LL way (NCCL's low-latency protocol): flag and data in one 64-bit
//!   word, written in one store, no fence.
//!
//! Beside them the caller prints the CPU's own floor measured in the same
//! run (two threads bouncing one cache line).

use crate::device::Gpu;
use crate::{cuda_err, GpuError, Result};
use cudarc::driver::{result, sys, LaunchConfig, PushKernelArg};
use std::time::{Duration, Instant};

/// The kernels, CUDA C (compiled by NVRTC with the reduction kernels'
/// options). `flags` is an array of 48 64-bit words, each used one
/// a cache line apart: word 0 the ping, word 8 the pong, words 16 and 24
/// their data for the two-line way, word 32 the host's request that every
/// side stop, word 40 the round trips the pinging kernel completed. `ll`
/// selects the one-word way. A side gives up after `limit_ns` without an
/// answer, or when word 32 is set. `times` gets the global timer's span
/// (ns) of each batch of round trips of the pinging kernel.
pub const SOURCE: &str = r#"
/* The device's global timer, in ns. */
__device__ static unsigned long long tandem_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Whether a side that began waiting at t0 gives up: the host asked every
   side to stop (word 32), or limit_ns passed. Checked every 1024 polls, so
   the poll itself stays one load. */
__device__ static int tandem_give_up(volatile unsigned long long *f, unsigned int spins,
                                     unsigned long long t0, unsigned long long limit_ns) {
    return (spins & 1023u) == 0 && (f[32] != 0 || tandem_now() - t0 > limit_ns);
}

extern "C" __global__ void tandem_flags_pong(volatile unsigned long long *f, unsigned int iters,
                                             int ll, unsigned long long limit_ns) {
    for (unsigned int i = 1; i <= iters; i++) {
        unsigned long long v, t0 = tandem_now();
        unsigned int spins = 0;
        if (ll) {
            do { v = f[0]; if (tandem_give_up(f, ++spins, t0, limit_ns)) return; } while ((v >> 32) != i);
            f[8] = ((unsigned long long)i << 32) | (v & 0xffffffffull);
        } else {
            do { v = f[0]; if (tandem_give_up(f, ++spins, t0, limit_ns)) return; } while (v != i);
            unsigned long long d = f[16];
            f[24] = d;
            __threadfence_system();
            f[8] = i;
        }
        __threadfence_system();
    }
}

/* Times each batch of `batch` round trips (the global timer ticks coarsely
   on some GPUs: a batch's mean is finer than one round trip's reading) and
   counts round trips done in word 40. */
extern "C" __global__ void tandem_flags_ping(volatile unsigned long long *f, unsigned int iters,
                                             int ll, unsigned long long limit_ns,
                                             unsigned long long *times, unsigned int batch) {
    unsigned long long start = tandem_now();
    for (unsigned int i = 1; i <= iters; i++) {
        unsigned long long v, t0 = tandem_now();
        unsigned int spins = 0;
        if (ll) {
            f[0] = ((unsigned long long)i << 32) | (0x5a5a0000u + i);
            __threadfence();
            do { v = f[8]; if (tandem_give_up(f, ++spins, t0, limit_ns)) return; } while ((v >> 32) != i);
        } else {
            f[16] = 0x5a5a0000ull + i;
            __threadfence();
            f[0] = i;
            __threadfence();
            do { v = f[8]; if (tandem_give_up(f, ++spins, t0, limit_ns)) return; } while (v != i);
        }
        f[40] = i;
        if (i % batch == 0) {
            unsigned long long t = tandem_now();
            times[i / batch - 1] = t - start;
            start = t;
        }
    }
}
"#;

/// Round trips measured, halved (one way), in ns.
#[derive(Debug, Clone, PartialEq)]
pub struct OneWay {
    /// The median.
    pub p50_ns: f64,
    /// The 99th percentile.
    pub p99_ns: f64,
    /// Round trips measured.
    pub n: usize,
}

impl OneWay {
    /// From round-trip times in ns: the halves' p50 and p99.
    pub fn from_round_trips(mut rt: Vec<f64>) -> Self {
        rt.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if rt.is_empty() {
                return f64::NAN;
            }
            rt[((rt.len() - 1) as f64 * q).round() as usize] / 2.0
        };
        Self {
            p50_ns: at(0.5),
            p99_ns: at(0.99),
            n: rt.len(),
        }
    }
}

impl std::fmt::Display for OneWay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.0} ns, p99 {:.0} ns ({} round trips)",
            self.p50_ns, self.p99_ns, self.n
        )
    }
}

/// Words of the flags' array ([`SOURCE`]).
const WORDS: usize = 48;

/// Word the host sets to make every kernel stop.
const STOP: usize = 32;

/// Word counting the pinging kernel's completed round trips.
const DONE: usize = 40;

/// Pinned host memory the device maps: the flags' home for GPU ↔ CPU.
struct Mapped {
    host: *mut u64,
    dev: u64,
    words: usize,
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
}

impl Mapped {
    fn new(gpu: &Gpu, words: usize) -> Result<Self> {
        let bytes = words * 8;
        // The allocation and the mapping need the device's context current
        // on this thread.
        gpu.ctx()
            .bind_to_thread()
            .map_err(cuda_err("binding the device's context"))?;
        // SAFETY: a page-locked allocation the device maps, freed in Drop.
        let raw = unsafe {
            result::malloc_host(
                bytes,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        }
        .map_err(cuda_err("allocating host-mapped memory"))?;
        // SAFETY: `raw` holds `bytes` bytes; zeroed before anyone reads.
        unsafe { std::ptr::write_bytes(raw.cast::<u8>(), 0, bytes) };
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `raw` is host memory allocated with DEVICEMAP above.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, raw, 0) }
            .result()
            .map_err(cuda_err("mapping host memory for the device"))?;
        Ok(Self {
            host: raw.cast(),
            dev,
            words,
            ctx: gpu.ctx().clone(),
        })
    }

    fn load(&self, i: usize) -> u64 {
        assert!(i < self.words);
        // SAFETY: in bounds; the device writes these words concurrently,
        // hence volatile reads (8-byte aligned: whole-word loads).
        unsafe { self.host.add(i).read_volatile() }
    }

    fn store(&self, i: usize, v: u64) {
        assert!(i < self.words);
        // SAFETY: as in `load`.
        unsafe { self.host.add(i).write_volatile(v) };
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_host in `new`; the kernels using it
        // were waited for by the caller (or the process is ending).
        let _ = unsafe { result::free_host(self.host.cast()) };
    }
}

/// How long a kernel waits for an answer before it gives up (a kernel
/// that never got a block to run, a host that stopped): 1 s of the
/// device's global timer.
const LIMIT_NS: u64 = 1_000_000_000;

/// Round trips per timed batch of the GPU ↔ GPU handshake.
const BATCH: u32 = 64;

/// GPU ↔ CPU: a one-block kernel answers the CPU's `iters` pings through
/// host-mapped memory (`ll`: flag and data in one word).
///
/// # Errors
/// [`GpuError::NoGpu`] without NVRTC; [`GpuError::Cuda`] if the launch
/// fails; [`GpuError::InvalidArgument`] if the kernel stops answering
/// (it gave up spinning).
pub fn gpu_cpu(gpu: &Gpu, iters: u32, ll: bool) -> Result<OneWay> {
    let f = gpu.function(SOURCE, "tandem_flags_pong")?;
    let m = Mapped::new(gpu, WORDS)?;
    let stream = gpu
        .ctx()
        .new_stream()
        .map_err(cuda_err("making a stream"))?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let (dev, llw, limit) = (m.dev, ll as i32, LIMIT_NS);
    let mut launch = stream.launch_builder(&f);
    launch.arg(&dev).arg(&iters).arg(&llw).arg(&limit);
    // SAFETY: the kernel's parameters (a device address of WORDS mapped
    // words, iterations, the way, the time limit); `m` outlives the
    // kernel: the stream is synchronized before it is dropped, on every
    // path below.
    unsafe { launch.launch(cfg) }.map_err(cuda_err("launching the pong kernel"))?;
    let mut rt = Vec::with_capacity(iters as usize);
    let mut failed = None;
    for i in 1..=iters as u64 {
        let t = Instant::now();
        let deadline = t + Duration::from_secs(2);
        if ll {
            m.store(0, i << 32 | (0xa5a5_0000 + i));
        } else {
            m.store(16, 0xa5a5_0000 + i);
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            m.store(0, i);
        }
        loop {
            let v = m.load(8);
            let done = if ll { v >> 32 == i } else { v == i };
            if done {
                break;
            }
            if Instant::now() > deadline {
                failed = Some(format!("the kernel did not answer ping {i} within 2 s"));
                break;
            }
            std::hint::spin_loop();
        }
        if failed.is_some() {
            break;
        }
        rt.push(t.elapsed().as_nanos() as f64);
        let data = if ll {
            m.load(8) & 0xffff_ffff
        } else {
            m.load(24)
        };
        if data != 0xa5a5_0000 + i {
            failed = Some(format!("round trip {i}: the kernel echoed {data:#x}"));
            break;
        }
    }
    if failed.is_some() {
        // Stop the kernel before its memory is freed.
        m.store(STOP, 1);
    }
    stream
        .synchronize()
        .map_err(cuda_err("waiting for the pong kernel"))?;
    match failed {
        Some(why) => Err(GpuError::InvalidArgument(why)),
        None => Ok(OneWay::from_round_trips(rt)),
    }
}

/// GPU ↔ GPU: two one-block kernels on two streams bounce `iters` pings
/// (rounded up to a multiple of 64) through device memory; the pinging
/// kernel times each batch of 64 round trips, and p50 and p99 are of the
/// batches' means (the global timer ticks too coarsely on some GPUs to
/// time one round trip).
///
/// # Errors
/// As [`gpu_cpu`]; [`GpuError::InvalidArgument`] if the two kernels were
/// not resident at once (a round trip never completed).
pub fn gpu_gpu(gpu: &Gpu, iters: u32, ll: bool) -> Result<OneWay> {
    let iters = iters.max(1).next_multiple_of(BATCH);
    let ping = gpu.function(SOURCE, "tandem_flags_ping")?;
    let pong = gpu.function(SOURCE, "tandem_flags_pong")?;
    let flags = gpu.alloc(WORDS * 8)?;
    let batches = (iters / BATCH) as usize;
    let times = gpu.alloc(batches * 8)?;
    let (s1, s2) = (
        gpu.ctx()
            .new_stream()
            .map_err(cuda_err("making a stream"))?,
        gpu.ctx()
            .new_stream()
            .map_err(cuda_err("making a stream"))?,
    );
    gpu.synchronize()?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let (f, t) = (gpu.raw_addr(&flags), gpu.raw_addr(&times));
    let (llw, limit, batch) = (ll as i32, LIMIT_NS, BATCH);
    let mut a = s2.launch_builder(&pong);
    a.arg(&f).arg(&iters).arg(&llw).arg(&limit);
    // SAFETY: the kernel's parameters (WORDS device words, iterations,
    // the way, the time limit); the buffers outlive both kernels (the
    // streams are synchronized below, on every path, before they drop).
    unsafe { a.launch(cfg) }.map_err(cuda_err("launching the pong kernel"))?;
    let mut b = s1.launch_builder(&ping);
    b.arg(&f)
        .arg(&iters)
        .arg(&llw)
        .arg(&limit)
        .arg(&t)
        .arg(&batch);
    // SAFETY: as above, and `times` holds `iters / BATCH` words.
    if let Err(e) = unsafe { b.launch(cfg) } {
        // The pong kernel gives up within LIMIT_NS; wait for it before
        // its memory goes.
        let _ = s2.synchronize();
        return Err(cuda_err("launching the ping kernel")(e));
    }
    let done1 = s1.synchronize();
    let done2 = s2.synchronize();
    done1.map_err(cuda_err("waiting for the ping kernel"))?;
    done2.map_err(cuda_err("waiting for the pong kernel"))?;
    let word = |raw: &[u8], i: usize| {
        u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
    };
    let completed = word(&gpu.download(&flags)?, DONE);
    if completed != iters as u64 {
        return Err(GpuError::InvalidArgument(format!(
            "the two kernels were not resident at once ({completed} of {iters} round trips completed)"
        )));
    }
    let raw = gpu.download(&times)?;
    let per_round_trip: Vec<f64> = (0..batches)
        .map(|k| word(&raw, k) as f64 / BATCH as f64)
        .collect();
    let mut w = OneWay::from_round_trips(per_round_trip);
    w.n = iters as usize;
    Ok(w)
}

/// The CPU's floor in the same run: two threads bounce one cache line
/// (flag and data in one word) `iters` times.
pub fn cpu_floor(iters: u32) -> OneWay {
    use std::sync::atomic::Ordering::{Acquire, Release};
    #[allow(clippy::disallowed_types)]
    let line = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let other = line.clone();
    let echo = std::thread::spawn(move || {
        for i in 1..=iters as u64 {
            while other.load(Acquire) != 2 * i - 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i, Release);
        }
    });
    let mut rt = Vec::with_capacity(iters as usize);
    for i in 1..=iters as u64 {
        let t = Instant::now();
        line.store(2 * i - 1, Release);
        while line.load(Acquire) != 2 * i {
            std::hint::spin_loop();
        }
        rt.push(t.elapsed().as_nanos() as f64);
    }
    let _ = echo.join();
    OneWay::from_round_trips(rt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_of_the_one_way_halves() {
        let w = OneWay::from_round_trips((1..=100).map(|x| x as f64 * 10.0).collect());
        assert_eq!(w.n, 100);
        assert_eq!(
            w.p50_ns, 255.0,
            "index round(49.5) = 50 of 10, 20 .. 1000, halved"
        );
        assert_eq!(w.p99_ns, 495.0);
        assert!(OneWay::from_round_trips(Vec::new()).p50_ns.is_nan());
    }

    #[test]
    fn the_cpu_floor_bounces_one_line() {
        let w = cpu_floor(2000);
        assert_eq!(w.n, 2000);
        assert!(w.p50_ns > 0.0 && w.p99_ns >= w.p50_ns, "{w}");
    }
}
