//! Shared helpers for the Docker sandbox tests: connecting (failing loudly when Docker is
//! missing), the sandbox image, unique node ids and container cleanup on panic.

#![allow(dead_code)] // each test binary uses a different subset

use chorus_io::sandbox::docker::{DockerProvider, DockerSandbox, LABEL_NODE};
use chorus_io::sandbox::image::ensure_sandbox_image;
use chorus_io::sandbox::network::SandboxNetwork;
use chorus_io::sandbox::repo::RepoRoots;
use chorus_io::sandbox::{ExecutionSandbox, SandboxPolicy, SandboxProvider, SandboxSpec};

/// Connects to the local Docker Engine and makes sure the sandbox image exists. Repositories
/// may come from the temp dir (where the tests make theirs).
///
/// Panics with instructions when Docker is unreachable: these tests must fail, not skip, on a
/// machine without Docker.
pub async fn provider() -> (DockerProvider, String) {
    let provider = match DockerProvider::connect().await {
        Ok(p) => {
            p.with_repo_roots(RepoRoots::new([std::env::temp_dir()]).expect("the temp dir exists"))
        }
        Err(e) => panic!(
            "the Docker sandbox tests need a reachable Docker Engine (DOCKER_HOST or \
             /var/run/docker.sock), and none answered: {e}"
        ),
    };
    let image = ensure_sandbox_image(provider.docker())
        .await
        .unwrap_or_else(|e| panic!("cannot build the sandbox image: {e}"));
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

/// Whether a container with this name or id exists, through the CLI.
pub fn container_exists(name: &str) -> bool {
    std::process::Command::new("docker")
        .args(["inspect", "--type", "container", name])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A dedicated sandbox network for one test (bridge names are at most 15 characters).
pub fn test_network(test: &str) -> SandboxNetwork {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tag = format!("{:x}", (std::process::id() << 20) ^ nanos);
    let tag = &tag[tag.len().saturating_sub(6)..];
    SandboxNetwork {
        name: format!("chorus-test-{test}-{tag}"),
        bridge: format!("chx{tag}"),
    }
}

/// Removes a test's sandbox network, any container still on it, and its firewall rules when
/// dropped (a `Drop` cannot await, so it shells out, as [`Cleanup`] does).
pub struct NetworkCleanup(pub SandboxNetwork);

impl Drop for NetworkCleanup {
    fn drop(&mut self) {
        // Containers still attached keep the network; remove them first.
        let script = format!(
            "ids=$(docker ps -aq --filter network={}); \
             [ -z \"$ids\" ] || docker rm -f $ids >/dev/null 2>&1; \
             docker network rm {} >/dev/null 2>&1; \
             while iptables -w -D DOCKER-USER -i {b} -j {c} 2>/dev/null; do :; done; \
             while iptables -w -D INPUT -i {b} -j DROP 2>/dev/null; do :; done; \
             iptables -w -F {c} 2>/dev/null; iptables -w -X {c} 2>/dev/null; true",
            self.0.name,
            self.0.name,
            b = self.0.bridge,
            c = self.0.chain(),
        );
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .status();
    }
}

/// This machine's address towards the outside (a non-loopback IPv4), from the route a packet
/// would take; no packet is sent (203.0.113.1 is a documentation address, TEST-NET-3).
pub fn outside_ip() -> std::net::Ipv4Addr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("203.0.113.1:9")
        .expect("this test needs a route off the machine (a non-loopback interface)");
    match s.local_addr().unwrap().ip() {
        std::net::IpAddr::V4(ip) if !ip.is_loopback() => ip,
        other => panic!("no non-loopback IPv4 address: {other}"),
    }
}
