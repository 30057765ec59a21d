//! One-sided communication (MPI windows) between the ranks of one host.
//!
//! A window's memory is reached without its owner taking part: through
//! Linux cross-memory attach (`process_vm_readv`/`process_vm_writev`, one
//! copy by the origin's core) for memory the program gave
//! (`MPI_Win_create`) or the library allocated for it (`MPI_Win_allocate`),
//! and through a shared mapping that every rank of the window maps
//! (`MPI_Win_allocate_shared`, whose segments the ranks also load and store
//! directly). A transfer is complete when the call returns, so flushes are
//! free and `MPI_Win_fence` is a barrier; passive-target locks and the
//! atomicity of accumulates are words in a small shared table per window.
//! No call needs the target to make progress, which is what lets a rank
//! sit in a computation (or in a blocking call) while others lock, put and
//! unlock its window. Windows whose ranks do not share one kernel (another
//! host) are refused at creation with `MPI_ERR_UNSUPPORTED_OPERATION`, as
//! are dynamic windows.

use crate::abi::{self, Aint, Handle};
use crate::p2p::{in_view, out_view, unstage};
use crate::state::Fail;
use crate::state::{CommObj, Lib, Req, Slab};
use crate::{count, export, fail, need, set};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tandem_core::sync::{fence, AtomicU64, Ordering};

use abi::{
    ERR_ASSERT, ERR_BASE, ERR_DISP, ERR_LOCKTYPE, ERR_RMA_ATTACH, ERR_RMA_RANGE, ERR_RMA_SYNC,
    ERR_SIZE, LOCK_EXCLUSIVE, LOCK_SHARED, MODE_NOCHECK, MODE_NOSUCCEED, WIN_BASE,
    WIN_CREATE_FLAVOR, WIN_DISP_UNIT, WIN_FLAVOR_ALLOCATE as FLAVOR_ALLOCATE,
    WIN_FLAVOR_CREATE as FLAVOR_CREATE, WIN_FLAVOR_DYNAMIC as FLAVOR_DYNAMIC,
    WIN_FLAVOR_SHARED as FLAVOR_SHARED, WIN_MODEL, WIN_SIZE, WIN_UNIFIED as MODEL_UNIFIED,
};
/// Every assertion bit (`MPI_MODE_NOCHECK` .. `MPI_MODE_NOSUCCEED`).
const MODE_ALL: c_int = abi::MODE_NOCHECK
    | abi::MODE_NOSTORE
    | abi::MODE_NOPUT
    | abi::MODE_NOPRECEDE
    | abi::MODE_NOSUCCEED;

/// Regions a rank may attach to a dynamic window at once.
const SLOTS: usize = 1024;
/// Bytes of a rank's region list in a dynamic window's table: a version
/// word (odd while the rank changes the list), the number of slots ever
/// used (readers look no further), then `(base, length)` per slot,
/// rounded to cache lines.
const REGION_BYTES: usize = (16 + SLOTS * 16).div_ceil(64) * 64;

/// The most bytes `MPI_Win_allocate`'s windows (all ranks together) place
/// in the shared mapping; larger ones are private memory reached by
/// cross-memory attach.
const SHARED_ALLOCATE_MAX: usize = 1 << 30;

/// The lock word's writer bit; below it, the count of shared holders.
const EXCLUSIVE: u64 = 1 << 63;
/// Tags of the post/start/complete/wait messages on a window's own
/// communicator.
const T_POST: u32 = 1;
const T_DONE: u32 = 2;
/// How long a lock is waited for before the call fails.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// The window tables, beside the main ones.
#[derive(Default)]
pub struct Rma {
    wins: RefCell<Slab<Rc<Win>>>,
    /// Windows made by this rank so far (names the shared tables).
    made: Cell<u64>,
}

/// The handle kind bits of a window (MPICH's: `MPI_WIN_NULL` is
/// `0x20000000`).
const WIN_KIND: u32 = 0xa000_0000;
const INDEX_MASK: u32 = 0x003f_ffff;

/// One rank's part of a window, as every rank sees it.
#[derive(Clone, Copy, Debug)]
struct Target {
    pid: i32,
    /// Address of its memory in its own process.
    base: usize,
    size: usize,
    unit: usize,
    /// Where its memory is mapped in this process (shared windows).
    here: Option<usize>,
}

/// What this rank has opened on a window.
#[derive(Default)]
struct Epoch {
    /// Between two fences (the last without `MPI_MODE_NOSUCCEED`).
    fence: bool,
    /// A transfer was made in the fence epoch (which a lock then may not
    /// end: without one, the epoch was empty and a lock ends it).
    fence_used: bool,
    /// Targets locked: (rank, exclusive, taken for real (not NOCHECK)).
    locks: Vec<(usize, bool, bool)>,
    /// `MPI_Win_lock_all` holds (taken for real).
    all: Option<bool>,
    /// Targets of `MPI_Win_start`.
    start: Option<Vec<usize>>,
    /// Origins of `MPI_Win_post`.
    post: Option<Vec<usize>>,
}

/// A shared mapping (the window's lock table, and a shared window's
/// memory).
pub(crate) struct Map {
    pub(crate) ptr: *mut u8,
    len: usize,
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: a mapping this object made and nothing else unmaps.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A window.
pub struct Win {
    comm: CommObj,
    me: usize,
    targets: Vec<Target>,
    flavor: c_int,
    table: Map,
    /// Where the region lists of a dynamic window start in `table`.
    regions_at: usize,
    /// `MPI_Win_allocate`'s memory where it is this process's own.
    _owned: Option<Map>,
    errhandler: Cell<Handle>,
    name: RefCell<String>,
    epoch: RefCell<Epoch>,
    // What MPI_Win_get_attr hands out pointers to.
    attr_size: Box<Aint>,
    attr_unit: Box<c_int>,
    attr_flavor: Box<c_int>,
    attr_model: Box<c_int>,
}

impl Win {
    /// Target `r`'s lock word and accumulate mutex.
    fn words(&self, r: usize) -> (&AtomicU64, &AtomicU64) {
        // SAFETY: the table holds two 8-byte words per rank, 64-byte
        // aligned (a page), shared by the window's processes, which only
        // use them atomically.
        unsafe {
            let p = self.table.ptr.cast::<AtomicU64>().add(2 * r);
            (&*p, &*p.add(1))
        }
    }

    /// Word `i` of rank `r`'s region list (dynamic windows).
    fn region_word(&self, r: usize, i: usize) -> &AtomicU64 {
        debug_assert!(self.flavor == FLAVOR_DYNAMIC && i < 2 + 2 * SLOTS);
        // SAFETY: the table holds `REGION_BYTES` per rank from
        // `regions_at` (8-byte aligned words), shared and used atomically.
        unsafe {
            &*self
                .table
                .ptr
                .add(self.regions_at + r * REGION_BYTES)
                .cast::<AtomicU64>()
                .add(i)
        }
    }

    /// Rank `r`'s attached regions, read consistently (a rank changing its
    /// list makes the version odd, then even again).
    fn regions(&self, r: usize) -> Vec<(usize, usize)> {
        loop {
            let v = self.region_word(r, 0).load(Ordering::Acquire);
            if v % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let used = (self.region_word(r, 1).load(Ordering::Relaxed) as usize).min(SLOTS);
            let list: Vec<(usize, usize)> = (0..used)
                .map(|k| {
                    (
                        self.region_word(r, 2 + 2 * k).load(Ordering::Relaxed) as usize,
                        self.region_word(r, 3 + 2 * k).load(Ordering::Relaxed) as usize,
                    )
                })
                .filter(|x| x.1 > 0)
                .collect();
            fence(Ordering::Acquire);
            if self.region_word(r, 0).load(Ordering::Relaxed) == v {
                return list;
            }
        }
    }

    /// Changes slot `k` of this rank's region list.
    fn set_region(&self, k: usize, base: usize, len: usize) {
        let me = self.me;
        let ver = self.region_word(me, 0);
        ver.fetch_add(1, Ordering::AcqRel);
        let used = self.region_word(me, 1);
        if used.load(Ordering::Relaxed) <= k as u64 {
            used.store(k as u64 + 1, Ordering::Relaxed);
        }
        self.region_word(me, 2 + 2 * k)
            .store(base as u64, Ordering::Relaxed);
        self.region_word(me, 3 + 2 * k)
            .store(len as u64, Ordering::Relaxed);
        ver.fetch_add(1, Ordering::Release);
    }

    /// Takes target `r`'s lock, exclusive or shared (waiting at most
    /// [`LOCK_WAIT`]).
    fn lock(&self, r: usize, excl: bool) -> Result<(), Fail> {
        let word = self.words(r).0;
        if excl {
            return wait_for("the exclusive lock", r, || {
                word.compare_exchange(0, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            });
        }
        wait_for("a shared lock", r, || {
            let v = word.load(Ordering::Relaxed);
            v & EXCLUSIVE == 0
                && word
                    .compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// Releases target `r`'s lock taken by [`lock`](Self::lock).
    fn unlock(&self, r: usize, excl: bool) {
        let word = self.words(r).0;
        if excl {
            word.store(0, Ordering::Release);
        } else {
            word.fetch_add(u64::MAX, Ordering::Release); // minus one
        }
    }

    fn check_rank(&self, r: c_int) -> Result<usize, Fail> {
        if r < 0 || r as usize >= self.targets.len() {
            return fail(
                abi::ERR_RANK,
                format!(
                    "invalid target rank {r} (the window has {} ranks)",
                    self.targets.len()
                ),
            );
        }
        Ok(r as usize)
    }

    /// Whether this rank may access `r` now.
    fn check_access(&self, r: usize, what: &str) -> Result<(), Fail> {
        let e = self.epoch.borrow();
        let ok = e.fence
            || e.all.is_some()
            || e.locks.iter().any(|x| x.0 == r)
            || e.start.as_ref().is_some_and(|s| s.contains(&r));
        if !ok {
            return fail(
                ERR_RMA_SYNC,
                format!("{what} to rank {r} outside an access epoch (call MPI_Win_fence, MPI_Win_lock, MPI_Win_lock_all or MPI_Win_start first)"),
            );
        }
        let fence_only = e.fence && e.all.is_none() && e.locks.is_empty() && e.start.is_none();
        drop(e);
        if fence_only {
            self.epoch.borrow_mut().fence_used = true;
        }
        Ok(())
    }

    /// A passive-target epoch may start: no active-target one is open (a
    /// fence epoch in which nothing was transferred ends here).
    fn passive_may_start(&self, what: &str) -> Result<(), Fail> {
        let mut e = self.epoch.borrow_mut();
        if e.start.is_some() || e.post.is_some() {
            return fail(
                ERR_RMA_SYNC,
                format!("{what} during an active-target epoch (MPI_Win_start or MPI_Win_post not yet completed)"),
            );
        }
        if e.fence {
            if e.fence_used {
                return fail(
                    ERR_RMA_SYNC,
                    format!(
                        "{what} in a fence epoch that transferred data (call MPI_Win_fence first)"
                    ),
                );
            }
            e.fence = false;
        }
        Ok(())
    }
}

fn win_handle(i: usize) -> Handle {
    (WIN_KIND | i as u32) as Handle
}

fn win_index(h: Handle) -> Option<usize> {
    let h = h as u32;
    (h & !INDEX_MASK == WIN_KIND).then_some((h & INDEX_MASK) as usize)
}

/// The window of handle `h`.
fn win(l: &Lib, h: Handle) -> Result<Rc<Win>, Fail> {
    win_index(h)
        .and_then(|i| l.extra.rma.wins.borrow().get(i).cloned())
        .ok_or_else(|| Fail::new(abi::ERR_WIN, format!("invalid window handle {h:#x}")))
}

/// Runs a call whose errors go to window `h`'s error handler.
fn run_win(
    h: Handle,
    name: &'static str,
    f: impl FnOnce(&'static Lib) -> Result<(), Fail>,
) -> c_int {
    let Some(l) = crate::state::lib() else {
        return crate::not_running(name);
    };
    match f(l) {
        Ok(()) => abi::SUCCESS,
        Err(e) => raise_win(l, h, name, e),
    }
}

fn raise_win(l: &Lib, h: Handle, name: &str, e: Fail) -> c_int {
    let code = crate::state::error_code(Some(l), &e);
    crate::invoke_handler(l, win_handler(l, h), h, code, name, || {
        format!("{} (MPI error class {})", e.msg, e.class)
    })
}

/// Whether a window has error handler `h`.
pub(crate) fn uses_errhandler(l: &Lib, h: Handle) -> bool {
    let wins = l.extra.rma.wins.borrow();
    wins.indices()
        .into_iter()
        .any(|i| wins.get(i).is_some_and(|w| w.errhandler.get() == h))
}

/// The error handler of window `h`, resolved as a communicator's is
/// (`MPI_COMM_WORLD`'s where the program set none, or `h` is invalid).
fn win_handler(l: &Lib, h: Handle) -> Handle {
    match win(l, h).ok().map(|w| w.errhandler.get()) {
        Some(x) if x != crate::state::DEFAULT_ERRHANDLER => x,
        _ => crate::state::world_errhandler(l),
    }
}

/// A barrier over the window's ranks: tandem's own where it serves the
/// communicator, else the MPI layer's.
pub(crate) fn barrier(c: &CommObj) -> Result<(), Fail> {
    if let Some(e) = c.tc()? {
        e.barrier()?;
        return Ok(());
    }
    crate::coll::g_barrier(c)
}

/// This kernel's boot id: ranks that share it can reach each other's
/// memory (same machine, namespaces aside).
pub(crate) fn kernel_id() -> u64 {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    // FNV-1a.
    s.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn le(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words_of(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Gathers `mine` (the same number of words on every rank).
pub(crate) fn gather(c: &CommObj, mine: &[u64]) -> Result<Vec<u64>, Fail> {
    let mut all = vec![0u8; mine.len() * 8 * c.size()];
    crate::coll::allgather_bytes(c, &le(mine), &mut all)?;
    Ok(words_of(&all))
}

/// Whether every rank says `ok`.
pub(crate) fn all_ok(c: &CommObj, ok: bool) -> Result<bool, Fail> {
    Ok(gather(c, &[ok as u64])?.iter().all(|&x| x == 1))
}

/// Maps the window's shared table (and, for a shared window, its memory):
/// rank 0 makes the file, the others open it, then it is unlinked.
pub(crate) fn map_table(l: &Lib, c: &CommObj, len: usize, what: &str) -> Result<Map, Fail> {
    let seq = l.extra.rma.made.get();
    l.extra.rma.made.set(seq + 1);
    let mut name = [0u8; 96];
    let mut made: Option<Map> = None;
    if c.rank == 0 {
        let path = format!("/dev/shm/tandem-{what}-{}-{seq}\0", std::process::id());
        made = match open_map(path.as_bytes(), len, true) {
            // A file left by a process that had this pid and was killed:
            // not ours to keep.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                // SAFETY: a NUL-terminated path this rank made.
                unsafe { libc::unlink(path.as_ptr().cast()) };
                open_map(path.as_bytes(), len, true).ok()
            }
            r => r.ok(),
        };
        if made.is_some() {
            name[..path.len()].copy_from_slice(path.as_bytes());
        }
    }
    crate::coll::g_bcast(c, &mut name, 0)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(0);
    if c.rank != 0 && end > 0 {
        made = open_map(&name[..=end], len, false).ok();
    }
    let ok = all_ok(c, made.is_some())?;
    if c.rank == 0 && end > 0 {
        // SAFETY: a NUL-terminated path this rank made.
        unsafe { libc::unlink(name.as_ptr().cast()) };
    }
    match made {
        Some(m) if ok => Ok(m),
        _ => fail(
            abi::ERR_OTHER,
            format!("the shared table of a {what} could not be made in /dev/shm (shared memory full or not mounted?)"),
        ),
    }
}

/// Opens (or creates, exclusively) the NUL-terminated `path` and maps
/// `len` bytes of it shared.
fn open_map(path: &[u8], len: usize, create: bool) -> std::io::Result<Map> {
    let flags = libc::O_RDWR
        | libc::O_CLOEXEC
        | if create {
            libc::O_CREAT | libc::O_EXCL
        } else {
            0
        };
    // SAFETY: `path` is NUL-terminated; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast::<c_char>(), flags, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let r = (|| {
        // SAFETY: a descriptor this function opened.
        if create && unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Reserved now: a full /dev/shm fails here, not later with SIGBUS
        // at the first store into a window.
        if create {
            // SAFETY: a descriptor this function opened.
            let r = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
            if r != 0 {
                return Err(std::io::Error::from_raw_os_error(r));
            }
        }
        // SAFETY: a fresh shared mapping of the file's `len` bytes.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr: p.cast(), len })
    })();
    // SAFETY: as above; the mapping keeps the file.
    unsafe { libc::close(fd) };
    r
}

/// Reads `len` bytes at `addr` in process `pid` into `dst`, or writes
/// `src` there (cross-memory attach), looping over partial transfers.
fn cma(pid: i32, addr: usize, local: *mut u8, len: usize, write: bool) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        let l = libc::iovec {
            // SAFETY: within the caller's buffer of `len` bytes.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (addr + done) as *mut c_void,
            iov_len: len - done,
        };
        // SAFETY: `l` is this process's buffer; the kernel checks `r`
        // against the other process's mappings.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
            }
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Err(std::io::Error::other("no progress"));
        }
        done += n as usize;
    }
    Ok(())
}

/// Makes a window over `base`..`base + size` on `comm` (every flavor goes
/// through here; `shared`: the memory is to be allocated in the shared
/// table, and `base` is ignored).
fn make(
    l: &Lib,
    comm: Handle,
    mut base: usize,
    size: Aint,
    unit: c_int,
    flavor: c_int,
) -> Result<Handle, Fail> {
    let parent = l.any_comm(comm)?;
    if parent.remote.is_some() {
        return fail(abi::ERR_COMM, "a window needs an intracommunicator");
    }
    if size < 0 {
        return fail(ERR_SIZE, format!("negative window size {size}"));
    }
    if unit <= 0 {
        return fail(
            ERR_DISP,
            format!("displacement unit {unit} (must be positive)"),
        );
    }
    let c = crate::comm::dup_bare(l, &parent)?;
    drop(parent);
    let release = |c: &CommObj| {
        crate::state::mark(l, c.contexts[0], true);
        crate::state::mark(l, c.contexts[1], true);
    };
    let r = (|| {
        let n = c.size();
        // Sizes first: a shared window's segments follow the table.
        let sizes = gather(&c, &[size as u64, unit as u64, kernel_id()])?;
        if sizes.chunks(3).any(|x| x[2] != sizes[2]) {
            return fail(
                abi::ERR_UNSUPPORTED_OPERATION,
                "tandem: one-sided communication between hosts is not supported (every rank of a window must run on one machine)",
            );
        }
        let head = (n * 16).div_ceil(4096) * 4096;
        let mut offs = Vec::with_capacity(n);
        let mut segs = head;
        for x in sizes.chunks(3) {
            offs.push(segs);
            segs = segs.saturating_add((x[0] as usize).div_ceil(64) * 64);
        }
        // MPI_Win_allocate's memory goes into the shared mapping too, where
        // it fits (then transfers are plain copies, no system call); else
        // it is this process's own, reached by cross-memory attach.
        let mut table = None;
        if flavor == FLAVOR_ALLOCATE && segs - head <= SHARED_ALLOCATE_MAX {
            table = map_table(l, &c, segs, "win").ok();
        }
        let mapped = flavor == FLAVOR_SHARED || table.is_some();
        let mut owned = None;
        let mut regions_at = head;
        let table = match table {
            Some(t) => t,
            None if flavor == FLAVOR_SHARED => map_table(l, &c, segs, "win")?,
            None => {
                if flavor == FLAVOR_ALLOCATE {
                    let o = allocate(size)?;
                    base = o.ptr as usize;
                    owned = Some(o);
                }
                let mut total = head;
                if flavor == FLAVOR_DYNAMIC {
                    regions_at = total;
                    total += n * REGION_BYTES;
                }
                map_table(l, &c, total, "win")?
            }
        };
        if mapped {
            base = table.ptr as usize + offs[c.rank];
        }
        // A word to read back from each rank: cross-memory attach works.
        let probe = Box::new(0x7461_6e64_656d_0000u64 | c.rank as u64);
        let me = gather(
            &c,
            &[
                std::process::id() as u64,
                base as u64,
                &*probe as *const u64 as u64,
            ],
        )?;
        let mut targets = Vec::with_capacity(n);
        for r in 0..n {
            targets.push(Target {
                pid: me[3 * r] as i32,
                base: me[3 * r + 1] as usize,
                size: sizes[3 * r] as usize,
                unit: sizes[3 * r + 1] as usize,
                here: mapped.then(|| table.ptr as usize + offs[r]),
            });
        }
        if !mapped && n > 1 {
            let next = (c.rank + 1) % n;
            let mut got = 0u64;
            let reached = cma(
                targets[next].pid,
                me[3 * next + 2] as usize,
                (&mut got as *mut u64).cast(),
                8,
                false,
            );
            let ok = reached.is_ok() && got == 0x7461_6e64_656d_0000u64 | next as u64;
            if !all_ok(&c, ok)? {
                return fail(
                    abi::ERR_UNSUPPORTED_OPERATION,
                    format!("tandem: the ranks cannot reach each other's memory (cross-memory attach refused: {}); MPI_Win_allocate_shared works without it",
                        reached.err().map_or("a rank's probe failed".into(), |e| e.to_string())),
                );
            }
        }
        drop(probe);
        Ok((targets, table, regions_at, owned))
    })();
    let (targets, table, regions_at, owned) = match r {
        Ok(x) => x,
        Err(e) => {
            release(&c);
            return Err(e);
        }
    };
    let me = c.rank;
    let w = Win {
        me,
        targets,
        flavor,
        table,
        regions_at,
        _owned: owned,
        errhandler: Cell::new(crate::state::DEFAULT_ERRHANDLER),
        name: RefCell::new(String::new()),
        epoch: RefCell::new(Epoch::default()),
        attr_size: Box::new(size),
        attr_unit: Box::new(unit),
        attr_flavor: Box::new(flavor),
        attr_model: Box::new(MODEL_UNIFIED),
        comm: c,
    };
    Ok(win_handle(l.extra.rma.wins.borrow_mut().insert(Rc::new(w))))
}

/// Memory for `MPI_Win_allocate` outside the shared mapping: anonymous
/// pages (page-aligned, zero, touched only where the program writes), at
/// least one page, so that every window has an address of its own.
fn allocate(size: Aint) -> Result<Map, Fail> {
    if size < 0 {
        return fail(ERR_SIZE, format!("negative window size {size}"));
    }
    let len = (size as usize).max(1);
    // SAFETY: a fresh private anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return fail(
            abi::ERR_NO_MEM,
            format!("cannot allocate a window of {size} bytes"),
        );
    }
    Ok(Map { ptr: p.cast(), len })
}

/// The target's bytes a transfer touches: `(offset from the target
/// address, length, offset in the packed data)` per block, and the span
/// they cover (lowest offset, highest end).
struct Region {
    blocks: Vec<(isize, usize, usize)>,
    lo: isize,
    hi: isize,
    packed: usize,
}

fn region(l: &Lib, dt: Handle, n: usize) -> Result<Region, Fail> {
    let types = l.types.borrow();
    let info = types.info(dt).map_err(|c| crate::p2p::type_fail(c, dt))?;
    if !info.committed {
        return fail(
            abi::ERR_TYPE,
            format!("datatype {dt:#x} is not committed (MPI_Type_commit)"),
        );
    }
    let mut blocks = Vec::new();
    types
        .for_each_block(dt, n, |off, packed, len| blocks.push((off, len, packed)))
        .map_err(|c| crate::p2p::type_fail(c, dt))?;
    let lo = blocks.iter().map(|b| b.0).min().unwrap_or(0);
    let hi = blocks.iter().map(|b| b.0 + b.1 as isize).max().unwrap_or(0);
    Ok(Region {
        blocks,
        lo,
        hi,
        packed: info.size * n,
    })
}

/// Where a transfer to rank `r` at displacement `disp` starts in the
/// target's address space, checked against its window.
fn target_at(w: &Win, r: usize, disp: Aint, reg: &Region) -> Result<usize, Fail> {
    let t = &w.targets[r];
    if w.flavor == FLAVOR_DYNAMIC {
        // The displacement is an address (MPI_Get_address's) in memory
        // the target attached.
        let (lo, hi) = (disp as i128 + reg.lo as i128, disp as i128 + reg.hi as i128);
        // Covered by the attached regions together (adjacent ones may
        // hold one transfer).
        let mut list = w.regions(r);
        list.sort_unstable();
        let mut at = lo;
        for &(b, n) in &list {
            let (b, e) = (b as i128, b as i128 + n as i128);
            if b <= at && at < e {
                at = e;
            }
            if at >= hi {
                break;
            }
        }
        if at < hi {
            return fail(
                ERR_RMA_RANGE,
                format!("bytes {lo:#x}..{hi:#x} are not in memory rank {r} attached to its dynamic window (MPI_Win_attach)"),
            );
        }
        return Ok(disp as usize);
    }
    if disp < 0 {
        return fail(ERR_DISP, format!("negative target displacement {disp}"));
    }
    let start = (disp as i128) * t.unit as i128;
    if start + (reg.lo as i128) < 0 || start + reg.hi as i128 > t.size as i128 {
        return fail(
            ERR_RMA_RANGE,
            format!(
                "bytes {}..{} of rank {r}'s window, which has {} bytes",
                start + reg.lo as i128,
                start + reg.hi as i128,
                t.size
            ),
        );
    }
    Ok(t.base + start as usize)
}

/// Reads (`write` false) or writes the `len` bytes at `addr` of target
/// `r` from/to `buf`.
fn access(
    w: &Win,
    r: usize,
    addr: usize,
    buf: *mut u8,
    len: usize,
    write: bool,
) -> Result<(), Fail> {
    if len == 0 {
        return Ok(());
    }
    let t = &w.targets[r];
    let local = if let Some(here) = t.here {
        Some(here + (addr - t.base))
    } else if r == w.me {
        Some(addr)
    } else {
        None
    };
    if let Some(p) = local {
        // SAFETY: inside the target's window (checked by `target_at`),
        // mapped here; `buf` is the caller's `len` bytes.
        unsafe {
            if write {
                std::ptr::copy(buf, p as *mut u8, len);
            } else {
                std::ptr::copy(p as *const u8, buf, len);
            }
        }
        return Ok(());
    }
    cma(t.pid, addr, buf, len, write).map_err(|e| {
        Fail::new(
            abi::ERR_OTHER,
            format!("one-sided transfer with rank {r} failed: {e}"),
        )
    })
}

/// Holds target `r`'s accumulate mutex while alive.
struct Mutex<'a>(&'a AtomicU64);

impl Drop for Mutex<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Waits until `take` succeeds, spinning, then yielding; fails after
/// [`LOCK_WAIT`].
fn wait_for(what: &str, r: usize, mut take: impl FnMut() -> bool) -> Result<(), Fail> {
    let start = Instant::now();
    let mut k = 0u32;
    while !take() {
        k = k.saturating_add(1);
        if k < 100 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
            if k % 1024 == 0 && start.elapsed() > LOCK_WAIT {
                return fail(
                    abi::ERR_OTHER,
                    format!("waited {}s for {what} of rank {r}'s window (a rank that died holding it, or an unlock that never came)", LOCK_WAIT.as_secs()),
                );
            }
        }
    }
    Ok(())
}

fn mutex(w: &Win, r: usize) -> Result<Mutex<'_>, Fail> {
    let m = w.words(r).1;
    wait_for("the accumulate mutex", r, || {
        m.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })?;
    Ok(Mutex(m))
}

/// `MPI_Put` and `MPI_Get`.
#[allow(clippy::too_many_arguments)]
fn put_get(
    l: &Lib,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    r: c_int,
    disp: Aint,
    tn: c_int,
    tdt: Handle,
    h: Handle,
    get: bool,
) -> Result<(), Fail> {
    let w = win(l, h)?;
    if r == abi::PROC_NULL {
        return Ok(());
    }
    let r = w.check_rank(r)?;
    w.check_access(r, if get { "MPI_Get" } else { "MPI_Put" })?;
    let reg = region(l, tdt, count(tn)?)?;
    if reg.packed == 0 {
        // Nothing moves (a zero count or an empty datatype).
        return Ok(());
    }
    let at = target_at(&w, r, disp, &reg)?;
    if get {
        let mut v = in_view(l, buf, n, dt)?;
        if v.len != reg.packed {
            return fail(
                abi::ERR_TYPE,
                format!(
                    "MPI_Get: origin {} bytes, target {} bytes (the type signatures differ)",
                    v.len, reg.packed
                ),
            );
        }
        let bytes = v.bytes();
        for &(off, len, p) in &reg.blocks {
            access(
                &w,
                r,
                (at as isize + off) as usize,
                bytes[p..].as_mut_ptr(),
                len,
                false,
            )?;
        }
        if let Some(s) = &v.stage {
            unstage(l, s, reg.packed)?;
        }
    } else {
        let v = out_view(l, buf, n, dt)?;
        let bytes = v.bytes();
        if bytes.len() != reg.packed {
            return fail(
                abi::ERR_TYPE,
                format!(
                    "MPI_Put: origin {} bytes, target {} bytes (the type signatures differ)",
                    bytes.len(),
                    reg.packed
                ),
            );
        }
        for &(off, len, p) in &reg.blocks {
            access(
                &w,
                r,
                (at as isize + off) as usize,
                bytes[p..].as_ptr().cast_mut(),
                len,
                true,
            )?;
        }
    }
    Ok(())
}

/// `MPI_Accumulate`, `MPI_Get_accumulate` (with `result`),
/// `MPI_Fetch_and_op`: under the target's mutex, its bytes are read, the
/// old ones go to `result`, the operation combines the origin's into them
/// in the target datatype's layout, and the blocks are written back.
#[allow(clippy::too_many_arguments)]
fn accumulate(
    l: &Lib,
    buf: *const c_void,
    n: c_int,
    dt: Handle,
    result: Option<(*mut c_void, c_int, Handle)>,
    r: c_int,
    disp: Aint,
    tn: c_int,
    tdt: Handle,
    op: Handle,
    h: Handle,
    what: &str,
) -> Result<(), Fail> {
    let w = win(l, h)?;
    if r == abi::PROC_NULL {
        return Ok(());
    }
    let r = w.check_rank(r)?;
    w.check_access(r, what)?;
    let tn = count(tn)?;
    let reg = region(l, tdt, tn)?;
    if reg.packed == 0 {
        // Nothing moves (a zero count or an empty datatype): the
        // operation's handle only.
        if !crate::op::is_builtin(op) && !l.ops.borrow().is_valid(op) {
            return fail(abi::ERR_OP, format!("invalid operation handle {op:#x}"));
        }
        return Ok(());
    }
    if op != abi::REPLACE && op != abi::NO_OP {
        if !crate::op::is_builtin(op) {
            return fail(abi::ERR_OP, format!("{what}: operation {op:#x} is not a predefined one (accumulates take only those)"));
        }
        crate::coll::check_op(l, op, tdt)?;
    }
    let at = target_at(&w, r, disp, &reg)?;
    let origin: Vec<u8> = if op == abi::NO_OP {
        Vec::new()
    } else {
        let v = out_view(l, buf, n, dt)?;
        if v.bytes().len() != reg.packed {
            return fail(
                abi::ERR_TYPE,
                format!(
                    "{what}: origin {} bytes, target {} bytes (the type signatures differ)",
                    v.bytes().len(),
                    reg.packed
                ),
            );
        }
        v.bytes().to_vec()
    };
    let mut res = match result {
        Some((rb, rn, rdt)) => {
            let v = in_view(l, rb, rn, rdt)?;
            if v.len != reg.packed {
                return fail(
                    abi::ERR_TYPE,
                    format!(
                        "{what}: result {} bytes, target {} bytes (the type signatures differ)",
                        v.len, reg.packed
                    ),
                );
            }
            Some(v)
        }
        None => None,
    };
    let span = (reg.hi - reg.lo) as usize;
    let mut cur = vec![0u8; span];
    let _m = mutex(&w, r)?;
    // The target's bytes, blocks only (gaps stay zero).
    for &(off, len, _) in &reg.blocks {
        access(
            &w,
            r,
            (at as isize + off) as usize,
            cur[(off - reg.lo) as usize..].as_mut_ptr(),
            len,
            false,
        )?;
    }
    if let Some(v) = res.as_mut() {
        let bytes = v.bytes();
        for &(off, len, p) in &reg.blocks {
            let s = (off - reg.lo) as usize;
            bytes[p..p + len].copy_from_slice(&cur[s..s + len]);
        }
    }
    if op != abi::NO_OP {
        if op == abi::REPLACE {
            for &(off, len, p) in &reg.blocks {
                let s = (off - reg.lo) as usize;
                cur[s..s + len].copy_from_slice(&origin[p..p + len]);
            }
        } else {
            // The origin's data in the target's layout, then combined.
            let mut inp = vec![0u8; span];
            for &(off, len, p) in &reg.blocks {
                let s = (off - reg.lo) as usize;
                inp[s..s + len].copy_from_slice(&origin[p..p + len]);
            }
            // `lo` rebases both spans to the datatype's origin (possibly
            // outside them, hence wrapping: never dereferenced there); the
            // operation touches only the blocks, which lie inside.
            let (i, o) = (
                inp.as_ptr().wrapping_offset(-reg.lo),
                cur.as_mut_ptr().wrapping_offset(-reg.lo),
            );
            crate::coll::apply(l, op, tdt, tn, i, o)?;
        }
        for &(off, len, _) in &reg.blocks {
            let s = (off - reg.lo) as usize;
            access(
                &w,
                r,
                (at as isize + off) as usize,
                cur[s..].as_mut_ptr(),
                len,
                true,
            )?;
        }
    }
    drop(_m);
    if let Some(v) = &res {
        if let Some(s) = &v.stage {
            unstage(l, s, reg.packed)?;
        }
    }
    Ok(())
}

/// A request that is complete already (the request-based calls finish
/// their transfer before they return).
fn done_request(l: &Lib, out: *mut Handle) -> Result<(), Fail> {
    need(out, "request")?;
    let h = l.add_req(Req::Done(crate::p2p::empty_status(), None));
    // SAFETY: checked non-null.
    unsafe { set(out, h, "request") }
}

fn check_assert(a: c_int) -> Result<(), Fail> {
    if a & !MODE_ALL != 0 {
        return fail(ERR_ASSERT, format!("invalid assertion {a:#x}"));
    }
    Ok(())
}

/// The window ranks of `group`'s members (job ranks), or an error naming
/// one that is not in the window.
fn members(l: &Lib, w: &Win, group: Handle) -> Result<Vec<usize>, Fail> {
    let g = l.group(group)?;
    g.iter()
        .map(|&j| match w.comm.inverse.get(j as usize) {
            Some(&r) if r >= 0 => Ok(r as usize),
            _ => fail(
                abi::ERR_GROUP,
                format!("rank {j} of the job is not in the window's group"),
            ),
        })
        .collect()
}

fn free(l: &Lib, hp: *mut Handle) -> Result<(), Fail> {
    // SAFETY: the program's handle pointer, checked non-null.
    let h = unsafe { *need(hp, "win")? };
    let w = win(l, h)?;
    {
        let e = w.epoch.borrow();
        if !e.locks.is_empty() || e.all.is_some() || e.start.is_some() || e.post.is_some() {
            return fail(
                ERR_RMA_SYNC,
                "MPI_Win_free with an epoch open (unlock, complete or wait first)",
            );
        }
    }
    // Collective: no rank's memory goes while another may still reach it.
    barrier(&w.comm)?;
    // The attributes' delete callbacks run, as at MPI_Comm_free.
    crate::extra::type_attrs_free(l, h)?;
    if let Some(i) = win_index(h) {
        l.extra.rma.wins.borrow_mut().remove(i);
    }
    crate::state::mark(l, w.comm.contexts[0], true);
    crate::state::mark(l, w.comm.contexts[1], true);
    // SAFETY: checked non-null.
    unsafe { *hp = abi::WIN_NULL };
    Ok(())
}

export! {
    fn MPI_Win_create, PMPI_Win_create(base: *mut c_void, size: Aint, unit: c_int, _info: Handle, comm: Handle, win: *mut Handle) -> c_int {
        crate::run(comm, "MPI_Win_create", |l| {
            crate::null_first(win, abi::WIN_NULL, "win")?;
            if size > 0 && base.is_null() {
                return fail(ERR_BASE, "a null base for a window of bytes");
            }
            let h = make(l, comm, base as usize, size, unit, FLAVOR_CREATE)?;
            set(win, h, "win")
        })
    }

    fn MPI_Win_allocate, PMPI_Win_allocate(size: Aint, unit: c_int, _info: Handle, comm: Handle, baseptr: *mut c_void, win: *mut Handle) -> c_int {
        crate::run(comm, "MPI_Win_allocate", |l| {
            crate::null_first(win, abi::WIN_NULL, "win")?;
            need(baseptr.cast::<*mut c_void>(), "baseptr")?;
            let h = make(l, comm, 0, size, unit, FLAVOR_ALLOCATE)?;
            let w = self::win(l, h)?;
            let base = w.targets[w.me].base;
            // SAFETY: the program's pointer to a pointer, checked non-null.
            unsafe { *baseptr.cast::<*mut c_void>() = base as *mut c_void };
            set(win, h, "win")
        })
    }

    fn MPI_Win_allocate_shared, PMPI_Win_allocate_shared(size: Aint, unit: c_int, _info: Handle, comm: Handle, baseptr: *mut c_void, win: *mut Handle) -> c_int {
        crate::run(comm, "MPI_Win_allocate_shared", |l| {
            crate::null_first(win, abi::WIN_NULL, "win")?;
            need(baseptr.cast::<*mut c_void>(), "baseptr")?;
            let h = make(l, comm, 0, size, unit, FLAVOR_SHARED)?;
            let w = self::win(l, h)?;
            // An empty segment has no address (MPICH gives NULL too).
            let t = w.targets[w.me];
            let base = if t.size > 0 { t.here.unwrap_or(0) } else { 0 };
            // SAFETY: as above.
            unsafe { *baseptr.cast::<*mut c_void>() = base as *mut c_void };
            set(win, h, "win")
        })
    }

    fn MPI_Win_shared_query, PMPI_Win_shared_query(win: Handle, rank: c_int, size: *mut Aint, unit: *mut c_int, baseptr: *mut c_void) -> c_int {
        run_win(win, "MPI_Win_shared_query", |l| {
            let w = self::win(l, win)?;
            let r = if rank == abi::PROC_NULL {
                w.targets.iter().position(|t| t.size > 0).unwrap_or(0)
            } else {
                w.check_rank(rank)?
            };
            let t = w.targets[r];
            // Memory this process can load and store: a shared window's
            // segments, and its own (MPI 4.1: any flavor; size 0 and a
            // null base for memory it cannot reach, and for empty
            // segments).
            let here = match t.here {
                Some(p) => Some(p),
                None if r == w.me => Some(t.base),
                None => None,
            };
            let (sz, base) = match here {
                Some(p) if t.size > 0 => (t.size, p),
                _ => (0, 0),
            };
            set(size, sz as Aint, "size")?;
            set(unit, t.unit as c_int, "disp_unit")?;
            set(baseptr.cast::<*mut c_void>(), base as *mut c_void, "baseptr")
        })
    }

    fn MPI_Win_free, PMPI_Win_free(win: *mut Handle) -> c_int {
        let h = if win.is_null() { abi::WIN_NULL } else { *win };
        run_win(h, "MPI_Win_free", |l| free(l, win))
    }

    fn MPI_Win_fence, PMPI_Win_fence(assert: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_fence", |l| {
            check_assert(assert)?;
            let w = self::win(l, win)?;
            {
                let e = w.epoch.borrow();
                if !e.locks.is_empty() || e.all.is_some() || e.start.is_some() || e.post.is_some() {
                    return fail(ERR_RMA_SYNC, "MPI_Win_fence inside a lock or post/start epoch");
                }
            }
            fence(Ordering::SeqCst);
            barrier(&w.comm)?;
            fence(Ordering::SeqCst);
            let mut e = w.epoch.borrow_mut();
            e.fence = assert & MODE_NOSUCCEED == 0;
            e.fence_used = false;
            Ok(())
        })
    }

    fn MPI_Win_lock, PMPI_Win_lock(kind: c_int, rank: c_int, assert: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_lock", |l| {
            check_assert(assert)?;
            let w = self::win(l, win)?;
            if rank == abi::PROC_NULL {
                return Ok(());
            }
            let r = w.check_rank(rank)?;
            let excl = match kind {
                LOCK_EXCLUSIVE => true,
                LOCK_SHARED => false,
                _ => return fail(ERR_LOCKTYPE, format!("invalid lock type {kind}")),
            };
            if w.epoch.borrow().locks.iter().any(|x| x.0 == r) || w.epoch.borrow().all.is_some() {
                return fail(ERR_RMA_SYNC, format!("rank {r}'s window is locked by this rank already"));
            }
            w.passive_may_start("MPI_Win_lock")?;
            let real = assert & MODE_NOCHECK == 0;
            if real {
                w.lock(r, excl)?;
            }
            w.epoch.borrow_mut().locks.push((r, excl, real));
            Ok(())
        })
    }

    fn MPI_Win_unlock, PMPI_Win_unlock(rank: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_unlock", |l| {
            let w = self::win(l, win)?;
            if rank == abi::PROC_NULL {
                return Ok(());
            }
            let r = w.check_rank(rank)?;
            let mut e = w.epoch.borrow_mut();
            let Some(i) = e.locks.iter().position(|x| x.0 == r) else {
                return fail(ERR_RMA_SYNC, format!("MPI_Win_unlock of rank {r}, which this rank has not locked"));
            };
            let (_, excl, real) = e.locks.remove(i);
            fence(Ordering::SeqCst);
            if real {
                w.unlock(r, excl);
            }
            Ok(())
        })
    }

    fn MPI_Win_lock_all, PMPI_Win_lock_all(assert: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_lock_all", |l| {
            check_assert(assert)?;
            let w = self::win(l, win)?;
            if w.epoch.borrow().all.is_some() || !w.epoch.borrow().locks.is_empty() {
                return fail(ERR_RMA_SYNC, "MPI_Win_lock_all with a lock held already");
            }
            w.passive_may_start("MPI_Win_lock_all")?;
            let real = assert & MODE_NOCHECK == 0;
            if real {
                for r in 0..w.targets.len() {
                    w.lock(r, false)?;
                }
            }
            w.epoch.borrow_mut().all = Some(real);
            Ok(())
        })
    }

    fn MPI_Win_unlock_all, PMPI_Win_unlock_all(win: Handle) -> c_int {
        run_win(win, "MPI_Win_unlock_all", |l| {
            let w = self::win(l, win)?;
            let Some(real) = w.epoch.borrow_mut().all.take() else {
                return fail(ERR_RMA_SYNC, "MPI_Win_unlock_all without MPI_Win_lock_all");
            };
            fence(Ordering::SeqCst);
            if real {
                for r in 0..w.targets.len() {
                    w.unlock(r, false);
                }
            }
            Ok(())
        })
    }

    fn MPI_Win_flush, PMPI_Win_flush(rank: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_flush", |l| flush(l, win, Some(rank)))
    }

    fn MPI_Win_flush_local, PMPI_Win_flush_local(rank: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_flush_local", |l| flush(l, win, Some(rank)))
    }

    fn MPI_Win_flush_all, PMPI_Win_flush_all(win: Handle) -> c_int {
        run_win(win, "MPI_Win_flush_all", |l| flush(l, win, None))
    }

    fn MPI_Win_flush_local_all, PMPI_Win_flush_local_all(win: Handle) -> c_int {
        run_win(win, "MPI_Win_flush_local_all", |l| flush(l, win, None))
    }

    fn MPI_Win_sync, PMPI_Win_sync(win: Handle) -> c_int {
        run_win(win, "MPI_Win_sync", |l| {
            self::win(l, win)?;
            fence(Ordering::SeqCst);
            Ok(())
        })
    }

    fn MPI_Win_post, PMPI_Win_post(group: Handle, assert: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_post", |l| {
            check_assert(assert)?;
            let w = self::win(l, win)?;
            if w.epoch.borrow().post.is_some() {
                return fail(ERR_RMA_SYNC, "MPI_Win_post twice without MPI_Win_wait");
            }
            let origins = members(l, &w, group)?;
            fence(Ordering::SeqCst);
            for &r in &origins {
                w.comm.p2p.send(&[], w.comm.job_rank(r), T_POST).map_err(Fail::from)?;
            }
            w.epoch.borrow_mut().post = Some(origins);
            Ok(())
        })
    }

    fn MPI_Win_start, PMPI_Win_start(group: Handle, assert: c_int, win: Handle) -> c_int {
        run_win(win, "MPI_Win_start", |l| {
            check_assert(assert)?;
            let w = self::win(l, win)?;
            if w.epoch.borrow().start.is_some() {
                return fail(ERR_RMA_SYNC, "MPI_Win_start twice without MPI_Win_complete");
            }
            let targets = members(l, &w, group)?;
            for &r in &targets {
                w.comm.p2p.recv(&mut [], w.comm.job_rank(r), T_POST).map_err(Fail::from)?;
            }
            fence(Ordering::SeqCst);
            w.epoch.borrow_mut().start = Some(targets);
            Ok(())
        })
    }

    fn MPI_Win_complete, PMPI_Win_complete(win: Handle) -> c_int {
        run_win(win, "MPI_Win_complete", |l| {
            let w = self::win(l, win)?;
            let Some(targets) = w.epoch.borrow_mut().start.take() else {
                return fail(ERR_RMA_SYNC, "MPI_Win_complete without MPI_Win_start");
            };
            fence(Ordering::SeqCst);
            for &r in &targets {
                w.comm.p2p.send(&[], w.comm.job_rank(r), T_DONE).map_err(Fail::from)?;
            }
            Ok(())
        })
    }

    fn MPI_Win_wait, PMPI_Win_wait(win: Handle) -> c_int {
        run_win(win, "MPI_Win_wait", |l| {
            let w = self::win(l, win)?;
            let Some(origins) = w.epoch.borrow_mut().post.take() else {
                return fail(ERR_RMA_SYNC, "MPI_Win_wait without MPI_Win_post");
            };
            for &r in &origins {
                w.comm.p2p.recv(&mut [], w.comm.job_rank(r), T_DONE).map_err(Fail::from)?;
            }
            fence(Ordering::SeqCst);
            Ok(())
        })
    }

    fn MPI_Win_test, PMPI_Win_test(win: Handle, flag: *mut c_int) -> c_int {
        run_win(win, "MPI_Win_test", |l| {
            need(flag, "flag")?;
            let w = self::win(l, win)?;
            let Some(origins) = w.epoch.borrow().post.clone() else {
                return fail(ERR_RMA_SYNC, "MPI_Win_test without MPI_Win_post");
            };
            // Done once every origin's completion is there; only then are
            // they taken.
            let mut all = true;
            for &r in &origins {
                if w.comm.p2p.iprobe(w.comm.job_rank(r), T_DONE).map_err(Fail::from)?.is_none() {
                    all = false;
                    break;
                }
            }
            if all {
                for &r in &origins {
                    w.comm.p2p.recv(&mut [], w.comm.job_rank(r), T_DONE).map_err(Fail::from)?;
                }
                w.epoch.borrow_mut().post = None;
                fence(Ordering::SeqCst);
            }
            set(flag, all as c_int, "flag")
        })
    }

    fn MPI_Put, PMPI_Put(buf: *const c_void, n: c_int, dt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, win: Handle) -> c_int {
        run_win(win, "MPI_Put", |l| put_get(l, buf.cast_mut(), n, dt, rank, disp, tn, tdt, win, false))
    }

    fn MPI_Get, PMPI_Get(buf: *mut c_void, n: c_int, dt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, win: Handle) -> c_int {
        run_win(win, "MPI_Get", |l| put_get(l, buf, n, dt, rank, disp, tn, tdt, win, true))
    }

    fn MPI_Accumulate, PMPI_Accumulate(buf: *const c_void, n: c_int, dt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, op: Handle, win: Handle) -> c_int {
        run_win(win, "MPI_Accumulate", |l| accumulate(l, buf, n, dt, None, rank, disp, tn, tdt, op, win, "MPI_Accumulate"))
    }

    fn MPI_Get_accumulate, PMPI_Get_accumulate(buf: *const c_void, n: c_int, dt: Handle, res: *mut c_void, rn: c_int, rdt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, op: Handle, win: Handle) -> c_int {
        run_win(win, "MPI_Get_accumulate", |l| accumulate(l, buf, n, dt, Some((res, rn, rdt)), rank, disp, tn, tdt, op, win, "MPI_Get_accumulate"))
    }

    fn MPI_Fetch_and_op, PMPI_Fetch_and_op(buf: *const c_void, res: *mut c_void, dt: Handle, rank: c_int, disp: Aint, op: Handle, win: Handle) -> c_int {
        run_win(win, "MPI_Fetch_and_op", |l| accumulate(l, buf, 1, dt, Some((res, 1, dt)), rank, disp, 1, dt, op, win, "MPI_Fetch_and_op"))
    }

    fn MPI_Compare_and_swap, PMPI_Compare_and_swap(buf: *const c_void, cmp: *const c_void, res: *mut c_void, dt: Handle, rank: c_int, disp: Aint, win: Handle) -> c_int {
        run_win(win, "MPI_Compare_and_swap", |l| compare_and_swap(l, buf, cmp, res, dt, rank, disp, win))
    }

    fn MPI_Rput, PMPI_Rput(buf: *const c_void, n: c_int, dt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, win: Handle, req: *mut Handle) -> c_int {
        run_win(win, "MPI_Rput", |l| {
            put_get(l, buf.cast_mut(), n, dt, rank, disp, tn, tdt, win, false)?;
            done_request(l, req)
        })
    }

    fn MPI_Rget, PMPI_Rget(buf: *mut c_void, n: c_int, dt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, win: Handle, req: *mut Handle) -> c_int {
        run_win(win, "MPI_Rget", |l| {
            put_get(l, buf, n, dt, rank, disp, tn, tdt, win, true)?;
            done_request(l, req)
        })
    }

    fn MPI_Raccumulate, PMPI_Raccumulate(buf: *const c_void, n: c_int, dt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, op: Handle, win: Handle, req: *mut Handle) -> c_int {
        run_win(win, "MPI_Raccumulate", |l| {
            accumulate(l, buf, n, dt, None, rank, disp, tn, tdt, op, win, "MPI_Raccumulate")?;
            done_request(l, req)
        })
    }

    fn MPI_Rget_accumulate, PMPI_Rget_accumulate(buf: *const c_void, n: c_int, dt: Handle, res: *mut c_void, rn: c_int, rdt: Handle, rank: c_int, disp: Aint, tn: c_int, tdt: Handle, op: Handle, win: Handle, req: *mut Handle) -> c_int {
        run_win(win, "MPI_Rget_accumulate", |l| {
            accumulate(l, buf, n, dt, Some((res, rn, rdt)), rank, disp, tn, tdt, op, win, "MPI_Rget_accumulate")?;
            done_request(l, req)
        })
    }

    fn MPI_Win_create_dynamic, PMPI_Win_create_dynamic(_info: Handle, comm: Handle, win: *mut Handle) -> c_int {
        crate::run(comm, "MPI_Win_create_dynamic", |l| {
            crate::null_first(win, abi::WIN_NULL, "win")?;
            let h = make(l, comm, 0, 0, 1, FLAVOR_DYNAMIC)?;
            set(win, h, "win")
        })
    }

    fn MPI_Win_attach, PMPI_Win_attach(win: Handle, base: *mut c_void, size: Aint) -> c_int {
        run_win(win, "MPI_Win_attach", |l| {
            let w = self::win(l, win)?;
            if w.flavor != FLAVOR_DYNAMIC {
                return fail(abi::ERR_RMA_FLAVOR, "MPI_Win_attach on a window not made by MPI_Win_create_dynamic");
            }
            if size < 0 {
                return fail(ERR_SIZE, format!("negative size {size}"));
            }
            if size == 0 {
                return Ok(());
            }
            if base.is_null() {
                return fail(ERR_BASE, "a null base");
            }
            let Some(k) = (0..SLOTS).find(|&k| w.region_word(w.me, 3 + 2 * k).load(Ordering::Relaxed) == 0) else {
                return fail(ERR_RMA_ATTACH, format!("more than {SLOTS} regions attached to one rank's dynamic window"));
            };
            w.set_region(k, base as usize, size as usize);
            Ok(())
        })
    }

    fn MPI_Win_detach, PMPI_Win_detach(win: Handle, base: *const c_void) -> c_int {
        run_win(win, "MPI_Win_detach", |l| {
            let w = self::win(l, win)?;
            if w.flavor != FLAVOR_DYNAMIC {
                return fail(abi::ERR_RMA_FLAVOR, "MPI_Win_detach on a window not made by MPI_Win_create_dynamic");
            }
            let used = (w.region_word(w.me, 1).load(Ordering::Relaxed) as usize).min(SLOTS);
            let Some(k) = (0..used).find(|&k| {
                w.region_word(w.me, 3 + 2 * k).load(Ordering::Relaxed) != 0
                    && w.region_word(w.me, 2 + 2 * k).load(Ordering::Relaxed) == base as u64
            }) else {
                return fail(ERR_RMA_ATTACH, format!("MPI_Win_detach of {base:p}, which is not attached"));
            };
            w.set_region(k, 0, 0);
            Ok(())
        })
    }

    fn MPI_Win_create_keyval, PMPI_Win_create_keyval(copy: Option<crate::state::CopyFn>, delete: Option<crate::state::DeleteFn>, key: *mut c_int, extra_state: *mut c_void) -> c_int {
        crate::run(abi::COMM_WORLD, "MPI_Win_create_keyval", |l| crate::comm::create_keyval(l, copy, delete, key, extra_state, crate::state::KeyKind::Win))
    }

    fn MPI_Win_free_keyval, PMPI_Win_free_keyval(key: *mut c_int) -> c_int {
        crate::run(abi::COMM_WORLD, "MPI_Win_free_keyval", |l| crate::comm::free_keyval_of(l, key, crate::state::KeyKind::Win))
    }

    fn MPI_Win_set_attr, PMPI_Win_set_attr(win: Handle, key: c_int, val: *mut c_void) -> c_int {
        run_win(win, "MPI_Win_set_attr", |l| {
            self::win(l, win)?;
            if matches!(key, WIN_BASE | WIN_SIZE | WIN_DISP_UNIT | WIN_CREATE_FLAVOR | WIN_MODEL) {
                return fail(abi::ERR_KEYVAL, format!("attribute {key:#x} is predefined (read only)"));
            }
            crate::comm::key_of_kind(l, key, crate::state::KeyKind::Win)?;
            crate::extra::obj_attr_set(l, win, key, val)
        })
    }

    fn MPI_Win_delete_attr, PMPI_Win_delete_attr(win: Handle, key: c_int) -> c_int {
        run_win(win, "MPI_Win_delete_attr", |l| {
            self::win(l, win)?;
            crate::comm::key_of_kind(l, key, crate::state::KeyKind::Win)?;
            if l.keyval_index(key).is_none() {
                return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}"));
            }
            crate::extra::type_attr_delete(l, win, key, true)
        })
    }

    fn MPI_Win_get_group, PMPI_Win_get_group(win: Handle, group: *mut Handle) -> c_int {
        run_win(win, "MPI_Win_get_group", |l| {
            let w = self::win(l, win)?;
            set(group, l.add_group(w.comm.group.clone()), "group")
        })
    }

    fn MPI_Win_get_attr, PMPI_Win_get_attr(win: Handle, key: c_int, val: *mut c_void, flag: *mut c_int) -> c_int {
        run_win(win, "MPI_Win_get_attr", |l| {
            let w = self::win(l, win)?;
            need(flag, "flag")?;
            let out = need(val.cast::<*mut c_void>(), "attribute_val")?;
            let v: *mut c_void = match key {
                WIN_BASE => w.targets[w.me].here.unwrap_or(w.targets[w.me].base) as *mut c_void,
                WIN_SIZE => (&*w.attr_size as *const Aint).cast_mut().cast(),
                WIN_DISP_UNIT => (&*w.attr_unit as *const c_int).cast_mut().cast(),
                WIN_CREATE_FLAVOR => (&*w.attr_flavor as *const c_int).cast_mut().cast(),
                WIN_MODEL => (&*w.attr_model as *const c_int).cast_mut().cast(),
                _ if crate::comm::keyval(l, key).is_some() => {
                    crate::comm::key_of_kind(l, key, crate::state::KeyKind::Win)?;
                    let v = l.extra.type_attrs.borrow().iter().find(|x| x.0 == win && x.1 == key).map(|x| x.2);
                    set(flag, v.is_some() as c_int, "flag")?;
                    if let Some(v) = v {
                        // SAFETY: checked non-null above.
                        unsafe { *out = v };
                    }
                    return Ok(());
                }
                _ => return fail(abi::ERR_KEYVAL, format!("invalid attribute key {key:#x}")),
            };
            // SAFETY: checked non-null; MPI's attribute_val is a pointer
            // to where the value goes.
            unsafe { *out = v };
            set(flag, 1, "flag")
        })
    }

    fn MPI_Win_set_name, PMPI_Win_set_name(win: Handle, name: *const c_char) -> c_int {
        run_win(win, "MPI_Win_set_name", |l| {
            let w = self::win(l, win)?;
            if name.is_null() {
                return fail(abi::ERR_ARG, "null window name");
            }
            // SAFETY: the program's NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
            let mut n = s.len().min(abi::MAX_OBJECT_NAME - 1);
            while !s.is_char_boundary(n) {
                n -= 1;
            }
            *w.name.borrow_mut() = s[..n].to_string();
            Ok(())
        })
    }

    fn MPI_Win_get_name, PMPI_Win_get_name(win: Handle, name: *mut c_char, len: *mut c_int) -> c_int {
        run_win(win, "MPI_Win_get_name", |l| {
            let w = self::win(l, win)?;
            let name = need(name, "win_name")?;
            let s = w.name.borrow();
            // SAFETY: MPI's name buffer holds MPI_MAX_OBJECT_NAME bytes;
            // the name was cut to fit with its NUL.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), name, s.len());
                *name.add(s.len()) = 0;
            }
            set(len, s.len() as c_int, "resultlen")
        })
    }

    fn MPI_Win_set_errhandler, PMPI_Win_set_errhandler(win: Handle, h: Handle) -> c_int {
        run_win(win, "MPI_Win_set_errhandler", |l| {
            let w = self::win(l, win)?;
            if !l.errhandler_valid(h) {
                return fail(abi::ERR_ARG, format!("invalid error handler {h:#x}"));
            }
            w.errhandler.set(h);
            Ok(())
        })
    }

    fn MPI_Win_get_errhandler, PMPI_Win_get_errhandler(win: Handle, h: *mut Handle) -> c_int {
        run_win(win, "MPI_Win_get_errhandler", |l| {
            let e = self::win(l, win)?.errhandler.get();
            let e = if e == crate::state::DEFAULT_ERRHANDLER { abi::ERRORS_ARE_FATAL } else { e };
            set(h, e, "errhandler")
        })
    }

    fn MPI_Win_create_errhandler, PMPI_Win_create_errhandler(f: Option<crate::state::ErrFn>, h: *mut Handle) -> c_int {
        crate::run(abi::COMM_WORLD, "MPI_Win_create_errhandler", |l| {
            let Some(f) = f else {
                return fail(abi::ERR_ARG, "null error handler function");
            };
            set(h, l.add_errhandler(f), "errhandler")
        })
    }

    fn MPI_Win_call_errhandler, PMPI_Win_call_errhandler(win: Handle, code: c_int) -> c_int {
        let Some(l) = crate::state::lib() else {
            return crate::not_running("MPI_Win_call_errhandler");
        };
        if let Err(e) = self::win(l, win) {
            return raise_win(l, win, "MPI_Win_call_errhandler", e);
        }
        // The handler gets the program's code itself.
        crate::invoke_handler(l, win_handler(l, win), win, code, "MPI_Win_call_errhandler", || {
            crate::call_message(code)
        });
        abi::SUCCESS
    }

    fn MPI_Win_get_info, PMPI_Win_get_info(win: Handle, info: *mut Handle) -> c_int {
        run_win(win, "MPI_Win_get_info", |l| {
            self::win(l, win)?;
            set(info, crate::extra::new_info(l, Vec::new()), "info_used")
        })
    }

    fn MPI_Win_set_info, PMPI_Win_set_info(win: Handle, _info: Handle) -> c_int {
        // Hints only: none changes what this library does.
        run_win(win, "MPI_Win_set_info", |l| self::win(l, win).map(|_| ()))
    }
}

/// `MPI_Win_flush` and friends: transfers complete when their call
/// returns, so a flush checks its epoch and orders memory.
fn flush(l: &Lib, h: Handle, rank: Option<c_int>) -> Result<(), Fail> {
    let w = win(l, h)?;
    let e = w.epoch.borrow();
    let passive = e.all.is_some() || !e.locks.is_empty();
    if let Some(r) = rank {
        if r != abi::PROC_NULL {
            let r = w.check_rank(r)?;
            if e.all.is_none() && !e.locks.iter().any(|x| x.0 == r) {
                return fail(
                    ERR_RMA_SYNC,
                    format!("flush of rank {r}, which this rank has not locked"),
                );
            }
        }
    } else if !passive {
        return fail(
            ERR_RMA_SYNC,
            "flush outside a passive-target epoch (MPI_Win_lock or MPI_Win_lock_all first)",
        );
    }
    fence(Ordering::SeqCst);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn compare_and_swap(
    l: &Lib,
    buf: *const c_void,
    cmp: *const c_void,
    res: *mut c_void,
    dt: Handle,
    rank: c_int,
    disp: Aint,
    h: Handle,
) -> Result<(), Fail> {
    let w = win(l, h)?;
    if rank == abi::PROC_NULL {
        return Ok(());
    }
    let r = w.check_rank(rank)?;
    w.check_access(r, "MPI_Compare_and_swap")?;
    // MPI's rule: integer, logical, byte (and, as MPICH allows, character)
    // types; not floating point, complex or pair types.
    use crate::datatype::Basic as B;
    let size = match crate::datatype::basic_of(dt) {
        Some(
            B::I8 | B::U8 | B::I16 | B::U16 | B::I32 | B::U32 | B::I64 | B::U64 | B::Bool
            | B::Logical | B::Byte,
        ) => {
            l.types
                .borrow()
                .info(dt)
                .map_err(|c| crate::p2p::type_fail(c, dt))?
                .size
        }
        _ => {
            return fail(
                abi::ERR_TYPE,
                format!("MPI_Compare_and_swap takes a predefined integer, logical or byte datatype, not {dt:#x}"),
            )
        }
    };
    if size > 0 && (buf.is_null() || cmp.is_null() || res.is_null()) {
        return fail(abi::ERR_BUFFER, "a null buffer");
    }
    let reg = Region {
        blocks: vec![(0, size, 0)],
        lo: 0,
        hi: size as isize,
        packed: size,
    };
    let at = target_at(&w, r, disp, &reg)?;
    let mut old = vec![0u8; size];
    let _m = mutex(&w, r)?;
    access(&w, r, at, old.as_mut_ptr(), size, false)?;
    // SAFETY: the program's buffers of one element of `dt`.
    let (new, want) = unsafe {
        (
            std::slice::from_raw_parts(buf.cast::<u8>(), size),
            std::slice::from_raw_parts(cmp.cast::<u8>(), size),
        )
    };
    if old == want {
        access(&w, r, at, new.as_ptr().cast_mut(), size, true)?;
    }
    drop(_m);
    // SAFETY: as above; `res` may alias neither input (MPI).
    unsafe { std::ptr::copy_nonoverlapping(old.as_ptr(), res.cast::<u8>(), size) };
    Ok(())
}
