//! A node clock on tokio's (turmoil-virtualized) time that runs at `1 + drift_ppm/1e6` of the
//! simulated rate, for the scenario's clock drift.

use std::time::Duration;

use chorus_io::runtime::Clock;
use tokio::time::Instant;

/// Parts per million.
const PPM: i128 = 1_000_000;

/// A drifting millisecond clock with its zero at construction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DriftClock {
    origin: Instant,
    drift_ppm: i64,
}

impl DriftClock {
    /// Must be called inside the host's runtime.
    pub(crate) fn new(drift_ppm: i64) -> DriftClock {
        DriftClock {
            origin: Instant::now(),
            drift_ppm,
        }
    }
}

/// Node time for `real_us` microseconds of simulated time.
fn local_us(real_us: i128, drift_ppm: i64) -> i128 {
    real_us * (PPM + i128::from(drift_ppm)) / PPM
}

/// Simulated time (µs, rounded up) at which the node clock reads `local_us`.
pub(crate) fn real_us(local_us: i128, drift_ppm: i64) -> i128 {
    let rate = PPM + i128::from(drift_ppm);
    (local_us * PPM + rate - 1) / rate
}

impl Clock for DriftClock {
    fn now_ms(&self) -> u64 {
        let real = self.origin.elapsed().as_micros() as i128;
        (local_us(real, self.drift_ppm) / 1_000) as u64
    }

    async fn sleep_until(&self, deadline_ms: u64) {
        let real = real_us(i128::from(deadline_ms) * 1_000, self.drift_ppm);
        // Rounded up, so the clock reads at least `deadline_ms` on waking.
        tokio::time::sleep_until(self.origin + Duration::from_micros(real as u64)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waking_time_reads_at_least_the_deadline() {
        for drift in [-100_000, -1_000, 0, 1, 1_000, 50_000] {
            for local_ms in [0i128, 1, 7, 999, 30_000, 86_400_000] {
                let real = real_us(local_ms * 1_000, drift);
                assert!(
                    local_us(real, drift) / 1_000 >= local_ms,
                    "{drift} {local_ms}"
                );
                // And not a whole millisecond later than needed.
                assert!(local_us(real - 1_000, drift) / 1_000 <= local_ms);
            }
        }
    }
}
