//! Shared helpers for the Docker sandbox tests: connecting (failing loudly when Docker is
//! missing), the busybox image, unique node ids and container cleanup on panic.

#![allow(dead_code)] // each test binary uses a different subset

use chorus_io::sandbox::docker::{DockerProvider, DockerSandbox, LABEL_NODE};
use chorus_io::sandbox::image::ensure_busybox_image;
use chorus_io::sandbox::{ExecutionSandbox, SandboxPolicy, SandboxProvider, SandboxSpec};

/// Connects to the local Docker Engine and makes sure the busybox image exists.
///
/// Panics with instructions when Docker is unreachable: these tests must fail, not skip, on a
/// machine without Docker.
pub async fn provider() -> (DockerProvider, String) {
    let provider = match DockerProvider::connect().await {
        Ok(p) => p,
        Err(e) => panic!(
            "the Docker sandbox tests need a reachable Docker Engine (DOCKER_HOST or \
             /var/run/docker.sock), and none answered: {e}"
        ),
    };
    let image = ensure_busybox_image(provider.docker())
        .await
        .unwrap_or_else(|e| panic!("cannot build the busybox test image: {e}"));
    (provider, image)
}

/// A node id nobody else uses, so parallel tests (and parallel test runs) never reap each
/// other's containers.
pub fn unique_node(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("test-{test}-{}-{nanos:x}", std::process::id())
}

/// Removes every container of a node when dropped, even when the test panicked (a `Drop` cannot
/// await, so it shells out to the docker CLI).
pub struct Cleanup {
    pub node: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let script = format!(
            "ids=$(docker ps -aq --filter label={LABEL_NODE}={}); \
             [ -z \"$ids\" ] || docker rm -f $ids >/dev/null 2>&1",
            self.node
        );
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .status();
        // Staging dirs are named after the container, which starts with `chorus-<node>-`.
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir().join("chorus-sandboxes")) {
            let prefix = format!("chorus-{}-", self.node);
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }
}

/// A started sandbox for `test` with `policy`, plus its cleanup guard.
pub async fn started(
    test: &str,
    policy: SandboxPolicy,
    customize: impl FnOnce(&mut SandboxSpec),
) -> (DockerProvider, DockerSandbox, Cleanup) {
    let (provider, image) = provider().await;
    let node = unique_node(test);
    let cleanup = Cleanup { node: node.clone() };
    let mut spec = SandboxSpec::new(&node, test, image);
    customize(&mut spec);
    let sandbox = provider
        .create(&spec, &policy)
        .await
        .unwrap_or_else(|e| panic!("create failed: {e}"));
    sandbox
        .start()
        .await
        .unwrap_or_else(|e| panic!("start failed: {e}"));
    (provider, sandbox, cleanup)
}

/// Counts containers labelled with `node`, through the CLI (an independent check).
pub fn containers_of(node: &str) -> usize {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label={LABEL_NODE}={node}"),
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}
