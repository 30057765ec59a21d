//! Starting and ending, the environment, errors and error handlers.

use crate::abi::{self, Handle};
use crate::datatype::Types;
use crate::op::Ops;
use crate::state::{self, lib, CommObj, ErrFn, Fail, Lib, Slab};
use crate::{export, fail, put, put_str, run, set};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_double, c_int, c_void};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Instant;
use tandem_driver::Comm;

/// The MPI version this library implements (of its functions, MPI-3.1's
/// semantics; see README for what is left out).
pub const VERSION: (c_int, c_int) = (3, 1);

/// The text `MPI_Get_library_version` reports; programs (and mpi4py's
/// tests here) look for "tandem" in it.
pub fn library_version() -> String {
    format!(
        "tandem {} (MPICH ABI, libmpich.so.12; MPI {}.{})",
        env!("CARGO_PKG_VERSION"),
        VERSION.0,
        VERSION.1
    )
}

/// The clock `MPI_Wtime` reads.
fn epoch() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

fn init(required: c_int) -> Result<c_int, Fail> {
    if state::started() {
        return fail(abi::ERR_OTHER, "MPI_Init called twice");
    }
    epoch();
    let job = if Comm::launched() {
        Comm::from_env()?
    } else {
        // Started without a launcher: a job of one, as MPI allows.
        Comm::local(1)?
    };
    let n = job.size();
    let me = job.rank();
    let world_group: Rc<[u32]> = (0..n as u32).collect();
    let world_inverse: Rc<[i32]> = (0..n as i32).collect();
    let world = CommObj {
        p2p: job.dup_with_context(1)?,
        coll: job.dup_with_context(2)?,
        group: world_group,
        inverse: world_inverse,
        rank: me,
        contexts: [1, 2],
        whole: true,
        engine: true,
        errhandler: Cell::new(crate::state::DEFAULT_ERRHANDLER),
        attrs: RefCell::new(Vec::new()),
        name: RefCell::new("MPI_COMM_WORLD".into()),
        ft: RefCell::new(None),
        acked: RefCell::new(Rc::from(Vec::new())),
        topo: RefCell::new(None),
        remote: None,
    };
    let mut inv = vec![-1i32; n];
    inv[me] = 0;
    let selfc = CommObj {
        p2p: job.dup_with_context(3)?,
        coll: job.dup_with_context(4)?,
        group: Rc::from(vec![me as u32]),
        inverse: Rc::from(inv),
        rank: 0,
        contexts: [3, 4],
        whole: n == 1,
        engine: true,
        errhandler: Cell::new(crate::state::DEFAULT_ERRHANDLER),
        attrs: RefCell::new(Vec::new()),
        name: RefCell::new("MPI_COMM_SELF".into()),
        ft: RefCell::new(None),
        acked: RefCell::new(Rc::from(Vec::new())),
        topo: RefCell::new(None),
        remote: None,
    };
    let mut comms = Slab::default();
    let world = Rc::new(world);
    comms.insert(world.clone());
    comms.insert(Rc::new(selfc));
    // Contexts 0..=4 are taken (0: the job's own, unused by MPI calls),
    // and the last, tandem's fault-tolerance traffic.
    let mut free: state::Mask = [u64::MAX; tandem_driver::CONTEXT_WORDS];
    free[0] &= !0x1f;
    state::clear(&mut free, state::FT_CONTEXT);
    let provided = required.clamp(abi::THREAD_SINGLE, abi::THREAD_SERIALIZED);
    state::install(Lib {
        job,
        comms: RefCell::new(comms),
        world,
        reqs: RefCell::new(Slab::default()),
        types: RefCell::new(Types::new()),
        ops: RefCell::new(Ops::new()),
        keyvals: RefCell::new(Slab::default()),
        errhandlers: RefCell::new(Slab::default()),
        groups: RefCell::new(Slab::default()),
        free_ctx: Cell::new(free),
        thread_level: provided,
        main_thread: std::thread::current().id(),
        messages: RefCell::new(Vec::new()),
        next_message: Cell::new(0),
        detached: Cell::new(0),
        extra: Default::default(),
    });
    Ok(provided)
}

/// Init's failure: no communicator has a handler yet, so it is fatal
/// unless the program asked otherwise (it cannot have).
fn init_failed(name: &str, e: Fail) -> c_int {
    eprintln!("tandem: {name}: {} (MPI error class {})", e.msg, e.class);
    std::process::exit(1);
}

fn finalize(l: &'static Lib) -> Result<(), Fail> {
    // MPI: attributes of MPI_COMM_SELF are deleted first, as if it were
    // freed, then those of MPI_COMM_WORLD.
    crate::comm::delete_attrs(l, abi::COMM_SELF)?;
    crate::comm::delete_attrs(l, abi::COMM_WORLD)?;
    // Every rank has finished its communication once all are here.
    // (Ranks that failed are not waited for: ULFM lets survivors finalize.)
    let w = l.comm(abi::COMM_WORLD)?;
    match w.p2p.barrier() {
        Err(e)
            if matches!(
                state::class_of(&e),
                abi::X_ERR_PROC_FAILED | abi::X_ERR_REVOKED
            ) => {}
        r => r?,
    }
    drop(w);
    let lib = state::uninstall();
    drop(lib);
    Ok(())
}

/// Errors of calls that name no communicator go to `MPI_COMM_WORLD`'s
/// handler.
const NO_COMM: Handle = abi::COMM_WORLD;

export! {
    fn MPI_Init, PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
        match init(abi::THREAD_SINGLE) {
            Ok(_) => abi::SUCCESS,
            Err(e) => init_failed("MPI_Init", e),
        }
    }

    fn MPI_Init_thread, PMPI_Init_thread(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) -> c_int {
        match init(required) {
            Ok(p) => {
                put(provided, p);
                abi::SUCCESS
            }
            Err(e) => init_failed("MPI_Init_thread", e),
        }
    }

    fn MPI_Initialized, PMPI_Initialized(flag: *mut c_int) -> c_int {
        put(flag, state::started() as c_int);
        abi::SUCCESS
    }

    fn MPI_Finalized, PMPI_Finalized(flag: *mut c_int) -> c_int {
        put(flag, state::ended() as c_int);
        abi::SUCCESS
    }

    fn MPI_Finalize, PMPI_Finalize() -> c_int {
        run(NO_COMM, "MPI_Finalize", finalize)
    }

    fn MPI_Query_thread, PMPI_Query_thread(provided: *mut c_int) -> c_int {
        run(NO_COMM, "MPI_Query_thread", |l| {
            set(provided, l.thread_level, "provided")?;
            Ok(())
        })
    }

    fn MPI_Is_thread_main, PMPI_Is_thread_main(flag: *mut c_int) -> c_int {
        run(NO_COMM, "MPI_Is_thread_main", |l| {
            set(flag, (std::thread::current().id() == l.main_thread) as c_int, "flag")?;
            Ok(())
        })
    }

    fn MPI_Abort, PMPI_Abort(comm: Handle, code: c_int) -> c_int {
        let who = lib()
            .map(|l| format!("rank {}", l.job.rank()))
            .unwrap_or_else(|| "a rank".into());
        eprintln!("tandem: MPI_Abort on communicator {comm:#x} by {who} with error code {code}");
        // The launcher (tandem-run, hydra, mpirun, srun) ends the others
        // when one rank exits with a failure; tandem's peers see it lost.
        std::process::exit(if code == 0 { 1 } else { code & 0xff });
    }

    fn MPI_Get_version, PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
        put(version, VERSION.0);
        put(subversion, VERSION.1);
        abi::SUCCESS
    }

    fn MPI_Get_library_version, PMPI_Get_library_version(s: *mut c_char, len: *mut c_int) -> c_int {
        let n = put_str(s, abi::MAX_LIBRARY_VERSION_STRING, &library_version());
        put(len, n);
        abi::SUCCESS
    }

    fn MPI_Get_processor_name, PMPI_Get_processor_name(s: *mut c_char, len: *mut c_int) -> c_int {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most buf.len() bytes into buf.
        let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let name = if r == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        } else {
            "localhost".into()
        };
        let n = put_str(s, abi::MAX_PROCESSOR_NAME, &name);
        put(len, n);
        abi::SUCCESS
    }

    fn MPI_Error_string, PMPI_Error_string(code: c_int, s: *mut c_char, len: *mut c_int) -> c_int {
        let class = state::code_class(code);
        let text = if let Some(m) = crate::extra::user_string(code) {
            m
        } else if crate::extra::user_class(code).is_some() {
            // Added by the program, with no string given.
            String::new()
        } else {
            match state::code_message(code) {
                Some(m) => format!("{}: {m}", class_text(class)),
                None => class_text(class).to_string(),
            }
        };
        let n = put_str(s, abi::MAX_ERROR_STRING, &text);
        put(len, n);
        abi::SUCCESS
    }

    fn MPI_Error_class, PMPI_Error_class(code: c_int, class: *mut c_int) -> c_int {
        put(class, state::code_class(code));
        abi::SUCCESS
    }

    fn MPI_Alloc_mem, PMPI_Alloc_mem(size: isize, _info: Handle, base: *mut c_void) -> c_int {
        run(NO_COMM, "MPI_Alloc_mem", |_| {
            if size < 0 {
                return fail(abi::ERR_ARG, format!("negative size {size}"));
            }
            // SAFETY: plain malloc; the result (or null) is checked.
            let p = unsafe { libc::malloc((size as usize).max(1)) };
            if p.is_null() {
                return fail(abi::ERR_NO_MEM, format!("could not allocate {size} bytes"));
            }
            set(base.cast::<*mut c_void>(), p, "base")?;
            Ok(())
        })
    }

    fn MPI_Free_mem, PMPI_Free_mem(base: *mut c_void) -> c_int {
        // SAFETY: `base` came from MPI_Alloc_mem (malloc), or is null.
        unsafe { libc::free(base) };
        abi::SUCCESS
    }

    fn MPI_Comm_set_errhandler, PMPI_Comm_set_errhandler(comm: Handle, h: Handle) -> c_int {
        run(comm, "MPI_Comm_set_errhandler", |l| {
            let c = l.any_comm(comm)?;
            if !l.errhandler_valid(h) {
                return fail(abi::ERR_ARG, format!("invalid error handler {h:#x}"));
            }
            c.errhandler.set(h);
            Ok(())
        })
    }

    fn MPI_Comm_get_errhandler, PMPI_Comm_get_errhandler(comm: Handle, h: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_get_errhandler", |l| {
            let eh = l.any_comm(comm)?.errhandler.get();
            let eh = if eh == crate::state::DEFAULT_ERRHANDLER { abi::ERRORS_ARE_FATAL } else { eh };
            set(h, eh, "h")?;
            Ok(())
        })
    }

    fn MPI_Errhandler_set, PMPI_Errhandler_set(comm: Handle, h: Handle) -> c_int {
        PMPI_Comm_set_errhandler(comm, h)
    }

    fn MPI_Errhandler_get, PMPI_Errhandler_get(comm: Handle, h: *mut Handle) -> c_int {
        PMPI_Comm_get_errhandler(comm, h)
    }

    fn MPI_Errhandler_create, PMPI_Errhandler_create(f: Option<ErrFn>, h: *mut Handle) -> c_int {
        // MPI-1's name (removed in MPI-3, still exported by MPICH).
        PMPI_Comm_create_errhandler(f, h)
    }

    fn MPI_Comm_create_errhandler, PMPI_Comm_create_errhandler(f: Option<ErrFn>, h: *mut Handle) -> c_int {
        run(NO_COMM, "MPI_Comm_create_errhandler", |l| {
            let Some(f) = f else {
                return fail(abi::ERR_ARG, "null error handler function");
            };
            set(h, l.add_errhandler(f), "h")?;
            Ok(())
        })
    }

    fn MPI_Errhandler_free, PMPI_Errhandler_free(h: *mut Handle) -> c_int {
        run(NO_COMM, "MPI_Errhandler_free", |l| {
            if h.is_null() {
                return fail(abi::ERR_ARG, "null handle pointer");
            }
            // SAFETY: checked non-null; the program passes its handle.
            let v = unsafe { *h };
            if !l.errhandler_valid(v) {
                return fail(abi::ERR_ARG, format!("invalid error handler {v:#x}"));
            }
            // Predefined handlers are not freed; a user handler still set
            // on a communicator keeps working (its function stays known).
            if l.errhandler_fn(v).is_some() && !in_use(l, v) {
                l.remove_errhandler(v);
            }
            // SAFETY: as above.
            unsafe { *h = abi::ERRHANDLER_NULL };
            Ok(())
        })
    }

    fn MPI_Comm_call_errhandler, PMPI_Comm_call_errhandler(comm: Handle, code: c_int) -> c_int {
        run(comm, "MPI_Comm_call_errhandler", |l| {
            let handler = crate::state::errhandler_of(l, &*l.any_comm(comm)?);
            crate::invoke_handler(l, handler, comm, code, "MPI_Comm_call_errhandler", || {
                crate::call_message(code)
            });
            Ok(())
        })
    }
}

/// Whether a user error handler is still set on a communicator.
/// Whether error handler `h` is set on a communicator, window or file
/// (or is `MPI_FILE_NULL`'s): freeing it then leaves it working there.
fn in_use(l: &Lib, h: Handle) -> bool {
    let comms = l.comms.borrow();
    l.world.errhandler.get() == h
        || comms
            .indices()
            .into_iter()
            .any(|i| comms.get(i).is_some_and(|c| c.errhandler.get() == h))
        || crate::rma::uses_errhandler(l, h)
        || crate::io::uses_errhandler(l, h)
}

/// `MPI_Wtime`: seconds since the library was loaded.
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> c_double {
    epoch().elapsed().as_secs_f64()
}

/// `MPI_Wtime`: seconds since the library was loaded (not synchronised
/// between ranks: `MPI_WTIME_IS_GLOBAL` is false).
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    PMPI_Wtime()
}

/// `MPI_Wtick`: the clock's resolution.
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> c_double {
    1e-9
}

/// `MPI_Wtick`: the clock's resolution (nanoseconds, `CLOCK_MONOTONIC`).
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    PMPI_Wtick()
}

/// The standard's words for an error class.
pub fn class_text(class: c_int) -> &'static str {
    match class {
        abi::SUCCESS => "no error",
        abi::ERR_BUFFER => "invalid buffer pointer",
        abi::ERR_COUNT => "invalid count argument",
        abi::ERR_TYPE => "invalid datatype",
        abi::ERR_TAG => "invalid tag",
        abi::ERR_COMM => "invalid communicator",
        abi::ERR_RANK => "invalid rank",
        abi::ERR_ROOT => "invalid root",
        abi::ERR_GROUP => "invalid group",
        abi::ERR_OP => "invalid operation",
        abi::ERR_TOPOLOGY => "invalid topology",
        abi::ERR_DIMS => "invalid dimension argument",
        abi::ERR_ARG => "invalid argument",
        abi::ERR_UNKNOWN => "unknown error",
        abi::ERR_TRUNCATE => "message truncated",
        abi::ERR_OTHER => "other error",
        abi::ERR_INTERN => "internal error",
        abi::ERR_IN_STATUS => "error code is in status",
        abi::ERR_PENDING => "pending request",
        abi::ERR_REQUEST => "invalid request",
        abi::ERR_INFO => "invalid info object",
        abi::ERR_INFO_KEY => "invalid info key",
        abi::ERR_INFO_VALUE => "invalid info value",
        abi::ERR_INFO_NOKEY => "no such info key",
        abi::ERR_NO_MEM => "out of memory",
        abi::ERR_UNSUPPORTED_OPERATION => "unsupported operation",
        abi::ERR_WIN => "invalid window",
        abi::ERR_KEYVAL => "invalid attribute key",
        abi::ERR_ACCESS => "permission denied",
        abi::ERR_AMODE => "invalid file access mode",
        abi::ERR_BAD_FILE => "invalid file name",
        abi::ERR_CONVERSION => "data conversion failed",
        abi::ERR_DUP_DATAREP => "data representation registered already",
        abi::ERR_FILE_EXISTS => "file exists",
        abi::ERR_FILE_IN_USE => "file in use",
        abi::ERR_FILE => "invalid file handle",
        abi::ERR_IO => "I/O error",
        abi::ERR_NOT_SAME => "arguments differ between the ranks of a collective call",
        abi::ERR_NO_SPACE => "no space left",
        abi::ERR_NO_SUCH_FILE => "no such file",
        abi::ERR_QUOTA => "quota exceeded",
        abi::ERR_READ_ONLY => "file is read-only",
        abi::ERR_UNSUPPORTED_DATAREP => "unsupported data representation",
        abi::X_ERR_PROC_FAILED => "process failed",
        abi::X_ERR_REVOKED => "communicator revoked",
        _ => "error",
    }
}
