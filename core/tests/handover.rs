//! Handover (`core/src/transfer.rs`): a stopping admin, or one an operator asks, hands its office
//! to one up-to-date voter, which stands at once. Single cores show each rule; the in-test
//! network (`support`, which checks one admin per term, no overlapping leases and one vote per
//! term on every step) shows the handover end to end, under loss, reordering and crashes.

use crate::support;

use chorus_core::{Command, Core, Event, HandoverRefusal, Message, NodeId, Notice, Role};
use support::{fast_config, Net};

/// The live admin every live node names, waited for up to `within_ms` from now.
fn wait_for_admin(net: &mut Net, within_ms: u64) -> NodeId {
    let until = net.now + within_ms;
    while net.now < until {
        let t = net.now + 5;
        net.run_until(t);
        // Named by every live node, and itself a live admin (not one that just stopped).
        if let Some(a) = net.agreed_admin() {
            let i = net.index_of(&a);
            if net.nodes[i]
                .as_ref()
                .is_some_and(|c| c.role() == Role::Admin)
            {
                return a;
            }
        }
    }
    panic!("seed {}: no admin agreed by t={until}", net.seed);
}

/// The target named by the admin's `handing_over` notice since step `since`.
fn handed_to(net: &Net, since: usize, i: usize) -> Option<Option<NodeId>> {
    net.notices_since(since, i)
        .into_iter()
        .find_map(|(_, n)| match n {
            Notice::HandingOver { target, .. } => Some(target),
            _ => None,
        })
}

/// Whether node `i` ran a pre-vote round since step `since`.
fn pre_voted(net: &Net, since: usize, i: usize) -> bool {
    net.history[since..].iter().any(|(_, n, out)| {
        *n == i
            && out.iter().any(|c| {
                matches!(
                    c,
                    Command::RoleChanged {
                        role: Role::PreCandidate,
                        ..
                    }
                )
            })
    })
}

/// A graceful stop: every live node names the voter the admin handed to within four one-way
/// delays (`timeout_now`, vote request, grant, heartbeat), in the next term, without a pre-vote
/// and without waiting for any rank slot. Over 40 seeds of 5 voters with 1–10 ms delays.
///
/// Before handover the successor waited out its rank slot after the step-down, and a slot the
/// departing admin still held when it ranked first (issue 36: 0.36 s at 3 s timeouts).
#[test]
fn a_stopping_admin_hands_over_within_four_delays() {
    for seed in 0..40 {
        let mut net = Net::new(seed, 5, fast_config());
        let old = wait_for_admin(&mut net, 5_000);
        net.run_until(net.now + 200);
        let i = net.index_of(&old);
        let term = net.nodes[i].as_ref().unwrap().term();
        let since = net.history.len();
        let stopped_at = net.now;
        net.apply(i, Event::Shutdown);
        net.crash(i);
        let target = handed_to(&net, since, i)
            .flatten()
            .unwrap_or_else(|| panic!("seed {seed}: {old} named no target"));
        let new = wait_for_admin(&mut net, 2_000);
        let took = net.now - stopped_at;
        assert_eq!(new, target, "seed {seed}: the target won");
        assert!(took <= 40, "seed {seed}: handover took {took} ms");
        let j = net.index_of(&new);
        assert_eq!(
            net.nodes[j].as_ref().unwrap().term(),
            term + 1,
            "seed {seed}"
        );
        assert!(
            !pre_voted(&net, since, j),
            "seed {seed}: the target pre-voted"
        );
    }
}

/// `chorus members transfer ID`: the named voter becomes admin in the next term, the old admin
/// follows it, and no lease overlapped on the way (checked on every step). Then the same
/// without a name: the admin picks an up-to-date voter.
#[test]
fn an_operator_moves_the_office_to_a_named_voter_or_the_best_one() {
    for seed in 0..20 {
        let mut net = Net::new(seed, 5, fast_config());
        let old = wait_for_admin(&mut net, 5_000);
        net.run_until(net.now + 200);
        let i = net.index_of(&old);
        let to = NodeId::from(format!("n{}", (i + 1 + seed as usize % 4) % 5));
        let since = net.history.len();
        net.apply(
            i,
            Event::TransferAdmin {
                to: Some(to.clone()),
                request: 7,
            },
        );
        assert_eq!(handed_to(&net, since, i), Some(Some(to.clone())));
        let new = wait_for_admin(&mut net, 2_000);
        assert_eq!(new, to, "seed {seed}");
        assert_eq!(net.nodes[i].as_ref().unwrap().role(), Role::Follower);

        net.run_until(net.now + 200);
        let j = net.index_of(&new);
        let since = net.history.len();
        net.apply(
            j,
            Event::TransferAdmin {
                to: None,
                request: 8,
            },
        );
        let picked = handed_to(&net, since, j).flatten().expect("a target");
        assert_ne!(picked, new);
        assert_eq!(wait_for_admin(&mut net, 2_000), picked, "seed {seed}");
    }
}

/// Rule 1: the admin refuses what it cannot do, saying why; a follower refuses naming the
/// admin it follows. Nothing changes hands.
#[test]
fn a_handover_that_cannot_be_done_is_refused_by_reason() {
    let mut net = Net::with_workers(3, 3, 1, fast_config());
    let admin = wait_for_admin(&mut net, 5_000);
    net.run_until(net.now + 200);
    let a = net.index_of(&admin);
    let follower = (a + 1) % 3;
    let refusal = |net: &mut Net, at: usize, to: Option<&str>| {
        let since = net.history.len();
        let to = to.map(NodeId::from);
        net.apply(at, Event::TransferAdmin { to, request: 3 });
        net.notices_since(since, at)
            .into_iter()
            .find_map(|(_, n)| match n {
                Notice::HandoverRefused {
                    request: 3,
                    reason,
                    admin,
                } => Some((reason, admin)),
                _ => None,
            })
    };
    let worker = "n3";
    assert_eq!(
        refusal(&mut net, a, Some(worker)),
        Some((HandoverRefusal::NotAVoter, Some(admin.clone())))
    );
    assert_eq!(
        refusal(&mut net, a, Some(admin.as_str())),
        Some((HandoverRefusal::NotAVoter, Some(admin.clone())))
    );
    assert_eq!(
        refusal(&mut net, follower, None),
        Some((HandoverRefusal::NotAdmin, Some(admin.clone())))
    );
    // A voter that stopped acknowledging is not up to date.
    let other = (a + 2) % 3;
    net.crash(other);
    net.run_until(net.now + 400);
    let other = NodeId::from(format!("n{other}"));
    assert_eq!(
        refusal(&mut net, a, Some(other.as_str())),
        Some((HandoverRefusal::NotUpToDate, Some(admin.clone())))
    );
    assert_eq!(net.nodes[a].as_ref().unwrap().role(), Role::Admin);
}

/// Rule 4 on one voter: a transfer vote request that arrives before the admin's step-down is
/// neither granted (the promise to the admin still runs) nor refused; the step-down answers it
/// with a grant. Without `transfer` the same request is refused at once.
#[test]
fn a_transfer_request_ahead_of_the_step_down_waits_for_it() {
    for transfer in [true, false] {
        let mut net = Net::new(1, 3, fast_config());
        let admin = wait_for_admin(&mut net, 5_000);
        net.run_until(net.now + 100);
        let a = net.index_of(&admin);
        let (b, c) = ((a + 1) % 3, (a + 2) % 3);
        let core: &Core = net.nodes[c].as_ref().unwrap();
        let e = core.electorate().unwrap();
        let request = Message::VoteRequest {
            term: core.term() + 1,
            electorate_version: e.version,
            electorate_term: e.term,
            electorate_hash: e.fingerprint(),
            electorate_stamp: core.stamp(),
            transfer,
        };
        let term = core.term();
        let since = net.history.len();
        net.apply(
            c,
            Event::Message {
                from: net.ids[b].clone(),
                msg: request,
            },
        );
        let replies = |net: &Net, since: usize| -> Vec<bool> {
            net.history[since..]
                .iter()
                .filter(|(_, n, _)| *n == c)
                .flat_map(|(_, _, out)| out.iter())
                .filter_map(|cmd| match cmd {
                    Command::Send {
                        msg: Message::VoteReply { granted, .. },
                        ..
                    } => Some(*granted),
                    _ => None,
                })
                .collect()
        };
        if !transfer {
            assert_eq!(replies(&net, since), [false], "refused at once");
            continue;
        }
        assert_eq!(replies(&net, since), Vec::<bool>::new(), "kept");
        net.apply(
            c,
            Event::Message {
                from: admin.clone(),
                msg: Message::StepDown {
                    term,
                    successor: None,
                },
            },
        );
        assert_eq!(replies(&net, since), [true], "granted at the step-down");
    }
}

/// Rule 4 when the step-down is lost: two voters never hear it (their copies, broadcast and
/// direct, are dropped), so they keep the target's transfer request. Each answers it when its
/// promise to the old admin runs out, and the target wins the next term without anyone's
/// pre-vote — not a ranked election after a failed round. Before, the kept request waited for a
/// step-down that never came: the target's round failed (2 votes of 5) and the office went by
/// a ranked election a timeout later (seen on real processes: 2 graceful stops in 10 took
/// 3.5–3.8 s at 3 s timeouts).
#[test]
fn a_transfer_vote_kept_for_a_lost_step_down_is_answered_when_the_promise_ends() {
    let cfg = fast_config();
    let mut checked = 0;
    for seed in 0..40 {
        let mut net = Net::new(seed, 5, cfg.clone());
        let old = wait_for_admin(&mut net, 5_000);
        net.run_until(net.now + 200);
        let a = net.index_of(&old);
        let term = net.nodes[a].as_ref().unwrap().term();
        let since = net.history.len();
        let stopped_at = net.now;
        net.apply(a, Event::Shutdown);
        let target = handed_to(&net, since, a).flatten().expect("a target");
        let t = net.index_of(&target);
        let deaf: Vec<usize> = (0..5).filter(|&j| j != a && j != t).take(2).collect();
        net.drop_in_flight(a, &deaf);
        net.crash(a);
        let new = wait_for_admin(&mut net, 2_000);
        let took = net.now - stopped_at;
        assert_eq!(new, target, "seed {seed}: the target won");
        assert_eq!(
            net.nodes[t].as_ref().unwrap().term(),
            term + 1,
            "seed {seed}: in the next term"
        );
        // Within the promise (the minimum election timeout after the last heartbeat) and a
        // few one-way delays, and nobody ran a round of its own.
        assert!(
            took <= cfg.election_timeout_min_ms + 60,
            "seed {seed}: took {took} ms"
        );
        for j in 0..5 {
            if j != a {
                assert!(!pre_voted(&net, since, j), "seed {seed}: n{j} pre-voted");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 40);
}

/// Rule 2: the step-down goes to every voter on its own link as well as by broadcast, and a
/// second copy is not counted as a refusal.
#[test]
fn the_step_down_goes_to_each_voter_directly_and_a_second_copy_is_quiet() {
    let mut net = Net::new(3, 5, fast_config());
    let old = wait_for_admin(&mut net, 5_000);
    net.run_until(net.now + 100);
    let a = net.index_of(&old);
    let since = net.history.len();
    net.apply(a, Event::Shutdown);
    let out: Vec<&Command> = net.history[since..]
        .iter()
        .filter(|(_, n, _)| *n == a)
        .flat_map(|(_, _, out)| out.iter())
        .collect();
    let direct: Vec<&NodeId> = out
        .iter()
        .filter_map(|c| match c {
            Command::Send {
                to,
                msg: Message::StepDown { .. },
            } => Some(to),
            _ => None,
        })
        .collect();
    assert_eq!(direct.len(), 4, "{out:?}");
    assert!(out.iter().any(|c| matches!(
        c,
        Command::Broadcast {
            msg: Message::StepDown { .. }
        }
    )));
    net.crash(a);
    // Every copy delivered: no refusal counted for a step-down anywhere.
    net.run_until(net.now + 100);
    for j in (0..5).filter(|&j| j != a) {
        let refused = net.history[since..].iter().any(|(_, n, out)| {
            *n == j
                && out.iter().any(|c| {
                    matches!(c, Command::Notice(Notice::Refused { message, .. }) if message == "step_down")
                })
        });
        let notes: Vec<_> = net.history[since..]
            .iter()
            .filter(|(_, n, _)| *n == j)
            .flat_map(|(_, _, out)| out.iter())
            .filter(|c| matches!(c, Command::Notice(Notice::Refused { .. })))
            .collect();
        assert!(
            !refused,
            "n{j} counted a copy of the step-down as refused: {notes:?}"
        );
    }
}

/// Rule 3: `timeout_now` from anyone but the admin (or for another term) is refused and starts
/// nothing.
#[test]
fn timeout_now_from_anyone_but_the_admin_is_refused() {
    let mut net = Net::new(2, 3, fast_config());
    let admin = wait_for_admin(&mut net, 5_000);
    net.run_until(net.now + 100);
    let a = net.index_of(&admin);
    let (b, c) = ((a + 1) % 3, (a + 2) % 3);
    let term = net.nodes[c].as_ref().unwrap().term();
    for (sender, t) in [(b, term), (a, term + 1), (a, term - 1)] {
        let since = net.history.len();
        net.apply(
            c,
            Event::Message {
                from: net.ids[sender].clone(),
                msg: Message::TimeoutNow { term: t },
            },
        );
        let notices = net.notices_since(since, c);
        assert!(
            matches!(notices.as_slice(), [(_, Notice::Refused { .. })]),
            "{sender} {t}: {notices:?}"
        );
        assert_eq!(net.nodes[c].as_ref().unwrap().term(), term);
    }
}

/// Generated adversity: on each seed, stops and transfers at random moments among partitions,
/// crashes, restarts and 10 % loss with 1–30 ms delays (so step-downs and vote requests cross).
/// The network checks one admin per term, no overlapping leases and one vote per term on
/// every step; at the end, healed, the cluster agrees on an admin.
#[test]
fn handovers_among_faults_keep_every_invariant() {
    for seed in 0..60 {
        let mut net = Net::new(seed, 5, fast_config());
        net.loss_pct = 10;
        net.delay_ms = (1, 30);
        wait_for_admin(&mut net, 10_000);
        for _ in 0..12 {
            let at = net.now + 50 + net.rand(400);
            net.run_until(at);
            let i = net.rand(5) as usize;
            match net.rand(6) {
                0 | 1 => {
                    if let Some(admin) = net.agreed_admin() {
                        let a = net.index_of(&admin);
                        let to = (net.rand(2) == 0).then(|| net.ids[i].clone());
                        net.apply(a, Event::TransferAdmin { to, request: 1 });
                    }
                }
                2 => {
                    net.apply(i, Event::Shutdown);
                    net.crash(i);
                }
                3 => net.restart(i),
                4 => net.partition(&[i, (i + 1) % 5]),
                _ => net.heal(),
            }
        }
        net.heal();
        for i in 0..5 {
            net.restart(i);
        }
        net.loss_pct = 0;
        wait_for_admin(&mut net, 20_000);
    }
}
