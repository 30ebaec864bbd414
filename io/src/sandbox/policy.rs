//! The sandbox security policy: what a sandbox may do, with secure defaults. Pure data and
//! validation only; the Docker mapping lives in `docker.rs`.
//!
//! Defaults (see [`SandboxPolicy::default`]): all capabilities dropped, `no-new-privileges`,
//! Docker's default seccomp profile, read-only root with a 64 MiB `/tmp` tmpfs, user
//! `65534:65534` (nobody), 1 CPU, 512 MiB memory without swap, 256 processes, 1024 open files,
//! no network, masked and read-only `/proc` paths as Docker's defaults. Never offered: privileged
//! mode and the host's PID/IPC/UTS/network namespaces — a task that needs them is not a sandboxed
//! task.

use std::path::PathBuf;
use std::time::Duration;

use super::error::{ErrorCategory, SandboxError, SandboxResult};

/// Capabilities that let a process escape or take over its container; adding any of them needs
/// [`SandboxPolicy::allow_dangerous_capabilities`].
pub const DANGEROUS_CAPABILITIES: &[&str] = &[
    "ALL",
    "SYS_ADMIN",
    "SYS_MODULE",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_BOOT",
    "SYS_TIME",
    "DAC_READ_SEARCH",
    "NET_ADMIN",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "BPF",
    "PERFMON",
    "SYSLOG",
];

/// `/proc` and `/sys` paths hidden from the sandbox: Docker's defaults (moby `oci/defaults.go`),
/// which Docker would drop if we sent our own list without them.
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// `/proc` paths mounted read-only: Docker's defaults.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The non-root user sandboxes run as by default: nobody/nogroup, present (by number) in every
/// image without needing an `/etc/passwd` entry.
pub const DEFAULT_USER: &str = "65534:65534";

/// The user the sandbox's main process (its init and the deadline `sleep`) runs as: another
/// uid than the commands', so a command cannot signal it, while the post-exec cleanup (run as
/// the commands' user) can kill every process a command left without touching it.
pub const SUPERVISOR_USER: &str = "65533:65533";

/// The security policy of a sandbox. Start from [`SandboxPolicy::default`] and loosen only what
/// a task needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxPolicy {
    /// `uid:gid` (numeric, so it works in images without `/etc/passwd`) the main process and
    /// every command run as. `None`: the image's default user (usually root — needs
    /// `allow_root`).
    pub user: Option<String>,
    /// Allow running as uid 0 (still without capabilities unless added).
    pub allow_root: bool,
    /// Capabilities to add back after dropping all (names without `CAP_`, e.g. `CHOWN`).
    pub capabilities_add: Vec<String>,
    /// Allow adding capabilities from [`DANGEROUS_CAPABILITIES`].
    pub allow_dangerous_capabilities: bool,
    /// Set `no-new-privileges` (setuid binaries and file capabilities stop working).
    pub no_new_privileges: bool,
    /// The seccomp profile.
    pub seccomp: SeccompProfile,
    /// An AppArmor profile name, passed through as `apparmor=<name>`.
    pub apparmor_profile: Option<String>,
    /// SELinux label options, passed through as `label=<option>` (e.g. `type:container_t`).
    pub selinux_labels: Vec<String>,
    /// Paths masked (made empty/unreadable) inside; at least [`DEFAULT_MASKED_PATHS`] is
    /// recommended.
    pub masked_paths: Vec<String>,
    /// Paths mounted read-only inside; at least [`DEFAULT_READONLY_PATHS`] is recommended.
    pub readonly_paths: Vec<String>,
    /// Mount the image's root filesystem read-only.
    pub read_only_rootfs: bool,
    /// Writable scratch space in memory (counted against the memory limit).
    pub tmpfs: Vec<TmpfsMount>,
    /// Size bound of a writable workspace (the default empty one, or a read-write repository's
    /// staged copy): it lives in a tmpfs of this size, counted against the memory limit.
    pub workspace_size_bytes: u64,
    /// CPU, memory, process, file and disk limits.
    pub limits: ResourceLimits,
    /// Network access.
    pub network: NetworkPolicy,
    /// Per-stream cap on captured command output, in bytes.
    pub output_limit_bytes: usize,
    /// Cap on a single file or tree read back from the sandbox, in bytes.
    pub file_limit_bytes: usize,
    /// Timeout for commands whose request names none.
    pub default_timeout: Duration,
    /// Run a minimal init (`docker-init`) as PID 1 so killed commands' orphans are reaped and
    /// do not pile up against the pids limit.
    pub init: bool,
    /// Run each command under a `/bin/sh` wrapper that reports its process group, so a timeout
    /// can kill the whole group inside the sandbox. Needs `/bin/sh` in the image; without it,
    /// a timeout kills the whole sandbox instead.
    pub exec_wrapper: bool,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            user: Some(DEFAULT_USER.to_string()),
            allow_root: false,
            capabilities_add: Vec::new(),
            allow_dangerous_capabilities: false,
            no_new_privileges: true,
            seccomp: SeccompProfile::Default,
            apparmor_profile: None,
            selinux_labels: Vec::new(),
            masked_paths: DEFAULT_MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
            readonly_paths: DEFAULT_READONLY_PATHS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            read_only_rootfs: true,
            tmpfs: vec![TmpfsMount::new("/tmp", 64 * 1024 * 1024)],
            workspace_size_bytes: 256 * 1024 * 1024,
            limits: ResourceLimits::default(),
            network: NetworkPolicy::default(),
            output_limit_bytes: 1024 * 1024,
            file_limit_bytes: 64 * 1024 * 1024,
            default_timeout: Duration::from_secs(600),
            init: true,
            exec_wrapper: true,
        }
    }
}

impl SandboxPolicy {
    /// The `uid` and `gid` the policy runs as, when `user` is numeric.
    pub fn numeric_user(&self) -> Option<(u32, u32)> {
        let user = self.user.as_deref()?;
        let (u, g) = user.split_once(':').unwrap_or((user, user));
        Some((u.parse().ok()?, g.parse().ok()?))
    }

    /// Checks the policy's own rules. Every sandbox implementation calls this before creating
    /// anything; a failure is [`ErrorCategory::PolicyViolation`].
    pub fn validate(&self) -> SandboxResult<()> {
        let violation = |m: String| Err(SandboxError::new(ErrorCategory::PolicyViolation, m));
        match self.user.as_deref() {
            None if !self.allow_root => {
                return violation(
                    "no user set: the image default is usually root; set `user` or `allow_root`"
                        .into(),
                )
            }
            Some(u) if !self.allow_root && is_root_user(u) => {
                return violation(format!(
                    "user {u:?} is root; set `allow_root` to run as root"
                ))
            }
            _ => {}
        }
        let supervisor_uid = SUPERVISOR_USER.split(':').next().unwrap_or(SUPERVISOR_USER);
        if self.user.as_deref().and_then(|u| u.split(':').next()) == Some(supervisor_uid) {
            return violation(format!(
                "user {supervisor_uid} is reserved for the sandbox's own main process"
            ));
        }
        if self.workspace_size_bytes == 0 {
            return violation("workspace_size_bytes must be positive".into());
        }
        for cap in &self.capabilities_add {
            let name = cap.trim_start_matches("CAP_").to_ascii_uppercase();
            if DANGEROUS_CAPABILITIES.contains(&name.as_str()) && !self.allow_dangerous_capabilities
            {
                return violation(format!(
                    "capability {cap} is dangerous; set `allow_dangerous_capabilities` to add it"
                ));
            }
        }
        for t in &self.tmpfs {
            if !t.path.starts_with('/') || t.path == "/" {
                return violation(format!(
                    "tmpfs path {:?} must be absolute and not /",
                    t.path
                ));
            }
            if t.size_bytes == 0 {
                return violation(format!(
                    "tmpfs {:?} has no size: an unsized tmpfs can eat host memory",
                    t.path
                ));
            }
        }
        if let SeccompProfile::File(path) = &self.seccomp {
            if !path.is_absolute() {
                return violation(format!("seccomp profile path {path:?} must be absolute"));
            }
        }
        if !self.network.enabled
            && (!self.network.dns.is_empty()
                || !self.network.extra_hosts.is_empty()
                || self.network.http_proxy.is_some()
                || self.network.https_proxy.is_some())
        {
            return violation(
                "network settings (dns, hosts, proxies) given while the network is disabled".into(),
            );
        }
        if self.output_limit_bytes == 0 {
            return violation("output_limit_bytes must be positive".into());
        }
        Ok(())
    }
}

fn is_root_user(user: &str) -> bool {
    let name = user.split(':').next().unwrap_or(user);
    name == "0" || name == "root"
}

/// Which seccomp profile confines system calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeccompProfile {
    /// Docker's built-in default profile (blocks ~50 dangerous syscalls).
    Default,
    /// A custom profile, read from this JSON file on the host when the sandbox is created.
    File(PathBuf),
    /// No seccomp filtering. Only with care.
    Unconfined,
}

/// A size-limited in-memory filesystem mounted inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmpfsMount {
    /// Where it appears.
    pub path: String,
    /// Its size limit.
    pub size_bytes: u64,
    /// Permission bits of its root (1777 for a shared /tmp).
    pub mode: u32,
    /// Mount with `noexec` (downloaded binaries cannot run from it).
    pub noexec: bool,
}

impl TmpfsMount {
    /// A world-writable (sticky) tmpfs of `size_bytes` at `path`, executable.
    pub fn new(path: impl Into<String>, size_bytes: u64) -> Self {
        TmpfsMount {
            path: path.into(),
            size_bytes,
            mode: 0o1777,
            noexec: false,
        }
    }
}

/// Resource limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimits {
    /// CPU quota in billionths of a CPU (1_000_000_000 = one CPU).
    pub nano_cpus: Option<i64>,
    /// Memory limit in bytes (includes tmpfs contents and page cache).
    pub memory_bytes: Option<i64>,
    /// Memory + swap limit in bytes; equal to `memory_bytes` means no swap. `None` with a
    /// memory limit also means no swap (Docker's own default would allow as much swap again).
    pub memory_swap_bytes: Option<i64>,
    /// Maximum number of processes/threads in the sandbox (the cgroup pids limit; stops fork
    /// bombs).
    pub pids: Option<i64>,
    /// `RLIMIT_NOFILE` (open files), soft = hard.
    pub nofile: Option<u64>,
    /// `RLIMIT_NPROC`. Off by default: it counts every process of the uid *on the host*, so with
    /// a shared uid it would couple sandboxes together; `pids` is the per-sandbox limit.
    pub nproc: Option<u64>,
    /// Size of the container's writable layer. Only some storage drivers can enforce it
    /// (overlay2 on xfs with pquota, btrfs, zfs, devicemapper); elsewhere creating the sandbox
    /// fails with [`ErrorCategory::Unsupported`] rather than silently running unlimited.
    pub disk_bytes: Option<u64>,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            nano_cpus: Some(1_000_000_000),
            memory_bytes: Some(512 * 1024 * 1024),
            memory_swap_bytes: None,
            pids: Some(256),
            nofile: Some(1024),
            nproc: None,
            disk_bytes: None,
        }
    }
}

/// Network access.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkPolicy {
    /// `false` (default): only a loopback interface. `true`: the dedicated sandbox network (see
    /// `sandbox::network`: no inter-container traffic, no host/private/link-local destinations)
    /// or the named one.
    pub enabled: bool,
    /// The Docker network to join when enabled; `None` = the dedicated sandbox network. A named
    /// network gets none of the dedicated network's firewall rules.
    pub network_name: Option<String>,
    /// DNS servers.
    pub dns: Vec<String>,
    /// DNS search domains.
    pub dns_search: Vec<String>,
    /// Extra `/etc/hosts` entries: (host name, address).
    pub extra_hosts: Vec<(String, String)>,
    /// `HTTP_PROXY`/`http_proxy` for commands.
    pub http_proxy: Option<String>,
    /// `HTTPS_PROXY`/`https_proxy` for commands.
    pub https_proxy: Option<String>,
    /// `NO_PROXY`/`no_proxy` for commands.
    pub no_proxy: Option<String>,
}

impl NetworkPolicy {
    /// The proxy environment variables, in both spellings tools look for.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        let mut both = |upper: &str, value: &Option<String>| {
            if let Some(v) = value {
                env.push((upper.to_string(), v.clone()));
                env.push((upper.to_ascii_lowercase(), v.clone()));
            }
        };
        both("HTTP_PROXY", &self.http_proxy);
        both("HTTPS_PROXY", &self.https_proxy);
        both("NO_PROXY", &self.no_proxy);
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_is_valid_and_tight() {
        let p = SandboxPolicy::default();
        p.validate().unwrap();
        assert_eq!(p.numeric_user(), Some((65534, 65534)));
        assert!(p.capabilities_add.is_empty());
        assert!(p.read_only_rootfs && p.no_new_privileges && !p.network.enabled);
        assert!(p.limits.pids.is_some() && p.limits.memory_bytes.is_some());
    }

    #[test]
    fn root_needs_opt_in() {
        let p = SandboxPolicy {
            user: Some("0:0".into()),
            ..SandboxPolicy::default()
        };
        assert_eq!(
            p.validate().unwrap_err().category,
            ErrorCategory::PolicyViolation
        );
        let p = SandboxPolicy {
            allow_root: true,
            ..p
        };
        p.validate().unwrap();
        let p = SandboxPolicy {
            user: None,
            ..SandboxPolicy::default()
        };
        assert!(p.validate().is_err());
    }

    #[test]
    fn dangerous_capabilities_need_opt_in() {
        let mut p = SandboxPolicy {
            capabilities_add: vec!["CAP_SYS_ADMIN".into()],
            ..SandboxPolicy::default()
        };
        assert_eq!(
            p.validate().unwrap_err().category,
            ErrorCategory::PolicyViolation
        );
        p.allow_dangerous_capabilities = true;
        p.validate().unwrap();
        let p = SandboxPolicy {
            capabilities_add: vec!["CHOWN".into()],
            ..SandboxPolicy::default()
        };
        p.validate().unwrap();
    }

    #[test]
    fn unsized_tmpfs_and_network_settings_without_network_are_rejected() {
        let p = SandboxPolicy {
            tmpfs: vec![TmpfsMount::new("/scratch", 0)],
            ..SandboxPolicy::default()
        };
        assert!(p.validate().is_err());
        let mut p = SandboxPolicy::default();
        p.network.dns.push("192.0.2.53".into());
        assert!(p.validate().is_err());
        p.network.enabled = true;
        p.validate().unwrap();
    }

    #[test]
    fn proxy_env_has_both_spellings() {
        let n = NetworkPolicy {
            enabled: true,
            http_proxy: Some("http://proxy.invalid:3128".into()),
            ..NetworkPolicy::default()
        };
        let env = n.proxy_env();
        assert!(env.contains(&("HTTP_PROXY".into(), "http://proxy.invalid:3128".into())));
        assert!(env.contains(&("http_proxy".into(), "http://proxy.invalid:3128".into())));
    }
}
