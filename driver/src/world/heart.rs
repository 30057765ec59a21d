//! The heartbeat thread: a small sleeping thread per rank that, four times
//! per failure-detection bound, takes the engine when it is free and lets
//! it send heartbeats on idle TCP connections, probe RDMA peers and check
//! every link. It runs while the user's thread computes, so a rank that is
//! merely busy keeps telling its peers it is alive, and a failed peer is
//! known before anyone waits on it. Started only where a link needs it
//! (TCP or RDMA) and detection is on
//! ([`Config::failure_timeout`](crate::Config::failure_timeout)).

use super::helper::Helper;
use crate::error::Result;
use crate::progress::Engine;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tandem_core::lock::SpinLock;
use tandem_core::sync::{AtomicBool, Ordering};

/// Attempts to take the engine per beat before leaving the beat to the
/// user's thread (which checks its links itself while it waits).
const ATTEMPTS: u32 = 200;

/// A rank's heartbeat thread, if it runs.
#[derive(Default)]
pub(crate) struct Heart(Helper);

impl Heart {
    /// Starts the thread of rank `rank`, beating every `every` on the
    /// engine `engine(owner)` reaches, until [`stop`](Self::stop) or until
    /// `owner` is gone. As the proxy, it holds `owner` only for one beat.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) if the thread cannot be spawned.
    pub(crate) fn start<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        engine: fn(&T) -> &SpinLock<Engine>,
        rank: usize,
        every: Duration,
    ) -> Result<()> {
        self.0.spawn(
            format!("tandem-heart-{rank}"),
            &format!("rank {rank}'s heartbeat thread"),
            move |stop| run(owner, engine, stop, every),
        )
    }

    /// Stops the thread, if one runs, and waits for it.
    pub(crate) fn stop(&self) {
        self.0.stop();
    }
}

fn run<T>(
    owner: Weak<T>,
    engine: fn(&T) -> &SpinLock<Engine>,
    stop: Arc<AtomicBool>,
    every: Duration,
) {
    loop {
        std::thread::park_timeout(every);
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Some(o) = owner.upgrade() else { return };
        for attempt in 0..ATTEMPTS {
            if let Some(mut e) = engine(&o).try_lock() {
                e.watch_peers();
                break;
            }
            if attempt % 16 == 15 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        drop(o);
    }
}
