//! The weighted score and the rank-slotted election delay.
//!
//! Score (integer, 0..=10 000), from inputs every node can state about itself:
//!
//! | part | points | saturates at |
//! |---|---|---|
//! | uptime | 3000 × min(uptime_s, 86 400) / 86 400 | one day up |
//! | capabilities | 2000 × min(count, 10) / 10 | ten capabilities |
//! | free CPU | 2500 × min(millicores, 16 000) / 16 000 | 16 free cores |
//! | free memory | 2500 × min(MiB, 65 536) / 65 536 | 64 GiB free |
//!
//! Integer arithmetic only, truncating division, so every machine computes the same score.
//!
//! The election delay: the live eligible voters are ranked by (score descending, node id
//! ascending); the window `[min, max]` is cut into one slot per node, best first, each at least
//! `election_slot_min_ms` wide; a node draws its delay uniformly inside the first quarter of its
//! own slot. Symmetry is broken by rank rather than by luck, so the best live node usually stands
//! first and wins, and the next-ranked node hears its vote request before it would stand.

use crate::Resources;

/// The highest possible score.
pub const SCORE_MAX: u32 = 10_000;

/// Computes a node's score from its uptime, capability count and free resources.
pub fn score(uptime_s: u64, capability_count: usize, resources: Resources) -> u32 {
    let uptime = 3_000 * uptime_s.min(86_400) / 86_400;
    let caps = 2_000 * (capability_count.min(10) as u64) / 10;
    let cpu = 2_500 * u64::from(resources.cpu_millicores.min(16_000)) / 16_000;
    let mem = 2_500 * u64::from(resources.mem_free_mb.min(65_536)) / 65_536;
    // The parts are bounded above, so the sum fits comfortably in u32.
    (uptime + caps + cpu + mem) as u32
}

/// Where a node's slot lies in the election window: `(start offset, width)` in ms from the
/// window's start, for the node ranked `rank` (0 = best) among `n` contenders.
pub fn slot(rank: usize, n: usize, window_ms: u64, slot_min_ms: u64) -> (u64, u64) {
    let n = n.max(1) as u64;
    let width = (window_ms / n).max(slot_min_ms);
    (rank as u64 * width, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_parts_and_bounds() {
        let none = Resources::default();
        assert_eq!(score(0, 0, none), 0);
        assert_eq!(score(86_400, 0, none), 3_000);
        assert_eq!(score(10 * 86_400, 0, none), 3_000, "uptime saturates");
        assert_eq!(score(0, 5, none), 1_000);
        let big = Resources {
            cpu_millicores: u32::MAX,
            mem_free_mb: u32::MAX,
            ..Default::default()
        };
        assert_eq!(score(u64::MAX, usize::MAX, big), SCORE_MAX);
        let half = Resources {
            cpu_millicores: 8_000,
            mem_free_mb: 32_768,
            ..Default::default()
        };
        assert_eq!(score(43_200, 5, half), 1_500 + 1_000 + 1_250 + 1_250);
    }

    #[test]
    fn slots_partition_the_window_best_first() {
        assert_eq!(slot(0, 3, 15_000, 0), (0, 5_000));
        assert_eq!(slot(2, 3, 15_000, 0), (10_000, 5_000));
        // A narrow window with a minimum spacing spreads slots past the window's end.
        assert_eq!(slot(3, 5, 0, 15), (45, 15));
        assert_eq!(slot(0, 0, 100, 0), (0, 100), "n is at least one");
    }
}
