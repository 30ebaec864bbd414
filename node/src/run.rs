//! `chorus run`: wires the sled event log, the libp2p transport, the tokio clock and the node's
//! observer into the shared runtime loop, serves the HTTP API, and shuts down gracefully on
//! SIGINT, SIGTERM or SIGHUP (an admin steps down and says so, the log is flushed, exit 0).
//!
//! SIGHUP is a graceful stop, not a reload: the settings that matter (timings, electorate,
//! addresses, keys) cannot change under a running node, and a supervisor restarts it with the
//! new configuration.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use chorus_core::{
    Core, Event, Message, NodeId, PeerInfo, Resources, Role, SharedSpec, TaskId, Timer,
    ADMIN_ELECTION,
};
use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};
use chorus_io::runtime::{
    NoSandboxes, Runtime, RuntimeConfig, TaskSandboxes, TokioClock, Transport, TransportEvent,
};
use chorus_io::sandbox::docker::DockerProvider;
use chorus_io::sandbox::repo::RepoRoots;
use chorus_io::sandbox::tasks::{TaskRunner, TaskRunnerConfig};
use chorus_io::transport::libp2p::node_id as peer_node_id;
use chorus_io::transport::{load_or_create_identity, Libp2pConfig, Libp2pTransport};

use crate::config::Resolved;
use crate::observe::{NodeObserver, SharedState};

/// How long the transport gets to send the last messages (a step-down) before it is stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

/// The identity key file inside the data directory.
pub const IDENTITY_FILE: &str = "identity.key";
/// The event log directory inside the data directory.
pub const LOG_DIR: &str = "log";

/// How often a node without an admin says what it is waiting for.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Runs the node until SIGINT/SIGTERM/SIGHUP. Errors are reported by the caller as one line.
pub async fn run(resolved: Resolved) -> anyhow::Result<()> {
    let Resolved {
        config,
        listen,
        bootstrap,
        http,
        psk,
        warnings,
        accept_log_reset,
        exit_with_parent,
    } = resolved;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    std::fs::create_dir_all(&config.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            config.data_dir.display()
        )
    })?;
    let identity_path = config.data_dir.join(IDENTITY_FILE);
    let log_path = config.data_dir.join(LOG_DIR);
    let identity_kept = identity_path.exists();
    let keypair = load_or_create_identity(&identity_path)?;
    let node_id: NodeId = peer_node_id(&keypair.public().to_peer_id());
    if identity_kept && !log_exists(&log_path) {
        if !accept_log_reset {
            anyhow::bail!(
                "{} holds the identity of node {node_id} but no event log ({} is missing or \
                 empty): the log holds this node's term and vote, and starting without it could \
                 make the node vote twice in a term. Restore the log, or delete {} to join as a \
                 new node, or pass --accept-log-reset once the cluster's term has moved past any \
                 vote this node may have cast",
                config.data_dir.display(),
                log_path.display(),
                identity_path.display(),
            );
        }
        tracing::warn!(
            node_id = %node_id,
            "--accept-log-reset: starting with a new, empty event log under a kept identity \
             (term 0, no vote)"
        );
    }

    // `sandbox` and `repo:NAME` join the configured capabilities when the node runs tasks.
    let capabilities = config.advertised_capabilities();
    let slots = config.task_slots();
    let meta = LogMeta::new(
        node_id.clone(),
        config.protocol.clone(),
        capabilities.clone(),
        config.cluster_seed,
    );
    let log = SledLog::open(&log_path, meta, SledLogOptions::default())?;
    if log.meta().config != config.protocol {
        tracing::info!(
            "the protocol settings differ from those the data directory was created with; the \
             new ones are logged as a config change and apply from now on"
        );
    }
    // Reaped once the data directory's log is open (and locked: no other process of this node
    // id runs) and before the node says it started, so what it reports is the cleaned state.
    if config.sandbox.docker {
        let removed = crate::sandbox::reap_on_start(node_id.as_str()).await?;
        tracing::info!(
            node_id = %node_id,
            removed,
            "Docker sandbox: removed {removed} sandbox(es) that earlier runs of this node left \
             behind (owner gone or deadline passed)"
        );
    }
    let core = Core::new(
        node_id.clone(),
        config.protocol.clone(),
        capabilities.clone(),
        config.cluster_seed,
    )?;
    let sandboxes = if slots > 0 {
        NodeSandboxes::Docker(Box::new(task_runner(&config, node_id.as_str()).await?))
    } else {
        NodeSandboxes::Off(NoSandboxes::default())
    };
    let sandboxes_handle = match &sandboxes {
        NodeSandboxes::Docker(runner) => Some(runner.shutdown_handle()),
        NodeSandboxes::Off(_) => None,
    };

    let mut transport_config = Libp2pConfig::new(config.protocol.cluster_id.clone());
    let loopback_only = listen.iter().all(is_loopback);
    transport_config.listen = listen;
    transport_config.bootstrap = bootstrap;
    transport_config.mdns = config.mdns;
    transport_config.psk = psk;
    let mut resources = sample_resources();
    resources.task_slots = slots;
    transport_config.info = PeerInfo {
        capabilities: capabilities.clone().into(),
        uptime_s: 0,
        resources,
    };
    // The HTTP API first: its bound address is advertised to peers.
    let shared = SharedState::default();
    let (http_addr, server) = crate::http::serve(http, shared.clone()).await?;
    transport_config.http = Some(http_addr.to_string());
    let (transport, addrs) = Libp2pTransport::start(keypair, transport_config).await?;
    let listen_addrs: Vec<String> = addrs.iter().map(|a| format!("{a}/p2p/{node_id}")).collect();
    {
        let mut s = shared.lock();
        s.started_at = Some(std::time::Instant::now());
        s.node_id = node_id.to_string();
        s.listen_addrs = listen_addrs.clone();
        s.capabilities = capabilities.clone();
        s.transport_stats = Some(transport.stats());
        if let NodeSandboxes::Docker(runner) = &sandboxes {
            s.tasks.runner = Some(runner.stats());
        }
    }
    tokio::spawn(server);
    // Before the start line: whoever reads it may stop the node at once.
    let signals = stop_signals();
    tracing::info!(
        node_id = %node_id,
        data_dir = %config.data_dir.display(),
        http = %http_addr,
        listen = ?listen_addrs,
        mdns = config.mdns,
        "chorus node started"
    );
    if loopback_only {
        tracing::info!(
            "listening on loopback only: other machines cannot connect (a local node); pass \
             --listen /ip4/0.0.0.0/tcp/7946 to join a network"
        );
    }
    let expect = config.protocol.bootstrap_expect;
    if config.capabilities.iter().any(|c| c == ADMIN_ELECTION) {
        tracing::info!(
            capabilities = ?capabilities,
            bootstrap_expect = expect,
            "this node is a voter (capability admin_election): it votes and may become admin; \
             the first election waits for {expect} voter(s)"
        );
    } else {
        tracing::info!(
            capabilities = ?capabilities,
            "this node is a worker, not a voter (no capability admin_election): it never \
             votes nor becomes admin"
        );
    }
    tokio::spawn(progress(shared.clone()));

    let clock = TokioClock::new();
    let clock_origin = crate::hostclock::HostClockOrigin::now();
    let observer = NodeObserver::new(
        shared.clone(),
        log.notice_recorder(),
        log.next_seq(),
        clock_origin,
    );
    let slot = Arc::new(Mutex::new(None));
    let transport = Handoff {
        inner: Some(transport),
        slot: slot.clone(),
        #[cfg(feature = "fault-injection")]
        forged: crate::fault::ForgedAcks::from_env(config.protocol.election_timeout_min_ms),
    };
    // Operator requests (`POST /members`) reach the loop here; a few may queue, more are
    // refused as busy rather than piling up.
    let (operator_tx, operator_rx) = tokio::sync::mpsc::channel(16);
    shared.lock().operator = Some(crate::members::OperatorInputs::new(
        operator_tx,
        crate::members::first_request_id(),
    ));
    if slots > 0 {
        tracing::info!(
            slots,
            repos = ?config.repos.keys().collect::<Vec<_>>(),
            "this node runs tasks in Docker sandboxes ({slots} at once)"
        );
    } else {
        tracing::info!(
            "this node runs no tasks (no task slots: pass --docker, or set `[tasks] slots`); \
             it still accepts submissions"
        );
    }
    let runtime = Runtime::new(core, transport, log, clock, observer)
        .with_sandboxes(sandboxes)
        .with_config(RuntimeConfig {
            snapshot_every_events: config.snapshot_every_events,
            ..RuntimeConfig::default()
        })
        // The configured settings are logged at every start: the core ignores them when they
        // equal the recovered ones, and otherwise a changed timing takes effect (and replays).
        .with_start_events(vec![
            Event::ResourcesSampled { resources },
            Event::ConfigChanged {
                config: config.protocol.clone(),
            },
            // As the settings: a restored core would otherwise keep the capabilities of the
            // start it was snapshot in (a repository added since, a voter made a worker).
            Event::CapabilitiesChanged {
                capabilities: capabilities.clone(),
            },
        ])
        .with_operator_inputs(operator_rx);
    let pools = sandboxes_handle.as_ref();
    let result = runtime
        .run(shutdown_signal(signals, shared.clone(), exit_with_parent))
        .await;
    if let Some(pools) = pools {
        // The warm sandboxes go with the node; a run still going when it stopped is reaped at
        // the next start (its owner, this process, is gone by then).
        let n = pools.shutdown().await;
        tracing::info!("removed the sandboxes of {n} warm pool(s)");
    }
    // The runtime handed the transport back when it dropped it; give the last messages (a
    // step-down broadcast) a moment to leave, then close every connection.
    let transport = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    let core = result?;
    if let Some(transport) = transport {
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        transport.shutdown().await;
    }
    tracing::info!(
        term = core.term(),
        role = %core.role(),
        "chorus node stopped; event log flushed"
    );
    Ok(())
}

/// The Docker-backed task runner of a node with task slots: repositories from `[repos]` (each
/// the only place its mount may come from), warm pools as `[tasks]` says.
async fn task_runner(
    config: &crate::config::NodeConfig,
    node_id: &str,
) -> anyhow::Result<TaskRunner<DockerProvider>> {
    let roots = RepoRoots::new(config.repos.values())
        .context("a repository of `[repos]` cannot be used")?;
    let provider = DockerProvider::connect()
        .await
        .context("tasks run in Docker sandboxes, but the Docker Engine does not answer")?
        .with_repo_roots(roots);
    let mut runner = TaskRunnerConfig::new(node_id);
    runner.repos = config.repos.clone();
    runner.pool_size = config
        .tasks
        .pool_size
        .unwrap_or(crate::config::DEFAULT_POOL_SIZE) as usize;
    runner.warm_images = config.tasks.warm_images.clone();
    Ok(TaskRunner::new(provider, runner))
}

/// The node's sandboxes: Docker when it has task slots, none otherwise.
enum NodeSandboxes {
    Off(NoSandboxes),
    Docker(Box<TaskRunner<DockerProvider>>),
}

impl TaskSandboxes for NodeSandboxes {
    async fn recovered(&mut self, core: &Core) {
        match self {
            NodeSandboxes::Off(s) => s.recovered(core).await,
            NodeSandboxes::Docker(r) => r.recovered(core).await,
        }
    }

    fn start(&mut self, task: &TaskId, attempt: u32, spec: &SharedSpec) {
        match self {
            NodeSandboxes::Off(s) => s.start(task, attempt, spec),
            NodeSandboxes::Docker(r) => r.start(task, attempt, spec),
        }
    }

    fn stop(&mut self, task: &TaskId, attempt: u32) {
        match self {
            NodeSandboxes::Off(s) => s.stop(task, attempt),
            NodeSandboxes::Docker(r) => r.stop(task, attempt),
        }
    }

    async fn next_exit(&mut self) -> Event {
        match self {
            NodeSandboxes::Off(s) => s.next_exit().await,
            NodeSandboxes::Docker(r) => r.next_exit().await,
        }
    }
}

/// Whether the event log directory holds a log (sled's files).
fn log_exists(path: &Path) -> bool {
    path.join("conf").exists() || path.join("db").exists()
}

/// Whether a listen address is on loopback only.
fn is_loopback(addr: &libp2p::Multiaddr) -> bool {
    use libp2p::multiaddr::Protocol;
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => ip.is_loopback(),
        Some(Protocol::Ip6(ip)) => ip.is_loopback(),
        _ => false,
    }
}

/// While no admin is known, says every [`PROGRESS_EVERY`] what the node is waiting for, so a
/// node that sits quietly through its discovery timeout does not look hung.
async fn progress(shared: SharedState) {
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        PROGRESS_EVERY,
    );
    loop {
        tick.tick().await;
        let line = {
            let s = shared.lock();
            if s.shutting_down {
                return;
            }
            match (&s.core, s.now_ms()) {
                (Some(core), Some(now_ms)) => waiting_line(core, &s.capabilities, now_ms),
                _ => None,
            }
        };
        if let Some(line) = line {
            tracing::info!("{line}");
        }
    }
}

/// What a node without an admin waits for, or `None` when it has one.
pub fn waiting_line(core: &Core, capabilities: &[String], now_ms: u64) -> Option<String> {
    if core.admin().is_some() {
        return None;
    }
    let voter = capabilities.iter().any(|c| c == ADMIN_ELECTION);
    if !voter {
        return Some(
            "no admin known yet; waiting to hear of one (this node is not a voter)".into(),
        );
    }
    let secs = |at_ms: u64| at_ms.saturating_sub(now_ms).div_ceil(1_000);
    let deadline = core.next_deadline();
    match core.role() {
        Role::PreCandidate => {
            return Some(format!(
                "no admin known; asking for pre-votes (term {})",
                core.term()
            ))
        }
        Role::Candidate => {
            return Some(format!(
                "no admin known; asking for votes in term {}",
                core.term()
            ))
        }
        _ => {}
    }
    let Some(electorate) = core.electorate() else {
        let expect = core.config().bootstrap_expect;
        let known = 1 + core.peers().eligible_count();
        return Some(format!(
            "waiting for peers: {known} of {expect} voter(s) known (bootstrap_expect {expect}); \
             connected peers: {}",
            core.peers().len()
        ));
    };
    Some(match deadline {
        Some((at, Timer::Election)) => format!(
            "no admin known; electing in {} s (electorate of {})",
            secs(at),
            electorate.len()
        ),
        Some((at, Timer::Discovery)) => format!(
            "no admin known; asking peers (discovery), electing in about {} s or later \
             (electorate of {})",
            secs(at),
            electorate.len()
        ),
        _ => format!(
            "no admin known (electorate of {}, {} peer(s) connected)",
            electorate.len(),
            core.peers().len()
        ),
    })
}

/// With `enabled`, completes once this process's parent has exited (it is re-parented);
/// otherwise never.
async fn parent_gone(enabled: bool) {
    if !enabled {
        return std::future::pending().await;
    }
    let parent = std::os::unix::process::parent_id();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// Completes when `s` delivers a signal; never when there is no stream.
async fn wait(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The signals that stop the node, listened for from the moment this is created: a signal
/// that arrives between "chorus node started" and the runtime's first poll must stop the node
/// gracefully too, not kill it with the default action.
struct StopSignals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

fn stop_signals() -> StopSignals {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for {name}");
            None
        }
    };
    StopSignals {
        int: listen(SignalKind::interrupt(), "SIGINT"),
        term: listen(SignalKind::terminate(), "SIGTERM"),
        hup: listen(SignalKind::hangup(), "SIGHUP"),
    }
}

/// Completes on SIGINT, SIGTERM or SIGHUP (all three stop the node gracefully), or when the
/// parent exits (if asked).
async fn shutdown_signal(mut signals: StopSignals, shared: SharedState, exit_with_parent: bool) {
    tokio::select! {
        () = wait(signals.int.as_mut()) => tracing::info!("SIGINT: shutting down"),
        () = wait(signals.term.as_mut()) => tracing::info!("SIGTERM: shutting down"),
        () = wait(signals.hup.as_mut()) => tracing::info!(
            "SIGHUP: shutting down (SIGHUP stops the node gracefully; it does not reload)"
        ),
        () = parent_gone(exit_with_parent) => tracing::info!(
            "the parent process exited: shutting down"
        ),
    }
    shared.lock().shutting_down = true;
}

/// The libp2p transport, handed back through `slot` when the runtime drops it, so the process
/// can let queued messages leave before closing connections.
struct Handoff {
    inner: Option<Libp2pTransport>,
    slot: Arc<Mutex<Option<Libp2pTransport>>>,
    /// A deliberately broken build's forged input (tests only; see `fault.rs`).
    #[cfg(feature = "fault-injection")]
    forged: Option<crate::fault::ForgedAcks>,
}

impl Transport for Handoff {
    fn send(&mut self, to: &NodeId, msg: &Message) {
        if let Some(t) = self.inner.as_mut() {
            t.send(to, msg);
        }
    }

    fn broadcast(&mut self, msg: &Message) {
        #[cfg(feature = "fault-injection")]
        if let Some(f) = self.forged.as_mut() {
            f.broadcast(msg);
        }
        if let Some(t) = self.inner.as_mut() {
            t.broadcast(msg);
        }
    }

    fn sign(&self, signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
        match self.inner.as_ref() {
            Some(t) => t.sign(signer, digest),
            // Handed back at shutdown: nothing is signed any more (an empty signature checks
            // nowhere).
            None => chorus_core::Signature::from_bytes(&[]),
        }
    }

    async fn next(&mut self) -> TransportEvent {
        #[cfg(feature = "fault-injection")]
        if let Some(ev) = self
            .forged
            .as_mut()
            .and_then(crate::fault::ForgedAcks::next_forged)
        {
            return ev;
        }
        let ev = match self.inner.as_mut() {
            Some(t) => t.next().await,
            None => std::future::pending().await,
        };
        #[cfg(feature = "fault-injection")]
        if let Some(f) = self.forged.as_mut() {
            f.saw(&ev);
        }
        ev
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if let Some(t) = self.inner.take() {
            *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
        }
    }
}

/// Free CPU (all cores) and available memory, for the score.
fn sample_resources() -> Resources {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mem_free_mb = std::fs::read_to_string(Path::new("/proc/meminfo"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| (kb / 1024).min(u64::from(u32::MAX)) as u32);
    Resources {
        cpu_millicores: cpus * 1_000,
        mem_free_mb,
        task_slots: 0,
    }
}
