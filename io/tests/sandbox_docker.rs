//! The Docker sandbox against the real Docker Engine on this machine. These tests fail (they do
//! not skip) when Docker is unreachable. Each test uses its own node id and removes its
//! containers, so they run in parallel.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_io::sandbox::docker::{
    DockerProvider, LABEL_BOOT, LABEL_CREATED, LABEL_DEADLINE, LABEL_NODE, LABEL_OWNER, LABEL_TASK,
};
use chorus_io::sandbox::image::ensure_sandbox_image;
use chorus_io::sandbox::owner::Owner;
use chorus_io::sandbox::policy::NetworkPolicy;
use chorus_io::sandbox::{
    ErrorCategory, ExecRequest, ExecutionSandbox, FileEntry, FileTree, GitIdentity, RepoMount,
    SandboxPolicy, SandboxProvider, SandboxSpec, SandboxState,
};
use common::{
    containers_of, provider, started, test_network, unique_node, Cleanup, NetworkCleanup,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Needs 200 MB at once; every memory test limits the sandbox to 32 MiB.
const HOG: [&str; 5] = ["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_a_command_with_output_exit_code_env_and_stdin() -> TestResult {
    let (_p, sb, _c) = started("exec", SandboxPolicy::default(), |spec| {
        spec.env.insert("FROM_SPEC".into(), "spec".into());
        spec.git_identity = Some(GitIdentity {
            name: "Ada Lovelace".into(),
            email: "ada@example.invalid".into(),
        });
    })
    .await;
    sb.set_env("FROM_SANDBOX", "sandbox");
    let out = sb
        .exec(
            ExecRequest::shell(
                "echo \"$FROM_SPEC $FROM_SANDBOX $FROM_REQUEST $GIT_AUTHOR_NAME\"; \
                 cat; echo oops >&2; pwd; exit 3",
            )
            .env("FROM_REQUEST", "request")
            .stdin("piped-in\n"),
        )
        .await?;
    assert_eq!(out.exit_code, 3);
    assert_eq!(
        out.stdout_text(),
        "spec sandbox request Ada Lovelace\npiped-in\n/workspace\n"
    );
    assert_eq!(out.stderr_text(), "oops\n");
    assert!(!out.stdout_truncated && !out.stderr_truncated);
    assert!(out.duration > Duration::ZERO);

    let out = sb
        .exec(ExecRequest::new(["id"]).working_dir("/tmp"))
        .await?;
    assert!(out.success());
    assert!(
        out.stdout_text().starts_with("uid=65534"),
        "{}",
        out.stdout_text()
    );

    // Output over the cap is cut and flagged, and the command still completes.
    let out = sb
        .exec(ExecRequest::shell("head -c 100000 /dev/zero; echo done >&2").output_limit(1000))
        .await?;
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.stdout_truncated);
    assert_eq!(out.stderr_text(), "done\n");

    // A missing program is an ordinary exit code (127), not an error.
    let out = sb.exec(ExecRequest::new(["no-such-program"])).await?;
    assert_eq!(out.exit_code, 127);
    sb.remove().await?;
    Ok(())
}

/// A live sandbox's command (`keep_processes`), as the live registry runs it.
fn live(request: ExecRequest) -> ExecRequest {
    let mut request = request;
    request.keep_processes = true;
    request
}

/// Issue 53: a live sandbox runs its commands through its `chorus-agent` (one exec for all of
/// them), and they behave as through the Engine: the environment in layers, stdin, exit codes,
/// the working directory (and a missing one said as such), output caps, a missing program as
/// 127, a timeout that kills the process group, a background process that stays; a command
/// that kills the agent fails, and the next one starts another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_sandboxs_commands_go_through_its_agent_as_through_the_engine() -> TestResult {
    let (_p, sb, _c) = started("agent", SandboxPolicy::default(), |spec| {
        spec.env.insert("FROM_SPEC".into(), "spec".into());
    })
    .await;
    sb.set_env("FROM_SANDBOX", "sandbox");
    let out = sb
        .exec(live(
            ExecRequest::shell(
                "echo \"$FROM_SPEC $FROM_SANDBOX $FROM_REQUEST\"; cat; echo oops >&2; pwd; \
                 cat /proc/$PPID/comm; exit 3",
            )
            .env("FROM_REQUEST", "request")
            .stdin("piped-in\n"),
        ))
        .await?;
    assert_eq!(out.exit_code, 3);
    assert_eq!(
        out.stdout_text(),
        "spec sandbox request\npiped-in\n/workspace\nchorus-agent\n",
        "the command's parent is the agent"
    );
    assert_eq!(out.stderr_text(), "oops\n");
    let id = sb
        .exec(live(ExecRequest::new(["id", "-u"]).working_dir("/tmp")))
        .await?;
    assert_eq!(id.stdout_text(), "65534\n");

    let out = sb
        .exec(live(
            ExecRequest::shell("head -c 100000 /dev/zero; echo done >&2").output_limit(1000),
        ))
        .await?;
    assert_eq!((out.stdout.len(), out.stdout_truncated), (1000, true));
    assert_eq!(out.stderr_text(), "done\n");

    let out = sb.exec(live(ExecRequest::new(["no-such-program"]))).await?;
    assert_eq!(out.exit_code, 127);
    assert!(out.stderr_text().contains("no-such-program"), "{out:?}");
    let err = sb
        .exec(live(ExecRequest::new(["true"]).working_dir("/no/such/dir")))
        .await
        .unwrap_err();
    assert!(err.message.contains("does not exist"), "{err}");

    // A timeout kills the command's process group; what it started in the background before
    // (a live sandbox keeps those) is not its group's.
    let out = sb
        .exec(live(ExecRequest::shell(
            "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo started",
        )))
        .await?;
    assert_eq!(out.stdout_text(), "started\n");
    let err = sb
        .exec(live(
            ExecRequest::shell("sleep 60 & sleep 61").timeout(Duration::from_secs(1)),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::Timeout, "{err}");
    assert!(err.message.contains("process group killed"), "{err}");
    let ps = sb
        .exec(live(ExecRequest::new(["ps", "-o", "args"])))
        .await?;
    let ps = ps.stdout_text();
    assert!(!ps.contains("sleep 60") && !ps.contains("sleep 61"), "{ps}");
    assert!(
        ps.contains("sleep 300"),
        "the background process stays: {ps}"
    );

    // With the agent up, the sandbox's own file commands go through it too: 1 MiB of every
    // byte value, written and read back whole.
    let data: Vec<u8> = (0..1024 * 1024).map(|i| (i * 7 % 256) as u8).collect();
    sb.write_file("/workspace/big.bin", &data, 0o600).await?;
    assert_eq!(sb.read_file("/workspace/big.bin").await?, data);
    let out = sb
        .exec(live(ExecRequest::shell("stat -c %a /workspace/big.bin")))
        .await?;
    assert_eq!(out.stdout_text(), "600\n");

    // A command that kills the agent fails as such; the next one runs in a new agent.
    let err = sb
        .exec(live(ExecRequest::shell("kill -9 $PPID; sleep 5")))
        .await
        .unwrap_err();
    assert!(err.message.contains("agent ended"), "{err}");
    let out = sb
        .exec(live(ExecRequest::shell("cat /proc/$PPID/comm")))
        .await?;
    assert_eq!(out.stdout_text(), "chorus-agent\n");
    sb.remove().await?;
    Ok(())
}

// Streaming is a contract test (`sandbox_contract.rs`: `streams_output_while_the_command_runs`),
// written so that an implementation buffering output until the end fails it.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_trees_round_trip() -> TestResult {
    let (_p, sb, _c) = started("files", SandboxPolicy::default(), |_| {}).await;
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    sb.write_file("/workspace/dir/data.bin", &binary, 0o640)
        .await?;
    assert_eq!(sb.read_file("/workspace/dir/data.bin").await?, binary);
    // tmpfs scratch space works too (the archive API could not do this).
    sb.write_file("/tmp/note.txt", b"scratch", 0o600).await?;
    assert_eq!(sb.read_file("/tmp/note.txt").await?, b"scratch");
    let out = sb
        .exec(ExecRequest::new([
            "stat",
            "-c",
            "%a %u",
            "/workspace/dir/data.bin",
        ]))
        .await?;
    assert_eq!(out.stdout_text().trim(), "640 65534");
    // A file written again takes the bits asked, whatever it had; a folder is never written
    // over (nor into: the path is the file's).
    sb.write_file("/workspace/dir/data.bin", b"again", 0o755)
        .await?;
    let out = sb
        .exec(ExecRequest::new([
            "stat",
            "-c",
            "%a %s",
            "/workspace/dir/data.bin",
        ]))
        .await?;
    assert_eq!(out.stdout_text().trim(), "755 5");
    assert!(sb.write_file("/workspace/dir", b"x", 0o644).await.is_err());
    let out = sb.exec(ExecRequest::new(["ls", "/workspace/dir"])).await?;
    assert_eq!(
        out.stdout_text().trim(),
        "data.bin",
        "nothing written into the folder"
    );

    let mut tree = FileTree::new();
    tree.insert(
        "src/main.rs".into(),
        FileEntry {
            data: b"fn main() {}\n".to_vec(),
            mode: 0o644,
        },
    );
    tree.insert(
        "run.sh".into(),
        FileEntry {
            data: b"#!/bin/sh\necho ran\n".to_vec(),
            mode: 0o755,
        },
    );
    sb.write_tree("/workspace/project", &tree).await?;
    assert_eq!(sb.read_tree("/workspace/project").await?, tree);
    let out = sb
        .exec(ExecRequest::new(["./run.sh"]).working_dir("/workspace/project"))
        .await?;
    assert_eq!(out.stdout_text(), "ran\n");

    let err = sb.read_file("/workspace/missing").await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Io);
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_filesystem_is_read_only_and_capabilities_are_gone() -> TestResult {
    let (_p, sb, _c) = started("lockdown", SandboxPolicy::default(), |_| {}).await;
    let out = sb.exec(ExecRequest::shell("echo x > /x")).await?;
    assert_ne!(out.exit_code, 0);
    assert!(
        out.stderr_text().contains("Read-only"),
        "{}",
        out.stderr_text()
    );
    let err = sb.write_file("/etc/evil", b"x", 0o644).await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Io);

    let status = sb.read_file("/proc/self/status").await?;
    let status = String::from_utf8_lossy(&status);
    for field in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("{field} missing"));
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
    assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");
    // Masked /proc paths are empty; /proc/sys is read-only.
    let out = sb
        .exec(ExecRequest::shell("cat /proc/kcore | wc -c"))
        .await?;
    assert_eq!(out.stdout_text().trim(), "0");
    let out = sb
        .exec(ExecRequest::shell("echo 1 > /proc/sys/kernel/domainname"))
        .await?;
    assert_ne!(out.exit_code, 0);
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_none_leaves_only_loopback() -> TestResult {
    let (_p, sb, _c) = started("netnone", SandboxPolicy::default(), |_| {}).await;
    let out = sb.exec(ExecRequest::new(["ls", "/sys/class/net"])).await?;
    assert_eq!(
        out.stdout_text().split_whitespace().collect::<Vec<_>>(),
        ["lo"]
    );
    let dev = String::from_utf8(sb.read_file("/proc/net/dev").await?)?;
    let ifaces: Vec<_> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"]);
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_network_gets_dns_hosts_and_proxy_settings() -> TestResult {
    // Only configuration is checked: nothing is sent over the network.
    let policy = SandboxPolicy {
        network: NetworkPolicy {
            enabled: true,
            network_name: None,
            dns: vec!["192.0.2.53".into()],
            dns_search: vec!["corp.invalid".into()],
            extra_hosts: vec![("git.corp.invalid".into(), "192.0.2.10".into())],
            http_proxy: Some("http://proxy.corp.invalid:3128".into()),
            https_proxy: Some("http://proxy.corp.invalid:3128".into()),
            no_proxy: Some("localhost".into()),
        },
        ..SandboxPolicy::default()
    };
    let (provider, image) = provider().await;
    let node = unique_node("netdns");
    let _c = Cleanup { node: node.clone() };
    let network = test_network("dns");
    let _n = NetworkCleanup(network.clone());
    let provider = provider.with_sandbox_network(network);
    let sb = provider
        .create(&SandboxSpec::new(&node, "netdns", image), &policy)
        .await?;
    sb.start().await?;
    // On a user-defined network the container asks Docker's embedded DNS (127.0.0.11), which
    // forwards to the configured servers; the configuration is on the container.
    let info = provider.docker().inspect_container(sb.id(), None).await?;
    let host = info.host_config.unwrap_or_default();
    assert_eq!(host.dns, Some(vec!["192.0.2.53".to_string()]));
    let resolv = String::from_utf8(sb.read_file("/etc/resolv.conf").await?)?;
    assert!(resolv.contains("corp.invalid"), "{resolv}");
    let hosts = String::from_utf8(sb.read_file("/etc/hosts").await?)?;
    assert!(hosts.contains("192.0.2.10\tgit.corp.invalid"), "{hosts}");
    let out = sb.exec(ExecRequest::new(["env"])).await?;
    let env = out.stdout_text();
    assert!(
        env.contains("HTTPS_PROXY=http://proxy.corp.invalid:3128"),
        "{env}"
    );
    assert!(env.contains("no_proxy=localhost"), "{env}");
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_command_and_leaves_nothing_running() -> TestResult {
    let (_p, sb, _c) = started("timeout", SandboxPolicy::default(), |_| {}).await;
    let begun = Instant::now();
    let err = sb
        .exec(ExecRequest::shell("sleep 60 & sleep 61").timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    let took = begun.elapsed();
    assert_eq!(err.category, ErrorCategory::Timeout, "{err}");
    assert!(!err.retryable);
    // A liveness bound only (the command must not run its 60 s); how fast the kill is, is
    // measured by the benchmark, not asserted on a loaded machine.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(err.message.contains("process group killed"), "{err}");
    // The sandbox itself survived, and no sleeper is left.
    assert_eq!(sb.state().await?, SandboxState::Running);
    let ps = sb.exec(ExecRequest::new(["ps", "-o", "pid,args"])).await?;
    let ps = ps.stdout_text();
    assert!(!ps.contains("sleep 60") && !ps.contains("sleep 61"), "{ps}");
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_is_held_by_the_pids_limit() -> TestResult {
    let mut policy = SandboxPolicy::default();
    policy.limits.pids = Some(64);
    let (_p, sb, _c) = started("forkbomb", policy, |_| {}).await;
    let sb = Arc::new(sb);
    let bomb = {
        let sb = Arc::clone(&sb);
        tokio::spawn(async move {
            // The classic bomb, with each copy also parking a sleeper so the pressure on the
            // limit lasts (a shell may exit when fork fails, so a bare bomb collapses fast).
            sb.exec(
                ExecRequest::shell("b() { sleep 5 & b | b & }; b; wait")
                    .timeout(Duration::from_secs(3)),
            )
            .await
        })
    };
    let mut peak = 0;
    let mut refused = 0u64;
    while !bomb.is_finished() {
        let usage = sb.usage().await?;
        peak = peak.max(usage.pids);
        // The pids controller counts every fork it refused. `docker exec` attaches rather
        // than forks, so this read works even while the cgroup is full.
        if let Ok(out) = sb
            .exec(ExecRequest::shell(
                "cat /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events 2>/dev/null",
            ))
            .await
        {
            let text = out.stdout_text();
            let max = text.split_whitespace().skip_while(|w| *w != "max").nth(1);
            refused = refused.max(max.and_then(|n| n.parse().ok()).unwrap_or(0));
        }
        // Forks stop at 64. Processes that `docker exec` moves into the cgroup (our timeout's
        // kill helper) are attached, not forked, and the kernel lets attaching exceed
        // pids.max (see the kernel's pids controller docs), hence the small allowance.
        assert!(usage.pids <= 64 + 6, "pids {} above the limit", usage.pids);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The limit held the bomb: the kernel refused forks. (Sampling the count alone can miss
    // the churn between deaths and new forks, so a near-limit sample counts too.)
    assert!(
        refused > 0 || peak >= 40,
        "the bomb never met the limit: no refused fork, peak {peak}"
    );
    // Either the bomb's group was killed at the timeout, or it collapsed on its own.
    match bomb.await? {
        Err(err) => assert_eq!(err.category, ErrorCategory::Timeout, "{err}"),
        Ok(out) => assert!(out.stderr_text().contains("fork"), "{}", out.stderr_text()),
    }
    // The host is fine: it can still start processes.
    assert!(std::process::Command::new("true").status()?.success());
    // Nothing of the bomb is left: either its processes were killed or the whole sandbox was.
    // Polled with a generous deadline: killed processes take a moment to be reaped.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sb.state().await? {
            SandboxState::Running => {
                let usage = sb.usage().await?;
                // The init, the supervisor, and its lifetime's sleeper (a shell and `sleep`).
                if usage.pids <= 4 {
                    break;
                }
                assert!(Instant::now() < deadline, "bomb survivors: {usage:?}");
            }
            SandboxState::Exited { .. } => break,
            other => panic!("unexpected state {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hog_is_reported_as_oom() -> TestResult {
    let mut policy = SandboxPolicy::default();
    policy.limits.memory_bytes = Some(32 * 1024 * 1024);
    let (_p, sb, _c) = started("oom", policy, |_| {}).await;
    // dd's 200 MB buffer is filled inside one read(): the kernel cannot make progress by
    // evicting and re-reading program text (which makes a slowly growing hog thrash for
    // seconds before the cgroup v1 OOM killer acts), so the OOM kill comes at once.
    let err = sb
        .exec(ExecRequest::new(HOG).timeout(Duration::from_secs(20)))
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::ResourceLimit, "{err}");
    assert!(err.message.contains("out-of-memory"), "{err}");
    // The sandbox survives a command's OOM, and an ordinary SIGKILL is not mistaken for one.
    let out = sb.exec(ExecRequest::shell("kill -9 $$")).await?;
    assert_eq!(out.exit_code, 137);
    sb.remove().await?;
    Ok(())
}

/// Issue 33: memory that stays full — a tmpfs file the OOM killer cannot free — leaves no room
/// for a check inside the sandbox (it is killed as it starts), so the OOM kill is read from the
/// host's cgroup counter. The command is a shell that exits 0 after its `dd` was killed: without
/// the counter it would read as a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_in_a_full_sandbox_is_read_from_the_host() -> TestResult {
    let mut policy = SandboxPolicy::default();
    policy.limits.memory_bytes = Some(32 * 1024 * 1024);
    let (_p, sb, _c) = started("oomfull", policy, |_| {}).await;
    let fill = "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>/dev/null; echo done";
    let err = sb
        .exec(ExecRequest::shell(fill).timeout(Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::ResourceLimit, "{err}");
    assert!(err.message.contains("host's cgroup counter"), "{err}");
    // The check the sandbox ran inside before cannot run now: the file still holds the memory.
    let inside = sb
        .exec(
            ExecRequest::shell("cat /sys/fs/cgroup/memory/memory.oom_control")
                .timeout(Duration::from_secs(30)),
        )
        .await;
    assert!(
        inside.as_ref().map_or(true, |o| o.exit_code != 0),
        "a check inside still ran: {inside:?}"
    );
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_process_death_and_oom_are_reported() -> TestResult {
    let mut policy = SandboxPolicy::default();
    policy.limits.memory_bytes = Some(32 * 1024 * 1024);
    let (_p, dying, _c) = started("maindies", policy.clone(), |spec| {
        spec.command = vec!["sh".into(), "-c".into(), "exit 3".into()];
    })
    .await;
    let (_p2, hog, _c2) = started("mainoom", policy, |spec| {
        spec.command = HOG.map(String::from).to_vec();
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut a, mut b) = (None, None);
    while Instant::now() < deadline && (a.is_none() || b.is_none()) {
        if let SandboxState::Exited {
            exit_code,
            oom_killed,
        } = dying.state().await?
        {
            a = Some((exit_code, oom_killed));
        }
        if let SandboxState::Exited {
            exit_code,
            oom_killed,
        } = hog.state().await?
        {
            b = Some((exit_code, oom_killed));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(a, Some((3, false)));
    let (_, oom) = b.expect("the hog's sandbox should have ended");
    assert!(oom, "Docker should flag the OOM kill");
    let err = dying.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Exited, "{err}");
    dying.remove().await?;
    hog.remove().await?;
    Ok(())
}

fn repo_fixture() -> std::io::Result<tempfile::TempDir> {
    let repo = tempfile::tempdir()?;
    // The sandbox user (65534) must be able to read the repository.
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755))?;
    std::fs::create_dir_all(repo.path().join("src"))?;
    std::fs::create_dir_all(repo.path().join("secrets"))?;
    std::fs::write(repo.path().join("src/lib.rs"), "pub fn f() {}\n")?;
    std::fs::write(repo.path().join("README.md"), "hello\n")?;
    std::fs::write(repo.path().join("secrets/key.pem"), "PRIVATE\n")?;
    std::fs::write(repo.path().join(".env"), "TOKEN=secret\n")?;
    Ok(repo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_repository_cannot_be_written() -> TestResult {
    let repo = repo_fixture()?;
    let mount = RepoMount::read_only(repo.path());
    let (_p, sb, _c) = started("repo-ro", SandboxPolicy::default(), |spec| {
        spec.workspace = Some(mount);
    })
    .await;
    let out = sb.exec(ExecRequest::new(["cat", "README.md"])).await?;
    assert_eq!(out.stdout_text(), "hello\n");
    let out = sb
        .exec(ExecRequest::shell(
            "echo changed > README.md; echo new > new.txt",
        ))
        .await?;
    assert_ne!(out.exit_code, 0);
    assert!(
        out.stderr_text().contains("Read-only"),
        "{}",
        out.stderr_text()
    );
    let err = sb
        .write_file("/workspace/x", b"x", 0o644)
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::Io);
    assert_eq!(
        std::fs::read_to_string(repo.path().join("README.md"))?,
        "hello\n"
    );
    assert!(!repo.path().join("new.txt").exists());
    sb.remove().await?;
    // A direct mount is the repository itself: removing the sandbox leaves it alone.
    assert!(repo.path().join("README.md").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_repository_is_writable_with_configured_owner() -> TestResult {
    let repo = repo_fixture()?;
    let mut mount = RepoMount::read_write(repo.path());
    mount.owner = Some((65534, 65534));
    let (_p, sb, _c) = started("repo-rw", SandboxPolicy::default(), |spec| {
        spec.workspace = Some(mount);
    })
    .await;
    let out = sb
        .exec(ExecRequest::shell(
            "echo made > made.txt && rm .env && echo changed > README.md",
        ))
        .await?;
    assert!(out.success(), "{}", out.stderr_text());
    // The sandbox works on a staged copy: the repository changes only when synced back.
    assert!(!repo.path().join("made.txt").exists());
    sb.remove().await?;
    assert_eq!(
        std::fs::read_to_string(repo.path().join("made.txt"))?,
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("README.md"))?,
        "changed\n"
    );
    assert!(
        !repo.path().join(".env").exists(),
        "a deletion is synced too"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_files_are_invisible() -> TestResult {
    let repo = repo_fixture()?;
    let mount = RepoMount::read_only(repo.path())
        .exclude("secrets")
        .exclude("**/.env");
    let (_p, sb, _c) = started("repo-filter", SandboxPolicy::default(), |spec| {
        spec.workspace = Some(mount);
    })
    .await;
    let out = sb.exec(ExecRequest::new(["find", "/workspace"])).await?;
    let listing = out.stdout_text();
    assert!(listing.contains("/workspace/src/lib.rs"), "{listing}");
    assert!(listing.contains("/workspace/README.md"), "{listing}");
    assert!(
        !listing.contains("secrets") && !listing.contains(".env"),
        "{listing}"
    );
    let out = sb
        .exec(ExecRequest::new(["cat", "/workspace/secrets/key.pem"]))
        .await?;
    assert_ne!(out.exit_code, 0);
    let staging = sb
        .staging_dir()
        .expect("filtered mounts are staged")
        .to_path_buf();
    sb.remove().await?;
    assert!(!staging.exists(), "staging dir left behind");
    Ok(())
}

/// Issue 36: a sandbox's last command skips the clean-up exec (the removal ends what it left)
/// and is judged and measured from the host's cgroup files instead — an OOM kill is still
/// found, the usage is still read — while any other command is cleaned up after as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_command_is_judged_and_measured_on_the_host_without_a_clean_up() -> TestResult {
    let mut policy = SandboxPolicy::default();
    policy.limits.memory_bytes = Some(32 * 1024 * 1024);
    let (_p, sb, _c) = started("lastcmd", policy, |_| {}).await;
    let leave = "sleep 300 & i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo left";
    // Not the last: what it left is killed after it.
    let out = sb.exec(ExecRequest::shell(leave)).await?;
    assert_eq!(out.stray_processes_killed, 1, "{out:?}");
    // The last: nothing is killed in place, so what it left still runs...
    let out = sb.exec(ExecRequest::shell(leave).last_in_sandbox()).await?;
    assert_eq!(
        (out.exit_code, out.stray_processes_killed),
        (0, 0),
        "{out:?}"
    );
    let ps = sb
        .exec(ExecRequest::shell("ps -o comm | grep -c '^sleep'"))
        .await?;
    assert_eq!(
        ps.stdout_text().trim(),
        "1",
        "the left sleep was not killed in place"
    );
    // ...its usage came from the host (the shell's loop took CPU time)...
    let totals = sb.totals().await?;
    assert!(
        totals.cpu_ns > 0 && totals.memory_peak_bytes > 0,
        "{totals:?}"
    );
    // ...and an OOM kill in a last command is found without the clean-up.
    let err = sb
        .exec(
            ExecRequest::new(HOG)
                .timeout(Duration::from_secs(20))
                .last_in_sandbox(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::ResourceLimit, "{err}");
    assert!(err.message.contains("host's cgroup counter"), "{err}");
    sb.remove().await?;
    Ok(())
}

/// A run that leaves everything it can behind: processes (one in its own session), files
/// (hidden, and under a directory it made unreadable) in every writable place, a workspace
/// with another mode, and an environment value; then `more`.
async fn leave_behind(sb: &impl ExecutionSandbox, more: &str) -> TestResult {
    let leave = format!(
        "sleep 300 & (setsid sleep 301 &) ; \
        for d in /tmp /workspace /dev/shm; do echo x > $d/f; echo y > $d/.hidden; \
        mkdir -p $d/sub/deeper; echo z > $d/sub/deeper/g; chmod 000 $d/sub; done; \
        {more}; chmod 700 /workspace; echo left"
    );
    let out = sb
        .exec(
            ExecRequest::shell(leave)
                .env("LEFT_BEHIND", "secret")
                .last_in_sandbox(),
        )
        .await?;
    assert_eq!(out.stdout_text().trim(), "left", "{out:?}");
    Ok(())
}

/// Issue 36: a sandbox reset for another run of its submitter keeps nothing of the run before:
/// no process of the commands' user, no file in any place it could write (hidden ones, ones
/// in a directory it made unreadable), the workspace's mode given back; a second arming
/// replaces the first (the earlier watchdog no longer ends the sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_leaves_no_process_file_or_watchdog_of_the_run_before() -> TestResult {
    let (_p, sb, _c) = started("reset", SandboxPolicy::default(), |_| {}).await;
    sb.end_after(Duration::from_secs(3)).await?;
    leave_behind(&sb, "true").await?;
    sb.reset().await?;
    // Nor an environment: each command gets its own.
    let env = sb
        .exec(ExecRequest::shell("env | grep -c LEFT_BEHIND"))
        .await?;
    assert_eq!(env.stdout_text().trim(), "0", "{env:?}");
    // The watchdog armed first would end the sandbox 3 s in; the next arming replaces it.
    sb.end_after(Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        sb.state().await?,
        SandboxState::Running,
        "the first watchdog fired"
    );
    let look = "ps -A -o user,comm | grep -v -e '^USER' -e ' ps$' -e ' sh$' -e ' grep$' | \
        grep -c sleep; ls -A /tmp /workspace /dev/shm | grep -v ':$' | grep -c . ; stat -c %a /workspace";
    let out = sb.exec(ExecRequest::shell(look)).await?;
    let text = out.stdout_text();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    // Only the watchdog's and the main process's sleeps (the supervisor's) are left.
    let sleeps: usize = lines[0].parse()?;
    assert!(sleeps <= 3, "{lines:?}");
    let ps = sb.exec(ExecRequest::shell("ps -A -o user,args")).await?;
    assert!(
        !ps.stdout_text().contains("sleep 300") && !ps.stdout_text().contains("sleep 301"),
        "{}",
        ps.stdout_text()
    );
    assert_eq!(&lines[1..], &["0", "755"], "{lines:?}");
    sb.remove().await?;
    Ok(())
}

/// A sandbox whose root filesystem is writable cannot be vouched for, so is never reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_with_a_writable_root_is_not_reset() -> TestResult {
    let policy = SandboxPolicy {
        read_only_rootfs: false,
        ..SandboxPolicy::default()
    };
    let (_p, sb, _c) = started("noreset", policy, |_| {}).await;
    let err = sb.reset().await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Unsupported, "{err}");
    assert!(!sb.resets_in_exec());
    // Asked to run after a reset anyway: refused as not clean (retryable elsewhere), and
    // nothing of the command ran.
    let err = sb
        .exec(ExecRequest::shell("echo ran > /workspace/ran").after_reset())
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::NotClean, "{err}");
    assert!(err.retryable);
    let out = sb.exec(ExecRequest::shell("ls -A /workspace")).await?;
    assert_eq!(out.stdout_text(), "", "{out:?}");
    sb.remove().await?;
    Ok(())
}

/// IPC objects outlive the processes that made them, so a run can leave one for the next run
/// in its sandbox: the reset cannot remove them as the commands' user's, so it refuses the
/// sandbox — a System V shared memory segment, a POSIX message queue — and nothing of the next
/// command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipc_objects_a_run_left_make_its_sandbox_not_clean() -> TestResult {
    for (what, make, said) in [
        (
            "sysv",
            "ipcmk -M 4096 && ipcs -m | grep -c 0x",
            "System V IPC objects are left (/proc/sysvipc/shm)",
        ),
        (
            "mqueue",
            "touch /dev/mqueue/chorus-left && ls /dev/mqueue | grep -c .",
            "POSIX message queues are left",
        ),
    ] {
        let (_p, sb, _c) = started(&format!("ipc{what}"), SandboxPolicy::default(), |_| {}).await;
        let made = sb.exec(ExecRequest::shell(make)).await?;
        assert_eq!(made.exit_code, 0, "{what}: {made:?}");
        assert_eq!(
            made.stdout_text().lines().last(),
            Some("1"),
            "{what}: {made:?}"
        );
        let err = sb
            .exec(ExecRequest::shell("echo ran > /workspace/ran").after_reset())
            .await
            .unwrap_err();
        assert_eq!(err.category, ErrorCategory::NotClean, "{what}: {err}");
        assert!(err.message.contains(said), "{what}: {err}");
        let out = sb.exec(ExecRequest::shell("ls -A /workspace")).await?;
        assert_eq!(out.stdout_text(), "", "{what}: {out:?}");
        // The standalone reset refuses it the same way.
        let err = sb.reset().await.unwrap_err();
        assert_eq!(err.category, ErrorCategory::NotClean, "{what}: {err}");
        sb.remove().await?;
    }
    Ok(())
}

/// Issue 36: a kept sandbox's reset goes in the next command's own exec. The command, its
/// environment (quotes, newlines, a secret) and its working directory reach the sandbox only on
/// stdin after the reset vouched for it — the exec's own argv and environment hold none of
/// them — and it finds nothing of the run before: no process, no file, no mode, no environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_after_a_reset_in_its_own_exec_finds_nothing_of_the_run_before() -> TestResult {
    let (_p, sb, _c) = started("resetexec", SandboxPolicy::default(), |_| {}).await;
    assert!(sb.resets_in_exec());
    sb.end_after(Duration::from_secs(60)).await?;
    leave_behind(&sb, "mkdir -p /tmp/wd").await?;
    // What the next command sees, and what the exec that carries it holds.
    let look = r#"me=$(id -u); n=0
        for d in /proc/[0-9]*; do
          [ "$(stat -c %u $d 2>/dev/null)" = "$me" ] || continue
          grep -q 'sleep 30[01]' $d/cmdline 2>/dev/null && n=$((n+1))
        done
        echo "sleepers $n"
        echo "files $(ls -A /tmp /workspace /dev/shm | grep -v ':$' | grep -c .)"
        echo "mode $(stat -c %a /workspace)"
        echo "left $(env | grep -c LEFT_BEHIND)"
        echo "pwd $(pwd)"
        printf 'value <%s>
' "$ODD"
        echo "args $# <$1> <$2>"
        tr '\0' ' ' < /proc/$$/environ | grep -c TOKEN_VALUE_9 || true"#;
    let odd = "it's \"quoted\" $HOME `x`\nsecond line";
    let req = ExecRequest::new(["sh", "-c", look, "look", "one arg", "-x"])
        .env("ODD", odd)
        .env("SECRET", "TOKEN_VALUE_9")
        .working_dir("/workspace")
        .after_reset();
    let out = sb.exec(req).await?;
    assert!(out.success(), "{out:?}");
    let text = out.stdout_text();
    for line in [
        "sleepers 0",
        "files 0",
        "mode 755",
        "left 0",
        "pwd /workspace",
        "value <it's \"quoted\" $HOME `x`\nsecond line>",
        "args 2 <one arg> <-x>",
    ] {
        assert!(text.contains(line), "{line:?} in {text:?}");
    }
    // The command's own environment holds the secret (it was exported for it; the exec the
    // Engine made holds none of the request, as exec.rs's unit test shows).
    assert_eq!(text.lines().last(), Some("1"), "{text:?}");
    // A working directory the reset removed is missing, as in a fresh sandbox.
    let err = sb
        .exec(
            ExecRequest::new(["true"])
                .working_dir("/tmp/wd")
                .after_reset(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.message, "workdir /tmp/wd does not exist in the sandbox",
        "{err}"
    );
    // An environment name the shell cannot export takes a reset of its own first: same result.
    sb.exec(ExecRequest::shell("echo x > /tmp/f")).await?;
    let out = sb
        .exec(
            ExecRequest::shell("ls -A /tmp | grep -c . ; echo \"$X\"")
                .env("NOT-A-NAME", "1")
                .env("X", "y")
                .after_reset(),
        )
        .await?;
    assert_eq!(out.stdout_text(), "0\ny\n", "{out:?}");
    sb.remove().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_reported_under_load() -> TestResult {
    let (_p, sb, _c) = started("usage", SandboxPolicy::default(), |_| {}).await;
    let sb = Arc::new(sb);
    let load = {
        let sb = Arc::clone(&sb);
        tokio::spawn(async move {
            sb.exec(
                ExecRequest::shell("head -c 20000000 /dev/zero > /tmp/fill; while :; do :; done")
                    .timeout(Duration::from_secs(8)),
            )
            .await
        })
    };
    // Polled until the load shows (or a generous deadline passes), instead of a fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    while seen < 2 {
        let usage = sb.usage().await?;
        assert_eq!(usage.memory_limit_bytes, 512 * 1024 * 1024);
        // The 20 MB file lives in tmpfs, which counts as memory.
        if usage.cpu_percent > 5.0 && usage.memory_bytes > 10_000_000 && usage.pids >= 2 {
            seen += 1;
        } else {
            assert!(Instant::now() < deadline, "load never showed: {usage:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = load.await?.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Timeout);
    sb.remove().await?;
    Ok(())
}

/// Case 3 of issue 16: sandboxes carry owner, boot id and deadline labels; `reap` removes those
/// whose owner died (here a real process, killed with SIGKILL as a crash would) and spares those
/// of a live owner, even under the same node id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_removes_what_a_dead_owner_left_and_spares_live_owners() -> TestResult {
    let (provider, image) = provider().await;
    let node = unique_node("reap");
    let _c = Cleanup { node: node.clone() };
    // The "crashing" owner: a child process standing in for a `chorus` that gets kill -9.
    let mut owner_proc = std::process::Command::new("sleep").arg("300").spawn()?;
    let owner = Owner::of_process(owner_proc.id()).expect("the child runs");
    let doomed = provider.clone().with_owner(owner.clone());
    let policy = SandboxPolicy::default();
    let mut ids = Vec::new();
    for i in 0..3 {
        let sb = doomed
            .create(&SandboxSpec::new(&node, format!("t{i}"), &image), &policy)
            .await?;
        if i == 0 {
            sb.start().await?;
            let info = provider.docker().inspect_container(sb.id(), None).await?;
            let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
            assert_eq!(labels[LABEL_NODE], node);
            assert_eq!(labels[LABEL_TASK], "t0");
            assert!(labels[LABEL_CREATED].parse::<u64>()? > 1_600_000_000);
            assert_eq!(labels[LABEL_OWNER], owner.label());
            assert_eq!(labels[LABEL_BOOT], owner.boot_id);
            assert!(labels[LABEL_DEADLINE].parse::<u64>()? > labels[LABEL_CREATED].parse()?);
        }
        ids.push(sb.id().to_string());
        // Dropped without stop or remove, as a crash would.
    }
    // This process's own sandbox, same node id, live owner.
    let survivor = provider
        .create(&SandboxSpec::new(&node, "keep", &image), &policy)
        .await?;
    assert_eq!(containers_of(&node), 4);
    assert_eq!(provider.reap(&node).await?, 0, "every owner is alive");
    // The host-wide reap spares them too. It may find others' stale sandboxes (tests beside this
    // one, other nodes on the host), so what counts is that these four are still there.
    provider.reap_stale().await?;
    assert_eq!(containers_of(&node), 4, "not even across nodes");

    owner_proc.kill()?;
    owner_proc.wait()?;
    // At most 3: any node on this host reaps stale sandboxes every period and may come first.
    assert!(provider.reap(&node).await? <= 3);
    assert_eq!(containers_of(&node), 1);
    assert!(ids.iter().all(|id| !common::container_exists(id)));
    survivor.remove().await?;
    assert_eq!(provider.reap(&node).await?, 0);
    Ok(())
}

/// Case 3 of issue 16: a sandbox cannot outlive its deadline. The main process ends at the
/// deadline inside the container (no `sleep infinity`), and `reap` then removes it although its
/// owner (this process) still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_ends_at_its_deadline_and_is_reaped_then() -> TestResult {
    let (provider, image) = provider().await;
    let node = unique_node("deadline");
    let _c = Cleanup { node: node.clone() };
    let mut spec = SandboxSpec::new(&node, "short", &image);
    // Long enough that create, start and one exec fit before it on a loaded machine (the
    // deadline label is in whole seconds, so the margin is up to a second less).
    spec.lifetime = Duration::from_secs(5);
    let sb = provider.create(&spec, &SandboxPolicy::default()).await?;
    sb.start().await?;
    let ps = sb.exec(ExecRequest::new(["ps", "-o", "args"])).await?;
    assert!(
        !ps.stdout_text().contains("infinity"),
        "{}",
        ps.stdout_text()
    );
    assert_eq!(provider.reap(&node).await?, 0, "deadline not reached yet");
    // Liveness bound, not a timing assert: the deadline is 5 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    while sb.state().await?.is_running() {
        assert!(
            Instant::now() < deadline,
            "the sandbox outlived its deadline"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Exited, "{err}");
    // At most 1: any node on this host reaps stale sandboxes every period and may come first.
    assert!(provider.reap(&node).await? <= 1);
    assert_eq!(containers_of(&node), 0);
    Ok(())
}

/// Issue 33: `end_after` makes a sandbox end by itself from inside — its commands with it —
/// however long its own lifetime, whoever is left on the host; the commands' user cannot stop
/// that (the watchdog runs as the supervisor user). Without an init it cannot, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_armed_to_end_ends_by_itself_and_a_task_cannot_disarm_it() -> TestResult {
    let (_p, sb, _c) = started("end", SandboxPolicy::default(), |_| {}).await;
    sb.end_after(Duration::from_secs(3)).await?;
    // The commands' user tries to kill every process it can see, the watchdog included.
    let out = sb
        .exec(ExecRequest::shell("kill -9 -1; echo tried").timeout(Duration::from_secs(30)))
        .await;
    assert!(
        out.as_ref().is_ok_and(|o| o.stdout_text() == "tried\n"),
        "{out:?}"
    );
    // Liveness bound, not a timing assert: the end is 3 s away, the lifetime 2 h.
    let deadline = Instant::now() + Duration::from_secs(60);
    while sb.state().await?.is_running() {
        assert!(Instant::now() < deadline, "the sandbox outlived its end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Exited, "{err}");

    let no_init = SandboxPolicy {
        init: false,
        ..SandboxPolicy::default()
    };
    let (_p, sb, _c) = started("end-no-init", no_init, |_| {}).await;
    let err = sb.end_after(Duration::from_secs(3)).await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::Unsupported, "{err}");
    assert!(sb.state().await?.is_running());
    Ok(())
}

/// Issue 36: an end is armed through the sandbox's supervisor (a line on its stdin, no exec):
/// re-arming leaves no sleeper behind (a reused sandbox is re-armed for every run, and each
/// left `sleep` would count against its pids limit); the commands' user cannot write to the
/// supervisor's stdin; and the sandbox ends at once when its node lets go of that stdin — as it
/// does when the node is killed with `kill -9` — however far its end and lifetime are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_ends_when_its_node_lets_go_and_re_arming_leaves_nothing() -> TestResult {
    let (_p, sb, _c) = started("letgo", SandboxPolicy::default(), |_| {}).await;
    let arming = Instant::now();
    for _ in 0..30 {
        sb.end_after(Duration::from_secs(600)).await?;
    }
    let per_arming = arming.elapsed() / 30;
    assert!(per_arming < Duration::from_millis(500), "{per_arming:?}");
    let look = "sleep 1; ps -A -o comm | grep -cx sleep";
    let out = sb.exec(ExecRequest::shell(look)).await?;
    // The lifetime's sleeper and the last armed one (this command's `sleep 1` has ended).
    let sleeps: usize = out.stdout_text().trim().parse()?;
    assert_eq!(sleeps, 2, "sleepers after 30 armings");
    // Every process of the supervisor's user (the supervisor and its sleepers share its
    // stdin): a write to any would be an end the command chose.
    let poke = "n=0; for d in /proc/[0-9]*; do \
          [ \"$(stat -c %u $d 2>/dev/null)\" = 65533 ] || continue; n=$((n+1)); \
          (echo 'end 1' > $d/fd/0) 2>/dev/null && { echo wrote; exit 0; }; done; \
        [ $n -ge 3 ] && echo refused || echo \"only $n supervisor processes\"";
    let out = sb.exec(ExecRequest::shell(poke)).await?;
    assert_eq!(out.stdout_text().trim(), "refused", "{out:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        sb.state().await?.is_running(),
        "an end written by a command was taken"
    );

    let name = sb.id().to_owned();
    let running = |name: &str| {
        let out = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", name])
            .output()
            .expect("docker CLI");
        String::from_utf8_lossy(&out.stdout).trim() == "true"
    };
    assert!(running(&name));
    // The node lets go: what `kill -9` of the node does to the attachment.
    let dropped = Instant::now();
    drop(sb);
    while running(&name) {
        assert!(
            dropped.elapsed() < Duration::from_secs(20),
            "the sandbox outlived its node's hold"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("ended {:?} after its node let go", dropped.elapsed());
    Ok(())
}

/// Issue 33: a working directory the sandbox lacks is named in the error (the Engine itself
/// says only "exit code 126"), not retryable; a command that exits 126 by itself keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_working_directory_says_so() -> TestResult {
    let (_p, sb, _c) = started("workdir", SandboxPolicy::default(), |_| {}).await;
    let err = sb
        .exec(ExecRequest::new(["true"]).working_dir("/x"))
        .await
        .unwrap_err();
    assert_eq!(err.category, ErrorCategory::Exec, "{err}");
    assert_eq!(err.message, "workdir /x does not exist in the sandbox");
    assert!(!err.retryable);
    sb.write_file("/workspace/file", b"", 0o644).await?;
    let err = sb
        .exec(ExecRequest::new(["true"]).working_dir("/workspace/file"))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "workdir /workspace/file is not a directory in the sandbox"
    );
    let out = sb
        .exec(ExecRequest::shell("exit 126").working_dir("/tmp"))
        .await?;
    assert_eq!(out.exit_code, 126);
    sb.remove().await?;
    Ok(())
}

/// Building is idempotent: a second call finds the image current. (How fast that is — one
/// inspect — is measured by the benchmark; here only a liveness bound.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_build_is_idempotent() -> TestResult {
    let (provider, image) = provider().await;
    let id = provider.docker().inspect_image(&image).await?.id;
    let begun = Instant::now();
    assert_eq!(ensure_sandbox_image(provider.docker()).await?, image);
    assert!(begun.elapsed() < Duration::from_secs(60), "hung");
    assert_eq!(
        provider.docker().inspect_image(&image).await?.id,
        id,
        "the current image was rebuilt"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_states() -> TestResult {
    let (provider, image) = provider().await;
    let node = unique_node("states");
    let _c = Cleanup { node: node.clone() };
    let sb = provider
        .create(
            &SandboxSpec::new(&node, "t", image),
            &SandboxPolicy::default(),
        )
        .await?;
    assert_eq!(sb.state().await?, SandboxState::Created);
    sb.start().await?;
    sb.start().await?; // idempotent
    assert_eq!(sb.state().await?, SandboxState::Running);
    sb.stop().await?;
    assert!(matches!(sb.state().await?, SandboxState::Exited { .. }));
    sb.stop().await?; // idempotent
    sb.remove().await?;
    sb.remove().await?; // idempotent
    assert_eq!(sb.state().await?, SandboxState::Removed);
    Ok(())
}

/// Every error category is produced by a real situation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_category_is_produced() -> TestResult {
    let mut seen = BTreeSet::new();
    let mut note = |category: ErrorCategory, err: &chorus_io::sandbox::SandboxError| {
        assert_eq!(err.category, category, "{err}");
        seen.insert(category.as_str());
    };

    // DaemonUnavailable: nobody listens there.
    let err = DockerProvider::connect_unix("/nonexistent/chorus/docker.sock")
        .await
        .unwrap_err();
    assert!(err.retryable);
    note(ErrorCategory::DaemonUnavailable, &err);

    let (provider, image) = provider().await;
    let node = unique_node("errors");
    let _c = Cleanup { node: node.clone() };
    let policy = SandboxPolicy::default();
    let spec = SandboxSpec::new(&node, "t", &image);

    // Image: never pulled, so a missing image is an error at once.
    let missing = SandboxSpec::new(&node, "t", "chorus/does-not-exist:never");
    note(
        ErrorCategory::Image,
        &provider.create(&missing, &policy).await.unwrap_err(),
    );

    // Create: the daemon refuses a memory limit below its minimum (6 MB).
    let mut tiny = SandboxPolicy::default();
    tiny.limits.memory_bytes = Some(1024 * 1024);
    let err = provider.create(&spec, &tiny).await.unwrap_err();
    note(ErrorCategory::Create, &err);
    assert!(!err.retryable);
    // The staging root itself is made by the first create that stages (none may have yet).
    let staged = match std::fs::read_dir(provider.staging_root()) {
        Ok(entries) => entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(&node)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };
    assert!(!staged, "a failed create must not leave its staging dir");

    // PolicyViolation: a dangerous capability without opting in.
    let greedy = SandboxPolicy {
        capabilities_add: vec!["SYS_ADMIN".into()],
        ..SandboxPolicy::default()
    };
    note(
        ErrorCategory::PolicyViolation,
        &provider.create(&spec, &greedy).await.unwrap_err(),
    );

    // Unsupported: fuse-overlayfs cannot enforce a disk size.
    let mut sized = SandboxPolicy::default();
    sized.limits.disk_bytes = Some(1 << 30);
    let err = provider.create(&spec, &sized).await.unwrap_err();
    note(ErrorCategory::Unsupported, &err);
    assert!(err.message.contains("storage driver"), "{err}");

    // Start: the network to join does not exist (checked by the daemon only at start).
    let mut lost = SandboxPolicy::default();
    lost.network.enabled = true;
    lost.network.network_name = Some(format!("chorus-no-such-network-{node}"));
    let sb = provider.create(&spec, &lost).await?;
    note(ErrorCategory::Start, &sb.start().await.unwrap_err());
    sb.remove().await?;

    let sb = provider.create(&spec, &policy).await?;
    sb.start().await?;
    // Exec: nothing to run.
    note(
        ErrorCategory::Exec,
        &sb.exec(ExecRequest::default()).await.unwrap_err(),
    );
    // Io: a file that is not there.
    note(
        ErrorCategory::Io,
        &sb.read_file("/workspace/absent").await.unwrap_err(),
    );
    // Timeout.
    note(
        ErrorCategory::Timeout,
        &sb.exec(ExecRequest::new(["sleep", "30"]).timeout(Duration::from_millis(300)))
            .await
            .unwrap_err(),
    );
    // Exited: the sandbox was stopped.
    sb.stop().await?;
    note(
        ErrorCategory::Exited,
        &sb.exec(ExecRequest::new(["true"])).await.unwrap_err(),
    );
    // NotFound: the sandbox was removed.
    sb.remove().await?;
    // NotClean: a sandbox whose reset cannot vouch for it (a writable root), asked to run
    // after one.
    let writable = SandboxPolicy {
        read_only_rootfs: false,
        ..SandboxPolicy::default()
    };
    let sb = provider.create(&spec, &writable).await?;
    sb.start().await?;
    note(
        ErrorCategory::NotClean,
        &sb.exec(ExecRequest::new(["true"]).after_reset())
            .await
            .unwrap_err(),
    );
    sb.remove().await?;
    note(
        ErrorCategory::NotFound,
        &sb.exec(ExecRequest::new(["true"])).await.unwrap_err(),
    );

    // ResourceLimit: the OOM killer.
    let mut small = SandboxPolicy::default();
    small.limits.memory_bytes = Some(32 * 1024 * 1024);
    let sb = provider.create(&spec, &small).await?;
    sb.start().await?;
    note(
        ErrorCategory::ResourceLimit,
        &sb.exec(ExecRequest::new(HOG)).await.unwrap_err(),
    );
    sb.remove().await?;

    let all: BTreeSet<_> = ErrorCategory::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(seen, all, "categories never produced");
    Ok(())
}
