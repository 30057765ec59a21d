//! The machine's own limits, measured in the same run as tandem:
//! the cross-process cache-line round trip and single-thread memcpy.

use std::time::{Duration, Instant};

/// Result of [`cache_line_round_trip`]: the two floors of a handshake
/// between two processes.
#[derive(Debug, Clone, Copy)]
pub struct C2c {
    /// Median round trip through two cache lines, one per direction (each
    /// side writes only its own line): the floor of tandem's line rings.
    pub rtt_ns: f64,
    /// Half of it: the one-way latency through two lines.
    pub one_way_ns: f64,
    /// Median half round trip through one cache line that both sides write
    /// (an 8-byte payload and its flag in the line, the answer written into
    /// the same line): the floor of a request/response that answers in the
    /// request's own line.
    pub one_line_ns: f64,
}

/// The one-line bounce on `line` (a 64-byte, 64-aligned span both sides
/// map): word 0 is the flag, word 1 the payload. Round trip `i`: the lead
/// writes the payload and flag `2i - 1`; the other side waits for it,
/// reads the payload and answers with payload and flag `2i` in the same
/// line. `wait` spins until the flag holds a value (false: give up).
fn one_line_step(
    line: &[tandem_core::sync::AtomicU64; 2],
    lead: bool,
    i: u64,
    wait: &dyn Fn(&tandem_core::sync::AtomicU64, u64) -> bool,
) -> bool {
    use tandem_core::sync::Ordering::{Relaxed, Release};
    let [flag, data] = line;
    if lead {
        data.store(i, Relaxed);
        flag.store(2 * i - 1, Release);
        wait(flag, 2 * i) && data.load(Relaxed) == i + 1
    } else {
        if !wait(flag, 2 * i - 1) {
            return false;
        }
        let v = data.load(Relaxed);
        data.store(v + 1, Relaxed);
        flag.store(2 * i, Release);
        true
    }
}

/// The one-line floor between this process and a forked child (see
/// [`C2c::one_line_ns`]); the median half round trip in ns.
///
/// Must be called before this process starts threads (it forks).
fn one_line_round_trip(cores: Option<(usize, usize)>, iters: u64) -> std::io::Result<f64> {
    let line = |base: *mut u8| -> &'static [tandem_core::sync::AtomicU64; 2] {
        // SAFETY: 16 bytes at the start of the page-aligned mapping, which
        // outlives the closures; zero is a valid counter.
        unsafe { &*(base as *const [tandem_core::sync::AtomicU64; 2]) }
    };
    let spin = |f: &tandem_core::sync::AtomicU64, v: u64| {
        while f.load(tandem_core::sync::Ordering::Acquire) != v {
            std::hint::spin_loop();
        }
        true
    };
    let batch = 64u64;
    let rtt = forked_round_trips(
        cores,
        4096,
        (iters / batch).max(16),
        batch,
        |b| {
            let l = line(b);
            Box::new(move |i| {
                one_line_step(l, true, i, &spin);
            })
        },
        |b| {
            let l = line(b);
            Box::new(move |i| {
                one_line_step(l, false, i, &spin);
            })
        },
    )?;
    Ok(rtt / 2.0)
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
            pin_cpu(c);
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
        pin_cpu(c);
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
/// them pays when each side writes only its own line; and the one-line
/// floor ([`C2c::one_line_ns`]) of one that answers in the same line.
///
/// Must be called before this process starts threads (it forks).
/// `cores`: pin parent and child to these cores.
///
/// # Errors
/// The operating system's error if the shared mapping cannot be made or
/// the child cannot be forked.
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
        one_line_ns: one_line_round_trip(cores, iters)?,
    })
}

/// The bare line-ring protocol of `tandem-core` between two processes: an
/// 8-byte message each way through two [`tandem_core::line_ring`] rings,
/// no engine, no matching. Returns the median round trip in ns; the gap
/// between this and [`cache_line_round_trip`] is the ring protocol's cost,
/// the gap between this and `pingpong` the engine's.
///
/// # Errors
/// As [`cache_line_round_trip`].
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

/// A prototype of a **duplex** line ring, for issue 22's question whether
/// an answer sharing the line of the message it answers reaches the
/// one-line floor: `lines` lines (a power of two), each split in two
/// 32-byte halves, one per direction (word 0 of a half is its flag, word 1
/// an 8-byte payload). The k-th message of each direction goes into line
/// k mod `lines`, so a reply lands in the line of its request. With one
/// line it is a depth-one mailbox. Lock-step ping-pong only (no flow
/// control: a real ring would keep the line ring's head and tail
/// counters). Returns the median half round trip in ns.
///
/// # Errors
/// As [`cache_line_round_trip`].
pub fn duplex_ring_round_trip(
    cores: Option<(usize, usize)>,
    lines: u64,
    iters: u64,
) -> std::io::Result<f64> {
    use tandem_core::sync::AtomicU64;
    use tandem_core::sync::Ordering::{Acquire, Relaxed, Release};
    assert!(lines.is_power_of_two(), "a power of two");
    let side = |base: *mut u8, lead: bool| -> Box<dyn FnMut(u64)> {
        // Half `h` (0: lead to other, 1: other to lead) of line `k`.
        let half = move |k: u64, h: usize| -> &'static [AtomicU64; 2] {
            // SAFETY: line k % lines lies inside the lines * 64-byte,
            // page-aligned mapping, which outlives the closure; any bit
            // pattern is a valid counter.
            unsafe { &*(base.add(((k % lines) * 64) as usize + 32 * h) as *const [AtomicU64; 2]) }
        };
        let wait = |f: &AtomicU64, v: u64| {
            while f.load(Acquire) != v {
                std::hint::spin_loop();
            }
        };
        Box::new(move |i: u64| {
            let (out, inn) = if lead { (0, 1) } else { (1, 0) };
            if lead {
                let [flag, data] = half(i, out);
                data.store(i, Relaxed);
                flag.store(i, Release);
            }
            let [flag, data] = half(i, inn);
            wait(flag, i);
            let v = data.load(Relaxed);
            if !lead {
                let [flag, data] = half(i, out);
                data.store(v, Relaxed);
                flag.store(i, Release);
            }
        })
    };
    let batch = 64u64;
    let rtt = forked_round_trips(
        cores,
        (lines * 64) as usize,
        (iters / batch).max(16),
        batch,
        |b| side(b, true),
        |b| side(b, false),
    )?;
    Ok(rtt / 2.0)
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

/// Pins the calling thread to `cpu` with `sched_setaffinity` directly: it
/// may widen an inherited mask (a forked child of a pinned process), which
/// helpers that only pick among the currently allowed cores refuse.
pub fn pin_cpu(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks `cpu`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// A cache-line bounce between the two ranks of a running benchmark, over a
/// page both map: the one-way latency measured by the same processes, on
/// the same cores, at the same moment as the messages it is compared with
/// (on a virtual machine vCPUs migrate and this figure drifts by several
/// times within a minute).
pub struct InlineC2c {
    base: *mut u8,
    next: u64,
    next_line: u64,
}

impl InlineC2c {
    /// Rank 0's side: creates the shared page and exports its descriptor in
    /// `TANDEM_PERF_C2C_FD` for the rank it is about to start. Call before
    /// starting the other rank.
    ///
    /// # Errors
    /// The operating system's error of `memfd_create`, `ftruncate` or `mmap`.
    pub fn create() -> std::io::Result<Self> {
        // SAFETY: plain syscalls on a descriptor we own; the name is a
        // NUL-terminated literal.
        let fd = unsafe { libc::memfd_create(c"tandem-perf-c2c".as_ptr(), 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::ftruncate(fd, 4096) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        std::env::set_var("TANDEM_PERF_C2C_FD", fd.to_string());
        Self::map(fd)
    }

    /// The other rank's side: maps the page rank 0 exported.
    ///
    /// # Errors
    /// An error of kind [`std::io::ErrorKind::Other`] if
    /// `TANDEM_PERF_C2C_FD` is not set to a number; the operating system's
    /// error if the page cannot be mapped.
    pub fn open() -> std::io::Result<Self> {
        let fd: i32 = std::env::var("TANDEM_PERF_C2C_FD")
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other("TANDEM_PERF_C2C_FD not set"))?;
        Self::map(fd)
    }

    fn map(fd: i32) -> std::io::Result<Self> {
        // SAFETY: maps one page of a descriptor we hold; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            base: p as *mut u8,
            next: 0,
            next_line: 0,
        })
    }

    /// The one-line bounce's line, 512 bytes into the page (apart from the
    /// two flags).
    fn line(&self) -> &[tandem_core::sync::AtomicU64; 2] {
        // SAFETY: 16 bytes, 64-aligned, inside the mapped page, which lives
        // as long as `self`; any bit pattern is a valid counter.
        unsafe { &*(self.base.add(512) as *const [tandem_core::sync::AtomicU64; 2]) }
    }

    /// Like [`measure`](Self::measure), through one line that both ranks
    /// write (see [`C2c::one_line_ns`]): rank 0 gets the median half round
    /// trip in ns.
    pub fn measure_one_line(&mut self, lead: bool, iters: u64) -> Option<f64> {
        let batch = 64;
        let start = self.next_line;
        self.next_line += (iters / batch) * batch;
        let line = self.line();
        let deadline = Instant::now() + Duration::from_secs(10);
        let wait = |flag: &tandem_core::sync::AtomicU64, v: u64| {
            let mut n = 0u32;
            while flag.load(tandem_core::sync::Ordering::Acquire) != v {
                std::hint::spin_loop();
                n = n.wrapping_add(1);
                if n % 65536 == 0 && Instant::now() > deadline {
                    return false;
                }
            }
            true
        };
        let mut samples = Vec::with_capacity((iters / batch) as usize);
        for b in 0..iters / batch {
            let t = Instant::now();
            for k in 1..=batch {
                if !one_line_step(line, lead, start + b * batch + k, &wait) {
                    return None;
                }
            }
            samples.push(t.elapsed().as_nanos() as f64 / batch as f64 / 2.0);
        }
        let warm = samples.len() / 4;
        lead.then(|| crate::stats::percentile(&mut samples[warm..], 50.0))
    }

    fn flags(&self) -> (&tandem_core::sync::AtomicU64, &tandem_core::sync::AtomicU64) {
        // SAFETY: two counters 128 bytes apart inside the mapped page, which
        // lives as long as `self`; any bit pattern is a valid counter.
        unsafe {
            (
                &*(self.base as *const tandem_core::sync::AtomicU64),
                &*(self.base.add(128) as *const tandem_core::sync::AtomicU64),
            )
        }
    }

    /// Both ranks call this at the same point with the same `iters`; rank 0
    /// (`lead`) gets the median one-way latency in ns, the other `None`.
    /// Gives up (returns `None`) if the partner stops for 10 s.
    pub fn measure(&mut self, lead: bool, iters: u64) -> Option<f64> {
        use tandem_core::sync::Ordering::{Acquire, Release};
        let batch = 64;
        let start = self.next;
        self.next += (iters / batch) * batch;
        let (ping, pong) = self.flags();
        let mut samples = Vec::with_capacity((iters / batch) as usize);
        let deadline = Instant::now() + Duration::from_secs(10);
        let wait = |flag: &tandem_core::sync::AtomicU64, v: u64| {
            let mut n = 0u32;
            while flag.load(Acquire) != v {
                std::hint::spin_loop();
                n = n.wrapping_add(1);
                if n % 65536 == 0 && Instant::now() > deadline {
                    return false;
                }
            }
            true
        };
        for b in 0..iters / batch {
            let t = Instant::now();
            for k in 1..=batch {
                let i = start + b * batch + k;
                if lead {
                    ping.store(i, Release);
                    if !wait(pong, i) {
                        return None;
                    }
                } else {
                    if !wait(ping, i) {
                        return None;
                    }
                    pong.store(i, Release);
                }
            }
            samples.push(t.elapsed().as_nanos() as f64 / batch as f64 / 2.0);
        }
        let warm = samples.len() / 4;
        lead.then(|| crate::stats::percentile(&mut samples[warm..], 50.0))
    }
}

impl Drop for InlineC2c {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `map`; nothing borrows it now.
        unsafe { libc::munmap(self.base.cast(), 4096) };
    }
}
