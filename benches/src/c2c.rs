//! The machine's own limits, measured in the same run as tandem:
//! the cross-process cache-line round trip and single-thread memcpy.

use std::time::{Duration, Instant};

/// Result of [`cache_line_round_trip`].
#[derive(Debug, Clone, Copy)]
pub struct C2c {
    /// Median round trip of one cache line between the two processes.
    pub rtt_ns: f64,
    /// Half of it: the one-way cache-line latency.
    pub one_way_ns: f64,
}

/// Runs `batches * batch` round trips between this process and a forked
/// child over a fresh shared anonymous mapping of `len` bytes; returns the
/// median round trip in ns (first quarter of batches skipped as warm-up).
/// `parent(base, i)` does round trip `i` (send, then wait for the reply);
/// `child(base, i)` answers it. Both processes arm a 60 s alarm so a lost
/// partner cannot hang the run.
///
/// Must be called before this process starts threads (it forks).
fn forked_round_trips(
    cores: Option<(usize, usize)>,
    len: usize,
    batches: u64,
    batch: u64,
    parent: impl FnOnce(*mut u8) -> Box<dyn FnMut(u64)>,
    child: impl FnOnce(*mut u8) -> Box<dyn FnMut(u64)>,
) -> std::io::Result<f64> {
    // SAFETY: a fresh anonymous shared mapping; checked for failure below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let base = p as *mut u8;
    // SAFETY: fork in a single-threaded process (documented contract); the
    // child only runs `child` over the shared mapping and calls _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: alarm only arms a timer.
        unsafe { libc::alarm(60) };
        if let Some((_, c)) = cores {
            core_affinity::set_for_current(core_affinity::CoreId { id: c });
        }
        let mut f = child(base);
        for i in 1..=batches * batch {
            f(i);
        }
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let saved = Affinity::save();
    if let Some((c, _)) = cores {
        core_affinity::set_for_current(core_affinity::CoreId { id: c });
    }
    // SAFETY: alarm only arms a timer (disarmed below).
    unsafe { libc::alarm(60) };
    let mut f = parent(base);
    let mut samples = Vec::with_capacity(batches as usize);
    let mut i = 0u64;
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            i += 1;
            f(i);
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    // SAFETY: disarms our alarm; reaps our own child.
    unsafe {
        libc::alarm(0);
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
    }
    drop(f);
    // SAFETY: unmapping what we mapped; nothing refers to it any more.
    unsafe { libc::munmap(p, len) };
    drop(saved);
    let warm = samples.len() / 4;
    Ok(crate::stats::percentile(&mut samples[warm..], 50.0))
}

/// Two processes bounce a counter through two flags on separate 128-byte
/// spans of shared memory: the floor any shared-memory handshake between
/// them pays.
///
/// Must be called before this process starts threads (it forks).
/// `cores`: pin parent and child to these cores.
pub fn cache_line_round_trip(cores: Option<(usize, usize)>, iters: u64) -> std::io::Result<C2c> {
    use tandem_core::sync::AtomicU64;
    use tandem_core::sync::Ordering::{Acquire, Release};
    let flags = |base: *mut u8|
    // SAFETY: the two counters lie inside the 256-byte mapping, 128-aligned
    // (mmap is page aligned); zero is a valid AtomicU64, and the mapping
    // outlives the closures.
    unsafe {
        (
            &*(base as *const AtomicU64),
            &*(base.add(128) as *const AtomicU64),
        )
    };
    let batch = 64u64;
    let rtt = forked_round_trips(
        cores,
        256,
        (iters / batch).max(16),
        batch,
        |b| {
            let (ping, pong) = flags(b);
            Box::new(move |i| {
                ping.store(i, Release);
                while pong.load(Acquire) != i {
                    std::hint::spin_loop();
                }
            })
        },
        |b| {
            let (ping, pong) = flags(b);
            Box::new(move |i| {
                while ping.load(Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.store(i, Release);
            })
        },
    )?;
    Ok(C2c {
        rtt_ns: rtt,
        one_way_ns: rtt / 2.0,
    })
}

/// The bare line-ring protocol of `tandem-core` between two processes: an
/// 8-byte message each way through two [`tandem_core::line_ring`] rings,
/// no engine, no matching. Returns the median round trip in ns; the gap
/// between this and [`cache_line_round_trip`] is the ring protocol's cost,
/// the gap between this and `pingpong` the engine's.
pub fn line_ring_round_trip(cores: Option<(usize, usize)>, iters: u64) -> std::io::Result<f64> {
    use tandem_core::line_ring::{LineConsumer, LineProducer, LineRing};
    const LINES: usize = 1024;
    let ring_len = LineRing::bytes_needed(LINES)
        .expect("small ring")
        .next_multiple_of(4096);
    let rings = |base: *mut u8, flip: bool| -> (LineProducer<'static>, LineConsumer<'static>) {
        // SAFETY: each ring lies inside the mapping, page aligned, and the
        // mapping outlives the closures.
        let (a, b) = unsafe {
            (
                LineRing::from_raw(base, ring_len, LINES).expect("layout"),
                LineRing::from_raw(base.add(ring_len), ring_len, LINES).expect("layout"),
            )
        };
        if flip {
            (b.producer(), a.consumer())
        } else {
            (a.producer(), b.consumer())
        }
    };
    let side = |base: *mut u8, flip: bool| -> Box<dyn FnMut(u64)> {
        let (mut tx, mut rx) = rings(base, flip);
        Box::new(move |i: u64| {
            let mut buf = [0u8; 8];
            if !flip {
                while !tx.try_write(&[], &i.to_le_bytes()) {
                    std::hint::spin_loop();
                }
            }
            while !rx.try_read(0, 8, &mut buf) {
                std::hint::spin_loop();
            }
            if flip {
                while !tx.try_write(&[], &buf) {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let batch = 64u64;
    forked_round_trips(
        cores,
        2 * ring_len,
        (iters / batch).max(16),
        batch,
        |b| side(b, false),
        |b| side(b, true),
    )
}

/// Single-thread `memcpy` bandwidth in GB/s (10^9 bytes copied per second)
/// for buffers of `size` bytes, copying for about `budget`.
pub fn memcpy_gbps(size: usize, budget: Duration) -> f64 {
    // One allocation, destination offset by half a page past the source, so
    // the two never alias modulo 4 KiB (which would stall the copy on
    // false store-to-load dependencies and understate the machine).
    let gap = size.next_multiple_of(4096) + 2048;
    let mut mem = vec![1u8; gap + size];
    let (a, b) = mem.split_at_mut(gap);
    let src = &a[..size];
    let dst = &mut b[..size];
    dst.copy_from_slice(src);
    let mut best = 0.0f64;
    let start = Instant::now();
    // Several rounds; report the median-ish best of short bursts to damp noise.
    let mut rounds = Vec::new();
    while start.elapsed() < budget || rounds.len() < 3 {
        let reps = (64 << 20) / size.max(1) + 1;
        let t = Instant::now();
        for _ in 0..reps {
            dst.copy_from_slice(std::hint::black_box(src));
            std::hint::black_box(&mut *dst);
        }
        let gbps = (reps * size) as f64 / t.elapsed().as_secs_f64() / 1e9;
        rounds.push(gbps);
        best = best.max(gbps);
    }
    let _ = best;
    crate::stats::percentile(&mut rounds, 50.0)
}

/// Restores this thread's CPU affinity when dropped, so pinning for one
/// measurement does not leak into what runs (or is started) afterwards.
struct Affinity(Option<libc::cpu_set_t>);

impl Affinity {
    fn save() -> Self {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let ok =
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0;
            Self(ok.then_some(set))
        }
    }
}

impl Drop for Affinity {
    fn drop(&mut self) {
        if let Some(set) = &self.0 {
            // SAFETY: restores a mask the kernel gave us.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
        }
    }
}
