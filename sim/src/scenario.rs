//! Scenarios: what happens to a simulated cluster and when. TOML files or named built-ins, the
//! same for both engines. This file is the format (the types, their defaults, what a scenario
//! derives from them); `validate` checks what the types cannot; `builtin` holds the built-ins,
//! kept as TOML under `sim/scenarios/`.

mod builtin;
mod validate;

use std::path::Path;

use chorus_core::Config;
use serde::{Deserialize, Serialize};

pub use builtin::{builtin, builtin_text, BUILTINS, MEMBERSHIP, REPRODUCERS, TASKS, WITH_TASKS};

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
    /// Protocol configuration every node starts with. Its `bootstrap_expect` must be left
    /// alone: the top-level `bootstrap_expect` (default: the number of voters) sets it.
    #[serde(default)]
    pub config: Config,
    /// How many voters every node waits for before fixing the electorate. Default: the number
    /// of voters. `node_settings` can give single nodes another value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_expect: Option<u32>,
    /// Settings that differ between nodes, applied over `config` in file order (a later entry
    /// wins for the keys it sets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_settings: Vec<NodeSettings>,
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
    /// Named nodes that join late, voters included (beside `late_joiners`), started by `join`
    /// actions, e.g. `["n3", "n4"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<NodeRef>,
    /// Each node that starts at once starts instead at a seeded-random time in `[0, spread]`,
    /// e.g. "20s".
    #[serde(default, with = "duration_ms", skip_serializing_if = "is_zero")]
    pub start_spread: u64,
    /// Once both ends of a pair are up, their connection (the `PeerUp` each side gets) comes
    /// up after a seeded-random delay in `[0, spread]`, drawn per pair and per connection, so
    /// nodes see their peers in different orders and at different times.
    #[serde(default, with = "duration_ms", skip_serializing_if = "is_zero")]
    pub link_spread: u64,
    /// Groups of nodes kept apart from the start: two nodes listed in different groups neither
    /// connect (no `PeerUp`) nor exchange messages until a `heal` action; unlisted nodes are
    /// not affected. E.g. `[["n3", "n4"], ["n0..=n2"]]`. Written to the trace as a `partition`
    /// at t=0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apart_at_start: Vec<Vec<NodeRef>>,
    /// Workers that lie (see `hostile.rs`); off unless set. Left out of the trace header when
    /// off, so honest runs keep their exact bytes.
    #[serde(default, skip_serializing_if = "Hostile::is_off")]
    pub hostile: Hostile,
    /// Faults, in time order (equal times keep file order).
    #[serde(default)]
    pub events: Vec<Scheduled>,
    /// A task workload (see [`TaskWorkload`]); none by default. Left out of the trace header
    /// when absent, so scenarios without tasks keep their exact bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskWorkload>,
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

/// One node (`"n3"`) or an inclusive range of nodes (`"n1..=n3"`) in a node list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum NodeRef {
    /// `n<i>`.
    One(usize),
    /// `n<a>..=n<b>`, both included.
    Range(usize, usize),
}

impl NodeRef {
    /// The node indices named, in order.
    pub fn indices(self) -> std::ops::RangeInclusive<usize> {
        match self {
            NodeRef::One(i) => i..=i,
            NodeRef::Range(a, b) => a..=b,
        }
    }

    /// The highest index named.
    fn last(self) -> usize {
        *self.indices().end()
    }
}

/// Parses `n<index>`.
fn parse_node(text: &str) -> Option<usize> {
    text.strip_prefix('n')?.parse().ok()
}

impl TryFrom<String> for NodeRef {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let bad = || format!("bad node {s:?}: expected n<index> or a range n<a>..=n<b>");
        match s.split_once("..=") {
            Some((a, b)) => {
                let (a, b) = (
                    parse_node(a).ok_or_else(bad)?,
                    parse_node(b).ok_or_else(bad)?,
                );
                if a > b {
                    return Err(format!("bad node range {s:?}: n{a} is above n{b}"));
                }
                Ok(NodeRef::Range(a, b))
            }
            None => parse_node(&s).map(NodeRef::One).ok_or_else(bad),
        }
    }
}

impl From<NodeRef> for String {
    fn from(r: NodeRef) -> String {
        match r {
            NodeRef::One(i) => format!("n{i}"),
            NodeRef::Range(a, b) => format!("n{a}..=n{b}"),
        }
    }
}

/// Every node index a list names, sorted, without duplicates.
pub fn expand(list: &[NodeRef]) -> Vec<usize> {
    let mut out: Vec<usize> = list.iter().flat_map(|r| r.indices()).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Protocol settings for some nodes: every key of [`Config`] but `cluster_id` (a node of
/// another cluster cannot talk to this one at all), each optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSettings {
    /// Which nodes, e.g. `["n0", "n2..=n4"]`.
    pub nodes: Vec<NodeRef>,
    /// Apply only to starts at or after this time (first start or restart), e.g. "1m": a
    /// restart with new settings, as an operator rolls out a change. Default: every start.
    /// A restarted node gets the new settings as `ConfigChanged` right after `Started`, as
    /// `chorus run` logs them, so its start-up timers still follow its old settings.
    #[serde(
        default,
        with = "opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub from: Option<u64>,
    /// See [`Config::heartbeat_interval_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_ms: Option<u64>,
    /// See [`Config::election_timeout_min_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub election_timeout_min_ms: Option<u64>,
    /// See [`Config::election_timeout_max_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub election_timeout_max_ms: Option<u64>,
    /// See [`Config::discovery_timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_timeout_ms: Option<u64>,
    /// See [`Config::confirmations`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmations: Option<u32>,
    /// See [`Config::bootstrap_expect`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_expect: Option<u32>,
    /// See [`Config::max_clock_drift_ppm`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clock_drift_ppm: Option<u32>,
    /// See [`Config::score_bias`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score_bias: Option<bool>,
    /// See [`Config::election_slot_min_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub election_slot_min_ms: Option<u64>,
    /// See [`Config::discovery_fanout`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_fanout: Option<u32>,
}

impl NodeSettings {
    /// Writes the keys this entry sets into `c`.
    fn apply(&self, c: &mut Config) {
        fn set<T: Copy>(to: &mut T, from: Option<T>) {
            if let Some(v) = from {
                *to = v;
            }
        }
        set(&mut c.heartbeat_interval_ms, self.heartbeat_interval_ms);
        set(&mut c.election_timeout_min_ms, self.election_timeout_min_ms);
        set(&mut c.election_timeout_max_ms, self.election_timeout_max_ms);
        set(&mut c.discovery_timeout_ms, self.discovery_timeout_ms);
        set(&mut c.confirmations, self.confirmations);
        set(&mut c.bootstrap_expect, self.bootstrap_expect);
        set(&mut c.max_clock_drift_ppm, self.max_clock_drift_ppm);
        set(&mut c.score_bias, self.score_bias);
        set(&mut c.election_slot_min_ms, self.election_slot_min_ms);
        set(&mut c.discovery_fanout, self.discovery_fanout);
    }

    fn names(&self, i: usize) -> bool {
        self.nodes.iter().any(|r| r.indices().contains(&i))
    }
}

fn is_zero(ms: &u64) -> bool {
    *ms == 0
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

fn is_zero_ppm(n: &u32) -> bool {
    *n == 0
}

/// A task workload: submissions at nodes (stepped as `SubmitTask`, logged like any input), run
/// by the simulated sandbox (`sandbox.rs`) on the nodes with task slots. Probabilities are in
/// parts per million; every draw comes from the seed, on streams of their own, so adding a
/// workload leaves the scenario's fault schedule as it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskWorkload {
    /// Tasks per simulated second: arrival gaps drawn uniformly in `[0, 2 / rate]` s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Or exactly this many tasks, at uniformly drawn times in `[start, until]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// First possible submission, e.g. "10s".
    #[serde(with = "duration_ms")]
    pub start: u64,
    /// Last possible submission (default: the end of the run).
    #[serde(with = "opt_duration_ms", skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Where tasks are submitted: one live node that the target names, drawn at random
    /// (default: any live node).
    pub submit_at: Target,
    /// A run takes a uniformly drawn time in `[duration_min, duration_max]`.
    #[serde(with = "duration_ms")]
    pub duration_min: u64,
    /// See `duration_min`.
    #[serde(with = "duration_ms")]
    pub duration_max: u64,
    /// The spec's timeout: a run longer than this is killed and reported timed out.
    #[serde(with = "duration_ms")]
    pub timeout: u64,
    /// Runs that exit non-zero.
    pub fail_ppm: u32,
    /// Runs the kernel's OOM killer ends (after a part of their duration).
    pub oom_ppm: u32,
    /// Runs that hang past their timeout and are killed at it.
    pub timeout_ppm: u32,
    /// Runs that fail in a retryable way (`SandboxFailed { retryable: true }`).
    pub retryable_ppm: u32,
    /// Runs that fail for good (`SandboxFailed { retryable: false }`, e.g. a missing image).
    pub error_ppm: u32,
    /// Tasks whose every run hangs (the timeout is not enforced) until cancelled; their
    /// submitter cancels them `hang_cancel_after` after accepting them, and again as often
    /// while they have no result.
    pub hang_ppm: u32,
    /// See `hang_ppm`.
    #[serde(with = "duration_ms")]
    pub hang_cancel_after: u64,
    /// Tasks cancelled at a uniformly drawn time within `cancel_within` of being accepted: at
    /// their submitter, or — while it is down, and one time in four anyway — at another live
    /// node, which keeps the cancel for it (`chorus_core::task::ask`).
    pub cancel_ppm: u32,
    /// See `cancel_ppm`.
    #[serde(with = "duration_ms")]
    pub cancel_within: u64,
    /// Tasks that require a capability no node offers (issue 33): the admin tells their
    /// submitter why they wait, and ends them `unschedulable` after 60 task ticks.
    #[serde(skip_serializing_if = "is_zero_ppm")]
    pub unplaceable_ppm: u32,
    /// Submissions that are live sandboxes (docs/design.md §4.8) instead of commands: each
    /// holds a slot on one worker until its owner closes it (three in four, within
    /// `cancel_within` of its acceptance, as a cancel) or it expires at `timeout` (its
    /// lifetime); a sandbox failure at its start ends it. Invariant 9 holds each to one
    /// worker at a time, and invariant 7 owes each a result.
    #[serde(skip_serializing_if = "is_zero_ppm")]
    pub live_ppm: u32,
    /// Task slots of each node that runs tasks.
    pub slots: u32,
    /// The nodes that run tasks (default: every node); the others have no slots.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<NodeRef>,
    /// Invariant 7's bound: once the cluster is healed with a majority of the electorate up,
    /// every task accepted at a live submitter has its result within this time of its
    /// acceptance or of the fault-free period's start, whichever is later. Default: see
    /// [`Scenario::task_bound`].
    #[serde(with = "opt_duration_ms", skip_serializing_if = "Option::is_none")]
    pub result_bound: Option<u64>,
}

impl Default for TaskWorkload {
    fn default() -> Self {
        TaskWorkload {
            rate_per_s: None,
            count: None,
            start: 0,
            until: None,
            submit_at: Target::Random,
            duration_min: 200,
            duration_max: 5_000,
            timeout: 60_000,
            fail_ppm: 0,
            oom_ppm: 0,
            timeout_ppm: 0,
            retryable_ppm: 0,
            error_ppm: 0,
            hang_ppm: 0,
            hang_cancel_after: 30_000,
            cancel_ppm: 0,
            cancel_within: 10_000,
            unplaceable_ppm: 0,
            live_ppm: 0,
            slots: 2,
            workers: Vec::new(),
            result_bound: None,
        }
    }
}

impl TaskWorkload {
    /// The workload `NAME+tasks` adds to a scenario without one: a task every 2 s on average,
    /// runs of 0.2–5 s on every node with 2 slots, and a few of every ending (failures,
    /// retryable and fatal sandbox errors, OOM, timeouts, hangs cancelled after 20 s, cancels).
    pub fn background() -> TaskWorkload {
        TaskWorkload {
            rate_per_s: Some(0.5),
            timeout: 10_000,
            fail_ppm: 50_000,
            retryable_ppm: 50_000,
            error_ppm: 10_000,
            oom_ppm: 20_000,
            timeout_ppm: 20_000,
            hang_ppm: 10_000,
            hang_cancel_after: 20_000,
            cancel_ppm: 20_000,
            ..TaskWorkload::default()
        }
    }

    /// The mean gap between arrivals in ms, for a rate.
    pub fn mean_gap_ms(&self) -> Option<u64> {
        self.rate_per_s
            .map(|r| ((1_000.0 / r).round() as u64).max(1))
    }

    /// Whether node `i` runs tasks.
    pub fn runs_tasks(&self, i: usize) -> bool {
        self.workers.is_empty() || self.workers.iter().any(|r| r.indices().contains(&i))
    }

    /// The longest a run that ends by itself can take (a live sandbox not closed lives to its
    /// lifetime, the timeout).
    pub fn longest_run_ms(&self) -> u64 {
        if self.live_ppm > 0 {
            self.timeout
        } else {
            self.duration_max.min(self.timeout)
        }
    }

    fn validate(&self, nodes: usize) -> Result<(), String> {
        match (self.rate_per_s, self.count) {
            (Some(_), Some(_)) => {
                return Err("tasks: give `rate_per_s` or `count`, not both".into())
            }
            (None, None) => return Err("tasks: give `rate_per_s` or `count`".into()),
            (Some(r), None) if !(r > 0.0 && r <= 10_000.0) => {
                return Err(format!(
                    "tasks.rate_per_s {r} must be above 0 and at most 10000"
                ))
            }
            _ => {}
        }
        if self.duration_min > self.duration_max {
            return Err("tasks: duration_min is above duration_max".into());
        }
        if self.timeout == 0 || self.timeout > chorus_core::task::bounds::TIMEOUT_MS {
            return Err("tasks.timeout must be 1 ms to a day".into());
        }
        let mix = [
            self.fail_ppm,
            self.oom_ppm,
            self.timeout_ppm,
            self.retryable_ppm,
            self.error_ppm,
        ];
        if mix.iter().map(|p| u64::from(*p)).sum::<u64>() > 1_000_000
            || self.hang_ppm > 1_000_000
            || self.cancel_ppm > 1_000_000
            || self.unplaceable_ppm > 1_000_000
            || self.live_ppm > 1_000_000
        {
            return Err(
                "tasks: the failure mix is in parts per million and sums to at most 1000000".into(),
            );
        }
        if self.hang_ppm > 0 && self.hang_cancel_after == 0 {
            return Err("tasks: hung tasks need a positive hang_cancel_after".into());
        }
        if let Some(r) = self.workers.iter().find(|r| r.last() >= nodes) {
            return Err(format!(
                "tasks.workers names {}, but there are {nodes} nodes",
                String::from(*r)
            ));
        }
        if let Target::Node(i) | Target::Nodes(_, i) = self.submit_at {
            if i >= nodes {
                return Err(format!(
                    "tasks.submit_at names n{i}, but there are {nodes} nodes"
                ));
            }
        }
        Ok(())
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
    /// Stop nodes gracefully, as `systemctl stop` does: each steps its shutdown (an admin
    /// hands its office over first), and is down 20 ms later, once what it sent has left.
    /// Their event logs survive; `restart` starts them again.
    Stop {
        /// Which nodes.
        target: Target,
    },
    /// Ask for a handover, as an operator would (`chorus members transfer [to]`), at `target`
    /// (default: the admin; any other node refuses, naming the admin). Each node asked gets
    /// its own request id, as for `add`.
    Transfer {
        /// The voter to hand over to (default: the admin picks the best up-to-date one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<NodeRef>,
        /// Where to ask.
        #[serde(default = "admin_target", skip_serializing_if = "is_admin_target")]
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
    /// Split the cluster into `groups` from now on, e.g. `groups = [["n0", "n4"], ["n1..=n3"]]`:
    /// two nodes in different groups neither exchange messages nor stay connected (each end
    /// gets `PeerDown` for the other, and `PeerUp` again once they are no longer apart);
    /// unlisted nodes are not affected, as with `apart_at_start`. A later `split` replaces this
    /// one (and `apart_at_start`); `heal` restores everything. Cuts made by `partition`,
    /// `one_way` and `flap` stay until the heal. Written to the trace as a `partition`.
    Split {
        /// The groups, at least two, no node in two of them.
        groups: Vec<Vec<NodeRef>>,
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
    /// Ask for a membership change that makes `node` a voter, as an operator would
    /// (`chorus members add`), at `target` (default: the admin; any other node forwards it to
    /// the admin it follows). Each node asked gets its own request id (1, 2, … in firing
    /// order), which the `membership_change` records echo.
    Add {
        /// The node to add, e.g. "n5" (it must be admin-eligible and connected to the admin,
        /// or the admin refuses).
        node: NodeRef,
        /// Where to ask.
        #[serde(default = "admin_target", skip_serializing_if = "is_admin_target")]
        target: Target,
        /// Then, once the node asked reports the change committed, stop that node gracefully
        /// this long after, as an operator's script does (`chorus members leave` at a node,
        /// then `systemctl stop` there: with `target` the node removed, its retirement).
        #[serde(
            default,
            with = "opt_duration_ms",
            skip_serializing_if = "Option::is_none"
        )]
        stop_after_commit: Option<u64>,
        /// Likewise, but crash it (a node killed right after a commit it reported).
        #[serde(
            default,
            with = "opt_duration_ms",
            skip_serializing_if = "Option::is_none"
        )]
        crash_after_commit: Option<u64>,
    },
    /// Ask for a membership change that removes voter `node` (live or dead), as `add` does.
    Remove {
        /// The node to remove, e.g. "n0".
        node: NodeRef,
        /// Where to ask.
        #[serde(default = "admin_target", skip_serializing_if = "is_admin_target")]
        target: Target,
        /// Then, once the node asked reports the change committed, stop that node gracefully
        /// this long after, as an operator's script does (`chorus members leave` at a node,
        /// then `systemctl stop` there: with `target` the node removed, its retirement).
        #[serde(
            default,
            with = "opt_duration_ms",
            skip_serializing_if = "Option::is_none"
        )]
        stop_after_commit: Option<u64>,
        /// Likewise, but crash it (a node killed right after a commit it reported).
        #[serde(
            default,
            with = "opt_duration_ms",
            skip_serializing_if = "Option::is_none"
        )]
        crash_after_commit: Option<u64>,
    },
    /// Start late nodes that have not started yet: the named `nodes`, or else the first
    /// `count` of them in index order.
    Join {
        /// How many.
        #[serde(default)]
        count: usize,
        /// Which ones, e.g. `["n3", "n4"]` (each must be late: `late` or `late_joiners`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nodes: Vec<NodeRef>,
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
    /// Every live node but the admin.
    Followers,
    /// Every live node.
    All,
    /// Every crashed node.
    Crashed,
    /// A random share of the live nodes, in per cent (at least one).
    Percent(u32),
    /// One node by index.
    Node(usize),
    /// Nodes `a..=b` by index (`n1..=n3`).
    Nodes(usize, usize),
}

impl TryFrom<String> for Target {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.as_str() {
            "admin" => Target::Admin,
            "random" => Target::Random,
            "random_follower" => Target::RandomFollower,
            "followers" => Target::Followers,
            "all" => Target::All,
            "crashed" => Target::Crashed,
            p if p.ends_with('%') => Target::Percent(
                p[..p.len() - 1].parse().map_err(|_| format!("bad percentage {p:?}"))?,
            ),
            n if n.starts_with('n') => match NodeRef::try_from(n.to_owned())? {
                NodeRef::One(i) => Target::Node(i),
                NodeRef::Range(a, b) => Target::Nodes(a, b),
            },
            other => {
                return Err(format!(
                    "unknown target {other:?}: expected admin, random, random_follower, followers, all, crashed, N%, n<index> or n<a>..=n<b>"
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
            Target::Followers => "followers".into(),
            Target::All => "all".into(),
            Target::Crashed => "crashed".into(),
            Target::Percent(p) => format!("{p}%"),
            Target::Node(i) => format!("n{i}"),
            Target::Nodes(a, b) => format!("n{a}..=n{b}"),
        }
    }
}

fn admin_target() -> Target {
    Target::Admin
}

fn is_admin_target(t: &Target) -> bool {
    *t == Target::Admin
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

    /// The protocol configuration every node starts with, before `node_settings`.
    pub fn node_config(&self) -> Config {
        Config {
            bootstrap_expect: self
                .bootstrap_expect
                .unwrap_or(self.voter_count().max(1) as u32),
            ..self.config.clone()
        }
    }

    /// Node `i`'s configuration for a start at time `t`: the shared one with every
    /// `node_settings` entry that names `i` and applies from `t` on, in file order.
    pub fn node_config_at(&self, i: usize, t: u64) -> Config {
        let mut c = self.node_config();
        for s in &self.node_settings {
            if s.from.unwrap_or(0) <= t && s.names(i) {
                s.apply(&mut c);
            }
        }
        c
    }

    /// Every configuration some node may run, deduplicated (the shared one first).
    fn all_configs(&self) -> Vec<Config> {
        let mut out = vec![self.node_config()];
        for s in &self.node_settings {
            for i in expand(&s.nodes) {
                let c = self.node_config_at(i, s.from.unwrap_or(0));
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// The smallest minimum election timeout any node runs with (the turmoil tick follows it).
    pub fn shortest_election_timeout_min_ms(&self) -> u64 {
        self.all_configs()
            .iter()
            .map(|c| c.election_timeout_min_ms)
            .min()
            .unwrap_or(self.config.election_timeout_min_ms)
    }

    /// Whether node `i` is hostile: the highest-numbered `hostile.nodes` nodes.
    pub fn is_hostile(&self, i: usize) -> bool {
        i >= self.nodes - self.hostile.nodes.min(self.nodes)
    }

    /// Nodes that start late, by `join`: the named `late` ones and the highest-numbered
    /// `late_joiners`, in index order.
    pub fn late_nodes(&self) -> Vec<usize> {
        let mut out = expand(&self.late);
        out.extend(self.nodes.saturating_sub(self.late_joiners)..self.nodes);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The groups of `apart_at_start`, as node indices.
    pub fn apart_groups(&self) -> Vec<Vec<usize>> {
        self.apart_at_start.iter().map(|g| expand(g)).collect()
    }

    /// A scenario that says nothing but its name: the header of a trace that no simulation
    /// wrote (a real cluster's merged logs) has no `spec`.
    pub fn unspecified() -> Scenario {
        serde_json::from_value(serde_json::json!({ "name": "unspecified" }))
            .expect("every field but the name has a default")
    }

    /// The liveness bound in force: by default the slowest node's discovery timeout + 3 ×
    /// maximum election timeout + 2 × heartbeat, plus `link_spread`.
    pub fn liveness_bound(&self) -> u64 {
        self.liveness_bound_ms.unwrap_or_else(|| {
            let slowest = self
                .all_configs()
                .iter()
                .map(|c| {
                    c.discovery_timeout_ms
                        + 3 * c.election_timeout_max_ms
                        + 2 * c.heartbeat_interval_ms
                })
                .max()
                .unwrap_or(0);
            slowest + self.link_spread
        })
    }

    /// Invariant 7's bound (see [`TaskWorkload::result_bound`]), when there is a workload. By
    /// default: the liveness bound (an admin everyone knows), [`chorus_core::task::MAX_ATTEMPTS`]
    /// times the longest run, two re-offer periods of the submitter (10 task ticks each: an
    /// offer answered by an admin that then lost the task), and `hang_cancel_after` when tasks
    /// hang.
    pub fn task_bound(&self) -> Option<u64> {
        let t = self.tasks.as_ref()?;
        Some(t.result_bound.unwrap_or_else(|| {
            let heartbeat = self.slowest_heartbeat_ms();
            let hang = if t.hang_ppm > 0 {
                t.hang_cancel_after
            } else {
                0
            };
            chorus_core::task::result_bound_ms(heartbeat, self.liveness_bound(), t.longest_run_ms())
                + hang
        }))
    }

    /// Invariant 7's bound on the result of a task an admin found no live worker for, from its
    /// `task_unplaceable` record, when the scenario has a task workload.
    pub fn unschedulable_bound(&self) -> Option<u64> {
        self.tasks.as_ref()?;
        Some(chorus_core::task::unschedulable_bound_ms(
            self.slowest_heartbeat_ms(),
        ))
    }

    /// The longest heartbeat interval any node runs with (the task bounds are in its beats).
    fn slowest_heartbeat_ms(&self) -> u64 {
        self.all_configs()
            .iter()
            .map(|c| c.heartbeat_interval_ms)
            .max()
            .unwrap_or(1_000)
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
