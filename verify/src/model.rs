//! An exhaustive, bounded model check of the protocol engine
//! ([`tandem_core::proto::Engine`], the very code the driver runs).
//!
//! A [`Spec`] gives 2–3 ranks a small program each and a network: FIFO per
//! pair (shared memory, RDMA RC) or one that may deliver a pair's messages
//! in any order (to exercise the hold-back queue). A program's [`Step`]s
//! are eager and rendezvous sends, synchronous or not, blocking or not, in
//! one of two contexts; receives with wildcards into buffers of an exact
//! size; `cancel`; withdrawal (what a scope that ends by panic does);
//! `probe`; and a rank's death, after which each survivor notices it at a
//! moment of its own, before or after what the dead rank still had in
//! flight arrives. The checker explores **every** interleaving of the
//! ranks' steps, every order in which transmissions happen and every
//! delivery order the network allows, and both answers to every rendezvous
//! (pull the data single-copy, or have it streamed after a clear-to-send).
//! States are fingerprinted (64-bit SipHash of the whole state) so each is
//! expanded once. The engines and the network are `tandem_core::harness`'s
//! [`Net`], the driver of the engine the unit tests and the fuzzer share;
//! the checker is its host (the programs' buffers and bookkeeping). The explicit-credit threshold is the driver's
//! (`credits.div_ceil(2)`); sequence numbers and credit counts can start
//! just below 2^16 so both 16-bit wraps are crossed.
//!
//! Besides the hand-written [`suite`], programs are generated: every
//! two-rank program of up to k operations over a small grammar
//! ([`enumerated_specs`]) and seeded random ones ([`random_specs`]), each
//! checked exhaustively against [`Expect::Progress`], which accepts any
//! outcome MPI allows and nothing else.
//!
//! Checked in every state and transition:
//! * **receiver ready**: no matching message ever arrives without a free
//!   receive entry (and, if eager, a free buffer) reserved for its sender —
//!   the RDMA receiver-not-ready condition — and no header is refused as a
//!   protocol violation; credits in flight plus credits held never exceed
//!   the windows; control messages in flight never exceed a reserve of
//!   `envelopes` per kind;
//! * **no slot overwritten**: the engine's own audit;
//! * **no stale read or write**: a rendezvous pull only reads a send buffer
//!   whose send is still pending; nothing is written into a receive buffer
//!   after its receive completed;
//! * **byte-exact delivery** with the right status: every byte of the
//!   message up to the capacity, guard bytes on both sides of the buffer
//!   untouched, `Truncated` exactly when the message is longer;
//! * **results**: `Cancelled` only after a `cancel` (or withdrawal) that
//!   succeeded; `PeerLost` only for an operation on a rank this one
//!   declared lost; on a FIFO network, never for a receive that an eager
//!   message sent before the death matches and that still waits here;
//! * **probe**: what it reports is a message that arrived and nobody
//!   received; on a FIFO network it reports nothing only if every waiting
//!   message it matches may be spoken for by a receive.
//!
//! And in every terminal state (nothing can move any more):
//! * **exactly once, non-overtaking**: no message received twice, no
//!   cancelled send received, and no receive got a message while an
//!   earlier one from the same sender that it also matched went to a
//!   later-posted receive; for a `Complete` spec, every message that was
//!   not cancelled was received;
//! * **slots come back**: each rank's operation table holds exactly its
//!   pending operations (withdrawn ones included: they free themselves);
//! * **credits balance**: with nothing in flight, the sender's available
//!   entries and buffers plus what the receiver holds plus what it freed
//!   and has not yet returned make the whole window;
//! * **termination / progress**: for a `Complete` spec every rank finished;
//!   for a `Deadlock` spec the deadlock is found and reported with every
//!   pending operation named; for a `Progress` spec, operations may be left
//!   pending only where no pending receive has a matching message it could
//!   get and no pending send's message was received.
//!
//! The search is depth first and keeps its path: a transition back onto
//! the path is a cycle (a livelock) and a violation, and a `Complete` spec
//! must reach at least one terminal state, so no execution can hide in a
//! loop that never ends.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};
use tandem_core::harness::{EngineOf, Frame as Wired, Host, Net, Storage};
use tandem_core::proto::{
    Engine, Entry, Handle, Op, OpError, Params, Peer, Phase, ProtoError, Pull, SlotCopy, Status,
    Taken, ANY_SOURCE, ANY_TAG,
};
use tandem_core::wire::{Header, Kind, Limits, MemDesc};

/// Most ranks a spec may have.
pub const MAX_RANKS: usize = 3;
/// Most steps in one rank's program.
pub const MAX_STEPS: usize = 5;
/// Receive entries per peer at most.
pub const MAX_ENVELOPES: usize = 4;
/// Eager buffers per peer at most.
pub const MAX_CREDITS: usize = 3;
/// Longest message (and receive buffer) in a spec.
pub const MAX_LEN: usize = 4;
/// A receive buffer: one guard byte, `MAX_LEN` bytes, one guard byte (a
/// receive of capacity `cap` owns bytes `1..=cap`; everything else is
/// guard and must stay [`GUARD`]).
const BUF: usize = MAX_LEN + 2;
/// What receive buffers are filled with before anything is written.
const GUARD: u8 = 0xEE;

/// The engines' storage: fixed arrays, so states hash and clone cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Fixed;

impl Storage for Fixed {
    type Ops = [Op; MAX_STEPS];
    type Entries = [Entry; MAX_RANKS * MAX_ENVELOPES];
    type Peers = [Peer; MAX_RANKS];
    type Bufs = [u32; MAX_RANKS * MAX_CREDITS];
}

type Eng = EngineOf<Fixed>;

/// One operation of a rank's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Send `len` bytes to `to` with `tag` in context `ctx`.
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
        /// Context (communicator) 0 or 1.
        ctx: u16,
    },
    /// Receive up to `cap` bytes from `from` (`None`: any source) with `tag`
    /// (`None`: any tag) in context `ctx`.
    Recv {
        /// Source, or any.
        from: Option<usize>,
        /// Tag, or any.
        tag: Option<u32>,
        /// Buffer length (exactly: the bytes around it are guards).
        cap: usize,
        /// Wait for it before the next step.
        blocking: bool,
        /// Context (communicator) 0 or 1.
        ctx: u16,
    },
    /// `cancel` the operation of an earlier step of this program: if it
    /// has not reached a peer it completes cancelled (a receive's message
    /// then goes to a later receive; a send's is never delivered).
    Cancel {
        /// The step whose operation is cancelled.
        step: usize,
    },
    /// Withdraw the receive of an earlier step, as the driver does when a
    /// scope ends by panic: cancelled if unmatched, otherwise left to
    /// finish with its data dropped; either way its table slot must come
    /// back.
    Abandon {
        /// The receive step withdrawn.
        step: usize,
    },
    /// Non-blocking probe: the status returned must be a message that
    /// arrived and nobody received; on FIFO networks, `None` only if no
    /// such message is waiting unmatched.
    Probe {
        /// Source, or any.
        from: Option<usize>,
        /// Tag, or any.
        tag: Option<u32>,
        /// Context.
        ctx: u16,
    },
    /// The rank dies here: it never moves again, messages to it vanish,
    /// and each survivor eventually notices (`Engine::fail_peer`), before
    /// or after the dead rank's messages still in flight arrive.
    Die,
}

impl Step {
    /// The same step in context `ctx` (sends and receives; others as is).
    pub fn in_ctx(self, c: u16) -> Step {
        match self {
            Step::Send {
                to,
                tag,
                len,
                sync,
                blocking,
                ..
            } => Step::Send {
                to,
                tag,
                len,
                sync,
                blocking,
                ctx: c,
            },
            Step::Recv {
                from,
                tag,
                cap,
                blocking,
                ..
            } => Step::Recv {
                from,
                tag,
                cap,
                blocking,
                ctx: c,
            },
            s => s,
        }
    }
}

/// What a spec's programs should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every operation matches: every execution must finish.
    Complete,
    /// The operations cannot all complete: a deadlock must be found.
    Deadlock,
    /// Anything MPI allows (for generated programs): an execution may end
    /// with operations pending only where no pending receive has a
    /// matching message available and no pending send's message was
    /// received (the progress rule), or where a receiver's entries for a
    /// sender are all held by messages nobody receives (the documented
    /// limit of the envelope budget).
    Progress,
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
    /// Eager buffers per peer (credits), 1..=[`MAX_CREDITS`]; the explicit
    /// credit threshold is the driver's, `credits.div_ceil(2)`.
    pub credits: u16,
    /// Receive entries per peer, `credits + 1..=`[`MAX_ENVELOPES`].
    pub envelopes: u16,
    /// Messages longer than this use rendezvous (at most `MAX_LEN - 2`).
    pub eager_limit: u64,
    /// Whether the network may reorder a pair's messages.
    pub reorder: bool,
    /// Rendezvous choices.
    pub pulls: Pulls,
    /// First sequence number and credit count (put it near 2^16 to cross
    /// the 16-bit wraps).
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

/// What follows a header on the model's wires (and what a stream
/// carries): the payload, and the sending rank's program step (the
/// model's bookkeeping, not on the wire; `u8::MAX` for none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Carried {
    payload: Vec<u8>,
    step: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RankSt {
    pc: u8,
    handles: [Option<Handle>; MAX_STEPS],
    done: [bool; MAX_STEPS],
    /// The step's operation was cancelled (by `Cancel` or an `Abandon` of
    /// an unmatched receive): it never took part in matching.
    cancelled: [bool; MAX_STEPS],
    /// The step's receive was withdrawn: its buffer is the user's again.
    abandoned: [bool; MAX_STEPS],
    /// Receive buffers, by step (guard, payload, guard).
    bufs: [[u8; BUF]; MAX_STEPS],
    /// Eager payload buffers.
    slots: [[u8; MAX_LEN]; MAX_RANKS * MAX_CREDITS],
    /// Which (sender, step) each receive step got.
    got: [Option<(u8, u8)>; MAX_STEPS],
    /// This rank has died.
    dead: bool,
    /// Peers this rank has declared lost.
    detected: [bool; MAX_RANKS],
    /// Per sender: bit `k` set once the matching message of the sender's
    /// step `k` arrived here (eager or RTS); `arrived_eager` the eager ones.
    arrived: [u8; MAX_RANKS],
    arrived_eager: [u8; MAX_RANKS],
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    /// The engines, the messages in flight per (from, to), the streamed
    /// payloads in flight, and the receives waiting for them.
    net: Net<Fixed, Carried>,
    ranks: Vec<RankSt>,
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

/// Whether a receive (`from`, `tag`, `ctx`) matches a message from `s`.
fn matches(from: Option<usize>, tag: Option<u32>, ctx: u16, s: usize, t: u32, c: u16) -> bool {
    ctx == c && from.is_none_or(|f| f == s) && tag.is_none_or(|x| x == t)
}

struct Checker<'a> {
    spec: &'a Spec,
    n: usize,
}

type Res<T> = Result<T, String>;

impl Checker<'_> {
    /// What the driver's header validation allows.
    fn limits(&self) -> Limits {
        Limits {
            eager_max: self.spec.eager_limit,
            msg_max: MAX_LEN as u64,
            contexts: 2,
        }
    }

    fn pair(&self, f: usize, t: usize) -> usize {
        f * self.n + t
    }

    fn initial(&self) -> Res<State> {
        let s = self.spec;
        let mut ranks = Vec::new();
        let mut engines = Vec::new();
        for r in 0..self.n {
            let p = Params {
                rank: r as u32,
                nranks: self.n as u32,
                credits: s.credits,
                envelopes: s.envelopes,
                // The driver's threshold (progress/mod.rs).
                credit_threshold: s.credits.div_ceil(2),
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
            engines.push(e);
            ranks.push(RankSt {
                pc: 0,
                handles: [None; MAX_STEPS],
                done: [false; MAX_STEPS],
                cancelled: [false; MAX_STEPS],
                abandoned: [false; MAX_STEPS],
                bufs: [[GUARD; BUF]; MAX_STEPS],
                slots: [[0; MAX_LEN]; MAX_RANKS * MAX_CREDITS],
                got: [None; MAX_STEPS],
                dead: false,
                detected: [false; MAX_RANKS],
                arrived: [0; MAX_RANKS],
                arrived_eager: [0; MAX_RANKS],
            });
        }
        Ok(State {
            net: Net::new(engines),
            ranks,
        })
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

    /// Whether rank `r` received message (`s`, `k`) in some step.
    fn received(&self, st: &State, r: usize, s: usize, k: usize) -> bool {
        st.ranks[r].got.contains(&Some((s as u8, k as u8)))
    }

    /// Copies `bytes` into receive step `k`'s buffer the way the driver
    /// does: nothing for a withdrawn receive; a write into a receive that
    /// already completed is a violation.
    fn write(&self, st: &mut State, r: usize, k: usize, bytes: &[u8]) -> Res<()> {
        write(&mut st.ranks, r, k, bytes)
    }
}

/// The step of rank `r` whose operation is `h`.
fn step_of(ranks: &[RankSt], r: usize, h: Handle) -> Option<usize> {
    ranks[r].handles.iter().position(|&x| x == Some(h))
}

/// [`Checker::write`] over the ranks alone.
fn write(ranks: &mut [RankSt], r: usize, k: usize, bytes: &[u8]) -> Res<()> {
    {
        let rk = &mut ranks[r];
        if rk.abandoned[k] {
            return Ok(());
        }
        if rk.done[k] {
            return Err(format!(
                "rank {r} step {k}: written after its receive completed"
            ));
        }
        if bytes.len() > MAX_LEN {
            return Err(format!("rank {r} step {k}: {} bytes written", bytes.len()));
        }
        rk.bufs[k][1..1 + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
}

impl Checker<'_> {
    /// Collects finished operations, checking their results.
    fn collect(&self, st: &mut State) -> Res<()> {
        for r in 0..self.n {
            if st.ranks[r].dead {
                continue;
            }
            for k in 0..st.ranks[r].pc as usize {
                let step = self.spec.programs[r][k];
                if st.ranks[r].done[k] || !matches!(step, Step::Send { .. } | Step::Recv { .. }) {
                    continue;
                }
                let h = st.ranks[r].handles[k].expect("posted");
                let Taken::Done(res) = st.net.engines[r].take(h) else {
                    continue;
                };
                st.ranks[r].done[k] = true;
                self.check_result(st, r, k, step, res)?;
            }
        }
        Ok(())
    }

    fn check_result(
        &self,
        st: &State,
        r: usize,
        k: usize,
        step: Step,
        res: Result<Status, OpError>,
    ) -> Res<()> {
        let rk = &st.ranks[r];
        let (involves, is_recv) = match step {
            Step::Send { to, .. } => (Some(to), false),
            Step::Recv { from, .. } => (from, true),
            _ => return Ok(()),
        };
        let status = match res {
            Ok(s) => s,
            Err(OpError::Cancelled) if rk.cancelled[k] => return Ok(()),
            Err(OpError::PeerLost { peer })
                if rk.detected[peer as usize] && involves.is_none_or(|p| p == peer as usize) =>
            {
                return self.lost_ok(st, r, k, peer as usize);
            }
            Err(OpError::Truncated { status, got }) if is_recv => {
                let Step::Recv { cap, .. } = step else {
                    unreachable!()
                };
                if status.len as usize <= cap || got as usize != cap {
                    return Err(format!(
                        "rank {r} step {k}: Truncated ({got} of {} B) into a {cap}-byte buffer",
                        status.len
                    ));
                }
                status
            }
            Err(e) => return Err(format!("rank {r} step {k}: {step:?} failed: {e:?}")),
        };
        let Step::Recv {
            from,
            tag,
            cap,
            ctx,
            ..
        } = step
        else {
            return Ok(());
        };
        let (s, ks) =
            rk.got[k].ok_or_else(|| format!("rank {r} step {k}: completed without a message"))?;
        let (s, ks) = (s as usize, ks as usize);
        let Step::Send {
            len,
            tag: stag,
            ctx: sctx,
            ..
        } = self.spec.programs[s][ks]
        else {
            return Err("matched a non-send".into());
        };
        let want = Status {
            source: s as u32,
            tag: stag,
            len: len as u64,
        };
        if status != want {
            return Err(format!(
                "rank {r} step {k}: status {status:?}, message was {want:?}"
            ));
        }
        if len > cap && res.is_ok() {
            return Err(format!(
                "rank {r} step {k}: a {len}-byte message into {cap} bytes did not report Truncated"
            ));
        }
        if !matches(from, tag, ctx, s, stag, sctx) {
            return Err(format!(
                "rank {r} step {k}: got a message it does not match"
            ));
        }
        let n = len.min(cap);
        let b = &rk.bufs[k];
        if b[1..1 + n] != content(s, ks, len)[..n] {
            return Err(format!(
                "rank {r} step {k}: bytes {:?}, sent {:?}",
                &b[1..1 + n],
                &content(s, ks, len)[..n]
            ));
        }
        if b[0] != GUARD || b[1 + n..].iter().any(|&x| x != GUARD) {
            return Err(format!(
                "rank {r} step {k}: written outside the message ({b:?}, {n} B at 1..)"
            ));
        }
        Ok(())
    }

    /// A receive or send of rank `r`'s step `k` failed because peer `d`
    /// was lost. On a FIFO network, a receive may fail so only if no eager
    /// message `d` sent before dying that it matches is waiting here: those
    /// stay receivable.
    fn lost_ok(&self, st: &State, r: usize, k: usize, d: usize) -> Res<()> {
        let Step::Recv { from, tag, ctx, .. } = self.spec.programs[r][k] else {
            return Ok(());
        };
        if self.spec.reorder {
            return Ok(());
        }
        for (kk, step) in self.spec.programs[d].iter().enumerate() {
            let Step::Send {
                to, tag: t, ctx: c, ..
            } = *step
            else {
                continue;
            };
            if to == r
                && st.ranks[r].arrived_eager[d] & (1 << kk) != 0
                && !self.received(st, r, d, kk)
                && matches(from, tag, ctx, d, t, c)
            {
                return Err(format!(
                    "rank {r} step {k}: failed PeerLost although rank {d}'s eager message of step {kk}, which it matches, arrived before the death and is unreceived"
                ));
            }
        }
        Ok(())
    }

    fn invariants(&self, st: &State) -> Res<()> {
        let s = self.spec;
        for r in 0..self.n {
            if st.ranks[r].dead {
                continue;
            }
            st.net.engines[r]
                .audit()
                .map_err(|e| format!("rank {r}: engine audit: {e}"))?;
        }
        for f in 0..self.n {
            for t in 0..self.n {
                if st.ranks[f].dead || st.ranks[t].dead {
                    continue;
                }
                let q = &st.net.wires[self.pair(f, t)];
                let matching = q.iter().filter(|m| m.header.kind().is_matching()).count() as u64;
                let eager = q
                    .iter()
                    .filter(|m| m.header.kind().takes_eager_credit())
                    .count() as u64;
                // Answers (CTS, FIN, ACK) and credit messages need no
                // credit: each answers a credited message, so a receive
                // reserve of `envelopes` slots per kind covers them.
                let answers = q
                    .iter()
                    .filter(|m| matches!(m.header.kind(), Kind::Cts | Kind::Fin | Kind::Ack))
                    .count() as u64;
                let credit_msgs =
                    q.iter().filter(|m| m.header.kind() == Kind::Credit).count() as u64;
                // On a FIFO network (shm, RDMA RC) each credit message in
                // flight returns at least `credit_threshold` frees the
                // peer has not heard of, and those are bounded by its
                // window. (A reordering network may also hold stale ones.)
                let fifo = !s.reorder;
                if answers > s.envelopes as u64 || (fifo && credit_msgs > s.envelopes as u64) {
                    return Err(format!(
                        "{f}->{t}: {answers} answers and {credit_msgs} credit messages in flight exceed the reserve of {}",
                        s.envelopes
                    ));
                }
                let (held, bufs) = st.net.engines[t].held_for(f as u32);
                if matching + held > s.envelopes as u64 || eager + bufs > s.credits as u64 {
                    return Err(format!(
                        "{f}->{t}: {matching} in flight + {held} held > {} entries, or {eager} on eager credit in flight + {bufs} held > {} eager credits",
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
            if st.ranks[r].dead {
                continue;
            }
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
                if st.net.engines[r].next_tx(p as u32).is_some() {
                    let mut x = st.clone();
                    self.transmit(&mut x, r, p)?;
                    out.push(x);
                }
            }
            // Decide a matched rendezvous (a dead sender's buffer cannot
            // be read: only a CTS, which goes nowhere).
            let mut probe = st.net.engines[r].clone();
            if let Some(p) = probe.next_pull() {
                let sender_dead = st.ranks[(p.desc.addr >> 8) as usize].dead;
                let choices: &[bool] = match (self.spec.pulls, sender_dead) {
                    (_, true) | (Pulls::Never, _) => &[false],
                    (Pulls::Always, _) => &[true],
                    (Pulls::Both, _) => &[true, false],
                };
                for &pull in choices {
                    let mut x = st.clone();
                    self.pull(&mut x, r, pull)?;
                    out.push(x);
                }
            }
            // Notice a dead peer.
            for d in 0..self.n {
                if st.ranks[d].dead && !st.ranks[r].detected[d] {
                    let mut x = st.clone();
                    self.detect(&mut x, r, d);
                    out.push(x);
                }
            }
        }
        for f in 0..self.n {
            for t in 0..self.n {
                let len = st.net.wires[self.pair(f, t)].len();
                let picks = if self.spec.reorder { len } else { len.min(1) };
                for i in 0..picks {
                    let mut x = st.clone();
                    self.deliver(&mut x, f, t, i)?;
                    out.push(x);
                }
                let dl = st.net.streams[self.pair(f, t)].len();
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
        let step = self.spec.programs[r][k];
        st.ranks[r].pc += 1;
        let e = &mut st.net.engines[r];
        let rk = &mut st.ranks[r];
        match step {
            Step::Send {
                to,
                tag,
                len,
                sync,
                ctx,
                ..
            } => {
                match e.post_send(to as u32, ctx, tag, len as u64, sync) {
                    Ok(h) => rk.handles[k] = Some(h),
                    // Refused at once: the destination was declared lost.
                    Err(ProtoError::PeerLost { peer })
                        if peer as usize == to && rk.detected[to] =>
                    {
                        rk.done[k] = true;
                    }
                    Err(e) => return Err(format!("rank {r} step {k}: post_send: {e}")),
                }
            }
            Step::Recv {
                from,
                tag,
                cap,
                ctx,
                ..
            } => {
                let src = from.map_or(ANY_SOURCE, |f| f as u32);
                let (h, copy) = e
                    .post_recv(src, ctx, tag.unwrap_or(ANY_TAG), cap as u64)
                    .map_err(|e| format!("rank {r} step {k}: post_recv: {e}"))?;
                rk.handles[k] = Some(h);
                if let Some(c) = copy {
                    let bytes = rk.slots[c.slot];
                    rk.got[k] = slot_origin(rk, c.slot);
                    self.write(st, r, k, &bytes[..c.len as usize])?;
                }
            }
            Step::Cancel { step: j } => {
                let rk = &mut st.ranks[r];
                if j < k && !rk.done[j] {
                    if let Some(h) = rk.handles[j] {
                        rk.cancelled[j] = st.net.engines[r].cancel(h);
                    }
                }
            }
            Step::Abandon { step: j } => {
                let rk = &mut st.ranks[r];
                let is_recv = matches!(self.spec.programs[r].get(j), Some(Step::Recv { .. }));
                if j < k && is_recv && !rk.done[j] {
                    let h = rk.handles[j].expect("posted");
                    let phase = st.net.engines[r].abandon(h);
                    rk.cancelled[j] = phase == Some(Phase::Posted);
                    rk.abandoned[j] = true;
                    rk.done[j] = true;
                }
            }
            Step::Probe { from, tag, ctx } => {
                let src = from.map_or(ANY_SOURCE, |f| f as u32);
                let got = st.net.engines[r].probe(src, ctx, tag.unwrap_or(ANY_TAG));
                self.check_probe(st, r, k, (from, tag, ctx), got)?;
            }
            Step::Die => {
                st.ranks[r].dead = true;
                // Whatever was on its way to it is gone.
                for f in 0..self.n {
                    let i = self.pair(f, r);
                    st.net.wires[i].clear();
                    st.net.streams[i].clear();
                }
            }
        }
        Ok(())
    }

    /// A probe's answer must name a message that arrived here and that no
    /// receive got; on a FIFO network, "nothing" only if every such
    /// message it matches may be spoken for by a receive of this rank.
    fn check_probe(
        &self,
        st: &State,
        r: usize,
        k: usize,
        (from, tag, ctx): (Option<usize>, Option<u32>, u16),
        got: Option<Status>,
    ) -> Res<()> {
        let rk = &st.ranks[r];
        let waiting = |s: usize, kk: usize| -> Option<(u32, usize, u16)> {
            let Step::Send {
                to,
                tag: t,
                len,
                ctx: c,
                ..
            } = self.spec.programs[s][kk]
            else {
                return None;
            };
            let dropped = rk.detected[s] && rk.arrived_eager[s] & (1 << kk) == 0;
            (to == r && rk.arrived[s] & (1 << kk) != 0 && !self.received(st, r, s, kk) && !dropped)
                .then_some((t, len, c))
        };
        if let Some(g) = got {
            let s = g.source as usize;
            let real = (0..self.spec.programs[s].len()).any(|kk| {
                waiting(s, kk).is_some_and(|(t, len, c)| {
                    t == g.tag && len as u64 == g.len && matches(from, tag, ctx, s, t, c)
                })
            });
            if !real {
                return Err(format!(
                    "rank {r} step {k}: probe reported {g:?}, which no waiting message is"
                ));
            }
            return Ok(());
        }
        if self.spec.reorder {
            return Ok(());
        }
        for s in 0..self.n {
            for kk in 0..self.spec.programs[s].len() {
                let Some((t, _, c)) = waiting(s, kk) else {
                    continue;
                };
                if !matches(from, tag, ctx, s, t, c) {
                    continue;
                }
                // A receive of this rank, pending or withdrawn while
                // matched, may hold it (a matched rendezvous).
                let spoken = (0..rk.pc as usize).any(|j| match self.spec.programs[r][j] {
                    Step::Recv {
                        from: f2,
                        tag: t2,
                        ctx: c2,
                        ..
                    } => {
                        rk.got[j].is_none()
                            && (!rk.done[j] || (rk.abandoned[j] && !rk.cancelled[j]))
                            && matches(f2, t2, c2, s, t, c)
                    }
                    _ => false,
                });
                if !spoken {
                    return Err(format!(
                        "rank {r} step {k}: probe found nothing although rank {s}'s message of step {kk} is waiting unmatched"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Survivor `r` declares `d` lost: what `d` still had in flight to it
    /// is gone with the connection.
    fn detect(&self, st: &mut State, r: usize, d: usize) {
        st.net.engines[r].fail_peer(d as u32);
        st.ranks[r].detected[d] = true;
        let e = self.pair(r, d);
        st.net.expected[e].clear();
        let i = self.pair(d, r);
        st.net.wires[i].clear();
        st.net.streams[i].clear();
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
                ctx,
            } => {
                let Some(h) = st.net.engines[r].eager_now(to as u32, ctx, tag, len as u64) else {
                    return Ok(false);
                };
                if !st.ranks[to].dead {
                    let i = self.pair(r, to);
                    st.net.wires[i].push_back(Wired {
                        header: h,
                        desc: MemDesc::NONE,
                        body: Carried {
                            payload: content(r, k, len),
                            step: k as u8,
                        },
                    });
                }
            }
            Step::Recv {
                from: Some(f),
                tag,
                cap,
                blocking: true,
                ctx,
            } => {
                let i = self.pair(f, r);
                let Some(mut m) = st.net.wires[i].front().cloned() else {
                    return Ok(false);
                };
                m.header = Header::decode(&m.header.encode(), &self.limits()).map_err(|e| {
                    format!("rank {f} sent rank {r} a header the wire refuses: {e:?}")
                })?;
                let taken = st.net.engines[r]
                    .eager_recv_now(f as u32, ctx, tag.unwrap_or(ANY_TAG), &m.header)
                    .map_err(|e| format!("rank {r}: fast receive refused a header: {e}"))?;
                if !taken {
                    return Ok(false);
                }
                st.net.wires[i].pop_front();
                let n = m.body.payload.len().min(cap);
                let Step::Send {
                    tag: stag,
                    ctx: sctx,
                    ..
                } = self.spec.programs[f][m.body.step as usize]
                else {
                    return Err("fast receive of a non-send".into());
                };
                if !matches(Some(f), tag, ctx, f, stag, sctx) || m.header.tag != stag {
                    return Err(format!(
                        "rank {r}: fast receive took a message it does not match"
                    ));
                }
                if m.body.payload != content(f, m.body.step as usize, m.body.payload.len()) {
                    return Err(format!("rank {r}: fast receive got corrupt bytes"));
                }
                let bit = 1 << m.body.step;
                st.ranks[r].arrived[f] |= bit;
                st.ranks[r].arrived_eager[f] |= bit;
                st.ranks[r].got[k] = Some((f as u8, m.body.step));
                self.write(st, r, k, &m.body.payload[..n])?;
            }
            _ => return Ok(false),
        }
        let rk = &mut st.ranks[r];
        rk.done[k] = true;
        rk.pc += 1;
        Ok(true)
    }

    /// Rank `r` transmits its next message to `p` (through the harness).
    fn transmit(&self, st: &mut State, r: usize, p: usize) -> Res<()> {
        let mut host = Bookkeeping {
            ck: self,
            ranks: &mut st.ranks,
        };
        st.net.transmit(&mut host, r, p).map(|_| ())
    }

    /// Message `i` of `(f, t)` reaches `t` (through the harness).
    fn deliver(&self, st: &mut State, f: usize, t: usize, i: usize) -> Res<()> {
        let mut host = Bookkeeping {
            ck: self,
            ranks: &mut st.ranks,
        };
        st.net.deliver(&mut host, f, t, i).map(|_| ())
    }

    /// Rank `r` runs its matched rendezvous: pulled, or answered by CTS.
    fn pull(&self, st: &mut State, r: usize, pulled: bool) -> Res<()> {
        let mut host = Bookkeeping {
            ck: self,
            ranks: &mut st.ranks,
        };
        st.net.pull(&mut host, r, pulled).map(|_| ())
    }

    /// Stream `i` of `(f, t)` reaches `t` (through the harness).
    fn stream_in(&self, st: &mut State, f: usize, t: usize, i: usize) -> Res<()> {
        let mut host = Bookkeeping {
            ck: self,
            ranks: &mut st.ranks,
        };
        st.net.stream_in(&mut host, f, t, i).map(|_| ())
    }

    /// The operations still pending at a terminal state, named.
    fn pending(&self, st: &State) -> String {
        let mut pending = String::new();
        for r in 0..self.n {
            let rk = &st.ranks[r];
            if rk.dead {
                continue;
            }
            for (k, step) in self.spec.programs[r].iter().enumerate() {
                if k < rk.pc as usize && (rk.done[k] || !is_op(step)) {
                    continue;
                }
                let what = describe(r, step);
                if k < rk.pc as usize {
                    let phase = rk.handles[k].and_then(|h| st.net.engines[r].phase(h));
                    let phase = phase.map_or("?".to_string(), |p| format!("{p:?}"));
                    let _ = write!(pending, "{what} [pending: {phase}]; ");
                } else {
                    let _ = write!(pending, "{what} [not reached]; ");
                }
            }
        }
        pending
    }

    /// At a terminal state: finished, legitimately stuck (`Progress`), or a
    /// deadlock with its operations.
    fn terminal(&self, st: &State) -> Result<(), String> {
        let pending = self.pending(st);
        if !pending.is_empty() && self.spec.expect != Expect::Progress {
            return Err(format!("deadlock: {}", pending.trim_end_matches("; ")));
        }
        if !pending.is_empty() {
            self.stuck_ok(st)?;
        }
        for r in 0..self.n {
            let rk = &st.ranks[r];
            if rk.dead {
                continue;
            }
            // Every withdrawn or finished operation gave its slot back.
            let open = (0..rk.pc as usize)
                .filter(|&k| !rk.done[k] && is_op(&self.spec.programs[r][k]))
                .count();
            let in_use = st.net.engines[r].in_use();
            if in_use != open {
                return Err(format!(
                    "rank {r} ended with {in_use} operations in its table, {open} pending"
                ));
            }
        }
        let deaths = st.ranks.iter().any(|r| r.dead);
        if !deaths {
            self.ledger(st)?;
        }
        self.order(
            st,
            pending.is_empty() && !deaths && self.spec.expect == Expect::Complete,
        )
    }

    /// Credits balance when nothing is in flight: for every pair, the
    /// sender's available entries (buffers) plus what the receiver holds
    /// for it plus what it freed but has not returned yet make the whole
    /// window; nothing was lost or granted twice.
    fn ledger(&self, st: &State) -> Res<()> {
        for f in 0..self.n {
            for t in (0..self.n).filter(|&t| t != f) {
                let tx = st.net.engines[f].ledger(t as u32);
                let rx = st.net.engines[t].ledger(f as u32);
                let (held, bufs) = st.net.engines[t].held_for(f as u32);
                let entries = tx.entries_available + rx.entries_owed + held;
                let buffers = tx.buffers_available + rx.buffers_owed + bufs;
                if entries != self.spec.envelopes as u64 || buffers != self.spec.credits as u64 {
                    return Err(format!(
                        "{f}->{t}: credits do not balance at the end: {} + {} owed + {held} held = {entries} of {} entries, {} + {} owed + {bufs} held = {buffers} of {} buffers",
                        tx.entries_available,
                        rx.entries_owed,
                        self.spec.envelopes,
                        tx.buffers_available,
                        rx.buffers_owed,
                        self.spec.credits
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether a state where operations are pending is one MPI allows.
    fn stuck_ok(&self, st: &State) -> Res<()> {
        for r in (0..self.n).filter(|&r| !st.ranks[r].dead) {
            let rk = &st.ranks[r];
            for a in (0..rk.pc as usize).filter(|&a| !rk.done[a]) {
                match self.spec.programs[r][a] {
                    Step::Recv { from, tag, ctx, .. } => {
                        if let Some(d) = from.filter(|&d| rk.detected[d]) {
                            return Err(format!(
                                "rank {r} step {a}: a receive from lost rank {d} still pending"
                            ));
                        }
                        for s in 0..self.n {
                            if let Some(kk) = self.available(st, r, s, from, tag, ctx) {
                                return Err(format!(
                                    "rank {r} step {a} and rank {s}'s message of step {kk} match, yet both are stuck: {}",
                                    self.pending(st)
                                ));
                            }
                        }
                    }
                    Step::Send { to, .. } => {
                        if self.received(st, to, r, a) {
                            return Err(format!(
                                "rank {r} step {a}: its message was received, the send is still pending"
                            ));
                        }
                        if rk.detected[to] {
                            return Err(format!(
                                "rank {r} step {a}: a send to lost rank {to} still pending"
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// A message of `s` to `r` that a receive (`from`, `tag`, `ctx`) of `r`
    /// matches and could get: posted, not cancelled, not received, and not
    /// gone with a dead sender. `None` also where `r`'s entries for `s`
    /// are all held by messages nobody receives (the envelope budget).
    fn available(
        &self,
        st: &State,
        r: usize,
        s: usize,
        from: Option<usize>,
        tag: Option<u32>,
        ctx: u16,
    ) -> Option<usize> {
        let (rk, sk) = (&st.ranks[r], &st.ranks[s]);
        let unreceived_arrived = (0..self.spec.programs[s].len())
            .filter(|&kk| rk.arrived[s] & (1 << kk) != 0 && !self.received(st, r, s, kk))
            .count();
        if unreceived_arrived >= self.spec.envelopes as usize {
            return None;
        }
        (0..sk.pc as usize).find(|&kk| {
            let Step::Send {
                to, tag: t, ctx: c, ..
            } = self.spec.programs[s][kk]
            else {
                return false;
            };
            let gone = sk.dead && (self.spec.reorder || rk.arrived_eager[s] & (1 << kk) == 0);
            to == r
                && !sk.cancelled[kk]
                && !gone
                && !self.received(st, r, s, kk)
                && matches(from, tag, ctx, s, t, c)
        })
    }

    /// Exactly once and non-overtaking, over the whole run; with `all`,
    /// every message that was not cancelled was received.
    fn order(&self, st: &State, all: bool) -> Res<()> {
        let mut seen = HashSet::new();
        for r in 0..self.n {
            let prog = &self.spec.programs[r];
            for a in 0..prog.len() {
                let Step::Recv { from, tag, ctx, .. } = prog[a] else {
                    continue;
                };
                let Some((s, ka)) = st.ranks[r].got[a] else {
                    continue;
                };
                if !seen.insert((s, ka)) {
                    return Err(format!("rank {s}'s step {ka} was received twice"));
                }
                if st.ranks[s as usize].cancelled[ka as usize] {
                    return Err(format!(
                        "rank {s}'s cancelled send of step {ka} was received"
                    ));
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
                    let Step::Send {
                        tag: tb, ctx: cb, ..
                    } = self.spec.programs[sb as usize][kb as usize]
                    else {
                        continue;
                    };
                    if matches(from, tag, ctx, sb as usize, tb, cb) {
                        return Err(format!(
                            "rank {r}: receive {a} got rank {s}'s step {ka} although step {kb}, sent earlier, matched it too"
                        ));
                    }
                }
            }
        }
        if !all {
            return Ok(());
        }
        let mut sends = 0;
        for (r, prog) in self.spec.programs.iter().enumerate() {
            for (k, s) in prog.iter().enumerate() {
                sends += (matches!(s, Step::Send { .. }) && !st.ranks[r].cancelled[k]) as usize;
            }
        }
        if seen.len() != sends {
            return Err(format!("{} of {sends} messages were received", seen.len()));
        }
        Ok(())
    }
}

/// Whether a step posts an operation (a send or a receive).
fn is_op(s: &Step) -> bool {
    matches!(s, Step::Send { .. } | Step::Recv { .. })
}

/// Where each eager slot's message came from (kept next to the slots).
/// The harness's host in the model: the checker's view of every rank's
/// program, buffers and bookkeeping (the engines and wires are the
/// harness's).
struct Bookkeeping<'a, 'b> {
    ck: &'a Checker<'b>,
    ranks: &'a mut Vec<RankSt>,
}

impl Bookkeeping<'_, '_> {
    /// Rank `r`'s send step for operation `op`, and its length.
    fn send_step(&self, r: usize, op: Handle) -> (usize, usize) {
        let k = step_of(self.ranks, r, op).expect("own op");
        let Step::Send { len, .. } = self.ck.spec.programs[r][k] else {
            unreachable!("a send's operation")
        };
        (k, len)
    }
}

impl Host<Fixed, Carried> for Bookkeeping<'_, '_> {
    type Error = String;

    fn eager(&mut self, r: usize, op: Handle) -> Res<Carried> {
        let (k, len) = self.send_step(r, op);
        Ok(Carried {
            payload: content(r, k, len),
            step: k as u8,
        })
    }

    fn rts(&mut self, r: usize, op: Handle) -> Res<(MemDesc, Carried)> {
        let (k, _) = self.send_step(r, op);
        let desc = MemDesc {
            addr: ((r as u64) << 8) | k as u64,
            ..MemDesc::NONE
        };
        Ok((
            desc,
            Carried {
                payload: vec![],
                step: k as u8,
            },
        ))
    }

    fn empty(&mut self) -> Carried {
        Carried {
            payload: vec![],
            step: u8::MAX,
        }
    }

    fn alive(&self, r: usize) -> bool {
        !self.ranks[r].dead
    }

    fn arriving(&mut self, f: usize, t: usize, m: &mut Wired<Carried>) -> Res<()> {
        // The header crosses the wire as bytes and is validated as the
        // driver validates it (eager payloads within the eager limit).
        m.header = Header::decode(&m.header.encode(), &self.ck.limits())
            .map_err(|e| format!("rank {f} sent rank {t} a header the wire refuses: {e:?}"))?;
        if m.header.kind().is_matching() {
            self.ranks[t].arrived[f] |= 1 << m.body.step;
            if m.header.kind().is_eager() {
                self.ranks[t].arrived_eager[f] |= 1 << m.body.step;
            }
        }
        Ok(())
    }

    fn refused(&mut self, f: usize, t: usize, _m: &Wired<Carried>, e: ProtoError) -> Res<()> {
        Err(format!(
            "rank {t} refused a message from rank {f} ({e}): receiver not ready or protocol broken"
        ))
    }

    fn copy(&mut self, t: usize, c: SlotCopy) -> Res<()> {
        let k = step_of(self.ranks, t, c.op).expect("own op");
        let rk = &mut self.ranks[t];
        let bytes = rk.slots[c.slot];
        // Which message was in that slot is recorded with it.
        rk.got[k] = slot_origin(rk, c.slot);
        write(self.ranks, t, k, &bytes[..c.len as usize])
    }

    fn deliver(&mut self, t: usize, f: usize, op: Handle, len: u64, m: &Wired<Carried>) -> Res<()> {
        let k = step_of(self.ranks, t, op).expect("own op");
        self.ranks[t].got[k] = Some((f as u8, m.body.step));
        let n = (len as usize).min(m.body.payload.len());
        write(self.ranks, t, k, &m.body.payload[..n])?;
        if len as usize > m.body.payload.len() {
            return Err(format!(
                "rank {t}: told to deliver {len} B of a {}-byte message",
                m.body.payload.len()
            ));
        }
        Ok(())
    }

    fn store(&mut self, t: usize, f: usize, slot: usize, m: &Wired<Carried>) -> Res<()> {
        let rk = &mut self.ranks[t];
        rk.slots[slot][..m.body.payload.len()].copy_from_slice(&m.body.payload);
        set_slot_origin(rk, slot, Some((f as u8, m.body.step)));
        Ok(())
    }

    fn stream_out(&mut self, t: usize, op: Handle, len: u64) -> Res<Carried> {
        let (k, full) = self.send_step(t, op);
        Ok(Carried {
            payload: content(t, k, full)[..len as usize].to_vec(),
            step: u8::MAX,
        })
    }

    fn stream_in(&mut self, t: usize, _f: usize, op: Handle, body: &Carried) -> Res<()> {
        let k = step_of(self.ranks, t, op).expect("own op");
        write(self.ranks, t, k, &body.payload)
    }

    fn unknown_stream(&mut self, t: usize, f: usize, _token: u32) -> Res<()> {
        Err(format!("rank {t}: a stream from rank {f} nobody asked for"))
    }

    fn pull(&mut self, engines: &[Eng], r: usize, p: &Pull, pulled: bool) -> Res<()> {
        let (s, k) = ((p.desc.addr >> 8) as usize, (p.desc.addr & 0xff) as usize);
        if let Some(kr) = step_of(self.ranks, r, p.op) {
            self.ranks[r].got[kr] = Some((s as u8, k as u8));
        }
        if pulled {
            // The sender's buffer must still be lent to the send.
            let h = self.ranks[s].handles[k].expect("posted send");
            if self.ranks[s].done[k] || engines[s].phase(h) != Some(Phase::WaitReceiver) {
                return Err(format!(
                    "rank {r} pulled from rank {s}'s step {k} whose send is no longer pending"
                ));
            }
            let Step::Send { len, .. } = self.ck.spec.programs[s][k] else {
                unreachable!()
            };
            let bytes = content(s, k, len);
            let kr = step_of(self.ranks, r, p.op).expect("own op");
            let n = p.len as usize;
            if n > len {
                return Err(format!("rank {r}: pull of {n} B from a {len}-byte send"));
            }
            write(self.ranks, r, kr, &bytes[..n])?;
        }
        Ok(())
    }
}

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
    let ctx = |c: u16| {
        if c == 0 {
            String::new()
        } else {
            format!(" ctx {c}")
        }
    };
    let who = |f: Option<usize>| f.map_or("any rank".to_string(), |f| format!("rank {f}"));
    let tg = |t: Option<u32>| t.map_or("any".to_string(), |t| t.to_string());
    match *s {
        Step::Send {
            to,
            tag,
            len,
            sync,
            blocking,
            ctx: c,
        } => format!(
            "rank {r}: {}{} {len} B to rank {to} tag {tag}{}",
            if blocking { "" } else { "i" },
            if sync { "ssend" } else { "send" },
            ctx(c)
        ),
        Step::Recv {
            from,
            tag,
            blocking,
            cap,
            ctx: c,
        } => format!(
            "rank {r}: {} {cap} B from {} tag {}{}",
            if blocking { "recv" } else { "irecv" },
            who(from),
            tg(tag),
            ctx(c)
        ),
        Step::Cancel { step } => format!("rank {r}: cancel step {step}"),
        Step::Abandon { step } => format!("rank {r}: withdraw step {step}"),
        Step::Probe { from, tag, ctx: c } => {
            format!("rank {r}: iprobe {} tag {}{}", who(from), tg(tag), ctx(c))
        }
        Step::Die => format!("rank {r}: dies"),
    }
}

/// A program in one line, for reports.
pub fn program_text(spec: &Spec) -> String {
    let mut out = String::new();
    for (r, p) in spec.programs.iter().enumerate() {
        for s in p {
            let _ = write!(out, "{}; ", describe(r, s));
        }
    }
    out.trim_end_matches("; ").to_string()
}

fn fingerprint(st: &State) -> u64 {
    let mut h = DefaultHasher::new();
    st.hash(&mut h);
    h.finish()
}

/// Whether `spec` fits the model's bounds.
fn in_bounds(spec: &Spec) -> bool {
    let n = spec.programs.len();
    let steps_ok = spec.programs.iter().enumerate().all(|(r, p)| {
        p.len() <= MAX_STEPS
            && p.iter().enumerate().all(|(k, s)| match *s {
                Step::Send { to, len, ctx, .. } => to < n && to != r && len < MAX_LEN && ctx < 2,
                Step::Recv { from, cap, ctx, .. } => {
                    from.is_none_or(|f| f < n && f != r) && cap <= MAX_LEN && ctx < 2
                }
                Step::Cancel { step } | Step::Abandon { step } => step < k,
                Step::Probe { from, ctx, .. } => from.is_none_or(|f| f < n) && ctx < 2,
                Step::Die => true,
            })
    });
    (2..=MAX_RANKS).contains(&n)
        && steps_ok
        && spec.eager_limit as usize <= MAX_LEN - 2
        && (1..=MAX_CREDITS as u16).contains(&spec.credits)
        && spec.envelopes > spec.credits
        && spec.envelopes as usize <= MAX_ENVELOPES
}

/// Explores every reachable state of `spec` (up to `max_states`), depth
/// first, keeping the current path: a transition back onto it is a cycle
/// (a livelock the programs could run forever) and a violation; so is a
/// `Complete` spec with no terminal state.
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
    let c = Checker {
        spec,
        n: spec.programs.len(),
    };
    if !in_bounds(spec) {
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
    if let Err(e) = explore(&c, init, max_states, &mut report) {
        report.violation = Some(e);
    }
    if report.violation.is_none() {
        if spec.expect == Expect::Deadlock && report.deadlock.is_none() {
            report.violation = Some("expected a deadlock, every execution finished".into());
        }
        if spec.expect == Expect::Complete && report.terminals == 0 {
            report.violation = Some("no execution reaches an end".into());
        }
    }
    report.elapsed = start.elapsed();
    report
}

/// One state on the depth-first path: its fingerprint and the successors
/// not yet visited.
struct Frame {
    fp: u64,
    next: Vec<State>,
}

fn explore(c: &Checker<'_>, init: State, max_states: u64, report: &mut Report) -> Res<()> {
    let mut seen: HashSet<u64> = HashSet::new();
    let mut on_path: HashSet<u64> = HashSet::new();
    let mut path: Vec<Frame> = Vec::new();
    let enter = |st: State, path: &mut Vec<Frame>, report: &mut Report| -> Res<()> {
        report.states += 1;
        if report.states > max_states {
            return Err(format!("state bound {max_states} exceeded"));
        }
        let mut next = Vec::new();
        c.successors(&st, &mut next)?;
        report.transitions += next.len() as u64;
        if next.is_empty() {
            report.terminals += 1;
            match (c.terminal(&st), c.spec.expect) {
                (Ok(()), _) => {}
                (Err(e), Expect::Deadlock) if e.starts_with("deadlock") => {
                    report.deadlock.get_or_insert(e);
                }
                (Err(e), _) => return Err(e),
            }
        }
        let fp = fingerprint(&st);
        path.push(Frame { fp, next });
        Ok(())
    };
    let fp0 = fingerprint(&init);
    seen.insert(fp0);
    on_path.insert(fp0);
    enter(init, &mut path, report)?;
    while let Some(top) = path.last_mut() {
        let Some(x) = top.next.pop() else {
            let done = path.pop().expect("non-empty");
            on_path.remove(&done.fp);
            continue;
        };
        let fp = fingerprint(&x);
        if on_path.contains(&fp) {
            return Err(format!(
                "a cycle: the state graph returns to a state on its own path ({} deep), so the programs could run forever",
                path.len()
            ));
        }
        if seen.insert(fp) {
            on_path.insert(fp);
            enter(x, &mut path, report)?;
        }
    }
    Ok(())
}

fn send(to: usize, tag: u32, len: usize) -> Step {
    Step::Send {
        to,
        tag,
        len,
        sync: false,
        blocking: false,
        ctx: 0,
    }
}

fn ssend(to: usize, tag: u32, len: usize) -> Step {
    Step::Send {
        to,
        tag,
        len,
        sync: true,
        blocking: true,
        ctx: 0,
    }
}

fn recv(from: Option<usize>, tag: Option<u32>, cap: usize) -> Step {
    Step::Recv {
        from,
        tag,
        cap,
        blocking: false,
        ctx: 0,
    }
}

fn brecv(from: Option<usize>, tag: Option<u32>, cap: usize) -> Step {
    Step::Recv {
        from,
        tag,
        cap,
        blocking: true,
        ctx: 0,
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
                        ctx: 0,
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
        ctx: 0,
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
    // The shortcuts' guards on their "no" side (cargo-mutants found them
    // unchecked): a blocking send behind queued ones must not overtake
    // them; a blocking receive must not take a message a receive posted
    // earlier matches; both out of credit.
    let mut behind = spec(
        "fast send behind queued sends, fast receive behind a posted one",
        false,
        1,
        vec![
            vec![
                send(1, 0, 2),
                bsend(1, 0, 1),
                bsend(1, 0, 1),
                bsend(1, 1, 1),
            ],
            vec![
                recv(a, None, 2),
                brecv(a, Some(0), 2),
                brecv(a, Some(0), 2),
                brecv(a, None, 2),
            ],
        ],
    );
    behind.fast_paths = true;
    v.push(behind);
    let mut two_fast = spec(
        "fast paths, credits 2, both directions",
        false,
        2,
        vec![
            vec![
                bsend(1, 0, 1),
                bsend(1, 0, 1),
                brecv(b, Some(0), 1),
                bsend(1, 0, 0),
            ],
            vec![
                recv(a, Some(0), 1),
                bsend(0, 0, 1),
                brecv(a, Some(0), 1),
                brecv(a, None, 1),
            ],
        ],
    );
    two_fast.fast_paths = true;
    v.push(two_fast);
    // A blocking receive whose tag the next message does not have, and a
    // blocking send with no receive entry left (two rendezvous sends hold
    // both; stuck where the envelope budget says it may be).
    let mut wrong = spec(
        "fast receive of another tag, fast send out of entries",
        false,
        1,
        vec![
            vec![
                bsend(1, 0, 2),
                bsend(1, 1, 1),
                send(1, 2, 2),
                send(1, 2, 2),
                bsend(1, 3, 1),
            ],
            vec![
                brecv(a, Some(0), 2),
                brecv(a, Some(1), 1),
                brecv(a, Some(3), 1),
            ],
        ],
    );
    wrong.fast_paths = true;
    wrong.expect = Expect::Progress;
    v.push(wrong);
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
pub const PROTOCOL_MUTANTS: [tandem_core::mutation::Mutant; 11] = {
    use tandem_core::mutation::Mutant;
    [
        Mutant::SkipCreditCheck,
        Mutant::SeqWrap,
        Mutant::HoldBackBypass,
        Mutant::CreditReturnLost,
        Mutant::FastRecvSeqStuck,
        Mutant::FailPeerDropsEager,
        Mutant::CancelKeepsPosted,
        Mutant::ProbeIgnoresContext,
        Mutant::OrphanLeak,
        Mutant::CreditCountWrap,
        Mutant::RtsEagerCreditAsRendezvous,
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

/// Inserts `s` at `at` in `p`, moving the step numbers of later `Cancel`
/// and `Abandon` steps along.
fn insert_step(p: &mut Vec<Step>, at: usize, s: Step) {
    for x in p.iter_mut() {
        if let Step::Cancel { step } | Step::Abandon { step } = x {
            if *step >= at {
                *step += 1;
            }
        }
    }
    p.insert(at, s);
}

/// Random program `index` of the stream `seed` (see [`random_specs`]).
pub fn random_spec(seed: u64, index: usize) -> Spec {
    let mut g = crate::SplitMix(seed ^ (index as u64).wrapping_mul(0xa076_1d64_78bd_642f));
    let n = if g.chance(20) { 3 } else { 2 };
    let reorder = g.chance(30);
    let credits = 1 + g.below(MAX_CREDITS) as u16;
    let envelopes = credits + 1 + g.below(MAX_ENVELOPES - credits as usize) as u16;
    let mut programs: Vec<Vec<Step>> = vec![Vec::new(); n];
    // Messages, each with a receive that matches it (exactly, or through
    // wildcards that may also take another), at random places.
    for _ in 0..1 + g.below(3) {
        let s = g.below(n);
        let r = (s + 1 + g.below(n - 1)) % n;
        if programs[s].len() >= MAX_STEPS - 1 || programs[r].len() >= MAX_STEPS - 1 {
            continue;
        }
        let (tag, ctx, len) = (g.below(2) as u32, g.chance(20) as u16, g.below(MAX_LEN));
        let send = Step::Send {
            to: r,
            tag,
            len,
            sync: g.chance(25),
            blocking: g.chance(25),
            ctx,
        };
        let at = g.below(programs[s].len() + 1);
        insert_step(&mut programs[s], at, send);
        let cap = match g.below(4) {
            0 | 1 => len,
            2 => len.saturating_sub(1),
            _ => len + 1,
        };
        let recv = Step::Recv {
            from: (!g.chance(25)).then_some(s),
            tag: (!g.chance(25)).then_some(tag),
            cap,
            blocking: g.chance(25),
            ctx,
        };
        let at = g.below(programs[r].len() + 1);
        insert_step(&mut programs[r], at, recv);
    }
    // Probes, cancels, withdrawals, and sometimes a death.
    for (r, prog) in programs.iter_mut().enumerate() {
        for _ in 0..2 {
            if prog.len() >= MAX_STEPS {
                break;
            }
            let at = g.below(prog.len() + 1);
            let targets: Vec<usize> = (0..at)
                .filter(|&k| {
                    matches!(
                        prog[k],
                        Step::Send {
                            blocking: false,
                            ..
                        } | Step::Recv {
                            blocking: false,
                            ..
                        }
                    )
                })
                .collect();
            let recvs: Vec<usize> = targets
                .iter()
                .copied()
                .filter(|&k| matches!(prog[k], Step::Recv { .. }))
                .collect();
            let extra = match g.below(5) {
                0 => Some(Step::Probe {
                    from: (g.chance(50)).then_some((r + 1) % n),
                    tag: (g.chance(50)).then_some(0),
                    ctx: 0,
                }),
                1 if !targets.is_empty() => Some(Step::Cancel {
                    step: targets[g.below(targets.len())],
                }),
                2 if !recvs.is_empty() => Some(Step::Abandon {
                    step: recvs[g.below(recvs.len())],
                }),
                _ => None,
            };
            if let Some(x) = extra {
                insert_step(prog, at, x);
            }
        }
    }
    if g.chance(15) {
        let d = g.below(n);
        if programs[d].len() < MAX_STEPS {
            let at = g.below(programs[d].len() + 1);
            insert_step(&mut programs[d], at, Step::Die);
        }
    }
    Spec {
        name: format!("random {seed}/{index}"),
        credits,
        envelopes,
        eager_limit: 1 + g.below(2) as u64,
        reorder,
        pulls: Pulls::Both,
        seq_start: if g.chance(50) {
            u16::MAX - g.below(3) as u16
        } else {
            0
        },
        fast_paths: !reorder && g.chance(50),
        programs,
        expect: Expect::Progress,
    }
}

/// `count` random programs (seeded): 2 or 3 ranks, 1 to 3 messages each
/// with a receive that matches it, exact or wildcard, in one of two
/// contexts, of sizes 0 to 3 bytes into buffers of exactly the size, one
/// byte less (truncation, eager included) or one more; blocking or not,
/// synchronous or not; probes, cancels and withdrawals mixed in, and in
/// some a rank that dies; credits 1 to 3 (the driver's threshold), eager
/// limits 1 or 2, counters starting just below 2^16 in half of them, FIFO
/// or reordering networks, fast paths on or off. Each is checked
/// exhaustively against [`Expect::Progress`].
pub fn random_specs(seed: u64, count: usize) -> Vec<Spec> {
    (0..count).map(|i| random_spec(seed, i)).collect()
}

/// The operations [`enumerated_specs`] builds programs from, as seen by
/// rank `r` of two (`o` is the other rank); `None` where one does not
/// apply (a cancel with nothing to cancel).
fn grammar(r: usize, prog: &[Step], op: usize) -> Option<Step> {
    let o = 1 - r;
    let last = |want_recv: bool| {
        prog.iter().rposition(|s| match s {
            Step::Recv {
                blocking: false, ..
            } => true,
            Step::Send {
                blocking: false, ..
            } => !want_recv,
            _ => false,
        })
    };
    Some(match op {
        0 => send(o, 0, 1),
        1 => send(o, 0, 2),
        2 => Step::Send {
            to: o,
            tag: 1,
            len: 1,
            sync: true,
            blocking: false,
            ctx: 0,
        },
        3 => send(o, 0, 0).in_ctx(1),
        4 => recv(Some(o), Some(0), 1),
        5 => recv(None, None, 2),
        6 => brecv(Some(o), None, 1),
        7 => Step::Cancel { step: last(false)? },
        8 => Step::Abandon { step: last(true)? },
        9 => Step::Probe {
            from: None,
            tag: None,
            ctx: 0,
        },
        10 if r == 1 => Step::Die,
        // A blocking standard send: the driver's eager shortcut
        // (`eager_now`) is tried first where the spec has fast paths.
        11 => Step::Send {
            to: o,
            tag: 0,
            len: 1,
            sync: false,
            blocking: true,
            ctx: 0,
        },
        _ => return None,
    })
}

/// Size of the alphabet of [`grammar`].
const GRAMMAR: usize = 12;

/// Every two-rank program of 1 to `k` operations over a small grammar
/// (eager, rendezvous and synchronous sends, one in a second context, one
/// blocking;
/// exact, wildcard and blocking receives, with a truncating capacity;
/// cancel and withdraw of the last eligible operation; probe; rank 1's
/// death), each operation given to either rank; each program checked on a
/// FIFO network with the fast paths and counters just below 2^16, and on a
/// reordering one.
pub fn enumerated_specs(k: usize) -> Vec<Spec> {
    let mut out = Vec::new();
    let letters = 2 * GRAMMAR;
    for len in 1..=k {
        'program: for code in 0..letters.pow(len as u32) {
            let mut programs: Vec<Vec<Step>> = vec![Vec::new(); 2];
            let mut c = code;
            for _ in 0..len {
                let (r, op) = ((c % letters) / GRAMMAR, c % GRAMMAR);
                c /= letters;
                let Some(s) = grammar(r, &programs[r], op) else {
                    continue 'program;
                };
                programs[r].push(s);
            }
            for reorder in [false, true] {
                out.push(Spec {
                    name: format!("enumerated {len}/{code}{}", if reorder { " r" } else { "" }),
                    credits: 1,
                    envelopes: 2,
                    eager_limit: 1,
                    reorder,
                    pulls: Pulls::Both,
                    seq_start: if reorder { 0 } else { u16::MAX - 1 },
                    fast_paths: !reorder,
                    programs: programs.clone(),
                    expect: Expect::Progress,
                });
            }
        }
    }
    out
}
