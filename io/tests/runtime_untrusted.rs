//! The real runtime loop over a real sled log, fed input a node must survive (issue 9): a forged
//! heartbeat for the admin's own term, and a step that fails. Neither may leave an event in the
//! log that stops every restart; the node's term and vote survive both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chorus_core::{
    Config, Core, Event, Message, NodeId, Notice, PeerInfo, Refusal, Role, ADMIN_ELECTION,
};
use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};
use chorus_io::runtime::{
    Clock, EventLog, Observer, Runtime, RuntimeError, TokioClock, Transport, TransportEvent,
};
use tokio::sync::mpsc;

struct Inbox(mpsc::UnboundedReceiver<TransportEvent>);

impl Transport for Inbox {
    fn send(&mut self, _: &NodeId, _: &Message) {}
    fn broadcast(&mut self, _: &Message) {}
    fn sign(&self, signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
        chorus_core::certificate::simulated_signature(signer, digest)
    }

    async fn next(&mut self) -> TransportEvent {
        match self.0.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }
}

/// A clock the test can turn back, as a buggy clock would.
#[derive(Clone)]
struct RewindableClock {
    inner: TokioClock,
    rewind_ms: Arc<AtomicU64>,
}

impl Clock for RewindableClock {
    fn now_ms(&self) -> u64 {
        let rewind = self.rewind_ms.load(Ordering::SeqCst);
        self.inner.now_ms().saturating_sub(rewind)
    }

    async fn sleep_until(&self, deadline_ms: u64) {
        let rewind = self.rewind_ms.load(Ordering::SeqCst);
        self.inner.sleep_until(deadline_ms + rewind).await
    }
}

fn meta() -> LogMeta {
    let fast = Config {
        heartbeat_interval_ms: 20,
        election_timeout_min_ms: 60,
        election_timeout_max_ms: 90,
        discovery_timeout_ms: 30,
        ..Config::default()
    };
    LogMeta::new("a".into(), fast, vec![ADMIN_ELECTION.to_owned()], 1)
}

fn worker_up() -> TransportEvent {
    TransportEvent::PeerUp {
        peer: "w".into(),
        info: PeerInfo {
            capabilities: vec!["docker".to_owned()].into(),
            ..Default::default()
        },
    }
}

/// Collects the notices the core announces.
struct Notices(Arc<Mutex<Vec<Notice>>>);

impl Observer for Notices {
    fn on_notice(&mut self, _: u64, notice: &Notice) {
        self.0.lock().unwrap().push(notice.clone());
    }
}

/// Runs node "a" on the sled log in `dir` until `stop` resolves; returns the loop's result.
async fn run_node(
    dir: &std::path::Path,
    clock: RewindableClock,
    inbox: mpsc::UnboundedReceiver<TransportEvent>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Core, RuntimeError> {
    run_node_observed(dir, clock, inbox, stop, ()).await
}

async fn run_node_observed(
    dir: &std::path::Path,
    clock: RewindableClock,
    inbox: mpsc::UnboundedReceiver<TransportEvent>,
    stop: impl std::future::Future<Output = ()>,
    observer: impl Observer,
) -> Result<Core, RuntimeError> {
    let m = meta();
    let log = SledLog::open(dir, m.clone(), SledLogOptions::default()).unwrap();
    Runtime::new(m.fresh_core().unwrap(), Inbox(inbox), log, clock, observer)
        .run(stop)
        .await
}

fn clock() -> RewindableClock {
    RewindableClock {
        inner: TokioClock::new(),
        rewind_ms: Arc::default(),
    }
}

fn logged_events(dir: &std::path::Path) -> Vec<(u64, Event)> {
    let mut log = SledLog::open(dir, meta(), SledLogOptions::default()).unwrap();
    log.recover().unwrap().tail
}

// Issue 9, case 1, end to end: the forged heartbeat used to panic the admin, and since it was
// logged first, every restart replayed it and panicked again.
#[tokio::test(start_paused = true)]
async fn a_forged_heartbeat_for_the_admins_term_is_refused_and_restarts_are_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let forged = async {
        // A lone voter elects itself within a few election timeouts.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.send(worker_up()).unwrap();
        let msg = Message::Heartbeat {
            term: 1,
            beat: 1_000,
            membership_version: 1,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        };
        tx.send(TransportEvent::Message {
            from: "w".into(),
            msg,
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let notices = Arc::new(Mutex::new(Vec::new()));
    let core = run_node_observed(dir.path(), clock(), rx, forged, Notices(notices.clone()))
        .await
        .unwrap();
    assert_eq!(core.term(), 1);
    assert_eq!(core.voted_for().map(NodeId::as_str), Some("a"));
    assert!(
        core.beat() < 1_000,
        "the forged beat was not taken: {}",
        core.beat()
    );
    let refused = notices.lock().unwrap().clone();
    assert!(
        refused.contains(&Notice::Refused {
            from: "w".into(),
            message: "heartbeat".into(),
            reason: Refusal::NotMember,
        }),
        "{refused:?}"
    );

    // The refused message is in the log; replaying it is harmless.
    let (_tx, rx) = mpsc::unbounded_channel();
    let core = run_node(dir.path(), clock(), rx, async {
        tokio::time::sleep(Duration::from_millis(500)).await;
    })
    .await
    .unwrap();
    assert!(core.term() >= 1);
    assert_eq!(core.role(), Role::Follower, "shut down gracefully");
}

// A step that fails (here: a clock that runs backwards, which the core refuses to accept) stops
// the node with an error naming the event, and the event never reaches the log, so the next
// start recovers instead of failing the same way for ever.
#[tokio::test(start_paused = true)]
async fn a_failing_step_stops_the_node_without_logging_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let bad_clock = clock();
    let rewind = Arc::clone(&bad_clock.rewind_ms);
    let driver = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rewind.store(200, Ordering::SeqCst);
        tx.send(worker_up()).unwrap();
        std::future::pending::<()>().await
    };
    let err = run_node(dir.path(), bad_clock, rx, driver)
        .await
        .expect_err("the step fails");
    let text = err.to_string();
    assert!(
        matches!(
            &err,
            RuntimeError::StepFailed {
                position: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        text.contains("peer_up") && text.contains("time moved backwards"),
        "{text}"
    );
    assert!(text.contains("was not logged"), "{text}");
    let logged = logged_events(dir.path());
    assert!(
        !logged
            .iter()
            .any(|(_, e)| matches!(e, Event::PeerUp { .. })),
        "the failed event is not in the log"
    );
    let voted_before = logged
        .iter()
        .filter(|(_, e)| matches!(e, Event::TimerFired { .. }))
        .count();
    assert!(voted_before > 0);

    // A restart with a sound clock comes back with the term and vote the node had.
    let (_tx, rx) = mpsc::unbounded_channel();
    let core = run_node(dir.path(), clock(), rx, async {}).await.unwrap();
    assert!(core.term() >= 1);
    assert_eq!(core.voted_for().map(NodeId::as_str), Some("a"));
}
