//! Receiver-not-ready, reproduced and then prevented.
//!
//! On RDMA a SEND can only land in a receive the peer posted beforehand.
//! The first half of this example is the naive sender the project started
//! from: it posts SENDs as fast as it likes against a receiver that posts
//! its receives slowly. The peer's NIC answers receiver-not-ready, the
//! sender's NIC retries `rnr_retry` times, then the send fails with
//! `IBV_WC_RNR_RETRY_EXC_ERR`, the queue pair goes to the error state and
//! everything after it is flushed.
//!
//! The second half sends the same traffic (same count, same sizes, same
//! slow receiver) through tandem over the same soft RC NIC, with
//! `rnr_retry = 0`, so a single receiver-not-ready would fail it: every
//! message arrives and the NIC counts no receiver-not-ready at all.
//!
//! ```text
//! cargo run --release --example rnr [messages] [receiver delay in µs] [rnr_retry]
//! ```

use std::time::{Duration, Instant};
use tandem_driver::{Comm, Config, Layout, Links, WaitPolicy};
use tandem_fabric::soft::{rnr_events_total, SoftOptions, SoftQp, Wire};
use tandem_fabric::{Access, Caps, Modify, Opcode, QueuePair, RcAttrs, SendWr, Sge, Wc, WcStatus};

const SIZE: usize = 256;

struct Naive {
    delivered: usize,
    rnr: u64,
    failed_at: Option<(usize, WcStatus)>,
    flushed: usize,
}

/// The naive sender: SENDs posted without knowing whether receives are.
fn naive(messages: usize, delay: Duration, rnr_retry: u8) -> Naive {
    let caps = Caps {
        max_send_wr: messages as u32 + 1,
        max_recv_wr: messages as u32 + 1,
        cq_depth: 2 * messages as u32 + 2,
        max_rd_atomic: 1,
    };
    let (wa, wb) = Wire::pair().expect("socket pair");
    let mut tx = SoftQp::new(wa, caps, SoftOptions::default()).expect("queue pair");
    let mut rx = SoftQp::new(wb, caps, SoftOptions::default()).expect("queue pair");
    let attrs = RcAttrs {
        rnr_retry,
        min_rnr_timer: 1, // 10 µs between retries
        ..RcAttrs::default()
    };
    let (ta, ra) = (tx.local_addr(), rx.local_addr());
    for (q, peer) in [(&mut tx, ra), (&mut rx, ta)] {
        q.modify(Modify::Init).unwrap();
        q.modify(Modify::Rtr(peer, attrs)).unwrap();
        q.modify(Modify::Rts(attrs)).unwrap();
    }
    let mut src = vec![7u8; SIZE];
    let mut dst = vec![0u8; SIZE * messages];
    // SAFETY: both buffers outlive the queue pairs (dropped at the end of
    // this function, before the buffers).
    let ks = unsafe { tx.register(src.as_mut_ptr() as u64, SIZE, Access::ALL) }.unwrap();
    // SAFETY: as above.
    let kd = unsafe { rx.register(dst.as_mut_ptr() as u64, dst.len(), Access::ALL) }.unwrap();
    // The receiver starts with a few receives and posts one more every
    // `delay`, as a busy application would.
    let post = |rx: &mut SoftQp, i: usize| {
        let sge = Sge {
            addr: dst.as_ptr() as u64 + (i * SIZE) as u64,
            len: SIZE as u32,
            lkey: kd.lkey,
        };
        rx.post_recv(i as u64, Some(sge)).unwrap();
    };
    let mut posted = 0;
    while posted < 4 {
        post(&mut rx, posted);
        posted += 1;
    }
    for i in 0..messages {
        let wr = SendWr {
            wr_id: i as u64,
            op: Opcode::Send,
            sge: Some(Sge {
                addr: src.as_ptr() as u64,
                len: SIZE as u32,
                lkey: ks.lkey,
            }),
            signaled: true,
        };
        tx.post_send(&wr).unwrap();
    }
    let mut out = Naive {
        delivered: 0,
        rnr: 0,
        failed_at: None,
        flushed: 0,
    };
    let mut wcs = [Wc::EMPTY; 64];
    let mut done = 0;
    let end = Instant::now() + Duration::from_secs(30);
    while done < messages && Instant::now() < end {
        if posted < messages {
            std::thread::sleep(delay);
            post(&mut rx, posted);
            posted += 1;
        }
        let k = tx.poll_send(&mut wcs).unwrap_or(0);
        for wc in &wcs[..k] {
            done += 1;
            match wc.status {
                WcStatus::Success => out.delivered += 1,
                WcStatus::Flushed => out.flushed += 1,
                s => out.failed_at = out.failed_at.or(Some((wc.wr_id as usize, s))),
            }
        }
    }
    out.rnr = tx.rnr_events();
    out
}

/// The same traffic through tandem over the same NIC.
fn tandem(messages: usize, delay: Duration) -> (usize, u64) {
    let before = rnr_events_total();
    let cfg = Config::default().wait(WaitPolicy::SHARED_CORES);
    let out = Comm::threads_on(2, Links::Soft, &Layout::default(), cfg, |comm| {
        let mut got = 0;
        let mut buf = vec![7u8; SIZE];
        if comm.rank() == 0 {
            // Non-blocking sends, all posted at once: tandem's credits and
            // the link's receiver-driven ring decide when each may go.
            comm.scope(|s| {
                let reqs: Vec<_> = (0..messages)
                    .map(|_| s.isend(&buf, 1, 1))
                    .collect::<tandem_driver::Result<_>>()?;
                for r in reqs {
                    r.wait()?;
                }
                Ok::<(), tandem_driver::Error>(())
            })??;
        } else {
            for _ in 0..messages {
                std::thread::sleep(delay);
                comm.recv(&mut buf, 0, 1)?;
                got += 1;
            }
        }
        Ok(got)
    });
    let got = match &out[1] {
        Ok(n) => *n,
        Err(e) => {
            eprintln!("tandem failed: {e}");
            0
        }
    };
    (got, rnr_events_total() - before)
}

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let messages = arg(1, 64) as usize;
    let delay = Duration::from_micros(arg(2, 1000));
    let rnr_retry = arg(3, 3).min(6) as u8;
    println!(
        "{messages} SENDs of {SIZE} bytes; the receiver posts 4 receives, then one every {delay:?}"
    );
    let n = naive(messages, delay, rnr_retry);
    let (got, rnr) = tandem(messages, delay);
    println!();
    let fail = n
        .failed_at
        .map_or("none".to_string(), |(i, s)| format!("#{i} {}", s.name()));
    let row = |what: &str, a: &dyn std::fmt::Display, b: &dyn std::fmt::Display| {
        println!("{what:<28} {a:>30} {b:>8}")
    };
    row("", &"naive SENDs", &"tandem");
    row("rnr_retry", &rnr_retry, &0);
    row("messages delivered", &n.delivered, &got);
    row("receiver-not-ready events", &n.rnr, &rnr);
    row("first failed send", &fail, &"none");
    row("flushed after the failure", &n.flushed, &0);
    if n.failed_at.is_none() || got != messages || rnr != 0 {
        eprintln!("unexpected outcome (a faster receiver hides the naive sender's bug)");
        std::process::exit(1);
    }
}
