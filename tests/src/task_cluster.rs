//! A cluster of real nodes that run tasks and live sandboxes in Docker, and the calls the
//! tests that use it make: as another token, new tokens, counting a node's live sandboxes.

use std::time::Duration;

use crate::{containers_of, http_exact, http_request, Cluster, Timings, Value};

/// The sandbox image `chorus sandbox image build` makes and the nodes keep warm.
pub const IMAGE: &str = "chorus/sandbox:latest";

/// A three-node cluster whose nodes run tasks in Docker; on drop the nodes are killed and
/// every container they made is removed.
pub struct TaskCluster {
    pub c: Cluster,
    /// The node ids, by index.
    pub ids: Vec<String>,
}

impl TaskCluster {
    /// Three nodes of `bin` (the tests' `chorus-e2e`).
    pub fn start(bin: &str) -> TaskCluster {
        TaskCluster::start_n(bin, 3)
    }

    /// `n` nodes of `bin`, after building the sandbox image (which fails without Docker).
    pub fn start_n(bin: &str, n: usize) -> TaskCluster {
        TaskCluster::start_with(bin, n, &[])
    }

    /// [`TaskCluster::start_n`], each node also given `extra` arguments.
    pub fn start_with(bin: &str, n: usize, extra: &[&str]) -> TaskCluster {
        TaskCluster::started(
            bin,
            n,
            |args| Cluster::start_with(bin, n, Timings::FAST, args),
            extra,
        )
    }

    /// [`TaskCluster::start_n`] with libp2p on `ip` and every API on its own loopback
    /// ([`Cluster::start_off_loopback`]): no node reaches another's API directly.
    pub fn start_off_loopback(bin: &str, n: usize, ip: &str) -> TaskCluster {
        TaskCluster::started(
            bin,
            n,
            |args| Cluster::start_off_loopback(bin, n, Timings::FAST, args, ip),
            &[],
        )
    }

    fn started(
        bin: &str,
        n: usize,
        start: impl FnOnce(&[&str]) -> Cluster,
        extra: &[&str],
    ) -> TaskCluster {
        let out = crate::run_chorus(bin.as_ref(), &["sandbox", "image", "build"]);
        assert!(
            out.status.success(),
            "the test image builds (this test needs Docker): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut args = vec!["--docker", "--warm-image", IMAGE];
        args.extend(extra);
        let c = start(&args);
        c.wait_agreed(Duration::from_secs(60));
        let ids = (0..n)
            .map(|i| {
                c.status(i).expect("status")["node_id"]
                    .as_str()
                    .expect("node id")
                    .to_owned()
            })
            .collect();
        TaskCluster { c, ids }
    }

    /// The index of the node named `node`.
    pub fn index_of(&self, node: &str) -> usize {
        self.ids
            .iter()
            .position(|n| n == node)
            .unwrap_or_else(|| panic!("{node} is not a node of this cluster"))
    }
}

impl Drop for TaskCluster {
    fn drop(&mut self) {
        for i in 0..self.c.nodes.len() {
            self.c.kill(i);
        }
        for node in &self.ids {
            for container in containers_of(node) {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", &container])
                    .output();
            }
        }
    }
}

/// A request to node `i` with `token` (not the harness's management token); (status, body).
pub fn as_token(
    c: &Cluster,
    i: usize,
    token: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let auth = format!("Bearer {token}");
    http_exact(
        c.nodes[i].http_port,
        method,
        path,
        &[
            ("Host", "127.0.0.1"),
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body,
    )
    .expect("the node answers")
}

/// The names of node `node`'s live sandboxes' containers — its warm ones included, which
/// carry the same labels — running ones, or (`all`) in any state (tasks' sandboxes are not
/// listed).
pub fn live_containers_of(node: &str, all: bool) -> Vec<String> {
    let label = format!("label=io.chorus.node={node}");
    let mut args = vec![
        "ps",
        "--format",
        "{{.Names}}",
        "--filter",
        &label,
        "--filter",
        "label=io.chorus.live=true",
    ];
    if all {
        args.push("-a");
    }
    let out = std::process::Command::new("docker")
        .args(&args)
        .output()
        .expect("docker ps runs");
    assert!(out.status.success(), "docker ps: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A metric of node `i`'s `/metrics` (a line `NAME VALUE`), if it has it.
pub fn metric(c: &Cluster, i: usize, name: &str) -> Option<u64> {
    let (code, body) = http_request(c.nodes[i].http_port, "GET", "/metrics", None)?;
    (code == 200).then_some(())?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A new token of `role`, made with the harness's management token.
pub fn token(c: &Cluster, role: &str) -> String {
    let (code, body) = http_request(
        c.nodes[0].http_port,
        "POST",
        "/acl/tokens",
        Some(&format!("{{\"role\": \"{role}\"}}")),
    )
    .expect("the node answers");
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned()
}
