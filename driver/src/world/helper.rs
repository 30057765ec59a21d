//! What the proxy and the heartbeat thread share: a thread of a rank's
//! own that works on its engine, started once, stopped and joined by its
//! owner.

use crate::error::{Error, Result};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tandem_core::sync::{AtomicBool, Ordering};

/// A rank's helper thread, if it runs.
#[derive(Default)]
pub(crate) struct Helper {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Helper {
    /// Starts `body`, named `name`, with the flag that asks it to stop.
    ///
    /// # Errors
    /// [`Error::Io`] if the thread cannot be spawned (`what` names it).
    pub(crate) fn spawn(
        &self,
        name: String,
        what: &str,
        body: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) -> Result<()> {
        let stop = self.stop.clone();
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(stop))
            .map_err(|e| Error::io(format!("starting {what}"), e))?;
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        Ok(())
    }

    /// Stops the thread, if one runs (waking it if it sleeps), and waits
    /// for it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let h = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}
