//! The discrete-event engine's queue: items due at simulated times.

use std::collections::{BTreeMap, VecDeque};

/// Items taken in time order and, at one time, in the order they were put — the order of a heap
/// keyed by (time, sequence number), which this replaced. Most items of a large run share a few
/// instants (a cold start of a million nodes queues millions at the first), so a bucket per
/// instant makes a push and a pop O(1) there instead of a heap's log n cache misses, and keeps
/// items inline rather than boxed.
#[derive(Debug)]
pub(crate) struct TimeQueue<T> {
    buckets: BTreeMap<u64, VecDeque<T>>,
    /// Emptied small buckets, kept for their allocation.
    spare: Vec<VecDeque<T>>,
}

/// Buckets larger than this are freed when emptied rather than kept for reuse.
const SPARE_CAPACITY: usize = 1_024;
/// At most this many emptied buckets are kept.
const SPARE_BUCKETS: usize = 256;

impl<T> Default for TimeQueue<T> {
    fn default() -> Self {
        TimeQueue {
            buckets: BTreeMap::new(),
            spare: Vec::new(),
        }
    }
}

impl<T> TimeQueue<T> {
    /// Queues `item` at `at`, after everything already queued at `at`.
    pub(crate) fn push(&mut self, at: u64, item: T) {
        let spare = &mut self.spare;
        self.buckets
            .entry(at)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push_back(item);
    }

    /// When the next item is due.
    pub(crate) fn next_at(&self) -> Option<u64> {
        self.buckets.first_key_value().map(|(at, _)| *at)
    }

    /// The items `ks[0]`, `ks[1]`, … places after the next one (`ks` ascending), in one walk,
    /// as the queue stands (items queued later may come before them): for hints only.
    pub(crate) fn ahead<const N: usize>(&self, ks: [usize; N]) -> [Option<&T>; N] {
        let mut found = [None; N];
        let (mut passed, mut want) = (0, 0);
        for bucket in self.buckets.values() {
            while want < N && ks[want] < passed + bucket.len() {
                found[want] = bucket.get(ks[want] - passed);
                want += 1;
            }
            if want == N {
                break;
            }
            passed += bucket.len();
        }
        found
    }

    /// Takes the next item: the earliest, and of those the first queued.
    pub(crate) fn pop(&mut self) -> Option<(u64, T)> {
        let mut first = self.buckets.first_entry()?;
        let at = *first.key();
        let item = first.get_mut().pop_front();
        if first.get().is_empty() {
            let bucket = first.remove();
            if bucket.capacity() <= SPARE_CAPACITY && self.spare.len() < SPARE_BUCKETS {
                self.spare.push(bucket);
            }
        }
        item.map(|item| (at, item))
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use rand_chacha::rand_core::SeedableRng;

    use super::*;

    /// The same order as a heap keyed by (time, sequence), under pushes interleaved with pops
    /// (items pushed at the instant being drained included).
    #[test]
    fn items_come_out_as_from_a_heap_keyed_by_time_then_arrival() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut q = TimeQueue::default();
        let mut heap = BinaryHeap::new();
        let (mut seq, mut now) = (0u64, 0u64);
        for round in 0..20_000u64 {
            for _ in 0..chorus_core::rng::below(&mut rng, 3) {
                let at = now + chorus_core::rng::below(&mut rng, 5);
                seq += 1;
                q.push(at, round);
                heap.push(Reverse((at, seq, round)));
            }
            if chorus_core::rng::below(&mut rng, 2) == 0 {
                let want = heap.pop().map(|Reverse((at, _, item))| (at, item));
                assert_eq!(q.next_at(), want.map(|w| w.0));
                let got = q.pop();
                assert_eq!(got, want, "round {round}");
                if let Some((at, _)) = got {
                    now = at;
                }
            }
        }
        while let Some(Reverse((at, _, item))) = heap.pop() {
            assert_eq!(q.pop(), Some((at, item)));
        }
        assert_eq!((q.pop(), q.next_at()), (None, None));
    }

    /// `ahead([k, …])` names the items that pop `k`, … after the next, across buckets, in one
    /// walk, and `None` past the end.
    #[test]
    fn ahead_names_what_pops_later() {
        let mut q = TimeQueue::default();
        for (at, item) in [(5, 'a'), (3, 'b'), (5, 'c'), (9, 'd'), (3, 'e'), (7, 'f')] {
            q.push(at, item);
        }
        // Time first, then the order they were queued in.
        let order = ['b', 'e', 'a', 'c', 'f', 'd'];
        for (k, item) in order.iter().enumerate() {
            assert_eq!(q.ahead([k]), [Some(item)], "{k}");
        }
        assert_eq!(q.ahead([order.len()]), [None]);
        assert_eq!(
            q.ahead([0, 2, 3, 5, 9]),
            [Some(&'b'), Some(&'a'), Some(&'c'), Some(&'d'), None]
        );
        q.pop();
        assert_eq!(q.ahead([0, 4, 5]), [Some(&'e'), Some(&'d'), None]);
    }
}
