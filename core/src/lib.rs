//! `chorus-core`: the pure, deterministic CHORUS state machine.
//!
//! Events in ([`Event`]), commands out ([`Command`]), through one entry point:
//! [`Core::step`]`(now_ms, event, &mut out)`. No IO, no clock, no OS randomness, no hash-order
//! iteration: the same events give the same commands, bit for bit, on every machine. The RNG is a
//! seeded ChaCha8 stream held (and serialized) in the state, so a replayed event log draws the
//! same numbers. See [`Core`] for the calling contract.
//!
//! Where to find each rule of the protocol (docs/design.md §4):
//! * `bootstrap` — the one initial electorate, agreed by Paxos over any `bootstrap_expect` nodes;
//! * [`discovery`](crate::discovery) — WHOAMI, confirmations, adopting an existing electorate;
//! * [`election`](crate::election) — rank-biased delay, pre-vote, vote, winning;
//! * [`heartbeat`](crate::heartbeat) — heartbeats, acknowledgements, lease, check-quorum;
//! * `membership` — one-voter changes, their commit rule, autopilot;
//! * `transfer` — handover: an admin that stops or is asked to gives its office to one voter;
//! * [`certificate`] — signed links of committed electorates, how a stale voter catches up;
//! * [`score`] — the weighted score and rank slots;
//! * [`task`] — tasks: submitter, admin placement, worker;
//! * `trust` — bounds on peer input, who may send what, refusals ([`Refusal`]);
//! * [`codec`] — the wire envelope.

#![warn(missing_docs)]

pub mod audit;
mod bootstrap;
mod catchup;
pub mod certificate;
pub mod codec;
mod command;
mod config;
mod discovery;
mod election;
mod electorate;
mod event;
mod heartbeat;
mod id;
mod idset;
mod membership;
mod message;
mod node;
mod peers;
mod probed;
pub mod rng;
pub mod score;
pub mod task;
mod timer;
mod transfer;
mod trust;

#[cfg(test)]
mod testutil;

pub use audit::VoteLedger;
pub use certificate::{Digest, Link, Signature};
pub use command::{Command, Notice, Role, StepDownReason};
pub use config::{Config, ConfigError, ADMIN_ELECTION, MAX_TIMING_MS};
pub use electorate::{Electorate, MAX_RETIRED};
pub use event::{Advert, Event, PeerInfo, Resources};
pub use id::NodeId;
pub use membership::{ChangeOutcome, ChangeRefusal, MemberChange};
pub use message::{Ballot, Message};
pub use node::{Core, Parts};
pub use peers::{Peer, PeerTable};
pub use task::{
    OfferState, OwnedTask, RepoMount, RunTimings, RunningTask, SandboxExit, SharedSpec,
    TaskCapacity, TaskId, TaskPhase, TaskResult, TaskSpec, TaskStatus, Usage,
    MAX_REPORT_LISTS_WIRE_BYTES, MAX_RESULT_WIRE_BYTES, MAX_SPEC_WIRE_BYTES, MAX_TAIL_BYTES,
    MAX_TAIL_WIRE_BYTES,
};
pub use timer::{Timer, TimerTable};
pub use transfer::HandoverRefusal;
pub use trust::{Refusal, MAX_CAPABILITIES, MAX_ID_BYTES, MAX_MEMBERS, MAX_UPTIME_S, MAX_WIRE_INT};
