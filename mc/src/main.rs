//! `chorus-mc`: explores every interleaving of a small cluster of real cores to a depth, and
//! prints the shortest path to any broken invariant.

use std::process::ExitCode;

use chorus_mc::{explore, walks, Limits, Model, Outcome, Reached, Start};
use clap::{Parser, ValueEnum};

/// Model-check the CHORUS core: every interleaving of message deliveries, duplicates and
/// losses, timer firings, crashes and restarts, partitions, and operator membership changes
/// and handovers on a small cluster, breadth-first to a depth. Each transition is a real `Core::step`.
/// Exit 1 with the shortest counterexample when an invariant breaks (see
/// `mc/src/check.rs`: election, lease, vote, known, chain, completeness, genesis, paxos).
#[derive(Parser)]
#[command(name = "chorus-mc", version)]
struct Args {
    /// Nodes, all admin-eligible (named a, b, c, …; at most 8).
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// The first electorate's size (`bootstrap_expect`); the other nodes start as standbys.
    #[arg(long, default_value_t = 3)]
    expect: u32,
    /// Start from a cold start (bootstrap explored) or from an elected, established admin.
    #[arg(long, value_enum, default_value_t = StartArg::Elected)]
    start: StartArg,
    /// Actions per path at most.
    #[arg(long, default_value_t = 12)]
    depth: usize,
    /// Stop after this many distinct states.
    #[arg(long, default_value_t = 5_000_000)]
    max_states: u64,
    /// Crashes per path (a crashed node may restart at any time).
    #[arg(long, default_value_t = 0)]
    crashes: u8,
    /// Single messages lost per path (partitions lose whole groups' messages besides).
    #[arg(long, default_value_t = 0)]
    drops: u8,
    /// Messages delivered twice per path.
    #[arg(long, default_value_t = 0)]
    dups: u8,
    /// Operator membership changes per path (asked at the admin).
    #[arg(long, default_value_t = 1)]
    changes: u8,
    /// Partitions per path (heals are free).
    #[arg(long, default_value_t = 1)]
    splits: u8,
    /// Timer firings per path.
    #[arg(long, default_value_t = 8)]
    fires: u8,
    /// Handovers per path: `members transfer` asked of the admin, or a graceful stop of any
    /// node (an admin hands over first).
    #[arg(long, default_value_t = 0)]
    handovers: u8,
    /// Turn autopilot on (the admin promotes standbys and removes silent voters itself).
    #[arg(long)]
    autopilot: bool,
    /// Also ask followers for changes (they forward them to the admin).
    #[arg(long)]
    ask_followers: bool,
    /// Offer single deliveries only, not `settle` (deliver everything in flight until quiet
    /// as one action).
    #[arg(long)]
    no_settle: bool,
    /// Instead of the breadth-first search, run this many seeded random walks through the
    /// same actions (for depths the search cannot reach); the first failure is shrunk.
    #[arg(long, default_value_t = 0)]
    walks: u64,
    /// Actions per walk.
    #[arg(long, default_value_t = 200)]
    length: usize,
    /// The first walk's seed (walk k uses seed + k).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum StartArg {
    Cold,
    Elected,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !(1..=8).contains(&args.nodes) || args.expect == 0 || args.expect as usize > args.nodes {
        eprintln!("chorus-mc: need 1 ≤ expect ≤ nodes ≤ 8");
        return ExitCode::from(2);
    }
    let mut model = Model::small(args.nodes, args.expect);
    model.start = match args.start {
        StartArg::Cold => Start::Cold,
        StartArg::Elected => Start::Elected,
    };
    model.config.autopilot = args.autopilot;
    model.ask_followers = args.ask_followers;
    model.settle = !args.no_settle;
    model.limits = Limits {
        crashes: args.crashes,
        drops: args.drops,
        dups: args.dups,
        changes: args.changes,
        splits: args.splits,
        fires: args.fires,
        handovers: args.handovers,
    };
    println!(
        "chorus-mc: {} nodes, bootstrap_expect {}, start {:?}, depth {}, budgets {:?}, autopilot {}",
        args.nodes, args.expect, model.start, args.depth, model.limits, args.autopilot
    );
    if args.walks > 0 {
        return run_walks(&model, &args);
    }
    let outcome = explore(&model, args.depth, args.max_states, |s| {
        println!(
            "depth {:>3}: {:>10} states, {:>11} transitions, {:>8.1} s",
            s.depth,
            s.states,
            s.transitions,
            s.elapsed.as_secs_f64()
        );
    });
    match outcome {
        Outcome::Clean {
            stats,
            reached,
            complete,
        } => {
            println!(
                "clean: {} states, {} transitions, depth {}{}, {:.1} s",
                stats.states,
                stats.transitions,
                stats.depth,
                if complete {
                    ""
                } else {
                    " (stopped at --max-states)"
                },
                stats.elapsed.as_secs_f64()
            );
            for (flag, name) in Reached::ALL {
                let mark = if reached.has(flag) { "yes" } else { "no " };
                println!("  reached {mark}  {name}");
            }
            ExitCode::SUCCESS
        }
        Outcome::Violated {
            violation,
            path,
            stats,
        } => {
            println!(
                "VIOLATION after {} states ({:.1} s): {violation}",
                stats.states,
                stats.elapsed.as_secs_f64()
            );
            println!("shortest path ({} actions):", path.len().saturating_sub(1));
            for (i, (action, state)) in path.iter().enumerate() {
                println!("{i:>3}. {action}");
                if !state.is_empty() {
                    println!("       {state}");
                }
            }
            ExitCode::FAILURE
        }
    }
}

fn run_walks(model: &Model, args: &Args) -> ExitCode {
    let started = std::time::Instant::now();
    let seeds = args.seed..args.seed + args.walks;
    let report = walks(model, seeds, args.length, |done, actions| {
        println!(
            "{done:>8} walks, {actions:>11} actions, {:>7.1} s",
            started.elapsed().as_secs_f64()
        )
    });
    let report = match report {
        Ok(r) => r,
        Err(v) => {
            println!("chorus-mc: cannot start: {v}");
            return ExitCode::from(2);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    match report.failure {
        None => {
            println!(
                "clean: {} walks of up to {} actions, {} actions in all, {secs:.1} s",
                report.walks, args.length, report.actions
            );
            for (flag, name) in Reached::ALL {
                let mark = if report.reached.has(flag) {
                    "yes"
                } else {
                    "no "
                };
                println!("  reached {mark}  {name}");
            }
            ExitCode::SUCCESS
        }
        Some(f) => {
            println!(
                "VIOLATION in walk seed {} after {} walks ({secs:.1} s): {}",
                f.seed, report.walks, f.violation
            );
            println!(
                "shrunk from {} to {} actions; reproduce: chorus-mc --walks 1 --seed {} (with the same model flags)",
                f.original_len,
                f.path.len().saturating_sub(1),
                f.seed
            );
            for (i, (action, state)) in f.path.iter().enumerate() {
                println!("{i:>3}. {action}");
                println!("       {state}");
            }
            ExitCode::FAILURE
        }
    }
}
