//! The proxy thread: a busy-polling thread, pinned to a core of its own,
//! that advances a rank's engine whenever the user's thread does not hold
//! it (NCCL's proxy, MPICH's progress thread), so transfers move while the
//! user computes.

use crate::error::{Error, Result};
use crate::progress::Engine;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use tandem_core::lock::SpinLock;
use tandem_core::sync::{AtomicBool, Ordering};

/// Polls of the engine per look at the stop flag and the owner.
const POLLS_PER_ROUND: usize = 1024;

/// A rank's proxy thread, if it runs.
#[derive(Default)]
pub(crate) struct Proxy {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Proxy {
    /// Starts the thread of rank `rank` on core `core`: it advances the
    /// engine `engine(owner)` reaches whenever its lock is free, until
    /// [`stop`](Self::stop) or until `owner` is gone. It holds `owner`
    /// only for one round at a time, so the last reference is dropped by
    /// whoever stops it, never by the proxy.
    ///
    /// # Errors
    /// [`Error::Io`] if the thread cannot be spawned.
    pub(crate) fn start<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        engine: fn(&T) -> &SpinLock<Engine>,
        rank: usize,
        core: usize,
    ) -> Result<()> {
        let stop = self.stop.clone();
        let h = std::thread::Builder::new()
            .name(format!("tandem-proxy-{rank}"))
            .spawn(move || run(owner, engine, stop, core))
            .map_err(|e| Error::io(format!("starting rank {rank}'s proxy thread"), e))?;
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        Ok(())
    }

    /// Stops the thread, if one runs, and waits for it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let h = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            let _ = h.join();
        }
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
