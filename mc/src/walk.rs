//! Random walks: long seeded paths through the same actions and invariants, for depths a
//! breadth-first search cannot reach; a failing walk is shrunk to the fewest actions that still
//! break the same invariant.

use crate::check::{Reached, Violation};
use crate::world::{Action, Model, World};

/// What a batch of walks found.
#[derive(Debug, Default)]
pub struct WalkReport {
    /// Walks run.
    pub walks: u64,
    /// Actions taken in all.
    pub actions: u64,
    /// What they saw happen.
    pub reached: Reached,
    /// The first failing walk: its seed, what broke, its length, and the shrunk path
    /// (action, state after).
    pub failure: Option<Failure>,
}

/// A failing walk, shrunk.
#[derive(Debug)]
pub struct Failure {
    /// The walk's seed.
    pub seed: u64,
    /// What broke (on the shrunk path).
    pub violation: Violation,
    /// Actions before shrinking.
    pub original_len: usize,
    /// The shrunk path, described: (action, state after).
    pub path: Vec<(String, String)>,
}

/// SplitMix64: tiny, and fixed by definition, so a seed names the same walk everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Runs walks `seeds` of at most `length` actions each; stops at the first failure, which it
/// shrinks. `progress` is told (walks done, actions) now and then.
pub fn walks(
    model: &Model,
    seeds: std::ops::Range<u64>,
    length: usize,
    mut progress: impl FnMut(u64, u64),
) -> Result<WalkReport, Violation> {
    let root = World::start(model)?;
    let mut report = WalkReport::default();
    for seed in seeds {
        let (actions, result) = walk(model, &root, seed, length);
        report.walks += 1;
        report.actions += actions.len() as u64;
        match result {
            Ok(reached) => report.reached.0 |= reached.0,
            Err(v) => {
                let original_len = actions.len();
                let shrunk = shrink(&root, actions, v.invariant);
                let (path, violation) = crate::search::replay(&root, &shrunk);
                report.failure = Some(Failure {
                    seed,
                    violation: violation.unwrap_or(v),
                    original_len,
                    path,
                });
                return Ok(report);
            }
        }
        if report.walks % 1000 == 0 {
            progress(report.walks, report.actions);
        }
    }
    Ok(report)
}

/// One walk: at each state a kind of action is drawn uniformly among those possible (deliver,
/// settle, let time pass to the next timer, fire any node's timer, lose or duplicate,
/// partition or heal, crash or restart, a membership change, a handover or graceful stop),
/// then one action of that kind.
fn walk(
    model: &Model,
    root: &World,
    seed: u64,
    length: usize,
) -> (Vec<Action>, Result<Reached, Violation>) {
    let mut rng = Rng(seed);
    let mut w = root.clone();
    let mut taken = Vec::new();
    let mut reached = Reached::default();
    for _ in 0..length {
        let mut kinds: [Vec<Action>; 9] = Default::default();
        for a in w.actions(model) {
            let k = match a {
                Action::Deliver(_) => 0,
                Action::Settle => 1,
                Action::Fire(_) => 2,
                Action::Drop(_) | Action::Duplicate(_) => 3,
                Action::Split(_) | Action::Heal => 4,
                Action::Crash(_) | Action::Restart(_) => 5,
                Action::Change { .. } => 6,
                Action::Advance => 7,
                Action::Transfer { .. } | Action::Stop(_) => 8,
            };
            kinds[k].push(a);
        }
        let open: Vec<&Vec<Action>> = kinds.iter().filter(|k| !k.is_empty()).collect();
        if open.is_empty() {
            break;
        }
        let kind = open[rng.below(open.len())];
        let action = kind[rng.below(kind.len())].clone();
        let r = w.apply(&action);
        reached.0 |= w.ghost.reached.0;
        taken.push(action);
        if let Err(v) = r {
            return (taken, Err(v));
        }
    }
    (taken, Ok(reached))
}

/// Replays `actions` from `root`; the invariant broken, if any.
fn fails(root: &World, actions: &[Action]) -> Option<Violation> {
    let mut w = root.clone();
    for a in actions {
        if let Err(v) = w.apply(a) {
            return Some(v);
        }
    }
    None
}

/// Delta debugging: drops chunks of actions, halving the chunk size, while the same invariant
/// still breaks.
fn shrink(root: &World, mut actions: Vec<Action>, invariant: &str) -> Vec<Action> {
    let mut chunk = actions.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        let mut removed = false;
        while i < actions.len() {
            let end = (i + chunk).min(actions.len());
            let mut trial = actions[..i].to_vec();
            trial.extend_from_slice(&actions[end..]);
            if fails(root, &trial).is_some_and(|v| v.invariant == invariant) {
                actions = trial;
                removed = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !removed {
            return actions;
        }
        if !removed {
            chunk = chunk.div_ceil(2);
        }
    }
}
