//! Every integration test of `mc`, in one test binary: each file beside this one is a module.
//! One binary links the crate's dependencies once (one per file made a clean test build
//! link ~70 binaries; docs/testing.md). Run one file's tests with
//! `cargo test -p <package> --test suite <file>::`.

mod bootstrap;
mod search;
