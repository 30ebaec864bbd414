//! The peers this node has met: their addresses (filtered), their re-dial schedule, and the
//! file in the data directory that keeps them across restarts (`peers.json`).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::multiaddr::Protocol;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Addresses kept per peer: a node has a few interfaces, not dozens.
pub(super) const MAX_ADDRS_PER_PEER: usize = 8;

/// Consecutive failed dials after which a learned peer is forgotten (with the 30 s default
/// backoff ceiling, about an hour). It finds us again through its own file or the table.
pub(super) const MAX_FAILURES: u32 = 120;

/// A peers file larger than this is not read (a few hundred peers take well under it).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The format version written in the peers file.
const FILE_VERSION: u32 = 1;

/// A listen address another node can dial: `/ip4|ip6/<addr>/tcp/<port>`, optionally followed by
/// `/p2p/<peer>` (dropped), nothing else. Unspecified, multicast and port 0 addresses are never
/// dialable; loopback ones only from a peer reached over loopback (elsewhere they would lead
/// back to this machine).
pub(super) fn dialable(addr: &Multiaddr, loopback_ok: bool) -> Option<Multiaddr> {
    let mut parts = addr.iter();
    let ip: IpAddr = match parts.next()? {
        Protocol::Ip4(ip) => ip.into(),
        Protocol::Ip6(ip) => ip.into(),
        _ => return None,
    };
    let Protocol::Tcp(port) = parts.next()? else {
        return None;
    };
    match parts.next() {
        None | Some(Protocol::P2p(_)) => {}
        _ => return None,
    }
    if parts.next().is_some()
        || port == 0
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip == IpAddr::from([255, 255, 255, 255])
        || (ip.is_loopback() && !loopback_ok)
    {
        return None;
    }
    Some(Multiaddr::empty().with(ip.into()).with(Protocol::Tcp(port)))
}

/// The addresses of `addrs` (each [`dialable`]) this node may tell others of: all but the
/// loopback ones, unless loopback is all there is (a local cluster, where whoever asks is on
/// this machine too).
pub(super) fn advertisable(addrs: &[Multiaddr]) -> impl Iterator<Item = &Multiaddr> {
    let routable = addrs.iter().any(|a| !is_loopback(a));
    addrs.iter().filter(move |a| !routable || !is_loopback(a))
}

/// Whether `addr` starts with an unspecified IP (`0.0.0.0`, `::`): a listener on every
/// interface.
pub(super) fn is_unspecified(addr: &Multiaddr) -> bool {
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => ip.is_unspecified(),
        Some(Protocol::Ip6(ip)) => ip.is_unspecified(),
        _ => false,
    }
}

/// Whether `addr` starts with a loopback IP.
pub(super) fn is_loopback(addr: &Multiaddr) -> bool {
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => ip.is_loopback(),
        Some(Protocol::Ip6(ip)) => ip.is_loopback(),
        _ => false,
    }
}

/// The delay after `current`: doubled, at most `max`.
pub(super) fn next_backoff(current: Duration, max: Duration) -> Duration {
    current.saturating_mul(2).min(max)
}

/// One known peer and its re-dial schedule.
#[derive(Debug)]
pub(super) struct Known {
    pub(super) addrs: Vec<Multiaddr>,
    pub(super) dialing: Option<ConnectionId>,
    pub(super) next_attempt: Instant,
    pub(super) backoff: Duration,
    pub(super) failures: u32,
}

/// Why a peer was not learned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// No dialable address.
    NoAddress,
    /// The book is full of peers that answer.
    Full,
}

/// The known peers, bounded; `dirty` once its content (peers or addresses) changed since the
/// last [`PeerBook::take_dirty`].
#[derive(Debug)]
pub(super) struct PeerBook {
    peers: BTreeMap<PeerId, Known>,
    capacity: usize,
    backoff_min: Duration,
    backoff_max: Duration,
    dirty: bool,
}

impl PeerBook {
    pub(super) fn new(capacity: usize, backoff_min: Duration, backoff_max: Duration) -> Self {
        PeerBook {
            peers: BTreeMap::new(),
            capacity,
            backoff_min,
            backoff_max,
            dirty: false,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.peers.len()
    }

    /// Every peer known.
    pub(super) fn peers(&self) -> impl Iterator<Item = &PeerId> {
        self.peers.keys()
    }

    pub(super) fn get(&self, peer: &PeerId) -> Option<&Known> {
        self.peers.get(peer)
    }

    /// Records `peer`'s addresses (already filtered with [`dialable`]; at most
    /// [`MAX_ADDRS_PER_PEER`] kept). When full, the peer with the most failed dials makes room,
    /// if any failed at all.
    pub(super) fn learn(
        &mut self,
        peer: PeerId,
        mut addrs: Vec<Multiaddr>,
        now: Instant,
    ) -> Result<(), Refused> {
        addrs.sort();
        addrs.dedup();
        addrs.truncate(MAX_ADDRS_PER_PEER);
        if addrs.is_empty() {
            return Err(Refused::NoAddress);
        }
        if let Some(known) = self.peers.get_mut(&peer) {
            if known.addrs != addrs {
                known.addrs = addrs;
                self.dirty = true;
            }
            return Ok(());
        }
        if self.peers.len() >= self.capacity {
            let worst = self
                .peers
                .iter()
                .filter(|(_, k)| k.failures > 0 && k.dialing.is_none())
                .max_by_key(|(_, k)| k.failures)
                .map(|(p, _)| *p);
            match worst {
                Some(p) => {
                    self.peers.remove(&p);
                }
                None => return Err(Refused::Full),
            }
        }
        self.peers.insert(
            peer,
            Known {
                addrs,
                dialing: None,
                next_attempt: now,
                backoff: self.backoff_min,
                failures: 0,
            },
        );
        self.dirty = true;
        Ok(())
    }

    /// Drops `peer` (it turned out not to be a node of this cluster).
    pub(super) fn forget(&mut self, peer: &PeerId) {
        if self.peers.remove(peer).is_some() {
            self.dirty = true;
        }
    }

    /// The peer answered: its next loss is re-dialled promptly.
    pub(super) fn reached(&mut self, peer: &PeerId) {
        if let Some(k) = self.peers.get_mut(peer) {
            k.backoff = self.backoff_min;
            k.failures = 0;
        }
    }

    /// Peers to dial now: not connected (per `connected`), no dial in flight, backoff passed;
    /// at most `limit`, fewest failures first.
    pub(super) fn due(
        &self,
        now: Instant,
        connected: impl Fn(&PeerId) -> bool,
        limit: usize,
    ) -> Vec<PeerId> {
        let mut due: Vec<(u32, PeerId)> = self
            .peers
            .iter()
            .filter(|(p, k)| k.dialing.is_none() && now >= k.next_attempt && !connected(p))
            .map(|(p, k)| (k.failures, *p))
            .collect();
        due.sort();
        due.into_iter().take(limit).map(|(_, p)| p).collect()
    }

    /// Number of dials in flight.
    pub(super) fn dialing(&self) -> usize {
        self.peers.values().filter(|k| k.dialing.is_some()).count()
    }

    /// A dial of `peer` started (as `id`): the next one waits for the backoff, which doubles.
    pub(super) fn dial_started(&mut self, peer: &PeerId, id: ConnectionId, now: Instant) {
        if let Some(k) = self.peers.get_mut(peer) {
            k.dialing = Some(id);
            k.next_attempt = now + k.backoff;
            k.backoff = next_backoff(k.backoff, self.backoff_max);
        }
    }

    /// A dial ended; a failed one counts, and the peer is forgotten after [`MAX_FAILURES`].
    pub(super) fn dial_settled(&mut self, id: ConnectionId, ok: bool) {
        let Some((peer, k)) = self.peers.iter_mut().find(|(_, k)| k.dialing == Some(id)) else {
            return;
        };
        k.dialing = None;
        if ok {
            return;
        }
        k.failures = k.failures.saturating_add(1);
        if k.failures >= MAX_FAILURES {
            let peer = *peer;
            tracing::debug!(%peer, "peer unreachable for long; forgotten");
            self.peers.remove(&peer);
            self.dirty = true;
        }
    }

    /// Whether the content changed since the last call (and resets the flag).
    pub(super) fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    /// What the peers file holds.
    pub(super) fn to_file(&self) -> PeersFile {
        PeersFile {
            version: FILE_VERSION,
            peers: self
                .peers
                .iter()
                .map(|(p, k)| {
                    (
                        p.to_base58(),
                        k.addrs.iter().map(ToString::to_string).collect(),
                    )
                })
                .collect(),
        }
    }
}

/// The peers file: `{"version": 1, "peers": {"<peer id>": ["/ip4/…/tcp/…", …]}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PeersFile {
    pub(super) version: u32,
    pub(super) peers: BTreeMap<String, Vec<String>>,
}

impl PeersFile {
    /// The valid entries: entries with a bad peer id or no address left after filtering are
    /// skipped (a file written by another version, or edited by hand, still helps).
    pub(super) fn entries(&self) -> Vec<(PeerId, Vec<Multiaddr>)> {
        self.peers
            .iter()
            .filter_map(|(peer, addrs)| {
                let peer: PeerId = peer.parse().ok()?;
                let addrs: Vec<Multiaddr> = addrs
                    .iter()
                    .filter_map(|a| a.parse::<Multiaddr>().ok())
                    .filter_map(|a| dialable(&a, true))
                    .take(MAX_ADDRS_PER_PEER)
                    .collect();
                (!addrs.is_empty()).then_some((peer, addrs))
            })
            .collect()
    }
}

/// Reads the peers file; a missing file is an empty one. Anything unreadable is an error for
/// the caller to log: the file only speeds up joining, it is never needed.
pub(super) fn load(path: &Path) -> Result<PeersFile, String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PeersFile::default()),
        Err(e) => return Err(e.to_string()),
    };
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    let file: PeersFile = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if file.version != FILE_VERSION {
        return Err(format!("unknown version {}", file.version));
    }
    Ok(file)
}

/// Writes the peers file atomically: a temporary file beside it, synced, then renamed over it,
/// so a crash leaves the old file or the new one, never half of one.
pub(super) fn save(path: &Path, content: &PeersFile) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(content).map_err(std::io::Error::other)?;
    let tmp: PathBuf = {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        path.with_file_name(name)
    };
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&text)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ma(s: &str) -> Multiaddr {
        s.parse().unwrap()
    }

    /// Issue 54: the Kademlia table answers other machines' lookups, so a peer's loopback
    /// address goes in only when it has no other (a local cluster).
    #[test]
    fn a_loopback_address_is_told_to_others_only_of_a_peer_with_no_other() {
        let both = [ma("/ip4/127.0.0.1/tcp/7946"), ma("/ip4/10.0.0.2/tcp/7946")];
        let told: Vec<_> = advertisable(&both).collect();
        assert_eq!(told, vec![&both[1]]);
        let local = [ma("/ip4/127.0.0.1/tcp/7946"), ma("/ip6/::1/tcp/7946")];
        assert_eq!(advertisable(&local).count(), 2);
        assert!(is_unspecified(&ma("/ip4/0.0.0.0/tcp/7946")));
        assert!(is_unspecified(&ma("/ip6/::/tcp/7946")));
        assert!(!is_unspecified(&ma("/ip4/127.0.0.1/tcp/7946")));
    }

    #[test]
    fn only_plain_tcp_addresses_of_real_hosts_are_dialable() {
        let peer = PeerId::random();
        let good = ma("/ip4/10.0.0.5/tcp/7946");
        assert_eq!(dialable(&good, false), Some(good.clone()));
        // The /p2p suffix is dropped (the peer id is kept beside the address).
        assert_eq!(
            dialable(&good.clone().with(Protocol::P2p(peer)), false),
            Some(good)
        );
        assert_eq!(
            dialable(&ma("/ip6/fd00::1/tcp/7946"), false),
            Some(ma("/ip6/fd00::1/tcp/7946"))
        );
        for bad in [
            "/ip4/0.0.0.0/tcp/7946",
            "/ip6/::/tcp/7946",
            "/ip4/10.0.0.5/tcp/0",
            "/ip4/224.0.0.251/tcp/7946",
            "/ip4/255.255.255.255/tcp/7946",
            "/ip4/10.0.0.5/udp/7946/quic-v1",
            "/dns4/example.com/tcp/7946",
            "/ip4/10.0.0.5/tcp/7946/ws",
            "/ip4/10.0.0.5",
        ] {
            assert_eq!(dialable(&ma(bad), true), None, "{bad}");
        }
        // Loopback only from a peer met over loopback.
        let lo = ma("/ip4/127.0.0.1/tcp/7946");
        assert_eq!(dialable(&lo, false), None);
        assert_eq!(dialable(&lo, true), Some(lo.clone()));
        assert!(is_loopback(&lo));
        assert!(!is_loopback(&ma("/ip4/10.0.0.5/tcp/1")));
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let max = Duration::from_secs(30);
        assert_eq!(
            next_backoff(Duration::from_secs(1), max),
            Duration::from_secs(2)
        );
        assert_eq!(next_backoff(Duration::from_secs(20), max), max);
        assert_eq!(next_backoff(Duration::MAX, max), max);
    }

    #[test]
    fn the_book_schedules_redials_with_backoff_and_stays_bounded() {
        let now = Instant::now();
        let min = Duration::from_secs(1);
        let mut book = PeerBook::new(2, min, Duration::from_secs(4));
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        let addr = ma("/ip4/10.0.0.5/tcp/7946");
        assert_eq!(book.learn(a, vec![], now), Err(Refused::NoAddress));
        book.learn(a, vec![addr.clone(), addr.clone()], now)
            .unwrap();
        assert_eq!(book.get(&a).unwrap().addrs, vec![addr.clone()]);
        assert!(book.take_dirty());
        // The same addresses again change nothing.
        book.learn(a, vec![addr.clone()], now).unwrap();
        assert!(!book.take_dirty());
        book.learn(b, vec![addr.clone()], now).unwrap();
        // Full, and nobody failed: the newcomer is refused.
        assert_eq!(book.learn(c, vec![addr.clone()], now), Err(Refused::Full));

        // A connected peer is not due; the other is, once.
        assert_eq!(book.due(now, |p| *p == b, 8), vec![a]);
        let id = ConnectionId::new_unchecked(1);
        book.dial_started(&a, id, now);
        assert_eq!(book.dialing(), 1);
        assert!(book.due(now, |_| false, 8) == vec![b]);
        book.dial_settled(id, false);
        // Backoff: not before 1 s; the next attempt waits 2 s, then 4 s (the ceiling).
        assert!(book.due(now + min / 2, |p| *p == b, 8).is_empty());
        assert_eq!(book.due(now + min, |p| *p == b, 8), vec![a]);
        assert_eq!(book.get(&a).unwrap().backoff, Duration::from_secs(2));
        // A peer that failed makes room for a new one.
        book.learn(c, vec![addr.clone()], now).unwrap();
        assert!(book.get(&a).is_none() && book.get(&c).is_some());
        // Reaching a peer resets its schedule.
        let id = ConnectionId::new_unchecked(2);
        book.dial_started(&b, id, now);
        book.dial_settled(id, true);
        book.reached(&b);
        assert_eq!(book.get(&b).unwrap().backoff, min);
        assert_eq!(book.get(&b).unwrap().failures, 0);
        // A peer found to be foreign is dropped.
        book.take_dirty();
        book.forget(&b);
        assert!(book.get(&b).is_none() && book.take_dirty());
    }

    #[test]
    fn a_peer_failing_for_long_is_forgotten() {
        let now = Instant::now();
        let mut book = PeerBook::new(4, Duration::from_millis(1), Duration::from_millis(1));
        let a = PeerId::random();
        book.learn(a, vec![ma("/ip4/10.0.0.5/tcp/1")], now).unwrap();
        book.take_dirty();
        for i in 0..MAX_FAILURES {
            let id = ConnectionId::new_unchecked(i as usize);
            book.dial_started(&a, id, now);
            book.dial_settled(id, false);
        }
        assert_eq!(book.len(), 0);
        assert!(book.take_dirty());
    }

    #[test]
    fn the_peers_file_round_trips_and_a_corrupt_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers.json");
        // Missing: empty.
        assert_eq!(load(&path).unwrap(), PeersFile::default());

        let now = Instant::now();
        let mut book = PeerBook::new(8, Duration::from_secs(1), Duration::from_secs(30));
        let (a, b) = (PeerId::random(), PeerId::random());
        book.learn(a, vec![ma("/ip4/10.0.0.5/tcp/7946")], now)
            .unwrap();
        book.learn(
            b,
            vec![ma("/ip4/127.0.0.1/tcp/1"), ma("/ip6/fd00::2/tcp/2")],
            now,
        )
        .unwrap();
        save(&path, &book.to_file()).unwrap();
        assert!(!dir.path().join("peers.json.tmp").exists());
        let read = load(&path).unwrap();
        assert_eq!(read, book.to_file());
        let mut entries = read.entries();
        entries.sort();
        let mut want = vec![
            (a, book.get(&a).unwrap().addrs.clone()),
            (b, book.get(&b).unwrap().addrs.clone()),
        ];
        want.sort();
        assert_eq!(entries, want);

        // Bad entries are skipped, the rest kept.
        let mut edited = read.clone();
        edited
            .peers
            .insert("not a peer id".into(), vec!["/ip4/10.0.0.9/tcp/1".into()]);
        edited.peers.insert(
            PeerId::random().to_base58(),
            vec!["garbage".into(), "/ip4/0.0.0.0/tcp/1".into()],
        );
        assert_eq!(edited.entries().len(), 2);

        // Corrupt, truncated, another version: errors, never panics.
        for text in [
            "{not json",
            "",
            "{\"version\": 1",
            "{\"version\": 9, \"peers\": {}}",
        ] {
            std::fs::write(&path, text).unwrap();
            assert!(load(&path).is_err(), "{text:?}");
        }
        std::fs::write(&path, vec![b' '; (MAX_FILE_BYTES + 1) as usize]).unwrap();
        assert!(load(&path).is_err());
    }
}
