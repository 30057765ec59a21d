//! The MPI tool information interface (`MPI_T_*`, MPI 3.1): no control
//! variables (tandem's settings come from `TANDEM_*` at start and do not
//! change while a job runs), and tandem's own counters as performance
//! variables, in one category `tandem`:
//!
//! | pvar | what it counts (this process, since it started) |
//! |---|---|
//! | `tandem_pulled` | rendezvous receives pulled single-copy |
//! | `tandem_streamed` | rendezvous receives streamed by the sender |
//! | `tandem_idle_polls` | polls of blocking calls that found nothing |
//! | `tandem_yields` | `sched_yield` calls of blocking calls |
//! | `tandem_sleeps` | sleeps of blocking calls |
//! | `tandem_cells` | eager payloads sent through a shared-memory cell |
//!
//! Each is a read-only, continuous counter (`MPI_T_PVAR_CLASS_COUNTER`,
//! `MPI_UNSIGNED_LONG_LONG`, bound to no object): `MPI_T_pvar_read` gives
//! its value now (0 before `MPI_Init` and after `MPI_Finalize`); start,
//! stop, write and reset are refused as the standard says for such
//! variables. The interface may be used before `MPI_Init`, and returns
//! error codes (no error handlers), as MPI specifies.

use crate::abi::{self, Handle};
use crate::export;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// `MPI_T_pvar_session`, `MPI_T_pvar_handle`, `MPI_T_cvar_handle`,
/// `MPI_T_enum`: pointers in MPICH's interface.
pub type TObj = usize;

const T_ERR_NOT_INITIALIZED: c_int = 60;
const T_ERR_INVALID_INDEX: c_int = 62;
const T_ERR_INVALID_HANDLE: c_int = 64;
const T_ERR_INVALID_SESSION: c_int = 67;
const T_ERR_PVAR_NO_STARTSTOP: c_int = 70;
const T_ERR_PVAR_NO_WRITE: c_int = 71;
const T_ERR_INVALID_NAME: c_int = 73;
const T_ERR_INVALID: c_int = 74;
const VERBOSITY_USER_BASIC: c_int = 221;
const BIND_NO_OBJECT: c_int = 9700;
const PVAR_CLASS_COUNTER: c_int = 246;

/// The performance variables: name and description.
const PVARS: [(&str, &str); 6] = [
    (
        "tandem_pulled",
        "rendezvous receives whose payload was pulled single-copy from the sender's buffer",
    ),
    (
        "tandem_streamed",
        "rendezvous receives whose payload the sender streamed",
    ),
    (
        "tandem_idle_polls",
        "polls of blocking calls that found nothing to do",
    ),
    ("tandem_yields", "sched_yield calls of blocking calls"),
    ("tandem_sleeps", "sleeps of blocking calls"),
    (
        "tandem_cells",
        "eager payloads sent through a shared-memory eager cell",
    ),
];
const CATEGORY: (&str, &str) = ("tandem", "tandem's transport counters");

/// `MPI_T_init_thread` calls not yet matched by `MPI_T_finalize`.
static INITS: AtomicI32 = AtomicI32::new(0);

/// Live sessions and handles (`(handle, session, pvar)`).
static OBJS: Mutex<Objs> = Mutex::new(Objs {
    next: 1,
    sessions: Vec::new(),
    handles: Vec::new(),
});

struct Objs {
    next: usize,
    sessions: Vec<usize>,
    handles: Vec<(usize, usize, usize)>,
}

/// Session and handle values: a base that no real pointer here has, plus
/// a serial number (never 0, never reused).
const OBJ_BASE: usize = 0x7a4e_0000_0000;

/// `MPI_T_PVAR_ALL_HANDLES`: a distinct address.
#[no_mangle]
pub static MPI_T_PVAR_ALL_HANDLES: crate::unsupported::Marker =
    crate::unsupported::Marker::new(&ALL_HANDLES_TARGET);
static ALL_HANDLES_TARGET: c_int = 0;

fn all_handles() -> usize {
    MPI_T_PVAR_ALL_HANDLES.addr() as usize
}

fn ready() -> Result<(), c_int> {
    if INITS.load(Ordering::Acquire) > 0 {
        Ok(())
    } else {
        Err(T_ERR_NOT_INITIALIZED)
    }
}

fn code(r: Result<(), c_int>) -> c_int {
    r.err().unwrap_or(abi::SUCCESS)
}

fn objs() -> std::sync::MutexGuard<'static, Objs> {
    OBJS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The value of performance variable `i` now.
fn value(i: usize) -> u64 {
    let Some(l) = crate::state::lib() else {
        return 0;
    };
    let c = l.world.p2p.counters();
    [
        c.pulled,
        c.streamed,
        c.idle_polls,
        c.yields,
        c.sleeps,
        c.cells,
    ][i]
}

/// MPI_T's string out-parameters: copies `s` into `buf` (of `*len` bytes
/// on entry) where both are given, and sets `*len` to its length with the
/// NUL.
unsafe fn out_str(buf: *mut c_char, len: *mut c_int, s: &str) {
    if len.is_null() {
        return;
    }
    // SAFETY: the program's length argument, checked non-null.
    let cap = unsafe { *len };
    if !buf.is_null() && cap > 0 {
        // SAFETY: `buf` holds `cap` bytes, as the program says.
        unsafe { crate::put_str(buf, cap as usize, s) };
    }
    // SAFETY: as above.
    unsafe { *len = s.len() as c_int + 1 };
}

/// A name argument.
unsafe fn name_of(p: *const c_char) -> Option<String> {
    // SAFETY: a NUL-terminated string from the program, if not null.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn session_ok(o: &Objs, s: TObj) -> Result<(), c_int> {
    if o.sessions.contains(&s) {
        Ok(())
    } else {
        Err(T_ERR_INVALID_SESSION)
    }
}

/// The pvar of handle `h` in session `s`.
fn handle_pvar(s: TObj, h: TObj) -> Result<usize, c_int> {
    ready()?;
    let o = objs();
    session_ok(&o, s)?;
    o.handles
        .iter()
        .find(|x| x.0 == h && x.1 == s)
        .map(|x| x.2)
        .ok_or(T_ERR_INVALID_HANDLE)
}

export! {
    fn MPI_T_init_thread, PMPI_T_init_thread(required: c_int, provided: *mut c_int) -> c_int {
        if provided.is_null() {
            return T_ERR_INVALID;
        }
        INITS.fetch_add(1, Ordering::AcqRel);
        // The library's level (as MPI_Init_thread gives it).
        *provided = required.min(abi::THREAD_SERIALIZED);
        abi::SUCCESS
    }

    fn MPI_T_finalize, PMPI_T_finalize() -> c_int {
        let r = INITS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n > 0).then(|| n - 1));
        if r.is_err() {
            return T_ERR_NOT_INITIALIZED;
        }
        abi::SUCCESS
    }

    fn MPI_T_enum_get_info, PMPI_T_enum_get_info(_enumtype: TObj, _num: *mut c_int, _name: *mut c_char, _name_len: *mut c_int) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_HANDLE)))
    }

    fn MPI_T_enum_get_item, PMPI_T_enum_get_item(_enumtype: TObj, _index: c_int, _value: *mut c_int, _name: *mut c_char, _name_len: *mut c_int) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_HANDLE)))
    }

    fn MPI_T_cvar_get_num, PMPI_T_cvar_get_num(num: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if num.is_null() {
                return Err(T_ERR_INVALID);
            }
            *num = 0;
            Ok(())
        }))
    }

    fn MPI_T_cvar_get_info, PMPI_T_cvar_get_info(_index: c_int, _name: *mut c_char, _name_len: *mut c_int, _verbosity: *mut c_int, _datatype: *mut Handle, _enumtype: *mut TObj, _desc: *mut c_char, _desc_len: *mut c_int, _bind: *mut c_int, _scope: *mut c_int) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_INDEX)))
    }

    fn MPI_T_cvar_get_index, PMPI_T_cvar_get_index(_name: *const c_char, _index: *mut c_int) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_NAME)))
    }

    fn MPI_T_cvar_handle_alloc, PMPI_T_cvar_handle_alloc(_index: c_int, _obj_handle: *mut c_void, _handle: *mut TObj, _count: *mut c_int) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_INDEX)))
    }

    fn MPI_T_cvar_handle_free, PMPI_T_cvar_handle_free(_handle: *mut TObj) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_HANDLE)))
    }

    fn MPI_T_cvar_read, PMPI_T_cvar_read(_handle: TObj, _buf: *mut c_void) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_HANDLE)))
    }

    fn MPI_T_cvar_write, PMPI_T_cvar_write(_handle: TObj, _buf: *const c_void) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_HANDLE)))
    }

    fn MPI_T_pvar_get_num, PMPI_T_pvar_get_num(num: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if num.is_null() {
                return Err(T_ERR_INVALID);
            }
            *num = PVARS.len() as c_int;
            Ok(())
        }))
    }

    fn MPI_T_pvar_get_info, PMPI_T_pvar_get_info(index: c_int, name: *mut c_char, name_len: *mut c_int, verbosity: *mut c_int, var_class: *mut c_int, datatype: *mut Handle, enumtype: *mut TObj, desc: *mut c_char, desc_len: *mut c_int, bind: *mut c_int, readonly: *mut c_int, continuous: *mut c_int, atomic: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            let Some(&(n, d)) = usize::try_from(index).ok().and_then(|i| PVARS.get(i)) else {
                return Err(T_ERR_INVALID_INDEX);
            };
            out_str(name, name_len, n);
            out_str(desc, desc_len, d);
            crate::put(verbosity, VERBOSITY_USER_BASIC);
            crate::put(var_class, PVAR_CLASS_COUNTER);
            crate::put(datatype, abi::UNSIGNED_LONG_LONG);
            crate::put(enumtype, 0);
            crate::put(bind, BIND_NO_OBJECT);
            crate::put(readonly, 1);
            crate::put(continuous, 1);
            crate::put(atomic, 0);
            Ok(())
        }))
    }

    fn MPI_T_pvar_get_index, PMPI_T_pvar_get_index(name: *const c_char, var_class: c_int, index: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if index.is_null() {
                return Err(T_ERR_INVALID);
            }
            let n = name_of(name).ok_or(T_ERR_INVALID)?;
            match PVARS.iter().position(|p| p.0 == n) {
                Some(i) if var_class == PVAR_CLASS_COUNTER => {
                    *index = i as c_int;
                    Ok(())
                }
                _ => Err(T_ERR_INVALID_NAME),
            }
        }))
    }

    fn MPI_T_pvar_session_create, PMPI_T_pvar_session_create(session: *mut TObj) -> c_int {
        code(ready().and_then(|()| {
            if session.is_null() {
                return Err(T_ERR_INVALID);
            }
            let mut o = objs();
            let s = OBJ_BASE + 16 * o.next;
            o.next += 1;
            o.sessions.push(s);
            *session = s;
            Ok(())
        }))
    }

    fn MPI_T_pvar_session_free, PMPI_T_pvar_session_free(session: *mut TObj) -> c_int {
        code(ready().and_then(|()| {
            if session.is_null() {
                return Err(T_ERR_INVALID);
            }
            let s = *session;
            let mut o = objs();
            session_ok(&o, s)?;
            o.sessions.retain(|&x| x != s);
            o.handles.retain(|x| x.1 != s);
            *session = 0;
            Ok(())
        }))
    }

    fn MPI_T_pvar_handle_alloc, PMPI_T_pvar_handle_alloc(session: TObj, index: c_int, _obj_handle: *mut c_void, handle: *mut TObj, count: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if handle.is_null() || count.is_null() {
                return Err(T_ERR_INVALID);
            }
            let mut o = objs();
            session_ok(&o, session)?;
            let i = usize::try_from(index).ok().filter(|&i| i < PVARS.len()).ok_or(T_ERR_INVALID_INDEX)?;
            let h = OBJ_BASE + 16 * o.next;
            o.next += 1;
            o.handles.push((h, session, i));
            *handle = h;
            *count = 1;
            Ok(())
        }))
    }

    fn MPI_T_pvar_handle_free, PMPI_T_pvar_handle_free(session: TObj, handle: *mut TObj) -> c_int {
        code(ready().and_then(|()| {
            if handle.is_null() {
                return Err(T_ERR_INVALID);
            }
            let h = *handle;
            handle_pvar(session, h)?;
            objs().handles.retain(|x| x.0 != h);
            *handle = 0;
            Ok(())
        }))
    }

    fn MPI_T_pvar_start, PMPI_T_pvar_start(session: TObj, handle: TObj) -> c_int {
        // Continuous variables: nothing to start (all handles: none that
        // can be, which succeeds).
        code(if handle == all_handles() {
            ready().and_then(|()| session_ok(&objs(), session))
        } else {
            handle_pvar(session, handle).and(Err(T_ERR_PVAR_NO_STARTSTOP))
        })
    }

    fn MPI_T_pvar_stop, PMPI_T_pvar_stop(session: TObj, handle: TObj) -> c_int {
        code(if handle == all_handles() {
            ready().and_then(|()| session_ok(&objs(), session))
        } else {
            handle_pvar(session, handle).and(Err(T_ERR_PVAR_NO_STARTSTOP))
        })
    }

    fn MPI_T_pvar_read, PMPI_T_pvar_read(session: TObj, handle: TObj, buf: *mut c_void) -> c_int {
        code(handle_pvar(session, handle).and_then(|i| {
            if buf.is_null() {
                return Err(T_ERR_INVALID);
            }
            buf.cast::<u64>().write_unaligned(value(i));
            Ok(())
        }))
    }

    fn MPI_T_pvar_write, PMPI_T_pvar_write(session: TObj, handle: TObj, _buf: *const c_void) -> c_int {
        code(handle_pvar(session, handle).and(Err(T_ERR_PVAR_NO_WRITE)))
    }

    fn MPI_T_pvar_reset, PMPI_T_pvar_reset(session: TObj, handle: TObj) -> c_int {
        code(if handle == all_handles() {
            ready().and_then(|()| session_ok(&objs(), session))
        } else {
            handle_pvar(session, handle).and(Err(T_ERR_PVAR_NO_WRITE))
        })
    }

    fn MPI_T_pvar_readreset, PMPI_T_pvar_readreset(session: TObj, handle: TObj, _buf: *mut c_void) -> c_int {
        code(handle_pvar(session, handle).and(Err(T_ERR_PVAR_NO_WRITE)))
    }

    fn MPI_T_category_get_num, PMPI_T_category_get_num(num: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if num.is_null() {
                return Err(T_ERR_INVALID);
            }
            *num = 1;
            Ok(())
        }))
    }

    fn MPI_T_category_get_info, PMPI_T_category_get_info(index: c_int, name: *mut c_char, name_len: *mut c_int, desc: *mut c_char, desc_len: *mut c_int, num_cvars: *mut c_int, num_pvars: *mut c_int, num_categories: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if index != 0 {
                return Err(T_ERR_INVALID_INDEX);
            }
            out_str(name, name_len, CATEGORY.0);
            out_str(desc, desc_len, CATEGORY.1);
            crate::put(num_cvars, 0);
            crate::put(num_pvars, PVARS.len() as c_int);
            crate::put(num_categories, 0);
            Ok(())
        }))
    }

    fn MPI_T_category_get_index, PMPI_T_category_get_index(name: *const c_char, index: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if index.is_null() {
                return Err(T_ERR_INVALID);
            }
            if name_of(name).as_deref() != Some(CATEGORY.0) {
                return Err(T_ERR_INVALID_NAME);
            }
            *index = 0;
            Ok(())
        }))
    }

    fn MPI_T_category_get_cvars, PMPI_T_category_get_cvars(index: c_int, _len: c_int, _indices: *mut c_int) -> c_int {
        code(ready().and(if index == 0 { Ok(()) } else { Err(T_ERR_INVALID_INDEX) }))
    }

    fn MPI_T_category_get_pvars, PMPI_T_category_get_pvars(index: c_int, len: c_int, indices: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if index != 0 {
                return Err(T_ERR_INVALID_INDEX);
            }
            let n = (len.max(0) as usize).min(PVARS.len());
            if n > 0 && indices.is_null() {
                return Err(T_ERR_INVALID);
            }
            for i in 0..n {
                *indices.add(i) = i as c_int;
            }
            Ok(())
        }))
    }

    fn MPI_T_category_get_categories, PMPI_T_category_get_categories(index: c_int, _len: c_int, _indices: *mut c_int) -> c_int {
        code(ready().and(if index == 0 { Ok(()) } else { Err(T_ERR_INVALID_INDEX) }))
    }

    fn MPI_T_category_changed, PMPI_T_category_changed(stamp: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if stamp.is_null() {
                return Err(T_ERR_INVALID);
            }
            *stamp = 0;
            Ok(())
        }))
    }

    // MPI 4.0's events and sources: tandem has none, which a tool can
    // ask (getting 0) rather than fail to load.
    fn MPI_T_event_get_num, PMPI_T_event_get_num(num: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if num.is_null() {
                return Err(T_ERR_INVALID);
            }
            *num = 0;
            Ok(())
        }))
    }

    fn MPI_T_event_get_index, PMPI_T_event_get_index(_name: *const c_char, _index: *mut c_int) -> c_int {
        code(ready().and(Err(T_ERR_INVALID_NAME)))
    }

    fn MPI_T_source_get_num, PMPI_T_source_get_num(num: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if num.is_null() {
                return Err(T_ERR_INVALID);
            }
            *num = 0;
            Ok(())
        }))
    }

    fn MPI_T_category_get_num_events, PMPI_T_category_get_num_events(index: c_int, num: *mut c_int) -> c_int {
        code(ready().and_then(|()| {
            if index != 0 {
                return Err(T_ERR_INVALID_INDEX);
            }
            if num.is_null() {
                return Err(T_ERR_INVALID);
            }
            *num = 0;
            Ok(())
        }))
    }

    fn MPI_T_category_get_events, PMPI_T_category_get_events(index: c_int, _len: c_int, _indices: *mut c_int) -> c_int {
        code(ready().and(if index == 0 { Ok(()) } else { Err(T_ERR_INVALID_INDEX) }))
    }
}
