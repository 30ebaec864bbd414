//! What the running node shows: an [`Observer`] that keeps a shadow copy of the core (stepped
//! with the same durable events, so status is exact), counts metrics, records notices in the
//! event log for `chorus replay`, and logs decisions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chorus_core::{Command, Core, Event, NodeId, Notice, Refusal, Role};
use chorus_io::eventlog::{NoticeRecorder, RecordedNotice};
use chorus_io::runtime::{Observer, StepInfo};

use crate::hostclock::HostClockOrigin;
use serde::Serialize;

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
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
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
            completed: BTreeMap::new(),
            runner: None,
        }
    }
}

impl TaskMetrics {
    /// Records the placement of every tracked task the core now has placed (or further).
    fn check_placed(&mut self, core: &Core) {
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
        let counts = self
            .runner
            .as_ref()
            .map(|r| r.snapshot())
            .unwrap_or_default();
        let mut start = Histogram::new(&chorus_io::sandbox::tasks::START_BUCKETS_S);
        start.counts[..counts.start_buckets.len()].copy_from_slice(&counts.start_buckets);
        start.counts[counts.start_buckets.len()] = counts
            .start_count
            .saturating_sub(counts.start_buckets.iter().sum::<u64>());
        start.count = counts.start_count;
        start.sum = counts.start_sum_s;
        start.render(
            out,
            "chorus_sandbox_start_seconds",
            "How long a run on this node waited for its sandbox (warm pool or fresh).",
        );
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
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
    }
}

/// How many (sender, reason) pairs of refusals are tracked for throttled warnings.
const MAX_REFUSING_SENDERS: usize = 1_024;

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
}

/// State shared between the runtime loop (writer) and the HTTP API (readers).
#[derive(Debug, Default)]
pub struct Shared {
    /// The shadow core: the node's state after the last carried-out step.
    pub core: Option<Core>,
    pub metrics: Metrics,
    pub listen_addrs: Vec<String>,
    pub node_id: String,
    pub capabilities: Vec<String>,
    pub shutting_down: bool,
    /// The transport's own counters (wire-level: gossip vs direct, denied connections, …).
    pub transport_stats: Option<std::sync::Arc<chorus_io::transport::Libp2pStats>>,
    /// When the shadow core last stepped (or was recovered): with its `now_ms`, this gives the
    /// node's time at any later instant, so status shows the time of the request, not of the
    /// last event.
    pub stepped_at: Option<Instant>,
    /// When the process started (uptime).
    pub started_at: Option<Instant>,
    /// When each peer was last heard from (a message or its arrival), by node id; at most
    /// [`MAX_CONTACTS`] entries.
    pub last_contact: BTreeMap<String, Instant>,
    /// Operator requests into the runtime loop (`POST /members`, `/tasks`), once it runs.
    pub operator: Option<crate::members::OperatorInputs>,
    /// Task figures.
    pub tasks: TaskMetrics,
}

/// Most peers whose last contact is remembered.
pub const MAX_CONTACTS: usize = 4_096;

/// A handle on [`Shared`].
#[derive(Clone, Debug, Default)]
pub struct SharedState(Arc<Mutex<Shared>>);

impl SharedState {
    pub fn lock(&self) -> MutexGuard<'_, Shared> {
        // Plain data: a panic elsewhere cannot leave it half-updated in a harmful way.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `/status` document.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub node_id: String,
    /// `admin`, `follower`, `pre_candidate` or `candidate` — the same label as `chorus_role`
    /// in `/metrics`.
    pub role: &'static str,
    pub term: u64,
    pub admin: Option<String>,
    pub voted_for: Option<String>,
    pub lease_until_ms: Option<u64>,
    /// The node's clock at the time of the request (the lease is on this clock).
    pub now_ms: u64,
    /// Milliseconds of lease left at the time of the request (admin only).
    pub lease_left_ms: Option<u64>,
    pub peers: Vec<String>,
    pub beat: u64,
    pub electorate: Vec<String>,
    /// The electorate's version and the term that proposed it (0 at bootstrap; both 0 before
    /// the cluster formed).
    pub electorate_version: u64,
    pub electorate_term: u64,
    /// Messages refused because their sender belongs to another cluster (an operator's
    /// mistake: two clusters founded where one was meant; see `foreign_cluster` in `/metrics`).
    pub foreign_cluster_refusals: u64,
    pub listen_addrs: Vec<String>,
    pub capabilities: Vec<String>,
    /// Seconds since the process started, at the time of the request.
    pub uptime_s: u64,
    pub shutting_down: bool,
}

/// Every role, in the order `/metrics` lists them.
pub const ROLES: [Role; 4] = [
    Role::Follower,
    Role::PreCandidate,
    Role::Candidate,
    Role::Admin,
];

/// The `/cluster` document: one node's view of every node it knows.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterView {
    /// The node answering.
    pub node_id: String,
    /// Its term.
    pub term: u64,
    /// The admin it knows.
    pub admin: Option<String>,
    /// Itself first, then the others in id order.
    pub members: Vec<Member>,
}

/// One node as another sees it.
#[derive(Clone, Debug, Serialize)]
pub struct Member {
    pub node_id: String,
    /// The HTTP API it advertised (its own `/status` has its role, term and lease).
    pub http: Option<String>,
    /// A member of the electorate.
    pub voter: bool,
    /// Connected to the answering node right now.
    pub connected: bool,
    /// Milliseconds since the answering node last heard from it.
    pub last_contact_ms: Option<u64>,
}

/// The role as the status API, the metrics and replay name it (one name per role, so `/status`
/// and `/metrics` always agree; a pre-candidate is not yet a candidate).
pub fn role_name(role: Role) -> &'static str {
    role.as_str()
}

impl Shared {
    /// The node's clock now: the shadow core's time plus the time since its last step.
    pub fn now_ms(&self) -> Option<u64> {
        let core = self.core.as_ref()?;
        let since = self
            .stepped_at
            .map_or(0, |t| t.elapsed().as_millis() as u64);
        Some(core.now_ms() + since)
    }

    /// The status document, or `None` before recovery finished.
    pub fn status(&self) -> Option<Status> {
        let core = self.core.as_ref()?;
        let now_ms = self.now_ms()?;
        let lease_until_ms = core.lease_until_ms().filter(|_| core.role() == Role::Admin);
        Some(Status {
            node_id: self.node_id.clone(),
            role: role_name(core.role()),
            term: core.term(),
            admin: core.admin().map(NodeId::to_string),
            voted_for: core.voted_for().map(NodeId::to_string),
            lease_until_ms,
            now_ms,
            lease_left_ms: lease_until_ms.map(|l| l.saturating_sub(now_ms)),
            peers: core.peers().ids().map(NodeId::to_string).collect(),
            beat: core.beat(),
            electorate: core
                .electorate()
                .map(|e| e.members().iter().map(NodeId::to_string).collect())
                .unwrap_or_default(),
            electorate_version: core.electorate().map_or(0, |e| e.version),
            electorate_term: core.electorate().map_or(0, |e| e.term),
            foreign_cluster_refusals: self
                .metrics
                .refused
                .get(Refusal::ForeignCluster.as_str())
                .copied()
                .unwrap_or(0),
            listen_addrs: self.listen_addrs.clone(),
            capabilities: self.capabilities.clone(),
            uptime_s: self
                .started_at
                .map_or_else(|| core.uptime_s(), |t| t.elapsed().as_secs()),
            shutting_down: self.shutting_down,
        })
    }

    /// This node's view of the cluster: itself, every connected peer and every member of the
    /// electorate, with the HTTP address each advertised and when it was last heard from.
    pub fn cluster(&self, http: &str) -> Option<ClusterView> {
        let core = self.core.as_ref()?;
        let advertised = self
            .transport_stats
            .as_ref()
            .map(|t| t.peer_http())
            .unwrap_or_default();
        let electorate: Vec<String> = core
            .electorate()
            .map(|e| e.members().iter().map(NodeId::to_string).collect())
            .unwrap_or_default();
        let mut ids: std::collections::BTreeSet<String> =
            core.peers().ids().map(NodeId::to_string).collect();
        ids.extend(electorate.iter().cloned());
        ids.remove(&self.node_id);
        let mut members = vec![Member {
            node_id: self.node_id.clone(),
            http: Some(http.to_owned()),
            voter: electorate.contains(&self.node_id),
            connected: true,
            last_contact_ms: Some(0),
        }];
        for id in ids {
            let connected = core.peers().contains(&NodeId::from(id.as_str()));
            members.push(Member {
                http: advertised.get(&id).cloned(),
                voter: electorate.contains(&id),
                connected,
                last_contact_ms: self
                    .last_contact
                    .get(&id)
                    .map(|t| t.elapsed().as_millis() as u64),
                node_id: id,
            });
        }
        Some(ClusterView {
            node_id: self.node_id.clone(),
            term: core.term(),
            admin: core.admin().map(NodeId::to_string),
            members,
        })
    }

    /// Prometheus text exposition (format 0.0.4).
    pub fn metrics_text(&self) -> String {
        let m = &self.metrics;
        let mut out = String::new();
        let (term, role) = self
            .core
            .as_ref()
            .map_or((0, Role::Follower), |c| (c.term(), c.role()));
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
        let peers = self.core.as_ref().map_or(0, |c| c.peers().len() as u64);
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
        if let Some(stats) = &self.transport_stats {
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
        self.tasks.render(&mut out, self.core.as_ref());
        out
    }
}

/// The node's observer.
pub struct NodeObserver {
    shared: SharedState,
    recorder: NoticeRecorder,
    /// The log sequence of the next step (steps come 1:1 with appended events, in order).
    next_seq: u64,
    /// Notices of the current step so far (their index in the step).
    step_notices: u32,
    /// Refusals per (sender, reason), for throttled warnings; bounded by
    /// `MAX_REFUSING_SENDERS`.
    refusals_by_sender: BTreeMap<(NodeId, Refusal), u64>,
    current_seq: u64,
    /// The host's clocks at the node clock's zero, for the anchor recorded at `Started`.
    clock_origin: HostClockOrigin,
}

impl NodeObserver {
    pub fn new(
        shared: SharedState,
        recorder: NoticeRecorder,
        next_seq: u64,
        clock_origin: HostClockOrigin,
    ) -> Self {
        NodeObserver {
            shared,
            recorder,
            next_seq,
            step_notices: 0,
            refusals_by_sender: BTreeMap::new(),
            current_seq: 0,
            clock_origin,
        }
    }
}

impl Observer for NodeObserver {
    fn on_recovered(&mut self, core: &Core, replayed: usize) {
        let mut s = self.shared.lock();
        s.core = Some(core.clone());
        s.stepped_at = Some(Instant::now());
        s.metrics.recovered_events = replayed as u64;
        tracing::info!(
            term = core.term(),
            voted_for = ?core.voted_for(),
            replayed,
            "recovered state from the event log"
        );
    }

    fn on_step(&mut self, step: &StepInfo<'_>) {
        self.current_seq = self.next_seq;
        self.next_seq += 1;
        self.step_notices = 0;
        if matches!(step.event, Event::Started) {
            let anchor = self.clock_origin.anchor(step.now_ms, step.offset_ms);
            if let Err(e) = self.recorder.record_clock(self.current_seq, &anchor) {
                // Only a merged replay needs it; the node runs on.
                tracing::warn!("cannot record this start's clock anchor: {e}");
            }
        }
        let mut s = self.shared.lock();
        if let Some(core) = s.core.as_mut() {
            // Same event, same time, same state: the shadow stays equal to the real core.
            let mut discard = Vec::new();
            core.step(step.now_ms, step.event.clone(), &mut discard);
            debug_assert_eq!(discard.as_slice(), step.commands, "shadow core diverged");
        }
        if !s.tasks.unplaced.is_empty() {
            let Shared { core, tasks, .. } = &mut *s;
            if let Some(core) = core.as_ref() {
                tasks.check_placed(core);
            }
        }
        s.stepped_at = Some(Instant::now());
        let contact = match step.event {
            Event::Message { from, .. } => Some(from),
            Event::PeerUp(advert) => Some(advert.peer()),
            _ => None,
        };
        if let Some(from) = contact {
            let id = from.to_string();
            if s.last_contact.len() < MAX_CONTACTS || s.last_contact.contains_key(&id) {
                s.last_contact.insert(id, Instant::now());
            }
        }
        let m = &mut s.metrics;
        m.log_appends += 1;
        if let Event::Message { msg, .. } = step.event {
            *m.messages_in.entry(msg.kind()).or_default() += 1;
        }
        for command in step.commands {
            match command {
                Command::Send { msg, .. } | Command::Broadcast { msg } => {
                    *m.messages_out.entry(msg.kind()).or_default() += 1;
                }
                Command::RoleChanged {
                    role: Role::Candidate,
                    ..
                } => m.elections_started += 1,
                _ => {}
            }
        }
        record_latency(m, step.latency);
    }

    fn on_role_changed(&mut self, now_ms: u64, role: Role, term: u64, lease: Option<u64>) {
        tracing::info!(now_ms, role = %role, term, lease_until_ms = ?lease, "role changed");
    }

    fn on_notice(&mut self, now_ms: u64, notice: &Notice) {
        if let Notice::Refused {
            from,
            message,
            reason,
        } = notice
        {
            // Counted and logged, not recorded: replay re-derives refusals from the logged
            // messages, and a flood of hostile input must not be written twice.
            // A warning per sender and reason at the 1st, 2nd, 4th, 8th… refusal: a hostile
            // peer is named at once without flooding the log.
            let seen = if self.refusals_by_sender.len() < MAX_REFUSING_SENDERS
                || self
                    .refusals_by_sender
                    .contains_key(&(from.clone(), *reason))
            {
                let n = self
                    .refusals_by_sender
                    .entry((from.clone(), *reason))
                    .or_default();
                *n += 1;
                *n
            } else {
                0
            };
            if reason.is_benign() || !seen.is_power_of_two() {
                tracing::debug!(now_ms, %from, %message, %reason, "message refused");
            } else {
                tracing::warn!(now_ms, %from, %message, %reason, refusals = seen, "message refused");
            }
            *self
                .shared
                .lock()
                .metrics
                .refused
                .entry(reason.as_str())
                .or_default() += 1;
            return;
        }
        let kind = notice.kind();
        match notice {
            Notice::LeaseRenewed { .. } => tracing::debug!(now_ms, ?notice, "{kind}"),
            _ => tracing::info!(now_ms, ?notice, "{kind}"),
        }
        let record = RecordedNotice {
            seq: self.current_seq,
            now_ms,
            notice: notice.clone(),
        };
        let index = self.step_notices;
        self.step_notices += 1;
        let failed = match self.recorder.record(index, &record) {
            // Votes and elections are rare and matter for replay: make them durable now.
            Ok(()) if kind != "lease_renewed" => self.recorder.flush().is_err(),
            Ok(()) => false,
            Err(e) => {
                tracing::warn!(error = %e, "could not record a notice");
                true
            }
        };
        let mut s = self.shared.lock();
        *s.metrics.notices.entry(kind).or_default() += 1;
        if failed {
            s.metrics.notice_record_errors += 1;
        }
        crate::members::deliver(&mut s, notice);
        track_task(&mut s, notice);
        crate::tasks::deliver(&mut s, notice);
    }

    fn on_rejected(&mut self, from: Option<&NodeId>, reason: &str) {
        tracing::debug!(?from, reason, "input rejected");
        let mut s = self.shared.lock();
        // Reasons are a small, stable set of labels: each new one is kept once (a bounded set),
        // anything beyond the bound is lumped together.
        let known = s.metrics.rejected.keys().find(|k| **k == reason).copied();
        let key: &'static str = match known {
            Some(k) => k,
            None if s.metrics.rejected.len() < 32 && reason.len() <= 48 => {
                Box::leak(reason.to_owned().into_boxed_str())
            }
            None => "other",
        };
        *s.metrics.rejected.entry(key).or_default() += 1;
    }
}

/// Task notices into the task metrics: a new submission starts its placement clock, a result
/// counts by status and duration.
fn track_task(s: &mut Shared, notice: &Notice) {
    let Shared { core, tasks, .. } = s;
    let Some(core) = core.as_ref() else {
        return;
    };
    match notice {
        Notice::TaskSubmitted {
            task,
            existing: false,
            ..
        } => {
            if let Some(t) = core.owned_tasks().get(task) {
                tasks.unplaced.insert(task.clone(), t.submitted_at_ms);
                // Placed in the same step (this node is the admin): counted now.
                tasks.check_placed(core);
            }
        }
        Notice::TaskCompleted { task, status } => {
            *tasks.completed.entry(status.as_str()).or_default() += 1;
            if let Some(r) = core.owned_tasks().get(task).and_then(|t| t.result.as_ref()) {
                tasks.duration.observe(r.duration_ms as f64 / 1_000.0);
            }
        }
        _ => {}
    }
}

fn record_latency(m: &mut Metrics, latency: Duration) {
    let s = latency.as_secs_f64();
    if let Some(i) = LATENCY_BUCKETS_S.iter().position(|b| s <= *b) {
        m.latency_buckets[i] += 1;
    }
    m.latency_count += 1;
    m.latency_sum_s += s;
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Config, Refusal, ADMIN_ELECTION};
    use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};

    /// The role `/metrics` reports with value 1.
    fn metrics_role(text: &str) -> String {
        let ones: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("chorus_role{") && l.ends_with(" 1"))
            .collect();
        assert_eq!(ones.len(), 1, "exactly one role is 1: {ones:?}");
        ones[0]
            .split('"')
            .nth(1)
            .expect("a quoted role label")
            .to_owned()
    }

    /// Fires the core's timers until `until` holds, checking at every state that `/status`
    /// and `/metrics` name the same role; returns the roles seen, in order.
    fn walk(core: &mut Core, until: impl Fn(&Core) -> bool) -> Vec<&'static str> {
        let mut shared = Shared::default();
        let mut seen = Vec::new();
        let mut out = Vec::new();
        // Bounded: discovery re-arms every 100 ms, the election within 45 s.
        for _ in 0..2_000 {
            shared.core = Some(core.clone());
            let status = shared.status().unwrap();
            assert_eq!(status.role, metrics_role(&shared.metrics_text()));
            if seen.last() != Some(&status.role) {
                seen.push(status.role);
            }
            if until(core) {
                return seen;
            }
            let (at, timer) = core.next_deadline().expect("a timer is armed");
            out.clear();
            core.step(at, Event::TimerFired { timer }, &mut out);
        }
        panic!("the condition never held; roles seen: {seen:?}");
    }

    fn voter(bootstrap_expect: u32) -> Core {
        let config = Config {
            discovery_timeout_ms: 100,
            bootstrap_expect,
            ..Config::default()
        };
        let mut core = Core::new("me".into(), config, vec![ADMIN_ELECTION.into()], 1).unwrap();
        core.step(0, Event::Started, &mut Vec::new());
        core
    }

    #[test]
    fn status_and_metrics_agree_on_a_pre_candidate() {
        let mut core = voter(2);
        let info = chorus_core::PeerInfo {
            capabilities: vec![ADMIN_ELECTION.to_owned()].into(),
            ..chorus_core::PeerInfo::default()
        };
        core.step(1, Event::peer_up("other".into(), info), &mut Vec::new());
        core.set_electorate_for_test(chorus_core::Electorate::new(
            1,
            vec!["me".into(), "other".into()],
        ));
        // The other voter never answers: this node stays a pre-candidate.
        let seen = walk(&mut core, |c| c.role() != Role::Follower);
        assert_eq!(seen, ["follower", "pre_candidate"]);
    }

    #[test]
    fn status_and_metrics_agree_on_an_admin() {
        let mut core = voter(1);
        let seen = walk(&mut core, |c| c.role() == Role::Admin);
        assert_eq!(seen.first(), Some(&"follower"), "{seen:?}");
        assert_eq!(seen.last(), Some(&"admin"), "{seen:?}");
    }

    #[test]
    fn status_time_and_lease_are_those_of_the_request() {
        let mut core = Core::new(
            "me".into(),
            Config::default(),
            vec![ADMIN_ELECTION.into()],
            1,
        )
        .unwrap();
        let mut out = Vec::new();
        core.step(5_000, Event::Started, &mut out);
        let shared = Shared {
            core: Some(core),
            stepped_at: Some(Instant::now() - Duration::from_secs(10)),
            started_at: Some(Instant::now() - Duration::from_secs(26)),
            ..Shared::default()
        };
        let status = shared.status().unwrap();
        assert!(status.now_ms >= 15_000, "{}", status.now_ms);
        assert!(status.uptime_s >= 26, "{}", status.uptime_s);
    }

    #[test]
    fn refusals_are_counted_by_reason_and_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let meta = LogMeta::new("a".into(), Default::default(), vec![], 1);
        let log = SledLog::open(dir.path(), meta, SledLogOptions::default()).unwrap();
        let shared = SharedState::default();
        let mut observer = NodeObserver::new(
            shared.clone(),
            log.notice_recorder(),
            1,
            crate::hostclock::HostClockOrigin::now(),
        );
        let refused = |reason| Notice::Refused {
            from: "w".into(),
            message: "heartbeat".into(),
            reason,
        };
        observer.on_notice(5, &refused(Refusal::NotMember));
        observer.on_notice(6, &refused(Refusal::NotMember));
        observer.on_notice(7, &refused(Refusal::OutOfRange));
        let text = shared.lock().metrics_text();
        for line in [
            r#"chorus_refused_total{reason="not_member"} 2"#,
            r#"chorus_refused_total{reason="out_of_range"} 1"#,
            r#"chorus_refused_total{reason="stale"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            log.notices().unwrap().is_empty(),
            "refusals are not recorded"
        );
    }
}
