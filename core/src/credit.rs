//! Credit window: the flow-control primitive the protocols build on.
//!
//! A sender may have at most `granted - used` messages (or buffers, or
//! bytes: the unit is the caller's) outstanding. Both counters are
//! monotonic `u64`, so a grant carried in an old header can never shrink the
//! window: grants are applied with `max`. The receiver side,
//! [`CreditReturn`], counts what it consumed and decides when the debt is
//! large enough to send an explicit credit message instead of waiting for a
//! header to piggyback it on.
//!
//! [`Credits`] puts the two together for one flow with one peer, both
//! ways: it is what the protocol engine keeps per peer, once for receive
//! entries and once for eager buffers, so the types the loom models check
//! are the ones that run.
//!
//! ```
//! use tandem_core::credit::{CreditReturn, CreditWindow};
//! let mut tx = CreditWindow::new(2);
//! let mut rx = CreditReturn::new(2, 1);
//! assert!(tx.try_take(1) && tx.try_take(1));
//! assert!(!tx.try_take(1), "out of credit: wait, never overrun");
//! rx.consumed(1);
//! assert!(rx.explicit_due());
//! tx.grant(rx.take_grant()).unwrap();
//! assert!(tx.try_take(1));
//! ```

use crate::mutation::{active, Mutant};

/// A grant the sender cannot accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditError {
    /// The grant total received.
    pub granted: u64,
    /// Credits used so far.
    pub used: u64,
    /// The window limit.
    pub window: u64,
}

/// The sender's view: credits granted by the receiver and credits used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CreditWindow {
    granted: u64,
    used: u64,
    window: u64,
}

impl CreditWindow {
    /// A window that starts with `initial` credits, the most the receiver
    /// has buffers for; grants may never open it wider.
    pub const fn new(initial: u64) -> Self {
        Self {
            granted: initial,
            used: 0,
            window: initial,
        }
    }

    /// As [`new`](Self::new), with the counts of credits used and granted
    /// starting at `start` rather than 0 (so a test can cross the wrap of
    /// 16-bit counts carried on the wire early); behaves the same.
    pub const fn starting_at(initial: u64, start: u64) -> Self {
        Self {
            granted: start + initial,
            used: start,
            window: initial,
        }
    }

    /// Credits available now.
    pub const fn available(&self) -> u64 {
        self.granted - self.used
    }

    /// Takes `n` credits if available; `false` means wait (never overrun).
    #[must_use]
    #[inline]
    pub fn try_take(&mut self, n: u64) -> bool {
        if self.available() >= n {
            self.used += n;
            true
        } else {
            false
        }
    }

    /// [`grant`](Self::grant) for a caller that knows `total` is valid:
    /// more than granted so far, and at most a window beyond what was
    /// taken (checked in debug builds).
    #[inline(always)]
    pub fn grow_to(&mut self, total: u64) {
        debug_assert!(total >= self.granted && total - self.used <= self.window);
        self.granted = total;
    }

    /// Applies a cumulative grant (`total` credits ever granted). Stale
    /// grants are ignored; a grant that would open the window past its
    /// initial size is a protocol violation.
    ///
    /// # Errors
    /// [`CreditError`] (the grant, the credits used and the window) if
    /// `total - used` would exceed the window: the receiver granted buffers
    /// it does not have. The window is then left as it was.
    #[inline]
    pub fn grant(&mut self, total: u64) -> Result<(), CreditError> {
        if total <= self.granted {
            return Ok(());
        }
        if total - self.used > self.window {
            return Err(CreditError {
                granted: total,
                used: self.used,
                window: self.window,
            });
        }
        self.granted = total;
        Ok(())
    }

    /// Credits used so far (counted from the start, 0 unless
    /// [`starting_at`](Self::starting_at) said otherwise).
    pub const fn used(&self) -> u64 {
        self.used
    }

    /// The window: the most credits ever available at once.
    pub const fn limit(&self) -> u64 {
        self.window
    }
}

/// The receiver's view: what it consumed and what it has told the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CreditReturn {
    initial: u64,
    consumed: u64,
    returned: u64,
    threshold: u64,
}

impl CreditReturn {
    /// `initial` must equal the sender's initial window; an explicit credit
    /// message is due once `threshold` (at least 1) credits are owed.
    pub const fn new(initial: u64, threshold: u64) -> Self {
        let threshold = if threshold == 0 { 1 } else { threshold };
        Self {
            initial,
            consumed: 0,
            returned: 0,
            threshold,
        }
    }

    /// As [`new`](Self::new), with the counts of credits consumed and
    /// returned starting at `start` (the sender's window must start there
    /// too: [`CreditWindow::starting_at`]).
    pub const fn starting_at(initial: u64, threshold: u64, start: u64) -> Self {
        let mut r = Self::new(initial, threshold);
        r.consumed = start;
        r.returned = start;
        r
    }

    /// Records that `n` buffers were consumed and may be reused.
    #[inline(always)]
    pub fn consumed(&mut self, n: u64) {
        self.consumed += n;
    }

    /// Buffers consumed so far: the count a header carries to the sender,
    /// who adds its window to make the grant (what
    /// [`take_grant`](Self::take_grant) returns, less `initial`).
    #[inline(always)]
    pub const fn consumed_total(&self) -> u64 {
        self.consumed
    }

    /// Records that a header carrying `total` (an earlier
    /// [`consumed_total`](Self::consumed_total)) reached the wire: what it
    /// returned is no longer owed. For a transport that takes a header only
    /// after it was built, so that frees in between stay owed.
    #[inline(always)]
    pub fn returned_up_to(&mut self, total: u64) {
        if total > self.returned {
            self.returned = total;
        }
    }

    /// Credits owed to the sender and not yet returned.
    pub const fn owed(&self) -> u64 {
        self.consumed - self.returned
    }

    /// Whether the debt warrants an explicit credit message.
    pub const fn explicit_due(&self) -> bool {
        self.owed() >= self.threshold
    }

    /// The cumulative grant to send (piggybacked or explicit); afterwards
    /// nothing is owed.
    #[must_use = "the grant must reach the sender: what it returns now counts as told"]
    pub fn take_grant(&mut self) -> u64 {
        self.returned = self.consumed;
        self.initial + self.consumed
    }
}

/// One credit flow with one peer, both ways, as the protocol engine keeps
/// it per peer for each thing the peer reserves (receive entries, eager
/// buffers): the [`CreditWindow`] of what this rank may still send, grown
/// by the freed counts the peer's headers carry, and the [`CreditReturn`]
/// of what this rank freed for the peer and owes it.
///
/// Freed counts travel as 16-bit wire fields (any two counts in flight are
/// less than a window, below 2^15, apart); [`apply`](Self::apply) extends
/// them.
///
/// ```
/// use tandem_core::credit::Credits;
/// let (mut a, mut b) = (Credits::new(2, 1, 0), Credits::new(2, 1, 0));
/// assert!(a.try_take(1) && a.try_take(1) && !a.try_take(1));
/// b.freed(); // b consumed a's message and freed its buffer
/// assert!(b.due());
/// let carried = b.count() as u16; // in b's next header to a
/// b.told(b.count());
/// assert_eq!(a.apply(carried), Some(()));
/// assert_eq!(a.available(), 1);
/// assert_eq!(a.apply(9), None, "a count beyond what was sent is refused");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Credits {
    window: CreditWindow,
    /// The peer's freed count seen so far, extended to 64 bits.
    seen: u64,
    owed: CreditReturn,
}

impl Credits {
    /// No credit either way (a peer that is not there).
    pub const EMPTY: Self = Self::new(0, 1, 0);

    /// A flow whose window is `window` credits each way (both ranks
    /// reserve the same number), with an explicit return due once
    /// `threshold` frees are owed, and every count starting at `start`.
    pub const fn new(window: u64, threshold: u64, start: u64) -> Self {
        Self {
            window: CreditWindow::starting_at(window, start),
            seen: start,
            owed: CreditReturn::starting_at(window, threshold, start),
        }
    }

    /// Credits this rank may use now.
    #[inline(always)]
    pub const fn available(&self) -> u64 {
        self.window.available()
    }

    /// The window: the most credits either side may have in use at once.
    #[inline(always)]
    pub const fn limit(&self) -> u64 {
        self.window.limit()
    }

    /// Takes `n` credits if available; `false` means wait.
    #[must_use]
    #[inline(always)]
    pub fn try_take(&mut self, n: u64) -> bool {
        self.window.try_take(n)
    }

    /// Whether `count`, a freed count from the peer, is the one already
    /// applied (most headers return nothing new).
    #[inline(always)]
    pub const fn is_current(&self, count: u16) -> bool {
        count == self.seen as u16
    }

    /// Applies `count`, the 16-bit freed count of a header from the peer:
    /// a newer count grows the window; a stale one (a reordering transport
    /// delivered it late) changes nothing.
    ///
    /// # Errors
    /// `None` if the count claims more frees than this rank ever took
    /// credits for (a corrupt or hostile header); nothing changes then.
    #[inline(always)]
    pub fn apply(&mut self, count: u16) -> Option<()> {
        let mut diff = count.wrapping_sub(self.seen as u16) as i16;
        if active(Mutant::CreditCountWrap) && count < self.seen as u16 {
            diff = 0;
        }
        if diff <= 0 {
            return Some(());
        }
        let total = self.seen + diff as u64;
        if total > self.window.used() {
            return None;
        }
        self.seen = total;
        // The window was granted `limit + seen` before, so this grows it,
        // and `total <= used` keeps what is available within the limit.
        self.window.grow_to(self.window.limit() + total);
        Some(())
    }

    /// Records that this rank freed one thing the peer had filled.
    #[inline(always)]
    pub fn freed(&mut self) {
        self.owed.consumed(1);
    }

    /// This rank's freed count, for a header to the peer (its low 16 bits
    /// go on the wire).
    #[inline(always)]
    pub const fn count(&self) -> u64 {
        self.owed.consumed_total()
    }

    /// A header carrying `count` (an earlier [`count`](Self::count)) went
    /// out.
    #[inline(always)]
    pub fn told(&mut self, count: u64) {
        self.owed.returned_up_to(count);
    }

    /// This rank's freed count, for a header that goes out at once (the
    /// engine's eager fast path): the peer is then told of everything owed.
    #[inline(always)]
    pub fn tell(&mut self) -> u64 {
        let count = self.owed.consumed_total();
        let _grant = self.owed.take_grant();
        count
    }

    /// Frees the peer has not been told of.
    #[inline(always)]
    pub const fn owed(&self) -> u64 {
        self.owed.owed()
    }

    /// Whether enough is owed for an explicit credit message.
    #[inline(always)]
    pub const fn due(&self) -> bool {
        self.owed.explicit_due()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn window_never_exceeds_initial_and_stale_grants_are_ignored() {
        let mut tx = CreditWindow::new(3);
        let mut rx = CreditReturn::new(3, 2);
        for _ in 0..3 {
            assert!(tx.try_take(1));
        }
        assert!(!tx.try_take(1));
        rx.consumed(1);
        assert!(!rx.explicit_due());
        let g1 = rx.take_grant();
        rx.consumed(2);
        assert!(rx.explicit_due());
        let g2 = rx.take_grant();
        tx.grant(g2).unwrap();
        tx.grant(g1).unwrap(); // arrives late: ignored
        assert_eq!(tx.available(), 3);
        assert_eq!(tx.grant(g2 + 1).unwrap_err().window, 3);
    }

    #[test]
    fn credits_cross_the_16_bit_wrap_and_refuse_overclaims() {
        let start = u16::MAX as u64 - 2;
        let (mut a, mut b) = (Credits::new(4, 2, start), Credits::new(4, 2, start));
        for _ in 0..4 {
            assert!(a.try_take(1));
            b.freed();
        }
        assert!(!a.try_take(1));
        assert!(b.due() && b.owed() == 4);
        let c = b.count();
        assert_eq!(c as u16, 1, "wrapped");
        assert!(!a.is_current(c as u16));
        assert_eq!(
            a.apply((c - 2) as u16),
            Some(()),
            "an older count grows partly"
        );
        assert_eq!(a.available(), 2);
        assert_eq!(a.apply(c as u16), Some(()));
        assert_eq!(a.available(), 4);
        assert_eq!(a.apply((c - 1) as u16), Some(()), "stale: ignored");
        assert_eq!(a.available(), 4);
        assert!(a.is_current(c as u16));
        assert_eq!(a.apply((c + 1) as u16), None, "more than was ever taken");
        b.told(c - 1);
        assert_eq!(b.owed(), 1);
        b.told(c - 3); // an older header finishing late changes nothing
        assert_eq!(b.owed(), 1);
        b.told(c);
        assert!(!b.due() && b.owed() == 0);
        b.freed();
        assert_eq!((b.tell(), b.owed()), (c + 1, 0));
    }

    #[test]
    fn owed_counts_what_was_consumed_since_the_last_grant() {
        let mut rx = CreditReturn::new(4, 0);
        assert_eq!(rx.owed(), 0);
        rx.consumed(3);
        assert_eq!(rx.owed(), 3);
        assert!(rx.explicit_due(), "a threshold of 0 means 1");
        assert_eq!(rx.take_grant(), 7);
        assert_eq!(rx.owed(), 0);
        rx.consumed(1);
        assert_eq!(rx.owed(), 1);
    }
}
