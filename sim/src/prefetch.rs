//! A hint to the CPU to start loading memory the engine will read soon. It changes no result,
//! only when a cache miss is paid: a large run's time goes to misses on nodes no step touched
//! lately, and starting them a few events early overlaps them.

/// Starts loading the cache line holding `x`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    safe_arch::prefetch_t0(x);
}

/// Starts loading the cache line holding `x` (nothing on this target).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
#[inline(always)]
pub(crate) fn prefetch<T>(_x: &T) {}

/// Prefetches each part a core names (`Core::parts`).
pub(crate) struct Prefetcher;

impl chorus_core::Parts for Prefetcher {
    #[inline(always)]
    fn part<T>(&mut self, part: &T) {
        prefetch(part);
    }
}
