//! tandem as an MPI library with MPICH's binary interface.
//!
//! Built as `libmpich.so.12` (see `scripts/build-mpi.sh`), this crate lets a
//! program compiled against MPICH's `mpi.h` — by `mpicc.mpich`, or
//! mpi4py's wheel — run on tandem unchanged: point `LD_LIBRARY_PATH` at
//! `target/mpi/lib`. Every function is exported under its `MPI_` name and
//! its `PMPI_` name (the profiling interface: a tool may define `MPI_Send`
//! and call `PMPI_Send`).
//!
//! The layers, top down:
//!
//! ```text
//! exports (env, comm, p2p, coll, rma, io, ft, …)  C entry points: handles in, error codes out
//!   state                                       handle tables, errors, error handlers
//!   datatype, op                                MPI datatypes (pack/unpack) and reductions
//! tandem_driver::Comm                           transports, matching, tandem's collectives
//! ```

#![allow(clippy::missing_safety_doc)]
#![allow(clippy::too_many_arguments)]

pub mod abi;
pub mod datatype;
pub mod op;
pub mod state;

mod coll;
mod comm;
mod env;
mod extra;
mod ft;
mod inter;
mod io;
mod p2p;
mod rma;
mod tool;
mod topo;
mod types;
mod unsupported;
#[cfg(target_arch = "x86_64")]
mod x87;

use state::{lib, Fail, Lib};
use std::ffi::c_int;

/// Defines each exported function twice: `PMPI_x` with the body, and
/// `MPI_x` calling it (so a profiling tool's own `MPI_x` can wrap ours).
#[macro_export]
#[doc(hidden)]
macro_rules! export {
    ($( fn $name:ident, $pname:ident ( $($a:ident : $t:ty),* $(,)? ) -> c_int $body:block )*) => {$(
        #[doc = concat!("`", stringify!($pname), "`: the profiling name of `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> std::ffi::c_int $body

        #[doc = concat!("`", stringify!($name), "`, as the MPI standard defines it (see README's table for what tandem supports).")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> std::ffi::c_int {
            $pname($($a),*)
        }
    )*};
}

/// Runs a call whose errors go to `comm`'s error handler.
#[inline(always)]
pub(crate) fn run(
    comm: abi::Handle,
    name: &'static str,
    f: impl FnOnce(&'static Lib) -> Result<(), Fail>,
) -> c_int {
    let Some(l) = lib() else {
        return not_running(name);
    };
    match f(l) {
        Ok(()) => abi::SUCCESS,
        Err(e) => raise(l, comm, name, e),
    }
}

/// A call made before `MPI_Init` or after `MPI_Finalize`.
#[cold]
pub(crate) fn not_running(name: &str) -> c_int {
    let when = if state::ended() {
        "after MPI_Finalize"
    } else {
        "before MPI_Init"
    };
    eprintln!("tandem: {name} called {when}");
    abi::ERR_OTHER
}

/// Hands a failure to the error handler of `comm` (of `MPI_COMM_WORLD` if
/// `comm` is not a valid communicator); returns the code if the handler
/// returns.
#[cold]
#[inline(never)]
pub(crate) fn raise(l: &Lib, comm: abi::Handle, name: &str, e: Fail) -> c_int {
    let code = state::error_code(Some(l), &e);
    let (h, handler) = match l.any_comm(comm) {
        Ok(c) => (comm, state::errhandler_of(l, &c)),
        Err(_) => (abi::COMM_WORLD, state::world_errhandler(l)),
    };
    invoke_handler(l, handler, h, code, name, || {
        format!("{} (MPI error class {})", e.msg, e.class)
    })
}

/// Runs error handler `handler` (already resolved: see
/// [`state::errhandler_of`]) for error `code` on the communicator or
/// window `h`: returns if the handler returns, with the code the failed
/// call returns — `code`, or what the program's handler left in it (as
/// MPICH returns it); `MPI_ERRORS_ARE_FATAL` and `MPI_ERRORS_ABORT` end
/// the process with `name` and `what()` in the message. One place for
/// `raise`, the windows' and files' errors and the `_call_errhandler`
/// calls.
#[cold]
pub(crate) fn invoke_handler(
    l: &Lib,
    handler: abi::Handle,
    mut h: abi::Handle,
    code: c_int,
    name: &str,
    what: impl FnOnce() -> String,
) -> c_int {
    match handler {
        abi::ERRORS_RETURN => code,
        abi::ERRORS_ARE_FATAL | abi::ERRORS_ABORT => {
            eprintln!(
                "tandem: {name}: {}; aborting (MPI_ERRORS_ARE_FATAL)",
                what()
            );
            std::process::exit(1);
        }
        other => {
            if let Some(f) = l.errhandler_fn(other) {
                let mut c = code;
                // SAFETY: a function the program registered with
                // MPI_Comm_create_errhandler (or the window's), called as
                // MPI specifies (the variadic tail is empty).
                unsafe { f(&mut h, &mut c) };
                return c;
            }
            code
        }
    }
}

/// What `MPI_Comm_call_errhandler`'s (or the window's) fatal handler
/// prints for the program's `code`.
pub(crate) fn call_message(code: c_int) -> String {
    let what = state::code_message(code).unwrap_or_else(|| "an error".into());
    format!("{what} (error code {code})")
}

/// Turns a C count into a `usize`.
///
/// # Errors
/// `MPI_ERR_COUNT` for a negative count.
#[inline(always)]
pub(crate) fn count(n: c_int) -> Result<usize, Fail> {
    if n < 0 {
        return Err(Fail::new(abi::ERR_COUNT, format!("negative count {n}")));
    }
    Ok(n as usize)
}

/// Fails with `class`.
pub(crate) fn fail<T>(class: c_int, msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::new(class, msg.into()))
}

/// Writes a Rust string into a C buffer of `cap` bytes (NUL-terminated,
/// truncated to fit); returns the length written without the NUL.
///
/// # Safety
/// `dst` points to `cap` writable bytes.
pub(crate) unsafe fn put_str(dst: *mut std::ffi::c_char, cap: usize, s: &str) -> c_int {
    if dst.is_null() || cap == 0 {
        return 0;
    }
    let n = s.len().min(cap - 1);
    // SAFETY: the caller gives `cap` writable bytes at `dst`; n + 1 <= cap.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), dst.cast(), n);
        *dst.add(n) = 0;
    }
    n as c_int
}

/// Checks an output argument the program must give (MPI allows no null
/// pointer there): done before a call acts, so that a refused call
/// changes nothing.
///
/// # Errors
/// `MPI_ERR_ARG` naming `what` for a null pointer.
#[inline(always)]
pub(crate) fn need<T>(p: *mut T, what: &str) -> Result<*mut T, Fail> {
    if p.is_null() {
        return null_arg(what);
    }
    Ok(p)
}

/// Checks the out-parameter `p` (`what`) and stores `null` in it first, so
/// that a call creating an object that fails leaves the null handle
/// there (MPI_COMM_NULL, as MPICH leaves).
pub(crate) fn null_first(p: *mut abi::Handle, null: abi::Handle, what: &str) -> Result<(), Fail> {
    // SAFETY: the program's out-parameter, checked non-null by `need`.
    unsafe { need(p, what)?.write(null) };
    Ok(())
}

#[cold]
fn null_arg<T>(what: &str) -> Result<T, Fail> {
    fail(abi::ERR_ARG, format!("{what} is a null pointer"))
}

/// Writes `v` through the output argument `p`, which must not be null.
///
/// # Errors
/// `MPI_ERR_ARG` naming `what` for a null pointer (nothing written).
///
/// # Safety
/// `p` is null or valid for a write of `T`.
#[inline(always)]
pub(crate) unsafe fn set<T>(p: *mut T, v: T, what: &str) -> Result<(), Fail> {
    // SAFETY: the caller's promise; `need` refused null.
    unsafe { need(p, what)?.write(v) };
    Ok(())
}

/// The program's array of `n` entries at `p` (empty for `n` = 0, whatever
/// `p` is).
///
/// # Errors
/// `MPI_ERR_ARG` naming `what` for a null `p` with `n` > 0.
///
/// # Safety
/// `p` is null or holds `n` readable entries.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's promise; `need` refused null.
    Ok(unsafe { std::slice::from_raw_parts(need(p.cast_mut(), what)?, n) })
}

/// [`array`] for an output array of `n` writable entries.
///
/// # Errors
/// `MPI_ERR_ARG` naming `what` for a null `p` with `n` > 0.
///
/// # Safety
/// `p` is null or holds `n` writable entries.
pub(crate) unsafe fn array_mut<'a, T>(
    p: *mut T,
    n: usize,
    what: &str,
) -> Result<&'a mut [T], Fail> {
    if n == 0 {
        return Ok(&mut []);
    }
    // SAFETY: the caller's promise; `need` refused null.
    Ok(unsafe { std::slice::from_raw_parts_mut(need(p, what)?, n) })
}

/// Writes `v` through `p` if it is not null: for the arguments MPI lets a
/// program leave out, and for callbacks that cannot report an error.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
#[inline(always)]
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller's promise.
        unsafe { p.write(v) }
    }
}
