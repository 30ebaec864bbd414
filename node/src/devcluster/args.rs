//! `chorus devcluster`'s options.

/// `chorus devcluster` options.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Kill the admin once the cluster has agreed on it for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub kill_admin_after: f64,
    /// How many times to kill the admin (the killed node is restarted after each failover);
    /// 0 never kills.
    #[arg(long, default_value_t = 1)]
    pub kills: usize,
    /// How to stop the admin: `kill` (SIGKILL, a crash) or `term` (SIGTERM, a graceful stop:
    /// the admin steps down and says so, and devcluster waits for it to exit).
    #[arg(long, default_value = "kill", value_parser = ["kill", "term"])]
    pub signal: String,
    /// Exit after the last kill's failover (with a summary) instead of waiting for Ctrl-C.
    #[arg(long)]
    pub exit_when_done: bool,
    /// Heartbeat interval, ms.
    #[arg(long, default_value_t = 1_000)]
    pub heartbeat_ms: u64,
    /// Election timeout window, ms.
    #[arg(long, default_value = "3000..4500")]
    pub election_timeout_ms: String,
    /// Discovery timeout, ms.
    #[arg(long, default_value_t = 2_000)]
    pub discovery_timeout_ms: u64,
    /// Keep the data directories (and logs) instead of deleting them on exit.
    #[arg(long)]
    pub keep: bool,
    /// Print one line per change instead of a table refreshed in place.
    #[arg(long)]
    pub plain: bool,
    /// Run a demo workload: the nodes run tasks in Docker sandboxes (`--docker`, warm pools of
    /// the sandbox test image, built if missing), and once the cluster agrees on an admin, N
    /// tasks are submitted through a node that is not the admin; one line per result, then a
    /// count per worker. Needs a running Docker Engine.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub demo_tasks: usize,
}
