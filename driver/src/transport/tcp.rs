//! TCP between hosts: one connection per pair of ranks.
//!
//! The connection carries two kinds of frame, each behind an 8-byte
//! prefix (`kind`, three zero bytes, little-endian `u32` length):
//!
//! * `M`: one message, its 32-byte header and its body (an eager payload,
//!   or the [`MemDesc`] of an RTS or CTS);
//! * `D`: a chunk of a rendezvous payload stream (at most [`CHUNK`] bytes),
//!   of the front stream in clear-to-send order;
//! * `H`: a heartbeat, no body: sent on a connection that carried nothing
//!   for a quarter of the failure-detection bound
//!   ([`Transport::heartbeat`]), skipped by the receiver. A connection
//!   from which nothing at all arrives for the bound fails with
//!   [`Error::PeerSilent`] (a stopped process, a cut network: the kernel
//!   of a stopped process still acknowledges TCP, so only the
//!   application's heartbeats tell).
//!
//! Messages are copied into a fixed send buffer and written with one
//! `sendmsg`; stream chunks go straight from the user's buffer to the
//! kernel (vectored with their prefix) and arrive straight into the user's
//! buffer. Partial writes leave a cursor (what is left of the prefix and of
//! the chunk), so a header queued while a chunk is half written goes out
//! after it and never inside it. Memory is bounded by the two fixed
//! buffers: a receiver that does not keep up stalls its senders through
//! the protocol's credits and the kernel's socket buffers, never through
//! buffering here.
//!
//! A peer that closes or resets the connection (its process died, or it
//! shut the socket) is lost ([`Error::PeerLost`]) once everything it sent
//! before has been read; any other socket error or a malformed frame breaks
//! the link with an error that says which.

use super::{Kind, Liveness, MemDesc, Peek, Transport, PEEK_LEN};
use crate::error::Error;
use crate::sys;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use tandem_core::wire::HEADER_LEN;

/// Largest payload chunk of a rendezvous stream frame.
pub const CHUNK: usize = 256 * 1024;

const PREFIX: usize = 8;
const MSG: u8 = b'M';
const DATA: u8 = b'D';
const HEARTBEAT: u8 = b'H';

/// Silence detection of one connection ([`Transport::watch`]).
#[derive(Debug)]
struct Watch {
    /// The bound; zero: off.
    bound: std::time::Duration,
    /// Bytes read when the connection was last heard, and when.
    heard_mark: u64,
    heard_at: std::time::Instant,
    /// Bytes written at the last heartbeat tick.
    sent_mark: u64,
    /// Heartbeats sent (for tests and benchmarks).
    beats: u64,
}

/// The TCP link to one peer.
pub struct TcpLink {
    sock: TcpStream,
    fd: RawFd,
    peer: usize,
    /// Outgoing messages not yet taken by the kernel: `tx[tx_start..tx_end]`.
    tx: Box<[u8]>,
    tx_start: usize,
    tx_end: usize,
    /// Prefix of the outgoing chunk, and how much of it is still unwritten.
    chunk_prefix: [u8; PREFIX],
    prefix_left: usize,
    /// Payload bytes of the outgoing chunk still unwritten.
    chunk_left: usize,
    /// Bytes read but not yet consumed: `rx[rx_start..rx_end]`.
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    /// Payload bytes of the incoming chunk not yet taken.
    in_chunk_left: usize,
    /// Largest message frame accepted.
    max_frame: usize,
    /// Why the link stopped, once it has.
    failed: Option<Error>,
    /// Bytes read and written so far (any frame): what silence detection
    /// and heartbeats look at.
    rx_bytes: u64,
    tx_bytes: u64,
    watch: Watch,
}

impl std::fmt::Debug for TcpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpLink")
            .field("peer", &self.peer)
            .field("failed", &self.failed)
            .finish()
    }
}

impl TcpLink {
    /// Wraps an authenticated connection to rank `peer`; messages carry at
    /// most `eager_limit` bytes of body. Makes it non-blocking with
    /// `TCP_NODELAY`.
    ///
    /// # Errors
    /// The `std::io::Error` of setting `TCP_NODELAY` or non-blocking mode on
    /// `sock`.
    pub fn new(sock: TcpStream, peer: usize, eager_limit: usize) -> std::io::Result<Self> {
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        let max_frame = HEADER_LEN + eager_limit.max(super::DESC_LEN);
        let cap = (PREFIX + max_frame).max(64 * 1024);
        Ok(Self {
            sock,
            fd,
            peer,
            tx: vec![0u8; cap].into_boxed_slice(),
            tx_start: 0,
            tx_end: 0,
            chunk_prefix: [0; PREFIX],
            prefix_left: 0,
            chunk_left: 0,
            rx: vec![0u8; cap].into_boxed_slice(),
            rx_start: 0,
            rx_end: 0,
            in_chunk_left: 0,
            max_frame,
            failed: None,
            rx_bytes: 0,
            tx_bytes: 0,
            watch: Watch {
                bound: std::time::Duration::ZERO,
                heard_mark: 0,
                heard_at: std::time::Instant::now(),
                sent_mark: 0,
                beats: 0,
            },
        })
    }

    /// Heartbeats this link has sent.
    pub fn heartbeats_sent(&self) -> u64 {
        self.watch.beats
    }

    /// Where the peer is, for errors.
    fn peer_host(&self) -> (String, String) {
        match self.sock.peer_addr() {
            Ok(a) => (a.ip().to_string(), a.to_string()),
            Err(_) => ("an unknown host".into(), "an unknown address".into()),
        }
    }

    /// [`Error::PeerSilent`] once nothing arrived for the bound: bytes
    /// read since the last look, or bytes waiting in the kernel, count as
    /// heard.
    fn silent(&mut self) -> Option<Error> {
        if self.watch.bound.is_zero() || self.failed.is_some() {
            return None;
        }
        self.fill();
        let now = std::time::Instant::now();
        // A full buffer may hide more that arrived: not silent.
        let waiting = self.rx_end == self.rx.len();
        if self.rx_bytes != self.watch.heard_mark || waiting {
            self.watch.heard_mark = self.rx_bytes;
            self.watch.heard_at = now;
            return None;
        }
        let quiet = now.duration_since(self.watch.heard_at);
        if quiet < self.watch.bound {
            return None;
        }
        let (host, addr) = self.peer_host();
        let e = Error::PeerSilent {
            rank: self.peer,
            host,
            evidence: format!(
                "nothing received for {:.1} s over TCP from {addr} (a live rank sends a \
                 heartbeat on an idle connection every {} ms)",
                quiet.as_secs_f64(),
                (self.watch.bound / 4).as_millis()
            ),
        };
        // Fail-stop: should the peer come back, it finds the connection
        // closed and treats this rank as gone too.
        self.shutdown();
        self.fail(e.clone());
        Some(e)
    }

    /// Shuts the connection down in both directions (tests use it to cut a
    /// link in the middle of a transfer).
    pub fn shutdown(&self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }

    fn fail(&mut self, e: Error) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
    }

    fn io_failed(&mut self, what: &str, e: std::io::Error) {
        let peer = self.peer;
        // A reset is how a peer that died with data unread (or that shut
        // its socket) shows; anything else is a broken link.
        if matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ) {
            return self.fail(Error::PeerLost { rank: peer });
        }
        self.fail(Error::ChannelBroken {
            peer,
            reason: format!("TCP connection {what} failed: {e}"),
        });
    }

    fn chunk_in_flight(&self) -> bool {
        self.prefix_left > 0 || self.chunk_left > 0
    }

    /// Writes queued messages (unless a chunk is half written: they follow
    /// it); `true` when nothing is left queued.
    fn flush_messages(&mut self) -> bool {
        if self.tx_start == self.tx_end {
            return true;
        }
        if self.chunk_in_flight() || self.failed.is_some() {
            return false;
        }
        match sys::writev2(self.fd, &self.tx[self.tx_start..self.tx_end], &[]) {
            Ok(n) => {
                self.tx_start += n;
                self.tx_bytes += n as u64;
                if self.tx_start == self.tx_end {
                    self.tx_start = 0;
                    self.tx_end = 0;
                    return true;
                }
                false
            }
            Err(e) => {
                self.io_failed("write", e);
                false
            }
        }
    }

    /// Free bytes at the end of the send buffer (compacting it if that
    /// helps).
    fn tx_free(&mut self, need: usize) -> usize {
        if self.tx.len() - self.tx_end < need && self.tx_start > 0 {
            self.tx.copy_within(self.tx_start..self.tx_end, 0);
            self.tx_end -= self.tx_start;
            self.tx_start = 0;
        }
        self.tx.len() - self.tx_end
    }

    fn buffered(&self) -> usize {
        self.rx_end - self.rx_start
    }

    /// Reads what the kernel has (as much as fits); `false` once the link
    /// has failed or the peer closed it.
    fn fill(&mut self) -> bool {
        if self.failed.is_some() {
            return false;
        }
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        } else if self.rx_end == self.rx.len() {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        if self.rx_end == self.rx.len() {
            return true;
        }
        match sys::recv_now(self.fd, &mut self.rx[self.rx_end..]) {
            Ok(Some(0)) => {
                let rank = self.peer;
                self.fail(Error::PeerLost { rank });
                false
            }
            Ok(Some(n)) => {
                self.rx_end += n;
                self.rx_bytes += n as u64;
                true
            }
            Ok(None) => true,
            Err(e) => {
                self.io_failed("read", e);
                false
            }
        }
    }

    /// The frame prefix at the front of what was read, reading more if
    /// needed.
    /// Heartbeat frames are skipped here, so no caller ever sees one.
    fn front_prefix(&mut self) -> Option<(u8, usize)> {
        loop {
            if self.buffered() < PREFIX {
                self.fill();
                if self.buffered() < PREFIX {
                    return None;
                }
            }
            let p = &self.rx[self.rx_start..self.rx_start + PREFIX];
            let len = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize;
            if p[1..4] != [0, 0, 0] || (p[0] == HEARTBEAT && len != 0) {
                let e = format!("corrupt TCP frame prefix {:02x?}", &p[..PREFIX]);
                self.fail(Error::Protocol {
                    peer: self.peer,
                    detail: e,
                });
                return None;
            }
            if p[0] != HEARTBEAT {
                return Some((p[0], len));
            }
            self.rx_start += PREFIX;
        }
    }

    /// The length of the front message frame (whole in `rx`, as `peek`
    /// saw), if it holds a header and exactly `body` bytes; otherwise the
    /// link fails with a protocol error.
    fn front_frame(&mut self, body: usize) -> Option<usize> {
        let p = &self.rx[self.rx_start..self.rx_start + PREFIX];
        let len = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize;
        if len != HEADER_LEN + body {
            self.protocol(format!(
                "TCP frame of {len} bytes for a message with a {body}-byte body"
            ));
            return None;
        }
        Some(len)
    }

    fn protocol(&mut self, detail: String) {
        let peer = self.peer;
        self.fail(Error::Protocol { peer, detail });
    }
}

impl Drop for TcpLink {
    /// Closes gently, so nothing this rank sent is lost: queued messages
    /// are written, the sending side is shut (the peer reads everything,
    /// then the end), and the socket is closed only once the peer's kernel
    /// has acknowledged every byte. Meanwhile arrivals are drained: a socket
    /// closed with unread input is reset, and a reset throws away what is
    /// still unsent. Bounded by a few seconds.
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // (A half-written chunk cannot be finished: its buffer is gone; the
        // peer then sees the connection end mid-stream.)
        while !self.chunk_in_flight() && !self.flush_messages() && self.failed.is_none() {
            if std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::yield_now();
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 4096];
        loop {
            while let Ok(Some(n)) = sys::recv_now(self.fd, &mut sink) {
                if n == 0 {
                    return;
                }
            }
            if sys::unacked_bytes(self.fd).is_none_or(|n| n == 0)
                || std::time::Instant::now() >= deadline
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

impl Transport for TcpLink {
    fn room(&mut self, bytes: usize) -> bool {
        if self.tx_free(PREFIX + bytes) >= PREFIX + bytes {
            return true;
        }
        self.flush_messages();
        self.tx_free(PREFIX + bytes) >= PREFIX + bytes
    }

    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        let len = HEADER_LEN + body.len();
        if self.failed.is_some() || !self.room(len) {
            return false;
        }
        let at = self.tx_end;
        let t = &mut self.tx[at..at + PREFIX + len];
        t[0] = MSG;
        t[1..4].fill(0);
        t[4..PREFIX].copy_from_slice(&(len as u32).to_le_bytes());
        t[PREFIX..PREFIX + HEADER_LEN].copy_from_slice(header);
        t[PREFIX + HEADER_LEN..].copy_from_slice(body);
        self.tx_end += PREFIX + len;
        self.flush_messages();
        true
    }

    fn flush(&mut self) {
        self.flush_messages();
    }

    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek {
        if self.in_chunk_left > 0 {
            return Peek::StreamData;
        }
        let Some((kind, len)) = self.front_prefix() else {
            return Peek::Nothing;
        };
        match kind {
            DATA => Peek::StreamData,
            MSG if (HEADER_LEN..=self.max_frame).contains(&len) => {
                if self.buffered() < PREFIX + len {
                    self.fill();
                    if self.buffered() < PREFIX + len {
                        return Peek::Nothing;
                    }
                }
                let n = len.min(PEEK_LEN);
                let at = self.rx_start + PREFIX;
                out[..n].copy_from_slice(&self.rx[at..at + n]);
                Peek::Header
            }
            MSG => {
                self.protocol(format!(
                    "TCP message frame of {len} bytes (at most {} allowed)",
                    self.max_frame
                ));
                Peek::Nothing
            }
            other => {
                self.protocol(format!("unknown TCP frame kind {other:#04x}"));
                Peek::Nothing
            }
        }
    }

    fn body_ready(&mut self, body: usize) -> bool {
        // `peek` reports a header only once its whole frame is here; the
        // frame must hold exactly the body the header announces, checked
        // before the header is acted on (an RTS whose frame ends before its
        // descriptor would otherwise match a receive with a zeroed one).
        self.failed.is_none() && self.front_frame(body).is_some()
    }

    fn consume(&mut self, _peeked: &[u8; PEEK_LEN], body: usize, dst: &mut [u8]) -> bool {
        let Some(len) = self.front_frame(body) else {
            return false;
        };
        let at = self.rx_start + PREFIX + HEADER_LEN;
        let n = dst.len().min(body);
        dst[..n].copy_from_slice(&self.rx[at..at + n]);
        self.rx_start += PREFIX + len;
        true
    }

    fn stream_out(&mut self, _remote: &MemDesc, _offset: usize, src: &[u8]) -> usize {
        let mut taken = 0;
        while taken < src.len() && self.failed.is_none() {
            if !self.chunk_in_flight() {
                // A new chunk: messages queued before it go first.
                if !self.flush_messages() {
                    break;
                }
                let n = CHUNK.min(src.len() - taken);
                self.chunk_prefix[0] = DATA;
                self.chunk_prefix[1..4].fill(0);
                self.chunk_prefix[4..].copy_from_slice(&(n as u32).to_le_bytes());
                self.prefix_left = PREFIX;
                self.chunk_left = n;
            }
            let payload = &src[taken..taken + self.chunk_left];
            let prefix = &self.chunk_prefix[PREFIX - self.prefix_left..];
            let (a, b) = if prefix.is_empty() {
                (payload, &[][..])
            } else {
                (prefix, payload)
            };
            let w = match sys::writev2(self.fd, a, b) {
                Ok(w) => w,
                Err(e) => {
                    self.io_failed("write", e);
                    break;
                }
            };
            if w == 0 {
                break;
            }
            self.tx_bytes += w as u64;
            let from_prefix = w.min(self.prefix_left);
            self.prefix_left -= from_prefix;
            let from_payload = w - from_prefix;
            self.chunk_left -= from_payload;
            taken += from_payload;
            if !self.chunk_in_flight() {
                // Messages queued while the chunk was half written.
                self.flush_messages();
            }
        }
        taken
    }

    fn stream_in(&mut self, left: usize, mut dst: Option<&mut [u8]>) -> usize {
        let mut taken = 0;
        // Bytes already read are taken even after the link failed: what the
        // peer sent before it went is delivered.
        while taken < left && (self.failed.is_none() || self.buffered() > 0) {
            if self.in_chunk_left == 0 {
                match self.front_prefix() {
                    Some((DATA, len)) if len > 0 && len <= left - taken => {
                        self.in_chunk_left = len;
                        self.rx_start += PREFIX;
                    }
                    Some((DATA, len)) => {
                        self.protocol(format!(
                            "TCP stream chunk of {len} bytes where {} were expected",
                            left - taken
                        ));
                        break;
                    }
                    // A message comes first, or nothing yet.
                    _ => break,
                }
            }
            let want = self.in_chunk_left.min(left - taken);
            let have = self.buffered().min(want);
            let got = if have > 0 {
                if let Some(d) = dst.as_deref_mut() {
                    d[taken..taken + have]
                        .copy_from_slice(&self.rx[self.rx_start..self.rx_start + have]);
                }
                self.rx_start += have;
                have
            } else if self.failed.is_some() {
                break;
            } else {
                // Nothing buffered: read straight into the destination.
                let r = match dst.as_deref_mut() {
                    Some(d) => sys::recv_now(self.fd, &mut d[taken..taken + want]),
                    None => {
                        // Dropping: read what the kernel has into the
                        // buffer; if nothing came, come back later rather
                        // than wait here for the rest of the chunk.
                        self.fill();
                        if self.buffered() == 0 {
                            break;
                        }
                        continue;
                    }
                };
                match r {
                    Ok(Some(0)) => {
                        let rank = self.peer;
                        self.fail(Error::PeerLost { rank });
                        break;
                    }
                    Ok(Some(n)) => {
                        self.rx_bytes += n as u64;
                        n
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.io_failed("read", e);
                        break;
                    }
                }
            };
            self.in_chunk_left -= got;
            taken += got;
        }
        taken
    }

    fn liveness(&mut self) -> Liveness {
        if self.failed.is_none() && self.watch.bound.is_zero() {
            // No silence to time: a closed connection shows up as readable
            // with nothing to read.
            let ev = sys::poll_now(self.fd, libc::POLLIN | libc::POLLRDHUP);
            if ev & (libc::POLLHUP | libc::POLLERR) != 0 && self.buffered() == 0 {
                self.fill();
            }
        } else {
            // Reads what is there (an end of stream included) and times
            // the silence: one system call. (Nothing once failed.)
            self.silent();
        }
        match &self.failed {
            Some(e) => Liveness::Lost(e.clone()),
            None => Liveness::Alive,
        }
    }

    fn watch(&mut self, bound: std::time::Duration) {
        self.watch.bound = bound;
        self.watch.heard_at = std::time::Instant::now();
    }

    fn heartbeat(&mut self) {
        if self.watch.bound.is_zero() || self.failed.is_some() {
            return;
        }
        if self.tx_bytes == self.watch.sent_mark && self.room(0) {
            let at = self.tx_end;
            self.tx[at] = HEARTBEAT;
            self.tx[at + 1..at + PREFIX].fill(0);
            self.tx_end += PREFIX;
            self.watch.beats += 1;
        }
        self.flush_messages();
        self.watch.sent_mark = self.tx_bytes;
    }

    fn kind(&self) -> Kind {
        Kind::Tcp
    }

    fn route(&self) -> super::Route {
        let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        super::Route::Tcp {
            local: self.sock.local_addr().unwrap_or(unspecified),
            peer: self.sock.peer_addr().unwrap_or(unspecified),
        }
    }
}

#[cfg(test)]
mod tests;
