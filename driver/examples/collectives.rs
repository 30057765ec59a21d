//! Collectives between local ranks: `cargo run --release -p tandem-driver
//! --example collectives -- 4` starts 4 rank processes (default 2), each
//! of which runs a few collectives and checks the results.

use tandem_driver::{Comm, ReduceOp};

fn main() -> Result<(), tandem_driver::Error> {
    let n = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let comm = Comm::local(n)?;
    let (r, n) = (comm.rank(), comm.size());

    let grads = vec![1.0f32; 1 << 20];
    let mut sum = vec![0.0f32; 1 << 20];
    comm.allreduce(&grads, &mut sum, ReduceOp::Sum)?; // every rank: the sum
    assert!(sum.iter().all(|x| *x == n as f32));

    let mut all = vec![0u64; n];
    comm.allgather(&[r as u64], &mut all)?; // [0, 1, .., n-1]
    assert!(all.iter().enumerate().all(|(i, x)| *x == i as u64));

    // Non-blocking collectives live in the same scopes as isend/irecv and
    // complete in any order of waiting; every wait advances them all.
    let mut big = vec![r as f64; 1 << 16];
    let mut small = [r as i32];
    comm.scope(|s| {
        let a = s.iallreduce_in_place(&mut big, ReduceOp::Max)?;
        let b = s.iallreduce_in_place(&mut small, ReduceOp::Sum)?;
        b.wait()?;
        a.wait()
    })??;
    assert_eq!(small[0], (0..n as i32).sum::<i32>());
    assert!(big.iter().all(|x| *x == (n - 1) as f64));

    comm.barrier()?;
    if r == 0 {
        println!("collectives on {n} ranks: ok");
    }
    comm.finish()
}
