//! Determinism and event sourcing: the same seed gives the same commands; a node's event log,
//! replayed from scratch or from a snapshot plus its tail, gives the same state and commands.

use crate::support;

use chorus_core::{Command, Core};
use support::{fast_config, Net};

fn faulty_run(seed: u64) -> Net {
    let mut net = Net::with_workers(seed, 5, 1, fast_config());
    net.loss_pct = 5;
    net.run_until(1_000);
    net.partition(&[0, 1]);
    net.run_until(2_000);
    net.crash(2);
    net.run_until(2_500);
    net.heal();
    net.restart(2);
    net.run_until(5_000);
    net
}

#[test]
fn same_seed_same_commands_different_seed_different() {
    let a = faulty_run(11);
    let b = faulty_run(11);
    assert!(
        a.history.len() > 1_000,
        "the run does something: {} steps",
        a.history.len()
    );
    assert_eq!(a.history, b.history);
    let c = faulty_run(12);
    assert_ne!(a.history, c.history);
}

fn replay(core: &mut Core, log: &[(u64, chorus_core::Event)]) -> Vec<Vec<Command>> {
    log.iter()
        .map(|(t, e)| {
            // The log holds the signatures the runtime answered with: step, do not sign again.
            let mut out = Vec::new();
            core.step(*t, e.clone(), &mut out);
            out
        })
        .collect()
}

#[test]
fn replaying_a_log_reproduces_state_and_commands() {
    let net = faulty_run(7);
    for i in 0..net.ids.len() {
        let recorded: Vec<&Vec<Command>> = net
            .history
            .iter()
            .filter(|(_, n, _)| *n == i)
            .map(|(_, _, c)| c)
            .collect();
        let log = &net.logs[i];
        // Node 2 crashed: its log also holds the steps it took before, all recorded too.
        assert_eq!(
            recorded.len(),
            log.len(),
            "n{i}: one history entry per logged event"
        );
        let mut fresh = net.fresh_core(i);
        let replayed = replay(&mut fresh, log);
        let replayed_refs: Vec<&Vec<Command>> = replayed.iter().collect();
        assert_eq!(
            replayed_refs, recorded,
            "n{i}: replay gives the recorded commands"
        );
        assert_eq!(
            Some(&fresh),
            net.nodes[i].as_ref(),
            "n{i}: replay gives the live state"
        );
    }
}

#[test]
fn snapshot_plus_tail_equals_full_replay() {
    let net = faulty_run(9);
    let log = &net.logs[3];
    let mid = log.len() / 2;
    let mut full = net.fresh_core(3);
    replay(&mut full, &log[..mid]);
    let snapshot = full.snapshot();
    let full_tail = replay(&mut full, &log[mid..]);

    let mut restored = Core::restore(&snapshot).expect("snapshot decodes");
    let restored_tail = replay(&mut restored, &log[mid..]);
    assert_eq!(
        restored_tail, full_tail,
        "same future commands (the RNG was in the snapshot)"
    );
    assert_eq!(restored, full);
    assert_eq!(
        restored.snapshot(),
        full.snapshot(),
        "byte-identical snapshots"
    );
}
