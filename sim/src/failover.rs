//! Failover times read off a trace, the same way for a simulation and for a real cluster's
//! merged logs: from a fault that takes the admin away — its crash, or a partition or cut
//! while it leads — to the next `became_admin` of a later term.

use crate::trace::Record;

/// One measured failover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failover {
    /// `crash`, `partition` or `cut`.
    pub fault: &'static str,
    /// When the fault happened and when the next admin was elected (trace ms).
    pub at: u64,
    pub elected: u64,
}

/// Streaming meter: feed every line in order.
#[derive(Default)]
pub struct FailoverMeter {
    admin: Option<(String, u64)>,
    pending: Option<(&'static str, u64, u64)>,
    done: Vec<Failover>,
}

impl FailoverMeter {
    /// Observes one line at time `t`.
    pub fn observe(&mut self, t: u64, record: &Record) {
        let fault = match record {
            Record::BecameAdmin { node, term, .. } => {
                if let Some((fault, at, old_term)) = self.pending {
                    if *term > old_term {
                        self.done.push(Failover {
                            fault,
                            at,
                            elected: t,
                        });
                        self.pending = None;
                    }
                }
                self.admin = Some((node.clone(), *term));
                return;
            }
            Record::Crash { node } if self.admin.as_ref().is_some_and(|(a, _)| a == node) => {
                "crash"
            }
            // A fault healed before any new admin did not take the admin away (it was on the
            // majority side).
            Record::Heal => {
                self.pending = None;
                return;
            }
            Record::Partition { .. } => "partition",
            Record::Cut { .. } => "cut",
            _ => return,
        };
        if self.pending.is_none() {
            if let Some((_, term)) = &self.admin {
                self.pending = Some((fault, t, *term));
            }
        }
        if fault == "crash" {
            self.admin = None;
        }
    }

    /// The failovers measured, in order.
    pub fn failovers(&self) -> &[Failover] {
        &self.done
    }

    /// (fault, count, p50, p99, max) in ms for each fault kind seen.
    pub fn summary(&self) -> Vec<(&'static str, usize, u64, u64, u64)> {
        let mut out = Vec::new();
        for kind in ["crash", "partition", "cut"] {
            let mut t: Vec<u64> = self
                .done
                .iter()
                .filter(|f| f.fault == kind)
                .map(|f| f.elected - f.at)
                .collect();
            if t.is_empty() {
                continue;
            }
            t.sort_unstable();
            let p = |q: usize| {
                t[(t.len() * q)
                    .div_ceil(100)
                    .saturating_sub(1)
                    .min(t.len() - 1)]
            };
            out.push((kind, t.len(), p(50), p(99), t[t.len() - 1]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(node: &str, term: u64) -> Record {
        Record::BecameAdmin {
            node: node.into(),
            term,
            lease_until: 0,
        }
    }

    #[test]
    fn a_crash_of_the_admin_is_timed_to_the_next_admin_of_a_later_term() {
        let mut m = FailoverMeter::default();
        m.observe(10, &admin("a", 1));
        // A follower's crash is no failover.
        m.observe(20, &Record::Crash { node: "b".into() });
        m.observe(100, &Record::Crash { node: "a".into() });
        m.observe(2_600, &admin("c", 2));
        m.observe(5_000, &Record::Partition { groups: vec![] });
        // The second cut of a pause (both directions) does not restart the clock.
        m.observe(
            5_001,
            &Record::Cut {
                from: vec![],
                to: vec![],
            },
        );
        m.observe(6_000, &admin("c", 2));
        m.observe(8_000, &admin("d", 3));
        // A partition that leaves the admin on the majority side is healed without a failover.
        m.observe(9_000, &Record::Partition { groups: vec![] });
        m.observe(9_500, &Record::Heal);
        m.observe(20_000, &admin("e", 4));
        let got: Vec<(&str, u64)> = m
            .failovers()
            .iter()
            .map(|f| (f.fault, f.elected - f.at))
            .collect();
        assert_eq!(got, [("crash", 2_500), ("partition", 3_000)]);
        assert_eq!(m.summary()[0], ("crash", 1, 2_500, 2_500, 2_500));
    }
}
