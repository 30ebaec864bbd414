//! `chorus devcluster`: N real `chorus run` processes on loopback with temporary data
//! directories and short timings, a live table of who is admin, and admin kills that show
//! (and measure) the failover: by default the admin is killed once, a few seconds after the
//! cluster settles, and restarted once a new admin is agreed.
//!
//! Ctrl-C, SIGTERM and SIGHUP all stop it the same way: every child gets SIGTERM (then SIGKILL
//! if it lingers), the temporary directory is removed, and one summary line is printed. The
//! children also watch their parent and stop on their own if devcluster dies without cleaning
//! up (SIGKILL).
//!
//! Ports: every node binds port 0, so the OS picks free ones, and devcluster reads them from the
//! node's "chorus node started" log line ([`parse_started_line`]) before starting the next node,
//! which bootstraps off the running ones. Nothing picks a port number and hopes it is still free
//! when the child binds it.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::cli::http::{get_text, request};

/// `chorus devcluster` options.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Kill the admin once the cluster has agreed on it for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub kill_admin_after: f64,
    /// How many times to kill the admin (the killed node is restarted after each failover);
    /// 0 never kills.
    #[arg(long, default_value_t = 1)]
    pub kills: usize,
    /// How to stop the admin: `kill` (SIGKILL, a crash) or `term` (SIGTERM, a graceful stop:
    /// the admin steps down and says so, and devcluster waits for it to exit).
    #[arg(long, default_value = "kill", value_parser = ["kill", "term"])]
    pub signal: String,
    /// Exit after the last kill's failover (with a summary) instead of waiting for Ctrl-C.
    #[arg(long)]
    pub exit_when_done: bool,
    /// Heartbeat interval, ms.
    #[arg(long, default_value_t = 1_000)]
    pub heartbeat_ms: u64,
    /// Election timeout window, ms.
    #[arg(long, default_value = "3000..4500")]
    pub election_timeout_ms: String,
    /// Discovery timeout, ms.
    #[arg(long, default_value_t = 2_000)]
    pub discovery_timeout_ms: u64,
    /// Keep the data directories (and logs) instead of deleting them on exit.
    #[arg(long)]
    pub keep: bool,
    /// Print one line per change instead of a table refreshed in place.
    #[arg(long)]
    pub plain: bool,
    /// Run a demo workload: the nodes run tasks in Docker sandboxes (`--docker`, warm pools of
    /// the sandbox test image, built if missing), and once the cluster agrees on an admin, N
    /// tasks are submitted through a node that is not the admin; one line per result, then a
    /// count per worker. Needs a running Docker Engine.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub demo_tasks: usize,
}

struct Node {
    index: usize,
    data_dir: PathBuf,
    /// The libp2p port the current (or last) process reported; 0 before the first start.
    p2p_port: u16,
    /// The HTTP address the current (or last) process reported.
    http: String,
    child: Option<Child>,
    /// A process sent SIGTERM/SIGKILL and not reaped yet (it may still be stepping down).
    stopping: Option<Child>,
    status: Option<Value>,
}

impl Node {
    fn field(&self, key: &str) -> Option<&Value> {
        self.status.as_ref().map(|s| &s[key])
    }
    fn role(&self) -> &str {
        self.field("role").and_then(Value::as_str).unwrap_or("-")
    }
    fn term(&self) -> u64 {
        self.field("term").and_then(Value::as_u64).unwrap_or(0)
    }
    fn admin(&self) -> Option<&str> {
        self.field("admin").and_then(Value::as_str)
    }
    fn id(&self) -> Option<&str> {
        self.field("node_id").and_then(Value::as_str)
    }
}

/// Runs the dev cluster until Ctrl-C (or the end of the kills with `--exit-when-done`).
pub async fn run(args: Args) -> anyhow::Result<()> {
    if args.nodes == 0 || args.nodes > 64 {
        bail!("--nodes must be between 1 and 64");
    }
    let exe = std::env::current_exe().context("cannot find the chorus binary")?;
    let root = tempfile::Builder::new()
        .prefix("chorus-devcluster-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let mut nodes = Vec::new();
    for index in 0..args.nodes {
        nodes.push(Node {
            index,
            data_dir: root.path().join(format!("n{index}")),
            p2p_port: 0,
            http: String::new(),
            child: None,
            stopping: None,
            status: None,
        });
    }
    println!(
        "devcluster: {} nodes in {} (logs: n<i>.log); Ctrl-C to stop{}",
        args.nodes,
        root.path().display(),
        if std::io::stdin().is_terminal() {
            "; type k + Enter to kill the admin, q + Enter to quit"
        } else {
            ""
        }
    );
    if args.kills > 0 {
        println!(
            "devcluster: the admin will be {} {} s after the cluster agrees on it{}, to show a \
             failover (--kills 0: never; --signal term: a graceful stop)",
            if args.signal == "term" {
                "stopped (SIGTERM)"
            } else {
                "killed (SIGKILL)"
            },
            args.kill_admin_after,
            if args.kills > 1 {
                format!(", {} times", args.kills)
            } else {
                String::new()
            }
        );
    }
    if args.demo_tasks > 0 {
        let provider = chorus_io::sandbox::docker::DockerProvider::connect()
            .await
            .context("--demo-tasks runs tasks in Docker, but the Docker Engine does not answer")?;
        chorus_io::sandbox::image::ensure_sandbox_image(provider.docker())
            .await
            .context("--demo-tasks needs the sandbox test image")?;
    }
    for i in 0..nodes.len() {
        start(&exe, &args, root.path(), &mut nodes, i).await?;
    }

    let (keys_tx, mut keys) = mpsc::unbounded_channel();
    if std::io::stdin().is_terminal() {
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                if keys_tx.send(line.trim().to_owned()).is_err() {
                    break;
                }
                line.clear();
            }
        });
    }

    let table = !args.plain && std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut report = Report::default();
    let result = watch(
        &exe,
        &args,
        root.path(),
        &mut nodes,
        &mut keys,
        table,
        &mut report,
    )
    .await;

    // Stop every child: SIGTERM, then SIGKILL for any still running after a moment.
    for node in &mut nodes {
        for child in [&node.child, &node.stopping].into_iter().flatten() {
            signal(child, nix::sys::signal::Signal::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    for node in &mut nodes {
        for mut child in [node.child.take(), node.stopping.take()]
            .into_iter()
            .flatten()
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
    let data = if args.keep {
        let kept = root.keep();
        format!("data kept in {}", kept.display())
    } else {
        let path = root.path().to_path_buf();
        match root.close() {
            Ok(()) => "data removed".to_owned(),
            Err(e) => format!("could not remove {}: {e}", path.display()),
        }
    };
    println!("{}", report.line(&args, started.elapsed(), &data));
    result
}

/// What happened during a run, for the closing line.
#[derive(Default)]
struct Report {
    /// Why the run ended.
    stopped_by: &'static str,
    /// The last agreed (admin id, term, node index).
    last_admin: Option<(String, u64, usize)>,
    /// (new admin elected, every live node agrees) per failover.
    failovers: Vec<(Duration, Duration)>,
    /// Children that exited without being told to.
    unexpected_exits: usize,
}

impl Report {
    fn line(&self, args: &Args, ran: Duration, data: &str) -> String {
        let admin = match &self.last_admin {
            Some((id, term, i)) => format!("last admin n{i} ({}) of term {term}", short(id)),
            None => "no admin agreed".to_owned(),
        };
        let failovers = match self.failovers.as_slice() {
            [] => "no failover".to_owned(),
            [(first, all)] => format!(
                "1 failover (new admin after {:.2} s, all agreed after {:.2} s)",
                first.as_secs_f64(),
                all.as_secs_f64()
            ),
            many => {
                let mut firsts: Vec<f64> = many.iter().map(|d| d.0.as_secs_f64()).collect();
                firsts.sort_by(f64::total_cmp);
                format!(
                    "{} failovers (new admin p50 {:.2} s, max {:.2} s)",
                    many.len(),
                    firsts[firsts.len() / 2],
                    firsts[firsts.len() - 1]
                )
            }
        };
        format!(
            "devcluster: stopped ({}) after {:.0} s: {} nodes, {admin}, {failovers}, {} \
             unexpected exit(s); {data}",
            if self.stopped_by.is_empty() {
                "done"
            } else {
                self.stopped_by
            },
            ran.as_secs_f64(),
            args.nodes,
            self.unexpected_exits,
        )
    }
}

/// One admin kill in progress.
struct Failover {
    killed: usize,
    killed_id: String,
    old_term: u64,
    at: Instant,
    first_admin: Option<(Duration, String, u64)>,
}

/// Completes when `s` delivers a signal; never when there is no stream.
async fn recv(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[allow(clippy::too_many_arguments)]
async fn watch(
    exe: &Path,
    args: &Args,
    root: &Path,
    nodes: &mut [Node],
    keys: &mut mpsc::UnboundedReceiver<String>,
    table: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal as unix_signal, SignalKind};
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    // SIGTERM (`kill`, `timeout`) and SIGHUP (a closed terminal) clean up like Ctrl-C.
    let mut sigterm = unix_signal(SignalKind::terminate()).ok();
    let mut sighup = unix_signal(SignalKind::hangup()).ok();
    let mut stable_since: Option<Instant> = None;
    let mut failover: Option<Failover> = None;
    let mut last_line = String::new();
    let mut last_draw = Instant::now() - Duration::from_secs(1);
    let mut kills_done = 0;
    let mut demo_started = false;
    loop {
        let tick = if failover.is_some() { 25 } else { 100 };
        tokio::select! {
            _ = &mut ctrl_c => {
                report.stopped_by = "Ctrl-C";
                return Ok(());
            }
            () = recv(sigterm.as_mut()) => {
                report.stopped_by = "SIGTERM";
                return Ok(());
            }
            () = recv(sighup.as_mut()) => {
                report.stopped_by = "SIGHUP";
                return Ok(());
            }
            Some(key) = keys.recv() => match key.as_str() {
                "k" if failover.is_none() => failover = kill_admin(nodes, args)?,
                "q" => {
                    report.stopped_by = "q";
                    return Ok(());
                }
                _ => {}
            },
            () = tokio::time::sleep(Duration::from_millis(tick)) => {}
        }
        poll(nodes).await;
        for node in nodes.iter_mut() {
            if let Some(child) = node.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    println!("devcluster: n{} exited ({status}); see its log", node.index);
                    report.unexpected_exits += 1;
                    node.child = None;
                    node.status = None;
                }
            }
            if let Some(child) = node.stopping.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    println!("devcluster: n{} has exited ({status})", node.index);
                    node.stopping = None;
                }
            }
        }

        let agreed = agreement(nodes);
        if let Some((admin, term)) = &agreed {
            if let Some(n) = nodes.iter().find(|n| n.id() == Some(admin.as_str())) {
                report.last_admin = Some((admin.clone(), *term, n.index));
            }
            if args.demo_tasks > 0 && !demo_started {
                let through = nodes
                    .iter()
                    .find(|n| n.child.is_some() && n.id() != Some(admin.as_str()))
                    .or_else(|| nodes.first());
                if let Some(n) = through {
                    demo_started = true;
                    tokio::spawn(demo(n.http.clone(), n.index, args.demo_tasks));
                }
            }
        }
        if let Some(f) = failover.as_mut() {
            if f.first_admin.is_none() {
                if let Some(n) = nodes
                    .iter()
                    .find(|n| n.child.is_some() && n.role() == "admin" && n.term() > f.old_term)
                {
                    let id = n.id().unwrap_or("?").to_owned();
                    f.first_admin = Some((f.at.elapsed(), id, n.term()));
                }
            }
            if let (Some((admin, term)), Some((first, _, _))) = (&agreed, &f.first_admin) {
                if *term > f.old_term && admin != &f.killed_id {
                    let all = f.at.elapsed();
                    let new = nodes
                        .iter()
                        .find(|n| n.id() == Some(admin.as_str()))
                        .map_or(String::new(), |n| format!("n{} ", n.index));
                    println!(
                        "devcluster: failover #{}: n{} {}; new admin {new}({}) of term {term} \
                         after {:.2} s, every live node agrees after {:.2} s",
                        kills_done + 1,
                        f.killed,
                        if args.signal == "term" {
                            "stopped (SIGTERM)"
                        } else {
                            "killed (SIGKILL)"
                        },
                        short(admin),
                        first.as_secs_f64(),
                        all.as_secs_f64()
                    );
                    report.failovers.push((*first, all));
                    kills_done += 1;
                    let killed = f.killed;
                    failover = None;
                    stable_since = None;
                    if args.exit_when_done && kills_done >= args.kills {
                        summary(&report.failovers);
                        report.stopped_by = "done";
                        return Ok(());
                    }
                    // Bring the old admin back: it rejoins as a follower of the new term.
                    println!("devcluster: restarting n{killed}");
                    start(exe, args, root, nodes, killed).await?;
                    if kills_done == args.kills {
                        summary(&report.failovers);
                    }
                }
            }
        }
        if failover.is_none() {
            let all_up = nodes
                .iter()
                .all(|n| n.child.is_some() && n.status.is_some());
            match (&agreed, all_up) {
                (Some(_), true) => {
                    let since = *stable_since.get_or_insert_with(Instant::now);
                    if kills_done < args.kills
                        && since.elapsed().as_secs_f64() >= args.kill_admin_after
                    {
                        failover = kill_admin(nodes, args)?;
                    }
                }
                _ => stable_since = None,
            }
        }

        if table {
            if last_draw.elapsed() >= Duration::from_millis(250) {
                draw(nodes, &agreement(nodes), &report.failovers);
                last_draw = Instant::now();
            }
        } else {
            // Fresh: a kill in this round has changed who is live.
            let line = summary_line(nodes, &agreement(nodes));
            if line != last_line {
                println!("{line}");
                last_line = line;
            }
        }
    }
}

fn kill_admin(nodes: &mut [Node], args: &Args) -> anyhow::Result<Option<Failover>> {
    let Some((admin, term)) = agreement(nodes) else {
        println!("devcluster: no agreed admin to kill yet");
        return Ok(None);
    };
    let Some(node) = nodes.iter_mut().find(|n| n.id() == Some(admin.as_str())) else {
        return Ok(None);
    };
    let Some(child) = node.child.take() else {
        return Ok(None);
    };
    let at = Instant::now();
    let graceful = args.signal == "term";
    signal(
        &child,
        if graceful {
            nix::sys::signal::Signal::SIGTERM
        } else {
            nix::sys::signal::Signal::SIGKILL
        },
    );
    println!(
        "devcluster: {} admin n{} ({}) of term {term}",
        if graceful {
            "stopping (SIGTERM)"
        } else {
            "killing (SIGKILL)"
        },
        node.index,
        short(&admin)
    );
    // The process is going: it is no longer polled nor counted as live, but it is kept (not
    // dropped, which would SIGKILL it) until it has exited, so a SIGTERM is really graceful.
    node.stopping = Some(child);
    node.status = None;
    Ok(Some(Failover {
        killed: node.index,
        killed_id: admin,
        old_term: term,
        at,
        first_admin: None,
    }))
}

/// The (admin, term) every live, answering node reports, if they agree and it is live.
/// The demo workload: `count` short tasks submitted through the node at `http` (n`index`),
/// each result printed as it comes, then how many ran on each worker.
async fn demo(http: String, index: usize, count: usize) {
    println!("devcluster: demo: submitting {count} task(s) through n{index}");
    let mut ids = Vec::new();
    for n in 0..count {
        let spec = serde_json::json!({
            "image": chorus_io::sandbox::image::SANDBOX_IMAGE,
            "command": ["sh", "-c", format!("sleep 0.{}; echo task {n} on $(hostname)", n % 10)],
            "timeout_ms": 60_000,
        });
        match request(&http, "POST", "/tasks", Some(&spec.to_string())).await {
            Ok((201, body)) => match serde_json::from_str::<Value>(&body) {
                Ok(v) => ids.push(v["task"].as_str().unwrap_or_default().to_owned()),
                Err(e) => println!("devcluster: demo: bad answer to a submit: {e}"),
            },
            Ok((code, body)) => println!("devcluster: demo: submit refused ({code}): {body}"),
            Err(e) => println!("devcluster: demo: submit failed: {e}"),
        }
    }
    let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut open: Vec<String> = ids;
    while !open.is_empty() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut still = Vec::new();
        for id in open {
            let path = format!("/tasks/{id}");
            let result = match request(&http, "GET", &path, None).await {
                Ok((200, body)) => serde_json::from_str::<Value>(&body)
                    .ok()
                    .map(|v| v["result"].clone())
                    .filter(|r| !r.is_null()),
                _ => None,
            };
            match result {
                Some(r) => {
                    let worker = r["worker"].as_str().unwrap_or("?").to_owned();
                    println!(
                        "devcluster: demo: task {} {} on {} (run {}): {}",
                        short(&id),
                        r["status"].as_str().unwrap_or("?"),
                        short(&worker),
                        r["attempt"],
                        r["stdout"].as_str().unwrap_or_default().trim()
                    );
                    *per_worker.entry(short(&worker).to_owned()).or_default() += 1;
                }
                None => still.push(id),
            }
        }
        open = still;
    }
    println!("devcluster: demo: all {count} task(s) done; per worker: {per_worker:?}");
}

fn agreement(nodes: &[Node]) -> Option<(String, u64)> {
    let mut views = BTreeMap::new();
    let mut live_ids = Vec::new();
    for n in nodes
        .iter()
        .filter(|n| n.child.is_some() && n.status.is_some())
    {
        views.insert((n.admin()?.to_owned(), n.term()), ());
        live_ids.push(n.id()?.to_owned());
    }
    if views.len() != 1 {
        return None;
    }
    let ((admin, term), ()) = views.into_iter().next()?;
    live_ids.contains(&admin).then_some((admin, term))
}

async fn poll(nodes: &mut [Node]) {
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
        for port in ports {
            args.push("--bootstrap".into());
            args.push(format!("/ip4/127.0.0.1/tcp/{port}").into());
        }
        args
    }
}

/// How long a starting node may take to report its ports: a liveness bound for a loaded
/// machine (a start takes well under a second).
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
/// address `http=127.0.0.1:<port>` and the first `/ip4/127.0.0.1/tcp/<port>` listen address.
/// Shared by devcluster and the end-to-end tests.
pub fn parse_started_line(line: &str) -> Option<Ports> {
    fn digits(s: &str) -> Option<u16> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    }
    if !line.contains("chorus node started") {
        return None;
    }
    let p2p = digits(line.split("/ip4/127.0.0.1/tcp/").nth(1)?)?;
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
async fn start(
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
    let spec = LoopbackNode {
        data_dir: &node.data_dir,
        bootstrap_expect: args.nodes,
        cluster_id: "devcluster",
        heartbeat_ms: args.heartbeat_ms,
        election_timeout_ms: &args.election_timeout_ms,
        discovery_timeout_ms: args.discovery_timeout_ms,
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

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
    }
}

fn short(id: &str) -> &str {
    &id[id.len().saturating_sub(8)..]
}

fn summary_line(nodes: &[Node], agreed: &Option<(String, u64)>) -> String {
    let mut line = match agreed {
        Some((admin, term)) => format!("admin {} term {term} |", short(admin)),
        None => "no agreed admin |".to_owned(),
    };
    for n in nodes {
        let state = if n.child.is_none() {
            "down".to_owned()
        } else if n.status.is_none() {
            "starting".to_owned()
        } else {
            format!("{}/{}", n.role(), n.term())
        };
        line.push_str(&format!(" n{}:{state}", n.index));
    }
    line
}

fn draw(nodes: &[Node], agreed: &Option<(String, u64)>, durations: &[(Duration, Duration)]) {
    let mut out = String::from("\x1b[H\x1b[2J");
    out.push_str(&format!(
        "{:<4} {:<10} {:<10} {:>5} {:<10} {:>5}  {}\n",
        "", "node", "role", "term", "admin", "peers", "http"
    ));
    for n in nodes {
        let (role, term, admin, peers) = if n.child.is_none() {
            (
                "DOWN".to_owned(),
                String::new(),
                String::new(),
                String::new(),
            )
        } else if n.status.is_none() {
            (
                "starting".to_owned(),
                String::new(),
                String::new(),
                String::new(),
            )
        } else {
            (
                n.role().to_owned(),
                n.term().to_string(),
                n.admin().map(short).unwrap_or("-").to_owned(),
                n.field("peers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
                    .to_string(),
            )
        };
        let star = if n.role() == "admin" { "*" } else { "" };
        out.push_str(&format!(
            "n{:<3} {:<10} {:<10} {:>5} {:<10} {:>5}  {}\n",
            format!("{}{star}", n.index),
            n.id().map(short).unwrap_or("-"),
            role,
            term,
            admin,
            peers,
            n.http
        ));
    }
    match agreed {
        Some((admin, term)) => out.push_str(&format!(
            "\nevery live node agrees: admin {} of term {term}\n",
            short(admin)
        )),
        None => out.push_str("\nno agreed admin yet\n"),
    }
    for (i, (first, all)) in durations.iter().enumerate() {
        out.push_str(&format!(
            "failover #{}: new admin after {:.2} s, agreed after {:.2} s\n",
            i + 1,
            first.as_secs_f64(),
            all.as_secs_f64()
        ));
    }
    print!("{out}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// Percentiles over several failovers (one failover's line already says it all).
fn summary(durations: &[(Duration, Duration)]) {
    if durations.len() < 2 {
        return;
    }
    let mut first: Vec<f64> = durations.iter().map(|d| d.0.as_secs_f64()).collect();
    let mut all: Vec<f64> = durations.iter().map(|d| d.1.as_secs_f64()).collect();
    first.sort_by(f64::total_cmp);
    all.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "devcluster: {} failovers; new admin p50 {:.2} s p99 {:.2} s max {:.2} s; all agree \
         p50 {:.2} s p99 {:.2} s max {:.2} s",
        durations.len(),
        pct(&first, 0.5),
        pct(&first, 0.99),
        first[first.len() - 1],
        pct(&all, 0.5),
        pct(&all, 0.99),
        all[all.len() - 1],
    );
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
