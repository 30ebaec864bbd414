//! Node identities: opaque, cheaply cloned, totally ordered strings (libp2p PeerIds in production).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The identity of a node. In production it is the base58 text of the node's libp2p `PeerId`; in
/// the simulator it is `n0`, `n1`, …. Ordering is byte-wise on the text, which makes tie-breaks by
/// node id the same on every machine.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(Arc<str>);

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
