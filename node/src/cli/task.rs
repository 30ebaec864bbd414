//! `chorus task`: submit, watch, list and cancel tasks through any node's HTTP API.
//!
//! `submit --wait` streams the task's whole output as it comes ([`super::logs`]), on a terminal
//! and piped alike, and exits with the task's exit code; the other
//! endings are said in plain words on stderr and have exit codes of their own ([`exit_code`]).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use chorus_core::{TaskResult, TaskSpec, TaskStatus};
use serde_json::Value;

use super::across::{
    at_owner, describe_admin_view, list_cluster, rows_at, whereabouts, Answer, Filter, NodeTasks,
};
use super::http::request;
use super::taskfile::{cpus_to_millis, memory_size_mb, parse_repo, seconds_to_ms, TaskFile};
use crate::names::short_id;
use crate::wire::{cancelled_before_it_ran, TaskRow, TaskView};

use super::outcome::{escape_controls, exit_code, plain_words};

pub use crate::exit::{
    EXIT_CANCELLED, EXIT_ERROR, EXIT_OUT_OF_MEMORY, EXIT_REFUSED, EXIT_TIMED_OUT,
    EXIT_UNSCHEDULABLE, EXIT_WAIT_TIMEOUT,
};

/// The task subcommands.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Submit a task to any node (the node owns it and hands it to the admin, which places it
    /// on a worker).
    ///
    /// The task is described by flags, or by a spec file (`-f task.toml`, TOML: `image`,
    /// `command`, `workdir`, `repo`, `network`, `requires`, `key`, `secret_env`, `[env]`,
    /// `[limits]` with `timeout`, `memory`, `cpus`, `pids`), or both: flags given beside `-f`
    /// override the file's values (`--env K=V` one variable; `--require`, `--secret-env` the
    /// whole list; `--network` can only turn the network on).
    ///
    /// Prints the task id, or with `--wait` streams the task's whole output from the worker
    /// while it runs (as `chorus task logs -f`: its stdout on stdout, its stderr on stderr,
    /// piped or not) and exits with the task's exit code. Where the worker keeps no log, the
    /// result's last 8 KiB of each stream are printed instead, the cut said.
    ///
    /// Exit codes with `--wait` (the same as `chorus sandbox run`'s for the same endings):
    /// the task's own exit code when it exited; 128+N killed by signal N; 124 timed out;
    /// 137 out of memory; 130 cancelled; 125 the sandbox could not run it (a missing image,
    /// a failed start); 126 no live worker could run it (unschedulable); 75 no result within
    /// --wait-timeout; 2 the spec was refused (by this command or the node); 1 the node could
    /// not be reached.
    Submit(Box<SubmitArgs>),
    /// Show one task. Any node will do: a task lives at the node it was submitted to (the
    /// first part of its id), and a node asked about another's says where that one's API is,
    /// which this command then asks. While that node is down, the worker holding the result,
    /// or else the admin, answers for it (asked through every node the node at --addr knows).
    Get {
        /// The task id (ORIGIN-SEQ, as `submit` printed it).
        id: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        /// Also show where its time went: submit → placed and → result at its node, and the
        /// run's stages at its worker (acquire, arm, exec, cleanup, release).
        #[arg(long)]
        timings: bool,
    },
    /// List the tasks submitted to a node, or with --cluster to every node the node at --addr
    /// knows (each asked at the HTTP address it advertised; one that does not answer is named
    /// on stderr, its tasks not listed).
    List {
        /// The node's HTTP API.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Every node's tasks, not only the node's at --addr.
        #[arg(long)]
        cluster: bool,
        /// Only tasks submitted to this node (its id, or the last 8 characters tables print).
        #[arg(long, value_name = "ID")]
        node: Option<String>,
        /// Only tasks that run or ran on this worker (its id, or its last 8 characters).
        #[arg(long, value_name = "ID")]
        worker: Option<String>,
        /// Only tasks in this state: all, unfinished, a phase (submitted, queued, placed,
        /// finished, done) or a result (succeeded, failed, out_of_memory, timed_out, cancelled,
        /// error, unschedulable).
        #[arg(long, default_value = "all")]
        state: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a task's output from the worker that runs or ran it, through any node: its stdout
    /// on stdout, its stderr on stderr; with -f follow both until the task ends and exit with
    /// its exit code (the codes of `submit --wait`).
    ///
    /// Workers keep the first `[tasks] log_cap_mb` (16 MiB) of each stream of a run and the
    /// latest `logs_kept` (64) finished runs; a cut is stated on stderr. On a terminal control
    /// characters are shown escaped unless --raw; piped, the bytes are as the task wrote them.
    Logs(super::logs::LogsArgs),
    /// Cancel a task, through any node (as `get`, it is cancelled at the node it was submitted
    /// to). While that node is out of reach, the node at --addr keeps the cancel (token role
    /// operate): the admin stops the run now, and the task's node ends it cancelled once back.
    Cancel {
        /// The task id.
        id: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
}

/// `chorus task submit`.
#[derive(clap::Args)]
pub struct SubmitArgs {
    /// The HTTP API of any node.
    #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
    pub addr: String,
    /// A task spec file (TOML; see above); flags given beside it override its values.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
    /// The image (it must exist on the workers; nothing is pulled).
    #[arg(long, required_unless_present = "file")]
    pub image: Option<String>,
    /// A repository from the worker's `[repos]`, `NAME:ro` or `NAME:rw`, mounted at
    /// /workspace (only workers offering it are chosen).
    #[arg(long, value_name = "NAME:ro|rw")]
    pub repo: Option<String>,
    /// An environment variable, `K=V` (repeatable).
    #[arg(long, value_name = "K=V")]
    pub env: Vec<String>,
    /// A secret environment variable, its value taken from this command's own environment
    /// variable K (repeatable): sealed by the node under the cluster's pre-shared key, opened
    /// only by the worker for the command, never shown by the API nor kept in plain text.
    #[arg(long, value_name = "K")]
    pub secret_env: Vec<String>,
    /// Working directory inside the sandbox (default: /workspace).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Kill the command after this many seconds (fractions allowed) [default: 600].
    #[arg(long, value_name = "S")]
    pub timeout: Option<f64>,
    /// Memory limit: a number with k, m or g (`64m`); a bare number is MiB [default: the
    /// worker's, 512m].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// CPU limit in CPUs (`0.5`) [default: the worker's, 1].
    #[arg(long, value_name = "CPUS")]
    pub cpus: Option<f64>,
    /// Process limit [default: the worker's, 256].
    #[arg(long, value_name = "N")]
    pub pids: Option<u32>,
    /// Give the sandbox a (firewalled) network.
    #[arg(long)]
    pub network: bool,
    /// A capability the worker must advertise (repeatable).
    #[arg(long, value_name = "CAP")]
    pub require: Vec<String>,
    /// An idempotency key: submitting again with the same key (and spec) names the same task
    /// instead of making a second one.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
    /// Wait for the result, print its output and exit with the task's exit code.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: print the output exactly as the task wrote it, on a terminal too. By
    /// default control characters other than newline and tab are shown escaped (`\x1b`) on a
    /// terminal, so a task's output cannot drive it; piped, the bytes are as the task wrote
    /// them.
    #[arg(long, requires = "wait")]
    pub raw: bool,
    /// With --wait: stop waiting after this many seconds (exit 75; the task goes on, and
    /// `chorus task get ID` follows it).
    #[arg(long, value_name = "S", requires = "wait")]
    pub wait_timeout: Option<f64>,
    /// The command and its arguments.
    #[arg(last = true, required_unless_present = "file")]
    pub command: Vec<String>,
}

/// What `submit` sends: the spec, the names of its secret variables and its idempotency key.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    /// What to run.
    pub spec: TaskSpec,
    /// The names of its secret variables (their values are read from this command's
    /// environment when it is sent).
    pub secret_env: Vec<String>,
    /// Its idempotency key.
    pub key: Option<String>,
}

impl SubmitArgs {
    /// The submission these arguments describe: the spec file's (`-f`), if any, with the flags
    /// given over it.
    pub fn submission(&self) -> anyhow::Result<Submission> {
        let file = match &self.file {
            Some(path) => Some(TaskFile::from_file(path)?),
            None => None,
        };
        self.over(file.unwrap_or_default())
    }

    /// The flags given over `file`'s values.
    pub fn over(&self, file: TaskFile) -> anyhow::Result<Submission> {
        let mut env = file.env;
        for kv in &self.env {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv:?} is not K=V"))?;
            env.insert(k.to_owned(), v.to_owned());
        }
        let repo = match &self.repo {
            None => file.repo,
            Some(r) => Some(parse_repo(r).map_err(|e| anyhow!("--repo {e}"))?),
        };
        let timeout_ms = match self.timeout {
            None => file.limits.timeout.unwrap_or(DEFAULT_TIMEOUT_MS),
            Some(t) => {
                seconds_to_ms(t).context("--timeout must be a positive number of seconds")?
            }
        };
        let cpu_millis = match self.cpus {
            None => file.limits.cpus.unwrap_or(0),
            Some(c) => cpus_to_millis(c)
                .with_context(|| format!("--cpus {c} must be a positive number of CPUs"))?,
        };
        let memory_mb = match &self.memory {
            None => file.limits.memory.unwrap_or(0),
            Some(m) => parse_memory_mb(m)?,
        };
        let image = match (self.image.clone(), file.image) {
            (Some(i), _) | (None, Some(i)) => i,
            (None, None) => bail!("no image: give --image, or `image` in the task file"),
        };
        let command = match (self.command.is_empty(), file.command) {
            (false, _) => self.command.clone(),
            (true, Some(c)) => c,
            (true, None) => bail!("no command: give it after `--`, or `command` in the task file"),
        };
        let or_file = |flags: &[String], file: Vec<String>| {
            if flags.is_empty() {
                file
            } else {
                flags.to_vec()
            }
        };
        Ok(Submission {
            spec: TaskSpec {
                image,
                command,
                env,
                workdir: self.workdir.clone().or(file.workdir),
                timeout_ms,
                memory_mb,
                cpu_millis,
                pids: self.pids.or(file.limits.pids).unwrap_or(0),
                network: self.network || file.network.unwrap_or(false),
                requires: or_file(&self.require, file.requires),
                repo,
                // The node says who submitted it.
                submitter: None,
                live: false,
                idle_ms: 0,
            },
            secret_env: or_file(&self.secret_env, file.secret_env),
            key: self.key.clone().or(file.key),
        })
    }
}

/// The timeout of a task that names none: ten minutes.
pub const DEFAULT_TIMEOUT_MS: u64 = 600_000;

/// `64m` → 64, `1g` → 1024, `512k` → 1 (rounded up), `100` → 100 (MiB).
pub fn parse_memory_mb(text: &str) -> anyhow::Result<u32> {
    memory_size_mb(text).map_err(|e| anyhow!("--memory {e}"))
}

/// Runs a task subcommand; the exit code is the task's for `submit --wait`.
pub async fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Submit(args) => submit(&args).await,
        Cmd::Get {
            id,
            addr,
            json,
            timings,
        } => {
            let a = at_owner(&addr, "GET", &format!("/tasks/{id}")).await?;
            if a.code == 404 && a.value["owner_connected"] == false {
                let owner = a.value["owner"].as_str().unwrap_or_default().to_owned();
                let found = whereabouts(&addr, &id).await;
                if let Some((worker, r)) = &found.held {
                    if json {
                        let doc = serde_json::json!({
                            "task": id, "owner": owner, "held_by": worker, "result": r,
                        });
                        println!("{}", serde_json::to_string_pretty(&doc)?);
                    } else {
                        let mut out = format!(
                            "task {id}: its node {owner} is out of reach; worker {worker} holds \
                             its result until that node is back\n"
                        );
                        render_result(r, &mut out);
                        print!("{}", escape_controls(&out));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                if let Some((admin, view)) = &found.at_admin {
                    if json {
                        let doc = serde_json::json!({
                            "task": id, "owner": owner, "admin": admin, "at_admin": view,
                            "cancel_kept_at": found.cancel_kept_at,
                        });
                        println!("{}", serde_json::to_string_pretty(&doc)?);
                    } else {
                        let mut out = format!(
                            "task {id}: its node {owner} is out of reach; {}\n",
                            describe_admin_view(admin, view)
                        );
                        if !found.cancel_kept_at.is_empty() {
                            let at: Vec<&str> =
                                found.cancel_kept_at.iter().map(|n| short_id(n)).collect();
                            out.push_str(&format!("a cancel is kept at {}\n", at.join(", ")));
                        }
                        print!("{}", escape_controls(&out));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let view = view_of(a)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print!("{}", render(&view));
                if timings {
                    print!("{}", escape_controls(&render_timings(&view)));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::List {
            addr,
            state,
            json,
            cluster,
            node,
            worker,
        } => {
            let filter = Filter { node, worker };
            // One node's list is the cluster's with one member; asked the same way.
            let nodes = if cluster {
                list_cluster(&addr, &state, &filter).await?
            } else {
                let rows = rows_at(&addr, &state).await.map_err(anyhow::Error::msg)?;
                vec![NodeTasks {
                    node_id: addr.clone(),
                    tasks: Ok(filter.kept(rows)),
                }]
            };
            if json {
                let nodes: Vec<Value> = nodes
                    .iter()
                    .map(|n| match &n.tasks {
                        Ok(rows) => serde_json::json!({ "node_id": n.node_id, "tasks": rows }),
                        Err(e) => serde_json::json!({ "node_id": n.node_id, "error": e }),
                    })
                    .collect();
                let doc = if cluster {
                    serde_json::json!({ "nodes": nodes })
                } else {
                    serde_json::json!({ "tasks": nodes[0]["tasks"] })
                };
                println!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(ExitCode::SUCCESS);
            }
            let mut rows: Vec<&TaskRow> = Vec::new();
            for n in &nodes {
                match &n.tasks {
                    Ok(r) => rows.extend(r),
                    Err(e) => eprintln!("node {}: {e}", short_id(&n.node_id)),
                }
            }
            print!("{}", render_rows(&rows));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Logs(args) => super::logs::run(args).await,
        Cmd::Cancel { id, addr } => {
            let a = at_owner(&addr, "DELETE", &format!("/tasks/{id}")).await?;
            if a.code != 202 {
                bail!(
                    "{} answered {}: {}",
                    a.addr,
                    a.code,
                    error_of(&a.value, &a.body)
                );
            }
            match a.value["message"].as_str() {
                Some(m) if a.value["cancel"] == "forwarded" => {
                    println!("cancel of task {id} kept at {}: {m}", a.addr)
                }
                _ => println!("cancel requested for task {id}"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn error_of(value: &Value, body: &str) -> String {
    value["error"]
        .as_str()
        .map_or_else(|| body.trim().to_owned(), str::to_owned)
}

/// The task document of a `GET /tasks/{id}` answer, or the error it says.
fn view_of(a: Answer) -> anyhow::Result<TaskView> {
    if a.code != 200 {
        bail!(
            "{} answered {}: {}",
            a.addr,
            a.code,
            error_of(&a.value, &a.body)
        );
    }
    serde_json::from_value(a.value).context("the task document is not what this chorus expects")
}

/// The task table: one line a task, and its waiting reason or how it ended early.
pub fn render_rows(rows: &[&TaskRow]) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{:<64} {:<9} {:<13} {:>4}  WORKER\n",
        "TASK", "PHASE", "RESULT", "EXIT"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<64} {:<9} {:<13} {:>4}  {}",
            r.task,
            r.phase,
            r.status.map_or("-", TaskStatus::as_str),
            r.exit_code.map_or("-".to_owned(), |c| c.to_string()),
            r.worker.as_deref().map_or("-", short_id)
        );
        if let Some(why) = &r.pending {
            let _ = writeln!(out, "  waiting: {}", escape_controls(why));
        }
        if r.status == Some(TaskStatus::Cancelled) && r.worker.is_none() {
            let _ = writeln!(out, "  cancelled before it ran");
        }
    }
    out
}

async fn submit(args: &SubmitArgs) -> anyhow::Result<ExitCode> {
    let Submission {
        spec,
        secret_env,
        key,
    } = match args.submission() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("chorus: {e}");
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
    };
    let mut body = serde_json::to_value(&spec)?;
    if !secret_env.is_empty() {
        let mut secrets = serde_json::Map::new();
        for name in &secret_env {
            match std::env::var(name) {
                Ok(v) => secrets.insert(name.clone(), Value::String(v)),
                Err(_) => {
                    eprintln!(
                        "chorus: secret variable {name} (--secret-env, or `secret_env` in the task \
                         file): this command's environment has no variable {name} (export it \
                         first; its value is what is sent)"
                    );
                    return Ok(ExitCode::from(EXIT_REFUSED));
                }
            };
        }
        body["secret_env"] = Value::Object(secrets);
    }
    if let Some(k) = key {
        body["key"] = Value::String(k);
    }
    let addr = &args.addr;
    let (code, text) = request(addr, "POST", "/tasks", Some(&body.to_string()))
        .await
        .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let id = match (code, value["task"].as_str()) {
        (200 | 201, Some(id)) => id.to_owned(),
        (400, _) => {
            eprintln!("chorus: refused: {}", error_of(&value, &text));
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        _ => bail!("{addr} answered {code}: {}", error_of(&value, &text)),
    };
    if !args.wait {
        println!("{id}");
        return Ok(ExitCode::SUCCESS);
    }
    // The id first: whoever waits can follow or cancel the task from another terminal.
    eprintln!("chorus: task {id} submitted; waiting for its result");
    let give_up = match args.wait_timeout {
        Some(s) if s.is_finite() && s >= 0.0 => {
            Some(tokio::time::Instant::now() + Duration::from_secs_f64(s.min(1e9)))
        }
        Some(s) => {
            eprintln!("chorus: --wait-timeout {s} must be a number of seconds");
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        None => None,
    };
    use std::io::Write;
    // The whole output, streamed as it comes from the worker's log (each stream to its own),
    // on a terminal and piped alike: a script gets what a person sees (issue 54, item 7; the
    // result carries only the last 8 KiB of each stream). Only escaping differs, as for
    // `task logs`: on a terminal unless --raw.
    let (result, streamed) = match super::logs::follow(addr, &id, args.raw, give_up).await? {
        super::logs::Followed::Done { result, streamed } => (result, streamed),
        super::logs::Followed::GaveUp { phase } => {
            eprintln!(
                "chorus: no result for task {id} within --wait-timeout (it is {phase}); it \
                 goes on: `chorus task logs {id} -f` follows it"
            );
            return Ok(ExitCode::from(EXIT_WAIT_TIMEOUT));
        }
    };
    let mut err = std::io::stderr().lock();
    // No log to read (the worker keeps none, or cannot be reached): the result's tails.
    if !streamed {
        // Escaped as a streamed log would be: for a terminal, unless --raw.
        use chorus_io::sandbox::OutputStream;
        let shown = |to: OutputStream, text: &str| {
            let mut p = super::logs::Printer::for_stream(to, args.raw);
            let mut bytes = p.shown(text.as_bytes());
            bytes.extend(p.flush());
            bytes
        };
        let mut out = std::io::stdout().lock();
        out.write_all(&shown(OutputStream::Stdout, &result.stdout))?;
        out.flush()?;
        err.write_all(&shown(OutputStream::Stderr, &result.stderr))?;
        for (name, cut) in [
            ("stdout", result.stdout_truncated_bytes),
            ("stderr", result.stderr_truncated_bytes),
        ] {
            if cut > 0 {
                writeln!(
                    err,
                    "chorus: {name}: only its last part is shown; {cut} earlier bytes were cut"
                )?;
            }
        }
    }
    if let Some(words) = plain_words(&id, &result) {
        writeln!(err, "chorus: {words}")?;
    }
    Ok(ExitCode::from(exit_code(&result)))
}

/// Where a task's time went (`task get --timings`): its node's milestones, the worker's stages,
/// and what is left of the whole for messages and queues between them.
pub fn render_timings(v: &TaskView) -> String {
    let t = v.timings.clone().unwrap_or_default();
    let mut out = String::from("  timings (ms after submit, at its node):\n");
    let at = |ms: Option<u64>| ms.map_or_else(|| "-".to_owned(), |ms| ms.to_string());
    out.push_str(&format!(
        "    placed {:>8}  (heard here)\n",
        at(t.placed_ms)
    ));
    out.push_str(&format!("    result {:>8}\n", at(t.result_ms)));
    let Some(r) = v.result.as_ref().filter(|r| !r.timings.is_empty()) else {
        out.push_str("  the run's stages: not measured (no run, or an older worker)\n");
        return out;
    };
    let run = r.timings.total_ms();
    out.push_str(&format!(
        "  the run's stages at worker {} (ms):\n",
        r.worker
    ));
    for (stage, ms) in r.timings.stages() {
        out.push_str(&format!("    {stage:<8} {ms:>8}\n"));
    }
    out.push_str(&format!("    {:<8} {run:>8}\n", "= run"));
    if let Some(total) = t.result_ms {
        out.push_str(&format!(
            "  elsewhere {:>6}  (submit → result less the run: offer, placement, messages, queues)\n",
            total.saturating_sub(run)
        ));
    }
    out
}

pub fn render(v: &TaskView) -> String {
    let out = render_unescaped(v);
    escape_controls(&out)
}

fn render_unescaped(v: &TaskView) -> String {
    let mut out = format!("task {}: {}", v.task, v.phase);
    if let Some(w) = &v.worker {
        out.push_str(&format!(" on {w}"));
    }
    if let Some(a) = v.attempt {
        out.push_str(&format!(" (run {a})"));
    }
    if v.result.as_ref().is_some_and(cancelled_before_it_ran) {
        out.push_str(", cancelled before it ran");
    } else if v.cancel {
        out.push_str(", cancel requested");
    }
    out.push('\n');
    if let Some(why) = &v.pending {
        let secs = v.pending_ms.unwrap_or(0) / 1_000;
        out.push_str(&format!(
            "  waiting: {why}, for {secs} s (it ends unschedulable if no live worker can run \
             it for 60 s, or 60 heartbeats where they come more often than once a second)\n"
        ));
    }
    out.push_str(&format!(
        "  image {}, command {:?}, timeout {} ms\n",
        v.spec.image, v.spec.command, v.spec.timeout_ms
    ));
    if let Some(r) = &v.result {
        render_result(r, &mut out);
    }
    out
}

/// A result as `task get` shows it: how it ended, what it used, its error and output tails.
fn render_result(r: &TaskResult, out: &mut String) {
    if cancelled_before_it_ran(r) {
        out.push_str("  result: cancelled before it ran\n");
    } else {
        out.push_str(&format!(
            "  result: {}{}{} after {} ms (run {})\n",
            r.status,
            r.exit_code
                .map_or(String::new(), |c| format!(", exit code {c}")),
            r.signal.map_or(String::new(), |s| format!(", signal {s}")),
            r.duration_ms,
            r.attempt
        ));
        if r.usage != Default::default() {
            out.push_str(&format!(
                "  used: {} ms of CPU, peak memory {:.1} MiB\n",
                r.usage.cpu_ms,
                r.usage.peak_memory_kb as f64 / 1024.0
            ));
        }
        if let Some(e) = &r.error {
            out.push_str(&format!("  error: {e}\n"));
        }
        for (name, tail, cut) in [
            ("stdout", &r.stdout, r.stdout_truncated_bytes),
            ("stderr", &r.stderr, r.stderr_truncated_bytes),
        ] {
            if !tail.is_empty() {
                let head = if cut > 0 {
                    format!("the last {} bytes; {cut} earlier bytes cut", tail.len())
                } else {
                    "all of it".to_owned()
                };
                out.push_str(&format!("  {name} ({head}):\n"));
                for line in tail.lines() {
                    out.push_str(&format!("    {line}\n"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        let text = "ok\tline\n\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}31m";
        let shown = escape_controls(text);
        assert_eq!(shown, "ok\tline\n\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u{9b}31m");
        assert!(!shown
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'));
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    fn submit_args(extra: &[&str]) -> SubmitArgs {
        let mut argv = vec!["x", "submit", "--image", "img"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().cmd {
            Cmd::Submit(a) => *a,
            _ => panic!("not submit"),
        }
    }

    #[test]
    fn flags_make_the_spec() {
        let a = submit_args(&[
            "--repo",
            "src:rw",
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--workdir",
            "/w",
            "--timeout",
            "1.5",
            "--memory",
            "64m",
            "--cpus",
            "0.5",
            "--pids",
            "9",
            "--network",
            "--require",
            "gpu",
            "--key",
            "k",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo hi",
        ]);
        let sub = a.submission().unwrap();
        assert_eq!(sub.key.as_deref(), Some("k"));
        let s = sub.spec;
        assert_eq!(s.command, ["sh", "-c", "echo hi"]);
        assert_eq!(s.env["B"], "x=y");
        assert_eq!(s.workdir.as_deref(), Some("/w"));
        assert_eq!(s.timeout_ms, 1_500);
        assert_eq!((s.memory_mb, s.cpu_millis, s.pids), (64, 500, 9));
        assert!(s.network && a.wait);
        assert_eq!(s.requires, ["gpu"]);
        s.check().unwrap();
        let repo = s.repo.unwrap();
        assert_eq!((repo.name.as_str(), repo.writable), ("src", true));
        assert!(submit_args(&["--repo", "src:wr", "--", "true"])
            .submission()
            .is_err());
        assert!(
            !submit_args(&["--repo", "src", "--", "true"])
                .submission()
                .unwrap()
                .spec
                .repo
                .unwrap()
                .writable
        );
        // No timeout given: ten minutes.
        let s = submit_args(&["--", "true"]).submission().unwrap().spec;
        assert_eq!(s.timeout_ms, DEFAULT_TIMEOUT_MS);
    }

    fn args(argv: &[&str]) -> Result<SubmitArgs, clap::Error> {
        let mut all = vec!["x", "submit"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).map(|c| match c.cmd {
            Cmd::Submit(a) => *a,
            _ => panic!("not submit"),
        })
    }

    const FILE: &str = r#"
image = "from-file"
command = ["sh", "-c", "echo file"]
workdir = "/file"
repo = "src:ro"
requires = ["gpu", "docker"]
key = "file-key"
secret_env = ["FILE_SECRET"]

[env]
A = "file"
B = "file"

[limits]
timeout = 30
memory = "1g"
cpus = 2
pids = 50
"#;

    /// Issue 35: `submit -f task.toml` sends the file's spec.
    #[test]
    fn a_task_file_makes_the_request() {
        let path = std::env::temp_dir().join(format!("chorus-task-{}.toml", std::process::id()));
        std::fs::write(&path, FILE).unwrap();
        let a = args(&["-f", path.to_str().unwrap()]).unwrap();
        let sub = a.submission().unwrap();
        std::fs::remove_file(&path).unwrap();
        let s = &sub.spec;
        assert_eq!(s.image, "from-file");
        assert_eq!(s.command, ["sh", "-c", "echo file"]);
        assert_eq!(s.workdir.as_deref(), Some("/file"));
        assert_eq!(
            (s.timeout_ms, s.memory_mb, s.cpu_millis, s.pids),
            (30_000, 1_024, 2_000, 50)
        );
        assert_eq!(s.requires, ["gpu", "docker"]);
        assert!(!s.network && !s.repo.as_ref().unwrap().writable);
        assert_eq!(sub.secret_env, ["FILE_SECRET"]);
        assert_eq!(sub.key.as_deref(), Some("file-key"));
        s.check().unwrap();
        // The request body is the spec the node checks.
        let body = serde_json::to_value(s).unwrap();
        assert_eq!(body["image"], "from-file");
        assert_eq!(body["timeout_ms"], 30_000);
    }

    /// Issue 35: flags beside `-f` override the file's values, one by one.
    #[test]
    fn flags_override_the_task_file() {
        let file = TaskFile::from_toml(FILE).unwrap();
        let a = args(&[
            "-f",
            "unused.toml",
            "--image",
            "flag",
            "--env",
            "B=flag",
            "--timeout",
            "5",
            "--memory",
            "64m",
            "--require",
            "cpu",
            "--repo",
            "src:rw",
            "--network",
            "--key",
            "flag-key",
            "--",
            "true",
        ])
        .unwrap();
        let sub = a.over(file.clone()).unwrap();
        let s = &sub.spec;
        assert_eq!(s.image, "flag");
        assert_eq!(s.command, ["true"]);
        assert_eq!(s.env["A"], "file");
        assert_eq!(s.env["B"], "flag");
        assert_eq!((s.timeout_ms, s.memory_mb), (5_000, 64));
        // Not given as flags: the file's.
        assert_eq!((s.cpu_millis, s.pids), (2_000, 50));
        assert_eq!(s.workdir.as_deref(), Some("/file"));
        assert_eq!(s.requires, ["cpu"]);
        assert!(s.network && s.repo.as_ref().unwrap().writable);
        assert_eq!(sub.key.as_deref(), Some("flag-key"));
        assert_eq!(sub.secret_env, ["FILE_SECRET"]);
        // A bad flag is named as typed, even over a good file.
        let a = args(&["-f", "unused.toml", "--cpus", "0"]).unwrap();
        let e = a.over(file).unwrap_err().to_string();
        assert!(e.contains("--cpus"), "{e}");
    }

    /// Without `-f`, the image and the command are required; with it, either may come from
    /// the file, and one missing from both is said.
    #[test]
    fn the_file_makes_image_and_command_optional() {
        assert!(args(&["--", "true"]).is_err());
        assert!(args(&["--image", "i"]).is_err());
        let a = args(&["-f", "t.toml"]).unwrap();
        let e = a.over(TaskFile::default()).unwrap_err().to_string();
        assert!(e.contains("no image") && e.contains("`image`"), "{e}");
        let file = TaskFile::from_toml("image = \"i\"\n").unwrap();
        let e = a.over(file).unwrap_err().to_string();
        assert!(e.contains("no command") && e.contains("`command`"), "{e}");
        // A file that does not parse is named with its line and key.
        let path = std::env::temp_dir().join(format!("chorus-bad-{}.toml", std::process::id()));
        std::fs::write(&path, "image = \"i\"\n[limits]\nmemroy = \"1g\"\n").unwrap();
        let a = args(&["-f", path.to_str().unwrap()]).unwrap();
        let e = a.submission().unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(
            e.contains("task file") && e.contains("line 3") && e.contains("memroy"),
            "{e}"
        );
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory_mb("64m").unwrap(), 64);
        assert_eq!(parse_memory_mb("1g").unwrap(), 1_024);
        assert_eq!(parse_memory_mb("1G").unwrap(), 1_024);
        assert_eq!(parse_memory_mb("512k").unwrap(), 1);
        assert_eq!(parse_memory_mb("100").unwrap(), 100);
        assert_eq!(parse_memory_mb("64MB").unwrap(), 64);
        assert!(parse_memory_mb("lots").is_err());
        assert!(parse_memory_mb("0").is_err());
    }

    #[test]
    fn every_ending_has_its_own_exit_code_and_words() {
        let r = |status, exit_code, signal| TaskResult {
            status,
            exit_code,
            signal,
            worker: "w".into(),
            attempt: 1,
            duration_ms: 5,
            usage: Default::default(),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated_bytes: 0,
            stderr_truncated_bytes: 0,
            error: Some("image: no such image".into()),
            timings: Default::default(),
        };
        assert_eq!(exit_code(&r(TaskStatus::Succeeded, Some(0), None)), 0);
        assert_eq!(exit_code(&r(TaskStatus::Failed, Some(7), None)), 7);
        assert_eq!(exit_code(&r(TaskStatus::Failed, None, Some(15))), 143);
        let endings = [
            (TaskStatus::TimedOut, EXIT_TIMED_OUT, "timed out"),
            (
                TaskStatus::OutOfMemory,
                EXIT_OUT_OF_MEMORY,
                "ran out of memory",
            ),
            (TaskStatus::Cancelled, EXIT_CANCELLED, "cancelled"),
            (TaskStatus::Error, EXIT_ERROR, "no such image"),
            (
                TaskStatus::Unschedulable,
                EXIT_UNSCHEDULABLE,
                "unschedulable: image: no such image",
            ),
        ];
        for (status, code, words) in endings {
            let result = r(status, None, Some(9));
            assert_eq!(exit_code(&result), code);
            let said = plain_words("n-1", &result).unwrap();
            assert!(said.contains(words), "{said}");
        }
        assert!(plain_words("n-1", &r(TaskStatus::Failed, Some(3), None)).is_none());
    }

    /// Task `task` in `phase`, as `GET /tasks/{id}` shows it: an `img` running `true`, nothing
    /// else set.
    fn view(task: &str, phase: &str) -> TaskView {
        TaskView {
            task: task.into(),
            phase: phase.into(),
            worker: None,
            attempt: None,
            cancel: false,
            pending: None,
            pending_ms: None,
            key: None,
            submitted_at_ms: 1,
            spec: chorus_core::TaskSpec {
                image: "img".into(),
                command: vec!["true".into()],
                timeout_ms: 1_000,
                ..Default::default()
            },
            result: None,
            timings: None,
        }
    }

    #[test]
    fn timings_say_each_stage_and_what_is_left_for_the_rest() {
        let r = TaskResult {
            status: TaskStatus::Succeeded,
            exit_code: Some(0),
            signal: None,
            worker: "w".into(),
            attempt: 1,
            duration_ms: 70,
            usage: Default::default(),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated_bytes: 0,
            stderr_truncated_bytes: 0,
            error: None,
            timings: chorus_core::RunTimings {
                acquire_ms: 2,
                arm_ms: 1,
                exec_ms: 70,
                cleanup_ms: 1,
                release_ms: 0,
            },
        };
        let v = TaskView {
            result: Some(r),
            timings: Some(crate::wire::TaskTimings {
                placed_ms: None,
                result_ms: Some(90),
            }),
            ..view("n-3", "done")
        };
        let text = render_timings(&v);
        // The stages in turn: the run is 2 + 1 + 70 + 1 = 74 ms.
        for line in [
            "placed        -",
            "result       90",
            "exec           70",
            "= run          74",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        assert!(text.contains("elsewhere     16"), "{text}");
        // A result without stages says so.
        let v = view("n-4", "placed");
        assert!(render_timings(&v).contains("not measured"));
    }

    #[test]
    fn a_done_task_renders_its_result_usage_and_output() {
        let v = TaskView {
            worker: Some("w".into()),
            result: Some(TaskResult {
                status: TaskStatus::Succeeded,
                exit_code: Some(0),
                signal: None,
                worker: "w".into(),
                attempt: 1,
                duration_ms: 40,
                usage: chorus_core::Usage {
                    cpu_ms: 12,
                    peak_memory_kb: 3 * 1024 + 512,
                },
                stdout: "hi\n".into(),
                stderr: String::new(),
                stdout_truncated_bytes: 0,
                stderr_truncated_bytes: 0,
                error: None,
                timings: Default::default(),
            }),
            ..view("n-3", "done")
        };
        let text = render(&v);
        assert!(
            text.contains("result: succeeded, exit code 0 after 40 ms (run 1)"),
            "{text}"
        );
        assert!(
            text.contains("used: 12 ms of CPU, peak memory 3.5 MiB"),
            "{text}"
        );
        assert!(text.contains("    hi\n"), "{text}");
    }

    /// Issue 35: a task cancelled while queued reads as cancelled before it ran, not as a run
    /// of 0 ms on the admin.
    #[test]
    fn a_task_cancelled_before_it_ran_says_so() {
        let never = TaskResult {
            status: TaskStatus::Cancelled,
            exit_code: None,
            signal: None,
            worker: "admin".into(),
            attempt: 1,
            duration_ms: 0,
            usage: Default::default(),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated_bytes: 0,
            stderr_truncated_bytes: 0,
            error: None,
            timings: Default::default(),
        };
        let v = TaskView {
            cancel: true,
            result: Some(never.clone()),
            ..view("n-5", "done")
        };
        let text = render(&v);
        assert!(
            text.starts_with("task n-5: done, cancelled before it ran\n"),
            "{text}"
        );
        assert!(
            text.contains("  result: cancelled before it ran\n"),
            "{text}"
        );
        assert!(
            !text.contains("after 0 ms") && !text.contains("admin"),
            "{text}"
        );
        let said = plain_words("n-5", &never).unwrap();
        assert_eq!(said, "task n-5 was cancelled before it ran");
        assert_eq!(exit_code(&never), EXIT_CANCELLED);
        // Cancelled while it ran: the run is said.
        let killed = TaskResult {
            signal: Some(9),
            duration_ms: 800,
            worker: "w".into(),
            ..never
        };
        assert!(plain_words("n-5", &killed)
            .unwrap()
            .contains("on w (run 1, 800 ms)"));
    }

    /// Issue 33: a task no live worker can run says why it waits, and for how long.
    #[test]
    fn a_waiting_task_renders_why() {
        let v = TaskView {
            pending: Some("no worker offers repo:nosuch (3 workers checked)".into()),
            pending_ms: Some(12_500),
            ..view("n-4", "queued")
        };
        let text = render(&v);
        assert!(
            text.starts_with("task n-4: queued\n  waiting: no worker offers repo:nosuch (3 workers checked), for 12 s"),
            "{text}"
        );
    }
}
