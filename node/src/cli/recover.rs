//! `chorus recover --force-new-cluster`: the last resort for a cluster that lost its quorum for
//! good (as etcd's `--force-new-cluster` or Consul's `peers.json`).
//!
//! Run on ONE stopped survivor, the one with the highest electorate version. It appends an
//! [`Event::ForceNewElectorate`] to the node's event log (recording the decisions it makes, so
//! `chorus replay` still matches): the electorate becomes that node alone, one version later, in
//! a new term. Started again, the node elects itself; other nodes that reach it follow it (the
//! same cluster, a later electorate) and are made voters again with `chorus members add`.
//!
//! It is unsafe when the other voters are not gone: a majority of the old electorate that comes
//! back without having heard of the new one can still elect among itself. Hence the loud name,
//! a separate command (a flag in a service file would re-force at every restart), and the
//! warning it prints.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use chorus_core::{Command, Event, Notice};
use chorus_io::eventlog::{RecordedNotice, SledLog};
use chorus_io::runtime::{restore, EventLog};

use crate::exit::fail;
use crate::history::source::{recover_error, replay_source};

/// Runs `chorus recover --force-new-cluster` on the stopped node whose data directory is
/// `data_dir` (refused when it is read-only: recovery writes to the event log).
pub fn run(data_dir: &Path) -> ExitCode {
    match recover(data_dir, &mut std::io::stdout().lock()) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// [`force_new_cluster`] on the data directory `data_dir`, its failures said for what they
/// mean (a running node, a read-only directory).
pub fn recover(data_dir: &Path, out: &mut dyn Write) -> anyhow::Result<Forced> {
    let log_dir = match replay_source(data_dir)? {
        (dir, None) => dir,
        (_, Some(_copy)) => anyhow::bail!(
            "{} is read-only: recovery writes to the event log",
            data_dir.display()
        ),
    };
    force_new_cluster(&log_dir, out).map_err(|e| recover_error(e, data_dir))
}

/// What the recovery did, for the caller and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forced {
    pub node: String,
    /// The electorate before: version and members.
    pub before: (u64, Vec<String>),
    /// After: version and term.
    pub version: u64,
    pub term: u64,
}

/// Forces a one-node electorate on the stopped node whose event log is in `log_dir`.
pub fn force_new_cluster(log_dir: &Path, out: &mut dyn Write) -> anyhow::Result<Forced> {
    let mut log = SledLog::open_existing(log_dir)?;
    let meta = log.meta().clone();
    // As the node itself would recover, checks included.
    let mut core = restore(log.recover()?, meta.fresh_core()?)?;
    core.check_force_new_electorate()
        .map_err(|why| anyhow::anyhow!("nothing forced: {why}"))?;
    let before = core.electorate().map_or((0, Vec::new()), |e| {
        (
            e.version,
            e.members().iter().map(|m| m.to_string()).collect(),
        )
    });

    // Exactly as the runtime loop does it: step, append, sync, then record the decisions
    // under the event's sequence number.
    let now_ms = core.now_ms();
    let seq = log.next_seq();
    let mut commands = Vec::new();
    core.step(now_ms, Event::ForceNewElectorate, &mut commands);
    log.append(now_ms, &Event::ForceNewElectorate)?;
    log.sync()?;
    let recorder = log.notice_recorder();
    let notices = commands.iter().filter_map(|c| match c {
        Command::Notice(n) if !matches!(n, Notice::Refused { .. }) => Some(n),
        _ => None,
    });
    for (index, notice) in notices.enumerate() {
        let record = RecordedNotice {
            seq,
            now_ms,
            notice: notice.clone(),
        };
        recorder.record(index as u32, &record)?;
    }
    recorder.flush()?;
    log.snapshot(&core)?;

    let e = core.electorate().context("the electorate is set")?;
    anyhow::ensure!(
        e.version > before.0 && e.len() == 1,
        "the core did not take the forced electorate (still version {}); the log was appended \
         to but changes nothing",
        e.version
    );
    let forced = Forced {
        node: core.id().to_string(),
        before,
        version: e.version,
        term: e.term,
    };
    writeln!(
        out,
        "FORCED A NEW ELECTORATE on {}: version {} ({}) -> version {} (only this node), term {}.\n\
         Start the node now; it elects itself. Then add voters back one at a time with \
         `chorus members add ID`.\n\
         WARNING: if a majority of the old electorate ever comes back without meeting this node, \
         it can still elect an admin of its own. Keep the old voters stopped, or wipe their data \
         directories before they rejoin.",
        forced.node,
        forced.before.0,
        forced.before.1.join(", "),
        forced.version,
        forced.term,
    )?;
    Ok(forced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Config, NodeId, ADMIN_ELECTION};
    use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};

    /// Issue 35: recovery on a running node (its log locked) says to stop it, not to work on a
    /// copy as a replay may.
    #[test]
    fn a_running_node_is_to_be_stopped_first() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join(crate::history::LOG_DIR);
        let meta = LogMeta::new(
            NodeId::from("n0"),
            Config::default(),
            vec![ADMIN_ELECTION.to_owned()],
            1,
        );
        let _running = SledLog::open(&log_dir, meta, SledLogOptions::default()).unwrap();
        let e = recover(dir.path(), &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is running") && e.contains("stop it first"),
            "{e}"
        );
        assert!(!e.contains("copy"), "{e}");
    }
}
