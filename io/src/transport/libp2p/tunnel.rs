//! API tunnels: a stream of the cluster transport (`/chorus/api/1.0.0`) that carries HTTP/1.1 to
//! another node's API, for a node whose API no other host reaches — bound to its own loopback,
//! as docs/operations.md suggests (issue 54, item 8). The node serves its API on every tunnel
//! it accepts exactly as on a TCP connection; a node forwarding a call (a live sandbox's, a
//! task's logs) opens one to the node it calls.
//!
//! Trust: the stream is the transport's, so its peer is authenticated (noise, the cluster's
//! pre-shared key when one is set). Only a peer this node admitted — connected, identified as a
//! node of this cluster, on the allowlist when one is set — has its tunnels served (a tunnel
//! from a connected peer waits up to [`ADMISSION_WAIT`] for that); any other's are closed
//! unread and counted (`rejected{reason="tunnel_not_admitted"}`), as are those past
//! [`MAX_TUNNELS_PER_PEER`] at once (`too_many_tunnels`). A tunnel grants reach, not rights:
//! every request on it is judged by its token, as on any connection.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use libp2p::{PeerId, StreamProtocol};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};

use super::Libp2pStats;

/// The protocol a tunnel is negotiated under.
pub const API_PROTOCOL: StreamProtocol = StreamProtocol::new("/chorus/api/1.0.0");

/// Tunnels one peer may have served at once (the HTTP API's own bound per peer IP).
pub const MAX_TUNNELS_PER_PEER: usize = 32;

/// A tunnel's byte stream, as Tokio's I/O traits see it (hyper runs on it).
pub type TunnelStream = Compat<libp2p::Stream>;

/// Why a tunnel could not be opened or listened on.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The node id is not a peer id.
    #[error("{0:?} is not a node id")]
    NotANode(String),
    /// The node is not a connected member of this cluster now: a tunnel never dials.
    #[error("node {0} is not connected to this node now (down, or cut off)")]
    NotConnected(String),
    /// The node does not serve its API on tunnels (an earlier release).
    #[error("node {0} does not take API tunnels (an earlier release of chorus)")]
    Unsupported(String),
    /// Negotiating the stream failed (its connection closed meanwhile, mostly).
    #[error("the tunnel to node {0} failed: {1}")]
    Io(String, std::io::Error),
    /// This node already listens for tunnels.
    #[error("API tunnels are already being served")]
    AlreadyListening,
}

/// The peers whose tunnels are served and to which tunnels are opened: those the driver
/// announced with `PeerUp` and that have not gone since.
#[derive(Debug, Default)]
pub(super) struct Admitted(Mutex<BTreeSet<PeerId>>);

impl Admitted {
    pub(super) fn set(&self, peer: PeerId, admitted: bool) {
        let mut set = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if admitted {
            set.insert(peer);
        } else {
            set.remove(&peer);
        }
    }

    fn contains(&self, peer: &PeerId) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(peer)
    }
}

/// Opens tunnels to other nodes and accepts theirs. Cheap to clone.
#[derive(Clone)]
pub struct ApiTunnels {
    control: libp2p_stream::Control,
    admitted: Arc<Admitted>,
    stats: Arc<Libp2pStats>,
}

impl std::fmt::Debug for ApiTunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiTunnels").finish_non_exhaustive()
    }
}

impl ApiTunnels {
    pub(super) fn new(
        control: libp2p_stream::Control,
        admitted: Arc<Admitted>,
        stats: Arc<Libp2pStats>,
    ) -> ApiTunnels {
        ApiTunnels {
            control,
            admitted,
            stats,
        }
    }

    /// A tunnel to node `node`'s API, which must be connected and admitted now.
    pub async fn open(&self, node: &str) -> Result<TunnelStream, TunnelError> {
        let peer: PeerId = node
            .parse()
            .map_err(|_| TunnelError::NotANode(node.chars().take(64).collect()))?;
        if !self.admitted.contains(&peer) {
            return Err(TunnelError::NotConnected(node.to_owned()));
        }
        let opened = self.control.clone().open_stream(peer, API_PROTOCOL).await;
        match opened {
            Ok(stream) => {
                self.stats.tunnel("out");
                Ok(stream.compat())
            }
            Err(libp2p_stream::OpenStreamError::UnsupportedProtocol(_)) => {
                Err(TunnelError::Unsupported(node.to_owned()))
            }
            Err(libp2p_stream::OpenStreamError::Io(e)) => Err(TunnelError::Io(node.to_owned(), e)),
            Err(e) => Err(TunnelError::Io(
                node.to_owned(),
                std::io::Error::other(e.to_string()),
            )),
        }
    }

    /// Starts taking other nodes' tunnels (once per transport).
    pub fn listen(&self) -> Result<TunnelListener, TunnelError> {
        let incoming = self
            .control
            .clone()
            .accept(API_PROTOCOL)
            .map_err(|_| TunnelError::AlreadyListening)?;
        Ok(TunnelListener {
            incoming,
            waiting: FuturesUnordered::new(),
            admitted: self.admitted.clone(),
            open: Arc::default(),
            stats: self.stats.clone(),
        })
    }
}

/// How long a tunnel from a connected peer not admitted yet waits for its admission: the two
/// ends identify each other at about the same time, and the one that finished first may call
/// at once.
pub const ADMISSION_WAIT: Duration = Duration::from_secs(2);

/// Tunnels waiting for their peer's admission at once; more are closed unread at once.
const MAX_WAITING: usize = 64;

/// A tunnel waiting for its peer's admission: the stream once admitted, `None` past
/// [`ADMISSION_WAIT`].
type Waiting = Pin<Box<dyn Future<Output = (PeerId, Option<libp2p::Stream>)> + Send>>;

/// Tunnels other nodes opened to this one.
pub struct TunnelListener {
    incoming: libp2p_stream::IncomingStreams,
    waiting: FuturesUnordered<Waiting>,
    admitted: Arc<Admitted>,
    open: Arc<Mutex<BTreeMap<PeerId, usize>>>,
    stats: Arc<Libp2pStats>,
}

/// A tunnel to serve: from `node`, its stream, and its place among the peer's
/// [`MAX_TUNNELS_PER_PEER`] (held until dropped).
pub struct Tunnel {
    pub node: String,
    pub stream: TunnelStream,
    pub slot: TunnelSlot,
}

/// One served tunnel counted for its peer; dropping it ends the count.
pub struct TunnelSlot {
    open: Arc<Mutex<BTreeMap<PeerId, usize>>>,
    peer: PeerId,
}

impl Drop for TunnelSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// Waits (at most [`ADMISSION_WAIT`]) for `peer` to be admitted, holding its stream.
fn admission(admitted: Arc<Admitted>, peer: PeerId, stream: libp2p::Stream) -> Waiting {
    Box::pin(async move {
        let deadline = tokio::time::Instant::now() + ADMISSION_WAIT;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if admitted.contains(&peer) {
                return (peer, Some(stream));
            }
        }
        (peer, None)
    })
}

impl TunnelListener {
    /// The next tunnel to serve; `None` once the transport stopped. Tunnels of peers not
    /// admitted within [`ADMISSION_WAIT`], or past their bound, are closed here and counted.
    pub async fn next(&mut self) -> Option<Tunnel> {
        loop {
            let (peer, stream) = tokio::select! {
                next = self.incoming.next() => next?,
                Some((peer, waited)) = self.waiting.next(), if !self.waiting.is_empty() => {
                    match waited {
                        Some(stream) => (peer, stream),
                        None => {
                            self.stats.rejected("tunnel_not_admitted");
                            continue;
                        }
                    }
                }
            };
            if !self.admitted.contains(&peer) {
                if self.waiting.len() >= MAX_WAITING {
                    self.stats.rejected("tunnel_not_admitted");
                } else {
                    self.waiting
                        .push(admission(self.admitted.clone(), peer, stream));
                }
                continue;
            }
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let n = open.entry(peer).or_default();
            if *n >= MAX_TUNNELS_PER_PEER {
                drop(open);
                self.stats.rejected("too_many_tunnels");
                continue;
            }
            *n += 1;
            drop(open);
            self.stats.tunnel("in");
            return Some(Tunnel {
                node: peer.to_base58(),
                stream: stream.compat(),
                slot: TunnelSlot {
                    open: self.open.clone(),
                    peer,
                },
            });
        }
    }
}
