//! Protocol messages between nodes. The sender is never a field: it is the authenticated peer of
//! the connection, handed to the core alongside the message.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{ChangeOutcome, Electorate, MemberChange, NodeId, Resources};

/// Every message of the protocol (docs/design.md §4). The wire format is in `docs/wire-format.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Discovery request: "who is the admin?" Carries the asker's electorate version so the
    /// reply includes the electorate only when the asker lacks it.
    Whoami {
        /// The asker's electorate version (0 = none).
        electorate_version: u64,
        /// The term that proposed the asker's electorate (0 at bootstrap): with the version,
        /// tells apart two electorates of one version proposed in different terms.
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_term: u64,
        /// The asker's stamp (see [`Message::PreVoteRequest`]): a replier at a later position
        /// sends its electorate.
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_stamp: u64,
    },
    /// Discovery reply: the replier's view.
    WhoamiReply {
        /// The admin the replier follows, if any.
        admin: Option<NodeId>,
        /// The replier's current term.
        term: u64,
        /// The replier's electorate version (0 = none).
        membership_version: u64,
        /// The highest beat the replier has seen.
        beat: u64,
        /// Seconds since the replier started (a score input).
        uptime_s: u64,
        /// The replier's free resources (a score input).
        resources: Resources,
        /// Whether the replier is admin-eligible.
        eligible: bool,
        /// The replier's electorate, when it differs from the asker's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        electorate: Option<Arc<Electorate>>,
        /// The replier's stamp on that electorate: with its version, the position a member
        /// of the asker's electorate hands it over at (`membership.rs`, rule 5).
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_stamp: u64,
        /// The genesis of the replier's electorate (0 = none): a different one than the
        /// asker's means another cluster.
        #[serde(default, skip_serializing_if = "is_zero")]
        genesis: u64,
    },
    /// Pre-vote: "would you vote for me in `term`?" Changes no state at the receiver.
    PreVoteRequest {
        /// The term the candidate would stand in (its current term + 1).
        term: u64,
        /// Candidate's electorate version.
        electorate_version: u64,
        /// The term that proposed the candidate's electorate (0 at bootstrap).
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_term: u64,
        /// Candidate's electorate fingerprint.
        electorate_hash: u64,
        /// The last term in which the candidate's electorate was confirmed as that term's
        /// admin's (0: never). Voters order candidates by (stamp, version), as Raft orders logs
        /// by (last term, last index): see `membership.rs`.
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_stamp: u64,
    },
    /// Pre-vote answer.
    PreVoteReply {
        /// The proposed term when granted, else the voter's current term.
        term: u64,
        /// Whether the voter would vote.
        granted: bool,
    },
    /// Vote request in `term` (the candidate has already moved to `term` and voted for itself).
    VoteRequest {
        /// The candidate's term.
        term: u64,
        /// Candidate's electorate version.
        electorate_version: u64,
        /// The term that proposed the candidate's electorate (0 at bootstrap).
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_term: u64,
        /// Candidate's electorate fingerprint.
        electorate_hash: u64,
        /// As in [`Message::PreVoteRequest`].
        #[serde(default, skip_serializing_if = "is_zero")]
        electorate_stamp: u64,
        /// The candidate stands because its admin handed over (`timeout_now`): a voter whose
        /// promise to that admin still runs keeps the request for the admin's step-down
        /// instead of refusing it (`transfer.rs`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        transfer: bool,
    },
    /// Vote answer.
    VoteReply {
        /// The voter's current term.
        term: u64,
        /// Whether the vote was granted.
        granted: bool,
        /// When granted: how long the voter promised to grant no other vote, its own
        /// `election_timeout_min_ms` (0 when absent: no promise is assumed).
        #[serde(default, skip_serializing_if = "is_zero")]
        promise_ms: u64,
    },
    /// The admin's periodic heartbeat (broadcast).
    Heartbeat {
        /// The admin's term.
        term: u64,
        /// The cluster-wide beat counter (a tempo, like CHORUS's BACKBEAT).
        beat: u64,
        /// The admin's electorate version.
        membership_version: u64,
        /// The term that proposed the admin's electorate (0 at bootstrap): a follower on the
        /// same version from another term asks for the admin's.
        #[serde(default, skip_serializing_if = "is_zero")]
        membership_term: u64,
        /// The genesis of the admin's electorate (0 = unknown).
        #[serde(default, skip_serializing_if = "is_zero")]
        genesis: u64,
        /// While a membership change is being committed: the new electorate, which every
        /// receiver adopts before it acknowledges.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        electorate: Option<Arc<Electorate>>,
        /// The newest version the admin holds a certificate chain up to: a follower behind it
        /// asks for the links ([`Message::ChainRequest`]).
        #[serde(default, skip_serializing_if = "is_zero")]
        certified: u64,
    },
    /// A voter's acknowledgement of a heartbeat; a majority of them renews the lease.
    HeartbeatAck {
        /// The voter's current term (higher than the admin's tells a stale admin to step down).
        term: u64,
        /// The beat acknowledged.
        beat: u64,
        /// How long the voter promised, on receipt, to grant no vote to anyone else: its own
        /// `election_timeout_min_ms` (0 when absent: no promise is assumed).
        #[serde(default, skip_serializing_if = "is_zero")]
        promise_ms: u64,
        /// The sender holds the electorate the acknowledged heartbeat named (and so has
        /// stamped it with the admin's term): what establishes an admin and commits a change.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        holds: bool,
        /// With `holds`: the sender's signature over the statement of the electorate it holds,
        /// which the admin keeps to certify a change (`certificate.rs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endorsement: Option<crate::Signature>,
        /// As in [`Message::Heartbeat`], of the sender.
        #[serde(default, skip_serializing_if = "is_zero")]
        certified: u64,
    },
    /// "Send me the links of committed electorates after version `after`" — asked by a node
    /// that is behind the sender's chain (`certificate.rs`).
    ChainRequest {
        /// The asker's anchor version.
        after: u64,
    },
    /// The links after the asked version, oldest first (at most
    /// [`MAX_LINKS_PER_MESSAGE`](crate::certificate::MAX_LINKS_PER_MESSAGE); none if the sender
    /// has no link right after it).
    Chain {
        /// The links.
        links: Vec<Arc<crate::Link>>,
    },
    /// An admin gives up its lease (graceful shutdown, a handover), so voters may elect at once.
    StepDown {
        /// The term the admin leaves.
        term: u64,
        /// The voter it hands over to (`timeout_now`): the others give it one election
        /// timeout before they stand (`transfer.rs` rule 5).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        successor: Option<NodeId>,
    },
    /// The admin of `term`, having stepped down, asks the receiver to stand at once in the
    /// next term (Raft's `TimeoutNow`; `transfer.rs`).
    TimeoutNow {
        /// The term the admin leaves.
        term: u64,
    },
    /// Bootstrap, phase 1: "promise to accept no bootstrap proposal below `ballot`".
    BootstrapPrepare {
        /// The proposal number; its node is the sender.
        ballot: Ballot,
        /// The sender's `bootstrap_expect`: every node must use the same.
        expect: u32,
    },
    /// Bootstrap: the promise, with the proposal this node accepted before, if any.
    BootstrapPromise {
        /// The ballot promised.
        ballot: Ballot,
        /// The highest-ballot proposal this node accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accepted: Option<(Ballot, Arc<Electorate>)>,
    },
    /// Bootstrap, phase 2: "accept this initial electorate".
    BootstrapAccept {
        /// The proposal number.
        ballot: Ballot,
        /// The proposed electorate (version 1, exactly `bootstrap_expect` members).
        electorate: Arc<Electorate>,
    },
    /// Bootstrap: the proposal of `ballot` was accepted.
    BootstrapAccepted {
        /// The ballot accepted.
        ballot: Ballot,
    },
    /// Bootstrap: a prepare or accept refused, because of a higher promise or because the
    /// replier already belongs to a cluster.
    BootstrapRefused {
        /// The ballot refused.
        ballot: Ballot,
        /// The replier's promise, when that is the reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        promised: Option<Ballot>,
        /// The replier knows an electorate already (the asker should ask it WHOAMI).
        #[serde(default)]
        formed: bool,
    },
    /// Bootstrap: the electorate was chosen (accepted by `bootstrap_expect` nodes).
    BootstrapChosen {
        /// The chosen electorate.
        electorate: Arc<Electorate>,
    },
    /// A membership change an operator asked for at the sender, forwarded to the admin the
    /// sender follows. Only voters and admin-eligible peers may ask.
    ChangeRequest {
        /// The sender's id for the request, echoed in the answer.
        request: u64,
        /// The change.
        change: MemberChange,
    },
    /// The admin's answer to a [`Message::ChangeRequest`]: refused at once, or committed.
    ChangeResult {
        /// The request answered.
        request: u64,
        /// The change.
        change: MemberChange,
        /// What became of it.
        outcome: ChangeOutcome,
    },
    /// A submitter offers a task it owns to the admin (again until its result is in). Only the
    /// task's origin may offer it.
    TaskOffer {
        /// The task.
        task: crate::TaskId,
        /// What to run.
        spec: crate::SharedSpec,
        /// The submitter's user asked to cancel it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancel: bool,
        /// The latest run of it an admin named to the submitter (0: none): an admin that
        /// places it counts on from there, so run numbers go on across failovers.
        #[serde(default, skip_serializing_if = "is_zero32")]
        attempt: u32,
        /// How long admins have said no live worker can run it (ms; 0: none said, or a worker
        /// could): an admin counts on from there towards ending it `unschedulable`, so a
        /// failover does not start the count again (`task/place.rs`, rule 10).
        #[serde(default, skip_serializing_if = "is_zero")]
        unplaceable_ms: u64,
    },
    /// The admin's answer to an offer (and news of a placement): where the task stands.
    TaskState {
        /// The task.
        task: crate::TaskId,
        /// Where it stands.
        state: crate::OfferState,
    },
    /// The admin places run `attempt` of a task on the receiver.
    TaskPlace {
        /// The admin's term.
        term: u64,
        /// The task (its origin is the submitter the result goes to).
        task: crate::TaskId,
        /// The run, from 1.
        attempt: u32,
        /// The admin's placement number in this term (the worker's report echoes the highest).
        seq: u64,
        /// What to run.
        spec: crate::SharedSpec,
    },
    /// The admin asks the receiver to stop a task it runs.
    TaskCancel {
        /// The admin's term.
        term: u64,
        /// The task.
        task: crate::TaskId,
    },
    /// A worker tells its admin what it runs and holds.
    WorkerReport {
        /// The term of the admin reported to.
        term: u64,
        /// The highest placement number received from that admin in that term.
        seen: u64,
        /// Task slots offered.
        slots: u32,
        /// Memory and CPU offered to tasks (absent: not said, only slots count).
        #[serde(default, skip_serializing_if = "crate::TaskCapacity::is_unset")]
        capacity: crate::TaskCapacity,
        /// Runs in progress, with their attempt.
        running: Vec<(crate::TaskId, u32)>,
        /// Tasks finished here whose results their submitters have not acknowledged, and the
        /// latest acknowledged ones.
        finished: Vec<crate::TaskId>,
        /// Runs placed here and not run — refused (no free slot, a capability missing) or given
        /// back after a retryable failure — by task and attempt, the latest last.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        released: Vec<(crate::TaskId, u32)>,
        /// The lists did not fit one frame: each holds only some of its entries, the rest come
        /// in the next reports (`task/work.rs`, rule 7), so a placement left out is not lost.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    /// A task's result, sent by its worker to its submitter until acknowledged.
    TaskResult {
        /// The task.
        task: crate::TaskId,
        /// The result. Boxed: inline it would make every message 160 bytes, and the simulator
        /// moves millions of messages.
        result: Box<crate::TaskResult>,
    },
    /// The submitter has the result: the worker may forget it.
    TaskResultAck {
        /// The task.
        task: crate::TaskId,
        /// The worker whose result the admin relayed (`task/place.rs`, rule 11): the submitter
        /// acknowledges a relayed result to the admin, which passes this on to that worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<crate::NodeId>,
    },
    /// Cancel a task whose origin the sender cannot reach (`task/ask.rs`): sent to the origin
    /// (which cancels it as its own user would) and to the admin (which stops its run).
    TaskCancelAsk {
        /// The task.
        task: crate::TaskId,
    },
    /// The origin has a [`Message::TaskCancelAsk`]: the asker forgets it.
    TaskCancelAsked {
        /// The task.
        task: crate::TaskId,
    },
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

/// A bootstrap proposal number: ordered by round, then by the proposer's id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Ballot {
    /// The round, starting at 1.
    pub round: u64,
    /// The proposer.
    pub node: NodeId,
}

impl Message {
    /// A short, stable name for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Whoami { .. } => "whoami",
            Message::WhoamiReply { .. } => "whoami_reply",
            Message::PreVoteRequest { .. } => "pre_vote_request",
            Message::PreVoteReply { .. } => "pre_vote_reply",
            Message::VoteRequest { .. } => "vote_request",
            Message::VoteReply { .. } => "vote_reply",
            Message::Heartbeat { .. } => "heartbeat",
            Message::HeartbeatAck { .. } => "heartbeat_ack",
            Message::StepDown { .. } => "step_down",
            Message::TimeoutNow { .. } => "timeout_now",
            Message::ChainRequest { .. } => "chain_request",
            Message::Chain { .. } => "chain",
            Message::BootstrapPrepare { .. } => "bootstrap_prepare",
            Message::BootstrapPromise { .. } => "bootstrap_promise",
            Message::BootstrapAccept { .. } => "bootstrap_accept",
            Message::BootstrapAccepted { .. } => "bootstrap_accepted",
            Message::BootstrapRefused { .. } => "bootstrap_refused",
            Message::BootstrapChosen { .. } => "bootstrap_chosen",
            Message::ChangeRequest { .. } => "change_request",
            Message::ChangeResult { .. } => "change_result",
            Message::TaskOffer { .. } => "task_offer",
            Message::TaskState { .. } => "task_state",
            Message::TaskPlace { .. } => "task_place",
            Message::TaskCancel { .. } => "task_cancel",
            Message::WorkerReport { .. } => "worker_report",
            Message::TaskResult { .. } => "task_result",
            Message::TaskResultAck { .. } => "task_result_ack",
            Message::TaskCancelAsk { .. } => "task_cancel_ask",
            Message::TaskCancelAsked { .. } => "task_cancel_asked",
        }
    }

    /// Whether the message belongs to an election (pre-vote or vote), for per-election counts.
    pub fn is_election(&self) -> bool {
        matches!(
            self,
            Message::PreVoteRequest { .. }
                | Message::PreVoteReply { .. }
                | Message::VoteRequest { .. }
                | Message::VoteReply { .. }
        )
    }

    /// Whether the message may carry an electorate: only such a message may be larger than a
    /// frame, and travel in parts (`codec::encode_parts`). A chain of links carries one per
    /// link (a voter 63 changes behind in a 5-voter cluster needs more than a frame).
    pub fn carries_electorate(&self) -> bool {
        matches!(
            self,
            Message::WhoamiReply { .. }
                | Message::Chain { .. }
                | Message::Heartbeat { .. }
                | Message::BootstrapPromise { .. }
                | Message::BootstrapAccept { .. }
                | Message::BootstrapChosen { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The election's own messages, counted apart by the simulator (messages per election):
    /// pre-votes and votes, both ways, and nothing else.
    #[test]
    fn only_pre_votes_and_votes_are_election_messages() {
        let election = [
            Message::PreVoteRequest {
                term: 1,
                electorate_version: 1,
                electorate_term: 0,
                electorate_hash: 0,
                electorate_stamp: 0,
            },
            Message::PreVoteReply {
                term: 1,
                granted: true,
            },
            Message::VoteRequest {
                term: 1,
                electorate_version: 1,
                electorate_term: 0,
                electorate_hash: 0,
                electorate_stamp: 0,
                transfer: false,
            },
            Message::VoteReply {
                term: 1,
                granted: false,
                promise_ms: 0,
            },
        ];
        let other = [
            Message::StepDown {
                term: 1,
                successor: None,
            },
            Message::TimeoutNow { term: 1 },
            Message::HeartbeatAck {
                term: 1,
                beat: 1,
                promise_ms: 0,
                holds: false,
                endorsement: None,
                certified: 0,
            },
            Message::Whoami {
                electorate_version: 0,
                electorate_term: 0,
                electorate_stamp: 0,
            },
        ];
        for m in &election {
            assert!(m.is_election(), "{m:?}");
        }
        for m in &other {
            assert!(!m.is_election(), "{m:?}");
        }
    }
}
