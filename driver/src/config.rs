//! Configuration: a builder with defaults, every field settable by a
//! `TANDEM_*` environment variable.

use crate::error::{Error, Result};
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
    /// cell in one piece and announced by its header alone in one line, so
    /// a message of a few KiB costs one copy and two flags instead of a
    /// flag per 56 bytes.
    pub cells: u32,
    /// Smallest eager payload sent through a cell (`TANDEM_CELL_MIN`, bytes,
    /// at least 64); shorter ones go through the line ring, where they cost
    /// a line per 56 bytes and nothing else.
    pub cell_min: u32,
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

impl Default for Layout {
    fn default() -> Self {
        Self {
            lines: 1024,
            slot_steps: 32,
            slot_bytes: 32 * 1024,
            eager_limit: 8192,
            cells: 16,
            cell_min: 1024,
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
/// assert_eq!(Layout::default().cells(0).cell_bytes(), 0, "no cells");
/// assert_eq!(Layout::default().eager_limit(1000).cell_min(64).cell_bytes(), 1024);
/// ```
impl Layout {
    /// Bytes per eager cell: `eager_limit` rounded up to whole lines, or 0
    /// when no payload goes through a cell.
    pub fn cell_bytes(&self) -> usize {
        if self.cells == 0 || self.cell_min > self.eager_limit {
            0
        } else {
            (self.eager_limit as usize).next_multiple_of(64)
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
    pub(crate) fn vars(&self) -> [(&'static str, u32); 8] {
        [
            ("TANDEM_LINES", self.lines),
            ("TANDEM_SLOT_STEPS", self.slot_steps),
            ("TANDEM_SLOT_BYTES", self.slot_bytes),
            ("TANDEM_EAGER_LIMIT", self.eager_limit),
            ("TANDEM_CELLS", self.cells),
            ("TANDEM_CELL_MIN", self.cell_min),
            ("TANDEM_CREDITS", self.credits),
            ("TANDEM_ENVELOPES", self.envelopes),
        ]
    }

    /// The fields in [`vars`](Self::vars)'s order.
    fn fields_mut(&mut self) -> [&mut u32; 8] {
        [
            &mut self.lines,
            &mut self.slot_steps,
            &mut self.slot_bytes,
            &mut self.eager_limit,
            &mut self.cells,
            &mut self.cell_min,
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
    /// below 64; `credits` outside 1..=16384; `envelopes` not above `credits`
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
        if self.cell_min < 64 {
            return Err(Error::Config(format!(
                "cell_min must be at least 64, got {}",
                self.cell_min
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
    /// Let the receiver pull rendezvous payloads straight from the sender's
    /// buffer, single-copy, with `process_vm_readv` (Linux cross-memory
    /// attach; also between ranks that are threads of one process)
    /// (`TANDEM_CMA`, 1 or 0). Off by default: on the machines
    /// measured so far (BENCHMARKS.md) the system call costs ~25 us and
    /// reaches half the bandwidth of streaming through the slot ring, whose
    /// two copies run in parallel on two cores. Refused by the kernel (no
    /// ptrace permission, a seccomp filter), it falls back to streaming.
    pub cma: bool,
    /// With `cma` on, the smallest rendezvous payload pulled; smaller ones
    /// stream through the slot ring, where one extra
    /// round trip costs less than the system call (`TANDEM_CMA_MIN`, bytes;
    /// default 32 KiB).
    pub cma_min: usize,
    /// Run a progress thread pinned to this core (`TANDEM_PROXY_CORE`).
    pub proxy_core: Option<usize>,
    /// Pin the calling thread to this core when the communicator is created
    /// (`TANDEM_PIN_CORE`).
    pub pin_core: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            wait: WaitPolicy::default(),
            max_requests: 1024,
            cma: false,
            cma_min: 32 * 1024,
            proxy_core: None,
            pin_core: None,
        }
    }
}

impl Config {
    /// Defaults with `TANDEM_*` overrides applied.
    ///
    /// # Errors
    /// [`Error::Config`] for a `TANDEM_TIMEOUT` that is not a positive number
    /// of seconds, or another variable that is not a number of its type.
    pub fn from_env() -> Result<Self> {
        let d = Self::default();
        let mut c = Self {
            timeout: env_secs("TANDEM_TIMEOUT", false)?.unwrap_or(d.timeout),
            wait: d.wait,
            max_requests: env_num("TANDEM_MAX_REQUESTS")?.unwrap_or(d.max_requests),
            cma: env_num::<u8>("TANDEM_CMA")?.map_or(d.cma, |v| v != 0),
            cma_min: env_num("TANDEM_CMA_MIN")?.unwrap_or(d.cma_min),
            proxy_core: env_num("TANDEM_PROXY_CORE")?,
            pin_core: env_num("TANDEM_PIN_CORE")?,
        };
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

    /// Enables or disables single-copy rendezvous through cross-memory
    /// attach.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn cma(mut self, on: bool) -> Self {
        self.cma = on;
        self
    }

    /// Sets the smallest rendezvous payload pulled single-copy.
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
        for i in 0..8 {
            let mut l = base;
            *l.fields_mut()[i] += 1;
            let (a, b) = (base.vars(), l.vars());
            for j in 0..8 {
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
        assert_eq!(names.len(), 8);
    }

    /// Seconds from the environment: numbers a `Duration` holds are taken;
    /// infinity, NaN, overflow, negatives and words are a `Config` error
    /// naming the variable, never a panic.
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
