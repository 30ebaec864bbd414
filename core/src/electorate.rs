//! The electorate: the admin-eligible nodes that vote. The first one is agreed at bootstrap
//! (`bootstrap.rs`); each later one differs from its predecessor by one member and is committed
//! by the admin (`membership.rs`).

use std::sync::Arc;

use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

use crate::NodeId;

/// The set of voters. Quorum is a strict majority of its members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawElectorate")]
pub struct Electorate {
    /// Starts at 1 when bootstrap fixes the electorate; each committed change adds one.
    pub version: u64,
    /// The term of the admin that proposed this version (0 for the bootstrap electorate). Two
    /// proposals of one version (the first never committed) are ordered by it: see [`Key`].
    pub term: u64,
    /// The fingerprint of the cluster's bootstrap electorate, kept by every later version: two
    /// nodes with different geneses belong to different clusters.
    pub genesis: u64,
    /// Members, sorted and without duplicates (so the fingerprint does not depend on discovery
    /// order). Shared: every change is announced with the list, which a node of a 10,000-voter
    /// cluster would otherwise copy (10,000 reference counts) for each notice.
    members: Arc<[NodeId]>,
    /// Nodes an operator removed (`chorus members remove`, `leave`), oldest first, at most
    /// [`MAX_RETIRED`]: autopilot never promotes them, and only an operator's `add` takes one
    /// off. Replicated with the members, so the operator's word survives every admin change.
    /// Absent from the wire and from digests while empty (older electorates are unchanged).
    #[serde(skip_serializing_if = "no_ids")]
    retired: Arc<[NodeId]>,
    /// Cached: every vote request carries it and every voter compares it.
    #[serde(skip_serializing)]
    fingerprint: u64,
    /// Cached: `contains`, which ranking a node among thousands of voters asks for each.
    #[serde(skip_serializing)]
    index: MemberIndex,
}

/// The members' positions by id hash: a membership test reads one or two lines where a binary
/// search over thousands of ids took a dozen unpredictable branches. Derived from `members`,
/// so it never decides equality.
#[derive(Clone, Default)]
struct MemberIndex(HashTable<u32>);

impl MemberIndex {
    fn new(members: &[NodeId]) -> MemberIndex {
        let mut table = HashTable::with_capacity(members.len());
        for (i, m) in members.iter().enumerate() {
            let hash = |i: &u32| members[*i as usize].fixed_hash();
            table.insert_unique(m.fixed_hash(), i as u32, hash);
        }
        MemberIndex(table)
    }
}

impl PartialEq for MemberIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for MemberIndex {}

impl std::fmt::Debug for MemberIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemberIndex")
    }
}

/// The serialized form; deserializing goes through [`Electorate::new`] so members are sorted and
/// the fingerprint is recomputed rather than trusted.
#[derive(Deserialize)]
struct RawElectorate {
    version: u64,
    #[serde(default)]
    term: u64,
    #[serde(default)]
    genesis: u64,
    members: Vec<NodeId>,
    #[serde(default)]
    retired: Vec<NodeId>,
}

impl From<RawElectorate> for Electorate {
    fn from(raw: RawElectorate) -> Self {
        let mut e = Electorate::new(raw.version, raw.members);
        if raw.version != 1 || raw.term != 0 {
            e = e.successor_raw(raw.version, raw.term, raw.genesis);
        }
        e.with_retired(raw.retired)
    }
}

/// Most operator-removed ids an electorate keeps; the oldest is forgotten first (and autopilot
/// may then promote it again, should it still be around).
pub const MAX_RETIRED: usize = 256;

fn no_ids(ids: &Arc<[NodeId]>) -> bool {
    ids.is_empty()
}

/// How electorates are ordered: by version, then by the term that proposed them. A voter grants
/// votes only to candidates whose key is at least its own (see `membership.rs`).
pub type Key = (u64, u64);

impl Electorate {
    /// Builds an electorate from any list of members. Version 1 is a bootstrap electorate and
    /// is its own genesis.
    pub fn new(version: u64, mut members: Vec<NodeId>) -> Self {
        members.sort();
        members.dedup();
        let fingerprint = digest(version, 0, &members, &[]);
        Electorate {
            version,
            term: 0,
            genesis: fingerprint,
            index: MemberIndex::new(&members),
            members: members.into(),
            retired: Arc::from([]),
            fingerprint,
        }
    }

    /// The next version with `members`, proposed in `term`, of the same cluster; the operator's
    /// removals carry over.
    pub fn successor(&self, term: u64, members: Vec<NodeId>) -> Self {
        Electorate::new(self.version + 1, members)
            .successor_raw(self.version + 1, term, self.genesis)
            .with_retired(self.retired.to_vec())
    }

    fn successor_raw(mut self, version: u64, term: u64, genesis: u64) -> Self {
        self.version = version;
        self.term = term;
        self.genesis = genesis;
        self.fingerprint = digest(version, term, &self.members, &self.retired);
        self
    }

    /// The same electorate with `retired` as its operator-removed ids, duplicates dropped (the
    /// first kept). Not cut to [`MAX_RETIRED`] here: the admin does when it retires a node,
    /// and an electorate from the wire with more is refused (`trust.rs`).
    pub fn with_retired(mut self, retired: Vec<NodeId>) -> Self {
        // A set, not `contains` on the list: a hostile message may carry many thousands.
        let mut seen = std::collections::BTreeSet::new();
        let kept: Vec<NodeId> = retired
            .into_iter()
            .filter(|id| seen.insert(id.clone()))
            .collect();
        self.retired = kept.into();
        self.fingerprint = digest(self.version, self.term, &self.members, &self.retired);
        self
    }

    /// The ids an operator removed, oldest first: autopilot leaves them out.
    pub fn retired(&self) -> &[NodeId] {
        &self.retired
    }

    /// Whether an operator removed `id` (and no operator added it back since).
    pub fn is_retired(&self, id: &NodeId) -> bool {
        self.retired.contains(id)
    }

    /// The order key: (version, proposing term).
    pub fn key(&self) -> Key {
        (self.version, self.term)
    }

    /// Members in id order.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The member list itself, shared (what a notice of this electorate carries).
    pub fn shared_members(&self) -> Arc<[NodeId]> {
        self.members.clone()
    }

    /// Number of voters.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when there are no voters (never the case for a bootstrapped electorate).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether `id` is a voter.
    pub fn contains(&self, id: &NodeId) -> bool {
        let members = &self.members;
        (self.index.0)
            .find(id.fixed_hash(), |i| members[*i as usize] == *id)
            .is_some()
    }

    /// Votes needed to win: a strict majority.
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// A stable 64-bit FNV-1a digest of version and members. Voters refuse candidates whose
    /// electorate differs from their own, so two nodes that bootstrapped different electorates
    /// cannot both count a majority of the same voters.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

fn digest(version: u64, term: u64, members: &[NodeId], retired: &[NodeId]) -> u64 {
    let mut h = Fnv::new();
    h.write(&version.to_be_bytes());
    if term != 0 {
        // Bootstrap electorates keep the digest they always had.
        h.write(&term.to_be_bytes());
    }
    for m in members {
        h.write(m.as_str().as_bytes());
        h.write(&[0]);
    }
    if !retired.is_empty() {
        // After the members, behind a byte no id holds: no member list digests the same.
        h.write(&[0xff]);
        for r in retired {
            h.write(r.as_str().as_bytes());
            h.write(&[0]);
        }
    }
    h.0
}

/// FNV-1a, chosen because it is tiny and its output is fixed by definition on every platform.
pub(crate) struct Fnv(pub(crate) u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<NodeId> {
        names.iter().map(|n| NodeId::from(*n)).collect()
    }

    #[test]
    fn quorum_is_strict_majority() {
        for (n, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (1000, 501)] {
            let e = Electorate::new(1, (0..n).map(|i| NodeId::from(format!("n{i}"))).collect());
            assert_eq!(e.quorum(), q, "n={n}");
        }
    }

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let a = Electorate::new(1, ids(&["b", "a", "c", "a"]));
        let b = Electorate::new(1, ids(&["c", "b", "a"]));
        assert_eq!(a, b);
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(
            a.fingerprint(),
            Electorate::new(2, ids(&["a", "b", "c"])).fingerprint()
        );
        assert_ne!(
            a.fingerprint(),
            Electorate::new(1, ids(&["a", "bc"])).fingerprint()
        );
        assert!(a.contains(&"b".into()) && !a.contains(&"d".into()));
        assert_eq!((a.len(), a.is_empty()), (3, false));
        assert!(Electorate::new(1, vec![]).is_empty());
    }

    /// The operator-removed ids change the fingerprint and travel with the electorate; an
    /// electorate without any digests and serializes as it always did (older nodes' snapshots
    /// and the fixed-seed traces are unchanged).
    #[test]
    fn retired_ids_are_part_of_the_electorate() {
        let e = Electorate::new(1, ids(&["a", "b", "c"])).successor(2, ids(&["a", "b"]));
        let json = serde_json::to_string(&e).unwrap();
        assert!(!json.contains("retired"), "{json}");
        let r = e.clone().with_retired(ids(&["c", "d", "c"]));
        assert_eq!(r.retired(), &ids(&["c", "d"])[..]);
        assert!(r.is_retired(&"c".into()) && !r.is_retired(&"a".into()));
        assert_ne!(r.fingerprint(), e.fingerprint());
        assert_ne!(r, e);
        let back: Electorate = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.fingerprint(), r.fingerprint());
        // Carried to the next version, whoever proposes it.
        assert_eq!(r.successor(3, ids(&["a", "b", "e"])).retired(), r.retired());
        // Members and retired ids do not run into each other.
        let one = Electorate::new(1, ids(&["a", "b"])).with_retired(vec![]);
        let other = Electorate::new(1, ids(&["a"])).with_retired(ids(&["b"]));
        assert_ne!(one.fingerprint(), other.fingerprint());
    }

    /// Membership through the hash index agrees with the sorted list: ids made apart with the
    /// same text, ids sharing their first eight bytes, and non-members that hash near members.
    #[test]
    fn contains_agrees_with_the_member_list() {
        let names: Vec<String> = (0..2_000).map(|i| format!("node-0000{i}")).collect();
        let members: Vec<NodeId> = names
            .iter()
            .step_by(2)
            .map(|n| NodeId::from(n.as_str()))
            .collect();
        let e = Electorate::new(1, members);
        for (i, name) in names.iter().enumerate() {
            let fresh = NodeId::from(name.as_str()); // not the member's own pointer
            assert_eq!(e.contains(&fresh), i % 2 == 0, "{name}");
            assert_eq!(
                e.contains(&fresh),
                e.members().binary_search(&fresh).is_ok()
            );
        }
        let later = e.successor(3, e.members()[1..].to_vec());
        assert!(!later.contains(&e.members()[0]) && later.contains(&e.members()[1]));
        let back: Electorate = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert!(back.contains(&NodeId::from("node-00000")) && back == e);
    }
}
