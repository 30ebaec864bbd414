//! The dedicated network sandboxes join when the policy enables networking (issue 16, case 7):
//! a Docker bridge with inter-container traffic off, plus host firewall rules that drop
//! everything a sandbox sends to the host itself and to private, loopback, link-local, CGNAT,
//! multicast and reserved IPv4 destinations. What is left is the public internet (through
//! Docker's NAT) and Docker's embedded DNS (which answers inside the container's own namespace).
//!
//! Mechanism and limits (also in `io/SANDBOX.md`):
//! - the rules are `iptables` rules installed by this process on the host: a chain
//!   `CHORUS-<bridge>` holding one DROP per blocked range, jumped to from Docker's `DOCKER-USER`
//!   chain (forwarded traffic) for packets coming in on the bridge, and a DROP in `INPUT` for
//!   packets from the bridge to the host. This needs root (`CAP_NET_ADMIN`) on the host where the
//!   daemon runs and the `iptables` binary Docker itself uses; without them `create` fails with
//!   [`ErrorCategory::Unsupported`] instead of running with an open network;
//! - the rules are checked on every create and restored when missing, but a firewall reload
//!   between two creates leaves running sandboxes unprotected until the next create;
//! - IPv6 is switched off inside networked sandboxes (sysctl), so only IPv4 needs rules;
//! - a sandbox joined to another network by name (`NetworkPolicy::network_name`) gets none of
//!   this: that network is the operator's responsibility.

use std::collections::HashMap;

use bollard::models::NetworkCreateRequest;
use bollard::Docker;

use super::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};

/// IPv4 destinations a networked sandbox may never reach: "this" network, RFC 1918 private
/// ranges, CGNAT, loopback, link-local (cloud metadata services), IETF protocol assignments,
/// benchmarking, multicast and reserved.
pub const BLOCKED_DESTINATIONS: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// A dedicated sandbox network: the Docker network's name and its bridge interface's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxNetwork {
    /// The Docker network.
    pub name: String,
    /// The host bridge interface (at most 15 characters).
    pub bridge: String,
}

impl Default for SandboxNetwork {
    fn default() -> Self {
        SandboxNetwork {
            name: "chorus-sandbox".into(),
            bridge: "chorus-sbx0".into(),
        }
    }
}

impl SandboxNetwork {
    /// The iptables chain holding the drops (chain names are limited to 28 characters).
    pub fn chain(&self) -> String {
        format!("CHORUS-{}", self.bridge)
    }

    /// Creates the network (if missing) and installs the firewall rules (if missing).
    pub async fn ensure(&self, docker: &Docker) -> SandboxResult<()> {
        // One check at a time in this process; across processes every step is idempotent.
        static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _guard = LOCK.lock().await;
        if self.bridge.is_empty() || self.bridge.len() > 15 {
            return Err(SandboxError::new(
                ErrorCategory::PolicyViolation,
                format!("bridge name {:?} must be 1-15 characters", self.bridge),
            ));
        }
        self.ensure_docker_network(docker).await?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.ensure_firewall())
            .await
            .map_err(|e| SandboxError::new(ErrorCategory::Create, format!("firewall task: {e}")))?
    }

    async fn ensure_docker_network(&self, docker: &Docker) -> SandboxResult<()> {
        let existing = unless_answered(
            docker.inspect_network(&self.name, None).await,
            &[404],
            ErrorCategory::Create,
            "inspect network",
        )?;
        if let Some(net) = existing {
            let opts = net.options.unwrap_or_default();
            let ok = opts.get("com.docker.network.bridge.name") == Some(&self.bridge)
                && opts
                    .get("com.docker.network.bridge.enable_icc")
                    .map(String::as_str)
                    == Some("false");
            if ok {
                return Ok(());
            }
            return Err(SandboxError::new(
                ErrorCategory::PolicyViolation,
                format!(
                    "network {} exists but is not a CHORUS sandbox network (bridge {}, \
                     inter-container traffic off); remove it or pick another name",
                    self.name, self.bridge
                ),
            ));
        }
        let options: HashMap<String, String> = [
            ("com.docker.network.bridge.name", self.bridge.as_str()),
            ("com.docker.network.bridge.enable_icc", "false"),
            ("com.docker.network.bridge.enable_ip_masquerade", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let request = NetworkCreateRequest {
            name: self.name.clone(),
            driver: Some("bridge".into()),
            internal: Some(false),
            attachable: Some(false),
            enable_ipv6: Some(false),
            options: Some(options),
            labels: Some(HashMap::from([(
                "io.chorus.sandbox-network".to_string(),
                "1".to_string(),
            )])),
            ..Default::default()
        };
        // 409: someone else made it meanwhile.
        unless_answered(
            docker.create_network(request).await,
            &[409],
            ErrorCategory::Create,
            "create sandbox network",
        )?;
        Ok(())
    }

    fn ensure_firewall(&self) -> SandboxResult<()> {
        let chain = self.chain();
        // The chain must exist before a rule jumping to it can even be checked.
        let _ = iptables(&["-N", &chain]); // exists already: fine
        let jump = ["DOCKER-USER", "-i", &self.bridge, "-j", &chain];
        let to_host = ["INPUT", "-i", &self.bridge, "-j", "DROP"];
        let complete = BLOCKED_DESTINATIONS
            .iter()
            .map(|range| iptables_check(&[&chain, "-d", range, "-j", "DROP"]))
            .collect::<SandboxResult<Vec<bool>>>()?
            .into_iter()
            .all(|present| present);
        if !complete {
            iptables(&["-F", &chain])?;
            for range in BLOCKED_DESTINATIONS {
                iptables(&["-A", &chain, "-d", range, "-j", "DROP"])?;
            }
        }
        if !iptables_check(&jump)? {
            iptables(&["-I", "DOCKER-USER", "-i", &self.bridge, "-j", &chain])?;
        }
        if !iptables_check(&to_host)? {
            iptables(&["-I", "INPUT", "-i", &self.bridge, "-j", "DROP"])?;
        }
        Ok(())
    }

    /// Removes the firewall rules and the Docker network (for tests and uninstalling).
    pub async fn remove(&self, docker: &Docker) -> SandboxResult<()> {
        unless_answered(
            docker.remove_network(&self.name).await,
            &[404],
            ErrorCategory::NotFound,
            "remove sandbox network",
        )?;
        let chain = self.chain();
        let bridge = self.bridge.clone();
        tokio::task::spawn_blocking(move || {
            while iptables(&["-D", "DOCKER-USER", "-i", &bridge, "-j", &chain]).is_ok() {}
            while iptables(&["-D", "INPUT", "-i", &bridge, "-j", "DROP"]).is_ok() {}
            let _ = iptables(&["-F", &chain]);
            let _ = iptables(&["-X", &chain]);
        })
        .await
        .map_err(|e| SandboxError::new(ErrorCategory::Io, format!("firewall task: {e}")))
    }
}

/// Runs `iptables -w <args>` and returns its exit status and stderr; an error only when it
/// cannot run at all.
fn run_iptables(args: &[&str]) -> SandboxResult<(std::process::ExitStatus, String)> {
    let out = std::process::Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| {
            SandboxError::new(
                ErrorCategory::Unsupported,
                format!("cannot run iptables for the sandbox network's firewall: {e}"),
            )
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Ok((out.status, stderr))
}

/// Runs `iptables -w <args>`; an error when it cannot run or fails.
fn iptables(args: &[&str]) -> SandboxResult<()> {
    let (status, stderr) = run_iptables(args)?;
    if status.success() {
        Ok(())
    } else {
        Err(SandboxError::new(
            ErrorCategory::Unsupported,
            format!(
                "iptables {args:?} failed ({status}): {stderr}; the sandbox network needs root \
                 on the Docker host"
            ),
        ))
    }
}

/// Whether rule `spec` (chain first) exists. `iptables -C` exits 1 for "no such rule" and other
/// codes for real failures (no permission, no such chain).
fn iptables_check(spec: &[&str]) -> SandboxResult<bool> {
    let args: Vec<&str> = std::iter::once("-C").chain(spec.iter().copied()).collect();
    let (status, stderr) = run_iptables(&args)?;
    match status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(SandboxError::new(
            ErrorCategory::Unsupported,
            format!("iptables -C {spec:?} failed ({status}): {stderr}"),
        )),
    }
}
