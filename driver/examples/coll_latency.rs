//! Small-collective latency between two local rank processes, beside the
//! point-to-point exchange it is built on: `cargo run --release -p
//! tandem-driver --example coll_latency -- 200000`.

use std::time::Instant;
use tandem_driver::{Comm, Config, ReduceOp};

fn main() -> Result<(), tandem_driver::Error> {
    let iters: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let rank = std::env::var("TANDEM_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0usize);
    let cfg = Config::from_env()?.pin_core(Some(rank % 2));
    let comm = Comm::local_with(2, cfg)?;
    let peer = 1 - comm.rank();
    let elems: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let mut out = vec![0f32; elems];
    let mine = vec![1f32; elems];
    let mut got = [0u8; 8];
    let time = |f: &mut dyn FnMut() -> tandem_driver::Result<()>| -> tandem_driver::Result<f64> {
        for _ in 0..iters / 10 {
            f()?;
        }
        comm.barrier()?;
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        Ok(t.elapsed().as_nanos() as f64 / iters as f64)
    };
    if std::env::var_os("ONLY_BROADCAST").is_some() {
        let bc = time(&mut || comm.broadcast(&mut out, 0))?;
        println!("{} B broadcast {bc:.0} ns", elems * 4);
        return comm.finish();
    }
    let ar = time(&mut || comm.allreduce(&mine, &mut out, ReduceOp::Sum))?;
    if std::env::var_os("ONLY_ALLREDUCE").is_some() {
        println!("{} B allreduce {ar:.0} ns", elems * 4);
        return comm.finish();
    }
    let sr = time(&mut || {
        comm.sendrecv(&[7u8; 8], peer, 0, &mut got, peer, 0)
            .map(|_| ())
    })?;
    let bar = time(&mut || comm.barrier())?;
    let mut b2 = [0u8; 8];
    let pp = time(&mut || {
        comm.scope(|s| {
            if comm.rank() == 0 {
                s.isend(&[1u8; 8], peer, 1)?.wait()?;
                s.irecv(&mut b2, peer, 1)?.wait().map(|_| ())
            } else {
                s.irecv(&mut b2, peer, 1)?.wait()?;
                s.isend(&[1u8; 8], peer, 1)?.wait().map(|_| ())
            }
        })?
    })?;
    let ppb = time(&mut || {
        if comm.rank() == 0 {
            comm.send(&[1u8; 8], peer, 1)?;
            comm.recv(&mut b2, peer, 1).map(|_| ())
        } else {
            comm.recv(&mut b2, peer, 1)?;
            comm.send(&[1u8; 8], peer, 1)
        }
    })?;
    if comm.rank() == 0 {
        println!("round trip through scoped isend/irecv {pp:.0} ns, through send/recv {ppb:.0} ns");
    }
    if comm.rank() == 0 {
        println!("8 B allreduce {ar:.0} ns, 8 B sendrecv {sr:.0} ns, barrier {bar:.0} ns per call");
    }
    comm.finish()
}
