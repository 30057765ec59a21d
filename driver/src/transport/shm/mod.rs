//! Shared memory between ranks on one host.
//!
//! Per directed pair of ranks the job's mapping ([`map::JobMap`]) holds a
//! **line ring**, a **slot ring** and **eager cells**, in that order
//! ([`crate::job`] draws the layout):
//!
//! * the line ring carries every header; an eager payload shorter than
//!   `cell_min` follows its header in the same lines, and the [`MemDesc`]
//!   body of an RTS or CTS fills the rest of the header's line;
//! * the **eager cells**, a slot ring of `eager_limit`-byte slots, carry
//!   longer eager payloads in one contiguous copy: the sender fills a cell,
//!   then writes the header alone in one line, so the receiver that sees the
//!   header finds the payload published (the cell's release is ordered
//!   before the line's);
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

use super::{Kind, Liveness, MemDesc, Peek, PullStart, Transport, PEEK_LEN};
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
use tandem_core::wire::HEADER_LEN;

const _: () = assert!(PEEK_LEN == LINE_PAYLOAD, "a peek is one line");

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

    /// An eager payload through a cell: the payload first, then the header
    /// alone in one line (so the header is never seen before its payload);
    /// `false`, writing nothing, if either has no room.
    #[inline(never)]
    fn send_via_cell(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        let Some(c) = self.tx_cell.as_mut() else {
            return false;
        };
        if !self.tx_line.line_free() || c.free() == 0 {
            return false;
        }
        let pushed = c.try_push(body);
        debug_assert!(pushed, "a cell was free");
        let wrote = self.tx_line.try_write(header, &[]);
        debug_assert!(wrote, "a line was free");
        self.cells_sent += 1;
        true
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
}

impl Transport for ShmLink {
    #[inline(always)]
    fn room(&mut self, bytes: usize) -> bool {
        if bytes.saturating_sub(HEADER_LEN) >= self.cell_min {
            return self.tx_line.line_free() && self.tx_cell.as_mut().is_some_and(|c| c.free() > 0);
        }
        let lines = tandem_core::line_ring::lines_for(bytes) as u64;
        self.tx_line.free(lines) >= lines
    }

    #[inline(always)]
    fn try_send(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> bool {
        if body.len() >= self.cell_min {
            return self.send_via_cell(header, body);
        }
        self.tx_line.try_write(header, body)
    }

    #[inline(always)]
    fn peek(&mut self, out: &mut [u8; PEEK_LEN]) -> Peek {
        if self.rx_line.peek_line(out) {
            Peek::Header
        } else {
            Peek::Nothing
        }
    }

    #[inline(always)]
    fn body_ready(&mut self, body: usize) -> bool {
        if body >= self.cell_min {
            return self.rx_cell.as_mut().is_some_and(|c| c.available() > 0);
        }
        HEADER_LEN + body <= LINE_PAYLOAD || self.rx_line.message_ready(HEADER_LEN, body)
    }

    #[inline(always)]
    fn consume(&mut self, peeked: &[u8; PEEK_LEN], body: usize, dst: &mut [u8]) {
        if body >= self.cell_min {
            let n = dst.len().min(body);
            if let Some(c) = self.rx_cell.as_mut() {
                let got = if n == 0 {
                    c.try_skip()
                } else {
                    c.try_pop(&mut dst[..n])
                };
                debug_assert!(got, "readiness was checked");
            }
            self.rx_line.consume_peeked_line();
        } else if HEADER_LEN + body <= LINE_PAYLOAD {
            let n = dst.len().min(body);
            dst[..n].copy_from_slice(&peeked[HEADER_LEN..HEADER_LEN + n]);
            self.rx_line.consume_peeked_line();
        } else {
            let n = dst.len().min(body);
            let read = self.rx_line.try_read(HEADER_LEN, body, &mut dst[..n]);
            debug_assert!(read, "readiness was checked");
        }
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
