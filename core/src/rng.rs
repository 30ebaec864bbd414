//! Seeded randomness: one ChaCha8 stream per node, derived from (cluster seed, node id).

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::electorate::Fnv;
use crate::NodeId;

/// The node's generator, seeded from the cluster seed and its id so nodes draw independent,
/// reproducible streams.
pub fn node_rng(cluster_seed: u64, id: &NodeId) -> ChaCha8Rng {
    let mut seed = [0u8; 32];
    for (i, chunk) in seed.chunks_mut(8).enumerate() {
        let mut h = Fnv::new();
        h.write(&cluster_seed.to_be_bytes());
        h.write(&(i as u64).to_be_bytes());
        h.write(id.as_str().as_bytes());
        chunk.copy_from_slice(&splitmix(h.0).to_le_bytes());
    }
    ChaCha8Rng::from_seed(seed)
}

/// A uniform draw from `0..span` (0 when `span` is 0), by rejection sampling so the result
/// depends only on the generator's output, never on a library's sampling algorithm. (Generic so
/// a test can feed it the one draw that sits at the rejection edge.)
pub fn below<R: RngCore + ?Sized>(rng: &mut R, span: u64) -> u64 {
    if span == 0 {
        return 0;
    }
    let zone = u64::MAX - (u64::MAX % span);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % span;
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a = || node_rng(7, &"n1".into()).next_u64();
        assert_eq!(a(), a());
        assert_ne!(a(), node_rng(7, &"n2".into()).next_u64());
        assert_ne!(a(), node_rng(8, &"n1".into()).next_u64());
        // Pinned: a change here changes every simulation trace.
        assert_eq!(node_rng(0, &"n0".into()).next_u64(), PINNED);
    }

    const PINNED: u64 = 6_330_538_085_595_867_552;

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        let mut r = node_rng(1, &"x".into());
        assert_eq!(below(&mut r, 0), 0);
        let mut hits = [0u32; 7];
        for _ in 0..7_000 {
            hits[below(&mut r, 7) as usize] += 1;
        }
        // Uniform: each of the seven values about a thousand times.
        assert!(hits.iter().all(|&h| (850..1150).contains(&h)), "{hits:?}");
        // Pinned: the draws are the generator's output modulo the span.
        let mut r = node_rng(0, &"n0".into());
        assert_eq!(below(&mut r, 1_000_000), PINNED % 1_000_000);
    }

    /// A generator that returns the given outputs in turn.
    struct Script(Vec<u64>);

    impl RngCore for Script {
        fn next_u32(&mut self) -> u32 {
            self.next_u64() as u32
        }
        fn next_u64(&mut self) -> u64 {
            self.0.remove(0)
        }
        fn fill_bytes(&mut self, _: &mut [u8]) {
            unreachable!("below draws u64s only")
        }
    }

    /// The top of the u64 range that would bias the draw is rejected, from its first value on;
    /// the value just below it is kept.
    #[test]
    fn below_rejects_exactly_the_draws_that_would_bias_it() {
        // 2^64 - 1 = 3 * 6148914691236517205: for span 10 the last 6 values (…610 to …615) would
        // favour 0 to 5.
        let zone = u64::MAX - u64::MAX % 10;
        assert_eq!(zone, 18_446_744_073_709_551_610);
        assert_eq!(
            below(&mut Script(vec![zone, 23]), 10),
            3,
            "the zone's edge is rejected"
        );
        assert_eq!(below(&mut Script(vec![u64::MAX, 23]), 10), 3);
        assert_eq!(
            below(&mut Script(vec![zone - 1]), 10),
            9,
            "just below it is kept"
        );
        assert_eq!(below(&mut Script(vec![41]), 10), 1);
        // A span that divides 2^64 - 1 rejects only u64::MAX.
        assert_eq!(below(&mut Script(vec![u64::MAX, 7]), 3), 1);
        assert_eq!(
            below(&mut Script(vec![u64::MAX - 1]), 3),
            (u64::MAX - 1) % 3
        );
        // Span 1 is always 0, without a rejection but the last value.
        assert_eq!(below(&mut Script(vec![12_345]), 1), 0);
    }
}
