//! The runtime loop shared by production and the simulator, and the small traits it is generic
//! over: [`Transport`], [`EventLog`], [`Clock`] and [`Observer`].
//!
//! The loop (see [`Runtime::run`]) follows the core's calling contract (`chorus_core::Core`):
//! recover (snapshot + replayed tail), step `Started`, then for every batch of ready inputs —
//! transport events and due timers — append each to the log, step it, `sync` once, and only then
//! carry out the batch's commands: sends and broadcasts to the transport, timers to its own
//! table, sandbox starts and stops to [`TaskSandboxes`] (whose run ends come back as inputs),
//! role changes and notices to the observer.

mod clock;
mod log;
mod memory_log;
mod node_loop;
mod observer;
mod sandboxes;
mod transport;

#[cfg(test)]
mod tests;

pub use clock::{Clock, TokioClock};
pub use log::{EventLog, LogError, Recovery};
pub use memory_log::MemoryLog;
pub use node_loop::{restore, Runtime, RuntimeConfig, RuntimeError};
pub use observer::{Observer, StepInfo};
pub use sandboxes::{NoSandboxes, TaskSandboxes};
pub use transport::{Transport, TransportEvent};
