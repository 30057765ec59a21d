//! Deliberately broken variants of the core, for proving that the
//! verification (`tandem-verify`) catches real bugs. Compiled in only with
//! the `mutants` feature (which only `tandem-verify`'s tests enable); in
//! every other build [`active`] is a constant `false` and the mutation
//! sites compile away.
//!
//! One mutant at a time is switched on for the whole process with `set`
//! (which exists only with the feature); tests that use it must not run
//! concurrently with tests that assume the correct code (`tandem-verify`
//! keeps them in one test binary with a single test).

/// The broken variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mutant {
    /// `proto`: the sender ignores its credit windows.
    SkipCreditCheck = 1,
    /// `line_ring`: a line's flag is published with a Relaxed store instead
    /// of Release.
    RelaxedFlagPublish = 2,
    /// `slot_ring`: the producer's free-slot check is off by one (it may
    /// fill step `head + steps`).
    SlotHeadOffByOne = 3,
    /// `proto`: the receiver's expected sequence number saturates instead
    /// of wrapping at 2^16.
    SeqWrap = 4,
    /// `proto`: a message that arrives ahead of its turn is delivered at
    /// once instead of being held back.
    HoldBackBypass = 5,
    /// `proto`: freed receive entries and buffers are never counted, so no
    /// credit ever returns.
    CreditReturnLost = 6,
    /// `lock`: the lock is released with a Relaxed store instead of Release.
    LockReleaseRelaxed = 7,
    /// `proto`: the blocking-receive shortcut (`eager_recv_now`) forgets to
    /// advance the expected sequence number.
    FastRecvSeqStuck = 8,
    /// `proto`: declaring a peer lost also drops the eager messages it
    /// sent before, which must stay receivable.
    FailPeerDropsEager = 9,
    /// `proto`: `cancel` finishes a posted receive without taking it off
    /// the posted list, so a later message can still match it.
    CancelKeepsPosted = 10,
    /// `proto`: `probe` ignores the context.
    ProbeIgnoresContext = 11,
    /// `proto`: a withdrawn (orphaned) operation is never freed when it
    /// finishes: its table slot leaks.
    OrphanLeak = 12,
    /// `proto`: a credit count that crossed the 16-bit wrap is taken as
    /// stale, so credits stop coming back after 2^16 frees.
    CreditCountWrap = 13,
    /// `agree`: ranks decide after the gather, without the rounds of
    /// rotating coordinators.
    AgreeSkipsRounds = 14,
    /// `agree`: a coordinator that failed before its message came is
    /// recorded failed in the estimate (as in the gather).
    AgreeMarksFailedInRounds = 15,
    /// `proto`: the receiver returns the credit of an RTS sent on an eager
    /// credit (`Kind::RtsEager`) as a rendezvous credit.
    RtsEagerCreditAsRendezvous = 16,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 16] = [
        Mutant::SkipCreditCheck,
        Mutant::RelaxedFlagPublish,
        Mutant::SlotHeadOffByOne,
        Mutant::SeqWrap,
        Mutant::HoldBackBypass,
        Mutant::CreditReturnLost,
        Mutant::LockReleaseRelaxed,
        Mutant::FastRecvSeqStuck,
        Mutant::FailPeerDropsEager,
        Mutant::CancelKeepsPosted,
        Mutant::ProbeIgnoresContext,
        Mutant::OrphanLeak,
        Mutant::CreditCountWrap,
        Mutant::AgreeSkipsRounds,
        Mutant::AgreeMarksFailedInRounds,
        Mutant::RtsEagerCreditAsRendezvous,
    ];
}

#[cfg(feature = "mutants")]
#[allow(clippy::disallowed_types)]
static ACTIVE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// Switches `m` on (or every mutant off, with `None`) for the whole
/// process.
#[cfg(feature = "mutants")]
pub fn set(m: Option<Mutant>) {
    ACTIVE.store(
        m.map_or(0, |m| m as u8),
        core::sync::atomic::Ordering::SeqCst,
    );
}

/// Whether mutant `m` is switched on.
#[cfg(feature = "mutants")]
#[inline]
pub fn active(m: Mutant) -> bool {
    ACTIVE.load(core::sync::atomic::Ordering::Relaxed) == m as u8
}

/// Whether mutant `m` is switched on: never, without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn active(_m: Mutant) -> bool {
    false
}
