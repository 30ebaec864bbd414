//! What stops the node: SIGINT, SIGTERM or SIGHUP (all three gracefully; SIGHUP does not
//! reload), or, with `--exit-with-parent`, the parent process exiting.

use std::time::Duration;

use super::shared::SharedState;

/// With `enabled`, completes once this process's parent has exited (it is re-parented);
/// otherwise never.
async fn parent_gone(enabled: bool) {
    if !enabled {
        return std::future::pending().await;
    }
    let parent = std::os::unix::process::parent_id();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// Completes when `s` delivers a signal; never when there is no stream.
async fn wait(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The signals that stop the node, listened for from the moment this is created: a signal
/// that arrives between "chorus node started" and the runtime's first poll must stop the node
/// gracefully too, not kill it with the default action.
pub(super) struct StopSignals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

pub(super) fn stop_signals() -> StopSignals {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for {name}");
            None
        }
    };
    StopSignals {
        int: listen(SignalKind::interrupt(), "SIGINT"),
        term: listen(SignalKind::terminate(), "SIGTERM"),
        hup: listen(SignalKind::hangup(), "SIGHUP"),
    }
}

/// Completes on SIGINT, SIGTERM or SIGHUP (all three stop the node gracefully), or when the
/// parent exits (if asked).
pub(super) async fn shutdown_signal(
    mut signals: StopSignals,
    shared: SharedState,
    exit_with_parent: bool,
) {
    tokio::select! {
        () = wait(signals.int.as_mut()) => tracing::info!("SIGINT: shutting down"),
        () = wait(signals.term.as_mut()) => tracing::info!("SIGTERM: shutting down"),
        () = wait(signals.hup.as_mut()) => tracing::info!(
            "SIGHUP: shutting down (SIGHUP stops the node gracefully; it does not reload)"
        ),
        () = parent_gone(exit_with_parent) => tracing::info!(
            "the parent process exited: shutting down"
        ),
    }
    shared.lock().shutting_down = true;
}
