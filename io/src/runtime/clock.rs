//! The node's monotonic clock, and a tokio implementation (the clock turmoil virtualizes).

use std::future::Future;
use std::time::Duration;

/// A monotonic millisecond clock that can also wait.
///
/// The clock may start from anywhere (a restarted process usually starts from zero): the runtime
/// loop adds an offset so the times it hands the core never go backwards across restarts.
pub trait Clock {
    /// Milliseconds since an arbitrary, fixed origin. Never decreases.
    fn now_ms(&self) -> u64;

    /// Completes once [`Clock::now_ms`] has reached `deadline_ms` (at once if it has already).
    fn sleep_until(&self, deadline_ms: u64) -> impl Future<Output = ()>;
}

/// A [`Clock`] on `tokio::time::Instant`, with its origin at construction. Under a paused tokio
/// runtime (tests) or turmoil, this is virtual time.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose zero is now. Must be called inside a tokio runtime with time enabled.
    pub fn new() -> TokioClock {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        // u64 milliseconds cover 584 million years.
        self.origin.elapsed().as_millis() as u64
    }

    fn sleep_until(&self, deadline_ms: u64) -> impl Future<Output = ()> {
        tokio::time::sleep_until(self.origin + Duration::from_millis(deadline_ms))
    }
}
