//! Heartbeats, acknowledgements, the admin lease and check-quorum.
//!
//! The lease: a heartbeat sent at `t` and acknowledged by a strict majority (the admin counting
//! itself) extends the lease to `t + lease_ms`, where `lease_ms` is the minimum election timeout
//! less twice the drift bound. Each acknowledging voter promised at receipt (≥ `t`) to grant no
//! vote for a full minimum election timeout on its own clock, so the lease ends before any
//! majority could elect someone else. Admin duties run only under the lease.
//!
//! Check-quorum: an admin that no majority has acknowledged for a full maximum election timeout
//! steps down. It is measured from the same send times as the lease but is longer, so a network
//! whose round trip exceeds the lease (duties pause) still keeps a stable admin.

use crate::{Command, Core, Message, NodeId, Notice, Role, StepDownReason, Timer};

impl Core {
    pub(crate) fn on_heartbeat_timer(&mut self, out: &mut Vec<Command>) {
        let Some(admin) = &self.admin_state else {
            return;
        };
        if self.now_ms >= admin.quorum_at_ms + self.config.election_timeout_max_ms {
            self.step_down(StepDownReason::CheckQuorum, out);
        } else {
            self.send_heartbeat(out);
        }
    }

    pub(crate) fn on_lease_timer(&mut self, out: &mut Vec<Command>) {
        if self.lease_until_ms().is_some_and(|l| self.now_ms >= l) {
            out.push(Command::Notice(Notice::LeaseExpired { term: self.term }));
        }
    }

    pub(crate) fn on_heartbeat(
        &mut self,
        from: NodeId,
        term: u64,
        beat: u64,
        membership_version: u64,
        out: &mut Vec<Command>,
    ) {
        if term < self.term {
            // A stale admin: our higher term in the ack makes it step down.
            out.push(Command::Send {
                to: from,
                msg: Message::HeartbeatAck {
                    term: self.term,
                    beat,
                },
            });
            return;
        }
        self.observe_term(term, out);
        assert!(
            self.role != Role::Admin,
            "two admins in term {term}: {} and {from}",
            self.id
        );
        self.become_follower(out);
        self.set_admin(from.clone(), out);
        self.beat = self.beat.max(beat);
        self.promise_until_ms = self.now_ms + self.config.election_timeout_min_ms;
        self.promised_to = Some(from.clone());
        self.arm_suspect(self.promise_until_ms, out);
        let my_version = self.electorate.as_ref().map_or(0, |e| e.version);
        if self
            .electorate
            .as_ref()
            .is_some_and(|e| e.contains(&self.id))
        {
            out.push(Command::Send {
                to: from.clone(),
                msg: Message::HeartbeatAck { term, beat },
            });
        }
        if membership_version > my_version {
            // Behind on membership: fetch the electorate from the admin.
            out.push(Command::Send {
                to: from,
                msg: Message::Whoami {
                    electorate_version: my_version,
                },
            });
        }
    }

    pub(crate) fn on_heartbeat_ack(
        &mut self,
        from: NodeId,
        term: u64,
        beat: u64,
        out: &mut Vec<Command>,
    ) {
        if self.observe_term(term, out) || self.role != Role::Admin || term != self.term {
            return;
        }
        if !self.electorate.as_ref().is_some_and(|e| e.contains(&from)) {
            return;
        }
        let quorum = self.electorate.as_ref().map_or(1, |e| e.quorum());
        let Some(admin) = &mut self.admin_state else {
            return;
        };
        let last = admin.last_ack.entry(from).or_insert(0);
        if *last >= beat {
            return;
        }
        *last = beat;
        let Some(round) = admin.beats.iter_mut().find(|r| r.beat == beat) else {
            return;
        };
        round.acks += 1;
        if round.acks == quorum {
            let sent_at = round.sent_at_ms;
            self.renew_lease(sent_at, out);
        }
    }

    /// A majority acknowledged what was sent at `sent_at_ms`: extends the lease to
    /// `sent_at_ms + lease_ms` if that is later, and resets check-quorum.
    pub(crate) fn renew_lease(&mut self, sent_at_ms: u64, out: &mut Vec<Command>) {
        let lease_ms = self.config.lease_ms();
        let term = self.term;
        let Some(admin) = &mut self.admin_state else {
            return;
        };
        admin.quorum_at_ms = admin.quorum_at_ms.max(sent_at_ms);
        let until = sent_at_ms + lease_ms;
        if until > admin.lease_until_ms {
            admin.lease_until_ms = until;
            out.push(Command::Notice(Notice::LeaseRenewed {
                term,
                lease_until_ms: until,
            }));
            self.timers.set(Timer::Lease, until, out);
        }
    }

    pub(crate) fn on_step_down(&mut self, from: NodeId, term: u64, out: &mut Vec<Command>) {
        if term != self.term || self.admin.as_ref() != Some(&from) {
            return;
        }
        // The admin gave its lease up first, so our promise to it can end now.
        self.admin = None;
        if self.promised_to.as_ref() == Some(&from) {
            self.promise_until_ms = self.now_ms;
        }
        if self.can_stand() {
            self.arm_stand(out);
        } else {
            self.arm_suspect(self.now_ms, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::*;
    use crate::{Command, Event, Message, Notice, Role, StepDownReason, Timer};

    const ABCDE: &[&str] = &["a", "b", "c", "d", "e"];

    fn beat_of(out: &[Command]) -> u64 {
        match broadcasts(out).as_slice() {
            [Message::Heartbeat { beat, .. }] => *beat,
            other => panic!("expected one heartbeat, got {other:?}"),
        }
    }

    #[test]
    fn admin_without_majority_of_acks_loses_duties_then_steps_down() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let lease = a.lease_until_ms().unwrap();
        let won_at = a.now_ms();
        // Heartbeats go out but only one voter answers: no majority, no renewal.
        let out = fire(&mut a, Timer::Heartbeat);
        let beat = beat_of(&out);
        a.step_vec(
            a.now_ms(),
            from("b", Message::HeartbeatAck { term: 1, beat }),
        );
        assert_eq!(a.lease_until_ms(), Some(lease));
        let out = a.step_vec(
            lease,
            Event::TimerFired {
                timer: Timer::Lease,
            },
        );
        assert!(out.contains(&Command::Notice(Notice::LeaseExpired { term: 1 })));
        assert_eq!(a.role(), Role::Admin, "duties stop, the role stays");
        assert!(!a.holds_lease(lease));
        // Heartbeats continue until a full maximum election timeout without a majority.
        let deadline = won_at + a.config().election_timeout_max_ms;
        while a.role() == Role::Admin {
            let out = fire(&mut a, Timer::Heartbeat);
            if a.role() == Role::Admin {
                assert!(a.now_ms() < deadline);
                assert_eq!(broadcasts(&out).len(), 1);
            } else {
                assert!(a.now_ms() >= deadline);
                assert!(out.contains(&Command::Notice(Notice::SteppedDown {
                    term: 1,
                    reason: StepDownReason::CheckQuorum
                })));
            }
        }
    }

    #[test]
    fn majority_of_acks_renews_from_send_time_and_duplicates_do_not_count() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = fire(&mut a, Timer::Heartbeat);
        let (beat, sent) = (beat_of(&out), a.now_ms());
        let ack = Message::HeartbeatAck { term: 1, beat };
        a.step_vec(sent + 5, from("b", ack.clone()));
        a.step_vec(sent + 6, from("b", ack.clone()));
        assert_ne!(
            a.lease_until_ms(),
            Some(sent + a.config().lease_ms()),
            "b counted once"
        );
        let out = a.step_vec(sent + 7, from("c", ack));
        let until = sent + a.config().lease_ms();
        assert_eq!(a.lease_until_ms(), Some(until));
        assert!(out.contains(&Command::Notice(Notice::LeaseRenewed {
            term: 1,
            lease_until_ms: until
        })));
    }

    #[test]
    fn the_lease_ends_before_any_voter_promise() {
        let c = crate::Config::default();
        assert!(c.lease_ms() < c.election_timeout_min_ms);
        let drift = f64::from(c.max_clock_drift_ppm) / 1e6;
        // A slow admin clock stretches the lease; a fast voter clock shrinks the promise.
        assert!(
            c.lease_ms() as f64 / (1.0 - drift) <= c.election_timeout_min_ms as f64 / (1.0 + drift)
        );
    }

    #[test]
    fn stale_admin_steps_down_on_a_higher_term_ack() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = a.step_vec(
            a.now_ms(),
            from("d", Message::HeartbeatAck { term: 2, beat: 1 }),
        );
        assert_eq!((a.role(), a.term()), (Role::Follower, 2));
        assert!(out.contains(&Command::Notice(Notice::SteppedDown {
            term: 1,
            reason: StepDownReason::HigherTerm
        })));
    }

    #[test]
    fn follower_answers_a_stale_heartbeat_with_its_term() {
        let mut b = voter("b", ABCDE);
        b.step_vec(0, from("c", vote_req(&b, 3)));
        let out = b.step_vec(
            1,
            from(
                "a",
                Message::Heartbeat {
                    term: 2,
                    beat: 4,
                    membership_version: 1,
                },
            ),
        );
        assert_eq!(
            sent_to(&out, "a"),
            [&Message::HeartbeatAck { term: 3, beat: 4 }]
        );
        assert_eq!(b.admin(), None);
    }

    #[test]
    fn heartbeat_makes_the_admin_known_and_is_acked() {
        let mut b = voter("b", ABCDE);
        let out = b.step_vec(
            5,
            from(
                "a",
                Message::Heartbeat {
                    term: 1,
                    beat: 9,
                    membership_version: 1,
                },
            ),
        );
        assert!(out.contains(&Command::Notice(Notice::AdminKnown {
            admin: "a".into(),
            term: 1
        })));
        assert_eq!(
            sent_to(&out, "a"),
            [&Message::HeartbeatAck { term: 1, beat: 9 }]
        );
        assert_eq!((b.term(), b.beat()), (1, 9));
        assert_eq!(b.timers.deadline(Timer::Election), Some(5 + MIN));
    }

    #[test]
    fn graceful_shutdown_hands_over_at_once() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = a.step_vec(a.now_ms(), Event::Shutdown);
        assert!(broadcasts(&out).contains(&&Message::StepDown { term: 1 }));
        assert!(out.contains(&Command::Notice(Notice::SteppedDown {
            term: 1,
            reason: StepDownReason::Shutdown
        })));
        let mut b = voter("b", ABCDE);
        b.step_vec(
            100,
            from(
                "a",
                Message::Heartbeat {
                    term: 1,
                    beat: 1,
                    membership_version: 1,
                },
            ),
        );
        b.step_vec(200, from("a", Message::StepDown { term: 1 }));
        assert_eq!(b.admin(), None);
        // b stands within the election window rather than after a full timeout.
        assert!(b.timers.deadline(Timer::Election).unwrap() <= 200 + 15_000);
        // The promise to a is released: b can support another candidate right away, and then
        // leaves that candidate time to win instead of standing against it.
        let out = b.step_vec(201, from("c", pre_vote_req(&b, 2)));
        assert_eq!(
            sent_to(&out, "c"),
            [&Message::PreVoteReply {
                term: 2,
                granted: true
            }]
        );
        assert_eq!(b.timers.deadline(Timer::Election), Some(201 + MIN));
    }

    #[test]
    fn restarted_admin_holds_no_lease() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let t = a.now_ms() + 1;
        a.step_vec(t, Event::Started);
        assert_eq!(
            (a.role(), a.term(), a.lease_until_ms()),
            (Role::Follower, 1, None)
        );
        assert!(!a.holds_lease(t));
    }
}

#[cfg(test)]
mod config_change {
    use crate::testutil::*;
    use crate::{Config, Event, Timer};

    #[test]
    fn new_timings_apply_from_the_next_timer_and_survive_replay() {
        let mut b = voter("b", &["a", "b", "c"]);
        let faster = Config {
            heartbeat_interval_ms: 1_000,
            election_timeout_min_ms: 3_000,
            election_timeout_max_ms: 4_500,
            discovery_timeout_ms: 1_000,
            ..Config::default()
        };
        b.step_vec(
            10,
            Event::ConfigChanged {
                config: faster.clone(),
            },
        );
        assert_eq!(b.config(), &faster);
        b.step_vec(
            20,
            from(
                "a",
                crate::Message::Heartbeat {
                    term: 1,
                    beat: 1,
                    membership_version: 1,
                },
            ),
        );
        assert_eq!(b.timers.deadline(Timer::Election), Some(20 + 3_000));
        // Another cluster's id or an invalid config is ignored.
        let other = Config {
            cluster_id: "other".into(),
            ..faster.clone()
        };
        b.step_vec(30, Event::ConfigChanged { config: other });
        let broken = Config {
            election_timeout_max_ms: 1,
            ..faster.clone()
        };
        b.step_vec(31, Event::ConfigChanged { config: broken });
        assert_eq!(b.config(), &faster);
    }
}
