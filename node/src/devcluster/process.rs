//! The cluster's `chorus run` processes: how one is started on loopback (ports the OS picks,
//! read back from its start line), signalled, and asked for its status. The start-line parsing
//! and the `chorus run` arguments are shared with the end-to-end tests.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::process::{Child, Command};

use super::args::Args;
use crate::cli::http::get_text;

/// One node of the cluster: its process (if running) and its last status.
pub(super) struct Node {
    pub(super) index: usize,
    pub(super) data_dir: PathBuf,
    /// The libp2p port the current (or last) process reported; 0 before the first start.
    pub(super) p2p_port: u16,
    /// The HTTP address the current (or last) process reported.
    pub(super) http: String,
    pub(super) child: Option<Child>,
    /// A process sent SIGTERM/SIGKILL and not reaped yet (it may still be stepping down).
    pub(super) stopping: Option<Child>,
    pub(super) status: Option<Value>,
}

impl Node {
    /// Node `index`, not started yet, keeping its data in `data_dir`.
    pub(super) fn new(index: usize, data_dir: PathBuf) -> Node {
        Node {
            index,
            data_dir,
            p2p_port: 0,
            http: String::new(),
            child: None,
            stopping: None,
            status: None,
        }
    }

    pub(super) fn field(&self, key: &str) -> Option<&Value> {
        self.status.as_ref().map(|s| &s[key])
    }
    pub(super) fn role(&self) -> &str {
        self.field("role").and_then(Value::as_str).unwrap_or("-")
    }
    pub(super) fn term(&self) -> u64 {
        self.field("term").and_then(Value::as_u64).unwrap_or(0)
    }
    pub(super) fn admin(&self) -> Option<&str> {
        self.field("admin").and_then(Value::as_str)
    }
    pub(super) fn id(&self) -> Option<&str> {
        self.field("node_id").and_then(Value::as_str)
    }
}

/// A node of a loopback cluster, as `chorus run` should start it: on 127.0.0.1, libp2p and HTTP
/// on ports the OS picks (the node reports them: [`parse_started_line`]).
pub struct LoopbackNode<'a> {
    /// Its data directory.
    pub data_dir: &'a Path,
    /// The voters that start the cluster (every node of it).
    pub bootstrap_expect: usize,
    /// The cluster id.
    pub cluster_id: &'a str,
    /// Heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// Election timeout window, `MIN..MAX` ms.
    pub election_timeout_ms: &'a str,
    /// Discovery timeout, ms.
    pub discovery_timeout_ms: u64,
    /// The API token key every node of the cluster shares, so one token works on all.
    pub acl_key_file: Option<&'a Path>,
}

impl LoopbackNode<'_> {
    /// The `chorus run` arguments: loopback addresses on port 0, no mDNS, and every port of
    /// `ports` (the running nodes') as a bootstrap address. Shared by devcluster and the
    /// end-to-end tests.
    pub fn run_args(&self, ports: &[u16]) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "run".into(),
            "--data-dir".into(),
            self.data_dir.into(),
            "--listen".into(),
            "/ip4/127.0.0.1/tcp/0".into(),
            "--http".into(),
            "127.0.0.1:0".into(),
            "--bootstrap-expect".into(),
            self.bootstrap_expect.to_string().into(),
            "--no-mdns".into(),
            "--cluster-id".into(),
            self.cluster_id.into(),
            "--heartbeat-ms".into(),
            self.heartbeat_ms.to_string().into(),
            "--election-timeout-ms".into(),
            self.election_timeout_ms.into(),
            "--discovery-timeout-ms".into(),
            self.discovery_timeout_ms.to_string().into(),
        ];
        if let Some(key) = self.acl_key_file {
            args.push("--acl-key-file".into());
            args.push(key.into());
        }
        for port in ports {
            args.push("--bootstrap".into());
            args.push(format!("/ip4/127.0.0.1/tcp/{port}").into());
        }
        args
    }
}

/// How long a starting node may take to report its ports: a liveness bound for a loaded
/// machine (a start takes well under a second).
/// The ACL key every devcluster node shares, in the cluster's temporary directory.
pub const ACL_KEY_FILE: &str = "acl.key";

pub const START_BOUND: Duration = Duration::from_secs(30);

/// The ports a `chorus run` process bound, as it reported them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// The first libp2p TCP port on 127.0.0.1.
    pub p2p: u16,
    /// The HTTP API's port on 127.0.0.1.
    pub http: u16,
}

/// Parses the ports out of a "chorus node started" log line (human or JSON format): the HTTP
/// address `http=127.0.0.1:<port>` and the first `/ip4/<address>/tcp/<port>` listen address.
/// Shared by devcluster and the end-to-end tests.
pub fn parse_started_line(line: &str) -> Option<Ports> {
    fn digits(s: &str) -> Option<u16> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    }
    if !line.contains("chorus node started") {
        return None;
    }
    let listen = line.split("/ip4/").nth(1)?;
    let p2p = digits(listen.split_once("/tcp/")?.1)?;
    // The HTTP address is the one `127.0.0.1:<port>` in the line.
    let http = digits(line.split("127.0.0.1:").nth(1)?)?;
    Some(Ports { p2p, http })
}

/// `log`'s text from byte `offset` on, when it can be read (what a process appended to its log
/// since it was started). Shared by devcluster and the end-to-end tests.
pub fn log_since(log: &Path, offset: u64) -> Option<String> {
    let mut f = std::fs::File::open(log).ok()?;
    f.seek(std::io::SeekFrom::Start(offset)).ok()?;
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    Some(text)
}

/// (Re)starts node `i` on ports the OS picks, bootstrapping off every other running node, and
/// waits (up to [`START_BOUND`]) for it to report its ports.
pub(super) async fn start(
    exe: &Path,
    args: &Args,
    root: &Path,
    nodes: &mut [Node],
    i: usize,
) -> anyhow::Result<()> {
    let ports: Vec<u16> = nodes
        .iter()
        .filter(|n| n.index != i && n.child.is_some())
        .map(|n| n.p2p_port)
        .collect();
    let node = &mut nodes[i];
    // The old process must be gone: it holds the data directory's lock and the ports.
    if let Some(mut old) = node.stopping.take() {
        if tokio::time::timeout(Duration::from_secs(10), old.wait())
            .await
            .is_err()
        {
            let _ = old.kill().await;
        }
    }
    let log_path = root.join(format!("n{}.log", node.index));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let offset = log.metadata()?.len();
    let acl_key_file = root.join(ACL_KEY_FILE);
    let spec = LoopbackNode {
        data_dir: &node.data_dir,
        bootstrap_expect: args.nodes,
        cluster_id: "devcluster",
        heartbeat_ms: args.heartbeat_ms,
        election_timeout_ms: &args.election_timeout_ms,
        discovery_timeout_ms: args.discovery_timeout_ms,
        acl_key_file: Some(&acl_key_file),
    };
    let mut cmd = Command::new(exe);
    cmd.args(spec.run_args(&ports));
    if args.demo_tasks > 0 {
        cmd.args([
            "--docker",
            "--warm-image",
            chorus_io::sandbox::image::SANDBOX_IMAGE,
        ]);
    }
    // Should devcluster die without cleaning up (SIGKILL), the node stops on its own.
    cmd.arg("--exit-with-parent");
    // The ports are read from the info-level start line, whatever else RUST_LOG asks for.
    if let Ok(filter) = std::env::var("RUST_LOG") {
        cmd.env(
            "RUST_LOG",
            format!("{filter},chorus_node::daemon::run=info"),
        );
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("cannot start chorus run")?;
    node.status = None;
    let deadline = Instant::now() + START_BOUND;
    let ports = loop {
        let reported =
            log_since(&log_path, offset).and_then(|text| text.lines().find_map(parse_started_line));
        if let Some(ports) = reported {
            break ports;
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "n{} exited ({status}) before reporting its ports; see {}",
                node.index,
                log_path.display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "n{} reported no ports within {START_BOUND:?}; see {}",
                node.index,
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    node.p2p_port = ports.p2p;
    node.http = format!("127.0.0.1:{}", ports.http);
    node.child = Some(child);
    Ok(())
}

/// Sends `sig` to the child, if it still has a pid.
pub(super) fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
    }
}

/// Asks every running node for its `/status` (half a second each); no answer is no status.
pub(super) async fn poll(nodes: &mut [Node]) {
    for node in nodes.iter_mut() {
        if node.child.is_none() {
            continue;
        }
        let got =
            tokio::time::timeout(Duration::from_millis(500), get_text(&node.http, "/status")).await;
        node.status = match got {
            Ok(Ok((200, body))) => serde_json::from_str(&body).ok(),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_from_the_started_line() {
        let human = "2026-01-01T00:00:00Z  INFO chorus_node::run: chorus node started \
            node_id=12D3KooWabc data_dir=/tmp/x/n0 http=127.0.0.1:40123 \
            listen=[\"/ip4/127.0.0.1/tcp/39001/p2p/12D3KooWabc\"]";
        assert_eq!(
            parse_started_line(human),
            Some(Ports {
                p2p: 39001,
                http: 40123
            })
        );
        let ansi = "\x1b[3mhttp\x1b[0m\x1b[2m=\x1b[0m127.0.0.1:8080 \x1b[3mlisten\x1b[0m\x1b[2m=\x1b[0m[\"/ip4/127.0.0.1/tcp/7946/p2p/x\"] chorus node started";
        assert_eq!(
            parse_started_line(ansi),
            Some(Ports {
                p2p: 7946,
                http: 8080
            })
        );
        assert_eq!(parse_started_line("event log flushed"), None);
    }
}
