//! Eager cells cut into pieces of different sizes, side by side in one
//! process: for each piece size on the command line, a pair of
//! shared-memory links between two threads pinned to two cores, and a
//! ping-pong of eager payloads (1, 2, 4 and 8 KiB) through their cells,
//! then a stream of them one way (the sender as far ahead as the cells
//! let it, as in a window of non-blocking sends). The piece sizes take
//! turns round by round, so the machine's drift and the vCPUs' placement
//! hit all of them alike; it prints, per piece size and payload, the
//! median and the best of the rounds' half round trips, and the median
//! time per streamed message, in ns (BENCHMARKS.md, "Eager cells in
//! pieces").
//!
//! `cargo run --release -p tandem-driver --example cell_pieces -- 8192 2048 1024`

use std::time::Instant;
use tandem_core::wire::{Header, Kind};
use tandem_driver::transport::shm::ShmLink;
use tandem_driver::transport::{Peek, Transport, PEEK_LEN};
use tandem_driver::Layout;

const SIZES: [usize; 4] = [1024, 2048, 4096, 8192];
const ROUNDS: usize = 30;
const ITERS: usize = 2000;
const WARM: usize = 100;

/// Both ends of a link whose cells are cut into `piece`-byte pieces.
fn pair(piece: u32) -> Result<(ShmLink, ShmLink), tandem_driver::Error> {
    ShmLink::streamed_pair(&Layout::default().cell_min(256).cell_piece(piece))
}

fn send(l: &mut ShmLink, body: &[u8]) {
    let h = Header::new(Kind::Eager, 0, 0, body.len() as u64).encode();
    while !l.try_send(&h, body) {
        std::hint::spin_loop();
    }
}

fn recv(l: &mut ShmLink, dst: &mut [u8]) {
    let mut peeked = [0u8; PEEK_LEN];
    let n = dst.len();
    loop {
        if l.peek(&mut peeked) == Peek::Header && l.body_ready(n) {
            assert!(l.consume(&peeked, n, dst), "the other thread stopped");
            return;
        }
        std::hint::spin_loop();
    }
}

fn main() -> Result<(), tandem_driver::Error> {
    let pieces: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("piece sizes in bytes"))
        .collect();
    let pieces = if pieces.is_empty() {
        vec![8192, 2048, 1024]
    } else {
        pieces
    };
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let [a, b, ..] = cores[..] else {
        eprintln!("cell_pieces: needs two cores");
        return Ok(());
    };
    let (mut near, mut far): (Vec<_>, Vec<_>) = pieces
        .iter()
        .map(|&p| pair(p))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    let times = std::thread::scope(|s| {
        let far = &mut far;
        s.spawn(move || {
            core_affinity::set_for_current(b);
            let mut buf = vec![0u8; 8192];
            for _ in 0..ROUNDS {
                for &n in &SIZES {
                    for l in far.iter_mut() {
                        for _ in 0..WARM + ITERS {
                            recv(l, &mut buf[..n]);
                            send(l, &buf[..n]);
                        }
                        for _ in 0..WARM + ITERS {
                            recv(l, &mut buf[..n]);
                        }
                        send(l, &buf[..0]);
                    }
                }
            }
        });
        core_affinity::set_for_current(a);
        let (out, mut back) = (vec![7u8; 8192], vec![0u8; 8192]);
        let mut t = vec![vec![Vec::new(); SIZES.len()]; pieces.len()];
        for _ in 0..ROUNDS {
            for (si, &n) in SIZES.iter().enumerate() {
                for (k, l) in near.iter_mut().enumerate() {
                    for _ in 0..WARM {
                        send(l, &out[..n]);
                        recv(l, &mut back[..n]);
                    }
                    let start = Instant::now();
                    for _ in 0..ITERS {
                        send(l, &out[..n]);
                        recv(l, &mut back[..n]);
                    }
                    let pp = start.elapsed().as_nanos() as f64 / (2 * ITERS) as f64;
                    for _ in 0..WARM {
                        send(l, &out[..n]);
                    }
                    let start = Instant::now();
                    for _ in 0..ITERS {
                        send(l, &out[..n]);
                    }
                    recv(l, &mut back[..0]);
                    let stream = start.elapsed().as_nanos() as f64 / ITERS as f64;
                    t[k][si].push((pp, stream));
                }
            }
        }
        t
    });
    println!(
        "ns: half round trip, median (best) of {ROUNDS} rounds of {ITERS}; then / per streamed message, median"
    );
    for (k, p) in pieces.iter().enumerate() {
        let cols: Vec<String> = SIZES
            .iter()
            .enumerate()
            .map(|(si, n)| {
                let mut pp: Vec<f64> = times[k][si].iter().map(|t| t.0).collect();
                let mut st: Vec<f64> = times[k][si].iter().map(|t| t.1).collect();
                pp.sort_by(f64::total_cmp);
                st.sort_by(f64::total_cmp);
                format!(
                    "{} B {:.0} ({:.0}) / {:.0}",
                    n,
                    pp[pp.len() / 2],
                    pp[0],
                    st[st.len() / 2]
                )
            })
            .collect();
        println!("piece {p:>5} B: {}", cols.join("  "));
    }
    Ok(())
}
