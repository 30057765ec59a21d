//! The protocol engine's own cost on the blocking fast path: one rank sends
//! 8 bytes to itself and receives them, in a tight loop, so everything stays
//! in the L1 cache and no other core is involved. What it prints is pure
//! engine work per send + receive (BENCHMARKS.md, "Small messages").
//! With `persistent` as the second argument, through a persistent send and
//! a persistent receive bound once. With `plain` as the second argument, a
//! third sets the size of the message sent and received (default 8 bytes):
//! e.g. 32 bytes, a message of two lines, shows that path's cost. With
//! `runtime`, 8 bytes with the rank, tag and length hidden from the
//! compiler (as a persistent request's are, and every MPI call's). Settings
//! from the environment (`TANDEM_RECORDER=0`: the flight recorder off).
//!
//! `cargo run --release -p tandem-driver --example engine_overhead -- 2000000 [persistent | runtime | plain [bytes]]`

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

/// The 8-byte loop of `main` with the rank, the tag and the length as
/// values the compiler cannot see, as in a program that computes them and
/// in every call through the MPI library: what a persistent request, which
/// binds them once, is to be compared with.
#[inline(never)]
fn runtime(comm: &Comm, n: u64) -> Result<(), tandem_driver::Error> {
    let (dst, tag, len) = std::hint::black_box((0usize, 0u32, 8usize));
    let (mut msg, mut back) = ([0u8; 8], [0u8; 8]);
    for i in 0..n {
        msg.copy_from_slice(&i.to_le_bytes());
        comm.send(&msg[..len], dst, tag)?;
        comm.recv(&mut back[..len], dst, tag)?;
    }
    Ok(())
}

fn main() -> Result<(), tandem_driver::Error> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let persistent = std::env::args().nth(2).as_deref() == Some("persistent");
    let computed = std::env::args().nth(2).as_deref() == Some("runtime");
    let size: usize = match std::env::args().nth(3) {
        Some(s) if !persistent => s.parse().unwrap_or(8),
        _ => 8,
    };
    let cfg = Config::from_env()?;
    let mut out = Comm::threads(1, &Layout::default(), cfg, |comm| {
        let mut back = [0u8; 8];
        let t = std::time::Instant::now();
        if computed {
            runtime(&comm, n)?;
        } else if size != 8 && !persistent {
            sized(&comm, n, size)?;
        } else if persistent {
            // Rank, tag and length hidden from the compiler, as `runtime`'s
            // are: a program's requests are bound to values it computed.
            let (dst, tag, len) = std::hint::black_box((0usize, 0u32, 8usize));
            let mut msg = [0u8; 8];
            comm.scope(|s| {
                let mut tx = s.send_init(&mut msg[..len], dst, tag)?;
                let mut rx = s.recv_init(&mut back[..len], dst, tag)?;
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
