//! RDMA between ranks: one reliable connection per peer, over any
//! [`QueuePair`] (the soft NIC in CI, verbs hardware on a cluster).
//!
//! **Nothing is ever sent into the unknown.** A SEND on RDMA needs a
//! receive the peer posted beforehand, or the peer's NIC answers
//! receiver-not-ready; tandem's queue pairs run with `rnr_retry = 0`, so a
//! single one would fail the link. The link is built so it cannot happen:
//!
//! * **Messages** (a header with an eager payload, an RTS, a CTS, a credit
//!   return) are RDMA-written into a *ring the receiver owns* (its inbox,
//!   registered once) at the position the sender computes, as one
//!   WRITE_WITH_IMM whose immediate is the position; its completion
//!   consumes one of the receiver's zero-length receives. The sender
//!   writes only into ring bytes the receiver has freed and only while it
//!   knows a receive is posted for the immediate: the receiver reports how
//!   far it has consumed its inbox and how many receives it has re-posted,
//!   piggybacked on every message it sends back, or with an RDMA WRITE of
//!   a *credit word* into the sender's memory when it has nothing to send
//!   (a plain write consumes no receive). This is the receiver-driven
//!   clear-to-send of NCCL's slot rings, on top of which tandem's protocol
//!   credits still bound what each peer may have outstanding.
//! * **Rendezvous, NCCL's way** (`TANDEM_RDMA_RNDV=write`, the default):
//!   the receiver's CTS, written into the sender's inbox, carries the
//!   receive buffer's address, length and rkey; the sender RDMA-WRITEs the
//!   payload straight into it in chunks and ends with a WRITE_WITH_IMM
//!   that tells the receiver (through one more posted receive) that it is
//!   all there.
//! * **Rendezvous by RDMA READ** (`TANDEM_RDMA_RNDV=read`): the RTS carries
//!   the send buffer's rkey, the receiver reads the payload itself and
//!   answers FIN when the read completes.
//!
//! Why the CTS travels in the inbox rather than in a separate FIFO polled
//! by the sender: a WRITE_WITH_IMM's completion is the only signal the RC
//! rules guarantee comes after the written bytes are in place; polling a
//! flag inside a plain RDMA WRITE relies on the NIC placing the bytes of
//! one write in order, which the specification does not promise. The
//! inbox is exactly a FIFO of descriptors the receiver posts into the
//! sender's memory, and keeping CTS in the one ring keeps it in order with
//! every other message, as the protocol engine requires.
//!
//! User buffers of rendezvous transfers are registered when their
//! descriptor is first handed out and deregistered when the operation
//! ends ([`Transport::release`]); the eager path uses only the rings,
//! registered once, so it never registers or allocates.

use super::fabric::Opcode;
use super::fabric::{
    Access, Caps, FabricError, Modify, MrKeys, QpAddr, QueuePair, RcAttrs, Remote, SendWr, Sge, Wc,
    WcOpcode, WcStatus, QP_ADDR_LEN,
};
use super::{Kind, Liveness, MemDesc, Peek, PullStart, Route, Transport, PEEK_LEN};
use crate::config::RdmaConfig;
use crate::error::Error;
use std::io::{Read, Write};
use tandem_core::sync::{AtomicU64, Ordering};
use tandem_core::wire::HEADER_LEN;

/// Bytes before each message's header in the ring: its length, a
/// sequence number and the sender's own consumption counters.
const PREFIX: usize = 24;
/// Ring positions are multiples of this.
const ALIGN: usize = 64;
/// Receives each side keeps posted for the other.
const RECVS: u32 = 512;
/// Largest RDMA WRITE of a rendezvous stream.
const CHUNK: usize = 1 << 20;
/// Stream writes in flight at once.
const CHUNKS_IN_FLIGHT: usize = 4;
/// Every this many message writes one is signaled (to retire the rest).
const SIGNAL_EVERY: u64 = 32;
/// Send-queue depth.
const SQ: u32 = 1024;
/// Top bit of an immediate: the end of a rendezvous stream.
const STREAM_END: u32 = 1 << 31;
/// While operations wait, a link is probed at most this often
/// ([`RdmaLink::keepalive`]).
const KEEPALIVE: std::time::Duration = std::time::Duration::from_millis(500);

/// What a signaled work request was for. Signaled completions arrive in
/// posting order, so these queue up in that order too.
#[derive(Debug, Clone, Copy)]
enum Sig {
    /// A message write (it retires the unsignaled ones before it).
    Msg,
    /// A stream write ending at this byte of the stream.
    Chunk(usize),
    /// An RDMA READ into the buffer at this address.
    Read(u64),
    /// A credit write.
    Credit,
    /// A keepalive probe.
    Probe,
}

pub use crate::config::Rendezvous;

/// Options of an RDMA link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaOptions {
    /// Queue-pair attributes; `rnr_retry` is [`RdmaConfig::rnr_retry`].
    pub attrs: RcAttrs,
    /// How rendezvous payloads cross.
    pub rendezvous: Rendezvous,
    /// Inbox ring bytes (at least 8 of the largest message).
    pub ring: usize,
}

impl RdmaOptions {
    /// The options for messages of at most `eager_limit` bytes of body,
    /// with the queue pairs' retries and the rendezvous `rdma` gives.
    ///
    /// # Errors
    /// What [`RdmaConfig::validate`] refuses (an `rnr_retry` above 7).
    pub fn new(eager_limit: usize, rdma: &RdmaConfig) -> Result<Self, Error> {
        rdma.validate()?;
        Ok(Self {
            attrs: RcAttrs {
                rnr_retry: rdma.rnr_retry,
                ..RcAttrs::default()
            },
            rendezvous: rdma.rendezvous,
            ring: ring_for(eager_limit),
        })
    }

    /// [`new`](Self::new) with the settings [`RdmaConfig::from_env`] reads
    /// (`TANDEM_RNR_RETRY`, `TANDEM_RDMA_RNDV`, ...).
    ///
    /// # Errors
    /// What [`RdmaConfig::from_env`] refuses.
    pub fn from_env(eager_limit: usize) -> Result<Self, Error> {
        Self::new(eager_limit, &RdmaConfig::from_env()?)
    }
}

fn max_msg(eager_limit: usize) -> usize {
    align(PREFIX + HEADER_LEN + eager_limit.max(super::DESC_LEN))
}

fn ring_for(eager_limit: usize) -> usize {
    (8 * max_msg(eager_limit))
        .max(256 * 1024)
        .next_power_of_two()
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The queue depths an RDMA link needs.
pub fn caps() -> Caps {
    Caps {
        max_send_wr: SQ,
        max_recv_wr: RECVS,
        cq_depth: SQ + RECVS + 64,
        max_rd_atomic: 16,
    }
}

/// What the two ends exchange before they connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hello {
    qp: QpAddr,
    inbox: Remote,
    credit: Remote,
    ring: u64,
    recvs: u32,
}

const HELLO_LEN: usize = QP_ADDR_LEN + 12 + 12 + 8 + 4 + 4;
const HELLO_MAGIC: u32 = 0x7464_7231; // "tdr1"

impl Hello {
    fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        let mut i = 4;
        let mut put = |x: &[u8]| {
            b[i..i + x.len()].copy_from_slice(x);
            i += x.len();
        };
        put(&self.qp.encode());
        put(&self.inbox.addr.to_le_bytes());
        put(&self.inbox.rkey.to_le_bytes());
        put(&self.credit.addr.to_le_bytes());
        put(&self.credit.rkey.to_le_bytes());
        put(&self.ring.to_le_bytes());
        put(&self.recvs.to_le_bytes());
        b
    }
    fn decode(b: &[u8; HELLO_LEN]) -> Option<Self> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != HELLO_MAGIC {
            return None;
        }
        let qa: &[u8; QP_ADDR_LEN] = b[4..4 + QP_ADDR_LEN].try_into().expect("len");
        let i = 4 + QP_ADDR_LEN;
        Some(Hello {
            qp: QpAddr::decode(qa),
            inbox: Remote {
                addr: u64_at(i),
                rkey: u32_at(i + 8),
            },
            credit: Remote {
                addr: u64_at(i + 12),
                rkey: u32_at(i + 20),
            },
            ring: u64_at(i + 24),
            recvs: u32_at(i + 32),
        })
    }
}

/// A registration of a user buffer: for one rendezvous, or pinned by the
/// user ([`crate::Comm::register`]) for as long as it holds it.
#[derive(Debug, Clone, Copy)]
struct Reg {
    addr: u64,
    len: usize,
    keys: MrKeys,
    writable: bool,
    /// Operations using it, plus one while pinned.
    refs: u32,
    pinned: bool,
}

/// The front rendezvous stream being written out.
#[derive(Debug, Clone, Copy)]
struct Out {
    /// The receiver's buffer.
    remote: u64,
    total: usize,
    /// Bytes posted and bytes whose writes completed.
    posted: usize,
    done: usize,
    /// Whether the final write (with the immediate) is posted.
    ended: bool,
}

/// Local memory registered once, aligned for the NIC and for atomics.
struct Region {
    words: Box<[AtomicU64]>,
    keys: MrKeys,
}

impl Region {
    fn new<Q: QueuePair>(qp: &mut Q, bytes: usize, acc: Access) -> Result<Self, FabricError> {
        let words: Box<[AtomicU64]> = (0..bytes.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        // SAFETY: the region lives in the link next to the queue pair,
        // which is dropped first (field order), so the memory outlives
        // every use the NIC makes of it.
        let keys = unsafe { qp.register(words.as_ptr() as u64, bytes, acc)? };
        Ok(Self { words, keys })
    }
    fn addr(&self) -> u64 {
        self.words.as_ptr() as u64
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: a view of the words as bytes. The NIC may write some of
        // them meanwhile (that is what the inbox is for); readers only look
        // at a message after the completion that says it is in place.
        unsafe {
            std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.words.len() * 8)
        }
    }
    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: only the staging ring is written through this view, by
        // this thread, in ring bytes the NIC no longer reads (the peer has
        // consumed them, so their write completed).
        unsafe {
            std::slice::from_raw_parts_mut(self.words.as_ptr() as *mut u8, self.words.len() * 8)
        }
    }
}

/// The RDMA link to one peer.
pub struct RdmaLink<Q: QueuePair> {
    // The queue pair comes first: it is dropped (its NIC stopped) before
    // the memory it was registered over.
    qp: Q,
    peer: usize,
    opts: RdmaOptions,
    max_msg: usize,
    /// This side's inbox, which the peer writes into.
    inbox: Region,
    /// Outgoing messages are built here at the position they take in the
    /// peer's inbox.
    stage: Region,
    /// The peer's consumption counters, written by the peer.
    credit_in: Region,
    /// Source of this side's credit writes.
    credit_out: Region,
    peer_inbox: Remote,
    peer_credit: Remote,
    ring: usize,
    recvs: u32,
    // Sender side.
    tx_pos: u64,
    tx_msgs: u64,
    peer_head: u64,
    peer_msgs: u64,
    posted: u64,
    retired: u64,
    last_signaled: u64,
    // Receiver side.
    rx_pos: u64,
    rx_msgs: u64,
    told_head: u64,
    told_msgs: u64,
    credit_busy: bool,
    rx_seq: u32,
    /// Receive completions polled but not yet consumed.
    wcs: [Wc; 32],
    wc_at: usize,
    wc_len: usize,
    /// The peeked message: ring offset, bytes after the header.
    front: Option<(usize, usize)>,
    out: Option<Out>,
    regs: Vec<Reg>,
    /// Signaled work requests outstanding: (posting index, purpose).
    sigs: std::collections::VecDeque<(u64, Sig)>,
    reads: usize,
    reads_done: Vec<(u64, bool)>,
    failed: Option<Error>,
    reaping: bool,
    tcp: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    /// When the last keepalive probe went out, and whether it is still
    /// unanswered.
    probed: Option<std::time::Instant>,
    probing: bool,
}

impl<Q: QueuePair> std::fmt::Debug for RdmaLink<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaLink")
            .field("peer", &self.peer)
            .field("fabric", &self.qp.fabric())
            .field("failed", &self.failed)
            .finish()
    }
}

fn fab(peer: usize, what: &str, e: FabricError) -> Error {
    match e {
        FabricError::NoDevice(s) => Error::Config(format!("no RDMA device: {s}")),
        e => Error::ChannelBroken {
            peer,
            reason: format!("RDMA {what}: {e}"),
        },
    }
}

impl<Q: QueuePair> RdmaLink<Q> {
    /// Connects `qp` (in RESET) to rank `peer`'s queue pair, exchanging
    /// addresses over `oob` (the bootstrap's authenticated connection),
    /// for messages of at most `eager_limit` bytes of body.
    ///
    /// # Errors
    /// * [`Error::ChannelBroken`] if the queue pair refuses a registration, a
    ///   state change or a receive, with the fabric's reason;
    /// * [`Error::Bootstrap`] if the exchange over `oob` fails (an I/O error,
    ///   or the peer sent no valid hello), or the peer's inbox ring differs
    ///   from this rank's (another `TANDEM_EAGER_LIMIT`).
    pub fn connect(
        mut qp: Q,
        oob: &mut (impl Read + Write),
        peer: usize,
        eager_limit: usize,
        opts: RdmaOptions,
    ) -> Result<Self, Error> {
        let f = |what: &'static str| move |e: FabricError| fab(peer, what, e);
        let ring = opts.ring.max(ring_for(eager_limit));
        let remote_w = Access {
            local_write: true,
            remote_write: true,
            remote_read: false,
        };
        let local = Access::default();
        let inbox = Region::new(&mut qp, ring, remote_w).map_err(f("registering the inbox"))?;
        let stage = Region::new(&mut qp, ring, local).map_err(f("registering the stage"))?;
        let credit_in = Region::new(&mut qp, 32, remote_w).map_err(f("registering credits"))?;
        let credit_out = Region::new(&mut qp, 32, local).map_err(f("registering credits"))?;
        qp.modify(Modify::Init).map_err(f("INIT"))?;
        for i in 0..RECVS {
            qp.post_recv(i as u64, None)
                .map_err(f("posting receives"))?;
        }
        let mine = Hello {
            qp: qp.local_addr(),
            inbox: Remote {
                addr: inbox.addr(),
                rkey: inbox.keys.rkey,
            },
            credit: Remote {
                addr: credit_in.addr(),
                rkey: credit_in.keys.rkey,
            },
            ring: ring as u64,
            recvs: RECVS,
        };
        let io = |e: std::io::Error| Error::Bootstrap(format!("RDMA hello with rank {peer}: {e}"));
        oob.write_all(&mine.encode()).map_err(io)?;
        let mut b = [0u8; HELLO_LEN];
        oob.read_exact(&mut b).map_err(io)?;
        let theirs = Hello::decode(&b)
            .ok_or_else(|| Error::Bootstrap(format!("rank {peer} sent no RDMA hello")))?;
        if theirs.ring != ring as u64 || theirs.recvs != RECVS {
            return Err(Error::Bootstrap(format!(
                "RDMA rings differ: rank {peer} has {} bytes and {} receives, this rank \
                 {ring} and {RECVS} (set TANDEM_EAGER_LIMIT alike on every rank)",
                theirs.ring, theirs.recvs
            )));
        }
        qp.modify(Modify::Rtr(theirs.qp, opts.attrs))
            .map_err(f("RTR"))?;
        qp.modify(Modify::Rts(opts.attrs)).map_err(f("RTS"))?;
        Ok(Self {
            qp,
            peer,
            opts,
            max_msg: max_msg(eager_limit),
            inbox,
            stage,
            credit_in,
            credit_out,
            peer_inbox: theirs.inbox,
            peer_credit: theirs.credit,
            ring,
            recvs: RECVS,
            tx_pos: 0,
            tx_msgs: 0,
            peer_head: 0,
            peer_msgs: 0,
            posted: 0,
            retired: 0,
            last_signaled: 0,
            rx_pos: 0,
            rx_msgs: 0,
            told_head: 0,
            told_msgs: 0,
            credit_busy: false,
            rx_seq: 0,
            wcs: [Wc::EMPTY; 32],
            wc_at: 0,
            wc_len: 0,
            front: None,
            out: None,
            regs: Vec::with_capacity(64),
            sigs: std::collections::VecDeque::with_capacity(SQ as usize),
            reads: 0,
            reads_done: Vec::with_capacity(64),
            failed: None,
            reaping: false,
            tcp: None,
            probed: None,
            probing: false,
        })
    }

    /// Records the TCP connection between the two ranks (this end, the
    /// peer's), for [`Route::Rdma`].
    pub fn set_tcp(&mut self, ends: (std::net::SocketAddr, std::net::SocketAddr)) {
        self.tcp = Some(ends);
    }

    /// The queue pair (tests force it into the error state).
    pub fn qp_mut(&mut self) -> &mut Q {
        &mut self.qp
    }

    /// Receiver-not-ready events on this link so far.
    pub fn rnr_events(&self) -> u64 {
        self.qp.rnr_events()
    }

    fn fail(&mut self, e: Error) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
    }

    fn wc_failed(&mut self, wc: &Wc) {
        // A flushed request only says the queue pair failed; the send
        // queue may hold the completion that says why: look there first.
        if wc.status == WcStatus::Flushed && self.failed.is_none() && !self.reaping {
            self.reaping = true;
            self.reap();
            self.reaping = false;
        }
        let peer = self.peer;
        let e = if self.qp.peer_gone() {
            Error::PeerLost { rank: peer }
        } else {
            Error::ChannelBroken {
                peer,
                reason: format!(
                    "RDMA work request failed on the {} fabric: {}",
                    self.qp.fabric(),
                    wc.status.name()
                ),
            }
        };
        self.fail(e);
    }

    /// Processes send-queue completions.
    fn reap(&mut self) {
        let mut wcs = [Wc::EMPTY; 16];
        loop {
            let n = match self.qp.poll_send(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    let e = fab(self.peer, "send completion queue", e);
                    self.fail(e);
                    0
                }
            };
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    self.wc_failed(wc);
                    continue;
                }
                while let Some(&(idx, sig)) = self.sigs.front() {
                    if idx > wc.wr_id {
                        break;
                    }
                    self.sigs.pop_front();
                    self.retired = self.retired.max(idx);
                    match sig {
                        Sig::Msg => {}
                        Sig::Chunk(end) => {
                            if let Some(o) = &mut self.out {
                                o.done = o.done.max(end);
                            }
                        }
                        Sig::Read(dst) => {
                            self.reads -= 1;
                            self.reads_done.push((dst, true));
                        }
                        Sig::Credit => self.credit_busy = false,
                        Sig::Probe => self.probing = false,
                    }
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        if self.failed.is_some() {
            // Reads that will never complete are reported failed.
            while let Some((_, sig)) = self.sigs.pop_front() {
                if let Sig::Read(dst) = sig {
                    self.reads -= 1;
                    self.reads_done.push((dst, false));
                }
            }
        }
    }

    fn sq_room(&self, n: u64) -> bool {
        self.posted - self.retired + n < SQ as u64 - 2
    }

    /// Posts `wr` as the next work request (its `wr_id` is set to the
    /// posting index); a signaled one is remembered as `sig`.
    fn post(&mut self, mut wr: SendWr, sig: Option<Sig>) -> bool {
        wr.wr_id = self.posted + 1;
        wr.signaled = sig.is_some();
        match self.qp.post_send(&wr) {
            Ok(()) => {
                self.posted += 1;
                if let Some(s) = sig {
                    self.sigs.push_back((self.posted, s));
                    self.last_signaled = self.posted;
                }
                true
            }
            Err(e) => {
                let e = fab(self.peer, "post", e);
                self.fail(e);
                false
            }
        }
    }

    /// Reads the peer's latest credit word.
    fn read_credit(&mut self) {
        let w = &self.credit_in.words;
        let (h, m, c) = (
            w[0].load(Ordering::Acquire),
            w[1].load(Ordering::Acquire),
            w[2].load(Ordering::Acquire),
        );
        // A half-written word does not check out; the next read will.
        if c == h ^ m ^ 0x7464_6372_6564_6974 {
            self.peer_head = self.peer_head.max(h);
            self.peer_msgs = self.peer_msgs.max(m);
        }
    }

    /// Receives the peer still has posted for this side.
    fn peer_recvs(&self) -> u64 {
        (self.recvs as u64).saturating_sub(self.tx_msgs - self.peer_msgs)
    }

    /// Where a message of `need` bytes goes: (padding, offset), if the
    /// peer's inbox has room for it and a receive for its immediate.
    fn place(&mut self, need: usize) -> Option<(usize, usize)> {
        let fit = |s: &Self| {
            let pos = (s.tx_pos % s.ring as u64) as usize;
            let pad = if s.ring - pos < need { s.ring - pos } else { 0 };
            let used = s.tx_pos + (pad + need) as u64 - s.peer_head;
            (used <= s.ring as u64 && s.peer_recvs() > 0 && s.sq_room(1))
                .then_some((pad, (pos + pad) % s.ring))
        };
        if let Some(p) = fit(self) {
            return Some(p);
        }
        self.read_credit();
        self.reap();
        fit(self)
    }

    /// Writes a message (prefix, header, body) into the peer's inbox.
    fn send_message(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let len = PREFIX + HEADER_LEN + body.len();
        let need = align(len);
        if need > self.max_msg {
            let reason = format!(
                "a message of {} bytes does not fit an RDMA slot",
                body.len()
            );
            self.fail(Error::ChannelBroken {
                peer: self.peer,
                reason,
            });
            return false;
        }
        let Some((pad, off)) = self.place(need) else {
            return false;
        };
        let st = &mut self.stage.bytes_mut()[off..off + len];
        st[..4].copy_from_slice(&(len as u32).to_le_bytes());
        st[4..8].copy_from_slice(&(self.tx_msgs as u32).to_le_bytes());
        st[8..16].copy_from_slice(&self.rx_pos.to_le_bytes());
        st[16..24].copy_from_slice(&self.rx_msgs.to_le_bytes());
        st[PREFIX..PREFIX + HEADER_LEN].copy_from_slice(header);
        st[PREFIX + HEADER_LEN..].copy_from_slice(body);
        let signaled = self.posted + 1 - self.last_signaled >= SIGNAL_EVERY;
        let wr = SendWr {
            wr_id: 0,
            op: Opcode::WriteImm(
                Remote {
                    addr: self.peer_inbox.addr + off as u64,
                    rkey: self.peer_inbox.rkey,
                },
                (off / ALIGN) as u32,
            ),
            sge: Some(Sge {
                addr: self.stage.addr() + off as u64,
                len: len as u32,
                lkey: self.stage.keys.lkey,
            }),
            signaled,
        };
        if !self.post(wr, signaled.then_some(Sig::Msg)) {
            return false;
        }
        self.tx_pos += (pad + need) as u64;
        self.tx_msgs += 1;
        self.told_head = self.rx_pos;
        self.told_msgs = self.rx_msgs;
        true
    }

    /// Tells the peer how far this side consumed, if it has fallen far
    /// enough behind that the peer could run short.
    fn maybe_credit(&mut self) {
        if self.credit_busy || self.failed.is_some() {
            return;
        }
        let bytes_owed = self.rx_pos - self.told_head;
        let msgs_owed = self.rx_msgs - self.told_msgs;
        if bytes_owed < (self.ring / 4) as u64 && msgs_owed < (self.recvs / 4) as u64 {
            return;
        }
        if !self.sq_room(1) {
            return;
        }
        let w = &self.credit_out.words;
        let (h, m) = (self.rx_pos, self.rx_msgs);
        w[0].store(h, Ordering::Relaxed);
        w[1].store(m, Ordering::Relaxed);
        w[2].store(h ^ m ^ 0x7464_6372_6564_6974, Ordering::Release);
        let wr = SendWr {
            wr_id: 0,
            op: Opcode::Write(self.peer_credit),
            sge: Some(Sge {
                addr: self.credit_out.addr(),
                len: 24,
                lkey: self.credit_out.keys.lkey,
            }),
            signaled: true,
        };
        if self.post(wr, Some(Sig::Credit)) {
            self.credit_busy = true;
            self.told_head = h;
            self.told_msgs = m;
        }
    }

    /// Probes the peer's queue pair while this side waits, so that a
    /// waiter which sends nothing still learns when that queue pair is
    /// gone (UCX's keepalive does the same). A queue pair in the error
    /// state answers nothing, and only a request this side sends can time
    /// out: a receiver waiting on a peer whose queue pair failed would
    /// otherwise wait for its deadline. The probe is a signaled
    /// zero-length RDMA WRITE to the peer's credit word: it places no
    /// bytes and consumes no receive; unanswered, it completes with
    /// `IBV_WC_RETRY_EXC_ERR` after the local ACK timeout and fails the
    /// link. At most one is outstanding, one per [`KEEPALIVE`].
    fn keepalive(&mut self) {
        if self.probing || self.failed.is_some() || !self.sq_room(1) {
            return;
        }
        let now = std::time::Instant::now();
        if self
            .probed
            .is_some_and(|t| now.duration_since(t) < KEEPALIVE)
        {
            return;
        }
        self.probed = Some(now);
        let wr = SendWr {
            wr_id: 0,
            op: Opcode::Write(self.peer_credit),
            sge: None,
            signaled: true,
        };
        if self.post(wr, Some(Sig::Probe)) {
            self.probing = true;
        }
    }

    /// The front receive completion, polling for more if none is cached.
    fn front_wc(&mut self) -> Option<Wc> {
        if self.wc_at == self.wc_len {
            self.wc_at = 0;
            self.wc_len = match self.qp.poll_recv(&mut self.wcs) {
                Ok(n) => n,
                Err(e) => {
                    let e = fab(self.peer, "receive completion queue", e);
                    self.fail(e);
                    0
                }
            };
        }
        (self.wc_at < self.wc_len).then(|| self.wcs[self.wc_at])
    }

    /// Done with the front receive completion: post its receive again.
    fn pop_wc(&mut self) {
        let wc = self.wcs[self.wc_at];
        self.wc_at += 1;
        self.rx_msgs += 1;
        self.rx_seq = self.rx_seq.wrapping_add(1);
        if let Err(e) = self.qp.post_recv(wc.wr_id, None) {
            let e = fab(self.peer, "re-posting a receive", e);
            self.fail(e);
        }
    }

    fn protocol(&mut self, detail: String) {
        let peer = self.peer;
        self.fail(Error::Protocol { peer, detail });
    }

    /// The first registration covering `addr..addr + len` with the access
    /// needed. Registrations are only ever appended and removed in place
    /// (never reordered), so an operation's `release` finds the one its
    /// `describe` used.
    fn reg_index(&self, addr: u64, len: usize, writable: bool) -> Option<usize> {
        self.regs.iter().position(|r| {
            r.addr <= addr
                && addr + len as u64 <= r.addr + r.len as u64
                && (r.writable || !writable)
        })
    }

    fn drop_reg(&mut self, i: usize) {
        let r = self.regs.remove(i);
        self.qp.deregister(r.keys.lkey);
    }

    /// Registers a user buffer for a rendezvous (or counts one more user of
    /// its registration).
    fn register_user(&mut self, addr: u64, len: usize, writable: bool) -> Option<MrKeys> {
        if let Some(i) = self.reg_index(addr, len.max(1), writable) {
            self.regs[i].refs += 1;
            return Some(self.regs[i].keys);
        }
        let acc = if writable {
            Access {
                local_write: true,
                remote_write: true,
                remote_read: false,
            }
        } else {
            Access::REMOTE_READ
        };
        // SAFETY: a buffer is registered only while an operation that owns
        // it is pending; the progress layer calls `release` when that
        // operation completes or is withdrawn, before the borrow of the
        // buffer ends, and `release` deregisters it.
        match unsafe { self.qp.register(addr, len.max(1), acc) } {
            Ok(keys) => {
                self.regs.push(Reg {
                    addr,
                    len: len.max(1),
                    keys,
                    writable,
                    refs: 1,
                    pinned: false,
                });
                Some(keys)
            }
            Err(e) => {
                let e = fab(self.peer, "registering a buffer", e);
                self.fail(e);
                None
            }
        }
    }
}

impl<Q: QueuePair> Transport for RdmaLink<Q> {
    fn room(&mut self, bytes: usize) -> bool {
        self.place(align(PREFIX + bytes)).is_some()
    }

    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        self.send_message(header, body)
    }

    fn flush(&mut self) {
        self.reap();
        self.maybe_credit();
    }

    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek {
        // Even after a failure (the peer left, one of this side's writes
        // was refused), what arrived before it is delivered: successful
        // receive completions stay queued ahead of the flushed ones.
        if matches!(self.failed, Some(Error::Protocol { .. })) {
            return Peek::Nothing;
        }
        let Some(wc) = self.front_wc() else {
            return Peek::Nothing;
        };
        if wc.status != WcStatus::Success {
            self.wc_failed(&wc);
            return Peek::Nothing;
        }
        let imm = match (wc.opcode, wc.imm) {
            (WcOpcode::RecvWriteImm, Some(i)) => i,
            _ => {
                self.protocol(format!("unexpected RDMA completion {:?}", wc.opcode));
                return Peek::Nothing;
            }
        };
        if imm & STREAM_END != 0 {
            return Peek::StreamData;
        }
        let off = imm as usize * ALIGN;
        let pos = (self.rx_pos % self.ring as u64) as usize;
        if off != pos && off != 0 {
            self.protocol(format!("RDMA message at ring offset {off}, expected {pos}"));
            return Peek::Nothing;
        }
        let ring = self.inbox.bytes();
        let len = u32::from_le_bytes(ring[off..off + 4].try_into().expect("4")) as usize;
        let seq = u32::from_le_bytes(ring[off + 4..off + 8].try_into().expect("4"));
        if len < PREFIX + HEADER_LEN || align(len) > self.max_msg || off + len > self.ring {
            self.protocol(format!("RDMA message of {len} bytes at offset {off}"));
            return Peek::Nothing;
        }
        if seq != self.rx_seq {
            self.protocol(format!(
                "RDMA message {seq} arrived where {} was due",
                self.rx_seq
            ));
            return Peek::Nothing;
        }
        let head = u64::from_le_bytes(ring[off + 8..off + 16].try_into().expect("8"));
        let msgs = u64::from_le_bytes(ring[off + 16..off + 24].try_into().expect("8"));
        self.peer_head = self.peer_head.max(head.min(self.tx_pos));
        self.peer_msgs = self.peer_msgs.max(msgs.min(self.tx_msgs));
        let n = (len - PREFIX).min(PEEK_LEN);
        out[..n].copy_from_slice(&ring[off + PREFIX..off + PREFIX + n]);
        out[n..].fill(0);
        self.front = Some((off, len - PREFIX - HEADER_LEN));
        Peek::Header
    }

    fn body_ready(&mut self, body: usize) -> bool {
        match self.front {
            Some((_, have)) if body <= have => true,
            Some((_, have)) => {
                self.protocol(format!(
                    "header announces {body} body bytes, {have} arrived"
                ));
                false
            }
            None => false,
        }
    }

    fn consume(&mut self, _peeked: &[u8; PEEK_LEN], _body: usize, dst: &mut [u8]) -> bool {
        let Some((off, have)) = self.front.take() else {
            return false;
        };
        let at = off + PREFIX + HEADER_LEN;
        let n = dst.len().min(have);
        dst[..n].copy_from_slice(&self.inbox.bytes()[at..at + n]);
        let pos = (self.rx_pos % self.ring as u64) as usize;
        if off != pos {
            self.rx_pos += (self.ring - pos) as u64;
        }
        self.rx_pos += align(PREFIX + HEADER_LEN + have) as u64;
        self.pop_wc();
        true
    }

    fn stream_out(&mut self, remote: &MemDesc, offset: usize, src: &[u8]) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        let total = offset + src.len();
        let o = match self.out {
            Some(o) => o,
            None => Out {
                remote: remote.addr,
                total,
                posted: offset,
                done: offset,
                ended: false,
            },
        };
        self.out = Some(o);
        if remote.len < total as u64 {
            self.protocol(format!(
                "CTS offers {} bytes for a {total}-byte stream",
                remote.len
            ));
            return 0;
        }
        let base = src.as_ptr() as u64 - offset as u64;
        let Some(keys) = self
            .reg_index(src.as_ptr() as u64, src.len(), false)
            .map(|i| self.regs[i].keys)
        else {
            let reason = "a rendezvous send buffer was not registered".to_string();
            self.fail(Error::ChannelBroken {
                peer: self.peer,
                reason,
            });
            return 0;
        };
        self.reap();
        let mut o = self.out.expect("set above");
        let rkey = remote.key as u32;
        while !o.ended && o.posted - o.done < CHUNKS_IN_FLIGHT * CHUNK {
            let n = (o.total - o.posted).min(CHUNK);
            let last = o.posted + n == o.total;
            if !self.sq_room(1) || (last && self.peer_recvs() == 0) {
                self.read_credit();
                if !self.sq_room(1) || (last && self.peer_recvs() == 0) {
                    break;
                }
            }
            let dst = Remote {
                addr: o.remote + o.posted as u64,
                rkey,
            };
            let op = if last {
                Opcode::WriteImm(dst, STREAM_END | (self.tx_msgs as u32 & !STREAM_END))
            } else {
                Opcode::Write(dst)
            };
            let wr = SendWr {
                wr_id: 0,
                op,
                sge: (n > 0).then_some(Sge {
                    addr: base + o.posted as u64,
                    len: n as u32,
                    lkey: keys.lkey,
                }),
                signaled: true,
            };
            if !self.post(wr, Some(Sig::Chunk(o.posted + n))) {
                return 0;
            }
            o.posted += n;
            if last {
                o.ended = true;
                self.tx_msgs += 1;
            }
            if n == 0 {
                // A zero-length final write completes nothing to count.
                break;
            }
        }
        // Completions counted by `reap` update `self.out.done`.
        let done = self.out.map_or(o.done, |x| x.done);
        o.done = done;
        let gained = o.done.saturating_sub(offset).min(src.len());
        if o.ended && o.done >= o.total {
            self.out = None;
            return src.len();
        }
        self.out = Some(o);
        gained
    }

    fn stream_in(&mut self, left: usize, _dst: Option<&mut [u8]>) -> usize {
        match self.front_wc() {
            Some(wc) if wc.status == WcStatus::Success => match wc.imm {
                Some(i) if i == STREAM_END | (self.rx_seq & !STREAM_END) => {
                    self.pop_wc();
                    left
                }
                // A message comes first: the stream's end is behind it.
                Some(i) if i & STREAM_END == 0 => 0,
                other => {
                    self.protocol(format!(
                        "RDMA stream end {other:?} arrived where number {} was due",
                        self.rx_seq & !STREAM_END
                    ));
                    0
                }
            },
            _ => 0,
        }
    }

    fn describe(&mut self, buf: &[u8], writable: bool) -> MemDesc {
        let addr = buf.as_ptr() as u64;
        if buf.is_empty() {
            // Nothing to reach: no registration (an empty slice's address
            // may dangle, or name a byte another borrow owns), and
            // `release` of an empty buffer does nothing either.
            return MemDesc {
                addr,
                len: 0,
                key: 0,
            };
        }
        let key = self
            .register_user(addr, buf.len(), writable)
            .map_or(0, |k| k.rkey as u64);
        MemDesc {
            addr,
            len: buf.len() as u64,
            key,
        }
    }

    fn release(&mut self, addr: u64, len: usize, writable: bool) {
        if len == 0 {
            return;
        }
        let Some(i) = self.reg_index(addr, len, writable) else {
            return;
        };
        self.regs[i].refs -= 1;
        if self.regs[i].refs == 0 {
            self.drop_reg(i);
        }
    }

    fn pin(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let addr = buf.as_ptr() as u64;
        let len = buf.len().max(1);
        // SAFETY: `Comm::register` holds the exclusive borrow of `buf` for
        // as long as the pin lasts and unpins before the borrow ends;
        // operations still using the registration then hold their own
        // borrows of the buffer, which end before it can go away.
        match unsafe { self.qp.register(addr, len, Access::ALL) } {
            Ok(keys) => {
                self.regs.push(Reg {
                    addr,
                    len,
                    keys,
                    writable: true,
                    refs: 1,
                    pinned: true,
                });
                Ok(())
            }
            Err(e) => Err(fab(self.peer, "registering a buffer", e)),
        }
    }

    fn unpin(&mut self, addr: u64) {
        let Some(i) = self.regs.iter().position(|r| r.pinned && r.addr == addr) else {
            return;
        };
        self.regs[i].pinned = false;
        self.regs[i].refs -= 1;
        if self.regs[i].refs == 0 {
            self.drop_reg(i);
        }
    }

    fn start_pull(&mut self, remote: MemDesc, dst: &mut [u8]) -> PullStart {
        if self.opts.rendezvous != Rendezvous::Read || self.failed.is_some() || remote.key == 0 {
            return PullStart::Unsupported;
        }
        if !self.sq_room(1) || self.reads >= 16 {
            return PullStart::Unsupported;
        }
        let addr = dst.as_ptr() as u64;
        let Some(keys) = self.register_user(addr, dst.len(), true) else {
            return PullStart::Unsupported;
        };
        let wr = SendWr {
            wr_id: 0,
            op: Opcode::Read(Remote {
                addr: remote.addr,
                rkey: remote.key as u32,
            }),
            sge: (!dst.is_empty()).then_some(Sge {
                addr,
                len: dst.len() as u32,
                lkey: keys.lkey,
            }),
            signaled: true,
        };
        if !self.post(wr, Some(Sig::Read(addr))) {
            return PullStart::Unsupported;
        }
        self.reads += 1;
        PullStart::Pending
    }

    fn poll_pulls(&mut self, done: &mut dyn FnMut(u64, bool)) {
        self.reap();
        for (dst, ok) in self.reads_done.drain(..) {
            done(dst, ok);
        }
    }

    fn liveness(&mut self) -> Liveness {
        self.reap();
        if let Some(e) = &self.failed {
            return Liveness::Lost(e.clone());
        }
        if self.qp.peer_gone() {
            return Liveness::Lost(Error::PeerLost { rank: self.peer });
        }
        self.keepalive();
        Liveness::Alive
    }

    fn places_directly(&self) -> bool {
        true
    }

    fn kind(&self) -> Kind {
        Kind::Rdma
    }

    fn route(&self) -> Route {
        Route::Rdma {
            qpn: self.qp.local_addr().qpn,
            tcp: self.tcp,
        }
    }
}

impl<Q: QueuePair> Drop for RdmaLink<Q> {
    fn drop(&mut self) {
        // Let what this side sent reach the peer before the connection
        // goes: a peer still receiving must get it. One signaled zero-length
        // write retires the unsignaled tail.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        self.reap();
        if self.failed.is_none() && !self.qp.peer_gone() && self.last_signaled < self.posted {
            let wr = SendWr {
                wr_id: 0,
                op: Opcode::Write(self.peer_credit),
                sge: None,
                signaled: true,
            };
            self.post(wr, Some(Sig::Msg));
        }
        while self.posted > self.retired && self.failed.is_none() && !self.qp.peer_gone() {
            if std::time::Instant::now() >= end {
                break;
            }
            std::thread::yield_now();
            self.reap();
        }
        self.qp.drain(std::time::Duration::from_secs(1));
        let rnr = self.qp.rnr_events();
        if rnr > 0 {
            eprintln!(
                "tandem: RDMA link to rank {} saw {rnr} receiver-not-ready event(s)",
                self.peer
            );
        }
        for r in std::mem::take(&mut self.regs) {
            self.qp.deregister(r.keys.lkey);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::fabric::soft::{SoftOptions, SoftQp, Wire};
    use super::*;

    /// Two links connected through the soft NIC inside this process.
    pub(crate) fn pair(
        eager: usize,
        rendezvous: Rendezvous,
    ) -> (RdmaLink<SoftQp>, RdmaLink<SoftQp>) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (wa, wb) = (
            Wire::Unix(a.try_clone().unwrap()),
            Wire::Unix(b.try_clone().unwrap()),
        );
        let opts = RdmaOptions {
            attrs: RcAttrs::default(),
            rendezvous,
            ring: 0,
        };
        let t = std::thread::spawn(move || {
            let mut b = b;
            let qp = SoftQp::new(wb, caps(), SoftOptions::default()).unwrap();
            RdmaLink::connect(qp, &mut b, 0, eager, opts).unwrap()
        });
        let mut a = a;
        let qp = SoftQp::new(wa, caps(), SoftOptions::default()).unwrap();
        let la = RdmaLink::connect(qp, &mut a, 1, eager, opts).unwrap();
        (la, t.join().unwrap())
    }

    fn recv_one(l: &mut RdmaLink<SoftQp>, dst: &mut [u8]) -> [u8; PEEK_LEN] {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut out = [0u8; PEEK_LEN];
        loop {
            assert!(std::time::Instant::now() < end, "nothing arrived: {l:?}");
            match l.peek(&mut out) {
                Peek::Header => break,
                Peek::Nothing => std::thread::yield_now(),
                Peek::StreamData => panic!("stream data"),
            }
        }
        assert!(l.body_ready(dst.len()));
        assert!(l.consume(&out, dst.len(), dst), "read whole");
        out
    }

    #[test]
    fn the_inbox_holds_eight_of_the_largest_message() {
        for e in [0, 1, 64, 4096, 8192, 40_000, 65_536, 1 << 20] {
            let (m, r) = (max_msg(e), ring_for(e));
            assert!(m >= PREFIX + HEADER_LEN + e && m % ALIGN == 0, "{e}: {m}");
            assert!(
                r >= 8 * m && r >= 256 * 1024 && r.is_power_of_two(),
                "{e}: {r}"
            );
        }
    }

    /// A peer whose inbox ring or receive count differs (another
    /// `TANDEM_EAGER_LIMIT`, another build) is refused at connection with
    /// an error that says so, whichever of the two differs.
    #[test]
    fn connect_refuses_a_peer_with_other_rings_or_receives() {
        let eager = 8192;
        let ring = ring_for(eager) as u64;
        for (their_ring, their_recvs) in [(ring * 2, RECVS), (ring, RECVS + 1), (ring, RECVS - 1)] {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let (w, _keep) = std::os::unix::net::UnixStream::pair().unwrap();
            let fake = std::thread::spawn(move || {
                let mut b = b;
                let mut h = [0u8; HELLO_LEN];
                b.read_exact(&mut h).unwrap();
                let mut theirs = Hello::decode(&h).expect("a hello");
                theirs.ring = their_ring;
                theirs.recvs = their_recvs;
                b.write_all(&theirs.encode()).unwrap();
                b
            });
            let opts = RdmaOptions {
                attrs: RcAttrs::default(),
                rendezvous: Rendezvous::Write,
                ring: 0,
            };
            let qp = SoftQp::new(Wire::Unix(w), caps(), SoftOptions::default()).unwrap();
            let mut a = a;
            let e = RdmaLink::connect(qp, &mut a, 1, eager, opts).unwrap_err();
            assert!(
                matches!(&e, Error::Bootstrap(m) if m.contains("RDMA rings differ")),
                "{their_ring} bytes, {their_recvs} receives: {e}"
            );
            drop(fake.join().unwrap());
        }
    }

    /// The connection hello's bytes are a wire format: ranks built from
    /// different commits of this layout must read each other's, so its
    /// length and every field's offset are pinned here, byte for byte.
    #[test]
    fn the_hello_wire_format_is_pinned() {
        let h = Hello {
            qp: QpAddr {
                lid: 0x0201,
                gid: core::array::from_fn(|i| 0x10 + i as u8),
                qpn: 0x2423_2221,
                psn: 0x2827_2625,
                mtu: 4096,
            },
            inbox: Remote {
                addr: 0x3837_3635_3433_3231,
                rkey: 0x3c3b_3a39,
            },
            credit: Remote {
                addr: 0x4847_4645_4443_4241,
                rkey: 0x4c4b_4a49,
            },
            ring: 0x5857_5655_5453_5251,
            recvs: 0x5c5b_5a59,
        };
        let b = h.encode();
        assert_eq!(b.len(), 70);
        let mut want = Vec::from(*b"1rdt");
        want.extend([1, 2]);
        want.extend(0x10..0x20);
        want.extend([0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]);
        want.extend(4096u32.to_le_bytes());
        want.extend(0x31..=0x3c);
        want.extend(0x41..=0x4c);
        want.extend(0x51..=0x5c);
        assert_eq!(&b[..], &want[..]);
        assert_eq!(Hello::decode(&b), Some(h));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Hello::decode(&bad), None, "a wrong magic is no hello");
    }

    /// A link's `Debug` names its peer and fabric (what hang reports and
    /// test failures print).
    #[test]
    fn a_link_debug_names_its_peer_and_fabric() {
        let (a, _b) = pair(64, Rendezvous::Write);
        let s = format!("{a:?}");
        assert!(s.starts_with("RdmaLink") && s.contains("peer: 1"), "{s}");
        assert!(s.contains("failed: None"), "{s}");
    }

    #[test]
    fn messages_cross_in_order_and_wrap_the_ring() {
        let (mut a, mut b) = pair(8192, Rendezvous::Write);
        let hdr = [7u8; HEADER_LEN];
        for i in 0..5000usize {
            let body: Vec<u8> = (0..(i * 37) % 8193).map(|j| (i + j) as u8).collect();
            let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !a.try_send(&hdr, &body) {
                assert!(std::time::Instant::now() < end, "no room at {i}: {a:?}");
                a.flush();
                b.flush();
            }
            a.flush();
            let mut got = vec![0u8; body.len()];
            let h = recv_one(&mut b, &mut got);
            assert_eq!(&h[..HEADER_LEN], &hdr[..]);
            assert!(got == body, "message {i}");
            b.flush();
        }
        assert_eq!(a.rnr_events() + b.rnr_events(), 0);
    }
}
