//! Runs schedules: a fixed table of collectives in flight, each with its
//! lanes, advanced by whoever waits on the communicator. Every transfer is
//! an ordinary point-to-point operation of the progress layer in the
//! communicator's collective context, so collectives run over every
//! transport; the only memory they own is per-table-entry scratch, grown
//! on first use and kept (no allocation per call in steady state).

use super::plan::{After, Buf, Plan, Region, Step};
use super::types::Kernel;
use crate::error::{Error, OpKind, Result};
use crate::progress::{Engine, OpId};

/// Collectives one communicator may have in flight at once.
pub(crate) const MAX_INFLIGHT: usize = 16;
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
}

#[derive(Clone, Copy)]
struct Lane {
    /// The step running (its transfers posted).
    k: usize,
    step: Option<Step>,
    send: Option<OpId>,
    recv: Option<OpId>,
}

const IDLE: Lane = Lane {
    k: 0,
    step: None,
    send: None,
    recv: None,
};

struct Active {
    call: Call,
    ctx: u16,
    tag: u32,
    scope: u32,
    seq: u32,
    tmp: *mut u8,
    lane_bytes: usize,
    slot_bytes: usize,
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
            scratch: (0..MAX_INFLIGHT).map(|_| Vec::new()).collect(),
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
        let plan = call.plan;
        let (ntmp, elems) = plan.scratch();
        let slot_bytes = elems * call.esize;
        let lanes = plan.lanes_used();
        let lane_bytes = ntmp * slot_bytes;
        let need = (lanes * lane_bytes).div_ceil(64);
        let s = &mut self.scratch[slot];
        if s.len() < need {
            // Grows once to the largest call seen; kept afterwards.
            s.resize(need, Line([0; 64]));
        }
        let tmp = s.as_mut_ptr().cast::<u8>();
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let a = Active {
            call,
            ctx,
            // 24 bits of the call number, 6 of the lane: concurrent
            // collectives and the lanes of one never match each other.
            tag: (seq & 0x00ff_ffff) << 6,
            scope,
            seq,
            tmp,
            lane_bytes,
            slot_bytes,
            lanes: [IDLE; MAX_LANES],
            moved: 0,
        };
        if let Some((from, to)) = plan.pre_copy() {
            let n = from.len * call.esize;
            let (f, t) = (a.region(from, 0)?, a.region(to, 0)?);
            if n > 0 && f != t {
                // SAFETY: both regions lie in their buffers (the plan's
                // invariant, checked by its tests), and distinct buffers or
                // distinct blocks of one never overlap.
                unsafe { std::ptr::copy_nonoverlapping(f, t, n) };
            }
        }
        self.slots[slot] = Slot::Running(a);
        self.running += 1;
        let t = Ticket {
            slot,
            gen: self.gens[slot],
        };
        self.advance(e, slot);
        Ok(t)
    }

    /// Advances every running collective as far as it goes without
    /// waiting; `true` if any step finished.
    pub(crate) fn drive(&mut self, e: &mut Engine) -> bool {
        if self.running == 0 {
            return false;
        }
        e.progress();
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
            return Some(Err(Error::Io(
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
        for (l, lane) in a.lanes.iter().enumerate() {
            for (id, op) in [(lane.recv, OpKind::Recv), (lane.send, OpKind::Send)] {
                let Some(id) = id else { continue };
                let Some(i) = e.info(id) else { continue };
                let p = a.call.plan;
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
        let why = Error::Io("request scope panicked".into());
        while let Some(t) = self.of_scope(scope) {
            self.fail(e, t, why.clone());
            self.take(t);
        }
    }

    /// Ends entry `i` with `result`; pending transfers are withdrawn.
    fn finish(&mut self, e: &mut Engine, i: usize, result: Result<()>) {
        let Slot::Running(a) = std::mem::replace(&mut self.slots[i], Slot::Free) else {
            return;
        };
        for lane in &a.lanes {
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
        let lanes = a.call.plan.lanes_used();
        'lanes: for l in 0..lanes {
            loop {
                match a.poll_lane(e, l) {
                    Ok(true) => moved = true,
                    Ok(false) => {
                        live |= a.lanes[l].step.is_some();
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

impl Active {
    /// The address of `r` in lane `lane`'s view, after checking that the
    /// region lies inside its buffer (a schedule bug is an error, never a
    /// stray write).
    fn region(&self, r: Region, lane: usize) -> Result<*mut u8> {
        let c = &self.call;
        let end = (r.off + r.len) * c.esize;
        let cap = match r.buf {
            Buf::Src if c.plan.in_place => c.dst_len,
            Buf::Src => c.src_len,
            Buf::Dst => c.dst_len,
            Buf::Tmp(s) => {
                let lanes = c.plan.lanes_used();
                if lane >= lanes || (s as usize + 1) * self.slot_bytes > self.lane_bytes {
                    0
                } else {
                    self.slot_bytes
                }
            }
        };
        if end > cap {
            return Err(Error::Io(format!(
                "internal: {} step touches {r:?} beyond {cap} bytes",
                c.plan.coll.name()
            )));
        }
        Ok(self.ptr(r, lane))
    }

    /// The address of `r` in lane `lane`'s view.
    fn ptr(&self, r: Region, lane: usize) -> *mut u8 {
        let c = &self.call;
        let off = r.off * c.esize;
        match r.buf {
            Buf::Src if c.plan.in_place => c.dst.wrapping_add(off),
            Buf::Src => c.src.wrapping_add(off) as *mut u8,
            Buf::Dst => c.dst.wrapping_add(off),
            Buf::Tmp(s) => self
                .tmp
                .wrapping_add(lane * self.lane_bytes + s as usize * self.slot_bytes + off),
        }
    }

    /// Lane `l` one move further: collects its finished transfers, runs the
    /// step's reduction and posts the next step. `Ok(true)` if a step
    /// finished, `Ok(false)` if it waits (or is done).
    fn poll_lane(&mut self, e: &mut Engine, l: usize) -> Result<bool> {
        let lane = self.lanes[l];
        let Some(step) = lane.step else {
            if lane.k == 0 {
                return self.post(e, l, 0);
            }
            return Ok(false);
        };
        for (id, x) in [(lane.send, step.send), (lane.recv, step.recv)] {
            let (Some(id), Some(x)) = (id, x) else {
                continue;
            };
            match e.take(id) {
                None => return Ok(false),
                Some(Ok(st)) => {
                    if self.lanes[l].recv == Some(id) {
                        self.lanes[l].recv = None;
                        let want = x.region.len * self.call.esize;
                        if st.len != want {
                            return Err(self.mismatch(x.peer, st.len, want));
                        }
                    } else {
                        self.lanes[l].send = None;
                    }
                }
                Some(Err(Error::Truncated { needed, got })) => {
                    self.lanes[l].recv = None;
                    return Err(self.mismatch(x.peer, needed, got));
                }
                Some(Err(err)) => {
                    if self.lanes[l].recv == Some(id) {
                        self.lanes[l].recv = None;
                    } else {
                        self.lanes[l].send = None;
                    }
                    return Err(err);
                }
            }
        }
        if let After::Reduce { out, a, b } = step.after {
            let k = self
                .call
                .kernel
                .expect("reducing collectives have a kernel");
            let (o, x, y) = (self.region(out, l)?, self.region(a, l)?, self.region(b, l)?);
            // SAFETY: the regions lie in their buffers (the plan's
            // invariant); `out` is `a`, `b` or disjoint from both, as the
            // kernel requires, and no transfer of this lane is running.
            unsafe { k(o, x, y, out.len) };
        }
        self.moved += 1;
        let next = lane.k + 1;
        self.post(e, l, next).map(|_| true)
    }

    /// Posts step `k` of lane `l` (receive first).
    fn post(&mut self, e: &mut Engine, l: usize, k: usize) -> Result<bool> {
        let step = self.call.plan.step(l, k);
        self.lanes[l] = Lane {
            k,
            step,
            send: None,
            recv: None,
        };
        let Some(s) = step else { return Ok(false) };
        let tag = self.tag | l as u32;
        if let Some(x) = s.recv {
            let len = x.region.len * self.call.esize;
            // SAFETY: the region lies in its buffer, which outlives the
            // transfer (see `Table`'s `Send` argument); no other live view
            // of these bytes is used while the receive runs.
            let buf = unsafe { std::slice::from_raw_parts_mut(self.region(x.region, l)?, len) };
            let id = e.post_recv(buf, x.peer as u32, self.ctx, tag, self.scope)?;
            self.lanes[l].recv = Some(id);
        }
        if let Some(x) = s.send {
            let len = x.region.len * self.call.esize;
            // SAFETY: as above; a send only reads.
            let buf = unsafe { std::slice::from_raw_parts(self.region(x.region, l)?, len) };
            let id = e.post_send(buf, x.peer, self.ctx, tag, false, self.scope)?;
            self.lanes[l].send = Some(id);
        }
        Ok(false)
    }

    fn mismatch(&self, peer: usize, got: usize, want: usize) -> Error {
        let p = self.call.plan;
        Error::Mismatch {
            parameter: format!("the element count of {} #{}", p.coll.name(), self.seq),
            rank: p.r,
            value: format!("expects {want} bytes at this step"),
            peer,
            peer_value: format!("sent {got} bytes"),
        }
    }
}
