//! The periodic reap: every [`TaskRunnerConfig::reap_period`](super::TaskRunnerConfig), a
//! runner removes the stale sandboxes of any owner on its host
//! ([`SandboxProvider::reap_stale`]: owner gone or deadline passed). What a node killed with
//! `kill -9` left behind then goes within one period while any node runs on the host, instead
//! of at that node's next start. One round is one list call filtered by label, plus one
//! removal per stale sandbox.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::super::{ErrorCategory, SandboxProvider};
use super::Shared;

/// How often a runner reaps unless configured otherwise.
pub const REAP_PERIOD: Duration = Duration::from_secs(15);

/// The longest one round may take; a round the Engine does not answer is given up, and the
/// next one tries again.
const ROUND_BOUND: Duration = Duration::from_secs(60);

/// Reaps every `period` until the runner is gone. A provider that cannot reap other owners'
/// sandboxes ends the loop with a warning; other failures are logged (a warning when they start,
/// a note when reaping works again) and the next round tries again.
pub(super) async fn reap_periodically<P: SandboxProvider + Clone + 'static>(
    shared: Weak<Shared<P>>,
    period: Duration,
) {
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticker.tick().await;
        // Only a weak handle between rounds: a dropped runner ends the loop.
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let error =
            match tokio::time::timeout(ROUND_BOUND, shared.provider.reap_stale()).await {
                Ok(Ok(removed)) => {
                    if removed > 0 {
                        shared.stats.reaped(removed);
                        tracing::info!(removed,
                        "task sandboxes: removed {removed} stale sandbox(es) on this host (owner \
                         gone or deadline passed)");
                    }
                    if failing {
                        tracing::info!("task sandboxes: the periodic reap works again");
                    }
                    failing = false;
                    continue;
                }
                Ok(Err(e)) if e.category == ErrorCategory::Unsupported => {
                    tracing::warn!(error = %e,
                    "task sandboxes: this provider cannot reap other owners' sandboxes; no \
                     periodic reap");
                    return;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {ROUND_BOUND:?}"),
            };
        if failing {
            tracing::debug!(%error, "task sandboxes: the periodic reap failed again");
        } else {
            tracing::warn!(%error,
                "task sandboxes: the periodic reap failed; trying again every {period:?}");
        }
        failing = true;
    }
}
