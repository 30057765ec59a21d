//! The fabric interface: RDMA reliable-connected (RC) semantics, the
//! narrow waist under tandem's RDMA transport (`tandem_driver::transport::rdma`).
//!
//! It is the part of the verbs API tandem needs, with verbs' meaning:
//!
//! * **memory registration**: [`QueuePair::register`] gives an `lkey` (for
//!   the local side of a work request) and an `rkey` (for a peer's RDMA
//!   WRITE or READ), each checked against the region's bounds and
//!   [`Access`] flags;
//! * **an RC queue pair** brought up INIT → RTR → RTS from the peer's
//!   [`QpAddr`] (exchanged at bootstrap) with [`QueuePair::modify`];
//! * **work requests**: [`QueuePair::post_recv`] (a zero-length receive is
//!   allowed: it only catches an immediate) and [`QueuePair::post_send`] of
//!   SEND, SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM and RDMA READ,
//!   signaled or not;
//! * **completions** polled from the send and receive queues into a
//!   caller's array ([`QueuePair::poll_send`], [`QueuePair::poll_recv`]),
//!   no allocation per poll;
//! * **errors as verbs reports them**: a SEND or WRITE_WITH_IMM that finds
//!   no posted receive is answered receiver-not-ready and retried
//!   `rnr_retry` times `min_rnr_timer` apart, then fails with
//!   [`WcStatus::RnrRetryExceeded`] and the queue pair goes to the error
//!   state, where every outstanding and later work request completes with
//!   [`WcStatus::Flushed`].
//!
//! One [`QueuePair`] value bundles a queue pair with the protection domain
//! and the two completion queues it uses: tandem runs one RC connection per
//! peer and polls it from one thread.
//!
//! Two implementations: [`soft`], a software RC NIC that runs the whole
//! RDMA transport in CI (in one process, between processes, between
//! network namespaces), and the real verbs fabric, which opens a device
//! through libibverbs ([`verbs`]).

pub mod soft;
pub mod verbs;
#[cfg(feature = "verbs")]
pub mod verbs_qp;

use std::fmt;

/// What a registered region allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// The local NIC may write it (a receive, or an RDMA READ's target).
    pub local_write: bool,
    /// A peer may RDMA WRITE into it.
    pub remote_write: bool,
    /// A peer may RDMA READ from it.
    pub remote_read: bool,
}

impl Access {
    /// Local write, remote write and remote read.
    pub const ALL: Access = Access {
        local_write: true,
        remote_write: true,
        remote_read: true,
    };
    /// Only a peer's reads (a send buffer offered for RDMA READ).
    pub const REMOTE_READ: Access = Access {
        local_write: false,
        remote_write: false,
        remote_read: true,
    };
}

/// Keys of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Names the region in this side's work requests.
    pub lkey: u32,
    /// Names the region in a peer's RDMA WRITE or READ.
    pub rkey: u32,
}

/// One local buffer of a work request (a scatter/gather element).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Start address (inside a region registered with `lkey`).
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// A remote buffer: address and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// Start address in the peer's memory.
    pub addr: u64,
    /// The peer region's remote key.
    pub rkey: u32,
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// Consumes the peer's next posted receive and fills its buffer.
    Send,
    /// As [`Opcode::Send`], with a 32-bit immediate in the peer's completion.
    SendImm(u32),
    /// Writes into the peer's memory; the peer sees no completion.
    Write(Remote),
    /// Writes, then consumes the peer's next receive (which may be zero
    /// length) with the immediate.
    WriteImm(Remote, u32),
    /// Reads the peer's memory into the local buffer.
    Read(Remote),
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: Opcode,
    /// The local buffer (`None`: zero length).
    pub sge: Option<Sge>,
    /// Whether it produces a completion when it succeeds (a failed one
    /// always does).
    pub signaled: bool,
}

/// How a work request ended (verbs' `ibv_wc_status` values tandem meets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// A receive's buffer was too small for the SEND (`IBV_WC_LOC_LEN_ERR`).
    LocalLength,
    /// A local buffer outside its region or with a wrong key
    /// (`IBV_WC_LOC_PROT_ERR`).
    LocalProtection,
    /// The peer refused an RDMA access: wrong rkey, out of bounds, or not
    /// allowed (`IBV_WC_REM_ACCESS_ERR`).
    RemoteAccess,
    /// The peer's receive was too small, or the request was malformed
    /// (`IBV_WC_REM_INV_REQ_ERR`).
    RemoteInvalidRequest,
    /// The peer never answered: it is gone or unreachable
    /// (`IBV_WC_RETRY_EXC_ERR`).
    RetryExceeded,
    /// The peer had no receive posted `rnr_retry + 1` times in a row
    /// (`IBV_WC_RNR_RETRY_EXC_ERR`).
    RnrRetryExceeded,
    /// The queue pair was in the error state (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
}

impl WcStatus {
    /// The verbs name of the status.
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocalLength => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocalProtection => "IBV_WC_LOC_PROT_ERR",
            WcStatus::RemoteAccess => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemoteInvalidRequest => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RetryExceeded => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExceeded => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::Flushed => "IBV_WC_WR_FLUSH_ERR",
        }
    }
}

/// What a completion completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND or SEND_WITH_IMM.
    Send,
    /// An RDMA WRITE (with or without immediate).
    Write,
    /// An RDMA READ.
    Read,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by a WRITE_WITH_IMM.
    RecvWriteImm,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// For a receive: bytes placed (the WRITE's length for a
    /// WRITE_WITH_IMM).
    pub byte_len: u32,
    /// The immediate, if the operation carried one.
    pub imm: Option<u32>,
}

impl Wc {
    /// The completion of a work request that failed (or was flushed):
    /// only its id, status and kind mean anything, as in verbs.
    pub fn failed(wr_id: u64, opcode: WcOpcode, status: WcStatus) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm: None,
        }
    }

    /// An empty completion to fill arrays with.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm: None,
    };
}

/// Queue pair states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created.
    Reset,
    /// Receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Failed: everything completes flushed.
    Error,
}

/// How a peer's queue pair is reached: what the two sides exchange at
/// bootstrap before RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAddr {
    /// InfiniBand local identifier (0 on RoCE).
    pub lid: u16,
    /// Global identifier (RoCE, or routed InfiniBand).
    pub gid: [u8; 16],
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number the peer will send.
    pub psn: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
}

/// Bytes of an encoded [`QpAddr`].
pub const QP_ADDR_LEN: usize = 30;

impl QpAddr {
    /// Little-endian wire form.
    pub fn encode(&self) -> [u8; QP_ADDR_LEN] {
        let mut b = [0u8; QP_ADDR_LEN];
        b[0..2].copy_from_slice(&self.lid.to_le_bytes());
        b[2..18].copy_from_slice(&self.gid);
        b[18..22].copy_from_slice(&self.qpn.to_le_bytes());
        b[22..26].copy_from_slice(&self.psn.to_le_bytes());
        b[26..30].copy_from_slice(&self.mtu.to_le_bytes());
        b
    }
    /// Reads the wire form.
    pub fn decode(b: &[u8; QP_ADDR_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[2..18]);
        QpAddr {
            lid: u16::from_le_bytes([b[0], b[1]]),
            gid,
            qpn: u32_at(18),
            psn: u32_at(22),
            mtu: u32_at(26),
        }
    }
}

/// Attributes of the RTR and RTS transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcAttrs {
    /// Receiver-not-ready retries before [`WcStatus::RnrRetryExceeded`]
    /// (0..=7; 7 means forever). tandem's default is 0: its credits make a
    /// receiver-not-ready impossible, so one is a bug that must fail loudly.
    pub rnr_retry: u8,
    /// The wait before a receiver-not-ready retry, in the verbs encoding
    /// (1 = 0.01 ms … 31 = 491.52 ms, 0 = 655.36 ms).
    pub min_rnr_timer: u8,
    /// Transport retries (lost packets) before
    /// [`WcStatus::RetryExceeded`], 0..=7.
    pub retry_cnt: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
}

impl Default for RcAttrs {
    fn default() -> Self {
        Self {
            rnr_retry: 0,
            min_rnr_timer: 12,
            retry_cnt: 7,
            timeout: 14,
        }
    }
}

/// The verbs `min_rnr_timer` encoding in microseconds.
pub fn rnr_timer_us(code: u8) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    T[(code & 31) as usize]
}

/// A state change of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modify {
    /// RESET → INIT.
    Init,
    /// INIT → RTR: the peer's address.
    Rtr(QpAddr, RcAttrs),
    /// RTR → RTS.
    Rts(RcAttrs),
    /// Any → ERROR: from its return on, nothing is placed into local
    /// memory through this queue pair and everything outstanding is
    /// flushed.
    Error,
}

/// Queue depths and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Send-queue depth.
    pub max_send_wr: u32,
    /// Receive-queue depth.
    pub max_recv_wr: u32,
    /// Completion-queue depth (each of the two).
    pub cq_depth: u32,
    /// RDMA READs outstanding at once (each way).
    pub max_rd_atomic: u32,
}

/// Why a fabric call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FabricError {
    /// No RDMA device can be used (none present, or libibverbs missing).
    NoDevice(String),
    /// A queue is full: more work requests than its depth.
    QueueFull(&'static str),
    /// A completion queue overflowed: completions were lost and the queue
    /// pair is in the error state.
    CqOverrun,
    /// The call is not allowed in the queue pair's state.
    BadState(QpState, &'static str),
    /// A registration or work request was refused.
    Invalid(String),
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FabricError::NoDevice(s) => write!(f, "no RDMA device: {s}"),
            FabricError::QueueFull(q) => write!(f, "{q} queue is full"),
            FabricError::CqOverrun => f.write_str("completion queue overrun"),
            FabricError::BadState(s, what) => write!(f, "{what} not allowed in state {s:?}"),
            FabricError::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for FabricError {}

/// One RC connection: a queue pair with its protection domain and its
/// send and receive completion queues.
///
/// Work requests name local memory by `lkey`; nothing here keeps that
/// memory alive. Whoever posts must keep a region registered and its
/// memory valid until the work requests using it complete, and must not
/// read memory a peer may still write (verbs' own contract).
pub trait QueuePair: Send {
    /// This side's address, for the peer's RTR.
    fn local_addr(&self) -> QpAddr;

    /// Changes state.
    ///
    /// # Errors
    /// * [`FabricError::BadState`]: a change other than RESET → INIT,
    ///   INIT → RTR, RTR → RTS, or → ERROR (allowed from any state);
    /// * [`FabricError::Invalid`]: at RTS, an `rnr_retry` or `retry_cnt` above
    ///   7; or the fabric refused the change (verbs: `ibv_modify_qp` failed,
    ///   with its reason; the soft NIC: at RTR, the threads that run the queue
    ///   pair could not start on its stream).
    fn modify(&mut self, m: Modify) -> Result<(), FabricError>;

    /// The current state.
    fn state(&self) -> QpState;

    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    /// The memory must stay valid until [`deregister`](Self::deregister)
    /// returns; with `local_write` or `remote_write` the NIC may write it
    /// at any time until then.
    ///
    /// # Errors
    /// [`FabricError::Invalid`] if the region is refused: the soft NIC refuses
    /// one that wraps around the address space; verbs says why `ibv_reg_mr`
    /// failed (for instance out of registration resources, or over the
    /// locked-memory limit).
    unsafe fn register(
        &mut self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<MrKeys, FabricError>;

    /// Deregisters a region; from its return on the NIC touches it no more
    /// (a peer's later access to it fails with a remote access error).
    fn deregister(&mut self, lkey: u32);

    /// Posts a receive (`sge: None` for a zero-length one).
    ///
    /// # Errors
    /// [`FabricError::BadState`] in RESET; [`FabricError::QueueFull`] with
    /// `max_recv_wr` receives outstanding; [`FabricError::Invalid`] for another
    /// refusal by the device (verbs). In the error state a receive is accepted
    /// and completes [`WcStatus::Flushed`].
    fn post_recv(&mut self, wr_id: u64, sge: Option<Sge>) -> Result<(), FabricError>;

    /// Posts a send-queue work request.
    ///
    /// # Errors
    /// [`FabricError::BadState`] in any state but RTS and ERROR (where the
    /// request is accepted and completes [`WcStatus::Flushed`]);
    /// [`FabricError::QueueFull`] with `max_send_wr` requests outstanding;
    /// [`FabricError::Invalid`] for another refusal by the device (verbs).
    fn post_send(&mut self, wr: &SendWr) -> Result<(), FabricError>;

    /// Takes send-queue completions into `out`; returns how many.
    ///
    /// # Errors
    /// [`FabricError::CqOverrun`] once the completion queue overflowed (the
    /// soft NIC reports it when the completions it kept have been taken; the
    /// queue pair is then in the error state; verbs sizes its queues so that
    /// it cannot happen); [`FabricError::Invalid`] if the device cannot be
    /// polled (verbs). A failed work request is not an error here: it comes
    /// back as a completion with its [`WcStatus`].
    fn poll_send(&mut self, out: &mut [Wc]) -> Result<usize, FabricError>;

    /// Takes receive-queue completions into `out`; returns how many.
    ///
    /// # Errors
    /// As [`poll_send`](Self::poll_send).
    fn poll_recv(&mut self, out: &mut [Wc]) -> Result<usize, FabricError>;

    /// Waits, at most `timeout`, until the answers this side's NIC owes
    /// the peer (acknowledgements, read responses) have gone out, so that
    /// closing right after cannot fail requests the peer already had
    /// accepted. Hardware answers at once; a software NIC may need a
    /// moment.
    fn drain(&mut self, _timeout: std::time::Duration) {}

    /// Whether the peer is known to be gone (an out-of-band signal, e.g.
    /// the bootstrap connection closed), as opposed to this queue pair
    /// having failed for another reason.
    fn peer_gone(&self) -> bool;

    /// Receiver-not-ready events this queue pair has seen so far: NAKs it
    /// sent plus NAKs it received.
    fn rnr_events(&self) -> u64;

    /// The fabric's name, for diagnostics ("soft", or the device name).
    fn fabric(&self) -> &str;
}
