//! End to end: tasks through three real `chorus run` processes with Docker sandboxes — results
//! with the right outputs and exit codes, idempotent submits, OOM, timeout and cancellation,
//! and no task lost when a worker or the admin is killed (kill -9) or a worker restarts (and
//! the restart leaves no container behind).
//!
//! These need a running Docker Engine and fail (never skip) without it. Every wait is a poll
//! with a deadline that bounds liveness on a loaded machine; nothing asserts on wall time.

use std::time::Duration;

use chorus_tests::task_cluster::{as_token, live_containers_of, metric, token, TaskCluster, IMAGE};
use chorus_tests::{containers_of, http_exact, http_request, wait_until, Cluster, Timings, Value};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

/// A liveness bound for a result on two loaded cores (not a performance figure).
const RESULT_BOUND: Duration = Duration::from_secs(120);

fn id(c: &Cluster, i: usize) -> String {
    c.status(i).expect("status")["node_id"]
        .as_str()
        .expect("node id")
        .to_owned()
}

fn spec(command: &str) -> Value {
    serde_json::json!({ "image": IMAGE, "command": ["sh", "-c", command], "timeout_ms": 60_000 })
}

/// Submits `spec` at node `i`; returns (HTTP status, task id).
fn submit(c: &Cluster, i: usize, spec: &Value) -> (u16, String) {
    let (code, body) = http_request(
        c.nodes[i].http_port,
        "POST",
        "/tasks",
        Some(&spec.to_string()),
    )
    .expect("the node answers");
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let task = v["task"]
        .as_str()
        .unwrap_or_else(|| panic!("submit answered {code}: {body}"))
        .to_owned();
    (code, task)
}

fn task(c: &Cluster, i: usize, id: &str) -> Option<Value> {
    let (code, body) = http_request(c.nodes[i].http_port, "GET", &format!("/tasks/{id}"), None)?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Waits for the result of `id` at its submitter `i`.
fn result(c: &Cluster, i: usize, id: &str) -> Value {
    wait_until(RESULT_BOUND, Duration::from_millis(50), || {
        task(c, i, id).and_then(|t| (!t["result"].is_null()).then(|| t["result"].clone()))
    })
    .unwrap_or_else(|| {
        panic!(
            "no result for {id} within {RESULT_BOUND:?}: {:?}",
            task(c, i, id)
        )
    })
}

/// Waits until `id` is placed; returns its worker.
fn placed(c: &Cluster, i: usize, id: &str) -> String {
    wait_until(RESULT_BOUND, Duration::from_millis(20), || {
        let t = task(c, i, id)?;
        (t["phase"] == "placed").then(|| t["worker"].as_str().map(str::to_owned))?
    })
    .unwrap_or_else(|| panic!("{id} was not placed: {:?}", task(c, i, id)))
}

#[test]
fn twenty_tasks_complete_with_their_outputs_and_exit_codes() {
    let t = TaskCluster::start(BIN);
    let c = &t.c;
    let submitted: Vec<(usize, usize, String)> = (0..20)
        .map(|n| {
            let at = n % 3;
            let (code, id) = submit(
                c,
                at,
                &spec(&format!("echo task-{n}; echo e{n} >&2; exit {}", n % 4)),
            );
            assert_eq!(code, 201);
            (n, at, id)
        })
        .collect();
    let mut workers = std::collections::BTreeSet::new();
    for (n, at, id) in &submitted {
        let r = result(c, *at, id);
        assert_eq!(r["stdout"], format!("task-{n}\n"), "{r}");
        assert_eq!(r["stderr"], format!("e{n}\n"), "{r}");
        assert_eq!(r["exit_code"], n % 4, "{r}");
        let want = if n % 4 == 0 { "succeeded" } else { "failed" };
        assert_eq!(r["status"], want, "{r}");
        workers.insert(r["worker"].as_str().expect("a worker").to_owned());
    }
    assert!(workers.iter().all(|w| t.ids.contains(w)), "{workers:?}");
    // Issue 36: where each task's time went — the run's stages at its worker, the submitter's
    // own stamps — in the API, `task get --timings` and the metrics.
    let (_, at, id) = &submitted[0];
    let v = task(c, *at, id).expect("the task");
    let stages = &v["result"]["timings"];
    assert!(stages["exec_ms"].as_u64().is_some_and(|ms| ms > 0), "{v}");
    let run: u64 = [
        "acquire_ms",
        "arm_ms",
        "exec_ms",
        "cleanup_ms",
        "release_ms",
    ]
    .iter()
    .map(|k| stages[k].as_u64().unwrap_or(0))
    .sum();
    let total = v["timings"]["result_ms"].as_u64().expect("result_ms");
    assert!(
        stages["exec_ms"].as_u64().unwrap() <= total && total <= run + 60_000,
        "{v}"
    );
    let addr = format!("127.0.0.1:{}", c.nodes[*at].http_port);
    let out = c.chorus(&["task", "get", id, "--addr", &addr, "--timings"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    for word in [
        "result",
        "acquire",
        "arm",
        "exec",
        "cleanup",
        "release",
        "elsewhere",
    ] {
        assert!(said.contains(word), "{word} missing:\n{said}");
    }
    let (_, metrics) = http_request(c.nodes[*at].http_port, "GET", "/metrics", None).unwrap();
    let count = |line: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        count("chorus_task_latency_seconds_count ") >= 7,
        "{metrics}"
    );
    let worker = v["result"]["worker"].as_str().unwrap();
    let w = t.ids.iter().position(|n| n == worker).unwrap();
    let (_, metrics) = http_request(c.nodes[w].http_port, "GET", "/metrics", None).unwrap();
    assert!(
        metrics.lines().any(
            |l| l.starts_with("chorus_task_stage_seconds_count{stage=\"exec\"} ")
                && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
    // A retried submit with the same idempotency key names the same task; another spec under
    // that key is refused.
    let mut keyed = spec("echo once");
    keyed["key"] = "k-1".into();
    let (code, first) = submit(c, 1, &keyed);
    assert_eq!(code, 201);
    let (code, again) = submit(c, 1, &keyed);
    assert_eq!((code, &again), (200, &first));
    keyed["command"] = serde_json::json!(["true"]);
    let (code, body) = http_request(
        c.nodes[1].http_port,
        "POST",
        "/tasks",
        Some(&keyed.to_string()),
    )
    .unwrap();
    assert_eq!(code, 400, "{body}");
    // The CLI: --wait prints the output and exits with the task's code.
    let addr = format!("127.0.0.1:{}", c.nodes[2].http_port);
    let out = c.chorus(&[
        "task",
        "submit",
        "--addr",
        &addr,
        "--image",
        IMAGE,
        "--wait",
        "--",
        "sh",
        "-c",
        "echo from-cli; exit 5",
    ]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-cli\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("submitted; waiting for its result"), "{said}");
    // Issue 54, item 7: piped, --wait prints the whole output (as on a terminal), not the
    // result's last 8 KiB cut mid-line: 3000 lines (~29 KiB) on each stream.
    let lines = |tag: &str| {
        (0..3000)
            .map(|i| format!("{tag}-{i:05}\n"))
            .collect::<String>()
    };
    let out = c.chorus(&[
        "task",
        "submit",
        "--addr",
        &addr,
        "--image",
        IMAGE,
        "--wait",
        "--",
        "sh",
        "-c",
        "i=0; while [ $i -lt 3000 ]; do printf 'out-%05d\\n' $i; printf 'err-%05d\\n' $i >&2; \
         i=$((i+1)); done",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout == lines("out"),
        "{} bytes of stdout:\n{stdout}",
        stdout.len()
    );
    assert!(
        said.contains(&lines("err")),
        "{} bytes of stderr:\n{said}",
        said.len()
    );
    assert!(!said.contains("cut"), "{said}");
    // --wait-timeout ends the wait (exit 75), not the task, and names it.
    let out = c.chorus(&[
        "task",
        "submit",
        "--addr",
        &addr,
        "--image",
        IMAGE,
        "--wait",
        "--wait-timeout",
        "0.5",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("within --wait-timeout") && said.contains("goes on"),
        "{said}"
    );
}

#[test]
fn oom_timeout_and_cancel_are_reported_as_such() {
    let t = TaskCluster::start(BIN);
    let c = &t.c;
    let mut hog = spec("dd if=/dev/zero of=/dev/null bs=200M count=1");
    hog["memory_mb"] = 32.into();
    let (_, oom) = submit(c, 0, &hog);
    let mut slow = spec("echo before; sleep 60");
    slow["timeout_ms"] = 1_000.into();
    let (_, timed) = submit(c, 1, &slow);
    let (_, long) = submit(c, 2, &spec("sleep 60"));
    placed(c, 2, &long);
    let (code, body) = http_request(
        c.nodes[2].http_port,
        "DELETE",
        &format!("/tasks/{long}"),
        None,
    )
    .unwrap();
    assert_eq!(code, 202, "{body}");

    let r = result(c, 0, &oom);
    assert_eq!(r["status"], "out_of_memory", "{r}");
    let r = result(c, 1, &timed);
    assert_eq!(r["status"], "timed_out", "{r}");
    assert_eq!(r["stdout"], "before\n", "{r}");
    let r = result(c, 2, &long);
    assert_eq!(r["status"], "cancelled", "{r}");
    // A finished task cannot be cancelled; an unknown one is not here.
    let (code, _) = http_request(
        c.nodes[2].http_port,
        "DELETE",
        &format!("/tasks/{long}"),
        None,
    )
    .unwrap();
    assert_eq!(code, 409);
    let (code, _) = http_request(c.nodes[2].http_port, "GET", "/tasks/nobody-9", None).unwrap();
    assert_eq!(code, 404);
    let (code, body) =
        http_request(c.nodes[2].http_port, "GET", "/tasks?state=cancelled", None).unwrap();
    assert_eq!(code, 200);
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

#[test]
fn a_task_whose_worker_is_killed_completes_on_another_node() {
    let mut t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    // Three long tasks from the admin spread over the three least-loaded workers; one runs on
    // a node that is neither the submitter nor the admin.
    let ids: Vec<String> = (0..3)
        .map(|n| submit(&t.c, admin, &spec(&format!("sleep 3; echo long-{n}"))).1)
        .collect();
    let victim = wait_until(RESULT_BOUND, Duration::from_millis(20), || {
        ids.iter().enumerate().find_map(|(n, id)| {
            let w = task(&t.c, admin, id)?;
            let worker = w["worker"].as_str()?;
            (w["phase"] == "placed" && worker != t.ids[admin]).then(|| (n, worker.to_owned()))
        })
    })
    .expect("a task placed on another node");
    let killed = t.index_of(&victim.1);
    t.c.kill(killed);
    for (n, id) in ids.iter().enumerate() {
        let r = result(&t.c, admin, id);
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["stdout"], format!("long-{n}\n"));
        if n == victim.0 {
            assert_ne!(
                r["worker"],
                victim.1.as_str(),
                "it completed elsewhere: {r}"
            );
        }
    }
}

#[test]
fn every_queued_task_completes_after_the_admin_is_killed() {
    let mut t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let at = (admin + 1) % 3;
    // Twelve tasks for six slots: half of them wait in the admin's queue.
    let ids: Vec<String> = (0..12)
        .map(|n| submit(&t.c, at, &spec(&format!("sleep 1; echo q-{n}"))).1)
        .collect();
    let journal = t.c.root().join("faults.jsonl");
    let crash = serde_json::json!({
        "at_monotonic_ms": chorus_tests::netns::monotonic_ms(),
        "kind": "crash",
        "node": t.ids[admin],
    });
    std::fs::write(&journal, format!("{crash}\n")).unwrap();
    t.c.kill(admin);
    let (_, _, new_admin) = t.c.wait_agreed(Duration::from_secs(60));
    assert_ne!(new_admin, admin);
    for (n, id) in ids.iter().enumerate() {
        let r = result(&t.c, at, id);
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["stdout"], format!("q-{n}\n"));
    }
    // What the nodes decided, together, holds invariant 7 (one result per accepted task, at
    // its submitter; placements only under a lease) and 1-5, on the merged logs.
    for i in (0..3).filter(|i| *i != admin) {
        t.c.terminate(i);
    }
    let dirs: Vec<std::path::PathBuf> = t.c.nodes.iter().map(|n| n.data_dir.clone()).collect();
    let trace = t.c.root().join("merged.jsonl");
    let mut out = Vec::new();
    let report =
        chorus_node::merge::replay_merged(&dirs, Some(&journal), Some(&trace), None, &mut out)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", String::from_utf8_lossy(&out)));
    assert!(report.ok(), "{}", String::from_utf8_lossy(&out));
    let checked = chorus_sim::checker::check_file(&trace, None).unwrap();
    assert!(
        checked.violations.is_empty(),
        "{:?}\n{:?}",
        checked.violations,
        checked.quoted
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    // The timing half of invariant 7 was judged: the header states the bound, three attempts
    // of the longest timeout submitted (60 s) on top of the liveness bound.
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let liveness = header["liveness_bound_ms"].as_u64().unwrap();
    assert_eq!(
        header["task_bound_ms"].as_u64(),
        Some(chorus_core::task::result_bound_ms(
            Timings::FAST.heartbeat_ms,
            liveness,
            60_000
        )),
        "{header}"
    );
    for id in &ids {
        let result = format!(
            r#""kind":"task_result","node":"{}","task":"{id}""#,
            t.ids[at]
        );
        assert_eq!(text.matches(&result).count(), 1, "one result for {id}");
    }
    assert!(text.matches(r#""kind":"task_placed""#).count() >= ids.len());
}

#[test]
fn a_worker_restarted_mid_task_leaves_no_container_and_the_task_completes() {
    let mut t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let ids: Vec<String> = (0..3)
        .map(|n| submit(&t.c, admin, &spec(&format!("sleep 4; echo r-{n}"))).1)
        .collect();
    let (n, worker) = wait_until(RESULT_BOUND, Duration::from_millis(20), || {
        ids.iter().enumerate().find_map(|(n, id)| {
            let w = task(&t.c, admin, id)?;
            let worker = w["worker"].as_str()?;
            (w["phase"] == "placed" && worker != t.ids[admin]).then(|| (n, worker.to_owned()))
        })
    })
    .expect("a task placed on another node");
    let i = t.index_of(&worker);
    // "placed" is the admin's word; the worker makes the run's container a moment later (longer
    // on a loaded machine).
    let before = wait_until(RESULT_BOUND, Duration::from_millis(20), || {
        Some(containers_of(&worker)).filter(|c| !c.is_empty())
    })
    .expect("the run's container exists");
    t.c.kill(i);
    t.c.start_node(i);
    // The restarted node reaps what its killed process left before it steps anything.
    let gone = wait_until(RESULT_BOUND, Duration::from_millis(100), || {
        let now = containers_of(&worker);
        before.iter().all(|c| !now.contains(c)).then_some(())
    });
    assert!(
        gone.is_some(),
        "containers of the killed process are left: {before:?}"
    );
    let r = result(&t.c, admin, &ids[n]);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["stdout"], format!("r-{n}\n"));
}

/// A node stopped cleanly snapshots its state; restarted with a repository added to its config,
/// it must advertise and use it (the snapshot's capabilities are the old ones).
#[test]
fn a_repository_added_across_a_clean_restart_is_used() {
    let mut t = TaskCluster::start_n(BIN, 1);
    let repo = t.c.root().join("src");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README"), "from the repo\n").unwrap();
    assert!(
        t.c.terminate(0).is_some_and(|s| s.success()),
        "a clean stop"
    );
    t.c.extra_args
        .extend(["--repo".to_owned(), format!("src={}", repo.display())]);
    t.c.start_node(0);
    t.c.wait_agreed(Duration::from_secs(60));
    let spec = serde_json::json!({
        "image": IMAGE,
        "command": ["cat", "README"],
        "timeout_ms": 60_000,
        "repo": { "name": "src" },
    });
    let (_, id) = submit(&t.c, 0, &spec);
    let r = result(&t.c, 0, &id);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["stdout"], "from the repo\n");
}

/// Whether any file under `dir` holds `needle` (the event log's sled files are not compressed,
/// so a value logged in plain text is found).
fn any_file_holds(dir: &std::path::Path, needle: &[u8]) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = any_file_holds(&path, needle) {
                return Some(found);
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                return Some(path);
            }
        }
    }
    None
}

/// `--secret-env` (issue 33): the command sees the value; no API answer shows it, not even to
/// its submitter, and no node's data directory holds it in plain text — the submitter seals it
/// under the cluster's pre-shared key and only the worker opens it.
#[test]
fn a_secret_value_reaches_the_command_and_no_log_or_api_answer() {
    let out = chorus_tests::run_chorus(BIN.as_ref(), &["sandbox", "image", "build"]);
    assert!(
        out.status.success(),
        "the test image builds (this test needs Docker)"
    );
    let keys = tempfile::tempdir().unwrap();
    let psk = keys.path().join("swarm.key");
    chorus_node::cli::psk::generate(&psk).unwrap();
    let c = Cluster::start_with(
        BIN,
        2,
        Timings::FAST,
        &[
            "--docker",
            "--warm-image",
            IMAGE,
            "--psk-file",
            psk.to_str().unwrap(),
        ],
    );
    c.wait_agreed(Duration::from_secs(60));
    let ids: Vec<String> = (0..2).map(|i| id(&c, i)).collect();
    let _cleanup = TaskCluster { c, ids };
    let c = &_cleanup.c;

    let secret = "correct-horse-battery-staple";
    // The command names the value only in parts: the spec itself is no secret.
    let mut s = spec(
        r#"X=correct-horse; [ "$PASSWORD" = "$X-battery-staple" ] && echo same; echo ${#PASSWORD}"#,
    );
    s["secret_env"] = serde_json::json!({ "PASSWORD": secret });
    let (code, id) = submit(c, 0, &s);
    assert_eq!(code, 201);
    let r = result(c, 0, &id);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["stdout"], format!("same\n{}\n", secret.len()), "{r}");
    let t = task(c, 0, &id).unwrap();
    assert_eq!(t["spec"]["env"]["PASSWORD"], "<secret>", "{t}");
    for node in &c.nodes {
        let found = any_file_holds(&node.data_dir, secret.as_bytes());
        assert!(found.is_none(), "the secret is in plain text in {found:?}");
    }
    // A value dressed as a sealed one is refused at submit.
    let mut forged = spec("true");
    forged["env"] = serde_json::json!({ "PASSWORD": "chorus-sealed-v1:00" });
    let (code, body) = http_request(
        c.nodes[0].http_port,
        "POST",
        "/tasks",
        Some(&forged.to_string()),
    )
    .unwrap();
    assert_eq!(code, 400, "{body}");
}

/// Issue 35: `chorus task submit -f task.toml` sends the file's spec with the flags beside it
/// over it, a bad file is refused before anything is sent (its line and key named), and a task
/// cancelled while it waits for a worker reads as cancelled before it ran. No Docker needed:
/// the one node runs no tasks, and the task requires a capability no node offers.
#[test]
fn a_task_file_is_submitted_and_a_queued_task_is_cancelled_before_it_ran() {
    let c = Cluster::start(BIN, 1, Timings::FAST);
    c.wait_agreed(Duration::from_secs(60));
    let addr = format!("127.0.0.1:{}", c.nodes[0].http_port);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("task.toml");
    std::fs::write(
        &file,
        "image = \"from-file\"\ncommand = [\"echo\", \"hi\"]\nrequires = [\"nosuch\"]\n\
         [limits]\ntimeout = 30\nmemory = \"64m\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = c.chorus(&[
        "task",
        "submit",
        "--addr",
        &addr,
        "-f",
        file,
        "--timeout",
        "40",
    ]);
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let t = task(&c, 0, &id).expect("the task is here");
    assert_eq!(t["spec"]["image"], "from-file", "{t}");
    assert_eq!(
        t["spec"]["command"],
        serde_json::json!(["echo", "hi"]),
        "{t}"
    );
    assert_eq!(t["spec"]["timeout_ms"], 40_000, "the flag wins: {t}");
    assert_eq!(t["spec"]["memory_mb"], 64, "{t}");
    assert_eq!(t["spec"]["requires"], serde_json::json!(["nosuch"]), "{t}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "image = \"i\"\n[limits]\nmemroy = \"1g\"\n").unwrap();
    let bad = bad.to_str().unwrap();
    let out = c.chorus(&["task", "submit", "--addr", &addr, "-f", bad, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("line 3") && said.contains("limits.memroy"),
        "{said}"
    );

    let out = c.chorus(&["task", "cancel", &id, "--addr", &addr]);
    assert!(out.status.success(), "{out:?}");
    let r = result(&c, 0, &id);
    assert_eq!(r["status"], "cancelled", "{r}");
    let out = c.chorus(&["task", "get", &id, "--addr", &addr]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("cancelled before it ran") && !shown.contains(" ms (run "),
        "{shown}"
    );
    let out = c.chorus(&["task", "list", "--addr", &addr]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("  cancelled before it ran"), "{listed}");
}

/// Issue 35: any node answers for any task. A task lives at the node it was submitted to; a
/// node asked about another's names it and where its API is, and the CLI asks there: `task get`
/// and `task cancel` work through any node, and `task list --cluster` lists every node's tasks
/// (filtered by the node they were submitted to). Once the holding node is down, another node
/// says so plainly, and the cluster-wide list names the node it could not list. No Docker: no
/// node runs tasks, and the tasks require a capability no node offers, so they wait.
#[test]
fn tasks_are_read_listed_and_cancelled_through_any_node() {
    let mut c = Cluster::start(BIN, 3, Timings::FAST);
    c.wait_agreed(Duration::from_secs(60));
    let addr = |c: &Cluster, i: usize| format!("127.0.0.1:{}", c.nodes[i].http_port);
    let submit = |c: &Cluster, i: usize| {
        let out = c.chorus(&[
            "task",
            "submit",
            "--addr",
            &addr(c, i),
            "--image",
            "none",
            "--require",
            "nosuch",
            "--",
            "true",
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let (at0, at2) = (submit(&c, 0), submit(&c, 2));
    let n0 = c.status(0).unwrap()["node_id"].as_str().unwrap().to_owned();
    let short0 = &n0[n0.len() - 8..];

    // Read through another node: the CLI follows the answer to n0.
    let out = c.chorus(&["task", "get", &at0, "--addr", &addr(&c, 1), "--json"]);
    assert!(out.status.success(), "{out:?}");
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["task"], at0, "{t}");
    // The API's own answer names the holder and its address.
    let (code, body) =
        http_request(c.nodes[1].http_port, "GET", &format!("/tasks/{at0}"), None).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(code, 404, "{body}");
    assert_eq!(v["owner"], n0.as_str(), "{body}");
    assert!(v["owner_http"].as_str().is_some(), "{body}");

    // The CLI followed n0's advertised address with a token n1 delegated to n0 alone (the
    // operator's own token goes only where the operator pointed): good at n0, nothing at n2,
    // and not delegated again.
    let delegate = |port: u16, token: &str| {
        let bearer = format!("Bearer {token}");
        let json = [
            ("Host", "127.0.0.1"),
            ("Content-Type", "application/json"),
            ("Authorization", bearer.as_str()),
        ];
        let audience = format!(r#"{{"audience":"{n0}"}}"#);
        http_exact(port, "POST", "/acl/delegate", &json, &audience).unwrap()
    };
    let (code, body) = delegate(c.nodes[1].http_port, &chorus_tests::test_token());
    assert_eq!(code, 200, "{body}");
    let delegated = serde_json::from_str::<Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let with = format!("Bearer {delegated}");
    let read = [("Host", "127.0.0.1"), ("Authorization", with.as_str())];
    let path = format!("/tasks/{at0}");
    let (code, body) = http_exact(c.nodes[0].http_port, "GET", &path, &read, "").unwrap();
    assert_eq!(code, 200, "n0 takes a token delegated to it: {body}");
    let (code, body) = http_exact(c.nodes[2].http_port, "GET", &path, &read, "").unwrap();
    assert_eq!(code, 401, "n2 refuses n0's delegated token: {body}");
    let (code, body) = delegate(c.nodes[0].http_port, &delegated);
    assert_eq!(
        code, 403,
        "a delegated token is not delegated again: {body}"
    );

    // Listed across the cluster from n1, which holds none; filtered by node.
    let out = c.chorus(&["task", "list", "--cluster", "--addr", &addr(&c, 1)]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains(&at0) && listed.contains(&at2), "{listed}");
    let out = c.chorus(&[
        "task",
        "list",
        "--cluster",
        "--addr",
        &addr(&c, 1),
        "--node",
        short0,
    ]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains(&at0) && !listed.contains(&at2), "{listed}");

    // Cancelled through n2.
    let out = c.chorus(&["task", "cancel", &at0, "--addr", &addr(&c, 2)]);
    assert!(out.status.success(), "{out:?}");
    let r = result(&c, 0, &at0);
    assert_eq!(r["status"], "cancelled", "{r}");

    // n0 down: n1 says who holds the task and that it cannot reach it; the list names it.
    c.kill(0);
    // (From the admin's memory when the admin still lists the task as finished, else a 404
    // saying why.)
    let said = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        let out = c.chorus(&["task", "get", &at0, "--addr", &addr(&c, 1)]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (said.contains("not connected") || said.contains("out of reach")).then_some(said)
    })
    .expect("n1 says n0 is out of reach");
    assert!(said.contains(&n0), "{said}");
    let out = c.chorus(&["task", "list", "--cluster", "--addr", &addr(&c, 1)]);
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(listed.contains(&at2) && !listed.contains(&at0), "{listed}");
    assert!(
        warned.contains(short0) && warned.contains("not reachable"),
        "{warned}"
    );
}

/// Issue 35: a task whose node is down can still be read once it ran: its worker keeps the
/// result until that node acknowledges it, and `task get` through any other node finds it
/// there. When the node is back, the result reaches it as usual (delivered once).
#[test]
fn a_down_submitters_result_is_read_at_its_worker_and_delivered_when_it_returns() {
    let mut t = TaskCluster::start(BIN);
    // Long enough that the submitter is surely killed before the run ends, on a loaded machine.
    let spec = format!(r#"{{"image":"{IMAGE}","command":["sh","-c","sleep 8; echo done"]}}"#);
    // A task placed off its submitter: the least loaded worker gets each task (ties by node
    // id), so of three submitted at one node at least two run elsewhere. Not at the admin: a
    // placement still on its way when the admin is killed dies with it, and that task never
    // runs (its node alone knows of it, as designed).
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let submitter = (admin + 1) % 3;
    let (worker, id) = (0..3)
        .find_map(|_| {
            let (code, body) = http_request(
                t.c.nodes[submitter].http_port,
                "POST",
                "/tasks",
                Some(&spec),
            )
            .unwrap();
            assert_eq!(code, 201, "{body}");
            let id = serde_json::from_str::<Value>(&body).unwrap()["task"]
                .as_str()
                .unwrap()
                .to_owned();
            let w = t.index_of(&placed(&t.c, submitter, &id));
            (w != submitter).then_some((w, id))
        })
        .expect("a task placed on another node");
    let other = (0..3).find(|i| *i != submitter && *i != worker).unwrap();
    t.c.kill(submitter);
    let addr = format!("127.0.0.1:{}", t.c.nodes[other].http_port);
    let mut last = String::new();
    let shown = wait_until(RESULT_BOUND, Duration::from_millis(200), || {
        let out = t.c.chorus(&["task", "get", &id, "--addr", &addr]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        last = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
        (out.status.success() && text.contains("holds its result")).then_some(text)
    })
    .unwrap_or_else(|| {
        let at_worker =
            http_request(t.c.nodes[worker].http_port, "GET", &format!("/tasks/{id}"), None);
        panic!("the result is not read at its worker; last answer: {last}; the worker says {at_worker:?}")
    });
    assert!(
        shown.contains(&t.ids[worker]) && shown.contains("succeeded") && shown.contains("done"),
        "{shown}"
    );
    // Back: the worker delivers it; the node's own answer has it.
    t.c.start_node(submitter);
    let r = result(&t.c, submitter, &id);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["worker"], t.ids[worker].as_str(), "{r}");
}

/// Issue 35 "Live output": `chorus task logs ID -f`, run through a node that is not the task's
/// worker, prints each line of a running task as it comes — each before the task's result is
/// in — its stdout on stdout and its stderr on stderr, and exits 0 when the task ends. What it
/// measures: for each line, when it reached the follower's stdout or stderr, against when the
/// task's node first shows its result.
#[test]
fn task_logs_follow_prints_lines_while_the_task_runs_through_another_node() {
    use std::io::BufRead;
    use std::time::Instant;
    let t = TaskCluster::start(BIN);
    let c = &t.c;
    let (code, id) = submit(
        c,
        0,
        &spec("for i in 1 2 3; do echo line$i; echo err$i >&2; sleep 1; done"),
    );
    assert_eq!(code, 201);
    let worker = t.index_of(&placed(c, 0, &id));
    let via = (0..3).find(|i| *i != worker).unwrap();
    let mut child = std::process::Command::new(BIN)
        .args([
            "task",
            "logs",
            &id,
            "-f",
            "--addr",
            &format!("127.0.0.1:{}", c.nodes[via].http_port),
        ])
        .env("CHORUS_TOKEN", chorus_tests::test_token())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("chorus runs");
    let timed = |pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            std::io::BufReader::new(pipe)
                .lines()
                .map(|l| (l.unwrap_or_default(), Instant::now()))
                .collect::<Vec<_>>()
        })
    };
    let out_reader = timed(Box::new(child.stdout.take().unwrap()));
    let err_reader = timed(Box::new(child.stderr.take().unwrap()));
    // When the task's node first shows a result.
    let done_at = wait_until(RESULT_BOUND, Duration::from_millis(20), || {
        task(c, 0, &id).and_then(|v| (!v["result"].is_null()).then(Instant::now))
    })
    .expect("a result");
    let exit = wait_until(Duration::from_secs(60), Duration::from_millis(50), || {
        child.try_wait().unwrap()
    })
    .unwrap_or_else(|| {
        let _ = child.kill();
        panic!("`task logs -f` did not exit after the task ended")
    });
    let lines = out_reader.join().unwrap();
    // The task's stderr, apart from chorus's own words there.
    let (said, errs): (Vec<_>, Vec<_>) = err_reader
        .join()
        .unwrap()
        .into_iter()
        .partition(|(l, _)| l.starts_with("chorus: "));
    let stderr = format!("{said:?} {errs:?}");
    assert!(exit.success(), "{exit:?}: {stderr}");
    let texts: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(texts, ["line1", "line2", "line3"], "{stderr}");
    let err_texts: Vec<&str> = errs.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(err_texts, ["err1", "err2", "err3"], "{stderr}");
    // line1 and line2 came a second or more before the run's last second ended; all before
    // the result was in (the task sleeps 1 s after line3).
    for (line, at) in lines.iter().chain(&errs) {
        assert!(*at < done_at, "{line} came after the result");
        eprintln!(
            "{line}: {:?} before the result",
            done_at.duration_since(*at)
        );
    }
    for first in [&lines[0], &errs[0]] {
        assert!(
            done_at.duration_since(first.1) >= Duration::from_secs(2),
            "{} came {:?} before the result: not while the task ran",
            first.0,
            done_at.duration_since(first.1)
        );
    }
    let r = result(c, 0, &id);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_ne!(via, worker);
    // Read again once it ended, without -f: the same bytes (piped: as the task wrote them),
    // each stream on its own.
    let out = c.chorus(&[
        "task",
        "logs",
        &id,
        "--addr",
        &format!("127.0.0.1:{}", c.nodes[via].http_port),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "line1\nline2\nline3\n"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err1\nerr2\nerr3\n");
    // At the worker's API: one stream a request, a stream it does not know refused by name.
    let port = c.nodes[worker].http_port;
    let at_worker = |query: &str| {
        http_request(port, "GET", &format!("/tasks/{id}/logs?{query}"), None).unwrap()
    };
    assert_eq!(
        at_worker("stream=stderr"),
        (200, "err1\nerr2\nerr3\n".into())
    );
    assert_eq!(at_worker("offset=6"), (200, "line2\nline3\n".into()));
    let (code, body) = at_worker("stream=both");
    assert!(code == 400 && body.contains("stream"), "{code} {body}");
}

/// Issue 35 "tasks owned by a dead node stay readable and cancellable": the submitter is killed
/// with one task running on another node and one that no worker can run waiting in the admin's
/// queue. Through a third node: the queued task is read from the admin (`admin_view`), a
/// `submit` token's cancel is refused 403, an operator's cancel of both is kept (202
/// forwarded); the run stops at once and its worker holds a `cancelled` result; the queued one
/// never runs. Once the submitter is back, both end `cancelled`, once each.
#[test]
fn a_down_submitters_tasks_are_read_and_cancelled_through_another_node() {
    let mut t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let submitter = (admin + 1) % 3;
    let (worker, running) = (0..3)
        .find_map(|_| {
            let (code, id) = submit(&t.c, submitter, &spec("sleep 300"));
            assert_eq!(code, 201);
            let w = t.index_of(&placed(&t.c, submitter, &id));
            (w != submitter).then_some((w, id))
        })
        .expect("a task placed on another node");
    let mut nowhere = spec("true");
    nowhere["requires"] = serde_json::json!(["nosuch"]);
    let (code, queued) = submit(&t.c, submitter, &nowhere);
    assert_eq!(code, 201);
    // The admin judged it (its submitter shows why it waits): it is in the admin's queue.
    wait_until(RESULT_BOUND, Duration::from_millis(50), || {
        task(&t.c, submitter, &queued).filter(|v| !v["pending"].is_null())
    })
    .expect("the admin says why it waits");
    t.c.kill(submitter);
    let via = (0..3).find(|i| *i != submitter && *i != admin).unwrap();
    let addr = format!("127.0.0.1:{}", t.c.nodes[via].http_port);
    let get = |id: &str| {
        let out = t.c.chorus(&["task", "get", id, "--addr", &addr]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mut last = String::new();
    wait_until(RESULT_BOUND, Duration::from_millis(200), || {
        let (ok, text, err) = get(&queued);
        last = format!("{text}{err}");
        (ok && text.contains("has it queued") && text.contains("no worker offers")).then_some(())
    })
    .unwrap_or_else(|| panic!("the queued task is not read at the admin: {last}"));

    // A submit token cannot cancel another node's task from here: it cannot be told whose.
    let port = t.c.nodes[via].http_port;
    let out = chorus_tests::run_chorus_env(
        BIN.as_ref(),
        &[
            "acl", "token", "create", "--role", "submit", "--addr", &addr,
        ],
        &[("CHORUS_TOKEN", &chorus_tests::test_token())],
    );
    assert!(out.status.success(), "{out:?}");
    let submit_token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let host = format!("127.0.0.1:{port}");
    let bearer = format!("Bearer {submit_token}");
    let (code, body) = http_exact(
        port,
        "DELETE",
        &format!("/tasks/{running}"),
        &[("Host", &host), ("Authorization", &bearer)],
        "",
    )
    .expect("an answer");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("operate"), "{body}");

    for id in [&running, &queued] {
        let out = t.c.chorus(&["task", "cancel", id, "--addr", &addr]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("kept at"), "{text}");
    }
    // The run stops now, not when the submitter is back: its worker holds `cancelled`.
    let shown = wait_until(RESULT_BOUND, Duration::from_millis(200), || {
        let (ok, text, err) = get(&running);
        last = format!("{text}{err}");
        (ok && text.contains("holds its result") && text.contains("cancelled")).then_some(text)
    })
    .unwrap_or_else(|| panic!("the run was not stopped: {last}"));
    assert!(shown.contains(&t.ids[worker]), "{shown}");
    let (_, text, _) = get(&queued);
    assert!(text.contains("holds a cancel"), "{text}");

    // Back: the submitter ends both cancelled; the queued one never ran.
    t.c.start_node(submitter);
    for id in [&running, &queued] {
        let r = result(&t.c, submitter, id);
        assert_eq!(r["status"], "cancelled", "{id}: {r}");
    }
    // Answered by the admin in a worker's place: it never ran.
    assert_eq!(
        result(&t.c, submitter, &queued)["worker"],
        t.ids[admin].as_str()
    );
}

/// Issue 53, step 2: an agent's loop in one live sandbox through a node's API and the CLI —
/// create, write a file, a command that reads it, an environment set once and seen by later
/// commands, output streamed as it comes, a file read back, another token seeing nothing,
/// close and then 410 with the reason; a node killed with `kill -9` leaves no live sandbox's
/// container behind.
#[test]
fn a_live_sandbox_serves_many_steps_and_says_why_it_is_gone() {
    let mut t = TaskCluster::start(BIN);
    let node = 1;
    let addr = format!("127.0.0.1:{}", t.c.nodes[node].http_port);
    let alice = token(&t.c, "submit");
    let bob = token(&t.c, "submit");
    // `sandbox SUB --addr ADDR ARGS…` (before any `--`).
    let cli = |args: &[&str]| {
        let mut all = args[..2].to_vec();
        all.extend(["--addr", &addr]);
        all.extend(&args[2..]);
        chorus_tests::run_chorus_env(BIN.as_ref(), &all, &[("CHORUS_TOKEN", &alice)])
    };
    // Every worker keeps warm live sandboxes: a create takes one wherever it is placed.
    let warm = wait_until(Duration::from_secs(60), Duration::from_millis(100), || {
        (0..3)
            .all(|i| metric(&t.c, i, "chorus_live_warm").is_some_and(|n| n > 0))
            .then_some(())
    });
    assert!(
        warm.is_some(),
        "no warm live sandbox at every worker within 60 s"
    );
    let out = cli(&["sandbox", "create", "--idle", "120", "--key", "agent-1"]);
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        id.starts_with(&t.ids[node]),
        "its live task's id names its node: {id}"
    );
    let (code, body) = as_token(&t.c, node, &alice, "GET", &format!("/sandboxes/{id}"), "");
    assert_eq!(code, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    let container = info["sandbox"].as_str().unwrap().to_owned();
    // The admin placed it: its worker made it from its warm live pool.
    let worker = t.index_of(info["worker"].as_str().unwrap());
    assert_eq!(metric(&t.c, worker, "chorus_live_from_pool_total"), Some(1));
    // Retried as it was (with its key): the same sandbox, not a second one.
    let again = cli(&["sandbox", "create", "--idle", "120", "--key", "agent-1"]);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        id,
        "{again:?}"
    );
    let made: u64 = (0..3)
        .filter_map(|i| metric(&t.c, i, "chorus_live_created_total"))
        .sum();
    assert_eq!(made, 1, "one sandbox made in the whole cluster");
    let worker_id = t.ids[worker].clone();
    let live_of = move |all: bool| live_containers_of(&worker_id, all);
    assert!(live_of(false).contains(&container), "{container} runs");

    let local = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(local.path(), "print('hello from a file')\n").unwrap();
    let to = format!("{id}:/workspace/prog.txt");
    let out = cli(&["sandbox", "cp", local.path().to_str().unwrap(), &to]);
    assert!(out.status.success(), "{out:?}");
    let out = cli(&["sandbox", "exec", &id, "--", "cat", "/workspace/prog.txt"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "print('hello from a file')\n"
    );
    let out = cli(&["sandbox", "env", &id, "STAGE=second"]);
    assert!(out.status.success(), "{out:?}");
    let out = cli(&[
        "sandbox",
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo $STAGE; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "second\n");
    // Streamed: a line before the command ends, then its exit.
    let (code, body) = as_token(
        &t.c,
        node,
        &alice,
        "POST",
        &format!("/sandboxes/{id}/exec"),
        r#"{"shell": "echo one; sleep 1; echo two >&2", "stream": true}"#,
    );
    assert_eq!(code, 200, "{body}");
    let (one, two, exit) = (
        body.find(r#"{"stdout":"one\n"}"#),
        body.find(r#"{"stderr":"two\n"}"#),
        body.find(r#""exit":"#),
    );
    assert!(one < two && two < exit && one.is_some(), "{body}");
    // A file written by a command, read back.
    let out = cli(&[
        "sandbox",
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "printf made > /workspace/out.txt",
    ]);
    assert!(out.status.success(), "{out:?}");
    let back = tempfile::NamedTempFile::new().unwrap();
    let from = format!("{id}:/workspace/out.txt");
    let out = cli(&["sandbox", "cp", &from, back.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read(back.path()).unwrap(), b"made");
    // A folder in (its regular files, a link left out and said), listed, out as tar, a part
    // of it removed; kept alive.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("a.txt"), "A").unwrap();
    std::fs::write(dir.path().join("sub/b.txt"), "B").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
    let to = format!("{id}:/workspace/proj");
    let out = cli(&["sandbox", "cp", dir.path().to_str().unwrap(), &to]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("left out"),
        "the link is said: {out:?}"
    );
    let out = cli(&[
        "sandbox",
        "exec",
        &id,
        "--",
        "cat",
        "/workspace/proj/sub/b.txt",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "B", "{out:?}");
    let out = cli(&["sandbox", "ls", &to]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    assert!(
        listed.contains("a.txt") && listed.contains("sub") && !listed.contains("link"),
        "{listed}"
    );
    let archive = dir.path().join("out.tar");
    let out = cli(&["sandbox", "cp", "--tar", &to, archive.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let tar = std::fs::read(&archive).unwrap();
    let names = String::from_utf8_lossy(&tar);
    assert!(
        names.contains("sub/b.txt") && names.contains("a.txt"),
        "{names}"
    );
    let out = cli(&["sandbox", "rm", &format!("{to}/sub")]);
    assert!(out.status.success(), "{out:?}");
    let out = cli(&["sandbox", "ls", &to]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("sub"),
        "{out:?}"
    );
    let out = cli(&["sandbox", "list", "--cluster"]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    let line = listed.lines().find(|l| l.starts_with(&id));
    assert!(
        line.is_some_and(|l| l.contains(" live ") && l.contains(&t.ids[worker])),
        "{listed}"
    );
    let out = cli(&["sandbox", "keepalive", &id]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("idle left"),
        "{out:?}"
    );
    // Another token sees nothing of it.
    for (method, path) in [
        ("GET", format!("/sandboxes/{id}")),
        ("DELETE", format!("/sandboxes/{id}")),
    ] {
        let (code, body) = as_token(&t.c, node, &bob, method, &path, "");
        assert_eq!(code, 404, "{method} {path}: {body}");
    }
    let (_, listed) = as_token(&t.c, node, &bob, "GET", "/sandboxes", "");
    assert!(!listed.contains(&id), "{listed}");
    // Closed: every later call says so.
    let out = cli(&["sandbox", "close", &id]);
    assert!(out.status.success(), "{out:?}");
    let (code, body) = as_token(
        &t.c,
        node,
        &alice,
        "POST",
        &format!("/sandboxes/{id}/exec"),
        r#"{"argv": ["true"]}"#,
    );
    assert_eq!(code, 410, "{body}");
    assert!(body.contains("\"reason\":\"closed\""), "{body}");
    // Its container is removed after the close answered (off the caller's time).
    let removed = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        (!live_of(true).contains(&container)).then_some(())
    });
    assert!(removed.is_some(), "closed means removed");

    // A worker killed with kill -9 takes its live sandboxes (and its warm ones) with it (their
    // supervisor ends when the node's end of its stdin closes), and removes what is left when
    // it starts again.
    let out = cli(&["sandbox", "create"]);
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (code, body) = as_token(&t.c, node, &alice, "GET", &format!("/sandboxes/{id}"), "");
    assert_eq!(code, 200, "{body}");
    let worker = t.index_of(
        serde_json::from_str::<Value>(&body).unwrap()["worker"]
            .as_str()
            .unwrap(),
    );
    let worker_id = t.ids[worker].clone();
    let live_of = move |all: bool| live_containers_of(&worker_id, all);
    let before = live_of(true);
    assert!(!before.is_empty());
    t.c.kill(worker);
    let stopped = wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        live_of(false)
            .iter()
            .all(|c| !before.contains(c))
            .then_some(())
    });
    assert!(
        stopped.is_some(),
        "a live sandbox still runs after its node's kill -9"
    );
    t.c.start_node(worker);
    let removed = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let now = live_of(true);
        before.iter().all(|c| !now.contains(c)).then_some(())
    });
    assert!(
        removed.is_some(),
        "the restarted node left its old live sandbox behind"
    );
}

/// A live sandbox of `token`'s made through node `origin` and placed by the admin on a worker
/// other than `admin`: its id and its worker's index. The admin places on the least loaded
/// worker, ties by node id, so the sandboxes that land on the admin are kept until one lands
/// elsewhere, then closed.
fn sandbox_off_admin(t: &TaskCluster, origin: usize, token: &str, admin: usize) -> (String, usize) {
    let mut on_admin = Vec::new();
    for _ in 0..3 {
        let (code, made) = as_token(&t.c, origin, token, "POST", "/sandboxes", "{}");
        assert_eq!(code, 201, "{made}");
        let made: Value = serde_json::from_str(&made).unwrap();
        let id = made["id"].as_str().unwrap().to_owned();
        let worker = t.index_of(made["worker"].as_str().unwrap());
        if worker != admin {
            for other in on_admin {
                let path = format!("/sandboxes/{other}");
                let (code, answer) = as_token(&t.c, origin, token, "DELETE", &path, "");
                assert_eq!(code, 200, "{answer}");
            }
            return (id, worker);
        }
        on_admin.push(id);
    }
    panic!("3 sandboxes in a row were placed on the admin: {on_admin:?}");
}

/// Issue 54, item 8: nodes that meet as separate hosts do, each API on its own loopback (as the
/// docs suggest), so no node reaches another's API. A live sandbox is made and used through a
/// node that is neither its worker nor the admin, every call carried to the worker over the
/// cluster transport (an API tunnel, counted at both ends); the cluster-wide list has it, and
/// `/cluster/status` has every node's own view. Before: the create waited on a worker it could
/// not ask, and every call answered 503 "advertised no API this node can reach".
#[test]
fn a_live_sandbox_is_used_through_another_node_when_no_api_reaches_another_host() {
    let ip = chorus_tests::host_ip();
    let t = TaskCluster::start_off_loopback(BIN, 3, &ip);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    // Each node knows the others, and no API address of theirs (theirs are on loopback).
    for i in 0..3 {
        let (code, view) = http_request(t.c.nodes[i].http_port, "GET", "/cluster", None).unwrap();
        assert_eq!(code, 200, "{view}");
        let view: Value = serde_json::from_str(&view).unwrap();
        let others: Vec<&Value> = view["members"].as_array().unwrap()[1..].iter().collect();
        assert_eq!(others.len(), 2, "n{i}: {view}");
        assert!(others.iter().all(|m| m["http"].is_null()), "n{i}: {view}");
    }
    let origin = (admin + 1) % 3;
    let alice = token(&t.c, "submit");
    let (id, worker) = sandbox_off_admin(&t, origin, &alice, admin);
    let via = (0..3).find(|i| *i != admin && *i != worker).unwrap();
    let base = format!("/sandboxes/{id}");
    let file = r#"{"path": "/workspace/a.txt", "content": "through the tunnel\n"}"#;
    let (code, answer) = as_token(&t.c, via, &alice, "PUT", &format!("{base}/files"), file);
    assert_eq!(code, 200, "write through n{via}: {answer}");
    assert_eq!(
        shell_out(&t, via, &alice, &id, "cat /workspace/a.txt"),
        "through the tunnel\n"
    );
    // Streamed (NDJSON) as it comes, through the tunnel too.
    let body = r#"{"shell": "echo one; echo two >&2", "stream": true}"#;
    let (code, lines) = as_token(&t.c, via, &alice, "POST", &format!("{base}/exec"), body);
    assert_eq!(code, 200, "{lines}");
    assert!(
        lines.contains("one") && lines.contains("two") && lines.contains("exit_code"),
        "{lines}"
    );
    let (code, all) = as_token(&t.c, via, &alice, "GET", "/sandboxes?cluster=true", "");
    assert_eq!(code, 200, "{all}");
    let all: Value = serde_json::from_str(&all).unwrap();
    assert!(
        all["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == id.as_str() && e["state"] == "live"),
        "the worker's list, asked through the tunnel, has it: {all}"
    );
    assert_eq!(all["unreached"].as_array().map_or(0, Vec::len), 0, "{all}");
    let (code, status) =
        http_request(t.c.nodes[via].http_port, "GET", "/cluster/status", None).unwrap();
    assert_eq!(code, 200, "{status}");
    let status: Value = serde_json::from_str(&status).unwrap();
    for n in status["nodes"].as_array().unwrap() {
        assert!(n["status"].is_object(), "every node's own view: {status}");
    }
    let tunnels = |i: usize, way: &str| {
        let name = format!("chorus_transport_api_tunnels_total{{direction=\"{way}\"}}");
        metric(&t.c, i, &name).unwrap_or(0)
    };
    assert!(tunnels(via, "out") >= 3, "n{via} opened the tunnels");
    assert!(tunnels(worker, "in") >= 3, "n{worker} served them");
    let (code, answer) = as_token(&t.c, via, &alice, "DELETE", &base, "");
    assert_eq!(code, 200, "close through n{via}: {answer}");
    let (code, answer) = as_token(&t.c, via, &alice, "GET", &base, "");
    assert_eq!(code, 410, "closed: {answer}");
    // The command line, given only n{via}: a task's output read at its worker, through n{via}
    // (`/nodes/{worker}/api/...`); each node's own status, the same way.
    let addr = format!("127.0.0.1:{}", t.c.nodes[via].http_port);
    let (id, ran_on) = (0..6)
        .find_map(|n| {
            let (_, id) = submit(
                &t.c,
                via,
                &spec(&format!("echo relayed-{n}; echo e{n} >&2")),
            );
            let r = result(&t.c, via, &id);
            assert_eq!(r["status"], "succeeded", "{r}");
            let worker = t.index_of(r["worker"].as_str().unwrap());
            (worker != via).then_some((id, worker))
        })
        .expect("a task ran on another worker than n{via} in six");
    let out = t.c.chorus(&["task", "logs", &id, "--addr", &addr]);
    assert!(
        out.status.success(),
        "task logs of n{ran_on}'s run: {out:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("relayed-"), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with('e'),
        "{out:?}"
    );
    let out =
        t.c.chorus(&["status", "--cluster", "--json", "--addr", &addr]);
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["nodes"].as_array().unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(rows.len(), 3, "{doc}");
    for row in rows {
        assert!(
            row["status"]["node_id"] == row["member"]["node_id"],
            "each node's own: {row}"
        );
    }
}

/// Issue 53: a worker cut off without its connection closing — paused (SIGSTOP), as a host
/// behind a partition looks — loses its live sandbox all the same: libp2p's ping reports it
/// and its connection is closed, so the admin hears it down and the sandbox's record says
/// `lost` — in ~15 s at the tests' tempo, the ping following the heartbeat (pings every 1.2 s,
/// the first waiting 2 s, the second libp2p's 10 s for a fresh stream; before: ~48 s whatever
/// the tempo, and never before that, while TCP held). Woken, it reconnects and stops its copy.
#[test]
fn a_paused_workers_live_sandbox_is_recorded_lost_and_its_copy_stopped_when_it_wakes() {
    let t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let alice = token(&t.c, "submit");
    let (id, worker) = sandbox_off_admin(&t, admin, &alice, admin);
    t.c.signal(worker, Signal::SIGSTOP);
    let paused = std::time::Instant::now();
    let lost = wait_until(Duration::from_secs(90), Duration::from_millis(250), || {
        let (code, view) = as_token(&t.c, admin, &alice, "GET", &format!("/tasks/{id}"), "");
        (code == 200 && view.contains("\"status\":\"lost\"")).then_some(view)
    });
    let took = paused.elapsed();
    t.c.signal(worker, Signal::SIGCONT);
    let lost = lost.expect("a paused worker's live sandbox is never recorded lost");
    assert!(lost.contains(&t.ids[worker]), "{lost}");
    eprintln!("a paused worker's live sandbox was recorded lost {took:?} after the pause");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let listed = || {
        let (_, listed) = as_token(&t.c, worker, &alice, "GET", "/sandboxes", "");
        listed
    };
    let stopped = wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        (!listed().contains(&id)).then_some(())
    });
    assert!(
        stopped.is_some(),
        "the woken worker still holds it: {}",
        listed()
    );
}

/// The stdout of `shell` run in sandbox `id` through node `via` with `token` (which must
/// succeed).
fn shell_out(t: &TaskCluster, via: usize, token: &str, id: &str, shell: &str) -> String {
    let body = serde_json::json!({ "shell": shell }).to_string();
    let path = format!("/sandboxes/{id}/exec");
    let (code, answer) = as_token(&t.c, via, token, "POST", &path, &body);
    assert_eq!(code, 200, "{answer}");
    serde_json::from_str::<Value>(&answer).unwrap()["stdout"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A three-node cluster with a live sandbox of `alice`'s placed off the admin, and `via`: the
/// node that is neither its admin nor its worker, which every call goes through.
struct Third {
    t: TaskCluster,
    id: String,
    via: usize,
    alice: String,
}

impl Third {
    fn start() -> Third {
        let t = TaskCluster::start(BIN);
        let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
        let origin = (admin + 1) % 3;
        let alice = token(&t.c, "submit");
        let (id, worker) = sandbox_off_admin(&t, origin, &alice, admin);
        let via = (0..3).find(|i| *i != admin && *i != worker).unwrap();
        Third { t, id, via, alice }
    }
}

/// `chorus ARGS` (a subcommand of two words, then its own) asking node `via` of `t` with
/// `token`.
fn cli_via(t: &TaskCluster, via: usize, token: &str, args: &[&str]) -> std::process::Output {
    let addr = format!("127.0.0.1:{}", t.c.nodes[via].http_port);
    let mut all = args[..2].to_vec();
    all.extend(["--addr", &addr]);
    all.extend(&args[2..]);
    chorus_tests::run_chorus_env(BIN.as_ref(), &all, &[("CHORUS_TOKEN", token)])
}

/// Issue 53: a live sandbox's files move in and out as they come, never held whole, through a
/// node that is neither the admin nor the worker: 100 MiB — past the 96 MiB body and the 64 MiB
/// file a call held whole before — in by `sandbox cp` and back out, byte for byte. A raw upload
/// that breaks off part way leaves no file behind, and the sandbox goes on; one past the
/// sandbox's own disk (its 64 MiB `/tmp`) is refused with the reason and leaves nothing.
#[test]
fn a_live_sandboxes_large_file_streams_in_and_out_through_another_node() {
    use std::io::Write;
    let Third { t, id, via, alice } = Third::start();
    let cli = |args: &[&str]| cli_via(&t, via, &alice, args);
    let size: usize = 100 << 20;
    let data: Vec<u8> = (0..size)
        .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect();
    let local = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(local.path(), &data).unwrap();
    let inside = format!("{id}:/workspace/big.bin");
    let out = cli(&["sandbox", "cp", local.path().to_str().unwrap(), &inside]);
    assert!(out.status.success(), "{out:?}");
    let exec = |shell: &str| shell_out(&t, via, &alice, &id, shell);
    assert_eq!(exec("stat -c %s /workspace/big.bin"), format!("{size}\n"));
    let back = tempfile::NamedTempFile::new().unwrap();
    let out = cli(&["sandbox", "cp", &inside, back.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let got = std::fs::read(back.path()).unwrap();
    assert_eq!(got.len(), size, "the whole file came back");
    let differs = got.iter().zip(&data).position(|(a, b)| a != b);
    assert_eq!(differs, None, "the first byte that differs");

    // 1 MiB of the 10 MiB its length says, then the connection closes.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", t.c.nodes[via].http_port)).unwrap();
    write!(
        raw,
        "PUT /sandboxes/{id}/files?path=/workspace/cut.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Authorization: Bearer {alice}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\n\r\n",
        10 << 20
    )
    .unwrap();
    raw.write_all(&data[..1 << 20]).unwrap();
    // The write is under way at the worker: the file is there, partly written.
    let begun = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        (exec("test -e /workspace/cut.bin && echo there") == "there\n").then_some(())
    });
    assert!(begun.is_some(), "the upload never reached the sandbox");
    drop(raw);
    let removed = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        (exec("test -e /workspace/cut.bin || echo none") == "none\n").then_some(())
    });
    assert!(removed.is_some(), "a broken-off upload left a part behind");
    assert_eq!(exec("stat -c %s /workspace/big.bin"), format!("{size}\n"));
    // The sandbox's own disk bounds what it keeps: 100 MiB into its 64 MiB /tmp is refused
    // with the reason, and leaves nothing there.
    let out = cli(&[
        "sandbox",
        "cp",
        local.path().to_str().unwrap(),
        &format!("{id}:/tmp/big.bin"),
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(said.contains("422") && said.contains("space"), "{said}");
    assert_eq!(exec("test -e /tmp/big.bin || echo none"), "none\n");
}

/// Issue 53: a folder moves as a tar archive as it comes, never held whole, through a node
/// that is neither the admin nor the worker: 80 MiB of files — past the 64 MiB a tree call
/// held whole before — in by `sandbox cp DIR`, its modes, an empty folder and nothing of a
/// local symbolic link with it, and back out by `sandbox cp --tar`, byte for byte, a file's
/// second name as a hard link and the sandbox's symbolic link left out. A raw archive with a
/// symbolic link and a name that leaves the folder writes the rest and lists those two; one
/// that breaks off, or is not tar, is refused.
#[test]
fn a_live_sandboxes_folder_streams_in_and_out_through_another_node() {
    use std::os::unix::fs::PermissionsExt;
    let Third { t, id, via, alice } = Third::start();
    let cli = |args: &[&str]| cli_via(&t, via, &alice, args);
    let exec = |shell: &str| shell_out(&t, via, &alice, &id, shell);
    let local = tempfile::tempdir().unwrap();
    let root = local.path().join("project");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    let size: usize = 80 << 20;
    let data: Vec<u8> = (0..size)
        .map(|i| (i % 253) as u8 ^ (i >> 20) as u8)
        .collect();
    std::fs::write(root.join("data.bin"), &data).unwrap();
    std::fs::write(root.join("src/run.sh"), "echo ran\n").unwrap();
    std::fs::set_permissions(root.join("src/run.sh"), PermissionsExt::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    let out = cli(&[
        "sandbox",
        "cp",
        root.to_str().unwrap(),
        &format!("{id}:/workspace/p"),
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains("etc") && said.contains("not a file or a folder"),
        "{said}"
    );
    assert_eq!(
        exec(
            "stat -c '%s %a' /workspace/p/data.bin /workspace/p/src/run.sh; \
              test -d /workspace/p/empty && echo empty; test -e /workspace/p/etc || echo no-etc"
        ),
        format!("{size} 644\n9 750\nempty\nno-etc\n")
    );
    // Out: a hard link among the files comes as one; a symbolic link in the sandbox does not.
    exec("ln /workspace/p/src/run.sh /workspace/p/src/again.sh; ln -s /etc /workspace/p/etc");
    let back = local.path().join("back.tar");
    let out = cli(&[
        "sandbox",
        "cp",
        "--tar",
        &format!("{id}:/workspace/p"),
        back.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let mut archive = tar::Archive::new(std::fs::File::open(&back).unwrap());
    let mut seen = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let kind = entry.header().entry_type();
        if name == "data.bin" {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut got).unwrap();
            assert_eq!(got.len(), size, "the whole file came back");
            assert!(got == data, "data.bin came back as it went");
        }
        seen.insert(name, kind);
    }
    use tar::EntryType::{Directory, Link, Regular};
    let links = ["src/again.sh", "src/run.sh"]
        .iter()
        .filter(|n| seen.get(**n) == Some(&Link))
        .count();
    assert_eq!(
        links, 1,
        "one of the two names is a hard link to the other: {seen:?}"
    );
    assert_eq!(seen.get("data.bin"), Some(&Regular), "{seen:?}");
    assert_eq!(seen.get("empty"), Some(&Directory), "{seen:?}");
    assert!(
        !seen.contains_key("etc"),
        "no symbolic link comes out: {seen:?}"
    );

    // A raw archive: a symbolic link and a name with `..` are left out and listed.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o600);
    b.append_data(&mut h, "kept.txt", &b"yes"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "root", "/").unwrap();
    let mut h = tar::Header::new_old();
    h.set_size(2);
    h.set_mode(0o644);
    h.as_old_mut().name[..9].copy_from_slice(b"../up.txt");
    h.set_cksum();
    b.append(&h, &b"no"[..]).unwrap();
    let archive = b.into_inner().unwrap();
    let auth = format!("Bearer {alice}");
    let headers = [
        ("Host", "127.0.0.1"),
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/x-tar"),
    ];
    let put = |body: &[u8]| {
        chorus_tests::http_exact_bytes(
            t.c.nodes[via].http_port,
            "PUT",
            &format!("/sandboxes/{id}/tree?path=/workspace/raw"),
            &headers,
            body,
        )
        .expect("the node answers")
    };
    let (code, answer) = put(&archive);
    assert_eq!(code, 200, "{answer}");
    // (The JSON alone: a forwarded answer may come in chunks.)
    let json = &answer[answer.find('{').unwrap()..=answer.rfind('}').unwrap()];
    let answer: Value = serde_json::from_str(json).unwrap();
    assert_eq!(answer["files"], 1, "{answer}");
    assert_eq!(answer["skipped"]["root"], "a symlink", "{answer}");
    assert_eq!(
        answer["skipped"]["../up.txt"], "a name that leaves the folder",
        "{answer}"
    );
    assert_eq!(
        exec("cat /workspace/raw/kept.txt; ls -A /workspace/raw; test -e /workspace/up.txt || echo none"),
        "yeskept.txt\nnone\n"
    );
    // Cut before its end, or not tar at all: refused, said why.
    let (code, answer) = put(&archive[..700]);
    assert_eq!(code, 400, "{answer}");
    assert!(answer.contains("bad_tree"), "{answer}");
    let (code, answer) = put(&[b'x'; 1024]);
    assert_eq!(code, 400, "{answer}");
    assert!(answer.contains("not a tar archive"), "{answer}");
}

/// Issue 53: a worker's bound on one streamed file (`[sandbox] live_file_max_mb`, 1 MiB here)
/// holds through another node: an upload past it is refused 413, counted, and leaves nothing;
/// one of exactly the bound lands whole; a download past it breaks off, and `sandbox cp` says
/// so and keeps no part.
#[test]
fn a_streamed_file_past_the_workers_bound_is_refused_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("small.toml");
    std::fs::write(&config, "[sandbox]\nlive_file_max_mb = 1\n").unwrap();
    let t = TaskCluster::start_with(BIN, 2, &["--config", config.to_str().unwrap()]);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let alice = token(&t.c, "submit");
    let (code, made) = as_token(&t.c, admin, &alice, "POST", "/sandboxes", "{}");
    assert_eq!(code, 201, "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    let id = made["id"].as_str().unwrap().to_owned();
    let worker = t.index_of(made["worker"].as_str().unwrap());
    let via = 1 - worker;
    let addr = format!("127.0.0.1:{}", t.c.nodes[via].http_port);
    let cp = |from: &str, to: &str| {
        let args = ["sandbox", "cp", "--addr", &addr, from, to];
        chorus_tests::run_chorus_env(BIN.as_ref(), &args, &[("CHORUS_TOKEN", &alice)])
    };
    let exec = |shell: &str| shell_out(&t, via, &alice, &id, shell);
    let refusals = || {
        metric(
            &t.c,
            worker,
            "chorus_live_refused_total{reason=\"file_size\"}",
        )
        .unwrap_or(0)
    };
    let before = refusals();
    let bound = 1usize << 20;
    let local = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(local.path(), vec![7u8; bound + 1]).unwrap();
    let out = cp(
        local.path().to_str().unwrap(),
        &format!("{id}:/workspace/over"),
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(said.contains("413") && said.contains("1048576"), "{said}");
    assert_eq!(exec("test -e /workspace/over || echo none"), "none\n");
    assert_eq!(refusals(), before + 1);
    std::fs::write(local.path(), vec![7u8; bound]).unwrap();
    let out = cp(
        local.path().to_str().unwrap(),
        &format!("{id}:/workspace/at"),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(exec("stat -c %s /workspace/at"), format!("{bound}\n"));
    // Out: the file at the bound comes back whole; one byte more breaks off.
    let back = dir.path().join("back");
    let out = cp(&format!("{id}:/workspace/at"), back.to_str().unwrap());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::metadata(&back).unwrap().len(), bound as u64);
    exec("head -c 1048577 /dev/zero > /workspace/more");
    let more = dir.path().join("more");
    let out = cp(&format!("{id}:/workspace/more"), more.to_str().unwrap());
    assert!(!out.status.success(), "{out:?}");
    assert!(!more.exists(), "a broken-off download left a part");
    let (code, closed) = as_token(&t.c, via, &alice, "DELETE", &format!("/sandboxes/{id}"), "");
    assert_eq!(code, 200, "{closed}");
}

/// Issue 53: a live sandbox is placed by the admin (a live task of the core) and used, start
/// to end, through the API of a node that is neither the admin nor its worker (forwarded with
/// a delegated token); another token sees nothing of it through any node; once closed, every
/// node says so (410). Its worker killed with `kill -9` while the sandbox is in use: the next
/// call through another node answers 410 lost, never hangs; within a failure-detection
/// interval the cluster's record says lost too (its task ended `lost`, naming the worker), no
/// container of it runs, and the restarted worker leaves none behind.
#[test]
fn a_live_sandbox_is_used_through_a_node_that_is_neither_admin_nor_worker() {
    let mut t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    let origin = (admin + 1) % 3;
    let alice = token(&t.c, "submit");
    let bob = token(&t.c, "submit");
    let (id, worker) = sandbox_off_admin(&t, origin, &alice, admin);
    let via = (0..3).find(|i| *i != admin && *i != worker).unwrap();
    let base = format!("/sandboxes/{id}");
    let steps: [(&str, String, &str, u16, &str); 7] = [
        (
            "PUT",
            format!("{base}/files"),
            r#"{"path": "/workspace/a.py", "content": "print(41 + 1)\n"}"#,
            200,
            "\"size\":14",
        ),
        (
            "POST",
            format!("{base}/exec"),
            r#"{"argv": ["cat", "/workspace/a.py"]}"#,
            200,
            "print(41 + 1)",
        ),
        (
            "POST",
            format!("{base}/env"),
            r#"{"env": {"STAGE": "via"}}"#,
            200,
            "STAGE",
        ),
        (
            "POST",
            format!("{base}/exec"),
            r#"{"shell": "echo $STAGE > /workspace/out"}"#,
            200,
            "\"exit_code\":0",
        ),
        (
            "GET",
            format!("{base}/files?path=/workspace/out"),
            "",
            200,
            "via\n",
        ),
        // The tree downloaded: the files written above, in a tar archive.
        (
            "GET",
            format!("{base}/tree?path=/workspace"),
            "",
            200,
            "a.py",
        ),
        ("GET", base.clone(), "", 200, &id),
    ];
    for (method, path, body, want, holds) in &steps {
        let (code, answer) = as_token(&t.c, via, &alice, method, path, body);
        assert_eq!(code, *want, "{method} {path} through node {via}: {answer}");
        assert!(answer.contains(holds), "{method} {path}: {answer}");
    }
    // The admin neither made nor holds it: its own list leaves it out, the cluster's has it,
    // as its worker says; another token sees it in neither.
    let (code, mine) = as_token(&t.c, admin, &alice, "GET", "/sandboxes", "");
    assert_eq!(code, 200, "{mine}");
    assert!(!mine.contains(&id), "{mine}");
    let (code, all) = as_token(&t.c, admin, &alice, "GET", "/sandboxes?cluster=true", "");
    assert_eq!(code, 200, "{all}");
    let all: Value = serde_json::from_str(&all).unwrap();
    let entry = all["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id.as_str())
        .unwrap_or_else(|| panic!("the cluster's list has it: {all}"));
    assert_eq!(entry["state"], "live", "{all}");
    assert_eq!(entry["worker"], t.ids[worker].as_str(), "{all}");
    assert_eq!(all["unreached"], serde_json::json!([]), "{all}");
    let (_, theirs) = as_token(&t.c, admin, &bob, "GET", "/sandboxes?cluster=true", "");
    assert!(!theirs.contains(&id), "{theirs}");
    // A file's raw bytes, forwarded as they came (their media type too), mode and all.
    let auth = format!("Bearer {alice}");
    let (code, answer) = chorus_tests::http_exact(
        t.c.nodes[via].http_port,
        "PUT",
        &format!("{base}/files?path=/workspace/raw.txt&mode=600"),
        &[
            ("Host", "127.0.0.1"),
            ("Authorization", &auth),
            ("Content-Type", "application/octet-stream"),
        ],
        "raw {\"not\": json}",
    )
    .expect("the node answers");
    assert_eq!(code, 200, "{answer}");
    let (code, answer) = as_token(
        &t.c,
        via,
        &alice,
        "POST",
        &format!("{base}/exec"),
        r#"{"shell": "stat -c %a /workspace/raw.txt; cat /workspace/raw.txt"}"#,
    );
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains(r#"600\nraw {\"not\": json}"#), "{answer}");
    // A background process: started, followed through its log, listed, killed.
    let (code, answer) = as_token(
        &t.c,
        via,
        &alice,
        "POST",
        &format!("{base}/exec"),
        r#"{"shell": "while :; do echo tick; sleep 0.1; done", "background": true}"#,
    );
    assert_eq!(code, 200, "{answer}");
    let started: Value = serde_json::from_str(&answer).unwrap();
    let (pid, log) = (
        started["pid"].as_u64().unwrap(),
        started["log"].as_str().unwrap().to_owned(),
    );
    let ticks = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let (code, text) = as_token(
            &t.c,
            via,
            &alice,
            "GET",
            &format!("{base}/files?path={log}"),
            "",
        );
        (code == 200 && text.matches("tick").count() >= 3).then_some(text)
    });
    assert!(ticks.is_some(), "the background process's log did not grow");
    let listed = |t: &TaskCluster| {
        let (code, text) = as_token(&t.c, via, &alice, "GET", &format!("{base}/processes"), "");
        assert_eq!(code, 200, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"].as_u64() == Some(pid))
    };
    assert!(listed(&t), "the background process is listed");
    let (code, answer) = as_token(
        &t.c,
        via,
        &alice,
        "DELETE",
        &format!("{base}/processes/{pid}"),
        "",
    );
    assert_eq!(code, 200, "{answer}");
    let gone = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        (!listed(&t)).then_some(())
    });
    assert!(gone.is_some(), "the killed process is still listed");
    for i in 0..3 {
        let (code, answer) = as_token(&t.c, i, &bob, "GET", &base, "");
        assert_eq!(code, 404, "bob through node {i}: {answer}");
    }
    let (code, answer) = as_token(&t.c, via, &alice, "DELETE", &base, "");
    assert_eq!(code, 200, "{answer}");
    for i in [admin, via, worker] {
        let (code, answer) = as_token(
            &t.c,
            i,
            &alice,
            "POST",
            &format!("{base}/exec"),
            r#"{"argv": ["true"]}"#,
        );
        assert_eq!(code, 410, "through node {i}: {answer}");
        assert!(answer.contains("closed"), "{answer}");
    }
    // Its task ended at its node of record: closed by alice.
    let closed = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let (code, view) = as_token(&t.c, origin, &alice, "GET", &format!("/tasks/{id}"), "");
        (code == 200 && view.contains("\"status\":\"succeeded\"")).then_some(view)
    });
    assert!(closed.is_some(), "the sandbox's task did not end");

    // The worker killed while its sandbox is in use: made through the admin (its node of
    // record, which outlives the worker).
    let origin = admin;
    let (lost, worker) = sandbox_off_admin(&t, origin, &alice, admin);
    let via = (0..3).find(|i| *i != admin && *i != worker).unwrap();
    let exec = format!("/sandboxes/{lost}/exec");
    let (code, _) = as_token(&t.c, via, &alice, "POST", &exec, r#"{"argv": ["true"]}"#);
    assert_eq!(code, 200);
    let before = live_containers_of(&t.ids[worker], true);
    t.c.kill(worker);
    let killed = std::time::Instant::now();
    let (code, answer) = as_token(&t.c, via, &alice, "POST", &exec, r#"{"argv": ["true"]}"#);
    assert!(killed.elapsed() < Duration::from_secs(10), "the call hung");
    assert!(
        (code == 410 && answer.contains("lost"))
            || (code == 503 && answer.contains(&t.ids[worker])),
        "{code} {answer}"
    );
    // The cluster's verdict: its task ended lost, naming the worker, at every node.
    let verdict = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        let (code, view) = as_token(&t.c, origin, &alice, "GET", &format!("/tasks/{lost}"), "");
        (code == 200 && view.contains("\"status\":\"lost\"")).then_some(view)
    })
    .expect("the killed worker's sandbox is recorded lost");
    let detected = killed.elapsed();
    assert!(verdict.contains(&t.ids[worker]), "{verdict}");
    for i in (0..3).filter(|i| *i != worker) {
        let (code, answer) = as_token(&t.c, i, &alice, "GET", &format!("/sandboxes/{lost}"), "");
        assert_eq!(code, 410, "through node {i}: {answer}");
        assert!(answer.contains("\"reason\":\"lost\""), "{answer}");
    }
    eprintln!("the killed worker's sandbox was recorded lost {detected:?} after the kill");
    let stopped = wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        let now = live_containers_of(&t.ids[worker], false);
        before.iter().all(|c| !now.contains(c)).then_some(())
    });
    assert!(
        stopped.is_some(),
        "a live sandbox of the killed worker still runs"
    );
    t.c.start_node(worker);
    let leftover = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let now = live_containers_of(&t.ids[worker], true);
        before.iter().all(|c| !now.contains(c)).then_some(())
    });
    assert!(
        leftover.is_some(),
        "a live sandbox's container of the killed worker is left"
    );
    // The restarted worker answers from the record once it is connected again (503 before).
    let said = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        let (code, answer) = as_token(&t.c, worker, &alice, "POST", &exec, r#"{"argv": ["true"]}"#);
        (code != 503).then_some((code, answer))
    });
    let (code, answer) = said.expect("the restarted worker answers within 30 s");
    assert_eq!(code, 410, "through the restarted worker: {answer}");
    assert!(answer.contains("lost"), "{answer}");
}

/// Issue 53: the admin restarted during a create. Whatever the moment, a create ends in one
/// sandbox or none — never two: made (201) and usable, or gone (410, lost with the node it was
/// placed on); a retry with its key names the same sandbox; the cluster's workers hold at most
/// one. Two rounds: the admin killed just after the create was sent (the old admin may have
/// placed it, on itself or another: made, or lost and never made again), and just before,
/// once the create's node let it go (the next admin places it after its first ticks, in which
/// it places no live sandbox: the create waits through the election and is made, 201).
#[test]
fn the_admin_restarted_during_a_create_makes_one_sandbox_or_none() {
    let mut t = TaskCluster::start(BIN);
    let alice = token(&t.c, "submit");
    for (round, kill_first) in [("after", false), ("before", true)] {
        let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(60));
        let origin = (admin + 1) % 3;
        let key = format!("restart-{round}");
        let body = format!(r#"{{"key": "{key}", "wait_ms": 60000}}"#);
        let port = t.c.nodes[origin].http_port;
        let auth = format!("Bearer {alice}");
        let send = move || {
            std::thread::spawn(move || {
                http_exact(
                    port,
                    "POST",
                    "/sandboxes",
                    &[
                        ("Host", "127.0.0.1"),
                        ("Authorization", &auth),
                        ("Content-Type", "application/json"),
                    ],
                    &body,
                )
                .expect("the node answers")
            })
        };
        let create = if kill_first {
            t.c.kill(admin);
            // Sent once the create's node has let the dead admin go: offered only to the next.
            let old = t.ids[admin].clone();
            wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
                let s = t.c.status(origin)?;
                (s["admin"].as_str() != Some(old.as_str())).then_some(())
            })
            .expect("the create's node lets the dead admin go");
            send()
        } else {
            let create = send();
            t.c.kill(admin);
            create
        };
        std::thread::sleep(Duration::from_millis(500));
        t.c.start_node(admin);
        let (code, made) = create.join().unwrap();
        assert!(
            [201, 410].contains(&code),
            "round {round}: the create answered {code}: {made}"
        );
        let id = serde_json::from_str::<Value>(&made).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        // Asked again with its key: the same sandbox (or the same verdict), once.
        let retry = format!(r#"{{"key": "{key}", "wait_ms": 5000}}"#);
        let (again_code, again) =
            wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
                let (code, body) = as_token(&t.c, origin, &alice, "POST", "/sandboxes", &retry);
                (code != 202 && code != 503).then_some((code, body))
            })
            .expect("the retried create is answered");
        let again_id = serde_json::from_str::<Value>(&again).unwrap()["id"]
            .as_str()
            .map(str::to_owned);
        assert_eq!(
            again_id.as_deref(),
            Some(id.as_str()),
            "round {round}: {again}"
        );
        // The live sandboxes the cluster's workers hold (each round closes its own).
        let held = || -> u64 {
            (0..3)
                .filter_map(|i| metric(&t.c, i, "chorus_live_sandboxes"))
                .sum()
        };
        match (code, again_code) {
            (201, 200) => {
                assert_eq!(held(), 1, "round {round}: one live sandbox for {id}");
                let path = format!("/sandboxes/{id}/exec");
                let (code, answer) =
                    as_token(&t.c, origin, &alice, "POST", &path, r#"{"argv": ["true"]}"#);
                assert_eq!(code, 200, "{answer}");
                let path = format!("/sandboxes/{id}");
                let (code, answer) = as_token(&t.c, origin, &alice, "DELETE", &path, "");
                assert_eq!(code, 200, "{answer}");
            }
            // Offered to an admin that may have placed it before it died: lost, never made a
            // second time (design §4.8).
            (410, 410) if !kill_first => {
                assert!(again.contains("lost"), "round {round}: {again}");
                assert_eq!(held(), 0, "round {round}: a lost sandbox is held somewhere");
            }
            other => panic!("round {round}: answered {other:?}: {made} then {again}"),
        }
        eprintln!("round {round}: the create answered {code}, its retry {again_code}");
    }
}

/// Issue 54, item 2: a worker that joins through a node that is not the admin learns of the
/// admin before it is connected to it, and its first report left by a dial that found no
/// address; the next came 4 beats later, and a task queued meanwhile waited with its slots
/// idle. A worker reports again when its connection to the admin comes up, so the queued task
/// is placed on it within about a heartbeat of its start — measured here at 2 s beats, where
/// the old wait was 8 s.
#[test]
fn a_worker_that_joins_through_a_follower_runs_a_queued_task_within_a_heartbeat() {
    let out = chorus_tests::run_chorus(BIN.as_ref(), &["sandbox", "image", "build"]);
    assert!(
        out.status.success(),
        "the test image builds (this test needs Docker): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let beat = Duration::from_secs(2);
    let timings = Timings {
        heartbeat_ms: beat.as_millis() as u64,
        election_min_ms: 5_000,
        election_max_ms: 7_000,
        discovery_ms: 800,
    };
    // Three nodes without Docker: no slots, so the task stays queued.
    let mut c = Cluster::start(BIN, 3, timings);
    let (_, _, admin) = c.wait_agreed(Duration::from_secs(90));
    let (_, id) = submit(&c, admin, &spec("echo joined"));
    let queued = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        task(&c, admin, &id).filter(|t| t["phase"] == "queued")
    });
    assert!(queued.is_some(), "{:?}", task(&c, admin, &id));
    // The worker knows only a follower's address; it finds the admin through it.
    let follower = (admin + 1) % 3;
    c.join = chorus_tests::Join::None;
    c.extra_args = vec![
        "--docker".into(),
        "--warm-image".into(),
        IMAGE.into(),
        "--capability".into(),
        "docker".into(),
        "--bootstrap".into(),
        format!("/ip4/127.0.0.1/tcp/{}", c.nodes[follower].p2p_port),
    ];
    let w = c.add_node();
    let started = std::time::Instant::now();
    let worker = id_of(&c, w);
    let placed_on = wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
        let t = task(&c, admin, &id)?;
        t["worker"].as_str().map(str::to_owned)
    });
    let waited = started.elapsed();
    for container in containers_of(&worker) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &container])
            .output();
    }
    assert_eq!(placed_on.as_deref(), Some(worker.as_str()));
    // A heartbeat, and one more for a loaded machine: well short of the old four.
    assert!(
        waited < 2 * beat,
        "placed {waited:?} after the worker started (heartbeat {beat:?})"
    );
}

fn id_of(c: &Cluster, i: usize) -> String {
    wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        c.status(i)?["node_id"].as_str().map(str::to_owned)
    })
    .expect("the worker answers")
}

/// Issue 53: a create whose sandbox is lost before it is made gets one all the same — the CI
/// race of the read-write repository test (a worker won the next term before it took the
/// earlier admin's placement), made certain. The only worker that fits (the one with the
/// repository) is paused (SIGSTOP) before the create: the admin places it there; then the
/// office moves to the third node, so the worker, once it wakes, follows the new admin and
/// refuses the old placement, and the new admin, finding it on no worker, ends it `lost`
/// (never placed twice). The create makes another, which waits for a worker and is made on
/// that one when it wakes. The caller sees one create answered 201 (before: 410 `lost` for a
/// sandbox it never had), and the worker holds one sandbox of the caller's.
#[test]
fn a_create_lost_before_its_sandbox_was_made_is_made_again() {
    let mut t = TaskCluster::start(BIN);
    let repo = t.c.root().join("src");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README"), "from the repo\n").unwrap();
    let (admin_id, _, _) = t.c.wait_agreed(Duration::from_secs(60));
    // The worker: a node that is not the admin, restarted with the repository.
    let worker = (t.index_of(&admin_id) + 1) % 3;
    assert!(t.c.terminate(worker).is_some_and(|s| s.success()));
    t.c.extra_args
        .extend(["--repo".to_owned(), format!("src={}", repo.display())]);
    t.c.start_node(worker);
    let (mut admin_id, _, _) = t.c.wait_agreed(Duration::from_secs(60));
    if admin_id == t.ids[worker] {
        // The restarted node took the office (it happens): handed to another.
        let to = &t.ids[(worker + 1) % 3];
        let addr = format!("127.0.0.1:{}", t.c.nodes[worker].http_port);
        let moved = t.c.chorus(&["members", "--addr", &addr, "transfer", to]);
        assert!(moved.status.success(), "transfer: {moved:?}");
        admin_id = t.c.wait_agreed(Duration::from_secs(60)).0;
    }
    let admin = t.index_of(&admin_id);
    assert_ne!(admin, worker);
    let next = (0..3).find(|i| *i != admin && *i != worker).unwrap();
    let alice = token(&t.c, "submit");
    let log = t.c.root().join(format!("n{admin}.log"));
    let said_again = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("lost before it was made; making it again")
    };
    assert!(!said_again());
    // The admin must know the restarted worker offers the repository before it is paused, or
    // the create waits for a worker instead of being placed on it: a trial create (only that
    // worker can take it) answers once its report with `repo:src` has reached the admin.
    let trial = r#"{"repo": {"name": "src", "writable": false}, "wait_ms": 60000, "key": "trial"}"#;
    let (code, tried) = as_token(&t.c, admin, &alice, "POST", "/sandboxes", trial);
    assert_eq!(code, 201, "the trial create: {tried}");
    let tried: Value = serde_json::from_str(&tried).unwrap();
    assert_eq!(tried["worker"], t.ids[worker].as_str(), "{tried}");
    let gone = format!("/sandboxes/{}", tried["id"].as_str().unwrap());
    let (code, closed) = as_token(&t.c, admin, &alice, "DELETE", &gone, "");
    assert_eq!(code, 200, "the trial close: {closed}");

    t.c.signal(worker, Signal::SIGSTOP);
    let create = r#"{"repo": {"name": "src", "writable": false}, "wait_ms": 60000, "key": "k1"}"#;
    let (code, made) = std::thread::scope(|scope| {
        let call = scope.spawn(|| as_token(&t.c, admin, &alice, "POST", "/sandboxes", create));
        // Placed on the paused worker (the create is made through the admin).
        let placed = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
            let (_, listed) = as_token(&t.c, admin, &alice, "GET", "/sandboxes", "");
            listed.contains("\"state\":\"placed\"").then_some(())
        });
        let moved = t.c.chorus(&[
            "members",
            "--addr",
            &format!("127.0.0.1:{}", t.c.nodes[admin].http_port),
            "transfer",
            &t.ids[next],
        ]);
        let lost = wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
            said_again().then_some(())
        });
        t.c.signal(worker, Signal::SIGCONT);
        let (code, made) = call.join().expect("the create returns");
        assert!(
            placed.is_some(),
            "not placed on the paused worker: {code} {made}"
        );
        assert!(moved.status.success(), "transfer: {moved:?}");
        assert!(
            lost.is_some(),
            "the first try was not lost, or not made again: {code} {made}"
        );
        (code, made)
    });
    assert_eq!(code, 201, "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    assert_eq!(made["worker"], t.ids[worker].as_str(), "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let exec = r#"{"shell": "cat /workspace/README"}"#;
    let path = format!("/sandboxes/{id}/exec");
    let (code, out) = as_token(&t.c, next, &alice, "POST", &path, exec);
    assert_eq!(code, 200, "{out}");
    assert!(out.contains("from the repo"), "{out}");
    // The same key names the same sandbox.
    let (code, again) = as_token(&t.c, admin, &alice, "POST", "/sandboxes", create);
    assert_eq!(code, 200, "{again}");
    assert!(again.contains(&id), "{again}");
    // The worker holds one of the caller's sandboxes, this one.
    let held = || {
        let (_, listed) = as_token(&t.c, worker, &alice, "GET", "/sandboxes", "");
        let listed: Value = serde_json::from_str(&listed).unwrap_or_default();
        let live: Vec<String> = listed["sandboxes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["state"] == "live")
            .map(|s| s["id"].as_str().unwrap_or("?").to_owned())
            .collect();
        live
    };
    assert_eq!(held(), vec![id.clone()]);
    let (code, closed) = as_token(
        &t.c,
        next,
        &alice,
        "DELETE",
        &format!("/sandboxes/{id}"),
        "",
    );
    assert_eq!(code, 200, "{closed}");
}

/// Issue 53: a live sandbox with a read-write repository, used through a node that lacks the
/// repository. The admin places it on the worker whose `[repos]` has it (`repo:NAME`); a sync
/// through the other node carries the sandbox's change back (and refuses its `.git` change);
/// its close, through the other node too, syncs the last change before it answers, and says
/// what it carried.
#[test]
fn a_live_sandbox_with_a_read_write_repository_is_synced_back_through_any_node() {
    let mut t = TaskCluster::start_n(BIN, 2);
    let repo = t.c.root().join("src");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(repo.join("README"), "from the repo\n").unwrap();
    assert!(
        t.c.terminate(1).is_some_and(|s| s.success()),
        "a clean stop"
    );
    t.c.extra_args
        .extend(["--repo".to_owned(), format!("src={}", repo.display())]);
    t.c.start_node(1);
    t.c.wait_agreed(Duration::from_secs(60));
    let alice = token(&t.c, "submit");
    // Node 0 has no repository: the create waits until the admin places it on node 1.
    let create = r#"{"repo": {"name": "src", "writable": true}, "wait_ms": 60000}"#;
    let (code, made) = as_token(&t.c, 0, &alice, "POST", "/sandboxes", create);
    assert_eq!(code, 201, "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    assert_eq!(made["worker"], t.ids[1].as_str(), "{made}");
    let base = format!("/sandboxes/{}", made["id"].as_str().unwrap());
    let exec = r#"{"shell": "cd /workspace && cat README && echo fixed > README && echo new > added && echo '[x]' > .git/config"}"#;
    let (code, out) = as_token(&t.c, 0, &alice, "POST", &format!("{base}/exec"), exec);
    assert_eq!(code, 200, "{out}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["stdout"], "from the repo\n", "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");

    let (code, synced) = as_token(&t.c, 0, &alice, "POST", &format!("{base}/sync"), "{}");
    assert_eq!(code, 200, "{synced}");
    let synced: Value = serde_json::from_str(&synced).unwrap();
    assert_eq!(synced["written"], 2, "{synced}");
    assert_eq!(
        synced["refused"],
        serde_json::json!([".git/config"]),
        "{synced}"
    );
    assert_eq!(synced["complete"], false, "{synced}");
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "fixed\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("added")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/config")).unwrap(),
        "[core]\n"
    );

    let exec = r#"{"shell": "cd /workspace && rm added && echo last > README"}"#;
    let (code, out) = as_token(&t.c, 0, &alice, "POST", &format!("{base}/exec"), exec);
    assert_eq!(code, 200, "{out}");
    let (code, closed) = as_token(&t.c, 0, &alice, "DELETE", &base, "");
    assert_eq!(code, 200, "{closed}");
    let closed: Value = serde_json::from_str(&closed).unwrap();
    assert_eq!(closed["sync"]["written"], 1, "{closed}");
    assert_eq!(closed["sync"]["deleted"], 1, "{closed}");
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "last\n"
    );
    assert!(
        !repo.join("added").exists(),
        "deleted in the sandbox, so on the host"
    );
}

/// Issue 53: a live sandbox asked with `network: true` gets a network (an interface beside
/// loopback, within the worker's egress rules), and one asked without has loopback alone —
/// the flag travels from the create through the core's live task to the worker.
#[test]
fn a_live_sandbox_has_a_network_only_when_asked() {
    let t = TaskCluster::start_n(BIN, 1);
    let alice = token(&t.c, "submit");
    let interfaces = |create: &str| {
        let (code, made) = as_token(&t.c, 0, &alice, "POST", "/sandboxes", create);
        assert_eq!(code, 201, "{made}");
        let made: Value = serde_json::from_str(&made).unwrap();
        let base = format!("/sandboxes/{}", made["id"].as_str().unwrap());
        let exec = r#"{"shell": "ls /sys/class/net | sort | tr '\n' ' '"}"#;
        let (code, out) = as_token(&t.c, 0, &alice, "POST", &format!("{base}/exec"), exec);
        assert_eq!(code, 200, "{out}");
        let out: Value = serde_json::from_str(&out).unwrap();
        let (code, closed) = as_token(&t.c, 0, &alice, "DELETE", &base, "");
        assert_eq!(code, 200, "{closed}");
        out["stdout"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(interfaces("{}"), "lo ");
    let networked = interfaces(r#"{"network": true}"#);
    assert!(
        networked.starts_with("eth0 ") && networked.contains("lo "),
        "{networked}"
    );
}
