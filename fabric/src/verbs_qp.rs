//! [`QueuePair`] over a real RDMA device through the `sideway` crate
//! (0.4.x), which reaches libibverbs through `rdma-mummy-sys`: a static
//! stub that loads `libibverbs.so.1` at run time, so this builds and starts
//! on machines without RDMA; with no libibverbs every call fails with
//! `EOPNOTSUPP`, which surfaces as [`FabricError::NoDevice`].
//!
//! Compiled with tandem-driver's `verbs` feature (building
//! `rdma-mummy-sys` needs cmake, a C compiler and libclang).
//!
//! Every sideway object is `Arc`-owned and `Send + Sync`, and each holds
//! `Arc`s to its parents (QP → PD and both CQs, MR → PD, PD/CQ → device
//! context), so one plain struct owns them all, with no lifetimes.
//!
//! The hot path allocates nothing: completions are read in place with the
//! extended poller, sends are posted with the extended `ibv_wr_*` API, and
//! receives with `ibv_post_recv` on a work request built on the stack.
//!
//! What could not be checked without a device (marked `NOT CHECKED ON
//! HARDWARE` below): a zero-length send as an empty SGE list, and requests
//! posted in the error state completing flushed; both are provider
//! behaviour. `scripts/rdma-check.sh` exercises them on a real host pair.

use std::error::Error as StdError;
use std::sync::Arc;
use tandem_core::sync::{AtomicBool, Ordering};

use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{
    CompletionQueue as _, CreateCompletionQueueWorkCompletionFlags as CqWcFlags,
    ExtendedCompletionQueue, PollCompletionQueueError, WorkCompletionOperationType as IbOp,
    WorkCompletionStatus as IbSt,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendError, PostSendGuard, QueuePair as IbQp, QueuePairAttribute,
    QueuePairState, QueuePairType, SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::{
    Access, Caps, FabricError, Modify, MrKeys, Opcode, QpAddr, QpState, QueuePair, SendWr, Sge, Wc,
    WcOpcode, WcStatus,
};

/// Hop limit of the GRH (RoCE, routed InfiniBand).
const HOP_LIMIT: u8 = 64;

/// An RC queue pair on a verbs device, with its protection domain, its two
/// extended completion queues and the regions registered through it.
pub struct VerbsQp {
    // Field order is drop order; the Arcs make any order safe anyway.
    qp: ExtendedQueuePair,
    mrs: Vec<(u32, Arc<MemoryRegion>)>,
    send_cq: Arc<ExtendedCompletionQueue>,
    recv_cq: Arc<ExtendedCompletionQueue>,
    _pd: Arc<ProtectionDomain>,
    _ctx: Arc<DeviceContext>,
    port: u8,
    /// `Some(sgid index)` when the address vector carries a GRH.
    grh: Option<u8>,
    addr: QpAddr,
    caps: Caps,
    /// An error completion was seen: the QP is in the error state even
    /// though libibverbs' cached `ibv_qp.state` does not say so.
    failed: bool,
    peer_gone: Arc<AtomicBool>,
    rnr_seen: u64,
    name: String,
    /// The bootstrap's connection to the peer, watched for its end.
    oob: Option<std::net::TcpStream>,
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        // Ends the watcher thread, and tells the peer's watcher.
        if let Some(s) = &self.oob {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The error and all its sources, for diagnostics.
fn chain(e: &dyn StdError) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn mtu_bytes(m: Mtu) -> u32 {
    // ibv_mtu: IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 (Mtu is #[repr(u32)]).
    128u32 << (m as u32)
}

fn mtu_from_bytes(b: u32) -> Mtu {
    [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048]
        .into_iter()
        .find(|&m| b <= mtu_bytes(m))
        .unwrap_or(Mtu::Mtu4096)
}

/// A 24-bit starting PSN, without a `rand` dependency.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0x00ff_ffff
}

/// Opens device `dev`, checks that `port` is ACTIVE, and creates a PD, two
/// extended CQs and an RC QP in RESET.
///
/// `gid_index`: the source GID index. `None` on InfiniBand means LID
/// routing (no GRH); `None` on RoCE picks the port's first RoCE v2 GID that
/// is not link-local (else the first RoCE v2 one, else index 0).
///
/// # Errors
/// * [`FabricError::NoDevice`]: libibverbs is missing (every call then
///   fails with `EOPNOTSUPP`), there is no device `dev`, it cannot be
///   opened or its port queried, or `port` is not ACTIVE;
/// * [`FabricError::Invalid`]: `caps.max_rd_atomic` exceeds the device's
///   limit, or the device could not be queried or refused the protection
///   domain, a completion queue or the queue pair (with libibverbs'
///   reason).
pub fn open(
    dev: &str,
    port: u8,
    gid_index: Option<u8>,
    caps: Caps,
) -> Result<VerbsQp, FabricError> {
    let nodev =
        |what: &str, e: &dyn StdError| FabricError::NoDevice(format!("{what}: {}", chain(e)));
    let ctx = {
        // No libibverbs: NULL list, errno EOPNOTSUPP (rdma-core-mummy stub).
        let list = DeviceList::new().map_err(|e| nodev("ibv_get_device_list", &e))?;
        let device = list.iter().find(|d| d.name() == dev).ok_or_else(|| {
            let names: Vec<String> = list.iter().map(|d| d.name()).collect();
            FabricError::NoDevice(format!("no device {dev} (devices: {})", names.join(", ")))
        })?;
        device
            .open()
            .map_err(|e| nodev(&format!("ibv_open_device({dev})"), &e))?
        // `list` is dropped here: an open context does not borrow it.
    };
    let pattr = ctx
        .query_port(port)
        .map_err(|e| nodev(&format!("ibv_query_port({dev}, {port})"), &e))?;
    if pattr.port_state() != PortState::Active {
        return Err(FabricError::NoDevice(format!(
            "{dev} port {port} is {:?}, not ACTIVE",
            pattr.port_state()
        )));
    }
    let ethernet = pattr.link_layer() == LinkLayer::Ethernet;
    let grh = match gid_index {
        Some(i) => Some(i),
        None if ethernet => Some(pick_roce_gid(&ctx, port)),
        None => None,
    };
    let gid = ctx
        .query_gid(port, u32::from(grh.unwrap_or(0)))
        .map(|g| g.raw)
        .unwrap_or_default();

    let inval =
        |what: &str, e: &dyn StdError| FabricError::Invalid(format!("{what}: {}", chain(e)));
    // RTR's max_dest_rd_atomic must fit max_qp_rd_atom and RTS's
    // max_rd_atomic max_qp_init_rd_atom: refuse rather than clamp, since
    // the peer sizes its READs by the same Caps.
    let dattr = ctx
        .query_device()
        .map_err(|e| inval("ibv_query_device_ex", &e))?;
    let rd_lim = dattr
        .max_qp_rd_atom()
        .min(dattr.max_qp_init_rd_atom())
        .max(0) as u32;
    if caps.max_rd_atomic > rd_lim {
        return Err(FabricError::Invalid(format!(
            "max_rd_atomic {} exceeds {dev}'s limit {rd_lim}",
            caps.max_rd_atomic
        )));
    }
    let pd = ctx.alloc_pd().map_err(|e| inval("ibv_alloc_pd", &e))?;
    // A CQ at least as deep as its work queue cannot overrun (one CQE per
    // WR at most, one QP per CQ), so FabricError::CqOverrun never arises.
    let cq = |depth: u32| {
        ctx.create_cq_builder()
            .setup_cqe(depth.max(1))
            .setup_wc_flags(CqWcFlags::ByteLength | CqWcFlags::ImmediateData)
            .build_ex()
            .map_err(|e| inval("ibv_create_cq_ex", &e))
    };
    let send_cq = cq(caps.cq_depth.max(caps.max_send_wr))?;
    let recv_cq = cq(caps.cq_depth.max(caps.max_recv_wr))?;
    // Default send_ops_flags are SEND | SEND_WITH_IMM | WRITE |
    // WRITE_WITH_IMM | READ: exactly what tandem posts.
    let qp = pd
        .create_qp_builder()
        .setup_qp_type(QueuePairType::ReliableConnection)
        .setup_max_send_wr(caps.max_send_wr)
        .setup_max_recv_wr(caps.max_recv_wr)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .setup_send_cq(Arc::clone(&send_cq))
        .setup_recv_cq(Arc::clone(&recv_cq))
        .build_ex() // ibv_create_qp_ex + ibv_qp_to_qp_ex
        .map_err(|e| inval("ibv_create_qp_ex", &e))?;

    let addr = QpAddr {
        lid: pattr.lid(),
        gid,
        qpn: qp.qp_number(),
        psn: random_psn(),
        mtu: mtu_bytes(pattr.active_mtu()),
    };
    Ok(VerbsQp {
        qp,
        mrs: Vec::with_capacity(256),
        send_cq,
        recv_cq,
        _pd: pd,
        _ctx: ctx,
        port,
        grh,
        addr,
        caps,
        failed: false,
        peer_gone: Arc::new(AtomicBool::new(false)),
        rnr_seen: 0,
        name: dev.to_string(),
        oob: None,
    })
}

/// The RoCE GID index to use when none is given.
fn pick_roce_gid(ctx: &Arc<DeviceContext>, port: u8) -> u8 {
    let Ok(table) = ctx.query_gid_table() else {
        return 0;
    };
    let v2 = |g: &&sideway::ibverbs::address::GidEntry| {
        g.port_num() == u32::from(port) && g.gid_type() == GidType::RoceV2
    };
    table
        .iter()
        .filter(v2)
        .find(|g| !g.gid().is_unicast_link_local())
        .or_else(|| table.iter().find(v2))
        .map_or(0, |g| g.gid_index() as u8)
}

impl VerbsQp {
    /// A flag the bootstrap sets when the peer's control connection closes;
    /// [`QueuePair::peer_gone`] reads it.
    pub fn peer_gone_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.peer_gone)
    }

    /// Watches the bootstrap's connection `s` to the peer (nothing more is
    /// sent on it): when it ends, the peer is gone ([`QueuePair::peer_gone`]),
    /// which a queue pair alone could only tell from retries timing out.
    ///
    /// # Errors
    /// The `std::io::Error` of cloning `s`, clearing its read timeout or
    /// starting the watcher thread; nothing is watched then.
    pub fn watch_peer(&mut self, s: std::net::TcpStream) -> std::io::Result<()> {
        use std::io::Read;
        let flag = Arc::clone(&self.peer_gone);
        let mut r = s.try_clone()?;
        r.set_read_timeout(None)?;
        std::thread::Builder::new()
            .name("tandem-verbs-watch".into())
            .spawn(move || {
                let mut b = [0u8; 64];
                while let Ok(n) = r.read(&mut b) {
                    if n == 0 {
                        break;
                    }
                }
                flag.store(true, Ordering::Release);
            })?;
        self.oob = Some(s);
        Ok(())
    }

    fn ib_modify(&mut self, attr: &QueuePairAttribute, what: &str) -> Result<(), FabricError> {
        IbQp::modify(&mut self.qp, attr)
            .map_err(|e| FabricError::Invalid(format!("ibv_modify_qp to {what}: {}", chain(&e))))
    }
}

/// Drains up to `out.len()` completions from `cq` (no allocation: the
/// extended poller reads the CQE in place). Returns (count, errors, RNR).
fn drain(
    cq: &ExtendedCompletionQueue,
    out: &mut [Wc],
    recv: bool,
) -> Result<(usize, bool, u64), FabricError> {
    // start_poll consumes the first CQE (end_poll runs on the poller's
    // drop), so never start one with no room for it.
    if out.is_empty() {
        return Ok((0, false, 0));
    }
    // The ibv_cq_ex behind the CQ, for ibv_wc_read_wc_flags; sideway's
    // CompletionQueue::cq() is that same pointer cast to ibv_cq (as
    // ibv_cq_ex_to_cq is).
    // SAFETY: the pointer is only used while `cq` (borrowed) is alive.
    let raw = unsafe { cq.cq() }
        .as_ptr()
        .cast::<rdma_mummy_sys::ibv_cq_ex>();
    let poller = match cq.start_poll() {
        Ok(p) => p,
        Err(PollCompletionQueueError::CompletionQueueEmpty) => return Ok((0, false, 0)),
        Err(e) => {
            return Err(FabricError::Invalid(format!(
                "ibv_start_poll: {}",
                chain(&e)
            )))
        }
    };
    let (mut n, mut err, mut rnr) = (0, false, 0);
    // `take` never calls next() past out.len(), so no CQE is lost.
    for wc in poller.take(out.len()) {
        let status = map_status(wc.status());
        let (opcode, byte_len, imm) = if status == WcStatus::Success {
            let op = wc.opcode();
            let opcode = match op {
                o if o == IbOp::Send as u32 => WcOpcode::Send,
                o if o == IbOp::Write as u32 => WcOpcode::Write,
                o if o == IbOp::Read as u32 => WcOpcode::Read,
                o if o == IbOp::ReceiveWithImmediate as u32 => WcOpcode::RecvWriteImm,
                _ => WcOpcode::Recv,
            };
            // SAFETY: `raw` is this CQ, inside start_poll/end_poll, on the
            // current CQE (what ibv_wc_read_* require).
            let flags = unsafe { rdma_mummy_sys::ibv_wc_read_wc_flags(raw) };
            let has_imm = flags & rdma_mummy_sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            // Immediates travel in network byte order (ibv_wr_*_imm take
            // and ibv_wc_read_imm_data gives __be32).
            let imm = has_imm.then(|| u32::from_be(wc.imm_data()));
            (opcode, wc.byte_len(), imm)
        } else {
            // Only wr_id, status, qp_num and vendor_err are valid on an
            // error completion (ibv_poll_cq(3)); tandem does not read the
            // opcode of a failed completion.
            err = true;
            if status == WcStatus::RnrRetryExceeded {
                rnr += 1;
            }
            (if recv { WcOpcode::Recv } else { WcOpcode::Send }, 0, None)
        };
        out[n] = Wc {
            wr_id: wc.wr_id(),
            status,
            opcode,
            byte_len,
            imm,
        };
        n += 1;
    }
    Ok((n, err, rnr))
}

fn map_status(s: u32) -> WcStatus {
    if s > IbSt::TagMatchingRendezvousIncomplete as u32 {
        return WcStatus::RemoteInvalidRequest; // WorkCompletionStatus::from panics here
    }
    match IbSt::from(s) {
        IbSt::Success => WcStatus::Success,
        IbSt::LocalLengthError => WcStatus::LocalLength,
        IbSt::LocalProtectionError | IbSt::LocalAccessError => WcStatus::LocalProtection,
        IbSt::RemoteAccessError => WcStatus::RemoteAccess,
        IbSt::RetryCounterExceededError => WcStatus::RetryExceeded,
        IbSt::ResponderNotReadyRetryCounterExceededError => WcStatus::RnrRetryExceeded,
        IbSt::WorkRequestFlushedError => WcStatus::Flushed,
        // LOC_QP_OP, BAD_RESP, REM_OP, FATAL, GENERAL, ...: mod.rs has no
        // variant for them; the nearest is a malformed request.
        _ => WcStatus::RemoteInvalidRequest,
    }
}

impl QueuePair for VerbsQp {
    fn local_addr(&self) -> QpAddr {
        self.addr
    }

    fn modify(&mut self, m: Modify) -> Result<(), FabricError> {
        // The soft fabric's answer to a wrong transition (verbs would say
        // EINVAL, which sideway turns into InvalidTransition).
        match (self.state(), m) {
            (QpState::Reset, Modify::Init)
            | (QpState::Init, Modify::Rtr(..))
            | (QpState::Rtr, Modify::Rts(_))
            | (_, Modify::Error) => {}
            (s, _) => return Err(FabricError::BadState(s, "this transition")),
        }
        let mut attr = QueuePairAttribute::new();
        match m {
            Modify::Init => {
                attr.setup_state(QueuePairState::Init)
                    .setup_pkey_index(0)
                    .setup_port(self.port)
                    .setup_access_flags(
                        AccessFlags::LocalWrite
                            | AccessFlags::RemoteWrite
                            | AccessFlags::RemoteRead,
                    );
                self.ib_modify(&attr, "INIT")
            }
            Modify::Rtr(peer, rc) => {
                let mtu = mtu_from_bytes(peer.mtu.min(self.addr.mtu));
                attr.setup_state(QueuePairState::ReadyToReceive)
                    .setup_path_mtu(mtu)
                    .setup_dest_qp_num(peer.qpn)
                    .setup_rq_psn(peer.psn)
                    .setup_max_dest_read_atomic(self.caps.max_rd_atomic.min(255) as u8)
                    .setup_min_rnr_timer(rc.min_rnr_timer);
                let mut ah = AddressHandleAttribute::new();
                ah.setup_dest_lid(peer.lid)
                    .setup_port(self.port)
                    .setup_service_level(0);
                if let Some(sgid) = self.grh {
                    ah.setup_grh(&Gid { raw: peer.gid }, 0, sgid, HOP_LIMIT, 0);
                }
                attr.setup_address_vector(&ah);
                self.ib_modify(&attr, "RTR")
            }
            Modify::Rts(rc) => {
                if rc.rnr_retry > 7 || rc.retry_cnt > 7 {
                    return Err(FabricError::Invalid(format!(
                        "rnr_retry and retry_cnt are 0..=7, got {} and {}",
                        rc.rnr_retry, rc.retry_cnt
                    )));
                }
                attr.setup_state(QueuePairState::ReadyToSend)
                    .setup_sq_psn(self.addr.psn)
                    .setup_timeout(rc.timeout)
                    .setup_retry_cnt(rc.retry_cnt)
                    .setup_rnr_retry(rc.rnr_retry)
                    .setup_max_read_atomic(self.caps.max_rd_atomic.min(255) as u8);
                self.ib_modify(&attr, "RTS")
            }
            Modify::Error => {
                attr.setup_state(QueuePairState::Error);
                self.ib_modify(&attr, "ERROR")?;
                self.failed = true;
                Ok(())
            }
        }
    }

    fn state(&self) -> QpState {
        if self.failed {
            return QpState::Error;
        }
        // libibverbs' cached ibv_qp.state, updated by each successful modify.
        match IbQp::state(&self.qp) {
            QueuePairState::Reset => QpState::Reset,
            QueuePairState::Init => QpState::Init,
            QueuePairState::ReadyToReceive => QpState::Rtr,
            QueuePairState::ReadyToSend => QpState::Rts,
            _ => QpState::Error,
        }
    }

    unsafe fn register(
        &mut self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<MrKeys, FabricError> {
        let mut flags = AccessFlags::from(0i32);
        // Verbs requires LOCAL_WRITE with REMOTE_WRITE.
        if access.local_write || access.remote_write {
            flags |= AccessFlags::LocalWrite;
        }
        if access.remote_write {
            flags |= AccessFlags::RemoteWrite;
        }
        if access.remote_read {
            flags |= AccessFlags::RemoteRead;
        }
        // ProtectionDomain::reg_mr(self: &Arc<Self>, ptr: usize, len, flags)
        // is unsafe and takes a raw address: exactly this trait's contract.
        // SAFETY: the caller keeps `addr..addr+len` valid until deregister.
        let mr = unsafe { self._pd.reg_mr(addr as usize, len, flags) }.map_err(|e| {
            FabricError::Invalid(format!("ibv_reg_mr({addr:#x}, {len}): {}", chain(&e)))
        })?;
        let keys = MrKeys {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        self.mrs.push((keys.lkey, mr));
        Ok(keys)
    }

    fn deregister(&mut self, lkey: u32) {
        // The last Arc goes: MemoryRegion's Drop calls ibv_dereg_mr.
        if let Some(i) = self.mrs.iter().position(|(k, _)| *k == lkey) {
            self.mrs.swap_remove(i);
        }
    }

    fn post_recv(&mut self, wr_id: u64, sge: Option<Sge>) -> Result<(), FabricError> {
        let st = self.state();
        if st == QpState::Reset {
            return Err(FabricError::BadState(st, "post_recv"));
        }
        // sideway's PostRecvGuard collects into two Vecs per call; the link
        // re-posts a receive per message, so build the request on the stack.
        let mut sg = rdma_mummy_sys::ibv_sge {
            addr: sge.map_or(0, |s| s.addr),
            length: sge.map_or(0, |s| s.len),
            lkey: sge.map_or(0, |s| s.lkey),
        };
        let mut rwr = rdma_mummy_sys::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sg,
            num_sge: i32::from(sge.is_some()),
        };
        let mut bad: *mut rdma_mummy_sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP pointer is valid while `self.qp` lives; the work
        // request and its SGE live on this stack frame for the call (the
        // provider copies them into its queue); the buffer they name stays
        // registered and valid until the receive completes (this trait's
        // contract).
        let rc = unsafe {
            let qp = IbQp::qp(&self.qp).as_ptr();
            rdma_mummy_sys::ibv_post_recv(qp, &mut rwr, &mut bad)
        };
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(FabricError::QueueFull("receive")),
            e => Err(FabricError::Invalid(format!("ibv_post_recv: errno {e}"))),
        }
    }

    fn post_send(&mut self, wr: &SendWr) -> Result<(), FabricError> {
        let st = self.state();
        if st != QpState::Rts && st != QpState::Error {
            return Err(FabricError::BadState(st, "post_send"));
        }
        // In ERROR the WR is still posted: the device completes it with
        // IBV_WC_WR_FLUSH_ERR.
        // NOT CHECKED ON HARDWARE: provider behaviour (mlx5 flushes).
        let flags = if wr.signaled {
            WorkRequestFlags::Signaled
        } else {
            WorkRequestFlags::from(0u32)
        };
        let mut guard = IbQp::start_post_send(&mut self.qp); // ibv_wr_start
        let h = guard.construct_wr(wr.wr_id, flags); // sets qp_ex.wr_id / wr_flags
        let buf = match wr.op {
            Opcode::Send => h.setup_send(),
            Opcode::SendImm(i) => h.setup_send_imm(i.to_be()),
            Opcode::Write(r) => h.setup_write(r.rkey, r.addr),
            Opcode::WriteImm(r, i) => h.setup_write_imm(r.rkey, r.addr, i.to_be()),
            Opcode::Read(r) => h.setup_read(r.rkey, r.addr),
        };
        match wr.sge {
            // SAFETY: as in post_recv, the caller keeps the buffer valid
            // until the work request completes.
            Some(s) => unsafe { buf.setup_sge(s.lkey, s.addr, s.len) },
            // NOT CHECKED ON HARDWARE: an empty ibv_wr_set_sge_list as the
            // zero-length form (the provider must still finalize the WQE).
            // SAFETY: an empty list names no memory.
            None => unsafe { buf.setup_sge_list(&[]) },
        }
        guard.post().map_err(|e| match e {
            // ibv_wr_complete: ENOMEM when the send queue is full.
            PostSendError::NotEnoughResources(_) => FabricError::QueueFull("send"),
            e => FabricError::Invalid(format!("ibv_wr_complete: {}", chain(&e))),
        })
    }

    fn poll_send(&mut self, out: &mut [Wc]) -> Result<usize, FabricError> {
        let (n, err, rnr) = drain(&self.send_cq, out, false)?;
        self.failed |= err;
        self.rnr_seen += rnr;
        Ok(n)
    }

    fn poll_recv(&mut self, out: &mut [Wc]) -> Result<usize, FabricError> {
        let (n, err, rnr) = drain(&self.recv_cq, out, true)?;
        self.failed |= err;
        self.rnr_seen += rnr;
        Ok(n)
    }

    fn peer_gone(&self) -> bool {
        self.peer_gone.load(Ordering::Acquire)
    }

    fn rnr_events(&self) -> u64 {
        // Verbs has no per-QP RNR NAK count: this counts the RNR failures
        // seen here. Port-wide counts live in sysfs
        // (/sys/class/infiniband/<dev>/ports/<p>/hw_counters/, mlx5:
        // out_of_buffer, rnr_nak_retry_err), shared by every QP on the port.
        self.rnr_seen
    }

    fn fabric(&self) -> &str {
        &self.name
    }
}
