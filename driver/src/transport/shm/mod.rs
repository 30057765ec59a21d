//! Shared memory between ranks on one host.
//!
//! Per directed pair of ranks the job's mapping ([`map::JobMap`]) holds a
//! **line ring**, a **slot ring** and **eager cells**, in that order
//! ([`crate::job`] draws the layout):
//!
//! * the line ring carries every header; an eager payload shorter than
//!   `cell_min` follows its header in the same lines, and the [`MemDesc`]
//!   body of an RTS or CTS fills the rest of the header's line. An eager
//!   message of up to [`SHORT_BODY`] (40) bytes has the 16-byte short
//!   header (`tandem_core::wire`), so it takes one line, where a full
//!   header leaves room for 24; the reader expands it in
//!   [`peek`](Transport::peek), so nothing above the link sees the
//!   difference;
//! * the **eager cells** carry longer eager payloads in contiguous pieces
//!   of up to [`CELL_PIECE`](crate::CELL_PIECE) bytes, each a slot of a
//!   slot ring published on its own. The sender fills the first piece,
//!   writes the header alone in one line, then fills the other pieces; the
//!   receiver that sees the header finds the first piece published (its
//!   release is ordered before the line's) and copies each piece out as it
//!   is published, so both copies of a payload of several pieces overlap.
//!   The sender starts only with room for every piece, so it never waits
//!   in the middle; the receiver waits for the rest only while the sender
//!   writes it, and tells a sender that died or stopped in between
//!   ([`PIECE_PATIENCE`]) by failing the link instead of delivering a torn
//!   message;
//! * a rendezvous payload is either pulled **single-copy** by the receiver
//!   with `process_vm_readv` (Linux cross-memory attach), or streamed by
//!   the sender through the slot ring, cut into slot-sized chunks and
//!   pipelined: pulled in the size range the host's calibration chose
//!   ([`crate::calibrate`], kept in the job file), unless `TANDEM_CMA`
//!   forces one way.
//!
//! A peer's death is seen through a pidfd: the kernel makes it readable
//! when the process exits.

/// The job file the links live in (its own room, [`crate::job`]; here for
/// the paths that named it before).
pub use crate::job as map;

mod choice;

use super::{Kind, Liveness, MemDesc, Peek, PullStart, Transport, DESC_LEN, PEEK_LEN};
use crate::error::Error;
use crate::job::HostPaths;
use crate::job::JobMap;
use crate::sys;
use choice::PathChoice;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tandem_core::line_ring::{LineConsumer, LineProducer, LineSlot, LINE_PAYLOAD};
use tandem_core::slot_ring::{SlotConsumer, SlotProducer};
use tandem_core::sync::Ordering;
use tandem_core::wire::{Header, HEADER_LEN, SHORT_LEN};

const _: () = assert!(PEEK_LEN == LINE_PAYLOAD, "a peek is one line");

/// The longest eager payload that rides in one line behind a short header
/// ([`Header::short_words`]): 40 bytes, where a full header leaves 24.
pub const SHORT_BODY: usize = LINE_PAYLOAD - SHORT_LEN;

/// The short form of `header`, encoded, if it has one.
fn short_form(header: &[u8; HEADER_LEN]) -> Option<[u8; SHORT_LEN]> {
    let h = Header::from_words([0, 8, 16, 24].map(|at| ld8(header, at)));
    let [a, b] = h.short_words()?;
    let mut out = [0u8; SHORT_LEN];
    out[..8].copy_from_slice(&a.to_le_bytes());
    out[8..].copy_from_slice(&b.to_le_bytes());
    Some(out)
}

/// The 8 bytes of `s` at `at`, little-endian.
#[inline(always)]
fn ld8(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..][..8].try_into().expect("8 bytes"))
}

/// How long a receiver waits for the next piece of an eager cell whose
/// sender lives but publishes nothing (a sender that dies is seen at once):
/// the sender writes all pieces in one call, so only a stopped process
/// (SIGSTOP, a debugger) pauses it this long.
pub const PIECE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The shared-memory link to one peer.
pub struct ShmLink {
    tx_line: LineProducer<'static>,
    tx_slot: SlotProducer<'static>,
    rx_line: LineConsumer<'static>,
    rx_slot: SlotConsumer<'static>,
    /// Eager cells, out and in (none if the layout has none).
    tx_cell: Option<SlotProducer<'static>>,
    rx_cell: Option<SlotConsumer<'static>>,
    /// Smallest eager payload sent through a cell (`usize::MAX`: none).
    cell_min: usize,
    /// Bytes per piece of a cell.
    piece: usize,
    /// Pieces per cell (a payload's first piece always starts a cell: its
    /// last piece is published with the cell's unused pieces).
    per_cell: u64,
    /// How long to wait for a cell's next piece from a live sender.
    patience: std::time::Duration,
    /// Why a message could not be read whole (the link has failed).
    /// (Boxed: an `Option<Error>` here gave `Link` a niche discriminant
    /// that cost 5 instructions on every fast-path send and receive.)
    torn: Option<Box<Error>>,
    slot_bytes: usize,
    /// The peer's index in the mapping (for its pid).
    peer_local: usize,
    /// The payload sizes pulled single-copy.
    pulls: HostPaths,
    /// What this link's pulls and streams have cost, per size class
    /// (`None`: the path is fixed: forced by a setting, or not calibrated).
    learnt: Option<Box<PathChoice>>,
    /// Cross-memory attach to this peer refused once: stream instead.
    no_cma: bool,
    /// Eager payloads sent through a cell.
    cells_sent: u64,
    /// Say so when cross-memory attach is refused.
    debug: bool,
    rank: usize,
    peer: usize,
    pid: u32,
    own_pid: u32,
    pidfd: Option<OwnedFd>,
    /// Detection of a stopped peer process ([`Transport::watch`]).
    stop: StopWatch,
    // Declared last: the ring views above borrow the mapping it keeps alive.
    map: Arc<JobMap>,
}

/// Whether the peer's process has stayed stopped for the bound.
#[derive(Debug, Default)]
struct StopWatch {
    /// The bound; zero: off.
    bound: std::time::Duration,
    /// When the process state was last read (at most every 50 ms).
    looked: Option<std::time::Instant>,
    /// Since when it has been seen stopped.
    since: Option<std::time::Instant>,
    /// The process's `/proc/<pid>/stat`, opened at the first look.
    stat: Option<std::fs::File>,
}

impl StopWatch {
    /// `Some(how long)` once `pid` has been stopped for the bound.
    fn stopped_for(&mut self, pid: u32) -> Option<std::time::Duration> {
        if self.bound.is_zero() {
            return None;
        }
        let now = std::time::Instant::now();
        if self
            .looked
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_millis(50))
        {
            return None;
        }
        self.looked = Some(now);
        if self.stat.is_none() {
            self.stat = sys::open_stat(pid);
        }
        if !self.stat.as_ref().is_some_and(sys::process_stopped) {
            self.since = None;
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let d = now.duration_since(since);
        (d >= self.bound).then_some(d)
    }
}

// SAFETY: the ring views point into the mapping that `map` keeps alive;
// they are plain shared memory accessed through atomics, usable from any
// thread (one at a time: the link is owned by one engine).
unsafe impl Send for ShmLink {}

/// Settings of a shared-memory link.
#[derive(Debug, Clone, Copy)]
pub struct ShmOptions {
    /// Single-copy pulls (`process_vm_readv`) forced on (`Some(true)`) or
    /// off, or `None`: as the host decided (the mapping's
    /// [`paths`](JobMap::paths)).
    pub cma: Option<bool>,
    /// With single copy forced on, the smallest payload pulled.
    pub cma_min: usize,
    /// Report refused pulls on stderr.
    pub debug: bool,
}

impl ShmLink {
    /// The link from local index `me` to local index `peer` of `map`
    /// (global ranks `rank` and `peer_rank`, for messages).
    pub fn new(
        map: Arc<JobMap>,
        me: usize,
        peer: usize,
        rank: usize,
        peer_rank: usize,
        opt: ShmOptions,
    ) -> Self {
        let (tx_line, tx_slot, tx_cell) = map.channel(me, peer);
        let (rx_line, rx_slot, rx_cell) = map.channel(peer, me);
        // Learnt on the link only where the host measured both paths and
        // no setting forces one.
        let learn = opt.cma.is_none() && map.paths().stream_ps != [0, 0];
        let pulls = match opt.cma {
            None => map.paths(),
            Some(true) => HostPaths {
                from: opt.cma_min as u64,
                to: u64::MAX,
                stream_ps: [0, 0],
                cell_min: 0,
            },
            Some(false) => HostPaths::NEVER,
        };
        let cell_min = match tx_cell {
            Some(_) => map.layout().cell_min as usize,
            None => usize::MAX,
        };
        Self {
            tx_line: tx_line.producer(),
            tx_slot: tx_slot.producer(),
            rx_line: rx_line.consumer(),
            rx_slot: rx_slot.consumer(),
            tx_cell: tx_cell.map(|c| c.producer()),
            rx_cell: rx_cell.map(|c| c.consumer()),
            cell_min,
            piece: map.layout().piece_bytes().max(1),
            per_cell: (map.layout().cell_pieces() / u64::from(map.layout().cells.max(1))).max(1),
            patience: PIECE_PATIENCE,
            torn: None,
            slot_bytes: map.layout().slot_bytes as usize,
            peer_local: peer,
            pulls,
            learnt: learn.then(Box::default),
            no_cma: false,
            cells_sent: 0,
            debug: opt.debug,
            rank,
            peer: peer_rank,
            pid: 0,
            own_pid: std::process::id(),
            pidfd: None,
            stop: StopWatch::default(),
            map,
        }
    }

    /// Both ends of a link between ranks 0 and 1 of a fresh anonymous
    /// mapping of `layout`, single copy off (payloads are streamed): for
    /// measurements and tests between two threads of one process.
    ///
    /// # Errors
    /// As [`JobMap::anon`].
    pub fn streamed_pair(
        layout: &crate::config::Layout,
    ) -> crate::error::Result<(ShmLink, ShmLink)> {
        let map = Arc::new(JobMap::anon(2, layout)?);
        let opt = ShmOptions {
            cma: Some(false),
            cma_min: usize::MAX,
            debug: false,
        };
        Ok((
            ShmLink::new(map.clone(), 0, 1, 0, 1, opt),
            ShmLink::new(map, 1, 0, 1, 0, opt),
        ))
    }

    fn peer_pid(&mut self) -> u32 {
        if self.pid == 0 {
            self.pid = self.map.pid_slot(self.peer_local).load(Ordering::Acquire);
        }
        self.pid
    }

    /// The payload sizes this link pulls single-copy.
    pub fn pulls(&self) -> HostPaths {
        self.pulls
    }

    /// Whether single-copy pulls from this peer were refused.
    pub fn cma_refused(&self) -> bool {
        self.no_cma
    }

    /// Eager payloads this link sent through a cell.
    pub fn cells_sent(&self) -> u64 {
        self.cells_sent
    }

    /// Sets how long a receiver waits for the next piece of a cell from a
    /// live sender (default [`PIECE_PATIENCE`]).
    pub fn set_piece_patience(&mut self, d: std::time::Duration) {
        self.patience = d;
    }

    /// Pieces of a cell a payload of `body` bytes takes.
    #[inline(always)]
    fn pieces(&self, body: usize) -> u64 {
        body.div_ceil(self.piece).max(1) as u64
    }

    /// An eager payload through a cell: its first piece, then the header
    /// alone in one line (so the header is never seen before the first
    /// piece), then the other pieces; `false`, writing nothing, unless a
    /// line and every piece have room (so nothing waits in the middle).
    #[inline(never)]
    fn send_via_cell(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        let (per_cell, piece) = (self.per_cell, self.piece);
        // The progress layer sends at most the eager limit: one cell.
        let Some(pad) = per_cell.checked_sub(self.pieces(body.len())) else {
            debug_assert!(false, "an eager payload larger than a cell");
            return false;
        };
        let Some(c) = self.tx_cell.as_mut() else {
            return false;
        };
        if !self.tx_line.line_free() || !c.has_free(per_cell) {
            return false;
        }
        let mut rest = body.chunks(piece);
        let first = rest.next().unwrap_or(&[]);
        // The last piece is published with the cell's unused ones.
        let pushed = c.try_push_padded(first, if rest.len() == 0 { pad } else { 0 });
        debug_assert!(pushed, "the cell was free");
        let wrote = self.tx_line.try_write(header, &[]);
        debug_assert!(wrote, "a line was free");
        while let Some(p) = rest.next() {
            let pushed = c.try_push_padded(p, if rest.len() == 0 { pad } else { 0 });
            debug_assert!(pushed, "the cell was free");
        }
        self.cells_sent += 1;
        true
    }

    /// Reads the cell of a `body`-byte payload whose header was peeked,
    /// its first `dst.len()` bytes into `dst`, piece by piece as the sender
    /// publishes them; `false` if the sender stopped or died in between
    /// (recorded in `torn`).
    #[inline(never)]
    fn take_cell(&mut self, body: usize, dst: &mut [u8]) -> bool {
        let n = dst.len().min(body);
        let pieces = self.pieces(body) as usize;
        let Some(pad) = self.per_cell.checked_sub(pieces as u64) else {
            return self.tear(0, pieces, "its header announces more than a cell holds");
        };
        if self.rx_cell.is_none() {
            return self.tear(0, pieces, "the layout has no cells");
        }
        for i in 0..pieces {
            if !self.piece_ready(i) && !self.await_piece(i, pieces) {
                return false;
            }
            let (at, piece) = (i * self.piece, self.piece);
            let end = n.min(at + piece);
            if let Some(c) = self.rx_cell.as_mut().filter(|_| at < end) {
                let got = c.try_read_ahead(i as u64, &mut dst[at..end]);
                debug_assert!(got, "the piece was published");
            }
        }
        // The cell back in one store (its last piece came with the padding),
        // so a sender waiting for room sees one change of the head per
        // message, not one per piece.
        self.rx_cell.as_mut().is_some_and(|c| {
            let back = c.try_release(pieces as u64 + pad);
            debug_assert!(back, "the last piece came with the padding");
            back
        })
    }

    /// Whether piece `i` of the cell being read is published.
    #[inline(always)]
    fn piece_ready(&mut self, i: usize) -> bool {
        self.rx_cell
            .as_mut()
            .is_some_and(|c| c.has_available(i as u64 + 1))
    }

    /// Waits for piece `i` of `pieces` while the sender lives and the
    /// patience lasts; `false` (torn) otherwise.
    #[cold]
    #[inline(never)]
    fn await_piece(&mut self, i: usize, pieces: usize) -> bool {
        const SPINS: u32 = 1 << 12;
        let mut polls = 0u32;
        let mut since: Option<std::time::Instant> = None;
        loop {
            if self.piece_ready(i) {
                return true;
            }
            polls = polls.wrapping_add(1);
            if polls < SPINS {
                std::hint::spin_loop();
                continue;
            }
            // The sender is off its core (more ranks than cores): let it run.
            std::thread::yield_now();
            if polls % 64 != 0 {
                continue;
            }
            if let Liveness::Lost(e) = self.liveness() {
                self.torn = Some(Box::new(e));
                return false;
            }
            let t = *since.get_or_insert_with(std::time::Instant::now);
            if t.elapsed() >= self.patience {
                let why = format!(
                    "it published nothing for {:.1} s in the middle of an eager message",
                    self.patience.as_secs_f64()
                );
                return self.tear(i, pieces, &why);
            }
        }
    }

    /// The next arrival's line, if it is there and starts with a short
    /// eager header ([`Header::short_words`]).
    #[inline(always)]
    fn short_at_head(&self) -> Option<&[u8; LINE_PAYLOAD]> {
        self.rx_line
            .peek_ref()
            .filter(|l| Header::from_short(ld8(&l[..], 0), 0).is_some())
    }

    /// Records that a frame contradicts its header (the peer broke the
    /// protocol); `false`.
    #[cold]
    fn contradiction(&mut self, detail: String) -> bool {
        self.torn = Some(Box::new(Error::Protocol {
            peer: self.peer,
            detail,
        }));
        false
    }

    /// Records that a message could not be read whole; `false`.
    #[cold]
    fn tear(&mut self, i: usize, pieces: usize, why: &str) -> bool {
        self.torn = Some(Box::new(Error::PeerSilent {
            rank: self.peer,
            host: "this host".into(),
            evidence: format!("{why} ({i} of its {pieces} pieces arrived)"),
        }));
        false
    }

    /// The next line of the ring, if it is free, to write one whole
    /// message assembled in registers (a header and a payload that fit in
    /// [`LINE_PAYLOAD`] bytes) once what it says is committed.
    #[inline(always)]
    pub(crate) fn reserve_line(&mut self) -> Option<LineSlot<'_, 'static>> {
        self.tx_line.reserve_line()
    }

    /// The next arrival's first line in place (`None`: nothing has
    /// arrived); [`consume_line`](Self::consume_line) then takes it if it
    /// was a whole message.
    #[inline(always)]
    pub(crate) fn peek_line_ref(&self) -> Option<&[u8; LINE_PAYLOAD]> {
        self.rx_line.peek_ref()
    }

    /// Consumes a one-line message seen through
    /// [`peek_line_ref`](Self::peek_line_ref).
    #[inline(always)]
    pub(crate) fn consume_line(&mut self) {
        self.rx_line.consume_peeked_line();
    }

    /// Whether the next arrival, an eager message with a full header that
    /// announced `body` (more than a line's worth of) payload bytes, can be
    /// read: every line of it there, or the first piece of its cell (the
    /// others are taken as they come).
    #[inline(always)]
    pub(crate) fn eager_ready(&mut self, body: usize) -> bool {
        if body >= self.cell_min {
            return self.rx_cell.as_mut().is_some_and(|c| c.available() > 0);
        }
        self.rx_line.message_ready(HEADER_LEN, body)
    }

    /// Consumes the next arrival, an eager message of `body` payload bytes
    /// after a full header ([`eager_ready`](Self::eager_ready)), copying
    /// the first `dst.len()` of them into `dst`. `false`: it could not be
    /// read whole (its sender died or stopped in the middle of a cell);
    /// the link has failed, as [`Transport::consume`] says.
    #[inline(always)]
    pub(crate) fn read_eager(&mut self, body: usize, dst: &mut [u8]) -> bool {
        if self.torn.is_some() {
            return false;
        }
        if body >= self.cell_min {
            if !self.take_cell(body, dst) {
                return false;
            }
            self.rx_line.consume_peeked_line();
            return true;
        }
        let read = self.rx_line.try_read(HEADER_LEN, body, dst);
        debug_assert!(read, "readiness was checked");
        read
    }
}

impl Transport for ShmLink {
    #[inline(always)]
    fn room(&mut self, bytes: usize) -> bool {
        let body = bytes.saturating_sub(HEADER_LEN);
        if body >= self.cell_min {
            let per_cell = self.per_cell;
            return self.tx_line.line_free()
                && self.tx_cell.as_mut().is_some_and(|c| c.has_free(per_cell));
        }
        let lines = tandem_core::line_ring::lines_for(bytes) as u64;
        self.tx_line.free(lines) >= lines
    }

    #[inline(always)]
    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        if body.len() >= self.cell_min {
            return self.send_via_cell(header, body);
        }
        if body.len() <= SHORT_BODY {
            if let Some(short) = short_form(header) {
                return self.tx_line.try_write(&short, body);
            }
        }
        self.tx_line.try_write(header, body)
    }

    #[inline(always)]
    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek {
        if !self.rx_line.peek_line(out) {
            return Peek::Nothing;
        }
        if let Some(h) = Header::from_short(ld8(out, 0), ld8(out, 8)) {
            // The header in full, then as much of the payload as follows
            // a full header (`consume` reads the rest from the line).
            let mut full = [0u8; PEEK_LEN];
            full[..HEADER_LEN].copy_from_slice(&h.encode());
            full[HEADER_LEN..].copy_from_slice(&out[SHORT_LEN..SHORT_LEN + DESC_LEN]);
            *out = full;
        }
        Peek::Header
    }

    #[inline(always)]
    fn body_ready(&mut self, body: usize) -> bool {
        if self.short_at_head().is_some() {
            // One line, there already (`consume` checks its length).
            return true;
        }
        if body >= self.cell_min {
            // The first piece: `consume` takes the others as they come.
            return self.rx_cell.as_mut().is_some_and(|c| c.available() > 0);
        }
        HEADER_LEN + body <= LINE_PAYLOAD || self.rx_line.message_ready(HEADER_LEN, body)
    }

    #[inline(always)]
    fn consume(&mut self, peeked: &[u8; PEEK_LEN], body: usize, dst: &mut [u8]) -> bool {
        if self.torn.is_some() {
            return false;
        }
        if let Some(line) = self.short_at_head() {
            if body > SHORT_BODY {
                return self.contradiction(format!(
                    "a short eager header announces {body} bytes, more than its line holds"
                ));
            }
            let n = dst.len().min(body);
            dst[..n].copy_from_slice(&line[SHORT_LEN..SHORT_LEN + n]);
            self.rx_line.consume_peeked_line();
            return true;
        }
        if body < self.cell_min && HEADER_LEN + body <= LINE_PAYLOAD {
            let n = dst.len().min(body);
            dst[..n].copy_from_slice(&peeked[HEADER_LEN..HEADER_LEN + n]);
            self.rx_line.consume_peeked_line();
            return true;
        }
        let n = dst.len().min(body);
        self.read_eager(body, &mut dst[..n])
    }

    fn stream_out(&mut self, _remote: &MemDesc, _offset: usize, src: &[u8]) -> usize {
        let mut taken = 0;
        while taken < src.len() {
            let n = self.slot_bytes.min(src.len() - taken);
            if !self.tx_slot.try_push(&src[taken..taken + n]) {
                break;
            }
            taken += n;
        }
        taken
    }

    fn stream_in(&mut self, left: usize, mut dst: Option<&mut [u8]>) -> usize {
        let mut taken = 0;
        while taken < left {
            let n = self.slot_bytes.min(left - taken);
            let ok = match dst.as_deref_mut() {
                Some(d) => self.rx_slot.try_pop(&mut d[taken..taken + n]),
                None => self.rx_slot.try_skip(),
            };
            if !ok {
                break;
            }
            taken += n;
        }
        if taken > 0 {
            if let Some(l) = self.learnt.as_mut() {
                l.stream_taken(left, taken);
            }
        }
        taken
    }

    fn start_pull(&mut self, remote: MemDesc, dst: &mut [u8]) -> PullStart {
        let n = dst.len();
        let calibrated = self.pulls.pulls(n);
        let pull = match self.learnt.as_mut() {
            Some(l) => l.pull_next(n, calibrated, self.slot_bytes),
            None => calibrated,
        };
        if !pull || self.no_cma {
            return PullStart::Unsupported;
        }
        let pid = self.peer_pid();
        let t = std::time::Instant::now();
        match sys::cma_read(pid, remote.addr, dst) {
            Ok(()) => {
                if let Some(l) = self.learnt.as_mut() {
                    l.pulled(n, t.elapsed().as_nanos() as f64);
                }
                PullStart::Done
            }
            Err(e) => {
                self.no_cma = true;
                if self.debug {
                    eprintln!(
                        "tandem[{}]: cross-memory attach from rank {} refused ({e}); \
                         streaming through the slot ring instead",
                        self.rank, self.peer
                    );
                }
                PullStart::Unsupported
            }
        }
    }

    fn liveness(&mut self) -> Liveness {
        if let Some(e) = &self.torn {
            return Liveness::Lost((**e).clone());
        }
        let own = self.own_pid;
        let pid = self.peer_pid();
        // Not attached yet, or a thread of this very process.
        if pid == 0 || pid == own {
            return Liveness::Alive;
        }
        if sys::process_exited(pid, &mut self.pidfd) {
            return Liveness::Lost(Error::PeerLost { rank: self.peer });
        }
        match self.stop.stopped_for(pid) {
            Some(d) => Liveness::Lost(Error::PeerSilent {
                rank: self.peer,
                host: "this host".into(),
                evidence: format!(
                    "its process {pid} has been stopped (SIGSTOP or a debugger) for {:.1} s",
                    d.as_secs_f64()
                ),
            }),
            None => Liveness::Alive,
        }
    }

    fn watch(&mut self, bound: std::time::Duration) {
        self.stop.bound = bound;
    }

    fn kind(&self) -> Kind {
        Kind::Shm
    }

    fn route(&self) -> super::Route {
        super::Route::Shm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Layout, CELL_PIECE};
    use std::time::{Duration, Instant};
    use tandem_core::wire::{Header, Kind as WireKind};

    fn pair(layout: &Layout) -> (ShmLink, ShmLink) {
        ShmLink::streamed_pair(layout).expect("job memory")
    }

    fn eager(len: usize) -> [u8; HEADER_LEN] {
        Header::new(WireKind::Eager, 0, 0, len as u64).encode()
    }

    fn pattern(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i * 31 + k * 7) as u8).collect()
    }

    /// An eager message of up to 40 bytes rides in one line behind the
    /// short header, and the reader sees the full header; anything else
    /// (a synchronous one, a longer one) keeps the full header.
    #[test]
    fn small_eager_messages_take_one_line_with_the_short_header() {
        let (mut tx, mut rx) = pair(&Layout::default());
        let mut out = [0u8; PEEK_LEN];
        for n in 0..=64 {
            let mut h = Header::new(WireKind::Eager, 2, 77, n as u64);
            (h.seq, h.credit, h.ecredit) = (n as u16, 3, 4);
            let sync = n % 9 == 4;
            if sync {
                (h.kind, h.token) = (WireKind::EagerSync as u8, 99);
            }
            let body = pattern(n, n);
            let before = tx.tx_line.tail();
            assert!(tx.try_send(&h.encode(), &body));
            let lines = tx.tx_line.tail() - before;
            let short = !sync && n <= SHORT_BODY;
            let head = if short { SHORT_LEN } else { HEADER_LEN };
            assert_eq!(
                lines,
                tandem_core::line_ring::lines_for(head + n) as u64,
                "{n} B"
            );
            assert_eq!(rx.peek(&mut out), Peek::Header);
            assert_eq!(out[..HEADER_LEN], h.encode(), "{n} B: the full header");
            let k = n.min(DESC_LEN);
            assert_eq!(out[HEADER_LEN..HEADER_LEN + k], body[..k], "{n} B");
            assert!(rx.body_ready(n));
            let mut dst = vec![0xAA; n + 1];
            assert!(rx.consume(&out, n, &mut dst[..n]), "{n} B");
            assert_eq!((&dst[..n], dst[n]), (&body[..], 0xAA), "{n} B");
        }
        assert_eq!(rx.peek(&mut out), Peek::Nothing, "every line consumed");
    }

    /// A short header that announces more than its line holds is the
    /// peer's protocol error: the message is not delivered, the link fails
    /// and says why.
    #[test]
    fn a_short_header_longer_than_its_line_fails_the_link() {
        let (mut tx, mut rx) = pair(&Layout::default());
        let w0 = Header::short_word(0, 5);
        let w1 = Header::short_second(0, 0, 0, SHORT_BODY as u16 + 1);
        let mut head = [0u8; SHORT_LEN];
        head[..8].copy_from_slice(&w0.to_le_bytes());
        head[8..].copy_from_slice(&w1.to_le_bytes());
        assert!(tx.tx_line.try_write(&head, &[7; SHORT_BODY]));
        let mut out = [0u8; PEEK_LEN];
        assert_eq!(rx.peek(&mut out), Peek::Header);
        let len = SHORT_BODY + 1;
        assert!(rx.body_ready(len));
        assert!(!rx.consume(&out, len, &mut [0u8; 64]));
        match rx.liveness() {
            Liveness::Lost(Error::Protocol { detail, .. }) => {
                assert!(detail.contains("short eager header"), "{detail}")
            }
            Liveness::Lost(e) => panic!("the link failed otherwise: {e}"),
            Liveness::Alive => panic!("the link did not fail"),
        }
    }

    /// Payloads of several pieces between two threads: the receiver copies
    /// pieces out while the sender still writes the later ones, and every
    /// payload arrives whole and in order, truncated ones included.
    #[test]
    fn cells_of_several_pieces_arrive_whole_while_still_being_written() {
        let layout = Layout::default().cell_min(64);
        let (mut tx, mut rx) = pair(&layout);
        assert_eq!(layout.piece_bytes(), CELL_PIECE);
        let eager_limit = layout.eager_limit as usize;
        let len = |i: usize| 64 + (i * 977) % (eager_limit - 63);
        const N: usize = 20_000;
        std::thread::scope(|s| {
            s.spawn(move || {
                for i in 0..N {
                    let (h, b) = (eager(len(i)), pattern(i, len(i)));
                    let end = Instant::now() + Duration::from_secs(20);
                    while !tx.try_send(&h, &b) {
                        assert!(Instant::now() < end, "message {i} never had room");
                        std::thread::yield_now();
                    }
                }
                assert_eq!(tx.cells_sent(), N as u64);
            });
            let mut dst = vec![0u8; eager_limit];
            let mut out = [0u8; PEEK_LEN];
            for i in 0..N {
                let n = len(i);
                let end = Instant::now() + Duration::from_secs(20);
                while !(rx.peek(&mut out) == Peek::Header && rx.body_ready(n)) {
                    assert!(Instant::now() < end, "message {i} never came");
                    std::thread::yield_now();
                }
                assert_eq!(out[..HEADER_LEN], eager(n));
                // Every seventh one read only in part: the rest is dropped.
                let take = if i % 7 == 0 { n / 3 } else { n };
                assert!(rx.consume(&out, n, &mut dst[..take]), "message {i}");
                assert!(dst[..take] == pattern(i, n)[..take], "message {i} of {n} B");
            }
        });
    }

    /// A sender that published a cell's first piece and its header, then
    /// nothing more: the receiver reads no torn message; the link fails
    /// with what was seen.
    #[test]
    fn a_cell_whose_sender_stops_in_the_middle_is_torn() {
        let layout = Layout::default().cell_min(64);
        let (mut tx, mut rx) = pair(&layout);
        rx.set_piece_patience(Duration::from_millis(100));
        let n = 3 * CELL_PIECE + 10;
        let body = pattern(1, n);
        // What `send_via_cell` does, stopped after the header.
        let c = tx.tx_cell.as_mut().expect("cells");
        assert!(c.try_push(&body[..CELL_PIECE]));
        assert!(tx.tx_line.try_write(&eager(n), &[]));
        let mut out = [0u8; PEEK_LEN];
        assert_eq!(rx.peek(&mut out), Peek::Header);
        assert!(rx.body_ready(n), "the first piece is there");
        let mut dst = vec![0u8; n];
        let t = Instant::now();
        assert!(!rx.consume(&out, n, &mut dst), "a torn message is not read");
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "it waited its patience"
        );
        match rx.liveness() {
            Liveness::Lost(Error::PeerSilent {
                rank: 0, evidence, ..
            }) => {
                assert!(evidence.contains("1 of its 4 pieces arrived"), "{evidence}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!rx.consume(&out, n, &mut dst), "the link stays failed");
    }

    /// A sender never starts a cell without room for all its pieces, though
    /// a stale view of the ring showed some free.
    #[test]
    fn a_cell_starts_only_with_room_for_every_piece() {
        let layout = Layout::default().cell_min(64).cells(1);
        let (mut tx, mut rx) = pair(&layout);
        let whole = layout.eager_limit as usize;
        let mut out = [0u8; PEEK_LEN];
        let mut dst = vec![0u8; whole];
        // One piece in flight: a whole cell does not fit.
        assert!(tx.try_send(&eager(100), &pattern(0, 100)));
        assert!(!tx.room(HEADER_LEN + whole));
        assert!(!tx.try_send(&eager(whole), &pattern(1, whole)));
        assert_eq!(rx.peek(&mut out), Peek::Header);
        assert!(rx.consume(&out, 100, &mut dst[..100]));
        assert!(tx.room(HEADER_LEN + whole), "room once the piece is back");
        assert!(tx.try_send(&eager(whole), &pattern(1, whole)));
        assert_eq!(rx.peek(&mut out), Peek::Header);
        assert!(rx.consume(&out, whole, &mut dst));
        assert!(dst == pattern(1, whole));
    }
}
