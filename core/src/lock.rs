//! A test-and-set lock for state that a user thread and a progress (proxy)
//! thread hand back and forth.
//!
//! Taking it uncontended is one compare-and-swap, releasing it one store. It
//! never blocks: [`SpinLock::lock_with`] calls a caller-supplied back-off
//! between attempts (spin, yield, ...), since `core` cannot sleep.
//!
//! For state that only ever one thread touches, [`SpinLock::new_single`]
//! (unsafe: the caller promises that) skips the atomic read-modify-write;
//! the flag then only catches re-entry.
//!
//! ```
//! use tandem_core::lock::SpinLock;
//! let l = SpinLock::new(0u64);
//! *l.lock_with(|_| core::hint::spin_loop()) += 1;
//! assert_eq!(*l.try_lock().unwrap(), 1);
//! ```

use crate::sync::{AtomicU8, Ordering};
use core::cell::UnsafeCell;

/// [`SpinLock`]'s state bit: held.
const LOCKED: u8 = 1;
/// [`SpinLock`]'s state bit: threads may share it (the atomic protocol).
const SHARED: u8 = 2;

/// See the [module docs](self).
pub struct SpinLock<T> {
    /// [`LOCKED`] and [`SHARED`] in one byte, so that taking a
    /// single-thread lock is one load, one test and one store (atomic so
    /// [`SpinLock::share`] can switch a single-thread lock over).
    state: AtomicU8,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, which the lock hands
// to one thread at a time (CAS with Acquire, release with Release); for a
// `new_single` lock the creator promised single-threaded use.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A lock that threads may share.
    pub fn new(value: T) -> Self {
        Self {
            state: AtomicU8::new(SHARED),
            value: UnsafeCell::new(value),
        }
    }

    /// A lock used by one thread at a time only (taken with plain loads and
    /// stores).
    ///
    /// # Safety
    /// No two threads may ever call `try_lock`/`lock_with` concurrently
    /// (e.g. the owner is `!Sync` and starts no thread that uses it) until
    /// [`share`](Self::share) was called, by the one thread using it, before
    /// any other thread can reach it.
    pub unsafe fn new_single(value: T) -> Self {
        Self {
            state: AtomicU8::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Switches a [`new_single`](Self::new_single) lock to the shared
    /// (atomic) protocol, for good. Call it from the one thread using the
    /// lock, while it does not hold it, before another thread can reach it
    /// (for instance before handing a second owner to another thread); that
    /// hand-over orders this store before the other thread's first use.
    ///
    /// A lock that is shared already is left alone: other threads may hold
    /// it at this very moment, and a store here would release their hold.
    ///
    /// # Panics
    /// If a single-thread lock is held (by the calling thread, the only one
    /// that may use it): its guard would release it to the single-thread
    /// protocol again.
    pub fn share(&self) {
        let s = self.state.load(Ordering::Relaxed);
        if s & SHARED != 0 {
            return;
        }
        assert!(s & LOCKED == 0, "SpinLock::share while the lock is held");
        self.state.store(SHARED, Ordering::Relaxed);
    }

    /// Whether threads may share it.
    pub fn is_shared(&self) -> bool {
        self.state.load(Ordering::Relaxed) & SHARED != 0
    }

    /// The guard if the lock is free now.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        let s = self.state.load(Ordering::Relaxed);
        if s != 0 {
            return self.try_lock_shared(s);
        }
        // Single-thread and free: plain store, no read-modify-write.
        self.state.store(LOCKED, Ordering::Relaxed);
        Some(SpinGuard {
            lock: self,
            release: 0,
        })
    }

    /// [`try_lock`](Self::try_lock) of a lock whose state `s` is not the
    /// free single-thread one: shared, or held. Out of line, so that the
    /// single-thread case falls through with one test (a shared lock pays
    /// a call beside its compare-and-swap).
    #[cold]
    #[inline(never)]
    fn try_lock_shared(&self, s: u8) -> Option<SpinGuard<'_, T>> {
        // compare_exchange, not swap: a failed attempt then writes nothing
        // (same cost on x86). loom 0.7 lets the value a failed swap writes
        // land after the holder's release in modification order, which
        // reports the lock held forever; with a CAS the model checks
        // cleanly.
        if s == SHARED
            && self
                .state
                .compare_exchange(
                    SHARED,
                    SHARED | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(SpinGuard {
                lock: self,
                release: SHARED,
            });
        }
        None
    }

    /// Takes the lock, calling `relax(attempt)` between attempts.
    ///
    /// # Panics
    /// On re-entry into a [`new_single`](Self::new_single) lock (it would
    /// wait forever otherwise).
    #[inline]
    pub fn lock_with(&self, relax: impl FnMut(u32)) -> SpinGuard<'_, T> {
        // The single-thread case spelled out, not through `try_lock`'s
        // `Option`: one load, one test and one store.
        if self.state.load(Ordering::Relaxed) == 0 {
            self.state.store(LOCKED, Ordering::Relaxed);
            return SpinGuard {
                lock: self,
                release: 0,
            };
        }
        self.lock_contended(relax)
    }

    /// [`lock_with`](Self::lock_with) of a shared or held lock.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self, mut relax: impl FnMut(u32)) -> SpinGuard<'_, T> {
        let mut attempt = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            assert!(self.is_shared(), "single-thread SpinLock re-entered");
            // Acquire, not Relaxed: same code on x86, and loom then lets the
            // waiter see the release instead of a stale value forever.
            while self.state.load(Ordering::Acquire) & LOCKED != 0 {
                relax(attempt);
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// Exclusive access to a [`SpinLock`]'s value; releases it when dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// The state the release stores: the lock's protocol bit, unlocked.
    release: u8,
}

impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the guard is the lock's one holder (see `Sync` above).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes it exclusive.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        let order = if crate::mutation::active(crate::mutation::Mutant::LockReleaseRelaxed) {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        self.lock.state.store(self.release, order);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_failed_try_lock_leaves_the_holder_holding() {
        let l = SpinLock::new(1);
        let g = l.try_lock().unwrap();
        assert!(l.try_lock().is_none());
        assert!(
            l.try_lock().is_none(),
            "the failed attempt must not have released it"
        );
        drop(g);
        assert!(l.try_lock().is_some());
    }

    #[test]
    #[should_panic(expected = "re-entered")]
    fn single_thread_reentry_panics_instead_of_hanging() {
        // SAFETY: used by this thread only.
        let l = unsafe { SpinLock::new_single(0) };
        let _g = l.lock_with(|_| {});
        let _h = l.lock_with(|_| {});
    }

    #[test]
    fn share_switches_protocol_and_the_guard_releases_to_it() {
        // SAFETY: used by this thread only.
        let l = unsafe { SpinLock::new_single(5) };
        assert!(!l.is_shared());
        *l.lock_with(|_| {}) += 1;
        l.share();
        assert!(l.is_shared());
        let g = l.try_lock().unwrap();
        assert!(l.try_lock().is_none());
        drop(g);
        assert!(l.is_shared(), "a release keeps the shared protocol");
        assert_eq!(*l.try_lock().unwrap(), 6);
    }

    #[test]
    fn share_of_a_shared_lock_keeps_another_holder() {
        let l = SpinLock::new(0);
        let g = l.try_lock().unwrap();
        // Another owner's share() while this guard holds it: a no-op.
        l.share();
        assert!(l.try_lock().is_none(), "share() released a held lock");
        drop(g);
        assert!(l.try_lock().is_some());
    }

    #[test]
    #[should_panic(expected = "while the lock is held")]
    fn share_while_held_panics() {
        // SAFETY: used by this thread only.
        let l = unsafe { SpinLock::new_single(0) };
        let _g = l.lock_with(|_| {});
        l.share();
    }
}
