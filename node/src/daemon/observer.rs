//! What the running node shows: an [`Observer`] that keeps a shadow copy of the core (stepped
//! with the same durable events, so status is exact), counts metrics, keeps the recent
//! timeline the console draws, records notices in the event log for `chorus replay`, hands
//! operator requests their answers, and logs decisions.

use std::collections::BTreeMap;
use std::time::Instant;

use chorus_core::{Command, Core, Event, NodeId, Notice, Refusal, Role};
use chorus_io::eventlog::{NoticeRecorder, RecordedNotice};
use chorus_io::log_fields::outside;
use chorus_io::runtime::{Observer, StepInfo};

use super::metrics::record_latency;
use super::shared::{deliver, Shared, SharedState, MAX_CONTACTS};
use super::timeline::Timeline;
use crate::history::hostclock::HostClockOrigin;

/// How many (sender, reason) pairs of refusals are tracked for throttled warnings.
const MAX_REFUSING_SENDERS: usize = 1_024;

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
        // Its epoch tells this run's history from an earlier run's (a page open across a restart).
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        s.timeline = Timeline::begin(epoch, core.now_ms(), core);
        tracing::info!(
            term = core.term(),
            voted_for = core.voted_for().map(tracing::field::display),
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
        {
            let Shared { core, timeline, .. } = &mut *s;
            if let Some(core) = core.as_ref() {
                timeline.observe(step.now_ms, core, Some(step.event));
            }
        }
        if !s.tasks.unplaced.is_empty() {
            let Shared { core, tasks, .. } = &mut *s;
            if let Some(core) = core.as_ref() {
                tasks.check_placed(core);
            }
        }
        s.stepped_at = Some(Instant::now());
        s.stepped.notify_waiters();
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
        tracing::info!(now_ms, role = %role, term, lease_until_ms = lease, "role changed");
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
                tracing::debug!(now_ms, from = %outside(from), message = %outside(message),
                    %reason, "message refused");
            } else {
                tracing::warn!(now_ms, from = %outside(from), message = %outside(message),
                    %reason, refusals = seen, "message refused");
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
        // In words, as `chorus replay` says it (never Rust's debug text); names, reasons and
        // task fields in it come from peers and requests (a refused task's env name).
        let words = outside(crate::history::replay::notice_words(notice));
        match notice {
            Notice::LeaseRenewed { .. } => tracing::debug!(now_ms, notice = %words, "{kind}"),
            _ => tracing::info!(now_ms, notice = %words, "{kind}"),
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
        track_task(&mut s, notice);
        deliver(&mut s, notice);
    }

    fn on_rejected(&mut self, from: Option<&NodeId>, reason: &str) {
        tracing::debug!(
            from = from.map(tracing::field::display),
            reason,
            "input rejected"
        );
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
            if let Some(t) = core.owned_tasks().get(task) {
                if let Some(r) = &t.result {
                    tasks.duration.observe(r.duration_ms as f64 / 1_000.0);
                }
                let took = t.done_at_ms.saturating_sub(t.submitted_at_ms);
                tasks.latency.observe(took as f64 / 1_000.0);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};

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
            HostClockOrigin::now(),
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

    /// Issue 51, finding 5: what a peer or a request put into a notice (a sender's id, a
    /// message's kind, a refused task's env name) reaches the log with its control characters
    /// escaped — one line per event, no forged line, nothing for a terminal.
    #[test]
    fn text_from_peers_and_requests_is_logged_escaped() {
        #[derive(Clone, Default)]
        struct Kept(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Kept {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        let dir = tempfile::tempdir().unwrap();
        let meta = LogMeta::new("a".into(), Default::default(), vec![], 1);
        let log = SledLog::open(dir.path(), meta, SledLogOptions::default()).unwrap();
        let mut observer = NodeObserver::new(
            SharedState::default(),
            log.notice_recorder(),
            1,
            HostClockOrigin::now(),
        );
        let forged = "x\n2099-01-01T00:00:00.000000Z  WARN FORGED\r\x1b[2J\u{9b}0m";
        let notices = [
            Notice::Refused {
                from: NodeId::new(forged),
                message: forged.to_owned().into(),
                reason: Refusal::NotMember,
            },
            Notice::TaskRefused {
                request: 1,
                reason: format!("environment variable `{forged}` is not NAME=VALUE"),
            },
            Notice::Voted {
                term: 2,
                candidate: NodeId::new(forged),
            },
            Notice::AdminKnown {
                admin: NodeId::new(forged),
                term: 2,
            },
        ];
        let kept = Kept::default();
        let out = kept.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for notice in &notices {
                observer.on_notice(5, notice);
            }
        });
        let text = String::from_utf8(kept.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), notices.len(), "one line per notice:\n{text}");
        for line in lines {
            assert!(!line.chars().any(char::is_control), "{line:?}");
            assert!(line.contains("x\\x0a2099"), "{line:?}");
            assert!(line.contains("FORGED\\x0d\\x1b[2J\\u{9b}0m"), "{line:?}");
        }
    }
}
