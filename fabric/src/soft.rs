//! A software RC NIC: the [`QueuePair`] semantics of an RDMA reliable
//! connection, run by two threads over a byte stream (a TCP connection
//! between hosts or processes, a socket pair inside one process), as
//! soft-iWARP runs iWARP over TCP.
//!
//! It enforces what real RC hardware does, so a transport that passes
//! over it makes no assumption hardware would break:
//!
//! * **In order, exactly once**: every request carries a packet sequence
//!   number; the responder takes only the one it expects and drops the
//!   rest until the requester goes back to it.
//! * **Receiver not ready**: a SEND, SEND_WITH_IMM or WRITE_WITH_IMM that
//!   finds no posted receive is answered with an RNR NAK; the requester
//!   waits `min_rnr_timer` and sends it (and everything after it) again,
//!   `rnr_retry` times (7: forever), then completes it with
//!   [`WcStatus::RnrRetryExceeded`] and goes to the error state.
//! * **Protection**: an RDMA WRITE or READ with an unknown rkey, outside
//!   its region or without the access it needs writes nothing; the
//!   requester gets [`WcStatus::RemoteAccess`] and both queue pairs go to
//!   the error state. A SEND longer than the receive's buffer fails both
//!   ends ([`WcStatus::LocalLength`], [`WcStatus::RemoteInvalidRequest`]).
//! * **Overruns**: posting beyond a queue's depth is refused; a completion
//!   queue that overflows fails the queue pair
//!   ([`FabricError::CqOverrun`]). At most `max_rd_atomic` RDMA READs are
//!   outstanding at once; later ones wait for an answer, as the initiator
//!   depth of a real NIC makes them.
//! * **Peer death**: when the stream closes, the oldest outstanding work
//!   request fails with [`WcStatus::RetryExceeded`] (hardware would report
//!   it after its retries time out; here the closed stream says so at
//!   once) and the rest are flushed.
//!
//! Messages are not cut into MTU-sized packets: one work request is one
//! packet, which changes nothing a user of the interface can observe.
//!
//! The NIC's threads reach registered memory through raw pointers, as a
//! NIC's DMA engine does; the registration's contract
//! ([`QueuePair::register`]) is what makes that sound. Nothing on the
//! data path allocates: queues have fixed capacity and data moves through
//! one fixed bounce buffer per thread.

use crate::Opcode;
use crate::{
    rnr_timer_us, Access, Caps, FabricError, Modify, MrKeys, QpAddr, QpState, QueuePair, RcAttrs,
    SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tandem_core::sync::{AtomicBool, AtomicU64, Ordering};

/// Receiver-not-ready events (NAKs sent and received) of every soft queue
/// pair in this process so far.
static RNR_EVENTS: AtomicU64 = AtomicU64::new(0);

/// Receiver-not-ready events of every soft queue pair in this process
/// (a test hook: feature `test-hooks`).
#[cfg(any(test, feature = "test-hooks"))]
pub fn rnr_events_total() -> u64 {
    RNR_EVENTS.load(Ordering::Relaxed)
}

/// Memory registrations made by every soft queue pair in this process.
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);

/// Memory registrations made by every soft queue pair in this process so
/// far (to check that registered buffers are not registered again; a test
/// hook: feature `test-hooks`).
#[cfg(any(test, feature = "test-hooks"))]
pub fn registrations_total() -> u64 {
    REGISTRATIONS.load(Ordering::Relaxed)
}

/// The byte stream a soft queue pair runs over.
#[derive(Debug)]
pub enum Wire {
    /// A TCP connection (between processes or hosts).
    Tcp(TcpStream),
    /// A Unix socket pair (inside one process).
    Unix(UnixStream),
}

impl Wire {
    /// A connected pair inside this process.
    ///
    /// # Errors
    /// The `std::io::Error` of `socketpair(2)` (out of file descriptors, for
    /// instance).
    pub fn pair() -> std::io::Result<(Wire, Wire)> {
        let (a, b) = UnixStream::pair()?;
        Ok((Wire::Unix(a), Wire::Unix(b)))
    }
    fn try_clone(&self) -> std::io::Result<Wire> {
        Ok(match self {
            Wire::Tcp(s) => Wire::Tcp(s.try_clone()?),
            Wire::Unix(s) => Wire::Unix(s.try_clone()?),
        })
    }
    /// Blocking, without timeouts (the NIC's threads wait as long as the
    /// connection lasts).
    fn prepare(&self) -> std::io::Result<()> {
        match self {
            Wire::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                s.set_nodelay(true)
            }
            Wire::Unix(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)
            }
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Wire::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Wire::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Wire {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Wire::Tcp(s) => s.read(b),
            Wire::Unix(s) => s.read(b),
        }
    }
}

impl Write for Wire {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Wire::Tcp(s) => s.write(b),
            Wire::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Options of the soft NIC beyond the verbs attributes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SoftOptions {
    /// Before handling each incoming request, wait a pseudo-random
    /// 0..=`max_delay_us` microseconds (tests of timing independence).
    pub max_delay_us: u32,
    /// Seed of those delays.
    pub seed: u64,
}

// ---- packets ----

const PKT: usize = 32;
const OP_SEND: u8 = 1;
const OP_WRITE: u8 = 2;
const OP_READ_REQ: u8 = 3;
const OP_READ_RESP: u8 = 4;
const OP_ACK: u8 = 5;
const OP_NAK: u8 = 6;
const NAK_RNR: u8 = 1;
const NAK_ACCESS: u8 = 2;
const NAK_INVALID: u8 = 3;
const FLAG_IMM: u32 = 1;
const BOUNCE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, Default)]
struct Pkt {
    op: u8,
    code: u8,
    psn: u32,
    len: u32,
    imm: u32,
    raddr: u64,
    rkey: u32,
    flags: u32,
}

impl Pkt {
    fn encode(&self) -> [u8; PKT] {
        let mut b = [0u8; PKT];
        b[0] = self.op;
        b[1] = self.code;
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.imm.to_le_bytes());
        b[16..24].copy_from_slice(&self.raddr.to_le_bytes());
        b[24..28].copy_from_slice(&self.rkey.to_le_bytes());
        b[28..32].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
    fn decode(b: &[u8; PKT]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[16..24]);
        Pkt {
            op: b[0],
            code: b[1],
            psn: u32_at(4),
            len: u32_at(8),
            imm: u32_at(12),
            raddr: u64::from_le_bytes(a),
            rkey: u32_at(24),
            flags: u32_at(28),
        }
    }
    fn imm(&self) -> Option<u32> {
        (self.flags & FLAG_IMM != 0).then_some(self.imm)
    }
}

/// `a` comes before `b` in sequence-number order.
fn psn_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

// ---- memory regions ----

#[derive(Debug, Clone, Copy)]
struct Mr {
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    access: Access,
}

#[derive(Default)]
struct Mrs {
    list: Vec<Mr>,
    next_key: u32,
}

impl Mrs {
    fn by_rkey(&self, rkey: u32, addr: u64, len: u64, need: fn(&Access) -> bool) -> bool {
        // As on InfiniBand, a zero-length RDMA access checks neither the
        // rkey nor the address: it touches no memory.
        if len == 0 {
            return true;
        }
        self.list.iter().any(|m| {
            m.rkey == rkey
                && need(&m.access)
                && addr >= m.addr
                && addr.checked_add(len).is_some_and(|e| e <= m.addr + m.len)
        })
    }
    fn by_lkey(&self, s: &Sge, write: bool) -> bool {
        self.list.iter().any(|m| {
            m.lkey == s.lkey
                && (!write || m.access.local_write)
                && s.addr >= m.addr
                && s.addr
                    .checked_add(s.len as u64)
                    .is_some_and(|e| e <= m.addr + m.len)
        })
    }
}

// ---- completion queues ----

struct Cq {
    q: Mutex<VecDeque<Wc>>,
    cap: usize,
    overrun: AtomicBool,
}

impl Cq {
    fn new(cap: usize) -> Self {
        Self {
            q: Mutex::new(VecDeque::with_capacity(cap)),
            cap,
            overrun: AtomicBool::new(false),
        }
    }
    /// `false`: the queue overflowed (the completion is lost).
    fn push(&self, wc: Wc) -> bool {
        let mut q = lock(&self.q);
        if q.len() >= self.cap {
            self.overrun.store(true, Ordering::Release);
            return false;
        }
        q.push_back(wc);
        true
    }
    fn poll(&self, out: &mut [Wc]) -> Result<usize, FabricError> {
        let mut q = lock(&self.q);
        let mut n = 0;
        while n < out.len() {
            match q.pop_front() {
                Some(w) => {
                    out[n] = w;
                    n += 1;
                }
                None => break,
            }
        }
        if n == 0 && self.overrun.load(Ordering::Acquire) {
            return Err(FabricError::CqOverrun);
        }
        Ok(n)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- queue pair state ----

#[derive(Debug, Clone, Copy)]
struct Wqe {
    wr: SendWr,
    psn: u32,
}

#[derive(Debug, Clone, Copy)]
enum Resp {
    Ack(u32),
    Nak(u32, u8),
    ReadData {
        psn: u32,
        addr: u64,
        len: u32,
        rkey: u32,
    },
}

struct Core {
    state: QpState,
    attrs: RcAttrs,
    /// Posted sends, oldest first; `sq[..next_tx]` went out and await
    /// their acknowledgement.
    sq: VecDeque<Wqe>,
    next_tx: usize,
    next_psn: u32,
    rnr_left: u8,
    rnr_until: Option<Instant>,
    rq: VecDeque<(u64, Option<Sge>)>,
    expected_psn: u32,
    resp: VecDeque<Resp>,
    /// The stream closed or failed: the peer is gone.
    wire_dead: bool,
    /// The transmit thread is writing a packet.
    tx_busy: bool,
    /// When the oldest unacknowledged request went out (for the ACK
    /// timeout).
    oldest_sent: Option<Instant>,
    shutdown: bool,
    rnr_events: u64,
}

struct Shared {
    core: Mutex<Core>,
    /// Wakes the transmit thread (and waiters in `close`).
    wake: Condvar,
    /// The registered regions. The receive thread holds it shared while it
    /// places bytes into local memory, so taking it exclusively is a
    /// barrier: once `deregister` or `modify(Error)` has taken it, no
    /// placement is under way and none will start against what changed.
    mrs: RwLock<Mrs>,
    send_cq: Cq,
    recv_cq: Cq,
    caps: Caps,
    opts: SoftOptions,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    /// The queue pair fails: `first` (index into `sq`) completes with
    /// `status`, everything else outstanding is flushed.
    fn fail(&self, c: &mut Core, first: Option<(usize, WcStatus)>) {
        if c.state == QpState::Error {
            return;
        }
        c.state = QpState::Error;
        let mut ok = true;
        for (i, w) in c.sq.drain(..).enumerate() {
            let status = match first {
                Some((f, s)) if f == i => s,
                _ => WcStatus::Flushed,
            };
            ok &= self
                .send_cq
                .push(Wc::failed(w.wr.wr_id, wc_opcode(&w.wr.op), status));
        }
        c.next_tx = 0;
        for (id, _) in c.rq.drain(..) {
            ok &= self
                .recv_cq
                .push(Wc::failed(id, WcOpcode::Recv, WcStatus::Flushed));
        }
        // Answers already owed (a NAK saying why) still go out.
        let _ = ok;
        self.wake.notify_all();
    }

    fn push_resp(&self, c: &mut Core, r: Resp) {
        if let (Resp::Ack(p), Some(Resp::Ack(q))) = (r, c.resp.back_mut()) {
            *q = p;
        } else if c.resp.len() < c.resp.capacity() {
            c.resp.push_back(r);
        } else {
            // More answers owed than any peer following the rules can
            // cause (reads beyond max_rd_atomic): fail rather than grow.
            self.fail(c, None);
            return;
        }
        self.wake.notify_all();
    }

    fn cq_push(&self, c: &mut Core, cq: &Cq, wc: Wc) {
        if !cq.push(wc) {
            self.fail(c, None);
        }
    }

    /// Requests with sequence numbers up to `psn` are acknowledged.
    fn acked(&self, c: &mut Core, psn: u32) {
        if c.next_tx > 0 && c.sq.front().is_some_and(|w| !psn_before(psn, w.psn)) {
            c.oldest_sent = Some(Instant::now());
        }
        while let Some(w) = c.sq.front() {
            if psn_before(psn, w.psn) || c.next_tx == 0 {
                break;
            }
            if c.next_tx == 1 {
                c.oldest_sent = None;
            }
            let w = c.sq.pop_front().expect("front exists");
            c.next_tx -= 1;
            c.rnr_left = c.attrs.rnr_retry;
            if w.wr.signaled {
                let wc = Wc {
                    wr_id: w.wr.wr_id,
                    status: WcStatus::Success,
                    opcode: wc_opcode(&w.wr.op),
                    byte_len: w.wr.sge.map_or(0, |s| s.len),
                    imm: None,
                };
                self.cq_push(c, &self.send_cq, wc);
            }
        }
        self.wake.notify_all();
    }

    fn wire_lost(&self) {
        let mut c = self.core();
        c.wire_dead = true;
        // As with verbs, a queue pair whose peer is gone fails when it has
        // (or next gets) a request to send; one still connecting (INIT,
        // RTR) may reach RTS first: the peer may simply have finished and
        // closed its end before this one was through its transitions.
        if c.state != QpState::Error && !c.sq.is_empty() {
            let first = (!c.sq.is_empty()).then_some((0, WcStatus::RetryExceeded));
            self.fail(&mut c, first);
        }
        self.wake.notify_all();
    }
}

/// How long a request may go unanswered before the requester gives up:
/// the verbs local ACK timeout (4.096 µs × 2^`timeout`) times
/// `retry_cnt + 1` attempts. The soft NIC's stream never loses a packet,
/// so only a peer that stopped answering (its queue pair in the error
/// state) gets here; each attempt waits at least 250 ms, so a busy
/// machine is not mistaken for that.
fn ack_timeout(a: &RcAttrs) -> Duration {
    let one = Duration::from_nanos(4096u64 << a.timeout.min(31)).max(Duration::from_millis(250));
    one * (a.retry_cnt as u32 + 1)
}

/// Live soft queue pairs of this process by number, for [`force_error`].
#[cfg(any(test, feature = "test-hooks"))]
static LIVE: Mutex<Vec<(u32, std::sync::Weak<Shared>)>> = Mutex::new(Vec::new());

/// Puts the soft queue pair numbered `qpn` of this process into the
/// error state, as a hardware fault would (tests of fault handling);
/// `false` if there is none. A test hook: feature `test-hooks`.
#[cfg(any(test, feature = "test-hooks"))]
pub fn force_error(qpn: u32) -> bool {
    let live = lock(&LIVE);
    let Some(sh) = live
        .iter()
        .find(|(q, _)| *q == qpn)
        .and_then(|(_, w)| w.upgrade())
    else {
        return false;
    };
    drop(live);
    let mut c = sh.core();
    sh.fail(&mut c, None);
    drop(c);
    drop(sh.mrs.write().unwrap_or_else(|e| e.into_inner()));
    true
}

fn wc_opcode(op: &Opcode) -> WcOpcode {
    match op {
        Opcode::Send | Opcode::SendImm(_) => WcOpcode::Send,
        Opcode::Write(_) | Opcode::WriteImm(..) => WcOpcode::Write,
        Opcode::Read(_) => WcOpcode::Read,
    }
}

/// A queue pair of the soft NIC.
pub struct SoftQp {
    sh: Arc<Shared>,
    wire: Wire,
    addr: QpAddr,
    threads: Vec<JoinHandle<()>>,
    started: bool,
}

impl std::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftQp")
            .field("qpn", &self.addr.qpn)
            .field("state", &self.state())
            .finish()
    }
}

static NEXT_QPN: AtomicU64 = AtomicU64::new(1);

impl SoftQp {
    /// A queue pair in the RESET state over `wire`, whose other end is the
    /// peer's soft queue pair.
    ///
    /// # Errors
    /// None today: `wire` is not touched until [`Modify::Rtr`], and what can
    /// fail there (making the stream blocking, cloning it, starting the NIC's
    /// threads) [`QueuePair::modify`] reports as [`FabricError::Invalid`].
    pub fn new(wire: Wire, caps: Caps, opts: SoftOptions) -> std::io::Result<Self> {
        let qpn = (NEXT_QPN.fetch_add(1, Ordering::Relaxed) as u32 ^ std::process::id() << 8)
            & 0x00ff_ffff;
        let psn = (qpn.wrapping_mul(2_654_435_761)) & 0x00ff_ffff;
        let cap = |n: u32| (n as usize).max(1);
        let sh = Arc::new(Shared {
            core: Mutex::new(Core {
                state: QpState::Reset,
                attrs: RcAttrs::default(),
                sq: VecDeque::with_capacity(cap(caps.max_send_wr)),
                next_tx: 0,
                next_psn: psn,
                rnr_left: 0,
                rnr_until: None,
                rq: VecDeque::with_capacity(cap(caps.max_recv_wr)),
                expected_psn: 0,
                resp: VecDeque::with_capacity(cap(caps.max_rd_atomic) + 8),
                wire_dead: false,
                tx_busy: false,
                oldest_sent: None,
                shutdown: false,
                rnr_events: 0,
            }),
            wake: Condvar::new(),
            mrs: RwLock::new(Mrs {
                list: Vec::with_capacity(64),
                next_key: qpn << 8,
            }),
            send_cq: Cq::new(cap(caps.cq_depth)),
            recv_cq: Cq::new(cap(caps.cq_depth)),
            caps,
            opts,
        });
        #[cfg(any(test, feature = "test-hooks"))]
        {
            let mut live = lock(&LIVE);
            live.retain(|(_, w)| w.strong_count() > 0);
            live.push((qpn, Arc::downgrade(&sh)));
        }
        Ok(Self {
            sh,
            wire,
            addr: QpAddr {
                lid: 0,
                gid: [0; 16],
                qpn,
                psn,
                mtu: 4096,
            },
            threads: Vec::new(),
            started: false,
        })
    }

    fn start_threads(&mut self) -> Result<(), FabricError> {
        if self.started {
            return Ok(());
        }
        let io = |e: std::io::Error| FabricError::Invalid(format!("soft NIC: {e}"));
        self.wire.prepare().map_err(io)?;
        let rx_wire = self.wire.try_clone().map_err(io)?;
        let tx_wire = self.wire.try_clone().map_err(io)?;
        let (a, b) = (self.sh.clone(), self.sh.clone());
        let name = format!("tandem-softnic-{}", self.addr.qpn);
        self.threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-rx"))
                .spawn(move || rx_loop(&a, rx_wire))
                .map_err(io)?,
        );
        self.threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-tx"))
                .spawn(move || tx_loop(&b, tx_wire))
                .map_err(io)?,
        );
        self.started = true;
        Ok(())
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        {
            let mut c = self.sh.core();
            c.shutdown = true;
            self.sh.wake.notify_all();
        }
        self.wire.shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl QueuePair for SoftQp {
    fn local_addr(&self) -> QpAddr {
        self.addr
    }

    fn modify(&mut self, m: Modify) -> Result<(), FabricError> {
        let mut c = self.sh.core();
        match (c.state, m) {
            (QpState::Reset, Modify::Init) => c.state = QpState::Init,
            (QpState::Init, Modify::Rtr(remote, attrs)) => {
                c.expected_psn = remote.psn;
                c.attrs = attrs;
                c.state = QpState::Rtr;
                drop(c);
                return self.start_threads();
            }
            (QpState::Rtr, Modify::Rts(attrs)) => {
                if attrs.rnr_retry > 7 || attrs.retry_cnt > 7 {
                    return Err(FabricError::Invalid(format!(
                        "rnr_retry and retry_cnt are 0..=7, got {} and {}",
                        attrs.rnr_retry, attrs.retry_cnt
                    )));
                }
                c.attrs.rnr_retry = attrs.rnr_retry;
                c.attrs.retry_cnt = attrs.retry_cnt;
                c.attrs.timeout = attrs.timeout;
                c.rnr_left = attrs.rnr_retry;
                c.state = QpState::Rts;
            }
            (_, Modify::Error) => {
                self.sh.fail(&mut c, None);
                drop(c);
                // Barrier: a placement under way ends before we return.
                drop(self.sh.mrs.write().unwrap_or_else(|e| e.into_inner()));
            }
            (s, _) => return Err(FabricError::BadState(s, "this transition")),
        }
        Ok(())
    }

    fn state(&self) -> QpState {
        self.sh.core().state
    }

    unsafe fn register(
        &mut self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<MrKeys, FabricError> {
        if addr.checked_add(len as u64).is_none() {
            return Err(FabricError::Invalid(format!(
                "region at {addr:#x} of {len} bytes wraps"
            )));
        }
        REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
        let mut m = self.sh.mrs.write().unwrap_or_else(|e| e.into_inner());
        m.next_key = m.next_key.wrapping_add(1);
        let k = m.next_key;
        // lkey and rkey differ, so one cannot stand in for the other.
        let keys = MrKeys {
            lkey: k,
            rkey: k.rotate_left(16) ^ 0x5a5a_5a5a,
        };
        m.list.push(Mr {
            lkey: keys.lkey,
            rkey: keys.rkey,
            addr,
            len: len as u64,
            access,
        });
        Ok(keys)
    }

    fn deregister(&mut self, lkey: u32) {
        let mut m = self.sh.mrs.write().unwrap_or_else(|e| e.into_inner());
        m.list.retain(|r| r.lkey != lkey);
    }

    fn post_recv(&mut self, wr_id: u64, sge: Option<Sge>) -> Result<(), FabricError> {
        let mut c = self.sh.core();
        match c.state {
            QpState::Reset => return Err(FabricError::BadState(c.state, "post_recv")),
            QpState::Error => {
                let wc = Wc::failed(wr_id, WcOpcode::Recv, WcStatus::Flushed);
                self.sh.cq_push(&mut c, &self.sh.recv_cq, wc);
                return Ok(());
            }
            _ => {}
        }
        if c.rq.len() >= self.sh.caps.max_recv_wr as usize {
            return Err(FabricError::QueueFull("receive"));
        }
        c.rq.push_back((wr_id, sge));
        Ok(())
    }

    fn post_send(&mut self, wr: &SendWr) -> Result<(), FabricError> {
        let mut c = self.sh.core();
        match c.state {
            QpState::Rts => {}
            QpState::Error => {
                let wc = Wc::failed(wr.wr_id, wc_opcode(&wr.op), WcStatus::Flushed);
                self.sh.cq_push(&mut c, &self.sh.send_cq, wc);
                return Ok(());
            }
            s => return Err(FabricError::BadState(s, "post_send")),
        }
        if c.sq.len() >= self.sh.caps.max_send_wr as usize {
            return Err(FabricError::QueueFull("send"));
        }
        let psn = c.next_psn;
        c.next_psn = psn.wrapping_add(1);
        c.sq.push_back(Wqe { wr: *wr, psn });
        if c.wire_dead {
            let first = (c.sq.len() - 1).min(c.next_tx);
            self.sh.fail(&mut c, Some((first, WcStatus::RetryExceeded)));
        }
        self.sh.wake.notify_all();
        Ok(())
    }

    fn poll_send(&mut self, out: &mut [Wc]) -> Result<usize, FabricError> {
        self.sh.send_cq.poll(out)
    }

    fn poll_recv(&mut self, out: &mut [Wc]) -> Result<usize, FabricError> {
        self.sh.recv_cq.poll(out)
    }

    fn drain(&mut self, timeout: Duration) {
        let end = Instant::now() + timeout;
        let mut c = self.sh.core();
        while (!c.resp.is_empty() || c.tx_busy) && !c.wire_dead && Instant::now() < end {
            c = self
                .sh
                .wake
                .wait_timeout(c, Duration::from_millis(5))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn peer_gone(&self) -> bool {
        self.sh.core().wire_dead
    }

    fn rnr_events(&self) -> u64 {
        self.sh.core().rnr_events
    }

    fn fabric(&self) -> &str {
        "soft"
    }
}

// ---- the transmit thread ----

enum Item {
    Req(Wqe),
    Resp(Resp),
}

fn tx_loop(sh: &Shared, mut w: Wire) {
    let mut bounce = vec![0u8; BOUNCE];
    loop {
        let item = {
            let mut c = sh.core();
            loop {
                if c.shutdown {
                    return;
                }
                if c.wire_dead {
                    return;
                }
                if let Some(r) = c.resp.pop_front() {
                    c.tx_busy = true;
                    break Item::Resp(r);
                }
                let now = Instant::now();
                if c.rnr_until.is_some_and(|t| t <= now) {
                    c.rnr_until = None;
                }
                // No answer for too long: the peer's queue pair is gone
                // (in the error state it drops requests silently).
                if let (Some(t), QpState::Rts) = (c.oldest_sent, c.state) {
                    if c.next_tx > 0 && now.duration_since(t) > ack_timeout(&c.attrs) {
                        sh.fail(&mut c, Some((0, WcStatus::RetryExceeded)));
                        continue;
                    }
                }
                // As RC hardware does, at most `max_rd_atomic` READs are
                // outstanding: a READ beyond them waits for an answer.
                let read_blocked = || {
                    matches!(c.sq[c.next_tx].wr.op, Opcode::Read(_))
                        && c.sq
                            .iter()
                            .take(c.next_tx)
                            .filter(|x| matches!(x.wr.op, Opcode::Read(_)))
                            .count()
                            >= sh.caps.max_rd_atomic.max(1) as usize
                };
                if c.state == QpState::Rts
                    && c.rnr_until.is_none()
                    && c.next_tx < c.sq.len()
                    && !read_blocked()
                {
                    let wqe = c.sq[c.next_tx];
                    c.next_tx += 1;
                    c.oldest_sent.get_or_insert(now);
                    c.tx_busy = true;
                    break Item::Req(wqe);
                }
                let wait = match c.rnr_until {
                    Some(t) => t.saturating_duration_since(now),
                    None => Duration::from_millis(100),
                };
                c = sh
                    .wake
                    .wait_timeout(c, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        let ok = match item {
            Item::Resp(r) => send_resp(sh, &mut w, r, &mut bounce),
            Item::Req(q) => send_req(sh, &mut w, q, &mut bounce),
        };
        let mut c = sh.core();
        c.tx_busy = false;
        sh.wake.notify_all();
        drop(c);
        if !ok {
            sh.wire_lost();
            return;
        }
    }
}

/// Which region a chunk of placed or sent bytes must still lie in.
#[derive(Clone, Copy)]
enum Check {
    /// A local buffer (`write`: the NIC writes it).
    Local(Sge, bool),
    /// A peer's RDMA access by rkey, with the access it needs.
    Remote(u32, u64, u64, fn(&Access) -> bool),
}

impl Check {
    fn holds(&self, m: &Mrs) -> bool {
        match *self {
            Check::Local(s, write) => m.by_lkey(&s, write),
            Check::Remote(rkey, addr, len, need) => m.by_rkey(rkey, addr, len, need),
        }
    }
}

/// Writes `len` bytes of local memory at `addr` to the wire, a chunk at a
/// time: each chunk is copied out holding the region table shared (and
/// only then written, so no lock is held across blocking I/O). If the
/// region goes away meanwhile, zeros keep the stream framed and the result
/// is `Ok(false)`.
fn write_mem(
    sh: &Shared,
    w: &mut Wire,
    addr: u64,
    len: usize,
    check: Check,
    bounce: &mut [u8],
) -> std::io::Result<bool> {
    let mut off = 0;
    let mut intact = true;
    while off < len {
        let n = (len - off).min(bounce.len());
        {
            let m = sh.mrs.read().unwrap_or_else(|e| e.into_inner());
            if intact && check.holds(&m) {
                // SAFETY: `check` just confirmed, holding the table shared,
                // that the whole buffer lies in a registered region;
                // registration's contract keeps that memory valid until it
                // is deregistered, which waits for the shared hold to end.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (addr as usize + off) as *const u8,
                        bounce.as_mut_ptr(),
                        n,
                    )
                };
            } else {
                intact = false;
                bounce[..n].fill(0);
            }
        }
        w.write_all(&bounce[..n])?;
        off += n;
    }
    Ok(intact)
}

fn send_req(sh: &Shared, w: &mut Wire, q: Wqe, bounce: &mut [u8]) -> bool {
    let mut p = Pkt {
        psn: q.psn,
        len: q.wr.sge.map_or(0, |s| s.len),
        ..Pkt::default()
    };
    let (op, remote, imm) = match q.wr.op {
        Opcode::Send => (OP_SEND, None, None),
        Opcode::SendImm(i) => (OP_SEND, None, Some(i)),
        Opcode::Write(r) => (OP_WRITE, Some(r), None),
        Opcode::WriteImm(r, i) => (OP_WRITE, Some(r), Some(i)),
        Opcode::Read(r) => (OP_READ_REQ, Some(r), None),
    };
    p.op = op;
    if let Some(r) = remote {
        p.raddr = r.addr;
        p.rkey = r.rkey;
    }
    if let Some(i) = imm {
        p.imm = i;
        p.flags = FLAG_IMM;
    }
    let local_bad = |sh: &Shared| {
        let mut c = sh.core();
        if let Some(i) = c.sq.iter().position(|x| x.psn == q.psn) {
            sh.fail(&mut c, Some((i, WcStatus::LocalProtection)));
        }
    };
    if let Some(s) = q.wr.sge {
        let m = sh.mrs.read().unwrap_or_else(|e| e.into_inner());
        if !m.by_lkey(&s, op == OP_READ_REQ) {
            drop(m);
            local_bad(sh);
            return true;
        }
    }
    if w.write_all(&p.encode()).is_err() {
        return false;
    }
    match q.wr.sge {
        Some(s) if op != OP_READ_REQ => {
            match write_mem(
                sh,
                w,
                s.addr,
                s.len as usize,
                Check::Local(s, false),
                bounce,
            ) {
                Ok(true) => true,
                Ok(false) => {
                    local_bad(sh);
                    true
                }
                Err(_) => false,
            }
        }
        _ => true,
    }
}

fn send_resp(sh: &Shared, w: &mut Wire, r: Resp, bounce: &mut [u8]) -> bool {
    let (op, code, psn, len) = match r {
        Resp::Ack(psn) => (OP_ACK, 0, psn, 0),
        Resp::Nak(psn, code) => (OP_NAK, code, psn, 0),
        // The region may have been deregistered since the request was
        // accepted: then the answer is the access NAK, not data (the
        // requester completes a READ when its data arrives, so a NAK
        // after zeros would come too late).
        Resp::ReadData {
            psn,
            len,
            addr,
            rkey,
        } if !Check::Remote(rkey, addr, len as u64, |a| a.remote_read)
            .holds(&sh.mrs.read().unwrap_or_else(|e| e.into_inner())) =>
        {
            (OP_NAK, NAK_ACCESS, psn, 0)
        }
        Resp::ReadData { psn, len, .. } => (OP_READ_RESP, 0, psn, len),
    };
    let gone = op == OP_NAK && matches!(r, Resp::ReadData { .. });
    let p = Pkt {
        op,
        code,
        psn,
        len,
        ..Pkt::default()
    };
    if w.write_all(&p.encode()).is_err() {
        return false;
    }
    if let (Resp::ReadData { addr, rkey, .. }, false) = (r, gone) {
        let check = Check::Remote(rkey, addr, len as u64, |a| a.remote_read);
        // A region deregistered during the copy (between two chunks of a
        // large answer) reads as zeros, so the stream stays framed, and
        // the NAK that follows comes after the requester took the data:
        // the one case left where a READ of memory deregistered under it
        // completes with zeros instead of an error.
        match write_mem(sh, w, addr, len as usize, check, bounce) {
            Ok(true) => {}
            Ok(false) => {
                let nak = Pkt {
                    op: OP_NAK,
                    code: NAK_ACCESS,
                    psn,
                    ..Pkt::default()
                };
                return w.write_all(&nak.encode()).is_ok();
            }
            Err(_) => return false,
        }
    }
    true
}

// ---- the receive thread ----

/// Reads `len` bytes from the wire into local memory at `addr` (or drops
/// them: `None`). Each chunk is read first and placed after, holding the
/// region table shared and only while `check` still holds and the queue
/// pair is not in the error state, so that `deregister` and
/// `modify(Error)` are barriers. `Ok(false)`: placement stopped early.
fn read_into(
    sh: &Shared,
    w: &mut Wire,
    to: Option<(u64, Check)>,
    len: usize,
    bounce: &mut [u8],
) -> std::io::Result<bool> {
    let mut off = 0;
    let mut intact = true;
    while off < len {
        let n = (len - off).min(bounce.len());
        w.read_exact(&mut bounce[..n])?;
        if let (Some((a, check)), true) = (to, intact) {
            let m = sh.mrs.read().unwrap_or_else(|e| e.into_inner());
            if check.holds(&m) && sh.core().state != QpState::Error {
                // SAFETY: `check` just confirmed, holding the table shared,
                // that the whole destination lies in a region registered
                // for this write; registration keeps it valid until it is
                // deregistered, which waits for the shared hold to end.
                unsafe {
                    std::ptr::copy_nonoverlapping(bounce.as_ptr(), (a as usize + off) as *mut u8, n)
                };
            } else {
                intact = false;
            }
        }
        off += n;
    }
    Ok(intact)
}

fn drop_bytes(sh: &Shared, w: &mut Wire, len: usize, bounce: &mut [u8]) -> bool {
    read_into(sh, w, None, len, bounce).is_ok()
}

/// The seeded delays of `SoftOptions::max_delay_us`, from the workspace's
/// one generator.
struct Delay(tandem_core::rng::SplitMix64);

impl Delay {
    fn next(&mut self, max: u32) -> Duration {
        Duration::from_micros(self.0.next_u64() % (max as u64 + 1))
    }
}

fn rx_loop(sh: &Shared, mut w: Wire) {
    let mut bounce = vec![0u8; BOUNCE];
    let mut delay = Delay(tandem_core::rng::SplitMix64(sh.opts.seed));
    loop {
        let mut hb = [0u8; PKT];
        if w.read_exact(&mut hb).is_err() {
            sh.wire_lost();
            return;
        }
        let p = Pkt::decode(&hb);
        let ok = match p.op {
            OP_SEND | OP_WRITE | OP_READ_REQ => {
                if sh.opts.max_delay_us > 0 {
                    std::thread::sleep(delay.next(sh.opts.max_delay_us));
                }
                on_request(sh, &mut w, &p, &mut bounce)
            }
            OP_ACK => {
                let mut c = sh.core();
                sh.acked(&mut c, p.psn);
                true
            }
            OP_NAK => {
                on_nak(sh, &p);
                true
            }
            OP_READ_RESP => on_read_resp(sh, &mut w, &p, &mut bounce),
            _ => false,
        };
        if !ok {
            sh.wire_lost();
            return;
        }
    }
}

fn on_request(sh: &Shared, w: &mut Wire, p: &Pkt, bounce: &mut [u8]) -> bool {
    let data = if p.op == OP_READ_REQ {
        0
    } else {
        p.len as usize
    };
    let remote = match p.op {
        OP_WRITE => Some(Check::Remote(p.rkey, p.raddr, p.len as u64, |a| {
            a.remote_write
        })),
        OP_READ_REQ => Some(Check::Remote(p.rkey, p.raddr, p.len as u64, |a| {
            a.remote_read
        })),
        _ => None,
    };
    let consumes = p.op == OP_SEND || (p.op == OP_WRITE && p.imm().is_some());
    let m = sh.mrs.read().unwrap_or_else(|e| e.into_inner());
    let mut c = sh.core();
    let live = matches!(c.state, QpState::Rtr | QpState::Rts);
    if !live || p.psn != c.expected_psn {
        // Not accepting, or out of sequence (after a NAK, until the
        // requester goes back): drop it. A duplicate gets its ACK again.
        if live && psn_before(p.psn, c.expected_psn) {
            let last = c.expected_psn.wrapping_sub(1);
            sh.push_resp(&mut c, Resp::Ack(last));
        }
        drop((c, m));
        return drop_bytes(sh, w, data, bounce);
    }
    // Remote access checks first: a refused request writes nothing.
    if remote.is_some_and(|k| !k.holds(&m)) {
        sh.push_resp(&mut c, Resp::Nak(p.psn, NAK_ACCESS));
        sh.fail(&mut c, None);
        drop((c, m));
        return drop_bytes(sh, w, data, bounce);
    }
    let mut recv = None;
    if consumes {
        let Some(&(id, sge)) = c.rq.front() else {
            c.rnr_events += 1;
            RNR_EVENTS.fetch_add(1, Ordering::Relaxed);
            sh.push_resp(&mut c, Resp::Nak(p.psn, NAK_RNR));
            drop((c, m));
            return drop_bytes(sh, w, data, bounce);
        };
        if p.op == OP_SEND {
            let fits = p.len <= sge.map_or(0, |s| s.len);
            let valid = sge.is_none_or(|s| m.by_lkey(&s, true));
            if !fits || !valid {
                c.rq.pop_front();
                let status = if fits {
                    WcStatus::LocalProtection
                } else {
                    WcStatus::LocalLength
                };
                let wc = Wc::failed(id, WcOpcode::Recv, status);
                sh.cq_push(&mut c, &sh.recv_cq, wc);
                sh.push_resp(&mut c, Resp::Nak(p.psn, NAK_INVALID));
                sh.fail(&mut c, None);
                drop((c, m));
                return drop_bytes(sh, w, data, bounce);
            }
        }
        c.rq.pop_front();
        recv = Some((id, sge));
    }
    c.expected_psn = c.expected_psn.wrapping_add(1);
    if p.op == OP_READ_REQ {
        let r = Resp::ReadData {
            psn: p.psn,
            addr: p.raddr,
            len: p.len,
            rkey: p.rkey,
        };
        sh.push_resp(&mut c, r);
        return true;
    }
    drop((c, m));
    let to = match (p.op, recv) {
        (OP_WRITE, _) => remote.map(|k| (p.raddr, k)),
        (_, Some((_, Some(s)))) => Some((s.addr, Check::Local(s, true))),
        _ => None,
    };
    let intact = match read_into(sh, w, to.filter(|_| data > 0), data, bounce) {
        Ok(i) => i,
        Err(_) => return false,
    };
    let mut c = sh.core();
    if c.state == QpState::Error {
        return true;
    }
    if !intact {
        // Deregistered while the bytes came in.
        sh.push_resp(&mut c, Resp::Nak(p.psn, NAK_ACCESS));
        sh.fail(&mut c, None);
        return true;
    }
    if let Some((id, _)) = recv {
        let wc = Wc {
            wr_id: id,
            status: WcStatus::Success,
            opcode: if p.op == OP_SEND {
                WcOpcode::Recv
            } else {
                WcOpcode::RecvWriteImm
            },
            byte_len: p.len,
            imm: p.imm(),
        };
        sh.cq_push(&mut c, &sh.recv_cq, wc);
    }
    sh.push_resp(&mut c, Resp::Ack(p.psn));
    true
}

fn on_nak(sh: &Shared, p: &Pkt) {
    let mut c = sh.core();
    if !c.sq.iter().any(|w| w.psn == p.psn) {
        return;
    }
    // Everything before the refused request was accepted.
    sh.acked(&mut c, p.psn.wrapping_sub(1));
    let i = c.sq.iter().position(|w| w.psn == p.psn).unwrap_or(0);
    match p.code {
        NAK_RNR => {
            c.rnr_events += 1;
            RNR_EVENTS.fetch_add(1, Ordering::Relaxed);
            if c.attrs.rnr_retry == 7 || c.rnr_left > 0 {
                if c.attrs.rnr_retry != 7 {
                    c.rnr_left -= 1;
                }
                c.next_tx = i;
                c.oldest_sent = None;
                let wait = Duration::from_micros(rnr_timer_us(c.attrs.min_rnr_timer));
                c.rnr_until = Some(Instant::now() + wait);
                sh.wake.notify_all();
            } else {
                sh.fail(&mut c, Some((i, WcStatus::RnrRetryExceeded)));
            }
        }
        NAK_ACCESS => sh.fail(&mut c, Some((i, WcStatus::RemoteAccess))),
        _ => sh.fail(&mut c, Some((i, WcStatus::RemoteInvalidRequest))),
    }
}

fn on_read_resp(sh: &Shared, w: &mut Wire, p: &Pkt, bounce: &mut [u8]) -> bool {
    let mut c = sh.core();
    let at = c.sq.iter().position(|x| x.psn == p.psn);
    let target = at.and_then(|i| match (c.sq[i].wr.op, c.sq[i].wr.sge) {
        (Opcode::Read(_), Some(s)) if s.len >= p.len => Some(Some(s)),
        (Opcode::Read(_), None) if p.len == 0 => Some(None),
        _ => None,
    });
    let Some(target) = target.filter(|_| c.state != QpState::Error) else {
        if let (Some(i), QpState::Rts) = (at, c.state) {
            sh.fail(&mut c, Some((i, WcStatus::LocalProtection)));
        }
        drop(c);
        return drop_bytes(sh, w, p.len as usize, bounce);
    };
    drop(c);
    let to = target.map(|s| (s.addr, Check::Local(s, true)));
    let intact = match read_into(sh, w, to.filter(|_| p.len > 0), p.len as usize, bounce) {
        Ok(i) => i,
        Err(_) => return false,
    };
    let mut c = sh.core();
    if c.state == QpState::Error {
        return true;
    }
    // A read's answer also acknowledges everything before it.
    sh.acked(&mut c, p.psn.wrapping_sub(1));
    let Some(i) = c.sq.iter().position(|x| x.psn == p.psn) else {
        return true;
    };
    if !intact {
        sh.fail(&mut c, Some((i, WcStatus::LocalProtection)));
        return true;
    }
    if i == 0 {
        let front = c.sq.pop_front().expect("front exists");
        // Its answer acknowledges it: the ACK timeout restarts, or stops
        // when nothing else is outstanding (as in `acked`).
        c.oldest_sent = (c.next_tx > 1).then(Instant::now);
        c.next_tx -= 1;
        if front.wr.signaled {
            let wc = Wc {
                wr_id: front.wr.wr_id,
                status: WcStatus::Success,
                opcode: WcOpcode::Read,
                byte_len: p.len,
                imm: None,
            };
            sh.cq_push(&mut c, &sh.send_cq, wc);
        }
        sh.wake.notify_all();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Remote;

    const CAPS: Caps = Caps {
        max_send_wr: 64,
        max_recv_wr: 64,
        cq_depth: 128,
        max_rd_atomic: 8,
    };

    fn attrs(rnr_retry: u8) -> RcAttrs {
        RcAttrs {
            rnr_retry,
            min_rnr_timer: 1,
            ..RcAttrs::default()
        }
    }

    /// Two connected queue pairs, `a` and `b`, with their own RC
    /// attributes and the same options.
    fn connect(caps: Caps, at: [RcAttrs; 2], opts: SoftOptions) -> (SoftQp, SoftQp) {
        let (wa, wb) = Wire::pair().unwrap();
        let mut a = SoftQp::new(wa, caps, opts).unwrap();
        let mut b = SoftQp::new(wb, caps, opts).unwrap();
        let (aa, ba) = (a.local_addr(), b.local_addr());
        for (q, peer, at) in [(&mut a, ba, at[0]), (&mut b, aa, at[1])] {
            q.modify(Modify::Init).unwrap();
            q.modify(Modify::Rtr(peer, at)).unwrap();
            q.modify(Modify::Rts(at)).unwrap();
        }
        (a, b)
    }

    fn pair_with(caps: Caps, a_retry: u8) -> (SoftQp, SoftQp) {
        connect(caps, [attrs(a_retry), attrs(0)], SoftOptions::default())
    }

    fn pair() -> (SoftQp, SoftQp) {
        pair_with(CAPS, 0)
    }

    /// Waits for `n` completions (at most 5 s).
    fn wait(q: &mut SoftQp, send: bool, n: usize) -> Vec<Wc> {
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        let mut buf = [Wc::EMPTY; 16];
        while got.len() < n {
            assert!(Instant::now() < end, "timed out with {got:?}");
            let k = if send {
                q.poll_send(&mut buf)
            } else {
                q.poll_recv(&mut buf)
            }
            .unwrap();
            got.extend_from_slice(&buf[..k]);
            if k == 0 {
                std::thread::yield_now();
            }
        }
        got
    }

    fn reg(q: &mut SoftQp, b: &mut [u8], acc: Access) -> MrKeys {
        // SAFETY: every test keeps its buffers alive past the queue pairs'
        // use of them (they outlive the queue pairs or are deregistered).
        unsafe { q.register(b.as_mut_ptr() as u64, b.len(), acc) }.unwrap()
    }

    /// `b` as a peer names it, through the registration `k`.
    fn remote(b: &[u8], k: MrKeys) -> Remote {
        Remote {
            addr: b.as_ptr() as u64,
            rkey: k.rkey,
        }
    }

    fn sge(b: &[u8], k: MrKeys) -> Option<Sge> {
        Some(Sge {
            addr: b.as_ptr() as u64,
            len: b.len() as u32,
            lkey: k.lkey,
        })
    }

    fn send(wr_id: u64, op: Opcode, sge: Option<Sge>) -> SendWr {
        SendWr {
            wr_id,
            op,
            sge,
            signaled: true,
        }
    }

    #[test]
    fn send_lands_in_the_posted_receive_in_order() {
        let (mut a, mut b) = pair();
        let mut src = *b"hello world, in order";
        let mut dst = [[0u8; 32]; 4];
        let ks = reg(&mut a, &mut src, Access::ALL);
        for (i, d) in dst.iter_mut().enumerate() {
            let kd = reg(&mut b, d, Access::ALL);
            b.post_recv(i as u64, sge(d, kd)).unwrap();
        }
        for i in 0..4u64 {
            let mut s = sge(&src, ks);
            s.as_mut().unwrap().len = 5 + i as u32;
            a.post_send(&send(10 + i, Opcode::SendImm(i as u32), s))
                .unwrap();
        }
        let r = wait(&mut b, false, 4);
        for (i, wc) in r.iter().enumerate() {
            assert_eq!(
                (wc.wr_id, wc.status, wc.imm),
                (i as u64, WcStatus::Success, Some(i as u32))
            );
            assert_eq!(wc.byte_len, 5 + i as u32);
            assert_eq!(&dst[i][..5 + i], &src[..5 + i]);
        }
        let s: Vec<u64> = wait(&mut a, true, 4).iter().map(|w| w.wr_id).collect();
        assert_eq!(s, [10, 11, 12, 13]);
        assert_eq!(a.rnr_events() + b.rnr_events(), 0);
    }

    #[test]
    fn a_send_without_a_posted_receive_fails_with_rnr_retry_0() {
        let (mut a, b) = pair();
        let mut src = [7u8; 8];
        let ks = reg(&mut a, &mut src, Access::ALL);
        a.post_send(&send(1, Opcode::Send, sge(&src, ks))).unwrap();
        a.post_send(&send(2, Opcode::Send, sge(&src, ks))).unwrap();
        let w = wait(&mut a, true, 2);
        assert_eq!(w[0].status, WcStatus::RnrRetryExceeded);
        assert_eq!(w[1].status, WcStatus::Flushed);
        assert_eq!(a.state(), QpState::Error);
        assert!(b.rnr_events() >= 1 && a.rnr_events() >= 1);
        // Everything later is flushed too.
        a.post_send(&send(3, Opcode::Send, sge(&src, ks))).unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::Flushed);
    }

    #[test]
    fn rnr_retries_succeed_once_the_receive_is_posted() {
        let (mut a, mut b) = pair_with(CAPS, 7);
        let mut src = [9u8; 16];
        let mut dst = [0u8; 16];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let kd = reg(&mut b, &mut dst, Access::ALL);
        a.post_send(&send(1, Opcode::Send, sge(&src, ks))).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while b.rnr_events() == 0 {
            assert!(Instant::now() < end);
            std::thread::yield_now();
        }
        b.post_recv(5, sge(&dst, kd)).unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::Success);
        assert_eq!(wait(&mut b, false, 1)[0].wr_id, 5);
        assert_eq!(dst, src);
    }

    #[test]
    fn write_with_imm_consumes_a_zero_length_receive() {
        let (mut a, mut b) = pair();
        let mut src = [3u8; 100];
        let mut dst = [0u8; 200];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let kd = reg(&mut b, &mut dst, Access::ALL);
        b.post_recv(77, None).unwrap();
        let r = Remote {
            addr: dst.as_ptr() as u64 + 50,
            rkey: kd.rkey,
        };
        a.post_send(&send(1, Opcode::WriteImm(r, 0xabc), sge(&src, ks)))
            .unwrap();
        let wc = wait(&mut b, false, 1)[0];
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.imm, wc.byte_len),
            (77, WcOpcode::RecvWriteImm, Some(0xabc), 100)
        );
        assert!(dst[..50].iter().all(|&x| x == 0) && dst[50..150].iter().all(|&x| x == 3));
        assert!(dst[150..].iter().all(|&x| x == 0));
    }

    #[test]
    fn bad_rkeys_and_bounds_write_nothing_and_fail_both_ends() {
        for case in 0..3 {
            let (mut a, mut b) = pair();
            let mut src = [1u8; 64];
            let mut dst = [0u8; 64];
            let ks = reg(&mut a, &mut src, Access::ALL);
            let acc = if case == 2 {
                Access::REMOTE_READ
            } else {
                Access::ALL
            };
            let kd = reg(&mut b, &mut dst, acc);
            let r = match case {
                0 => Remote {
                    addr: dst.as_ptr() as u64,
                    rkey: kd.rkey ^ 1,
                },
                1 => Remote {
                    addr: dst.as_ptr() as u64 + 1,
                    rkey: kd.rkey,
                },
                _ => remote(&dst, kd),
            };
            a.post_send(&send(1, Opcode::Write(r), sge(&src, ks)))
                .unwrap();
            assert_eq!(
                wait(&mut a, true, 1)[0].status,
                WcStatus::RemoteAccess,
                "case {case}"
            );
            assert_eq!(dst, [0u8; 64], "case {case}: nothing written");
            assert_eq!(b.state(), QpState::Error);
        }
    }

    /// A local SGE must name the key of a region that holds it: an lkey
    /// that is not the region's fails the request with
    /// `LocalProtection`, even when the address lies inside a region.
    #[test]
    fn a_wrong_lkey_fails_the_request_with_local_protection() {
        let (mut a, mut b) = pair();
        let mut src = [3u8; 16];
        let mut dst = [0u8; 16];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let kd = reg(&mut b, &mut dst, Access::ALL);
        b.post_recv(1, sge(&dst, kd)).unwrap();
        let mut s = sge(&src, ks);
        s.as_mut().unwrap().lkey ^= 0x5a5a;
        a.post_send(&send(1, Opcode::Send, s)).unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::LocalProtection);
        assert_eq!(dst, [0u8; 16], "nothing was sent");
    }

    /// Polling into an array shorter than the completions waiting takes
    /// as many as fit and leaves the rest, in order, for the next poll.
    #[test]
    fn a_short_poll_array_takes_what_fits_and_leaves_the_rest() {
        let (mut a, mut b) = pair();
        for i in 0..3 {
            b.post_recv(i, None).unwrap();
        }
        for i in 0..3u64 {
            a.post_send(&send(i, Opcode::SendImm(i as u32), None))
                .unwrap();
        }
        let end = Instant::now() + Duration::from_secs(5);
        // Let all three completions queue up before polling.
        while lock(&b.sh.recv_cq.q).len() < 3 {
            assert!(Instant::now() < end, "three receives never completed");
            std::thread::yield_now();
        }
        let mut two = [Wc::EMPTY; 2];
        assert_eq!(b.poll_recv(&mut two).unwrap(), 2);
        assert_eq!((two[0].wr_id, two[1].wr_id), (0, 1));
        let mut one = [Wc::EMPTY; 1];
        assert_eq!(b.poll_recv(&mut one).unwrap(), 1);
        assert_eq!(one[0].wr_id, 2);
        assert_eq!(b.poll_recv(&mut one).unwrap(), 0);
    }

    /// `drain` waits until the read responses this side owes have gone
    /// out, so a queue pair dropped right after it does not fail reads the
    /// peer had already sent: eight 1 MiB reads, then a send that tells
    /// the responder they have all arrived (RC keeps request order); the
    /// responder drains and drops its queue pair; every read succeeds
    /// with the right bytes.
    #[test]
    fn drain_sends_the_read_responses_owed_before_a_close() {
        const N: usize = 8;
        const LEN: usize = 1 << 20;
        let (mut a, mut b) = pair();
        let mut here = vec![0u8; N * LEN];
        let mut there: Vec<u8> = (0..N * LEN).map(|i| (i % 251) as u8).collect();
        let kh = reg(&mut a, &mut here, Access::ALL);
        let kt = reg(&mut b, &mut there, Access::ALL);
        b.post_recv(99, None).unwrap();
        for i in 0..N {
            let r = Remote {
                addr: there.as_ptr() as u64 + (i * LEN) as u64,
                rkey: kt.rkey,
            };
            a.post_send(&send(
                i as u64,
                Opcode::Read(r),
                sge(&here[i * LEN..(i + 1) * LEN], kh),
            ))
            .unwrap();
        }
        a.post_send(&send(100, Opcode::SendImm(7), None)).unwrap();
        assert_eq!(wait(&mut b, false, 1)[0].wr_id, 99);
        b.drain(Duration::from_secs(10));
        drop(b);
        let w = wait(&mut a, true, N + 1);
        for wc in &w {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        assert!(here == there, "the reads' bytes");
    }

    /// `max_delay_us` holds each incoming request back by the seeded
    /// pseudo-random delay: twenty sends take at least the sum of the
    /// twenty delays that seed draws (sleeps never end early).
    #[test]
    fn request_delays_follow_the_seed() {
        let opts = SoftOptions {
            max_delay_us: 4000,
            seed: 42,
        };
        // `a` only sends, so only `b`'s delays apply.
        let (mut a, mut b) = connect(CAPS, [attrs(0), attrs(0)], opts);
        let mut d = Delay(tandem_core::rng::SplitMix64(opts.seed));
        let least: Duration = (0..20).map(|_| d.next(opts.max_delay_us)).sum();
        assert!(least > Duration::from_millis(20), "{least:?}");
        for i in 0..20 {
            b.post_recv(i, None).unwrap();
        }
        let t = Instant::now();
        for i in 0..20u64 {
            a.post_send(&send(i, Opcode::SendImm(i as u32), None))
                .unwrap();
        }
        wait(&mut b, false, 20);
        assert!(t.elapsed() >= least, "{:?} < {least:?}", t.elapsed());
    }

    /// The test hooks: `force_error` finds only live queue pairs of this
    /// process and fails them as a fault would; the process-wide
    /// receiver-not-ready count grows with every NAK.
    #[test]
    fn the_test_hooks_fail_a_live_queue_pair_and_count_rnr_naks() {
        assert!(!force_error(u32::MAX), "no such queue pair");
        let (mut a, _b) = pair();
        assert!(force_error(a.local_addr().qpn));
        assert_eq!(a.state(), QpState::Error);
        a.post_send(&send(1, Opcode::SendImm(1), None)).unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::Flushed);
        let before = rnr_events_total();
        let (mut c, d) = pair();
        c.post_send(&send(2, Opcode::SendImm(2), None)).unwrap();
        assert_eq!(wait(&mut c, true, 1)[0].status, WcStatus::RnrRetryExceeded);
        assert!(d.rnr_events() >= 1);
        assert!(
            rnr_events_total() >= before + 2,
            "a NAK sent and one received"
        );
    }

    #[test]
    fn reads_need_remote_read_access() {
        let (mut a, mut b) = pair();
        let mut here = [0u8; 32];
        let mut there: Vec<u8> = (0..32).collect();
        let kh = reg(&mut a, &mut here, Access::ALL);
        let kt = reg(&mut b, &mut there, Access::REMOTE_READ);
        let r = remote(&there, kt);
        a.post_send(&send(1, Opcode::Read(r), sge(&here, kh)))
            .unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::Success);
        assert_eq!(&here[..], &there[..]);
        let mut other = [5u8; 8];
        let ko = reg(
            &mut b,
            &mut other,
            Access {
                local_write: true,
                ..Access::default()
            },
        );
        let r = remote(&other, ko);
        a.post_send(&send(2, Opcode::Read(r), sge(&here[..8], kh)))
            .unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::RemoteAccess);
    }

    #[test]
    fn a_send_longer_than_the_receive_fails_both_ends() {
        let (mut a, mut b) = pair();
        let mut src = [1u8; 64];
        let mut dst = [0u8; 16];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let kd = reg(&mut b, &mut dst, Access::ALL);
        b.post_recv(1, sge(&dst, kd)).unwrap();
        a.post_send(&send(1, Opcode::Send, sge(&src, ks))).unwrap();
        assert_eq!(
            wait(&mut a, true, 1)[0].status,
            WcStatus::RemoteInvalidRequest
        );
        assert_eq!(wait(&mut b, false, 1)[0].status, WcStatus::LocalLength);
        assert_eq!(dst, [0u8; 16]);
    }

    /// More READs posted at once than `max_rd_atomic` allows in flight
    /// all complete, in order and intact: the requester holds the rest
    /// back until answers come, as a NIC's initiator depth does (sent all
    /// at once, they overflowed the responder's answer queue and failed
    /// the queue pair).
    #[test]
    fn reads_beyond_max_rd_atomic_wait_their_turn() {
        let caps = Caps {
            max_rd_atomic: 2,
            ..CAPS
        };
        let (mut a, mut b) = pair_with(caps, 0);
        const N: usize = 40;
        let mut here = vec![0u8; N * 64];
        let mut there: Vec<u8> = (0..N * 64).map(|i| (i % 251) as u8).collect();
        let kh = reg(&mut a, &mut here, Access::ALL);
        let kt = reg(&mut b, &mut there, Access::ALL);
        for i in 0..N {
            let r = Remote {
                addr: there.as_ptr() as u64 + (i * 64) as u64,
                rkey: kt.rkey,
            };
            a.post_send(&send(
                i as u64,
                Opcode::Read(r),
                sge(&here[i * 64..(i + 1) * 64], kh),
            ))
            .unwrap();
        }
        let w = wait(&mut a, true, N);
        for (i, wc) in w.iter().enumerate() {
            assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
        }
        assert!(here == there);
        assert_eq!(a.state(), QpState::Rts);
        drop(b);
    }

    #[test]
    fn queues_refuse_overruns() {
        let caps = Caps {
            max_send_wr: 4,
            max_recv_wr: 2,
            cq_depth: 2,
            max_rd_atomic: 1,
        };
        let (mut a, mut b) = pair_with(caps, 0);
        b.post_recv(1, None).unwrap();
        b.post_recv(2, None).unwrap();
        assert_eq!(b.post_recv(3, None), Err(FabricError::QueueFull("receive")));
        let mut src = [0u8; 4];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let mut dst = [0u8; 4];
        let kd = reg(&mut b, &mut dst, Access::ALL);
        let r = remote(&dst, kd);
        // Three signaled writes into a completion queue of two, never
        // polled: it overflows and the queue pair fails.
        for i in 0..3 {
            a.post_send(&send(i, Opcode::Write(r), sge(&src, ks)))
                .unwrap();
        }
        let end = Instant::now() + Duration::from_secs(5);
        while a.state() != QpState::Error {
            assert!(Instant::now() < end);
            std::thread::yield_now();
        }
        let mut buf = [Wc::EMPTY; 4];
        assert_eq!(a.poll_send(&mut buf), Ok(2));
        assert_eq!(a.poll_send(&mut buf), Err(FabricError::CqOverrun));
    }

    #[test]
    fn a_dead_peer_is_a_retry_error_and_flushes_the_rest() {
        let (mut a, b) = pair();
        drop(b);
        let end = Instant::now() + Duration::from_secs(5);
        while !a.peer_gone() {
            assert!(Instant::now() < end);
            std::thread::yield_now();
        }
        let mut src = [0u8; 4];
        let ks = reg(&mut a, &mut src, Access::ALL);
        a.post_send(&send(1, Opcode::Send, sge(&src, ks))).unwrap();
        a.post_send(&send(2, Opcode::Send, sge(&src, ks))).unwrap();
        let w = wait(&mut a, true, 2);
        assert_eq!(
            (w[0].status, w[1].status),
            (WcStatus::RetryExceeded, WcStatus::Flushed)
        );
    }

    #[test]
    fn deregistered_memory_is_never_written() {
        let (mut a, mut b) = pair();
        let mut src = [1u8; 64];
        let mut dst = [0u8; 64];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let kd = reg(&mut b, &mut dst, Access::ALL);
        b.deregister(kd.lkey);
        let r = remote(&dst, kd);
        a.post_send(&send(1, Opcode::Write(r), sge(&src, ks)))
            .unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::RemoteAccess);
        assert_eq!(dst, [0u8; 64]);
    }

    /// A READ whose region the responder deregisters before answering
    /// fails with `RemoteAccess`, whenever the deregistration lands:
    /// before the request arrives (refused on arrival) or after it was
    /// accepted while an earlier 256 MiB answer is still being sent (the
    /// answer's own check finds the region gone and sends a NAK in its
    /// place). The earlier READ completes intact either way.
    #[test]
    fn a_read_of_a_region_deregistered_before_its_answer_fails_cleanly() {
        let (mut a, mut b) = pair();
        const BIG: usize = 256 << 20;
        let mut here = vec![0u8; BIG];
        let mut there: Vec<u8> = (0..BIG).map(|i| (i % 249) as u8).collect();
        let mut small_here = [0u8; 64];
        let mut small_there = [9u8; 64];
        let kh = reg(&mut a, &mut here, Access::ALL);
        let ksh = reg(&mut a, &mut small_here, Access::ALL);
        let kt = reg(&mut b, &mut there, Access::ALL);
        let kst = reg(&mut b, &mut small_there, Access::ALL);
        let big = remote(&there, kt);
        let small = remote(&small_there, kst);
        a.post_send(&send(1, Opcode::Read(big), sge(&here, kh)))
            .unwrap();
        a.post_send(&send(2, Opcode::Read(small), sge(&small_here, ksh)))
            .unwrap();
        // Most often both requests are accepted by now and the big answer
        // is still on its way.
        std::thread::sleep(Duration::from_millis(5));
        b.deregister(kst.lkey);
        let w = wait(&mut a, true, 2);
        assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::Success));
        assert!(here == there, "the earlier read is intact");
        match (w[1].wr_id, w[1].status) {
            (2, WcStatus::RemoteAccess) => {
                assert_eq!(small_here, [0u8; 64], "nothing of a refused read lands")
            }
            // The answer went out before the region went (a machine slow
            // to run this thread): a whole read, also correct.
            (2, WcStatus::Success) => assert_eq!(small_here, [9u8; 64]),
            other => panic!("the small read ended {other:?}"),
        }
    }

    #[test]
    fn large_writes_and_reads_cross_the_bounce_buffer_intact() {
        let (mut a, mut b) = pair();
        let mut src: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let mut back = vec![0u8; src.len()];
        let ks = reg(&mut a, &mut src, Access::ALL);
        let kb = reg(&mut a, &mut back, Access::ALL);
        let kd = reg(&mut b, &mut dst, Access::ALL);
        let r = remote(&dst, kd);
        b.post_recv(1, None).unwrap();
        a.post_send(&send(1, Opcode::WriteImm(r, 1), sge(&src, ks)))
            .unwrap();
        wait(&mut b, false, 1);
        assert!(dst == src);
        a.post_send(&send(2, Opcode::Read(r), sge(&back, kb)))
            .unwrap();
        wait(&mut a, true, 2);
        assert!(back == src);
    }

    // ---- pipelined requests against late receives (property tests) ----
    //
    // A requester `a` posts random work requests back to back; the responder
    // `b` posts its receives late, at random points, some only once the
    // request that needs them has been refused with an RNR NAK while more
    // requests are pipelined behind it. An RC oracle checks what comes out:
    // a model of the two memories after the first `e` requests executed in
    // posting order, the exact completion sequences, and RNR NAK counts.

    use proptest::prelude::*;

    /// First send `wr_id` (request `i` is `WR0 + i`).
    const WR0: u64 = 1000;
    /// First receive `wr_id` (the receive of consumer `j` is `RID0 + j`).
    const RID0: u64 = 5000;
    /// First `wr_id` of the requester's own receives.
    const ARID0: u64 = 7000;
    /// Bytes between buffers, never written.
    const GAP: usize = 8;
    /// What a READ's local buffer holds until the READ executes (never in
    /// a pattern).
    const UNREAD: u8 = 0xff;
    /// READs per case: the responder owes at most this many read answers,
    /// well within its answer queue.
    const MAX_READS: usize = 4;
    /// The longest any wait may take before it fails the test.
    const DEADLINE: Duration = Duration::from_secs(10);
    /// `min_rnr_timer` with a finite `rnr_retry` (2.56 ms: time enough to
    /// post a receive between two NAKs); with 7 it is 10 µs.
    const FINITE_TIMER: u8 = 16;

    /// A generated request's operation.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Send,
        SendImm,
        Write,
        WriteImm,
        Read,
    }

    impl Kind {
        /// It consumes one of the responder's receives.
        fn consumes(self) -> bool {
            matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
        }
        /// It writes the responder's memory by rkey.
        fn writes(self) -> bool {
            matches!(self, Kind::Write | Kind::WriteImm)
        }
    }

    /// A generated work request.
    #[derive(Debug, Clone)]
    struct Req {
        kind: Kind,
        len: u32,
        signaled: bool,
        /// A zero-length request carries no SGE at all.
        bare: bool,
        imm: u32,
        /// A READ's source: its own bytes (`None`) or the target of write
        /// number `s` modulo the writes before it.
        from: Option<u8>,
        /// A consumer's receive: bytes beyond the message; `None` posts a
        /// zero-length receive where the message allows it.
        slack: Option<u8>,
    }

    /// When the responder posts the receive of a consumer (receives are
    /// posted in consumer order, so never before the previous one).
    #[derive(Debug, Clone, Copy)]
    enum Post {
        /// Once this many requests are posted.
        At(u8),
        /// Once this many requests are posted and the consumer has been
        /// refused at least this many RNR NAKs.
        Stall(u8, u8),
        /// Never: the consumer runs out of RNR retries.
        Never,
    }

    /// One generated scenario.
    #[derive(Debug, Clone)]
    struct Case {
        reqs: Vec<Req>,
        /// One per consumer, in order.
        posts: Vec<Post>,
        rnr_retry: u8,
        /// Receives the requester posts first (nothing consumes them:
        /// they are flushed when it fails).
        a_recvs: u8,
        delay_us: u32,
        seed: u64,
    }

    /// Where a request's bytes are.
    #[derive(Debug, Clone, Copy, Default)]
    struct Place {
        /// Offset of the local SGE in `a`'s buffer.
        local: usize,
        /// Bytes moved.
        len: usize,
        /// Offset in `b`'s buffer: a WRITE's target, a READ's source.
        remote: usize,
        /// A consumer's receive: its offset in `b`'s buffer and length
        /// (`None`: zero length, no SGE).
        recv: Option<(usize, Option<usize>)>,
    }

    /// Both sides' buffers before anything ran, and where everything is.
    struct World {
        places: Vec<Place>,
        /// Request index of each consumer, in order.
        cons: Vec<usize>,
        a0: Vec<u8>,
        b0: Vec<u8>,
    }

    /// Byte `k` of stream `s` (never 0, never `UNREAD`).
    fn pattern(s: usize, k: usize) -> u8 {
        1 + ((s * 37 + k * 11 + 5) % 251) as u8
    }

    /// Lays the requests' buffers out, each between gaps: write targets,
    /// READ sources and receives in `b`'s buffer, local SGEs in `a`'s.
    fn world(reqs: &[Req]) -> World {
        let (mut a0, mut b0) = (vec![0u8; GAP], vec![0u8; GAP]);
        let mut places = vec![Place::default(); reqs.len()];
        let writes: Vec<usize> = (0..reqs.len()).filter(|&i| reqs[i].kind.writes()).collect();
        for &i in &writes {
            places[i].remote = b0.len();
            b0.resize(b0.len() + reqs[i].len as usize + GAP, 0);
        }
        let mut cons = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            let mut len = r.len as usize;
            if r.kind == Kind::Read {
                // Only earlier writes: InfiniBand lets a READ's answer
                // reflect WRITEs posted after it (its relaxed read
                // ordering, what a fence is for), and so does this NIC.
                let before = writes.iter().take_while(|&&w| w < i).count();
                places[i].remote = match r.from.filter(|_| before > 0) {
                    Some(s) => {
                        let w = writes[s as usize % before];
                        len = len.min(reqs[w].len as usize);
                        places[w].remote
                    }
                    None => {
                        let off = b0.len();
                        b0.extend((0..len).map(|k| pattern(10_000 + i, k)));
                        b0.extend([0; GAP]);
                        off
                    }
                };
            }
            let p = &mut places[i];
            p.local = a0.len();
            if r.kind == Kind::Read {
                a0.extend(std::iter::repeat_n(UNREAD, len));
            } else {
                a0.extend((0..len).map(|k| pattern(i, k)));
            }
            a0.extend([0; GAP]);
            p.len = len;
            if r.kind.consumes() {
                cons.push(i);
                let rlen = match (r.kind, r.slack) {
                    (Kind::WriteImm, s) => s.map(usize::from),
                    (_, None) if len == 0 => None,
                    (_, s) => Some(len + s.map_or(0, usize::from)),
                };
                p.recv = Some((b0.len(), rlen));
                b0.resize(b0.len() + rlen.unwrap_or(0) + GAP, 0);
            }
        }
        World {
            places,
            cons,
            a0,
            b0,
        }
    }

    /// Both buffers once requests `..e` executed, one after the other in
    /// posting order (RC semantics), and nothing else.
    fn model(reqs: &[Req], w: &World, e: usize) -> (Vec<u8>, Vec<u8>) {
        let (mut a, mut b) = (w.a0.clone(), w.b0.clone());
        for (r, p) in reqs.iter().zip(&w.places).take(e) {
            let n = p.len;
            match r.kind {
                Kind::Read => a[p.local..p.local + n].copy_from_slice(&b[p.remote..p.remote + n]),
                Kind::Write | Kind::WriteImm => {
                    b[p.remote..p.remote + n].copy_from_slice(&a[p.local..p.local + n])
                }
                Kind::Send | Kind::SendImm => {
                    let (off, _) = p.recv.expect("a consumer has a receive");
                    b[off..off + n].copy_from_slice(&a[p.local..p.local + n]);
                }
            }
        }
        (a, b)
    }

    /// `len` bytes at `p`, read as a NIC's DMA would see them.
    fn snap(p: *const u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                // SAFETY: the callers pass a range inside a buffer the test
                // keeps alive; a NIC writes it concurrently only if it
                // breaks the RC ordering the test checks.
                unsafe { std::ptr::read_volatile(p.add(i)) }
            })
            .collect()
    }

    /// What identifies a send completion (`byte_len` means nothing there).
    fn key(w: &Wc) -> (u64, WcStatus, WcOpcode, Option<u32>) {
        (w.wr_id, w.status, w.opcode, w.imm)
    }

    /// The send completion's opcode of a request.
    fn op_of(k: Kind) -> WcOpcode {
        match k {
            Kind::Send | Kind::SendImm => WcOpcode::Send,
            Kind::Write | Kind::WriteImm => WcOpcode::Write,
            Kind::Read => WcOpcode::Read,
        }
    }

    /// A connected pair, both sides with attributes `at`.
    fn pair_opts(at: RcAttrs, opts: SoftOptions) -> (SoftQp, SoftQp) {
        connect(CAPS, [at, at], opts)
    }

    /// One case being run: the queue pairs, what they completed so far,
    /// and how far the schedule got.
    struct Rig<'c> {
        c: &'c Case,
        w: World,
        a: SoftQp,
        b: SoftQp,
        ap: *mut u8,
        bp: *mut u8,
        ka: MrKeys,
        kb: MrKeys,
        send: Vec<Wc>,
        recv: Vec<Wc>,
        /// `a`'s receive completions.
        a_recv: Vec<Wc>,
        /// Requests posted.
        posted: usize,
        /// RNR NAKs `b` had sent just before and just after posting each
        /// receive.
        bounds: Vec<(u64, u64)>,
        /// Requests posted when each receive was posted, and when (just
        /// before).
        recv_step: Vec<(usize, Instant)>,
        start: Instant,
        /// When the first failed completion was seen.
        failed_seen: Option<Instant>,
    }

    impl Rig<'_> {
        /// `rnr_retry` is not 7: a consumer may run out of retries.
        fn finite(&self) -> bool {
            self.c.rnr_retry < 7
        }

        /// The work request of request `i`.
        fn wr(&self, i: usize) -> SendWr {
            let (r, p) = (&self.c.reqs[i], self.w.places[i]);
            let sge = (!(r.bare && p.len == 0)).then_some(Sge {
                addr: self.ap as u64 + p.local as u64,
                len: p.len as u32,
                lkey: self.ka.lkey,
            });
            let rem = Remote {
                addr: self.bp as u64 + p.remote as u64,
                rkey: self.kb.rkey,
            };
            let op = match r.kind {
                Kind::Send => Opcode::Send,
                Kind::SendImm => Opcode::SendImm(r.imm),
                Kind::Write => Opcode::Write(rem),
                Kind::WriteImm => Opcode::WriteImm(rem, r.imm),
                Kind::Read => Opcode::Read(rem),
            };
            SendWr {
                wr_id: WR0 + i as u64,
                op,
                sge,
                signaled: r.signaled,
            }
        }

        /// The request whose completion failed first.
        fn failed_at(&self) -> Option<usize> {
            self.send
                .iter()
                .find(|w| w.status != WcStatus::Success)
                .map(|w| (w.wr_id - WR0) as usize)
        }

        /// The send completions of the posted requests when request `f`
        /// (if any) ran out of RNR retries.
        fn expected_send(&self, f: Option<usize>) -> Vec<Wc> {
            let mut v = Vec::new();
            for (i, r) in self.c.reqs.iter().enumerate().take(self.posted) {
                let id = WR0 + i as u64;
                let op = op_of(r.kind);
                match f {
                    Some(f) if i == f => v.push(Wc::failed(id, op, WcStatus::RnrRetryExceeded)),
                    Some(f) if i > f => v.push(Wc::failed(id, op, WcStatus::Flushed)),
                    _ if r.signaled => v.push(Wc {
                        wr_id: id,
                        status: WcStatus::Success,
                        opcode: op,
                        byte_len: 0,
                        imm: None,
                    }),
                    _ => {}
                }
            }
            v
        }

        /// The receive completions of every consumer, in order.
        fn expected_recv(&self) -> Vec<Wc> {
            (self.w.cons.iter().enumerate())
                .map(|(j, &i)| {
                    let r = &self.c.reqs[i];
                    Wc {
                        wr_id: RID0 + j as u64,
                        status: WcStatus::Success,
                        opcode: if r.kind == Kind::WriteImm {
                            WcOpcode::RecvWriteImm
                        } else {
                            WcOpcode::Recv
                        },
                        byte_len: self.w.places[i].len as u32,
                        imm: (r.kind != Kind::Send).then_some(r.imm),
                    }
                })
                .collect()
        }

        /// Takes every completion there is and checks that each side's
        /// completions so far are a prefix of what RC allows.
        fn poll(&mut self) {
            let mut buf = [Wc::EMPTY; 16];
            // `a`'s receives first: they are flushed after its sends, so
            // any seen here come with the send failures.
            let k = self.a.poll_recv(&mut buf).unwrap();
            self.a_recv.extend_from_slice(&buf[..k]);
            loop {
                let k = self.a.poll_send(&mut buf).unwrap();
                self.send.extend_from_slice(&buf[..k]);
                let m = self.b.poll_recv(&mut buf).unwrap();
                self.recv.extend_from_slice(&buf[..m]);
                if k + m == 0 {
                    break;
                }
            }
            assert_eq!(self.b.poll_send(&mut buf), Ok(0), "no send on b");
            let f = self.failed_at();
            if f.is_some() && self.failed_seen.is_none() {
                self.failed_seen = Some(Instant::now());
            }
            assert!(
                self.finite() || f.is_none(),
                "a request failed with rnr_retry 7 after {:?}: {:?}; a {:?}, b {:?}, \
                 peer gone {}",
                self.start.elapsed(),
                self.send,
                self.a.state(),
                self.b.state(),
                self.a.peer_gone()
            );
            let exp = self.expected_send(f);
            let (got, want): (Vec<_>, Vec<_>) = (
                self.send.iter().map(key).collect(),
                exp.iter().map(key).collect(),
            );
            assert!(
                got.len() <= want.len() && got == want[..got.len()],
                "send completions {got:?}, expected a prefix of {want:?}"
            );
            let flushed: Vec<Wc> = (0..self.c.a_recvs as u64)
                .map(|k| Wc::failed(ARID0 + k, WcOpcode::Recv, WcStatus::Flushed))
                .filter(|_| f.is_some())
                .collect();
            assert!(
                self.a_recv.len() <= flushed.len() && self.a_recv == flushed[..self.a_recv.len()],
                "a's receive completions {:?}, expected a prefix of {flushed:?}",
                self.a_recv
            );
            let mut exp = self.expected_recv();
            if let Some(f) = f {
                exp.truncate(self.w.cons.iter().filter(|&&i| i < f).count());
            }
            assert!(
                self.recv.len() <= exp.len() && self.recv == exp[..self.recv.len()],
                "receive completions {:?}, expected a prefix of {exp:?}",
                self.recv
            );
        }

        /// Polls until `done` holds (`true`), or until a request failed
        /// (`false`, only if `stop_on_failure`); fails the test after
        /// `DEADLINE`.
        fn until(
            &mut self,
            what: &str,
            stop_on_failure: bool,
            done: impl Fn(&Self) -> bool,
        ) -> bool {
            let end = Instant::now() + DEADLINE;
            loop {
                self.poll();
                if done(self) {
                    return true;
                }
                if stop_on_failure && self.failed_at().is_some() {
                    return false;
                }
                assert!(
                    Instant::now() < end,
                    "timed out waiting for {what}: {} posted, sends {:?}, receives {:?}, \
                     a {:?} (rnr {}), b {:?} (rnr {})",
                    self.posted,
                    self.send,
                    self.recv,
                    self.a.state(),
                    self.a.rnr_events(),
                    self.b.state(),
                    self.b.rnr_events()
                );
                std::thread::sleep(Duration::from_micros(20));
            }
        }

        /// Consumer `j` has just been refused: nothing at or behind it has
        /// taken effect, everything before it has.
        fn check_stalled(&mut self, j: usize) {
            self.poll();
            let c = self.w.cons[j];
            assert_eq!(
                self.recv.len(),
                j,
                "consumer {j} (request {c}) refused: exactly the receives before it consumed"
            );
            if self.failed_at().is_none() {
                assert!(
                    self.send.iter().all(|w| w.wr_id < WR0 + c as u64),
                    "consumer {j} (request {c}) refused, yet completions {:?}",
                    self.send
                );
            }
            let (_, b) = model(&self.c.reqs, &self.w, c);
            let got = snap(self.bp, b.len());
            if let Some(k) = (0..b.len()).find(|&k| got[k] != b[k]) {
                panic!(
                    "consumer {j} (request {c}) refused: b's byte {k} is {}, the model says {} \
                     (requests {:?}, places {:?})",
                    got[k], b[k], self.c.reqs, self.w.places
                );
            }
            for i in c..self.posted {
                let p = self.w.places[i];
                if self.c.reqs[i].kind == Kind::Read {
                    // SAFETY: inside `a`'s buffer.
                    let s = snap(unsafe { self.ap.add(p.local) }, p.len);
                    assert!(
                        s.iter().all(|&x| x == UNREAD),
                        "READ {i} behind refused consumer {j} (request {c}) already placed"
                    );
                }
            }
        }

        /// Posts the receive of consumer `j` (in the requests-posted step
        /// `step`), counting `b`'s RNR NAKs around it.
        fn post_recv(&mut self, j: usize, step: usize) {
            let (off, len) = self.w.places[self.w.cons[j]].recv.expect("consumer");
            let sge = len.map(|n| Sge {
                addr: self.bp as u64 + off as u64,
                len: n as u32,
                lkey: self.kb.lkey,
            });
            let (t, before) = (Instant::now(), self.b.rnr_events());
            self.b.post_recv(RID0 + j as u64, sge).unwrap();
            let after = self.b.rnr_events();
            self.bounds.push((before, after));
            self.recv_step.push((step, t));
        }
    }

    /// Runs one case and checks it against the RC oracle.
    fn run_case(c: &Case) {
        let w = world(&c.reqs);
        let mut abuf = w.a0.clone();
        let mut bbuf = w.b0.clone();
        let (ap, bp) = (abuf.as_mut_ptr(), bbuf.as_mut_ptr());
        let finite = c.rnr_retry < 7;
        let opts = SoftOptions {
            max_delay_us: c.delay_us,
            seed: c.seed,
        };
        let at = RcAttrs {
            rnr_retry: c.rnr_retry,
            min_rnr_timer: if finite { FINITE_TIMER } else { 1 },
            ..RcAttrs::default()
        };
        let (mut a, mut b) = pair_opts(at, opts);
        // SAFETY: the buffers outlive the queue pairs (the rig, declared
        // after them, is dropped first, joining the NIC threads).
        let ka = unsafe { a.register(ap as u64, abuf.len(), Access::ALL) }.unwrap();
        // SAFETY: as above.
        let kb = unsafe { b.register(bp as u64, bbuf.len(), Access::ALL) }.unwrap();
        let mut r = Rig {
            c,
            w,
            a,
            b,
            ap,
            bp,
            ka,
            kb,
            send: Vec::new(),
            recv: Vec::new(),
            a_recv: Vec::new(),
            posted: 0,
            bounds: Vec::new(),
            recv_step: Vec::new(),
            start: Instant::now(),
            failed_seen: None,
        };
        for k in 0..c.a_recvs as u64 {
            r.a.post_recv(ARID0 + k, None).unwrap();
        }
        let n = c.reqs.len();
        let ncons = r.w.cons.len();
        let mut next = 0;
        for step in 0..=n {
            while next < ncons && r.failed_at().is_none() {
                let ready = match c.posts[next] {
                    Post::At(t) => step >= t as usize,
                    Post::Stall(t, _) => step > r.w.cons[next] && step >= t as usize,
                    Post::Never => false,
                };
                if !ready {
                    break;
                }
                if let Post::Stall(_, naks) = c.posts[next] {
                    // NAKs after the previous receive went in are all for
                    // this consumer.
                    let base = r.bounds.last().map_or(0, |b| b.1) + naks as u64;
                    let what = format!("{naks} RNR NAKs of consumer {next}");
                    if !r.until(&what, true, |r| r.b.rnr_events() >= base) {
                        break;
                    }
                    r.check_stalled(next);
                }
                r.post_recv(next, step);
                next += 1;
            }
            if step < n {
                let wr = r.wr(step);
                r.a.post_send(&wr).unwrap();
                r.posted += 1;
            }
            r.poll();
        }
        let e = if finite {
            r.until("a request to run out of RNR retries", false, |r| {
                r.failed_at()
                    .is_some_and(|f| r.send.len() == r.expected_send(Some(f)).len())
            });
            // `a`'s receives are flushed with its sends (so a second is
            // plenty: no need to wait out the deadline if they are not).
            let end = Instant::now() + Duration::from_secs(1);
            while r.a_recv.len() < c.a_recvs as usize && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(20));
                r.poll();
            }
            assert_eq!(r.a_recv.len(), c.a_recvs as usize, "a's receives flushed");
            r.failed_at().unwrap()
        } else {
            let want = r.expected_send(None).len();
            r.until("every completion", false, |r| {
                r.send.len() == want && r.recv.len() == ncons
            });
            n
        };
        // Completions: exactly those RC allows, nothing more to come.
        r.poll();
        let (got, want): (Vec<_>, Vec<_>) = (
            r.send.iter().map(key).collect(),
            r.expected_send(finite.then_some(e))
                .iter()
                .map(key)
                .collect(),
        );
        assert_eq!(got, want, "send completions");
        let done = r.w.cons.iter().filter(|&&i| i < e).count();
        assert_eq!(r.recv, r.expected_recv()[..done], "receive completions");
        if finite {
            let fk = c.reqs[e].kind;
            assert!(fk.consumes(), "request {e} ({fk:?}) cannot be refused");
            assert_eq!(r.a.state(), QpState::Error);
            assert_eq!(
                r.b.state(),
                QpState::Rts,
                "an RNR failure is the requester's"
            );
            // Everything posted later is flushed too, sends and receives.
            let wr = SendWr {
                wr_id: 1,
                ..r.wr(0)
            };
            r.a.post_send(&wr).unwrap();
            r.a.post_recv(2, None).unwrap();
            let mut buf = [Wc::EMPTY; 4];
            assert_eq!(r.a.poll_send(&mut buf), Ok(1));
            assert_eq!(
                buf[0],
                Wc::failed(1, op_of(c.reqs[0].kind), WcStatus::Flushed)
            );
            assert_eq!(r.a.poll_recv(&mut buf), Ok(1));
            assert_eq!(buf[0], Wc::failed(2, WcOpcode::Recv, WcStatus::Flushed));
        } else {
            assert_eq!((r.a.state(), r.b.state()), (QpState::Rts, QpState::Rts));
            assert_eq!(r.a_recv, [], "a's receives stay posted");
        }
        // Memory: byte-exact, as if requests ..e ran one by one, in order.
        let (ma, mb) = model(&c.reqs, &r.w, e);
        for (side, p, m) in [("a", r.ap, &ma), ("b", r.bp, &mb)] {
            let got = snap(p, m.len());
            if let Some(k) = (0..m.len()).find(|&k| got[k] != m[k]) {
                panic!(
                    "{side}'s byte {k} is {}, the model says {} (executed ..{e}; places {:?})",
                    got[k], m[k], r.w.places
                );
            }
        }
        // RNR NAKs: every one sent was received; NAKs between posting the
        // receives of consumers j-1 and j were all for consumer j.
        let total = r.b.rnr_events();
        assert_eq!(r.a.rnr_events(), total, "NAKs sent and received");
        let at = |j: usize| r.bounds.get(j).copied().unwrap_or((total, total));
        let prev = |j: usize| if j == 0 { (0, 0) } else { at(j - 1) };
        for j in 0..ncons {
            let lo = at(j).0 - prev(j).1;
            let hi = at(j).1 - prev(j).0;
            let i = r.w.cons[j];
            if r.recv_step.get(j).is_some_and(|s| s.0 <= i) {
                assert_eq!(lo, 0, "consumer {j}'s receive was there before it: no NAK");
            }
            if finite && i < e {
                assert!(
                    lo <= c.rnr_retry as u64,
                    "consumer {j} succeeded after {lo}+ NAKs"
                );
            }
            if finite && i == e {
                let want = c.rnr_retry as u64 + 1;
                assert!(
                    lo <= want && want <= hi,
                    "consumer {j} failed after {lo}..={hi} NAKs, not rnr_retry + 1 = {want}"
                );
                // Its first NAK came after the previous receive went in;
                // each retry waited min_rnr_timer.
                if j == r.recv_step.len() {
                    let since = j.checked_sub(1).map_or(r.start, |k| r.recv_step[k].1);
                    let took = r.failed_seen.expect("failed") - since;
                    let min =
                        Duration::from_micros(rnr_timer_us(FINITE_TIMER)) * c.rnr_retry as u32;
                    assert!(
                        took >= min,
                        "consumer {j} failed {took:?} after its first NAK could come, \
                         under rnr_retry x min_rnr_timer = {min:?}"
                    );
                }
            }
        }
        drop(r);
        drop((abuf, bbuf));
    }

    /// Any request; lengths mostly small, some past the bounce buffer.
    fn req() -> impl Strategy<Value = Req> {
        let kind = prop_oneof![
            Just(Kind::Send),
            Just(Kind::SendImm),
            Just(Kind::Write),
            Just(Kind::WriteImm),
            Just(Kind::Read),
        ];
        let len = prop_oneof![
            5 => 0u32..48,
            2 => 48u32..1500,
            1 => Just(0u32),
            1 => 65_000u32..70_000,
        ];
        (
            kind,
            len,
            any::<bool>(),
            any::<bool>(),
            any::<u32>(),
            proptest::option::of(any::<u8>()),
            proptest::option::of(0u8..12),
        )
            .prop_map(|(kind, len, signaled, bare, imm, from, slack)| Req {
                kind,
                len,
                signaled,
                bare,
                imm,
                from,
                slack,
            })
    }

    /// Requests with at least one consumer that has requests behind it,
    /// at most `MAX_READS` READs, the last one signaled. Also the forced
    /// consumer's number.
    fn reqs() -> impl Strategy<Value = (Vec<Req>, usize)> {
        let consumer = prop_oneof![Just(Kind::Send), Just(Kind::SendImm), Just(Kind::WriteImm)];
        (
            proptest::collection::vec(req(), 2..=14),
            any::<proptest::sample::Index>(),
            consumer,
        )
            .prop_map(|(mut v, at, k)| {
                let p = at.index(v.len() - 1);
                if !v[p].kind.consumes() {
                    v[p].kind = k;
                }
                let mut reads = 0;
                for r in v.iter_mut().filter(|r| r.kind == Kind::Read) {
                    reads += 1;
                    if reads > MAX_READS {
                        r.kind = Kind::Write;
                    }
                }
                v.last_mut().expect("two or more").signaled = true;
                let j = v[..p].iter().filter(|r| r.kind.consumes()).count();
                (v, j)
            })
    }

    /// Cases with `rnr_retry` 7 (retry forever), and at least one receive
    /// posted only after its consumer was refused with requests behind it.
    fn forever() -> impl Strategy<Value = Case> {
        (
            reqs(),
            0u8..=2,
            prop_oneof![Just(0u32), Just(40)],
            any::<u64>(),
        )
            .prop_flat_map(|((reqs, forced), a_recvs, delay_us, seed)| {
                let n = reqs.len() as u8;
                let ncons = reqs.iter().filter(|r| r.kind.consumes()).count();
                let post = prop_oneof![
                    (0..=n).prop_map(Post::At),
                    (0..=n, 1u8..=16).prop_map(|(t, k)| Post::Stall(t, k)),
                ];
                (
                    proptest::collection::vec(post, ncons),
                    (forced as u8 + 1..=n, 1u8..=16),
                )
                    .prop_map(move |(mut posts, (t, k))| {
                        if !matches!(posts[forced], Post::Stall(..)) {
                            posts[forced] = Post::Stall(t, k);
                        }
                        Case {
                            reqs: reqs.clone(),
                            posts,
                            rnr_retry: 7,
                            a_recvs,
                            delay_us,
                            seed,
                        }
                    })
            })
    }

    /// Cases with `rnr_retry` 1..=4: the receives of the first `k`
    /// consumers are posted (some after NAKs), consumer `k` never gets one.
    fn finite() -> impl Strategy<Value = Case> {
        (
            reqs(),
            1u8..=4,
            0u8..=2,
            prop_oneof![Just(0u32), Just(40)],
            any::<u64>(),
        )
            .prop_flat_map(|((reqs, _), rnr_retry, a_recvs, delay_us, seed)| {
                let n = reqs.len() as u8;
                let ncons = reqs.iter().filter(|r| r.kind.consumes()).count();
                let post = prop_oneof![
                    1 => (0..=n).prop_map(Post::At),
                    2 => (0..=n, 1..=rnr_retry).prop_map(|(t, k)| Post::Stall(t, k)),
                ];
                (
                    proptest::collection::vec(post, ncons),
                    prop_oneof![2 => Just(ncons - 1), 1 => 0..ncons],
                )
                    .prop_map(move |(mut posts, k)| {
                        for p in &mut posts[k..] {
                            *p = Post::Never;
                        }
                        Case {
                            reqs: reqs.clone(),
                            posts,
                            rnr_retry,
                            a_recvs,
                            delay_us,
                            seed,
                        }
                    })
            })
    }

    /// `cases` cases per test.
    fn config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            // A failure shrinks briefly and leaves no file in the source tree.
            max_shrink_iters: 16,
            max_shrink_time: 15_000,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config(40))]

        /// With rnr_retry 7, pipelined SEND, SEND_WITH_IMM, WRITE,
        /// WRITE_WITH_IMM and READ requests all execute exactly once and in
        /// posting order however late the receives come: a refused request
        /// is retried with everything behind it, nothing behind it takes
        /// effect before it is accepted (checked while it is refused: the
        /// responder's memory, READs behind it, completions), receive
        /// completions carry the right ids, lengths and immediates, memory
        /// ends byte-exact, unsignaled requests complete silently, and a
        /// consumer whose receive was posted in time is never refused.
        #[test]
        fn pipelined_requests_retry_forever_after_rnr_naks_in_order(c in forever()) {
            run_case(&c);
        }

        /// With rnr_retry 1..=4, a consumer that never gets a receive is
        /// refused exactly rnr_retry + 1 times, then completes with
        /// RnrRetryExceeded while everything behind it is flushed (signaled
        /// or not), the requester is in the error state (later requests
        /// flush) and the responder is not; everything before it executed
        /// once, in order, byte-exact; the NAK budget starts afresh for each
        /// consumer, and nothing behind a refused request took effect.
        #[test]
        fn pipelined_requests_behind_an_rnr_exhausted_one_are_flushed(c in finite()) {
            run_case(&c);
        }
    }

    /// A READ that completes as the last outstanding request leaves no
    /// ACK-timeout clock running: after an idle pause longer than the ACK
    /// timeout, the next request still succeeds (it used to fail at once
    /// with RetryExceeded, timed from the READ's transmission).
    #[test]
    fn an_idle_pause_after_a_read_is_not_an_ack_timeout() {
        // ACK timeout 250 ms (one attempt of at least 250 ms).
        let at = RcAttrs {
            retry_cnt: 0,
            ..attrs(0)
        };
        let (mut a, mut b) = pair_opts(at, SoftOptions::default());
        let mut here = [0u8; 16];
        let mut there = [7u8; 16];
        let kh = reg(&mut a, &mut here, Access::ALL);
        let kt = reg(&mut b, &mut there, Access::ALL);
        let r = remote(&there, kt);
        a.post_send(&send(1, Opcode::Read(r), sge(&here, kh)))
            .unwrap();
        assert_eq!(wait(&mut a, true, 1)[0].status, WcStatus::Success);
        std::thread::sleep(ack_timeout(&at) + Duration::from_millis(100));
        a.post_send(&send(2, Opcode::Write(r), sge(&here, kh)))
            .unwrap();
        let w = wait(&mut a, true, 1)[0];
        assert_eq!((w.wr_id, w.status), (2, WcStatus::Success));
        assert_eq!(a.state(), QpState::Rts);
    }
}
