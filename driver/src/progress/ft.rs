//! Failures the engine handles for the whole rank: heartbeats on idle
//! links, revoked contexts, and the small messages of the fault-tolerance
//! protocols that nobody waits for (a revocation notice forwarded to every
//! peer).
//!
//! Revocation (ULFM's `MPI_Comm_revoke`) travels as an eager message on a
//! context of its own, [`FT_CTX`], which no communicator uses: a rank that
//! revokes sends the revoked context to every peer; a rank that receives a
//! notice for a context it had not seen revoked marks it and forwards the
//! notice to every peer, so that the revocation reaches every live rank
//! even when the revoker dies part-way. Marked contexts fail their pending
//! operations (when the waiter next takes them) and refuse new ones with
//! [`Error::Revoked`].

use super::{Engine, OpId, ANY_SOURCE};
use crate::error::{Error, Result};
use crate::transport::Transport;
use std::time::{Duration, Instant};

/// The context of fault-tolerance traffic (the last of the communicators'
/// half of the contexts; its collective twin is unused).
pub(crate) const FT_CTX: u16 = super::MAX_CONTEXTS / 2 - 1;

/// The tag of a revocation notice on [`FT_CTX`]; its body is the revoked
/// context, little-endian.
pub(crate) const REVOKE_TAG: u32 = 1;

/// Contexts per communicator half: context `c` and its collective twin
/// `c + HALF` are revoked together.
const HALF: u16 = super::MAX_CONTEXTS / 2;

/// A rank's failure state.
pub(crate) struct Faults {
    /// Whether any context is revoked (the hot paths look at this alone).
    pub(crate) revoked_any: bool,
    /// Revoked communicator contexts, a bit each.
    revoked: [u64; HALF as usize / 64],
    /// Heartbeats every this long (zero: none), last sent then.
    beat_every: Duration,
    beat_at: Instant,
    /// Sends nobody waits for, with the bytes they send.
    detached: Vec<(OpId, Box<[u8]>)>,
}

impl Faults {
    pub(crate) fn new(bound: Duration) -> Self {
        Self {
            revoked_any: false,
            revoked: [0; HALF as usize / 64],
            beat_every: bound / 4,
            beat_at: Instant::now(),
            detached: Vec::new(),
        }
    }

    /// Whether context `ctx` (or its communicator's other context) is
    /// revoked.
    #[inline]
    pub(crate) fn is_revoked(&self, ctx: u16) -> bool {
        let c = (ctx % HALF) as usize;
        self.revoked[c / 64] & (1 << (c % 64)) != 0
    }

    /// [`Error::Revoked`] for a revoked context.
    #[inline]
    pub(crate) fn gate(&self, ctx: u16) -> Result<()> {
        if self.revoked_any && self.is_revoked(ctx) {
            return Err(Error::Revoked {
                context: ctx % HALF,
            });
        }
        Ok(())
    }

    /// Marks `ctx` revoked; `false` if it was already.
    fn mark(&mut self, ctx: u16) -> bool {
        let c = (ctx % HALF) as usize;
        let had = self.revoked[c / 64] & (1 << (c % 64)) != 0;
        self.revoked[c / 64] |= 1 << (c % 64);
        self.revoked_any = true;
        !had
    }
}

impl Engine {
    /// Revokes context `ctx` on this rank and tells every peer.
    pub(crate) fn revoke(&mut self, ctx: u16) {
        if self.ft.mark(ctx) {
            self.notify_revoked(ctx, usize::MAX);
        }
    }

    /// Whether `ctx` is revoked.
    pub(crate) fn revoked(&self, ctx: u16) -> bool {
        self.ft.revoked_any && self.ft.is_revoked(ctx)
    }

    /// [`Error::Revoked`] if `ctx` is revoked.
    pub(crate) fn gate(&self, ctx: u16) -> Result<()> {
        self.ft.gate(ctx)
    }

    /// Sends the notice of `ctx`'s revocation to every peer but `from`.
    fn notify_revoked(&mut self, ctx: u16, from: usize) {
        let body = (ctx % HALF).to_le_bytes();
        for p in 0..self.peers.len() {
            if p != self.rank && p != from && self.peers[p].broken.is_none() {
                self.send_detached(p, FT_CTX, REVOKE_TAG, &body);
            }
        }
    }

    /// Sends `body` to `dst` without anyone waiting for it: straight into
    /// the link if it can, else posted and reaped later by
    /// [`check_peers`](Self::check_peers). A failure (a dead peer) is
    /// dropped: the protocols that send these tolerate lost peers.
    pub(crate) fn send_detached(&mut self, dst: usize, ctx: u16, tag: u32, body: &[u8]) {
        if self.try_send_now(body, dst, ctx, tag) {
            return;
        }
        let b: Box<[u8]> = body.into();
        // The box's bytes stay where they are while it sits in the list,
        // which keeps it until the send has finished.
        if let Ok(id) = self.post_send(&b, dst, ctx, tag, false, 0) {
            self.ft.detached.push((id, b));
        }
    }

    /// Collects the detached sends that finished.
    fn reap_detached(&mut self) {
        let mut i = 0;
        while i < self.ft.detached.len() {
            let id = self.ft.detached[i].0;
            if self.take(id).is_some() {
                self.ft.detached.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Takes the revocation notices that arrived, marking and forwarding
    /// each context seen revoked for the first time.
    fn poll_notices(&mut self) {
        let mut body = [0u8; 2];
        while let Some(st) = self.probe(ANY_SOURCE, FT_CTX, REVOKE_TAG) {
            let Ok(id) = self.post_recv(&mut body, st.source as u32, FT_CTX, REVOKE_TAG, 0) else {
                return;
            };
            // A two-byte message is stored whole: the receive matches it
            // at once.
            match self.take(id) {
                Some(Ok(_)) => {}
                Some(Err(_)) => continue,
                None => {
                    self.withdraw(id, &Error::Internal("notice not stored".into()));
                    return;
                }
            }
            let ctx = u16::from_le_bytes(body);
            if ctx < FT_CTX && self.ft.mark(ctx) {
                if self.debug {
                    eprintln!(
                        "tandem[{}]: context {ctx} revoked (told by rank {})",
                        self.rank, st.source
                    );
                }
                self.notify_revoked(ctx, st.source);
            }
        }
    }

    /// Whether [`take`](super::Engine::take) would return `id`'s result
    /// now: it finished, or it is pending on a revoked context (it then
    /// fails with `Revoked`). A spent `id` counts as finished.
    pub(crate) fn takeable(&self, id: OpId) -> bool {
        self.proto.info(id).is_none_or(|i| {
            i.phase == tandem_core::proto::Phase::Done
                || (self.ft.revoked_any && self.ft.is_revoked(i.ctx) && i.ctx != FT_CTX)
        })
    }

    /// The pending operation `id` on a revoked context: withdrawn, with
    /// the error its waiter gets.
    pub(super) fn take_revoked(&mut self, id: OpId) -> Option<crate::error::Result<super::Status>> {
        let ctx = self.proto.info(id)?.ctx;
        if !self.ft.is_revoked(ctx) || ctx == FT_CTX {
            return None;
        }
        let e = Error::Revoked {
            context: ctx % HALF,
        };
        self.withdraw(id, &e);
        Some(Err(e))
    }

    /// Heartbeats on idle links, at most once per quarter bound; also the
    /// periodic work of failures: notices, detached sends.
    pub(crate) fn keep_alive(&mut self) {
        if !self.ft.beat_every.is_zero() {
            let now = Instant::now();
            if now.duration_since(self.ft.beat_at) >= self.ft.beat_every {
                self.ft.beat_at = now;
                for p in 0..self.peers.len() {
                    if p != self.rank && self.peers[p].broken.is_none() {
                        self.peers[p].link.heartbeat();
                    }
                }
            }
        }
        self.poll_notices();
        self.poll_waits();
        if !self.ft.detached.is_empty() {
            self.reap_detached();
        }
    }

    /// Checks every peer's link now (the heartbeat thread, while the user
    /// computes): a silent or dead peer's channel breaks, so its failure
    /// is known before anyone waits on it.
    pub(crate) fn watch_peers(&mut self) {
        self.keep_alive();
        self.check_links();
    }

    /// Whether any link needs the heartbeat thread (TCP sends heartbeats;
    /// RDMA probes its peers while the user computes).
    pub(crate) fn needs_heartbeats(&self) -> bool {
        !self.ft.beat_every.is_zero()
            && self.peers.iter().any(|p| {
                matches!(
                    p.link.kind(),
                    crate::transport::Kind::Tcp | crate::transport::Kind::Rdma
                )
            })
    }
}
