//! End to end: what agents use to reach a cluster (issue 55) — the `chorus mcp` server driven
//! by an MCP client, and the Python client's own tests — against real nodes with Docker
//! sandboxes. These need a running Docker Engine (and, for the Python client, `python3`) and
//! fail, never skip, without them.

mod mcp;
mod python;

/// The end-to-end tests' build of the node (`tests/src/bin/chorus-e2e.rs`).
const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");
