//! The collective calls of [`Comm`] and [`Scope`], typed with
//! [`Element`], and their request, [`CollRequest`].
//!
//! Every rank of the communicator must call the same collectives in the
//! same order with matching arguments (as in MPI and NCCL). Blocking and
//! non-blocking collectives may be mixed with each other and with
//! point-to-point traffic on the same communicator: collectives use a
//! context of their own, and every wait or test on the communicator
//! advances every collective in flight, so they complete in any order of
//! waiting.

use super::{explain, Comm, Scope, Waiter};
use crate::coll::exec::{mismatch, Call, InlineKey, Program, Table, Ticket, FAST_MAX};
use crate::coll::Algorithm;
use crate::coll::{plan, types::not_applicable, CollConfig, Collective, Element, ReduceOp, Shape};
use crate::config::{debug_level, DebugLevel};
use crate::error::OpKind;
use crate::error::{Error, Result};
use crate::progress::MAX_CONTEXTS;
use crate::progress::{Code, Status};
use std::time::{Duration, Instant};

/// The collective context of user context `ctx`: the upper half.
pub(super) const COLL_CTX: u16 = MAX_CONTEXTS / 2;

/// A communicator's collectives: the table in flight and the settings.
pub(super) struct CollState {
    pub(super) table: Table,
    tun: CollConfig,
    info: bool,
    last: [Option<Algorithm>; 7],
    /// Plans made and settings changed so far: what an inline program's
    /// key records, so that either makes the next call plan again.
    epoch: u64,
}

impl CollState {
    /// A communicator's collectives with settings `tun`.
    pub(super) fn new(tun: CollConfig) -> Self {
        Self {
            table: Table::new(),
            tun,
            info: debug_level() >= DebugLevel::Info,
            last: [None; 7],
            epoch: 0,
        }
    }

    /// Plans `shape` for rank `r` of `n` with this communicator's settings.
    fn plan(&mut self, shape: &Shape, r: usize, n: usize) -> crate::coll::plan::Plan {
        self.epoch = self.epoch.wrapping_add(1);
        plan(&self.tun, self.info, &mut self.last, shape, r, n)
    }

    /// What an inline program for a call of `shape` over buffers of these
    /// lengths is keyed by, in this epoch.
    fn key(&self, shape: Shape, src_len: usize, dst_len: usize) -> InlineKey {
        InlineKey {
            shape,
            src_len,
            dst_len,
            epoch: self.epoch,
        }
    }

    /// The settings, to change (a new epoch: no inline program compiled
    /// under the old ones runs again).
    fn tune(&mut self) -> &mut CollConfig {
        self.epoch = self.epoch.wrapping_add(1);
        &mut self.tun
    }

    /// The settings (what a duplicate starts with).
    pub(super) fn settings(&self) -> &CollConfig {
        &self.tun
    }
}

/// A call's shape.
pub(super) fn shape<T: Element>(
    coll: Collective,
    op: Option<ReduceOp>,
    count: usize,
    root: usize,
    in_place: bool,
) -> Shape {
    Shape {
        coll,
        dtype: T::DTYPE,
        op,
        count,
        root,
        in_place,
    }
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument(what)
}

/// The buffers of one call, untyped.
pub(super) struct Bufs {
    src: *const u8,
    src_len: usize,
    dst: *mut u8,
    dst_len: usize,
}

fn bufs<T: Element>(src: &[T], dst: &mut [T]) -> Bufs {
    Bufs {
        src: src.as_ptr().cast(),
        src_len: std::mem::size_of_val(src),
        dst: dst.as_mut_ptr().cast(),
        dst_len: std::mem::size_of_val(dst),
    }
}

/// The buffers of a raw call: `src_n` and `dst_n` elements (a zero-length
/// buffer may be null).
pub(super) fn raw_bufs<T: Element>(src: *const T, dst: *mut T, src_n: usize, dst_n: usize) -> Bufs {
    let dangling = std::ptr::NonNull::<T>::dangling().as_ptr();
    Bufs {
        src: if src.is_null() {
            dangling.cast_const()
        } else {
            src
        }
        .cast(),
        src_len: src_n * std::mem::size_of::<T>(),
        dst: if dst.is_null() { dangling } else { dst }.cast(),
        dst_len: dst_n * std::mem::size_of::<T>(),
    }
}

fn in_place<T: Element>(buf: &mut [T]) -> Bufs {
    let dst: *mut u8 = buf.as_mut_ptr().cast();
    Bufs {
        src: dst,
        src_len: std::mem::size_of_val(buf),
        dst,
        dst_len: std::mem::size_of_val(buf),
    }
}

impl Comm {
    pub(super) fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(Error::InvalidRank {
                rank: root,
                size: self.size(),
            });
        }
        Ok(())
    }

    /// Validates a call and plans it.
    fn coll_call<T: Element>(&self, shape: Shape, b: Bufs) -> Result<Call> {
        let kernel = match shape.op {
            Some(op) => Some(T::kernel(op).ok_or_else(|| not_applicable(T::DTYPE, op))?),
            None => None,
        };
        self.check_root(shape.root)?;
        let mut st = self.coll.borrow_mut();
        let st = &mut *st;
        let plan = st.plan(&shape, self.rank(), self.size());
        Ok(Call {
            plan,
            kernel,
            esize: std::mem::size_of::<T>(),
            src: b.src,
            src_len: b.src_len,
            dst: b.dst,
            dst_len: b.dst_len,
            map: self
                .members
                .as_ref()
                .map_or(std::ptr::null(), |m| m.as_ptr()),
            map_len: self.members.as_ref().map_or(0, |m| m.len()),
        })
    }

    /// Validates a call and starts it in `scope` (0: a blocking call).
    pub(super) fn coll_start<T: Element>(
        &self,
        shape: Shape,
        b: Bufs,
        scope: u32,
    ) -> Result<Ticket> {
        let call = self.coll_call::<T>(shape, b)?;
        let mut st = self.coll.borrow_mut();
        let mut e = self.engine();
        st.table.start(&mut e, call, self.ctx + COLL_CTX, scope)
    }

    /// Runs a small blocking collective right here, step by step, through
    /// the blocking calls' fast paths (no table entry, no operation
    /// recorded while messages arrive in time): `None` if it does not
    /// qualify (several lanes, large buffers, many steps, other
    /// collectives running).
    fn coll_inline(&self, call: Call, shape: Shape) -> Option<Result<()>> {
        if call.src_len.max(call.dst_len) > FAST_MAX || call.plan.lanes_used() > 1 {
            return None;
        }
        let mut prog = self.inline.try_borrow_mut().ok()?;
        let (tag, tmp) = {
            let mut st = self.coll.borrow_mut();
            let key = st.key(shape, call.src_len, call.dst_len);
            match st.table.inline(call, key, &mut prog)? {
                Ok(x) => x,
                Err(e) => return Some(Err(e)),
            }
        };
        drop(prog);
        let prog = self.inline.try_borrow().ok()?;
        Some(self.run_inline(&prog, call.src, call.dst, tmp, tag))
    }

    /// Runs again, right here, the small blocking collective compiled
    /// last, if this call is one of the same shape with nothing planned
    /// since: no validation or planning is repeated (they gave the same
    /// answers). `None` otherwise.
    fn coll_repeat(&self, shape: Shape, b: &Bufs) -> Option<Result<()>> {
        let prog = self.inline.try_borrow().ok()?;
        let (tag, tmp) = {
            let mut st = self.coll.borrow_mut();
            let key = st.key(shape, b.src_len, b.dst_len);
            st.table.repeat(&key, &prog)?
        };
        Some(self.run_inline(&prog, b.src, b.dst, tmp, tag))
    }

    /// Runs `prog` over this call's buffers.
    fn run_inline(
        &self,
        prog: &Program,
        src: *const u8,
        dst: *mut u8,
        tmp: *mut u8,
        tag: u32,
    ) -> Result<()> {
        let ctx = self.ctx + COLL_CTX;
        let seq = tag >> 6;
        let plan = prog.plan();
        let done = prog.run(src, dst, tmp, |send, recv| {
            self.exchange(send, recv, ctx, tag, plan, seq)
        });
        done.map_err(|e| annotate(e, plan, seq))
    }

    /// One step of a small collective run directly: sends `send` (through
    /// the eager fast path if it can, else posted), receives `recv` in
    /// full (polled, then posted), then waits for the send. The length
    /// received must be the buffer's.
    fn exchange(
        &self,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
        ctx: u16,
        tag: u32,
        plan: &crate::coll::plan::Plan,
        seq: u32,
    ) -> Result<()> {
        let mut posted = None;
        if let Some((buf, to)) = send {
            let mut e = self.engine();
            if !e.try_send_now(buf, to, ctx, tag) {
                posted = Some(e.post_send(buf, to, ctx, tag, false, 0)?);
            }
        }
        if let Some((buf, from)) = recv {
            let want = buf.len();
            let got = self.recv_fast(buf, from, ctx, tag).and_then(|g| match g {
                Ok(st) if st.len == want => Ok(()),
                Ok(st) => Err(mismatch(plan, seq, from, st.len, want)),
                Err(Error::Truncated { needed, got, .. }) => {
                    Err(mismatch(plan, seq, from, needed, got))
                }
                Err(e) => Err(e),
            });
            if let Err(err) = got {
                if let Some(id) = posted {
                    self.engine().withdraw(id, &err);
                }
                return Err(err);
            }
        }
        if let Some(id) = posted {
            self.wait_one(id, OpKind::Send)?;
        }
        Ok(())
    }

    /// A receive polled for on the link while the wait policy spins, then
    /// posted and waited for with the deadlines.
    fn recv_fast(&self, buf: &mut [u8], peer: usize, ctx: u16, tag: u32) -> Result<Result<Status>> {
        if let Some(r) = self.recv_polled(buf, peer, ctx, tag) {
            return Ok(r);
        }
        let id = self.engine().post_recv(buf, peer as u32, ctx, tag, 0)?;
        Ok(self.wait_one(id, OpKind::Recv))
    }

    /// Waits for a collective, under the wait policy, the no-progress
    /// timeout and peer-death checks.
    pub(super) fn coll_wait(&self, t: Ticket) -> Result<()> {
        let mut w = Waiter::new(&self.sh);
        let mut peers_checked: Option<Instant> = None;
        loop {
            {
                let mut e = self.engine();
                let mut st = self.coll.borrow_mut();
                st.table.drive(&mut e);
                if let Some(r) = st.table.take(t) {
                    return r;
                }
                if w.slow_path_due() {
                    w.answer_signal(&mut e);
                    // A wait past the first polls: receives polled for are
                    // posted, so peer deaths and timeouts see them.
                    st.table.unfast(&mut e);
                    if peers_checked.is_none_or(|t| t.elapsed() >= Duration::from_millis(5)) {
                        peers_checked = Some(Instant::now());
                        e.check_peers();
                        st.table.drive(&mut e);
                        if let Some(r) = st.table.take(t) {
                            return r;
                        }
                    }
                    if let Some(waited) = w.stalled(st.table.moved(t) as usize) {
                        let err = match st.table.stall(&e, t) {
                            Some(s) => {
                                let peer = s.peer;
                                match explain(&e, s.op, peer, s.tag, self.ctx + COLL_CTX, waited) {
                                    Error::Timeout {
                                        op,
                                        peer,
                                        tag,
                                        waited,
                                        why,
                                    } => Error::Timeout {
                                        op,
                                        peer,
                                        tag,
                                        waited,
                                        why: if why.is_empty() {
                                            s.what
                                        } else {
                                            format!("{}; {why}", s.what)
                                        },
                                    },
                                    other => other,
                                }
                            }
                            None => Error::Internal("collective stalled without an error".into()),
                        };
                        st.table.fail(&mut e, t, err.clone());
                        st.table.take(t);
                        return Err(err);
                    }
                }
            }
            w.pause(1);
        }
    }

    /// Uses algorithm `a` for collective `c` on this communicator from now
    /// on (`None`: choose by size, the default), overriding
    /// [`CollConfig::force`](field@crate::CollConfig::force) (`TANDEM_ALGO`).
    /// Like every collective setting, it must be the same on every rank.
    ///
    /// ```
    /// use tandem_driver::{Algorithm, Collective, Comm, Config, Layout, ReduceOp};
    /// let out = Comm::threads(2, &Layout::default(), Config::default(), |comm| {
    ///     comm.set_algorithm(Collective::Allreduce, Some(Algorithm::Ring));
    ///     let mut s = [0u32];
    ///     comm.allreduce(&[1], &mut s, ReduceOp::Sum)?;
    ///     Ok(s[0])
    /// });
    /// assert_eq!(*out[1].as_ref().unwrap(), 2);
    /// ```
    pub fn set_algorithm(&self, c: Collective, a: Option<Algorithm>) {
        let mut st = self.coll.borrow_mut();
        st.tune().force[c.index()] = a;
    }

    /// Sets this communicator's collective pipeline: `chunk` bytes per
    /// transfer of the pipelined algorithms and `lanes` (1 to 8)
    /// concurrent pipelines, overriding the communicator's
    /// [`CollConfig`] (`TANDEM_COLL_CHUNK`, `TANDEM_COLL_LANES`). Must be the
    /// same on every rank.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `chunk` is 0 or `lanes` is not in 1..=8;
    /// the settings are then unchanged.
    pub fn set_pipeline(&self, chunk: usize, lanes: usize) -> Result<()> {
        self.coll.borrow_mut().tune().set_pipeline(chunk, lanes)
    }

    /// Advances every collective in flight (called from every wait).
    pub(super) fn drive_collectives(&self, e: &mut crate::progress::Engine) {
        if let Ok(mut st) = self.coll.try_borrow_mut() {
            st.table.drive(e);
        }
    }

    fn coll_blocking<T: Element>(&self, shape: Shape, b: Bufs) -> Result<()> {
        let bytes = b.src_len.max(b.dst_len);
        self.record_coll(Code::CollBegin, &shape, bytes);
        let r = self.coll_blocking_unrecorded::<T>(shape, b);
        self.record_coll(Code::CollEnd, &shape, bytes);
        if let Err(e) = &r {
            self.failed(e);
        }
        r
    }

    fn coll_blocking_unrecorded<T: Element>(&self, shape: Shape, b: Bufs) -> Result<()> {
        if let Some(r) = self.coll_repeat(shape, &b) {
            return r;
        }
        let call = self.coll_call::<T>(shape, b)?;
        if let Some(r) = self.coll_inline(call, shape) {
            return r;
        }
        let t = {
            let mut st = self.coll.borrow_mut();
            let mut e = self.engine();
            st.table.start(&mut e, call, self.ctx + COLL_CTX, 0)?
        };
        self.coll_wait(t)
    }

    /// Every rank's `send` reduced with `op` into every rank's `recv`
    /// (MPI's `MPI_Allreduce`, NCCL's `ncclAllReduce`). Both have the same
    /// length on every rank. The result is bitwise identical on every rank
    /// and from run to run for a given algorithm and rank count.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout, ReduceOp};
    /// let out = Comm::threads(3, &Layout::default(), Config::default(), |comm| {
    ///     let mine = [comm.rank() as f32, 1.0];
    ///     let mut sum = [0.0f32; 2];
    ///     comm.allreduce(&mine, &mut sum, ReduceOp::Sum)?;
    ///     Ok(sum)
    /// });
    /// assert!(out.iter().all(|r| r.as_ref().unwrap() == &[3.0, 3.0]));
    /// ```
    ///
    /// # Errors
    /// The collectives share these errors; the others' sections refer here.
    ///
    /// * Refused at the call, on this rank alone, before anything is sent:
    ///   [`Error::InvalidArgument`] when the buffer lengths disagree with each
    ///   other or with `size()`, or `op` does not apply to `T` (a bitwise
    ///   operator on a float type); [`Error::InvalidRank`] for a `root` not
    ///   below `size()`. The other ranks then wait for this one until their
    ///   timeout.
    /// * [`Error::TooManyRequests`] when 16 collectives are in flight on this
    ///   communicator already, or a transfer finds more operations pending
    ///   than [`Config::max_requests`](field@crate::Config::max_requests).
    /// * [`Error::Mismatch`] when a peer's message at some step has another
    ///   length than this rank expects: the ranks passed different counts.
    /// * [`Error::PeerLost`], [`Error::ChannelBroken`] or [`Error::Protocol`]
    ///   when the link to a rank this one exchanges with fails (see [`Comm`]).
    /// * [`Error::Timeout`] after the timeout without progress, naming the
    ///   collective, its number, its algorithm and the transfer it waits for;
    ///   or [`Error::Deadlock`].
    /// * [`Error::Internal`]: a bug in a schedule.
    pub fn allreduce<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        check_same("allreduce", send.len(), recv.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::Allreduce, Some(op), send.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// [`allreduce`](Self::allreduce) with `buf` as both input and output.
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce).
    pub fn allreduce_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let n = buf.len();
        self.coll_blocking::<T>(
            shape::<T>(Collective::Allreduce, Some(op), n, 0, true),
            in_place(buf),
        )
    }

    /// Every rank's `send` reduced with `op` into `recv` on `root` (MPI's
    /// `MPI_Reduce`). `recv` has `send`'s length on the root; elsewhere it
    /// is not touched and may be empty.
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce): [`Error::InvalidRank`] for `root`
    /// not below `size()`, and on the root [`Error::InvalidArgument`] if `recv`
    /// is not as long as `send`.
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        if self.rank() == root {
            check_same("reduce", send.len(), recv.len())?;
        }
        self.coll_blocking::<T>(
            shape::<T>(Collective::Reduce, Some(op), send.len(), root, false),
            bufs(send, recv),
        )
    }

    /// [`reduce`](Self::reduce) in place: on `root`, `buf` is replaced by
    /// the result; elsewhere it is only read.
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidRank`] for `root`
    /// not below `size()`.
    pub fn reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let n = buf.len();
        self.coll_blocking::<T>(
            shape::<T>(Collective::Reduce, Some(op), n, root, true),
            in_place(buf),
        )
    }

    /// `root`'s `buf` into every rank's `buf` (MPI's `MPI_Bcast`).
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidRank`] for `root`
    /// not below `size()`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let n = buf.len();
        self.coll_blocking::<T>(
            shape::<T>(Collective::Broadcast, None, n, root, true),
            in_place(buf),
        )
    }

    /// Every rank's `send` into block `rank` of every rank's `recv`, which
    /// holds `size()` blocks of `send.len()` (MPI's `MPI_Allgather`).
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidArgument`] unless
    /// `recv.len()` is `size() * send.len()`.
    pub fn allgather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.check_blocks("allgather", send.len(), recv.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::Allgather, None, send.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// [`allgather`](Self::allgather) in place: each rank's own block is
    /// already at block `rank` of `buf` (NCCL's in-place convention).
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidArgument`] unless
    /// `buf.len()` is a multiple of `size()`.
    pub fn allgather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<()> {
        let m = self.block_of("allgather_in_place", buf.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::Allgather, None, m, 0, true),
            in_place(buf),
        )
    }

    /// Block `rank` of the reduction of every rank's `send` (`size()`
    /// blocks of `recv.len()`) into `recv` (MPI's
    /// `MPI_Reduce_scatter_block`, NCCL's `ncclReduceScatter`).
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidArgument`] unless
    /// `send.len()` is `size() * recv.len()`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        self.check_blocks("reduce_scatter", recv.len(), send.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::ReduceScatter, Some(op), recv.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// [`reduce_scatter`](Self::reduce_scatter) in place: the result lands
    /// in block `rank` of `buf` (NCCL's in-place convention); the other
    /// blocks are left as they were.
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidArgument`] unless
    /// `buf.len()` is a multiple of `size()`.
    pub fn reduce_scatter_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let m = self.block_of("reduce_scatter_in_place", buf.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::ReduceScatter, Some(op), m, 0, true),
            in_place(buf),
        )
    }

    /// Block `r` of every rank's `send` into block `rank` of rank `r`'s
    /// `recv`; both hold `size()` blocks (MPI's `MPI_Alltoall`).
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce); [`Error::InvalidArgument`] unless
    /// `send` and `recv` have the same length, a multiple of `size()`.
    pub fn alltoall<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        check_same("alltoall", send.len(), recv.len())?;
        let m = self.block_of("alltoall", send.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::Alltoall, None, m, 0, false),
            bufs(send, recv),
        )
    }

    /// Returns once every rank has entered the barrier (MPI's
    /// `MPI_Barrier`).
    ///
    /// # Errors
    /// As [`allreduce`](Self::allreduce), from the second point on: a barrier
    /// has no argument to refuse.
    pub fn barrier(&self) -> Result<()> {
        let none: &mut [u8] = &mut [];
        self.coll_blocking::<u8>(
            shape::<u8>(Collective::Barrier, None, 0, 0, true),
            in_place(none),
        )
    }

    /// `whole` is `size()` blocks of `block`.
    fn check_blocks(&self, what: &str, block: usize, whole: usize) -> Result<()> {
        if block.checked_mul(self.size()) != Some(whole) {
            return Err(invalid(format!(
                "{what}: a buffer of {whole} elements is not {} blocks of {block}",
                self.size()
            )));
        }
        Ok(())
    }

    /// The block length of a buffer of `size()` blocks.
    fn block_of(&self, what: &str, whole: usize) -> Result<usize> {
        if whole % self.size() != 0 {
            return Err(invalid(format!(
                "{what}: {whole} elements do not split into {} equal blocks",
                self.size()
            )));
        }
        Ok(whole / self.size())
    }
}

/// A timeout inside a collective says which one.
fn annotate(e: Error, plan: &crate::coll::plan::Plan, seq: u32) -> Error {
    match e {
        Error::Timeout {
            op,
            peer,
            tag,
            waited,
            why,
        } => Error::Timeout {
            op,
            peer,
            tag,
            waited,
            why: format!(
                "in {} #{seq} ({}, {} elements){}{why}",
                plan.coll.name(),
                plan.algo.describe(plan.coll),
                plan.count,
                if why.is_empty() { "" } else { "; " }
            ),
        },
        other => other,
    }
}

fn check_same(what: &str, send: usize, recv: usize) -> Result<()> {
    if send != recv {
        return Err(invalid(format!(
            "{what}: the send buffer has {send} elements, the receive buffer {recv}"
        )));
    }
    Ok(())
}

/// A non-blocking collective of a [`Scope`] (started by
/// [`Scope::iallreduce`] and its siblings). Dropping it unwaited is
/// allowed: the collective still completes, and the end of the scope
/// waits for it and reports its error.
#[must_use = "dropping a collective request does not cancel it: its scope's end waits for it"]
pub struct CollRequest<'s> {
    comm: &'s Comm,
    ticket: Option<Ticket>,
}

impl std::fmt::Debug for CollRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollRequest")
            .field("pending", &self.ticket.is_some())
            .finish()
    }
}

impl CollRequest<'_> {
    /// Waits for the collective to finish.
    ///
    /// # Errors
    /// The collective's error, as the blocking call reports it (see
    /// [`Comm::allreduce`]) after the refusals at its start;
    /// [`Error::InvalidArgument`] if [`test`](Self::test) already returned the
    /// result.
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => self.comm.coll_wait(t),
            None => Err(Error::InvalidArgument("request already completed".into())),
        }
    }

    /// `Some(())` once the collective finished (the request is then spent),
    /// `None` while it runs. Advances it (and every other operation of the
    /// communicator) once.
    ///
    /// # Errors
    /// The collective's error once it finished with one (the request is then
    /// spent); no timeout applies here. [`Error::InvalidArgument`] on a spent
    /// request.
    pub fn test(&mut self) -> Result<Option<()>> {
        let t = self
            .ticket
            .ok_or_else(|| Error::InvalidArgument("request already completed".into()))?;
        let mut e = self.comm.engine();
        let mut st = self.comm.coll.borrow_mut();
        st.table.drive(&mut e);
        match st.table.take(t) {
            None => Ok(None),
            Some(r) => {
                self.ticket = None;
                r.map(Some)
            }
        }
    }
}

impl<'s, 'env> Scope<'s, 'env> {
    fn coll<T: Element>(&'s self, shape: Shape, b: Bufs) -> Result<CollRequest<'s>> {
        let t = self.comm.coll_start::<T>(shape, b, self.id)?;
        Ok(CollRequest {
            comm: self.comm,
            ticket: Some(t),
        })
    }

    /// Starts an [`allreduce`](Comm::allreduce); the buffers stay borrowed
    /// until the scope ends.
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`allreduce`](Comm::allreduce), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn iallreduce<T: Element>(
        &'s self,
        send: &'env [T],
        recv: &'env mut [T],
        op: ReduceOp,
    ) -> Result<CollRequest<'s>> {
        check_same("iallreduce", send.len(), recv.len())?;
        self.coll::<T>(
            shape::<T>(Collective::Allreduce, Some(op), send.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// Starts an [`allreduce_in_place`](Comm::allreduce_in_place).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`allreduce_in_place`](Comm::allreduce_in_place), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn iallreduce_in_place<T: Element>(
        &'s self,
        buf: &'env mut [T],
        op: ReduceOp,
    ) -> Result<CollRequest<'s>> {
        let n = buf.len();
        self.coll::<T>(
            shape::<T>(Collective::Allreduce, Some(op), n, 0, true),
            in_place(buf),
        )
    }

    /// Starts a [`reduce`](Comm::reduce).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`reduce`](Comm::reduce), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn ireduce<T: Element>(
        &'s self,
        send: &'env [T],
        recv: &'env mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<CollRequest<'s>> {
        self.comm.check_root(root)?;
        if self.comm.rank() == root {
            check_same("ireduce", send.len(), recv.len())?;
        }
        self.coll::<T>(
            shape::<T>(Collective::Reduce, Some(op), send.len(), root, false),
            bufs(send, recv),
        )
    }

    /// Starts a [`broadcast`](Comm::broadcast).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`broadcast`](Comm::broadcast), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn ibroadcast<T: Element>(
        &'s self,
        buf: &'env mut [T],
        root: usize,
    ) -> Result<CollRequest<'s>> {
        let n = buf.len();
        self.coll::<T>(
            shape::<T>(Collective::Broadcast, None, n, root, true),
            in_place(buf),
        )
    }

    /// Starts a [`reduce_in_place`](Comm::reduce_in_place).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`reduce_in_place`](Comm::reduce_in_place), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn ireduce_in_place<T: Element>(
        &'s self,
        buf: &'env mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<CollRequest<'s>> {
        let n = buf.len();
        self.coll::<T>(
            shape::<T>(Collective::Reduce, Some(op), n, root, true),
            in_place(buf),
        )
    }

    /// Starts an [`allgather_in_place`](Comm::allgather_in_place).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`allgather_in_place`](Comm::allgather_in_place), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn iallgather_in_place<T: Element>(
        &'s self,
        buf: &'env mut [T],
    ) -> Result<CollRequest<'s>> {
        let m = self.comm.block_of("iallgather_in_place", buf.len())?;
        self.coll::<T>(
            shape::<T>(Collective::Allgather, None, m, 0, true),
            in_place(buf),
        )
    }

    /// Starts a [`reduce_scatter_in_place`](Comm::reduce_scatter_in_place).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`reduce_scatter_in_place`](Comm::reduce_scatter_in_place), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn ireduce_scatter_in_place<T: Element>(
        &'s self,
        buf: &'env mut [T],
        op: ReduceOp,
    ) -> Result<CollRequest<'s>> {
        let m = self.comm.block_of("ireduce_scatter_in_place", buf.len())?;
        self.coll::<T>(
            shape::<T>(Collective::ReduceScatter, Some(op), m, 0, true),
            in_place(buf),
        )
    }

    /// Starts an [`allgather`](Comm::allgather).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`allgather`](Comm::allgather), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn iallgather<T: Element>(
        &'s self,
        send: &'env [T],
        recv: &'env mut [T],
    ) -> Result<CollRequest<'s>> {
        self.comm
            .check_blocks("iallgather", send.len(), recv.len())?;
        self.coll::<T>(
            shape::<T>(Collective::Allgather, None, send.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// Starts a [`reduce_scatter`](Comm::reduce_scatter).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`reduce_scatter`](Comm::reduce_scatter), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn ireduce_scatter<T: Element>(
        &'s self,
        send: &'env [T],
        recv: &'env mut [T],
        op: ReduceOp,
    ) -> Result<CollRequest<'s>> {
        self.comm
            .check_blocks("ireduce_scatter", recv.len(), send.len())?;
        self.coll::<T>(
            shape::<T>(Collective::ReduceScatter, Some(op), recv.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// Starts an [`alltoall`](Comm::alltoall).
    ///
    /// # Errors
    /// Refused at once, nothing started: the refusals of
    /// [`alltoall`](Comm::alltoall), and
    /// [`Error::TooManyRequests`] with 16 collectives in flight on the
    /// communicator. Everything else comes from [`CollRequest::wait`].
    pub fn ialltoall<T: Element>(
        &'s self,
        send: &'env [T],
        recv: &'env mut [T],
    ) -> Result<CollRequest<'s>> {
        check_same("ialltoall", send.len(), recv.len())?;
        let m = self.comm.block_of("ialltoall", send.len())?;
        self.coll::<T>(
            shape::<T>(Collective::Alltoall, None, m, 0, false),
            bufs(send, recv),
        )
    }

    /// Starts a [`barrier`](Comm::barrier).
    ///
    /// # Errors
    /// [`Error::TooManyRequests`] at once with 16 collectives in flight on the
    /// communicator; everything else comes from [`CollRequest::wait`].
    pub fn ibarrier(&'s self) -> Result<CollRequest<'s>> {
        let none: &mut [u8] = &mut [];
        self.coll::<u8>(
            shape::<u8>(Collective::Barrier, None, 0, 0, true),
            in_place(none),
        )
    }
}
