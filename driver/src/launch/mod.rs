//! Starting ranks: `tandem-run`, [`crate::Comm::local`] and test harnesses.
//!
//! The launcher creates the job's shared-memory file (see [`crate::transport::shm::map`]),
//! starts every rank with `TANDEM_RANK`, `TANDEM_SIZE`, `TANDEM_JOB` and
//! `TANDEM_SHM_FD` in its environment and the file's descriptor inherited,
//! then unlinks the file's name. Ranks are started with
//! `PR_SET_PDEATHSIG = SIGKILL`, so they die with the launcher instead of
//! spinning forever.

use crate::config::Layout;
use crate::error::{Error, Result};
use crate::transport::shm::map::{new_job_id, JobMap};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The `/dev/shm` path a job's file has while its ranks start.
pub fn shm_path(job: u64) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    PathBuf::from(format!("/dev/shm/tandem-{}-{job:016x}", unsafe {
        libc::getuid()
    }))
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

struct Rank {
    rank: usize,
    child: Child,
    status: Option<i32>,
}

fn forward(src: impl Read + Send + 'static, rank: usize, err: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::with_capacity(256);
        while let Ok(n) = r.read_until(b'\n', &mut line) {
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let prefix = format!("[{rank}] ");
            let _ = if err {
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

#[allow(clippy::too_many_arguments)]
fn spawn_ranks(
    job: u64,
    n: usize,
    ranks: std::ops::Range<usize>,
    file: &File,
    program: &OsStr,
    args: &[OsString],
    envs: &[(OsString, OsString)],
    prefix: bool,
) -> Result<(Vec<Rank>, Vec<JoinHandle<()>>)> {
    let fd = file.as_raw_fd();
    let me = std::process::id() as libc::pid_t;
    let mut out = Vec::new();
    let mut fwd = Vec::new();
    for r in ranks {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .env("TANDEM_RANK", r.to_string())
            .env("TANDEM_SIZE", n.to_string())
            .env("TANDEM_JOB", format!("{job:016x}"))
            .env("TANDEM_SHM_FD", fd.to_string());
        if prefix {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        // SAFETY: the closure runs between fork and exec and only makes
        // async-signal-safe calls (fcntl, prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != me {
                    return Err(std::io::Error::other("launcher exited during start"));
                }
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for mut k in out.into_iter().map(|x: Rank| x.child) {
                    let _ = k.kill();
                    let _ = k.wait();
                }
                return Err(Error::Io(format!(
                    "starting rank {r} ({}): {e}",
                    program.to_string_lossy()
                )));
            }
        };
        if prefix {
            if let Some(o) = child.stdout.take() {
                fwd.push(forward(o, r, false));
            }
            if let Some(e) = child.stderr.take() {
                fwd.push(forward(e, r, true));
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
    pub fn wait(mut self) -> Result<()> {
        let o = supervise(&mut self.ranks, self.grace);
        for h in self.fwd.drain(..) {
            let _ = h.join();
        }
        match o.first_failure {
            Some((rank, code)) => Err(Error::RankFailed { rank, code }),
            None => Ok(()),
        }
    }
}

fn supervise(ranks: &mut [Rank], grace: Duration) -> Outcome {
    let mut first: Option<(usize, i32)> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let mut running = 0;
        for r in ranks.iter_mut() {
            if r.status.is_some() {
                continue;
            }
            match r.child.try_wait() {
                Ok(Some(st)) => {
                    let c = exit_code(st);
                    r.status = Some(c);
                    if c != 0 && first.is_none() {
                        first = Some((r.rank, c));
                        kill_at = Some(Instant::now() + grace);
                    }
                }
                Ok(None) => running += 1,
                Err(_) => r.status = Some(255),
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

fn kill_grace() -> Duration {
    crate::config::env_num::<f64>("TANDEM_KILL_GRACE")
        .ok()
        .flatten()
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(3))
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
    let (file, path) = JobMap::create_file(job, n, layout)?;
    let spawned = spawn_ranks(job, n, 1..n, &file, exe.as_os_str(), args, &[], false);
    let _ = std::fs::remove_file(&path);
    let (ranks, fwd) = spawned?;
    let map = JobMap::open(&file, job, n)?;
    Ok((
        map,
        Children {
            ranks,
            fwd,
            grace: kill_grace(),
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
            grace: kill_grace(),
            job: new_job_id(),
        }
    }

    /// Appends an argument.
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Appends arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, a: I) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for every rank.
    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }

    /// Channel layout (default: [`Layout::from_env`]).
    pub fn layout(mut self, l: Layout) -> Self {
        self.layout = Some(l);
        self
    }

    /// Prefix each output line with `[rank] ` (default on).
    pub fn prefix_output(mut self, on: bool) -> Self {
        self.prefix = on;
        self
    }

    /// How long the other ranks get to exit after one fails (default 3 s,
    /// `TANDEM_KILL_GRACE`).
    pub fn kill_grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }

    /// The job id the ranks will get.
    pub fn job_id(&self) -> u64 {
        self.job
    }

    /// Starts the ranks and waits for all of them.
    pub fn run(self) -> Result<Outcome> {
        if self.n == 0 {
            return Err(Error::Config("a job needs at least one rank".into()));
        }
        let layout = match self.layout {
            Some(l) => l,
            None => Layout::from_env()?,
        };
        let (file, path) = JobMap::create_file(self.job, self.n, &layout)?;
        let spawned = spawn_ranks(
            self.job,
            self.n,
            0..self.n,
            &file,
            &self.program,
            &self.args,
            &self.envs,
            self.prefix,
        );
        // Every rank holds the descriptor now (or none was started).
        let _ = std::fs::remove_file(&path);
        drop(file);
        let (mut ranks, fwd) = spawned?;
        let o = supervise(&mut ranks, self.grace);
        for h in fwd {
            let _ = h.join();
        }
        Ok(o)
    }
}
