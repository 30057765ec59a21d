//! Transports: what moves headers and bytes between two ranks.
//!
//! The progress layer (`crate::progress`) decides *what* to send; a
//! transport only moves it, per peer, through the narrow interface of
//! [`Transport`]:
//!
//! * [`try_send`](Transport::try_send) a header with its body (an eager
//!   payload, or the [`MemDesc`] of an RTS or CTS), or say there is no room;
//! * [`peek`](Transport::peek) at the next arrival and
//!   [`consume`](Transport::consume) it into its destination;
//! * rendezvous payload streams, [`stream_out`](Transport::stream_out) and
//!   [`stream_in`](Transport::stream_in), in clear-to-send order;
//! * [`start_pull`](Transport::start_pull): read the sender's buffer
//!   directly (cross-memory attach; an RDMA READ, which completes later on
//!   a completion queue and reports through
//!   [`poll_pulls`](Transport::poll_pulls));
//! * [`liveness`](Transport::liveness) of the peer.
//!
//! A job routes every peer to one transport ([`Link`]): shared memory
//! ([`shm`]) between ranks on one host, TCP ([`tcp`]) or RDMA ([`rdma`],
//! over the [`fabric`] interface) between hosts. The
//! link is an enum, so the hot path is statically dispatched and never
//! allocates.

/// The fabric interface and its two implementations, the soft RC NIC and
/// the verbs fabric: the `tandem-fabric` crate, under its old path.
pub use tandem_fabric as fabric;
#[cfg(test)]
mod contract;
pub mod rdma;
pub mod shm;
#[cfg(test)]
pub(crate) mod sim;
pub mod tcp;

use crate::error::Error;
use tandem_core::wire::HEADER_LEN;
pub use tandem_core::wire::{MemDesc, DESC_LEN};

/// Bytes [`Transport::peek`] copies out: the header and the first
/// [`DESC_LEN`] bytes of its body (a whole RTS or CTS, or a small eager
/// payload). Exactly one shared-memory line.
pub const PEEK_LEN: usize = HEADER_LEN + DESC_LEN;

/// What is at the front of a peer's arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// Nothing complete yet.
    Nothing,
    /// A header (copied out, with the first bytes of its body).
    Header,
    /// Rendezvous stream bytes come first: [`Transport::stream_in`] must
    /// take them before the next header can be seen.
    StreamData,
}

/// How a pull started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStart {
    /// The bytes are in place.
    Done,
    /// Started; [`Transport::poll_pulls`] reports its completion later.
    Pending,
    /// This transport cannot (or may no longer) pull from this peer: ask
    /// the sender to stream instead.
    Unsupported,
}

/// Whether a peer can still be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Nothing says otherwise.
    Alive,
    /// Gone: every operation with it fails with this error (after what it
    /// sent before going has been received).
    Lost(Error),
}

/// Which transport a peer is routed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Shared memory (same host).
    Shm,
    /// TCP.
    Tcp,
    /// RDMA (a reliable connection over the soft NIC or verbs).
    Rdma,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Shm => "shm",
            Kind::Tcp => "tcp",
            Kind::Rdma => "rdma",
        })
    }
}

/// How this rank reaches a peer ([`crate::Comm::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Shared memory on this host.
    Shm,
    /// A TCP connection.
    Tcp {
        /// This end's address.
        local: std::net::SocketAddr,
        /// The peer's end.
        peer: std::net::SocketAddr,
    },
    /// An RDMA reliable connection.
    Rdma {
        /// This end's queue pair number.
        qpn: u32,
        /// The TCP connection the bootstrap made between the two ranks
        /// (this end, the peer's end): the soft NIC runs over it, verbs
        /// watches it for the peer's end. Tools measure the raw TCP floor
        /// beside it.
        tcp: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    },
}

impl Route {
    /// Which transport the route is.
    pub fn kind(&self) -> Kind {
        match self {
            Route::Shm => Kind::Shm,
            Route::Tcp { .. } => Kind::Tcp,
            Route::Rdma { .. } => Kind::Rdma,
        }
    }
}

/// The interface every transport implements, one value per peer.
///
/// Contract with the progress layer:
/// * messages (header + body) are delivered complete and in the order
///   they were sent; stream bytes likewise, in the order of the streams;
/// * `try_send` either takes the whole message or nothing;
/// * a transport that fails (a reset connection) records why and reports
///   it through [`liveness`](Self::liveness); its other methods then
///   simply make no progress;
/// * no method blocks or allocates; [`consume`](Self::consume) alone may
///   wait, and only for the rest of a message whose sender is writing it
///   at that moment.
pub trait Transport {
    /// Whether a message of `bytes` (header + body) would fit now.
    fn room(&mut self, bytes: usize) -> bool;

    /// Sends `header` followed by `body`; `false`: no room yet (nothing was
    /// sent).
    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool;

    /// Writes out what earlier calls queued (a transport that queues).
    fn flush(&mut self) {}

    /// Looks at the next arrival; on [`Peek::Header`], `out` holds the
    /// header, and the whole body when it is at most [`DESC_LEN`] bytes (an
    /// RTS or CTS, a small eager payload). Of a longer body `out` may hold
    /// the first bytes or not (shared memory's eager cells carry the header
    /// alone in its line): [`consume`](Self::consume) reads it.
    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek;

    /// Whether the whole `body` of the peeked header has arrived. A frame
    /// that cannot hold it (shorter than the header says) fails the link
    /// here, before the header is acted on: `false`, and
    /// [`liveness`](Self::liveness) says why.
    fn body_ready(&mut self, body: usize) -> bool;

    /// Consumes the peeked message, copying the first `dst.len()` bytes of
    /// its `body` into `dst` (the rest is dropped). `peeked` is what
    /// [`peek`](Self::peek) returned. Only after `body_ready(body)`.
    ///
    /// `body_ready` may have seen only the first part of a body whose
    /// sender still writes the rest (shared memory publishes an eager cell
    /// piece by piece, so that its two copies overlap); `consume` then
    /// waits for the rest, as long as the sender's copy takes.
    ///
    /// Returns `false` if the message cannot be read whole: its sender died
    /// or stopped in the middle of writing it, or the frame contradicts its
    /// header. `dst` then holds no usable message, the link has failed, and
    /// [`liveness`](Self::liveness) says why.
    #[must_use = "`false`: the message is torn and must not be delivered"]
    fn consume(&mut self, peeked: &[u8; PEEK_LEN], body: usize, dst: &mut [u8]) -> bool;

    /// Pushes rendezvous payload `src` (what is left of the front stream)
    /// toward the receiver's buffer `remote` (the CTS's descriptor; `src`
    /// starts `offset` bytes into the message, so an RDMA transport writes
    /// at `remote.addr + offset`); returns the bytes taken. Shared memory
    /// and TCP stream through their own channel and ignore `remote`.
    fn stream_out(&mut self, remote: &MemDesc, offset: usize, src: &[u8]) -> usize;

    /// Takes bytes of the front incoming stream, `left` bytes from its end,
    /// into `dst` (`dst.len() == left`), or drops them (`None`); returns
    /// the bytes taken.
    fn stream_in(&mut self, left: usize, dst: Option<&mut [u8]>) -> usize;

    /// The descriptor of a local buffer as the peer must name it, for a
    /// rendezvous: a send buffer the peer may read (`writable: false`) or a
    /// receive buffer it may write (`true`). An RDMA transport registers the
    /// buffer here and puts its rkey in [`MemDesc::key`]; it stays
    /// registered until [`release`](Self::release).
    fn describe(&mut self, buf: &[u8], _writable: bool) -> MemDesc {
        MemDesc {
            addr: buf.as_ptr() as u64,
            len: buf.len() as u64,
            key: 0,
        }
    }

    /// The operation that had `len` bytes at `addr` described (or pulled
    /// into) with `writable` is over: from the return of this call the
    /// peer can no longer reach that buffer through it. Called once per
    /// `describe`, and once per `start_pull` that returned
    /// [`PullStart::Pending`].
    fn release(&mut self, _addr: u64, _len: usize, _writable: bool) {}

    /// Registers `buf` for as long as the user holds it registered
    /// ([`crate::Comm::register`]): rendezvous operations on any part of it
    /// then reuse this registration instead of making their own.
    ///
    /// # Errors
    /// The default, for shared memory and TCP, never fails. The RDMA link
    /// returns [`Error::ChannelBroken`] with the fabric's reason when the
    /// queue pair refuses the registration (the link itself stays usable);
    /// nothing stays registered then.
    fn pin(&mut self, _buf: &mut [u8]) -> Result<(), Error> {
        Ok(())
    }

    /// Ends a [`pin`](Self::pin) of the buffer at `addr`.
    fn unpin(&mut self, _addr: u64) {}

    /// Whether the peer's hardware writes straight into the local buffers
    /// this transport describes (RDMA): a receive withdrawn mid-stream must
    /// then wait for the stream's end before its buffer may go.
    fn places_directly(&self) -> bool {
        false
    }

    /// Reads the peer's buffer `remote` into `dst` directly.
    fn start_pull(&mut self, _remote: MemDesc, _dst: &mut [u8]) -> PullStart {
        PullStart::Unsupported
    }

    /// Reports pulls that completed since the last call, by the `dst`
    /// address they were started with, and whether they succeeded.
    fn poll_pulls(&mut self, _done: &mut dyn FnMut(u64, bool)) {}

    /// Whether the peer is still there. Called while operations wait (the
    /// progress layer's slow path), so a transport whose peer can vanish
    /// silently may probe it from here (the RDMA link's keepalive).
    fn liveness(&mut self) -> Liveness;

    /// Starts failure detection with `bound`
    /// ([`Config::failure_timeout`](field@crate::Config::failure_timeout)):
    /// from then on [`liveness`](Self::liveness) reports
    /// [`Error::PeerSilent`] for a peer that stays silent (or stopped) that
    /// long. The default does nothing (a transport that cannot tell).
    fn watch(&mut self, _bound: std::time::Duration) {}

    /// Sends a heartbeat if nothing went to the peer since the last call,
    /// so that the peer's silence detection hears this rank while it
    /// computes. Called four times per bound by the rank's heartbeat
    /// thread (and from waits). The default does nothing: shared memory
    /// sees the process itself, RDMA probes the peer's queue pair, which
    /// its NIC answers.
    fn heartbeat(&mut self) {}

    /// Which transport this is.
    fn kind(&self) -> Kind;

    /// How the peer is reached, for diagnostics and tools.
    fn route(&self) -> Route;
}

/// One peer's transport (static dispatch on the hot path).
// The shared-memory link stays inline on purpose: it is the one polled in
// nanoseconds, and one fewer pointer to chase matters there.
#[allow(clippy::large_enum_variant)]
pub enum Link {
    /// Shared memory.
    Shm(shm::ShmLink),
    /// TCP (boxed: the shared-memory variant, on the hot path, stays small
    /// and its fields stay together).
    Tcp(Box<tcp::TcpLink>),
    /// RDMA over the soft NIC.
    Soft(Box<rdma::RdmaLink<fabric::soft::SoftQp>>),
    /// RDMA over a verbs device.
    #[cfg(feature = "verbs")]
    Verbs(Box<rdma::RdmaLink<fabric::verbs_qp::VerbsQp>>),
    /// The seeded simulated transport of the simulation tests.
    #[cfg(test)]
    Sim(Box<sim::SimLink>),
}

macro_rules! dispatch {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            Link::Shm($l) => $e,
            Link::Tcp($l) => $e,
            Link::Soft($l) => $e,
            #[cfg(feature = "verbs")]
            Link::Verbs($l) => $e,
            #[cfg(test)]
            Link::Sim($l) => $e,
        }
    };
}

impl Transport for Link {
    #[inline(always)]
    fn room(&mut self, bytes: usize) -> bool {
        dispatch!(self, l => l.room(bytes))
    }
    #[inline(always)]
    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        dispatch!(self, l => l.try_send(header, body))
    }
    #[inline(always)]
    fn flush(&mut self) {
        dispatch!(self, l => l.flush())
    }
    #[inline(always)]
    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek {
        dispatch!(self, l => l.peek(out))
    }
    #[inline(always)]
    fn body_ready(&mut self, body: usize) -> bool {
        dispatch!(self, l => l.body_ready(body))
    }
    #[inline(always)]
    fn consume(&mut self, peeked: &[u8; PEEK_LEN], body: usize, dst: &mut [u8]) -> bool {
        dispatch!(self, l => l.consume(peeked, body, dst))
    }
    #[inline]
    fn stream_out(&mut self, remote: &MemDesc, offset: usize, src: &[u8]) -> usize {
        dispatch!(self, l => l.stream_out(remote, offset, src))
    }
    #[inline]
    fn stream_in(&mut self, left: usize, dst: Option<&mut [u8]>) -> usize {
        dispatch!(self, l => l.stream_in(left, dst))
    }
    fn describe(&mut self, buf: &[u8], writable: bool) -> MemDesc {
        dispatch!(self, l => l.describe(buf, writable))
    }
    fn release(&mut self, addr: u64, len: usize, writable: bool) {
        dispatch!(self, l => l.release(addr, len, writable))
    }
    fn pin(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        dispatch!(self, l => l.pin(buf))
    }
    fn unpin(&mut self, addr: u64) {
        dispatch!(self, l => l.unpin(addr))
    }
    fn places_directly(&self) -> bool {
        dispatch!(self, l => l.places_directly())
    }
    fn start_pull(&mut self, remote: MemDesc, dst: &mut [u8]) -> PullStart {
        dispatch!(self, l => l.start_pull(remote, dst))
    }
    fn poll_pulls(&mut self, done: &mut dyn FnMut(u64, bool)) {
        dispatch!(self, l => l.poll_pulls(done))
    }
    fn liveness(&mut self) -> Liveness {
        dispatch!(self, l => l.liveness())
    }
    fn watch(&mut self, bound: std::time::Duration) {
        dispatch!(self, l => l.watch(bound))
    }
    fn heartbeat(&mut self) {
        dispatch!(self, l => l.heartbeat())
    }
    fn kind(&self) -> Kind {
        dispatch!(self, l => l.kind())
    }
    fn route(&self) -> Route {
        dispatch!(self, l => l.route())
    }
}
