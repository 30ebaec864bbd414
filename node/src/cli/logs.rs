//! `chorus task logs ID [-f]`: a task's output from the worker that runs or ran it, through
//! any node, the task's stdout on this command's stdout and its stderr on this command's
//! stderr. The task's node (found as `task get` finds it, [`super::across::at_owner`]) names
//! the worker and the run, and the cluster view names the worker's HTTP API; the worker serves
//! each stream of the run's log (`GET /tasks/{id}/logs?stream=…`, a long poll with
//! `follow=true`). Following, both streams are read at once, one request each: the worker
//! answers both when either grows, so neither waits on the other (the order between the two
//! is as near as that makes it, not exact). Every read says where it starts, so a dropped
//! connection resumes at the last byte printed; a task run again (another worker, another run)
//! is followed there.
//!
//! Output is untrusted: on a terminal, control characters but newline and tab are shown
//! escaped ([`super::outcome::escape_controls`]) unless `--raw`; piped, the bytes go out as the
//! task wrote them (each stream judged by where it goes). A cut is always stated, naming the
//! stream, on stderr.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use chorus_core::TaskResult;
use chorus_io::sandbox::OutputStream;

use super::across::{at_owner, http_of};
use super::http::{request_peer, Peer, RawAnswer};
use super::outcome::{escape_controls, exit_code, plain_words};
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

/// Writes one stream of a task's output to the same stream of this process: its bytes, or
/// escaped for a terminal (a UTF-8 character split between two reads is held until its end
/// comes).
pub struct Printer {
    to: OutputStream,
    escape: bool,
    held: Vec<u8>,
}

impl Printer {
    /// Escaping when this process's `to` is a terminal, unless `raw`.
    pub fn for_stream(to: OutputStream, raw: bool) -> Printer {
        let terminal = match to {
            OutputStream::Stdout => std::io::stdout().is_terminal(),
            OutputStream::Stderr => std::io::stderr().is_terminal(),
        };
        Printer::new(to, !raw && terminal)
    }

    pub fn new(to: OutputStream, escape: bool) -> Printer {
        Printer {
            to,
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
        let shown = self.shown(bytes);
        self.write(&shown)
    }

    /// Writes what is still held.
    fn finish(&mut self) -> anyhow::Result<()> {
        let held = self.flush();
        self.write(&held)
    }

    fn write(&self, bytes: &[u8]) -> anyhow::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        match self.to {
            OutputStream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()?;
            }
            OutputStream::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(bytes)?;
                err.flush()?;
            }
        }
        Ok(())
    }
}

/// One stream of the run being read: how far, whether it ended, and where it is printed.
struct Cursor {
    stream: OutputStream,
    offset: u64,
    done: bool,
    printer: Printer,
}

impl Cursor {
    fn new(stream: OutputStream, raw: bool) -> Cursor {
        Cursor {
            stream,
            offset: 0,
            done: false,
            printer: Printer::for_stream(stream, raw),
        }
    }

    /// Prints a 200 answer's bytes; the stream ends once the run ended and all of it was read.
    fn take(&mut self, a: &RawAnswer) -> anyhow::Result<()> {
        self.printer.print(&a.body)?;
        self.offset += a.body.len() as u64;
        let size: u64 = a
            .header("chorus-log-size")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if a.header("chorus-log-finished") == Some("true") && self.offset >= size {
            self.end(a)?;
        }
        Ok(())
    }

    /// Ends the stream: what the printer held, then its cut, if any, stated.
    fn end(&mut self, a: &RawAnswer) -> anyhow::Result<()> {
        self.done = true;
        self.printer.finish()?;
        if let Some(cut) = cut_statement(self.stream, a) {
            eprintln!("chorus: {cut}");
        }
        Ok(())
    }
}

/// What one read of a stream came to.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// The stream had ended before: not asked.
    Skipped,
    /// A 200, printed.
    Read,
    /// A 404: the worker has no log of the run (yet, or at all); its words.
    Missing(String),
    /// Another answer or none: asked again later.
    Failed,
}

/// Reads the next part of `c`'s stream of run `attempt`, following.
async fn step(http: &Peer, id: &str, attempt: u32, c: &mut Cursor) -> anyhow::Result<Step> {
    if c.done {
        return Ok(Step::Skipped);
    }
    match read(http, id, attempt, c.stream, c.offset, true).await {
        Ok(a) if a.code == 200 => {
            c.take(&a)?;
            Ok(Step::Read)
        }
        Ok(a) if a.code == 404 => Ok(Step::Missing(error_text(&a))),
        Ok(_) | Err(_) => Ok(Step::Failed),
    }
}

/// The run being read: its worker's API and its two streams.
struct Reading {
    run: Run,
    http: Peer,
    cursors: [Cursor; 2],
}

impl Reading {
    fn done(&self) -> bool {
        self.cursors.iter().all(|c| c.done)
    }
}

/// A run: the worker it is on and its number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) worker: String,
    pub(super) attempt: u32,
}

/// The run whose output the task's view points at: the one going, or the one that made its
/// result; none before it ran.
pub(super) fn run_of(view: &TaskView) -> Option<Run> {
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

/// The statement of a cut of `stream`, from a log answer's headers.
pub fn cut_statement(stream: OutputStream, answer: &RawAnswer) -> Option<String> {
    let stream = stream.name();
    let at: u64 = answer.header("chorus-log-cut-at")?.parse().ok()?;
    let size = if at > 0 && at.is_multiple_of(1 << 20) {
        format!("{} MiB", at >> 20)
    } else {
        format!("{at} bytes")
    };
    Some(match answer.header("chorus-log-dropped") {
        Some(n) if n.parse::<u64>().is_ok() => {
            format!("{stream} cut at {size}: {n} bytes not kept")
        }
        _ => format!(
            "{stream} cut at {size}: how many bytes were not kept is unknown (the worker stopped \
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
/// result is in (or `give_up`), its stdout on stdout and its stderr on stderr (escaped for a
/// terminal unless `raw`), each run's cuts stated and its waits said on stderr.
pub async fn follow(
    addr: &str,
    id: &str,
    raw: bool,
    give_up: Option<tokio::time::Instant>,
) -> anyhow::Result<Followed> {
    let mut streamed = false;
    let mut reading: Option<Reading> = None;
    let mut said: Option<String> = None;
    let mut failures = 0;
    let mut pause = Duration::from_millis(20);
    loop {
        let view = view(addr, id).await?;
        let run = run_of(&view);
        if run.is_some() && run.as_ref() != reading.as_ref().map(|r| &r.run) {
            let run = run.clone().unwrap_or_else(|| unreachable!("checked above"));
            if let Some(old) = &reading {
                eprintln!(
                    "chorus: run {} on {} ended; the task runs again: run {} on {}",
                    old.run.attempt,
                    short_id(&old.run.worker),
                    run.attempt,
                    short_id(&run.worker)
                );
            }
            match http_of(addr, &run.worker).await {
                Some(http) => {
                    reading = Some(Reading {
                        run,
                        http,
                        cursors: OutputStream::BOTH.map(|s| Cursor::new(s, raw)),
                    });
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
        if let Some(r) = reading.as_mut().filter(|r| !r.done()) {
            let Reading {
                run,
                http,
                cursors: [out, err],
            } = r;
            // Both at once: the worker answers both when either stream grows. A long poll
            // ends at `give_up` too (it may wait 20 s for output that does not come).
            let both = async {
                tokio::join!(
                    step(http, id, run.attempt, out),
                    step(http, id, run.attempt, err)
                )
            };
            let (a, b) = match give_up {
                Some(at) => match tokio::time::timeout_at(at, both).await {
                    Ok(steps) => steps,
                    Err(_) => return Ok(Followed::GaveUp { phase: view.phase }),
                },
                None => both.await,
            };
            let steps = [a?, b?];
            let missing = steps.iter().find_map(|s| match s {
                Step::Missing(why) => Some(why.clone()),
                _ => None,
            });
            if steps.contains(&Step::Failed) {
                // Not now (a worker down or cut off): asked again, a bounded number of times
                // in a row.
                failures += 1;
                if failures > MAX_FAILURES {
                    anyhow::bail!(
                        "the output of task {id} cannot be read at worker {} ({http}); \
                         `chorus task get {id}` shows its result's tails",
                        short_id(&run.worker)
                    );
                }
            } else if steps.contains(&Step::Read) {
                failures = 0;
            }
            match missing {
                Some(why) if view.result.is_some() => {
                    eprintln!(
                        "chorus: worker {} keeps no output of task {id} (run {}): {why}",
                        short_id(&run.worker),
                        run.attempt,
                    );
                    out.done = true;
                    err.done = true;
                }
                // Not there yet: the run is starting (its sandbox being made).
                _ => {}
            }
            if steps.contains(&Step::Read) {
                streamed = true;
                if view.result.is_none()
                    && give_up.is_some_and(|at| tokio::time::Instant::now() >= at)
                {
                    return Ok(Followed::GaveUp { phase: view.phase });
                }
                continue;
            }
        }
        if view.result.is_some() && reading.as_ref().is_none_or(Reading::done) {
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
pub(super) async fn view(addr: &str, id: &str) -> anyhow::Result<TaskView> {
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

/// One read of `stream` of run `attempt`'s log at its worker, bounded by [`READ_BOUND`].
pub(super) async fn read(
    http: &Peer,
    id: &str,
    attempt: u32,
    stream: OutputStream,
    offset: u64,
    follow: bool,
) -> anyhow::Result<RawAnswer> {
    let path = format!(
        "/tasks/{id}/logs?stream={}&offset={offset}&attempt={attempt}&follow={follow}",
        stream.name()
    );
    tokio::time::timeout(READ_BOUND, request_peer(http, "GET", &path, None, true))
        .await
        .map_err(|_| anyhow::anyhow!("{http} did not answer within {READ_BOUND:?}"))?
}

/// `chorus task logs`: what is there now, or with `-f` everything until the task ends (exit
/// code as `submit --wait`).
pub async fn run(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let id = &args.id;
    if args.follow {
        return match follow(&args.addr, id, args.raw, None).await? {
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
            "the output of task {id} is on worker {}, whose API cannot be reached from {} \
             (an API bound to its own loopback answers its own host only: ask a node on its \
             host, or bind its --http to an address the other nodes reach)",
            short_id(&run.worker),
            args.addr
        )
    })?;
    // What there is now: stdout, then stderr, each to the end of what is kept.
    for mut c in OutputStream::BOTH.map(|s| Cursor::new(s, args.raw)) {
        while !c.done {
            let a = read(&http, id, run.attempt, c.stream, c.offset, false).await?;
            if a.code != 200 {
                anyhow::bail!("{http} answered {}: {}", a.code, error_text(&a));
            }
            c.take(&a)?;
            if a.body.is_empty() && !c.done {
                c.end(&a)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_sees_controls_escaped_and_split_characters_whole() {
        let mut p = Printer::new(OutputStream::Stdout, true);
        let mut out = p.shown(b"ok \x1b[2J \xc3");
        out.extend(p.shown(b"\xa9\n"));
        out.extend(p.flush());
        assert_eq!(String::from_utf8(out).unwrap(), "ok \\x1b[2J \u{e9}\n");
        let mut raw = Printer::new(OutputStream::Stderr, false);
        assert_eq!(raw.shown(b"\x1b\xff"), b"\x1b\xff");
    }

    #[test]
    fn a_cut_is_stated_with_what_was_not_kept() {
        let answer = |h: &[(&str, &str)]| RawAnswer {
            code: 200,
            headers: h.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            body: Vec::new(),
        };
        assert_eq!(cut_statement(OutputStream::Stdout, &answer(&[])), None);
        assert_eq!(
            cut_statement(
                OutputStream::Stdout,
                &answer(&[
                    ("chorus-log-cut-at", "16777216"),
                    ("chorus-log-dropped", "42")
                ])
            )
            .unwrap(),
            "stdout cut at 16 MiB: 42 bytes not kept"
        );
        assert!(cut_statement(
            OutputStream::Stderr,
            &answer(&[
                ("chorus-log-cut-at", "10"),
                ("chorus-log-dropped", "unknown")
            ])
        )
        .unwrap()
        .contains("stderr cut at 10 bytes: how many"));
    }
}
