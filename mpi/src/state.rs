//! The library's state: the job's communicators, requests, datatypes,
//! operations and attribute keys, behind MPICH's integer handles.
//!
//! The state lives in one process-wide slot, created by `MPI_Init` and
//! dropped by `MPI_Finalize`. Each table has its own `RefCell`, and no call
//! holds a borrow while it runs a user callback (a reduction, an attribute
//! delete function, an error handler), so a callback may call the library
//! again. The library provides `MPI_THREAD_SERIALIZED`: calls may come from
//! any thread, one at a time, which is what the cells (not `Sync`) need.

use crate::abi::{self, Handle};
use crate::datatype::{TypeHold, Types};
use crate::op::Ops;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::ffi::{c_int, c_void};
use std::rc::Rc;
use tandem_driver::{Comm, Error, RawCollRequest, RawRequest};

/// The error handler of a communicator the program never gave one:
/// `MPI_ERRORS_ARE_FATAL` as `MPI_Comm_get_errhandler` reports it, but an
/// error raised on it goes to `MPI_COMM_WORLD`'s handler as it is at that
/// moment — MPICH's rule, which programs built for MPICH count on (they set
/// `MPI_ERRORS_RETURN` on the world after making their communicators).
/// Not a valid handle value.
pub const DEFAULT_ERRHANDLER: Handle = 0;

/// The handler an error on `c` goes to (see [`DEFAULT_ERRHANDLER`]).
pub fn errhandler_of(l: &Lib, c: &CommObj) -> Handle {
    let h = c.errhandler.get();
    if h != DEFAULT_ERRHANDLER {
        return h;
    }
    world_errhandler(l)
}

/// `MPI_COMM_WORLD`'s handler, resolved (fatal until the program sets one).
pub fn world_errhandler(l: &Lib) -> Handle {
    match l.any_comm(abi::COMM_WORLD).map(|w| w.errhandler.get()) {
        Ok(h) if h != DEFAULT_ERRHANDLER => h,
        _ => abi::ERRORS_ARE_FATAL,
    }
}

/// A communicator of the MPI layer: a group of the job's ranks and two
/// contexts (point-to-point, and the MPI layer's own collectives).
pub struct CommObj {
    /// Point-to-point traffic (and tandem's collectives on its upper
    /// context).
    pub p2p: Comm,
    /// The MPI layer's collective algorithms' traffic.
    pub coll: Comm,
    /// The job ranks of this communicator's members, in its rank order.
    pub group: Rc<[u32]>,
    /// Job rank to this communicator's rank (-1: not a member).
    pub inverse: Rc<[i32]>,
    /// This rank's rank in it.
    pub rank: usize,
    /// The contexts it holds (given back when it is freed).
    pub contexts: [u16; 2],
    /// Whether the members are the whole job in job order: then tandem's
    /// own collectives run on `p2p`.
    pub whole: bool,
    /// Whether tandem's own collectives serve it: on `p2p` where it is
    /// [`whole`](Self::whole), else on the driver communicator of its
    /// members ([`members_comm`](Self::members_comm)). Not for a view of
    /// another communicator's contexts (`MPI_Comm_create_group`'s), nor an
    /// intercommunicator.
    pub engine: bool,
    /// Its error handler, [`DEFAULT_ERRHANDLER`] until the program sets
    /// one (here or on the communicator it was made from).
    pub errhandler: Cell<Handle>,
    /// Cached attributes: (key, value).
    pub attrs: RefCell<Vec<(c_int, *mut c_void)>>,
    /// Its name (`MPI_Comm_set_name`).
    pub name: RefCell<String>,
    /// The driver's communicator of its members on its point-to-point
    /// context ([`members_comm`](Self::members_comm)), for ULFM's
    /// agreement and shrink (it keeps the count of agreements, which their
    /// messages are tagged with) and tandem's collectives on a subgroup.
    pub ft: RefCell<Option<Comm>>,
    /// The failed members acknowledged by `MPIX_Comm_failure_ack` (job
    /// ranks, in this communicator's order).
    pub acked: RefCell<Rc<[u32]>>,
    /// Its virtual topology (`MPI_Cart_create`, `MPI_Graph_create`,
    /// `MPI_Dist_graph_create*`; kept by `MPI_Comm_dup`).
    pub topo: RefCell<Option<Rc<crate::topo::Topo>>>,
    /// An intercommunicator's remote group (`None`: an intracommunicator).
    /// `group`, `rank` and `size()` are then the local group's, as
    /// `MPI_Comm_size` answers; point-to-point ranks name the remote group.
    pub remote: Option<Remote>,
}

/// The driver communicator of [`CommObj::tc`].
pub enum Tc<'c> {
    /// The communicator's `p2p` (the whole job in job order).
    Whole(&'c Comm),
    /// The driver's communicator of its members.
    Members(std::cell::Ref<'c, Comm>),
}

impl std::ops::Deref for Tc<'_> {
    type Target = Comm;

    fn deref(&self) -> &Comm {
        match self {
            Tc::Whole(c) => c,
            Tc::Members(c) => c,
        }
    }
}

/// The other group of an intercommunicator.
pub struct Remote {
    /// Its members' job ranks, in its rank order.
    pub group: Rc<[u32]>,
    /// Job rank to its rank (-1: not in it).
    pub inverse: Rc<[i32]>,
}

impl Remote {
    /// The remote group of job ranks `group`, for a job of `n` ranks.
    pub fn new(group: Rc<[u32]>, n: usize) -> Self {
        let mut inverse = vec![-1i32; n];
        for (i, &g) in group.iter().enumerate() {
            inverse[g as usize] = i as i32;
        }
        Self {
            group,
            inverse: Rc::from(inverse),
        }
    }
}

impl CommObj {
    /// The driver's communicator of the members (`ft`), made at the first
    /// use: on the point-to-point context, whose upper half carries
    /// tandem's collectives.
    ///
    /// # Errors
    /// The driver's refusal (not expected: the members and the context are
    /// this communicator's own).
    pub fn members_comm(&self) -> Result<std::cell::Ref<'_, Comm>, Error> {
        if self.ft.borrow().is_none() {
            let ranks: Vec<usize> = self.group.iter().map(|&g| g as usize).collect();
            let f = self.p2p.subset_with_context(&ranks, self.contexts[0])?;
            *self.ft.borrow_mut() = Some(f);
        }
        Ok(std::cell::Ref::map(self.ft.borrow(), |f| {
            f.as_ref().expect("made above")
        }))
    }

    /// The driver communicator that runs tandem's own collectives for it
    /// ([`engine`](Self::engine)); `None`: the MPI layer's algorithms.
    ///
    /// # Errors
    /// As [`members_comm`](Self::members_comm).
    pub fn tc(&self) -> Result<Option<Tc<'_>>, Error> {
        if !self.engine || self.remote.is_some() {
            return Ok(None);
        }
        if self.whole {
            return Ok(Some(Tc::Whole(&self.p2p)));
        }
        self.members_comm().map(|c| Some(Tc::Members(c)))
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.group.len()
    }

    /// The job rank of member `r`.
    #[inline(always)]
    pub fn job_rank(&self, r: usize) -> usize {
        self.group[r] as usize
    }

    /// The member rank of job rank `j` (`None`: not a member).
    #[inline(always)]
    pub fn member(&self, j: usize) -> Option<usize> {
        match self.inverse.get(j) {
            Some(&r) if r >= 0 => Some(r as usize),
            _ => None,
        }
    }

    /// The number of ranks point-to-point calls name: the members, or an
    /// intercommunicator's remote group.
    #[inline(always)]
    pub fn peers(&self) -> usize {
        match &self.remote {
            None => self.group.len(),
            Some(r) => r.group.len(),
        }
    }

    /// The job rank of peer `r` (a member, or a rank of the remote group).
    #[inline(always)]
    pub fn peer_job(&self, r: usize) -> usize {
        match &self.remote {
            None => self.group[r] as usize,
            Some(x) => x.group[r] as usize,
        }
    }

    /// The peer rank of job rank `j` (`None`: no peer), as a received
    /// message's source is reported.
    #[inline(always)]
    pub fn peer_of(&self, j: usize) -> Option<usize> {
        let inv = match &self.remote {
            None => &self.inverse,
            Some(x) => &x.inverse,
        };
        match inv.get(j) {
            Some(&r) if r >= 0 => Some(r as usize),
            _ => None,
        }
    }
}

/// A set of contexts, a bit each (tandem's context agreement format).
pub type Mask = [u64; tandem_driver::CONTEXT_WORDS];

/// The context of tandem's fault-tolerance traffic, never a communicator's.
pub const FT_CONTEXT: u16 = (tandem_driver::CONTEXT_WORDS * 64 - 1) as u16;

/// A pending or inactive request.
pub enum Req {
    /// A point-to-point operation (or a persistent one, active or not).
    P2p(P2pReq),
    /// Finished, its result not collected yet: completed at its start (a
    /// `MPI_PROC_NULL` peer), or a collective or agreement a test saw
    /// finish; with its failure, which the collecting call returns.
    Done(abi::Status, Option<Fail>),
    /// A tandem collective under way.
    Coll {
        /// Its communicator.
        comm: Rc<CommObj>,
        /// The driver's request (`None` once taken).
        raw: Option<RawCollRequest>,
        /// Aligned copies of unaligned buffers, copied back at completion.
        staged: Option<Staged>,
    },
    /// A fault-tolerant agreement under way (`MPIX_Comm_iagree`).
    Agree(Box<AgreeReq>),
    /// A persistent collective (`MPI_Allreduce_init` and the like), active
    /// or not.
    PColl(PColl),
    /// A generalized request (`MPI_Grequest_start`).
    Greq(Box<Greq>),
    /// `MPI_Isendrecv`'s send and receive, complete when both are.
    Pair(Pair),
}

/// `MPI_Isendrecv` (and `_replace`): a send and a receive of their own,
/// in the request table, whose completion this request waits for; its
/// status is the receive's.
pub struct Pair {
    /// The send's request (`MPI_REQUEST_NULL` once complete).
    pub send: Handle,
    /// The receive's request (`MPI_REQUEST_NULL` once complete).
    pub recv: Handle,
    /// The send's failure, reported once the receive is complete too.
    pub send_fail: Option<Fail>,
}

/// A generalized request's query callback (`MPI_Grequest_query_function`).
pub type GreqQuery = unsafe extern "C" fn(*mut c_void, *mut abi::Status) -> c_int;
/// A generalized request's free callback (`MPI_Grequest_free_function`).
pub type GreqFree = unsafe extern "C" fn(*mut c_void) -> c_int;
/// A generalized request's cancel callback (`MPI_Grequest_cancel_function`).
pub type GreqCancel = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// A generalized request (`MPI_Grequest_start`): an operation the program
/// carries out itself and reports finished with `MPI_Grequest_complete`;
/// MPI asks its callbacks for the status, to free it and to cancel it.
pub struct Greq {
    /// Fills the status at completion.
    pub query: Option<GreqQuery>,
    /// Frees the program's state once the request is freed.
    pub free: Option<GreqFree>,
    /// Called by `MPI_Cancel`, with whether the request is complete.
    pub cancel: Option<GreqCancel>,
    /// The program's `extra_state`, handed to each callback.
    pub state: *mut c_void,
    /// `MPI_Grequest_complete` was called.
    pub complete: bool,
    /// Freed by `MPI_Request_free` before it was complete: freed (its
    /// free callback called) at `MPI_Grequest_complete`.
    pub detached: bool,
    /// The result a test saw (`MPI_Request_get_status`, `MPI_Testall`),
    /// not collected yet.
    pub done: Option<(abi::Status, Option<Fail>)>,
}

/// What starts a persistent collective ([`PColl::start`]).
pub type StartFn = dyn Fn(&Lib, *mut Handle) -> c_int;

/// A persistent collective: MPI 4.0's `MPI_<collective>_init`. Each
/// `MPI_Start` starts the non-blocking form of the collective with the
/// arguments bound when it was made; completing the request completes
/// that one, and leaves this one inactive, to be started again.
pub struct PColl {
    /// Starts it: the non-blocking collective with the bound arguments,
    /// writing its request to the handle given; the MPI error code.
    pub start: Rc<StartFn>,
    /// The started collective's own request; `MPI_REQUEST_NULL` while
    /// inactive.
    pub active: Handle,
    /// The result of a finished start not yet collected (a test of several
    /// requests, or `MPI_Request_get_status`, saw it finish), with its
    /// failure, which the collecting call returns.
    pub done: Option<(abi::Status, Option<Fail>)>,
    /// Its own communicator (a duplicate of the one it was made on), freed
    /// with it.
    pub comm: Handle,
}

/// A non-blocking agreement: the driver's, and where its result goes.
pub struct AgreeReq {
    /// Its communicator.
    pub comm: Rc<CommObj>,
    /// The agreement (`None` once finished).
    pub op: Option<tandem_driver::Agreeing>,
    /// The program's flag, written at completion.
    pub flag: *mut std::ffi::c_int,
}

/// Aligned copies of a non-blocking collective's buffers (tandem's
/// reductions need elements aligned for their type).
pub struct Staged {
    /// The send data (empty in place).
    pub send: Vec<u128>,
    /// The result, copied to `dst` at completion.
    pub recv: Vec<u128>,
    /// The program's receive buffer.
    pub dst: *mut u8,
    /// Its length in bytes.
    pub len: usize,
    /// Where the program's receive buffer has a non-contiguous type: the
    /// result is unpacked through it (type, element count, the type kept
    /// alive) instead of copied.
    pub unpack: Option<(Handle, usize, TypeHold)>,
}

impl Staged {
    /// Copies `len` bytes at `p` into a new aligned buffer.
    ///
    /// # Safety
    /// `p` points to `len` readable bytes (or `len` is 0).
    pub unsafe fn copy_of(p: *const u8, len: usize) -> Vec<u128> {
        let mut v = vec![0u128; len.div_ceil(16)];
        if len > 0 {
            // SAFETY: the caller's `len` bytes; `v` holds at least `len`.
            unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr().cast::<u8>(), len) };
        }
        v
    }

    /// Copies (or unpacks) the result to the program's buffer.
    ///
    /// # Errors
    /// `MPI_ERR_TYPE` if the type cannot unpack (it was checked when the
    /// operation started, and held since).
    pub fn finish(&self, l: &Lib) -> Result<(), Fail> {
        if let Some((dt, count, _)) = &self.unpack {
            // SAFETY: `recv` holds at least `len` bytes (it was made for
            // them), and u128s are plain bytes.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.recv.as_ptr().cast::<u8>(), self.len) };
            // SAFETY: `dst` is the program's receive buffer of `count`
            // elements of `dt`, kept for the request by MPI's rules.
            return unsafe { l.types.borrow().unpack(*dt, *count, bytes, self.dst) }
                .map(|_| ())
                .map_err(|c| Fail::new(c, format!("cannot unpack into datatype {dt:#x}")));
        }
        if self.len > 0 {
            // SAFETY: `dst` is the program's receive buffer of `len` bytes,
            // kept for the request by MPI's rules; `recv` holds `len`.
            unsafe {
                std::ptr::copy_nonoverlapping(self.recv.as_ptr().cast::<u8>(), self.dst, self.len)
            };
        }
        Ok(())
    }
}

/// Where a received message is unpacked at completion (a non-contiguous
/// receive lands in a staging buffer first).
pub struct Unpack {
    /// The staging buffer.
    pub staged: Vec<u8>,
    /// The user's buffer.
    pub dst: *mut u8,
    /// Its datatype.
    pub dt: Handle,
    /// Its element count.
    pub count: usize,
    /// `dt` kept alive until the bytes are unpacked.
    pub hold: TypeHold,
    /// The receive's room in bytes where the staging buffer is larger (a
    /// message taken by a matched probe before its receive was known): a
    /// longer message is truncated. `usize::MAX` otherwise.
    pub cap: usize,
}

/// A point-to-point request.
pub struct P2pReq {
    /// Its communicator.
    pub comm: Rc<CommObj>,
    /// The driver's request, while active.
    pub raw: Option<RawRequest>,
    /// A receive (else a send).
    pub recv: bool,
    /// Staging of a non-contiguous buffer: packed bytes of a send, or the
    /// bytes a receive unpacks.
    pub stage: Option<Unpack>,
    /// The arguments of a persistent request, to start it again.
    pub persistent: Option<Persistent>,
    /// A persistent request's datatype, kept alive while the request is.
    pub hold: TypeHold,
    /// The result of a finished operation not yet collected (set by a test
    /// that saw it finish while another was pending, `MPI_Testall`, or by
    /// `MPI_Request_get_status`), with its failure, which the collecting
    /// call returns.
    pub done: Option<(abi::Status, Option<Fail>)>,
    /// Freed by `MPI_Request_free` while active: dropped once it finishes.
    pub detached: bool,
    /// `MPI_Cancel` was called.
    pub cancel: bool,
    /// A send to or receive from `MPI_PROC_NULL` (a persistent one).
    pub null_peer: bool,
}

/// The arguments of a persistent request.
#[derive(Clone, Copy)]
pub struct Persistent {
    /// The user's buffer.
    pub buf: *mut c_void,
    /// Element count.
    pub count: c_int,
    /// Datatype.
    pub dt: Handle,
    /// Peer rank (in the communicator).
    pub peer: c_int,
    /// Tag.
    pub tag: c_int,
    /// Synchronous send.
    pub sync: bool,
}

/// An attribute key (`MPI_Comm_create_keyval`).
#[derive(Clone, Copy)]
pub struct Keyval {
    /// Copy callback (`MPI_Comm_dup`), may be null.
    pub copy: Option<CopyFn>,
    /// Delete callback, may be null.
    pub delete: Option<DeleteFn>,
    /// The user's extra state.
    pub extra: *mut c_void,
    /// `MPI_Comm_free_keyval` was called (the key lives on while attached).
    pub freed: bool,
    /// Communicators it is attached to.
    pub uses: usize,
    /// What it was made for (`MPI_Comm_`, `MPI_Type_` or
    /// `MPI_Win_create_keyval`): the others' `set_attr` refuse it.
    pub kind: KeyKind,
}

/// The kind of object a keyval caches attributes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// Communicators (also the MPI-1 `MPI_Keyval_create`).
    Comm,
    /// Datatypes.
    Type,
    /// Windows.
    Win,
}

/// `MPI_Comm_copy_attr_function`.
pub type CopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function`.
pub type DeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;
/// `MPI_Comm_errhandler_function` (variadic in C; called with two arguments).
pub type ErrFn = unsafe extern "C" fn(*mut Handle, *mut c_int);

/// A slab of objects addressed by index, reusing freed slots.
pub struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `v`; returns its index.
    pub fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }
    /// The object at `i`.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i).and_then(|x| x.as_ref())
    }
    /// The object at `i`, mutably.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items.get_mut(i).and_then(|x| x.as_mut())
    }
    /// Removes the object at `i`.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.items.get_mut(i)?.take();
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
    /// The indices in use.
    pub fn indices(&self) -> Vec<usize> {
        (0..self.items.len())
            .filter(|&i| self.items[i].is_some())
            .collect()
    }
}

/// The handle kind bits MPICH uses for objects it allocates (indirect).
const COMM_KIND: u32 = 0x8400_0000;
const REQ_KIND: u32 = 0xac00_0000;
const KEYVAL_KIND: u32 = 0xa440_0000;
const ERRH_KIND: u32 = 0x9400_0000;
const GROUP_KIND: u32 = 0x8800_0000;
const INDEX_MASK: u32 = 0x003f_ffff;

/// Encodes a table index as a handle of `kind`.
fn encode(kind: u32, i: usize) -> Handle {
    (kind | i as u32) as Handle
}

/// Decodes a handle of `kind`.
fn decode(kind: u32, h: Handle) -> Option<usize> {
    let h = h as u32;
    (h & !INDEX_MASK == kind).then_some((h & INDEX_MASK) as usize)
}

/// The library's state between `MPI_Init` and `MPI_Finalize`.
pub struct Lib {
    /// The job's communicator (context 0), owner of the engine.
    pub job: Comm,
    /// Communicators: 0 is `MPI_COMM_WORLD`, 1 `MPI_COMM_SELF`.
    pub comms: RefCell<Slab<Rc<CommObj>>>,
    /// `MPI_COMM_WORLD` again, reached without the table (the hot path).
    pub world: Rc<CommObj>,
    /// Requests.
    pub reqs: RefCell<Slab<Req>>,
    /// Datatypes.
    pub types: RefCell<Types>,
    /// Reduction operations.
    pub ops: RefCell<Ops>,
    /// Attribute keys.
    pub keyvals: RefCell<Slab<Keyval>>,
    /// User error handlers.
    pub errhandlers: RefCell<Slab<ErrFn>>,
    /// Groups (`MPI_Comm_group`): job ranks.
    pub groups: RefCell<Slab<Rc<[u32]>>>,
    /// Free contexts (bit set: free), every context a communicator may
    /// take (below tandem's `MAX_CONTEXTS / 2`).
    pub free_ctx: Cell<Mask>,
    /// The thread level granted.
    pub thread_level: c_int,
    /// The thread that called `MPI_Init` (for `MPI_Is_thread_main`).
    pub main_thread: std::thread::ThreadId,
    /// Recent error messages, by error code (see [`error_code`]).
    pub messages: RefCell<Vec<String>>,
    /// The next message's place in the ring.
    pub next_message: Cell<usize>,
    /// Requests freed while active, reaped as they finish.
    pub detached: Cell<usize>,
    /// Info objects and probed messages.
    pub extra: crate::extra::Extra,
}

struct Slot(UnsafeCell<Option<Lib>>);
// SAFETY: the library grants MPI_THREAD_SERIALIZED: callers never use it
// from two threads at once, and their own synchronisation orders the calls.
unsafe impl Sync for Slot {}

static LIB: Slot = Slot(UnsafeCell::new(None));
// Plain std atomics: this crate is not model-checked under loom.
#[allow(clippy::disallowed_types)]
static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
#[allow(clippy::disallowed_types)]
static ENDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The state, if `MPI_Init` ran and `MPI_Finalize` did not.
#[inline(always)]
pub fn lib() -> Option<&'static Lib> {
    // SAFETY: the slot is written only by `install` and `uninstall`, which
    // run in MPI_Init and MPI_Finalize, when (by the MPI standard) no other
    // call is under way; shared references handed out here never outlive
    // the call that got them.
    unsafe { (*LIB.0.get()).as_ref() }
}

/// Installs the state (`MPI_Init`).
pub fn install(l: Lib) {
    // SAFETY: see `lib`; nothing holds a reference into the slot yet.
    unsafe { *LIB.0.get() = Some(l) };
    STARTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Removes the state (`MPI_Finalize`) and returns it to be dropped.
pub fn uninstall() -> Option<Lib> {
    ENDED.store(true, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: see `lib`: finalize runs alone, no reference is held.
    unsafe { (*LIB.0.get()).take() }
}

/// `MPI_Init` has run.
pub fn started() -> bool {
    STARTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// `MPI_Finalize` has run.
pub fn ended() -> bool {
    ENDED.load(std::sync::atomic::Ordering::SeqCst)
}

impl Lib {
    /// The communicator behind a handle.
    ///
    /// # Errors
    /// `MPI_ERR_COMM` for an invalid or freed handle.
    /// Intercommunicators are refused: the calls that take one ask
    /// [`any_comm`](Self::any_comm).
    #[inline(always)]
    pub fn comm(&self, h: Handle) -> Result<Rc<CommObj>, Fail> {
        let c = self.any_comm(h)?;
        if c.remote.is_some() {
            return Err(Fail::new(
                abi::ERR_COMM,
                format!("{h:#x} is an intercommunicator, which this call does not take on tandem (README, \"Intercommunicators\", lists the calls that do)"),
            ));
        }
        Ok(c)
    }

    /// The communicator behind a handle, intra- or intercommunicator.
    ///
    /// # Errors
    /// `MPI_ERR_COMM` for an invalid or freed handle.
    #[inline(always)]
    pub fn any_comm(&self, h: Handle) -> Result<Rc<CommObj>, Fail> {
        let i = match h {
            abi::COMM_WORLD => return Ok(self.world.clone()),
            abi::COMM_SELF => 1,
            _ => decode(COMM_KIND, h).ok_or_else(|| bad_comm(h))?,
        };
        self.comms
            .borrow()
            .get(i)
            .cloned()
            .ok_or_else(|| bad_comm(h))
    }

    /// Stores a new communicator; returns its handle.
    pub fn add_comm(&self, c: CommObj) -> Handle {
        encode(COMM_KIND, self.comms.borrow_mut().insert(Rc::new(c)))
    }

    /// Removes a communicator (not world or self).
    pub fn remove_comm(&self, h: Handle) -> Option<Rc<CommObj>> {
        let i = decode(COMM_KIND, h)?;
        if i < 2 {
            return None;
        }
        self.comms.borrow_mut().remove(i)
    }

    /// Stores a request; returns its handle.
    pub fn add_req(&self, r: Req) -> Handle {
        encode(REQ_KIND, self.reqs.borrow_mut().insert(r))
    }

    /// The table index of a request handle.
    pub fn req_index(&self, h: Handle) -> Option<usize> {
        decode(REQ_KIND, h)
    }

    /// Stores a key; returns its handle.
    pub fn add_keyval(&self, k: Keyval) -> c_int {
        encode(KEYVAL_KIND, self.keyvals.borrow_mut().insert(k))
    }

    /// The table index of a key.
    pub fn keyval_index(&self, k: c_int) -> Option<usize> {
        decode(KEYVAL_KIND, k)
    }

    /// Stores an error handler.
    pub fn add_errhandler(&self, f: ErrFn) -> Handle {
        encode(ERRH_KIND, self.errhandlers.borrow_mut().insert(f))
    }

    /// A user error handler's function.
    pub fn errhandler_fn(&self, h: Handle) -> Option<ErrFn> {
        self.errhandlers
            .borrow()
            .get(decode(ERRH_KIND, h)?)
            .copied()
    }

    /// Whether `h` names an error handler.
    pub fn errhandler_valid(&self, h: Handle) -> bool {
        matches!(
            h,
            abi::ERRORS_ARE_FATAL | abi::ERRORS_RETURN | abi::ERRORS_ABORT
        ) || self.errhandler_fn(h).is_some()
    }

    /// Removes a user error handler.
    pub fn remove_errhandler(&self, h: Handle) -> bool {
        decode(ERRH_KIND, h)
            .and_then(|i| self.errhandlers.borrow_mut().remove(i))
            .is_some()
    }

    /// Stores a group.
    pub fn add_group(&self, g: Rc<[u32]>) -> Handle {
        if g.is_empty() {
            return abi::GROUP_EMPTY;
        }
        encode(GROUP_KIND, self.groups.borrow_mut().insert(g))
    }

    /// A group's members.
    ///
    /// # Errors
    /// `MPI_ERR_GROUP` for an invalid handle.
    pub fn group(&self, h: Handle) -> Result<Rc<[u32]>, Fail> {
        if h == abi::GROUP_EMPTY {
            return Ok(Rc::from(Vec::new()));
        }
        decode(GROUP_KIND, h)
            .and_then(|i| self.groups.borrow().get(i).cloned())
            .ok_or_else(|| Fail::new(abi::ERR_GROUP, format!("invalid group handle {h:#x}")))
    }

    /// Removes a group.
    pub fn remove_group(&self, h: Handle) -> bool {
        decode(GROUP_KIND, h)
            .and_then(|i| self.groups.borrow_mut().remove(i))
            .is_some()
    }
}

fn bad_comm(h: Handle) -> Fail {
    if h == abi::COMM_NULL {
        Fail::new(abi::ERR_COMM, "MPI_COMM_NULL is not a communicator".into())
    } else {
        Fail::new(abi::ERR_COMM, format!("invalid communicator handle {h:#x}"))
    }
}

/// A failed call: its MPI error class and tandem's message.
#[derive(Debug, Clone)]
pub struct Fail {
    /// The MPI error class.
    pub class: c_int,
    /// What went wrong.
    pub msg: String,
    /// A status to fill (`MPI_ERR_TRUNCATE`: the message's source and tag).
    pub status: Option<abi::Status>,
}

impl Fail {
    /// A failure of `class`.
    pub fn new(class: c_int, msg: String) -> Self {
        Self {
            class,
            msg,
            status: None,
        }
    }
}

/// The MPI error class of a tandem error.
pub fn class_of(e: &Error) -> c_int {
    match e {
        Error::Truncated { .. } => abi::ERR_TRUNCATE,
        Error::InvalidTag { .. } => abi::ERR_TAG,
        Error::InvalidRank { .. } => abi::ERR_RANK,
        Error::PeerLost { .. }
        | Error::RankFailed { .. }
        | Error::PeerSilent { .. }
        | Error::ChannelBroken { .. } => abi::X_ERR_PROC_FAILED,
        Error::Revoked { .. } => abi::X_ERR_REVOKED,
        Error::Cancelled => abi::SUCCESS,
        Error::MessageTooLarge { .. } => abi::ERR_COUNT,
        Error::TooManyRequests { .. } => abi::ERR_OTHER,
        Error::InvalidArgument(_) => abi::ERR_ARG,
        Error::Internal(_) => abi::ERR_INTERN,
        _ => abi::ERR_OTHER,
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::new(class_of(&e), e.to_string())
    }
}

/// Where error codes beyond the classes start: code = class + 256 * (slot
/// + 1), the slot holding tandem's message.
const CODE_STRIDE: c_int = 256;
/// Messages kept for `MPI_Error_string`.
const MESSAGES: usize = 64;

/// An error code for `f`, remembering its message for
/// `MPI_Error_string`.
pub fn error_code(l: Option<&Lib>, f: &Fail) -> c_int {
    let Some(l) = l else { return f.class };
    // A code the program added (a callback's failure handed on) is
    // returned as it is: its class and string are the program's.
    if crate::extra::user_class(f.class).is_some() {
        return f.class;
    }
    let mut m = l.messages.borrow_mut();
    // A ring of recent messages; the code names its slot.
    let n = l.next_message.get();
    l.next_message.set(n + 1);
    let slot = n % MESSAGES;
    if slot < m.len() {
        m[slot] = f.msg.clone();
    } else {
        m.push(f.msg.clone());
    }
    f.class + CODE_STRIDE * (slot as c_int + 1)
}

/// The failure an error code returned by a call of this library stands
/// for: its class, and its message (while the ring of recent messages
/// holds it); `what` names the call, for the message.
pub fn code_failure(code: c_int, what: &str) -> Fail {
    let msg =
        code_message(code).map_or_else(|| format!("{what} failed"), |m| format!("{what}: {m}"));
    Fail::new(code_class(code), msg)
}

/// The class of an error code.
pub fn code_class(code: c_int) -> c_int {
    if let Some(c) = crate::extra::user_class(code) {
        return c;
    }
    if code < 0 {
        return abi::ERR_UNKNOWN;
    }
    code % CODE_STRIDE
}

/// The message recorded for an error code, if any.
pub fn code_message(code: c_int) -> Option<String> {
    if let Some(s) = crate::extra::user_string(code) {
        return Some(s);
    }
    let slot = (code / CODE_STRIDE) as usize;
    if slot == 0 {
        return None;
    }
    lib()?.messages.borrow().get(slot - 1).cloned()
}

/// Takes a free context on this rank (the lowest set bit of `mask`).
pub fn lowest(mask: &Mask) -> Option<u16> {
    for (w, &bits) in mask.iter().enumerate() {
        if bits != 0 {
            return Some((w * 64 + bits.trailing_zeros() as usize) as u16);
        }
    }
    None
}

/// Marks a context used (`false`) or free (`true`).
pub fn mark(l: &Lib, ctx: u16, free: bool) {
    let mut m = l.free_ctx.get();
    if free {
        m[ctx as usize / 64] |= 1 << (ctx % 64);
    } else {
        clear(&mut m, ctx);
    }
    l.free_ctx.set(m);
}

/// Takes `ctx` out of `mask`.
pub fn clear(mask: &mut Mask, ctx: u16) {
    mask[ctx as usize / 64] &= !(1 << (ctx % 64));
}
