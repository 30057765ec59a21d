//! The smallest complete tandem program: two ranks on this machine bounce
//! an 8-byte message and print the half round trip.
//!
//! `cargo run --release -p tandem-driver --example pingpong -- 100000`

use tandem_driver::Comm;

fn main() -> Result<(), tandem_driver::Error> {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    // Starts a second copy of this program; each process gets its own rank.
    let comm = Comm::local(2)?;
    let peer = 1 - comm.rank();
    let mut buf = [0u8; 8];
    let start = std::time::Instant::now();
    for i in 0..iters {
        if comm.rank() == 0 {
            buf = i.to_le_bytes();
            comm.send(&buf, peer, 0)?;
            comm.recv(&mut buf, peer, 0)?;
            assert_eq!(u64::from_le_bytes(buf), i);
        } else {
            comm.recv(&mut buf, peer, 0)?;
            comm.send(&buf, peer, 0)?;
        }
    }
    if comm.rank() == 0 {
        let ns = start.elapsed().as_nanos() as f64 / iters as f64 / 2.0;
        println!("{iters} round trips of 8 bytes: half round trip {ns:.1} ns");
    }
    // Rank 0 waits for rank 1 and reports if it failed.
    comm.finish()
}
