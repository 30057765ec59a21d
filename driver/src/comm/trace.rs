//! The flight recorder seen from the communicator: marks, traces on
//! demand, at the end and on failure.

use super::{Comm, Shared};
use crate::coll::Shape;
use crate::error::{Error, Result};
use crate::progress::{phase_byte, word, Code, Engine, OpId, Whoami};
use std::path::{Path, PathBuf};
use tandem_core::sync::Ordering;

/// Trace signals received by this process ([`Comm::trace_on_signal`]).
/// The std atomic: a signal handler's counter is outside what loom models.
#[allow(clippy::disallowed_types)]
static SIGNALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The handler: counts, nothing else (async-signal-safe).
extern "C" fn note_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

impl Comm {
    /// Adds a mark with `text` (its first [`MARK_LEN`](crate::MARK_LEN)
    /// bytes) to this rank's flight recorder: it shows in the trace as an
    /// instant on the rank's time line ("step 17", "checkpoint").
    pub fn annotate(&self, text: &str) {
        self.engine().rec.mark(text);
    }

    /// Switches this rank's flight recorder on or off (it is on unless
    /// [`Config::recorder`](field@crate::Config::recorder) is 0, in which
    /// case it has no room and stays off). What was kept stays.
    pub fn set_recording(&self, on: bool) {
        self.engine().rec.set_on(on);
    }

    /// Whether this rank's flight recorder is keeping events.
    pub fn recording(&self) -> bool {
        self.engine().rec.is_on()
    }

    /// Writes this rank's flight recorder to `dir/rank-<rank>.json` as
    /// Chrome / Perfetto trace-event JSON (`{"traceEvents": [...]}`; open it
    /// in ui.perfetto.dev, or merge a job's files with `tandem-trace merge`)
    /// and returns the path. Ranks are numbered as in the world
    /// communicator.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be created or the file
    /// written.
    pub fn write_trace(&self, dir: impl AsRef<Path>) -> Result<PathBuf> {
        self.sh.write_trace(dir.as_ref())
    }

    /// Makes signal `sig` (e.g. `libc::SIGUSR1`) ask every rank of this
    /// process for its trace: a rank that is waiting in tandem answers
    /// within milliseconds, writing it where
    /// [`Config::trace_dir`](field@crate::Config::trace_dir) says (else
    /// `./tandem-trace`) and printing what it waits for and its last
    /// events on standard error; a rank that is computing answers when it
    /// next waits. tandem installs no handler unless asked: a program
    /// that embeds it keeps its signals.
    ///
    /// # Errors
    /// [`Error::Io`] if the handler cannot be installed (an invalid
    /// signal number).
    pub fn trace_on_signal(sig: i32) -> Result<()> {
        crate::sys::on_signal(sig, note_signal)
            .map_err(|e| Error::io(format!("installing a handler for signal {sig}"), e))
    }

    /// Records a blocking collective's beginning or end.
    pub(super) fn record_coll(&self, code: Code, shape: &Shape, bytes: usize) {
        let w = word(shape.coll.index() as u8, self.ctx, 0);
        self.engine().rec.add(code, w, 0, shape.root, bytes as u64);
    }

    /// After an operation failed with `e`: writes the trace where
    /// [`Config::trace_dir`](field@crate::Config::trace_dir) asks for one and
    /// the failure is one a trace explains (a timeout, a deadlock, a lost
    /// peer or link).
    pub(super) fn failed(&self, e: &Error) {
        let explains = matches!(
            e,
            Error::Timeout { .. }
                | Error::Deadlock { .. }
                | Error::PeerLost { .. }
                | Error::ChannelBroken { .. }
                | Error::Protocol { .. }
        );
        if explains && self.sh.cfg.trace_dir.is_some() {
            self.sh.trace_at_end("on failure");
        }
    }
}

/// Records that a blocking call starts waiting for `id` (what it waits
/// for: its phase, peer and tag).
pub(super) fn wait_begins(e: &mut Engine, id: OpId) {
    if let Some(i) = e.info(id) {
        let w = word(phase_byte(i.phase), i.ctx, i.tag);
        e.rec.add(Code::WaitBegin, w, 0, i.peer as usize, i.len);
    }
}

/// Records that the wait [`wait_begins`] recorded ended.
pub(super) fn wait_ends(e: &mut Engine) {
    e.rec.add(Code::WaitEnd, 0, 0, 0, 0);
}

impl Shared {
    pub(super) fn write_trace(&self, dir: &Path) -> Result<PathBuf> {
        self.write_trace_of(&self.engine(), dir)
    }

    /// [`write_trace`](Self::write_trace) with the engine locked already.
    fn write_trace_of(&self, e: &Engine, dir: &Path) -> Result<PathBuf> {
        let who = Whoami::here(self.rank, self.size);
        let doc = e.rec.to_json(&who);
        crate::progress::write_trace_file(dir, self.rank, &doc)
            .map_err(|e| Error::io(format!("writing the trace to {}", dir.display()), e))
    }

    /// From a wait: if a trace signal came since this rank last looked,
    /// prints this rank's hang report and writes its trace.
    pub(super) fn answer_signal(&self, e: &mut Engine) {
        let n = SIGNALS.load(std::sync::atomic::Ordering::Relaxed);
        if self.signals_seen.swap(n, Ordering::Relaxed) == n {
            return;
        }
        let dir = self
            .cfg
            .trace_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("tandem-trace"));
        let mut report = hang_report(e);
        match self.write_trace_of(e, &dir) {
            Ok(p) => report.push_str(&format!("\n  trace: {}", p.display())),
            Err(err) => report.push_str(&format!("\n  no trace: {err}")),
        }
        // One write, so that ranks' reports do not interleave line by line.
        eprintln!("{report}");
    }

    /// Writes the trace to the configured directory, if any, saying so on
    /// standard error (`when`: why now).
    pub(super) fn trace_at_end(&self, when: &str) {
        let Some(dir) = &self.cfg.trace_dir else {
            return;
        };
        match self.write_trace(dir) {
            Ok(p) => eprintln!("tandem[{}]: trace {when}: {}", self.rank, p.display()),
            Err(e) => eprintln!("tandem[{}]: no trace {when}: {e}", self.rank),
        }
    }
}

/// This rank's hang report (world ranks): what it waits for, the waits of
/// every rank it can see (its host's wait board, the records peers on
/// other hosts sent), the cycle or chain its own wait leads into, the
/// ranks it knows dead, the messages that arrived and match no receive,
/// and its last events.
fn hang_report(e: &mut Engine) -> String {
    use std::fmt::Write as _;
    let (r, n) = (e.rank(), e.nranks());
    let mut out = format!("tandem[{r}]: hang report (asked by signal)");
    let mine = e.my_wait();
    let name = |op, peer, tag| crate::error::Operation(op, peer, tag).to_string();
    match mine {
        Some((w, _)) => {
            let _ = write!(out, "\n  this rank waits in {}", name(w.op, w.peer, w.tag));
        }
        None => out.push_str("\n  this rank waits for nothing it published (a short wait)"),
    }
    let waits: Vec<String> = (0..n)
        .filter(|&p| p != r)
        .map(|p| match e.peer_wait(p) {
            Some(w) => format!("rank {p}: {}", name(w.op, w.peer, w.tag)),
            None => format!("rank {p}: not waiting (or not known here)"),
        })
        .collect();
    let _ = write!(out, "\n  others: {}", waits.join("; "));
    if let Some((w, ctx)) = mine {
        let (chain, end) = super::follow(e, w.peer);
        let chain_text = crate::error::Chain(&chain).to_string();
        match end {
            super::ChainEnd::Cycle => {
                let _ = write!(
                    out,
                    "\n  cycle: rank {r} waits for {chain_text}, which waits for rank {r}"
                );
            }
            _ if !chain.is_empty() => {
                let _ = write!(out, "\n  chain: rank {r} waits for {chain_text}");
            }
            _ => {}
        }
        let src = if w.peer == super::ANY_SOURCE {
            crate::progress::ANY_SOURCE
        } else {
            w.peer as u32
        };
        let (msgs, k) = e.unmatched(src, ctx, 8);
        if !msgs.is_empty() {
            let told: Vec<String> = msgs
                .iter()
                .map(|m| format!("rank {} sent tag {} ({} bytes)", m.source, m.tag, m.len))
                .collect();
            let _ = write!(out, "\n  unmatched: {} ({k} in all)", told.join(", "));
        }
    }
    let dead: Vec<String> = (0..n)
        .filter(|&p| e.is_dead(p))
        .map(|p| p.to_string())
        .collect();
    let _ = write!(
        out,
        "\n  dead ranks: {}",
        if dead.is_empty() {
            "none".into()
        } else {
            dead.join(", ")
        }
    );
    out.push_str("\n  last events (newest last):");
    for line in e.rec.last_lines(12) {
        out.push_str("\n    ");
        out.push_str(&line);
    }
    out
}
