//! Checks on what nodes did, for tests, the simulator and `chorus replay`: the core's own
//! notices are not trusted to report a double vote, so vote safety is judged from the wire.

use std::collections::BTreeMap;

use crate::{Command, Message, NodeId, Notice};

/// Vote safety (DESIGN §5.3) judged from the commands a node emits: every
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
