//! Functions this library does not implement, exported so that programs
//! linked against MPICH load: each fails through `MPI_COMM_WORLD`'s error
//! handler with `MPI_ERR_UNSUPPORTED_OPERATION` and a message naming it
//! ("tandem: MPI_File_open is not supported"). The list is what mpi4py's
//! MPICH-ABI extension needs to load; newer functions (the large-count
//! `_c` ones, MPI-4.1's, `MPI_Abi_get_version`) are left out on purpose:
//! a client that finds them absent falls back to what is here.

use crate::abi;
use std::ffi::c_int;

/// Refuses an unsupported call.
#[cold]
fn refuse(name: &'static str) -> c_int {
    crate::run(abi::COMM_WORLD, name, |_| {
        crate::fail(
            abi::ERR_UNSUPPORTED_OPERATION,
            format!("tandem: {name} is not supported"),
        )
    })
}

macro_rules! unsupported {
    ($($name:ident $pname:ident)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported (fails with `MPI_ERR_UNSUPPORTED_OPERATION`).")]
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            refuse(stringify!($name))
        }
        #[doc = concat!("`", stringify!($pname), "`: not supported.")]
        #[no_mangle]
        pub extern "C" fn $pname() -> c_int {
            refuse(stringify!($name))
        }
    )*};
}

/// `MPI_Pcontrol`: profiling control, a no-op without a profiler.
#[no_mangle]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    abi::SUCCESS
}

/// `PMPI_Pcontrol`.
#[no_mangle]
pub extern "C" fn PMPI_Pcontrol(_level: c_int) -> c_int {
    abi::SUCCESS
}

/// A pointer constant of MPICH's interface.
#[repr(transparent)]
pub struct Marker(*const c_int);

impl Marker {
    /// A marker of `target`'s address.
    pub(crate) const fn new(target: &'static c_int) -> Marker {
        Marker(target)
    }

    /// The address it stands for.
    pub(crate) fn addr(&self) -> *const c_int {
        self.0
    }
}
// SAFETY: the pointer is a constant address, never written through.
unsafe impl Sync for Marker {}

static UNWEIGHTED_TARGET: c_int = 0;
static WEIGHTS_EMPTY_TARGET: c_int = 0;

/// `MPI_UNWEIGHTED`: a distinct address (a distributed graph without weights).
#[no_mangle]
pub static MPI_UNWEIGHTED: Marker = Marker(&UNWEIGHTED_TARGET);
/// `MPI_WEIGHTS_EMPTY`: a distinct address.
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: Marker = Marker(&WEIGHTS_EMPTY_TARGET);

unsupported! {
    MPI_Close_port PMPI_Close_port
    MPI_Comm_accept PMPI_Comm_accept
    MPI_Comm_connect PMPI_Comm_connect
    MPI_Comm_join PMPI_Comm_join
    MPI_Comm_spawn PMPI_Comm_spawn
    MPI_Comm_spawn_multiple PMPI_Comm_spawn_multiple
    MPI_Lookup_name PMPI_Lookup_name
    MPI_Open_port PMPI_Open_port
    MPI_Publish_name PMPI_Publish_name
    MPI_Unpublish_name PMPI_Unpublish_name
}
