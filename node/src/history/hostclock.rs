//! Where a node's clock sits on the host's clocks, recorded at every start
//! ([`chorus_io::eventlog::ClockAnchor`]) so `chorus replay` can put several nodes' logs on one
//! time line. Never read by a decision.

use chorus_io::eventlog::ClockAnchor;
use nix::time::{clock_gettime, ClockId};

/// The host's clocks read when the node's clock started (its zero).
#[derive(Clone, Debug)]
pub struct HostClockOrigin {
    monotonic_ms: u64,
    unix_ms: u64,
    boot_id: String,
}

impl HostClockOrigin {
    /// Reads the host's clocks; call right after creating the node's clock.
    pub fn now() -> HostClockOrigin {
        let monotonic_ms = clock_gettime(ClockId::CLOCK_MONOTONIC)
            .map(|t| {
                let ms = i128::from(t.tv_sec()) * 1000 + i128::from(t.tv_nsec()) / 1_000_000;
                u64::try_from(ms).unwrap_or(0)
            })
            .unwrap_or(0);
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        HostClockOrigin {
            monotonic_ms,
            unix_ms,
            boot_id,
        }
    }

    /// The anchor of a step at node time `now_ms` whose clock reading was `now_ms - offset_ms`
    /// (see [`chorus_io::runtime::StepInfo::offset_ms`]).
    pub fn anchor(&self, now_ms: u64, offset_ms: u64) -> ClockAnchor {
        let since_origin = now_ms.saturating_sub(offset_ms);
        ClockAnchor {
            node_ms: now_ms,
            monotonic_ms: self.monotonic_ms.saturating_add(since_origin),
            unix_ms: self.unix_ms.saturating_add(since_origin),
            boot_id: self.boot_id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchor_moves_the_host_times_by_the_clock_reading_not_the_offset() {
        let origin = HostClockOrigin {
            monotonic_ms: 5_000,
            unix_ms: 1_700_000_000_000,
            boot_id: "b".into(),
        };
        // A restarted node: its clock read 40 ms, its time continues from 90,000.
        let a = origin.anchor(90_040, 90_000);
        assert_eq!(a.node_ms, 90_040);
        assert_eq!(a.monotonic_ms, 5_040);
        assert_eq!(a.unix_ms, 1_700_000_000_040);
        assert_eq!(a.boot_id, "b");
    }

    #[test]
    fn the_host_clocks_read_as_running() {
        let a = HostClockOrigin::now();
        assert!(a.monotonic_ms > 0);
        assert!(a.unix_ms > 1_600_000_000_000);
    }
}
