//! `chorus-sim`: run, sweep and replay seeded simulations of a CHORUS cluster; the Raft paper's
//! election-timing experiment; a timeline picture of a trace.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use chorus_sim::run::{repro_command, run_to_bytes, run_with, Engine};
use chorus_sim::scenario::{Scenario, BUILTINS};
use chorus_sim::sink::{Finished, Sink};
use clap::{Parser, Subcommand};

use chorus_sim::sweep::{self, Overrides, SweepArgs};
use chorus_sim::timing;
use indicatif::{ProgressBar, ProgressStyle};

/// Seeded simulations of a CHORUS cluster. Every run checks the invariants of docs/design.md §5 and
/// prints the one command that reproduces a violation.
#[derive(Parser)]
#[command(name = "chorus-sim", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one simulation, print a summary; exit 1 on any invariant violation.
    Run(RunArgs),
    /// Run many seeds on all cores; list failing seeds with the commands that reproduce them.
    Sweep(SweepArgs),
    /// Generate a whole scenario from each seed (nodes, settings, faults, membership changes,
    /// tasks), run it on the discrete-event engine with the checker, and shrink each failure to
    /// a small scenario that breaks the same invariant on the same seed.
    Fuzz(FuzzArgs),
    /// Re-run a trace's header and confirm the new trace is byte-identical.
    Replay {
        /// A trace written by `run --trace`.
        trace: PathBuf,
    },
    /// Check any trace — a simulation's, or a real cluster's merged logs (`chorus replay
    /// --data-dir A --data-dir B … --trace FILE`) — against the invariants of docs/design.md §5; exit 1
    /// and print the lines that break one.
    Check {
        /// A JSON Lines trace (docs/design.md §6).
        trace: PathBuf,
        /// Judge liveness against this bound instead of the header's (ms): the default has no
        /// term for latency, so a real run over slow or lossy links needs a wider one.
        #[arg(long, value_name = "MS")]
        liveness_bound_ms: Option<u64>,
    },
    /// The Raft paper's election-timing experiment (Ongaro & Ousterhout §9.3, Fig. 16).
    Timing(TimingArgs),
    /// How cost grows with the cluster: one scenario (the cold-start storm) at each size, each
    /// in its own memory-limited process; a table of wall time, peak memory, messages per
    /// election and simulated seconds per wall second, and optionally JSON and an SVG.
    Scale(chorus_sim::scale::ScaleArgs),
    /// Draw a trace as an SVG timeline: one row per node, coloured by role, with each admin's
    /// lease, the partitions and the crashes.
    Svg {
        /// A trace written by `run --trace`, or a real cluster's merged trace (`chorus replay
        /// --data-dir A --data-dir B … --trace FILE`): rows named by peer id, in host time.
        trace: PathBuf,
        /// Where to write the picture.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// List the built-in scenarios, or print one as its TOML file.
    Scenarios {
        /// Print this built-in's TOML as written (a starting point for a scenario of your own).
        #[arg(long, value_name = "NAME")]
        show: Option<String>,
    },
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// A built-in scenario name (see `chorus-sim scenarios`) or a TOML file; `NAME+tasks`
    /// adds a background task workload to one that has none (e.g. `storm+tasks`).
    #[arg(long, default_value = "steady")]
    scenario: String,
    /// The scenario as a positional argument (`chorus-sim run FILE --seed S`), in place of
    /// `--scenario`.
    #[arg(value_name = "SCENARIO", conflicts_with = "scenario")]
    file: Option<String>,
    #[command(flatten)]
    overrides: Overrides,
    /// The seed; the same seed gives a byte-identical trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Which engine runs it.
    #[arg(long, value_enum, default_value = "des")]
    engine: Engine,
    /// Write the JSON Lines trace here.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Include full `step` records (every event and command) in the trace.
    #[arg(long)]
    steps: bool,
    /// Also draw the run as an SVG timeline.
    #[arg(long)]
    svg: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(args) => cmd_run(args),
        Cmd::Sweep(args) => cmd_sweep(args),
        Cmd::Fuzz(args) => cmd_fuzz(args),
        Cmd::Replay { trace } => cmd_replay(trace),
        Cmd::Check {
            trace,
            liveness_bound_ms,
        } => cmd_check(trace, liveness_bound_ms),
        Cmd::Timing(args) => cmd_timing(args),
        Cmd::Scale(args) => chorus_sim::scale::cmd_scale(&args),
        Cmd::Svg { trace, out } => cmd_svg(trace, out),
        Cmd::Scenarios { show: None } => {
            for name in BUILTINS {
                let s = chorus_sim::scenario::builtin(name).expect("built-in");
                println!("{name:<16} {}", s.description);
            }
            Ok(true)
        }
        Cmd::Scenarios { show: Some(name) } => match chorus_sim::scenario::builtin_text(&name) {
            Some(text) => {
                print!("{text}");
                Ok(true)
            }
            None => Err(anyhow::anyhow!(
                "no built-in scenario {name:?} (one of {})",
                BUILTINS.join(", ")
            )),
        },
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chorus-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn cmd_check(path: PathBuf, bound_ms: Option<u64>) -> anyhow::Result<bool> {
    let started = Instant::now();
    let checked = chorus_sim::checker::check_file(&path, bound_ms)?;
    println!(
        "checked {} ({} engine, {} nodes, {} lines, {} of trace time, liveness bound {}) in {:.2} s",
        path.display(),
        checked.header.engine,
        checked.header.nodes,
        checked.lines,
        chorus_sim::scenario::format_ms(checked.end_ms),
        chorus_sim::scenario::format_ms(checked.header.liveness_bound_ms),
        started.elapsed().as_secs_f64()
    );
    for (fault, n, p50, p99, max) in checked.failovers.summary() {
        println!(
            "failover after a {fault} of the admin (to the next admin's election): n={n} p50 {:.3} s · p99 {:.3} s · max {:.3} s",
            p50 as f64 / 1000.0,
            p99 as f64 / 1000.0,
            max as f64 / 1000.0
        );
    }
    if checked.violations.is_empty() {
        println!("invariants 1-5, 7 and 8 hold");
        return Ok(true);
    }
    for v in &checked.violations {
        println!("VIOLATION {v}");
        if let Some(text) = checked.quoted.get(&v.line) {
            println!("  line {}: {text}", v.line);
        }
    }
    Ok(false)
}

fn cmd_run(mut args: RunArgs) -> anyhow::Result<bool> {
    if let Some(file) = args.file.take() {
        args.scenario = file;
    }
    let scenario = args.overrides.apply(&args.scenario)?;
    let trace_path = args
        .trace
        .clone()
        .or_else(|| args.svg.as_ref().map(|p| p.with_extension("trace.jsonl")));
    let out: Option<Box<dyn Write>> = match &trace_path {
        Some(p) => Some(Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ))),
        None => None,
    };
    let started = Instant::now();
    let finished = run_with(
        &scenario,
        args.seed,
        args.engine,
        out,
        args.steps,
        Sink::exit_after_run,
    )?;
    let wall = started.elapsed();
    print_summary(
        &scenario,
        args.seed,
        args.engine,
        &finished,
        wall.as_secs_f64(),
    );
    if let (Some(svg), Some(trace)) = (&args.svg, &trace_path) {
        cmd_svg(trace.clone(), svg.clone())?;
    }
    Ok(report_violations(
        &scenario,
        args.seed,
        args.engine,
        &finished,
        &args.scenario,
    ))
}

/// Prints the run summary.
pub fn print_summary(s: &Scenario, seed: u64, engine: Engine, f: &Finished, wall_s: f64) {
    let st = &f.stats;
    let sim_s = s.duration_ms as f64 / 1000.0;
    println!(
        "scenario {} · engine {} · {} nodes ({} voters{}) · seed {seed}",
        s.name,
        engine.as_str(),
        s.nodes,
        s.voter_count(),
        if s.hostile.is_off() {
            String::new()
        } else {
            format!(", {} hostile", s.hostile.nodes)
        }
    );
    println!(
        "simulated {} in {wall_s:.2} s of wall time ({:.0} simulated s per wall s)",
        chorus_sim::scenario::format_ms(s.duration_ms),
        sim_s / wall_s.max(1e-9)
    );
    let per_election = if st.elections > 0 {
        st.election_messages as f64 / st.elections as f64
    } else {
        0.0
    };
    println!(
        "elections {} · max term {} · messages {} ({} for elections: {per_election:.0} per election = {:.2} n)",
        st.elections,
        st.max_term,
        st.messages,
        st.election_messages,
        per_election / s.nodes as f64
    );
    let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{:.3} s", v as f64 / 1000.0));
    println!(
        "time without admin: p50 {} · p99 {} · max {} ({} outages, first one the cold start)",
        ms(st.outage_percentile(50)),
        ms(st.outage_percentile(99)),
        ms(st.outages_ms.iter().max().copied()),
        st.outages_ms.len()
    );
    println!(
        "best-scored live voter won {} of {} elections",
        st.best_won, st.elections
    );
    if st.tasks_accepted > 0 {
        let by_status: Vec<String> = st
            .task_results
            .iter()
            .map(|(status, n)| format!("{status} {n}"))
            .collect();
        println!(
            "tasks: {} accepted · {} results ({}) · {} unfinished · throughput {:.3} results per simulated s",
            st.tasks_accepted,
            st.task_result_count(),
            by_status.join(", "),
            st.tasks_unfinished(),
            st.task_throughput()
        );
        println!(
            "submit → result latency: p50 {} · p99 {} · max {}",
            ms(st.task_latency_percentile(50)),
            ms(st.task_latency_percentile(99)),
            ms(st.task_latencies_ms.iter().max().copied())
        );
    }
    if !st.refused.is_empty() {
        let by_reason: Vec<String> = st.refused.iter().map(|(r, n)| format!("{r} {n}")).collect();
        println!("refused messages: {}", by_reason.join(" · "));
    }
    // Lines as in the file (and as `replay` counts them): the header and every record.
    println!("trace: {} lines, digest {:016x}", st.lines + 1, f.digest);
}

/// Prints violations with context and the reproduce command; true when there were none.
pub fn report_violations(
    s: &Scenario,
    seed: u64,
    engine: Engine,
    f: &Finished,
    name: &str,
) -> bool {
    if f.violations.is_empty() {
        println!("invariants: all hold");
        return true;
    }
    println!(
        "INVARIANT VIOLATIONS ({}), seed {seed}:",
        f.violations.len()
    );
    for v in f.violations.iter().take(10) {
        println!("  {v}");
    }
    println!("trace lines up to the first violation:");
    for l in &f.context {
        println!("  {l}");
    }
    println!(
        "reproduce with:\n  {}",
        repro_command(name, s, seed, engine)
    );
    false
}

fn cmd_replay(path: PathBuf) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let first = text.lines().next().unwrap_or_default();
    let header: chorus_sim::trace::Header = serde_json::from_str(first)
        .with_context(|| format!("{}: line 1 is not a trace header", path.display()))?;
    let engine = Engine::parse(&header.engine)
        .ok_or_else(|| anyhow::anyhow!("unknown engine {:?} in the header", header.engine))?;
    let (again, finished) = run_to_bytes(&header.spec, header.seed, engine, header.steps)?;
    if again == text.as_bytes() {
        println!(
            "replay of {} (seed {}, {} lines): byte-identical",
            path.display(),
            header.seed,
            finished.stats.lines + 1
        );
        Ok(true)
    } else {
        let new_text = String::from_utf8_lossy(&again);
        let line = text.lines().zip(new_text.lines()).position(|(a, b)| a != b);
        match line {
            Some(i) => println!(
                "replay DIFFERS at line {}:\n  recorded: {}\n  replayed: {}",
                i + 1,
                text.lines().nth(i).unwrap_or_default(),
                new_text.lines().nth(i).unwrap_or_default()
            ),
            None => println!(
                "replay DIFFERS in length: recorded {} lines, replayed {}",
                text.lines().count(),
                new_text.lines().count()
            ),
        }
        Ok(false)
    }
}

fn cmd_svg(trace: PathBuf, out: PathBuf) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(&trace)
        .with_context(|| format!("cannot read {}", trace.display()))?;
    let (header, lines) = chorus_sim::trace::read(&text)?;
    let svg = chorus_sim::svg::render(&header, &lines);
    std::fs::write(&out, svg).with_context(|| format!("cannot write {}", out.display()))?;
    println!("timeline: {}", out.display());
    Ok(true)
}

/// `chorus-sim timing` arguments.
#[derive(clap::Args, Clone)]
struct TimingArgs {
    /// Trials per range (default: the paper's, 1000; 100 for 150-150).
    #[arg(long)]
    trials: Option<usize>,
    /// Only these ranges, e.g. 150-155,12-24 (default: all of the paper's).
    #[arg(long)]
    ranges: Option<String>,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn progress_bar(total: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:40}] {pos}/{len} ({eta} left)")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

fn cmd_sweep(args: SweepArgs) -> anyhow::Result<bool> {
    let seeds = sweep::parse_seeds(&args.seeds).map_err(anyhow::Error::msg)?;
    let jobs = sweep::jobs(&args.scenario, seeds, args.engine, |name| {
        args.overrides.apply(name)
    })?;
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let bar = progress_bar(jobs.len(), "sweep");
    let start = Instant::now();
    let results = sweep::sweep(&jobs, threads, args.determinism, &|done, _| {
        bar.set_position(done as u64)
    });
    bar.finish_and_clear();
    Ok(sweep::report(&results, sweep::elapsed(start)))
}

/// `chorus-sim fuzz` arguments.
#[derive(clap::Args, Clone)]
struct FuzzArgs {
    /// Seeds: `A..B` (B excluded) or `A..=B`. Default: `--seed` and `--count`.
    #[arg(long)]
    seeds: Option<String>,
    /// First seed (with `--count`).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many seeds from `--seed` on.
    #[arg(long, default_value_t = 100)]
    count: u64,
    /// Worker threads (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Write each failure, shrunk, as `DIR/fuzz-SEED-invN.toml` (and the scenario as generated
    /// as `DIR/fuzz-SEED-generated.toml`).
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    /// No operator membership changes, no standbys, autopilot off.
    #[arg(long)]
    no_membership: bool,
    /// Allow heartbeat intervals up to just below a node's own lease while other nodes have
    /// shorter election timeouts (issue 32, finding 3).
    #[arg(long)]
    mixed_timing: bool,
    /// No task workloads.
    #[arg(long)]
    no_tasks: bool,
    /// Report failures without shrinking them.
    #[arg(long)]
    no_shrink: bool,
    /// Print each seed's generated scenario as TOML instead of running it.
    #[arg(long)]
    show: bool,
}

fn cmd_fuzz(args: FuzzArgs) -> anyhow::Result<bool> {
    use chorus_sim::generate;
    let seeds: Vec<u64> = match &args.seeds {
        Some(text) => sweep::parse_seeds(text)
            .map_err(anyhow::Error::msg)?
            .collect(),
        None => (args.seed..args.seed.saturating_add(args.count)).collect(),
    };
    let opts = generate::Options {
        membership: !args.no_membership,
        mixed_timing: args.mixed_timing,
        tasks: !args.no_tasks,
    };
    if args.show {
        for &seed in &seeds {
            let s = generate::generate(seed, &opts);
            println!("# seed {seed}\n{}", toml::to_string(&s)?);
        }
        return Ok(true);
    }
    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let start = Instant::now();
    let last = std::sync::Mutex::new(Instant::now());
    let outcomes = generate::fuzz(
        &seeds,
        &opts,
        threads,
        !args.no_shrink,
        &|done, total, failed| {
            let mut last = last.lock().expect("no panics while holding the lock");
            if last.elapsed().as_secs_f64() >= 3.0 || done == total {
                *last = Instant::now();
                eprintln!(
                    "fuzz: {done}/{total} · {failed} failed · {:.1} scenarios/s",
                    done as f64 / sweep::elapsed(start).max(1e-9)
                );
            }
        },
    );
    let wall = sweep::elapsed(start);
    let failed: Vec<&generate::Outcome> = outcomes.iter().filter(|o| o.failure.is_some()).collect();
    println!(
        "{} scenarios in {wall:.1} s ({:.1} per s, {threads} threads): {} passed, {} failed",
        outcomes.len(),
        outcomes.len() as f64 / wall.max(1e-9),
        outcomes.len() - failed.len(),
        failed.len()
    );
    for o in failed {
        let (invariant, message) = o.failure.as_ref().expect("filtered");
        println!("FAILED seed {}: {message}", o.seed);
        let Some(shrunk) = &o.shrunk else { continue };
        let (s, g) = (&shrunk.scenario, &o.scenario);
        println!(
            "  shrunk ({} runs): {} → {} events, {} → {} nodes, {} → {}",
            shrunk.runs,
            g.events.len(),
            s.events.len(),
            g.nodes,
            s.nodes,
            chorus_sim::scenario::format_ms(g.duration_ms),
            chorus_sim::scenario::format_ms(s.duration_ms)
        );
        if let Some(dir) = &args.save {
            let path = dir.join(format!("fuzz-{}-inv{invariant}.toml", o.seed));
            let text = generate::to_toml(shrunk, g, o.seed, &opts, &path.display().to_string());
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            let generated = dir.join(format!("fuzz-{}-generated.toml", o.seed));
            std::fs::write(&generated, toml::to_string(g)?)
                .with_context(|| format!("cannot write {}", generated.display()))?;
            println!(
                "  saved: {} (reproduce: chorus-sim run {} --seed {})",
                path.display(),
                path.display(),
                o.seed
            );
        }
    }
    Ok(outcomes.iter().all(|o| o.failure.is_none()))
}

fn cmd_timing(args: TimingArgs) -> anyhow::Result<bool> {
    let wanted: Option<Vec<(u64, u64)>> = args
        .ranges
        .as_deref()
        .map(|r| {
            r.split(',')
                .map(|p| {
                    let (a, b) = p
                        .split_once('-')
                        .ok_or_else(|| anyhow::anyhow!("bad range {p:?}: expected MIN-MAX"))?;
                    Ok((a.trim().parse()?, b.trim().parse()?))
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .transpose()?;
    println!("Raft paper Fig. 16 on the discrete-event engine: 5 nodes, ~15 ms broadcast, heartbeat = min/2, score bias off");
    println!(
        "{:>10} {:>7} {:>10} {:>10} {:>10} {:>10}  note",
        "range ms", "trials", "mean", "median", "p99", "max"
    );
    for &(min, max, paper_trials) in timing::PAPER_RANGES {
        if wanted.as_ref().is_some_and(|w| !w.contains(&(min, max))) {
            continue;
        }
        let trials = args.trials.unwrap_or(paper_trials);
        let r = timing::measure(
            min,
            max,
            trials,
            args.seed.wrapping_mul(1_000_003) ^ (min << 20) ^ max,
        )?;
        println!(
            "{:>10} {:>7} {:>8.0}ms {:>8}ms {:>8}ms {:>8}ms  {}",
            format!("{min}-{max}"),
            r.trials,
            r.mean(),
            r.percentile(50),
            r.percentile(99),
            r.percentile(100),
            timing::paper_note(min, max)
        );
    }
    Ok(true)
}
