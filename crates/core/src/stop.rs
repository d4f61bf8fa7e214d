//! A stop signal that sleeping threads wake up for: the sampler's collector threads and the
//! failures collector's tracing thread sleep on it, so a stop or reload never waits out an
//! interval.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

#[derive(Default)]
pub struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }

    /// Sleeps until `deadline` or until stopped; returns true when stopped.
    pub fn sleep_until(&self, deadline: Instant) -> bool {
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if *stopped {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            stopped = self.wake.wait_timeout(stopped, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}
