//! `chorus-real`: a real cluster under real faults, for as long as you like (the soak beside the
//! bounded tests in `tests/real_faults.rs`). N `chorus` processes, each in its own network
//! namespace; one fault kind (or all, in turn) applied again and again; the failover time of
//! each measured; at the end the nodes' logs merged and checked against docs/design.md §5.
//!
//! With `--tasks`, every node also runs tasks (Docker), and tasks of every ending are submitted
//! throughout; each must end as written, with exactly one result, and no sandbox container
//! may be left. Each node's footprint is sampled through the run for the slope of its growth.
//!
//! Needs root (network namespaces), iproute2 and nftables. Build the node first:
//! `cargo build -p chorus-tests --bins`, then e.g.
//! `target/debug/chorus-real --fault all --faults 20` or `--fault all --duration 30m`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use chorus_tests::netns::{NetCluster, NodeSetup};
use chorus_tests::soak::{Growth, TaskSoak};
use chorus_tests::Timings;
use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Fault {
    /// The admin and one more cut off from the other three, then healed.
    Partition,
    /// The admin's outbound links cut (it hears everyone, nobody hears it), then healed.
    Cut,
    /// The admin paused (SIGSTOP) for twice the election timeout, then resumed.
    Pause,
    /// The admin killed (SIGKILL), then restarted.
    Kill,
    /// Each of the above in turn.
    All,
}

/// A real cluster under real faults: N `chorus` nodes in network namespaces, one fault kind (or
/// all in turn) applied again and again, the failover time of each printed, and the nodes' merged
/// logs checked against docs/design.md §5 at the end. Needs root, iproute2 and nftables.
#[derive(Parser)]
#[command(name = "chorus-real", version)]
struct Args {
    /// Which fault to apply.
    #[arg(long, value_enum, default_value = "all")]
    fault: Fault,
    /// How many faults to apply (with `--duration`, whichever ends first).
    #[arg(long, default_value_t = 20)]
    faults: usize,
    /// Stop applying faults after this long, e.g. "30m" (default: no limit).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Number of nodes (all voters).
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Heartbeat interval, ms.
    #[arg(long, default_value_t = 1_000)]
    heartbeat_ms: u64,
    /// Election timeout window, `MIN..MAX` ms.
    #[arg(long, default_value = "3000..4500")]
    election_timeout_ms: String,
    /// Lose this percentage of the packets between nodes, throughout.
    #[arg(long, default_value_t = 0)]
    loss: u32,
    /// Hold every packet between nodes for a random `MIN..MAX` ms, throughout (e.g. 50..150).
    #[arg(long)]
    delay_ms: Option<String>,
    /// Judge liveness on the merged history against this bound, ms (default: the simulator's,
    /// which has no term for latency: widen it with --loss or --delay-ms).
    #[arg(long)]
    liveness_bound_ms: Option<u64>,
    /// Run tasks too: every node gets `--docker`, and tasks of every ending (success, failure,
    /// timeout, out of memory, cancel) are submitted before and during each fault. Each must
    /// end as written with exactly one result; no sandbox container may be left. Needs Docker.
    #[arg(long)]
    tasks: bool,
    /// Keep each node's whole event log (no pruning at snapshots), so the merged check covers
    /// the whole run rather than what the logs retain at its end.
    #[arg(long)]
    keep_history: bool,
    /// Never kill or pause n0 (when it is the admin, a kill or pause turns into a partition):
    /// one process lives through the whole run, so its memory slope covers it.
    #[arg(long)]
    spare_n0: bool,
    /// Sample each node's memory, descriptors and data size this often, seconds (written to
    /// `resources.csv` in the kept data directory; their slopes printed at the end).
    #[arg(long, default_value_t = 30)]
    sample_secs: u64,
    /// The `chorus` binary (default: `chorus-e2e` next to this program).
    #[arg(long)]
    bin: Option<std::path::PathBuf>,
    /// Test hook: this long after the delay starts, kill the first node's delaying thread (the
    /// run must then fail at once, naming it). Needs --delay-ms.
    #[arg(long, hide = true)]
    kill_injector_after_ms: Option<u64>,
}

/// Each task submitted has exactly one result, at its submitter, in the merged history — or,
/// where the submitter's log was pruned (the header's `pruned`), at most one: its result may
/// be older than the snapshot the log now starts at.
fn one_result_each(c: &NetCluster, soak: &TaskSoak, trace: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(trace).unwrap_or_default();
    let header: serde_json::Value = text
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    soak.submitted()
        .filter_map(|(at, id)| {
            let node = &c.nodes[at].id;
            let result = format!(r#""kind":"task_result","node":"{node}","task":"{id}""#);
            let pruned = header["pruned"].get(node.as_str()).is_some();
            match text.matches(&result).count() {
                1 => None,
                0 if pruned => None,
                n => Some(format!(
                    "task {id} has {n} results at its submitter n{at} in the merged history{}",
                    if pruned { " (its log pruned)" } else { "" }
                )),
            }
        })
        .collect()
}

/// A node config that never prunes the event log (`--keep-history`).
fn keep_history_config() -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("chorus-real-")
        .suffix(".toml")
        .tempfile()?;
    f.write_all(b"snapshot_every_events = 1000000000\n")?;
    f.flush()?;
    Ok(f)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: expected e.g. 90s, 30m, 2h"))?;
    Ok(Duration::from_secs(match unit {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("`{s}`: unit must be s, m or h")),
    }))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some((min, max)) = args
        .election_timeout_ms
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
    else {
        eprintln!("chorus-real: --election-timeout-ms must be MIN..MAX");
        return ExitCode::from(2);
    };
    let timings = Timings {
        heartbeat_ms: args.heartbeat_ms,
        election_min_ms: min,
        election_max_ms: max,
        discovery_ms: 2_000,
    };
    let bin = args.bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("chorus-e2e")
    });
    let bin = bin.to_string_lossy().into_owned();
    let bound = Duration::from_millis(timings.discovery_ms + 10 * max + 2 * args.heartbeat_ms);
    println!(
        "chorus-real: {} nodes, heartbeat {} ms, election {min}..{max} ms, fault {:?}",
        args.nodes, args.heartbeat_ms, args.fault
    );
    let delay = match args.delay_ms.as_deref().map(|d| d.split_once("..")) {
        None => None,
        Some(Some((a, b))) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(a), Ok(b)) if a <= b => Some((a, b)),
            _ => {
                eprintln!("chorus-real: --delay-ms must be MIN..MAX with MIN <= MAX");
                return ExitCode::from(2);
            }
        },
        Some(None) => {
            eprintln!("chorus-real: --delay-ms must be MIN..MAX");
            return ExitCode::from(2);
        }
    };
    if args.kill_injector_after_ms.is_some() && delay.is_none() {
        eprintln!("chorus-real: --kill-injector-after-ms needs --delay-ms");
        return ExitCode::from(2);
    }
    if args.loss > 100 {
        eprintln!("chorus-real: --loss is a percentage");
        return ExitCode::from(2);
    }
    if args.tasks {
        let out = std::process::Command::new(&bin)
            .args(["sandbox", "image", "build"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                eprintln!(
                    "chorus-real: --tasks needs the sandbox image, and it did not build (is Docker running?): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("chorus-real: {bin}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // The config that keeps whole logs: read again at every restart, removed (by `tempfile`)
    // when this run ends, however it ends.
    let history = match args.keep_history.then(keep_history_config).transpose() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("chorus-real: a config file for --keep-history: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut c = NetCluster::start_with(&bin, args.nodes, |_| {
        let mut extra = Vec::new();
        if args.tasks {
            extra.extend(["--docker", "--warm-image", chorus_tests::soak::IMAGE].map(String::from));
        }
        if let Some(h) = &history {
            extra.extend(["--config".to_owned(), h.path().display().to_string()]);
        }
        NodeSetup {
            args: extra,
            ..NodeSetup::plain(timings)
        }
    });
    let mut soak = args.tasks.then(TaskSoak::new);
    let mut growth = Growth::new(args.nodes, Duration::from_secs(args.sample_secs.max(1)));
    if args.loss > 0 {
        c.set_loss(args.loss);
    }
    if let Some((a, b)) = delay {
        c.set_delay(a, b);
        println!(
            "every packet between nodes held {a}..{b} ms, {} % lost",
            args.loss
        );
        if let Some(after_ms) = args.kill_injector_after_ms {
            let switch = c.injector_kill_switch().expect("a delay in force");
            let ns = c.nodes[0].ns.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(after_ms));
                eprintln!("chorus-real: test hook: killing the delayer of {ns}");
                switch.kill(&ns);
            });
        }
    }
    let started = Instant::now();
    let ((_, _, _), cold) = c.wait_agreed(bound);
    println!("cold start: agreed after {cold:?}");
    growth.sample_if_due(&c);
    let kinds: Vec<Fault> = match args.fault {
        Fault::All => vec![Fault::Partition, Fault::Cut, Fault::Pause, Fault::Kill],
        one => vec![one],
    };
    let mut times: Vec<(Fault, Duration)> = Vec::new();
    // A fault injector that stopped fails the run at once (issue 39): its numbers would
    // describe another run than the one stated.
    let injectors_alive = |c: &NetCluster| match c.check_injectors() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("chorus-real: a fault injector stopped: {e}");
            false
        }
    };
    for k in 0..args.faults {
        if args.duration.is_some_and(|d| started.elapsed() > d) {
            break;
        }
        if !injectors_alive(&c) {
            c.keep_data();
            return ExitCode::FAILURE;
        }
        let mut kind = kinds[k % kinds.len()];
        let ((_, term, admin), _) = c.wait_agreed(bound);
        if args.spare_n0 && admin == 0 && matches!(kind, Fault::Kill | Fault::Pause) {
            kind = Fault::Partition;
        }
        growth.sample_if_due(&c);
        // Tasks submitted before each fault (running when it comes) and while it is in force.
        let mut tasks_round = |c: &NetCluster| {
            if let Some(s) = soak.as_mut() {
                s.round(c);
            }
        };
        tasks_round(&c);
        let n = args.nodes;
        let others: Vec<usize> = (0..n).filter(|i| *i != admin).collect();
        let failover = match kind {
            Fault::Partition => {
                let minority: Vec<usize> = (0..n.saturating_sub(1) / 2)
                    .map(|d| (admin + d) % n)
                    .collect();
                let majority: Vec<usize> = (0..n).filter(|i| !minority.contains(i)).collect();
                c.partition(&[&minority, &majority]);
                let (_, t) = c.wait_agreed_among(&majority, bound);
                tasks_round(&c);
                c.heal();
                t
            }
            Fault::Cut => {
                c.cut(&[admin], &others);
                let (_, t) = c.wait_agreed_among(&others, bound);
                tasks_round(&c);
                c.heal();
                t
            }
            Fault::Pause => {
                c.pause(admin);
                let (_, t) = c.wait_agreed_among(&others, bound);
                tasks_round(&c);
                c.sleep(Duration::from_millis(2 * max).saturating_sub(t));
                c.resume(admin);
                t
            }
            Fault::Kill => {
                c.kill(admin);
                let (_, t) = c.wait_agreed_among(&others, bound);
                tasks_round(&c);
                c.restart(admin);
                t
            }
            Fault::All => unreachable!("expanded above"),
        };
        let ((_, new_term, _), _) = c.wait_agreed(bound);
        println!(
            "fault {:>3} {kind:?}: n{admin} of term {term} replaced after {:.3} s (term {new_term})",
            k + 1,
            failover.as_secs_f64()
        );
        times.push((kind, failover));
    }
    growth.sample_if_due(&c);
    // Every task must end, as written, once the faults stop (three attempts of the longest
    // timeout, and slack for a placement after the last heal).
    let task_problems = match soak.as_mut() {
        Some(s) => s.finish(&c, Duration::from_secs(240)),
        None => Vec::new(),
    };
    println!("failover, from the fault to a new admin the others agree on:");
    for kind in &kinds {
        let mut t: Vec<f64> = times
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, d)| d.as_secs_f64())
            .collect();
        if t.is_empty() {
            continue;
        }
        t.sort_by(f64::total_cmp);
        let pct = |p: usize| {
            t[((t.len() * p).div_ceil(100))
                .saturating_sub(1)
                .min(t.len() - 1)]
        };
        println!(
            "  {:<9} n={:<3} p50 {:.3} s  p99 {:.3} s  max {:.3} s",
            format!("{kind:?}"),
            t.len(),
            pct(50),
            pct(99),
            t[t.len() - 1]
        );
    }
    // What grows over a run: memory and descriptors of each process (a restarted node's are
    // its last process's), the data directory across restarts; least-squares slopes over the
    // samples.
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    println!(
        "nodes, sampled every {} s over {minutes:.1} min (first -> last, slope):",
        args.sample_secs
    );
    for line in growth.summary() {
        println!("  {line}");
    }
    let csv = c.root().join("resources.csv");
    if let Err(e) = growth.write_csv(&csv) {
        eprintln!("chorus-real: {}: {e}", csv.display());
    }
    if let Some(s) = &soak {
        for line in s.summary() {
            println!("{line}");
        }
    }
    println!("what the fault injectors did:");
    for line in c.injector_summary() {
        println!("  {line}");
    }
    if !injectors_alive(&c) {
        c.keep_data();
        return ExitCode::FAILURE;
    }
    let (trace, mut problems) = c.stop_and_check_within(args.liveness_bound_ms);
    println!("merged history: {}", trace.display());
    problems.extend(task_problems);
    if let Some(s) = &soak {
        problems.extend(one_result_each(&c, s, &trace));
        // A stopped node removes its sandboxes, and a killed one reaps them when it restarts.
        let mut left = 0;
        for (i, node) in c.nodes.iter().enumerate() {
            let containers = chorus_tests::containers_of(&node.id);
            if !containers.is_empty() {
                // What each was (task or pool, its owner process, when made) says which path
                // left it.
                let what: Vec<String> = containers.iter().map(|c| describe(c)).collect();
                problems.push(format!(
                    "n{i} left {} sandbox containers: {what:?}",
                    containers.len()
                ));
            }
            left += containers.len();
        }
        println!("sandbox containers left by the nodes: {left}");
    }
    c.keep_data();
    if problems.is_empty() {
        println!("check: invariants 1-5 hold on the merged history, and every log replays to what its node recorded");
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            println!("VIOLATION {p}");
        }
        ExitCode::FAILURE
    }
}

/// One container as `docker inspect` tells it: name, state, creation time and labels.
fn describe(container: &str) -> String {
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.Name}} {{.State.Status}} created {{.Created}} labels {{json .Config.Labels}}",
            container,
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        _ => container.to_owned(),
    }
}
