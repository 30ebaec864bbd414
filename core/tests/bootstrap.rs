//! Issue 10, cases 1–4, on the in-test network of pure cores: uneven discovery, late voters,
//! one-node defaults, and voters whose election timeouts differ. Every step checks one admin per
//! (cluster, term), no overlapping leases and one vote per term (`support`); these tests add
//! what each case must end in.

use crate::support;

use chorus_core::{Command, Config, Core, Notice, Refusal};
use support::{fast_config, Clocks, Net, Start};

fn expect(n: u32) -> Config {
    Config {
        bootstrap_expect: n,
        ..fast_config()
    }
}

/// As [`expect`], without autopilot: the electorate stays the one bootstrap agreed.
fn expect_fixed(n: u32) -> Config {
    Config {
        autopilot: false,
        ..expect(n)
    }
}

/// The electorates of the live nodes that have one, as (version, fingerprint).
fn electorates(net: &Net) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = net
        .live()
        .filter_map(Core::electorate)
        .map(|e| (e.version, e.fingerprint()))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn refusals(net: &Net, reason: Refusal) -> usize {
    net.history
        .iter()
        .flat_map(|(_, _, out)| out)
        .filter(|c| matches!(c, Command::Notice(Notice::Refused { reason: r, .. }) if *r == reason))
        .count()
}

/// Case 1: five voters expecting three, links coming up in a random order over 300 ms. One
/// electorate forms, of exactly three members, and all five hold it; one admin is elected.
#[test]
fn uneven_discovery_gives_one_electorate_of_exactly_expect_members() {
    for seed in 0..300 {
        let start = Start {
            configs: vec![Some(expect_fixed(3)); 5],
            link_spread_ms: 300,
            late: vec![],
        };
        let mut net = Net::build_with(seed, 5, 0, fast_config(), Clocks::Shared, start);
        net.run_until(5_000);
        let all = electorates(&net);
        assert_eq!(all.len(), 1, "seed {seed}: electorates {all:?}");
        let e = net.live().find_map(Core::electorate).unwrap().clone();
        assert_eq!(e.len(), 3, "seed {seed}: {e:?}");
        for c in net.live() {
            assert!(
                c.electorate().is_some(),
                "seed {seed}: {} has no electorate: {c:#?}",
                c.id()
            );
        }
        assert!(net.agreed_admin().is_some(), "seed {seed}: no agreed admin");
    }
}

/// Case 2: three voters (expect 3) form the cluster; two late voters (also expect 3) meet each
/// other and one founder first. They join as standbys of the existing electorate and never found
/// their own; when the admin is cut off and returns, there is still one admin per term.
#[test]
fn late_voters_join_the_existing_cluster() {
    for seed in 0..100 {
        let start = Start {
            configs: vec![Some(expect(3)); 5],
            link_spread_ms: 0,
            late: vec![3, 4],
        };
        let mut net = Net::build_with(seed, 5, 0, fast_config(), Clocks::Shared, start);
        net.run_until(2_000);
        let admin = net.agreed_admin().expect("the first three elect");
        let founders = electorates(&net);
        assert_eq!(founders.len(), 1);
        // The late pair sees each other and n0 only, at first.
        for late in [3, 4] {
            net.cut_link(late, 1);
            net.cut_link(1, late);
            net.cut_link(late, 2);
            net.cut_link(2, late);
        }
        net.start(3);
        net.start(4);
        net.run_until(3_000);
        assert_eq!(
            electorates(&net),
            founders,
            "seed {seed}: the late pair founded"
        );
        // The admin goes quiet for a while, then returns.
        let a: usize = admin.as_str()[1..].parse().unwrap();
        net.crash(a);
        net.run_until(6_000);
        net.heal();
        net.restart(a);
        net.run_until(12_000);
        let genesis: Vec<u64> = net
            .live()
            .filter_map(|c| c.electorate().map(|e| e.genesis))
            .collect();
        assert!(
            genesis.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: {genesis:?}"
        );
        assert!(net.agreed_admin().is_some(), "seed {seed}: no agreed admin");
    }
}

/// Case 3, in the core: nodes that were each told to found a cluster alone do so — and every
/// one that meets a node of another says so (`foreign_cluster`) and never follows it.
#[test]
fn clusters_founded_apart_report_each_other_and_stay_apart() {
    let start = Start {
        configs: vec![Some(expect(1)); 3],
        link_spread_ms: 0,
        late: vec![],
    };
    let mut net = Net::build_with(1, 3, 0, fast_config(), Clocks::Shared, start);
    net.run_until(5_000);
    assert_eq!(electorates(&net).len(), 3, "each founded its own");
    assert!(refusals(&net, Refusal::ForeignCluster) > 0);
    for c in net.live() {
        assert_eq!(
            c.admin(),
            Some(c.id()),
            "{} follows another cluster",
            c.id()
        );
    }
}

/// Case 4: one voter with a ten times longer minimum election timeout than the others. Its
/// lease must rest on the others' shorter promises: after it is cut off, the rest elect while
/// its lease would otherwise still run (the network checks no two leases overlap).
#[test]
fn the_lease_holds_when_voters_promise_for_different_times() {
    let slow = Config {
        election_timeout_min_ms: 1_500,
        election_timeout_max_ms: 1_600,
        heartbeat_interval_ms: 50,
        ..expect(3)
    };
    let fast = Config {
        // Long slots keep the slow node ahead in rank: it should win the first election.
        ..expect(3)
    };
    for seed in 0..100 {
        let start = Start {
            configs: vec![Some(slow.clone()), Some(fast.clone()), Some(fast.clone())],
            link_spread_ms: 0,
            late: vec![],
        };
        let mut net = Net::build_with(seed, 3, 0, fast_config(), Clocks::Shared, start);
        net.run_until(1_000);
        let Some(admin) = net.agreed_admin() else {
            continue;
        };
        let a: usize = admin.as_str()[1..].parse().unwrap();
        net.partition(&[a]);
        net.run_until(4_000);
        net.heal();
        net.run_until(8_000);
        assert!(net.agreed_admin().is_some(), "seed {seed}");
    }
}

/// Issue 36, cold start: once bootstrap agreed the first electorate, nobody can be admin yet
/// (no term was ever held), so waiting out the discovery timeout is pointless: five voters
/// elect within a few election windows of the agreement, long before a 10 s discovery timeout.
/// Before, every node waited for it (~2.1 s of a measured 2.13 s cold start at 2 s).
#[test]
fn a_cold_start_elects_as_soon_as_bootstrap_agrees() {
    for seed in 0..100 {
        let config = Config {
            discovery_timeout_ms: 10_000,
            ..expect_fixed(5)
        };
        let mut net = Net::new(seed, 5, config.clone());
        let mut agreed = None;
        while net.now < 9_000 {
            net.run_until(net.now + 5);
            let all_admin = net.agreed_admin().is_some();
            if all_admin {
                agreed = Some(net.now);
                break;
            }
        }
        let at = agreed.unwrap_or_else(|| panic!("seed {seed}: no admin before discovery ends"));
        let bound = 3 * config.election_timeout_max_ms;
        assert!(
            at <= bound,
            "seed {seed}: agreed at {at} ms (bound {bound} ms)"
        );
    }
}

/// Issue 51, finding 11: a cluster founded alone (`bootstrap_expect` 1) grows by autopilot.
/// Three voters started later, each with another `bootstrap_expect` (3, 2, 5: whatever an
/// operator gives a node that joins), join it as standbys and are promoted one at a time until
/// the electorate holds all four — one cluster, one genesis. Before, each joiner refused the
/// founder's version-1 electorate of one as `settings_mismatch` and stayed out for good.
#[test]
fn a_cluster_founded_alone_grows_by_autopilot() {
    let joiner = |k| Config {
        stabilization_time_ms: 300,
        ..expect(k)
    };
    for seed in 0..50 {
        let start = Start {
            configs: vec![
                Some(joiner(1)),
                Some(joiner(3)),
                Some(joiner(2)),
                Some(joiner(5)),
            ],
            link_spread_ms: 0,
            late: vec![1, 2, 3],
        };
        let mut net = Net::build_with(seed, 4, 0, fast_config(), Clocks::Shared, start);
        net.run_until(1_000);
        assert_eq!(net.agreed_admin().map(|a| a.to_string()), Some("n0".into()));
        for late in 1..4 {
            net.start(late);
            net.run_until(net.now + 100);
        }
        net.run_until(net.now + 10_000);
        assert_eq!(
            refusals(&net, Refusal::SettingsMismatch),
            0,
            "seed {seed}: a joiner refused the founder's electorate"
        );
        let all = electorates(&net);
        assert_eq!(all.len(), 1, "seed {seed}: electorates {all:?}");
        let e = net.live().find_map(Core::electorate).unwrap();
        assert_eq!(e.len(), 4, "seed {seed}: not grown: {e:?}");
        assert!(net.agreed_admin().is_some(), "seed {seed}: no agreed admin");
    }
}
