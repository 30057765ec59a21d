//! A simulated transport for the deterministic simulation tests of the
//! progress layer (`progress::sim_tests`); compiled only for tests.
//!
//! All ranks of a simulated job live in one thread. Every ordered pair of
//! ranks (a rank and itself included) has a [`Pipe`]: one FIFO of frames,
//! messages (header and body) and rendezvous stream chunks, exactly the
//! order a TCP connection keeps. The pipes of a job sit in one [`Net`]
//! that every [`SimLink`] shares (an `Arc<Mutex<..>>` only because an
//! engine must be `Send`; one thread uses it), with one seeded
//! generator deciding everything the transport may legally vary:
//!
//! * back-pressure: a pipe holds at most `cap` bytes, and after a send it
//!   may "jam" for a few calls ([`Transport::room`] and
//!   [`Transport::try_send`] refuse; `room` and the `try_send` right after
//!   it always agree, as the fast path of a blocking send relies on);
//! * delay: [`Transport::peek`] may report nothing although a frame is
//!   queued, and [`Transport::body_ready`] may say the body is not there yet;
//! * partial streams: [`Transport::stream_out`] takes, and
//!   [`Transport::stream_in`] delivers, any part of what was offered
//!   (nothing included);
//! * pulls, per link: never (the sender streams), at once (as cross-memory
//!   attach does), or later through [`Transport::poll_pulls`] (as an RDMA
//!   READ does, with [`Transport::places_directly`]);
//! * peer death ([`Net::kill`]): the dead rank's frames already queued are
//!   still delivered, what is sent to it is dropped, and
//!   [`Transport::liveness`] says `Lost` either at once (as shared memory
//!   does, with the dead rank's frames then delivered without delay) or
//!   once its frames were all taken (as TCP does).
//!
//! The net also checks the progress layer's side of the contract: every
//! [`Transport::release`] matches a [`Transport::describe`] (or a pending
//! pull), a stream never runs past the buffer its CTS described, consumed
//! bodies have the length of their header. What it finds goes to
//! [`Net::violations`].
//!
//! A [`Fault`] makes the transport deliberately illegal (drop, duplicate,
//! swap or corrupt a message once), so the tests can prove their oracles
//! catch a broken layer below the progress engine.

use super::{Kind, Liveness, MemDesc, Peek, PullStart, Route, Transport, DESC_LEN, PEEK_LEN};
use crate::error::Error;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tandem_core::wire::HEADER_LEN;

/// The net as its links and the tests share it.
pub type Shared = Arc<Mutex<Net>>;

/// Locks the net (a panic that poisoned it is a test failure already
/// reported).
pub fn lock(net: &Shared) -> MutexGuard<'_, Net> {
    net.lock().unwrap_or_else(|e| e.into_inner())
}

/// The workspace's one seeded generator (`tandem_core::rng`).
pub use tandem_core::rng::SplitMix64 as Rng;

/// The simulation's generator for `seed` (offset, so its streams differ
/// from other users' of the same seed, as they always have).
pub fn rng(seed: u64) -> Rng {
    Rng(seed ^ 0x6a09_e667_f3bc_c908)
}

/// How a link serves the pulls of rendezvous receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullMode {
    /// Never: the sender streams.
    Stream,
    /// At once, like cross-memory attach.
    Now,
    /// Later, through `poll_pulls`, like an RDMA READ (the link then
    /// places directly).
    Later,
}

/// A deliberately illegal behaviour, applied once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// None: a legal transport.
    None,
    /// An eager message with a payload is silently dropped.
    Drop,
    /// An eager message with a payload is delivered twice.
    Duplicate,
    /// A message overtakes the message queued before it in its pipe (the
    /// core's hold-back puts matching messages back in sequence; only two
    /// CTS swapped would mix up streams).
    Swap,
    /// A stream chunk overtakes the chunk queued before it.
    SwapChunks,
    /// A payload byte of an eager message or a stream chunk is flipped.
    Corrupt,
    /// The sender of an eager message dies in the middle of writing it (as
    /// a shared-memory sender between the pieces of a cell): `consume`
    /// reports the message torn, and the peer is lost with nothing after it.
    Tear,
}

/// What the seeded transport may do.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Bytes a pipe holds (frames count their header and an 8-byte prefix).
    pub cap: usize,
    /// Per mille: `peek` / `body_ready` / `stream_in` pretend nothing
    /// arrived yet.
    pub delay: u32,
    /// Per mille: a pipe jams after a send, refusing a few calls.
    pub jam: u32,
    /// Per mille: a stream call moves only part of what it could.
    pub partial: u32,
    /// Per mille: a pending pull completes on a `poll_pulls` call.
    pub pull_done: u32,
    /// A dead peer is reported lost at once (shared memory) rather than
    /// once its frames were taken (TCP).
    pub lost_at_once: bool,
    /// How each link (by receiving rank and peer, `me * n + peer`) pulls.
    pub pulls: Vec<PullMode>,
    /// A deliberate fault, and how many eligible frames pass before it.
    pub fault: Fault,
    /// Eligible frames that pass before the fault strikes.
    pub fault_after: u32,
}

/// Overhead counted per frame (like TCP's frame prefix).
const FRAME: usize = 8;

enum Frame {
    Msg {
        head: [u8; HEADER_LEN],
        body: Vec<u8>,
    },
    Data(Vec<u8>),
}

impl Frame {
    fn size(&self) -> usize {
        match self {
            Frame::Msg { body, .. } => FRAME + HEADER_LEN + body.len(),
            Frame::Data(d) => d.len(),
        }
    }
}

/// One direction between two ranks.
#[derive(Default)]
struct Pipe {
    frames: VecDeque<Frame>,
    bytes: usize,
    /// Calls still refused (back-pressure).
    jam: u32,
    /// Refuses everything until released ([`Net::hold`]).
    held: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Reg {
    addr: u64,
    len: usize,
    writable: bool,
}

#[derive(Clone, Copy)]
struct PendingPull {
    dst: u64,
    len: usize,
    src: MemDesc,
}

/// The simulated network of one job: its pipes, the seeded generator and
/// what the tests control (death, calm, shutdown).
pub struct Net {
    n: usize,
    rng: Rng,
    opts: SimOptions,
    pipes: Vec<Pipe>,
    /// Registrations per link (`me * n + peer`).
    regs: Vec<Vec<Reg>>,
    /// Pulls started and not yet reported, per link.
    pulls: Vec<Vec<PendingPull>>,
    dead: Vec<bool>,
    /// No adversity: no delays, jams or partial moves (the tests switch it
    /// on to tell a real hang from bad luck).
    pub calm: bool,
    /// The run is over: every link reports its peer lost and drops what is
    /// sent, so dropping an engine never waits.
    pub shutdown: bool,
    /// Counts every frame and byte moved: unchanged means nothing moved.
    pub activity: u64,
    /// Breaches of the contract by the progress layer.
    pub violations: Vec<String>,
    /// Whether the fault struck.
    pub fault_fired: bool,
    /// Pulls started (at once or later).
    pub pulls_started: u64,
    fault_left: u32,
}

impl Net {
    /// A net of `n` ranks.
    pub fn new(n: usize, seed: u64, opts: SimOptions) -> Shared {
        assert_eq!(opts.pulls.len(), n * n);
        let fault_left = opts.fault_after;
        Arc::new(Mutex::new(Net {
            n,
            rng: rng(seed ^ 0x5eed_f0e7),
            opts,
            pipes: (0..n * n).map(|_| Pipe::default()).collect(),
            regs: vec![Vec::new(); n * n],
            pulls: vec![Vec::new(); n * n],
            dead: vec![false; n],
            calm: false,
            shutdown: false,
            activity: 0,
            violations: Vec::new(),
            fault_fired: false,
            pulls_started: 0,
            fault_left,
        }))
    }

    /// The links of rank `me`, one per peer (itself included).
    pub fn links(net: &Shared, me: usize) -> Vec<super::Link> {
        let n = lock(net).n;
        (0..n)
            .map(|peer| {
                super::Link::Sim(Box::new(SimLink {
                    net: net.clone(),
                    me,
                    peer,
                }))
            })
            .collect()
    }

    /// Rank `r` dies: it never runs again; what it queued stays queued.
    pub fn kill(&mut self, r: usize) {
        self.dead[r] = true;
        // Its memory can no longer be reached.
        for p in 0..self.n {
            self.pulls[r * self.n + p].clear();
        }
    }

    /// Makes the pipe from `from` to `to` refuse everything (a peer that
    /// does not read), or lets it go again.
    pub fn hold(&mut self, from: usize, to: usize, held: bool) {
        self.pipes[from * self.n + to].held = held;
    }

    /// Frames queued from `from` to `to`.
    pub fn queued(&self, from: usize, to: usize) -> usize {
        self.pipes[from * self.n + to].frames.len()
    }

    /// Registrations rank `me` still holds with `peer` (descriptions not
    /// released, pulls not reported or released): of buffers with bytes,
    /// and empty ones.
    pub fn registered(&self, me: usize, peer: usize) -> (usize, usize) {
        let regs = &self.regs[me * self.n + peer];
        let empty = regs.iter().filter(|r| r.len == 0).count();
        (regs.len() - empty, empty)
    }

    fn adverse(&mut self, per_mille: u32) -> bool {
        !self.calm && self.rng.chance_per_mille(per_mille)
    }

    /// Whether the fault strikes at this eligible frame.
    fn strike(&mut self, fault: Fault) -> bool {
        if self.opts.fault != fault || self.fault_fired {
            return false;
        }
        if self.fault_left > 0 {
            self.fault_left -= 1;
            return false;
        }
        self.fault_fired = true;
        true
    }
}

/// One rank's link to one peer over a [`Net`].
pub struct SimLink {
    net: Shared,
    me: usize,
    peer: usize,
}

impl SimLink {
    fn out(&self, n: usize) -> usize {
        self.me * n + self.peer
    }
    fn inn(&self, n: usize) -> usize {
        self.peer * n + self.me
    }
}

/// Whether a frame from `peer` is delivered without delay (a dead peer's
/// frames, when the net reports death at once: they are all there).
fn prompt(net: &Net, peer: usize) -> bool {
    net.calm || (net.dead[peer] && net.opts.lost_at_once)
}

impl Transport for SimLink {
    fn room(&mut self, bytes: usize) -> bool {
        let net = &mut *lock(&self.net);
        if net.shutdown || net.dead[self.peer] {
            return true;
        }
        let (cap, o) = (net.opts.cap, self.out(net.n));
        let calm = net.calm;
        let pipe = &mut net.pipes[o];
        if pipe.held {
            return false;
        }
        if pipe.jam > 0 && !calm {
            pipe.jam -= 1;
            return false;
        }
        pipe.bytes + FRAME + bytes <= cap
    }

    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        if !self.room(HEADER_LEN + body.len()) {
            return false;
        }
        let net = &mut *lock(&self.net);
        if net.shutdown || net.dead[self.peer] {
            return true;
        }
        net.activity += 1;
        let o = self.out(net.n);
        let eager = header[1] == tandem_core::wire::Kind::Eager as u8 && !body.is_empty();
        let mut body = body.to_vec();
        let mut copies = 1;
        if eager && net.strike(Fault::Drop) {
            copies = 0;
        } else if eager && net.strike(Fault::Duplicate) {
            copies = 2;
        } else if eager && net.strike(Fault::Corrupt) {
            body[0] ^= 0x40;
        }
        for _ in 0..copies {
            let f = Frame::Msg {
                head: *header,
                body: body.clone(),
            };
            net.pipes[o].bytes += f.size();
            net.pipes[o].frames.push_back(f);
        }
        let len = net.pipes[o].frames.len();
        if len >= 2
            && matches!(net.pipes[o].frames[len - 2], Frame::Msg { .. })
            && net.strike(Fault::Swap)
        {
            net.pipes[o].frames.swap(len - 2, len - 1);
        }
        let jam = net.opts.jam;
        if net.adverse(jam) {
            let j = net.rng.range(1, 4) as u32;
            net.pipes[o].jam = j;
        }
        true
    }

    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek {
        let net = &mut *lock(&self.net);
        if net.shutdown {
            return Peek::Nothing;
        }
        let i = self.inn(net.n);
        if net.pipes[i].frames.is_empty() {
            return Peek::Nothing;
        }
        let delay = net.opts.delay;
        if !prompt(net, self.peer) && net.rng.chance_per_mille(delay) {
            return Peek::Nothing;
        }
        match &net.pipes[i].frames[0] {
            Frame::Data(_) => Peek::StreamData,
            Frame::Msg { head, body } => {
                out[..HEADER_LEN].copy_from_slice(head);
                let n = body.len().min(DESC_LEN);
                out[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&body[..n]);
                Peek::Header
            }
        }
    }

    fn body_ready(&mut self, _body: usize) -> bool {
        let net = &mut *lock(&self.net);
        let delay = net.opts.delay / 2;
        prompt(net, self.peer) || !net.rng.chance_per_mille(delay)
    }

    fn consume(&mut self, peeked: &[u8; PEEK_LEN], body: usize, dst: &mut [u8]) -> bool {
        let net = &mut *lock(&self.net);
        let i = self.inn(net.n);
        let Some(Frame::Msg { head, body: b }) = net.pipes[i].frames.front() else {
            net.violations.push(format!(
                "rank {}: consume from {} without a message in front",
                self.me, self.peer
            ));
            return false;
        };
        if head[..] != peeked[..HEADER_LEN] || b.len() != body {
            let v = format!(
                "rank {}: consume from {} of a {body}-byte body for a frame with {} (or \
                 another header than peeked)",
                self.me,
                self.peer,
                b.len()
            );
            net.violations.push(v);
        }
        let eager = head[1] == tandem_core::wire::Kind::Eager as u8 && !b.is_empty();
        let n = dst.len().min(b.len());
        dst[..n].copy_from_slice(&b[..n]);
        if eager && net.strike(Fault::Tear) {
            // What `dst` holds must not count: the sender died before the
            // end, and nothing it sent after arrives.
            net.dead[self.peer] = true;
            net.pipes[i].frames.clear();
            net.pipes[i].bytes = 0;
            net.activity += 1;
            return false;
        }
        let f = net.pipes[i].frames.pop_front().expect("checked");
        net.pipes[i].bytes -= f.size();
        net.activity += 1;
        true
    }

    fn stream_out(&mut self, remote: &MemDesc, offset: usize, src: &[u8]) -> usize {
        let net = &mut *lock(&self.net);
        if net.shutdown || net.dead[self.peer] {
            return src.len();
        }
        if (remote.len as usize) < offset + src.len() {
            let v = format!(
                "rank {}: streams bytes {offset}..{} to rank {} into a buffer its CTS \
                 described as {} bytes",
                self.me,
                offset + src.len(),
                self.peer,
                remote.len
            );
            if !net.violations.contains(&v) {
                net.violations.push(v);
            }
        }
        let (cap, o) = (net.opts.cap, self.out(net.n));
        let calm = net.calm;
        if net.pipes[o].held {
            return 0;
        }
        if net.pipes[o].jam > 0 && !calm {
            net.pipes[o].jam -= 1;
            return 0;
        }
        let space = cap.saturating_sub(net.pipes[o].bytes);
        let mut n = src.len().min(space);
        let partial = net.opts.partial;
        if n > 0 && net.adverse(partial) {
            n = net.rng.below(n + 1);
        }
        if n == 0 {
            return 0;
        }
        let mut chunk = src[..n].to_vec();
        if net.strike(Fault::Corrupt) {
            chunk[0] ^= 0x40;
        }
        net.pipes[o].bytes += n;
        net.pipes[o].frames.push_back(Frame::Data(chunk));
        let len = net.pipes[o].frames.len();
        if len >= 2
            && matches!(net.pipes[o].frames[len - 2], Frame::Data(_))
            && net.strike(Fault::SwapChunks)
        {
            net.pipes[o].frames.swap(len - 2, len - 1);
        }
        net.activity += 1;
        let jam = net.opts.jam;
        if net.adverse(jam / 2) {
            let j = net.rng.range(1, 3) as u32;
            net.pipes[o].jam = j;
        }
        n
    }

    fn stream_in(&mut self, left: usize, mut dst: Option<&mut [u8]>) -> usize {
        let net = &mut *lock(&self.net);
        if net.shutdown {
            return 0;
        }
        let i = self.inn(net.n);
        let quick = prompt(net, self.peer);
        let partial = net.opts.partial;
        let delay = net.opts.delay;
        if !quick && net.rng.chance_per_mille(delay / 2) {
            return 0;
        }
        let mut want = left;
        if !quick && net.rng.chance_per_mille(partial) {
            want = net.rng.below(left + 1);
        }
        let mut taken = 0;
        let pipe = &mut net.pipes[i];
        while taken < want {
            let Some(Frame::Data(d)) = pipe.frames.front_mut() else {
                break;
            };
            let k = d.len().min(want - taken);
            if let Some(dst) = dst.as_deref_mut() {
                dst[taken..taken + k].copy_from_slice(&d[..k]);
            }
            d.drain(..k);
            let empty = d.is_empty();
            taken += k;
            pipe.bytes -= k;
            if empty {
                pipe.frames.pop_front();
            }
        }
        if taken > 0 {
            net.activity += 1;
        }
        taken
    }

    fn describe(&mut self, buf: &[u8], writable: bool) -> MemDesc {
        let net = &mut *lock(&self.net);
        let o = self.out(net.n);
        let r = Reg {
            addr: buf.as_ptr() as u64,
            len: buf.len(),
            writable,
        };
        net.regs[o].push(r);
        MemDesc {
            addr: r.addr,
            len: r.len as u64,
            key: 0x51,
        }
    }

    fn release(&mut self, addr: u64, len: usize, writable: bool) {
        let net = &mut *lock(&self.net);
        let o = self.out(net.n);
        let want = Reg {
            addr,
            len,
            writable,
        };
        match net.regs[o].iter().position(|r| *r == want) {
            Some(k) => {
                net.regs[o].swap_remove(k);
            }
            None => {
                let v = format!(
                    "rank {}: release of {len} bytes at {addr:#x} (writable {writable}) \
                     toward rank {} that nothing describes",
                    self.me, self.peer,
                );
                net.violations.push(v);
            }
        }
        // From here on the peer can no longer write there: a pull into it
        // that has not completed never will.
        if writable {
            net.pulls[o].retain(|p| p.dst != addr);
        }
    }

    fn places_directly(&self) -> bool {
        let net = lock(&self.net);
        net.opts.pulls[self.out(net.n)] == PullMode::Later
    }

    fn start_pull(&mut self, remote: MemDesc, dst: &mut [u8]) -> PullStart {
        let net = &mut *lock(&self.net);
        let o = self.out(net.n);
        let mode = net.opts.pulls[o];
        if mode == PullMode::Stream || net.shutdown {
            return PullStart::Unsupported;
        }
        // The sender's buffer must be described to us, readable.
        let theirs = self.inn(net.n);
        let ok = net.regs[theirs]
            .iter()
            .any(|r| r.addr == remote.addr && r.len as u64 == remote.len && !r.writable);
        if !ok || net.dead[self.peer] || remote.len < dst.len() as u64 {
            return PullStart::Unsupported;
        }
        net.activity += 1;
        net.pulls_started += 1;
        match mode {
            PullMode::Now => {
                // SAFETY: the sender described this buffer and has not
                // released it (checked above); the simulation keeps every
                // send buffer alive, unchanged, for the whole run, and runs
                // in one thread.
                let src =
                    unsafe { std::slice::from_raw_parts(remote.addr as *const u8, dst.len()) };
                dst.copy_from_slice(src);
                PullStart::Done
            }
            _ => {
                net.regs[o].push(Reg {
                    addr: dst.as_ptr() as u64,
                    len: dst.len(),
                    writable: true,
                });
                net.pulls[o].push(PendingPull {
                    dst: dst.as_ptr() as u64,
                    len: dst.len(),
                    src: remote,
                });
                PullStart::Pending
            }
        }
    }

    fn poll_pulls(&mut self, done: &mut dyn FnMut(u64, bool)) {
        let mut finished = Vec::new();
        {
            let net = &mut *lock(&self.net);
            let (o, theirs) = (self.out(net.n), self.inn(net.n));
            let odds = net.opts.pull_done;
            let mut k = 0;
            while k < net.pulls[o].len() {
                if !(net.calm || net.rng.chance_per_mille(odds)) {
                    k += 1;
                    continue;
                }
                let p = net.pulls[o].swap_remove(k);
                let src = p.src;
                let readable = net.regs[theirs]
                    .iter()
                    .any(|r| r.addr == src.addr && r.len as u64 == src.len && !r.writable);
                if readable {
                    // SAFETY: as in `start_pull`; the destination is the
                    // receive buffer described to the "NIC" at start, which
                    // has not been released (release drops the pull).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.addr as *const u8,
                            p.dst as *mut u8,
                            p.len,
                        );
                    }
                }
                net.activity += 1;
                finished.push((p.dst, readable));
            }
        }
        for (dst, ok) in finished {
            done(dst, ok);
        }
    }

    fn liveness(&mut self) -> Liveness {
        let net = &*lock(&self.net);
        let lost = Liveness::Lost(Error::PeerLost { rank: self.peer });
        if net.shutdown {
            return lost;
        }
        if !net.dead[self.peer] {
            return Liveness::Alive;
        }
        if net.opts.lost_at_once || net.pipes[self.inn(net.n)].frames.is_empty() {
            lost
        } else {
            Liveness::Alive
        }
    }

    fn kind(&self) -> Kind {
        // Streams through its own channel, as TCP does.
        Kind::Tcp
    }

    fn route(&self) -> Route {
        let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        Route::Tcp {
            local: unspecified,
            peer: unspecified,
        }
    }
}
