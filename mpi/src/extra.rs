//! The rest of what common programs (and mpi4py) call: info objects,
//! matched probes, group set operations, `MPI_Comm_idup`,
//! `MPI_Dims_create`, `MPI_Topo_test` (the topologies are in `topo`), and the
//! non-blocking collectives
//! tandem has no engine for yet (they complete within the call).

use crate::abi::{self, Aint, Handle};
use crate::state::{Fail, Lib, Req};
use crate::{count, export, fail, need, put, put_str, run, set};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;

const W: Handle = abi::COMM_WORLD;
const INFO_KIND: u32 = 0x9c00_0000;
const MSG_KIND: u32 = 0xac80_0000;
const MASK: u32 = 0x003f_ffff;

/// Info objects and matched messages, beside the main tables.
#[derive(Default)]
pub struct Extra {
    /// Info objects: ordered (key, value) pairs.
    pub infos: RefCell<crate::state::Slab<Vec<(String, String)>>>,
    /// Messages taken by `MPI_Mprobe`: the communicator, and the receive
    /// that took the message into a buffer of its own.
    pub msgs: RefCell<crate::state::Slab<(Handle, crate::state::P2pReq)>>,
    /// Strings of error classes and codes the program added.
    pub strings: RefCell<Vec<(c_int, String)>>,
    /// Classes and codes the program added: (code, its class).
    pub codes: RefCell<Vec<(c_int, c_int)>>,
    /// The buffer of `MPI_Buffer_attach` (address, size).
    pub buffer: std::cell::Cell<(usize, c_int)>,
    /// Datatype attributes: (datatype, key, value).
    pub type_attrs: RefCell<Vec<(Handle, c_int, *mut c_void)>>,
    /// One-sided windows.
    pub rma: crate::rma::Rma,
    /// Open files (MPI-IO).
    pub io: crate::io::Io,
}

/// Classes and codes the program adds are numbered after
/// `MPI_ERR_LASTCODE`, in one sequence.
fn next_user_code(l: &Lib) -> c_int {
    abi::ERR_LASTCODE + 1 + l.extra.codes.borrow().len() as c_int
}

/// The string the program gave an error class or code, if any.
pub fn user_string(code: c_int) -> Option<String> {
    let l = crate::state::lib()?;
    let s = l.extra.strings.borrow();
    s.iter().rev().find(|x| x.0 == code).map(|x| x.1.clone())
}

/// The class of a code the program added.
pub fn user_class(code: c_int) -> Option<c_int> {
    let l = crate::state::lib()?;
    let c = l.extra.codes.borrow();
    c.iter().find(|x| x.0 == code).map(|x| x.1)
}

fn extra(l: &Lib) -> &Extra {
    &l.extra
}

fn info_index(h: Handle) -> Result<usize, Fail> {
    let u = h as u32;
    if u & !MASK == INFO_KIND {
        return Ok((u & MASK) as usize);
    }
    fail(abi::ERR_INFO, format!("invalid info handle {h:#x}"))
}

fn with_info<T>(
    l: &Lib,
    h: Handle,
    f: impl FnOnce(&mut Vec<(String, String)>) -> Result<T, Fail>,
) -> Result<T, Fail> {
    if h == abi::INFO_ENV {
        // MPI_INFO_ENV: an empty, read-only view here.
        return f(&mut Vec::new());
    }
    let i = info_index(h)?;
    let mut infos = extra(l).infos.borrow_mut();
    let v = infos
        .get_mut(i)
        .ok_or_else(|| Fail::new(abi::ERR_INFO, format!("invalid info handle {h:#x}")))?;
    f(v)
}

/// The value of `key` in info object `h` (`None` where it is not set, and
/// for `MPI_INFO_NULL`).
///
/// # Errors
/// `MPI_ERR_INFO` for a handle that names no info object.
pub(crate) fn info_value(l: &Lib, h: Handle, key: &str) -> Result<Option<String>, Fail> {
    if h == abi::INFO_NULL {
        return Ok(None);
    }
    with_info(l, h, |v| {
        Ok(v.iter().find(|(k, _)| k == key).map(|(_, x)| x.clone()))
    })
}

/// Every `(key, value)` of info object `h` (none for `MPI_INFO_NULL`).
///
/// # Errors
/// `MPI_ERR_INFO` for a handle that names no info object.
pub(crate) fn info_pairs(l: &Lib, h: Handle) -> Result<Vec<(String, String)>, Fail> {
    if h == abi::INFO_NULL {
        return Ok(Vec::new());
    }
    with_info(l, h, |v| Ok(v.clone()))
}

/// Sets `key` to `value` in info object `h` (nothing for
/// `MPI_INFO_NULL` and `MPI_INFO_ENV`).
///
/// # Errors
/// `MPI_ERR_INFO` for a handle that names no info object.
pub(crate) fn info_put(l: &Lib, h: Handle, key: &str, value: &str) -> Result<(), Fail> {
    if h == abi::INFO_NULL || h == abi::INFO_ENV {
        return Ok(());
    }
    with_info(l, h, |v| {
        match v.iter_mut().find(|(k, _)| k == key) {
            Some(kv) => kv.1 = value.into(),
            None => v.push((key.into(), value.into())),
        }
        Ok(())
    })
}

unsafe fn cstr(p: *const c_char) -> Result<String, Fail> {
    if p.is_null() {
        return fail(abi::ERR_ARG, "null string");
    }
    // SAFETY: a NUL-terminated string from the program.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

pub(crate) fn new_info(l: &Lib, v: Vec<(String, String)>) -> Handle {
    (INFO_KIND | extra(l).infos.borrow_mut().insert(v) as u32) as Handle
}

/// The most balanced split of `n` into `k` factors, in non-increasing
/// order: the smallest difference between the largest and the smallest
/// factor, and among those the one whose factors, smallest first, are
/// largest (what MPICH's `MPI_Dims_create` answers; its test suite's
/// `topo/dims5` lists 75 000 cases). An exhaustive search over the
/// non-increasing factorisations, each factor at least the `k`-th root of
/// what is left.
fn balanced(n: usize, k: usize) -> Vec<usize> {
    fn better(a: &[usize], b: &[usize]) -> bool {
        let (da, db) = (a[0] - a[a.len() - 1], b[0] - b[b.len() - 1]);
        da < db || (da == db && a.iter().rev().gt(b.iter().rev()))
    }
    /// The largest `r` with `r^k <= n`.
    fn root(n: usize, k: usize) -> usize {
        let mut r = (n as f64).powf(1.0 / k as f64).round() as usize;
        while r > 0 && r.checked_pow(k as u32).is_none_or(|p| p > n) {
            r -= 1;
        }
        while (r + 1).checked_pow(k as u32).is_some_and(|p| p <= n) {
            r += 1;
        }
        r
    }
    fn search(n: usize, k: usize, maxf: usize, cur: &mut Vec<usize>, best: &mut Vec<usize>) {
        if k == 1 {
            if n <= maxf {
                cur.push(n);
                if best.is_empty() || better(cur, best) {
                    best.clone_from(cur);
                }
                cur.pop();
            }
            return;
        }
        // The largest of k factors of n is at least n^(1/k): the most
        // balanced candidates come first, and once even the best case of
        // a larger factor (the others as large as they can be) is less
        // balanced than the best found, no larger one can win.
        let r = root(n, k);
        let lo = if r.pow(k as u32) == n { r } else { r + 1 };
        for f in lo..=n.min(maxf) {
            if !best.is_empty() {
                let top = cur.first().copied().unwrap_or(f);
                let bound = top - root(n / f, k - 1).min(top);
                if bound > best[0] - best[best.len() - 1] {
                    break;
                }
            }
            if n % f == 0 {
                cur.push(f);
                search(n / f, k - 1, f, cur, best);
                cur.pop();
            }
        }
    }
    let mut best = Vec::new();
    search(n, k, n, &mut Vec::with_capacity(k), &mut best);
    best
}

/// `MPI_Dims_create`: a balanced factorisation of `nnodes` over the zero
/// entries of `dims`, in non-increasing order.
fn dims_create(nnodes: usize, dims: &mut [c_int]) -> Result<(), Fail> {
    let mut fixed = 1usize;
    let mut free = 0;
    for &d in dims.iter() {
        if d < 0 {
            return fail(abi::ERR_DIMS, format!("negative dimension {d}"));
        }
        if d > 0 {
            fixed *= d as usize;
        } else {
            free += 1;
        }
    }
    if fixed == 0 || nnodes % fixed != 0 {
        return fail(
            abi::ERR_DIMS,
            format!("{nnodes} nodes do not divide by the fixed dimensions ({fixed})"),
        );
    }
    if free == 0 {
        if fixed != nnodes {
            return fail(
                abi::ERR_DIMS,
                format!("the dimensions multiply to {fixed}, not {nnodes}"),
            );
        }
        return Ok(());
    }
    let f = balanced(nnodes / fixed, free);
    let mut it = f.into_iter();
    for d in dims.iter_mut() {
        if *d == 0 {
            *d = it.next().expect("one per free dimension") as c_int;
        }
    }
    Ok(())
}

/// Runs a blocking collective now and returns a completed request: for
/// the non-blocking collectives tandem has no non-blocking engine for.
fn now(l: &Lib, out: *mut Handle, r: c_int) -> Result<(), Fail> {
    if r != abi::SUCCESS {
        return Err(Fail::new(
            crate::state::code_class(r),
            "the collective failed".into(),
        ));
    }
    let h = l.add_req(Req::Done(crate::p2p::empty_status(), None));
    // SAFETY: the program's request out-parameter.
    unsafe { set(out, h, "request") }?;
    Ok(())
}

/// A blocking call's error code as a failure of the non-blocking call
/// that ran it (`what` names it).
pub(crate) fn code_to_fail(r: c_int, what: &str) -> Result<(), Fail> {
    if r != abi::SUCCESS {
        return Err(Fail::new(crate::state::code_class(r), what.into()));
    }
    Ok(())
}

/// Calls a blocking collective with the communicator's handler set to
/// return, so its failure reaches the non-blocking call's caller once.
pub(crate) fn quiet(l: &Lib, comm: Handle, f: impl FnOnce() -> c_int) -> c_int {
    let c = l.any_comm(comm).ok();
    let old = c.as_ref().map(|c| c.errhandler.replace(abi::ERRORS_RETURN));
    let r = f();
    if let (Some(c), Some(h)) = (c, old) {
        c.errhandler.set(h);
    }
    r
}

/// Deletes every attribute of a datatype being freed.
pub fn type_attrs_free(l: &Lib, dt: Handle) -> Result<(), Fail> {
    loop {
        let key = l
            .extra
            .type_attrs
            .borrow()
            .iter()
            .find(|x| x.0 == dt)
            .map(|x| x.1);
        let Some(k) = key else { return Ok(()) };
        type_attr_delete(l, dt, k, true)?;
    }
}

/// Copies a datatype's attributes to its duplicate, as their keys' copy
/// callbacks decide.
pub fn type_attrs_dup(l: &Lib, old: Handle, new: Handle) -> Result<(), Fail> {
    let attrs: Vec<(c_int, *mut c_void)> = l
        .extra
        .type_attrs
        .borrow()
        .iter()
        .filter(|x| x.0 == old)
        .map(|x| (x.1, x.2))
        .collect();
    for (key, val) in attrs {
        let Some(k) = crate::comm::keyval(l, key) else {
            continue;
        };
        if let Some(out) = crate::comm::copy_one(old, key, &k, val)? {
            l.extra.type_attrs.borrow_mut().push((new, key, out));
            crate::comm::hold_key(l, key);
        }
    }
    Ok(())
}

fn type_attr_set(l: &Lib, dt: Handle, key: c_int, val: *mut c_void) -> Result<(), Fail> {
    l.types
        .borrow()
        .info(dt)
        .map_err(|c| crate::p2p::type_fail(c, dt))?;
    crate::comm::key_of_kind(l, key, crate::state::KeyKind::Type)?;
    obj_attr_set(l, dt, key, val)
}

/// Caches `val` under `key` on the datatype or window `dt` (checked by
/// the caller): the attributes of objects other than communicators, kept
/// beside the tables.
pub(crate) fn obj_attr_set(l: &Lib, dt: Handle, key: c_int, val: *mut c_void) -> Result<(), Fail> {
    if l.keyval_index(key).is_none() {
        return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}"));
    }
    if l.keyvals
        .borrow()
        .get(l.keyval_index(key).expect("checked"))
        .is_none_or(|k| k.freed)
    {
        return fail(abi::ERR_KEYVAL, format!("attribute key {key:#x} was freed"));
    }
    type_attr_delete(l, dt, key, false)?;
    l.extra.type_attrs.borrow_mut().push((dt, key, val));
    // The attachment keeps a freed key alive for its delete callback.
    crate::comm::hold_key(l, key);
    Ok(())
}

/// Deletes an attribute of a datatype or window (its delete callback
/// runs); `must`: fail if it is not set.
pub(crate) fn type_attr_delete(l: &Lib, dt: Handle, key: c_int, must: bool) -> Result<(), Fail> {
    let old = {
        let a = l.extra.type_attrs.borrow();
        a.iter().find(|x| x.0 == dt && x.1 == key).map(|x| x.2)
    };
    let Some(v) = old else {
        if must {
            return fail(
                abi::ERR_KEYVAL,
                format!("no attribute {key:#x} on object {dt:#x}"),
            );
        }
        return Ok(());
    };
    crate::comm::delete_one(l, dt, key, v)?;
    l.extra
        .type_attrs
        .borrow_mut()
        .retain(|x| !(x.0 == dt && x.1 == key));
    crate::comm::release_key(l, key);
    Ok(())
}

export! {
    fn MPI_Status_c2f, PMPI_Status_c2f(c_status: *const abi::Status, f_status: *mut c_int) -> c_int {
        run(W, "MPI_Status_c2f", |_| {
            if c_status.is_null() || c_status as usize == abi::STATUS_IGNORE {
                return fail(abi::ERR_ARG, "MPI_STATUS_IGNORE (or null) has no Fortran form");
            }
            need(f_status, "f_status")?;
            // SAFETY: the program's status and its array of
            // MPI_STATUS_SIZE (5) integers, the same five fields in order.
            unsafe { std::ptr::copy_nonoverlapping(c_status.cast::<c_int>(), f_status, 5) };
            Ok(())
        })
    }

    fn MPI_Status_f2c, PMPI_Status_f2c(f_status: *const c_int, c_status: *mut abi::Status) -> c_int {
        run(W, "MPI_Status_f2c", |_| {
            if f_status.is_null() {
                return fail(abi::ERR_ARG, "f_status is a null pointer");
            }
            if c_status.is_null() || c_status as usize == abi::STATUS_IGNORE {
                return fail(abi::ERR_ARG, "MPI_STATUS_IGNORE (or null) as the C status to fill");
            }
            // SAFETY: as in MPI_Status_c2f, the other way.
            unsafe { std::ptr::copy_nonoverlapping(f_status, c_status.cast::<c_int>(), 5) };
            Ok(())
        })
    }

    fn MPI_Type_create_keyval, PMPI_Type_create_keyval(copy: Option<crate::state::CopyFn>, delete: Option<crate::state::DeleteFn>, key: *mut c_int, extra_state: *mut c_void) -> c_int {
        run(W, "MPI_Type_create_keyval", |l| crate::comm::create_keyval(l, copy, delete, key, extra_state, crate::state::KeyKind::Type))
    }

    fn MPI_Type_free_keyval, PMPI_Type_free_keyval(key: *mut c_int) -> c_int {
        run(W, "MPI_Type_free_keyval", |l| crate::comm::free_keyval_of(l, key, crate::state::KeyKind::Type))
    }

    fn MPI_Type_set_attr, PMPI_Type_set_attr(dt: Handle, key: c_int, val: *mut c_void) -> c_int {
        run(W, "MPI_Type_set_attr", |l| type_attr_set(l, dt, key, val))
    }

    fn MPI_Type_get_attr, PMPI_Type_get_attr(dt: Handle, key: c_int, val: *mut c_void, flag: *mut c_int) -> c_int {
        run(W, "MPI_Type_get_attr", |l| {
            l.types.borrow().info(dt).map_err(|c| crate::p2p::type_fail(c, dt))?;
            crate::comm::key_of_kind(l, key, crate::state::KeyKind::Type)?;
            if l.keyval_index(key).is_none() {
                return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}"));
            }
            let v = l.extra.type_attrs.borrow().iter().find(|x| x.0 == dt && x.1 == key).map(|x| x.2);
            set(flag, v.is_some() as c_int, "flag")?;
            if let Some(v) = v {
                set(val.cast::<*mut c_void>(), v, "val")?;
            }
            Ok(())
        })
    }

    fn MPI_Type_delete_attr, PMPI_Type_delete_attr(dt: Handle, key: c_int) -> c_int {
        run(W, "MPI_Type_delete_attr", |l| {
            l.types.borrow().info(dt).map_err(|c| crate::p2p::type_fail(c, dt))?;
            crate::comm::key_of_kind(l, key, crate::state::KeyKind::Type)?;
            if l.keyval_index(key).is_none() {
                return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}"));
            }
            type_attr_delete(l, dt, key, true)
        })
    }

    fn MPI_Add_error_class, PMPI_Add_error_class(class: *mut c_int) -> c_int {
        run(W, "MPI_Add_error_class", |l| {
            let c = next_user_code(l);
            l.extra.codes.borrow_mut().push((c, c));
            crate::comm::set_last_code(c);
            set(class, c, "class")?;
            Ok(())
        })
    }

    fn MPI_Add_error_code, PMPI_Add_error_code(class: c_int, code: *mut c_int) -> c_int {
        run(W, "MPI_Add_error_code", |l| {
            let known = (0..=abi::ERR_VALUE_TOO_LARGE).contains(&class)
                || l.extra.codes.borrow().iter().any(|x| x.0 == class && x.1 == class);
            if !known {
                return fail(abi::ERR_ARG, format!("invalid error class {class}"));
            }
            let c = next_user_code(l);
            l.extra.codes.borrow_mut().push((c, class));
            crate::comm::set_last_code(c);
            set(code, c, "code")?;
            Ok(())
        })
    }

    fn MPI_Add_error_string, PMPI_Add_error_string(code: c_int, s: *const c_char) -> c_int {
        run(W, "MPI_Add_error_string", |l| {
            let text = cstr(s)?;
            if text.len() >= abi::MAX_ERROR_STRING {
                return fail(abi::ERR_ARG, "error string longer than MPI_MAX_ERROR_STRING");
            }
            if user_class(code).is_none() {
                return fail(abi::ERR_ARG, format!("error code {code} was not added by the program"));
            }
            l.extra.strings.borrow_mut().push((code, text));
            Ok(())
        })
    }

    fn MPI_Status_set_elements_x, PMPI_Status_set_elements_x(st: *mut abi::Status, dt: Handle, n: abi::Count) -> c_int {
        run(W, "MPI_Status_set_elements_x", |l| {
            let size = l.types.borrow().info(dt).map_err(|c| crate::p2p::type_fail(c, dt))?.size;
            if !st.is_null() && st as usize != abi::STATUS_IGNORE {
                (*st).set_count(n * size as i64);
            }
            Ok(())
        })
    }

    fn MPI_Comm_create_group, PMPI_Comm_create_group(comm: Handle, group: Handle, _tag: c_int, out: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_create_group", |l| {
            let g = l.group(group)?;
            crate::null_first(out, abi::COMM_NULL, "newcomm")?;
            set(out, crate::comm::create_group(l, comm, g)?, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Info_create, PMPI_Info_create(info: *mut Handle) -> c_int {
        run(W, "MPI_Info_create", |l| {
            set(info, new_info(l, Vec::new()), "info")?;
            Ok(())
        })
    }

    fn MPI_Info_free, PMPI_Info_free(info: *mut Handle) -> c_int {
        run(W, "MPI_Info_free", |l| {
            if info.is_null() {
                return fail(abi::ERR_ARG, "null info pointer");
            }
            let i = info_index(*info)?;
            if extra(l).infos.borrow_mut().remove(i).is_none() {
                return fail(abi::ERR_INFO, format!("invalid info handle {:#x}", *info));
            }
            *info = abi::INFO_NULL;
            Ok(())
        })
    }

    fn MPI_Info_dup, PMPI_Info_dup(info: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Info_dup", |l| {
            let v = with_info(l, info, |v| Ok(v.clone()))?;
            set(out, new_info(l, v), "newinfo")?;
            Ok(())
        })
    }

    fn MPI_Info_set, PMPI_Info_set(info: Handle, key: *const c_char, val: *const c_char) -> c_int {
        run(W, "MPI_Info_set", |l| {
            let (k, v) = (cstr(key)?, cstr(val)?);
            if k.is_empty() || k.len() > 255 {
                return fail(abi::ERR_INFO_KEY, format!("invalid info key {k:?}"));
            }
            if v.len() > 1024 {
                return fail(abi::ERR_INFO_VALUE, "info value longer than MPI_MAX_INFO_VAL");
            }
            with_info(l, info, |e| {
                match e.iter_mut().find(|x| x.0 == k) {
                    Some(x) => x.1 = v,
                    None => e.push((k, v)),
                }
                Ok(())
            })
        })
    }

    fn MPI_Info_delete, PMPI_Info_delete(info: Handle, key: *const c_char) -> c_int {
        run(W, "MPI_Info_delete", |l| {
            let k = cstr(key)?;
            with_info(l, info, |e| {
                let n = e.len();
                e.retain(|x| x.0 != k);
                if e.len() == n {
                    return fail(abi::ERR_INFO_NOKEY, format!("no info key {k:?}"));
                }
                Ok(())
            })
        })
    }

    fn MPI_Info_get, PMPI_Info_get(info: Handle, key: *const c_char, len: c_int, val: *mut c_char, flag: *mut c_int) -> c_int {
        run(W, "MPI_Info_get", |l| {
            let k = cstr(key)?;
            let found = with_info(l, info, |e| Ok(e.iter().find(|x| x.0 == k).map(|x| x.1.clone())))?;
            set(flag, found.is_some() as c_int, "flag")?;
            if let Some(v) = found {
                put_str(val, count(len)? + 1, &v);
            }
            Ok(())
        })
    }

    fn MPI_Info_get_valuelen, PMPI_Info_get_valuelen(info: Handle, key: *const c_char, len: *mut c_int, flag: *mut c_int) -> c_int {
        run(W, "MPI_Info_get_valuelen", |l| {
            let k = cstr(key)?;
            let found = with_info(l, info, |e| Ok(e.iter().find(|x| x.0 == k).map(|x| x.1.len())))?;
            set(flag, found.is_some() as c_int, "flag")?;
            if let Some(n) = found {
                set(len, n as c_int, "len")?;
            }
            Ok(())
        })
    }

    fn MPI_Info_get_nkeys, PMPI_Info_get_nkeys(info: Handle, n: *mut c_int) -> c_int {
        run(W, "MPI_Info_get_nkeys", |l| {
            set(n, with_info(l, info, |e| Ok(e.len()))? as c_int, "n")?;
            Ok(())
        })
    }

    fn MPI_Info_get_nthkey, PMPI_Info_get_nthkey(info: Handle, i: c_int, key: *mut c_char) -> c_int {
        run(W, "MPI_Info_get_nthkey", |l| {
            let k = with_info(l, info, |e| {
                e.get(i as usize)
                    .filter(|_| i >= 0)
                    .map(|x| x.0.clone())
                    .ok_or_else(|| Fail::new(abi::ERR_ARG, format!("no key number {i}")))
            })?;
            put_str(key, 256, &k);
            Ok(())
        })
    }

    fn MPI_Comm_get_info, PMPI_Comm_get_info(comm: Handle, out: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_get_info", |l| {
            l.any_comm(comm)?;
            set(out, new_info(l, Vec::new()), "info_used")?;
            Ok(())
        })
    }

    fn MPI_Comm_set_info, PMPI_Comm_set_info(comm: Handle, _info: Handle) -> c_int {
        // No hints apply: accepted and ignored, as MPI allows.
        run(comm, "MPI_Comm_set_info", |l| l.any_comm(comm).map(|_| ()))
    }

    fn MPI_Topo_test, PMPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
        run(comm, "MPI_Topo_test", |l| {
            set(status, crate::topo::kind(&*l.any_comm(comm)?), "status")?;
            Ok(())
        })
    }

    fn MPI_Comm_get_parent, PMPI_Comm_get_parent(parent: *mut Handle) -> c_int {
        // No process was spawned by MPI_Comm_spawn.
        put(parent, abi::COMM_NULL);
        abi::SUCCESS
    }

    fn MPI_Comm_idup_with_info, PMPI_Comm_idup_with_info(comm: Handle, _info: Handle, out: *mut Handle, req: *mut Handle) -> c_int {
        // No info hint changes what a duplicate is here.
        PMPI_Comm_idup(comm, out, req)
    }

    fn MPI_Comm_idup, PMPI_Comm_idup(comm: Handle, out: *mut Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_idup", |l| {
            // Refused at the call: an invalid communicator or pointer.
            l.any_comm(comm)?;
            crate::null_first(out, abi::COMM_NULL, "newcomm")?;
            crate::need(req, "request")?;
            let r = quiet(l, comm, || crate::comm::PMPI_Comm_dup(comm, out));
            if r == abi::SUCCESS {
                return now(l, req, r);
            }
            // A duplicate that could not be made (no context left, a
            // failed peer) is the request's failure, reported by its wait
            // or test, as MPICH reports it.
            let f = crate::state::code_failure(r, "MPI_Comm_idup");
            let h = l.add_req(Req::Done(crate::p2p::empty_status(), Some(f)));
            set(out, abi::COMM_NULL, "newcomm")?;
            set(req, h, "request")
        })
    }

    fn MPI_Dims_create, PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
        run(W, "MPI_Dims_create", |_| {
            let (n, k) = (count(nnodes)?, count(ndims)?);
            if k == 0 {
                return Ok(());
            }
            dims_create(n, std::slice::from_raw_parts_mut(dims, k))
        })
    }

    fn MPI_Type_match_size, PMPI_Type_match_size(class: c_int, size: c_int, dt: *mut Handle) -> c_int {
        run(W, "MPI_Type_match_size", |_| {
            let t = match (class, size) {
                (2, 1) => abi::INT8_T,
                (2, 2) => abi::INT16_T,
                (2, 4) => abi::INT32_T,
                (2, 8) => abi::INT64_T,
                (1, 4) => abi::FLOAT,
                (1, 8) => abi::DOUBLE,
                (1, 16) => abi::LONG_DOUBLE,
                (3, 8) => abi::C_FLOAT_COMPLEX,
                (3, 16) => abi::C_DOUBLE_COMPLEX,
                (3, 32) => abi::C_LONG_DOUBLE_COMPLEX,
                _ => return fail(abi::ERR_ARG, format!("no type of class {class} and size {size}")),
            };
            set(dt, t, "dt")?;
            Ok(())
        })
    }

    fn MPI_Group_union, PMPI_Group_union(a: Handle, b: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Group_union", |l| {
            crate::need(out, "newgroup")?;
            let (x, y) = (l.group(a)?, l.group(b)?);
            let mut v = x.to_vec();
            v.extend(y.iter().filter(|g| !x.contains(g)));
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Group_intersection, PMPI_Group_intersection(a: Handle, b: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Group_intersection", |l| {
            crate::need(out, "newgroup")?;
            let (x, y) = (l.group(a)?, l.group(b)?);
            let v: Vec<u32> = x.iter().copied().filter(|g| y.contains(g)).collect();
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Group_difference, PMPI_Group_difference(a: Handle, b: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Group_difference", |l| {
            crate::need(out, "newgroup")?;
            let (x, y) = (l.group(a)?, l.group(b)?);
            let v: Vec<u32> = x.iter().copied().filter(|g| !y.contains(g)).collect();
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Group_range_incl, PMPI_Group_range_incl(group: Handle, n: c_int, ranges: *const [c_int; 3], out: *mut Handle) -> c_int {
        run(W, "MPI_Group_range_incl", |l| {
            crate::need(out, "newgroup")?;
            let g = l.group(group)?;
            let mut v = Vec::new();
            let mut taken = vec![false; g.len()];
            for &t in crate::array(ranges, count(n)?, "ranges")? {
                for r in expand(t, g.len())? {
                    // The ranks the triplets name must be distinct.
                    if std::mem::replace(&mut taken[r], true) {
                        return fail(abi::ERR_RANK, format!("rank {r} named twice by the ranges"));
                    }
                    v.push(g[r]);
                }
            }
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Group_range_excl, PMPI_Group_range_excl(group: Handle, n: c_int, ranges: *const [c_int; 3], out: *mut Handle) -> c_int {
        run(W, "MPI_Group_range_excl", |l| {
            crate::need(out, "newgroup")?;
            let g = l.group(group)?;
            let mut drop = vec![false; g.len()];
            for &t in crate::array(ranges, count(n)?, "ranges")? {
                for r in expand(t, g.len())? {
                    drop[r] = true;
                }
            }
            let v: Vec<u32> = g.iter().zip(&drop).filter(|x| !*x.1).map(|x| *x.0).collect();
            set(out, l.add_group(Rc::from(v)), "newgroup")?;
            Ok(())
        })
    }

    fn MPI_Improbe, PMPI_Improbe(from: c_int, tag: c_int, comm: Handle, flag: *mut c_int, msg: *mut Handle, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Improbe", |l| {
            crate::need(flag, "flag")?;
            mprobe(l, from, tag, comm, flag, msg, st, false)
        })
    }

    fn MPI_Mprobe, PMPI_Mprobe(from: c_int, tag: c_int, comm: Handle, msg: *mut Handle, st: *mut abi::Status) -> c_int {
        run(comm, "MPI_Mprobe", |l| mprobe(l, from, tag, comm, std::ptr::null_mut(), msg, st, true))
    }

    fn MPI_Mrecv, PMPI_Mrecv(buf: *mut c_void, n: c_int, dt: Handle, msg: *mut Handle, st: *mut abi::Status) -> c_int {
        let comm = message_comm(msg);
        run(comm, "MPI_Mrecv", |l| {
            let mut req = abi::REQUEST_NULL;
            matched_recv(l, buf, n, dt, msg, &mut req)?;
            let r = quiet(l, comm, || crate::p2p::PMPI_Wait(&mut req, st));
            if r != abi::SUCCESS {
                return Err(Fail::new(crate::state::code_class(r), "MPI_Mrecv: the receive failed".into()));
            }
            Ok(())
        })
    }

    fn MPI_Imrecv, PMPI_Imrecv(buf: *mut c_void, n: c_int, dt: Handle, msg: *mut Handle, req: *mut Handle) -> c_int {
        let comm = message_comm(msg);
        run(comm, "MPI_Imrecv", |l| matched_recv(l, buf, n, dt, msg, req))
    }
}

/// Starts the receive of a message a matched probe took (`msg`) into `n`
/// elements of `dt` at `buf`; its request goes to `req`.
fn matched_recv(
    l: &Lib,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    msg: *mut Handle,
    req: *mut Handle,
) -> Result<(), Fail> {
    // Checked before the message is taken, so a bad argument loses none.
    let cap = crate::p2p::in_view(l, buf, n, dt)?.len;
    let r = match take_message(l, msg)? {
        None => Req::Done(crate::p2p::proc_null_status(), None),
        Some(p) => Req::P2p(crate::p2p::matched_into(l, p, buf, n, dt, cap)?),
    };
    let h = l.add_req(r);
    // SAFETY: the program's request out-parameter.
    unsafe { set(req, h, "req") }?;
    Ok(())
}

/// The ranks of one `(first, last, stride)` triple.
fn expand(t: [c_int; 3], n: usize) -> Result<Vec<usize>, Fail> {
    let [first, last, stride] = t;
    if stride == 0 {
        return fail(abi::ERR_ARG, "zero stride");
    }
    let mut v = Vec::new();
    let mut r = first;
    while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
        if r < 0 || r as usize >= n {
            return fail(abi::ERR_RANK, format!("rank {r} is not in a group of {n}"));
        }
        v.push(r as usize);
        r += stride;
    }
    Ok(v)
}

/// The communicator of a message handle, for error reports.
fn message_comm(msg: *mut Handle) -> Handle {
    let Some(l) = crate::state::lib() else {
        return W;
    };
    if msg.is_null() {
        return W;
    }
    // SAFETY: the program's message handle.
    let h = unsafe { *msg } as u32;
    if h & !MASK != MSG_KIND {
        return W;
    }
    l.extra
        .msgs
        .borrow()
        .get((h & MASK) as usize)
        .map_or(W, |m| m.0)
}

/// Takes a matched probe's message: `None` for `MPI_MESSAGE_NO_PROC`.
fn take_message(l: &Lib, msg: *mut Handle) -> Result<Option<crate::state::P2pReq>, Fail> {
    if msg.is_null() {
        return fail(abi::ERR_ARG, "null message pointer");
    }
    // SAFETY: the program's message handle.
    let h = unsafe { *msg };
    if h == abi::MESSAGE_NO_PROC {
        // SAFETY: as above.
        unsafe { *msg = abi::MESSAGE_NULL };
        return Ok(None);
    }
    let u = h as u32;
    let m = (u & !MASK == MSG_KIND)
        .then(|| l.extra.msgs.borrow_mut().remove((u & MASK) as usize))
        .flatten()
        .ok_or_else(|| Fail::new(abi::ERR_ARG, format!("invalid message handle {h:#x}")))?;
    // SAFETY: as above.
    unsafe { *msg = abi::MESSAGE_NULL };
    Ok(Some(m.1))
}

/// A matched probe: the message found is taken at once by a receive of
/// its own (`crate::p2p::matched_take`), so no other receive can match it
/// before `MPI_Mrecv`/`MPI_Imrecv` names where it goes.
fn mprobe(
    l: &Lib,
    from: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    msg: *mut Handle,
    st: *mut abi::Status,
    block: bool,
) -> Result<(), Fail> {
    let mut s = crate::p2p::empty_status();
    let mut f: c_int = 0;
    // SAFETY: the program's arguments, passed on; `s` and `f` are ours.
    let r = quiet(l, comm, || unsafe {
        if block {
            f = 1;
            crate::p2p::PMPI_Probe(from, tag, comm, &mut s)
        } else {
            crate::p2p::PMPI_Iprobe(from, tag, comm, &mut f, &mut s)
        }
    });
    if r != abi::SUCCESS {
        return Err(Fail::new(
            crate::state::code_class(r),
            "the probe failed".into(),
        ));
    }
    // SAFETY: the program's out-parameters.
    unsafe {
        put(flag, f);
        if f == 0 {
            return Ok(());
        }
        crate::p2p::out_status(st, &s);
        if from == abi::PROC_NULL {
            set(msg, abi::MESSAGE_NO_PROC, "msg")?;
            return Ok(());
        }
        let taken = crate::p2p::matched_take(l.any_comm(comm)?, &s)?;
        let i = l.extra.msgs.borrow_mut().insert((comm, taken));
        set(msg, (MSG_KIND | i as u32) as Handle, "msg")?;
    }
    Ok(())
}

/// Non-blocking collectives without a non-blocking engine: the blocking
/// call runs within the call, and the request is complete.
macro_rules! completes_now {
    ($($name:ident, $pname:ident, $blocking:path => ( $($a:ident : $t:ty),* ) comm = $comm:ident;)*) => {
        export! {$(
            fn $name, $pname($($a: $t),*, req: *mut Handle) -> c_int {
                run($comm, stringify!($name), |l| {
                    // SAFETY: the program's arguments, passed on unchanged.
                    let r = quiet(l, $comm, || unsafe { $blocking($($a),*) });
                    now(l, req, r)
                })
            }
        )*}
    };
}

completes_now! {
    MPI_Iallgatherv, PMPI_Iallgatherv, crate::coll::PMPI_Allgatherv => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, comm: Handle) comm = comm;
    MPI_Ialltoallv, PMPI_Ialltoallv, crate::coll::PMPI_Alltoallv => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, comm: Handle) comm = comm;
    MPI_Igather, PMPI_Igather, crate::coll::PMPI_Gather => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Igatherv, PMPI_Igatherv, crate::coll::PMPI_Gatherv => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Iscatter, PMPI_Iscatter, crate::coll::PMPI_Scatter => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Iscatterv, PMPI_Iscatterv, crate::coll::PMPI_Scatterv => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Ireduce_scatter, PMPI_Ireduce_scatter, crate::coll::PMPI_Reduce_scatter => (s: *const c_void, r: *mut c_void, counts: *const c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Ireduce_scatter_block, PMPI_Ireduce_scatter_block, crate::coll::PMPI_Reduce_scatter_block => (s: *const c_void, r: *mut c_void, k: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Iscan, PMPI_Iscan, crate::coll::PMPI_Scan => (s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Ialltoallw, PMPI_Ialltoallw, crate::coll::PMPI_Alltoallw => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: *const Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: *const Handle, comm: Handle) comm = comm;
    MPI_Iexscan, PMPI_Iexscan, crate::coll::PMPI_Exscan => (s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Ineighbor_allgather, PMPI_Ineighbor_allgather, crate::topo::PMPI_Neighbor_allgather => (s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rc: c_int, rt: Handle, comm: Handle) comm = comm;
    MPI_Ineighbor_allgatherv, PMPI_Ineighbor_allgatherv, crate::topo::PMPI_Neighbor_allgatherv => (s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, comm: Handle) comm = comm;
    MPI_Ineighbor_alltoall, PMPI_Ineighbor_alltoall, crate::topo::PMPI_Neighbor_alltoall => (s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rc: c_int, rt: Handle, comm: Handle) comm = comm;
    MPI_Ineighbor_alltoallv, PMPI_Ineighbor_alltoallv, crate::topo::PMPI_Neighbor_alltoallv => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, st: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, comm: Handle) comm = comm;
    MPI_Ineighbor_alltoallw, PMPI_Ineighbor_alltoallw, crate::topo::PMPI_Neighbor_alltoallw => (s: *const c_void, scounts: *const c_int, sdispls: *const Aint, sts: *const Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const Aint, rts: *const Handle, comm: Handle) comm = comm;
}

#[cfg(test)]
mod tests {
    use super::dims_create;

    #[test]
    fn dims_are_balanced_and_non_increasing() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 0, 0];
        dims_create(8, &mut d).unwrap();
        assert_eq!(d, [2, 2, 2]);
        let mut d = [0, 3, 0];
        dims_create(6, &mut d).unwrap();
        assert_eq!(d, [2, 3, 1]);
        let mut d = [0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1]);
        assert!(dims_create(7, &mut [2, 0]).is_err());
    }

    /// Cases where giving each prime to the smallest factor is not the
    /// most balanced split (from MPICH's `topo/dims5` expectations).
    #[test]
    fn dims_take_the_most_balanced_split() {
        for (n, want) in [
            (72, vec![9, 8]),
            (180, vec![15, 12]),
            (240, vec![16, 15]),
            (228_072, vec![86, 52, 51]),
            (712_656, vec![101, 14, 9, 8, 7]),
            (117_936, vec![14, 13, 9, 9, 8]),
        ] {
            let mut d = vec![0; want.len()];
            dims_create(n, &mut d).unwrap();
            assert_eq!(
                d.iter().map(|&x| x as usize).collect::<Vec<_>>(),
                want,
                "{n}"
            );
        }
        let mut d = [0; 17];
        dims_create(999_999, &mut d).unwrap();
        assert_eq!(d.iter().map(|&x| x as usize).product::<usize>(), 999_999);
    }
}

/// A persistent collective's array argument (counts, displacements,
/// datatypes), copied when the collective is made where the call reads it:
/// a program may free or reuse its own once the init returns (mpi4py hands
/// in temporary arrays).
enum Kept<T> {
    /// The copy.
    Copy(Box<[T]>),
    /// An argument the call ignores on this rank (a root's array off the
    /// root), passed on as it came.
    Raw(*const T),
}

impl<T: Copy> Kept<T> {
    /// The array at `p`: `Some(n)` entries copied, `None` passed on.
    ///
    /// # Safety
    /// With `Some(n)`, `p` is null or points to `n` readable entries.
    unsafe fn new(p: *const T, n: Option<usize>) -> Self {
        match n {
            Some(n) if !p.is_null() => {
                // SAFETY: the caller's `n` entries.
                Kept::Copy(unsafe { std::slice::from_raw_parts(p, n) }.into())
            }
            _ => Kept::Raw(p),
        }
    }

    /// The pointer the collective is started with.
    fn ptr(&self) -> *const T {
        match self {
            Kept::Copy(b) => b.as_ptr(),
            Kept::Raw(p) => *p,
        }
    }
}

/// A persistent collective's own communicator: a duplicate of `comm`
/// without its attributes (topology kept), its error handler returning.
fn private_comm(l: &Lib, comm: Handle) -> Result<Handle, Fail> {
    let parent = l.any_comm(comm)?;
    let obj = crate::comm::dup_bare(l, &parent)?;
    drop(parent);
    let h = l.add_comm(obj);
    l.any_comm(h)?.errhandler.set(abi::ERRORS_RETURN);
    Ok(h)
}

/// Entries in a per-rank array of a collective on `comm`: one per rank
/// its blocks go to or come from (of the remote group, on an
/// intercommunicator).
fn peers(l: &Lib, comm: Handle) -> Result<Option<usize>, Fail> {
    let c = l.any_comm(comm)?;
    Ok(Some(c.remote.as_ref().map_or(c.size(), |r| r.group.len())))
}

/// [`peers`] where this rank is the collective's `root` (its array is
/// ignored elsewhere).
fn at_root(l: &Lib, comm: Handle, root: c_int) -> Result<Option<usize>, Fail> {
    let c = l.any_comm(comm)?;
    let is_root = if c.remote.is_some() {
        root == abi::ROOT
    } else {
        root >= 0 && root as usize == c.rank
    };
    if is_root {
        peers(l, comm)
    } else {
        Ok(None)
    }
}

/// Entries in `MPI_Reduce_scatter`'s counts: one per rank of the local
/// group.
fn local(l: &Lib, comm: Handle) -> Result<Option<usize>, Fail> {
    Ok(Some(l.any_comm(comm)?.size()))
}

/// Entries in a neighbourhood collective's receive (`in`) or send arrays.
fn degree(l: &Lib, comm: Handle, incoming: bool) -> Result<Option<usize>, Fail> {
    let (i, o) = crate::topo::degrees(l, comm)?;
    Ok(Some(if incoming { i } else { o }))
}

/// MPI 4.0's persistent collectives: `MPI_<collective>_init` binds the
/// arguments of the non-blocking collective `$start` (checked when it
/// starts, as the non-blocking call checks them) and makes an inactive
/// request; each `MPI_Start` runs `$start` with them ([`PColl`]). The
/// `info` argument carries no hint tandem uses.
///
/// [`PColl`]: crate::state::PColl
macro_rules! persistent_coll {
    ($($name:ident, $pname:ident, $start:path => ( $($a:ident : $t:ty),* ) comm = $comm:ident $(, keep $($k:ident : $n:expr),+)?;)*) => {
        export! {$(
            fn $name, $pname($($a: $t),*, _info: Handle, req: *mut Handle) -> c_int {
                run($comm, stringify!($name), |l| {
                    crate::need(req, "request")?;
                    $($(
                        // SAFETY: the program's array, of as many entries
                        // as MPI gives it for this rank.
                        let $k = unsafe { Kept::new($k, ($n)(l)?) };
                    )+)?
                    // Its own communicator (a bare duplicate, made now,
                    // while every rank makes its persistent collectives in
                    // one order): MPI matches them by the order of their
                    // inits, and their starts may come in any order.
                    let $comm = private_comm(l, $comm)?;
                    let start = move |l: &Lib, out: *mut Handle| {
                        $($( let $k = $k.ptr(); )+)?
                        // SAFETY: the program's arguments, which MPI leaves
                        // to the request (the buffers) until it is freed,
                        // or the request's copies (the arrays); `out` is
                        // the caller's handle.
                        quiet(l, $comm, || unsafe { $start($($a),*, out) })
                    };
                    let h = l.add_req(Req::PColl(crate::state::PColl {
                        start: Rc::new(start),
                        active: abi::REQUEST_NULL,
                        done: None,
                        comm: $comm,
                    }));
                    // SAFETY: checked not null above.
                    unsafe { set(req, h, "request") }?;
                    Ok(())
                })
            }
        )*}
    };
}

persistent_coll! {
    MPI_Barrier_init, PMPI_Barrier_init, crate::coll::PMPI_Ibarrier => (comm: Handle) comm = comm;
    MPI_Bcast_init, PMPI_Bcast_init, crate::coll::PMPI_Ibcast => (buf: *mut c_void, n: c_int, dt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Gather_init, PMPI_Gather_init, PMPI_Igather => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Gatherv_init, PMPI_Gatherv_init, PMPI_Igatherv => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm, keep rcounts: |l| at_root(l, comm, root), rdispls: |l| at_root(l, comm, root);
    MPI_Scatter_init, PMPI_Scatter_init, PMPI_Iscatter => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Scatterv_init, PMPI_Scatterv_init, PMPI_Iscatterv => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) comm = comm, keep scounts: |l| at_root(l, comm, root), sdispls: |l| at_root(l, comm, root);
    MPI_Allgather_init, PMPI_Allgather_init, crate::coll::PMPI_Iallgather => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, comm: Handle) comm = comm;
    MPI_Allgatherv_init, PMPI_Allgatherv_init, PMPI_Iallgatherv => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, comm: Handle) comm = comm, keep rcounts: |l| peers(l, comm), rdispls: |l| peers(l, comm);
    MPI_Alltoall_init, PMPI_Alltoall_init, crate::coll::PMPI_Ialltoall => (s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, comm: Handle) comm = comm;
    MPI_Alltoallv_init, PMPI_Alltoallv_init, PMPI_Ialltoallv => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, comm: Handle) comm = comm, keep scounts: |l| peers(l, comm), sdispls: |l| peers(l, comm), rcounts: |l| peers(l, comm), rdispls: |l| peers(l, comm);
    MPI_Alltoallw_init, PMPI_Alltoallw_init, PMPI_Ialltoallw => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: *const Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: *const Handle, comm: Handle) comm = comm, keep scounts: |l| peers(l, comm), sdispls: |l| peers(l, comm), sdt: |l| peers(l, comm), rcounts: |l| peers(l, comm), rdispls: |l| peers(l, comm), rdt: |l| peers(l, comm);
    MPI_Reduce_init, PMPI_Reduce_init, crate::coll::PMPI_Ireduce => (s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, root: c_int, comm: Handle) comm = comm;
    MPI_Allreduce_init, PMPI_Allreduce_init, crate::coll::PMPI_Iallreduce => (s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Reduce_scatter_init, PMPI_Reduce_scatter_init, PMPI_Ireduce_scatter => (s: *const c_void, r: *mut c_void, counts: *const c_int, dt: Handle, op: Handle, comm: Handle) comm = comm, keep counts: |l| local(l, comm);
    MPI_Reduce_scatter_block_init, PMPI_Reduce_scatter_block_init, PMPI_Ireduce_scatter_block => (s: *const c_void, r: *mut c_void, k: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Scan_init, PMPI_Scan_init, PMPI_Iscan => (s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Exscan_init, PMPI_Exscan_init, PMPI_Iexscan => (s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) comm = comm;
    MPI_Neighbor_allgather_init, PMPI_Neighbor_allgather_init, PMPI_Ineighbor_allgather => (s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rc: c_int, rt: Handle, comm: Handle) comm = comm;
    MPI_Neighbor_allgatherv_init, PMPI_Neighbor_allgatherv_init, PMPI_Ineighbor_allgatherv => (s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, comm: Handle) comm = comm, keep rcounts: |l| degree(l, comm, true), rdispls: |l| degree(l, comm, true);
    MPI_Neighbor_alltoall_init, PMPI_Neighbor_alltoall_init, PMPI_Ineighbor_alltoall => (s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rc: c_int, rt: Handle, comm: Handle) comm = comm;
    MPI_Neighbor_alltoallv_init, PMPI_Neighbor_alltoallv_init, PMPI_Ineighbor_alltoallv => (s: *const c_void, scounts: *const c_int, sdispls: *const c_int, st: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, comm: Handle) comm = comm, keep scounts: |l| degree(l, comm, false), sdispls: |l| degree(l, comm, false), rcounts: |l| degree(l, comm, true), rdispls: |l| degree(l, comm, true);
    MPI_Neighbor_alltoallw_init, PMPI_Neighbor_alltoallw_init, PMPI_Ineighbor_alltoallw => (s: *const c_void, scounts: *const c_int, sdispls: *const Aint, sts: *const Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const Aint, rts: *const Handle, comm: Handle) comm = comm, keep scounts: |l| degree(l, comm, false), sdispls: |l| degree(l, comm, false), sts: |l| degree(l, comm, false), rcounts: |l| degree(l, comm, true), rdispls: |l| degree(l, comm, true), rts: |l| degree(l, comm, true);
}
