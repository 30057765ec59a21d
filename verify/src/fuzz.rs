//! Fuzz targets for `tandem-core`, on stable Rust.
//!
//! Each target takes arbitrary bytes (libFuzzer's signature, so the same
//! functions can be driven by `cargo fuzz` where a nightly toolchain
//! exists) and returns `Err` with a description when a property fails;
//! `tandem-fuzz` (the binary) feeds them pseudo-random inputs for a time
//! box. [`arbitrary`] turns the bytes into structured call sequences.
//!
//! * [`header`]: header and descriptor decoding never panic, and whatever
//!   decodes re-encodes to the same header.
//! * [`engine`]: two protocol engines joined by the harness's wires
//!   (`tandem_core::harness`: FIFO or reordering, rendezvous streams on a
//!   channel of their own), driven by an arbitrary sequence of calls: posts of sends and receives (wildcards,
//!   truncating capacities, synchronous sends, two contexts whose
//!   traffic must never cross), transmissions and
//!   deliveries in any interleaving, pulls that succeed or fall back to a
//!   stream, takes, cancels, and, in some runs, hostile headers injected on
//!   a wire. After every step both engines' [`audit`] must pass. Without
//!   hostile headers a tiny reference matcher (MPI's rule: a message
//!   matches the earliest posted receive it fits, a receive the earliest
//!   arrived message, per sender in order) predicts what every receive
//!   gets: each completed receive must report exactly its message's
//!   source, tag and length, truncated exactly when the message is longer
//!   than the buffer; a cancel must succeed exactly when the receive had
//!   not matched; and once the wires drain, every matched receive and
//!   every send must be complete (nothing is lost or stuck).
//!
//! [`audit`]: tandem_core::proto::Engine::audit

use arbitrary::{Arbitrary, Unstructured};
use tandem_core::harness::{EngineOf, Frame, Host, Net, Storage};
use tandem_core::proto::{
    Entry, Handle, Op, OpError, Params, Peer, ProtoError, Pull, SlotCopy, Taken, TxWhat,
    ANY_SOURCE, ANY_TAG,
};
use tandem_core::wire::{Header, Kind, Limits, MemDesc, DESC_LEN, HEADER_LEN};

/// Result of one fuzz input.
pub type FuzzResult = Result<(), String>;

/// Header and descriptor decoding: no panic, and a round trip.
///
/// # Errors
/// A description of the failure if a decoded header does not decode again
/// to itself, or a descriptor changes in a round trip.
pub fn header(data: &[u8]) -> FuzzResult {
    let limits = Limits {
        eager_max: 64,
        msg_max: 1 << 40,
        contexts: 16,
    };
    if let Ok(h) = Header::decode(data, &limits) {
        let again = Header::decode(&h.encode(), &limits)
            .map_err(|e| format!("a decoded header does not decode again: {e:?} ({h:?})"))?;
        if again != h {
            return Err(format!("header round trip changed it: {h:?} -> {again:?}"));
        }
    }
    if data.len() >= DESC_LEN {
        let mut d = [0u8; DESC_LEN];
        d.copy_from_slice(&data[..DESC_LEN]);
        let m = MemDesc::decode(&d);
        if MemDesc::decode(&m.encode()) != m {
            return Err(format!("descriptor round trip changed {m:?}"));
        }
    }
    if data.len() >= 16 {
        // The short form (one line's eager message): whatever it says,
        // what it expands to has that short form again, bit for bit.
        let w = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
        // The input's first word with the short form's magic and kind (so
        // that random input reaches it), and as it is.
        let (w0, w1) = (w(0), w(8));
        let short = Header::short_word(0, 0) | (w0 & !0xffff);
        for w0 in [short, w0] {
            if let Some(h) = Header::from_short(w0, w1) {
                if h.short_words() != Some([w0, w1]) {
                    return Err(format!("short form {w0:#x} {w1:#x} expands to {h:?}"));
                }
            }
        }
        if Header::from_short(short, w1).is_none() {
            return Err(format!("short form {short:#x} not recognised"));
        }
    }
    if data.len() >= 64 {
        let mut b = [0u8; 56];
        b.copy_from_slice(&data[..56]);
        let word = u64::from_le_bytes(data[56..64].try_into().expect("8 bytes"));
        let _ = Header::decode_eager(&b, word, limits.eager_max);
    }
    Ok(())
}

const OPS: usize = 24;
const ENVELOPES: usize = 8;
const CREDITS: usize = 4;
/// The engines' storage: fixed arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Arrays;

impl Storage for Arrays {
    type Ops = [Op; OPS];
    type Entries = [Entry; 2 * ENVELOPES];
    type Peers = [Peer; 2];
    type Bufs = [u32; 2 * CREDITS];
}

type Eng = EngineOf<Arrays>;

/// What follows a header on the fuzzer's wires: the message a frame
/// announces or carries, if any (no bytes move; the reference matcher
/// checks who gets what).
type Body = Option<usize>;

#[derive(Debug, Clone, Copy)]
struct Message {
    src: usize,
    ctx: u16,
    tag: u32,
    len: u64,
}

#[derive(Debug, Clone, Copy)]
enum Kind2 {
    Send {
        msg: usize,
    },
    Recv {
        src: u32,
        ctx: u16,
        tag: u32,
        cap: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct OpRec {
    h: Handle,
    what: Kind2,
    taken: bool,
    cancelled: bool,
    /// The reference matcher's choice for a receive.
    bound: Option<usize>,
}

#[derive(Debug, Arbitrary)]
enum Call {
    Send {
        r: bool,
        tag: u8,
        len: u8,
        sync: bool,
    },
    Recv {
        r: bool,
        src: u8,
        tag: u8,
        cap: u8,
    },
    Transmit {
        r: bool,
    },
    Deliver {
        to: bool,
        pick: u8,
    },
    Pull {
        r: bool,
        pulled: bool,
    },
    Take {
        r: bool,
        i: u8,
    },
    Cancel {
        r: bool,
        i: u8,
    },
    Hostile {
        to: bool,
        bytes: [u8; HEADER_LEN],
    },
    /// The blocking eager send's shortcut (`eager_now`).
    FastSend {
        r: bool,
        tag: u8,
        len: u8,
    },
    /// The blocking receive's shortcut (`eager_recv_now`) on the next
    /// frame from the peer.
    FastRecv {
        r: bool,
        tag: u8,
    },
}

struct World {
    net: Net<Arrays, Body>,
    m: Ref,
}

/// Everything the fuzzer knows besides the engines: the operations, the
/// messages and the reference matcher; the harness's host.
struct Ref {
    ops: [Vec<OpRec>; 2],
    msgs: Vec<Message>,
    /// Reference matcher: per receiver, arrived messages not yet matched.
    arrived: [Vec<usize>; 2],
    eager: u64,
    hostile: bool,
    /// Wires deliver in any order (else FIFO).
    reorder: bool,
    /// Per sender, its messages in the order their announcing frames went
    /// out (their sequence order); per receiver, how many of the peer's it
    /// has released, and those that arrived ahead of their turn.
    sent: [Vec<usize>; 2],
    released: [usize; 2],
    early: [Vec<usize>; 2],
}

fn lens(eager: u64) -> [u64; 6] {
    [
        0,
        1,
        eager,
        eager + 1,
        eager.saturating_sub(1),
        3 * eager + 5,
    ]
}

impl Ref {
    /// Contexts are never wildcarded: traffic of another communicator
    /// never matches.
    fn fits(m: &Message, src: u32, ctx: u16, tag: u32) -> bool {
        m.ctx == ctx
            && (src == ANY_SOURCE || src as usize == m.src)
            && (tag == ANY_TAG || tag == m.tag)
    }

    /// Reference: a new receive at `r` takes the earliest arrived message
    /// it fits.
    fn ref_post(&mut self, r: usize, i: usize) {
        let Kind2::Recv { src, ctx, tag, .. } = self.ops[r][i].what else {
            return;
        };
        if let Some(k) = self.arrived[r]
            .iter()
            .position(|&m| Self::fits(&self.msgs[m], src, ctx, tag))
        {
            self.ops[r][i].bound = Some(self.arrived[r].remove(k));
        }
    }

    /// Reference: message `m` arrives at `r` and goes to the earliest
    /// posted, unmatched, uncancelled receive it fits.
    fn ref_arrive(&mut self, r: usize, m: usize) {
        let msg = self.msgs[m];
        for o in self.ops[r].iter_mut() {
            if let Kind2::Recv { src, ctx, tag, .. } = o.what {
                if o.bound.is_none() && !o.cancelled && Self::fits(&msg, src, ctx, tag) {
                    o.bound = Some(m);
                    return;
                }
            }
        }
        self.arrived[r].push(m);
    }

    fn find(&self, r: usize, h: Handle) -> Option<usize> {
        self.ops[r].iter().position(|o| o.h == h && !o.taken)
    }
}

impl Host<Arrays, Body> for Ref {
    type Error = String;

    fn eager(&mut self, r: usize, op: Handle) -> Result<Body, String> {
        Ok(self.find(r, op).and_then(|i| match self.ops[r][i].what {
            Kind2::Send { msg } => Some(msg),
            Kind2::Recv { .. } => None,
        }))
    }

    fn rts(&mut self, r: usize, op: Handle) -> Result<(MemDesc, Body), String> {
        Ok((MemDesc::NONE, self.eager(r, op)?))
    }

    fn empty(&mut self) -> Body {
        None
    }

    fn sent(&mut self, r: usize, _p: usize, frame: &Frame<Body>, what: TxWhat) {
        if let (Some(m), TxWhat::Payload(_) | TxWhat::Rts(_)) = (frame.body, what) {
            self.sent[r].push(m);
        }
    }

    fn refused(
        &mut self,
        _from: usize,
        to: usize,
        frame: &Frame<Body>,
        e: ProtoError,
    ) -> Result<(), String> {
        if self.hostile {
            return Ok(());
        }
        Err(format!(
            "rank {to} refused an honest {:?}: {e}",
            frame.header.kind()
        ))
    }

    fn arrived(&mut self, from: usize, to: usize, frame: &Frame<Body>) -> Result<(), String> {
        if let (Some(m), Kind::Eager | Kind::EagerSync | Kind::Rts | Kind::RtsEager) =
            (frame.body, frame.header.kind())
        {
            // The engine releases the peer's messages in sequence order
            // (holding back early ones).
            self.early[to].push(m);
            while let Some(&next) = self.sent[from].get(self.released[to]) {
                let Some(k) = self.early[to].iter().position(|&x| x == next) else {
                    break;
                };
                self.early[to].remove(k);
                self.released[to] += 1;
                self.ref_arrive(to, next);
            }
        }
        Ok(())
    }

    fn copy(&mut self, _r: usize, _c: SlotCopy) -> Result<(), String> {
        Ok(())
    }

    fn deliver(
        &mut self,
        _to: usize,
        _from: usize,
        _op: Handle,
        _len: u64,
        _f: &Frame<Body>,
    ) -> Result<(), String> {
        Ok(())
    }

    fn store(
        &mut self,
        _to: usize,
        _from: usize,
        _slot: usize,
        _f: &Frame<Body>,
    ) -> Result<(), String> {
        Ok(())
    }

    fn stream_out(&mut self, _r: usize, _op: Handle, _len: u64) -> Result<Body, String> {
        Ok(None)
    }

    fn stream_in(
        &mut self,
        _r: usize,
        _from: usize,
        _op: Handle,
        _body: &Body,
    ) -> Result<(), String> {
        Ok(())
    }

    fn unknown_stream(&mut self, r: usize, _from: usize, _token: u32) -> Result<(), String> {
        if self.hostile {
            return Ok(());
        }
        Err(format!("rank {r}: a stream nobody asked for"))
    }

    fn pull(&mut self, _: &[Eng], _r: usize, _p: &Pull, _pulled: bool) -> Result<(), String> {
        Ok(())
    }
}

impl World {
    fn new(u: &mut Unstructured<'_>) -> arbitrary::Result<Result<Self, String>> {
        let credits = u.int_in_range(1..=CREDITS as u16)?;
        let envelopes = u.int_in_range(credits + 1..=ENVELOPES as u16)?;
        let eager = *u.choose(&[0u64, 1, 8, 64])?;
        let threshold = u.int_in_range(1..=credits)?;
        let seq_start = *u.choose(&[0u16, 65_530])?;
        let mk = |rank| {
            Eng::new(
                Params {
                    rank,
                    nranks: 2,
                    credits,
                    envelopes,
                    credit_threshold: threshold,
                    eager_limit: eager,
                    seq_start,
                },
                [Op::EMPTY; OPS],
                [Entry::EMPTY; 2 * ENVELOPES],
                [Peer::EMPTY; 2],
                [0u32; 2 * CREDITS],
            )
        };
        let (a, b) = match (mk(0), mk(1)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Ok(Err(format!("engine refused params: {e}"))),
        };
        Ok(Ok(World {
            net: Net::new(vec![a, b]),
            m: Ref {
                ops: [Vec::new(), Vec::new()],
                msgs: Vec::new(),
                arrived: [Vec::new(), Vec::new()],
                eager,
                hostile: false,
                reorder: u.ratio(1, 3)?,
                sent: [Vec::new(), Vec::new()],
                released: [0, 0],
                early: [Vec::new(), Vec::new()],
            },
        }))
    }

    fn step(&mut self, c: &Call) -> FuzzResult {
        match *c {
            Call::Send { r, tag, len, sync } => {
                let r = r as usize;
                let len = lens(self.m.eager)[len as usize % 6];
                let ctx = (tag >> 7) as u16;
                let tag = (tag % 3) as u32;
                if let Ok(h) = self.net.engines[r].post_send(1 - r as u32, ctx, tag, len, sync) {
                    let msg = self.m.msgs.len();
                    self.m.msgs.push(Message {
                        src: r,
                        ctx,
                        tag,
                        len,
                    });
                    self.m.ops[r].push(OpRec {
                        h,
                        what: Kind2::Send { msg },
                        taken: false,
                        cancelled: false,
                        bound: None,
                    });
                }
            }
            Call::Recv { r, src, tag, cap } => {
                let r = r as usize;
                let src = if src % 2 == 0 {
                    ANY_SOURCE
                } else {
                    1 - r as u32
                };
                let ctx = (tag >> 7) as u16;
                let tag = match tag % 4 {
                    3 => ANY_TAG,
                    t => t as u32,
                };
                let cap = lens(self.m.eager)[cap as usize % 6];
                if let Ok((h, _copy)) = self.net.engines[r].post_recv(src, ctx, tag, cap) {
                    self.m.ops[r].push(OpRec {
                        h,
                        what: Kind2::Recv { src, ctx, tag, cap },
                        taken: false,
                        cancelled: false,
                        bound: None,
                    });
                    let i = self.m.ops[r].len() - 1;
                    self.m.ref_post(r, i);
                }
            }
            Call::Transmit { r } => {
                let r = r as usize;
                self.net.transmit(&mut self.m, r, 1 - r)?;
            }
            Call::Deliver { to, pick } => {
                // The wire's frames, or the streams a sender sent after a
                // CTS (a channel of their own, as shared memory's slot
                // ring is): the pick's top bit chooses when both wait.
                let t = to as usize;
                let f = 1 - t;
                let i = self.net.pair(f, t);
                let (frames, streams) = (self.net.wires[i].len(), self.net.streams[i].len());
                let reorder = self.m.reorder;
                let at = |n: usize| if reorder { pick as usize % n } else { 0 };
                if streams > 0 && (frames == 0 || pick & 0x80 != 0) {
                    self.net.stream_in(&mut self.m, f, t, at(streams))?;
                } else if frames > 0 {
                    self.net.deliver(&mut self.m, f, t, at(frames))?;
                }
            }
            Call::Pull { r, pulled } => {
                self.net.pull(&mut self.m, r as usize, pulled)?;
            }
            Call::Take { r, i } => self.take(r as usize, i as usize)?,
            Call::Cancel { r, i } => {
                let r = r as usize;
                let live: Vec<usize> = (0..self.m.ops[r].len())
                    .filter(|&k| !self.m.ops[r][k].taken && !self.m.ops[r][k].cancelled)
                    .collect();
                if live.is_empty() {
                    return Ok(());
                }
                let k = live[i as usize % live.len()];
                let o = self.m.ops[r][k];
                let ok = self.net.engines[r].cancel(o.h);
                if let Kind2::Recv { .. } = o.what {
                    if !self.m.hostile && ok == o.bound.is_some() {
                        return Err(format!(
                            "rank {r}: cancel said {ok} for a receive the reference {} matched",
                            if o.bound.is_some() { "had" } else { "had not" }
                        ));
                    }
                    if ok {
                        self.m.ops[r][k].cancelled = true;
                    }
                } else if ok {
                    // A send not yet transmitted: its message never exists.
                    self.m.ops[r][k].cancelled = true;
                }
            }
            Call::FastSend { r, tag, len } => {
                let r = r as usize;
                let ctx = (tag >> 7) as u16;
                let tag = (tag % 3) as u32;
                let len = lens(self.m.eager)[len as usize % 6];
                if let Some(h) = self.net.engines[r].eager_now(1 - r as u32, ctx, tag, len) {
                    // Committed: it goes out now and completes at once.
                    let m = self.m.msgs.len();
                    self.m.msgs.push(Message {
                        src: r,
                        ctx,
                        tag,
                        len,
                    });
                    self.m.sent[r].push(m);
                    let i = self.net.pair(r, 1 - r);
                    self.net.wires[i].push_back(Frame {
                        header: h,
                        desc: MemDesc::NONE,
                        body: Some(m),
                    });
                }
            }
            Call::FastRecv { r, tag } => {
                let r = r as usize;
                let p = 1 - r;
                let ctx = (tag >> 7) as u16;
                let tag = (tag % 3) as u32;
                let i = self.net.pair(p, r);
                let Some(&Frame {
                    header: h,
                    body: msg,
                    ..
                }) = self.net.wires[i].front()
                else {
                    return Ok(());
                };
                let took = match self.net.engines[r].eager_recv_now(p as u32, ctx, tag, &h) {
                    Ok(t) => t,
                    Err(_) if self.m.hostile => return Ok(()),
                    Err(e) => return Err(format!("rank {r}: the receive shortcut refused: {e}")),
                };
                if !took {
                    return Ok(());
                }
                self.net.wires[i].pop_front();
                if self.m.hostile {
                    return Ok(());
                }
                // The shortcut must take exactly what a posted receive
                // would: the peer's next message in sequence, with no
                // receive posted ahead and nothing earlier that fits.
                let Some(m) = msg else {
                    return Err(format!(
                        "rank {r}: the receive shortcut took a control message"
                    ));
                };
                let next = self.m.sent[p].get(self.m.released[r]).copied();
                let posted = self.m.ops[r].iter().any(|o| {
                    matches!(o.what, Kind2::Recv { .. })
                        && o.bound.is_none()
                        && !o.cancelled
                        && !o.taken
                });
                let earlier = self.m.arrived[r]
                    .iter()
                    .any(|&x| Ref::fits(&self.m.msgs[x], p as u32, ctx, tag));
                let want = self.m.msgs[m];
                if next != Some(m) || posted || earlier || want.tag != tag || want.ctx != ctx {
                    return Err(format!(
                        "rank {r}: the receive shortcut took message {m} {want:?} (next in \
                         sequence {next:?}, a receive posted {posted}, an earlier match {earlier})"
                    ));
                }
                self.m.released[r] += 1;
            }
            Call::Hostile { to, bytes } => {
                let t = to as usize;
                let limits = Limits {
                    eager_max: self.m.eager,
                    msg_max: 1 << 40,
                    contexts: 2,
                };
                if let Ok(h) = Header::decode(&bytes, &limits) {
                    self.m.hostile = true;
                    // Whatever it says, the engine must not panic or break
                    // its invariants (the audit after this step).
                    let _ = self.net.engines[t].on_message(
                        1 - t as u32,
                        &h,
                        MemDesc::NONE,
                        &mut |_| {},
                    );
                }
            }
        }
        Ok(())
    }

    fn take(&mut self, r: usize, i: usize) -> FuzzResult {
        let live: Vec<usize> = (0..self.m.ops[r].len())
            .filter(|&k| !self.m.ops[r][k].taken)
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let k = live[i % live.len()];
        let o = self.m.ops[r][k];
        let Taken::Done(res) = self.net.engines[r].take(o.h) else {
            return Ok(());
        };
        self.m.ops[r][k].taken = true;
        if self.m.hostile {
            return Ok(());
        }
        match (o.what, res) {
            (Kind2::Send { .. }, Ok(_)) => Ok(()),
            (Kind2::Send { .. }, Err(OpError::Cancelled)) if o.cancelled => Ok(()),
            (Kind2::Send { msg }, Err(e)) => {
                Err(format!("rank {r}: send of message {msg} failed: {e:?}"))
            }
            (Kind2::Recv { .. }, Err(OpError::Cancelled)) if o.cancelled => Ok(()),
            (Kind2::Recv { cap, .. }, res) => {
                let Some(m) = o.bound else {
                    return Err(format!(
                        "rank {r}: a receive completed ({res:?}) that the reference never matched"
                    ));
                };
                let want = self.m.msgs[m];
                let st = match res {
                    Ok(st) if want.len <= cap => st,
                    Err(OpError::Truncated { status, got }) if want.len > cap && got == cap => status,
                    other => {
                        return Err(format!(
                            "rank {r}: receive of capacity {cap} for message {m} {want:?} ended {other:?}"
                        ))
                    }
                };
                if (st.source as usize, st.tag, st.len) != (want.src, want.tag, want.len) {
                    return Err(format!(
                        "rank {r}: receive got {st:?}, the reference says message {m} {want:?}"
                    ));
                }
                Ok(())
            }
        }
    }

    /// Moves everything still in flight until nothing moves.
    fn drain(&mut self) -> FuzzResult {
        for _ in 0..10_000 {
            let mut moved = false;
            for r in 0..2 {
                while self.net.transmit(&mut self.m, r, 1 - r)? {
                    moved = true;
                }
                while self.net.pull(&mut self.m, r, true)? {
                    moved = true;
                }
            }
            for t in 0..2 {
                while self.net.deliver(&mut self.m, 1 - t, t, 0)? {
                    moved = true;
                }
                while self.net.stream_in(&mut self.m, 1 - t, t, 0)? {
                    moved = true;
                }
            }
            self.audit()?;
            if !moved {
                return Ok(());
            }
        }
        Err("the wires never drained".into())
    }

    fn audit(&self) -> FuzzResult {
        for r in 0..2 {
            self.net.engines[r]
                .audit()
                .map_err(|e| format!("rank {r}: audit failed: {e}"))?;
        }
        Ok(())
    }

    /// After draining: every send and every matched receive is complete.
    fn settled(&mut self) -> FuzzResult {
        for r in 0..2 {
            for k in 0..self.m.ops[r].len() {
                let o = self.m.ops[r][k];
                if o.taken {
                    continue;
                }
                let must = match o.what {
                    Kind2::Send { .. } => {
                        // A send completes once its receiver matched it (or
                        // at once if eager): only one the peer never
                        // matched may still wait.
                        let msg = match o.what {
                            Kind2::Send { msg } => msg,
                            _ => unreachable!(),
                        };
                        self.m.ops[1 - r]
                            .iter()
                            .any(|x| x.bound == Some(msg) && !x.cancelled)
                    }
                    Kind2::Recv { .. } => o.bound.is_some() || o.cancelled,
                };
                if must {
                    if let Taken::Pending = self.net.engines[r].take(o.h) {
                        let m = o.bound.map(|m| (m, self.m.msgs[m]));
                        return Err(format!(
                            "rank {r}: {:?} never completed after the wires drained (phase {:?}, \
                             info {:?}, the reference's message {m:?})",
                            o.what,
                            self.net.engines[r].phase(o.h),
                            self.net.engines[r].info(o.h)
                        ));
                    }
                    self.m.ops[r][k].taken = true;
                }
            }
        }
        Ok(())
    }
}

/// Two engines driven by an arbitrary call sequence (see the module docs).
///
/// # Errors
/// A description of the first property that failed (see the module
/// documentation): an engine refused parameters the input chose, an audit
/// failed, an engine call answered what the reference matcher rules out,
/// or an operation was still pending after the wires drained.
pub fn engine(data: &[u8]) -> FuzzResult {
    let mut u = Unstructured::new(data);
    let mut w = match World::new(&mut u) {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    // One run in four may see hostile headers (then only no-panic and the
    // audit are checked).
    let allow_hostile = u.ratio(1, 4).unwrap_or(false);
    let trace = std::env::var_os("TANDEM_FUZZ_TRACE").is_some();
    // `arbitrary` keeps answering from an exhausted input (with zeros):
    // stop at its end, and bound the run.
    for _ in 0..2_000 {
        if u.is_empty() {
            break;
        }
        let Ok(c) = Call::arbitrary(&mut u) else {
            break;
        };
        if matches!(c, Call::Hostile { .. }) && !allow_hostile {
            continue;
        }
        if trace {
            eprintln!("{c:?}");
        }
        w.step(&c)?;
        w.audit()?;
    }
    if !w.m.hostile {
        w.drain()?;
        // Take what finished (checked against the reference), then insist
        // on what must have.
        for r in 0..2 {
            for i in 0..w.m.ops[r].len() {
                w.take(r, i)?;
            }
        }
        w.settled()?;
        w.close()?;
    }
    Ok(())
}

impl World {
    /// Receives everything still outstanding, round after round, and
    /// insists that every send then completes: nothing may be stuck once
    /// the receivers take what was sent (a lost credit return or a stalled
    /// window would leave a send queued forever).
    fn close(&mut self) -> FuzzResult {
        for _ in 0..8 {
            for r in 0..2 {
                let p = 1 - r;
                // A wildcard receive (any source, any tag) in the context
                // of each send still waiting and of each message waiting.
                let waiting: Vec<u16> = self.m.ops[p]
                    .iter()
                    .filter(|o| !o.taken && !o.cancelled)
                    .filter_map(|o| match o.what {
                        Kind2::Send { msg } => Some(self.m.msgs[msg].ctx),
                        _ => None,
                    })
                    // And messages that arrived unmatched (their sends may
                    // be complete): they hold this side's entries.
                    .chain(self.m.arrived[r].iter().map(|&m| self.m.msgs[m].ctx))
                    .collect();
                for ctx in waiting {
                    let c = Call::Recv {
                        r: r == 1,
                        src: 0,
                        tag: 3 | ((ctx as u8) << 7),
                        cap: 5,
                    };
                    self.step(&c)?;
                }
            }
            self.drain()?;
            for r in 0..2 {
                for i in 0..self.m.ops[r].len() {
                    self.take(r, i)?;
                }
            }
            self.settled()?;
        }
        for r in 0..2 {
            if let Some(o) = self.m.ops[r]
                .iter()
                .find(|o| !o.taken && !o.cancelled && matches!(o.what, Kind2::Send { .. }))
            {
                return Err(format!(
                    "rank {r}: {:?} never completed although its peer received everything \
                     (phase {:?})",
                    o.what,
                    self.net.engines[r].phase(o.h)
                ));
            }
        }
        Ok(())
    }
}
