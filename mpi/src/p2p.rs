//! Point-to-point communication and requests.

use crate::abi::{self, Handle};
use crate::datatype::TypeHold;
use crate::state::{
    CommObj, Fail, Greq, GreqCancel, GreqFree, GreqQuery, Lib, P2pReq, Persistent, Req, Unpack,
};
use crate::{count, export, fail, put, run, set};
use std::ffi::{c_int, c_void};
use std::rc::Rc;
use tandem_driver::{Error, Status as DStatus, ANY_SOURCE, ANY_TAG};

/// Whether `p` is a status the caller wants written.
#[inline(always)]
fn wants(p: *mut abi::Status) -> bool {
    !p.is_null() && p as usize != abi::STATUS_IGNORE
}

/// Writes `st` to the caller's status (unless ignored), keeping its
/// `MPI_ERROR` field as MPI asks of single-completion calls.
#[inline(always)]
pub(crate) unsafe fn out_status(p: *mut abi::Status, st: &abi::Status) {
    if wants(p) {
        // SAFETY: the caller's status, checked above.
        unsafe {
            let e = (*p).error;
            *p = *st;
            (*p).error = e;
        }
    }
}

/// The status of a completion with nothing received (`MPI_PROC_NULL`,
/// `MPI_REQUEST_NULL`, an inactive persistent request).
pub(crate) fn empty_status() -> abi::Status {
    abi::Status {
        count_lo: 0,
        count_hi_and_cancelled: 0,
        source: abi::ANY_SOURCE,
        tag: abi::ANY_TAG,
        error: abi::SUCCESS,
    }
}

pub(crate) fn proc_null_status() -> abi::Status {
    abi::Status {
        source: abi::PROC_NULL,
        ..empty_status()
    }
}

/// A status from tandem's: the source as a rank of `c`.
fn status_of(c: &CommObj, st: &DStatus, bytes: usize) -> abi::Status {
    let mut s = abi::Status {
        count_lo: 0,
        count_hi_and_cancelled: 0,
        source: c.peer_of(st.source).map_or(abi::UNDEFINED, |r| r as c_int),
        tag: st.tag as c_int,
        error: abi::SUCCESS,
    };
    s.set_count(bytes as i64);
    s
}

/// The destination's job rank; `None` for `MPI_PROC_NULL`.
#[inline(always)]
fn dest(c: &CommObj, r: c_int) -> Result<Option<usize>, Fail> {
    if r >= 0 && (r as usize) < c.peers() {
        return Ok(Some(c.peer_job(r as usize)));
    }
    if r == abi::PROC_NULL {
        return Ok(None);
    }
    fail(
        abi::ERR_RANK,
        format!("invalid rank {r} in a communicator of {}", c.peers()),
    )
}

/// The source's job rank (or tandem's `ANY_SOURCE`); `None` for
/// `MPI_PROC_NULL`.
#[inline(always)]
fn source(c: &CommObj, r: c_int) -> Result<Option<usize>, Fail> {
    if r == abi::ANY_SOURCE {
        return Ok(Some(ANY_SOURCE));
    }
    dest(c, r)
}

#[inline(always)]
fn send_tag(t: c_int) -> Result<u32, Fail> {
    if t < 0 {
        return fail(
            abi::ERR_TAG,
            format!("invalid tag {t} (sends need 0..=MPI_TAG_UB)"),
        );
    }
    Ok(t as u32)
}

#[inline(always)]
fn recv_tag(t: c_int) -> Result<u32, Fail> {
    if t == abi::ANY_TAG {
        return Ok(ANY_TAG);
    }
    send_tag(t)
}

/// A send buffer as bytes: the user's memory when the datatype is
/// contiguous, else a packed copy.
pub(crate) struct Out {
    pub ptr: *const u8,
    pub len: usize,
    pub packed: Option<Vec<u8>>,
}

impl Out {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr + len` is the caller's buffer (valid for the
        // call by MPI's rules) or `packed`, owned here.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Views a send buffer of `n` elements of `dt`.
#[inline(always)]
pub(crate) fn out_view(l: &Lib, buf: *const c_void, n: c_int, dt: Handle) -> Result<Out, Fail> {
    let n = count(n)?;
    if buf as usize == abi::IN_PLACE {
        return in_place_here();
    }
    if let Some(sz) = abi::builtin_size(dt) {
        if sz > 0 && dt != abi::LB && dt != abi::UB {
            return Ok(Out {
                ptr: buf.cast(),
                len: n * sz,
                packed: None,
            });
        }
    }
    out_view_derived(l, buf, n, dt)
}

/// `MPI_IN_PLACE` given where the call needs a buffer (a send, a receive,
/// a collective's buffer off the root): every call that takes it checks for
/// it before it asks for a view.
#[cold]
fn in_place_here<T>() -> Result<T, Fail> {
    fail(
        abi::ERR_BUFFER,
        "MPI_IN_PLACE where this call needs a buffer (it is the root's alone, or this call takes none)",
    )
}

#[cold]
fn out_view_derived(l: &Lib, buf: *const c_void, n: usize, dt: Handle) -> Result<Out, Fail> {
    if n == 0 && dt == abi::DATATYPE_NULL {
        // MPICH accepts the null datatype for an empty buffer.
        return Ok(Out {
            ptr: buf.cast(),
            len: 0,
            packed: None,
        });
    }
    let types = l.types.borrow();
    let info = types.info(dt).map_err(|c| type_fail(c, dt))?;
    if !info.committed {
        return fail(
            abi::ERR_TYPE,
            format!("datatype {dt:#x} is not committed (MPI_Type_commit)"),
        );
    }
    if info.contiguous {
        return Ok(Out {
            ptr: buf.cast(),
            len: n * info.size,
            packed: None,
        });
    }
    let mut v = vec![0u8; n * info.size];
    // SAFETY: the program's buffer holds `n` elements of `dt`.
    let w = unsafe { types.pack(dt, n, buf.cast(), &mut v) }.map_err(|c| type_fail(c, dt))?;
    v.truncate(w);
    Ok(Out {
        ptr: v.as_ptr(),
        len: v.len(),
        packed: Some(v),
    })
}

pub(crate) fn type_fail(class: c_int, dt: Handle) -> Fail {
    Fail::new(class, format!("invalid or uncommitted datatype {dt:#x}"))
}

/// A receive buffer: the user's memory, or a staging buffer unpacked at
/// completion.
pub(crate) struct In {
    pub ptr: *mut u8,
    pub len: usize,
    pub stage: Option<Unpack>,
}

/// Views a receive buffer of `n` elements of `dt`.
#[inline(always)]
pub(crate) fn in_view(l: &Lib, buf: *mut c_void, n: c_int, dt: Handle) -> Result<In, Fail> {
    let n = count(n)?;
    if buf as usize == abi::IN_PLACE {
        return in_place_here();
    }
    if let Some(sz) = abi::builtin_size(dt) {
        if sz > 0 && dt != abi::LB && dt != abi::UB {
            return Ok(In {
                ptr: buf.cast(),
                len: n * sz,
                stage: None,
            });
        }
    }
    in_view_derived(l, buf, n, dt)
}

#[cold]
fn in_view_derived(l: &Lib, buf: *mut c_void, n: usize, dt: Handle) -> Result<In, Fail> {
    if n == 0 && dt == abi::DATATYPE_NULL {
        // MPICH accepts the null datatype for an empty buffer.
        return Ok(In {
            ptr: buf.cast(),
            len: 0,
            stage: None,
        });
    }
    let types = l.types.borrow();
    let info = types.info(dt).map_err(|c| type_fail(c, dt))?;
    if !info.committed {
        return fail(
            abi::ERR_TYPE,
            format!("datatype {dt:#x} is not committed (MPI_Type_commit)"),
        );
    }
    if info.contiguous {
        return Ok(In {
            ptr: buf.cast(),
            len: n * info.size,
            stage: None,
        });
    }
    let mut staged = vec![0u8; n * info.size];
    Ok(In {
        ptr: staged.as_mut_ptr(),
        len: staged.len(),
        stage: Some(Unpack {
            staged,
            dst: buf.cast(),
            dt,
            count: n,
            hold: types.hold(dt),
            cap: usize::MAX,
        }),
    })
}

impl In {
    /// The bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller's buffer (valid for the call) or the staging
        // buffer owned here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Unpacks `got` received bytes of a staged receive.
pub(crate) fn unstage(l: &Lib, s: &Unpack, got: usize) -> Result<(), Fail> {
    let types = l.types.borrow();
    // SAFETY: `dst` is the program's receive buffer of `count` elements.
    unsafe { types.unpack(s.dt, s.count, &s.staged[..got.min(s.staged.len())], s.dst) }
        .map(|_| ())
        .map_err(|c| type_fail(c, s.dt))
}

fn send(
    l: &Lib,
    buf: *const c_void,
    n: c_int,
    dt: Handle,
    to: c_int,
    tag: c_int,
    comm: Handle,
    sync: bool,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let out = out_view(l, buf, n, dt)?;
    let tag = send_tag(tag)?;
    let Some(to) = dest(&c, to)? else {
        return Ok(());
    };
    if sync {
        c.p2p.ssend(out.bytes(), to, tag)?;
    } else {
        c.p2p.send(out.bytes(), to, tag)?;
    }
    Ok(())
}

/// The result of a receive that delivered `got` bytes, or failed.
/// A receive's outcome with its staging's room applied: a matched probe's
/// message, received whole into a buffer of its own, is truncated where
/// it is longer than the receive that took it.
fn capped(r: Result<DStatus, Error>, stage: Option<&Unpack>) -> Result<DStatus, Error> {
    match (r, stage) {
        (Ok(s), Some(u)) if s.len > u.cap => Err(Error::Truncated {
            needed: s.len,
            got: u.cap,
            source: s.source,
            tag: s.tag,
        }),
        (r, _) => r,
    }
}

fn received(
    l: &Lib,
    c: &CommObj,
    r: Result<DStatus, Error>,
    stage: Option<&Unpack>,
    st: *mut abi::Status,
) -> Result<(), Fail> {
    match capped(r, stage) {
        Ok(s) => {
            if let Some(u) = stage {
                unstage(l, u, s.len)?;
            }
            // SAFETY: the caller's status pointer.
            unsafe { out_status(st, &status_of(c, &s, s.len)) };
            Ok(())
        }
        Err(Error::Truncated {
            needed,
            got,
            source,
            tag,
        }) => {
            if let Some(u) = stage {
                unstage(l, u, got)?;
            }
            let mut s = status_of(
                c,
                &DStatus {
                    source,
                    tag,
                    len: got,
                },
                got,
            );
            s.error = abi::ERR_TRUNCATE;
            if wants(st) {
                // SAFETY: the caller's status, checked.
                unsafe { *st = s };
            }
            fail(
                abi::ERR_TRUNCATE,
                format!("message of {needed} bytes from rank {} (tag {tag}) truncated to a {got}-byte receive buffer", s.source),
            )
        }
        Err(e) => Err(e.into()),
    }
}

fn recv(
    l: &Lib,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    from: c_int,
    tag: c_int,
    comm: Handle,
    st: *mut abi::Status,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let mut inb = in_view(l, buf, n, dt)?;
    let tag = recv_tag(tag)?;
    let Some(from) = source(&c, from)? else {
        // SAFETY: the caller's status pointer.
        unsafe { out_status(st, &proc_null_status()) };
        return Ok(());
    };
    let r = c.p2p.recv(inb.bytes(), from, tag);
    received(l, &c, r, inb.stage.as_ref(), st)
}

/// Takes the message a probe on `c` just found (`st`, its status):
/// receives it into a buffer of its own length, so that no later receive
/// can match it (MPI's matched probe, `MPI_Mprobe`). The message is the
/// first unexpected one from its source with its tag (tandem keeps the
/// messages of a sender in order), so a receive for exactly that source
/// and tag, posted now, is the one that takes it. Its data goes where
/// [`matched_into`] says once the receive that names it is known.
pub(crate) fn matched_take(c: Rc<CommObj>, st: &abi::Status) -> Result<P2pReq, Fail> {
    let len = usize::try_from(st.count())
        .map_err(|_| Fail::new(abi::ERR_INTERN, "negative count in a probe's status".into()))?;
    let from = source(&c, st.source)?.ok_or_else(|| {
        Fail::new(
            abi::ERR_INTERN,
            "a probe found a message from MPI_PROC_NULL".into(),
        )
    })?;
    let tag = recv_tag(st.tag)?;
    let mut staged = vec![0u8; len];
    // SAFETY: `staged` is moved into the request below without moving
    // its heap buffer, which lives as long as the request.
    let raw = unsafe { c.p2p.irecv_raw(staged.as_mut_ptr(), len, from, tag)? };
    Ok(P2pReq {
        comm: c,
        raw: Some(raw),
        recv: true,
        stage: Some(Unpack {
            staged,
            dst: std::ptr::null_mut(),
            dt: abi::BYTE,
            count: 0,
            hold: TypeHold::empty(),
            cap: 0,
        }),
        persistent: None,
        hold: TypeHold::empty(),
        done: None,
        detached: false,
        cancel: false,
        null_peer: false,
    })
}

/// Points a message taken by [`matched_take`] at the program's receive
/// (`MPI_Mrecv`, `MPI_Imrecv`): `n` elements of `dt` at `buf`, `cap` bytes
/// (as [`in_view`] measured them when it checked the arguments); a longer
/// message fills them and is truncated.
pub(crate) fn matched_into(
    l: &Lib,
    mut p: P2pReq,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    cap: usize,
) -> Result<P2pReq, Fail> {
    if let Some(u) = p.stage.as_mut() {
        u.dst = buf.cast();
        u.dt = dt;
        u.count = count(n)?;
        u.hold = l.types.borrow().hold(dt);
        u.cap = cap;
    }
    Ok(p)
}

/// Starts a send; returns the request's state.
fn isend(
    l: &Lib,
    buf: *const c_void,
    n: c_int,
    dt: Handle,
    to: c_int,
    tag: c_int,
    c: Rc<CommObj>,
    sync: bool,
    persistent: Option<Persistent>,
) -> Result<Req, Fail> {
    let out = out_view(l, buf, n, dt)?;
    let tag = send_tag(tag)?;
    let Some(to) = dest(&c, to)? else {
        return Ok(match persistent {
            None => Req::Done(proc_null_status(), None),
            Some(_) => Req::P2p(P2pReq {
                comm: c,
                raw: None,
                recv: false,
                stage: None,
                persistent,
                hold: TypeHold::empty(),
                done: Some((proc_null_status(), None)),
                detached: false,
                cancel: false,
                null_peer: true,
            }),
        });
    };
    // SAFETY: MPI's rules keep the send buffer untouched until the request
    // completes; a packed copy lives in the request.
    let raw = unsafe { c.p2p.isend_raw(out.ptr, out.len, to, tag, sync)? };
    let stage = out.packed.map(|staged| Unpack {
        staged,
        dst: std::ptr::null_mut(),
        dt,
        count: 0,
        hold: TypeHold::empty(),
        cap: usize::MAX,
    });
    Ok(Req::P2p(P2pReq {
        comm: c,
        raw: Some(raw),
        recv: false,
        stage,
        persistent,
        hold: TypeHold::empty(),
        done: None,
        detached: false,
        cancel: false,
        null_peer: false,
    }))
}

/// Starts a receive; returns the request's state.
fn irecv(
    l: &Lib,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    from: c_int,
    tag: c_int,
    c: Rc<CommObj>,
    persistent: Option<Persistent>,
) -> Result<Req, Fail> {
    let inb = in_view(l, buf, n, dt)?;
    let tag = recv_tag(tag)?;
    let Some(from) = source(&c, from)? else {
        return Ok(match persistent {
            None => Req::Done(proc_null_status(), None),
            Some(_) => Req::P2p(P2pReq {
                comm: c,
                raw: None,
                recv: true,
                stage: None,
                persistent,
                hold: TypeHold::empty(),
                done: Some((proc_null_status(), None)),
                detached: false,
                cancel: false,
                null_peer: true,
            }),
        });
    };
    // SAFETY: MPI's rules give the library the receive buffer until the
    // request completes; a staging buffer lives in the request.
    let raw = unsafe { c.p2p.irecv_raw(inb.ptr, inb.len, from, tag)? };
    Ok(Req::P2p(P2pReq {
        comm: c,
        raw: Some(raw),
        recv: true,
        stage: inb.stage,
        persistent,
        hold: TypeHold::empty(),
        done: None,
        detached: false,
        cancel: false,
        null_peer: false,
    }))
}

/// How hard to try completing a request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Block until done.
    Wait,
    /// Drive progress once, then look.
    Test,
    /// Only look (progress was driven by the caller).
    Look,
}

/// What trying to complete a request found.
pub(crate) enum Outcome {
    /// Still running.
    Pending,
    /// Finished (or inactive): its status, and its error if it failed.
    Done(abi::Status, Option<Fail>),
}

/// Tries to complete request `h`; a finished non-persistent request is
/// freed and `*hp` set to `MPI_REQUEST_NULL`.
pub(crate) fn complete(l: &Lib, hp: *mut Handle, mode: Mode) -> Result<Outcome, Fail> {
    // SAFETY: the caller's request handle pointer (checked by callers).
    let h = unsafe { *hp };
    if h == abi::REQUEST_NULL {
        return Ok(Outcome::Done(empty_status(), None));
    }
    let idx = l
        .req_index(h)
        .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
    let mut out = complete_index(l, idx, mode)?;
    if let Outcome::Done(st, f) = &mut out {
        let persistent = matches!(
            l.reqs.borrow().get(idx),
            Some(Req::P2p(p)) if p.persistent.is_some()
        ) || matches!(l.reqs.borrow().get(idx), Some(Req::PColl(_)));
        if !persistent {
            let gone = l.reqs.borrow_mut().remove(idx);
            // SAFETY: as above.
            unsafe { *hp = abi::REQUEST_NULL };
            // A generalized request's free callback runs as it goes; its
            // failure is the call's unless the query's came first.
            if let Some(Req::Greq(g)) = gone {
                if let (Some(e), None) = (free_greq(&g), &f) {
                    st.error = e.class;
                    *f = Some(e);
                }
            }
        }
    }
    Ok(out)
}

/// Tries to complete the request at `idx` (it stays in the table).
pub(crate) fn complete_index(l: &Lib, idx: usize, mode: Mode) -> Result<Outcome, Fail> {
    let mut reqs = l.reqs.borrow_mut();
    let r = reqs
        .get_mut(idx)
        .ok_or_else(|| Fail::new(abi::ERR_REQUEST, "invalid request handle".into()))?;
    match r {
        Req::Done(..) => {
            let Req::Done(st, f) = std::mem::replace(r, Req::Done(empty_status(), None)) else {
                unreachable!("matched above")
            };
            Ok(Outcome::Done(st, f))
        }
        Req::Agree(a) => {
            let Some(mut op) = a.op.take() else {
                return Ok(Outcome::Done(empty_status(), None));
            };
            let (comm, flag) = (a.comm.clone(), a.flag);
            drop(reqs);
            let res = {
                let ft = comm.members_comm()?;
                match mode {
                    Mode::Wait => op.wait(&ft).map(Some),
                    Mode::Test | Mode::Look => op.test(&ft),
                }
            };
            match res {
                Ok(None) => {
                    if let Some(Req::Agree(a)) = l.reqs.borrow_mut().get_mut(idx) {
                        a.op = Some(op);
                    }
                    Ok(Outcome::Pending)
                }
                Ok(Some(flags)) => {
                    // SAFETY: the program's flag, checked not null by
                    // MPIX_Comm_iagree and valid until the request completes
                    // (MPI's rule for a non-blocking call's arguments).
                    unsafe { set(flag, flags as c_int, "flag") }?;
                    let failed = op.agreement().map(|a| a.failed.clone()).unwrap_or_default();
                    let f = crate::ft::unacked(&comm, &failed).then(crate::ft::unacked_failure);
                    let mut st = empty_status();
                    st.error = f.as_ref().map_or(abi::SUCCESS, |f| f.class);
                    Ok(Outcome::Done(st, f))
                }
                Err(e) => {
                    let mut st = empty_status();
                    let f = Fail::from(e);
                    st.error = f.class;
                    Ok(Outcome::Done(st, Some(f)))
                }
            }
        }
        Req::Greq(g) => {
            if let Some((st, f)) = g.done.take() {
                return Ok(Outcome::Done(st, f));
            }
            if !g.complete {
                return match mode {
                    // Only MPI_Grequest_complete finishes it, and no other
                    // call can run while this one waits (the library takes
                    // calls one at a time, MPI_THREAD_SERIALIZED).
                    Mode::Wait => fail(
                        abi::ERR_REQUEST,
                        "waiting for a generalized request that MPI_Grequest_complete has not completed: nothing else can complete it while this call waits",
                    ),
                    Mode::Test | Mode::Look => Ok(Outcome::Pending),
                };
            }
            let (query, state) = (g.query, g.state);
            drop(reqs);
            Ok(query_greq(query, state))
        }
        Req::Pair(p) => {
            let (mut send, mut recv) = (p.send, p.recv);
            drop(reqs);
            // Each part completes (and leaves the table) on its own; the
            // pair keeps what is left.
            let keep = |send: Handle, recv: Handle, f: Option<Fail>| {
                if let Some(Req::Pair(p)) = l.reqs.borrow_mut().get_mut(idx) {
                    p.send = send;
                    p.recv = recv;
                    if f.is_some() {
                        p.send_fail = f;
                    }
                }
            };
            if send != abi::REQUEST_NULL {
                match complete(l, &mut send, mode)? {
                    Outcome::Pending => {
                        keep(send, recv, None);
                        return Ok(Outcome::Pending);
                    }
                    Outcome::Done(_, f) => keep(send, recv, f),
                }
            }
            match complete(l, &mut recv, mode)? {
                Outcome::Pending => {
                    keep(send, recv, None);
                    Ok(Outcome::Pending)
                }
                Outcome::Done(mut st, f) => {
                    let sf = match l.reqs.borrow_mut().get_mut(idx) {
                        Some(Req::Pair(p)) => {
                            p.recv = abi::REQUEST_NULL;
                            p.send_fail.take()
                        }
                        _ => None,
                    };
                    let f = f.or(sf);
                    if let Some(e) = &f {
                        st.error = e.class;
                    }
                    Ok(Outcome::Done(st, f))
                }
            }
        }
        Req::PColl(p) => {
            if let Some((st, f)) = p.done.take() {
                return Ok(Outcome::Done(st, f));
            }
            let mut inner = p.active;
            if inner == abi::REQUEST_NULL {
                // Inactive.
                return Ok(Outcome::Done(empty_status(), None));
            }
            drop(reqs);
            // The started collective's request, freed once it finishes.
            let out = complete(l, &mut inner, mode);
            if let Some(Req::PColl(p)) = l.reqs.borrow_mut().get_mut(idx) {
                p.active = inner;
            }
            out
        }
        Req::Coll { comm, raw, staged } => {
            let Some(t) = raw.take() else {
                return Ok(Outcome::Done(empty_status(), None));
            };
            let comm = comm.clone();
            let staged = staged.take();
            drop(reqs);
            // The driver communicator it was started on (the request is
            // that communicator's).
            let e = comm.tc()?.ok_or_else(|| {
                Fail::new(
                    abi::ERR_INTERN,
                    "a collective request without its engine".into(),
                )
            })?;
            let res = match mode {
                Mode::Wait => Ok(e.coll_wait_raw(t)),
                Mode::Test | Mode::Look => e.coll_test_raw(t),
            };
            drop(e);
            match res {
                Err(t) => {
                    if let Some(Req::Coll { raw, staged: s, .. }) = l.reqs.borrow_mut().get_mut(idx)
                    {
                        *raw = Some(t);
                        *s = staged;
                    }
                    Ok(Outcome::Pending)
                }
                Ok(r) => {
                    let failed = match (r, &staged) {
                        (Ok(()), Some(s)) => s.finish(l).err(),
                        (r, _) => r.err().map(Fail::from),
                    };
                    Ok(Outcome::Done(empty_status(), failed))
                }
            }
        }
        Req::P2p(p) => {
            if let Some((st, f)) = p.done.take() {
                return Ok(Outcome::Done(st, f));
            }
            let Some(raw) = p.raw.take() else {
                // An inactive persistent request.
                return Ok(Outcome::Done(empty_status(), None));
            };
            let comm = p.comm.clone();
            drop(reqs);
            let res = match mode {
                Mode::Wait => Ok(comm.p2p.wait_raw(raw)),
                Mode::Test => comm.p2p.test_raw(raw),
                Mode::Look => comm.p2p.take_raw(raw),
            };
            let res = match res {
                Err(raw) => {
                    if let Some(Req::P2p(p)) = l.reqs.borrow_mut().get_mut(idx) {
                        p.raw = Some(raw);
                    }
                    return Ok(Outcome::Pending);
                }
                Ok(r) => r,
            };
            let (stage, recv) = match l.reqs.borrow_mut().get_mut(idx) {
                Some(Req::P2p(p)) => (
                    if p.persistent.is_some() {
                        None
                    } else {
                        p.stage.take()
                    },
                    p.recv,
                ),
                _ => (None, false),
            };
            let stage_ref = stage.as_ref();
            let res = if recv { capped(res, stage_ref) } else { res };
            let out = match res {
                Ok(s) => {
                    if recv {
                        if let Some(u) = stage_ref {
                            unstage(l, u, s.len)?;
                        } else if let Some(Req::P2p(p)) = l.reqs.borrow().get(idx) {
                            if let Some(u) = &p.stage {
                                unstage(l, u, s.len)?;
                            }
                        }
                    }
                    let len = if recv { s.len } else { 0 };
                    let mut st = status_of(&comm, &s, len);
                    if !recv {
                        st = empty_status();
                    }
                    Outcome::Done(st, None)
                }
                Err(Error::Cancelled) => {
                    let mut st = empty_status();
                    st.set_cancelled(true);
                    Outcome::Done(st, None)
                }
                Err(Error::Truncated {
                    needed,
                    got,
                    source,
                    tag,
                }) => {
                    if let Some(u) = stage_ref {
                        unstage(l, u, got)?;
                    }
                    let mut st = status_of(
                        &comm,
                        &DStatus {
                            source,
                            tag,
                            len: got,
                        },
                        got,
                    );
                    st.error = abi::ERR_TRUNCATE;
                    let f = Fail::new(
                        abi::ERR_TRUNCATE,
                        format!("message of {needed} bytes from rank {} (tag {tag}) truncated to a {got}-byte receive buffer", st.source),
                    );
                    Outcome::Done(st, Some(f))
                }
                Err(e) => {
                    let mut st = empty_status();
                    let f = Fail::from(e);
                    st.error = f.class;
                    Outcome::Done(st, Some(f))
                }
            };
            Ok(out)
        }
    }
}

/// Makes `MPI_Isendrecv`'s request from its receive, posted already, and
/// its send, posted by `send` (the receive first, so that two ranks that
/// exchange see each other's receive): `*out`. If the send fails, the
/// receive is cancelled and freed, so that a failed call leaves nothing
/// posted.
fn pair(
    l: &Lib,
    recv: Req,
    send: impl FnOnce(&Lib) -> Result<Req, Fail>,
    out: *mut Handle,
) -> Result<(), Fail> {
    let mut hr = l.add_req(recv);
    let send = match send(l) {
        Ok(q) => q,
        Err(e) => {
            // SAFETY: our own handle to the receive just posted.
            unsafe {
                PMPI_Cancel(&mut hr);
                PMPI_Wait(&mut hr, abi::STATUS_IGNORE as *mut abi::Status);
            }
            return Err(e);
        }
    };
    let hs = l.add_req(send);
    let h = l.add_req(Req::Pair(crate::state::Pair {
        send: hs,
        recv: hr,
        send_fail: None,
    }));
    // SAFETY: the program's request out-parameter, checked not null.
    unsafe { set(out, h, "request") }
}

/// A complete generalized request's status, from its query callback, and
/// the callback's failure.
fn query_greq(query: Option<crate::state::GreqQuery>, state: *mut c_void) -> Outcome {
    let mut st = empty_status();
    let Some(q) = query else {
        return Outcome::Done(st, None);
    };
    // SAFETY: the program's callback with its own state, as it gave them to
    // MPI_Grequest_start, and a status to fill.
    let rc = unsafe { q(state, &mut st) };
    if rc != abi::SUCCESS {
        let f = crate::state::code_failure(rc, "the generalized request's query callback");
        st.error = f.class;
        return Outcome::Done(st, Some(f));
    }
    Outcome::Done(st, None)
}

/// Calls a generalized request's free callback (it is being freed); its
/// failure.
pub(crate) fn free_greq(g: &crate::state::Greq) -> Option<Fail> {
    let f = g.free?;
    // SAFETY: the program's callback with its own state, as it gave them to
    // MPI_Grequest_start.
    let rc = unsafe { f(g.state) };
    (rc != abi::SUCCESS)
        .then(|| crate::state::code_failure(rc, "the generalized request's free callback"))
}

/// Keeps the result of the request at `idx`, which a test saw finish, for
/// the call that collects it: a persistent request stays itself (with the
/// result kept in it), any other becomes [`Req::Done`].
fn keep_result(l: &Lib, idx: usize, s: abi::Status, f: Option<Fail>) {
    if let Some(slot) = l.reqs.borrow_mut().get_mut(idx) {
        match slot {
            Req::P2p(p) => p.done = Some((s, f)),
            Req::PColl(p) => p.done = Some((s, f)),
            Req::Greq(g) => g.done = Some((s, f)),
            other => *other = Req::Done(s, f),
        }
    }
}

/// Completes requests freed while active, as they finish.
pub(crate) fn reap(l: &Lib) {
    if l.detached.get() == 0 {
        return;
    }
    let idx: Vec<usize> = l
        .reqs
        .borrow()
        .indices()
        .into_iter()
        .filter(|&i| matches!(l.reqs.borrow().get(i), Some(Req::P2p(p)) if p.detached))
        .collect();
    for i in idx {
        if let Ok(Outcome::Done(..)) = complete_index(l, i, Mode::Look) {
            l.reqs.borrow_mut().remove(i);
            l.detached.set(l.detached.get() - 1);
        }
    }
}

/// Waits for every request freed while active (`MPI_Finalize`).
pub(crate) fn drain(l: &Lib) {
    while l.detached.get() > 0 {
        l.job.progress();
        reap(l);
        std::thread::yield_now();
    }
}

fn add(l: &Lib, r: Req, out: *mut Handle) {
    let h = l.add_req(r);
    // SAFETY: the caller's request out-parameter.
    unsafe { put(out, h) };
}

fn wait(l: &Lib, r: *mut Handle, st: *mut abi::Status) -> Result<(), Fail> {
    if r.is_null() {
        return fail(abi::ERR_REQUEST, "null request pointer");
    }
    reap(l);
    match complete(l, r, Mode::Wait)? {
        Outcome::Done(s, None) => {
            // SAFETY: the caller's status.
            unsafe { out_status(st, &s) };
            Ok(())
        }
        Outcome::Done(s, Some(f)) => {
            if wants(st) {
                // SAFETY: the caller's status, checked.
                unsafe { *st = s };
            }
            Err(f)
        }
        Outcome::Pending => fail(abi::ERR_INTERN, "a waited request is still pending"),
    }
}

fn test(l: &Lib, r: *mut Handle, flag: *mut c_int, st: *mut abi::Status) -> Result<(), Fail> {
    if r.is_null() {
        return fail(abi::ERR_REQUEST, "null request pointer");
    }
    reap(l);
    match complete(l, r, Mode::Test)? {
        Outcome::Pending => {
            // SAFETY: the caller's flag.
            unsafe { set(flag, 0, "flag") }?;
            Ok(())
        }
        Outcome::Done(s, f) => {
            // SAFETY: the caller's flag and status.
            unsafe {
                set(flag, 1, "flag")?;
                if f.is_some() && wants(st) {
                    *st = s;
                } else {
                    out_status(st, &s);
                }
            }
            f.map_or(Ok(()), Err)
        }
    }
}

/// Whether request `h` is null or an inactive persistent request.
fn inactive(l: &Lib, h: Handle) -> bool {
    if h == abi::REQUEST_NULL {
        return true;
    }
    l.req_index(h)
        .and_then(|i| {
            l.reqs.borrow().get(i).map(|r| {
                matches!(r, Req::P2p(p) if p.persistent.is_some() && p.raw.is_none() && p.done.is_none())
                    || matches!(r, Req::PColl(p) if p.active == abi::REQUEST_NULL && p.done.is_none())
            })
        })
        .unwrap_or_default()
}

/// Writes status `i` of an array (unless `MPI_STATUSES_IGNORE`), with its
/// `MPI_ERROR` field.
unsafe fn put_status_at(sts: *mut abi::Status, i: usize, s: &abi::Status) {
    if wants(sts) {
        // SAFETY: the caller's array of at least i + 1 statuses.
        unsafe { *sts.add(i) = *s };
    }
}

fn waitall(l: &Lib, n: c_int, rs: *mut Handle, sts: *mut abi::Status) -> Result<(), Fail> {
    let n = count(n)?;
    reap(l);
    let mut first: Option<Fail> = None;
    let mut errs = 0;
    for i in 0..n {
        // SAFETY: the caller's array of n requests.
        let rp = unsafe { rs.add(i) };
        match complete(l, rp, Mode::Wait) {
            Ok(Outcome::Done(mut s, f)) => {
                s.error = f.as_ref().map_or(abi::SUCCESS, |f| f.class);
                // SAFETY: the caller's array of n statuses.
                unsafe { put_status_at(sts, i, &s) };
                if let Some(f) = f {
                    errs += 1;
                    first.get_or_insert(f);
                }
            }
            Ok(Outcome::Pending) => {}
            Err(f) => {
                let mut s = empty_status();
                s.error = f.class;
                // SAFETY: as above.
                unsafe { put_status_at(sts, i, &s) };
                errs += 1;
                first.get_or_insert(f);
            }
        }
    }
    match first {
        None => Ok(()),
        Some(f) if errs > 0 && wants(sts) => Err(Fail::new(abi::ERR_IN_STATUS, f.msg)),
        Some(f) => Err(f),
    }
}

/// Polls until some active request completes or none is active: its
/// index and outcome.
fn any(l: &Lib, n: usize, rs: *mut Handle, block: bool) -> Result<Option<(usize, Outcome)>, Fail> {
    let deadline = std::time::Instant::now() + l.job.config().timeout;
    let mut spins = 0u32;
    loop {
        l.job.progress();
        reap(l);
        let mut active = 0;
        for i in 0..n {
            // SAFETY: the caller's array of n requests.
            let rp = unsafe { rs.add(i) };
            // SAFETY: as above.
            let h = unsafe { *rp };
            if inactive(l, h) {
                continue;
            }
            active += 1;
            match complete(l, rp, Mode::Look)? {
                Outcome::Pending => {}
                done => return Ok(Some((i, done))),
            }
        }
        if active == 0 {
            return Ok(None);
        }
        if !block {
            return Ok(Some((usize::MAX, Outcome::Pending)));
        }
        spins += 1;
        if spins > 1000 {
            std::thread::yield_now();
            if std::time::Instant::now() > deadline {
                return fail(
                    abi::ERR_OTHER,
                    format!(
                        "no request of {active} completed within {:?} (TANDEM_TIMEOUT)",
                        l.job.config().timeout
                    ),
                );
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

fn waitany(
    l: &Lib,
    n: c_int,
    rs: *mut Handle,
    index: *mut c_int,
    st: *mut abi::Status,
    block: bool,
    flag: *mut c_int,
) -> Result<(), Fail> {
    let n = count(n)?;
    match any(l, n, rs, block)? {
        None => {
            // SAFETY: the caller's out-parameters.
            unsafe {
                set(index, abi::UNDEFINED, "index")?;
                put(flag, 1);
                out_status(st, &empty_status());
            }
            Ok(())
        }
        Some((_, Outcome::Pending)) => {
            // SAFETY: as above.
            unsafe {
                put(flag, 0);
                set(index, abi::UNDEFINED, "index")?;
            }
            Ok(())
        }
        Some((i, Outcome::Done(s, f))) => {
            // SAFETY: as above.
            unsafe {
                set(index, i as c_int, "index")?;
                put(flag, 1);
                if f.is_some() && wants(st) {
                    *st = s;
                } else {
                    out_status(st, &s);
                }
            }
            f.map_or(Ok(()), Err)
        }
    }
}

fn some(
    l: &Lib,
    n: c_int,
    rs: *mut Handle,
    outcount: *mut c_int,
    idx: *mut c_int,
    sts: *mut abi::Status,
    block: bool,
) -> Result<(), Fail> {
    let n = count(n)?;
    let mut got = 0usize;
    let mut first = None;
    let mut any_active = false;
    loop {
        l.job.progress();
        reap(l);
        for i in 0..n {
            // SAFETY: the caller's array of n requests.
            let rp = unsafe { rs.add(i) };
            // SAFETY: as above.
            if inactive(l, unsafe { *rp }) {
                continue;
            }
            any_active = true;
            if let Outcome::Done(mut s, f) = complete(l, rp, Mode::Look)? {
                s.error = f.as_ref().map_or(abi::SUCCESS, |f| f.class);
                // SAFETY: the caller's arrays of n entries.
                unsafe {
                    *idx.add(got) = i as c_int;
                    put_status_at(sts, got, &s);
                }
                got += 1;
                if let Some(f) = f {
                    first.get_or_insert(f);
                }
            }
        }
        if !any_active {
            // SAFETY: the caller's out-parameter.
            unsafe { set(outcount, abi::UNDEFINED, "outcount") }?;
            return Ok(());
        }
        if got > 0 || !block {
            break;
        }
        // Nothing finished yet: block in waitany's loop for the first.
        if let Some((i, Outcome::Done(mut s, f))) = any(l, n, rs, true)? {
            s.error = f.as_ref().map_or(abi::SUCCESS, |f| f.class);
            // SAFETY: as above.
            unsafe {
                *idx.add(got) = i as c_int;
                put_status_at(sts, got, &s);
            }
            got += 1;
            if let Some(f) = f {
                first.get_or_insert(f);
            }
            break;
        }
    }
    // SAFETY: the caller's out-parameter.
    unsafe { set(outcount, got as c_int, "outcount") }?;
    match first {
        None => Ok(()),
        Some(f) => Err(Fail::new(abi::ERR_IN_STATUS, f.msg)),
    }
}

fn testall(
    l: &Lib,
    n: c_int,
    rs: *mut Handle,
    flag: *mut c_int,
    sts: *mut abi::Status,
) -> Result<(), Fail> {
    let n = count(n)?;
    l.job.progress();
    reap(l);
    // All or nothing: look first, without collecting.
    for i in 0..n {
        // SAFETY: the caller's array of n requests.
        let h = unsafe { *rs.add(i) };
        if inactive(l, h) {
            continue;
        }
        let idx = l
            .req_index(h)
            .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
        let done = match l.reqs.borrow().get(idx) {
            Some(Req::P2p(p)) => {
                p.done.is_some() || p.raw.as_ref().is_none_or(|r| p.comm.p2p.is_done_raw(r))
            }
            Some(Req::Done(..)) => true,
            Some(Req::PColl(p)) => p.done.is_some(),
            Some(Req::Greq(g)) => g.done.is_some() || g.complete,
            Some(Req::Coll { .. } | Req::Agree(_) | Req::Pair(_)) => false,
            None => return fail(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")),
        };
        if !done {
            // A collective or an agreement is only known done by testing
            // it: do so.
            let is_coll = matches!(
                l.reqs.borrow().get(idx),
                Some(Req::Coll { .. } | Req::Agree(_) | Req::PColl(_) | Req::Pair(_))
            );
            if is_coll {
                if let Outcome::Done(s, f) = complete_index(l, idx, Mode::Test)? {
                    // Keep its result, failure and all, for the collection
                    // below.
                    keep_result(l, idx, s, f);
                    continue;
                }
            }
            // SAFETY: the caller's flag.
            unsafe { set(flag, 0, "flag") }?;
            return Ok(());
        }
    }
    // SAFETY: the caller's flag.
    unsafe { set(flag, 1, "flag") }?;
    waitall(l, n as c_int, rs, sts)
}

fn start(l: &Lib, rp: *mut Handle) -> Result<(), Fail> {
    // SAFETY: the caller's request pointer.
    let h = unsafe { *rp };
    let idx = l
        .req_index(h)
        .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
    let pcoll = match l.reqs.borrow().get(idx) {
        Some(Req::PColl(p)) => {
            if p.active != abi::REQUEST_NULL || p.done.is_some() {
                return fail(abi::ERR_REQUEST, "MPI_Start on an active request");
            }
            Some(p.start.clone())
        }
        _ => None,
    };
    if let Some(start) = pcoll {
        let mut inner = abi::REQUEST_NULL;
        let r = start(l, &mut inner);
        if r != abi::SUCCESS {
            return Err(crate::state::code_failure(
                r,
                "starting the persistent collective",
            ));
        }
        if let Some(Req::PColl(p)) = l.reqs.borrow_mut().get_mut(idx) {
            p.active = inner;
        }
        return Ok(());
    }
    let (comm, args, recv) = match l.reqs.borrow().get(idx) {
        Some(Req::P2p(p)) if p.persistent.is_some() => {
            if p.raw.is_some() || p.done.is_some() {
                return fail(abi::ERR_REQUEST, "MPI_Start on an active request");
            }
            (p.comm.clone(), p.persistent.expect("checked"), p.recv)
        }
        _ => {
            return fail(
                abi::ERR_REQUEST,
                format!("request {h:#x} is not persistent"),
            )
        }
    };
    let r = if recv {
        irecv(
            l,
            args.buf,
            args.count,
            args.dt,
            args.peer,
            args.tag,
            comm,
            Some(args),
        )?
    } else {
        isend(
            l,
            args.buf,
            args.count,
            args.dt,
            args.peer,
            args.tag,
            comm,
            args.sync,
            Some(args),
        )?
    };
    let mut r = r;
    if let Some(slot) = l.reqs.borrow_mut().get_mut(idx) {
        // The request keeps its datatype for as long as it lives.
        if let (Req::P2p(old), Req::P2p(new)) = (&mut *slot, &mut r) {
            std::mem::swap(&mut old.hold, &mut new.hold);
        }
        *slot = r;
    }
    Ok(())
}

fn persistent(
    l: &Lib,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    recv: bool,
    sync: bool,
    out: *mut Handle,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    // Validate now, as the calls that start it would.
    if recv {
        in_view(l, buf, n, dt)?;
        recv_tag(tag)?;
        source(&c, peer)?;
    } else {
        out_view(l, buf, n, dt)?;
        send_tag(tag)?;
        dest(&c, peer)?;
    }
    let args = Persistent {
        buf,
        count: n,
        dt,
        peer,
        tag,
        sync,
    };
    add(
        l,
        Req::P2p(P2pReq {
            comm: c,
            raw: None,
            recv,
            stage: None,
            persistent: Some(args),
            hold: l.types.borrow().hold(dt),
            done: None,
            detached: false,
            cancel: false,
            null_peer: peer == abi::PROC_NULL,
        }),
        out,
    );
    Ok(())
}

fn probe(
    l: &Lib,
    from: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    st: *mut abi::Status,
    block: bool,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let tag = recv_tag(tag)?;
    let Some(from) = source(&c, from)? else {
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(flag, 1);
            out_status(st, &proc_null_status());
        }
        return Ok(());
    };
    let got = if block {
        Some(c.p2p.probe(from, tag)?)
    } else {
        c.p2p.iprobe(from, tag)?
    };
    // SAFETY: the caller's out-parameters.
    unsafe {
        put(flag, got.is_some() as c_int);
        if let Some(s) = got {
            out_status(st, &status_of(&c, &s, s.len));
        }
    }
    Ok(())
}

fn sendrecv(
    l: &Lib,
    sbuf: *const c_void,
    sn: c_int,
    sdt: Handle,
    to: c_int,
    stag: c_int,
    rbuf: *mut c_void,
    rn: c_int,
    rdt: Handle,
    from: c_int,
    rtag: c_int,
    comm: Handle,
    st: *mut abi::Status,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let out = out_view(l, sbuf, sn, sdt)?;
    let mut inb = in_view(l, rbuf, rn, rdt)?;
    let (stag, rtag) = (send_tag(stag)?, recv_tag(rtag)?);
    let (to, from) = (dest(&c, to)?, source(&c, from)?);
    match (to, from) {
        (None, None) => {
            // SAFETY: the caller's status.
            unsafe { out_status(st, &proc_null_status()) };
            Ok(())
        }
        (Some(to), None) => {
            c.p2p.send(out.bytes(), to, stag)?;
            // SAFETY: the caller's status.
            unsafe { out_status(st, &proc_null_status()) };
            Ok(())
        }
        (None, Some(from)) => {
            let r = c.p2p.recv(inb.bytes(), from, rtag);
            received(l, &c, r, inb.stage.as_ref(), st)
        }
        (Some(to), Some(from)) => {
            let stage = inb.stage.take();
            let r = c
                .p2p
                .sendrecv(out.bytes(), to, stag, inb.bytes(), from, rtag);
            received(l, &c, r, stage.as_ref(), st)
        }
    }
}

fn get_count(
    l: &Lib,
    st: *const abi::Status,
    dt: Handle,
    out: *mut c_int,
    elements: bool,
) -> Result<(), Fail> {
    if st.is_null() || st as usize == abi::STATUS_IGNORE {
        return fail(abi::ERR_ARG, "MPI_STATUS_IGNORE has no count");
    }
    // SAFETY: the caller's status.
    let bytes = unsafe { (*st).count() } as usize;
    let types = l.types.borrow();
    let info = types.info(dt).map_err(|c| type_fail(c, dt))?;
    let n = if elements {
        types.elements(dt, bytes).map_err(|c| type_fail(c, dt))?
    } else if info.size == 0 {
        // No count of empty elements makes a nonzero number of bytes.
        if bytes == 0 {
            0
        } else {
            abi::UNDEFINED as i64
        }
    } else if bytes % info.size != 0 {
        abi::UNDEFINED as i64
    } else {
        (bytes / info.size) as i64
    };
    let n = if n > c_int::MAX as i64 {
        abi::UNDEFINED
    } else {
        n as c_int
    };
    // SAFETY: the caller's out-parameter.
    unsafe { set(out, n, "count") }?;
    Ok(())
}

export! {
    fn MPI_Send, PMPI_Send(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Send", |l| send(l, buf, n, dt, to, tag, comm, false))
    }

    fn MPI_Rsend, PMPI_Rsend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Rsend", |l| send(l, buf, n, dt, to, tag, comm, false))
    }

    fn MPI_Ssend, PMPI_Ssend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Ssend", |l| send(l, buf, n, dt, to, tag, comm, true))
    }

    fn MPI_Bsend, PMPI_Bsend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle) -> c_int {
        // Buffered: the data is copied and sent in the background, so the
        // call returns whatever the receiver does.
        run(comm, "MPI_Bsend", |l| {
            let c = l.any_comm(comm)?;
            let out = out_view(l, buf, n, dt)?;
            // Sent as bytes: a count of them must fit a C int.
            let len = out.bytes().len();
            let bytes = c_int::try_from(len).map_err(|_| {
                Fail::new(abi::ERR_COUNT, format!("MPI_Bsend of {len} bytes: more than a buffered send carries (2 GiB)"))
            })?;
            let copy = out.bytes().to_vec();
            let r = isend(l, copy.as_ptr().cast(), bytes, abi::BYTE, to, tag, c, false, None)?;
            let r = match r {
                Req::P2p(mut p) => {
                    p.stage = Some(Unpack { staged: copy, dst: std::ptr::null_mut(), dt: abi::BYTE, count: 0, hold: TypeHold::empty(), cap: usize::MAX });
                    p.detached = true;
                    Req::P2p(p)
                }
                other => return { drop(other); Ok(()) },
            };
            l.add_req(r);
            l.detached.set(l.detached.get() + 1);
            Ok(())
        })
    }

    fn MPI_Recv, PMPI_Recv(buf: *mut c_void, n: c_int, dt: Handle, from: c_int, tag: c_int, comm: Handle, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Recv", |l| recv(l, buf, n, dt, from, tag, comm, st))
    }

    fn MPI_Isend, PMPI_Isend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Isend", |l| {
            let q = isend(l, buf, n, dt, to, tag, l.any_comm(comm)?, false, None)?;
            add(l, q, r);
            Ok(())
        })
    }

    fn MPI_Irsend, PMPI_Irsend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        PMPI_Isend(buf, n, dt, to, tag, comm, r)
    }

    fn MPI_Ibsend, PMPI_Ibsend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        PMPI_Isend(buf, n, dt, to, tag, comm, r)
    }

    fn MPI_Issend, PMPI_Issend(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Issend", |l| {
            let q = isend(l, buf, n, dt, to, tag, l.any_comm(comm)?, true, None)?;
            add(l, q, r);
            Ok(())
        })
    }

    fn MPI_Irecv, PMPI_Irecv(buf: *mut c_void, n: c_int, dt: Handle, from: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Irecv", |l| {
            let q = irecv(l, buf, n, dt, from, tag, l.any_comm(comm)?, None)?;
            add(l, q, r);
            Ok(())
        })
    }

    fn MPI_Sendrecv, PMPI_Sendrecv(sbuf: *const c_void, sn: c_int, sdt: Handle, to: c_int, stag: c_int, rbuf: *mut c_void, rn: c_int, rdt: Handle, from: c_int, rtag: c_int, comm: Handle, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Sendrecv", |l| sendrecv(l, sbuf, sn, sdt, to, stag, rbuf, rn, rdt, from, rtag, comm, st))
    }

    fn MPI_Sendrecv_replace, PMPI_Sendrecv_replace(buf: *mut c_void, n: c_int, dt: Handle, to: c_int, stag: c_int, from: c_int, rtag: c_int, comm: Handle, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Sendrecv_replace", |l| {
            let copy = out_view(l, buf, n, dt)?.bytes().to_vec();
            let c = l.any_comm(comm)?;
            let (stag, rtag) = (send_tag(stag)?, recv_tag(rtag)?);
            let (to, from) = (dest(&c, to)?, source(&c, from)?);
            let mut inb = in_view(l, buf, n, dt)?;
            match (to, from) {
                (None, None) => {
                    out_status(st, &proc_null_status());
                    Ok(())
                }
                (Some(to), None) => {
                    c.p2p.send(&copy, to, stag)?;
                    out_status(st, &proc_null_status());
                    Ok(())
                }
                (None, Some(from)) => {
                    let r = c.p2p.recv(inb.bytes(), from, rtag);
                    received(l, &c, r, inb.stage.as_ref(), st)
                }
                (Some(to), Some(from)) => {
                    let stage = inb.stage.take();
                    let r = c.p2p.sendrecv(&copy, to, stag, inb.bytes(), from, rtag);
                    received(l, &c, r, stage.as_ref(), st)
                }
            }
        })
    }

    fn MPI_Probe, PMPI_Probe(from: c_int, tag: c_int, comm: Handle, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Probe", |l| probe(l, from, tag, comm, std::ptr::null_mut(), st, true))
    }

    fn MPI_Iprobe, PMPI_Iprobe(from: c_int, tag: c_int, comm: Handle, flag: *mut c_int, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Iprobe", |l| { crate::need(flag, "flag")?; probe(l, from, tag, comm, flag, st, false) })
    }

    fn MPI_Wait, PMPI_Wait(r: *mut Handle, st: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Wait", |l| wait(l, r, st))
    }

    fn MPI_Test, PMPI_Test(r: *mut Handle, flag: *mut c_int, st: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Test", |l| { crate::need(flag, "flag")?; test(l, r, flag, st) })
    }

    fn MPI_Waitall, PMPI_Waitall(n: c_int, rs: *mut Handle, sts: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Waitall", |l| waitall(l, n, rs, sts))
    }

    fn MPI_Testall, PMPI_Testall(n: c_int, rs: *mut Handle, flag: *mut c_int, sts: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Testall", |l| { crate::need(flag, "flag")?; testall(l, n, rs, flag, sts) })
    }

    fn MPI_Waitany, PMPI_Waitany(n: c_int, rs: *mut Handle, index: *mut c_int, st: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Waitany", |l| { crate::need(index, "index")?; waitany(l, n, rs, index, st, true, std::ptr::null_mut()) })
    }

    fn MPI_Testany, PMPI_Testany(n: c_int, rs: *mut Handle, index: *mut c_int, flag: *mut c_int, st: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Testany", |l| { crate::need(index, "index")?; crate::need(flag, "flag")?; waitany(l, n, rs, index, st, false, flag) })
    }

    fn MPI_Waitsome, PMPI_Waitsome(n: c_int, rs: *mut Handle, outcount: *mut c_int, idx: *mut c_int, sts: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Waitsome", |l| { crate::need(outcount, "outcount")?; some(l, n, rs, outcount, idx, sts, true) })
    }

    fn MPI_Testsome, PMPI_Testsome(n: c_int, rs: *mut Handle, outcount: *mut c_int, idx: *mut c_int, sts: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Testsome", |l| { crate::need(outcount, "outcount")?; some(l, n, rs, outcount, idx, sts, false) })
    }

    fn MPI_Request_free, PMPI_Request_free(r: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Request_free", |l| {
            if r.is_null() {
                return fail(abi::ERR_REQUEST, "null request pointer");
            }
            let h = *r;
            let idx = l
                .req_index(h)
                .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
            let parts = match l.reqs.borrow().get(idx) {
                Some(Req::Pair(p)) => Some((p.send, p.recv)),
                _ => None,
            };
            if let Some((mut send, mut recv)) = parts {
                // Its parts go on, each freed as it finishes.
                l.reqs.borrow_mut().remove(idx);
                *r = abi::REQUEST_NULL;
                for part in [&mut send, &mut recv] {
                    if *part != abi::REQUEST_NULL {
                        crate::extra::code_to_fail(PMPI_Request_free(part), "freeing MPI_Isendrecv's parts")?;
                    }
                }
                return Ok(());
            }
            let active = match l.reqs.borrow_mut().get_mut(idx) {
                Some(Req::P2p(p)) => {
                    let a = p.raw.is_some();
                    if a {
                        p.detached = true;
                        p.persistent = None;
                    }
                    a
                }
                Some(Req::Coll { raw, .. }) => raw.is_some(),
                Some(Req::Agree(a)) => a.op.is_some(),
                Some(Req::PColl(p)) => p.active != abi::REQUEST_NULL,
                // Freed above, part by part.
                Some(Req::Pair(_)) => true,
                Some(Req::Greq(g)) => {
                    if !g.complete {
                        // Freed at MPI_Grequest_complete, which the
                        // program may still call with its copy of the
                        // handle.
                        g.detached = true;
                        *r = abi::REQUEST_NULL;
                        return Ok(());
                    }
                    false
                }
                Some(Req::Done(..)) => false,
                None => return fail(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")),
            };
            // A persistent collective's own communicator goes with it.
            let own = match l.reqs.borrow().get(idx) {
                Some(Req::PColl(p)) => Some(p.comm),
                _ => None,
            };
            if let Some(mut c) = own {
                if active {
                    complete_index(l, idx, Mode::Wait)?;
                }
                l.reqs.borrow_mut().remove(idx);
                *r = abi::REQUEST_NULL;
                return crate::extra::code_to_fail(
                    crate::comm::PMPI_Comm_free(&mut c),
                    "freeing the persistent collective's communicator",
                );
            }
            if active {
                if matches!(
                    l.reqs.borrow().get(idx),
                    Some(Req::Coll { .. } | Req::Agree(_))
                ) {
                    // A collective or an agreement must finish (the other
                    // ranks count on this one's part): complete it now.
                    complete_index(l, idx, Mode::Wait)?;
                    l.reqs.borrow_mut().remove(idx);
                } else {
                    l.detached.set(l.detached.get() + 1);
                }
            } else {
                let gone = l.reqs.borrow_mut().remove(idx);
                *r = abi::REQUEST_NULL;
                if let Some(Req::Greq(g)) = gone {
                    if let Some(e) = free_greq(&g) {
                        return Err(e);
                    }
                }
            }
            *r = abi::REQUEST_NULL;
            Ok(())
        })
    }

    fn MPI_Request_get_status, PMPI_Request_get_status(h: Handle, flag: *mut c_int, st: *mut abi::Status) -> c_int {
        run(abi::COMM_WORLD, "MPI_Request_get_status", |l| {
            if inactive(l, h) {
                set(flag, 1, "flag")?;
                out_status(st, &empty_status());
                return Ok(());
            }
            l.job.progress();
            let idx = l
                .req_index(h)
                .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
            let done = match l.reqs.borrow().get(idx) {
                Some(Req::P2p(p)) => p.done.is_some() || p.raw.as_ref().is_none_or(|r| p.comm.p2p.is_done_raw(r)),
                Some(Req::Done(..)) => true,
                // Known done only by testing it: the test below.
                Some(Req::Agree(_) | Req::Coll { .. } | Req::PColl(_) | Req::Pair(_)) => true,
                Some(Req::Greq(g)) => g.done.is_some() || g.complete,
                None => return fail(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")),
            };
            if !done {
                set(flag, 0, "flag")?;
                return Ok(());
            }
            // Complete it and keep the result for the later wait/test.
            match complete_index(l, idx, Mode::Look)? {
                Outcome::Done(s, f) => {
                    set(flag, 1, "flag")?;
                    out_status(st, &s);
                    // The later wait or test collects it with the same
                    // failure this call returns.
                    let r = f.clone().map_or(Ok(()), Err);
                    keep_result(l, idx, s, f);
                    r
                }
                Outcome::Pending => {
                    set(flag, 0, "flag")?;
                    Ok(())
                }
            }
        })
    }

    fn MPI_Cancel, PMPI_Cancel(r: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Cancel", |l| {
            if r.is_null() {
                return fail(abi::ERR_REQUEST, "null request pointer");
            }
            let h = *r;
            let idx = l
                .req_index(h)
                .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
            if let Some(Req::P2p(p)) = l.reqs.borrow_mut().get_mut(idx) {
                if let Some(raw) = &p.raw {
                    // Sends cannot be cancelled once posted (tandem may have
                    // delivered them): they complete normally, and
                    // MPI_Test_cancelled reports false.
                    p.cancel = p.comm.p2p.cancel_raw(raw);
                }
            }
            let pair_recv = match l.reqs.borrow().get(idx) {
                Some(Req::Pair(p)) => Some(p.recv),
                _ => None,
            };
            if let Some(mut recv) = pair_recv {
                // MPI_Isendrecv's receive may be cancelled; its send, like
                // any, completes.
                if recv != abi::REQUEST_NULL {
                    crate::extra::code_to_fail(PMPI_Cancel(&mut recv), "cancelling MPI_Isendrecv's receive")?;
                }
                return Ok(());
            }
            let greq = match l.reqs.borrow().get(idx) {
                Some(Req::Greq(g)) => Some((g.cancel, g.state, g.complete)),
                _ => None,
            };
            if let Some((Some(cancel), state, complete)) = greq {
                // SAFETY: the program's callback with its own state, as it
                // gave them to MPI_Grequest_start.
                let rc = cancel(state, complete as c_int);
                if rc != abi::SUCCESS {
                    return Err(crate::state::code_failure(rc, "the generalized request's cancel callback"));
                }
            }
            Ok(())
        })
    }

    fn MPI_Isendrecv, PMPI_Isendrecv(sbuf: *const c_void, sn: c_int, sdt: Handle, to: c_int, stag: c_int, rbuf: *mut c_void, rn: c_int, rdt: Handle, from: c_int, rtag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Isendrecv", |l| {
            crate::need(r, "request")?;
            let c = l.any_comm(comm)?;
            let recv = irecv(l, rbuf, rn, rdt, from, rtag, c.clone(), None)?;
            let send = |l: &Lib| isend(l, sbuf, sn, sdt, to, stag, c, false, None);
            pair(l, recv, send, r)
        })
    }

    fn MPI_Isendrecv_replace, PMPI_Isendrecv_replace(buf: *mut c_void, n: c_int, dt: Handle, to: c_int, stag: c_int, from: c_int, rtag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Isendrecv_replace", |l| {
            crate::need(r, "request")?;
            let c = l.any_comm(comm)?;
            // What is sent is a packed copy, made now, which the send's
            // request keeps (as MPI_Bsend's does) while the receive fills
            // the buffer.
            let copy = out_view(l, buf, n, dt)?.bytes().to_vec();
            let len = c_int::try_from(copy.len()).map_err(|_| {
                Fail::new(abi::ERR_COUNT, format!("MPI_Isendrecv_replace of {} bytes: more than a C int counts", copy.len()))
            })?;
            let recv = irecv(l, buf, n, dt, from, rtag, c.clone(), None)?;
            let send = move |l: &Lib| {
                let mut q = isend(l, copy.as_ptr().cast(), len, abi::BYTE, to, stag, c, false, None)?;
                if let Req::P2p(p) = &mut q {
                    p.stage = Some(Unpack { staged: copy, dst: std::ptr::null_mut(), dt: abi::BYTE, count: 0, hold: TypeHold::empty(), cap: usize::MAX });
                }
                Ok(q)
            };
            pair(l, recv, send, r)
        })
    }

    fn MPI_Grequest_start, PMPI_Grequest_start(query: Option<GreqQuery>, free: Option<GreqFree>, cancel: Option<GreqCancel>, state: *mut c_void, r: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Grequest_start", |l| {
            crate::need(r, "request")?;
            // C gives no null callback a meaning (MPICH refuses them too).
            if query.is_none() || free.is_none() || cancel.is_none() {
                return fail(abi::ERR_ARG, "a null callback (query_fn, free_fn and cancel_fn are required)");
            }
            let h = l.add_req(Req::Greq(Box::new(Greq {
                query,
                free,
                cancel,
                state,
                complete: false,
                detached: false,
                done: None,
            })));
            set(r, h, "request")?;
            Ok(())
        })
    }

    fn MPI_Grequest_complete, PMPI_Grequest_complete(req: Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Grequest_complete", |l| {
            let h = req;
            let idx = l
                .req_index(h)
                .ok_or_else(|| Fail::new(abi::ERR_REQUEST, format!("invalid request handle {h:#x}")))?;
            let detached = match l.reqs.borrow_mut().get_mut(idx) {
                Some(Req::Greq(g)) => {
                    if g.complete {
                        return fail(abi::ERR_REQUEST, "MPI_Grequest_complete called twice");
                    }
                    g.complete = true;
                    g.detached
                }
                _ => return fail(abi::ERR_REQUEST, format!("request {h:#x} is not a generalized request")),
            };
            if detached {
                // MPI_Request_free came first: it goes now (out of the
                // table before its callback, which may call MPI).
                let gone = l.reqs.borrow_mut().remove(idx);
                if let Some(Req::Greq(g)) = gone {
                    if let Some(e) = free_greq(&g) {
                        return Err(e);
                    }
                }
            }
            Ok(())
        })
    }

    fn MPI_Test_cancelled, PMPI_Test_cancelled(st: *const abi::Status, flag: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Test_cancelled", |_| {
            if st.is_null() || st as usize == abi::STATUS_IGNORE {
                return fail(abi::ERR_ARG, "MPI_STATUS_IGNORE has no cancelled flag");
            }
            set(flag, (*st).cancelled() as c_int, "flag")?;
            Ok(())
        })
    }

    fn MPI_Get_count, PMPI_Get_count(st: *const abi::Status, dt: Handle, out: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Get_count", |l| get_count(l, st, dt, out, false))
    }

    fn MPI_Get_elements, PMPI_Get_elements(st: *const abi::Status, dt: Handle, out: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Get_elements", |l| get_count(l, st, dt, out, true))
    }

    fn MPI_Get_elements_x, PMPI_Get_elements_x(st: *const abi::Status, dt: Handle, out: *mut abi::Count) -> c_int {
        run(abi::COMM_WORLD, "MPI_Get_elements_x", |l| {
            if st.is_null() || st as usize == abi::STATUS_IGNORE {
                return fail(abi::ERR_ARG, "MPI_STATUS_IGNORE has no count");
            }
            let bytes = (*st).count() as usize;
            let n = l.types.borrow().elements(dt, bytes).map_err(|c| type_fail(c, dt))?;
            set(out, n, "count")?;
            Ok(())
        })
    }

    fn MPI_Status_set_elements, PMPI_Status_set_elements(st: *mut abi::Status, dt: Handle, n: c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Status_set_elements", |l| {
            let size = l.types.borrow().info(dt).map_err(|c| type_fail(c, dt))?.size;
            if wants(st) {
                (*st).set_count(n as i64 * size as i64);
            }
            Ok(())
        })
    }

    fn MPI_Status_set_cancelled, PMPI_Status_set_cancelled(st: *mut abi::Status, flag: c_int) -> c_int {
        if wants(st) {
            (*st).set_cancelled(flag != 0);
        }
        abi::SUCCESS
    }

    fn MPI_Send_init, PMPI_Send_init(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Send_init", |l| persistent(l, buf.cast_mut(), n, dt, to, tag, comm, false, false, r))
    }

    fn MPI_Bsend_init, PMPI_Bsend_init(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        PMPI_Send_init(buf, n, dt, to, tag, comm, r)
    }

    fn MPI_Rsend_init, PMPI_Rsend_init(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        PMPI_Send_init(buf, n, dt, to, tag, comm, r)
    }

    fn MPI_Ssend_init, PMPI_Ssend_init(buf: *const c_void, n: c_int, dt: Handle, to: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Ssend_init", |l| persistent(l, buf.cast_mut(), n, dt, to, tag, comm, false, true, r))
    }

    fn MPI_Recv_init, PMPI_Recv_init(buf: *mut c_void, n: c_int, dt: Handle, from: c_int, tag: c_int, comm: Handle, r: *mut Handle) -> c_int {
        run(comm, "MPI_Recv_init", |l| persistent(l, buf, n, dt, from, tag, comm, true, false, r))
    }

    fn MPI_Start, PMPI_Start(r: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Start", |l| {
            if r.is_null() {
                return fail(abi::ERR_REQUEST, "null request pointer");
            }
            start(l, r)
        })
    }

    fn MPI_Startall, PMPI_Startall(n: c_int, rs: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Startall", |l| {
            for i in 0..count(n)? {
                start(l, rs.add(i))?;
            }
            Ok(())
        })
    }

    fn MPI_Buffer_attach, PMPI_Buffer_attach(buf: *mut c_void, size: c_int) -> c_int {
        // MPI_Bsend copies into memory of its own; the program's buffer is
        // kept only to be handed back by MPI_Buffer_detach.
        run(abi::COMM_WORLD, "MPI_Buffer_attach", |l| {
            if l.extra.buffer.get().0 != 0 {
                return fail(abi::ERR_BUFFER, "a buffer is attached already");
            }
            count(size)?;
            l.extra.buffer.set((buf as usize, size));
            Ok(())
        })
    }

    fn MPI_Buffer_detach, PMPI_Buffer_detach(buf: *mut c_void, size: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Buffer_detach", |l| {
            // MPI: detaching waits for the buffered messages to go.
            drain(l);
            let (b, n) = l.extra.buffer.replace((0, 0));
            set(buf.cast::<*mut c_void>(), b as *mut c_void, "buf")?;
            set(size, n, "size")?;
            Ok(())
        })
    }
}
