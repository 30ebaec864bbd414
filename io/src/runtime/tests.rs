//! Runtime loop tests under tokio's paused clock, with a channel-fed fake transport.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chorus_core::{
    Command, Config, Core, Event, Message, NodeId, Notice, PeerInfo, Role, StepDownReason,
    ADMIN_ELECTION,
};
use tokio::sync::mpsc;

use super::*;

/// A shared record of what the adapters were asked to do, in order.
type Journal = Arc<Mutex<Vec<String>>>;

fn note(journal: &Journal, what: impl Into<String>) {
    journal.lock().unwrap().push(what.into());
}

struct FakeTransport {
    inbox: mpsc::UnboundedReceiver<TransportEvent>,
    journal: Journal,
    sent: Arc<Mutex<Vec<Command>>>,
}

impl Transport for FakeTransport {
    fn send(&mut self, to: &NodeId, msg: &Message) {
        note(&self.journal, format!("send {}", msg.kind()));
        self.sent.lock().unwrap().push(Command::Send {
            to: to.clone(),
            msg: msg.clone(),
        });
    }

    fn broadcast(&mut self, msg: &Message) {
        note(&self.journal, format!("broadcast {}", msg.kind()));
        self.sent
            .lock()
            .unwrap()
            .push(Command::Broadcast { msg: msg.clone() });
    }

    fn sign(&self, signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
        chorus_core::certificate::simulated_signature(signer, digest)
    }

    async fn next(&mut self) -> TransportEvent {
        match self.inbox.recv().await {
            Some(ev) => ev,
            // The test dropped its sender: nothing more will come.
            None => std::future::pending().await,
        }
    }
}

/// A [`MemoryLog`] that also writes its calls into the journal.
struct JournalLog {
    inner: MemoryLog,
    journal: Journal,
}

impl EventLog for JournalLog {
    fn append(&mut self, now_ms: u64, event: &Event) -> Result<(), LogError> {
        note(&self.journal, "append");
        self.inner.append(now_ms, event)
    }
    fn sync(&mut self) -> Result<(), LogError> {
        note(&self.journal, "sync");
        self.inner.sync()
    }
    fn snapshot(&mut self, core: &Core) -> Result<(), LogError> {
        self.inner.snapshot(core)
    }
    fn recover(&mut self) -> Result<Recovery, LogError> {
        self.inner.recover()
    }
}

/// (term, vote, role, events replayed) right after recovery.
type Recovered = (u64, Option<NodeId>, Role, usize);

#[derive(Clone, Default)]
struct Seen {
    notices: Arc<Mutex<Vec<Notice>>>,
    roles: Arc<Mutex<Vec<Role>>>,
    rejected: Arc<Mutex<Vec<String>>>,
    recovered: Arc<Mutex<Vec<Recovered>>>,
}

impl Observer for Seen {
    fn on_recovered(&mut self, core: &Core, replayed: usize) {
        self.recovered.lock().unwrap().push((
            core.term(),
            core.voted_for().cloned(),
            core.role(),
            replayed,
        ));
    }
    fn on_role_changed(&mut self, _: u64, role: Role, _: u64, _: Option<u64>) {
        self.roles.lock().unwrap().push(role);
    }
    fn on_notice(&mut self, _: u64, notice: &Notice) {
        self.notices.lock().unwrap().push(notice.clone());
    }
    fn on_rejected(&mut self, _: Option<&NodeId>, reason: &str) {
        self.rejected.lock().unwrap().push(reason.to_owned());
    }
}

fn config() -> Config {
    Config {
        heartbeat_interval_ms: 1_000,
        election_timeout_min_ms: 3_000,
        election_timeout_max_ms: 4_500,
        discovery_timeout_ms: 1_500,
        bootstrap_expect: 1,
        ..Config::default()
    }
}

fn voter(id: &str) -> Core {
    Core::new(id.into(), config(), vec![ADMIN_ELECTION.to_owned()], 7).unwrap()
}

fn worker_up(id: &str) -> TransportEvent {
    TransportEvent::PeerUp {
        peer: id.into(),
        info: PeerInfo {
            capabilities: vec!["docker".to_owned()].into(),
            ..PeerInfo::default()
        },
    }
}

struct Node {
    runtime: Runtime<FakeTransport, JournalLog, TokioClock, Seen>,
    inbox: mpsc::UnboundedSender<TransportEvent>,
    journal: Journal,
    sent: Arc<Mutex<Vec<Command>>>,
    seen: Seen,
}

fn node(core: Core, log: &MemoryLog, runtime_config: RuntimeConfig) -> Node {
    let (inbox, rx) = mpsc::unbounded_channel();
    let journal = Journal::default();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let seen = Seen::default();
    let transport = FakeTransport {
        inbox: rx,
        journal: journal.clone(),
        sent: sent.clone(),
    };
    let log = JournalLog {
        inner: log.clone(),
        journal: journal.clone(),
    };
    let runtime = Runtime::new(core, transport, log, TokioClock::new(), seen.clone())
        .with_config(runtime_config);
    Node {
        runtime,
        inbox,
        journal,
        sent,
        seen,
    }
}

fn became_admin(notices: &[Notice]) -> Option<u64> {
    notices.iter().find_map(|n| match n {
        Notice::BecameAdmin { term, .. } => Some(*term),
        _ => None,
    })
}

/// docs/design.md §4.3 (bootstrap): a lone voter with `bootstrap_expect = 1` finds no admin,
/// stands, and wins with its own vote.
#[tokio::test(start_paused = true)]
async fn single_node_elects_itself() {
    let log = MemoryLog::new();
    let n = node(voter("a"), &log, RuntimeConfig::default());
    let core = n
        .runtime
        .run(tokio::time::sleep(Duration::from_secs(60)))
        .await
        .unwrap();
    let notices = n.seen.notices.lock().unwrap().clone();
    let term = became_admin(&notices).expect("a became admin");
    assert_eq!(term, 1);
    assert!(notices.contains(&Notice::Voted {
        term: 1,
        candidate: "a".into()
    }));
    assert_eq!(core.term(), 1);
    assert!(n.seen.roles.lock().unwrap().contains(&Role::Admin));
    // Every input is in the log, `Started` first and `Shutdown` last.
    let events = log.events();
    assert_eq!(events.first().map(|e| &e.1), Some(&Event::Started));
    assert_eq!(events.last().map(|e| &e.1), Some(&Event::Shutdown));
    assert!(
        events.windows(2).all(|w| w[0].0 <= w[1].0),
        "times never decrease"
    );
}

/// docs/design.md §3 (event sourcing): each batch's events are appended and synced before any of its
/// commands leaves.
#[tokio::test(start_paused = true)]
async fn events_are_durable_before_commands_are_carried_out() {
    let log = MemoryLog::new();
    let n = node(voter("a"), &log, RuntimeConfig::default());
    n.inbox.send(worker_up("w1")).unwrap();
    n.inbox.send(worker_up("w2")).unwrap();
    let _core = n
        .runtime
        .run(tokio::time::sleep(Duration::from_secs(30)))
        .await
        .unwrap();
    let journal = n.journal.lock().unwrap().clone();
    let mut unsynced = 0;
    let mut outputs = 0;
    for entry in &journal {
        match entry.as_str() {
            "append" => unsynced += 1,
            "sync" => unsynced = 0,
            _ => {
                assert_eq!(
                    unsynced, 0,
                    "{entry} left before its event was synced: {journal:?}"
                );
                outputs += 1;
            }
        }
    }
    assert!(journal.iter().any(|e| e == "send whoami"), "{journal:?}");
    assert!(
        journal.iter().any(|e| e == "broadcast heartbeat"),
        "{journal:?}"
    );
    assert!(outputs > 2);
    // The two PeerUps were ready together: one batch, one sync.
    let first_sync = journal.iter().position(|e| e == "sync").unwrap();
    // Started, and the signature of its electorate it asked for, answered in the same batch.
    assert_eq!(
        &journal[..first_sync],
        &["append"; 2],
        "Started and its signature alone at first"
    );
    let second: Vec<&String> = journal[first_sync + 1..]
        .iter()
        .take_while(|e| *e != "sync")
        .collect();
    assert_eq!(second, vec!["append", "append"], "{journal:?}");
    assert!(n.sent.lock().unwrap().len() >= 2);
}

/// docs/design.md §3 (recovery): after a crash, snapshot + replayed tail restore term and vote; the role
/// is follower again; the restarted node continues after the last logged time.
#[tokio::test(start_paused = true)]
async fn recovery_replays_term_and_vote() {
    let log = MemoryLog::new();
    // Snapshot often, so recovery uses a snapshot and a tail.
    let tuning = RuntimeConfig {
        snapshot_every_events: 3,
        ..RuntimeConfig::default()
    };
    let n = node(voter("a"), &log, tuning.clone());
    n.inbox.send(worker_up("w1")).unwrap();
    let crashed = tokio::time::timeout(
        Duration::from_secs(20),
        n.runtime.run(std::future::pending()),
    )
    .await;
    assert!(crashed.is_err(), "the run was cut off, not finished");
    let term = became_admin(&n.seen.notices.lock().unwrap()).expect("elected before the crash");
    let (_, snapshots) = log.counts();
    assert!(snapshots > 0, "a snapshot was taken");
    let last_logged = log.events().last().unwrap().0;

    let again = node(voter("a"), &log, tuning);
    let core = again.runtime.run(std::future::ready(())).await.unwrap();
    let recovered = again.seen.recovered.lock().unwrap().clone();
    assert_eq!(recovered.len(), 1);
    let (rec_term, rec_vote, rec_role, _) = recovered[0].clone();
    assert_eq!(rec_term, term);
    assert_eq!(rec_vote, Some("a".into()));
    // Replay folds in the log; the restart is the `Started` that follows it.
    assert_eq!(rec_role, Role::Admin, "state before the restart event");
    assert_eq!(core.role(), Role::Follower, "a restart forgets the role");
    assert_eq!(core.term(), term);
    assert_eq!(core.voted_for(), Some(&"a".into()));
    let events = log.events();
    let restart_at = events
        .iter()
        .rev()
        .find(|e| e.1 == Event::Started)
        .unwrap()
        .0;
    assert!(restart_at > last_logged, "{restart_at} after {last_logged}");
}

/// docs/design.md §4.5 (graceful shutdown): an admin gives its lease up and tells the cluster.
#[tokio::test(start_paused = true)]
async fn shutdown_of_an_admin_broadcasts_step_down() {
    let log = MemoryLog::new();
    let n = node(voter("a"), &log, RuntimeConfig::default());
    n.inbox.send(worker_up("w1")).unwrap();
    let core = n
        .runtime
        .run(tokio::time::sleep(Duration::from_secs(30)))
        .await
        .unwrap();
    let term = became_admin(&n.seen.notices.lock().unwrap()).unwrap();
    assert_eq!(core.role(), Role::Follower);
    let sent = n.sent.lock().unwrap().clone();
    assert_eq!(
        sent.last(),
        Some(&Command::Broadcast {
            msg: Message::StepDown {
                term,
                successor: None
            }
        })
    );
    assert!(n
        .seen
        .notices
        .lock()
        .unwrap()
        .contains(&Notice::SteppedDown {
            term,
            reason: StepDownReason::Shutdown
        }));
}

/// docs/design.md §4.1 (protocol): undecodable input is counted and dropped; it never reaches the core
/// or the log.
#[tokio::test(start_paused = true)]
async fn rejected_input_is_counted_not_logged() {
    let log = MemoryLog::new();
    let n = node(voter("a"), &log, RuntimeConfig::default());
    n.inbox
        .send(TransportEvent::Rejected {
            from: Some("x".into()),
            reason: "malformed",
        })
        .unwrap();
    let _ = n
        .runtime
        .run(tokio::time::sleep(Duration::from_millis(100)))
        .await
        .unwrap();
    assert_eq!(*n.seen.rejected.lock().unwrap(), vec!["malformed"]);
    let events: Vec<Event> = log.events().into_iter().map(|e| e.1).collect();
    // Its own start, signature and timers (a lone voter stands at once), never the input.
    assert!(
        matches!(events.as_slice(), [Event::Started, .., Event::Shutdown])
            && !events.iter().any(|e| matches!(e, Event::Message { .. })),
        "{events:?}"
    );
}

/// Operator inputs (issue 10, `POST /members`) are logged like network input and stepped: a
/// lone admin refuses to remove its only voter, and the notice carries the request id.
#[tokio::test(start_paused = true)]
async fn operator_inputs_are_logged_and_answered() {
    let log = MemoryLog::new();
    let (tx, rx) = mpsc::channel(4);
    let mut n = node(voter("a"), &log, RuntimeConfig::default());
    n.runtime = n.runtime.with_operator_inputs(rx);
    let change = chorus_core::MemberChange::Remove { node: "a".into() };
    let ask = Event::ChangeMembers {
        change: change.clone(),
        request: 42,
    };
    let sender = tokio::spawn({
        let ask = ask.clone();
        async move {
            // After the lone voter has elected itself.
            tokio::time::sleep(Duration::from_secs(20)).await;
            tx.send(ask).await.unwrap();
            // Dropping the sender leaves the node running.
        }
    });
    let _core = n
        .runtime
        .run(tokio::time::sleep(Duration::from_secs(30)))
        .await
        .unwrap();
    sender.await.unwrap();
    assert!(log.events().iter().any(|(_, e)| *e == ask), "logged");
    let notices = n.seen.notices.lock().unwrap().clone();
    assert!(notices.contains(&Notice::MembershipChange {
        change,
        outcome: chorus_core::ChangeOutcome::Refused {
            reason: chorus_core::ChangeRefusal::LastVoter
        },
        request: 42,
    }));
    assert_eq!(log.events().last().map(|e| &e.1), Some(&Event::Shutdown));
}

/// A sandbox that ends every run at once with exit code 0 and the command as stdout, and
/// journals what it was asked.
#[derive(Default)]
struct EchoSandboxes {
    ended: std::collections::VecDeque<Event>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl TaskSandboxes for EchoSandboxes {
    async fn recovered(&mut self, core: &Core) {
        let running = core.running_tasks().len();
        self.asked
            .lock()
            .unwrap()
            .push(format!("recovered with {running} running"));
    }
    fn start(&mut self, task: &chorus_core::TaskId, attempt: u32, spec: &chorus_core::SharedSpec) {
        self.asked.lock().unwrap().push(format!("start {task}"));
        self.ended.push_back(Event::SandboxExited {
            task: task.clone(),
            attempt,
            exit: chorus_core::SandboxExit {
                exit_code: Some(0),
                stdout: spec.command.join(" "),
                ..Default::default()
            },
        });
    }
    fn stop(&mut self, task: &chorus_core::TaskId, _attempt: u32) {
        self.asked.lock().unwrap().push(format!("stop {task}"));
    }
    async fn next_exit(&mut self) -> Event {
        match self.ended.pop_front() {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }
}

/// docs/design.md §4.7 (tasks): the loop carries out `StartSandbox` through its sandboxes and steps the
/// run's end as a logged event, so a lone admin with a slot runs a submitted task to its
/// result, and a restarted node's log replays to the same result.
#[tokio::test(start_paused = true)]
async fn a_task_runs_through_the_sandbox_adapter_and_its_end_is_logged() {
    let log = MemoryLog::new();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let sandboxes = EchoSandboxes {
        asked: asked.clone(),
        ..Default::default()
    };
    let (ops, inputs) = mpsc::channel(8);
    let n = node(voter("a"), &log, RuntimeConfig::default());
    let runtime = n
        .runtime
        .with_start_events(vec![Event::ResourcesSampled {
            resources: chorus_core::Resources {
                task_slots: 1,
                ..Default::default()
            },
        }])
        .with_operator_inputs(inputs)
        .with_sandboxes(sandboxes);
    let spec = chorus_core::TaskSpec {
        image: "img".into(),
        command: vec!["echo".into(), "hi".into()],
        timeout_ms: 1_000,
        ..Default::default()
    };
    // Submitted once the node is admin (elected within the discovery and election timeouts).
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(20)).await;
        ops.send(Event::SubmitTask {
            spec: spec.into(),
            key: None,
            owner: None,
            request: 1,
        })
        .await
        .unwrap();
        std::future::pending::<()>().await;
    });
    let core = runtime
        .run(tokio::time::sleep(Duration::from_secs(30)))
        .await
        .unwrap();
    let (task, owned) = core
        .owned_tasks()
        .iter()
        .next()
        .expect("a task was accepted");
    let result = owned.result.as_ref().expect("its result is in");
    assert_eq!(result.status, chorus_core::TaskStatus::Succeeded);
    assert_eq!(result.stdout, "echo hi");
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "recovered with 0 running".to_owned(),
            format!("start {task}")
        ]
    );
    assert!(core.unacknowledged_results().is_empty(), "acknowledged");
    let logged_exit = log
        .events()
        .iter()
        .any(|(_, e)| matches!(e, Event::SandboxExited { .. }));
    assert!(logged_exit, "the run's end is in the log");
    // Replaying the log gives the same task state.
    let replayed = restore(log.clone().recover().unwrap(), voter("a")).unwrap();
    assert_eq!(replayed.owned_tasks(), core.owned_tasks());
}
