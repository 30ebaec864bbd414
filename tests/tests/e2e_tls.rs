//! End to end, the HTTP API over TLS (issue 33): a node asked for TLS makes a certificate at
//! first start, prints its fingerprint, keeps it across restarts, and the CLI reaches it only
//! with that fingerprint pinned (or the address's own `#sha256=` pin) — a wrong one, none, or
//! plain HTTP gets nothing. Off loopback TLS is the default; `--http-tls off` there is warned.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use chorus_tests::{
    lone_node_args, read, run_chorus_env, spawn_logged, spawn_reported, wait_until,
};

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

fn chorus(args: &[&str]) -> std::process::Output {
    run_chorus_env(Path::new(BIN), args, &[])
}

/// The fingerprint the node printed (it follows the start line closely).
fn printed_fingerprint(log: &Path) -> String {
    wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        let text = read(log);
        let line = text.lines().find(|l| l.contains("--tls-fingerprint "))?;
        let fp = line.rsplit("--tls-fingerprint ").next()?;
        Some(fp.split_whitespace().next()?.to_owned())
    })
    .unwrap_or_else(|| panic!("no fingerprint printed:\n{}", read(log)))
}

/// Waits until `log` holds `text` (or the node stopped writing without it).
fn wait_log(log: &Path, text: &str) -> String {
    wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
        let got = read(log);
        got.contains(text).then_some(got)
    })
    .unwrap_or_else(|| panic!("{text:?} never logged:\n{}", read(log)))
}

#[test]
fn the_api_speaks_tls_to_a_client_that_pins_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n0");
    let log = dir.path().join("n0.log");
    let mut args = lone_node_args(&data);
    args.extend(["--http-tls".to_owned(), "on".to_owned()]);
    let (mut guard, ports) = spawn_reported(Path::new(BIN), &args, &[], &log);
    let fp = printed_fingerprint(&log);
    assert_eq!(fp.len(), 64, "{fp}");
    let https = format!("https://127.0.0.1:{}", ports.http);

    // Pinned: status answers, and names the fingerprint and an admin in time.
    let status = wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
        let out = chorus(&[
            "status",
            "--json",
            "--addr",
            &https,
            "--tls-fingerprint",
            &fp,
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && text.contains("\"admin\":\"")).then_some(text)
    })
    .unwrap_or_else(|| panic!("no status over TLS:\n{}", read(&log)));
    assert!(status.contains(&fp), "{status}");
    // The pin may ride in the address itself (as `/cluster` advertises it), colons allowed.
    let colons: Vec<String> = fp
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8_lossy(c).to_uppercase())
        .collect();
    let out = chorus(&[
        "status",
        "--addr",
        &format!("{https}#sha256={}", colons.join(":")),
    ]);
    assert!(out.status.success(), "{out:?}");
    // A task submitted over TLS, with a token, is accepted.
    let out = chorus(&["task", "list", "--addr", &https, "--tls-fingerprint", &fp]);
    assert!(out.status.success(), "{out:?}");

    // A wrong pin, or none, gets nothing and says why.
    let wrong = "0".repeat(64);
    let out = chorus(&["status", "--addr", &https, "--tls-fingerprint", &wrong]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fingerprint"), "{err}");
    let out = chorus(&["status", "--addr", &https]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-fingerprint"),
        "{out:?}"
    );
    // Plain HTTP to the TLS port gets no answer (the handshake fails): no token leaves in the
    // clear that way either.
    let mut plain = TcpStream::connect(("127.0.0.1", ports.http)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    plain
        .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("node_id"),
        "plain HTTP answered"
    );

    // A restart keeps the certificate: the same pin still works, and nothing new is printed.
    chorus_tests::stop(&mut guard, nix::sys::signal::Signal::SIGTERM);
    let log2 = dir.path().join("n0-again.log");
    let (_guard, ports) = spawn_reported(Path::new(BIN), &args, &[], &log2);
    assert!(!read(&log2).contains("made for it"), "{}", read(&log2));
    let https = format!("https://127.0.0.1:{}", ports.http);
    let back = wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
        chorus(&["status", "--addr", &https, "--tls-fingerprint", &fp])
            .status
            .success()
            .then_some(())
    });
    assert!(back.is_some(), "{}", read(&log2));
}

#[test]
fn off_loopback_the_api_speaks_tls_unless_told_not_to_and_then_warns() {
    // `--http 0.0.0.0:0` is reachable from other machines; nothing dials it here.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n0");
    let log = dir.path().join("n0.log");
    let mut args = lone_node_args(&data);
    let http = args.iter().position(|a| a == "--http").unwrap() + 1;
    args[http] = "0.0.0.0:0".to_owned();
    // (The start line names 0.0.0.0, which the harness's port parser does not read.)
    let _guard = spawn_logged(Path::new(BIN), &args, &[], &log);
    wait_log(&log, "--tls-fingerprint");

    let data = dir.path().join("n1");
    let log = dir.path().join("n1.log");
    let mut args = lone_node_args(&data);
    args[http] = "0.0.0.0:0".to_owned();
    args.extend(["--http-tls".to_owned(), "off".to_owned()]);
    let _guard = spawn_logged(Path::new(BIN), &args, &[], &log);
    let text = wait_log(&log, "chorus node started");
    assert!(text.contains("without TLS"), "{text}");
    assert!(!text.contains("--tls-fingerprint"), "{text}");
}
