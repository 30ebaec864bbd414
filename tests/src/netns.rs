//! Real `chorus run` processes, each on its own host — a network namespace with its own address
//! — and faults applied from outside, the way they happen: links cut (nftables in the sender's
//! namespace), packets lost, processes killed (`SIGKILL`) or paused (`SIGSTOP`). Every fault is
//! written to a journal on the host's monotonic clock, and [`NetCluster::check`] ends a run by
//! merging the nodes' logs with it (`chorus replay` of several data directories) and judging
//! the result with the simulator's checker (docs/design.md §5).
//!
//! Topology: the nodes' namespaces hang off one bridge in a namespace of its own (the "switch":
//! a fresh namespace has an empty firewall, whatever the host's forwarding policy), and the
//! test process reaches their HTTP APIs over one more link into it. Traffic only ever goes to
//! addresses this harness made. Needs root (network namespaces), `ip` and `nft`.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::{wait_until, Timings, Value};

/// The libp2p and HTTP ports every node uses (each namespace has its own ports).
const P2P_PORT: u16 = 7946;
const HTTP_PORT: u16 = 8080;

/// The host's monotonic clock, ms (what the nodes' clock anchors use).
pub fn monotonic_ms() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    (t.tv_sec() as u64) * 1000 + (t.tv_nsec() as u64) / 1_000_000
}

/// Runs a command that must succeed (setting up or changing the network).
fn run(cmd: &mut Command) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (the fault harness needs iproute2 and nftables: `apt-get install iproute2 nftables`)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{} (the fault harness needs root for network namespaces)",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command that must succeed; returns what it printed.
fn output(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// Runs an nft script inside namespace `ns`.
fn nft(ns: &str, script: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("nft script");
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft in {ns} failed: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One node: its namespace, address, data directory and process.
pub struct NetNode {
    pub ns: String,
    pub addr: Ipv4Addr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    /// Its peer id, once it has answered once.
    pub id: String,
    child: Option<Child>,
    paused: bool,
    timings: Timings,
    env: Vec<(String, String)>,
    /// Whether its data directory is a tmpfs mount of its own.
    mounted: bool,
    /// Extra `chorus run` arguments.
    args: Vec<String>,
}

/// How one node is started (see [`NetCluster::start_with`]).
#[derive(Clone, Debug)]
pub struct NodeSetup {
    pub timings: Timings,
    /// Extra environment variables (e.g. a deliberately broken build's `CHORUS_FAULT`).
    pub env: Vec<(String, String)>,
    /// Put the data directory on a tmpfs of this many MiB, so the test can fill it
    /// ([`NetCluster::fill_disk`]).
    pub disk_mib: Option<u32>,
    /// Extra `chorus run` arguments (e.g. `--docker` to run tasks).
    pub args: Vec<String>,
}

impl NodeSetup {
    /// A node with `timings` and nothing else set.
    pub fn plain(timings: Timings) -> NodeSetup {
        NodeSetup {
            timings,
            env: Vec::new(),
            disk_mib: None,
            args: Vec::new(),
        }
    }
}

/// One node's footprint at a moment (see [`NetCluster::resources`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeResources {
    /// Resident memory, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// Bytes in its data directory (the event log and what goes with it).
    pub data_bytes: u64,
}

/// The bytes of every file under `dir`, recursively (0 for what cannot be read).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// N nodes on their own hosts. Dropping it kills every process and removes the namespaces.
pub struct NetCluster {
    bin: PathBuf,
    root: tempfile::TempDir,
    tag: String,
    switch: String,
    pub nodes: Vec<NetNode>,
    /// Directed links cut (from, to), and the percentage of packets lost on every link.
    cut: std::collections::BTreeSet<(usize, usize)>,
    loss_percent: u32,
    journal: PathBuf,
    keep: bool,
    /// The test process's own address on the switch (its traffic is never delayed).
    host: Ipv4Addr,
    delay: Option<(u64, u64, crate::delay::Delayer)>,
    /// Faults applied and healed so far, by kind (for the summary).
    faults: std::collections::BTreeMap<&'static str, u64>,
}

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

impl NetCluster {
    /// Starts `n` voters, each in its own namespace, bootstrapping off each other
    /// (bootstrap-expect `n`), and waits until each has answered once.
    pub fn start(bin: &str, n: usize, timings: Timings) -> NetCluster {
        NetCluster::start_with(bin, n, |_| NodeSetup::plain(timings))
    }

    /// [`NetCluster::start`], node `i` started as `setup(i)` says.
    pub fn start_with(bin: &str, n: usize, setup: impl Fn(usize) -> NodeSetup) -> NetCluster {
        let mut cluster = NetCluster::hosts(bin, n, setup);
        cluster.start_nodes();
        cluster
    }

    /// Starts every node (on hosts made by [`NetCluster::hosts`], whose network may already
    /// be degraded) and waits until each has answered once.
    pub fn start_nodes(&mut self) {
        for i in 0..self.nodes.len() {
            self.spawn(i);
        }
        for i in 0..self.nodes.len() {
            self.wait_answering(i);
        }
    }

    /// The hosts and their network, no node started yet (see [`NetCluster::start_nodes`]).
    pub fn hosts(bin: &str, n: usize, setup: impl Fn(usize) -> NodeSetup) -> NetCluster {
        assert!((1..=200).contains(&n));
        let k = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        // Unique among this process's clusters and unlikely to meet another process's.
        let pid = std::process::id();
        let tag = format!("{}{}", pid % 100_000, k % 10);
        let net = [10, 200 + (pid % 50) as u8, (k % 250) as u8];
        let root = tempfile::Builder::new()
            .prefix("chorus-netns-")
            .tempdir()
            .expect("temp dir");
        let switch = format!("chsw{tag}");
        let mut cluster = NetCluster {
            bin: PathBuf::from(bin),
            journal: root.path().join("faults.jsonl"),
            root,
            switch: switch.clone(),
            tag: tag.clone(),
            nodes: Vec::new(),
            cut: Default::default(),
            loss_percent: 0,
            keep: false,
            host: Ipv4Addr::new(net[0], net[1], net[2], 254),
            delay: None,
            faults: Default::default(),
        };
        ip(&["netns", "add", &switch]);
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        // The test process's own link into the switch, for the HTTP APIs.
        let host_if = format!("chh{tag}");
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", "host", "netns", &switch,
        ]);
        ip(&["-n", &switch, "link", "set", "host", "master", "br0", "up"]);
        let host_addr = format!("{}.{}.{}.254/24", net[0], net[1], net[2]);
        ip(&["addr", "add", &host_addr, "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        for i in 0..n {
            let ns = format!("ch{tag}n{i}");
            let addr = Ipv4Addr::new(net[0], net[1], net[2], (i + 1) as u8);
            ip(&["netns", "add", &ns]);
            let port = format!("p{i}");
            ip(&[
                "-n", &switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ]);
            ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            let data_dir = cluster.root.path().join(format!("n{i}"));
            let disk = setup(i).disk_mib;
            if let Some(mib) = disk {
                std::fs::create_dir_all(&data_dir).expect("data dir");
                run(Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                    .arg(&data_dir));
            }
            cluster.nodes.push(NetNode {
                ns,
                addr,
                mounted: disk.is_some(),
                data_dir,
                log: cluster.root.path().join(format!("n{i}.log")),
                id: String::new(),
                child: None,
                paused: false,
                timings: setup(i).timings,
                env: setup(i).env,
                args: setup(i).args,
            });
        }
        cluster
    }

    /// Keep the data directories, logs, journal and merged trace when dropped.
    pub fn keep_data(&mut self) {
        self.keep = true;
    }

    /// The temporary directory (data directories, node logs, the journal).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    fn spawn(&mut self, i: usize) {
        let node = &self.nodes[i];
        let t = node.timings;
        assert!(node.child.is_none(), "n{i} is already running");
        let log = crate::append_to(&node.log);
        // Off loopback a node admits only holders of the cluster's key (issue 33).
        let psk = self.root.path().join("swarm.key");
        if !psk.exists() {
            chorus_node::cli::psk::generate(&psk).expect("a cluster key");
        }
        // `nsenter`, not `ip netns exec`: that one also remounts /sys for the namespace, which
        // hides the host's cgroup tree from the node (its sandboxes' OOM counters among it),
        // where a production node sees it.
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/var/run/netns/{}", node.ns))
            .arg("--")
            .arg(&self.bin)
            .arg("run")
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(["--listen", &format!("/ip4/{}/tcp/{P2P_PORT}", node.addr)])
            .args(["--http", &format!("{}:{HTTP_PORT}", node.addr)])
            // The harness's client speaks plain HTTP; the namespaces are the test's own.
            .args(["--http-tls", "off"])
            .args(["--bootstrap-expect", &self.nodes.len().to_string()])
            .args(["--no-mdns", "--cluster-id", "real", "--exit-with-parent"])
            .args(t.run_args())
            .arg("--acl-key-file")
            .arg(crate::test_acl_key_file())
            .arg("--psk-file")
            .arg(&psk)
            .args(&node.args);
        for (j, other) in self.nodes.iter().enumerate() {
            if j != i {
                cmd.args([
                    "--bootstrap",
                    &format!("/ip4/{}/tcp/{P2P_PORT}", other.addr),
                ]);
            }
        }
        // CHORUS_NODE_LOG widens the nodes' log for a post-mortem (a `RUST_LOG` filter).
        let filter = std::env::var("CHORUS_NODE_LOG").unwrap_or_else(|_| "info,libp2p=warn".into());
        cmd.env("RUST_LOG", filter)
            .envs(node.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        // `nsenter` execs the program: the child is the node itself.
        self.nodes[i].child = Some(cmd.spawn().expect("chorus run starts"));
    }

    fn wait_answering(&mut self, i: usize) {
        let status = wait_until(crate::START_BOUND, Duration::from_millis(50), || {
            self.assert_injectors();
            if let Some(Ok(Some(st))) = self.nodes[i].child.as_mut().map(Child::try_wait) {
                panic!(
                    "n{i} exited ({st}) at start:\n{}",
                    crate::read(&self.nodes[i].log)
                );
            }
            self.status(i)
        })
        .unwrap_or_else(|| panic!("n{i} never answered:\n{}", crate::read(&self.nodes[i].log)));
        self.nodes[i].id = status["node_id"].as_str().expect("node_id").to_owned();
    }

    /// Node `i`'s `/status`, if it runs, is not paused and answers.
    pub fn status(&self, i: usize) -> Option<Value> {
        let node = &self.nodes[i];
        if node.child.is_none() || node.paused {
            return None;
        }
        let (code, body) = crate::http_get_at(SocketAddr::from((node.addr, HTTP_PORT)), "/status")?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// One HTTP request to node `i`'s API; `None` when it does not answer.
    pub fn http(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Option<(u16, String)> {
        let addr = SocketAddr::from((self.nodes[i].addr, HTTP_PORT));
        crate::http_request_at(addr, method, path, body)
    }

    /// Submits a task at node `i` (`POST /tasks`); returns its id.
    pub fn submit(&self, i: usize, spec: &Value) -> String {
        let (code, body) = self
            .http(i, "POST", "/tasks", Some(&spec.to_string()))
            .unwrap_or_else(|| panic!("n{i} does not answer a submit"));
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["task"]
            .as_str()
            .unwrap_or_else(|| panic!("n{i}: submit answered {code}: {body}"))
            .to_owned()
    }

    /// Task `id` as its submitter, node `i`, reports it (`GET /tasks/{id}`).
    pub fn task(&self, i: usize, id: &str) -> Option<Value> {
        let (code, body) = self.http(i, "GET", &format!("/tasks/{id}"), None)?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// Node `i`'s process and data directory now (`None` when it does not run): what a soak
    /// watches for growth.
    pub fn resources(&self, i: usize) -> Option<NodeResources> {
        let pid = self.nodes[i].child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        Some(NodeResources {
            rss_kib,
            open_fds,
            data_bytes: dir_bytes(&self.nodes[i].data_dir),
        })
    }

    /// Node `i`'s process id, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// Whether node `i` runs and is not paused.
    pub fn is_live(&self, i: usize) -> bool {
        self.nodes[i].child.is_some() && !self.nodes[i].paused
    }

    /// (admin id, term, admin's index) when every live node in `among` answers and agrees, and
    /// the admin is one of them and says so.
    pub fn agreement_among(&self, among: &[usize]) -> Option<(String, u64, usize)> {
        let mut seen: Option<(String, u64)> = None;
        let mut admin_at = None;
        for &i in among.iter().filter(|i| self.is_live(**i)) {
            let s = self.status(i)?;
            let view = (s["admin"].as_str()?.to_owned(), s["term"].as_u64()?);
            if seen.as_ref().is_some_and(|v| *v != view) {
                return None;
            }
            if s["node_id"] == view.0.as_str() && s["role"] == "admin" {
                admin_at = Some(i);
            }
            seen = Some(view);
        }
        let (admin, term) = seen?;
        Some((admin, term, admin_at?))
    }

    /// [`NetCluster::agreement_among`] every node.
    pub fn agreement(&self) -> Option<(String, u64, usize)> {
        self.agreement_among(&(0..self.nodes.len()).collect::<Vec<_>>())
    }

    /// Waits until the live nodes of `among` agree on an admin among them; returns it and how
    /// long that took.
    pub fn wait_agreed_among(
        &self,
        among: &[usize],
        timeout: Duration,
    ) -> ((String, u64, usize), Duration) {
        let started = Instant::now();
        let found = wait_until(timeout, Duration::from_millis(25), || {
            self.assert_injectors();
            self.agreement_among(among)
        });
        let found = found.unwrap_or_else(|| {
            panic!(
                "no agreed admin among {among:?} within {timeout:?}; statuses: {:?}",
                among
                    .iter()
                    .map(|i| self.status(*i).map(|s| (
                        s["role"].clone(),
                        s["term"].clone(),
                        s["admin"].clone()
                    )))
                    .collect::<Vec<_>>()
            )
        });
        (found, started.elapsed())
    }

    /// [`NetCluster::wait_agreed_among`] every node.
    pub fn wait_agreed(&self, timeout: Duration) -> ((String, u64, usize), Duration) {
        self.wait_agreed_among(&(0..self.nodes.len()).collect::<Vec<_>>(), timeout)
    }

    fn journal(&self, mut line: Value) {
        use std::io::Write;
        line["at_monotonic_ms"] = Value::from(monotonic_ms());
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.journal)
            .expect("journal");
        writeln!(f, "{line}").expect("journal");
    }

    fn ids(&self, nodes: &[usize]) -> Vec<String> {
        nodes.iter().map(|i| self.nodes[*i].id.clone()).collect()
    }

    /// SIGKILL node `i` (a crash).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            self.journal(serde_json::json!({"kind": "crash", "node": self.nodes[i].id}));
            self.count("kill");
            let _ = child.kill();
            let _ = child.wait();
            self.nodes[i].paused = false;
        }
    }

    /// Fills node `i`'s data directory (a tmpfs of [`NodeSetup::disk_mib`]) to the last byte.
    pub fn fill_disk(&self, i: usize) {
        use std::io::Write;
        assert!(self.nodes[i].mounted, "n{i} has no disk of its own to fill");
        let mut f = std::fs::File::create(self.nodes[i].data_dir.join("FILL")).expect("filler");
        let block = vec![0u8; 1 << 16];
        while f.write_all(&block).is_ok() {}
        let _ = f.flush();
    }

    /// Frees what [`NetCluster::fill_disk`] took.
    pub fn free_disk(&self, i: usize) {
        std::fs::remove_file(self.nodes[i].data_dir.join("FILL")).expect("filler");
    }

    /// Waits (up to `timeout`) for node `i` to exit on its own; journals it as a crash then.
    pub fn wait_exit(&mut self, i: usize, timeout: Duration) -> std::process::ExitStatus {
        let child = self.nodes[i].child.as_mut().expect("running");
        let status = wait_until(timeout, Duration::from_millis(20), || {
            child.try_wait().ok().flatten()
        })
        .unwrap_or_else(|| panic!("n{i} did not exit within {timeout:?}"));
        self.nodes[i].child = None;
        self.journal(serde_json::json!({"kind": "crash", "node": self.nodes[i].id}));
        status
    }

    /// Starts node `i` again on its data directory; returns once it answers.
    pub fn restart(&mut self, i: usize) {
        self.count("restart");
        self.spawn(i);
        self.wait_answering(i);
    }

    fn signal(&self, i: usize, sig: Signal) {
        if let Some(child) = &self.nodes[i].child {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig)
                .expect("signal");
        }
    }

    /// SIGSTOP node `i`: to the others it is cut off (journaled as a cut both ways) until
    /// [`NetCluster::resume`].
    pub fn pause(&mut self, i: usize) {
        let others: Vec<usize> = (0..self.nodes.len()).filter(|j| *j != i).collect();
        self.journal(
            serde_json::json!({"kind": "cut", "from": [self.nodes[i].id], "to": self.ids(&others)}),
        );
        self.journal(
            serde_json::json!({"kind": "cut", "from": self.ids(&others), "to": [self.nodes[i].id]}),
        );
        self.signal(i, Signal::SIGSTOP);
        self.nodes[i].paused = true;
        self.count("pause");
    }

    /// SIGCONT node `i` (journaled as a heal).
    pub fn resume(&mut self, i: usize) {
        self.signal(i, Signal::SIGCONT);
        self.nodes[i].paused = false;
        self.journal(serde_json::json!({"kind": "heal"}));
        self.count("resume");
    }

    /// Cuts every link between different groups, both ways.
    pub fn partition(&mut self, groups: &[&[usize]]) {
        for (a, ga) in groups.iter().enumerate() {
            for (b, gb) in groups.iter().enumerate() {
                if a != b {
                    for x in *ga {
                        for y in *gb {
                            self.cut.insert((*x, *y));
                        }
                    }
                }
            }
        }
        let ids: Vec<Vec<String>> = groups.iter().map(|g| self.ids(g)).collect();
        self.journal(serde_json::json!({"kind": "partition", "groups": ids}));
        self.count("partition");
        self.apply();
    }

    /// Cuts the links from every node of `from` to every node of `to` (one way).
    pub fn cut(&mut self, from: &[usize], to: &[usize]) {
        for x in from {
            for y in to {
                if x != y {
                    self.cut.insert((*x, *y));
                }
            }
        }
        self.journal(
            serde_json::json!({"kind": "cut", "from": self.ids(from), "to": self.ids(to)}),
        );
        self.count("cut");
        self.apply();
    }

    /// Restores every link (losses stay).
    pub fn heal(&mut self) {
        self.cut.clear();
        self.apply();
        self.journal(serde_json::json!({"kind": "heal"}));
        self.count("heal");
    }

    /// Every packet between nodes is dropped with `percent` % probability, each way.
    pub fn set_loss(&mut self, percent: u32) {
        self.loss_percent = percent;
        self.journal_network();
        self.apply();
    }

    /// Every packet between nodes is held for a random `min_ms..=max_ms` (so packets also
    /// overtake each other), until [`NetCluster::clear_delay`].
    pub fn set_delay(&mut self, min_ms: u64, max_ms: u64) {
        self.set_delay_with_queue_len(min_ms, max_ms, crate::delay::QUEUE_LEN);
    }

    /// [`NetCluster::set_delay`] with each namespace's queue `queue_len` packets long (past
    /// that, packets pass undelayed: a test overflows a tiny queue).
    pub fn set_delay_with_queue_len(&mut self, min_ms: u64, max_ms: u64, queue_len: u32) {
        self.clear_delay();
        // The queues listen before the rules send packets to them: a packet queued with
        // nobody listening passes undelayed (`--queue-bypass`).
        let namespaces: Vec<String> = self.nodes.iter().map(|n| n.ns.clone()).collect();
        let delayer =
            crate::delay::Delayer::start_with_queue_len(&namespaces, min_ms, max_ms, queue_len);
        for node in &self.nodes {
            let host = self.host.to_string();
            let rules: [&[&str]; 2] = [
                &[
                    "-w", "-A", "OUTPUT", "-o", "eth0", "-d", &host, "-j", "RETURN",
                ],
                &[
                    "-w",
                    "-A",
                    "OUTPUT",
                    "-o",
                    "eth0",
                    "-j",
                    "NFQUEUE",
                    "--queue-num",
                    "0",
                    "--queue-bypass",
                ],
            ];
            for rule in rules {
                run(Command::new("ip")
                    .args(["netns", "exec", &node.ns, "iptables-legacy"])
                    .args(rule));
            }
        }
        self.delay = Some((min_ms, max_ms, delayer));
        self.journal_network();
    }

    /// How long a TCP connection from node `from`'s host to node `to`'s HTTP port takes to open
    /// (a SYN and a SYN-ACK: a round trip through whatever delay is in force).
    pub fn connect_time(&self, from: usize, to: usize) -> Duration {
        let ns = self.nodes[from].ns.clone();
        let addr = SocketAddr::from((self.nodes[to].addr, HTTP_PORT));
        std::thread::spawn(move || {
            let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("namespace");
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let started = Instant::now();
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            started.elapsed()
        })
        .join()
        .expect("connect thread")
    }

    /// `Err` naming the fault injector that stopped while its fault is meant to be in force
    /// (issue 39): a run must then fail, not go on under other conditions than it states.
    /// (The rules of cuts and losses cannot stop on their own; installing or removing one that
    /// fails panics, naming the command and namespace.)
    pub fn check_injectors(&self) -> Result<(), String> {
        match &self.delay {
            Some((_, _, d)) => d.health(),
            None => Ok(()),
        }
    }

    /// Panics on [`NetCluster::check_injectors`]'s error: every wait for the cluster checks,
    /// so a run notices a stopped injector within a poll, not at its next fault.
    fn assert_injectors(&self) {
        if let Err(e) = self.check_injectors() {
            panic!("a fault injector stopped: {e}");
        }
    }

    /// Sleeps `d`, checking the injectors as every wait does (a run paused for a fault still
    /// notices a stopped injector at once).
    pub fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            self.assert_injectors();
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }

    /// What the delaying threads did so far (`None` without a delay in force).
    pub fn delay_counts(&self) -> Option<crate::delay::DelayCounts> {
        self.delay.as_ref().map(|(_, _, d)| d.counts())
    }

    /// Stops one delaying thread as a crash would (a test's hook; see
    /// [`crate::delay::KillSwitch`]). `None` without a delay in force.
    pub fn injector_kill_switch(&self) -> Option<crate::delay::KillSwitch> {
        self.delay.as_ref().map(|(_, _, d)| d.kill_switch())
    }

    /// Packets the delay's queue rule matched in every namespace: the delayer read them, or
    /// the queue was full (or had no reader) and they went on undelayed.
    fn packets_queued(&self) -> u64 {
        self.nodes
            .iter()
            .map(|node| {
                let text = output(Command::new("ip").args([
                    "netns",
                    "exec",
                    &node.ns,
                    "iptables-legacy",
                    "-w",
                    "-L",
                    "OUTPUT",
                    "-v",
                    "-x",
                    "-n",
                ]));
                text.lines()
                    .filter(|l| l.split_whitespace().nth(2) == Some("NFQUEUE"))
                    .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    }

    /// Packets the delay's rule sent to a queue that could not take them (full, or without a
    /// reader), so they went on undelayed: the rule's count less the delayer's. The kernel
    /// counts none of them itself (a fail-open pass is not a drop).
    pub fn packets_passed_undelayed(&self) -> u64 {
        match &self.delay {
            Some((_, _, d)) => self.packets_queued().saturating_sub(d.counts().received),
            None => 0,
        }
    }

    /// Packets the nftables rules dropped in every namespace, by counter (`lost`: the loss;
    /// `cut`: cut links); 0 before any rule was applied.
    fn packets_dropped(&self, counter: &str) -> u64 {
        self.nodes
            .iter()
            .map(|node| {
                let out = Command::new("ip")
                    .args(["netns", "exec", &node.ns, "nft", "list", "counter"])
                    .args(["inet", "chorus_faults", counter])
                    .stdin(Stdio::null())
                    .output()
                    .expect("nft runs");
                // No table yet: no rule has been applied in this namespace.
                let text = String::from_utf8_lossy(&out.stdout);
                text.split_whitespace()
                    .skip_while(|w| *w != "packets")
                    .nth(1)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    fn count(&mut self, fault: &'static str) {
        *self.faults.entry(fault).or_default() += 1;
    }

    /// What each fault injector did, one line each: the delayer's holds, the packets that
    /// passed it undelayed, the packets the loss and the cuts dropped, the faults applied and
    /// healed.
    pub fn injector_summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some((min_ms, max_ms, d)) = &self.delay {
            lines.push(format!(
                "{} (delay {min_ms}..{max_ms} ms); {} passed undelayed (the queue full)",
                d.summary(),
                self.packets_passed_undelayed(),
            ));
        }
        lines.push(format!(
            "loss: {} % of the packets between nodes, {} dropped; cut links dropped {}",
            self.loss_percent,
            self.packets_dropped("lost"),
            self.packets_dropped("cut")
        ));
        let n = |k: &str| self.faults.get(k).copied().unwrap_or(0);
        lines.push(format!(
            "faults: {} partitions and {} one-way cuts applied, {} heals; {} pauses, {} resumes; {} kills, {} restarts",
            n("partition"),
            n("cut"),
            n("heal"),
            n("pause"),
            n("resume"),
            n("kill"),
            n("restart"),
        ));
        lines
    }

    /// Ends [`NetCluster::set_delay`].
    pub fn clear_delay(&mut self) {
        if self.delay.take().is_some() {
            for node in &self.nodes {
                run(Command::new("ip").args([
                    "netns",
                    "exec",
                    &node.ns,
                    "iptables-legacy",
                    "-w",
                    "-F",
                    "OUTPUT",
                ]));
            }
            self.journal_network();
        }
    }

    fn journal_network(&self) {
        self.journal(serde_json::json!({
            "kind": "network",
            "loss_ppm": self.loss_percent * 10_000,
            "duplicate_ppm": 0,
            // Random delays per packet: later packets overtake earlier ones.
            "reorder_ppm": if self.delay.is_some() { 1_000_000 } else { 0 },
        }));
    }

    /// Rewrites each namespace's rules from the cuts and the loss in force.
    fn apply(&self) {
        let all: Vec<String> = self.nodes.iter().map(|n| n.addr.to_string()).collect();
        for (i, node) in self.nodes.iter().enumerate() {
            let mut rules = String::new();
            let blocked: Vec<String> = self
                .cut
                .iter()
                .filter(|(from, _)| *from == i)
                .map(|(_, to)| self.nodes[*to].addr.to_string())
                .collect();
            if !blocked.is_empty() {
                rules += &format!(
                    "    ip daddr {{ {} }} counter name \"cut\" drop\n",
                    blocked.join(", ")
                );
            }
            if self.loss_percent > 0 {
                rules += &format!(
                    "    ip daddr {{ {} }} numgen random mod 100 < {} counter name \"lost\" drop\n",
                    all.join(", "),
                    self.loss_percent
                );
            }
            // The chain is flushed and refilled, never deleted: unregistering a hook makes
            // the kernel drop every packet the delay's queue holds in the namespace (its
            // verdicts then come back `ENOENT`), a burst of loss no run states. The named
            // counters last the run.
            nft(
                &node.ns,
                &format!(
                    "table inet chorus_faults {{\n  counter lost {{}}\n  counter cut {{}}\n  \
                     chain out {{ type filter hook output priority 0; policy accept; }}\n}}\n\
                     flush chain inet chorus_faults out\n\
                     table inet chorus_faults {{\n  chain out {{\n{rules}  }}\n}}\n"
                ),
            );
        }
    }

    /// Stops every node (SIGCONT first where paused, then SIGTERM: each logs its `Shutdown`),
    /// then merges the logs with the fault journal and checks the result against docs/design.md §5.
    /// Returns the merged trace's path and its violations, printed.
    pub fn stop_and_check(&mut self) -> (PathBuf, Vec<String>) {
        self.stop_and_check_within(None)
    }

    /// [`NetCluster::stop_and_check`], liveness judged against `bound_ms` instead of the
    /// default bound (which has no term for latency).
    pub fn stop_and_check_within(&mut self, bound_ms: Option<u64>) -> (PathBuf, Vec<String>) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused {
                self.resume(i);
            }
        }
        for i in 0..self.nodes.len() {
            self.signal(i, Signal::SIGTERM);
        }
        for i in 0..self.nodes.len() {
            if let Some(mut child) = self.nodes[i].child.take() {
                let stopped =
                    wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
                        child.try_wait().ok().flatten()
                    });
                if stopped.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        let dirs: Vec<PathBuf> = self.nodes.iter().map(|n| n.data_dir.clone()).collect();
        let trace = self.root.path().join("merged.jsonl");
        let mut out = Vec::new();
        let journal = self.journal.exists().then_some(self.journal.as_path());
        let report =
            chorus_node::merge::replay_merged(&dirs, journal, Some(&trace), None, &mut out)
                .unwrap_or_else(|e| {
                    panic!(
                        "merged replay failed: {e:#}\n{}",
                        String::from_utf8_lossy(&out)
                    )
                });
        let mut problems: Vec<String> = report
            .nodes
            .iter()
            .filter(|(_, r)| !r.ok())
            .map(|(node, r)| {
                format!(
                    "{node}: its log does not replay to what it recorded: {:?} {:?}",
                    r.mismatches, r.vote_violations
                )
            })
            .collect();
        let checked =
            chorus_sim::checker::check_file(&trace, bound_ms).expect("the merged trace reads");
        for v in &checked.violations {
            problems.push(format!(
                "{v}\n  line {}: {}",
                v.line,
                checked.quoted.get(&v.line).map_or("", String::as_str)
            ));
        }
        (trace, problems)
    }
}

impl Drop for NetCluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let Some(mut child) = node.child.take() {
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, Signal::SIGCONT);
                let _ = child.kill();
                let _ = child.wait();
            }
            if panicking {
                let text = crate::read(&node.log);
                let tail: Vec<&str> = text.lines().rev().take(25).collect();
                eprintln!("---- n{i} ({}) log (last lines) ----", node.addr);
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
            // Sandboxes a killed node left (a stopped one removes its own).
            if node.args.iter().any(|a| a == "--docker") && !node.id.is_empty() {
                for container in crate::containers_of(&node.id) {
                    let _ = Command::new("docker")
                        .args(["rm", "-f", &container])
                        .output();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", &node.ns]).status();
            if node.mounted {
                let _ = Command::new("umount").arg(&node.data_dir).status();
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &format!("chh{}", self.tag)])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch])
            .status();
        if self.keep || panicking || std::env::var_os("CHORUS_KEEP").is_some() {
            let kept = self.root.path().to_path_buf();
            eprintln!("netns cluster data kept in {}", kept.display());
            // Leak the directory on purpose, for the post-mortem.
            let root = std::mem::replace(&mut self.root, tempfile::tempdir().expect("temp dir"));
            let _ = root.keep();
        }
    }
}
