//! Configuration: a builder with defaults, every field settable by a
//! `TANDEM_*` environment variable.
//!
//! Every tuning setting of a rank lives in [`Config`] (its sub-structs
//! [`CollConfig`], [`NetConfig`] and [`RdmaConfig`] per room), and the
//! environment is read for them in one place, [`Config::from_env`]: a
//! communicator built from an explicit `Config` (`Comm::local_with`,
//! `Comm::threads`, `Comm::from_env_with`) takes its tuning from that value
//! alone. A job's identity (rank, size, where to meet, the secret, the
//! inherited job file: what a launcher sets) is a separate input, read by
//! the bootstrap; [`Layout`] is the job's, agreed through the job file.

use crate::error::{Error, Result};
use std::net::IpAddr;
use std::time::Duration;

/// How a waiting thread spends its time: spin, then yield, then sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Fruitless polls before yielding (`TANDEM_SPIN`); one poll is
    /// tens of nanoseconds.
    pub spin: u32,
    /// `sched_yield` iterations after spinning, before sleeping
    /// (`TANDEM_YIELDS`).
    pub yields: u32,
    /// Sleep per poll once spinning and yielding found nothing
    /// (`TANDEM_PARK_US`, microseconds).
    pub park: Duration,
}

impl WaitPolicy {
    /// Never yield or sleep: lowest latency, one core per waiting rank.
    pub const BUSY: Self = Self {
        spin: u32::MAX,
        yields: 0,
        park: Duration::ZERO,
    };
    /// Spin briefly then yield: for more ranks than cores.
    pub const SHARED_CORES: Self = Self {
        spin: 256,
        yields: u32::MAX,
        park: Duration::from_micros(50),
    };
}

impl Default for WaitPolicy {
    fn default() -> Self {
        Self {
            spin: 20_000,
            yields: 20_000,
            park: Duration::from_micros(50),
        }
    }
}

/// The shape of the shared-memory channels. Fixed per job: the launcher
/// writes it into the job file and every rank reads it from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// 64-byte lines per line ring (power of two; `TANDEM_LINES`).
    pub lines: u32,
    /// Slots per slot ring (power of two; `TANDEM_SLOT_STEPS`).
    pub slot_steps: u32,
    /// Bytes per slot (multiple of 64; `TANDEM_SLOT_BYTES`).
    pub slot_bytes: u32,
    /// Largest payload sent eagerly; larger messages use rendezvous
    /// (`TANDEM_EAGER_LIMIT`). An eager payload shorter than `cell_min`
    /// rides right behind its header in the line ring, a longer one in an
    /// eager cell.
    pub eager_limit: u32,
    /// Eager cells per channel (`TANDEM_CELLS`, a power of two up to 4096,
    /// or 0 for none): contiguous `eager_limit`-byte slots beside the line
    /// ring. An eager payload of `cell_min` bytes or more is copied into a
    /// cell in pieces of up to `cell_piece` bytes, each published on its
    /// own, and announced by its header alone in one line after the first
    /// piece, so a message of a few KiB costs a flag per piece instead of a
    /// flag per 56 bytes, and the receiver copies out the first pieces
    /// while the sender copies in the last.
    pub cells: u32,
    /// Smallest eager payload sent through a cell (`TANDEM_CELL_MIN`, bytes,
    /// at least 64); shorter ones go through the line ring, where they cost
    /// a line per 56 bytes and nothing else. 0 (the default): chosen per
    /// host when the job's shared memory is made, by timing both paths
    /// ([`crate::calibrate`]); [`DEFAULT_CELL_MIN`] where nothing was
    /// measured (`TANDEM_CALIBRATE=0`, one core). A value above
    /// `eager_limit` sends every eager payload through the line ring.
    pub cell_min: u32,
    /// Bytes per piece of an eager cell (`TANDEM_CELL_PIECE`, a multiple of
    /// 64; 0, the default: [`CELL_PIECE`]). A piece as large as
    /// `eager_limit` writes each payload whole before announcing it (no
    /// overlap of the two copies); small pieces cost a flag each.
    pub cell_piece: u32,
    /// Matching messages a rank may have outstanding at each peer: each
    /// peer reserves this many receive entries (and `eager_limit`-byte
    /// buffers) per sender (`TANDEM_CREDITS`, 1..=16384).
    pub credits: u32,
    /// Matching messages of any kind (eager or rendezvous announcements) a
    /// rank may have outstanding at each peer (`TANDEM_ENVELOPES`, more than
    /// `credits`, at most 16384). A sender out of eager credit announces
    /// small messages as rendezvous instead of waiting, so unreceived
    /// messages never block a matchable one while fewer than
    /// `envelopes - credits` rendezvous sends to one peer are pending.
    pub envelopes: u32,
}

/// The default piece of an eager cell ([`Layout::cell_piece`] 0): a payload
/// of several pieces is published piece by piece, its header after the
/// first, so its two copies (the sender's in, the receiver's out) overlap.
/// 2 KiB measured best on the AMD guest (BENCHMARKS.md, "Eager cells in
/// pieces"): 1 KiB pieces cost as many flags as the overlap saves, and
/// whole cells do not overlap at all.
pub const CELL_PIECE: usize = 2048;

/// The cell threshold of a job whose host chose none: [`Layout::cell_min`]
/// 0 where nothing was measured.
pub const DEFAULT_CELL_MIN: u32 = 1024;

impl Default for Layout {
    fn default() -> Self {
        Self {
            lines: 1024,
            slot_steps: 32,
            slot_bytes: 32 * 1024,
            eager_limit: 8192,
            cells: 16,
            cell_min: 0,
            cell_piece: 0,
            credits: 32,
            envelopes: 1024,
        }
    }
}

/// Builder-style setters, one per field (checked by
/// [`Layout::validate`] when a job is created).
///
/// ```
/// use tandem_driver::Layout;
/// let l = Layout::default().eager_limit(1024).credits(8);
/// assert_eq!((l.eager_limit, l.credits), (1024, 8));
/// assert!(l.validate().is_ok());
/// assert!(Layout::default().envelopes(4).validate().is_err(), "envelopes <= credits");
/// assert!(Layout::default().cells(3).validate().is_err(), "not a power of two");
/// assert!(Layout::default().cell_min(32).validate().is_err(), "below a line's worth");
/// assert!(Layout::default().cell_piece(100).validate().is_err(), "not whole lines");
/// assert_eq!(Layout::default().cells(0).cell_bytes(), 0, "no cells");
/// assert_eq!(Layout::default().eager_limit(1000).cell_min(64).cell_bytes(), 1024);
/// ```
impl Layout {
    /// This layout with [`cell_min`](Self::cell_min) decided: kept where it
    /// was set, else `chosen` (a host's measured threshold, 0 for none),
    /// else [`DEFAULT_CELL_MIN`]. What a job's shared memory is made with.
    pub fn with_cell_min_chosen(mut self, chosen: u32) -> Self {
        if self.cell_min == 0 {
            self.cell_min = if chosen != 0 {
                chosen
            } else {
                DEFAULT_CELL_MIN
            };
        }
        self
    }

    /// Bytes per eager cell: `eager_limit` rounded up to whole lines, or 0
    /// when no payload goes through a cell.
    pub fn cell_bytes(&self) -> usize {
        if self.cells == 0 || self.cell_min > self.eager_limit {
            0
        } else {
            (self.eager_limit as usize).next_multiple_of(64)
        }
    }

    /// Bytes per piece of an eager cell: [`CELL_PIECE`], or the whole
    /// cell if it is smaller. A cell is written and read a piece at a time,
    /// each piece published on its own, so the receiver copies the first
    /// pieces out while the sender still copies the last ones in.
    pub(crate) fn piece_bytes(&self) -> usize {
        let piece = match self.cell_piece {
            0 => CELL_PIECE,
            p => p as usize,
        };
        self.cell_bytes().min(piece)
    }

    /// Pieces the eager cells of one channel hold in all: `cells` cells of
    /// [`cell_bytes`](Self::cell_bytes) each, a cell rounded up to a power
    /// of two of pieces (0: no cells).
    pub(crate) fn cell_pieces(&self) -> u64 {
        match self.cell_bytes() {
            0 => 0,
            b => self.cells as u64 * b.div_ceil(self.piece_bytes()).next_power_of_two() as u64,
        }
    }

    /// Sets `lines`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn lines(mut self, v: u32) -> Self {
        self.lines = v;
        self
    }
    /// Sets `slot_steps`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn slot_steps(mut self, v: u32) -> Self {
        self.slot_steps = v;
        self
    }
    /// Sets `slot_bytes`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn slot_bytes(mut self, v: u32) -> Self {
        self.slot_bytes = v;
        self
    }
    /// Sets `eager_limit`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn eager_limit(mut self, v: u32) -> Self {
        self.eager_limit = v;
        self
    }
    /// Sets `cells`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn cells(mut self, v: u32) -> Self {
        self.cells = v;
        self
    }
    /// Sets `cell_min`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn cell_min(mut self, v: u32) -> Self {
        self.cell_min = v;
        self
    }
    /// Sets `cell_piece`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn cell_piece(mut self, v: u32) -> Self {
        self.cell_piece = v;
        self
    }
    /// Sets `credits`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn credits(mut self, v: u32) -> Self {
        self.credits = v;
        self
    }
    /// Sets `envelopes`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn envelopes(mut self, v: u32) -> Self {
        self.envelopes = v;
        self
    }
}

impl Layout {
    /// The default layout with `TANDEM_*` overrides applied.
    ///
    /// # Errors
    /// [`Error::Config`] for a variable that is not a number, or a layout
    /// [`validate`](Self::validate) refuses.
    pub fn from_env() -> Result<Self> {
        let mut l = Self::default();
        let names = l.vars().map(|(name, _)| name);
        for (name, field) in names.into_iter().zip(l.fields_mut()) {
            if let Some(v) = env_num(name)? {
                *field = v;
            }
        }
        l.validate()?;
        Ok(l)
    }

    /// Every field with the variable that sets it: what
    /// [`from_env`](Self::from_env) reads and what a launcher passes on to
    /// ranks it starts elsewhere (one list, so the two cannot drift).
    pub(crate) fn vars(&self) -> [(&'static str, u32); 9] {
        [
            ("TANDEM_LINES", self.lines),
            ("TANDEM_SLOT_STEPS", self.slot_steps),
            ("TANDEM_SLOT_BYTES", self.slot_bytes),
            ("TANDEM_EAGER_LIMIT", self.eager_limit),
            ("TANDEM_CELLS", self.cells),
            ("TANDEM_CELL_MIN", self.cell_min),
            ("TANDEM_CELL_PIECE", self.cell_piece),
            ("TANDEM_CREDITS", self.credits),
            ("TANDEM_ENVELOPES", self.envelopes),
        ]
    }

    /// The fields in [`vars`](Self::vars)'s order.
    fn fields_mut(&mut self) -> [&mut u32; 9] {
        [
            &mut self.lines,
            &mut self.slot_steps,
            &mut self.slot_bytes,
            &mut self.eager_limit,
            &mut self.cells,
            &mut self.cell_min,
            &mut self.cell_piece,
            &mut self.credits,
            &mut self.envelopes,
        ]
    }

    /// Checks the invariants the rings need.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first field out of range, in this order:
    /// `lines` not a power of two of at least 4; a layout too large (`lines`
    /// above 2^24, `slot_steps` above 2^16 or `slot_bytes` above 2^30);
    /// `slot_steps` not a power of two; `slot_bytes` not a non-zero multiple
    /// of 64; `cells` neither 0 nor a power of two up to 4096; `cell_min`
    /// neither 0 nor at least 64; `cell_piece` not a multiple of 64 or
    /// above 2^24; `credits` outside 1..=16384; `envelopes` not above `credits`
    /// or above 16384; `eager_limit` more than a message in the line ring can
    /// carry (`lines * 56 - 32` bytes).
    pub fn validate(&self) -> Result<()> {
        if !self.lines.is_power_of_two() || self.lines < 4 {
            return Err(Error::Config(format!(
                "lines must be a power of two >= 4, got {}",
                self.lines
            )));
        }
        if self.lines > 1 << 24 || self.slot_steps > 1 << 16 || self.slot_bytes > 1 << 30 {
            return Err(Error::Config(format!(
                "layout too large: lines <= 2^24, slot_steps <= 2^16, slot_bytes <= 2^30 (got {self:?})"
            )));
        }
        if !self.slot_steps.is_power_of_two() {
            return Err(Error::Config(format!(
                "slot_steps must be a power of two, got {}",
                self.slot_steps
            )));
        }
        if self.slot_bytes == 0 || self.slot_bytes % 64 != 0 {
            return Err(Error::Config(format!(
                "slot_bytes must be a non-zero multiple of 64, got {}",
                self.slot_bytes
            )));
        }
        if self.cells != 0 && (!self.cells.is_power_of_two() || self.cells > 1 << 12) {
            return Err(Error::Config(format!(
                "cells must be 0 or a power of two up to 4096, got {}",
                self.cells
            )));
        }
        if self.cell_min != 0 && self.cell_min < 64 {
            return Err(Error::Config(format!(
                "cell_min must be 0 (chosen per host) or at least 64, got {}",
                self.cell_min
            )));
        }
        if self.cell_piece % 64 != 0 || self.cell_piece > 1 << 24 {
            return Err(Error::Config(format!(
                "cell_piece must be 0 (the default) or a multiple of 64 up to 2^24, got {}",
                self.cell_piece
            )));
        }
        if self.credits == 0 || self.credits > 1 << 14 {
            return Err(Error::Config(format!(
                "credits must be in 1..=16384, got {}",
                self.credits
            )));
        }
        if self.envelopes <= self.credits || self.envelopes > 1 << 14 {
            return Err(Error::Config(format!(
                "envelopes must be above credits ({}) and at most 16384, got {}",
                self.credits, self.envelopes
            )));
        }
        let max = self.lines as usize * tandem_core::line_ring::LINE_PAYLOAD
            - tandem_core::wire::HEADER_LEN;
        if self.eager_limit as usize > max {
            return Err(Error::Config(format!(
                "eager_limit {} does not fit a line ring of {} lines (max {max})",
                self.eager_limit, self.lines
            )));
        }
        Ok(())
    }
}

/// A collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank gets the reduction of every rank's buffer.
    Allreduce,
    /// The root gets the reduction of every rank's buffer.
    Reduce,
    /// Every rank gets the root's buffer.
    Broadcast,
    /// Every rank gets every rank's block, in rank order.
    Allgather,
    /// Rank `r` gets block `r` of the reduction of every rank's buffer.
    ReduceScatter,
    /// Rank `r` gets block `r` of every rank's buffer, in rank order.
    Alltoall,
    /// No rank leaves before every rank entered.
    Barrier,
}

impl Collective {
    /// Every collective, in declaration order.
    pub const ALL: [Collective; 7] = [
        Self::Allreduce,
        Self::Reduce,
        Self::Broadcast,
        Self::Allgather,
        Self::ReduceScatter,
        Self::Alltoall,
        Self::Barrier,
    ];

    /// Its name as `tandem-perf` and `TANDEM_ALGO` spell it (`allreduce`,
    /// `reduce`, `broadcast`, `allgather`, `reduce_scatter`, `alltoall`,
    /// `barrier`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Allreduce => "allreduce",
            Self::Reduce => "reduce",
            Self::Broadcast => "broadcast",
            Self::Allgather => "allgather",
            Self::ReduceScatter => "reduce_scatter",
            Self::Alltoall => "alltoall",
            Self::Barrier => "barrier",
        }
    }

    /// The collective named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The two families of algorithms `TANDEM_ALGO` chooses between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Bandwidth-optimal, pipelined in chunks through fixed scratch
    /// slots: the ring (allreduce = reduce-scatter + allgather,
    /// reduce_scatter, allgather), the chain (reduce, broadcast), pairwise
    /// exchange (alltoall).
    Ring,
    /// Latency-optimal for small messages: recursive doubling (allreduce;
    /// allgather on a power-of-two number of ranks), binomial trees
    /// (reduce, broadcast).
    Tree,
}

/// Most concurrent pipelines of a collective ([`CollConfig::lanes`]).
pub const MAX_LANES: usize = 8;

/// How collectives choose and size their algorithms.
///
/// ```
/// use tandem_driver::{Algorithm, CollConfig, Collective};
/// let c = CollConfig::default().algorithm(Collective::Broadcast, Some(Algorithm::Ring));
/// assert_eq!(c.choose(Collective::Broadcast, 8), (Algorithm::Ring, true));
/// assert_eq!(c.choose(Collective::Allreduce, 8), (Algorithm::Tree, false));
/// assert_eq!(c.choose(Collective::Allreduce, 1 << 20), (Algorithm::Ring, false));
/// assert!(CollConfig::default().pipeline(0, 2).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollConfig {
    /// The algorithm forced for each collective (indexed by `Collective as
    /// usize`, in [`Collective::ALL`]'s order; `None`: chosen by size)
    /// (`TANDEM_ALGO`: `ring`, `tree` or `auto` for every collective, or a
    /// list such as `allreduce=ring,broadcast=tree`).
    pub force: [Option<Algorithm>; 7],
    /// Bytes up to which a collective not forced takes the latency-optimal
    /// algorithm, the pipelined one above, per collective
    /// (`TANDEM_COLL_TREE_MAX` sets every one). Default: 2048 for
    /// allreduce (measured between two ranks on the machine in
    /// BENCHMARKS.md: recursive doubling wins up to 2 KiB, the ring from 4
    /// KiB), 32768 for the others (a tree's log2(n) hops against the
    /// chain's n-1).
    pub tree_max: [usize; 7],
    /// Bytes per pipeline chunk (`TANDEM_COLL_CHUNK`, positive; default 1
    /// MiB: fewer, larger rendezvous transfers measured best from 256 KiB
    /// up).
    pub chunk: usize,
    /// Concurrent pipelines, 1 to [`MAX_LANES`] (`TANDEM_COLL_LANES`;
    /// default 2).
    pub lanes: usize,
}

impl Default for CollConfig {
    fn default() -> Self {
        let mut tree_max = [32 << 10; 7];
        tree_max[Collective::Allreduce.index()] = 2 << 10;
        Self {
            force: [None; 7],
            tree_max,
            chunk: 1 << 20,
            lanes: 2,
        }
    }
}

impl CollConfig {
    /// The defaults with `TANDEM_ALGO`, `TANDEM_COLL_TREE_MAX`,
    /// `TANDEM_COLL_CHUNK` and `TANDEM_COLL_LANES` applied.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable: a number that does not
    /// parse, a zero chunk, lanes outside 1..=[`MAX_LANES`], or an
    /// algorithm list that names an unknown collective or algorithm.
    pub fn from_env() -> Result<Self> {
        let mut t = Self::default();
        if let Some(b) = env_num("TANDEM_COLL_TREE_MAX")? {
            t.tree_max = [b; 7];
        }
        t.chunk = env_num("TANDEM_COLL_CHUNK")?.unwrap_or(t.chunk);
        t.lanes = env_num("TANDEM_COLL_LANES")?.unwrap_or(t.lanes);
        if let Ok(v) = std::env::var("TANDEM_ALGO") {
            t.force = parse_algo(&v)?;
        }
        if t.chunk == 0 {
            return Err(Error::Config("TANDEM_COLL_CHUNK must be positive".into()));
        }
        if !(1..=MAX_LANES).contains(&t.lanes) {
            return Err(Error::Config(format!(
                "TANDEM_COLL_LANES must be 1..={MAX_LANES}, got {}",
                t.lanes
            )));
        }
        Ok(t)
    }

    /// Checks the pipeline's shape.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero chunk or lanes outside
    /// 1..=[`MAX_LANES`].
    pub fn validate(&self) -> Result<()> {
        if self.chunk == 0 || !(1..=MAX_LANES).contains(&self.lanes) {
            return Err(Error::InvalidArgument(format!(
                "pipeline: chunk must be positive and lanes 1..={MAX_LANES} (got {}, {})",
                self.chunk, self.lanes
            )));
        }
        Ok(())
    }

    /// Sets the pipeline: chunk bytes and lanes.
    ///
    /// # Errors
    /// As [`validate`](Self::validate); the value is then unchanged.
    pub fn pipeline(mut self, chunk: usize, lanes: usize) -> Result<Self> {
        self.set_pipeline(chunk, lanes)?;
        Ok(self)
    }

    /// [`pipeline`](Self::pipeline) in place.
    pub(crate) fn set_pipeline(&mut self, chunk: usize, lanes: usize) -> Result<()> {
        let old = (self.chunk, self.lanes);
        (self.chunk, self.lanes) = (chunk, lanes);
        self.validate()
            .inspect_err(|_| (self.chunk, self.lanes) = old)
    }

    /// Forces `a` for `c` (`None`: choose by size again).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn algorithm(mut self, c: Collective, a: Option<Algorithm>) -> Self {
        self.force[c.index()] = a;
        self
    }

    /// The algorithm for `c` moving `bytes` (the larger of a rank's input
    /// and output), and whether it was forced.
    pub fn choose(&self, c: Collective, bytes: usize) -> (Algorithm, bool) {
        match self.force[c.index()] {
            Some(a) => (a, true),
            None if bytes <= self.tree_max[c.index()] => (Algorithm::Tree, false),
            None => (Algorithm::Ring, false),
        }
    }
}

/// Parses `TANDEM_ALGO`.
fn parse_algo(v: &str) -> Result<[Option<Algorithm>; 7]> {
    let one = |s: &str| match s.trim() {
        "ring" => Ok(Some(Algorithm::Ring)),
        "tree" => Ok(Some(Algorithm::Tree)),
        "auto" | "" => Ok(None),
        other => Err(Error::Config(format!(
            "TANDEM_ALGO: unknown algorithm {other:?} (ring, tree or auto)"
        ))),
    };
    let mut out = [None; 7];
    if !v.contains('=') {
        return Ok([one(v)?; 7]);
    }
    for part in v.split(',').filter(|p| !p.trim().is_empty()) {
        let (c, a) = part.split_once('=').ok_or_else(|| {
            Error::Config(format!("TANDEM_ALGO: {part:?} is not collective=algorithm"))
        })?;
        let c = Collective::parse(c.trim()).ok_or_else(|| {
            Error::Config(format!("TANDEM_ALGO: unknown collective {:?}", c.trim()))
        })?;
        out[c.index()] = one(a)?;
    }
    Ok(out)
}

/// Which transport links the ranks (`TANDEM_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// Shared memory within a host; between hosts verbs where both ranks
    /// have an RDMA device (and the `verbs` feature), else TCP (`auto`,
    /// the default).
    #[default]
    Auto,
    /// Shared memory; never verbs (a job over several hosts still needs
    /// TCP between them) (`shm`).
    Shm,
    /// TCP between every pair of ranks, also on one host (`tcp`).
    Tcp,
    /// RDMA over the software RC NIC between every pair of ranks, also on
    /// one host; it rides the TCP connections of the mesh (`soft`).
    Soft,
    /// RDMA over a verbs device between every pair of ranks, or fail
    /// (`verbs`, also spelt `rdma`).
    Verbs,
}

impl TransportChoice {
    /// The choice `TANDEM_TRANSPORT` spells `s` (`""` is `auto`).
    ///
    /// # Errors
    /// [`Error::Config`] for any other word.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "" | "auto" => Ok(Self::Auto),
            "shm" => Ok(Self::Shm),
            "tcp" => Ok(Self::Tcp),
            "soft" => Ok(Self::Soft),
            "verbs" | "rdma" => Ok(Self::Verbs),
            other => Err(Error::Config(format!(
                "TANDEM_TRANSPORT={other:?}: expected auto, shm, tcp, soft or verbs"
            ))),
        }
    }

    /// Its name as `TANDEM_TRANSPORT` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Shm => "shm",
            Self::Tcp => "tcp",
            Self::Soft => "soft",
            Self::Verbs => "verbs",
        }
    }

    /// Whether every pair of ranks meets over the network (no shared
    /// memory even on one host).
    pub fn networked(self) -> bool {
        matches!(self, Self::Tcp | Self::Soft | Self::Verbs)
    }
}

/// How ranks meet and connect over the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    /// Which transport links the ranks (`TANDEM_TRANSPORT`).
    pub transport: TransportChoice,
    /// How long the whole bootstrap may take before it names the ranks
    /// that never came (`TANDEM_BOOT_TIMEOUT`, seconds; default 60).
    pub boot_timeout: Duration,
    /// The IP address this rank advertises for its data connections
    /// (`TANDEM_ADDR`; default: the interface that routes to the root).
    pub addr: Option<IpAddr>,
    /// The port this rank listens on for data connections
    /// (`TANDEM_DATA_PORT`; 0, the default: any).
    pub data_port: u16,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            transport: TransportChoice::Auto,
            boot_timeout: Duration::from_secs(60),
            addr: None,
            data_port: 0,
        }
    }
}

impl NetConfig {
    /// The defaults with `TANDEM_TRANSPORT`, `TANDEM_BOOT_TIMEOUT`,
    /// `TANDEM_ADDR` and `TANDEM_DATA_PORT` applied.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value is not what it
    /// should be.
    pub fn from_env() -> Result<Self> {
        let d = Self::default();
        let addr =
            match std::env::var("TANDEM_ADDR") {
                Ok(a) => Some(a.trim().parse().map_err(|_| {
                    Error::Config(format!("TANDEM_ADDR={a:?} is not an IP address"))
                })?),
                Err(_) => None,
            };
        Ok(Self {
            transport: match std::env::var("TANDEM_TRANSPORT") {
                Ok(v) => TransportChoice::parse(&v)?,
                Err(_) => d.transport,
            },
            boot_timeout: env_secs("TANDEM_BOOT_TIMEOUT", false)?.unwrap_or(d.boot_timeout),
            addr,
            data_port: env_num("TANDEM_DATA_PORT")?.unwrap_or(d.data_port),
        })
    }
}

/// How rendezvous payloads cross an RDMA link (`TANDEM_RDMA_RNDV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rendezvous {
    /// The sender writes into the receive buffer the CTS names (NCCL)
    /// (`write`, the default).
    #[default]
    Write,
    /// The receiver reads the send buffer the RTS names (`read`).
    Read,
}

/// RDMA links: the verbs device and the queue pairs' attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// How rendezvous payloads cross (`TANDEM_RDMA_RNDV`).
    pub rendezvous: Rendezvous,
    /// Receiver-not-ready retries of the queue pairs, 0..=7, 7 meaning
    /// forever (`TANDEM_RNR_RETRY`; default 0: a receiver-not-ready would
    /// be a bug, and fails the link at once).
    pub rnr_retry: u8,
    /// The verbs device (`TANDEM_IB_DEV`; `None`, the default: the first
    /// with an ACTIVE port).
    pub device: Option<String>,
    /// The device's port (`TANDEM_IB_PORT`; default 1).
    pub port: u8,
    /// The source GID index (`TANDEM_IB_GID_INDEX`; `None`, the default:
    /// the first RoCE v2 GID).
    pub gid_index: Option<u8>,
    /// The soft NIC waits up to this many microseconds (pseudo-random)
    /// before each request it handles: tests of timing independence
    /// (`TANDEM_SOFT_DELAY_US`; default 0).
    pub soft_delay_us: u32,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        Self {
            rendezvous: Rendezvous::Write,
            rnr_retry: 0,
            device: None,
            port: 1,
            gid_index: None,
            soft_delay_us: 0,
        }
    }
}

impl RdmaConfig {
    /// The defaults with `TANDEM_RDMA_RNDV`, `TANDEM_RNR_RETRY`,
    /// `TANDEM_IB_DEV`, `TANDEM_IB_PORT`, `TANDEM_IB_GID_INDEX` and
    /// `TANDEM_SOFT_DELAY_US` applied.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable: a number that does not
    /// parse, a `TANDEM_RNR_RETRY` above 7, a `TANDEM_RDMA_RNDV` other than
    /// `write` or `read`.
    pub fn from_env() -> Result<Self> {
        let d = Self::default();
        let c = Self {
            rendezvous: match std::env::var("TANDEM_RDMA_RNDV").ok().as_deref() {
                None | Some("") | Some("write") => Rendezvous::Write,
                Some("read") => Rendezvous::Read,
                Some(o) => {
                    return Err(Error::Config(format!(
                        "TANDEM_RDMA_RNDV={o:?}: expected write or read"
                    )))
                }
            },
            rnr_retry: env_num("TANDEM_RNR_RETRY")?.unwrap_or(d.rnr_retry),
            device: std::env::var("TANDEM_IB_DEV")
                .ok()
                .filter(|s| !s.is_empty()),
            port: env_num("TANDEM_IB_PORT")?.unwrap_or(d.port),
            gid_index: env_num("TANDEM_IB_GID_INDEX")?,
            soft_delay_us: env_num("TANDEM_SOFT_DELAY_US")?.unwrap_or(d.soft_delay_us),
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks the attributes a queue pair takes.
    ///
    /// # Errors
    /// [`Error::Config`] for an `rnr_retry` above 7.
    pub fn validate(&self) -> Result<()> {
        if self.rnr_retry > 7 {
            return Err(Error::Config(format!(
                "TANDEM_RNR_RETRY must be 0..=7 (7: retry forever), got {}",
                self.rnr_retry
            )));
        }
        Ok(())
    }
}

/// Per-rank settings (the layout comes from the job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How long an operation may go without progress before it fails with
    /// [`Error::Timeout`] (`TANDEM_TIMEOUT`, seconds; default 120).
    pub timeout: Duration,
    /// Wait policy of blocking calls.
    pub wait: WaitPolicy,
    /// Most operations pending at once (`TANDEM_MAX_REQUESTS`).
    pub max_requests: usize,
    /// Let the host choose when a receiver pulls a rendezvous payload
    /// single-copy rather than having it streamed (default `true`): the
    /// creator of the host's job file measures both paths once and every
    /// rank of the host uses its decision ([`crate::calibrate`]; shown at
    /// `TANDEM_DEBUG=INFO`). Setting `TANDEM_CMA` or `TANDEM_CMA_MIN`, or
    /// calling [`Config::cma`], turns this off and `cma` / `cma_min` apply.
    pub cma_auto: bool,
    /// With `cma_auto` off: let the receiver pull rendezvous payloads
    /// straight from the sender's buffer, single-copy, with
    /// `process_vm_readv` (Linux cross-memory attach; also between ranks
    /// that are threads of one process) (`TANDEM_CMA`, 1 or 0). Refused by
    /// the kernel (no ptrace permission, a seccomp filter), it falls back
    /// to streaming ([`crate::Comm::counters`] tells).
    pub cma: bool,
    /// With `cma_auto` off and `cma` on, the smallest rendezvous payload
    /// pulled; smaller ones stream through the slot ring
    /// (`TANDEM_CMA_MIN`, bytes; default 32 KiB; setting it alone also
    /// turns `cma` on).
    pub cma_min: usize,
    /// Run a progress thread pinned to this core (`TANDEM_PROXY_CORE`).
    pub proxy_core: Option<usize>,
    /// Pin the calling thread to this core when the communicator is created
    /// (`TANDEM_PIN_CORE`).
    pub pin_core: Option<usize>,
    /// Collectives: algorithm choice and pipeline.
    pub coll: CollConfig,
    /// Meeting and connecting: the transport, the bootstrap's deadline, the
    /// data connections' address and port.
    pub net: NetConfig,
    /// RDMA links: device, port, GID, rendezvous, retries.
    pub rdma: RdmaConfig,
    /// Events the flight recorder keeps, the last ones (`TANDEM_RECORDER`;
    /// default 2048, rounded up to a power of two; 0 switches it off).
    pub recorder: usize,
    /// Where each rank writes its flight recorder as a trace
    /// (`dir/rank-<r>.json`, Chrome / Perfetto trace-event JSON) when its
    /// communicator ends and when an operation fails with a timeout,
    /// deadlock or lost peer (`TANDEM_TRACE=dir`; default none).
    /// [`Comm::write_trace`](crate::Comm::write_trace) writes one on demand.
    pub trace_dir: Option<std::path::PathBuf>,
    /// The failure-detection bound (`TANDEM_FAILURE_TIMEOUT`, seconds;
    /// default 3; 0 switches detection of silent peers off): a peer on
    /// another host from which nothing arrives for this long, although
    /// every rank sends a heartbeat on each idle TCP connection four times
    /// per bound (from a small thread, so a rank busy computing keeps
    /// sending them), and a peer on this host whose process stays stopped
    /// this long, fail with [`Error::PeerSilent`]. Dead processes are seen
    /// sooner (an exit, a closed connection, a queue pair's error). Use the
    /// same value on every rank.
    pub failure_timeout: Duration,
    /// How long a cycle of blocked operations must stay the same before
    /// the waits in it fail with [`Error::Deadlock`] rather than at the
    /// timeout (`TANDEM_DEADLOCK_AFTER`, seconds; default 0.5; 0: only at
    /// the timeout). Each blocked rank publishes what it waits for (on
    /// the host's wait board; to peers on other hosts after 100 ms of
    /// waiting) and follows the chain of waits from its own every 100 ms:
    /// a chain that comes back to it, with none of its waits changed or
    /// moved for this long, can never complete, unless another thread of
    /// one of its ranks is about to post what breaks it. Programs that
    /// break such cycles from a second thread set 0. Left to the timeout
    /// (which names them too): cycles in which two neighbours may be the
    /// two ends of one message (a long transfer), cycles through a rank
    /// that had other operations pending (a group) or knew of a failed
    /// peer, and cycles longer than 16 ranks.
    pub deadlock_after: Duration,
}

/// The default of [`Config::deadlock_after`].
pub const DEFAULT_DEADLOCK_AFTER: Duration = Duration::from_millis(500);

/// The default failure-detection bound ([`Config::failure_timeout`]).
pub const DEFAULT_FAILURE_TIMEOUT: Duration = Duration::from_secs(3);

/// Events a rank's flight recorder keeps by default (`TANDEM_RECORDER`).
pub const DEFAULT_EVENTS: usize = 2048;

impl Default for Config {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            wait: WaitPolicy::default(),
            max_requests: 1024,
            cma_auto: true,
            cma: false,
            cma_min: 32 * 1024,
            proxy_core: None,
            pin_core: None,
            coll: CollConfig::default(),
            net: NetConfig::default(),
            rdma: RdmaConfig::default(),
            recorder: DEFAULT_EVENTS,
            trace_dir: None,
            failure_timeout: DEFAULT_FAILURE_TIMEOUT,
            deadlock_after: DEFAULT_DEADLOCK_AFTER,
        }
    }
}

impl Config {
    /// Defaults with `TANDEM_*` overrides applied: the one place the
    /// environment's tuning is read (the sub-structs' `from_env` included).
    ///
    /// # Errors
    /// [`Error::Config`] for a `TANDEM_TIMEOUT` that is not a positive number
    /// of seconds, another variable that is not a number of its type, or
    /// what [`CollConfig::from_env`], [`NetConfig::from_env`] and
    /// [`RdmaConfig::from_env`] refuse.
    pub fn from_env() -> Result<Self> {
        let d = Self::default();
        let mut c = Self {
            timeout: env_secs("TANDEM_TIMEOUT", false)?.unwrap_or(d.timeout),
            wait: d.wait,
            max_requests: env_num("TANDEM_MAX_REQUESTS")?.unwrap_or(d.max_requests),
            cma_auto: d.cma_auto,
            cma: d.cma,
            cma_min: d.cma_min,
            proxy_core: env_num("TANDEM_PROXY_CORE")?,
            pin_core: env_num("TANDEM_PIN_CORE")?,
            coll: CollConfig::from_env()?,
            net: NetConfig::from_env()?,
            rdma: RdmaConfig::from_env()?,
            recorder: env_num("TANDEM_RECORDER")?.unwrap_or(d.recorder),
            trace_dir: std::env::var_os("TANDEM_TRACE")
                .filter(|v| !v.is_empty())
                .map(Into::into),
            failure_timeout: env_secs("TANDEM_FAILURE_TIMEOUT", true)?.unwrap_or(d.failure_timeout),
            deadlock_after: env_secs("TANDEM_DEADLOCK_AFTER", true)?.unwrap_or(d.deadlock_after),
        };
        let (cma, cma_min) = (env_num::<u8>("TANDEM_CMA")?, env_num("TANDEM_CMA_MIN")?);
        if cma.is_some() || cma_min.is_some() {
            c.cma_auto = false;
            c.cma = cma.is_none_or(|v| v != 0);
            c.cma_min = cma_min.unwrap_or(d.cma_min);
        }
        c.wait.spin = env_num("TANDEM_SPIN")?.unwrap_or(c.wait.spin);
        c.wait.yields = env_num("TANDEM_YIELDS")?.unwrap_or(c.wait.yields);
        if let Some(us) = env_num::<u64>("TANDEM_PARK_US")? {
            c.wait.park = Duration::from_micros(us);
        }
        Ok(c)
    }

    /// Sets the no-progress timeout.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Sets the failure-detection bound ([`Config::failure_timeout`];
    /// zero switches detection of silent peers off).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn failure_timeout(mut self, t: Duration) -> Self {
        self.failure_timeout = t;
        self
    }

    /// Sets how long a cycle of waits must hold before it is reported
    /// ([`Config::deadlock_after`]; zero: only at the timeout).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn deadlock_after(mut self, t: Duration) -> Self {
        self.deadlock_after = t;
        self
    }

    /// Sets the wait policy.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn wait(mut self, w: WaitPolicy) -> Self {
        self.wait = w;
        self
    }

    /// Sets the most operations pending at once.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n;
        self
    }

    /// Forces single-copy rendezvous through cross-memory attach on or off
    /// for this rank, instead of the host's calibrated choice.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn cma(mut self, on: bool) -> Self {
        self.cma_auto = false;
        self.cma = on;
        self
    }

    /// Sets the smallest rendezvous payload pulled single-copy (with
    /// single copy forced on by [`cma`](Self::cma)).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn cma_min(mut self, bytes: usize) -> Self {
        self.cma_min = bytes;
        self
    }

    /// Runs a progress thread pinned to `core`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn proxy_core(mut self, core: Option<usize>) -> Self {
        self.proxy_core = core;
        self
    }

    /// Pins the creating thread to `core`.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn pin_core(mut self, core: Option<usize>) -> Self {
        self.pin_core = core;
        self
    }

    /// Sets the collectives' settings.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn coll(mut self, c: CollConfig) -> Self {
        self.coll = c;
        self
    }

    /// Sets how many events the flight recorder keeps (0: off).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn recorder(mut self, events: usize) -> Self {
        self.recorder = events;
        self
    }

    /// Sets the directory traces are written to at the end and on failure.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn trace_dir(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.trace_dir = dir;
        self
    }

    /// Sets the network settings.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn net(mut self, n: NetConfig) -> Self {
        self.net = n;
        self
    }

    /// Sets the transport (`TANDEM_TRANSPORT`).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn transport(mut self, t: TransportChoice) -> Self {
        self.net.transport = t;
        self
    }

    /// Sets the RDMA settings.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn rdma(mut self, r: RdmaConfig) -> Self {
        self.rdma = r;
        self
    }
}

/// Reads a numeric environment variable; a value that does not parse is an
/// error, not silently ignored.
pub(crate) fn env_num<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::Config(format!("{name}={v:?} is not a valid number"))),
        Err(_) => Ok(None),
    }
}

/// A number of seconds from the environment (`None` if unset); see
/// [`secs`].
///
/// # Errors
/// As [`secs`].
pub(crate) fn env_secs(name: &str, zero_ok: bool) -> Result<Option<Duration>> {
    match std::env::var(name) {
        Ok(v) => secs(name, &v, zero_ok).map(Some),
        Err(_) => Ok(None),
    }
}

/// `value` of variable `name` as a duration: finite seconds, positive (or
/// zero where `zero_ok`), within what a `Duration` holds.
///
/// # Errors
/// [`Error::Config`] naming the variable for anything else (`inf`, `NaN`,
/// `1e20`, a negative number, not a number).
pub(crate) fn secs(name: &str, value: &str, zero_ok: bool) -> Result<Duration> {
    let s = value.trim().parse::<f64>().ok();
    let ok = |s: f64| s > 0.0 || (zero_ok && s == 0.0);
    match s.filter(|s| ok(*s)).map(Duration::try_from_secs_f64) {
        Some(Ok(d)) => Ok(d),
        _ => Err(Error::Config(format!(
            "{name} must be {} seconds (at most about 1.8e19), got {value:?}",
            if zero_ok {
                "zero or positive"
            } else {
                "positive"
            }
        ))),
    }
}

/// Debug output level from `TANDEM_DEBUG` (WARN, INFO, TRACE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DebugLevel {
    /// Nothing.
    Off,
    /// Warnings only.
    Warn,
    /// Configuration and path choices.
    Info,
    /// Everything.
    Trace,
}

/// Whether the creator of a host's job file measures which path that
/// host's rendezvous payloads take (`TANDEM_CALIBRATE`, default 1; 0 skips
/// the measurement and streams, see [`crate::calibrate`]).
pub fn calibrate_enabled() -> bool {
    std::env::var("TANDEM_CALIBRATE").map_or(true, |v| v.trim() != "0")
}

/// The level `TANDEM_DEBUG` selects.
pub fn debug_level() -> DebugLevel {
    match std::env::var("TANDEM_DEBUG")
        .unwrap_or_default()
        .to_ascii_uppercase()
        .as_str()
    {
        "WARN" => DebugLevel::Warn,
        "INFO" => DebugLevel::Info,
        "TRACE" => DebugLevel::Trace,
        _ => DebugLevel::Off,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `vars` and `fields_mut` name the same fields in the same order, and
    /// every field of a layout: changing one field through `fields_mut`
    /// changes exactly that variable's value in `vars`.
    #[test]
    fn layout_variables_and_fields_line_up() {
        let base = Layout::default();
        for i in 0..9 {
            let mut l = base;
            *l.fields_mut()[i] += 1;
            let (a, b) = (base.vars(), l.vars());
            for j in 0..9 {
                assert_eq!(a[j].0, b[j].0);
                assert_eq!(
                    a[j].1 + u32::from(i == j),
                    b[j].1,
                    "field {i}, variable {}",
                    a[j].0
                );
            }
        }
        let mut names: Vec<_> = base.vars().map(|(n, _)| n).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 9);
    }

    /// Seconds from the environment: numbers a `Duration` holds are taken;
    /// infinity, NaN, overflow, negatives and words are a `Config` error
    /// naming the variable, never a panic.
    #[test]
    fn algo_settings_parse() {
        assert_eq!(parse_algo("ring").unwrap(), [Some(Algorithm::Ring); 7]);
        let v = parse_algo("allreduce=tree, broadcast=ring").unwrap();
        assert_eq!(v[0], Some(Algorithm::Tree));
        assert_eq!(v[2], Some(Algorithm::Ring));
        assert_eq!(v[1], None);
        assert!(parse_algo("fast").is_err());
        assert!(parse_algo("allsum=ring").is_err());
        assert!(parse_algo("allreduce").is_err());
    }

    #[test]
    fn transport_names_round_trip() {
        for t in [
            TransportChoice::Auto,
            TransportChoice::Shm,
            TransportChoice::Tcp,
            TransportChoice::Soft,
            TransportChoice::Verbs,
        ] {
            assert_eq!(TransportChoice::parse(t.name()), Ok(t));
        }
        assert_eq!(TransportChoice::parse("rdma"), Ok(TransportChoice::Verbs));
        assert!(
            matches!(TransportChoice::parse("udp"), Err(Error::Config(m)) if m.contains("udp"))
        );
    }

    #[test]
    fn a_refused_pipeline_leaves_the_settings_as_they_were() {
        let mut c = CollConfig::default();
        assert!(c.set_pipeline(0, 2).is_err());
        assert!(c.set_pipeline(4096, MAX_LANES + 1).is_err());
        assert_eq!(c, CollConfig::default());
        c.set_pipeline(4096, 3).unwrap();
        assert_eq!((c.chunk, c.lanes), (4096, 3));
        assert!(RdmaConfig {
            rnr_retry: 8,
            ..RdmaConfig::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn seconds_out_of_range_are_config_errors_not_panics() {
        assert_eq!(secs("T", "2.5", false), Ok(Duration::from_millis(2500)));
        assert_eq!(secs("T", " 0 ", true), Ok(Duration::ZERO));
        for bad in ["0", "-1", "inf", "-inf", "NaN", "1e20", "1e400", "ten", ""] {
            match secs("TANDEM_X", bad, false) {
                Err(Error::Config(m)) => assert!(m.contains("TANDEM_X"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(secs("T", "-0.5", true).is_err());
        assert!(secs("T", "inf", true).is_err());
    }
}
