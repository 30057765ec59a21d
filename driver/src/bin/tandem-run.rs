//! `tandem-run -n N [--hosts a,b --exec CMD --root HOST:PORT] [--] program args...`:
//! start N ranks, on this machine or on several hosts.

use tandem_driver::launch::Launcher;

const USAGE: &str = "usage: tandem-run -n N [--hosts H1,H2,... [--exec CMD] [--root HOST:PORT]] [--report-signal] [--] program [args...]

Starts N ranks of `program`. Without --hosts they run on this machine,
connected by shared memory (TANDEM_TRANSPORT=tcp: by TCP). With --hosts they
are spread over the hosts in blocks of consecutive ranks and started through
CMD (default 'ssh {host} env {env}'; {host} is the host, {env} the rank's
KEY=VALUE settings, which otherwise travel in CMD's environment, e.g.
--exec 'ip netns exec {host}'); they meet at HOST:PORT (default: the first
host, a port derived from the job id), where rank 0 listens.

Each rank finds TANDEM_RANK, TANDEM_SIZE, TANDEM_JOB, TANDEM_SECRET (a fresh
per-job secret) and TANDEM_SHM_FD or TANDEM_ROOT in its environment
(tandem_driver::Comm::from_env reads them). Output lines are prefixed with
the rank. The exit code is the first failing rank's; once a rank fails the
others get TANDEM_KILL_GRACE seconds (default 3) to exit, then are killed.

--report-signal: `kill -USR1 <tandem-run's pid>` asks every rank for its
hang report (what it and every rank it knows of waits for, the cycle or
chain, dead ranks, unmatched messages, its last events; its trace is
written too), and tandem-run prints one report for the job once every rank
answered or 2 s passed. The ranks get TANDEM_REPORT_SIGNAL=launcher, which
installs their SIGUSR1 handler.";

fn main() {
    let mut args = std::env::args_os().skip(1);
    let mut n: Option<usize> = None;
    let mut hosts: Vec<String> = Vec::new();
    let mut exec: Option<String> = None;
    let mut root: Option<String> = None;
    let mut report = false;
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("-h") | Some("--help") => {
                println!("{USAGE}");
                return;
            }
            Some("-n") | Some("--np") => {
                n = args
                    .next()
                    .and_then(|v| v.to_str().and_then(|s| s.parse().ok()));
                if n.is_none() {
                    fail("-n needs a positive number");
                }
            }
            Some("--hosts") => {
                let v = args.next().and_then(|v| v.into_string().ok());
                hosts = v
                    .unwrap_or_else(|| fail("--hosts needs a list of hosts"))
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(String::from)
                    .collect();
                if hosts.is_empty() {
                    fail("--hosts needs at least one host");
                }
            }
            Some("--exec") => {
                exec = Some(
                    args.next()
                        .and_then(|v| v.into_string().ok())
                        .unwrap_or_else(|| fail("--exec needs a command")),
                );
            }
            Some("--root") => {
                root = Some(
                    args.next()
                        .and_then(|v| v.into_string().ok())
                        .unwrap_or_else(|| fail("--root needs HOST:PORT")),
                );
            }
            Some("--report-signal") => report = true,
            Some("--") => {
                rest.extend(args.by_ref());
            }
            _ => {
                rest.push(a);
                rest.extend(args.by_ref());
            }
        }
    }
    let n = n.filter(|&n| n > 0).unwrap_or_else(|| fail("missing -n N"));
    if rest.is_empty() {
        fail("missing program");
    }
    let program = rest.remove(0);
    if hosts.is_empty() && (exec.is_some() || root.is_some()) {
        fail("--exec and --root need --hosts");
    }
    let mut launcher = Launcher::new(n, program)
        .args(rest)
        .report_on_signal(report);
    if !hosts.is_empty() {
        launcher = launcher.hosts(hosts);
        if let Some(e) = exec {
            launcher = launcher.exec(e);
        }
        if let Some(r) = root {
            launcher = launcher.root(r);
        }
    }
    match launcher.run() {
        Ok(o) => std::process::exit(o.code()),
        Err(e) => {
            eprintln!("tandem-run: {e}");
            std::process::exit(1);
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("tandem-run: {msg}\n\n{USAGE}");
    std::process::exit(2);
}
