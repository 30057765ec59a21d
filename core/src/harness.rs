//! One harness for every test of the protocol engine: engines joined by
//! in-memory wires, driven one event at a time, in the way quinn-proto's
//! `Pair` drives all its connection tests. The engine's unit tests, the
//! fuzzer and the exhaustive model check (`tandem-verify`) all move
//! messages through [`Net`], so the way an engine's actions are carried
//! out (`next_tx` / `tx_done`, `on_message` and its slot copies, streams
//! after a CTS, pulls after an RTS) is written once and cannot drift apart
//! between them.
//!
//! Test tooling, compiled only for core's own tests and with the
//! `harness` feature; it allocates (queues of frames), which the product
//! code of this crate never does.
//!
//! What a driver would do with bytes is left to a [`Host`]: the body a
//! frame carries (`B`) is the host's choice (the payload's bytes, or a
//! label of them), and the host writes receive buffers, fills entry
//! buffers and answers pulls. Which event happens next is the caller's
//! choice too: in order, at random, or every possibility in turn.

extern crate alloc;

use crate::proto::{Action, Engine, Entry, Handle, Op, Peer, ProtoError, Pull, SlotCopy, TxWhat};
use crate::wire::{Header, MemDesc};
use alloc::collections::VecDeque;
use alloc::vec::Vec;

/// The storage an engine runs over (the four tables [`Engine::new`]
/// takes), named once so that [`Net`] and [`Host`] need one parameter.
///
/// Each table is also `Clone`, `Eq`, `Hash` and `Debug`, so that a [`Net`]
/// is too (the model check hashes whole states).
pub trait Storage {
    /// The operation table.
    type Ops: AsRef<[Op]> + AsMut<[Op]> + Table;
    /// The receive entries.
    type Entries: AsRef<[Entry]> + AsMut<[Entry]> + Table;
    /// The per-peer state.
    type Peers: AsRef<[Peer]> + AsMut<[Peer]> + Table;
    /// The eager buffers' free-list links.
    type Bufs: AsRef<[u32]> + AsMut<[u32]> + Table;
}

/// What every table of a [`Storage`] also is.
pub trait Table: Clone + PartialEq + Eq + core::hash::Hash + core::fmt::Debug {}

impl<T: Clone + PartialEq + Eq + core::hash::Hash + core::fmt::Debug> Table for T {}

/// An engine over storage `S`.
pub type EngineOf<S> = Engine<
    <S as Storage>::Ops,
    <S as Storage>::Entries,
    <S as Storage>::Peers,
    <S as Storage>::Bufs,
>;

/// Storage in vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VecStorage;

impl Storage for VecStorage {
    type Ops = Vec<Op>;
    type Entries = Vec<Entry>;
    type Peers = Vec<Peer>;
    type Bufs = Vec<u32>;
}

/// A message on a wire: its header, the memory an RTS names, and what
/// follows the header (the host's body: the payload or a label of it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame<B> {
    /// The header as the sender's engine made it.
    pub header: Header,
    /// Where the payload lives (an RTS's body), or [`MemDesc::NONE`].
    pub desc: MemDesc,
    /// What follows the header.
    pub body: B,
}

/// What the harness asks of whoever holds the bytes: the bodies senders
/// put on the wire and what a receiver does with them. Every method sees
/// ranks by index; the hooks with a default do nothing.
pub trait Host<S: Storage, B> {
    /// The host's error (a test's panic message, a checker's report).
    type Error;

    /// The body of eager send `op` of rank `r`.
    ///
    /// # Errors
    /// The host's: `op` is none of its sends.
    fn eager(&mut self, r: usize, op: Handle) -> Result<B, Self::Error>;

    /// The RTS of send `op` of rank `r`: where a pull would read its
    /// payload, and the body that travels with the header.
    ///
    /// # Errors
    /// The host's: `op` is none of its sends.
    fn rts(&mut self, r: usize, op: Handle) -> Result<(MemDesc, B), Self::Error>;

    /// The body of a control message or a CTS (nothing).
    fn empty(&mut self) -> B;

    /// Rank `r` put `frame` on the wire to `p` (what followed its header:
    /// `what`). A hook for bookkeeping; the frame is queued after it.
    fn sent(&mut self, _r: usize, _p: usize, _frame: &Frame<B>, _what: TxWhat) {}

    /// Whether rank `r` is alive: nothing is queued for a dead rank.
    fn alive(&self, _r: usize) -> bool {
        true
    }

    /// `frame` from `from` is about to reach `to`'s engine; the host may
    /// check it or rewrite it (as a wire would re-encode it).
    ///
    /// # Errors
    /// The host's: the frame is not what a wire may carry.
    fn arriving(
        &mut self,
        _from: usize,
        _to: usize,
        _frame: &mut Frame<B>,
    ) -> Result<(), Self::Error> {
        Ok(())
    }

    /// `to`'s engine refused `frame` from `from` with `e`. `Ok` drops the
    /// frame and goes on (a test of hostile input); `Err` reports it.
    ///
    /// # Errors
    /// The host's report of the refusal.
    fn refused(
        &mut self,
        from: usize,
        to: usize,
        frame: &Frame<B>,
        e: ProtoError,
    ) -> Result<(), Self::Error>;

    /// `to`'s engine took `frame` from `from` (after its actions were
    /// carried out). A hook for bookkeeping.
    ///
    /// # Errors
    /// The host's: what it checks of the arrival failed.
    fn arrived(&mut self, _from: usize, _to: usize, _frame: &Frame<B>) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Rank `r` copies a stored eager payload into a receive
    /// ([`SlotCopy`]).
    ///
    /// # Errors
    /// The host's: the copy is not what it expected.
    fn copy(&mut self, r: usize, c: SlotCopy) -> Result<(), Self::Error>;

    /// Rank `to` delivers the first `len` bytes of `frame`'s payload
    /// (from `from`) into receive `op`.
    ///
    /// # Errors
    /// The host's: the delivery is not what it expected.
    fn deliver(
        &mut self,
        to: usize,
        from: usize,
        op: Handle,
        len: u64,
        frame: &Frame<B>,
    ) -> Result<(), Self::Error>;

    /// Rank `to` stores `frame`'s payload (from `from`) in entry buffer
    /// `slot`.
    ///
    /// # Errors
    /// The host's.
    fn store(
        &mut self,
        to: usize,
        from: usize,
        slot: usize,
        frame: &Frame<B>,
    ) -> Result<(), Self::Error>;

    /// The body of `len` bytes of send `op` of rank `r`, streamed to the
    /// receiver that answered its RTS with a CTS.
    ///
    /// # Errors
    /// The host's: `op` is none of its sends.
    fn stream_out(&mut self, r: usize, op: Handle, len: u64) -> Result<B, Self::Error>;

    /// Rank `r` received the stream `body` from `from` for receive `op`.
    ///
    /// # Errors
    /// The host's.
    fn stream_in(&mut self, r: usize, from: usize, op: Handle, body: &B)
        -> Result<(), Self::Error>;

    /// A stream from `from` reached rank `r` for token `token`, which no
    /// receive of `r` waits for. `Ok` drops it (hostile input).
    ///
    /// # Errors
    /// The host's report.
    fn unknown_stream(&mut self, r: usize, from: usize, token: u32) -> Result<(), Self::Error>;

    /// Rank `r` pulls `p` (an RTS's payload); `pulled` says whether the
    /// pull succeeds (else the engine falls back to CTS + stream).
    /// `engines` are every rank's, for checks of the sender's state.
    ///
    /// # Errors
    /// The host's: the pull reads what it must not.
    fn pull(
        &mut self,
        engines: &[EngineOf<S>],
        r: usize,
        p: &Pull,
        pulled: bool,
    ) -> Result<(), Self::Error>;
}

/// Engines of ranks `0..n` joined by a wire per directed pair (frames in
/// sending order) and a stream channel per directed pair (bodies labelled
/// with the receive's token). Whether frames are taken in order is the
/// caller's choice ([`deliver`](Self::deliver) takes an index).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Net<S: Storage, B> {
    /// Every rank's engine, by rank.
    pub engines: Vec<EngineOf<S>>,
    /// Frames in flight, at `pair(from, to)`.
    pub wires: Vec<VecDeque<Frame<B>>>,
    /// Streamed bodies in flight, at `pair(from, to)`, with the token of
    /// the receive they are for.
    pub streams: Vec<VecDeque<(u32, B)>>,
    /// Receives waiting for a stream, at `pair(receiver, sender)`, in the
    /// order their CTS went out.
    pub expected: Vec<VecDeque<Handle>>,
}

impl<S: Storage, B> Net<S, B> {
    /// The ranks of `engines`, joined; nothing in flight.
    pub fn new(engines: Vec<EngineOf<S>>) -> Self {
        let n = engines.len();
        Self {
            engines,
            wires: (0..n * n).map(|_| VecDeque::new()).collect(),
            streams: (0..n * n).map(|_| VecDeque::new()).collect(),
            expected: (0..n * n).map(|_| VecDeque::new()).collect(),
        }
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.engines.len()
    }

    /// The index of the directed pair `(from, to)`.
    pub fn pair(&self, from: usize, to: usize) -> usize {
        from * self.engines.len() + to
    }

    /// Rank `r` transmits its next message to `p`, if it has one: the
    /// body from the host, `tx_done`, then the frame on the wire (unless
    /// `p` is dead). `Ok(false)`: nothing to send.
    ///
    /// # Errors
    /// The host's.
    pub fn transmit<H: Host<S, B>>(
        &mut self,
        host: &mut H,
        r: usize,
        p: usize,
    ) -> Result<bool, H::Error> {
        let Some(tx) = self.engines[r].next_tx(p as u32) else {
            return Ok(false);
        };
        let (desc, body) = match tx.what {
            TxWhat::Payload(op) => (MemDesc::NONE, host.eager(r, op)?),
            TxWhat::Rts(op) => host.rts(r, op)?,
            TxWhat::Cts(op) => {
                let i = self.pair(r, p);
                self.expected[i].push_back(op);
                (MemDesc::NONE, host.empty())
            }
            TxWhat::Control => (MemDesc::NONE, host.empty()),
        };
        self.engines[r].tx_done(p as u32, &tx);
        let frame = Frame {
            header: tx.header,
            desc,
            body,
        };
        host.sent(r, p, &frame, tx.what);
        if host.alive(p) {
            let i = self.pair(r, p);
            self.wires[i].push_back(frame);
        }
        Ok(true)
    }

    /// Frame `i` on the wire `(from, to)` reaches `to`'s engine, and its
    /// actions are carried out: slot copies, a delivery, a store, or the
    /// stream of a send whose receiver answered. `Ok(false)`: no such
    /// frame.
    ///
    /// # Errors
    /// The host's, including its report of a refused frame.
    pub fn deliver<H: Host<S, B>>(
        &mut self,
        host: &mut H,
        from: usize,
        to: usize,
        i: usize,
    ) -> Result<bool, H::Error> {
        let w = self.pair(from, to);
        let Some(mut frame) = self.wires[w].remove(i) else {
            return Ok(false);
        };
        host.arriving(from, to, &mut frame)?;
        let mut copies: Vec<SlotCopy> = Vec::new();
        let act =
            match self.engines[to].on_message(from as u32, &frame.header, frame.desc, &mut |c| {
                copies.push(c)
            }) {
                Ok(a) => a,
                Err(e) => {
                    host.refused(from, to, &frame, e)?;
                    return Ok(true);
                }
            };
        for c in copies {
            host.copy(to, c)?;
        }
        match act {
            Action::None => {}
            Action::Deliver { op, len } => host.deliver(to, from, op, len, &frame)?,
            Action::Store { slot } => host.store(to, from, slot, &frame)?,
            Action::Stream { op, len, remote } => {
                let body = host.stream_out(to, op, len)?;
                self.engines[to].stream_done(op);
                if host.alive(from) {
                    let s = self.pair(to, from);
                    self.streams[s].push_back((remote, body));
                }
            }
        }
        host.arrived(from, to, &frame)?;
        Ok(true)
    }

    /// Stream `i` of `(from, to)` reaches `to`: written into the receive
    /// whose token labels it, which then completes. `Ok(false)`: no such
    /// stream.
    ///
    /// # Errors
    /// The host's, including its report of a stream no receive waits for.
    pub fn stream_in<H: Host<S, B>>(
        &mut self,
        host: &mut H,
        from: usize,
        to: usize,
        i: usize,
    ) -> Result<bool, H::Error> {
        let s = self.pair(from, to);
        let Some((token, body)) = self.streams[s].remove(i) else {
            return Ok(false);
        };
        let e = self.pair(to, from);
        let Some(at) = self.expected[e].iter().position(|h| h.token() == token) else {
            host.unknown_stream(to, from, token)?;
            return Ok(true);
        };
        let op = self.expected[e].remove(at).expect("found just now");
        host.stream_in(to, from, op, &body)?;
        self.engines[to].stream_done(op);
        Ok(true)
    }

    /// Rank `r` runs its next pull, if it has one, succeeding or not as
    /// `pulled` says. `Ok(false)`: no pull waits.
    ///
    /// # Errors
    /// The host's.
    pub fn pull<H: Host<S, B>>(
        &mut self,
        host: &mut H,
        r: usize,
        pulled: bool,
    ) -> Result<bool, H::Error> {
        let Some(p) = self.engines[r].next_pull() else {
            return Ok(false);
        };
        host.pull(&self.engines, r, &p, pulled)?;
        self.engines[r].pull_done(p.op, pulled);
        Ok(true)
    }

    /// Whether nothing is in flight: no frame and no stream.
    pub fn quiet(&self) -> bool {
        self.wires.iter().all(VecDeque::is_empty) && self.streams.iter().all(VecDeque::is_empty)
    }
}
