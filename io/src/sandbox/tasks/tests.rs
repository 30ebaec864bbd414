//! The task runner against the scripted double (every mapping, deterministic) and against the
//! real Docker Engine (these fail, never skip, when Docker is missing).

use std::sync::Arc;
use std::time::Duration;

use chorus_core::{
    task::MAX_TAIL_BYTES, Config, Core, Event, RepoMount as TaskRepo, SandboxExit, TaskId, TaskSpec,
};

use super::*;
use crate::sandbox::docker::DockerProvider;
use crate::sandbox::double::{Op, ScriptedExec, ScriptedProvider};
use crate::sandbox::image::ensure_sandbox_image;
use crate::sandbox::{ErrorCategory, ExecutionSandbox, SandboxError, SandboxState};

fn task(seq: u64) -> TaskId {
    TaskId {
        origin: "sub".into(),
        seq,
    }
}

fn spec(image: &str, command: &[&str]) -> SharedSpec {
    Arc::new(TaskSpec {
        image: image.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        timeout_ms: 30_000,
        ..TaskSpec::default()
    })
}

/// The next end, with a bound so a lost end fails the test instead of hanging it.
async fn end<P: SandboxProvider + Clone + 'static>(runner: &mut TaskRunner<P>) -> Event {
    tokio::time::timeout(Duration::from_secs(120), runner.next_exit())
        .await
        .expect("a run ended within 120 s")
}

fn exited(event: Event) -> (TaskId, u32, SandboxExit) {
    match event {
        Event::SandboxExited {
            task,
            attempt,
            exit,
        } => (task, attempt, exit),
        other => panic!("expected an exit, got {other:?}"),
    }
}

fn fresh_config(node: &str) -> TaskRunnerConfig {
    TaskRunnerConfig {
        pool_size: 0,
        ..TaskRunnerConfig::new(node)
    }
}

#[tokio::test]
async fn a_fresh_run_creates_starts_execs_and_removes_its_sandbox() {
    let provider = ScriptedProvider::new();
    let mut runner = TaskRunner::new(provider.clone(), fresh_config("n1"));
    runner.start(&task(1), 1, &spec("img", &["echo", "hi"]));
    let (t, attempt, exit) = exited(end(&mut runner).await);
    assert_eq!((t, attempt), (task(1), 1));
    assert_eq!(exit.exit_code, Some(0));
    assert!(!exit.oom && !exit.timed_out && exit.signal.is_none());
    let made = provider.sandboxes();
    assert_eq!(made.len(), 1);
    let ops: Vec<Op> = made[0].calls().iter().map(|c| c.op).collect();
    // The run's totals are read before its sandbox goes.
    assert_eq!(
        ops,
        [Op::Create, Op::Start, Op::Exec, Op::Usage, Op::Remove]
    );
    assert_eq!(made[0].calls()[2].detail, "echo hi");
    assert_eq!(runner.running(), 0);
    let stats = runner.stats().snapshot();
    assert_eq!((stats.started, stats.pool_hits, stats.failed), (1, 0, 0));
}

#[tokio::test]
async fn sandbox_errors_keep_their_category_and_retryable_flag() {
    let provider = ScriptedProvider::new();
    let mut runner = TaskRunner::new(provider.clone(), fresh_config("n1"));
    provider.fail_next_create(SandboxError::new(ErrorCategory::DaemonUnavailable, "down"));
    runner.start(&task(1), 1, &spec("img", &["true"]));
    match end(&mut runner).await {
        Event::SandboxFailed {
            task: t,
            error,
            retryable,
            ..
        } => {
            assert_eq!(t, task(1));
            assert_eq!(error, "daemon_unavailable: down");
            assert!(retryable);
        }
        other => panic!("{other:?}"),
    }
    provider.fail_next_create(SandboxError::new(ErrorCategory::Image, "no such image"));
    runner.start(&task(2), 1, &spec("img", &["true"]));
    match end(&mut runner).await {
        Event::SandboxFailed {
            error, retryable, ..
        } => {
            assert_eq!(error, "image: no such image");
            assert!(!retryable);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(runner.stats().snapshot().failed, 2);
}

/// Issue 33: the worker, not the task author, decides how much of its host a task may take: a
/// spec above a ceiling fails before any sandbox is made, naming the ceiling, and is not retried.
#[tokio::test]
async fn a_spec_above_the_workers_ceilings_fails_without_a_sandbox() {
    let provider = ScriptedProvider::new();
    let config = TaskRunnerConfig {
        ceilings: Ceilings {
            memory_mb: Some(1_024),
            ..Ceilings::default()
        },
        ..fresh_config("n1")
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    let mut greedy = (*spec("img", &["true"])).clone();
    greedy.memory_mb = 1_048_576;
    runner.start(&task(1), 1, &Arc::new(greedy));
    match end(&mut runner).await {
        Event::SandboxFailed {
            error, retryable, ..
        } => {
            assert!(
                error.contains("max_memory_mb") && error.contains("1048576"),
                "{error}"
            );
            assert!(!retryable);
        }
        other => panic!("{other:?}"),
    }
    assert!(provider.sandboxes().is_empty(), "no sandbox made");
    runner.start(&task(2), 1, &spec("img", &["true"]));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "a spec within the ceilings runs");
}

/// Timeout and OOM come from the sandbox as errors; a run reports them as exits the core turns
/// into `timed_out` and `out_of_memory`, with the output's tail.
#[tokio::test]
async fn timeouts_and_oom_kills_are_exits_and_output_keeps_its_tail() {
    let provider = ScriptedProvider::new();
    let config = TaskRunnerConfig {
        pool_size: 1,
        warm_images: vec!["img".into()],
        ..TaskRunnerConfig::new("n1")
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    type Check = fn(&SandboxExit);
    let cases: [(ScriptedExec, Check); 3] = [
        (
            ScriptedExec::error(ErrorCategory::Timeout, "slow"),
            |e: &SandboxExit| assert!(e.timed_out && e.signal == Some(9) && !e.oom, "{e:?}"),
        ),
        (
            ScriptedExec::error(ErrorCategory::ResourceLimit, "oom"),
            |e: &SandboxExit| assert!(e.oom && e.exit_code == Some(137), "{e:?}"),
        ),
        (
            ScriptedExec::output(3, "x".repeat(MAX_TAIL_BYTES) + "END"),
            |e: &SandboxExit| assert_eq!(e.exit_code, Some(3), "{e:?}"),
        ),
    ];
    for (seq, (script, check)) in (1..).zip(cases) {
        // Script the sandbox the pool holds ready (the pool keeps one; each run takes it).
        let ready = wait_for(|| {
            provider.sandboxes().into_iter().find(|s| {
                s.calls()
                    .iter()
                    .all(|c| c.op != Op::Exec && c.op != Op::Remove)
            })
        })
        .await;
        ready.push_exec(script);
        runner.start(&task(seq), 1, &spec("img", &["work"]));
        let (_, _, exit) = exited(end(&mut runner).await);
        check(&exit);
        if seq == 3 {
            // The double cuts output at the request's cap (as Docker keeps the head); the
            // stream the runner reads still ends in what the command wrote last.
            assert_eq!(exit.stdout.len(), MAX_TAIL_BYTES);
        }
    }
    assert_eq!(runner.stats().snapshot().pool_hits, 3);
}

/// Polls `f` until it returns something (bounded).
async fn wait_for<T>(f: impl Fn() -> Option<T>) -> T {
    for _ in 0..1_000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition never held");
}

#[tokio::test]
async fn recovery_reaps_what_this_node_left_and_only_that() {
    let provider = ScriptedProvider::new();
    let policy = SandboxPolicy::default();
    let mine = provider
        .create(&SandboxSpec::new("n1", "old", "img"), &policy)
        .await
        .unwrap();
    let theirs = provider
        .create(&SandboxSpec::new("n2", "old", "img"), &policy)
        .await
        .unwrap();
    let mut runner = TaskRunner::new(provider.clone(), fresh_config("n1"));
    let core = Core::new("n1".into(), Config::default(), vec![], 1).unwrap();
    runner.recovered(&core).await;
    assert_eq!(mine.state().await.unwrap(), SandboxState::Removed);
    assert_eq!(theirs.state().await.unwrap(), SandboxState::Created);
}

#[tokio::test]
async fn a_task_needing_a_repository_this_node_lacks_fails_without_retry() {
    let provider = ScriptedProvider::new();
    let mut runner = TaskRunner::new(provider.clone(), TaskRunnerConfig::new("n1"));
    let mut s = (*spec("img", &["ls"])).clone();
    s.repo = Some(TaskRepo {
        name: "src".into(),
        writable: false,
    });
    runner.start(&task(1), 1, &Arc::new(s));
    match end(&mut runner).await {
        Event::SandboxFailed {
            error, retryable, ..
        } => {
            assert!(error.starts_with("policy_violation:"), "{error}");
            assert!(!retryable);
        }
        other => panic!("{other:?}"),
    }
    assert!(provider.sandboxes().is_empty(), "nothing was made");
}

// ---- The real Docker Engine ----

async fn docker() -> (DockerProvider, String) {
    let provider = DockerProvider::connect()
        .await
        .expect("this test needs a reachable Docker Engine");
    let image = ensure_sandbox_image(provider.docker())
        .await
        .expect("the sandbox test image");
    (provider, image)
}

/// Containers of node `node` (any state), by label.
async fn containers_of(provider: &DockerProvider, node: &str) -> usize {
    use bollard::query_parameters::ListContainersOptionsBuilder;
    let filters: std::collections::HashMap<&str, Vec<String>> =
        [("label", vec![format!("io.chorus.node={node}")])].into();
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    provider
        .docker()
        .list_containers(Some(options))
        .await
        .expect("list containers")
        .len()
}

fn test_node(name: &str) -> String {
    format!("test-tasks-{name}-{}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_runs_a_task_with_its_env_workdir_and_exit_code_from_a_warm_pool() {
    let (provider, image) = docker().await;
    let node = test_node("run");
    let config = TaskRunnerConfig {
        pool_size: 1,
        warm_images: vec![image.clone()],
        ..TaskRunnerConfig::new(&node)
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    let mut s = (*spec(
        &image,
        &[
            "sh",
            "-c",
            "echo \"$GREETING from $(pwd)\"; echo oops >&2; exit 7",
        ],
    ))
    .clone();
    s.env.insert("GREETING".into(), "hello".into());
    s.workdir = Some("/tmp".into());
    // Let the pool fill, so the run takes a warm sandbox.
    let shape = TaskShape::default_of(image.clone());
    wait_until(|| async { runner.pool_status(&shape).is_some_and(|s| s.idle == 1) }).await;
    runner.start(&task(1), 1, &Arc::new(s));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(7), "{exit:?}");
    assert_eq!(exit.stdout, "hello from /tmp\n");
    assert_eq!(exit.stderr, "oops\n");
    assert!(!exit.oom && !exit.timed_out);
    assert_eq!(runner.stats().snapshot().pool_hits, 1);
    drop(runner);
    // The used sandbox is removed; dropping the pool removes the idle one.
    wait_until(|| async { containers_of(&provider, &node).await == 0 }).await;
}

/// The tails are the last 8 KiB of each stream, and the bytes before them are counted: 9,000
/// bytes of `\x01` keep 8,192 and say 808 went (the core cuts further, to fit a frame).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_counts_the_output_dropped_before_each_tail() {
    let (provider, image) = docker().await;
    let node = test_node("tails");
    let mut runner = TaskRunner::new(provider.clone(), fresh_config(&node));
    let ones = "head -c 9000 /dev/zero | tr '\\0' '\\1'; echo oops >&2";
    runner.start(&task(1), 1, &spec(&image, &["sh", "-c", ones]));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "{:?}", exit.stderr);
    assert_eq!(exit.stdout, "\u{1}".repeat(MAX_TAIL_BYTES));
    assert_eq!(exit.stdout_truncated_bytes, 9_000 - MAX_TAIL_BYTES as u64);
    assert_eq!(
        (exit.stderr.as_str(), exit.stderr_truncated_bytes),
        ("oops\n", 0)
    );
    drop(runner);
    wait_until(|| async { containers_of(&provider, &node).await == 0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_reports_the_cpu_time_and_peak_memory_a_run_used() {
    let (provider, image) = docker().await;
    let node = test_node("usage");
    let mut runner = TaskRunner::new(provider.clone(), fresh_config(&node));
    // A shell variable of 24 MiB (memory), then a counting loop (CPU).
    let busy = "x=$(head -c 25165824 /dev/zero | tr '\\0' a); \
                i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo ${#x}";
    runner.start(&task(1), 1, &spec(&image, &["sh", "-c", busy]));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
    assert_eq!(exit.stdout, "25165824\n");
    assert!(exit.usage.cpu_ms >= 50, "{:?}", exit.usage);
    assert!(exit.usage.peak_memory_kb >= 24 * 1024, "{:?}", exit.usage);
    // An idle run's totals are small: the figures are the run's, not the machine's.
    runner.start(&task(2), 1, &spec(&image, &["true"]));
    let (_, _, idle) = exited(end(&mut runner).await);
    assert!(idle.usage.cpu_ms < exit.usage.cpu_ms, "{:?}", idle.usage);
    assert!(idle.usage.peak_memory_kb < 24 * 1024, "{:?}", idle.usage);
    assert_eq!(containers_of(&provider, &node).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_reports_timeouts_oom_kills_and_cancellations() {
    let (provider, image) = docker().await;
    let node = test_node("ends");
    let mut runner = TaskRunner::new(provider.clone(), fresh_config(&node));

    let mut slow = (*spec(&image, &["sh", "-c", "echo started; sleep 30"])).clone();
    slow.timeout_ms = 1_000;
    runner.start(&task(1), 1, &Arc::new(slow));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert!(exit.timed_out, "{exit:?}");
    assert_eq!(exit.stdout, "started\n", "output before the kill is kept");

    let mut hog = (*spec(
        &image,
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"],
    ))
    .clone();
    hog.memory_mb = 32;
    runner.start(&task(2), 1, &Arc::new(hog));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert!(exit.oom, "{exit:?}");

    runner.start(&task(3), 1, &spec(&image, &["sleep", "60"]));
    wait_until(|| async { containers_of(&provider, &node).await == 1 }).await;
    runner.stop(&task(3), 1);
    let (t, _, exit) = exited(end(&mut runner).await);
    assert_eq!(t, task(3));
    assert_eq!(exit.signal, Some(9), "{exit:?}");
    assert!(!exit.timed_out);
    assert_eq!(
        containers_of(&provider, &node).await,
        0,
        "the stopped run's sandbox is gone"
    );
}

/// Issue 33: a run never outlives its node's graceful stop — the shutdown handle (used after
/// the runtime loop returned) stops every run still going and waits until its sandbox is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_graceful_stop_ends_every_run_and_removes_its_sandbox() {
    let (provider, image) = docker().await;
    let node = test_node("stop");
    let mut runner = TaskRunner::new(provider.clone(), fresh_config(&node));
    runner.start(&task(1), 1, &spec(&image, &["sleep", "600"]));
    runner.start(&task(2), 1, &spec(&image, &["sleep", "600"]));
    wait_until(|| async { containers_of(&provider, &node).await == 2 }).await;
    let began = std::time::Instant::now();
    runner.shutdown_handle().shutdown().await;
    assert_eq!(
        containers_of(&provider, &node).await,
        0,
        "no sandbox left after the stop"
    );
    assert!(began.elapsed() < STOP_RUNS_BOUND, "{:?}", began.elapsed());
    assert_eq!(runner.running(), 0);
    for _ in 0..2 {
        let (_, _, exit) = exited(end(&mut runner).await);
        assert_eq!(exit.signal, Some(9), "{exit:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_mounts_a_configured_repository_read_only_or_read_write() {
    let (provider, image) = docker().await;
    let node = test_node("repo");
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap().join("src");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("README"), "in the repo\n").unwrap();
    let provider = provider.with_repo_roots(crate::sandbox::repo::RepoRoots::new([&repo]).unwrap());
    let mut config = TaskRunnerConfig::new(&node);
    config.repos.insert("src".into(), repo.clone());
    let mut runner = TaskRunner::new(provider.clone(), config);
    let with_repo = |command: &[&str], writable| {
        let mut s = (*spec(&image, command)).clone();
        s.repo = Some(TaskRepo {
            name: "src".into(),
            writable,
        });
        Arc::new(s)
    };
    runner.start(
        &task(1),
        1,
        &with_repo(&["sh", "-c", "cat README; echo x > new"], false),
    );
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.stdout, "in the repo\n");
    assert_ne!(exit.exit_code, Some(0), "read-only: the write fails");
    assert!(!repo.join("new").exists());
    runner.start(
        &task(2),
        1,
        &with_repo(&["sh", "-c", "echo made > new"], true),
    );
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("new")).unwrap(),
        "made\n",
        "read-write: the change is back in the repository when the result is"
    );
    assert_eq!(containers_of(&provider, &node).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_recovery_reaps_the_containers_a_dead_process_of_this_node_left() {
    let (provider, image) = docker().await;
    let node = test_node("reap");
    // A sandbox owned by a process that is gone (a child that exited), as a crashed node
    // leaves them. The child blocks on its stdin until its owner identity is read: a child
    // that exits at once can be gone from /proc before it is read.
    let mut child = std::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let owner = crate::sandbox::owner::Owner::of_process(child.id()).unwrap();
    drop(child.stdin.take());
    child.wait().unwrap();
    let dead = provider.clone().with_owner(owner);
    let left = dead
        .create(
            &SandboxSpec::new(&node, "t", &image),
            &SandboxPolicy::default(),
        )
        .await
        .unwrap();
    left.start().await.unwrap();
    assert_eq!(containers_of(&provider, &node).await, 1);
    let mut runner = TaskRunner::new(provider.clone(), fresh_config(&node));
    let core = Core::new(node.as_str().into(), Config::default(), vec![], 1).unwrap();
    runner.recovered(&core).await;
    assert_eq!(containers_of(&provider, &node).await, 0);
}

async fn wait_until<F, Fut>(f: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..600 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the condition did not hold within 60 s");
}

#[tokio::test]
async fn shutdown_removes_the_warm_pools_sandboxes() {
    let provider = ScriptedProvider::new();
    let config = TaskRunnerConfig {
        pool_size: 2,
        warm_images: vec!["a".into(), "b".into()],
        ..TaskRunnerConfig::new("n1")
    };
    let runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    wait_for(|| (provider.sandboxes().len() == 4).then_some(())).await;
    let handle = runner.shutdown_handle();
    drop(runner);
    assert_eq!(handle.shutdown().await, 2);
    for s in provider.sandboxes() {
        assert_eq!(s.state().await.unwrap(), SandboxState::Removed);
    }
}
