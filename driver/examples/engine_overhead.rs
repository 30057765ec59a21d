//! The protocol engine's own cost on the blocking fast path: one rank sends
//! 8 bytes to itself and receives them, in a tight loop, so everything stays
//! in the L1 cache and no other core is involved. What it prints is pure
//! engine work per send + receive (BENCHMARKS.md, "Small messages").
//! With `persistent` as the second argument, through a persistent send and
//! a persistent receive bound once. With `plain` as the second argument, a
//! third sets the size of the message sent and received (default 8 bytes):
//! e.g. 32 bytes, a message of two lines, shows that path's cost. Settings
//! from the environment (`TANDEM_RECORDER=0`: the flight recorder off).
//!
//! `cargo run --release -p tandem-driver --example engine_overhead -- 2000000 [persistent | plain [bytes]]`

use tandem_driver::{Comm, Config, Layout};

/// The send + recv loop of `main` for a message of `size` bytes, from heap
/// buffers: apart, so that the 8-byte loops keep the code the figures in
/// BENCHMARKS.md came from (persistent requests too would change how those
/// are inlined).
#[inline(never)]
fn sized(comm: &Comm, n: u64, size: usize) -> Result<(), tandem_driver::Error> {
    let (msg, mut back) = (vec![0u8; size], vec![0u8; size]);
    for _ in 0..n {
        comm.send(&msg, 0, 0)?;
        comm.recv(&mut back, 0, 0)?;
    }
    Ok(())
}

fn main() -> Result<(), tandem_driver::Error> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let persistent = std::env::args().nth(2).as_deref() == Some("persistent");
    let size: usize = match std::env::args().nth(3) {
        Some(s) if !persistent => s.parse().unwrap_or(8),
        _ => 8,
    };
    let cfg = Config::from_env()?;
    let mut out = Comm::threads(1, &Layout::default(), cfg, |comm| {
        let mut back = [0u8; 8];
        let t = std::time::Instant::now();
        if size != 8 && !persistent {
            sized(&comm, n, size)?;
        } else if persistent {
            let mut msg = [0u8; 8];
            comm.scope(|s| {
                let mut tx = s.send_init(&mut msg, 0, 0)?;
                let mut rx = s.recv_init(&mut back, 0, 0)?;
                for _ in 0..n {
                    tx.send()?;
                    rx.recv()?;
                }
                Ok::<_, tandem_driver::Error>(())
            })??;
        } else {
            for i in 0..n {
                comm.send(&i.to_le_bytes(), 0, 0)?;
                comm.recv(&mut back, 0, 0)?;
                debug_assert_eq!(u64::from_le_bytes(back), i);
            }
        }
        Ok(t.elapsed().as_nanos() as f64 / n as f64)
    });
    let ns = out.remove(0)?;
    let how = if persistent {
        " (persistent requests)"
    } else {
        ""
    };
    println!("{n} send + recv of {size} bytes to self{how}: {ns:.1} ns each");
    Ok(())
}
