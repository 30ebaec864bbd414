//! Every integration test of `core`, in one test binary: each file beside this one is a module.
//! One binary links the crate's dependencies once (one per file made a clean test build
//! link ~70 binaries; docs/testing.md). Run one file's tests with
//! `cargo test -p <package> --test suite <file>::`.

mod arbitrary_events;
mod bootstrap;
mod bootstrap_rules;
mod codec_fuzz;
mod determinism;
mod election_rules;
mod fair_rules;
mod handover;
mod link_rules;
mod membership;
mod narrow_rules;
mod node_rules;
mod one_core;
mod properties;
mod result_rules;
mod support;
mod task_frames;
mod task_rules;
mod tasks;
mod wire_checks;
