//! What Linux cross-memory attach costs on this machine, outside tandem: a
//! forked child holds a 64 MiB buffer, the parent reads sizes from 1 KiB to
//! 64 MiB of it with `process_vm_readv` in a loop and prints the time per
//! call and the bandwidth (BENCHMARKS.md, the `TANDEM_CMA` decision).
//!
//! `cargo run --release -p tandem-driver --example cma_probe`

use std::time::{Duration, Instant};

const BUF: usize = 64 << 20;

fn main() {
    let src = vec![7u8; BUF];
    // SAFETY: the child only sleeps and exits; it touches no state shared
    // with the parent's other threads (there are none).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        eprintln!("fork failed: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if pid == 0 {
        // The child keeps `src` mapped until the parent kills it.
        std::thread::sleep(Duration::from_secs(60));
        drop(src);
        std::process::exit(0);
    }
    let mut dst = vec![1u8; BUF];
    for len in [1usize << 10, 64 << 10, 1 << 20, 64 << 20] {
        let iters = if len >= 1 << 20 { 20 } else { 2000 };
        let t = Instant::now();
        for _ in 0..iters {
            let local = libc::iovec {
                iov_base: dst.as_mut_ptr().cast(),
                iov_len: len,
            };
            let remote = libc::iovec {
                iov_base: src.as_ptr() as *mut libc::c_void,
                iov_len: len,
            };
            // SAFETY: `local` is our own buffer of that length; the kernel
            // checks `remote` against the child's address space.
            let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
            if n != len as isize {
                eprintln!("process_vm_readv: {}", std::io::Error::last_os_error());
                break;
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!(
            "process_vm_readv {len:>9} B: {us:>9.2} us per call, {:.2} GB/s",
            len as f64 / us / 1e3
        );
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}
