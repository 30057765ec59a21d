//! The progress layer: drives [`tandem_core::proto::Engine`] for every
//! transport.
//!
//! The protocol engine decides everything about matching, credits and
//! rendezvous; this layer owns it together with the table of user buffers
//! and carries out what it asks for over each peer's [`Link`]:
//!
//! * posting, taking, withdrawing and the walk over a scope's operations;
//! * dispatch of the engine's actions: headers and eager bodies out
//!   ([`Transport::try_send`]), arrivals in ([`Transport::peek`] /
//!   [`Transport::consume`]), rendezvous streams in clear-to-send order,
//!   pulls (which may complete later, as an RDMA READ does);
//! * error mapping, peer liveness, and the wait records for hang reports.
//!
//! A message that arrives before its receive is held in one of the
//! receiver's entries: eager payloads in an `eager_limit`-byte buffer per
//! eager credit, rendezvous announcements as their header and descriptor
//! only. Senders without credit announce instead of waiting, so memory
//! stays bounded and nothing is dropped. All storage (operation table,
//! entries and their buffers, stream queues) is allocated when the engine
//! is built; steady-state messaging allocates nothing.
//!
//! User buffers are reached through the views of [`buffers`], recorded when
//! an operation is posted. They are valid because every operation is
//! either waited for or withdrawn before the borrow it came from ends
//! (blocking calls, or the end of a [`crate::Scope`]); only this process
//! writes them, and a peer only ever *reads* a send buffer (cross-memory
//! attach, an RDMA READ) while the send that owns it is still pending.

mod buffers;
mod ft;
pub(crate) use ft::FT_CTX;
mod recorder;
#[cfg(test)]
mod sim_tests;
pub(crate) mod waits;

use crate::config::{debug_level, Config, DebugLevel};
use crate::error::{Error, Result};
use crate::job::JobMap;
use crate::transport::shm::SHORT_BODY;
use crate::transport::{Kind as LinkKind, Link, Liveness, MemDesc, Peek, PullStart, Transport};
use crate::transport::{DESC_LEN, PEEK_LEN};
use buffers::UserBuf;
use std::collections::VecDeque;
use std::sync::Arc;
use tandem_core::proto::{
    self, Action, Entry, Handle, Op, OpError, OpInfo, Params, Phase, Taken, TxWhat,
};
use tandem_core::wire::{Header, Kind, Limits, HEADER_LEN, SHORT_LEN};

pub use recorder::MARK_LEN;
pub(crate) use recorder::{phase_byte, word, write_trace_file, Code, Whoami};
pub use tandem_core::proto::{ANY_SOURCE, ANY_TAG, TAG_UB};

/// What a completed operation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank (for a send: the destination).
    pub source: usize,
    /// The message tag.
    pub tag: u32,
    /// The message length in bytes.
    pub len: usize,
}

/// Identifies an operation of the engine.
pub(crate) type OpId = Handle;

/// A payload stream of a rendezvous.
#[derive(Clone, Copy)]
struct Stream {
    /// `None`: its operation failed with the channel; drain and drop the
    /// bytes.
    op: Option<Handle>,
    /// Its receive was withdrawn: drain and drop the bytes, then finish the
    /// (orphaned) operation so that its slot is freed.
    discard: bool,
    len: usize,
    done: usize,
    /// For a send: the receiver's buffer, from its CTS.
    remote: MemDesc,
}

/// One peer: its link and the streams running over it.
struct Peer {
    link: Link,
    /// Sends streaming to this peer, in CTS order.
    tx_streams: VecDeque<Stream>,
    /// Receives expecting a stream from this peer, in CTS order.
    rx_streams: VecDeque<Stream>,
    /// Set once the link cannot be used any more.
    broken: Option<Error>,
}

/// A pull the transport completes later.
#[derive(Clone, Copy)]
struct PendingPull {
    op: Handle,
    peer: usize,
    dst: u64,
    len: usize,
}

/// Where ranks sharing this host's mapping publish what they are blocked
/// in (for hang reports).
pub(crate) struct WaitBoard {
    /// The host's mapping.
    pub map: Arc<JobMap>,
    /// Index in the mapping of each rank of the job (`usize::MAX`: not on
    /// this host).
    pub local_of: Vec<usize>,
}

type Proto = proto::Engine<Box<[Op]>, Box<[Entry]>, Box<[proto::Peer]>, Box<[u32]>>;

/// The protocol parameters every rank of a job must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocol {
    /// Largest eager payload.
    pub eager_limit: u32,
    /// Eager credits per sender and receiver.
    pub credits: u32,
    /// Receive entries per sender and receiver.
    pub envelopes: u32,
}

impl Protocol {
    /// The protocol parameters of a layout.
    pub fn of(l: &crate::config::Layout) -> Self {
        Self {
            eager_limit: l.eager_limit,
            credits: l.credits,
            envelopes: l.envelopes,
        }
    }
}

/// The engine of one rank.
pub(crate) struct Engine {
    rank: usize,
    peers: Vec<Peer>,
    proto: Proto,
    side: Vec<UserBuf>,
    /// `eager_limit` bytes per protocol entry, for unexpected eager payloads.
    slots: Vec<u8>,
    /// Slots holding a stored payload its sender did not finish writing (it
    /// died or stopped in the middle): the receive that matches one fails.
    torn_slots: Vec<usize>,
    pending_pulls: Vec<PendingPull>,
    limits: Limits,
    eager_limit: usize,
    /// Largest eager payload that fits in one line with its header.
    line_max: usize,
    debug: bool,
    trace: bool,
    board: Option<WaitBoard>,
    /// Rendezvous receives whose payload was pulled single-copy
    /// (cross-memory attach, RDMA READ), and those streamed by the sender.
    pub(crate) pulled: u64,
    pub(crate) streamed: u64,
    /// Fruitless polls of the blocking receive's shortcut before it found
    /// its message, counted under the engine's lock it holds then (a
    /// plain add, not an atomic one, on the way out of every such
    /// receive); the other polls are counted beside the engine.
    pub(crate) idle_polls: u64,
    /// The flight recorder.
    pub(crate) rec: recorder::Recorder,
    /// Heartbeats, revoked contexts, detached sends.
    ft: ft::Faults,
    /// This rank's wait record and those of peers on other hosts.
    waits: waits::Waits,
}

impl Drop for Engine {
    /// Sends the answers still queued (FIN, ACK, credit returns) to peers
    /// that are still there, for at most a second: a peer may be waiting
    /// on one of them to finish an operation this rank already completed.
    fn drop(&mut self) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            let mut owed = false;
            for p in 0..self.peers.len() {
                if p == self.rank || self.peers[p].broken.is_some() {
                    continue;
                }
                self.progress_tx(p);
                let answer = self.proto.next_tx(p as u32).is_some_and(|t| {
                    matches!(t.what, TxWhat::Control | TxWhat::Cts(_))
                        && t.header.kind() != Kind::Credit
                });
                if answer && matches!(self.peers[p].link.liveness(), Liveness::Alive) {
                    owed = true;
                }
            }
            if !owed || std::time::Instant::now() >= end {
                return;
            }
            self.progress();
            std::thread::yield_now();
        }
    }
}

/// Largest message tandem accepts (1 TiB): a corrupt length field can never
/// make a receiver wait for (or allocate) more.
pub const MAX_MESSAGE: usize = 1 << 40;

/// Number of communication contexts a job may use.
pub const MAX_CONTEXTS: u16 = 8192;

impl Engine {
    /// An engine for `rank` whose peer `p` is reached through `links[p]`
    /// (the rank itself included).
    pub(crate) fn new(
        rank: usize,
        links: Vec<Link>,
        protocol: Protocol,
        cfg: &Config,
        board: Option<WaitBoard>,
    ) -> Result<Self> {
        let n = links.len();
        let q = cfg.max_requests.clamp(1, proto::MAX_OPS);
        let credits = protocol.credits as usize;
        let envelopes = protocol.envelopes as usize;
        let peers = links
            .into_iter()
            .map(|mut link| {
                link.watch(cfg.failure_timeout);
                link
            })
            .map(|link| Peer {
                link,
                tx_streams: VecDeque::with_capacity(q),
                rx_streams: VecDeque::with_capacity(q),
                broken: None,
            })
            .collect();
        let params = Params {
            rank: rank as u32,
            nranks: n as u32,
            credits: credits as u16,
            envelopes: envelopes as u16,
            credit_threshold: (credits as u16).div_ceil(2),
            eager_limit: protocol.eager_limit as u64,
            seq_start: 0,
        };
        let proto = Proto::new(
            params,
            vec![Op::EMPTY; q].into_boxed_slice(),
            vec![Entry::EMPTY; n * envelopes].into_boxed_slice(),
            vec![proto::Peer::EMPTY; n].into_boxed_slice(),
            vec![0u32; n * credits].into_boxed_slice(),
        )
        // The parameters come from the layout the caller chose (credits
        // against envelopes): a refusal is a setting to change.
        .map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self {
            rank,
            peers,
            proto,
            side: vec![UserBuf::EMPTY; q],
            slots: vec![0u8; n * credits * protocol.eager_limit as usize],
            torn_slots: Vec::new(),
            pending_pulls: Vec::with_capacity(q),
            limits: Limits {
                eager_max: protocol.eager_limit as u64,
                msg_max: MAX_MESSAGE as u64,
                contexts: MAX_CONTEXTS,
            },
            eager_limit: protocol.eager_limit as usize,
            line_max: (protocol.eager_limit as usize).min(SHORT_BODY),
            debug: debug_level() >= DebugLevel::Info,
            trace: debug_level() >= DebugLevel::Trace,
            board,
            pulled: 0,
            streamed: 0,
            idle_polls: 0,
            rec: recorder::Recorder::new(cfg.recorder),
            ft: ft::Faults::new(cfg.failure_timeout),
            waits: waits::Waits::new(n),
        })
    }

    fn check_rank(&self, r: usize) -> Result<()> {
        if r >= self.peers.len() {
            return Err(Error::InvalidRank {
                rank: r,
                size: self.peers.len(),
            });
        }
        Ok(())
    }

    fn proto_err(&self, e: proto::ProtoError) -> Error {
        match e {
            proto::ProtoError::InvalidRank { rank, size } => Error::InvalidRank {
                rank: rank as usize,
                size: size as usize,
            },
            proto::ProtoError::TooManyOps { capacity } => Error::TooManyRequests { capacity },
            proto::ProtoError::PeerLost { peer } => self.lost(peer as usize),
            proto::ProtoError::InvalidTag(tag) => Error::InvalidTag { tag },
            // What a peer's header broke: that peer's protocol error.
            proto::ProtoError::CreditOverrun { peer }
            | proto::ProtoError::BadCredit { peer }
            | proto::ProtoError::BadToken { peer, .. }
            | proto::ProtoError::BadSeq { peer, .. } => Error::Protocol {
                peer: peer as usize,
                detail: e.to_string(),
            },
            proto::ProtoError::Setup(_) => Error::Internal(e.to_string()),
        }
    }

    /// The error operations with a failed peer report.
    pub(crate) fn lost(&self, p: usize) -> Error {
        self.peers
            .get(p)
            .and_then(|c| c.broken.clone())
            .unwrap_or(Error::PeerLost { rank: p })
    }

    /// Which transport carries traffic with rank `p`.
    pub(crate) fn route(&self, p: usize) -> Option<LinkKind> {
        self.peers.get(p).map(|c| c.link.kind())
    }

    /// How rank `p` is reached.
    pub(crate) fn route_of(&self, p: usize) -> Option<crate::transport::Route> {
        self.peers.get(p).map(|c| c.link.route())
    }

    /// Posts a send of `buf` (synchronous if `sync`).
    pub(crate) fn post_send(
        &mut self,
        buf: &[u8],
        dst: usize,
        ctx: u16,
        tag: u32,
        sync: bool,
        scope: u32,
    ) -> Result<OpId> {
        self.check_rank(dst)?;
        self.ft.gate(ctx)?;
        if buf.len() > MAX_MESSAGE {
            return Err(Error::MessageTooLarge {
                len: buf.len(),
                max: MAX_MESSAGE,
            });
        }
        if let Some(e) = &self.peers[dst].broken {
            return Err(e.clone());
        }
        let h = self
            .proto
            .post_send(dst as u32, ctx, tag, buf.len() as u64, sync)
            .map_err(|e| self.proto_err(e))?;
        self.side[h.index()] = UserBuf::send(buf, scope);
        let w = word(sync as u8, ctx, tag);
        self.rec.add(Code::PostSend, w, 0, dst, buf.len() as u64);
        self.progress_tx(dst);
        Ok(h)
    }

    /// Posts a receive into `buf` from `src` ([`ANY_SOURCE`] for any) with
    /// `tag` ([`ANY_TAG`] for any).
    pub(crate) fn post_recv(
        &mut self,
        buf: &mut [u8],
        src: u32,
        ctx: u16,
        tag: u32,
        scope: u32,
    ) -> Result<OpId> {
        if src != ANY_SOURCE {
            self.check_rank(src as usize)?;
        }
        self.ft.gate(ctx)?;
        let (h, copy) = self
            .proto
            .post_recv(src, ctx, tag, buf.len() as u64)
            .map_err(|e| self.proto_err(e))?;
        self.side[h.index()] = UserBuf::recv(buf, scope);
        let w = word(0, ctx, tag);
        self.rec
            .add(Code::PostRecv, w, 0, src as usize, buf.len() as u64);
        if let Some(c) = copy {
            let n = c.len as usize;
            let at = c.slot * self.eager_limit;
            buf[..n].copy_from_slice(&self.slots[at..at + n]);
            self.side[h.index()].moved = n;
            self.side[h.index()].torn = take_torn(&mut self.torn_slots, c.slot);
        }
        self.pulls();
        Ok(h)
    }

    /// Blocking-send fast path: an eager message goes straight to the
    /// transport when nothing is queued ahead of it for `dst`, credits
    /// allow and the link has room; no operation is recorded. `false`: take
    /// the general path.
    #[inline(always)]
    pub(crate) fn try_send_now(&mut self, buf: &[u8], dst: usize, ctx: u16, tag: u32) -> bool {
        // Both worked out ahead of the checks: 3 instructions fewer per
        // send + receive than where they are used (callgrind).
        let line = buf.len() <= self.line_max;
        let word = Header::short_word(ctx, tag);
        if self.ft.revoked_any && self.ft.is_revoked(ctx) {
            return false;
        }
        let Some(ch) = self.peers.get_mut(dst) else {
            return false;
        };
        if let Link::Shm(l) = &mut ch.link {
            if line {
                // Header and payload in one line, assembled in registers.
                if ch.broken.is_some() {
                    return false;
                }
                let Some(slot) = l.reserve_line() else {
                    return false;
                };
                let Some(h) = self.proto.eager_now(dst as u32, ctx, tag, buf.len() as u64) else {
                    return false;
                };
                // The short header: 40 payload bytes fit in the line.
                let w1 = Header::short_second(h.seq, h.credit, h.ecredit, buf.len() as u16);
                let [b0, b1, b2, b3, b4] = small_words(buf);
                slot.write_words(&[word, w1, b0, b1, b2, b3, b4]);
                self.rec.wire(Code::Sent, word, w1, dst, buf.len() as u64);
                return true;
            }
        }
        self.try_send_general(buf, dst, ctx, tag)
    }

    /// [`try_send_now`](Self::try_send_now) for anything but a one-line
    /// eager message over shared memory.
    #[cold]
    #[inline(never)]
    fn try_send_general(&mut self, buf: &[u8], dst: usize, ctx: u16, tag: u32) -> bool {
        let ch = &mut self.peers[dst];
        if buf.len() > self.eager_limit
            || ch.broken.is_some()
            || !ch.link.room(HEADER_LEN + buf.len())
        {
            return false;
        }
        let Some(h) = self.proto.eager_now(dst as u32, ctx, tag, buf.len() as u64) else {
            return false;
        };
        let wrote = ch.link.try_send(&h.encode(), buf);
        debug_assert!(wrote, "room was checked");
        let [h0, h1, ..] = h.words();
        self.rec.wire(Code::Sent, h0, h1, dst, h.len);
        true
    }

    /// Blocking-receive fast path: when no receive is posted and nothing
    /// buffered matches, an in-order eager message from `src` with `tag` at
    /// the head of its link is copied straight into `buf`; no operation is
    /// recorded.
    #[inline(always)]
    pub(crate) fn try_recv_now(&mut self, buf: &mut [u8], src: usize, ctx: u16, tag: u32) -> Fast {
        match self.try_recv_line(buf, src, ctx, tag) {
            Some(f) => f,
            None => self.try_recv_eager_or_general(buf, src, ctx, tag),
        }
    }

    /// [`try_recv_now`](Self::try_recv_now)'s first part, inlined: a
    /// one-line eager message over shared memory, or the answers that need
    /// no look at the link. `None`: something else is at the head of the
    /// link, for `try_recv_now`'s general path. Its [`Fast::Done`] comes
    /// from this code alone, so a caller keeps the status in registers.
    #[inline(always)]
    pub(crate) fn try_recv_line(
        &mut self,
        buf: &mut [u8],
        src: usize,
        ctx: u16,
        tag: u32,
    ) -> Option<Fast> {
        let word = Header::short_word(ctx, tag);
        // A wildcard tag compares the low half only (magic, kind, context):
        // one masked compare below, no second branch.
        let mask = if tag == ANY_TAG {
            u32::MAX as u64
        } else {
            u64::MAX
        };
        if self.ft.revoked_any && self.ft.is_revoked(ctx) {
            return Some(Fast::Fallback);
        }
        let Some(ch) = self.peers.get_mut(src) else {
            return Some(Fast::Fallback);
        };
        if ch.broken.is_some() {
            return Some(Fast::Fallback);
        }
        if let Link::Shm(l) = &mut ch.link {
            // The common case, read in place from the line: a one-line
            // eager message of this context and tag. Anything else (or a
            // header that fails these few compares) takes the path below,
            // which validates in full.
            let Some(line) = l.peek_line_ref() else {
                return Some(self.nothing_on_line());
            };
            // A one-line eager message has the short header (wire.rs).
            let (w0, w1) = (ld8(line, 0), ld8(line, 8));
            let head_ok = (w0 ^ word) & mask == 0;
            let len = w1 >> 48;
            let took = if !head_ok || len > self.line_max as u64 {
                None
            } else {
                let (seq, credit, ecredit) = (w1 as u16, (w1 >> 16) as u16, (w1 >> 32) as u16);
                self.proto
                    .eager_recv_matched(src as u32, ctx, tag, seq, credit, ecredit)
                    .ok()
                    .flatten()
            };
            if let Some(owed) = took {
                self.rec.wire(Code::Arrived, w0, w1, src, len);
                let len = len as usize;
                let n = len.min(buf.len());
                small_copy(&mut buf[..n], &line[SHORT_LEN..SHORT_LEN + n]);
                let mtag = (w0 >> 32) as u32;
                l.consume_line();
                if owed {
                    self.return_credit(src);
                }
                return Some(Fast::Done(Status {
                    source: src,
                    tag: mtag,
                    len,
                }));
            }
        }
        None
    }

    /// [`try_recv_line`](Self::try_recv_line) for an eager message of this
    /// context and tag that takes more than one line (several lines, or
    /// its header alone and a cell): once it can be read, it is matched
    /// and copied straight from the lines or the cell into `buf`, without
    /// the general path's copy of the header line and full decode. `None`:
    /// not there yet, or anything unusual: the general path.
    #[inline(always)]
    pub(crate) fn try_recv_eager(
        &mut self,
        buf: &mut [u8],
        src: usize,
        ctx: u16,
        tag: u32,
    ) -> Option<Fast> {
        // A revoked context or a broken link: the general path, which
        // fails the receive as it should (this shortcut is also called
        // on its own, from a blocking receive's cold path).
        if self.ft.revoked_any && self.ft.is_revoked(ctx) {
            return None;
        }
        let ch = &mut self.peers[src];
        let Link::Shm(l) = &mut ch.link else {
            return None;
        };
        if ch.broken.is_some() {
            return None;
        }
        let line = l.peek_line_ref()?;
        let (w0, w1, len, w3) = (ld8(line, 0), ld8(line, 8), ld8(line, 16), ld8(line, 24));
        let word = Header::eager_word(ctx, tag);
        let head_ok = w0 == word || (tag == ANY_TAG && w0 as u32 == word as u32);
        if !head_ok
            || w3 >> 16 != 0
            || len <= self.line_max as u64
            || len > self.eager_limit as u64
            || !l.eager_ready(len as usize)
        {
            return None;
        }
        let (seq, credit) = (w1 as u16, (w1 >> 16) as u16);
        let owed = self
            .proto
            .eager_recv_matched(src as u32, ctx, tag, seq, credit, w3 as u16)
            .ok()
            .flatten()?;
        let len = len as usize;
        let n = len.min(buf.len());
        if !l.read_eager(len, &mut buf[..n]) {
            // Its sender died or stopped in the middle of a cell: the
            // message is lost to this receive, never delivered torn.
            self.tear(src);
            return Some(Fast::Failed);
        }
        self.rec.wire(Code::Arrived, w0, w1, src, len as u64);
        if owed {
            self.return_credit(src);
        }
        Some(Fast::Done(Status {
            source: src,
            tag: (w0 >> 32) as u32,
            len,
        }))
    }

    /// [`try_recv_now`](Self::try_recv_now) past its one-line case: a
    /// message of several lines, or anything else on the general path. Out
    /// of line, so that the one-line case keeps its registers.
    #[inline(never)]
    pub(crate) fn try_recv_eager_or_general(
        &mut self,
        buf: &mut [u8],
        src: usize,
        ctx: u16,
        tag: u32,
    ) -> Fast {
        match self.try_recv_eager(buf, src, ctx, tag) {
            Some(f) => f,
            None => self.try_recv_general(buf, src, ctx, tag),
        }
    }

    /// What a receive shortcut that finds its link empty answers: keep
    /// polling, unless progress already took a message off the link (an
    /// RTS, or an eager message no receive was posted for). The awaited
    /// message may be that one, and only the general path, which matches
    /// stored messages, finds it; the link stays empty, so polling on would
    /// spin out the whole wait policy first.
    #[inline(always)]
    fn nothing_on_line(&self) -> Fast {
        if self.proto.has_unexpected() {
            Fast::Fallback
        } else {
            Fast::NotYet
        }
    }

    /// Sends the credit return a receive shortcut made due.
    #[cold]
    #[inline(never)]
    fn return_credit(&mut self, src: usize) {
        self.progress_tx(src);
    }

    /// [`try_recv_now`](Self::try_recv_now) for anything but a one-line
    /// eager message over shared memory.
    #[cold]
    #[inline(never)]
    fn try_recv_general(&mut self, buf: &mut [u8], src: usize, ctx: u16, tag: u32) -> Fast {
        let ch = &mut self.peers[src];
        let mut line = [0u8; PEEK_LEN];
        match ch.link.peek(&mut line) {
            Peek::Header => {}
            Peek::Nothing => return self.nothing_on_line(),
            Peek::StreamData => return Fast::Fallback,
        }
        // The common case in a few compares: an eager header of this
        // context and tag. Anything else gets the full validation.
        let word = Header::eager_word(ctx, tag);
        let h = match Header::decode_eager(&line, word, self.limits.eager_max) {
            Some(h) => h,
            None => match Header::decode(&line[..HEADER_LEN], &self.limits) {
                Ok(h) if h.kind() == Kind::Eager => h,
                _ => return Fast::Fallback,
            },
        };
        let len = h.len as usize;
        if !ch.link.body_ready(len) {
            return Fast::NotYet;
        }
        match self.proto.eager_recv_now(src as u32, ctx, tag, &h) {
            Ok(true) => {}
            // The general path reports a protocol error properly.
            Ok(false) | Err(_) => return Fast::Fallback,
        }
        let n = len.min(buf.len());
        if !ch.link.consume(&line, len, &mut buf[..n]) {
            self.tear(src);
            return Fast::Failed;
        }
        self.rec
            .wire(Code::Arrived, ld8(&line, 0), ld8(&line, 8), src, len as u64);
        if self.proto.credit_owed(src as u32) {
            // A credit return is due (a receiver that never answers).
            self.progress_tx(src);
        }
        Fast::Done(Status {
            source: src,
            tag: h.tag,
            len,
        })
    }

    /// The first message that arrived and matches, without receiving it.
    pub(crate) fn probe(&mut self, src: u32, ctx: u16, tag: u32) -> Option<Status> {
        self.progress();
        self.proto.probe(src, ctx, tag).map(|s| Status {
            source: s.source as usize,
            tag: s.tag,
            len: s.len as usize,
        })
    }

    /// Up to `max` messages from `src` (or any) in `ctx` that arrived and
    /// match no receive, oldest first, and how many there are in all.
    pub(crate) fn unmatched(&self, src: u32, ctx: u16, max: usize) -> (Vec<Status>, usize) {
        let z = proto::Status {
            source: 0,
            tag: 0,
            len: 0,
        };
        let mut out = vec![z; max];
        let n = self.proto.unmatched(src, ctx, &mut out);
        out.truncate(n.min(max));
        let v = out
            .iter()
            .map(|s| Status {
                source: s.source as usize,
                tag: s.tag,
                len: s.len as usize,
            })
            .collect();
        (v, n)
    }

    /// Whether rank `p` is known gone (for waits that hold no operation).
    pub(crate) fn is_dead(&mut self, p: usize) -> bool {
        p != self.rank
            && p < self.peers.len()
            && (self.peers[p].broken.is_some()
                || matches!(self.peers[p].link.liveness(), Liveness::Lost(_)))
    }

    /// One pass over every peer; `true` if anything moved.
    pub(crate) fn progress(&mut self) -> bool {
        let mut did = false;
        for p in 0..self.peers.len() {
            did |= self.progress_rx(p);
            did |= self.progress_tx(p);
        }
        did
    }

    fn progress_tx(&mut self, p: usize) -> bool {
        let mut did = false;
        let ch = &mut self.peers[p];
        if ch.broken.is_some() {
            return false;
        }
        while let Some(tx) = self.proto.next_tx(p as u32) {
            let mut hb = tx.header.encode();
            // What a CTS asks for: its header's length, or nothing when
            // its receive was withdrawn before the CTS could go out.
            let mut cts_len = tx.header.len as usize;
            let ok = match tx.what {
                TxWhat::Payload(h) => {
                    let s = &mut self.side[h.index()];
                    // SAFETY: a queued send is pending (see module docs).
                    let payload = unsafe { s.src() };
                    s.moved = payload.len();
                    ch.link.try_send(&hb, payload)
                }
                TxWhat::Rts(h) | TxWhat::Cts(h) => {
                    let cts = matches!(tx.what, TxWhat::Cts(_));
                    if !ch.link.room(HEADER_LEN + DESC_LEN) {
                        break;
                    }
                    let s = &mut self.side[h.index()];
                    if cts && s.is_gone() {
                        // The receive was withdrawn while its CTS waited
                        // for room: ask for nothing and describe nothing,
                        // so the sender finishes with an empty stream and
                        // no link sees a description shorter than its
                        // header (RDMA would call that a protocol error).
                        cts_len = 0;
                        let mut h0 = tx.header;
                        h0.len = 0;
                        hb = h0.encode();
                        ch.link.try_send(&hb, &MemDesc::NONE.encode())
                    } else {
                        // SAFETY: a send announced by RTS, or a receive answered
                        // by CTS, is pending.
                        let buf = unsafe { s.src() };
                        let len = match cts {
                            true => (tx.header.len as usize).min(buf.len()),
                            false => buf.len(),
                        };
                        let desc = ch.link.describe(&buf[..len], cts);
                        s.regs += 1;
                        s.reg_peer = p as u32;
                        s.reg_len = len;
                        s.reg_writable = cts;
                        ch.link.try_send(&hb, &desc.encode())
                    }
                }
                TxWhat::Control => ch.link.try_send(&hb, &[]),
            };
            if !ok {
                break;
            }
            self.rec
                .wire(Code::Sent, ld8(&hb, 0), ld8(&hb, 8), p, ld8(&hb, 16));
            if let TxWhat::Cts(h) = tx.what {
                ch.rx_streams.push_back(Stream {
                    op: Some(h),
                    discard: cts_len == 0 && self.side[h.index()].is_gone(),
                    len: cts_len,
                    done: 0,
                    remote: MemDesc::NONE,
                });
            }
            self.proto.tx_done(p as u32, &tx);
            did = true;
        }
        let did = did | self.stream_out(p);
        self.peers[p].link.flush();
        did
    }

    /// Pushes the front send streams' payload into the link.
    fn stream_out(&mut self, p: usize) -> bool {
        let ch = &mut self.peers[p];
        let mut did = false;
        while let Some(st) = ch.tx_streams.front_mut() {
            let h = st.op.expect("send streams always have their op");
            let side = &mut self.side[h.index()];
            // SAFETY: a streaming send is pending (see module docs).
            let payload = unsafe { side.src() };
            if st.done < st.len {
                let n = ch
                    .link
                    .stream_out(&st.remote, st.done, &payload[st.done..st.len]);
                st.done += n;
                side.moved = st.done;
                did |= n > 0;
                if st.done < st.len {
                    return did;
                }
            }
            ch.tx_streams.pop_front();
            self.proto.stream_done(h);
            did = true;
        }
        did
    }

    /// Moves payload of the front receive streams out of the link.
    fn stream_in(&mut self, p: usize) -> bool {
        let ch = &mut self.peers[p];
        let mut did = false;
        while let Some(st) = ch.rx_streams.front_mut() {
            if st.done < st.len {
                let left = st.len - st.done;
                let n = match st.op {
                    Some(h) if !st.discard => {
                        let side = &mut self.side[h.index()];
                        // SAFETY: a streaming receive is pending.
                        let dst = unsafe { side.dst() };
                        let n = match dst.get_mut(st.done..st.len) {
                            Some(d) => ch.link.stream_in(left, Some(d)),
                            // Its buffer is shorter than the stream the CTS
                            // announced: impossible unless the op changed
                            // under us; drop rather than write past it.
                            None => ch.link.stream_in(left, None),
                        };
                        side.moved = st.done + n;
                        n
                    }
                    _ => ch.link.stream_in(left, None),
                };
                st.done += n;
                did |= n > 0;
                if st.done < st.len {
                    return did;
                }
            }
            let st = ch.rx_streams.pop_front().expect("front exists");
            if let Some(h) = st.op {
                self.proto.stream_done(h);
            }
            did = true;
        }
        did
    }

    fn progress_rx(&mut self, p: usize) -> bool {
        let mut did = false;
        loop {
            let mut round = self.stream_in(p);
            loop {
                let ch = &mut self.peers[p];
                if ch.broken.is_some() {
                    return did | round;
                }
                let mut first = [0u8; PEEK_LEN];
                match ch.link.peek(&mut first) {
                    Peek::Header => {}
                    Peek::Nothing => break,
                    Peek::StreamData if !ch.rx_streams.is_empty() => break,
                    Peek::StreamData => {
                        return self.protocol_error(p, "stream data nobody asked for");
                    }
                }
                let h = match Header::decode(&first[..HEADER_LEN], &self.limits) {
                    Ok(h) => h,
                    Err(e) => return self.protocol_error(p, e),
                };
                let kind = h.kind();
                let body = match kind {
                    Kind::Eager | Kind::EagerSync => h.len as usize,
                    Kind::Rts | Kind::RtsEager | Kind::Cts => DESC_LEN,
                    _ => 0,
                };
                if !ch.link.body_ready(body) {
                    break;
                }
                self.rec
                    .wire(Code::Arrived, ld8(&first, 0), ld8(&first, 8), p, h.len);
                let desc =
                    if body == DESC_LEN && matches!(kind, Kind::Rts | Kind::RtsEager | Kind::Cts) {
                        let mut d = [0u8; DESC_LEN];
                        d.copy_from_slice(&first[HEADER_LEN..]);
                        MemDesc::decode(&d)
                    } else {
                        MemDesc::NONE
                    };
                let (side, slots, el) = (&mut self.side, &self.slots, self.eager_limit);
                let torn = &mut self.torn_slots;
                let act = self
                    .proto
                    .on_message(p as u32, &h, desc, &mut |c: proto::SlotCopy| {
                        let s = &mut side[c.op.index()];
                        // SAFETY: the receive just completed and was pending.
                        let dst = unsafe { s.dst() };
                        let n = c.len as usize;
                        dst[..n].copy_from_slice(&slots[c.slot * el..c.slot * el + n]);
                        s.moved = n;
                        s.torn = take_torn(torn, c.slot);
                    });
                let act = match act {
                    Ok(a) => a,
                    Err(e) => return self.protocol_error(p, e),
                };
                let ch = &mut self.peers[p];
                let whole = match act {
                    Action::Deliver { op, len } => {
                        let s = &mut self.side[op.index()];
                        // SAFETY: the receive was pending until this message.
                        let dst = unsafe { &mut s.dst()[..len as usize] };
                        s.moved = len as usize;
                        let whole = ch.link.consume(&first, body, dst);
                        s.torn = !whole;
                        whole
                    }
                    Action::Store { slot } => {
                        let at = slot * self.eager_limit;
                        let dst = &mut self.slots[at..at + body];
                        let whole = ch.link.consume(&first, body, dst);
                        if !whole {
                            self.torn_slots.push(slot);
                        }
                        whole
                    }
                    Action::None => ch.link.consume(&first, body, &mut []),
                    Action::Stream { op, len, .. } => {
                        ch.tx_streams.push_back(Stream {
                            op: Some(op),
                            discard: false,
                            len: len as usize,
                            done: 0,
                            remote: desc,
                        });
                        ch.link.consume(&first, body, &mut [])
                    }
                };
                if !whole {
                    return self.tear(p);
                }
                round = true;
            }
            if !round {
                break;
            }
            did = true;
        }
        did |= self.pulls();
        if did {
            // Answers (CTS, FIN, ACK, credit) may be due.
            self.progress_tx(p);
        }
        did
    }

    /// Serves matched rendezvous receives: pull the payload across (cross-
    /// memory attach, RDMA READ), or ask the sender to stream it.
    fn pulls(&mut self) -> bool {
        let mut did = self.poll_pulls();
        while let Some(pl) = self.proto.next_pull() {
            did = true;
            let p = pl.peer as usize;
            let n = pl.len as usize;
            let side = &mut self.side[pl.op.index()];
            // SAFETY: the receive is pending; we are its only writer.
            let dst = unsafe { &mut side.dst()[..n] };
            let dst_addr = dst.as_ptr() as u64;
            let start = match &self.peers[p].broken {
                Some(_) => PullStart::Unsupported,
                None => self.peers[p].link.start_pull(pl.desc, dst),
            };
            if self.trace {
                eprintln!(
                    "tandem[{}]: rendezvous {n} bytes from rank {p} over {}: {}",
                    self.rank,
                    self.peers[p].link.kind(),
                    match start {
                        PullStart::Done => "single copy (pulled)",
                        PullStart::Pending => "pull started",
                        PullStart::Unsupported => "streamed",
                    }
                );
            }
            match start {
                PullStart::Done => {
                    self.side[pl.op.index()].moved = n;
                    self.pulled += 1;
                    self.rec.add(Code::Pulled, 0, 0, p, n as u64);
                    self.proto.pull_done(pl.op, true);
                }
                PullStart::Pending => {
                    let s = &mut self.side[pl.op.index()];
                    s.regs += 1;
                    s.reg_peer = p as u32;
                    s.reg_len = n;
                    s.reg_writable = true;
                    self.pending_pulls.push(PendingPull {
                        op: pl.op,
                        peer: p,
                        dst: dst_addr,
                        len: n,
                    })
                }
                PullStart::Unsupported => {
                    self.streamed += 1;
                    self.rec.add(Code::Streamed, 0, 0, p, n as u64);
                    self.proto.pull_done(pl.op, false)
                }
            }
            self.progress_tx(p);
        }
        did
    }

    /// Completes pulls the transports report done, and sends the answers
    /// (FIN) they owe.
    fn poll_pulls(&mut self) -> bool {
        if self.pending_pulls.is_empty() {
            return false;
        }
        let mut did = false;
        for p in 0..self.peers.len() {
            let before = did;
            let (peers, pending, side, proto) = (
                &mut self.peers,
                &mut self.pending_pulls,
                &mut self.side,
                &mut self.proto,
            );
            let (pulled, streamed) = (&mut self.pulled, &mut self.streamed);
            peers[p].link.poll_pulls(&mut |dst, ok| {
                if let Some(i) = pending.iter().position(|q| q.dst == dst) {
                    let q = pending.swap_remove(i);
                    if ok {
                        side[q.op.index()].moved = q.len;
                        *pulled += 1;
                    } else {
                        *streamed += 1;
                    }
                    // A failed pull falls back to a stream.
                    proto.pull_done(q.op, ok);
                    did = true;
                }
            });
            if did && !before {
                self.progress_tx(p);
            }
        }
        did
    }

    /// Peer `p` broke the protocol: its link is unusable from now on.
    /// Returns `true` (something happened) for the progress loop.
    /// A message from `p` could not be read whole (its sender died or
    /// stopped in the middle of writing it, or the frame contradicts its
    /// header): the link fails with the reason its transport gives.
    #[cold]
    #[inline(never)]
    fn tear(&mut self, p: usize) -> bool {
        let e = match self.peers[p].link.liveness() {
            Liveness::Lost(e) => e,
            Liveness::Alive => Error::PeerLost { rank: p },
        };
        self.break_channel(p, e);
        true
    }

    fn protocol_error(&mut self, p: usize, e: impl std::fmt::Display) -> bool {
        let detail = e.to_string();
        self.break_channel(p, Error::Protocol { peer: p, detail });
        true
    }

    /// Fails every pending operation with peer `p` and marks the link
    /// broken. Eager messages already received stay receivable.
    fn break_channel(&mut self, p: usize, e: Error) {
        if self.debug {
            eprintln!("tandem[{}]: link from/to rank {p} fails: {e}", self.rank);
        }
        self.rec.add(Code::LinkFailed, 0, 0, p, 0);
        let ch = &mut self.peers[p];
        if ch.broken.is_none() {
            ch.broken = Some(e);
        }
        ch.tx_streams.clear();
        for s in ch.rx_streams.iter_mut() {
            s.op = None;
        }
        // Pulls from a broken peer never complete; their receives fail with
        // the peer below.
        self.pending_pulls.retain(|q| q.peer != p);
        self.proto.fail_peer(p as u32);
    }

    /// Checks the peers while operations are pending; a lost peer's link
    /// is drained of what it sent before going, then every operation still
    /// waiting on it fails with the transport's error
    /// ([`Error::PeerLost`], or why its connection failed).
    pub(crate) fn check_peers(&mut self) {
        self.keep_alive();
        if self.proto.in_use() == 0 {
            return;
        }
        self.check_links();
    }

    /// Breaks the channel of every peer whose link says it is gone, after
    /// taking what it sent before going.
    fn check_links(&mut self) {
        for p in 0..self.peers.len() {
            if p == self.rank || self.peers[p].broken.is_some() {
                continue;
            }
            if let Liveness::Lost(e) = self.peers[p].link.liveness() {
                // What the peer took before going completes first: its
                // arrivals, and streams whose last bytes it acknowledged.
                self.progress_rx(p);
                self.progress_tx(p);
                self.break_channel(p, e);
            }
        }
    }

    /// The result of a finished operation, freeing its slot; `None` while
    /// it is pending. A stale id yields an error.
    pub(crate) fn take(&mut self, id: OpId) -> Option<Result<Status>> {
        match self.proto.take(id) {
            Taken::Pending if self.ft.revoked_any => self.take_revoked(id),
            Taken::Pending => None,
            Taken::Done(r) => {
                // A receive that matched a message torn in the middle.
                let r = match r {
                    Ok(s) if self.side[id.index()].torn => {
                        Err(OpError::PeerLost { peer: s.source })
                    }
                    r => r,
                };
                self.unregister(id);
                self.side[id.index()] = UserBuf::EMPTY;
                match &r {
                    Ok(s) => {
                        let w = word(0, 0, s.tag);
                        self.rec.add(Code::Done, w, 0, s.source as usize, s.len)
                    }
                    Err(_) => self.rec.add(Code::Failed, 0, 0, 0, 0),
                }
                Some(match r {
                    Ok(s) => Ok(Status {
                        source: s.source as usize,
                        tag: s.tag,
                        len: s.len as usize,
                    }),
                    Err(OpError::Truncated { status, got }) => Err(Error::Truncated {
                        needed: status.len as usize,
                        got: got as usize,
                        source: status.source as usize,
                        tag: status.tag,
                    }),
                    Err(OpError::Cancelled) => Err(Error::Cancelled),
                    Err(OpError::PeerLost { peer }) => Err(self.lost(peer as usize)),
                    Err(OpError::Stale) => {
                        Err(Error::InvalidArgument("request already completed".into()))
                    }
                })
            }
        }
    }

    /// A withdrawn receive whose buffer the peer's hardware may still be
    /// writing (an RDMA stream or READ into it under way) is driven until
    /// that ends, at most 5 s: then its buffer can go without the peer's
    /// writes failing (which would break the channel) and the operation
    /// finishes, freeing its slot. Other transports drain later instead.
    fn settle(&mut self, id: OpId) {
        let s = &self.side[id.index()];
        let p = s.reg_peer as usize;
        if s.regs == 0 || !self.peers.get(p).is_some_and(|c| c.link.places_directly()) {
            return;
        }
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let streaming = self.peers[p].rx_streams.iter().any(|s| s.op == Some(id));
            let pulling = self.pending_pulls.iter().any(|q| q.op == id);
            if (!streaming && !pulling) || std::time::Instant::now() >= end {
                return;
            }
            if !self.progress() {
                self.check_peers();
                std::thread::yield_now();
            }
        }
    }

    /// Gives back the transport registrations of an operation's buffer:
    /// from here on no peer can reach it.
    fn unregister(&mut self, id: OpId) {
        let s = &mut self.side[id.index()];
        let (n, p, addr) = (s.regs, s.reg_peer as usize, s.addr());
        let (len, w) = (s.reg_len, s.reg_writable);
        s.regs = 0;
        if let Some(peer) = self.peers.get_mut(p) {
            for _ in 0..n {
                peer.link.release(addr, len, w);
            }
        }
    }

    /// Registers `buf` with every peer's transport for as long as the user
    /// holds it ([`crate::Comm::register`]); on failure nothing stays
    /// registered.
    pub(crate) fn pin(&mut self, buf: &mut [u8]) -> Result<()> {
        for p in 0..self.peers.len() {
            if let Err(e) = self.peers[p].link.pin(buf) {
                self.unpin(buf.as_ptr() as u64, p);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Ends a [`pin`](Self::pin) with the first `upto` peers (all: the
    /// number of peers, or more).
    pub(crate) fn unpin(&mut self, addr: u64, upto: usize) {
        for peer in self.peers.iter_mut().take(upto) {
            peer.link.unpin(addr);
        }
    }

    /// Bytes an operation has moved (to detect stalls).
    pub(crate) fn moved(&self, id: OpId) -> usize {
        self.side[id.index()].moved
    }

    /// A count that changes whenever any operation of this rank moves
    /// bytes or a slot is reused (the sum of every slot's progress, with
    /// the rendezvous receives finished): unchanged, nothing happened.
    pub(crate) fn activity(&self) -> usize {
        self.side
            .iter()
            .fold(0usize, |a, s| a.wrapping_add(s.moved))
            .wrapping_add((self.pulled + self.streamed) as usize)
    }

    /// What an operation is, for error reports.
    pub(crate) fn info(&self, id: OpId) -> Option<OpInfo> {
        self.proto.info(id)
    }

    /// Cancels a receive that has not matched; `false` if too late.
    pub(crate) fn cancel_recv(&mut self, id: OpId) -> bool {
        self.proto
            .info(id)
            .is_some_and(|i| !i.send && self.proto.cancel(id))
    }

    /// Withdraws a pending operation so its buffer is never touched again.
    /// A receive in the middle of a stream leaves the rest to be drained; a
    /// rendezvous send the receiver may already be reading or expecting a
    /// stream from breaks the channel (the receiver would otherwise get a
    /// corrupt message).
    pub(crate) fn withdraw(&mut self, id: OpId, why: &Error) {
        let Some(info) = self.proto.info(id) else {
            return;
        };
        let p = info.peer as usize;
        match (info.send, info.phase) {
            (true, Phase::WaitReceiver | Phase::Streaming) => {
                let reason = format!("a rendezvous send was abandoned: {why}");
                self.break_channel(p, Error::ChannelBroken { peer: p, reason });
            }
            (false, Phase::Streaming) => {
                // The rest of its stream is drained and dropped; when it
                // ends, `stream_done` finishes the orphaned operation and
                // frees its slot.
                for ch in &mut self.peers {
                    for s in ch.rx_streams.iter_mut().filter(|s| s.op == Some(id)) {
                        s.discard = true;
                    }
                }
            }
            _ => {}
        }
        self.settle(id);
        self.unregister(id);
        self.side[id.index()] = UserBuf::EMPTY;
        if self.proto.info(id).is_some_and(|i| i.phase == Phase::Done) {
            self.proto.take(id);
        } else {
            self.proto.abandon(id);
        }
    }

    /// The first operation of `scope` (pending, or finished but not yet
    /// collected) at table index `from` or later, with the index to resume
    /// from; walking the table this way needs no allocation.
    pub(crate) fn next_scope_op(&self, scope: u32, from: usize) -> Option<(OpId, usize)> {
        if self.proto.in_use() == 0 {
            return None;
        }
        (from..self.side.len()).find_map(|i| {
            let s = &self.side[i];
            if s.scope != scope {
                return None;
            }
            self.proto.handle_at(i).map(|h| (h, i + 1))
        })
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the job.
    pub(crate) fn nranks(&self) -> usize {
        self.peers.len()
    }

    /// Eager payloads this rank sent through shared-memory cells.
    pub(crate) fn cells_sent(&self) -> u64 {
        self.peers
            .iter()
            .map(|p| match &p.link {
                Link::Shm(l) => l.cells_sent(),
                _ => 0,
            })
            .sum()
    }

    /// Number of operations in the table.
    pub(crate) fn in_use(&self) -> usize {
        self.proto.in_use()
    }

    /// Whether a message arrived that no receive has taken yet (then a
    /// fast-path receive that finds its link empty must post instead).
    pub(crate) fn has_unexpected(&self) -> bool {
        self.proto.has_unexpected()
    }
}

/// A payload of at most 40 bytes ([`SHORT_BODY`]) as five little-endian
/// words, zero padded, with fixed-size copies (a few overlapping ones)
/// instead of a variable-length `memcpy` call.
#[inline(always)]
fn small_words(b: &[u8]) -> [u64; 5] {
    let n = b.len();
    debug_assert!(n <= SHORT_BODY);
    // Overlapping fixed-size loads, the bytes past the end shifted out, so
    // that no byte is staged through the stack. The shortest first: they
    // are the most frequent, and every compare ahead costs them.
    if n <= 8 {
        if n >= 4 {
            // n = 8: the same four bytes twice, the second load shifted by 32.
            let hi = u64::from(ld4(b, n - 4)) >> ((8 - n) * 8);
            [u64::from(ld4(b, 0)) | hi << 32, 0, 0, 0, 0]
        } else if n > 0 {
            let w = u64::from(b[0])
                | u64::from(b[n / 2]) << (n / 2 * 8)
                | u64::from(b[n - 1]) << ((n - 1) * 8);
            [w, 0, 0, 0, 0]
        } else {
            [0; 5]
        }
    } else {
        // The word that holds the last byte, `k`, from a load that ends
        // there, the bytes past the end shifted out.
        let last = |k: usize| ld8(b, n - 8) >> ((8 * k + 8 - n) * 8);
        if n <= 16 {
            [ld8(b, 0), last(1), 0, 0, 0]
        } else if n <= 24 {
            [ld8(b, 0), ld8(b, 8), last(2), 0, 0]
        } else if n <= 32 {
            [ld8(b, 0), ld8(b, 8), ld8(b, 16), last(3), 0]
        } else {
            [ld8(b, 0), ld8(b, 8), ld8(b, 16), ld8(b, 24), last(4)]
        }
    }
}

/// Copies `src` (at most 40 bytes, [`SHORT_BODY`]) to `dst` of the same
/// length with fixed-size integer loads and stores: overlapping 8- or
/// 4-byte ones cover every length. (Written with integers, not
/// `copy_from_slice`, so that the compiler does not merge the branches
/// back into one `memcpy` call.)
#[inline(always)]
fn small_copy(dst: &mut [u8], src: &[u8]) {
    let n = dst.len();
    debug_assert!(n == src.len() && n <= SHORT_BODY);
    // The shortest first, as in `small_words`.
    if n < 8 {
        if n >= 4 {
            let (a, c) = (ld4(src, 0), ld4(src, n - 4));
            dst[..4].copy_from_slice(&a.to_le_bytes());
            dst[n - 4..].copy_from_slice(&c.to_le_bytes());
        } else if n > 0 {
            let (a, b, c) = (src[0], src[n / 2], src[n - 1]);
            dst[0] = a;
            dst[n / 2] = b;
            dst[n - 1] = c;
        }
    } else if n <= 24 {
        let (a, b, c) = (
            ld8(src, 0),
            if n > 16 { ld8(src, 8) } else { 0 },
            ld8(src, n - 8),
        );
        dst[..8].copy_from_slice(&a.to_le_bytes());
        if n > 16 {
            dst[8..16].copy_from_slice(&b.to_le_bytes());
        }
        dst[n - 8..].copy_from_slice(&c.to_le_bytes());
    } else {
        let (a, b, c, d, e) = (
            ld8(src, 0),
            ld8(src, 8),
            ld8(src, 16),
            if n > 32 { ld8(src, 24) } else { 0 },
            ld8(src, n - 8),
        );
        dst[..8].copy_from_slice(&a.to_le_bytes());
        dst[8..16].copy_from_slice(&b.to_le_bytes());
        dst[16..24].copy_from_slice(&c.to_le_bytes());
        if n > 32 {
            dst[24..32].copy_from_slice(&d.to_le_bytes());
        }
        dst[n - 8..].copy_from_slice(&e.to_le_bytes());
    }
}

/// The result of a receive into a `cap`-byte buffer that got the message
/// of `st`: [`Error::Truncated`] if it was longer.
#[inline(always)]
pub(crate) fn delivered(st: Status, cap: usize) -> Result<Status> {
    if st.len > cap {
        Err(Error::Truncated {
            needed: st.len,
            got: cap,
            source: st.source,
            tag: st.tag,
        })
    } else {
        Ok(st)
    }
}

/// The 8 bytes of `s` at `at`, little-endian.
#[inline(always)]
fn ld8(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..][..8].try_into().expect("8 bytes"))
}

/// The 4 bytes of `s` at `at`, little-endian.
#[inline(always)]
fn ld4(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(s[at..][..4].try_into().expect("4 bytes"))
}

/// Outcome of a fast-path receive attempt.
pub(crate) enum Fast {
    /// Received: the message's status (its length may exceed the buffer's,
    /// see [`delivered`]).
    Done(Status),
    /// Nothing has arrived yet; try again.
    NotYet,
    /// The general path must handle it.
    Fallback,
    /// The message was torn (its sender died or stopped in the middle of
    /// writing it): the link failed, with the error `Engine::lost` gives.
    /// (No payload: an error inside would make every `Fast` too large to
    /// come back in registers, 6 instructions a persistent round trip.)
    Failed,
}

/// Whether `slot` holds a torn payload (forgetting it: the slot is about to
/// be reused).
#[inline]
fn take_torn(torn: &mut Vec<usize>, slot: usize) -> bool {
    if torn.is_empty() {
        return false;
    }
    match torn.iter().position(|&s| s == slot) {
        Some(i) => {
            torn.swap_remove(i);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Layout;
    use proptest::prelude::*;

    /// An engine over `map` with shared-memory links to every rank.
    fn engine(map: &Arc<JobMap>, rank: usize, cfg: &Config) -> Engine {
        use crate::transport::shm::{ShmLink, ShmOptions};
        map.attach(rank, std::process::id());
        let opt = ShmOptions {
            cma: (!cfg.cma_auto).then_some(cfg.cma),
            cma_min: cfg.cma_min,
            debug: false,
        };
        let links = (0..map.nranks())
            .map(|p| Link::Shm(ShmLink::new(map.clone(), rank, p, rank, p, opt)))
            .collect();
        Engine::new(rank, links, Protocol::of(map.layout()), cfg, None).unwrap()
    }

    #[test]
    fn small_words_packs_every_length_zero_padded() {
        let src: Vec<u8> = (1..=SHORT_BODY as u8).collect();
        for n in 0..=SHORT_BODY {
            let mut want = [0u8; SHORT_BODY];
            want[..n].copy_from_slice(&src[..n]);
            let got = small_words(&src[..n]);
            let got: Vec<u8> = got.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(got, want, "{n} bytes");
        }
    }

    #[test]
    fn small_copy_moves_every_length_exactly() {
        let src: Vec<u8> = (1..=SHORT_BODY as u8).collect();
        for n in 0..=SHORT_BODY {
            let mut dst = [0u8; SHORT_BODY + 2];
            small_copy(&mut dst[1..1 + n], &src[..n]);
            assert_eq!(&dst[1..1 + n], &src[..n], "{n} bytes");
            assert_eq!((dst[0], dst[1 + n]), (0, 0), "{n} bytes: wrote outside");
        }
    }

    fn engine_pair() -> (Arc<JobMap>, Engine) {
        let map = Arc::new(JobMap::anon(2, &Layout::default()).unwrap());
        map.attach(0, std::process::id());
        let e = engine(&map, 1, &Config::default());
        (map, e)
    }

    fn drive(e: &mut Engine, id: OpId) -> Result<Status> {
        for _ in 0..1000 {
            e.progress();
            if let Some(r) = e.take(id) {
                return r;
            }
        }
        panic!("operation did not finish");
    }

    /// Writes raw bytes into rank 0's line ring to rank 1.
    fn inject(map: &JobMap, bytes: &[u8], body: &[u8]) {
        let (line, ..) = map.channel(0, 1);
        assert!(line.producer().try_write(bytes, body));
    }

    proptest! {
        #[test]
        fn corrupt_header_is_an_error_not_a_panic(
            head in proptest::collection::vec(any::<u8>(), HEADER_LEN),
            valid_magic: bool,
        ) {
            let (map, mut e) = engine_pair();
            let mut head = head;
            if valid_magic {
                head[0] = tandem_core::wire::MAGIC;
                head[1] = (head[1] % 8).max(1);
            }
            inject(&map, &head, &[]);
            let mut buf = [0u8; 64];
            let id = e.post_recv(&mut buf, 0, 0, ANY_TAG, 0).unwrap();
            for _ in 0..100 {
                e.progress();
            }
            // Either a protocol error on the channel, or a (possibly
            // incomplete) message that never panics the engine.
            if let Some(r) = e.take(id) {
                let ok = r.is_ok()
                    || matches!(r, Err(Error::Protocol { .. }) | Err(Error::Truncated { .. }));
                prop_assert!(ok, "unexpected result {:?}", r);
            } else {
                e.withdraw(id, &Error::Cancelled);
            }
            // The other direction keeps working: rank 1 can still post.
            let mut b2 = [0u8; 4];
            let r2 = e.post_recv(&mut b2, 1, 0, 1, 0);
            prop_assert!(r2.is_ok());
        }
    }

    /// An eager message in a cell whose sender stopped after the first
    /// piece: the receive shortcut waits for the rest as long as the link's
    /// patience, then fails the receive with the link's error; nothing of
    /// the message is delivered.
    #[test]
    fn a_torn_cell_fails_the_receive_shortcut() {
        let (map, mut e) = engine_pair();
        let layout = *map.layout();
        let (piece, len) = (layout.piece_bytes(), layout.eager_limit as usize);
        assert!(
            len >= layout.cell_min as usize && len > piece,
            "a cell of pieces"
        );
        if let Link::Shm(l) = &mut e.peers[0].link {
            l.set_piece_patience(std::time::Duration::from_millis(20));
        }
        let (_, _, cell) = map.channel(0, 1);
        let mut cell = cell.expect("cells").producer();
        assert!(
            cell.try_push_padded(&vec![7u8; piece], 0),
            "the first piece"
        );
        inject(
            &map,
            &Header::new(Kind::Eager, 0, 5, len as u64).encode(),
            &[],
        );
        let mut buf = vec![0u8; len];
        match e.try_recv_now(&mut buf, 0, 0, 5) {
            Fast::Failed => {}
            Fast::Done(st) => panic!("a torn message was delivered: {st:?}"),
            Fast::NotYet | Fast::Fallback => panic!("the shortcut did not read the cell"),
        }
        match e.lost(0) {
            Error::PeerSilent { evidence, .. } => {
                assert!(evidence.contains("1 of its 4 pieces"), "{evidence}")
            }
            other => panic!("not the link's error: {other}"),
        }
    }

    proptest! {
        /// A short header (one line's eager message) with any fields: the
        /// receive shortcut and a posted receive either take a message or
        /// report the peer's protocol error; never a panic, never more
        /// bytes than the line holds.
        #[test]
        fn corrupt_short_header_is_an_error_not_a_panic(
            ctx in 0u16..3,
            w1: u64,
            posted: bool,
        ) {
            let (map, mut e) = engine_pair();
            let mut head = [0u8; SHORT_LEN];
            head[..8].copy_from_slice(&Header::short_word(ctx, 5).to_le_bytes());
            head[8..].copy_from_slice(&w1.to_le_bytes());
            inject(&map, &head, &[9; SHORT_BODY]);
            let mut buf = [0u8; 64];
            let r = if posted {
                let id = e.post_recv(&mut buf, 0, ctx, ANY_TAG, 0).unwrap();
                for _ in 0..100 {
                    e.progress();
                }
                match e.take(id) {
                    Some(r) => r,
                    None => {
                        e.withdraw(id, &Error::Cancelled);
                        return Ok(());
                    }
                }
            } else {
                match e.try_recv_now(&mut buf, 0, ctx, ANY_TAG) {
                    Fast::Done(st) => delivered(st, 64),
                    Fast::Failed => Err(e.lost(0)),
                    Fast::NotYet | Fast::Fallback => return Ok(()),
                }
            };
            let len = (w1 >> 48) as usize;
            match r {
                Ok(st) => {
                    prop_assert!(st.len <= SHORT_BODY && st.len == len);
                    prop_assert!(buf[..len].iter().all(|&b| b == 9));
                }
                Err(Error::Protocol { .. }) | Err(Error::ChannelBroken { .. }) => {}
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }

    #[test]
    fn rendezvous_within_one_process_is_single_copy() {
        let map = Arc::new(JobMap::anon(1, &Layout::default()).unwrap());
        let mut e = engine(&map, 0, &Config::default().cma(true));
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut got = vec![0u8; 100_000];
        let s = e.post_send(&data, 0, 0, 3, false, 0).unwrap();
        let r = e.post_recv(&mut got, 0, 0, 3, 0).unwrap();
        assert_eq!(drive(&mut e, r).unwrap().len, 100_000);
        assert_eq!(drive(&mut e, s).unwrap().len, 100_000);
        assert_eq!(got, data);
        let Link::Shm(l) = &e.peers[0].link else {
            panic!("a one-rank world is shared memory")
        };
        assert!(!l.cma_refused());
        assert!(e.peers[0].tx_streams.is_empty() && e.peers[0].rx_streams.is_empty());
    }

    #[test]
    fn credits_backpressure_instead_of_dropping() {
        // Two eager buffers and four entries: two messages go eager, two
        // more as rendezvous announcements, the rest wait at the sender.
        let layout = Layout {
            credits: 2,
            envelopes: 4,
            ..Layout::default()
        };
        let map = Arc::new(JobMap::anon(1, &layout).unwrap());
        let mut e = engine(&map, 0, &Config::default());
        let msgs: Vec<[u8; 8]> = (0..10u8).map(|i| [i; 8]).collect();
        let sends: Vec<_> = msgs
            .iter()
            .map(|m| e.post_send(m, 0, 0, 1, false, 0).unwrap())
            .collect();
        for _ in 0..10 {
            e.progress();
        }
        assert_eq!(e.proto.credits_available(0), 0, "four entries, all used");
        let phases: Vec<_> = sends.iter().map(|&s| e.proto.phase(s).unwrap()).collect();
        assert_eq!(&phases[..2], &[Phase::Done; 2], "eager: complete at once");
        assert_eq!(&phases[2..4], &[Phase::WaitReceiver; 2], "announced");
        assert!(
            phases[4..].iter().all(|&p| p == Phase::Queued),
            "{phases:?}"
        );
        for (i, s) in sends.into_iter().enumerate() {
            let mut b = [0u8; 8];
            let r = e.post_recv(&mut b, 0, 0, 1, 0).unwrap();
            drive(&mut e, r).unwrap();
            assert_eq!(b, [i as u8; 8]);
            drive(&mut e, s).unwrap();
        }
    }
}
