//! The Raft paper's election-timing experiment (Ongaro & Ousterhout 2014, §9.3, Fig. 16), on the
//! discrete-event engine: 5 nodes, a broadcast time of about 15 ms, heartbeats at half the
//! minimum election timeout, the admin killed at a uniformly random point of its heartbeat
//! interval, and the time without an admin measured until the next `became_admin`. Score bias is
//! off so the result is comparable with plain Raft's randomized timeouts.

use std::cell::Cell;
use std::rc::Rc;

use chorus_core::rng::below;
use chorus_core::Config;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::run::{run_with, Engine};
use crate::scenario::{Action, Network, Scenario, Scheduled, Target};
use crate::trace::Record;

/// The paper's ranges (ms) and trial counts.
pub const PAPER_RANGES: &[(u64, u64, usize)] = &[
    (150, 150, 100),
    (150, 151, 1000),
    (150, 155, 1000),
    (150, 175, 1000),
    (150, 200, 1000),
    (150, 300, 1000),
    (12, 24, 1000),
    (25, 50, 1000),
    (50, 100, 1000),
    (100, 200, 1000),
];

/// Results for one range.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeResult {
    /// Election timeout range, ms.
    pub min_ms: u64,
    /// Upper end, ms.
    pub max_ms: u64,
    /// Valid trials (an admin was up when killed, and a new one was elected).
    pub trials: usize,
    /// Trials where no admin existed at the kill time (redrawn).
    pub redrawn: usize,
    /// Sorted times without an admin, ms.
    pub times_ms: Vec<u64>,
}

impl RangeResult {
    /// Mean, ms.
    pub fn mean(&self) -> f64 {
        self.times_ms.iter().sum::<u64>() as f64 / self.times_ms.len().max(1) as f64
    }
    /// Nearest-rank percentile, ms.
    pub fn percentile(&self, p: u64) -> u64 {
        if self.times_ms.is_empty() {
            return 0;
        }
        let rank = ((p * self.times_ms.len() as u64).div_ceil(100)).max(1) as usize;
        self.times_ms[rank - 1]
    }
}

/// The scenario for one trial: kill the admin at `kill_at`.
fn trial_scenario(min: u64, max: u64, kill_at: u64, horizon: u64) -> Scenario {
    Scenario {
        name: format!("timing-{min}-{max}"),
        description: "Raft paper Fig. 16 trial".into(),
        nodes: 5,
        voters: None,
        duration_ms: kill_at + horizon,
        config: Config {
            election_timeout_min_ms: min,
            election_timeout_max_ms: max,
            heartbeat_interval_ms: (min / 2).max(1),
            discovery_timeout_ms: min,
            score_bias: false,
            max_clock_drift_ppm: 0,
            ..Config::default()
        },
        // One-way 5–10 ms: a broadcast (request out, reply back) takes about 15 ms.
        network: Network {
            latency_ms: (5, 10),
            ..Network::default()
        },
        equal_scores: true,
        peering: Default::default(),
        late_joiners: 0,
        late: Vec::new(),
        start_spread: 0,
        link_spread: 0,
        apart_at_start: Vec::new(),
        bootstrap_expect: None,
        node_settings: Vec::new(),
        hostile: Default::default(),
        tasks: None,
        events: vec![Scheduled {
            at: kill_at,
            every: None,
            until: None,
            action: Action::Crash {
                target: Target::Admin,
            },
        }],
        liveness_bound_ms: Some(horizon * 2),
    }
}

/// Runs one trial; `None` when no admin was up at the kill time.
pub fn trial(min: u64, max: u64, seed: u64) -> anyhow::Result<Option<u64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let heartbeat = (min / 2).max(1);
    // Long enough for the cold-start election to settle, then a uniformly random kill point.
    let warm_up = 40 * max + 1_000;
    let kill_at = warm_up + below(&mut rng, heartbeat);
    let horizon = 1_000 * max;
    let scenario = trial_scenario(min, max, kill_at, horizon);
    let killed = Rc::new(Cell::new(None::<u64>));
    let elected = Rc::new(Cell::new(None::<u64>));
    let (k, e) = (killed.clone(), elected.clone());
    run_with(&scenario, seed, Engine::Des, None, false, move |sink| {
        sink.stop_when(Box::new(move |line| match &line.record {
            Record::Crash { .. } => {
                k.set(Some(line.t));
                false
            }
            Record::BecameAdmin { .. } if k.get().is_some() => {
                e.set(Some(line.t));
                true
            }
            _ => false,
        }))
    })?;
    Ok(match (killed.get(), elected.get()) {
        (Some(k), Some(e)) => Some(e - k),
        (Some(k), None) => Some(scenario.duration_ms - k),
        _ => None,
    })
}

/// Runs `trials` valid trials of one range.
pub fn measure(min: u64, max: u64, trials: usize, seed: u64) -> anyhow::Result<RangeResult> {
    let mut times = Vec::with_capacity(trials);
    let mut redrawn = 0;
    let mut s = seed;
    while times.len() < trials {
        s = s.wrapping_add(1);
        match trial(min, max, s)? {
            Some(t) => times.push(t),
            None => redrawn += 1,
        }
        anyhow::ensure!(
            redrawn <= trials,
            "range {min}-{max}: the cluster rarely had an admin to kill"
        );
    }
    times.sort_unstable();
    Ok(RangeResult {
        min_ms: min,
        max_ms: max,
        trials,
        redrawn,
        times_ms: times,
    })
}

/// The paper's figures, for comparison where it states them.
pub fn paper_note(min: u64, max: u64) -> &'static str {
    match (min, max) {
        (150, 150) => "paper: over 10 s from split votes",
        (150, 155) => "paper: median 287 ms",
        (150, 200) => "paper: worst 513 ms of 1000",
        (12, 24) => "paper: mean 35 ms, worst 152 ms",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fastest failover a trial can measure, from the kill: the followers heard the last
    /// heartbeat at least `latency_min` after it left, which was less than one heartbeat
    /// interval before the kill; they suspect the admin a minimum election timeout after that;
    /// then pre-vote and vote each take a round trip (two one-way latencies).
    fn failover_floor_ms(min: u64) -> u64 {
        let (latency_min, _) = trial_scenario(min, min, 0, 0).network.latency_ms;
        let heartbeat = (min / 2).max(1);
        latency_min + min - heartbeat + 4 * latency_min
    }

    #[test]
    fn a_trial_measures_a_failover_within_the_window() {
        // 150–300 ms timeouts, 75 ms heartbeats, 5–10 ms one way: at least 5 + 150 − 75 + 20 =
        // 100 ms after the kill, and at most a few windows.
        let floor = failover_floor_ms(150);
        assert_eq!(floor, 100);
        let mut times = Vec::new();
        for seed in 1..=20 {
            if let Some(t) = trial(150, 300, seed).unwrap() {
                assert!((floor..2_000).contains(&t), "seed {seed}: {t} ms");
                times.push(t);
            }
        }
        assert!(
            times.len() >= 15,
            "most trials find an admin to kill: {times:?}"
        );
    }

    #[test]
    fn trials_are_deterministic() {
        assert_eq!(trial(150, 200, 9).unwrap(), trial(150, 200, 9).unwrap());
    }
}
