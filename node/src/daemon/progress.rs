//! While no admin is known, the node says every few seconds what it is waiting for (peers, a
//! discovery, an election), so a node that sits quietly through its discovery timeout does not
//! look hung.

use std::time::Duration;

use chorus_core::{Core, Role, Timer, ADMIN_ELECTION};

use super::shared::SharedState;

/// How often a node without an admin says what it is waiting for.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// While no admin is known, says every [`PROGRESS_EVERY`] what the node is waiting for, so a
/// node that sits quietly through its discovery timeout does not look hung.
pub(super) async fn progress(shared: SharedState) {
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        PROGRESS_EVERY,
    );
    // The last (connected, other voters) warned about, and when: said again on a change or
    // once a minute.
    let mut warned: Option<((usize, usize), tokio::time::Instant)> = None;
    loop {
        tick.tick().await;
        let (line, voters) = {
            let s = shared.lock();
            if s.shutting_down {
                return;
            }
            match (&s.core, s.now_ms()) {
                (Some(core), Some(now_ms)) => (
                    waiting_line(core, &s.capabilities, now_ms),
                    voters_connected(core),
                ),
                _ => (None, None),
            }
        };
        if let Some(line) = line {
            tracing::info!("{line}");
        } else if let Some((connected, others)) = voters.filter(|(c, o)| 2 * c < *o) {
            // An admin is known, but most other voters are out of reach: the next election
            // could not be won from here.
            let due = warned.is_none_or(|(last, at)| {
                last != (connected, others) || at.elapsed() >= Duration::from_secs(60)
            });
            if due {
                tracing::warn!(
                    "connected to {connected} of {others} other voters: most of the \
                     electorate is out of reach (see `chorus status --cluster`)"
                );
                warned = Some(((connected, others), tokio::time::Instant::now()));
            }
        }
    }
}

/// How many of the electorate's other members this node is connected to, and how many there
/// are; `None` before there is an electorate or when this node is its only member.
pub fn voters_connected(core: &Core) -> Option<(usize, usize)> {
    let electorate = core.electorate()?;
    let others: Vec<_> = electorate
        .members()
        .iter()
        .filter(|m| *m != core.id())
        .collect();
    if others.is_empty() {
        return None;
    }
    let connected = others.iter().filter(|m| core.peers().contains(m)).count();
    Some((connected, others.len()))
}

/// `; connected to X of Y other voters`, or nothing when there are no others.
fn voters_clause(core: &Core) -> String {
    voters_connected(core)
        .map(|(c, o)| format!("; connected to {c} of {o} other voters"))
        .unwrap_or_default()
}

/// What a node without an admin waits for, or `None` when it has one.
pub fn waiting_line(core: &Core, capabilities: &[String], now_ms: u64) -> Option<String> {
    if core.admin().is_some() {
        return None;
    }
    let voter = capabilities.iter().any(|c| c == ADMIN_ELECTION);
    if !voter {
        return Some(
            "no admin known yet; waiting to hear of one (this node is not a voter)".into(),
        );
    }
    let secs = |at_ms: u64| at_ms.saturating_sub(now_ms).div_ceil(1_000);
    let deadline = core.next_deadline();
    match core.role() {
        Role::PreCandidate => {
            return Some(format!(
                "no admin known; asking for pre-votes (term {}){}",
                core.term(),
                voters_clause(core)
            ))
        }
        Role::Candidate => {
            return Some(format!(
                "no admin known; asking for votes in term {}{}",
                core.term(),
                voters_clause(core)
            ))
        }
        _ => {}
    }
    let Some(electorate) = core.electorate() else {
        let expect = core.config().bootstrap_expect;
        let known = 1 + core.peers().eligible_count();
        return Some(format!(
            "waiting for peers: {known} of {expect} voter(s) known (bootstrap_expect {expect}); \
             connected peers: {}",
            core.peers().len()
        ));
    };
    let line = match deadline {
        Some((at, Timer::Election)) => format!(
            "no admin known; electing in {} s (electorate of {})",
            secs(at),
            electorate.len()
        ),
        Some((at, Timer::Discovery)) => format!(
            "no admin known; asking peers (discovery), electing in about {} s or later \
             (electorate of {})",
            secs(at),
            electorate.len()
        ),
        _ => format!(
            "no admin known (electorate of {}, {} peer(s) connected)",
            electorate.len(),
            core.peers().len()
        ),
    };
    Some(line + &voters_clause(core))
}
