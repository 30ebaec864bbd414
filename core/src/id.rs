//! Node identities: opaque, cheaply cloned, totally ordered strings (libp2p PeerIds in production).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The identity of a node. In production it is the base58 text of the node's libp2p `PeerId`; in
/// the simulator it is `n0`, `n1`, …. Ordering is byte-wise on the text, which makes tie-breaks by
/// node id the same on every machine.
#[derive(Clone, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(Arc<str>);

// Byte-wise on the text, but clones of one id (the common case: ids are cloned from the one a
// connection or the simulator made) compare equal without reading the text, which a lookup in
// a large per-node table would otherwise fetch from a cold cache line.
impl PartialEq for NodeId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Ord for NodeId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl PartialOrd for NodeId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl NodeId {
    /// Wraps a node's textual identity.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        NodeId(id.into())
    }

    /// The textual identity.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
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
