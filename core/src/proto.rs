//! The point-to-point protocol engine: MPI matching, eager messages with
//! credits, rendezvous, synchronous sends — sans-IO and allocation-free.
//!
//! One [`Engine`] is one rank's protocol state. It never touches bytes or a
//! transport: the driver feeds it what arrived ([`Engine::on_message`]),
//! asks it what to transmit ([`Engine::next_tx`], then
//! [`Engine::tx_done`] once it went out), and performs the copies it is
//! told to. All storage — the operation table, the per-peer receive
//! entries, the per-peer state — is handed in at construction as anything
//! that derefs to a slice (`[T; N]` in a model checker, `Box<[T]>` in the
//! driver), so the engine itself never allocates.
//!
//! # Protocol
//!
//! * **Matching** on (context, source, tag), with [`ANY_SOURCE`] and
//!   [`ANY_TAG`]; contexts are never wildcarded, so traffic of another
//!   communicator (or internal traffic on its own context) can never match a
//!   user receive. Posted receives are kept in posting order and
//!   unexpected messages in arrival order, in one list each across all
//!   sources, so a message always matches the earliest posted receive it
//!   fits and a receive the earliest arrived message.
//! * **Non-overtaking order**: every matching message carries a per-peer
//!   16-bit sequence number (one sequence space per peer covers every
//!   context). A message that arrives ahead of its turn (a transport that
//!   reorders) is held back and released in sequence order.
//! * **Credits**, two kinds, one per message. Each peer may have at most
//!   `envelopes` matching messages outstanding at this rank, one per
//!   receive entry reserved for it. `credits` of the entries are eager
//!   credits, each with one of the `eager_limit`-byte payload buffers
//!   reserved for the peer, the other `envelopes - credits` rendezvous
//!   credits. An eager message (eager or synchronous eager) takes an eager
//!   credit; an RTS takes a rendezvous credit, or an eager one when none
//!   is left ([`Kind::RtsEager`]: it then holds an entry and leaves the
//!   buffer unused), so that RTS may fill every entry. Every message takes
//!   one credit, never two: the fast paths keep one count each way. A credit is
//!   freed once its message no longer needs its entry (delivered, or its
//!   acknowledgement sent) and the running counts of freed rendezvous and
//!   eager credits ride in every header back to the peer (16 bits each,
//!   wrapping); an explicit [`Kind::Credit`] message goes out when
//!   `credit_threshold` frees are owed and nothing else carries them.
//!   A receiver is never overrun and nothing is dropped. Control messages
//!   (CTS, FIN, ACK, credit) consume no credit: at most one answer (CTS,
//!   FIN or ACK) goes back per credited message, and on a FIFO transport
//!   each explicit credit message carries at least `credit_threshold` frees
//!   the peer has not yet heard of, so a reserve of `envelopes` receive
//!   slots per kind covers them (the model check in `tandem-verify` checks
//!   both bounds).
//! * **Eager** (`len <= eager_limit`): the payload follows the header. One
//!   that arrives before its receive is stored in a payload buffer, so
//!   unexpected payloads never need more than `nranks * credits *
//!   eager_limit` bytes. A sender out of eager credit does not wait: it
//!   sends the message as an RTS, which needs only an entry. So messages a
//!   receiver has not received yet can never keep a later, matchable one
//!   from being sent (MPI's progress rule), within the entries reserved.
//! * **Rendezvous** (`len > eager_limit`): an RTS carries tag, length and an
//!   [`MemDesc`] body (where the sender's payload lives). When a receive matches, the
//!   driver may *pull* the data itself ([`Engine::next_pull`], e.g. Linux
//!   cross-memory attach) and the engine answers FIN; or it declines and
//!   the engine answers CTS, on which the sender streams the bytes. The
//!   receiver decides only once a matching receive is posted; an unmatched
//!   RTS holds nothing but its entry.
//! * **Synchronous send**: an eager synchronous message is acknowledged
//!   ([`Kind::Ack`]) once matched; a rendezvous send completes only after the
//!   receiver matched it anyway.
//! * **Truncation**: a message longer than its receive completes that
//!   receive with [`OpError::Truncated`] after delivering what fits; nothing
//!   else is affected.
//!
//! ```
//! use tandem_core::proto::{Engine, Entry, Op, Params, Peer, Taken, TxWhat};
//! use tandem_core::wire::MemDesc;
//! let params = Params {
//!     rank: 0, nranks: 1, credits: 2, envelopes: 4, credit_threshold: 2, eager_limit: 64,
//!     seq_start: 0,
//! };
//! let mut e = Engine::new(params, [Op::EMPTY; 8], [Entry::EMPTY; 4], [Peer::EMPTY; 1], [0u32; 2])
//!     .unwrap();
//! // Rank 0 sends 5 bytes to itself: post, transmit, deliver.
//! let s = e.post_send(0, 0, 7, 5, false).unwrap();
//! let tx = e.next_tx(0).unwrap();
//! assert_eq!(tx.what, TxWhat::Payload(s));
//! e.tx_done(0, &tx);
//! let store = e.on_message(0, &tx.header, MemDesc::NONE, &mut |_| {}).unwrap();
//! let (r, copy) = e.post_recv(0, 0, 7, 16).unwrap();
//! assert!(copy.is_some(), "the message arrived first: copy it from its entry");
//! assert!(matches!(e.take(r), Taken::Done(Ok(st)) if st.len == 5));
//! assert!(matches!(e.take(s), Taken::Done(Ok(_))));
//! # let _ = store;
//! ```

use crate::credit::Credits;
use crate::mutation::{active, Mutant};
use crate::wire::{Header, Kind, MemDesc};

/// Receive from any source.
pub const ANY_SOURCE: u32 = u32::MAX;
/// Receive any tag.
pub const ANY_TAG: u32 = u32::MAX;
/// The largest tag a user may send (MPI's `MPI_TAG_UB` is at least 32767;
/// ours leaves the top bit for internal use).
pub const TAG_UB: u32 = 0x7fff_ffff;

const NIL: u32 = u32::MAX;
const IDX_BITS: u32 = 20;
const IDX_MASK: u32 = (1 << IDX_BITS) - 1;
const GEN_MASK: u32 = (1 << (32 - IDX_BITS)) - 1;
/// Most operations an engine can track (the index part of a wire token).
pub const MAX_OPS: usize = IDX_MASK as usize;

/// Identifies an operation: table index plus a generation, so a stale
/// handle never reaches a reused slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    idx: u32,
    gen: u32,
}

impl Handle {
    /// The operation's index in the table (for side tables the driver
    /// keeps, such as buffer addresses).
    #[inline]
    pub const fn index(self) -> usize {
        self.idx as usize
    }

    /// The operation's token on the wire (index and generation).
    #[inline]
    pub const fn token(self) -> u32 {
        (self.gen << IDX_BITS) | self.idx
    }
}

/// What a completed operation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    /// The sender's rank (for a send: the destination).
    pub source: u32,
    /// The message tag.
    pub tag: u32,
    /// The message length in bytes.
    pub len: u64,
}

/// Why an operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpError {
    /// The message was longer than the receive buffer; the first `got`
    /// bytes were delivered.
    Truncated {
        /// Who sent it, with its tag and full length.
        status: Status,
        /// The receive buffer's length.
        got: u64,
    },
    /// Cancelled before it matched.
    Cancelled,
    /// The peer died (or its channel broke) before the operation finished.
    PeerLost {
        /// The peer.
        peer: u32,
    },
    /// The handle does not name a live operation.
    Stale,
}

/// A protocol violation or a request the engine cannot accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtoError {
    /// A rank outside `0..nranks`.
    InvalidRank {
        /// The rank given.
        rank: u32,
        /// The number of ranks.
        size: u32,
    },
    /// A tag above [`TAG_UB`] (or [`ANY_TAG`] on a send).
    InvalidTag(u32),
    /// The operation table is full.
    TooManyOps {
        /// Its capacity.
        capacity: usize,
    },
    /// The peer is known dead.
    PeerLost {
        /// The peer.
        peer: u32,
    },
    /// The peer sent a matching message without credit.
    CreditOverrun {
        /// The peer.
        peer: u32,
    },
    /// The peer returned more credit than it was ever given.
    BadCredit {
        /// The peer.
        peer: u32,
    },
    /// A CTS/FIN/ACK naming no operation waiting for it.
    BadToken {
        /// The peer.
        peer: u32,
        /// The token.
        token: u32,
    },
    /// A sequence number outside the credit window.
    BadSeq {
        /// The peer.
        peer: u32,
        /// Sequence number received.
        seq: u16,
        /// Sequence number expected next.
        expected: u16,
    },
    /// Storage handed to [`Engine::new`] does not fit the parameters.
    Setup(&'static str),
}

impl core::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::InvalidRank { rank, size } => {
                write!(f, "rank {rank} is out of range (size {size})")
            }
            Self::InvalidTag(t) => write!(f, "tag {t:#x} is not a valid user tag (max {TAG_UB})"),
            Self::TooManyOps { capacity } => {
                write!(f, "more than {capacity} operations in flight")
            }
            Self::PeerLost { peer } => write!(f, "rank {peer} is gone"),
            Self::CreditOverrun { peer } => {
                write!(f, "rank {peer} sent a message without credit")
            }
            Self::BadCredit { peer } => write!(f, "rank {peer} returned credit it never had"),
            Self::BadToken { peer, token } => {
                write!(f, "rank {peer} answered unknown operation {token:#x}")
            }
            Self::BadSeq {
                peer,
                seq,
                expected,
            } => write!(
                f,
                "rank {peer} sent sequence number {seq}, expected {expected} or a little later"
            ),
            Self::Setup(why) => write!(f, "engine set-up: {why}"),
        }
    }
}

/// The credit ledger with one peer ([`Engine::ledger`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ledger {
    /// Receive entries this rank may still fill at the peer: its credits
    /// of both kinds.
    pub entries_available: u64,
    /// Eager credits this rank may still use at the peer (an entry and an
    /// eager buffer each).
    pub buffers_available: u64,
    /// Credits of both kinds freed for the peer that it has not been told
    /// of.
    pub entries_owed: u64,
    /// Eager credits freed for the peer that it has not been told of.
    pub buffers_owed: u64,
}

/// Engine parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub nranks: u32,
    /// Eager payload buffers reserved here for each peer: eager messages
    /// a peer may have outstanding at this rank (at least 1), its eager
    /// credits.
    pub credits: u16,
    /// Receive entries reserved here for each peer: matching messages of
    /// any kind (eager or RTS) it may have outstanding (more than
    /// `credits`, below 2^15 so 16-bit sequence numbers stay unambiguous);
    /// `envelopes - credits` of them are its rendezvous credits, and an
    /// RTS takes an eager credit when none of those is left. A sender out
    /// of eager credit sends small messages as RTS, so unreceived messages
    /// never keep a matchable one from being sent, as long as a sender
    /// keeps fewer than `envelopes - credits` rendezvous sends pending to
    /// one peer.
    pub envelopes: u16,
    /// Frees (of one kind of credit) owed before an explicit credit
    /// message goes out.
    pub credit_threshold: u16,
    /// Longest payload sent eagerly; longer messages use rendezvous.
    pub eager_limit: u64,
    /// First sequence number on every pair, and where the freed counts of
    /// the credit returns start (all ranks must agree; 0 unless a test
    /// wants to cross the 16-bit wraps early).
    pub seq_start: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum St {
    Free,
    SendQueued,
    SendWaitAck,
    SendWaitRndv,
    SendStreaming,
    RecvPosted,
    RecvPull,
    RecvStreaming,
    Done,
}

/// Where an operation is in its protocol (see [`Engine::phase`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// A send waiting for credit or the transport.
    Queued,
    /// A synchronous eager send waiting for its acknowledgement.
    WaitAck,
    /// A rendezvous send waiting for the receiver (CTS or FIN).
    WaitReceiver,
    /// Payload is being streamed (send or receive).
    Streaming,
    /// A receive waiting for a message.
    Posted,
    /// A receive matched with a rendezvous message, about to be pulled.
    Pulling,
    /// Finished; [`Engine::take`] collects it.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Res {
    Ok,
    Truncated,
    Cancelled,
    PeerLost,
}

/// One slot of the operation table (contents private).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Op {
    st: St,
    gen: u32,
    send: bool,
    sync: bool,
    orphan: bool,
    ctx: u16,
    peer: u32,
    tag: u32,
    /// Send: length. Receive: capacity.
    len: u64,
    next: u32,
    /// A receive matched with an RTS: the entry holding it.
    entry: u32,
    res: Res,
    /// Result: source (or destination), tag, message length.
    r_src: u32,
    r_tag: u32,
    r_len: u64,
}

impl Op {
    /// An unused slot.
    pub const EMPTY: Op = Op {
        st: St::Free,
        gen: 0,
        send: false,
        sync: false,
        orphan: false,
        ctx: 0,
        peer: 0,
        tag: 0,
        len: 0,
        next: NIL,
        entry: NIL,
        res: Res::Ok,
        r_src: 0,
        r_tag: 0,
        r_len: 0,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ESt {
    Free,
    /// Arrived ahead of its sequence number.
    Held,
    /// In the unexpected list.
    Unexpected,
    /// An RTS matched by a receive, waiting for the pull decision.
    Matched,
    /// Holds an answer (CTS, FIN, ACK) waiting in the peer's control queue.
    Ctrl,
}

/// A receive entry: one credit's worth of state for a matching message
/// from one peer (contents private). The driver pairs entry `i` with an
/// `eager_limit`-byte buffer for unexpected eager payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    st: ESt,
    kind: Kind,
    ctx: u16,
    seq: u16,
    tag: u32,
    /// The peer's operation token (RTS, sync eager).
    token: u32,
    len: u64,
    /// RTS body (where the sender's payload lives).
    desc: MemDesc,
    /// For a CTS: the receive operation it answers.
    op: u32,
    /// The eager payload buffer it holds (NIL if none).
    buf: u32,
    next: u32,
    /// The message it took arrived eager: freeing the entry returns an
    /// eager credit, else a rendezvous one (its kind may have become that
    /// of the answer since).
    eager: bool,
}

impl Entry {
    /// An unused entry.
    pub const EMPTY: Entry = Entry {
        st: ESt::Free,
        kind: Kind::Eager,
        ctx: 0,
        seq: 0,
        tag: 0,
        token: 0,
        len: 0,
        desc: MemDesc::NONE,
        op: NIL,
        buf: NIL,
        next: NIL,
        eager: false,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

/// Per-peer protocol state (contents private).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    /// Rendezvous credits (an entry each), both ways: those the peer holds
    /// for us (our window) and those we hold for it and freed (what we owe
    /// it).
    rndv: Credits,
    /// Eager credits (an entry and a payload buffer each), the same way.
    eager: Credits,
    send_seq: u16,
    recv_seq: u16,
    held: u16,
    /// Entries the peer's eager messages hold here (at most the eager
    /// window), and its RTS (at most the rendezvous window): a message
    /// beyond its window is an overrun, whatever entries are free.
    in_eager: u16,
    in_rndv: u16,
    dead: bool,
    sendq: List,
    ctrlq: List,
    free: u32,
    bfree: u32,
}

impl Peer {
    /// Applies the freed counts of a header from this peer (rendezvous,
    /// eager); `None` if it claims more than was sent.
    #[inline(always)]
    fn apply_credit(&mut self, credit: u16, ecredit: u16) -> Option<()> {
        // Among eager messages the rendezvous count stays as it was: one
        // compare.
        if !self.rndv.is_current(credit) {
            self.rndv.apply(credit)?;
        }
        self.eager.apply(ecredit)
    }

    /// Whether enough frees (of either kind) are owed to the peer that an
    /// explicit credit message is due.
    #[inline(always)]
    fn owes(&self) -> bool {
        self.rndv.due() || self.eager.due()
    }

    /// Our freed counts as a header to this peer carries them.
    #[inline(always)]
    fn counts(&self) -> (u64, u64) {
        (self.rndv.count(), self.eager.count())
    }

    /// A header carrying `counts` (from [`counts`](Self::counts)) went out.
    #[inline(always)]
    fn told(&mut self, counts: (u64, u64)) {
        self.rndv.told(counts.0);
        self.eager.told(counts.1);
    }

    /// Unused peer state.
    pub const EMPTY: Peer = Peer {
        rndv: Credits::EMPTY,
        eager: Credits::EMPTY,
        send_seq: 0,
        recv_seq: 0,
        held: 0,
        in_eager: 0,
        in_rndv: 0,
        dead: false,
        sendq: List::EMPTY,
        ctrlq: List::EMPTY,
        free: NIL,
        bfree: NIL,
    };
}

/// Copy an entry's stored eager payload into a receive buffer: emitted
/// when a held-back message is released onto a posted receive, and
/// returned by [`Engine::post_recv`] when a receive matches a stored
/// message. The entry may be reused by the next engine call, so copy first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotCopy {
    /// The entry whose buffer holds the payload.
    pub slot: usize,
    /// The receive operation.
    pub op: Handle,
    /// Bytes to copy (the message, or the receive's capacity if smaller).
    pub len: u64,
}

/// What the driver must do with the message it just fed to
/// [`Engine::on_message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Nothing (a control message, or an RTS).
    None,
    /// Copy the first `len` payload bytes into `op`'s buffer (and drop the
    /// rest, if truncated).
    Deliver {
        /// The receive.
        op: Handle,
        /// Bytes to copy.
        len: u64,
    },
    /// Copy the payload into entry `slot`'s buffer.
    Store {
        /// The entry.
        slot: usize,
    },
    /// Stream `len` bytes of send `op` to the peer (it answered CTS).
    Stream {
        /// The send.
        op: Handle,
        /// Bytes the receiver wants.
        len: u64,
        /// The receive's token (see [`Handle::token`]), for transports
        /// that need to label the stream.
        remote: u32,
    },
}

/// Something to transmit to a peer (from [`Engine::next_tx`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tx {
    /// The header, with sequence number and credit return filled in.
    pub header: Header,
    /// What follows it.
    pub what: TxWhat,
    /// The freed counts (entries, buffers) the header carries.
    counts: (u64, u64),
    entry: u32,
}

/// What follows a header on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxWhat {
    /// Nothing: a control message.
    Control,
    /// The payload of eager send `op`.
    Payload(Handle),
    /// The body of the RTS of send `op`: a [`MemDesc`] of its buffer.
    Rts(Handle),
    /// A CTS: afterwards the peer streams `header.len` bytes for receive
    /// `op` (on a FIFO transport, in the order the CTS messages went out;
    /// the CTS's `tag` carries `op`'s token for transports that reorder).
    Cts(Handle),
}

/// A rendezvous receive ready to pull (from [`Engine::next_pull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pull {
    /// The receive.
    pub op: Handle,
    /// The sender.
    pub peer: u32,
    /// The RTS body: where the sender's payload lives.
    pub desc: MemDesc,
    /// Bytes to pull (the message, or the receive's capacity if smaller).
    pub len: u64,
}

/// Result of [`Engine::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Taken {
    /// Still running.
    Pending,
    /// Finished (the slot is now free).
    Done(Result<Status, OpError>),
}

/// Description of an operation (for reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpInfo {
    /// A send (else a receive).
    pub send: bool,
    /// A synchronous send.
    pub sync: bool,
    /// The peer ([`ANY_SOURCE`] for a wildcard receive).
    pub peer: u32,
    /// The tag ([`ANY_TAG`] for a wildcard receive).
    pub tag: u32,
    /// The context.
    pub ctx: u16,
    /// Length (send) or capacity (receive).
    pub len: u64,
    /// Where it is.
    pub phase: Phase,
}

/// One rank's protocol engine over caller-provided storage.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Engine<O, E, P, B> {
    p: Params,
    ops: O,
    entries: E,
    peers: P,
    /// Free-list links of the eager payload buffers.
    bufs: B,
    free_ops: u32,
    in_use: u32,
    posted: List,
    unexpected: List,
    pulls: List,
}

type R<T> = Result<T, ProtoError>;

/// Names one of the engine's intrusive lists.
#[derive(Clone, Copy)]
enum Lst {
    Posted,
    Unexpected,
    Pulls,
    Send(u32),
    Ctrl(u32),
}

impl<O, E, P, B> Engine<O, E, P, B>
where
    O: AsRef<[Op]> + AsMut<[Op]>,
    E: AsRef<[Entry]> + AsMut<[Entry]>,
    P: AsRef<[Peer]> + AsMut<[Peer]>,
    B: AsRef<[u32]> + AsMut<[u32]>,
{
    /// An engine over `ops` (at most [`MAX_OPS`] are used), `entries`
    /// (at least `nranks * envelopes`), `peers` (at least `nranks`) and
    /// `bufs` (at least `nranks * credits`; buffer `i` is the driver's
    /// `i`-th `eager_limit`-byte buffer).
    ///
    /// # Errors
    /// [`ProtoError::Setup`], saying which, if the parameters or the storage do
    /// not fit: `credits` of 0, `envelopes` not above `credits` or not below
    /// 32768, `rank` not below `nranks` (or `nranks` equal to [`ANY_SOURCE`]),
    /// fewer than `nranks` peers, `nranks * envelopes` entries or
    /// `nranks * credits` buffers, or no operation slot.
    pub fn new(p: Params, mut ops: O, mut entries: E, mut peers: P, mut bufs: B) -> R<Self> {
        if p.credits == 0 || p.envelopes <= p.credits || p.envelopes >= 1 << 15 {
            return Err(ProtoError::Setup("need 1 <= credits < envelopes < 32768"));
        }
        if p.rank >= p.nranks || p.nranks == ANY_SOURCE {
            return Err(ProtoError::Setup("rank must be below nranks"));
        }
        let c = p.envelopes as usize;
        let k = p.credits as usize;
        let n = p.nranks as usize;
        if peers.as_ref().len() < n {
            return Err(ProtoError::Setup("fewer peer slots than ranks"));
        }
        if entries.as_ref().len() < n.saturating_mul(c) {
            return Err(ProtoError::Setup("fewer entries than nranks * envelopes"));
        }
        if bufs.as_ref().len() < n.saturating_mul(k) {
            return Err(ProtoError::Setup("fewer buffers than nranks * credits"));
        }
        if ops.as_ref().is_empty() {
            return Err(ProtoError::Setup("no operation slots"));
        }
        let nops = ops.as_ref().len().min(MAX_OPS);
        for (i, o) in ops.as_mut()[..nops].iter_mut().enumerate() {
            *o = Op {
                next: if i + 1 < nops { i as u32 + 1 } else { NIL },
                ..Op::EMPTY
            };
        }
        for (i, e) in entries.as_mut()[..n * c].iter_mut().enumerate() {
            *e = Entry {
                next: if (i + 1) % c != 0 { i as u32 + 1 } else { NIL },
                ..Entry::EMPTY
            };
        }
        for (i, b) in bufs.as_mut()[..n * k].iter_mut().enumerate() {
            *b = if (i + 1) % k != 0 { i as u32 + 1 } else { NIL };
        }
        // Frees owed (entries, buffers) that make an explicit credit return
        // due.
        let threshold = p.credit_threshold.max(1) as u64;
        for (i, q) in peers.as_mut()[..n].iter_mut().enumerate() {
            // The freed counts start where the sequence numbers do, so a
            // test that starts near 2^16 crosses the wrap of the 16-bit
            // credit fields.
            let start = p.seq_start as u64;
            let r = (c - k) as u64;
            *q = Peer {
                rndv: Credits::new(r, threshold.min(r), start),
                eager: Credits::new(k as u64, threshold.min(k as u64), start),
                free: (i * c) as u32,
                bfree: (i * k) as u32,
                send_seq: p.seq_start,
                recv_seq: p.seq_start,
                ..Peer::EMPTY
            };
        }
        Ok(Self {
            p,
            ops,
            entries,
            peers,
            bufs,
            free_ops: 0,
            in_use: 0,
            posted: List::EMPTY,
            unexpected: List::EMPTY,
            pulls: List::EMPTY,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    /// Operations in the table (pending or done but not taken).
    pub fn in_use(&self) -> usize {
        self.in_use as usize
    }

    /// Whether any message arrived that no receive has taken yet.
    pub fn has_unexpected(&self) -> bool {
        self.unexpected.head != NIL
    }

    fn op(&self, i: u32) -> &Op {
        &self.ops.as_ref()[i as usize]
    }
    fn op_mut(&mut self, i: u32) -> &mut Op {
        &mut self.ops.as_mut()[i as usize]
    }
    fn ent(&self, i: u32) -> &Entry {
        &self.entries.as_ref()[i as usize]
    }
    fn ent_mut(&mut self, i: u32) -> &mut Entry {
        &mut self.entries.as_mut()[i as usize]
    }
    fn peer(&self, p: u32) -> &Peer {
        &self.peers.as_ref()[p as usize]
    }
    fn peer_mut(&mut self, p: u32) -> &mut Peer {
        &mut self.peers.as_mut()[p as usize]
    }

    fn check_rank(&self, r: u32) -> R<()> {
        if r >= self.p.nranks {
            return Err(ProtoError::InvalidRank {
                rank: r,
                size: self.p.nranks,
            });
        }
        Ok(())
    }

    fn handle(&self, i: u32) -> Handle {
        Handle {
            idx: i,
            gen: self.op(i).gen,
        }
    }

    fn live(&self, h: Handle) -> bool {
        (h.idx as usize) < self.ops.as_ref().len().min(MAX_OPS)
            && self.op(h.idx).gen == h.gen
            && self.op(h.idx).st != St::Free
    }

    fn alloc_op(&mut self, op: Op) -> R<u32> {
        let i = self.free_ops;
        if i == NIL {
            return Err(ProtoError::TooManyOps {
                capacity: self.ops.as_ref().len().min(MAX_OPS),
            });
        }
        self.free_ops = self.op(i).next;
        let o = self.op_mut(i);
        let gen = (o.gen + 1) & GEN_MASK;
        *o = Op {
            gen,
            next: NIL,
            ..op
        };
        self.in_use += 1;
        Ok(i)
    }

    fn free_op(&mut self, i: u32) {
        let head = self.free_ops;
        let o = self.op_mut(i);
        let gen = o.gen;
        *o = Op {
            gen,
            next: head,
            ..Op::EMPTY
        };
        self.free_ops = i;
        self.in_use -= 1;
    }

    fn finish(&mut self, i: u32, res: Res, src: u32, tag: u32, len: u64) {
        let o = self.op_mut(i);
        o.st = St::Done;
        o.res = res;
        o.r_src = src;
        o.r_tag = tag;
        o.r_len = len;
        if o.orphan && !active(Mutant::OrphanLeak) {
            self.free_op(i);
        }
    }

    // ---- intrusive lists (links live in `Op::next` / `Entry::next`) ----

    fn list(&mut self, l: Lst) -> &mut List {
        match l {
            Lst::Posted => &mut self.posted,
            Lst::Unexpected => &mut self.unexpected,
            Lst::Pulls => &mut self.pulls,
            Lst::Send(p) => &mut self.peers.as_mut()[p as usize].sendq,
            Lst::Ctrl(p) => &mut self.peers.as_mut()[p as usize].ctrlq,
        }
    }

    /// The link field of node `i` of list `l` (operations for the posted,
    /// pull and send lists; receive entries for the others).
    fn next_mut(&mut self, l: Lst, i: u32) -> &mut u32 {
        match l {
            Lst::Posted | Lst::Pulls | Lst::Send(_) => &mut self.op_mut(i).next,
            Lst::Unexpected | Lst::Ctrl(_) => &mut self.ent_mut(i).next,
        }
    }

    fn push(&mut self, l: Lst, i: u32) {
        *self.next_mut(l, i) = NIL;
        let tail = self.list(l).tail;
        if tail == NIL {
            self.list(l).head = i;
        } else {
            *self.next_mut(l, tail) = i;
        }
        self.list(l).tail = i;
    }

    /// Unlinks `i`, whose predecessor is `prev` (or NIL at the head).
    fn unlink(&mut self, l: Lst, prev: u32, i: u32) {
        let next = *self.next_mut(l, i);
        if prev == NIL {
            self.list(l).head = next;
        } else {
            *self.next_mut(l, prev) = next;
        }
        if self.list(l).tail == i {
            self.list(l).tail = prev;
        }
        *self.next_mut(l, i) = NIL;
    }

    /// Finds and unlinks `i`; `false` if it is not in `l`.
    fn remove(&mut self, l: Lst, i: u32) -> bool {
        let (mut prev, mut cur) = (NIL, self.list(l).head);
        while cur != NIL {
            if cur == i {
                self.unlink(l, prev, i);
                return true;
            }
            prev = cur;
            cur = *self.next_mut(l, cur);
        }
        false
    }

    fn entry_peer(&self, e: u32) -> u32 {
        e / self.p.envelopes as u32
    }

    /// Frees entry `e`'s eager buffer, if it holds one.
    fn free_buf(&mut self, e: u32) {
        let b = self.ent(e).buf;
        if b == NIL {
            return;
        }
        self.ent_mut(e).buf = NIL;
        let peer = self.entry_peer(e);
        let q = self.peer_mut(peer);
        let head = q.bfree;
        q.bfree = b;
        self.bufs.as_mut()[b as usize] = head;
    }

    /// Frees entry `e` (and its eager buffer, if it still holds one),
    /// returning the credit its message took: eager or rendezvous.
    fn free_entry(&mut self, e: u32) {
        self.free_buf(e);
        let peer = self.entry_peer(e);
        let head = self.peer(peer).free;
        let eager = self.ent(e).eager;
        *self.ent_mut(e) = Entry {
            next: head,
            ..Entry::EMPTY
        };
        let q = self.peer_mut(peer);
        q.free = e;
        if eager {
            q.in_eager -= 1;
        } else {
            q.in_rndv -= 1;
        }
        if !active(Mutant::CreditReturnLost) {
            if eager {
                q.eager.freed();
            } else {
                q.rndv.freed();
            }
        }
    }

    // ---- posting ----

    /// Posts a send of `len` bytes to `peer` (synchronous if `sync`).
    ///
    /// # Errors
    /// * [`ProtoError::InvalidRank`]: `peer` is not below `nranks`;
    /// * [`ProtoError::InvalidTag`]: `tag` is [`ANY_TAG`] (other tags above
    ///   [`TAG_UB`] pass: refusing them is the driver's part);
    /// * [`ProtoError::PeerLost`]: `peer` was failed with
    ///   [`fail_peer`](Self::fail_peer);
    /// * [`ProtoError::TooManyOps`]: every operation slot is in use.
    pub fn post_send(&mut self, peer: u32, ctx: u16, tag: u32, len: u64, sync: bool) -> R<Handle> {
        self.check_rank(peer)?;
        if tag == ANY_TAG {
            return Err(ProtoError::InvalidTag(tag));
        }
        if self.peer(peer).dead {
            return Err(ProtoError::PeerLost { peer });
        }
        let i = self.alloc_op(Op {
            st: St::SendQueued,
            send: true,
            sync,
            ctx,
            peer,
            tag,
            len,
            ..Op::EMPTY
        })?;
        self.push(Lst::Send(peer), i);
        Ok(self.handle(i))
    }

    /// Posts a receive of up to `cap` bytes from `src` (or [`ANY_SOURCE`])
    /// with `tag` (or [`ANY_TAG`]). If an eager message that already arrived
    /// matches, the receive is complete and the returned [`SlotCopy`] says
    /// where its payload is: copy it before the next engine call.
    ///
    /// # Errors
    /// [`ProtoError::InvalidRank`] for a `src` neither below `nranks` nor
    /// [`ANY_SOURCE`]; [`ProtoError::TooManyOps`] when every operation slot is
    /// in use. `tag` is not checked. A receive from a peer failed with
    /// [`fail_peer`](Self::fail_peer) that no arrived message matches is not
    /// refused either: it finishes at once with [`OpError::PeerLost`].
    pub fn post_recv(
        &mut self,
        src: u32,
        ctx: u16,
        tag: u32,
        cap: u64,
    ) -> R<(Handle, Option<SlotCopy>)> {
        if src != ANY_SOURCE {
            self.check_rank(src)?;
        }
        let i = self.alloc_op(Op {
            st: St::RecvPosted,
            ctx,
            peer: src,
            tag,
            len: cap,
            ..Op::EMPTY
        })?;
        let h = self.handle(i);
        // The earliest arrived message that matches wins.
        let (mut prev, mut e) = (NIL, self.unexpected.head);
        while e != NIL {
            let ent = *self.ent(e);
            let from = self.entry_peer(e);
            if (ent.ctx == ctx || active(Mutant::ProbeIgnoresContext))
                && (src == ANY_SOURCE || src == from)
                && (tag == ANY_TAG || tag == ent.tag)
            {
                self.unlink(Lst::Unexpected, prev, e);
                let buf = ent.buf as usize;
                let copy = self.bind(i, e, from);
                return Ok((
                    h,
                    copy.map(|len| SlotCopy {
                        slot: buf,
                        op: h,
                        len,
                    }),
                ));
            }
            prev = e;
            e = ent.next;
        }
        if src != ANY_SOURCE && self.peer(src).dead {
            self.finish(i, Res::PeerLost, src, tag, 0);
            return Ok((h, None));
        }
        self.push(Lst::Posted, i);
        Ok((h, None))
    }

    /// Binds receive `i` to the message in entry `e` from `from`. For an
    /// eager message the receive completes and the bytes to copy are
    /// returned; an RTS queues a pull.
    fn bind(&mut self, i: u32, e: u32, from: u32) -> Option<u64> {
        let ent = *self.ent(e);
        let cap = self.op(i).len;
        if ent.kind.is_eager() {
            let n = ent.len.min(cap);
            let res = if ent.len > cap {
                Res::Truncated
            } else {
                Res::Ok
            };
            self.finish(i, res, from, ent.tag, ent.len);
            // The caller copies the payload before the buffer is reused.
            self.free_buf(e);
            self.answer_or_free(e, from, Kind::Ack, ent.kind == Kind::EagerSync, n);
            Some(n)
        } else {
            self.ent_mut(e).st = ESt::Matched;
            let o = self.op_mut(i);
            o.st = St::RecvPull;
            o.entry = e;
            o.r_src = from;
            o.r_tag = ent.tag;
            o.r_len = ent.len;
            self.push(Lst::Pulls, i);
            None
        }
    }

    /// Turns entry `e` into a control answer of `kind` to `peer` if
    /// `answer`, else frees it (returning its credit).
    fn answer_or_free(&mut self, e: u32, peer: u32, kind: Kind, answer: bool, len: u64) {
        if answer && !self.peer(peer).dead {
            let ent = self.ent_mut(e);
            ent.st = ESt::Ctrl;
            ent.kind = kind;
            ent.len = len;
            self.push(Lst::Ctrl(peer), e);
        } else {
            self.free_entry(e);
        }
    }

    /// Messages that arrived from `src` (or [`ANY_SOURCE`]) in `ctx` and
    /// wait for a receive, oldest first: fills `out` with up to its length
    /// and returns how many there are in all (for hang reports: what a
    /// stuck receive could have matched with another tag).
    pub fn unmatched(&self, src: u32, ctx: u16, out: &mut [Status]) -> usize {
        let (mut e, mut n) = (self.unexpected.head, 0);
        while e != NIL {
            let ent = self.ent(e);
            let from = self.entry_peer(e);
            if ent.ctx == ctx && (src == ANY_SOURCE || src == from) {
                if let Some(o) = out.get_mut(n) {
                    *o = Status {
                        source: from,
                        tag: ent.tag,
                        len: ent.len,
                    };
                }
                n += 1;
            }
            e = ent.next;
        }
        n
    }

    /// The first message that arrived and would match a receive from
    /// `src` with `tag` in `ctx`, without receiving it.
    pub fn probe(&self, src: u32, ctx: u16, tag: u32) -> Option<Status> {
        let mut e = self.unexpected.head;
        while e != NIL {
            let ent = self.ent(e);
            let from = self.entry_peer(e);
            if (ent.ctx == ctx || active(Mutant::ProbeIgnoresContext))
                && (src == ANY_SOURCE || src == from)
                && (tag == ANY_TAG || tag == ent.tag)
            {
                return Some(Status {
                    source: from,
                    tag: ent.tag,
                    len: ent.len,
                });
            }
            e = ent.next;
        }
        None
    }

    // ---- transmit ----

    /// The next thing to send to `peer`, if any may go now: answers first,
    /// then an explicit credit return if one is due, then the oldest queued
    /// send if a credit is available. Nothing changes until
    /// [`tx_done`](Self::tx_done) confirms it went out.
    pub fn next_tx(&self, peer: u32) -> Option<Tx> {
        let q = self.peers.as_ref().get(peer as usize)?;
        if q.dead || peer >= self.p.nranks {
            return None;
        }
        let mut h = Header::new(Kind::Credit, 0, 0, 0);
        let counts = q.counts();
        h.credit = counts.0 as u16;
        h.ecredit = counts.1 as u16;
        let mut tx = Tx {
            header: h,
            what: TxWhat::Control,
            counts,
            entry: NIL,
        };
        if q.ctrlq.head != NIL {
            let e = q.ctrlq.head;
            let ent = self.ent(e);
            tx.header.kind = ent.kind as u8;
            tx.header.ctx_tag(ent.ctx, ent.tag);
            tx.header.token = ent.token;
            tx.header.len = ent.len;
            tx.entry = e;
            if ent.kind == Kind::Cts {
                // The receive's own token rides in the tag, so a transport
                // that does not keep streams in CTS order can label them.
                let h = self.handle(ent.op);
                tx.header.tag = h.token();
                tx.what = TxWhat::Cts(h);
            }
            return Some(tx);
        }
        if self.credit_due(q) {
            return Some(tx);
        }
        let i = q.sendq.head;
        if i == NIL {
            return None;
        }
        let skip = active(Mutant::SkipCreditCheck);
        let o = self.op(i);
        let h = self.handle(i);
        // Out of eager credit at the peer: announce it as an RTS rather
        // than wait (unreceived messages must not keep this one, perhaps
        // matchable, from the receiver). An RTS takes a rendezvous credit,
        // or an eager one when none is left, so that RTS may fill every
        // entry the peer reserved, as eager messages may not.
        let eager = o.len <= self.p.eager_limit && (q.eager.available() > 0 || skip);
        let rndv = q.rndv.available() > 0 || skip;
        if !eager && !rndv && q.eager.available() == 0 {
            return None;
        }
        let (kind, what) = if !eager && rndv {
            (Kind::Rts, TxWhat::Rts(h))
        } else if !eager {
            (Kind::RtsEager, TxWhat::Rts(h))
        } else if o.sync {
            (Kind::EagerSync, TxWhat::Payload(h))
        } else {
            (Kind::Eager, TxWhat::Payload(h))
        };
        tx.header.kind = kind as u8;
        tx.header.ctx_tag(o.ctx, o.tag);
        tx.header.seq = q.send_seq;
        tx.header.token = h.token();
        tx.header.len = o.len;
        tx.what = what;
        Some(tx)
    }

    /// Records that `tx` (the latest [`next_tx`](Self::next_tx) for `peer`)
    /// went out.
    pub fn tx_done(&mut self, peer: u32, tx: &Tx) {
        self.peer_mut(peer).told(tx.counts);
        match tx.header.kind() {
            Kind::Credit => {}
            Kind::Cts | Kind::Fin | Kind::Ack => {
                let e = tx.entry;
                debug_assert_eq!(self.peer(peer).ctrlq.head, e);
                self.unlink(Lst::Ctrl(peer), NIL, e);
                self.free_entry(e);
            }
            kind => {
                let i = self.peer(peer).sendq.head;
                debug_assert!(i != NIL);
                self.unlink(Lst::Send(peer), NIL, i);
                let q = self.peer_mut(peer);
                let skip = active(Mutant::SkipCreditCheck);
                let took = if kind.takes_eager_credit() {
                    q.eager.try_take(1)
                } else {
                    q.rndv.try_take(1)
                };
                debug_assert!(took || skip);
                q.send_seq = q.send_seq.wrapping_add(1);
                let o = *self.op(i);
                match kind {
                    Kind::Eager => self.finish(i, Res::Ok, peer, o.tag, o.len),
                    Kind::EagerSync => self.op_mut(i).st = St::SendWaitAck,
                    _ => self.op_mut(i).st = St::SendWaitRndv,
                }
            }
        }
    }

    // ---- fast paths for blocking calls (no operation recorded) ----

    /// Fast path of a blocking eager send: if nothing is queued ahead of
    /// it for `peer` and an eager credit is available, commits the message
    /// (sequence number, credits, piggybacked returns) and returns its
    /// header; the caller must then write header and payload to the peer
    /// unconditionally (check the transport has room first). `None`: take
    /// the general path.
    #[inline]
    pub fn eager_now(&mut self, peer: u32, ctx: u16, tag: u32, len: u64) -> Option<Header> {
        if tag > TAG_UB || len > self.p.eager_limit {
            return None;
        }
        let q = self.peers.as_mut().get_mut(peer as usize)?;
        if q.dead || q.sendq.head != NIL || q.ctrlq.head != NIL || !q.eager.try_take(1) {
            return None;
        }
        let mut h = Header::new(Kind::Eager, ctx, tag, len);
        h.seq = q.send_seq;
        h.credit = q.rndv.tell() as u16;
        h.ecredit = q.eager.tell() as u16;
        q.send_seq = q.send_seq.wrapping_add(1);
        Some(h)
    }

    /// Fast path of a blocking receive from `peer` (not a wildcard source)
    /// with `tag` in `ctx`: `h` is the next header from `peer`. If it is an
    /// in-order, non-synchronous eager message this receive takes (no
    /// receive is posted ahead of it and nothing that arrived earlier
    /// matches), consumes it and returns `true`: the caller copies the
    /// payload straight into its buffer. `false`: take the general path.
    ///
    /// # Errors
    /// As [`eager_recv_matched`](Self::eager_recv_matched), for a header this
    /// receive takes.
    #[inline]
    pub fn eager_recv_now(&mut self, peer: u32, ctx: u16, tag: u32, h: &Header) -> R<bool> {
        if h.kind() != Kind::Eager || h.context != ctx || (tag != ANY_TAG && tag != h.tag) {
            return Ok(false);
        }
        Ok(self
            .eager_recv_matched(peer, ctx, tag, h.seq, h.credit, h.ecredit)?
            .is_some())
    }

    /// [`eager_recv_now`](Self::eager_recv_now) for a caller that has
    /// already compared the header's kind (eager), context and tag with the
    /// receive's, and passes its `seq`, `credit` and `ecredit` fields.
    /// `Some(owed)`: consumed, and `owed` says an explicit credit return to
    /// `peer` is now due ([`credit_owed`](Self::credit_owed)). `None`: take
    /// the general path.
    ///
    /// # Errors
    /// The peer broke the protocol (stop reading from it):
    /// [`ProtoError::BadCredit`] if the header's freed counts return credit
    /// this rank never used, [`ProtoError::CreditOverrun`] if the peer sent the
    /// message with no receive entry or eager buffer free for it.
    #[inline(always)]
    pub fn eager_recv_matched(
        &mut self,
        peer: u32,
        ctx: u16,
        tag: u32,
        seq: u16,
        credit: u16,
        ecredit: u16,
    ) -> R<Option<bool>> {
        if self.posted.head != NIL
            || (self.unexpected.head != NIL && self.probe(peer, ctx, tag).is_some())
        {
            return Ok(None);
        }
        let Some(q) = self.peers.as_mut().get_mut(peer as usize) else {
            return Ok(None);
        };
        if q.dead || q.held != 0 || seq != q.recv_seq {
            return Ok(None);
        }
        q.apply_credit(credit, ecredit)
            .ok_or(ProtoError::BadCredit { peer })?;
        if q.in_eager as u64 >= q.eager.limit() {
            return Err(ProtoError::CreditOverrun { peer });
        }
        // As if an entry and a buffer were taken and freed at once: one
        // eager credit.
        if !active(Mutant::FastRecvSeqStuck) {
            q.recv_seq = q.recv_seq.wrapping_add(1);
        }
        q.eager.freed();
        Ok(Some(q.owes()))
    }

    // ---- receive ----

    /// Feeds a validated header from `peer` (with `desc`, the body of an
    /// RTS; ignored for other kinds). Copies for held-back messages released by this one go
    /// to `copy`; what to do with this message's own payload is returned.
    /// An error means the peer broke the protocol: stop reading from it.
    ///
    /// # Errors
    /// The peer broke the protocol; stop reading from it:
    /// * [`ProtoError::InvalidRank`]: `peer` is not below `nranks`;
    /// * [`ProtoError::BadCredit`]: the header returns credit this rank never
    ///   used;
    /// * [`ProtoError::BadToken`]: a CTS, FIN or ACK whose token names no send
    ///   to `peer` waiting for it;
    /// * [`ProtoError::CreditOverrun`]: a matching message with no receive
    ///   entry (or, if eager, no buffer) free for it;
    /// * [`ProtoError::BadSeq`]: a sequence number outside the window that
    ///   starts at the one expected next.
    pub fn on_message(
        &mut self,
        peer: u32,
        h: &Header,
        desc: MemDesc,
        copy: &mut impl FnMut(SlotCopy),
    ) -> R<Action> {
        self.check_rank(peer)?;
        self.apply_credit(peer, h.credit, h.ecredit)?;
        let kind = h.kind();
        match kind {
            Kind::Credit => Ok(Action::None),
            Kind::Cts | Kind::Fin | Kind::Ack => {
                let want = match kind {
                    Kind::Ack => St::SendWaitAck,
                    _ => St::SendWaitRndv,
                };
                let idx = h.token & IDX_MASK;
                let hd = Handle {
                    idx,
                    gen: h.token >> IDX_BITS,
                };
                if !self.live(hd) || self.op(idx).st != want || self.op(idx).peer != peer {
                    return Err(ProtoError::BadToken {
                        peer,
                        token: h.token,
                    });
                }
                let o = *self.op(idx);
                if kind == Kind::Cts {
                    let len = h.len.min(o.len);
                    self.op_mut(idx).st = St::SendStreaming;
                    return Ok(Action::Stream {
                        op: hd,
                        len,
                        remote: h.tag,
                    });
                }
                self.finish(idx, Res::Ok, peer, o.tag, o.len);
                Ok(Action::None)
            }
            _ => self.on_matching(peer, h, desc, copy),
        }
    }

    #[inline(always)]
    fn apply_credit(&mut self, peer: u32, credit: u16, ecredit: u16) -> R<()> {
        self.peer_mut(peer)
            .apply_credit(credit, ecredit)
            .ok_or(ProtoError::BadCredit { peer })
    }

    fn on_matching(
        &mut self,
        peer: u32,
        h: &Header,
        desc: MemDesc,
        copy: &mut impl FnMut(SlotCopy),
    ) -> R<Action> {
        let q = self.peer(peer);
        let e = q.free;
        let b = if h.kind().is_eager() { q.bfree } else { 0 };
        let eager = h.kind().takes_eager_credit()
            && !(h.kind() == Kind::RtsEager && active(Mutant::RtsEagerCreditAsRendezvous));
        let full = if eager {
            q.in_eager as u64 >= q.eager.limit()
        } else {
            q.in_rndv as u64 >= q.rndv.limit()
        };
        // Within its window a message always finds an entry (and a
        // buffer) free; the lists are checked as well all the same.
        if full || e == NIL || b == NIL {
            return Err(ProtoError::CreditOverrun { peer });
        }
        let ahead = h.seq.wrapping_sub(q.recv_seq);
        if ahead >= self.p.envelopes {
            return Err(ProtoError::BadSeq {
                peer,
                seq: h.seq,
                expected: q.recv_seq,
            });
        }
        let next_free = self.ent(e).next;
        let q = self.peer_mut(peer);
        q.free = next_free;
        if eager {
            q.in_eager += 1;
        } else {
            q.in_rndv += 1;
        }
        let buf = if h.kind().is_eager() {
            let next = self.bufs.as_ref()[b as usize];
            self.peer_mut(peer).bfree = next;
            b
        } else {
            NIL
        };
        *self.ent_mut(e) = Entry {
            st: ESt::Held,
            kind: h.kind(),
            ctx: h.context,
            seq: h.seq,
            tag: h.tag,
            token: h.token,
            len: h.len,
            desc,
            op: NIL,
            buf,
            next: NIL,
            eager,
        };
        if ahead != 0 && active(Mutant::HoldBackBypass) {
            // The broken variant delivers it at once, as if it were next.
            self.peer_mut(peer).recv_seq = h.seq;
        } else if ahead != 0 {
            // Early: hold it back (its payload is stored) until its turn.
            self.peer_mut(peer).held += 1;
            return Ok(if h.kind().is_eager() {
                Action::Store { slot: buf as usize }
            } else {
                Action::None
            });
        }
        let action = self.deliver(peer, e, true, copy);
        self.release_held(peer, copy);
        Ok(action)
    }

    /// Releases held-back messages from `peer` whose turn has come.
    fn release_held(&mut self, peer: u32, copy: &mut impl FnMut(SlotCopy)) {
        'next: while self.peer(peer).held > 0 {
            let c = self.p.envelopes as u32;
            let want = self.peer(peer).recv_seq;
            for e in peer * c..(peer + 1) * c {
                let ent = self.ent(e);
                if ent.st == ESt::Held && ent.seq == want {
                    self.peer_mut(peer).held -= 1;
                    self.deliver(peer, e, false, copy);
                    continue 'next;
                }
            }
            return;
        }
    }

    /// Matches the in-order message in entry `e` (its payload on the wire if
    /// `wire`, else in the entry's buffer) against the posted receives.
    fn deliver(
        &mut self,
        peer: u32,
        e: u32,
        wire: bool,
        copy: &mut impl FnMut(SlotCopy),
    ) -> Action {
        let q = self.peer_mut(peer);
        q.recv_seq = if active(Mutant::SeqWrap) {
            q.recv_seq.saturating_add(1)
        } else {
            q.recv_seq.wrapping_add(1)
        };
        let ent = *self.ent(e);
        let (mut prev, mut i) = (NIL, self.posted.head);
        while i != NIL {
            let o = self.op(i);
            if o.ctx == ent.ctx
                && (o.peer == ANY_SOURCE || o.peer == peer)
                && (o.tag == ANY_TAG || o.tag == ent.tag)
            {
                self.unlink(Lst::Posted, prev, i);
                let h = self.handle(i);
                return match self.bind(i, e, peer) {
                    Some(len) if wire => Action::Deliver { op: h, len },
                    Some(len) => {
                        copy(SlotCopy {
                            slot: ent.buf as usize,
                            op: h,
                            len,
                        });
                        Action::None
                    }
                    None => Action::None,
                };
            }
            prev = i;
            i = o.next;
        }
        self.ent_mut(e).st = ESt::Unexpected;
        self.push(Lst::Unexpected, e);
        if wire && ent.kind.is_eager() {
            Action::Store {
                slot: ent.buf as usize,
            }
        } else {
            Action::None
        }
    }

    // ---- rendezvous completion ----

    /// The next matched rendezvous receive; the driver either pulls the
    /// data and calls [`pull_done`](Self::pull_done) with `true`, or calls
    /// it with `false` to have the sender stream it instead.
    pub fn next_pull(&mut self) -> Option<Pull> {
        let i = self.pulls.head;
        if i == NIL {
            return None;
        }
        self.unlink(Lst::Pulls, NIL, i);
        let o = *self.op(i);
        let ent = self.ent(o.entry);
        Some(Pull {
            op: self.handle(i),
            peer: o.r_src,
            desc: ent.desc,
            len: ent.len.min(o.len),
        })
    }

    /// Finishes a [`Pull`]: `pulled` means the bytes are in place (answer
    /// FIN, complete the receive); otherwise answer CTS and expect a stream.
    pub fn pull_done(&mut self, op: Handle, pulled: bool) {
        if !self.live(op) || self.op(op.idx).st != St::RecvPull {
            debug_assert!(false, "pull_done on an operation that is not pulling");
            return;
        }
        let o = *self.op(op.idx);
        let e = o.entry;
        let n = o.r_len.min(o.len);
        let peer = o.r_src;
        if pulled {
            let res = if o.r_len > o.len {
                Res::Truncated
            } else {
                Res::Ok
            };
            self.op_mut(op.idx).entry = NIL;
            self.finish(op.idx, res, peer, o.r_tag, o.r_len);
            self.answer_or_free(e, peer, Kind::Fin, true, n);
        } else {
            self.op_mut(op.idx).st = St::RecvStreaming;
            self.op_mut(op.idx).entry = NIL;
            self.ent_mut(e).op = op.idx;
            self.answer_or_free(e, peer, Kind::Cts, true, n);
        }
    }

    /// A stream finished: every byte of send `op` went out, or every byte
    /// for receive `op` arrived.
    pub fn stream_done(&mut self, op: Handle) {
        if !self.live(op) {
            return;
        }
        let o = *self.op(op.idx);
        match o.st {
            St::SendStreaming => self.finish(op.idx, Res::Ok, o.peer, o.tag, o.len),
            St::RecvStreaming => {
                let res = if o.r_len > o.len {
                    Res::Truncated
                } else {
                    Res::Ok
                };
                self.finish(op.idx, res, o.r_src, o.r_tag, o.r_len)
            }
            _ => debug_assert!(false, "stream_done on an operation that is not streaming"),
        }
    }

    // ---- completion, cancel, failure ----

    /// Where operation `h` is; `None` for a stale handle.
    pub fn phase(&self, h: Handle) -> Option<Phase> {
        if !self.live(h) {
            return None;
        }
        Some(match self.op(h.idx).st {
            St::SendQueued => Phase::Queued,
            St::SendWaitAck => Phase::WaitAck,
            St::SendWaitRndv => Phase::WaitReceiver,
            St::SendStreaming | St::RecvStreaming => Phase::Streaming,
            St::RecvPosted => Phase::Posted,
            St::RecvPull => Phase::Pulling,
            St::Done | St::Free => Phase::Done,
        })
    }

    /// Describes operation `h` (`None` for a stale handle).
    pub fn info(&self, h: Handle) -> Option<OpInfo> {
        let phase = self.phase(h)?;
        let o = self.op(h.idx);
        Some(OpInfo {
            send: o.send,
            sync: o.sync,
            peer: o.peer,
            tag: o.tag,
            ctx: o.ctx,
            len: o.len,
            phase,
        })
    }

    /// The live operation at table index `i`, if any.
    pub fn handle_at(&self, i: usize) -> Option<Handle> {
        let o = self.ops.as_ref().get(i.min(MAX_OPS))?;
        (o.st != St::Free).then_some(Handle {
            idx: i as u32,
            gen: o.gen,
        })
    }

    /// Collects a finished operation, freeing its slot.
    pub fn take(&mut self, h: Handle) -> Taken {
        if !self.live(h) {
            return Taken::Done(Err(OpError::Stale));
        }
        let o = *self.op(h.idx);
        if o.st != St::Done {
            return Taken::Pending;
        }
        self.free_op(h.idx);
        let st = Status {
            source: o.r_src,
            tag: o.r_tag,
            len: o.r_len,
        };
        Taken::Done(match o.res {
            Res::Ok => Ok(st),
            Res::Truncated => Err(OpError::Truncated {
                status: st,
                got: o.len,
            }),
            Res::Cancelled => Err(OpError::Cancelled),
            Res::PeerLost => Err(OpError::PeerLost { peer: o.r_src }),
        })
    }

    /// Cancels `h` if nothing of it has reached a peer (a receive not yet
    /// matched, a send not yet transmitted): it then completes with
    /// [`OpError::Cancelled`]. `false` if it is too late.
    pub fn cancel(&mut self, h: Handle) -> bool {
        if !self.live(h) {
            return false;
        }
        let o = *self.op(h.idx);
        let removed = match o.st {
            St::RecvPosted if active(Mutant::CancelKeepsPosted) => true,
            St::RecvPosted => self.remove(Lst::Posted, h.idx),
            St::SendQueued => {
                let p = o.peer;
                self.remove(Lst::Send(p), h.idx)
            }
            _ => false,
        };
        if removed {
            self.finish(h.idx, Res::Cancelled, o.peer, o.tag, 0);
        }
        removed
    }

    /// Gives up on `h` without waiting: cancelled if possible, otherwise
    /// left to finish its protocol and freed automatically when it does
    /// (its buffer must no longer be touched: the driver drops its copies,
    /// see [`phase`](Self::phase)). Returns the phase it was in.
    pub fn abandon(&mut self, h: Handle) -> Option<Phase> {
        let phase = self.phase(h)?;
        if self.cancel(h) || phase == Phase::Done {
            self.free_op(h.idx);
        } else {
            self.op_mut(h.idx).orphan = true;
        }
        Some(phase)
    }

    /// Whether `peer` was declared lost.
    pub fn is_lost(&self, peer: u32) -> bool {
        self.peers
            .as_ref()
            .get(peer as usize)
            .is_some_and(|q| q.dead)
    }

    /// Declares `peer` lost: every operation still waiting on it fails with
    /// [`OpError::PeerLost`] (receives posted for [`ANY_SOURCE`] stay), its
    /// rendezvous announcements and held-back messages are dropped, and
    /// eager messages it sent before stay receivable.
    pub fn fail_peer(&mut self, peer: u32) {
        if peer >= self.p.nranks || self.peer(peer).dead {
            return;
        }
        self.peer_mut(peer).dead = true;
        let nops = self.ops.as_ref().len().min(MAX_OPS) as u32;
        for i in 0..nops {
            let o = *self.op(i);
            let waits = match o.st {
                St::SendQueued | St::SendWaitAck | St::SendWaitRndv | St::SendStreaming => {
                    o.peer == peer
                }
                St::RecvPosted => o.peer == peer,
                St::RecvPull | St::RecvStreaming => o.r_src == peer,
                _ => false,
            };
            if !waits {
                continue;
            }
            match o.st {
                St::SendQueued => {
                    self.remove(Lst::Send(peer), i);
                }
                St::RecvPosted => {
                    self.remove(Lst::Posted, i);
                }
                St::RecvPull => {
                    self.remove(Lst::Pulls, i);
                    self.free_entry(o.entry);
                }
                _ => {}
            }
            self.op_mut(i).entry = NIL;
            self.finish(i, Res::PeerLost, peer, o.tag, 0);
        }
        // Drop what can no longer complete: answers to it, announcements
        // and held-back messages from it.
        while self.peer(peer).ctrlq.head != NIL {
            let e = self.peer(peer).ctrlq.head;
            self.unlink(Lst::Ctrl(peer), NIL, e);
            self.free_entry(e);
        }
        let (mut prev, mut e) = (NIL, self.unexpected.head);
        while e != NIL {
            let next = self.ent(e).next;
            let drop_eager = active(Mutant::FailPeerDropsEager);
            if self.entry_peer(e) == peer && (!self.ent(e).kind.is_eager() || drop_eager) {
                self.unlink(Lst::Unexpected, prev, e);
                self.free_entry(e);
            } else {
                prev = e;
            }
            e = next;
        }
        let c = self.p.envelopes as u32;
        for e in peer * c..(peer + 1) * c {
            if self.ent(e).st == ESt::Held {
                self.free_entry(e);
            }
        }
        self.peer_mut(peer).held = 0;
    }

    /// Whether an explicit credit return to `peer` is due (what a receive
    /// that bypassed the operation table may have caused).
    #[inline]
    pub fn credit_owed(&self, peer: u32) -> bool {
        self.peers
            .as_ref()
            .get(peer as usize)
            .is_some_and(|q| self.credit_due(q))
    }

    /// Whether anything is queued for `peer` (sends, answers, credit).
    pub fn tx_pending(&self, peer: u32) -> bool {
        self.peers.as_ref().get(peer as usize).is_some_and(|q| {
            !q.dead && (q.ctrlq.head != NIL || q.sendq.head != NIL || self.credit_due(q))
        })
    }

    /// Receive entries this rank holds for messages from `peer` right now
    /// (each backed by a credit the peer spent), and how many of them hold
    /// an eager credit: an eager message (with or without its payload
    /// buffer still) or an RTS sent on an eager credit.
    pub fn held_for(&self, peer: u32) -> (u64, u64) {
        let c = self.p.envelopes as u32;
        let mut held = (0, 0);
        for e in peer * c..(peer + 1) * c {
            let ent = self.ent(e);
            if ent.st != ESt::Free {
                held.0 += 1;
                held.1 += ent.eager as u64;
            }
        }
        held
    }

    /// Checks the engine's internal bookkeeping: per peer, every receive
    /// entry and eager buffer is either on its free list or in use, never
    /// both and never twice; the operation count matches the table. For
    /// model checkers and tests.
    ///
    /// # Errors
    /// `Err` naming the first inconsistency found: a corrupt receive-entry or
    /// eager-buffer free list (an entry of another peer or in use, or one
    /// longer than the window), entries or buffers lost or counted twice, a
    /// buffer both free and in use, or an operation count that disagrees with
    /// the table.
    pub fn audit(&self) -> Result<(), &'static str> {
        let (c, k) = (self.p.envelopes as u32, self.p.credits as u32);
        for peer in 0..self.p.nranks {
            let q = self.peer(peer);
            let mut free = 0u64;
            let mut e = q.free;
            while e != NIL {
                if e / c != peer || self.ent(e).st != ESt::Free || free > c as u64 {
                    return Err("receive entry free list corrupt");
                }
                free += 1;
                e = self.ent(e).next;
            }
            let (used, eager) = self.held_for(peer);
            if free + used != c as u64 {
                return Err("receive entries lost or counted twice");
            }
            let bufs = (peer * c..(peer + 1) * c)
                .filter(|&e| self.ent(e).st != ESt::Free && self.ent(e).buf != NIL)
                .count() as u64;
            if eager != q.in_eager as u64
                || used - eager != q.in_rndv as u64
                || eager > k as u64
                || used - eager > (c - k) as u64
            {
                return Err("entries in use disagree with their credits");
            }
            let mut bfree = 0u64;
            let mut b = q.bfree;
            while b != NIL {
                if b / k != peer || bfree > k as u64 {
                    return Err("eager buffer free list corrupt");
                }
                for e in peer * c..(peer + 1) * c {
                    if self.ent(e).st != ESt::Free && self.ent(e).buf == b {
                        return Err("an eager buffer is both free and in use");
                    }
                }
                bfree += 1;
                b = self.bufs.as_ref()[b as usize];
            }
            if bfree + bufs != k as u64 {
                return Err("eager buffers lost or held twice");
            }
        }
        let nops = self.ops.as_ref().len().min(MAX_OPS) as u32;
        let live = (0..nops).filter(|&i| self.op(i).st != St::Free).count();
        if live != self.in_use as usize {
            return Err("operation count wrong");
        }
        Ok(())
    }

    /// Whether enough frees are owed to `q` for an explicit credit message.
    #[inline]
    fn credit_due(&self, q: &Peer) -> bool {
        q.owes()
    }

    /// Whether a receive is posted that nothing has matched yet.
    pub fn has_posted(&self) -> bool {
        self.posted.head != NIL
    }

    /// Credits available for sending to `peer`, of both kinds (the
    /// receive entries this rank may still fill there).
    pub fn credits_available(&self, peer: u32) -> u64 {
        self.peers
            .as_ref()
            .get(peer as usize)
            .map_or(0, |q| q.rndv.available() + q.eager.available())
    }

    /// The credit ledger with `peer`, for model checkers: receive entries
    /// and eager buffers this rank may still use at the peer, and those it
    /// freed for the peer but has not told it about yet (returns wait for
    /// [`Params::credit_threshold`] frees or a header going that way).
    /// When nothing is in flight between the two, the peer's window equals
    /// this rank's `owed` plus what it holds ([`held_for`](Self::held_for))
    /// plus the peer's `available`. An entry is a credit of either kind,
    /// an eager buffer an eager credit.
    pub fn ledger(&self, peer: u32) -> Ledger {
        self.peers
            .as_ref()
            .get(peer as usize)
            .map_or(Ledger::default(), |q| Ledger {
                entries_available: q.rndv.available() + q.eager.available(),
                buffers_available: q.eager.available(),
                entries_owed: q.rndv.owed() + q.eager.owed(),
                buffers_owed: q.eager.owed(),
            })
    }
}

impl Header {
    #[inline]
    fn ctx_tag(&mut self, ctx: u16, tag: u32) {
        self.context = ctx;
        self.tag = tag;
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
