//! `vs-etcd`: CHORUS beside etcd on this machine (issue 36). Five etcd members and five `chorus`
//! nodes on loopback; faults interleaved (an etcd round, then a CHORUS round, …); for each, the
//! time until every live member names the same new leader, polled every 5 ms.
//!
//! Measures: `kill -9` of the leader, a graceful stop (SIGTERM) of the leader, a cold start
//! of all five, and what the members send each other while idle at the same heartbeat: TCP
//! payload (the kernel's `bytes_sent` per connection, as `ss -ti` shows it) and IP bytes and
//! packets (an nftables counter on loopback over the members' peer ports; needs root and
//! `nft`). Without `etcd` on PATH (Debian: `sudo apt-get install -y etcd-server
//! etcd-client`) it says so and measures CHORUS only, exiting 0.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chorus_tests::{http_exact, Cluster, Timings};
use clap::Parser;

/// Poll period for leader views.
const POLL: Duration = Duration::from_millis(5);
/// Bound on waiting for any agreement.
const AGREE_BOUND: Duration = Duration::from_secs(60);
/// Members per system.
const MEMBERS: usize = 5;

#[derive(Parser)]
#[command(
    about = "CHORUS beside etcd: leader failover and cold start, 5 members each on loopback",
    after_help = "Needs `etcd` on PATH (Debian: sudo apt-get install -y etcd-server etcd-client); \
                  without it, or with --chorus-only, only CHORUS is measured (exit 0)."
)]
struct Args {
    /// Rounds of each measure, per system and timing.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Election timeouts in seconds (CHORUS: min..1.5×min, heartbeat min/3; etcd: election =
    /// min, heartbeat = min/5).
    #[arg(long, value_delimiter = ',', default_value = "0.9,3")]
    timeouts: Vec<f64>,
    /// Skip etcd.
    #[arg(long)]
    chorus_only: bool,
    /// Seconds of idle traffic counted per system and timing (0: not measured).
    #[arg(long, default_value_t = 20)]
    idle_secs: u64,
    /// Print the results as JSON too.
    #[arg(long)]
    json: bool,
    /// The `chorus` binary (default: `chorus-e2e` next to this program).
    #[arg(long)]
    chorus: Option<PathBuf>,
    /// The measures to take, in this order.
    #[arg(long, value_delimiter = ',', default_value = "kill,term,cold")]
    measures: Vec<Measure>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Measure {
    Kill,
    Term,
    Cold,
}

impl Measure {
    fn label(self) -> &'static str {
        match self {
            Measure::Kill => "`kill -9` of the leader",
            Measure::Term => "graceful stop (SIGTERM)",
            Measure::Cold => "cold start, all five at once",
        }
    }
}

/// A system under test.
trait System {
    /// (leader's index) once every running member names the same leader, itself running.
    fn agreed(&self) -> Option<usize>;
    fn kill(&mut self, i: usize);
    fn term(&mut self, i: usize);
    fn restart(&mut self, i: usize);
    /// Stops everything and starts all five fresh; returns when they are spawned.
    fn cold(&mut self);
    /// The TCP ports the members talk to each other on (not their client ports).
    fn peer_ports(&self) -> Vec<u16>;
}

/// Counts the bytes and packets of TCP between peer ports on loopback (an nftables table of
/// its own, removed on drop). A packet counts once whether one or both ends are peer ports.
struct WireCounter {
    table: String,
}

impl WireCounter {
    fn install(ports: &[u16]) -> Result<WireCounter, String> {
        let table = format!("vs_etcd_{}", std::process::id());
        let set = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let script = format!(
            "table inet {table} {{\n\
               set peers {{ type inet_service; elements = {{ {set} }} }}\n\
               chain out {{ type filter hook output priority 0; policy accept;\n\
                 oifname \"lo\" tcp sport @peers counter name wire accept\n\
                 oifname \"lo\" tcp dport @peers counter name wire accept\n\
               }}\n\
               counter wire {{ }}\n\
             }}\n"
        );
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &table])
            .output();
        nft(&script)?;
        Ok(WireCounter { table })
    }

    /// (bytes, packets) counted so far.
    fn read(&self) -> Option<(u64, u64)> {
        let out = Command::new("nft")
            .args(["list", "counter", "inet", &self.table, "wire"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let after = |word: &str| -> Option<u64> {
            let rest = &text[text.find(word)? + word.len()..];
            rest.split_whitespace().next()?.parse().ok()
        };
        Some((after("bytes ")?, after("packets ")?))
    }
}

impl Drop for WireCounter {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .output();
    }
}

fn nft(script: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())
        .map_err(|e| format!("nft: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// TCP payload sent so far on each established connection with a peer port at either end, by
/// (local, remote) address: the kernel's own `bytes_sent` (`ss -ti`, as an operator would read
/// it), which leaves out the IP and TCP headers the [`WireCounter`] counts. Both ends of a
/// loopback connection are listed, each with what it sent.
fn payload_sent(ports: &[u16]) -> Result<BTreeMap<(String, String), u64>, String> {
    let filter = ports
        .iter()
        .map(|p| format!("sport = :{p} or dport = :{p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let out = Command::new("ss")
        .args(["-tinH", "state", "established"])
        .arg(format!("( {filter} )"))
        .output()
        .map_err(|e| format!("ss: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ss: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Each socket is a line of addresses (Recv-Q Send-Q Local Peer) and, indented, its info.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sent = BTreeMap::new();
    let mut socket: Option<(String, String)> = None;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with(char::is_whitespace) && words.len() >= 4 {
            socket = Some((words[2].to_owned(), words[3].to_owned()));
            continue;
        }
        let Some(key) = socket.take() else { continue };
        let bytes = words
            .iter()
            .find_map(|w| w.strip_prefix("bytes_sent:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        sent.insert(key, bytes);
    }
    Ok(sent)
}

/// What the members of a system send each other while idle, per second.
#[derive(Clone, Copy, Debug)]
struct Idle {
    /// IP packets' bytes (headers included), from the nftables counter.
    wire: f64,
    packets: f64,
    /// TCP payload (`bytes_sent`), headers left out.
    payload: f64,
}

/// What the members of `sys` send each other over `secs` seconds once they agree and have
/// settled. A connection that closes within the window is left out of the payload (none does
/// in an idle cluster); one that opens counts from its start.
fn idle_wire(sys: &dyn System, secs: u64) -> Result<Idle, String> {
    wait_agreed(sys, AGREE_BOUND).ok_or("no agreement")?;
    std::thread::sleep(Duration::from_secs(3));
    let ports = sys.peer_ports();
    let counter = WireCounter::install(&ports)?;
    let (b0, p0) = counter.read().ok_or("the counter does not read")?;
    let sent0 = payload_sent(&ports)?;
    std::thread::sleep(Duration::from_secs(secs));
    let (b1, p1) = counter.read().ok_or("the counter does not read")?;
    let sent1 = payload_sent(&ports)?;
    let payload: u64 = sent1
        .iter()
        .map(|(k, n)| n.saturating_sub(sent0.get(k).copied().unwrap_or(0)))
        .sum();
    let s = secs as f64;
    Ok(Idle {
        wire: (b1 - b0) as f64 / s,
        packets: (p1 - p0) as f64 / s,
        payload: payload as f64 / s,
    })
}

fn wait_agreed(sys: &dyn System, bound: Duration) -> Option<usize> {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if let Some(l) = sys.agreed() {
            return Some(l);
        }
        std::thread::sleep(POLL);
    }
    None
}

/// One round of `m`: seconds from the fault to agreement on a new leader. Each poll's duration
/// after the fault goes to `polls` (seconds): a measure is only as fine as one poll.
fn round(sys: &mut dyn System, m: Measure, polls: &mut Vec<f64>) -> Option<f64> {
    match m {
        Measure::Cold => {
            let t0 = Instant::now();
            sys.cold();
            wait_agreed(sys, AGREE_BOUND)?;
            Some(t0.elapsed().as_secs_f64())
        }
        Measure::Kill | Measure::Term => {
            let old = wait_agreed(sys, AGREE_BOUND)?;
            let t0 = Instant::now();
            if m == Measure::Kill {
                sys.kill(old);
            } else {
                sys.term(old);
            }
            let deadline = t0 + AGREE_BOUND;
            let mut took = None;
            while Instant::now() < deadline {
                let asked = Instant::now();
                let agreed = sys.agreed();
                polls.push(asked.elapsed().as_secs_f64());
                if agreed.is_some_and(|l| l != old) {
                    took = Some(t0.elapsed().as_secs_f64());
                    break;
                }
                std::thread::sleep(POLL);
            }
            sys.restart(old);
            wait_agreed(sys, AGREE_BOUND)?;
            // Let the restarted member settle before the next fault.
            std::thread::sleep(Duration::from_millis(500));
            took
        }
    }
}

// ---- CHORUS ----

struct Chorus {
    bin: String,
    timings: Timings,
    cluster: Option<Cluster>,
    /// A node sent SIGTERM and not yet reaped: no longer asked (it may still answer while it
    /// shuts down, as an etcd member does).
    stopping: Option<usize>,
}

impl Chorus {
    fn new(bin: String, timeout_s: f64) -> Chorus {
        let min = (timeout_s * 1000.0) as u64;
        let timings = Timings {
            heartbeat_ms: min / 3,
            election_min_ms: min,
            election_max_ms: min * 3 / 2,
            discovery_ms: 2_000,
        };
        let mut c = Chorus {
            bin,
            timings,
            cluster: None,
            stopping: None,
        };
        c.cold();
        c
    }
}

impl System for Chorus {
    fn agreed(&self) -> Option<usize> {
        let c = self.cluster.as_ref()?;
        let mut seen: Option<(String, u64)> = None;
        let mut ids = Vec::new();
        for i in (0..c.nodes.len()).filter(|i| c.is_up(*i) && self.stopping != Some(*i)) {
            let s = c.status(i)?;
            let view = (s["admin"].as_str()?.to_owned(), s["term"].as_u64()?);
            if seen.as_ref().is_some_and(|v| *v != view) {
                return None;
            }
            seen = Some(view);
            ids.push((i, s["node_id"].as_str()?.to_owned(), s["role"].clone()));
        }
        let (admin, _) = seen?;
        ids.iter()
            .find(|(_, id, role)| *id == admin && role == "admin")
            .map(|(i, _, _)| *i)
    }
    fn kill(&mut self, i: usize) {
        if let Some(c) = &mut self.cluster {
            c.kill(i);
        }
    }
    fn term(&mut self, i: usize) {
        if let Some(c) = &mut self.cluster {
            c.signal_term(i);
            self.stopping = Some(i);
        }
    }
    fn restart(&mut self, i: usize) {
        self.stopping = None;
        if let Some(c) = &mut self.cluster {
            if c.is_up(i) && c.wait_exit(i, Duration::from_secs(15)).is_none() {
                c.kill(i);
            }
            c.start_node(i);
        }
    }
    fn cold(&mut self) {
        self.cluster = None;
        self.cluster = Some(Cluster::start(&self.bin, MEMBERS, self.timings));
    }
    fn peer_ports(&self) -> Vec<u16> {
        self.cluster
            .as_ref()
            .map_or(Vec::new(), |c| c.nodes.iter().map(|n| n.p2p_port).collect())
    }
}

// ---- etcd ----

struct Etcd {
    root: tempfile::TempDir,
    generation: usize,
    heartbeat_ms: u64,
    election_ms: u64,
    base_port: u16,
    children: Vec<Option<Child>>,
    /// A member sent SIGTERM and not yet reaped: no longer asked.
    stopping: Option<usize>,
}

impl Etcd {
    fn new(timeout_s: f64, base_port: u16) -> Etcd {
        let election_ms = (timeout_s * 1000.0) as u64;
        Etcd::with(election_ms / 5, election_ms, base_port)
    }
    fn with(heartbeat_ms: u64, election_ms: u64, base_port: u16) -> Etcd {
        let mut e = Etcd {
            root: tempfile::Builder::new()
                .prefix("vs-etcd-")
                .tempdir()
                .expect("temp dir"),
            generation: 0,
            heartbeat_ms,
            election_ms,
            base_port,
            children: (0..MEMBERS).map(|_| None).collect(),
            stopping: None,
        };
        e.cold();
        e
    }
    fn client_port(&self, i: usize) -> u16 {
        self.base_port + 2 * i as u16
    }
    fn peer_port(&self, i: usize) -> u16 {
        self.base_port + 2 * i as u16 + 1
    }
    fn spawn(&mut self, i: usize) {
        let dir = self.root.path().join(format!("g{}-m{i}", self.generation));
        let cluster: Vec<String> = (0..MEMBERS)
            .map(|j| format!("m{j}=http://127.0.0.1:{}", self.peer_port(j)))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join(format!("m{i}.log")))
            .expect("log");
        let client = format!("http://127.0.0.1:{}", self.client_port(i));
        let peer = format!("http://127.0.0.1:{}", self.peer_port(i));
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(&dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &format!("vs{}", self.generation)])
            .args(["--heartbeat-interval", &self.heartbeat_ms.to_string()])
            .args(["--election-timeout", &self.election_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.children[i] = Some(child);
    }
    /// (this member's id, its leader's id) from the gRPC gateway.
    fn view(&self, i: usize) -> Option<(String, String)> {
        let (code, body) = http_exact(
            self.client_port(i),
            "POST",
            "/v3/maintenance/status",
            &[("Host", "127.0.0.1"), ("Content-Type", "application/json")],
            "{}",
        )?;
        (code == 200).then_some(())?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let id = v["header"]["member_id"].as_str()?.to_owned();
        let leader = v["leader"].as_str()?.to_owned();
        (leader != "0").then_some((id, leader))
    }
    fn stop_all(&mut self) {
        for c in self.children.iter_mut() {
            if let Some(mut c) = c.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl System for Etcd {
    fn agreed(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader: Option<String> = None;
        for i in 0..MEMBERS {
            if self.children[i].is_none() || self.stopping == Some(i) {
                continue;
            }
            let (id, l) = self.view(i)?;
            if leader.as_ref().is_some_and(|x| *x != l) {
                return None;
            }
            leader = Some(l);
            ids.push((i, id));
        }
        let leader = leader?;
        ids.iter().find(|(_, id)| *id == leader).map(|(i, _)| *i)
    }
    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    fn term(&mut self, i: usize) {
        if let Some(c) = &self.children[i] {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            self.stopping = Some(i);
        }
    }
    fn restart(&mut self, i: usize) {
        if self.stopping.take() == Some(i) {
            if let Some(mut c) = self.children[i].take() {
                let _ = c.wait();
            }
        }
        self.kill(i);
        self.spawn(i);
    }
    fn cold(&mut self) {
        self.stop_all();
        self.generation += 1;
        for i in 0..MEMBERS {
            self.spawn(i);
        }
    }
    fn peer_ports(&self) -> Vec<u16> {
        (0..MEMBERS).map(|i| self.peer_port(i)).collect()
    }
}

fn etcd_on_path() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs Debian's `etcd-server` with apt-get (which needs root); whether etcd is then on
/// PATH.
fn install_etcd() -> bool {
    // Without root the install fails and says so on stderr.
    if Command::new("apt-get").arg("--version").output().is_err() {
        return false;
    }
    eprintln!("vs-etcd: installing etcd-server from Debian's packages");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let installed = apt(&[
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        "etcd-server",
    ]) || (apt(&["update", "-qq"])
        && apt(&[
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "etcd-server",
        ]));
    installed && etcd_on_path()
}

/// (p50, p90, max) of `xs`, nearest rank.
fn summary(xs: &[f64]) -> Option<(f64, f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some((at(0.5), at(0.9), v[v.len() - 1]))
}

fn fmt3(s: Option<(f64, f64, f64)>) -> String {
    s.map_or("—".into(), |(a, b, c)| {
        format!("{a:.3} / {b:.3} / {c:.3} s")
    })
}

fn main() {
    let args = Args::parse();
    let bin = args
        .chorus
        .clone()
        .unwrap_or_else(|| {
            std::env::current_exe()
                .expect("own path")
                .with_file_name("chorus-e2e")
        })
        .to_string_lossy()
        .into_owned();
    let with_etcd = !args.chorus_only && (etcd_on_path() || install_etcd());
    if !args.chorus_only && !with_etcd {
        println!(
            "vs-etcd: `etcd` is not on PATH and could not be installed; measuring CHORUS only. \
             Install it with: sudo apt-get install -y etcd-server etcd-client"
        );
    }
    // (measure, timeout) → (etcd samples, chorus samples, etcd polls, chorus polls)
    type Row = (Measure, f64, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut rows: Vec<Row> = Vec::new();
    // timeout → (etcd, chorus) idle (bytes/s, packets/s)
    type Wire = Option<Result<Idle, String>>;
    let mut wire: Vec<(f64, Wire, Wire)> = Vec::new();
    for (ti, &t) in args.timeouts.iter().enumerate() {
        let min_ms = (t * 1000.0) as u64;
        eprintln!(
            "vs-etcd: timeouts {t} s — CHORUS heartbeat {} ms, election {}..{} ms; \
             etcd --heartbeat-interval {} --election-timeout {}",
            min_ms / 3,
            min_ms,
            min_ms * 3 / 2,
            min_ms / 5,
            min_ms
        );
        let mut chorus = Chorus::new(bin.clone(), t);
        let mut etcd = with_etcd.then(|| Etcd::new(t, 23_790 + 20 * ti as u16));
        for &m in &args.measures {
            let (mut es, mut cs) = (Vec::new(), Vec::new());
            let (mut ep, mut cp) = (Vec::new(), Vec::new());
            for r in 0..args.rounds {
                if let Some(e) = etcd.as_mut() {
                    eprint!(
                        "\r{} {t} s round {}/{}: etcd   ",
                        m.label(),
                        r + 1,
                        args.rounds
                    );
                    match round(e, m, &mut ep) {
                        Some(x) => es.push(x),
                        None => eprintln!("\netcd: no agreement within {AGREE_BOUND:?}"),
                    }
                }
                eprint!(
                    "\r{} {t} s round {}/{}: chorus ",
                    m.label(),
                    r + 1,
                    args.rounds
                );
                match round(&mut chorus, m, &mut cp) {
                    Some(x) => cs.push(x),
                    None => eprintln!("\nchorus: no agreement within {AGREE_BOUND:?}"),
                }
            }
            eprintln!();
            rows.push((m, t, es, cs, ep, cp));
        }
        if args.idle_secs > 0 {
            eprintln!("idle traffic {t} s: {} s of each", args.idle_secs);
            // At CHORUS's heartbeat tempo (etcd's election timeout must be 5 heartbeats).
            drop(etcd.take());
            let beat = min_ms / 3;
            let e = with_etcd.then(|| {
                let e = Etcd::with(beat, 5 * beat, 23_790 + 20 * ti as u16 + 10);
                idle_wire(&e, args.idle_secs)
            });
            let c = Some(idle_wire(&chorus, args.idle_secs));
            wire.push((t, e, c));
        }
    }
    println!(
        "| measure | timeouts | etcd p50 / p90 / max | CHORUS p50 / p90 / max | CHORUS / etcd | \
         one poll, p50: etcd / CHORUS |"
    );
    println!("|---|---|---|---|---|---|");
    let mut json = Vec::new();
    for (m, t, es, cs, ep, cp) in rows.iter().filter(|_| args.rounds > 0) {
        let (e, c) = (summary(es), summary(cs));
        let ratio = match (e, c) {
            (Some(e), Some(c)) => format!("{:.2} / {:.2} / {:.2}", c.0 / e.0, c.1 / e.1, c.2 / e.2),
            _ => "—".into(),
        };
        let poll = |p: &[f64]| summary(p).map_or("—".into(), |s| format!("{:.1} ms", s.0 * 1e3));
        println!(
            "| {} | {t} s | {} | {} | {ratio} | {} / {} |",
            m.label(),
            fmt3(e),
            fmt3(c),
            poll(ep),
            poll(cp)
        );
        json.push(serde_json::json!({
            "measure": format!("{m:?}").to_lowercase(),
            "timeout_s": t,
            "etcd_s": es,
            "chorus_s": cs,
        }));
    }
    if !wire.is_empty() {
        println!();
        println!(
            "| idle, between members, heartbeat = timeout / 3 both | timeouts | etcd | CHORUS | \
             CHORUS / etcd |"
        );
        println!("|---|---|---|---|---|");
        let cell = |w: &Wire, f: fn(&Idle) -> String| match w {
            None => "—".to_owned(),
            Some(Ok(i)) => f(i),
            Some(Err(e)) => format!("not measured: {e}"),
        };
        for (t, e, c) in &wire {
            let ok = |w: &Wire| w.as_ref().and_then(|r| r.as_ref().ok()).copied();
            let (eo, co) = (ok(e), ok(c));
            let ratio = |f: fn(&Idle) -> f64| match (eo, co) {
                (Some(e), Some(c)) => format!("{:.2}", f(&c) / f(&e)),
                _ => "—".into(),
            };
            println!(
                "| TCP payload (`ss -ti` bytes_sent), B/s | {t} s | {} | {} | **{}** |",
                cell(e, |i| format!("{:.0}", i.payload)),
                cell(c, |i| format!("{:.0}", i.payload)),
                ratio(|i| i.payload)
            );
            println!(
                "| IP bytes on loopback, B/s (packets/s) | {t} s | {} | {} | {} ({}) |",
                cell(e, |i| format!("{:.0} ({:.1})", i.wire, i.packets)),
                cell(c, |i| format!("{:.0} ({:.1})", i.wire, i.packets)),
                ratio(|i| i.wire),
                ratio(|i| i.packets)
            );
            json.push(serde_json::json!({
                "measure": "idle_wire",
                "timeout_s": t,
                "heartbeat_ms": (t * 1000.0) as u64 / 3,
                "etcd_bytes_per_s": eo.map(|x| x.wire),
                "chorus_bytes_per_s": co.map(|x| x.wire),
                "etcd_payload_per_s": eo.map(|x| x.payload),
                "chorus_payload_per_s": co.map(|x| x.payload),
            }));
        }
    }
    if args.json {
        println!("{}", serde_json::Value::Array(json));
    }
}
