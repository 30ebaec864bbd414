//! Adapters around the pure core: transport, sandbox, event log, timers, and the runtime loop.

pub mod eventlog;
pub mod log_fields;
pub mod runtime;
pub mod sandbox;
pub mod transport;
