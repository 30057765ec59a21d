//! MPI-IO: files opened by the ranks of a communicator, read and written
//! with POSIX positioned I/O (`pread`/`pwrite`) by each rank alone.
//!
//! Each rank opens the file itself (rank 0 first, so that `MPI_MODE_CREATE`
//! and `MPI_MODE_EXCL` decide once), and every access goes straight from
//! the program's buffer (or a packed copy, for a non-contiguous memory
//! type) to the file offsets the view maps it to: the file view is the
//! displacement plus the filetype tiled from there, its blocks walked in
//! type-map order, adjacent ones joined into one system call. Collective
//! calls (`_all`, split collectives) do the same work on each rank, which
//! MPI allows; non-blocking ones finish before they return and hand back a
//! completed request. In atomic mode an access holds a POSIX record lock
//! over the bytes it spans.
//!
//! The shared file pointer is a word in a shared mapping when every rank
//! of the file runs on one machine; otherwise only the collective calls
//! that move it (`_ordered`, `MPI_File_seek_shared`) work, and the
//! independent shared-pointer calls fail with
//! `MPI_ERR_UNSUPPORTED_OPERATION`. Data representation: `native` (and
//! `internal`, the same here); `external32` and registered representations
//! are refused with `MPI_ERR_UNSUPPORTED_DATAREP`.

use crate::abi::{self, Aint, FileH, Handle, Offset, Status};
use crate::datatype::TypeHold;
use crate::p2p::{empty_status, in_view, out_status, out_view, type_fail, unstage};
use crate::rma::{barrier, gather, kernel_id, map_table, Map};
use crate::state::{CommObj, Fail, Lib, Req, Slab};
use crate::{export, fail, need, set};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::rc::Rc;
use tandem_core::sync::{AtomicU64, Ordering};

use abi::{
    ERR_ACCESS, ERR_AMODE, ERR_ARG, ERR_BAD_FILE, ERR_FILE, ERR_FILE_EXISTS, ERR_IO, ERR_NOT_SAME,
    ERR_NO_SPACE, ERR_NO_SUCH_FILE, ERR_QUOTA, ERR_READ_ONLY, ERR_UNSUPPORTED_DATAREP,
    ERR_UNSUPPORTED_OPERATION, FILE_NULL, MODE_APPEND, MODE_CREATE, MODE_DELETE_ON_CLOSE,
    MODE_EXCL, MODE_RDONLY, MODE_RDWR, MODE_SEQUENTIAL, MODE_UNIQUE_OPEN, MODE_WRONLY,
};

/// Every access mode bit.
const MODE_ALL: c_int = MODE_CREATE
    | MODE_RDONLY
    | MODE_WRONLY
    | MODE_RDWR
    | MODE_DELETE_ON_CLOSE
    | MODE_UNIQUE_OPEN
    | MODE_EXCL
    | MODE_APPEND
    | MODE_SEQUENTIAL;

/// File handles are addresses in MPICH's interface; tandem's are this
/// base plus 16 per table index (never dereferenced, never null).
const FILE_BASE: usize = 0x7a4d_0000_0000;
/// Table indices a handle may carry.
const FILE_SLOTS: usize = 1 << 24;

/// The open files, beside the main tables.
pub struct Io {
    files: RefCell<Slab<Rc<File>>>,
    /// Data representations the program registered: the name, and whether
    /// it gave conversion functions.
    datareps: RefCell<Vec<(String, bool)>>,
    /// The error handler of `MPI_FILE_NULL`: what files opened from now
    /// on start with, and what handles errors of calls without a valid file.
    null_handler: Cell<Handle>,
}

impl Default for Io {
    fn default() -> Self {
        Self {
            files: RefCell::default(),
            datareps: RefCell::default(),
            null_handler: Cell::new(abi::ERRORS_RETURN),
        }
    }
}

/// A file view: where the data a rank sees lies in the file.
struct View {
    disp: i64,
    etype: Handle,
    filetype: Handle,
    /// Bytes of one etype.
    esize: usize,
    /// The filetype's data blocks, `(offset from the tile's start,
    /// length)`, in type-map order, empty ones left out.
    blocks: Vec<(i64, usize)>,
    /// Data bytes before each block within a tile.
    before: Vec<usize>,
    /// Data bytes per tile (the filetype's size).
    tile_size: usize,
    /// Bytes from one tile to the next (the filetype's extent).
    tile_extent: i64,
    /// The whole view is one run of bytes from `disp`.
    contiguous: bool,
    /// Not contiguous, with blocks close enough that reading or writing a
    /// span around several of them at once (data sieving) pays.
    small_blocks: bool,
    datarep: String,
    _holds: [TypeHold; 2],
}

impl View {
    /// The view every file starts with: bytes from offset 0.
    fn bytes() -> View {
        View {
            disp: 0,
            etype: abi::BYTE,
            filetype: abi::BYTE,
            esize: 1,
            blocks: vec![(0, 1)],
            before: vec![0],
            tile_size: 1,
            tile_extent: 1,
            contiguous: true,
            small_blocks: false,
            datarep: "native".into(),
            _holds: [TypeHold::empty(), TypeHold::empty()],
        }
    }

    /// Calls `f(file offset, length, data offset from start)` for the
    /// view's data bytes `start..start + len`, adjacent runs joined.
    fn runs(
        &self,
        start: u64,
        len: usize,
        mut f: impl FnMut(i64, usize, usize) -> Result<bool, Fail>,
    ) -> Result<(), Fail> {
        if len == 0 {
            return Ok(());
        }
        if self.contiguous {
            f(self.disp + start as i64, len, 0)?;
            return Ok(());
        }
        if self.tile_size == 0 {
            return fail(
                ERR_IO,
                "an access of data through a view whose filetype holds none",
            );
        }
        let ts = self.tile_size as u64;
        let mut tile = (start / ts) as i64;
        let r = (start % ts) as usize;
        // The block holding data byte `r` of a tile.
        let mut b = self.before.partition_point(|&x| x <= r) - 1;
        let mut inside = r - self.before[b];
        let mut done = 0usize;
        let mut run: Option<(i64, usize, usize)> = None;
        while done < len {
            let (off, blen) = self.blocks[b];
            let n = (blen - inside).min(len - done);
            let at = self.disp + tile * self.tile_extent + off + inside as i64;
            run = match run {
                Some((s, l, d)) if s + l as i64 == at => Some((s, l + n, d)),
                Some((s, l, d)) => {
                    if !f(s, l, d)? {
                        return Ok(());
                    }
                    Some((at, n, done))
                }
                None => Some((at, n, done)),
            };
            done += n;
            inside = 0;
            b += 1;
            if b == self.blocks.len() {
                b = 0;
                tile += 1;
            }
        }
        if let Some((s, l, d)) = run {
            f(s, l, d)?;
        }
        Ok(())
    }

    /// Data bytes of the view that lie before file offset `at`.
    fn data_before(&self, at: i64) -> u64 {
        let rel = at - self.disp;
        if rel <= 0 {
            return 0;
        }
        if self.contiguous {
            return rel as u64;
        }
        if self.tile_size == 0 {
            return 0;
        }
        let tile = rel / self.tile_extent;
        let rem = rel % self.tile_extent;
        let part: usize = self
            .blocks
            .iter()
            .map(|&(off, len)| (rem - off).clamp(0, len as i64) as usize)
            .sum();
        tile as u64 * self.tile_size as u64 + part as u64
    }

    /// The file offset of the view's data byte `k`.
    fn offset_of(&self, k: u64) -> i64 {
        let mut at = self.disp + k as i64;
        if !self.contiguous {
            let _ = self.runs(k, 1, |o, _, _| {
                at = o;
                Ok(false)
            });
        }
        at
    }
}

/// An open file.
pub struct File {
    comm: CommObj,
    fd: c_int,
    path: CString,
    amode: c_int,
    view: RefCell<View>,
    /// The individual file pointer, in etypes of the view.
    pos: Cell<u64>,
    /// The shared file pointer: a word all ranks map (one machine), or
    /// this rank's copy, which only collective calls move (several).
    shared: Option<Map>,
    shared_here: Cell<u64>,
    atomic: Cell<bool>,
    /// Some rank's view may sieve writes (read, patch and write back a
    /// span): then every write on the file holds a record lock over what
    /// it touches, so that no rank's write-back undoes another's bytes.
    lock_writes: Cell<bool>,
    errhandler: Cell<Handle>,
    info: RefCell<Vec<(String, String)>>,
    /// A split collective begun and not ended: its name and status.
    split: RefCell<Option<(&'static str, Status)>>,
}

impl Drop for File {
    fn drop(&mut self) {
        // SAFETY: a descriptor this file opened and nothing else closes.
        unsafe { libc::close(self.fd) };
    }
}

impl File {
    fn shared_word(&self) -> Option<&AtomicU64> {
        // SAFETY: the mapping is at least 8 bytes, page-aligned, shared by
        // the file's ranks and alive as long as `self`; every access to
        // the word is atomic.
        self.shared
            .as_ref()
            .map(|m| unsafe { &*(m.ptr as *const AtomicU64) })
    }

    fn shared_get(&self) -> u64 {
        match self.shared_word() {
            Some(w) => w.load(Ordering::Acquire),
            None => self.shared_here.get(),
        }
    }

    fn shared_set(&self, v: u64) {
        match self.shared_word() {
            Some(w) => w.store(v, Ordering::Release),
            None => self.shared_here.set(v),
        }
    }

    fn readable(&self) -> Result<(), Fail> {
        if self.amode & MODE_WRONLY != 0 {
            return fail(ERR_ACCESS, "a read from a file opened MPI_MODE_WRONLY");
        }
        Ok(())
    }

    fn writable(&self) -> Result<(), Fail> {
        if self.amode & MODE_RDONLY != 0 {
            return fail(ERR_READ_ONLY, "a write to a file opened MPI_MODE_RDONLY");
        }
        Ok(())
    }

    fn not_sequential(&self, what: &str) -> Result<(), Fail> {
        if self.amode & MODE_SEQUENTIAL != 0 {
            return fail(
                ERR_UNSUPPORTED_OPERATION,
                format!("{what} on a file opened MPI_MODE_SEQUENTIAL (only the shared file pointer may be used)"),
            );
        }
        Ok(())
    }

    fn size(&self) -> Result<i64, Fail> {
        // SAFETY: a zeroed stat buffer for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the file's open descriptor and a valid buffer.
        if unsafe { libc::fstat(self.fd, &mut st) } != 0 {
            return Err(os_fail("fstat", std::io::Error::last_os_error()));
        }
        Ok(st.st_size)
    }

    /// The view position (in etypes) of the end of the file.
    fn end_position(&self) -> Result<u64, Fail> {
        let size = self.size()?;
        let v = self.view.borrow();
        Ok(v.data_before(size).div_ceil(v.esize as u64))
    }
}

/// The failure of a system call, in MPI's I/O error classes.
fn os_fail(what: &str, e: std::io::Error) -> Fail {
    let class = match e.raw_os_error().unwrap_or(0) {
        libc::ENOENT => ERR_NO_SUCH_FILE,
        libc::EEXIST => ERR_FILE_EXISTS,
        libc::EACCES | libc::EPERM => ERR_ACCESS,
        libc::EROFS => ERR_READ_ONLY,
        libc::ENOSPC | libc::EFBIG => ERR_NO_SPACE,
        libc::EDQUOT => ERR_QUOTA,
        libc::ENAMETOOLONG | libc::EISDIR | libc::ENOTDIR | libc::ELOOP => ERR_BAD_FILE,
        _ => ERR_IO,
    };
    Fail::new(class, format!("{what}: {e}"))
}

fn file_handle(i: usize) -> FileH {
    FILE_BASE + 16 * (i + 1)
}

fn file_index(h: FileH) -> Option<usize> {
    let k = h.checked_sub(FILE_BASE)?;
    (k % 16 == 0 && k > 0 && k / 16 <= FILE_SLOTS).then(|| k / 16 - 1)
}

fn file(l: &Lib, h: FileH) -> Result<Rc<File>, Fail> {
    file_index(h)
        .and_then(|i| l.extra.io.files.borrow().get(i).cloned())
        .ok_or_else(|| Fail::new(ERR_FILE, format!("invalid file handle {h:#x}")))
}

/// The error handler for errors of a call on `h`: the file's, or
/// `MPI_FILE_NULL`'s for an invalid handle.
fn file_handler(l: &Lib, h: FileH) -> Handle {
    match file(l, h) {
        Ok(f) => f.errhandler.get(),
        Err(_) => l.extra.io.null_handler.get(),
    }
}

/// Whether a file (or `MPI_FILE_NULL`) has error handler `h`.
pub(crate) fn uses_errhandler(l: &Lib, h: Handle) -> bool {
    let files = l.extra.io.files.borrow();
    l.extra.io.null_handler.get() == h
        || files
            .indices()
            .into_iter()
            .any(|i| files.get(i).is_some_and(|f| f.errhandler.get() == h))
}

/// Runs error handler `handler` for `code` on file `h`; returns the code
/// the failed call returns (what the program's handler left in it).
fn invoke(
    l: &Lib,
    handler: Handle,
    mut h: FileH,
    code: c_int,
    name: &str,
    what: &dyn Fn() -> String,
) -> c_int {
    match handler {
        abi::ERRORS_RETURN | abi::ERRORS_ARE_FATAL | abi::ERRORS_ABORT => {
            crate::invoke_handler(l, handler, 0, code, name, what)
        }
        other => {
            if let Some(f) = l.errhandler_fn(other) {
                // SAFETY: a function the program registered with
                // MPI_File_create_errhandler, whose first parameter is an
                // `MPI_File *` (a pointer, as the `MPI_Comm *` of the
                // stored signature is: the same calling convention); called
                // as MPI specifies, the variadic tail empty.
                let f: unsafe extern "C" fn(*mut FileH, *mut c_int) =
                    unsafe { std::mem::transmute(f) };
                let mut c = code;
                // SAFETY: as above.
                unsafe { f(&mut h, &mut c) };
                return c;
            }
            code
        }
    }
}

fn raise_file(l: &Lib, h: FileH, name: &str, e: Fail) -> c_int {
    let code = crate::state::error_code(Some(l), &e);
    invoke(l, file_handler(l, h), h, code, name, &|| {
        format!("{} (MPI error class {})", e.msg, e.class)
    })
}

/// Runs a call whose errors go to file `h`'s error handler.
fn run_file(
    h: FileH,
    name: &'static str,
    f: impl FnOnce(&'static Lib) -> Result<(), Fail>,
) -> c_int {
    let Some(l) = crate::state::lib() else {
        return crate::not_running(name);
    };
    match f(l) {
        Ok(()) => abi::SUCCESS,
        Err(e) => raise_file(l, h, name, e),
    }
}

/// A C string argument.
unsafe fn c_str(p: *const c_char, what: &str) -> Result<String, Fail> {
    if p.is_null() {
        return fail(ERR_ARG, format!("{what} is a null pointer"));
    }
    // SAFETY: a NUL-terminated string from the program.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A file name without ROMIO's file-system prefix (`ufs:`, `nfs:`, …),
/// which names the driver ROMIO would use; here every file is POSIX.
fn strip_prefix(name: &str) -> &str {
    const KNOWN: [&str; 12] = [
        "ufs",
        "nfs",
        "lustre",
        "gpfs",
        "pvfs2",
        "panfs",
        "xfs",
        "testfs",
        "daos",
        "quobytefs",
        "ime",
        "unify",
    ];
    match name.split_once(':') {
        Some((p, rest)) if KNOWN.contains(&p.to_ascii_lowercase().as_str()) => rest,
        _ => name,
    }
}

fn check_amode(amode: c_int) -> Result<(), Fail> {
    let rw = [MODE_RDONLY, MODE_WRONLY, MODE_RDWR]
        .iter()
        .filter(|&&m| amode & m != 0)
        .count();
    let why = if amode & !MODE_ALL != 0 {
        Some("unknown bits")
    } else if rw != 1 {
        Some("exactly one of MPI_MODE_RDONLY, MPI_MODE_WRONLY and MPI_MODE_RDWR is needed")
    } else if amode & MODE_RDONLY != 0 && amode & (MODE_CREATE | MODE_EXCL) != 0 {
        Some("MPI_MODE_RDONLY with MPI_MODE_CREATE or MPI_MODE_EXCL")
    } else if amode & MODE_RDWR != 0 && amode & MODE_SEQUENTIAL != 0 {
        Some("MPI_MODE_RDWR with MPI_MODE_SEQUENTIAL")
    } else {
        None
    };
    match why {
        Some(w) => fail(ERR_AMODE, format!("invalid access mode {amode:#x}: {w}")),
        None => Ok(()),
    }
}

/// Opens `path` with `amode` on this rank; rank 0 alone creates.
fn open_here(path: &CStr, amode: c_int, create: bool) -> Result<c_int, Fail> {
    let mut flags = libc::O_CLOEXEC
        | if amode & MODE_RDONLY != 0 {
            libc::O_RDONLY
        } else if amode & MODE_WRONLY != 0 {
            libc::O_WRONLY
        } else {
            libc::O_RDWR
        };
    if create && amode & MODE_CREATE != 0 {
        flags |= libc::O_CREAT;
    }
    if create && amode & MODE_EXCL != 0 {
        flags |= libc::O_CREAT | libc::O_EXCL;
    }
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o666 as libc::c_uint) };
    if fd < 0 {
        return Err(os_fail(
            &format!("cannot open {}", path.to_string_lossy()),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor just opened and a valid buffer.
    let dir =
        unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    if dir {
        // SAFETY: the descriptor just opened.
        unsafe { libc::close(fd) };
        return fail(
            ERR_BAD_FILE,
            format!("{} is a directory", path.to_string_lossy()),
        );
    }
    Ok(fd)
}

/// Agrees on one outcome over the file's ranks: the first failure by rank
/// (its class and message, for every rank), or success.
fn agree(c: &CommObj, r: Result<(), Fail>) -> Result<(), Fail> {
    let mine = match &r {
        Ok(()) => 0u64,
        Err(e) => e.class as u64,
    };
    let all = gather(c, &[mine])?;
    match all.iter().position(|&x| x != 0) {
        None => Ok(()),
        Some(first) => match r {
            Err(e) if first == c.rank => Err(e),
            Err(e) => Err(Fail::new(
                all[first] as c_int,
                format!("rank {first} failed; here: {}", e.msg),
            )),
            Ok(()) => Err(Fail::new(
                all[first] as c_int,
                format!(
                    "rank {first} of the file's communicator failed (MPI error class {})",
                    all[first]
                ),
            )),
        },
    }
}

fn open(l: &Lib, comm: Handle, name: &str, amode: c_int, info: Handle) -> Result<FileH, Fail> {
    let parent = l.any_comm(comm)?;
    if parent.remote.is_some() {
        return fail(abi::ERR_COMM, "MPI_File_open needs an intracommunicator");
    }
    let pairs = crate::extra::info_pairs(l, info)?;
    let c = crate::comm::dup_bare(l, &parent)?;
    drop(parent);
    let release = |c: &CommObj| {
        crate::state::mark(l, c.contexts[0], true);
        crate::state::mark(l, c.contexts[1], true);
    };
    let r = (|| {
        // The same mode everywhere, checked on every rank alike.
        let modes = gather(&c, &[amode as u32 as u64, kernel_id()])?;
        if modes.chunks(2).any(|m| m[0] != modes[0]) {
            return fail(
                ERR_NOT_SAME,
                "the ranks gave MPI_File_open different access modes",
            );
        }
        // Checked on every rank, then agreed: a rank whose name is bad
        // must not leave the others waiting in the next collective step.
        let path = check_amode(amode).and_then(|()| {
            let p = CString::new(strip_prefix(name)).map_err(|_| {
                Fail::new(ERR_BAD_FILE, "a file name with a NUL byte inside".into())
            })?;
            if p.as_bytes().is_empty() {
                return fail(ERR_BAD_FILE, "an empty file name");
            }
            Ok(p)
        });
        let path = match path {
            Ok(p) => {
                agree(&c, Ok(()))?;
                p
            }
            Err(e) => {
                let class = e.class;
                return Err(agree(&c, Err(e))
                    .err()
                    .unwrap_or_else(|| Fail::new(class, String::new())));
            }
        };
        // Rank 0 creates (exclusively, if asked) before the others open.
        let mut fd = -1;
        let first = if c.rank == 0 {
            open_here(&path, amode, true).map(|f| fd = f)
        } else {
            Ok(())
        };
        let close = |fd: c_int| {
            if fd >= 0 {
                // SAFETY: a descriptor this call opened.
                unsafe { libc::close(fd) };
            }
        };
        if let Err(e) = agree(&c, first) {
            close(fd);
            return Err(e);
        }
        let rest = if c.rank != 0 {
            open_here(&path, amode, false).map(|f| fd = f)
        } else {
            Ok(())
        };
        if let Err(e) = agree(&c, rest) {
            close(fd);
            return Err(e);
        }
        let one_host = modes.chunks(2).all(|m| m[1] == modes[1]);
        let shared = if one_host && c.size() > 1 {
            match map_table(l, &c, 64, "file") {
                Ok(m) => Some(m),
                Err(e) => {
                    close(fd);
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok((fd, path, shared))
    })();
    let (fd, path, shared) = match r {
        Ok(x) => x,
        Err(e) => {
            release(&c);
            return Err(e);
        }
    };
    let f = File {
        fd,
        path,
        amode,
        view: RefCell::new(View::bytes()),
        pos: Cell::new(0),
        shared,
        shared_here: Cell::new(0),
        atomic: Cell::new(false),
        lock_writes: Cell::new(false),
        errhandler: Cell::new(l.extra.io.null_handler.get()),
        info: RefCell::new(pairs),
        split: RefCell::new(None),
        comm: c,
    };
    let r = (|| {
        if amode & MODE_APPEND != 0 {
            let end = f.size();
            agree(
                &f.comm,
                end.as_ref()
                    .map(|_| ())
                    .map_err(|e| Fail::new(e.class, e.msg.clone())),
            )?;
            let end = end? as u64;
            f.pos.set(end);
            f.shared_here.set(end);
            if f.comm.rank == 0 {
                f.shared_set(end);
            }
        }
        // No rank starts on the shared pointer before rank 0 set it.
        barrier(&f.comm)
    })();
    if let Err(e) = r {
        release(&f.comm);
        return Err(e);
    }
    let mut files = l.extra.io.files.borrow_mut();
    let i = files.insert(Rc::new(f));
    if i >= FILE_SLOTS {
        if let Some(f) = files.remove(i) {
            release(&f.comm);
        }
        return fail(abi::ERR_NO_MEM, "too many open files");
    }
    Ok(file_handle(i))
}

fn close(l: &Lib, hp: *mut FileH) -> Result<(), Fail> {
    // SAFETY: the program's handle pointer, checked non-null.
    let h = unsafe { *need(hp, "fh")? };
    let f = file(l, h)?;
    // Collective: no rank deletes or lets go while another still writes.
    barrier(&f.comm)?;
    if f.amode & MODE_DELETE_ON_CLOSE != 0 && f.comm.rank == 0 {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::unlink(f.path.as_ptr()) };
    }
    if let Some(i) = file_index(h) {
        l.extra.io.files.borrow_mut().remove(i);
    }
    crate::state::mark(l, f.comm.contexts[0], true);
    crate::state::mark(l, f.comm.contexts[1], true);
    // SAFETY: checked non-null.
    unsafe { *hp = FILE_NULL };
    Ok(())
}

/// Where an access starts.
#[derive(Clone, Copy)]
enum At {
    /// At this offset (in etypes of the view).
    Explicit(Offset),
    /// At the individual file pointer, which moves past what is accessed.
    Individual,
    /// At the shared file pointer, moved atomically.
    Shared,
    /// At this offset, which an `_ordered` call took from the shared file
    /// pointer (so allowed on a file opened `MPI_MODE_SEQUENTIAL`).
    Ordered(Offset),
}

/// A POSIX record lock over the bytes an atomic-mode access spans.
struct RangeLock {
    fd: c_int,
    lo: i64,
    len: i64,
}

impl RangeLock {
    fn take(fd: c_int, lo: i64, len: i64, write: bool) -> Result<RangeLock, Fail> {
        let mut fl = flock(if write { libc::F_WRLCK } else { libc::F_RDLCK }, lo, len);
        loop {
            // SAFETY: a valid descriptor and lock description.
            if unsafe { libc::fcntl(fd, libc::F_SETLKW, &mut fl) } == 0 {
                return Ok(RangeLock { fd, lo, len });
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(os_fail("cannot lock the file range (atomic mode)", e));
            }
        }
    }
}

impl Drop for RangeLock {
    fn drop(&mut self) {
        let mut fl = flock(libc::F_UNLCK, self.lo, self.len);
        // SAFETY: a valid descriptor and lock description.
        unsafe { libc::fcntl(self.fd, libc::F_SETLK, &mut fl) };
    }
}

fn flock(kind: c_int, lo: i64, len: i64) -> libc::flock {
    // SAFETY: a plain C struct, all zeroes valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = lo;
    fl.l_len = len;
    fl
}

/// The bytes an access of `len` data bytes from view byte `start` spans in
/// the file.
fn span(v: &View, start: u64, len: usize) -> Option<(i64, i64)> {
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    let _ = v.runs(start, len, |o, n, _| {
        lo = lo.min(o);
        hi = hi.max(o + n as i64);
        Ok(true)
    });
    (hi > lo).then_some((lo, hi - lo))
}

/// Reads or writes `count` elements of `dt` at `buf` where `at` says;
/// returns the status (bytes moved).
fn access(
    l: &Lib,
    f: &File,
    at: At,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    write: bool,
) -> Result<Status, Fail> {
    if write {
        f.writable()?;
    } else {
        f.readable()?;
    }
    if let At::Explicit(_) = at {
        f.not_sequential(if write {
            "a write at an explicit offset"
        } else {
            "a read at an explicit offset"
        })?;
    }
    let esize = f.view.borrow().esize as u64;
    // The program's data as bytes: its buffer, or a packed copy (kept
    // alive to the end, as the staging buffer of a read is).
    let (mut inb, mut outb) = (None, None);
    let (ptr, total): (*mut u8, usize) = if write {
        let o = outb.insert(out_view(l, buf, count, dt)?);
        (o.ptr.cast_mut(), o.len)
    } else {
        let i = inb.insert(in_view(l, buf, count, dt)?);
        (i.ptr, i.len)
    };
    if total as u64 % esize != 0 {
        return fail(
            ERR_IO,
            format!(
                "{total} bytes are not a whole number of the view's etypes ({esize} bytes each)"
            ),
        );
    }
    let etypes = total as u64 / esize;
    let start = match at {
        At::Explicit(o) | At::Ordered(o) => {
            if o < 0 {
                return fail(ERR_ARG, format!("negative file offset {o}"));
            }
            o as u64
        }
        At::Individual => f.pos.get(),
        At::Shared => match f.shared_word() {
            Some(w) => w.fetch_add(etypes, Ordering::AcqRel),
            // A file of one rank: its own copy is the shared pointer.
            None if f.comm.size() == 1 => {
                let p = f.shared_here.get();
                f.shared_here.set(p + etypes);
                p
            }
            None => {
                return fail(
                    ERR_UNSUPPORTED_OPERATION,
                    "tandem: the independent shared-file-pointer calls need every rank of the file on one machine (the _ordered calls work everywhere)",
                )
            }
        },
    };
    let moved = {
        let v = f.view.borrow();
        let begin = start
            .checked_mul(esize)
            .filter(|b| (*b as i128 + v.disp as i128 + total as i128) < i64::MAX as i128)
            .ok_or_else(|| Fail::new(ERR_ARG, format!("file offset {start} out of range")))?;
        let _lock = match span(&v, begin, total) {
            Some((lo, len)) if f.atomic.get() => Some(RangeLock::take(f.fd, lo, len, write)?),
            _ => None,
        };
        let how = How {
            write,
            can_read: f.amode & MODE_WRONLY == 0,
            lock: write && f.lock_writes.get() && !f.atomic.get(),
            held: f.atomic.get() || f.comm.size() == 1,
        };
        transfer(f.fd, &v, begin, ptr, total, how)?
    };
    if let Some(s) = inb.as_ref().and_then(|i| i.stage.as_ref()) {
        unstage(l, s, moved)?;
    }
    drop(outb);
    if let At::Individual = at {
        f.pos.set(f.pos.get() + moved as u64 / esize);
    }
    let mut st = empty_status();
    st.set_count(moved as i64);
    Ok(st)
}

/// The largest file span one sieved access covers.
const SIEVE_SPAN: i64 = 4 << 20;
/// A batch of runs is sieved when its span is at most this many bytes per
/// run: about what the page cache copies in the time of a system call.
const SIEVE_PER_RUN: i64 = 8192;

/// How [`transfer`] may go about it.
#[derive(Clone, Copy)]
struct How {
    write: bool,
    /// The file may be read (a write may then be sieved).
    can_read: bool,
    /// Writes hold a record lock over each batch (see `File::lock_writes`).
    lock: bool,
    /// The whole access holds a record lock already (atomic mode), or no
    /// other rank has the file open.
    held: bool,
}

/// Moves `total` bytes between `buf` and the view's data bytes from
/// `begin`; returns how many moved (fewer on a read that meets the end of
/// the file). Runs close together go as one span (data sieving): read in
/// one call and picked apart, or, for a write, read, patched and written
/// back under a record lock.
fn transfer(
    fd: c_int,
    v: &View,
    begin: u64,
    buf: *mut u8,
    total: usize,
    how: How,
) -> Result<usize, Fail> {
    let mut moved = 0usize;
    let mut batch: Vec<(i64, usize, usize)> = Vec::new();
    let mut scratch: Vec<u8> = Vec::new();
    let mut more = true;
    v.runs(begin, total, |off, len, at| {
        if off < 0 {
            return fail(
                ERR_ARG,
                format!("the view maps data to file offset {off}, before the start"),
            );
        }
        if let (Some(&(lo, ..)), Some(&(lo2, l2, _))) = (batch.first(), batch.last()) {
            // A batch is in file order, without overlaps, within a span.
            if off < lo2 + l2 as i64 || off + len as i64 - lo > SIEVE_SPAN {
                more = batch_io(fd, buf, &batch, how, &mut scratch, &mut moved)?;
                batch.clear();
                if !more {
                    return Ok(false);
                }
            }
        }
        batch.push((off, len, at));
        Ok(true)
    })?;
    if more && !batch.is_empty() {
        batch_io(fd, buf, &batch, how, &mut scratch, &mut moved)?;
    }
    Ok(moved)
}

/// One batch of runs `(file offset, length, offset in buf)`, in file
/// order; adds what moved to `moved`; `false` at the end of the file.
fn batch_io(
    fd: c_int,
    buf: *mut u8,
    batch: &[(i64, usize, usize)],
    how: How,
    scratch: &mut Vec<u8>,
    moved: &mut usize,
) -> Result<bool, Fail> {
    let lo = batch[0].0;
    let (last, last_len, _) = batch[batch.len() - 1];
    let hi = last + last_len as i64;
    let span = hi - lo;
    let _lock = if how.lock {
        Some(RangeLock::take(fd, lo, span, true)?)
    } else {
        None
    };
    let sieve = batch.len() > 1
        && span <= batch.len() as i64 * SIEVE_PER_RUN
        && (!how.write || (how.can_read && (how.lock || how.held)));
    if !sieve {
        for &(off, len, at) in batch {
            // SAFETY: `at .. at + len` lies within the `total` bytes at
            // `buf` (the program's buffer or the packed copy).
            let p = unsafe { buf.add(at) };
            let n = io_full(fd, p, len, off, how.write)?;
            *moved += n;
            if n < len {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    scratch.clear();
    scratch.resize(span as usize, 0);
    // What is in the file over the span (for a write: the bytes between
    // the runs, written back as they were; past the end, zeroes).
    let got = io_full(fd, scratch.as_mut_ptr(), span as usize, lo, false)?;
    if how.write {
        for &(off, len, at) in batch {
            let d = (off - lo) as usize;
            // SAFETY: as above for `buf`; `d + len <= span`.
            unsafe { std::ptr::copy_nonoverlapping(buf.add(at), scratch.as_mut_ptr().add(d), len) };
            *moved += len;
        }
        io_full(fd, scratch.as_mut_ptr(), span as usize, lo, true)?;
        return Ok(true);
    }
    for &(off, len, at) in batch {
        let d = (off - lo) as usize;
        let n = got.saturating_sub(d).min(len);
        // SAFETY: as above for `buf`; `d + n <= got <= span`.
        unsafe { std::ptr::copy_nonoverlapping(scratch.as_ptr().add(d), buf.add(at), n) };
        *moved += n;
        if n < len {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Reads or writes `len` bytes at `p` from or to file offset `off`,
/// through partial transfers; returns how many moved (fewer only for a
/// read that meets the end of the file).
fn io_full(fd: c_int, p: *mut u8, len: usize, off: i64, write: bool) -> Result<usize, Fail> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `p .. p + len` is memory the caller owns for this call
        // (the program's buffer, the packed copy or the sieve's scratch);
        // the descriptor is the file's.
        let r = unsafe {
            let q = p.add(done);
            let o = (off + done as i64) as libc::off_t;
            if write {
                libc::pwrite(fd, q.cast(), len - done, o)
            } else {
                libc::pread(fd, q.cast(), len - done, o)
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(os_fail(if write { "write" } else { "read" }, e));
        }
        if r == 0 {
            if write {
                return fail(ERR_IO, "write: no progress");
            }
            break;
        }
        done += r as usize;
    }
    Ok(done)
}

/// `MPI_File_read_ordered` / `_write_ordered`: the ranks' accesses one
/// after another in rank order from the shared file pointer.
fn ordered(
    l: &Lib,
    f: &File,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    write: bool,
) -> Result<Status, Fail> {
    let bytes = {
        let n = crate::count(count)?;
        if n == 0 || dt == abi::DATATYPE_NULL {
            0
        } else {
            let t = l.types.borrow();
            t.info(dt).map_err(|c| type_fail(c, dt))?.size * n
        }
    };
    let esize = f.view.borrow().esize as u64;
    let mine = bytes as u64 / esize;
    let all = gather(&f.comm, &[mine])?;
    let before: u64 = all[..f.comm.rank].iter().sum();
    let sum: u64 = all.iter().sum();
    // Rank 0 moves the pointer past everyone's data, then tells the base:
    // no rank returns (and starts another shared access) before it moved.
    let mut base = [0u8; 8];
    if f.comm.rank == 0 {
        let b = match f.shared_word() {
            Some(w) => w.fetch_add(sum, Ordering::AcqRel),
            None => f.shared_here.get(),
        };
        base = b.to_le_bytes();
    }
    crate::coll::g_bcast(&f.comm, &mut base, 0)?;
    let base = u64::from_le_bytes(base);
    if f.shared.is_none() {
        f.shared_here.set(base + sum);
    }
    access(
        l,
        f,
        At::Ordered((base + before) as Offset),
        buf,
        count,
        dt,
        write,
    )
}

/// The datatype of a view, checked.
fn view_type(l: &Lib, dt: Handle, what: &str) -> Result<crate::datatype::TypeInfo, Fail> {
    let types = l.types.borrow();
    let info = types.info(dt).map_err(|c| type_fail(c, dt))?;
    if !info.committed {
        return fail(
            abi::ERR_TYPE,
            format!("the {what} {dt:#x} is not committed (MPI_Type_commit)"),
        );
    }
    Ok(info)
}

/// MPI's rule for the types of a view: displacements non-negative and
/// non-decreasing, and (unless the file is only read) no byte twice.
fn check_layout(l: &Lib, dt: Handle, what: &str, writable: bool) -> Result<(), Fail> {
    let mut why = None;
    let (mut prev_off, mut prev_end) = (0isize, 0isize);
    let mut first = true;
    l.types
        .borrow()
        .for_each_block(dt, 1, |off, _, len| {
            if why.is_some() || len == 0 {
                return;
            }
            if off < 0 {
                why = Some("a negative displacement");
            } else if !first && off < prev_off {
                why = Some("decreasing displacements");
            } else if writable && !first && off < prev_end {
                why = Some("overlapping data (allowed only on a file opened MPI_MODE_RDONLY)");
            }
            first = false;
            prev_off = off;
            prev_end = prev_end.max(off + len as isize);
        })
        .map_err(|c| type_fail(c, dt))?;
    match why {
        Some(w) => fail(ERR_IO, format!("the {what} {dt:#x} has {w}; MPI requires non-negative, monotonically non-decreasing displacements")),
        None => Ok(()),
    }
}

/// The view `MPI_File_set_view` asks for, checked (no collective call
/// here: every rank checks, then they agree).
fn make_view(
    l: &Lib,
    f: &File,
    disp: Offset,
    etype: Handle,
    filetype: Handle,
    rep: &str,
) -> Result<View, Fail> {
    let e = view_type(l, etype, "etype")?;
    let t = view_type(l, filetype, "filetype")?;
    let writable = f.amode & MODE_RDONLY == 0;
    check_layout(l, etype, "etype", writable)?;
    check_layout(l, filetype, "filetype", writable)?;
    let registered = l
        .extra
        .io
        .datareps
        .borrow()
        .iter()
        .find(|r| r.0 == rep)
        .map(|r| r.1);
    match (rep, registered) {
        ("native" | "internal", _) | (_, Some(false)) => {}
        (_, Some(true)) => {
            return fail(
                ERR_UNSUPPORTED_DATAREP,
                format!("tandem: data representation \"{rep}\" has conversion functions, which tandem does not call (one registered with MPI_CONVERSION_FN_NULL works)"),
            )
        }
        _ => {
            return fail(
                ERR_UNSUPPORTED_DATAREP,
                format!("tandem: data representation \"{rep}\" is not supported (native, internal and ones registered without conversion functions are)"),
            )
        }
    }
    let disp = if disp == abi::DISPLACEMENT_CURRENT as Offset {
        if f.amode & MODE_SEQUENTIAL == 0 {
            return fail(
                ERR_ARG,
                "MPI_DISPLACEMENT_CURRENT needs a file opened MPI_MODE_SEQUENTIAL",
            );
        }
        let v = f.view.borrow();
        v.offset_of(f.shared_get() * v.esize as u64)
    } else {
        disp
    };
    if disp < 0 {
        return fail(ERR_ARG, format!("negative displacement {disp}"));
    }
    if e.size == 0 {
        return fail(abi::ERR_TYPE, "an etype of no data");
    }
    if t.size % e.size != 0 {
        return fail(
            abi::ERR_TYPE,
            format!(
                "a filetype of {} bytes is not made of etypes of {} bytes",
                t.size, e.size
            ),
        );
    }
    if t.size > 0 && t.extent <= 0 {
        return fail(abi::ERR_TYPE, format!("a filetype of extent {}", t.extent));
    }
    let mut blocks: Vec<(i64, usize)> = Vec::new();
    l.types
        .borrow()
        .for_each_block(filetype, 1, |off, _, len| {
            if len == 0 {
                return;
            }
            match blocks.last_mut() {
                Some(b) if b.0 + b.1 as i64 == off as i64 => b.1 += len,
                _ => blocks.push((off as i64, len)),
            }
        })
        .map_err(|c| type_fail(c, filetype))?;
    let mut before = Vec::with_capacity(blocks.len());
    let mut sum = 0;
    for b in &blocks {
        before.push(sum);
        sum += b.1;
    }
    let contiguous = blocks.len() == 1 && blocks[0].0 == 0 && blocks[0].1 as Aint == t.extent;
    // Runs as close as a sieved batch needs them, on average.
    let small_blocks =
        !contiguous && !blocks.is_empty() && t.extent as i64 <= blocks.len() as i64 * SIEVE_PER_RUN;
    let types = l.types.borrow();
    let v = View {
        disp,
        etype,
        filetype,
        esize: e.size,
        blocks,
        before,
        tile_size: t.size,
        tile_extent: t.extent as i64,
        contiguous,
        small_blocks,
        datarep: rep.to_string(),
        _holds: [types.hold(etype), types.hold(filetype)],
    };
    Ok(v)
}

/// Installs a view every rank made: the pointers start again at its start.
fn install_view(f: &File, v: View) -> Result<(), Fail> {
    let sieves = gather(&f.comm, &[v.small_blocks as u64])?;
    *f.view.borrow_mut() = v;
    f.lock_writes
        .set(f.comm.size() > 1 && sieves.iter().any(|&x| x != 0));
    f.pos.set(0);
    f.shared_here.set(0);
    if f.comm.rank == 0 {
        f.shared_set(0);
    }
    barrier(&f.comm)
}

/// A new position from `offset` and `whence`.
fn seek_to(f: &File, now: u64, offset: Offset, whence: c_int) -> Result<u64, Fail> {
    let base = match whence {
        abi::SEEK_SET => 0i128,
        abi::SEEK_CUR => now as i128,
        abi::SEEK_END => f.end_position()? as i128,
        w => {
            return fail(
                ERR_ARG,
                format!("invalid whence {w} (MPI_SEEK_SET, _CUR or _END)"),
            )
        }
    };
    let p = base + offset as i128;
    if p < 0 || p > i64::MAX as i128 {
        return fail(ERR_ARG, format!("seek to offset {p}, outside the file"));
    }
    Ok(p as u64)
}

/// A request that is complete already, with the access's status.
fn done_request(l: &Lib, req: *mut Handle, st: Status) -> Result<(), Fail> {
    need(req, "request")?;
    let h = l.add_req(Req::Done(st, None));
    // SAFETY: checked non-null.
    unsafe { set(req, h, "request") }
}

/// One access call: the file, the access, the status written out.
fn call(
    fh: FileH,
    name: &'static str,
    at: At,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    write: bool,
    status: *mut Status,
) -> c_int {
    run_file(fh, name, |l| {
        let f = file(l, fh)?;
        let st = access(l, &f, at, buf, count, dt, write)?;
        // SAFETY: the program's status (or MPI_STATUS_IGNORE).
        unsafe { out_status(status, &st) };
        Ok(())
    })
}

/// One non-blocking access call: done now, a completed request back.
fn icall(
    fh: FileH,
    name: &'static str,
    at: At,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    write: bool,
    req: *mut Handle,
) -> c_int {
    run_file(fh, name, |l| {
        let f = file(l, fh)?;
        need(req, "request")?;
        let st = access(l, &f, at, buf, count, dt, write)?;
        done_request(l, req, st)
    })
}

/// A split collective's `_begin`: the access now, its status kept.
fn begin(
    fh: FileH,
    name: &'static str,
    at: At,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    write: bool,
) -> c_int {
    run_file(fh, name, |l| {
        let f = file(l, fh)?;
        if let Some((other, _)) = &*f.split.borrow() {
            return fail(
                abi::ERR_OTHER,
                format!("{other} is not ended yet (one split collective at a time per file)"),
            );
        }
        let st = access(l, &f, at, buf, count, dt, write)?;
        *f.split.borrow_mut() = Some((name, st));
        Ok(())
    })
}

/// A split collective's `_end`.
fn end(fh: FileH, name: &'static str, begun: &str, status: *mut Status) -> c_int {
    run_file(fh, name, |l| {
        let f = file(l, fh)?;
        let st = match f.split.borrow_mut().take() {
            Some((b, st)) if b == begun => st,
            Some((b, st)) => {
                *f.split.borrow_mut() = Some((b, st));
                return fail(abi::ERR_OTHER, format!("{name} after {b}"));
            }
            None => return fail(abi::ERR_OTHER, format!("{name} without {begun}")),
        };
        // SAFETY: the program's status (or MPI_STATUS_IGNORE).
        unsafe { out_status(status, &st) };
        Ok(())
    })
}

export! {
    fn MPI_File_open, PMPI_File_open(comm: Handle, filename: *const c_char, amode: c_int, info: Handle, fh: *mut FileH) -> c_int {
        run_file(FILE_NULL, "MPI_File_open", |l| {
            need(fh, "fh")?.write(FILE_NULL);
            let name = c_str(filename, "filename")?;
            let h = open(l, comm, &name, amode, info)?;
            set(fh, h, "fh")
        })
    }

    fn MPI_File_close, PMPI_File_close(fh: *mut FileH) -> c_int {
        let h = if fh.is_null() { FILE_NULL } else { *fh };
        run_file(h, "MPI_File_close", |l| close(l, fh))
    }

    fn MPI_File_delete, PMPI_File_delete(filename: *const c_char, _info: Handle) -> c_int {
        run_file(FILE_NULL, "MPI_File_delete", |_| {
            let name = c_str(filename, "filename")?;
            let path = CString::new(strip_prefix(&name))
                .map_err(|_| Fail::new(ERR_BAD_FILE, "a file name with a NUL byte inside".into()))?;
            // SAFETY: a NUL-terminated path.
            if libc::unlink(path.as_ptr()) != 0 {
                return Err(os_fail(&format!("cannot delete {name}"), std::io::Error::last_os_error()));
            }
            Ok(())
        })
    }

    fn MPI_File_set_size, PMPI_File_set_size(fh: FileH, size: Offset) -> c_int {
        run_file(fh, "MPI_File_set_size", |l| {
            let f = file(l, fh)?;
            f.writable()?;
            let all = gather(&f.comm, &[size as u64])?;
            if all.iter().any(|&x| x != all[0]) {
                return fail(ERR_NOT_SAME, "the ranks gave MPI_File_set_size different sizes");
            }
            if size < 0 {
                return fail(ERR_ARG, format!("negative size {size}"));
            }
            let r = if f.comm.rank == 0 && libc::ftruncate(f.fd, size) != 0 {
                Err(os_fail("ftruncate", std::io::Error::last_os_error()))
            } else {
                Ok(())
            };
            agree(&f.comm, r)
        })
    }

    fn MPI_File_preallocate, PMPI_File_preallocate(fh: FileH, size: Offset) -> c_int {
        run_file(fh, "MPI_File_preallocate", |l| {
            let f = file(l, fh)?;
            f.writable()?;
            if size < 0 {
                return fail(ERR_ARG, format!("negative size {size}"));
            }
            let r = if f.comm.rank == 0 && size > f.size()? {
                match libc::posix_fallocate(f.fd, 0, size) {
                    0 => Ok(()),
                    e => Err(os_fail("posix_fallocate", std::io::Error::from_raw_os_error(e))),
                }
            } else {
                Ok(())
            };
            agree(&f.comm, r)
        })
    }

    fn MPI_File_get_size, PMPI_File_get_size(fh: FileH, size: *mut Offset) -> c_int {
        run_file(fh, "MPI_File_get_size", |l| {
            let f = file(l, fh)?;
            need(size, "size")?;
            set(size, f.size()?, "size")
        })
    }

    fn MPI_File_get_group, PMPI_File_get_group(fh: FileH, group: *mut Handle) -> c_int {
        run_file(fh, "MPI_File_get_group", |l| {
            let f = file(l, fh)?;
            set(group, l.add_group(f.comm.group.clone()), "group")
        })
    }

    fn MPI_File_get_amode, PMPI_File_get_amode(fh: FileH, amode: *mut c_int) -> c_int {
        run_file(fh, "MPI_File_get_amode", |l| {
            let f = file(l, fh)?;
            set(amode, f.amode, "amode")
        })
    }

    fn MPI_File_set_info, PMPI_File_set_info(fh: FileH, info: Handle) -> c_int {
        // Hints: kept for MPI_File_get_info; none changes what is done.
        run_file(fh, "MPI_File_set_info", |l| {
            let f = file(l, fh)?;
            let pairs = crate::extra::info_pairs(l, info)?;
            let mut mine = f.info.borrow_mut();
            for (k, v) in pairs {
                match mine.iter_mut().find(|(x, _)| *x == k) {
                    Some(kv) => kv.1 = v,
                    None => mine.push((k, v)),
                }
            }
            Ok(())
        })
    }

    fn MPI_File_get_info, PMPI_File_get_info(fh: FileH, info: *mut Handle) -> c_int {
        run_file(fh, "MPI_File_get_info", |l| {
            let f = file(l, fh)?;
            need(info, "info_used")?;
            let pairs = f.info.borrow().clone();
            set(info, crate::extra::new_info(l, pairs), "info_used")
        })
    }

    fn MPI_File_set_view, PMPI_File_set_view(fh: FileH, disp: Offset, etype: Handle, filetype: Handle, datarep: *const c_char, _info: Handle) -> c_int {
        run_file(fh, "MPI_File_set_view", |l| {
            let f = file(l, fh)?;
            let rep = c_str(datarep, "datarep")?;
            // Every rank checks its view, they agree, then all install.
            let r = make_view(l, &f, disp, etype, filetype, &rep);
            let (v, r) = match r {
                Ok(v) => (Some(v), Ok(())),
                Err(e) => (None, Err(e)),
            };
            agree(&f.comm, r)?;
            install_view(&f, v.expect("checked"))
        })
    }

    fn MPI_File_get_view, PMPI_File_get_view(fh: FileH, disp: *mut Offset, etype: *mut Handle, filetype: *mut Handle, datarep: *mut c_char) -> c_int {
        run_file(fh, "MPI_File_get_view", |l| {
            let f = file(l, fh)?;
            need(disp, "disp")?;
            need(etype, "etype")?;
            need(filetype, "filetype")?;
            need(datarep, "datarep")?;
            let v = f.view.borrow();
            // Derived types come back as new handles the program frees.
            let copy = |t: Handle| -> Result<Handle, Fail> {
                if abi::builtin_size(t).is_some() {
                    return Ok(t);
                }
                l.types.borrow_mut().dup(t).map_err(|c| type_fail(c, t))
            };
            *disp = v.disp;
            *etype = copy(v.etype)?;
            *filetype = copy(v.filetype)?;
            crate::put_str(datarep, abi::MAX_DATAREP_STRING as usize, &v.datarep);
            Ok(())
        })
    }

    fn MPI_File_read_at, PMPI_File_read_at(fh: FileH, offset: Offset, buf: *mut c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_read_at", At::Explicit(offset), buf, count, dt, false, status)
    }

    fn MPI_File_read_at_all, PMPI_File_read_at_all(fh: FileH, offset: Offset, buf: *mut c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_read_at_all", At::Explicit(offset), buf, count, dt, false, status)
    }

    fn MPI_File_write_at, PMPI_File_write_at(fh: FileH, offset: Offset, buf: *const c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_write_at", At::Explicit(offset), buf.cast_mut(), count, dt, true, status)
    }

    fn MPI_File_write_at_all, PMPI_File_write_at_all(fh: FileH, offset: Offset, buf: *const c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_write_at_all", At::Explicit(offset), buf.cast_mut(), count, dt, true, status)
    }

    fn MPI_File_iread_at, PMPI_File_iread_at(fh: FileH, offset: Offset, buf: *mut c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iread_at", At::Explicit(offset), buf, count, dt, false, req)
    }

    fn MPI_File_iwrite_at, PMPI_File_iwrite_at(fh: FileH, offset: Offset, buf: *const c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iwrite_at", At::Explicit(offset), buf.cast_mut(), count, dt, true, req)
    }

    fn MPI_File_iread_at_all, PMPI_File_iread_at_all(fh: FileH, offset: Offset, buf: *mut c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iread_at_all", At::Explicit(offset), buf, count, dt, false, req)
    }

    fn MPI_File_iwrite_at_all, PMPI_File_iwrite_at_all(fh: FileH, offset: Offset, buf: *const c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iwrite_at_all", At::Explicit(offset), buf.cast_mut(), count, dt, true, req)
    }

    fn MPI_File_read, PMPI_File_read(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_read", At::Individual, buf, count, dt, false, status)
    }

    fn MPI_File_read_all, PMPI_File_read_all(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_read_all", At::Individual, buf, count, dt, false, status)
    }

    fn MPI_File_write, PMPI_File_write(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_write", At::Individual, buf.cast_mut(), count, dt, true, status)
    }

    fn MPI_File_write_all, PMPI_File_write_all(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_write_all", At::Individual, buf.cast_mut(), count, dt, true, status)
    }

    fn MPI_File_iread, PMPI_File_iread(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iread", At::Individual, buf, count, dt, false, req)
    }

    fn MPI_File_iwrite, PMPI_File_iwrite(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iwrite", At::Individual, buf.cast_mut(), count, dt, true, req)
    }

    fn MPI_File_iread_all, PMPI_File_iread_all(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iread_all", At::Individual, buf, count, dt, false, req)
    }

    fn MPI_File_iwrite_all, PMPI_File_iwrite_all(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iwrite_all", At::Individual, buf.cast_mut(), count, dt, true, req)
    }

    fn MPI_File_seek, PMPI_File_seek(fh: FileH, offset: Offset, whence: c_int) -> c_int {
        run_file(fh, "MPI_File_seek", |l| {
            let f = file(l, fh)?;
            f.not_sequential("MPI_File_seek")?;
            let p = seek_to(&f, f.pos.get(), offset, whence)?;
            f.pos.set(p);
            Ok(())
        })
    }

    fn MPI_File_get_position, PMPI_File_get_position(fh: FileH, offset: *mut Offset) -> c_int {
        run_file(fh, "MPI_File_get_position", |l| {
            let f = file(l, fh)?;
            f.not_sequential("MPI_File_get_position")?;
            set(offset, f.pos.get() as Offset, "offset")
        })
    }

    fn MPI_File_get_byte_offset, PMPI_File_get_byte_offset(fh: FileH, offset: Offset, disp: *mut Offset) -> c_int {
        run_file(fh, "MPI_File_get_byte_offset", |l| {
            let f = file(l, fh)?;
            f.not_sequential("MPI_File_get_byte_offset")?;
            if offset < 0 {
                return fail(ERR_ARG, format!("negative offset {offset}"));
            }
            let v = f.view.borrow();
            set(disp, v.offset_of(offset as u64 * v.esize as u64), "disp")
        })
    }

    fn MPI_File_read_shared, PMPI_File_read_shared(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_read_shared", At::Shared, buf, count, dt, false, status)
    }

    fn MPI_File_write_shared, PMPI_File_write_shared(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        call(fh, "MPI_File_write_shared", At::Shared, buf.cast_mut(), count, dt, true, status)
    }

    fn MPI_File_iread_shared, PMPI_File_iread_shared(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iread_shared", At::Shared, buf, count, dt, false, req)
    }

    fn MPI_File_iwrite_shared, PMPI_File_iwrite_shared(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, req: *mut Handle) -> c_int {
        icall(fh, "MPI_File_iwrite_shared", At::Shared, buf.cast_mut(), count, dt, true, req)
    }

    fn MPI_File_read_ordered, PMPI_File_read_ordered(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        run_file(fh, "MPI_File_read_ordered", |l| {
            let f = file(l, fh)?;
            let st = ordered(l, &f, buf, count, dt, false)?;
            out_status(status, &st);
            Ok(())
        })
    }

    fn MPI_File_write_ordered, PMPI_File_write_ordered(fh: FileH, buf: *const c_void, count: c_int, dt: Handle, status: *mut Status) -> c_int {
        run_file(fh, "MPI_File_write_ordered", |l| {
            let f = file(l, fh)?;
            let st = ordered(l, &f, buf.cast_mut(), count, dt, true)?;
            out_status(status, &st);
            Ok(())
        })
    }

    fn MPI_File_seek_shared, PMPI_File_seek_shared(fh: FileH, offset: Offset, whence: c_int) -> c_int {
        run_file(fh, "MPI_File_seek_shared", |l| {
            let f = file(l, fh)?;
            let all = gather(&f.comm, &[offset as u64, whence as u32 as u64])?;
            if all.chunks(2).any(|x| x != &all[..2]) {
                return fail(ERR_NOT_SAME, "the ranks gave MPI_File_seek_shared different offsets or whence");
            }
            // Every rank works out the position; rank 0 stores it between
            // two barriers, so no shared access runs across the move.
            let p = seek_to(&f, f.shared_get(), offset, whence);
            let p = agree(&f.comm, p.map(|p| f.shared_here.set(p)));
            p?;
            if f.comm.rank == 0 {
                f.shared_set(f.shared_here.get());
            }
            barrier(&f.comm)
        })
    }

    fn MPI_File_get_position_shared, PMPI_File_get_position_shared(fh: FileH, offset: *mut Offset) -> c_int {
        run_file(fh, "MPI_File_get_position_shared", |l| {
            let f = file(l, fh)?;
            set(offset, f.shared_get() as Offset, "offset")
        })
    }

    fn MPI_File_read_at_all_begin, PMPI_File_read_at_all_begin(fh: FileH, offset: Offset, buf: *mut c_void, count: c_int, dt: Handle) -> c_int {
        begin(fh, "MPI_File_read_at_all_begin", At::Explicit(offset), buf, count, dt, false)
    }

    fn MPI_File_read_at_all_end, PMPI_File_read_at_all_end(fh: FileH, _buf: *mut c_void, status: *mut Status) -> c_int {
        end(fh, "MPI_File_read_at_all_end", "MPI_File_read_at_all_begin", status)
    }

    fn MPI_File_write_at_all_begin, PMPI_File_write_at_all_begin(fh: FileH, offset: Offset, buf: *const c_void, count: c_int, dt: Handle) -> c_int {
        begin(fh, "MPI_File_write_at_all_begin", At::Explicit(offset), buf.cast_mut(), count, dt, true)
    }

    fn MPI_File_write_at_all_end, PMPI_File_write_at_all_end(fh: FileH, _buf: *const c_void, status: *mut Status) -> c_int {
        end(fh, "MPI_File_write_at_all_end", "MPI_File_write_at_all_begin", status)
    }

    fn MPI_File_read_all_begin, PMPI_File_read_all_begin(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle) -> c_int {
        begin(fh, "MPI_File_read_all_begin", At::Individual, buf, count, dt, false)
    }

    fn MPI_File_read_all_end, PMPI_File_read_all_end(fh: FileH, _buf: *mut c_void, status: *mut Status) -> c_int {
        end(fh, "MPI_File_read_all_end", "MPI_File_read_all_begin", status)
    }

    fn MPI_File_write_all_begin, PMPI_File_write_all_begin(fh: FileH, buf: *const c_void, count: c_int, dt: Handle) -> c_int {
        begin(fh, "MPI_File_write_all_begin", At::Individual, buf.cast_mut(), count, dt, true)
    }

    fn MPI_File_write_all_end, PMPI_File_write_all_end(fh: FileH, _buf: *const c_void, status: *mut Status) -> c_int {
        end(fh, "MPI_File_write_all_end", "MPI_File_write_all_begin", status)
    }

    fn MPI_File_read_ordered_begin, PMPI_File_read_ordered_begin(fh: FileH, buf: *mut c_void, count: c_int, dt: Handle) -> c_int {
        run_file(fh, "MPI_File_read_ordered_begin", |l| {
            let f = file(l, fh)?;
            if let Some((other, _)) = &*f.split.borrow() {
                return fail(abi::ERR_OTHER, format!("{other} is not ended yet (one split collective at a time per file)"));
            }
            let st = ordered(l, &f, buf, count, dt, false)?;
            *f.split.borrow_mut() = Some(("MPI_File_read_ordered_begin", st));
            Ok(())
        })
    }

    fn MPI_File_read_ordered_end, PMPI_File_read_ordered_end(fh: FileH, _buf: *mut c_void, status: *mut Status) -> c_int {
        end(fh, "MPI_File_read_ordered_end", "MPI_File_read_ordered_begin", status)
    }

    fn MPI_File_write_ordered_begin, PMPI_File_write_ordered_begin(fh: FileH, buf: *const c_void, count: c_int, dt: Handle) -> c_int {
        run_file(fh, "MPI_File_write_ordered_begin", |l| {
            let f = file(l, fh)?;
            if let Some((other, _)) = &*f.split.borrow() {
                return fail(abi::ERR_OTHER, format!("{other} is not ended yet (one split collective at a time per file)"));
            }
            let st = ordered(l, &f, buf.cast_mut(), count, dt, true)?;
            *f.split.borrow_mut() = Some(("MPI_File_write_ordered_begin", st));
            Ok(())
        })
    }

    fn MPI_File_write_ordered_end, PMPI_File_write_ordered_end(fh: FileH, _buf: *const c_void, status: *mut Status) -> c_int {
        end(fh, "MPI_File_write_ordered_end", "MPI_File_write_ordered_begin", status)
    }

    fn MPI_File_get_type_extent, PMPI_File_get_type_extent(fh: FileH, dt: Handle, extent: *mut Aint) -> c_int {
        run_file(fh, "MPI_File_get_type_extent", |l| {
            file(l, fh)?;
            let info = l.types.borrow().info(dt).map_err(|c| type_fail(c, dt))?;
            set(extent, info.extent, "extent")
        })
    }

    fn MPI_File_set_atomicity, PMPI_File_set_atomicity(fh: FileH, flag: c_int) -> c_int {
        run_file(fh, "MPI_File_set_atomicity", |l| {
            let f = file(l, fh)?;
            let all = gather(&f.comm, &[(flag != 0) as u64])?;
            if all.iter().any(|&x| x != all[0]) {
                return fail(ERR_NOT_SAME, "the ranks gave MPI_File_set_atomicity different flags");
            }
            f.atomic.set(flag != 0);
            Ok(())
        })
    }

    fn MPI_File_get_atomicity, PMPI_File_get_atomicity(fh: FileH, flag: *mut c_int) -> c_int {
        run_file(fh, "MPI_File_get_atomicity", |l| {
            let f = file(l, fh)?;
            set(flag, f.atomic.get() as c_int, "flag")
        })
    }

    fn MPI_File_sync, PMPI_File_sync(fh: FileH) -> c_int {
        run_file(fh, "MPI_File_sync", |l| {
            let f = file(l, fh)?;
            let r = if libc::fsync(f.fd) != 0 {
                Err(os_fail("fsync", std::io::Error::last_os_error()))
            } else {
                Ok(())
            };
            agree(&f.comm, r)
        })
    }

    fn MPI_File_set_errhandler, PMPI_File_set_errhandler(fh: FileH, h: Handle) -> c_int {
        run_file(fh, "MPI_File_set_errhandler", |l| {
            if !l.errhandler_valid(h) {
                return fail(abi::ERR_ARG, format!("invalid error handler {h:#x}"));
            }
            if fh == FILE_NULL {
                l.extra.io.null_handler.set(h);
                return Ok(());
            }
            file(l, fh)?.errhandler.set(h);
            Ok(())
        })
    }

    fn MPI_File_get_errhandler, PMPI_File_get_errhandler(fh: FileH, h: *mut Handle) -> c_int {
        run_file(fh, "MPI_File_get_errhandler", |l| {
            let e = if fh == FILE_NULL {
                l.extra.io.null_handler.get()
            } else {
                file(l, fh)?.errhandler.get()
            };
            set(h, e, "errhandler")
        })
    }

    fn MPI_File_create_errhandler, PMPI_File_create_errhandler(f: Option<crate::state::ErrFn>, h: *mut Handle) -> c_int {
        crate::run(abi::COMM_WORLD, "MPI_File_create_errhandler", |l| {
            let Some(f) = f else {
                return fail(abi::ERR_ARG, "a null error handler function");
            };
            set(h, l.add_errhandler(f), "errhandler")
        })
    }

    fn MPI_File_call_errhandler, PMPI_File_call_errhandler(fh: FileH, code: c_int) -> c_int {
        let Some(l) = crate::state::lib() else {
            return crate::not_running("MPI_File_call_errhandler");
        };
        if fh != FILE_NULL {
            if let Err(e) = file(l, fh) {
                return raise_file(l, fh, "MPI_File_call_errhandler", e);
            }
        }
        invoke(l, file_handler(l, fh), fh, code, "MPI_File_call_errhandler", &|| crate::call_message(code));
        abi::SUCCESS
    }
}

export! {
    fn MPI_Register_datarep, PMPI_Register_datarep(datarep: *const c_char, read_fn: Option<DatarepConv>, write_fn: Option<DatarepConv>, _extent_fn: Option<DatarepExtent>, _extra: *mut c_void) -> c_int {
        run_file(FILE_NULL, "MPI_Register_datarep", |l| {
            let name = c_str(datarep, "datarep")?;
            if name.len() >= abi::MAX_DATAREP_STRING as usize {
                return fail(ERR_ARG, format!("a data representation name of {} bytes (MPI_MAX_DATAREP_STRING is {})", name.len(), abi::MAX_DATAREP_STRING));
            }
            let mut reps = l.extra.io.datareps.borrow_mut();
            if ["native", "internal", "external32"].contains(&name.as_str()) || reps.iter().any(|r| r.0 == name) {
                return fail(abi::ERR_DUP_DATAREP, format!("data representation \"{name}\" exists already"));
            }
            reps.push((name, read_fn.is_some() || write_fn.is_some()));
            Ok(())
        })
    }
}

/// `MPI_Datarep_conversion_function`.
pub type DatarepConv =
    unsafe extern "C" fn(*mut c_void, Handle, c_int, *mut c_void, Offset, *mut c_void) -> c_int;
/// `MPI_Datarep_extent_function`.
pub type DatarepExtent = unsafe extern "C" fn(Handle, *mut Aint, *mut c_void) -> c_int;

/// `MPI_File_c2f`: the Fortran integer of a file handle (0 for
/// `MPI_FILE_NULL`).
#[no_mangle]
pub extern "C" fn MPI_File_c2f(fh: FileH) -> c_int {
    file_index(fh).map_or(0, |i| i as c_int + 1)
}

/// `PMPI_File_c2f`.
#[no_mangle]
pub extern "C" fn PMPI_File_c2f(fh: FileH) -> c_int {
    MPI_File_c2f(fh)
}

/// `MPI_File_f2c`: the file handle of a Fortran integer.
#[no_mangle]
pub extern "C" fn MPI_File_f2c(f: c_int) -> FileH {
    if f <= 0 || f as usize > FILE_SLOTS {
        return FILE_NULL;
    }
    file_handle(f as usize - 1)
}

/// `PMPI_File_f2c`.
#[no_mangle]
pub extern "C" fn PMPI_File_f2c(f: c_int) -> FileH {
    MPI_File_f2c(f)
}
