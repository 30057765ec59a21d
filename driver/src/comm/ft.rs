//! Surviving failures, as MPI's ULFM does: revoke a communicator, learn
//! which ranks failed, agree on a value among the survivors, and shrink
//! the communicator to them.
//!
//! Agreement ([`Comm::agree`]) runs on the fault-tolerance context, which
//! no communicator uses, so it works on a revoked communicator. The order
//! of its sends and waits is `tandem_core::agree`'s state machine, which
//! `tandem-verify` model-checks with ranks dying at every step. It has
//! two phases, each tolerating ranks that die at any point:
//!
//! 1. **Gather**: every rank sends its contribution (flags, the ranks it
//!    knows failed, a context it could take) to every other, and waits
//!    for each rank's contribution or for that rank's failure. Its
//!    estimate is the combination of what it got (flags ANDed, failures
//!    united, the largest context); ranks it heard nothing from before
//!    they failed are added to the failures. Estimates may differ where a
//!    rank died part-way through sending.
//! 2. **Rotating coordinators**: in round `j`, rank `j` (if alive) sends
//!    its estimate to all; every other rank waits for it or for rank `j`'s
//!    failure and adopts what it received (a coordinator that failed first
//!    changes nothing: marking it failed there would split the survivors
//!    of a last coordinator that died part-way). The first round whose
//!    coordinator lives through its sends makes every estimate equal, and
//!    later rounds only send that same estimate around; after round
//!    `size - 1` every survivor decides its estimate. Nobody waits on a
//!    rank that already decided: a coordinator sends before it waits for
//!    anyone.
//!
//! The detector is assumed accurate, as ULFM assumes: a rank declared
//! failed has crashed, or is cut off from everyone (the rank that declares
//! it closes its connections to it). A rank that is silent to some ranks
//! and heard by others (a partial network partition) is outside what the
//! protocol guarantees. Messages: `2 (n - 1)` per rank, `n` rounds.

use super::{CollState, Comm};
use crate::error::{Error, Result};
use crate::progress::{Engine, FT_CTX};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_core::agree::{Action, Agree, Effect, Kind};
use tandem_core::sync::Ordering;

/// Message kinds of the agreement, in the tag's bits 26 and up (a
/// revocation notice and a wait record have 0 there).
const GATHER: u32 = 2;
const ROUND: u32 = 3;

/// The tag of agreement message `kind` of the `epoch`-th agreement on the
/// communicator with context `ctx`.
fn tag(kind: u32, ctx: u16, epoch: u32) -> u32 {
    (kind << 26) | ((ctx as u32 & 0xfff) << 14) | (epoch & 0x3fff)
}

/// Words of a context mask: a bit for each communicator context below
/// [`MAX_CONTEXTS`](crate::MAX_CONTEXTS) / 2 ([`Agreement::free`]).
pub const CONTEXT_WORDS: usize = crate::progress::MAX_CONTEXTS as usize / 2 / 64;

/// What the ranks agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Vote {
    /// ANDed.
    flags: u32,
    /// Contexts free on the rank (a bit each): ANDed.
    free: [u64; CONTEXT_WORDS],
    /// Failed ranks of the communicator (a bit each): united.
    failed: Vec<u64>,
}

/// Bytes of a vote before its failed ranks.
const VOTE_HEAD: usize = 4 + 8 * CONTEXT_WORDS;

impl Vote {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(VOTE_HEAD + 8 * self.failed.len());
        b.extend_from_slice(&self.flags.to_le_bytes());
        for w in self.free.iter().chain(&self.failed) {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// `None` for bytes that are no vote of a communicator of `words`
    /// bitmap words.
    fn decode(b: &[u8], words: usize) -> Option<Self> {
        if b.len() != VOTE_HEAD + 8 * words {
            return None;
        }
        let mut words = b[4..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
        let mut free = [0u64; CONTEXT_WORDS];
        for (f, w) in free.iter_mut().zip(words.by_ref()) {
            *f = w;
        }
        Some(Self {
            flags: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            free,
            failed: words.collect(),
        })
    }

    fn merge(&mut self, o: &Vote) {
        self.flags &= o.flags;
        for (a, b) in self.free.iter_mut().zip(&o.free) {
            *a &= b;
        }
        for (a, b) in self.failed.iter_mut().zip(&o.failed) {
            *a |= b;
        }
    }

    fn set_failed(&mut self, r: usize) {
        self.failed[r / 64] |= 1 << (r % 64);
    }

    /// The decision as [`Agreement`] says it, for `n` ranks.
    fn outcome(&self, n: usize) -> Agreement {
        Agreement {
            flags: self.flags,
            failed: (0..n).filter(|&r| self.is_failed(r)).collect(),
            free: self.free,
        }
    }

    fn is_failed(&self, r: usize) -> bool {
        self.failed[r / 64] & (1 << (r % 64)) != 0
    }
}

/// The outcome of a fault-tolerant agreement ([`Comm::agree_on`]), the
/// same on every survivor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreement {
    /// The AND of the flags that counted.
    pub flags: u32,
    /// The ranks of the communicator agreed failed, in order.
    pub failed: Vec<usize>,
    /// The AND of the masks of free contexts that counted.
    pub free: [u64; CONTEXT_WORDS],
}

/// The lowest context set in `mask` that a communicator may take.
fn lowest(mask: &[u64; CONTEXT_WORDS]) -> Option<u16> {
    (0..FT_CTX as usize)
        .find(|&c| mask[c / 64] & (1 << (c % 64)) != 0)
        .map(|c| c as u16)
}

impl Comm {
    /// Revokes this communicator on every rank (MPI's `MPIX_Comm_revoke`):
    /// every pending and later operation on it, here and on every other
    /// live rank, fails with [`Error::Revoked`] — on other ranks as soon as
    /// the notice reaches them (a rank that waits looks every few
    /// milliseconds; each rank forwards the notice to every other, so it
    /// arrives even if this rank dies part-way). Its duplicates, and
    /// communicators shrunk from it, are not revoked. [`shrink`](Self::shrink)
    /// and [`agree`](Self::agree) still work on it.
    ///
    /// Revoke when an operation failed because a rank died, so that the
    /// ranks still waiting on live peers (who will never send, having seen
    /// the failure) stop waiting too, then shrink.
    ///
    /// A rendezvous send in flight on the communicator when the revocation
    /// reaches it leaves the channel to its receiver broken
    /// ([`Error::ChannelBroken`] on later operations with that peer):
    /// revoke to stop, not as part of normal operation.
    pub fn revoke(&self) {
        let mut e = self.engine();
        e.revoke(self.ctx);
    }

    /// Whether this communicator was revoked (here or by another rank,
    /// as far as this rank has heard).
    pub fn is_revoked(&self) -> bool {
        let mut e = self.engine();
        e.check_peers();
        e.revoked(self.ctx)
    }

    /// The ranks of this communicator this rank knows failed, in order:
    /// those whose process exited, whose connection closed or failed, or
    /// that stayed silent past the bound
    /// ([`Config::failure_timeout`](field@crate::Config::failure_timeout))
    /// (MPI's `MPIX_Comm_get_failed`). Other ranks may know more or less;
    /// [`agree`](Self::agree) and [`shrink`](Self::shrink) settle that.
    pub fn failed_ranks(&self) -> Vec<usize> {
        let mut e = self.engine();
        e.check_peers();
        (0..self.size)
            .filter(|&r| r != self.rank && e.is_dead(self.world(r)))
            .collect()
    }

    /// Fault-tolerant agreement (MPI's `MPIX_Comm_agree`): every live rank
    /// of this communicator calls it with its `flags`; each survivor gets
    /// the same value back, the bitwise AND of the flags of the ranks whose
    /// contribution counted (every survivor's, and those of ranks that
    /// failed during the call only if some rank received them in time).
    /// Works on a revoked communicator; ranks may fail at any point of it.
    /// Collective: every live rank must call it, in the same order as the
    /// communicator's other agreements and shrinks. See the module
    /// documentation for the protocol.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout};
    /// let out = Comm::threads(3, &Layout::default(), Config::default(), |c| {
    ///     c.agree(if c.rank() == 1 { 0b110 } else { 0b011 })
    /// });
    /// assert!(out.iter().all(|r| *r.as_ref().unwrap() == 0b010));
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] if a rank that is neither failed nor silent does
    /// not take part within [`Config::timeout`](field@crate::Config::timeout)
    /// (it does not call `agree`).
    pub fn agree(&self, flags: u32) -> Result<u32> {
        Ok(self.agreement(flags, [u64::MAX; CONTEXT_WORDS])?.flags)
    }

    /// The whole of a fault-tolerant agreement, for libraries that build
    /// their own communicators on it (the MPI library's
    /// `MPIX_Comm_shrink` and `MPIX_Comm_agree`): the AND of the flags as
    /// [`agree`](Self::agree) returns it, the ranks of this communicator
    /// agreed failed, and the AND of the survivors' masks of free
    /// contexts (`free`: bit `c % 64` of word `c / 64` set for each context
    /// `c` this rank could give a new communicator). Every survivor gets
    /// the same [`Agreement`]. Collective over the live ranks, in the
    /// same order as the communicator's other agreements.
    ///
    /// # Errors
    /// As [`agree`](Self::agree).
    pub fn agree_on(&self, flags: u32, free: &[u64; CONTEXT_WORDS]) -> Result<Agreement> {
        let v = self.agreement(flags, *free)?;
        Ok(v.outcome(self.size))
    }

    /// A communicator of some of this one's ranks, with a context the
    /// caller chose (as [`dup_with_context`](Self::dup_with_context), for
    /// libraries that agree on contexts themselves): `ranks` are ranks of
    /// this communicator, in the new one's order, this rank among them.
    /// Nothing is sent; every rank of `ranks` must make the same call, and
    /// `ctx` must not be another live communicator's (context 0, the
    /// job's own, may be given to a communicator of the whole job in job
    /// order: the MPI library's `MPI_COMM_WORLD`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a context from `MAX_CONTEXTS / 2 - 1` (4095) on, a rank out of
    /// range or listed twice, or a list without this rank.
    pub fn subset_with_context(&self, ranks: &[usize], ctx: u16) -> Result<Comm> {
        if ctx >= FT_CTX {
            return Err(Error::InvalidArgument(format!(
                "context {ctx} outside 0..{FT_CTX}"
            )));
        }
        let mut members = Vec::with_capacity(ranks.len());
        for &r in ranks {
            if r >= self.size {
                return Err(Error::InvalidRank {
                    rank: r,
                    size: self.size,
                });
            }
            let w = self.world(r) as u32;
            if members.contains(&w) {
                return Err(Error::InvalidArgument(format!("rank {r} listed twice")));
            }
            members.push(w);
        }
        let rank = ranks.iter().position(|&r| r == self.rank).ok_or_else(|| {
            Error::InvalidArgument(format!("rank {} is not among the ranks listed", self.rank))
        })?;
        Ok(self.with_members(ctx, rank, members))
    }

    /// A communicator on `ctx` of world ranks `members`, this rank being
    /// `rank` among them.
    fn with_members(&self, ctx: u16, rank: usize, members: Vec<u32>) -> Comm {
        self.sh.engine.share();
        Comm {
            sh: self.sh.clone(),
            ctx,
            rank,
            size: members.len(),
            members: Some(Arc::from(members)),
            primary: false,
            coll: std::cell::RefCell::new(CollState::new(self.coll.borrow().settings().clone())),
            inline: Default::default(),
            epoch: Default::default(),
            _not_sync: PhantomData,
        }
    }

    /// A new communicator of the survivors (MPI's `MPIX_Comm_shrink`): the
    /// ranks of this one that the survivors agree have not failed, in
    /// their order here, renumbered from 0, with a context of its own. It
    /// is the same communicator on every survivor. Works on a revoked
    /// communicator; collective over the live ranks, as
    /// [`agree`](Self::agree). Statuses and errors on the new communicator
    /// name its ranks.
    ///
    /// # Errors
    /// [`Error::Timeout`] as for [`agree`](Self::agree);
    /// [`Error::Config`] when no communicator context is left;
    /// [`Error::ChannelBroken`] (naming this rank) if the survivors
    /// declared this rank failed (it was silent to them past the bound).
    pub fn shrink(&self) -> Result<Comm> {
        // Every context from this rank's next on is free here.
        let next = self.sh.next_ctx.load(Ordering::Relaxed) as usize;
        let mut free = [0u64; CONTEXT_WORDS];
        for c in next..FT_CTX as usize {
            free[c / 64] |= 1 << (c % 64);
        }
        let d = self.agreement(u32::MAX, free)?;
        if d.is_failed(self.rank) {
            return Err(Error::ChannelBroken {
                peer: self.rank,
                reason: "the survivors declared this rank failed (silent past the \
                         failure-detection bound)"
                    .into(),
            });
        }
        let Some(ctx) = lowest(&d.free) else {
            return Err(Error::Config(format!(
                "more than {FT_CTX} communicators: none left for the shrunk one"
            )));
        };
        let after = ctx as u32 + 1;
        let mut v = self.sh.next_ctx.load(Ordering::Relaxed);
        while v < after {
            match self
                .sh
                .next_ctx
                .compare_exchange(v, after, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => v = now,
            }
        }
        let members: Vec<u32> = (0..self.size)
            .filter(|&r| !d.is_failed(r))
            .map(|r| self.world(r) as u32)
            .collect();
        let me = self.world(self.rank) as u32;
        let rank = members.iter().position(|&w| w == me).ok_or_else(|| {
            Error::Internal("this rank is missing from the survivors it agreed on".into())
        })?;
        Ok(self.with_members(ctx, rank, members))
    }

    /// Runs one agreement (see the module documentation).
    fn agreement(&self, flags: u32, free: [u64; CONTEXT_WORDS]) -> Result<Vote> {
        let mut op = self.start_agreement(flags, free);
        loop {
            if let Some(v) = op.step(self)? {
                return Ok(v);
            }
            op.pace.pause();
        }
    }

    /// Starts an agreement: takes its epoch, sends what the machine sends
    /// first.
    fn start_agreement(&self, flags: u32, free: [u64; CONTEXT_WORDS]) -> AgreeOp {
        let epoch = self.epoch.get();
        self.epoch.set(epoch.wrapping_add(1));
        let (n, me) = (self.size, self.rank);
        let words = n.div_ceil(64);
        let mut est = Vote {
            flags,
            free,
            failed: vec![0; words],
        };
        for r in self.failed_ranks() {
            est.set_failed(r);
        }
        AgreeOp {
            m: Agree::new(n, me),
            est,
            tags: (tag(GATHER, self.ctx, epoch), tag(ROUND, self.ctx, epoch)),
            words,
            pace: Pace::new(self.sh.cfg.timeout),
            ctx: self.ctx,
        }
    }

    /// Starts a fault-tolerant agreement on `flags` ([`agree`](Self::agree))
    /// without waiting for it: the returned [`Agreeing`] completes with
    /// [`Agreeing::test`] or [`Agreeing::wait`] on this communicator (the
    /// MPI library's `MPIX_Comm_iagree`). It takes its place among the
    /// communicator's agreements when started: every rank starts its
    /// agreements (blocking or not) and shrinks in the same order.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout};
    /// let out = Comm::threads(2, &Layout::default(), Config::default(), |c| {
    ///     let mut a = c.iagree(if c.rank() == 0 { 0b01 } else { 0b11 });
    ///     // ... other work ...
    ///     a.wait(&c)
    /// });
    /// assert!(out.iter().all(|r| *r.as_ref().unwrap() == 0b01));
    /// ```
    pub fn iagree(&self, flags: u32) -> Agreeing {
        Agreeing {
            op: Some(self.start_agreement(flags, [u64::MAX; CONTEXT_WORDS])),
            result: None,
        }
    }

    /// The vote rank `r` sent with `tag` if it came, [`Heard::Failed`] once
    /// `r` is known failed with none from it; looks once, without waiting.
    fn hear_once(&self, r: usize, tag: u32, words: usize, w: &mut Pace) -> Result<Heard> {
        let src = self.world(r);
        let mut e = self.engine();
        e.progress();
        if let Some(b) = take_ft(&mut e, src, tag)? {
            w.news();
            return match Vote::decode(&b, words) {
                Some(v) => Ok(Heard::Vote(Box::new(v))),
                None => Err(Error::Protocol {
                    peer: src,
                    detail: format!("an agreement message of {} bytes", b.len()),
                }),
            };
        }
        if w.due() {
            e.check_peers();
            if e.is_dead(src) {
                // What it sent before failing counts.
                e.progress();
                if let Some(b) = take_ft(&mut e, src, tag)? {
                    if let Some(v) = Vote::decode(&b, words) {
                        return Ok(Heard::Vote(Box::new(v)));
                    }
                }
                return Ok(Heard::Failed);
            }
            if let Some(waited) = w.expired() {
                return Err(Error::Timeout {
                    op: crate::error::OpKind::Recv,
                    peer: r,
                    tag,
                    waited,
                    why: "in an agreement (agree or shrink) that rank has not joined".into(),
                });
            }
        }
        Ok(Heard::Nothing)
    }
}

/// What one look for an agreement message found.
enum Heard {
    /// A vote (boxed: a context mask makes it half a kilobyte).
    Vote(Box<Vote>),
    /// The sender failed without it.
    Failed,
    Nothing,
}

/// One agreement under way: core's machine, this rank's estimate, and the
/// pace of its waits.
struct AgreeOp {
    m: Agree,
    est: Vote,
    /// The tags of its gather and round messages.
    tags: (u32, u32),
    words: usize,
    pace: Pace,
    /// The context of the communicator that started it.
    ctx: u16,
}

impl AgreeOp {
    /// Does what can be done now; the decision once there is one.
    fn step(&mut self, c: &Comm) -> Result<Option<Vote>> {
        // The order of sends and waits is core's model-checked machine.
        loop {
            let tag_of = |k: Kind| {
                if k == Kind::Gather {
                    self.tags.0
                } else {
                    self.tags.1
                }
            };
            match self.m.action() {
                Action::SendToAll(kind) => {
                    let mut e = c.engine();
                    let body = self.est.encode();
                    for r in (0..c.size).filter(|&r| r != c.rank) {
                        e.send_detached(c.world(r), FT_CTX, tag_of(kind), &body);
                    }
                    drop(e);
                    self.m.sent();
                }
                Action::Await { kind, from } => {
                    let v = match c.hear_once(from, tag_of(kind), self.words, &mut self.pace)? {
                        Heard::Nothing => return Ok(None),
                        Heard::Vote(v) => Some(*v),
                        Heard::Failed => None,
                    };
                    match (self.m.heard(v.is_some()), v) {
                        (Some(Effect::Merge), Some(v)) => self.est.merge(&v),
                        (Some(Effect::Adopt), Some(v)) => self.est = v,
                        (Some(Effect::MarkFailed(r)), _) => self.est.set_failed(r),
                        // Keep, or a message the machine did not ask for.
                        _ => {}
                    }
                }
                Action::Decide => return Ok(Some(self.est.clone())),
            }
        }
    }
}

/// A non-blocking agreement ([`Comm::iagree`]).
pub struct Agreeing {
    op: Option<AgreeOp>,
    result: Option<Agreement>,
}

impl std::fmt::Debug for Agreeing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agreeing")
            .field("done", &self.result.is_some())
            .finish()
    }
}

impl Agreeing {
    /// Moves the agreement on; the agreed flags once every survivor has
    /// decided (and from then on), `None` while it is under way. `comm` is
    /// the communicator that started it.
    ///
    /// # Errors
    /// As [`Comm::agree`]; [`Error::InvalidArgument`] for another
    /// communicator than the one that started it. After an error the
    /// agreement is over: later calls repeat nothing and say so.
    pub fn test(&mut self, comm: &Comm) -> Result<Option<u32>> {
        if let Some(a) = &self.result {
            return Ok(Some(a.flags));
        }
        let Some(op) = self.op.as_mut() else {
            return Err(Error::InvalidArgument(
                "this agreement failed already".into(),
            ));
        };
        if op.ctx != comm.ctx {
            return Err(Error::InvalidArgument(format!(
                "an agreement started on context {} tested on context {}",
                op.ctx, comm.ctx
            )));
        }
        match op.step(comm) {
            Ok(Some(v)) => {
                self.result = Some(v.outcome(comm.size));
                self.op = None;
                Ok(Some(v.flags))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.op = None;
                Err(e)
            }
        }
    }

    /// The whole outcome once decided (as [`Comm::agree_on`] gives it: the
    /// flags, and the ranks agreed failed), else `None`.
    pub fn agreement(&self) -> Option<&Agreement> {
        self.result.as_ref()
    }

    /// Waits for the agreement's outcome ([`test`](Self::test) until it
    /// has one).
    ///
    /// # Errors
    /// As [`test`](Self::test).
    pub fn wait(&mut self, comm: &Comm) -> Result<u32> {
        loop {
            if let Some(f) = self.test(comm)? {
                return Ok(f);
            }
            if let Some(op) = self.op.as_mut() {
                op.pace.pause();
            }
        }
    }
}

/// The fault-tolerance message from world rank `src` with `tag`, if one
/// arrived (received whole).
fn take_ft(e: &mut Engine, src: usize, tag: u32) -> Result<Option<Vec<u8>>> {
    let Some(st) = e.probe(src as u32, FT_CTX, tag) else {
        return Ok(None);
    };
    let mut buf = vec![0u8; st.len];
    let id = e.post_recv(&mut buf, src as u32, FT_CTX, tag, 0)?;
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(r) = e.take(id) {
            r?;
            return Ok(Some(buf));
        }
        if Instant::now() >= end {
            let err = Error::ChannelBroken {
                peer: src,
                reason: "an agreement message did not arrive whole".into(),
            };
            e.withdraw(id, &err);
            return Err(err);
        }
        if !e.progress() {
            e.check_peers();
        }
    }
}

/// The pace of an agreement's waits: spin a little, then yield, then
/// sleep a tenth of a millisecond; look at peers every 2 ms; give up after
/// the timeout without news.
struct Pace {
    polls: u32,
    start: Instant,
    last: Instant,
    timeout: Duration,
}

impl Pace {
    fn new(timeout: Duration) -> Self {
        let now = Instant::now();
        Self {
            polls: 0,
            start: now,
            last: now,
            timeout,
        }
    }

    /// Whether to look at peers now (every 2 ms, after a first few
    /// looks); counts the looks.
    fn due(&mut self) -> bool {
        self.polls = self.polls.saturating_add(1);
        if self.polls < 64 {
            return false;
        }
        let now = Instant::now();
        if now.duration_since(self.last) >= Duration::from_millis(2) {
            self.last = now;
            return true;
        }
        false
    }

    /// Something arrived: the timeout counts from now.
    fn news(&mut self) {
        self.start = Instant::now();
    }

    fn expired(&self) -> Option<Duration> {
        let d = self.start.elapsed();
        (d >= self.timeout).then_some(d)
    }

    fn pause(&mut self) {
        if self.polls < 64 {
            std::hint::spin_loop();
        } else if self.polls < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}
