//! The live-sandbox benchmark (issue 53, "Done when"): a three-node cluster of real
//! `chorus run --docker` processes on loopback, and live sandboxes (`/sandboxes`) on one of them.
//!
//! 1. create → ready (`POST /sandboxes` answered 201), p50/p99, each begun once the worker's
//!    warm pool is full again (`chorus_live_warm` in its `/metrics`, untimed), so it measures a
//!    create from the warm pool; each closed after (untimed);
//! 2. exec `true` through the API (`POST /sandboxes/{id}/exec`), p50/p99, interleaved with
//!    `docker exec CONTAINER true` on the same container, and the ratio of the medians;
//! 3. create → exec `echo ready` → close, p50 (each begun with the warm pool full), interleaved with
//!    `docker run --rm --network none chorus/sandbox:latest echo ready`, and the ratio;
//! 4. write then read 1 MiB (`PUT /sandboxes/{id}/files?path=` with the raw bytes, then
//!    `GET /sandboxes/{id}/files?path=`), p50;
//! 5. many idle live sandboxes on one worker: the node's RSS (`/proc/PID/status` VmRSS), the
//!    sandboxes' memory (`docker stats --no-stream`), and exec `true` p99 across all of them;
//! 6. a folder in and out as a tar archive (`PUT`, then `GET /sandboxes/{id}/tree?path=`, 16 MiB
//!    in 64 files by default), p50, interleaved with the same archive through `docker exec -i
//!    CONTAINER tar -x` and back through `docker exec CONTAINER tar -c` (`docker cp` cannot
//!    write a sandbox: its root is read-only and its `/workspace` a tmpfs), and the ratio.
//!
//! Both sides of a comparison run in this process run, round by round (which goes first
//! alternates), so they see the same machine load. Percentiles are nearest-rank (with 30 rounds,
//! p99 is the slowest).
//!
//! Only node 0 runs Docker (the worker); nodes 1 and 2 run no sandboxes, so a create at them
//! is forwarded to the worker, as every later call is (issue 53, step 3). Every request goes to
//! the node `--via` names: by default the one of nodes 1 and 2 that is not the admin, so the
//! figures are "through a node that is neither the admin nor the worker"; `--via 0` asks the
//! worker itself. With a `--via` other than the worker, exec `true` is also timed at the worker
//! directly, interleaved, to show what the forwarding costs.
//!
//! `cargo build -p chorus-tests --bins && target/debug/sandbox-bench [--rounds N] [--idle N]
//! [--via N] [--json] [--chorus PATH]` (the `chorus` program: `chorus-e2e` beside this binary
//! unless `--chorus` names one; a release build: `--release` and `target/release/…`).
//!
//! Bounded: every request, every `docker` command and the whole run have deadlines; the
//! sandboxes made ask for a short idle timeout and lifetime, so a killed bench leaves nothing
//! running for long; the nodes are killed and every container made (the nodes' labels, and
//! this run's label on the `docker run` comparisons) removed at the end, on a panic too (a
//! drop guard), and by the watchdog at the deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus_tests::{http_request, Cluster, Timings, Value};
use clap::Parser;
use serde_json::json;

const IMAGE: &str = "chorus/sandbox:latest";

/// The node that runs Docker, and so every live sandbox.
const WORKER: usize = 0;

/// Live sandboxes one token may hold on a worker (`[sandbox] live_per_owner`, default).
const PER_OWNER: usize = 8;
/// Live sandboxes the worker may hold: its `[sandbox] live_max`, set in [`WORKER_CONFIG`].
const PER_NODE: usize = 128;

/// Warm live sandboxes the worker keeps (`[sandbox] live_warm`, default).
const WARM: u64 = 2;

/// The worker's settings: room for measure 5's idle sandboxes. Each holds a task slot and
/// counts its limits (512 MiB, one CPU by default) against the worker's memory and CPU totals,
/// which default to half the host's memory and its CPUs (two sandboxes on two cores): the
/// totals are raised — overcommitted, as an operator keeping many idle sandboxes would.
const WORKER_CONFIG: &str = "[sandbox]\nlive_max = 128\n\n[tasks]\nslots = 140\n\
                             max_cpu_millis = 160000\nmax_memory_mb = 81920\n";

/// How long one request or one `docker` command may take before the bench fails.
const CALL_BOUND: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "Live sandboxes (issue 53): latency, memory and the docker comparison")]
struct Args {
    /// Rounds of each timed measure (1–4); the default finishes in about two minutes.
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    /// Idle live sandboxes for measure 5 (capped at the worker's bound, 128).
    #[arg(long, default_value_t = 100)]
    idle: usize,
    /// Execs of `true` per idle sandbox in measure 5.
    #[arg(long, default_value_t = 3)]
    idle_execs: usize,
    /// The node (0–2) every request goes to (0: the worker itself); default: the one of nodes
    /// 1 and 2 that is not the admin.
    #[arg(long)]
    via: Option<usize>,
    /// The `chorus` program; default: `chorus-e2e` beside this binary.
    #[arg(long)]
    chorus: Option<PathBuf>,
    /// Print the results as one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// The whole run's bound, seconds: past it the watchdog kills the nodes, removes the
    /// containers and exits 3.
    #[arg(long, default_value_t = 900)]
    deadline_s: u64,
    /// The size of measure 4's file, KiB (the goal is for 1 MiB; a small one shows what a
    /// file call costs apart from its bytes).
    #[arg(long, default_value_t = 1024)]
    file_kib: usize,
    /// The size of measure 6's folder, KiB (in 64 files).
    #[arg(long, default_value_t = 16384)]
    tree_kib: usize,
}

fn main() {
    let args = Args::parse();
    assert!(
        args.via.is_none_or(|v| v < 3),
        "--via: a node of the three (0, 1 or 2)"
    );
    assert!(args.rounds > 0, "--rounds: at least 1");
    let bin = args.chorus.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("this binary's path")
            .with_file_name("chorus-e2e")
    });
    let bin = bin.to_str().expect("a UTF-8 path").to_owned();
    let load_before = loadavg();

    let cleanup = Cleanup::new();
    watchdog(
        Duration::from_secs(args.deadline_s),
        cleanup.nodes.clone(),
        cleanup.pids.clone(),
    );
    let out = chorus_tests::run_chorus(bin.as_ref(), &["sandbox", "image", "build"]);
    assert!(out.status.success(), "image build: {out:?}");
    eprintln!("starting three nodes, node 0 with Docker ({bin})");
    // Node 0 runs sandboxes; nodes 1 and 2 none (a create there goes to node 0).
    let mut c = Cluster::start_with(&bin, 0, Timings::FAST, &[]);
    c.expect = 3;
    // A live sandbox holds a task slot, memory and CPU while it lives: room for measure 5's
    // idle ones.
    let config = std::env::temp_dir().join(format!("sandbox-bench-{}.toml", std::process::id()));
    std::fs::write(&config, WORKER_CONFIG).expect("the worker's config is written");
    c.extra_args = vec![
        "--docker".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    c.add_node();
    c.extra_args.clear();
    c.add_node();
    c.add_node();
    for n in &c.nodes {
        if let Some(pid) = pid_of(&n.data_dir) {
            cleanup.pids.lock().expect("pids").push(pid);
        }
    }
    c.wait_agreed(Duration::from_secs(60));
    let ids: Vec<String> = (0..3)
        .map(|i| {
            c.status(i).expect("status")["node_id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    *cleanup.nodes.lock().expect("nodes") = ids.clone();
    let (_, _, admin) = c.wait_agreed(Duration::from_secs(60));
    let via = args.via.unwrap_or(if admin == 1 { 2 } else { 1 });

    let report = measure(&c, &args, via, &ids, admin);
    let load_after = loadavg();
    drop(c);
    let left = cleanup.remove_all();
    let report = Report {
        load_before,
        load_after,
        containers_left: left,
        bin,
        ..report
    };
    if args.json {
        println!("{}", report.json());
    } else {
        report.print();
    }
}

/// Every result, and what it was measured on.
#[derive(Default)]
struct Report {
    rounds: usize,
    via: String,
    worker: String,
    via_is_worker: bool,
    via_is_admin: bool,
    bin: String,
    load_before: String,
    load_after: String,
    containers_left: usize,
    create: Vec<Duration>,
    exec_api: Vec<Duration>,
    exec_docker: Vec<Duration>,
    /// exec `true` at the worker itself, when the others go through another node.
    exec_direct: Vec<Duration>,
    cycle_api: Vec<Duration>,
    cycle_docker: Vec<Duration>,
    write_1m: Vec<Duration>,
    read_1m: Vec<Duration>,
    write_read_1m: Vec<Duration>,
    file_kib: usize,
    idle_asked: usize,
    idle_made: usize,
    idle_tokens: usize,
    idle_create_all: Duration,
    rss_before_kib: u64,
    rss_idle_kib: u64,
    sandbox_mem_bytes: u64,
    idle_exec: Vec<Duration>,
    tree_kib: usize,
    tree_api_in: Vec<Duration>,
    tree_api_out: Vec<Duration>,
    tree_docker_in: Vec<Duration>,
    tree_docker_out: Vec<Duration>,
}

fn measure(c: &Cluster, args: &Args, via: usize, ids: &[String], admin: usize) -> Report {
    let port = c.nodes[via].http_port;
    let at_worker = c.nodes[WORKER].http_port;
    let user = mint_token(c, "submit");
    let rounds = args.rounds;
    let mut r = Report {
        rounds,
        via: format!("n{via} {}", ids[via]),
        via_is_admin: via == admin,
        idle_asked: args.idle,
        ..Report::default()
    };

    // Warm-up: the image's layers and the node's Docker connection in use.
    for _ in 0..2 {
        let (sb, _) = create(port, &user);
        close(port, &user, &sb.id);
    }

    eprintln!("1. create -> ready, {rounds} rounds, each once the worker's warm pool is full");
    for _ in 0..rounds {
        warm_pool_full(c);
        let began = Instant::now();
        let (sb, _) = create(port, &user);
        r.create.push(began.elapsed());
        assert_eq!(sb.worker, ids[WORKER], "made on the worker");
        close(port, &user, &sb.id);
    }
    r.worker = format!("n{WORKER} {}", ids[WORKER]);
    r.via_is_worker = via == WORKER;

    eprintln!("2. exec `true`, API and docker exec, {rounds} rounds each");
    let (sb, _) = create(port, &user);
    for _ in 0..3 {
        exec_true(port, &user, &sb.id);
        docker(&["exec", &sb.container, "true"]);
    }
    for i in 0..rounds {
        let api = |r: &mut Report| {
            let began = Instant::now();
            exec_true(port, &user, &sb.id);
            r.exec_api.push(began.elapsed());
        };
        let dock = |r: &mut Report| {
            let began = Instant::now();
            docker(&["exec", &sb.container, "true"]);
            r.exec_docker.push(began.elapsed());
        };
        if i % 2 == 0 {
            api(&mut r);
            dock(&mut r);
        } else {
            dock(&mut r);
            api(&mut r);
        }
        if via != WORKER {
            let began = Instant::now();
            exec_true(at_worker, &user, &sb.id);
            r.exec_direct.push(began.elapsed());
        }
    }

    let kib = args.file_kib;
    eprintln!("4. write then read {kib} KiB (raw bytes both ways), {rounds} rounds");
    let data = noise(kib << 10);
    r.file_kib = kib;
    let files = format!("/sandboxes/{}/files", sb.id);
    let read_path = format!("{files}?path=/workspace/bench.bin");
    for _ in 0..rounds {
        let began = Instant::now();
        let (code, answer) = call_as(port, &user, "PUT", &read_path, OCTETS, &data);
        assert_eq!(code, 200, "write: {}", String::from_utf8_lossy(&answer));
        let wrote = began.elapsed();
        let (code, back) = call(port, &user, "GET", &read_path, b"");
        let both = began.elapsed();
        assert_eq!(code, 200, "read: {}", String::from_utf8_lossy(&back));
        assert!(
            back == data,
            "read back {} bytes, not the {kib} KiB written",
            back.len()
        );
        r.write_1m.push(wrote);
        r.read_1m.push(both - wrote);
        r.write_read_1m.push(both);
    }
    measure_trees(&mut r, port, &user, &sb, args.tree_kib);
    close(port, &user, &sb.id);

    eprintln!("3. create -> exec `echo ready` -> close, and docker run --rm, {rounds} rounds each");
    let label = format!("io.chorus.bench={}", std::process::id());
    let run_args = [
        "run",
        "--rm",
        "--network",
        "none",
        "--label",
        &label,
        IMAGE,
        "echo",
        "ready",
    ];
    let out = docker(&run_args);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\n", "{out:?}");
    for i in 0..rounds {
        let api = |r: &mut Report| {
            warm_pool_full(c);
            let began = Instant::now();
            let (sb, _) = create(port, &user);
            let (code, answer) = call(
                port,
                &user,
                "POST",
                &format!("/sandboxes/{}/exec", sb.id),
                br#"{"argv": ["echo", "ready"]}"#,
            );
            let v: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
            assert!(code == 200 && v["stdout"] == "ready\n", "exec: {v}");
            close(port, &user, &sb.id);
            r.cycle_api.push(began.elapsed());
        };
        let dock = |r: &mut Report| {
            let began = Instant::now();
            let out = docker(&run_args);
            assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\n");
            r.cycle_docker.push(began.elapsed());
        };
        if i % 2 == 0 {
            api(&mut r);
            dock(&mut r);
        } else {
            dock(&mut r);
            api(&mut r);
        }
    }

    let want = args.idle.min(PER_NODE);
    eprintln!(
        "5. {want} idle live sandboxes on one node (asked {}), {} execs each",
        args.idle, args.idle_execs
    );
    let pid = pid_of(&c.nodes[WORKER].data_dir).expect("the worker's process");
    r.rss_before_kib = rss_kib(pid);
    let tokens: Vec<String> = (0..want.div_ceil(PER_OWNER))
        .map(|_| mint_token(c, "submit"))
        .collect();
    r.idle_tokens = tokens.len();
    let began = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let made: Mutex<Vec<(String, Sandbox)>> = Mutex::new(Vec::new());
    // A few at a time, as several agents would start theirs.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= want {
                    break;
                }
                let token = &tokens[n / PER_OWNER];
                let (sb, _) = create(port, token);
                made.lock().expect("made").push((token.clone(), sb));
            });
        }
    });
    r.idle_create_all = began.elapsed();
    let made = made.into_inner().expect("made");
    r.idle_made = made.len();
    // Idle: nothing asked of them for a moment, then the memory they hold.
    std::thread::sleep(Duration::from_secs(3));
    r.rss_idle_kib = rss_kib(pid);
    let names: Vec<&str> = made.iter().map(|(_, sb)| sb.container.as_str()).collect();
    r.sandbox_mem_bytes = docker_mem(&names);
    for _ in 0..args.idle_execs {
        for (token, sb) in &made {
            let began = Instant::now();
            exec_true(port, token, &sb.id);
            r.idle_exec.push(began.elapsed());
        }
    }
    for (token, sb) in &made {
        close(port, token, &sb.id);
    }
    r
}

impl Report {
    fn print(&self) {
        let mut create = self.create.clone();
        let (c50, c99) = (pct(&mut create, 50), pct(&mut create, 99));
        let (mut ea, mut ed) = (self.exec_api.clone(), self.exec_docker.clone());
        let (ea50, ea99, ed50, ed99) = (
            pct(&mut ea, 50),
            pct(&mut ea, 99),
            pct(&mut ed, 50),
            pct(&mut ed, 99),
        );
        let (mut ca, mut cd) = (self.cycle_api.clone(), self.cycle_docker.clone());
        let (ca50, ca99, cd50, cd99) = (
            pct(&mut ca, 50),
            pct(&mut ca, 99),
            pct(&mut cd, 50),
            pct(&mut cd, 99),
        );
        let (mut w, mut rd, mut wr) = (
            self.write_1m.clone(),
            self.read_1m.clone(),
            self.write_read_1m.clone(),
        );
        let mut idle = self.idle_exec.clone();
        let n = self.rounds;
        println!("| measure | result | goal |");
        println!("|---|---|---|");
        println!(
            "| create → ready (201), p50 / p99, {n} creates | {:.1} / {:.1} ms | ≤ 30 / ≤ 100 ms |",
            ms(c50),
            ms(c99)
        );
        println!(
            "| exec `true` through the API, p50 / p99, {n} runs | {:.1} / {:.1} ms | ≤ 5 ms p50 |",
            ms(ea50),
            ms(ea99)
        );
        println!(
            "| `docker exec CONTAINER true`, same container, interleaved, p50 / p99 | {:.1} / {:.1} ms | |",
            ms(ed50),
            ms(ed99)
        );
        println!(
            "| exec ratio API / docker exec, p50 | {:.2} | ≤ 0.1 |",
            ms(ea50) / ms(ed50)
        );
        if !self.exec_direct.is_empty() {
            let mut d = self.exec_direct.clone();
            println!(
                "| exec `true` at the worker itself (no forwarding), interleaved, p50 / p99 | {:.1} / {:.1} ms | |",
                ms(pct(&mut d, 50)),
                ms(pct(&mut d, 99))
            );
        }
        println!(
            "| create → exec `echo ready` → close, p50 / p99, {n} runs | {:.1} / {:.1} ms | ≤ 50 ms p50 |",
            ms(ca50),
            ms(ca99)
        );
        println!(
            "| `docker run --rm --network none {IMAGE} echo ready`, interleaved, p50 / p99 | {:.1} / {:.1} ms | |",
            ms(cd50),
            ms(cd99)
        );
        println!(
            "| create-exec-close ratio API / docker run, p50 | {:.2} | ≤ 0.2 |",
            ms(ca50) / ms(cd50)
        );
        println!(
            "| write then read {} KiB, p50 (write p50, read p50), {n} runs | {:.1} ms ({:.1}, {:.1}) | ≤ 20 ms for 1024 KiB |",
            self.file_kib,
            ms(pct(&mut wr, 50)),
            ms(pct(&mut w, 50)),
            ms(pct(&mut rd, 50))
        );
        println!(
            "| {} idle live sandboxes on one node (asked {}; {} tokens) | node RSS {:.1} MiB (before: {:.1} MiB, +{:.2} MiB per sandbox); sandboxes' memory {:.1} MiB ({:.2} MiB each); made in {:.1} s, 4 at a time | stated |",
            self.idle_made,
            self.idle_asked,
            self.idle_tokens,
            self.rss_idle_kib as f64 / 1024.0,
            self.rss_before_kib as f64 / 1024.0,
            self.rss_idle_kib.saturating_sub(self.rss_before_kib) as f64
                / 1024.0
                / self.idle_made.max(1) as f64,
            self.sandbox_mem_bytes as f64 / MIB,
            self.sandbox_mem_bytes as f64 / MIB / self.idle_made.max(1) as f64,
            self.idle_create_all.as_secs_f64(),
        );
        println!(
            "| exec `true` across the {} idle sandboxes, p50 / p99, {} execs | {:.1} / {:.1} ms | ≤ 50 ms p99 |",
            self.idle_made,
            idle.len(),
            ms(pct(&mut idle, 50)),
            ms(pct(&mut idle, 99))
        );
        let (mut ti, mut to, mut di, mut dout) = (
            self.tree_api_in.clone(),
            self.tree_api_out.clone(),
            self.tree_docker_in.clone(),
            self.tree_docker_out.clone(),
        );
        let (ti50, to50, di50, do50) = (
            pct(&mut ti, 50),
            pct(&mut to, 50),
            pct(&mut di, 50),
            pct(&mut dout, 50),
        );
        println!(
            "| a folder of {} KiB (64 files) in / out as tar through the API, p50, {n} runs | {:.1} / {:.1} ms | |",
            self.tree_kib,
            ms(ti50),
            ms(to50)
        );
        println!(
            "| the same through `docker exec -i … tar -x` / `docker exec … tar -c`, interleaved, p50 | {:.1} / {:.1} ms | |",
            ms(di50),
            ms(do50)
        );
        println!(
            "| folder ratio API / docker exec, in / out, p50 | {:.2} / {:.2} | |",
            ms(ti50) / ms(di50),
            ms(to50) / ms(do50)
        );
        println!();
        println!("Notes:");
        println!(
            "- every request went to {} ({}); the sandboxes' worker was {} (the only node with \
             Docker) — {}",
            self.via,
            if self.via_is_admin {
                "the admin"
            } else {
                "not the admin"
            },
            self.worker,
            if self.via_is_worker {
                "the node asked was the worker itself: nothing went through a second node"
            } else {
                "so every call, the creates too, was forwarded by the node asked to the worker \
                 (a delegated token, one more HTTP hop on loopback)"
            }
        );
        if self.idle_asked > self.idle_made {
            println!(
                "- measure 5 asked for {} but the worker holds at most {PER_NODE} live \
                 sandboxes ([sandbox] live_max) and one token {PER_OWNER} (live_per_owner): {} \
                 tokens made {}",
                self.idle_asked, self.idle_tokens, self.idle_made
            );
        }
        println!(
            "- each request is a new loopback TCP connection (Connection: close), a `submit` \
             token; percentiles nearest-rank (with {n} rounds p99 is rank {} of {n})",
            n.saturating_mul(99).div_ceil(100).clamp(1, n.max(1))
        );
        println!(
            "- sandboxes' memory: the sum of `docker stats --no-stream` MemUsage; node RSS: \
             VmRSS of the worker's process"
        );
        println!(
            "- chorus: {}; {} cores; load (1/5/15 min) before {}, after {}; containers left \
             after the run: {}",
            self.bin,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            self.load_before,
            self.load_after,
            self.containers_left
        );
    }

    fn json(&self) -> Value {
        let p = |v: &[Duration]| {
            let mut v = v.to_vec();
            json!({ "n": v.len(), "p50_ms": ms(pct(&mut v, 50)), "p99_ms": ms(pct(&mut v, 99)) })
        };
        let ratio = |a: &[Duration], b: &[Duration]| {
            let (mut a, mut b) = (a.to_vec(), b.to_vec());
            ms(pct(&mut a, 50)) / ms(pct(&mut b, 50))
        };
        json!({
            "rounds": self.rounds,
            "via": self.via,
            "worker": self.worker,
            "via_is_worker": self.via_is_worker,
            "via_is_admin": self.via_is_admin,
            "create": p(&self.create),
            "exec_true_api": p(&self.exec_api),
            "exec_true_docker_exec": p(&self.exec_docker),
            "exec_ratio_p50": ratio(&self.exec_api, &self.exec_docker),
            "exec_true_at_worker": p(&self.exec_direct),
            "create_exec_close_api": p(&self.cycle_api),
            "docker_run_rm": p(&self.cycle_docker),
            "cycle_ratio_p50": ratio(&self.cycle_api, &self.cycle_docker),
            "file_kib": self.file_kib,
            "write_read_1mib": p(&self.write_read_1m),
            "write_1mib": p(&self.write_1m),
            "read_1mib": p(&self.read_1m),
            "idle": {
                "asked": self.idle_asked,
                "made": self.idle_made,
                "tokens": self.idle_tokens,
                "per_node_bound": PER_NODE,
                "create_all_s": self.idle_create_all.as_secs_f64(),
                "node_rss_before_kib": self.rss_before_kib,
                "node_rss_kib": self.rss_idle_kib,
                "sandbox_mem_bytes": self.sandbox_mem_bytes,
                "exec_true": p(&self.idle_exec),
            },
            "tree": {
                "kib": self.tree_kib,
                "api_in": p(&self.tree_api_in),
                "api_out": p(&self.tree_api_out),
                "docker_exec_in": p(&self.tree_docker_in),
                "docker_exec_out": p(&self.tree_docker_out),
            },
            "bin": self.bin,
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "load_before": self.load_before,
            "load_after": self.load_after,
            "containers_left": self.containers_left,
        })
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// Measure 6: a folder of `kib` KiB in 64 files in and out as tar, through the API and
/// through `docker exec` of the same container, interleaved.
fn measure_trees(r: &mut Report, port: u16, user: &str, sb: &Sandbox, kib: usize) {
    let rounds = r.rounds;
    eprintln!(
        "6. a folder of {kib} KiB in and out as tar, API and docker exec tar, {rounds} rounds each"
    );
    r.tree_kib = kib;
    let mut b = tar::Builder::new(Vec::new());
    let each = (kib << 10) / 64;
    for f in 0..64 {
        let mut h = tar::Header::new_gnu();
        h.set_size(each as u64);
        h.set_mode(0o644);
        b.append_data(
            &mut h,
            format!("d{}/f{f}.bin", f % 8),
            noise(each).as_slice(),
        )
        .expect("packing");
    }
    let archive = b.into_inner().expect("packing");
    let tree = |dir: &str| format!("/sandboxes/{}/tree?path=/workspace/{dir}", sb.id);
    let untar = ["sh", "-c", "mkdir -p \"$1\" && tar -x -f - -C \"$1\"", "sh"];
    let clear = br#"{"shell": "rm -rf /workspace/t /workspace/k"}"#;
    // `docker exec` as the user the API runs commands as, who owns `/workspace`.
    let path = format!("/sandboxes/{}/exec", sb.id);
    let (code, who) = call(
        port,
        user,
        "POST",
        &path,
        br#"{"shell": "echo $(id -u):$(id -g)"}"#,
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&who));
    let who: Value = serde_json::from_slice(&who).expect("JSON");
    let as_user = who["stdout"].as_str().expect("the user").trim().to_owned();
    for i in 0..rounds {
        let api = |r: &mut Report| {
            let began = Instant::now();
            let (code, answer) = call_as(port, user, "PUT", &tree("t"), TAR, &archive);
            assert_eq!(code, 200, "tree in: {}", String::from_utf8_lossy(&answer));
            let wrote = began.elapsed();
            let (code, back) = call(port, user, "GET", &tree("t"), b"");
            r.tree_api_out.push(began.elapsed() - wrote);
            r.tree_api_in.push(wrote);
            assert_eq!(code, 200, "tree out: {}", String::from_utf8_lossy(&back));
            assert!(back.len() >= kib << 10, "a whole folder came back");
        };
        let dock = |r: &mut Report| {
            let mut args = vec!["exec", "-i", "--user", &as_user, &sb.container];
            args.extend(untar);
            args.push("/workspace/k");
            let began = Instant::now();
            docker_with_input(&args, &archive);
            let wrote = began.elapsed();
            let out = docker_with_input(
                &[
                    "exec",
                    "--user",
                    &as_user,
                    &sb.container,
                    "tar",
                    "-c",
                    "-f",
                    "-",
                    "-C",
                    "/workspace/k",
                    ".",
                ],
                b"",
            );
            r.tree_docker_out.push(began.elapsed() - wrote);
            r.tree_docker_in.push(wrote);
            assert!(out.stdout.len() >= kib << 10, "a whole folder came back");
        };
        if i % 2 == 0 {
            api(r);
            dock(r);
        } else {
            dock(r);
            api(r);
        }
        let (code, answer) = call(port, user, "POST", &path, clear);
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&answer));
    }
}

/// A tar archive's media type.
const TAR: &str = "application/x-tar";

/// `docker ARGS` with `input` on its stdin, its output read as it comes (a large one never
/// fills a pipe), which must succeed within [`CALL_BOUND`].
fn docker_with_input(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(CALL_BOUND)
        .unwrap_or_else(|_| panic!("docker {args:?} still going after {CALL_BOUND:?}"))
        .expect("its output");
    let _ = feeder.join();
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// The `p`th percentile of `v` (nearest rank), the default (zero) of none.
fn pct<T: Ord + Copy + Default>(v: &mut [T], p: usize) -> T {
    if v.is_empty() {
        return T::default();
    }
    v.sort_unstable();
    v[((v.len() * p).div_ceil(100)).clamp(1, v.len()) - 1]
}

/// `/proc/loadavg`'s three averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A live sandbox as its create answered.
struct Sandbox {
    id: String,
    worker: String,
    /// The container's name.
    container: String,
}

/// `POST /sandboxes` with `token`; the sandbox and the answer's status. Short idle timeout and
/// lifetime: a bench killed before it closes them leaves nothing running for long.
fn create(port: u16, token: &str) -> (Sandbox, u16) {
    let body = json!({ "idle_timeout_ms": 120_000, "lifetime_ms": 900_000 }).to_string();
    let (mut code, mut answer) = call(port, token, "POST", "/sandboxes", body.as_bytes());
    // Still waiting for a worker after the create's own wait: asked again, as a client would.
    let waited = Instant::now();
    while code == 202 && waited.elapsed() < CALL_BOUND {
        let v: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        let id = v["id"].as_str().expect("a waiting create names its id");
        (code, answer) = call(
            port,
            token,
            "GET",
            &format!("/sandboxes/{id}?wait_ms=30000"),
            b"",
        );
        if code == 200 {
            code = 201;
        }
    }
    let v: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    assert_eq!(code, 201, "create: {}", String::from_utf8_lossy(&answer));
    let field = |k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("{k} in {v}"))
            .to_owned()
    };
    (
        Sandbox {
            id: field("id"),
            worker: field("worker"),
            container: field("sandbox"),
        },
        code,
    )
}

fn close(port: u16, token: &str, id: &str) {
    let (code, answer) = call(port, token, "DELETE", &format!("/sandboxes/{id}"), b"");
    assert_eq!(code, 200, "close: {}", String::from_utf8_lossy(&answer));
}

fn exec_true(port: u16, token: &str, id: &str) {
    let (code, answer) = call(
        port,
        token,
        "POST",
        &format!("/sandboxes/{id}/exec"),
        br#"{"argv": ["true"]}"#,
    );
    let v: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    assert!(
        code == 200 && v["exit_code"] == 0,
        "exec: {code} {}",
        String::from_utf8_lossy(&answer)
    );
}

/// A new token of `role`, made with the harness's management token.
/// Waits (untimed) until the worker's warm pool is full again: a create measured from the warm
/// pool, as the measure says, not one that raced its refill.
fn warm_pool_full(c: &Cluster) {
    let deadline = Instant::now() + CALL_BOUND;
    while Instant::now() < deadline {
        let (code, text) = http_request(c.nodes[WORKER].http_port, "GET", "/metrics", None)
            .expect("the worker answers");
        assert_eq!(code, 200, "/metrics: {text}");
        let warm = text
            .lines()
            .find_map(|l| l.strip_prefix("chorus_live_warm "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("chorus_live_warm in /metrics");
        if warm >= WARM {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the worker's warm pool did not fill within {CALL_BOUND:?}");
}

fn mint_token(c: &Cluster, role: &str) -> String {
    let (code, body) = http_request(
        c.nodes[0].http_port,
        "POST",
        "/acl/tokens",
        Some(&json!({ "role": role }).to_string()),
    )
    .expect("the node answers");
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<Value>(&body).expect("json")["token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// One HTTP/1.1 request on loopback with `token`, a new connection (as a CLI makes); the
/// status and the body's bytes.
fn call(port: u16, token: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    call_as(port, token, method, path, "application/json", body)
}

/// A raw body's media type.
const OCTETS: &str = "application/octet-stream";

/// One request with a body of media type `kind`; its status and body.
fn call_as(
    port: u16,
    token: &str,
    method: &str,
    path: &str,
    kind: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the node listens");
    stream.set_read_timeout(Some(CALL_BOUND)).expect("timeout");
    stream.set_write_timeout(Some(CALL_BOUND)).expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\nContent-Type: {kind}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    stream.write_all(&req).expect("the request is sent");
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{method} {path}: no whole answer: {e}"));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: not HTTP: {raw:?}"));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let rest = &raw[split + 4..];
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no status: {head}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        code,
        if chunked {
            dechunk(rest)
        } else {
            rest.to_vec()
        },
    )
}

/// A chunked body's bytes.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || raw.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
    out
}

/// `docker ARGS`, which must succeed within [`CALL_BOUND`] (killed and the bench failed if not).
fn docker(args: &[&str]) -> Output {
    let out = bounded(Command::new("docker").args(args), CALL_BOUND);
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    out
}

/// Runs `cmd` to completion, killed past `bound`.
fn bounded(cmd: &mut Command, bound: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let deadline = Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(200)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{cmd:?} still going after {bound:?}");
            }
        }
    }
    child.wait_with_output().expect("its output")
}

/// The memory of the containers `names`, by `docker stats --no-stream` (bytes, summed).
fn docker_mem(names: &[&str]) -> u64 {
    if names.is_empty() {
        return 0;
    }
    let mut args = vec!["stats", "--no-stream", "--format", "{{.MemUsage}}"];
    args.extend(names);
    let out = docker(&args);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| bytes_of(l.split('/').next()?.trim()))
        .sum()
}

/// `1.5MiB`, `740KiB`, `12B` … as bytes.
fn bytes_of(s: &str) -> Option<u64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.trim().parse().ok()?;
    let scale = match unit {
        "B" => 1.0,
        "KiB" | "kB" | "KB" => 1024.0,
        "MiB" | "MB" => MIB,
        "GiB" | "GB" => MIB * 1024.0,
        _ => return None,
    };
    Some((n * scale) as u64)
}

/// The pid of the process started with `--data-dir DIR`.
fn pid_of(dir: &std::path::Path) -> Option<u32> {
    let want = dir.to_str()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.windows(2)
            .any(|w| w[0] == b"--data-dir" && w[1] == want.as_bytes())
            .then_some(pid)
    })
}

/// VmRSS of `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `n` bytes of xorshift noise (the same each run).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Removes, when dropped (the end, or a panic), every container of the cluster's nodes and of
/// this run's `docker run` comparisons. Declared before the cluster, so the nodes are killed
/// first.
struct Cleanup {
    nodes: Arc<Mutex<Vec<String>>>,
    /// The nodes' processes, for the watchdog.
    pids: Arc<Mutex<Vec<u32>>>,
    done: bool,
}

impl Cleanup {
    fn new() -> Cleanup {
        Cleanup {
            nodes: Arc::default(),
            pids: Arc::default(),
            done: false,
        }
    }

    /// Removes them; how many are left after.
    fn remove_all(mut self) -> usize {
        self.done = true;
        let nodes = self.nodes.lock().expect("nodes").clone();
        remove_containers(&nodes);
        filters(&nodes).iter().map(|f| containers(f).len()).sum()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.done {
            let nodes = self.nodes.lock().map(|n| n.clone()).unwrap_or_default();
            remove_containers(&nodes);
        }
    }
}

/// The label filters of every container this run made.
fn filters(nodes: &[String]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("label=io.chorus.node={n}"))
        .chain([format!("label=io.chorus.bench={}", std::process::id())])
        .collect()
}

fn containers(filter: &str) -> Vec<String> {
    Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", filter])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn remove_containers(nodes: &[String]) {
    for filter in filters(nodes) {
        let ids = containers(&filter);
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f"])
                .args(&ids)
                .output();
        }
    }
}

/// Past `bound`, kills the nodes, removes the containers and exits 3.
fn watchdog(bound: Duration, nodes: Arc<Mutex<Vec<String>>>, pids: Arc<Mutex<Vec<u32>>>) {
    std::thread::spawn(move || {
        std::thread::sleep(bound);
        eprintln!("sandbox-bench: past its {bound:?} bound; stopping");
        for pid in pids.lock().map(|p| p.clone()).unwrap_or_default() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        remove_containers(&nodes.lock().map(|n| n.clone()).unwrap_or_default());
        std::process::exit(3);
    });
}

#[test]
fn sizes_and_chunked_bodies_read_as_expected() {
    assert_eq!(bytes_of("1.5MiB"), Some(1_572_864));
    assert_eq!(bytes_of("512KiB"), Some(524_288));
    assert_eq!(bytes_of("0B"), Some(0));
    assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), b"abcde");
}
