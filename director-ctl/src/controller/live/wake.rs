//! How the live inputs' threads (BMP readers, the agents' poller) wake `run`'s loop.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Wakes `run`'s loop when a live input changed, so that it does not sleep its poll out.
#[derive(Default)]
pub struct Wake {
    flag: Mutex<bool>,
    cond: Condvar,
}

impl Wake {
    pub fn notify(&self) {
        *self
            .flag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.cond.notify_all();
    }

    /// Sleeps up to `timeout`, less if notified (since the last wait).
    pub fn wait(&self, timeout: Duration) {
        let g = self
            .flag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut g, _) = self
            .cond
            .wait_timeout_while(g, timeout, |woken| !*woken)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *g = false;
    }
}
