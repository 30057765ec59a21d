//! The single source of atomics and shared cells for tandem.
//!
//! Normal builds re-export `core::sync::atomic`; `--cfg loom` builds use
//! loom's instrumented versions so `tandem-verify` can explore every
//! interleaving of the very same ring code. Clippy's `disallowed-types`
//! (see `clippy.toml`) rejects atomics taken from anywhere else.
#![allow(clippy::disallowed_types)]

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// One iteration of a busy-wait loop: a CPU pause hint, or under loom a
/// yield so the model checker can schedule the other thread.
#[inline(always)]
pub fn spin_hint() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// A cell whose contents another agent may read or write, with the
/// `with`/`with_mut` access style of `loom::cell::UnsafeCell`.
///
/// In normal builds it is `repr(transparent)` over `core::cell::UnsafeCell`,
/// so an array of them can be laid over a shared mapping; under loom every
/// access is tracked and an access not ordered by a happens-before edge is
/// reported as a data race.
#[cfg(not(loom))]
#[repr(transparent)]
pub struct SharedCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> SharedCell<T> {
    /// A new cell holding `value`.
    pub const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }
    /// Runs `f` with a shared pointer to the contents.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    /// Runs `f` with a mutable pointer to the contents.
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Loom build of [`SharedCell`]: every access is checked for races.
#[cfg(loom)]
#[derive(Debug)]
pub struct SharedCell<T>(loom::cell::UnsafeCell<T>);

#[cfg(loom)]
impl<T> SharedCell<T> {
    /// A new cell holding `value`.
    pub fn new(value: T) -> Self {
        Self(loom::cell::UnsafeCell::new(value))
    }
    /// Runs `f` with a shared pointer to the contents.
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        self.0.with(f)
    }
    /// Runs `f` with a mutable pointer to the contents.
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }
}

impl<const N: usize> Default for SharedCell<[u8; N]> {
    fn default() -> Self {
        Self::new([0; N])
    }
}

/// One cache line of payload bytes that another agent may access.
pub type Block = SharedCell<[u8; crate::CACHE_LINE]>;

/// Copies `src` into the bytes of `blocks`, starting at the first block.
///
/// The caller guarantees (by the ring protocol) that no other agent accesses
/// these blocks during the copy. `src.len()` must not exceed the blocks'
/// total size; callers compute offsets from validated layouts.
#[inline]
pub fn copy_to_blocks(blocks: &[Block], src: &[u8]) {
    assert!(src.len() <= blocks.len() * crate::CACHE_LINE);
    #[cfg(not(loom))]
    {
        if src.is_empty() {
            return;
        }
        // SAFETY: `SharedCell` is repr(transparent) over UnsafeCell<[u8; 64]>,
        // so the slice is one contiguous run of bytes; the assert above keeps
        // the copy inside it, and the ring protocol gives this agent exclusive
        // access to these blocks until it publishes them.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), blocks[0].0.get().cast::<u8>(), src.len())
        }
    }
    #[cfg(loom)]
    for (i, chunk) in src.chunks(crate::CACHE_LINE).enumerate() {
        blocks[i].with_mut(|p| {
            // SAFETY: loom checks this access for races; the pointer is valid.
            unsafe { (&mut *p)[..chunk.len()].copy_from_slice(chunk) }
        });
    }
}

/// Copies bytes from `blocks` (starting at the first block) into `dst`.
///
/// The mirror of [`copy_to_blocks`], for the consumer side.
#[inline]
pub fn copy_from_blocks(blocks: &[Block], dst: &mut [u8]) {
    assert!(dst.len() <= blocks.len() * crate::CACHE_LINE);
    #[cfg(not(loom))]
    {
        if dst.is_empty() {
            return;
        }
        // SAFETY: as in `copy_to_blocks`; the producer has published these
        // blocks (Acquire on its counter/flag) and will not touch them again
        // until this agent returns them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                blocks[0].0.get().cast::<u8>(),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }
    #[cfg(loom)]
    for (i, chunk) in dst.chunks_mut(crate::CACHE_LINE).enumerate() {
        let n = chunk.len();
        blocks[i].with(|p| {
            // SAFETY: loom checks this access for races; the pointer is valid.
            chunk.copy_from_slice(unsafe { &(&*p)[..n] })
        });
    }
}
