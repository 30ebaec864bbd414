//! End to end, issue 16's last item: a node reaps on start. A node that uses Docker (`chorus run
//! --docker`) removes, when it starts, the sandboxes earlier runs of the same node id left
//! behind — their owner is gone or their deadline passed — and leaves alone a live owner's
//! sandbox and every other node's. A node configured for Docker that cannot reach it says so
//! and does not start. Issue 33: from then on it also removes, every 15 s, the stale sandboxes
//! of any node on its host (another node's whose owner died among them), still sparing live
//! owners'.
//!
//! The Docker test needs the real Docker Engine and fails (never skips) without it.

// The Docker test helpers of chorus-io's own tests (declared in e2e.rs): connecting (failing
// loudly without Docker), the sandbox image, container checks through the CLI, cleanup on panic.
use crate::io_common as common;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chorus_io::sandbox::docker::DockerProvider;
use chorus_io::sandbox::owner::Owner;
use chorus_io::sandbox::{ExecutionSandbox, SandboxPolicy, SandboxProvider, SandboxSpec};
use chorus_tests::{
    lone_node_args, read, run_chorus_env, spawn_reported, status, stop, wait_until,
};
use common::{container_exists, provider, Cleanup};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

/// A process that existed and is gone now: its owner labels name nobody alive.
fn dead_owner() -> Owner {
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep runs");
    let owner = Owner::of_process(child.id()).expect("a Linux /proc");
    child.kill().expect("kill sleep");
    child.wait().expect("reap sleep");
    assert!(!owner.is_alive());
    owner
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// Creates and starts a sandbox of `node` owned by `owner` with `lifetime`; returns its name.
async fn leftover(
    provider: &DockerProvider,
    image: &str,
    node: &str,
    task: &str,
    owner: Owner,
    lifetime: Duration,
) -> String {
    let mut spec = SandboxSpec::new(node, task, image);
    spec.lifetime = lifetime;
    let sandbox = provider
        .clone()
        .with_owner(owner)
        .create(&spec, &SandboxPolicy::default())
        .await
        .unwrap_or_else(|e| panic!("create {task}: {e}"));
    sandbox
        .start()
        .await
        .unwrap_or_else(|e| panic!("start {task}: {e}"));
    sandbox.id().to_owned()
}

#[test]
fn a_docker_node_reaps_what_its_earlier_runs_left_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let args = lone_node_args(&data);

    // An earlier run of the node: it fixes the node id (kept in the data directory).
    let log1 = dir.path().join("run1.log");
    let (mut first, ports) = spawn_reported(Path::new(BIN), &args, &[], &log1);
    let node_id = wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
        status(ports.http)?["node_id"].as_str().map(str::to_owned)
    })
    .unwrap_or_else(|| panic!("no status:\n{}", read(&log1)));
    assert!(stop(&mut first, Signal::SIGTERM).success());

    // What such runs, and others, left behind; then the next run of the same node, with
    // Docker: it reaps before it reports its start. Any node on this host reaps stale sandboxes
    // every 15 s, another test's too, and may take one of these in the seconds before that
    // start: then the count is short, and the round is made again (at most 3 times: a node
    // that reaps the wrong ones fails every round). After its start this node reaps every
    // second, so it, not another test's node, is the one that takes the next leftover.
    let other_node = format!("test-reap-other-{}", std::process::id());
    let _cleanup = [&node_id, &other_node].map(|node| Cleanup { node: node.clone() });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hour = Duration::from_secs(3_600);
    let config = dir.path().join("reap.toml");
    std::fs::write(&config, "[tasks]\nreap_period_s = 1\n").unwrap();
    let mut docker_args = args.clone();
    docker_args.push("--docker".into());
    docker_args.push("--config".into());
    docker_args.push(config.to_str().unwrap().into());
    let mut round = 0;
    let (mut second, log2, live, others) = loop {
        round += 1;
        let (dead, expired, live, others) = rt.block_on(async {
            let (provider, image) = provider().await;
            let me = Owner::this_process().expect("a Linux /proc");
            let mut made = Vec::new();
            for (node, task, owner, lifetime) in [
                (&node_id, "dead", dead_owner(), hour),
                (&node_id, "expired", me.clone(), Duration::from_secs(1)),
                (&node_id, "live", me, hour),
                (&other_node, "others", dead_owner(), hour),
            ] {
                let task = format!("{task}-{round}");
                made.push(leftover(&provider, &image, node, &task, owner, lifetime).await);
            }
            let [dead, expired, live, others] = <[String; 4]>::try_from(made).unwrap();
            (dead, expired, live, others)
        });
        // The expired sandbox's deadline label is creation + 1 s, in whole seconds.
        let deadline = unix_now_s() + 2;
        while unix_now_s() <= deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let log2 = dir.path().join(format!("run{}.log", round + 1));
        let (mut second, _) = spawn_reported(Path::new(BIN), &docker_args, &[], &log2);
        let log = read(&log2);
        assert!(
            !container_exists(&dead),
            "a dead owner's sandbox was kept:\n{log}"
        );
        assert!(
            !container_exists(&expired),
            "an expired sandbox was kept:\n{log}"
        );
        assert!(
            container_exists(&live),
            "a live owner's sandbox was removed:\n{log}"
        );
        // Exactly the two: the other node's leftover was not among them (it may be gone by
        // now, taken by a periodic reap, this node's or another's).
        if log.contains("removed 2 sandbox(es)") {
            break (second, log2, live, others);
        }
        assert!(
            round < 3,
            "the count is not logged, or the start took another node's sandbox too, in each \
             of {round} rounds:\n{log}"
        );
        assert!(stop(&mut second, Signal::SIGTERM).success());
    };
    // The periodic reap takes the other node's sandbox its dead owner left. Another test's
    // node on this host may take one first (any node reaps any stale sandbox on its host):
    // then a new leftover, until this node's own count is logged.
    let mut leftovers = vec![others];
    let mut next = 0;
    let reaped = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let gone = leftovers.iter().all(|name| !container_exists(name));
        if gone && read(&log2).contains("stale sandbox(es) on this host") {
            return Some(());
        }
        if gone {
            next += 1;
            let task = format!("more-{next}");
            leftovers.push(rt.block_on(async {
                let (provider, image) = provider().await;
                leftover(&provider, &image, &other_node, &task, dead_owner(), hour).await
            }));
        }
        None
    });
    let log = read(&log2);
    assert!(
        reaped.is_some(),
        "the periodic reap kept a dead owner's sandbox, or did not log its count ({} \
         leftover(s) made):\n{log}",
        leftovers.len()
    );
    assert!(
        container_exists(&live),
        "the periodic reap removed a live owner's sandbox:\n{log}"
    );
    assert!(
        stop(&mut second, Signal::SIGTERM).success(),
        "{}",
        read(&log2)
    );
}

/// `--docker` with no Engine to answer: one line that says so, exit 1; without `--docker` the
/// same node starts (a node that does not use Docker never needs it).
#[test]
fn a_docker_node_without_docker_says_so_and_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = format!("unix://{}", dir.path().join("no-docker.sock").display());
    let mut args = lone_node_args(&dir.path().join("node"));
    args.push("--docker".into());
    let out = run_chorus_env(
        Path::new(BIN),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[("DOCKER_HOST", nowhere.as_str())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default();
    assert!(last.contains("Docker Engine"), "{stderr}");
    assert!(last.contains("--docker"), "{stderr}");
    assert!(last.contains("no-docker.sock"), "{stderr}");

    args.pop();
    let log = dir.path().join("plain.log");
    let (mut node, _) = spawn_reported(
        Path::new(BIN),
        &args,
        &[("DOCKER_HOST", nowhere.as_str())],
        &log,
    );
    assert!(stop(&mut node, Signal::SIGTERM).success(), "{}", read(&log));
}
