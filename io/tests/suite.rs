//! Every integration test of `io`, in one test binary: each file beside this one is a module.
//! One binary links the crate's dependencies once (one per file made a clean test build
//! link ~70 binaries; docs/testing.md). Run one file's tests with
//! `cargo test -p <package> --test suite <file>::`.

mod common;
mod eventlog_sled;
mod runtime_untrusted;
mod sandbox_containment;
mod sandbox_contract;
mod sandbox_docker;
mod sandbox_pool;
mod transport_libp2p;
