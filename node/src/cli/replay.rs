//! `chorus replay`: one stopped node's event log re-run and checked, or several merged into one
//! trace on the host's clock. Exit 3 when a replay does not match what the node recorded.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::exit::fail;
use crate::history::source::{replay_error, replay_source};
use crate::history::{merge, replay};

/// Runs `chorus replay`: a merge when given several directories, a journal or a task bound.
pub fn run(
    mut data_dir: Vec<PathBuf>,
    trace: Option<PathBuf>,
    journal: Option<PathBuf>,
    task_bound_ms: Option<u64>,
) -> ExitCode {
    if data_dir.len() > 1 || journal.is_some() || task_bound_ms.is_some() {
        return merged(
            &data_dir,
            journal.as_deref(),
            trace.as_deref(),
            task_bound_ms,
        );
    }
    let data_dir = data_dir.pop().expect("clap requires one");
    one(&data_dir, trace.as_deref())
}

/// Several nodes' logs (or one with a journal) replayed and merged into one trace.
fn merged(
    data_dir: &[PathBuf],
    journal: Option<&Path>,
    trace: Option<&Path>,
    task_bound_ms: Option<u64>,
) -> ExitCode {
    let mut sources = Vec::new();
    for dir in data_dir {
        match replay_source(dir) {
            Ok(source) => sources.push(source),
            Err(e) => return fail(&e),
        }
    }
    let dirs: Vec<PathBuf> = sources.iter().map(|(d, _)| d.clone()).collect();
    let mut stdout = std::io::stdout().lock();
    match merge::replay_merged(&dirs, journal, trace, task_bound_ms, &mut stdout) {
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

/// One node's log replayed and checked.
fn one(data_dir: &Path, trace: Option<&Path>) -> ExitCode {
    let (log_dir, _copy) = match replay_source(data_dir) {
        Ok(source) => source,
        Err(e) => return fail(&e),
    };
    let mut stdout = std::io::stdout().lock();
    match replay::replay(&log_dir, trace, &mut stdout).map_err(|e| replay_error(e, data_dir)) {
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
