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

/// A warmed-up runner on `provider` that reuses sandboxes, two kept at most (so one
/// submitter's does not push another's out).
fn reusing_runner(provider: &ScriptedProvider) -> TaskRunner<ScriptedProvider> {
    let config = TaskRunnerConfig {
        pool_size: 2,
        warm_images: vec!["img".into()],
        reuse: true,
        ..TaskRunnerConfig::new("n1")
    };
    let runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    runner
}

/// A `work` task of `submitter`'s.
fn work_of(submitter: &str) -> SharedSpec {
    Arc::new(TaskSpec {
        submitter: Some(submitter.into()),
        ..(*spec("img", &["work"])).clone()
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

/// Issue 36, rule 1: with reuse on, a pooled sandbox whose command exited by itself goes, reset,
/// to the next run with the same origin and submitter — never to another submitter's, and never
/// after a run that timed out.
#[tokio::test]
async fn a_sandbox_is_reused_only_for_its_submitter_and_only_after_a_clean_exit() {
    let provider = ScriptedProvider::new();
    let mut runner = reusing_runner(&provider);
    let of = |who: &str| work_of(who);
    let ops = |id: &str, op: Op| {
        provider
            .sandboxes()
            .iter()
            .find(|s| s.id() == id)
            .map_or(0, |s| s.calls().iter().filter(|c| c.op == op).count())
    };
    let ran_in = |seq: u64| {
        let needle = format!("{}", task(seq));
        provider
            .sandboxes()
            .into_iter()
            .find(|s| {
                s.calls()
                    .iter()
                    .any(|c| c.op == Op::Exec && c.detail == "work")
                    && s.env().get(crate::sandbox::pool::TASK_ENV) == Some(&needle)
            })
            .map(|s| s.id().to_owned())
            .expect("a sandbox ran it")
    };
    wait_for(|| (!provider.sandboxes().is_empty()).then_some(())).await;
    runner.start(&task(1), 1, &of("alice"));
    exited(end(&mut runner).await);
    let first = ran_in(1);
    wait_for(|| (ops(&first, Op::Reset) == 1).then_some(())).await;
    // Another submitter's run gets another sandbox.
    runner.start(&task(2), 1, &of("bob"));
    exited(end(&mut runner).await);
    assert_ne!(ran_in(2), first);
    // The same submitter's next run gets the reset one, armed again.
    runner.start(&task(3), 1, &of("alice"));
    exited(end(&mut runner).await);
    assert_eq!(ran_in(3), first);
    assert_eq!(ops(&first, Op::EndAfter), 2);
    assert_eq!(ops(&first, Op::Remove), 0);
    // A run that times out: its sandbox is removed, not reset.
    wait_for(|| (ops(&first, Op::Reset) == 2).then_some(())).await;
    let kept = provider
        .sandboxes()
        .into_iter()
        .find(|s| s.id() == first)
        .unwrap();
    kept.push_exec(ScriptedExec::error(ErrorCategory::Timeout, "slow"));
    runner.start(&task(4), 1, &of("alice"));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert!(exit.timed_out);
    wait_for(|| (ops(&first, Op::Remove) == 1).then_some(())).await;
    assert_eq!(ops(&first, Op::Reset), 2);
}

/// Issue 36: where a sandbox resets in its next command's exec, giving it back costs no reset
/// (it is kept as it is), the next run of its submitter goes after the reset, and a reset that
/// refuses the sandbox (NotClean) sends that run to another sandbox — the run succeeds, the
/// refused one is removed and counted as a failed reset.
#[tokio::test]
async fn a_kept_sandbox_is_reset_in_the_next_runs_exec_and_a_refused_one_is_replaced() {
    let provider = ScriptedProvider::new();
    provider.reset_in_exec();
    let mut runner = reusing_runner(&provider);
    let alice = work_of("alice");
    let resets = |s: &crate::sandbox::double::ScriptedSandbox| {
        s.calls()
            .iter()
            .filter(|c| c.op == Op::Reset)
            .map(|c| c.detail.clone())
            .collect::<Vec<_>>()
    };
    let ran = |seq: u64| {
        let needle = format!("{}", task(seq));
        provider
            .sandboxes()
            .into_iter()
            .find(|s| s.env().get(crate::sandbox::pool::TASK_ENV) == Some(&needle))
            .expect("a sandbox ran it")
    };
    wait_for(|| (!provider.sandboxes().is_empty()).then_some(())).await;
    runner.start(&task(1), 1, &alice);
    exited(end(&mut runner).await);
    let first = ran(1);
    // Given back without a reset of its own.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(resets(&first).is_empty(), "{:?}", first.calls());
    runner.start(&task(2), 1, &alice);
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0));
    assert_eq!(ran(2).id(), first.id());
    assert_eq!(resets(&first), ["in exec"]);
    // Its next reset refuses it: the run goes to another sandbox and succeeds.
    first.fail_next(
        Op::Reset,
        SandboxError::new(ErrorCategory::Exec, "a process survives"),
    );
    runner.start(&task(3), 1, &alice);
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
    let needle = format!("{}", task(3));
    let third = provider
        .sandboxes()
        .into_iter()
        .find(|s| {
            s.id() != first.id() && s.env().get(crate::sandbox::pool::TASK_ENV) == Some(&needle)
        })
        .expect("another sandbox ran it");
    assert!(third
        .calls()
        .iter()
        .any(|c| c.op == Op::Exec && c.detail == "work"));
    wait_for(|| {
        first
            .calls()
            .iter()
            .any(|c| c.op == Op::Remove)
            .then_some(())
    })
    .await;
    let status = runner
        .pool_status(&TaskShape::default_of("img".to_owned()))
        .expect("the pool");
    assert_eq!((status.reuses, status.failed_resets), (2, 1), "{status:?}");
}

/// Issue 33: a pooled sandbox (made before the run, to live an hour) is armed to end at the
/// run's timeout plus the grace before the command starts; a fresh one is not (its lifetime says
/// the same). A sandbox that cannot be armed still runs the task.
#[tokio::test]
async fn a_pooled_run_arms_its_sandboxes_end_and_runs_on_where_it_cannot() {
    let provider = ScriptedProvider::new();
    let config = TaskRunnerConfig {
        pool_size: 1,
        warm_images: vec!["img".into()],
        run_grace: Duration::from_secs(7),
        ..TaskRunnerConfig::new("n1")
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    for (seq, can_end) in [(1, true), (2, false)] {
        let ready = wait_for(|| {
            provider.sandboxes().into_iter().find(|s| {
                s.calls()
                    .iter()
                    .all(|c| c.op != Op::Exec && c.op != Op::Remove)
            })
        })
        .await;
        if !can_end {
            ready.fail_next(
                Op::EndAfter,
                SandboxError::new(ErrorCategory::Unsupported, "no sleep in the image"),
            );
        }
        runner.start(&task(seq), 1, &spec("img", &["work"]));
        let (_, _, exit) = exited(end(&mut runner).await);
        assert_eq!(exit.exit_code, Some(0), "{exit:?}");
        let calls = ready.calls();
        let armed = calls.iter().position(|c| c.op == Op::EndAfter);
        let exec = calls.iter().position(|c| c.op == Op::Exec);
        assert!(armed < exec && armed.is_some(), "{calls:?}");
        assert_eq!(
            calls[armed.unwrap()].detail,
            "37000ms",
            "timeout 30 s + grace 7 s"
        );
    }

    let fresh = ScriptedProvider::new();
    let mut runner = TaskRunner::new(fresh.clone(), fresh_config("n1"));
    runner.start(&task(3), 1, &spec("img", &["work"]));
    exited(end(&mut runner).await);
    assert!(fresh.sandboxes()[0]
        .calls()
        .iter()
        .all(|c| c.op != Op::EndAfter));
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

/// Issue 33: after recovery a runner removes the stale sandboxes of any node on its host every
/// period — one whose owner died goes within a period — spares live owners', counts what it
/// removed, and stops with the runner's shutdown. (Paused clock: the periods cost no time.)
#[tokio::test(start_paused = true)]
async fn recovery_starts_a_periodic_reap_of_every_owners_stale_sandboxes() {
    let provider = ScriptedProvider::new();
    let config = TaskRunnerConfig {
        reap_period: REAP_PERIOD,
        ..fresh_config("n1")
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    let core = Core::new("n1".into(), Config::default(), vec![], 1).unwrap();
    runner.recovered(&core).await;
    let policy = SandboxPolicy::default();
    let theirs = provider
        .create(&SandboxSpec::new("n2", "t", "img"), &policy)
        .await
        .unwrap();
    tokio::time::sleep(REAP_PERIOD * 3).await;
    assert_eq!(
        theirs.state().await.unwrap(),
        SandboxState::Created,
        "live owner"
    );
    theirs.orphan();
    let orphaned_at = tokio::time::Instant::now();
    while theirs.state().await.unwrap() != SandboxState::Removed {
        assert!(
            orphaned_at.elapsed() <= REAP_PERIOD,
            "not reaped within a period"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(runner.stats().snapshot().reaped, 1);

    runner.shutdown_handle().shutdown().await;
    let after = provider
        .create(&SandboxSpec::new("n2", "u", "img"), &policy)
        .await
        .unwrap();
    after.orphan();
    tokio::time::sleep(REAP_PERIOD * 3).await;
    assert_eq!(
        after.state().await.unwrap(),
        SandboxState::Created,
        "stopped"
    );
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

/// A runner of node `test_node(name)` on Docker with a warm pool of one sandbox of the test
/// image, returned once that sandbox is ready (so a run takes it); `reuse`: sandboxes are kept
/// for their submitter. Also the provider, the image and the node.
async fn warm_docker_runner(
    name: &str,
    reuse: bool,
) -> (DockerProvider, String, String, TaskRunner<DockerProvider>) {
    let (provider, image) = docker().await;
    let node = test_node(name);
    let config = TaskRunnerConfig {
        pool_size: 1,
        reuse,
        warm_images: vec![image.clone()],
        ..TaskRunnerConfig::new(&node)
    };
    let runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    let shape = TaskShape::default_of(image.clone());
    wait_until(|| async { runner.pool_status(&shape).is_some_and(|s| s.idle == 1) }).await;
    (provider, image, node, runner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_runs_a_task_with_its_env_workdir_and_exit_code_from_a_warm_pool() {
    let (provider, image, node, mut runner) = warm_docker_runner("run", false).await;
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

/// Issue 36: a sandbox kept for its submitter is not reset when given back (no exec then):
/// the next run of that submitter takes it, and its command goes after the reset in its own
/// exec — it finds nothing of the run before (no file, no process), and gets its own
/// environment and working directory. The pool counts the reuse and no failed reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_kept_sandbox_runs_the_next_task_after_a_reset_in_the_same_exec() {
    let (provider, image, node, mut runner) = warm_docker_runner("keptreset", true).await;
    let shape = TaskShape::default_of(image.clone());
    let with = |command: &str| {
        let mut s = (*spec(&image, &["sh", "-c", command])).clone();
        s.submitter = Some("alice".into());
        Arc::new(s)
    };
    let first = with("echo x > /tmp/left; sleep 300 & echo $HOSTNAME-$(cat /proc/1/cpuset)");
    runner.start(&task(1), 1, &first);
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
    let mut second = (*with(
        "ls -A /tmp | grep -c . ; ps -A -o comm | grep -c '^sleep$'; echo \"$GREETING $(pwd)\"",
    ))
    .clone();
    second.env.insert("GREETING".into(), "hello".into());
    second.workdir = Some("/workspace".into());
    runner.start(&task(2), 1, &Arc::new(second));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
    // No file; the supervisor's two sleepers (its lifetime's and this run's end) only.
    assert_eq!(exit.stdout, "0\n2\nhello /workspace\n", "{exit:?}");
    let status = runner.pool_status(&shape).expect("the pool");
    assert_eq!((status.reuses, status.failed_resets), (1, 0), "{status:?}");
    drop(runner);
    wait_until(|| async { containers_of(&provider, &node).await == 0 }).await;
}

/// Issue 51, finding 8: what a finished run left running — a CPU spinner in a session of its
/// own — is killed when its sandbox is kept for its submitter, within a helper exec of the
/// run's end, not at the next run's reset or the armed end (`max_dirty_keep`, 30 s). Before,
/// the spinner ran on nobody's account until then. The sandbox is still kept and reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_what_a_finished_run_left_running_is_killed_when_its_sandbox_is_kept() {
    let (provider, image, node, mut runner) = warm_docker_runner("leftovers", true).await;
    let shape = TaskShape::default_of(image.clone());
    let with = |command: &str| {
        let mut s = (*spec(&image, &["sh", "-c", command])).clone();
        s.submitter = Some("alice".into());
        Arc::new(s)
    };
    // It says the spinner runs as it ends.
    let spinner = "setsid sh -c 'while :; do :; done' >/dev/null 2>&1 < /dev/null & \
                   sleep 0.2; ps -A -o args | grep -c '^sh -c while'";
    runner.start(&task(1), 1, &with(spinner));
    let (_, _, exit) = exited(end(&mut runner).await);
    let ended = std::time::Instant::now();
    assert_eq!(exit.stdout, "1\n", "{exit:?}");
    // The kept sandbox and the pool's refill.
    let ids = container_ids_of(&provider, &node).await;
    let spinning = || async {
        for id in &ids {
            if commands_in(&provider, id)
                .await
                .iter()
                .any(|c| c.contains("while :"))
            {
                return true;
            }
        }
        false
    };
    wait_until(|| async { !spinning().await }).await;
    let gone = ended.elapsed();
    assert!(
        gone < Duration::from_secs(10),
        "the spinner ran {gone:?} after its run ended"
    );
    // Kept all the same: the submitter's next run takes it, after its reset.
    runner.start(&task(2), 1, &with("echo again"));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.stdout, "again\n", "{exit:?}");
    let status = runner.pool_status(&shape).expect("the pool");
    assert_eq!((status.reuses, status.failed_resets), (1, 0), "{status:?}");
    eprintln!("the spinner was gone {gone:?} after its run ended");
    drop(runner);
    wait_until(|| async { containers_of(&provider, &node).await == 0 }).await;
}

/// Issue 33: a workdir that does not exist in the sandbox fails the run saying so, not
/// retried (it would not exist the next time either), pooled or fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_missing_workdir_says_so() {
    let (provider, image) = docker().await;
    let node = test_node("workdir");
    for pool_size in [1, 0] {
        let config = TaskRunnerConfig {
            pool_size,
            ..TaskRunnerConfig::new(&node)
        };
        let mut runner = TaskRunner::new(provider.clone(), config);
        let mut s = (*spec(&image, &["true"])).clone();
        s.workdir = Some("/x".into());
        runner.start(&task(1), 1, &Arc::new(s));
        match end(&mut runner).await {
            Event::SandboxFailed {
                error, retryable, ..
            } => {
                assert!(
                    error.contains("workdir /x does not exist in the sandbox"),
                    "{error}"
                );
                assert!(!retryable, "{error}");
            }
            other => panic!("pool size {pool_size}: {other:?}"),
        }
        runner.shutdown_handle().shutdown().await;
    }
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

    // Issue 33: memory that stays full (a tmpfs file the OOM killer cannot free) leaves no room
    // for a check inside the sandbox; the host's counter says OOM, although the shell exits 0.
    let mut filler = (*spec(
        &image,
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/workspace/fill bs=1M count=64; echo done",
        ],
    ))
    .clone();
    filler.memory_mb = 32;
    runner.start(&task(4), 1, &Arc::new(filler));
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

/// A graceful stop removes every sandbox labelled with its node, not only those its runs and
/// pools hold: here one made behind the runner's back, as a creation a killed earlier process
/// had in flight lands after the restart's reap (the real-fault soak left one such container).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_graceful_stop_removes_the_nodes_sandboxes_no_run_holds() {
    let (provider, image) = docker().await;
    let node = test_node("stray");
    let runner = TaskRunner::new(provider.clone(), fresh_config(&node));
    let stray = provider
        .create(
            &crate::sandbox::SandboxSpec::new(&node, "stray", &image),
            &crate::sandbox::SandboxPolicy::default(),
        )
        .await
        .expect("a sandbox outside the runner");
    stray.start().await.expect("it starts");
    assert_eq!(containers_of(&provider, &node).await, 1);
    runner.shutdown_handle().shutdown().await;
    assert_eq!(
        containers_of(&provider, &node).await,
        0,
        "the stop left a sandbox of its node"
    );
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
    // A sandbox owned by a process that is gone, as a crashed node leaves them.
    let dead = provider.clone().with_owner(dead_owner());
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

/// An owner that is gone: a child that ran and exited. The child blocks on its stdin until its
/// identity is read (one that exits at once can be gone from /proc before it is read).
fn dead_owner() -> crate::sandbox::owner::Owner {
    let mut child = std::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let owner = crate::sandbox::owner::Owner::of_process(child.id()).unwrap();
    drop(child.stdin.take());
    child.wait().unwrap();
    owner
}

/// Whether the container `id` exists (in any state).
async fn exists(provider: &DockerProvider, id: &str) -> bool {
    provider.docker().inspect_container(id, None).await.is_ok()
}

/// Issue 33: the periodic reap of a node with Docker tasks removes the sandbox a dead owner of
/// another node left (as `kill -9` of that node leaves it) within a period, without waiting for
/// that node to start again, and spares a live owner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_the_periodic_reap_removes_a_dead_owners_sandbox_of_any_node() {
    let (provider, image) = docker().await;
    let node = test_node("periodic");
    let other = test_node("periodic-other");
    let policy = SandboxPolicy::default();
    let left = provider
        .clone()
        .with_owner(dead_owner())
        .create(&SandboxSpec::new(&other, "left", &image), &policy)
        .await
        .unwrap();
    left.start().await.unwrap();
    let live = provider
        .create(&SandboxSpec::new(&other, "live", &image), &policy)
        .await
        .unwrap();
    let period = Duration::from_secs(2);
    let config = TaskRunnerConfig {
        reap_period: period,
        ..fresh_config(&node)
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    let core = Core::new(node.as_str().into(), Config::default(), vec![], 1).unwrap();
    runner.recovered(&core).await;
    assert!(
        exists(&provider, left.id()).await,
        "recovery reaps its own node's only"
    );
    wait_until(|| async { !exists(&provider, left.id()).await }).await;
    // Not asserted: that this runner's counter took it — any other node on the host may have
    // reaped it first. The count itself is the scripted test's.
    assert!(
        exists(&provider, live.id()).await,
        "a live owner's sandbox is spared"
    );
    runner.shutdown_handle().shutdown().await;
    live.remove().await.unwrap();
}

/// The command lines running in container `id`, as `docker top` lists them (none once it is
/// not running).
async fn commands_in(provider: &DockerProvider, id: &str) -> Vec<String> {
    let Ok(top) = provider.docker().top_processes(id, None).await else {
        return Vec::new();
    };
    let column = top
        .titles
        .unwrap_or_default()
        .iter()
        .position(|t| t == "CMD")
        .expect("docker top lists CMD");
    top.processes
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.get(column).cloned())
        .collect()
}

/// The containers of node `node` (any state).
async fn container_ids_of(provider: &DockerProvider, node: &str) -> Vec<String> {
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
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// Issues 33 and 36: a run never outlives its task, even when its node dies or hangs. The
/// runner runs on a runtime of its own, and nothing on the host kills the command, cleans up or
/// removes the sandbox afterwards (no periodic reap runs either):
/// - **gone** (the runtime dropped mid-run, as `kill -9` of the node ends it): the sandbox ends
///   at once — its supervisor's stdin closed with the node's connections — well before the run's
///   timeout plus the grace;
/// - **hung** (the runtime leaked and never polled again, as a stopped node holds its
///   connections): the command goes on, and the sandbox still ends by itself at the run's
///   timeout plus the grace — a pooled one (its own lifetime is an hour) by the end the run
///   armed, a fresh one by its lifetime.
#[test]
fn docker_a_run_ends_with_its_node_or_by_its_timeout_and_grace() {
    let checks = tokio::runtime::Runtime::new().unwrap();
    let (provider, image) = checks.block_on(docker());
    for (pooled, hung) in [(true, false), (false, false), (true, true), (false, true)] {
        let node = test_node(&format!(
            "orphan-{}-{}",
            if pooled { "pooled" } else { "fresh" },
            if hung { "hung" } else { "gone" }
        ));
        let config = TaskRunnerConfig {
            pool_size: usize::from(pooled),
            run_grace: Duration::from_secs(5),
            reap_period: Duration::ZERO,
            ..TaskRunnerConfig::new(&node)
        };
        let mut command = (*spec(&image, &["sleep", "600"])).clone();
        command.timeout_ms = 5_000;
        // The node's own runtime and Engine connections: they go with it, or hang with it.
        let node_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sandbox = node_runtime.block_on(async {
            let (provider, _) = docker().await;
            let mut runner = TaskRunner::new(provider.clone(), config);
            runner.start(&task(1), 1, &Arc::new(command));
            let mut found = None;
            for _ in 0..600 {
                for id in container_ids_of(&provider, &node).await {
                    if commands_in(&provider, &id)
                        .await
                        .iter()
                        .any(|c| c == "sleep 600")
                    {
                        found = Some(id);
                    }
                }
                if found.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Nothing of the runner may act after this point, not even its pool's drop: it
            // is leaked, and its run goes with the runtime, mid-command.
            std::mem::forget(runner);
            found.expect("the command ran within 60 s")
        });
        if hung {
            std::mem::forget(node_runtime);
        } else {
            drop(node_runtime);
        }
        let gone = std::time::Instant::now();
        checks.block_on(async {
            if hung {
                tokio::time::sleep(Duration::from_secs(1)).await;
                assert!(
                    commands_in(&provider, &sandbox)
                        .await
                        .iter()
                        .any(|c| c == "sleep 600"),
                    "the command still runs: nothing on the host ended it (pooled: {pooled})"
                );
            }
            // Stopped, as the Engine says (the container is left for a reaper to remove).
            let running = || async {
                let info = provider.docker().inspect_container(&sandbox, None).await;
                info.expect("the sandbox is still there")
                    .state
                    .and_then(|s| s.running)
            };
            wait_until(|| async { running().await == Some(false) }).await;
            eprintln!(
                "pooled: {pooled}, hung: {hung}: the sandbox ended by itself {:?} after its \
                 node went (timeout 5 s, grace 5 s from the command's start)",
                gone.elapsed()
            );
            if !hung {
                // Not by the armed end or the lifetime: those are 10 s from the start.
                assert!(
                    gone.elapsed() < Duration::from_secs(5),
                    "pooled: {pooled}: ended only {:?} after its node went",
                    gone.elapsed()
                );
            }
            assert!(commands_in(&provider, &sandbox).await.is_empty());
            for id in container_ids_of(&provider, &node).await {
                let _ = provider
                    .docker()
                    .remove_container(
                        &id,
                        Some(
                            bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                                .force(true)
                                .build(),
                        ),
                    )
                    .await;
            }
        });
    }
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

#[tokio::test]
async fn shutdown_removes_the_nodes_sandboxes_no_run_or_pool_holds() {
    let provider = ScriptedProvider::new();
    let runner = TaskRunner::new(provider.clone(), TaskRunnerConfig::new("n1"));
    let spec = crate::sandbox::SandboxSpec::new("n1", "stray", "img");
    let policy = crate::sandbox::SandboxPolicy::default();
    let stray = provider.create(&spec, &policy).await.unwrap();
    let other = provider
        .create(
            &crate::sandbox::SandboxSpec::new("n2", "theirs", "img"),
            &policy,
        )
        .await
        .unwrap();
    runner.shutdown_handle().shutdown().await;
    assert_eq!(stray.state().await.unwrap(), SandboxState::Removed);
    assert_ne!(
        other.state().await.unwrap(),
        SandboxState::Removed,
        "another node's sandbox stays"
    );
}

/// Issue 35 (module rule 8): with a log store, a run's output lands in its log as written,
/// stdout and stderr apart, each up to the store's cap (the cut counted), and the log is
/// finished by the time the run's end is taken. (The double streams at most the request's cap,
/// so the output here is short; the Docker sandbox streams all of it.)
#[tokio::test]
async fn a_runs_whole_output_is_in_its_log_finished_before_its_end() {
    use crate::sandbox::OutputStream::{Stderr, Stdout};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LogStore::open(dir.path(), 12, 8).unwrap());
    let provider = ScriptedProvider::new();
    let config = TaskRunnerConfig {
        pool_size: 1,
        warm_images: vec!["img".into()],
        logs: Some(Arc::clone(&store)),
        ..TaskRunnerConfig::new("n1")
    };
    let mut runner = TaskRunner::new(provider.clone(), config);
    runner.warm_up();
    let ready = wait_for(|| provider.sandboxes().into_iter().next()).await;
    let mut exec = ScriptedExec::output(0, "line1\n\u{1b}[2Jline2\n");
    if let Ok(out) = &mut exec.result {
        out.stderr = b"warning\n".to_vec();
    }
    ready.push_exec(exec);
    runner.start(&task(1), 1, &spec("img", &["work"]));
    let (_, _, exit) = exited(end(&mut runner).await);
    assert_eq!(exit.exit_code, Some(0));
    let log = store.read("sub-1", None, Stdout, 0, 1 << 20).unwrap();
    assert_eq!(log.attempt, 1);
    assert_eq!(
        log.data, b"line1\n\x1b[2Jli",
        "the first 12 bytes, as written"
    );
    assert!(log.progress.finished);
    assert_eq!(
        (log.progress.cut_at(), log.progress.dropped_bytes),
        (Some(12), Some(4))
    );
    let err = store.read("sub-1", None, Stderr, 0, 1 << 20).unwrap();
    assert_eq!(err.data, b"warning\n", "stderr apart, not cut");
    assert!(err.progress.finished && err.progress.cut_at().is_none());
}

/// A live sandbox spec of `submitter`'s: lifetime `lifetime_ms`, idle timeout `idle_ms`.
fn live_of(submitter: &str, lifetime_ms: u64, idle_ms: u64) -> SharedSpec {
    Arc::new(TaskSpec {
        image: "img".into(),
        timeout_ms: lifetime_ms,
        idle_ms,
        live: true,
        submitter: Some(submitter.into()),
        ..TaskSpec::default()
    })
}

/// Issue 53: a live placement from the core is made in the worker's registry under the task's
/// id for its submitter (`live_placements` rule 1), and each way it ends is the run's end
/// (rule 2): closed by its owner → exit 0 saying so; stopped by the cluster — also while it is
/// being made — → closed by the cluster (rule 3); expired → a timeout; one that cannot be made
/// (above the ceilings) → a failure, not retried, and later calls hear why.
#[tokio::test]
async fn a_live_placement_lives_in_the_registry_and_its_end_is_the_runs() {
    use crate::sandbox::live::{Caller, GoneWhy, LiveError, LiveLimits, LiveSandboxes};
    let provider = ScriptedProvider::new();
    let registry = Arc::new(LiveSandboxes::new(provider.clone(), LiveLimits::default()));
    let config = TaskRunnerConfig {
        ceilings: Ceilings {
            memory_mb: Some(512),
            ..Ceilings::default()
        },
        ..TaskRunnerConfig::new("n1")
    };
    let mut runner = TaskRunner::new(provider.clone(), config).with_live(Arc::clone(&registry));
    let alice = Caller::owner("alice");
    let made = |id: String| {
        let registry = Arc::clone(&registry);
        let alice = alice.clone();
        async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(10);
            registry.wait_for(&alice, &id, until).await
        }
    };

    // Made for alice under the task's id; another owner does not see it.
    runner.start(&task(1), 1, &live_of("alice", 60_000, 5_000));
    let info = made(task(1).to_string()).await.expect("made");
    assert_eq!(info.owner, "alice");
    assert!(info.idle_left <= Duration::from_secs(5), "{info:?}");
    assert!(matches!(
        registry.get(&Caller::owner("bob"), &task(1).to_string()),
        Err(LiveError::NotFound)
    ));
    // Closed by its owner: the run exits 0, saying so.
    registry.close(&alice, &task(1).to_string()).await.unwrap();
    let (t, attempt, exit) = exited(end(&mut runner).await);
    assert_eq!((t, attempt, exit.exit_code), (task(1), 1, Some(0)));
    assert!(exit.stderr.contains("closed by alice"), "{exit:?}");

    // Stopped by the cluster once made, and stopped while being made.
    runner.start(&task(2), 1, &live_of("alice", 60_000, 0));
    made(task(2).to_string()).await.expect("made");
    runner.stop(&task(2), 1);
    let (t, _, exit) = exited(end(&mut runner).await);
    assert_eq!((t, exit.exit_code), (task(2), Some(0)));
    assert!(exit.stderr.contains(BY_THE_CLUSTER), "{exit:?}");
    runner.start(&task(3), 1, &live_of("alice", 60_000, 0));
    runner.stop(&task(3), 1);
    let (t, _, exit) = exited(end(&mut runner).await);
    assert_eq!((t, exit.exit_code), (task(3), Some(0)));
    match made(task(3).to_string()).await {
        Err(LiveError::Gone {
            why: GoneWhy::Closed { by },
            ..
        }) => assert_eq!(by, BY_THE_CLUSTER),
        other => panic!("stopped while made: {other:?}"),
    }

    // Expired at its lifetime: a timeout.
    runner.start(&task(4), 1, &live_of("alice", 200, 0));
    made(task(4).to_string()).await.expect("made");
    tokio::time::sleep(Duration::from_millis(250)).await;
    registry.reap().await;
    let (t, _, exit) = exited(end(&mut runner).await);
    assert_eq!(t, task(4));
    assert!(exit.timed_out, "{exit:?}");

    // Above the worker's ceilings: failed for good, and later calls hear why.
    let big = Arc::new(TaskSpec {
        memory_mb: 4096,
        ..(*live_of("alice", 60_000, 0)).clone()
    });
    runner.start(&task(5), 1, &big);
    match end(&mut runner).await {
        Event::SandboxFailed {
            task: t,
            retryable,
            error,
            ..
        } => {
            assert_eq!(t, task(5));
            assert!(!retryable);
            assert!(error.contains("policy_violation"), "{error}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(matches!(
        registry.get(&alice, &task(5).to_string()),
        Err(LiveError::Gone {
            why: GoneWhy::Failed { .. },
            ..
        })
    ));
    // Every sandbox made is removed once its placement ended.
    for s in provider.sandboxes() {
        assert!(s.calls().iter().any(|c| c.op == Op::Remove), "{:?}", s.id());
    }
}

/// Without a registry a live placement fails at once, never running an empty command.
#[tokio::test]
async fn a_worker_without_a_registry_fails_a_live_placement() {
    let provider = ScriptedProvider::new();
    let mut runner = TaskRunner::new(provider.clone(), TaskRunnerConfig::new("n1"));
    runner.start(&task(1), 1, &live_of("alice", 60_000, 0));
    match end(&mut runner).await {
        Event::SandboxFailed { retryable, .. } => assert!(!retryable),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(provider.sandboxes().is_empty());
}

/// Issue 53: a live sandbox with a repository of the worker's `[repos]` (`live_placements`
/// rule 1). Read-only: the repository is there and a write fails. Read-write: a sync carries
/// the working tree back on demand (a file made, a file changed; never a `.git` change), a
/// later sync deletes what the sandbox deleted since — a file copied in and a file an earlier
/// sync carried back alike —, and a close syncs before it answers, so the host holds the last
/// change once the close returns. No container is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_live_sandboxes_mount_a_repository_and_carry_a_read_write_one_back() {
    use crate::sandbox::live::{Caller, LiveError, LiveLimits, LiveSandboxes};
    let (provider, image) = docker().await;
    let node = test_node("live-repo");
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap().join("src");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(repo.join("README"), "in the repo\n").unwrap();
    std::fs::write(repo.join("old.txt"), "to be deleted\n").unwrap();
    let provider = provider.with_repo_roots(crate::sandbox::repo::RepoRoots::new([&repo]).unwrap());
    let registry = Arc::new(LiveSandboxes::new(provider.clone(), LiveLimits::default()));
    let mut config = TaskRunnerConfig::new(&node);
    config.repos.insert("src".into(), repo.clone());
    let mut runner = TaskRunner::new(provider.clone(), config).with_live(Arc::clone(&registry));
    let alice = Caller::owner("alice");
    let live_with = |writable| {
        Arc::new(TaskSpec {
            image: image.clone(),
            repo: Some(TaskRepo {
                name: "src".into(),
                writable,
            }),
            ..(*live_of("alice", 120_000, 0)).clone()
        })
    };
    let made = |id: String| {
        let (registry, alice) = (Arc::clone(&registry), alice.clone());
        async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(60);
            registry.wait_for(&alice, &id, until).await
        }
    };
    let sh = |id: String, script: &str| {
        let (registry, alice) = (Arc::clone(&registry), alice.clone());
        let req = crate::sandbox::ExecRequest::new(["sh", "-c", script]);
        async move {
            let (sink, _) = tokio::sync::mpsc::channel(64);
            registry.exec(&alice, &id, req, sink).await.expect("exec")
        }
    };

    // Read-only: there, not writable, and nothing to sync.
    runner.start(&task(1), 1, &live_with(false));
    let ro = task(1).to_string();
    made(ro.clone()).await.expect("made");
    let out = sh(ro.clone(), "cat README; echo x > new").await;
    assert_eq!(out.stdout, b"in the repo\n");
    assert_ne!(out.exit_code, 0, "read-only: the write fails");
    match registry.sync(&alice, &ro).await {
        Err(LiveError::Sandbox(e)) => assert_eq!(e.category, ErrorCategory::Unsupported),
        other => panic!("a read-only repository synced: {other:?}"),
    }

    // Its files are read and written by its command agent, no process started (`agent.c`):
    // the agent's own words in a failure say which path served it.
    registry
        .write_file(&alice, &ro, "/tmp/d/f.txt", b"agent", 0o640)
        .await
        .expect("write");
    let back = registry.read_file(&alice, &ro, "/tmp/d/f.txt").await;
    assert_eq!(back.expect("read"), b"agent");
    let out = sh(ro.clone(), "stat -c %a /tmp/d/f.txt").await;
    assert_eq!(out.stdout, b"640\n");
    match registry.read_file(&alice, &ro, "/tmp/none").await {
        Err(LiveError::Sandbox(e)) => {
            assert!(
                e.to_string().contains("chorus-agent: reading /tmp/none"),
                "{e}"
            )
        }
        other => panic!("a missing file read: {other:?}"),
    }

    assert_eq!(registry.close(&alice, &ro).await.unwrap(), None);

    // Read-write: synced on demand.
    runner.start(&task(2), 1, &live_with(true));
    let rw = task(2).to_string();
    made(rw.clone()).await.expect("made");
    let out = sh(
        rw.clone(),
        "echo made > new.txt && echo changed > README && echo '[core] x' > .git/config",
    )
    .await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    let report = registry.sync(&alice, &rw).await.expect("sync");
    assert_eq!((report.written, report.deleted), (2, 0), "{report:?}");
    assert_eq!(report.refused, [".git/config"], "{report:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("new.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "changed\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/config")).unwrap(),
        "[core]\n"
    );

    // Deleted since: a file copied in and one the last sync carried back.
    let out = sh(rw.clone(), "rm old.txt new.txt && echo last > last.txt").await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    let report = registry.sync(&alice, &rw).await.expect("sync");
    assert_eq!((report.written, report.deleted), (1, 2), "{report:?}");
    assert!(!repo.join("old.txt").exists() && !repo.join("new.txt").exists());

    // A close syncs before it answers.
    let out = sh(rw.clone(), "echo at-close > last.txt").await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    let closed = registry.close(&alice, &rw).await.unwrap();
    let report = closed
        .expect("a read-write sandbox's close syncs")
        .expect("synced");
    assert_eq!(report.written, 1, "{report:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("last.txt")).unwrap(),
        "at-close\n"
    );
    let _ = end(&mut runner).await;
    let _ = end(&mut runner).await;
    registry.removed().await;
    assert_eq!(containers_of(&provider, &node).await, 0);
}
