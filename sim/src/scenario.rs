//! Scenarios: what happens to a simulated cluster and when. TOML files or named built-ins, the
//! same for both engines.

use std::path::Path;

use chorus_core::Config;
use serde::{Deserialize, Serialize};

/// A complete, self-contained description of a simulation (apart from seed and engine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name shown in traces and summaries.
    pub name: String,
    /// One line for `--help` and the README.
    #[serde(default)]
    pub description: String,
    /// Number of nodes (`--nodes` overrides).
    #[serde(default = "default_nodes")]
    pub nodes: usize,
    /// How many of them are admin-eligible voters (`n0`…); the rest are workers. Default: all.
    #[serde(default)]
    pub voters: Option<usize>,
    /// Simulated time to run (`--duration` overrides), e.g. "10m".
    #[serde(with = "duration_ms", default = "default_duration")]
    pub duration_ms: u64,
    /// Protocol configuration; `bootstrap_expect` is set to the number of voters by the engine.
    #[serde(default)]
    pub config: Config,
    /// Network behaviour at start.
    #[serde(default)]
    pub network: Network,
    /// Every node advertises the same score (so only node ids break ties).
    #[serde(default)]
    pub equal_scores: bool,
    /// Who holds connections to whom (and so learns of whom via PeerUp/PeerDown).
    #[serde(default)]
    pub peering: Peering,
    /// Nodes that join late (the highest-numbered ones), started by `join` actions.
    #[serde(default)]
    pub late_joiners: usize,
    /// Workers that lie (see `hostile.rs`); off unless set. Left out of the trace header when
    /// off, so honest runs keep their exact bytes.
    #[serde(default, skip_serializing_if = "Hostile::is_off")]
    pub hostile: Hostile,
    /// Faults, in time order (equal times keep file order).
    #[serde(default)]
    pub events: Vec<Scheduled>,
    /// Time from a fault-free, majority-up moment within which an admin must be known to every
    /// live node. Default: discovery timeout + 3 × maximum election timeout + 2 × heartbeat.
    #[serde(default, with = "opt_duration_ms")]
    pub liveness_bound_ms: Option<u64>,
}

/// Which nodes connect to each other. Broadcasts reach every node either way (gossipsub relays
/// them); peering decides who knows whom, and so what each node's peer table costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Peering {
    /// Every node connects to every other (what mDNS on one LAN gives).
    #[default]
    Full,
    /// Voters connect to everyone; workers connect only to voters (workers bootstrapped from
    /// the voters' addresses). The discrete-event engine only; turmoil always peers fully.
    Voters,
}

/// Hostile workers: the highest-numbered `nodes` nodes (never voters) each send `burst` lies to
/// random nodes every `every`, beside their honest behaviour. The discrete-event engine only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hostile {
    /// How many nodes lie.
    pub nodes: usize,
    /// Time between bursts, e.g. "500ms".
    #[serde(with = "duration_ms")]
    pub every_ms: u64,
    /// Lies per burst.
    pub burst: u32,
}

impl Default for Hostile {
    fn default() -> Self {
        Hostile {
            nodes: 0,
            every_ms: 500,
            burst: 4,
        }
    }
}

impl Hostile {
    /// Whether no node lies.
    pub fn is_off(&self) -> bool {
        self.nodes == 0
    }
}

/// Network behaviour. Probabilities are in parts per million so they are exact integers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    /// One-way latency, uniform in `[min, max]` ms.
    pub latency_ms: (u64, u64),
    /// Probability a message is lost.
    pub loss_ppm: u32,
    /// Probability a message is delivered twice.
    pub duplicate_ppm: u32,
    /// Probability a message is held back by an extra `latency max` (reordering it).
    pub reorder_ppm: u32,
    /// Each node's clock runs at `1 + d/1e6` of real time, `d` drawn uniformly in
    /// `[-drift_ppm, drift_ppm]` (or exactly at the bound, alternating, with `drift_at_bound`).
    pub drift_ppm: u32,
    /// Put every node's drift at ±`drift_ppm` (alternating by node), the worst case.
    pub drift_at_bound: bool,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            latency_ms: (5, 25),
            loss_ppm: 0,
            duplicate_ppm: 0,
            reorder_ppm: 0,
            drift_ppm: 0,
            drift_at_bound: false,
        }
    }
}

/// An action at a time, optionally repeated. (Unknown fields are caught by [`Action`], which
/// receives every field but these three.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scheduled {
    /// When, e.g. "2m30s".
    #[serde(with = "duration_ms")]
    pub at: u64,
    /// Repeat every so often until `until` (or the end).
    #[serde(default, with = "opt_duration_ms")]
    pub every: Option<u64>,
    /// Last time a repetition may start.
    #[serde(default, with = "opt_duration_ms")]
    pub until: Option<u64>,
    /// What happens.
    #[serde(flatten)]
    pub action: Action,
}

/// A fault or repair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Stop nodes abruptly (their event logs survive).
    Crash {
        /// Which nodes.
        target: Target,
    },
    /// Start crashed nodes again; they recover by replaying their logs.
    Restart {
        /// Which nodes.
        target: Target,
    },
    /// Crash then restart the same nodes after `down_for`.
    Bounce {
        /// Which nodes.
        target: Target,
        /// How long they stay down.
        #[serde(with = "duration_ms")]
        down_for: u64,
    },
    /// Split the nodes into a majority and a minority of `minority` nodes (default: as large as
    /// a minority can be), both ways.
    Partition {
        /// Minority size.
        #[serde(default)]
        minority: Option<usize>,
        /// Put the current admin in the minority.
        #[serde(default)]
        with_admin: bool,
    },
    /// Cut one direction of the links from `from` to `to`.
    OneWay {
        /// Senders.
        from: Target,
        /// Receivers.
        to: Target,
    },
    /// Cut and restore a random link `times` times, every `period`.
    Flap {
        /// Time between toggles.
        #[serde(with = "duration_ms")]
        period: u64,
        /// Number of toggles.
        times: u32,
    },
    /// Restore every link.
    Heal,
    /// Change loss, duplication and reordering.
    Network {
        /// See [`Network::loss_ppm`].
        #[serde(default)]
        loss_ppm: u32,
        /// See [`Network::duplicate_ppm`].
        #[serde(default)]
        duplicate_ppm: u32,
        /// See [`Network::reorder_ppm`].
        #[serde(default)]
        reorder_ppm: u32,
    },
    /// Start `count` late joiners that have not started yet.
    Join {
        /// How many.
        count: usize,
    },
}

/// Which nodes an action applies to, resolved when it fires (random choices from the seed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Target {
    /// The node that currently holds the admin lease (none if there is none).
    Admin,
    /// One random live node.
    Random,
    /// One random live node that is not the admin.
    RandomFollower,
    /// Every live node.
    All,
    /// Every crashed node.
    Crashed,
    /// A random share of the live nodes, in per cent (at least one).
    Percent(u32),
    /// One node by index.
    Node(usize),
}

impl TryFrom<String> for Target {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.as_str() {
            "admin" => Target::Admin,
            "random" => Target::Random,
            "random_follower" => Target::RandomFollower,
            "all" => Target::All,
            "crashed" => Target::Crashed,
            p if p.ends_with('%') => Target::Percent(
                p[..p.len() - 1].parse().map_err(|_| format!("bad percentage {p:?}"))?,
            ),
            n if n.starts_with('n') => Target::Node(
                n[1..].parse().map_err(|_| format!("bad node {n:?}: expected n<index>"))?,
            ),
            other => {
                return Err(format!(
                    "unknown target {other:?}: expected admin, random, random_follower, all, crashed, N%, or n<index>"
                ))
            }
        })
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        match t {
            Target::Admin => "admin".into(),
            Target::Random => "random".into(),
            Target::RandomFollower => "random_follower".into(),
            Target::All => "all".into(),
            Target::Crashed => "crashed".into(),
            Target::Percent(p) => format!("{p}%"),
            Target::Node(i) => format!("n{i}"),
        }
    }
}

fn default_nodes() -> usize {
    5
}

fn default_duration() -> u64 {
    10 * 60 * 1000
}

impl Scenario {
    /// Number of voters.
    pub fn voter_count(&self) -> usize {
        self.voters.unwrap_or(self.nodes).min(self.nodes)
    }

    /// The protocol configuration every node runs.
    pub fn node_config(&self) -> Config {
        Config {
            bootstrap_expect: self.voter_count().max(1) as u32,
            ..self.config.clone()
        }
    }

    /// Whether node `i` is hostile: the highest-numbered `hostile.nodes` nodes.
    pub fn is_hostile(&self, i: usize) -> bool {
        i >= self.nodes - self.hostile.nodes.min(self.nodes)
    }

    /// The liveness bound in force.
    pub fn liveness_bound(&self) -> u64 {
        self.liveness_bound_ms.unwrap_or(
            self.config.discovery_timeout_ms
                + 3 * self.config.election_timeout_max_ms
                + 2 * self.config.heartbeat_interval_ms,
        )
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), String> {
        self.node_config().validate().map_err(|e| e.to_string())?;
        if self.nodes == 0 {
            return Err("nodes must be at least 1".into());
        }
        if self.voter_count() == 0 {
            return Err("at least one voter is needed".into());
        }
        if self.late_joiners >= self.nodes {
            return Err("late_joiners must leave at least one node starting at once".into());
        }
        if self.hostile.nodes > self.nodes - self.voter_count() {
            return Err(format!(
                "hostile.nodes {} exceeds the {} workers: hostile nodes are never voters",
                self.hostile.nodes,
                self.nodes - self.voter_count()
            ));
        }
        if !self.hostile.is_off() && (self.hostile.every_ms == 0 || self.hostile.burst == 0) {
            return Err("hostile.every and hostile.burst must be positive".into());
        }
        let (lo, hi) = self.network.latency_ms;
        if lo > hi {
            return Err(format!("network.latency_ms: min {lo} above max {hi}"));
        }
        for p in [
            self.network.loss_ppm,
            self.network.duplicate_ppm,
            self.network.reorder_ppm,
        ] {
            if p > 1_000_000 {
                return Err("probabilities are parts per million, at most 1000000".into());
            }
        }
        for s in &self.events {
            if let Action::Crash {
                target: Target::Node(i),
            }
            | Action::Restart {
                target: Target::Node(i),
            } = &s.action
            {
                if *i >= self.nodes {
                    return Err(format!(
                        "event at {} ms names n{i}, but there are {} nodes",
                        s.at, self.nodes
                    ));
                }
            }
            if s.every == Some(0) {
                return Err(format!("event at {} ms repeats every 0 ms", s.at));
            }
        }
        Ok(())
    }

    /// Loads a TOML scenario file.
    pub fn from_file(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read scenario {}: {e}", path.display()))?;
        let s: Scenario = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("scenario {}: {e}", path.display()))?;
        s.validate()
            .map_err(|e| anyhow::anyhow!("scenario {}: {e}", path.display()))?;
        Ok(s)
    }

    /// A built-in scenario by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> anyhow::Result<Scenario> {
        if let Some(s) = builtin(name_or_path) {
            return Ok(s);
        }
        let path = Path::new(name_or_path);
        if path.exists() {
            return Scenario::from_file(path);
        }
        anyhow::bail!(
            "unknown scenario {name_or_path:?}: not a built-in ({}) and no such file",
            BUILTINS.join(", ")
        )
    }

    /// The scenario's events expanded into (time, action) in time order, repeats unrolled,
    /// ending before `duration_ms`.
    pub fn timeline(&self) -> Vec<(u64, Action)> {
        let mut out = Vec::new();
        for s in &self.events {
            let until = s.until.unwrap_or(self.duration_ms).min(self.duration_ms);
            let mut t = s.at;
            while t < self.duration_ms && t <= until {
                out.push((t, s.action.clone()));
                match s.every {
                    Some(every) => t += every,
                    None => break,
                }
            }
        }
        // Stable: equal times keep file order.
        out.sort_by_key(|(t, _)| *t);
        out
    }
}

/// Names of the built-in scenarios.
pub const BUILTINS: &[&str] = &[
    "steady",
    "admin-crash",
    "partition",
    "asymmetric",
    "flapping",
    "lossy",
    "storm",
    "churn",
    "drift",
    "hostile",
];

/// Built-in scenarios, written in the same TOML users write.
pub fn builtin(name: &str) -> Option<Scenario> {
    let text = match name {
        "steady" => STEADY,
        "admin-crash" => ADMIN_CRASH,
        "partition" => PARTITION,
        "asymmetric" => ASYMMETRIC,
        "flapping" => FLAPPING,
        "lossy" => LOSSY,
        "storm" => STORM,
        "churn" => CHURN,
        "drift" => DRIFT,
        "hostile" => HOSTILE,
        _ => return None,
    };
    // The built-ins are tested to parse and validate.
    Some(toml::from_str(text).expect("built-in scenario parses"))
}

const HOSTILE: &str = r#"
name = "hostile"
description = "Two of seven nodes lie (forged heartbeats, extreme terms, unasked replies) through loss, crashes and a partition"
nodes = 7
voters = 5
[hostile]
nodes = 2
every_ms = "250ms"
burst = 6
[network]
loss_ppm = 20000
duplicate_ppm = 10000
reorder_ppm = 10000
[[events]]
at = "2m"
every = "3m"
action = "bounce"
target = "admin"
down_for = "40s"
[[events]]
at = "5m"
action = "partition"
with_admin = true
[[events]]
at = "6m30s"
action = "heal"
"#;

const STEADY: &str = r#"
name = "steady"
description = "A healthy cluster: one election, then heartbeats"
"#;

const ADMIN_CRASH: &str = r#"
name = "admin-crash"
description = "The admin is killed every 2 minutes and comes back a minute later"
[[events]]
at = "1m"
every = "2m"
action = "bounce"
target = "admin"
down_for = "1m"
"#;

const PARTITION: &str = r#"
name = "partition"
description = "A minority (with the admin, every other time) is cut off, then healed"
[[events]]
at = "1m"
every = "4m"
action = "partition"
with_admin = true
[[events]]
at = "2m30s"
every = "4m"
action = "heal"
[[events]]
at = "3m"
every = "4m"
action = "partition"
[[events]]
at = "4m"
every = "4m"
action = "heal"
"#;

const ASYMMETRIC: &str = r#"
name = "asymmetric"
description = "One-way cuts: the admin cannot reach a follower, then a follower cannot reach the admin"
[[events]]
at = "1m"
every = "4m"
action = "one_way"
from = "admin"
to = "random_follower"
[[events]]
at = "2m"
every = "4m"
action = "heal"
[[events]]
at = "2m30s"
every = "4m"
action = "one_way"
from = "random_follower"
to = "admin"
[[events]]
at = "3m30s"
every = "4m"
action = "heal"
"#;

const FLAPPING: &str = r#"
name = "flapping"
description = "Random links go down and up every 10 s"
[[events]]
at = "1m"
every = "3m"
action = "flap"
period = "10s"
times = 9
[[events]]
at = "2m40s"
every = "3m"
action = "heal"
"#;

const LOSSY: &str = r#"
name = "lossy"
description = "10% loss, 5% duplication, 10% reordering, 5-200 ms latency, throughout"
[network]
latency_ms = [5, 200]
loss_ppm = 100000
duplicate_ppm = 50000
reorder_ppm = 100000
"#;

const STORM: &str = r#"
name = "storm"
description = "Equal scores, all start together; mass restarts and simultaneous timeouts"
equal_scores = true
[[events]]
at = "2m"
every = "3m"
action = "bounce"
target = "all"
down_for = "5s"
[[events]]
at = "3m30s"
every = "3m"
action = "crash"
target = "admin"
[[events]]
at = "4m"
every = "3m"
action = "restart"
target = "crashed"
"#;

const CHURN: &str = r#"
name = "churn"
description = "Nodes leave and come back; late joiners arrive"
late_joiners = 1
[[events]]
at = "1m"
every = "1m30s"
action = "bounce"
target = "random"
down_for = "40s"
[[events]]
at = "3m"
action = "join"
count = 1
"#;

const DRIFT: &str = r#"
name = "drift"
description = "Every clock drifts at the configured bound (alternating fast and slow); admins killed"
[network]
drift_ppm = 1000
drift_at_bound = true
[[events]]
at = "1m"
every = "2m"
action = "bounce"
target = "admin"
down_for = "30s"
"#;

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_ms(*ms))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_ms(&text).map_err(serde::de::Error::custom)
    }
}

mod opt_duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(ms) => s.serialize_some(&super::format_ms(*ms)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| super::parse_ms(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Parses "10m", "1m30s", "250ms", "2h".
pub fn parse_ms(text: &str) -> Result<u64, String> {
    humantime::parse_duration(text)
        .map(|d| d.as_millis() as u64)
        .map_err(|e| format!("bad duration {text:?}: {e} (examples: 500ms, 30s, 10m)"))
}

/// Formats milliseconds the way `parse_ms` reads them.
pub fn format_ms(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms))
        .to_string()
        .replace(' ', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_validates_and_round_trips() {
        for name in BUILTINS {
            let s = builtin(name).unwrap();
            assert_eq!(s.name, *name);
            s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            let text = toml::to_string(&s).unwrap();
            let back: Scenario =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            assert_eq!(back, s, "{name}");
        }
    }

    #[test]
    fn timeline_unrolls_repeats_in_order() {
        let s = builtin("partition").unwrap();
        let times: Vec<u64> = s.timeline().iter().map(|(t, _)| *t).collect();
        assert_eq!(&times[..4], &[60_000, 150_000, 180_000, 240_000]);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert!(times.iter().all(|t| *t < s.duration_ms));
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let cases = [
            ("name = \"x\"\nnodes = 0", "nodes must be at least 1"),
            ("name = \"x\"\nbogus = 1", "unknown field `bogus`"),
            (
                "name = \"x\"\n[[events]]\nat = \"soon\"\naction = \"heal\"",
                "bad duration",
            ),
            (
                "name = \"x\"\n[[events]]\nat = \"1s\"\naction = \"crash\"\ntarget = \"boss\"",
                "unknown target",
            ),
            (
                "name = \"x\"\n[config]\nelection_timeout_min_ms = 10",
                "heartbeat_interval_ms",
            ),
        ];
        for (text, want) in cases {
            let err = match toml::from_str::<Scenario>(text) {
                Err(e) => e.to_string(),
                Ok(s) => s.validate().unwrap_err(),
            };
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn durations_read_and_write() {
        assert_eq!(parse_ms("1m30s").unwrap(), 90_000);
        assert_eq!(parse_ms("250ms").unwrap(), 250);
        assert_eq!(format_ms(90_000), "1m30s");
        assert!(parse_ms("x").is_err());
    }
}
