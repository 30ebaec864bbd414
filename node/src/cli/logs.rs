//! `chorus task logs ID [-f]`: a task's output (stdout and stderr as they came, interleaved)
//! from the worker that runs or ran it, through any node: the task's node (found as `task get`
//! finds it, [`super::across::at_owner`]) names the worker and the run, and the cluster view
//! names the worker's HTTP API; the worker serves the run's log (`GET /tasks/{id}/logs`, a long
//! poll with `follow=true`). Every read says where it starts, so a dropped connection resumes at
//! the last byte printed; a task run again (another worker, another run) is followed there.
//!
//! Output is untrusted: on a terminal, control characters but newline and tab are shown
//! escaped ([`super::task::escape_controls`]) unless `--raw`; piped, the bytes go out as the
//! task wrote them. A cut is always stated on stderr.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use chorus_core::TaskResult;

use super::across::{at_owner, http_of};
use super::http::{request_peer, Peer, RawAnswer};
use super::task::{escape_controls, exit_code, plain_words};
use crate::names::short_id;
use crate::wire::{cancelled_before_it_ran, TaskView};

/// How long one read may take: the worker's long poll (20 s) and a margin. A worker cut off
/// mid-answer is asked again after it.
const READ_BOUND: Duration = Duration::from_secs(30);

/// Reads that fail in a row (a worker down, cut off) before following gives up.
const MAX_FAILURES: u32 = 30;

/// `chorus task logs`.
#[derive(clap::Args)]
pub struct LogsArgs {
    /// The task id (ORIGIN-SEQ).
    pub id: String,
    /// The HTTP API of any node.
    #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
    pub addr: String,
    /// Follow the output until the task ends, then exit with the task's exit code (as
    /// `submit --wait` does).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Print the output exactly as the task wrote it, on a terminal too (piped, it always is).
    #[arg(long)]
    pub raw: bool,
}

/// Writes a task's output to stdout: its bytes, or escaped for a terminal (a UTF-8 character
/// split between two reads is held until its end comes).
pub struct Printer {
    escape: bool,
    held: Vec<u8>,
}

impl Printer {
    /// Escaping when stdout is a terminal, unless `raw`.
    pub fn for_stdout(raw: bool) -> Printer {
        Printer::new(!raw && std::io::stdout().is_terminal())
    }

    pub fn new(escape: bool) -> Printer {
        Printer {
            escape,
            held: Vec::new(),
        }
    }

    /// What to write for `bytes`.
    pub fn shown(&mut self, bytes: &[u8]) -> Vec<u8> {
        if !self.escape {
            return bytes.to_vec();
        }
        self.held.extend_from_slice(bytes);
        // Up to 3 bytes of an unfinished character wait for the next read.
        let keep = match std::str::from_utf8(&self.held) {
            Ok(_) => 0,
            Err(e) if e.error_len().is_none() => self.held.len() - e.valid_up_to(),
            Err(_) => 0,
        };
        let rest = self.held.split_off(self.held.len() - keep);
        let text = String::from_utf8_lossy(&self.held).into_owned();
        self.held = rest;
        escape_controls(&text).into_bytes()
    }

    /// What is still held (a character cut at the log's end).
    pub fn flush(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        escape_controls(&String::from_utf8_lossy(&held)).into_bytes()
    }

    fn print(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(&self.shown(bytes))?;
        out.flush()?;
        Ok(())
    }
}

/// A run: the worker it is on and its number.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    worker: String,
    attempt: u32,
}

/// The run whose output the task's view points at: the one going, or the one that made its
/// result; none before it ran.
fn run_of(view: &TaskView) -> Option<Run> {
    if let Some(r) = &view.result {
        return (!cancelled_before_it_ran(r)).then(|| Run {
            worker: r.worker.to_string(),
            attempt: r.attempt,
        });
    }
    match (&view.worker, view.attempt) {
        (Some(w), Some(a)) => Some(Run {
            worker: w.clone(),
            attempt: a,
        }),
        _ => None,
    }
}

/// The statement of a cut, from a log answer's headers.
pub fn cut_statement(answer: &RawAnswer) -> Option<String> {
    let at: u64 = answer.header("chorus-log-cut-at")?.parse().ok()?;
    let size = if at > 0 && at % (1 << 20) == 0 {
        format!("{} MiB", at >> 20)
    } else {
        format!("{at} bytes")
    };
    Some(match answer.header("chorus-log-dropped") {
        Some(n) if n.parse::<u64>().is_ok() => format!("output cut at {size}: {n} bytes not kept"),
        _ => format!(
            "output cut at {size}: how many bytes were not kept is unknown (the worker stopped \
             during the run)"
        ),
    })
}

/// How following a task ended.
pub enum Followed {
    /// The task's result, and whether any of its output was read from a worker.
    Done { result: TaskResult, streamed: bool },
    /// `give_up` came first; the task's phase then.
    GaveUp { phase: String },
}

/// Follows task `id` through the node at `addr`: prints its output as it comes until its
/// result is in (or `give_up`), each run's cut stated and its waits said on stderr.
pub async fn follow(
    addr: &str,
    id: &str,
    printer: &mut Printer,
    give_up: Option<tokio::time::Instant>,
) -> anyhow::Result<Followed> {
    let mut streamed = false;
    // The run being read, its worker's API and how far it was read; whether its log ended.
    let mut reading: Option<(Run, Peer, u64)> = None;
    let mut log_done = false;
    let mut said: Option<String> = None;
    let mut failures = 0;
    let mut pause = Duration::from_millis(20);
    loop {
        let view = view(addr, id).await?;
        let run = run_of(&view);
        if run.is_some() && run != reading.as_ref().map(|r| r.0.clone()) {
            let run = run.clone().unwrap_or_else(|| unreachable!("checked above"));
            if let Some((old, _, _)) = &reading {
                eprintln!(
                    "chorus: run {} on {} ended; the task runs again: run {} on {}",
                    old.attempt,
                    short_id(&old.worker),
                    run.attempt,
                    short_id(&run.worker)
                );
            }
            match http_of(addr, &run.worker).await {
                Some(http) => {
                    reading = Some((run, http, 0));
                    log_done = false;
                }
                None if view.result.is_some() => {
                    eprintln!(
                        "chorus: the output of task {id} is on worker {}, which cannot be \
                         reached; its result's tails: `chorus task get {id}`",
                        short_id(&run.worker)
                    );
                    return Ok(done(view, streamed));
                }
                None => {}
            }
        }
        if reading.is_none() && view.pending.is_some() && view.pending != said {
            eprintln!(
                "chorus: task {id} waits: {}",
                escape_controls(view.pending.as_deref().unwrap_or_default())
            );
            said = view.pending.clone();
        }
        if let Some((run, http, offset)) = reading.as_mut().filter(|_| !log_done) {
            match read(http, id, run.attempt, *offset, true).await {
                Ok(a) if a.code == 200 => {
                    failures = 0;
                    streamed = true;
                    printer.print(&a.body)?;
                    *offset += a.body.len() as u64;
                    let size: u64 = a
                        .header("chorus-log-size")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    if a.header("chorus-log-finished") == Some("true") && *offset >= size {
                        log_done = true;
                        let mut out = std::io::stdout().lock();
                        out.write_all(&printer.flush())?;
                        out.flush()?;
                        if let Some(cut) = cut_statement(&a) {
                            eprintln!("chorus: {cut}");
                        }
                    }
                    continue;
                }
                Ok(a) if a.code == 404 && view.result.is_some() => {
                    eprintln!(
                        "chorus: worker {} keeps no output of task {id} (run {}): {}",
                        short_id(&run.worker),
                        run.attempt,
                        error_text(&a)
                    );
                    log_done = true;
                }
                // Not there yet: the run is starting (its sandbox being made).
                Ok(a) if a.code == 404 => {}
                // Not now (a worker down or cut off): asked again below, a bounded number of
                // times in a row.
                Ok(_) | Err(_) => {
                    failures += 1;
                    if failures > MAX_FAILURES {
                        anyhow::bail!(
                            "the output of task {id} cannot be read at worker {} ({http}); \
                             `chorus task get {id}` shows its result's tails",
                            short_id(&run.worker)
                        );
                    }
                }
            }
        }
        if view.result.is_some() && (log_done || reading.is_none()) {
            return Ok(done(view, streamed));
        }
        if give_up.is_some_and(|at| tokio::time::Instant::now() >= at) {
            return Ok(Followed::GaveUp { phase: view.phase });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn done(view: TaskView, streamed: bool) -> Followed {
    match view.result {
        Some(result) => Followed::Done { result, streamed },
        None => Followed::GaveUp { phase: view.phase },
    }
}

fn error_text(a: &RawAnswer) -> String {
    serde_json::from_slice::<serde_json::Value>(&a.body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&a.body).trim().to_owned())
}

/// The task's view from its node.
async fn view(addr: &str, id: &str) -> anyhow::Result<TaskView> {
    let a = at_owner(addr, "GET", &format!("/tasks/{id}")).await?;
    if a.code != 200 {
        let why = a.value["error"]
            .as_str()
            .unwrap_or(a.body.trim())
            .to_owned();
        anyhow::bail!("{} answered {}: {why}", a.addr, a.code);
    }
    serde_json::from_value(a.value).context("the task document is not what this chorus expects")
}

/// One read of run `attempt`'s log at its worker, bounded by [`READ_BOUND`].
async fn read(
    http: &Peer,
    id: &str,
    attempt: u32,
    offset: u64,
    follow: bool,
) -> anyhow::Result<RawAnswer> {
    let path = format!("/tasks/{id}/logs?offset={offset}&attempt={attempt}&follow={follow}");
    tokio::time::timeout(READ_BOUND, request_peer(http, "GET", &path, None, true))
        .await
        .map_err(|_| anyhow::anyhow!("{http} did not answer within {READ_BOUND:?}"))?
}

/// `chorus task logs`: what is there now, or with `-f` everything until the task ends (exit
/// code as `submit --wait`).
pub async fn run(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let id = &args.id;
    let mut printer = Printer::for_stdout(args.raw);
    if args.follow {
        return match follow(&args.addr, id, &mut printer, None).await? {
            Followed::Done { result, .. } => {
                if let Some(words) = plain_words(id, &result) {
                    eprintln!("chorus: {words}");
                }
                Ok(ExitCode::from(exit_code(&result)))
            }
            Followed::GaveUp { .. } => Ok(ExitCode::SUCCESS),
        };
    }
    let view = view(&args.addr, id).await?;
    let Some(run) = run_of(&view) else {
        eprintln!("chorus: task {id} has not run yet (it is {})", view.phase);
        return Ok(ExitCode::SUCCESS);
    };
    let http = http_of(&args.addr, &run.worker).await.with_context(|| {
        format!(
            "the output of task {id} is on worker {}, which cannot be reached from {}",
            short_id(&run.worker),
            args.addr
        )
    })?;
    let mut offset = 0;
    loop {
        let a = read(&http, id, run.attempt, offset, false).await?;
        if a.code != 200 {
            anyhow::bail!("{http} answered {}: {}", a.code, error_text(&a));
        }
        printer.print(&a.body)?;
        offset += a.body.len() as u64;
        if a.body.is_empty() {
            let mut out = std::io::stdout().lock();
            out.write_all(&printer.flush())?;
            out.flush()?;
            if let Some(cut) = cut_statement(&a) {
                eprintln!("chorus: {cut}");
            }
            return Ok(ExitCode::SUCCESS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_sees_controls_escaped_and_split_characters_whole() {
        let mut p = Printer::new(true);
        let mut out = p.shown(b"ok \x1b[2J \xc3");
        out.extend(p.shown(b"\xa9\n"));
        out.extend(p.flush());
        assert_eq!(String::from_utf8(out).unwrap(), "ok \\x1b[2J \u{e9}\n");
        let mut raw = Printer::new(false);
        assert_eq!(raw.shown(b"\x1b\xff"), b"\x1b\xff");
    }

    #[test]
    fn a_cut_is_stated_with_what_was_not_kept() {
        let answer = |h: &[(&str, &str)]| RawAnswer {
            code: 200,
            headers: h.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            body: Vec::new(),
        };
        assert_eq!(cut_statement(&answer(&[])), None);
        assert_eq!(
            cut_statement(&answer(&[
                ("chorus-log-cut-at", "16777216"),
                ("chorus-log-dropped", "42")
            ]))
            .unwrap(),
            "output cut at 16 MiB: 42 bytes not kept"
        );
        assert!(cut_statement(&answer(&[
            ("chorus-log-cut-at", "10"),
            ("chorus-log-dropped", "unknown")
        ]))
        .unwrap()
        .contains("output cut at 10 bytes: how many"));
    }
}
