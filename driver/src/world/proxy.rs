//! The proxy thread: a busy-polling thread, pinned to a core of its own,
//! that advances a rank's engine whenever the user's thread does not hold
//! it (NCCL's proxy, MPICH's progress thread), so transfers move while the
//! user computes.

use super::helper::Helper;
use crate::error::Result;
use crate::progress::Engine;
use std::sync::{Arc, Weak};
use tandem_core::lock::SpinLock;
use tandem_core::sync::{AtomicBool, Ordering};

/// Polls of the engine per look at the stop flag and the owner.
const POLLS_PER_ROUND: usize = 1024;

/// A rank's proxy thread, if it runs.
#[derive(Default)]
pub(crate) struct Proxy(Helper);

impl Proxy {
    /// Starts the thread of rank `rank` on core `core`: it advances the
    /// engine `engine(owner)` reaches whenever its lock is free, until
    /// [`stop`](Self::stop) or until `owner` is gone. It holds `owner`
    /// only for one round at a time, so the last reference is dropped by
    /// whoever stops it, never by the proxy.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) if the thread cannot be spawned.
    pub(crate) fn start<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        engine: fn(&T) -> &SpinLock<Engine>,
        rank: usize,
        core: usize,
    ) -> Result<()> {
        self.0.spawn(
            format!("tandem-proxy-{rank}"),
            &format!("rank {rank}'s proxy thread"),
            move |stop| run(owner, engine, stop, core),
        )
    }

    /// Stops the thread, if one runs, and waits for it.
    pub(crate) fn stop(&self) {
        self.0.stop();
    }
}

fn run<T>(owner: Weak<T>, engine: fn(&T) -> &SpinLock<Engine>, stop: Arc<AtomicBool>, core: usize) {
    if let Err(e) = crate::sys::pin_to(core) {
        eprintln!("tandem proxy: {e}; running unpinned");
    }
    while !stop.load(Ordering::Acquire) {
        let Some(o) = owner.upgrade() else { return };
        for _ in 0..POLLS_PER_ROUND {
            if let Some(mut e) = engine(&o).try_lock() {
                e.progress();
            }
            std::hint::spin_loop();
        }
        drop(o);
    }
}
