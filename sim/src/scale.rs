//! `chorus-sim scale`: how the cost of a simulation grows with the cluster.
//!
//! Runs one scenario (the cold-start `storm` by default) at each of several cluster sizes, each
//! in a child process of its own so that its peak memory is its own (the kernel's high-water
//! mark of the child, `VmHWM`), under an address-space limit so that a size that does not fit
//! fails alone instead of taking the machine down. Prints a table row as each size finishes,
//! and can write the rows as JSON and draw them as an SVG: nodes against wall time, peak
//! memory, messages per election and simulated seconds per wall second, on log–log axes.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::run::{run_with, Engine};
use crate::sink::Sink;
use crate::sweep::Overrides;

/// Arguments of `chorus-sim scale`.
#[derive(clap::Args, Clone, Debug)]
pub struct ScaleArgs {
    /// Cluster sizes to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,1000,10000,100000,1000000"
    )]
    pub nodes: Vec<usize>,
    /// Voters in each (the rest are workers).
    #[arg(long, default_value_t = 5)]
    pub voters: usize,
    /// Who connects to whom: `voters` (workers connect only to voters) or `full`.
    #[arg(long, default_value = "voters")]
    pub peering: String,
    /// The scenario (built-in name or TOML file).
    #[arg(long, default_value = "storm")]
    pub scenario: String,
    /// Simulated time of each run.
    #[arg(long, default_value = "20s", value_parser = crate::scenario::parse_ms)]
    pub duration: u64,
    /// The seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Address-space limit of each run, GiB: a size that needs more fails alone.
    #[arg(long, default_value_t = 22)]
    pub memory_limit_gib: u64,
    /// Write the rows here as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the rows as an SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Internal: run one size in this process and print its row as JSON.
    #[arg(long, hide = true)]
    pub one: Option<usize>,
}

/// What one size cost.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Nodes.
    pub nodes: usize,
    /// Voters among them.
    pub voters: usize,
    /// Wall time of the simulation itself (not the process start), s.
    pub wall_s: f64,
    /// Peak resident memory of the process, MB.
    pub peak_mb: f64,
    /// Messages delivered.
    pub messages: u64,
    /// Elections won.
    pub elections: u64,
    /// Messages of elections (pre-votes and votes), per election won.
    pub messages_per_election: f64,
    /// From the start until the first admin, simulated ms (none: no admin).
    pub first_admin_ms: Option<u64>,
    /// Simulated seconds per wall second.
    pub sim_s_per_wall_s: f64,
    /// Invariant violations (0 or the run is not a measurement).
    pub violations: usize,
    /// The trace digest (the same seed and size give the same one).
    pub digest: String,
    /// Why there is no measurement (the run failed or did not fit), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl Row {
    fn failed(nodes: usize, voters: usize, why: String) -> Row {
        Row {
            nodes,
            voters,
            wall_s: 0.0,
            peak_mb: 0.0,
            messages: 0,
            elections: 0,
            messages_per_election: 0.0,
            first_admin_ms: None,
            sim_s_per_wall_s: 0.0,
            violations: 0,
            digest: String::new(),
            failed: Some(why),
        }
    }
}

/// Runs `scale`; returns whether every size ran clean.
pub fn cmd_scale(args: &ScaleArgs) -> anyhow::Result<bool> {
    if let Some(n) = args.one {
        // A size that does not fit fails here, alone, instead of taking the machine down.
        let limit = args.memory_limit_gib.saturating_mul(1 << 30);
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, limit, limit)
            .context("cannot limit this run's address space")?;
        let row = run_one(args, n)?;
        println!("{}", serde_json::to_string(&row)?);
        return Ok(true);
    }
    anyhow::ensure!(!args.nodes.is_empty(), "--nodes: give at least one size");
    let exe = std::env::current_exe().context("cannot find this program to run the sizes")?;
    let every = args.nodes.iter().all(|n| args.voters >= *n);
    println!(
        "scenario {} · {} simulated per run · {} · peering {} · seed {} · each size in its own process, at most {} GiB",
        args.scenario,
        crate::scenario::format_ms(args.duration),
        if every {
            "every node a voter".to_owned()
        } else {
            format!("{} voters", args.voters)
        },
        args.peering,
        args.seed,
        args.memory_limit_gib
    );
    println!("{}", header());
    let mut rows = Vec::new();
    for &n in &args.nodes {
        let row = run_child(&exe, args, n);
        println!("{}", table_row(&row));
        rows.push(row);
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(p) = &args.svg {
        std::fs::write(p, svg(&rows, args))
            .with_context(|| format!("cannot write {}", p.display()))?;
        println!("picture: {}", p.display());
    }
    Ok(rows.iter().all(|r| r.failed.is_none() && r.violations == 0))
}

fn run_child(exe: &std::path::Path, args: &ScaleArgs, n: usize) -> Row {
    let mut cmd = Command::new(exe);
    cmd.args(["scale", "--one", &n.to_string()])
        .args(["--voters", &args.voters.to_string()])
        .args(["--peering", &args.peering])
        .args(["--scenario", &args.scenario])
        .args(["--duration", &crate::scenario::format_ms(args.duration)])
        .args(["--seed", &args.seed.to_string()])
        .args(["--memory-limit-gib", &args.memory_limit_gib.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => return Row::failed(n, args.voters, format!("cannot start: {e}")),
    };
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::to_owned);
    match (out.status.success(), last) {
        (true, Some(line)) => serde_json::from_str(&line)
            .unwrap_or_else(|e| Row::failed(n, args.voters, format!("bad report: {e}"))),
        (_, _) => {
            use std::os::unix::process::ExitStatusExt;
            // An allocation over the limit aborts the child (SIGABRT); the OOM killer kills.
            let why = match out.status.signal() {
                Some(6) | Some(9) => format!(
                    "did not fit in {} GiB ({})",
                    args.memory_limit_gib, out.status
                ),
                _ => format!("failed ({})", out.status),
            };
            Row::failed(n, args.voters, why)
        }
    }
}

fn run_one(args: &ScaleArgs, n: usize) -> anyhow::Result<Row> {
    let peering = match args.peering.as_str() {
        "full" => crate::scenario::Peering::Full,
        "voters" => crate::scenario::Peering::Voters,
        p => anyhow::bail!("bad peering {p:?}: expected full or voters"),
    };
    let scenario = Overrides {
        nodes: Some(n),
        voters: Some(args.voters.min(n)),
        peering: Some(peering),
        duration: Some(args.duration),
        hostile: None,
    }
    .apply(&args.scenario)?;
    let started = Instant::now();
    // A size runs in a process of its own, which ends with it.
    let f = run_with(
        &scenario,
        args.seed,
        Engine::Des,
        None,
        false,
        Sink::exit_after_run,
    )?;
    let wall_s = started.elapsed().as_secs_f64();
    let st = &f.stats;
    Ok(Row {
        nodes: n,
        voters: scenario.voter_count(),
        wall_s,
        peak_mb: peak_rss_mb().unwrap_or(0.0),
        messages: st.messages,
        elections: st.elections,
        messages_per_election: if st.elections > 0 {
            st.election_messages as f64 / st.elections as f64
        } else {
            0.0
        },
        first_admin_ms: (st.elections > 0)
            .then(|| st.outages_ms.first().copied())
            .flatten(),
        sim_s_per_wall_s: scenario.duration_ms as f64 / 1000.0 / wall_s.max(1e-9),
        violations: f.violations.len(),
        digest: format!("{:016x}", f.digest),
        failed: None,
    })
}

/// This process's peak resident memory (the kernel's `VmHWM`), MB.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024.0 / 1e6)
}

fn header() -> String {
    format!(
        "{:>9} {:>6} {:>9} {:>9} {:>12} {:>9} {:>10} {:>11} {:>10}  {}",
        "nodes",
        "voters",
        "wall s",
        "peak MB",
        "messages",
        "msg/wall-s",
        "msg/elect.",
        "first admin",
        "sim s/wall s",
        "digest"
    )
}

fn table_row(r: &Row) -> String {
    if let Some(why) = &r.failed {
        return format!("{:>9} {:>6}  {why}", r.nodes, r.voters);
    }
    format!(
        "{:>9} {:>6} {:>9.2} {:>9.0} {:>12} {:>9.0}k {:>10.0} {:>11} {:>10.1}  {}{}",
        r.nodes,
        r.voters,
        r.wall_s,
        r.peak_mb,
        r.messages,
        r.messages as f64 / r.wall_s.max(1e-9) / 1000.0,
        r.messages_per_election,
        r.first_admin_ms.map_or("none".to_owned(), |ms| format!(
            "{:.1} s",
            ms as f64 / 1000.0
        )),
        r.sim_s_per_wall_s,
        r.digest,
        if r.violations > 0 {
            format!("  {} VIOLATIONS", r.violations)
        } else {
            String::new()
        }
    )
}

/// One panel of the picture: a quantity against nodes.
struct Panel {
    title: &'static str,
    value: fn(&Row) -> f64,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "wall time, s",
        value: |r| r.wall_s,
    },
    Panel {
        title: "peak memory, MB",
        value: |r| r.peak_mb,
    },
    Panel {
        title: "messages per election",
        value: |r| r.messages_per_election,
    },
    Panel {
        title: "simulated s per wall s",
        value: |r| r.sim_s_per_wall_s,
    },
];

/// Four log–log panels, nodes on every x axis, a labelled point per size that ran.
pub fn svg(rows: &[Row], args: &ScaleArgs) -> String {
    const W: f64 = 480.0;
    const H: f64 = 300.0;
    const PAD_L: f64 = 64.0;
    const PAD_R: f64 = 48.0;
    const PAD_T: f64 = 36.0;
    const PAD_B: f64 = 40.0;
    const TOP: f64 = 44.0;
    let ok: Vec<&Row> = rows.iter().filter(|r| r.failed.is_none()).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">"#,
        2.0 * W,
        2.0 * H + TOP
    );
    let _ = write!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="12" y="22" font-size="14">chorus-sim scale · scenario {} · {} simulated · {} voters · peering {} · seed {}</text>"#,
        esc(&args.scenario),
        crate::scenario::format_ms(args.duration),
        args.voters,
        esc(&args.peering),
        args.seed
    );
    let log_range = |vals: &mut dyn Iterator<Item = f64>| {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for v in vals.filter(|v| *v > 0.0) {
            lo = lo.min(v.log10().floor());
            hi = hi.max(v.log10().ceil());
        }
        if lo > hi {
            (0.0, 1.0)
        } else if lo == hi {
            (lo, lo + 1.0)
        } else {
            (lo, hi)
        }
    };
    let (x0, x1) = log_range(&mut rows.iter().map(|r| r.nodes as f64));
    for (i, p) in PANELS.iter().enumerate() {
        let ox = (i % 2) as f64 * W;
        let oy = TOP + (i / 2) as f64 * H;
        let (y0, y1) = log_range(&mut ok.iter().map(|r| (p.value)(r)));
        let px = |v: f64| ox + PAD_L + (v.log10() - x0) / (x1 - x0) * (W - PAD_L - PAD_R);
        let py = |v: f64| oy + H - PAD_B - (v.log10() - y0) / (y1 - y0) * (H - PAD_T - PAD_B);
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-size="13">{}</text>"#,
            ox + PAD_L,
            oy + PAD_T - 12.0,
            p.title
        );
        // Decade grid lines and labels on both axes.
        for d in (x0 as i32)..=(x1 as i32) {
            let x = px(10f64.powi(d));
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                oy + PAD_T,
                oy + H - PAD_B,
                oy + H - PAD_B + 14.0,
                decade(d)
            );
        }
        for d in (y0 as i32)..=(y1 as i32) {
            let y = py(10f64.powi(d));
            let _ = write!(
                s,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                ox + PAD_L,
                ox + W - PAD_R,
                ox + PAD_L - 4.0,
                y + 4.0,
                decade(d)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">nodes</text>"#,
            ox + (W + PAD_L - PAD_R) / 2.0,
            oy + H - 8.0
        );
        let pts: Vec<(f64, f64, f64)> = ok
            .iter()
            .map(|r| (r.nodes as f64, (p.value)(r)))
            .filter(|(_, v)| *v > 0.0)
            .map(|(n, v)| (px(n), py(v), v))
            .collect();
        let line: Vec<String> = pts
            .iter()
            .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = write!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="2"/>"##,
            line.join(" ")
        );
        for (x, y, v) in &pts {
            let _ = write!(
                s,
                r##"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="#1f77b4"/><text x="{:.1}" y="{:.1}" font-size="10">{}</text>"##,
                x + 5.0,
                y - 6.0,
                short(*v)
            );
        }
        // Sizes that did not run are named under the axis.
        let missing: Vec<String> = rows
            .iter()
            .filter_map(|r| r.failed.as_ref().map(|why| format!("{}: {why}", r.nodes)))
            .collect();
        if !missing.is_empty() {
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#d62728" font-size="10">{}</text>"##,
                ox + PAD_L,
                oy + PAD_T + 4.0,
                esc(&missing.join("; "))
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn decade(d: i32) -> String {
    match d {
        0 => "1".into(),
        1 => "10".into(),
        2 => "100".into(),
        3 => "1k".into(),
        4 => "10k".into(),
        5 => "100k".into(),
        6 => "1M".into(),
        7 => "10M".into(),
        d => format!("1e{d}"),
    }
}

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ScaleArgs {
        ScaleArgs {
            nodes: vec![50, 200],
            voters: 5,
            peering: "voters".into(),
            scenario: "storm".into(),
            duration: 20_000,
            seed: 1,
            memory_limit_gib: 4,
            json: None,
            svg: None,
            one: None,
        }
    }

    /// A size measured in-process: the counts are the run's own and repeat exactly.
    #[test]
    fn one_size_reports_what_its_run_did_and_repeats() {
        let a = run_one(&args(), 50).unwrap();
        assert_eq!((a.nodes, a.voters, a.violations), (50, 5, 0));
        assert!(a.elections >= 1 && a.messages > 0, "{a:?}");
        assert!(a.first_admin_ms.is_some_and(|ms| ms < 20_000), "{a:?}");
        assert!(a.messages_per_election > 0.0 && a.peak_mb > 0.0, "{a:?}");
        let b = run_one(&args(), 50).unwrap();
        assert_eq!(
            (a.digest, a.messages, a.elections, a.first_admin_ms),
            (b.digest, b.messages, b.elections, b.first_admin_ms)
        );
    }

    #[test]
    fn the_picture_has_a_point_per_size_that_ran_and_names_the_others() {
        let ok = |nodes, wall_s| Row {
            wall_s,
            peak_mb: 10.0 * nodes as f64,
            messages: 100,
            elections: 1,
            messages_per_election: 20.0,
            first_admin_ms: Some(1_000),
            sim_s_per_wall_s: 20.0 / wall_s,
            digest: "0".into(),
            failed: None,
            ..Row::failed(nodes, 5, String::new())
        };
        let rows = [
            ok(100, 0.01),
            ok(10_000, 1.0),
            Row::failed(1_000_000, 5, "did not fit in 4 GiB".into()),
        ];
        let svg = svg(&rows, &args());
        assert_eq!(svg.matches("<circle").count(), 2 * PANELS.len());
        assert_eq!(svg.matches("<polyline").count(), PANELS.len());
        assert!(svg.contains("1000000: did not fit in 4 GiB"));
        for t in ["wall time, s", "peak memory, MB", "100k", "1M"] {
            assert!(svg.contains(t), "{t}");
        }
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }
}
