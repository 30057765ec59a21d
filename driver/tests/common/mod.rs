//! Multi-process test harness: a test re-runs its own test binary as the
//! ranks of a real job (separate processes, real shared memory).
#![allow(dead_code)]

pub mod netns;

use tandem_driver::launch::{Launcher, Outcome};
use tandem_driver::Comm;

/// Whether this process is a rank started by [`launcher`].
pub fn is_rank() -> bool {
    std::env::var_os("TANDEM_RANK").is_some()
}

/// A launcher that re-runs exactly test `name` of this binary as `n` ranks.
pub fn launcher(n: usize, name: &str) -> Launcher {
    let exe = std::env::current_exe().expect("test binary path");
    // Tests run several jobs at once on few cores: spin briefly, then yield.
    Launcher::new(n, exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(
            "TANDEM_SPIN",
            std::env::var("TANDEM_SPIN").unwrap_or_else(|_| "2000".into()),
        )
}

/// Runs `f` on each of `n` rank processes; fails the test if any rank
/// fails. In a rank process it just runs `f` with the job's communicator.
pub fn ranks(n: usize, name: &str, f: impl FnOnce(Comm)) {
    if is_rank() {
        let comm = Comm::from_env().expect("join the job");
        f(comm);
        return;
    }
    let o: Outcome = launcher(n, name).run().expect("launch");
    assert_eq!(o.code(), 0, "a rank failed: exit codes {:?}", o.codes);
}

/// Deterministic test bytes for message `seed` of length `len`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
