//! Node identities: opaque, cheaply cloned, totally ordered strings (libp2p PeerIds in production).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The identity of a node. In production it is the base58 text of the node's libp2p `PeerId`; in
/// the simulator it is `n0`, `n1`, …. Ordering is byte-wise on the text, which makes tie-breaks by
/// node id the same on every machine.
///
/// Two words wide: the text's hash beside the pointer, so telling two different ids apart, or
/// hashing one, reads nothing behind it. A step of a simulated node compares the sender with
/// the node's own id and looks the sender up in its peer table; behind the pointer each was a
/// cache miss per step at 100,000 nodes. Ordering reads a word behind the pointer at most, in
/// the common case.
#[derive(Clone)]
pub struct NodeId {
    /// The text's hash, made once (see [`text_hash`]).
    hash: u64,
    text: Arc<Text>,
}

struct Text {
    /// The first eight bytes, big-endian, zero-padded: two ids whose heads differ are ordered
    /// by them (the first differing byte is among them); equal heads fall back to `text`.
    head: u64,
    text: Box<str>,
}

impl NodeId {
    /// Wraps a node's textual identity.
    pub fn new(id: impl Into<String>) -> Self {
        let text = id.into().into_boxed_str();
        let mut head = [0u8; 8];
        let n = text.len().min(8);
        head[..n].copy_from_slice(&text.as_bytes()[..n]);
        NodeId {
            hash: text_hash(&text),
            text: Arc::new(Text {
                head: u64::from_be_bytes(head),
                text,
            }),
        }
    }

    /// The textual identity.
    pub fn as_str(&self) -> &str {
        &self.text.text
    }

    /// Hands `to` what a clone of this id writes (its shared text's count; nothing is read), for
    /// a caller that wants it loaded ahead (see [`crate::Core::parts`]).
    pub fn parts(&self, to: &mut impl crate::Parts) {
        to.part(&*self.text);
    }

    /// The hash made with the id, the same on every machine and run (what `Hash` feeds).
    pub(crate) fn fixed_hash(&self) -> u64 {
        self.hash
    }
}

// Different ids differ in their hashes (but for one pair in 2^64), and clones of one id (the
// common case: ids are cloned from the one a connection or the simulator made) share the
// pointer: either way nothing behind it is read.
impl PartialEq for NodeId {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && (Arc::ptr_eq(&self.text, &other.text) || self.text.text == other.text.text)
    }
}

impl Eq for NodeId {}

impl Ord for NodeId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.text, &other.text) {
            return std::cmp::Ordering::Equal;
        }
        let (a, b) = (&*self.text, &*other.text);
        a.head
            .cmp(&b.head)
            .then_with(|| a.text.as_bytes().cmp(b.text.as_bytes()))
    }
}

impl PartialOrd for NodeId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Hashes as one `u64` fixed by the text (equal ids, equal hashes), the same on every machine.
impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash)
    }
}

/// FNV-1a over the bytes, then MurmurHash3's finalizer so the high bits (which a hash table's
/// probing uses) depend on every byte.
fn text_hash(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// On the wire and in logs, the text alone.
impl Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(NodeId::new)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl From<&str> for NodeId {
    fn from(s: &str) -> Self {
        NodeId::new(s)
    }
}

impl From<String> for NodeId {
    fn from(s: String) -> Self {
        NodeId::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal text is equal and ordered alike whether or not the two share one allocation.
    #[test]
    fn ids_compare_by_text_shared_or_not() {
        use std::cmp::Ordering::*;
        let a = NodeId::from("n1");
        let (same, twin, b) = (a.clone(), NodeId::from("n1"), NodeId::from("n10"));
        assert_eq!((a == same, a == twin, a == b), (true, true, false));
        assert_eq!((a.cmp(&same), a.cmp(&twin)), (Equal, Equal));
        assert_eq!(
            (a.cmp(&b), b.cmp(&a), a.partial_cmp(&b)),
            (Less, Greater, Some(Less))
        );
        assert_eq!(NodeId::from("n2").cmp(&b), Greater);
    }

    /// The order is the text's byte order, also where the eight-byte heads tie or one id is a
    /// prefix of another (zero bytes included), and equality and hashing follow the text
    /// (no two of these collide).
    /// The hash is fixed: a table keyed by ids lays out alike on every machine and run.
    #[test]
    fn the_hash_of_an_id_is_fixed() {
        assert_ne!(text_hash("n1"), text_hash("n2"));
        // FNV-1a of "n1" through fmix64, worked out by hand (Python) to pin the function.
        assert_eq!(text_hash("n1"), 0xf5c0_8557_ac1e_5104);
    }

    #[test]
    fn ids_order_as_their_text_bytes() {
        let texts = [
            "",
            "\0",
            "n",
            "n1",
            "n1\0",
            "n1\0\0",
            "n10",
            "n2",
            "n12345678",
            "n1234567",
            "n12345670",
            "n12345679",
            "12D3KooWA",
            "12D3KooWAx",
            "12D3KooWB",
            "12D3KooW",
            "12D3Koo",
            "\u{ff}",
            "é",
        ];
        let hash = |id: &NodeId| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(id)
        };
        for a in texts {
            for b in texts {
                let (x, y) = (NodeId::from(a), NodeId::from(b));
                assert_eq!(x.cmp(&y), a.as_bytes().cmp(b.as_bytes()), "{a:?} vs {b:?}");
                assert_eq!(x == y, a == b, "{a:?} == {b:?}");
                assert_eq!(hash(&x) == hash(&y), a == b, "hash {a:?} {b:?}");
            }
            let json = serde_json::to_string(&NodeId::from(a)).unwrap();
            assert_eq!(json, serde_json::to_string(a).unwrap());
            assert_eq!(serde_json::from_str::<NodeId>(&json).unwrap().as_str(), a);
        }
    }

    /// Debug output (assertion messages, `{:?}` in logs) shows the id quoted, like a string.
    #[test]
    fn a_node_id_debugs_as_its_quoted_text() {
        let id = NodeId::from("n1");
        assert_eq!(
            (format!("{id:?}"), id.to_string()),
            ("\"n1\"".into(), "n1".into())
        );
    }
}
