//! The libp2p transport (docs/design.md §4.1): TCP + noise + yamux, gossipsub for broadcasts,
//! request-response for direct messages, identify for peers' capabilities, ping, mDNS,
//! Kademlia peer exchange (one bootstrap address is enough to meet the whole cluster), dialling
//! of bootstrap addresses and known peers with backoff, known peers kept in a file, an optional pre-shared-key private network, an optional
//! peer allowlist, and connection limits.
//!
//! # Shape
//!
//! [`Libp2pTransport::start`] builds the swarm and moves it into a spawned tokio task (the
//! *driver*). The [`Transport`] methods only talk to that task through bounded channels:
//! `send`/`broadcast` encode the message and push a command (never blocking, counting drops),
//! `next` pops the next event from a channel, which makes it cancel safe. Dropping the
//! transport closes the command channel; the driver then ends and its connections close.
//!
//! # Guarantees towards the runtime
//!
//! * A message's `from` is the authenticated peer: the remote of the request-response
//!   connection, or the signed `source` of a gossipsub message (strict validation), never a
//!   payload field.
//! * Every input is decoded for this cluster by a [`chorus_core::codec::Reassembler`]; frames
//!   over 64 KiB are refused before they are read. A message that carries an electorate too
//!   large for one frame is sent, and put back together, in parts (`codec::encode_parts`). Failures become [`TransportEvent::Rejected`] and
//!   are counted in [`Libp2pStats`]; they never panic and never reach the core.
//! * `PeerUp` comes once a peer is both connected and identified as a node of this cluster
//!   (its identify `agent_version` carries its [`PeerInfo`] as JSON); direct messages that a
//!   connected peer sends before that are held (a few) and delivered right after its `PeerUp`.
//!   `PeerDown` comes when its last connection closes.
//!
//! # Broadcasts
//!
//! Gossipsub only publishes to peers whose SUBSCRIBE it has received, which lags a fresh
//! connection. A broadcast is therefore published on the cluster topic *and* sent as a direct
//! message to every connected peer that gossipsub does not (yet) list as subscribed to it. The
//! two sets are disjoint at the moment of sending, so a directly connected peer gets one copy;
//! peers further away get it from gossipsub's relaying. Broadcasts (heartbeats, step-downs) are
//! idempotent, so a rare duplicate would be harmless anyway.

mod addresses;
mod behaviour;
mod driver;
mod frame;
mod identity;
mod link;
mod peers;
mod stats;
mod tunnel;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chorus_core::{codec, Message, NodeId, PeerInfo};
use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::runtime::{Transport, TransportEvent};

pub use self::behaviour::IDENTIFY_PROTOCOL;
pub use self::frame::{Frame, FrameCodec, FrameError, DIRECT_PROTOCOL};
pub use self::identity::{load_or_create_identity, load_psk};
pub use self::link::{LINK_PROTOCOL, LINK_PROTOCOL_COMPACT};
pub use self::stats::{Libp2pStats, StatsSnapshot};
pub use self::tunnel::{
    ApiTunnels, Tunnel, TunnelError, TunnelListener, TunnelSlot, TunnelStream, API_PROTOCOL,
    MAX_TUNNELS_PER_PEER,
};

/// Everything [`Libp2pTransport::start`] needs besides the keypair.
#[derive(Clone, Debug)]
pub struct Libp2pConfig {
    /// The cluster id: the codec's envelope field and the gossipsub topic
    /// `chorus/<cluster_id>/v1`.
    pub cluster_id: String,
    /// Addresses to listen on, e.g. `/ip4/0.0.0.0/tcp/4001`. May be empty (dial-only).
    pub listen: Vec<Multiaddr>,
    /// Peers to dial on start and re-dial, with backoff, while disconnected. A trailing
    /// `/p2p/<peer id>` is optional but lets the transport tell when that peer is connected
    /// through a connection it did not dial itself.
    pub bootstrap: Vec<Multiaddr>,
    /// Discover peers on the local network with mDNS.
    pub mdns: bool,
    /// Where the peers this node met are kept (e.g. `DATA_DIR/peers.json`): read at start and
    /// dialled like bootstrap addresses, rewritten (atomically, at most every few seconds) as
    /// the set changes. `None`: remembered for this run only. A corrupt file is logged and
    /// ignored.
    pub peers_file: Option<PathBuf>,
    /// Most peers remembered (and re-dialled after a loss).
    pub max_known_peers: usize,
    /// A private network's pre-shared key (see [`load_psk`]); nodes without it cannot connect.
    pub psk: Option<PreSharedKey>,
    /// When set, only these peers may connect: connections from anyone else are closed and
    /// counted, and their messages rejected.
    pub allowlist: Option<BTreeSet<PeerId>>,
    /// Most established connections in total.
    pub max_connections: u32,
    /// Most established connections with one peer.
    pub max_connections_per_peer: u32,
    /// What this node advertises in identify: capabilities and score inputs.
    pub info: PeerInfo,
    /// The node's HTTP API address, advertised in identify (see [`Libp2pStats::peer_http`]).
    pub http: Option<String>,
    /// How long a direct message may wait for its ack before it counts as failed.
    pub request_timeout: Duration,
    /// How long a connection with no open stream is kept. Long by default: a peer reached only
    /// by request-response must not drop out between two heartbeats.
    pub idle_connection_timeout: Duration,
    /// Time allowed for a connection's TCP, key, noise and yamux handshakes.
    pub handshake_timeout: Duration,
    /// First delay before re-dialling an unreachable bootstrap address or known peer; doubles
    /// per failure.
    pub redial_backoff_min: Duration,
    /// Longest delay between re-dials of a bootstrap address or known peer.
    pub redial_backoff_max: Duration,
    /// Capacity of the queue of events towards the runtime (the driver waits when it is full).
    pub event_queue: usize,
    /// Capacity of the queue of outgoing messages (sends beyond it are dropped and counted).
    pub command_queue: usize,
    /// How often a connection's peer is pinged. A peer that leaves two pings in a row
    /// unanswered (each waits [`Libp2pConfig::ping_timeout`]) has its connection closed, so
    /// both ends hear it down: this is how a paused peer, or one behind a partition whose TCP
    /// holds, is found out.
    pub ping_interval: Duration,
    /// How long a ping waits for its answer.
    pub ping_timeout: Duration,
    /// A peer connected this long without identifying (as a node of this cluster) has its
    /// connections closed, so both ends dial afresh and identify again. Without this a
    /// connection whose identify failed stayed open, its peer never up and every message from
    /// it held and dropped, until identify asked again 5 minutes later.
    pub identify_timeout: Duration,
    /// Offer and accept compact links (`/chorus/link/2.0.0`: heartbeats and their
    /// acknowledgements in a few bytes, `chorus_core::codec::encode_compact`). Off only to
    /// stand in for a node of an earlier release, which speaks link/1 alone.
    pub compact_links: bool,
}

impl Libp2pConfig {
    /// Defaults for a cluster: listen on all IPv4 interfaces on an ephemeral port, mDNS on, no
    /// key, no allowlist, 256 connections (4 per peer).
    pub fn new(cluster_id: impl Into<String>) -> Self {
        Libp2pConfig {
            cluster_id: cluster_id.into(),
            listen: vec!["/ip4/0.0.0.0/tcp/0"
                .parse()
                .expect("a constant, valid multiaddr")],
            bootstrap: Vec::new(),
            mdns: true,
            peers_file: None,
            max_known_peers: 256,
            psk: None,
            allowlist: None,
            max_connections: 256,
            max_connections_per_peer: 4,
            info: PeerInfo::default(),
            http: None,
            request_timeout: Duration::from_secs(10),
            idle_connection_timeout: Duration::from_secs(24 * 3600),
            handshake_timeout: Duration::from_secs(10),
            redial_backoff_min: Duration::from_secs(1),
            redial_backoff_max: Duration::from_secs(30),
            event_queue: 4096,
            command_queue: 4096,
            compact_links: true,
            ping_interval: Duration::from_secs(15),
            ping_timeout: Duration::from_secs(10),
            identify_timeout: Duration::from_secs(20),
        }
    }
}

/// What can go wrong starting the transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The identity key file could not be read, written or parsed.
    #[error("node identity: {0}")]
    Identity(String),
    /// The configuration is unusable (bad key file, empty cluster id, a protocol refusing its
    /// settings).
    #[error("transport configuration: {0}")]
    Config(String),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// The environment failed (sockets, mDNS interfaces, the driver task).
    #[error("transport I/O: {0}")]
    Io(String),
}

/// What a caller can do about a [`TransportError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportErrorCategory {
    /// Fix the configuration or files; retrying will not help.
    Config,
    /// An environmental failure; retrying later may help.
    Io,
}

impl TransportError {
    /// The category of the error.
    pub fn category(&self) -> TransportErrorCategory {
        match self {
            TransportError::Identity(_) | TransportError::Config(_) => {
                TransportErrorCategory::Config
            }
            TransportError::Listen { .. } | TransportError::Io(_) => TransportErrorCategory::Io,
        }
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.category() == TransportErrorCategory::Io
    }
}

/// A command from the transport handle to its driver task.
#[derive(Debug)]
enum Command {
    /// One encoded message to one peer: one frame, or its parts in order; and its compact
    /// frame, if it has one (written instead on a compact link).
    Send {
        to: PeerId,
        frames: Vec<Vec<u8>>,
        compact: Option<Vec<u8>>,
    },
    /// One encoded message to every peer, as `Send`.
    Broadcast {
        frames: Vec<Vec<u8>>,
        compact: Option<Vec<u8>>,
    },
    /// Let what was sent leave, then end.
    Stop,
}

/// The libp2p [`Transport`]: a handle to the swarm running in its own task.
#[derive(Debug)]
pub struct Libp2pTransport {
    cluster_id: String,
    local_peer_id: PeerId,
    /// Signs the electorates this node endorses (`chorus_core::certificate`).
    keypair: Keypair,
    commands: mpsc::Sender<Command>,
    events: mpsc::Receiver<TransportEvent>,
    stats: Arc<Libp2pStats>,
    tunnels: ApiTunnels,
    /// Always `Some` until [`Libp2pTransport::shutdown`] takes it.
    driver: Option<JoinHandle<()>>,
}

impl Libp2pTransport {
    /// Builds the swarm, starts listening, and spawns the driver task (on the current tokio
    /// runtime). Returns once every listen address is bound, with the bound addresses (a port
    /// 0 replaced by the real port; a wildcard address expanded per interface).
    pub async fn start(
        keypair: Keypair,
        config: Libp2pConfig,
    ) -> Result<(Self, Vec<Multiaddr>), TransportError> {
        if config.cluster_id.is_empty() {
            return Err(TransportError::Config("the cluster id is empty".into()));
        }
        if config.event_queue == 0 || config.command_queue == 0 {
            return Err(TransportError::Config(
                "queue capacities must be positive".into(),
            ));
        }
        let local_peer_id = keypair.public().to_peer_id();
        let stats = Arc::new(Libp2pStats::default());
        let (commands, command_rx) = mpsc::channel(config.command_queue);
        let (event_tx, events) = mpsc::channel(config.event_queue);
        let cluster_id = config.cluster_id.clone();

        let mut driver = driver::Driver::new(&keypair, config, stats.clone(), event_tx)?;
        let addrs = driver.listen().await?;
        let tunnels = driver.tunnels();
        tracing::info!(
            peer_id = %local_peer_id,
            addrs = %crate::log_fields::list(&addrs),
            "libp2p transport listening"
        );
        let driver = tokio::spawn(driver.run(command_rx));

        Ok((
            Libp2pTransport {
                cluster_id,
                local_peer_id,
                keypair,
                commands,
                events,
                stats,
                tunnels,
                driver: Some(driver),
            },
            addrs,
        ))
    }

    /// This node's peer id.
    pub fn local_peer_id(&self) -> PeerId {
        self.local_peer_id
    }

    /// This node's id as the core knows it (the base58 peer id).
    pub fn node_id(&self) -> NodeId {
        node_id(&self.local_peer_id)
    }

    /// The live counters, for metrics.
    pub fn stats(&self) -> Arc<Libp2pStats> {
        self.stats.clone()
    }

    /// Tunnels to other nodes' HTTP APIs, and this node's to serve (`tunnel.rs`).
    pub fn tunnels(&self) -> ApiTunnels {
        self.tunnels.clone()
    }

    /// Stops gracefully: messages already handed to the transport are sent, the driver waits
    /// (at most about a second) for their acks, then every connection closes. Dropping the
    /// transport instead stops at once, possibly losing queued messages.
    pub async fn shutdown(mut self) {
        let Some(mut driver) = self.driver.take() else {
            return;
        };
        // Queued commands come out of the channel before `Stop`, so they are carried out first.
        let stopping = self.commands.send(Command::Stop).await.is_ok();
        if !stopping
            || tokio::time::timeout(driver::STOP_LINGER * 2, &mut driver)
                .await
                .is_err()
        {
            driver.abort();
            // Cancellation is the expected outcome; a panic would already have been reported.
            let _ = driver.await;
        }
    }

    fn push(&mut self, command: Command, kind: &'static str) {
        match self.commands.try_send(command) {
            Ok(()) => self.stats.message_out(kind),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stats.rejected("queue_full");
                tracing::debug!(kind, "outgoing queue full; message dropped");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.stats.send_failed("stopped");
                tracing::debug!(kind, "transport driver stopped; message dropped");
            }
        }
    }

    /// The message's frames: one, or the parts of a message that carries a large electorate.
    fn encode(&self, msg: &Message) -> Option<Vec<Vec<u8>>> {
        match codec::encode_parts(&self.cluster_id, msg) {
            Ok(frames) => Some(frames),
            Err(e) => {
                self.stats.rejected("too_large_out");
                tracing::warn!(kind = msg.kind(), error = %e, "message not sent");
                None
            }
        }
    }
}

impl Transport for Libp2pTransport {
    fn send(&mut self, to: &NodeId, msg: &Message) {
        let Ok(peer) = to.as_str().parse::<PeerId>() else {
            self.stats.rejected("unknown_peer");
            tracing::debug!(%to, "send to a node id that is not a peer id; dropped");
            return;
        };
        if let Some(frames) = self.encode(msg) {
            let compact = codec::encode_compact(&self.cluster_id, msg);
            self.push(
                Command::Send {
                    to: peer,
                    frames,
                    compact,
                },
                msg.kind(),
            );
        }
    }

    fn broadcast(&mut self, msg: &Message) {
        if let Some(frames) = self.encode(msg) {
            let compact = codec::encode_compact(&self.cluster_id, msg);
            self.push(Command::Broadcast { frames, compact }, msg.kind());
        }
    }

    fn sign(&self, _signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
        // Ed25519 signing cannot fail; should another key type ever fail, an empty signature
        // checks nowhere and the admin counts this node's acknowledgement without it.
        let bytes = self.keypair.sign(&digest.0).unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not sign an electorate statement");
            Vec::new()
        });
        chorus_core::Signature::from_bytes(&bytes)
    }

    async fn next(&mut self) -> TransportEvent {
        // `Receiver::recv` is cancel safe: an event is either returned or left in the channel.
        match self.events.recv().await {
            Some(event) => event,
            None => {
                // The driver only drops its sender when it ends, which it does only after this
                // handle closed the command channel; reaching this means it died. Nothing more
                // will come: wait forever rather than spin.
                tracing::error!("libp2p driver task ended; the transport is dead");
                std::future::pending().await
            }
        }
    }
}

impl Drop for Libp2pTransport {
    fn drop(&mut self) {
        // Closing the command channel (dropping `commands`) already stops the driver; aborting
        // as well makes sure it does not outlive the handle while waiting on a full event queue.
        if let Some(driver) = &self.driver {
            driver.abort();
        }
    }
}

/// The core's id for a peer.
pub fn node_id(peer: &PeerId) -> NodeId {
    NodeId::new(peer.to_base58())
}
