//! Property tests of the TCP link's framing, driving [`TcpLink`]s directly
//! through [`Transport`] over real loopback connections whose kernel
//! buffers are a few kilobytes, so that writes stop at arbitrary offsets:
//! inside a message frame (its prefix, header or body) or a chunk's payload,
//! with more messages queued behind. (The kernel does not cut a write
//! inside its first few bytes, and a chunk's 8-byte prefix always leads its
//! write, so a chunk prefix cut in two is the one case real sockets do not
//! produce here.)
//!
//! The oracle knows every message and stream each side was given and
//! checks that
//! * every message arrives exactly once and in order, its header and body
//!   intact (the copy [`Transport::peek`] makes and the body
//!   [`Transport::consume`] copies alike);
//! * stream bytes arrive byte-exact, each stream's in its own buffer;
//! * each message arrives exactly where it belongs among the stream bytes:
//!   before the next chunk when it was sent with no chunk half written,
//!   right after the chunk when one was; so never inside a chunk. Checked
//!   at the receiving link, and (for relayed runs) on the wire itself by a
//!   relay that parses every frame independently of the link's decoder;
//! * a link with its work done has nothing left queued or buffered.
//!
//! Schedules are random: which side acts when, how much a relay between
//! the two links moves at a time (a byte or tens of kilobytes, so partial
//! writes end at random offsets), traffic one way or both ways at once
//! (eager messages one way while a stream is chunked the other way, with
//! headers queued while a chunk is half written). A receiver may drop the
//! rest of a stream mid-way (a withdrawn receive).
//!
//! Malformed input (an unknown frame kind, a bad message length, nonzero
//! padding, a chunk that does not fit its stream, a body length that does
//! not match the frame) must break the link with a protocol error that
//! names it; a peer that closes or resets is lost once what it sent is
//! delivered; dropping a link still sends what it had queued. Every wait has
//! a deadline, and every property runs under a watchdog, so a link call
//! that never returns fails the test instead of hanging it.

use super::*;
use crate::transport::DESC_LEN;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

/// Kernel buffer size asked for on every test socket, both directions (the
/// kernel doubles it): small, so buffers fill in the middle of frames.
const SOCK_BUF: libc::c_int = 4096;

/// Largest segment asked for on every test socket, set before the
/// handshake so both ends announce it. Loopback's own (65483 bytes) is far
/// larger than `SOCK_BUF`: a window smaller than one segment is a regime no
/// real link is in, where Linux's receiver does not announce the window it
/// reopens by reading and the sender waits for its tail-loss probe, about
/// 200 ms each time (seen as `TCPLossProbes` = `DSACKOldSent` in `nstat`,
/// hundreds per run on a loaded machine, enough to push one case past a
/// minute). With several segments per window, as on Ethernet, writes still
/// stop in the middle of frames but the window opens as the reader drains.
const SEGMENT: libc::c_int = 1024;

/// The rank the links under test name as their peer.
const PEER: usize = 7;

/// How long a run may go without any progress before it counts as stuck.
const STALL: Duration = Duration::from_secs(3);

/// The schedule's random decisions and the payload bytes, from a seed
/// proptest picks (the workspace's one generator).
use tandem_core::rng::SplitMix64 as Rng;

/// A transfer size: often a handful of bytes (cuts inside prefixes and
/// headers), often a few kilobytes, sometimes tens of kilobytes.
fn amount(r: &mut Rng) -> usize {
    match r.below(10) {
        0..=2 => 1 + r.below(16),
        3..=6 => 1 + r.below(4096),
        _ => 1 + r.below(64 * 1024),
    }
}

/// `len` pseudo-random bytes from `seed`.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn small_buffers(fd: RawFd) {
    for (level, opt, value) in [
        (libc::SOL_SOCKET, libc::SO_SNDBUF, SOCK_BUF),
        (libc::SOL_SOCKET, libc::SO_RCVBUF, SOCK_BUF),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG, SEGMENT),
    ] {
        // SAFETY: the option value is a live c_int and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
    }
}

/// A loopback TCP connection whose two ends have small kernel buffers, set
/// before the handshake (the listener's are inherited by the accepted end),
/// so the advertised window is small too.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    small_buffers(listener.as_raw_fd());
    let port = listener.local_addr().expect("listener address").port();
    // SAFETY: plain socket(2); the descriptor is owned by `client` at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh socket nothing else owns.
    let client = unsafe { TcpStream::from_raw_fd(fd) };
    small_buffers(fd);
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in and its size is passed.
    let rc = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
    let (server, _) = listener.accept().expect("accept");
    (client, server)
}

/// Set once a watched run did not finish: its thread still spins, so later
/// runs fail at once instead of piling more spinning threads up.
static STUCK: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Runs `f` on a thread of its own and fails if it has not finished within
/// `secs`: a link call that never returns is a test failure, not a hang.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    assert!(
        !*STUCK.lock().unwrap_or_else(|e| e.into_inner()),
        "an earlier run never finished (a link call blocked)"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            let _ = h.join();
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the run ended without a result or a panic"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            *STUCK.lock().unwrap_or_else(|e| e.into_inner()) = true;
            panic!("still running after {secs} s: a link call blocked")
        }
    }
}

/// What a run's thread tells its watchdog: steps taken, and the action of
/// the step in progress.
struct Beat {
    steps: tandem_core::sync::AtomicU64,
    action: tandem_core::sync::AtomicU64,
}

/// The actions of [`Run::go`], by number, for the watchdog's report.
const ACTIONS: [&str; 10] = [
    "A send",
    "A push_stream",
    "A flush",
    "B receive",
    "B send",
    "B push_stream",
    "B flush",
    "A receive",
    "relay A->B",
    "relay B->A",
];

/// Runs a [`Run`] on a thread of its own, watched for link calls that never
/// return: the run fails if one call (one step of its loop, or setting up
/// or tearing down its links) takes more than `secs`, naming the action
/// and the case. A run that keeps stepping is not cut short: its own stall
/// check (no progress for [`STALL`]) and step bound decide whether it is
/// stuck, so a slow machine cannot pass off as a blocked call.
fn watched(secs: u64, case: String, f: impl FnOnce(&Beat) + Send + 'static) {
    assert!(
        !*STUCK.lock().unwrap_or_else(|e| e.into_inner()),
        "an earlier run never finished (a link call blocked)"
    );
    let beat = std::sync::Arc::new(Beat {
        steps: tandem_core::sync::AtomicU64::new(0),
        action: tandem_core::sync::AtomicU64::new(u64::MAX),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let b = beat.clone();
    let h = std::thread::spawn(move || {
        f(&b);
        let _ = tx.send(());
    });
    let (mut seen, mut since) = (u64::MAX, Instant::now());
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => {
                let _ = h.join();
                return;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match h.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the run ended without a result or a panic"),
            },
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        let steps = beat.steps.load(tandem_core::sync::Ordering::Relaxed);
        if steps != seen {
            (seen, since) = (steps, Instant::now());
        } else if since.elapsed() > Duration::from_secs(secs) {
            *STUCK.lock().unwrap_or_else(|e| e.into_inner()) = true;
            let a = beat.action.load(tandem_core::sync::Ordering::Relaxed) as usize;
            panic!(
                "one call blocked for {secs} s: step {steps}, action {} ({case})",
                ACTIONS
                    .get(a)
                    .copied()
                    .unwrap_or("setting up or tearing down the links")
            )
        }
    }
}

/// A frame prefix as the module docs define it, built here independently
/// of the link's encoder.
fn prefix(kind: u8, len: u32) -> [u8; PREFIX] {
    let mut p = [0u8; PREFIX];
    p[0] = kind;
    p[4..].copy_from_slice(&len.to_le_bytes());
    p
}

/// A whole message frame.
fn message_frame(header: &[u8; HEADER_LEN], body: &[u8]) -> Vec<u8> {
    let mut f = prefix(b'M', (HEADER_LEN + body.len()) as u32).to_vec();
    f.extend_from_slice(header);
    f.extend_from_slice(body);
    f
}

fn header(seed: u64) -> [u8; HEADER_LEN] {
    bytes(seed, HEADER_LEN)
        .try_into()
        .expect("HEADER_LEN bytes")
}

/// What one side hands its link, in order.
#[derive(Debug, Clone, Copy)]
enum Item {
    /// An eager message with a body of this many bytes.
    Msg(usize),
    /// A rendezvous stream of this many bytes.
    Stream(usize),
}

/// One direction's traffic and the state of both its ends.
struct Dir {
    /// Messages, in order: header and body.
    msgs: Vec<([u8; HEADER_LEN], Vec<u8>)>,
    /// Streams, in order.
    streams: Vec<Vec<u8>>,
    /// The order the sender hands them over: `true` the next message,
    /// `false` the next stream. A message may go while a stream before it
    /// is still being pushed; a stream starts once the one before is done.
    order: Vec<bool>,
    tx: Tx,
    rx: Rx,
    wire: Wire,
}

#[derive(Default)]
struct Tx {
    /// Next entry of `order`.
    next: usize,
    /// Streams started.
    streams: usize,
    /// The stream being pushed: index, bytes the link took.
    stream: Option<(usize, usize)>,
    /// Stream bytes the link took, all streams together.
    pos: usize,
    /// For each message the link took: the stream bytes (all streams
    /// together) that must arrive before it.
    at: Vec<usize>,
}

#[derive(Default)]
struct Rx {
    /// Messages received.
    msgs: usize,
    /// The stream being received, its bytes received, how many of them
    /// were kept (the rest dropped from `drop_at` on), its buffer.
    stream: usize,
    done: usize,
    kept: usize,
    drop_at: usize,
    buf: Vec<u8>,
    /// Stream bytes received, all streams together.
    pos: usize,
}

/// The relay's parse of the frames on the wire.
#[derive(Default)]
struct Wire {
    /// Bytes read from the sender's socket, parsed up to `at`.
    bytes: Vec<u8>,
    at: usize,
    msgs: usize,
    stream: usize,
    done: usize,
    pos: usize,
}

impl Dir {
    fn new(items: &[Item], seed: u64) -> Self {
        let mut d = Dir {
            msgs: Vec::new(),
            streams: Vec::new(),
            order: Vec::new(),
            tx: Tx::default(),
            rx: Rx::default(),
            wire: Wire::default(),
        };
        for (i, it) in items.iter().enumerate() {
            let s = seed ^ ((i as u64 + 1) << 40);
            match *it {
                Item::Msg(n) => {
                    d.msgs.push((header(s), bytes(s ^ 1, n)));
                    d.order.push(true);
                }
                Item::Stream(n) => {
                    d.streams.push(bytes(s ^ 2, n));
                    d.order.push(false);
                }
            }
        }
        let first = d.streams.first().map_or(0, Vec::len);
        let mut r = Rng(seed ^ 0xd0d0);
        d.rx.drop_at = if r.chance(15) {
            r.below(first + 1)
        } else {
            usize::MAX
        };
        d.rx.buf = vec![0; first];
        d
    }

    fn finished(&self) -> bool {
        self.tx.next == self.order.len()
            && self.tx.stream.is_none()
            && self.rx.msgs == self.msgs.len()
            && self.rx.stream == self.streams.len()
    }

    fn state(&self) -> String {
        format!(
            "sender at item {}/{} (stream {:?}, {} stream bytes), receiver has {}/{} messages, \
             stream {}/{} at {} ({} stream bytes)",
            self.tx.next,
            self.order.len(),
            self.tx.stream,
            self.tx.pos,
            self.rx.msgs,
            self.msgs.len(),
            self.rx.stream,
            self.streams.len(),
            self.rx.done,
            self.rx.pos
        )
    }
}

fn assert_alive(link: &mut TcpLink) {
    if let Liveness::Lost(e) = link.liveness() {
        panic!("the link broke: {e}");
    }
}

/// Hands the next message to the link, if a message is next.
fn send(link: &mut TcpLink, d: &mut Dir) -> bool {
    if d.order.get(d.tx.next) != Some(&true) {
        return false;
    }
    let i = d.tx.at.len();
    let half = link.chunk_in_flight();
    let at = if half {
        // The link's account of its chunk must fit the chunk geometry:
        // CHUNK-byte chunks from each stream's start, the last one shorter.
        let (s, taken) =
            d.tx.stream
                .expect("a chunk is half written with no stream being sent");
        let end = taken + link.chunk_left;
        assert!(
            end == d.streams[s].len() || (end % CHUNK == 0 && end > taken),
            "chunk in flight ends at {end} of stream {s} ({} bytes, {taken} taken)",
            d.streams[s].len()
        );
        d.tx.pos + link.chunk_left
    } else {
        d.tx.pos
    };
    let (h, b) = &d.msgs[i];
    if !link.try_send(h, b) {
        return false;
    }
    d.tx.at.push(at);
    d.tx.next += 1;
    true
}

/// Pushes the stream being sent (starting the next one if it is next).
fn push_stream(link: &mut TcpLink, d: &mut Dir) -> bool {
    if d.tx.stream.is_none() {
        if d.order.get(d.tx.next) != Some(&false) {
            return false;
        }
        d.tx.stream = Some((d.tx.streams, 0));
        d.tx.streams += 1;
        d.tx.next += 1;
    }
    let (s, taken) = d.tx.stream.expect("a stream is being sent");
    let data = &d.streams[s];
    let n = link.stream_out(&MemDesc::NONE, taken, &data[taken..]);
    assert!(
        n <= data.len() - taken,
        "stream_out took {n} of the {} bytes left",
        data.len() - taken
    );
    d.tx.pos += n;
    if taken + n == data.len() {
        assert!(
            !link.chunk_in_flight(),
            "stream {s} all taken with a chunk still in flight"
        );
        d.tx.stream = None;
    } else {
        d.tx.stream = Some((s, taken + n));
    }
    n > 0
}

/// Takes bytes of the stream being received, if any are there.
fn take_stream(link: &mut TcpLink, d: &mut Dir, rng: &mut Rng) -> bool {
    let Some(data) = d.streams.get(d.rx.stream) else {
        return false;
    };
    let r = &mut d.rx;
    let left = data.len() - r.done;
    let n = if r.done >= r.drop_at {
        link.stream_in(left, None)
    } else {
        let n = link.stream_in(left, Some(&mut r.buf[r.done..]));
        r.kept += n;
        n
    };
    assert!(
        n <= left,
        "stream_in took {n} bytes of a stream with {left} left"
    );
    r.done += n;
    r.pos += n;
    if r.done == data.len() {
        let k = r.kept;
        if let Some(at) = (0..k).find(|&j| r.buf[j] != data[j]) {
            panic!(
                "stream {} ({} bytes) arrived altered from byte {at} on",
                r.stream,
                data.len()
            );
        }
        r.stream += 1;
        r.done = 0;
        r.kept = 0;
        let next = d.streams.get(r.stream).map_or(0, Vec::len);
        // Now and then the receive is withdrawn part-way: the rest of the
        // stream is dropped.
        r.drop_at = if rng.chance(15) {
            rng.below(next + 1)
        } else {
            usize::MAX
        };
        r.buf = vec![0; next];
    }
    n > 0
}

/// Checks and consumes the message `peek` reported.
fn take_message(link: &mut TcpLink, d: &mut Dir, rng: &mut Rng, out: &[u8; PEEK_LEN]) {
    let i = d.rx.msgs;
    assert!(
        i < d.tx.at.len(),
        "message {i} arrived, but only {} were sent",
        d.tx.at.len()
    );
    let (h, b) = &d.msgs[i];
    let n = b.len().min(DESC_LEN);
    assert_eq!(out[..HEADER_LEN], h[..], "message {i}: header");
    assert_eq!(
        out[HEADER_LEN..HEADER_LEN + n],
        b[..n],
        "message {i}: first body bytes"
    );
    assert_eq!(
        d.rx.pos, d.tx.at[i],
        "message {i} arrived after {} stream bytes; it was sent to follow {}",
        d.rx.pos, d.tx.at[i]
    );
    if rng.chance(10) {
        let mut again = [0u8; PEEK_LEN];
        assert_eq!(
            link.peek(&mut again),
            Peek::Header,
            "message {i}: peek again"
        );
        assert_eq!(again[..HEADER_LEN + n], out[..HEADER_LEN + n]);
    }
    assert!(link.body_ready(b.len()));
    // Sometimes the receive buffer is shorter: the rest is dropped.
    let keep = if rng.chance(10) {
        rng.below(b.len() + 1)
    } else {
        b.len()
    };
    let mut dst = vec![0u8; keep];
    assert!(link.consume(out, b.len(), &mut dst), "read whole");
    assert_alive(link);
    assert!(dst[..] == b[..keep], "message {i}: body altered");
    d.rx.msgs += 1;
}

/// A few rounds of what the progress engine does: take stream bytes, then
/// look at what is next.
fn receive(link: &mut TcpLink, d: &mut Dir, rng: &mut Rng) -> bool {
    let mut did = false;
    for _ in 0..1 + rng.below(4) {
        if rng.chance(70) {
            did |= take_stream(link, d, rng);
        }
        let mut out = [0u8; PEEK_LEN];
        match link.peek(&mut out) {
            Peek::Nothing => {}
            Peek::StreamData => {
                assert!(
                    d.rx.stream < d.streams.len(),
                    "stream data after every stream was received"
                );
                did |= take_stream(link, d, rng);
            }
            Peek::Header => {
                take_message(link, d, rng, &out);
                did = true;
            }
        }
    }
    assert_alive(link);
    did
}

/// Parses the frames the relay has read so far against the oracle.
fn check_wire(d: &mut Dir) {
    let w = &mut d.wire;
    while w.bytes.len() - w.at >= PREFIX {
        let p = &w.bytes[w.at..w.at + PREFIX];
        let len = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize;
        assert_eq!(p[1..4], [0, 0, 0], "wire: frame prefix {p:02x?}");
        let whole = w.bytes.len() - w.at >= PREFIX + len;
        let f = &w.bytes[w.at + PREFIX..];
        match p[0] {
            b'M' => {
                let i = w.msgs;
                assert!(i < d.tx.at.len(), "wire: message {i} before it was sent");
                let (h, b) = &d.msgs[i];
                assert_eq!(
                    len,
                    HEADER_LEN + b.len(),
                    "wire: message {i}'s frame length"
                );
                if !whole {
                    break;
                }
                assert!(
                    f[..HEADER_LEN] == h[..] && f[HEADER_LEN..len] == b[..],
                    "wire: message {i} altered"
                );
                assert_eq!(
                    w.pos, d.tx.at[i],
                    "wire: message {i} after {} stream bytes; it was sent to follow {}",
                    w.pos, d.tx.at[i]
                );
                w.msgs += 1;
            }
            b'D' => {
                let s = w.stream;
                assert!(s < d.streams.len(), "wire: a chunk after every stream");
                let data = &d.streams[s];
                assert_eq!(
                    len,
                    (data.len() - w.done).min(CHUNK),
                    "wire: length of the chunk at {} of stream {s} ({} bytes)",
                    w.done,
                    data.len()
                );
                if !whole {
                    break;
                }
                assert!(
                    f[..len] == data[w.done..w.done + len],
                    "wire: chunk at {} of stream {s} altered (a message inside it?)",
                    w.done
                );
                w.done += len;
                w.pos += len;
                if w.done == data.len() {
                    w.stream += 1;
                    w.done = 0;
                }
            }
            k => panic!("wire: frame kind {k:#04x} after {} stream bytes", w.pos),
        }
        w.at += PREFIX + len;
    }
    w.bytes.drain(..w.at);
    w.at = 0;
}

/// Moves up to a random amount from `from` to `to` through `pending`,
/// parsing what it reads.
fn hop(
    from: &TcpStream,
    to: &TcpStream,
    pending: &mut VecDeque<u8>,
    d: &mut Dir,
    rng: &mut Rng,
) -> bool {
    const MAX_PENDING: usize = 256 * 1024;
    let mut did = false;
    if pending.len() < MAX_PENDING {
        let mut buf = vec![0u8; amount(rng).min(MAX_PENDING - pending.len())];
        match sys::recv_now(from.as_raw_fd(), &mut buf) {
            Ok(Some(0)) => panic!("relay: a link closed its connection"),
            Ok(Some(n)) => {
                pending.extend(&buf[..n]);
                d.wire.bytes.extend_from_slice(&buf[..n]);
                check_wire(d);
                did = true;
            }
            Ok(None) => {}
            Err(e) => panic!("relay read: {e}"),
        }
    }
    if !pending.is_empty() {
        let k = amount(rng);
        let (a, b) = pending.as_slices();
        let a = &a[..a.len().min(k)];
        let b = &b[..b.len().min(k - a.len())];
        let w = sys::writev2(to.as_raw_fd(), a, b).expect("relay write");
        pending.drain(..w);
        did |= w > 0;
    }
    did
}

/// Relays both directions between two connections: `ra` faces link A,
/// `rb` faces link B.
struct Relay {
    ra: TcpStream,
    rb: TcpStream,
    ab: VecDeque<u8>,
    ba: VecDeque<u8>,
}

struct Run {
    a: TcpLink,
    b: TcpLink,
    ab: Dir,
    ba: Dir,
    relay: Option<Relay>,
    rng: Rng,
}

impl Run {
    fn new(eager: usize, ab: &[Item], ba: &[Item], seed: u64, relay: bool) -> Self {
        let (a, b, relay) = if relay {
            let (a, ra) = tcp_pair();
            let (rb, b) = tcp_pair();
            // The relay forwards at once, as the links do (TCP_NODELAY):
            // with Nagle's algorithm its small writes would wait for the
            // receiver's delayed acknowledgements, tens of milliseconds
            // each, a timing of the test's own making.
            for s in [&ra, &rb] {
                s.set_nodelay(true).expect("TCP_NODELAY on the relay");
            }
            let r = Relay {
                ra,
                rb,
                ab: VecDeque::new(),
                ba: VecDeque::new(),
            };
            (a, b, Some(r))
        } else {
            let (a, b) = tcp_pair();
            (a, b, None)
        };
        Run {
            a: TcpLink::new(a, 1, eager).expect("link A"),
            b: TcpLink::new(b, 0, eager).expect("link B"),
            ab: Dir::new(ab, seed),
            ba: Dir::new(ba, !seed),
            relay,
            rng: Rng(seed.rotate_left(17) ^ 0x5eed),
        }
    }

    /// Acts at random until both directions have delivered everything,
    /// telling `beat` each step.
    fn go(mut self, beat: &Beat) {
        let start = Instant::now();
        let mut last = start;
        let actions = if self.relay.is_some() { 10 } else { 8 };
        let mut steps = 0u64;
        while !(self.ab.finished() && self.ba.finished()) {
            let now = Instant::now();
            assert!(
                now.duration_since(last) < STALL && steps < 50_000_000,
                "no progress for {:?} after {steps} steps\n  A to B: {}\n  B to A: {}\n  \
                 A: {:?}, B: {:?}",
                now.duration_since(last),
                self.ab.state(),
                self.ba.state(),
                self.a,
                self.b
            );
            steps += 1;
            let rng = &mut self.rng;
            let action = rng.below(actions);
            beat.action
                .store(action as u64, tandem_core::sync::Ordering::Relaxed);
            beat.steps
                .store(steps, tandem_core::sync::Ordering::Relaxed);
            let did = match action {
                0 => send(&mut self.a, &mut self.ab),
                1 => push_stream(&mut self.a, &mut self.ab),
                2 => {
                    self.a.flush();
                    false
                }
                3 => receive(&mut self.b, &mut self.ab, rng),
                4 => send(&mut self.b, &mut self.ba),
                5 => push_stream(&mut self.b, &mut self.ba),
                6 => {
                    self.b.flush();
                    false
                }
                7 => receive(&mut self.a, &mut self.ba, rng),
                8 => {
                    let r = self.relay.as_mut().expect("relayed");
                    hop(&r.ra, &r.rb, &mut r.ab, &mut self.ab, rng)
                }
                _ => {
                    let r = self.relay.as_mut().expect("relayed");
                    hop(&r.rb, &r.ra, &mut r.ba, &mut self.ba, rng)
                }
            };
            if did {
                last = now;
            }
        }
        beat.action
            .store(u64::MAX, tandem_core::sync::Ordering::Relaxed);
        beat.steps
            .fetch_add(1, tandem_core::sync::Ordering::Relaxed);
        if let Some(r) = &self.relay {
            for (d, pending) in [(&self.ab, &r.ab), (&self.ba, &r.ba)] {
                assert!(pending.is_empty() && d.wire.bytes.is_empty());
                assert_eq!(
                    (d.wire.msgs, d.wire.stream),
                    (d.msgs.len(), d.streams.len())
                );
            }
        }
        for link in [&mut self.a, &mut self.b] {
            assert_alive(link);
            assert_eq!(link.tx_start, link.tx_end, "messages still queued");
            assert!(!link.chunk_in_flight(), "a chunk still in flight");
            assert_eq!(link.buffered(), 0, "bytes still buffered");
            assert_eq!(link.in_chunk_left, 0, "a chunk still arriving");
            let mut out = [0u8; PEEK_LEN];
            assert_eq!(link.peek(&mut out), Peek::Nothing, "an arrival nobody sent");
        }
    }
}

impl Drop for Run {
    /// Cuts both links first, so that dropping them (after a run, or while
    /// a failed one unwinds) does not wait seconds for a peer that no
    /// longer reads or acknowledges: the gentle close has a test of its own.
    fn drop(&mut self) {
        self.a.shutdown();
        self.b.shutdown();
    }
}

/// Eager limits: below a descriptor (a body is then at most DESC_LEN), the
/// default-ish sizes, and one whose frames outgrow the 64 KiB minimum buffer
/// (a largest message then fills the send buffer exactly).
fn eager_limit() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), Just(100), Just(4096), Just(70_000)]
}

fn item(eager: usize) -> impl Strategy<Value = Item> {
    let max_body = eager.max(DESC_LEN);
    prop_oneof![
        6 => (0..=max_body.min(64)).prop_map(Item::Msg),
        2 => (0..=max_body).prop_map(Item::Msg),
        1 => Just(Item::Msg(max_body)),
        1 => Just(Item::Msg(DESC_LEN)),
        2 => (1..=8192usize).prop_map(Item::Stream),
        1 => (1..=2 * CHUNK + 1000).prop_map(Item::Stream),
        1 => prop_oneof![Just(CHUNK - 1), Just(CHUNK), Just(CHUNK + 1), Just(2 * CHUNK)]
            .prop_map(Item::Stream),
    ]
}

fn items(eager: usize, n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Item>> {
    proptest::collection::vec(item(eager), n)
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(40))]

    /// One way, through a relay that moves random amounts: the sender's
    /// writes stop at random offsets (in prefixes, messages, chunks), the
    /// receiver sees frames cut anywhere, and the wire is parsed frame by
    /// frame.
    #[test]
    fn one_way_frames_survive_random_partial_writes(
        (eager, script, seed) in eager_limit()
            .prop_flat_map(|e| (Just(e), items(e, 1..24), any::<u64>())),
    ) {
        let case = format!("eager {eager}, seed {seed:#x}, {script:?}");
        watched(10, case, move |b| Run::new(eager, &script, &[], seed, true).go(b));
    }

    /// Both ways at once, each side sending messages and streams, over a
    /// direct connection (kernel buffers fill while the other direction is
    /// busy) or through the relay: headers are queued while chunks are half
    /// written in both directions.
    #[test]
    fn both_ways_busy_with_full_buffers(
        (eager, ab, ba, seed, relay) in eager_limit().prop_flat_map(|e| (
            Just(e),
            items(e, 1..16),
            items(e, 1..16),
            any::<u64>(),
            any::<bool>(),
        )),
    ) {
        // Make sure each direction has a stream that outgrows the kernel
        // buffers, with messages behind it to queue mid-chunk.
        let mut ab = ab;
        let mut ba = ba;
        for (d, s) in [(&mut ab, seed as usize), (&mut ba, (seed >> 32) as usize)] {
            let at = s % (d.len() + 1);
            let tail = [Item::Stream(CHUNK + 1 + s % CHUNK), Item::Msg(s % DESC_LEN), Item::Msg(0)];
            for (j, it) in tail.into_iter().enumerate() {
                d.insert(at + j, it);
            }
        }
        let case = format!("eager {eager}, seed {seed:#x}, relay {relay}, {ab:?}, {ba:?}");
        watched(10, case, move |b| Run::new(eager, &ab, &ba, seed, relay).go(b));
    }
}

/// The case the module docs single out: a header queued while a chunk is
/// half written goes out right after that chunk, never inside it, and
/// before the next chunk.
#[test]
fn header_queued_mid_chunk_follows_that_chunk() {
    within(30, || {
        let (sa, sb) = tcp_pair();
        let mut a = TcpLink::new(sa, 1, 4096).expect("link A");
        let mut b = TcpLink::new(sb, 0, 4096).expect("link B");
        let data = bytes(11, 2 * CHUNK + 5000);
        let mut taken = a.stream_out(&MemDesc::NONE, 0, &data);
        assert!(
            a.chunk_in_flight() && taken < CHUNK,
            "the kernel took {taken} bytes at once: the chunk is not half written"
        );
        let h = header(12);
        assert!(a.try_send(&h, b"after the first chunk"));
        assert!(a.tx_end > a.tx_start, "the header was not queued");
        let mut buf = vec![0u8; data.len()];
        let mut got = 0;
        let mut seen = false;
        let end = Instant::now() + Duration::from_secs(10);
        while got < data.len() || !seen {
            assert!(
                Instant::now() < end,
                "stuck at {got} bytes, header seen: {seen}"
            );
            taken += a.stream_out(&MemDesc::NONE, taken, &data[taken..]);
            a.flush();
            got += b.stream_in(data.len() - got, Some(&mut buf[got..]));
            let mut out = [0u8; PEEK_LEN];
            if b.peek(&mut out) == Peek::Header {
                assert_eq!(got, CHUNK, "the header came after {got} stream bytes");
                assert_eq!(out[..HEADER_LEN], h);
                let mut body = [0u8; 21];
                assert!(b.consume(&out, 21, &mut body), "read whole");
                assert_eq!(&body, b"after the first chunk");
                seen = true;
            }
            assert_alive(&mut b);
        }
        assert!(buf == data, "stream altered");
    });
}

/// A stream whose rest is dropped (its receive was withdrawn) while its
/// chunk is still on its way: `stream_in(.., None)` drops what is there and
/// returns; it does not wait for the sender to write the rest.
#[test]
fn dropping_a_stream_does_not_wait_for_the_rest_of_its_chunk() {
    within(20, || {
        let (mut raw, s) = tcp_pair();
        let mut link = TcpLink::new(s, PEER, 4096).expect("link");
        raw.write_all(&prefix(b'D', 1000)).unwrap();
        raw.write_all(&[1; 400]).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        let mut got = 0;
        while got < 400 {
            assert!(Instant::now() < end, "only {got} of 400 bytes arrived");
            got += link.stream_in(1000 - got, None);
        }
        assert_eq!(got, 400);
        assert_eq!(link.stream_in(600, None), 0, "nothing more is there");
        raw.write_all(&[2; 600]).unwrap();
        let h = header(3);
        raw.write_all(&message_frame(&h, b"next")).unwrap();
        while got < 1000 {
            assert!(Instant::now() < end, "only {got} of 1000 bytes arrived");
            got += link.stream_in(1000 - got, None);
        }
        assert_eq!(got, 1000);
        let mut out = [0u8; PEEK_LEN];
        while link.peek(&mut out) != Peek::Header {
            assert!(
                Instant::now() < end,
                "the message after the stream never came"
            );
        }
        assert_eq!(out[..HEADER_LEN], h);
        assert_alive(&mut link);
    });
}

/// A malformed frame prefix, and the detail its error must contain.
#[derive(Debug, Clone)]
enum Bad {
    /// A kind that is neither `M`, `D` nor `H`.
    Kind(u8, u32),
    /// A heartbeat (`H`) that claims a body: heartbeats have none.
    Heartbeat(u32),
    /// Nonzero padding after the kind.
    Padding(u8, [u8; 3], u32),
    /// A message frame longer than the largest allowed, or too short for a
    /// header.
    MsgLen(u32),
    /// A chunk longer than what is left of the stream (`.1`), or empty.
    Chunk(u32, usize),
}

/// Eager limit of the links the corrupt-frame tests feed.
const BAD_EAGER: usize = 4096;
const BAD_MAX_FRAME: usize = HEADER_LEN + BAD_EAGER;

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        (
            any::<u8>().prop_filter("not a frame kind", |k| ![b'M', b'D', b'H'].contains(k)),
            any::<u32>()
        )
            .prop_map(|(k, l)| Bad::Kind(k, l)),
        (1..=u32::MAX).prop_map(Bad::Heartbeat),
        (
            any::<u8>(),
            prop_oneof![
                any::<[u8; 3]>().prop_filter("padding not zero", |p| *p != [0; 3]),
                (1..=255u8).prop_map(|x| [x, 0, 0]),
                (1..=255u8).prop_map(|x| [0, x, 0]),
                (1..=255u8).prop_map(|x| [0, 0, x]),
            ],
            any::<u32>()
        )
            .prop_map(|(k, p, l)| Bad::Padding(k, p, l)),
        prop_oneof![
            Just(BAD_MAX_FRAME as u32 + 1),
            Just(u32::MAX),
            (BAD_MAX_FRAME as u32 + 1..),
            (0..HEADER_LEN as u32),
        ]
        .prop_map(Bad::MsgLen),
        (1usize..100_000)
            .prop_flat_map(|left| (
                prop_oneof![Just(0u32), Just(left as u32 + 1), (left as u32 + 1..)],
                Just(left)
            ))
            .prop_map(|(l, left)| Bad::Chunk(l, left)),
    ]
}

impl Bad {
    fn prefix(&self) -> [u8; PREFIX] {
        match *self {
            Bad::Kind(k, l) => prefix(k, l),
            Bad::Heartbeat(l) => prefix(b'H', l),
            Bad::Padding(k, pad, l) => {
                let mut p = prefix(k, l);
                p[1..4].copy_from_slice(&pad);
                p
            }
            Bad::MsgLen(l) => prefix(b'M', l),
            Bad::Chunk(l, _) => prefix(b'D', l),
        }
    }

    /// Texts the error's detail must contain.
    fn names(&self) -> Vec<String> {
        match *self {
            Bad::Kind(k, _) => vec!["unknown TCP frame kind".into(), format!("{k:#04x}")],
            Bad::Padding(..) | Bad::Heartbeat(_) => vec![
                "corrupt TCP frame prefix".into(),
                format!("{:02x?}", self.prefix()),
            ],
            Bad::MsgLen(l) => vec![
                format!("TCP message frame of {l} bytes"),
                format!("at most {BAD_MAX_FRAME}"),
            ],
            Bad::Chunk(l, left) => vec![format!(
                "TCP stream chunk of {l} bytes where {left} were expected"
            )],
        }
    }
}

/// One look at `link` as a receiver expecting a stream of `stream` bytes
/// (and maybe a message first) would take: delivered messages (header and
/// body; the body length is in the header's first four bytes) go to
/// `delivered`.
fn look(link: &mut TcpLink, stream: Option<usize>, delivered: &mut Vec<Vec<u8>>) {
    let mut out = [0u8; PEEK_LEN];
    match link.peek(&mut out) {
        Peek::Header => {
            let n = u32::from_le_bytes(out[..4].try_into().expect("4 bytes")) as usize;
            let mut body = vec![0u8; n];
            assert!(link.body_ready(n));
            assert!(link.consume(&out, n, &mut body), "read whole");
            let mut m = out[..HEADER_LEN].to_vec();
            m.extend_from_slice(&body);
            delivered.push(m);
        }
        Peek::StreamData => {
            let left = stream.expect("stream data where none was sent");
            let mut buf = vec![0u8; left];
            assert_eq!(link.stream_in(left, Some(&mut buf)), 0, "a bad chunk taken");
        }
        Peek::Nothing => {}
    }
}

/// Looks at `link` until it breaks; returns its error.
fn until_broken(link: &mut TcpLink, stream: Option<usize>, delivered: &mut Vec<Vec<u8>>) -> Error {
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        look(link, stream, delivered);
        if let Liveness::Lost(e) = link.liveness() {
            return e;
        }
        assert!(Instant::now() < end, "the link neither broke nor delivered");
        std::thread::yield_now();
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// A corrupt prefix, arriving whole or cut in two, after a valid message
    /// or not, breaks the link with a protocol error naming it: the message
    /// before it is delivered, nothing after it is, nothing panics or hangs,
    /// and the broken link stays quiet.
    #[test]
    fn corrupt_prefix_breaks_the_link_with_a_named_error(
        bad in bad(),
        message_first: bool,
        cut in 0..=PREFIX,
        trailing in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        within(30, move || {
            let (mut raw, s) = tcp_pair();
            let mut link = TcpLink::new(s, PEER, BAD_EAGER).expect("link");
            // A valid message first, its body length in its first header
            // bytes (how `until_broken` learns it).
            let mut h = header(5);
            h[..4].copy_from_slice(&9u32.to_le_bytes());
            if message_first {
                raw.write_all(&message_frame(&h, b"the first")).unwrap();
            }
            let stream = match bad {
                Bad::Chunk(_, left) => Some(left),
                _ => None,
            };
            let mut delivered = Vec::new();
            let p = bad.prefix();
            raw.write_all(&p[..cut]).unwrap();
            if cut < PREFIX {
                // Part of a prefix is no error: the link waits for the rest.
                for _ in 0..20 {
                    look(&mut link, stream, &mut delivered);
                }
                assert_alive(&mut link);
                raw.write_all(&p[cut..]).unwrap();
            }
            raw.write_all(&trailing).unwrap();
            let e = until_broken(&mut link, stream, &mut delivered);
            let Error::Protocol { peer, detail } = &e else {
                panic!("{bad:?}: not a protocol error: {e:?}");
            };
            assert_eq!(*peer, PEER);
            for name in bad.names() {
                assert!(detail.contains(&name), "{bad:?}: {detail:?} does not say {name:?}");
            }
            let expected: Vec<Vec<u8>> = if message_first {
                vec![[&h[..], b"the first"].concat()]
            } else {
                Vec::new()
            };
            assert_eq!(delivered, expected, "{bad:?}: what was delivered");
            // Broken for good, quietly.
            let mut out = [0u8; PEEK_LEN];
            let mut buf = [0u8; 16];
            for _ in 0..3 {
                assert_ne!(link.peek(&mut out), Peek::Header);
                assert_eq!(link.stream_in(16, Some(&mut buf)), 0);
                assert!(!link.try_send(&h, b"more"));
                assert_eq!(link.stream_out(&MemDesc::NONE, 0, &[0; 100]), 0);
                assert_eq!(link.liveness(), Liveness::Lost(e.clone()));
            }
        });
    }
}

/// A frame shorter than its header's body (an RTS without its descriptor)
/// is refused by `body_ready`, before the header is acted on.
#[test]
fn a_frame_shorter_than_its_body_is_refused_before_it_is_acted_on() {
    within(20, || {
        let (mut raw, s) = tcp_pair();
        let mut link = TcpLink::new(s, PEER, 4096).expect("link");
        raw.write_all(&message_frame(&header(0), b"")).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        let mut out = [0u8; PEEK_LEN];
        while link.peek(&mut out) != Peek::Header {
            assert!(Instant::now() < end, "the message never came");
        }
        assert!(
            !link.body_ready(DESC_LEN),
            "a header-only frame cannot hold a descriptor"
        );
        match link.liveness() {
            Liveness::Lost(Error::Protocol { detail, .. }) => assert!(
                detail.contains(&format!(
                    "TCP frame of {HEADER_LEN} bytes for a message with a {DESC_LEN}-byte body"
                )),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(!link.body_ready(0), "a failed link has nothing ready");
    });
}

/// `consume` told a body length its frame does not have breaks the link.
#[test]
fn consume_with_the_wrong_body_length_is_a_protocol_error() {
    within(20, || {
        let (mut raw, s) = tcp_pair();
        let mut link = TcpLink::new(s, PEER, 4096).expect("link");
        raw.write_all(&message_frame(&header(1), b"ten bytes!"))
            .unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        let mut out = [0u8; PEEK_LEN];
        while link.peek(&mut out) != Peek::Header {
            assert!(Instant::now() < end, "the message never came");
        }
        let mut body = [0u8; 11];
        assert!(
            !link.consume(&out, 11, &mut body),
            "a frame that contradicts its header is not read"
        );
        match link.liveness() {
            Liveness::Lost(Error::Protocol { peer, detail }) => {
                assert_eq!(peer, PEER);
                assert!(
                    detail.contains("TCP frame of 42 bytes for a message with a 11-byte body"),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
    });
}

/// A peer that closes after sending delivers everything it sent (a whole
/// message, part of a chunk), then is lost.
#[test]
fn closed_peer_is_lost_after_its_bytes_are_delivered() {
    within(20, || {
        let (mut raw, s) = tcp_pair();
        let mut link = TcpLink::new(s, PEER, 4096).expect("link");
        let h = header(2);
        raw.write_all(&message_frame(&h, b"last words")).unwrap();
        raw.write_all(&prefix(b'D', 100)).unwrap();
        raw.write_all(&[7; 60]).unwrap();
        drop(raw);
        let end = Instant::now() + Duration::from_secs(5);
        let mut out = [0u8; PEEK_LEN];
        while link.peek(&mut out) != Peek::Header {
            assert!(Instant::now() < end, "the message never came");
        }
        assert_eq!(out[..HEADER_LEN], h);
        let mut body = [0u8; 10];
        assert!(link.consume(&out, 10, &mut body), "read whole");
        assert_eq!(&body, b"last words");
        let mut buf = [0u8; 100];
        let mut got = 0;
        while link.liveness() == Liveness::Alive || got < 60 {
            assert!(Instant::now() < end, "{got} of 60 stream bytes, {link:?}");
            got += link.stream_in(100 - got, Some(&mut buf[got..]));
        }
        assert_eq!(got, 60);
        assert_eq!(buf[..60], [7; 60]);
        assert_eq!(
            link.liveness(),
            Liveness::Lost(Error::PeerLost { rank: PEER })
        );
        assert_eq!(link.stream_in(40, Some(&mut buf[60..])), 0);
        assert_ne!(link.peek(&mut out), Peek::Header);
    });
}

/// A peer that resets the connection (it closed with our bytes unread) is
/// lost, whether the link learns it by watching or by writing.
#[test]
fn reset_peer_is_lost() {
    within(20, || {
        for by_writing in [false, true] {
            let (raw, s) = tcp_pair();
            let mut link = TcpLink::new(s, PEER, 4096).expect("link");
            assert!(link.try_send(&header(4), b"never read"));
            let end = Instant::now() + Duration::from_secs(5);
            while sys::unacked_bytes(link.fd) != Some(0) {
                assert!(Instant::now() < end, "the message never left");
            }
            // Closing with unread input sends a reset.
            drop(raw);
            loop {
                assert!(Instant::now() < end, "the reset went unnoticed: {link:?}");
                if by_writing {
                    link.try_send(&header(5), b"into the void");
                    if link.failed.is_some() {
                        break;
                    }
                } else if link.liveness() != Liveness::Alive {
                    break;
                }
                std::thread::yield_now();
            }
            assert_eq!(
                link.liveness(),
                Liveness::Lost(Error::PeerLost { rank: PEER }),
                "learnt by writing: {by_writing}"
            );
        }
    });
}

/// Dropping a link with messages still queued (the kernel buffers full)
/// sends them all before the connection ends.
#[test]
fn dropping_a_link_sends_what_it_queued() {
    within(30, || {
        let (sa, sb) = tcp_pair();
        let mut a = TcpLink::new(sa, 1, 4096).expect("link A");
        let mut b = TcpLink::new(sb, 0, 4096).expect("link B");
        let body = bytes(6, 1000);
        let frame = PREFIX + HEADER_LEN + body.len();
        let mut sent = 0u32;
        while a.try_send(&header(u64::from(sent)), &body) {
            sent += 1;
            assert!(sent < 1000, "the kernel buffers never filled");
        }
        // Refused for want of room: at least 64 KiB of messages queue up
        // while the kernel is full.
        let queued = a.tx_end - a.tx_start;
        assert!(
            queued + frame > 64 * 1024,
            "only {queued} bytes of messages queued"
        );
        let dropper = std::thread::spawn(move || drop(a));
        let end = Instant::now() + Duration::from_secs(10);
        let mut got = 0u32;
        let mut out = [0u8; PEEK_LEN];
        let mut buf = vec![0u8; body.len()];
        while got < sent {
            assert!(Instant::now() < end, "{got} of {sent} messages, {b:?}");
            match b.peek(&mut out) {
                Peek::Header => {
                    assert_eq!(out[..HEADER_LEN], header(u64::from(got)), "message {got}");
                    assert!(b.consume(&out, body.len(), &mut buf), "read whole");
                    assert!(buf == body, "message {got}: body");
                    got += 1;
                }
                Peek::StreamData => panic!("stream data"),
                Peek::Nothing => assert_alive(&mut b),
            }
        }
        while b.liveness() == Liveness::Alive {
            assert!(Instant::now() < end, "the connection never ended");
            let _ = b.peek(&mut out);
        }
        assert_eq!(b.liveness(), Liveness::Lost(Error::PeerLost { rank: 0 }));
        dropper.join().expect("drop");
    });
}

/// What the peer sent and this side already read is still delivered after
/// the link failed (here a write found the peer had reset the connection):
/// the message, then the stream bytes; then nothing more.
#[test]
fn bytes_read_before_a_failure_are_still_delivered() {
    within(20, || {
        let (mut raw, s) = tcp_pair();
        let mut link = TcpLink::new(s, PEER, 4096).expect("link");
        let h = header(8);
        raw.write_all(&message_frame(&h, b"ten bytes!")).unwrap();
        raw.write_all(&prefix(b'D', 100)).unwrap();
        raw.write_all(&[9; 60]).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        let mut out = [0u8; PEEK_LEN];
        while link.buffered() < PREFIX + 42 + PREFIX + 60 {
            assert!(Instant::now() < end, "only {} bytes read", link.buffered());
            let _ = link.peek(&mut out);
        }
        // A message the peer never reads, so that its close is a reset.
        assert!(link.try_send(&header(9), b"never read"));
        while sys::unacked_bytes(link.fd) != Some(0) {
            assert!(Instant::now() < end, "the message never left");
        }
        drop(raw);
        while link.failed.is_none() {
            assert!(Instant::now() < end, "the reset went unnoticed: {link:?}");
            link.try_send(&header(10), b"into the void");
            std::thread::yield_now();
        }
        assert_eq!(
            link.liveness(),
            Liveness::Lost(Error::PeerLost { rank: PEER })
        );
        assert_eq!(link.peek(&mut out), Peek::Header);
        assert_eq!(out[..HEADER_LEN], h);
        let mut body = [0u8; 10];
        assert!(link.consume(&out, 10, &mut body), "read whole");
        assert_eq!(&body, b"ten bytes!");
        assert_eq!(link.peek(&mut out), Peek::StreamData);
        let mut buf = [0u8; 100];
        assert_eq!(link.stream_in(100, Some(&mut buf)), 60);
        assert_eq!(buf[..60], [9; 60]);
        assert_eq!(link.stream_in(40, Some(&mut buf[60..])), 0);
    });
}

/// `shutdown` cuts the link: the peer is lost to the other side, and this
/// side can no longer send.
#[test]
fn shutdown_cuts_the_link() {
    within(20, || {
        let (sa, sb) = tcp_pair();
        let mut a = TcpLink::new(sa, 1, 4096).expect("link A");
        let mut b = TcpLink::new(sb, 0, 4096).expect("link B");
        a.shutdown();
        let end = Instant::now() + Duration::from_secs(5);
        let mut out = [0u8; PEEK_LEN];
        while b.liveness() == Liveness::Alive {
            assert!(Instant::now() < end, "the shutdown went unnoticed");
            assert_eq!(b.peek(&mut out), Peek::Nothing);
        }
        assert_eq!(b.liveness(), Liveness::Lost(Error::PeerLost { rank: 0 }));
        while a.liveness() == Liveness::Alive {
            assert!(Instant::now() < end, "a shut link still sends");
            a.try_send(&header(1), b"after the end");
        }
        assert_eq!(a.liveness(), Liveness::Lost(Error::PeerLost { rank: 1 }));
    });
}

/// A read that fills the receive buffer to its very end, cutting a message
/// in two, moves the cut message to the front before reading on: with
/// default (large) kernel buffers, the receiver's first read takes a whole
/// buffer of 1,000-byte messages (whose frames do not divide it), and every
/// message still arrives, in order.
#[test]
fn a_message_cut_by_a_full_receive_buffer_is_moved_up_and_completed() {
    within(30, || {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let sa = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let (sb, _) = listener.accept().expect("accept");
        let mut a = TcpLink::new(sa, 1, 4096).expect("link A");
        let mut b = TcpLink::new(sb, 0, 4096).expect("link B");
        let body = bytes(9, 1000);
        let frame = PREFIX + HEADER_LEN + body.len();
        let cap = b.rx.len();
        assert_ne!(cap % frame, 0, "frames must not divide the buffer");
        // More than a buffer's worth in the kernel before B reads at all.
        let n = (cap / frame + 1) as u64 * 2;
        let end = Instant::now() + Duration::from_secs(10);
        let mut sent = 0u64;
        while sent < n {
            assert!(Instant::now() < end, "only {sent} of {n} messages went out");
            if a.try_send(&header(sent), &body) {
                sent += 1;
            } else {
                a.flush();
            }
        }
        while a.tx_start != a.tx_end {
            assert!(Instant::now() < end, "the send buffer never emptied");
            a.flush();
        }
        let mut out = [0u8; PEEK_LEN];
        let mut buf = vec![0u8; body.len()];
        let mut got = 0u64;
        let mut filled_to_the_end = false;
        while got < n {
            assert!(Instant::now() < end, "{got} of {n} messages, {b:?}");
            match b.peek(&mut out) {
                Peek::Header => {
                    filled_to_the_end |= b.rx_end == cap && b.rx_start > 0;
                    assert_eq!(out[..HEADER_LEN], header(got), "message {got}");
                    assert!(b.body_ready(body.len()));
                    assert!(b.consume(&out, body.len(), &mut buf), "read whole");
                    assert!(buf == body, "message {got}: body");
                    got += 1;
                }
                Peek::StreamData => panic!("stream data"),
                Peek::Nothing => assert_alive(&mut b),
            }
        }
        assert!(filled_to_the_end, "no read filled the buffer to its end");
    });
}

/// A link's `Debug` names its peer and its failure (what hang reports and
/// test failures print).
#[test]
fn a_link_debug_names_its_peer_and_failure() {
    let (sa, _sb) = tcp_pair();
    let mut a = TcpLink::new(sa, 3, 4096).expect("link");
    assert_eq!(format!("{a:?}"), "TcpLink { peer: 3, failed: None }");
    a.protocol("test".into());
    assert!(format!("{a:?}").contains("failed: Some(Protocol"), "{a:?}");
}
