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

/// Two processes (this one and a forked child) bounce a counter through
/// two flags on separate 128-byte spans of a shared anonymous mapping:
/// the floor any shared-memory handshake between them pays.
///
/// Must be called before this process starts threads (it forks).
/// `cores`: pin parent and child to these cores.
pub fn cache_line_round_trip(cores: Option<(usize, usize)>, iters: u64) -> std::io::Result<C2c> {
    const SPAN: usize = 128;
    // SAFETY: a fresh anonymous shared mapping; checked for failure below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * SPAN,
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
    // SAFETY: both spans lie inside the 256-byte mapping, 128-aligned
    // (mmap returns page-aligned memory); zero is a valid AtomicU64.
    let (ping, pong) = unsafe {
        (
            &*(base as *const tandem_core::sync::AtomicU64),
            &*(base.add(SPAN) as *const tandem_core::sync::AtomicU64),
        )
    };
    use tandem_core::sync::Ordering::{Acquire, Release};
    let batch = 64u64;
    let batches = (iters / batch).max(16);
    // SAFETY: fork in a single-threaded process (documented contract); the
    // child only spins on atomics and calls _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        if let Some((_, c)) = cores {
            core_affinity::set_for_current(core_affinity::CoreId { id: c });
        }
        for i in 1..=batches * batch {
            while ping.load(Acquire) != i {
                std::hint::spin_loop();
            }
            pong.store(i, Release);
        }
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let saved = Affinity::save();
    if let Some((c, _)) = cores {
        core_affinity::set_for_current(core_affinity::CoreId { id: c });
    }
    let mut samples = Vec::with_capacity(batches as usize);
    let mut i = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            i += 1;
            ping.store(i, Release);
            while pong.load(Acquire) != i {
                std::hint::spin_loop();
                if Instant::now() > deadline {
                    // SAFETY: killing our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return Err(std::io::Error::other("c2c partner stopped responding"));
                }
            }
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    let mut st = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    // SAFETY: unmapping what we mapped; nothing refers to it any more.
    unsafe { libc::munmap(p, 2 * SPAN) };
    drop(saved);
    // Skip the first quarter as warm-up.
    let warm = samples.len() / 4;
    let rtt = crate::stats::percentile(&mut samples[warm..], 50.0);
    Ok(C2c {
        rtt_ns: rtt,
        one_way_ns: rtt / 2.0,
    })
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
