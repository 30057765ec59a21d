//! Slot ring: `steps` fixed-size slots with monotonic head/tail counters.
//!
//! The NCCL "Simple" protocol on a CPU: the producer owns `tail`, the
//! consumer owns `head`, both are monotonic `u64` step counts on their own
//! 128-byte lines. Step `s` lives in slot `s % steps`.
//!
//! * The producer may fill step `s` only while `s < head + steps`; it
//!   publishes the step by storing `tail = s + 1` with `Release`.
//! * The consumer may read step `s` only while `s < tail` (`Acquire`), and
//!   returns the slot by storing `head = s + 1` with `Release`.
//!
//! The consumer's head therefore *is* the credit return: a slot is never
//! overwritten before it is consumed. Each side caches the other's counter
//! and reloads it only when the cached value says "full" or "empty", so the
//! steady state costs one remote cache-line read per batch, not per step.
//!
//! Exactly one producer and one consumer may exist per ring; the driver
//! guarantees that (one directed pair of ranks per ring).
//!
//! ```
//! use tandem_core::slot_ring::{SlotRing, SlotRingCtrl};
//! use tandem_core::sync::Block;
//! let ctrl = SlotRingCtrl::default();
//! let blocks: Vec<Block> = (0..4 * 2).map(|_| Block::default()).collect();
//! let ring = SlotRing::new(&ctrl, &blocks, 4, 128).unwrap();
//! let (mut tx, mut rx) = (ring.producer(), ring.consumer());
//! assert!(tx.try_push(b"hello"));
//! let mut out = [0u8; 5];
//! assert!(rx.try_pop(&mut out));
//! assert_eq!(&out, b"hello");
//! ```

use crate::sync::{spin_hint, AtomicU64, Block, Ordering};
use crate::{CACHE_LINE, COUNTER_PAD};

/// A monotonic counter alone on its own 128-byte span.
#[repr(C, align(128))]
#[derive(Default)]
pub struct PaddedCounter {
    /// The counter value.
    pub value: AtomicU64,
}

static_assertions::const_assert_eq!(core::mem::size_of::<PaddedCounter>(), COUNTER_PAD);

/// The two counters of a slot ring, as laid out in shared memory.
#[repr(C)]
#[derive(Default)]
pub struct SlotRingCtrl {
    /// Steps published by the producer.
    pub tail: PaddedCounter,
    /// Steps consumed (and so returned) by the consumer.
    pub head: PaddedCounter,
}

/// Why a ring layout was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// `steps` (a line ring's line count) must be a power of two, at least
    /// 1 (for a slot ring at most `u32::MAX`), and the ring's size must
    /// fit in `isize`.
    Steps(u64),
    /// Slot or line sizes must be non-zero multiples of 64 bytes.
    SlotBytes(usize),
    /// The memory given is smaller than the layout needs.
    TooSmall {
        /// Bytes the layout needs.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The memory given is not aligned as the layout needs.
    Misaligned,
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Steps(s) => write!(f, "ring steps must be a power of two, got {s}"),
            Self::SlotBytes(b) => write!(f, "slot size must be a non-zero multiple of 64, got {b}"),
            Self::TooSmall { needed, got } => {
                write!(f, "ring memory too small: need {needed} bytes, got {got}")
            }
            Self::Misaligned => write!(f, "ring memory misaligned"),
        }
    }
}

/// A view of one slot ring: control counters plus `steps * slot_bytes`
/// payload bytes.
#[derive(Clone, Copy)]
pub struct SlotRing<'a> {
    ctrl: &'a SlotRingCtrl,
    blocks: &'a [Block],
    steps: u64,
    slot_blocks: usize,
}

impl<'a> SlotRing<'a> {
    /// Bytes of shared memory a ring of this shape occupies
    /// (counters first, then the slots).
    /// `None` if the size overflows `isize`.
    pub const fn bytes_needed(steps: u64, slot_bytes: usize) -> Option<usize> {
        if steps > isize::MAX as u64 {
            return None;
        }
        match (steps as usize).checked_mul(slot_bytes) {
            Some(n) if n <= isize::MAX as usize - 4096 => {
                Some(core::mem::size_of::<SlotRingCtrl>() + n)
            }
            _ => None,
        }
    }

    /// A ring over `ctrl` and `blocks`; `steps` a power of two, `slot_bytes`
    /// a multiple of 64, `blocks` at least `steps * slot_bytes / 64` long.
    ///
    /// # Errors
    /// * [`LayoutError::Steps`]: `steps` is 0, not a power of two or above
    ///   `u32::MAX`, or `steps * slot_bytes / 64` overflows `usize`;
    /// * [`LayoutError::SlotBytes`]: `slot_bytes` is 0 or not a multiple of 64;
    /// * [`LayoutError::TooSmall`]: `blocks` holds fewer than
    ///   `steps * slot_bytes / 64` blocks.
    pub fn new(
        ctrl: &'a SlotRingCtrl,
        blocks: &'a [Block],
        steps: u64,
        slot_bytes: usize,
    ) -> Result<Self, LayoutError> {
        if steps == 0 || !steps.is_power_of_two() || steps > u32::MAX as u64 {
            return Err(LayoutError::Steps(steps));
        }
        if slot_bytes == 0 || slot_bytes % CACHE_LINE != 0 {
            return Err(LayoutError::SlotBytes(slot_bytes));
        }
        let slot_blocks = slot_bytes / CACHE_LINE;
        let Some(needed) = (steps as usize).checked_mul(slot_blocks) else {
            return Err(LayoutError::Steps(steps));
        };
        if blocks.len() < needed {
            return Err(LayoutError::TooSmall {
                needed: needed * CACHE_LINE,
                got: blocks.len() * CACHE_LINE,
            });
        }
        Ok(Self {
            ctrl,
            blocks: &blocks[..needed],
            steps,
            slot_blocks,
        })
    }

    /// A ring laid over raw memory: the counters at `ptr`, the slots right
    /// after them.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay mapped and readable/writable for `'a`, be
    /// accessed by other agents only through this ring protocol, and the
    /// bytes must be valid for `AtomicU64` (any bit pattern is).
    ///
    /// # Errors
    /// * [`LayoutError::Misaligned`]: `ptr` is null or not aligned to
    ///   [`COUNTER_PAD`] bytes;
    /// * [`LayoutError::Steps`]: `steps` is 0, not a power of two or above
    ///   `u32::MAX`, or the ring's size overflows `isize`;
    /// * [`LayoutError::SlotBytes`]: `slot_bytes` is 0 or not a multiple of 64;
    /// * [`LayoutError::TooSmall`]: `len` is below
    ///   [`bytes_needed(steps, slot_bytes)`](Self::bytes_needed).
    pub unsafe fn from_raw(
        ptr: *mut u8,
        len: usize,
        steps: u64,
        slot_bytes: usize,
    ) -> Result<Self, LayoutError> {
        if ptr.is_null() || (ptr as usize) % COUNTER_PAD != 0 {
            return Err(LayoutError::Misaligned);
        }
        if steps == 0 || !steps.is_power_of_two() {
            return Err(LayoutError::Steps(steps));
        }
        if slot_bytes == 0 || slot_bytes % CACHE_LINE != 0 {
            return Err(LayoutError::SlotBytes(slot_bytes));
        }
        let Some(needed) = Self::bytes_needed(steps, slot_bytes) else {
            return Err(LayoutError::Steps(steps));
        };
        if len < needed {
            return Err(LayoutError::TooSmall { needed, got: len });
        }
        let ctrl_len = core::mem::size_of::<SlotRingCtrl>();
        // SAFETY: alignment and size were checked above; the caller promises
        // the memory lives for 'a and is shared only through this protocol.
        // Atomics and UnsafeCell-wrapped bytes accept any bit pattern.
        let (ctrl, blocks) = unsafe {
            (
                &*(ptr as *const SlotRingCtrl),
                core::slice::from_raw_parts(
                    ptr.add(ctrl_len) as *const Block,
                    (needed - ctrl_len) / CACHE_LINE,
                ),
            )
        };
        Self::new(ctrl, blocks, steps, slot_bytes)
    }

    /// Number of slots.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Bytes per slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_blocks * CACHE_LINE
    }

    #[inline]
    fn slot(&self, step: u64) -> &'a [Block] {
        let i = (step & (self.steps - 1)) as usize * self.slot_blocks;
        &self.blocks[i..i + self.slot_blocks]
    }

    /// The producer end. Create exactly one per ring.
    pub fn producer(&self) -> SlotProducer<'a> {
        let tail = self.ctrl.tail.value.load(Ordering::Relaxed);
        SlotProducer {
            ring: *self,
            tail,
            head_cache: self.ctrl.head.value.load(Ordering::Acquire),
        }
    }

    /// The consumer end. Create exactly one per ring.
    pub fn consumer(&self) -> SlotConsumer<'a> {
        let head = self.ctrl.head.value.load(Ordering::Relaxed);
        SlotConsumer {
            ring: *self,
            head,
            tail_cache: self.ctrl.tail.value.load(Ordering::Acquire),
        }
    }
}

/// Producer end of a [`SlotRing`].
pub struct SlotProducer<'a> {
    ring: SlotRing<'a>,
    tail: u64,
    head_cache: u64,
}

impl SlotProducer<'_> {
    /// Slots free for writing, reloading the consumer's head only if the
    /// cached value shows none.
    #[inline]
    pub fn free(&mut self) -> u64 {
        let mut free = self.free_cached();
        if free == 0 {
            self.head_cache = self.ring.ctrl.head.value.load(Ordering::Acquire);
            free = self.free_cached();
        }
        free
    }

    /// Whether at least `n` slots are free, reloading the consumer's head
    /// if the cached value shows fewer (so a caller that needs several
    /// slots at once is not held back by a stale cache that shows a few).
    #[inline]
    pub fn has_free(&mut self, n: u64) -> bool {
        if self.free_cached() >= n {
            return true;
        }
        self.head_cache = self.ring.ctrl.head.value.load(Ordering::Acquire);
        self.free_cached() >= n
    }

    #[inline]
    fn free_cached(&self) -> u64 {
        // A corrupt head (ahead of tail) is clamped: it can never let us
        // write more than `steps` slots past what we published.
        let steps = if crate::mutation::active(crate::mutation::Mutant::SlotHeadOffByOne) {
            self.ring.steps + 1
        } else {
            self.ring.steps
        };
        self.head_cache
            .saturating_add(steps)
            .saturating_sub(self.tail)
            .min(steps)
    }

    /// Copies `src` into the next slot and publishes it, or returns `false`
    /// if every slot still holds unconsumed data.
    ///
    /// # Panics
    /// If `src` is longer than a slot (callers cut messages into chunks).
    #[must_use = "`false` means nothing was written: every slot is still full"]
    #[inline]
    pub fn try_push(&mut self, src: &[u8]) -> bool {
        self.try_push_padded(src, 0)
    }

    /// Like [`try_push`](Self::try_push), publishing with the slot the
    /// `pad` slots after it, left unwritten, in one step: the next push
    /// starts `1 + pad` slots on (so a message of several slots can keep
    /// its first slot at a fixed alignment). `false`, writing nothing, if
    /// fewer than `1 + pad` slots are free. The consumer reads the slot
    /// and returns it with its padding ([`SlotConsumer::try_read_ahead`],
    /// [`SlotConsumer::try_release`]).
    ///
    /// # Panics
    /// If `src` is longer than a slot.
    #[must_use = "`false` means nothing was written: too few slots are free"]
    #[inline]
    pub fn try_push_padded(&mut self, src: &[u8], pad: u64) -> bool {
        assert!(
            src.len() <= self.ring.slot_bytes(),
            "chunk larger than a slot"
        );
        if !self.has_free(1 + pad) {
            return false;
        }
        crate::sync::copy_to_blocks(self.ring.slot(self.tail), src);
        self.tail += 1 + pad;
        self.ring
            .ctrl
            .tail
            .value
            .store(self.tail, Ordering::Release);
        true
    }

    /// Like [`try_push`](Self::try_push) but spins until a slot frees up.
    pub fn push_spin(&mut self, src: &[u8]) {
        while !self.try_push(src) {
            spin_hint();
        }
    }

    /// Steps published so far.
    pub fn tail(&self) -> u64 {
        self.tail
    }
}

/// Consumer end of a [`SlotRing`].
pub struct SlotConsumer<'a> {
    ring: SlotRing<'a>,
    head: u64,
    tail_cache: u64,
}

impl SlotConsumer<'_> {
    /// Slots ready to read, reloading the producer's tail only if the
    /// cached value shows none.
    #[inline]
    pub fn available(&mut self) -> u64 {
        if self.tail_cache <= self.head {
            self.tail_cache = self.ring.ctrl.tail.value.load(Ordering::Acquire);
        }
        // Clamped for the same reason as `SlotProducer::free`.
        self.tail_cache
            .saturating_sub(self.head)
            .min(self.ring.steps)
    }

    /// Copies the next slot's first `dst.len()` bytes into `dst` and returns
    /// the slot, or returns `false` if nothing is published yet.
    ///
    /// # Panics
    /// If `dst` is longer than a slot.
    #[must_use = "`false` means nothing was read: no slot is published yet"]
    #[inline]
    pub fn try_pop(&mut self, dst: &mut [u8]) -> bool {
        if !self.try_read_ahead(0, dst) {
            return false;
        }
        self.release(1);
        true
    }

    /// Returns the next slot without reading it (used to drain the rest of
    /// a truncated message), or `false` if nothing is published yet.
    #[must_use = "`false` means nothing was skipped: no slot is published yet"]
    #[inline]
    pub fn try_skip(&mut self) -> bool {
        self.try_release(1)
    }

    /// Copies the first `dst.len()` bytes of the slot `i` steps past the
    /// next one into `dst`, returning no slot (a message of several slots
    /// is read slot by slot as the producer publishes them, then returned
    /// at once with [`try_release`](Self::try_release), so the producer
    /// sees one store of the head per message); `false`, reading nothing,
    /// if that slot is not published yet.
    ///
    /// # Panics
    /// If `dst` is longer than a slot.
    #[must_use = "`false` means nothing was read: the slot is not published yet"]
    #[inline]
    pub fn try_read_ahead(&mut self, i: u64, dst: &mut [u8]) -> bool {
        assert!(
            dst.len() <= self.ring.slot_bytes(),
            "chunk larger than a slot"
        );
        if !self.has_available(i + 1) {
            return false;
        }
        crate::sync::copy_from_blocks(self.ring.slot(self.head + i), dst);
        true
    }

    /// Returns the next `n` slots (read with
    /// [`try_read_ahead`](Self::try_read_ahead), or skipped) to the
    /// producer in one store; `false`, returning none, if fewer than `n`
    /// are published.
    #[must_use = "`false` means nothing was returned: the slots are not published yet"]
    #[inline]
    pub fn try_release(&mut self, n: u64) -> bool {
        if !self.has_available(n) {
            return false;
        }
        self.release(n);
        true
    }

    /// Whether at least `n` slots are published, reloading the producer's
    /// tail if the cached value shows fewer (`available` reloads only at
    /// none).
    #[inline]
    pub fn has_available(&mut self, n: u64) -> bool {
        if self.tail_cache < self.head + n {
            self.tail_cache = self.ring.ctrl.tail.value.load(Ordering::Acquire);
        }
        self.tail_cache
            .saturating_sub(self.head)
            .min(self.ring.steps)
            >= n
    }

    #[inline]
    fn release(&mut self, n: u64) {
        self.head += n;
        self.ring
            .ctrl
            .head
            .value
            .store(self.head, Ordering::Release);
    }

    /// Steps consumed so far.
    pub fn head(&self) -> u64 {
        self.head
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn blocks(n: usize) -> Vec<Block> {
        (0..n).map(|_| Block::default()).collect()
    }

    #[test]
    fn rejects_bad_layouts() {
        let ctrl = SlotRingCtrl::default();
        let b = blocks(8);
        assert_eq!(
            SlotRing::new(&ctrl, &b, 3, 64).err(),
            Some(LayoutError::Steps(3))
        );
        assert_eq!(
            SlotRing::new(&ctrl, &b, 0, 64).err(),
            Some(LayoutError::Steps(0))
        );
        assert_eq!(
            SlotRing::new(&ctrl, &b, 2, 65).err(),
            Some(LayoutError::SlotBytes(65))
        );
        assert!(matches!(
            SlotRing::new(&ctrl, &b, 8, 128),
            Err(LayoutError::TooSmall { .. })
        ));
    }

    #[test]
    fn fills_then_refuses_until_consumed_and_wraps() {
        let ctrl = SlotRingCtrl::default();
        let b = blocks(4);
        let ring = SlotRing::new(&ctrl, &b, 4, 64).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        let mut out = [0u8; 8];
        for round in 0u64..10 {
            for i in 0..4u64 {
                assert!(tx.try_push(&(round * 4 + i).to_le_bytes()));
            }
            assert!(!tx.try_push(&[0; 8]), "a full ring must refuse");
            for i in 0..4u64 {
                assert!(rx.try_pop(&mut out));
                assert_eq!(u64::from_le_bytes(out), round * 4 + i);
            }
            assert!(!rx.try_pop(&mut out), "an empty ring must refuse");
        }
        assert_eq!(tx.tail(), 40);
        assert_eq!(rx.head(), 40);
    }

    /// A producer that needs several slots at once sees them free once the
    /// consumer returned them, although its cache still showed a few free
    /// (`free` reloads only at none).
    #[test]
    fn has_free_reloads_a_cache_that_shows_too_few() {
        let ctrl = SlotRingCtrl::default();
        let b = blocks(4);
        let ring = SlotRing::new(&ctrl, &b, 4, 64).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        assert!(tx.try_push(&[1]) && tx.try_push(&[2]));
        assert!(rx.try_skip() && rx.try_skip());
        assert_eq!(tx.free(), 2, "the cache still shows two");
        assert!(tx.has_free(4), "both returned slots are seen");
        assert!(!tx.has_free(5), "never more than the ring");
        assert!(tx.try_push(&[3]) && tx.try_push(&[4]) && tx.try_push(&[5]) && tx.try_push(&[6]));
        assert!(!tx.has_free(1));
    }

    /// Padded pushes keep each message's first slot at a multiple of the
    /// message size; the consumer reads a message's slots as they are
    /// published and returns them, padding included, in one step.
    #[test]
    fn padded_slots_keep_messages_aligned() {
        let ctrl = SlotRingCtrl::default();
        let b = blocks(8);
        let ring = SlotRing::new(&ctrl, &b, 8, 64).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        let mut out = [0u8; 1];
        for round in 0u8..5 {
            // A message of one slot padded to four, then one of two slots.
            assert!(tx.try_push_padded(&[round], 3));
            assert_eq!(tx.tail() % 4, 0);
            assert!(tx.try_push(&[round + 100]));
            assert!(
                !tx.try_push_padded(&[0], 3),
                "four are needed, three are free"
            );
            assert!(rx.try_read_ahead(0, &mut out));
            assert_eq!(out[0], round);
            assert!(rx.try_release(4));
            assert!(rx.try_read_ahead(0, &mut out));
            assert_eq!(out[0], round + 100);
            assert!(!rx.try_read_ahead(1, &mut out), "not published yet");
            assert!(tx.try_push_padded(&[round + 200], 2));
            assert_eq!(tx.tail() % 4, 0);
            assert!(rx.try_read_ahead(1, &mut out));
            assert_eq!(out[0], round + 200);
            assert!(!rx.try_release(5), "only four published");
            assert!(rx.try_release(4));
            assert_eq!(rx.head() % 4, 0);
            assert!(!rx.try_pop(&mut out));
        }
    }

    #[test]
    fn corrupt_head_cannot_open_more_than_steps() {
        let ctrl = SlotRingCtrl::default();
        let b = blocks(2);
        let ring = SlotRing::new(&ctrl, &b, 2, 64).unwrap();
        let mut tx = ring.producer();
        ctrl.head.value.store(u64::MAX / 2, Ordering::Relaxed);
        assert_eq!(tx.free(), 2);
    }

    #[test]
    fn sizes_and_accessors() {
        let ctrl_bytes = core::mem::size_of::<SlotRingCtrl>();
        assert_eq!(SlotRing::bytes_needed(4, 128), Some(ctrl_bytes + 512));
        assert_eq!(SlotRing::bytes_needed(1, 64), Some(ctrl_bytes + 64));
        assert_eq!(SlotRing::bytes_needed(0, 64), Some(ctrl_bytes));
        let most = isize::MAX as usize - 4096;
        assert_eq!(SlotRing::bytes_needed(1, most), Some(ctrl_bytes + most));
        assert_eq!(SlotRing::bytes_needed(1, most + 1), None);
        assert_eq!(SlotRing::bytes_needed(isize::MAX as u64 + 1, 1), None);
        assert_eq!(SlotRing::bytes_needed(isize::MAX as u64, 1), None);
        assert_eq!(SlotRing::bytes_needed(u64::MAX, 0), None);
        assert_eq!(
            SlotRing::bytes_needed(isize::MAX as u64, 0),
            Some(ctrl_bytes),
            "the most steps, of nothing"
        );
        let ctrl = SlotRingCtrl::default();
        let b = blocks(8);
        let ring = SlotRing::new(&ctrl, &b, 4, 128).unwrap();
        assert_eq!((ring.steps(), ring.slot_bytes()), (4, 128));
        assert!(
            !std::format!("{}", LayoutError::Steps(3)).is_empty(),
            "layout errors explain themselves"
        );
    }

    /// Each step has a slot of its own: two-block slots do not overlap,
    /// and a full ring's producer sees no free slot until one is popped.
    #[test]
    fn slots_are_distinct_and_skips_release_them() {
        let ctrl = SlotRingCtrl::default();
        let b = blocks(8);
        let ring = SlotRing::new(&ctrl, &b, 4, 128).unwrap();
        let (mut tx, mut rx) = (ring.producer(), ring.consumer());
        for k in 0..4u8 {
            tx.push_spin(&[k; 128]);
            assert_eq!(tx.free(), 3 - k as u64);
        }
        let mut out = [0u8; 128];
        assert!(rx.try_pop(&mut out));
        assert_eq!(out, [0; 128]);
        assert!(rx.try_skip(), "slot 1 skipped");
        assert_eq!(rx.head(), 2);
        assert_eq!(tx.free(), 2);
        assert!(rx.try_pop(&mut out));
        assert_eq!(out, [2; 128]);
        assert!(rx.try_pop(&mut out));
        assert_eq!(out, [3; 128]);
        assert!(!rx.try_skip(), "nothing left to skip");
        assert_eq!(rx.head(), 4);
    }
}
