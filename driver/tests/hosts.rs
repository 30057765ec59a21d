//! Jobs across real network namespaces ("hosts" on this machine, made and
//! removed by the test itself; only their own addresses are contacted):
//! a rank killed on one host, a connection shut in the middle of a stream,
//! strangers and ranks of another job at the bootstrap and data ports,
//! mismatched parameters, a missing secret and a rank that never comes.
//!
//! Needs root (network namespaces); `TANDEM_SKIP_NETNS=1` skips it with a
//! message where that is impossible.

mod common;
use common::netns::Net;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tandem_driver::{Comm, Error};

/// The environment variable that tells a rank process which part to play.
const ROLE: &str = "TANDEM_TEST_ROLE";

fn net(n: usize) -> Option<common::netns::Net> {
    common::netns::for_test(n)
}

fn unique_port(k: u16) -> u16 {
    // Below the ephemeral range (32768-60999), in this file's own band.
    20000 + (std::process::id() % 600) as u16 * 20 + k
}

/// `tandem-run` over `hosts` of `net`, running this binary's rank entry
/// point with `role`.
fn tandem_run(net: &Net, n: usize, hosts: &[usize], role: &str, port: u16) -> Output {
    tandem_run_with(net, n, hosts, role, port, &[])
}

/// [`tandem_run`] with `envs` added to the ranks' environment.
fn tandem_run_with(
    net: &Net,
    n: usize,
    hosts: &[usize],
    role: &str,
    port: u16,
    envs: &[(&str, &str)],
) -> Output {
    tandem_run_cmd(net, n, hosts, role, port, envs, &[])
        .output()
        .unwrap()
}

/// The `tandem-run` command of [`tandem_run_with`], with `opts` for
/// `tandem-run` itself, not started.
fn tandem_run_cmd(
    net: &Net,
    n: usize,
    hosts: &[usize],
    role: &str,
    port: u16,
    envs: &[(&str, &str)],
    opts: &[&str],
) -> Command {
    let names: Vec<&str> = hosts
        .iter()
        .map(|&h| net.hosts()[h].name.as_str())
        .collect();
    let root = format!("{}:{port}", net.hosts()[hosts[0]].addr);
    let addrs: Vec<String> = net.hosts().iter().map(|h| h.addr.to_string()).collect();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem-run"));
    c.args(["-n", &n.to_string(), "--hosts", &names.join(",")])
        .args(opts)
        .args(["--exec", net.exec_template(), "--root", &root, "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "rank_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(ROLE, role)
        .env("TEST_HOST_ADDRS", addrs.join(","))
        .env("TANDEM_SPIN", "2000")
        .env("TANDEM_TIMEOUT", "20")
        .env("TANDEM_KILL_GRACE", "30")
        .envs(envs.iter().copied());
    c
}

/// One rank started by hand inside host `h`, with `envs` on top of the
/// job's (`TANDEM_RANK`, `TANDEM_SIZE`, `TANDEM_ROOT`, ...).
fn rank_by_hand(net: &Net, h: usize, role: &str, envs: &[(&str, String)]) -> Child {
    let mut c = net.command(h, std::env::current_exe().unwrap());
    c.args([
        "rank_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(ROLE, role)
    .env("TANDEM_SPIN", "2000")
    .env_remove("TANDEM_SHM_FD")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `python3 -c script` inside host `h` (a stranger's program).
fn stranger(net: &Net, h: usize, script: &str) -> Output {
    net.command(h, "python3")
        .args(["-c", script])
        .output()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Rank bodies
// ---------------------------------------------------------------------------

/// The entry point of the rank processes these tests start; run directly
/// as a test (no role) it has nothing to do.
#[test]
fn rank_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "kill" => kill_body(),
        "shut" => shut_body(),
        "ring" => ring_body(),
        "ulfm_kill" => ulfm_body(false),
        "ulfm_cut" => ulfm_body(true),
        "cycle" => cycle_body(),
        "chain" => chain_body(),
        "report" => report_body(),
        other => panic!("unknown role {other}"),
    }
}

/// Joins the job; a failure panics with the error's message.
fn join() -> Comm {
    Comm::from_env().unwrap_or_else(|e| panic!("joining failed: {e}"))
}

/// The others keep working: every survivor exchanges with every other.
fn survivors_exchange(comm: &Comm, survivors: &[usize]) {
    let me = [comm.rank() as u8];
    comm.group(|g| {
        for &p in survivors.iter().filter(|&&p| p != comm.rank()) {
            g.send(&me, p, 9)?;
        }
        Ok(())
    })
    .unwrap();
    for &p in survivors.iter().filter(|&&p| p != comm.rank()) {
        let mut b = [0u8; 1];
        comm.recv(&mut b, p, 9).unwrap();
        assert_eq!(b[0] as usize, p);
    }
}

fn kill_body() {
    let comm = join();
    let victim = comm.size() - 1;
    if comm.rank() == victim {
        let mut go = [0u8; 2];
        comm.recv(&mut go, 0, 1).unwrap();
        // SAFETY: raising a signal has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
        unreachable!("killed");
    }
    let t = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let r = comm.scope(|s| {
        let r = s.irecv(&mut buf, victim, 2)?;
        if comm.rank() == 0 {
            comm.send(b"go", victim, 1)?;
        }
        r.wait()
    });
    let took = t.elapsed();
    println!("rank {}: {r:?} after {took:?}", comm.rank());
    assert_eq!(r.unwrap(), Err(Error::PeerLost { rank: victim }));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let survivors: Vec<usize> = (0..victim).collect();
    survivors_exchange(&comm, &survivors);
    println!("rank {}: survivors still talk", comm.rank());
}

/// Shuts down, from inside this process, every TCP socket connected to
/// `ip` (a real fault: the kernel ends the connection mid-stream).
fn shut_sockets_to(ip: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: an all-zero sockaddr_storage is valid; getpeername writes
        // at most `len` bytes into it.
        let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: as above; a descriptor that is not a socket just fails.
        let rc = unsafe {
            libc::getpeername(
                fd,
                (&mut sa as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if rc != 0 || sa.ss_family != libc::AF_INET as libc::sa_family_t {
            continue;
        }
        // SAFETY: the family says it is a sockaddr_in.
        let sin = unsafe { &*(&sa as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
        let peer = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if peer.to_string() == ip {
            // SAFETY: plain syscall on a descriptor of this process.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            n += 1;
        }
    }
    n
}

fn shut_body() {
    let comm = join();
    let addrs: Vec<String> = std::env::var("TEST_HOST_ADDRS")
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    const BIG: usize = 1 << 30;
    match comm.rank() {
        0 => {
            let mut buf = vec![0u8; BIG];
            let r = comm.recv(&mut buf, 1, 5);
            println!("rank 0: receive from rank 1 ended with {r:?}");
            assert_eq!(r, Err(Error::PeerLost { rank: 1 }));
        }
        1 => {
            let buf = vec![7u8; BIG];
            let zero = addrs[0].clone();
            let cutter = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(60));
                shut_sockets_to(&zero)
            });
            let r = comm.send(&buf, 0, 5);
            let cut = cutter.join().unwrap();
            println!("rank 1: cut {cut} connection(s); send ended with {r:?}");
            assert_eq!(cut, 1, "one connection to rank 0");
            let e = r.expect_err("the stream was cut");
            assert!(
                matches!(
                    e,
                    Error::PeerLost { rank: 0 } | Error::ChannelBroken { peer: 0, .. }
                ),
                "{e:?}"
            );
        }
        _ => {}
    }
    // Rank 2 talks to both, who still talk to it.
    if comm.rank() == 2 {
        survivors_exchange(&comm, &[0, 1, 2]);
    } else {
        comm.send(&[comm.rank() as u8], 2, 9).unwrap();
        let mut b = [0u8; 1];
        comm.recv(&mut b, 2, 9).unwrap();
        assert_eq!(b[0], 2);
    }
    println!("rank {}: done", comm.rank());
}

/// The sums of the recovery loop: `rounds` allreduces of `rank + round`,
/// checked; the first error.
fn sums(comm: &Comm, from: u64, rounds: u64) -> Result<(), Error> {
    for round in from..from + rounds {
        let mine = [comm.rank() as u64 + round; 8];
        let mut got = [0u64; 8];
        comm.allreduce(&mine, &mut got, tandem_driver::ReduceOp::Sum)?;
        let n = comm.size() as u64;
        assert_eq!(got, [n * (n - 1) / 2 + n * round; 8], "round {round}");
    }
    Ok(())
}

/// An allreduce loop over every rank; the last rank is killed (or its
/// host's network cut); the others see the failure, revoke, shrink and
/// go on with correct sums on the survivors.
fn ulfm_body(cut: bool) {
    let comm = join();
    let victim = comm.size() - 1;
    if comm.rank() == victim {
        sums(&comm, 0, 20).unwrap();
        if !cut {
            // SAFETY: raising a signal has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        let st = Command::new("ip")
            .args(["link", "set", "eth0", "down"])
            .status()
            .unwrap();
        assert!(st.success(), "cutting this host's network");
        // Cut off, it sees every other rank fall silent and goes on alone.
        let e = sums(&comm, 20, u64::MAX / 4).unwrap_err();
        comm.revoke();
        let alone = comm.shrink().unwrap();
        println!("rank {victim}: cut off ({e}); alone: {} rank", alone.size());
        return;
    }
    // The survivors run until the failure shows, which may be in the
    // victim's last rounds: what it sent just before dying may be lost.
    let t = Instant::now();
    let e = sums(&comm, 0, u64::MAX / 4).unwrap_err();
    println!(
        "rank {}: allreduce failed after {:?}: {e}",
        comm.rank(),
        t.elapsed()
    );
    comm.revoke();
    let small = comm.shrink().unwrap();
    let took = t.elapsed();
    println!(
        "rank {}: shrunk to {} ranks (rank {} there) {:.2} s after the loop began",
        comm.rank(),
        small.size(),
        small.rank(),
        took.as_secs_f64()
    );
    assert_eq!((small.size(), small.rank()), (victim, comm.rank()));
    sums(&small, 1000, 200).unwrap();
    println!("rank {}: the survivors' sums are right", comm.rank());
}

/// Each rank in a blocking `ssend` to the next (0 → 1 → 2 → 0), the
/// ranks on two hosts: every rank reports the cycle as a deadlock naming
/// all three operations, long before the 60 s deadline.
fn cycle_body() {
    let comm = join();
    let (me, n) = (comm.rank(), comm.size());
    let t = Instant::now();
    let r = comm.ssend(b"x", (me + 1) % n, 4);
    let took = t.elapsed().as_secs_f64();
    match &r {
        Err(e @ Error::Deadlock { ours, theirs, .. }) => {
            let mut ranks: Vec<usize> = theirs.iter().map(|w| w.rank).collect();
            ranks.push(ours.rank);
            ranks.sort_unstable();
            assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "{e}");
            println!("rank {me}: after {took:.2} s: {e}");
        }
        other => panic!("rank {me}: expected a deadlock, got {other:?}"),
    }
    // Stay until the others have seen the cycle too.
    std::thread::sleep(Duration::from_secs(3));
}

/// Rank 0 waits for rank 2 (another host), which waits for rank 1, which
/// computes past rank 0's 2 s deadline: rank 0's timeout names the chain.
fn chain_body() {
    let comm = join();
    let mut b = [0u8; 3];
    match comm.rank() {
        0 => {
            let e = comm.recv(&mut b, 2, 5).unwrap_err();
            println!("rank 0: {e}");
            assert!(matches!(e, Error::Timeout { .. }), "{e}");
            // The answer comes once rank 1 wakes (4 s after its start):
            // rank 0's next 2 s wait may end just before it, as rank 2's
            // may (CI saw it). Waits end only by timeout, a few at most.
            let mut tries = 0;
            while let Err(e) = comm.recv(&mut b, 2, 5) {
                assert!(matches!(e, Error::Timeout { .. }) && tries < 5, "{e}");
                tries += 1;
            }
        }
        1 => {
            std::thread::sleep(Duration::from_secs(4));
            comm.send(b"ok!", 2, 3).unwrap();
        }
        _ => {
            // Rank 2's own waits time out every 2 s as well, and the end of
            // a wait clears its record on rank 0 until the next one has
            // lasted 100 ms: starting half a second late keeps that moment
            // away from rank 0's first deadline (CI saw the two coincide,
            // and rank 0's timeout name no chain).
            std::thread::sleep(Duration::from_millis(500));
            let mut tries = 0;
            while let Err(e) = comm.recv(&mut b, 1, 3) {
                assert!(matches!(e, Error::Timeout { .. }) && tries < 5, "{e}");
                tries += 1;
            }
            comm.send(b"ok!", 0, 5).unwrap();
        }
    }
    println!("rank {}: done", comm.rank());
}

/// Each rank in a blocking receive from the next (a cycle over two
/// hosts, reported only at the 4 s timeout here); meanwhile the test asks
/// for a report by signal.
fn report_body() {
    let comm = join();
    let (me, n) = (comm.rank(), comm.size());
    let mut b = [0u8; 1];
    let r = comm.recv(&mut b, (me + 1) % n, 3);
    assert!(matches!(r, Err(Error::Deadlock { .. })), "rank {me}: {r:?}");
    // Stay until the others have seen the cycle too.
    std::thread::sleep(Duration::from_secs(2));
    println!("rank {me}: done");
}

fn ring_body() {
    let comm = join();
    let n = comm.size();
    let (next, prev) = ((comm.rank() + 1) % n, (comm.rank() + n - 1) % n);
    for len in [8usize, 100_000] {
        let out = vec![comm.rank() as u8; len];
        let mut got = vec![0u8; len];
        comm.sendrecv(&out, next, 3, &mut got, prev, 3).unwrap();
        assert!(got.iter().all(|&b| b as usize == prev));
    }
    println!("rank {}: ring done", comm.rank());
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn a_rank_killed_on_one_host_is_lost_for_the_others_who_go_on() {
    let Some(net) = net(3) else { return };
    let o = tandem_run(&net, 4, &[0, 1, 2], "kill", unique_port(0));
    let out = text(&o);
    // tandem-run exits with the first failing rank's code: the victim's.
    assert_eq!(o.status.code(), Some(128 + libc::SIGKILL), "{out}");
    for r in 0..3 {
        assert!(
            out.contains(&format!("rank {r}: Ok(Err(PeerLost {{ rank: 3 }}))")),
            "rank {r}: {out}"
        );
        assert!(
            out.contains(&format!("rank {r}: survivors still talk")),
            "{out}"
        );
    }
}

#[test]
fn a_connection_shut_mid_stream_is_an_error_and_the_others_go_on() {
    let Some(net) = net(3) else { return };
    let o = tandem_run(&net, 3, &[0, 1, 2], "shut", unique_port(1));
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("rank 0: receive from rank 1 ended with Err(PeerLost"),
        "{out}"
    );
    for r in 0..3 {
        assert!(out.contains(&format!("rank {r}: done")), "{out}");
    }
}

fn job_env(
    net: &Net,
    rank: usize,
    size: usize,
    port: u16,
    secret: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("TANDEM_RANK", rank.to_string()),
        ("TANDEM_SIZE", size.to_string()),
        ("TANDEM_ROOT", format!("{}:{port}", net.hosts()[0].addr)),
        ("TANDEM_SECRET", secret.to_string()),
        ("TANDEM_JOB", format!("hosts-test-{port}")),
        ("TANDEM_BOOT_TIMEOUT", "20".to_string()),
    ]
}

#[test]
fn strangers_and_other_jobs_are_refused_and_the_job_completes() {
    let Some(net) = net(3) else { return };
    let port = unique_port(2);
    let data_port = unique_port(3);
    let mut env0 = job_env(&net, 0, 3, port, "right secret");
    env0.push(("TANDEM_DATA_PORT", data_port.to_string()));
    let r0 = rank_by_hand(&net, 0, "ring", &env0);
    let r1 = rank_by_hand(&net, 1, "ring", &job_env(&net, 1, 3, port, "right secret"));
    let a0 = net.hosts()[0].addr;
    // Wait until rank 0 listens at the root and for data.
    let probe = format!(
        "import socket,time\nfor p in ({port},{data_port}):\n  for i in range(500):\n    \
         try:\n      socket.create_connection(('{a0}',p),1).close(); break\n    \
         except OSError: time.sleep(0.01)\n"
    );
    assert!(stranger(&net, 2, &probe).status.success());
    // Garbage at both ports, and a scanner that connects and leaves.
    for p in [port, data_port] {
        let s = format!(
            "import socket\ns=socket.create_connection(('{a0}',{p}),2)\n\
             s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n' + bytes(range(256)))\ns.settimeout(3)\n\
             try:\n  s.recv(100)\nexcept OSError: pass\n\
             socket.create_connection(('{a0}',{p}),2).close()\n"
        );
        let o = stranger(&net, 2, &s);
        assert!(o.status.success(), "{}", text(&o));
    }
    // A rank of another job (another secret) claiming rank 2.
    let other = rank_by_hand(&net, 2, "ring", &job_env(&net, 2, 3, port, "wrong secret"))
        .wait_with_output()
        .unwrap();
    let other_text = text(&other);
    assert!(!other.status.success(), "{other_text}");
    assert!(other_text.contains("secret"), "{other_text}");
    // The real rank 2: the job completes.
    let r2 = rank_by_hand(&net, 2, "ring", &job_env(&net, 2, 3, port, "right secret"));
    let outs: Vec<Output> = [r0, r1, r2]
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(o));
        assert!(
            text(o).contains(&format!("rank {r}: ring done")),
            "{}",
            text(o)
        );
    }
    let zero = text(&outs[0]);
    assert!(zero.contains("bootstrap refused a connection"), "{zero}");
    assert!(zero.contains("refused a data connection"), "{zero}");
    assert!(zero.contains("not a tandem peer"), "{zero}");
}

#[test]
fn mismatched_parameters_name_the_parameter_both_values_and_both_ranks() {
    let Some(net) = net(2) else { return };
    let port = unique_port(4);
    let r0 = rank_by_hand(&net, 0, "ring", &job_env(&net, 0, 2, port, "s"));
    let mut e1 = job_env(&net, 1, 2, port, "s");
    e1.push(("TANDEM_EAGER_LIMIT", "4096".into()));
    let r1 = rank_by_hand(&net, 1, "ring", &e1);
    let o0 = r0.wait_with_output().unwrap();
    let o1 = r1.wait_with_output().unwrap();
    assert!(!o0.status.success() && !o1.status.success());
    let (t0, t1) = (text(&o0), text(&o1));
    assert!(
        t0.contains(
            "ranks disagree on eager_limit (TANDEM_EAGER_LIMIT): rank 0 has 8192, rank 1 has 4096"
        ),
        "{t0}"
    );
    assert!(
        t1.contains(
            "ranks disagree on eager_limit (TANDEM_EAGER_LIMIT): rank 1 has 4096, rank 0 has 8192"
        ),
        "{t1}"
    );
}

#[test]
fn a_multi_host_job_without_a_secret_refuses_to_start() {
    let Some(net) = net(1) else { return };
    let mut env = job_env(&net, 0, 2, unique_port(5), "");
    env.retain(|(k, _)| *k != "TANDEM_SECRET");
    let o = rank_by_hand(&net, 0, "ring", &env)
        .wait_with_output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("needs a per-job secret: set TANDEM_SECRET"),
        "{t}"
    );
}

#[test]
fn a_rank_that_never_comes_is_named() {
    let Some(net) = net(2) else { return };
    let port = unique_port(6);
    let mut e0 = job_env(&net, 0, 3, port, "s");
    e0.push(("TANDEM_BOOT_TIMEOUT", "2".into()));
    let mut e1 = job_env(&net, 1, 3, port, "s");
    e1.push(("TANDEM_BOOT_TIMEOUT", "2".into()));
    let r0 = rank_by_hand(&net, 0, "ring", &e0);
    let r1 = rank_by_hand(&net, 1, "ring", &e1);
    let t = Instant::now();
    let (o0, o1) = (
        r0.wait_with_output().unwrap(),
        r1.wait_with_output().unwrap(),
    );
    assert!(t.elapsed() < Duration::from_secs(15));
    for o in [&o0, &o1] {
        let t = text(o);
        assert!(!o.status.success(), "{t}");
        assert!(t.contains("rank(s) 2 never joined"), "{t}");
    }
}

/// Checks a recovery run: every survivor recovered (after `bound` at most
/// when the victim was cut off rather than killed) and summed right.
fn check_recovery(o: &Output, survivors: usize, cut: bool) {
    let out = text(o);
    for r in 0..survivors {
        assert!(
            out.contains(&format!("rank {r}: the survivors' sums are right")),
            "rank {r}: {out}"
        );
        let line = out
            .lines()
            .find(|l| l.contains(&format!("rank {r}: shrunk to {survivors} ranks")))
            .unwrap_or_else(|| panic!("rank {r}: {out}"));
        let secs: f64 = line
            .split(" s after")
            .next()
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        // From the loop's start: 20 rounds, detection (the bound, 1 s,
        // when cut; at once when killed), revoke and shrink.
        let limit = if cut { 4.0 } else { 3.0 };
        assert!(secs < limit, "rank {r} took {secs} s: {out}");
    }
    if cut {
        assert!(
            out.contains(&format!("rank {survivors}: cut off")),
            "the victim goes on alone: {out}"
        );
    }
}

const BOUND_ENV: (&str, &str) = ("TANDEM_FAILURE_TIMEOUT", "1");

#[test]
fn four_hosts_over_tcp_survive_a_kill_with_revoke_and_shrink() {
    let Some(net) = net(4) else { return };
    let o = tandem_run_with(
        &net,
        4,
        &[0, 1, 2, 3],
        "ulfm_kill",
        unique_port(8),
        &[BOUND_ENV],
    );
    assert_eq!(o.status.code(), Some(128 + libc::SIGKILL), "{}", text(&o));
    check_recovery(&o, 3, false);
}

#[test]
fn four_hosts_over_tcp_survive_a_cut_network_with_revoke_and_shrink() {
    let Some(net) = net(4) else { return };
    let o = tandem_run_with(
        &net,
        4,
        &[0, 1, 2, 3],
        "ulfm_cut",
        unique_port(9),
        &[BOUND_ENV],
    );
    assert!(o.status.success(), "{}", text(&o));
    check_recovery(&o, 3, true);
}

#[test]
fn shm_and_tcp_mixed_survive_a_kill_with_revoke_and_shrink() {
    let Some(net) = net(3) else { return };
    let o = tandem_run_with(
        &net,
        4,
        &[0, 1, 2],
        "ulfm_kill",
        unique_port(10),
        &[BOUND_ENV],
    );
    assert_eq!(o.status.code(), Some(128 + libc::SIGKILL), "{}", text(&o));
    check_recovery(&o, 3, false);
}

#[test]
fn four_hosts_over_soft_rdma_survive_a_kill_and_a_cut_network() {
    let Some(net) = net(4) else { return };
    let soft = ("TANDEM_TRANSPORT", "soft");
    let o = tandem_run_with(
        &net,
        4,
        &[0, 1, 2, 3],
        "ulfm_kill",
        unique_port(11),
        &[BOUND_ENV, soft],
    );
    assert_eq!(o.status.code(), Some(128 + libc::SIGKILL), "{}", text(&o));
    check_recovery(&o, 3, false);
    let o = tandem_run_with(
        &net,
        4,
        &[0, 1, 2, 3],
        "ulfm_cut",
        unique_port(12),
        &[BOUND_ENV, soft],
    );
    assert!(o.status.success(), "{}", text(&o));
    check_recovery(&o, 3, true);
}

/// Checks a cycle run: every rank reported the deadlock within 2 s,
/// naming the three operations in cycle order from itself.
fn check_cycle(o: &Output) {
    let out = text(o);
    assert!(o.status.success(), "{out}");
    for r in 0..3usize {
        let line = out
            .lines()
            .find(|l| l.contains(&format!("rank {r}: after ")))
            .unwrap_or_else(|| panic!("rank {r}: {out}"));
        let secs: f64 = line
            .split(" after ")
            .nth(1)
            .and_then(|l| l.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(secs < 2.0, "rank {r} reported after {secs} s: {line}");
        let (a, b) = ((r + 1) % 3, (r + 2) % 3);
        let cycle = format!("rank {r}: ssend to rank {a} tag 4 waited");
        let rest = format!(
            "while rank {a}: ssend to rank {b} tag 4, which waits for rank {b}: ssend to rank {r} tag 4"
        );
        assert!(line.contains(&cycle) && line.contains(&rest), "{line}");
    }
}

#[test]
fn a_cycle_through_two_hosts_is_a_deadlock_within_two_seconds() {
    let Some(net) = net(2) else { return };
    // Ranks 0 and 1 on the first host (shared memory), rank 2 on the
    // second (TCP), then the same over soft RDMA.
    let long = ("TANDEM_TIMEOUT", "60");
    let o = tandem_run_with(&net, 3, &[0, 1], "cycle", unique_port(13), &[long]);
    check_cycle(&o);
    let soft = ("TANDEM_TRANSPORT", "soft");
    let o = tandem_run_with(&net, 3, &[0, 1], "cycle", unique_port(14), &[long, soft]);
    check_cycle(&o);
}

#[test]
fn a_chain_of_waits_through_another_host_is_named_at_the_timeout() {
    let Some(net) = net(2) else { return };
    // Rank 0 on the first host waits for rank 2 on the second, which
    // waits for rank 1, back on the first.
    let o = tandem_run_with(
        &net,
        3,
        &[0, 1],
        "chain",
        unique_port(15),
        &[("TANDEM_TIMEOUT", "2")],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("rank 0: recv from rank 2") && l.contains("waits for"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("it waits for rank 2: recv from rank 1 tag 3"),
        "{line}"
    );
    for r in 0..3 {
        assert!(out.contains(&format!("rank {r}: done")), "{out}");
    }
}

#[test]
fn a_signal_to_tandem_run_prints_one_hang_report_for_the_job() {
    let Some(net) = net(2) else { return };
    let dir = std::env::temp_dir().join(format!("tandem-report-{}", std::process::id()));
    let dir_s = dir.to_string_lossy().into_owned();
    let child = tandem_run_cmd(
        &net,
        3,
        &[0, 1],
        "report",
        unique_port(16),
        &[
            ("TANDEM_TIMEOUT", "4"),
            ("TANDEM_DEADLOCK_AFTER", "0"),
            ("TANDEM_TRACE", &dir_s),
        ],
        &["--report-signal"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: a signal to our own child, which handles it.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGUSR1) };
    assert_eq!(sent, 0);
    let o = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    println!("{out}");
    assert!(out.contains("tandem-run: report asked for"), "{out}");
    // One report for the job, merged by tandem-run from the ranks' answers
    // (two hosts: rank 2's answer came over the remote shell).
    assert!(
        out.contains("tandem-run: hang report of the job: 3 of 3 asked ranks answered (3 ranks)"),
        "{out}"
    );
    assert!(
        !out.contains("]: hang report (asked by signal)"),
        "not merged:\n{out}"
    );
    for r in 0..3usize {
        let a = (r + 1) % 3;
        let want = [
            format!("\n  rank {r} waits in recv from rank {a} tag 3"),
            format!("\n    rank {r}:\n      "),
            format!("\n  rank {r} trace: "),
        ];
        for w in &want {
            assert!(
                out.contains(w.as_str()),
                "rank {r}: missing {w:?} in\n{out}"
            );
        }
    }
    // The cycle once, as the first rank that answered saw it.
    assert_eq!(out.matches("\n  cycle: rank ").count(), 1, "{out}");
    assert!(
        out.contains(
            "cycle: rank 0 waits for rank 1: recv from rank 2 tag 3, which waits for rank 2: \
             recv from rank 0 tag 3, which waits for rank 0"
        ),
        "{out}"
    );
    assert!(out.contains("\n  dead ranks: none"), "{out}");
    assert!(out.contains("\n  last events (newest last):"), "{out}");
}
