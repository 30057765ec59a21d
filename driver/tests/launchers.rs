//! Real launches: Debian's Open MPI `mpirun` and MPICH's hydra `mpiexec`
//! start a 4-rank job with no tandem-specific flags; Slurm's and
//! torchrun's conventions are tested by starting ranks with exactly the
//! variables those launchers set, on one host and across network
//! namespaces.

mod common;
use std::process::{Child, Command, Output, Stdio};
use tandem_driver::Comm;

const ROLE: &str = "TANDEM_TEST_ROLE";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn this_test() -> Vec<String> {
    [
        "rank_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The rank program: a ring of eager and rendezvous messages and an
/// exchange with every other rank; prints one line per rank when done.
#[test]
fn rank_entry() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let comm = Comm::from_env().unwrap_or_else(|e| panic!("joining failed: {e}"));
    let (r, n) = (comm.rank(), comm.size());
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    for len in [0usize, 8, 5000, 300_000] {
        let out = common::pattern(len, (r * 1000 + len) as u64);
        let mut got = vec![0u8; len];
        let st = comm.sendrecv(&out, next, 1, &mut got, prev, 1).unwrap();
        assert_eq!(st.len, len);
        assert_eq!(got, common::pattern(len, (prev * 1000 + len) as u64));
    }
    let mine = [r as u8; 64];
    let mut theirs = vec![[0u8; 64]; n];
    comm.group(|g| {
        for p in 0..n {
            g.send(&mine, p, 2)?;
        }
        for (p, b) in theirs.iter_mut().enumerate() {
            g.recv(b, p, 2)?;
        }
        Ok(())
    })
    .unwrap();
    for (p, b) in theirs.iter().enumerate() {
        assert!(b.iter().all(|&x| x as usize == p));
    }
    println!("rank {r} of {n}: ok");
}

fn assert_all_ranks_ok(o: &Output, n: usize, what: &str) {
    let t = text(o);
    assert!(o.status.success(), "{what}: {}\n{t}", o.status);
    for r in 0..n {
        assert!(
            t.contains(&format!("rank {r} of {n}: ok")),
            "{what}: rank {r}\n{t}"
        );
    }
}

fn launcher(program: &str) -> Command {
    if Command::new(program).arg("--version").output().is_err() {
        panic!(
            "{program} is not installed: apt-get install openmpi-bin mpich (scripts/test-all.sh \
             does this when run as root)"
        );
    }
    let mut c = Command::new(program);
    c.env(ROLE, "1")
        .env("TANDEM_SPIN", "2000")
        .env("TANDEM_TIMEOUT", "30")
        // Open MPI refuses to run as root without these; harmless elsewhere.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Keep this machine's network out of Open MPI's own wire-up.
        .env("OMPI_MCA_btl", "self")
        .env("OMPI_MCA_oob_tcp_if_include", "lo");
    c
}

#[test]
fn open_mpi_mpirun_starts_a_four_rank_job() {
    let o = launcher("mpirun.openmpi")
        .args(["--oversubscribe", "-np", "4"])
        .arg(std::env::current_exe().unwrap())
        .args(this_test())
        .output()
        .unwrap();
    assert_all_ranks_ok(&o, 4, "mpirun.openmpi -np 4");
}

#[test]
fn mpich_hydra_mpiexec_starts_a_four_rank_job() {
    let o = launcher("mpiexec.hydra")
        .args(["-n", "4"])
        .arg(std::env::current_exe().unwrap())
        .args(this_test())
        .output()
        .unwrap();
    assert_all_ranks_ok(&o, 4, "mpiexec.hydra -n 4");
}

#[test]
fn hydra_with_tcp_forced_between_local_ranks() {
    let o = launcher("mpiexec.hydra")
        .args(["-n", "3"])
        .arg(std::env::current_exe().unwrap())
        .args(this_test())
        .env("TANDEM_TRANSPORT", "tcp")
        .output()
        .unwrap();
    assert_all_ranks_ok(&o, 3, "TANDEM_TRANSPORT=tcp mpiexec.hydra -n 3");
}

/// Starts `n` ranks with the variables `vars(rank)` only (no TANDEM_RANK),
/// in host `host(rank)` of `net` if given.
fn start_ranks(
    n: usize,
    net: Option<&common::netns::Net>,
    host: impl Fn(usize) -> usize,
    vars: impl Fn(usize) -> Vec<(String, String)>,
) -> Output {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<Child> = (0..n)
        .map(|r| {
            let mut c = match net {
                Some(net) => net.command(host(r), &exe),
                None => Command::new(&exe),
            };
            c.args(this_test())
                .env(ROLE, "1")
                .env("TANDEM_SPIN", "2000")
                .env("TANDEM_TIMEOUT", "30")
                .env("TANDEM_BOOT_TIMEOUT", "30")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in vars(r) {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let failed = outs.iter().find(|o| !o.status.success());
    let status = failed.map_or(outs[0].status, |o| o.status);
    Output {
        status,
        stdout: outs.iter().flat_map(|o| o.stdout.clone()).collect(),
        stderr: outs.iter().flat_map(|o| o.stderr.clone()).collect(),
    }
}

fn v(k: &str, val: impl ToString) -> (String, String) {
    (k.to_string(), val.to_string())
}

fn job_tag() -> String {
    format!("{}-{}", std::process::id(), common::pattern(4, 7)[0])
}

#[test]
fn slurm_variables_on_one_node() {
    let job = job_tag();
    let o = start_ranks(
        4,
        None,
        |_| 0,
        |r| {
            vec![
                v("SLURM_PROCID", r),
                v("SLURM_NTASKS", 4),
                v("SLURM_LOCALID", r),
                v("SLURM_NNODES", 1),
                v("SLURM_JOB_ID", format!("9{job}")),
                v("SLURM_STEP_ID", 0),
            ]
        },
    );
    assert_all_ranks_ok(&o, 4, "Slurm, one node");
}

#[test]
fn torchrun_variables_on_one_host() {
    let job = job_tag();
    let o = start_ranks(
        4,
        None,
        |_| 0,
        |r| {
            vec![
                v("RANK", r),
                v("WORLD_SIZE", 4),
                v("LOCAL_RANK", r),
                v("LOCAL_WORLD_SIZE", 4),
                v("MASTER_ADDR", "127.0.0.1"),
                v("MASTER_PORT", 29500),
                v("TORCHELASTIC_RUN_ID", format!("run{job}")),
            ]
        },
    );
    assert_all_ranks_ok(&o, 4, "torchrun, one host");
}

fn net(n: usize) -> Option<common::netns::Net> {
    common::netns::for_test(n)
}

#[test]
fn slurm_variables_on_two_nodes_with_a_root() {
    let Some(net) = net(2) else { return };
    let root = format!(
        "{}:{}",
        net.hosts()[0].addr,
        // Below the ephemeral range, in this file's own band.
        28000 + std::process::id() % 2000
    );
    let o = start_ranks(
        4,
        Some(&net),
        |r| r / 2,
        |r| {
            vec![
                v("SLURM_PROCID", r),
                v("SLURM_NTASKS", 4),
                v("SLURM_LOCALID", r % 2),
                v("SLURM_NNODES", 2),
                v("SLURM_JOB_ID", 77),
                v("SLURM_STEP_ID", 1),
                v("TANDEM_ROOT", &root),
                v("TANDEM_SECRET", "slurm test secret"),
            ]
        },
    );
    assert_all_ranks_ok(&o, 4, "Slurm, two nodes");
}

#[test]
fn torchrun_variables_on_two_hosts_leave_the_store_port_alone() {
    let Some(net) = net(2) else { return };
    let a0 = net.hosts()[0].addr;
    let port = 30000 + (std::process::id() % 2000) as u16;
    // torchrun's own store holds MASTER_PORT on the master host.
    let mut store = net
        .command(0, "python3")
        .args([
            "-c",
            &format!(
                "import socket,time\ns=socket.socket()\ns.bind(('{a0}',{port}))\ns.listen()\n\
                 print('store up', flush=True)\ntime.sleep(60)"
            ),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(store.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "store up");
    let o = start_ranks(
        4,
        Some(&net),
        |r| r / 2,
        |r| {
            vec![
                v("RANK", r),
                v("WORLD_SIZE", 4),
                v("LOCAL_RANK", r % 2),
                v("LOCAL_WORLD_SIZE", 2),
                v("GROUP_RANK", r / 2),
                v("MASTER_ADDR", a0),
                v("MASTER_PORT", port),
                v("TORCHELASTIC_RUN_ID", "torch-test"),
                v("TANDEM_SECRET", "torch test secret"),
            ]
        },
    );
    let _ = store.kill();
    let _ = store.wait();
    assert_all_ranks_ok(&o, 4, "torchrun, two hosts");
}
