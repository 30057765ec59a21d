//! The job's shared-memory file: one per job, holding every channel.
//!
//! Layout (all offsets multiples of 4096):
//!
//! ```text
//! [job header | pid of each rank]  [channel 0->0] [channel 0->1] ... [channel n-1->n-1]
//! channel = [line ring: head counter, lines] [slot ring: tail, head, slots]
//!           [eager cells: tail, head, cells]
//! ```
//!
//! The launcher creates the file under `/dev/shm` with mode 0600 and a
//! unique name (`O_EXCL`), reserves its memory with `posix_fallocate` (so a
//! full `/dev/shm` is an error now, not a `SIGBUS` later), writes the header,
//! passes the open descriptor to the ranks it spawns and unlinks the name
//! right after spawning them. The ranks map the inherited descriptor, so the
//! name exists only while ranks are being started and nothing is left
//! behind, whether the job ends normally or any process in it is killed.

use crate::config::Layout;
use crate::error::{Error, Result};
use std::fs::File;
use std::path::PathBuf;
use tandem_core::line_ring::LineRing;
use tandem_core::slot_ring::SlotRing;
use tandem_core::sync::{AtomicU32, AtomicU64, Ordering};

/// Set in a published wait record (see `JobMap::wait_slot`).
pub(crate) const WAIT_VALID: u64 = 1 << 63;

const MAGIC: u64 = u64::from_le_bytes(*b"TANDEMj1");
/// 7: one-line eager messages carry the short header (`tandem_core::wire`).
/// 8: an eager message takes one eager credit, an RTS one rendezvous
/// credit (or an eager one, as `RtsEager`), and headers return them so.
const VERSION: u32 = 8;
const PAGE: usize = 4096;
const PIDS_AT: usize = 128;
/// Most ranks one shared-memory job supports.
pub const MAX_RANKS: usize = 4096;

#[repr(C)]
struct JobHeader {
    magic: u64,
    version: u32,
    nranks: u32,
    job: u64,
    lines: u32,
    slot_steps: u32,
    slot_bytes: u32,
    eager_limit: u32,
    credits: u32,
    envelopes: u32,
    cells: u32,
    cell_min: u32,
    cell_piece: u32,
    total_len: u64,
    attached: AtomicU32,
    /// The host's single-copy range ([`HostPaths`]), decided by the file's
    /// creator for every rank of the host.
    pull_from: u64,
    pull_to: u64,
    stream_ps: [u32; 2],
    /// The cell threshold the creator measured ([`HostPaths::cell_min`];
    /// the one in use is `cell_min` above).
    cell_min_measured: u32,
}

const fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

fn waits_at(nranks: usize) -> usize {
    (PIDS_AT + 4 * nranks).next_multiple_of(8)
}

fn header_len(nranks: usize) -> usize {
    round_up(waits_at(nranks) + 16 * nranks)
}

fn line_len(l: &Layout) -> usize {
    round_up(LineRing::bytes_needed(l.lines as usize).expect("Layout::validate bounds lines"))
}

fn slot_len(l: &Layout) -> usize {
    round_up(
        SlotRing::bytes_needed(l.slot_steps as u64, l.slot_bytes as usize)
            .expect("Layout::validate bounds the slot ring"),
    )
}

/// The eager cells: a slot ring of [`Layout::cell_pieces`] slots of
/// [`Layout::piece_bytes`] bytes (none if no payload goes through a cell).
fn cell_len(l: &Layout) -> usize {
    match l.cell_pieces() {
        0 => 0,
        n => round_up(
            SlotRing::bytes_needed(n, l.piece_bytes()).expect("Layout::validate bounds the cells"),
        ),
    }
}

fn chan_len(l: &Layout) -> usize {
    line_len(l) + slot_len(l) + cell_len(l)
}

/// Total bytes of the job file for `nranks` ranks, or an error if that is
/// absurdly large (more than 1 TiB).
///
/// # Errors
/// [`Error::Config`] above 1 TiB (or if the size overflows `usize`).
pub fn job_len(nranks: usize, l: &Layout) -> Result<usize> {
    nranks
        .checked_mul(nranks)
        .and_then(|p| p.checked_mul(chan_len(l)))
        .and_then(|c| c.checked_add(header_len(nranks)))
        .filter(|&t| t <= 1 << 40)
        .ok_or_else(|| {
            Error::Config(format!(
                "{nranks} ranks with layout {l:?} need more than 1 TiB of shared memory"
            ))
        })
}

enum Backing {
    File(#[allow(dead_code)] memmap2::MmapRaw),
    Anon(#[allow(dead_code)] memmap2::MmapMut),
}

/// A mapped job file (or anonymous memory for a one-process world).
pub struct JobMap {
    _backing: Backing,
    base: *mut u8,
    len: usize,
    nranks: usize,
    layout: Layout,
    job: u64,
    /// The host's single-copy range, from the header (or measured for an
    /// anonymous mapping).
    paths: HostPaths,
}

// SAFETY: the mapping is shared memory accessed only through atomics and
// the ring protocols; the pointer stays valid as long as `_backing` lives.
unsafe impl Send for JobMap {}
// SAFETY: as above; no method hands out unsynchronised mutable access.
unsafe impl Sync for JobMap {}

fn check_ranks(nranks: usize) -> Result<()> {
    if nranks == 0 || nranks > MAX_RANKS {
        return Err(Error::Config(format!(
            "job size must be 1..={MAX_RANKS}, got {nranks}"
        )));
    }
    Ok(())
}

impl JobMap {
    /// Creates the job file for `nranks` ranks and returns it open, with its
    /// path (the caller unlinks it once every rank holds the descriptor).
    ///
    /// # Errors
    /// [`Error::Config`] for `nranks` outside 1..=[`MAX_RANKS`], a layout
    /// [`Layout::validate`] refuses, or a file over 1 TiB; [`Error::Io`] if the
    /// file cannot be created (it exists already, no permission), its memory
    /// cannot be reserved (`/dev/shm` too small) or it cannot be mapped. A file
    /// that was created is removed again.
    pub fn create_file(job: u64, nranks: usize, layout: &Layout) -> Result<(File, PathBuf)> {
        Self::create_file_with(job, nranks, layout, HostPaths::NEVER)
    }

    /// [`create_file`](Self::create_file) with the host's single-copy range
    /// (the launcher passes what [`crate::calibrate`] measured): what every
    /// rank that opens the file uses, whatever it would have measured
    /// itself. [`create_file`](Self::create_file) streams every payload.
    ///
    /// # Errors
    /// As [`create_file`](Self::create_file).
    pub fn create_file_with(
        job: u64,
        nranks: usize,
        layout: &Layout,
        paths: HostPaths,
    ) -> Result<(File, PathBuf)> {
        use std::os::unix::fs::OpenOptionsExt;
        check_ranks(nranks)?;
        layout.validate()?;
        let layout = &layout.with_cell_min_chosen(paths.cell_min);
        let path = shm_path(job);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let guard = Unlink(Some(path.clone()));
        let len = job_len(nranks, layout)?;
        crate::sys::reserve(&file, len as u64).map_err(|e| {
            Error::io(
                format!("reserving {len} bytes in /dev/shm for {nranks} ranks (is /dev/shm large enough?)"),
                e,
            )
        })?;
        let map = memmap2::MmapRaw::map_raw(&file)?;
        // SAFETY: the mapping is at least one page long and page aligned,
        // and nobody else has it yet.
        let h = unsafe { &mut *(map.as_mut_ptr() as *mut JobHeader) };
        h.magic = MAGIC;
        h.version = VERSION;
        h.nranks = nranks as u32;
        h.job = job;
        h.lines = layout.lines;
        h.slot_steps = layout.slot_steps;
        h.slot_bytes = layout.slot_bytes;
        h.eager_limit = layout.eager_limit;
        h.credits = layout.credits;
        h.envelopes = layout.envelopes;
        h.cells = layout.cells;
        h.cell_min = layout.cell_min;
        h.cell_piece = layout.cell_piece;
        h.total_len = len as u64;
        h.pull_from = paths.from;
        h.pull_to = paths.to;
        h.stream_ps = paths.stream_ps;
        h.cell_min_measured = paths.cell_min;
        map.flush()?;
        std::mem::forget(guard);
        Ok((file, path))
    }

    /// Maps a job file and checks it belongs to `job` with `nranks` ranks.
    ///
    /// # Errors
    /// [`Error::JobMismatch`] if it is not a job file of this version (shorter
    /// than a page, another magic or version), belongs to another job or
    /// number of ranks, or its length disagrees with its header; [`Error::Config`]
    /// if the layout in its header is invalid or `nranks` is out of range;
    /// [`Error::Io`] if it cannot be inspected or mapped.
    pub fn open(file: &File, job: u64, nranks: usize) -> Result<Self> {
        let flen = file.metadata()?.len() as usize;
        if flen < PAGE {
            return Err(Error::JobMismatch {
                expected: format!("a tandem job file for job {job:016x}"),
                found: format!("a {flen}-byte file"),
            });
        }
        let map = memmap2::MmapRaw::map_raw(file)?;
        let base = map.as_mut_ptr();
        // SAFETY: at least one page is mapped; the fields read are plain
        // integers written before the descriptor was handed out.
        let h = unsafe { &*(base as *const JobHeader) };
        if h.magic != MAGIC || h.version != VERSION {
            return Err(Error::JobMismatch {
                expected: format!("tandem job file version {VERSION}"),
                found: format!("magic {:#x} version {}", h.magic, h.version),
            });
        }
        if h.job != job || h.nranks as usize != nranks {
            return Err(Error::JobMismatch {
                expected: format!("job {job:016x} with {nranks} ranks"),
                found: format!("job {:016x} with {} ranks", h.job, h.nranks),
            });
        }
        let layout = Layout {
            lines: h.lines,
            slot_steps: h.slot_steps,
            slot_bytes: h.slot_bytes,
            eager_limit: h.eager_limit,
            credits: h.credits,
            envelopes: h.envelopes,
            cells: h.cells,
            cell_min: h.cell_min,
            cell_piece: h.cell_piece,
        };
        layout.validate()?;
        if layout.cell_min == 0 {
            return Err(Error::JobMismatch {
                expected: "a job file whose creator decided the cell threshold".into(),
                found: "cell_min 0".into(),
            });
        }
        check_ranks(nranks)?;
        let len = job_len(nranks, &layout)?;
        if h.total_len as usize != len || flen < len {
            return Err(Error::JobMismatch {
                expected: format!("a {len}-byte job file"),
                found: format!("{flen} bytes (header says {})", h.total_len),
            });
        }
        let paths = HostPaths {
            from: h.pull_from,
            to: h.pull_to,
            stream_ps: h.stream_ps,
            cell_min: h.cell_min_measured,
        };
        Ok(Self {
            _backing: Backing::File(map),
            base,
            len,
            nranks,
            layout,
            job,
            paths,
        })
    }

    /// Anonymous shared memory for a world of threads in one process.
    ///
    /// # Errors
    /// [`Error::Config`] as for [`create_file`](Self::create_file);
    /// [`Error::Io`] if the memory cannot be mapped.
    pub fn anon(nranks: usize, layout: &Layout) -> Result<Self> {
        Self::anon_with(nranks, layout, HostPaths::NEVER)
    }

    /// [`anon`](Self::anon) with the host's single-copy range (see
    /// [`create_file_with`](Self::create_file_with); [`anon`](Self::anon)
    /// streams every payload).
    ///
    /// # Errors
    /// As [`anon`](Self::anon).
    pub fn anon_with(nranks: usize, layout: &Layout, paths: HostPaths) -> Result<Self> {
        check_ranks(nranks)?;
        layout.validate()?;
        let layout = &layout.with_cell_min_chosen(paths.cell_min);
        let len = job_len(nranks, layout)?;
        let mut map = memmap2::MmapOptions::new().len(len).map_anon()?;
        let base = map.as_mut_ptr();
        Ok(Self {
            _backing: Backing::Anon(map),
            base,
            len,
            nranks,
            layout: *layout,
            job: 0,
            paths,
        })
    }

    /// The host's single-copy range, decided by whoever created the mapping
    /// ([`crate::calibrate`]).
    pub fn paths(&self) -> HostPaths {
        self.paths
    }

    /// The channel layout, its [`Layout::cell_min`] decided (never 0).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The job id.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    fn attached(&self) -> &AtomicU32 {
        // SAFETY: the header is inside the mapping; AtomicU32 accepts any bits.
        unsafe { &(*(self.base as *const JobHeader)).attached }
    }

    /// The slot where rank `r` publishes its process id.
    pub fn pid_slot(&self, r: usize) -> &AtomicU32 {
        assert!(r < self.nranks);
        // SAFETY: header_len() reserves 4 bytes per rank at PIDS_AT, which is
        // 4-aligned; AtomicU32 accepts any bits.
        unsafe { &*(self.base.add(PIDS_AT + 4 * r) as *const AtomicU32) }
    }

    /// Where rank `r` publishes what it is blocked in (for hang reports):
    /// word 0 is [`WAIT_VALID`] | kind << 48 | context << 32 | peer, word 1
    /// the tag; zero when it is not blocked.
    pub(crate) fn wait_slot(&self, r: usize) -> &[AtomicU64; 2] {
        assert!(r < self.nranks);
        // SAFETY: header_len() reserves 16 bytes per rank at waits_at(),
        // which is 8-aligned; AtomicU64 accepts any bits.
        unsafe { &*(self.base.add(waits_at(self.nranks) + 16 * r) as *const [AtomicU64; 2]) }
    }

    /// Records that `rank` (process `pid`) mapped the file; returns how many
    /// ranks have attached so far.
    pub fn attach(&self, rank: usize, pid: u32) -> u32 {
        self.pid_slot(rank).store(pid, Ordering::Release);
        self.attached().fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The line ring, slot ring and eager cells (if the layout has any)
    /// carrying messages from `src` to `dst`.
    ///
    /// The views borrow the mapping for `'static`; callers keep the
    /// `JobMap` alive (in an `Arc`) for as long as they use them.
    pub(crate) fn channel(
        &self,
        src: usize,
        dst: usize,
    ) -> (
        LineRing<'static>,
        SlotRing<'static>,
        Option<SlotRing<'static>>,
    ) {
        assert!(src < self.nranks && dst < self.nranks);
        let l = &self.layout;
        let off = header_len(self.nranks) + (src * self.nranks + dst) * chan_len(l);
        debug_assert!(off + chan_len(l) <= self.len);
        // SAFETY: `off` and the lengths come from the validated layout and
        // stay inside the mapping (checked at open); offsets are page
        // aligned; the Arc<JobMap> held next to the views keeps it mapped.
        unsafe {
            let lp = self.base.add(off);
            let line = LineRing::from_raw(lp, line_len(l), l.lines as usize)
                .expect("validated line ring layout");
            let sp = lp.add(line_len(l));
            let slot =
                SlotRing::from_raw(sp, slot_len(l), l.slot_steps as u64, l.slot_bytes as usize)
                    .expect("validated slot ring layout");
            let cells = (cell_len(l) > 0).then(|| {
                SlotRing::from_raw(
                    sp.add(slot_len(l)),
                    cell_len(l),
                    l.cell_pieces(),
                    l.piece_bytes(),
                )
                .expect("validated cell layout")
            });
            (line, slot, cells)
        }
    }
}

/// Removes a path when dropped (unless emptied first).
pub(crate) struct Unlink(pub(crate) Option<PathBuf>);
impl Drop for Unlink {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The `/dev/shm` path a job's file has while its ranks start.
pub fn shm_path(job: u64) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tandem-{}-{job:016x}", crate::sys::uid()))
}

/// A fresh random job id.
pub fn new_job_id() -> u64 {
    let mut b = [0u8; 8];
    let r = u64::from_le_bytes(b);
    if crate::sys::random_bytes(&mut b) && u64::from_le_bytes(b) != 0 {
        u64::from_le_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        (t ^ r ^ ((std::process::id() as u64) << 32)) | 1
    }
}

/// The calibration's cache-resident measuring size.
pub const MID: usize = 256 * 1024;
/// The calibration's memory-sized measuring size.
pub const BIG: usize = 4 << 20;

/// ns per byte at `n` of a cost measured as `mid` at [`MID`] and `big` at
/// [`BIG`]: `mid` below, `big` above, linear in log2(n) between.
pub fn per_byte(n: usize, mid: f64, big: f64) -> f64 {
    if n <= MID {
        return mid;
    }
    if n >= BIG {
        return big;
    }
    let t = ((n as f64).log2() - (MID as f64).log2()) / ((BIG as f64).log2() - (MID as f64).log2());
    mid + (big - mid) * t
}

/// The sizes of rendezvous payload a receiver pulls single-copy on this
/// host: `from..=to` (none when `from > to`), what streaming costs here, so
/// that a link can tell a pull that went badly, and from which size an
/// eager payload goes through a cell. Decided once per host and job and
/// kept in the job file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPaths {
    /// Smallest payload pulled.
    pub from: u64,
    /// Largest payload pulled.
    pub to: u64,
    /// A stream's cost per byte at [`MID`] and at [`BIG`], in picoseconds
    /// (0: not measured; then the links keep this choice instead of learning
    /// their own, see `transport::shm`).
    pub stream_ps: [u32; 2],
    /// The smallest eager payload sent through a cell, as measured here
    /// (0: not measured). Used where the layout leaves
    /// [`Layout::cell_min`] at 0; above the eager limit: no cells.
    pub cell_min: u32,
}

impl HostPaths {
    /// Never pull: stream every rendezvous payload.
    pub const NEVER: Self = Self {
        from: 1,
        to: 0,
        stream_ps: [0, 0],
        cell_min: 0,
    };

    /// Whether a payload of `n` bytes is pulled.
    pub fn pulls(&self, n: usize) -> bool {
        (self.from..=self.to).contains(&(n as u64))
    }

    /// What streaming `n` bytes through `slot`-byte slots is expected to
    /// cost here, in ns (`None` if not measured): the clear-to-send's extra
    /// handshake through the engines (~0.5 us), the bytes at the measured
    /// pipelined rate, and the first slot once more (the pipeline's fill:
    /// its two copies cannot overlap).
    pub fn stream_ns(&self, n: usize, slot: usize) -> Option<f64> {
        let [mid, big] = self.stream_ps.map(|p| p as f64 / 1000.0);
        let r = per_byte(n, mid, big);
        (mid > 0.0 && big > 0.0).then(|| stream_model(n, slot, r))
    }
}

/// A whole stream of `n` bytes at `per_byte` ns a byte through `slot`-byte
/// slots, in ns: the clear-to-send's extra handshake through the engines
/// (~0.5 us), the bytes, and the first slot once more (the pipeline's
/// fill: its two copies cannot overlap).
pub fn stream_model(n: usize, slot: usize, per_byte: f64) -> f64 {
    500.0 + (n + n.min(slot)) as f64 * per_byte
}

impl std::fmt::Display for HostPaths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from > self.to {
            return write!(f, "streamed at every size (no single copy)");
        }
        let size = |n: u64| -> String {
            match n {
                u64::MAX => "any size".into(),
                n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
                n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
                n => format!("{n} B"),
            }
        };
        write!(
            f,
            "single copy from {} to {}",
            size(self.from),
            size(self.to)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell threshold set in the layout wins over the measured one; with
    /// neither, the default; a file that says 0 (no decision) is refused,
    /// so a link never sends every payload through a cell by accident.
    #[test]
    fn the_cell_threshold_is_decided_before_the_memory_is_made() {
        let measured = HostPaths {
            cell_min: 320,
            ..HostPaths::NEVER
        };
        let set = Layout::default().cell_min(2048);
        assert_eq!(
            JobMap::anon_with(2, &set, measured)
                .unwrap()
                .layout()
                .cell_min,
            2048
        );
        let auto = Layout::default();
        assert_eq!(auto.cell_min, 0, "chosen per host by default");
        assert_eq!(
            JobMap::anon_with(2, &auto, measured)
                .unwrap()
                .layout()
                .cell_min,
            320
        );
        assert_eq!(
            JobMap::anon(2, &auto).unwrap().layout().cell_min,
            crate::config::DEFAULT_CELL_MIN
        );
        // Lines only: no cell memory is made at all.
        let none = HostPaths {
            cell_min: auto.eager_limit + 1,
            ..HostPaths::NEVER
        };
        let m = JobMap::anon_with(2, &auto, none).unwrap();
        assert_eq!(m.layout().cell_bytes(), 0);
        assert!(m.len < JobMap::anon(2, &auto).unwrap().len);
        // A file whose header says 0 is not used.
        let job = new_job_id();
        let (file, path) = JobMap::create_file_with(job, 2, &auto, measured).unwrap();
        let guard = Unlink(Some(path));
        std::os::unix::fs::FileExt::write_at(
            &file,
            &0u32.to_ne_bytes(),
            std::mem::offset_of!(JobHeader, cell_min) as u64,
        )
        .unwrap();
        assert!(matches!(
            JobMap::open(&file, job, 2),
            Err(Error::JobMismatch { .. })
        ));
        drop(guard);
    }

    /// The cells' piece size is the creator's: every rank reads it from
    /// the file, so all cut the cell memory alike.
    #[test]
    fn every_rank_reads_the_creators_cell_pieces() {
        let job = new_job_id();
        let layout = Layout::default().cell_min(256).cell_piece(1024);
        let (file, path) = JobMap::create_file_with(job, 2, &layout, HostPaths::NEVER).unwrap();
        let map = JobMap::open(&file, job, 2).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(map.layout().cell_piece, 1024);
        assert_eq!(map.layout().piece_bytes(), 1024);
        assert_eq!(map.layout().cell_pieces(), 16 * 8);
        let whole = Layout::default().cell_piece(1 << 20);
        assert_eq!(whole.piece_bytes(), whole.cell_bytes(), "at most a cell");
        assert_eq!(whole.cell_pieces(), 16);
    }

    /// The creator's single-copy decision is the host's: every rank that
    /// opens the file reads the same range, whatever it would measure, and
    /// its links pull exactly there.
    #[test]
    fn every_rank_of_a_host_uses_the_creators_paths() {
        use crate::transport::shm::{ShmLink, ShmOptions};
        let job = new_job_id();
        let chosen = HostPaths {
            from: 100_000,
            to: 200_000,
            stream_ps: [64, 75],
            cell_min: 320,
        };
        let (file, path) = JobMap::create_file_with(job, 3, &Layout::default(), chosen).unwrap();
        let maps: Vec<_> = (0..3)
            .map(|_| std::sync::Arc::new(JobMap::open(&file, job, 3).unwrap()))
            .collect();
        std::fs::remove_file(&path).unwrap();
        for m in &maps {
            assert_eq!(m.paths(), chosen);
            assert_eq!(m.layout().cell_min, 320, "the creator's cell threshold");
        }
        let opt = ShmOptions {
            cma: None,
            cma_min: 0,
            debug: false,
        };
        let link = ShmLink::new(maps[1].clone(), 1, 2, 1, 2, opt);
        assert_eq!(link.pulls(), chosen);
        // A rank that forces single copy on or off overrides it for itself.
        let on = ShmLink::new(
            maps[2].clone(),
            2,
            1,
            2,
            1,
            ShmOptions {
                cma: Some(true),
                cma_min: 5,
                ..opt
            },
        );
        assert_eq!((on.pulls().from, on.pulls().to), (5, u64::MAX));
        let off = ShmLink::new(
            maps[0].clone(),
            0,
            1,
            0,
            1,
            ShmOptions {
                cma: Some(false),
                ..opt
            },
        );
        assert_eq!(off.pulls(), HostPaths::NEVER);
        // Without a measurement, a file streams.
        let job2 = new_job_id();
        let (f2, p2) = JobMap::create_file(job2, 2, &Layout::default()).unwrap();
        std::fs::remove_file(&p2).unwrap();
        assert_eq!(
            JobMap::open(&f2, job2, 2).unwrap().paths(),
            HostPaths::NEVER
        );
    }

    #[test]
    fn a_file_of_another_job_or_size_is_refused() {
        let job = new_job_id();
        let (file, path) = JobMap::create_file(job, 2, &Layout::default()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(JobMap::open(&file, job, 2).is_ok());
        assert!(matches!(
            JobMap::open(&file, job ^ 1, 2),
            Err(Error::JobMismatch { .. })
        ));
        assert!(matches!(
            JobMap::open(&file, job, 3),
            Err(Error::JobMismatch { .. })
        ));
        let other = tempfile_with(b"not a tandem job file, just some bytes");
        assert!(matches!(
            JobMap::open(&other, job, 2),
            Err(Error::JobMismatch { .. })
        ));
    }

    fn tempfile_with(bytes: &[u8]) -> File {
        use std::io::{Seek, Write};
        let p = std::env::temp_dir().join(format!("tandem-test-{}", new_job_id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        f.write_all(bytes).unwrap();
        f.set_len(8192).unwrap();
        f.rewind().unwrap();
        f
    }

    #[test]
    fn absurd_sizes_are_config_errors() {
        assert!(matches!(
            job_len(
                4096,
                &Layout {
                    lines: 1 << 24,
                    ..Layout::default()
                }
            ),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            JobMap::anon(0, &Layout::default()),
            Err(Error::Config(_))
        ));
    }
}
