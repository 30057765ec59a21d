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

use crate::sync::{AtomicBool, Ordering};
use core::cell::UnsafeCell;

/// See the [module docs](self).
pub struct SpinLock<T> {
    locked: AtomicBool,
    /// Whether threads may share it (atomic so [`SpinLock::share`] can
    /// switch a single-thread lock over).
    shared: AtomicBool,
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
            locked: AtomicBool::new(false),
            shared: AtomicBool::new(true),
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
            locked: AtomicBool::new(false),
            shared: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Switches a [`new_single`](Self::new_single) lock to the shared
    /// (atomic) protocol, for good. Call it from the one thread using the
    /// lock before another thread can reach it (for instance before handing
    /// a second owner to another thread); that hand-over orders this store
    /// before the other thread's first use.
    pub fn share(&self) {
        self.shared.store(true, Ordering::Relaxed);
    }

    /// Whether threads may share it.
    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// The guard if the lock is free now.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        let free = if self.is_shared() {
            // compare_exchange, not swap: a failed attempt then writes
            // nothing (same cost on x86). loom 0.7 lets the `true` a failed
            // swap writes land after the holder's release in modification
            // order, which reports the lock held forever; with a CAS the
            // model checks cleanly.
            self.locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        } else {
            let free = !self.locked.load(Ordering::Relaxed);
            self.locked.store(true, Ordering::Relaxed);
            free
        };
        // Not `free.then_some(SpinGuard(self))`: that builds the guard even
        // when the lock is taken, and dropping it releases the holder's lock.
        if free {
            Some(SpinGuard(self))
        } else {
            None
        }
    }

    /// Takes the lock, calling `relax(attempt)` between attempts.
    ///
    /// # Panics
    /// On re-entry into a [`new_single`](Self::new_single) lock (it would
    /// wait forever otherwise).
    #[inline]
    pub fn lock_with(&self, relax: impl FnMut(u32)) -> SpinGuard<'_, T> {
        if let Some(g) = self.try_lock() {
            return g;
        }
        self.lock_contended(relax)
    }

    /// [`lock_with`](Self::lock_with) once the first attempt failed.
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
            while self.locked.load(Ordering::Acquire) {
                relax(attempt);
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// Exclusive access to a [`SpinLock`]'s value; releases it when dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SpinGuard<'a, T>(&'a SpinLock<T>);

impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock.
        unsafe { &*self.0.value.get() }
    }
}

impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock exclusively.
        unsafe { &mut *self.0.value.get() }
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
        self.0.locked.store(false, order);
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
}
