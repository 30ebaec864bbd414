//! The task that owns the swarm: it carries out send and broadcast commands, turns swarm events
//! into [`TransportEvent`]s, tracks which peers are up, exchanges peers through Kademlia, and
//! re-dials bootstrap addresses and known peers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chorus_core::{codec, Message, PeerInfo};
use futures::StreamExt;
use libp2p::core::transport::ListenerId;
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundFailure};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionDenied, ConnectionId, DialError, ListenError, SwarmEvent};
use libp2p::{allow_block_list, connection_limits, gossipsub, identify, kad, mdns};
use libp2p::{Multiaddr, PeerId, Swarm};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::behaviour::{
    build_transport, cluster_topic, Advertisement, Behaviour, BehaviourEvent, IDENTIFY_PROTOCOL,
};
use super::frame::Frame;
use super::link::{Links, OutFrame};
use super::peers::{self, PeerBook};
use super::tunnel::{Admitted, ApiTunnels};
use super::{node_id, Command, Libp2pConfig, Libp2pStats, TransportError};
use crate::log_fields::{list, outside};
use crate::runtime::TransportEvent;

/// Direct messages held per connected peer until its identify arrives.
const MAX_PENDING_PER_PEER: usize = 64;

/// Peers remembered as belonging elsewhere (another cluster, not CHORUS), so mDNS does not
/// re-dial them over and over. Forgotten wholesale when full.
const MAX_FOREIGN_PEERS: usize = 1024;

/// How long `listen` waits for the listeners to report their addresses.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);

/// A listener on an unspecified address (`0.0.0.0`, `::`) reports one address per interface,
/// together: `listen` gathers them until none came for this long.
const LISTEN_SETTLE: Duration = Duration::from_millis(100);

/// Longest time a stopping driver waits for the acks of the direct messages it sent.
pub(super) const STOP_LINGER: Duration = Duration::from_secs(1);

/// Shortest time a stopping driver keeps running, so gossipsub can flush its queues (it has no
/// acknowledgement to wait for).
const STOP_LINGER_MIN: Duration = Duration::from_millis(100);

/// Peer addresses whose first connection failure was logged at WARN; forgotten wholesale when
/// full, so a flood of addresses cannot grow the set without bound.
const MAX_WARNED: usize = 1024;

/// How often the bootstrap addresses are checked for a re-dial.
const REDIAL_TICK: Duration = Duration::from_millis(250);

/// Known peers dialled at once by the driver (Kademlia's own queries dial a few more).
const MAX_DIALS_IN_FLIGHT: usize = 8;

/// Peers from one Kademlia answer dialled at once.
const MAX_DISCOVERED_DIALS: usize = 16;

/// Shortest time between two writes of the peers file.
const SAVE_EVERY: Duration = Duration::from_secs(5);

/// Shortest time between two Kademlia lookups the driver asks for after losing a peer.
const REBOOTSTRAP_MIN: Duration = Duration::from_secs(5);

/// What the driver knows about a connected peer.
#[derive(Debug, Default)]
struct PeerState {
    connections: BTreeSet<ConnectionId>,
    /// When its first connection of this spell was established (`None` only before that).
    since: Option<Instant>,
    /// The remote address of its first connection: whether it is reached over loopback.
    remote: Option<Multiaddr>,
    /// Set once the peer identified as a node of this cluster and `PeerUp` went out.
    up: bool,
    /// Direct messages that arrived before `PeerUp`, delivered right after it.
    pending: VecDeque<Message>,
}

/// One bootstrap address and its re-dial schedule.
#[derive(Debug)]
struct Bootstrap {
    addr: Multiaddr,
    /// From the address's `/p2p/` suffix, or learned from the first connection it gave.
    peer: Option<PeerId>,
    dialing: Option<ConnectionId>,
    next_attempt: Instant,
    backoff: Duration,
    /// The address turned out to be this node itself.
    disabled: bool,
}

pub(super) struct Driver {
    swarm: Swarm<Behaviour>,
    local: PeerId,
    cluster_id: String,
    topic: gossipsub::TopicHash,
    listen: Vec<Multiaddr>,
    allowlist: Option<BTreeSet<PeerId>>,
    peers: BTreeMap<PeerId, PeerState>,
    foreign: BTreeSet<PeerId>,
    bootstrap: Vec<Bootstrap>,
    backoff_min: Duration,
    backoff_max: Duration,
    /// See [`Libp2pConfig::identify_timeout`].
    identify_timeout: Duration,
    stats: Arc<Libp2pStats>,
    events: mpsc::Sender<TransportEvent>,
    /// Direct messages sent and neither acknowledged nor failed yet.
    in_flight: usize,
    /// Whether this node uses a pre-shared key (to name the likely cause of a failed handshake).
    has_psk: bool,
    /// Addresses (or peers) whose first failure was logged at WARN; later ones go to DEBUG.
    warned: BTreeSet<String>,
    /// Messages arriving in parts, per authenticated sender.
    parts: codec::Reassembler<PeerId>,
    /// Peers of this cluster met (or read from the peers file), re-dialled after a loss.
    book: PeerBook,
    peers_file: Option<PathBuf>,
    last_save: Option<Instant>,
    /// When the driver last asked Kademlia for a lookup; `None` until then.
    last_lookup: Option<Instant>,
    /// A peer was lost: look for others at the next tick (rate-limited).
    lookup_wanted: bool,
    /// A long-lived stream per connected peer (`link.rs`).
    links: Links,
    /// API tunnels (`tunnel.rs`): the driver keeps who is admitted.
    tunnels: ApiTunnels,
    admitted: Arc<Admitted>,
    /// Frames read from links; taken by `run`.
    link_frames: Option<mpsc::Receiver<(PeerId, Frame)>>,
}

impl Driver {
    pub(super) fn new(
        keypair: &Keypair,
        config: Libp2pConfig,
        stats: Arc<Libp2pStats>,
        events: mpsc::Sender<TransportEvent>,
    ) -> Result<Self, TransportError> {
        let local = keypair.public().to_peer_id();
        let has_psk = config.psk.is_some();
        let transport = build_transport(keypair, config.psk, config.handshake_timeout)?;
        let behaviour = Behaviour::new(keypair, &config)?;
        let swarm = Swarm::new(
            transport,
            behaviour,
            local,
            libp2p::swarm::Config::with_tokio_executor()
                .with_idle_connection_timeout(config.idle_connection_timeout),
        );
        let admitted = Arc::new(Admitted::default());
        let tunnels = ApiTunnels::new(
            swarm.behaviour().link.new_control(),
            admitted.clone(),
            stats.clone(),
        );
        let (links, link_frames) = Links::new(
            swarm.behaviour().link.new_control(),
            config.compact_links,
            stats.clone(),
        );
        let now = Instant::now();
        let bootstrap = config
            .bootstrap
            .iter()
            .map(|addr| Bootstrap {
                addr: addr.clone(),
                peer: match addr.iter().last() {
                    Some(Protocol::P2p(peer)) => Some(peer),
                    _ => None,
                },
                dialing: None,
                next_attempt: now,
                backoff: config.redial_backoff_min,
                disabled: false,
            })
            .collect();
        let mut book = PeerBook::new(
            config.max_known_peers,
            config.redial_backoff_min,
            config.redial_backoff_max,
        );
        if let Some(path) = &config.peers_file {
            match peers::load(path) {
                Ok(file) => {
                    for (peer, addrs) in file.entries() {
                        if peer != local && book.learn(peer, addrs, now).is_err() {
                            stats.discovery_dropped("book_full");
                        }
                    }
                    if book.len() > 0 {
                        tracing::info!(
                            peers = book.len(),
                            file = %path.display(),
                            "dialling the peers known from the last run"
                        );
                    }
                }
                Err(e) => tracing::warn!(
                    file = %path.display(),
                    error = %e,
                    "the known peers file is unreadable; ignored (it is rewritten as peers connect)"
                ),
            }
            // What was read is on disk already.
            book.take_dirty();
        }
        Ok(Driver {
            swarm,
            local,
            topic: cluster_topic(&config.cluster_id).hash(),
            cluster_id: config.cluster_id,
            listen: config.listen,
            allowlist: config.allowlist,
            peers: BTreeMap::new(),
            foreign: BTreeSet::new(),
            bootstrap,
            backoff_min: config.redial_backoff_min,
            backoff_max: config.redial_backoff_max,
            identify_timeout: config.identify_timeout,
            stats,
            events,
            in_flight: 0,
            has_psk,
            warned: BTreeSet::new(),
            parts: codec::Reassembler::new(),
            book,
            peers_file: config.peers_file,
            last_save: None,
            last_lookup: None,
            lookup_wanted: false,
            links,
            tunnels,
            admitted,
            link_frames: Some(link_frames),
        })
    }

    /// The transport's API tunnels (`tunnel.rs`).
    pub(super) fn tunnels(&self) -> ApiTunnels {
        self.tunnels.clone()
    }

    /// Binds every listen address and waits until each listener reported at least one address.
    /// Other swarm events that happen meanwhile are handled as usual.
    pub(super) async fn listen(&mut self) -> Result<Vec<Multiaddr>, TransportError> {
        // `ListenerId` is neither `Ord` nor `Hash`; a few listeners fit a vector.
        let mut waiting: Vec<(ListenerId, Multiaddr)> = Vec::new();
        // Every port is probed before any is bound, so two addresses of this node on one port
        // (IPv4 and IPv6) do not refuse each other.
        for addr in &self.listen {
            probe_port(addr)?;
        }
        for addr in self.listen.clone() {
            let id = self
                .swarm
                .listen_on(addr.clone())
                .map_err(|e| TransportError::Listen {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
            waiting.push((id, addr));
        }
        let mut bound = Vec::new();
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        while !waiting.is_empty() {
            let event = tokio::time::timeout_at(deadline, self.swarm.select_next_some())
                .await
                .map_err(|_| {
                    TransportError::Io(format!(
                        "listeners did not report an address within {LISTEN_TIMEOUT:?}: {:?}",
                        waiting.iter().map(|(_, a)| a).collect::<Vec<_>>()
                    ))
                })?;
            match event {
                SwarmEvent::NewListenAddr {
                    listener_id,
                    address,
                } => {
                    waiting.retain(|(id, _)| *id != listener_id);
                    self.stats.listening(&address, true);
                    bound.push(address);
                }
                SwarmEvent::ListenerError { listener_id, error }
                    if waiting.iter().any(|(id, _)| *id == listener_id) =>
                {
                    return Err(TransportError::Listen {
                        addr: listen_addr(&waiting, listener_id),
                        reason: error.to_string(),
                    });
                }
                SwarmEvent::ListenerClosed {
                    listener_id,
                    reason,
                    ..
                } if waiting.iter().any(|(id, _)| *id == listener_id) => {
                    return Err(TransportError::Listen {
                        addr: listen_addr(&waiting, listener_id),
                        reason: match reason {
                            Ok(()) => "listener closed".to_owned(),
                            Err(e) => e.to_string(),
                        },
                    });
                }
                other => self.on_swarm_event(other).await,
            }
        }
        // Every interface of a wildcard listener, not only the first it reported: the start
        // line and `chorus status` are where an operator reads the address to join at (issue
        // 54). Addresses that come later still reach `chorus status` (`Libp2pStats`).
        if self.listen.iter().any(peers::is_unspecified) {
            let mut settle = Instant::now() + LISTEN_SETTLE;
            while let Ok(event) =
                tokio::time::timeout_at(settle.min(deadline), self.swarm.select_next_some()).await
            {
                match event {
                    SwarmEvent::NewListenAddr { address, .. } => {
                        self.stats.listening(&address, true);
                        bound.push(address);
                        settle = Instant::now() + LISTEN_SETTLE;
                    }
                    other => self.on_swarm_event(other).await,
                }
            }
        }
        Ok(bound)
    }

    /// Runs until the command channel closes (the transport handle was dropped).
    pub(super) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut tick = tokio::time::interval(REDIAL_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut link_frames = self.link_frames.take().expect("run once");
        loop {
            tokio::select! {
                Some((peer, frame)) = link_frames.recv() => self.on_link_frame(peer, frame).await,
                command = commands.recv() => match command {
                    Some(Command::Stop) => {
                        self.linger().await;
                        break;
                    }
                    Some(command) => self.on_command(command),
                    None => break,
                },
                event = self.swarm.select_next_some() => self.on_swarm_event(event).await,
                _ = tick.tick() => {
                    self.close_unidentified();
                    self.redial();
                    self.redial_known();
                    self.lookup();
                    self.save_peers();
                }
            }
        }
        tracing::debug!("libp2p driver stopped");
    }

    /// Keeps the swarm running until the direct messages sent are acknowledged (or failed),
    /// between [`STOP_LINGER_MIN`] and [`STOP_LINGER`].
    async fn linger(&mut self) {
        let start = Instant::now();
        let until = start + STOP_LINGER;
        loop {
            let now = Instant::now();
            let sent = self.in_flight == 0 && self.links.pending() == 0;
            if now >= until || (sent && now >= start + STOP_LINGER_MIN) {
                return;
            }
            // Links are written by tasks of their own: look again soon.
            let wake = if sent {
                start + STOP_LINGER_MIN
            } else if self.links.pending() > 0 {
                (now + Duration::from_millis(2)).min(until)
            } else {
                until
            };
            tokio::select! {
                event = self.swarm.select_next_some() => self.on_swarm_event(event).await,
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    // ---- commands --------------------------------------------------------------------------

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Send {
                to,
                frames,
                compact,
            } => {
                if to == self.local {
                    self.stats.send_failed("self");
                    return;
                }
                // A message with a compact form is one frame.
                for json in frames {
                    let compact = compact.clone();
                    self.send_direct(to, OutFrame { json, compact });
                }
            }
            Command::Broadcast {
                mut frames,
                compact,
            } if frames.len() == 1 => {
                let json = frames.pop().expect("one frame");
                self.broadcast(OutFrame { json, compact });
            }
            // A message in parts goes to each connected peer directly, not by gossip:
            // gossipsub 0.50 checks all the bytes it has read from a stream, not one message,
            // against `max_transmit_size`, so parts published back to back break the stream
            // (seen in `an_electorate_too_large_for_a_frame_travels_in_parts`). Relaying them
            // through the mesh would also multiply megabytes. A peer further away learns the
            // electorate by WHOAMI when a later heartbeat names its version.
            Command::Broadcast { frames, .. } => {
                let peers: Vec<PeerId> = self.peers.keys().copied().collect();
                for peer in &peers {
                    for bytes in &frames {
                        let frame = OutFrame {
                            json: bytes.clone(),
                            compact: None,
                        };
                        self.links.send(*peer, frame);
                    }
                }
                self.stats.broadcast_linked(peers.len() as u64);
            }
            // Handled by `run`.
            Command::Stop => {}
        }
    }

    /// One message to one peer: on its link while connected, else by request-response (which
    /// dials it: a reply to a message relayed from a peer this node has no connection with).
    fn send_direct(&mut self, to: PeerId, frame: OutFrame) {
        if self.peers.contains_key(&to) {
            self.links.send(to, frame);
            return;
        }
        let bytes = frame.json;
        self.stats.bytes_out("direct", bytes.len() as u64);
        self.swarm
            .behaviour_mut()
            .direct
            .send_request(&to, Frame::Bytes(bytes));
        self.in_flight += 1;
    }

    /// Whether this node is connected to every peer it knows of (its peer book and bootstrap
    /// addresses): then a broadcast reaches each on its link, and gossipsub's relays would
    /// only repeat it. Otherwise some peer may be reachable only through another, and the
    /// broadcast goes by gossip.
    fn reaches_everyone(&self) -> bool {
        !self.peers.is_empty()
            && self.book.peers().all(|p| self.peers.contains_key(p))
            && self.bootstrap.iter().all(|b| {
                b.disabled
                    || b.peer
                        .is_some_and(|p| p == self.local || self.peers.contains_key(&p))
            })
    }

    /// A broadcast: on every connected peer's link while this node reaches everyone it knows
    /// ([`Driver::reaches_everyone`]); otherwise published on gossipsub, with direct copies to
    /// the connected peers gossipsub would miss (those whose SUBSCRIBE has not arrived yet, or
    /// that do not speak gossipsub).
    fn broadcast(&mut self, frame: OutFrame) {
        if self.reaches_everyone() {
            let peers: Vec<PeerId> = self.peers.keys().copied().collect();
            for peer in &peers {
                self.links.send(*peer, frame.clone());
            }
            self.stats.broadcast_linked(peers.len() as u64);
            return;
        }
        let bytes = frame.json.clone();
        self.stats.bytes_out("gossip", bytes.len() as u64);
        let behaviour = self.swarm.behaviour_mut();
        let subscribed: BTreeSet<PeerId> = behaviour
            .gossipsub
            .all_peers()
            .filter(|(_, topics)| topics.contains(&&self.topic))
            .map(|(peer, _)| *peer)
            .collect();
        let connected: Vec<PeerId> = self.peers.keys().copied().collect();
        let mut direct: Vec<PeerId> = connected
            .iter()
            .filter(|p| !subscribed.contains(p))
            .copied()
            .collect();
        match behaviour
            .gossipsub
            .publish(self.topic.clone(), bytes.clone())
        {
            Ok(_) => self.stats.broadcast_gossiped(),
            // Nobody subscribed yet: the direct copies cover every connected peer.
            Err(gossipsub::PublishError::NoPeersSubscribedToTopic) => {}
            Err(e) => {
                tracing::debug!(error = %e, "gossipsub publish failed; sending directly");
                direct = connected;
            }
        }
        for peer in &direct {
            self.links.send(*peer, frame.clone());
        }
        self.stats.broadcast_direct(direct.len() as u64);
    }

    /// Closes the connections of every peer connected for `identify_timeout` and still not
    /// identified, counted as `unidentified`. Identify asks once per connection and, when that
    /// fails, again only after its interval (5 minutes): until then every message from the
    /// peer was held here and dropped (the soak found a node whose tasks so waited > 240 s).
    fn close_unidentified(&mut self) {
        let now = Instant::now();
        let stale: Vec<PeerId> = self
            .peers
            .iter()
            .filter(|(_, s)| {
                !s.up
                    && s.since
                        .is_some_and(|t| now.saturating_duration_since(t) >= self.identify_timeout)
            })
            .map(|(p, _)| *p)
            .collect();
        for peer in stale {
            tracing::debug!(%peer, "connected without identifying for too long; disconnected");
            self.stats.connection_failed("unidentified");
            if let Some(s) = self.peers.get_mut(&peer) {
                // Counted once: the closes may take a moment to be reported.
                s.since = None;
            }
            let _ = self.swarm.disconnect_peer_id(peer);
        }
    }

    // ---- bootstrap ---------------------------------------------------------------------------

    /// Dials each bootstrap address whose peer is not connected, no dial is in flight and the
    /// backoff has passed.
    fn redial(&mut self) {
        let now = Instant::now();
        for b in &mut self.bootstrap {
            if b.disabled || b.dialing.is_some() {
                continue;
            }
            if let Some(peer) = b.peer {
                if self.peers.get(&peer).is_some_and(|s| s.up) {
                    // Only a peer that identified as one of ours resets the backoff, so an
                    // address that leads to a foreign node is retried ever more slowly.
                    b.backoff = self.backoff_min;
                    continue;
                }
                if self.swarm.is_connected(&peer) {
                    continue;
                }
            }
            if now < b.next_attempt {
                continue;
            }
            let opts = match b.peer {
                Some(peer) => DialOpts::peer_id(peer)
                    .addresses(vec![b.addr.clone()])
                    .condition(PeerCondition::DisconnectedAndNotDialing)
                    .build(),
                None => DialOpts::unknown_peer_id().address(b.addr.clone()).build(),
            };
            let id = opts.connection_id();
            b.next_attempt = now + b.backoff;
            b.backoff = (b.backoff * 2).min(self.backoff_max);
            match self.swarm.dial(opts) {
                Ok(()) => b.dialing = Some(id),
                Err(DialError::DialPeerConditionFalse(_)) => {}
                Err(DialError::LocalPeerId { .. }) => b.disabled = true,
                Err(e) => tracing::debug!(addr = %b.addr, error = %e, "bootstrap dial failed"),
            }
        }
    }

    fn on_dial_settled(&mut self, connection_id: ConnectionId, peer: Option<PeerId>, ok: bool) {
        self.book.dial_settled(connection_id, ok);
        for b in &mut self.bootstrap {
            if b.dialing == Some(connection_id) {
                b.dialing = None;
                if ok && b.peer.is_none() {
                    b.peer = peer;
                }
            }
        }
    }

    // ---- known peers ---------------------------------------------------------------------------

    /// Dials known peers that are not connected, once their backoff has passed, a few at once.
    fn redial_known(&mut self) {
        let now = Instant::now();
        let room = MAX_DIALS_IN_FLIGHT.saturating_sub(self.book.dialing());
        if room == 0 {
            return;
        }
        let swarm = &self.swarm;
        let due = self.book.due(now, |p| swarm.is_connected(p), room);
        for peer in due {
            let Some(addrs) = self.book.get(&peer).map(|k| k.addrs.clone()) else {
                continue;
            };
            let opts = DialOpts::peer_id(peer)
                .addresses(addrs)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            let id = opts.connection_id();
            match self.swarm.dial(opts) {
                Ok(()) => self.book.dial_started(&peer, id, now),
                Err(DialError::DialPeerConditionFalse(_)) => {}
                Err(e) => {
                    // Counted as a failed attempt, so the backoff grows.
                    self.book.dial_started(&peer, id, now);
                    self.book.dial_settled(id, false);
                    tracing::debug!(%peer, error = %e, "known peer dial failed");
                }
            }
        }
    }

    /// After a peer was lost, asks Kademlia for the others sooner than its periodic lookup.
    fn lookup(&mut self) {
        if !self.lookup_wanted {
            return;
        }
        let now = Instant::now();
        if self
            .last_lookup
            .is_some_and(|t| now.duration_since(t) < REBOOTSTRAP_MIN)
        {
            return;
        }
        self.lookup_wanted = false;
        self.last_lookup = Some(now);
        // An empty table is no error: the known peers and bootstrap addresses are still dialled.
        let _ = self.swarm.behaviour_mut().kad.bootstrap();
    }

    /// Writes the peers file when the known peers changed, at most every [`SAVE_EVERY`]; off
    /// the driver's task, since it syncs to disk.
    fn save_peers(&mut self) {
        let Some(path) = &self.peers_file else {
            return;
        };
        let now = Instant::now();
        if self
            .last_save
            .is_some_and(|t| now.duration_since(t) < SAVE_EVERY)
            || !self.book.take_dirty()
        {
            return;
        }
        self.last_save = Some(now);
        let (path, content, stats) = (path.clone(), self.book.to_file(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = peers::save(&path, &content) {
                stats.discovery_dropped("file_write");
                tracing::warn!(file = %path.display(), error = %e, "could not write the known peers file");
            }
        });
    }

    /// An admitted peer's dialable listen addresses go to the known peers, the swarm's
    /// addresses for dials by peer id (`addresses.rs`) and the Kademlia table — which answers
    /// other nodes' lookups, so it holds a loopback address only of a peer that has no other:
    /// a node on another machine must not learn (and dial) `127.0.0.1` (issue 54).
    fn learn_peer(&mut self, peer: PeerId, listen_addrs: &[Multiaddr]) {
        let loopback_ok = self
            .peers
            .get(&peer)
            .and_then(|s| s.remote.as_ref())
            .is_some_and(peers::is_loopback);
        let addrs: Vec<Multiaddr> = listen_addrs
            .iter()
            .filter_map(|a| peers::dialable(a, loopback_ok))
            .take(peers::MAX_ADDRS_PER_PEER)
            .collect();
        if addrs.is_empty() {
            self.stats.discovery_dropped("no_address");
            tracing::debug!(%peer, listen_addrs = %list(listen_addrs),
                "peer advertises no dialable address");
            return;
        }
        for addr in &addrs {
            self.swarm.add_peer_address(peer, addr.clone());
        }
        let kad = &mut self.swarm.behaviour_mut().kad;
        let mut in_table = false;
        for addr in peers::advertisable(&addrs) {
            match kad.add_address(&peer, addr.clone()) {
                kad::RoutingUpdate::Success | kad::RoutingUpdate::Pending => in_table = true,
                kad::RoutingUpdate::Failed => {}
            }
        }
        if !in_table {
            self.stats.discovery_dropped("table_full");
        }
        if self.book.learn(peer, addrs, Instant::now()).is_err() {
            self.stats.discovery_dropped("book_full");
        }
        self.book.reached(&peer);
    }

    fn on_kad_event(&mut self, event: kad::Event) {
        match event {
            kad::Event::RoutingUpdated {
                peer,
                is_new_peer: true,
                ..
            } => tracing::debug!(%peer, "peer added to the Kademlia table"),
            kad::Event::OutboundQueryProgressed {
                result: kad::QueryResult::GetClosestPeers(Ok(ok)),
                ..
            } => {
                // The lookup dialled the peers it asked; dial the rest of those it found.
                // Their addresses come from other nodes' tables: a loopback one names this
                // machine only when the nodes that answered share it (a local cluster).
                let loopback_ok = self.has_loopback_peer();
                let mut dialled = 0;
                for found in ok.peers {
                    if dialled >= MAX_DISCOVERED_DIALS {
                        break;
                    }
                    if found.peer_id == self.local
                        || self.foreign.contains(&found.peer_id)
                        || self.swarm.is_connected(&found.peer_id)
                    {
                        continue;
                    }
                    let addrs: Vec<Multiaddr> = found
                        .addrs
                        .iter()
                        .filter_map(|a| peers::dialable(a, loopback_ok))
                        .take(peers::MAX_ADDRS_PER_PEER)
                        .collect();
                    if addrs.is_empty() {
                        continue;
                    }
                    dialled += 1;
                    let opts = DialOpts::peer_id(found.peer_id)
                        .addresses(addrs)
                        .condition(PeerCondition::DisconnectedAndNotDialing)
                        .build();
                    let _ = self.swarm.dial(opts);
                }
            }
            kad::Event::OutboundQueryProgressed {
                result: kad::QueryResult::Bootstrap(result),
                ..
            } => {
                tracing::trace!(?result, "Kademlia lookup step");
            }
            _ => {}
        }
    }

    // ---- swarm events ------------------------------------------------------------------------

    async fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::Behaviour(event) => self.on_behaviour_event(event).await,
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                ..
            } => {
                self.on_dial_settled(connection_id, Some(peer_id), true);
                if self
                    .allowlist
                    .as_ref()
                    .is_some_and(|allowed| !allowed.contains(&peer_id))
                {
                    // The allowlist behaviour denies these before they are established; this
                    // only guards against a future change of that.
                    self.stats.connection_denied("not_allowed");
                    self.swarm.close_connection(connection_id);
                    return;
                }
                tracing::debug!(peer = %peer_id, addr = %endpoint.get_remote_address(), "connected");
                let state = self.peers.entry(peer_id).or_default();
                state.connections.insert(connection_id);
                state.since.get_or_insert_with(Instant::now);
                state
                    .remote
                    .get_or_insert_with(|| endpoint.get_remote_address().clone());
                self.publish_peer_counts();
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                cause,
                ..
            } => {
                let Some(state) = self.peers.get_mut(&peer_id) else {
                    return;
                };
                state.connections.remove(&connection_id);
                if num_established == 0 || state.connections.is_empty() {
                    let was_up = state.up;
                    self.peers.remove(&peer_id);
                    self.links.disconnected(&peer_id);
                    self.admitted.set(peer_id, false);
                    self.parts.forget(&peer_id);
                    self.stats.set_peer_http(peer_id.to_base58(), None);
                    tracing::debug!(peer = %peer_id,
                        cause = cause.as_ref().map(tracing::field::display), "disconnected");
                    if was_up {
                        self.lookup_wanted = true;
                        self.emit(TransportEvent::PeerDown {
                            peer: node_id(&peer_id),
                        })
                        .await;
                    }
                }
                self.publish_peer_counts();
            }
            SwarmEvent::IncomingConnectionError {
                error,
                peer_id,
                send_back_addr,
                ..
            } => match error {
                ListenError::Denied { cause } => {
                    let reason = denial_reason(&cause);
                    self.stats.connection_denied(reason);
                    tracing::debug!(peer_id = peer_id.map(tracing::field::display),
                        %send_back_addr, reason, "incoming connection denied");
                }
                error => {
                    let text = error_chain(&error);
                    let reason = failure_reason(&text);
                    self.stats.connection_failed(reason);
                    // Per remote IP: the port of an incoming connection changes every time.
                    let from = match send_back_addr.iter().next() {
                        Some(Protocol::Ip4(ip)) => ip.to_string(),
                        Some(Protocol::Ip6(ip)) => ip.to_string(),
                        _ => send_back_addr.to_string(),
                    };
                    self.warn_failure(format!("from {from}"), true, reason, &text);
                }
            },
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                peer_id,
                error,
            } => {
                self.on_dial_settled(connection_id, peer_id, false);
                match &error {
                    DialError::Denied { cause } => {
                        self.stats.connection_denied(denial_reason(cause));
                    }
                    DialError::LocalPeerId { .. } => {
                        for b in &mut self.bootstrap {
                            if b.dialing.is_none() && b.peer.is_none() {
                                // An address without a peer id that led back to us.
                                b.peer = Some(self.local);
                            }
                            if b.peer == Some(self.local) {
                                b.disabled = true;
                            }
                        }
                    }
                    DialError::DialPeerConditionFalse(_) | DialError::Aborted => {}
                    DialError::Transport(errors) => {
                        for (addr, e) in errors {
                            let text = error_chain(e);
                            let reason = failure_reason(&text);
                            self.stats.connection_failed(reason);
                            self.warn_failure(format!("to {addr}"), false, reason, &text);
                        }
                    }
                    other => {
                        let text = other.to_string();
                        self.stats.connection_failed(failure_reason(&text));
                    }
                }
                tracing::debug!(peer_id = peer_id.map(tracing::field::display), %error,
                    "outgoing connection failed");
            }
            SwarmEvent::NewListenAddr { address, .. } => {
                tracing::debug!(%address, "listening");
                self.stats.listening(&address, true);
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                tracing::debug!(%address, "no longer listening");
                self.stats.listening(&address, false);
            }
            _ => {}
        }
    }

    async fn on_behaviour_event(&mut self, event: BehaviourEvent) {
        match event {
            BehaviourEvent::Direct(event) => self.on_direct_event(event).await,
            BehaviourEvent::Gossipsub(event) => self.on_gossip_event(event).await,
            BehaviourEvent::Identify(event) => self.on_identify_event(event).await,
            BehaviourEvent::Mdns(event) => self.on_mdns_event(event),
            BehaviourEvent::Kad(event) => self.on_kad_event(event),
            BehaviourEvent::Ping(libp2p::ping::Event {
                peer,
                connection,
                result: Err(failure),
            }) if !matches!(failure, libp2p::ping::Failure::Unsupported) => {
                // libp2p's ping reports a peer that missed two pings in a row and leaves the
                // connection open: a peer paused, or cut off behind a partition, would stay up
                // for as long as TCP holds (its tasks and live sandboxes placed there all that
                // time). Closed, so both ends hear the peer down and reconnect when it answers.
                // (The second failure is a timeout or, on a fresh stream, a negotiation that
                // timed out. A peer that does not speak ping at all is no node of ours: left
                // alone.)
                tracing::warn!(peer = %peer, %failure,
                    "a peer left two pings unanswered: its connection is closed");
                self.swarm.close_connection(connection);
            }
            BehaviourEvent::Ping(_) | BehaviourEvent::Link(()) => {}
            BehaviourEvent::Allow(never) => match never {},
            BehaviourEvent::Limits(never) => match never {},
            BehaviourEvent::Addresses(never) => match never {},
        }
    }

    async fn on_direct_event(&mut self, event: request_response::Event<Frame, ()>) {
        match event {
            request_response::Event::Message {
                peer,
                message:
                    request_response::Message::Request {
                        request, channel, ..
                    },
                ..
            } => {
                // Every request is acknowledged, whatever it holds: the protocol is
                // fire-and-forget, and the ack only frees the sender's stream.
                let _ = self.swarm.behaviour_mut().direct.send_response(channel, ());
                match request {
                    Frame::Bytes(bytes) => {
                        self.stats.bytes_in("direct", bytes.len() as u64);
                        self.on_bytes(peer, &bytes).await
                    }
                    Frame::Refused(e) => {
                        tracing::debug!(%peer, error = %outside(&e), "direct frame refused");
                        self.reject(Some(peer), e.kind()).await;
                    }
                }
            }
            request_response::Event::Message {
                message: request_response::Message::Response { .. },
                ..
            } => self.in_flight = self.in_flight.saturating_sub(1),
            request_response::Event::ResponseSent { .. } => {}
            request_response::Event::OutboundFailure { peer, error, .. } => {
                self.in_flight = self.in_flight.saturating_sub(1);
                let reason = match error {
                    OutboundFailure::DialFailure => "dial",
                    OutboundFailure::Timeout => "timeout",
                    OutboundFailure::ConnectionClosed => "closed",
                    OutboundFailure::UnsupportedProtocols => "unsupported",
                    OutboundFailure::Io(_) => "io",
                };
                self.stats.send_failed(reason);
                tracing::debug!(%peer, %error, "direct message not delivered");
            }
            // Read errors (a peer hanging up mid-frame) never get here: request-response only
            // logs them. What does is a failure after a request was read, e.g. the ack timing out.
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "inbound direct stream failed");
            }
        }
    }

    /// A frame read from `peer`'s link.
    async fn on_link_frame(&mut self, peer: PeerId, frame: Frame) {
        match frame {
            Frame::Bytes(bytes) => {
                self.stats.bytes_in("link", bytes.len() as u64);
                self.on_bytes(peer, &bytes).await;
            }
            Frame::Refused(e) => {
                tracing::debug!(%peer, error = %outside(&e), "link frame refused; link closed");
                self.reject(Some(peer), e.kind()).await;
            }
        }
    }

    async fn on_gossip_event(&mut self, event: gossipsub::Event) {
        match event {
            gossipsub::Event::Message {
                propagation_source,
                message,
                ..
            } => match message.source {
                // Strict validation has checked the signature of `source` over the message.
                Some(source) if source == self.local => {}
                Some(source) => {
                    self.stats.bytes_in("gossip", message.data.len() as u64);
                    self.on_bytes(source, &message.data).await
                }
                None => self.reject(Some(propagation_source), "unsigned").await,
            },
            gossipsub::Event::Subscribed { peer_id, topic } => {
                tracing::trace!(peer = %peer_id, %topic, "peer subscribed");
            }
            gossipsub::Event::GossipsubNotSupported { peer_id } => {
                tracing::debug!(peer = %peer_id, "peer does not speak gossipsub; broadcasts go direct");
            }
            _ => {}
        }
    }

    async fn on_identify_event(&mut self, event: identify::Event) {
        match event {
            identify::Event::Received { peer_id, info, .. } => {
                self.on_identified(peer_id, info).await;
            }
            identify::Event::Error {
                peer_id,
                connection_id,
                error,
            } => {
                tracing::debug!(peer = %peer_id, error = %outside(&error), "identify failed");
                // Identify would not ask on this connection again for 5 minutes; a peer not
                // up meanwhile has every message held. Closed, it is dialled afresh.
                if self.peers.get(&peer_id).is_some_and(|s| !s.up) {
                    self.stats.connection_failed("unidentified");
                    self.swarm.close_connection(connection_id);
                }
            }
            identify::Event::Sent { .. } | identify::Event::Pushed { .. } => {}
        }
    }

    fn on_mdns_event(&mut self, event: mdns::Event) {
        let mdns::Event::Discovered(found) = event else {
            return;
        };
        for (peer, addr) in found {
            if peer == self.local
                || self.foreign.contains(&peer)
                || self
                    .allowlist
                    .as_ref()
                    .is_some_and(|allowed| !allowed.contains(&peer))
                || self.swarm.is_connected(&peer)
            {
                continue;
            }
            let opts = DialOpts::peer_id(peer)
                .addresses(vec![addr])
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            if let Err(e) = self.swarm.dial(opts) {
                tracing::debug!(%peer, error = %e, "mDNS dial failed");
            }
        }
    }

    // ---- peers and messages ----------------------------------------------------------------

    async fn on_identified(&mut self, peer: PeerId, info: identify::Info) {
        if !self.peers.contains_key(&peer) {
            return;
        }
        let advertised = (info.protocol_version == IDENTIFY_PROTOCOL)
            .then(|| serde_json::from_str::<Advertisement>(&info.agent_version).ok())
            .flatten();
        let peer_info: PeerInfo = match advertised {
            Some(ad) if ad.cluster == self.cluster_id => {
                // Bounded: one entry per connected peer (removed when it disconnects), and
                // the address itself is short or dropped.
                let remote = self.peers.get(&peer).and_then(|s| s.remote.as_ref());
                let http = ad.http.and_then(|h| {
                    match (h.len() <= 256).then(|| reachable_http(&h, remote)) {
                        Some(Ok(usable)) => usable,
                        Some(Err(())) | None => {
                            self.stats.rejected("http_address");
                            None
                        }
                    }
                });
                self.stats.set_peer_http(peer.to_base58(), http);
                ad.info
            }
            Some(ad) => {
                if self.first_warning(format!("cluster {peer}")) {
                    tracing::warn!(
                        %peer,
                        addrs = %list(info.listen_addrs.iter().map(outside)),
                        "a peer of another cluster (\"{}\"; this node's is {:?}) connected: \
                         disconnecting. Check --cluster-id / protocol.cluster_id on both nodes",
                        outside(&ad.cluster),
                        self.cluster_id
                    );
                } else {
                    tracing::debug!(%peer, cluster = %outside(&ad.cluster), "peer of another cluster; disconnecting");
                }
                self.exclude(peer, "wrong_cluster").await;
                return;
            }
            None => {
                tracing::debug!(
                    %peer,
                    protocol = %outside(&info.protocol_version),
                    agent = %outside(&info.agent_version),
                    "peer does not identify as a CHORUS node; disconnecting"
                );
                self.exclude(peer, "identify").await;
                return;
            }
        };
        self.learn_peer(peer, &info.listen_addrs);
        let Some(state) = self.peers.get_mut(&peer) else {
            return;
        };
        if state.up {
            return;
        }
        state.up = true;
        self.admitted.set(peer, true);
        let pending = std::mem::take(&mut state.pending);
        let from = node_id(&peer);
        self.publish_peer_counts();
        self.emit(TransportEvent::PeerUp {
            peer: from.clone(),
            info: peer_info,
        })
        .await;
        for msg in pending {
            self.deliver(from.clone(), msg).await;
        }
    }

    /// Rejects a peer that is not a node of this cluster and closes its connections.
    async fn exclude(&mut self, peer: PeerId, reason: &'static str) {
        if self.foreign.len() >= MAX_FOREIGN_PEERS {
            self.foreign.clear();
        }
        self.foreign.insert(peer);
        // A stale entry of the peers file (a data directory reused by another cluster) or
        // an address that now leads elsewhere: not re-dialled.
        self.book.forget(&peer);
        self.reject(Some(peer), reason).await;
        if let Some(state) = self.peers.get_mut(&peer) {
            state.pending.clear();
        }
        let _ = self.swarm.disconnect_peer_id(peer);
    }

    /// Authenticated bytes from `from`: checked against the allowlist, decoded, and delivered
    /// (or held until the peer's `PeerUp`).
    async fn on_bytes(&mut self, from: PeerId, bytes: &[u8]) {
        if self
            .allowlist
            .as_ref()
            .is_some_and(|allowed| !allowed.contains(&from))
            || self.foreign.contains(&from)
        {
            self.reject(Some(from), "not_allowed").await;
            return;
        }
        let msg = match self.parts.decode(&self.cluster_id, &from, bytes) {
            Ok(Some(msg)) => msg,
            // A part of a larger message; the rest is still to come.
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(peer = %from, error = %outside(&e), "undecodable message");
                self.reject(Some(from), e.kind()).await;
                return;
            }
        };
        match self.peers.get_mut(&from) {
            Some(state) if !state.up => {
                if state.pending.len() >= MAX_PENDING_PER_PEER {
                    self.reject(Some(from), "queue_full").await;
                } else {
                    state.pending.push_back(msg);
                }
            }
            // Up, or a gossipsub message relayed from a peer we have no connection with.
            _ => self.deliver(node_id(&from), msg).await,
        }
    }

    async fn deliver(&mut self, from: chorus_core::NodeId, msg: Message) {
        self.stats.message_in(msg.kind());
        self.emit(TransportEvent::Message { from, msg }).await;
    }

    async fn reject(&mut self, from: Option<PeerId>, reason: &'static str) {
        self.stats.rejected(reason);
        self.emit(TransportEvent::Rejected {
            from: from.as_ref().map(node_id),
            reason,
        })
        .await;
    }

    async fn emit(&mut self, event: TransportEvent) {
        // Waiting here applies back-pressure from a slow runtime loop to the network instead of
        // dropping peer events. An error means the handle is gone and the driver about to stop.
        let _ = self.events.send(event).await;
    }

    /// Whether `key` has not been warned about yet (and remembers it).
    fn first_warning(&mut self, key: String) -> bool {
        if self.warned.len() >= MAX_WARNED {
            self.warned.clear();
        }
        self.warned.insert(key)
    }

    /// Logs a failed connection: the first handshake failure per address at WARN with what
    /// its error says of the cause, everything else at DEBUG (unreachable peers are normal
    /// while they start, and an incoming handshake the other end gave up is most often a dial
    /// it no longer needed).
    fn warn_failure(&mut self, whom: String, incoming: bool, reason: &'static str, error: &str) {
        let cause = match reason {
            "handshake" | "timeout" => handshake_cause(error, incoming, self.has_psk),
            _ => None,
        };
        // An address and an error a peer may have had a hand in.
        let (whom, error) = (outside(whom), outside(error));
        if let Some(cause) = cause.filter(|_| self.first_warning(format!("failed {whom}"))) {
            tracing::warn!(
                reason,
                "connection {whom} failed ({reason}): {cause} (further failures of this \
                 address are logged at debug level): {error}"
            );
        } else {
            tracing::debug!(reason, "connection {whom} failed: {error}");
        }
    }

    /// Whether a peer is connected over loopback (runs on this machine).
    fn has_loopback_peer(&self) -> bool {
        self.peers
            .values()
            .any(|s| s.remote.as_ref().is_some_and(peers::is_loopback))
    }

    fn publish_peer_counts(&self) {
        let up = self.peers.values().filter(|p| p.up).count();
        self.stats.set_peers(self.peers.len() as u64, up as u64);
    }
}

fn listen_addr(waiting: &[(ListenerId, Multiaddr)], listener: ListenerId) -> Multiaddr {
    waiting
        .iter()
        .find(|(id, _)| *id == listener)
        .map(|(_, a)| a.clone())
        .unwrap_or_else(Multiaddr::empty)
}

/// Refuses a TCP listen address whose port another process already listens on. libp2p's TCP
/// listener sets `SO_REUSEPORT` (in libp2p-tcp 0.45 always, with no option to turn it off), so
/// without this check a second node would bind the same port and share its connections. A
/// plain bind (no `SO_REUSEPORT`) fails on a port held by any listener, libp2p's included.
fn probe_port(addr: &Multiaddr) -> Result<(), TransportError> {
    let mut parts = addr.iter();
    let ip: std::net::IpAddr = match parts.next() {
        Some(Protocol::Ip4(ip)) => ip.into(),
        Some(Protocol::Ip6(ip)) => ip.into(),
        _ => return Ok(()),
    };
    let Some(Protocol::Tcp(port)) = parts.next() else {
        return Ok(());
    };
    if port == 0 {
        return Ok(());
    }
    let addr_in_use = |e: &std::io::Error| e.kind() == std::io::ErrorKind::AddrInUse;
    match bind_like_libp2p(std::net::SocketAddr::new(ip, port)) {
        // Dropped at once: a listener that accepted nothing leaves no TIME_WAIT behind.
        Ok(_probe) => Ok(()),
        Err(e) if addr_in_use(&e) => Err(TransportError::Listen {
            addr: addr.clone(),
            reason: format!(
                "TCP port {port} is already in use (another chorus node or another program \
                 listens on it; stop it or choose another port)"
            ),
        }),
        // Anything else (no such interface, permissions) is libp2p's to report.
        Err(_) => Ok(()),
    }
}

/// A listening socket set up as libp2p-tcp sets up its own (IPv6 sockets v6-only, address
/// reuse for TIME_WAIT), except for `SO_REUSEPORT`.
fn bind_like_libp2p(addr: std::net::SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1)?;
    Ok(socket)
}

/// A peer's advertised API address as this node asks it (`/cluster`, the console's cluster
/// table, `chorus status --cluster`): the scheme, port and pin it advertised, at the IP its
/// connection comes from. So a peer chooses only a port on its own address: holding the cluster
/// key does not let it point this node's requests — or an operator's browser or CLI — at any
/// other host. `None` (counted as `http_address`) for anything but `[http[s]://]IP:PORT[#…]`.
/// An honest node advertises the address its API is bound to: the unspecified one (`0.0.0.0`)
/// or the one its connections come from. One bound to its loopback while its connection comes
/// from another host is `Ok(None)`: not reachable from here, and no fault of the peer's (the
/// docs suggest a loopback API; asking its address here was refused, which read as "down",
/// issue 54 item 8).
fn reachable_http(advertised: &str, remote: Option<&Multiaddr>) -> Result<Option<String>, ()> {
    use libp2p::multiaddr::Protocol;
    let (scheme, rest) = match advertised.split_once("://") {
        Some((s @ ("http" | "https"), r)) => (Some(s), r),
        Some(_) => return Err(()),
        None => (None, advertised),
    };
    let end = rest.find('#').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let bound = authority.parse::<std::net::SocketAddr>().map_err(drop)?;
    let seen = remote
        .and_then(|r| {
            r.iter().find_map(|p| match p {
                Protocol::Ip4(ip) => Some(std::net::IpAddr::V4(ip)),
                Protocol::Ip6(ip) => Some(std::net::IpAddr::V6(ip)),
                _ => None,
            })
        })
        .ok_or(())?;
    if bound.ip().is_loopback() && !seen.is_loopback() {
        return Ok(None);
    }
    let at = std::net::SocketAddr::new(seen, bound.port());
    Ok(Some(match scheme {
        Some(s) => format!("{s}://{at}{tail}"),
        None => format!("{at}{tail}"),
    }))
}

/// An error and its sources on one line (libp2p's outer transport errors often display as
/// nothing at all; the cause is in the chain).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !part.is_empty() && !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// A label for why a connection failed, from the error's text (libp2p's transport errors are
/// nested and mostly opaque; their messages are stable enough to sort into a few causes).
fn failure_reason(error: &str) -> &'static str {
    let e = error.to_ascii_lowercase();
    if e.contains("refused") {
        "refused"
    } else if e.contains("timed out") || e.contains("timeout") {
        "timeout"
    } else if e.contains("handshake")
        || e.contains("negotiat")
        || e.contains("noise")
        || e.contains("decrypt")
        || e.contains("protocol")
        || e.contains("unexpected eof")
        || e.contains("reset by peer")
        || e.contains("upgrade")
    {
        "handshake"
    } else {
        "other"
    }
}

/// What a failed handshake's error says of its cause, for the WARN line; `None` when it is
/// no cause for one. A key mismatch turns the bytes each side reads into garbage, which the
/// protocol negotiation or noise refuses ("invalid message", "invalid data", an impossible
/// frame length): only that is called a different key. An end that closed the connection
/// mid-handshake, or a handshake that never finished, may be one too, or something else —
/// said so; and an incoming handshake the other end closed is most often a dial it gave up
/// (it reached this node at another address at the same time, or dialled itself): not warned
/// of, since the other end, if it failed for a key, warns itself.
fn handshake_cause(error: &str, incoming: bool, has_psk: bool) -> Option<&'static str> {
    let e = error.to_ascii_lowercase();
    let garbled = ["invalid message", "invalid data", "frame length", "decrypt"]
        .iter()
        .any(|s| e.contains(s));
    let closed = ["reset by peer", "end of file", "eof", "broken pipe"]
        .iter()
        .any(|s| e.contains(s));
    let timeout = e.contains("timed out") || e.contains("timeout");
    Some(match (garbled, closed, timeout) {
        (true, _, _) if has_psk => {
            "the bytes it sent do not decode under this node's pre-shared key: the other node \
             has a different one (psk_file) or none"
        }
        (true, _, _) => {
            "the bytes it sent do not decode: the other node most likely requires a \
             pre-shared key (psk_file) that this one lacks, or it is not a CHORUS node"
        }
        (_, true, _) if incoming => return None,
        (_, true, _) => {
            "the other end closed the connection during the handshake: it may hold a \
             different pre-shared key (psk_file), or not be a CHORUS node"
        }
        (_, _, true) => {
            "the handshake did not finish in time: the other node may be overloaded, hold a \
             different pre-shared key (psk_file), or not be a CHORUS node"
        }
        _ => {
            "the handshake failed: a different pre-shared key (psk_file) or a peer that is not \
             a CHORUS node can cause this"
        }
    })
}

/// A short label for why a behaviour denied a connection.
fn denial_reason(cause: &ConnectionDenied) -> &'static str {
    if cause
        .downcast_ref::<allow_block_list::NotAllowed>()
        .is_some()
    {
        "not_allowed"
    } else if cause
        .downcast_ref::<connection_limits::Exceeded>()
        .is_some()
    {
        "limit"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::{handshake_cause, reachable_http};

    /// Issue 54: "a different pre-shared key" only where the error shows the bytes did not
    /// decode; an incoming handshake the other end closed (a dial it gave up, or a node that
    /// reached itself over loopback) is no warning. The errors are libp2p's, as seen between
    /// two transports with different keys (`transport_libp2p.rs`).
    #[test]
    fn a_different_key_is_named_only_when_the_bytes_did_not_decode() {
        let garbled = [
            "Listen error: Failed to negotiate transport protocol(s): Multistream select \
             failed: Protocol error: Received an invalid message.",
            "Handshake failed: invalid data",
            "Handshake failed: Maximum frame length exceeded",
        ];
        for e in garbled {
            for incoming in [true, false] {
                let cause = handshake_cause(e, incoming, true).unwrap();
                assert!(cause.contains("has a different one"), "{e}: {cause}");
                let cause = handshake_cause(e, incoming, false).unwrap();
                assert!(cause.contains("requires a pre-shared key"), "{e}: {cause}");
            }
        }
        let closed = [
            "Handshake failed: Connection reset by peer (os error 104)",
            "Listen error: Failed to negotiate transport protocol(s): Multistream select \
             failed: Protocol error: I/O error: unexpected end of file",
        ];
        for e in closed {
            assert_eq!(handshake_cause(e, true, true), None, "{e}");
            let cause = handshake_cause(e, false, true).unwrap();
            assert!(cause.contains("may hold a different"), "{e}: {cause}");
        }
        let cause = handshake_cause("Timeout has been reached", false, true).unwrap();
        assert!(cause.contains("did not finish in time"), "{cause}");
    }

    #[test]
    fn a_peers_api_is_asked_at_the_ip_its_connection_comes_from_and_nowhere_else() {
        let remote: libp2p::Multiaddr = "/ip4/10.0.0.2/tcp/7946".parse().unwrap();
        let r = Some(&remote);
        let at = |a: &str| reachable_http(a, r).ok().flatten();
        // Every interface, or the address it connects from: reached there.
        assert_eq!(at("0.0.0.0:7070").as_deref(), Some("10.0.0.2:7070"));
        assert_eq!(at("10.0.0.2:7070").as_deref(), Some("10.0.0.2:7070"));
        assert_eq!(
            at("https://0.0.0.0:7070#sha256=ab12").as_deref(),
            Some("https://10.0.0.2:7070#sha256=ab12")
        );
        let v6: libp2p::Multiaddr = "/ip6/fd00::2/tcp/7946".parse().unwrap();
        assert_eq!(
            reachable_http("[::]:7070", Some(&v6)).unwrap().as_deref(),
            Some("[fd00::2]:7070")
        );
        // Another host — a neighbour, a cloud metadata address — is never asked: only the
        // port is the peer's to choose.
        assert_eq!(at("10.0.0.9:7070").as_deref(), Some("10.0.0.2:7070"));
        // An API on the peer's own loopback (as the docs suggest) is not reachable from
        // another host: none, and not counted as a bad address (issue 54 item 8: asked at the
        // peer's IP, the refused connection read as a node that is down). From the same host
        // it is reached on the loopback its connection comes from.
        assert_eq!(reachable_http("127.0.0.1:7070", r), Ok(None));
        assert_eq!(reachable_http("[::1]:7070", r), Ok(None));
        let local: libp2p::Multiaddr = "/ip4/127.0.0.1/tcp/7946".parse().unwrap();
        assert_eq!(
            reachable_http("127.0.0.1:7071", Some(&local)),
            Ok(Some("127.0.0.1:7071".into()))
        );
        assert_eq!(
            at("http://169.254.169.254:80").as_deref(),
            Some("http://10.0.0.2:80")
        );
        // Names, paths smuggled into the authority, other schemes, no known connection: none.
        for bad in [
            "https://node.example:7070",
            "10.0.0.9:7070/admin",
            "gopher://10.0.0.2:70",
            "user@10.0.0.9:7070",
            "",
        ] {
            assert_eq!(reachable_http(bad, r), Err(()), "{bad}");
        }
        assert_eq!(reachable_http("0.0.0.0:7070", None), Err(()));
    }
}
