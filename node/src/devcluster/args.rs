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
    /// 0 never kills. Default: 1, or 0 with fewer than 3 nodes (a failover needs a majority of
    /// the nodes left after the kill); more than 0 with fewer than 3 nodes is refused.
    #[arg(long)]
    pub kills: Option<usize>,
    /// How to stop the admin: `kill` (SIGKILL, a crash) or `term` (SIGTERM, a graceful stop:
    /// the admin steps down and says so, and devcluster waits for it to exit).
    #[arg(long, default_value = "kill", value_parser = ["kill", "term"])]
    pub signal: String,
    /// Exit once the last kill's failover is done (with a summary), an admin is agreed, and the
    /// demo tasks (if any) have all ended, instead of waiting for Ctrl-C. With `--kills 0`: once
    /// an admin is agreed and the demo tasks are done.
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
    /// Keep the data directories (and logs) instead of deleting them on exit (nor does a later
    /// devcluster remove them, should this one be killed).
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

/// The number of admin kills a run makes, checked against the cluster's size: with `n` nodes a
/// kill leaves `n - 1`, which must still be a majority of the `n` voters to elect a new admin,
/// so a failover needs `n >= 3`. `Err` says why the options are refused; `Ok` also carries a
/// note when the default was changed.
pub(super) fn plan_kills(
    nodes: usize,
    kills: Option<usize>,
) -> Result<(usize, Option<String>), String> {
    if nodes == 0 || nodes > 64 {
        return Err("--nodes must be between 1 and 64".to_owned());
    }
    match kills {
        Some(k) if k > 0 && !failover_possible(nodes) => Err(format!(
            "--kills {k} needs at least 3 nodes: killing the admin of {nodes} leaves {}, which \
             is no majority of {nodes} voters, so no new admin could be elected (use --nodes 3 \
             or more, or --kills 0)",
            nodes - 1
        )),
        Some(k) => Ok((k, None)),
        None if !failover_possible(nodes) => Ok((
            0,
            Some(format!(
                "devcluster: the admin is not killed (--kills 0): with {nodes} node(s) no \
                 majority would be left to elect another (a failover needs --nodes 3 or more)"
            )),
        )),
        None => Ok((1, None)),
    }
}

/// Whether a cluster of `nodes` voters can elect a new admin after losing one: `nodes - 1` is a
/// strict majority of `nodes`.
pub(super) fn failover_possible(nodes: usize) -> bool {
    nodes >= 1 && 2 * (nodes - 1) > nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_needs_a_majority_left_after_the_kill() {
        assert!(!failover_possible(1));
        assert!(!failover_possible(2));
        assert!(failover_possible(3));
        assert!(failover_possible(5));
    }

    #[test]
    fn impossible_failovers_are_refused_up_front() {
        for nodes in [1, 2] {
            let e = plan_kills(nodes, Some(1)).unwrap_err();
            assert!(e.contains("needs at least 3 nodes"), "{e}");
            assert!(e.contains("--kills 0"), "{e}");
            // The default is no kill, and it says so.
            let (kills, note) = plan_kills(nodes, None).unwrap();
            assert_eq!(kills, 0);
            assert!(note.unwrap().contains("not killed"));
            assert_eq!(plan_kills(nodes, Some(0)), Ok((0, None)));
        }
        assert_eq!(plan_kills(3, None), Ok((1, None)));
        assert_eq!(plan_kills(5, Some(20)), Ok((20, None)));
        assert!(plan_kills(0, None).is_err());
        assert!(plan_kills(65, Some(0)).is_err());
    }
}
