//! One suite for the promises every [`Transport`] makes to the progress
//! layer, run on each transport (shared memory, TCP, RDMA over the soft
//! NIC, and the simulated transport of the deterministic simulation, with
//! its adversity on): messages arrive whole and in order, `try_send` takes all or
//! nothing and `room` agrees with it, a short `consume` drops only the rest
//! of its own body, a full link pushes back and recovers, and rendezvous
//! streams arrive in order between the messages around them.
//!
//! Each transport's module builds a connected pair and calls [`suite`]; a
//! transport added later gets the same checks by doing the same. The
//! conformance suite (`tests/conformance.rs`) checks the same promises from
//! above, through `Comm`; this one checks them at the boundary itself,
//! where a transport's bug cannot hide behind the engine's retries.

use super::{MemDesc, Peek, Transport, PEEK_LEN};
use std::time::{Duration, Instant};
use tandem_core::rng::SplitMix64;
use tandem_core::wire::HEADER_LEN;

/// A deadline for one check: a transport that stops making progress fails
/// the test instead of hanging it.
struct Deadline(Instant, &'static str);

impl Deadline {
    fn new(what: &'static str) -> Self {
        Self(Instant::now() + Duration::from_secs(20), what)
    }
    fn check(&self, state: impl FnOnce() -> String) {
        assert!(
            Instant::now() < self.0,
            "{}: no progress: {}",
            self.1,
            state()
        );
    }
}

/// A header that names its message: the number `i` in the first 8 bytes,
/// the body length in the next 4, the rest derived from `i`.
fn header(i: u64, len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&i.to_le_bytes());
    h[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    for (k, b) in h[12..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(k as u8);
    }
    h
}

fn body(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i as u8).wrapping_add((k as u8).wrapping_mul(7)))
        .collect()
}

/// Takes the next message if it is there, checks it is message `want` in
/// full, and returns whether it took one.
fn take(rx: &mut impl Transport, want: u64, len: usize, dst: &mut Vec<u8>) -> bool {
    let mut out = [0u8; PEEK_LEN];
    match rx.peek(&mut out) {
        Peek::Nothing => {
            rx.flush();
            false
        }
        Peek::StreamData => panic!("stream data where message {want} was due"),
        Peek::Header => {
            let h = header(want, len);
            assert_eq!(out[..HEADER_LEN], h, "message {want}: header");
            if !rx.body_ready(len) {
                return false;
            }
            let b = body(want, len);
            if len <= PEEK_LEN - HEADER_LEN {
                // A body up to a descriptor's length comes with the header.
                assert_eq!(
                    out[HEADER_LEN..HEADER_LEN + len],
                    b[..],
                    "message {want}: peeked body"
                );
            }
            dst.clear();
            dst.resize(len, 0);
            assert!(rx.consume(&out, len, dst), "read whole");
            assert!(*dst == b, "message {want}: body of {len} bytes");
            true
        }
    }
}

/// Sends `lens.len()` messages from `a` to `b` while `b` takes them, one
/// thread stepping both; checks every one arrives whole and in order.
fn in_order(a: &mut impl Transport, b: &mut impl Transport, lens: &[usize]) {
    let d = Deadline::new("messages in order");
    let (mut sent, mut got) = (0usize, 0usize);
    let mut dst = Vec::new();
    while got < lens.len() {
        d.check(|| format!("{sent} sent, {got} taken"));
        if sent < lens.len() {
            let (h, b) = (
                header(sent as u64, lens[sent]),
                body(sent as u64, lens[sent]),
            );
            if a.try_send(&h, &b) {
                sent += 1;
            } else {
                a.flush();
            }
        }
        while got < sent && take(b, got as u64, lens[got], &mut dst) {
            got += 1;
        }
        // As the progress layer does: each end writes out what it queued
        // (a receiver's credit returns among it).
        b.flush();
    }
}

/// Fills the link without taking anything until it refuses, then drains
/// it: every accepted message arrives whole, nothing of a refused one
/// does, and a message refused while full goes through once drained.
fn back_pressure(a: &mut impl Transport, b: &mut impl Transport, len: usize, first: u64) -> u64 {
    let d = Deadline::new("back pressure");
    let mut i = first;
    let mut refused = 0;
    // Until refused several times in a row with everything flushed: a
    // queueing transport takes messages while its kernel buffer fills.
    while refused < 50 {
        d.check(|| format!("{} accepted, never refused", i - first));
        assert!(i - first < 1_000_000, "a link that never pushes back");
        if a.try_send(&header(i, len), &body(i, len)) {
            i += 1;
            refused = 0;
        } else {
            a.flush();
            refused += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert!(
        !a.room(HEADER_LEN + len),
        "room says yes where try_send said no"
    );
    let accepted = i;
    let mut dst = Vec::new();
    let mut next = first;
    let mut resent = false;
    while next < accepted + 1 {
        d.check(|| format!("{} of {} taken", next - first, accepted - first));
        if take(b, next, len, &mut dst) {
            next += 1;
        }
        b.flush();
        if !resent && a.try_send(&header(accepted, len), &body(accepted, len)) {
            resent = true;
        }
        a.flush();
    }
    assert!(resent);
    let mut out = [0u8; PEEK_LEN];
    assert_eq!(
        b.peek(&mut out),
        Peek::Nothing,
        "nothing beyond what was accepted"
    );
    accepted + 1
}

/// A receiver that takes only the start of a body gets exactly that, and
/// the next message is intact.
fn short_consume(a: &mut impl Transport, b: &mut impl Transport, eager: usize, first: u64) {
    let d = Deadline::new("short consume");
    let len = eager.min(300);
    for i in first..first + 2 {
        while !a.try_send(&header(i, len), &body(i, len)) {
            d.check(String::new);
            a.flush();
        }
    }
    a.flush();
    let mut out = [0u8; PEEK_LEN];
    loop {
        d.check(String::new);
        if b.peek(&mut out) == Peek::Header && b.body_ready(len) {
            break;
        }
        a.flush();
    }
    let mut part = [0u8; 10];
    assert!(b.consume(&out, len, &mut part), "read whole");
    assert_eq!(part[..], body(first, len)[..10]);
    let mut dst = Vec::new();
    while !take(b, first + 1, len, &mut dst) {
        d.check(String::new);
        a.flush();
        b.flush();
    }
}

/// A rendezvous stream of `n` bytes from `a` into `b`'s buffer, between
/// two messages: the message before arrives first, then the stream's bytes
/// in order (at the described buffer); the message after arrives whole, but
/// need not wait for the stream's end (over RDMA it can overtake it).
fn stream(a: &mut impl Transport, b: &mut impl Transport, n: usize, first: u64) {
    let d = Deadline::new("stream");
    let src: Vec<u8> = (0..n).map(|k| (k % 253) as u8).collect();
    let mut dst = vec![0u8; n];
    // As a rendezvous does: the sender describes its buffer (for its RTS),
    // the receiver its own (for its CTS).
    let local: MemDesc = a.describe(&src, false);
    let remote: MemDesc = b.describe(&dst, true);
    let mut msg = Vec::new();
    while !a.try_send(&header(first, 40), &body(first, 40)) {
        d.check(String::new);
        a.flush();
    }
    while !take(b, first, 40, &mut msg) {
        d.check(String::new);
        a.flush();
        b.flush();
    }
    // The receiver takes stream bytes and, as the progress layer does,
    // any message in front of the stream's end: over RDMA the message
    // sent after the stream may complete before the stream's end does.
    let (mut out, mut got) = (0usize, 0usize);
    let (mut after_sent, mut after_taken) = (false, false);
    while got < n || !after_taken {
        d.check(|| {
            format!(
                "{out} of {n} out, {got} in, message after: sent {after_sent}, taken {after_taken}"
            )
        });
        if out < n {
            out += a.stream_out(&remote, out, &src[out..]);
        } else if !after_sent {
            after_sent = a.try_send(&header(first + 1, 40), &body(first + 1, 40));
        }
        a.flush();
        if got < n {
            let left = n - got;
            got += b.stream_in(left, Some(&mut dst[got..]));
        }
        let mut peeked = [0u8; PEEK_LEN];
        if after_sent && !after_taken && b.peek(&mut peeked) == Peek::Header {
            after_taken = take(b, first + 1, 40, &mut msg);
        }
        b.flush();
    }
    assert!(dst == src, "the stream's bytes");
    b.release(remote.addr, n, true);
    a.release(local.addr, n, false);
}

/// Every check, on a pair made by `pair` (both ends with `eager`-byte
/// messages at most), in both directions.
pub(crate) fn suite<L: Transport>(pair: impl Fn() -> (L, L), eager: usize) {
    let mut rng = SplitMix64(eager as u64);
    let lens: Vec<usize> = (0..3000)
        .map(|_| match rng.below(10) {
            0 => 0,
            1 => eager,
            2..=5 => rng.below(PEEK_LEN - HEADER_LEN + 1),
            _ => rng.below(eager + 1),
        })
        .collect();
    let (mut a, mut b) = pair();
    in_order(&mut a, &mut b, &lens);
    in_order(&mut b, &mut a, &lens);
    let (mut a, mut b) = pair();
    let next = back_pressure(&mut a, &mut b, eager.min(1000), 0);
    short_consume(&mut a, &mut b, eager, next);
    let (mut a, mut b) = pair();
    for (k, n) in [1usize, 4096, 1 << 20, 3 << 20].into_iter().enumerate() {
        stream(&mut a, &mut b, n, 2 * k as u64);
        stream(&mut b, &mut a, n, 2 * k as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::suite;
    use crate::config::Layout;
    use crate::transport::rdma::{tests::pair as rdma_pair, Rendezvous};
    use crate::transport::shm::ShmLink;
    use crate::transport::tcp::TcpLink;

    #[test]
    fn shared_memory_keeps_the_transport_contract() {
        let layout = Layout::default();
        suite(
            || ShmLink::streamed_pair(&layout).expect("job memory"),
            layout.eager_limit as usize,
        );
    }

    /// Cells of every size, an eager limit that is no whole number of
    /// pieces (three pieces, the last short, in a cell of four).
    #[test]
    fn shared_memory_cells_keep_the_transport_contract() {
        let layout = Layout::default().eager_limit(5000).cell_min(64);
        assert_eq!(layout.piece_bytes(), crate::CELL_PIECE);
        assert_eq!(layout.cell_pieces(), 16 * 4);
        suite(
            || ShmLink::streamed_pair(&layout).expect("job memory"),
            layout.eager_limit as usize,
        );
    }

    #[test]
    fn tcp_keeps_the_transport_contract() {
        let eager = 8192;
        suite(
            || {
                let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                let a =
                    std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
                let (b, _) = l.accept().expect("accept");
                (
                    TcpLink::new(a, 1, eager).expect("link"),
                    TcpLink::new(b, 0, eager).expect("link"),
                )
            },
            eager,
        );
    }

    #[test]
    fn the_simulated_transport_keeps_the_transport_contract() {
        use crate::transport::sim::{Fault, Net, PullMode, SimOptions};
        // Every legal adversity on: delays, jams, partial stream moves, a
        // pipe that holds a few messages; no fault.
        for seed in [1, 2, 3] {
            suite(
                || {
                    let opts = SimOptions {
                        cap: 3 * 8192,
                        delay: 300,
                        jam: 100,
                        partial: 300,
                        pull_done: 500,
                        lost_at_once: false,
                        pulls: vec![PullMode::Stream; 4],
                        fault: Fault::None,
                        fault_after: 0,
                    };
                    let net = Net::new(2, seed, opts);
                    let a = Net::links(&net, 0).swap_remove(1);
                    let b = Net::links(&net, 1).swap_remove(0);
                    (a, b)
                },
                8192,
            );
        }
    }

    #[test]
    fn soft_rdma_keeps_the_transport_contract() {
        suite(|| rdma_pair(8192, Rendezvous::Write), 8192);
        suite(|| rdma_pair(1024, Rendezvous::Read), 1024);
    }
}
