//! Live resource usage of a sandbox from the Engine's stats, computed the way `docker stats`
//! does ([`cpu_percent`], [`memory_in_use`]).

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::StatsOptionsBuilder;
use futures_util::StreamExt;

use super::container::{Container, CpuSample};
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::{ResourceUsage, UsageTotals};

impl Container {
    /// One stats sample, with the CPU percentage since the previous call (or over a short
    /// interval, the first time).
    pub(super) async fn sample_usage(&self) -> SandboxResult<ResourceUsage> {
        let (stats, cpu_percent) = self.stats_with_cpu_percent().await?;
        let memory = stats.memory_stats.as_ref();
        let (rx, tx) = network_bytes(&stats);
        Ok(ResourceUsage {
            cpu_percent,
            memory_bytes: memory_now(&stats),
            memory_limit_bytes: memory.and_then(|m| m.limit).unwrap_or(0),
            network_rx_bytes: rx,
            network_tx_bytes: tx,
            pids: stats
                .pids_stats
                .as_ref()
                .and_then(|p| p.current)
                .unwrap_or(0),
        })
    }

    /// CPU time and peak memory since the container started, from one sample.
    pub(super) async fn sample_totals(&self) -> SandboxResult<UsageTotals> {
        let stats = self.one_stats().await?;
        let peak = stats.memory_stats.as_ref().and_then(|m| m.max_usage);
        Ok(UsageTotals {
            cpu_ns: stats
                .cpu_stats
                .as_ref()
                .and_then(|c| c.cpu_usage.as_ref())
                .and_then(|u| u.total_usage)
                .unwrap_or(0),
            memory_peak_bytes: peak.unwrap_or_else(|| memory_now(&stats)),
        })
    }

    /// The current stats and the CPU percentage since the last sample this sandbox took.
    async fn stats_with_cpu_percent(&self) -> SandboxResult<(ContainerStatsResponse, f64)> {
        let mut stats = self.one_stats().await?;
        let previous = *self.last_cpu.lock().unwrap_or_else(|p| p.into_inner());
        let mut base = previous;
        if base.is_none() {
            // A one-shot sample has no "before"; take a second one shortly after.
            base = cpu_sample(&stats);
            tokio::time::sleep(Duration::from_millis(100)).await;
            stats = self.one_stats().await?;
        }
        let current = cpu_sample(&stats);
        *self.last_cpu.lock().unwrap_or_else(|p| p.into_inner()) = current;
        let percent = match (base, current) {
            (Some(b), Some(c)) => cpu_percent(
                (b.total_ns, b.system_ns),
                (c.total_ns, c.system_ns),
                c.online_cpus,
            ),
            _ => 0.0,
        };
        Ok((stats, percent))
    }

    async fn one_stats(&self) -> SandboxResult<ContainerStatsResponse> {
        let options = StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(true)
            .build();
        let mut stream = self.docker.stats(&self.name, Some(options));
        match stream.next().await {
            Some(Ok(stats)) => Ok(stats),
            Some(Err(e)) => Err(SandboxError::from_bollard(ErrorCategory::Io, "stats", e)),
            None => Err(SandboxError::new(ErrorCategory::Io, "stats: empty answer")),
        }
    }
}

/// Bytes received and sent, summed over the container's networks.
fn network_bytes(stats: &ContainerStatsResponse) -> (u64, u64) {
    stats
        .networks
        .as_ref()
        .map(|nets| {
            nets.values().fold((0, 0), |(rx, tx), n| {
                (rx + n.rx_bytes.unwrap_or(0), tx + n.tx_bytes.unwrap_or(0))
            })
        })
        .unwrap_or((0, 0))
}

fn cpu_sample(stats: &ContainerStatsResponse) -> Option<CpuSample> {
    let cpu = stats.cpu_stats.as_ref()?;
    let usage = cpu.cpu_usage.as_ref()?;
    Some(CpuSample {
        total_ns: usage.total_usage?,
        system_ns: cpu.system_cpu_usage?,
        online_cpus: cpu
            .online_cpus
            .filter(|n| *n > 0)
            .or_else(|| {
                usage
                    .percpu_usage
                    .as_ref()
                    .map(|v| v.len() as u32)
                    .filter(|n| *n > 0)
            })
            .unwrap_or(1),
    })
}

/// The docker CLI's CPU formula: container CPU time over host CPU time, times CPUs, in percent.
pub fn cpu_percent(previous: (u64, u64), current: (u64, u64), online_cpus: u32) -> f64 {
    let cpu_delta = current.0.saturating_sub(previous.0) as f64;
    let system_delta = current.1.saturating_sub(previous.1) as f64;
    if cpu_delta > 0.0 && system_delta > 0.0 {
        cpu_delta / system_delta * f64::from(online_cpus) * 100.0
    } else {
        0.0
    }
}

/// A sample's memory in use, as [`memory_in_use`] computes it (0 when the sample has none).
fn memory_now(stats: &ContainerStatsResponse) -> u64 {
    stats
        .memory_stats
        .as_ref()
        .map(|m| memory_in_use(m.usage.unwrap_or(0), m.stats.as_ref()))
        .unwrap_or(0)
}

/// Memory in use without the inactive file cache, as `docker stats` computes it (cgroup v1 key
/// `total_inactive_file`, v2 `inactive_file`).
pub fn memory_in_use(usage: u64, stats: Option<&HashMap<String, u64>>) -> u64 {
    let cache = stats
        .and_then(|s| {
            s.get("total_inactive_file")
                .or_else(|| s.get("inactive_file"))
        })
        .copied()
        .unwrap_or(0);
    if cache < usage {
        usage - cache
    } else {
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_formulas_match_docker_cli() {
        // 0.5 s of CPU over 2 s of host time on 4 CPUs = 100 %.
        let pct = cpu_percent((1_000, 10_000), (501_000, 2_010_000), 4);
        assert!((pct - 100.0).abs() < 1e-9, "{pct}");
        assert_eq!(cpu_percent((5, 5), (5, 5), 2), 0.0);
        let v1 = HashMap::from([("total_inactive_file".to_string(), 300u64)]);
        assert_eq!(memory_in_use(1000, Some(&v1)), 700);
        let v2 = HashMap::from([("inactive_file".to_string(), 100u64)]);
        assert_eq!(memory_in_use(1000, Some(&v2)), 900);
        assert_eq!(memory_in_use(1000, None), 1000);
    }
}
