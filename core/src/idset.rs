//! A small set of node ids kept inside its owner: the WHOAMIs a node has out (as many as its
//! discovery fanout, five to sixteen), checked and cleared at each reply. A `BTreeSet` kept them
//! in a heap node of its own, a cache miss per reply at 100,000 nodes; here the first
//! [`INLINE`] sit in the node's own lines and only more go to a `BTreeSet`.
//!
//! It behaves, compares, prints and serializes as a set in id order, as the `BTreeSet` did.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::NodeId;

/// Ids held inline before the rest go to the heap.
const INLINE: usize = 8;

#[derive(Clone, Default)]
pub(crate) struct IdSet {
    inline: [Option<NodeId>; INLINE],
    more: BTreeSet<NodeId>,
}

impl IdSet {
    pub(crate) fn contains(&self, id: &NodeId) -> bool {
        self.inline.iter().any(|slot| slot.as_ref() == Some(id)) || self.more.contains(id)
    }

    /// Adds `id`; false if it was in already.
    pub(crate) fn insert(&mut self, id: NodeId) -> bool {
        if self.contains(&id) {
            return false;
        }
        match self.inline.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(id),
            None => {
                self.more.insert(id);
            }
        }
        true
    }

    /// Takes `id` out; false if it was not in.
    pub(crate) fn remove(&mut self, id: &NodeId) -> bool {
        if let Some(slot) = (self.inline.iter_mut()).find(|slot| slot.as_ref() == Some(id)) {
            *slot = None;
            return true;
        }
        self.more.remove(id)
    }

    pub(crate) fn clear(&mut self) {
        self.inline = Default::default();
        self.more.clear();
    }

    /// The ids in order.
    fn sorted(&self) -> Vec<&NodeId> {
        let mut all: Vec<&NodeId> = self.inline.iter().flatten().chain(&self.more).collect();
        all.sort_unstable();
        all
    }
}

/// Equal as sets: where an id sits depends on the order of inserts and removes.
impl PartialEq for IdSet {
    fn eq(&self, other: &Self) -> bool {
        self.sorted() == other.sorted()
    }
}

impl Eq for IdSet {}

impl std::fmt::Debug for IdSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.sorted()).finish()
    }
}

impl Serialize for IdSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

impl<'de> Deserialize<'de> for IdSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut set = IdSet::default();
        for id in Vec::<NodeId>::deserialize(d)? {
            set.insert(id);
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a `BTreeSet` under a random mix of inserts, removes and clears, past the inline
    /// slots and back, with ids made apart from the ones inserted: the same answers, the same
    /// equality, and the same JSON as the `BTreeSet` wrote.
    #[test]
    fn it_behaves_as_a_btree_set() {
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (mut set, mut model) = (IdSet::default(), BTreeSet::new());
        for round in 0..20_000 {
            let id = NodeId::from(format!("n{}", crate::rng::below(&mut rng, 24)));
            match crate::rng::below(&mut rng, 100) {
                0 => {
                    set.clear();
                    model.clear();
                }
                1..=50 => assert_eq!(set.insert(id.clone()), model.insert(id), "{round}"),
                _ => assert_eq!(set.remove(&id), model.remove(&id), "{round}"),
            }
            let probe = NodeId::from(format!("n{}", crate::rng::below(&mut rng, 24)));
            assert_eq!(set.contains(&probe), model.contains(&probe));
            let json = serde_json::to_string(&set).unwrap();
            assert_eq!(json, serde_json::to_string(&model).unwrap());
            let back: IdSet = serde_json::from_str(&json).unwrap();
            assert_eq!(back, set);
            assert_eq!(format!("{set:?}"), format!("{model:?}"));
        }
        // Equal as sets whatever the slots.
        let (mut a, mut b) = (IdSet::default(), IdSet::default());
        for i in 0..12 {
            a.insert(NodeId::from(format!("n{i}")));
            b.insert(NodeId::from(format!("n{}", 11 - i)));
        }
        assert_eq!(a, b);
        b.remove(&NodeId::from("n3"));
        assert_ne!(a, b);
    }
}
