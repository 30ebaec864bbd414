//! `chorus run`: wires the sled event log, the libp2p transport, the tokio clock and the node's
//! observer into the shared runtime loop, serves the HTTP API, and shuts down gracefully on
//! SIGINT, SIGTERM or SIGHUP (an admin steps down and says so, the log is flushed, exit 0).
//!
//! SIGHUP is a graceful stop, not a reload: the settings that matter (timings, electorate,
//! addresses, keys) cannot change under a running node, and a supervisor restarts it with the
//! new configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use chorus_core::{Core, Event, NodeId, PeerInfo, Resources, ADMIN_ELECTION};
use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};
use chorus_io::log_fields::list;
use chorus_io::runtime::{NoSandboxes, Runtime, RuntimeConfig, TokioClock};
use chorus_io::sandbox::live::LiveSandboxes;
use chorus_io::transport::libp2p::node_id as peer_node_id;
use chorus_io::transport::{load_or_create_identity, Libp2pConfig, Libp2pTransport};
use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::Multiaddr;

use super::config::{NodeConfig, Resolved};
use super::handoff::Handoff;
use super::observer::NodeObserver;
use super::operator::{first_request_id, OperatorInputs};
use super::progress::progress;
use super::sandboxes::{reap_on_start, task_logs, task_runner, NodeSandboxes};
use super::shared::SharedState;
use super::signals::{shutdown_signal, stop_signals};
use crate::api::auth::Auth;
use crate::history::hostclock::HostClockOrigin;
use crate::history::LOG_DIR;

/// How long the transport gets to send the last messages (a step-down) before it is stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

/// The identity key file inside the data directory.
pub const IDENTITY_FILE: &str = "identity.key";

/// Runs the node until SIGINT/SIGTERM/SIGHUP. Errors are reported by the caller as one line.
pub async fn run(resolved: Resolved) -> anyhow::Result<()> {
    let Resolved {
        config,
        listen,
        bootstrap,
        http,
        http_tls,
        psk,
        allowlist,
        warnings,
        accept_log_reset,
        exit_with_parent,
    } = resolved;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    // A port already taken is said before anything is written: a first start that cannot
    // serve leaves no fresh data directory behind.
    drop(std::net::TcpListener::bind(http).map_err(|e| {
        anyhow::anyhow!("cannot bind the HTTP API on {http}: {e} (is another node running?)")
    })?);
    let (keypair, node_id, log_path) = open_data_dir(&config, accept_log_reset)?;
    let (acl_key, new_management_token) = super::acl::load_or_create(&config)?;
    // `sandbox` and `repo:NAME` join the configured capabilities when the node runs tasks.
    let capabilities = config.advertised_capabilities();
    let slots = config.task_slots();
    let log = open_log(&config, &node_id, &capabilities, &log_path)?;
    // Reaped once the data directory's log is open (and locked: no other process of this node
    // id runs) and before the node says it started, so what it reports is the cleaned state.
    if config.sandbox.docker {
        remove_leftover_sandboxes(&node_id).await?;
    }
    let core = Core::new(
        node_id.clone(),
        config.protocol.clone(),
        capabilities.clone(),
        config.cluster_seed,
    )?;
    // Read from the host once: the worker enforces them and the API refuses submits above them.
    let ceilings = config.tasks.ceilings();
    // Secret environment values are sealed and opened under the cluster's pre-shared key.
    let secret_key = psk.map(|k| chorus_io::sandbox::tasks::SecretKey::from_psk(&k.to_key_file()));
    let logs = if slots > 0 { task_logs(&config)? } else { None };
    // Live sandboxes (`/sandboxes`) on a node that runs Docker sandboxes, placed by the
    // cluster as live tasks; ended by a reaper
    // every second, and all removed when the node stops.
    let live = if slots > 0 {
        let provider =
            super::sandboxes::docker_provider(&config, "live sandboxes run in Docker").await?;
        let live = Arc::new(LiveSandboxes::new(provider, config.sandbox.live_limits()));
        let (spec, policy) = crate::api::sandboxes::default_shape(node_id.as_str());
        live.keep_warm(spec, policy);
        let reaper = live.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        reaper.reap().await;
                    }
                    // A warm sandbox taken: refill now, not at the next second.
                    () = reaper.taken() => reaper.fill().await,
                }
            }
        });
        Some(live)
    } else {
        None
    };
    let sandboxes = if slots > 0 {
        let mut runner = task_runner(
            &config,
            node_id.as_str(),
            ceilings,
            secret_key.clone(),
            logs.clone(),
        )
        .await?;
        if let Some(live) = &live {
            // The live sandboxes the cluster places here are made in the registry.
            runner = runner.with_live(Arc::clone(live));
        }
        NodeSandboxes::Docker(Box::new(runner))
    } else {
        NodeSandboxes::Off(NoSandboxes::default())
    };
    let pools = match &sandboxes {
        NodeSandboxes::Docker(runner) => Some(runner.shutdown_handle()),
        NodeSandboxes::Off(_) => None,
    };

    let loopback_only = listen.iter().all(is_loopback);
    let mut resources = sample_resources();
    resources.task_slots = slots;
    if slots > 0 {
        // What the admin counts this node's tasks against (issue 33): its ceilings, and the
        // base policy's limits for a task that names none (the runner's base policy).
        let base = chorus_io::sandbox::tasks::TaskRunnerConfig::new(node_id.as_str()).base_policy;
        resources.task_capacity = ceilings.capacity(&base);
    }
    let mut transport_config =
        transport_config(&config, listen, bootstrap, psk, &capabilities, resources);
    transport_config.allowlist = allowlist;
    // The HTTP API first: its bound address is advertised to peers.
    let shared = SharedState::default();
    shared.lock().ceilings = ceilings;
    shared.lock().secret_key = secret_key;
    shared.lock().logs = logs;
    shared.lock().live = live.clone();
    let auth = Arc::new(Auth::new(acl_key, config.http_names.clone()).for_node(node_id.as_str()));
    let tls = http_tls
        .map(|source| super::tls::identity(&source, &config.data_dir, http, &config.http_names))
        .transpose()?;
    let (http_addr, server, app) = crate::api::serve(
        http,
        shared.clone(),
        auth,
        tls.as_ref().map(|t| t.config.clone()),
        config.http_ui,
    )
    .await?;
    // Peers pass it on (`/cluster`); a TLS address carries the fingerprint to pin, so a client
    // that trusts this node can reach the others it names.
    let http_url = match &tls {
        Some(t) => format!("https://{http_addr}#sha256={}", t.fingerprint),
        None => http_addr.to_string(),
    };
    {
        let mut s = shared.lock();
        s.http_url = http_url.clone();
        s.http_tls_fingerprint = tls.as_ref().map(|t| t.fingerprint.clone());
    }
    transport_config.http = Some(http_url);
    let (transport, addrs) = Libp2pTransport::start(keypair, transport_config).await?;
    let listen_addrs: Vec<String> = addrs.iter().map(|a| format!("{a}/p2p/{node_id}")).collect();
    record_identity(
        &shared,
        &node_id,
        &listen_addrs,
        &capabilities,
        &transport,
        &sandboxes,
    );
    tokio::spawn(server);
    // The API on tunnels too: other nodes reach it through the cluster transport when it
    // listens where they cannot (its own loopback; issue 54, item 8).
    let tunnels = transport.tunnels();
    match tunnels.listen() {
        Ok(listener) => {
            tokio::spawn(crate::api::serve_tunnels(listener, app));
        }
        Err(e) => tracing::warn!(error = %e, "the API is not served on tunnels"),
    }
    shared.lock().tunnels = Some(tunnels);
    // Before the start line: whoever reads it may stop the node at once.
    let signals = stop_signals();
    announce_start(&config, &node_id, http_addr, &listen_addrs);
    if loopback_only {
        tracing::info!(
            "libp2p listens on loopback only: other machines cannot connect (a local node); \
             pass --listen /ip4/0.0.0.0/tcp/7946 to join a network"
        );
    }
    announce_api(
        &config,
        http_addr,
        new_management_token.as_deref(),
        tls.as_ref(),
    );
    announce_role(&config, &capabilities);
    tokio::spawn(progress(shared.clone()));

    let clock = TokioClock::new();
    let clock_origin = HostClockOrigin::now();
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
        forged: super::fault::ForgedAcks::from_env(config.protocol.election_timeout_min_ms),
    };
    // Operator requests (`POST /members`) reach the loop here; a few may queue, more are
    // refused as busy rather than piling up.
    let (operator_tx, operator_rx) = tokio::sync::mpsc::channel(16);
    shared.lock().operator = Some(OperatorInputs::new(operator_tx, first_request_id()));
    announce_tasks(&config, slots);
    let runtime = Runtime::new(core, transport, log, clock, observer)
        .with_sandboxes(sandboxes)
        .with_config(RuntimeConfig {
            snapshot_every_events: config.snapshot_every_events,
            ..RuntimeConfig::default()
        })
        .with_start_events(start_events(&config, resources, &capabilities))
        .with_operator_inputs(operator_rx);
    let left = shared.lock().leave.clone();
    let stop = {
        let shared = shared.clone();
        async move {
            tokio::select! {
                () = shutdown_signal(signals, shared.clone(), exit_with_parent) => {}
                () = left.notified() => {
                    tracing::info!("left the cluster (`chorus members leave`): shutting down");
                    shared.lock().shutting_down = true;
                }
            }
        }
    };
    let result = runtime.run(stop).await;
    if let Some(live) = &live {
        live.shutdown("the node stopping").await;
    }
    if let Some(pools) = &pools {
        // The runs still going are stopped (their sandboxes removed) and the warm sandboxes
        // go with the node; what a stop could not remove is reaped at the next start.
        let n = pools.shutdown().await;
        tracing::info!("removed the sandboxes of {n} warm pool(s)");
    }
    // The runtime handed the transport back when it dropped it.
    let transport = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    let core = result?;
    close_transport(transport).await;
    tracing::info!(
        term = core.term(),
        role = %core.role(),
        "chorus node stopped; event log flushed"
    );
    Ok(())
}

/// Creates the data directory if needed and loads (or makes) the node's identity there.
/// Refuses a kept identity whose event log is gone unless `accept_log_reset`: the log holds the
/// node's term and vote. Returns the identity, the node id and the log's path.
fn open_data_dir(
    config: &NodeConfig,
    accept_log_reset: bool,
) -> anyhow::Result<(Keypair, NodeId, PathBuf)> {
    std::fs::create_dir_all(&config.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            config.data_dir.display()
        )
    })?;
    // Keys, tokens and task specs (environments) live here: the node's user only (issue 33).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&config.data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private", config.data_dir.display()))?;
    }
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
    Ok((keypair, node_id, log_path))
}

/// Opens (or creates) the event log, saying so when the protocol settings changed since the
/// data directory was created.
fn open_log(
    config: &NodeConfig,
    node_id: &NodeId,
    capabilities: &[String],
    log_path: &Path,
) -> anyhow::Result<SledLog> {
    let meta = LogMeta::new(
        node_id.clone(),
        config.protocol.clone(),
        capabilities.to_vec(),
        config.cluster_seed,
    );
    let log = SledLog::open(log_path, meta, SledLogOptions::default())
        .map_err(anyhow::Error::from)
        .map_err(|e| {
            if crate::history::source::log_locked(&e) {
                anyhow::anyhow!(
                    "another chorus process runs on the data directory {} (its event log is \
                     locked): stop it, or give this node its own --data-dir",
                    config.data_dir.display()
                )
            } else {
                e
            }
        })?;
    check_cluster_id(
        &log.meta().config.cluster_id,
        &config.protocol.cluster_id,
        &config.data_dir,
        config.from_flags.get("protocol.cluster_id").copied(),
    )?;
    if log.meta().config != config.protocol {
        tracing::info!(
            "the protocol settings differ from those the data directory was created with; the \
             new ones are logged as a config change and apply from now on"
        );
    }
    Ok(log)
}

/// Refuses a data directory made for another cluster (etcd's "cluster ID mismatch"). The id
/// is in the event log's marker since the log was made, and the core never adopts a changed
/// one: started anyway, the node would speak the new cluster's protocol with the old one's
/// state and never find an admin.
fn check_cluster_id(
    recorded: &str,
    configured: &str,
    data_dir: &Path,
    flag: Option<&str>,
) -> anyhow::Result<()> {
    if recorded == configured {
        return Ok(());
    }
    let setting = flag.unwrap_or("`protocol.cluster_id` (config file or default)");
    anyhow::bail!(
        "cluster ID mismatch: the data directory {dir} belongs to cluster {recorded:?}, but \
         {setting} says {configured:?}. To run this node in its cluster, start it with \
         --cluster-id {recorded}; to make it a new node of {configured:?}, give it a fresh \
         --data-dir (or remove {dir}: its identity and event log go with it)",
        dir = data_dir.display()
    )
}

/// Removes the Docker sandboxes earlier runs of this node left behind, and says how many.
async fn remove_leftover_sandboxes(node_id: &NodeId) -> anyhow::Result<()> {
    let removed = reap_on_start(node_id.as_str()).await?;
    tracing::info!(
        node_id = %node_id,
        removed,
        "Docker sandbox: removed {removed} sandbox(es) that earlier runs of this node left \
         behind (owner gone or deadline passed)"
    );
    Ok(())
}

/// The transport's settings: addresses, discovery, the private network's key, and what this
/// node advertises (capabilities, resources).
fn transport_config(
    config: &NodeConfig,
    listen: Vec<Multiaddr>,
    bootstrap: Vec<Multiaddr>,
    psk: Option<PreSharedKey>,
    capabilities: &[String],
    resources: Resources,
) -> Libp2pConfig {
    let mut transport_config = Libp2pConfig::new(config.protocol.cluster_id.clone());
    transport_config.listen = listen;
    transport_config.bootstrap = bootstrap;
    transport_config.mdns = config.mdns;
    // The peers met, so a restart finds the cluster without its original bootstrap address.
    transport_config.peers_file = Some(config.data_dir.join("peers.json"));
    transport_config.psk = psk;
    transport_config.info = PeerInfo {
        capabilities: capabilities.to_vec().into(),
        uptime_s: 0,
        resources,
    };
    (
        transport_config.ping_interval,
        transport_config.ping_timeout,
    ) = ping_for(&config.protocol);
    transport_config
}

/// How often the transport pings a peer, and how long it waits for the answer, at the
/// cluster's tempo: every four heartbeats (1–15 s), waiting an election timeout (2–10 s); two
/// missed in a row close the connection. libp2p's second ping opens a fresh stream, whose
/// negotiation times out after its own fixed 10 s, so a paused worker, or one behind a
/// partition, is heard down within two intervals, one wait and 10 s — ~50 s at the default
/// tempo (15 s heartbeats), ~15 s at a 300 ms one — where a fixed 15 s ping took ~50 s
/// whatever the tempo. The floors keep a loaded machine's short stalls from closing
/// connections.
fn ping_for(protocol: &chorus_core::Config) -> (Duration, Duration) {
    let interval = Duration::from_millis(protocol.heartbeat_interval_ms.saturating_mul(4))
        .clamp(Duration::from_secs(1), Duration::from_secs(15));
    let timeout = Duration::from_millis(protocol.election_timeout_max_ms)
        .clamp(Duration::from_secs(2), Duration::from_secs(10));
    (interval, timeout)
}

/// Fills in what the API shows about this node itself, once its addresses are known.
fn record_identity(
    shared: &SharedState,
    node_id: &NodeId,
    listen_addrs: &[String],
    capabilities: &[String],
    transport: &Libp2pTransport,
    sandboxes: &NodeSandboxes,
) {
    let mut s = shared.lock();
    s.started_at = Some(std::time::Instant::now());
    s.node_id = node_id.to_string();
    s.listen_addrs = listen_addrs.to_vec();
    s.capabilities = capabilities.to_vec();
    s.transport_stats = Some(transport.stats());
    if let NodeSandboxes::Docker(runner) = sandboxes {
        s.tasks.runner = Some(runner.stats());
    }
}

/// The "chorus node started" line (devcluster and the end-to-end tests read its ports).
fn announce_start(
    config: &NodeConfig,
    node_id: &NodeId,
    http_addr: SocketAddr,
    listen_addrs: &[String],
) {
    tracing::info!(
        node_id = %node_id,
        data_dir = %config.data_dir.display(),
        http = %http_addr,
        listen = %list(listen_addrs),
        mdns = config.mdns,
        "chorus node started"
    );
}

/// Says who may use the HTTP API, and shows a new management token once (on stderr, not
/// through the log: it is a secret, and log lines travel further than a terminal).
fn announce_api(
    config: &NodeConfig,
    http_addr: SocketAddr,
    new_token: Option<&str>,
    tls: Option<&super::tls::HttpTlsIdentity>,
) {
    let token_file = config.data_dir.join(super::acl::MANAGEMENT_TOKEN_FILE);
    if let Some(token) = new_token {
        eprintln!(
            "chorus: the management token of this node's ACL key (shown once; also in {}, \
             mode 0600; make narrower ones with `chorus acl token create --role submit`):\n  \
             {token}",
            token_file.display()
        );
    }
    if let Some(tls) = tls {
        // On stderr as well as in the log: a client needs it before it can talk to the node.
        if tls.generated_now {
            eprintln!(
                "chorus: the HTTP API speaks TLS with a certificate made for it ({}); clients \
                 pin its fingerprint:\n  chorus --addr https://{http_addr} --tls-fingerprint {}",
                tls.cert_path.display(),
                tls.fingerprint
            );
        }
        tracing::info!(
            http = %http_addr,
            certificate = %tls.cert_path.display(),
            fingerprint = %tls.fingerprint,
            "the HTTP API speaks TLS (https://{http_addr}); pin the certificate with \
             --tls-fingerprint {} or trust its CA with --ca-cert",
            tls.fingerprint
        );
    }
}

/// Says whether this node votes (and how many voters the first election waits for) or is a
/// worker only.
fn announce_role(config: &NodeConfig, capabilities: &[String]) {
    let expect = config.protocol.bootstrap_expect;
    if config.capabilities.iter().any(|c| c == ADMIN_ELECTION) {
        tracing::info!(
            capabilities = %list(capabilities),
            bootstrap_expect = expect,
            "this node is a voter (capability admin_election): it votes and may become admin; \
             the first election waits for {expect} voter(s)"
        );
    } else {
        tracing::info!(
            capabilities = %list(capabilities),
            "this node is a worker, not a voter (no capability admin_election): it never \
             votes nor becomes admin"
        );
    }
}

/// Says whether this node runs tasks, and in how many slots.
fn announce_tasks(config: &NodeConfig, slots: u32) {
    if slots > 0 {
        tracing::info!(
            slots,
            repos = %list(config.repos.keys()),
            "this node runs tasks in Docker sandboxes ({slots} at once)"
        );
    } else {
        tracing::info!(
            "this node runs no tasks (no task slots: pass --docker, or set `[tasks] slots`); \
             it still accepts submissions"
        );
    }
}

/// The events logged at every start, after the recovered state: the configured settings. The
/// core ignores them when they equal the recovered ones, and otherwise a changed timing takes
/// effect (and replays).
fn start_events(config: &NodeConfig, resources: Resources, capabilities: &[String]) -> Vec<Event> {
    vec![
        Event::ResourcesSampled { resources },
        Event::ConfigChanged {
            config: config.protocol.clone(),
        },
        // As the settings: a restored core would otherwise keep the capabilities of the
        // start it was snapshot in (a repository added since, a voter made a worker).
        Event::CapabilitiesChanged {
            capabilities: capabilities.to_vec(),
        },
    ]
}

/// Gives the last messages (a step-down broadcast) a moment to leave, then closes every
/// connection.
async fn close_transport(transport: Option<Libp2pTransport>) {
    if let Some(transport) = transport {
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        transport.shutdown().await;
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

/// Free CPU (all cores) and available memory, for the score.
fn sample_resources() -> Resources {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mem_free_mb = super::config::meminfo_mb("MemAvailable").unwrap_or(0);
    Resources {
        cpu_millicores: cpus * 1_000,
        mem_free_mb,
        task_slots: 0,
        task_capacity: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transport's ping follows the cluster's tempo within its floors and ceilings: the
    /// default tempo keeps libp2p's 15 s and a 10 s wait; the tests' 300 ms heartbeats ping
    /// every 1.2 s and wait 2 s (a paused worker heard down in ~15 s, not ~50 s); a tempo
    /// faster still never pings more than once a second nor waits less than 2 s.
    #[test]
    fn the_ping_follows_the_tempo_within_bounds() {
        let secs = |s: f64| Duration::from_secs_f64(s);
        let default = chorus_core::Config::default();
        assert_eq!(ping_for(&default), (secs(15.0), secs(10.0)));
        let tests = chorus_core::Config {
            heartbeat_interval_ms: 300,
            election_timeout_min_ms: 1_200,
            election_timeout_max_ms: 1_800,
            ..chorus_core::Config::default()
        };
        assert_eq!(ping_for(&tests), (secs(1.2), secs(2.0)));
        let fast = chorus_core::Config {
            heartbeat_interval_ms: 50,
            election_timeout_min_ms: 200,
            election_timeout_max_ms: 300,
            ..chorus_core::Config::default()
        };
        assert_eq!(ping_for(&fast), (secs(1.0), secs(2.0)));
        let slow = chorus_core::Config {
            heartbeat_interval_ms: 5_000,
            election_timeout_min_ms: 20_000,
            election_timeout_max_ms: 30_000,
            ..chorus_core::Config::default()
        };
        assert_eq!(ping_for(&slow), (secs(15.0), secs(10.0)));
    }
}
