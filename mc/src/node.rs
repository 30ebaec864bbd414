//! One node of a world, and the names nodes go by. Below both the world and the invariants:
//! a world holds its nodes, and the invariants read them, so neither needs the other's module.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chorus_core::{Core, NodeId};

/// Node `i`'s id.
pub fn id(i: usize) -> NodeId {
    NodeId::from(((b'a' + i as u8) as char).to_string())
}

/// The index of the node named `id`, if one of `nodes` is.
pub(crate) fn index(nodes: &[Arc<Node>], id: &NodeId) -> Option<usize> {
    (0..nodes.len()).find(|i| self::id(*i) == *id)
}

/// One node: its core and whether it runs (a restart restores the core from its snapshot, so
/// what the snapshot leaves out is lost).
#[derive(Clone, Debug)]
pub struct Node {
    /// The core.
    pub core: Core,
    /// Running (not crashed).
    pub up: bool,
    /// A hash of the core's serialized state, recomputed after each of its steps.
    pub(crate) hash: u64,
}

impl Node {
    pub(crate) fn new(core: Core) -> Node {
        let mut n = Node {
            core,
            up: true,
            hash: 0,
        };
        n.rehash();
        n
    }

    pub(crate) fn rehash(&mut self) {
        self.hash = hash_bytes(0, &self.core.snapshot());
    }
}

/// SipHash of `bytes` under key `k`: fixed keys, so the same state hashes the same in every run.
pub(crate) fn hash_bytes(k: u8, bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    k.hash(&mut h);
    bytes.hash(&mut h);
    h.finish()
}
