//! What devcluster prints: the live table (or one line per change), the percentiles over
//! several failovers, and the closing line.

use std::time::Duration;

use serde_json::Value;

use super::process::Node;

/// What happened during a run, for the closing line.
#[derive(Default)]
pub(super) struct Report {
    /// Why the run ended.
    pub(super) stopped_by: &'static str,
    /// The last agreed (admin id, term, node index).
    pub(super) last_admin: Option<(String, u64, usize)>,
    /// (new admin elected, every live node agrees) per failover.
    pub(super) failovers: Vec<(Duration, Duration)>,
    /// Children that exited without being told to.
    pub(super) unexpected_exits: usize,
}

impl Report {
    /// The closing line, for a cluster of `nodes` nodes that ran `ran`.
    pub(super) fn line(&self, nodes: usize, ran: Duration, data: &str) -> String {
        let admin = match &self.last_admin {
            Some((id, term, i)) => format!("last admin n{i} ({}) of term {term}", short(id)),
            None => "no admin agreed".to_owned(),
        };
        let failovers = match self.failovers.as_slice() {
            [] => "no failover".to_owned(),
            [(first, all)] => format!(
                "1 failover (new admin after {:.2} s, all agreed after {:.2} s)",
                first.as_secs_f64(),
                all.as_secs_f64()
            ),
            many => {
                let mut firsts: Vec<f64> = many.iter().map(|d| d.0.as_secs_f64()).collect();
                firsts.sort_by(f64::total_cmp);
                format!(
                    "{} failovers (new admin p50 {:.2} s, max {:.2} s)",
                    many.len(),
                    firsts[firsts.len() / 2],
                    firsts[firsts.len() - 1]
                )
            }
        };
        format!(
            "devcluster: stopped ({}) after {:.0} s: {} nodes, {admin}, {failovers}, {} \
             unexpected exit(s); {data}",
            if self.stopped_by.is_empty() {
                "done"
            } else {
                self.stopped_by
            },
            ran.as_secs_f64(),
            nodes,
            self.unexpected_exits,
        )
    }
}

/// A node id's short form ([`crate::names::short_id`]).
pub(super) fn short(id: &str) -> &str {
    crate::names::short_id(id)
}

/// One line of who is what, printed when it changes (`--plain`, or not a terminal).
pub(super) fn summary_line(nodes: &[Node], agreed: &Option<(String, u64)>) -> String {
    let mut line = match agreed {
        Some((admin, term)) => format!("admin {} term {term} |", short(admin)),
        None => "no agreed admin |".to_owned(),
    };
    for n in nodes {
        let state = if n.child.is_none() {
            "down".to_owned()
        } else if n.status.is_none() {
            "starting".to_owned()
        } else {
            format!("{}/{}", n.role(), n.term())
        };
        line.push_str(&format!(" n{}:{state}", n.index));
    }
    line
}

/// How many failovers the table lists (the latest).
const TABLE_FAILOVERS: usize = 3;

/// The table, redrawn in place under the messages ([`super::console::Console::table`]).
pub(super) fn table(
    nodes: &[Node],
    agreed: &Option<(String, u64)>,
    durations: &[(Duration, Duration)],
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<4} {:<10} {:<10} {:>5} {:<10} {:>5}  {}\n",
        "", "node", "role", "term", "admin", "peers", "http"
    ));
    for n in nodes {
        let (role, term, admin, peers) = if n.child.is_none() {
            (
                "DOWN".to_owned(),
                String::new(),
                String::new(),
                String::new(),
            )
        } else if n.status.is_none() {
            (
                "starting".to_owned(),
                String::new(),
                String::new(),
                String::new(),
            )
        } else {
            (
                n.role().to_owned(),
                n.term().to_string(),
                n.admin().map(short).unwrap_or("-").to_owned(),
                n.field("peers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
                    .to_string(),
            )
        };
        let star = if n.role() == "admin" { "*" } else { "" };
        out.push_str(&format!(
            "n{:<3} {:<10} {:<10} {:>5} {:<10} {:>5}  {}\n",
            format!("{}{star}", n.index),
            n.id().map(short).unwrap_or("-"),
            role,
            term,
            admin,
            peers,
            n.http
        ));
    }
    match agreed {
        Some((admin, term)) => out.push_str(&format!(
            "\nevery live node agrees: admin {} of term {term}\n",
            short(admin)
        )),
        None => out.push_str("\nno agreed admin yet\n"),
    }
    // The last few only: the table is redrawn over its own lines, which must fit on the screen
    // (every failover's line also scrolls above it).
    let shown = durations.len().saturating_sub(TABLE_FAILOVERS);
    if shown > 0 {
        out.push_str(&format!("({shown} earlier failover(s): see above)\n"));
    }
    for (i, (first, all)) in durations.iter().enumerate().skip(shown) {
        out.push_str(&format!(
            "failover #{}: new admin after {:.2} s, agreed after {:.2} s\n",
            i + 1,
            first.as_secs_f64(),
            all.as_secs_f64()
        ));
    }
    out
}

/// Percentiles over several failovers (one failover's line already says it all).
pub(super) fn summary(durations: &[(Duration, Duration)]) -> Option<String> {
    if durations.len() < 2 {
        return None;
    }
    let mut first: Vec<f64> = durations.iter().map(|d| d.0.as_secs_f64()).collect();
    let mut all: Vec<f64> = durations.iter().map(|d| d.1.as_secs_f64()).collect();
    first.sort_by(f64::total_cmp);
    all.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    Some(format!(
        "devcluster: {} failovers; new admin p50 {:.2} s p99 {:.2} s max {:.2} s; all agree \
         p50 {:.2} s p99 {:.2} s max {:.2} s",
        durations.len(),
        pct(&first, 0.5),
        pct(&first, 0.99),
        first[first.len() - 1],
        pct(&all, 0.5),
        pct(&all, 0.99),
        all[all.len() - 1],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_only_the_latest_failovers_so_its_height_stays_bounded() {
        let nodes: Vec<Node> = (0..3)
            .map(|index| Node::new(index, format!("/tmp/n{index}").into()))
            .collect();
        let one = Duration::from_millis(1_500);
        let few = table(&nodes, &None, &[(one, one); 2]);
        let many = table(&nodes, &None, &[(one, one); 20]);
        assert!(
            few.contains("failover #2:") && !few.contains("earlier"),
            "{few}"
        );
        assert!(
            many.contains("(17 earlier failover(s): see above)"),
            "{many}"
        );
        assert!(many.contains("failover #20:") && !many.contains("failover #17:"));
        assert_eq!(many.lines().count(), few.lines().count() + 2);
        // Nodes not running are down.
        assert_eq!(many.matches("DOWN").count(), 3);
    }
}
