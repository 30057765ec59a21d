//! The shared-memory transport under the core protocol engine.
//!
//! [`tandem_core::proto::Engine`] decides everything about matching,
//! credits and rendezvous; this module moves the bytes it asks for over
//! one channel per directed pair of ranks:
//!
//! * the **line ring** carries every header. An eager payload (up to
//!   `eager_limit`) follows its header in the same lines; an RTS carries the
//!   sender's buffer address as an 8-byte body;
//! * a rendezvous payload goes **single-copy**: the receiver, once a
//!   receive matched, reads the sender's buffer directly with
//!   `process_vm_readv` (Linux cross-memory attach) and answers FIN. If the kernel refuses (no
//!   ptrace permission, a seccomp filter) or `TANDEM_CMA=0`, it answers CTS
//!   instead and the sender streams the payload through the **slot ring**,
//!   cut into slot-sized chunks and pipelined; streams run in CTS order.
//!
//! A message that arrives before its receive is held in one of the
//! receiver's entries (one per credit and sender): eager payloads in the
//! entry's `eager_limit`-byte buffer, rendezvous messages as their header
//! only. Senders without credit wait, so memory stays bounded and nothing
//! is dropped.
//!
//! All storage (operation table, entries and their buffers, stream queues)
//! is allocated when the engine is built; steady-state messaging allocates
//! nothing.
//!
//! User buffers are reached through raw pointers recorded when an operation
//! is posted. They are valid because every operation is either waited for
//! or withdrawn before the borrow it came from ends (blocking calls, or the
//! end of a [`crate::Scope`]); only this process writes them, and a peer
//! process only ever *reads* a send buffer (cross-memory attach), while the
//! send that owns it is still pending.

use crate::config::{debug_level, Config, DebugLevel, Layout};
use crate::error::{Error, OpKind, Result};
use crate::shm::{JobMap, WAIT_VALID};
use std::collections::VecDeque;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use tandem_core::line_ring::{lines_for, LineConsumer, LineProducer, LINE_PAYLOAD};
use tandem_core::proto::{
    self, Action, Entry, Handle, Op, OpError, OpInfo, Params, Phase, Taken, TxWhat,
};
use tandem_core::slot_ring::{SlotConsumer, SlotProducer};
use tandem_core::sync::Ordering;
use tandem_core::wire::{Header, Kind, Limits, HEADER_LEN};

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

/// Driver-side state of an operation: its buffer and bookkeeping.
#[derive(Clone, Copy)]
struct Side {
    ptr: *mut u8,
    len: usize,
    /// Payload bytes moved so far (the progress measure for timeouts).
    moved: usize,
    scope: u32,
}

impl Side {
    const EMPTY: Side = Side {
        ptr: std::ptr::null_mut(),
        len: 0,
        moved: 0,
        scope: 0,
    };

    /// The user's buffer as bytes to read.
    ///
    /// # Safety
    /// The op must be pending and not abandoned; its buffer borrow is then
    /// alive (see module docs) and nothing writes it during the engine call.
    unsafe fn src<'b>(&self) -> &'b [u8] {
        if self.len == 0 || self.ptr.is_null() {
            return &[];
        }
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The user's buffer as bytes to write.
    ///
    /// # Safety
    /// As for [`Side::src`], and the op is a receive (an exclusive borrow).
    #[allow(clippy::mut_from_ref)]
    unsafe fn dst<'b>(&self) -> &'b mut [u8] {
        if self.len == 0 || self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A payload stream through the slot ring.
#[derive(Clone, Copy)]
struct Stream {
    /// `None`: its receive was abandoned; drain and drop the bytes.
    op: Option<Handle>,
    len: usize,
    done: usize,
}

struct Chan {
    tx_line: LineProducer<'static>,
    tx_slot: SlotProducer<'static>,
    rx_line: LineConsumer<'static>,
    rx_slot: SlotConsumer<'static>,
    /// Sends streaming to this peer, in CTS order.
    tx_streams: VecDeque<Stream>,
    /// Receives expecting a stream from this peer, in CTS order.
    rx_streams: VecDeque<Stream>,
    /// Set once the channel cannot be used any more.
    broken: Option<Error>,
    /// Cross-memory attach to this peer refused once: stream instead.
    no_cma: bool,
    pid: u32,
    pidfd: Option<OwnedFd>,
}

type Proto = proto::Engine<Box<[Op]>, Box<[Entry]>, Box<[proto::Peer]>, Box<[u32]>>;

/// The engine of one rank.
pub(crate) struct Engine {
    rank: usize,
    // `chans` borrows `map` (for 'static), so it is declared first and
    // dropped first.
    chans: Vec<Chan>,
    proto: Proto,
    side: Vec<Side>,
    /// `eager_limit` bytes per protocol entry, for unexpected eager payloads.
    slots: Vec<u8>,
    limits: Limits,
    eager_limit: usize,
    slot_bytes: usize,
    cma: bool,
    cma_min: usize,
    debug: bool,
    trace: bool,
    own_pid: u32,
    map: Arc<JobMap>,
}

// SAFETY: the raw pointers in `Side` are only dereferenced inside engine
// calls, which the owning `Comm` serialises behind a lock; the buffers they
// point to are kept alive by the borrow rules of `Comm` and `Scope`.
unsafe impl Send for Engine {}

/// Largest message tandem accepts (1 TiB): a corrupt length field can never
/// make a receiver wait for (or allocate) more.
pub const MAX_MESSAGE: usize = 1 << 40;

/// Number of communication contexts a job may use.
pub const MAX_CONTEXTS: u16 = 1024;

impl Engine {
    pub(crate) fn new(map: Arc<JobMap>, rank: usize, cfg: &Config) -> Result<Self> {
        let n = map.nranks();
        let layout: Layout = *map.layout();
        let q = cfg.max_requests.clamp(1, proto::MAX_OPS);
        let credits = layout.credits as usize;
        let envelopes = layout.envelopes as usize;
        let chans = (0..n)
            .map(|p| {
                let (tx_line, tx_slot) = map.channel(rank, p);
                let (rx_line, rx_slot) = map.channel(p, rank);
                Chan {
                    tx_line: tx_line.producer(),
                    tx_slot: tx_slot.producer(),
                    rx_line: rx_line.consumer(),
                    rx_slot: rx_slot.consumer(),
                    tx_streams: VecDeque::with_capacity(q),
                    rx_streams: VecDeque::with_capacity(q),
                    broken: None,
                    no_cma: false,
                    pid: 0,
                    pidfd: None,
                }
            })
            .collect();
        let params = Params {
            rank: rank as u32,
            nranks: n as u32,
            credits: credits as u16,
            envelopes: envelopes as u16,
            credit_threshold: (credits as u16).div_ceil(2),
            eager_limit: layout.eager_limit as u64,
            seq_start: 0,
        };
        let proto = Proto::new(
            params,
            vec![Op::EMPTY; q].into_boxed_slice(),
            vec![Entry::EMPTY; n * envelopes].into_boxed_slice(),
            vec![proto::Peer::EMPTY; n].into_boxed_slice(),
            vec![0u32; n * credits].into_boxed_slice(),
        )
        .map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self {
            rank,
            chans,
            proto,
            side: vec![Side::EMPTY; q],
            slots: vec![0u8; n * credits * layout.eager_limit as usize],
            limits: Limits {
                eager_max: layout.eager_limit as u64,
                msg_max: MAX_MESSAGE as u64,
                contexts: MAX_CONTEXTS,
            },
            eager_limit: layout.eager_limit as usize,
            slot_bytes: layout.slot_bytes as usize,
            cma: cfg.cma,
            cma_min: cfg.cma_min,
            debug: debug_level() >= DebugLevel::Info,
            trace: debug_level() >= DebugLevel::Trace,
            own_pid: std::process::id(),
            map,
        })
    }

    fn check_rank(&self, r: usize) -> Result<()> {
        if r >= self.chans.len() {
            return Err(Error::InvalidRank {
                rank: r,
                size: self.chans.len(),
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
            other => Error::Config(other.to_string()),
        }
    }

    /// The error operations with a failed peer report.
    fn lost(&self, p: usize) -> Error {
        self.chans
            .get(p)
            .and_then(|c| c.broken.clone())
            .unwrap_or(Error::PeerLost { rank: p })
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
        if buf.len() > MAX_MESSAGE {
            return Err(Error::MessageTooLarge {
                len: buf.len(),
                max: MAX_MESSAGE,
            });
        }
        if let Some(e) = &self.chans[dst].broken {
            return Err(e.clone());
        }
        let h = self
            .proto
            .post_send(dst as u32, ctx, tag, buf.len() as u64, sync)
            .map_err(|e| self.proto_err(e))?;
        self.side[h.index()] = Side {
            ptr: buf.as_ptr() as *mut u8,
            len: buf.len(),
            moved: 0,
            scope,
        };
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
        let (h, copy) = self
            .proto
            .post_recv(src, ctx, tag, buf.len() as u64)
            .map_err(|e| self.proto_err(e))?;
        self.side[h.index()] = Side {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            moved: 0,
            scope,
        };
        if let Some(c) = copy {
            let n = c.len as usize;
            let at = c.slot * self.eager_limit;
            buf[..n].copy_from_slice(&self.slots[at..at + n]);
            self.side[h.index()].moved = n;
        }
        self.pulls();
        Ok(h)
    }

    /// Blocking-send fast path: an eager message goes straight into the
    /// line ring when nothing is queued ahead of it for `dst`, credits
    /// allow and the ring has room; no operation is recorded. `false`: take
    /// the general path.
    #[inline]
    pub(crate) fn try_send_now(&mut self, buf: &[u8], dst: usize, ctx: u16, tag: u32) -> bool {
        if dst >= self.chans.len() || buf.len() > self.eager_limit {
            return false;
        }
        let ch = &mut self.chans[dst];
        let lines = lines_for(HEADER_LEN + buf.len()) as u64;
        if ch.broken.is_some() || ch.tx_line.free(lines) < lines {
            return false;
        }
        let Some(h) = self.proto.eager_now(dst as u32, ctx, tag, buf.len() as u64) else {
            return false;
        };
        let wrote = ch.tx_line.try_write(&h.encode(), buf);
        debug_assert!(wrote, "room was checked");
        true
    }

    /// Blocking-receive fast path: when no receive is posted and nothing
    /// buffered matches, an in-order eager message from `src` with `tag` at
    /// the head of its line ring is copied straight into `buf`; no
    /// operation is recorded.
    #[inline]
    pub(crate) fn try_recv_now(&mut self, buf: &mut [u8], src: usize, ctx: u16, tag: u32) -> Fast {
        let Some(ch) = self.chans.get_mut(src) else {
            return Fast::Fallback;
        };
        if ch.broken.is_some() {
            return Fast::Fallback;
        }
        let mut line = [0u8; LINE_PAYLOAD];
        if !ch.rx_line.peek_line(&mut line) {
            return Fast::NotYet;
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
        if HEADER_LEN + len > LINE_PAYLOAD && !ch.rx_line.message_ready(HEADER_LEN, len) {
            return Fast::NotYet;
        }
        match self.proto.eager_recv_now(src as u32, ctx, tag, &h) {
            Ok(true) => {}
            // The general path reports a protocol error properly.
            Ok(false) | Err(_) => return Fast::Fallback,
        }
        let n = len.min(buf.len());
        if HEADER_LEN + len <= LINE_PAYLOAD {
            buf[..n].copy_from_slice(&line[HEADER_LEN..HEADER_LEN + n]);
            ch.rx_line.consume_peeked_line();
        } else {
            let read = ch.rx_line.try_read(HEADER_LEN, len, &mut buf[..n]);
            debug_assert!(read, "readiness was checked");
        }
        if self.proto.credit_owed(src as u32) {
            // A credit return is due (a receiver that never answers).
            self.progress_tx(src);
        }
        Fast::Done(if len > buf.len() {
            Err(Error::Truncated {
                needed: len,
                got: buf.len(),
            })
        } else {
            Ok(Status {
                source: src,
                tag: h.tag,
                len,
            })
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

    /// Whether rank `p` is known dead (for waits that hold no operation).
    pub(crate) fn is_dead(&mut self, p: usize) -> bool {
        p != self.rank && p < self.chans.len() && self.peer_dead(p)
    }

    /// One pass over every channel; `true` if anything moved.
    pub(crate) fn progress(&mut self) -> bool {
        let mut did = false;
        for p in 0..self.chans.len() {
            did |= self.progress_rx(p);
            did |= self.progress_tx(p);
        }
        did
    }

    fn progress_tx(&mut self, p: usize) -> bool {
        let mut did = false;
        let ch = &mut self.chans[p];
        if ch.broken.is_some() {
            return false;
        }
        while let Some(tx) = self.proto.next_tx(p as u32) {
            let hb = tx.header.encode();
            let ok = match tx.what {
                TxWhat::Payload(h) => {
                    let s = &mut self.side[h.index()];
                    // SAFETY: a queued send is pending (see module docs).
                    let payload = unsafe { s.src() };
                    s.moved = payload.len();
                    ch.tx_line.try_write(&hb, payload)
                }
                TxWhat::Rts(h) => {
                    let addr = self.side[h.index()].ptr as u64;
                    ch.tx_line.try_write(&hb, &addr.to_le_bytes())
                }
                TxWhat::Cts(_) | TxWhat::Control => ch.tx_line.try_write(&hb, &[]),
            };
            if !ok {
                break;
            }
            if let TxWhat::Cts(h) = tx.what {
                ch.rx_streams.push_back(Stream {
                    op: Some(h),
                    len: tx.header.len as usize,
                    done: 0,
                });
            }
            self.proto.tx_done(p as u32, &tx);
            did = true;
        }
        did | self.stream_out(p)
    }

    /// Pushes the front send streams' payload into the slot ring.
    fn stream_out(&mut self, p: usize) -> bool {
        let slot = self.slot_bytes;
        let ch = &mut self.chans[p];
        let mut did = false;
        while let Some(st) = ch.tx_streams.front_mut() {
            let h = st.op.expect("send streams always have their op");
            let side = &mut self.side[h.index()];
            // SAFETY: a streaming send is pending (see module docs).
            let payload = unsafe { side.src() };
            while st.done < st.len {
                let n = slot.min(st.len - st.done);
                if !ch.tx_slot.try_push(&payload[st.done..st.done + n]) {
                    return did;
                }
                st.done += n;
                side.moved = st.done;
                did = true;
            }
            ch.tx_streams.pop_front();
            self.proto.stream_done(h);
        }
        did
    }

    /// Moves payload of the front receive streams out of the slot ring.
    fn stream_in(&mut self, p: usize) -> bool {
        let slot = self.slot_bytes;
        let ch = &mut self.chans[p];
        let mut did = false;
        while let Some(st) = ch.rx_streams.front_mut() {
            while st.done < st.len {
                let n = slot.min(st.len - st.done);
                let ok = match st.op {
                    Some(h) => {
                        let side = &mut self.side[h.index()];
                        // SAFETY: a streaming receive is pending.
                        let dst = unsafe { side.dst() };
                        let ok = ch.rx_slot.try_pop(&mut dst[st.done..st.done + n]);
                        if ok {
                            side.moved = st.done + n;
                        }
                        ok
                    }
                    None => ch.rx_slot.try_skip(),
                };
                if !ok {
                    return did;
                }
                st.done += n;
                did = true;
            }
            let st = ch.rx_streams.pop_front().expect("front exists");
            if let Some(h) = st.op {
                self.proto.stream_done(h);
            }
        }
        did
    }

    fn progress_rx(&mut self, p: usize) -> bool {
        let mut did = self.stream_in(p);
        loop {
            let ch = &mut self.chans[p];
            if ch.broken.is_some() {
                return did;
            }
            let mut first = [0u8; HEADER_LEN + 8];
            if !ch.rx_line.peek_prefix(&mut first) {
                break;
            }
            let h = match Header::decode(&first, &self.limits) {
                Ok(h) => h,
                Err(e) => return self.protocol_error(p, e),
            };
            let kind = h.kind();
            let body = match kind {
                Kind::Eager | Kind::EagerSync => h.len as usize,
                Kind::Rts => 8,
                _ => 0,
            };
            if !ch.rx_line.message_ready(HEADER_LEN, body) {
                break;
            }
            let addr = if kind == Kind::Rts {
                u64::from_le_bytes(first[HEADER_LEN..].try_into().expect("8 bytes"))
            } else {
                0
            };
            let (side, slots, el) = (&mut self.side, &self.slots, self.eager_limit);
            let act = self
                .proto
                .on_message(p as u32, &h, addr, &mut |c: proto::SlotCopy| {
                    let s = &mut side[c.op.index()];
                    // SAFETY: the receive just completed and was pending.
                    let dst = unsafe { s.dst() };
                    let n = c.len as usize;
                    dst[..n].copy_from_slice(&slots[c.slot * el..c.slot * el + n]);
                    s.moved = n;
                });
            let act = match act {
                Ok(a) => a,
                Err(e) => return self.protocol_error(p, e),
            };
            let ch = &mut self.chans[p];
            let read = match act {
                Action::Deliver { op, len } => {
                    let s = &mut self.side[op.index()];
                    // SAFETY: the receive was pending until this message.
                    let dst = unsafe { &mut s.dst()[..len as usize] };
                    s.moved = len as usize;
                    ch.rx_line.try_read(HEADER_LEN, body, dst)
                }
                Action::Store { slot } => {
                    let at = slot * self.eager_limit;
                    let dst = &mut self.slots[at..at + body];
                    ch.rx_line.try_read(HEADER_LEN, body, dst)
                }
                Action::None => ch.rx_line.try_read(HEADER_LEN, body, &mut []),
                Action::Stream { op, len, .. } => {
                    ch.tx_streams.push_back(Stream {
                        op: Some(op),
                        len: len as usize,
                        done: 0,
                    });
                    ch.rx_line.try_read(HEADER_LEN, body, &mut [])
                }
            };
            debug_assert!(read, "a message whose last line is ready");
            did = true;
        }
        did |= self.pulls();
        if did {
            // Answers (CTS, FIN, ACK, credit) may be due.
            self.progress_tx(p);
        }
        did
    }

    /// Serves matched rendezvous receives: pull the payload across with
    /// cross-memory attach, or ask the sender to stream it.
    fn pulls(&mut self) -> bool {
        let mut did = false;
        while let Some(pl) = self.proto.next_pull() {
            did = true;
            let p = pl.peer as usize;
            let n = pl.len as usize;
            let side = &mut self.side[pl.op.index()];
            // SAFETY: the receive is pending; we are its only writer.
            let dst = unsafe { &mut side.dst()[..n] };
            let pulled = self.cma
                && n >= self.cma_min
                && !self.chans[p].no_cma
                && match cma_read(self.peer_pid(p), pl.addr, dst) {
                    Ok(()) => true,
                    Err(e) => {
                        self.chans[p].no_cma = true;
                        if self.debug {
                            eprintln!(
                                "tandem[{}]: cross-memory attach from rank {p} refused ({e}); \
                                 streaming through the slot ring instead",
                                self.rank
                            );
                        }
                        false
                    }
                };
            if pulled {
                self.side[pl.op.index()].moved = n;
            }
            if self.trace {
                eprintln!(
                    "tandem[{}]: rendezvous {n} bytes from rank {p}: {}",
                    self.rank,
                    if pulled {
                        "single copy (process_vm_readv)"
                    } else {
                        "streamed through the slot ring"
                    }
                );
            }
            self.proto.pull_done(pl.op, pulled);
            self.progress_tx(p);
        }
        did
    }

    fn peer_pid(&mut self, p: usize) -> u32 {
        let ch = &mut self.chans[p];
        if ch.pid == 0 {
            ch.pid = self.map.pid_slot(p).load(Ordering::Acquire);
        }
        ch.pid
    }

    /// Peer `p` broke the protocol: its channel is unusable from now on.
    /// Returns `true` (something happened) for the progress loop.
    fn protocol_error(&mut self, p: usize, e: impl std::fmt::Display) -> bool {
        let detail = e.to_string();
        self.break_channel(p, Error::Protocol { peer: p, detail });
        true
    }

    /// Fails every pending operation with peer `p` and marks the channel
    /// broken. Eager messages already received stay receivable.
    fn break_channel(&mut self, p: usize, e: Error) {
        if self.debug {
            eprintln!("tandem[{}]: channel from/to rank {p} fails: {e}", self.rank);
        }
        let ch = &mut self.chans[p];
        if ch.broken.is_none() {
            ch.broken = Some(e);
        }
        ch.tx_streams.clear();
        for s in ch.rx_streams.iter_mut() {
            s.op = None;
        }
        self.proto.fail_peer(p as u32);
    }

    /// Whether rank `p`'s process is known to have exited.
    fn peer_dead(&mut self, p: usize) -> bool {
        let own = self.own_pid;
        let pid = self.peer_pid(p);
        let ch = &mut self.chans[p];
        // Not attached yet, or a thread of this very process.
        if pid == 0 || pid == own {
            return false;
        }
        if ch.pidfd.is_none() {
            // SAFETY: plain syscall; a returned descriptor is ours to own.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            if fd < 0 {
                let err = std::io::Error::last_os_error();
                // ESRCH: it is gone already. Anything else (an old kernel):
                // fall back to kill(pid, 0).
                if err.raw_os_error() == Some(libc::ESRCH) {
                    return true;
                }
                // SAFETY: signal 0 only checks for existence.
                return unsafe { libc::kill(pid as libc::pid_t, 0) } != 0;
            }
            // SAFETY: fd is a fresh descriptor we own.
            ch.pidfd = Some(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let fd = ch
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

    /// Checks the peers while operations are pending; a dead peer's channel
    /// is drained of what it sent before dying, then every operation still
    /// waiting on it fails with [`Error::PeerLost`].
    pub(crate) fn check_peers(&mut self) {
        if self.proto.in_use() == 0 {
            return;
        }
        for p in 0..self.chans.len() {
            if p != self.rank && self.chans[p].broken.is_none() && self.peer_dead(p) {
                self.progress_rx(p);
                self.break_channel(p, Error::PeerLost { rank: p });
            }
        }
    }

    /// The result of a finished operation, freeing its slot; `None` while
    /// it is pending. A stale id yields an error.
    pub(crate) fn take(&mut self, id: OpId) -> Option<Result<Status>> {
        match self.proto.take(id) {
            Taken::Pending => None,
            Taken::Done(r) => {
                self.side[id.index()] = Side::EMPTY;
                Some(match r {
                    Ok(s) => Ok(Status {
                        source: s.source as usize,
                        tag: s.tag,
                        len: s.len as usize,
                    }),
                    Err(OpError::Truncated { status, got }) => Err(Error::Truncated {
                        needed: status.len as usize,
                        got: got as usize,
                    }),
                    Err(OpError::Cancelled) => Err(Error::Cancelled),
                    Err(OpError::PeerLost { peer }) => Err(self.lost(peer as usize)),
                    Err(OpError::Stale) => Err(Error::Io("request already completed".into())),
                })
            }
        }
    }

    /// Bytes an operation has moved (to detect stalls).
    pub(crate) fn moved(&self, id: OpId) -> usize {
        self.side[id.index()].moved
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
                for ch in &mut self.chans {
                    for s in ch.rx_streams.iter_mut().filter(|s| s.op == Some(id)) {
                        s.op = None;
                    }
                }
            }
            _ => {}
        }
        self.side[id.index()] = Side::EMPTY;
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

    /// Number of operations in the table.
    pub(crate) fn in_use(&self) -> usize {
        self.proto.in_use()
    }

    /// Publishes (or clears, with `None`) what this rank is blocked in, for
    /// the hang reports of its peers.
    pub(crate) fn publish_wait(&self, what: Option<(OpKind, u16, usize, u32)>) {
        let slot = self.map.wait_slot(self.rank);
        match what {
            None => slot[0].store(0, Ordering::Relaxed),
            Some((op, ctx, peer, tag)) => {
                let kind = match op {
                    OpKind::Send => 1u64,
                    OpKind::Ssend => 2,
                    OpKind::Recv => 3,
                    OpKind::Probe => 4,
                };
                slot[1].store(tag as u64, Ordering::Relaxed);
                slot[0].store(
                    WAIT_VALID | kind << 48 | (ctx as u64) << 32 | (peer as u32) as u64,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// What rank `p` says it is blocked in, if anything.
    pub(crate) fn peer_wait(&self, p: usize) -> Option<(OpKind, usize, u32)> {
        let slot = self.map.wait_slot(p);
        let w = slot[0].load(Ordering::Relaxed);
        if w & WAIT_VALID == 0 {
            return None;
        }
        let op = match (w >> 48) & 0x7fff {
            1 => OpKind::Send,
            2 => OpKind::Ssend,
            3 => OpKind::Recv,
            _ => OpKind::Probe,
        };
        let peer = (w & 0xffff_ffff) as u32;
        let peer = if peer == ANY_SOURCE {
            usize::MAX
        } else {
            peer as usize
        };
        Some((op, peer, slot[1].load(Ordering::Relaxed) as u32))
    }
}

/// Outcome of a fast-path receive attempt.
pub(crate) enum Fast {
    /// Finished.
    Done(Result<Status>),
    /// Nothing has arrived yet; try again.
    NotYet,
    /// The general path must handle it.
    Fallback,
}

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst` with
/// `process_vm_readv` — also when `pid` is this process (ranks as threads):
/// the kernel validates the source range, so a sender that gave up on its
/// send and freed the buffer meanwhile makes this fail or read stale bytes,
/// never touch freed memory from Rust.
fn cma_read(pid: u32, addr: u64, dst: &mut [u8]) -> std::io::Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    if pid == 0 {
        return Err(std::io::Error::other("peer pid unknown"));
    }
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` is our exclusive buffer of that length; the kernel
        // validates `remote` against the peer's address space.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Err(std::io::Error::other("process_vm_readv made no progress"));
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn engine_pair() -> (Arc<JobMap>, Engine) {
        let map = Arc::new(JobMap::anon(2, &Layout::default()).unwrap());
        map.attach(0, std::process::id());
        map.attach(1, std::process::id());
        let e = Engine::new(map.clone(), 1, &Config::default()).unwrap();
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
        let (line, _) = map.channel(0, 1);
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

    #[test]
    fn rendezvous_within_one_process_is_single_copy() {
        let map = Arc::new(JobMap::anon(1, &Layout::default()).unwrap());
        map.attach(0, std::process::id());
        let mut e = Engine::new(map.clone(), 0, &Config::default().cma(true)).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut got = vec![0u8; 100_000];
        let s = e.post_send(&data, 0, 0, 3, false, 0).unwrap();
        let r = e.post_recv(&mut got, 0, 0, 3, 0).unwrap();
        assert_eq!(drive(&mut e, r).unwrap().len, 100_000);
        assert_eq!(drive(&mut e, s).unwrap().len, 100_000);
        assert_eq!(got, data);
        assert!(!e.chans[0].no_cma);
        assert!(e.chans[0].tx_streams.is_empty() && e.chans[0].rx_streams.is_empty());
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
        map.attach(0, std::process::id());
        let mut e = Engine::new(map, 0, &Config::default()).unwrap();
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
