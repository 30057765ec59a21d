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

    /// Records that `n` buffers were consumed and may be reused.
    pub fn consumed(&mut self, n: u64) {
        self.consumed += n;
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
