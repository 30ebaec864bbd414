//! The libp2p transport on loopback: real TCP + noise + yamux between transports in one process,
//! mDNS off so parallel tests do not find each other. Every wait is bounded; a test fails
//! rather than hangs.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use chorus_core::codec::{self, MAX_MESSAGE_BYTES};
use chorus_core::{Message, NodeId, PeerInfo, Resources};
use chorus_io::runtime::{Transport, TransportEvent};
use chorus_io::transport::libp2p::{
    Frame, FrameCodec, DIRECT_PROTOCOL, IDENTIFY_PROTOCOL, LINK_PROTOCOL,
};
use chorus_io::transport::{
    load_or_create_identity, load_psk, Libp2pConfig, Libp2pTransport, TransportErrorCategory,
};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::{request_response, Multiaddr, PeerId};
use tokio::time::{timeout_at, Instant};

const CLUSTER: &str = "c1";
/// Longest wait for something that should happen: generous, since waiting longer only
/// slows a failure (CI's loaded run once took more than 10 s for two peers met through a third
/// to connect; alone it takes 3.5 s).
const WAIT: Duration = Duration::from_secs(30);
/// How long to watch for something that must not happen.
const QUIET: Duration = Duration::from_secs(3);

fn info(caps: &[&str], uptime_s: u64) -> PeerInfo {
    PeerInfo {
        capabilities: caps
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .into(),
        uptime_s,
        resources: Resources {
            cpu_millicores: 1500,
            mem_free_mb: 256,
            task_slots: 0,
            task_capacity: Default::default(),
        },
    }
}

fn config(caps: &[&str]) -> Libp2pConfig {
    let mut c = Libp2pConfig::new(CLUSTER);
    c.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()];
    c.mdns = false;
    c.info = info(caps, 42);
    c.redial_backoff_min = Duration::from_millis(100);
    c.redial_backoff_max = Duration::from_millis(500);
    // A wrong network key can leave both ends waiting on garbage; fail such handshakes fast.
    c.handshake_timeout = Duration::from_secs(2);
    c
}

async fn start(config: Libp2pConfig) -> (Libp2pTransport, Multiaddr) {
    start_with(Keypair::generate_ed25519(), config).await
}

/// Starts a transport and returns it with its dialable address (`/p2p/<id>` included).
async fn start_with(key: Keypair, config: Libp2pConfig) -> (Libp2pTransport, Multiaddr) {
    let (t, addrs) = Libp2pTransport::start(key, config)
        .await
        .expect("transport starts");
    let addr = addrs[0].clone().with(Protocol::P2p(t.local_peer_id()));
    (t, addr)
}

/// Waits for the first event `f` accepts, skipping others.
async fn expect(
    t: &mut Libp2pTransport,
    what: &str,
    mut f: impl FnMut(&TransportEvent) -> bool,
) -> TransportEvent {
    let deadline = Instant::now() + WAIT;
    loop {
        match timeout_at(deadline, t.next()).await {
            Ok(ev) if f(&ev) => return ev,
            Ok(_) => {}
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

/// Asserts that no event `f` accepts arrives within `QUIET`; returns the events seen.
async fn expect_none(
    t: &mut Libp2pTransport,
    what: &str,
    mut f: impl FnMut(&TransportEvent) -> bool,
) -> Vec<TransportEvent> {
    let deadline = Instant::now() + QUIET;
    let mut seen = Vec::new();
    while let Ok(ev) = timeout_at(deadline, t.next()).await {
        assert!(!f(&ev), "unexpected {what}: {ev:?}");
        seen.push(ev);
    }
    seen
}

/// Polls until a broadcast from `t` goes out with no direct copy, `peers` peers up: on links
/// (this node reaches every peer it knows), or by gossip once gossipsub has seen every
/// connected peer's SUBSCRIBE. The probes are WHOAMIs, so counts of other kinds stay exact.
async fn broadcasts_settled(t: &mut Libp2pTransport, peers: u64) {
    let stats = t.stats();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "gossipsub never settled");
        let before = stats.snapshot();
        t.broadcast(&Message::Whoami {
            electorate_version: 0,
            electorate_term: 0,
            electorate_stamp: 0,
        });
        // The driver accounts for a broadcast on its own task: wait for this one.
        let after = loop {
            let s = stats.snapshot();
            if (
                s.broadcasts_gossiped,
                s.broadcasts_direct,
                s.broadcasts_linked,
            ) != (
                before.broadcasts_gossiped,
                before.broadcasts_direct,
                before.broadcasts_linked,
            ) {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the probe broadcast never went out"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let whole = after.broadcasts_gossiped > before.broadcasts_gossiped
            || after.broadcasts_linked > before.broadcasts_linked;
        if whole && after.broadcasts_direct == before.broadcasts_direct && after.peers_up >= peers {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_up(peer: &NodeId) -> impl FnMut(&TransportEvent) -> bool + '_ {
    move |ev| matches!(ev, TransportEvent::PeerUp { peer: p, .. } if p == peer)
}

fn is_msg<'a>(from: &'a NodeId, want: &'a Message) -> impl FnMut(&TransportEvent) -> bool + 'a {
    move |ev| matches!(ev, TransportEvent::Message { from: f, msg } if f == from && msg == want)
}

fn heartbeat(beat: u64) -> Message {
    Message::Heartbeat {
        term: 3,
        beat,
        membership_version: 1,
        genesis: 0,
        electorate: None,
        membership_term: 0,
        certified: 0,
    }
}

#[tokio::test]
async fn peers_connect_identify_send_and_broadcast() {
    let (mut a, a_addr) = start(config(&["admin_election", "docker"])).await;
    let mut cb = config(&["admin_election"]);
    cb.bootstrap = vec![a_addr.clone()];
    let (mut b, b_addr) = start(cb).await;
    let mut cc = config(&["gpu"]);
    cc.bootstrap = vec![a_addr, b_addr];
    let (mut c, _) = start(cc).await;
    let (ida, idb, idc) = (a.node_id(), b.node_id(), c.node_id());
    // The runtime loop future is `Send` only if the transport's `next` future is; dropping it
    // unpolled must lose nothing (cancel safety).
    fn is_send<T: Send>(_: &T) {}
    is_send(&a.next());
    assert_eq!(ida.as_str(), a.local_peer_id().to_base58());

    // PeerUp carries what the other side advertised through identify.
    let up = expect(&mut b, "B sees A up", is_up(&ida)).await;
    let TransportEvent::PeerUp { info: got, .. } = up else {
        unreachable!()
    };
    assert_eq!(got, info(&["admin_election", "docker"], 42));
    // The SUBSCRIBE pitfall: broadcast the moment the peer is up, before gossipsub may know
    // that A subscribed. It must still arrive.
    b.broadcast(&heartbeat(1));
    let up = expect(&mut a, "A sees B up", is_up(&idb)).await;
    assert!(
        matches!(up, TransportEvent::PeerUp { info, .. } if info.capabilities[0] == "admin_election")
    );
    expect(
        &mut a,
        "B's early broadcast at A",
        is_msg(&idb, &heartbeat(1)),
    )
    .await;

    // A direct message arrives with the authenticated sender.
    let vote = Message::VoteRequest {
        term: 4,
        electorate_version: 1,
        electorate_hash: 99,
        electorate_term: 0,
        electorate_stamp: 0,
        transfer: false,
    };
    expect(&mut c, "C sees A up", is_up(&ida)).await;
    expect(&mut c, "C sees B up", is_up(&idb)).await;
    c.send(&ida, &vote);
    expect(&mut a, "C's vote request at A", is_msg(&idc, &vote)).await;

    // Once settled, a broadcast reaches every peer exactly once: A reaches every peer it
    // knows, so on their links, not by gossip (whose relays would repeat it).
    broadcasts_settled(&mut a, 2).await;
    let before = a.stats().snapshot();
    a.broadcast(&heartbeat(2));
    for (t, name) in [(&mut b, "B"), (&mut c, "C")] {
        expect(
            t,
            &format!("A's broadcast at {name}"),
            is_msg(&ida, &heartbeat(2)),
        )
        .await;
    }
    let stats = a.stats().snapshot();
    assert_eq!(stats.messages_out.get("heartbeat"), Some(&1));
    assert_eq!(
        (
            stats.broadcasts_linked - before.broadcasts_linked,
            stats.broadcasts_gossiped - before.broadcasts_gossiped
        ),
        (2, 0),
        "{stats:?}"
    );
    // Every message byte counted by path: the vote came to A on C's link.
    assert!(
        stats.bytes_out.get("link").is_some_and(|b| *b > 0),
        "{stats:?}"
    );
    assert!(
        stats.bytes_in.get("link").is_some_and(|b| *b > 0),
        "{stats:?}"
    );
    let a_stats = a.stats();
    let dup = tokio::time::timeout(Duration::from_millis(500), async {
        loop {
            if let TransportEvent::Message { msg, .. } = b.next().await {
                if msg == heartbeat(2) {
                    return;
                }
            }
        }
    })
    .await;
    assert!(dup.is_err(), "B received A's broadcast twice");
    assert_eq!(a_stats.snapshot().peers_up, 2);

    // Dropping a transport closes its connections: the others see it go down.
    drop(c);
    expect(
        &mut a,
        "A sees C down",
        |ev| matches!(ev, TransportEvent::PeerDown { peer } if *peer == idc),
    )
    .await;
}

#[tokio::test]
async fn identity_persists_and_bootstrap_redials_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("keys").join("identity.key");
    let key = load_or_create_identity(&key_path).unwrap();
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = load_or_create_identity(&key_path).unwrap();
    assert_eq!(key.public().to_peer_id(), again.public().to_peer_id());

    let (mut a, a_addr) = start_with(key, config(&[])).await;
    let ida = a.node_id();
    let mut cb = config(&[]);
    cb.bootstrap = vec![a_addr.clone()];
    let (mut b, _) = start(cb).await;
    expect(&mut b, "B sees A up", is_up(&ida)).await;

    // A graceful shutdown lets what was already sent leave first.
    let idb = b.node_id();
    let ack = Message::HeartbeatAck {
        term: 1,
        beat: 1,
        promise_ms: 30_000,
        holds: false,
        endorsement: None,
        certified: 0,
    };
    a.send(&idb, &ack);
    a.broadcast(&Message::StepDown {
        term: 1,
        successor: None,
    });
    a.shutdown().await;
    // Both arrive, in either order: the direct message and the gossip travel on different
    // streams (waiting for one while dropping everything else lost the other under load).
    let step_down = Message::StepDown {
        term: 1,
        successor: None,
    };
    let (mut got_ack, mut got_step_down) = (false, false);
    while !(got_ack && got_step_down) {
        let ev = expect(&mut b, "A's last direct message and its step-down", |ev| {
            is_msg(&ida, &ack)(ev) || is_msg(&ida, &step_down)(ev)
        })
        .await;
        got_ack |= is_msg(&ida, &ack)(&ev);
        got_step_down |= is_msg(&ida, &step_down)(&ev);
    }
    expect(
        &mut b,
        "B sees A down",
        |ev| matches!(ev, TransportEvent::PeerDown { peer } if *peer == ida),
    )
    .await;

    // Same key file, same port: B re-dials on its own and sees the same peer id again.
    let reloaded = load_or_create_identity(&key_path).unwrap();
    let mut ca = config(&[]);
    ca.listen = vec![a_addr
        .iter()
        .filter(|p| !matches!(p, Protocol::P2p(_)))
        .collect()];
    let (a2, _) = start_with(reloaded, ca).await;
    assert_eq!(a2.node_id(), ida);
    expect(&mut b, "B sees the restarted A up", is_up(&ida)).await;

    let garbage = dir.path().join("bad.key");
    std::fs::write(&garbage, b"not a key").unwrap();
    let err = load_or_create_identity(&garbage).unwrap_err();
    assert_eq!(err.category(), TransportErrorCategory::Config);
}

#[tokio::test]
async fn a_node_without_the_network_key_never_connects() {
    let dir = tempfile::tempdir().unwrap();
    let write_key = |name: &str, byte: u8| {
        let path = dir.path().join(name);
        let hex: String = std::iter::repeat_n(format!("{byte:02x}"), 32).collect();
        std::fs::write(&path, format!("/key/swarm/psk/1.0.0/\n/base16/\n{hex}\n")).unwrap();
        load_psk(&path).unwrap()
    };
    let (good, bad) = (write_key("good.psk", 0x11), write_key("bad.psk", 0x22));

    let mut ca = config(&[]);
    ca.psk = Some(good);
    let (mut a, a_addr) = start(ca).await;
    let mut cb = config(&[]);
    cb.psk = Some(good);
    cb.bootstrap = vec![a_addr.clone()];
    let (mut b, _) = start(cb).await;
    let mut cc = config(&[]);
    cc.psk = Some(bad);
    cc.bootstrap = vec![a_addr.clone()];
    let (mut c, _) = start(cc).await;
    let mut cd = config(&[]);
    cd.bootstrap = vec![a_addr];
    let (mut d, _) = start(cd).await;

    expect(&mut b, "B (right key) sees A up", is_up(&a.node_id())).await;
    let (idc, idd) = (c.node_id(), d.node_id());
    expect_none(
        &mut a,
        "PeerUp of a node without the key",
        |ev| matches!(ev, TransportEvent::PeerUp { peer, .. } if *peer == idc || *peer == idd),
    )
    .await;
    expect_none(&mut c, "PeerUp with the wrong key", |ev| {
        matches!(ev, TransportEvent::PeerUp { .. })
    })
    .await;
    expect_none(&mut d, "PeerUp without a key", |ev| {
        matches!(ev, TransportEvent::PeerUp { .. })
    })
    .await;
    assert!(a.stats().snapshot().connections_failed >= 1);
    assert!(c.stats().snapshot().connections_failed >= 1);
    // A key mismatch is labelled as a handshake failure, the label the node's WARN line and
    // metric use to name the likely cause.
    for (name, t) in [("A", &a), ("C", &c)] {
        let s = t.stats().snapshot();
        let by = &s.connections_failed_by_reason;
        assert!(
            by.get("handshake")
                .or(by.get("timeout"))
                .is_some_and(|n| *n >= 1),
            "{name}: {s:?}"
        );
    }

    let bad_file = dir.path().join("junk.psk");
    std::fs::write(&bad_file, "/key/swarm/psk/1.0.0/\n/base16/\nzz\n").unwrap();
    assert_eq!(
        load_psk(&bad_file).unwrap_err().category(),
        TransportErrorCategory::Config
    );
}

#[tokio::test]
async fn the_allowlist_keeps_other_peers_out() {
    let kb = Keypair::generate_ed25519();
    let mut ca = config(&[]);
    ca.allowlist = Some(BTreeSet::from([kb.public().to_peer_id()]));
    let (mut a, a_addr) = start(ca).await;
    let mut cb = config(&[]);
    cb.bootstrap = vec![a_addr.clone()];
    let (b, _) = start_with(kb, cb).await;
    let mut cc = config(&[]);
    cc.bootstrap = vec![a_addr];
    let (mut c, _) = start(cc).await;

    expect(&mut a, "A sees the allowed B up", is_up(&b.node_id())).await;
    let idc = c.node_id();
    expect_none(
        &mut a,
        "PeerUp of a peer outside the allowlist",
        |ev| matches!(ev, TransportEvent::PeerUp { peer, .. } if *peer == idc),
    )
    .await;
    expect_none(&mut c, "PeerUp at the excluded peer", |ev| {
        matches!(ev, TransportEvent::PeerUp { .. })
    })
    .await;
    let denied = a.stats().snapshot().connections_denied;
    assert!(
        denied.get("not_allowed").copied().unwrap_or(0) >= 1,
        "{denied:?}"
    );
}

/// A bare libp2p peer that identifies as a node of [`CLUSTER`] (a connection whose identify
/// fails is closed) and speaks the direct-message protocol, to send arbitrary frames.
#[derive(libp2p::swarm::NetworkBehaviour)]
#[behaviour(prelude = "libp2p::swarm::derive_prelude")]
struct RawSender {
    direct: request_response::Behaviour<FrameCodec>,
    identify: libp2p::identify::Behaviour,
}

/// A bare libp2p swarm on TCP + noise + yamux with `make`'s behaviour; its own idle timeout is
/// a minute, so a close within the tests is the other end's.
fn raw_swarm<B: libp2p::swarm::NetworkBehaviour>(
    make: impl FnOnce(&Keypair) -> B,
) -> libp2p::Swarm<B> {
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            libp2p::tcp::Config::default(),
            libp2p::noise::Config::new,
            libp2p::yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|key| make(key))
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build()
}

/// Identify as a node of [`CLUSTER`] would answer it, under the implementation name `agent`.
fn member_identify(key: &Keypair, agent: &str) -> libp2p::identify::Behaviour {
    let mut ad = serde_json::to_value(info(&[], 0)).unwrap();
    ad["agent"] = agent.into();
    ad["cluster"] = CLUSTER.into();
    libp2p::identify::Behaviour::new(
        libp2p::identify::Config::new(IDENTIFY_PROTOCOL.to_owned(), key.public())
            .with_agent_version(ad.to_string()),
    )
}

async fn raw_sender(target: PeerId, addr: Multiaddr) -> tokio::sync::mpsc::Sender<Vec<u8>> {
    use futures::StreamExt;
    let mut swarm = raw_swarm(|key| RawSender {
        direct: request_response::Behaviour::<FrameCodec>::new(
            [(DIRECT_PROTOCOL, request_response::ProtocolSupport::Full)],
            request_response::Config::default(),
        ),
        identify: member_identify(key, "raw-sender"),
    });
    swarm.add_peer_address(target, addr);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                frame = rx.recv() => match frame {
                    Some(frame) => { swarm.behaviour_mut().direct.send_request(&target, Frame::Bytes(frame)); }
                    None => break,
                },
                _ = swarm.select_next_some() => {}
            }
        }
    });
    tx
}

#[tokio::test]
async fn bad_input_is_rejected_and_counted_and_the_transport_keeps_serving() {
    let (mut a, a_addr) = start(config(&[])).await;
    let a_tcp: Multiaddr = a_addr
        .iter()
        .filter(|p| !matches!(p, Protocol::P2p(_)))
        .collect();

    // Raw TCP garbage: the handshake fails, the listener survives.
    let Some(Protocol::Tcp(port)) = a_tcp.iter().nth(1) else {
        panic!("no tcp port in {a_tcp}")
    };
    {
        use tokio::io::AsyncWriteExt;
        let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let junk: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = sock.write_all(&junk).await;
        let _ = sock.shutdown().await;
    }

    // Frames over an authenticated request-response stream.
    let raw = raw_sender(a.local_peer_id(), a_tcp).await;
    let other_cluster = codec::encode("c2", &heartbeat(1)).unwrap();
    raw.send(other_cluster).await.unwrap();
    let rej = expect(&mut a, "a wrong-cluster rejection", |ev| {
        matches!(ev, TransportEvent::Rejected { .. })
    })
    .await;
    let TransportEvent::Rejected { from, reason } = rej else {
        unreachable!()
    };
    assert_eq!(reason, "wrong_cluster");
    let raw_id = from.expect("the sender of a rejected frame is known");

    raw.send(b"\xff\x00 random {{ bytes".to_vec())
        .await
        .unwrap();
    expect(&mut a, "a malformed rejection", |ev| {
        matches!(ev, TransportEvent::Rejected { reason: "malformed", from: Some(f) } if *f == raw_id)
    })
    .await;

    let mut big = codec::encode(CLUSTER, &heartbeat(1)).unwrap();
    big.resize(MAX_MESSAGE_BYTES + 1, b' ');
    raw.send(big).await.unwrap();
    expect(&mut a, "a too-large rejection", |ev| {
        matches!(ev, TransportEvent::Rejected { reason: "too_large", from: Some(f) } if *f == raw_id)
    })
    .await;

    // A well-behaved peer still gets through, and nothing from the raw peer was delivered.
    let mut cb = config(&[]);
    cb.bootstrap = vec![a_addr];
    let (mut b, _) = start(cb).await;
    let ida = a.node_id();
    expect(&mut b, "B sees A up", is_up(&ida)).await;
    let ack = Message::HeartbeatAck {
        term: 3,
        beat: 1,
        promise_ms: 30_000,
        holds: false,
        endorsement: None,
        certified: 0,
    };
    b.send(&ida, &ack);
    let idb = b.node_id();
    let deadline = Instant::now() + WAIT;
    loop {
        let ev = timeout_at(deadline, a.next())
            .await
            .expect("B's message at A");
        if let TransportEvent::Message { from, msg } = &ev {
            assert_ne!(*from, raw_id, "a rejected frame was delivered: {ev:?}");
            if *from == idb && *msg == ack {
                break;
            }
        }
    }
    let s = a.stats().snapshot();
    for reason in ["wrong_cluster", "malformed", "too_large"] {
        assert_eq!(s.rejected.get(reason), Some(&1), "{reason}: {s:?}");
    }
    assert!(
        s.connections_failed >= 1,
        "the garbage connection is counted: {s:?}"
    );
    assert_eq!(s.messages_in.get("heartbeat_ack"), Some(&1));
    drop(raw);
}

#[tokio::test]
async fn a_peer_of_another_cluster_is_rejected_and_disconnected() {
    let (mut a, a_addr) = start(config(&[])).await;
    let mut cx = config(&[]);
    cx.cluster_id = "c2".into();
    cx.bootstrap = vec![a_addr];
    let (mut x, _) = start(cx).await;
    expect_none(&mut a, "PeerUp of another cluster's peer", |ev| {
        matches!(ev, TransportEvent::PeerUp { .. })
    })
    .await;
    expect_none(&mut x, "PeerUp across clusters", |ev| {
        matches!(ev, TransportEvent::PeerUp { .. })
    })
    .await;
    // Whichever side identifies the other first rejects it and hangs up, so the other side may
    // never see an identify at all.
    let wrong = |t: &Libp2pTransport| {
        t.stats()
            .snapshot()
            .rejected
            .get("wrong_cluster")
            .copied()
            .unwrap_or(0)
    };
    assert!(wrong(&a) + wrong(&x) >= 1);
}

#[tokio::test]
async fn connections_over_the_limit_are_denied_and_counted() {
    let mut ca = config(&[]);
    ca.max_connections = 1;
    let (mut a, a_addr) = start(ca).await;
    let mut cb = config(&[]);
    cb.bootstrap = vec![a_addr.clone()];
    let (b, _) = start(cb).await;
    expect(&mut a, "A sees B up", is_up(&b.node_id())).await;
    let mut cc = config(&[]);
    cc.bootstrap = vec![a_addr];
    let (c, _) = start(cc).await;
    let idc = c.node_id();
    expect_none(
        &mut a,
        "PeerUp over the connection limit",
        |ev| matches!(ev, TransportEvent::PeerUp { peer, .. } if *peer == idc),
    )
    .await;
    let denied = a.stats().snapshot().connections_denied;
    assert!(denied.get("limit").copied().unwrap_or(0) >= 1, "{denied:?}");
}

#[tokio::test]
async fn a_port_in_use_is_a_clear_start_up_error() {
    let (_a, a_addr) = start(config(&[])).await;
    let port = a_addr
        .iter()
        .find_map(|p| match p {
            Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .expect("a TCP port");
    // libp2p's own listener sets SO_REUSEPORT, so without the check this would bind too.
    let mut second = config(&[]);
    second.listen = vec![format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()];
    let err = Libp2pTransport::start(Keypair::generate_ed25519(), second.clone())
        .await
        .expect_err("a second listener on the same port");
    let text = err.to_string();
    assert!(text.contains("already in use"), "{text}");
    assert!(text.contains(&port.to_string()), "{text}");
    // One node on IPv4 and IPv6 with one port (wildcards: an IPv6 socket that is not v6-only
    // would cover IPv4 too): its own two listeners do not clash.
    let free = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut both = config(&[]);
    both.listen = vec![
        format!("/ip4/0.0.0.0/tcp/{free}").parse().unwrap(),
        format!("/ip6/::/tcp/{free}").parse().unwrap(),
    ];
    let (dual, addrs) = Libp2pTransport::start(Keypair::generate_ed25519(), both)
        .await
        .expect("IPv4 and IPv6 on one port");
    assert!(addrs.len() >= 2, "{addrs:?}");
    drop(dual);
    // The wildcard address overlaps the loopback one: refused as well.
    second.listen = vec![format!("/ip4/0.0.0.0/tcp/{port}").parse().unwrap()];
    let err = Libp2pTransport::start(Keypair::generate_ed25519(), second)
        .await
        .expect_err("a wildcard listener on the same port");
    assert!(err.to_string().contains("already in use"), "{err}");
}

/// An electorate too large for one 64 KiB frame (issue 13: above ~1,100 members a whoami
/// reply did not fit) travels in parts, sent directly and broadcast, and arrives whole, once.
#[tokio::test]
async fn an_electorate_too_large_for_a_frame_travels_in_parts() {
    use std::sync::Arc;

    use chorus_core::Electorate;

    let members = (0..5_000)
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
        electorate: Some(e.clone()),
        electorate_stamp: 0,
    };
    let frames = codec::encode_parts(CLUSTER, &reply).unwrap();
    assert!(frames.len() >= 4, "{} frames", frames.len());
    assert!(codec::encode(CLUSTER, &reply).is_err(), "fits in one frame");

    let (mut a, a_addr) = start(config(&["admin_election"])).await;
    let mut cb = config(&["admin_election"]);
    cb.bootstrap = vec![a_addr.clone()];
    let (mut b, b_addr) = start(cb).await;
    let mut cc = config(&[]);
    cc.bootstrap = vec![a_addr, b_addr];
    let (mut c, _) = start(cc).await;
    let (ida, idb) = (a.node_id(), b.node_id());
    expect(&mut b, "B sees A up", is_up(&ida)).await;
    expect(&mut a, "A sees B up", is_up(&idb)).await;

    b.send(&ida, &reply);
    expect(&mut a, "B's large whoami reply at A", is_msg(&idb, &reply)).await;

    let hb = Message::Heartbeat {
        term: 3,
        beat: 2,
        membership_version: 1,
        membership_term: 0,
        genesis: e.genesis,
        electorate: Some(e),
        certified: 0,
    };
    expect(&mut c, "C sees A up", is_up(&ida)).await;
    broadcasts_settled(&mut a, 2).await;
    a.broadcast(&hb);
    for (t, name) in [(&mut b, "B"), (&mut c, "C")] {
        expect(
            t,
            &format!("A's large heartbeat at {name}"),
            is_msg(&ida, &hb),
        )
        .await;
        let again = tokio::time::timeout(Duration::from_millis(500), async {
            loop {
                if let TransportEvent::Message { msg, .. } = t.next().await {
                    if msg.kind() == "heartbeat" {
                        return;
                    }
                }
            }
        })
        .await;
        assert!(again.is_err(), "{name} received the heartbeat twice");
    }
    let s = a.stats().snapshot();
    assert_eq!(s.messages_out.get("heartbeat"), Some(&1), "{s:?}");
    assert!(s.rejected.is_empty(), "{s:?}");
    let s = b.stats().snapshot();
    assert_eq!(s.messages_in.get("heartbeat"), Some(&1), "{s:?}");
    assert!(s.rejected.is_empty(), "{s:?}");
}

/// The transport signs electorate statements with the node's identity key, and the core checks
/// the signature from the peer id alone (`chorus_core::certificate`): another node's id, or a
/// signature over another statement, does not check.
#[tokio::test]
async fn the_transport_signs_with_the_key_its_peer_id_names() {
    let (a, _) = start(config(&[])).await;
    let (b, _) = start(config(&[])).await;
    let id = a.node_id();
    let e = chorus_core::Electorate::new(1, vec![id.clone(), b.node_id()]);
    let other = chorus_core::Electorate::new(1, vec![id.clone()]);
    let sig = a.sign(&id, &e.statement());
    assert_eq!(sig.as_bytes().len(), 64, "an Ed25519 signature");
    assert!(chorus_core::certificate::verify(&id, &e.statement(), &sig));
    assert!(!chorus_core::certificate::verify(
        &b.node_id(),
        &e.statement(),
        &sig
    ));
    assert!(!chorus_core::certificate::verify(
        &id,
        &other.statement(),
        &sig
    ));
    let forged = chorus_core::certificate::simulated_signature(&id, &e.statement());
    assert!(!chorus_core::certificate::verify(
        &id,
        &e.statement(),
        &forged
    ));
}

/// Issue 35: B and C, given only A's address, meet through A's Kademlia table and stay
/// connected when A goes; X, a node of another cluster that also dialled A, is never passed on.
#[tokio::test]
async fn peers_met_through_one_address_connect_and_other_clusters_stay_out() {
    let (a, a_addr) = start(config(&[])).await;
    let mut cx = config(&[]);
    cx.cluster_id = "c2".into();
    cx.bootstrap = vec![a_addr.clone()];
    let (x, _) = start(cx).await;
    let mut cb = config(&[]);
    cb.bootstrap = vec![a_addr.clone()];
    let (mut b, _) = start(cb).await;
    let mut cc = config(&[]);
    cc.bootstrap = vec![a_addr];
    let (mut c, _) = start(cc).await;
    expect(&mut b, "B sees C up", is_up(&c.node_id())).await;
    expect(&mut c, "C sees B up", is_up(&b.node_id())).await;

    let (ida, idc, idx) = (a.node_id(), c.node_id(), x.node_id());
    drop(a);
    expect(
        &mut b,
        "B sees A down",
        |ev| matches!(ev, TransportEvent::PeerDown { peer } if *peer == ida),
    )
    .await;
    expect_none(&mut b, "B losing C, or meeting X", |ev| match ev {
        TransportEvent::PeerDown { peer } => *peer == idc,
        TransportEvent::PeerUp { peer, .. } => *peer == idx,
        _ => false,
    })
    .await;
    for t in [&b, &c] {
        let s = t.stats().snapshot();
        assert_eq!(s.rejected.get("wrong_cluster"), None, "{s:?}");
        assert_eq!(s.peers_up, 1, "{s:?}");
    }
    // B knows A, which it no longer reaches: a broadcast goes by gossip (a peer reachable
    // only through another would hear it relayed), and still reaches C.
    let idb = b.node_id();
    let before = b.stats().snapshot();
    b.broadcast(&heartbeat(7));
    expect(&mut c, "B's broadcast at C", is_msg(&idb, &heartbeat(7))).await;
    let after = b.stats().snapshot();
    assert_eq!(
        after.broadcasts_linked, before.broadcasts_linked,
        "{after:?}"
    );
    assert!(
        after.broadcasts_gossiped + after.broadcasts_direct
            > before.broadcasts_gossiped + before.broadcasts_direct,
        "{after:?}"
    );
}

fn tcp_port(addr: &Multiaddr) -> u16 {
    addr.iter()
        .find_map(|p| match p {
            Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .expect("a TCP address")
}

/// Issue 54: a node on another machine that listens on `0.0.0.0` advertises `127.0.0.1:PORT`
/// beside its routable addresses; dialled here, that address leads to whatever listens on
/// this machine's loopback (often this very node: a handshake failure that read as a key
/// mismatch). A peer reached at a routable address is never dialled at a loopback one: A
/// listens on both, B connects to the routable one, A goes away and a bare TCP listener takes
/// A's loopback port; B's messages to A (dials by peer id) never reach that listener.
#[tokio::test]
async fn a_loopback_address_of_a_peer_reached_elsewhere_is_never_dialled() {
    let ip = crate::common::outside_ip();
    let mut ca = config(&[]);
    ca.listen = vec![
        format!("/ip4/{ip}/tcp/0").parse().unwrap(),
        "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
    ];
    let (a, addrs) = Libp2pTransport::start(Keypair::generate_ed25519(), ca)
        .await
        .expect("transport starts");
    let ida = a.node_id();
    let routable = addrs
        .iter()
        .find(|a| a.to_string().starts_with(&format!("/ip4/{ip}/")))
        .expect("the routable address")
        .clone()
        .with(Protocol::P2p(a.local_peer_id()));
    let loopback_port = tcp_port(
        addrs
            .iter()
            .find(|a| a.to_string().starts_with("/ip4/127.0.0.1/"))
            .expect("the loopback address"),
    );
    let mut cb = config(&[]);
    cb.bootstrap = vec![routable];
    let (mut b, _) = start(cb).await;
    expect(&mut b, "B sees A up", is_up(&ida)).await;
    drop(a);
    expect(
        &mut b,
        "B sees A down",
        |ev| matches!(ev, TransportEvent::PeerDown { peer } if *peer == ida),
    )
    .await;
    let decoy = {
        let deadline = Instant::now() + WAIT;
        loop {
            match std::net::TcpListener::bind(("127.0.0.1", loopback_port)) {
                Ok(l) => break l,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("A's loopback port stays taken: {e}"),
            }
        }
    };
    decoy.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + QUIET;
    while Instant::now() < deadline {
        b.send(&ida, &heartbeat(1));
        // Keeps B's events flowing while it tries.
        let _ = tokio::time::timeout(Duration::from_millis(200), b.next()).await;
        if let Ok((_, from)) = decoy.accept() {
            panic!("B dialled A's loopback address (a connection from {from})");
        }
    }
}

/// Compact links (issue 54, item 10): a heartbeat and its acknowledgement go as compact frames
/// between nodes that both accept `/chorus/link/2.0.0`, and as JSON to and from a node that
/// does not (an earlier release, stood in for by `compact_links: false`) — every message
/// arrives whole either way. Fails when the writer never offers link/2 (no compact frame is
/// counted), and when it writes compact frames on link/1 (the older node's reader would be
/// sent them: its count would move).
#[tokio::test]
async fn compact_links_carry_heartbeats_and_an_older_peer_gets_json() {
    let (mut a, a_addr) = start(config(&["admin_election"])).await;
    let mut cb = config(&["admin_election"]);
    cb.bootstrap = vec![a_addr.clone()];
    let (mut b, _) = start(cb).await;
    let mut cc = config(&["admin_election"]);
    cc.bootstrap = vec![a_addr];
    cc.compact_links = false;
    let (mut c, _) = start(cc).await;
    let (ida, idb, idc) = (a.node_id(), b.node_id(), c.node_id());
    expect(&mut b, "B sees A up", is_up(&ida)).await;
    expect(&mut c, "C sees A up", is_up(&ida)).await;
    broadcasts_settled(&mut a, 2).await;
    let before = a.stats().snapshot();
    a.broadcast(&heartbeat(7));
    for (t, name) in [(&mut b, "B"), (&mut c, "C")] {
        expect(
            t,
            &format!("A's heartbeat at {name}"),
            is_msg(&ida, &heartbeat(7)),
        )
        .await;
    }
    let ack = |holds: bool| Message::HeartbeatAck {
        term: 3,
        beat: 7,
        promise_ms: 900,
        holds,
        endorsement: holds.then(|| chorus_core::Signature::from_bytes(&[9; 64])),
        certified: 1,
    };
    b.send(&ida, &ack(true));
    c.send(&ida, &ack(false));
    expect(&mut a, "B's ack at A", is_msg(&idb, &ack(true))).await;
    expect(&mut a, "C's ack at A", is_msg(&idc, &ack(false))).await;
    let after = a.stats().snapshot();
    assert_eq!(
        after.compact_frames_out - before.compact_frames_out,
        1,
        "A's heartbeat compact to B only: {after:?}"
    );
    assert!(
        b.stats().snapshot().compact_frames_out >= 1,
        "B's ack compact"
    );
    assert_eq!(
        c.stats().snapshot().compact_frames_out,
        0,
        "C speaks link/1 only"
    );
}

/// API tunnels (`tunnel.rs`, issue 54 item 8): a node opens a byte stream to a connected
/// member's API over the cluster transport and the member serves it, once it admitted the
/// caller (a tunnel that comes first waits for that); a node that serves none
/// answers `Unsupported`, one that is not connected `NotConnected` at once (a tunnel never
/// dials), and only admitted peers' tunnels are served (counted both ways).
#[tokio::test]
async fn an_api_tunnel_carries_bytes_both_ways_to_a_connected_member_only() {
    use chorus_io::transport::libp2p::TunnelError;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, a_addr) = start(config(&["admin_election"])).await;
    let mut cb = config(&["admin_election"]);
    cb.bootstrap = vec![a_addr];
    let (mut b, _) = start(cb).await;
    let (ida, idb) = (a.node_id(), b.node_id());
    // B calls as soon as it sees A, which may not have admitted B yet: the tunnel waits for
    // that (closed unread at once instead, 5 runs of 5 failed).
    expect(&mut b, "B sees A up", is_up(&ida)).await;
    // A serves tunnels: it echoes what comes, upper-cased.
    let mut listener = a.tunnels().listen().expect("listens once");
    assert!(matches!(
        a.tunnels().listen(),
        Err(TunnelError::AlreadyListening)
    ));
    let served = tokio::spawn(async move {
        let t = listener.next().await.expect("a tunnel");
        let from = t.node.clone();
        let mut stream = t.stream;
        let mut got = [0u8; 4];
        stream.read_exact(&mut got).await.expect("read");
        stream
            .write_all(&got.to_ascii_uppercase())
            .await
            .expect("write");
        stream.flush().await.expect("flush");
        from
    });
    let mut stream = b
        .tunnels()
        .open(&ida.to_string())
        .await
        .expect("B opens a tunnel to A");
    stream.write_all(b"ping").await.unwrap();
    stream.flush().await.unwrap();
    let mut back = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut back))
        .await
        .expect("answered in time")
        .unwrap();
    assert_eq!(&back, b"PING");
    assert_eq!(served.await.unwrap(), idb.to_string(), "served as from B");
    assert_eq!(a.stats().snapshot().tunnels.get("in"), Some(&1));
    assert_eq!(b.stats().snapshot().tunnels.get("out"), Some(&1));
    // B serves no tunnels: A hears so, and nothing is counted as opened.
    match a.tunnels().open(&idb.to_string()).await {
        Err(TunnelError::Unsupported(node)) => assert_eq!(node, idb.to_string()),
        other => panic!("A's tunnel to B, which does not serve them: {other:?}"),
    }
    // A node that is not connected: refused at once, without dialling.
    let stranger = libp2p::identity::Keypair::generate_ed25519()
        .public()
        .to_peer_id()
        .to_base58();
    assert!(matches!(
        b.tunnels().open(&stranger).await,
        Err(TunnelError::NotConnected(_))
    ));
    assert!(matches!(
        b.tunnels().open("not a node").await,
        Err(TunnelError::NotANode(_))
    ));
}

/// A bare libp2p peer that dials `addr` with `behaviour` and reports when its connection to
/// `target` closes (its own idle timeout is a minute, so the close is the other end's).
async fn raw_dialer<B>(
    target: PeerId,
    addr: Multiaddr,
    behaviour: B,
) -> tokio::sync::oneshot::Receiver<Instant>
where
    B: libp2p::swarm::NetworkBehaviour + Send + 'static,
{
    use futures::StreamExt;
    use libp2p::swarm::SwarmEvent;
    let mut swarm = raw_swarm(|_| behaviour);
    swarm.dial(addr).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        loop {
            if let SwarmEvent::ConnectionClosed { peer_id, .. } = swarm.select_next_some().await {
                if peer_id == target {
                    let _ = tx.send(Instant::now());
                    return;
                }
            }
        }
    });
    rx
}

fn unidentified(t: &Libp2pTransport) -> u64 {
    let failed = t.stats().snapshot().connections_failed_by_reason;
    failed.get("unidentified").copied().unwrap_or(0)
}

/// A connection on which identify fails (here the peer does not speak it; under faults, a
/// negotiation that timed out) is closed at once and counted. It used to stay open with its
/// peer never up — every message from it held and dropped — until identify asked again five
/// minutes later: the real-fault soak saw a node's tasks wait > 240 s so.
#[tokio::test]
async fn a_connection_whose_identify_fails_is_closed_and_counted() {
    let (a, a_addr) = start(config(&[])).await;
    let dialled = Instant::now();
    let closed = raw_dialer(
        a.local_peer_id(),
        a_addr,
        libp2p::ping::Behaviour::default(),
    )
    .await;
    let at = timeout_at(dialled + QUIET, closed)
        .await
        .expect("the connection whose identify failed is closed within 3 s")
        .unwrap();
    assert!(unidentified(&a) >= 1, "closed at {:?}", at - dialled);
}

/// A peer that takes identify's stream and never answers is disconnected once it has been
/// connected for `identify_timeout` without identifying (identify itself waits a minute).
#[tokio::test]
async fn a_peer_that_never_identifies_is_disconnected_after_the_identify_timeout() {
    let mut ca = config(&[]);
    ca.identify_timeout = Duration::from_secs(2);
    let (a, a_addr) = start(ca).await;
    let silent = libp2p_stream::Behaviour::new();
    let mut incoming = silent
        .new_control()
        .accept(libp2p::StreamProtocol::new("/ipfs/id/1.0.0"))
        .unwrap();
    // Holds every identify stream open, unanswered.
    tokio::spawn(async move {
        use futures::StreamExt;
        let mut held = Vec::new();
        while let Some(stream) = incoming.next().await {
            held.push(stream);
        }
    });
    let dialled = Instant::now();
    let closed = raw_dialer(a.local_peer_id(), a_addr, silent).await;
    let at = timeout_at(dialled + Duration::from_secs(10), closed)
        .await
        .expect("a peer that never identifies is disconnected within 10 s")
        .unwrap();
    assert!(
        at - dialled >= Duration::from_millis(1500),
        "closed after {:?}, before the identify timeout",
        at - dialled
    );
    assert_eq!(unidentified(&a), 1);
}

/// A bare peer that identifies as a node of [`CLUSTER`] and opens link streams by hand.
#[derive(libp2p::swarm::NetworkBehaviour)]
#[behaviour(prelude = "libp2p::swarm::derive_prelude")]
struct RawLinker {
    stream: libp2p_stream::Behaviour,
    identify: libp2p::identify::Behaviour,
}

/// A peer writes on its newest link stream: one beyond the two read at once replaces the
/// oldest rather than being refused. Refused, two streams its writer had given up — left
/// open at the reader while the connection under them lived — shut out every message it sent
/// after (the real-fault soak: an admin refused a node's task offers for four minutes).
#[tokio::test]
async fn a_newer_link_stream_replaces_the_oldest_and_is_read() {
    use futures::{AsyncWriteExt, StreamExt};
    use libp2p::request_response::Codec;
    let (mut a, a_addr) = start(config(&[])).await;
    let target = a.local_peer_id();
    let mut swarm = raw_swarm(|key| RawLinker {
        stream: libp2p_stream::Behaviour::new(),
        identify: member_identify(key, "raw-linker"),
    });
    let raw_id = NodeId::from(swarm.local_peer_id().to_base58());
    let mut control = swarm.behaviour().stream.new_control();
    swarm.dial(a_addr).unwrap();
    tokio::spawn(async move {
        loop {
            swarm.select_next_some().await;
        }
    });
    expect(&mut a, "A sees the raw peer up", is_up(&raw_id)).await;

    // Two streams opened and left open, as a writer that gave them up leaves them; the third
    // carries a heartbeat.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(control.open_stream(target, LINK_PROTOCOL).await.unwrap());
    }
    let mut third = control.open_stream(target, LINK_PROTOCOL).await.unwrap();
    let beat = heartbeat(7);
    let bytes = codec::encode(CLUSTER, &beat).unwrap();
    FrameCodec
        .write_request(&DIRECT_PROTOCOL, &mut third, Frame::Bytes(bytes))
        .await
        .unwrap();
    third.flush().await.unwrap();
    expect(
        &mut a,
        "the heartbeat on the newest link",
        is_msg(&raw_id, &beat),
    )
    .await;
    let s = a.stats().snapshot();
    assert_eq!(s.links_replaced, 1, "{s:?}");
    assert_eq!(s.rejected.get("too_many_links"), None, "{s:?}");
    drop(held);
}
