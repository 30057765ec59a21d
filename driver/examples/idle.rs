//! Two barriers with `secs` (the first argument) of idleness between:
//! what an idle job sends (heartbeats), measured from outside with the
//! interface counters (BENCHMARKS.md, "Failure detection").
//!
//! `TANDEM_TRANSPORT=tcp target/release/tandem-run -n 2 target/release/examples/idle 30`

fn main() -> Result<(), tandem_driver::Error> {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let comm = tandem_driver::Comm::from_env()?;
    comm.barrier()?;
    std::thread::sleep(std::time::Duration::from_secs(secs));
    comm.barrier()?;
    Ok(())
}
