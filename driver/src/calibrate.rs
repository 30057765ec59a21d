//! Which path a rendezvous payload takes between two ranks of one host,
//! chosen by measuring this host rather than by a default.
//!
//! Over shared memory a rendezvous payload either is **pulled** single-copy
//! by the receiver (`process_vm_readv`, one copy by one core) or
//! **streamed** by the sender through the slot ring (two copies, pipelined
//! on two cores). Which is faster depends on the machine: on an AMD EPYC
//! guest the system call cost ~25 µs and streaming won everywhere; on an
//! Intel Xeon guest a pull of a 64 KiB buffer takes 3.4 µs where streaming
//! takes 6.9 (BENCHMARKS.md). So whoever creates a host's job file measures
//! both, once, in a few milliseconds, and writes the decision into the file
//! ([`HostPaths`], read by every rank of that host, so ranks never disagree);
//! `TANDEM_CMA` and `TANDEM_CMA_MIN` still override it per rank. The
//! decision is where each link starts: a link then follows what its own
//! pulls and streams cost (`transport::shm`'s path choice), since a
//! measurement of a few milliseconds at job start goes stale when the
//! program's buffers or the vCPUs' placement change.
//!
//! The measurement ([`measure`]) runs both paths between two threads on
//! two cores, at a cache-resident size ([`MID`]) and a memory-sized one
//! ([`BIG`]), from a source buffer the sending core has just written
//! (dirty in its cache) and from one it has not written since the last send
//! (clean). The decision ([`choose`]) models the clean source: a buffer
//! sent as it stands, the pattern of osu-style benchmarks and of re-sent
//! buffers, and the one where the paths differ most (on the Intel guest a
//! pull of 256 KiB is twice as fast as a stream). For a source written
//! right before each send, a pull of dirty lines across cores can be
//! slower than streaming them (1.5x on the same machine at 64 KiB-1 MiB);
//! both are printed at `TANDEM_DEBUG=INFO`, and `TANDEM_CMA=0` streams.
//! The model interpolates between the two sizes and pulls wherever the pull
//! costs at most [`TIE`] times the stream: a pull occupies one core instead
//! of two, so it wins ties.
//!
//! The same creator also decides where an eager payload stops riding behind
//! its header in the line ring (a flag and a copy per 56-byte line) and
//! goes through an eager cell instead (one contiguous copy, the header alone
//! in one line), when the layout leaves [`Layout::cell_min`] at 0: it times
//! both paths between the two threads at every power of two from 64 B to
//! the eager limit ([`measure_cells`]), as a ping-pong and as a stream of
//! messages, and the cells start at the smallest size from which they are
//! never slower ([`choose_cell_min`]). On the Intel guest the two cost the
//! same at 512 B and the cell wins from 1 KiB; on the AMD guest the cell
//! wins from 256 B (BENCHMARKS.md).

use crate::config::Layout;
pub use crate::job::HostPaths;
use crate::job::JobMap;
use crate::transport::shm::{ShmLink, ShmOptions};
use crate::transport::{MemDesc, Peek, Transport, PEEK_LEN};
use std::sync::OnceLock;
use std::time::Instant;
use tandem_core::sync::{AtomicBool, AtomicU64, Ordering};
use tandem_core::wire::{Header, Kind};

pub use crate::job::{per_byte, BIG, MID};
/// A pull is chosen where it costs at most this times the stream.
pub const TIE: f64 = 1.05;

/// What the two paths cost on this host: a fixed cost in ns and ns per byte
/// at [`MID`] and at [`BIG`] (each the mean of the dirty and clean source).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// A pull's fixed cost (a system call of 64 bytes), ns.
    pub pull_fixed_ns: f64,
    /// A pull's ns per byte at [`MID`] and [`BIG`].
    pub pull_mid: f64,
    /// See `pull_mid`.
    pub pull_big: f64,
    /// A stream's fixed cost (one more handshake through a cache line than
    /// a pull: the clear-to-send), ns.
    pub stream_fixed_ns: f64,
    /// A stream's ns per byte at [`MID`] and [`BIG`].
    pub stream_mid: f64,
    /// See `stream_mid`.
    pub stream_big: f64,
}

impl Costs {
    /// The modelled time of a pull of `n` bytes, ns.
    pub fn pull_ns(&self, n: usize) -> f64 {
        self.pull_fixed_ns + n as f64 * per_byte(n, self.pull_mid, self.pull_big)
    }

    /// The modelled time of a stream of `n` bytes, ns.
    pub fn stream_ns(&self, n: usize) -> f64 {
        self.stream_fixed_ns + n as f64 * per_byte(n, self.stream_mid, self.stream_big)
    }
}

/// The candidate thresholds: powers of two from 1 KiB to 1 GiB.
fn candidates() -> impl Iterator<Item = usize> {
    (10..=30).map(|k| 1usize << k)
}

/// The sizes to pull, given the costs: from the smallest payload above
/// `eager_limit` (smaller payloads are eager, never rendezvous) where a
/// pull costs at most [`TIE`] times a stream, through the last size of
/// that unbroken run (to any size if it does not break below 1 GiB).
/// Power-of-two candidates find the run; bisection finds its edges.
pub fn choose(c: &Costs, eager_limit: usize) -> HostPaths {
    let wins = |n: usize| c.pull_ns(n) <= TIE * c.stream_ns(n);
    let first = eager_limit + 1;
    let mut sizes = candidates().filter(|&n| n > first).peekable();
    let from = if wins(first) {
        first
    } else {
        let Some(hi) = sizes.by_ref().find(|&n| wins(n)) else {
            // Streamed everywhere, with the measurement kept: a link still
            // tries a pull now and then (`transport::shm`'s path choice).
            return HostPaths {
                stream_ps: stream_ps(c),
                ..HostPaths::NEVER
            };
        };
        // Smallest winning n in (max(hi/2, first), hi].
        let (mut lo, mut hi) = ((hi / 2).max(first), hi);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if wins(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    };
    let mut last = from;
    for n in sizes.filter(|&n| n > from) {
        if !wins(n) {
            // Largest winning n in [last, n).
            let (mut lo, mut hi) = (last, n);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if wins(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            return HostPaths {
                from: from as u64,
                to: lo as u64,
                stream_ps: stream_ps(c),
                cell_min: 0,
            };
        }
        last = n;
    }
    HostPaths {
        from: from as u64,
        to: u64::MAX,
        stream_ps: stream_ps(c),
        cell_min: 0,
    }
}

/// The stream's cost per byte at [`MID`] and [`BIG`] in picoseconds, as
/// the job file keeps it.
fn stream_ps(c: &Costs) -> [u32; 2] {
    [c.stream_mid, c.stream_big].map(|v| (v * 1000.0).round().clamp(1.0, u32::MAX as f64) as u32)
}

/// Two cores of this process's affinity mask, if it has two.
fn two_cores() -> Option<(core_affinity::CoreId, core_affinity::CoreId)> {
    let ids = core_affinity::get_core_ids()?;
    (ids.len() >= 2).then(|| (ids[0], ids[1]))
}

/// A flag the two measuring threads hand work over with.
struct Baton(AtomicU64);

impl Baton {
    /// Spins, then yields (a busy machine may run both threads on one
    /// core).
    fn wait_for(&self, v: u64) {
        let mut n = 0u32;
        while self.0.load(Ordering::Acquire) != v {
            n = n.saturating_add(1);
            if n < 100_000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
    fn set(&self, v: u64) {
        self.0.store(v, Ordering::Release);
    }
}

/// Measures this host's costs with two threads of its own, pinned to two
/// cores (a few milliseconds; the calling thread's affinity is untouched).
///
/// # Errors
/// A sentence saying why not: fewer than two cores to run on, or
/// cross-memory attach refused in this process.
pub fn measure(layout: &Layout) -> Result<Measured, String> {
    let (a, b) = two_cores().ok_or("fewer than two cores to measure on")?;
    let pid = std::process::id();
    // The sender's buffer, written by the sending thread through `src_at`
    // only (never through `src` while the threads run).
    let mut src = vec![1u8; BIG];
    let src_at = src.as_mut_ptr() as usize;
    let mut probe = [0u8; 64];
    crate::sys::cma_read(pid, src_at as u64, &mut probe)
        .map_err(|e| format!("cross-memory attach refused ({e})"))?;
    // The real thing: two shared-memory links over a mapping of the job's
    // layout, streaming through its slot ring.
    let map = std::sync::Arc::new(
        JobMap::anon_with(2, layout, HostPaths::NEVER).map_err(|e| format!("memory: {e}"))?,
    );
    let opt = ShmOptions {
        cma: Some(false),
        cma_min: usize::MAX,
        debug: false,
    };
    let mut tx = ShmLink::new(map.clone(), 0, 1, 0, 1, opt);
    let mut rx = ShmLink::new(map, 1, 0, 1, 0, opt);
    let baton = Baton(AtomicU64::new(0));
    // Rounds: per size, per pattern (dirty, clean), per path (pull,
    // stream), `reps` times. Round r: the receiving thread sets the baton
    // to 2r+1; the sending thread rewrites the source if dirty, sets 2r+2
    // (so a pull starts after the write), and pushes the source through the
    // ring if streaming. Timed on the receiving thread.
    const SIZES: [(usize, usize); 2] = [(MID, 5), (BIG, 2)];
    // First, unmeasured: one pull and one stream of BIG bytes, so that no
    // measured round pays for first touches (the ring's and the
    // destination's pages).
    const WARM: usize = 2;
    let plan: Vec<(usize, bool, bool)> = [(BIG, false, true), (BIG, false, false)]
        .into_iter()
        .chain(SIZES.into_iter().flat_map(|(n, reps)| {
            [true, false].into_iter().flat_map(move |dirty| {
                [true, false]
                    .into_iter()
                    .flat_map(move |pull| std::iter::repeat_n((n, dirty, pull), reps))
            })
        }))
        .collect();
    let (fixed, times) = std::thread::scope(|s| {
        let (plan, baton) = (&plan, &baton);
        s.spawn(move || {
            core_affinity::set_for_current(b);
            for (r, &(n, dirty, pull)) in plan.iter().enumerate() {
                baton.wait_for(2 * r as u64 + 1);
                if dirty {
                    // SAFETY: `src_at` is BIG bytes that outlive the scope,
                    // written only here; the receiving thread reads them
                    // (through the kernel) only after the baton says so.
                    unsafe { std::ptr::write_bytes(src_at as *mut u8, r as u8, n) };
                }
                baton.set(2 * r as u64 + 2);
                if !pull {
                    // SAFETY: as above; nothing writes them while streaming.
                    let data = unsafe { std::slice::from_raw_parts(src_at as *const u8, n) };
                    let mut sent = 0;
                    while sent < n {
                        sent += tx.stream_out(&MemDesc::NONE, sent, &data[sent..]);
                    }
                }
            }
        });
        s.spawn(move || -> Result<(f64, Vec<f64>), String> {
            core_affinity::set_for_current(a);
            let mut dst = vec![0u8; BIG];
            let mut probe = [0u8; 64];
            // The pull's fixed cost: 64 bytes, best of a few.
            let mut fixed = f64::MAX;
            for _ in 0..20 {
                let t = Instant::now();
                let _ = crate::sys::cma_read(pid, src_at as u64, &mut probe);
                fixed = fixed.min(t.elapsed().as_nanos() as f64);
            }
            let mut times = Vec::with_capacity(plan.len());
            // A failed pull is reported after the plan ran out: the sending
            // thread waits for every round.
            let mut failed = None;
            for (r, &(n, _, pull)) in plan.iter().enumerate() {
                baton.set(2 * r as u64 + 1);
                baton.wait_for(2 * r as u64 + 2);
                let t = Instant::now();
                if pull {
                    if let Err(e) = crate::sys::cma_read(pid, src_at as u64, &mut dst[..n]) {
                        failed = Some(format!("cross-memory attach failed ({e})"));
                    }
                } else {
                    let mut got = 0;
                    while got < n {
                        got += rx.stream_in(n - got, Some(&mut dst[got..n]));
                    }
                }
                times.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
            match failed {
                Some(why) => Err(why),
                None => Ok((fixed, times)),
            }
        })
        .join()
        .map_err(|_| "a measuring thread panicked".to_string())?
    })?;
    drop(src);
    // The median of each (size, pattern, path) group, in plan order.
    let mut left = &times[WARM..];
    let mut median = |reps: usize| {
        let mut g = left[..reps].to_vec();
        left = &left[reps..];
        g.sort_by(f64::total_cmp);
        g[g.len() / 2]
    };
    let mut at = [[[0.0f64; 2]; 2]; 2]; // [pattern: dirty, clean][path][size]
    for (si, (_, reps)) in SIZES.into_iter().enumerate() {
        for pattern in &mut at {
            for path in pattern.iter_mut() {
                path[si] = median(reps);
            }
        }
    }
    let costs = |a: [[f64; 2]; 2]| Costs {
        pull_fixed_ns: fixed,
        pull_mid: a[0][0],
        pull_big: a[0][1],
        // The clear-to-send: about one more cache-line handshake (~150 ns
        // on the machines measured) than a pull's answer.
        stream_fixed_ns: 150.0,
        stream_mid: a[1][0],
        stream_big: a[1][1],
    };
    Ok(Measured {
        dirty: costs(at[0]),
        clean: costs(at[1]),
    })
}

/// Within this factor the two paths cost the same to the measurement: a
/// cell is chosen at a size where a ping-pong through it is faster by more
/// than this and a stream through it slower by no more than this. Ties go
/// to the line ring: a small payload's cell costs throughput the ping-pong
/// does not show (128 B streamed 17 % slower through cells on the AMD
/// guest where its ping-pong was 14 % faster).
pub const CELL_TIE: f64 = 1.05;

/// What an eager payload of `size` bytes cost through the line ring and
/// through a cell, in ns: a ping-pong's half round trip, and the time per
/// message of a stream of messages one way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellCost {
    /// The payload's size in bytes.
    pub size: usize,
    /// Ping-pong half round trip through the line ring.
    pub lines_pp: f64,
    /// Ping-pong half round trip through a cell.
    pub cell_pp: f64,
    /// Per message of a stream, through the line ring.
    pub lines_stream: f64,
    /// Per message of a stream, through cells.
    pub cell_stream: f64,
}

impl CellCost {
    /// Whether the cell is the path to take at this size.
    pub fn cell_wins(&self) -> bool {
        CELL_TIE * self.cell_pp < self.lines_pp && self.cell_stream <= CELL_TIE * self.lines_stream
    }
}

/// The cell threshold [`CellCost`]s favour: the smallest measured size
/// from which a cell wins at every larger measured size, so a payload of
/// that size or more goes through a cell; `eager_limit + 1` (the line ring
/// for every eager payload) where the cell loses at the largest size; 0
/// (nothing decided) for no measurements.
pub fn choose_cell_min(costs: &[CellCost], eager_limit: usize) -> u32 {
    let mut sorted = costs.to_vec();
    sorted.sort_by_key(|c| c.size);
    let Some(last) = sorted.last() else {
        return 0;
    };
    if !last.cell_wins() {
        return u32::try_from(eager_limit + 1).unwrap_or(u32::MAX);
    }
    let from = sorted
        .iter()
        .rposition(|c| !c.cell_wins())
        .map_or(0, |i| i + 1);
    // Never below what `Layout::validate` accepts, whatever the caller
    // measured.
    sorted[from].size.max(64) as u32
}

/// The eager payload sizes [`measure_cells`] times: powers of two from 64
/// B to `eager_limit`.
fn cell_sizes(eager_limit: usize) -> impl Iterator<Item = usize> {
    (6..=30)
        .map(|k| 1usize << k)
        .take_while(move |&n| n <= eager_limit)
}

/// Waits of the cell measurement: spin, then yield (a busy machine may
/// run both threads on one core), and give up when the other side gave
/// up or after two seconds, so a host that cannot run the measurement
/// never hangs a job's start.
struct Patience<'a> {
    abort: &'a AtomicBool,
    start: Instant,
}

impl Patience<'_> {
    /// `false`: stop (the measurement failed).
    fn wait(&self, spins: &mut u32) -> bool {
        *spins = spins.saturating_add(1);
        if *spins < 10_000 {
            std::hint::spin_loop();
            return true;
        }
        if self.abort.load(Ordering::Relaxed) || self.start.elapsed().as_secs() >= 2 {
            self.abort.store(true, Ordering::Relaxed);
            return false;
        }
        std::thread::yield_now();
        true
    }

    fn send(&self, l: &mut ShmLink, h: &[u8; tandem_core::wire::HEADER_LEN], body: &[u8]) -> bool {
        let mut spins = 0;
        while !l.try_send(h, body) {
            if !self.wait(&mut spins) {
                return false;
            }
        }
        true
    }

    fn recv(&self, l: &mut ShmLink, dst: &mut [u8]) -> bool {
        let mut peeked = [0u8; PEEK_LEN];
        let mut spins = 0;
        loop {
            if l.peek(&mut peeked) == Peek::Header && l.body_ready(dst.len()) {
                // Torn only if the other thread stopped: the measurement ends.
                return l.consume(&peeked, dst.len(), dst);
            }
            if !self.wait(&mut spins) {
                return false;
            }
        }
    }
}

/// Times eager payloads through the line ring and through cells, between
/// two threads of its own pinned to two cores, at every size of
/// `cell_sizes` (a few milliseconds): per size and path, five rounds of a
/// ping-pong of 13 to 21 timed round trips (the median trip) and a stream
/// of 27 to 35 timed messages (then one acknowledgement), each after a few
/// untimed ones; each figure the median of its rounds. The sender's
/// and the receiver's buffers are apart (the pattern of osu-style
/// benchmarks).
///
/// # Errors
/// A sentence saying why not: fewer than two cores, a layout without
/// cells, or a measurement that did not finish within two seconds.
pub fn measure_cells(layout: &Layout) -> Result<Vec<CellCost>, String> {
    const ROUNDS: usize = 5;
    // Ping-pong round trips and streamed messages of round r: other
    // counts each round, so that each round meets the rings at other
    // positions (some relative positions of the line ring, the cells and
    // the buffers are several times slower than others on the AMD guest,
    // and the engine's own credit messages keep moving them).
    let pp = |r: usize| 13 + 2 * r;
    let stream = |r: usize| 27 + 2 * r;
    // Untimed first: round trips of each ping-pong, and messages of each
    // stream before its clock starts (a step's first messages find its
    // rings cold in both cores' caches).
    const WARM: usize = 4;
    const LEAD: usize = 8;
    let (a, b) = two_cores().ok_or("fewer than two cores to measure on")?;
    if layout.cells == 0 {
        return Err("the layout has no cells".into());
    }
    let eager = layout.eager_limit as usize;
    let sizes: Vec<usize> = cell_sizes(eager).collect();
    if sizes.is_empty() {
        return Err(format!(
            "an eager limit of {eager} B leaves nothing to measure"
        ));
    }
    // Index 0: the line ring only (no cell memory); 1: cells from 64 B.
    let pair = |cell_min: usize| {
        let l = layout.cell_min(u32::try_from(cell_min).unwrap_or(u32::MAX));
        ShmLink::streamed_pair(&l).map_err(|e| format!("memory: {e}"))
    };
    let (lines0, lines1) = pair(eager + 1)?;
    let (cell0, cell1) = pair(64)?;
    let mut near = [lines0, cell0];
    let mut far = [lines1, cell1];
    let plan: Vec<(usize, usize, usize)> = (0..ROUNDS)
        .flat_map(|r| sizes.iter().flat_map(move |&n| [(n, 0, r), (n, 1, r)]))
        .collect();
    let abort = AtomicBool::new(false);
    let patience = Patience {
        abort: &abort,
        start: Instant::now(),
    };
    let header = |n: usize| Header::new(Kind::Eager, 0, 0, n as u64).encode();
    let times = std::thread::scope(|s| {
        let (plan, patience) = (&plan, &patience);
        s.spawn(move || {
            core_affinity::set_for_current(b);
            let mut buf = vec![0u8; eager];
            let ack = header(0);
            for &(n, path, r) in plan {
                let (l, h) = (&mut far[path], header(n));
                for _ in 0..WARM + pp(r) {
                    if !patience.recv(l, &mut buf[..n]) || !patience.send(l, &h, &buf[..n]) {
                        return;
                    }
                }
                for _ in 0..LEAD + stream(r) {
                    if !patience.recv(l, &mut buf[..n]) {
                        return;
                    }
                }
                if !patience.send(l, &ack, &[]) {
                    return;
                }
            }
        });
        s.spawn(move || -> Option<Vec<[f64; 2]>> {
            core_affinity::set_for_current(a);
            let src = vec![7u8; eager];
            let mut dst = vec![0u8; eager];
            let mut times = Vec::with_capacity(plan.len());
            let mut trips = Vec::with_capacity(pp(ROUNDS));
            for &(n, path, r) in plan {
                let (l, h) = (&mut near[path], header(n));
                trips.clear();
                for i in 0..WARM + pp(r) {
                    let t = Instant::now();
                    if !patience.send(l, &h, &src[..n]) || !patience.recv(l, &mut dst[..n]) {
                        return None;
                    }
                    if i >= WARM {
                        trips.push(t.elapsed().as_nanos() as f64 / 2.0);
                    }
                }
                trips.sort_by(f64::total_cmp);
                let half = trips[trips.len() / 2];
                for _ in 0..LEAD {
                    if !patience.send(l, &h, &src[..n]) {
                        return None;
                    }
                }
                let t = Instant::now();
                for _ in 0..stream(r) {
                    if !patience.send(l, &h, &src[..n]) {
                        return None;
                    }
                }
                if !patience.recv(l, &mut dst[..0]) {
                    return None;
                }
                times.push([half, t.elapsed().as_nanos() as f64 / stream(r) as f64]);
            }
            Some(times)
        })
        .join()
        .ok()
        .flatten()
    })
    .ok_or("the measurement did not finish within two seconds")?;
    let median = |k: usize, path: usize, metric: usize| {
        let mut v: Vec<f64> = plan
            .iter()
            .zip(&times)
            .filter(|((n, p, _), _)| *n == k && *p == path)
            .map(|(_, t)| t[metric])
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(sizes
        .iter()
        .map(|&n| CellCost {
            size: n,
            lines_pp: median(n, 0, 0),
            cell_pp: median(n, 1, 0),
            lines_stream: median(n, 0, 1),
            cell_stream: median(n, 1, 1),
        })
        .collect())
}

/// What [`measure`] found, per pattern of the sender's buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// The source was written by the sending core right before (its lines
    /// dirty in that core's cache).
    pub dirty: Costs,
    /// The source was not written since the last send (clean, shared).
    pub clean: Costs,
}

/// [`host_paths`] for a host with `nranks` ranks of the job: nothing to
/// measure for one.
pub(crate) fn for_ranks(nranks: usize, layout: &Layout) -> HostPaths {
    if nranks > 1 {
        host_paths(layout)
    } else {
        HostPaths::NEVER
    }
}

/// This host's paths for `layout`, measured once per process (the job
/// file's creator; ranks read the file) and reported at
/// `TANDEM_DEBUG=INFO`. `TANDEM_CALIBRATE=0` skips the measurement and
/// streams, as does a host that cannot be measured (one core,
/// cross-memory attach refused).
pub fn host_paths(layout: &Layout) -> HostPaths {
    static DONE: OnceLock<std::sync::Mutex<Vec<(Layout, HostPaths)>>> = OnceLock::new();
    let cache = DONE.get_or_init(Default::default);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = c.iter().find(|(l, _)| l == layout) {
        return *p;
    }
    let info = crate::config::debug_level() >= crate::config::DebugLevel::Info;
    let enabled = crate::config::calibrate_enabled();
    let mut p = if !enabled {
        if info {
            eprintln!("tandem: TANDEM_CALIBRATE=0: rendezvous payloads are streamed");
        }
        HostPaths::NEVER
    } else {
        let t = Instant::now();
        match measure(layout) {
            Ok(m) => {
                let p = choose(&m.clean, layout.eager_limit as usize);
                if info {
                    eprintln!(
                        "tandem: calibrated in {:.1} ms: {p} at first, then as each link measures \
                         (TANDEM_CMA overrides); ns per byte at {} KiB / {} MiB, \
                         clean source: pull {:.3} / {:.3} (+{:.1} us a call), stream {:.3} / {:.3}; \
                         freshly written source: pull {:.3} / {:.3}, stream {:.3} / {:.3}",
                        t.elapsed().as_secs_f64() * 1e3,
                        MID >> 10,
                        BIG >> 20,
                        m.clean.pull_mid,
                        m.clean.pull_big,
                        m.clean.pull_fixed_ns / 1e3,
                        m.clean.stream_mid,
                        m.clean.stream_big,
                        m.dirty.pull_mid,
                        m.dirty.pull_big,
                        m.dirty.stream_mid,
                        m.dirty.stream_big,
                    );
                }
                p
            }
            Err(why) => {
                if info {
                    eprintln!("tandem: not calibrated ({why}): rendezvous payloads are streamed");
                }
                HostPaths::NEVER
            }
        }
    };
    if layout.cell_min == 0 && enabled {
        p.cell_min = host_cells(layout, info);
    }
    c.push((*layout, p));
    p
}

/// [`host_paths`]' cell threshold: measured and chosen, reported at
/// `TANDEM_DEBUG=INFO`; 0 (the default threshold) where it cannot be
/// measured.
fn host_cells(layout: &Layout, info: bool) -> u32 {
    let t = Instant::now();
    match measure_cells(layout) {
        Ok(costs) => {
            let chosen = choose_cell_min(&costs, layout.eager_limit as usize);
            if info {
                let from = if chosen > layout.eager_limit {
                    "every eager payload rides in the line ring (no cells)".to_string()
                } else {
                    format!("eager payloads from {chosen} B go through a cell")
                };
                let each: Vec<String> = costs
                    .iter()
                    .map(|c| {
                        format!(
                            "{} B {:.0}/{:.0} {:.0}/{:.0}",
                            c.size, c.lines_pp, c.cell_pp, c.lines_stream, c.cell_stream
                        )
                    })
                    .collect();
                eprintln!(
                    "tandem: cells measured in {:.1} ms: {from} (TANDEM_CELL_MIN overrides); \
                     ns, line ring / cell, ping-pong half round trip then per streamed message: {}",
                    t.elapsed().as_secs_f64() * 1e3,
                    each.join(", ")
                );
            }
            chosen
        }
        Err(why) => {
            if info {
                eprintln!(
                    "tandem: cells not measured ({why}): eager payloads from {} B go through a cell",
                    crate::config::DEFAULT_CELL_MIN
                );
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Costs shaped like the two machines measured: `pull` and `stream`
    /// ns per byte (same at both sizes), fixed costs in ns.
    fn costs(pull_fixed: f64, pull: f64, stream: f64) -> Costs {
        Costs {
            pull_fixed_ns: pull_fixed,
            pull_mid: pull,
            pull_big: pull,
            stream_fixed_ns: 150.0,
            stream_mid: stream,
            stream_big: stream,
        }
    }

    #[test]
    fn a_cheap_fast_pull_is_taken_from_where_it_pays() {
        // Intel-like: 1.5 us per call, 0.05 ns/B pulled, 0.1 streamed:
        // pull wins once 1.35 us < n * 0.05, i.e. from ~27 KiB.
        let p = choose(&costs(1500.0, 0.05, 0.1), 8192);
        assert!((24_300..=24_500).contains(&p.from), "{p}");
        assert_eq!(p.to, u64::MAX);
        assert!(!p.pulls(16 * 1024) && p.pulls(32 * 1024) && p.pulls(1 << 30));
    }

    #[test]
    fn an_expensive_call_or_a_slow_copy_streams() {
        // AMD-like: 25 us per call, and pulled bytes at half the speed.
        let c = costs(25_000.0, 0.2, 0.1);
        let never = |c: &Costs| HostPaths {
            stream_ps: stream_ps(c),
            ..HostPaths::NEVER
        };
        assert_eq!(choose(&c, 8192), never(&c));
        assert!(!choose(&c, 8192).pulls(1 << 20));
        assert_ne!(
            choose(&c, 8192).stream_ps,
            [0, 0],
            "the measurement is kept"
        );
        // Cheap call, slower copy.
        let c = costs(500.0, 0.2, 0.1);
        assert_eq!(choose(&c, 8192), never(&c));
    }

    #[test]
    fn pulls_stop_where_memory_bound_streaming_wins() {
        // Pull faster in cache, slower from memory: a bounded range.
        let c = Costs {
            pull_fixed_ns: 1000.0,
            pull_mid: 0.04,
            pull_big: 0.12,
            stream_fixed_ns: 150.0,
            stream_mid: 0.08,
            stream_big: 0.08,
        };
        let p = choose(&c, 8192);
        assert!(p.pulls(64 * 1024) && p.pulls(MID), "{p}");
        assert!(!p.pulls(BIG) && !p.pulls(64 << 20), "{p}");
        assert!(p.to >= MID as u64 && p.to < BIG as u64, "{p}");
    }

    #[test]
    fn ties_go_to_the_pull_and_eager_sizes_are_never_pulled() {
        let p = choose(&costs(0.0, 0.1, 0.1), 65536);
        assert_eq!(p.from, 65537, "{p}");
        assert!(!p.pulls(65536) && p.pulls(65537));
    }

    #[test]
    fn never_means_never() {
        for n in [0, 1, 1 << 20, usize::MAX] {
            assert!(!HostPaths::NEVER.pulls(n));
        }
        assert_eq!(
            HostPaths::NEVER.to_string(),
            "streamed at every size (no single copy)"
        );
        let p = HostPaths {
            from: 16385,
            to: 2 << 20,
            stream_ps: [64, 75],
            cell_min: 0,
        };
        assert_eq!(p.to_string(), "single copy from 16385 B to 2 MiB");
    }

    #[test]
    fn measuring_this_host_gives_sane_costs() {
        match measure(&Layout::default()) {
            Ok(m) => {
                for c in [m.clean, m.dirty] {
                    for v in [c.pull_mid, c.pull_big, c.stream_mid, c.stream_big] {
                        assert!(v.is_finite() && v > 0.0, "{m:?}");
                    }
                    assert!(c.pull_fixed_ns > 0.0, "{m:?}");
                }
            }
            Err(why) => eprintln!("skipped: {why}"),
        }
    }

    /// Costs where the cell's ping-pong and stream are `pp` and `st` times
    /// the line ring's at each size (the ring: 100 ns, 50 ns).
    fn cells(ratios: &[(usize, f64, f64)]) -> Vec<CellCost> {
        ratios
            .iter()
            .map(|&(size, pp, st)| CellCost {
                size,
                lines_pp: 100.0,
                cell_pp: 100.0 * pp,
                lines_stream: 50.0,
                cell_stream: 50.0 * st,
            })
            .collect()
    }

    #[test]
    fn cells_start_where_they_stop_losing() {
        // The AMD guest's shape: the cell wins the ping-pong from 128 B but
        // streams slower there; from 256 B it wins both.
        let amd = cells(&[
            (64, 1.1, 1.2),
            (128, 0.86, 1.2),
            (256, 0.72, 1.0),
            (512, 0.55, 0.95),
            (1024, 0.5, 0.9),
            (8192, 0.5, 0.6),
        ]);
        assert_eq!(choose_cell_min(&amd, 8192), 256);
        // The Intel guest's: a tie at 512 B, a win from 1 KiB; unsorted
        // input changes nothing.
        let mut intel = cells(&[
            (8192, 0.5, 0.5),
            (1024, 0.6, 0.9),
            (512, 0.97, 1.0),
            (256, 1.2, 1.3),
            (64, 1.5, 1.5),
        ]);
        assert_eq!(
            choose_cell_min(&intel, 8192),
            1024,
            "a tie goes to the ring"
        );
        intel[2].cell_pp = 90.0;
        assert_eq!(
            choose_cell_min(&intel, 8192),
            512,
            "a faster ping-pong wins"
        );
        intel[2].cell_stream = 52.0;
        assert_eq!(choose_cell_min(&intel, 8192), 512, "streams within the tie");
        intel[2].cell_stream = 56.0;
        assert_eq!(choose_cell_min(&intel, 8192), 1024, "a slower stream loses");
        // A loss above a win: the cells start above the loss.
        let dip = cells(&[(64, 0.9, 0.9), (128, 1.3, 1.0), (256, 0.9, 0.9)]);
        assert_eq!(choose_cell_min(&dip, 8192), 256);
        // Cheaper everywhere: from the smallest size measured.
        assert_eq!(
            choose_cell_min(&cells(&[(64, 0.5, 0.5), (128, 0.5, 0.5)]), 8192),
            64
        );
        // Dearer at the largest size: no cells (every payload in the ring).
        let never = cells(&[(64, 0.5, 0.5), (8192, 1.5, 1.0)]);
        assert_eq!(choose_cell_min(&never, 8192), 8193);
        assert_eq!(
            choose_cell_min(&[], 8192),
            0,
            "nothing measured, nothing decided"
        );
    }

    #[test]
    fn measuring_the_cells_gives_sane_costs() {
        let layout = Layout::default().eager_limit(2048);
        match measure_cells(&layout) {
            Ok(costs) => {
                let sizes: Vec<usize> = costs.iter().map(|c| c.size).collect();
                assert_eq!(sizes, [64, 128, 256, 512, 1024, 2048]);
                for c in &costs {
                    for v in [c.lines_pp, c.cell_pp, c.lines_stream, c.cell_stream] {
                        assert!(v.is_finite() && v > 0.0, "{c:?}");
                    }
                }
                let chosen = choose_cell_min(&costs, 2048);
                assert!((64..=2049).contains(&chosen), "{chosen}");
            }
            Err(why) => eprintln!("skipped: {why}"),
        }
        assert!(
            measure_cells(&layout.cells(0)).is_err(),
            "no cells to measure"
        );
    }
}
