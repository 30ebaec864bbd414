//! End to end, who may call a node's HTTP API (issue 33): a web page's requests, a rebinding
//! name, no token, a forged one and a weak one are refused and counted; tokens made with
//! `chorus acl token create` do what their role allows; a task's environment is shown only to
//! its submitter, and only its submitter (or an operator) may cancel it. A node started without
//! a shared key makes its own at first start and shows its management token once.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use chorus_tests::{
    http_exact, lone_node_args, lone_node_args_on, read, run_chorus_env, spawn_reported, stop,
    test_token, wait_admin, Value,
};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

/// One request with exactly the headers given (the harness's own client always sends the test
/// token). Returns (status, body).
fn raw(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    http_exact(port, method, path, headers, body).expect("an HTTP answer")
}

/// `chorus acl token create --role ROLE` against the node, authenticated as `as_token`.
fn make_token(port: u16, role: &str, as_token: &str) -> std::process::Output {
    let addr = format!("127.0.0.1:{port}");
    run_chorus_env(
        Path::new(BIN),
        &["acl", "token", "create", "--role", role, "--addr", &addr],
        &[("CHORUS_TOKEN", as_token)],
    )
}

fn token_of(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_api_admits_only_what_a_token_allows_and_refuses_web_pages() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n0");
    let log = dir.path().join("n0.log");
    let (mut guard, ports) = spawn_reported(Path::new(BIN), &lone_node_args(&data), &[], &log);
    let port = ports.http;
    wait_admin(port, Duration::from_secs(15), &log);
    let host = format!("127.0.0.1:{port}");
    let manage = test_token();
    let bearer = |t: &str| format!("Bearer {t}");
    let spec = r#"{"image":"busybox","command":["true"],"env":{"SECRET":"hunter2"}}"#;

    // Public state needs no token.
    let (code, _) = raw(port, "GET", "/status", &[("Host", &host)], "");
    assert_eq!(code, 200);
    // A web page's no-cors POST: text/plain, its own Origin, no token.
    let (code, _) = raw(
        port,
        "POST",
        "/members",
        &[
            ("Host", &host),
            ("Origin", "https://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        r#"{"op":"remove","node":"x"}"#,
    );
    assert_eq!(code, 403, "cross-origin");
    let (code, _) = raw(
        port,
        "POST",
        "/tasks",
        &[("Host", &host), ("Content-Type", "text/plain")],
        spec,
    );
    assert_eq!(code, 415, "a body that is not JSON by its type");
    // DNS rebinding: a name that resolves to this node but is not one of its names.
    let (code, _) = raw(port, "GET", "/status", &[("Host", "rebind.example:80")], "");
    assert_eq!(code, 403);
    // Tasks need a token; a forged one is refused.
    let (code, _) = raw(port, "GET", "/tasks", &[("Host", &host)], "");
    assert_eq!(code, 401);
    let forged = manage.replace(&manage[manage.len() - 4..], "0000");
    let (code, _) = raw(
        port,
        "GET",
        "/tasks",
        &[("Host", &host), ("Authorization", &bearer(&forged))],
        "",
    );
    assert_eq!(code, 401, "forged");

    // Tokens made through the CLI do what their role says, and no more.
    let reader = token_of(&make_token(port, "read", &manage));
    let alice = token_of(&make_token(port, "submit", &manage));
    let bob = token_of(&make_token(port, "submit", &manage));
    let refused = make_token(port, "manage", &alice);
    assert!(!refused.status.success(), "submit cannot make tokens");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("403"),
        "{refused:?}"
    );
    let json = |t: &str| {
        vec![
            ("Host".to_owned(), host.clone()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Authorization".to_owned(), bearer(t)),
        ]
    };
    let call = |m: &str, p: &str, t: &str, body: &str| {
        let h = json(t);
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        raw(port, m, p, &h, body)
    };
    let (code, _) = call("POST", "/tasks", &reader, spec);
    assert_eq!(code, 403, "read cannot submit");
    let (code, body) = call("POST", "/tasks", &alice, spec);
    assert_eq!(code, 201, "{body}");
    let task = serde_json::from_str::<Value>(&body).unwrap()["task"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/tasks/{task}");
    // Secrets: the submitter sees its environment, another reader sees the keys only.
    let (code, body) = call("GET", &path, &alice, "");
    assert_eq!(code, 200);
    assert!(body.contains("hunter2"), "{body}");
    let (code, body) = call("GET", &path, &reader, "");
    assert_eq!(code, 200);
    assert!(
        !body.contains("hunter2") && body.contains("SECRET"),
        "{body}"
    );
    // Only its submitter or an operator cancels it.
    let (code, body) = call("DELETE", &path, &bob, "");
    assert_eq!(code, 403, "{body}");
    let (code, body) = call("DELETE", &path, &alice, "");
    assert_eq!(code, 202, "{body}");
    // The node's ceilings, not the task author, bound a task's limits (issue 33).
    let greedy = r#"{"image":"busybox","command":["true"],"memory_mb":1048576}"#;
    let (code, body) = call("POST", "/tasks", &alice, greedy);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("max_memory_mb"), "{body}");
    let forkbomb = r#"{"image":"busybox","command":["true"],"pids":1000000}"#;
    let (code, body) = call("POST", "/tasks", &alice, forkbomb);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("max_pids"), "{body}");
    // Membership changes need operate.
    let (code, _) = call("POST", "/members", &alice, r#"{"op":"remove","node":"x"}"#);
    assert_eq!(code, 403);

    let (_, metrics) = raw(port, "GET", "/metrics", &[("Host", &host)], "");
    for (reason, at_least) in [
        ("cross_origin", 1),
        ("content_type", 1),
        ("bad_host", 1),
        ("no_token", 1),
        ("bad_token", 1),
        ("role", 3),
    ] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("chorus_http_refused_total{{reason=\"{reason}\"}}")))
            .unwrap_or_else(|| panic!("no {reason} in {metrics}"));
        let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= at_least, "{line}");
    }
    let exit = stop(&mut guard, Signal::SIGTERM);
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn a_node_without_a_shared_key_makes_one_and_shows_its_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n0");
    let log = dir.path().join("n0.log");
    // The harness's arguments without its shared key.
    let mut args = lone_node_args_on(&data, "127.0.0.1:0", "/ip4/127.0.0.1/tcp/0");
    let at = args.iter().position(|a| a == "--acl-key-file").unwrap();
    args.drain(at..at + 2);
    let (mut guard, ports) = spawn_reported(Path::new(BIN), &args, &[], &log);
    wait_admin(ports.http, Duration::from_secs(15), &log);
    let token_file = data.join("management.token");
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();
    assert!(read(&log).contains(token), "shown at the first start");
    for f in ["management.token", "acl.key"] {
        let mode = std::fs::metadata(data.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    // The data directory and the event log (task specs, environments) are the node's alone.
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    for entry in walk(&data) {
        let mode = std::fs::symlink_metadata(&entry)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", entry.display());
    }
    let addr = format!("127.0.0.1:{}", ports.http);
    let list = |env: &[(&str, &str)]| {
        run_chorus_env(Path::new(BIN), &["task", "list", "--addr", &addr], env)
    };
    // The harness's token is another key's: refused. The node's own file works.
    let out = list(&[]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{out:?}"
    );
    let file = token_file.to_str().unwrap();
    let out = list(&[("CHORUS_TOKEN", ""), ("CHORUS_TOKEN_FILE", file)]);
    assert!(out.status.success(), "{out:?}");
    stop(&mut guard, Signal::SIGTERM);
    // A restart (a new log file) does not show it again.
    let (mut guard, ports) = spawn_reported(Path::new(BIN), &args, &[], &log);
    wait_admin(ports.http, Duration::from_secs(15), &log);
    assert!(!read(&log).contains(token), "shown once");
    stop(&mut guard, Signal::SIGTERM);
}

/// Every file and directory under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
