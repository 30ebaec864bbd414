//! `chorus-mc`: an explicit-state model checker over the real CHORUS core.
//!
//! Not a model of the protocol: every transition is a real [`chorus_core::Core::step`]. A
//! [`World`] is a few cores (all admin-eligible, so the ones bootstrap leaves out are standbys),
//! the messages in flight between them, a partition, one global clock, and ghost variables that
//! remember what the invariants need (who was admin in which term, who voted for whom, which
//! electorates committed). From a start state the search ([`search::explore`]) tries, in every
//! state, every action the adversary has: deliver any message in flight, duplicate or drop one
//! (within budgets), fire any node's next timer (time jumps to it; other nodes' timers then fire
//! late, as after a pause), crash a node and restart it from a snapshot of its state (as a node
//! whose event log was just compacted recovers), split the cluster into two groups or heal it,
//! and ask the admin for any membership change. States are hashed and each is expanded once,
//! breadth-first, so a violation comes with a shortest path to it.
//!
//! The invariants ([`check`]) are docs/design.md §5's safety properties plus what membership and
//! bootstrap must keep: one admin per term, no two unexpired leases at one instant, one vote per
//! voter per term, committed electorates forming one chain that every later admin holds, one
//! genesis electorate.

pub mod check;
pub mod node;
pub mod search;
pub mod walk;
pub mod world;

pub use check::{Reached, Violation};
pub use search::{explore, Outcome, Stats};
pub use walk::{walks, Failure, WalkReport};
pub use world::{Action, Limits, Model, Start, World};
