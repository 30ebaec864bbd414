//! The node's metrics: what the observer counts as the node runs (messages, refusals, notices,
//! step latency, task figures) and their Prometheus text for `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use chorus_core::{Core, Refusal, Role};
use chorus_io::transport::Libp2pStats;

/// Upper bounds of the step-latency histogram, seconds.
const LATENCY_BUCKETS_S: [f64; 10] = [
    0.000_001, 0.000_005, 0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.1,
];

/// Upper bounds of the task placement and duration histograms, seconds.
pub const TASK_BUCKETS_S: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];

/// A Prometheus histogram with fixed bounds.
#[derive(Clone, Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative), one more for +Inf.
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending, seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            count: 0,
            sum: 0.0,
        }
    }

    /// Counts one observation of `value` seconds.
    pub fn observe(&mut self, value: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.count += 1;
        self.sum += value;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes the histogram in the text exposition format.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        self.render_series(out, name, "");
    }

    /// Writes the histogram's series only (no HELP/TYPE), each with `labels` (`k="v"`, or
    /// empty) before its own: one of several series of one histogram.
    pub fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let (open, sep, close) = if labels.is_empty() {
            ("", "", "")
        } else {
            ("{", ",", "}")
        };
        let mut cumulative = 0;
        let bounds = self.bounds.iter().map(|b| b.to_string());
        for (bound, count) in bounds.chain(["+Inf".to_owned()]).zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_sum{open}{labels}{close} {}\n{name}_count{open}{labels}{close} {}",
            self.sum, self.count
        );
    }
}

/// A histogram over the sandbox runner's bounds from its counts (each in its own bucket; what
/// is beyond the last bound is the rest of `count`).
fn runner_histogram(o: &chorus_io::sandbox::tasks::Observed) -> Histogram {
    let mut h = Histogram::new(&chorus_io::sandbox::tasks::START_BUCKETS_S);
    h.counts[..o.buckets.len()].copy_from_slice(&o.buckets);
    h.counts[o.buckets.len()] = o.count.saturating_sub(o.buckets.iter().sum::<u64>());
    h.count = o.count;
    h.sum = o.sum_s;
    h
}

/// Task figures of this node: as submitter (placement latency, durations, results) and as
/// worker (the sandbox runner's counters).
#[derive(Debug)]
pub struct TaskMetrics {
    /// Tasks submitted here and not yet placed: id → submitted at (core ms). Bounded by the
    /// tasks a node may own.
    pub unplaced: BTreeMap<chorus_core::TaskId, u64>,
    /// Submit → placed, as the submitter sees it.
    pub placement: Histogram,
    /// How long runs of tasks submitted here took (from their results).
    pub duration: Histogram,
    /// Submit → result, as the submitter sees it.
    pub latency: Histogram,
    /// Results received here, by status.
    pub completed: BTreeMap<&'static str, u64>,
    /// The sandbox runner's counters, when this node runs tasks.
    pub runner: Option<Arc<chorus_io::sandbox::tasks::RunnerStats>>,
}

impl Default for TaskMetrics {
    fn default() -> Self {
        TaskMetrics {
            unplaced: BTreeMap::new(),
            placement: Histogram::new(&TASK_BUCKETS_S),
            duration: Histogram::new(&TASK_BUCKETS_S),
            latency: Histogram::new(&TASK_BUCKETS_S),
            completed: BTreeMap::new(),
            runner: None,
        }
    }
}

impl TaskMetrics {
    /// Records the placement of every tracked task the core now has placed (or further).
    pub(super) fn check_placed(&mut self, core: &Core) {
        let now = core.now_ms();
        let owned = core.owned_tasks();
        let placement = &mut self.placement;
        self.unplaced.retain(|task, submitted| {
            let placed = owned.get(task).is_none_or(|t| {
                !matches!(
                    t.phase,
                    chorus_core::TaskPhase::Submitted | chorus_core::TaskPhase::Queued
                )
            });
            if placed && owned.contains_key(task) {
                placement.observe(now.saturating_sub(*submitted) as f64 / 1_000.0);
            }
            !placed
        });
    }

    /// Writes the task metrics.
    fn render(&self, out: &mut String, core: Option<&Core>) {
        let _ = writeln!(
            out,
            "# HELP chorus_tasks Tasks this node owns (submitted here), by phase.\n\
             # TYPE chorus_tasks gauge"
        );
        let phases = core.map(|c| c.task_counts().0).unwrap_or_default();
        for phase in ["submitted", "queued", "placed", "finished", "done"] {
            let n = phases.get(phase).copied().unwrap_or(0);
            let _ = writeln!(out, "chorus_tasks{{phase=\"{phase}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP chorus_tasks_completed_total Results received for tasks submitted here, by \
             status.\n# TYPE chorus_tasks_completed_total counter"
        );
        for status in chorus_core::TaskStatus::ALL {
            let n = self.completed.get(status.as_str()).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "chorus_tasks_completed_total{{status=\"{status}\"}} {n}"
            );
        }
        let admin = core.and_then(Core::admin_tasks);
        for (name, help, value) in [
            (
                "chorus_task_queue_length",
                "Tasks waiting for placement (admin only; 0 elsewhere).",
                admin.map_or(0, |a| a.queue_len()),
            ),
            (
                "chorus_task_placed",
                "Tasks placed and running on workers (admin only).",
                admin.map_or(0, |a| a.placed_len()),
            ),
            (
                "chorus_task_workers",
                "Workers the admin knows from their reports (admin only).",
                admin.map_or(0, |a| a.worker_count()),
            ),
            (
                "chorus_task_running",
                "Runs going on this node.",
                core.map_or(0, |c| c.running_tasks().len()),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        self.placement.render(
            out,
            "chorus_task_placement_seconds",
            "From submit to placement on a worker, for tasks submitted here.",
        );
        self.duration.render(
            out,
            "chorus_task_duration_seconds",
            "How long the runs of tasks submitted here took (from their results).",
        );
        self.latency.render(
            out,
            "chorus_task_latency_seconds",
            "From submit to result, for tasks submitted here (this node's clock).",
        );
        let counts = self
            .runner
            .as_ref()
            .map(|r| r.snapshot())
            .unwrap_or_default();
        runner_histogram(&counts.start).render(
            out,
            "chorus_sandbox_start_seconds",
            "How long a run on this node waited for its sandbox (warm pool or fresh).",
        );
        let name = "chorus_task_stage_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Where runs on this node spent their time, by stage: acquire (a \
             sandbox), arm (its end at the timeout), exec (the command's output), cleanup (what \
             it left, exit code, OOM state, usage), release (the sandbox given back).\n\
             # TYPE {name} histogram"
        );
        for (stage, c) in chorus_core::RunTimings::STAGES.iter().zip(&counts.stages) {
            runner_histogram(c).render_series(out, name, &format!("stage=\"{stage}\""));
        }
        for (name, help, value) in [
            (
                "chorus_sandbox_runs_total",
                "Runs started on this node.",
                counts.started,
            ),
            (
                "chorus_sandbox_pool_hits_total",
                "Runs whose sandbox came ready from a warm pool.",
                counts.pool_hits,
            ),
            (
                "chorus_sandbox_failures_total",
                "Runs that ended in a sandbox error.",
                counts.failed,
            ),
            (
                "chorus_sandbox_reaped_total",
                "Stale sandboxes of any owner on this host (owner gone or deadline passed) that \
                 this node's periodic reap removed.",
                counts.reaped,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    pub messages_in: BTreeMap<&'static str, u64>,
    pub messages_out: BTreeMap<&'static str, u64>,
    pub rejected: BTreeMap<&'static str, u64>,
    /// Messages the core refused (`chorus_core::Refusal`), by reason; every reason is listed.
    pub refused: BTreeMap<&'static str, u64>,
    pub notices: BTreeMap<&'static str, u64>,
    pub elections_started: u64,
    pub log_appends: u64,
    pub recovered_events: u64,
    pub latency_buckets: [u64; LATENCY_BUCKETS_S.len()],
    pub latency_count: u64,
    pub latency_sum_s: f64,
    pub notice_record_errors: u64,
    /// HTTP requests refused before a handler saw them (`crate::api::auth`), by reason.
    pub http_refused: BTreeMap<&'static str, u64>,
}

/// Every role, in the order `/metrics` lists them.
pub const ROLES: [Role; 4] = [
    Role::Follower,
    Role::PreCandidate,
    Role::Candidate,
    Role::Admin,
];

/// The role as the status API, the metrics and replay name it (one name per role, so `/status`
/// and `/metrics` always agree; a pre-candidate is not yet a candidate).
pub fn role_name(role: Role) -> &'static str {
    role.as_str()
}

/// Prometheus text exposition (format 0.0.4) of the node's counters, its core's state, the
/// transport's counters and the task figures.
pub fn exposition(
    m: &Metrics,
    core: Option<&Core>,
    transport_stats: Option<&Libp2pStats>,
    tasks: &TaskMetrics,
) -> String {
    let mut out = String::new();
    let (term, role) = core.map_or((0, Role::Follower), |c| (c.term(), c.role()));
    let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(&mut out, "chorus_term", "Current term.", term);
    let _ = writeln!(
        out,
        "# HELP chorus_role 1 for the node's current role.\n# TYPE chorus_role gauge"
    );
    for r in ROLES {
        let v = u64::from(r == role);
        let _ = writeln!(out, "chorus_role{{role=\"{}\"}} {v}", role_name(r));
    }
    let peers = core.map_or(0, |c| c.peers().len() as u64);
    gauge(
        &mut out,
        "chorus_peers",
        "Live peers known to the core.",
        peers,
    );
    let counter = |out: &mut String, name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    };
    counter(
        &mut out,
        "chorus_elections_started_total",
        "Times this node stood as a candidate.",
        m.elections_started,
    );
    counter(
        &mut out,
        "chorus_elections_won_total",
        "Times this node became admin.",
        m.notices.get("became_admin").copied().unwrap_or(0),
    );
    counter(
        &mut out,
        "chorus_log_appends_total",
        "Events appended to the event log.",
        m.log_appends,
    );
    counter(
        &mut out,
        "chorus_log_recovered_events_total",
        "Events replayed from the log at start.",
        m.recovered_events,
    );
    let labelled = |out: &mut String,
                    name: &str,
                    help: &str,
                    label: &str,
                    values: &BTreeMap<&'static str, u64>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (k, v) in values {
            let _ = writeln!(out, "{name}{{{label}=\"{k}\"}} {v}");
        }
    };
    let http_refused: BTreeMap<&'static str, u64> = crate::access::HttpRefusal::ALL
        .iter()
        .map(|r| {
            (
                r.as_str(),
                m.http_refused.get(r.as_str()).copied().unwrap_or(0),
            )
        })
        .collect();
    labelled(
        &mut out,
        "chorus_http_refused_total",
        "HTTP requests refused before any handler (bad_host, cross_origin, content_type, no_token, bad_token, role), by reason.",
        "reason",
        &http_refused,
    );
    labelled(
        &mut out,
        "chorus_messages_in_total",
        "Messages received, by kind.",
        "kind",
        &m.messages_in,
    );
    labelled(
        &mut out,
        "chorus_messages_out_total",
        "Messages sent or broadcast, by kind (a broadcast counts once).",
        "kind",
        &m.messages_out,
    );
    labelled(
        &mut out,
        "chorus_decode_errors_total",
        "Inputs rejected by the transport (decode errors and others), by reason.",
        "reason",
        &m.rejected,
    );
    let mut refused: BTreeMap<&'static str, u64> =
        Refusal::ALL.iter().map(|r| (r.as_str(), 0)).collect();
    refused.extend(m.refused.iter().map(|(k, v)| (*k, *v)));
    labelled(
        &mut out,
        "chorus_refused_total",
        "Messages the core refused and dropped without acting (not_member, out_of_range, unsolicited, conflicting_admin, stale), by reason.",
        "reason",
        &refused,
    );
    labelled(
        &mut out,
        "chorus_notices_total",
        "Decisions announced by the core, by kind.",
        "kind",
        &m.notices,
    );
    if let Some(stats) = transport_stats {
        let t = stats.snapshot();
        labelled(
            &mut out,
            "chorus_transport_messages_in_total",
            "Frames decoded by the transport, by message kind.",
            "kind",
            &t.messages_in,
        );
        labelled(
            &mut out,
            "chorus_transport_messages_out_total",
            "Messages queued by the transport, by kind.",
            "kind",
            &t.messages_out,
        );
        labelled(
            &mut out,
            "chorus_transport_rejected_total",
            "Inputs the transport rejected (decode errors, oversize, full queues), by reason.",
            "reason",
            &t.rejected,
        );
        labelled(
            &mut out,
            "chorus_transport_connections_denied_total",
            "Connections refused (allowlist, limits), by reason.",
            "reason",
            &t.connections_denied,
        );
        labelled(
            &mut out,
            "chorus_transport_send_failures_total",
            "Direct sends that failed, by reason.",
            "reason",
            &t.send_failures,
        );
        labelled(
            &mut out,
            "chorus_transport_connections_failed_total",
            "Connection attempts (in or out) that failed below the policy level, by reason: \
             handshake (most often a pre-shared key mismatch), refused, timeout, other.",
            "reason",
            &t.connections_failed_by_reason,
        );
        labelled(
            &mut out,
            "chorus_transport_discovery_dropped_total",
            "Peers or addresses peer discovery left out, by reason: no_address, book_full, \
             table_full, file_write.",
            "reason",
            &t.discovery_dropped,
        );
        counter(
            &mut out,
            "chorus_transport_broadcasts_gossiped_total",
            "Broadcasts published on gossipsub.",
            t.broadcasts_gossiped,
        );
        counter(
            &mut out,
            "chorus_transport_broadcasts_direct_total",
            "Broadcast copies sent directly to peers not yet subscribed.",
            t.broadcasts_direct,
        );
        counter(
            &mut out,
            "chorus_transport_broadcasts_linked_total",
            "Broadcast copies sent on peers' links (this node reached every peer it knows).",
            t.broadcasts_linked,
        );
        counter(
            &mut out,
            "chorus_transport_compact_frames_out_total",
            "Heartbeats and acknowledgements written as compact frames on compact links \
             (peers of an earlier release get JSON).",
            t.compact_frames_out,
        );
        counter(
            &mut out,
            "chorus_transport_links_replaced_total",
            "Inbound link streams stopped because their peer opened a newer one (it gave the \
             old one up: a write on it failed).",
            t.links_replaced,
        );
        labelled(
            &mut out,
            "chorus_transport_api_tunnels_total",
            "API calls carried over the cluster transport to or from a node whose API other \
             hosts cannot reach, by direction: in (served), out (opened).",
            "direction",
            &t.tunnels,
        );
        labelled(
            &mut out,
            "chorus_transport_bytes_out_total",
            "Message bytes handed to the network, by path: link (a peer's long-lived stream), \
             direct (one request-response exchange), gossip (one gossipsub publish, relays \
             not counted).",
            "path",
            &t.bytes_out,
        );
        labelled(
            &mut out,
            "chorus_transport_bytes_in_total",
            "Message bytes received, by path: link, direct, gossip (relayed copies included).",
            "path",
            &t.bytes_in,
        );
        gauge(
            &mut out,
            "chorus_transport_peers_connected",
            "Peers with an open connection.",
            t.peers_connected,
        );
    }
    let _ = writeln!(
        out,
        "# HELP chorus_step_latency_seconds Time spent in Core::step.\n\
         # TYPE chorus_step_latency_seconds histogram"
    );
    let mut cumulative = 0;
    for (bound, count) in LATENCY_BUCKETS_S.iter().zip(m.latency_buckets) {
        cumulative += count;
        let _ = writeln!(
            out,
            "chorus_step_latency_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "chorus_step_latency_seconds_bucket{{le=\"+Inf\"}} {}\n\
         chorus_step_latency_seconds_sum {}\n\
         chorus_step_latency_seconds_count {}",
        m.latency_count, m.latency_sum_s, m.latency_count
    );
    tasks.render(&mut out, core);
    out
}

/// Counts one step's time in `Core::step`.
pub(super) fn record_latency(m: &mut Metrics, latency: Duration) {
    let s = latency.as_secs_f64();
    if let Some(i) = LATENCY_BUCKETS_S.iter().position(|b| s <= *b) {
        m.latency_buckets[i] += 1;
    }
    m.latency_count += 1;
    m.latency_sum_s += s;
}
