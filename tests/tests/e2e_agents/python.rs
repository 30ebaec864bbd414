//! The Python client's tests (clients/python), run against real nodes (issue 55): a three-node
//! cluster with Docker sandboxes and a lone node serving its API over TLS, then
//! `python3 -m pytest` (or, without pytest, `python3 -m unittest`) over
//! `clients/python/tests` with the package taken from its source (`PYTHONPATH`, so nothing
//! needs installing; CI tests the copy `pip install ./clients/python` made instead), and the
//! example agent loop (`examples/agent_loop.py`) through the same client. Needs `python3` (3.9
//! or later) and fails, never skips, without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chorus_tests::task_cluster::{token, TaskCluster};
use chorus_tests::{lone_node_args, read, spawn_reported, test_token, wait_until};

/// A liveness bound for the whole Python suite on two loaded cores (not a performance figure).
const SUITE_BOUND: Duration = Duration::from_secs(900);

/// A liveness bound for the example agent loop.
const EXAMPLE_BOUND: Duration = Duration::from_secs(300);

/// The repository's root (the Python package and the example live there).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// `python3`'s version, or a failure that says to install it.
fn python_version() -> String {
    let check = "import sys; print(sys.version.split()[0]); sys.exit(sys.version_info < (3, 9))";
    let out = Command::new("python3").args(["-c", check]).output();
    match out {
        Ok(o) if o.status.success() => {
            format!("Python {}", String::from_utf8_lossy(&o.stdout).trim())
        }
        _ => panic!(
            "python3 3.9 or later is needed for the Python client's tests (clients/python): \
             install it (Debian: apt-get install python3); pytest is optional ({out:?})"
        ),
    }
}

/// Whether this `python3` has pytest.
fn has_pytest() -> bool {
    Command::new("python3")
        .args(["-c", "import pytest"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What a bounded run came to: success, its output (stdout then stderr), and how long it took.
struct Ran {
    ok: bool,
    output: String,
    took: Duration,
}

/// Runs `cmd` with stdout and stderr into files of `dir`, killing it past `bound`.
fn run_bounded(mut cmd: Command, dir: &Path, name: &str, bound: Duration) -> Ran {
    let out = dir.join(format!("{name}.out"));
    let err = dir.join(format!("{name}.err"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("an output file"))
        .stderr(std::fs::File::create(&err).expect("an output file"));
    let started = Instant::now();
    let mut child = cmd.spawn().expect("python3 starts");
    let status = wait_until(bound, Duration::from_millis(200), || {
        child.try_wait().ok().flatten()
    });
    let took = started.elapsed();
    let ok = match status {
        Some(s) => s.success(),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            false
        }
    };
    let mut output = format!("{}{}", read(&out), read(&err));
    if status.is_none() {
        output.push_str(&format!("\n(killed: still running after {bound:?})\n"));
    }
    Ran { ok, output, took }
}

/// Whether the tests use the installed package (`CHORUS_TEST_PYTHON_INSTALLED=1`, set by CI
/// after `pip install ./clients/python`) rather than the source tree.
fn installed() -> bool {
    std::env::var("CHORUS_TEST_PYTHON_INSTALLED").is_ok_and(|v| v == "1")
}

/// `python3 ARGS` at the repository's root with the package from its source, the nodes named
/// by `env`, and nothing of the caller's own CHORUS settings.
fn python(args: &[&str], env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args(args).current_dir(root());
    // CI installs the package (`pip install ./clients/python`) and tests that; anywhere else
    // the source tree is the package, so nothing needs installing.
    if !installed() {
        cmd.env("PYTHONPATH", root().join("clients/python/src"));
    }
    cmd.env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    for var in [
        "CHORUS_ADDR",
        "CHORUS_TOKEN",
        "CHORUS_TOKEN_FILE",
        "CHORUS_TLS_FINGERPRINT",
        "CHORUS_CA_CERT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The fingerprint a TLS node printed at its start.
fn printed_fingerprint(log: &Path) -> String {
    wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        let text = read(log);
        let line = text.lines().find(|l| l.contains("--tls-fingerprint "))?;
        let fp = line.rsplit("--tls-fingerprint ").next()?;
        Some(fp.split_whitespace().next()?.to_owned())
    })
    .unwrap_or_else(|| panic!("no fingerprint printed:\n{}", read(log)))
}

/// The client's own tests — sandboxes, async, tasks, TLS pinning — then the example agent
/// loop, which must fail its tests first and pass them after its fix.
#[test]
fn the_python_client_and_the_example_agent_loop_against_real_nodes() {
    let version = python_version();
    let dir = tempfile::tempdir().unwrap();

    // A lone node over TLS, for the pinning tests (no Docker needed there).
    let tls_data = dir.path().join("tls");
    let tls_log = dir.path().join("tls.log");
    let mut args = lone_node_args(&tls_data);
    args.extend(["--http-tls".to_owned(), "on".to_owned()]);
    let (_tls_node, tls_ports) = spawn_reported(Path::new(super::BIN), &args, &[], &tls_log);
    let fp = printed_fingerprint(&tls_log);

    let t = TaskCluster::start(super::BIN);
    let addr = |i: usize| format!("127.0.0.1:{}", t.c.nodes[i].http_port);
    let mine = token(&t.c, "submit");
    let other = token(&t.c, "submit");
    let env = [
        ("CHORUS_TEST_REQUIRED", "1".to_owned()),
        ("CHORUS_TEST_ADDR", addr(0)),
        ("CHORUS_TEST_ADDR_2", addr(1)),
        ("CHORUS_TEST_TOKEN", mine.clone()),
        ("CHORUS_TEST_OTHER_TOKEN", other),
        (
            "CHORUS_TEST_TLS_ADDR",
            format!("https://127.0.0.1:{}", tls_ports.http),
        ),
        ("CHORUS_TEST_TLS_FINGERPRINT", fp),
        (
            "CHORUS_TEST_TLS_CERT",
            tls_data.join("http-tls/cert.pem").display().to_string(),
        ),
        ("CHORUS_TEST_TLS_TOKEN", test_token()),
    ];

    let tests = "clients/python/tests";
    let (runner, cmd) = if has_pytest() {
        let args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", tests];
        ("pytest", python(&args, &env))
    } else {
        let args = ["-m", "unittest", "discover", "-s", tests, "-t", tests, "-v"];
        ("unittest", python(&args, &env))
    };
    let suite = run_bounded(cmd, dir.path(), "suite", SUITE_BOUND);
    eprintln!(
        "{version}, {runner}, the package {}: the client's tests took {:.1} s\n{}",
        if installed() {
            "installed"
        } else {
            "from clients/python/src"
        },
        suite.took.as_secs_f64(),
        suite.output
    );
    assert!(
        suite.ok,
        "the Python client's tests failed ({runner}):\n{}\nTLS node's log:\n{}",
        suite.output,
        read(&tls_log)
    );
    // Every test ran: none skipped for a node the runner failed to name.
    let out = suite.output.to_lowercase();
    assert!(
        !out.contains("skipped"),
        "tests were skipped:\n{}",
        suite.output
    );

    // The example agent loop, as a user runs it (the address and token from the environment),
    // once through the Python client and once through `chorus mcp` with a stdlib MCP client.
    for (script, tools) in [
        ("examples/agent_loop.py", false),
        ("examples/agent_loop_mcp.py", true),
    ] {
        let mut example_env = vec![("CHORUS_ADDR", addr(2)), ("CHORUS_TOKEN", mine.clone())];
        example_env.push(("CHORUS_BIN", super::BIN.to_owned()));
        let cmd = python(&[script], &example_env);
        let example = run_bounded(cmd, dir.path(), "example", EXAMPLE_BOUND);
        eprintln!(
            "{script} took {:.1} s\n{}",
            example.took.as_secs_f64(),
            example.output
        );
        assert!(example.ok, "{script} failed:\n{}", example.output);
        let failed = example.output.find("agent: the tests failed");
        let fixed = example.output.find("agent: fixing:");
        let passed = example.output.find("agent: the tests passed after the fix");
        assert!(
            matches!((failed, fixed, passed), (Some(a), Some(b), Some(c)) if a < b && b < c),
            "{script} did not fail, fix, then pass:\n{}",
            example.output
        );
        assert!(
            example.output.contains("FAIL mean") && example.output.contains("ok   mean"),
            "{}",
            example.output
        );
        assert!(
            example.output.contains("agent: closed sandbox"),
            "{}",
            example.output
        );
        assert_eq!(
            example.output.contains("tools: cluster_status"),
            tools,
            "{script} lists the MCP tools: {}",
            example.output
        );
        assert!(
            !example.output.contains(&mine),
            "{script}: the token in its output"
        );
    }
    // Nothing left behind by either: every live sandbox closed (the warm ones are no one's).
    for (i, node) in t.ids.iter().enumerate() {
        wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            (chorus_tests::task_cluster::metric(&t.c, i, "chorus_live_sandboxes") == Some(0))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("node {node} still holds live sandboxes after the tests"));
    }
}
