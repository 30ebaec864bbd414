//! Counters of the libp2p transport, shared with whoever exports metrics (the node's /metrics).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Live counters, updated by the transport and readable from any thread through an `Arc`.
///
/// Labels are short stable strings: message kinds ([`chorus_core::Message::kind`]), rejection
/// reasons ([`chorus_core::codec::CodecError::kind`] plus the transport's own, listed on
/// [`StatsSnapshot::rejected`]) and denial reasons.
#[derive(Debug, Default)]
pub struct Libp2pStats {
    messages_in: Mutex<BTreeMap<&'static str, u64>>,
    messages_out: Mutex<BTreeMap<&'static str, u64>>,
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    connections_denied: Mutex<BTreeMap<&'static str, u64>>,
    send_failures: Mutex<BTreeMap<&'static str, u64>>,
    connections_failed_by_reason: Mutex<BTreeMap<&'static str, u64>>,
    discovery_dropped: Mutex<BTreeMap<&'static str, u64>>,
    bytes_in: Mutex<BTreeMap<&'static str, u64>>,
    bytes_out: Mutex<BTreeMap<&'static str, u64>>,
    tunnels: Mutex<BTreeMap<&'static str, u64>>,
    broadcasts_gossiped: AtomicU64,
    broadcasts_direct: AtomicU64,
    broadcasts_linked: AtomicU64,
    compact_frames_out: AtomicU64,
    links_replaced: AtomicU64,
    connections_failed: AtomicU64,
    peers_connected: AtomicU64,
    peers_up: AtomicU64,
    /// The HTTP API address each connected peer advertised (by base58 peer id); not a counter,
    /// but shared the same way.
    peer_http: Mutex<BTreeMap<String, String>>,
    /// The addresses the node listens on now, in the order reported (a listener on
    /// `0.0.0.0` has one per interface, which come and go with the interfaces).
    listen_addrs: Mutex<Vec<String>>,
}

/// A copy of [`Libp2pStats`] at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Decoded messages delivered to the runtime, by message kind.
    pub messages_in: BTreeMap<&'static str, u64>,
    /// Messages handed to the transport for sending (a broadcast counts once), by kind.
    pub messages_out: BTreeMap<&'static str, u64>,
    /// Inputs dropped before the runtime, by reason: the codec's `too_large`, `malformed`,
    /// `version`, `wrong_cluster`; and `not_allowed` (sender outside the allowlist), `unsigned`
    /// (a gossipsub message without a source), `identify` (a peer that does not identify as a
    /// node of this cluster), `queue_full` (the transport's own queues overflowed),
    /// `unknown_peer` (a send to a node id that is not a peer id), `too_large_out` (an outgoing
    /// message over the limit), `http_address` (a peer's advertised API address that is not
    /// `[http[s]://]IP:PORT`: not asked), `tunnel_not_admitted` (an API tunnel from a peer
    /// that is not an admitted node of this cluster, closed unread), `too_many_tunnels` (a
    /// peer's API tunnel past the ones served at once, closed unread).
    pub rejected: BTreeMap<&'static str, u64>,
    /// Connections refused or closed by policy, by reason: `not_allowed` (allowlist),
    /// `limit` (connection limits), `other`.
    pub connections_denied: BTreeMap<&'static str, u64>,
    /// Direct sends that did not reach the peer, by reason (`dial`, `timeout`, `closed`,
    /// `unsupported`, `io`).
    pub send_failures: BTreeMap<&'static str, u64>,
    /// Message bytes received, by path: `link` (a peer's long-lived stream, `link.rs`),
    /// `direct` (one request-response exchange), `gossip` (gossipsub, relays included).
    /// Frame and envelope bytes only; the headers of the layers below are not counted.
    pub bytes_in: BTreeMap<&'static str, u64>,
    /// Message bytes handed to the network, by path (as `bytes_in`; a gossipsub publish
    /// counts once, whatever its relays send).
    pub bytes_out: BTreeMap<&'static str, u64>,
    /// API tunnels (`tunnel.rs`) by direction: `in` (served), `out` (opened).
    pub tunnels: BTreeMap<&'static str, u64>,
    /// Broadcasts published on gossipsub.
    pub broadcasts_gossiped: u64,
    /// Copies of broadcasts sent on links: while this node is connected to every peer it
    /// knows, a broadcast goes to each on its link and not by gossip.
    pub broadcasts_linked: u64,
    /// Copies of broadcasts sent directly to peers not (yet) subscribed to the cluster topic.
    pub broadcasts_direct: u64,
    /// Frames written on links in their compact form (heartbeats and their acknowledgements
    /// to peers that accept compact links; `chorus_core::codec::encode_compact`).
    pub compact_frames_out: u64,
    /// Inbound link streams stopped because the same peer opened a newer one beyond the two
    /// read at once (its writer gave the old one up).
    pub links_replaced: u64,
    /// Incoming or outgoing connection attempts that failed below the policy level (handshake,
    /// wrong key, garbage, unreachable address).
    pub connections_failed: u64,
    /// The same, by reason: `handshake` (the security handshake failed: most often a
    /// different or missing pre-shared key, or a peer that is not a CHORUS node), `refused`
    /// (nothing listens there), `timeout` (no answer in time, or a handshake that went silent:
    /// also a sign of a key mismatch), `other`.
    pub connections_failed_by_reason: BTreeMap<&'static str, u64>,
    /// Peers or addresses that peer discovery left out, by reason: `no_address` (a peer
    /// advertised no dialable listen address), `book_full` (the known peers are at their
    /// bound), `table_full` (the Kademlia bucket is full), `file_write` (the peers file could
    /// not be written).
    pub discovery_dropped: BTreeMap<&'static str, u64>,
    /// Peers with at least one open connection.
    pub peers_connected: u64,
    /// Peers announced to the runtime with `PeerUp` and not yet `PeerDown`.
    pub peers_up: u64,
}

fn bump(map: &Mutex<BTreeMap<&'static str, u64>>, label: &'static str) {
    // A poisoned lock only means another thread panicked mid-increment; the map is still usable.
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    *m.entry(label).or_insert(0) += 1;
}

fn add(map: &Mutex<BTreeMap<&'static str, u64>>, label: &'static str, n: u64) {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    *m.entry(label).or_insert(0) += n;
}

fn copy(map: &Mutex<BTreeMap<&'static str, u64>>) -> BTreeMap<&'static str, u64> {
    map.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

impl Libp2pStats {
    /// A consistent-enough copy of every counter (each map is copied atomically).
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            messages_in: copy(&self.messages_in),
            messages_out: copy(&self.messages_out),
            rejected: copy(&self.rejected),
            connections_denied: copy(&self.connections_denied),
            send_failures: copy(&self.send_failures),
            bytes_in: copy(&self.bytes_in),
            bytes_out: copy(&self.bytes_out),
            tunnels: copy(&self.tunnels),
            broadcasts_gossiped: self.broadcasts_gossiped.load(Ordering::Relaxed),
            broadcasts_linked: self.broadcasts_linked.load(Ordering::Relaxed),
            broadcasts_direct: self.broadcasts_direct.load(Ordering::Relaxed),
            compact_frames_out: self.compact_frames_out.load(Ordering::Relaxed),
            links_replaced: self.links_replaced.load(Ordering::Relaxed),
            connections_failed: self.connections_failed.load(Ordering::Relaxed),
            connections_failed_by_reason: copy(&self.connections_failed_by_reason),
            discovery_dropped: copy(&self.discovery_dropped),
            peers_connected: self.peers_connected.load(Ordering::Relaxed),
            peers_up: self.peers_up.load(Ordering::Relaxed),
        }
    }

    /// The HTTP API address (host:port) each identified, connected peer advertised, by node id.
    pub fn peer_http(&self) -> BTreeMap<String, String> {
        self.peer_http
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The addresses this node listens on now (without `/p2p/…`): every interface's for a
    /// listener on an unspecified address.
    pub fn listen_addrs(&self) -> Vec<String> {
        self.listen_addrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn listening(&self, addr: &libp2p::Multiaddr, up: bool) {
        let addr = addr.to_string();
        let mut l = self.listen_addrs.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|a| *a != addr);
        if up {
            l.push(addr);
        }
    }

    pub(super) fn set_peer_http(&self, peer: String, http: Option<String>) {
        let mut m = self.peer_http.lock().unwrap_or_else(|p| p.into_inner());
        match http {
            Some(addr) => {
                m.insert(peer, addr);
            }
            None => {
                m.remove(&peer);
            }
        }
    }

    /// Total rejected inputs, over all reasons.
    pub fn rejected_total(&self) -> u64 {
        copy(&self.rejected).values().sum()
    }

    pub(super) fn message_in(&self, kind: &'static str) {
        bump(&self.messages_in, kind);
    }
    pub(super) fn message_out(&self, kind: &'static str) {
        bump(&self.messages_out, kind);
    }
    pub(super) fn tunnel(&self, direction: &'static str) {
        bump(&self.tunnels, direction);
    }
    pub(super) fn rejected(&self, reason: &'static str) {
        bump(&self.rejected, reason);
    }
    pub(super) fn connection_denied(&self, reason: &'static str) {
        bump(&self.connections_denied, reason);
    }
    pub(super) fn send_failed(&self, reason: &'static str) {
        bump(&self.send_failures, reason);
    }
    pub(super) fn broadcast_gossiped(&self) {
        self.broadcasts_gossiped.fetch_add(1, Ordering::Relaxed);
    }
    pub(super) fn broadcast_linked(&self, copies: u64) {
        self.broadcasts_linked.fetch_add(copies, Ordering::Relaxed);
    }
    pub(super) fn link_replaced(&self) {
        self.links_replaced.fetch_add(1, Ordering::Relaxed);
    }
    pub(super) fn compact_frame_out(&self) {
        self.compact_frames_out.fetch_add(1, Ordering::Relaxed);
    }
    pub(super) fn bytes_in(&self, path: &'static str, n: u64) {
        add(&self.bytes_in, path, n);
    }
    pub(super) fn bytes_out(&self, path: &'static str, n: u64) {
        add(&self.bytes_out, path, n);
    }
    pub(super) fn broadcast_direct(&self, copies: u64) {
        self.broadcasts_direct.fetch_add(copies, Ordering::Relaxed);
    }
    pub(super) fn connection_failed(&self, reason: &'static str) {
        bump(&self.connections_failed_by_reason, reason);
        self.connections_failed.fetch_add(1, Ordering::Relaxed);
    }
    pub(super) fn discovery_dropped(&self, reason: &'static str) {
        bump(&self.discovery_dropped, reason);
    }
    pub(super) fn set_peers(&self, connected: u64, up: u64) {
        self.peers_connected.store(connected, Ordering::Relaxed);
        self.peers_up.store(up, Ordering::Relaxed);
    }
}
