//! # tandem-verify
//!
//! Verification of `tandem-core`: [loom] models of its lock-free
//! structures and an exhaustive model check of its protocol engine. The models
//! drive the *very same* ring code the driver uses: under `--cfg loom`,
//! `tandem_core::sync` swaps its atomics for loom's and its
//! [`SharedCell`](tandem_core::sync::SharedCell) for loom's race-checked
//! `UnsafeCell`, so every payload access is checked against the
//! happens-before edges the ring protocol creates.
//!
//! ## Running the models
//!
//! loom needs its own `cfg`, so it builds into a separate target directory
//! (otherwise every switch between loom and normal builds rebuilds
//! everything):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p tandem-verify --release
//! ```
//!
//! Add `-- --nocapture` to see how many executions each model explored and
//! how long it took. A normal `cargo test -p tandem-verify` builds the crate
//! without the models (every test file is `#![cfg(loom)]`) and passes
//! trivially.
//!
//! ## Bound
//!
//! Every model runs under a preemption bound of
//! `DEFAULT_PREEMPTION_BOUND` (3): loom explores every interleaving in which
//! a thread is involuntarily switched out at most that many times, which
//! covers every bug class the models look for (a race needs one or two
//! preemptions) and keeps each model to seconds in release mode. Setting
//! `LOOM_MAX_PREEMPTIONS=N` in the environment overrides it (larger `N`
//! explores more and runs much longer). The other loom variables
//! (`LOOM_LOG`, `LOOM_LOCATION`, `LOOM_CHECKPOINT_FILE`, ...) work as loom
//! documents them.
//!
//! ## What the models check
//!
//! * `tests/slot_ring.rs`: [`SlotRing`](tandem_core::slot_ring::SlotRing)
//!   with one producer and one consumer thread, across wrap-around: every
//!   value arrives exactly once, in order, byte-exact; a slot is never
//!   overwritten before it is consumed (loom reports any overlapping access to
//!   a slot's cells); the consumer never sees more than `steps` unconsumed
//!   steps.
//! * `tests/line_ring.rs`: [`LineRing`](tandem_core::line_ring::LineRing)
//!   with 1-line and 2-line messages, including a message that straddles the
//!   wrap: byte-exact, in order, exactly once, race-free.
//! * `tests/handoff.rs`: the [`CreditWindow`](tandem_core::credit::CreditWindow)
//!   carried over two line rings (a receiver with one buffer is never
//!   overrun), and request completion between a user thread and a proxy
//!   thread through [`SpinLock`](tandem_core::lock::SpinLock)
//!   (`request_model`).
//! * `tests/mutants_loom.rs` (with the `mutants` feature): the ring and lock
//!   mutants of [`tandem_core::mutation`] are each caught.
//!
//! Each property is also shown to catch a deliberately broken use or variant
//! (the `broken_*` models, marked `#[should_panic]`), so no check is vacuous.
//!
//! ## The protocol engine
//!
//! [`model`] (built without loom) is an exhaustive bounded model check of
//! [`tandem_core::proto::Engine`]; `tandem-verify` (the binary) runs its
//! suite and, with the `mutants` feature, the protocol mutants against it.
//! `scripts/verify.sh` runs everything and prints the summary.
//!
//! [loom]: https://docs.rs/loom

#[cfg(loom)]
pub use harness::*;

/// Exhaustive model checks of the fault-tolerance protocols (agreement,
/// revocation) with ranks crashing at every step.
#[cfg(not(loom))]
pub mod ft_model;
#[cfg(not(loom))]
pub mod fuzz;

/// The workspace's one seeded generator (splitmix64), under the name the
/// model check and the fuzzer use: a generated program or fuzz input is
/// named by its seed and can be rerun.
pub use tandem_core::rng::SplitMix64 as SplitMix;

#[cfg(not(loom))]
pub mod model;

/// Shared helpers for the models (only built under `--cfg loom`).
#[cfg(loom)]
mod harness {
    use std::time::Instant;

    use loom::sync::Arc;
    use loom::thread;
    use tandem_core::line_ring::Line;
    use tandem_core::lock::SpinLock;
    use tandem_core::slot_ring::{PaddedCounter, SlotRingCtrl};
    use tandem_core::sync::Block;
    use tandem_core::sync::{spin_hint, SharedCell};

    /// The preemption bound used when `LOOM_MAX_PREEMPTIONS` is not set.
    pub const DEFAULT_PREEMPTION_BOUND: usize = 3;

    /// What one [`check`] explored.
    #[derive(Debug, Clone, Copy)]
    pub struct Explored {
        /// Executions (complete interleavings) loom ran.
        pub executions: usize,
        /// The preemption bound in force.
        pub preemption_bound: Option<usize>,
        /// Wall-clock time of the whole check.
        pub elapsed: std::time::Duration,
    }

    /// Runs `model` under loom with [`DEFAULT_PREEMPTION_BOUND`] (unless
    /// `LOOM_MAX_PREEMPTIONS` overrides it), prints how many executions it
    /// explored and how long that took, and returns those numbers.
    ///
    /// Panics (as loom does) if any execution panics or races.
    pub fn check<F>(name: &str, model: F) -> Explored
    where
        F: Fn() + Sync + Send + 'static,
    {
        // A plain std counter, deliberately outside loom's model: it counts
        // the executions and takes no part in any of them.
        #[allow(clippy::disallowed_types)]
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = count.clone();

        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(DEFAULT_PREEMPTION_BOUND);
        }
        let preemption_bound = builder.preemption_bound;

        let start = Instant::now();
        builder.check(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            model();
        });
        let explored = Explored {
            executions: count.load(std::sync::atomic::Ordering::Relaxed),
            preemption_bound,
            elapsed: start.elapsed(),
        };
        println!(
            "loom model {name}: {} executions, preemption bound {:?}, {:.2?}",
            explored.executions, explored.preemption_bound, explored.elapsed
        );
        explored
    }

    /// The message every [`check_broken`] panics with once the broken model
    /// failed in one of the expected ways; tests match it with
    /// `#[should_panic(expected = ...)]`.
    pub const CAUGHT: &str = "broken variant caught";

    /// Runs a model of a deliberately broken ring (see [`check`]) that may
    /// fail in more than one way, depending on which bad interleaving loom
    /// reaches first. Always panics: with a message starting with
    /// [`CAUGHT`] if the model failed with a panic message containing one of
    /// `accepted`, otherwise (the model passed, or failed for an unrelated
    /// reason such as loom's branch limit) with a message that does not.
    pub fn check_broken<F>(name: &str, accepted: &[&str], model: F) -> !
    where
        F: Fn() + Sync + Send + 'static,
    {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(name, model)));
        let payload = match outcome {
            Ok(explored) => panic!(
                "broken model {name} passed all {} executions: the check is vacuous",
                explored.executions
            ),
            Err(payload) => payload,
        };
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("<non-string panic>");
        match accepted.iter().find(|a| msg.contains(*a)) {
            Some(a) => panic!("{CAUGHT}: {name} failed with {a:?}"),
            None => panic!("broken model {name} failed for an unexpected reason: {msg}"),
        }
    }

    /// An operation's state as the engine keeps it.
    #[derive(Default)]
    struct OpState {
        posted: bool,
        done: bool,
        result: u64,
    }

    /// The request-completion model: the user thread (the model's main
    /// thread) posts an operation under a [`SpinLock`] and waits for it; a
    /// proxy thread completes it under the lock. The operation's state is a
    /// loom-checked cell, so an access the lock does not order fails the
    /// model; a user that saw completion must see the proxy's result.
    pub fn request_model() {
        let engine = Arc::new(SpinLock::new(SharedCell::new(OpState::default())));
        let proxy = {
            let engine = engine.clone();
            thread::spawn(move || {
                for _ in 0..2 {
                    if let Some(g) = engine.try_lock() {
                        g.with_mut(|s| {
                            // SAFETY: the guard gives this thread the state.
                            let s = unsafe { &mut *s };
                            if s.posted && !s.done {
                                s.result = 42;
                                s.done = true;
                            }
                        });
                    }
                    spin_hint();
                }
            })
        };
        // Post.
        engine.lock_with(|_| spin_hint()).with_mut(|s| {
            // SAFETY: as above.
            unsafe { (*s).posted = true }
        });
        // Wait (bounded: loom explores every outcome; completion by the proxy
        // or by the user's own progress).
        let mut result = None;
        for _ in 0..2 {
            if let Some(g) = engine.try_lock() {
                result = g.with(|s| {
                    // SAFETY: as above.
                    let s = unsafe { &*s };
                    s.done.then_some(s.result)
                });
                if result.is_some() {
                    break;
                }
            }
            spin_hint();
        }
        proxy.join().unwrap();
        let g = engine.try_lock().expect("lock free after the proxy exited");
        let finally = g.with(|s| {
            // SAFETY: as above.
            let s = unsafe { &*s };
            s.done.then_some(s.result)
        });
        if let Some(r) = result {
            assert_eq!(r, 42, "the user saw the result the proxy wrote");
            assert_eq!(finally, Some(42));
        }
    }

    /// The shared memory of one slot ring (counters plus `steps *
    /// slot_bytes / 64` blocks), owned so that an `Arc` of it can be handed
    /// to loom threads; each thread builds its own
    /// [`SlotRing`](tandem_core::slot_ring::SlotRing) view over it.
    pub struct SlotMem {
        /// The head/tail counters.
        pub ctrl: SlotRingCtrl,
        /// The payload blocks.
        pub blocks: Vec<Block>,
    }

    impl SlotMem {
        /// Zeroed memory of `blocks` 64-byte blocks.
        pub fn new(blocks: usize) -> Self {
            Self {
                ctrl: SlotRingCtrl::default(),
                blocks: (0..blocks).map(|_| Block::default()).collect(),
            }
        }
    }

    // SAFETY: the cells in `blocks` are only ever reached through
    // loom-checked `with`/`with_mut`; sharing them between loom threads is
    // exactly what the models exist to check (loom reports every access that
    // is not ordered by the ring protocol). Loom runs its threads one at a
    // time, so no access is ever really concurrent.
    unsafe impl Sync for SlotMem {}

    /// The shared memory of one line ring (the consumer's head counter plus
    /// the lines), to be shared by loom threads in an `Arc`.
    pub struct LineMem {
        /// Lines consumed (the reader's credit return).
        pub head: PaddedCounter,
        /// The lines.
        pub lines: Vec<Line>,
    }

    impl LineMem {
        /// Zeroed memory of `lines` lines.
        pub fn new(lines: usize) -> Self {
            Self {
                head: PaddedCounter::default(),
                lines: (0..lines).map(|_| Line::default()).collect(),
            }
        }
    }

    // SAFETY: as for `SlotMem`: every payload access goes through a
    // loom-checked cell, and loom threads never run truly in parallel.
    unsafe impl Sync for LineMem {}
}
