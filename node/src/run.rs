//! `chorus run`: wires the sled event log, the libp2p transport, the tokio clock and the node's
//! observer into the shared runtime loop, serves the HTTP API, and shuts down gracefully on
//! SIGINT/SIGTERM (an admin steps down and says so, the log is flushed, exit 0).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use chorus_core::{Core, Event, Message, NodeId, PeerInfo, Resources};
use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};
use chorus_io::runtime::{Runtime, RuntimeConfig, TokioClock, Transport, TransportEvent};
use chorus_io::transport::libp2p::node_id as peer_node_id;
use chorus_io::transport::{load_or_create_identity, load_psk, Libp2pConfig, Libp2pTransport};

use crate::config::Resolved;
use crate::observe::{NodeObserver, SharedState};

/// How long the transport gets to send the last messages (a step-down) before it is stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

/// The identity key file inside the data directory.
pub const IDENTITY_FILE: &str = "identity.key";
/// The event log directory inside the data directory.
pub const LOG_DIR: &str = "log";

/// Runs the node until SIGINT/SIGTERM. Errors are reported by the caller as one line.
pub async fn run(resolved: Resolved) -> anyhow::Result<()> {
    let Resolved {
        config,
        listen,
        bootstrap,
        http,
    } = resolved;
    std::fs::create_dir_all(&config.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            config.data_dir.display()
        )
    })?;
    let keypair = load_or_create_identity(&config.data_dir.join(IDENTITY_FILE))?;
    let node_id: NodeId = peer_node_id(&keypair.public().to_peer_id());

    let log_path = config.data_dir.join(LOG_DIR);
    let meta = LogMeta::new(
        node_id.clone(),
        config.protocol.clone(),
        config.capabilities.clone(),
        config.cluster_seed,
    );
    let log = SledLog::open(&log_path, meta, SledLogOptions::default())?;
    if log.meta().config != config.protocol {
        tracing::info!(
            "the protocol settings differ from those the data directory was created with; the \
             new ones are logged as a config change and apply from now on"
        );
    }
    let core = Core::new(
        node_id.clone(),
        config.protocol.clone(),
        config.capabilities.clone(),
        config.cluster_seed,
    )?;

    let mut transport_config = Libp2pConfig::new(config.protocol.cluster_id.clone());
    transport_config.listen = listen;
    transport_config.bootstrap = bootstrap;
    transport_config.mdns = config.mdns;
    transport_config.psk = match &config.psk_file {
        Some(path) => Some(load_psk(path)?),
        None => None,
    };
    let resources = sample_resources();
    transport_config.info = PeerInfo {
        capabilities: config.capabilities.clone().into(),
        uptime_s: 0,
        resources,
    };
    let (transport, addrs) = Libp2pTransport::start(keypair, transport_config).await?;
    let listen_addrs: Vec<String> = addrs.iter().map(|a| format!("{a}/p2p/{node_id}")).collect();

    let shared = SharedState::default();
    {
        let mut s = shared.lock();
        s.node_id = node_id.to_string();
        s.listen_addrs = listen_addrs.clone();
        s.capabilities = config.capabilities.clone();
        s.transport_stats = Some(transport.stats());
    }
    let (http_addr, server) = crate::http::serve(http, shared.clone()).await?;
    tokio::spawn(server);
    tracing::info!(
        node_id = %node_id,
        data_dir = %config.data_dir.display(),
        http = %http_addr,
        listen = ?listen_addrs,
        "chorus node started"
    );

    let observer = NodeObserver::new(shared.clone(), log.notice_recorder(), log.next_seq());
    let slot = Arc::new(Mutex::new(None));
    let transport = Handoff {
        inner: Some(transport),
        slot: slot.clone(),
    };
    let runtime = Runtime::new(core, transport, log, TokioClock::new(), observer)
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
        ]);
    let result = runtime.run(shutdown_signal(shared.clone())).await;
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

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal(shared: SharedState) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            None
        }
    };
    let sigterm = async {
        match term.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        () = sigterm => tracing::info!("SIGTERM: shutting down"),
    }
    shared.lock().shutting_down = true;
}

/// The libp2p transport, handed back through `slot` when the runtime drops it, so the process
/// can let queued messages leave before closing connections.
struct Handoff {
    inner: Option<Libp2pTransport>,
    slot: Arc<Mutex<Option<Libp2pTransport>>>,
}

impl Transport for Handoff {
    fn send(&mut self, to: &NodeId, msg: &Message) {
        if let Some(t) = self.inner.as_mut() {
            t.send(to, msg);
        }
    }

    fn broadcast(&mut self, msg: &Message) {
        if let Some(t) = self.inner.as_mut() {
            t.broadcast(msg);
        }
    }

    async fn next(&mut self) -> TransportEvent {
        match self.inner.as_mut() {
            Some(t) => t.next().await,
            None => std::future::pending().await,
        }
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
    }
}
