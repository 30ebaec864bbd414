//! [`DockerProvider`]: connects to the Engine, creates sandboxes from a spec and a policy, and
//! reaps by label what dead owners left behind.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::query_parameters::{CreateContainerOptionsBuilder, ListContainersOptionsBuilder};
use bollard::Docker;

use super::cgroup::CgroupLayout;
use super::container::{force_remove, Container};
use super::host_config::{container_config, supervised, ResolvedInputs};
use super::sandbox::DockerSandbox;
use super::workspace::{stage_workspace, StagedWorkspace};
use super::{
    LABEL_BOOT, LABEL_DEADLINE, LABEL_NODE, LABEL_OWNER, LABEL_PIDNS, LABEL_SANDBOX, LABEL_STAGING,
};
use crate::sandbox::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::network::SandboxNetwork;
use crate::sandbox::owner::Owner;
use crate::sandbox::policy::{SandboxPolicy, SeccompProfile};
use crate::sandbox::repo::RepoRoots;
use crate::sandbox::{sanitize_name, unique_suffix, SandboxProvider, SandboxSpec};

/// Creates [`DockerSandbox`]es on a local Docker Engine.
#[derive(Debug, Clone)]
pub struct DockerProvider {
    docker: Docker,
    staging_root: PathBuf,
    repo_roots: RepoRoots,
    owner: Option<Owner>,
    network: SandboxNetwork,
    /// The Engine's cgroup layout (`docker info`), asked once: sandboxes read their OOM counter
    /// from the host with it. `None` inside when the Engine did not say.
    cgroup_layout: Arc<tokio::sync::OnceCell<Option<CgroupLayout>>>,
}

impl DockerProvider {
    /// Connects to the local daemon (`DOCKER_HOST` or `/var/run/docker.sock`), negotiating the
    /// API version down to what the daemon speaks, and checks it answers.
    pub async fn connect() -> SandboxResult<Self> {
        let docker = Docker::connect_with_local_defaults().map_err(|e| {
            SandboxError::from_bollard(ErrorCategory::DaemonUnavailable, "connect", e)
        })?;
        Self::from_docker(docker).await
    }

    /// Connects to the daemon at the Unix socket `path`.
    pub async fn connect_unix(path: &str) -> SandboxResult<Self> {
        let docker =
            Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION).map_err(|e| {
                SandboxError::from_bollard(ErrorCategory::DaemonUnavailable, "connect", e)
            })?;
        Self::from_docker(docker).await
    }

    async fn from_docker(docker: Docker) -> SandboxResult<Self> {
        let docker = docker.negotiate_version().await.map_err(|e| {
            SandboxError::from_bollard(ErrorCategory::DaemonUnavailable, "negotiate version", e)
        })?;
        docker
            .ping()
            .await
            .map_err(|e| SandboxError::from_bollard(ErrorCategory::DaemonUnavailable, "ping", e))?;
        Ok(DockerProvider {
            docker,
            staging_root: std::env::temp_dir().join("chorus-sandboxes"),
            repo_roots: RepoRoots::default(),
            owner: Owner::this_process(),
            network: SandboxNetwork::default(),
            cgroup_layout: Arc::default(),
        })
    }

    /// The same provider accepting repositories from inside `roots` only. Without roots (the
    /// default) no repository can be mounted.
    pub fn with_repo_roots(mut self, roots: RepoRoots) -> Self {
        self.repo_roots = roots;
        self
    }

    /// The same provider labelling its sandboxes as owned by `owner` (default: this process).
    /// `reap` spares sandboxes whose owner still runs.
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The same provider putting networked sandboxes on `network` instead of the default
    /// dedicated network.
    pub fn with_sandbox_network(mut self, network: SandboxNetwork) -> Self {
        self.network = network;
        self
    }

    /// The same provider staging workspaces under `root` (it must be visible to the daemon at
    /// the same path).
    pub fn with_staging_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.staging_root = root.into();
        self
    }

    /// The dedicated network networked sandboxes join.
    pub fn sandbox_network(&self) -> &SandboxNetwork {
        &self.network
    }

    /// The underlying client.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Where workspaces are staged.
    pub fn staging_root(&self) -> &Path {
        &self.staging_root
    }

    /// How the Engine lays out its containers' cgroups, as `docker info` says (asked once; a
    /// failed answer is asked again next time).
    pub async fn cgroup_layout(&self) -> Option<CgroupLayout> {
        let asked = self
            .cgroup_layout
            .get_or_try_init(|| async {
                let info = self.docker.info().await?;
                Ok::<_, bollard::errors::Error>(CgroupLayout::from_info(
                    info.cgroup_driver.map(|d| d.to_string()).as_deref(),
                    info.cgroup_version.map(|v| v.to_string()).as_deref(),
                ))
            })
            .await;
        match asked {
            Ok(layout) => *layout,
            Err(e) => {
                tracing::debug!(error = %e, "docker info did not answer; cgroup layout unknown");
                None
            }
        }
    }

    /// Removes the sandboxes matching `label_filter` that `may_go` (given their labels and the
    /// time) lets go: one list call (the Engine filters by label), then one removal each.
    async fn reap_matching(
        &self,
        label_filter: String,
        may_go: fn(&HashMap<String, String>, u64) -> bool,
    ) -> SandboxResult<usize> {
        let filters: HashMap<&str, Vec<String>> = [("label", vec![label_filter])].into();
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| {
                SandboxError::from_bollard(ErrorCategory::NotFound, "list containers", e)
            })?;
        let now_s = unix_now_s();
        let mut removed = 0;
        for c in containers {
            let Some(id) = c.id else { continue };
            let labels = c.labels.unwrap_or_default();
            if !may_go(&labels, now_s) {
                continue;
            }
            // 404, 409: gone already, or being removed by someone else.
            let done = unless_answered(
                self.docker
                    .remove_container(&id, Some(force_remove()))
                    .await,
                &[404, 409],
                ErrorCategory::NotFound,
                "remove container",
            )?;
            removed += usize::from(done.is_some());
            if let Some(dir) = labels.get(LABEL_STAGING) {
                remove_staging_dir(&self.staging_root, Path::new(dir));
            }
        }
        Ok(removed)
    }

    /// Everything `create` checks before it makes anything: the policy is valid, a disk limit
    /// can be enforced, the repository is inside the roots, and the sandbox network exists when
    /// needed. Returns the repository's confined path.
    async fn check_before_create(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
    ) -> SandboxResult<Option<PathBuf>> {
        policy.validate()?;
        if policy.limits.disk_bytes.is_some() {
            self.check_disk_limit_supported().await?;
        }
        // Checked before anything is made: a repository outside the roots, or reached through
        // a symlink or `..`, is never mounted.
        let repo_path = spec
            .workspace
            .as_ref()
            .map(|w| self.repo_roots.confine(&w.host_path))
            .transpose()?;
        if policy.network.enabled && policy.network.network_name.is_none() {
            self.network.ensure(&self.docker).await?;
        }
        Ok(repo_path)
    }

    /// Fails with [`ErrorCategory::Unsupported`] when the daemon's storage driver cannot enforce
    /// a writable-layer size.
    async fn check_disk_limit_supported(&self) -> SandboxResult<()> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| SandboxError::from_bollard(ErrorCategory::Create, "daemon info", e))?;
        let driver = info.driver.unwrap_or_default();
        // overlay2 only with xfs + pquota, which the daemon checks itself on create.
        const QUOTA_DRIVERS: &[&str] =
            &["overlay2", "btrfs", "zfs", "devicemapper", "windowsfilter"];
        if QUOTA_DRIVERS.contains(&driver.as_str()) {
            Ok(())
        } else {
            Err(SandboxError::new(
                ErrorCategory::Unsupported,
                format!(
                    "policy sets a disk limit, but storage driver {driver:?} cannot enforce a \
                     container size (storage-opt size needs overlay2 on xfs with pquota, btrfs, \
                     zfs or devicemapper); remove limits.disk_bytes or change the driver"
                ),
            ))
        }
    }

    /// The host-side inputs of the create request, resolved now.
    fn resolve_inputs(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
        staged: &StagedWorkspace,
        seccomp_json: Option<String>,
    ) -> ResolvedInputs {
        let created_unix_s = unix_now_s();
        ResolvedInputs {
            workspace: staged.mount.clone(),
            staging_dir: staged.staging_dir.clone(),
            seccomp_json,
            created_unix_s,
            deadline_unix_s: created_unix_s.saturating_add(spec.lifetime.as_secs().max(1)),
            owner: self.owner.clone(),
            network_name: policy
                .network
                .network_name
                .clone()
                .unwrap_or_else(|| self.network.name.clone()),
        }
    }

    /// Creates the container; returns its id. On failure the staging directory goes too.
    async fn create_container(
        &self,
        name: &str,
        config: bollard::models::ContainerCreateBody,
        staging_dir: Option<&Path>,
    ) -> SandboxResult<String> {
        let options = CreateContainerOptionsBuilder::new().name(name).build();
        match self.docker.create_container(Some(options), config).await {
            Ok(resp) => Ok(resp.id),
            Err(e) => {
                if let Some(dir) = staging_dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
                let mut err = SandboxError::from_bollard(ErrorCategory::Create, "create", e);
                if err.message.contains("storage-opt") || err.message.contains("quota") {
                    err.category = ErrorCategory::Unsupported;
                }
                Err(err)
            }
        }
    }
}

impl SandboxProvider for DockerProvider {
    type Sandbox = DockerSandbox;

    async fn create(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
    ) -> SandboxResult<DockerSandbox> {
        let repo_path = self.check_before_create(spec, policy).await?;
        let name = sanitize_name(&format!(
            "chorus-{}-{}-{}",
            spec.node_id,
            spec.task_id,
            unique_suffix()
        ));
        let seccomp_json = read_seccomp_profile(policy)?;
        let staged = stage_workspace(
            &self.staging_root,
            &name,
            spec.workspace.as_ref().zip(repo_path.as_deref()),
            policy,
        )?;
        let inputs = self.resolve_inputs(spec, policy, &staged, seccomp_json);
        let config = container_config(spec, policy, &inputs);
        let id = self
            .create_container(&name, config, staged.staging_dir.as_deref())
            .await?;
        tracing::debug!(name, id, "created sandbox container");
        let container = Container::new(
            self.docker.clone(),
            name,
            id,
            policy.clone(),
            spec.workspace_path.clone(),
            self.cgroup_layout().await,
            supervised(spec, policy),
        );
        Ok(DockerSandbox::new(container, staged))
    }

    async fn reap(&self, node_id: &str) -> SandboxResult<usize> {
        self.reap_matching(format!("{LABEL_NODE}={node_id}"), is_stale)
            .await
    }

    async fn reap_stale(&self) -> SandboxResult<usize> {
        self.reap_matching(format!("{LABEL_SANDBOX}=1"), is_stale)
            .await
    }

    async fn reap_all(&self, node_id: &str) -> SandboxResult<usize> {
        self.reap_matching(format!("{LABEL_NODE}={node_id}"), |_, _| true)
            .await
    }
}

/// The contents of the policy's custom seccomp profile, if it names one.
fn read_seccomp_profile(policy: &SandboxPolicy) -> SandboxResult<Option<String>> {
    match &policy.seccomp {
        SeccompProfile::File(path) => std::fs::read_to_string(path).map(Some).map_err(|e| {
            SandboxError::io(format!("reading seccomp profile {}", path.display()), e)
        }),
        _ => Ok(None),
    }
}

/// Whether a sandbox with these labels may be reaped at `now_s`: its deadline passed, or its
/// owner is gone (another boot, or no process with that pid and start time in the owner's pid
/// namespace, when that is this process's; see [`Owner::is_gone`]). A sandbox without owner
/// labels (made before they existed) counts as orphaned.
pub fn is_stale(labels: &HashMap<String, String>, now_s: u64) -> bool {
    let deadline_passed = labels
        .get(LABEL_DEADLINE)
        .and_then(|d| d.parse::<u64>().ok())
        .is_none_or(|d| d <= now_s);
    let owner_gone = match (labels.get(LABEL_OWNER), labels.get(LABEL_BOOT)) {
        (Some(owner), Some(boot)) => Owner::from_labels(owner, boot).is_none_or(|o| {
            o.with_pid_ns_label(labels.get(LABEL_PIDNS).map(String::as_str))
                .is_gone()
        }),
        _ => true,
    };
    deadline_passed || owner_gone
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Deletes a staging directory, but only inside `root` (the path comes from a label, which
/// anyone with daemon access could have set).
fn remove_staging_dir(root: &Path, dir: &Path) {
    if dir.starts_with(root) && dir != root && !dir.components().any(|c| c.as_os_str() == "..") {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove staging dir");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reap_judges_by_deadline_and_owner_liveness() {
        let me = Owner::this_process().unwrap();
        let labels = |deadline: u64, owner: &Owner| {
            let mut labels = HashMap::from([
                (LABEL_DEADLINE.to_string(), deadline.to_string()),
                (LABEL_OWNER.to_string(), owner.label()),
                (LABEL_BOOT.to_string(), owner.boot_id.clone()),
            ]);
            if let Some(ns) = owner.pid_ns_label() {
                labels.insert(LABEL_PIDNS.to_string(), ns);
            }
            labels
        };
        assert!(
            !is_stale(&labels(200, &me), 100),
            "live owner, deadline ahead"
        );
        assert!(is_stale(&labels(100, &me), 100), "deadline passed");
        let rebooted = Owner {
            boot_id: "another-boot".into(),
            ..me.clone()
        };
        assert!(
            is_stale(&labels(200, &rebooted), 100),
            "owner from another boot"
        );
        assert!(is_stale(&HashMap::new(), 100), "unlabelled: orphaned");
        // An owner that is gone as seen from here; in another pid namespace it cannot be
        // judged from here, so only its deadline counts.
        let gone = Owner {
            pid: u32::MAX,
            ..me.clone()
        };
        assert!(is_stale(&labels(200, &gone), 100));
        let elsewhere = Owner {
            pid_ns: me.pid_ns.map(|ns| ns + 1),
            ..gone
        };
        assert!(!is_stale(&labels(200, &elsewhere), 100));
        assert!(is_stale(&labels(100, &elsewhere), 100));
    }

    #[test]
    fn staging_dirs_are_only_removed_inside_the_root() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        remove_staging_dir(root.path(), outside.path());
        assert!(outside.path().exists());
        let inside = root.path().join("x");
        std::fs::create_dir(&inside).unwrap();
        remove_staging_dir(root.path(), &inside);
        assert!(!inside.exists());
    }
}
