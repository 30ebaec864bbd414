//! What this node saw, for the console's election timeline (`GET /status/history`): its own
//! role and term, the admin it knew, whether it held a lease, and which peers were connected —
//! each change stamped with the node's clock, in a bounded ring: the last [`MAX_CHANGES`]
//! changes, none older than [`WINDOW_MS`] behind the newest. What falls out of the ring is
//! folded into the state at the ring's start, so a reader gets that state and then every kept
//! change in order: a page opened after a failover draws the earlier admin at once.
//!
//! Fed by the observer after each step (see [`Timeline::observe`]), so it sees what `/status`
//! shows. In memory only: a restarted node starts a new history, under a new `epoch`.

use std::collections::{BTreeSet, VecDeque};

use chorus_core::{Core, Event, Role};
use serde::Serialize;

use super::metrics::role_name;

/// Most changes kept.
pub const MAX_CHANGES: usize = 4_096;
/// How far back changes are kept (what the console draws).
pub const WINDOW_MS: u64 = 10 * 60 * 1_000;
/// Most peers the state names: a peer beyond them is not recorded (a page draws 40 rows).
pub const MAX_PEERS: usize = 1_024;

/// The state at one time, as this node saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Seen {
    /// This node's role, as `/status` names it.
    pub role: &'static str,
    pub term: u64,
    /// The admin this node knew, and the term it knew it in (0 without one).
    pub admin: Option<String>,
    pub admin_term: u64,
    /// This node was the admin and held its lease.
    pub leased: bool,
    /// The peers connected to this node, by id.
    pub peers: BTreeSet<String>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            role: role_name(Role::Follower),
            term: 0,
            admin: None,
            admin_term: 0,
            leased: false,
            peers: BTreeSet::new(),
        }
    }
}

/// One change of [`Seen`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    Role { role: &'static str, term: u64 },
    Admin { admin: Option<String>, term: u64 },
    Lease { held: bool },
    Peer { node: String, up: bool },
}

impl Seen {
    /// Whether `change` would change this state.
    fn differs(&self, change: &Change) -> bool {
        match change {
            Change::Role { role, term } => (*role, *term) != (self.role, self.term),
            Change::Admin { admin, term } => (admin, *term) != (&self.admin, self.admin_term),
            Change::Lease { held } => *held != self.leased,
            Change::Peer { node, up } => {
                *up != self.peers.contains(node) && (!*up || self.peers.len() < MAX_PEERS)
            }
        }
    }

    fn apply(&mut self, change: &Change) {
        match change {
            Change::Role { role, term } => (self.role, self.term) = (*role, *term),
            Change::Admin { admin, term } => (self.admin, self.admin_term) = (admin.clone(), *term),
            Change::Lease { held } => self.leased = *held,
            Change::Peer { node, up: true } => {
                self.peers.insert(node.clone());
            }
            Change::Peer { node, up: false } => {
                self.peers.remove(node);
            }
        }
    }
}

/// A kept change: its number (from 1, in order) and the node's clock when it was seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Entry {
    pub seq: u64,
    pub t_ms: u64,
    #[serde(flatten)]
    pub change: Change,
}

/// The ring. See the module's comment.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Tells one run's history from the next one's (unix ms when it began; 0 before).
    epoch: u64,
    /// The state just before the first kept change, and since when it held.
    start: Seen,
    start_ms: u64,
    /// The state after the last change.
    now: Seen,
    entries: VecDeque<Entry>,
    /// The last change's number (0: none yet).
    last_seq: u64,
}

/// What a reader asks for: everything, or the changes after `after` of history `epoch`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Since {
    pub epoch: Option<u64>,
    pub after: Option<u64>,
}

/// The answer of `GET /status/history`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct History {
    pub epoch: u64,
    /// True when `start` and every kept change are here (the reader starts over); false when
    /// only the changes after the reader's `after` are.
    pub full: bool,
    /// The state at `start_ms`, before the first change (full answers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<Seen>,
    pub start_ms: u64,
    pub changes: Vec<Entry>,
    /// The number of the last change (what the reader passes as `after` next).
    pub last_seq: u64,
}

impl Timeline {
    /// A history that begins at `now_ms` on the node's clock with `core`'s state.
    pub fn begin(epoch: u64, now_ms: u64, core: &Core) -> Self {
        let mut t = Timeline {
            epoch,
            start_ms: now_ms,
            ..Timeline::default()
        };
        t.observe(now_ms, core, None);
        t.start = t.now.clone();
        t.entries.clear();
        t
    }

    /// Records what changed in `core` after a step at `now_ms` (the step's `event`, when there
    /// was one, says which peer came or went: the peer table only changes then).
    pub fn observe(&mut self, now_ms: u64, core: &Core, event: Option<&Event>) {
        let role = core.role();
        self.record(
            now_ms,
            Change::Role {
                role: role_name(role),
                term: core.term(),
            },
        );
        // Compared before it is copied: this runs after every step.
        let term = core.admin().map_or(0, |_| core.term());
        let admin = core.admin().map(|a| a.as_str());
        if (admin, term) != (self.now.admin.as_deref(), self.now.admin_term) {
            let admin = admin.map(str::to_owned);
            self.record(now_ms, Change::Admin { admin, term });
        }
        let held = role == Role::Admin && core.lease_until_ms().is_some_and(|l| l > now_ms);
        self.record(now_ms, Change::Lease { held });
        match event {
            Some(Event::PeerUp(advert)) => {
                let node = advert.peer();
                let up = core.peers().contains(node);
                self.record(
                    now_ms,
                    Change::Peer {
                        node: node.to_string(),
                        up,
                    },
                );
            }
            Some(Event::PeerDown { peer }) => {
                let up = core.peers().contains(peer);
                self.record(
                    now_ms,
                    Change::Peer {
                        node: peer.to_string(),
                        up,
                    },
                );
            }
            // A (re)start forgets every peer; a recovered core's table is what it holds.
            Some(Event::Started) | None => {
                let gone: Vec<String> = self
                    .now
                    .peers
                    .iter()
                    .filter(|p| !core.peers().contains(&p.as_str().into()))
                    .cloned()
                    .collect();
                for node in gone {
                    self.record(now_ms, Change::Peer { node, up: false });
                }
                for id in core.peers().ids() {
                    let node = id.to_string();
                    self.record(now_ms, Change::Peer { node, up: true });
                }
            }
            Some(_) => {}
        }
    }

    /// Appends `change` at `t_ms` if it changes anything, then drops what the bounds leave out.
    pub fn record(&mut self, t_ms: u64, change: Change) {
        if !self.now.differs(&change) {
            return;
        }
        self.now.apply(&change);
        self.last_seq += 1;
        self.entries.push_back(Entry {
            seq: self.last_seq,
            t_ms,
            change,
        });
        while let Some(first) = self.entries.front() {
            let old = first.t_ms.saturating_add(WINDOW_MS) < t_ms;
            if self.entries.len() <= MAX_CHANGES && !old {
                break;
            }
            let first = self.entries.pop_front().expect("a first entry");
            self.start.apply(&first.change);
            self.start_ms = first.t_ms;
        }
    }

    /// What a reader gets: the changes after `since.after` when it holds this history's
    /// earlier part (same epoch, nothing it lacks dropped since), else everything.
    pub fn since(&self, since: Since) -> History {
        let first_seq = self.entries.front().map_or(self.last_seq + 1, |e| e.seq);
        let after = since
            .after
            .filter(|_| since.epoch == Some(self.epoch))
            .filter(|&a| a + 1 >= first_seq && a <= self.last_seq);
        let changes = self
            .entries
            .iter()
            .filter(|e| after.is_none_or(|a| e.seq > a))
            .cloned()
            .collect();
        History {
            epoch: self.epoch,
            full: after.is_none(),
            start: after.is_none().then(|| self.start.clone()),
            start_ms: self.start_ms,
            changes,
            last_seq: self.last_seq,
        }
    }

    /// The state after the last change.
    pub fn now(&self) -> &Seen {
        &self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(node: &str, up: bool) -> Change {
        Change::Peer {
            node: node.into(),
            up,
        }
    }

    fn role(role: &'static str, term: u64) -> Change {
        Change::Role { role, term }
    }

    /// Replays a full answer: the state it starts from with every change applied.
    fn replay(h: &History) -> Seen {
        let mut s = h.start.clone().expect("a full answer");
        for e in &h.changes {
            s.apply(&e.change);
        }
        s
    }

    #[test]
    fn changes_are_kept_in_order_and_repeats_are_not_changes() {
        let mut t = Timeline::default();
        t.record(10, role("pre_candidate", 0));
        t.record(11, role("pre_candidate", 0));
        t.record(20, role("candidate", 1));
        t.record(30, role("admin", 1));
        t.record(30, Change::Lease { held: true });
        t.record(31, Change::Lease { held: true });
        let h = t.since(Since::default());
        assert!(h.full);
        let seqs: Vec<(u64, u64)> = h.changes.iter().map(|e| (e.seq, e.t_ms)).collect();
        assert_eq!(seqs, [(1, 10), (2, 20), (3, 30), (4, 30)]);
        assert_eq!(h.changes[2].change, role("admin", 1));
        assert_eq!(h.last_seq, 4);
        assert_eq!(replay(&h), *t.now());
    }

    #[test]
    fn the_ring_keeps_the_last_changes_and_folds_the_rest_into_its_start() {
        let mut t = Timeline::default();
        t.record(1, peer("stays", true));
        // Far more changes than are kept, all within the window.
        for i in 0..(MAX_CHANGES as u64 + 500) {
            t.record(2 + i, peer("flaps", i % 2 == 0));
        }
        let h = t.since(Since::default());
        assert_eq!(h.changes.len(), MAX_CHANGES);
        assert_eq!(h.changes.last().unwrap().seq, h.last_seq);
        assert!(h.changes.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        // What fell out is in the start: the peer that came up first and never left.
        let start = h.start.clone().unwrap();
        assert!(start.peers.contains("stays"), "{start:?}");
        assert_eq!(h.start_ms + 1, h.changes[0].t_ms);
        assert_eq!(replay(&h), *t.now());
    }

    #[test]
    fn changes_older_than_the_window_are_folded_away() {
        let mut t = Timeline::default();
        t.record(1_000, role("admin", 3));
        t.record(2_000, Change::Lease { held: true });
        t.record(2_000 + WINDOW_MS + 1, peer("late", true));
        let h = t.since(Since::default());
        assert_eq!(h.changes.len(), 1, "{:?}", h.changes);
        let start = h.start.clone().unwrap();
        assert_eq!((start.role, start.term, start.leased), ("admin", 3, true));
        assert_eq!(h.start_ms, 2_000);
    }

    #[test]
    fn a_reader_that_is_up_to_date_gets_only_what_followed() {
        let mut t = Timeline {
            epoch: 7,
            ..Timeline::default()
        };
        t.record(1, role("candidate", 1));
        t.record(2, role("admin", 1));
        let first = t.since(Since::default());
        t.record(3, peer("b", true));
        let next = t.since(Since {
            epoch: Some(7),
            after: Some(first.last_seq),
        });
        assert!(!next.full && next.start.is_none());
        assert_eq!(next.changes.len(), 1);
        assert_eq!(next.changes[0].change, peer("b", true));
        // Another run's reader, a reader from the future, or one that missed dropped changes
        // starts over.
        for since in [
            Since {
                epoch: Some(6),
                after: Some(2),
            },
            Since {
                epoch: Some(7),
                after: Some(99),
            },
        ] {
            assert!(t.since(since).full, "{since:?}");
        }
        for i in 0..(MAX_CHANGES as u64 + 10) {
            t.record(4 + i, peer("c", i % 2 == 0));
        }
        let missed = t.since(Since {
            epoch: Some(7),
            after: Some(3),
        });
        assert!(missed.full);
    }

    /// The observer's path: a real core's steps, read after each one.
    #[test]
    fn a_cores_election_and_its_peers_become_changes() {
        use chorus_core::{Config, PeerInfo, ADMIN_ELECTION};
        let config = Config {
            discovery_timeout_ms: 100,
            bootstrap_expect: 1,
            ..Config::default()
        };
        let mut core = Core::new("me".into(), config, vec![ADMIN_ELECTION.into()], 1).unwrap();
        let mut t = Timeline::begin(9, 0, &core);
        let mut out = Vec::new();
        let mut step = |core: &mut Core, t: &mut Timeline, at: u64, event: Event| {
            out.clear();
            core.step(at, event.clone(), &mut out);
            t.observe(at, core, Some(&event));
        };
        step(&mut core, &mut t, 0, Event::Started);
        // Bounded: discovery re-arms every 100 ms, the election within 45 s.
        for _ in 0..2_000 {
            if core.role() == Role::Admin {
                break;
            }
            let (at, timer) = core.next_deadline().expect("a timer is armed");
            step(&mut core, &mut t, at, Event::TimerFired { timer });
        }
        assert_eq!(core.role(), Role::Admin);
        let info = PeerInfo {
            capabilities: vec![ADMIN_ELECTION.to_owned()].into(),
            ..PeerInfo::default()
        };
        let at = core.now_ms() + 1;
        step(&mut core, &mut t, at, Event::peer_up("other".into(), info));
        assert!(core.peers().contains(&"other".into()));
        step(
            &mut core,
            &mut t,
            at + 1,
            Event::PeerDown {
                peer: "other".into(),
            },
        );
        let h = t.since(Since::default());
        let kinds: Vec<&Change> = h.changes.iter().map(|e| &e.change).collect();
        let term = core.term();
        let admin = Change::Admin {
            admin: Some("me".into()),
            term,
        };
        for expected in [
            &role("admin", term),
            &admin,
            &Change::Lease { held: true },
            &peer("other", true),
            &peer("other", false),
        ] {
            assert!(kinds.contains(&expected), "{expected:?} in {kinds:?}");
        }
        let at = |c: &Change| kinds.iter().position(|k| *k == c).unwrap();
        assert!(at(&role("admin", term)) < at(&peer("other", true)));
        assert!(at(&peer("other", true)) < at(&peer("other", false)));
        assert!(h.changes.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
        assert_eq!(replay(&h), *t.now());
    }

    #[test]
    fn the_peers_named_are_bounded() {
        let mut t = Timeline::default();
        for i in 0..(MAX_PEERS + 10) {
            t.record(1, peer(&format!("p{i:05}"), true));
        }
        assert_eq!(t.now().peers.len(), MAX_PEERS);
        // One that was never recorded up is not recorded down either.
        let last = t.since(Since::default()).last_seq;
        t.record(2, peer(&format!("p{:05}", MAX_PEERS + 5), false));
        assert_eq!(t.since(Since::default()).last_seq, last);
    }
}
