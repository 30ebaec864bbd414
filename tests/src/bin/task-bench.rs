//! The task benchmark (issue 11, "Measure"): a three-node cluster of real `chorus run`
//! processes with Docker sandboxes and warm pools on this machine.
//!
//! * submit → result latency of a `true` task, one at a time, p50/p99, beside `docker run --rm`
//!   of the same image measured in the same run (the ratio's goal: ≤ 0.5);
//! * where the one-at-a-time runs spent their time: p50 of each stage at the worker (from the
//!   results' `timings`) and of the rest (offer, placement, messages), at the submitter;
//! * sustained throughput of `true` tasks submitted all at once (tasks/s), beside the same
//!   number of `docker run --rm` at the cluster's concurrency (its task slots), and placement
//!   fairness (max/min tasks per worker).
//!
//! `cargo build -p chorus-tests --bins && target/debug/task-bench target/debug/chorus-e2e
//! [LATENCY_RUNS] [THROUGHPUT_TASKS]` (a release build: `--release` and `target/release/…`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chorus_tests::{http_request, wait_until, Cluster, Timings, Value};

const IMAGE: &str = "chorus/sandbox:latest";

/// Task slots per node (and warm sandboxes per pool); three nodes.
const SLOTS: usize = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .expect("usage: task-bench PATH-TO-chorus [LATENCY_RUNS] [THROUGHPUT_TASKS]");
    let runs: usize = args.get(2).map_or(50, |n| n.parse().expect("a number"));
    let burst: usize = args.get(3).map_or(200, |n| n.parse().expect("a number"));

    let out = chorus_tests::run_chorus(bin.as_ref(), &["sandbox", "image", "build"]);
    assert!(out.status.success(), "image build: {out:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("bench.toml");
    // Pools deep enough for one task at a time on the worker every tie goes to.
    std::fs::write(
        &config,
        format!("[tasks]\nslots = {SLOTS}\npool_size = {SLOTS}\n"),
    )
    .expect("config");
    let config = config.to_str().expect("utf-8").to_owned();
    let c = Cluster::start_with(
        bin,
        3,
        Timings::FAST,
        &["--docker", "--warm-image", IMAGE, "--config", &config],
    );
    c.wait_agreed(Duration::from_secs(60));
    let ids: Vec<String> = (0..3)
        .map(|i| {
            c.status(i).expect("status")["node_id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    measure(&c, runs, burst);
    drop(c);
    // The nodes were killed: remove what they left (pools, the last runs).
    for node in ids {
        let out = std::process::Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label=io.chorus.node={node}"),
            ])
            .output()
            .expect("docker ps");
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f", id])
                .output();
        }
    }
}

fn measure(c: &Cluster, runs: usize, burst: usize) {
    // Warm-up: every node's pool made and used once.
    for i in 0..6 {
        run_one(c, i % 3);
    }

    let mut chorus: Vec<Duration> = Vec::new();
    let mut docker: Vec<Duration> = Vec::new();
    let mut stages: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for i in 0..runs {
        // Interleaved, so both see the same machine load.
        let (took, r) = run_one(c, i % 3);
        chorus.push(took);
        let run = record_stages(&r, &mut stages);
        let total = took.as_millis() as u64;
        stages
            .entry("elsewhere")
            .or_default()
            .push(total.saturating_sub(run));
        let began = Instant::now();
        let out = std::process::Command::new("docker")
            .args(["run", "--rm", IMAGE, "true"])
            .output()
            .expect("docker run");
        assert!(out.status.success(), "docker run: {out:?}");
        docker.push(began.elapsed());
        // Let the pool refill as it would between tasks that do not come back to back.
        std::thread::sleep(Duration::from_millis(300));
    }
    let (c50, c99) = (pct(&mut chorus, 50), pct(&mut chorus, 99));
    let (d50, d99) = (pct(&mut docker, 50), pct(&mut docker, 99));
    println!(
        "latency of a `true` task, submit -> result, {runs} runs: p50 {:.1} ms, p99 {:.1} ms",
        ms(c50),
        ms(c99)
    );
    println!(
        "docker run --rm {IMAGE} true, {runs} runs: p50 {:.1} ms, p99 {:.1} ms",
        ms(d50),
        ms(d99)
    );
    println!(
        "ratio chorus/docker: p50 {:.2}, p99 {:.2} (goal <= 0.5)",
        ms(c50) / ms(d50),
        ms(c99) / ms(d99)
    );

    let line: Vec<String> = STAGES
        .iter()
        .chain(&["elsewhere"])
        .map(|s| {
            let v = stages.entry(s).or_default();
            format!("{s} {}", pct(v, 50))
        })
        .collect();
    println!(
        "where a one-at-a-time run's time went, p50 ms: {} (elsewhere: the submitter's \
         submit -> result less the run: offer, placement, messages, the client's polls)",
        line.join(", ")
    );

    let began = Instant::now();
    let ids: Vec<(usize, String)> = (0..burst).map(|n| (n % 3, submit(c, n % 3))).collect();
    let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut burst_stages: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for (at, id) in &ids {
        // Polled gently: the bench's own requests must not take the cores the cluster runs on.
        let r = result_every(c, *at, id, Duration::from_millis(20));
        assert_eq!(r["status"], "succeeded", "{r}");
        record_stages(&r, &mut burst_stages);
        *per_worker
            .entry(r["worker"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let took = began.elapsed();
    let max = per_worker.values().max().copied().unwrap_or(0);
    let min = if per_worker.len() < 3 {
        0
    } else {
        per_worker.values().min().copied().unwrap_or(0)
    };
    println!(
        "throughput: {burst} `true` tasks submitted at once through 3 nodes in {:.2} s = {:.1} tasks/s",
        took.as_secs_f64(),
        burst as f64 / took.as_secs_f64()
    );
    let line: Vec<String> = STAGES
        .iter()
        .map(|s| {
            let v = burst_stages.entry(s).or_default();
            format!("{s} {}/{}", pct(v, 50), pct(v, 90))
        })
        .collect();
    println!("the burst's runs, p50/p90 ms: {}", line.join(", "));
    let concurrency = 3 * SLOTS;
    let docker_took = docker_burst(burst, concurrency);
    println!(
        "docker run --rm {IMAGE} true, {burst} runs {concurrency} at a time in {:.2} s = {:.1} \
         runs/s; throughput ratio chorus/docker {:.2} (goal >= 1, then >= 2)",
        docker_took.as_secs_f64(),
        burst as f64 / docker_took.as_secs_f64(),
        docker_took.as_secs_f64() / took.as_secs_f64()
    );
    println!(
        "fairness: tasks per worker {:?}; max/min {}",
        per_worker.values().collect::<Vec<_>>(),
        if min == 0 {
            "inf".to_owned()
        } else {
            format!("{:.2}", max as f64 / min as f64)
        }
    );
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

/// The stages a run's result times at its worker (`timings.STAGE_ms`).
const STAGES: [&str; 5] = ["acquire", "arm", "exec", "cleanup", "release"];

/// Adds run `r`'s stage times to `stages`; returns their sum.
fn record_stages(r: &Value, stages: &mut BTreeMap<&'static str, Vec<u64>>) -> u64 {
    STAGES
        .iter()
        .map(|&stage| {
            let ms = r["timings"][format!("{stage}_ms")].as_u64().unwrap_or(0);
            stages.entry(stage).or_default().push(ms);
            ms
        })
        .sum()
}

fn submit(c: &Cluster, i: usize) -> String {
    let spec = serde_json::json!({ "image": IMAGE, "command": ["true"], "timeout_ms": 60_000 });
    let (code, body) = http_request(
        c.nodes[i].http_port,
        "POST",
        "/tasks",
        Some(&spec.to_string()),
    )
    .expect("the node answers");
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert_eq!(code, 201, "{body}");
    v["task"].as_str().expect("a task id").to_owned()
}

fn result(c: &Cluster, i: usize, id: &str) -> Value {
    result_every(c, i, id, Duration::from_millis(1))
}

fn result_every(c: &Cluster, i: usize, id: &str, every: Duration) -> Value {
    wait_until(Duration::from_secs(300), every, || {
        let (code, body) =
            http_request(c.nodes[i].http_port, "GET", &format!("/tasks/{id}"), None)?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && !v["result"].is_null()).then(|| v["result"].clone())
    })
    .expect("a result within 300 s")
}

/// One task, submit to result, at node `i`: how long, and its result.
fn run_one(c: &Cluster, i: usize) -> (Duration, Value) {
    let began = Instant::now();
    let id = submit(c, i);
    let r = result(c, i, &id);
    assert_eq!(r["status"], "succeeded", "{r}");
    (began.elapsed(), r)
}

/// `n` runs of `docker run --rm IMAGE true`, `concurrency` at a time: how long all took.
fn docker_burst(n: usize, concurrency: usize) -> Duration {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    let out = std::process::Command::new("docker")
                        .args(["run", "--rm", IMAGE, "true"])
                        .output()
                        .expect("docker run");
                    assert!(out.status.success(), "docker run: {out:?}");
                }
            });
        }
    });
    began.elapsed()
}
