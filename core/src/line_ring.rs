//! Line ring: 64-byte lines that carry their own sequence flag.
//!
//! The NCCL "LL" idea at cache-line size. Each [`Line`] holds
//! [`LINE_PAYLOAD`] (56) payload bytes and an 8-byte flag in the same cache
//! line. The writer of global line number `n` fills the payload, then stores
//! `flag = n + 1` with `Release`; the reader polls *the line itself* until
//! its flag reads `n + 1` (`Acquire`). A small message therefore costs one
//! cache-line transfer: when the reader sees the flag, the payload came in
//! the same line. Stale lines from the previous lap carry `n + 1 - lines`
//! and never look ready.
//!
//! Lines are reused, so the reader still returns them: it publishes a
//! monotonic `head` (lines consumed) on its own 128-byte span, which the
//! writer reloads only when its cached copy says the ring is full.
//!
//! Messages are framed as a `prefix` (e.g. a [`crate::wire::Header`])
//! followed by the payload, packed into consecutive lines.
//!
//! ```
//! use tandem_core::line_ring::{Line, LineRing};
//! use tandem_core::slot_ring::PaddedCounter;
//! let head = PaddedCounter::default();
//! let lines: Vec<Line> = (0..8).map(|_| Line::default()).collect();
//! let ring = LineRing::new(&head, &lines).unwrap();
//! let (mut tx, mut rx) = (ring.producer(), ring.consumer());
//! assert!(tx.try_write(b"HDR", b"payload"));
//! let mut prefix = [0u8; 3];
//! let mut body = [0u8; 7];
//! assert!(rx.peek_prefix(&mut prefix));
//! assert!(rx.try_read(3, 7, &mut body));
//! assert_eq!(&body, b"payload");
//! ```

use crate::slot_ring::{LayoutError, PaddedCounter};
use crate::sync::{AtomicU64, Ordering, SharedCell};
use crate::{CACHE_LINE, COUNTER_PAD};

/// Payload bytes per line.
pub const LINE_PAYLOAD: usize = CACHE_LINE - 8;

/// One 64-byte line: payload then its sequence flag.
#[repr(C, align(64))]
pub struct Line {
    data: SharedCell<[u8; LINE_PAYLOAD]>,
    flag: AtomicU64,
}

impl Default for Line {
    fn default() -> Self {
        Self {
            data: SharedCell::new([0; LINE_PAYLOAD]),
            flag: AtomicU64::new(0),
        }
    }
}

#[cfg(not(loom))]
static_assertions::assert_eq_size!(Line, [u8; CACHE_LINE]);

/// Lines needed for a message of `total` bytes (prefix + payload); a
/// zero-length message still takes one line.
#[inline]
pub const fn lines_for(total: usize) -> usize {
    if total == 0 {
        1
    } else {
        total.div_ceil(LINE_PAYLOAD)
    }
}

/// A view of one line ring: the consumer's head counter and the lines.
#[derive(Clone, Copy)]
pub struct LineRing<'a> {
    head: &'a PaddedCounter,
    lines: &'a [Line],
    /// `lines.len() - 1` (the length is a power of two): a sequence
    /// number's line index is `seq & mask`.
    mask: u64,
}

impl<'a> LineRing<'a> {
    /// Bytes of shared memory a ring of `lines` lines occupies (head first).
    /// `None` if the size overflows `isize`.
    pub const fn bytes_needed(lines: usize) -> Option<usize> {
        match lines.checked_mul(CACHE_LINE) {
            Some(n) if n <= isize::MAX as usize - COUNTER_PAD => Some(COUNTER_PAD + n),
            _ => None,
        }
    }

    /// A ring over `head` and `lines` (`lines.len()` a power of two).
    ///
    /// # Errors
    /// [`LayoutError::Steps`] if `lines` is empty or its length is not a power
    /// of two.
    pub fn new(head: &'a PaddedCounter, lines: &'a [Line]) -> Result<Self, LayoutError> {
        if lines.is_empty() || !lines.len().is_power_of_two() {
            return Err(LayoutError::Steps(lines.len() as u64));
        }
        Ok(Self {
            head,
            lines,
            mask: lines.len() as u64 - 1,
        })
    }

    /// A ring laid over raw memory: the head counter at `ptr`, `count`
    /// lines right after it.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay mapped and readable/writable for `'a` and be
    /// accessed by other agents only through this ring protocol.
    ///
    /// # Errors
    /// * [`LayoutError::Misaligned`]: `ptr` is null or not aligned to
    ///   [`COUNTER_PAD`] bytes;
    /// * [`LayoutError::Steps`]: `count` is 0 or not a power of two, or the
    ///   ring's size overflows `isize`;
    /// * [`LayoutError::TooSmall`]: `len` is below
    ///   [`bytes_needed(count)`](Self::bytes_needed).
    pub unsafe fn from_raw(ptr: *mut u8, len: usize, count: usize) -> Result<Self, LayoutError> {
        if ptr.is_null() || (ptr as usize) % COUNTER_PAD != 0 {
            return Err(LayoutError::Misaligned);
        }
        let Some(needed) = Self::bytes_needed(count) else {
            return Err(LayoutError::Steps(count as u64));
        };
        if len < needed {
            return Err(LayoutError::TooSmall { needed, got: len });
        }
        // SAFETY: size and alignment checked above; any bit pattern is a
        // valid counter, flag or payload byte.
        let (head, lines) = unsafe {
            (
                &*(ptr as *const PaddedCounter),
                core::slice::from_raw_parts(ptr.add(COUNTER_PAD) as *const Line, count),
            )
        };
        Self::new(head, lines)
    }

    /// Number of lines.
    pub fn capacity(&self) -> usize {
        self.lines.len()
    }

    /// Largest prefix + payload one message may carry (the whole ring).
    pub fn max_message(&self) -> usize {
        self.lines.len() * LINE_PAYLOAD
    }

    #[inline(always)]
    fn line(&self, n: u64) -> &'a Line {
        let i = (n & self.mask) as usize;
        debug_assert!(i < self.lines.len());
        // SAFETY: `lines.len()` is a power of two (checked in `new`) and
        // `mask` is `len - 1`, so masking always yields an index below `len`.
        unsafe { self.lines.get_unchecked(i) }
    }

    /// The writer end. Create exactly one per ring.
    pub fn producer(&self) -> LineProducer<'a> {
        let head = self.head.value.load(Ordering::Acquire);
        LineProducer {
            ring: *self,
            tail: head,
            limit: head.saturating_add(self.lines.len() as u64),
        }
    }

    /// The reader end. Create exactly one per ring.
    pub fn consumer(&self) -> LineConsumer<'a> {
        LineConsumer {
            ring: *self,
            tail: self.head.value.load(Ordering::Relaxed),
        }
    }
}

/// Writer end of a [`LineRing`].
pub struct LineProducer<'a> {
    ring: LineRing<'a>,
    tail: u64,
    /// The reader's head as last read plus the capacity (saturating): the
    /// first sequence number not free for writing. Kept as that sum so
    /// that the one-line check is one compare.
    limit: u64,
}

impl<'a> LineProducer<'a> {
    #[inline(always)]
    fn free_cached(&self) -> u64 {
        let cap = self.ring.lines.len() as u64;
        self.limit.saturating_sub(self.tail).min(cap)
    }

    /// Reloads the reader's head into [`limit`](Self::limit).
    #[inline(always)]
    fn reload(&mut self) {
        let cap = self.ring.lines.len() as u64;
        self.limit = self
            .ring
            .head
            .value
            .load(Ordering::Acquire)
            .saturating_add(cap);
    }

    /// Lines free for writing (reloads the reader's head if needed).
    #[inline(always)]
    pub fn free(&mut self, want: u64) -> u64 {
        if self.free_cached() < want {
            self.reload();
        }
        self.free_cached()
    }

    /// Writes `prefix` then `payload` into consecutive lines and publishes
    /// them, or returns `false` (writing nothing) if not enough lines are
    /// free.
    ///
    /// # Panics
    /// If the message is larger than the whole ring
    /// ([`LineRing::max_message`]) or `prefix` is longer than a line.
    #[must_use = "`false` means nothing was written: the ring is full"]
    #[inline(always)]
    pub fn try_write(&mut self, prefix: &[u8], payload: &[u8]) -> bool {
        assert!(prefix.len() <= LINE_PAYLOAD, "prefix longer than a line");
        let total = prefix.len() + payload.len();
        assert!(
            total <= self.ring.max_message(),
            "message larger than the line ring"
        );
        if total <= LINE_PAYLOAD {
            if !self.line_free() {
                return false;
            }
            // One line: assemble it on the stack, then one fixed-size store
            // of the payload and the flag.
            let mut buf = [0u8; LINE_PAYLOAD];
            buf[..prefix.len()].copy_from_slice(prefix);
            buf[prefix.len()..total].copy_from_slice(payload);
            self.publish_line(buf);
            return true;
        }
        let n = lines_for(total) as u64;
        if self.free(n) < n {
            return false;
        }
        let mut rest = payload;
        for i in 0..n {
            let seq = self.tail + i;
            let line = self.ring.line(seq);
            let at = if i == 0 { prefix.len() } else { 0 };
            let take = rest.len().min(LINE_PAYLOAD - at);
            // SAFETY: the reader has returned this line (free() checked its
            // head), so nobody else accesses the payload until the flag below.
            line.data.with_mut(|p| {
                // SAFETY: as above: this agent owns the line until its flag.
                let d = unsafe { &mut *p };
                if i == 0 {
                    d[..at].copy_from_slice(prefix);
                }
                d[at..at + take].copy_from_slice(&rest[..take]);
            });
            rest = &rest[take..];
            line.flag.store(seq + 1, publish_order());
        }
        self.tail += n;
        true
    }

    /// Writes one whole line (`words`, little-endian) and publishes it, or
    /// returns `false` (writing nothing) if the ring is full. The lean form
    /// of [`try_write`](Self::try_write) for a message assembled in
    /// registers: one check, seven stores and the flag.
    #[must_use = "`false` means nothing was written: the ring is full"]
    #[inline(always)]
    pub fn try_write_words(&mut self, words: &[u64; LINE_WORDS]) -> bool {
        match self.reserve_line() {
            Some(slot) => {
                slot.write_words(words);
                true
            }
            None => false,
        }
    }

    /// The next line, if it is free: a [`LineSlot`] that writes it once,
    /// or drops without writing anything. The check and the write of
    /// [`try_write_words`](Self::try_write_words) taken apart, so that a
    /// caller can commit what the line will say (a sequence number, a
    /// credit) only once it knows there is room, without checking twice.
    #[inline(always)]
    pub fn reserve_line(&mut self) -> Option<LineSlot<'_, 'a>> {
        if !self.line_free() {
            return None;
        }
        Some(LineSlot { producer: self })
    }

    /// Stores one whole line at the tail and publishes it; the caller has
    /// checked [`line_free`](Self::line_free).
    #[inline(always)]
    fn publish_line(&mut self, buf: [u8; LINE_PAYLOAD]) {
        let line = self.ring.line(self.tail);
        // SAFETY: the reader has returned this line (the caller checked its
        // head), so nobody else accesses the payload until the flag below.
        line.data.with_mut(|p| unsafe { *p = buf });
        self.tail += 1;
        line.flag.store(self.tail, publish_order());
    }

    /// Whether the next line is free: the reader's head (cached, reloaded
    /// only when the cached one says the ring is full) is within a lap. A
    /// corrupt head from shared memory saturates, so it can only make the
    /// ring look full, never panic.
    #[inline(always)]
    pub fn line_free(&mut self) -> bool {
        if self.tail < self.limit {
            return true;
        }
        self.reload();
        self.tail < self.limit
    }

    /// Lines written so far.
    pub fn tail(&self) -> u64 {
        self.tail
    }
}

/// The free line at a [`LineProducer`]'s tail, from
/// [`LineProducer::reserve_line`]; holding it borrows the producer, so
/// nothing else is written before it.
#[must_use = "a reserved line is written by `write_words`; dropped, nothing is written"]
pub struct LineSlot<'p, 'a> {
    producer: &'p mut LineProducer<'a>,
}

impl LineSlot<'_, '_> {
    /// Writes the line (`words`, little-endian) and publishes it.
    #[inline(always)]
    pub fn write_words(self, words: &[u64; LINE_WORDS]) {
        self.producer.publish_line(words_to_line(words));
    }
}

/// A line's payload made of `words`, little-endian.
#[inline(always)]
fn words_to_line(words: &[u64; LINE_WORDS]) -> [u8; LINE_PAYLOAD] {
    let mut buf = [0u8; LINE_PAYLOAD];
    for (b, w) in buf.chunks_exact_mut(8).zip(words) {
        b.copy_from_slice(&w.to_le_bytes());
    }
    buf
}

/// Copies `src` (at most a line's [`LINE_PAYLOAD`] bytes) to `dst` of the
/// same length with a few fixed-size copies, overlapping where the length
/// is not one of theirs: inlined moves instead of a call to `memcpy`, which
/// for the few bytes of a line costs more than the copy itself.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    debug_assert!(n == dst.len() && n <= LINE_PAYLOAD);
    match n {
        32.. => copy_ends::<32>(dst, src),
        16.. => copy_ends::<16>(dst, src),
        8.. => copy_ends::<8>(dst, src),
        4.. => copy_ends::<4>(dst, src),
        1.. => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        0 => {}
    }
}

/// [`copy_short`] of `K..=2K` bytes: the first `K` and the last `K`.
#[inline(always)]
fn copy_ends<const K: usize>(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    dst[..K].copy_from_slice(&src[..K]);
    dst[n - K..][..K].copy_from_slice(&src[n - K..][..K]);
}

/// 64-bit words of payload per line.
pub const LINE_WORDS: usize = LINE_PAYLOAD / 8;

/// The ordering a line's flag is published with (Release; see
/// [`crate::mutation::Mutant::RelaxedFlagPublish`]).
#[inline(always)]
fn publish_order() -> Ordering {
    if crate::mutation::active(crate::mutation::Mutant::RelaxedFlagPublish) {
        Ordering::Relaxed
    } else {
        Ordering::Release
    }
}

/// Reader end of a [`LineRing`].
pub struct LineConsumer<'a> {
    ring: LineRing<'a>,
    tail: u64,
}

impl LineConsumer<'_> {
    #[inline(always)]
    fn ready(&self, k: u64) -> bool {
        let seq = self.tail + k;
        self.ring.line(seq).flag.load(Ordering::Acquire) == seq + 1
    }

    /// Copies the first `dst.len()` bytes of the next message's first line
    /// (its prefix) into `dst` without consuming anything; `false` if no
    /// message has arrived.
    #[inline]
    pub fn peek_prefix(&self, dst: &mut [u8]) -> bool {
        assert!(dst.len() <= LINE_PAYLOAD);
        if !self.ready(0) {
            return false;
        }
        self.ring.line(self.tail).data.with(|p| {
            // SAFETY: the flag (Acquire) shows the writer is done with it.
            dst.copy_from_slice(unsafe { &(&*p)[..dst.len()] })
        });
        true
    }

    /// Copies the whole first line of the next message into `out`, without
    /// consuming it; `false` if no message has arrived.
    #[inline(always)]
    pub fn peek_line(&self, out: &mut [u8; LINE_PAYLOAD]) -> bool {
        let line = self.ring.line(self.tail);
        if line.flag.load(Ordering::Acquire) != self.tail + 1 {
            return false;
        }
        // SAFETY: the flag (Acquire) shows the writer is done with it.
        line.data.with(|p| *out = unsafe { *p });
        true
    }

    /// The next message's first line in place, without copying or
    /// consuming it; `None` if no message has arrived. The view borrows
    /// this consumer, so it ends before the line can be consumed and
    /// handed back to the writer. (Not in loom builds: loom tracks an
    /// access only for the length of a closure.)
    #[cfg(not(loom))]
    #[inline(always)]
    pub fn peek_ref(&self) -> Option<&[u8; LINE_PAYLOAD]> {
        let line = self.ring.line(self.tail);
        if line.flag.load(Ordering::Acquire) != self.tail + 1 {
            return None;
        }
        // SAFETY: the flag (Acquire) shows the writer is done with the
        // line, and it does not write it again before this reader consumes
        // it, which needs `&mut self`, so not while the view lives.
        Some(line.data.with(|p| unsafe { &*p }))
    }

    /// Consumes a message that fits in one line, after
    /// [`peek_line`](Self::peek_line) returned `true` for it. (Called
    /// otherwise it only desynchronises this ring: later reads wait for
    /// lines that are never written; no memory is touched.)
    #[inline(always)]
    pub fn consume_peeked_line(&mut self) {
        self.tail += 1;
        self.ring.head.value.store(self.tail, Ordering::Release);
    }

    /// Whether every line of the next message (a `prefix_len`-byte prefix
    /// and a `payload_len`-byte payload) has arrived, so that
    /// [`try_read`](Self::try_read) of it will succeed.
    #[inline]
    pub fn message_ready(&self, prefix_len: usize, payload_len: usize) -> bool {
        match prefix_len.checked_add(payload_len) {
            Some(t) if prefix_len <= LINE_PAYLOAD && t <= self.ring.max_message() => {
                self.ready(lines_for(t) as u64 - 1)
            }
            _ => false,
        }
    }

    /// Consumes the next message, whose prefix is `prefix_len` bytes and
    /// payload `payload_len` bytes (as its prefix announced), copying the
    /// first `dst.len().min(payload_len)` payload bytes into `dst`. Returns
    /// `false` (consuming nothing) until every line of it has arrived.
    ///
    /// Returns `false` forever for a message longer than the ring; callers
    /// validate lengths first.
    #[must_use = "`false` means nothing was read: the message has not fully arrived"]
    #[inline]
    pub fn try_read(&mut self, prefix_len: usize, payload_len: usize, dst: &mut [u8]) -> bool {
        let total = match prefix_len.checked_add(payload_len) {
            Some(t) if prefix_len <= LINE_PAYLOAD && t <= self.ring.max_message() => t,
            _ => return false,
        };
        let n = lines_for(total) as u64;
        // The writer fills lines in order and sets each flag with Release
        // after its payload, so acquiring the last line's flag makes every
        // earlier line's payload visible too (the loom models check this).
        if !self.ready(n - 1) {
            return false;
        }
        let want = dst.len().min(payload_len);
        let mut done = 0;
        for k in 0..n {
            if done >= want {
                break;
            }
            let at = if k == 0 { prefix_len } else { 0 };
            let take = (want - done).min(LINE_PAYLOAD - at);
            self.ring.line(self.tail + k).data.with(|p| {
                // SAFETY: the flag (Acquire) shows the writer is done with it.
                copy_short(&mut dst[done..done + take], unsafe {
                    &(&*p)[at..at + take]
                })
            });
            done += take;
        }
        self.tail += n;
        self.ring.head.value.store(self.tail, Ordering::Release);
        true
    }

    /// Lines consumed so far.
    pub fn tail(&self) -> u64 {
        self.tail
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn ring_mem(n: usize) -> (PaddedCounter, Vec<Line>) {
        (
            PaddedCounter::default(),
            (0..n).map(|_| Line::default()).collect(),
        )
    }

    #[test]
    fn short_copies_move_every_length_exactly() {
        let src: Vec<u8> = (1..=LINE_PAYLOAD as u8).collect();
        for n in 0..=LINE_PAYLOAD {
            let mut dst = [0u8; LINE_PAYLOAD + 2];
            copy_short(&mut dst[1..1 + n], &src[..n]);
            assert_eq!(&dst[1..1 + n], &src[..n], "length {n}");
            assert_eq!((dst[0], dst[1 + n]), (0, 0), "length {n}: wrote outside");
        }
    }

    #[test]
    fn lines_for_boundaries() {
        assert_eq!(lines_for(0), 1);
        assert_eq!(lines_for(1), 1);
        assert_eq!(lines_for(56), 1);
        assert_eq!(lines_for(57), 2);
        assert_eq!(lines_for(112), 2);
        assert_eq!(lines_for(113), 3);
    }

    #[test]
    fn messages_of_every_small_size_round_trip_across_wraps() {
        let (head, lines) = ring_mem(8);
        let ring = LineRing::new(&head, &lines).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        let src: Vec<u8> = (0..=255u8).collect();
        for len in 0..=200usize {
            let body = &src[..len % 256];
            let prefix = (len as u32).to_le_bytes();
            let body = &body[..len.min(8 * LINE_PAYLOAD - 4)];
            assert!(tx.try_write(&prefix, body));
            let mut p = [0u8; 4];
            assert!(rx.peek_prefix(&mut p));
            assert_eq!(u32::from_le_bytes(p) as usize, len);
            let mut out = std::vec![0u8; body.len()];
            assert!(rx.try_read(4, body.len(), &mut out));
            assert_eq!(out, body);
            assert!(!rx.peek_prefix(&mut p), "nothing left");
        }
    }

    #[test]
    fn full_ring_refuses_and_reader_sees_nothing_partial() {
        let (head, lines) = ring_mem(4);
        let ring = LineRing::new(&head, &lines).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        assert!(tx.try_write(&[], &[7u8; 3 * LINE_PAYLOAD]));
        assert!(
            !tx.try_write(&[], &[1u8; 2 * LINE_PAYLOAD]),
            "only one line free"
        );
        let mut out = [0u8; 3 * LINE_PAYLOAD];
        assert!(rx.try_read(0, out.len(), &mut out));
        assert!(out.iter().all(|&b| b == 7));
        assert!(tx.try_write(&[], &[1u8; 2 * LINE_PAYLOAD]));
    }

    #[test]
    fn truncated_read_consumes_whole_message() {
        let (head, lines) = ring_mem(8);
        let ring = LineRing::new(&head, &lines).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        assert!(tx.try_write(b"h", &[9u8; 150]));
        assert!(tx.try_write(b"h", &[5u8; 3]));
        let mut small = [0u8; 10];
        assert!(rx.try_read(1, 150, &mut small));
        assert_eq!(small, [9u8; 10]);
        let mut next = [0u8; 3];
        assert!(rx.try_read(1, 3, &mut next));
        assert_eq!(next, [5u8; 3]);
    }

    #[test]
    fn oversized_length_from_a_corrupt_prefix_is_refused() {
        let (head, lines) = ring_mem(4);
        let ring = LineRing::new(&head, &lines).unwrap();
        let mut rx = ring.consumer();
        let mut out = [0u8; 4];
        assert!(!rx.try_read(16, usize::MAX / 2, &mut out));
        assert!(!rx.try_read(100, 0, &mut out));
    }

    #[test]
    fn sizes_and_accessors() {
        assert_eq!(LineRing::bytes_needed(0), Some(COUNTER_PAD));
        assert_eq!(
            LineRing::bytes_needed(4),
            Some(COUNTER_PAD + 4 * CACHE_LINE)
        );
        let most = (isize::MAX as usize - COUNTER_PAD) / CACHE_LINE;
        assert_eq!(
            LineRing::bytes_needed(most),
            Some(COUNTER_PAD + most * CACHE_LINE)
        );
        assert_eq!(LineRing::bytes_needed(most + 1), None);
        assert_eq!(LineRing::bytes_needed(usize::MAX), None);
        let (head, lines) = ring_mem(8);
        let ring = LineRing::new(&head, &lines).unwrap();
        assert_eq!(ring.capacity(), 8);
        assert_eq!(ring.max_message(), 8 * LINE_PAYLOAD);
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        assert_eq!((tx.tail(), rx.tail()), (0, 0));
        assert!(tx.try_write(b"ab", &[1; 100]));
        assert_eq!(tx.tail(), 2);
        let mut out = [0u8; 100];
        assert!(rx.try_read(2, 100, &mut out));
        assert_eq!(rx.tail(), 2);
    }

    /// The one-line path: a full ring of one-line messages refuses the
    /// next; peeking does not consume; consuming frees the line.
    #[test]
    fn one_line_messages_peek_consume_and_fill() {
        let (head, lines) = ring_mem(4);
        let ring = LineRing::new(&head, &lines).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        let mut line = [0u8; LINE_PAYLOAD];
        assert!(!rx.peek_line(&mut line), "nothing written yet");
        assert_eq!(tx.free(1), 4);
        for k in 0..4u8 {
            assert!(tx.try_write(&[k], &[k; 3]));
        }
        assert_eq!(tx.free(1), 0);
        assert!(!tx.try_write(&[9], &[9; 3]), "a full ring refuses");
        for lap in 0..3u8 {
            for k in 0..4u8 {
                assert!(rx.peek_line(&mut line));
                assert_eq!(&line[..4], &[k; 4], "lap {lap}");
                assert!(rx.peek_line(&mut line), "peeking does not consume");
                assert!(rx.message_ready(1, 3));
                rx.consume_peeked_line();
                assert_eq!(rx.tail(), (lap as u64) * 4 + k as u64 + 1);
                assert_eq!(tx.free(1), 1, "the consumed line is free again");
                assert!(tx.try_write(&[k], &[k; 3]));
            }
        }
        assert_eq!(tx.tail(), 16);
    }

    #[test]
    fn message_ready_needs_every_line_and_a_sane_length() {
        let (head, lines) = ring_mem(4);
        let ring = LineRing::new(&head, &lines).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        assert!(!rx.message_ready(0, 0));
        assert!(tx.try_write(&[], &[3; LINE_PAYLOAD + 1]));
        assert!(rx.message_ready(0, LINE_PAYLOAD + 1));
        assert!(rx.message_ready(0, 1), "its first line is there");
        assert!(
            !rx.message_ready(0, 3 * LINE_PAYLOAD),
            "two lines never written"
        );
        assert!(
            !rx.message_ready(LINE_PAYLOAD + 1, 0),
            "prefix longer than a line"
        );
        assert!(
            !rx.message_ready(0, 4 * LINE_PAYLOAD + 1),
            "longer than the ring"
        );
        assert!(!rx.message_ready(1, usize::MAX));
        let mut out = [0u8; 8];
        assert!(!rx.try_read(LINE_PAYLOAD + 1, 0, &mut out));
        assert!(rx.try_read(0, LINE_PAYLOAD + 1, &mut out));
        assert_eq!(out, [3; 8]);
    }
}
