//! `chorus devcluster`: N real `chorus run` processes on loopback with temporary data
//! directories and short timings, a live table of who is admin, and admin kills that show
//! (and measure) the failover: by default the admin is killed once, a few seconds after the
//! cluster settles, and restarted once a new admin is agreed.
//!
//! Ctrl-C, SIGTERM and SIGHUP all stop it the same way: every child gets SIGTERM (then SIGKILL
//! if it lingers), the temporary directory is removed, and one summary line is printed. The
//! children also watch their parent and stop on their own if devcluster dies without cleaning
//! up (SIGKILL).
//!
//! Ports: every node binds port 0, so the OS picks free ones, and devcluster reads them from the
//! node's "chorus node started" log line ([`parse_started_line`]) before starting the next node,
//! which bootstraps off the running ones. Nothing picks a port number and hopes it is still free
//! when the child binds it.
//!
//! Output: messages scroll, and on a terminal the table stays under them ([`console`]); when
//! the reader goes away (`devcluster | head`) the cluster is stopped and cleaned up quietly.
//! Each temporary directory names its owner's pid, so a run removes the directories earlier
//! runs left when they were killed with SIGKILL ([`tempdirs`]).
//!
//! `args` holds the options (and refuses a failover that cannot happen), `process` starts,
//! signals and polls the `chorus run` children, `watch` is the loop that follows the cluster
//! and its failovers, `report` what is printed, `console` where it goes, `tempdirs` the
//! temporary directories, and `demo` the `--demo-tasks` workload.

mod args;
mod console;
mod demo;
mod process;
mod report;
mod tempdirs;
mod watch;

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::mpsc;

pub use args::Args;
pub use process::{log_since, parse_started_line, LoopbackNode, Ports, START_BOUND};

use console::Console;
use process::{signal, start, Node};
use report::Report;
use watch::watch;

/// Runs the dev cluster until Ctrl-C (or, with `--exit-when-done`, until it is done).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let (kills, note) = args::plan_kills(args.nodes, args.kills).map_err(anyhow::Error::msg)?;
    let exe = std::env::current_exe().context("cannot find the chorus binary")?;
    let console = Console::stdout();
    // Said after the line naming this run's directory, which stays the first line.
    let cleaned = tempdirs::clean(&std::env::temp_dir());
    let root = tempfile::Builder::new()
        .prefix(tempdirs::PREFIX)
        .tempdir()
        .context("cannot create a temporary directory")?;
    // A `--keep` run's directory is the user's, even if this run is killed: it names no owner,
    // so no later run removes it.
    if !args.keep {
        tempdirs::claim(root.path()).context("cannot write devcluster's pid")?;
    }
    let mut nodes: Vec<Node> = (0..args.nodes)
        .map(|index| Node::new(index, root.path().join(format!("n{index}"))))
        .collect();
    // One key for every node, so one token works on all; this process's requests carry it.
    let acl_key = crate::api::auth::AclKey::generate()?;
    crate::daemon::acl::write_private(
        &root.path().join(process::ACL_KEY_FILE),
        &format!("{}\n", acl_key.to_hex()),
    )?;
    let token = acl_key.management_token();
    crate::cli::http::set_token(Some(token.clone()), None)?;
    announce(&console, &args, kills, note, root.path(), &token, &cleaned);
    let started = Instant::now();
    let mut report = Report::default();
    let result = if console.is_closed() {
        // Nobody reads any more (`devcluster | head -1`): nothing to show, nothing to start.
        report.stopped_by = "output closed";
        Ok(())
    } else {
        if args.demo_tasks > 0 {
            ensure_demo_image().await?;
        }
        for i in 0..nodes.len() {
            start(&exe, &args, root.path(), &mut nodes, i).await?;
        }
        let mut keys = read_keys();
        let table = !args.plain && std::io::stdout().is_terminal();
        watch(
            &exe,
            &args,
            kills,
            root.path(),
            &mut nodes,
            &mut keys,
            table,
            &console,
            &mut report,
        )
        .await
    };
    stop_all(&mut nodes).await;
    let data = if args.keep {
        let kept = root.keep();
        format!("data kept in {}", kept.display())
    } else {
        let path = root.path().to_path_buf();
        match root.close() {
            Ok(()) => "data removed".to_owned(),
            Err(e) => format!("could not remove {}: {e}", path.display()),
        }
    };
    console.leave_table();
    console.say(&report.line(args.nodes, started.elapsed(), &data));
    result
}

/// Says where the cluster lives, how to drive it, and which kills are coming.
fn announce(
    console: &Console,
    args: &Args,
    kills: usize,
    note: Option<String>,
    root: &Path,
    token: &str,
    cleaned: &[String],
) {
    console.say(&format!(
        "devcluster: {} nodes in {} (logs: n<i>.log); Ctrl-C to stop{}",
        args.nodes,
        root.display(),
        if std::io::stdin().is_terminal() {
            "; type k + Enter to kill the admin, q + Enter to quit"
        } else {
            ""
        }
    ));
    for line in cleaned {
        console.say(line);
    }
    console.say(&format!(
        "devcluster: the cluster's management token (every node takes it; `chorus task` and \
         `chorus members` read it from the environment): export CHORUS_TOKEN={token}"
    ));
    if let Some(note) = note {
        console.say(&note);
    }
    if kills > 0 {
        console.say(&format!(
            "devcluster: the admin will be {} {} s after the cluster agrees on it{}, to show a \
             failover (--kills 0: never; --signal term: a graceful stop)",
            if args.signal == "term" {
                "stopped (SIGTERM)"
            } else {
                "killed (SIGKILL)"
            },
            args.kill_admin_after,
            if kills > 1 {
                format!(", {kills} times")
            } else {
                String::new()
            }
        ));
    }
    if args.exit_when_done {
        let mut when = vec!["an admin is agreed"];
        if kills > 0 {
            when.insert(0, "the last failover is over");
        }
        if args.demo_tasks > 0 {
            when.push("every demo task has ended");
        }
        let last = when.pop().unwrap_or_default();
        let when = if when.is_empty() {
            last.to_owned()
        } else {
            format!("{} and {last}", when.join(", "))
        };
        console.say(&format!("devcluster: --exit-when-done: exits once {when}"));
    }
}

/// `--demo-tasks` runs tasks in Docker: the Engine must answer and have the sandbox image
/// (built if missing).
async fn ensure_demo_image() -> anyhow::Result<()> {
    let provider = chorus_io::sandbox::docker::DockerProvider::connect()
        .await
        .context("--demo-tasks runs tasks in Docker, but the Docker Engine does not answer")?;
    chorus_io::sandbox::image::ensure_sandbox_image(provider.docker())
        .await
        .context("--demo-tasks needs the sandbox test image")?;
    Ok(())
}

/// Lines typed at a terminal (`k` kills the admin, `q` quits). Without a terminal the channel
/// is closed at once, which the watch loop reads as "no keys" (as it does stdin's end).
fn read_keys() -> mpsc::UnboundedReceiver<String> {
    let (keys_tx, keys) = mpsc::unbounded_channel();
    if std::io::stdin().is_terminal() {
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                if keys_tx.send(line.trim().to_owned()).is_err() {
                    break;
                }
                line.clear();
            }
        });
    }
    keys
}

/// Stops every child: SIGTERM, then SIGKILL for any still running after a moment.
async fn stop_all(nodes: &mut [Node]) {
    for node in nodes.iter_mut() {
        for child in [&node.child, &node.stopping].into_iter().flatten() {
            signal(child, nix::sys::signal::Signal::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    for node in nodes.iter_mut() {
        for mut child in [node.child.take(), node.stopping.take()]
            .into_iter()
            .flatten()
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
}
