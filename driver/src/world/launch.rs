//! Starting ranks: `tandem-run`, [`crate::Comm::local`] and test harnesses.
//!
//! The launcher creates the job's shared-memory file (see [`crate::job`]),
//! starts every rank with `TANDEM_RANK`, `TANDEM_SIZE`, `TANDEM_JOB` and
//! `TANDEM_SHM_FD` in its environment and the file's descriptor inherited,
//! then unlinks the file's name. Ranks are started with
//! `PR_SET_PDEATHSIG = SIGKILL`, so they die with the launcher instead of
//! spinning forever.

use crate::config::Layout;
use crate::error::{Error, Result};
use crate::job::{new_job_id, JobMap};
use crate::world::report::{Collected, Round};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::job::shm_path;

/// 32 random bytes as hex: the secret of a job this launcher starts (empty
/// if the kernel gives no randomness; the ranks then refuse to meet over
/// the network and say why).
fn fresh_secret() -> String {
    let mut b = [0u8; 32];
    if !crate::sys::random_bytes(&mut b) {
        return String::new();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

struct Rank {
    rank: usize,
    child: Child,
    status: Option<i32>,
}

/// Where a rank's output goes: the launcher's own, each line behind
/// `[rank] ` with `prefix`; hang-report lines of its standard error
/// (`err`) into `reports` when the launcher collects them.
struct Sink {
    rank: usize,
    err: bool,
    prefix: bool,
    reports: Option<Collected>,
}

fn forward(src: impl Read + Send + 'static, to: Sink) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::with_capacity(256);
        let prefix = if to.prefix {
            format!("[{}] ", to.rank)
        } else {
            String::new()
        };
        while let Ok(n) = r.read_until(b'\n', &mut line) {
            if n == 0 {
                break;
            }
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            if let Some(c) = to.reports.as_ref().filter(|_| to.err) {
                if c.take(to.rank, body) {
                    line.clear();
                    continue;
                }
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let _ = if to.err {
                let mut o = std::io::stderr().lock();
                o.write_all(prefix.as_bytes())
                    .and_then(|_| o.write_all(&line))
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(prefix.as_bytes())
                    .and_then(|_| o.write_all(&line))
            };
            line.clear();
        }
    })
}

/// How ranks on other hosts are started: the exec template (`{host}`
/// replaced by the host name; `{env}`, if present, by the rank's
/// `KEY=VALUE` settings, which otherwise travel in the environment of the
/// exec command) and the host of each rank.
struct Remote<'a> {
    template: &'a str,
    host_of: &'a [String],
}

/// The command that starts rank `r` of `program` on its host.
fn remote_command(
    remote: &Remote<'_>,
    r: usize,
    program: &OsStr,
    args: &[OsString],
    vars: &[(OsString, OsString)],
) -> Result<Command> {
    let host = &remote.host_of[r];
    let mut words = Vec::new();
    let mut env_placed = false;
    for w in remote.template.split_whitespace() {
        if w == "{env}" {
            env_placed = true;
            for (k, v) in vars {
                let mut kv = k.clone();
                kv.push("=");
                kv.push(v);
                words.push(kv);
            }
        } else {
            words.push(OsString::from(w.replace("{host}", host)));
        }
    }
    let Some(first) = words.first().cloned() else {
        return Err(Error::Config("the remote exec command is empty".into()));
    };
    let mut cmd = Command::new(first);
    cmd.args(&words[1..]).arg(program).args(args);
    if !env_placed {
        cmd.envs(vars.iter().map(|(k, v)| (k, v)));
    }
    Ok(cmd)
}

#[allow(clippy::too_many_arguments)]
fn spawn_ranks(
    job: u64,
    n: usize,
    ranks: std::ops::Range<usize>,
    file: Option<&File>,
    remote: Option<&Remote<'_>>,
    program: &OsStr,
    args: &[OsString],
    envs: &[(OsString, OsString)],
    prefix: bool,
    reports: Option<&Collected>,
) -> Result<(Vec<Rank>, Vec<JoinHandle<()>>)> {
    let pipe = prefix || reports.is_some();
    let fd = file.map(|f| f.as_raw_fd());
    let me = std::process::id() as libc::pid_t;
    let mut out = Vec::new();
    let mut fwd = Vec::new();
    for r in ranks {
        let mut vars: Vec<(OsString, OsString)> = envs.to_vec();
        vars.push(("TANDEM_RANK".into(), r.to_string().into()));
        vars.push(("TANDEM_SIZE".into(), n.to_string().into()));
        vars.push(("TANDEM_JOB".into(), format!("{job:016x}").into()));
        if let Some(fd) = fd {
            vars.push(("TANDEM_SHM_FD".into(), fd.to_string().into()));
        }
        let mut cmd = match remote {
            Some(rm) => remote_command(rm, r, program, args, &vars)?,
            None => {
                let mut c = Command::new(program);
                c.args(args).envs(vars.iter().map(|(k, v)| (k, v)));
                c
            }
        };
        if pipe {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        crate::sys::child_of(&mut cmd, fd, me);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for mut k in out.into_iter().map(|x: Rank| x.child) {
                    let _ = k.kill();
                    let _ = k.wait();
                }
                return Err(Error::io(
                    format!("starting rank {r} ({})", program.to_string_lossy()),
                    e,
                ));
            }
        };
        if pipe {
            let sink = |err| Sink {
                rank: r,
                err,
                prefix,
                reports: reports.cloned(),
            };
            if let Some(o) = child.stdout.take() {
                fwd.push(forward(o, sink(false)));
            }
            if let Some(e) = child.stderr.take() {
                fwd.push(forward(e, sink(true)));
            }
        }
        out.push(Rank {
            rank: r,
            child,
            status: None,
        });
    }
    Ok((out, fwd))
}

/// How a launched job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code of each rank (128 + signal number if killed).
    pub codes: Vec<i32>,
    /// The first rank seen failing, with its code.
    pub first_failure: Option<(usize, i32)>,
}

impl Outcome {
    /// The job's exit code: the first failing rank's, or 0.
    pub fn code(&self) -> i32 {
        self.first_failure.map_or(0, |f| f.1)
    }
}

/// Ranks started by [`crate::Comm::local`] (rank 0 is the caller).
pub struct Children {
    ranks: Vec<Rank>,
    fwd: Vec<JoinHandle<()>>,
    grace: Duration,
}

impl Children {
    /// Waits for every rank; the first failure is an error. Once one rank
    /// fails the others get `grace` to notice and exit, then are killed.
    ///
    /// # Errors
    /// [`Error::RankFailed`] with the first rank seen exiting with a non-zero
    /// code (128 + the signal number if it was killed).
    pub fn wait(mut self) -> Result<()> {
        let o = supervise(&mut self.ranks, self.grace, None);
        for h in self.fwd.drain(..) {
            let _ = h.join();
        }
        match o.first_failure {
            Some((rank, code)) => Err(Error::RankFailed { rank, code }),
            None => Ok(()),
        }
    }
}

/// `SIGUSR1`s this launcher received (with [`Launcher::report_on_signal`]).
/// The std atomic: a signal handler's counter is outside what loom models.
#[allow(clippy::disallowed_types)]
static REPORT_ASKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn note_report_ask(_: libc::c_int) {
    REPORT_ASKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Waits for every rank of `ranks`, killing the rest `grace` after the
/// first failure; with `reports`, passes `SIGUSR1`s the launcher gets on
/// to the running ranks and prints the job's hang report they answer.
fn supervise(ranks: &mut [Rank], grace: Duration, reports: Option<&Collected>) -> Outcome {
    let mut first: Option<(usize, i32)> = None;
    let mut kill_at: Option<Instant> = None;
    let mut asks = REPORT_ASKS.load(std::sync::atomic::Ordering::Relaxed);
    let mut round = Round::default();
    let n = ranks.len();
    loop {
        // A report asked for: pass the signal on to every rank still
        // running (they installed a handler: TANDEM_REPORT_SIGNAL).
        let now = REPORT_ASKS.load(std::sync::atomic::Ordering::Relaxed);
        if now != asks {
            asks = now;
            eprintln!(
                "tandem-run: report asked for: each rank answers from its next wait in tandem \
                 (waiting up to {} s; a rank computing outside tandem answers when it next waits)",
                crate::world::report::ANSWER_WITHIN.as_secs()
            );
            let running: Vec<usize> = ranks
                .iter()
                .filter(|r| r.status.is_none())
                .map(|r| r.rank)
                .collect();
            for r in ranks.iter().filter(|r| r.status.is_none()) {
                let _ = crate::sys::send_signal(r.child.id(), libc::SIGUSR1);
            }
            round.ask(running);
        }
        if let Some(c) = reports {
            let running = |k: usize| ranks.iter().any(|r| r.rank == k && r.status.is_none());
            if let Some(text) = round.poll(c, n, running) {
                eprintln!("{text}");
            }
        }
        let mut running = 0;
        for r in ranks.iter_mut() {
            if r.status.is_some() {
                continue;
            }
            // A rank whose status cannot be read counts as failed (255).
            let c = match r.child.try_wait() {
                Ok(Some(st)) => exit_code(st),
                Ok(None) => {
                    running += 1;
                    continue;
                }
                Err(_) => 255,
            };
            r.status = Some(c);
            if c != 0 && first.is_none() {
                first = Some((r.rank, c));
                kill_at = Some(Instant::now() + grace);
            }
        }
        if running == 0 {
            break;
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
                let _ = r.child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Outcome {
        codes: ranks.iter().map(|r| r.status.unwrap_or(255)).collect(),
        first_failure: first,
    }
}

/// `TANDEM_KILL_GRACE` (default 3 s).
fn kill_grace() -> Result<Duration> {
    Ok(crate::config::env_secs("TANDEM_KILL_GRACE", true)?.unwrap_or(Duration::from_secs(3)))
}

/// Rank 0's side of [`crate::Comm::local`]: creates the job, starts ranks
/// `1..n` running `exe args`, and maps the job for itself.
pub(crate) fn spawn_world(
    n: usize,
    layout: &Layout,
    exe: &std::path::Path,
    args: &[OsString],
) -> Result<(JobMap, Children)> {
    let job = new_job_id();
    let (file, path) =
        JobMap::create_file_with(job, n, layout, crate::calibrate::for_ranks(n, layout))?;
    let spawned = spawn_ranks(
        job,
        n,
        1..n,
        Some(&file),
        None,
        exe.as_os_str(),
        args,
        &[],
        false,
        None,
    );
    let _ = std::fs::remove_file(&path);
    let (ranks, fwd) = spawned?;
    let map = JobMap::open(&file, job, n)?;
    Ok((
        map,
        Children {
            ranks,
            fwd,
            grace: kill_grace()?,
        },
    ))
}

/// Starts `n` ranks of a program and supervises them (what `tandem-run`
/// does).
///
/// ```no_run
/// use tandem_driver::launch::Launcher;
/// let outcome = Launcher::new(4, "./my-rank-program").arg("--iters").arg("100").run()?;
/// std::process::exit(outcome.code());
/// # Ok::<(), tandem_driver::Error>(())
/// ```
pub struct Launcher {
    n: usize,
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    layout: Option<Layout>,
    prefix: bool,
    grace: Duration,
    job: u64,
    hosts: Vec<String>,
    exec: String,
    root: Option<String>,
    secret: String,
    report: bool,
}

impl Launcher {
    /// `n` ranks of `program`.
    pub fn new(n: usize, program: impl Into<OsString>) -> Self {
        Self {
            n,
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            layout: None,
            prefix: true,
            // An invalid value is refused by `run`.
            grace: kill_grace().unwrap_or(Duration::from_secs(3)),
            job: new_job_id(),
            hosts: Vec::new(),
            exec: "ssh {host} env {env}".into(),
            root: None,
            secret: fresh_secret(),
            report: false,
        }
    }

    /// With `on`, `SIGUSR1` sent to the launcher asks every rank for its
    /// hang report: the launcher installs a handler and passes the signal
    /// on, and the ranks get `TANDEM_REPORT_SIGNAL=launcher`, which makes
    /// [`Comm::from_env`](crate::Comm::from_env) install theirs
    /// ([`Comm::trace_on_signal`](crate::Comm::trace_on_signal)). Each rank
    /// answers from its next wait in tandem with what it waits for, the
    /// waits of every rank it knows (its host's wait board, the records
    /// of other hosts), the cycle or chain they form, the dead ranks, the
    /// unmatched messages and its last events, and writes its trace; the
    /// launcher takes the answers off the ranks' standard error (ranks on
    /// other hosts included) and prints one report for the job once every
    /// rank asked has answered or 2 s have passed, naming the ranks that
    /// did not answer (computing outside tandem, stopped) with what the
    /// others see them wait in.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn report_on_signal(mut self, on: bool) -> Self {
        self.report = on;
        self
    }

    /// Starts the ranks on these hosts (blocks of consecutive ranks, the
    /// first block on the first host) through the [`exec`](Self::exec)
    /// command, instead of on this machine. The ranks then meet at
    /// [`root`](Self::root) and authenticate with a secret this launcher
    /// made up for the job.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn hosts<I: IntoIterator<Item = S>, S: Into<String>>(mut self, hosts: I) -> Self {
        self.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// The command that runs a program on another host (default
    /// `ssh {host} env {env}`, like mpirun's rsh agent): `{host}` becomes
    /// the host, `{env}` the rank's `KEY=VALUE` settings (without `{env}`
    /// they travel in the command's environment, as `ip netns exec` or
    /// `sudo -E` pass it on), and the program and its arguments follow.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn exec(mut self, template: impl Into<String>) -> Self {
        self.exec = template.into();
        self
    }

    /// Where rank 0 listens for the others at start (`host:port`; default:
    /// the first host at a port derived from the job id).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn root(mut self, addr: impl Into<String>) -> Self {
        self.root = Some(addr.into());
        self
    }

    /// Appends an argument.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Appends arguments.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, a: I) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for every rank.
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }

    /// Channel layout (default: [`Layout::from_env`]).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn layout(mut self, l: Layout) -> Self {
        self.layout = Some(l);
        self
    }

    /// Prefix each output line with `[rank] ` (default on).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn prefix_output(mut self, on: bool) -> Self {
        self.prefix = on;
        self
    }

    /// How long the other ranks get to exit after one fails (default 3 s,
    /// `TANDEM_KILL_GRACE`).
    #[must_use = "a builder method returns the changed value; it does not change the receiver"]
    pub fn kill_grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }

    /// The job id the ranks will get.
    pub fn job_id(&self) -> u64 {
        self.job
    }

    /// Starts the ranks and waits for all of them.
    ///
    /// # Errors
    /// Only a job that could not start is an error (ranks that fail are in the
    /// [`Outcome`]):
    /// * [`Error::Config`] for `n` of 0, a `TANDEM_KILL_GRACE` that is not
    ///   zero or positive seconds, or a `TANDEM_*` layout variable
    ///   [`Layout::from_env`] refuses; on this host, for more than
    ///   [`MAX_RANKS`](crate::job::MAX_RANKS) ranks or a
    ///   layout [`Layout::validate`] refuses; with [`hosts`](Self::hosts),
    ///   for an empty [`exec`](Self::exec) command;
    /// * [`Error::Io`] if the job file cannot be created or its memory
    ///   reserved (`/dev/shm` full), or a rank cannot be started (the ranks
    ///   started before it are killed).
    pub fn run(self) -> Result<Outcome> {
        if self.n == 0 {
            return Err(Error::Config("a job needs at least one rank".into()));
        }
        kill_grace()?;
        let layout = match self.layout {
            Some(l) => {
                l.validate()?;
                l
            }
            None => Layout::from_env()?,
        };
        let mut envs = self.envs.clone();
        let reports = self.report.then(Collected::default);
        if self.report {
            crate::sys::on_signal(libc::SIGUSR1, note_report_ask)
                .map_err(|e| Error::io("installing the launcher's SIGUSR1 handler", e))?;
            envs.push(("TANDEM_REPORT_SIGNAL".into(), "launcher".into()));
        }
        if std::env::var_os("TANDEM_SECRET").is_none() && !self.secret.is_empty() {
            envs.push(("TANDEM_SECRET".into(), self.secret.clone().into()));
        }
        if !self.hosts.is_empty() {
            return self.run_remote(&layout, envs, reports.as_ref());
        }
        let (file, path) = JobMap::create_file_with(
            self.job,
            self.n,
            &layout,
            crate::calibrate::for_ranks(self.n, &layout),
        )?;
        let spawned = spawn_ranks(
            self.job,
            self.n,
            0..self.n,
            Some(&file),
            None,
            &self.program,
            &self.args,
            &envs,
            self.prefix,
            reports.as_ref(),
        );
        // Every rank holds the descriptor now (or none was started).
        let _ = std::fs::remove_file(&path);
        drop(file);
        let (mut ranks, fwd) = spawned?;
        let o = supervise(&mut ranks, self.grace, reports.as_ref());
        for h in fwd {
            let _ = h.join();
        }
        Ok(o)
    }

    fn run_remote(
        &self,
        layout: &Layout,
        mut envs: Vec<(OsString, OsString)>,
        reports: Option<&Collected>,
    ) -> Result<Outcome> {
        let h = self.hosts.len();
        let host_of: Vec<String> = (0..self.n)
            .map(|r| self.hosts[r * h / self.n].clone())
            .collect();
        let root = match &self.root {
            Some(r) => r.clone(),
            None => format!("{}:{}", self.hosts[0], 20000 + (self.job % 20000)),
        };
        envs.push(("TANDEM_ROOT".into(), root.into()));
        // The ranks read their layout from the environment: pass ours on.
        for (k, v) in layout.vars() {
            if !envs.iter().any(|(e, _)| e == k) {
                envs.push((k.into(), v.to_string().into()));
            }
        }
        // And every other TANDEM_* setting of ours (a remote shell starts
        // with a fresh environment).
        for (k, v) in std::env::vars_os() {
            let is_ours = k
                .to_str()
                .is_some_and(|k| k.starts_with("TANDEM_") && k != "TANDEM_SHM_FD");
            if is_ours && !envs.iter().any(|(e, _)| *e == k) {
                envs.push((k, v));
            }
        }
        let remote = Remote {
            template: &self.exec,
            host_of: &host_of,
        };
        let (mut ranks, fwd) = spawn_ranks(
            self.job,
            self.n,
            0..self.n,
            None,
            Some(&remote),
            &self.program,
            &self.args,
            &envs,
            self.prefix,
            reports,
        )?;
        let o = supervise(&mut ranks, self.grace, reports);
        for h in fwd {
            let _ = h.join();
        }
        Ok(o)
    }
}
