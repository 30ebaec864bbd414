//! Checks on what nodes did, for tests, the simulator and `chorus replay`: the core's own
//! notices are not trusted to report a double vote, so vote safety is judged from the wire.

use std::collections::BTreeMap;

use crate::{Command, Message, NodeId, Notice};

/// Vote safety (docs/design.md §5.3) judged from the commands a node emits: every
/// `VoteReply { granted: true }` it sends is a vote for the recipient in the reply's term, and
/// its `Voted` notice for itself is a candidate's own vote (the one vote that leaves no reply).
/// A voter may give one candidate its vote any number of times (lost replies are asked for
/// again), never two candidates in one term, restarts included. A core that grants twice but
/// reports one `Voted` notice is caught.
#[derive(Clone, Debug, Default)]
pub struct VoteLedger {
    votes: BTreeMap<(NodeId, u64), NodeId>,
}

impl VoteLedger {
    /// Records a command `voter` emitted; an error names the two candidates of one term.
    pub fn observe(&mut self, voter: &NodeId, command: &Command) -> Result<(), String> {
        let (term, candidate) = match command {
            Command::Send {
                to,
                msg:
                    Message::VoteReply {
                        term,
                        granted: true,
                        ..
                    },
            } => (*term, to),
            Command::Notice(Notice::Voted { term, candidate }) if candidate == voter => {
                (*term, candidate)
            }
            _ => return Ok(()),
        };
        match self.votes.get(&(voter.clone(), term)) {
            Some(prev) if prev != candidate => Err(format!(
                "{voter} granted its term-{term} vote to {prev} and to {candidate}"
            )),
            Some(_) => Ok(()),
            None => {
                self.votes.insert((voter.clone(), term), candidate.clone());
                Ok(())
            }
        }
    }

    /// How many (voter, term) pairs have a recorded vote.
    pub fn len(&self) -> usize {
        self.votes.len()
    }

    /// Whether no vote was recorded.
    pub fn is_empty(&self) -> bool {
        self.votes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(to: &str, term: u64, granted: bool) -> Command {
        Command::Send {
            to: to.into(),
            msg: Message::VoteReply {
                term,
                granted,
                promise_ms: 1_000,
            },
        }
    }

    fn voted(term: u64, candidate: &str) -> Command {
        Command::Notice(Notice::Voted {
            term,
            candidate: candidate.into(),
        })
    }

    /// One vote per voter per term, judged from granted replies and a candidate's vote for
    /// itself; the same vote again is fine, a refusal is no vote, another term is another vote.
    #[test]
    fn a_second_candidate_in_one_term_is_reported_with_both_names() {
        let v: NodeId = "v".into();
        let mut l = VoteLedger::default();
        assert!(l.is_empty());
        l.observe(&v, &grant("a", 3, true)).unwrap();
        assert_eq!((l.len(), l.is_empty()), (1, false));
        l.observe(&v, &grant("a", 3, true)).unwrap();
        l.observe(&v, &grant("b", 3, false)).unwrap();
        l.observe(&v, &grant("b", 4, true)).unwrap();
        assert_eq!(l.len(), 2);
        let e = l.observe(&v, &grant("b", 3, true)).unwrap_err();
        assert_eq!(e, "v granted its term-3 vote to a and to b");
        // Another voter's vote in the same term is its own.
        l.observe(&"w".into(), &grant("b", 3, true)).unwrap();
        assert_eq!(l.len(), 3);
    }

    /// A candidate's vote for itself counts (it leaves no reply); a `Voted` notice naming
    /// another node does not: that vote is judged by the reply actually sent.
    #[test]
    fn a_candidates_own_vote_counts_and_a_notice_for_another_does_not() {
        let c: NodeId = "c".into();
        let mut l = VoteLedger::default();
        l.observe(&c, &voted(5, "c")).unwrap();
        assert_eq!(l.len(), 1);
        assert!(l.observe(&c, &grant("x", 5, true)).is_err());

        let v: NodeId = "v".into();
        let mut l = VoteLedger::default();
        l.observe(&v, &voted(5, "x")).unwrap();
        assert!(l.is_empty(), "a notice of a vote for another is not a vote");
        l.observe(&v, &grant("y", 5, true)).unwrap();
        // Other commands are not votes.
        l.observe(&v, &Command::Notice(Notice::LeaseExpired { term: 5 }))
            .unwrap();
        assert_eq!(l.len(), 1);
    }
}
