//! `tandem-run` itself: rank-prefixed output, the first failing exit code,
//! and the other ranks stopped once one fails.

mod common;
use std::process::Command;
use std::time::{Duration, Instant};
use tandem_driver::Comm;

fn tandem_run() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem-run"))
}

fn this_test(name: &str) -> Vec<String> {
    let exe = std::env::current_exe()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    vec![
        exe,
        name.into(),
        "--exact".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
        "-q".into(),
    ]
}

#[test]
fn ranks_talk_and_output_is_prefixed() {
    if common::is_rank() {
        let comm = Comm::from_env().unwrap();
        let (me, n) = (comm.rank(), comm.size());
        comm.send(&[me as u8], (me + 1) % n, 0).unwrap();
        let mut b = [0u8; 1];
        comm.recv(&mut b, (me + n - 1) % n, 0).unwrap();
        println!("rank {me} of {n} got token from {}", b[0]);
        return;
    }
    let out = tandem_run()
        .arg("-n")
        .arg("3")
        .arg("--")
        .args(this_test("ranks_talk_and_output_is_prefixed"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tandem-run failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..3 {
        let want = format!("[{r}] rank {r} of 3 got token from {}", (r + 2) % 3);
        assert!(
            stdout.lines().any(|l| l == want),
            "missing {want:?} in:\n{stdout}"
        );
    }
}

#[test]
fn first_failing_exit_code_is_returned_and_the_rest_are_stopped() {
    if common::is_rank() {
        if std::env::var("TANDEM_RANK").unwrap() == "1" {
            std::process::exit(7);
        }
        // Rank 0 would wait forever: the launcher must stop it.
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let t = Instant::now();
    let st = tandem_run()
        .env("TANDEM_KILL_GRACE", "0.5")
        .args(["-n", "2", "--"])
        .args(this_test(
            "first_failing_exit_code_is_returned_and_the_rest_are_stopped",
        ))
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "the surviving rank was not stopped"
    );
}

#[test]
fn usage_errors_are_clear() {
    if common::is_rank() {
        return;
    }
    let out = tandem_run().arg("-n").arg("zero").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-n needs a positive number"));
    let out = tandem_run().args(["-n", "2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing program"));
    let out = tandem_run()
        .args(["-n", "1", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("starting rank 0"));
}
