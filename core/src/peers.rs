//! The table of live peers a node keeps: who is connected and what each advertised.
//!
//! A hash table, not a sorted map: a cold start of n nodes makes n² insertions, nearly all into
//! the table of a node that last ran long ago, and a B-tree insertion there was ~8 cache misses
//! (four levels, two lines of keys each) against one or two for a hash table. Order is never
//! taken from the hashing: every walk whose result depends on order goes through
//! [`PeerTable::iter`], which sorts by id, and the rest count or look up. Ids hash by a value
//! fixed when the id is made (`NodeId`'s `Hash`), so the table is the same on every run anyway.
//!
//! An entry is 16 bytes, the peer's shared [`Advert`] (which holds its id) and when the
//! connection came up: with the hash table's tag bytes and spare room (`probed.rs`), a
//! full-peering cluster of 10,000 keeps about 28 bytes per (node, peer) pair. Up to six peers
//! sit in the node itself instead (a worker peering with a few voters).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{score, Advert, NodeId, PeerInfo, Resources};

/// What this node knows about a live peer: what it advertised, its figures as last heard, and
/// when the connection came up, so its score can be computed at any later time the same way
/// the peer computes its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    advert: Advert,
    /// When the connection came up (this node's clock).
    up_since_ms: u64,
}

impl Peer {
    /// `advert`'s peer, connected at `up_since_ms`.
    fn new(advert: Advert, up_since_ms: u64) -> Peer {
        Peer {
            advert,
            up_since_ms,
        }
    }

    /// `None` for figures heard when the connection came up, so each state has one form.
    fn heard_at(&self, at_ms: u64) -> Option<u64> {
        (at_ms != self.up_since_ms).then_some(at_ms)
    }

    /// The figures it has, heard at `at_ms`.
    fn seen_at(&mut self, at_ms: u64) {
        let at = self.heard_at(at_ms);
        self.advert.set_heard_at(at);
    }

    /// Its id.
    pub fn id(&self) -> &NodeId {
        self.advert.peer()
    }

    /// When the connection came up (this node's clock): autopilot promotes only standbys
    /// connected for `stabilization_time_ms`.
    pub fn up_since_ms(&self) -> u64 {
        self.up_since_ms
    }

    /// Whether it advertised `admin_election` when it connected.
    pub fn eligible(&self) -> bool {
        self.advert.eligible()
    }

    /// Its advertised capabilities.
    pub fn capabilities(&self) -> &[String] {
        self.advert.capabilities()
    }

    /// Its uptime when last heard of.
    pub fn uptime_s(&self) -> u64 {
        self.advert.uptime_s()
    }

    /// This node's time when `uptime_s` was reported.
    pub fn seen_at_ms(&self) -> u64 {
        self.advert.heard_at_ms().unwrap_or(self.up_since_ms)
    }

    /// Its free resources as last heard.
    pub fn resources(&self) -> Resources {
        self.advert.resources()
    }

    /// The peer's score at `now_ms`, its uptime extrapolated from the last report.
    pub fn score_at(&self, now_ms: u64) -> u32 {
        let uptime_s = self
            .uptime_s()
            .saturating_add(now_ms.saturating_sub(self.seen_at_ms()) / 1_000);
        score::score(uptime_s, self.capabilities().len(), self.resources())
    }

    /// Newer figures, heard at `now_ms` (a copy of the advertisement of its own, then).
    pub(crate) fn heard(&mut self, uptime_s: u64, resources: Resources, now_ms: u64) {
        let at = self.heard_at(now_ms);
        self.advert.heard(uptime_s, resources, at);
    }
}

/// A peer as snapshots write it (the fields `Peer` had before it shared its advertisement).
#[derive(Serialize, Deserialize)]
struct PeerFields<C> {
    #[serde(default)]
    up_since_ms: u64,
    eligible: bool,
    capabilities: C,
    uptime_s: u64,
    seen_at_ms: u64,
    resources: Resources,
}

impl Serialize for Peer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        PeerFields {
            up_since_ms: self.up_since_ms,
            eligible: self.eligible(),
            capabilities: self.capabilities(),
            uptime_s: self.uptime_s(),
            seen_at_ms: self.seen_at_ms(),
            resources: self.resources(),
        }
        .serialize(s)
    }
}

/// Up to this many peers sit in the node itself, found by their ids' hashes; a table with more
/// moves them all to a hash table. A worker of a large cluster peers with a few voters: its
/// table then costs no allocation, and a lookup reads the node's own lines (which a simulator
/// stepping many nodes loads ahead, see [`crate::Core::parts`]) and the peer's advertisement,
/// where a hash table of its own was two more cache misses per lookup.
const INLINE: usize = 6;

/// Live peers by id, with how many of them are eligible.
///
/// At most one of the two stores holds peers: `inline` while there are at most [`INLINE`]
/// (and `hashed` is empty), else `hashed`.
#[derive(Clone, Default)]
pub struct PeerTable {
    inline: [Option<Peer>; INLINE],
    /// `inline[i]`'s id hash, so a lookup dereferences only the peer it finds.
    inline_hashes: [u64; INLINE],
    hashed: crate::probed::Probed,
    /// How many of the peers are eligible, kept with the table so bootstrap need not walk
    /// thousands of workers to learn it.
    eligible: usize,
}

impl PeerTable {
    /// Where `id` sits inline, if it does.
    fn inline_slot(&self, id: &NodeId) -> Option<usize> {
        let h = id.fixed_hash();
        (0..INLINE).find(|&i| {
            self.inline_hashes[i] == h && self.inline[i].as_ref().is_some_and(|p| p.id() == id)
        })
    }

    /// The peer `id`, if connected.
    pub fn get(&self, id: &NodeId) -> Option<&Peer> {
        if self.hashed.is_empty() {
            return self.inline_slot(id).and_then(|i| self.inline[i].as_ref());
        }
        let i = self.hashed.find(id.fixed_hash(), id)?;
        self.hashed.get(i)
    }

    /// Whether `id` is connected.
    pub fn contains(&self, id: &NodeId) -> bool {
        self.get(id).is_some()
    }

    /// How many peers are connected.
    pub fn len(&self) -> usize {
        self.hashed.len() + self.inline.iter().flatten().count()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many connected peers advertise `admin_election`.
    pub fn eligible_count(&self) -> usize {
        self.eligible
    }

    /// The peers in id order (sorted on each call: for walks whose outcome depends on order).
    pub fn iter(&self) -> impl Iterator<Item = (&NodeId, &Peer)> {
        let mut all: Vec<(&NodeId, &Peer)> = self.unordered().collect();
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
        for (id, _) in self.unordered() {
            if lowest.len() == k && lowest.last().is_none_or(|last| id >= *last) {
                continue;
            }
            let at = lowest.partition_point(|l| *l < id);
            lowest.insert(at, id);
            lowest.truncate(k);
        }
        lowest.into_iter().cloned().collect()
    }

    /// The peer with the next id after `id`, round the table (the lowest after the highest):
    /// a walk over every peer in turn, without sorting the table.
    pub(crate) fn next_after(&self, id: &NodeId) -> Option<NodeId> {
        let (mut next, mut lowest): (Option<&NodeId>, Option<&NodeId>) = (None, None);
        for (p, _) in self.unordered() {
            if p > id && next.is_none_or(|n| p < n) {
                next = Some(p);
            }
            if lowest.is_none_or(|l| p < l) {
                lowest = Some(p);
            }
        }
        next.or(lowest).cloned()
    }

    /// The peers in no particular order: only for counting and other walks whose result does
    /// not depend on order.
    pub(crate) fn unordered(&self) -> impl Iterator<Item = (&NodeId, &Peer)> {
        (self.inline.iter().flatten())
            .chain(self.hashed.iter())
            .map(|p| (p.id(), p))
    }

    /// Hands `to` what looking `id` up reads beyond the node's own lines (reading only
    /// those): the advertisements of the peers kept inline, or the hash table's first tag and
    /// slot for `id`. For a caller that wants them loaded before a step looks a peer up.
    pub fn parts_for(&self, id: &NodeId, to: &mut impl crate::Parts) {
        if self.hashed.is_empty() {
            for p in self.inline.iter().flatten() {
                p.advert.parts(to);
            }
        } else {
            self.hashed.parts_for(id.fixed_hash(), to);
        }
    }

    /// The peer `id`, to update what it reported (its eligibility stays as it connected).
    pub(crate) fn get_mut(&mut self, id: &NodeId) -> Option<&mut Peer> {
        if self.hashed.is_empty() {
            return self.inline_slot(id).and_then(|i| self.inline[i].as_mut());
        }
        let i = self.hashed.find(id.fixed_hash(), id)?;
        self.hashed.get_mut(i)
    }

    /// Puts the peer `advert` advertises in, connected at `now_ms` unless it already was (then
    /// the connection keeps its start and the figures are heard now), and returns what it
    /// replaces (one probe: at a cold start this runs n² times, nearly always on a cold table).
    pub(crate) fn connect(&mut self, advert: Advert, now_ms: u64) -> Option<Peer> {
        self.eligible += usize::from(advert.eligible());
        let h = advert.peer().fixed_hash();
        // Reconnected: the connection keeps its start, the figures are heard now.
        let again = |advert, old: &Peer| {
            let mut peer = Peer::new(advert, old.up_since_ms);
            peer.seen_at(now_ms);
            peer
        };
        let old = if self.hashed.is_empty() {
            match self.inline_slot(advert.peer()) {
                Some(i) => {
                    let slot = &mut self.inline[i];
                    let peer = slot.as_ref().map(|old| again(advert, old));
                    std::mem::replace(slot, peer)
                }
                None => {
                    self.insert_new(h, Peer::new(advert, now_ms));
                    None
                }
            }
        } else {
            match self.hashed.find(h, advert.peer()) {
                Some(i) => {
                    let peer = self.hashed.get(i).map(|old| again(advert, old));
                    peer.and_then(|peer| self.hashed.replace(i, peer))
                }
                None => {
                    self.hashed.insert_new(h, Peer::new(advert, now_ms));
                    None
                }
            }
        };
        if let Some(old) = &old {
            self.eligible -= usize::from(old.eligible());
        }
        old
    }

    /// Puts a peer that is not in the table in, inline while there is room.
    fn insert_new(&mut self, h: u64, peer: Peer) {
        if let Some(i) = self.inline.iter().position(Option::is_none) {
            self.inline[i] = Some(peer);
            self.inline_hashes[i] = h;
            return;
        }
        for p in self.inline.iter_mut().filter_map(Option::take) {
            self.hashed.insert_new(p.id().fixed_hash(), p);
        }
        self.hashed.insert_new(h, peer);
    }

    /// Takes `id` out.
    pub(crate) fn remove(&mut self, id: &NodeId) -> Option<Peer> {
        let old = if self.hashed.is_empty() {
            let i = self.inline_slot(id)?;
            self.inline[i].take()?
        } else {
            let i = self.hashed.find(id.fixed_hash(), id)?;
            self.hashed.remove(i)?
        };
        self.eligible -= usize::from(old.eligible());
        Some(old)
    }

    /// Forgets every peer.
    pub(crate) fn clear(&mut self) {
        self.inline = Default::default();
        self.hashed.clear();
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
        self.len() == other.len()
            && self
                .unordered()
                .all(|(id, p)| other.get(id).is_some_and(|q| q == p))
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
        let sorted = std::collections::BTreeMap::<NodeId, PeerFields<Vec<String>>>::deserialize(d)?;
        let mut table = PeerTable::default();
        for (id, f) in sorted {
            let info = PeerInfo {
                capabilities: f.capabilities.into(),
                uptime_s: f.uptime_s,
                resources: f.resources,
            };
            table.connect(Advert::new(id.clone(), info), f.up_since_ms);
            if let Some(peer) = table.get_mut(&id) {
                peer.seen_at(f.seen_at_ms);
            }
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(id: &str, eligible: bool) -> Advert {
        let caps: Vec<String> = if eligible {
            vec![crate::ADMIN_ELECTION.into()]
        } else {
            Vec::new()
        };
        let info = PeerInfo {
            capabilities: caps.into(),
            uptime_s: 7,
            resources: Default::default(),
        };
        Advert::new(NodeId::from(id), info)
    }

    fn table(ids: &[&str]) -> PeerTable {
        let mut t = PeerTable::default();
        for (i, id) in ids.iter().enumerate() {
            t.connect(advert(id, i % 2 == 0), i as u64);
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
    /// a reconnection keeps when the peer first came up, and its figures are heard anew.
    #[test]
    fn the_eligible_count_follows_the_table() {
        let mut t = PeerTable::default();
        let (a, b) = (NodeId::from("a"), NodeId::from("b"));
        assert!(t.connect(advert("a", true), 0).is_none());
        t.connect(advert("b", true), 0);
        assert_eq!((t.len(), t.eligible_count()), (2, 2));
        assert!(t
            .connect(advert("a", false), 0)
            .is_some_and(|p| p.eligible()));
        assert_eq!((t.len(), t.eligible_count()), (2, 1));
        assert!(t.remove(&b).is_some_and(|p| p.eligible()));
        assert!(t.remove(&b).is_none());
        assert_eq!((t.len(), t.eligible_count()), (1, 0));
        assert!(t.contains(&a) && !t.contains(&b) && !t.is_empty());
        t.connect(advert("b", true), 9);
        assert_eq!((t[&b].up_since_ms(), t.eligible_count()), (9, 1));
        t.connect(advert("b", false), 20);
        let p = &t[&b];
        assert_eq!(
            (p.up_since_ms(), p.seen_at_ms(), t.eligible_count()),
            (9, 20, 0)
        );
        t.clear();
        assert_eq!((t.len(), t.eligible_count(), t.is_empty()), (0, 0, true));
    }

    /// Figures heard later (a whoami reply) change this node's copy only: the advertisement
    /// other tables share is untouched; snapshots carry when they were heard.
    #[test]
    fn figures_heard_later_are_this_tables_own() {
        let shared = advert("a", true);
        let (mut t, mut u) = (PeerTable::default(), PeerTable::default());
        t.connect(shared.clone(), 1_000);
        u.connect(shared.clone(), 1_000);
        let a = NodeId::from("a");
        let more = Resources {
            cpu_millicores: 500,
            ..Resources::default()
        };
        t.get_mut(&a).unwrap().heard(60, more, 5_000);
        let (p, q) = (&t[&a], &u[&a]);
        assert_eq!(
            (p.uptime_s(), p.seen_at_ms(), p.resources()),
            (60, 5_000, more)
        );
        assert_eq!((q.uptime_s(), q.seen_at_ms()), (7, 1_000));
        assert_eq!(
            (shared.uptime_s(), shared.resources()),
            (7, Resources::default())
        );
        assert!(p.eligible() && p.score_at(5_000) > q.score_at(1_000));
        assert_ne!(t, u);
        let back: PeerTable = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        // Heard again when the connection came up: the same state as never heard.
        t.get_mut(&a).unwrap().heard(7, Resources::default(), 1_000);
        assert_eq!(t, u);
    }

    /// Against a sorted map of (id → eligible, up since, uptime heard) under a random mix of
    /// connections, reconnections, updates, removals and clears, across the move from the inline
    /// slots to the hash table and back to empty and through the hash table's growth, removed
    /// slots and rebuilds, with ids made apart from the ones connected:
    /// the same answers, counts, order and JSON, and equal to a table rebuilt from its JSON.
    #[test]
    fn it_behaves_as_a_sorted_map_inline_and_hashed() {
        use rand_chacha::rand_core::SeedableRng;
        use std::collections::BTreeMap;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut t = PeerTable::default();
        let mut model: BTreeMap<NodeId, (bool, u64, u64)> = BTreeMap::new();
        let (mut inline_seen, mut hashed_seen) = (false, false);
        for round in 0..20_000u64 {
            let pick = |rng: &mut rand_chacha::ChaCha8Rng| {
                let ids = if round < 10_000 {
                    2 + round % 13
                } else {
                    2 + round % 400
                };
                NodeId::from(format!("n{}", crate::rng::below(rng, ids)))
            };
            let id = pick(&mut rng);
            match crate::rng::below(&mut rng, 100) {
                0 => {
                    t.clear();
                    model.clear();
                }
                1..=55 => {
                    let eligible = crate::rng::below(&mut rng, 2) == 0;
                    let old = t.connect(advert(id.as_str(), eligible), round);
                    let want = model.get(&id).map(|m| m.0);
                    assert_eq!(old.map(|p| p.eligible()), want, "{round}");
                    let up = model.get(&id).map_or(round, |m| m.1);
                    model.insert(id, (eligible, up, 7));
                }
                56..=70 => {
                    if let Some(p) = t.get_mut(&id) {
                        p.heard(round, Resources::default(), round);
                    }
                    if let Some(m) = model.get_mut(&id) {
                        m.2 = round;
                    }
                }
                _ => {
                    let old = t.remove(&id).map(|p| p.up_since_ms());
                    assert_eq!(old, model.remove(&id).map(|m| m.1), "{round}");
                }
            }
            inline_seen |= t.len() > 1 && t.hashed.is_empty();
            hashed_seen |= !t.hashed.is_empty();
            assert!(t.hashed.is_empty() || t.inline.iter().all(Option::is_none));
            t.hashed.check();
            assert_eq!(t.len(), model.len());
            assert_eq!(t.is_empty(), model.is_empty());
            let eligible = model.values().filter(|m| m.0).count();
            assert_eq!(t.eligible_count(), eligible, "{round}");
            let probe = pick(&mut rng);
            let got = t
                .get(&probe)
                .map(|p| (p.eligible(), p.up_since_ms(), p.uptime_s()));
            assert_eq!(got, model.get(&probe).copied(), "{round}");
            let ids: Vec<&NodeId> = t.ids().collect();
            assert_eq!(ids, model.keys().collect::<Vec<_>>());
            let k = crate::rng::below(&mut rng, 8) as usize;
            let lowest = t.lowest_ids(k);
            assert_eq!(lowest.iter().collect::<Vec<_>>(), ids[..k.min(ids.len())]);
            let json = serde_json::to_string(&t).unwrap();
            let back: PeerTable = serde_json::from_str(&json).unwrap();
            assert_eq!(back, t, "{round}");
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
        assert!(inline_seen && hashed_seen);
    }
}
