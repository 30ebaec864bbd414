//! What a scenario file must satisfy beyond its types: nodes in range, groups that keep nodes
//! apart, joins of late nodes only, settings every node can run with.

use chorus_core::Config;

use super::{expand, Action, NodeRef, Scenario, Target};

impl Scenario {
    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.config.bootstrap_expect != Config::default().bootstrap_expect {
            return Err(
                "config.bootstrap_expect is not read: set the top-level `bootstrap_expect` (default: the number of voters), or `bootstrap_expect` in `[[node_settings]]`".into(),
            );
        }
        self.node_config().validate().map_err(|e| e.to_string())?;
        if self.nodes == 0 {
            return Err("nodes must be at least 1".into());
        }
        if self.voter_count() == 0 {
            return Err("at least one voter is needed".into());
        }
        if self.late_joiners >= self.nodes {
            return Err("late_joiners must leave at least one node starting at once".into());
        }
        let in_range = |what: &str, list: &[NodeRef]| -> Result<(), String> {
            match list.iter().find(|r| r.last() >= self.nodes) {
                Some(r) => Err(format!(
                    "{what} names {}, but there are {} nodes (n0..=n{})",
                    String::from(*r),
                    self.nodes,
                    self.nodes - 1
                )),
                None => Ok(()),
            }
        };
        in_range("late", &self.late)?;
        if self.late_nodes().len() >= self.nodes {
            return Err(
                "late and late_joiners must leave at least one node starting at once".into(),
            );
        }
        for (k, s) in self.node_settings.iter().enumerate() {
            let what = format!("node_settings[{k}]");
            if s.nodes.is_empty() {
                return Err(format!("{what}: `nodes` is empty"));
            }
            in_range(&what, &s.nodes)?;
            let from = s.from.unwrap_or(0);
            for i in expand(&s.nodes) {
                self.node_config_at(i, from)
                    .validate()
                    .map_err(|e| format!("{what}: n{i}: {e}"))?;
            }
        }
        if !self.apart_at_start.is_empty() {
            self.check_groups("apart_at_start", &self.apart_at_start)?;
        }
        if self.hostile.nodes > self.nodes - self.voter_count() {
            return Err(format!(
                "hostile.nodes {} exceeds the {} workers: hostile nodes are never voters",
                self.hostile.nodes,
                self.nodes - self.voter_count()
            ));
        }
        if !self.hostile.is_off() && (self.hostile.every_ms == 0 || self.hostile.burst == 0) {
            return Err("hostile.every and hostile.burst must be positive".into());
        }
        if let Some(t) = &self.tasks {
            t.validate(self.nodes)?;
        }
        let (lo, hi) = self.network.latency_ms;
        if lo > hi {
            return Err(format!("network.latency_ms: min {lo} above max {hi}"));
        }
        for p in [
            self.network.loss_ppm,
            self.network.duplicate_ppm,
            self.network.reorder_ppm,
        ] {
            if p > 1_000_000 {
                return Err("probabilities are parts per million, at most 1000000".into());
            }
        }
        let late = self.late_nodes();
        for s in &self.events {
            let what = format!("event at {} ms", s.at);
            let targets: Vec<&Target> = match &s.action {
                Action::Crash { target }
                | Action::Restart { target }
                | Action::Stop { target }
                | Action::Transfer { target, .. }
                | Action::Bounce { target, .. }
                | Action::Add { target, .. }
                | Action::Remove { target, .. } => vec![target],
                Action::OneWay { from, to } => vec![from, to],
                _ => vec![],
            };
            for t in targets {
                if let Target::Node(i) | Target::Nodes(_, i) = t {
                    if *i >= self.nodes {
                        return Err(format!(
                            "{what} names n{i}, but there are {} nodes",
                            self.nodes
                        ));
                    }
                }
            }
            let single = match &s.action {
                Action::Add { node, .. } | Action::Remove { node, .. } => {
                    Some((node, "a membership change"))
                }
                Action::Transfer { to: Some(node), .. } => Some((node, "a handover")),
                _ => None,
            };
            if let Some((node, kind)) = single {
                let NodeRef::One(i) = node else {
                    return Err(format!(
                        "{what}: {kind} names one node, not {}",
                        String::from(*node)
                    ));
                };
                if *i >= self.nodes {
                    return Err(format!(
                        "{what} names n{i}, but there are {} nodes",
                        self.nodes
                    ));
                }
            }
            if let Action::Split { groups } = &s.action {
                self.check_groups(&format!("{what}: split"), groups)?;
            }
            if let Action::Join { count, nodes } = &s.action {
                in_range(&what, nodes)?;
                if let Some(i) = expand(nodes).into_iter().find(|i| !late.contains(i)) {
                    return Err(format!(
                        "{what}: join names n{i}, which is not late (list it in `late`)"
                    ));
                }
                if *count == 0 && nodes.is_empty() {
                    return Err(format!("{what}: join needs `count` or `nodes`"));
                }
            }
            if s.every == Some(0) {
                return Err(format!("{what} repeats every 0 ms"));
            }
        }
        Ok(())
    }

    /// Groups of nodes to keep apart (`apart_at_start`, a `split`): in range, each node in
    /// one group at most, and at least two groups that are not empty.
    fn check_groups(&self, what: &str, groups: &[Vec<NodeRef>]) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for (k, g) in groups.iter().enumerate() {
            if let Some(r) = g.iter().find(|r| r.last() >= self.nodes) {
                return Err(format!(
                    "{what}[{k}] names {}, but there are {} nodes (n0..=n{})",
                    String::from(*r),
                    self.nodes,
                    self.nodes - 1
                ));
            }
            for i in expand(g) {
                if !seen.insert(i) {
                    return Err(format!("{what}: n{i} is in more than one group"));
                }
            }
        }
        if groups.iter().filter(|g| !g.is_empty()).count() < 2 {
            return Err(format!("{what} needs at least two groups to keep apart"));
        }
        Ok(())
    }
}
