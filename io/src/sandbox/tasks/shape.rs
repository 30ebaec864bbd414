//! What a task asks of its sandbox, mapped onto the sandbox policy: the limits and network of
//! a [`TaskSpec`] over the node's base policy, and the shape that decides which warm pool can
//! serve it.

use std::time::Duration;

use chorus_core::TaskSpec;

use super::super::SandboxPolicy;

/// The part of a task spec that fixes its sandbox at create time: image, limits, network.
/// Tasks of one shape share a warm pool; a repository mount is not part of it (such tasks get
/// a fresh sandbox of their own).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskShape {
    /// The image.
    pub image: String,
    /// Memory limit in MiB (0: the base policy's).
    pub memory_mb: u32,
    /// CPU limit in millicores (0: the base policy's).
    pub cpu_millis: u32,
    /// Process limit (0: the base policy's).
    pub pids: u32,
    /// A (firewalled) network.
    pub network: bool,
}

impl TaskShape {
    /// The shape of `spec`.
    pub fn of(spec: &TaskSpec) -> Self {
        TaskShape {
            image: spec.image.clone(),
            memory_mb: spec.memory_mb,
            cpu_millis: spec.cpu_millis,
            pids: spec.pids,
            network: spec.network,
        }
    }

    /// The default shape of `image`: no limits of its own, no network.
    pub fn default_of(image: impl Into<String>) -> Self {
        TaskShape {
            image: image.into(),
            memory_mb: 0,
            cpu_millis: 0,
            pids: 0,
            network: false,
        }
    }

    /// `base` with this shape's limits and network; zero limits keep the base's.
    pub fn policy(&self, base: &SandboxPolicy) -> SandboxPolicy {
        let mut p = base.clone();
        if self.memory_mb > 0 {
            let bytes = i64::from(self.memory_mb) * 1024 * 1024;
            p.limits.memory_bytes = Some(bytes);
            // No swap: the limit is the limit (an OOM kill, not a slow crawl).
            p.limits.memory_swap_bytes = Some(bytes);
        }
        if self.cpu_millis > 0 {
            p.limits.nano_cpus = Some(i64::from(self.cpu_millis) * 1_000_000);
        }
        if self.pids > 0 {
            p.limits.pids = Some(i64::from(self.pids));
        }
        p.network.enabled = self.network;
        p
    }
}

/// How long a fresh task sandbox lives at most: the run's timeout plus `grace` for what comes
/// after it (kill, clean-up, usage, removal, sync back), in whole seconds rounded up (the
/// deadline is enforced inside the container from its start, and `reap` honours it from its
/// creation).
pub fn lifetime_for(timeout: Duration, grace: Duration) -> Duration {
    let total = timeout.saturating_add(grace);
    Duration::from_secs(
        total
            .as_secs()
            .saturating_add(u64::from(total.subsec_nanos() > 0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_map_onto_the_policy_and_zero_keeps_the_base() {
        let base = SandboxPolicy::default();
        let spec = TaskSpec {
            image: "img".into(),
            command: vec!["true".into()],
            timeout_ms: 1_000,
            memory_mb: 64,
            cpu_millis: 500,
            pids: 32,
            network: true,
            ..TaskSpec::default()
        };
        let p = TaskShape::of(&spec).policy(&base);
        assert_eq!(p.limits.memory_bytes, Some(64 << 20));
        assert_eq!(p.limits.memory_swap_bytes, Some(64 << 20));
        assert_eq!(p.limits.nano_cpus, Some(500_000_000));
        assert_eq!(p.limits.pids, Some(32));
        assert!(p.network.enabled);
        p.validate().unwrap();
        let plain = TaskShape::default_of("img").policy(&base);
        assert_eq!(plain, base);
    }

    #[test]
    fn a_fresh_sandbox_lives_its_timeout_and_the_grace_never_less() {
        let grace = Duration::from_secs(30);
        assert_eq!(
            lifetime_for(Duration::from_secs(30), grace),
            Duration::from_secs(60)
        );
        // Whole seconds, rounded up: the label and `sleep` count seconds.
        assert_eq!(
            lifetime_for(Duration::from_millis(1_500), grace),
            Duration::from_secs(32)
        );
        assert_eq!(
            lifetime_for(Duration::MAX, grace),
            Duration::from_secs(u64::MAX)
        );
    }
}
