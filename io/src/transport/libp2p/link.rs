//! Links: one long-lived stream per connected peer and direction (`/chorus/link/1.0.0`), for
//! direct messages and, while this node is connected to every peer it knows, for broadcasts.
//!
//! Why: a request-response message opens a substream, negotiates its protocol and waits for an
//! empty ack — several packets around every heartbeat ack — and a gossipsub broadcast is
//! relayed by every mesh peer, so each node hears each heartbeat three or four times. On a
//! link a message is one length-prefixed frame (the request-response codec's, `frame.rs`) on a
//! stream opened once: one packet, as etcd's peer streams do (issue 36).
//!
//! A link is best-effort like the rest of the transport: a frame queued to a peer whose link
//! breaks is lost (counted under `send_failures{reason="link"}`), and the core's timers retry
//! what matters. A writer only opens its stream while the driver says the peer is connected,
//! so a link never dials. What arrives goes through the driver's usual checks
//! (`Driver::on_bytes`): allowlist, cluster, decoding, held until the peer's `PeerUp`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::{AsyncWriteExt, StreamExt};
use libp2p::{PeerId, StreamProtocol};
use tokio::sync::mpsc;

use super::frame::{put_frame, read_frame, Frame};
use super::Libp2pStats;

/// The protocol a link stream is negotiated under: JSON frames only.
pub const LINK_PROTOCOL: StreamProtocol = StreamProtocol::new("/chorus/link/1.0.0");

/// A link whose reader also takes compact frames (`chorus_core::codec::encode_compact`): the
/// writer offers it first and falls back to [`LINK_PROTOCOL`] with a node that does not
/// accept it (an older one), which then gets JSON only.
pub const LINK_PROTOCOL_COMPACT: StreamProtocol = StreamProtocol::new("/chorus/link/2.0.0");

/// One message for a link: its JSON frame, and its compact frame when it has one (written
/// instead on a link negotiated as [`LINK_PROTOCOL_COMPACT`]).
#[derive(Clone, Debug)]
pub(super) struct OutFrame {
    pub(super) json: Vec<u8>,
    pub(super) compact: Option<Vec<u8>>,
}

/// A writer gathers queued frames into writes of about this many bytes.
const WRITE_BYTES: usize = 64 * 1024;

/// Frames queued per peer before further ones are dropped (counted as `queue_full`).
const QUEUE_PER_PEER: usize = 256;

/// Inbound link streams read at once from one peer. A peer writes on one stream, its newest
/// (it opens another only when a write on the one before failed): a stream beyond these
/// replaces the peer's oldest, whose reader stops (`links_replaced`). Refusing the new one
/// instead let two streams whose writer had given them up — left open here while the
/// connection under them lived — shut a peer's every message out for good (the real-fault
/// soak: a node whose offers an admin refused as `too_many_links` 438 times for four minutes).
const MAX_INBOUND_PER_PEER: usize = 2;

/// Frames read from links and not yet taken by the driver.
const INBOUND_QUEUE: usize = 1024;

/// One peer's writer: its queue and whether the driver still sees it connected.
struct Writer {
    queue: mpsc::Sender<OutFrame>,
    connected: Arc<AtomicBool>,
}

/// The driver's side of the links: a writer task per connected peer, and the frames every
/// reader task passes back.
pub(super) struct Links {
    control: libp2p_stream::Control,
    /// Whether this node offers and accepts compact links (off only to stand in for an older
    /// node in tests).
    compact: bool,
    writers: BTreeMap<PeerId, Writer>,
    /// Frames accepted by [`Links::send`] and not yet written or dropped.
    queued: Arc<AtomicUsize>,
    stats: Arc<Libp2pStats>,
}

impl Links {
    /// Starts accepting inbound links; returns the driver's handle and the receiver of every
    /// frame read from them.
    pub(super) fn new(
        mut control: libp2p_stream::Control,
        compact: bool,
        stats: Arc<Libp2pStats>,
    ) -> (Links, mpsc::Receiver<(PeerId, Frame)>) {
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        // One set of inbound links per peer across both protocols.
        let readers: Readers = Arc::default();
        let protocols = if compact {
            vec![LINK_PROTOCOL_COMPACT, LINK_PROTOCOL]
        } else {
            vec![LINK_PROTOCOL]
        };
        for protocol in protocols {
            match control.accept(protocol) {
                Ok(incoming) => {
                    tokio::spawn(accept(incoming, tx.clone(), readers.clone(), stats.clone()));
                }
                // Only one acceptor is ever registered per protocol and control (this one).
                Err(e) => tracing::error!(error = %e, "link protocol already registered"),
            }
        }
        let links = Links {
            control,
            compact,
            writers: BTreeMap::new(),
            queued: Arc::new(AtomicUsize::new(0)),
            stats,
        };
        (links, rx)
    }

    /// Queues `bytes` for `peer`, which the driver sees connected; its writer (and stream) is
    /// made on first use. A frame for a full queue is dropped and counted (`queue_full`).
    pub(super) fn send(&mut self, peer: PeerId, frame: OutFrame) {
        if self.writers.get(&peer).is_none_or(|w| w.queue.is_closed()) {
            let (tx, rx) = mpsc::channel(QUEUE_PER_PEER);
            let connected = Arc::new(AtomicBool::new(true));
            tokio::spawn(write(
                self.control.clone(),
                self.compact,
                peer,
                rx,
                connected.clone(),
                self.queued.clone(),
                self.stats.clone(),
            ));
            self.writers.insert(
                peer,
                Writer {
                    queue: tx,
                    connected,
                },
            );
        }
        let writer = &self.writers[&peer];
        self.queued.fetch_add(1, Ordering::Relaxed);
        match writer.queue.try_send(frame) {
            // Counted (`link` bytes) as written: which form goes depends on the link.
            Ok(()) => {}
            Err(_) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                self.stats.rejected("queue_full");
            }
        }
    }

    /// The peer's last connection closed: its writer stops (what it still holds is dropped,
    /// never sent on a new connection it would have to dial).
    pub(super) fn disconnected(&mut self, peer: &PeerId) {
        if let Some(w) = self.writers.remove(peer) {
            w.connected.store(false, Ordering::Relaxed);
        }
    }

    /// Frames queued and not yet written or dropped (a stopping driver waits for them).
    pub(super) fn pending(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

/// Writes `peer`'s frames in order on one stream, opened on the first frame and again after a
/// failure; frames that arrive together are flushed together.
async fn write(
    mut control: libp2p_stream::Control,
    compact: bool,
    peer: PeerId,
    mut queue: mpsc::Receiver<OutFrame>,
    connected: Arc<AtomicBool>,
    queued: Arc<AtomicUsize>,
    stats: Arc<Libp2pStats>,
) {
    // The open stream, and whether it was negotiated as a compact link.
    let mut stream: Option<(libp2p::Stream, bool)> = None;
    let lost = |n: usize| {
        for _ in 0..n {
            stats.send_failed("link");
        }
    };
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = queue.try_recv() {
            batch.push(more);
        }
        let n = batch.len();
        if !connected.load(Ordering::Relaxed) {
            queued.fetch_sub(n, Ordering::Relaxed);
            continue;
        }
        if stream.is_none() {
            let opened = open(&mut control, peer, compact).await;
            match opened {
                Ok(s) => stream = Some(s),
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "link not opened; its frames are dropped");
                    lost(n);
                    queued.fetch_sub(n, Ordering::Relaxed);
                    continue;
                }
            }
        }
        let (s, compact_link) = stream.as_mut().expect("opened above");
        let mut written = Ok(());
        // The batch in as few writes as fit (one, idle): see `put_frame`.
        let mut buf = Vec::new();
        for (i, frame) in batch.iter().enumerate() {
            let bytes = match &frame.compact {
                Some(c) if *compact_link => {
                    stats.compact_frame_out();
                    c
                }
                _ => &frame.json,
            };
            stats.bytes_out("link", bytes.len() as u64);
            put_frame(&mut buf, bytes);
            if buf.len() >= WRITE_BYTES || i + 1 == batch.len() {
                written = s.write_all(&buf).await;
                buf.clear();
                if written.is_err() {
                    break;
                }
            }
        }
        if written.is_ok() {
            written = s.flush().await;
        }
        if let Err(e) = written {
            tracing::debug!(%peer, error = %e, "link broken; reopened for the next frame");
            lost(n);
            stream = None;
        }
        queued.fetch_sub(n, Ordering::Relaxed);
    }
    if let Some((mut s, _)) = stream {
        let _ = s.close().await;
    }
}

/// Opens a link to `peer`: compact when both ends take it, else JSON-only (a peer that does
/// not accept link/2, or this node with compact links off). Says which it opened.
async fn open(
    control: &mut libp2p_stream::Control,
    peer: PeerId,
    compact: bool,
) -> Result<(libp2p::Stream, bool), libp2p_stream::OpenStreamError> {
    if compact {
        match control.open_stream(peer, LINK_PROTOCOL_COMPACT).await {
            Err(libp2p_stream::OpenStreamError::UnsupportedProtocol(_)) => {}
            opened => return opened.map(|s| (s, true)),
        }
    }
    let s = control.open_stream(peer, LINK_PROTOCOL).await?;
    Ok((s, false))
}

/// The reader tasks of one peer's inbound links, oldest first, each with its number.
type Readers = Arc<Mutex<BTreeMap<PeerId, VecDeque<(u64, tokio::task::AbortHandle)>>>>;

/// Accepts inbound link streams, a reader task each, at most [`MAX_INBOUND_PER_PEER`] a peer:
/// a newer one stops the oldest.
async fn accept(
    mut incoming: libp2p_stream::IncomingStreams,
    tx: mpsc::Sender<(PeerId, Frame)>,
    readers: Readers,
    stats: Arc<Libp2pStats>,
) {
    let mut next: u64 = 0;
    while let Some((peer, stream)) = incoming.next().await {
        next += 1;
        let me = next;
        // Held while the reader is spawned and filed, so its own removal (which takes the
        // lock) always comes after it was filed.
        let mut all = readers.lock().unwrap_or_else(|p| p.into_inner());
        let of_peer = all.entry(peer).or_default();
        while of_peer.len() >= MAX_INBOUND_PER_PEER {
            if let Some((_, oldest)) = of_peer.pop_front() {
                tracing::debug!(%peer, "a newer inbound link replaces the oldest");
                stats.link_replaced();
                oldest.abort();
            }
        }
        let (tx, readers_of) = (tx.clone(), readers.clone());
        let task = tokio::spawn(async move {
            read(peer, stream, &tx).await;
            let mut all = readers_of.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(of_peer) = all.get_mut(&peer) {
                of_peer.retain(|(n, _)| *n != me);
                if of_peer.is_empty() {
                    all.remove(&peer);
                }
            }
        });
        of_peer.push_back((me, task.abort_handle()));
    }
}

/// Reads frames until the stream ends, fails, or a frame is refused (after a refused length the
/// stream cannot be resynchronised: the refusal is passed on to be counted, and the stream
/// closed).
async fn read(peer: PeerId, mut stream: libp2p::Stream, tx: &mpsc::Sender<(PeerId, Frame)>) {
    loop {
        match read_frame(&mut stream).await {
            Ok(frame) => {
                let refused = matches!(frame, Frame::Refused(_));
                if tx.send((peer, frame)).await.is_err() || refused {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}
