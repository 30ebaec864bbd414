//! Hooks for what the runtime loop does: per-step detail (traces, metrics), role changes,
//! notices, rejected input. Every hook has a no-op default.

use std::time::Duration;

use chorus_core::{Command, Core, Event, NodeId, Notice, Role};

/// One step as carried out: the input, the commands, and how long `Core::step` took.
#[derive(Clone, Copy, Debug)]
pub struct StepInfo<'a> {
    /// The time handed to the core (node clock, ms).
    pub now_ms: u64,
    /// `now_ms` minus the [`crate::runtime::Clock`]'s own reading: zero on a first start, the
    /// time carried over from the log after a restart. With the clock's origin it places node
    /// time on the host's clock (`chorus replay` of several nodes).
    pub offset_ms: u64,
    /// The input event (already durable in the event log).
    pub event: &'a Event,
    /// The commands of this step, in order.
    pub commands: &'a [Command],
    /// Wall time spent in `Core::step` (for metrics only; never feeds a decision).
    pub latency: Duration,
}

/// Receives what the loop does. Calls come in step order, after the step's event is durable.
///
/// For one step, [`Observer::on_step`] comes first, then one `on_role_changed` or `on_notice`
/// per such command, in command order.
pub trait Observer {
    /// The log was replayed: `replayed` events after the snapshot (if any) were folded in.
    fn on_recovered(&mut self, _core: &Core, _replayed: usize) {}

    /// One step was made durable and is being carried out.
    fn on_step(&mut self, _step: &StepInfo<'_>) {}

    /// The core's role changed.
    fn on_role_changed(
        &mut self,
        _now_ms: u64,
        _role: Role,
        _term: u64,
        _lease_until_ms: Option<u64>,
    ) {
    }

    /// The core announced a decision (these become trace lines).
    fn on_notice(&mut self, _now_ms: u64, _notice: &Notice) {}

    /// The transport rejected input (it never reached the core).
    fn on_rejected(&mut self, _from: Option<&NodeId>, _reason: &str) {}
}

/// The observer that observes nothing.
impl Observer for () {}
