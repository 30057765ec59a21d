//! `tandem-run -n N [--] program args...`: start N local ranks.

use tandem_driver::launch::Launcher;

const USAGE: &str = "usage: tandem-run -n N [--] program [args...]

Starts N ranks of `program` on this machine, connected by shared memory.
Each rank finds TANDEM_RANK, TANDEM_SIZE, TANDEM_JOB and TANDEM_SHM_FD in its
environment (tandem_driver::Comm::from_env reads them). Output lines are
prefixed with the rank. The exit code is the first failing rank's; once a
rank fails the others get TANDEM_KILL_GRACE seconds (default 3) to exit,
then are killed.";

fn main() {
    let mut args = std::env::args_os().skip(1);
    let mut n: Option<usize> = None;
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
    match Launcher::new(n, program).args(rest).run() {
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
