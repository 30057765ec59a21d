//! An exhaustive, bounded model check of the protocol engine
//! ([`tandem_core::proto::Engine`], the very code the driver runs).
//!
//! A [`Spec`] gives 2–3 ranks a small program each (eager and rendezvous
//! sends, synchronous or not, blocking or not; receives with wildcards) and a
//! network: FIFO per pair (shared memory, RDMA RC) or one that may deliver a
//! pair's messages in any order (to exercise the hold-back queue). The
//! checker explores **every** interleaving of the ranks' steps, every order
//! in which transmissions happen and every delivery order the network
//! allows, and, if asked, both answers to every rendezvous (pull the data
//! single-copy, or have it streamed after a clear-to-send). States are
//! fingerprinted (64-bit SipHash of the whole state: engines, programs,
//! buffers, network) so each is expanded once.
//!
//! Checked in every state and transition:
//! * **receiver ready**: no matching message ever arrives without a free
//!   receive entry (and, if eager, a free buffer) reserved for its sender —
//!   the RDMA receiver-not-ready condition — and no header is refused as a
//!   protocol violation; credits in flight plus credits held never exceed
//!   the windows; control messages in flight never exceed a reserve of
//!   `envelopes` per kind (answers always; credit returns on FIFO networks,
//!   where a reordering one may also hold stale ones), so a transport that
//!   needs receive buffers for them (RDMA RC, which is FIFO) can size it;
//! * **no slot overwritten**: the engine's own audit (every receive entry and
//!   eager buffer free or in use, never both, never twice);
//! * **no stale read**: a rendezvous pull only reads a send buffer whose send
//!   is still pending;
//! * **byte-exact delivery** with the right status (truncation included).
//!
//! And in every terminal state (nothing can move any more):
//! * **exactly once, non-overtaking**: every send was received once, and no
//!   receive got a message while an earlier one from the same sender that
//!   it also matched went to a later-posted receive;
//! * **termination**: for a spec whose operations match, every rank
//!   finished (a state where some rank is stuck is a deadlock and a
//!   violation); for a spec that cannot complete (`Expect::Deadlock`), the
//!   deadlock is found and reported with every pending operation named.
//!
//! No livelock can hide from this: every transition strictly advances a
//! well-founded measure (a program counter, a message leaving a queue, a
//! pull decided, or a monotonic counter such as a sequence number or a
//! freed-credit count that only grows to a bound fixed by the programs), so
//! the state graph is finite and acyclic and every execution ends in a
//! terminal state, which is checked.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};
use tandem_core::proto::{
    Action, Engine, Entry, Handle, Op, OpError, Params, Peer, Phase, SlotCopy, Status, Taken,
    TxWhat, ANY_SOURCE, ANY_TAG,
};
use tandem_core::wire::{Header, Kind, MemDesc};

/// Most ranks a spec may have.
pub const MAX_RANKS: usize = 3;
/// Most steps in one rank's program.
pub const MAX_STEPS: usize = 5;
/// Receive entries per peer at most.
pub const MAX_ENVELOPES: usize = 3;
/// Eager buffers per peer at most.
pub const MAX_CREDITS: usize = 2;
/// Longest message (and receive buffer) in a spec.
pub const MAX_LEN: usize = 4;

type Eng = Engine<
    [Op; MAX_STEPS],
    [Entry; MAX_RANKS * MAX_ENVELOPES],
    [Peer; MAX_RANKS],
    [u32; MAX_RANKS * MAX_CREDITS],
>;

/// One operation of a rank's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Send `len` bytes to `to` with `tag`.
    Send {
        /// Destination.
        to: usize,
        /// Tag.
        tag: u32,
        /// Length (above the spec's eager limit: rendezvous).
        len: usize,
        /// Synchronous send.
        sync: bool,
        /// Wait for it before the next step.
        blocking: bool,
    },
    /// Receive up to `cap` bytes from `from` (`None`: any source) with `tag`
    /// (`None`: any tag).
    Recv {
        /// Source, or any.
        from: Option<usize>,
        /// Tag, or any.
        tag: Option<u32>,
        /// Buffer length.
        cap: usize,
        /// Wait for it before the next step.
        blocking: bool,
    },
}

/// What a spec's programs should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every operation matches: every execution must finish.
    Complete,
    /// The operations cannot all complete: a deadlock must be found.
    Deadlock,
}

/// How matched rendezvous messages move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulls {
    /// The receiver always pulls (single copy).
    Always,
    /// The receiver always asks for a stream (CTS).
    Never,
    /// Both, explored as a choice at every rendezvous.
    Both,
}

/// A model-check problem.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Name for reports.
    pub name: String,
    /// Eager buffers per peer (credits), 1..=[`MAX_CREDITS`].
    pub credits: u16,
    /// Receive entries per peer, `credits + 1..=`[`MAX_ENVELOPES`].
    pub envelopes: u16,
    /// Messages longer than this use rendezvous.
    pub eager_limit: u64,
    /// Whether the network may reorder a pair's messages.
    pub reorder: bool,
    /// Rendezvous choices.
    pub pulls: Pulls,
    /// First sequence number (put it near 2^16 to cross the wrap).
    pub seq_start: u16,
    /// Also explore the driver's fast paths for blocking eager sends and
    /// receives (`Engine::eager_now`, `Engine::eager_recv_now`), which skip
    /// the operation table (FIFO networks only, as in the driver).
    pub fast_paths: bool,
    /// Each rank's program.
    pub programs: Vec<Vec<Step>>,
    /// What must happen.
    pub expect: Expect,
}

/// A message on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Msg {
    h: Header,
    addr: u64,
    payload: Vec<u8>,
    /// The sending rank's program step (the model's bookkeeping, not on the
    /// wire).
    step: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RankSt {
    e: Eng,
    pc: u8,
    handles: [Option<Handle>; MAX_STEPS],
    done: [bool; MAX_STEPS],
    /// Receive buffers, by step.
    bufs: [[u8; MAX_LEN]; MAX_STEPS],
    /// Eager payload buffers.
    slots: [[u8; MAX_LEN]; MAX_RANKS * MAX_CREDITS],
    /// Which (sender, step) each receive step got.
    got: [Option<(u8, u8)>; MAX_STEPS],
    /// Receives waiting for a stream, per peer (CTS order).
    rx_streams: [Vec<Handle>; MAX_RANKS],
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    ranks: Vec<RankSt>,
    /// Per (from, to): messages in flight.
    wire: Vec<VecDeque<Msg>>,
    /// Per (from, to): streamed payloads in flight (receive token, bytes).
    data: Vec<VecDeque<(u32, Vec<u8>)>>,
}

/// What a model check found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The spec's name.
    pub name: String,
    /// Distinct states explored.
    pub states: u64,
    /// Transitions taken.
    pub transitions: u64,
    /// Terminal states reached.
    pub terminals: u64,
    /// Wall-clock time.
    pub elapsed: Duration,
    /// The first property violation, if any.
    pub violation: Option<String>,
    /// For an `Expect::Deadlock` spec: the first deadlock found, with the
    /// pending operations named.
    pub deadlock: Option<String>,
}

impl Report {
    /// Whether the spec behaved as expected with no violation.
    pub fn ok(&self) -> bool {
        self.violation.is_none()
    }
}

/// Payload byte `i` of the message rank `s` sends in step `k`.
fn byte(s: usize, k: usize, i: usize) -> u8 {
    (1 + s * 40 + k * 7 + i) as u8
}

fn content(s: usize, k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(s, k, i)).collect()
}

struct Checker<'a> {
    spec: &'a Spec,
    n: usize,
}

type Res<T> = Result<T, String>;

impl Checker<'_> {
    fn pair(&self, f: usize, t: usize) -> usize {
        f * self.n + t
    }

    fn initial(&self) -> Res<State> {
        let s = self.spec;
        let mut ranks = Vec::new();
        for r in 0..self.n {
            let p = Params {
                rank: r as u32,
                nranks: self.n as u32,
                credits: s.credits,
                envelopes: s.envelopes,
                credit_threshold: 1,
                eager_limit: s.eager_limit,
                seq_start: s.seq_start,
            };
            let e = Engine::new(
                p,
                [Op::EMPTY; MAX_STEPS],
                [Entry::EMPTY; MAX_RANKS * MAX_ENVELOPES],
                [Peer::EMPTY; MAX_RANKS],
                [0u32; MAX_RANKS * MAX_CREDITS],
            )
            .map_err(|e| format!("bad spec: {e}"))?;
            ranks.push(RankSt {
                e,
                pc: 0,
                handles: [None; MAX_STEPS],
                done: [false; MAX_STEPS],
                bufs: [[0xEE; MAX_LEN]; MAX_STEPS],
                slots: [[0; MAX_LEN]; MAX_RANKS * MAX_CREDITS],
                got: [None; MAX_STEPS],
                rx_streams: Default::default(),
            });
        }
        Ok(State {
            ranks,
            wire: vec![VecDeque::new(); self.n * self.n],
            data: vec![VecDeque::new(); self.n * self.n],
        })
    }

    /// The step of rank `r` whose operation is `h`.
    fn step_of(&self, st: &State, r: usize, h: Handle) -> Option<usize> {
        st.ranks[r].handles.iter().position(|&x| x == Some(h))
    }

    fn blocked(&self, st: &State, r: usize) -> bool {
        let rk = &st.ranks[r];
        let prog = &self.spec.programs[r];
        (0..rk.pc as usize).any(|k| {
            !rk.done[k]
                && matches!(
                    prog[k],
                    Step::Send { blocking: true, .. } | Step::Recv { blocking: true, .. }
                )
        })
    }

    /// Collects finished operations, checking their results.
    fn collect(&self, st: &mut State) -> Res<()> {
        for r in 0..self.n {
            for k in 0..st.ranks[r].pc as usize {
                let rk = &mut st.ranks[r];
                if rk.done[k] {
                    continue;
                }
                let h = rk.handles[k].expect("posted");
                let Taken::Done(res) = rk.e.take(h) else {
                    continue;
                };
                rk.done[k] = true;
                match self.spec.programs[r][k] {
                    Step::Send { .. } => {
                        res.map_err(|e| format!("rank {r} step {k}: send failed: {e:?}"))?;
                    }
                    Step::Recv { from, tag, cap, .. } => {
                        let st_ = match res {
                            Ok(s) => s,
                            Err(OpError::Truncated { status, got }) if got as usize == cap => {
                                status
                            }
                            Err(e) => return Err(format!("rank {r} step {k}: recv failed: {e:?}")),
                        };
                        let (s, ks) = rk.got[k].ok_or_else(|| {
                            format!("rank {r} step {k}: completed without a message")
                        })?;
                        let (s, ks) = (s as usize, ks as usize);
                        let Step::Send { len, tag: stag, .. } = self.spec.programs[s][ks] else {
                            return Err("matched a receive".into());
                        };
                        let want = Status {
                            source: s as u32,
                            tag: stag,
                            len: len as u64,
                        };
                        if st_ != want {
                            return Err(format!(
                                "rank {r} step {k}: status {st_:?}, message was {want:?}"
                            ));
                        }
                        if from.is_some_and(|f| f != s) || tag.is_some_and(|t| t != stag) {
                            return Err(format!(
                                "rank {r} step {k}: got a message it does not match"
                            ));
                        }
                        let n = len.min(cap);
                        if rk.bufs[k][..n] != content(s, ks, len)[..n] {
                            return Err(format!(
                                "rank {r} step {k}: bytes {:?}, sent {:?}",
                                &rk.bufs[k][..n],
                                &content(s, ks, len)[..n]
                            ));
                        }
                        if rk.bufs[k][n..cap].iter().any(|&b| b != 0xEE) {
                            return Err(format!("rank {r} step {k}: written past the message"));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Records which message receive `op` of rank `r` got.
    fn note_match(&self, st: &mut State, r: usize, op: Handle, from: usize, token_step: usize) {
        if let Some(k) = self.step_of(st, r, op) {
            st.ranks[r].got[k] = Some((from as u8, token_step as u8));
        }
    }

    fn invariants(&self, st: &State) -> Res<()> {
        let s = self.spec;
        for r in 0..self.n {
            st.ranks[r]
                .e
                .audit()
                .map_err(|e| format!("rank {r}: engine audit: {e}"))?;
        }
        for f in 0..self.n {
            for t in 0..self.n {
                let q = &st.wire[self.pair(f, t)];
                let matching = q.iter().filter(|m| m.h.kind().is_matching()).count() as u64;
                let eager = q.iter().filter(|m| m.h.kind().is_eager()).count() as u64;
                // Answers (CTS, FIN, ACK) and credit messages need no
                // credit: each answers a credited message, so a receive
                // reserve of `envelopes` slots per kind covers them.
                let answers = q
                    .iter()
                    .filter(|m| matches!(m.h.kind(), Kind::Cts | Kind::Fin | Kind::Ack))
                    .count() as u64;
                let credit_msgs = q.iter().filter(|m| m.h.kind() == Kind::Credit).count() as u64;
                // On a FIFO network (shm, RDMA RC) each credit message in
                // flight returns at least `credit_threshold` (1 here) frees the
                // peer has not heard of, and those are bounded by its
                // window. (A reordering network may also hold stale ones.)
                let fifo = !s.reorder;
                if answers > s.envelopes as u64 || (fifo && credit_msgs > s.envelopes as u64) {
                    return Err(format!(
                        "{f}->{t}: {answers} answers and {credit_msgs} credit messages in flight exceed the reserve of {}",
                        s.envelopes
                    ));
                }
                let (held, bufs) = st.ranks[t].e.held_for(f as u32);
                if matching + held > s.envelopes as u64 || eager + bufs > s.credits as u64 {
                    return Err(format!(
                        "{f}->{t}: {matching} in flight + {held} held > {} entries, or {eager} eager in flight + {bufs} buffers > {} credits",
                        s.envelopes, s.credits
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every state reachable in one transition from `st`.
    fn successors(&self, st: &State, out: &mut Vec<State>) -> Res<()> {
        for r in 0..self.n {
            // Post the next step (and, if enabled, try its fast path).
            if (st.ranks[r].pc as usize) < self.spec.programs[r].len() && !self.blocked(st, r) {
                let mut x = st.clone();
                self.post(&mut x, r)?;
                out.push(x);
                if self.spec.fast_paths && !self.spec.reorder {
                    let mut x = st.clone();
                    if self.fast(&mut x, r)? {
                        out.push(x);
                    }
                }
            }
            // Transmit to each peer.
            for p in 0..self.n {
                if st.ranks[r].e.next_tx(p as u32).is_some() {
                    let mut x = st.clone();
                    self.transmit(&mut x, r, p)?;
                    out.push(x);
                }
            }
            // Decide a matched rendezvous.
            let mut probe = st.ranks[r].e.clone();
            if probe.next_pull().is_some() {
                let choices: &[bool] = match self.spec.pulls {
                    Pulls::Always => &[true],
                    Pulls::Never => &[false],
                    Pulls::Both => &[true, false],
                };
                for &pull in choices {
                    let mut x = st.clone();
                    self.pull(&mut x, r, pull)?;
                    out.push(x);
                }
            }
        }
        for f in 0..self.n {
            for t in 0..self.n {
                let len = st.wire[self.pair(f, t)].len();
                let picks = if self.spec.reorder { len } else { len.min(1) };
                for i in 0..picks {
                    let mut x = st.clone();
                    self.deliver(&mut x, f, t, i)?;
                    out.push(x);
                }
                let dl = st.data[self.pair(f, t)].len();
                let picks = if self.spec.reorder { dl } else { dl.min(1) };
                for i in 0..picks {
                    let mut x = st.clone();
                    self.stream_in(&mut x, f, t, i)?;
                    out.push(x);
                }
            }
        }
        for x in out.iter_mut() {
            self.collect(x)?;
            self.invariants(x)?;
        }
        Ok(())
    }

    fn post(&self, st: &mut State, r: usize) -> Res<()> {
        let k = st.ranks[r].pc as usize;
        let rk = &mut st.ranks[r];
        match self.spec.programs[r][k] {
            Step::Send {
                to, tag, len, sync, ..
            } => {
                let h =
                    rk.e.post_send(to as u32, 0, tag, len as u64, sync)
                        .map_err(|e| format!("rank {r} step {k}: post_send: {e}"))?;
                rk.handles[k] = Some(h);
            }
            Step::Recv { from, tag, cap, .. } => {
                let src = from.map_or(ANY_SOURCE, |f| f as u32);
                let (h, copy) =
                    rk.e.post_recv(src, 0, tag.unwrap_or(ANY_TAG), cap as u64)
                        .map_err(|e| format!("rank {r} step {k}: post_recv: {e}"))?;
                rk.handles[k] = Some(h);
                if let Some(c) = copy {
                    let n = c.len as usize;
                    let bytes = rk.slots[c.slot];
                    rk.bufs[k][..n].copy_from_slice(&bytes[..n]);
                    rk.got[k] = slot_origin(rk, c.slot);
                }
            }
        }
        st.ranks[r].pc += 1;
        Ok(())
    }

    /// The driver's fast path for rank `r`'s next step, if it is a blocking
    /// standard eager send or a blocking receive from one rank and the
    /// engine accepts the shortcut; `false` if it does not apply.
    fn fast(&self, st: &mut State, r: usize) -> Res<bool> {
        let k = st.ranks[r].pc as usize;
        match self.spec.programs[r][k] {
            Step::Send {
                to,
                tag,
                len,
                sync: false,
                blocking: true,
            } => {
                let Some(h) = st.ranks[r].e.eager_now(to as u32, 0, tag, len as u64) else {
                    return Ok(false);
                };
                let i = self.pair(r, to);
                st.wire[i].push_back(Msg {
                    h,
                    addr: 0,
                    payload: content(r, k, len),
                    step: k as u8,
                });
            }
            Step::Recv {
                from: Some(f),
                tag,
                cap,
                blocking: true,
            } => {
                let i = self.pair(f, r);
                let Some(m) = st.wire[i].front().cloned() else {
                    return Ok(false);
                };
                let taken = st.ranks[r]
                    .e
                    .eager_recv_now(f as u32, 0, tag.unwrap_or(ANY_TAG), &m.h)
                    .map_err(|e| format!("rank {r}: fast receive refused a header: {e}"))?;
                if !taken {
                    return Ok(false);
                }
                st.wire[i].pop_front();
                let n = m.payload.len().min(cap);
                let Step::Send { tag: stag, .. } = self.spec.programs[f][m.step as usize] else {
                    return Err("fast receive of a non-send".into());
                };
                if tag.is_some_and(|t| t != stag) || m.h.tag != stag {
                    return Err(format!(
                        "rank {r}: fast receive took a message it does not match"
                    ));
                }
                if m.payload != content(f, m.step as usize, m.payload.len()) {
                    return Err(format!("rank {r}: fast receive got corrupt bytes"));
                }
                let rk = &mut st.ranks[r];
                rk.bufs[k][..n].copy_from_slice(&m.payload[..n]);
                rk.got[k] = Some((f as u8, m.step));
            }
            _ => return Ok(false),
        }
        let rk = &mut st.ranks[r];
        rk.done[k] = true;
        rk.pc += 1;
        Ok(true)
    }

    fn transmit(&self, st: &mut State, r: usize, p: usize) -> Res<()> {
        let tx = st.ranks[r].e.next_tx(p as u32).expect("enabled");
        let (addr, payload, step) = match tx.what {
            TxWhat::Payload(h) => {
                let k = self.step_of(st, r, h).expect("own op");
                let Step::Send { len, .. } = self.spec.programs[r][k] else {
                    unreachable!()
                };
                (0, content(r, k, len), k as u8)
            }
            TxWhat::Rts(h) => {
                let k = self.step_of(st, r, h).expect("own op");
                (((r as u64) << 8) | k as u64, vec![], k as u8)
            }
            TxWhat::Cts(h) => {
                st.ranks[r].rx_streams[p].push(h);
                (0, vec![], u8::MAX)
            }
            TxWhat::Control => (0, vec![], u8::MAX),
        };
        st.ranks[r].e.tx_done(p as u32, &tx);
        let i = self.pair(r, p);
        st.wire[i].push_back(Msg {
            h: tx.header,
            addr,
            payload,
            step,
        });
        Ok(())
    }

    fn deliver(&self, st: &mut State, f: usize, t: usize, i: usize) -> Res<()> {
        let m = st.wire[self.pair(f, t)].remove(i).expect("in range");
        let from_step = Some(m.step as usize);
        let mut copies: Vec<SlotCopy> = Vec::new();
        let act = st.ranks[t]
            .e
            .on_message(f as u32, &m.h, MemDesc { addr: m.addr, ..MemDesc::NONE }, &mut |c| copies.push(c))
            .map_err(|e| {
                format!("rank {t} refused a message from rank {f} ({e}): receiver not ready or protocol broken")
            })?;
        let rk = &mut st.ranks[t];
        for c in copies {
            let n = c.len as usize;
            let k = rk
                .handles
                .iter()
                .position(|&x| x == Some(c.op))
                .expect("own op");
            let bytes = rk.slots[c.slot];
            rk.bufs[k][..n].copy_from_slice(&bytes[..n]);
            // Which message was in that slot is recorded with it.
            rk.got[k] = slot_origin(rk, c.slot);
        }
        match act {
            Action::None => {}
            Action::Deliver { op, len } => {
                let k = rk
                    .handles
                    .iter()
                    .position(|&x| x == Some(op))
                    .expect("own op");
                let n = len as usize;
                rk.bufs[k][..n].copy_from_slice(&m.payload[..n]);
                rk.got[k] = from_step.map(|s| (f as u8, s as u8));
            }
            Action::Store { slot } => {
                rk.slots[slot][..m.payload.len()].copy_from_slice(&m.payload);
                set_slot_origin(rk, slot, from_step.map(|s| (f as u8, s as u8)));
            }
            Action::Stream { op, len, remote } => {
                let k = self.step_of(st, t, op).expect("own send");
                let Step::Send { len: full, .. } = self.spec.programs[t][k] else {
                    unreachable!()
                };
                let bytes = content(t, k, full)[..len as usize].to_vec();
                st.ranks[t].e.stream_done(op);
                let j = self.pair(t, f);
                st.data[j].push_back((remote, bytes));
            }
        }
        Ok(())
    }

    fn pull(&self, st: &mut State, r: usize, pulled: bool) -> Res<()> {
        let p = st.ranks[r].e.next_pull().expect("enabled");
        let (s, k) = ((p.desc.addr >> 8) as usize, (p.desc.addr & 0xff) as usize);
        self.note_match(st, r, p.op, s, k);
        if pulled {
            // The sender's buffer must still be lent to the send.
            let h = st.ranks[s].handles[k].expect("posted send");
            if st.ranks[s].done[k] || st.ranks[s].e.phase(h) != Some(Phase::WaitReceiver) {
                return Err(format!(
                    "rank {r} pulled from rank {s}'s step {k} whose send is no longer pending"
                ));
            }
            let Step::Send { len, .. } = self.spec.programs[s][k] else {
                unreachable!()
            };
            let bytes = content(s, k, len);
            let kr = self.step_of(st, r, p.op).expect("own op");
            let n = p.len as usize;
            st.ranks[r].bufs[kr][..n].copy_from_slice(&bytes[..n]);
        }
        st.ranks[r].e.pull_done(p.op, pulled);
        Ok(())
    }

    fn stream_in(&self, st: &mut State, f: usize, t: usize, i: usize) -> Res<()> {
        let (token, bytes) = st.data[self.pair(f, t)].remove(i).expect("in range");
        let rk = &mut st.ranks[t];
        let q = &mut rk.rx_streams[f];
        let at = q
            .iter()
            .position(|h| h.token() == token)
            .ok_or_else(|| format!("rank {t}: a stream from rank {f} nobody asked for"))?;
        let op = q.remove(at);
        let k = rk
            .handles
            .iter()
            .position(|&x| x == Some(op))
            .expect("own op");
        rk.bufs[k][..bytes.len()].copy_from_slice(&bytes);
        rk.e.stream_done(op);
        Ok(())
    }

    /// At a terminal state: finished, or a deadlock with its operations.
    fn terminal(&self, st: &State) -> Result<(), String> {
        let mut pending = String::new();
        for r in 0..self.n {
            let rk = &st.ranks[r];
            let prog = &self.spec.programs[r];
            for (k, step) in prog.iter().enumerate() {
                if k < rk.pc as usize && rk.done[k] {
                    continue;
                }
                let what = describe(r, step);
                if k < rk.pc as usize {
                    let phase = rk.handles[k].and_then(|h| rk.e.phase(h));
                    let phase = phase.map_or("?".to_string(), |p| format!("{p:?}"));
                    let _ = write!(pending, "{what} [pending: {phase}]; ");
                } else {
                    let _ = write!(pending, "{what} [not reached]; ");
                }
            }
        }
        if pending.is_empty() {
            for (i, q) in st.wire.iter().enumerate() {
                if q.iter().any(|m| m.h.kind().is_matching()) {
                    return Err(format!("finished with a message in flight on pair {i}"));
                }
            }
            for r in 0..self.n {
                if st.ranks[r].e.in_use() != 0 {
                    return Err(format!("rank {r} finished with operations in its table"));
                }
            }
            self.order(st)?;
            return Ok(());
        }
        Err(format!("deadlock: {}", pending.trim_end_matches("; ")))
    }

    /// Exactly once and non-overtaking, over the whole run.
    fn order(&self, st: &State) -> Res<()> {
        let mut seen = HashSet::new();
        for r in 0..self.n {
            let prog = &self.spec.programs[r];
            for a in 0..prog.len() {
                let Step::Recv { from, tag, .. } = prog[a] else {
                    continue;
                };
                let (s, ka) = st.ranks[r].got[a]
                    .ok_or_else(|| format!("rank {r} step {a}: origin of its message unknown"))?;
                if !seen.insert((s, ka)) {
                    return Err(format!("rank {s}'s step {ka} was received twice"));
                }
                for (b, step_b) in prog.iter().enumerate().skip(a + 1) {
                    if !matches!(step_b, Step::Recv { .. }) {
                        continue;
                    }
                    let Some((sb, kb)) = st.ranks[r].got[b] else {
                        continue;
                    };
                    if sb != s || kb > ka {
                        continue;
                    }
                    // Message kb was sent before ka, went to the later
                    // receive b: overtaking, if it would have matched a.
                    let Step::Send { tag: tb, .. } = self.spec.programs[sb as usize][kb as usize]
                    else {
                        continue;
                    };
                    if from.is_none_or(|f| f == sb as usize) && tag.is_none_or(|t| t == tb) {
                        return Err(format!(
                            "rank {r}: receive {a} got rank {s}'s step {ka} although step {kb}, sent earlier, matched it too"
                        ));
                    }
                }
            }
        }
        let sends = self
            .spec
            .programs
            .iter()
            .flatten()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count();
        if seen.len() != sends {
            return Err(format!("{} of {sends} messages were received", seen.len()));
        }
        Ok(())
    }
}

/// Where each eager slot's message came from (kept next to the slots).
fn slot_origin(rk: &RankSt, slot: usize) -> Option<(u8, u8)> {
    let b = rk.slots[slot];
    // The last two bytes of a slot are never payload in specs (MAX_LEN
    // covers the longest eager message, eager limits are at most 2), so
    // the origin is stored there.
    (b[MAX_LEN - 1] != 0).then(|| (b[MAX_LEN - 2], b[MAX_LEN - 1] - 1))
}

fn set_slot_origin(rk: &mut RankSt, slot: usize, o: Option<(u8, u8)>) {
    if let Some((s, k)) = o {
        rk.slots[slot][MAX_LEN - 2] = s;
        rk.slots[slot][MAX_LEN - 1] = k + 1;
    }
}

fn describe(r: usize, s: &Step) -> String {
    match *s {
        Step::Send {
            to,
            tag,
            len,
            sync,
            blocking,
        } => format!(
            "rank {r}: {}{} {len} B to rank {to} tag {tag}",
            if blocking { "" } else { "i" },
            if sync { "ssend" } else { "send" }
        ),
        Step::Recv {
            from,
            tag,
            blocking,
            ..
        } => format!(
            "rank {r}: {} from {} tag {}",
            if blocking { "recv" } else { "irecv" },
            from.map_or("any rank".to_string(), |f| format!("rank {f}")),
            tag.map_or("any".to_string(), |t| t.to_string())
        ),
    }
}

fn fingerprint(st: &State) -> u64 {
    let mut h = DefaultHasher::new();
    st.hash(&mut h);
    h.finish()
}

/// Explores every reachable state of `spec` (up to `max_states`).
pub fn check(spec: &Spec, max_states: u64) -> Report {
    let start = Instant::now();
    let mut report = Report {
        name: spec.name.clone(),
        states: 0,
        transitions: 0,
        terminals: 0,
        elapsed: Duration::ZERO,
        violation: None,
        deadlock: None,
    };
    let n = spec.programs.len();
    let c = Checker { spec, n };
    let bad_spec = !(2..=MAX_RANKS).contains(&n)
        || spec.programs.iter().any(|p| p.len() > MAX_STEPS)
        || spec.eager_limit as usize > MAX_LEN - 2
        || spec.envelopes as usize > MAX_ENVELOPES
        || spec.credits as usize > MAX_CREDITS;
    if bad_spec {
        report.violation = Some("spec exceeds the model's bounds".into());
        return report;
    }
    let init = match c.initial() {
        Ok(s) => s,
        Err(e) => {
            report.violation = Some(e);
            return report;
        }
    };
    let mut seen: HashSet<u64> = HashSet::new();
    seen.insert(fingerprint(&init));
    let mut stack = vec![init];
    let mut next = Vec::new();
    while let Some(st) = stack.pop() {
        report.states += 1;
        if report.states > max_states {
            report.violation = Some(format!("state bound {max_states} exceeded"));
            break;
        }
        next.clear();
        if let Err(e) = c.successors(&st, &mut next) {
            report.violation = Some(e);
            break;
        }
        if next.is_empty() {
            report.terminals += 1;
            match (c.terminal(&st), spec.expect) {
                (Ok(()), _) => {}
                (Err(e), Expect::Deadlock) if e.starts_with("deadlock") => {
                    report.deadlock.get_or_insert(e);
                }
                (Err(e), _) => {
                    report.violation = Some(e);
                    break;
                }
            }
        }
        for x in next.drain(..) {
            report.transitions += 1;
            if seen.insert(fingerprint(&x)) {
                stack.push(x);
            }
        }
    }
    if report.violation.is_none() && spec.expect == Expect::Deadlock && report.deadlock.is_none() {
        report.violation = Some("expected a deadlock, every execution finished".into());
    }
    report.elapsed = start.elapsed();
    report
}

fn send(to: usize, tag: u32, len: usize) -> Step {
    Step::Send {
        to,
        tag,
        len,
        sync: false,
        blocking: false,
    }
}

fn ssend(to: usize, tag: u32, len: usize) -> Step {
    Step::Send {
        to,
        tag,
        len,
        sync: true,
        blocking: true,
    }
}

fn recv(from: Option<usize>, tag: Option<u32>, cap: usize) -> Step {
    Step::Recv {
        from,
        tag,
        cap,
        blocking: false,
    }
}

fn brecv(from: Option<usize>, tag: Option<u32>, cap: usize) -> Step {
    Step::Recv {
        from,
        tag,
        cap,
        blocking: true,
    }
}

fn spec(name: &str, reorder: bool, credits: u16, programs: Vec<Vec<Step>>) -> Spec {
    Spec {
        name: name.to_string(),
        credits,
        envelopes: credits + 1,
        eager_limit: 1,
        reorder,
        pulls: Pulls::Both,
        seq_start: 0,
        fast_paths: false,
        programs,
        expect: Expect::Complete,
    }
}

/// The specs `tandem-verify` checks: sizes 0..=3 bytes with an eager limit
/// of 1 (so 2 and 3 bytes go rendezvous), credits as small as 1.
pub fn suite() -> Vec<Spec> {
    let (a, b) = (Some(0), Some(1));
    let mut v = vec![
        // Eager and rendezvous, wildcard receives, both posting orders.
        spec(
            "eager+rendezvous, wildcards, FIFO",
            false,
            1,
            vec![
                vec![send(1, 0, 1), send(1, 0, 3), send(1, 1, 0)],
                vec![
                    recv(None, Some(0), 3),
                    recv(a, None, 3),
                    recv(None, None, 3),
                ],
            ],
        ),
        // The same over a network that reorders: the hold-back queue.
        spec(
            "eager+rendezvous, wildcards, reordering",
            true,
            1,
            vec![
                vec![send(1, 0, 1), send(1, 0, 2), send(1, 0, 1)],
                vec![
                    recv(None, None, 3),
                    recv(a, Some(0), 3),
                    recv(None, Some(0), 3),
                ],
            ],
        ),
        // Three ranks into one any-source receiver, one rendezvous.
        spec(
            "3 ranks, any source",
            false,
            1,
            vec![
                vec![send(2, 0, 1), send(2, 0, 1)],
                vec![send(2, 1, 2)],
                vec![recv(a, None, 2), recv(None, None, 2), recv(None, None, 2)],
            ],
        ),
        // Out of eager credit, the later message (whose receive is posted
        // first) still goes (MPI progress rule), and synchronous sends.
        spec(
            "credit 1: unreceived messages never block a matchable one",
            false,
            1,
            vec![
                vec![send(1, 0, 1), send(1, 1, 1), ssend(1, 2, 1)],
                vec![
                    brecv(a, Some(1), 1),
                    recv(a, Some(0), 1),
                    brecv(a, Some(2), 1),
                ],
            ],
        ),
        // Exchange in both directions with blocking calls and truncation.
        spec(
            "ping-pong with truncation",
            false,
            1,
            vec![
                vec![ssend(1, 0, 2), brecv(b, Some(0), 1)],
                vec![
                    brecv(a, Some(0), 2),
                    Step::Send {
                        to: 0,
                        tag: 0,
                        len: 3,
                        sync: false,
                        blocking: true,
                    },
                ],
            ],
        ),
    ];
    // Three ranks over a reordering network: synchronous and rendezvous
    // sends from two senders into wildcard receives.
    let mut three = spec(
        "3 ranks, reordering, ssend + rendezvous into wildcards",
        true,
        1,
        vec![
            vec![ssend(2, 0, 1), send(2, 1, 2)],
            vec![send(2, 0, 2), send(2, 0, 1)],
            vec![
                recv(b, None, 2),
                recv(None, Some(0), 2),
                recv(None, None, 2),
                recv(None, None, 2),
            ],
        ],
    );
    three.pulls = Pulls::Always;
    v.push(three);
    // The driver's shortcuts for blocking eager calls, mixed with the
    // general path: ping-pong, then sends that may run out of eager credit.
    let bsend = |to, tag, len| Step::Send {
        to,
        tag,
        len,
        sync: false,
        blocking: true,
    };
    let mut fast = spec(
        "fast paths of blocking eager calls, credit 1",
        false,
        1,
        vec![
            vec![
                bsend(1, 0, 1),
                brecv(b, Some(0), 1),
                bsend(1, 0, 1),
                bsend(1, 1, 0),
                brecv(b, None, 1),
            ],
            vec![
                brecv(a, Some(0), 1),
                bsend(0, 0, 1),
                brecv(a, Some(0), 1),
                brecv(a, Some(1), 1),
                bsend(0, 2, 1),
            ],
        ],
    );
    fast.fast_paths = true;
    v.push(fast);
    // Sequence numbers crossing 2^16, reordering on.
    let mut wrap = spec(
        "sequence numbers wrap at 2^16, reordering",
        true,
        1,
        vec![
            vec![send(1, 0, 1), send(1, 0, 0), send(1, 0, 1)],
            vec![recv(a, None, 1), recv(a, None, 1), recv(None, None, 1)],
        ],
    );
    wrap.seq_start = u16::MAX - 1;
    v.push(wrap);
    // Credits of 2 with several messages in flight at once.
    let mut two = spec(
        "credits 2, reordering",
        true,
        2,
        vec![
            vec![send(1, 0, 1), send(1, 0, 1), send(1, 0, 1), send(1, 1, 1)],
            vec![
                recv(a, Some(1), 1),
                recv(a, None, 1),
                recv(None, Some(0), 1),
                recv(a, Some(0), 1),
            ],
        ],
    );
    two.pulls = Pulls::Always;
    v.push(two);
    // Operations that cannot match: reported as deadlocks, named.
    let mut both = spec(
        "both ranks ssend first (must deadlock)",
        false,
        1,
        vec![
            vec![ssend(1, 0, 1), brecv(b, Some(0), 1)],
            vec![ssend(0, 0, 1), brecv(a, Some(0), 1)],
        ],
    );
    both.expect = Expect::Deadlock;
    v.push(both);
    let mut swapped = spec(
        "rank numbers swapped (must deadlock)",
        false,
        1,
        vec![
            vec![ssend(2, 0, 1)],
            vec![brecv(a, Some(0), 1)],
            vec![brecv(b, Some(0), 1)],
        ],
    );
    swapped.expect = Expect::Deadlock;
    v.push(swapped);
    v
}

/// The protocol-engine mutants (see [`tandem_core::mutation`]) the model
/// check must catch; the ring and lock mutants are loom's.
pub const PROTOCOL_MUTANTS: [tandem_core::mutation::Mutant; 5] = {
    use tandem_core::mutation::Mutant;
    [
        Mutant::SkipCreditCheck,
        Mutant::SeqWrap,
        Mutant::HoldBackBypass,
        Mutant::CreditReturnLost,
        Mutant::FastRecvSeqStuck,
    ]
};

/// Runs `specs` with mutant `m` switched on until one fails; returns that
/// spec's report (`None`: the mutant went unnoticed). Switches every mutant
/// off again before returning.
#[cfg(feature = "mutants")]
pub fn catch(m: tandem_core::mutation::Mutant, specs: &[Spec], max_states: u64) -> Option<Report> {
    tandem_core::mutation::set(Some(m));
    let caught = specs
        .iter()
        .map(|s| check(s, max_states))
        .find(|r| r.violation.is_some());
    tandem_core::mutation::set(None);
    caught
}
