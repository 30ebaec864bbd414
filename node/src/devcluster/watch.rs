//! The watch loop: every round it polls the nodes, notes exits and the admin they agree on,
//! follows an admin kill through to the failover (and restarts the killed node), kills the
//! admin when it is due, and shows the cluster. When it stops, for whatever reason, it shows
//! the cluster once more, so the last table (or line) is current.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::args::{failover_possible, Args};
use super::console::Console;
use super::demo::demo;
use super::process::{poll, signal, start, Node};
use super::report::{short, summary, summary_line, table, Report};

/// One admin kill in progress.
struct Failover {
    killed: usize,
    killed_id: String,
    old_term: u64,
    at: Instant,
    first_admin: Option<(Duration, String, u64)>,
}

/// What the loop keeps from one round to the next.
struct Watch<'a> {
    exe: &'a Path,
    args: &'a Args,
    /// The admin kills to make (`--kills`, checked against the cluster's size).
    kills: usize,
    root: &'a Path,
    /// A table redrawn in place (a terminal), or one line per change.
    table: bool,
    console: &'a Console,
    /// Since when every node has been up and agreeing on one admin.
    stable_since: Option<Instant>,
    failover: Option<Failover>,
    last_line: String,
    last_draw: Instant,
    kills_done: usize,
    /// The `--demo-tasks` workload, once started.
    demo: Option<JoinHandle<()>>,
}

/// Watches the cluster until Ctrl-C, SIGTERM, SIGHUP, `q`, the output's reader going away, or
/// (with `--exit-when-done`) the end of the run ([`Watch::done`]); says why in `report`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn watch(
    exe: &Path,
    args: &Args,
    kills: usize,
    root: &Path,
    nodes: &mut [Node],
    keys: &mut mpsc::UnboundedReceiver<String>,
    table: bool,
    console: &Console,
    report: &mut Report,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal as unix_signal, SignalKind};
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    // SIGTERM (`kill`, `timeout`) and SIGHUP (a closed terminal) clean up like Ctrl-C.
    let mut sigterm = unix_signal(SignalKind::terminate()).ok();
    let mut sighup = unix_signal(SignalKind::hangup()).ok();
    let mut w = Watch {
        exe,
        args,
        kills,
        root,
        table,
        console,
        stable_since: None,
        failover: None,
        last_line: String::new(),
        last_draw: Instant::now() - Duration::from_secs(1),
        kills_done: 0,
        demo: None,
    };
    loop {
        let tick = if w.failover.is_some() { 25 } else { 100 };
        tokio::select! {
            _ = &mut ctrl_c => {
                report.stopped_by = "Ctrl-C";
                break;
            }
            () = recv(sigterm.as_mut()) => {
                report.stopped_by = "SIGTERM";
                break;
            }
            () = recv(sighup.as_mut()) => {
                report.stopped_by = "SIGHUP";
                break;
            }
            Some(key) = keys.recv() => match key.as_str() {
                "k" if w.failover.is_none() => w.failover = kill_admin(nodes, args, console)?,
                "q" => {
                    report.stopped_by = "q";
                    break;
                }
                _ => {}
            },
            () = tokio::time::sleep(Duration::from_millis(tick)) => {}
        }
        if console.is_closed() {
            // `devcluster | head`: nobody reads any more; stop and clean up, quietly.
            report.stopped_by = "output closed";
            return Ok(());
        }
        poll(nodes).await;
        note_exits(nodes, report, console);
        let agreed = agreement(nodes);
        if let Some((admin, term)) = &agreed {
            w.note_admin(nodes, admin, *term, report);
        }
        w.follow_failover(nodes, &agreed, report).await?;
        if w.done(&agreed) {
            report.stopped_by = "done";
            break;
        }
        if w.failover.is_none() {
            w.kill_admin_when_due(nodes, &agreed)?;
        }
        w.show(nodes, report, false);
    }
    // The last picture is of the cluster as it is now, not as it was at the last redraw.
    w.show(nodes, report, true);
    Ok(())
}

/// Says which children exited: unexpectedly (a running node), or as asked (a node stopping).
fn note_exits(nodes: &mut [Node], report: &mut Report, console: &Console) {
    for node in nodes.iter_mut() {
        if let Some(child) = node.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                console.say(&format!(
                    "devcluster: n{} exited ({status}); see its log",
                    node.index
                ));
                report.unexpected_exits += 1;
                node.child = None;
                node.status = None;
            }
        }
        if let Some(child) = node.stopping.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                console.say(&format!(
                    "devcluster: n{} has exited ({status})",
                    node.index
                ));
                node.stopping = None;
            }
        }
    }
}

impl Watch<'_> {
    /// Remembers the agreed admin for the closing line, and starts the demo workload the first
    /// time there is one (through a node that is not the admin).
    fn note_admin(&mut self, nodes: &[Node], admin: &str, term: u64, report: &mut Report) {
        if let Some(n) = nodes.iter().find(|n| n.id() == Some(admin)) {
            report.last_admin = Some((admin.to_owned(), term, n.index));
        }
        if self.args.demo_tasks > 0 && self.demo.is_none() {
            let through = nodes
                .iter()
                .find(|n| n.child.is_some() && n.id() != Some(admin))
                .or_else(|| nodes.first());
            if let Some(n) = through {
                self.demo = Some(tokio::spawn(demo(
                    self.console.clone(),
                    n.http.clone(),
                    n.index,
                    self.args.demo_tasks,
                )));
            }
        }
    }

    /// With `--exit-when-done`, whether the run is over: every kill made and its failover
    /// over, an admin agreed, and every demo task (if any) ended.
    fn done(&self, agreed: &Option<(String, u64)>) -> bool {
        let demo_done =
            self.args.demo_tasks == 0 || self.demo.as_ref().is_some_and(|d| d.is_finished());
        self.args.exit_when_done
            && self.kills_done >= self.kills
            && self.failover.is_none()
            && agreed.is_some()
            && demo_done
    }

    /// Follows the kill in progress: when a new admin first appears, and when every live node
    /// agrees on it — then the failover is reported and the killed node restarted (unless the
    /// run is [done](Self::done), and devcluster is about to exit).
    async fn follow_failover(
        &mut self,
        nodes: &mut [Node],
        agreed: &Option<(String, u64)>,
        report: &mut Report,
    ) -> anyhow::Result<()> {
        let args = self.args;
        let Some(f) = self.failover.as_mut() else {
            return Ok(());
        };
        if f.first_admin.is_none() {
            if let Some(n) = nodes
                .iter()
                .find(|n| n.child.is_some() && n.role() == "admin" && n.term() > f.old_term)
            {
                let id = n.id().unwrap_or("?").to_owned();
                f.first_admin = Some((f.at.elapsed(), id, n.term()));
            }
        }
        let (Some((admin, term)), Some((first, _, _))) = (agreed, &f.first_admin) else {
            return Ok(());
        };
        if *term <= f.old_term || admin == &f.killed_id {
            return Ok(());
        }
        let all = f.at.elapsed();
        let new = nodes
            .iter()
            .find(|n| n.id() == Some(admin.as_str()))
            .map_or(String::new(), |n| format!("n{} ", n.index));
        self.console.say(&format!(
            "devcluster: failover #{}: n{} {}; new admin {new}({}) of term {term} \
             after {:.2} s, every live node agrees after {:.2} s",
            self.kills_done + 1,
            f.killed,
            if args.signal == "term" {
                "stopped (SIGTERM)"
            } else {
                "killed (SIGKILL)"
            },
            short(admin),
            first.as_secs_f64(),
            all.as_secs_f64()
        ));
        report.failovers.push((*first, all));
        self.kills_done += 1;
        let killed = f.killed;
        self.failover = None;
        self.stable_since = None;
        if self.kills_done == self.kills {
            if let Some(line) = summary(&report.failovers) {
                self.console.say(&line);
            }
        }
        if self.done(agreed) {
            return Ok(());
        }
        // Bring the old admin back: it rejoins as a follower of the new term.
        self.console
            .say(&format!("devcluster: restarting n{killed}"));
        start(self.exe, args, self.root, nodes, killed).await
    }

    /// Kills the admin once every node has been up and agreeing on it for
    /// `--kill-admin-after`, while kills are left.
    fn kill_admin_when_due(
        &mut self,
        nodes: &mut [Node],
        agreed: &Option<(String, u64)>,
    ) -> anyhow::Result<()> {
        let all_up = nodes
            .iter()
            .all(|n| n.child.is_some() && n.status.is_some());
        match (agreed, all_up) {
            (Some(_), true) => {
                let since = *self.stable_since.get_or_insert_with(Instant::now);
                if self.kills_done < self.kills
                    && since.elapsed().as_secs_f64() >= self.args.kill_admin_after
                {
                    self.failover = kill_admin(nodes, self.args, self.console)?;
                }
            }
            _ => self.stable_since = None,
        }
        Ok(())
    }

    /// Redraws the table (at most four times a second, or now when `now`), or prints the
    /// summary line when it changed.
    fn show(&mut self, nodes: &[Node], report: &Report, now: bool) {
        if self.table {
            if now || self.last_draw.elapsed() >= Duration::from_millis(250) {
                self.console
                    .table(&table(nodes, &agreement(nodes), &report.failovers));
                self.last_draw = Instant::now();
            }
        } else {
            // Fresh: a kill in this round has changed who is live.
            let line = summary_line(nodes, &agreement(nodes));
            if line != self.last_line {
                self.console.say(&line);
                self.last_line = line;
            }
        }
    }
}

/// Completes when `s` delivers a signal; never when there is no stream.
async fn recv(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Kills (or stops) the agreed admin, and starts following the failover. Refused in a cluster
/// too small to elect another admin without it.
fn kill_admin(
    nodes: &mut [Node],
    args: &Args,
    console: &Console,
) -> anyhow::Result<Option<Failover>> {
    if !failover_possible(nodes.len()) {
        console.say(&format!(
            "devcluster: not killing the admin: with {} node(s) no majority would be left to \
             elect another",
            nodes.len()
        ));
        return Ok(None);
    }
    let Some((admin, term)) = agreement(nodes) else {
        console.say("devcluster: no agreed admin to kill yet");
        return Ok(None);
    };
    let Some(node) = nodes.iter_mut().find(|n| n.id() == Some(admin.as_str())) else {
        return Ok(None);
    };
    let Some(child) = node.child.take() else {
        return Ok(None);
    };
    let at = Instant::now();
    let graceful = args.signal == "term";
    signal(
        &child,
        if graceful {
            nix::sys::signal::Signal::SIGTERM
        } else {
            nix::sys::signal::Signal::SIGKILL
        },
    );
    console.say(&format!(
        "devcluster: {} admin n{} ({}) of term {term}",
        if graceful {
            "stopping (SIGTERM)"
        } else {
            "killing (SIGKILL)"
        },
        node.index,
        short(&admin)
    ));
    // The process is going: it is no longer polled nor counted as live, but it is kept (not
    // dropped, which would SIGKILL it) until it has exited, so a SIGTERM is really graceful.
    node.stopping = Some(child);
    node.status = None;
    Ok(Some(Failover {
        killed: node.index,
        killed_id: admin,
        old_term: term,
        at,
        first_admin: None,
    }))
}

/// The (admin, term) every live, answering node reports, if they agree and it is live.
fn agreement(nodes: &[Node]) -> Option<(String, u64)> {
    let mut views = BTreeMap::new();
    let mut live_ids = Vec::new();
    for n in nodes
        .iter()
        .filter(|n| n.child.is_some() && n.status.is_some())
    {
        views.insert((n.admin()?.to_owned(), n.term()), ());
        live_ids.push(n.id()?.to_owned());
    }
    if views.len() != 1 {
        return None;
    }
    let ((admin, term), ()) = views.into_iter().next()?;
    live_ids.contains(&admin).then_some((admin, term))
}
