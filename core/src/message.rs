//! Protocol messages between nodes. The sender is never a field: it is the authenticated peer of
//! the connection, handed to the core alongside the message.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Electorate, NodeId, Resources};

/// Every message of the protocol (DESIGN §4). The wire format is in `docs/wire-format.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Discovery request: "who is the admin?" Carries the asker's electorate version so the
    /// reply includes the electorate only when the asker lacks it.
    Whoami {
        /// The asker's electorate version (0 = none).
        electorate_version: u64,
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
        /// The replier's electorate, when newer than the asker's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        electorate: Option<Arc<Electorate>>,
    },
    /// Pre-vote: "would you vote for me in `term`?" Changes no state at the receiver.
    PreVoteRequest {
        /// The term the candidate would stand in (its current term + 1).
        term: u64,
        /// Candidate's electorate version.
        electorate_version: u64,
        /// Candidate's electorate fingerprint.
        electorate_hash: u64,
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
        /// Candidate's electorate fingerprint.
        electorate_hash: u64,
    },
    /// Vote answer.
    VoteReply {
        /// The voter's current term.
        term: u64,
        /// Whether the vote was granted.
        granted: bool,
    },
    /// The admin's periodic heartbeat (broadcast).
    Heartbeat {
        /// The admin's term.
        term: u64,
        /// The cluster-wide beat counter (a tempo, like CHORUS's BACKBEAT).
        beat: u64,
        /// The admin's electorate version.
        membership_version: u64,
    },
    /// A voter's acknowledgement of a heartbeat; a majority of them renews the lease.
    HeartbeatAck {
        /// The voter's current term (higher than the admin's tells a stale admin to step down).
        term: u64,
        /// The beat acknowledged.
        beat: u64,
    },
    /// An admin gives up its lease (graceful shutdown), so voters may elect at once.
    StepDown {
        /// The term the admin leaves.
        term: u64,
    },
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
}
