//! The node state machine: its state, the `step` entry point, and the transitions shared by the
//! protocol modules (`discovery`, `election`, `heartbeat`).

use std::collections::BTreeMap;
use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::heartbeat::VoterAck;
use crate::membership::PendingChange;
use crate::timer::ElectionPhase;
use crate::{
    rng, score, Command, Config, ConfigError, Electorate, Event, NodeId, Notice, Resources, Role,
    StepDownReason, Timer, TimerTable, ADMIN_ELECTION,
};

/// An election round in progress (pre-vote or vote).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Round {
    /// The term stood for (current + 1 in pre-vote; current in vote).
    pub(crate) term: u64,
    /// Pre-vote (no state changed at voters) or real vote.
    pub(crate) pre_vote: bool,
    /// Voters that said yes (this node included).
    pub(crate) granted: Vec<NodeId>,
    /// The promise each granting voter made (vote rounds only).
    #[serde(default)]
    pub(crate) promises: BTreeMap<NodeId, u64>,
    /// When the round's requests left; a won vote's lease is measured from here.
    pub(crate) started_at_ms: u64,
}

/// A heartbeat sent in this term, kept so an acknowledgement can be dated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BeatRound {
    pub(crate) beat: u64,
    pub(crate) sent_at_ms: u64,
    /// The electorate (version, proposing term) the heartbeat named: an acknowledgement that
    /// says it holds it holds this one.
    #[serde(default)]
    pub(crate) names: (u64, u64),
}

/// State only an admin has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AdminState {
    pub(crate) lease_until_ms: u64,
    /// When the newest heartbeat (or the winning vote round) that a majority acknowledged was
    /// sent: the base of check-quorum.
    pub(crate) quorum_at_ms: u64,
    /// The first beat sent in this term: acknowledgements of earlier beats were never asked for.
    pub(crate) first_beat: u64,
    /// The most recent heartbeats, oldest first, bounded by `MAX_BEAT_ROUNDS`.
    pub(crate) beats: Vec<BeatRound>,
    /// Each voter's newest promise (this admin's own included), so duplicates never count twice.
    #[serde(default)]
    pub(crate) voters: BTreeMap<NodeId, VoterAck>,
    /// A majority acknowledged a heartbeat of this term: the electorate this admin was elected
    /// with is the cluster's, and a membership change may be proposed.
    #[serde(default)]
    pub(crate) established: bool,
    /// The membership change being committed, if any.
    #[serde(default)]
    pub(crate) change: Option<PendingChange>,
    /// When this node won: autopilot dates voters it has not heard from in this term from here.
    #[serde(default)]
    pub(crate) elected_at_ms: u64,
    /// The task queue and load table (`task/place.rs`).
    #[serde(default)]
    pub(crate) tasks: crate::task::AdminTasks,
    /// Standbys (eligible non-voters following this admin): when each first and last
    /// acknowledged a heartbeat of this term. Autopilot promotes only these.
    #[serde(default)]
    pub(crate) standbys: BTreeMap<NodeId, (u64, u64)>,
}

/// Heartbeats older than this many rounds no longer collect acknowledgements.
pub(crate) const MAX_BEAT_ROUNDS: usize = 8;

/// Told where the parts of a node lie ([`Core::parts`], [`Core::parts_behind`]): a caller that
/// steps many nodes prefetches them. Nothing the core decides depends on it.
pub trait Parts {
    /// `part` lies here.
    fn part<T>(&mut self, part: &T);
}

/// The pure CHORUS state machine of one node.
///
/// # Contract
///
/// * Feed every input through [`Core::step`] with the node's monotonic clock in milliseconds.
///   Time never moves backwards, across restarts included: after a restart the caller continues
///   from at least the last `now` it logged. The core never reads a clock or the OS.
/// * The first event of a process is [`Event::Started`]; other events before it are ignored.
/// * Persist each event (with its `now`) durably *before* carrying out the commands of its step;
///   the state is a fold of the logged events, and [`Core`] serializes whole (RNG included) as a
///   snapshot, so snapshot + tail reproduces the same state and the same future commands.
/// * Commands are data: `Send`/`Broadcast` go to the transport, `SetTimer`/`CancelTimer` to a
///   timer table keyed by [`Timer`] (a later `SetTimer` replaces the earlier deadline), and
///   `RoleChanged`/`Notice` to observers. [`Core::next_deadline`] says when the core next needs
///   a `TimerFired`, for callers that drive time themselves.
///
/// Getters are plain methods (`role`, `term`, …); everything that changes state goes through
/// `step`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    // Identity and configuration.
    pub(crate) id: NodeId,
    pub(crate) config: Config,
    pub(crate) capabilities: Arc<[String]>,
    pub(crate) rng: ChaCha8Rng,

    // Durable: survives restarts (it is re-derived from the event log).
    pub(crate) term: u64,
    pub(crate) voted_for: Option<NodeId>,
    pub(crate) electorate: Option<Arc<Electorate>>,
    /// The last term in which this node held `electorate` as that term's admin's: its admin
    /// (itself, or the one whose heartbeat it took) confirmed it. Voters order candidates by
    /// (stamp, version), as Raft orders logs by (last term, last index) (`membership.rs`).
    #[serde(default)]
    pub(crate) stamp: u64,
    pub(crate) beat: u64,
    pub(crate) ever_started: bool,
    /// Bootstrap promises and acceptances (`bootstrap.rs`).
    #[serde(default)]
    pub(crate) acceptor: crate::bootstrap::Acceptor,
    /// Tasks this node owns and runs (`task/`).
    #[serde(default)]
    pub(crate) tasks: crate::task::NodeTasks,
    /// The certified chain of electorates this node vouches for (`certificate.rs`).
    #[serde(default)]
    pub(crate) chain: crate::certificate::Chain,

    // Volatile: reset by a restart.
    pub(crate) running: bool,
    pub(crate) now_ms: u64,
    pub(crate) started_at_ms: u64,
    pub(crate) resources: Resources,
    pub(crate) role: Role,
    pub(crate) admin: Option<NodeId>,
    /// Until then this node grants no (pre-)vote to anyone but `promised_to`: it heard from an
    /// admin, voted, or restarted. Admin leases are built on these promises.
    pub(crate) promise_until_ms: u64,
    pub(crate) promised_to: Option<NodeId>,
    pub(crate) peers: crate::PeerTable,
    /// Discovery: reports of (admin, term) by replier, and WHOAMIs sent this round.
    pub(crate) reports: BTreeMap<NodeId, (NodeId, u64)>,
    pub(crate) whoami_sent: u32,
    /// Peers asked WHOAMI and not yet answered: a reply from anyone else is refused.
    #[serde(default)]
    pub(crate) whoami_pending: crate::idset::IdSet,
    /// Electorates reported by asked peers while this node has none, adopted once enough agree.
    #[serde(default)]
    pub(crate) electorate_reports: BTreeMap<NodeId, Arc<Electorate>>,
    /// Change requests this node forwarded and the admin has not answered, by request id, with
    /// the admin asked: a `change_result` for anything else is refused. At most
    /// [`crate::membership::MAX_FORWARDED`], the oldest dropped first.
    #[serde(default)]
    pub(crate) forwarded: BTreeMap<u64, NodeId>,
    pub(crate) round: Option<Round>,
    /// The bootstrap proposal this node runs, if any.
    #[serde(default)]
    pub(crate) proposal: Option<crate::bootstrap::Proposal>,
    /// Boxed: one node in a cluster is admin, and inline it was a quarter of every node.
    pub(crate) admin_state: Option<Box<AdminState>>,
    /// Handovers heard in this term (`transfer.rs`): boxed, absent nearly always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) handover: Option<Box<crate::transfer::Handover>>,
    pub(crate) election_phase: ElectionPhase,
    pub(crate) timers: TimerTable,
}

impl Core {
    /// A node that has never run. `cluster_seed` and the id seed its RNG.
    pub fn new(
        id: NodeId,
        config: Config,
        capabilities: Vec<String>,
        cluster_seed: u64,
    ) -> Result<Core, ConfigError> {
        config.validate()?;
        let capabilities = sorted_capabilities(capabilities);
        Ok(Core {
            rng: rng::node_rng(cluster_seed, &id),
            id,
            config,
            capabilities: capabilities.into(),
            term: 0,
            voted_for: None,
            electorate: None,
            stamp: 0,
            beat: 0,
            ever_started: false,
            acceptor: Default::default(),
            tasks: Default::default(),
            chain: Default::default(),
            proposal: None,
            running: false,
            now_ms: 0,
            started_at_ms: 0,
            resources: Resources::default(),
            role: Role::Follower,
            admin: None,
            promise_until_ms: 0,
            promised_to: None,
            peers: Default::default(),
            reports: BTreeMap::new(),
            whoami_sent: 0,
            whoami_pending: Default::default(),
            electorate_reports: BTreeMap::new(),
            forwarded: BTreeMap::new(),
            round: None,
            admin_state: None,
            handover: None,
            election_phase: ElectionPhase::Suspect,
            timers: TimerTable::default(),
        })
    }

    /// Hands `to` every part of the node (where it lies; nothing is read), for a caller stepping
    /// many nodes that wants them loaded before their turn: a simulator of 100,000 nodes paid a
    /// cache miss on nearly every part of each node it stepped. Every field is named, so the
    /// layout the compiler picks does not matter.
    pub fn parts(&self, to: &mut impl crate::Parts) {
        // Destructured whole: a field added to `Core` and not named here does not compile.
        let Core {
            id,
            config,
            capabilities,
            rng,
            term,
            voted_for,
            electorate,
            stamp,
            beat,
            ever_started,
            acceptor,
            tasks,
            chain,
            running,
            now_ms,
            started_at_ms,
            resources,
            role,
            admin,
            promise_until_ms,
            promised_to,
            peers,
            reports,
            whoami_sent,
            whoami_pending,
            electorate_reports,
            forwarded,
            round,
            proposal,
            admin_state,
            handover,
            election_phase,
            timers,
        } = self;
        to.part(id);
        to.part(config);
        to.part(capabilities);
        to.part(rng);
        to.part(term);
        to.part(voted_for);
        to.part(electorate);
        to.part(stamp);
        to.part(beat);
        to.part(ever_started);
        to.part(acceptor);
        to.part(tasks);
        to.part(chain);
        to.part(running);
        to.part(now_ms);
        to.part(started_at_ms);
        to.part(resources);
        to.part(role);
        to.part(admin);
        to.part(promise_until_ms);
        to.part(promised_to);
        to.part(peers);
        to.part(reports);
        to.part(whoami_sent);
        to.part(whoami_pending);
        to.part(electorate_reports);
        to.part(forwarded);
        to.part(round);
        to.part(proposal);
        to.part(admin_state);
        to.part(handover);
        to.part(election_phase);
        to.part(timers);
    }

    /// Hands `to` what the node's parts point to that a step hearing from `peer` reads first
    /// (where its peer table keeps `peer`), reading the node's own lines: for after
    /// [`Core::parts`] had them loaded.
    pub fn parts_behind(&self, peer: &NodeId, to: &mut impl crate::Parts) {
        self.peers.parts_for(peer, to);
    }

    /// Handles one event at `now_ms`, appending the resulting commands to `out`.
    pub fn step(&mut self, now_ms: u64, event: Event, out: &mut Vec<Command>) {
        assert!(
            now_ms >= self.now_ms,
            "time moved backwards: {now_ms} < {}",
            self.now_ms
        );
        self.now_ms = now_ms;
        let term_before = self.term;
        let vote_before = self.voted_for.clone();
        match event {
            Event::Started => self.on_started(out),
            Event::Signed { digest, signature } => self.on_signed(digest, signature, out),
            // Applied to a stopped node's log by `chorus recover`, so it acts while not running.
            Event::ForceNewElectorate => self.force_new_electorate(out),
            _ if !self.running => {}
            Event::TimerFired { timer } => {
                if self.timers.fire(timer, now_ms) {
                    self.on_timer(timer, out);
                }
            }
            Event::Message { from, msg } => {
                if from != self.id {
                    self.on_message(from, msg, out);
                }
            }
            Event::PeerUp(advert) => self.on_peer_up(advert, out),
            Event::PeerDown { peer } => {
                self.admin_peer_down(&peer, out);
                self.peers.remove(&peer);
                self.whoami_pending.remove(&peer);
                self.electorate_reports.remove(&peer);
            }
            Event::ResourcesSampled { resources } => {
                // The admin places by slots, memory and CPU: tell it when they change.
                if resources.task_slots != self.resources.task_slots
                    || resources.task_capacity != self.resources.task_capacity
                {
                    self.tasks.work.report_due = true;
                }
                self.resources = resources;
            }
            Event::ChangeMembers { change, request } => {
                self.on_change_members(change, request, crate::membership::Origin::Operator, out);
            }
            Event::TransferAdmin { to, request } => self.on_transfer_admin(to, request, out),
            Event::SubmitTask {
                spec,
                key,
                owner,
                request,
            } => self.on_submit_task(spec, key, owner, request, out),
            // Another node's task: kept and passed on (`task/ask.rs`).
            Event::CancelTask { task, request } if task.origin != self.id => {
                self.on_cancel_foreign(task, request, out)
            }
            Event::CancelTask { task, request } => self.on_cancel_task(task, request, out),
            Event::SandboxExited {
                task,
                attempt,
                exit,
            } => self.on_sandbox_exited(task, attempt, exit, out),
            Event::SandboxFailed {
                task,
                attempt,
                error,
                retryable,
            } => self.on_sandbox_failed(task, attempt, error, retryable, out),
            Event::Shutdown => self.on_shutdown(out),
            Event::CapabilitiesChanged { capabilities } => {
                self.on_capabilities_changed(capabilities)
            }
            Event::ConfigChanged { config } => {
                // The node validated it before logging it; a bad one in an old log is skipped.
                if config.validate().is_ok() && config.cluster_id == self.config.cluster_id {
                    self.config = config;
                }
            }
        }
        if self.running {
            self.tasks_after_step(out);
        }
        // Postconditions: a term never decreases, and a vote never changes within a term.
        assert!(self.term >= term_before, "term decreased");
        if self.term == term_before && vote_before.is_some() {
            assert_eq!(
                self.voted_for, vote_before,
                "second vote in term {}",
                self.term
            );
        }
    }

    /// Convenience for tests and tools: `step` into a fresh vector, answering each
    /// [`Command::Sign`] at once with the simulator's signature (see [`Core::step_signing`]).
    pub fn step_vec(&mut self, now_ms: u64, event: Event) -> Vec<Command> {
        let mut out = Vec::new();
        self.step_signing(now_ms, event, &mut out, |id, d| {
            crate::certificate::simulated_signature(id, d)
        });
        out
    }

    /// Steps `event`, then answers every [`Command::Sign`] it gave (and any the answers give)
    /// with [`Event::Signed`] at once, signing with `sign(own id, digest)`: what a runtime does
    /// when it holds the key. The `Sign` commands stay in `out`; returns the `Signed` events
    /// stepped, in order, for a runtime that logs its inputs.
    pub fn step_signing(
        &mut self,
        now_ms: u64,
        event: Event,
        out: &mut Vec<Command>,
        mut sign: impl FnMut(&NodeId, &crate::Digest) -> crate::Signature,
    ) -> Vec<Event> {
        let mut from = out.len();
        self.step(now_ms, event, out);
        let mut signed = Vec::new();
        while let Some(i) = out[from..]
            .iter()
            .position(|c| matches!(c, Command::Sign { .. }))
        {
            let i = from + i;
            from = i + 1;
            let Command::Sign { digest } = &out[i] else {
                unreachable!("matched above")
            };
            let event = Event::Signed {
                digest: *digest,
                signature: sign(&self.id, digest),
            };
            signed.push(event.clone());
            self.step(now_ms, event, out);
        }
        signed
    }

    fn on_capabilities_changed(&mut self, capabilities: Vec<String>) {
        let capabilities = sorted_capabilities(capabilities);
        // The node checked them against its config; an old log's oversized set is skipped.
        if capabilities.len() > crate::MAX_CAPABILITIES || *capabilities == *self.capabilities {
            return;
        }
        self.capabilities = capabilities.into();
        // The admin places by what workers advertise; tell it soon what changed here.
        self.tasks.work.report_due = true;
    }

    fn on_started(&mut self, out: &mut Vec<Command>) {
        let restart = self.ever_started;
        self.ever_started = true;
        self.running = true;
        self.started_at_ms = self.now_ms;
        self.role = Role::Follower;
        self.admin = None;
        self.peers.clear();
        self.whoami_pending.clear();
        self.electorate_reports.clear();
        self.forwarded.clear();
        self.round = None;
        self.proposal = None;
        self.admin_state = None;
        self.handover = None;
        self.timers.clear();
        self.election_phase = ElectionPhase::Suspect;
        if restart {
            // Grant nothing for a full minimum election timeout, and never less than a promise
            // made before the crash (the replayed log restores it, with the settings of then).
            self.promise_until_ms = self
                .promise_until_ms
                .max(self.now_ms + self.config.election_timeout_min_ms);
            self.promised_to = None;
        }
        self.tasks.submit.offered_view = None;
        self.tasks.asks.sent_view = None;
        self.submitter_restarted(out);
        if self.chain.anchor.is_none() {
            self.chain.anchor = self.electorate.clone(); // a state from before certificates
        }
        self.chain.asked = None;
        self.chain.walk = None;
        self.chain.anchor_link_asked = false;
        self.endorse_electorate(out);
        self.worker_restarted(out);
        self.begin_discovery(out);
        self.maybe_bootstrap(out);
    }

    fn on_timer(&mut self, timer: Timer, out: &mut Vec<Command>) {
        match timer {
            Timer::Discovery => self.on_discovery_timeout(out),
            Timer::Election => self.on_election_timeout(out),
            Timer::Heartbeat => self.on_heartbeat_timer(out),
            Timer::Lease => self.on_lease_timer(out),
            Timer::Bootstrap => self.on_bootstrap_timer(out),
            Timer::Tasks => self.on_tasks_tick(out),
        }
    }

    fn on_message(&mut self, from: NodeId, msg: crate::Message, out: &mut Vec<Command>) {
        use crate::Message as M;
        if let Err(reason) = self.admit(&from, &msg) {
            // A heartbeat of a newer certified electorate from outside this node's: perhaps a
            // voter that missed every change; the links check themselves (`catchup.rs`).
            if let M::Heartbeat {
                genesis, certified, ..
            } = &msg
            {
                let newer = *certified > self.certified() && !self.is_foreign(*genesis);
                if reason == crate::Refusal::NotMember && newer && self.electorate.is_some() {
                    self.ask_chain(from.clone(), false, out);
                }
            }
            self.refuse(from, msg.kind(), reason, out);
            return;
        }
        match msg {
            M::Whoami {
                electorate_version,
                electorate_term,
                electorate_stamp,
            } => self.on_whoami(
                from,
                (electorate_version, electorate_term, electorate_stamp),
                out,
            ),
            M::WhoamiReply {
                admin,
                term,
                membership_version: _,
                beat,
                eligible: _,
                uptime_s,
                resources,
                electorate,
                genesis,
                electorate_stamp,
            } => {
                let report = crate::discovery::Report {
                    genesis,
                    admin,
                    term,
                    beat,
                    uptime_s,
                    resources,
                    stamp: electorate_stamp,
                };
                self.on_whoami_reply(from, report, electorate, out)
            }
            M::PreVoteRequest {
                term,
                electorate_version,
                electorate_term,
                electorate_hash,
                electorate_stamp,
            } => {
                let key = (
                    electorate_stamp,
                    electorate_version,
                    electorate_term,
                    electorate_hash,
                );
                self.on_pre_vote_request(from, term, key, out)
            }
            M::PreVoteReply { term, granted } => self.on_pre_vote_reply(from, term, granted, out),
            M::VoteRequest {
                term,
                electorate_version,
                electorate_term,
                electorate_hash,
                electorate_stamp,
                transfer,
            } => {
                let key = (
                    electorate_stamp,
                    electorate_version,
                    electorate_term,
                    electorate_hash,
                );
                self.on_vote_request(from, term, key, transfer, out)
            }
            M::VoteReply {
                term,
                granted,
                promise_ms,
            } => self.on_vote_reply(from, term, granted, promise_ms, out),
            M::Heartbeat {
                term,
                beat,
                membership_version,
                membership_term,
                genesis,
                electorate,
                certified,
            } => {
                let beat_in = crate::heartbeat::BeatIn {
                    term,
                    beat,
                    membership: (membership_version, membership_term),
                    genesis,
                    electorate,
                    certified,
                };
                self.on_heartbeat(from, beat_in, out)
            }
            M::HeartbeatAck {
                term,
                beat,
                promise_ms,
                holds,
                endorsement,
                certified,
            } => {
                let ack = crate::heartbeat::AckIn {
                    term,
                    beat,
                    promise_ms,
                    holds,
                    endorsement,
                    certified,
                };
                self.on_heartbeat_ack(from, ack, out)
            }
            M::ChainRequest { after } => self.on_chain_request(from, after, out),
            M::Chain { links } => self.on_chain(from, links, out),
            M::StepDown { term, successor } => self.on_step_down(from, term, successor, out),
            M::TimeoutNow { term } => self.on_timeout_now(from, term, out),
            M::BootstrapPrepare { ballot, expect } => {
                self.on_bootstrap_prepare(from, ballot, expect, out)
            }
            M::BootstrapPromise { ballot, accepted } => {
                self.on_bootstrap_promise(from, ballot, accepted, out)
            }
            M::BootstrapAccept { ballot, electorate } => {
                self.on_bootstrap_accept(from, ballot, electorate, out)
            }
            M::BootstrapAccepted { ballot } => self.on_bootstrap_accepted(from, ballot, out),
            M::BootstrapRefused {
                ballot,
                promised,
                formed,
            } => self.on_bootstrap_refused(from, ballot, promised, formed, out),
            M::BootstrapChosen { electorate } => self.on_bootstrap_chosen(from, electorate, out),
            M::ChangeRequest { request, change } => {
                self.on_change_request(from, request, change, out)
            }
            M::ChangeResult {
                request,
                change,
                outcome,
            } => self.on_change_result(from, request, change, outcome, out),
            msg @ (M::TaskOffer { .. }
            | M::TaskState { .. }
            | M::TaskPlace { .. }
            | M::TaskCancel { .. }
            | M::WorkerReport { .. }
            | M::TaskResult { .. }
            | M::TaskResultAck { .. }
            | M::TaskCancelAsk { .. }
            | M::TaskCancelAsked { .. }) => self.on_task_message(from, msg, out),
        }
    }

    fn on_peer_up(&mut self, advert: crate::Advert, out: &mut Vec<Command>) {
        if *advert.peer() == self.id {
            return;
        }
        // Decided before bootstrap (which changes neither) so the id is cloned only for the few
        // peers asked: a clone is an atomic increment, a full fence that kept a cold start's
        // cache misses from overlapping.
        let ask = self.admin.is_none() && self.whoami_sent < self.config.discovery_fanout;
        let asked = ask.then(|| advert.peer().clone());
        let admin_up = self.admin.as_ref() == Some(advert.peer());
        self.peers.connect(advert, self.now_ms);
        if admin_up {
            self.worker_admin_connected();
        }
        self.maybe_bootstrap(out);
        if let Some(peer) = asked {
            self.send_whoami(peer, out);
        }
    }

    fn on_shutdown(&mut self, out: &mut Vec<Command>) {
        if self.role == Role::Admin {
            // Give the lease up before telling anyone, so an immediate election is safe, and
            // hand the office to the best up-to-date voter (`transfer.rs`).
            let target = self.handover_target(None).ok();
            self.hand_over(StepDownReason::Shutdown, target, 0, out);
        }
        for t in Timer::ALL {
            self.timers.cancel(t, out);
        }
        self.running = false;
    }

    // ---- Transitions shared by the protocol modules -------------------------------------------

    /// Adopts a higher term seen in any message: clears the vote and falls back to follower.
    /// Returns whether the term moved.
    pub(crate) fn observe_term(&mut self, term: u64, out: &mut Vec<Command>) -> bool {
        if term <= self.term {
            return false;
        }
        if self.role == Role::Admin {
            self.step_down(StepDownReason::HigherTerm, out);
        }
        self.term = term;
        self.voted_for = None;
        self.admin = None;
        self.become_follower(out);
        true
    }

    /// Leaves any candidacy for plain following (no-op for a follower).
    pub(crate) fn become_follower(&mut self, out: &mut Vec<Command>) {
        self.round = None;
        if self.role != Role::Follower {
            self.role = Role::Follower;
            out.push(Command::RoleChanged {
                role: Role::Follower,
                term: self.term,
                lease_until_ms: None,
            });
        }
    }

    /// Admin → follower: duties end, the cluster will elect anew.
    pub(crate) fn step_down(&mut self, reason: StepDownReason, out: &mut Vec<Command>) {
        debug_assert_eq!(self.role, Role::Admin);
        self.admin_state = None;
        if self.admin.as_ref() == Some(&self.id) {
            self.admin = None;
        }
        self.timers.cancel(Timer::Heartbeat, out);
        self.timers.cancel(Timer::Lease, out);
        out.push(Command::Notice(Notice::SteppedDown {
            term: self.term,
            reason,
        }));
        self.become_follower(out);
        self.arm_suspect(self.now_ms + self.config.election_timeout_min_ms, out);
    }

    /// Records a newly known admin, announcing it once per (admin, term).
    pub(crate) fn set_admin(&mut self, admin: NodeId, out: &mut Vec<Command>) {
        if self.admin.as_ref() != Some(&admin) {
            out.push(Command::Notice(Notice::AdminKnown {
                admin: admin.clone(),
                term: self.term,
            }));
            self.admin = Some(admin);
        }
        self.reports.clear();
        self.timers.cancel(Timer::Discovery, out);
    }

    /// Whether this node may stand: eligible, part of a fixed electorate, running, and below the
    /// top of the term and beat ranges (so `term + 1` and the admin's next beat stay in range).
    pub(crate) fn can_stand(&self) -> bool {
        self.running
            && self.term < crate::MAX_WIRE_INT
            && self.beat < crate::MAX_WIRE_INT
            && self.is_eligible()
            && self
                .electorate
                .as_ref()
                .is_some_and(|e| e.contains(&self.id))
    }

    /// Whether this node advertises `admin_election`.
    pub(crate) fn is_eligible(&self) -> bool {
        self.capabilities.iter().any(|c| c == ADMIN_ELECTION)
    }

    /// Seconds since this node (re)started.
    pub fn uptime_s(&self) -> u64 {
        (self.now_ms - self.started_at_ms) / 1_000
    }

    /// This node's current score.
    pub fn score(&self) -> u32 {
        score::score(self.uptime_s(), self.capabilities.len(), self.resources)
    }

    // ---- Getters ---------------------------------------------------------------------------------

    /// This node's id.
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    /// The capabilities this node advertises (sorted, no duplicates).
    pub fn capabilities(&self) -> &[String] {
        &self.capabilities
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Current role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Current term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The vote cast in the current term.
    pub fn voted_for(&self) -> Option<&NodeId> {
        self.voted_for.as_ref()
    }

    /// The admin this node knows for the current term.
    pub fn admin(&self) -> Option<&NodeId> {
        self.admin.as_ref()
    }

    /// The lease end while admin.
    pub fn lease_until_ms(&self) -> Option<u64> {
        self.admin_state.as_ref().map(|a| a.lease_until_ms)
    }

    /// Whether admin duties may run at `now_ms`: admin with an unexpired lease.
    pub fn holds_lease(&self, now_ms: u64) -> bool {
        self.role == Role::Admin && self.lease_until_ms().is_some_and(|l| now_ms < l)
    }

    /// The bootstrap proposal this node accepted last, with its ballot (the acceptor's durable
    /// state: model checkers count acceptances from it).
    pub fn bootstrap_accepted(&self) -> Option<(&crate::Ballot, &Electorate)> {
        self.acceptor.accepted.as_ref().map(|(b, e)| (b, &**e))
    }

    /// The highest bootstrap ballot this node promised (the acceptor's durable state: model
    /// checkers check that it never goes down, restarts included, and never lags an acceptance).
    pub fn bootstrap_promised(&self) -> Option<&crate::Ballot> {
        self.acceptor.promised.as_ref()
    }

    /// The highest beat seen.
    pub fn beat(&self) -> u64 {
        self.beat
    }

    /// Makes `e` this node's electorate and says so (every way an electorate changes: bootstrap,
    /// adoption, a change proposed or followed, operator recovery).
    ///
    /// A round in progress ends: its requests named the old electorate, and the grants it
    /// gathered were counted against it. (A node once counted its own vote toward a new
    /// electorate that had removed it, and won.)
    pub(crate) fn set_electorate(&mut self, e: Arc<Electorate>, out: &mut Vec<Command>) {
        out.push(Command::Notice(Notice::ElectorateChanged {
            version: e.version,
            term: e.term,
            members: e.shared_members(),
        }));
        if self.chain.anchor.is_none() {
            // The first electorate (agreed at bootstrap, or confirmed by discovery) is taken
            // on its own evidence; every later one is vouched for by a link.
            self.chain.anchor = Some(e.clone());
        }
        self.electorate = Some(e);
        self.endorse_electorate(out);
        if self.round.is_some() {
            self.become_follower(out);
            self.arm_suspect(self.now_ms + self.config.election_timeout_min_ms, out);
        }
    }

    /// (stamp, version, proposing term, fingerprint): how vote requests name the electorate,
    /// and how voters order them (the first two decide; see `membership.rs`).
    pub(crate) fn vote_key(&self) -> (u64, u64, u64, u64) {
        self.electorate.as_ref().map_or((0, 0, 0, 0), |e| {
            (self.stamp, e.version, e.term, e.fingerprint())
        })
    }

    /// (stamp, version): the node's position, by which voters order electorates
    /// (`membership.rs`); (stamp, 0) before it holds one.
    pub(crate) fn position(&self) -> (u64, u64) {
        (
            self.stamp,
            self.electorate.as_ref().map_or(0, |e| e.version),
        )
    }

    /// The stamp: the last term whose admin confirmed this node's electorate.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// (version, proposing term) of the electorate; (0, 0) before it is fixed.
    pub(crate) fn electorate_version_key(&self) -> (u64, u64) {
        self.electorate.as_ref().map_or((0, 0), |e| e.key())
    }

    /// The electorate, once fixed.
    pub fn electorate(&self) -> Option<&Electorate> {
        self.electorate.as_deref()
    }

    /// The newest electorate version this node holds a chain of links up to (its anchor's):
    /// what its heartbeats and acknowledgements say (`catchup.rs`).
    pub fn certified_version(&self) -> u64 {
        self.certified()
    }

    /// Live peers.
    pub fn peers(&self) -> &crate::PeerTable {
        &self.peers
    }

    /// The time of the last event.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The earliest armed timer: when the core next needs a `TimerFired`.
    pub fn next_deadline(&self) -> Option<(u64, Timer)> {
        self.timers.next()
    }

    /// Serializes the whole state (RNG included) as a snapshot.
    pub fn snapshot(&self) -> Vec<u8> {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_vec(self).expect("core state serializes")
    }

    /// Restores a state from [`Core::snapshot`] output.
    pub fn restore(bytes: &[u8]) -> Result<Core, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// Capabilities as the core keeps them: sorted, without duplicates.
fn sorted_capabilities(mut capabilities: Vec<String>) -> Vec<String> {
    capabilities.sort();
    capabilities.dedup();
    capabilities
}
