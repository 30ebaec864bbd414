//! The end-to-end tests, in one test binary: each file beside this one is a module. They start
//! real `chorus` processes and Docker sandboxes; one binary links the node once (one per file made
//! a clean test build link ~70 binaries; docs/testing.md). `real_faults.rs` stays its own binary:
//! it needs root and network namespaces and runs one fault at a time. Run one file's tests with
//! `cargo test -p chorus-tests --test e2e <file>::`.

// The Docker test helpers of chorus-io's own tests (e2e_reap uses them).
#[path = "../../io/tests/common/mod.rs"]
mod io_common;

mod e2e_agents;
mod e2e_auth;
mod e2e_cluster;
mod e2e_console;
mod e2e_image;
mod e2e_members;
mod e2e_node;
mod e2e_operator;
mod e2e_reap;
mod e2e_tasks;
mod e2e_tls;
mod vs_etcd;
