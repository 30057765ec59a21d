//! The progress engine: per-peer channel state, the operation table and the
//! shared-memory send/receive state machines.
//!
//! Messages from one rank to another travel over one channel:
//!
//! * every message starts with a [`Header`] in the **line ring**; an
//!   [`Kind::Eager`] message (payload up to `eager_limit`) carries its
//!   payload right behind the header, in the same lines;
//! * a [`Kind::Bulk`] message carries only its header there; its payload
//!   follows in the **slot ring**, cut into slot-sized chunks and pipelined.
//!   Bulk payloads are streamed strictly in header order, so the line ring
//!   alone fixes the order of messages (MPI's non-overtaking rule).
//!
//! Receives match (source, tag) in posting order against messages in arrival
//! order. A small message that arrives before its receive is copied into one
//! of a fixed pool of unexpected buffers; when the pool is empty the engine
//! stops reading that line ring, so the sender waits: nothing is dropped and
//! memory stays bounded. An unmatched bulk message holds only its header;
//! its payload waits in the slot ring until a receive claims it.
//!
//! All storage (operation table, queues, unexpected buffers) is allocated
//! when the engine is built; steady-state messaging allocates nothing.
//!
//! User buffers are reached through raw pointers recorded when an operation
//! is posted. They are valid because every operation is either waited for
//! or cancelled before the borrow it came from ends (blocking calls, or the
//! end of a [`crate::Scope`]), and only this process ever touches them.

use crate::config::{Config, Layout};
use crate::error::{Error, OpKind, Result};
use crate::shm::JobMap;
use std::collections::VecDeque;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use tandem_core::line_ring::{LineConsumer, LineProducer, LINE_PAYLOAD};
use tandem_core::slot_ring::{SlotConsumer, SlotProducer};
use tandem_core::sync::Ordering;
use tandem_core::wire::{Header, Kind, Limits, HEADER_LEN};

/// What a completed receive reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank.
    pub source: usize,
    /// The message tag.
    pub tag: u32,
    /// The message length in bytes (for a send: the bytes sent).
    pub len: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Free,
    Pending,
    Done,
}

struct Op {
    kind: OpKind,
    peer: usize,
    tag: u32,
    ptr: *mut u8,
    len: usize,
    /// Payload bytes moved so far (the progress measure for timeouts).
    moved: usize,
    gen: u32,
    scope: u32,
    state: State,
    result: Option<Result<Status>>,
}

impl Op {
    const EMPTY: Op = Op {
        kind: OpKind::Send,
        peer: 0,
        tag: 0,
        ptr: std::ptr::null_mut(),
        len: 0,
        moved: 0,
        gen: 0,
        scope: 0,
        state: State::Free,
        result: None,
    };

    /// The user's buffer as bytes to read.
    ///
    /// # Safety
    /// The op must be pending; its buffer borrow is then alive (see module
    /// docs) and nothing else writes it during the engine call.
    unsafe fn src<'b>(&self) -> &'b [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The user's buffer as bytes to write.
    ///
    /// # Safety
    /// As for [`Op::src`], and the op is a receive (an exclusive borrow).
    #[allow(clippy::mut_from_ref)]
    unsafe fn dst<'b>(&self) -> &'b mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Identifies an operation: slot index plus generation, so a stale handle
/// can never reach a reused slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpId {
    pub idx: u32,
    pub gen: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Arrived before its receive: payload still in the slot ring.
    Waiting,
    /// Being received into this op.
    Op(u32),
    /// Its receive was cancelled: drain and drop the payload.
    Discard,
}

struct BulkRx {
    len: usize,
    done: usize,
    target: Target,
}

struct Unexpected {
    tag: u32,
    len: usize,
    /// For a bulk message: its sequence number among bulk headers.
    bulk_seq: Option<u64>,
    buf: Box<[u8]>,
}

struct Peer {
    tx_line: LineProducer<'static>,
    tx_slot: SlotProducer<'static>,
    rx_line: LineConsumer<'static>,
    rx_slot: SlotConsumer<'static>,
    /// Sends whose header is not yet in the line ring.
    line_q: VecDeque<u32>,
    /// Bulk sends whose header went out, streaming payload in order.
    bulk_q: VecDeque<u32>,
    /// Receives posted for this source, in posting order.
    posted: VecDeque<u32>,
    /// Unexpected messages from this source, in arrival order.
    unexpected: VecDeque<u32>,
    /// Bulk messages announced but not fully received, in header order.
    rx_bulk: VecDeque<BulkRx>,
    rx_bulk_front_seq: u64,
    rx_bulk_next_seq: u64,
    /// Set once the channel cannot be used any more.
    broken: Option<Error>,
    pid: u32,
    pidfd: Option<OwnedFd>,
}

/// The engine of one rank.
pub(crate) struct Engine {
    rank: usize,
    // `peers` borrows `map` (for 'static), so it is declared first and
    // dropped first.
    peers: Vec<Peer>,
    ops: Vec<Op>,
    free_ops: Vec<u32>,
    pool: Vec<Unexpected>,
    free_pool: Vec<u32>,
    limits: Limits,
    /// Longest eager payload that fits the header's line.
    one_line_max: u64,
    slot_bytes: usize,
    in_use: usize,
    own_pid: u32,
    map: Arc<JobMap>,
}

// SAFETY: the raw pointers in `Op` are only dereferenced inside engine
// calls, which the owning `Comm` serialises behind a mutex; the buffers they
// point to are kept alive by the borrow rules of `Comm` and `Scope`.
unsafe impl Send for Engine {}

impl Engine {
    pub(crate) fn new(map: Arc<JobMap>, rank: usize, cfg: &Config) -> Self {
        let n = map.nranks();
        let layout: Layout = *map.layout();
        let q = cfg.max_requests.max(1);
        let peers = (0..n)
            .map(|p| {
                let (tx_line, tx_slot) = map.channel(rank, p);
                let (rx_line, rx_slot) = map.channel(p, rank);
                Peer {
                    tx_line: tx_line.producer(),
                    tx_slot: tx_slot.producer(),
                    rx_line: rx_line.consumer(),
                    rx_slot: rx_slot.consumer(),
                    line_q: VecDeque::with_capacity(q),
                    bulk_q: VecDeque::with_capacity(q),
                    posted: VecDeque::with_capacity(q),
                    unexpected: VecDeque::with_capacity(cfg.unexpected),
                    rx_bulk: VecDeque::with_capacity(q + cfg.unexpected),
                    rx_bulk_front_seq: 0,
                    rx_bulk_next_seq: 0,
                    broken: None,
                    pid: 0,
                    pidfd: None,
                }
            })
            .collect();
        let ops = (0..q).map(|_| Op::EMPTY).collect();
        let free_ops = (0..q as u32).rev().collect();
        let pool = (0..cfg.unexpected)
            .map(|_| Unexpected {
                tag: 0,
                len: 0,
                bulk_seq: None,
                buf: vec![0u8; layout.eager_limit as usize].into_boxed_slice(),
            })
            .collect();
        let free_pool = (0..cfg.unexpected as u32).rev().collect();
        Self {
            rank,
            peers,
            ops,
            free_ops,
            pool,
            free_pool,
            limits: Limits {
                eager_max: layout.eager_limit as u64,
                msg_max: MAX_MESSAGE as u64,
                contexts: 1,
            },
            one_line_max: ((LINE_PAYLOAD - HEADER_LEN) as u64).min(layout.eager_limit as u64),
            slot_bytes: layout.slot_bytes as usize,
            in_use: 0,
            own_pid: std::process::id(),
            map,
        }
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

    fn alloc_op(
        &mut self,
        kind: OpKind,
        peer: usize,
        tag: u32,
        ptr: *mut u8,
        len: usize,
        scope: u32,
    ) -> Result<OpId> {
        let idx = self.free_ops.pop().ok_or(Error::TooManyRequests {
            capacity: self.ops.len(),
        })?;
        let op = &mut self.ops[idx as usize];
        let gen = op.gen.wrapping_add(1);
        *op = Op {
            kind,
            peer,
            tag,
            ptr,
            len,
            moved: 0,
            gen,
            scope,
            state: State::Pending,
            result: None,
        };
        self.in_use += 1;
        Ok(OpId { idx, gen })
    }

    fn free_op(&mut self, idx: u32) {
        let op = &mut self.ops[idx as usize];
        debug_assert!(op.state != State::Free);
        op.state = State::Free;
        op.ptr = std::ptr::null_mut();
        op.result = None;
        self.free_ops.push(idx);
        self.in_use -= 1;
    }

    fn complete(&mut self, idx: u32, r: Result<Status>) {
        let op = &mut self.ops[idx as usize];
        op.state = State::Done;
        op.ptr = std::ptr::null_mut();
        op.result = Some(r);
    }

    /// Posts a send of `buf`.
    pub(crate) fn post_send(
        &mut self,
        buf: &[u8],
        dst: usize,
        tag: u32,
        scope: u32,
    ) -> Result<OpId> {
        self.check_rank(dst)?;
        if buf.len() > MAX_MESSAGE {
            return Err(Error::MessageTooLarge {
                len: buf.len(),
                max: MAX_MESSAGE,
            });
        }
        if let Some(e) = &self.peers[dst].broken {
            return Err(e.clone());
        }
        let id = self.alloc_op(
            OpKind::Send,
            dst,
            tag,
            buf.as_ptr() as *mut u8,
            buf.len(),
            scope,
        )?;
        self.peers[dst].line_q.push_back(id.idx);
        self.progress_tx(dst);
        Ok(id)
    }

    /// Posts a receive into `buf`.
    pub(crate) fn post_recv(
        &mut self,
        buf: &mut [u8],
        src: usize,
        tag: u32,
        scope: u32,
    ) -> Result<OpId> {
        self.check_rank(src)?;
        let id = self.alloc_op(OpKind::Recv, src, tag, buf.as_mut_ptr(), buf.len(), scope)?;
        // A message that already arrived matches first (arrival order).
        let peer = &mut self.peers[src];
        if let Some(pos) = peer
            .unexpected
            .iter()
            .position(|&e| self.pool[e as usize].tag == tag)
        {
            let e = peer.unexpected.remove(pos).expect("position is in range");
            let ent = &self.pool[e as usize];
            let (len, seq) = (ent.len, ent.bulk_seq);
            match seq {
                None => {
                    let n = len.min(buf.len());
                    buf[..n].copy_from_slice(&ent.buf[..n]);
                    self.free_pool.push(e);
                    self.ops[id.idx as usize].moved = n;
                    self.complete(id.idx, finish(src, tag, len, buf.len()));
                }
                Some(seq) => {
                    let i = (seq - peer.rx_bulk_front_seq) as usize;
                    peer.rx_bulk[i].target = Target::Op(id.idx);
                    self.free_pool.push(e);
                }
            }
            self.progress_rx(src);
            return Ok(id);
        }
        if let Some(e) = &peer.broken {
            let e = e.clone();
            self.free_op(id.idx);
            return Err(e);
        }
        peer.posted.push_back(id.idx);
        self.progress_rx(src);
        Ok(id)
    }

    /// Blocking-send fast path: an eager message goes straight into the
    /// line ring when nothing is queued ahead of it for `dst`. `None`: take
    /// the general path (bulk message, queue not empty, ring full, error).
    #[inline(always)]
    pub(crate) fn try_send_now(&mut self, buf: &[u8], dst: usize, tag: u32) -> Option<Result<()>> {
        if dst >= self.peers.len() {
            return Some(Err(Error::InvalidRank {
                rank: dst,
                size: self.peers.len(),
            }));
        }
        let peer = &mut self.peers[dst];
        if buf.len() as u64 > self.limits.eager_max
            || !peer.line_q.is_empty()
            || peer.broken.is_some()
        {
            return None;
        }
        let h = Header::new(Kind::Eager, 0, tag, buf.len() as u64).encode();
        peer.tx_line.try_write(&h, buf).then_some(Ok(()))
    }

    /// Blocking-receive fast path: when nothing from `src` is buffered or
    /// posted, an eager message with `tag` at the head of its line ring is
    /// copied straight into `buf`.
    #[inline(always)]
    pub(crate) fn try_recv_now(&mut self, buf: &mut [u8], src: usize, tag: u32) -> Fast {
        if src >= self.peers.len() {
            return Fast::Done(Err(Error::InvalidRank {
                rank: src,
                size: self.peers.len(),
            }));
        }
        let peer = &mut self.peers[src];
        if !peer.posted.is_empty() || !peer.unexpected.is_empty() || peer.broken.is_some() {
            return Fast::Fallback;
        }
        let mut line = [0u8; LINE_PAYLOAD];
        if !peer.rx_line.peek_line(&mut line) {
            return Fast::NotYet;
        }
        // The common case in one compare: an eager header of context 0 with
        // this tag (magic, kind, context and tag are the first 8 bytes) and
        // a length that fits this line (and the eager limit). Anything else
        // goes through the full validation below.
        let word = u64::from_le_bytes(line[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(line[8..HEADER_LEN].try_into().expect("8 bytes"));
        if word == eager_word(tag) && len <= self.one_line_max {
            let len = len as usize;
            let n = len.min(buf.len());
            buf[..n].copy_from_slice(&line[HEADER_LEN..HEADER_LEN + n]);
            peer.rx_line.consume_peeked_line();
            return Fast::Done(finish(src, tag, len, buf.len()));
        }
        match Header::decode(&line[..HEADER_LEN], &self.limits) {
            Ok(h) if h.kind() == Kind::Eager && h.tag == tag => {
                let len = h.len as usize;
                if HEADER_LEN + len <= LINE_PAYLOAD {
                    // The whole message is in the line already copied.
                    let n = len.min(buf.len());
                    buf[..n].copy_from_slice(&line[HEADER_LEN..HEADER_LEN + n]);
                    peer.rx_line.consume_peeked_line();
                    Fast::Done(finish(src, tag, len, buf.len()))
                } else if peer.rx_line.try_read(HEADER_LEN, len, buf) {
                    Fast::Done(finish(src, tag, len, buf.len()))
                } else {
                    Fast::NotYet
                }
            }
            _ => Fast::Fallback,
        }
    }

    /// Whether rank `p` is known dead (for waits that hold no operation).
    pub(crate) fn is_dead(&mut self, p: usize) -> bool {
        p != self.rank && p < self.peers.len() && self.peer_dead(p)
    }

    /// One pass over every channel; `true` if anything moved.
    pub(crate) fn progress(&mut self) -> bool {
        let mut did = false;
        for p in 0..self.peers.len() {
            did |= self.progress_tx(p);
            did |= self.progress_rx(p);
        }
        did
    }

    fn progress_tx(&mut self, p: usize) -> bool {
        let eager_max = self.limits.eager_max as usize;
        let slot = self.slot_bytes;
        let peer = &mut self.peers[p];
        let mut did = false;
        let mut completed: [u32; 8] = [0; 8];
        let mut nc = 0;
        while let Some(&idx) = peer.line_q.front() {
            if nc == completed.len() {
                break;
            }
            let op = &mut self.ops[idx as usize];
            // SAFETY: pending op (see module docs).
            let payload = unsafe { op.src() };
            if op.len <= eager_max {
                let h = Header::new(Kind::Eager, 0, op.tag, op.len as u64).encode();
                if !peer.tx_line.try_write(&h, payload) {
                    break;
                }
                op.moved = op.len;
                completed[nc] = idx;
                nc += 1;
            } else {
                let h = Header::new(Kind::Bulk, 0, op.tag, op.len as u64).encode();
                if !peer.tx_line.try_write(&h, &[]) {
                    break;
                }
                peer.bulk_q.push_back(idx);
            }
            peer.line_q.pop_front();
            did = true;
        }
        while let Some(&idx) = peer.bulk_q.front() {
            if nc == completed.len() {
                break;
            }
            let op = &mut self.ops[idx as usize];
            // SAFETY: pending op (see module docs).
            let payload = unsafe { op.src() };
            while op.moved < op.len {
                let n = slot.min(op.len - op.moved);
                if !peer.tx_slot.try_push(&payload[op.moved..op.moved + n]) {
                    break;
                }
                op.moved += n;
                did = true;
            }
            if op.moved < op.len {
                break;
            }
            peer.bulk_q.pop_front();
            completed[nc] = idx;
            nc += 1;
        }
        for &idx in &completed[..nc] {
            let op = &self.ops[idx as usize];
            let st = Status {
                source: self.rank,
                tag: op.tag,
                len: op.len,
            };
            self.complete(idx, Ok(st));
        }
        if nc == completed.len() {
            did |= self.progress_tx(p);
        }
        did
    }

    fn progress_rx(&mut self, p: usize) -> bool {
        let mut did = false;
        loop {
            did |= self.stream_bulk(p);
            let peer = &mut self.peers[p];
            if peer.broken.is_some() {
                return did;
            }
            let mut hb = [0u8; HEADER_LEN];
            if !peer.rx_line.peek_prefix(&mut hb) {
                return did;
            }
            let h = match Header::decode(&hb, &self.limits) {
                Ok(h) => h,
                Err(e) => {
                    self.fail_peer(
                        p,
                        Error::Protocol {
                            peer: p,
                            detail: e.to_string(),
                        },
                    );
                    return true;
                }
            };
            let len = h.len as usize;
            let posted = peer
                .posted
                .iter()
                .position(|&i| self.ops[i as usize].tag == h.tag);
            match (h.kind(), posted) {
                (Kind::Eager, Some(pos)) => {
                    let idx = peer.posted[pos];
                    let op = &mut self.ops[idx as usize];
                    // SAFETY: pending receive (see module docs).
                    let dst = unsafe { op.dst() };
                    if !peer.rx_line.try_read(HEADER_LEN, len, dst) {
                        return did;
                    }
                    op.moved = len.min(op.len);
                    let got = op.len;
                    peer.posted.remove(pos);
                    self.complete(idx, finish(p, h.tag, len, got));
                }
                (Kind::Eager, None) => {
                    let Some(e) = self.free_pool.pop() else {
                        return did;
                    };
                    let ent = &mut self.pool[e as usize];
                    if !peer.rx_line.try_read(HEADER_LEN, len, &mut ent.buf[..len]) {
                        self.free_pool.push(e);
                        return did;
                    }
                    ent.tag = h.tag;
                    ent.len = len;
                    ent.bulk_seq = None;
                    peer.unexpected.push_back(e);
                }
                (Kind::Bulk, posted) => {
                    let target = match posted {
                        Some(pos) => Target::Op(peer.posted.remove(pos).expect("in range")),
                        None => {
                            let Some(e) = self.free_pool.pop() else {
                                return did;
                            };
                            let ent = &mut self.pool[e as usize];
                            ent.tag = h.tag;
                            ent.len = len;
                            ent.bulk_seq = Some(peer.rx_bulk_next_seq);
                            peer.unexpected.push_back(e);
                            Target::Waiting
                        }
                    };
                    let consumed = peer.rx_line.try_read(HEADER_LEN, 0, &mut []);
                    debug_assert!(consumed, "a one-line message whose first line is ready");
                    peer.rx_bulk.push_back(BulkRx {
                        len,
                        done: 0,
                        target,
                    });
                    peer.rx_bulk_next_seq += 1;
                }
            }
            did = true;
        }
    }

    /// Moves payload of the front bulk message out of the slot ring.
    fn stream_bulk(&mut self, p: usize) -> bool {
        let slot = self.slot_bytes;
        let peer = &mut self.peers[p];
        let mut did = false;
        while let Some(front) = peer.rx_bulk.front_mut() {
            let op = match front.target {
                Target::Waiting => return did,
                Target::Op(i) => {
                    let o = &mut self.ops[i as usize];
                    debug_assert!(o.state == State::Pending && o.kind == OpKind::Recv);
                    Some(o)
                }
                Target::Discard => None,
            };
            let cap = op.as_ref().map_or(0, |o| o.len);
            while front.done < front.len {
                let a = front.done;
                let n = slot.min(front.len - a);
                let ok = match &op {
                    Some(o) if a < cap => {
                        let end = (a + n).min(cap);
                        // SAFETY: pending receive (see module docs).
                        let dst = unsafe { &mut o.dst()[a..end] };
                        peer.rx_slot.try_pop(dst)
                    }
                    _ => peer.rx_slot.try_skip(),
                };
                if !ok {
                    break;
                }
                front.done += n;
                did = true;
            }
            if let Some(o) = op {
                o.moved = front.done;
            }
            if front.done < front.len {
                return did;
            }
            let (len, target) = (front.len, front.target);
            peer.rx_bulk.pop_front();
            peer.rx_bulk_front_seq += 1;
            if let Target::Op(i) = target {
                let tag = self.ops[i as usize].tag;
                let r = finish(p, tag, len, cap);
                self.complete(i, r);
                return true;
            }
        }
        did
    }

    /// Fails every pending operation with peer `p` and marks the channel
    /// broken. Messages already buffered as unexpected stay receivable.
    fn fail_peer(&mut self, p: usize, e: Error) {
        let peer = &mut self.peers[p];
        if peer.broken.is_none() {
            peer.broken = Some(e.clone());
        }
        let mut victims: Vec<u32> = Vec::new();
        victims.extend(peer.line_q.drain(..));
        victims.extend(peer.bulk_q.drain(..));
        victims.extend(peer.posted.drain(..));
        for b in peer.rx_bulk.iter_mut() {
            if let Target::Op(i) = b.target {
                victims.push(i);
                b.target = Target::Discard;
            }
        }
        for i in victims {
            self.complete(i, Err(e.clone()));
        }
    }

    /// Whether rank `p`'s process is known to have exited.
    fn peer_dead(&mut self, p: usize) -> bool {
        let own = self.own_pid;
        let map = &self.map;
        let peer = &mut self.peers[p];
        if peer.pid == 0 {
            peer.pid = map.pid_slot(p).load(Ordering::Acquire);
        }
        // Not attached yet, or a thread of this very process.
        if peer.pid == 0 || peer.pid == own {
            return false;
        }
        if peer.pidfd.is_none() {
            // SAFETY: plain syscall; a returned descriptor is ours to own.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, peer.pid as libc::pid_t, 0) };
            if fd < 0 {
                let err = std::io::Error::last_os_error();
                // ESRCH: it is gone already. Anything else (an old kernel):
                // fall back to kill(pid, 0).
                if err.raw_os_error() == Some(libc::ESRCH) {
                    return true;
                }
                // SAFETY: signal 0 only checks for existence.
                return unsafe { libc::kill(peer.pid as libc::pid_t, 0) } != 0;
            }
            // SAFETY: fd is a fresh descriptor we own.
            peer.pidfd = Some(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let fd = peer
            .pidfd
            .as_ref()
            .map(std::os::fd::AsRawFd::as_raw_fd)
            .unwrap_or(-1);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP) != 0
    }

    /// Checks the peers of pending operations; a dead peer's channel is
    /// drained of what it sent before dying, then every operation still
    /// pending with it fails with [`Error::PeerLost`].
    pub(crate) fn check_peers(&mut self) {
        for p in 0..self.peers.len() {
            let pr = &self.peers[p];
            let busy = !pr.line_q.is_empty()
                || !pr.bulk_q.is_empty()
                || !pr.posted.is_empty()
                || pr.rx_bulk.iter().any(|b| matches!(b.target, Target::Op(_)));
            if busy && pr.broken.is_none() && p != self.rank && self.peer_dead(p) {
                self.progress_rx(p);
                self.fail_peer(p, Error::PeerLost { rank: p });
            }
        }
    }

    /// The result of a finished operation, freeing its slot; `None` while
    /// it is pending. A stale id yields an error.
    pub(crate) fn take(&mut self, id: OpId) -> Option<Result<Status>> {
        let op = &mut self.ops[id.idx as usize];
        if op.gen != id.gen || op.state == State::Free {
            return Some(Err(Error::Io("request already completed".into())));
        }
        if op.state != State::Done {
            return None;
        }
        let r = op.result.take();
        self.free_op(id.idx);
        r
    }

    /// Bytes an operation has moved (to detect stalls).
    pub(crate) fn moved(&self, id: OpId) -> usize {
        self.ops[id.idx as usize].moved
    }

    /// Peer and tag of an operation, for error reports.
    pub(crate) fn describe(&self, id: OpId) -> (OpKind, usize, u32) {
        let op = &self.ops[id.idx as usize];
        (op.kind, op.peer, op.tag)
    }

    /// Withdraws a pending operation so its buffer is never touched again.
    /// A receive in the middle of a bulk message leaves the rest to be
    /// drained; a send in the middle of its payload breaks the channel
    /// (the receiver would otherwise get a corrupt message).
    pub(crate) fn cancel(&mut self, id: OpId, why: &Error) {
        let op = &self.ops[id.idx as usize];
        if op.gen != id.gen || op.state == State::Free {
            return;
        }
        if op.state == State::Pending {
            let (kind, p, moved) = (op.kind, op.peer, op.moved);
            let peer = &mut self.peers[p];
            let idx = id.idx;
            match kind {
                OpKind::Send => {
                    if let Some(pos) = peer.line_q.iter().position(|&i| i == idx) {
                        peer.line_q.remove(pos);
                    } else if let Some(pos) = peer.bulk_q.iter().position(|&i| i == idx) {
                        peer.bulk_q.remove(pos);
                        // Its header is out, so the receiver expects the
                        // payload: the stream cannot be continued.
                        let reason =
                            format!("a bulk send was abandoned after {moved} bytes: {why}");
                        self.fail_peer(p, Error::ChannelBroken { peer: p, reason });
                    }
                }
                OpKind::Recv => {
                    if let Some(pos) = peer.posted.iter().position(|&i| i == idx) {
                        peer.posted.remove(pos);
                    }
                    for b in peer.rx_bulk.iter_mut() {
                        if b.target == Target::Op(idx) {
                            b.target = Target::Discard;
                        }
                    }
                }
            }
        }
        self.free_op(id.idx);
    }

    /// The first operation of `scope` (pending, or finished but not yet
    /// collected) at table index `from` or later, with the index to resume
    /// from; walking the table this way needs no allocation.
    pub(crate) fn next_scope_op(&self, scope: u32, from: usize) -> Option<(OpId, usize)> {
        if self.in_use == 0 {
            return None;
        }
        self.ops.iter().enumerate().skip(from).find_map(|(i, op)| {
            (op.state != State::Free && op.scope == scope).then_some((
                OpId {
                    idx: i as u32,
                    gen: op.gen,
                },
                i + 1,
            ))
        })
    }

    /// Number of operations in the table.
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }
}

/// The first 8 encoded bytes of an eager, context-0 header with `tag`.
#[inline(always)]
fn eager_word(tag: u32) -> u64 {
    let h = Header::new(Kind::Eager, 0, tag, 0).encode();
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes"))
}

/// Outcome of a fast-path attempt.
pub(crate) enum Fast {
    /// Finished.
    Done(Result<Status>),
    /// Nothing has arrived yet; try again.
    NotYet,
    /// The general path must handle it.
    Fallback,
}

/// The largest message tandem moves (1 TiB; the slot ring streams it).
pub const MAX_MESSAGE: usize = 1 << 40;

fn finish(src: usize, tag: u32, len: usize, got: usize) -> Result<Status> {
    if len > got {
        Err(Error::Truncated { needed: len, got })
    } else {
        Ok(Status {
            source: src,
            tag,
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn engine_pair() -> (Arc<JobMap>, Engine) {
        let map = Arc::new(JobMap::anon(2, &Layout::default()).unwrap());
        let e = Engine::new(map.clone(), 0, &Config::default());
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

    proptest! {
        /// Random bytes where a header should be: the receive fails with a
        /// protocol error (or, if the bytes happen to form a valid header,
        /// completes normally); never a panic, and traffic on other channels
        /// is unaffected.
        #[test]
        fn corrupt_header_is_an_error_not_a_panic(
            head in proptest::collection::vec(any::<u8>(), 16),
            body in proptest::collection::vec(any::<u8>(), 0..200),
            valid_magic: bool,
        ) {
            let (map, mut e) = engine_pair();
            let mut head = head;
            if valid_magic {
                head[0] = tandem_core::wire::MAGIC;
            }
            let (line, _) = map.channel(1, 0);
            prop_assert!(line.producer().try_write(&head, &body));
            let tag = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let mut buf = vec![0u8; 4096];
            let id = e.post_recv(&mut buf, 1, tag, 0).unwrap();
            // A bulk header that decodes waits for payload that never
            // comes: that is a pending receive, not an error.
            let mut outcome = None;
            for _ in 0..100 {
                e.progress();
                if let Some(r) = e.take(id) {
                    outcome = Some(r);
                    break;
                }
            }
            match outcome {
                Some(Err(Error::Protocol { peer, .. })) => prop_assert_eq!(peer, 1),
                Some(Ok(_)) | Some(Err(Error::Truncated { .. })) => {
                    prop_assert!(Header::decode(&head, &e.limits).is_ok())
                }
                Some(Err(other)) => prop_assert!(false, "unexpected error {other}"),
                None => {
                    let h = Header::decode(&head, &e.limits);
                    prop_assert!(h.is_ok() && h.unwrap().kind() == Kind::Bulk);
                    e.cancel(id, &Error::Io("test".into()));
                }
            }
            // The self channel still works.
            let msg = [42u8; 100];
            let s = e.post_send(&msg, 0, 9, 0).unwrap();
            let mut got = [0u8; 100];
            let r = e.post_recv(&mut got, 0, 9, 0).unwrap();
            prop_assert!(drive(&mut e, s).is_ok());
            prop_assert_eq!(drive(&mut e, r).unwrap().len, 100);
            prop_assert_eq!(got, msg);
            // Further receives from the broken peer fail fast.
            if e.peers[1].broken.is_some() {
                prop_assert!(e.post_recv(&mut buf, 1, 0, 0).is_err());
            }
        }
    }

    #[test]
    fn unexpected_pool_exhaustion_backpressures_instead_of_dropping() {
        let map = Arc::new(JobMap::anon(2, &Layout::default()).unwrap());
        let cfg = Config::default().unexpected(2);
        let mut rx = Engine::new(map.clone(), 0, &cfg);
        let mut tx = Engine::new(map.clone(), 1, &cfg);
        let msgs: Vec<[u8; 8]> = (0..5u64).map(|i| i.to_le_bytes()).collect();
        let sends: Vec<_> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| tx.post_send(m, 0, i as u32, 0).unwrap())
            .collect();
        // Nothing posted: two messages fill the pool, the rest stay queued
        // in the channel (the sender's problem), none is dropped.
        rx.progress();
        assert_eq!(rx.peers[1].unexpected.len(), 2);
        assert!(rx.peers[1].rx_line.peek_prefix(&mut [0u8; 16]));
        for i in [2u32, 0, 1, 3, 4] {
            let mut b = [0u8; 8];
            let id = rx.post_recv(&mut b, 1, i, 0).unwrap();
            let r = loop {
                tx.progress();
                rx.progress();
                if let Some(r) = rx.take(id) {
                    break r;
                }
            };
            assert_eq!(r.unwrap().tag, i);
            assert_eq!(u64::from_le_bytes(b), i as u64);
        }
        for s in sends {
            assert!(drive(&mut tx, s).is_ok());
        }
    }
}
