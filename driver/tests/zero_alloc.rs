//! Steady-state messaging allocates nothing: a counting global allocator
//! in each rank process watches 10,000 ping-pongs after warm-up, eager and
//! both rendezvous paths, blocking and scoped non-blocking, over shared
//! memory and over TCP.
//!
//! The count is per thread: it covers everything the messaging thread does
//! (tandem runs no thread of its own here: no proxy), and leaves out the
//! test harness's own main thread, which may allocate at any moment.

mod common;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tandem_core::sync::{AtomicU64, Ordering};
use tandem_driver::{Comm, Request};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations made by this thread (const-initialised: reading it
    /// inside the allocator never allocates).
    static MINE: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    let _ = MINE.try_with(|c| c.set(c.get() + 1));
}

fn mine() -> u64 {
    MINE.with(Cell::get)
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn pingpong(comm: &Comm, buf: &mut [u8], iters: usize, scoped: bool) {
    let peer = 1 - comm.rank();
    for _ in 0..iters {
        if scoped && buf.len() % 2 == 1 {
            // Requests dropped unwaited: the scope's end collects them.
            let (a, b) = buf.split_at_mut(buf.len() / 2);
            comm.scope(|s| {
                let _ = s.irecv(b, peer, 3).unwrap();
                let _ = s.isend(a, peer, 3).unwrap();
            })
            .unwrap();
        } else if scoped {
            let (a, b) = buf.split_at_mut(buf.len() / 2);
            comm.scope(|s| {
                let r = s.irecv(b, peer, 2).unwrap();
                let w = s.isend(a, peer, 2).unwrap();
                Request::wait_all([r, w]).unwrap();
            })
            .unwrap();
        } else if comm.rank() == 0 {
            comm.send(buf, peer, 1).unwrap();
            comm.recv(buf, peer, 1).unwrap();
        } else {
            comm.recv(buf, peer, 1).unwrap();
            comm.send(buf, peer, 1).unwrap();
        }
    }
}

#[test]
fn no_allocations_per_message_after_warm_up() {
    let name = "no_allocations_per_message_after_warm_up";
    if !common::is_rank() {
        // Every transport: shared memory with rendezvous streamed (the
        // default) and pulled single-copy, TCP, and RDMA over the soft NIC
        // with rendezvous written (CTS) and read (RTS).
        for (transport, cma, rndv) in [
            ("shm", "0", "write"),
            ("shm", "1", "write"),
            ("tcp", "0", "write"),
            ("soft", "0", "write"),
            ("soft", "0", "read"),
        ] {
            let o = common::launcher(2, name)
                .env("TANDEM_CMA", cma)
                .env("TANDEM_TRANSPORT", transport)
                .env("TANDEM_RDMA_RNDV", rndv)
                .run()
                .unwrap();
            assert_eq!(
                o.code(),
                0,
                "TANDEM_TRANSPORT={transport} TANDEM_CMA={cma} TANDEM_RDMA_RNDV={rndv}: exit codes {:?}",
                o.codes
            );
        }
        return;
    }
    common::ranks(2, name, |comm| {
        // The counter is live: an allocation shows up.
        let before = ALLOCS.load(Ordering::Relaxed);
        drop(std::hint::black_box(vec![0u8; 16]));
        assert!(
            ALLOCS.load(Ordering::Relaxed) > before,
            "counting allocator not installed"
        );
        // Eager (8 B, 16 B) and rendezvous (16 KiB: always streamed; 64 KiB
        // and 128 KiB: pulled single-copy when TANDEM_CMA=1).
        for (size, scoped) in [
            (8usize, false),
            (16 << 10, false),
            (64 << 10, false),
            (16, true),
            (128 << 10, true),
            // Odd sizes: the requests are dropped, not waited (see pingpong).
            (17, true),
            ((128 << 10) + 1, true),
        ] {
            let mut buf = vec![1u8; size];
            pingpong(&comm, &mut buf, 100, scoped);
            // The soft NIC wakes a thread per packet (about 0.2 ms a round
            // trip here): fewer rounds, still far more than any per-message
            // allocation could hide in.
            let iters = match std::env::var("TANDEM_TRANSPORT").as_deref() {
                Ok("soft") => 1_000,
                _ => 10_000,
            };
            let (before, all_before) = (mine(), ALLOCS.load(Ordering::Relaxed));
            pingpong(&comm, &mut buf, iters, scoped);
            let n = mine() - before;
            let others = ALLOCS.load(Ordering::Relaxed) - all_before - n;
            if others > 0 {
                println!(
                    "rank {}: {others} allocations by other threads (the test harness)",
                    comm.rank()
                );
            }
            println!(
                "rank {} ({}) size {size} scoped {scoped}: {n} allocations in {iters} round trips",
                comm.rank(),
                std::env::var("TANDEM_TRANSPORT").unwrap_or_default()
            );
            assert_eq!(n, 0, "size {size} scoped {scoped}: {n} heap allocations");
        }
    });
}

/// Runs test `name` as a job of two rank processes over shared memory,
/// then over TCP; fails if a rank fails.
fn on_shm_and_tcp(name: &str) {
    for transport in ["shm", "tcp"] {
        let o = common::launcher(2, name)
            .env("TANDEM_TRANSPORT", transport)
            .run()
            .unwrap();
        assert_eq!(
            o.code(),
            0,
            "TANDEM_TRANSPORT={transport}: exit codes {:?}",
            o.codes
        );
    }
}

/// One of each collective, blocking, and a pair of non-blocking ones in a
/// scope; `count` f32 elements per rank block.
fn collectives(comm: &Comm, a: &mut [f32], b: &mut [f32], n: usize) {
    use tandem_driver::ReduceOp::{Max, Sum};
    let m = a.len() / n;
    comm.allreduce_in_place(a, Sum).unwrap();
    comm.allreduce(&a[..m], &mut b[..m], Max).unwrap();
    comm.reduce_in_place(a, Sum, 1).unwrap();
    comm.broadcast(a, 0).unwrap();
    comm.allgather(&a[..m], b).unwrap();
    comm.reduce_scatter(a, &mut b[..m], Sum).unwrap();
    comm.alltoall(a, b).unwrap();
    comm.barrier().unwrap();
    comm.scope(|s| {
        let (x, y) = a.split_at_mut(m);
        let r1 = s.iallreduce_in_place(x, Sum).unwrap();
        let r2 = s.ibroadcast(y, 1).unwrap();
        r2.wait().unwrap();
        drop(r1); // collected by the scope
        let _ = s.ibarrier().unwrap();
    })
    .unwrap();
}

#[test]
fn no_allocations_per_collective_after_warm_up() {
    let name = "no_allocations_per_collective_after_warm_up";
    if !common::is_rank() {
        return on_shm_and_tcp(name);
    }
    common::ranks(2, name, |comm| {
        let n = comm.size();
        // Both algorithms: small (latency-optimal) and pipelined (ring,
        // several chunks per lane).
        for count in [2usize, 64, 1 << 20] {
            let mut a = vec![1f32; count];
            let mut b = vec![0f32; count];
            for _ in 0..5 {
                collectives(&comm, &mut a, &mut b, n);
            }
            let iters = if count > 1 << 16 { 20 } else { 500 };
            let before = mine();
            for _ in 0..iters {
                a.fill(1.0);
                collectives(&comm, &mut a, &mut b, n);
            }
            let got = mine() - before;
            println!(
                "rank {} ({}) {count} elements: {got} allocations in {iters} rounds of 11 collectives",
                comm.rank(),
                std::env::var("TANDEM_TRANSPORT").unwrap_or_default()
            );
            assert_eq!(got, 0, "{count} elements: {got} heap allocations");
        }
    });
}

/// `iters` round trips through persistent requests bound once: blocking
/// `send` / `recv` when `blocking`, `start` then `wait` otherwise.
fn persistent_pingpong(comm: &Comm, out: &mut [u8], back: &mut [u8], iters: usize, blocking: bool) {
    let peer = 1 - comm.rank();
    comm.scope(|s| {
        let mut tx = s.send_init(out, peer, 4).unwrap();
        let mut rx = s.recv_init(back, peer, 4).unwrap();
        let send = |tx: &mut tandem_driver::PersistentSend| {
            if blocking {
                tx.send().unwrap();
            } else {
                tx.start().unwrap();
                tx.wait().unwrap();
            }
        };
        let recv = |rx: &mut tandem_driver::PersistentRecv| {
            if blocking {
                rx.recv().unwrap();
            } else {
                rx.start().unwrap();
                rx.wait().unwrap();
            }
        };
        for _ in 0..iters {
            if comm.rank() == 0 {
                send(&mut tx);
                recv(&mut rx);
            } else {
                recv(&mut rx);
                send(&mut tx);
            }
        }
    })
    .unwrap();
}

#[test]
fn no_allocations_per_persistent_message_after_warm_up() {
    let name = "no_allocations_per_persistent_message_after_warm_up";
    if !common::is_rank() {
        return on_shm_and_tcp(name);
    }
    common::ranks(2, name, |comm| {
        // One line, several lines, rendezvous.
        for size in [8usize, 4096, 64 << 10] {
            let (mut out, mut back) = (vec![1u8; size], vec![0u8; size]);
            for blocking in [true, false] {
                persistent_pingpong(&comm, &mut out, &mut back, 100, blocking);
                let before = mine();
                persistent_pingpong(&comm, &mut out, &mut back, 5_000, blocking);
                let got = mine() - before;
                println!(
                    "rank {} ({}) size {size} blocking {blocking}: {got} allocations in 5000 round trips",
                    comm.rank(),
                    std::env::var("TANDEM_TRANSPORT").unwrap_or_default()
                );
                assert_eq!(
                    got, 0,
                    "size {size} blocking {blocking}: {got} heap allocations"
                );
            }
        }
    });
}
