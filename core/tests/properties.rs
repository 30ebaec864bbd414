//! Property tests over random fault schedules on the in-test network of pure cores.
//!
//! Every step of every schedule checks election safety (one admin per term), lease safety (no two
//! unexpired leases at once, in global time) and vote safety (one granted vote per node per
//! term on the wire, restarts included); each schedule then heals and checks liveness; a
//! separate property checks term stability. Faults reach every node, workers included, and every
//! node runs its own clock (offset, and rate drift within `max_clock_drift_ppm`).
//!
//! Failures are persisted: proptest writes the failing case's seed to
//! `core/tests/properties.proptest-regressions` (committed), and every later run replays the
//! cases listed there before new ones. See docs/testing.md for replaying one case by hand.

use crate::support;

use chorus_core::{Command, Message};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use support::{fast_config, Clocks, Net};

/// Persist failing cases next to this file (`properties.proptest-regressions`), to be committed.
fn persisted(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

/// The most nodes a schedule has: 7 voters and 2 workers.
const MAX_NODES: usize = 9;

/// After a full heal with everyone up, an admin is known to all within this bound (ms). With the
/// fast timings (150–300 ms elections, 100 ms discovery) that is ten maximum election timeouts.
const LIVENESS_BOUND_MS: u64 = 3_000;

#[derive(Clone, Debug)]
enum Fault {
    Partition(Vec<bool>),
    OneWay(usize, usize),
    Crash(usize),
    Restart(usize),
    Heal,
    Loss(u64),
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        prop::collection::vec(any::<bool>(), MAX_NODES).prop_map(Fault::Partition),
        (0..MAX_NODES, 0..MAX_NODES).prop_map(|(a, b)| Fault::OneWay(a, b)),
        (0..MAX_NODES).prop_map(Fault::Crash),
        (0..MAX_NODES).prop_map(Fault::Restart),
        Just(Fault::Heal),
        (0u64..40).prop_map(Fault::Loss),
    ]
}

/// Applies `f` to a network of `n` nodes, voters and workers alike.
fn inflict(net: &mut Net, n: usize, f: &Fault) {
    match f {
        Fault::Partition(mask) => {
            let group: Vec<usize> = (0..n).filter(|i| mask[*i]).collect();
            net.partition(&group);
        }
        Fault::OneWay(a, b) if a % n != b % n => net.cut_link(a % n, b % n),
        Fault::OneWay(..) => {}
        Fault::Crash(i) => net.crash(i % n),
        Fault::Restart(i) => net.restart(i % n),
        Fault::Heal => net.heal(),
        Fault::Loss(p) => net.loss_pct = *p,
    }
}

proptest! {
    #![proptest_config(persisted(1000))]

    #[test]
    fn safety_and_liveness_under_random_faults(
        seed in any::<u64>(),
        n in 3usize..=7,
        workers in 0usize..=2,
        schedule in prop::collection::vec((1u64..600, fault()), 0..14),
    ) {
        let mut net = Net::build(seed, n, workers, fast_config(), Clocks::Drifting);
        let mut t = 0;
        for (gap, f) in &schedule {
            t += gap;
            net.run_until(t);
            inflict(&mut net, n + workers, f);
        }
        // Heal everything, bring everyone back, and give the cluster the stated bound.
        net.heal();
        net.loss_pct = 0;
        for i in 0..n + workers {
            net.restart(i);
        }
        let healed = net.now;
        let mut elected_at = None;
        while net.now < healed + LIVENESS_BOUND_MS {
            net.run_until(net.now + 10);
            if net.agreed_admin().is_some() {
                elected_at = Some(net.now - healed);
                break;
            }
        }
        prop_assert!(
            elected_at.is_some(),
            "seed {seed}: no admin known to all {LIVENESS_BOUND_MS} ms after heal; views: {:?}",
            net.live().map(|c| (c.id().clone(), c.role(), c.term(), c.admin().cloned())).collect::<Vec<_>>()
        );
        let admin = net.agreed_admin().unwrap();
        let holder = net.live().find(|c| *c.id() == admin).unwrap();
        prop_assert_eq!(holder.role(), chorus_core::Role::Admin);
    }

    #[test]
    fn a_node_back_from_a_minority_does_not_raise_the_term(
        seed in any::<u64>(),
        n in 3usize..=7,
        isolated_ms in 1u64..20_000,
        pick in 0usize..7,
    ) {
        let mut net = Net::build(seed, n, 0, fast_config(), Clocks::Drifting);
        net.run_until(2_000);
        let admin = net.agreed_admin().expect("a healthy cluster elects an admin");
        let term = net.max_term();
        let admin_ix: usize = admin.as_str()[1..].parse().unwrap();
        // Isolate a follower, let it try to stand for a while, then bring it back.
        let lonely = if pick % n == admin_ix { (admin_ix + 1) % n } else { pick % n };
        net.partition(&[lonely]);
        net.run_until(net.now + isolated_ms);
        prop_assert_eq!(net.nodes[lonely].as_ref().unwrap().term(), term, "pre-vote kept its term");
        net.heal();
        net.run_until(net.now + 1_000);
        prop_assert_eq!(net.max_term(), term);
        prop_assert_eq!(net.agreed_admin(), Some(admin));
    }
}

proptest! {
    #![proptest_config(persisted(300))]

    /// The nasty case for leases: a voter that acknowledged the admin crashes and comes straight
    /// back, on a clock that jumped ahead, while a node cut off from the admin asks for votes.
    /// Every promise the voter made before the crash now looks expired to it: it must still
    /// grant nothing (no pre-vote, no vote, judged from the replies it sends) for a minimum
    /// election timeout after the restart, and the network's lease check must hold.
    #[test]
    fn a_restarted_voter_keeps_promises_it_forgot(
        seed in any::<u64>(),
        wait in 0u64..200,
        jump in 0u64..10_000,
    ) {
        let mut net = Net::build(seed, 3, 0, fast_config(), Clocks::Drifting);
        net.run_until(2_000);
        let admin: usize = net.agreed_admin().expect("elected").as_str()[1..].parse().unwrap();
        let (deaf, voter) = ((admin + 1) % 3, (admin + 2) % 3);
        net.cut_link(admin, deaf);
        net.run_until(net.now + wait);
        net.crash(voter);
        let restarted_at = net.now;
        net.restart_with_clock_jump(voter, jump);
        let min = fast_config().election_timeout_min_ms;
        let clock = net.clocks[voter];
        let promise_ends = clock.global(clock.local(restarted_at) + min);
        let steps_before = net.history.len();
        net.run_until(net.now + 2_000);
        let early: Vec<_> = net.history[steps_before..]
            .iter()
            .filter(|(t, i, _)| *i == voter && *t < promise_ends)
            .flat_map(|(t, _, out)| out.iter().map(move |c| (t, c)))
            .filter(|(_, c)| matches!(c, Command::Send {
                msg: Message::VoteReply { granted: true, .. }
                    | Message::PreVoteReply { granted: true, .. },
                ..
            }))
            .collect();
        prop_assert!(early.is_empty(), "seed {seed}: n{voter} granted within its restart promise: {early:?}");
    }
}
