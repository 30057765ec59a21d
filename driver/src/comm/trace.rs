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
        report.trace = match self.write_trace_of(e, &dir) {
            Ok(p) => format!("trace: {}", p.display()),
            Err(err) => format!("no trace: {err}"),
        };
        // One write, so that ranks' reports do not interleave line by line;
        // to a collecting launcher as one line it takes for itself.
        if report_to_launcher() {
            eprintln!("{}{}", crate::world::report::MARK, report.to_json());
        } else {
            eprintln!("{}", report.to_text());
        }
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

/// Whether this rank's launcher collects hang reports into one for the
/// job (`tandem-run --report-signal` sets `TANDEM_REPORT_SIGNAL=launcher`).
fn report_to_launcher() -> bool {
    std::env::var("TANDEM_REPORT_SIGNAL").as_deref() == Ok("launcher")
}

/// One rank's hang report, in parts (world ranks): printed as text, or
/// handed to a collecting launcher as one line of JSON.
struct Report {
    rank: usize,
    /// The operation this rank waits in, if it published one.
    wait: Option<String>,
    /// Every other rank's wait as this rank sees it.
    others: Vec<(usize, Option<String>)>,
    /// The cycle or chain this rank's wait leads into, as a sentence.
    relation: Option<String>,
    /// The ranks of that cycle, this one first.
    cycle: Vec<usize>,
    /// Messages that arrived and match no receive.
    unmatched: Option<String>,
    dead: Vec<usize>,
    /// The last events, newest last.
    last: Vec<String>,
    /// Where the trace went.
    trace: String,
}

impl Report {
    fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let r = self.rank;
        let mut out = format!("tandem[{r}]: hang report (asked by signal)");
        match &self.wait {
            Some(w) => {
                let _ = write!(out, "\n  this rank waits in {w}");
            }
            None => out.push_str("\n  this rank waits for nothing it published (a short wait)"),
        }
        let others: Vec<String> = self
            .others
            .iter()
            .map(|(p, w)| match w {
                Some(w) => format!("rank {p}: {w}"),
                None => format!("rank {p}: not waiting (or not known here)"),
            })
            .collect();
        let _ = write!(out, "\n  others: {}", others.join("; "));
        if let Some(rel) = &self.relation {
            let _ = write!(out, "\n  {rel}");
        }
        if let Some(u) = &self.unmatched {
            let _ = write!(out, "\n  unmatched: {u}");
        }
        let _ = write!(
            out,
            "\n  dead ranks: {}",
            crate::world::report::rank_list(&self.dead)
        );
        out.push_str("\n  last events (newest last):");
        for line in &self.last {
            out.push_str("\n    ");
            out.push_str(line);
        }
        if !self.trace.is_empty() {
            let _ = write!(out, "\n  {}", self.trace);
        }
        out
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "rank": self.rank,
            "wait": self.wait,
            "others": self.others.iter().map(|(p, w)| serde_json::json!([p, w])).collect::<Vec<_>>(),
            "relation": self.relation,
            "cycle": self.cycle,
            "unmatched": self.unmatched,
            "dead": self.dead,
            "last": self.last,
            "trace": self.trace,
        })
    }
}

/// This rank's hang report (world ranks): what it waits for, the waits of
/// every rank it can see (its host's wait board, the records peers on
/// other hosts sent), the cycle or chain its own wait leads into, the
/// ranks it knows dead, the messages that arrived and match no receive,
/// and its last events.
fn hang_report(e: &mut Engine) -> Report {
    let (r, n) = (e.rank(), e.nranks());
    let name = |op, peer, tag| crate::error::Operation(op, peer, tag).to_string();
    let mine = e.my_wait();
    let mut rep = Report {
        rank: r,
        wait: mine.map(|(w, _)| name(w.op, w.peer, w.tag)),
        others: (0..n)
            .filter(|&p| p != r)
            .map(|p| (p, e.peer_wait(p).map(|w| name(w.op, w.peer, w.tag))))
            .collect(),
        relation: None,
        cycle: Vec::new(),
        unmatched: None,
        dead: (0..n).filter(|&p| e.is_dead(p)).collect(),
        last: e.rec.last_lines(12),
        trace: String::new(),
    };
    if let Some((w, ctx)) = mine {
        let (chain, end) = super::follow(e, w.peer);
        let chain_text = crate::error::Chain(&chain).to_string();
        match end {
            super::ChainEnd::Cycle => {
                rep.relation = Some(format!(
                    "cycle: rank {r} waits for {chain_text}, which waits for rank {r}"
                ));
                rep.cycle = std::iter::once(r)
                    .chain(chain.iter().map(|c| c.rank))
                    .collect();
            }
            _ if !chain.is_empty() => {
                rep.relation = Some(format!("chain: rank {r} waits for {chain_text}"));
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
            rep.unmatched = Some(format!("{} ({k} in all)", told.join(", ")));
        }
    }
    rep
}
