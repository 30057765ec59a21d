//! The flight recorder: the last events of one rank, always on.
//!
//! A fixed ring of 32-byte events allocated when the engine starts; an
//! event is seven stores and a timestamp (the CPU's time-stamp counter
//! where it is invariant, else `CLOCK_MONOTONIC`), under the engine lock
//! the caller already holds: no allocation, no lock, no system call per
//! event. The default ring (2048 events, 64 KiB, aligned to its size) is
//! walked by adding to the low 16 bits of the next event's address, which
//! wrap around the ring by themselves; about 10 instructions an event
//! beyond the recorder-off check (BENCHMARKS.md, "Issue 23, last part").
//! Every message event carries its peer and the per-peer sequence number
//! of its header, so the same message can be found on both ranks
//! (`tandem-trace merge` draws it as an arrow).
//!
//! What is kept is written out as Chrome / Perfetto trace-event JSON, one
//! file per rank ([`Recorder::write_json`]), with the clock anchors a
//! merger needs to put ranks of several hosts on one time line.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tandem_core::wire::Kind;

use crate::sys;

/// Bytes of a user mark's text kept (`Comm::annotate`); longer ones are
/// cut at a character boundary.
pub const MARK_LEN: usize = 56;

/// Marks kept at once; the oldest text is reused after that many.
const MARKS: usize = 256;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Code {
    /// A header left for `peer` (its first word and sequence number as sent).
    Sent = 1,
    /// A header from `peer` was taken off the link.
    Arrived = 2,
    /// A send was posted (it could not go out at once).
    PostSend = 3,
    /// A receive was posted.
    PostRecv = 4,
    /// An operation completed (a receive: `peer` is the source).
    Done = 5,
    /// An operation failed.
    Failed = 6,
    /// A rendezvous payload was pulled single-copy.
    Pulled = 7,
    /// A rendezvous payload is to be streamed by the sender.
    Streamed = 8,
    /// A collective began (`sub`: which).
    CollBegin = 9,
    /// A collective ended.
    CollEnd = 10,
    /// A blocking call began to wait (`sub`: the operation's phase).
    WaitBegin = 11,
    /// That wait ended.
    WaitEnd = 12,
    /// A user mark (`len`: its slot in the mark table).
    Mark = 13,
    /// The link to `peer` failed.
    LinkFailed = 14,
}

impl Code {
    fn of(v: u16) -> Option<Self> {
        use Code::*;
        [
            Sent, Arrived, PostSend, PostRecv, Done, Failed, Pulled, Streamed, CollBegin, CollEnd,
            WaitBegin, WaitEnd, Mark, LinkFailed,
        ]
        .into_iter()
        .find(|c| *c as u16 == v)
    }
}

/// One event: the time, the first header word (magic, kind, context, tag;
/// for non-wire events `sub` in the kind byte), a length, the sequence
/// number, the code (0: an empty slot) and the peer.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
struct Event {
    /// The time, low half first (written as the counter gives it).
    t: [u32; 2],
    w0: u64,
    len: u64,
    seq: u16,
    code: u16,
    peer: u32,
}

const EVENT: usize = std::mem::size_of::<Event>();

impl Event {
    /// An empty slot.
    const EMPTY: Event = Event {
        t: [0; 2],
        w0: 0,
        len: 0,
        seq: 0,
        code: 0,
        peer: 0,
    };

    #[inline(always)]
    fn new(t: [u32; 2], code: Code, w0: u64, seq: u16, peer: usize, len: u64) -> Self {
        Self {
            t,
            w0,
            len,
            seq,
            code: code as u16,
            peer: peer as u32,
        }
    }
}

/// Where timestamps come from, and which cursor walks the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
enum Mode {
    /// The time-stamp counter, into a ring of [`FAST_EVENTS`]: the hot path.
    Fast = 0,
    /// Nothing is recorded.
    Off,
    /// The invariant time-stamp counter, a ring of another size.
    Tsc,
    /// `CLOCK_MONOTONIC`.
    Mono,
}

/// The first word of an event that is not a header: `sub` where a header
/// has its kind, then the context and tag.
#[inline(always)]
pub(crate) fn word(sub: u8, ctx: u16, tag: u32) -> u64 {
    (sub as u64) << 8 | (ctx as u64) << 16 | (tag as u64) << 32
}

/// Events of the default ring ([`Mode::Fast`]): 64 KiB, aligned to its
/// size, so that a 16-bit add to the low half of the next event's address
/// wraps around the ring by itself. The default size
/// ([`crate::config::DEFAULT_EVENTS`]).
pub(crate) const FAST_EVENTS: usize = (1 << 16) / EVENT;

/// The default ring's memory.
#[repr(C, align(65536))]
struct FastRing([Event; FAST_EVENTS]);

/// The default ring, owned through a raw pointer: the hot path writes
/// through the address in [`Recorder::next`], which a `Box` held beside it
/// would claim to own alone.
struct Fast(std::ptr::NonNull<FastRing>);

// SAFETY: `Fast` owns its ring like a `Box` would, and a `Box<FastRing>`
// (plain integers) is `Send`.
unsafe impl Send for Fast {}

impl Fast {
    const LAYOUT: std::alloc::Layout = std::alloc::Layout::new::<FastRing>();

    fn new() -> Self {
        // SAFETY: the layout has a non-zero size; every field of every
        // event is an integer, so all-zero bytes are a valid `FastRing`
        // (the empty events).
        let p = unsafe { std::alloc::alloc_zeroed(Self::LAYOUT) };
        match std::ptr::NonNull::new(p.cast::<FastRing>()) {
            Some(p) => Self(p),
            None => std::alloc::handle_alloc_error(Self::LAYOUT),
        }
    }

    fn events(&self) -> &[Event] {
        // SAFETY: the ring was allocated and zeroed in `new` and is freed
        // only by `drop`;
        // writes go through `&mut Recorder`, so none runs while this
        // shared borrow of the recorder lasts.
        unsafe { &self.0.as_ref().0 }
    }

    /// The address of event `i` (below [`FAST_EVENTS`]), its provenance
    /// exposed for the hot path's write.
    fn addr(&self, i: usize) -> usize {
        // `as usize` exposes the pointer's provenance (std's
        // `expose_provenance`, which is newer than the crate's MSRV).
        self.0.as_ptr().cast::<Event>().wrapping_add(i) as usize
    }
}

impl Drop for Fast {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed only here,
        // once.
        unsafe { std::alloc::dealloc(self.0.as_ptr().cast(), Self::LAYOUT) };
    }
}

/// Marks the branch that calls it as rarely taken (std's `cold_path` is
/// newer than the crate's MSRV).
#[cold]
#[inline]
fn cold() {}

/// Where the next event goes in [`Mode::Fast`], as an address (0 in every
/// other mode), kept as four 16-bit halves so that the hot path can
/// advance the low one alone: one 64-bit load is the mode check and the
/// cursor together, and one 16-bit store moves it on.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(8))]
struct Next([u16; 4]);

/// Which of [`Next`]'s halves holds the low 16 bits of the address.
const LOW: usize = if cfg!(target_endian = "little") { 0 } else { 3 };

impl Next {
    const NONE: Next = Next([0; 4]);

    fn at(addr: usize) -> Self {
        Self(bytemuck::cast::<u64, [u16; 4]>(addr as u64))
    }

    #[inline(always)]
    fn addr(self) -> usize {
        bytemuck::cast::<[u16; 4], u64>(self.0) as usize
    }
}

/// A rank's flight recorder.
pub(crate) struct Recorder {
    /// The hot path's cursor ([`Next`]).
    next: Next,
    mode: Mode,
    /// The other modes' cursor: byte offset in the ring of the next event
    /// to write, a multiple of [`EVENT`] below the ring's size.
    pos: usize,
    /// The ring's size in bytes, less one (a power of two).
    mask: usize,
    tsc: bool,
    /// The default ring ([`FAST_EVENTS`] events), where it is that size.
    fast: Option<Fast>,
    /// A ring of another size; empty where `fast` is the ring.
    ev: Box<[Event]>,
    /// The clocks when the recorder started: ticks, monotonic and real ns.
    start: (u64, u64, u64),
    marks: Box<[[u8; MARK_LEN]]>,
    mark_next: usize,
}

/// One event, decoded, with its time in monotonic nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub ns: u64,
    pub code: Code,
    /// The header kind for wire events, else the event's `sub`.
    pub sub: u8,
    pub ctx: u16,
    pub tag: u32,
    pub seq: u16,
    pub peer: u32,
    pub len: u64,
}

impl Recorder {
    /// A recorder keeping the last `events` events (rounded up to a power of
    /// two; 0 switches it off).
    pub(crate) fn new(events: usize) -> Self {
        let n = events.max(1).next_power_of_two();
        let tsc = sys::tsc_usable();
        let fast = (n == FAST_EVENTS).then(Fast::new);
        let mut r = Self {
            next: Next::NONE,
            mode: Mode::Off,
            pos: 0,
            mask: n * EVENT - 1,
            tsc,
            ev: match fast {
                Some(_) => Box::new([]),
                None => vec![Event::EMPTY; n].into_boxed_slice(),
            },
            fast,
            start: {
                let (t, m) = anchor(tsc);
                (t, m, sys::clock_ns(libc::CLOCK_REALTIME))
            },
            marks: vec![[0u8; MARK_LEN]; MARKS].into_boxed_slice(),
            mark_next: 0,
        };
        r.set_on(events > 0);
        r
    }

    /// The ring.
    fn ring(&self) -> &[Event] {
        match &self.fast {
            Some(f) => f.events(),
            None => &self.ev,
        }
    }

    fn mode(on: bool, tsc: bool, events: usize) -> Mode {
        match (on, tsc) {
            (false, _) => Mode::Off,
            (true, true) if events == FAST_EVENTS => Mode::Fast,
            (true, true) => Mode::Tsc,
            (true, false) => Mode::Mono,
        }
    }

    /// Whether events are being kept.
    pub(crate) fn is_on(&self) -> bool {
        self.mode != Mode::Off
    }

    /// Keeps events from now (`true`) or stops (`false`); a recorder made
    /// with no room stays off. Switching keeps the events and their order.
    pub(crate) fn set_on(&mut self, on: bool) {
        let at = self.oldest();
        let n = self.ring().len();
        self.mode = Self::mode(on && n > 1, self.tsc, n);
        self.next = match (&self.fast, self.mode) {
            (Some(f), Mode::Fast) => Next::at(f.addr(at)),
            _ => Next::NONE,
        };
        self.pos = at * EVENT;
    }

    /// Index of the oldest event kept (the next to be overwritten).
    fn oldest(&self) -> usize {
        match (&self.fast, self.mode) {
            (Some(f), Mode::Fast) => (self.next.addr() - f.addr(0)) / EVENT,
            _ => self.pos / EVENT,
        }
    }

    /// Records an event whose first word is `w0` (a header's, or [`word`]).
    #[inline(always)]
    pub(crate) fn add(&mut self, code: Code, w0: u64, seq: u16, peer: usize, len: u64) {
        // One load and one test for the mode and the cursor together.
        let p = self.next.addr();
        if p == 0 {
            // Laid out after the hot path, which then falls through
            // without a jump.
            cold();
            if self.mode == Mode::Off {
                return;
            }
            return self.add_other(code, w0, seq, peer, len);
        }
        let t = sys::tsc_halves();
        self.next.0[LOW] = (p as u16).wrapping_add(EVENT as u16);
        // Built after the cursor moved: built before, the compiler joined
        // the counter's halves into one store again (4 instructions more
        // per send + receive, measured with callgrind).
        let e = Event::new(t, code, w0, seq, peer, len);
        // SAFETY: `p` is non-zero only in Mode::Fast, where it is the
        // address of an event of the fast ring (exposed by `Fast::addr`):
        // the ring is 64 KiB aligned to 64 KiB, and each event is advanced
        // from the previous by adding EVENT to the address's low 16 bits,
        // which wraps inside the ring by itself (EVENT divides 2^16). The
        // ring lives as long as `self`, which `&mut self` borrows
        // exclusively. A 16-bit add instead of a bounds check and a mask,
        // and no load of the ring's address, on the hot path.
        unsafe { (p as *mut Event).write(e) };
    }

    /// [`add`](Self::add) into a ring of another size, or where there is
    /// no time-stamp counter.
    #[cold]
    #[inline(never)]
    fn add_other(&mut self, code: Code, w0: u64, seq: u16, peer: usize, len: u64) {
        let t = sys::ticks(self.mode == Mode::Tsc);
        let e = Event::new([t as u32, (t >> 32) as u32], code, w0, seq, peer, len);
        let at = self.pos;
        // The mask keeps `pos` a multiple of EVENT inside the ring.
        self.pos = (at + EVENT) & self.mask;
        match &mut self.fast {
            // Mode::Mono with the default size.
            Some(f) => {
                let a = f.addr(at / EVENT);
                // SAFETY: as in `add`: an event of the ring `self` owns.
                unsafe { (a as *mut Event).write(e) }
            }
            None => self.ev[at / EVENT] = e,
        }
    }

    /// Records a header sent to or taken from `peer`: `h0` and `h1` its
    /// first two words as encoded.
    #[inline(always)]
    pub(crate) fn wire(&mut self, code: Code, h0: u64, h1: u64, peer: usize, len: u64) {
        self.add(code, h0, h1 as u16, peer, len)
    }

    /// Records a user mark with `text`.
    pub(crate) fn mark(&mut self, text: &str) {
        let mut n = text.len().min(MARK_LEN);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        let slot = self.mark_next % MARKS;
        self.mark_next += 1;
        let m = &mut self.marks[slot];
        m.fill(0);
        m[..n].copy_from_slice(&text.as_bytes()[..n]);
        self.add(Code::Mark, 0, 0, 0, slot as u64);
    }

    /// The events kept, oldest first, with monotonic times.
    #[cfg(test)]
    pub(crate) fn events(&self) -> Vec<Decoded> {
        self.events_at(self.scale())
    }

    /// [`events`](Self::events) with `scale` ns per tick.
    fn events_at(&self, scale: f64) -> Vec<Decoded> {
        let evs = self.ring();
        let n = evs.len();
        let oldest = self.oldest();
        let (t0, m0, _) = self.start;
        (0..n)
            .filter_map(|k| {
                let e = evs[(oldest + k) % n];
                let code = Code::of(e.code)?;
                let t = e.t[0] as u64 | (e.t[1] as u64) << 32;
                let ns = if self.tsc {
                    m0 as i64 + ((t as i64 - t0 as i64) as f64 * scale) as i64
                } else {
                    t as i64
                };
                Some(Decoded {
                    ns: ns.max(0) as u64,
                    code,
                    sub: (e.w0 >> 8) as u8,
                    ctx: (e.w0 >> 16) as u16,
                    tag: (e.w0 >> 32) as u32,
                    seq: e.seq,
                    peer: e.peer,
                    len: e.len,
                })
            })
            .collect()
    }

    /// The last `n` events as lines of text, newest last, each with how
    /// long ago it was; a wait still open is said first.
    pub(crate) fn last_lines(&self, n: usize) -> Vec<String> {
        let evs = self.events_at(self.scale());
        let now = sys::clock_ns(libc::CLOCK_MONOTONIC);
        let ago = |e: &Decoded| now.saturating_sub(e.ns) as f64 / 1e6;
        let mut out = Vec::new();
        let open = evs
            .iter()
            .rev()
            .find(|e| matches!(e.code, Code::WaitBegin | Code::WaitEnd));
        if let Some(w) = open.filter(|w| w.code == Code::WaitBegin) {
            out.push(format!("now: {} (for {:.3} ms)", wait_name(w), ago(w)));
        }
        for e in &evs[evs.len().saturating_sub(n)..] {
            let what = match e.code {
                Code::Sent => format!(
                    "sent {} to {} tag {} seq {} ({} B)",
                    kind_name(e.sub),
                    e.peer,
                    e.tag,
                    e.seq,
                    e.len
                ),
                Code::Arrived => format!(
                    "took {} from {} tag {} seq {} ({} B)",
                    kind_name(e.sub),
                    e.peer,
                    e.tag,
                    e.seq,
                    e.len
                ),
                Code::PostSend => format!("posted send to {} tag {} ({} B)", e.peer, e.tag, e.len),
                Code::PostRecv => format!(
                    "posted recv from {} tag {} ({} B)",
                    peer_name(e.peer),
                    e.tag,
                    e.len
                ),
                Code::Done => format!(
                    "completed ({} tag {}, {} B)",
                    peer_name(e.peer),
                    e.tag,
                    e.len
                ),
                Code::Failed => "failed".to_string(),
                Code::Pulled => format!("pulled {} B from {}", e.len, e.peer),
                Code::Streamed => format!("{} B from {} to be streamed", e.len, e.peer),
                Code::CollBegin => format!("{} begins", coll_name(e.sub)),
                Code::CollEnd => format!("{} ends", coll_name(e.sub)),
                Code::WaitBegin => wait_name(e),
                Code::WaitEnd => "wait ends".to_string(),
                Code::Mark => format!("mark: {}", self.mark_text(e.len)),
                Code::LinkFailed => format!("link to {} failed", e.peer),
            };
            out.push(format!("{:>10.3} ms ago  {what}", ago(e)));
        }
        out
    }

    /// Nanoseconds per tick, measured against the monotonic clock since the
    /// recorder started (waits a little if that was under 2 ms ago).
    fn scale(&self) -> f64 {
        if !self.tsc {
            return 1.0;
        }
        let (t0, m0, _) = self.start;
        let m1 = sys::clock_ns(libc::CLOCK_MONOTONIC);
        if m1 < m0 + 2_000_000 {
            std::thread::sleep(std::time::Duration::from_nanos(m0 + 2_000_000 - m1));
        }
        let (t1, m1) = anchor(true);
        (m1 - m0) as f64 / (t1.wrapping_sub(t0)).max(1) as f64
    }

    fn mark_text(&self, slot: u64) -> String {
        let m = &self.marks[slot as usize % MARKS];
        let end = m.iter().position(|&b| b == 0).unwrap_or(MARK_LEN);
        String::from_utf8_lossy(&m[..end]).into_owned()
    }

    /// The trace-event document of what is kept.
    pub(crate) fn to_json(&self, who: &Whoami) -> Value {
        let scale = self.scale();
        let evs = self.events_at(scale);
        let now = sys::clock_ns(libc::CLOCK_MONOTONIC);
        let pid = who.rank;
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut out = vec![
            json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                   "args": {"name": format!("rank {} ({})", who.rank, who.host)}}),
            json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                   "args": {"sort_index": who.rank}}),
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0,
                   "args": {"name": "messages"}}),
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1,
                   "args": {"name": "calls"}}),
        ];
        // Spans open on this rank: a collective's or a wait's begin, until
        // its end (or now, still open: the trace of a hang shows it).
        let mut open_coll: Option<Decoded> = None;
        let mut open_wait: Option<Decoded> = None;
        let span = |b: &Decoded, end: u64, name: String, cat: &str, done: bool| {
            json!({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": 1,
                   "ts": us(b.ns), "dur": us(end.saturating_sub(b.ns)).max(0.001),
                   "args": {"peer": b.peer, "tag": b.tag, "ctx": b.ctx, "len": b.len,
                            "finished": done}})
        };
        for e in &evs {
            let args = json!({"peer": e.peer, "seq": e.seq, "tag": e.tag, "ctx": e.ctx,
                              "len": e.len, "kind": kind_name(e.sub)});
            match e.code {
                Code::Sent | Code::Arrived => {
                    let dir = if e.code == Code::Sent { "to" } else { "from" };
                    out.push(json!({"ph": "X", "cat": "message", "pid": pid, "tid": 0,
                        "name": format!("{} {dir} {}", kind_name(e.sub), e.peer),
                        "ts": us(e.ns), "dur": 0.01,
                        "args": {"peer": e.peer, "seq": e.seq, "tag": e.tag, "ctx": e.ctx,
                                 "len": e.len, "kind": kind_name(e.sub),
                                 "dir": if e.code == Code::Sent { "sent" } else { "arrived" }}}));
                }
                Code::PostSend
                | Code::PostRecv
                | Code::Done
                | Code::Failed
                | Code::Pulled
                | Code::Streamed
                | Code::LinkFailed => {
                    let name = match e.code {
                        Code::PostSend => format!("post send to {}", e.peer),
                        Code::PostRecv => format!("post recv from {}", peer_name(e.peer)),
                        Code::Done => format!("done ({})", peer_name(e.peer)),
                        Code::Failed => format!("failed ({})", peer_name(e.peer)),
                        Code::Pulled => format!("pulled {} B from {}", e.len, e.peer),
                        Code::Streamed => format!("streamed {} B from {}", e.len, e.peer),
                        _ => format!("link to {} failed", e.peer),
                    };
                    out.push(
                        json!({"ph": "i", "s": "t", "cat": "op", "pid": pid, "tid": 1,
                                    "name": name, "ts": us(e.ns), "args": args}),
                    );
                }
                Code::Mark => {
                    out.push(
                        json!({"ph": "i", "s": "p", "cat": "mark", "pid": pid, "tid": 1,
                                    "name": self.mark_text(e.len), "ts": us(e.ns)}),
                    );
                }
                Code::CollBegin => open_coll = Some(*e),
                Code::CollEnd => {
                    if let Some(b) = open_coll.take() {
                        out.push(span(&b, e.ns, coll_name(b.sub), "collective", true));
                    }
                }
                Code::WaitBegin => open_wait = Some(*e),
                Code::WaitEnd => {
                    if let Some(b) = open_wait.take() {
                        out.push(span(&b, e.ns, wait_name(&b), "stall", true));
                    }
                }
            }
        }
        if let Some(b) = open_coll {
            out.push(span(&b, now, coll_name(b.sub), "collective", false));
        }
        if let Some(b) = open_wait {
            out.push(span(&b, now, wait_name(&b), "stall", false));
        }
        json!({
            "traceEvents": out,
            "displayTimeUnit": "ns",
            "otherData": {
                "tandem": {
                    "version": 1,
                    "rank": who.rank,
                    "size": who.size,
                    "host": who.host,
                    "boot_id": who.boot_id,
                    "pid": std::process::id(),
                    "clock": if self.tsc { "tsc" } else { "monotonic" },
                    "tsc_start": self.start.0,
                    "ns_per_tick": scale,
                    "mono_start_ns": self.start.1,
                    "real_start_ns": self.start.2,
                    "mono_now_ns": now,
                    "events_kept": evs.len(),
                }
            }
        })
    }
}

/// Writes trace document `doc` of rank `rank` to `dir/rank-<rank>.json`
/// (creating the directory; through a temporary file, so a reader never
/// sees half a trace) and returns the path.
///
/// # Errors
/// What creating the directory or writing the file failed with.
pub(crate) fn write_trace_file(dir: &Path, rank: usize, doc: &Value) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("rank-{rank}.json"));
    let tmp = dir.join(format!(".rank-{rank}.json.{}", std::process::id()));
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        serde_json::to_writer(&mut f, doc)?;
        f.write_all(b"\n")?;
        f.flush()?;
    }
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The ticks and the monotonic clock read at one moment: of five tries,
/// the one whose two tick readings around the clock's are closest, with
/// their midpoint (a few tens of nanoseconds of uncertainty).
fn anchor(tsc: bool) -> (u64, u64) {
    if !tsc {
        let m = sys::clock_ns(libc::CLOCK_MONOTONIC);
        return (m, m);
    }
    (0..5)
        .map(|_| {
            let a = sys::ticks(true);
            let m = sys::clock_ns(libc::CLOCK_MONOTONIC);
            let b = sys::ticks(true);
            (b.wrapping_sub(a), a + b.wrapping_sub(a) / 2, m)
        })
        .min_by_key(|x| x.0)
        .map(|(_, t, m)| (t, m))
        .expect("five tries")
}

/// Who writes a trace: what the merger needs to place a rank.
#[derive(Debug, Clone)]
pub(crate) struct Whoami {
    pub rank: usize,
    pub size: usize,
    /// The host's name.
    pub host: String,
    /// The kernel's boot id: ranks with the same one share one monotonic
    /// clock.
    pub boot_id: String,
}

impl Whoami {
    /// Rank `rank` of `size` on this host.
    pub(crate) fn here(rank: usize, size: usize) -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Self {
            rank,
            size,
            host: read("/proc/sys/kernel/hostname"),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
        }
    }
}

fn peer_name(p: u32) -> String {
    if p == tandem_core::proto::ANY_SOURCE {
        "any".into()
    } else {
        p.to_string()
    }
}

/// A header kind's name in a trace.
fn kind_name(k: u8) -> &'static str {
    const NAMES: [(Kind, &str); 8] = [
        (Kind::Eager, "eager"),
        (Kind::EagerSync, "eager-sync"),
        (Kind::Rts, "RTS"),
        (Kind::RtsEager, "RTS-on-eager-credit"),
        (Kind::Cts, "CTS"),
        (Kind::Fin, "FIN"),
        (Kind::Ack, "ACK"),
        (Kind::Credit, "credit"),
    ];
    if k == tandem_core::wire::SHORT_EAGER {
        // A one-line eager message's short header.
        return "eager";
    }
    NAMES
        .iter()
        .find(|(kind, _)| *kind as u8 == k)
        .map_or("control", |(_, n)| n)
}

/// Which collective a `CollBegin` names.
fn coll_name(sub: u8) -> String {
    crate::config::Collective::ALL
        .get(sub as usize)
        .map_or("collective", |c| c.name())
        .to_string()
}

/// What a wait's slice is called: why it waits.
fn wait_name(b: &Decoded) -> String {
    use tandem_core::proto::Phase;
    let peer = peer_name(b.peer);
    let why = match phase_of(b.sub) {
        Some(Phase::Queued) => format!("stall: no credit (send to {peer})"),
        Some(Phase::WaitReceiver) => format!("stall: no clear-to-send (send to {peer})"),
        Some(Phase::WaitAck) => format!("stall: no acknowledgement (send to {peer})"),
        Some(Phase::Posted) => format!("stall: no message (recv from {peer})"),
        Some(Phase::Streaming) => format!("waiting: streaming with {peer}"),
        Some(Phase::Pulling) => format!("waiting: pulling from {peer}"),
        _ => format!("waiting on {peer}"),
    };
    format!("{why}, tag {}", b.tag)
}

/// The phases a `WaitBegin` names, by their byte there less one.
const PHASES: [tandem_core::proto::Phase; 7] = {
    use tandem_core::proto::Phase::*;
    [
        Queued,
        WaitAck,
        WaitReceiver,
        Streaming,
        Posted,
        Pulling,
        Done,
    ]
};

/// A phase as the byte a `WaitBegin` keeps (0: none).
pub(crate) fn phase_byte(p: tandem_core::proto::Phase) -> u8 {
    PHASES
        .iter()
        .position(|q| *q == p)
        .map_or(0, |i| i as u8 + 1)
}

fn phase_of(b: u8) -> Option<tandem_core::proto::Phase> {
    PHASES.get((b as usize).checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_events_in_order() {
        let mut r = Recorder::new(8);
        for i in 0..20u64 {
            r.add(
                Code::Sent,
                word(Kind::Eager as u8, 3, i as u32),
                i as u16,
                1,
                i,
            );
        }
        let e = r.events();
        assert_eq!(e.len(), 8);
        assert_eq!(
            e.iter().map(|e| e.len).collect::<Vec<_>>(),
            (12..20).collect::<Vec<_>>()
        );
        assert!(e.windows(2).all(|w| w[0].ns <= w[1].ns), "times in order");
        assert!(e
            .iter()
            .all(|e| e.code == Code::Sent && e.ctx == 3 && e.peer == 1));
        assert_eq!(e[0].sub, Kind::Eager as u8);
        assert_eq!((e[0].tag, e[0].seq), (12, 12));
    }

    #[test]
    fn the_default_ring_wraps_by_its_16_bit_address_half() {
        let mut r = Recorder::new(FAST_EVENTS);
        assert_eq!(r.mode == Mode::Fast, sys::tsc_usable());
        let base = r.fast.as_ref().expect("the default size").addr(0);
        assert_eq!(base % (1 << 16), 0, "aligned to its size");
        let n = FAST_EVENTS as u64;
        for i in 0..3 * n + 10 {
            r.add(Code::Arrived, word(Kind::Eager as u8, 1, 7), i as u16, 2, i);
            if i == n / 2 {
                // Off and on again keeps the events and their order.
                r.set_on(false);
                r.add(Code::Done, 0, 0, 0, u64::MAX);
                r.set_on(true);
            }
        }
        let e = r.events();
        assert_eq!(e.len(), FAST_EVENTS);
        assert_eq!(
            e.iter().map(|e| e.len).collect::<Vec<_>>(),
            (2 * n + 10..3 * n + 10).collect::<Vec<_>>(),
            "the last {FAST_EVENTS}, oldest first, after three laps"
        );
        if r.mode == Mode::Fast {
            let at = r.next.addr();
            assert!((base..base + (1 << 16)).contains(&at), "inside the ring");
        }
        assert!(e.windows(2).all(|w| w[0].ns <= w[1].ns), "times in order");
        let last = e.last().expect("kept");
        assert_eq!((last.code, last.peer, last.tag), (Code::Arrived, 2, 7));
    }

    #[test]
    fn off_keeps_nothing_and_marks_are_cut_at_a_character() {
        let mut r = Recorder::new(0);
        r.add(Code::Done, 0, 0, 0, 0);
        assert!(r.events().is_empty() && !r.is_on());
        r.set_on(true);
        assert!(!r.is_on(), "no room, stays off");
        let mut r = Recorder::new(4);
        let long = "é".repeat(40);
        r.mark(&long);
        let e = r.events();
        assert_eq!(e.len(), 1);
        let t = r.mark_text(e[0].len);
        assert!(t.len() <= MARK_LEN && t.chars().all(|c| c == 'é'), "{t}");
    }

    #[test]
    fn times_are_monotonic_nanoseconds() {
        let mut r = Recorder::new(4);
        let before = sys::clock_ns(libc::CLOCK_MONOTONIC);
        r.add(Code::Done, 0, 0, 0, 0);
        std::thread::sleep(std::time::Duration::from_millis(3));
        r.add(Code::Done, 0, 0, 0, 0);
        let after = sys::clock_ns(libc::CLOCK_MONOTONIC);
        let e = r.events();
        // Converted ticks land within the monotonic clock's readings, give
        // or take the conversion's error (well under 0.1 ms here).
        assert!(
            e[0].ns + 100_000 >= before && e[1].ns <= after + 100_000,
            "{e:?}"
        );
        let gap = e[1].ns - e[0].ns;
        assert!((2_900_000..50_000_000).contains(&gap), "{gap}");
    }
}
