//! Every integration test of `sim`, in one test binary: each file beside this one is a module.
//! One binary links the crate's dependencies once (one per file made a clean test build
//! link ~70 binaries; docs/testing.md). Run one file's tests with
//! `cargo test -p <package> --test suite <file>::`.

mod bootstrap;
mod checker;
mod common;
mod des;
mod generated;
mod hostile;
mod membership;
mod reproducers;
mod scale;
mod scenarios;
mod snapshots;
mod split;
mod sweep;
mod task_checker;
mod tasks;
