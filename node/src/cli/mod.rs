//! The command-line tools that are not the daemon: `http` is the one HTTP client every command
//! talks to a node's API with; then one file per command — `status`, `members`, `task` (and `logs`, its output), `acl`,
//! `sandbox` (the Docker sandbox by hand, and `live`: live sandboxes through a node), `mcp` (all
//! of these as an MCP server's tools, for agents), and the offline ones on a stopped node's data
//! directory, `replay` and `recover`. They read the API's documents from [`crate::wire`] and
//! never import the server.

pub mod acl;
pub mod across;
pub mod config;
pub mod http;
pub mod live;
pub mod logs;
pub mod mcp;
pub mod members;
pub mod outcome;
pub mod psk;
pub mod recover;
pub mod replay;
pub mod sandbox;
pub mod status;
pub mod task;
pub mod taskfile;
