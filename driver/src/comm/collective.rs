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
use crate::coll::exec::{Call, Table, Ticket};
use crate::coll::plan::Algorithm;
use crate::coll::{plan, types::not_applicable, Collective, Element, ReduceOp, Shape, Tunables};
use crate::error::{Error, Result};
use crate::progress::MAX_CONTEXTS;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// The collective context of user context `ctx`: the upper half.
pub(super) const COLL_CTX: u16 = MAX_CONTEXTS / 2;

/// A communicator's collectives: the table in flight and the settings.
pub(super) struct CollState {
    pub(super) table: Table,
    tun: Tunables,
    last: [Option<Algorithm>; 7],
}

impl CollState {
    pub(super) fn new() -> Result<Self> {
        Ok(Self {
            table: Table::new(),
            tun: Tunables::from_env()?,
            last: [None; 7],
        })
    }
}

/// A call's shape.
fn shape<T: Element>(
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
struct Bufs {
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
    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(Error::InvalidRank {
                rank: root,
                size: self.size(),
            });
        }
        Ok(())
    }

    /// Validates a call and starts it in `scope` (0: a blocking call).
    fn coll_start<T: Element>(&self, shape: Shape, b: Bufs, scope: u32) -> Result<Ticket> {
        let kernel = match shape.op {
            Some(op) => Some(T::kernel(op).ok_or_else(|| not_applicable(T::DTYPE, op))?),
            None => None,
        };
        self.check_root(shape.root)?;
        let mut st = self.coll.borrow_mut();
        let st = &mut *st;
        let plan = plan(&st.tun, &mut st.last, &shape, self.rank(), self.size());
        let call = Call {
            plan,
            kernel,
            esize: std::mem::size_of::<T>(),
            src: b.src,
            src_len: b.src_len,
            dst: b.dst,
            dst_len: b.dst_len,
        };
        let mut e = self.engine();
        st.table.start(&mut e, call, self.ctx + COLL_CTX, scope)
    }

    /// Waits for a collective, under the wait policy, the no-progress
    /// timeout and peer-death checks.
    pub(super) fn coll_wait(&self, t: Ticket) -> Result<()> {
        let mut w = Waiter::new(&self.sh.cfg);
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
                            None => Error::Io("collective stalled".into()),
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
    /// on (`None`: choose by size, the default), overriding `TANDEM_ALGO`.
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
        self.coll.borrow_mut().tun.force(c, a);
    }

    /// Advances every collective in flight (called from every wait).
    pub(super) fn drive_collectives(&self, e: &mut crate::progress::Engine) {
        if let Ok(mut st) = self.coll.try_borrow_mut() {
            st.table.drive(e);
        }
    }

    fn coll_blocking<T: Element>(&self, shape: Shape, b: Bufs) -> Result<()> {
        let t = self.coll_start::<T>(shape, b, 0)?;
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
    pub fn allreduce<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        check_same("allreduce", send.len(), recv.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::Allreduce, Some(op), send.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// [`allreduce`](Self::allreduce) with `buf` as both input and output.
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
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let n = buf.len();
        self.coll_blocking::<T>(
            shape::<T>(Collective::Broadcast, None, n, root, true),
            in_place(buf),
        )
    }

    /// Every rank's `send` into block `rank` of every rank's `recv`, which
    /// holds `size()` blocks of `send.len()` (MPI's `MPI_Allgather`).
    pub fn allgather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.check_blocks("allgather", send.len(), recv.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::Allgather, None, send.len(), 0, false),
            bufs(send, recv),
        )
    }

    /// [`allgather`](Self::allgather) in place: each rank's own block is
    /// already at block `rank` of `buf` (NCCL's in-place convention).
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
    pub fn reduce_scatter_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let m = self.block_of("reduce_scatter_in_place", buf.len())?;
        self.coll_blocking::<T>(
            shape::<T>(Collective::ReduceScatter, Some(op), m, 0, true),
            in_place(buf),
        )
    }

    /// Block `r` of every rank's `send` into block `rank` of rank `r`'s
    /// `recv`; both hold `size()` blocks (MPI's `MPI_Alltoall`).
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
#[must_use = "a request should be waited for (its scope waits otherwise)"]
pub struct CollRequest<'s> {
    comm: &'s Comm,
    ticket: Option<Ticket>,
    _s: PhantomData<&'s ()>,
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
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => self.comm.coll_wait(t),
            None => Err(Error::Io("request already completed".into())),
        }
    }

    /// `Some(())` once the collective finished (the request is then spent),
    /// `None` while it runs. Advances it (and every other operation of the
    /// communicator) once.
    pub fn test(&mut self) -> Result<Option<()>> {
        let t = self
            .ticket
            .ok_or_else(|| Error::Io("request already completed".into()))?;
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
            _s: PhantomData,
        })
    }

    /// Starts an [`allreduce`](Comm::allreduce); the buffers stay borrowed
    /// until the scope ends.
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
    pub fn ibarrier(&'s self) -> Result<CollRequest<'s>> {
        let none: &mut [u8] = &mut [];
        self.coll::<u8>(
            shape::<u8>(Collective::Barrier, None, 0, 0, true),
            in_place(none),
        )
    }
}
