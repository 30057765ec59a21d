//! The single source of atomics and shared cells for tandem.
//!
//! Normal builds re-export `core::sync::atomic`; `--cfg loom` builds use
//! loom's instrumented versions so `tandem-verify` can explore every
//! interleaving of the very same ring code. Clippy's `disallowed-types`
//! (see `clippy.toml`) rejects atomics taken from anywhere else.
#![allow(clippy::disallowed_types)]

pub use core::sync::atomic::Ordering;

#[cfg(not(loom))]
use core::sync::atomic as imp;
#[cfg(loom)]
use loom::sync::atomic as imp;

macro_rules! atomic {
    ($(#[$doc:meta])* $name:ident, $t:ty) => {
        $(#[$doc])*
        ///
        /// A `repr(transparent)` wrapper, so in normal builds it has the
        /// layout of the standard atomic and may live in shared memory;
        /// under `--cfg loom` it wraps loom's model-checked atomic.
        #[repr(transparent)]
        #[derive(Debug, Default)]
        pub struct $name(imp::$name);

        impl $name {
            /// A new atomic holding `v`.
            #[cfg(not(loom))]
            #[inline(always)]
            pub const fn new(v: $t) -> Self {
                Self(imp::$name::new(v))
            }
            /// A new atomic holding `v`.
            #[cfg(loom)]
            pub fn new(v: $t) -> Self {
                Self(imp::$name::new(v))
            }
            /// Loads the value.
            #[inline(always)]
            pub fn load(&self, o: Ordering) -> $t {
                self.0.load(o)
            }
            /// Stores `v`.
            #[inline(always)]
            pub fn store(&self, v: $t, o: Ordering) {
                self.0.store(v, o)
            }
            /// Stores `v`, returning the previous value.
            #[inline(always)]
            pub fn swap(&self, v: $t, o: Ordering) -> $t {
                self.0.swap(v, o)
            }
            /// Stores `new` if the value is `current`.
            ///
            /// # Errors
            /// `Err(v)`, `v` the value found, when it is not `current`; nothing is
            /// stored then.
            #[inline(always)]
            pub fn compare_exchange(&self, current: $t, new: $t, ok: Ordering, fail: Ordering) -> Result<$t, $t> {
                self.0.compare_exchange(current, new, ok, fail)
            }
        }
    };
}

macro_rules! atomic_int {
    ($(#[$doc:meta])* $name:ident, $t:ty) => {
        atomic!($(#[$doc])* $name, $t);
        impl $name {
            /// Adds `v`, returning the previous value.
            #[inline(always)]
            pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                self.0.fetch_add(v, o)
            }
        }
    };
}

atomic_int!(
    /// A 64-bit atomic counter or flag.
    AtomicU64, u64
);
atomic_int!(
    /// A 32-bit atomic.
    AtomicU32, u32
);
atomic_int!(
    /// An 8-bit atomic (a small state word).
    AtomicU8, u8
);
atomic!(
    /// An atomic boolean.
    AtomicBool, bool
);

/// A memory fence.
#[inline(always)]
pub fn fence(o: Ordering) {
    imp::fence(o)
}

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

/// One cache line of payload bytes that another agent may access,
/// aligned to a cache line so an array of blocks never straddles lines.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Block(SharedCell<[u8; crate::CACHE_LINE]>);

impl Block {
    /// Runs `f` with a shared pointer to the bytes.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const [u8; crate::CACHE_LINE]) -> R) -> R {
        self.0.with(f)
    }
    /// Runs `f` with a mutable pointer to the bytes.
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut [u8; crate::CACHE_LINE]) -> R) -> R {
        self.0.with_mut(f)
    }
}

#[cfg(not(loom))]
static_assertions::assert_eq_size!(Block, [u8; crate::CACHE_LINE]);

/// The bytes of `blocks` as one raw pointer whose provenance covers the
/// whole slice (`Block` is 64 bytes, so the slice is contiguous).
#[cfg(not(loom))]
#[inline(always)]
fn blocks_ptr(blocks: &[Block]) -> *mut u8 {
    core::cell::UnsafeCell::raw_get(
        blocks
            .as_ptr()
            .cast::<core::cell::UnsafeCell<[u8; crate::CACHE_LINE]>>(),
    )
    .cast::<u8>()
}

/// Copies `src` into the bytes of `blocks`, starting at the first block.
///
/// The caller guarantees (by the ring protocol) that no other agent accesses
/// these blocks during the copy. `src.len()` must not exceed the blocks'
/// total size; callers compute offsets from validated layouts.
#[inline(always)]
pub fn copy_to_blocks(blocks: &[Block], src: &[u8]) {
    assert!(src.len() <= blocks.len() * crate::CACHE_LINE);
    #[cfg(not(loom))]
    {
        if src.is_empty() {
            return;
        }
        // SAFETY: blocks are 64-byte, 64-aligned cells, so the slice is one
        // contiguous run of bytes reached through `blocks_ptr`; the assert above keeps
        // the copy inside it, and the ring protocol gives this agent exclusive
        // access to these blocks until it publishes them.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), blocks_ptr(blocks), src.len()) }
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
#[inline(always)]
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
        unsafe { core::ptr::copy_nonoverlapping(blocks_ptr(blocks), dst.as_mut_ptr(), dst.len()) }
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
