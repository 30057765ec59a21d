//! Runs schedules: a fixed table of collectives in flight, each with its
//! lanes, advanced by whoever waits on the communicator. Every transfer is
//! an ordinary point-to-point operation of the progress layer in the
//! communicator's collective context, so collectives run over every
//! transport; the only memory they own is per-table-entry scratch, grown
//! on first use and kept (no allocation per call in steady state).

use super::plan::{After, Buf, Plan, Region};
use super::types::Kernel;
use super::Shape;
use crate::error::{Error, OpKind, Result};
use crate::progress::{delivered, Engine, Fast, OpId, Status};

/// Collectives one communicator may have in flight at once.
pub(crate) const MAX_INFLIGHT: usize = 16;
/// Largest receive a single-lane collective polls its link for instead
/// of posting (eager sizes; larger messages fall back by themselves).
pub(crate) const FAST_MAX: usize = 8192;
/// Most lanes (concurrent pipelines) of one collective.
pub(crate) const MAX_LANES: usize = 8;

/// Scratch unit: 64-byte aligned, so every element type is aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// What a collective call works on, as raw parts (the comm layer holds the
/// borrows, for at least as long as the collective runs).
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub plan: Plan,
    pub kernel: Option<Kernel>,
    pub esize: usize,
    pub src: *const u8,
    pub src_len: usize,
    pub dst: *mut u8,
    pub dst_len: usize,
    /// The world rank of each of the communicator's ranks, `map_len` of
    /// them (null: the communicator is the world). The communicator owns
    /// the list for as long as it lives, and with it every collective it
    /// runs.
    pub map: *const u32,
    pub map_len: usize,
}

impl Call {
    /// The world rank (the engine's numbering) of the communicator's rank
    /// `p`, a peer of the plan (below the communicator's size).
    #[inline]
    pub(crate) fn world(&self, p: usize) -> usize {
        if self.map.is_null() || p >= self.map_len {
            return p;
        }
        // SAFETY: a non-null `map` points to `map_len` ranks that the
        // communicator keeps alive while any of its collectives runs (see
        // the field); `p` is below `map_len`.
        unsafe { *self.map.add(p) as usize }
    }
}

/// One lane's position: the step running (its transfers posted) and the
/// transfers not yet collected. The step itself is recomputed from the
/// plan when needed, which keeps the table entry small.
#[derive(Clone, Copy)]
struct Lane {
    k: usize,
    started: bool,
    done: bool,
    /// The step's receive is not posted: the lane polls the link for it
    /// (the blocking receive's fast path, no operation recorded).
    fast: bool,
    /// The polled receive: buffer, length, peer (valid while `fast`).
    rbuf: *mut u8,
    rlen: usize,
    rpeer: usize,
    send: Option<OpId>,
    recv: Option<OpId>,
}

const IDLE: Lane = Lane {
    k: 0,
    started: false,
    done: false,
    fast: false,
    rbuf: std::ptr::null_mut(),
    rlen: 0,
    rpeer: 0,
    send: None,
    recv: None,
};

/// A call's buffers and scratch space, and how regions map onto them.
#[derive(Clone, Copy)]
pub(crate) struct Views {
    pub(crate) call: Call,
    tmp: *mut u8,
    lane_bytes: usize,
    slot_bytes: usize,
    nlanes: usize,
}

/// Most steps of a collective run inline by its caller; longer ones (an
/// all-to-all on many ranks) run through the table.
const INLINE_STEPS: usize = 16;

/// The scratch of the collectives run inline: their own, after the table
/// entries', so an inline run never shares memory with a collective in
/// flight (whose posted receives may land in its scratch at any time).
const INLINE_SCRATCH: usize = MAX_INFLIGHT;

/// Which of a call's buffers a place lies in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Base {
    #[default]
    Src,
    Dst,
    Tmp,
}

/// `len` bytes at byte offset `off` of a call's buffer `base`, checked
/// against that buffer's length when it was resolved.
#[derive(Debug, Clone, Copy, Default)]
struct Place {
    base: Base,
    off: usize,
    len: usize,
}

impl Place {
    /// The place's address, given the call's buffers and scratch.
    #[inline]
    fn at(self, src: *const u8, dst: *mut u8, tmp: *mut u8) -> *mut u8 {
        let base = match self.base {
            Base::Src => src as *mut u8,
            Base::Dst => dst,
            Base::Tmp => tmp,
        };
        base.wrapping_add(self.off)
    }
}

/// One step of a compiled program: its transfers (place, peer) and its
/// reduction (out, a, b, elements).
#[derive(Debug, Clone, Copy, Default)]
struct Resolved {
    send: Option<(Place, usize)>,
    recv: Option<(Place, usize)>,
    reduce: Option<(Place, Place, Place, usize)>,
}

/// What a program was compiled for: a call with an equal key has the same
/// plan and the same places. `epoch` counts the communicator's plans and
/// changes of settings, so either in between (a forced algorithm, or a
/// plan that may print a change of algorithm) makes the next call plan
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InlineKey {
    pub shape: Shape,
    pub src_len: usize,
    pub dst_len: usize,
    pub epoch: u64,
}

/// A small blocking collective compiled for its caller: the plan's steps
/// for lane 0 with every region resolved to a checked place, kept so that
/// the next call of the same shape runs without planning again. It holds
/// offsets, never addresses: each run applies them to that call's own
/// buffers, whose lengths the key pins.
pub(crate) struct Program {
    key: Option<InlineKey>,
    plan: Plan,
    kernel: Option<Kernel>,
    copy: Option<(Place, Place)>,
    steps: [Resolved; INLINE_STEPS],
    len: usize,
}

impl Default for Program {
    fn default() -> Self {
        Self {
            key: None,
            plan: Plan::NONE,
            kernel: None,
            copy: None,
            steps: [Resolved::default(); INLINE_STEPS],
            len: 0,
        }
    }
}

impl Program {
    /// The plan of the call compiled last ([`Plan::NONE`] before any).
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Compiles lane 0 of `v`'s plan, checking every region. `Ok(false)`
    /// (and nothing kept) when it has more steps than a program holds.
    fn compile(&mut self, v: &Views, key: InlineKey) -> Result<bool> {
        self.key = None;
        let plan = &v.call.plan;
        self.copy = match plan.pre_copy() {
            Some((from, to)) => Some((v.place(from, 0)?, v.place(to, 0)?)),
            None => None,
        };
        let mut k = 0;
        while let Some(step) = plan.step(0, k) {
            if k == INLINE_STEPS {
                return Ok(false);
            }
            let xfer = |x: Option<super::plan::Xfer>| -> Result<Option<(Place, usize)>> {
                x.map(|x| Ok((v.place(x.region, 0)?, v.call.world(x.peer))))
                    .transpose()
            };
            let reduce = match step.after {
                After::None => None,
                After::Reduce { out, a, b } => {
                    if v.call.kernel.is_none() {
                        return Err(Error::Internal("a reduction without a kernel".into()));
                    }
                    Some((v.place(out, 0)?, v.place(a, 0)?, v.place(b, 0)?, out.len))
                }
            };
            self.steps[k] = Resolved {
                send: xfer(step.send)?,
                recv: xfer(step.recv)?,
                reduce,
            };
            k += 1;
        }
        self.len = k;
        self.plan = *plan;
        self.kernel = v.call.kernel;
        self.key = Some(key);
        Ok(true)
    }

    /// Runs the program over one call's buffers (`src`, `dst`, with the
    /// lengths its key names, and the scratch `tmp` it was compiled
    /// against): the local copy, then each step through `exchange` (a send
    /// and a receive in full) and its reduction. The one runner of
    /// inline collectives.
    pub(crate) fn run(
        &self,
        src: *const u8,
        dst: *mut u8,
        tmp: *mut u8,
        mut exchange: impl FnMut(Option<(&[u8], usize)>, Option<(&mut [u8], usize)>) -> Result<()>,
    ) -> Result<()> {
        let at = |p: Place| p.at(src, dst, tmp);
        if let Some((from, to)) = self.copy {
            let (f, t) = (at(from), at(to));
            if from.len > 0 && f != t {
                // SAFETY: both places lie in their buffers (checked at
                // compile time against the lengths the key pins), and
                // distinct buffers or distinct blocks of one never overlap.
                unsafe { std::ptr::copy_nonoverlapping(f, t, from.len) };
            }
        }
        for s in &self.steps[..self.len] {
            let send = s.send.map(|(p, peer)| {
                // SAFETY: the place lies in the caller's buffers or the
                // scratch (checked at compile time), all held for the whole
                // call; only read while sending.
                let buf = unsafe { std::slice::from_raw_parts(at(p), p.len) };
                (buf, peer)
            });
            let recv = s.recv.map(|(p, peer)| {
                // SAFETY: as above; a step's receive place is disjoint from
                // its send place (the plan's invariant) and nothing else
                // touches it meanwhile.
                let buf = unsafe { std::slice::from_raw_parts_mut(at(p), p.len) };
                (buf, peer)
            });
            exchange(send, recv)?;
            if let (Some((o, a, b, n)), Some(k)) = (s.reduce, self.kernel) {
                // SAFETY: the places lie in their buffers (checked); `out`
                // is `a`, `b` or disjoint from both, as the kernel requires
                // (the plan's invariant), and no transfer is running.
                unsafe { k(at(o), at(a), at(b), n) };
            }
        }
        Ok(())
    }
}

struct Active {
    v: Views,
    ctx: u16,
    tag: u32,
    scope: u32,
    seq: u32,
    lanes: [Lane; MAX_LANES],
    /// Steps finished (the progress measure for timeouts).
    moved: u64,
}

// The table's entries are allocated once, inline; boxing the large
// variant would allocate on every call.
#[allow(clippy::large_enum_variant)]
enum Slot {
    Free,
    Running(Active),
    Done { scope: u32, result: Result<()> },
}

/// A started collective: its table entry and that entry's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    slot: usize,
    gen: u32,
}

/// Where a stalled collective waits, for its timeout report.
pub(crate) struct Stall {
    pub op: OpKind,
    pub peer: usize,
    pub tag: u32,
    pub what: String,
}

/// The collectives of one communicator.
pub(crate) struct Table {
    slots: Vec<Slot>,
    gens: [u32; MAX_INFLIGHT],
    /// Scratch per table entry, and one more for the inline programs
    /// ([`INLINE_SCRATCH`]).
    scratch: Vec<Vec<Line>>,
    seq: u32,
    running: usize,
}

// SAFETY: the raw pointers in `Active` are the buffers of a collective
// that is running. A blocking collective finishes (or is withdrawn) before
// its call returns; a non-blocking one lives in a request scope, which
// borrows the communicator for its whole life, so the communicator (and
// this table with it) cannot move to another thread while any entry holds
// a pointer. Scratch pointers point into `scratch`, owned here.
unsafe impl Send for Table {}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// An empty table: its entries are allocated now, scratch on first use.
    pub(crate) fn new() -> Self {
        Self {
            slots: (0..MAX_INFLIGHT).map(|_| Slot::Free).collect(),
            gens: [0; MAX_INFLIGHT],
            scratch: (0..=INLINE_SCRATCH).map(|_| Vec::new()).collect(),
            seq: 0,
            running: 0,
        }
    }

    /// Starts a collective in context `ctx`, its transfers in `scope`.
    /// Every rank numbers its collectives in call order, which is how the
    /// ranks' transfers of concurrent collectives stay apart.
    pub(crate) fn start(
        &mut self,
        e: &mut Engine,
        call: Call,
        ctx: u16,
        scope: u32,
    ) -> Result<Ticket> {
        let Some(slot) = self.slots.iter().position(|s| matches!(s, Slot::Free)) else {
            return Err(Error::TooManyRequests {
                capacity: MAX_INFLIGHT,
            });
        };
        let v = self.views(slot, call);
        // The local copy can refuse the call (a region beyond its buffer):
        // before the call is numbered, so a refusal leaves no trace.
        v.pre_copy()?;
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let a = Active {
            v,
            ctx,
            tag: tag_of(seq),
            scope,
            seq,
            lanes: [IDLE; MAX_LANES],
            moved: 0,
        };
        self.slots[slot] = Slot::Running(a);
        self.running += 1;
        let t = Ticket {
            slot,
            gen: self.gens[slot],
        };
        self.advance(e, slot);
        Ok(t)
    }

    /// The views of `call` over scratch `slot` (a table entry's, or
    /// [`INLINE_SCRATCH`]), grown once to the largest call seen there and
    /// kept afterwards.
    fn views(&mut self, slot: usize, call: Call) -> Views {
        let (ntmp, elems) = call.plan.scratch();
        let slot_bytes = elems * call.esize;
        let nlanes = call.plan.lanes_used();
        let lane_bytes = ntmp * slot_bytes;
        let need = (nlanes.max(1) * lane_bytes).div_ceil(64);
        let s = &mut self.scratch[slot];
        if s.len() < need {
            s.resize(need, Line([0; 64]));
        }
        Views {
            call,
            tmp: s.as_mut_ptr().cast::<u8>(),
            lane_bytes,
            slot_bytes,
            nlanes,
        }
    }

    /// Takes `call` to run inline by its caller (a blocking collective
    /// while no other runs): compiles it into `prog` (every region resolved
    /// and checked), then numbers it like [`start`](Self::start) and
    /// returns its tag and the scratch the program's `Tmp` places lie in.
    /// A refused call numbers nothing. `None` (nothing numbered) while
    /// other collectives run or when the call has more steps than a
    /// program holds.
    pub(crate) fn inline(
        &mut self,
        call: Call,
        key: InlineKey,
        prog: &mut Program,
    ) -> Option<Result<(u32, *mut u8)>> {
        if self.running > 0 {
            return None;
        }
        let v = self.views(INLINE_SCRATCH, call);
        match prog.compile(&v, key) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        self.seq = self.seq.wrapping_add(1);
        Some(Ok((tag_of(self.seq), v.tmp)))
    }

    /// Numbers a repeat of the call `prog` was compiled for (equal `key`),
    /// to run inline again: its tag and scratch. `None` (nothing numbered)
    /// while other collectives run or when `prog` holds another call.
    pub(crate) fn repeat(&mut self, key: &InlineKey, prog: &Program) -> Option<(u32, *mut u8)> {
        if self.running > 0 || prog.key.as_ref() != Some(key) {
            return None;
        }
        self.seq = self.seq.wrapping_add(1);
        // The inline scratch only grows, so it still holds what the
        // program was compiled against.
        Some((
            tag_of(self.seq),
            self.scratch[INLINE_SCRATCH].as_mut_ptr().cast(),
        ))
    }

    /// Advances every running collective as far as it goes without
    /// waiting; `true` if any step finished.
    pub(crate) fn drive(&mut self, e: &mut Engine) -> bool {
        if self.running == 0 {
            return false;
        }
        if e.in_use() > 0 {
            // Lanes polling their links need no progress; posted
            // transfers (ours or anyone's) do.
            e.progress();
        }
        let mut moved = false;
        for i in 0..self.slots.len() {
            if matches!(self.slots[i], Slot::Running(_)) {
                moved |= self.advance(e, i);
            }
        }
        moved
    }

    /// The result of `t` once it finished (freeing its entry).
    pub(crate) fn take(&mut self, t: Ticket) -> Option<Result<()>> {
        if self.gens[t.slot] != t.gen {
            return Some(Err(Error::InvalidArgument(
                "collective request already completed".into(),
            )));
        }
        match &self.slots[t.slot] {
            Slot::Done { .. } => {}
            _ => return None,
        }
        let Slot::Done { result, .. } = std::mem::replace(&mut self.slots[t.slot], Slot::Free)
        else {
            unreachable!("checked above")
        };
        self.gens[t.slot] = self.gens[t.slot].wrapping_add(1);
        Some(result)
    }

    /// Steps `t` has finished (changes while it makes progress).
    pub(crate) fn moved(&self, t: Ticket) -> u64 {
        match &self.slots[t.slot] {
            Slot::Running(a) if self.gens[t.slot] == t.gen => a.moved,
            _ => u64::MAX,
        }
    }

    /// What `t` waits on.
    pub(crate) fn stall(&self, e: &Engine, t: Ticket) -> Option<Stall> {
        let Slot::Running(a) = &self.slots[t.slot] else {
            return None;
        };
        for (l, lane) in a.lanes[..a.v.nlanes].iter().enumerate() {
            for (id, op) in [(lane.recv, OpKind::Recv), (lane.send, OpKind::Send)] {
                let Some(id) = id else { continue };
                let Some(i) = e.info(id) else { continue };
                let p = a.v.call.plan;
                return Some(Stall {
                    op,
                    peer: i.peer as usize,
                    tag: i.tag,
                    what: format!(
                        "in {} #{} ({}, {} elements, lane {l} step {})",
                        p.coll.name(),
                        a.seq,
                        p.algo.describe(p.coll),
                        p.count,
                        lane.k
                    ),
                });
            }
        }
        None
    }

    /// Posts every receive lanes are polling their links for, so that a
    /// long wait has operations to report and peer deaths to fail.
    pub(crate) fn unfast(&mut self, e: &mut Engine) {
        for i in 0..self.slots.len() {
            let Slot::Running(a) = &mut self.slots[i] else {
                continue;
            };
            let mut err = None;
            for l in 0..a.v.nlanes {
                if let Err(x) = a.unfast_lane(e, l) {
                    err = Some(x);
                    break;
                }
            }
            if let Some(x) = err {
                self.finish(e, i, Err(x));
            }
        }
    }

    /// Fails `t` with `err`, withdrawing its transfers.
    pub(crate) fn fail(&mut self, e: &mut Engine, t: Ticket, err: Error) {
        if self.gens[t.slot] == t.gen && matches!(self.slots[t.slot], Slot::Running(_)) {
            self.finish(e, t.slot, Err(err));
        }
    }

    /// The first collective of `scope` not yet collected.
    pub(crate) fn of_scope(&self, scope: u32) -> Option<Ticket> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            let sc = match s {
                Slot::Running(a) => a.scope,
                Slot::Done { scope, .. } => *scope,
                Slot::Free => return None,
            };
            (sc == scope).then_some(Ticket {
                slot: i,
                gen: self.gens[i],
            })
        })
    }

    /// Forgets every collective of `scope` (its scope is unwinding): their
    /// transfers are withdrawn, so no buffer is touched afterwards.
    pub(crate) fn abandon_scope(&mut self, e: &mut Engine, scope: u32) {
        let why = Error::Panicked("request scope panicked".into());
        while let Some(t) = self.of_scope(scope) {
            self.fail(e, t, why.clone());
            self.take(t);
        }
    }

    /// Ends entry `i` with `result`; pending transfers are withdrawn.
    fn finish(&mut self, e: &mut Engine, i: usize, result: Result<()>) {
        let Slot::Running(a) = &self.slots[i] else {
            return;
        };
        for lane in &a.lanes[..a.v.nlanes] {
            for id in [lane.send, lane.recv].into_iter().flatten() {
                if let Err(err) = &result {
                    e.withdraw(id, err);
                } else {
                    e.take(id);
                }
            }
        }
        self.slots[i] = Slot::Done {
            scope: a.scope,
            result,
        };
        self.running -= 1;
    }

    /// Advances entry `i`; `true` if a step finished.
    fn advance(&mut self, e: &mut Engine, i: usize) -> bool {
        let Slot::Running(a) = &mut self.slots[i] else {
            return false;
        };
        let mut moved = false;
        let mut failed = None;
        let mut live = false;
        'lanes: for l in 0..a.v.nlanes {
            loop {
                match a.poll_lane(e, l) {
                    Ok(true) => moved = true,
                    Ok(false) => {
                        live |= !a.lanes[l].done;
                        continue 'lanes;
                    }
                    Err(err) => {
                        failed = Some(err);
                        break 'lanes;
                    }
                }
            }
        }
        if let Some(err) = failed {
            self.finish(e, i, Err(err));
        } else if !live {
            self.finish(e, i, Ok(()));
        }
        moved
    }
}

/// 24 bits of the call number, 6 of the lane: concurrent collectives and
/// the lanes of one never match each other.
fn tag_of(seq: u32) -> u32 {
    (seq & 0x00ff_ffff) << 6
}

impl Views {
    /// The call's local copy, if it has one.
    pub(crate) fn pre_copy(&self) -> Result<()> {
        if let Some((from, to)) = self.call.plan.pre_copy() {
            let n = from.len * self.call.esize;
            let (f, t) = (self.region(from, 0)?, self.region(to, 0)?);
            if n > 0 && f != t {
                // SAFETY: both regions lie in their buffers (checked just
                // now), and distinct buffers or distinct blocks of one never
                // overlap.
                unsafe { std::ptr::copy_nonoverlapping(f, t, n) };
            }
        }
        Ok(())
    }

    /// Runs a step's reduction `out = op(a, b)` in lane `l`.
    pub(crate) fn reduce(&self, after: After, l: usize) -> Result<()> {
        if let After::Reduce { out, a, b } = after {
            let k = self
                .call
                .kernel
                .ok_or_else(|| Error::Internal("a reduction without a kernel".into()))?;
            let (o, x, y) = (self.region(out, l)?, self.region(a, l)?, self.region(b, l)?);
            // SAFETY: the regions lie in their buffers (checked just now);
            // `out` is `a`, `b` or disjoint from both, as the kernel
            // requires (the plan's invariant), and no transfer of this lane
            // is running.
            unsafe { k(o, x, y, out.len) };
        }
        Ok(())
    }

    /// The address of `r` in lane `lane`'s view, after checking that the
    /// region lies inside its buffer (a schedule bug is an error, never a
    /// stray write).
    #[inline]
    pub(crate) fn region(&self, r: Region, lane: usize) -> Result<*mut u8> {
        let p = self.place(r, lane)?;
        Ok(p.at(self.call.src, self.call.dst, self.tmp))
    }

    /// Where `r` lies in lane `lane`'s view, in bytes, after checking that
    /// it lies inside its buffer.
    #[inline]
    fn place(&self, r: Region, lane: usize) -> Result<Place> {
        let c = &self.call;
        let es = c.esize;
        let (base, start, cap) = match r.buf {
            Buf::Src if c.plan.in_place => (Base::Dst, 0, c.dst_len),
            Buf::Src => (Base::Src, 0, c.src_len),
            Buf::Dst => (Base::Dst, 0, c.dst_len),
            Buf::Tmp(s) => {
                let s = s as usize;
                let fits =
                    lane < self.nlanes.max(1) && (s + 1) * self.slot_bytes <= self.lane_bytes;
                let at = lane * self.lane_bytes + s * self.slot_bytes;
                (Base::Tmp, at, if fits { self.slot_bytes } else { 0 })
            }
        };
        if (r.off + r.len) * es > cap {
            return Err(self.beyond(r, cap));
        }
        Ok(Place {
            base,
            off: start + r.off * es,
            len: r.len * es,
        })
    }

    /// A schedule bug: a region beyond its buffer.
    #[cold]
    fn beyond(&self, r: Region, cap: usize) -> Error {
        Error::Internal(format!(
            "{} step touches {r:?} beyond {cap} bytes",
            self.call.plan.coll.name()
        ))
    }
}

impl Active {
    fn region(&self, r: Region, lane: usize) -> Result<*mut u8> {
        self.v.region(r, lane)
    }

    /// Lane `l` one move further: collects its finished transfers, runs the
    /// step's reduction and posts the next step. `Ok(true)` if a step
    /// finished, `Ok(false)` if it waits (or is done).
    fn poll_lane(&mut self, e: &mut Engine, l: usize) -> Result<bool> {
        let lane = self.lanes[l];
        if lane.done {
            return Ok(false);
        }
        if !lane.started {
            return self.post(e, l, 0);
        }
        if let Some(id) = lane.send {
            match e.take(id) {
                None => return Ok(false),
                Some(r) => {
                    self.lanes[l].send = None;
                    r?;
                }
            }
        }
        let mut got = None;
        if lane.fast {
            match self.poll_fast(e, l)? {
                Some(r) => got = Some(r),
                None if self.lanes[l].fast => return Ok(false),
                None => {}
            }
        }
        let got = match self.lanes[l].recv {
            None => got,
            Some(id) => match e.take(id) {
                None => return Ok(false),
                Some(r) => {
                    self.lanes[l].recv = None;
                    Some(r)
                }
            },
        };
        let step = self.v.call.plan.step(l, lane.k).ok_or_else(|| {
            Error::Internal(format!("{} lost its step", self.v.call.plan.coll.name()))
        })?;
        if let (Some(r), Some(x)) = (got, step.recv) {
            let want = x.region.len * self.v.call.esize;
            match r {
                Ok(st) if st.len != want => return Err(self.mismatch(x.peer, st.len, want)),
                Ok(_) => {}
                Err(Error::Truncated { needed, got, .. }) => {
                    return Err(self.mismatch(x.peer, needed, got))
                }
                Err(err) => return Err(err),
            }
        }
        self.v.reduce(step.after, l)?;
        self.moved += 1;
        self.post(e, l, lane.k + 1).map(|_| true)
    }

    /// Polls lane `l`'s link for its receive: `Some` once it arrived, `None`
    /// while waiting (still `fast`) or once it had to be posted instead (no
    /// longer `fast`: a posted receive ahead, a rendezvous, or the message
    /// already taken off the link by progress).
    fn poll_fast(&mut self, e: &mut Engine, l: usize) -> Result<Option<Result<Status>>> {
        let lane = &self.lanes[l];
        // SAFETY: `post` checked the region and recorded it; as there, the
        // buffer outlives the transfer. The view lives for this call only.
        let buf = unsafe { std::slice::from_raw_parts_mut(lane.rbuf, lane.rlen) };
        let tag = self.tag | l as u32;
        match e.try_recv_now(buf, lane.rpeer, self.ctx, tag) {
            Fast::Done(st) => {
                self.lanes[l].fast = false;
                return Ok(Some(delivered(st, buf.len())));
            }
            Fast::Failed => {
                let err = e.lost(lane.rpeer);
                self.lanes[l].fast = false;
                return Ok(Some(Err(err)));
            }
            Fast::NotYet if !e.has_unexpected() => return Ok(None),
            Fast::NotYet | Fast::Fallback => {}
        }
        self.unfast_lane(e, l)?;
        Ok(None)
    }

    /// Posts lane `l`'s receive that was being polled for.
    fn unfast_lane(&mut self, e: &mut Engine, l: usize) -> Result<()> {
        if !self.lanes[l].fast {
            return Ok(());
        }
        self.lanes[l].fast = false;
        let Some(x) = self
            .v
            .call
            .plan
            .step(l, self.lanes[l].k)
            .and_then(|s| s.recv)
        else {
            return Ok(());
        };
        let len = x.region.len * self.v.call.esize;
        // SAFETY: as in `post`.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.region(x.region, l)?, len) };
        let id = e.post_recv(
            buf,
            self.v.call.world(x.peer) as u32,
            self.ctx,
            self.tag | l as u32,
            self.scope,
        )?;
        self.lanes[l].recv = Some(id);
        Ok(())
    }

    /// Posts step `k` of lane `l` (receive first).
    fn post(&mut self, e: &mut Engine, l: usize, k: usize) -> Result<bool> {
        let step = self.v.call.plan.step(l, k);
        self.lanes[l] = Lane {
            k,
            started: true,
            done: step.is_none(),
            ..IDLE
        };
        let Some(s) = step else { return Ok(false) };
        let tag = self.tag | l as u32;
        if let Some(x) = s.recv {
            let len = x.region.len * self.v.call.esize;
            if self.v.nlanes == 1 && len <= FAST_MAX {
                // One lane, a small message: poll for it (see `poll_fast`).
                let rbuf = self.region(x.region, l)?;
                let rpeer = self.v.call.world(x.peer);
                let lane = &mut self.lanes[l];
                (lane.fast, lane.rbuf, lane.rlen, lane.rpeer) = (true, rbuf, len, rpeer);
            } else {
                let p = self.region(x.region, l)?;
                // SAFETY: the region lies in its buffer, which outlives the
                // transfer (see `Table`'s `Send` argument); no other live
                // view of these bytes is used while the receive runs.
                let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
                let from = self.v.call.world(x.peer) as u32;
                let id = e.post_recv(buf, from, self.ctx, tag, self.scope)?;
                self.lanes[l].recv = Some(id);
            }
        }
        if let Some(x) = s.send {
            let len = x.region.len * self.v.call.esize;
            // SAFETY: as above; a send only reads.
            let buf = unsafe { std::slice::from_raw_parts(self.region(x.region, l)?, len) };
            // An eager message goes straight to the link when nothing is
            // queued ahead of it (no operation recorded).
            let to = self.v.call.world(x.peer);
            if !e.try_send_now(buf, to, self.ctx, tag) {
                let id = e.post_send(buf, to, self.ctx, tag, false, self.scope)?;
                self.lanes[l].send = Some(id);
            }
        }
        Ok(false)
    }

    fn mismatch(&self, peer: usize, got: usize, want: usize) -> Error {
        mismatch(&self.v.call.plan, self.seq, peer, got, want)
    }
}

/// The error for a peer whose message has another length than this step
/// expects: the ranks passed different counts.
pub(crate) fn mismatch(p: &Plan, seq: u32, peer: usize, got: usize, want: usize) -> Error {
    Error::Mismatch {
        parameter: format!("the element count of {} #{seq}", p.coll.name()),
        rank: p.r,
        value: format!("{want} bytes expected at this step"),
        peer,
        peer_value: format!("{got} bytes sent"),
    }
}
