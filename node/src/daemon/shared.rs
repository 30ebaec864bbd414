//! The state the runtime loop writes (through the observer) and the HTTP API reads: the shadow
//! core, the counters, the recent timeline, and the operator requests waiting for the core's
//! answer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use chorus_core::{Core, Event, Notice};
use chorus_io::transport::libp2p::ApiTunnels;
use chorus_io::transport::Libp2pStats;

use super::metrics::{exposition, Metrics, TaskMetrics};
use super::operator::OperatorInputs;

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
    /// Notified when the node left the cluster (`POST /members/leave`): it stops as on SIGTERM.
    pub leave: Arc<tokio::sync::Notify>,
    /// The transport's own counters (wire-level: gossip vs direct, denied connections, …).
    pub transport_stats: Option<Arc<Libp2pStats>>,
    /// API tunnels to other nodes over the cluster transport, for a node whose API advertised
    /// no address this node reaches (`api::sandbox_forward`, `api::cluster_status`).
    pub tunnels: Option<ApiTunnels>,
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
    pub operator: Option<OperatorInputs>,
    /// Task figures.
    pub tasks: TaskMetrics,
    /// The most one task may ask for (`[tasks]` ceilings): a submit above them is refused.
    pub ceilings: chorus_io::sandbox::tasks::Ceilings,
    /// The API's address as peers are told it: `HOST:PORT`, or `https://HOST:PORT#sha256=FP`.
    pub http_url: String,
    /// SHA-256 of the API's TLS certificate, when it speaks TLS.
    pub http_tls_fingerprint: Option<String>,
    /// Seals secret environment values at submit (the cluster's pre-shared key), if any.
    pub secret_key: Option<chorus_io::sandbox::tasks::SecretKey>,
    /// The output of the runs this node ran (`GET /tasks/{id}/logs`), when it runs tasks.
    pub logs: Option<Arc<chorus_io::sandbox::tasks::LogStore>>,
    /// What this node saw lately, for the console's timeline (`GET /status/history`).
    pub timeline: super::timeline::Timeline,
    /// The live sandboxes this node holds (`/sandboxes`), when it runs Docker sandboxes.
    pub live: Option<Arc<super::sandboxes::Live>>,
    /// Notified after every step of the shadow core (a create waits on it for its placement).
    pub stepped: Arc<tokio::sync::Notify>,
    /// The workers of live sandboxes other nodes hold the tasks of, as learnt from those
    /// nodes (`/sandboxes` routing); at most [`MAX_CONTACTS`] entries.
    pub sandbox_workers: BTreeMap<String, String>,
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

impl Shared {
    /// The node's clock now: the shadow core's time plus the time since its last step.
    pub fn now_ms(&self) -> Option<u64> {
        let core = self.core.as_ref()?;
        let since = self
            .stepped_at
            .map_or(0, |t| t.elapsed().as_millis() as u64);
        Some(core.now_ms() + since)
    }

    /// Prometheus text exposition (format 0.0.4).
    pub fn metrics_text(&self) -> String {
        let mut text = crate::build_info::BUILD.metric();
        text.push_str(&exposition(
            &self.metrics,
            self.core.as_ref(),
            self.transport_stats.as_deref(),
            &self.tasks,
        ));
        if let Some(live) = &self.live {
            let (held, warm) = live.gauges();
            let counters = live.counters();
            for (name, kind, help, value) in [
                (
                    "chorus_live_sandboxes",
                    "gauge",
                    "Live sandboxes this node holds.",
                    held as u64,
                ),
                (
                    "chorus_live_warm",
                    "gauge",
                    "Warm live sandboxes ready for a create.",
                    warm as u64,
                ),
                (
                    "chorus_live_created_total",
                    "counter",
                    "Live sandboxes created.",
                    counters.created,
                ),
                (
                    "chorus_live_from_pool_total",
                    "counter",
                    "Creates served by a warm live sandbox.",
                    counters.from_pool,
                ),
            ] {
                text.push_str(&format!(
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
                ));
            }
            for (name, help, counted) in [
                (
                    "chorus_live_refused_total",
                    "Live sandbox calls this worker refused, by reason (file_size, per_owner, \
                     worker_full, idle_timeout, lifetime).",
                    &counters.refused,
                ),
                (
                    "chorus_live_ended_total",
                    "Live sandboxes this worker ended, by why.",
                    &counters.ended,
                ),
            ] {
                text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
                for (reason, n) in counted {
                    text.push_str(&format!("{name}{{reason=\"{reason}\"}} {n}\n"));
                }
            }
        }
        text
    }
}

/// Hands a notice to the operator request waiting for it, if any (see
/// [`OperatorInputs::deliver`]).
pub fn deliver(shared: &mut Shared, notice: &Notice) {
    if let Some(ops) = shared.operator.as_mut() {
        ops.deliver(notice);
    }
}

/// Hands `event(request)` to the runtime loop under a fresh request id, and lets `wait` record
/// who waits for its answer (only once the event is queued). Refused while the node is not
/// running, or when the operator queue is full. Every API route that asks the core goes here.
pub fn queue(
    shared: &SharedState,
    event: impl FnOnce(u64) -> Event,
    wait: impl FnOnce(&mut OperatorInputs, u64),
) -> Result<u64, &'static str> {
    let mut s = shared.lock();
    let stopping = s.shutting_down;
    let Some(ops) = s.operator.as_mut().filter(|_| !stopping) else {
        return Err("the node is not running (starting or stopping)");
    };
    let request = ops.next_request;
    ops.next_request += 1;
    if ops.tx.try_send(event(request)).is_err() {
        return Err("the node is busy with other operator requests; retry");
    }
    wait(ops, request);
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ChangeOutcome, MemberChange, NodeId};
    use tokio::sync::mpsc;

    #[test]
    fn only_committed_and_refused_settle_a_request() {
        let (tx, _rx) = mpsc::channel(1);
        let mut shared = Shared {
            operator: Some(OperatorInputs::new(tx, 7)),
            ..Shared::default()
        };
        let (wtx, mut wrx) = mpsc::unbounded_channel();
        shared.operator.as_mut().unwrap().waiters.insert(7, wtx);
        let change = MemberChange::Remove {
            node: NodeId::from("b"),
        };
        let notice = |outcome, request| Notice::MembershipChange {
            change: change.clone(),
            outcome,
            request,
        };
        let forwarded = ChangeOutcome::Forwarded {
            admin: NodeId::from("a"),
        };
        deliver(&mut shared, &notice(forwarded.clone(), 7));
        // Another request's answer, or autopilot's notice (request 0), is not this one's.
        deliver(
            &mut shared,
            &notice(ChangeOutcome::Committed { version: 9 }, 8),
        );
        deliver(
            &mut shared,
            &notice(ChangeOutcome::Committed { version: 9 }, 0),
        );
        assert!(shared.operator.as_ref().unwrap().waiters.contains_key(&7));
        deliver(
            &mut shared,
            &notice(ChangeOutcome::Committed { version: 3 }, 7),
        );
        assert!(shared.operator.as_ref().unwrap().waiters.is_empty());
        assert_eq!(wrx.try_recv().unwrap(), forwarded);
        assert_eq!(
            wrx.try_recv().unwrap(),
            ChangeOutcome::Committed { version: 3 }
        );
        assert!(wrx.try_recv().is_err(), "nothing else reached the request");
    }
}
