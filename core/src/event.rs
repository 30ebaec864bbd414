//! Inputs to the core. The runtime logs each one (with its `now`) before acting on the output.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Config, Message, NodeId, Timer};

/// One input to [`crate::Core::step`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The process started. On a state that has run before this is a restart: role, lease and
    /// peers are forgotten, while term, vote, electorate and beat survive.
    Started,
    /// A timer set by a [`crate::Command::SetTimer`] fired. Stale firings are ignored.
    TimerFired {
        /// Which timer.
        timer: Timer,
    },
    /// A message arrived from an authenticated peer.
    Message {
        /// The authenticated sender.
        from: NodeId,
        /// The decoded message.
        msg: Message,
    },
    /// A peer became reachable, with what it advertises about itself (written as the fields
    /// `peer` and `info`; build it with [`Event::peer_up`]).
    PeerUp(Advert),
    /// A peer became unreachable.
    PeerDown {
        /// The peer.
        peer: NodeId,
    },
    /// The node sampled its own free resources.
    ResourcesSampled {
        /// The sample.
        resources: Resources,
    },
    /// Graceful shutdown: an admin steps down and tells the cluster first.
    Shutdown,
    /// An operator asks for a membership change (`chorus members add|remove`). The admin
    /// proposes it; any other node forwards it to the admin it follows. Notices
    /// [`crate::Notice::MembershipChange`] carrying the same `request` say what became of it.
    ChangeMembers {
        /// The change.
        change: crate::MemberChange,
        /// The caller's id for this request, echoed in the notices about it (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// An operator asks the admin to hand its office over (`chorus members transfer [ID]`):
    /// to `to`, or to the best up-to-date voter (`transfer.rs`). Answered by
    /// [`crate::Notice::HandingOver`] or [`crate::Notice::HandoverRefused`] with the same
    /// `request`; a node that is not the admin refuses, naming the admin it follows.
    TransferAdmin {
        /// The voter asked for (none: the admin picks).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<NodeId>,
        /// The caller's id for this request (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// Operator recovery of a cluster that lost its quorum for good (`chorus recover
    /// --force-new-cluster`, on one stopped survivor): this node's electorate becomes itself
    /// alone, one version later and in a new term, so it elects itself and voters can be added
    /// back with membership changes. Unsafe if the other voters are not gone: they could still
    /// elect among themselves. Ignored unless [`crate::Core::check_force_new_electorate`] passes.
    ForceNewElectorate,
    /// A user submits a task here (`POST /tasks`); this node owns it until its result is in.
    /// [`crate::Notice::TaskSubmitted`] (or `TaskRefused`) with the same `request` answers.
    SubmitTask {
        /// What to run.
        spec: crate::SharedSpec,
        /// An idempotency key: a retried submit with the same key and spec names the same task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// Who submitted it: the id of the API token (none: a caller without one, as in the
        /// simulators). Bounds how many unfinished tasks one caller may leave here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        /// The caller's id for this request (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// A user cancels a task: one this node owns, or — its origin out of reach — another
    /// node's, which this node keeps asking to cancel (`task/ask.rs`).
    CancelTask {
        /// The task.
        task: crate::TaskId,
        /// The caller's id for this request (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// A sandbox started by [`crate::Command::StartSandbox`] ended.
    SandboxExited {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// What the sandbox reported.
        exit: crate::SandboxExit,
    },
    /// A sandbox could not be started or run to its end.
    SandboxFailed {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// The sandbox error's category and message.
        error: String,
        /// Whether another try (perhaps elsewhere) may succeed.
        retryable: bool,
    },
    /// The operator changed the protocol settings; the runtime logs this at start when the
    /// configured settings differ from the recovered ones, so the change is part of the fold.
    /// Invalid settings, or another cluster id, are ignored (a node never changes cluster).
    ConfigChanged {
        /// The new settings.
        config: Config,
    },
    /// The node's capabilities as it advertises them now; the runtime logs this at every start,
    /// so a capability added or dropped in the configuration (a repository, a voter's
    /// `admin_election`) reaches a core restored from its log, and replays. Ignored when equal
    /// to the current set, or beyond [`crate::MAX_CAPABILITIES`] names.
    CapabilitiesChanged {
        /// The capability names (order and duplicates do not matter).
        capabilities: Vec<String>,
    },
    /// This node's signature over `digest`, answering [`crate::Command::Sign`]. Ignored unless
    /// `digest` is the statement of the electorate the node holds now.
    Signed {
        /// What was signed.
        digest: crate::Digest,
        /// The signature.
        signature: crate::Signature,
    },
}

impl Event {
    /// `PeerUp`: `peer` connected, advertising `info`.
    pub fn peer_up(peer: NodeId, info: PeerInfo) -> Event {
        Event::PeerUp(Advert::new(peer, info))
    }
}

/// A peer's advertisement as the core receives and keeps it: who it is and what it said,
/// behind one pointer. Each node of a full-peering cluster of n keeps every other's, n² in all;
/// one value shared by all its receivers (as the simulator hands it) keeps a peer-table entry
/// at 16 bytes. Whether the peer is eligible is read from its capabilities once, here.
#[derive(Clone, PartialEq, Eq)]
pub struct Advert(Arc<AdvertBody>);

#[derive(Clone, PartialEq, Eq)]
struct AdvertBody {
    peer: NodeId,
    /// As advertised: the accessors bound it.
    info: PeerInfo,
    eligible: bool,
    /// When the receiver last heard `info`'s figures, if not when the connection came up (a
    /// whoami reply updates them): set only on a receiver's own copy, never by an event.
    heard_at_ms: Option<u64>,
}

impl Advert {
    /// `peer`'s advertisement `info`.
    pub fn new(peer: NodeId, info: PeerInfo) -> Advert {
        let eligible = bounded(&info.capabilities)
            .iter()
            .any(|c| c == crate::ADMIN_ELECTION);
        Advert(Arc::new(AdvertBody {
            peer,
            info,
            eligible,
            heard_at_ms: None,
        }))
    }

    /// Hands `to` the advertisement's body (nothing read), for a caller that wants it loaded
    /// ahead (see [`crate::Core::parts`]).
    pub fn parts(&self, to: &mut impl crate::Parts) {
        to.part(&*self.0);
    }

    /// Who advertised.
    pub fn peer(&self) -> &NodeId {
        &self.0.peer
    }

    /// What it advertised, unbounded, as it came.
    pub fn info(&self) -> &PeerInfo {
        &self.0.info
    }

    /// Whether it advertises `admin_election` (among its first [`crate::MAX_CAPABILITIES`]).
    pub fn eligible(&self) -> bool {
        self.0.eligible
    }

    /// Its capabilities, at most [`crate::MAX_CAPABILITIES`] of them.
    pub fn capabilities(&self) -> &[String] {
        bounded(&self.0.info.capabilities)
    }

    /// Its uptime as last heard, capped at [`crate::MAX_UPTIME_S`].
    pub fn uptime_s(&self) -> u64 {
        self.0.info.uptime_s.min(crate::MAX_UPTIME_S)
    }

    /// Its free resources as last heard.
    pub fn resources(&self) -> Resources {
        self.0.info.resources
    }

    /// When the receiver last heard the figures, if later than the connection.
    pub(crate) fn heard_at_ms(&self) -> Option<u64> {
        self.0.heard_at_ms
    }

    /// Newer figures, heard at `at_ms` (`None`: when the connection came up), eligibility
    /// kept (it comes from the advertisement a peer connected with, never from a reply). Makes
    /// the advertisement the receiver's own copy unless no one else holds it.
    pub(crate) fn heard(&mut self, uptime_s: u64, resources: Resources, at_ms: Option<u64>) {
        let body = Arc::make_mut(&mut self.0);
        body.info.uptime_s = uptime_s;
        body.info.resources = resources;
        body.heard_at_ms = at_ms;
    }

    /// The same figures, heard at `at_ms` (`None`: when the connection came up).
    pub(crate) fn set_heard_at(&mut self, at_ms: Option<u64>) {
        if self.0.heard_at_ms != at_ms {
            Arc::make_mut(&mut self.0).heard_at_ms = at_ms;
        }
    }
}

/// The first [`crate::MAX_CAPABILITIES`] of `caps`: all a peer's advertisement is read for.
fn bounded(caps: &[String]) -> &[String] {
    &caps[..caps.len().min(crate::MAX_CAPABILITIES)]
}

impl std::fmt::Debug for Advert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Advert")
            .field("peer", &self.0.peer)
            .field("info", &self.0.info)
            .finish()
    }
}

/// An advertisement as written: `{"peer": …, "info": …}`, what `Event::PeerUp` carried as its
/// fields before it carried an `Advert`.
#[derive(Serialize, Deserialize)]
struct AdvertFields<P, I> {
    peer: P,
    info: I,
}

impl Serialize for Advert {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        AdvertFields {
            peer: &self.0.peer,
            info: &self.0.info,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Advert {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = AdvertFields::<NodeId, PeerInfo>::deserialize(d)?;
        Ok(Advert::new(f.peer, f.info))
    }
}

/// What a peer advertises about itself when it connects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Capability names, e.g. `admin_election`, `docker`, `gpu`.
    pub capabilities: Arc<[String]>,
    /// Seconds since the peer started.
    pub uptime_s: u64,
    /// The peer's free resources.
    pub resources: Resources,
}

/// Free resources of a node, the resource part of the score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Free CPU in millicores.
    pub cpu_millicores: u32,
    /// Free memory in MiB.
    pub mem_free_mb: u32,
    /// Task slots this node offers (0: it runs no tasks). Not part of the score.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub task_slots: u32,
    /// What this node offers its tasks besides slots: memory and CPU (issue 33). Not part of
    /// the score; absent (all 0) in what an older node sends, and then only slots count.
    #[serde(default, skip_serializing_if = "crate::TaskCapacity::is_unset")]
    pub task_capacity: crate::TaskCapacity,
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node without task slots sends the resources an older node knows (no `task_slots`), and
    /// one with slots sends them: a worker's slots must reach the admin through the wire.
    #[test]
    fn resources_carry_task_slots_only_when_there_are_some() {
        let none = Resources {
            cpu_millicores: 1_000,
            mem_free_mb: 512,
            task_slots: 0,
            task_capacity: Default::default(),
        };
        let text = serde_json::to_string(&none).unwrap();
        assert_eq!(text, r#"{"cpu_millicores":1000,"mem_free_mb":512}"#);
        let some = Resources {
            task_slots: 3,
            ..none
        };
        let text = serde_json::to_string(&some).unwrap();
        assert_eq!(
            text,
            r#"{"cpu_millicores":1000,"mem_free_mb":512,"task_slots":3}"#
        );
        assert_eq!(serde_json::from_str::<Resources>(&text).unwrap(), some);
    }

    /// `PeerUp` is written with the fields it had before it carried a shared advertisement,
    /// so event logs and traces read the same; reading it back gives an equal event.
    #[test]
    fn a_peer_up_is_written_as_its_peer_and_info() {
        let info = PeerInfo {
            capabilities: vec!["admin_election".to_string()].into(),
            uptime_s: 5,
            resources: Resources::default(),
        };
        let up = Event::peer_up(NodeId::from("b"), info);
        let text = serde_json::to_string(&up).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"peer_up","peer":"b","info":{"capabilities":["admin_election"],"uptime_s":5,"resources":{"cpu_millicores":0,"mem_free_mb":0}}}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), up);
        let Event::PeerUp(advert) = &up else {
            unreachable!()
        };
        assert!(advert.eligible() && advert.peer().as_str() == "b");
    }

    /// Out-of-bound figures stay in the event as they came (a replay shows what the peer said)
    /// and are bounded where the core reads them; `admin_election` past the first
    /// `MAX_CAPABILITIES` names does not make a peer eligible.
    #[test]
    fn an_advert_bounds_what_it_is_read_for() {
        let mut caps: Vec<String> = (0..crate::MAX_CAPABILITIES)
            .map(|i| format!("c{i}"))
            .collect();
        caps.push(crate::ADMIN_ELECTION.into());
        let info = PeerInfo {
            capabilities: caps.into(),
            uptime_s: u64::MAX,
            resources: Resources::default(),
        };
        let advert = Advert::new(NodeId::from("x"), info.clone());
        assert_eq!(advert.info(), &info);
        assert_eq!(advert.uptime_s(), crate::MAX_UPTIME_S);
        assert_eq!(advert.capabilities().len(), crate::MAX_CAPABILITIES);
        assert!(!advert.eligible());
    }
}
