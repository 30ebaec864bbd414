//! Discovery: WHOAMI requests and replies, admin acceptance by confirmations, and adopting the
//! electorate of an existing cluster (founding one is `bootstrap.rs`).

use std::sync::Arc;

use crate::timer::ElectionPhase;
use crate::{Command, Core, Electorate, Message, NodeId, Refusal, Resources, Timer};

/// The view in a WHOAMI reply, unpacked.
pub(crate) struct Report {
    pub(crate) genesis: u64,
    pub(crate) admin: Option<NodeId>,
    pub(crate) term: u64,
    pub(crate) beat: u64,
    pub(crate) uptime_s: u64,
    pub(crate) resources: Resources,
    /// The replier's stamp on the electorate it sent.
    pub(crate) stamp: u64,
}

impl Core {
    /// Starts a discovery round: ask the peers known so far, and give up after the timeout.
    pub(crate) fn begin_discovery(&mut self, out: &mut Vec<Command>) {
        self.reports.clear();
        self.whoami_sent = 0;
        let fanout = self.config.discovery_fanout as usize;
        let targets = self.peers.lowest_ids(fanout);
        for peer in targets {
            self.send_whoami(peer, out);
        }
        self.timers.set(
            Timer::Discovery,
            self.now_ms + self.config.discovery_timeout_ms,
            out,
        );
    }

    pub(crate) fn send_whoami(&mut self, peer: NodeId, out: &mut Vec<Command>) {
        self.whoami_sent = self.whoami_sent.saturating_add(1);
        self.whoami_pending.insert(peer.clone());
        let (electorate_version, electorate_term) = self.electorate_version_key();
        out.push(Command::Send {
            to: peer,
            msg: Message::Whoami {
                electorate_version,
                electorate_term,
                electorate_stamp: self.stamp,
            },
        });
    }

    pub(crate) fn on_discovery_timeout(&mut self, out: &mut Vec<Command>) {
        if self.admin.is_some() {
            return;
        }
        // No admin turned up: arm the election unless it already is, and keep asking.
        if self.can_stand() && self.timers.deadline(Timer::Election).is_none() {
            self.arm_stand(out);
        }
        self.begin_discovery(out);
    }

    pub(crate) fn on_whoami(
        &mut self,
        from: NodeId,
        theirs: (u64, u64, u64),
        out: &mut Vec<Command>,
    ) {
        // The electorate goes to an asker on another electorate or stamp: behind, or ahead on
        // a change that may never have been committed (the asker decides what to do with it).
        let stamp = self.stamp;
        let electorate = self
            .electorate
            .as_ref()
            .filter(|e| (e.version, e.term, stamp) != theirs)
            .cloned();
        let msg = Message::WhoamiReply {
            admin: self.admin.clone(),
            term: self.term,
            membership_version: self.electorate.as_ref().map_or(0, |e| e.version),
            beat: self.beat,
            eligible: self.is_eligible(),
            uptime_s: self.uptime_s(),
            resources: self.resources,
            electorate,
            genesis: self.genesis(),
            electorate_stamp: stamp,
        };
        out.push(Command::Send { to: from, msg });
    }

    pub(crate) fn on_whoami_reply(
        &mut self,
        from: NodeId,
        report: Report,
        electorate: Option<Arc<Electorate>>,
        out: &mut Vec<Command>,
    ) {
        if !self.whoami_pending.remove(&from) {
            return self.refuse(from, "whoami_reply", Refusal::Unsolicited, out);
        }
        let Report {
            genesis,
            admin,
            term,
            beat,
            uptime_s,
            resources,
            stamp,
        } = report;
        // Eligibility comes from the peer's advertisement when it connected, never from a reply.
        if let Some(peer) = self.peers.get_mut(&from) {
            peer.heard(uptime_s, resources, self.now_ms);
        }
        if self.is_foreign(genesis) {
            return self.refuse(from, "whoami_reply", Refusal::ForeignCluster, out);
        }
        if let Some(theirs) = electorate {
            if self.electorate.is_some() {
                // Rule 5 of `membership.rs`: a node asks its admin when their electorates differ
                // (`on_heartbeat`), and the admin of its term, answering as that admin,
                // replaces its electorate and so confirms it in this term. Nobody else hands a
                // node an electorate once it has one.
                let its_admin = self.admin.as_ref() == Some(&from);
                if its_admin && admin.as_ref() == Some(&from) && term == self.term {
                    let key = theirs.key();
                    self.follow_admin_electorate(theirs, out);
                    if self.electorate_version_key() == key {
                        self.stamp = self.term;
                    }
                } else if self.is_member(&from) {
                    self.take_later_position(theirs, stamp, out);
                }
            } else {
                self.consider_electorate(from.clone(), theirs, out);
            }
        }
        // Only members speak for the cluster: a worker's beat, term or admin is not taken.
        if !self.is_member(&from) {
            return;
        }
        if self.admin_state.is_none() {
            // An admin counts its own beats: adopting one it did not send would let a voter
            // acknowledge beats that were never sent.
            self.beat = self.beat.max(beat);
        }
        let Some(admin) = admin else { return };
        // The admin need not be a member of this node's electorate: then that electorate is
        // out of date (the node missed the change that added the admin, or holds one that
        // removed it and never committed), and following the admin is how the node catches up
        // (rule 5 of `membership.rs`). The reports still come from members, enough agreeing.
        if self.admin.is_some() || term < self.term || admin == self.id {
            return;
        }
        self.reports.insert(from, (admin.clone(), term));
        let agreeing = self
            .reports
            .values()
            .filter(|(a, t)| *a == admin && *t == term)
            .count();
        let members_known = (self.peers.unordered())
            .filter(|(p, _)| self.is_member(p))
            .count();
        let needed = (self.config.confirmations as usize).min(members_known.max(1));
        if agreeing >= needed {
            self.observe_term(term, out);
            if self.role == crate::Role::PreCandidate {
                // A pre-candidate has changed nothing yet: a confirmed admin of its term ends
                // its round, as that admin's heartbeat would.
                self.become_follower(out);
            }
            if self.role == crate::Role::Follower {
                self.set_admin(admin, out);
                self.arm_suspect(self.now_ms + self.config.election_timeout_min_ms, out);
            }
        }
    }

    /// The genesis of this node's electorate (0 = none yet).
    pub(crate) fn genesis(&self) -> u64 {
        self.electorate.as_ref().map_or(0, |e| e.genesis)
    }

    /// Whether a peer's genesis names another cluster than this node's (0 on either side
    /// means unknown).
    pub(crate) fn is_foreign(&self, theirs: u64) -> bool {
        let mine = self.genesis();
        mine != 0 && theirs != 0 && mine != theirs
    }

    /// An electorate reported by an asked peer. One is adopted only by a node that has none,
    /// only from eligible peers (a worker cannot hand a node a made-up electorate), and only
    /// once `confirmations` of them (capped by how many reported one at all) reported the same
    /// one. A node never replaces its electorate from a reply of anyone but its admin
    /// (`membership.rs`).
    fn consider_electorate(
        &mut self,
        from: NodeId,
        theirs: Arc<Electorate>,
        out: &mut Vec<Command>,
    ) {
        if self.electorate.is_some() {
            return;
        }
        if !self.peers.get(&from).is_some_and(|p| p.eligible()) {
            return self.refuse(from, "whoami_reply", Refusal::NotEligible, out);
        }
        // Of any size, whatever this node's `bootstrap_expect`: the replier holds an electorate,
        // so it was chosen and founded a cluster, and this node joins it as a standby (rule 3
        // of `bootstrap.rs`). `bootstrap_expect` must match only between nodes that found a
        // cluster together (rule 2): there it keeps their quorums intersecting. Joining founds
        // nothing, and autopilot promotes the joiner. (A version-1 electorate of another size
        // was refused here, so a cluster founded with `bootstrap_expect = 1` could never grow:
        // issue 51, finding 11.)
        let key = (theirs.version, theirs.fingerprint());
        self.electorate_reports.insert(from, theirs);
        let agreeing = self
            .electorate_reports
            .values()
            .filter(|e| (e.version, e.fingerprint()) == key)
            .count();
        let Some(reported) = self
            .electorate_reports
            .values()
            .find(|e| (e.version, e.fingerprint()) == key)
            .cloned()
        else {
            return;
        };
        let needed = (self.config.confirmations as usize).min(self.electorate_reports.len());
        if agreeing >= needed {
            // Whatever bootstrap this node took part in lost: a cluster exists.
            self.adopt_electorate(reported, out);
        }
    }

    /// Rule 5's second half (`membership.rs`): a member of this node's electorate hands it an
    /// electorate at a later position (stamp, version) of the same cluster, and the node takes
    /// it with that stamp — MongoRaftReconfig's SendConfig, from members only (they speak for
    /// the electorate; a worker or a stranger never moves it). Without it an admin that
    /// proposed its own removal and lost its lease left the only member of the new electorate
    /// on the old one, where nobody could win (`chorus-sim fuzz` seed 10233).
    pub(crate) fn take_later_position(
        &mut self,
        theirs: Arc<Electorate>,
        stamp: u64,
        out: &mut Vec<Command>,
    ) {
        let later = (stamp, theirs.version) > self.position();
        let Some(mine) = &self.electorate else { return };
        if theirs.genesis == mine.genesis && later {
            // A stamp is a term an admin held (never above the replier's own term, checked at
            // the boundary in `trust.rs`): a node behind it moves to that term first, so it
            // never holds a position from a term it has not reached. (A voter removed while
            // cut off stayed on its old term, took nothing, and was lost to the cluster:
            // `chorus-sim fuzz` seed 984.)
            let same = mine.key() == theirs.key() && mine.fingerprint() == theirs.fingerprint();
            self.observe_term(stamp, out);
            if !same {
                self.set_electorate(theirs, out);
            }
            self.stamp = stamp;
        }
    }

    /// Arms the election timer to suspect the admin at `at_ms`.
    pub(crate) fn arm_suspect(&mut self, at_ms: u64, out: &mut Vec<Command>) {
        self.election_phase = ElectionPhase::Suspect;
        self.timers.set(Timer::Election, at_ms, out);
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::*;
    use crate::{Command, Config, Core, Event, Message, Notice, Timer, ADMIN_ELECTION};

    fn reply(admin: Option<&str>, term: u64) -> Message {
        Message::WhoamiReply {
            admin: admin.map(Into::into),
            term,
            membership_version: 1,
            beat: 3,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: None,
            genesis: 0,
            electorate_stamp: 0,
        }
    }

    #[test]
    fn admin_accepted_on_confirmations_not_on_one_report() {
        let mut n = voter("n", &["a", "b", "c", "n"]);
        for p in ["a", "b", "c"] {
            n.step_vec(0, up(p, true));
        }
        n.step_vec(1, from("b", reply(Some("a"), 2)));
        assert_eq!(n.admin(), None, "one report of three peers is not enough");
        // Another member as admin of the same term, and the same admin in another term.
        n.step_vec(2, from("c", reply(Some("b"), 2)));
        assert_eq!(n.admin(), None, "disagreeing reports do not add up");
        let out = n.step_vec(3, from("a", reply(Some("a"), 2)));
        assert!(out.contains(&Command::Notice(Notice::AdminKnown {
            admin: "a".into(),
            term: 2
        })));
        assert_eq!((n.term(), n.beat()), (2, 3));
        assert_eq!(n.timers.deadline(Timer::Discovery), None, "discovery over");
        // Accepted by reports, the admin gets the same loyalty as after a heartbeat.
        assert_eq!(n.timers.deadline(Timer::Election), Some(3 + MIN));
    }

    /// Reports count only for the node's own term or later, and only while it knows no admin.
    #[test]
    fn reports_of_older_terms_or_while_an_admin_is_known_are_not_taken() {
        let asked = |n: &mut Core, t| {
            for p in ["a", "b", "c"] {
                n.step_vec(t, up(p, true));
            }
        };
        // At term 5 with no admin: two reports of term 3 move nothing.
        let mut n = voter("n", &["a", "b", "c", "n"]);
        n.step_vec(0, from("c", vote_req(&n, 5)));
        n.step_vec(1, Event::PeerDown { peer: "c".into() });
        asked(&mut n, MIN + 1);
        n.step_vec(MIN + 2, from("a", reply(Some("b"), 3)));
        n.step_vec(MIN + 3, from("b", reply(Some("b"), 3)));
        assert_eq!((n.term(), n.admin()), (5, None));
        // The same term is taken.
        asked(&mut n, MIN + 4);
        n.step_vec(MIN + 5, from("a", reply(Some("b"), 5)));
        n.step_vec(MIN + 6, from("b", reply(Some("b"), 5)));
        assert_eq!((n.term(), n.admin().map(|a| a.as_str())), (5, Some("b")));

        // Knowing admin a of term 2, reports of another admin in a later term are not taken.
        let mut n = voter("n", &["a", "b", "c", "n"]);
        asked(&mut n, 0);
        n.step_vec(
            1,
            from(
                "a",
                Message::Heartbeat {
                    term: 2,
                    beat: 1,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            ),
        );
        asked(&mut n, 2);
        n.step_vec(3, from("b", reply(Some("c"), 3)));
        n.step_vec(4, from("c", reply(Some("c"), 3)));
        assert_eq!((n.term(), n.admin().map(|a| a.as_str())), (2, Some("a")));
    }

    /// A reply carries the electorate only to an asker on another version (behind, or ahead on
    /// a change that may not have committed).
    #[test]
    fn the_electorate_goes_only_to_askers_on_another_version() {
        let mut n = voter("n", &["a", "n"]);
        let electorate_in = |out: &[Command]| match sent_to(out, "a").as_slice() {
            [Message::WhoamiReply { electorate, .. }] => electorate.is_some(),
            other => panic!("one reply expected, got {other:?}"),
        };
        let ask = |v| {
            from(
                "a",
                Message::Whoami {
                    electorate_version: v,
                    electorate_term: 0,
                    electorate_stamp: 0,
                },
            )
        };
        assert!(electorate_in(&n.step_vec(1, ask(0))));
        assert!(!electorate_in(&n.step_vec(2, ask(1))));
        assert!(electorate_in(&n.step_vec(3, ask(2))));
    }

    #[test]
    fn confirmations_are_capped_by_peers_known() {
        let mut n = voter("n", &["a", "n"]);
        n.step_vec(0, up("a", true));
        n.step_vec(1, from("a", reply(Some("a"), 1)));
        assert_eq!(n.admin().map(|a| a.as_str()), Some("a"));
    }

    /// A discovery round asks the lowest ids known, whatever order the peers came in (the
    /// peer table is a hash table: its own order must not leak), and the table walks in id
    /// order.
    #[test]
    fn a_discovery_round_asks_the_lowest_ids_whatever_the_arrival_order() {
        let ids = ["p10", "q", "p2", "p100", "p1", "o9", "p", "p11", "r", "p20"];
        let asked = |order: &[&str]| {
            let config = Config {
                discovery_fanout: 3,
                ..Config::default()
            };
            let mut n = node_with("n", &["n"], vec![ADMIN_ELECTION.into()], config);
            for id in order {
                n.step_vec(0, up(id, false));
            }
            let walked: Vec<String> = n.peers().ids().map(|id| id.to_string()).collect();
            let out = fire(&mut n, Timer::Discovery);
            let to: Vec<String> = (out.iter())
                .filter_map(|c| match c {
                    Command::Send {
                        to,
                        msg: Message::Whoami { .. },
                    } => Some(to.to_string()),
                    _ => None,
                })
                .collect();
            (to, walked)
        };
        let mut sorted = ids;
        sorted.sort();
        let fanout = 3;
        let mut reversed = ids;
        reversed.reverse();
        for order in [ids, sorted, reversed] {
            let (to, walked) = asked(&order);
            assert_eq!(to, sorted[..fanout], "arrival order {order:?}");
            assert_eq!(walked, sorted);
        }
    }

    #[test]
    fn whoami_goes_to_new_peers_until_an_admin_is_known() {
        let mut n = voter("n", &["a", "b", "n"]);
        let out = n.step_vec(0, up("a", true));
        assert_eq!(
            sent_to(&out, "a"),
            [&Message::Whoami {
                electorate_version: 1,
                electorate_term: 0,
                electorate_stamp: 0,
            }]
        );
        n.step_vec(
            1,
            from(
                "a",
                Message::Heartbeat {
                    term: 1,
                    beat: 1,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            ),
        );
        assert!(sent_to(&n.step_vec(2, up("b", true)), "b").is_empty());
    }

    #[test]
    fn only_eligible_nodes_found_a_cluster() {
        let config = Config {
            bootstrap_expect: 3,
            ..Config::default()
        };
        let mut worker = Core::new("w".into(), config, vec!["docker".into()], 1).unwrap();
        worker.step_vec(0, Event::Started);
        for p in ["a", "b", "c"] {
            worker.step_vec(0, up(p, true));
        }
        assert_eq!(worker.timers.deadline(Timer::Bootstrap), None);
        assert!(worker.electorate().is_none());
    }

    #[test]
    fn an_existing_electorate_is_adopted_from_a_reply() {
        let config = Config {
            bootstrap_expect: 3,
            ..Config::default()
        };
        let mut n = Core::new("n".into(), config, vec![ADMIN_ELECTION.into()], 1).unwrap();
        n.step_vec(0, Event::Started);
        n.step_vec(0, up("a", true));
        let theirs = crate::Electorate::new(4, vec!["a".into(), "b".into(), "n".into()]);
        let msg = Message::WhoamiReply {
            admin: None,
            term: 0,
            membership_version: 4,
            beat: 0,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: Some(theirs.clone().into()),
            genesis: 0,
            electorate_stamp: 0,
        };
        n.step_vec(1, from("a", msg));
        assert_eq!(n.electorate(), Some(&theirs));
    }

    /// Issue 51, finding 11: a voter started with any `bootstrap_expect` joins a cluster that
    /// was founded with another, even while its electorate is still the version-1 one of its
    /// founding: a cluster founded alone (expect 1) grows. Before, a version-1 electorate of
    /// another size than the joiner's own expect was refused (`settings_mismatch`) for good.
    #[test]
    fn a_bootstrap_electorate_of_any_size_is_joined() {
        for (expect, founders) in [(3, 1), (2, 1), (5, 3), (3, 5)] {
            let config = Config {
                bootstrap_expect: expect,
                ..Config::default()
            };
            let mut n = Core::new("n".into(), config, vec![ADMIN_ELECTION.into()], 1).unwrap();
            n.step_vec(0, Event::Started);
            n.step_vec(0, up("a", true));
            let members = ["a", "b", "c", "d", "e"][..founders]
                .iter()
                .map(|m| crate::NodeId::from(*m))
                .collect();
            let theirs = crate::Electorate::new(1, members);
            let msg = Message::WhoamiReply {
                admin: Some("a".into()),
                term: 1,
                membership_version: 1,
                beat: 0,
                eligible: true,
                uptime_s: 0,
                resources: Default::default(),
                electorate: Some(theirs.clone().into()),
                genesis: theirs.genesis,
                electorate_stamp: 1,
            };
            let out = n.step_vec(1, from("a", msg));
            assert!(
                !out.iter()
                    .any(|c| matches!(c, Command::Notice(Notice::Refused { .. }))),
                "expect {expect}, {founders} founders: {out:?}"
            );
            assert_eq!(n.electorate(), Some(&theirs), "expect {expect}");
            assert!(n.knows_a_cluster());
            assert_eq!(n.timers.deadline(Timer::Bootstrap), None, "founds nothing");
        }
    }

    #[test]
    fn single_node_elects_itself_without_waiting_for_discovery() {
        let mut n = Core::new(
            "solo".into(),
            Config::default(),
            vec![ADMIN_ELECTION.into()],
            1,
        )
        .unwrap();
        n.step_vec(0, Event::Started);
        // It founded its cluster alone just now: nobody to discover (issue 36, cold start).
        let stand = n.timers.deadline(Timer::Election).expect("armed at once");
        assert!(stand < n.timers.deadline(Timer::Discovery).expect("still asking"));
        fire(&mut n, Timer::Election);
        assert_eq!(n.role(), crate::Role::Admin);
        assert_eq!(n.term(), 1);
        let t = n.now_ms();
        let out = fire(&mut n, Timer::Heartbeat);
        assert!(
            n.holds_lease(t + 20_000),
            "a lone voter renews its own lease: {out:?}"
        );
    }
}
