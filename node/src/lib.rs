//! `chorus`: the CHORUS node daemon (DESIGN §8) and its tools, as a library so other binaries
//! (the end-to-end test crate's) can be this same program. `src/main.rs` calls [`main`].
//!
//! * `chorus run` — the node: event log, transport, runtime loop, HTTP API.
//! * `chorus status` — a node's status, for people.
//! * `chorus replay` — re-runs a data directory's event log and checks the decisions.
//! * `chorus devcluster` — a local cluster of real `chorus run` processes, with failover.
//! * `chorus sandbox` — the Docker sandbox from the command line.

pub mod config;
pub mod devcluster;
pub mod http;
pub mod observe;
pub mod replay;
pub mod run;
pub mod sandbox;
pub mod status;

use std::path::PathBuf;
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
    Run(Box<RunFlags>),
    /// Show a node's status.
    Status {
        /// The node's HTTP API.
        #[arg(long, default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replay a node's event log and check its decisions.
    Replay {
        /// The node's data directory (or its `log` directory).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// Also write a DESIGN §6 trace (JSON lines) here.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
    },
    /// Start a local cluster of `chorus run` processes and watch its admin.
    Devcluster(devcluster::Args),
    /// The Docker sandbox.
    Sandbox {
        #[command(subcommand)]
        command: sandbox::Cmd,
    },
}

/// The `chorus` command line: parses the arguments and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run(flags) => run_node(&flags),
        Cmd::Status { addr, json } => report(block_on(status::show(&addr, json))),
        Cmd::Replay { data_dir, trace } => {
            let mut stdout = std::io::stdout().lock();
            match replay::replay(&data_dir, trace.as_deref(), &mut stdout) {
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
        Cmd::Sandbox { command } => {
            init_logging(LogFormat::Human);
            match block_on(sandbox::run(command)) {
                Ok(code) => code,
                Err(e) => fail(&e),
            }
        }
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
        Ok(r) => r,
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
