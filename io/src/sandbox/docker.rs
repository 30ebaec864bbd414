//! The Docker implementation of the sandbox (bollard, Engine API ≥ 1.41): policy → container
//! configuration, exec with enforced timeouts, file transfer, stats, and reaping by label.
//!
//! Design notes (why it is built this way):
//! - **Files go through exec**, not the archive API: Docker refuses archive uploads into a
//!   read-only root filesystem and cannot see tmpfs mounts from the host side. Writing with
//!   `cat`/`tar` inside the sandbox works for every writable place and gives files the sandbox
//!   user's ownership. It needs `sh`, `cat`, `mkdir`, `chmod` and `tar` in the image (busybox has
//!   them).
//! - **Timeouts kill the process group inside the sandbox.** Docker cannot kill an exec. Each
//!   command runs as `sh -c 'echo $$; exec "$@"'`: Docker starts exec processes as session (and
//!   so process-group) leaders, the shell reports that pid on the first stdout line (stripped
//!   before the caller sees output), and on timeout a second exec runs `kill -9 -<pgid>` as the
//!   same user (root without `CAP_KILL` could not). If the command's output does not end within
//!   a grace period after that (a child escaped the group), the whole container is killed.
//! - **Filtered repository mounts are staged copies** (see [`stage_workspace`]).
//! - **OOM is detected from the cgroup's `oom_kill` counter** read inside the sandbox after a
//!   command dies by SIGKILL: Docker 20.10 sets `State.OOMKilled` only when the *main* process
//!   is killed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, ContainerStatsResponse, ExecConfig, HostConfig,
    HostConfigLogConfig, Mount, MountBindOptions, MountType, ResourcesUlimits, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StatsOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};
use super::network::SandboxNetwork;
use super::owner::Owner;
use super::policy::{SandboxPolicy, SeccompProfile, SUPERVISOR_USER};
use super::repo::{RepoRoots, SyncReport};
use super::{
    sanitize_name, unique_suffix, CappedBuffer, ExecOutput, ExecRequest, ExecutionSandbox,
    FileEntry, FileTree, OutputChunk, OutputStream, RepoMount, ResourceUsage, SandboxProvider,
    SandboxSpec, SandboxState,
};

/// The prefix of every label CHORUS puts on containers.
pub const LABEL_PREFIX: &str = "io.chorus.";
/// Label: the id of the node that owns the container.
pub const LABEL_NODE: &str = "io.chorus.node";
/// Label: the task the container runs.
pub const LABEL_TASK: &str = "io.chorus.task";
/// Label: creation time, seconds since the Unix epoch.
pub const LABEL_CREATED: &str = "io.chorus.created";
/// Label: marks a container as a CHORUS sandbox.
pub const LABEL_SANDBOX: &str = "io.chorus.sandbox";
/// Label: the host staging directory to delete with the container.
pub const LABEL_STAGING: &str = "io.chorus.staging";
/// Label: the owning process, `<pid>.<start ticks>` (see [`Owner`]).
pub const LABEL_OWNER: &str = "io.chorus.owner";
/// Label: the boot id of the owner's host.
pub const LABEL_BOOT: &str = "io.chorus.boot";
/// Label: the deadline, seconds since the Unix epoch; the main process ends then.
pub const LABEL_DEADLINE: &str = "io.chorus.deadline";
/// Environment variable marking every process of one exec (inherited by its children), so the
/// post-exec cleanup can tell them from a concurrent exec's.
pub const EXEC_ID_ENV: &str = "CHORUS_EXEC_ID";

/// How long a timed-out command gets to finish after its process group was killed before the
/// whole container is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Time limit for the sandbox's own helper commands (kill, OOM check).
const HELPER_TIMEOUT: Duration = Duration::from_secs(5);

/// Creates [`DockerSandbox`]es on a local Docker Engine.
#[derive(Debug, Clone)]
pub struct DockerProvider {
    docker: Docker,
    staging_root: PathBuf,
    repo_roots: RepoRoots,
    owner: Option<Owner>,
    network: SandboxNetwork,
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

    /// The dedicated network networked sandboxes join.
    pub fn sandbox_network(&self) -> &SandboxNetwork {
        &self.network
    }

    /// Removes the sandboxes of every node whose owner is gone or whose deadline passed (what
    /// `chorus sandbox reap` does); returns how many.
    pub async fn reap_stale(&self) -> SandboxResult<usize> {
        self.reap_matching(format!("{LABEL_SANDBOX}=1")).await
    }

    async fn reap_matching(&self, label_filter: String) -> SandboxResult<usize> {
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
            if !is_stale(&labels, now_s) {
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

    /// The same provider staging workspaces under `root` (it must be visible to the daemon at
    /// the same path).
    pub fn with_staging_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.staging_root = root.into();
        self
    }

    /// The underlying client.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Where workspaces are staged.
    pub fn staging_root(&self) -> &Path {
        &self.staging_root
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
}

impl SandboxProvider for DockerProvider {
    type Sandbox = DockerSandbox;

    async fn create(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
    ) -> SandboxResult<DockerSandbox> {
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
        let name = sanitize_name(&format!(
            "chorus-{}-{}-{}",
            spec.node_id,
            spec.task_id,
            unique_suffix()
        ));
        let seccomp_json = match &policy.seccomp {
            SeccompProfile::File(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                SandboxError::io(format!("reading seccomp profile {}", path.display()), e)
            })?),
            _ => None,
        };
        let staged = stage_workspace(
            &self.staging_root,
            &name,
            spec.workspace.as_ref().zip(repo_path.as_deref()),
            policy,
        )?;
        let created_unix_s = unix_now_s();
        let config = container_config(
            spec,
            policy,
            &ResolvedInputs {
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
            },
        );
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = self.docker.create_container(Some(options), config).await;
        let id = match created {
            Ok(resp) => resp.id,
            Err(e) => {
                if let Some(dir) = &staged.staging_dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
                let mut err = SandboxError::from_bollard(ErrorCategory::Create, "create", e);
                if err.message.contains("storage-opt") || err.message.contains("quota") {
                    err.category = ErrorCategory::Unsupported;
                }
                return Err(err);
            }
        };
        tracing::debug!(name, id, "created sandbox container");
        Ok(DockerSandbox {
            docker: self.docker.clone(),
            name,
            container_id: id,
            policy: policy.clone(),
            workspace_path: spec.workspace_path.clone(),
            env: Mutex::new(BTreeMap::new()),
            staging_dir: staged.staging_dir,
            copy_in: Mutex::new(staged.copy_in),
            sync: staged.sync,
            last_cpu: Mutex::new(None),
            oom_kills_seen: Mutex::new(0),
            exec_gate: tokio::sync::RwLock::new(()),
            exec_counter: std::sync::atomic::AtomicU64::new(0),
            removed: AtomicBool::new(false),
        })
    }

    async fn reap(&self, node_id: &str) -> SandboxResult<usize> {
        self.reap_matching(format!("{LABEL_NODE}={node_id}")).await
    }
}

/// Whether a sandbox with these labels may be reaped at `now_s`: its deadline passed, or its
/// owner is gone (another boot, or no process with that pid and start time). A sandbox without
/// owner labels (made before they existed) counts as orphaned.
pub fn is_stale(labels: &HashMap<String, String>, now_s: u64) -> bool {
    let deadline_passed = labels
        .get(LABEL_DEADLINE)
        .and_then(|d| d.parse::<u64>().ok())
        .is_none_or(|d| d <= now_s);
    let owner_alive = match (labels.get(LABEL_OWNER), labels.get(LABEL_BOOT)) {
        (Some(owner), Some(boot)) => Owner::from_labels(owner, boot).is_some_and(|o| o.is_alive()),
        _ => false,
    };
    deadline_passed || !owner_alive
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn force_remove() -> bollard::query_parameters::RemoveContainerOptions {
    RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build()
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

/// What appears at the workspace path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WorkspaceMount {
    /// A tmpfs of the policy's `workspace_size_bytes`, owned by the sandbox user: the default
    /// empty workspace, and a read-write repository's staged copy (copied in on start).
    #[default]
    Tmpfs,
    /// A host directory, bind-mounted non-recursively (mounts below it are not carried along).
    Bind {
        /// The host directory.
        source: PathBuf,
        /// Whether the mount is read-only.
        read_only: bool,
    },
}

/// Inputs to the container configuration that come from the host at creation time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedInputs {
    /// What appears at the workspace path.
    pub workspace: WorkspaceMount,
    /// The staging directory to delete with the container, when one was made.
    pub staging_dir: Option<PathBuf>,
    /// The contents of a custom seccomp profile.
    pub seccomp_json: Option<String>,
    /// Creation time for the `io.chorus.created` label.
    pub created_unix_s: u64,
    /// The sandbox's deadline (`io.chorus.deadline`); the main process ends then.
    pub deadline_unix_s: u64,
    /// The owning process, for the `io.chorus.owner` and `io.chorus.boot` labels.
    pub owner: Option<Owner>,
    /// The network to join when the policy enables networking.
    pub network_name: String,
}

/// The full create request for `spec` under `policy`.
pub fn container_config(
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
    inputs: &ResolvedInputs,
) -> ContainerCreateBody {
    let mut labels: HashMap<String, String> = spec
        .labels
        .iter()
        .map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), v.clone()))
        .collect();
    labels.insert(LABEL_NODE.into(), spec.node_id.clone());
    labels.insert(LABEL_TASK.into(), spec.task_id.clone());
    labels.insert(LABEL_CREATED.into(), inputs.created_unix_s.to_string());
    labels.insert(LABEL_SANDBOX.into(), "1".into());
    if let Some(dir) = &inputs.staging_dir {
        labels.insert(LABEL_STAGING.into(), dir.display().to_string());
    }
    labels.insert(LABEL_DEADLINE.into(), inputs.deadline_unix_s.to_string());
    if let Some(owner) = &inputs.owner {
        labels.insert(LABEL_OWNER.into(), owner.label());
        labels.insert(LABEL_BOOT.into(), owner.boot_id.clone());
    }

    let mut env = spec.base_env();
    for (k, v) in policy.network.proxy_env() {
        env.entry(k).or_insert(v);
    }
    // A non-root user has no writable home in a read-only root; point tools at scratch space.
    if !env.contains_key("HOME") {
        let home = policy
            .tmpfs
            .first()
            .map(|t| t.path.clone())
            .unwrap_or_else(|| spec.workspace_path.clone());
        env.insert("HOME".into(), home);
    }

    // The deadline is enforced inside: the main process ends then, and with it the container.
    let lifetime_s = inputs
        .deadline_unix_s
        .saturating_sub(inputs.created_unix_s)
        .max(1)
        .to_string();
    let cmd = if spec.command.is_empty() {
        vec!["sleep".to_string(), lifetime_s]
    } else {
        let mut cmd = vec!["timeout".into(), "-s".into(), "KILL".into(), lifetime_s];
        cmd.extend(spec.command.iter().cloned());
        cmd
    };

    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: Some(cmd),
        // The main process runs as its own user, out of the commands' reach (see
        // `SUPERVISOR_USER`); commands run as the policy's user through exec.
        user: Some(SUPERVISOR_USER.to_string()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(spec.workspace_path.clone()),
        labels: Some(labels),
        hostname: Some("sandbox".into()),
        tty: Some(false),
        open_stdin: Some(false),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        stop_timeout: Some(1),
        host_config: Some(host_config(spec, policy, inputs)),
        ..Default::default()
    }
}

/// The security and resource part of the create request: every rule of the policy, mapped.
pub fn host_config(
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
    inputs: &ResolvedInputs,
) -> HostConfig {
    let mut security_opt = Vec::new();
    if policy.no_new_privileges {
        security_opt.push("no-new-privileges:true".to_string());
    }
    match (&policy.seccomp, &inputs.seccomp_json) {
        (SeccompProfile::Default, _) => {} // Docker applies its default profile
        (SeccompProfile::Unconfined, _) => security_opt.push("seccomp=unconfined".into()),
        // The API takes the profile's JSON itself, not a path (the CLI reads the file).
        (SeccompProfile::File(_), Some(json)) => security_opt.push(format!("seccomp={json}")),
        (SeccompProfile::File(path), None) => {
            security_opt.push(format!("seccomp={}", path.display()))
        }
    }
    if let Some(profile) = &policy.apparmor_profile {
        security_opt.push(format!("apparmor={profile}"));
    }
    for label in &policy.selinux_labels {
        security_opt.push(format!("label={label}"));
    }

    let mut tmpfs: HashMap<String, String> = policy
        .tmpfs
        .iter()
        .map(|t| {
            // Docker mounts tmpfs `noexec` unless told `exec`.
            let exec = if t.noexec { "noexec" } else { "exec" };
            let opts = format!(
                "rw,nosuid,nodev,{exec},size={},mode={:o}",
                t.size_bytes, t.mode
            );
            (t.path.clone(), opts)
        })
        .collect();
    let mut mounts = Vec::new();
    match &inputs.workspace {
        WorkspaceMount::Tmpfs => {
            let owner = match policy.numeric_user() {
                Some((uid, gid)) => format!("mode=755,uid={uid},gid={gid}"),
                None => "mode=1777".into(),
            };
            tmpfs.insert(
                spec.workspace_path.clone(),
                format!(
                    "rw,nosuid,nodev,exec,size={},{owner}",
                    policy.workspace_size_bytes
                ),
            );
        }
        WorkspaceMount::Bind { source, read_only } => mounts.push(Mount {
            target: Some(spec.workspace_path.clone()),
            source: Some(source.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(*read_only),
            bind_options: Some(MountBindOptions {
                non_recursive: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }

    let limits = &policy.limits;
    let mut ulimits = Vec::new();
    if let Some(n) = limits.nofile {
        ulimits.push(ResourcesUlimits {
            name: Some("nofile".into()),
            soft: Some(n as i64),
            hard: Some(n as i64),
        });
    }
    if let Some(n) = limits.nproc {
        ulimits.push(ResourcesUlimits {
            name: Some("nproc".into()),
            soft: Some(n as i64),
            hard: Some(n as i64),
        });
    }
    // Docker's default swap is "as much again as memory"; a sandbox gets none unless asked.
    let memory_swap = limits.memory_swap_bytes.or(limits.memory_bytes);
    let storage_opt = limits
        .disk_bytes
        .map(|b| HashMap::from([("size".to_string(), b.to_string())]));

    let net = &policy.network;
    let network_mode = if net.enabled {
        inputs.network_name.clone()
    } else {
        "none".into()
    };
    // The dedicated network's firewall rules are IPv4 rules; IPv6 (link-local included) is
    // switched off instead.
    let sysctls = net.enabled.then(|| {
        HashMap::from([
            (
                "net.ipv6.conf.all.disable_ipv6".to_string(),
                "1".to_string(),
            ),
            (
                "net.ipv6.conf.default.disable_ipv6".to_string(),
                "1".to_string(),
            ),
        ])
    });
    let non_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());

    HostConfig {
        privileged: Some(false),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: Some(
            policy
                .capabilities_add
                .iter()
                .map(|c| c.trim_start_matches("CAP_").to_ascii_uppercase())
                .collect(),
        ),
        security_opt: Some(security_opt),
        masked_paths: Some(policy.masked_paths.clone()),
        readonly_paths: Some(policy.readonly_paths.clone()),
        readonly_rootfs: Some(policy.read_only_rootfs),
        // Private namespaces: never the host's.
        pid_mode: Some(String::new()),
        ipc_mode: Some("private".into()),
        uts_mode: Some(String::new()),
        userns_mode: Some(String::new()),
        tmpfs: Some(tmpfs),
        mounts: Some(mounts),
        nano_cpus: limits.nano_cpus,
        memory: limits.memory_bytes,
        memory_swap,
        // Keep the kernel from swapping sandbox memory out even where swap exists.
        memory_swappiness: limits.memory_bytes.map(|_| 0),
        pids_limit: limits.pids,
        ulimits: Some(ulimits),
        storage_opt,
        network_mode: Some(network_mode),
        sysctls,
        dns: net
            .enabled
            .then(|| net.dns.clone())
            .and_then(|d| non_empty(&d)),
        dns_search: net
            .enabled
            .then(|| net.dns_search.clone())
            .and_then(|d| non_empty(&d)),
        extra_hosts: (net.enabled && !net.extra_hosts.is_empty()).then(|| {
            net.extra_hosts
                .iter()
                .map(|(h, a)| format!("{h}:{a}"))
                .collect()
        }),
        init: Some(policy.init),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        auto_remove: Some(false),
        // The main process prints nothing; cap the log anyway so a chatty image cannot fill
        // the host's disk.
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), "1m".to_string()),
                ("max-file".to_string(), "1".to_string()),
            ])),
        }),
        ..Default::default()
    }
}

/// The result of [`stage_workspace`].
#[derive(Debug, Clone)]
pub struct StagedWorkspace {
    /// What appears at the workspace path.
    pub mount: WorkspaceMount,
    /// The host directory made for it, to delete with the sandbox (`None`: nothing on the host).
    pub staging_dir: Option<PathBuf>,
    /// A tar archive to unpack into the workspace when the sandbox starts (read-write
    /// repositories).
    pub copy_in: Option<Vec<u8>>,
    /// Where a read-write workspace is synced back to.
    pub sync: Option<SyncTarget>,
}

/// A read-write repository and the files copied from it, for the sync back.
#[derive(Debug, Clone)]
pub struct SyncTarget {
    /// The repository on the host.
    pub repo: PathBuf,
    /// The regular files copied in (a file among them that is gone is deleted on sync).
    pub copied_in: BTreeSet<PathBuf>,
}

/// Prepares what is mounted at the workspace path. `repo` is the mount and its path as already
/// confined by [`RepoRoots::confine`].
///
/// - No repository: a sized tmpfs owned by the sandbox user; nothing on the host's disk.
/// - A read-only repository without filters: the repository itself, bind-mounted read-only and
///   non-recursively.
/// - A read-only repository with include/exclude patterns: a **copy** of the files that pass
///   the filters, mounted read-only. Masking excluded files with empty mounts would still show
///   their names, need one mount per file, and miss files created later; a copy shows exactly
///   the filtered tree. Symlinks are copied as links, never followed.
/// - A read-write repository: a sized tmpfs, into which the (filtered) repository is copied
///   when the sandbox starts, without `.git/hooks`; [`DockerSandbox::sync_workspace`] (and
///   `remove`) carries the changes back. The sandbox never writes to a host directory, so its
///   writes are bounded by the tmpfs size and it cannot plant symlinks on the host.
pub fn stage_workspace(
    staging_root: &Path,
    name: &str,
    repo: Option<(&RepoMount, &Path)>,
    policy: &SandboxPolicy,
) -> SandboxResult<StagedWorkspace> {
    let tmpfs = StagedWorkspace {
        mount: WorkspaceMount::Tmpfs,
        staging_dir: None,
        copy_in: None,
        sync: None,
    };
    let Some((repo, repo_path)) = repo else {
        return Ok(tmpfs);
    };
    let include = build_globs(&repo.include)?;
    let exclude = build_globs(&repo.exclude)?;
    if !repo.read_only {
        let owner = repo
            .owner
            .or_else(|| policy.numeric_user())
            .unwrap_or((0, 0));
        let (archive, copied_in) =
            super::repo::pack_repo(repo_path, include.as_ref(), exclude.as_ref(), owner)?;
        return Ok(StagedWorkspace {
            copy_in: Some(archive),
            sync: Some(SyncTarget {
                repo: repo_path.to_path_buf(),
                copied_in,
            }),
            ..tmpfs
        });
    }
    if !repo.is_filtered() {
        if repo.owner.is_some() || repo.mode.is_some() {
            set_owner_and_mode(repo_path, repo.owner, repo.mode)?;
        }
        return Ok(StagedWorkspace {
            mount: WorkspaceMount::Bind {
                source: repo_path.to_path_buf(),
                read_only: true,
            },
            ..tmpfs
        });
    }
    let dir = staging_root.join(name);
    make_dir(&dir)?;
    let result = copy_filtered(
        repo_path,
        &dir,
        Path::new(""),
        &include,
        &exclude,
        repo.owner,
    )
    .and_then(|()| set_owner_and_mode(&dir, repo.owner, repo.mode.or(Some(0o755))));
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(StagedWorkspace {
        mount: WorkspaceMount::Bind {
            source: dir.clone(),
            read_only: true,
        },
        staging_dir: Some(dir),
        ..tmpfs
    })
}

fn make_dir(dir: &Path) -> SandboxResult<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| SandboxError::io(format!("creating staging dir {}", dir.display()), e))
}

fn build_globs(patterns: &[String]) -> SandboxResult<Option<globset::GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut builder = globset::GlobSetBuilder::new();
    for p in patterns {
        let glob = globset::Glob::new(p).map_err(|e| {
            SandboxError::new(
                ErrorCategory::PolicyViolation,
                format!("bad pattern {p:?}: {e}"),
            )
        })?;
        builder.add(glob);
    }
    builder.build().map(Some).map_err(|e| {
        SandboxError::new(ErrorCategory::PolicyViolation, format!("bad patterns: {e}"))
    })
}

fn copy_filtered(
    src_root: &Path,
    dst_root: &Path,
    rel: &Path,
    include: &Option<globset::GlobSet>,
    exclude: &Option<globset::GlobSet>,
    owner: Option<(u32, u32)>,
) -> SandboxResult<()> {
    let src_dir = src_root.join(rel);
    let entries = std::fs::read_dir(&src_dir)
        .map_err(|e| SandboxError::io(format!("reading {}", src_dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SandboxError::io("reading a directory entry", e))?;
        let rel_path = rel.join(entry.file_name());
        // An excluded directory hides its whole subtree; an excluded file just itself.
        if exclude.as_ref().is_some_and(|g| g.is_match(&rel_path)) {
            continue;
        }
        let src = entry.path();
        let dst = dst_root.join(&rel_path);
        let file_type = entry
            .file_type()
            .map_err(|e| SandboxError::io(format!("stat {}", src.display()), e))?;
        if file_type.is_dir() {
            std::fs::create_dir_all(&dst)
                .map_err(|e| SandboxError::io(format!("creating {}", dst.display()), e))?;
            copy_filtered(src_root, dst_root, &rel_path, include, exclude, owner)?;
            set_owner_and_mode(&dst, owner, None)?;
            continue;
        }
        if include.as_ref().is_some_and(|g| !g.is_match(&rel_path)) {
            continue;
        }
        if file_type.is_symlink() {
            let target = std::fs::read_link(&src)
                .map_err(|e| SandboxError::io(format!("readlink {}", src.display()), e))?;
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| SandboxError::io(format!("symlink {}", dst.display()), e))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::lchown(&dst, Some(uid), Some(gid))
                    .map_err(|e| SandboxError::io(format!("lchown {}", dst.display()), e))?;
            }
        } else if file_type.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| {
                SandboxError::io(format!("copying {} to {}", src.display(), dst.display()), e)
            })?;
            set_owner_and_mode(&dst, owner, None)?;
        }
        // Sockets, fifos and devices are never staged.
    }
    Ok(())
}

fn set_owner_and_mode(
    path: &Path,
    owner: Option<(u32, u32)>,
    mode: Option<u32>,
) -> SandboxResult<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some((uid, gid)) = owner {
        if let Err(e) = std::os::unix::fs::chown(path, Some(uid), Some(gid)) {
            // Not running as root: make a staged directory writable for everyone instead, so the
            // sandbox user can still use it (it is private to this sandbox anyway).
            if e.kind() == std::io::ErrorKind::PermissionDenied && path.is_dir() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
                    .map_err(|e| SandboxError::io(format!("chmod {}", path.display()), e))?;
                return Ok(());
            }
            return Err(SandboxError::io(format!("chown {}", path.display()), e));
        }
    }
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| SandboxError::io(format!("chmod {}", path.display()), e))?;
    }
    Ok(())
}

/// A CPU sample for the docker CLI's CPU-percent formula.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    total_ns: u64,
    system_ns: u64,
    online_cpus: u32,
}

/// A sandbox backed by a Docker container.
///
/// Dropping it does **not** remove the container (that would need an async call in `Drop`);
/// call [`remove`](ExecutionSandbox::remove), and [`SandboxProvider::reap`] after a crash.
#[derive(Debug)]
pub struct DockerSandbox {
    docker: Docker,
    name: String,
    container_id: String,
    policy: SandboxPolicy,
    workspace_path: String,
    env: Mutex<BTreeMap<String, String>>,
    staging_dir: Option<PathBuf>,
    /// The read-write repository's archive, unpacked into the workspace on the first start.
    copy_in: Mutex<Option<Vec<u8>>>,
    /// Where a read-write workspace syncs back to.
    sync: Option<SyncTarget>,
    last_cpu: Mutex<Option<CpuSample>>,
    oom_kills_seen: Mutex<u64>,
    /// Every exec holds it shared; the post-exec cleanup takes it exclusively to kill all of the
    /// commands' user's processes, and falls back to killing only its own exec's when another
    /// exec is in flight.
    exec_gate: tokio::sync::RwLock<()>,
    exec_counter: std::sync::atomic::AtomicU64,
    removed: AtomicBool,
}

/// The post-exec cleanup, run as the commands' user (so it can signal exactly their processes,
/// never the main process, which runs as [`SUPERVISOR_USER`]). `$1` is `all` or `marked`; with
/// `marked` only processes whose environment holds `$2` (`CHORUS_EXEC_ID=<n>`) are killed.
/// Repeats until a round finds nothing (a forking process may spawn between rounds; bounded).
/// Prints `killed N`, then the memory cgroup's OOM counter (v1 `memory.oom_control`, v2
/// `memory.events`).
const CLEANUP_SCRIPT: &str = r#"self=$$; n=0; round=0
while [ $round -lt 20 ]; do
  found=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] && continue
    [ "$p" = 1 ] && continue
    read -r st 2>/dev/null < "$d/stat" || continue
    case "$st" in *") Z "*|*") X "*) continue;; esac
    kill -0 "$p" 2>/dev/null || continue
    if [ "$1" = marked ]; then
      tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$2" || continue
    fi
    kill -9 "$p" 2>/dev/null && found=$((found+1))
  done
  [ $found -eq 0 ] && break
  n=$((n+found)); round=$((round+1))
done
echo "killed $n"
cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null
exit 0"#;

/// What the post-exec cleanup found.
#[derive(Debug, Clone, Copy, Default)]
struct Cleanup {
    killed: u32,
    new_oom_kills: u64,
}

/// How a command's output stream ended.
enum StreamEnd {
    Finished,
    TimedOut,
}

impl DockerSandbox {
    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    /// The host directory mounted at the workspace path, when one was staged for this sandbox.
    pub fn staging_dir(&self) -> Option<&Path> {
        self.staging_dir.as_deref()
    }

    /// The policy the sandbox was created with.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// Carries a read-write workspace's changes back to its repository (see
    /// [`super::repo::sync_back`] for what is and is not carried). Also done by `remove`.
    /// Errors with [`ErrorCategory::Unsupported`] for a sandbox without a read-write repository.
    pub async fn sync_workspace(&self) -> SandboxResult<SyncReport> {
        let Some(target) = &self.sync else {
            return Err(SandboxError::new(
                ErrorCategory::Unsupported,
                "this sandbox has no read-write repository to sync back",
            ));
        };
        let cap = usize::try_from(self.policy.workspace_size_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(1024 * 1024);
        let mut req = self.file_request(
            ["tar", "-c", "-f", "-", "-C", &self.workspace_path, "."]
                .map(String::from)
                .to_vec(),
        );
        req.output_limit_bytes = Some(cap);
        let out = self.file_command("reading the workspace back", req).await?;
        if out.stdout_truncated {
            return Err(SandboxError::new(
                ErrorCategory::Io,
                "the workspace archive is larger than the workspace size bound",
            ));
        }
        let tree = tar_to_tree(&out.stdout)
            .map_err(|e| SandboxError::io("parsing the workspace archive", e))?;
        let target = target.clone();
        tokio::task::spawn_blocking(move || {
            super::repo::sync_back(&target.repo, &tree, &target.copied_in)
        })
        .await
        .map_err(|e| SandboxError::new(ErrorCategory::Io, format!("sync task: {e}")))?
    }

    fn lock_env(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        // A poisoned lock only means a panic elsewhere while holding a plain map; the map is
        // still consistent.
        self.env.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one command. `clean_up`: afterwards kill what it left running and check the OOM
    /// counter (for callers' commands; the sandbox's own file commands skip it).
    async fn run(
        &self,
        request: ExecRequest,
        sink: Option<&mpsc::Sender<OutputChunk>>,
        clean_up: bool,
    ) -> SandboxResult<ExecOutput> {
        if request.argv.is_empty() {
            return Err(SandboxError::new(ErrorCategory::Exec, "empty command"));
        }
        let gate = self.exec_gate.read().await;
        let marker = format!(
            "{EXEC_ID_ENV}={}",
            self.exec_counter.fetch_add(1, Ordering::Relaxed)
        );
        let wrapped = self.policy.exec_wrapper;
        let mut cmd = Vec::with_capacity(request.argv.len() + 4);
        if wrapped {
            cmd.extend(["/bin/sh", "-c", "echo $$; exec \"$@\"", "chorus-exec"].map(String::from));
        }
        cmd.extend(request.argv.iter().cloned());
        let mut env = self.lock_env().clone();
        env.extend(request.env.clone());
        if let Some((k, v)) = marker.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
        let config = ExecConfig {
            attach_stdin: Some(request.stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            cmd: Some(cmd),
            user: self.policy.user.clone(),
            working_dir: Some(
                request
                    .working_dir
                    .clone()
                    .unwrap_or_else(|| self.workspace_path.clone()),
            ),
            ..Default::default()
        };
        let timeout = request.timeout.unwrap_or(self.policy.default_timeout);
        let cap = request
            .output_limit_bytes
            .unwrap_or(self.policy.output_limit_bytes);

        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let exec = self
            .docker
            .create_exec(&self.name, config)
            .await
            .map_err(|e| self.exec_error("create exec", e))?;
        let attached = self
            .docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| self.exec_error("start exec", e))?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = attached
        else {
            return Err(SandboxError::new(
                ErrorCategory::Exec,
                "daemon started the exec detached",
            ));
        };
        // Feed stdin from its own task so a command that writes before it reads cannot
        // deadlock against us; closing our write half closes the command's stdin.
        let stdin_task = request.stdin.map(|data| {
            tokio::spawn(async move {
                let _ = input.write_all(&data).await;
                let _ = input.shutdown().await;
            })
        });

        let mut stdout = CappedBuffer::new(cap);
        let mut stderr = CappedBuffer::new(cap);
        let mut pid_line: Option<Vec<u8>> = wrapped.then(Vec::new);
        let mut pgid: Option<u32> = None;
        let mut sink = sink;

        let handle = |item: LogOutput,
                      stdout: &mut CappedBuffer,
                      stderr: &mut CappedBuffer,
                      pid_line: &mut Option<Vec<u8>>,
                      pgid: &mut Option<u32>|
         -> Option<OutputChunk> {
            match item {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    let mut bytes: &[u8] = &message;
                    // The wrapper's first stdout line is its pid; hide it from the caller.
                    if let Some(line) = pid_line.as_mut() {
                        match bytes.iter().position(|b| *b == b'\n') {
                            Some(i) => {
                                line.extend_from_slice(&bytes[..i]);
                                *pgid = std::str::from_utf8(line)
                                    .ok()
                                    .and_then(|s| s.trim().parse().ok());
                                *pid_line = None;
                                bytes = &bytes[i + 1..];
                            }
                            None => {
                                // Bounded: a pid is a few digits.
                                if line.len() < 32 {
                                    line.extend_from_slice(bytes);
                                }
                                return None;
                            }
                        }
                    }
                    if bytes.is_empty() {
                        return None;
                    }
                    stdout.push(bytes);
                    Some(OutputChunk {
                        stream: OutputStream::Stdout,
                        data: bytes.to_vec(),
                    })
                }
                LogOutput::StdErr { message } => {
                    stderr.push(&message);
                    Some(OutputChunk {
                        stream: OutputStream::Stderr,
                        data: message.to_vec(),
                    })
                }
                LogOutput::StdIn { .. } => None,
            }
        };

        let end = loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Err(_) => break StreamEnd::TimedOut,
                Ok(None) => break StreamEnd::Finished,
                Ok(Some(Err(e))) => {
                    return Err(self.exec_error("reading exec output", e));
                }
                Ok(Some(Ok(item))) => {
                    if let Some(chunk) =
                        handle(item, &mut stdout, &mut stderr, &mut pid_line, &mut pgid)
                    {
                        if let Some(tx) = sink {
                            if tx.send(chunk).await.is_err() {
                                sink = None; // receiver gone; keep collecting
                            }
                        }
                    }
                }
            }
        };
        if let Some(task) = stdin_task {
            task.abort();
        }

        let timed_out = match end {
            StreamEnd::TimedOut => Some(self.kill_timed_out(pgid, &mut output).await),
            StreamEnd::Finished => None,
        };
        drop(gate);
        let cleanup = if clean_up {
            self.clean_up_after(&marker).await
        } else {
            Cleanup::default()
        };
        if let Some(how) = timed_out {
            return Err(SandboxError::new(
                ErrorCategory::Timeout,
                format!(
                    "command {:?} ran past its {timeout:?} timeout and was killed ({how}; {} \
                     stray process(es) killed after it); {} bytes of stdout, {} of stderr \
                     before that",
                    request.argv,
                    cleanup.killed,
                    stdout.data.len(),
                    stderr.data.len()
                ),
            ));
        }

        let exit_code = self.exec_exit_code(&exec.id).await?;
        let duration = started.elapsed();
        // Judged from the cgroup's counter whatever the exit code: a pipeline or a shell can
        // exit 0 after one of its processes was OOM-killed.
        let oom_kills = if clean_up {
            (cleanup.new_oom_kills > 0).then_some(cleanup.new_oom_kills)
        } else if exit_code == 137 {
            self.new_oom_kills().await
        } else {
            None
        };
        if let Some(kills) = oom_kills {
            return Err(SandboxError::new(
                ErrorCategory::ResourceLimit,
                format!(
                    "command {:?} (exit code {exit_code}) met the out-of-memory killer ({kills} \
                     new OOM kill(s); memory limit {:?} bytes)",
                    request.argv, self.policy.limits.memory_bytes
                ),
            ));
        }
        if exit_code == 137 {
            if let Ok(SandboxState::Exited {
                exit_code,
                oom_killed,
            }) = self.state().await
            {
                return Err(self.exited_error(exit_code, oom_killed));
            }
        }
        Ok(ExecOutput {
            exit_code,
            stdout: stdout.data,
            stderr: stderr.data,
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            duration,
            stray_processes_killed: cleanup.killed,
        })
    }

    fn exited_error(&self, exit_code: i64, oom_killed: bool) -> SandboxError {
        if oom_killed {
            SandboxError::new(
                ErrorCategory::ResourceLimit,
                format!(
                    "sandbox {} main process was OOM-killed (exit code {exit_code})",
                    self.name
                ),
            )
        } else {
            SandboxError::new(
                ErrorCategory::Exited,
                format!(
                    "sandbox {} main process exited with code {exit_code}",
                    self.name
                ),
            )
        }
    }

    fn exec_error(&self, op: &str, e: bollard::errors::Error) -> SandboxError {
        SandboxError::from_bollard(ErrorCategory::Exec, &format!("{op} in {}", self.name), e)
    }

    /// The exit code of a finished exec. The output stream can end a moment before the daemon
    /// records the exit, so poll briefly (bounded).
    async fn exec_exit_code(&self, exec_id: &str) -> SandboxResult<i64> {
        for attempt in 0..50u32 {
            let info = self
                .docker
                .inspect_exec(exec_id)
                .await
                .map_err(|e| self.exec_error("inspect exec", e))?;
            if info.running != Some(true) {
                if let Some(code) = info.exit_code {
                    return Ok(code);
                }
            }
            tokio::time::sleep(Duration::from_millis(2 * u64::from(attempt + 1))).await;
        }
        Err(SandboxError::new(
            ErrorCategory::Exec,
            format!("exec {exec_id} output ended but it never reported an exit code"),
        ))
    }

    /// Stops a timed-out command: its process group first, the whole container if that does
    /// not end it. Returns what was done, for the error message.
    async fn kill_timed_out(
        &self,
        pgid: Option<u32>,
        output: &mut (impl futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>>
                  + Unpin),
    ) -> &'static str {
        if let Some(pgid) = pgid.filter(|p| *p > 1) {
            let kill = self
                .helper(vec!["kill".into(), "-9".into(), format!("-{pgid}")])
                .await;
            if kill.is_ok() {
                // The stream ends once every process holding the output pipes is gone.
                let drained = tokio::time::timeout(KILL_GRACE, async {
                    while output.next().await.is_some() {}
                })
                .await;
                if drained.is_ok() {
                    return "process group killed";
                }
            }
        }
        tracing::warn!(sandbox = %self.name, "timed-out command survived a group kill; killing the sandbox");
        let _ = self
            .docker
            .kill_container(
                &self.name,
                Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build()),
            )
            .await;
        "sandbox killed: the process group could not be killed"
    }

    /// Runs a helper command (no wrapper, no stdin) and returns its stdout when it exits 0.
    async fn helper(&self, argv: Vec<String>) -> SandboxResult<Vec<u8>> {
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv.clone()),
            user: self.policy.user.clone(),
            ..Default::default()
        };
        let work = async {
            let exec = self
                .docker
                .create_exec(&self.name, config)
                .await
                .map_err(|e| self.exec_error("create helper exec", e))?;
            let started = self
                .docker
                .start_exec(&exec.id, None)
                .await
                .map_err(|e| self.exec_error("start helper exec", e))?;
            let mut out = CappedBuffer::new(64 * 1024);
            if let StartExecResults::Attached { mut output, .. } = started {
                while let Some(item) = output.next().await {
                    if let Ok(LogOutput::StdOut { message }) = item {
                        out.push(&message);
                    }
                }
            }
            let code = self.exec_exit_code(&exec.id).await?;
            if code == 0 {
                Ok(out.data)
            } else {
                Err(SandboxError::new(
                    ErrorCategory::Exec,
                    format!("helper {argv:?} exited with {code}"),
                ))
            }
        };
        tokio::time::timeout(HELPER_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(SandboxError::new(
                    ErrorCategory::Timeout,
                    "sandbox helper command timed out",
                ))
            })
    }

    /// Reads the memory cgroup's OOM-kill counter (v1 `memory.oom_control`, v2 `memory.events`)
    /// and returns how many kills happened since the last look, if any.
    async fn new_oom_kills(&self) -> Option<u64> {
        let out = self
            .helper(vec![
                "sh".into(),
                "-c".into(),
                "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null \
                 || cat /sys/fs/cgroup/memory.events"
                    .into(),
            ])
            .await
            .ok()?;
        let new = self.note_oom_count(&String::from_utf8_lossy(&out))?;
        (new > 0).then_some(new)
    }

    /// Records the `oom_kill` count found in `text`; returns how many are new since last time.
    fn note_oom_count(&self, text: &str) -> Option<u64> {
        let count: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())?;
        let mut seen = self
            .oom_kills_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let new = count.saturating_sub(*seen);
        *seen = count.max(*seen);
        Some(new)
    }

    /// After a command: kills every process it left (all of the commands' user's processes
    /// when no other exec is in flight, else those carrying its `marker`), and reads the OOM
    /// counter. A cleanup that cannot run (the sandbox died) finds nothing.
    async fn clean_up_after(&self, marker: &str) -> Cleanup {
        let exclusive = self.exec_gate.try_write();
        let mode = if exclusive.is_ok() { "all" } else { "marked" };
        let out = self
            .helper(
                ["sh", "-c", CLEANUP_SCRIPT, "chorus-cleanup", mode, marker]
                    .map(String::from)
                    .to_vec(),
            )
            .await;
        drop(exclusive);
        let Ok(out) = out else {
            return Cleanup::default();
        };
        let text = String::from_utf8_lossy(&out);
        let killed = text
            .lines()
            .find_map(|l| l.strip_prefix("killed "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if killed > 0 {
            tracing::debug!(sandbox = %self.name, killed, "killed processes a command left");
        }
        Cleanup {
            killed,
            new_oom_kills: self.note_oom_count(&text).unwrap_or(0),
        }
    }

    /// Runs an internal file command, turning failures into [`ErrorCategory::Io`].
    async fn file_command(&self, what: &str, request: ExecRequest) -> SandboxResult<ExecOutput> {
        let out = self.run(request, None, false).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(SandboxError::new(
                ErrorCategory::Io,
                format!(
                    "{what} failed (exit {}): {}",
                    out.exit_code,
                    out.stderr_text().trim()
                ),
            ))
        }
    }

    fn file_request(&self, argv: Vec<String>) -> ExecRequest {
        ExecRequest {
            argv,
            working_dir: Some("/".into()),
            timeout: Some(self.policy.default_timeout),
            output_limit_bytes: Some(self.policy.file_limit_bytes.saturating_add(1)),
            ..ExecRequest::default()
        }
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

fn check_path(path: &str) -> SandboxResult<()> {
    if path.starts_with('/') && !path.contains('\0') {
        Ok(())
    } else {
        Err(SandboxError::new(
            ErrorCategory::Io,
            format!("sandbox paths must be absolute: {path:?}"),
        ))
    }
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

impl ExecutionSandbox for DockerSandbox {
    fn id(&self) -> &str {
        &self.name
    }

    async fn start(&self) -> SandboxResult<()> {
        // 304: already running.
        unless_answered(
            self.docker.start_container(&self.name, None).await,
            &[304],
            ErrorCategory::Start,
            "start",
        )?;
        let copy_in = self
            .copy_in
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(archive) = copy_in {
            let mut req = self.file_request(
                ["tar", "-x", "-f", "-", "-C", &self.workspace_path]
                    .map(String::from)
                    .to_vec(),
            );
            req.stdin = Some(archive);
            self.file_command("copying the repository into the workspace", req)
                .await?;
        }
        Ok(())
    }

    async fn exec(&self, request: ExecRequest) -> SandboxResult<ExecOutput> {
        self.run(request, None, true).await
    }

    async fn exec_streaming(
        &self,
        request: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> SandboxResult<ExecOutput> {
        self.run(request, Some(&sink), true).await
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> SandboxResult<()> {
        check_path(path)?;
        let script = "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\" && chmod \"$2\" \"$1\"";
        let mut req = self.file_request(
            [
                "sh",
                "-c",
                script,
                "chorus-write",
                path,
                &format!("{mode:o}"),
            ]
            .map(String::from)
            .to_vec(),
        );
        req.stdin = Some(data.to_vec());
        self.file_command(&format!("writing {path}"), req).await?;
        Ok(())
    }

    async fn read_file(&self, path: &str) -> SandboxResult<Vec<u8>> {
        check_path(path)?;
        let req = self.file_request(vec!["cat".into(), "--".into(), path.into()]);
        let out = self.file_command(&format!("reading {path}"), req).await?;
        if out.stdout_truncated {
            return Err(SandboxError::new(
                ErrorCategory::Io,
                format!(
                    "{path} is larger than the policy's file limit of {} bytes",
                    self.policy.file_limit_bytes
                ),
            ));
        }
        Ok(out.stdout)
    }

    async fn write_tree(&self, dir: &str, tree: &FileTree) -> SandboxResult<()> {
        check_path(dir)?;
        let archive = tree_to_tar(tree).map_err(|e| SandboxError::io("building a tar", e))?;
        let script = "mkdir -p \"$1\" && tar -x -f - -C \"$1\"";
        let mut req = self.file_request(
            ["sh", "-c", script, "chorus-write-tree", dir]
                .map(String::from)
                .to_vec(),
        );
        req.stdin = Some(archive);
        self.file_command(&format!("writing tree {dir}"), req)
            .await?;
        Ok(())
    }

    async fn read_tree(&self, dir: &str) -> SandboxResult<FileTree> {
        check_path(dir)?;
        let req = self.file_request(
            ["tar", "-c", "-f", "-", "-C", dir, "."]
                .map(String::from)
                .to_vec(),
        );
        let out = self
            .file_command(&format!("reading tree {dir}"), req)
            .await?;
        if out.stdout_truncated {
            return Err(SandboxError::new(
                ErrorCategory::Io,
                format!(
                    "tree {dir} is larger than the policy's file limit of {} bytes",
                    self.policy.file_limit_bytes
                ),
            ));
        }
        tar_to_tree(&out.stdout).map_err(|e| SandboxError::io(format!("parsing tar of {dir}"), e))
    }

    fn set_env(&self, key: &str, value: &str) {
        self.lock_env().insert(key.to_string(), value.to_string());
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.lock_env().clone()
    }

    async fn usage(&self) -> SandboxResult<ResourceUsage> {
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
        let cpu_percent = match (base, current) {
            (Some(b), Some(c)) => cpu_percent(
                (b.total_ns, b.system_ns),
                (c.total_ns, c.system_ns),
                c.online_cpus,
            ),
            _ => 0.0,
        };
        let memory = stats.memory_stats.as_ref();
        let (rx, tx) = stats
            .networks
            .as_ref()
            .map(|nets| {
                nets.values().fold((0, 0), |(rx, tx), n| {
                    (rx + n.rx_bytes.unwrap_or(0), tx + n.tx_bytes.unwrap_or(0))
                })
            })
            .unwrap_or((0, 0));
        Ok(ResourceUsage {
            cpu_percent,
            memory_bytes: memory
                .map(|m| memory_in_use(m.usage.unwrap_or(0), m.stats.as_ref()))
                .unwrap_or(0),
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

    async fn state(&self) -> SandboxResult<SandboxState> {
        if self.removed.load(Ordering::Relaxed) {
            return Ok(SandboxState::Removed);
        }
        let Some(info) = unless_answered(
            self.docker.inspect_container(&self.name, None).await,
            &[404],
            ErrorCategory::NotFound,
            "inspect",
        )?
        else {
            return Ok(SandboxState::Removed);
        };
        let state = info.state.unwrap_or_default();
        Ok(match state.status {
            Some(ContainerStateStatusEnum::CREATED) => SandboxState::Created,
            Some(
                ContainerStateStatusEnum::RUNNING
                | ContainerStateStatusEnum::PAUSED
                | ContainerStateStatusEnum::RESTARTING,
            ) => SandboxState::Running,
            Some(ContainerStateStatusEnum::REMOVING) => SandboxState::Removed,
            _ => SandboxState::Exited {
                exit_code: state.exit_code.unwrap_or(-1),
                oom_killed: state.oom_killed.unwrap_or(false),
            },
        })
    }

    async fn stop(&self) -> SandboxResult<()> {
        let options = StopContainerOptionsBuilder::new().t(1).build();
        // 304: stopped already; 404: gone.
        unless_answered(
            self.docker.stop_container(&self.name, Some(options)).await,
            &[304, 404],
            ErrorCategory::Start,
            "stop",
        )?;
        Ok(())
    }

    async fn remove(&self) -> SandboxResult<()> {
        // A read-write workspace goes back to its repository first (while the tmpfs exists).
        let synced = match &self.sync {
            Some(_) if !self.removed.load(Ordering::Relaxed) => Some(self.sync_workspace().await),
            _ => None,
        };
        unless_answered(
            self.docker
                .remove_container(&self.name, Some(force_remove()))
                .await,
            &[404],
            ErrorCategory::NotFound,
            "remove",
        )?;
        if let Some(dir) = &self.staging_dir {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(SandboxError::io(
                        format!("removing staging dir {}", dir.display()),
                        e,
                    ));
                }
            }
        }
        self.removed.store(true, Ordering::Relaxed);
        if let Some(Err(e)) = synced {
            return Err(SandboxError::new(
                e.category,
                format!("the sandbox was removed, but its workspace was not synced back: {e}"),
            ));
        }
        Ok(())
    }
}

/// Packs a [`FileTree`] as a tar archive.
pub fn tree_to_tar(tree: &FileTree) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in tree {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() || rel.split('/').any(|c| c == "..") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad tree path {path:?}"),
            ));
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(entry.data.len() as u64);
        header.set_mode(entry.mode);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, rel, entry.data.as_slice())?;
    }
    tar.into_inner()
}

/// Unpacks the regular files of a tar archive into a [`FileTree`] (paths without `./`).
pub fn tar_to_tree(archive: &[u8]) -> std::io::Result<FileTree> {
    use std::io::Read;
    let mut tree = FileTree::new();
    let mut archive = tar::Archive::new(archive);
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path()?.display().to_string();
        let path = path.trim_start_matches("./").to_string();
        let mode = entry.header().mode()?;
        let mut data = Vec::new();
        entry.read_to_end(&mut data)?;
        tree.insert(path, FileEntry { data, mode });
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::policy::{NetworkPolicy, TmpfsMount, DEFAULT_MASKED_PATHS};

    fn config(policy: &SandboxPolicy) -> ContainerCreateBody {
        let spec = SandboxSpec::new("node-a", "task-1", "img:latest")
            .with_workspace(RepoMount::read_only("/repo"));
        container_config(
            &spec,
            policy,
            &ResolvedInputs {
                workspace: WorkspaceMount::Bind {
                    source: "/repo".into(),
                    read_only: true,
                },
                created_unix_s: 42,
                deadline_unix_s: 42 + 3600,
                owner: Some(Owner {
                    boot_id: "boot-1".into(),
                    pid: 7,
                    start_ticks: 99,
                }),
                network_name: "chorus-sandbox".into(),
                ..ResolvedInputs::default()
            },
        )
    }

    #[test]
    fn default_policy_maps_to_a_locked_down_host_config() {
        let c = config(&SandboxPolicy::default());
        let h = c.host_config.clone().unwrap();
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(h.cap_add, Some(vec![]));
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(
            h.security_opt,
            Some(vec!["no-new-privileges:true".to_string()])
        );
        assert_eq!(h.nano_cpus, Some(1_000_000_000));
        assert_eq!(h.memory, Some(512 * 1024 * 1024));
        assert_eq!(h.memory_swap, h.memory, "no swap by default");
        assert_eq!(h.pids_limit, Some(256));
        assert_eq!(h.ipc_mode.as_deref(), Some("private"));
        assert_eq!(h.pid_mode.as_deref(), Some(""));
        assert_eq!(h.init, Some(true));
        let ulimits = h.ulimits.unwrap();
        assert_eq!(ulimits[0].name.as_deref(), Some("nofile"));
        assert_eq!(ulimits[0].hard, Some(1024));
        for p in DEFAULT_MASKED_PATHS {
            assert!(h.masked_paths.as_ref().unwrap().iter().any(|m| m == p));
        }
        assert!(h.readonly_paths.unwrap().contains(&"/proc/sys".to_string()));
        let tmp = &h.tmpfs.unwrap()["/tmp"];
        assert!(
            tmp.contains("size=67108864") && tmp.contains("mode=1777"),
            "{tmp}"
        );
        assert!(tmp.contains(",exec,"), "policy says executable: {tmp}");
        let mount = &h.mounts.unwrap()[0];
        assert_eq!(mount.target.as_deref(), Some("/workspace"));
        assert_eq!(mount.read_only, Some(true));
        assert_eq!(mount.typ, Some(MountType::BIND));
        assert_eq!(
            mount.bind_options.as_ref().and_then(|b| b.non_recursive),
            Some(true),
            "mounts below the repository must not come along"
        );
        assert!(h.storage_opt.is_none());
        assert!(h.dns.is_none() && h.extra_hosts.is_none());

        // The main process runs as the supervisor user and sleeps until the deadline.
        assert_eq!(c.user.as_deref(), Some(SUPERVISOR_USER));
        assert_eq!(c.cmd, Some(vec!["sleep".to_string(), "3600".to_string()]));
        let labels = c.labels.unwrap();
        assert_eq!(labels[LABEL_NODE], "node-a");
        assert_eq!(labels[LABEL_TASK], "task-1");
        assert_eq!(labels[LABEL_CREATED], "42");
        assert_eq!(labels[LABEL_DEADLINE], "3642");
        assert_eq!(labels[LABEL_OWNER], "7.99");
        assert_eq!(labels[LABEL_BOOT], "boot-1");
        assert!(c.env.unwrap().contains(&"HOME=/tmp".to_string()));
    }

    #[test]
    fn policy_overrides_are_mapped() {
        let mut p = SandboxPolicy {
            capabilities_add: vec!["CAP_CHOWN".into()],
            seccomp: SeccompProfile::Unconfined,
            apparmor_profile: Some("chorus".into()),
            selinux_labels: vec!["type:container_t".into()],
            read_only_rootfs: false,
            tmpfs: vec![TmpfsMount {
                noexec: true,
                ..TmpfsMount::new("/scratch", 1024)
            }],
            network: NetworkPolicy {
                enabled: true,
                network_name: None,
                dns: vec!["192.0.2.53".into()],
                dns_search: vec!["corp.invalid".into()],
                extra_hosts: vec![("git.corp.invalid".into(), "192.0.2.10".into())],
                http_proxy: Some("http://proxy.invalid:3128".into()),
                https_proxy: None,
                no_proxy: None,
            },
            ..SandboxPolicy::default()
        };
        p.limits.nproc = Some(100);
        p.limits.disk_bytes = Some(1 << 30);
        p.limits.memory_swap_bytes = Some(1 << 30);
        let c = config(&p);
        let h = c.host_config.unwrap();
        assert_eq!(h.cap_add, Some(vec!["CHOWN".to_string()]));
        let sec = h.security_opt.unwrap();
        for want in [
            "seccomp=unconfined",
            "apparmor=chorus",
            "label=type:container_t",
        ] {
            assert!(sec.contains(&want.to_string()), "{sec:?}");
        }
        assert_eq!(h.readonly_rootfs, Some(false));
        assert!(h.tmpfs.unwrap()["/scratch"].contains(",noexec,"));
        assert_eq!(h.network_mode.as_deref(), Some("chorus-sandbox"));
        assert_eq!(
            h.sysctls
                .as_ref()
                .map(|s| s["net.ipv6.conf.all.disable_ipv6"].as_str()),
            Some("1")
        );
        assert_eq!(h.dns, Some(vec!["192.0.2.53".to_string()]));
        assert_eq!(h.dns_search, Some(vec!["corp.invalid".to_string()]));
        assert_eq!(
            h.extra_hosts,
            Some(vec!["git.corp.invalid:192.0.2.10".to_string()])
        );
        assert_eq!(h.ulimits.unwrap().len(), 2);
        assert_eq!(h.storage_opt.unwrap()["size"], (1u64 << 30).to_string());
        assert_eq!(h.memory_swap, Some(1 << 30));
        let env = c.env.unwrap();
        assert!(env.contains(&"HTTP_PROXY=http://proxy.invalid:3128".to_string()));
        assert!(env.contains(&"http_proxy=http://proxy.invalid:3128".to_string()));
        assert!(env.contains(&"HOME=/scratch".to_string()));
    }

    #[test]
    fn custom_seccomp_profile_is_sent_as_json() {
        let p = SandboxPolicy {
            seccomp: SeccompProfile::File("/etc/chorus/seccomp.json".into()),
            ..SandboxPolicy::default()
        };
        let spec = SandboxSpec::new("n", "t", "i");
        let h = host_config(
            &spec,
            &p,
            &ResolvedInputs {
                seccomp_json: Some("{\"defaultAction\":\"SCMP_ACT_ERRNO\"}".into()),
                ..ResolvedInputs::default()
            },
        );
        assert!(h
            .security_opt
            .unwrap()
            .contains(&"seccomp={\"defaultAction\":\"SCMP_ACT_ERRNO\"}".to_string()));
        // Without a repository the workspace is a sized tmpfs owned by the sandbox user.
        assert!(h.mounts.unwrap().is_empty());
        let ws = &h.tmpfs.unwrap()["/workspace"];
        assert!(
            ws.contains("size=268435456") && ws.contains("uid=65534"),
            "{ws}"
        );
    }

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

    #[test]
    fn trees_round_trip_through_tar() {
        let mut tree = FileTree::new();
        tree.insert(
            "a/b.txt".into(),
            FileEntry {
                data: b"hello".to_vec(),
                mode: 0o640,
            },
        );
        tree.insert(
            "c".into(),
            FileEntry {
                data: vec![0, 1, 2],
                mode: 0o755,
            },
        );
        let back = tar_to_tree(&tree_to_tar(&tree).unwrap()).unwrap();
        assert_eq!(back, tree);
        let mut bad = FileTree::new();
        bad.insert(
            "../escape".into(),
            FileEntry {
                data: vec![],
                mode: 0o644,
            },
        );
        assert!(tree_to_tar(&bad).is_err());
    }

    #[test]
    fn filtered_workspace_is_a_copy_without_excluded_files() {
        let repo = tempfile::tempdir().unwrap();
        let staging = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join("src")).unwrap();
        std::fs::create_dir_all(repo.path().join("secrets")).unwrap();
        std::fs::write(repo.path().join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(repo.path().join("secrets/key"), "k").unwrap();
        std::fs::write(repo.path().join(".env"), "TOKEN=1").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", repo.path().join("link")).unwrap();
        let mount = RepoMount::read_only(repo.path())
            .exclude("secrets")
            .exclude("**/.env");
        let repo_path = repo.path().canonicalize().unwrap();
        let staged = stage_workspace(
            staging.path(),
            "sb1",
            Some((&mount, &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        let dir = staged.staging_dir.unwrap();
        assert!(dir.join("src/main.rs").is_file());
        assert!(!dir.join("secrets").exists());
        assert!(!dir.join(".env").exists());
        // Links are copied as links, not followed.
        assert_eq!(
            std::fs::read_link(dir.join("link")).unwrap(),
            PathBuf::from("/etc/passwd")
        );

        let only_src = RepoMount::read_only(repo.path()).include("src/**");
        let staged = stage_workspace(
            staging.path(),
            "sb2",
            Some((&only_src, &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        let dir = staged.staging_dir.unwrap();
        assert!(dir.join("src/main.rs").is_file());
        assert!(!dir.join(".env").exists() && !dir.join("secrets/key").exists());

        // Unfiltered mounts use the repository itself.
        let direct = stage_workspace(
            staging.path(),
            "sb3",
            Some((&RepoMount::read_only(repo.path()), &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        assert!(direct.staging_dir.is_none());
        assert_eq!(
            direct.mount,
            WorkspaceMount::Bind {
                source: repo_path.clone(),
                read_only: true
            }
        );

        // A read-write repository is a copy for a tmpfs: nothing staged on the host.
        let rw = stage_workspace(
            staging.path(),
            "sb5",
            Some((&RepoMount::read_write(repo.path()), &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        assert_eq!(rw.mount, WorkspaceMount::Tmpfs);
        assert!(rw.staging_dir.is_none() && rw.copy_in.is_some());
        assert!(rw
            .sync
            .unwrap()
            .copied_in
            .contains(Path::new("src/main.rs")));

        let bad = RepoMount::read_only(repo.path()).exclude("[");
        let err = stage_workspace(
            staging.path(),
            "sb4",
            Some((&bad, &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap_err();
        assert_eq!(err.category, ErrorCategory::PolicyViolation);
    }

    #[test]
    fn reap_judges_by_deadline_and_owner_liveness() {
        let me = Owner::this_process().unwrap();
        let labels = |deadline: u64, owner: &Owner| {
            HashMap::from([
                (LABEL_DEADLINE.to_string(), deadline.to_string()),
                (LABEL_OWNER.to_string(), owner.label()),
                (LABEL_BOOT.to_string(), owner.boot_id.clone()),
            ])
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
    }

    #[test]
    fn a_custom_main_command_is_killed_at_the_deadline() {
        let mut spec = SandboxSpec::new("n", "t", "i");
        spec.command = vec!["sh".into(), "-c".into(), "exit 3".into()];
        let c = container_config(
            &spec,
            &SandboxPolicy::default(),
            &ResolvedInputs {
                created_unix_s: 10,
                deadline_unix_s: 70,
                ..ResolvedInputs::default()
            },
        );
        assert_eq!(
            c.cmd.unwrap(),
            ["timeout", "-s", "KILL", "60", "sh", "-c", "exit 3"].map(String::from)
        );
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
