//! Protocol configuration: every timing and threshold, with the CHORUS defaults, and its validation.

use serde::{Deserialize, Serialize};

/// The capability that makes a node admin-eligible (a voter and a possible admin).
pub const ADMIN_ELECTION: &str = "admin_election";

/// The longest timing a configuration may set: one day.
pub const MAX_TIMING_MS: u64 = 86_400_000;

/// Protocol configuration. All times are milliseconds of the node's own (monotonic) clock.
///
/// The defaults are CHORUS's: 15 s heartbeats, a 15 s discovery timeout and 30–45 s election delays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Cluster identifier; messages for another cluster are rejected by the codec.
    pub cluster_id: String,
    /// How often the admin broadcasts a heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Lower end of the election delay window; also how long a voter stays loyal to an admin (or
    /// to the candidate it voted for) after hearing from it.
    pub election_timeout_min_ms: u64,
    /// Upper end of the election delay window.
    pub election_timeout_max_ms: u64,
    /// How long a starting node looks for an existing admin before it may stand.
    pub discovery_timeout_ms: u64,
    /// How many distinct peers must report the same (admin, term) before a node accepts it
    /// without a direct heartbeat (capped by the number of peers known).
    pub confirmations: u32,
    /// How many admin-eligible nodes (this one included) found the cluster: the quorum of the
    /// bootstrap agreement (`bootstrap.rs`), which chooses one initial electorate of exactly
    /// that many nodes. It must be more than half of the eligible nodes that start together.
    pub bootstrap_expect: u32,
    /// Bound on clock rate drift between any two nodes, in parts per million. The lease is
    /// shortened by twice this much, so an admin's lease always ends before any voter's promise.
    pub max_clock_drift_ppm: u32,
    /// When true, a node's election delay is biased by its rank (best score first). The Raft
    /// timing experiment switches it off to compare with the paper.
    pub score_bias: bool,
    /// Minimum width of one rank slot in the election window. A slot should outlast a pre-vote
    /// round trip plus a vote request, so the next-ranked node hears the winner's vote request
    /// before it stands; the default suits round trips up to about 60 ms. With many nodes the
    /// later slots then reach past the window's end, which only matters if every better-ranked
    /// node is down.
    pub election_slot_min_ms: u64,
    /// At most this many WHOAMI requests per discovery round, which bounds discovery traffic in
    /// large clusters.
    pub discovery_fanout: u32,
    /// Autopilot: the admin promotes stable standbys and removes dead voters by itself.
    pub autopilot: bool,
    /// Autopilot removes a voter it has not heard from for this long.
    pub dead_voter_timeout_ms: u64,
    /// Autopilot promotes a standby connected for at least this long.
    pub stabilization_time_ms: u64,
    /// Autopilot never removes a voter when that would leave fewer than this many.
    pub min_quorum: u32,
    /// Autopilot promotes standbys while the electorate has fewer voters than this (0: all).
    pub max_voters: u32,
    /// The admin places at most this many tasks of one owner (an API token at the node that
    /// accepted them) at once; the owner's next task waits, told why (`task/place.rs`, rule
    /// 13). 0: no limit but the slots themselves, shared fairly between owners.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_running_per_owner: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster_id: "chorus".to_owned(),
            heartbeat_interval_ms: 15_000,
            election_timeout_min_ms: 30_000,
            election_timeout_max_ms: 45_000,
            discovery_timeout_ms: 15_000,
            confirmations: 2,
            bootstrap_expect: 1,
            max_clock_drift_ppm: 1_000,
            score_bias: true,
            election_slot_min_ms: 100,
            discovery_fanout: 16,
            autopilot: true,
            dead_voter_timeout_ms: 300_000,
            stabilization_time_ms: 30_000,
            min_quorum: 3,
            max_voters: 5,
            max_running_per_owner: 0,
        }
    }
}

/// A configuration value that cannot work, naming the offending key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid config `{key}`: {reason}")]
pub struct ConfigError {
    /// The configuration key.
    pub key: &'static str,
    /// Why the value is rejected.
    pub reason: String,
}

impl Config {
    /// The admin lease: the minimum election timeout shortened by twice the drift bound, so that a
    /// lease measured on a slow admin clock still ends before a fast voter's promise does.
    pub fn lease_ms(&self) -> u64 {
        self.lease_for(self.election_timeout_min_ms)
    }

    /// How much of a voter's promise of `promise_ms` (on its clock) an admin may count on its
    /// own clock: shortened by twice the drift bound.
    pub fn lease_for(&self, promise_ms: u64) -> u64 {
        let keep_ppm = 1_000_000u64.saturating_sub(2 * u64::from(self.max_clock_drift_ppm));
        promise_ms * keep_ppm / 1_000_000
    }

    /// Checks that the values can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, reason: String| Err(ConfigError { key, reason });
        if self.cluster_id.is_empty() || self.cluster_id.len() > 128 {
            return err("cluster_id", "must be 1 to 128 characters".into());
        }
        // It names the cluster's protocols and topic and is logged: no line breaks or escapes
        // that would forge log lines, no spaces that would split a protocol name.
        if self
            .cluster_id
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        {
            return err(
                "cluster_id",
                "must hold no spaces or control characters".into(),
            );
        }
        // A day bounds every timing, so deadlines (now + timing) never come near overflow.
        for (key, ms) in [
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("election_timeout_min_ms", self.election_timeout_min_ms),
            ("election_timeout_max_ms", self.election_timeout_max_ms),
            ("discovery_timeout_ms", self.discovery_timeout_ms),
            ("election_slot_min_ms", self.election_slot_min_ms),
            ("dead_voter_timeout_ms", self.dead_voter_timeout_ms),
            ("stabilization_time_ms", self.stabilization_time_ms),
        ] {
            if ms > MAX_TIMING_MS {
                return err(key, format!("{ms} ms is over a day ({MAX_TIMING_MS} ms)"));
            }
        }
        if self.election_timeout_min_ms == 0 {
            return err("election_timeout_min_ms", "must be positive".into());
        }
        if self.election_timeout_max_ms < self.election_timeout_min_ms {
            return err(
                "election_timeout_max_ms",
                format!(
                    "{} is below election_timeout_min_ms {}",
                    self.election_timeout_max_ms, self.election_timeout_min_ms
                ),
            );
        }
        if self.max_clock_drift_ppm >= 100_000 {
            return err("max_clock_drift_ppm", "must be below 100000 (10%)".into());
        }
        if self.heartbeat_interval_ms == 0 || self.heartbeat_interval_ms >= self.lease_ms() {
            return err(
                "heartbeat_interval_ms",
                format!(
                    "must be positive and below the lease ({} ms), or the lease can never be renewed",
                    self.lease_ms()
                ),
            );
        }
        if self.discovery_timeout_ms == 0 {
            return err("discovery_timeout_ms", "must be positive".into());
        }
        if self.confirmations == 0 {
            return err("confirmations", "must be at least 1".into());
        }
        if self.bootstrap_expect == 0 {
            return err("bootstrap_expect", "must be at least 1".into());
        }
        if self.min_quorum == 0 {
            return err("min_quorum", "must be at least 1".into());
        }
        if self.discovery_fanout == 0 {
            return err("discovery_fanout", "must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_chorus_and_valid() {
        let c = Config::default();
        assert_eq!(c.heartbeat_interval_ms, 15_000);
        assert_eq!(c.discovery_timeout_ms, 15_000);
        assert_eq!(
            (c.election_timeout_min_ms, c.election_timeout_max_ms),
            (30_000, 45_000)
        );
        assert_eq!(c.lease_ms(), 29_940);
        c.validate().unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases: Vec<(Config, &str)> = vec![
            (
                Config {
                    election_timeout_max_ms: 10,
                    ..Config::default()
                },
                "election_timeout_max_ms",
            ),
            (
                Config {
                    heartbeat_interval_ms: 30_000,
                    ..Config::default()
                },
                "heartbeat_interval_ms",
            ),
            (
                Config {
                    confirmations: 0,
                    ..Config::default()
                },
                "confirmations",
            ),
            (
                Config {
                    bootstrap_expect: 0,
                    ..Config::default()
                },
                "bootstrap_expect",
            ),
            (
                Config {
                    cluster_id: String::new(),
                    ..Config::default()
                },
                "cluster_id",
            ),
            (
                Config {
                    max_clock_drift_ppm: 200_000,
                    ..Config::default()
                },
                "max_clock_drift_ppm",
            ),
            (
                Config {
                    election_timeout_min_ms: u64::MAX / 2,
                    election_timeout_max_ms: u64::MAX,
                    ..Config::default()
                },
                "election_timeout_min_ms",
            ),
            (
                Config {
                    election_slot_min_ms: u64::MAX,
                    ..Config::default()
                },
                "election_slot_min_ms",
            ),
        ];
        for (config, key) in cases {
            assert_eq!(config.validate().unwrap_err().key, key);
        }
    }
    /// The lease keeps (1 - 2 × drift) of a promise: 1,000 ppm of drift keeps 99.8 %.
    #[test]
    fn the_lease_is_the_promise_less_twice_the_drift() {
        let c = Config {
            max_clock_drift_ppm: 1_000,
            ..Config::default()
        };
        assert_eq!(c.lease_for(30_000), 29_940);
        assert_eq!(c.lease_for(1_000_000), 998_000);
        assert_eq!(c.lease_for(0), 0);
        let c = Config {
            max_clock_drift_ppm: 99_999,
            election_timeout_min_ms: 10_000,
            ..Config::default()
        };
        assert_eq!(c.lease_ms(), 8_000);
        let c = Config {
            max_clock_drift_ppm: 0,
            ..Config::default()
        };
        assert_eq!(c.lease_for(12_345), 12_345);
    }

    /// Each bound passes at its edge and is refused one past it, naming its key.
    #[test]
    fn each_bound_passes_at_its_edge_and_names_its_key_one_past_it() {
        let ok = |c: Config, what: &str| assert_eq!(c.validate(), Ok(()), "{what}");
        let refused = |c: Config, key: &str| {
            let e = c.validate().expect_err(key);
            assert_eq!(e.key, key);
            assert!(e.to_string().contains(key), "{e}");
        };
        let d = Config::default;
        ok(
            Config {
                cluster_id: "c".repeat(128),
                ..d()
            },
            "a 128-byte cluster id",
        );
        refused(
            Config {
                cluster_id: "c".repeat(129),
                ..d()
            },
            "cluster_id",
        );
        for forged in ["a\nINFO elected", "a b", "a\u{1b}[2J", "a\tb"] {
            refused(
                Config {
                    cluster_id: forged.into(),
                    ..d()
                },
                "cluster_id",
            );
        }
        // Every timing up to a day (the others raised to keep them consistent).
        let a_day = Config {
            election_timeout_min_ms: MAX_TIMING_MS,
            election_timeout_max_ms: MAX_TIMING_MS,
            discovery_timeout_ms: MAX_TIMING_MS,
            election_slot_min_ms: MAX_TIMING_MS,
            dead_voter_timeout_ms: MAX_TIMING_MS,
            stabilization_time_ms: MAX_TIMING_MS,
            ..d()
        };
        ok(a_day.clone(), "every timing a day");
        for key in [
            "heartbeat_interval_ms",
            "election_timeout_min_ms",
            "election_timeout_max_ms",
            "discovery_timeout_ms",
            "election_slot_min_ms",
            "dead_voter_timeout_ms",
            "stabilization_time_ms",
        ] {
            let mut c = a_day.clone();
            let field = match key {
                "heartbeat_interval_ms" => &mut c.heartbeat_interval_ms,
                "election_timeout_min_ms" => &mut c.election_timeout_min_ms,
                "election_timeout_max_ms" => &mut c.election_timeout_max_ms,
                "discovery_timeout_ms" => &mut c.discovery_timeout_ms,
                "election_slot_min_ms" => &mut c.election_slot_min_ms,
                "dead_voter_timeout_ms" => &mut c.dead_voter_timeout_ms,
                _ => &mut c.stabilization_time_ms,
            };
            *field = MAX_TIMING_MS + 1;
            refused(c, key);
        }
        refused(
            Config {
                election_timeout_min_ms: 0,
                election_timeout_max_ms: 0,
                ..d()
            },
            "election_timeout_min_ms",
        );
        ok(
            Config {
                election_timeout_max_ms: 30_000,
                ..d()
            },
            "max equal to min",
        );
        refused(
            Config {
                election_timeout_max_ms: 29_999,
                ..d()
            },
            "election_timeout_max_ms",
        );
        ok(
            Config {
                max_clock_drift_ppm: 99_999,
                heartbeat_interval_ms: 1_000,
                ..d()
            },
            "drift just under 10 %",
        );
        refused(
            Config {
                max_clock_drift_ppm: 100_000,
                ..d()
            },
            "max_clock_drift_ppm",
        );
        // The heartbeat must come within the lease (29,940 ms by default).
        ok(
            Config {
                heartbeat_interval_ms: 29_939,
                ..d()
            },
            "a heartbeat just within the lease",
        );
        refused(
            Config {
                heartbeat_interval_ms: 29_940,
                ..d()
            },
            "heartbeat_interval_ms",
        );
        refused(
            Config {
                heartbeat_interval_ms: 0,
                ..d()
            },
            "heartbeat_interval_ms",
        );
        for (key, c) in [
            (
                "discovery_timeout_ms",
                Config {
                    discovery_timeout_ms: 0,
                    ..d()
                },
            ),
            (
                "confirmations",
                Config {
                    confirmations: 0,
                    ..d()
                },
            ),
            (
                "bootstrap_expect",
                Config {
                    bootstrap_expect: 0,
                    ..d()
                },
            ),
            (
                "min_quorum",
                Config {
                    min_quorum: 0,
                    ..d()
                },
            ),
            (
                "discovery_fanout",
                Config {
                    discovery_fanout: 0,
                    ..d()
                },
            ),
        ] {
            refused(c, key);
        }
        ok(
            Config {
                discovery_timeout_ms: 1,
                confirmations: 1,
                bootstrap_expect: 1,
                min_quorum: 1,
                discovery_fanout: 1,
                ..d()
            },
            "every count at 1",
        );
    }
}
