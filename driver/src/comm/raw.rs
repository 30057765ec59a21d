//! Non-blocking operations whose buffers the caller keeps alive: the form
//! of [`Scope::isend`](super::Scope::isend) and its siblings for bindings
//! to other languages (tandem's MPI library), where a request outlives any
//! Rust scope. The borrow checker cannot see these buffers, so posting is
//! `unsafe`: the caller promises what a [`Scope`](super::Scope) would
//! otherwise guarantee.

use super::{Comm, Waiter};
use crate::coll::{Collective, Element, ReduceOp};
use crate::error::{Error, OpKind, Result};
use crate::progress::{OpId, Status};

/// The scope of raw collectives: no [`Comm::scope`] ever has this id, so
/// no scope's end waits for them.
pub(super) const RAW_SCOPE: u32 = u32::MAX;

/// A pending raw operation (see [`Comm::isend_raw`]). Not `Clone`: it is
/// spent by [`Comm::wait_raw`] or a [`Comm::test_raw`] that finds it done.
/// Dropping it without either leaves the operation running, and its engine
/// slot in use, until the communicator ends.
#[derive(Debug)]
#[must_use = "a raw request must be waited for or tested until done"]
pub struct RawRequest {
    id: OpId,
    kind: OpKind,
}

/// A pending raw collective (see [`Comm::iallreduce_raw`]).
#[derive(Debug)]
#[must_use = "a raw collective must be waited for or tested until done"]
pub struct RawCollRequest {
    ticket: crate::coll::exec::Ticket,
}

impl Comm {
    /// Starts sending `len` bytes at `buf` to `dst` (a synchronous send if
    /// `sync`: it completes once the receiver matched it).
    ///
    /// # Safety
    /// `buf..buf + len` must be readable, and must not be written, until the
    /// request is spent by [`wait_raw`](Self::wait_raw) or a
    /// [`test_raw`](Self::test_raw) that returns its result.
    ///
    /// # Errors
    /// The refusals of [`Scope::isend`](super::Scope::isend).
    pub unsafe fn isend_raw(
        &self,
        buf: *const u8,
        len: usize,
        dst: usize,
        tag: u32,
        sync: bool,
    ) -> Result<RawRequest> {
        if dst >= self.size() {
            return Err(Error::InvalidRank {
                rank: dst,
                size: self.size(),
            });
        }
        let bytes = if len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller keeps `buf..buf + len` readable and unchanged
            // until the request is spent; the engine reads it only until then.
            unsafe { std::slice::from_raw_parts(buf, len) }
        };
        let id = self.post_send(bytes, dst, tag, sync, 0)?;
        let kind = if sync { OpKind::Ssend } else { OpKind::Send };
        Ok(RawRequest { id, kind })
    }

    /// Starts receiving into the `len` bytes at `buf` from `src` (or
    /// [`ANY_SOURCE`](super::ANY_SOURCE)) with `tag` (or
    /// [`ANY_TAG`](super::ANY_TAG)).
    ///
    /// # Safety
    /// `buf..buf + len` must be writable, and must not be read or written by
    /// anyone else, until the request is spent by
    /// [`wait_raw`](Self::wait_raw) or a [`test_raw`](Self::test_raw) that
    /// returns its result.
    ///
    /// # Errors
    /// The refusals of [`Scope::irecv`](super::Scope::irecv).
    pub unsafe fn irecv_raw(
        &self,
        buf: *mut u8,
        len: usize,
        src: usize,
        tag: u32,
    ) -> Result<RawRequest> {
        let bytes = if len == 0 {
            &mut [][..]
        } else {
            // SAFETY: the caller gives the engine `buf..buf + len` alone until
            // the request is spent.
            unsafe { std::slice::from_raw_parts_mut(buf, len) }
        };
        let id = self.post_recv(bytes, src, tag, 0)?;
        Ok(RawRequest {
            id,
            kind: OpKind::Recv,
        })
    }

    /// Waits for a raw operation, under the wait policy and the no-progress
    /// timeout, as [`Request::wait`](super::Request::wait) does.
    ///
    /// # Errors
    /// As [`Request::wait`](super::Request::wait).
    pub fn wait_raw(&self, r: RawRequest) -> Result<Status> {
        self.wait_one(r.id, r.kind)
    }

    /// Drives progress once; the operation's result if it finished (the
    /// request is then spent), else the request back.
    ///
    /// # Errors
    /// In the inner result: what [`wait_raw`](Self::wait_raw) would return.
    pub fn test_raw(&self, r: RawRequest) -> std::result::Result<Result<Status>, RawRequest> {
        self.test_op(r.id).ok_or(r)
    }

    /// The operation's result if it finished, without driving progress
    /// (see [`progress`](Self::progress)); else the request back.
    ///
    /// # Errors
    /// In the inner result: what [`wait_raw`](Self::wait_raw) would return.
    pub fn take_raw(&self, r: RawRequest) -> std::result::Result<Result<Status>, RawRequest> {
        let t = self.engine().take(r.id);
        t.map(|x| self.here(x)).ok_or(r)
    }

    /// Whether a raw operation has finished, without taking its result:
    /// also when it is pending on a revoked communicator, where taking it
    /// fails with [`Error::Revoked`](crate::Error::Revoked).
    pub fn is_done_raw(&self, r: &RawRequest) -> bool {
        self.engine().takeable(r.id)
    }

    /// Cancels a raw receive that has not matched yet: `true` if cancelled
    /// (its result is then [`Error::Cancelled`]), `false` if too late or a
    /// send.
    pub fn cancel_raw(&self, r: &RawRequest) -> bool {
        self.engine().cancel_recv(r.id)
    }

    /// Drives every pending operation of this rank once (all communicators:
    /// they share the engine), collectives included.
    pub fn progress(&self) {
        let mut e = self.engine();
        e.progress();
        self.drive_collectives(&mut e);
    }

    /// Waits until one of `reqs` finishes, under the wait policy; returns
    /// its index and result and leaves `None` in its place. `None` if every
    /// entry is `None`. The requests may come from any communicator of this
    /// rank (a raw request does not know its own); the status and error
    /// name ranks in this communicator's numbering, so on communicators
    /// numbered differently wait through the request's own. The
    /// no-progress timeout applies to the first still pending.
    ///
    /// # Errors
    /// In the returned result: what [`wait_raw`](Self::wait_raw) reports for
    /// the request that finished.
    pub fn wait_any_raw(&self, reqs: &mut [Option<RawRequest>]) -> Option<(usize, Result<Status>)> {
        reqs.iter().flatten().next()?;
        let mut w = Waiter::new(&self.sh);
        loop {
            {
                let mut e = self.engine();
                e.progress();
                self.drive_collectives(&mut e);
                for (i, slot) in reqs.iter_mut().enumerate() {
                    let Some(r) = slot else { continue };
                    if let Some(res) = e.take(r.id) {
                        *slot = None;
                        return Some((i, self.here(res)));
                    }
                }
                if w.slow_path_due() {
                    let (i, r) = reqs
                        .iter()
                        .enumerate()
                        .find_map(|(i, r)| r.as_ref().map(|r| (i, r)))?;
                    if let Err(err) = w.check(&mut e, r.id, r.kind, self.ctx) {
                        e.withdraw(r.id, &err);
                        reqs[i] = None;
                        return Some((i, Err(err)));
                    }
                }
            }
            w.pause(1);
        }
    }

    /// Starts an [`allreduce`](Comm::allreduce) of `count` elements from
    /// `send` into `recv` (`send` null: in place in `recv`).
    ///
    /// # Safety
    /// `send` (if not null) must point to `count` readable `T`s and `recv` to
    /// `count` writable `T`s, untouched by anyone else, until the request is
    /// spent by [`coll_wait_raw`](Self::coll_wait_raw) or
    /// [`coll_test_raw`](Self::coll_test_raw).
    ///
    /// # Errors
    /// The refusals of [`Scope::iallreduce`](super::Scope::iallreduce).
    pub unsafe fn iallreduce_raw<T: Element>(
        &self,
        send: *const T,
        recv: *mut T,
        count: usize,
        op: ReduceOp,
    ) -> Result<RawCollRequest> {
        let shape = super::collective::shape::<T>(
            Collective::Allreduce,
            Some(op),
            count,
            0,
            send.is_null(),
        );
        let src = if send.is_null() {
            recv.cast_const()
        } else {
            send
        };
        let b = super::collective::raw_bufs::<T>(src, recv, count, count);
        let ticket = self.coll_start::<T>(shape, b, RAW_SCOPE)?;
        Ok(RawCollRequest { ticket })
    }

    /// Starts a [`broadcast`](Comm::broadcast) of `count` elements at `buf`
    /// from `root`.
    ///
    /// # Safety
    /// `buf` must point to `count` `T`s, readable on the root and writable
    /// elsewhere, untouched by anyone else until the request is spent.
    ///
    /// # Errors
    /// The refusals of [`Scope::ibroadcast`](super::Scope::ibroadcast).
    pub unsafe fn ibroadcast_raw<T: Element>(
        &self,
        buf: *mut T,
        count: usize,
        root: usize,
    ) -> Result<RawCollRequest> {
        self.check_root(root)?;
        let shape = super::collective::shape::<T>(Collective::Broadcast, None, count, root, true);
        let b = super::collective::raw_bufs::<T>(buf.cast_const(), buf, count, count);
        let ticket = self.coll_start::<T>(shape, b, RAW_SCOPE)?;
        Ok(RawCollRequest { ticket })
    }

    /// Starts a [`reduce`](Comm::reduce) of `count` elements from `send`
    /// into `recv` on `root` (`send` null on the root: in place in
    /// `recv`; `recv` is not used elsewhere and may be null there).
    ///
    /// # Safety
    /// `send` (if not null) must point to `count` readable `T`s and, on
    /// the root, `recv` to `count` writable `T`s, untouched by anyone else
    /// until the request is spent.
    ///
    /// # Errors
    /// The refusals of [`Scope::ireduce`](super::Scope::ireduce); a null
    /// `send` off the root is [`Error::InvalidArgument`].
    pub unsafe fn ireduce_raw<T: Element>(
        &self,
        send: *const T,
        recv: *mut T,
        count: usize,
        op: ReduceOp,
        root: usize,
    ) -> Result<RawCollRequest> {
        self.check_root(root)?;
        let at_root = self.rank() == root;
        let in_place = send.is_null();
        if in_place && !at_root {
            return Err(Error::InvalidArgument(
                "ireduce_raw: in place only on the root".into(),
            ));
        }
        let shape =
            super::collective::shape::<T>(Collective::Reduce, Some(op), count, root, in_place);
        let b = match (in_place, at_root) {
            (true, _) => super::collective::raw_bufs::<T>(recv.cast_const(), recv, count, count),
            (false, true) => super::collective::raw_bufs::<T>(send, recv, count, count),
            (false, false) => {
                super::collective::raw_bufs::<T>(send, std::ptr::null_mut(), count, 0)
            }
        };
        let ticket = self.coll_start::<T>(shape, b, RAW_SCOPE)?;
        Ok(RawCollRequest { ticket })
    }

    /// Starts an [`allgather`](Comm::allgather): `count` elements from
    /// `send` (null: in place, this rank's block already at its place in
    /// `recv`) to every rank, into `recv`, which holds `count * size()`
    /// elements, rank `r`'s block at `r * count`.
    ///
    /// # Safety
    /// `send` (if not null) must point to `count` readable `T`s and `recv`
    /// to `count * size()` writable `T`s, untouched by anyone else until
    /// the request is spent.
    ///
    /// # Errors
    /// The refusals of [`Scope::iallgather`](super::Scope::iallgather);
    /// [`Error::InvalidArgument`] if `count * size()` overflows.
    pub unsafe fn iallgather_raw<T: Element>(
        &self,
        send: *const T,
        recv: *mut T,
        count: usize,
    ) -> Result<RawCollRequest> {
        let total = self.blocks_total("iallgather_raw", count)?;
        let in_place = send.is_null();
        let shape = super::collective::shape::<T>(Collective::Allgather, None, count, 0, in_place);
        let b = if in_place {
            super::collective::raw_bufs::<T>(recv.cast_const(), recv, total, total)
        } else {
            super::collective::raw_bufs::<T>(send, recv, count, total)
        };
        let ticket = self.coll_start::<T>(shape, b, RAW_SCOPE)?;
        Ok(RawCollRequest { ticket })
    }

    /// Starts an [`alltoall`](Comm::alltoall): block `r` of `send` (`count`
    /// elements at `r * count`) goes to rank `r`, whose block from this
    /// rank lands in its `recv` at `rank() * count`.
    ///
    /// # Safety
    /// `send` must point to `count * size()` readable `T`s and `recv` to as
    /// many writable ones, not overlapping, untouched by anyone else until
    /// the request is spent.
    ///
    /// # Errors
    /// The refusals of [`Scope::ialltoall`](super::Scope::ialltoall);
    /// [`Error::InvalidArgument`] if `count * size()` overflows.
    pub unsafe fn ialltoall_raw<T: Element>(
        &self,
        send: *const T,
        recv: *mut T,
        count: usize,
    ) -> Result<RawCollRequest> {
        let total = self.blocks_total("ialltoall_raw", count)?;
        let shape = super::collective::shape::<T>(Collective::Alltoall, None, count, 0, false);
        let b = super::collective::raw_bufs::<T>(send, recv, total, total);
        let ticket = self.coll_start::<T>(shape, b, RAW_SCOPE)?;
        Ok(RawCollRequest { ticket })
    }

    /// `count` elements for each rank, in all (the length of a buffer of
    /// one block per rank).
    fn blocks_total(&self, what: &str, count: usize) -> Result<usize> {
        count
            .checked_mul(self.size())
            .ok_or_else(|| Error::InvalidArgument(format!("{what}: count * size overflows")))
    }

    /// Starts a [`barrier`](Comm::barrier).
    ///
    /// # Errors
    /// The refusals of [`Scope::ibarrier`](super::Scope::ibarrier).
    pub fn ibarrier_raw(&self) -> Result<RawCollRequest> {
        let shape = super::collective::shape::<u8>(Collective::Barrier, None, 0, 0, true);
        let b = super::collective::raw_bufs::<u8>(std::ptr::null(), std::ptr::null_mut(), 0, 0);
        let ticket = self.coll_start::<u8>(shape, b, RAW_SCOPE)?;
        Ok(RawCollRequest { ticket })
    }

    /// Waits for a raw collective.
    ///
    /// # Errors
    /// As [`CollRequest::wait`](super::CollRequest::wait).
    pub fn coll_wait_raw(&self, r: RawCollRequest) -> Result<()> {
        self.coll_wait(r.ticket)
    }

    /// Advances every collective once; the collective's result if it
    /// finished (the request is then spent), else the request back.
    ///
    /// # Errors
    /// In the inner result: as [`CollRequest::test`](super::CollRequest::test).
    pub fn coll_test_raw(
        &self,
        r: RawCollRequest,
    ) -> std::result::Result<Result<()>, RawCollRequest> {
        let mut e = self.engine();
        e.progress();
        let mut st = self.coll.borrow_mut();
        st.table.drive(&mut e);
        st.table.take(r.ticket).ok_or(r)
    }
}
