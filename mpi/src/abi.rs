//! MPICH's binary interface: the values of its handles and constants, as
//! Debian's `libmpich-dev` declares them in `mpich/mpi.h` (MPICH 4.0).
//! These are facts of the interface a compiled program carries; nothing
//! here is behaviour.

#![allow(missing_docs)]

use std::ffi::c_int;

/// `MPI_Comm`, `MPI_Datatype`, `MPI_Op`, `MPI_Request`, … are `int`s.
pub type Handle = c_int;
/// `MPI_Aint`.
pub type Aint = isize;
/// `MPI_Count`.
pub type Count = i64;

/// `MPI_Status`: 20 bytes. The count (in bytes) is split: its low 32 bits in
/// `count_lo`, the rest shifted left by one in `count_hi_and_cancelled`,
/// whose bit 0 is the cancelled flag.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
}

impl Status {
    /// The byte count.
    pub fn count(&self) -> i64 {
        let hi = ((self.count_hi_and_cancelled as u32) >> 1) as i64;
        (hi << 32) | (self.count_lo as u32 as i64)
    }
    /// Sets the byte count, keeping the cancelled flag.
    pub fn set_count(&mut self, n: i64) {
        self.count_lo = n as u32 as c_int;
        self.count_hi_and_cancelled =
            (self.count_hi_and_cancelled & 1) | (((n >> 32) as c_int) << 1);
    }
    /// The cancelled flag.
    pub fn cancelled(&self) -> bool {
        self.count_hi_and_cancelled & 1 != 0
    }
    /// Sets the cancelled flag.
    pub fn set_cancelled(&mut self, c: bool) {
        self.count_hi_and_cancelled = (self.count_hi_and_cancelled & !1) | c as c_int;
    }
}

// Null handles.
pub const COMM_NULL: Handle = 0x0400_0000;
pub const OP_NULL: Handle = 0x1800_0000;
pub const GROUP_NULL: Handle = 0x0800_0000;
pub const DATATYPE_NULL: Handle = 0x0c00_0000;
pub const REQUEST_NULL: Handle = 0x2c00_0000;
pub const ERRHANDLER_NULL: Handle = 0x1400_0000;
pub const INFO_NULL: Handle = 0x1c00_0000;
pub const INFO_ENV: Handle = 0x5c00_0001;
pub const WIN_NULL: Handle = 0x2000_0000;
pub const MESSAGE_NULL: Handle = 0x2c00_0000;
pub const MESSAGE_NO_PROC: Handle = 0x6c00_0000;
pub const KEYVAL_INVALID: Handle = 0x2400_0000;

// Communicators and groups.
pub const COMM_WORLD: Handle = 0x4400_0000;
pub const COMM_SELF: Handle = 0x4400_0001;
pub const GROUP_EMPTY: Handle = 0x4800_0000;

// Topology kinds (`MPI_Topo_test`).
/// `MPI_GRAPH`: `MPI_Topo_test`'s answer for a graph topology.
pub const GRAPH: c_int = 1;
/// `MPI_CART`: a Cartesian topology.
pub const CART: c_int = 2;
/// `MPI_DIST_GRAPH`: a distributed graph topology.
pub const DIST_GRAPH: c_int = 3;

// Comparison results.
pub const IDENT: c_int = 0;
pub const CONGRUENT: c_int = 1;
pub const SIMILAR: c_int = 2;
pub const UNEQUAL: c_int = 3;

// Predefined datatypes: 0x4c00SSKK, SS the size in bytes.
pub const CHAR: Handle = 0x4c00_0101;
pub const SIGNED_CHAR: Handle = 0x4c00_0118;
pub const UNSIGNED_CHAR: Handle = 0x4c00_0102;
pub const BYTE: Handle = 0x4c00_010d;
pub const WCHAR: Handle = 0x4c00_040e;
pub const SHORT: Handle = 0x4c00_0203;
pub const UNSIGNED_SHORT: Handle = 0x4c00_0204;
pub const INT: Handle = 0x4c00_0405;
pub const UNSIGNED: Handle = 0x4c00_0406;
pub const LONG: Handle = 0x4c00_0807;
pub const UNSIGNED_LONG: Handle = 0x4c00_0808;
pub const FLOAT: Handle = 0x4c00_040a;
pub const DOUBLE: Handle = 0x4c00_080b;
pub const LONG_DOUBLE: Handle = 0x4c00_100c;
pub const LONG_LONG_INT: Handle = 0x4c00_0809;
pub const UNSIGNED_LONG_LONG: Handle = 0x4c00_0819;
pub const PACKED: Handle = 0x4c00_010f;
pub const LB: Handle = 0x4c00_0010;
pub const UB: Handle = 0x4c00_0011;
pub const FLOAT_INT: Handle = 0x8c00_0000u32 as Handle;
pub const DOUBLE_INT: Handle = 0x8c00_0001u32 as Handle;
pub const LONG_INT: Handle = 0x8c00_0002u32 as Handle;
pub const SHORT_INT: Handle = 0x8c00_0003u32 as Handle;
pub const TWO_INT: Handle = 0x4c00_0816;
pub const LONG_DOUBLE_INT: Handle = 0x8c00_0004u32 as Handle;
pub const COMPLEX: Handle = 0x4c00_081e;
pub const DOUBLE_COMPLEX: Handle = 0x4c00_1022;
pub const LOGICAL: Handle = 0x4c00_041d;
pub const REAL: Handle = 0x4c00_041c;
pub const DOUBLE_PRECISION: Handle = 0x4c00_081f;
pub const INTEGER: Handle = 0x4c00_041b;
pub const TWO_INTEGER: Handle = 0x4c00_0820;
pub const TWO_REAL: Handle = 0x4c00_0821;
pub const TWO_DOUBLE_PRECISION: Handle = 0x4c00_1023;
pub const CHARACTER: Handle = 0x4c00_011a;
pub const REAL4: Handle = 0x4c00_0427;
pub const REAL8: Handle = 0x4c00_0829;
pub const REAL16: Handle = 0x4c00_102b;
pub const COMPLEX8: Handle = 0x4c00_0828;
pub const COMPLEX16: Handle = 0x4c00_102a;
pub const COMPLEX32: Handle = 0x4c00_202c;
pub const INTEGER1: Handle = 0x4c00_012d;
pub const INTEGER2: Handle = 0x4c00_022f;
pub const INTEGER4: Handle = 0x4c00_0430;
pub const INTEGER8: Handle = 0x4c00_0831;
pub const INT8_T: Handle = 0x4c00_0137;
pub const INT16_T: Handle = 0x4c00_0238;
pub const INT32_T: Handle = 0x4c00_0439;
pub const INT64_T: Handle = 0x4c00_083a;
pub const UINT8_T: Handle = 0x4c00_013b;
pub const UINT16_T: Handle = 0x4c00_023c;
pub const UINT32_T: Handle = 0x4c00_043d;
pub const UINT64_T: Handle = 0x4c00_083e;
pub const C_BOOL: Handle = 0x4c00_013f;
pub const C_FLOAT_COMPLEX: Handle = 0x4c00_0840;
pub const C_DOUBLE_COMPLEX: Handle = 0x4c00_1041;
pub const C_LONG_DOUBLE_COMPLEX: Handle = 0x4c00_2042;
pub const X_C_FLOAT16: Handle = 0x4c00_0246;
pub const AINT: Handle = 0x4c00_0843;
pub const OFFSET: Handle = 0x4c00_0844;
pub const COUNT: Handle = 0x4c00_0845;
pub const CXX_BOOL: Handle = 0x4c00_0133;
pub const CXX_FLOAT_COMPLEX: Handle = 0x4c00_0834;
pub const CXX_DOUBLE_COMPLEX: Handle = 0x4c00_1035;
pub const CXX_LONG_DOUBLE_COMPLEX: Handle = 0x4c00_2036;

// Operations.
pub const MAX: Handle = 0x5800_0001;
pub const MIN: Handle = 0x5800_0002;
pub const SUM: Handle = 0x5800_0003;
pub const PROD: Handle = 0x5800_0004;
pub const LAND: Handle = 0x5800_0005;
pub const BAND: Handle = 0x5800_0006;
pub const LOR: Handle = 0x5800_0007;
pub const BOR: Handle = 0x5800_0008;
pub const LXOR: Handle = 0x5800_0009;
pub const BXOR: Handle = 0x5800_000a;
pub const MINLOC: Handle = 0x5800_000b;
pub const MAXLOC: Handle = 0x5800_000c;
pub const REPLACE: Handle = 0x5800_000d;
pub const NO_OP: Handle = 0x5800_000e;

// Predefined attribute keys of communicators.
pub const TAG_UB: c_int = 0x6440_0001;
pub const HOST: c_int = 0x6440_0003;
pub const IO: c_int = 0x6440_0005;
pub const WTIME_IS_GLOBAL: c_int = 0x6440_0007;
pub const UNIVERSE_SIZE: c_int = 0x6440_0009;
pub const LASTUSEDCODE: c_int = 0x6440_000b;
pub const APPNUM: c_int = 0x6440_000d;

// Error handlers.
pub const ERRORS_ARE_FATAL: Handle = 0x5400_0000;
pub const ERRORS_RETURN: Handle = 0x5400_0001;
pub const ERRORS_ABORT: Handle = 0x5400_0003;

// Special ranks, tags and values.
pub const PROC_NULL: c_int = -1;
pub const ANY_SOURCE: c_int = -2;
pub const ROOT: c_int = -3;
pub const ANY_TAG: c_int = -1;
pub const UNDEFINED: c_int = -32766;
/// `MPI_Comm_split_type`'s kinds (MPICH's values).
pub const COMM_TYPE_SHARED: c_int = 1;
/// `MPI_COMM_TYPE_HW_GUIDED`: the resource named by the info key
/// `mpi_hw_resource_type`.
pub const COMM_TYPE_HW_GUIDED: c_int = 2;
/// `MPI_COMM_TYPE_HW_UNGUIDED`: the next level of the hardware that
/// splits the communicator.
pub const COMM_TYPE_HW_UNGUIDED: c_int = 3;
/// `MPI_COMM_TYPE_RESOURCE_GUIDED` (MPI 4.1; in MPICH 4.0's header the
/// same value is `MPIX_COMM_TYPE_NEIGHBORHOOD`).
pub const COMM_TYPE_RESOURCE_GUIDED: c_int = 4;
pub const MAX_PROCESSOR_NAME: usize = 128;
pub const MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MAX_ERROR_STRING: usize = 512;
pub const MAX_OBJECT_NAME: usize = 128;

// Threads.
pub const THREAD_SINGLE: c_int = 0;
pub const THREAD_FUNNELED: c_int = 1;
pub const THREAD_SERIALIZED: c_int = 2;
pub const THREAD_MULTIPLE: c_int = 3;

// Type constructors (MPI_Type_get_envelope).
pub const COMBINER_NAMED: c_int = 1;
pub const COMBINER_DUP: c_int = 2;
pub const COMBINER_CONTIGUOUS: c_int = 3;
pub const COMBINER_VECTOR: c_int = 4;
pub const COMBINER_HVECTOR: c_int = 6;
pub const COMBINER_INDEXED: c_int = 7;
pub const COMBINER_HINDEXED: c_int = 9;
pub const COMBINER_INDEXED_BLOCK: c_int = 10;
pub const COMBINER_STRUCT: c_int = 12;
pub const COMBINER_RESIZED: c_int = 18;
pub const COMBINER_HINDEXED_BLOCK: c_int = 19;

// Error classes.
pub const SUCCESS: c_int = 0;
pub const ERR_BUFFER: c_int = 1;
pub const ERR_COUNT: c_int = 2;
pub const ERR_TYPE: c_int = 3;
pub const ERR_TAG: c_int = 4;
pub const ERR_COMM: c_int = 5;
pub const ERR_RANK: c_int = 6;
pub const ERR_ROOT: c_int = 7;
pub const ERR_GROUP: c_int = 8;
pub const ERR_OP: c_int = 9;
pub const ERR_TOPOLOGY: c_int = 10;
pub const ERR_DIMS: c_int = 11;
pub const ERR_ARG: c_int = 12;
pub const ERR_UNKNOWN: c_int = 13;
pub const ERR_TRUNCATE: c_int = 14;
pub const ERR_OTHER: c_int = 15;
pub const ERR_INTERN: c_int = 16;
pub const ERR_IN_STATUS: c_int = 17;
pub const ERR_PENDING: c_int = 18;
pub const ERR_REQUEST: c_int = 19;
pub const ERR_INFO: c_int = 28;
pub const ERR_INFO_KEY: c_int = 29;
pub const ERR_INFO_VALUE: c_int = 30;
pub const ERR_INFO_NOKEY: c_int = 31;
pub const ERR_NO_MEM: c_int = 34;
pub const ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const ERR_WIN: c_int = 45;
pub const ERR_KEYVAL: c_int = 48;
pub const ERR_SESSION: c_int = 75;
pub const ERR_PROC_ABORTED: c_int = 76;
pub const ERR_VALUE_TOO_LARGE: c_int = 77;
pub const ERR_LASTCODE: c_int = 0x3fff_ffff;
pub const X_ERR_PROC_FAILED: c_int = 101;
pub const X_ERR_PROC_FAILED_PENDING: c_int = 102;
pub const X_ERR_REVOKED: c_int = 103;

/// `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE`: the address 1.
pub const STATUS_IGNORE: usize = 1;
/// `MPI_IN_PLACE`: the address -1.
pub const IN_PLACE: usize = usize::MAX;

/// The size in bytes a predefined datatype's handle carries, if `dt` is
/// one of the direct (0x4c……) predefined types.
pub const fn builtin_size(dt: Handle) -> Option<usize> {
    if (dt as u32) & 0xff00_0000 == 0x4c00_0000 {
        Some(((dt as u32 >> 8) & 0xff) as usize)
    } else {
        None
    }
}

// One-sided communication (MPICH's values).
/// `MPI_WIN_FLAVOR_CREATE`.
pub const WIN_FLAVOR_CREATE: c_int = 1;
/// `MPI_WIN_FLAVOR_ALLOCATE`.
pub const WIN_FLAVOR_ALLOCATE: c_int = 2;
/// `MPI_WIN_FLAVOR_DYNAMIC`.
pub const WIN_FLAVOR_DYNAMIC: c_int = 3;
/// `MPI_WIN_FLAVOR_SHARED`.
pub const WIN_FLAVOR_SHARED: c_int = 4;
/// `MPI_WIN_SEPARATE`.
pub const WIN_SEPARATE: c_int = 1;
/// `MPI_WIN_UNIFIED`.
pub const WIN_UNIFIED: c_int = 2;
/// `MPI_LOCK_EXCLUSIVE`.
pub const LOCK_EXCLUSIVE: c_int = 234;
/// `MPI_LOCK_SHARED`.
pub const LOCK_SHARED: c_int = 235;
/// `MPI_MODE_NOCHECK`.
pub const MODE_NOCHECK: c_int = 1024;
/// `MPI_MODE_NOSTORE`.
pub const MODE_NOSTORE: c_int = 2048;
/// `MPI_MODE_NOPUT`.
pub const MODE_NOPUT: c_int = 4096;
/// `MPI_MODE_NOPRECEDE`.
pub const MODE_NOPRECEDE: c_int = 8192;
/// `MPI_MODE_NOSUCCEED`.
pub const MODE_NOSUCCEED: c_int = 16384;
/// `MPI_WIN_BASE` (a predefined attribute key).
pub const WIN_BASE: c_int = 0x6600_0001;
/// `MPI_WIN_SIZE`.
pub const WIN_SIZE: c_int = 0x6600_0003;
/// `MPI_WIN_DISP_UNIT`.
pub const WIN_DISP_UNIT: c_int = 0x6600_0005;
/// `MPI_WIN_CREATE_FLAVOR`.
pub const WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
/// `MPI_WIN_MODEL`.
pub const WIN_MODEL: c_int = 0x6600_0009;
/// `MPI_ERR_BASE`.
pub const ERR_BASE: c_int = 46;
/// `MPI_ERR_LOCKTYPE`.
pub const ERR_LOCKTYPE: c_int = 47;
/// `MPI_ERR_RMA_CONFLICT`.
pub const ERR_RMA_CONFLICT: c_int = 49;
/// `MPI_ERR_RMA_SYNC`.
pub const ERR_RMA_SYNC: c_int = 50;
/// `MPI_ERR_SIZE`.
pub const ERR_SIZE: c_int = 51;
/// `MPI_ERR_DISP`.
pub const ERR_DISP: c_int = 52;
/// `MPI_ERR_ASSERT`.
pub const ERR_ASSERT: c_int = 53;
/// `MPI_ERR_RMA_RANGE`.
pub const ERR_RMA_RANGE: c_int = 55;
/// `MPI_ERR_RMA_ATTACH`.
pub const ERR_RMA_ATTACH: c_int = 56;
/// `MPI_ERR_RMA_SHARED`.
pub const ERR_RMA_SHARED: c_int = 57;
/// `MPI_ERR_RMA_FLAVOR`.
pub const ERR_RMA_FLAVOR: c_int = 58;

// ---- MPI-IO (MPICH's mpio.h) ----

/// `MPI_File`: a pointer in MPICH's interface (`struct ADIOI_FileD *`).
pub type FileH = usize;
/// `MPI_Offset`.
pub type Offset = i64;
/// `MPI_FILE_NULL`.
pub const FILE_NULL: FileH = 0;
/// `MPI_MODE_CREATE`.
pub const MODE_CREATE: c_int = 1;
/// `MPI_MODE_RDONLY`.
pub const MODE_RDONLY: c_int = 2;
/// `MPI_MODE_WRONLY`.
pub const MODE_WRONLY: c_int = 4;
/// `MPI_MODE_RDWR`.
pub const MODE_RDWR: c_int = 8;
/// `MPI_MODE_DELETE_ON_CLOSE`.
pub const MODE_DELETE_ON_CLOSE: c_int = 16;
/// `MPI_MODE_UNIQUE_OPEN`.
pub const MODE_UNIQUE_OPEN: c_int = 32;
/// `MPI_MODE_EXCL`.
pub const MODE_EXCL: c_int = 64;
/// `MPI_MODE_APPEND`.
pub const MODE_APPEND: c_int = 128;
/// `MPI_MODE_SEQUENTIAL`.
pub const MODE_SEQUENTIAL: c_int = 256;
/// `MPI_DISPLACEMENT_CURRENT`.
pub const DISPLACEMENT_CURRENT: c_int = -54278278;
/// `MPI_SEEK_SET`.
pub const SEEK_SET: c_int = 600;
/// `MPI_SEEK_CUR`.
pub const SEEK_CUR: c_int = 602;
/// `MPI_SEEK_END`.
pub const SEEK_END: c_int = 604;
/// `MPI_MAX_DATAREP_STRING`.
pub const MAX_DATAREP_STRING: c_int = 128;
/// `MPI_ERR_ACCESS`.
pub const ERR_ACCESS: c_int = 20;
/// `MPI_ERR_AMODE`.
pub const ERR_AMODE: c_int = 21;
/// `MPI_ERR_BAD_FILE`.
pub const ERR_BAD_FILE: c_int = 22;
/// `MPI_ERR_CONVERSION`.
pub const ERR_CONVERSION: c_int = 23;
/// `MPI_ERR_DUP_DATAREP`.
pub const ERR_DUP_DATAREP: c_int = 24;
/// `MPI_ERR_FILE_EXISTS`.
pub const ERR_FILE_EXISTS: c_int = 25;
/// `MPI_ERR_FILE_IN_USE`.
pub const ERR_FILE_IN_USE: c_int = 26;
/// `MPI_ERR_FILE`.
pub const ERR_FILE: c_int = 27;
/// `MPI_ERR_IO`.
pub const ERR_IO: c_int = 32;
/// `MPI_ERR_NOT_SAME`.
pub const ERR_NOT_SAME: c_int = 35;
/// `MPI_ERR_NO_SPACE`.
pub const ERR_NO_SPACE: c_int = 36;
/// `MPI_ERR_NO_SUCH_FILE`.
pub const ERR_NO_SUCH_FILE: c_int = 37;
/// `MPI_ERR_QUOTA`.
pub const ERR_QUOTA: c_int = 39;
/// `MPI_ERR_READ_ONLY`.
pub const ERR_READ_ONLY: c_int = 40;
/// `MPI_ERR_UNSUPPORTED_DATAREP`.
pub const ERR_UNSUPPORTED_DATAREP: c_int = 43;
