//! A [`Transport`] on turmoil's simulated UDP: one datagram carries one message encoded with
//! `chorus_core::codec` (or one part of a message that carries a large electorate); the sender
//! is the datagram's source address, never a payload field.
//! Loss, duplication and reordering are drawn here from a seeded per-node generator (turmoil's
//! own `fail_rate` breaks whole links rather than dropping single messages).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use chorus_core::codec::{self, MAX_MESSAGE_BYTES};
use chorus_core::rng::below;
use chorus_core::{Message, NodeId, PeerInfo};
use chorus_io::runtime::{Transport, TransportEvent};
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use turmoil::net::UdpSocket;

/// The UDP port every node listens on.
pub(crate) const PORT: u16 = 7946;

/// Who is who: fixed for a run, shared by every transport.
pub(crate) struct Directory {
    pub(crate) cluster_id: String,
    pub(crate) ids: Vec<NodeId>,
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) by_ip: BTreeMap<IpAddr, usize>,
    pub(crate) by_id: BTreeMap<NodeId, usize>,
    pub(crate) profiles: Vec<PeerInfo>,
}

impl Directory {
    /// Node `i` is `ids[i]` at `ips[i]`, listening on [`PORT`].
    pub(crate) fn new(
        cluster_id: String,
        ids: Vec<NodeId>,
        ips: &[IpAddr],
        profiles: Vec<PeerInfo>,
    ) -> Directory {
        Directory {
            cluster_id,
            addrs: ips.iter().map(|ip| SocketAddr::new(*ip, PORT)).collect(),
            by_ip: ips.iter().enumerate().map(|(i, ip)| (*ip, i)).collect(),
            by_id: ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i))
                .collect(),
            ids,
            profiles,
        }
    }
}

/// Connection events the engine injects: a peer (re)started or crashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Up(usize),
    Down(usize),
}

/// Loss, duplication and reordering in force (ppm), and how long a reordered message is held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NetParams {
    pub(crate) loss_ppm: u32,
    pub(crate) duplicate_ppm: u32,
    pub(crate) reorder_ppm: u32,
    pub(crate) reorder_hold_ms: u64,
}

/// Counters and settings shared between the engine and every node's transport.
#[derive(Debug, Default)]
pub(crate) struct NetShared {
    pub(crate) net: NetParams,
    /// Datagrams sent since the engine last collected them: (all, election).
    pub(crate) sent: (u64, u64),
    /// Messages that could not be encoded (over the size limit).
    pub(crate) unencodable: u64,
}

/// One node's transport for one incarnation.
pub(crate) struct SimTransport {
    socket: UdpSocket,
    dir: Rc<Directory>,
    shared: Rc<RefCell<NetShared>>,
    control: UnboundedReceiver<Control>,
    /// Connected peers, in index order (broadcast targets).
    peers: BTreeSet<usize>,
    rng: ChaCha8Rng,
    /// Reordered datagrams held back: (due, sequence) → (recipient, bytes).
    held: BTreeMap<(Instant, u64), (usize, Vec<u8>)>,
    held_seq: u64,
    buf: Vec<u8>,
    /// Messages arriving in parts, per sender.
    parts: codec::Reassembler<usize>,
}

impl SimTransport {
    pub(crate) fn new(
        socket: UdpSocket,
        dir: Rc<Directory>,
        shared: Rc<RefCell<NetShared>>,
        control: UnboundedReceiver<Control>,
        rng: ChaCha8Rng,
    ) -> SimTransport {
        SimTransport {
            socket,
            dir,
            shared,
            control,
            peers: BTreeSet::new(),
            rng,
            held: BTreeMap::new(),
            held_seq: 0,
            // One byte over the limit, so an over-sized datagram is seen as such.
            buf: vec![0; MAX_MESSAGE_BYTES + 1],
            parts: codec::Reassembler::new(),
        }
    }

    fn chance(&mut self, ppm: u32) -> bool {
        ppm > 0 && below(&mut self.rng, 1_000_000) < u64::from(ppm)
    }

    fn datagram(&mut self, to: usize, bytes: &[u8], election: bool) {
        let net = {
            let mut s = self.shared.borrow_mut();
            s.sent.0 += 1;
            s.sent.1 += u64::from(election);
            s.net
        };
        if self.chance(net.loss_ppm) {
            return;
        }
        let copies = if self.chance(net.duplicate_ppm) { 2 } else { 1 };
        for _ in 0..copies {
            if self.chance(net.reorder_ppm) {
                let due = Instant::now() + Duration::from_millis(net.reorder_hold_ms);
                self.held_seq += 1;
                self.held.insert((due, self.held_seq), (to, bytes.to_vec()));
            } else {
                // Best effort, as UDP: a host that is down or not yet started just misses it.
                let _ = self.socket.try_send_to(bytes, self.dir.addrs[to]);
            }
        }
    }

    fn release_held(&mut self) {
        let now = Instant::now();
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (to, bytes) = entry.remove();
            let _ = self.socket.try_send_to(&bytes, self.dir.addrs[to]);
        }
    }

    fn encode(&mut self, msg: &Message) -> Option<Vec<Vec<u8>>> {
        match codec::encode_parts(&self.dir.cluster_id, msg) {
            Ok(frames) => Some(frames),
            Err(_) => {
                self.shared.borrow_mut().unencodable += 1;
                None
            }
        }
    }

    /// The event a datagram makes, if any (none for a part of a message not yet complete).
    fn received(&mut self, len: usize, from: SocketAddr) -> Option<TransportEvent> {
        let Some(&j) = self.dir.by_ip.get(&from.ip()) else {
            return Some(TransportEvent::Rejected {
                from: None,
                reason: "unknown_peer",
            });
        };
        let decoded = self
            .parts
            .decode(&self.dir.cluster_id, &j, &self.buf[..len]);
        let from = self.dir.ids[j].clone();
        match decoded {
            Ok(Some(msg)) => Some(TransportEvent::Message { from, msg }),
            Ok(None) => None,
            Err(e) => Some(TransportEvent::Rejected {
                from: Some(from),
                reason: e.kind(),
            }),
        }
    }
}

impl Transport for SimTransport {
    fn send(&mut self, to: &NodeId, msg: &Message) {
        let Some(&j) = self.dir.by_id.get(to) else {
            return;
        };
        for bytes in self.encode(msg).unwrap_or_default() {
            self.datagram(j, &bytes, msg.is_election());
        }
    }

    fn broadcast(&mut self, msg: &Message) {
        let Some(frames) = self.encode(msg) else {
            return;
        };
        let peers: Vec<usize> = self.peers.iter().copied().collect();
        for j in peers {
            for bytes in &frames {
                self.datagram(j, bytes, msg.is_election());
            }
        }
    }

    fn sign(&self, signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
        chorus_core::certificate::simulated_signature(signer, digest)
    }

    async fn next(&mut self) -> TransportEvent {
        loop {
            let due = self.held.first_key_value().map(|(k, _)| k.0);
            // Biased: tokio's branch RNG is not seeded.
            tokio::select! {
                biased;
                Some(c) = self.control.recv() => match c {
                    Control::Up(j) => {
                        self.peers.insert(j);
                        return TransportEvent::PeerUp {
                            peer: self.dir.ids[j].clone(),
                            info: self.dir.profiles[j].clone(),
                        };
                    }
                    Control::Down(j) => {
                        self.peers.remove(&j);
                        self.parts.forget(&j);
                        return TransportEvent::PeerDown {
                            peer: self.dir.ids[j].clone(),
                        };
                    }
                },
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    self.release_held();
                }
                r = self.socket.recv_from(&mut self.buf) => {
                    match r {
                        Ok((len, from)) => {
                            if let Some(event) = self.received(len, from) {
                                return event;
                            }
                        }
                        Err(_) => return TransportEvent::Rejected { from: None, reason: "socket" },
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chorus_core::Electorate;
    use rand_chacha::rand_core::SeedableRng;

    use super::*;

    /// A message that carries an electorate too large for one datagram goes as several and is
    /// put back together at the receiver, whole and once.
    #[test]
    fn an_electorate_too_large_for_a_datagram_travels_in_parts() {
        let mut sim = turmoil::Builder::new().build();
        let names = ["a", "b"];
        let ids: Vec<NodeId> = names.iter().map(|n| NodeId::from(*n)).collect();
        let ips: Vec<IpAddr> = names.iter().map(|n| sim.lookup(*n)).collect();
        let dir = Rc::new(Directory::new(
            "c".into(),
            ids,
            &ips,
            vec![PeerInfo::default(); 2],
        ));
        let members = (0..3_000)
            .map(|i| NodeId::from(format!("12D3KooW{i:044}")))
            .collect();
        let e = Arc::new(Electorate::new(1, members));
        let reply = Message::WhoamiReply {
            admin: None,
            term: 3,
            membership_version: 1,
            beat: 1,
            uptime_s: 5,
            resources: Default::default(),
            eligible: true,
            genesis: e.genesis,
            electorate: Some(e),
            electorate_stamp: 0,
        };
        let frames = codec::encode_parts("c", &reply).unwrap().len();
        assert!(frames >= 3, "{frames} frames");
        let net = Rc::new(RefCell::new(NetShared::default()));
        let transport = |dir: &Rc<Directory>, net: &Rc<RefCell<NetShared>>| {
            let (dir, net) = (dir.clone(), net.clone());
            async move {
                let socket =
                    UdpSocket::bind(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, PORT)))
                        .await?;
                let (control, rx) = tokio::sync::mpsc::unbounded_channel();
                let rng = ChaCha8Rng::seed_from_u64(1);
                Ok::<_, std::io::Error>((SimTransport::new(socket, dir, net, rx, rng), control))
            }
        };
        let got: Rc<RefCell<Vec<TransportEvent>>> = Rc::default();
        {
            let (dir, net, got) = (dir.clone(), net.clone(), got.clone());
            sim.host("b", move || {
                let (start, got) = (transport(&dir, &net), got.clone());
                async move {
                    let (mut t, _control) = start.await?;
                    loop {
                        let event = t.next().await;
                        got.borrow_mut().push(event);
                    }
                }
            });
        }
        {
            let (dir, net, reply) = (dir.clone(), net.clone(), reply.clone());
            sim.client("a", async move {
                let (mut t, _control) = transport(&dir, &net).await?;
                t.send(&NodeId::from("b"), &reply);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(())
            });
        }
        sim.run().unwrap();
        let got = got.borrow();
        assert_eq!(got.len(), 1, "one event at b");
        assert!(
            matches!(&got[0], TransportEvent::Message { from, msg } if from.as_str() == "a" && *msg == reply),
            "b got something else"
        );
        assert_eq!(net.borrow().sent.0, frames as u64);
    }
}
