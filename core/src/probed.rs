//! The hash table behind a large [`crate::PeerTable`]: open addressing, linear probing, a tag
//! byte per slot.
//!
//! Written here rather than taken from `hashbrown` for one thing that crate does not offer:
//! [`Probed::parts_for`] names the tag and slot a lookup of a given hash reads first, so a
//! simulator stepping thousands of nodes can have them loaded before the step. A fully peered
//! cold start inserts n² times, nearly always into a table no step touched lately; each insert
//! missed on its control bytes and its slot, and the misses' stores held up the next atomic
//! increment behind them.
//!
//! Layout: `tags[i]` is 0 for an empty slot, [`DELETED`] for a removed one, else `0x80` and
//! the hash's top seven bits; `slots[i]` holds the peer. A slot is 16 bytes and a tag one, and
//! the table grows (doubling) when more than 4/5 of its slots are used, so a table of n peers
//! keeps 17 bytes per slot at between 2/5 and 4/5 full: about 28 bytes per peer.

use crate::{NodeId, Peer};

/// A slot whose peer was removed: lookups go past it, inserts may reuse it.
const DELETED: u8 = 1;
/// The smallest table allocated.
const MIN_SLOTS: usize = 16;

#[derive(Clone, Default)]
pub(crate) struct Probed {
    tags: Box<[u8]>,
    slots: Box<[Option<Peer>]>,
    /// Peers held.
    len: usize,
    /// Slots holding a peer or [`DELETED`]: what probes walk over.
    used: usize,
}

/// The tag of a hash: its top seven bits, with the high bit set so no tag is 0 or [`DELETED`].
fn tag(h: u64) -> u8 {
    0x80 | (h >> 57) as u8
}

fn hash(peer: &Peer) -> u64 {
    peer.id().fixed_hash()
}

impl Probed {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Where the peer `id` (whose hash is `h`) sits, if here.
    pub(crate) fn find(&self, h: u64, id: &NodeId) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let (mask, t) = (self.mask(), tag(h));
        let mut i = h as usize & mask;
        loop {
            match self.tags[i] {
                0 => return None,
                x if x == t && self.slots[i].as_ref().is_some_and(|p| p.id() == id) => {
                    return Some(i)
                }
                _ => i = (i + 1) & mask,
            }
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Peer> {
        self.slots.get(i)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Peer> {
        self.slots.get_mut(i)?.as_mut()
    }

    /// Replaces the peer at `i` (a slot [`Probed::find`] returned).
    pub(crate) fn replace(&mut self, i: usize, peer: Peer) -> Option<Peer> {
        self.slots[i].replace(peer)
    }

    /// Puts in a peer that is not here (its hash `h`).
    pub(crate) fn insert_new(&mut self, h: u64, peer: Peer) {
        if (self.used + 1) * 5 > self.slots.len() * 4 {
            self.grow();
        }
        let mask = self.mask();
        let mut i = h as usize & mask;
        while self.tags[i] > DELETED {
            i = (i + 1) & mask;
        }
        if self.tags[i] == 0 {
            self.used += 1;
        }
        self.tags[i] = tag(h);
        self.slots[i] = Some(peer);
        self.len += 1;
    }

    /// Takes the peer at `i` (a slot [`Probed::find`] returned) out.
    pub(crate) fn remove(&mut self, i: usize) -> Option<Peer> {
        let old = self.slots.get_mut(i)?.take()?;
        self.tags[i] = DELETED;
        self.len -= 1;
        if self.len == 0 {
            // Nothing left to walk over: forget the removed slots.
            self.tags.fill(0);
            self.used = 0;
        }
        Some(old)
    }

    /// Rebuilds into twice the slots the peers need (dropping removed slots), at least
    /// [`MIN_SLOTS`].
    fn grow(&mut self) {
        let want = ((self.len + 1) * 2).next_power_of_two().max(MIN_SLOTS);
        let old = std::mem::take(&mut self.slots);
        self.tags = vec![0; want].into_boxed_slice();
        self.slots = std::iter::repeat_with(|| None).take(want).collect();
        self.len = 0;
        self.used = 0;
        for peer in old.into_vec().into_iter().flatten() {
            self.insert_new(hash(&peer), peer);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Peer> {
        self.slots.iter().flatten()
    }

    pub(crate) fn clear(&mut self) {
        *self = Probed::default();
    }

    /// Hands `to` the tag and the slot a lookup of hash `h` reads first.
    pub(crate) fn parts_for(&self, h: u64, to: &mut impl crate::Parts) {
        let i = h as usize & self.mask();
        if let (Some(t), Some(s)) = (self.tags.get(i), self.slots.get(i)) {
            to.part(t);
            to.part(s);
        }
    }

    /// Its counts agree with its slots, and some slot is always empty (so probes end).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        assert_eq!(self.len, self.slots.iter().flatten().count());
        assert_eq!(self.used, self.tags.iter().filter(|t| **t != 0).count());
        assert!(self.used * 5 <= self.slots.len() * 4);
        for (t, s) in self.tags.iter().zip(self.slots.iter()) {
            assert_eq!(*t > DELETED, s.as_ref().is_some_and(|p| *t == tag(hash(p))));
        }
    }
}
