//! `chorus`: the CHORUS node daemon (DESIGN §8) and its tools, as a library so other binaries
//! (the end-to-end test crate's) can be this same program. `src/main.rs` calls [`main`].
//!
//! * `chorus run` — the node: event log, transport, runtime loop, HTTP API.
//! * `chorus status` — a node's status, for people.
//! * `chorus replay` — re-runs a data directory's event log and checks the decisions.
//! * `chorus devcluster` — a local cluster of real `chorus run` processes, with failover.
//! * `chorus sandbox` — the Docker sandbox from the command line.
//! * `chorus task` — submit, watch, list and cancel tasks through a node's HTTP API.

pub mod config;
pub mod devcluster;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod hostclock;
pub mod http;
pub mod members;
pub mod merge;
pub mod observe;
pub mod recover;
pub mod replay;
pub mod run;
pub mod sandbox;
pub mod status;
pub mod task_cli;
pub mod tasks;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{LogFormat, NodeConfig, RunFlags};

#[derive(Parser)]
#[command(
    name = "chorus",
    version,
    about = "CHORUS: a peer-to-peer cluster daemon with partition-safe admin elections"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a node (every setting has a default: `chorus run` alone is a one-node cluster).
    ///
    /// Alone, the node listens on loopback only with mDNS off: a local demo. To join machines,
    /// listen on a reachable address (`--listen /ip4/0.0.0.0/tcp/7946`) and give `--bootstrap`,
    /// `--bootstrap-expect`, `--cluster-id` and usually `--psk-file`.
    ///
    /// Docker is not needed unless asked for: with `--docker` (`[sandbox] docker = true`) the
    /// node connects to the Docker Engine at start, removes the sandboxes its earlier runs left
    /// behind (owner gone or deadline passed) and logs how many, and does not start when Docker
    /// does not answer.
    ///
    /// SIGINT, SIGTERM and SIGHUP all stop the node gracefully (an admin steps down first, the
    /// event log is flushed, exit 0); SIGHUP does not reload. Exit code 2: a bad setting (one
    /// line naming the key or flag); 1: a start-up or runtime failure (a port in use, a data
    /// directory whose event log is gone, a corrupt log).
    Run(Box<RunFlags>),
    /// Show a node's status.
    Status {
        /// The node's HTTP API.
        #[arg(long, default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        /// One table of every node this node knows (role, term, admin, lease, last contact),
        /// each from the node's own status where its HTTP API is reachable from here.
        #[arg(long)]
        cluster: bool,
    },
    /// List the cluster's voters and standbys, or add or remove a voter.
    ///
    /// Without a subcommand: the membership as the node at `--addr` sees it (each node's role,
    /// whether it is reachable from that node, its last contact and score). `add ID` makes an
    /// admin-eligible node (connected to the admin) a voter; `remove ID` makes a voter a
    /// standby, or forgets it if it is gone for good. Any node forwards the change to the
    /// admin; the command returns once a majority of the old and of the new electorate hold it,
    /// or fails with the reason (exit 1). One change at a time.
    Members {
        /// The HTTP API of any node of the cluster.
        #[arg(long, default_value = "127.0.0.1:7070", global = true)]
        addr: String,
        /// Print the raw JSON (listing only).
        #[arg(long)]
        json: bool,
        /// How long to wait for a change to commit, in seconds.
        #[arg(long, default_value_t = 10, global = true)]
        timeout: u64,
        #[command(subcommand)]
        change: Option<MembersCmd>,
    },
    /// Replay a node's event log and check its decisions (the node must be stopped; a
    /// read-only copy works).
    ///
    /// Given several data directories (or a fault journal), replays each and merges them into
    /// one trace on the host's clock — what a real cluster decided, together — for
    /// `chorus-sim check FILE` to judge against the invariants of DESIGN §5.
    Replay {
        /// The node's data directory (or its `log` directory); repeat it to merge nodes.
        #[arg(long, value_name = "DIR", required = true)]
        data_dir: Vec<PathBuf>,
        /// Also write a DESIGN §6 trace (JSON lines) here.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Faults the logs cannot know (kills, cuts, heals), as JSON lines of trace records
        /// timed by `at_monotonic_ms` (or `at_unix_ms`) instead of `t`; merged into the trace.
        #[arg(long, value_name = "FILE")]
        journal: Option<PathBuf>,
        /// Invariant 7's bound on a task's result in the merged trace's header, for
        /// `chorus-sim check` [default: the simulator's bound for the nodes' settings and the
        /// longest task timeout submitted; it leaves out queueing, so a cluster given more
        /// tasks than slots needs a larger one].
        #[arg(long, value_name = "MS", requires = "trace")]
        task_bound_ms: Option<u64>,
    },
    /// Last-resort recovery of a cluster that lost its quorum for good (run on one STOPPED
    /// survivor).
    ///
    /// `--force-new-cluster` makes this node's electorate itself alone (one version later, in
    /// a new term), written into its event log. Start the node afterwards: it elects itself;
    /// add voters back with `chorus members add`. Pick the survivor with the highest electorate
    /// version (`chorus status` shows it). Unsafe if the other voters are not gone for good: a
    /// majority of the old electorate that comes back on its own can still elect its own admin
    /// — keep them stopped, or wipe their data directories before they rejoin.
    Recover {
        /// The stopped node's data directory.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// Required: says that you mean it.
        #[arg(long, required = true)]
        force_new_cluster: bool,
    },
    /// Start a local cluster of `chorus run` processes and watch its admin.
    ///
    /// By default the admin is killed once, 5 s after the cluster agrees on it, the failover
    /// time is printed, and the node is restarted. Ctrl-C, SIGTERM or SIGHUP stops every node,
    /// removes the temporary data and prints a one-line summary.
    Devcluster(devcluster::Args),
    /// Submit, watch, list and cancel tasks (through any node's HTTP API).
    Task {
        #[command(subcommand)]
        command: task_cli::Cmd,
    },
    /// The Docker sandbox.
    Sandbox {
        #[command(subcommand)]
        command: sandbox::Cmd,
    },
}

#[derive(Subcommand)]
enum MembersCmd {
    /// Make an admin-eligible node a voter.
    Add {
        /// The node's id (its libp2p peer id, as `chorus members` lists it).
        id: String,
    },
    /// Make a voter a standby (or forget a voter that is gone for good).
    Remove {
        /// The node's id.
        id: String,
    },
}

/// The `chorus` command line: parses the arguments and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run(flags) => run_node(&flags),
        Cmd::Status {
            addr,
            json,
            cluster: false,
        } => report(block_on(status::show(&addr, json))),
        Cmd::Status {
            addr,
            json,
            cluster: true,
        } => report(block_on(status::show_cluster(&addr, json))),
        Cmd::Members {
            addr,
            json,
            timeout,
            change,
        } => {
            let wait = std::time::Duration::from_secs(timeout.clamp(1, 300));
            let change = change.map(|c| match c {
                MembersCmd::Add { id } => chorus_core::MemberChange::Add { node: id.into() },
                MembersCmd::Remove { id } => chorus_core::MemberChange::Remove { node: id.into() },
            });
            match change {
                None => report(block_on(members::show(&addr, json))),
                Some(change) => report(block_on(members::change(&addr, change, wait))),
            }
        }
        Cmd::Recover { data_dir, .. } => {
            let log_dir = match replay_source(&data_dir) {
                Ok((dir, None)) => dir,
                Ok((_, Some(_copy))) => {
                    return fail(&anyhow::anyhow!(
                        "{} is read-only: recovery writes to the event log",
                        data_dir.display()
                    ))
                }
                Err(e) => return fail(&e),
            };
            let mut stdout = std::io::stdout().lock();
            match recover::force_new_cluster(&log_dir, &mut stdout) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => fail(&replay_error(e, &data_dir)),
            }
        }
        Cmd::Replay {
            data_dir,
            trace,
            journal,
            task_bound_ms,
        } if data_dir.len() > 1 || journal.is_some() || task_bound_ms.is_some() => {
            let mut sources = Vec::new();
            for dir in &data_dir {
                match replay_source(dir) {
                    Ok(source) => sources.push(source),
                    Err(e) => return fail(&e),
                }
            }
            let dirs: Vec<PathBuf> = sources.iter().map(|(d, _)| d.clone()).collect();
            let mut stdout = std::io::stdout().lock();
            match merge::replay_merged(
                &dirs,
                journal.as_deref(),
                trace.as_deref(),
                task_bound_ms,
                &mut stdout,
            ) {
                Ok(r) if r.ok() => ExitCode::SUCCESS,
                Ok(r) => {
                    for (node, n) in r.nodes.iter().filter(|(_, n)| !n.ok()) {
                        eprintln!(
                            "chorus: {node}: replay does not match the recorded decisions ({} mismatches, {} double votes)",
                            n.mismatches.len(),
                            n.vote_violations.len()
                        );
                    }
                    ExitCode::from(3)
                }
                Err(e) => fail(&e),
            }
        }
        Cmd::Replay {
            mut data_dir,
            trace,
            journal: _,
            task_bound_ms: _,
        } => {
            let data_dir = data_dir.pop().expect("clap requires one");
            let (log_dir, _copy) = match replay_source(&data_dir) {
                Ok(source) => source,
                Err(e) => return fail(&e),
            };
            let mut stdout = std::io::stdout().lock();
            match replay::replay(&log_dir, trace.as_deref(), &mut stdout)
                .map_err(|e| replay_error(e, &data_dir))
            {
                Ok(r) if r.ok() => ExitCode::SUCCESS,
                Ok(r) => {
                    eprintln!(
                        "chorus: replay does not match the recorded decisions ({} mismatches, {} double votes)",
                        r.mismatches.len(),
                        r.vote_violations.len()
                    );
                    ExitCode::from(3)
                }
                Err(e) => fail(&e),
            }
        }
        Cmd::Devcluster(args) => {
            init_logging(LogFormat::Human);
            report(block_on(devcluster::run(args)))
        }
        Cmd::Task { command } => match block_on(task_cli::run(command)) {
            Ok(code) => code,
            Err(e) => fail(&e),
        },
        Cmd::Sandbox { command } => {
            init_logging(LogFormat::Human);
            match block_on(sandbox::run(command)) {
                Ok(code) => code,
                Err(e) => fail(&e),
            }
        }
    }
}

/// The log directory `chorus replay` should open for `data_dir`: checked to exist and hold a
/// log, and copied to a temporary directory (returned, to keep it alive) when it is read-only,
/// since opening a log may write to it.
fn replay_source(data_dir: &Path) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    use anyhow::bail;
    match std::fs::metadata(data_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("{} is not a directory", data_dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no such directory: {}", data_dir.display())
        }
        Err(e) => bail!("cannot read {}: {e}", data_dir.display()),
    }
    let nested = data_dir.join(run::LOG_DIR);
    let log_dir = if nested.is_dir() {
        nested
    } else {
        data_dir.to_path_buf()
    };
    if !log_dir.join("db").exists() && !log_dir.join("conf").exists() {
        bail!(
            "{} holds no event log (a node's data directory has it in `{}/`)",
            data_dir.display(),
            run::LOG_DIR
        );
    }
    if !is_read_only(&log_dir) {
        return Ok((log_dir, None));
    }
    let copy = tempfile::Builder::new()
        .prefix("chorus-replay-")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("cannot create a temporary copy of a read-only log: {e}"))?;
    copy_dir(&log_dir, copy.path()).map_err(|e| {
        anyhow::anyhow!(
            "cannot copy the read-only log {} to a temporary directory: {e}",
            log_dir.display()
        )
    })?;
    eprintln!(
        "chorus: {} is read-only; replaying a temporary copy",
        log_dir.display()
    );
    Ok((copy.path().to_path_buf(), Some(copy)))
}

/// Whether the log directory or its files cannot (or should not) be written.
fn is_read_only(dir: &Path) -> bool {
    let read_only = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().readonly());
    if read_only(dir) || read_only(&dir.join("db")) || read_only(&dir.join("conf")) {
        return true;
    }
    // A read-only mount shows writable permission bits; only a write tells.
    tempfile::tempfile_in(dir).is_err()
}

/// Copies a directory tree (a sled log: files and a few subdirectories), writable.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Says what a replay failure means when the cause is a known situation.
fn replay_error(e: anyhow::Error, data_dir: &Path) -> anyhow::Error {
    let text = format!("{e:#}");
    let locked = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::WouldBlock)
    }) || text.contains("WouldBlock")
        || text.contains("os error 11")
        || text.contains("temporarily unavailable");
    if locked {
        anyhow::anyhow!(
            "the node using {} is running (its event log is locked); stop it, or copy the data \
             directory and replay the copy",
            data_dir.display()
        )
    } else {
        e
    }
}

fn run_node(flags: &RunFlags) -> ExitCode {
    // Configuration errors come before logging is set up: one plain line, exit 2.
    let resolved = (|| {
        let mut config = match &flags.config {
            Some(path) => NodeConfig::from_file(path)?,
            None => NodeConfig::default(),
        };
        config.apply(flags)?;
        config.resolve()
    })();
    let resolved = match resolved {
        Ok(mut r) => {
            r.accept_log_reset = flags.accept_log_reset;
            r.exit_with_parent = flags.exit_with_parent;
            r
        }
        Err(e) => {
            eprintln!("chorus: {}", one_line(&e));
            return ExitCode::from(2);
        }
    };
    init_logging(resolved.config.log_format);
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run::run(resolved)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // One plain line on stderr, whatever the log format.
        Err(e) => fail(&e),
    }
}

fn block_on<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("chorus: {}", one_line(e));
    ExitCode::FAILURE
}

/// The error and its causes on one line (the causes only where they add something).
fn one_line(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text.replace('\n', " ")
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,libp2p=warn,libp2p_gossipsub=error,sled=warn"));
    // Colour codes only for a person at a terminal, never into a file or a pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
