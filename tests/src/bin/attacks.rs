//! Issue 33's attack list, replayed against a three-node cluster of real `chorus run` processes
//! (Docker sandboxes, a pre-shared key, a read-write repository on every node) as a hostile
//! task author, a web page in an operator's browser and a neighbour without the key would try
//! it. Each attack prints what it tried and what the cluster did; the program exits 1 when any
//! got through. The tests cover each attack on its own (named in the table); this replays them
//! together on one cluster, from outside, as the issue asked.
//!
//! `cargo build -p chorus-tests --bins && target/debug/attacks target/debug/chorus-e2e`
//! (needs Docker and `git`; makes and removes its own temporary directories and sandboxes).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chorus_tests::{
    containers_of, http_exact, http_request, spawn_reported, test_acl_key_file, wait_until,
    Cluster, Timings, Value,
};

const IMAGE: &str = "chorus/sandbox:latest";
const SECRET: &str = "s3cr3t-value-7f1c";

/// What an attack came to.
enum Outcome {
    /// The cluster held: what it did instead.
    Held(String),
    /// The attack got through: what happened.
    Broke(String),
}

struct Ctx {
    c: Cluster,
    repo: PathBuf,
    outside: PathBuf,
    psk: PathBuf,
}

fn main() {
    let bin = std::env::args()
        .nth(1)
        .expect("usage: attacks PATH-TO-chorus");
    let out = chorus_tests::run_chorus(bin.as_ref(), &["sandbox", "image", "build"]);
    assert!(out.status.success(), "image build: {out:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = dir.path().join("repo");
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "untouched\n").expect("outside file");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    make_repo(&repo, &outside);
    let psk = dir.path().join("cluster.key");
    let out = chorus_tests::run_chorus(bin.as_ref(), &["psk", "generate", path(&psk)]);
    assert!(out.status.success(), "psk: {out:?}");
    let config = dir.path().join("node.toml");
    std::fs::write(&config, "[tasks]\nslots = 2\n").expect("config");
    let repo_arg = format!("r={}", repo.display());
    let c = Cluster::start_with(
        &bin,
        3,
        Timings::FAST,
        &[
            "--docker",
            "--psk-file",
            path(&psk),
            "--repo",
            &repo_arg,
            "--config",
            path(&config),
        ],
    );
    c.wait_agreed(Duration::from_secs(60));
    let ids = node_ids(&c);
    let mut cx = Ctx {
        c,
        repo,
        outside,
        psk,
    };

    type Attack = fn(&mut Ctx) -> Outcome;
    let attacks: [(&str, &str, Attack); 15] = [
        (
            "1",
            ".git config, hooks and module hooks written by a :rw task",
            git_code,
        ),
        (
            "2",
            "a planted .chorus-sync-* link, then a :rw write",
            sync_link,
        ),
        (
            "3a",
            "a web page's requests; a rebinding name; no token",
            web_page,
        ),
        ("3b", "a peer without the cluster key joins", outsider),
        (
            "4",
            "a task asks for 1 TiB, 1,048,576 pids, 64 CPUs",
            limits,
        ),
        (
            "5",
            "9 KB of control characters in output, 8 KB in a spec",
            frames,
        ),
        ("6", "kill -9 of the worker running a task", lifetime),
        ("7", "a full memory cgroup (filled tmpfs)", oom),
        (
            "8",
            "secrets, newlines in names, escapes in output, a missing workdir",
            secrets,
        ),
        ("9", "a task no node can run", unplaceable),
        (
            "51.1",
            "a :rw task makes lib/ a repository by its contents (HEAD, objects, refs, config)",
            bare_repository,
        ),
        (
            "51.2",
            "a :rw task hard-links a file (ln README.md README.bak)",
            hard_link,
        ),
        (
            "51.3",
            "one token's 12 long sleeps fill every slot and the queue; another token's echo",
            starvation,
        ),
        (
            "51.4",
            "300 silent, half-sent and idle connections from three peers",
            held_connections,
        ),
        (
            "51.5",
            "a refused env name of a line break, a forged log line and an ESC",
            forged_log_line,
        ),
    ];
    let mut broke = 0;
    println!("| # | attack | result |");
    println!("|---|---|---|");
    for (n, what, attack) in attacks {
        let began = Instant::now();
        let (verdict, text) = match attack(&mut cx) {
            Outcome::Held(t) => ("held", t),
            Outcome::Broke(t) => {
                broke += 1;
                ("**BROKE**", t)
            }
        };
        let secs = began.elapsed().as_secs_f64();
        println!("| {n} | {what} | {verdict}: {text} ({secs:.1} s) |");
    }
    println!(
        "| 10 | a worker that cannot reach the submitter; attempts across failovers | not \
         replayed here: `core/tests/tasks.rs` a_result_reaches_a_submitter_its_worker_cannot_\
         reach_through_the_admin, run_numbers_go_on_across_failovers |"
    );
    drop(cx.c);
    for node in ids {
        for id in containers_of(&node) {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
    if broke > 0 {
        eprintln!("{broke} attack(s) got through");
        std::process::exit(1);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn node_ids(c: &Cluster) -> Vec<String> {
    (0..c.nodes.len())
        .map(|i| {
            c.status(i).expect("status")["node_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn git(repo: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", repo)
        .output()
        .expect("git runs (install git)")
}

/// A repository with one commit and, as a hostile commit would leave it, a link
/// `.chorus-sync-README.md` to a file outside it.
fn make_repo(repo: &Path, outside: &Path) {
    std::fs::create_dir_all(repo).unwrap();
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["config", "user.email", "a@b.c"],
        &["config", "user.name", "a"],
        &["add", "."],
        &["commit", "-qm", "one"],
    ] {
        assert!(git(repo, args).status.success(), "git {args:?}");
    }
    std::os::unix::fs::symlink(outside, repo.join(".chorus-sync-README.md")).unwrap();
}

/// Submits `spec` at node 0; the HTTP status and answer.
fn submit(cx: &Ctx, spec: &Value) -> (u16, Value) {
    let (code, body) = http_request(
        cx.c.nodes[0].http_port,
        "POST",
        "/tasks",
        Some(&spec.to_string()),
    )
    .expect("n0 answers");
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The task as node 0 shows it now.
fn task_at(cx: &Ctx, id: &str) -> Option<Value> {
    let (code, body) = http_request(
        cx.c.nodes[0].http_port,
        "GET",
        &format!("/tasks/{id}"),
        None,
    )?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// The task at node 0 once it has a result (or `None` after `within`).
fn result(cx: &Ctx, id: &str, within: Duration) -> Option<Value> {
    wait_until(within, Duration::from_millis(50), || {
        task_at(cx, id).filter(|v| !v["result"].is_null())
    })
}

/// Submits and waits for the result; `Err` says what went wrong.
fn run(cx: &Ctx, spec: Value, within: Duration) -> Result<Value, String> {
    let (code, v) = submit(cx, &spec);
    if code != 201 {
        return Err(format!("submit answered {code}: {v}"));
    }
    let id = v["task"].as_str().unwrap_or_default().to_owned();
    result(cx, &id, within).ok_or_else(|| format!("no result for {id} within {within:?}"))
}

fn sh(script: &str) -> Value {
    serde_json::json!(["sh", "-c", script])
}

fn git_code(cx: &mut Ctx) -> Outcome {
    let config_before = std::fs::read(cx.repo.join(".git/config")).unwrap();
    let marker = cx.repo.parent().unwrap().join("pwned");
    let script = format!(
        "cd /workspace && printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n\\thooksPath = .githooks\\n' \
         >> .git/config && mkdir -p .githooks .git/hooks .git/modules/m/hooks .git/info && \
         printf '#!/bin/sh\\ntouch {m}\\n' > .githooks/pre-commit && chmod +x .githooks/pre-commit && \
         cp .githooks/pre-commit .git/hooks/post-checkout && cp .githooks/pre-commit \
         .git/modules/m/hooks/post-checkout && echo '* filter=evil' > .git/info/attributes && \
         echo changed > README.md",
        m = marker.display()
    );
    let spec = serde_json::json!({
        "image": IMAGE, "command": sh(&script), "timeout_ms": 60_000,
        "repo": { "name": "r", "writable": true },
    });
    let r = match run(cx, spec, Duration::from_secs(120)) {
        Ok(r) => r,
        Err(e) => return Outcome::Broke(e),
    };
    // The host's git, as its owner would run it next.
    let _ = git(&cx.repo, &["status", "--short"]);
    let _ = git(&cx.repo, &["commit", "-qam", "two"]);
    let config_after = std::fs::read(cx.repo.join(".git/config")).unwrap();
    let planted: Vec<&str> = [
        ".git/hooks/post-checkout",
        ".git/modules",
        ".git/info/attributes",
    ]
    .into_iter()
    .filter(|p| cx.repo.join(p).exists())
    .collect();
    let readme = std::fs::read_to_string(cx.repo.join("README.md")).unwrap_or_default();
    if marker.exists() || config_after != config_before || !planted.is_empty() {
        return Outcome::Broke(format!(
            "marker {} config changed {} planted {planted:?}",
            marker.exists(),
            config_after != config_before
        ));
    }
    if readme != "changed\n" {
        return Outcome::Broke(format!(
            "the working tree was not synced back: {readme:?} {r}"
        ));
    }
    Outcome::Held(format!(
        "task {}; README.md synced back; .git/config unchanged, no hook, module or attributes \
         file on the host; the host's git status and commit ran nothing",
        r["result"]["status"]
    ))
}

fn sync_link(cx: &mut Ctx) -> Outcome {
    // Attack 1 already wrote README.md through the sync beside the planted link; look again
    // with a fresh write, and at what the synced file looks like on the host.
    let spec = serde_json::json!({
        "image": IMAGE, "timeout_ms": 60_000,
        "command": sh("cd /workspace && echo again > README.md && chmod 0777 README.md"),
        "repo": { "name": "r", "writable": true },
    });
    if let Err(e) = run(cx, spec, Duration::from_secs(120)) {
        return Outcome::Broke(e);
    }
    let outside = std::fs::read_to_string(&cx.outside).unwrap_or_default();
    let meta = std::fs::metadata(&cx.outside).unwrap();
    if outside != "untouched\n" || meta.permissions().mode() & 0o777 != 0o644 {
        return Outcome::Broke(format!(
            "the file outside now holds {outside:?}, mode {:o}",
            meta.permissions().mode() & 0o777
        ));
    }
    let readme = cx.repo.join("README.md");
    let m = std::fs::symlink_metadata(&readme).unwrap();
    let owner = std::fs::metadata(&cx.repo).unwrap().uid();
    let mode = m.permissions().mode() & 0o777;
    if !m.is_file() || m.uid() != owner || mode & 0o022 != 0 {
        return Outcome::Broke(format!(
            "README.md synced as uid {} mode {mode:o} (repository owner {owner})",
            m.uid()
        ));
    }
    Outcome::Held(format!(
        "the file the link names is untouched (0644); README.md landed a regular file of the \
         repository's owner (uid {owner}), mode {mode:o} although the task set 0777"
    ))
}

/// One request with exactly these headers; its status (0: no HTTP answer).
fn raw(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    http_exact(port, method, path, headers, body).map_or(0, |(code, _)| code)
}

fn web_page(cx: &mut Ctx) -> Outcome {
    let port = cx.c.nodes[0].http_port;
    let host = format!("127.0.0.1:{port}");
    let token = format!("Bearer {}", chorus_tests::test_token());
    let electorate = |cx: &Ctx| {
        let s = cx.c.status(0).expect("status");
        (s["electorate"].clone(), s["electorate_version"].clone())
    };
    let members_before = electorate(cx);
    let task = format!(r#"{{"image":"{IMAGE}","command":["true"]}}"#);
    let tries: Vec<(&str, u16)> = vec![
        (
            "cross-origin text/plain POST /members",
            raw(
                port,
                "POST",
                "/members",
                &[
                    ("Host", &host),
                    ("Origin", "https://evil.example"),
                    ("Content-Type", "text/plain"),
                ],
                r#"{"remove":"x"}"#,
            ),
        ),
        (
            "text/plain POST /tasks",
            raw(
                port,
                "POST",
                "/tasks",
                &[("Host", &host), ("Content-Type", "text/plain")],
                &task,
            ),
        ),
        (
            "POST /tasks with the token from another Origin",
            raw(
                port,
                "POST",
                "/tasks",
                &[
                    ("Host", &host),
                    ("Origin", "https://evil.example"),
                    ("Content-Type", "application/json"),
                    ("Authorization", &token),
                ],
                &task,
            ),
        ),
        (
            "GET /tasks as rebind.example with the token",
            raw(
                port,
                "GET",
                "/tasks",
                &[("Host", "rebind.example"), ("Authorization", &token)],
                "",
            ),
        ),
        (
            "GET /tasks with no token",
            raw(port, "GET", "/tasks", &[("Host", &host)], ""),
        ),
    ];
    let members_after = electorate(cx);
    let through: Vec<_> = tries
        .iter()
        .filter(|(_, c)| (200..300).contains(c))
        .collect();
    if !through.is_empty() || members_before != members_after {
        return Outcome::Broke(format!(
            "answered 2xx: {through:?}; electorate {members_before:?} → {members_after:?}"
        ));
    }
    let codes: Vec<String> = tries.iter().map(|(w, c)| format!("{w} → {c}")).collect();
    Outcome::Held(codes.join("; "))
}

fn outsider(cx: &mut Ctx) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x");
    let log = dir.path().join("x.log");
    let own_key = dir.path().join("other.key");
    let bin = std::env::args().nth(1).unwrap();
    let _ = chorus_tests::run_chorus(bin.as_ref(), &["psk", "generate", path(&own_key)]);
    let peers_before: Vec<u64> = (0..3).map(|i| peers_of(&cx.c.status(i).unwrap())).collect();
    let mut results = Vec::new();
    for key in [None, Some(&own_key)] {
        let mut args: Vec<String> = [
            "run",
            "--data-dir",
            path(&data),
            "--http",
            "127.0.0.1:0",
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--no-mdns",
            "--cluster-id",
            "e2e",
            "--bootstrap-expect",
            "3",
            "--bootstrap",
            &format!("/ip4/127.0.0.1/tcp/{}", cx.c.nodes[0].p2p_port),
            "--acl-key-file",
            path(test_acl_key_file()),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(k) = key {
            args.extend(["--psk-file".to_owned(), path(k).to_owned()]);
        }
        let (mut guard, ports) = spawn_reported(bin.as_ref(), &args, &[], &log);
        std::thread::sleep(Duration::from_secs(5));
        let peers = chorus_tests::status(ports.http).map_or(0, |s| peers_of(&s));
        chorus_tests::stop(&mut guard, nix::sys::signal::Signal::SIGKILL);
        results.push(peers);
    }
    let peers_after: Vec<u64> = (0..3).map(|i| peers_of(&cx.c.status(i).unwrap())).collect();
    if results.iter().any(|p| *p > 0) || peers_after != peers_before {
        return Outcome::Broke(format!(
            "the outsider saw {results:?} peers; the cluster's peers {peers_before:?} → \
             {peers_after:?}"
        ));
    }
    let _ = &cx.psk;
    Outcome::Held(format!(
        "without a key and with another key the outsider connected to 0 peers in 5 s each; the \
         members' peer counts stayed {peers_after:?}"
    ))
}

/// How many peers a `/status` names.
fn peers_of(status: &Value) -> u64 {
    status["peers"].as_array().map_or(0, |p| p.len() as u64)
}

fn limits(cx: &mut Ctx) -> Outcome {
    let mut said = Vec::new();
    for (field, value) in [
        ("memory_mb", 1_048_576u64),
        ("pids", 1_048_576),
        ("cpu_millis", 64_000),
    ] {
        let mut spec =
            serde_json::json!({ "image": IMAGE, "command": ["true"], "timeout_ms": 10_000 });
        spec[field] = value.into();
        let (code, v) = submit(cx, &spec);
        if code == 201 {
            return Outcome::Broke(format!("{field} = {value} accepted: {v}"));
        }
        said.push(format!(
            "{field} {value} → {code} {}",
            v["error"].as_str().unwrap_or("")
        ));
    }
    Outcome::Held(said.join("; "))
}

fn frames(cx: &mut Ctx) -> Outcome {
    let spec = serde_json::json!({
        "image": IMAGE, "timeout_ms": 60_000,
        "command": sh("head -c 9000 /dev/zero | tr '\\000' '\\001'"),
    });
    let r = match run(cx, spec, Duration::from_secs(90)) {
        Ok(r) => r,
        Err(e) => return Outcome::Broke(format!("output: {e}")),
    };
    let kept = r["result"]["stdout"].as_str().map_or(0, str::len);
    let cut = r["result"]["stdout_truncated_bytes"].as_u64().unwrap_or(0);
    let env: String = "\u{1}".repeat(8_000);
    let spec = serde_json::json!({
        "image": IMAGE, "timeout_ms": 60_000, "command": ["true"], "env": { "X": env },
    });
    let (code, v) = submit(cx, &spec);
    let spec_said = if code == 201 {
        let id = v["task"].as_str().unwrap_or_default().to_owned();
        match result(cx, &id, Duration::from_secs(90)) {
            Some(t) => format!("the spec was accepted and ran: {}", t["result"]["status"]),
            None => return Outcome::Broke("a spec of control characters never ended".into()),
        }
    } else {
        format!(
            "the spec was refused at submit ({code}: {})",
            v["error"].as_str().unwrap_or("")
        )
    };
    Outcome::Held(format!(
        "the output task ended {} with {kept} bytes kept and {cut} cut (stated); {spec_said}",
        r["result"]["status"]
    ))
}

fn lifetime(cx: &mut Ctx) -> Outcome {
    let spec =
        serde_json::json!({ "image": IMAGE, "command": ["sleep", "600"], "timeout_ms": 8_000 });
    let (code, v) = submit(cx, &spec);
    if code != 201 {
        return Outcome::Broke(format!("submit answered {code}: {v}"));
    }
    let id = v["task"].as_str().unwrap_or_default().to_owned();
    // Where it runs.
    let worker = wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
        let v = task_at(cx, &id)?;
        (v["phase"] == "placed").then(|| v["worker"].as_str().map(str::to_owned))?
    });
    let Some(worker) = worker else {
        return Outcome::Broke("the task was never placed".into());
    };
    let ids = node_ids(&cx.c);
    let Some(w) = ids.iter().position(|i| *i == worker) else {
        return Outcome::Broke(format!("worker {worker} is no node of the cluster"));
    };
    std::thread::sleep(Duration::from_secs(1));
    let running = |node: &str| {
        let out = Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=io.chorus.node={node}"),
            ])
            .output()
            .expect("docker ps");
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    let before = running(&worker);
    let killed = Instant::now();
    cx.c.kill(w);
    // The task's timeout (8 s) and the stated grace (30 s), and slack for a loaded machine.
    let gone = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        (running(&worker) == 0).then_some(())
    });
    let took = killed.elapsed().as_secs_f64();
    cx.c.start_node(w);
    if gone.is_none() {
        return Outcome::Broke(format!(
            "{before} sandbox(es) of the killed worker still run after 60 s"
        ));
    }
    let r = result(cx, &id, Duration::from_secs(120));
    Outcome::Held(format!(
        "the killed worker's {before} running sandbox(es) (one run, the rest its warm pool) were \
         gone {took:.1} s after the kill (within the bound of the task's timeout 8 s + grace 30 \
         s, or the next periodic reap of a dead owner's sandboxes); the task ended {}",
        r.map_or("without a result within 120 s".into(), |r| r["result"]
            ["status"]
            .to_string())
    ))
}

fn oom(cx: &mut Ctx) -> Outcome {
    let spec = serde_json::json!({
        "image": IMAGE, "timeout_ms": 60_000, "memory_mb": 64,
        "command": sh("dd if=/dev/zero of=/workspace/fill bs=1M count=200 2>/dev/null; sleep 1; echo survived"),
    });
    match run(cx, spec, Duration::from_secs(90)) {
        Ok(r) if r["result"]["status"] == "out_of_memory" => Outcome::Held(format!(
            "status out_of_memory (exit {})",
            r["result"]["exit_code"]
        )),
        Ok(r) => Outcome::Broke(format!(
            "status {} — the OOM kill was hidden",
            r["result"]["status"]
        )),
        Err(e) => Outcome::Broke(e),
    }
}

fn secrets(cx: &mut Ctx) -> Outcome {
    let spec = serde_json::json!({
        "image": IMAGE, "timeout_ms": 60_000,
                // Compared in two halves: a command naming the whole value would put it in the spec.
        "command": sh("[ \"${TOKEN%-7f1c}\" = s3cr3t-value ] && [ \"${TOKEN#s3cr3t-value}\" = -7f1c ] && echo match; printf '\\033]0;owned\\007\\033[2J'"),
        "secret_env": { "TOKEN": SECRET },
    });
    let r = match run(cx, spec, Duration::from_secs(90)) {
        Ok(r) => r,
        Err(e) => return Outcome::Broke(e),
    };
    if !r["result"]["stdout"]
        .as_str()
        .unwrap_or("")
        .starts_with("match")
    {
        return Outcome::Broke(format!("the command did not see the secret: {r}"));
    }
    if r.to_string().contains(SECRET) {
        return Outcome::Broke("GET /tasks/{id} shows the secret".into());
    }
    let holders: Vec<String> =
        cx.c.nodes
            .iter()
            .flat_map(|n| files_holding(&n.data_dir, SECRET.as_bytes()))
            .collect();
    if !holders.is_empty() {
        return Outcome::Broke(format!("in plain text in {holders:?}"));
    }
    // The CLI shows the escape sequences escaped.
    let id = r["task"].as_str().unwrap_or_default().to_owned();
    let addr = format!("127.0.0.1:{}", cx.c.nodes[0].http_port);
    let out = cx.c.chorus(&["task", "get", &id, "--addr", &addr]);
    if out.stdout.contains(&0x1b) {
        return Outcome::Broke("`chorus task get` printed a raw escape sequence".into());
    }
    let mut bad_image = serde_json::json!({ "image": "evil\nINFO forged", "command": ["true"], "timeout_ms": 1000 });
    let (image_code, _) = submit(cx, &bad_image);
    bad_image["image"] = IMAGE.into();
    bad_image["workdir"] = "/no/such/dir".into();
    let workdir = run(cx, bad_image, Duration::from_secs(60))
        .map(|r| r["result"]["error"].as_str().unwrap_or("").to_owned())
        .unwrap_or_else(|e| e);
    if image_code == 201 || !workdir.contains("does not exist") {
        return Outcome::Broke(format!(
            "image with a newline {image_code}; missing workdir: {workdir}"
        ));
    }
    Outcome::Held(format!(
        "the command saw the secret; no API answer and no file under any data dir holds it; \
         `task get` escaped the output's ESC bytes; an image name with a newline → {image_code}; \
         a missing workdir → {workdir:?}"
    ))
}

/// Files under `dir` whose bytes contain `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            found.extend(files_holding(&p, needle));
        } else if m.is_file() {
            let bytes = std::fs::read(&p).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

fn unplaceable(cx: &mut Ctx) -> Outcome {
    let spec = serde_json::json!({
        "image": IMAGE, "command": ["true"], "timeout_ms": 10_000, "requires": ["nosuch"],
    });
    let (code, v) = submit(cx, &spec);
    if code != 201 {
        return Outcome::Broke(format!("submit answered {code}: {v}"));
    }
    let id = v["task"].as_str().unwrap_or_default().to_owned();
    let began = Instant::now();
    let pending = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        task_at(cx, &id)?["pending"].as_str().map(str::to_owned)
    });
    // 60 ticks of 300 ms, and slack.
    let Some(r) = result(cx, &id, Duration::from_secs(90)) else {
        return Outcome::Broke("parked: no result within 90 s".into());
    };
    if r["result"]["status"] != "unschedulable" {
        return Outcome::Broke(format!("ended {}", r["result"]["status"]));
    }
    Outcome::Held(format!(
        "said {:?}, then ended unschedulable after {:.1} s",
        pending.unwrap_or_default(),
        began.elapsed().as_secs_f64()
    ))
}

/// Issue 51, finding 1: git takes a directory for a bare repository by its contents, so a task
/// that leaves `HEAD`, `objects/`, `refs/` and a `config` with `core.fsmonitor` in `lib/` made
/// `cd lib && git status` on the host run its command.
fn bare_repository(cx: &mut Ctx) -> Outcome {
    let marker = cx.repo.parent().unwrap().join("pwned-bare");
    let script = format!(
        "cd /workspace && mkdir -p lib/objects/info lib/refs/heads && : > lib/objects/info/packs \
         && : > lib/refs/heads/.keep && echo 'ref: refs/heads/main' > lib/HEAD && printf \
         '[core]\\n\\tworktree = ..\\n\\tfsmonitor = \"touch {m}\"\\n' > lib/config && \
         echo lib > lib/code.txt",
        m = marker.display()
    );
    let spec = serde_json::json!({
        "image": IMAGE, "command": sh(&script), "timeout_ms": 60_000,
        "repo": { "name": "r", "writable": true },
    });
    let r = match run(cx, spec, Duration::from_secs(120)) {
        Ok(r) => r,
        Err(e) => return Outcome::Broke(e),
    };
    let lib = cx.repo.join("lib");
    if lib.is_dir() {
        let _ = git(&lib, &["status", "--short"]);
    }
    let planted: Vec<&str> = ["lib/HEAD", "lib/objects", "lib/refs"]
        .into_iter()
        .filter(|p| cx.repo.join(p).exists())
        .collect();
    if marker.exists() || !planted.is_empty() {
        return Outcome::Broke(format!("marker {} planted {planted:?}", marker.exists()));
    }
    let stderr = r["result"]["stderr"].as_str().unwrap_or_default();
    if !stderr.contains("not synced back whole") || !stderr.contains("lib/HEAD") {
        return Outcome::Broke(format!(
            "the result does not say what was refused: {stderr:?}"
        ));
    }
    Outcome::Held(format!(
        "task {}; lib/code.txt synced, lib/HEAD, objects and refs refused and named in the \
         result; git status in lib/ ran nothing",
        r["result"]["status"]
    ))
}

/// Issue 51, finding 2: tar sends a hard link's second name as a link entry; the sync dropped
/// it and then deleted the original on the host, and the task reported success.
fn hard_link(cx: &mut Ctx) -> Outcome {
    let before = std::fs::read(cx.repo.join("README.md")).unwrap_or_default();
    let spec = serde_json::json!({
        "image": IMAGE, "timeout_ms": 60_000,
        "command": sh("cd /workspace && ln README.md README.bak"),
        "repo": { "name": "r", "writable": true },
    });
    if let Err(e) = run(cx, spec, Duration::from_secs(120)) {
        return Outcome::Broke(e);
    }
    let readme = std::fs::read(cx.repo.join("README.md"));
    let bak = std::fs::read(cx.repo.join("README.bak"));
    match (readme, bak) {
        (Ok(a), Ok(b)) if a == before && b == before => Outcome::Held(
            "README.md kept, README.bak came back as a file of its own with the same bytes".into(),
        ),
        (a, b) => Outcome::Broke(format!("README.md {a:?}, README.bak {b:?}")),
    }
}

/// A request to node 0 with `token` (a caller of its own), as a JSON body.
fn as_caller(cx: &Ctx, token: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let port = cx.c.nodes[0].http_port;
    let host = format!("127.0.0.1:{port}");
    let auth = format!("Bearer {token}");
    let headers = [
        ("Host", host.as_str()),
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    match http_exact(port, method, path, &headers, body) {
        Some((code, text)) => (code, serde_json::from_str(&text).unwrap_or(Value::Null)),
        None => (0, Value::Null),
    }
}

/// Issue 51, finding 3: one token fills every slot (3 nodes × 2) and queues as many again with
/// 20-second sleeps; another token's `echo`, submitted after, must run when the first slot
/// frees (it has the fewest runs), not after the whole backlog (about 20 s, not 40).
fn starvation(cx: &mut Ctx) -> Outcome {
    // Two callers of their own (a token id is 16 hex digits).
    let key = chorus_node::access::AclKey::from_hex(chorus_tests::TEST_ACL_KEY).expect("key");
    let (alice, bob) = (
        key.mint(chorus_node::access::Role::Submit, "a11ce00000000001"),
        key.mint(chorus_node::access::Role::Submit, "b0b0000000000002"),
    );
    let sleep = serde_json::json!({ "image": IMAGE, "command": ["sleep", "20"],
        "timeout_ms": 120_000 })
    .to_string();
    let mut backlog = Vec::new();
    for _ in 0..12 {
        match as_caller(cx, &alice, "POST", "/tasks", &sleep) {
            (201, v) => backlog.push(v["task"].as_str().unwrap_or_default().to_owned()),
            (code, v) => return Outcome::Broke(format!("alice's submit answered {code}: {v}")),
        }
    }
    let running = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let n = (backlog.iter())
            .filter(|id| task_at(cx, id).is_some_and(|t| t["phase"] == "placed"))
            .count();
        (n >= 6).then_some(n)
    });
    if running.is_none() {
        return Outcome::Broke("alice's sleeps never filled the six slots".into());
    }
    let echo = serde_json::json!({ "image": IMAGE, "command": ["echo", "bob"],
        "timeout_ms": 60_000 })
    .to_string();
    let submitted = Instant::now();
    let id = match as_caller(cx, &bob, "POST", "/tasks", &echo) {
        (201, v) => v["task"].as_str().unwrap_or_default().to_owned(),
        (code, v) => return Outcome::Broke(format!("bob's submit answered {code}: {v}")),
    };
    let done = result(cx, &id, Duration::from_secs(60));
    let waited = submitted.elapsed().as_secs_f64();
    let queued_left = (backlog.iter())
        .filter(|id| task_at(cx, id).is_some_and(|t| t["phase"] == "queued"))
        .count();
    for id in &backlog {
        as_caller(cx, &alice, "DELETE", &format!("/tasks/{id}"), "");
    }
    match done {
        Some(r) if r["result"]["status"] == "succeeded" && waited < 32.0 => Outcome::Held(format!(
            "bob's echo ran {waited:.1} s after its submit, behind only the runs already \
             going; {queued_left} of alice's tasks were still queued then"
        )),
        Some(r) => Outcome::Broke(format!(
            "bob's echo ended {} after {waited:.1} s (the backlog is 40 s)",
            r["result"]["status"]
        )),
        None => Outcome::Broke(format!("bob's echo had no result after {waited:.1} s")),
    }
}

/// Issue 51, finding 4: 100 connections from each of three loopback peers (127.0.0.2-4) that
/// connect and send nothing, send half a request's headers, or send one request and then sit
/// idle. An authenticated request from 127.0.0.1 is answered within 100 ms meanwhile, and the
/// node closes the held connections within its bound.
fn held_connections(cx: &mut Ctx) -> Outcome {
    use std::io::{Read, Write};
    let port = cx.c.nodes[0].http_port;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let held: Vec<tokio::net::TcpStream> = rt.block_on(async {
        let mut held = Vec::new();
        for (peer, what) in [(2u8, "silent"), (3, "half"), (4, "idle")] {
            for _ in 0..100 {
                let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
                    continue;
                };
                if socket.bind(([127, 0, 0, peer], 0).into()).is_err() {
                    continue;
                }
                let Ok(Ok(mut tcp)) = tokio::time::timeout(
                    Duration::from_secs(2),
                    socket.connect(([127, 0, 0, 1], port).into()),
                )
                .await
                else {
                    continue;
                };
                use tokio::io::AsyncWriteExt;
                let sent: &[u8] = match what {
                    "half" => b"GET /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: ",
                    "idle" => b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                    _ => b"",
                };
                if tcp.write_all(sent).await.is_ok() {
                    held.push(tcp);
                }
            }
        }
        held
    });
    let opened = held.len();
    let mut slowest = Duration::ZERO;
    let mut failed = Vec::new();
    for _ in 0..10 {
        let began = Instant::now();
        match cx.c.status(0) {
            Some(_) => slowest = slowest.max(began.elapsed()),
            None => failed.push(began.elapsed()),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every held connection is closed by the node within its bound (and a little slack).
    let bound = chorus_node::api::connections::CLIENT_BOUND + Duration::from_secs(5);
    let closed = rt.block_on(async {
        let mut closed = 0;
        for mut tcp in held {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 4096];
            let end = tokio::time::timeout(bound, async {
                loop {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            closed += usize::from(end.is_ok());
        }
        closed
    });
    // A plain request still works afterwards.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut after = String::new();
    let _ = s.read_to_string(&mut after);
    if !failed.is_empty() || slowest > Duration::from_millis(100) || closed < opened {
        return Outcome::Broke(format!(
            "{opened} held: {} of 10 authenticated requests failed ({failed:?}), the slowest \
             answered in {slowest:?}; {closed} of {opened} closed by the node within {bound:?}",
            failed.len()
        ));
    }
    Outcome::Held(format!(
        "{opened} connections held; 10 authenticated requests answered, the slowest in \
         {slowest:?}; the node closed all {closed} within {bound:?}; /healthz after: {}",
        after.lines().next().unwrap_or("")
    ))
}

/// Issue 51, finding 5: an env name of a line break, a forged log line and an ESC is refused
/// (400), and what the node logs of it carries no raw control character: no forged line.
fn forged_log_line(cx: &mut Ctx) -> Outcome {
    let forged = "INFO chorus: forged-by-an-attacker";
    let name = format!("X\n{forged}\r\u{1b}[2J");
    let spec = serde_json::json!({ "image": IMAGE, "command": ["true"], "env": { name: "1" } });
    let (code, _) = submit(cx, &spec);
    std::thread::sleep(Duration::from_millis(500));
    let log = std::fs::read_to_string(&cx.c.nodes[0].log).unwrap_or_default();
    let raw_line = log.lines().any(|l| l.trim_start().starts_with(forged));
    let esc = log.contains('\u{1b}');
    if code != 400 || raw_line || esc {
        return Outcome::Broke(format!(
            "answered {code}; a line of its own in the log: {raw_line}; a raw ESC: {esc}"
        ));
    }
    let seen = log.contains("forged-by-an-attacker");
    Outcome::Held(format!(
        "refused with 400; the log {} the name escaped, on the refusal's own line",
        if seen { "shows" } else { "leaves out" }
    ))
}
