//! The policy mapped to Docker's create request: labels, environment and main command
//! ([`container_config`]), and every security and resource rule ([`host_config`]). Pure
//! functions of the spec, the policy and the inputs resolved on the host at creation time.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions, MountType,
    ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};

use super::{
    LABEL_BOOT, LABEL_CREATED, LABEL_DEADLINE, LABEL_NODE, LABEL_OWNER, LABEL_PIDNS, LABEL_PREFIX,
    LABEL_SANDBOX, LABEL_STAGING, LABEL_TASK,
};
use crate::sandbox::owner::Owner;
use crate::sandbox::policy::{
    NetworkPolicy, ResourceLimits, SandboxPolicy, SeccompProfile, SUPERVISOR_USER,
};
use crate::sandbox::SandboxSpec;

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
    let env = environment(spec, policy);
    let supervised = supervised(spec, policy);
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: Some(main_command(spec, policy, inputs)),
        // The main process runs as its own user, out of the commands' reach (see
        // `SUPERVISOR_USER`); commands run as the policy's user through exec.
        user: Some(SUPERVISOR_USER.to_string()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(spec.workspace_path.clone()),
        labels: Some(labels(spec, inputs)),
        hostname: Some("sandbox".into()),
        tty: Some(false),
        // A supervised main process reads its ends from stdin, and the sandbox ends when the
        // node that holds stdin lets go (`end.rs`): open, and closed when that client goes.
        open_stdin: Some(supervised),
        stdin_once: Some(supervised),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        stop_timeout: Some(1),
        host_config: Some(host_config(spec, policy, inputs)),
        ..Default::default()
    }
}

/// The spec's own labels (prefixed) and the ones CHORUS reaps by.
fn labels(spec: &SandboxSpec, inputs: &ResolvedInputs) -> HashMap<String, String> {
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
        if let Some(ns) = owner.pid_ns_label() {
            labels.insert(LABEL_PIDNS.into(), ns);
        }
    }
    labels
}

/// The spec's environment, the policy's proxy settings, and a `HOME`.
fn environment(
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
) -> std::collections::BTreeMap<String, String> {
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
    env
}

/// Whether the sandbox's main process is the supervisor of `end.rs` (its end armed through
/// stdin): a sandbox for commands (no main command of its own) with an init, whose image has
/// the shell the exec wrapper needs too.
pub(super) fn supervised(spec: &SandboxSpec, policy: &SandboxPolicy) -> bool {
    spec.command.is_empty() && policy.init && policy.exec_wrapper
}

/// The main process: the spec's command, or the supervisor (else a sleep), ended at the
/// deadline.
fn main_command(
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
    inputs: &ResolvedInputs,
) -> Vec<String> {
    // The deadline is enforced inside: the main process ends then, and with it the container.
    let lifetime_s = inputs
        .deadline_unix_s
        .saturating_sub(inputs.created_unix_s)
        .max(1)
        .to_string();
    if supervised(spec, policy) {
        super::end::supervisor_command(&lifetime_s)
    } else if spec.command.is_empty() {
        vec!["sleep".to_string(), lifetime_s]
    } else {
        let mut cmd = vec!["timeout".into(), "-s".into(), "KILL".into(), lifetime_s];
        cmd.extend(spec.command.iter().cloned());
        cmd
    }
}

/// The security and resource part of the create request: every rule of the policy, mapped.
pub fn host_config(
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
    inputs: &ResolvedInputs,
) -> HostConfig {
    let limits = &policy.limits;
    let (tmpfs, mounts) = filesystems(spec, policy, &inputs.workspace);
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
        security_opt: Some(security_options(policy, inputs.seccomp_json.as_deref())),
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
        // Docker's default swap is "as much again as memory"; a sandbox gets none unless asked.
        memory_swap: limits.memory_swap_bytes.or(limits.memory_bytes),
        // Keep the kernel from swapping sandbox memory out even where swap exists.
        memory_swappiness: limits.memory_bytes.map(|_| 0),
        pids_limit: limits.pids,
        ulimits: Some(ulimits(limits)),
        storage_opt: limits
            .disk_bytes
            .map(|b| HashMap::from([("size".to_string(), b.to_string())])),
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
        ..network_settings(&policy.network, &inputs.network_name)
    }
}

/// `no-new-privileges`, seccomp, AppArmor and SELinux options.
fn security_options(policy: &SandboxPolicy, seccomp_json: Option<&str>) -> Vec<String> {
    let mut security_opt = Vec::new();
    if policy.no_new_privileges {
        security_opt.push("no-new-privileges:true".to_string());
    }
    match (&policy.seccomp, seccomp_json) {
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
    security_opt
}

/// The policy's tmpfs mounts plus the workspace: a sized tmpfs owned by the sandbox user, or a
/// non-recursive bind mount.
fn filesystems(
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
    workspace: &WorkspaceMount,
) -> (HashMap<String, String>, Vec<Mount>) {
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
    match workspace {
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
    (tmpfs, mounts)
}

/// The `nofile` and `nproc` limits, soft = hard.
fn ulimits(limits: &ResourceLimits) -> Vec<ResourcesUlimits> {
    [("nofile", limits.nofile), ("nproc", limits.nproc)]
        .into_iter()
        .filter_map(|(name, n)| {
            n.map(|n| ResourcesUlimits {
                name: Some(name.into()),
                soft: Some(n as i64),
                hard: Some(n as i64),
            })
        })
        .collect()
}

/// Network mode, IPv6 off, DNS and extra hosts: `none` unless the policy enables networking.
fn network_settings(net: &NetworkPolicy, network_name: &str) -> HostConfig {
    let network_mode = if net.enabled {
        network_name.to_string()
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
    let when_enabled = |v: &Vec<String>| (net.enabled && !v.is_empty()).then(|| v.clone());
    HostConfig {
        network_mode: Some(network_mode),
        sysctls,
        dns: when_enabled(&net.dns),
        dns_search: when_enabled(&net.dns_search),
        extra_hosts: (net.enabled && !net.extra_hosts.is_empty()).then(|| {
            net.extra_hosts
                .iter()
                .map(|(h, a)| format!("{h}:{a}"))
                .collect()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::policy::{TmpfsMount, DEFAULT_MASKED_PATHS};
    use crate::sandbox::RepoMount;

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
                    pid_ns: Some(4_026_531_836),
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

        // The main process runs as the supervisor user, ends at the deadline, and reads the
        // ends its node arms from stdin, which closes when the node goes.
        assert_eq!(c.user.as_deref(), Some(SUPERVISOR_USER));
        let cmd = c.cmd.unwrap();
        assert_eq!(cmd[..2], ["/bin/sh", "-c"]);
        assert_eq!(cmd[3..], ["chorus-main", "3600"]);
        assert_eq!((c.open_stdin, c.stdin_once), (Some(true), Some(true)));
        let labels = c.labels.unwrap();
        assert_eq!(labels[LABEL_NODE], "node-a");
        assert_eq!(labels[LABEL_TASK], "task-1");
        assert_eq!(labels[LABEL_CREATED], "42");
        assert_eq!(labels[LABEL_DEADLINE], "3642");
        assert_eq!(labels[LABEL_OWNER], "7.99");
        assert_eq!(labels[LABEL_BOOT], "boot-1");
        assert_eq!(labels[LABEL_PIDNS], "4026531836");
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
}
