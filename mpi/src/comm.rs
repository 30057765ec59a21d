//! Communicators, groups and attribute caching.

use crate::abi::{self, Handle};
use crate::state::{self, CommObj, CopyFn, DeleteFn, Fail, Keyval, Lib};
use crate::{coll, export, fail, put, put_str, run, set};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;
use std::sync::atomic::AtomicI32;

/// The values predefined attributes point to.
static TAG_UB_VALUE: AtomicI32 = AtomicI32::new(tandem_driver::TAG_UB as i32);
static HOST_VALUE: AtomicI32 = AtomicI32::new(abi::PROC_NULL);
static IO_VALUE: AtomicI32 = AtomicI32::new(abi::ANY_SOURCE);
static WTIME_GLOBAL_VALUE: AtomicI32 = AtomicI32::new(0);
static UNIVERSE_VALUE: AtomicI32 = AtomicI32::new(1);
static APPNUM_VALUE: AtomicI32 = AtomicI32::new(0);
static LASTCODE_VALUE: AtomicI32 = AtomicI32::new(abi::ERR_LASTCODE);

/// Records the last error class or code the program added.
pub fn set_last_code(c: c_int) {
    LASTCODE_VALUE.fetch_max(c, std::sync::atomic::Ordering::Relaxed);
}

/// Takes two contexts free on every member of `parent` (a collective call
/// over `parent`).
pub(crate) fn agree_contexts(l: &Lib, parent: &CommObj) -> Result<[u16; 2], Fail> {
    let mut mask = l.free_ctx.get();
    coll::allreduce_band(parent, &mut mask)?;
    take_two(l, mask)
}

/// Takes the two lowest contexts of `mask` (free on every member of a new
/// communicator), marking them used here.
pub(crate) fn take_two(l: &Lib, mut mask: state::Mask) -> Result<[u16; 2], Fail> {
    let a = state::lowest(&mask)
        .ok_or_else(|| Fail::new(abi::ERR_OTHER, "no communicator context left".into()))?;
    state::clear(&mut mask, a);
    let b = state::lowest(&mask)
        .ok_or_else(|| Fail::new(abi::ERR_OTHER, "no communicator context left".into()))?;
    if b >= state::FT_CONTEXT {
        return fail(abi::ERR_OTHER, "no communicator context left");
    }
    state::mark(l, a, false);
    state::mark(l, b, false);
    Ok([a, b])
}

/// A new communicator of `group` (job ranks; this rank among them) with
/// `ctx`.
pub(crate) fn make(
    l: &Lib,
    group: Rc<[u32]>,
    ctx: [u16; 2],
    from: &CommObj,
) -> Result<CommObj, Fail> {
    let me = l.job.rank() as u32;
    let mut inverse = vec![-1i32; l.job.size()];
    for (i, &g) in group.iter().enumerate() {
        inverse[g as usize] = i as i32;
    }
    let rank = group
        .iter()
        .position(|&g| g == me)
        .ok_or_else(|| Fail::new(abi::ERR_INTERN, "not a member of the new group".into()))?;
    let whole =
        group.len() == l.job.size() && group.iter().enumerate().all(|(i, &g)| g == i as u32);
    Ok(CommObj {
        p2p: l.job.dup_with_context(ctx[0])?,
        coll: l.job.dup_with_context(ctx[1])?,
        group,
        inverse: Rc::from(inverse),
        rank,
        contexts: ctx,
        whole,
        engine: true,
        errhandler: Cell::new(from.errhandler.get()),
        attrs: RefCell::new(Vec::new()),
        name: RefCell::new(String::new()),
        ft: RefCell::new(None),
        acked: RefCell::new(Rc::from(Vec::new())),
        topo: RefCell::new(None),
        remote: None,
    })
}

/// `MPI_Comm_dup` without the attribute copies.
pub(crate) fn dup_bare(l: &Lib, c: &CommObj) -> Result<CommObj, Fail> {
    if c.remote.is_some() {
        return crate::inter::dup(l, c);
    }
    let ctx = agree_contexts(l, c)?;
    let obj = make(l, c.group.clone(), ctx, c)?;
    // A duplicate keeps the topology.
    *obj.topo.borrow_mut() = c.topo.borrow().clone();
    Ok(obj)
}

pub(crate) fn split(l: &Lib, comm: Handle, color: c_int, key: c_int) -> Result<Handle, Fail> {
    let c = l.any_comm(comm)?;
    if c.remote.is_some() {
        return crate::inter::split(l, &c, color, key);
    }
    if color < 0 && color != abi::UNDEFINED {
        return fail(abi::ERR_ARG, format!("invalid color {color}"));
    }
    let n = c.size();
    let mine = [color, key];
    let mut all = vec![0i32; 2 * n];
    coll::allgather_bytes(&c, as_bytes(&mine), as_bytes_mut(&mut all))?;
    let ctx = agree_contexts(l, &c)?;
    if color == abi::UNDEFINED {
        state::mark(l, ctx[0], true);
        state::mark(l, ctx[1], true);
        return Ok(abi::COMM_NULL);
    }
    let mut members: Vec<(c_int, usize)> = (0..n)
        .filter(|&r| all[2 * r] == color)
        .map(|r| (all[2 * r + 1], r))
        .collect();
    members.sort();
    let group: Rc<[u32]> = members.iter().map(|&(_, r)| c.group[r]).collect();
    let obj = make(l, group, ctx, &c)?;
    Ok(l.add_comm(obj))
}

/// Creates the communicator of `group` (job ranks) from `comm`: a
/// collective over `comm`; `COMM_NULL` where this rank is not in `group`.
/// `MPI_Comm_split_type`: the ranks of `comm` that share this rank's host
/// (shared memory, the one level of the hardware tandem knows below the
/// job), ordered by `key`, for `MPI_COMM_TYPE_SHARED`, for
/// `MPI_COMM_TYPE_HW_GUIDED` with `mpi_hw_resource_type` set to
/// `mpi_shared_memory` in `info` (or `MPI_COMM_TYPE_RESOURCE_GUIDED`, MPI
/// 4.1's name for that), and for `MPI_COMM_TYPE_HW_UNGUIDED` where the host
/// is a strict subset of `comm` (which it then names in `info`). `MPI_COMM_NULL` for
/// `MPI_UNDEFINED`, for another resource type or none (`MPI_INFO_NULL`),
/// and for `MPI_COMM_TYPE_HW_UNGUIDED` where `comm` is on one host (nothing
/// smaller to split it into). On an intercommunicator each host's ranks
/// of both groups make an intercommunicator, as `MPI_Comm_split` does.
fn split_type(
    l: &Lib,
    comm: Handle,
    kind: c_int,
    key: c_int,
    info: Handle,
) -> Result<Handle, Fail> {
    let c = l.any_comm(comm)?;
    let host = match kind {
        abi::UNDEFINED => false,
        abi::COMM_TYPE_SHARED => true,
        abi::COMM_TYPE_HW_GUIDED | abi::COMM_TYPE_RESOURCE_GUIDED => {
            crate::extra::info_value(l, info, "mpi_hw_resource_type")?.as_deref()
                == Some("mpi_shared_memory")
        }
        abi::COMM_TYPE_HW_UNGUIDED => {
            // A strict subset, or nothing: the same answer on every rank,
            // as every host holds fewer than all of `comm` or one holds all.
            let smaller = (0..c.size()).any(|r| !same_host(l, c.job_rank(r)));
            if smaller {
                // MPI: the info object says which resource it split by.
                crate::extra::info_put(l, info, "mpi_hw_resource_type", "mpi_shared_memory")?;
            }
            smaller
        }
        _ => return fail(abi::ERR_ARG, format!("invalid split_type {kind}")),
    };
    // A host's color: its lowest job rank, the same on every rank of the
    // host (and of either group of an intercommunicator).
    let color = if host {
        (0..l.job.size()).find(|&j| same_host(l, j)).unwrap_or(0) as c_int
    } else {
        abi::UNDEFINED
    };
    drop(c);
    split(l, comm, color, key)
}

/// Whether job rank `j` shares memory (a host) with this rank.
fn same_host(l: &Lib, j: usize) -> bool {
    j == l.job.rank()
        || l.job
            .route(j)
            .is_ok_and(|rt| matches!(rt, tandem_driver::transport::Route::Shm))
}

fn create(l: &Lib, comm: Handle, group: Rc<[u32]>) -> Result<Handle, Fail> {
    let c = l.any_comm(comm)?;
    if let Some(&g) = group.iter().find(|&&g| c.member(g as usize).is_none()) {
        return fail(
            abi::ERR_GROUP,
            format!("job rank {g} of the group is not in the communicator"),
        );
    }
    if c.remote.is_some() {
        return crate::inter::create_sub(l, &c, &group);
    }
    let ctx = agree_contexts(l, &c)?;
    let me = l.job.rank() as u32;
    if !group.contains(&me) {
        state::mark(l, ctx[0], true);
        state::mark(l, ctx[1], true);
        return Ok(abi::COMM_NULL);
    }
    let obj = make(l, group, ctx, &c)?;
    Ok(l.add_comm(obj))
}

/// `MPI_Comm_create_group`: only the members of `group` call; they agree
/// on contexts among themselves, over a view of `comm` restricted to them.
pub fn create_group(l: &Lib, comm: Handle, group: Rc<[u32]>) -> Result<Handle, Fail> {
    let c = l.comm(comm)?;
    if let Some(&g) = group.iter().find(|&&g| c.member(g as usize).is_none()) {
        return fail(
            abi::ERR_GROUP,
            format!("job rank {g} of the group is not in the communicator"),
        );
    }
    let me = l.job.rank() as u32;
    if !group.contains(&me) {
        return Ok(abi::COMM_NULL);
    }
    // The members talk on the parent's collective context, as a
    // communicator of their own.
    let mut inverse = vec![-1i32; l.job.size()];
    for (i, &g) in group.iter().enumerate() {
        inverse[g as usize] = i as i32;
    }
    let view = CommObj {
        p2p: l.job.dup_with_context(c.contexts[1])?,
        coll: l.job.dup_with_context(c.contexts[1])?,
        group: group.clone(),
        inverse: Rc::from(inverse),
        rank: group.iter().position(|&g| g == me).expect("a member"),
        contexts: c.contexts,
        whole: false,
        // The parent's contexts: its collectives may be running there.
        engine: false,
        errhandler: Cell::new(c.errhandler.get()),
        attrs: RefCell::new(Vec::new()),
        name: RefCell::new(String::new()),
        ft: RefCell::new(None),
        acked: RefCell::new(Rc::from(Vec::new())),
        topo: RefCell::new(None),
        remote: None,
    };
    let ctx = agree_contexts(l, &view)?;
    let obj = make(l, group, ctx, &c)?;
    Ok(l.add_comm(obj))
}

fn dup(l: &Lib, comm: Handle) -> Result<Handle, Fail> {
    let c = l.any_comm(comm)?;
    let obj = dup_bare(l, &c)?;
    // Attributes: each key's copy callback decides.
    let attrs = c.attrs.borrow().clone();
    drop(c);
    let mut h = l.add_comm(obj);
    for (key, val) in attrs {
        let Some(k) = keyval(l, key) else { continue };
        let copied = copy_one(comm, key, &k, val).and_then(|out| match out {
            Some(out) => attach(l, h, key, out, true),
            None => Ok(()),
        });
        if let Err(e) = copied {
            // A copy callback refused (or failed): the call fails and the
            // duplicate goes, with the attributes already copied to it
            // (their delete callbacks run); its caller gets MPI_COMM_NULL.
            let _ = free(l, &mut h);
            return Err(e);
        }
    }
    Ok(h)
}

/// Runs `k`'s copy callback for the attribute `val` of `obj` (a
/// communicator or a datatype: their callbacks have one shape): the
/// duplicate's value, or `None` if the callback declines or there is none.
pub fn copy_one(
    obj: Handle,
    key: c_int,
    k: &Keyval,
    val: *mut c_void,
) -> Result<Option<*mut c_void>, Fail> {
    let Some(f) = k.copy else { return Ok(None) };
    let mut out: *mut c_void = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: the program's copy callback, called as MPI specifies.
    let r = unsafe {
        f(
            obj,
            key,
            k.extra,
            val,
            (&mut out as *mut *mut c_void).cast(),
            &mut flag,
        )
    };
    if r != abi::SUCCESS {
        return Err(callback_failed("copy", key, r));
    }
    Ok((flag != 0).then_some(out))
}

/// The failure of an attribute callback that returned `r`: the code goes
/// back to the program, as it is if the program added it
/// (`MPI_Add_error_code`), else reduced to its class.
fn callback_failed(which: &str, key: c_int, r: c_int) -> Fail {
    let code = match crate::extra::user_class(r) {
        Some(_) => r,
        None => crate::state::code_class(r),
    };
    Fail::new(
        code,
        format!("the {which} callback of key {key:#x} failed ({r})"),
    )
}

/// The key `key`, if it exists.
pub fn keyval(l: &Lib, key: c_int) -> Option<Keyval> {
    l.keyvals.borrow().get(l.keyval_index(key)?).copied()
}

/// `MPI_Comm_set_attr`: a key the program freed is refused.
fn set_attr(l: &Lib, comm: Handle, key: c_int, val: *mut c_void) -> Result<(), Fail> {
    key_of_kind(l, key, crate::state::KeyKind::Comm)?;
    attach(l, comm, key, val, false)
}

/// Refuses `key` if it was made for another kind of object (a datatype's
/// or window's key on a communicator, …); an invalid key passes here, for
/// the caller's own check.
pub(crate) fn key_of_kind(l: &Lib, key: c_int, want: crate::state::KeyKind) -> Result<(), Fail> {
    let kind = l
        .keyval_index(key)
        .and_then(|i| l.keyvals.borrow().get(i).map(|k| k.kind));
    match kind {
        Some(k) if k != want => fail(
            abi::ERR_KEYVAL,
            format!("attribute key {key:#x} was made for a {k:?}, not a {want:?} (MPI_{want:?}_create_keyval)"),
        ),
        _ => Ok(()),
    }
}

/// Attaches `val` under `key` to `comm`, replacing (and deleting) what was
/// there. `freed_ok`: also a key the program freed that still lives on
/// through its attachments (a duplicate's copies of them, as MPI requires).
fn attach(l: &Lib, comm: Handle, key: c_int, val: *mut c_void, freed_ok: bool) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let i = l
        .keyval_index(key)
        .filter(|&i| {
            l.keyvals
                .borrow()
                .get(i)
                .is_some_and(|k| freed_ok || !k.freed)
        })
        .ok_or_else(|| Fail::new(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}")))?;
    let old = c.attrs.borrow().iter().find(|a| a.0 == key).map(|a| a.1);
    if let Some(old) = old {
        drop(c);
        delete_one(l, comm, key, old)?;
        let c = l.any_comm(comm)?;
        c.attrs.borrow_mut().retain(|a| a.0 != key);
        c.attrs.borrow_mut().push((key, val));
    } else {
        c.attrs.borrow_mut().push((key, val));
    }
    if let Some(k) = l.keyvals.borrow_mut().get_mut(i) {
        if old.is_none() {
            k.uses += 1;
        }
    }
    Ok(())
}

/// Runs `key`'s delete callback on `val` (the attribute stays attached).
/// Runs `key`'s delete callback on `val`, attached to `comm` (or to a
/// datatype: the callbacks have one shape).
pub fn delete_one(l: &Lib, comm: Handle, key: c_int, val: *mut c_void) -> Result<(), Fail> {
    let Some(k) = keyval(l, key) else {
        return Ok(());
    };
    if let Some(f) = k.delete {
        // SAFETY: the program's delete callback, called as MPI specifies.
        let r = unsafe { f(comm, key, val, k.extra) };
        if r != abi::SUCCESS {
            return Err(callback_failed("delete", key, r));
        }
    }
    Ok(())
}

/// Detaches an attribute (after its delete callback) and releases its key.
fn detach(l: &Lib, comm: Handle, key: c_int) -> Result<bool, Fail> {
    let c = l.any_comm(comm)?;
    let val = c.attrs.borrow().iter().find(|a| a.0 == key).map(|a| a.1);
    drop(c);
    let Some(val) = val else { return Ok(false) };
    delete_one(l, comm, key, val)?;
    l.any_comm(comm)?.attrs.borrow_mut().retain(|a| a.0 != key);
    release_key(l, key);
    Ok(true)
}

/// One attachment of `key` more (a datatype's attribute).
pub(crate) fn hold_key(l: &Lib, key: c_int) {
    let Some(i) = l.keyval_index(key) else { return };
    if let Some(k) = l.keyvals.borrow_mut().get_mut(i) {
        k.uses += 1;
    }
}

/// One attachment of `key` fewer; a freed key with none left goes.
pub(crate) fn release_key(l: &Lib, key: c_int) {
    let Some(i) = l.keyval_index(key) else { return };
    let mut ks = l.keyvals.borrow_mut();
    let gone = match ks.get_mut(i) {
        Some(k) => {
            k.uses = k.uses.saturating_sub(1);
            k.freed && k.uses == 0
        }
        None => false,
    };
    if gone {
        ks.remove(i);
    }
}

/// Deletes every attribute of `comm`, newest first (at `MPI_Comm_free`
/// and `MPI_Finalize`).
pub fn delete_attrs(l: &Lib, comm: Handle) -> Result<(), Fail> {
    loop {
        let last = l.any_comm(comm)?.attrs.borrow().last().map(|a| a.0);
        let Some(key) = last else { return Ok(()) };
        detach(l, comm, key)?;
    }
}

fn free(l: &Lib, h: *mut Handle) -> Result<(), Fail> {
    if h.is_null() {
        return fail(abi::ERR_ARG, "null communicator pointer");
    }
    // SAFETY: checked non-null; the program's handle.
    let comm = unsafe { *h };
    if comm == abi::COMM_WORLD || comm == abi::COMM_SELF {
        return fail(
            abi::ERR_COMM,
            "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
        );
    }
    l.any_comm(comm)?;
    delete_attrs(l, comm)?;
    if let Some(c) = l.remove_comm(comm) {
        state::mark(l, c.contexts[0], true);
        state::mark(l, c.contexts[1], true);
    }
    // SAFETY: as above.
    unsafe { *h = abi::COMM_NULL };
    Ok(())
}

fn compare(l: &Lib, a: Handle, b: Handle) -> Result<c_int, Fail> {
    if a == b {
        l.any_comm(a)?;
        return Ok(abi::IDENT);
    }
    let (x, y) = (l.any_comm(a)?, l.any_comm(b)?);
    let local = group_relation(&x.group, &y.group, abi::CONGRUENT);
    Ok(match (&x.remote, &y.remote) {
        (None, None) => local,
        // Intercommunicators: both groups count, the weaker relation wins
        // (CONGRUENT < SIMILAR < UNEQUAL as MPI numbers them).
        (Some(p), Some(q)) => local.max(group_relation(&p.group, &q.group, abi::CONGRUENT)),
        _ => abi::UNEQUAL,
    })
}

/// `same` if the groups are equal in order, `SIMILAR` if as sets, else
/// `UNEQUAL`.
fn group_relation(x: &[u32], y: &[u32], same: c_int) -> c_int {
    if x == y {
        return same;
    }
    let (mut a, mut b) = (x.to_vec(), y.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    if a == b {
        abi::SIMILAR
    } else {
        abi::UNEQUAL
    }
}

pub(crate) fn as_bytes(v: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding; the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

pub(crate) fn as_bytes_mut(v: &mut [i32]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; every byte pattern is a valid i32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

fn get_attr(
    l: &Lib,
    comm: Handle,
    key: c_int,
    val: *mut c_void,
    flag: *mut c_int,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let predefined: Option<&AtomicI32> = match key {
        abi::TAG_UB => Some(&TAG_UB_VALUE),
        abi::HOST => Some(&HOST_VALUE),
        abi::IO => Some(&IO_VALUE),
        abi::WTIME_IS_GLOBAL => Some(&WTIME_GLOBAL_VALUE),
        abi::UNIVERSE_SIZE => {
            UNIVERSE_VALUE.store(l.job.size() as i32, std::sync::atomic::Ordering::Relaxed);
            Some(&UNIVERSE_VALUE)
        }
        abi::APPNUM => Some(&APPNUM_VALUE),
        abi::LASTUSEDCODE => Some(&LASTCODE_VALUE),
        _ => None,
    };
    let out = val.cast::<*mut c_void>();
    if let Some(v) = predefined {
        // SAFETY: `out` is the program's `void *` slot (checked non-null by put).
        unsafe { set(out, v.as_ptr().cast(), "attribute_val") }?;
        // SAFETY: the program's flag.
        unsafe { set(flag, 1, "flag") }?;
        return Ok(());
    }
    if l.keyval_index(key)
        .is_none_or(|i| l.keyvals.borrow().get(i).is_none())
    {
        return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}"));
    }
    let found = c.attrs.borrow().iter().find(|a| a.0 == key).map(|a| a.1);
    // SAFETY: the program's out-parameters.
    unsafe {
        set(flag, found.is_some() as c_int, "flag")?;
        if let Some(v) = found {
            set(out, v, "attribute_val")?;
        }
    }
    Ok(())
}

pub(crate) fn create_keyval(
    l: &Lib,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    key: *mut c_int,
    extra: *mut c_void,
    kind: crate::state::KeyKind,
) -> Result<(), Fail> {
    let k = l.add_keyval(Keyval {
        copy,
        delete,
        extra,
        freed: false,
        uses: 0,
        kind,
    });
    // SAFETY: the program's out-parameter.
    unsafe { set(key, k, "key") }?;
    Ok(())
}

/// `MPI_Comm_free_keyval` and the datatype's and window's: a key made
/// for another kind of object is refused.
pub(crate) fn free_keyval_of(
    l: &Lib,
    key: *mut c_int,
    kind: crate::state::KeyKind,
) -> Result<(), Fail> {
    if !key.is_null() {
        // SAFETY: the program's key pointer, checked non-null.
        key_of_kind(l, unsafe { *key }, kind)?;
    }
    free_keyval(l, key)
}

fn free_keyval(l: &Lib, key: *mut c_int) -> Result<(), Fail> {
    if key.is_null() {
        return fail(abi::ERR_ARG, "null key pointer");
    }
    // SAFETY: checked non-null.
    let k = unsafe { *key };
    let i = l
        .keyval_index(k)
        .ok_or_else(|| Fail::new(abi::ERR_KEYVAL, format!("invalid attribute key {k:#x}")))?;
    let mut ks = l.keyvals.borrow_mut();
    let gone = match ks.get_mut(i) {
        Some(kv) if !kv.freed => {
            kv.freed = true;
            kv.uses == 0
        }
        // Freed already and still attached somewhere (say, freed again by
        // its own delete callback): nothing more to do, as in MPICH.
        Some(_) => false,
        None => return fail(abi::ERR_KEYVAL, format!("invalid attribute key {k:#x}")),
    };
    if gone {
        ks.remove(i);
    }
    // SAFETY: checked non-null.
    unsafe { *key = abi::KEYVAL_INVALID };
    Ok(())
}

/// `MPIR_Dup_fn`, what MPICH's header names `MPI_COMM_DUP_FN`: copies the
/// attribute value.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _comm: Handle,
    _key: c_int,
    _extra: *mut c_void,
    val: *mut c_void,
    out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a `void **` for the copy and an int flag.
    unsafe {
        put(out.cast::<*mut c_void>(), val);
        put(flag, 1);
    }
    abi::SUCCESS
}

fn group_of(l: &Lib, g: Handle) -> Result<Rc<[u32]>, Fail> {
    l.group(g)
}

export! {
    fn MPI_Comm_rank, PMPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
        run(comm, "MPI_Comm_rank", |l| {
            set(rank, l.any_comm(comm)?.rank as c_int, "rank")?;
            Ok(())
        })
    }

    fn MPI_Comm_size, PMPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
        run(comm, "MPI_Comm_size", |l| {
            set(size, l.any_comm(comm)?.size() as c_int, "size")?;
            Ok(())
        })
    }

    fn MPI_Comm_dup, PMPI_Comm_dup(comm: Handle, out: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_dup", |l| {
            crate::null_first(out, abi::COMM_NULL, "newcomm")?;
            set(out, dup(l, comm)?, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Comm_dup_with_info, PMPI_Comm_dup_with_info(comm: Handle, _info: Handle, out: *mut Handle) -> c_int {
        PMPI_Comm_dup(comm, out)
    }

    fn MPI_Comm_split, PMPI_Comm_split(comm: Handle, color: c_int, key: c_int, out: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_split", |l| {
            crate::null_first(out, abi::COMM_NULL, "newcomm")?;
            set(out, split(l, comm, color, key)?, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Comm_split_type, PMPI_Comm_split_type(comm: Handle, kind: c_int, key: c_int, info: Handle, out: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_split_type", |l| {
            crate::null_first(out, abi::COMM_NULL, "newcomm")?;
            set(out, split_type(l, comm, kind, key, info)?, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Comm_create, PMPI_Comm_create(comm: Handle, group: Handle, out: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_create", |l| {
            let g = group_of(l, group)?;
            crate::null_first(out, abi::COMM_NULL, "newcomm")?;
            set(out, create(l, comm, g)?, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Comm_free, PMPI_Comm_free(comm: *mut Handle) -> c_int {
        let h = if comm.is_null() { abi::COMM_NULL } else { *comm };
        run(h, "MPI_Comm_free", |l| free(l, comm))
    }

    fn MPI_Comm_disconnect, PMPI_Comm_disconnect(comm: *mut Handle) -> c_int {
        PMPI_Comm_free(comm)
    }

    fn MPI_Comm_compare, PMPI_Comm_compare(a: Handle, b: Handle, result: *mut c_int) -> c_int {
        run(a, "MPI_Comm_compare", |l| {
            set(result, compare(l, a, b)?, "result")?;
            Ok(())
        })
    }

    fn MPI_Comm_test_inter, PMPI_Comm_test_inter(comm: Handle, flag: *mut c_int) -> c_int {
        run(comm, "MPI_Comm_test_inter", |l| {
            set(flag, l.any_comm(comm)?.remote.is_some() as c_int, "flag")?;
            Ok(())
        })
    }

    fn MPI_Comm_set_name, PMPI_Comm_set_name(comm: Handle, name: *const c_char) -> c_int {
        run(comm, "MPI_Comm_set_name", |l| {
            let c = l.any_comm(comm)?;
            if name.is_null() {
                return fail(abi::ERR_ARG, "null name");
            }
            // SAFETY: a NUL-terminated string from the program.
            let s = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
            *c.name.borrow_mut() = s;
            Ok(())
        })
    }

    fn MPI_Comm_get_name, PMPI_Comm_get_name(comm: Handle, name: *mut c_char, len: *mut c_int) -> c_int {
        run(comm, "MPI_Comm_get_name", |l| {
            let c = l.any_comm(comm)?;
            let n = put_str(name, abi::MAX_OBJECT_NAME, &c.name.borrow());
            set(len, n, "len")?;
            Ok(())
        })
    }

    fn MPI_Comm_get_attr, PMPI_Comm_get_attr(comm: Handle, key: c_int, val: *mut c_void, flag: *mut c_int) -> c_int {
        run(comm, "MPI_Comm_get_attr", |l| {
            key_of_kind(l, key, crate::state::KeyKind::Comm)?;
            get_attr(l, comm, key, val, flag)
        })
    }

    fn MPI_Attr_get, PMPI_Attr_get(comm: Handle, key: c_int, val: *mut c_void, flag: *mut c_int) -> c_int {
        PMPI_Comm_get_attr(comm, key, val, flag)
    }

    fn MPI_Comm_set_attr, PMPI_Comm_set_attr(comm: Handle, key: c_int, val: *mut c_void) -> c_int {
        run(comm, "MPI_Comm_set_attr", |l| set_attr(l, comm, key, val))
    }

    fn MPI_Attr_put, PMPI_Attr_put(comm: Handle, key: c_int, val: *mut c_void) -> c_int {
        PMPI_Comm_set_attr(comm, key, val)
    }

    fn MPI_Comm_delete_attr, PMPI_Comm_delete_attr(comm: Handle, key: c_int) -> c_int {
        run(comm, "MPI_Comm_delete_attr", |l| {
            key_of_kind(l, key, crate::state::KeyKind::Comm)?;
            if l.keyval_index(key).is_none() {
                return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}"));
            }
            detach(l, comm, key).map(|_| ())
        })
    }

    fn MPI_Attr_delete, PMPI_Attr_delete(comm: Handle, key: c_int) -> c_int {
        PMPI_Comm_delete_attr(comm, key)
    }

    fn MPI_Comm_create_keyval, PMPI_Comm_create_keyval(copy: Option<CopyFn>, delete: Option<DeleteFn>, key: *mut c_int, extra: *mut c_void) -> c_int {
        run(abi::COMM_WORLD, "MPI_Comm_create_keyval", |l| create_keyval(l, copy, delete, key, extra, crate::state::KeyKind::Comm))
    }

    fn MPI_Keyval_create, PMPI_Keyval_create(copy: Option<CopyFn>, delete: Option<DeleteFn>, key: *mut c_int, extra: *mut c_void) -> c_int {
        PMPI_Comm_create_keyval(copy, delete, key, extra)
    }

    fn MPI_Comm_free_keyval, PMPI_Comm_free_keyval(key: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Comm_free_keyval", |l| free_keyval_of(l, key, crate::state::KeyKind::Comm))
    }

    fn MPI_Keyval_free, PMPI_Keyval_free(key: *mut c_int) -> c_int {
        PMPI_Comm_free_keyval(key)
    }

    fn MPI_Comm_group, PMPI_Comm_group(comm: Handle, group: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_group", |l| {
            let c = l.any_comm(comm)?;
            set(group, l.add_group(c.group.clone()), "group")?;
            Ok(())
        })
    }

    fn MPI_Group_size, PMPI_Group_size(group: Handle, size: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_size", |l| {
            set(size, group_of(l, group)?.len() as c_int, "size")?;
            Ok(())
        })
    }

    fn MPI_Group_rank, PMPI_Group_rank(group: Handle, rank: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_rank", |l| {
            let g = group_of(l, group)?;
            let me = l.job.rank() as u32;
            set(rank, g.iter().position(|&x| x == me).map_or(abi::UNDEFINED, |r| r as c_int), "rank")?;
            Ok(())
        })
    }

    fn MPI_Group_free, PMPI_Group_free(group: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_free", |l| {
            if group.is_null() {
                return fail(abi::ERR_ARG, "null group pointer");
            }
            let g = *group;
            group_of(l, g)?;
            l.remove_group(g);
            *group = abi::GROUP_NULL;
            Ok(())
        })
    }

    fn MPI_Group_translate_ranks, PMPI_Group_translate_ranks(a: Handle, n: c_int, ra: *const c_int, b: Handle, rb: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_translate_ranks", |l| {
            let (ga, gb) = (group_of(l, a)?, group_of(l, b)?);
            let n = crate::count(n)?;
            let ra = crate::array(ra, n, "ranks1")?;
            let rb = crate::array_mut(rb, n, "ranks2")?;
            for (&r, out) in ra.iter().zip(rb) {
                *out = if r == abi::PROC_NULL {
                    abi::PROC_NULL
                } else {
                    let j = *ga.get(r as usize).ok_or_else(|| {
                        Fail::new(abi::ERR_RANK, format!("rank {r} is not in a group of {}", ga.len()))
                    })?;
                    gb.iter().position(|&x| x == j).map_or(abi::UNDEFINED, |p| p as c_int)
                };
            }
            Ok(())
        })
    }

    fn MPI_Group_incl, PMPI_Group_incl(group: Handle, n: c_int, ranks: *const c_int, out: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_incl", |l| {
            let g = group_of(l, group)?;
            let ranks = crate::array(ranks, crate::count(n)?, "ranks")?;
            crate::need(out, "newgroup")?;
            let mut v = Vec::with_capacity(ranks.len());
            for &r in ranks {
                let j = *g.get(r as usize).filter(|_| r >= 0).ok_or_else(|| {
                    Fail::new(abi::ERR_RANK, format!("rank {r} is not in a group of {}", g.len()))
                })?;
                if v.contains(&j) {
                    return fail(abi::ERR_RANK, format!("rank {r} listed twice"));
                }
                v.push(j);
            }
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Group_excl, PMPI_Group_excl(group: Handle, n: c_int, ranks: *const c_int, out: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_excl", |l| {
            let g = group_of(l, group)?;
            let ranks = crate::array(ranks, crate::count(n)?, "ranks")?;
            crate::need(out, "newgroup")?;
            let mut drop = vec![false; g.len()];
            for &r in ranks {
                if r < 0 || r as usize >= g.len() {
                    return fail(abi::ERR_RANK, format!("rank {r} is not in a group of {}", g.len()));
                }
                drop[r as usize] = true;
            }
            let v: Vec<u32> = g.iter().zip(&drop).filter(|x| !*x.1).map(|x| *x.0).collect();
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Group_compare, PMPI_Group_compare(a: Handle, b: Handle, result: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Group_compare", |l| {
            let (x, y) = (group_of(l, a)?, group_of(l, b)?);
            set(result, group_relation(&x, &y, abi::IDENT), "result")?;
            Ok(())
        })
    }
}
