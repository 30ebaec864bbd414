//! Certificates of committed electorates: how a voter that missed any number of changes catches
//! up without trusting whoever hands it the electorate (rule 7 of `membership.rs`).
//!
//! Every member signs the *statement* of each electorate it holds (a SHA-256 over the cluster's
//! genesis, the version, the proposing term and the members) and sends the signature with the
//! heartbeat acknowledgement that says it holds it. The admin commits a change only once a
//! majority of the old electorate has so endorsed the new one, and keeps those signatures as the
//! new electorate's **link**: the proof that a majority of its predecessor held it. A node checks
//! a chain of links from the newest electorate it can vouch for (its **anchor**: the one it
//! bootstrapped or discovered, or the last link it checked) one version at a time, whoever hands
//! it over, and takes the chain's end like any later position.
//!
//! Keys: a node's id is its libp2p peer id, which for an Ed25519 key *is* the public key, so a
//! signature checks against the id alone. The simulator's short names (`n0`, `a`) are not peer
//! ids; they sign with a keyed hash anyone can compute ([`simulated_signature`]), which stands
//! for a signature among honest simulated nodes only. A well-formed peer id never falls back to
//! it, and every id a real transport gives a node is one.
//!
//! Not the core's business: holding keys. The core asks for a signature
//! ([`Command::Sign`](crate::Command::Sign)) and the runtime answers at once with
//! [`Event::Signed`](crate::Event::Signed), which the event log keeps like any input.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest as _;

use crate::{Electorate, NodeId, Refusal};

/// At most this many links travel in one [`Message::Chain`](crate::Message::Chain); a node
/// further behind asks again from where it got to.
pub const MAX_LINKS_PER_MESSAGE: usize = 64;

/// At most this many bytes (a bound on their encoding) of links travel in one
/// [`Message::Chain`](crate::Message::Chain), in parts when over a frame: a quarter of what a
/// message in parts may hold, so a chain of large electorates is cut short, never refused by
/// the codec. One link always goes (the largest electorate's fits on its own).
pub const MAX_CHAIN_BYTES: usize = crate::codec::MAX_ASSEMBLED_BYTES / 4;

/// At most this many links a node keeps to hand to others (the newest). A node that missed more
/// changes than this while every member it knows left cannot catch up by itself; the operator
/// starts it afresh (its data directory removed) so discovery gives it the current electorate.
pub const MAX_LINKS_KEPT: usize = 1024;

/// The longest signature accepted (an Ed25519 signature is 64 bytes).
pub const MAX_SIGNATURE_BYTES: usize = 64;

/// A SHA-256 over an electorate's statement (see [`Electorate::statement`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

/// A signature by one node over a [`Digest`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Signature(Arc<[u8]>);

/// A committed electorate with the endorsements of a majority of the electorate before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The electorate (version ≥ 2).
    pub electorate: Arc<Electorate>,
    /// Members of the previous version, each with its signature over `electorate`'s statement;
    /// sorted by id, at least a majority of that version.
    pub signers: Vec<(NodeId, Signature)>,
}

/// What a node knows of the chain of committed electorates (durable, but for the volatile
/// fields marked).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chain {
    /// The newest electorate this node can vouch for: the first one it held (agreed at
    /// bootstrap or taken from discovery's confirmations), then each link it checked or, as
    /// admin, certified.
    pub(crate) anchor: Option<Arc<Electorate>>,
    /// The links this node can hand on, by version (the newest [`MAX_LINKS_KEPT`]).
    pub(crate) links: BTreeMap<u64, Arc<Link>>,
    /// The statement of the electorate this node holds, computed once per change when the
    /// node is one that signs (eligible or a member): what its signature and its voters'
    /// endorsements are checked against. Volatile: computed again at start.
    #[serde(default)]
    pub(crate) statement: Option<Digest>,
    /// This node's signature over `statement`, once the runtime answered. Volatile.
    #[serde(default)]
    pub(crate) endorsement: Option<Signature>,
    /// The peer asked for links, and when: one question at a time, so a flood of heartbeats
    /// from strangers cannot make this node ask a flood of questions. Volatile.
    #[serde(default)]
    pub(crate) asked: Option<(NodeId, u64)>,
    /// The last peer asked in a walk round the peer table, once a question went unanswered
    /// (`catchup.rs`); ended by an answer. Volatile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) walk: Option<NodeId>,
    /// This process asked its admin for the link of its anchor (`catchup.rs`): once. Volatile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) anchor_link_asked: bool,
}

impl Chain {
    /// The anchor's version (0 before any electorate).
    pub(crate) fn certified(&self) -> u64 {
        self.anchor.as_ref().map_or(0, |a| a.version)
    }

    /// Keeps `link` to hand on, dropping the oldest beyond [`MAX_LINKS_KEPT`].
    pub(crate) fn keep(&mut self, link: Arc<Link>) {
        self.links.insert(link.electorate.version, link);
        while self.links.len() > MAX_LINKS_KEPT {
            self.links.pop_first();
        }
    }

    /// The links after version `after`, oldest first, at most [`MAX_LINKS_PER_MESSAGE`] and
    /// [`MAX_CHAIN_BYTES`], if they start right after it (a gap would not check).
    pub(crate) fn links_after(&self, after: u64) -> Vec<Arc<Link>> {
        let mut bytes = 0;
        let links: Vec<_> = self
            .links
            .range(after + 1..)
            .take(MAX_LINKS_PER_MESSAGE)
            .take_while(|(_, l)| {
                let first = bytes == 0;
                bytes += l.encoded_bound();
                first || bytes <= MAX_CHAIN_BYTES
            })
            .map(|(_, l)| l.clone())
            .collect();
        match links.first() {
            Some(l) if l.electorate.version == after + 1 => links,
            _ => Vec::new(),
        }
    }
}

impl Electorate {
    /// What members sign: SHA-256 of a domain tag, the genesis, version, proposing term and
    /// every member (length-prefixed), then the operator-removed ids if any, so no two
    /// electorates share a statement.
    pub fn statement(&self) -> Digest {
        let mut h = sha2::Sha256::new();
        h.update(b"chorus electorate statement v1\0");
        h.update(self.genesis.to_be_bytes());
        h.update(self.version.to_be_bytes());
        h.update(self.term.to_be_bytes());
        h.update((self.len() as u64).to_be_bytes());
        for m in self.members() {
            let bytes = m.as_str().as_bytes();
            h.update((bytes.len() as u32).to_be_bytes());
            h.update(bytes);
        }
        if !self.retired().is_empty() {
            // The operator's removals are signed too, so nobody who hands a link over can add
            // or drop one. Absent when empty: earlier statements are unchanged.
            h.update(b"retired\0");
            h.update((self.retired().len() as u64).to_be_bytes());
            for r in self.retired() {
                let bytes = r.as_str().as_bytes();
                h.update((bytes.len() as u32).to_be_bytes());
                h.update(bytes);
            }
        }
        Digest(h.finalize().into())
    }
}

impl Link {
    /// An upper bound on this link's bytes in a message: every id's characters escaped (at
    /// most two bytes each) and quoted, each signature in hex, and room for the fields.
    pub fn encoded_bound(&self) -> usize {
        let id = |n: &NodeId| 2 * n.as_str().len() + 3;
        let e = &self.electorate;
        let ids: usize = e.members().iter().chain(e.retired()).map(id).sum();
        let signers: usize = (self.signers.iter())
            .map(|(n, _)| id(n) + 2 * MAX_SIGNATURE_BYTES + 6)
            .sum();
        256 + ids + signers
    }

    /// Checks this link against `prev`, the electorate before it: the next version of the same
    /// cluster, signed by distinct members of `prev` that make a majority of it, every
    /// signature good. `verify` is [`verify`] outside tests.
    pub fn check(
        &self,
        prev: &Electorate,
        verify: impl Fn(&NodeId, &Digest, &Signature) -> bool,
    ) -> Result<(), Refusal> {
        let e = &self.electorate;
        if e.version != prev.version + 1 || e.genesis != prev.genesis {
            return Err(Refusal::BadCertificate);
        }
        let distinct = self.signers.windows(2).all(|w| w[0].0 < w[1].0);
        let members = self.signers.iter().all(|(id, _)| prev.contains(id));
        if !distinct || !members || self.signers.len() < prev.quorum() {
            return Err(Refusal::BadCertificate);
        }
        let statement = e.statement();
        if self
            .signers
            .iter()
            .all(|(id, sig)| verify(id, &statement, sig))
        {
            Ok(())
        } else {
            Err(Refusal::BadCertificate)
        }
    }
}

/// Whether `sig` is `signer`'s signature over `digest`: Ed25519 against the key a peer id holds,
/// or, for an id that is no peer id at all (the simulator's), the simulated scheme.
pub fn verify(signer: &NodeId, digest: &Digest, sig: &Signature) -> bool {
    match peer_key(signer) {
        PeerKey::Ed25519(key) => {
            let Ok(bytes) = <[u8; 64]>::try_from(&sig.0[..]) else {
                return false;
            };
            let sig = ed25519_dalek::Signature::from_bytes(&bytes);
            key.verify_strict(&digest.0, &sig).is_ok()
        }
        PeerKey::Unusable => false,
        PeerKey::NotAPeerId => *sig == simulated_signature(signer, digest),
    }
}

enum PeerKey {
    Ed25519(ed25519_dalek::VerifyingKey),
    /// A peer id of another key type (its key is not in the id) or a bad Ed25519 key.
    Unusable,
    NotAPeerId,
}

/// The identity multihash of a protobuf-encoded Ed25519 public key, as libp2p writes peer ids:
/// identity code, length 36, then `KeyType = Ed25519`, `data` of 32 bytes.
const ED25519_PEER_ID_PREFIX: [u8; 6] = [0x00, 0x24, 0x08, 0x01, 0x12, 0x20];

fn peer_key(id: &NodeId) -> PeerKey {
    let Ok(bytes) = bs58::decode(id.as_str()).into_vec() else {
        return PeerKey::NotAPeerId;
    };
    if let Some(key) = bytes.strip_prefix(&ED25519_PEER_ID_PREFIX) {
        let Ok(key) = <[u8; 32]>::try_from(key) else {
            return PeerKey::Unusable;
        };
        return ed25519_dalek::VerifyingKey::from_bytes(&key)
            .map_or(PeerKey::Unusable, PeerKey::Ed25519);
    }
    // A multihash: a code (identity 0x00 or sha2-256 0x12), then the digest's length, then the
    // digest. Every peer id is one; a short name decoded by chance is not.
    let multihash = bytes.len() >= 2 && bytes[1] as usize == bytes.len() - 2;
    if multihash && (bytes[0] == 0x00 || bytes[0] == 0x12) {
        PeerKey::Unusable
    } else {
        PeerKey::NotAPeerId
    }
}

/// The simulator's signature: a keyed FNV-1a digest anyone can compute. It stands for a
/// signature between honest simulated nodes and is never accepted from a peer id.
pub fn simulated_signature(signer: &NodeId, digest: &Digest) -> Signature {
    let mut h = crate::electorate::Fnv::new();
    h.write(b"chorus simulated signature\0");
    h.write(signer.as_str().as_bytes());
    h.write(&[0]);
    h.write(&digest.0);
    Signature(Arc::from(&h.0.to_be_bytes()[..]))
}

impl Signature {
    /// A signature from its bytes (what a key's `sign` returns).
    pub fn from_bytes(bytes: &[u8]) -> Signature {
        Signature(Arc::from(bytes))
    }

    /// The signature's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

fn from_hex(s: &str, max: usize) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * max {
        return Err(format!("expected at most {max} bytes of even-length hex"));
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err("expected lowercase hex".to_owned()),
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Ok(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

impl Serialize for Signature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&to_hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let bytes = from_hex(&s, MAX_SIGNATURE_BYTES).map_err(serde::de::Error::custom)?;
        Ok(Signature(bytes.into()))
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&to_hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let bytes = from_hex(&s, 32).map_err(serde::de::Error::custom)?;
        let bytes = <[u8; 32]>::try_from(bytes)
            .map_err(|_| serde::de::Error::custom("expected 32 bytes"))?;
        Ok(Digest(bytes))
    }
}

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&to_hex(&self.0))
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&to_hex(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn key(seed: u8) -> (NodeId, SigningKey) {
        let sk = SigningKey::from_bytes(&[seed; 32]);
        let mut bytes = ED25519_PEER_ID_PREFIX.to_vec();
        bytes.extend_from_slice(sk.verifying_key().as_bytes());
        (NodeId::new(bs58::encode(bytes).into_string()), sk)
    }

    fn sign(sk: &SigningKey, d: &Digest) -> Signature {
        Signature::from_bytes(&sk.sign(&d.0).to_bytes())
    }

    /// A genesis of `keys`, and version 2 adding `added`, signed by `signers`.
    fn link_by(
        keys: &[(NodeId, SigningKey)],
        added: &NodeId,
        signers: &[usize],
    ) -> (Electorate, Link) {
        let genesis = Electorate::new(1, keys.iter().map(|k| k.0.clone()).collect());
        let mut members = genesis.members().to_vec();
        members.push(added.clone());
        let next = Arc::new(genesis.successor(3, members));
        let st = next.statement();
        let mut signers: Vec<_> = signers
            .iter()
            .map(|&i| (keys[i].0.clone(), sign(&keys[i].1, &st)))
            .collect();
        signers.sort();
        (
            genesis,
            Link {
                electorate: next,
                signers,
            },
        )
    }

    #[test]
    fn a_peer_id_is_an_ed25519_key_and_a_short_name_is_simulated() {
        let (id, sk) = key(1);
        assert!(id.as_str().starts_with("12D3KooW"), "{id}");
        let d = Electorate::new(1, vec![id.clone()]).statement();
        assert!(verify(&id, &d, &sign(&sk, &d)));
        let (_, other) = key(2);
        assert!(
            !verify(&id, &d, &sign(&other, &d)),
            "another key's signature"
        );
        assert!(
            !verify(&id, &d, &simulated_signature(&id, &d)),
            "a peer id never falls back"
        );
        // A peer id hashing an RSA or secp256k1 key (sha2-256 multihash): no key to check.
        let qm = NodeId::new("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N");
        assert!(!verify(&qm, &d, &simulated_signature(&qm, &d)));
        for name in ["n0", "n1", "n12", "a", "worker-3"] {
            let id = NodeId::new(name);
            assert!(verify(&id, &d, &simulated_signature(&id, &d)), "{name}");
            let other = NodeId::new("n99");
            assert!(!verify(&id, &d, &simulated_signature(&other, &d)), "{name}");
        }
    }

    /// Rule 7 against a colluding minority and a hostile worker: a link passes only with the
    /// signatures of a majority of the electorate before it over exactly this electorate.
    #[test]
    fn a_link_needs_a_majority_of_the_previous_electorate_over_its_own_statement() {
        let keys: Vec<_> = (1..=5).map(key).collect();
        let (worker, worker_key) = key(9);
        let (genesis, good) = link_by(&keys, &worker, &[0, 2, 4]);
        assert_eq!(good.check(&genesis, verify), Ok(()));
        // A colluding minority (two of five) certifies its own electorate: refused.
        let (_, minority) = link_by(&keys, &worker, &[0, 1]);
        assert_eq!(
            minority.check(&genesis, verify),
            Err(Refusal::BadCertificate)
        );
        // The minority repeats a signer to make up the count: refused.
        let mut repeated = minority.clone();
        repeated.signers.push(repeated.signers[0].clone());
        assert_eq!(
            repeated.check(&genesis, verify),
            Err(Refusal::BadCertificate)
        );
        // A worker (no member) signs with its own good key in place of a member: refused.
        let mut stranger = minority.clone();
        let st = stranger.electorate.statement();
        stranger
            .signers
            .push((worker.clone(), sign(&worker_key, &st)));
        stranger.signers.sort();
        assert_eq!(
            stranger.check(&genesis, verify),
            Err(Refusal::BadCertificate)
        );
        // A worker forges a member's signature (its own key under the member's id): refused.
        let mut forged = minority.clone();
        forged
            .signers
            .push((keys[3].0.clone(), sign(&worker_key, &st)));
        forged.signers.sort();
        assert_eq!(forged.check(&genesis, verify), Err(Refusal::BadCertificate));
        // Good signatures moved to other members: the statement differs, so they fail.
        let mut swapped = good.clone();
        let other = genesis.successor(3, keys.iter().map(|k| k.0.clone()).take(4).collect());
        swapped.electorate = Arc::new(other);
        assert_eq!(
            swapped.check(&genesis, verify),
            Err(Refusal::BadCertificate)
        );
        // The operator's removals are signed: whoever hands the link over cannot add one
        // (keeping a node out) or drop one (letting autopilot promote it), nor empty them.
        let mut retiring = good.clone();
        retiring.electorate = Arc::new(
            (*good.electorate)
                .clone()
                .with_retired(vec![worker.clone()]),
        );
        assert_eq!(
            retiring.check(&genesis, verify),
            Err(Refusal::BadCertificate)
        );
        // A link that skips a version, or of another cluster: refused.
        let mut skipping = good.clone();
        skipping.electorate = Arc::new(
            genesis
                .successor(3, vec![worker.clone()])
                .successor(4, vec![worker.clone()]),
        );
        assert_eq!(
            skipping.check(&genesis, verify),
            Err(Refusal::BadCertificate)
        );
        let foreign = Electorate::new(1, keys.iter().skip(1).map(|k| k.0.clone()).collect());
        assert_eq!(good.check(&foreign, verify), Err(Refusal::BadCertificate));
    }

    #[test]
    fn signatures_and_links_round_trip_as_json() {
        let keys: Vec<_> = (1..=3).map(key).collect();
        let (_, link) = link_by(&keys, &key(7).0, &[0, 1]);
        let json = serde_json::to_string(&link).unwrap();
        assert_eq!(serde_json::from_str::<Link>(&json).unwrap(), link);
        assert!(
            serde_json::from_str::<Signature>("\"ABCD\"").is_err(),
            "uppercase"
        );
        assert!(serde_json::from_str::<Signature>(&format!("\"{}\"", "00".repeat(65))).is_err());
    }

    /// A chain of `count` links after `genesis`: the last member of `pool` added and removed in
    /// turn, each link signed by the first `signers(prev)` members of its predecessor with
    /// `sign_with` (signature of member i over a digest).
    fn chain_of(
        genesis: &Electorate,
        pool: &[NodeId],
        count: u64,
        signers: impl Fn(&Electorate) -> usize,
        sign_with: impl Fn(usize, &NodeId, &Digest) -> Signature,
    ) -> Chain {
        let mut chain = Chain {
            anchor: Some(Arc::new(genesis.clone())),
            ..Chain::default()
        };
        let mut prev = genesis.clone();
        for v in 2..count + 2 {
            let mut members = pool[..pool.len() - 1].to_vec();
            if v % 2 == 0 {
                members.push(pool[pool.len() - 1].clone());
            }
            let next = Arc::new(prev.successor(v, members));
            let st = next.statement();
            let mut signed: Vec<_> = (pool.iter().enumerate())
                .filter(|(_, m)| prev.contains(m))
                .take(signers(&prev))
                .map(|(i, m)| (m.clone(), sign_with(i, m, &st)))
                .collect();
            signed.sort();
            chain.keep(Arc::new(Link {
                electorate: next.clone(),
                signers: signed,
            }));
            prev = (*next).clone();
        }
        chain
    }

    /// Issue 51, finding 10: a voter 100 changes behind in a 5-voter cluster of real peer ids
    /// and Ed25519 signatures. The answer's 64 links are over a frame; they go in parts, come
    /// back whole, and every link checks.
    #[test]
    fn a_chain_over_a_frame_of_real_links_travels_in_parts() {
        let keys: Vec<_> = (1..=6).map(key).collect();
        let pool: Vec<NodeId> = keys.iter().map(|k| k.0.clone()).collect();
        let genesis = Electorate::new(1, pool[..5].to_vec());
        let chain = chain_of(&genesis, &pool, 100, Electorate::len, |i, _, d| {
            sign(&keys[i].1, d)
        });
        let links = chain.links_after(1);
        assert_eq!(links.len(), MAX_LINKS_PER_MESSAGE);
        let mut prev = genesis;
        for l in &links {
            assert_eq!(l.check(&prev, verify), Ok(()));
            prev = (*l.electorate).clone();
        }
        let msg = crate::Message::Chain { links };
        let frames = crate::codec::encode_parts("c1", &msg).expect("the chain is sent");
        assert!(frames.len() > 1, "the answer fits a frame: no test");
        let mut parts = crate::codec::Reassembler::new();
        let mut whole = None;
        for f in &frames {
            assert!(f.len() <= crate::codec::MAX_MESSAGE_BYTES);
            whole = parts.decode("c1", &"peer", f).expect("each part").or(whole);
        }
        assert_eq!(whole, Some(msg));
    }

    /// The operator's removals are part of what members sign: two electorates alike but for
    /// the ids removed have different statements, so whoever hands a link over can neither add
    /// nor drop one; and an electorate with none has the statement it had before removals were
    /// signed (cargo-mutants, issue 52: the `!` of the guard deleted signed the list only when
    /// it was empty).
    #[test]
    fn the_removed_ids_are_signed_and_none_leaves_the_old_statement() {
        let members: Vec<NodeId> = ["n1", "n2", "n3"].map(NodeId::new).to_vec();
        let e = Electorate::new(1, members);
        let by = |ids: &[&str]| {
            e.clone()
                .with_retired(ids.iter().map(|i| NodeId::new(*i)).collect())
                .statement()
        };
        assert_ne!(by(&["n4"]), by(&["n5"]));
        assert_ne!(by(&["n4"]), by(&["n4", "n5"]));
        assert_ne!(by(&["n4"]), by(&[]));
        // The v1 statement, written out: tag, genesis, version, term, count, each member.
        let mut h = sha2::Sha256::new();
        h.update(b"chorus electorate statement v1\0");
        for n in [e.genesis, e.version, e.term, 3] {
            h.update(n.to_be_bytes());
        }
        for m in ["n1", "n2", "n3"] {
            h.update(2u32.to_be_bytes());
            h.update(m.as_bytes());
        }
        assert_eq!(by(&[]), Digest(h.finalize().into()));
    }

    /// A link's bound on its bytes in a message is a bound — never below what it encodes to —
    /// and a near one, at most twice that: a loose bound cuts chain answers short for nothing
    /// (cargo-mutants, issue 52: a signer's share `+ 6` as `* 6` passed every suite).
    #[test]
    fn a_links_encoded_bound_is_above_its_size_and_within_twice_it() {
        let keys: Vec<_> = (1..=5).map(key).collect();
        let (added, _) = key(9);
        let (_, link) = link_by(&keys, &added, &[0, 2, 4]);
        let size = serde_json::to_vec(&link).unwrap().len();
        let bound = link.encoded_bound();
        assert!(
            bound >= size && bound <= 2 * size,
            "bound {bound}, size {size}"
        );
    }

    /// The bound holds at its worst case, and closely: ids whose every character JSON escapes
    /// (two bytes each), the longest signatures, removed ids too — never below the link's size,
    /// and above it by at most its fixed room for the fields (cargo-mutants, issue 52: an id's
    /// share `2 * len` as `2 + len`, and a signer's `+ 6` as `- 6`, passed every suite).
    #[test]
    fn a_links_encoded_bound_holds_for_ids_that_escape_and_the_longest_signatures() {
        let id = |i: usize| NodeId::new(format!("{}{}", "\"".repeat(10 + i), "\\".repeat(10)));
        let genesis = Electorate::new(1, (0..30).map(id).collect());
        let next = genesis
            .successor(2, (0..31).map(id).collect())
            .with_retired((40..43).map(id).collect());
        let link = Link {
            electorate: Arc::new(next),
            signers: (0..20)
                .map(|i| (id(i), Signature::from_bytes(&[0xab; MAX_SIGNATURE_BYTES])))
                .collect(),
        };
        let size = serde_json::to_vec(&link).unwrap().len();
        let bound = link.encoded_bound();
        assert!(
            bound >= size && bound - size <= 256,
            "bound {bound}, size {size}"
        );
    }

    /// A signature's bytes are the ones it was made from (what a transport signs and sends),
    /// and a signature and a digest show as their hex in logs and failed assertions.
    #[test]
    fn a_signature_is_its_bytes_and_shows_as_hex() {
        let bytes: Vec<u8> = (0..64).collect();
        let sig = Signature::from_bytes(&bytes);
        assert_eq!(sig.as_bytes(), bytes);
        assert_eq!(format!("{sig:?}"), to_hex(&bytes));
        assert!(format!("{sig:?}").starts_with("000102"));
        assert_eq!(format!("{:?}", Digest([0xab; 32])), "ab".repeat(32));
    }

    /// Which names are peer ids whose key a signature must be checked with, and which are the
    /// simulator's short names (cargo-mutants, issue 52: `peer_key`'s multihash test loosened
    /// either way passed every suite). A peer id of another key type — a secp256k1 key's
    /// identity multihash, as libp2p writes `16Uiu2…` — never takes a simulated signature,
    /// which anyone can compute; a short name whose base58 reading starts with a zero byte
    /// (`1…`) or 0x12 but is no multihash is still a short name.
    #[test]
    fn only_names_that_are_not_peer_ids_take_simulated_signatures() {
        let d = Electorate::new(1, vec![NodeId::new("n1")]).statement();
        let mut secp = vec![0x00, 0x25, 0x08, 0x02, 0x12, 0x21];
        secp.extend_from_slice(&[0x02; 33]);
        let secp = NodeId::new(bs58::encode(secp).into_string());
        assert!(secp.as_str().starts_with("16Uiu2"), "{secp}");
        assert!(!verify(&secp, &d, &simulated_signature(&secp, &d)));
        for name in ["1n", "1abc", "11x"] {
            let id = NodeId::new(name);
            assert!(verify(&id, &d, &simulated_signature(&id, &d)), "{name}");
        }
    }

    /// Links of large electorates are cut to [`MAX_CHAIN_BYTES`]: 64 links of 3,000 members
    /// with peer-id-long names would be over the most a message in parts may hold.
    #[test]
    fn a_chain_of_large_electorates_is_cut_to_what_one_message_holds() {
        let pool: Vec<NodeId> = (0..3_000)
            .map(|i| NodeId::new(format!("12D3KooW{i:0>44}")))
            .collect();
        let genesis = Electorate::new(1, pool[..2_999].to_vec());
        let chain = chain_of(&genesis, &pool, 64, Electorate::quorum, |_, m, d| {
            simulated_signature(m, d)
        });
        let all: usize = chain.links.values().map(|l| l.encoded_bound()).sum();
        assert!(
            all > crate::codec::MAX_ASSEMBLED_BYTES,
            "{all} bytes: no test"
        );
        let links = chain.links_after(1);
        assert!(
            (1..MAX_LINKS_PER_MESSAGE).contains(&links.len()),
            "{}",
            links.len()
        );
        let msg = crate::Message::Chain { links };
        let frames = crate::codec::encode_parts("c1", &msg).expect("the cut chain is sent");
        let sent: usize = frames.iter().map(Vec::len).sum();
        assert!(sent <= MAX_CHAIN_BYTES + frames.len() * 512, "{sent} bytes");
    }
}
