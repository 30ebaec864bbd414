//! The warm sandbox pool: against the real Docker Engine (these tests fail, never skip, when
//! Docker is unreachable) and against the scripted double.

use crate::common;

use std::time::{Duration, Instant};

use chorus_io::sandbox::docker::{LABEL_NODE, LABEL_TASK};
use chorus_io::sandbox::double::{Op, ScriptedProvider};
use chorus_io::sandbox::pool::{LABEL_POOL, POOL_TASK, TASK_ENV};
use chorus_io::sandbox::{
    ErrorCategory, ExecRequest, ExecutionSandbox, PoolConfig, SandboxError, SandboxPolicy,
    SandboxPool, SandboxSpec, SandboxState,
};
use common::{container_exists, containers_of, provider, unique_node, Cleanup};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const FILL: Duration = Duration::from_secs(60);

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
async fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn label_of(name: &str, label: &str) -> String {
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            &format!("{{{{index .Config.Labels \"{label}\"}}}}"),
            name,
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn docker_pool(
    test: &str,
    config: PoolConfig,
) -> (
    SandboxPool<chorus_io::sandbox::docker::DockerProvider>,
    String,
    Cleanup,
) {
    let (provider, image) = provider().await;
    let node = unique_node(test);
    let cleanup = Cleanup { node: node.clone() };
    let pool = SandboxPool::new(
        provider,
        SandboxSpec::new(&node, "template", image),
        SandboxPolicy::default(),
        config,
    );
    (pool, node, cleanup)
}

// ---------------------------------------------------------------------------------------------
// Docker
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_acquire_gives_distinct_started_sandboxes_and_release_removes_them() -> TestResult {
    let (pool, node, _c) = docker_pool("pool-acquire", PoolConfig::with_size(2)).await;
    pool.wait_full(FILL).await?;
    assert_eq!(containers_of(&node), 2);

    let a = pool.acquire("task-a").await?;
    assert!(a.from_pool());
    assert_eq!(a.state().await?, SandboxState::Running);
    let out = a
        .exec(ExecRequest::shell(format!("echo hello ${TASK_ENV}")))
        .await?;
    assert!(out.success());
    assert_eq!(out.stdout_text(), "hello task-a\n");
    // Labels were fixed at create time: the task is "pool", the pool id is recorded, and the
    // task id lives in the pool's lease table.
    assert_eq!(label_of(a.id(), LABEL_TASK), POOL_TASK);
    assert_eq!(label_of(a.id(), LABEL_POOL), pool.pool_id());
    assert_eq!(label_of(a.id(), LABEL_NODE), node);
    assert_eq!(pool.leases()[a.id()], "task-a");

    let b = pool.acquire("task-b").await?;
    assert_ne!(a.id(), b.id(), "two tasks must never share a sandbox");
    let out = b.exec(ExecRequest::new(["echo", "second"])).await?;
    assert_eq!(out.stdout_text(), "second\n");

    let (a_id, b_id) = (a.id().to_string(), b.id().to_string());
    a.release();
    drop(b); // dropping releases too
    eventually(
        "released containers removed",
        Duration::from_secs(30),
        || !container_exists(&a_id) && !container_exists(&b_id),
    )
    .await;
    assert!(pool.leases().is_empty());

    pool.shutdown().await?;
    assert_eq!(containers_of(&node), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_pool_refills_to_size_and_shutdown_leaves_no_containers() -> TestResult {
    let (pool, node, _c) = docker_pool("pool-refill", PoolConfig::with_size(2)).await;
    pool.wait_full(FILL).await?;
    let first = pool.acquire("t1").await?;
    let second = pool.acquire("t2").await?;
    // Both idle sandboxes were taken; the pool refills to 2 while the tasks still run.
    pool.wait_full(FILL).await?;
    let status = pool.status();
    assert_eq!(status.idle, 2);
    assert_eq!(status.leased, 2);
    assert!(status.idle + status.creating <= 2);
    assert_eq!(containers_of(&node), 4);
    first.release();
    // A leased sandbox still held at shutdown is removed too.
    pool.shutdown().await?;
    assert_eq!(containers_of(&node), 0, "shutdown left labelled containers");
    assert!(
        second.exec(ExecRequest::new(["true"])).await.is_err(),
        "a sandbox removed at shutdown must not run commands"
    );
    let err = pool.acquire("t3").await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::NotFound);
    Ok(())
}

/// A warm pool hands out sandboxes that are exec-ready: already running, from the pool (no
/// create or start on the task's path), and the first command runs at once. The latency of that
/// (acquire, and acquire + first exec) is measured by `cargo bench -p chorus-io --bench
/// sandbox`, not asserted here, where the machine's load would decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_warm_acquire_hands_out_exec_ready_sandboxes() -> TestResult {
    let (pool, node, _c) = docker_pool("pool-warm", PoolConfig::with_size(3)).await;
    pool.wait_full(FILL).await?;
    let mut leased = Vec::new();
    for i in 0..3 {
        let sb = pool.acquire(&format!("warm-{i}")).await?;
        assert!(sb.from_pool(), "a warm pool should not create on demand");
        assert_eq!(sb.state().await?, SandboxState::Running);
        let out = sb.exec(ExecRequest::new(["true"])).await?;
        assert!(out.success());
        leased.push(sb);
    }
    drop(leased);
    pool.shutdown().await?;
    assert_eq!(containers_of(&node), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_idle_sandboxes_past_max_age_are_recycled() -> TestResult {
    let config = PoolConfig {
        size: 1,
        max_idle_age: Duration::from_millis(1500),
        ..PoolConfig::default()
    };
    let (pool, node, _c) = docker_pool("pool-age", config).await;
    pool.wait_full(FILL).await?;
    let before = pool.status().recycled;
    eventually(
        "an old idle sandbox recycled",
        Duration::from_secs(30),
        || pool.status().recycled > before,
    )
    .await;
    pool.wait_full(FILL).await?;
    eventually(
        "the recycled container removed",
        Duration::from_secs(30),
        || pool.status().removing == 0,
    )
    .await;
    assert!(pool.status().removed >= 1);
    let sb = pool.acquire("fresh").await?;
    assert!(sb.exec(ExecRequest::new(["true"])).await?.success());
    drop(sb);
    pool.shutdown().await?;
    assert_eq!(containers_of(&node), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_failed_precreation_is_reported_not_silent() -> TestResult {
    let (provider, _image) = provider().await;
    let node = unique_node("pool-fail");
    let _c = Cleanup { node: node.clone() };
    let config = PoolConfig {
        size: 1,
        retry_initial: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let pool = SandboxPool::new(
        provider,
        SandboxSpec::new(&node, "template", "chorus/no-such-image:never"),
        SandboxPolicy::default(),
        config,
    );
    let err = pool.wait_full(FILL).await.unwrap_err();
    assert_ne!(err.category, ErrorCategory::Timeout, "{err}");
    eventually("retries with backoff", Duration::from_secs(10), || {
        pool.status().failed_creations >= 3
    })
    .await;
    let status = pool.status();
    assert!(status.consecutive_failures >= 3);
    assert!(status.last_error.is_some());
    assert_eq!(status.idle, 0);
    // An acquire does not hang on the empty pool: it tries itself and returns the error.
    let err = tokio::time::timeout(Duration::from_secs(30), pool.acquire("t"))
        .await?
        .unwrap_err();
    assert_ne!(err.category, ErrorCategory::Timeout, "{err}");
    pool.shutdown().await?;
    assert_eq!(containers_of(&node), 0);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Scripted double
// ---------------------------------------------------------------------------------------------

fn scripted_pool(config: PoolConfig) -> (SandboxPool<ScriptedProvider>, ScriptedProvider) {
    let provider = ScriptedProvider::new();
    let pool = SandboxPool::new(
        provider.clone(),
        SandboxSpec::new("n1", "template", "img"),
        SandboxPolicy::default(),
        config,
    );
    (pool, provider)
}

async fn removed(provider: &ScriptedProvider) -> usize {
    let mut n = 0;
    for sb in provider.sandboxes() {
        if sb.state().await.unwrap() == SandboxState::Removed {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn scripted_pool_leases_once_refills_and_shuts_down_clean() -> TestResult {
    let (pool, provider) = scripted_pool(PoolConfig::with_size(2));
    pool.wait_full(Duration::from_secs(5)).await?;
    assert_eq!(provider.sandboxes().len(), 2);

    let a = pool.acquire("task-a").await?;
    let b = pool.acquire("task-b").await?;
    assert_ne!(a.id(), b.id());
    assert!(a.from_pool() && b.from_pool());
    assert_eq!(a.state().await?, SandboxState::Running);
    assert!(a.id().contains(POOL_TASK));
    assert_eq!(a.env()[TASK_ENV], "task-a");
    assert_eq!(a.task_id(), "task-a");
    assert_eq!(pool.leases().len(), 2);

    pool.wait_full(Duration::from_secs(5)).await?;
    let status = pool.status();
    assert_eq!((status.idle, status.leased, status.hits), (2, 2, 2));
    assert_eq!(provider.sandboxes().len(), 4);

    let a_handle = provider
        .sandboxes()
        .into_iter()
        .find(|s| s.id() == a.id())
        .unwrap();
    a.release();
    tokio::time::timeout(Duration::from_secs(5), async {
        while a_handle.state().await.unwrap() != SandboxState::Removed {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    // Never handed out again: the next acquires get other sandboxes.
    let c = pool.acquire("task-c").await?;
    assert_ne!(c.id(), a_handle.id());

    pool.shutdown().await?;
    assert_eq!(removed(&provider).await, provider.sandboxes().len());
    assert!(b.exec(ExecRequest::new(["true"])).await.is_err());
    drop((b, c));
    assert_eq!(pool.status().removing, 0);
    Ok(())
}

#[tokio::test]
async fn scripted_pool_stays_bounded_and_waits_instead_of_overcreating() -> TestResult {
    let (pool, provider) = scripted_pool(PoolConfig::with_size(3));
    let mut leased = Vec::new();
    for i in 0..10 {
        let s = pool.status();
        assert!(s.idle + s.creating <= 3, "{s:?}");
        leased.push(pool.acquire(&format!("t{i}")).await?);
        let s = pool.status();
        assert!(s.idle + s.creating <= 3, "{s:?}");
    }
    let ids: std::collections::BTreeSet<_> = leased.iter().map(|s| s.id().to_string()).collect();
    assert_eq!(ids.len(), 10);
    drop(leased);
    pool.wait_full(Duration::from_secs(5)).await?;
    assert_eq!(provider.sandboxes().len(), 13);
    pool.shutdown().await?;
    assert_eq!(removed(&provider).await, 13);
    Ok(())
}

/// Issue 36: a sandbox given back waits, reset, for its own key only; a failed reset, a passed
/// `usable_until` and the bound on kept sandboxes each remove it instead.
#[tokio::test]
async fn a_sandbox_given_back_is_reset_and_goes_only_to_its_own_key() -> TestResult {
    let (pool, provider) = scripted_pool(PoolConfig::with_size(1));
    pool.wait_full(Duration::from_secs(5)).await?;
    let later = Instant::now() + Duration::from_secs(60);
    let a = pool.acquire_for("t1", Some("n1/alice")).await?;
    let first = a.id().to_string();
    assert_eq!(a.reused(), None);
    a.give_back("n1/alice".into(), later, None);
    eventually("the reset", Duration::from_secs(5), || {
        pool.status().idle == 2
    })
    .await;
    // Another key never gets it...
    let b = pool.acquire_for("t2", Some("n1/bob")).await?;
    assert_ne!(b.id(), first);
    assert_eq!(b.reused(), None);
    b.release();
    // ...its own key does, after a reset, and knows it was used before.
    let c = pool.acquire_for("t3", Some("n1/alice")).await?;
    assert_eq!(c.id(), first);
    assert!(c.reused().is_some());
    let resets = |id: &str| {
        provider
            .sandboxes()
            .iter()
            .find(|s| s.id() == id)
            .map_or(0, |s| {
                s.calls().iter().filter(|c| c.op == Op::Reset).count()
            })
    };
    assert_eq!(resets(&first), 1);
    assert_eq!(pool.status().reuses, 1);
    // A reset that fails: removed, never handed out again.
    let failing = provider
        .sandboxes()
        .into_iter()
        .find(|s| s.id() == first)
        .unwrap();
    failing.fail_next(Op::Reset, SandboxError::new(ErrorCategory::Exec, "dirty"));
    c.give_back("n1/alice".into(), later, None);
    eventually("the failed reset", Duration::from_secs(5), || {
        pool.status().failed_resets == 1
    })
    .await;
    let d = pool.acquire_for("t4", Some("n1/alice")).await?;
    assert_ne!(d.id(), first);
    // Past its usable_until: removed, not kept.
    let kept = d.id().to_string();
    d.give_back("n1/alice".into(), Instant::now(), None);
    let e = pool.acquire_for("t5", Some("n1/alice")).await?;
    assert_ne!(e.id(), kept);
    // At most `size` kept: the oldest goes for a newer one.
    let f = pool.acquire_for("t6", Some("n1/carol")).await?;
    let (eid, fid) = (e.id().to_string(), f.id().to_string());
    e.give_back("n1/alice".into(), later, None);
    eventually("kept", Duration::from_secs(5), || {
        pool.status().reuses == 1 && pool.status().idle >= 1
    })
    .await;
    f.give_back("n1/carol".into(), later, None);
    eventually("the second kept", Duration::from_secs(5), || {
        provider
            .sandboxes()
            .iter()
            .any(|s| s.id() == eid && s.calls().iter().any(|c| c.op == Op::Remove))
    })
    .await;
    let g = pool.acquire_for("t7", Some("n1/carol")).await?;
    assert_eq!(g.id(), fid);
    drop(g);
    pool.shutdown().await?;
    Ok(())
}

/// A sandbox kept as it is (its reset goes with the next command, so what its run left still
/// runs) waits at most `max_dirty_keep` after it was given back, whatever its `usable_until`:
/// taken within it, removed after it. One reset when given back waits as long as it may.
#[tokio::test]
async fn a_sandbox_kept_as_it_is_waits_at_most_max_dirty_keep() -> TestResult {
    let config = PoolConfig {
        max_dirty_keep: Duration::from_millis(300),
        ..PoolConfig::with_size(1)
    };
    let later = Instant::now() + Duration::from_secs(60);
    let provider = ScriptedProvider::new();
    provider.reset_in_exec();
    let pool = SandboxPool::new(
        provider.clone(),
        SandboxSpec::new("n1", "template", "img"),
        SandboxPolicy::default(),
        config.clone(),
    );
    let a = pool.acquire_for("t1", Some("n1/alice")).await?;
    let first = a.id().to_string();
    a.give_back("n1/alice".into(), later, None);
    // What its run left is killed in the background before it is kept.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Within the bound: its owner's next run takes it (after the reset in its exec).
    let b = pool.acquire_for("t2", Some("n1/alice")).await?;
    assert_eq!(b.id(), first);
    assert!(b.needs_reset());
    b.give_back("n1/alice".into(), later, None);
    // Past it: removed by the pool on its own, not kept to the owner's usable_until.
    let is_removed = |id: &str| {
        provider
            .sandboxes()
            .iter()
            .any(|s| s.id() == id && s.calls().iter().any(|c| c.op == Op::Remove))
    };
    eventually("the dirty keep's end", Duration::from_secs(5), || {
        is_removed(&first)
    })
    .await;
    let c = pool.acquire_for("t3", Some("n1/alice")).await?;
    assert_ne!(c.id(), first);
    assert!(!c.needs_reset());
    assert!(pool.status().recycled >= 1, "{:?}", pool.status());
    drop(c);
    pool.shutdown().await?;

    // Reset when given back (nothing of the run is left): not bound by max_dirty_keep.
    let (pool, _provider) = scripted_pool(config);
    let d = pool.acquire_for("t4", Some("n1/alice")).await?;
    let clean = d.id().to_string();
    d.give_back("n1/alice".into(), later, None);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let e = pool.acquire_for("t5", Some("n1/alice")).await?;
    assert_eq!(e.id(), clean);
    drop(e);
    pool.shutdown().await?;
    Ok(())
}

/// Issue 51, finding 8: a sandbox given back to be kept unreset has what its run left running
/// killed at once (`end_leftovers`, once), before its owner's next acquire takes it — that
/// acquire waits for it rather than taking another. One whose clearing fails is removed, never
/// kept, and the owner's next acquire gets another.
#[tokio::test]
async fn a_sandbox_kept_unreset_has_its_leftovers_killed_before_it_is_kept() -> TestResult {
    let later = Instant::now() + Duration::from_secs(60);
    let provider = ScriptedProvider::new();
    provider.reset_in_exec();
    let pool = SandboxPool::new(
        provider.clone(),
        SandboxSpec::new("n1", "template", "img"),
        SandboxPolicy::default(),
        PoolConfig::with_size(2),
    );
    let ops = |id: &str, op: Op| {
        provider
            .sandboxes()
            .iter()
            .filter(|s| s.id() == id)
            .flat_map(|s| s.calls())
            .filter(|c| c.op == op)
            .count()
    };
    let a = pool.acquire_for("t1", Some("n1/alice")).await?;
    let first = a.id().to_string();
    assert_eq!(ops(&first, Op::EndLeftovers), 0);
    a.give_back("n1/alice".into(), later, None);
    // At once, with no wait: the next acquire is the one that waits.
    let b = pool.acquire_for("t2", Some("n1/alice")).await?;
    assert_eq!(b.id(), first, "the owner's own, cleared");
    assert_eq!(ops(&first, Op::EndLeftovers), 1);
    assert_eq!(
        ops(&first, Op::Reset),
        0,
        "its reset goes with the next command"
    );
    assert!(b.needs_reset());
    // A clearing that fails: removed, not kept.
    provider
        .sandboxes()
        .into_iter()
        .find(|s| s.id() == first)
        .expect("made")
        .fail_next(
            Op::EndLeftovers,
            SandboxError::new(ErrorCategory::Exec, "the helper did not run"),
        );
    b.give_back("n1/alice".into(), later, None);
    let c = pool.acquire_for("t3", Some("n1/alice")).await?;
    assert_ne!(c.id(), first);
    eventually(
        "the uncleared sandbox's removal",
        Duration::from_secs(5),
        || ops(&first, Op::Remove) == 1,
    )
    .await;
    assert_eq!(pool.status().failed_resets, 1);
    drop(c);
    pool.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn scripted_failures_are_reported_and_retried_with_backoff() -> TestResult {
    let provider = ScriptedProvider::new();
    for _ in 0..3 {
        provider.fail_next_create(SandboxError::new(
            ErrorCategory::DaemonUnavailable,
            "daemon down",
        ));
    }
    let pool = SandboxPool::new(
        provider.clone(),
        SandboxSpec::new("n1", "template", "img"),
        SandboxPolicy::default(),
        PoolConfig {
            size: 1,
            retry_initial: Duration::from_millis(20),
            retry_max: Duration::from_millis(100),
            ..PoolConfig::default()
        },
    );
    let err = pool.wait_full(Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(err.category, ErrorCategory::DaemonUnavailable);
    assert!(pool.status().failed_creations >= 1);
    // The pool keeps trying with backoff and recovers.
    let begun = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.wait_full(Duration::from_secs(5)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    let status = pool.status();
    assert_eq!(status.failed_creations, 3);
    assert_eq!(status.consecutive_failures, 0);
    assert!(status.last_error.is_none());
    // Backoff 20 + 40 ms at least between the three failures and the success.
    assert!(
        begun.elapsed() >= Duration::from_millis(40),
        "{:?}",
        begun.elapsed()
    );
    pool.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn scripted_dead_idle_sandbox_is_replaced_and_size_zero_passes_through() -> TestResult {
    let (pool, provider) = scripted_pool(PoolConfig::with_size(1));
    pool.wait_full(Duration::from_secs(5)).await?;
    let dead = provider.sandboxes()[0].clone();
    dead.set_state(SandboxState::Exited {
        exit_code: 137,
        oom_killed: false,
    });
    let sb = pool.acquire("t").await?;
    assert_ne!(sb.id(), dead.id());
    assert_eq!(sb.state().await?, SandboxState::Running);
    assert_eq!(pool.status().recycled, 1);
    drop(sb);
    pool.shutdown().await?;

    let (pool, provider) = scripted_pool(PoolConfig::with_size(0));
    let sb = pool.acquire("t").await?;
    assert!(!sb.from_pool());
    assert_eq!(sb.state().await?, SandboxState::Running);
    assert_eq!(provider.sandboxes().len(), 1);
    drop(sb);
    pool.shutdown().await?;
    assert_eq!(removed(&provider).await, 1);
    Ok(())
}
