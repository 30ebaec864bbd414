//! The runtime loop: recover from the event log, then feed transport inputs and timer firings
//! into the core, making each batch durable before carrying out its commands.

use std::future::Future;
use std::time::Instant;

use chorus_core::{Command, Core, Event, NodeId, Timer};
use futures_util::FutureExt;

use super::{
    Clock, EventLog, LogError, NoSandboxes, Observer, Recovery, StepInfo, TaskSandboxes, Transport,
    TransportEvent,
};

/// Tuning of the loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Take a state snapshot after this many logged events (bounds replay after a crash).
    pub snapshot_every_events: u64,
    /// At most this many transport inputs are taken into one batch (one `sync` each batch).
    pub max_batch: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            snapshot_every_events: 1_024,
            max_batch: 256,
        }
    }
}

/// Why the loop stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The event log failed; the node must not go on acting on inputs it cannot make durable.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Stepping an event panicked (a bug in the core). The event was not made durable, so a
    /// restart replays the log without it and comes back with its term and vote intact.
    #[error(
        "stepping {event} failed: {message}; the event was not logged{}, the node stops",
        position.map(|p| format!(" (it would have been event {p})")).unwrap_or_default()
    )]
    StepFailed {
        /// The event, as JSON.
        event: String,
        /// The log position it would have taken.
        position: Option<u64>,
        /// The panic message.
        message: String,
    },
    /// Replaying a logged event panicked (a log written by a build with a bug this one shares).
    #[error("replaying logged event {index} after the snapshot ({event}) failed: {message}")]
    ReplayFailed {
        /// Index of the event in the replayed tail (0 = first after the snapshot).
        index: usize,
        /// The event, as JSON.
        event: String,
        /// The panic message.
        message: String,
    },
    /// The log's snapshot is another node's state.
    #[error("the event log holds node {found}'s state, not {expected}'s")]
    WrongNode {
        /// The node this runtime runs.
        expected: NodeId,
        /// The node the snapshot belongs to.
        found: NodeId,
    },
}

/// One node's runtime: the core and the adapters it is carried out through.
///
/// The same loop runs in production (libp2p, sled) and in the turmoil simulator (UDP over
/// turmoil, [`MemoryLog`](super::MemoryLog)); only the trait implementations differ. It is
/// deterministic given its inputs: `biased` selection, no hash-order iteration, no randomness.
pub struct Runtime<T, L, C, O, S = NoSandboxes> {
    core: Core,
    transport: T,
    sandboxes: S,
    log: L,
    clock: C,
    observer: O,
    config: RuntimeConfig,
    start_events: Vec<Event>,
    /// Armed timers, in core time, indexed by `Timer as usize`.
    timers: [Option<u64>; Timer::ALL.len()],
    /// Added to the clock so core time never goes backwards across restarts.
    offset_ms: u64,
    since_snapshot: u64,
    /// Inputs from this node's operator (the HTTP API): logged and stepped like the rest.
    operator: Option<tokio::sync::mpsc::Receiver<Event>>,
}

/// What one select round produced.
enum Input {
    Shutdown,
    Transport(TransportEvent),
    Operator(Option<Event>),
    Sandbox(Event),
    Timer,
}

impl<T: Transport, L: EventLog, C: Clock, O: Observer> Runtime<T, L, C, O> {
    /// A runtime for `core`, a node that has never run (it is replaced by the log's snapshot, if
    /// the log holds one, when [`Runtime::run`] recovers). It runs no sandboxes until
    /// [`Runtime::with_sandboxes`] gives it some.
    pub fn new(core: Core, transport: T, log: L, clock: C, observer: O) -> Self {
        Runtime {
            core,
            transport,
            sandboxes: NoSandboxes::default(),
            log,
            clock,
            observer,
            config: RuntimeConfig::default(),
            start_events: Vec::new(),
            timers: [None; Timer::ALL.len()],
            offset_ms: 0,
            since_snapshot: 0,
            operator: None,
        }
    }

    /// Runs tasks through `sandboxes`.
    pub fn with_sandboxes<S2: TaskSandboxes>(self, sandboxes: S2) -> Runtime<T, L, C, O, S2> {
        Runtime {
            core: self.core,
            transport: self.transport,
            sandboxes,
            log: self.log,
            clock: self.clock,
            observer: self.observer,
            config: self.config,
            start_events: self.start_events,
            timers: self.timers,
            offset_ms: self.offset_ms,
            since_snapshot: self.since_snapshot,
            operator: self.operator,
        }
    }
}

impl<T: Transport, L: EventLog, C: Clock, O: Observer, S: TaskSandboxes> Runtime<T, L, C, O, S> {
    /// Operator requests (e.g. [`Event::ChangeMembers`] from the HTTP API) arrive on `inputs`;
    /// each is logged and stepped like a network input.
    pub fn with_operator_inputs(mut self, inputs: tokio::sync::mpsc::Receiver<Event>) -> Self {
        self.operator = Some(inputs);
        self
    }

    /// Replaces the tuning.
    pub fn with_config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Inputs the node knows about itself at start (e.g. a first
    /// [`Event::ResourcesSampled`]): logged and stepped right after [`Event::Started`], in the
    /// same batch, before any transport input.
    pub fn with_start_events(mut self, events: Vec<Event>) -> Self {
        self.start_events = events;
        self
    }

    /// Runs until `shutdown` completes, then steps [`Event::Shutdown`] (an admin steps down and
    /// says so), carries out its commands, snapshots, and returns the final state.
    ///
    /// Dropping the future is a crash: whatever was synced survives in the log.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Core, RuntimeError> {
        self.recover()?;
        self.sandboxes.recovered(&self.core).await;
        let mut first = vec![Event::Started];
        first.append(&mut self.start_events);
        let now = self.now_ms();
        self.commit(now, first)?;

        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let deadline = self
                .next_timer()
                .map(|(at, _)| at.saturating_sub(self.offset_ms));
            // Biased: tokio's branch RNG is not seeded, and a simulation must replay exactly.
            // Shutdown first, so a flood of input cannot delay it; a timer loses to input, but
            // due timers are collected after every wake-up below, so it is never starved.
            let input = tokio::select! {
                biased;
                () = &mut shutdown => Input::Shutdown,
                ev = self.transport.next() => Input::Transport(ev),
                ev = next_operator_input(&mut self.operator) => Input::Operator(ev),
                ev = self.sandboxes.next_exit() => Input::Sandbox(ev),
                () = self.clock.sleep_until(deadline.unwrap_or(0)), if deadline.is_some() => {
                    Input::Timer
                }
            };
            let mut batch = Vec::new();
            match input {
                Input::Shutdown => return self.shut_down(),
                Input::Transport(ev) => self.admit(ev, &mut batch),
                Input::Operator(Some(ev)) | Input::Sandbox(ev) => batch.push(ev),
                // The API went away: no more operator input, the node runs on.
                Input::Operator(None) => self.operator = None,
                Input::Timer => {}
            }
            // Take whatever else is ready now, so one sync covers it all.
            for _ in 1..self.config.max_batch {
                match self.transport.next().now_or_never() {
                    Some(ev) => self.admit(ev, &mut batch),
                    None => break,
                }
            }
            while batch.len() < self.config.max_batch {
                match self.sandboxes.next_exit().now_or_never() {
                    Some(ev) => batch.push(ev),
                    None => break,
                }
            }
            let now = self.now_ms();
            self.take_due_timers(now, &mut batch);
            if !batch.is_empty() {
                self.commit(now, batch)?;
            }
        }
    }

    /// Restores the state from the log (see [`restore`]); continues the clock after it.
    fn recover(&mut self) -> Result<(), RuntimeError> {
        let recovery = self.log.recover()?;
        if recovery.is_empty() {
            self.offset_ms = 0;
            self.observer.on_recovered(&self.core, 0);
            return Ok(());
        }
        let replayed = recovery.tail.len();
        self.core = restore(recovery, self.core.clone())?;
        // Continue strictly after the last logged time, whatever the clock restarted from.
        self.offset_ms = (self.core.now_ms() + 1).saturating_sub(self.clock.now_ms());
        self.observer.on_recovered(&self.core, replayed);
        Ok(())
    }

    /// Core time: the clock plus the restart offset.
    fn now_ms(&self) -> u64 {
        self.clock.now_ms() + self.offset_ms
    }

    fn next_timer(&self) -> Option<(u64, Timer)> {
        Timer::ALL
            .iter()
            .filter_map(|t| self.timers[*t as usize].map(|at| (at, *t)))
            .min()
    }

    fn take_due_timers(&mut self, now: u64, batch: &mut Vec<Event>) {
        while let Some((at, timer)) = self.next_timer() {
            if at > now {
                break;
            }
            self.timers[timer as usize] = None;
            batch.push(Event::TimerFired { timer });
        }
    }

    /// Turns a transport input into a core input; rejected bytes stop here.
    fn admit(&mut self, ev: TransportEvent, batch: &mut Vec<Event>) {
        let event = match ev {
            TransportEvent::Message { from, msg } => Event::Message { from, msg },
            TransportEvent::PeerUp { peer, info } => Event::peer_up(peer, info),
            TransportEvent::PeerDown { peer } => Event::PeerDown { peer },
            TransportEvent::Rejected { from, reason } => {
                self.observer.on_rejected(from.as_ref(), reason);
                return;
            }
        };
        batch.push(event);
    }

    /// Steps and logs every event of the batch, syncs once, then carries out the commands in
    /// step order.
    ///
    /// Each event is stepped before it is appended: commands wait for the sync either way, and
    /// an event whose step fails never reaches the log, so it cannot fail every restart again
    /// (the node would be stuck, and wiping its data dir would forget its vote).
    fn commit(&mut self, now: u64, events: Vec<Event>) -> Result<(), RuntimeError> {
        let mut steps = Vec::with_capacity(events.len());
        let mut events = std::collections::VecDeque::from(events);
        while let Some(event) = events.pop_front() {
            let mut commands = Vec::new();
            let started = Instant::now();
            if let Err(message) = step_guarded(&mut self.core, now, &event, &mut commands) {
                // The core's state may be half-changed: keep what is already logged, stop here.
                self.log.sync()?;
                return Err(RuntimeError::StepFailed {
                    event: describe(&event),
                    position: self.log.next_position(),
                    message,
                });
            }
            let latency = started.elapsed();
            self.log.append(now, &event)?;
            // The core holds no key: its request for a signature is answered at once, by the
            // next event stepped and logged (so a replay needs no key).
            for command in commands.iter().rev() {
                if let Command::Sign { digest } = command {
                    let signature = self.transport.sign(self.core.id(), digest);
                    events.push_front(Event::Signed {
                        digest: *digest,
                        signature,
                    });
                }
            }
            steps.push((event, commands, latency));
        }
        self.log.sync()?;
        for (event, commands, latency) in &steps {
            self.observer.on_step(&StepInfo {
                now_ms: now,
                offset_ms: self.offset_ms,
                event,
                commands,
                latency: *latency,
            });
            for command in commands {
                self.carry_out(now, command);
            }
        }
        self.since_snapshot += steps.len() as u64;
        if self.since_snapshot >= self.config.snapshot_every_events {
            self.log.snapshot(&self.core)?;
            self.since_snapshot = 0;
        }
        Ok(())
    }

    fn carry_out(&mut self, now: u64, command: &Command) {
        match command {
            Command::Send { to, msg } => self.transport.send(to, msg),
            Command::Broadcast { msg } => self.transport.broadcast(msg),
            Command::SetTimer { timer, at_ms } => self.timers[*timer as usize] = Some(*at_ms),
            Command::CancelTimer { timer } => self.timers[*timer as usize] = None,
            Command::RoleChanged {
                role,
                term,
                lease_until_ms,
            } => self
                .observer
                .on_role_changed(now, *role, *term, *lease_until_ms),
            Command::Notice(notice) => self.observer.on_notice(now, notice),
            Command::StartSandbox {
                task,
                attempt,
                spec,
            } => self.sandboxes.start(task, *attempt, spec),
            Command::StopSandbox { task, attempt } => self.sandboxes.stop(task, *attempt),
            Command::Sign { .. } => {} // answered in `commit`
        }
    }

    fn shut_down(mut self) -> Result<Core, RuntimeError> {
        let now = self.now_ms();
        self.commit(now, vec![Event::Shutdown])?;
        self.log.snapshot(&self.core)?;
        Ok(self.core)
    }
}

/// A node's state from what its log recovered: the latest snapshot (or `fresh`, the node that
/// has never run), then the tail replayed through `Core::step` with its commands discarded
/// (they were carried out before the crash, or never will be). Refuses another node's
/// snapshot, a time that goes backwards, and an event whose step panics.
pub fn restore(recovery: Recovery, fresh: Core) -> Result<Core, RuntimeError> {
    let mut core = fresh;
    if let Some(bytes) = &recovery.snapshot {
        let restored = Core::restore(bytes)
            .map_err(|e| LogError::Corrupt(format!("snapshot does not restore: {e}")))?;
        if restored.id() != core.id() {
            return Err(RuntimeError::WrongNode {
                expected: core.id().clone(),
                found: restored.id().clone(),
            });
        }
        core = restored;
    }
    let mut discard = Vec::new();
    for (index, (now_ms, event)) in recovery.tail.into_iter().enumerate() {
        if now_ms < core.now_ms() {
            return Err(LogError::Corrupt(format!(
                "logged time went backwards: {now_ms} after {}",
                core.now_ms()
            ))
            .into());
        }
        if let Err(message) = step_guarded(&mut core, now_ms, &event, &mut discard) {
            return Err(RuntimeError::ReplayFailed {
                index,
                event: describe(&event),
                message,
            });
        }
        discard.clear();
    }
    Ok(core)
}

/// The next operator input; pending for ever when there is no operator channel.
async fn next_operator_input(
    inputs: &mut Option<tokio::sync::mpsc::Receiver<Event>>,
) -> Option<Event> {
    match inputs {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Steps `event`, turning a panic (a bug in the core) into an error with the panic's message.
fn step_guarded(
    core: &mut Core,
    now: u64,
    event: &Event,
    out: &mut Vec<Command>,
) -> Result<(), String> {
    // The core is not used again after a failed step: the caller stops the node.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        core.step(now, event.clone(), out)
    }))
    .map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic without a message".to_owned())
    })
}

fn describe(event: &Event) -> String {
    serde_json::to_string(event).unwrap_or_else(|_| format!("{event:?}"))
}
