//! Issue 37: the node as a container image, built two ways and each run as a cluster: three nodes
//! on a Docker network the test creates agree on an admin, then stop (SIGTERM, exit 0), and
//! everything is removed. Fails, not skips, without Docker.
//!
//! - `packaging/Dockerfile` builds the node from source. This machine has no registry, so the
//!   test makes the Rust image it builds in with `packaging/builder-image.sh` (Debian's packages
//!   and this machine's toolchain; kept by tag for the next run) and vendors the crates, so the
//!   build is offline. The profile is `image-test` (the workspace's: no optimisation, no debug
//!   info): the Dockerfile's path whole, at the least compile time — ~3 minutes for the node on
//!   2 cores where its default, release, took 9 in a container on fuse-overlayfs (CI's budget).
//! - `packaging/local-image.sh` wraps this build's binary, for machines that built one already.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

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

fn docker_in(dir: &Path, args: &[&str]) -> Output {
    Command::new("docker")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the docker CLI runs")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Removes the containers, network and images when the test ends, passed or not.
struct Cleanup {
    names: Vec<String>,
    network: Option<String>,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = docker(&["rm", "-f", n]);
        }
        if let Some(network) = &self.network {
            let _ = docker(&["network", "rm", network]);
        }
        for image in &self.images {
            let _ = docker(&["rmi", "-f", image]);
        }
    }
}

/// Builds the image from `packaging/Dockerfile` and this checkout's sources, offline.
#[test]
fn the_dockerfile_builds_the_node_from_source_into_an_image_three_nodes_elect_from() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tag = format!("chorus-node-src-test:{}", std::process::id());
    let builder = Command::new(root.join("packaging/builder-image.sh"))
        .output()
        .expect("packaging/builder-image.sh runs");
    assert!(builder.status.success(), "builder-image.sh: {builder:?}");
    let builder = String::from_utf8(builder.stdout).unwrap().trim().to_owned();

    // The context: this checkout's sources as git would see them (no build output, no data),
    // and every crate the lock file names, vendored.
    let ctx = tempfile::tempdir().unwrap();
    let copy = Command::new("sh")
        .args([
            "-c",
            "tar -C \"$1\" --exclude=./target --exclude-vcs --exclude-vcs-ignores -cf - . \
             | tar -C \"$2\" -xf -",
            "copy",
        ])
        .arg(&root)
        .arg(ctx.path())
        .output()
        .unwrap();
    assert!(copy.status.success(), "copying the sources: {copy:?}");
    let vendor = Command::new(env!("CARGO"))
        .args(["vendor", "--locked", "--quiet", "--manifest-path"])
        .arg(ctx.path().join("Cargo.toml"))
        .arg(ctx.path().join("vendor"))
        .output()
        .unwrap();
    assert!(vendor.status.success(), "cargo vendor: {vendor:?}");

    let rev = "abcdef012345";
    let started = Instant::now();
    let build = docker_in(
        ctx.path(),
        &[
            "build",
            "--force-rm",
            "-f",
            "packaging/Dockerfile",
            "--build-arg",
            &format!("BUILDER={builder}"),
            "--build-arg",
            &format!("GIT_REV={rev}"),
            "--build-arg",
            "PROFILE=image-test",
            "-t",
            &tag,
            ".",
        ],
    );
    let log = String::from_utf8_lossy(&build.stdout).into_owned();
    // The build stage's images are the classic builder's cache: removed with the image, except
    // the builder itself.
    let builder_id = ok(&["image", "inspect", "-f", "{{.Id}}", &builder]);
    let stages: Vec<String> = log
        .lines()
        .filter_map(|l| l.trim().strip_prefix("---> "))
        .filter(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .filter(|id| !builder_id.trim_start_matches("sha256:").starts_with(id))
        .map(str::to_owned)
        .collect();
    let _cleanup = Cleanup {
        names: Vec::new(),
        network: None,
        images: std::iter::once(tag.clone())
            .chain(stages.into_iter().rev())
            .collect(),
    };
    assert!(
        build.status.success(),
        "docker build failed:\n{}\n{}",
        tail(&log, 40),
        String::from_utf8_lossy(&build.stderr)
    );
    eprintln!(
        "docker build (image-test profile, offline): {:.1?}",
        started.elapsed()
    );

    // Minimal and unprivileged: FROM scratch around the binary, run as uid 65532.
    let user = ok(&["image", "inspect", "-f", "{{.Config.User}}", &tag]);
    assert_eq!(user, "65532:65532");
    let size: u64 = ok(&["image", "inspect", "-f", "{{.Size}}", &tag])
        .parse()
        .unwrap();
    // The test's build is unoptimised (the image-test profile, for time), stripped: 61.4 MiB on
    // 2026-11-30, where the release image users build is ~29 MB. The bound catches a layer or a
    // debug build slipping in, with room for the code to grow.
    assert!(size < 80 << 20, "image is {size} bytes");
    let version = ok(&["run", "--rm", &tag, "version"]);
    assert!(
        version.contains(&format!("git revision {rev}")),
        "{version}"
    );
    three_nodes_elect_and_stop(&tag, 1);
}

/// Wraps this build's binary with `packaging/local-image.sh`.
#[test]
fn three_nodes_from_the_local_image_elect_on_a_docker_network_and_stop_cleanly() {
    let tag = format!("chorus-node-test:{}", std::process::id());
    let _cleanup = Cleanup {
        names: Vec::new(),
        network: None,
        images: vec![tag.clone()],
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
    three_nodes_elect_and_stop(&tag, 0);
}

/// Starts three nodes from `tag` on a network of their own (`which` keeps two tests' networks
/// apart), waits for all three to name one admin with two peers each, and stops them.
fn three_nodes_elect_and_stop(tag: &str, which: u32) {
    let network = format!("chorus-image-test-{}-{which}", std::process::id());
    let names: Vec<String> = (0..3).map(|i| format!("{network}-n{i}")).collect();
    let _cleanup = Cleanup {
        names: names.clone(),
        network: Some(network.clone()),
        images: Vec::new(),
    };
    let dir = tempfile::tempdir().unwrap();
    // A subnet of its own, so the nodes' addresses are known before they start.
    let subnet = format!(
        "10.213.{}.0/24",
        (std::process::id() * 2 + which) % 200 + 20
    );
    let prefix = subnet.trim_end_matches("0/24").to_owned();
    ok(&["network", "create", "--subnet", &subnet, &network]);
    let key = dir.path().join("cluster.key");
    let gen = chorus_tests::run_chorus(Path::new(BIN), &["psk", "generate", key.to_str().unwrap()]);
    assert!(gen.status.success(), "{gen:?}");
    // The image's user (65532) reads it, as `chown 65532` would let it.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
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
            tag,
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
