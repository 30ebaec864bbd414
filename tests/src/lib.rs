//! Shared helpers for the cross-crate integration tests: a cluster of real `chorus run`
//! processes on loopback, each with its own data directory and ports, killed when the test ends
//! (or panics); a tiny HTTP client for their status; polling with deadlines; a headless
//! browser (`browser`) for the web console.
//!
//! Ports: every process binds port 0 and the OS picks; the harness reads the ports the child
//! reports in its "chorus node started" log line. Nothing picks a port number and hopes it is
//! still free when the child binds it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub use chorus_node::devcluster::{log_since, parse_started_line, Ports, START_BOUND};
pub use serde_json::Value;

pub mod browser;
pub mod delay;
pub mod netns;
pub mod soak;
pub mod task_cluster;

/// The ACL key of every node the tests start (a constant: test clusters hold nothing secret),
/// so one token, [`test_token`], works on all of them.
pub const TEST_ACL_KEY: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

/// The file holding [`TEST_ACL_KEY`] (mode 0600), made once per machine and shared by every
/// test process: written under a unique name and renamed, so a reader never sees half of it.
pub fn test_acl_key_file() -> &'static Path {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        use std::os::unix::fs::OpenOptionsExt;
        let path = std::env::temp_dir().join("chorus-tests-acl.key");
        if std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == TEST_ACL_KEY) {
            return path;
        }
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .expect("test ACL key file");
        f.write_all(TEST_ACL_KEY.as_bytes()).expect("test ACL key");
        std::fs::rename(&tmp, &path).expect("test ACL key in place");
        path
    })
}

/// The management token of [`TEST_ACL_KEY`]: every request of the harness carries it, and
/// every `chorus` command it runs gets it as `CHORUS_TOKEN`.
pub fn test_token() -> String {
    chorus_node::api::auth::AclKey::from_hex(TEST_ACL_KEY)
        .expect("a key")
        .management_token()
}

/// An IPv4 address of this machine other than loopback, for nodes that must meet as separate
/// hosts do: the Docker bridge's (`docker0`, which the sandbox tests need anyway), else the
/// first global one `ip` lists. Traffic to it never leaves the machine. Panics when there is
/// none: the test needs it.
pub fn host_ip() -> String {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("`ip` runs (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let addresses: Vec<(String, std::net::Ipv4Addr)> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let device = words.nth(1)?.to_owned();
            words.find(|w| *w == "inet")?;
            let addr = words.next()?.split('/').next()?.parse().ok()?;
            Some((device, addr))
        })
        .filter(|(_, a): &(String, std::net::Ipv4Addr)| !a.is_loopback())
        .collect();
    addresses
        .iter()
        .find(|(d, _)| d == "docker0")
        .or(addresses.first())
        .map(|(_, a)| a.to_string())
        .unwrap_or_else(|| panic!("this machine has no IPv4 address but loopback: {text}"))
}

/// Protocol timings handed to every node.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    pub discovery_ms: u64,
}

impl Timings {
    /// Short timings for tests: 300 ms heartbeats, 1.2–1.8 s elections, 800 ms discovery.
    pub const FAST: Timings = Timings {
        heartbeat_ms: 300,
        election_min_ms: 1_200,
        election_max_ms: 1_800,
        discovery_ms: 800,
    };
}

impl Timings {
    /// The `chorus run` flags that set these timings.
    pub fn run_args(&self) -> Vec<String> {
        vec![
            "--heartbeat-ms".into(),
            self.heartbeat_ms.to_string(),
            "--election-timeout-ms".into(),
            format!("{}..{}", self.election_min_ms, self.election_max_ms),
            "--discovery-timeout-ms".into(),
            self.discovery_ms.to_string(),
        ]
    }
}

/// One `chorus run` process (or the slot for one, while it is down).
pub struct Node {
    pub index: usize,
    pub data_dir: PathBuf,
    /// The ports the current (or last) process reported; 0 before the first start.
    pub p2p_port: u16,
    pub http_port: u16,
    pub log: PathBuf,
    child: Option<Child>,
}

/// N nodes that bootstrap off each other on loopback. Dropping it kills every process.
pub struct Cluster {
    bin: PathBuf,
    root: tempfile::TempDir,
    pub nodes: Vec<Node>,
    pub timings: Timings,
    /// Every node's `bootstrap_expect`: the number of nodes started together.
    pub expect: usize,
    /// More `chorus run` arguments for every node (e.g. `--docker`), after the cluster's own.
    pub extra_args: Vec<String>,
    /// Which running nodes a (re)started node is given as `--bootstrap`.
    pub join: Join,
    /// The IPv4 address libp2p listens on and dials instead of 127.0.0.1 (every node then holds
    /// the cluster's pre-shared key): with the HTTP APIs still on loopback, no node can reach
    /// another's API directly, as on separate hosts ([`host_ip`]).
    pub p2p_ip: Option<String>,
}

/// The bootstrap addresses a starting node gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Every running node's.
    All,
    /// Only n0's (none for n0 itself): the others must find each other through it.
    First,
    /// None: the node finds the cluster from its data directory (its known peers) or not at all.
    None,
}

/// Waits for `child` to report its ports in `log` (written from byte `offset` on). Fails the
/// test with the log if the child exits first or reports nothing within [`START_BOUND`].
pub fn reported_ports(child: &mut Child, log: &Path, offset: u64) -> Ports {
    let read = || log_since(log, offset);
    let found = wait_until(START_BOUND, Duration::from_millis(10), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "chorus exited ({status}) before reporting its ports:\n{}",
                read().unwrap_or_default()
            );
        }
        read()?.lines().find_map(parse_started_line)
    });
    found.unwrap_or_else(|| {
        panic!(
            "no ports reported within {START_BOUND:?}:\n{}",
            read().unwrap_or_default()
        )
    })
}

impl Cluster {
    /// Starts `n` nodes (bootstrap-expect `n`, mDNS off), one after the other, each
    /// bootstrapping off the ones already running (the first is dialled by all the others).
    pub fn start(bin: &str, n: usize, timings: Timings) -> Cluster {
        Cluster::start_with(bin, n, timings, &[])
    }

    /// [`Cluster::start`], every node also given `extra` (e.g. `--docker`).
    pub fn start_with(bin: &str, n: usize, timings: Timings, extra: &[&str]) -> Cluster {
        let root = tempfile::Builder::new()
            .prefix("chorus-e2e-")
            .tempdir()
            .expect("temp dir");
        let mut cluster = Cluster {
            bin: PathBuf::from(bin),
            root,
            nodes: Vec::new(),
            timings,
            expect: n,
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            join: Join::All,
            p2p_ip: None,
        };
        cluster.add_nodes(n);
        cluster
    }

    /// [`Cluster::start_with`], libp2p on `ip` (an address of this machine other than
    /// loopback) and every API on loopback: each node's API answers its own host only, as the
    /// docs suggest, and the nodes meet as separate hosts do.
    pub fn start_off_loopback(
        bin: &str,
        n: usize,
        timings: Timings,
        extra: &[&str],
        ip: &str,
    ) -> Cluster {
        let mut cluster = Cluster::start_with(bin, 0, timings, extra);
        cluster.expect = n;
        cluster.p2p_ip = Some(ip.to_owned());
        let psk = cluster.root().join("swarm.key");
        chorus_node::cli::psk::generate(&psk).expect("a cluster key");
        cluster.extra_args.push("--psk-file".into());
        cluster.extra_args.push(psk.display().to_string());
        cluster.add_nodes(n);
        cluster
    }

    /// Starts `n` nodes (bootstrap-expect `n`, mDNS off) that are only given n0's address.
    pub fn start_joining_first(bin: &str, n: usize, timings: Timings) -> Cluster {
        let mut cluster = Cluster::start_with(bin, 0, timings, &[]);
        cluster.expect = n;
        cluster.join = Join::First;
        cluster.add_nodes(n);
        cluster
    }

    fn add_nodes(&mut self, n: usize) {
        for _ in 0..n {
            self.add_node();
        }
    }

    /// Starts one more node (the next index) with the cluster's settings; it joins the formed
    /// cluster as a standby (voter) that is not in the electorate. Returns its index.
    pub fn add_node(&mut self) -> usize {
        let index = self.nodes.len();
        let root = self.root.path();
        self.nodes.push(Node {
            index,
            data_dir: root.join(format!("n{index}")),
            p2p_port: 0,
            http_port: 0,
            log: root.join(format!("n{index}.log")),
            child: None,
        });
        self.start_node(index);
        index
    }

    /// The temporary directory holding data directories and logs.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// (Re)starts node `i` with its data directory, on ports the OS picks, bootstrapping off
    /// every running node; returns once the process has reported its ports.
    pub fn start_node(&mut self, i: usize) {
        let t = self.timings;
        let n = self.nodes.len();
        // The running nodes' ports; the new process binds port 0.
        let join = self.join;
        let ports: Vec<u16> = (0..n)
            .filter(|j| *j != i && self.is_up(*j))
            .filter(|j| match join {
                Join::All => true,
                Join::First => *j == 0,
                Join::None => false,
            })
            .map(|j| self.nodes[j].p2p_port)
            .collect();
        let node = &mut self.nodes[i];
        assert!(node.child.is_none(), "n{i} is already running");
        let log = append_to(&node.log);
        let offset = log.metadata().expect("log file").len();
        let election_timeout_ms = format!("{}..{}", t.election_min_ms, t.election_max_ms);
        let spec = chorus_node::devcluster::LoopbackNode {
            data_dir: &node.data_dir,
            bootstrap_expect: self.expect,
            cluster_id: "e2e",
            heartbeat_ms: t.heartbeat_ms,
            election_timeout_ms: &election_timeout_ms,
            discovery_timeout_ms: t.discovery_ms,
            acl_key_file: Some(test_acl_key_file()),
        };
        let mut cmd = Command::new(&self.bin);
        let args = spec
            .run_args(&ports)
            .into_iter()
            .map(|a| match &self.p2p_ip {
                Some(ip) => a
                    .to_string_lossy()
                    .replace("/ip4/127.0.0.1/", &format!("/ip4/{ip}/"))
                    .into(),
                None => a,
            });
        cmd.args(args.collect::<Vec<std::ffi::OsString>>());
        cmd.args(&self.extra_args);
        cmd.env("RUST_LOG", "info,libp2p=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        // Guarded until it reports, so a failed start does not leave the process running.
        let mut guard = ChildGuard(Some(cmd.spawn().expect("chorus run starts")));
        let ports = reported_ports(guard.0.as_mut().expect("spawned"), &node.log, offset);
        node.p2p_port = ports.p2p;
        node.http_port = ports.http;
        node.child = guard.0.take();
    }

    /// Whether node `i` has a running process.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// SIGKILL (a crash) and reap.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait (up to 15 s, then SIGKILL) for the exit status.
    pub fn terminate(&mut self, i: usize) -> Option<ExitStatus> {
        let mut child = self.nodes[i].child.take()?;
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM without waiting; the process is left to [`Cluster::wait_exit`].
    pub fn signal_term(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGTERM);
    }

    /// Sends `sig` to node `i`'s process (`SIGSTOP`: the others see it cut off until
    /// `SIGCONT`).
    pub fn signal(&self, i: usize, sig: nix::sys::signal::Signal) {
        if let Some(child) = &self.nodes[i].child {
            signal(child, sig);
        }
    }

    /// Waits for node `i`'s process to exit.
    pub fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.nodes[i].child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.nodes[i].child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Node `i`'s `/status`, if it is up and answers.
    pub fn status(&self, i: usize) -> Option<Value> {
        self.nodes[i].child.as_ref()?;
        let (code, body) = http_get(self.nodes[i].http_port, "/status")?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// (admin id, term, admin's index) when every running node answers and agrees, and the
    /// admin is one of them and says it is admin.
    pub fn agreement(&self) -> Option<(String, u64, usize)> {
        let mut seen: Option<(String, u64)> = None;
        let mut ids = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.is_up(i) {
                continue;
            }
            let s = self.status(i)?;
            let view = (s["admin"].as_str()?.to_owned(), s["term"].as_u64()?);
            if seen.as_ref().is_some_and(|v| *v != view) {
                return None;
            }
            seen = Some(view);
            ids.push((
                s["node_id"].as_str()?.to_owned(),
                s["role"].as_str()?.to_owned(),
            ));
        }
        let (admin, term) = seen?;
        let index = ids.iter().position(|(id, _)| *id == admin)?;
        (ids[index].1 == "admin").then_some(())?;
        // `ids` lists running nodes in order; map back to the cluster index.
        let running: Vec<usize> = (0..self.nodes.len()).filter(|i| self.is_up(*i)).collect();
        Some((admin, term, running[index]))
    }

    /// Waits until the running nodes agree on an admin.
    pub fn wait_agreed(&self, timeout: Duration) -> (String, u64, usize) {
        wait_until(timeout, Duration::from_millis(50), || self.agreement()).unwrap_or_else(|| {
            panic!(
                "no agreed admin within {timeout:?}; statuses: {:?}",
                (0..self.nodes.len())
                    .map(|i| self
                        .status(i)
                        .map(|s| (s["role"].clone(), s["term"].clone())))
                    .collect::<Vec<_>>()
            )
        })
    }

    /// Runs `chorus` with `args` to completion.
    pub fn chorus(&self, args: &[&str]) -> Output {
        run_chorus(&self.bin, args)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for i in 0..self.nodes.len() {
            self.kill(i);
            if panicking {
                let text = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(25).collect();
                eprintln!("---- n{i} log (last lines) ----");
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// A child process killed when dropped (for single `chorus run` processes outside a cluster).
pub struct ChildGuard(pub Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `chorus run` arguments for a lone node with short timings (200 ms heartbeats, 600–900 ms
/// elections, 300 ms discovery), HTTP on `http` and libp2p on `listen`, mDNS off.
pub fn lone_node_args_on(data_dir: &Path, http: &str, listen: &str) -> Vec<String> {
    [
        "run",
        "--data-dir",
        data_dir.to_str().expect("a UTF-8 path"),
        "--http",
        http,
        "--listen",
        listen,
        "--no-mdns",
        "--heartbeat-ms",
        "200",
        "--election-timeout-ms",
        "600..900",
        "--discovery-timeout-ms",
        "300",
        "--acl-key-file",
        test_acl_key_file().to_str().expect("a UTF-8 path"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// [`lone_node_args_on`] with ports the OS picks; the node reports them in its log (read them
/// with [`reported_ports`]).
pub fn lone_node_args(data_dir: &Path) -> Vec<String> {
    lone_node_args_on(data_dir, "127.0.0.1:0", "/ip4/127.0.0.1/tcp/0")
}

/// Starts `bin` with `args` and the environment `env`, stdout and stderr into a new file `log`
/// (at info level, so the start line with the ports is there); killed when the guard drops.
pub fn spawn_logged(bin: &Path, args: &[String], env: &[(&str, &str)], log: &Path) -> ChildGuard {
    let file = std::fs::File::create(log).expect("log file");
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env("RUST_LOG", "info,libp2p=warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log file"))
        .stderr(file);
    ChildGuard(Some(cmd.spawn().expect("chorus starts")))
}

/// [`spawn_logged`], then waits for the process to report its ports.
pub fn spawn_reported(
    bin: &Path,
    args: &[String],
    env: &[(&str, &str)],
    log: &Path,
) -> (ChildGuard, Ports) {
    let mut guard = spawn_logged(bin, args, env, log);
    let ports = reported_ports(guard.0.as_mut().expect("spawned"), log, 0);
    (guard, ports)
}

/// How long [`stop`] waits for an exit: a liveness bound for a loaded machine.
pub const STOP_BOUND: Duration = Duration::from_secs(30);

/// Sends `sig` to the guarded process and waits (up to [`STOP_BOUND`]) for its exit status;
/// fails the test when it does not exit.
pub fn stop(guard: &mut ChildGuard, sig: nix::sys::signal::Signal) -> ExitStatus {
    let mut child = guard.0.take().expect("a running child");
    signal(&child, sig);
    let status = wait_until(STOP_BOUND, Duration::from_millis(20), || {
        child.try_wait().ok().flatten()
    });
    status.unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no exit within {STOP_BOUND:?} after {sig}")
    })
}

/// A node's `/status` on `http_port`, when it answers 200 with JSON.
pub fn status(http_port: u16) -> Option<Value> {
    let (code, body) = http_get(http_port, "/status")?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Waits (up to `timeout`) until the node on `http_port` says it is admin; fails the test with
/// the node's `log` otherwise.
pub fn wait_admin(http_port: u16, timeout: Duration, log: &Path) -> Value {
    wait_until(timeout, Duration::from_millis(50), || {
        status(http_port).filter(|s| s["role"] == "admin")
    })
    .unwrap_or_else(|| panic!("no admin within {timeout:?}:\n{}", read(log)))
}

/// A file's text, or empty when it cannot be read.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Runs `bin` with `args` to completion, capturing its output. A run that is still going after
/// 30 s is killed (and the test fails on its output), so a wrongly healthy node cannot hang it.
pub fn run_chorus(bin: &Path, args: &[&str]) -> Output {
    run_chorus_env(bin, args, &[])
}

/// [`run_chorus`] with the extra environment variables `env`.
pub fn run_chorus_env(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(bin)
        .args(args)
        .env("CHORUS_TOKEN", test_token())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chorus runs");
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    });
    let out = child.wait_with_output().expect("chorus output");
    let _ = done_tx.send(());
    let _ = watchdog.join();
    out
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig);
}

/// One HTTP/1.1 GET on loopback; `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at(std::net::SocketAddr::from(([127, 0, 0, 1], port)), path)
}

/// One HTTP/1.1 GET to `addr`; `None` when nothing answers.
pub fn http_get_at(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Authorization: Bearer {}\r\n\r\n",
        addr.ip(),
        test_token()
    )
    .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// One HTTP/1.1 request on loopback with exactly the headers given — none added, the test
/// token neither (what a web page or a stranger sends). (status, body); `None` when nothing
/// answers with HTTP.
pub fn http_exact(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, String)> {
    http_exact_bytes(port, method, path, headers, body.as_bytes())
}

/// [`http_exact`] with a body of any bytes (an archive, say).
pub fn http_exact_bytes(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .ok()?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// One HTTP/1.1 request with an optional JSON body on loopback; `None` when nothing answers.
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<(u16, String)> {
    http_request_at(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        method,
        path,
        body,
    )
}

/// One HTTP/1.1 request with an optional JSON body to `addr`; `None` when nothing answers.
pub fn http_request_at(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .ok()?;
    let body = body.unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Authorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        addr.ip(),
        test_token(),
        body.len()
    )
    .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// Containers (any state) labelled as node `node`'s sandboxes, by `docker ps -a`.
pub fn containers_of(node: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label=io.chorus.node={node}"),
        ])
        .output()
        .expect("docker ps runs");
    assert!(out.status.success(), "docker ps: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A node's log file, opened to append (a restarted process goes on where the last stopped).
pub fn append_to(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("log file")
}

/// Polls `f` every `every` until it returns `Some` or `timeout` passes.
pub fn wait_until<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}
