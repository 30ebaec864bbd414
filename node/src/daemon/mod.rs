//! The daemon, `chorus run`: its settings, the wiring of event log, transport, clock, sandboxes
//! and observer into the runtime loop, and the state the loop shares with the HTTP API.
//!
//! * `config` — the settings: file, flags, defaults, checks; `acl` the API token key on disk;
//! * `run` — the wiring and the graceful stop; `signals`, `handoff` (the transport handed back
//!   at the end), `sandboxes` (Docker task runner or none), `progress` (what a node without an
//!   admin waits for) are its parts;
//! * `observer` — the shadow core, the notices recorded for `chorus replay`, the log lines;
//! * `shared` — the state the observer writes and the API reads; `metrics` its counters,
//!   `timeline` what the node saw lately (for the console), `operator` the requests waiting in
//!   it for the core's answer;
//! * `fault` — deliberately broken builds, for the checker's tests (feature `fault-injection`).

pub mod acl;
pub mod config;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod handoff;
pub mod metrics;
pub mod observer;
pub mod operator;
pub mod progress;
pub mod run;
pub mod sandboxes;
pub mod shared;
mod signals;
pub mod timeline;
pub mod tls;

pub use run::run;
