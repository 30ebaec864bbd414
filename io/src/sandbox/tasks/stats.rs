//! Counters of a [`super::TaskRunner`] for the node's metrics: runs, warm-pool hits, how long
//! a run waited for its sandbox (the sandbox start latency), where runs spent their time (a
//! histogram per stage of [`RunTimings`]), and sandboxes the periodic reap removed.

use std::sync::Mutex;
use std::time::Duration;

use chorus_core::RunTimings;

/// Observations of one latency over [`START_BUCKETS_S`]: a run's wait for its sandbox, or one
/// stage of [`RunTimings`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Observations per bucket (each counted in its own bucket only; beyond the last: none).
    pub buckets: [u64; START_BUCKETS_S.len()],
    /// Observations.
    pub count: u64,
    /// Their sum, seconds.
    pub sum_s: f64,
}

impl Observed {
    fn observe(&mut self, s: f64) {
        if let Some(i) = START_BUCKETS_S.iter().position(|b| s <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum_s += s;
    }
}

/// Upper bounds of the sandbox start latency histogram, seconds.
pub const START_BUCKETS_S: [f64; 11] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A snapshot of the runner's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunnerCounts {
    /// Runs started.
    pub started: u64,
    /// Runs whose sandbox came ready from a warm pool.
    pub pool_hits: u64,
    /// Runs that failed before or while running (a sandbox error).
    pub failed: u64,
    /// Stale sandboxes of any owner on this host that the periodic reap removed.
    pub reaped: u64,
    /// How long runs waited for their sandbox.
    pub start: Observed,
    /// Where runs spent their time, per stage of [`RunTimings::STAGES`].
    pub stages: [Observed; RunTimings::STAGES.len()],
}

/// The runner's counters, shared with whoever renders them.
#[derive(Debug, Default)]
pub struct RunnerStats(Mutex<RunnerCounts>);

impl RunnerStats {
    fn with<T>(&self, f: impl FnOnce(&mut RunnerCounts) -> T) -> T {
        // Plain counters: a panic elsewhere cannot leave them harmfully half-updated.
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> RunnerCounts {
        self.with(|c| c.clone())
    }

    pub(super) fn started(&self, waited: Duration, from_pool: bool) {
        let s = waited.as_secs_f64();
        self.with(|c| {
            c.started += 1;
            c.pool_hits += u64::from(from_pool);
            c.start.observe(s);
        });
    }

    pub(super) fn stages(&self, timings: &RunTimings) {
        self.with(|c| {
            for (counts, (_, ms)) in c.stages.iter_mut().zip(timings.stages()) {
                counts.observe(ms as f64 / 1_000.0);
            }
        });
    }

    pub(super) fn failed(&self) {
        self.with(|c| c.failed += 1);
    }

    pub(super) fn reaped(&self, removed: usize) {
        self.with(|c| c.reaped += removed as u64);
    }
}
