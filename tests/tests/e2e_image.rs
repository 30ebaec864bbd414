//! Issue 37: the node as a container image. `packaging/Dockerfile` builds it from source where a
//! registry serves `rust` and `debian` images; this machine has none, so the test makes the same
//! image's runtime half the way `packaging/local-image.sh` does — `FROM scratch`, this build's
//! binary (stripped) and the shared libraries it links — then starts three nodes from it on a
//! Docker network it creates, waits for them to agree on an admin, stops them (SIGTERM, exit 0)
//! and removes everything. Fails, not skips, without Docker.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use chorus_tests::{http_get_at, wait_until, Timings, Value};

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs")
}

fn ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Removes the containers, network and image when the test ends, passed or not.
struct Cleanup {
    names: Vec<String>,
    network: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = docker(&["rm", "-f", n]);
        }
        let _ = docker(&["network", "rm", &self.network]);
        let _ = docker(&["rmi", "-f", &self.image]);
    }
}

#[test]
fn three_nodes_from_the_image_elect_on_a_docker_network_and_stop_cleanly() {
    let tag = format!("chorus-node-test:{}", std::process::id());
    let network = format!("chorus-image-test-{}", std::process::id());
    let names: Vec<String> = (0..3).map(|i| format!("{network}-n{i}")).collect();
    let _cleanup = Cleanup {
        names: names.clone(),
        network: network.clone(),
        image: tag.clone(),
    };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/local-image.sh"
    ))
    .args([BIN, &tag])
    .env("TMPDIR", dir.path())
    .output()
    .expect("packaging/local-image.sh runs");
    assert!(out.status.success(), "local-image.sh: {out:?}");

    // A subnet of its own, so the nodes' addresses are known before they start.
    let subnet = format!("10.213.{}.0/24", std::process::id() % 200 + 20);
    let prefix = subnet.trim_end_matches("0/24").to_owned();
    ok(&["network", "create", "--subnet", &subnet, &network]);
    let key = dir.path().join("cluster.key");
    let gen = chorus_tests::run_chorus(Path::new(BIN), &["psk", "generate", key.to_str().unwrap()]);
    assert!(gen.status.success(), "{gen:?}");
    let mount = format!("{}:/etc/chorus/cluster.key:ro", key.display());
    let ip = |i: usize| format!("{prefix}{}", 10 + i);
    for (i, name) in names.iter().enumerate() {
        let listen = format!("/ip4/{}/tcp/7946", ip(i));
        let http = format!("{}:7070", ip(i));
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            name,
            "--network",
            &network,
            "--ip",
            &ip(i),
            "-v",
            &mount,
            &tag,
            "run",
            "--data-dir",
            "/var/lib/chorus",
            "--listen",
            &listen,
            "--http",
            &http,
            "--http-tls",
            "off",
            "--psk-file",
            "/etc/chorus/cluster.key",
            "--bootstrap-expect",
            "3",
            "--cluster-id",
            "image",
        ]
        .map(String::from)
        .to_vec();
        args.extend(Timings::FAST.run_args());
        if i > 0 {
            args.extend(["--bootstrap".into(), format!("/ip4/{}/tcp/7946", ip(0))]);
        }
        ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    // The host reaches the network's addresses; every node names the same admin.
    let status = |i: usize| -> Option<Value> {
        let addr = format!("{}:7070", ip(i)).parse().unwrap();
        let (code, body) = http_get_at(addr, "/status")?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    };
    let agreed = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let s: Vec<Value> = (0..3).map(status).collect::<Option<_>>()?;
        let admin = s[0]["admin"].as_str()?.to_owned();
        s.iter()
            .all(|v| v["admin"] == admin.as_str() && v["peers"].as_array().map(Vec::len) == Some(2))
            .then_some(admin)
    });
    let logs = |n: &str| String::from_utf8_lossy(&docker(&["logs", n]).stderr).into_owned();
    let Some(admin) = agreed else {
        panic!(
            "no agreed admin within 60 s:\n{}",
            names
                .iter()
                .map(|n| logs(n))
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
    };
    assert!(!admin.is_empty());
    // `docker stop` sends SIGTERM: a graceful stop, exit 0.
    for name in &names {
        ok(&["stop", "-t", "30", name]);
        let code = ok(&["inspect", "-f", "{{.State.ExitCode}}", name]);
        assert_eq!(code, "0", "{name} exit code; log:\n{}", logs(name));
    }
}
