//! What a long fault run submits and watches besides its faults (issue 39): tasks of every
//! ending submitted throughout, each checked for exactly the ending it was written for, and
//! each node's footprint sampled through the run for the slope of its growth.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::netns::{NetCluster, NodeResources};

/// The image the soak's tasks run in (`chorus sandbox image build` makes it).
pub const IMAGE: &str = "chorus/sandbox:latest";

/// How a soak task is written to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ending {
    /// Prints its number and exits 0.
    Succeeds,
    /// Prints its number and exits 3.
    Fails,
    /// Prints, then sleeps past its 1 s timeout.
    TimesOut,
    /// Allocates 200 MiB under a 32 MiB limit.
    OutOfMemory,
    /// Sleeps until the soak cancels it at its submitter (a round later).
    Cancelled,
}

impl Ending {
    pub const ALL: [Ending; 5] = [
        Ending::Succeeds,
        Ending::Fails,
        Ending::TimesOut,
        Ending::OutOfMemory,
        Ending::Cancelled,
    ];

    fn spec(self, n: usize) -> Value {
        let (command, timeout_ms, memory_mb) = match self {
            Ending::Succeeds => (format!("echo task-{n}"), 30_000, 64),
            Ending::Fails => (format!("echo task-{n}; exit 3"), 30_000, 64),
            Ending::TimesOut => (format!("echo task-{n}; sleep 60"), 1_000, 64),
            Ending::OutOfMemory => (
                "dd if=/dev/zero of=/dev/null bs=200M count=1".to_owned(),
                30_000,
                32,
            ),
            // Long enough that the cancel (next round, ~10 s; later if its submitter is
            // down) always comes first; short enough to keep the task bound of the run's
            // checker (three attempts of the longest timeout) tight for the others.
            Ending::Cancelled => ("sleep 55".to_owned(), 60_000, 64),
        };
        json!({
            "image": IMAGE,
            "command": ["sh", "-c", command],
            "timeout_ms": timeout_ms,
            "memory_mb": memory_mb,
        })
    }

    /// The result's `status` this ending must give.
    fn status(self) -> &'static str {
        match self {
            Ending::Succeeds => "succeeded",
            Ending::Fails => "failed",
            Ending::TimesOut => "timed_out",
            Ending::OutOfMemory => "out_of_memory",
            Ending::Cancelled => "cancelled",
        }
    }

    /// What else in the result must hold, or why not.
    fn check(self, n: usize, result: &Value) -> Result<(), String> {
        if worn_out(result) {
            return Ok(());
        }
        if result["status"] != self.status() {
            return Err(format!(
                "ended {}, written to end {}",
                result["status"],
                self.status()
            ));
        }
        let out = format!("task-{n}\n");
        let stdout = result["stdout"].as_str().unwrap_or_default();
        match self {
            Ending::Succeeds if stdout != out => {
                Err(format!("stdout {stdout:?}, expected {out:?}"))
            }
            // Its timeout runs on the worker's clock, which goes on while a fault pauses the
            // worker: it may be killed at the resume before it printed. Its own output or
            // none, never another's.
            Ending::TimesOut if !out.starts_with(stdout) => {
                Err(format!("stdout {stdout:?}, expected {out:?} or nothing"))
            }
            Ending::Fails if result["exit_code"] != 3 || result["stdout"] != out.as_str() => {
                Err(format!(
                    "exit code {} and stdout {}, expected 3 and {out:?}",
                    result["exit_code"], result["stdout"]
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A node's view for a report: role, term, admin, peers it has up, and the transport's
/// refusal and failure counters from its metrics.
fn view(c: &NetCluster, i: usize) -> String {
    let Some(s) = c.status(i) else {
        return "no answer".into();
    };
    let counters: Vec<String> = c
        .http(i, "GET", "/metrics", None)
        .map(|(_, body)| {
            body.lines()
                .filter(|l| {
                    l.starts_with("chorus_transport_rejected_total")
                        || l.starts_with("chorus_transport_connections_failed_total")
                        || l.starts_with("chorus_transport_send_failures_total")
                        || l.starts_with("chorus_transport_links_replaced_total")
                        || l.starts_with("chorus_transport_peers_")
                })
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{} {} of term {}, admin {}, peers {}; {}",
        s["node_id"],
        s["role"],
        s["term"],
        s["admin"],
        s["peers"],
        counters.join(", ")
    )
}

/// A task whose every attempt ran on a node that a fault restarted mid-run: `error` once its
/// attempts are used up (`chorus_core::task::MAX_ATTEMPTS`), as designed, whatever it was
/// written to do. Counted apart in the summary.
fn worn_out(result: &Value) -> bool {
    result["status"] == "error"
        && result["attempt"].as_u64() == Some(u64::from(chorus_core::task::MAX_ATTEMPTS))
        && result["error"]
            .as_str()
            .is_some_and(|e| e.contains("the node restarted while the task ran"))
}

struct SoakTask {
    n: usize,
    /// Its submitter.
    at: usize,
    id: String,
    ending: Ending,
    submitted: Instant,
    cancel_sent: bool,
    result: Option<(Value, Duration)>,
}

/// Tasks of every ending submitted throughout a run (see [`TaskSoak::round`]); at the end each
/// must have exactly the result it was written for, read at its submitter.
#[derive(Default)]
pub struct TaskSoak {
    tasks: Vec<SoakTask>,
    rounds: usize,
    /// Submits a live node did not accept: (node, HTTP status or "no answer", body).
    refused: Vec<String>,
}

impl TaskSoak {
    pub fn new() -> TaskSoak {
        TaskSoak::default()
    }

    /// One round: cancels the earlier rounds' tasks written to be cancelled (at their
    /// submitters, where live), reads the results that came in, and submits one task of each
    /// ending, each at the next live node in turn (one in a minority or cut off included: its
    /// task waits for the heal).
    pub fn round(&mut self, c: &NetCluster) {
        self.send_cancels(c);
        self.poll(c);
        let live: Vec<usize> = (0..c.nodes.len()).filter(|i| c.is_live(*i)).collect();
        if live.is_empty() {
            return;
        }
        for (k, ending) in Ending::ALL.into_iter().enumerate() {
            let at = live[(self.rounds + k) % live.len()];
            let n = self.tasks.len() + self.refused.len();
            let spec = ending.spec(n).to_string();
            match c.http(at, "POST", "/tasks", Some(&spec)) {
                Some((code, body)) => {
                    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    match v["task"].as_str() {
                        Some(id) => self.tasks.push(SoakTask {
                            n,
                            at,
                            id: id.to_owned(),
                            ending,
                            submitted: Instant::now(),
                            cancel_sent: false,
                            result: None,
                        }),
                        None => self.refused.push(format!("n{at}: {code} {body}")),
                    }
                }
                None => self.refused.push(format!("n{at}: no answer")),
            }
        }
        self.rounds += 1;
    }

    fn send_cancels(&mut self, c: &NetCluster) {
        for t in &mut self.tasks {
            if t.ending != Ending::Cancelled || t.cancel_sent || !c.is_live(t.at) {
                continue;
            }
            let path = format!("/tasks/{}", t.id);
            if let Some((202, _)) = c.http(t.at, "DELETE", &path, None) {
                t.cancel_sent = true;
            }
        }
    }

    /// Reads, at their submitters, the results of tasks that had none yet.
    fn poll(&mut self, c: &NetCluster) {
        for t in &mut self.tasks {
            if t.result.is_some() || !c.is_live(t.at) {
                continue;
            }
            if let Some(task) = c.task(t.at, &t.id) {
                if !task["result"].is_null() {
                    t.result = Some((task["result"].clone(), t.submitted.elapsed()));
                }
            }
        }
    }

    /// Waits up to `timeout` for every task's result (cancelling what is still to be
    /// cancelled); returns what went wrong: a task without a result, or with another ending
    /// than the one it was written for.
    pub fn finish(&mut self, c: &NetCluster, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.send_cancels(c);
            self.poll(c);
            if self.tasks.iter().all(|t| t.result.is_some()) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let mut problems = Vec::new();
        let mut stuck_at = std::collections::BTreeSet::new();
        for t in &self.tasks {
            match &t.result {
                None => {
                    stuck_at.insert(t.at);
                    problems.push(format!(
                        "task {} ({:?}, at n{}) has no result {timeout:?} after the last fault: {}",
                        t.id,
                        t.ending,
                        t.at,
                        c.task(t.at, &t.id)
                            .map_or("its submitter does not answer".into(), |v| v.to_string())
                    ))
                }
                Some((r, _)) => {
                    if let Err(e) = t.ending.check(t.n, r) {
                        problems.push(format!(
                            "task {} ({:?}, at n{}): {e}: {r}",
                            t.id, t.ending, t.at
                        ));
                    }
                }
            }
        }
        if !stuck_at.is_empty() {
            // What the nodes see of each other: a stuck submitter's view and the admin's are
            // what a post-mortem needs first (the merged history has the rest).
            problems.extend((0..c.nodes.len()).map(|i| format!("n{i} then: {}", view(c, i))));
        }
        problems
    }

    /// (submitter, task id) of every task submitted.
    pub fn submitted(&self) -> impl Iterator<Item = (usize, &str)> {
        self.tasks.iter().map(|t| (t.at, t.id.as_str()))
    }

    /// Lines for the run's summary: tasks by ending, results as written, latencies.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let as_written = self
            .tasks
            .iter()
            .filter(|t| {
                t.result
                    .as_ref()
                    .is_some_and(|(r, _)| t.ending.check(t.n, r).is_ok())
            })
            .count();
        let worn = self
            .tasks
            .iter()
            .filter(|t| t.result.as_ref().is_some_and(|(r, _)| worn_out(r)))
            .count();
        let by_ending: Vec<String> = Ending::ALL
            .iter()
            .map(|e| {
                let n = self.tasks.iter().filter(|t| t.ending == *e).count();
                format!("{n} {}", e.status())
            })
            .collect();
        lines.push(format!(
            "tasks: {} submitted in {} rounds ({}), {as_written} ended as written ({worn} of them errors after a fault restarted the worker of each of their {} attempts); {} submits refused",
            self.tasks.len(),
            self.rounds,
            by_ending.join(", "),
            chorus_core::task::MAX_ATTEMPTS,
            self.refused.len(),
        ));
        let mut quick: Vec<Duration> = self
            .tasks
            .iter()
            .filter(|t| matches!(t.ending, Ending::Succeeds | Ending::Fails))
            .filter_map(|t| t.result.as_ref().map(|(_, d)| *d))
            .collect();
        quick.sort();
        if !quick.is_empty() {
            let pct = |p: usize| quick[(quick.len() * p).div_ceil(100).saturating_sub(1)];
            lines.push(format!(
                "  submit -> result seen (polled once a round, so an upper bound) of the quick ones: p50 {:.1} s, p90 {:.1} s, max {:.1} s",
                pct(50).as_secs_f64(),
                pct(90).as_secs_f64(),
                quick[quick.len() - 1].as_secs_f64()
            ));
        }
        for r in self.refused.iter().take(5) {
            lines.push(format!("  refused: {r}"));
        }
        lines
    }
}

/// One node's footprint at one moment of the run.
#[derive(Clone, Copy, Debug)]
struct Sample {
    minute: f64,
    pid: u32,
    res: NodeResources,
}

/// Each node's footprint sampled through a run, for the slope of its growth (a restarted node's
/// memory and descriptors are judged over its last process only; its data over the whole run).
pub struct Growth {
    started: Instant,
    every: Duration,
    last: Option<Instant>,
    samples: Vec<Vec<Sample>>,
}

impl Growth {
    pub fn new(nodes: usize, every: Duration) -> Growth {
        Growth {
            started: Instant::now(),
            every,
            last: None,
            samples: vec![Vec::new(); nodes],
        }
    }

    /// Samples every running node, if `every` passed since the last sample.
    pub fn sample_if_due(&mut self, c: &NetCluster) {
        if self.last.is_some_and(|l| l.elapsed() < self.every) {
            return;
        }
        self.last = Some(Instant::now());
        let minute = self.started.elapsed().as_secs_f64() / 60.0;
        for (i, samples) in self.samples.iter_mut().enumerate() {
            if let (Some(pid), Some(res)) = (c.pid(i), c.resources(i)) {
                samples.push(Sample { minute, pid, res });
            }
        }
    }

    /// Writes every sample as CSV (minute, node, pid, rss_kib, open_fds, data_bytes).
    pub fn write_csv(&self, path: &Path) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(f, "minute,node,pid,rss_kib,open_fds,data_bytes")?;
        for (i, samples) in self.samples.iter().enumerate() {
            for s in samples {
                writeln!(
                    f,
                    "{:.2},n{i},{},{},{},{}",
                    s.minute, s.pid, s.res.rss_kib, s.res.open_fds, s.res.data_bytes
                )?;
            }
        }
        f.flush()
    }

    /// One line a node: first and last value and least-squares slope of RSS, descriptors and
    /// data size.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (i, samples) in self.samples.iter().enumerate() {
            let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
                continue;
            };
            // Memory and descriptors are judged over the process sampled longest (a restart
            // starts them afresh); the data directory over the whole run.
            let mut pids: Vec<u32> = samples.iter().map(|s| s.pid).collect();
            pids.dedup();
            let processes = pids.len();
            let longest = pids
                .iter()
                .copied()
                .max_by_key(|p| samples.iter().filter(|s| s.pid == *p).count())
                .unwrap_or(last.pid);
            let own: Vec<&Sample> = samples.iter().filter(|s| s.pid == longest).collect();
            let last_own = own[own.len() - 1];
            let span = last_own.minute - own[0].minute;
            let rss = slope(
                own.iter()
                    .map(|s| (s.minute, s.res.rss_kib as f64 / 1024.0)),
            );
            let fds = slope(own.iter().map(|s| (s.minute, s.res.open_fds as f64)));
            let data = slope(
                samples
                    .iter()
                    .map(|s| (s.minute, s.res.data_bytes as f64 / 1024.0)),
            );
            let fmt = |v: Option<f64>, unit: &str| match v {
                Some(v) => format!("{v:+.2} {unit}/min"),
                None => "slope n/a".to_owned(),
            };
            lines.push(format!(
                "n{i}: rss {} -> {} MiB ({}), fds {} -> {} ({}), data {} -> {} KiB ({}); {} samples, {}",
                own[0].res.rss_kib / 1024,
                last_own.res.rss_kib / 1024,
                fmt(rss, "MiB"),
                own[0].res.open_fds,
                last_own.res.open_fds,
                fmt(fds, "fds"),
                first.res.data_bytes / 1024,
                last.res.data_bytes / 1024,
                fmt(data, "KiB"),
                samples.len(),
                match processes {
                    1 => "one process".to_owned(),
                    n => format!(
                        "{n} processes (rss and fds over the longest-sampled one: {} samples, {span:.1} min)",
                        own.len()
                    ),
                }
            ));
        }
        lines
    }
}

/// The least-squares slope of `points` (x, y); `None` with fewer than 3 points or no spread in x.
pub fn slope(points: impl Iterator<Item = (f64, f64)>) -> Option<f64> {
    let points: Vec<(f64, f64)> = points.collect();
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 1e-12).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_is_the_least_squares_fit() {
        let line = (0..10).map(|x| (x as f64, 3.0 * x as f64 + 7.0));
        assert!((slope(line).unwrap() - 3.0).abs() < 1e-9);
        // Noise around a flat line: a slope near 0, not the last point's jump.
        let flat = [
            (0.0, 10.0),
            (1.0, 12.0),
            (2.0, 8.0),
            (3.0, 11.0),
            (4.0, 9.0),
        ];
        assert!(slope(flat.into_iter()).unwrap().abs() < 0.5);
        assert_eq!(slope([(0.0, 1.0), (1.0, 2.0)].into_iter()), None);
        assert_eq!(slope([(1.0, 1.0); 4].into_iter()), None);
    }

    #[test]
    fn a_result_counts_only_with_the_ending_it_was_written_for() {
        let ok = json!({"status": "succeeded", "stdout": "task-4\n", "exit_code": 0});
        assert_eq!(Ending::Succeeds.check(4, &ok), Ok(()));
        assert!(
            Ending::Succeeds.check(5, &ok).is_err(),
            "another task's output"
        );
        assert!(Ending::Cancelled
            .check(4, &ok)
            .unwrap_err()
            .contains("written to end cancelled"));
        let failed = json!({"status": "failed", "stdout": "task-2\n", "exit_code": 3});
        assert_eq!(Ending::Fails.check(2, &failed), Ok(()));
        let wrong_code = json!({"status": "failed", "stdout": "task-2\n", "exit_code": 137});
        assert!(Ending::Fails.check(2, &wrong_code).is_err());
        let timed = json!({"status": "timed_out", "stdout": "task-1\n"});
        assert_eq!(Ending::TimesOut.check(1, &timed), Ok(()));
        let killed_first = json!({"status": "timed_out", "stdout": ""});
        assert_eq!(Ending::TimesOut.check(1, &killed_first), Ok(()));
        assert!(
            Ending::TimesOut.check(2, &timed).is_err(),
            "another task's output"
        );
        assert_eq!(
            Ending::OutOfMemory.check(0, &json!({"status": "out_of_memory"})),
            Ok(())
        );
        // Every attempt's worker restarted by a fault: the designed error, whatever the task.
        let restarted = "worker: the node restarted while the task ran";
        let worn = json!({"status": "error", "attempt": 3, "error": restarted});
        assert_eq!(Ending::Succeeds.check(9, &worn), Ok(()));
        let early = json!({"status": "error", "attempt": 2, "error": restarted});
        assert!(Ending::Succeeds.check(9, &early).is_err(), "attempts left");
        let other = json!({"status": "error", "attempt": 3, "error": "image not found"});
        assert!(Ending::Succeeds.check(9, &other).is_err());
    }
}
