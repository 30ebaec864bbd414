//! Sweeps: many seeds across scenarios, on all cores, with a progress bar; failing seeds listed
//! with the commands that reproduce them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::run::{repro_command, run, Engine};
use crate::scenario::{Scenario, BUILTINS};

/// One run of a sweep.
#[derive(Clone, Debug)]
pub struct Job {
    /// Scenario name (or file) as given, for the reproduce command.
    pub name: String,
    /// The scenario with overrides applied.
    pub scenario: Scenario,
    /// Seed.
    pub seed: u64,
    /// Engine.
    pub engine: Engine,
}

/// What a sweep found for one job.
#[derive(Clone, Debug)]
pub struct JobResult {
    /// The job.
    pub job: Job,
    /// Violations (as text) or the error that stopped the run.
    pub failures: Vec<String>,
    /// Trace digest (determinism checks compare them).
    pub digest: u64,
    /// Tasks accepted, results in, and simulated time (for the task summary).
    pub tasks: (u64, u64, u64),
    /// Submit → result latencies of the run's tasks, ms.
    pub task_latencies_ms: Vec<u64>,
}

/// Which engines a sweep uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// Discrete-event engine only.
    Des,
    /// turmoil only.
    Turmoil,
    /// Alternate by seed: even seeds on des, odd on turmoil.
    Mix,
}

/// Parses `A..B` (B excluded) or `A..=B`.
pub fn parse_seeds(text: &str) -> Result<std::ops::Range<u64>, String> {
    let bad = || format!("bad seed range {text:?}: expected A..B or A..=B");
    if let Some((a, b)) = text.split_once("..=") {
        let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        return Ok(a..b + 1);
    }
    let (a, b) = text.split_once("..").ok_or_else(bad)?;
    let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a >= b {
        return Err(bad());
    }
    Ok(a..b)
}

/// Expands scenarios × seeds into jobs. `scenarios` may be a name, a file, or `all`.
pub fn jobs(
    scenarios: &str,
    seeds: std::ops::Range<u64>,
    engines: EngineChoice,
    load: impl Fn(&str) -> anyhow::Result<Scenario>,
) -> anyhow::Result<Vec<Job>> {
    let names: Vec<String> = if scenarios == "all" {
        BUILTINS.iter().map(|s| s.to_string()).collect()
    } else {
        scenarios.split(',').map(str::to_owned).collect()
    };
    let mut out = Vec::new();
    for name in names {
        let scenario = load(&name)?;
        // Hostile nodes exist in the discrete-event engine only: `all` leaves such scenarios
        // out of turmoil sweeps, and mixed sweeps run them on des.
        let des_only = !scenario.hostile.is_off();
        if des_only && engines == EngineChoice::Turmoil && scenarios == "all" {
            continue;
        }
        for seed in seeds.clone() {
            let engine = match engines {
                EngineChoice::Des => Engine::Des,
                EngineChoice::Turmoil => Engine::Turmoil,
                EngineChoice::Mix if seed % 2 == 0 || des_only => Engine::Des,
                EngineChoice::Mix => Engine::Turmoil,
            };
            out.push(Job {
                name: name.clone(),
                scenario: scenario.clone(),
                seed,
                engine,
            });
        }
    }
    Ok(out)
}

/// Runs jobs on `threads` threads; `progress` is called after each job with (done, total).
pub fn sweep(
    jobs: &[Job],
    threads: usize,
    determinism: bool,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<JobResult> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(jobs.len()));
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let result = run_job(job, determinism);
                results
                    .lock()
                    .expect("no panics while holding the lock")
                    .push((i, result));
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, jobs.len());
            });
        }
    });
    let mut results = results.into_inner().expect("threads joined");
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

fn run_job(job: &Job, determinism: bool) -> JobResult {
    let once = || run(&job.scenario, job.seed, job.engine, None, false);
    let mut failures = Vec::new();
    let mut tasks = (0, 0, 0);
    let mut task_latencies_ms = Vec::new();
    let digest = match once() {
        Ok(f) => {
            tasks = (
                f.stats.tasks_accepted,
                f.stats.task_result_count(),
                f.stats.end_ms,
            );
            task_latencies_ms = f.stats.task_latencies_ms.clone();
            failures.extend(f.violations.iter().map(|v| v.to_string()));
            if determinism {
                match once() {
                    Ok(again) if again.digest != f.digest => failures.push(format!(
                        "invariant 6 (determinism) violated: trace digests {:016x} and {:016x}",
                        f.digest, again.digest
                    )),
                    Ok(_) => {}
                    Err(e) => failures.push(format!("second run failed: {e:#}")),
                }
            }
            f.digest
        }
        Err(e) => {
            failures.push(format!("run failed: {e:#}"));
            0
        }
    };
    JobResult {
        job: job.clone(),
        failures,
        digest,
        tasks,
        task_latencies_ms,
    }
}

/// `chorus-sim sweep` arguments.
#[derive(clap::Args, Clone)]
pub struct SweepArgs {
    /// Scenario names or files, comma-separated, or `all` for every built-in.
    #[arg(long, default_value = "all")]
    pub scenario: String,
    /// Seeds: `A..B` (B excluded) or `A..=B`.
    #[arg(long, default_value = "0..100")]
    pub seeds: String,
    /// Engines to use.
    #[arg(long, value_enum, default_value = "des")]
    pub engine: EngineChoice,
    /// Overrides applied to every scenario.
    #[command(flatten)]
    pub overrides: Overrides,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run every seed twice and compare trace digests (invariant 6).
    #[arg(long)]
    pub determinism: bool,
}

/// Prints a sweep's outcome; true when every job passed.
pub fn report(results: &[JobResult], wall_s: f64) -> bool {
    let failed: Vec<&JobResult> = results.iter().filter(|r| !r.failures.is_empty()).collect();
    println!(
        "{} runs in {wall_s:.1} s: {} passed, {} failed",
        results.len(),
        results.len() - failed.len(),
        failed.len()
    );
    let accepted: u64 = results.iter().map(|r| r.tasks.0).sum();
    if accepted > 0 {
        let done: u64 = results.iter().map(|r| r.tasks.1).sum();
        let sim_s: f64 = results.iter().map(|r| r.tasks.2 as f64 / 1_000.0).sum();
        let latencies: Vec<u64> = results
            .iter()
            .flat_map(|r| r.task_latencies_ms.iter().copied())
            .collect();
        let ms =
            |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{:.3} s", v as f64 / 1000.0));
        println!(
            "tasks: {accepted} accepted, {done} results ({:.3} results per simulated s per run); submit → result p50 {} · p99 {}",
            done as f64 / sim_s.max(1e-9),
            ms(crate::sink::percentile(&latencies, 50)),
            ms(crate::sink::percentile(&latencies, 99)),
        );
    }
    for r in &failed {
        let j = &r.job;
        println!("FAILED {} seed {} ({}):", j.name, j.seed, j.engine.as_str());
        for f in r.failures.iter().take(3) {
            println!("  {f}");
        }
        println!(
            "  reproduce: {}",
            repro_command(&j.name, &j.scenario, j.seed, j.engine)
        );
    }
    failed.is_empty()
}

/// Wall time since `start`, in seconds.
pub fn elapsed(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// Command-line overrides of a scenario's size, shape and length.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Overrides {
    /// Number of nodes (default: the scenario's).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// How many of them are voters, `n0`… (default: the scenario's; all unless it says).
    #[arg(long)]
    pub voters: Option<usize>,
    /// Who connects to whom: `full`, or `voters` (workers connect only to voters; DES only).
    #[arg(long, value_parser = parse_peering)]
    pub peering: Option<crate::scenario::Peering>,
    /// Simulated time, e.g. 10m, 90s (default: the scenario's).
    #[arg(long, value_parser = crate::scenario::parse_ms)]
    pub duration: Option<u64>,
    /// Make the highest-numbered N workers hostile: they lie to random nodes (DES only; see
    /// the `hostile` scenario). Needs N workers: set `--voters` below `--nodes`.
    #[arg(long)]
    pub hostile: Option<usize>,
}

fn parse_peering(s: &str) -> Result<crate::scenario::Peering, String> {
    match s {
        "full" => Ok(crate::scenario::Peering::Full),
        "voters" => Ok(crate::scenario::Peering::Voters),
        _ => Err(format!("bad peering {s:?}: expected full or voters")),
    }
}

impl Overrides {
    /// Loads scenario `name` (built-in or file) and applies the overrides.
    pub fn apply(&self, name: &str) -> anyhow::Result<Scenario> {
        let mut s = Scenario::load(name)?;
        if let Some(n) = self.nodes {
            s.nodes = n;
            s.voters = s.voters.map(|v| v.min(n));
        }
        if let Some(v) = self.voters {
            s.voters = Some(v);
        }
        if let Some(p) = self.peering {
            s.peering = p;
        }
        if let Some(d) = self.duration {
            s.duration_ms = d;
        }
        if let Some(h) = self.hostile {
            s.hostile.nodes = h;
        }
        s.validate()
            .map_err(|e| anyhow::anyhow!("scenario {name}: {e}"))?;
        Ok(s)
    }
}
