//! `chorus`: the CHORUS node daemon (docs/design.md §8) and its tools, as a library so other binaries
//! (the end-to-end test crate's) can be this same program. `src/main.rs` calls [`main`].
//!
//! * `chorus run` — the node: event log, transport, runtime loop, HTTP API.
//! * `chorus status` — a node's status, for people.
//! * `chorus members` — the cluster's voters and standbys; add or remove a voter.
//! * `chorus replay` — re-runs a data directory's event log and checks the decisions.
//! * `chorus recover` — last-resort recovery of a cluster that lost its quorum for good.
//! * `chorus devcluster` — a local cluster of real `chorus run` processes, with failover.
//! * `chorus sandbox` — the Docker sandbox from the command line.
//! * `chorus task` — submit, watch, list and cancel tasks through a node's HTTP API.
//! * `chorus acl` — API tokens; `chorus psk` — the cluster's pre-shared key.
//! * `chorus mcp` — an MCP server whose tools are live sandboxes and tasks, for agents' hosts.
//!
//! Where each part lives (a server file never imports a client file, nor the other way round):
//! * [`daemon`] — `chorus run`: settings, the wiring of the runtime loop, the observer and the
//!   state it shares with the API;
//! * [`api`] — the HTTP API's axum router, one file per resource (status, cluster, members,
//!   tasks);
//! * [`wire`] — the API's JSON documents that both the server and the clients read;
//! * [`http1`] — the minimal HTTP/1.1 client both use to send a request (the CLI to a node, a
//!   node to its peers);
//! * [`cli`] — the command-line clients: one HTTP client, then one file per command;
//! * [`history`] — a node's recorded history: replay, merge, the trace format, the host clock;
//! * [`devcluster`] — a local cluster of real processes for demos and failover timing;
//! * `exit` — how every command ends (exit code, one-line error); this file parses the command
//!   line and hands each command to its folder.
//!
//! A new route is a file in `api/` and a line in its router; a new client command is a file in
//! `cli/` and its variant below.

pub mod access;
pub mod api;
pub mod build_info;
pub mod cli;
pub mod daemon;
pub mod devcluster;
mod exit;
pub mod history;
pub mod http1;
pub mod logging;
pub mod names;
pub mod pki;
pub mod wire;
pub mod wire_doc;

/// `chorus_node::merge` as it was before the layout by role (the end-to-end tests call it).
pub use history::merge;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{FromArgMatches, Parser, Subcommand};

use crate::daemon::config::{LogFormat, NodeConfig, RunFlags};
use crate::exit::{block_on, fail, one_line, report};

#[derive(Parser)]
#[command(
    name = "chorus",
    version = build_info::VERSION_LINE,
    about = "CHORUS: a peer-to-peer cluster daemon with partition-safe admin elections"
)]
struct Cli {
    /// The API token requests carry (env CHORUS_TOKEN) [default: --token-file, else
    /// ./chorus-data/management.token when it exists]. Health and status need none.
    #[arg(long, global = true, env = "CHORUS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the API token (env CHORUS_TOKEN_FILE).
    #[arg(long, global = true, env = "CHORUS_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The SHA-256 fingerprint of a node's TLS certificate to accept for https:// addresses
    /// (env CHORUS_TLS_FINGERPRINT; the node prints it at its first start and in its log).
    #[arg(
        long,
        global = true,
        env = "CHORUS_TLS_FINGERPRINT",
        value_name = "SHA256"
    )]
    tls_fingerprint: Option<String>,
    /// A CA certificate (PEM) that signed the nodes' TLS certificates, for https:// addresses
    /// (env CHORUS_CA_CERT).
    #[arg(long, global = true, env = "CHORUS_CA_CERT", value_name = "FILE")]
    ca_cert: Option<PathBuf>,
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
    /// A configuration file: `example` prints a commented one (every key and its default),
    /// `validate FILE` checks one as `chorus run --config FILE` would, starting nothing (exit
    /// 2 naming the key and line when it is bad).
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Print a shell completion script for SHELL (bash, zsh, fish, elvish, powershell), made
    /// from the same definitions as `--help`; e.g. `chorus completions bash >
    /// /etc/bash_completion.d/chorus`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write man pages, made from the same definitions as `--help`: `chorus.1` to stdout, or
    /// with --out DIR one page per command (`chorus.1`, `chorus-run.1`, `chorus-task-submit.1`,
    /// …) into DIR.
    Man {
        /// The directory to write every page into (made if missing).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Print this build: version, git revision and wire protocol version (a node's own
    /// `chorus status` and `/status` say which build it runs).
    Version,
    /// Show a node's status.
    Status {
        /// The node's HTTP API.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        /// One table of every node this node knows (role, term, admin, lease, last contact),
        /// each from the node's own status where its HTTP API is reachable from here.
        #[arg(long)]
        cluster: bool,
    },
    /// List the cluster's voters and standbys, add or remove a voter, or move the admin.
    ///
    /// Without a subcommand: the membership as the node at `--addr` sees it (each node's role,
    /// whether it is reachable from that node, its last contact and score). `add ID` makes an
    /// admin-eligible node (connected to the admin) a voter; `remove ID` makes a voter a
    /// standby, or forgets it if it is gone for good; autopilot never undoes it (only `add`
    /// does). Any node forwards the change to the admin; the command returns once a majority
    /// of the old and of the new electorate hold it, or fails with the reason (exit 1). One
    /// change at a time. `transfer [ID]` hands the admin's office to a voter at once; `leave`
    /// retires the node at `--addr` and stops it.
    Members {
        /// The HTTP API of any node of the cluster.
        #[arg(
            long,
            env = "CHORUS_ADDR",
            default_value = "127.0.0.1:7070",
            global = true
        )]
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
    /// `chorus-sim check FILE` to judge against the invariants of docs/design.md §5.
    Replay {
        /// The node's data directory (or its `log` directory); repeat it to merge nodes.
        #[arg(long, value_name = "DIR", required = true)]
        data_dir: Vec<PathBuf>,
        /// Also write a docs/design.md §6 trace (JSON lines) here.
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
    /// version: `chorus replay --data-dir DIR` prints it on its `final` line (`electorate
    /// version N`) for a stopped node, `chorus status` on its `electorate` line for a running
    /// one. Unsafe if the other voters are not gone for good: a
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
        command: cli::task::Cmd,
    },
    /// The cluster's pre-shared key (`chorus psk generate swarm.key`).
    Psk {
        #[command(subcommand)]
        command: PskCmd,
    },
    /// API tokens (`chorus acl token create --role submit`).
    Acl {
        #[command(subcommand)]
        command: cli::acl::Cmd,
    },
    /// Sandboxes: live ones kept on a node across commands (`create`, `exec`, `ps`, `kill`, `cp`,
    /// `ls`, `rm`, `env`, `keepalive`, `list`, `close`), and one-shot runs on this host's Docker
    /// (`run`, `image`, `reap`).
    Sandbox {
        #[command(subcommand)]
        command: cli::sandbox::Cmd,
    },
    /// An MCP server for AI agents' hosts: live sandboxes, tasks and the cluster's status as
    /// tools, over stdio (default) or streamable HTTP (`--http 127.0.0.1:PORT`).
    #[command(long_about = cli::mcp::LONG_ABOUT)]
    Mcp(cli::mcp::Args),
}

/// The options only a client of a node's HTTP API uses (global, so they go before or after a
/// subcommand).
const CLIENT_OPTIONS: [&str; 4] = ["token", "token_file", "tls_fingerprint", "ca_cert"];

/// The subcommands that ask no node's API: the client options are hidden from their help
/// (still accepted, ignored), where they would only mislead (`chorus run --help`).
const NOT_CLIENTS: [&str; 9] = [
    "run",
    "config",
    "completions",
    "man",
    "version",
    "replay",
    "recover",
    "devcluster",
    "psk",
];

/// The command line as parsed, and as `--help`, man pages and completions show it.
fn command() -> clap::Command {
    use clap::CommandFactory;
    fn hide_client_options(c: clap::Command) -> clap::Command {
        c.mut_args(|a| {
            if CLIENT_OPTIONS.contains(&a.get_id().as_str()) {
                a.hide(true)
            } else {
                a
            }
        })
        .mut_subcommands(hide_client_options)
    }
    // Built first: a global option is copied into every subcommand then, and each copy can be
    // hidden where it does not apply.
    let mut cmd = Cli::command();
    cmd.build();
    cmd.mut_subcommands(|sc| {
        if NOT_CLIENTS.contains(&sc.get_name()) {
            hide_client_options(sc)
        } else {
            sc
        }
    })
}

/// `chorus man`: the top page to stdout, or every page into `out`.
fn man_pages(out: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context;
    let cmd = command();
    match out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            let _ = to_stdout(&page);
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot make {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("cannot write the pages into {}", dir.display()))?;
        }
    }
    Ok(())
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no failure.
fn to_stdout(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(&e.into()),
    }
}

/// `chorus config` subcommands.
#[derive(Subcommand)]
enum ConfigCmd {
    /// Print a commented configuration: every key, its default and what it does.
    Example,
    /// Check FILE as `chorus run --config FILE` would, and say what the node would do.
    Validate {
        /// The configuration file (TOML).
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum PskCmd {
    /// Write a new random pre-shared key (mode 0600; an existing file is never overwritten).
    ///
    /// Nodes that can meet other machines (listening off loopback, dialling another machine,
    /// mDNS) refuse to start without one: copy the file to every node and pass `--psk-file`.
    /// Only peers holding the same key can connect at all.
    Generate {
        /// Where to write it.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum MembersCmd {
    /// Make an admin-eligible node a voter.
    Add {
        /// The node's id (its libp2p peer id, as `chorus members` lists it), or its end as the
        /// other tables print it (the last 8 characters) when no other id ends so.
        id: String,
    },
    /// Make a voter a standby (or forget a voter that is gone for good). The removal stands:
    /// autopilot never makes the node a voter again, through any change of admin, until
    /// `members add ID` (a node started afresh, with a new data dir, is a new node).
    Remove {
        /// The node's id, or its last 8 characters (as for `add`).
        id: String,
    },
    /// Retire the node at `--addr` gracefully (Consul's `leave`, etcd's removal of oneself):
    /// it asks the admin to remove it (the admin removes itself and hands over), waits for the
    /// commit, then stops as on SIGTERM and exits 0. Like `remove`, autopilot never makes it a
    /// voter again until `members add ID`, restarts included. A standby or worker has nothing
    /// to remove and just stops. On a refusal or a timeout the node keeps running (exit 1).
    Leave,
    /// Move the admin's office to another voter now (etcd's `move-leader`): the admin steps
    /// down and asks that voter to stand at once, so the cluster has a new admin within a few
    /// round trips instead of an election timeout. Use it before maintenance on the admin's
    /// machine. Asked of a node that is not the admin, the command asks the admin.
    Transfer {
        /// The voter to hand over to (default: the admin picks the best-ranked voter that is
        /// up to date). Refused if it is not a voter, or has not acknowledged the admin lately.
        id: Option<String>,
    },
}

/// The `chorus` command line: parses the arguments and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    if let Err(e) = cli::http::set_token(cli.token, cli.token_file.as_deref()) {
        return fail(&e);
    }
    if let Err(e) = cli::http::set_tls(cli.tls_fingerprint.as_deref(), cli.ca_cert.as_deref()) {
        return fail(&e);
    }
    match cli.command {
        Cmd::Run(flags) => run_node(&flags),
        Cmd::Config {
            cmd: ConfigCmd::Example,
        } => to_stdout(cli::config::EXAMPLE.as_bytes()),
        Cmd::Config {
            cmd: ConfigCmd::Validate { file },
        } => match cli::config::validate(&file) {
            Ok(summary) => {
                print!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("chorus: {}", one_line(&e));
                ExitCode::from(2)
            }
        },
        Cmd::Completions { shell } => {
            let mut cmd = command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "chorus", &mut script);
            to_stdout(&script)
        }
        Cmd::Man { out } => report(man_pages(out.as_deref())),
        Cmd::Version => {
            let b = build_info::BUILD;
            println!(
                "chorus {}\ngit revision {}\nwire protocol {}",
                b.version, b.git_rev, b.wire_version
            );
            ExitCode::SUCCESS
        }
        Cmd::Status {
            addr,
            json,
            cluster: false,
        } => report(block_on(cli::status::show(&addr, json))),
        Cmd::Status {
            addr,
            json,
            cluster: true,
        } => report(block_on(cli::status::show_cluster(&addr, json))),
        Cmd::Members {
            addr,
            json,
            timeout,
            change,
        } => {
            let wait = std::time::Duration::from_secs(timeout.clamp(1, 300));
            // A short id, as the tables print it, names its node.
            let whole = |id: String| block_on(cli::members::resolve(&addr, id));
            let change = match change {
                Some(MembersCmd::Transfer { id }) => {
                    let id = match id.map(whole).transpose() {
                        Ok(id) => id,
                        Err(e) => return fail(&e),
                    };
                    return report(block_on(cli::members::transfer(&addr, id, wait)));
                }
                Some(MembersCmd::Leave) => {
                    return report(block_on(cli::members::leave(&addr, wait)));
                }
                Some(MembersCmd::Add { id }) => match whole(id) {
                    Ok(id) => Some(chorus_core::MemberChange::Add { node: id.into() }),
                    Err(e) => return fail(&e),
                },
                Some(MembersCmd::Remove { id }) => match whole(id) {
                    Ok(id) => Some(chorus_core::MemberChange::Remove { node: id.into() }),
                    Err(e) => return fail(&e),
                },
                None => None,
            };
            match change {
                None => report(block_on(cli::members::show(&addr, json))),
                Some(change) => report(block_on(cli::members::change(&addr, change, wait))),
            }
        }
        Cmd::Recover { data_dir, .. } => cli::recover::run(&data_dir),
        Cmd::Replay {
            data_dir,
            trace,
            journal,
            task_bound_ms,
        } => cli::replay::run(data_dir, trace, journal, task_bound_ms),
        Cmd::Devcluster(args) => {
            logging::init(LogFormat::Human);
            report(block_on(devcluster::run(args)))
        }
        Cmd::Task { command } => match block_on(cli::task::run(command)) {
            Ok(code) => code,
            Err(e) => fail(&e),
        },
        Cmd::Psk {
            command: PskCmd::Generate { file },
        } => report(cli::psk::generate(&file)),
        Cmd::Acl { command } => report(block_on(cli::acl::run(command))),
        Cmd::Sandbox { command } => {
            logging::init(LogFormat::Human);
            match block_on(cli::sandbox::run(command)) {
                Ok(code) => code,
                Err(e) => fail(&e),
            }
        }
        Cmd::Mcp(args) => {
            // On stderr: in stdio mode stdout is the protocol.
            logging::init(LogFormat::Human);
            report(block_on(cli::mcp::run(args)))
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
    logging::init(resolved.config.log_format);
    // Every file the node makes (event log, keys, snapshots) is its user's alone.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(daemon::run(resolved)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // One plain line on stderr, whatever the log format.
        Err(e) => fail(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The long help of the subcommand at `path`, as `chorus … --help` prints it.
    fn help(path: &[&str]) -> String {
        let mut cmd = command();
        let mut at = &mut cmd;
        for name in path {
            at = at.find_subcommand_mut(name).expect("a subcommand");
        }
        at.render_long_help().to_string()
    }

    /// Whether the help lists option `flag` (a line of the options that starts with it).
    fn lists(help: &str, flag: &str) -> bool {
        help.lines()
            .any(|l| l.trim_start().starts_with(&format!("{flag} ")))
    }

    /// Issue 54, item 9: the client's options (token, TLS pin, CA) are in the help of the
    /// commands that ask a node, and not in that of those that ask none; they are still
    /// accepted before or after any subcommand.
    #[test]
    fn client_options_are_shown_only_where_a_node_is_asked() {
        let flags = ["--token", "--token-file", "--tls-fingerprint", "--ca-cert"];
        for path in [
            &["run"][..],
            &["version"],
            &["config", "validate"],
            &["replay"],
            &["recover"],
            &["devcluster"],
            &["psk", "generate"],
            &["man"],
        ] {
            let h = help(path);
            for flag in flags {
                assert!(!lists(&h, flag), "{flag} in `chorus {path:?} --help`:\n{h}");
            }
        }
        for path in [
            &["status"][..],
            &["task", "submit"],
            &["members", "remove"],
            &["acl", "token", "create"],
            &["sandbox", "exec"],
            &["mcp"],
        ] {
            let h = help(path);
            for flag in flags {
                assert!(
                    lists(&h, flag),
                    "{flag} not in `chorus {path:?} --help`:\n{h}"
                );
            }
        }
        for args in [
            &["chorus", "--token", "t", "status"][..],
            &["chorus", "status", "--token", "t"],
            &["chorus", "run", "--token", "t"],
        ] {
            let m = command().try_get_matches_from(args).expect("parsed");
            let cli = Cli::from_arg_matches(&m).expect("parsed");
            assert_eq!(cli.token.as_deref(), Some("t"), "{args:?}");
        }
    }

    /// Issue 54, item 9: `--bootstrap-expect` says when it is required (no bare `[default:
    /// 1]`), and `--cluster-seed`, for tests, is not shown to operators.
    #[test]
    fn run_help_says_when_bootstrap_expect_is_required_and_hides_the_seed() {
        let h = help(&["run"]);
        assert!(!lists(&h, "--cluster-seed"), "{h}");
        let at = h.find("--bootstrap-expect <N>").expect("listed");
        let text: String = h[at..].split("\n\n").next().unwrap_or_default().into();
        assert!(text.contains("Required when"), "{text}");
        assert!(!text.contains("[default: 1]"), "{text}");
    }
}
