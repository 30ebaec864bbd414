//! The composed libp2p behaviour, the layered TCP transport, and what a node advertises through
//! identify.

use std::num::NonZeroUsize;
use std::time::Duration;

use chorus_core::codec::MAX_MESSAGE_BYTES;
use chorus_core::PeerInfo;
use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::transport::Boxed;
use libp2p::core::upgrade::Version;
use libp2p::identity::Keypair;
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::NetworkBehaviour;
use libp2p::{
    allow_block_list, connection_limits, gossipsub, identify, kad, mdns, noise, ping, tcp, yamux,
    PeerId, StreamProtocol, Transport as _,
};
use serde::{Deserialize, Serialize};

use super::addresses::KnownAddresses;
use super::frame::{FrameCodec, DIRECT_PROTOCOL};
use super::{Libp2pConfig, TransportError};

/// The identify `protocol_version` of CHORUS nodes speaking wire version 1.
pub const IDENTIFY_PROTOCOL: &str = "/chorus/1.0.0";

/// Gossipsub frames carry the message plus its envelope (source, sequence number, signature,
/// topic); this leaves room for that around a 64 KiB message.
const GOSSIP_MAX_TRANSMIT_BYTES: usize = MAX_MESSAGE_BYTES + 4 * 1024;

/// Peers per Kademlia bucket: libp2p's default `K_VALUE`; 256 buckets of them bound the table.
const KAD_BUCKET_SIZE: usize = 20;

/// How often Kademlia looks for peers on its own (it also does when its table is nearly empty,
/// and the driver asks after a peer is lost). Five minutes: each round is a lookup per bucket
/// over fresh substreams, which at 30 s cost a 5-node cluster ~3.8 KB/s of its ~15.7 KB/s idle
/// traffic (more than the heartbeats save against etcd; issue 36); joins and losses do not wait
/// for it.
pub(super) const KAD_BOOTSTRAP_EVERY: Duration = Duration::from_secs(300);

/// The Kademlia protocol of a cluster: a node of another cluster does not speak it, so the two
/// never exchange tables.
pub(super) fn kad_protocol(cluster_id: &str) -> Result<StreamProtocol, TransportError> {
    StreamProtocol::try_from_owned(format!("/chorus/{cluster_id}/kad/1.0.0"))
        .map_err(|e| TransportError::Config(format!("Kademlia protocol name: {e}")))
}

/// Every protocol a node runs, in one behaviour. The allowlist and the connection limits come
/// first: they deny connections before the other behaviours see them.
#[derive(NetworkBehaviour)]
pub(super) struct Behaviour {
    pub(super) allow: Toggle<allow_block_list::Behaviour<allow_block_list::AllowedPeers>>,
    pub(super) limits: connection_limits::Behaviour,
    pub(super) direct: request_response::Behaviour<FrameCodec>,
    pub(super) link: libp2p_stream::Behaviour,
    pub(super) gossipsub: gossipsub::Behaviour,
    pub(super) identify: identify::Behaviour,
    pub(super) kad: kad::Behaviour<kad::store::MemoryStore>,
    pub(super) ping: ping::Behaviour,
    pub(super) mdns: Toggle<mdns::tokio::Behaviour>,
    /// Checked addresses of identified peers, for dials by peer id (`addresses.rs`).
    pub(super) addresses: KnownAddresses,
}

/// The JSON a node puts in identify's `agent_version`, from which the receiver builds the
/// [`PeerInfo`] of `PeerUp`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Advertisement {
    /// Implementation and version, for humans.
    pub(super) agent: String,
    /// The cluster the node belongs to.
    pub(super) cluster: String,
    /// Capabilities and score inputs, as of when the transport started.
    #[serde(flatten)]
    pub(super) info: PeerInfo,
    /// The node's HTTP API (host:port), so tools can ask every node for its own status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) http: Option<String>,
}

impl Advertisement {
    pub(super) fn new(cluster: &str, info: &PeerInfo, http: Option<&str>) -> Self {
        Advertisement {
            agent: format!("chorus-rs/{}", env!("CARGO_PKG_VERSION")),
            cluster: cluster.to_owned(),
            info: info.clone(),
            http: http.map(str::to_owned),
        }
    }
}

/// The gossipsub topic of a cluster.
pub(super) fn cluster_topic(cluster_id: &str) -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(format!("chorus/{cluster_id}/v1"))
}

impl Behaviour {
    pub(super) fn new(keypair: &Keypair, config: &Libp2pConfig) -> Result<Self, TransportError> {
        let local = keypair.public().to_peer_id();

        let allow = config.allowlist.as_ref().map(|peers| {
            let mut b = allow_block_list::Behaviour::<allow_block_list::AllowedPeers>::default();
            for p in peers {
                b.allow_peer(*p);
            }
            // Our own id must pass, or dialling ourselves by mistake would look like a denial.
            b.allow_peer(local);
            b
        });

        let limits = connection_limits::Behaviour::new(
            connection_limits::ConnectionLimits::default()
                .with_max_established(Some(config.max_connections))
                .with_max_established_per_peer(Some(config.max_connections_per_peer))
                .with_max_pending_incoming(Some(config.max_connections)),
        );

        let direct = request_response::Behaviour::new(
            [(DIRECT_PROTOCOL, ProtocolSupport::Full)],
            request_response::Config::default().with_request_timeout(config.request_timeout),
        );

        // The message id of go-libp2p and py-libp2p (their default): the source peer id's bytes
        // followed by the sequence number as sent on the wire (8 bytes, big-endian). rust-libp2p's
        // default renders both as text instead, so gossip repair (IHAVE/IWANT) with the other
        // implementations would miss; this keeps the ids byte-identical.
        let gossip_config = gossipsub::ConfigBuilder::default()
            .validation_mode(gossipsub::ValidationMode::Strict)
            .max_transmit_size(GOSSIP_MAX_TRANSMIT_BYTES)
            .heartbeat_interval(Duration::from_secs(1))
            .message_id_fn(go_message_id)
            .build()
            .map_err(|e| TransportError::Config(format!("gossipsub: {e}")))?;
        let mut gossipsub = gossipsub::Behaviour::new(
            gossipsub::MessageAuthenticity::Signed(keypair.clone()),
            gossip_config,
        )
        .map_err(|e| TransportError::Config(format!("gossipsub: {e}")))?;
        gossipsub
            .subscribe(&cluster_topic(&config.cluster_id))
            .map_err(|e| TransportError::Config(format!("gossipsub subscribe: {e}")))?;

        let agent = serde_json::to_string(&Advertisement::new(
            &config.cluster_id,
            &config.info,
            config.http.as_deref(),
        ))
        .map_err(|e| TransportError::Config(format!("identify advertisement: {e}")))?;
        let identify = identify::Behaviour::new(
            identify::Config::new(IDENTIFY_PROTOCOL.to_owned(), keypair.public())
                .with_agent_version(agent)
                // Its cache would offer every address a peer advertises, loopback included,
                // to dials of that peer; `KnownAddresses` keeps only the checked ones.
                .with_cache_size(0),
        );

        // Kademlia only for peer exchange: the driver adds a peer to the table once identify
        // showed it is a node of this cluster (manual inserts), and no records are stored for
        // others (inbound records are filtered, and none are kept).
        let mut kad_config = kad::Config::new(kad_protocol(&config.cluster_id)?);
        kad_config
            .set_kbucket_inserts(kad::BucketInserts::Manual)
            .set_record_filtering(kad::StoreInserts::FilterBoth)
            .set_kbucket_size(NonZeroUsize::new(KAD_BUCKET_SIZE).unwrap_or(NonZeroUsize::MIN))
            .set_periodic_bootstrap_interval(Some(KAD_BOOTSTRAP_EVERY))
            .set_query_timeout(Duration::from_secs(20));
        let store = kad::store::MemoryStore::with_config(
            local,
            kad::store::MemoryStoreConfig {
                max_records: 0,
                max_value_bytes: 0,
                max_providers_per_key: 0,
                max_provided_keys: 0,
            },
        );
        let mut kad = kad::Behaviour::with_config(local, store, kad_config);
        // Server mode from the start: nodes listen on addresses they advertise themselves (no
        // external address confirmation here), and peers must be able to ask this one.
        kad.set_mode(Some(kad::Mode::Server));

        // Every `ping_interval` (15 s by default, libp2p's: no more idle traffic), an answer
        // within `ping_timeout`; two missed in a row close the connection (the driver), so a
        // silent peer is down within about two of each (50 s by default).
        let ping = ping::Behaviour::new(
            ping::Config::new()
                .with_interval(config.ping_interval)
                .with_timeout(config.ping_timeout),
        );

        let mdns = if config.mdns {
            Some(
                mdns::tokio::Behaviour::new(mdns::Config::default(), local)
                    .map_err(|e| TransportError::Io(format!("mDNS: {e}")))?,
            )
        } else {
            None
        };

        Ok(Behaviour {
            allow: allow.into(),
            limits,
            direct,
            link: libp2p_stream::Behaviour::new(),
            gossipsub,
            identify,
            kad,
            ping,
            mdns: mdns.into(),
            addresses: KnownAddresses::default(),
        })
    }
}

/// TCP, optionally wrapped in the pre-shared-key layer, then noise and yamux.
///
/// With a key, every byte after the TCP handshake (the noise handshake included) is encrypted
/// with it, so a node without the key fails the noise handshake and never connects.
pub(super) fn build_transport(
    keypair: &Keypair,
    psk: Option<PreSharedKey>,
    timeout: Duration,
) -> Result<Boxed<(PeerId, StreamMuxerBox)>, TransportError> {
    let noise =
        noise::Config::new(keypair).map_err(|e| TransportError::Config(format!("noise: {e}")))?;
    let tcp = tcp::tokio::Transport::new(tcp::Config::default().nodelay(true));
    let transport = match psk {
        Some(psk) => tcp
            .and_then(move |socket, _| PnetConfig::new(psk).handshake(socket))
            .upgrade(Version::V1Lazy)
            .authenticate(noise)
            .multiplex(yamux::Config::default())
            .timeout(timeout)
            .boxed(),
        None => tcp
            .upgrade(Version::V1Lazy)
            .authenticate(noise)
            .multiplex(yamux::Config::default())
            .timeout(timeout)
            .boxed(),
    };
    Ok(transport)
}

/// go-libp2p's `DefaultMsgIdFn`: `string(from) + string(seqno)`, raw bytes.
pub(crate) fn go_message_id(message: &gossipsub::Message) -> gossipsub::MessageId {
    let mut id = message.source.map(|p| p.to_bytes()).unwrap_or_default();
    if let Some(seqno) = message.sequence_number {
        id.extend_from_slice(&seqno.to_be_bytes());
    }
    gossipsub::MessageId::new(&id)
}

#[cfg(test)]
mod message_id_tests {
    use super::*;

    #[test]
    fn message_id_is_source_bytes_then_big_endian_seqno() {
        let source = libp2p::PeerId::random();
        let m = gossipsub::Message {
            source: Some(source),
            data: b"x".to_vec(),
            sequence_number: Some(0x0102_0304_0506_0708),
            topic: gossipsub::IdentTopic::new("t").hash(),
        };
        let mut want = source.to_bytes();
        want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(go_message_id(&m), gossipsub::MessageId::new(&want));
    }
}
