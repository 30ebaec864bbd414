//! The table of live peers a node keeps: who is connected and what each advertised.
//!
//! A hash table, not a sorted map: a cold start of n nodes makes n² insertions, nearly all into
//! the table of a node that last ran long ago, and a B-tree insertion there was ~8 cache misses
//! (four levels, two lines of keys each) against one or two for a hash table. Order is never
//! taken from the hashing: every walk whose result depends on order goes through
//! [`PeerTable::iter`], which sorts by id, and the rest count or look up. Ids hash by a value
//! fixed when the id is made (`NodeId`'s `Hash`), so the table is the same on every run anyway.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{NodeId, Peer};

/// Live peers by id, with how many of them are eligible.
#[derive(Clone, Default)]
pub struct PeerTable {
    map: HashMap<NodeId, Peer, BuildHasherDefault<IdHasher>>,
    /// How many of the peers are eligible, kept with the table so bootstrap need not walk
    /// thousands of workers to learn it.
    eligible: usize,
}

impl PeerTable {
    /// The peer `id`, if connected.
    pub fn get(&self, id: &NodeId) -> Option<&Peer> {
        self.map.get(id)
    }

    /// Whether `id` is connected.
    pub fn contains(&self, id: &NodeId) -> bool {
        self.map.contains_key(id)
    }

    /// How many peers are connected.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// How many connected peers advertise `admin_election`.
    pub fn eligible_count(&self) -> usize {
        self.eligible
    }

    /// The peers in id order (sorted on each call: for walks whose outcome depends on order).
    pub fn iter(&self) -> impl Iterator<Item = (&NodeId, &Peer)> {
        let mut all: Vec<(&NodeId, &Peer)> = self.map.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// The ids in order.
    pub fn ids(&self) -> impl Iterator<Item = &NodeId> {
        self.iter().map(|(id, _)| id)
    }

    /// The `k` lowest ids, in order, without sorting the whole table.
    pub(crate) fn lowest_ids(&self, k: usize) -> Vec<NodeId> {
        let mut lowest: Vec<&NodeId> = Vec::with_capacity(k + 1);
        for id in self.map.keys() {
            if lowest.len() == k && lowest.last().is_none_or(|last| id >= *last) {
                continue;
            }
            let at = lowest.partition_point(|l| *l < id);
            lowest.insert(at, id);
            lowest.truncate(k);
        }
        lowest.into_iter().cloned().collect()
    }

    /// The peers in no particular order: only for counting and other walks whose result does
    /// not depend on order.
    pub(crate) fn unordered(&self) -> impl Iterator<Item = (&NodeId, &Peer)> {
        self.map.iter()
    }

    /// The peer `id`, to update what it reported (its eligibility stays as it connected).
    pub(crate) fn get_mut(&mut self, id: &NodeId) -> Option<&mut Peer> {
        self.map.get_mut(id)
    }

    /// Puts `peer` in as `id`, keeping when the connection came up if `id` was already in, and
    /// returns what it replaces (one probe: at a cold start this runs n² times, nearly always on
    /// a cold table).
    pub(crate) fn connect(&mut self, id: NodeId, mut peer: Peer) -> Option<Peer> {
        use std::collections::hash_map::Entry;
        self.eligible += usize::from(peer.eligible);
        match self.map.entry(id) {
            Entry::Occupied(mut known) => {
                peer.up_since_ms = known.get().up_since_ms;
                let old = known.insert(peer);
                self.eligible -= usize::from(old.eligible);
                Some(old)
            }
            Entry::Vacant(slot) => {
                slot.insert(peer);
                None
            }
        }
    }

    /// Takes `id` out.
    pub(crate) fn remove(&mut self, id: &NodeId) -> Option<Peer> {
        let old = self.map.remove(id)?;
        self.eligible -= usize::from(old.eligible);
        Some(old)
    }

    /// Forgets every peer.
    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.eligible = 0;
    }
}

/// `table[&id]`, as for a map: panics if `id` is not connected.
impl std::ops::Index<&NodeId> for PeerTable {
    type Output = Peer;

    fn index(&self, id: &NodeId) -> &Peer {
        self.get(id).expect("no such peer")
    }
}

impl PartialEq for PeerTable {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl Eq for PeerTable {}

impl std::fmt::Debug for PeerTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A map in id order, as the sorted map it replaced wrote it: snapshots read the same.
impl Serialize for PeerTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for PeerTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let sorted = std::collections::BTreeMap::<NodeId, Peer>::deserialize(d)?;
        let mut table = PeerTable::default();
        for (id, peer) in sorted {
            table.connect(id, peer);
        }
        Ok(table)
    }
}

/// Takes the hash `NodeId` computed when it was made, rather than hashing the text again.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `NodeId` keys are hashed here, through `write_u64`; anything else still hashes.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(eligible: bool) -> Peer {
        Peer {
            up_since_ms: 0,
            eligible,
            capabilities: Vec::new().into(),
            uptime_s: 0,
            seen_at_ms: 0,
            resources: Default::default(),
        }
    }

    fn table(ids: &[&str]) -> PeerTable {
        let mut t = PeerTable::default();
        for (i, id) in ids.iter().enumerate() {
            t.connect(NodeId::from(*id), peer(i % 2 == 0));
        }
        t
    }

    /// Walks, the lowest ids, snapshots and Debug come in id order whatever the insertion
    /// order; equal tables compare equal.
    #[test]
    fn order_is_the_ids_not_the_insertions() {
        let ids = ["n5", "n10", "n1", "n2", "n100", "n0", "n33"];
        let t = table(&ids);
        let sorted = ["n0", "n1", "n10", "n100", "n2", "n33", "n5"];
        assert_eq!(t.ids().map(NodeId::as_str).collect::<Vec<_>>(), sorted);
        for k in 0..=8 {
            let lowest = t.lowest_ids(k);
            let want: Vec<&str> = sorted.iter().take(k).copied().collect();
            assert_eq!(lowest.iter().map(NodeId::as_str).collect::<Vec<_>>(), want);
        }
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.starts_with("{\"n0\":"), "{json}");
        let back: PeerTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.eligible_count(), t.eligible_count());
        let mut reversed = ids;
        reversed.reverse();
        let other = table(&reversed);
        assert_eq!(serde_json::to_string(&other).unwrap().len(), json.len());
        assert!(format!("{t:?}").starts_with("{\"n0\": "));
        assert_ne!(table(&ids[..3]), t);
    }

    /// The eligible count follows connections, reconnections, removals and clears;
    /// a reconnection keeps when the peer first came up.
    #[test]
    fn the_eligible_count_follows_the_table() {
        let mut t = PeerTable::default();
        let (a, b) = (NodeId::from("a"), NodeId::from("b"));
        assert!(t.connect(a.clone(), peer(true)).is_none());
        t.connect(b.clone(), peer(true));
        assert_eq!((t.len(), t.eligible_count()), (2, 2));
        assert!(t
            .connect(a.clone(), peer(false))
            .is_some_and(|p| p.eligible));
        assert_eq!((t.len(), t.eligible_count()), (2, 1));
        assert!(t.remove(&b).is_some_and(|p| p.eligible));
        assert!(t.remove(&b).is_none());
        assert_eq!((t.len(), t.eligible_count()), (1, 0));
        assert!(t.contains(&a) && !t.contains(&b) && !t.is_empty());
        let mut later = peer(true);
        later.up_since_ms = 9;
        t.connect(b.clone(), later.clone());
        assert_eq!((t[&b].up_since_ms, t.eligible_count()), (9, 1));
        later.up_since_ms = 20;
        later.eligible = false;
        t.connect(b.clone(), later);
        assert_eq!((t[&b].up_since_ms, t.eligible_count()), (9, 0));
        t.clear();
        assert_eq!((t.len(), t.eligible_count(), t.is_empty()), (0, 0, true));
    }
}
