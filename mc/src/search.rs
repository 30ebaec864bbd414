//! Breadth-first search over worlds, each state expanded once (by fingerprint).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::check::{Reached, Violation};
use crate::world::{Action, Model, World};

/// How far a search got.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Deepest level fully expanded.
    pub depth: usize,
    /// Distinct states found.
    pub states: u64,
    /// Transitions taken (states found again included).
    pub transitions: u64,
    /// Wall time so far.
    pub elapsed: Duration,
    /// Distinct states after each level: (depth, states, seconds).
    pub levels: Vec<(usize, u64, f64)>,
}

/// What a search found.
#[derive(Debug)]
pub enum Outcome {
    /// No invariant broke within the bounds.
    Clean {
        /// How far it got.
        stats: Stats,
        /// What it saw happen (see [`Reached`]).
        reached: Reached,
        /// Whether every level up to the depth asked for was expanded (false: stopped at the
        /// state cap).
        complete: bool,
    },
    /// A counterexample: the shortest path to it, one line per action with the state after.
    Violated {
        /// The invariant broken.
        violation: Violation,
        /// The path: (action, state summary after it).
        path: Vec<(String, String)>,
        /// How far the search got.
        stats: Stats,
    },
}

/// Explores `model` breadth-first to `max_depth` actions, or until `max_states` states; calls
/// `progress` after each level.
pub fn explore(
    model: &Model,
    max_depth: usize,
    max_states: u64,
    mut progress: impl FnMut(&Stats),
) -> Outcome {
    let started = Instant::now();
    let mut stats = Stats::default();
    let root = match World::start(model) {
        Ok(w) => w,
        Err(violation) => {
            return Outcome::Violated {
                violation,
                path: Vec::new(),
                stats,
            }
        }
    };
    let mut reached = Reached(root.ghost.reached.0);
    let root_fp = root.fingerprint();
    // Each state's parent and the action that led to it: a counterexample is replayed from
    // the root along them.
    let mut parents: HashMap<u128, (u128, Action)> = HashMap::new();
    parents.insert(root_fp, (root_fp, Action::Heal));
    let mut frontier = vec![(root_fp, root.clone())];
    stats.states = 1;
    let mut complete = true;
    'levels: for depth in 1..=max_depth {
        let mut next = Vec::new();
        for (fp, w) in &frontier {
            for action in w.actions(model) {
                let mut w2 = w.clone();
                w2.ghost.reached = Reached::default();
                let result = w2.apply(&action);
                stats.transitions += 1;
                reached.0 |= w2.ghost.reached.0;
                if let Err(violation) = result {
                    stats.elapsed = started.elapsed();
                    let mut actions = chain(&parents, root_fp, *fp);
                    actions.push(action);
                    let (mut path, _) = replay(&root, &actions);
                    path.push((format!("VIOLATION {violation}"), String::new()));
                    return Outcome::Violated {
                        violation,
                        path,
                        stats,
                    };
                }
                let fp2 = w2.fingerprint();
                if let std::collections::hash_map::Entry::Vacant(e) = parents.entry(fp2) {
                    e.insert((*fp, action));
                    stats.states += 1;
                    // The last level is counted, checked and deduplicated, never expanded.
                    if depth < max_depth {
                        next.push((fp2, w2));
                    }
                    if stats.states >= max_states {
                        complete = false;
                        break 'levels;
                    }
                }
            }
        }
        stats.depth = depth;
        stats.elapsed = started.elapsed();
        stats
            .levels
            .push((depth, stats.states, stats.elapsed.as_secs_f64()));
        progress(&stats);
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    stats.elapsed = started.elapsed();
    Outcome::Clean {
        stats,
        reached,
        complete,
    }
}

/// The actions from the root to `fp`.
fn chain(parents: &HashMap<u128, (u128, Action)>, root: u128, mut fp: u128) -> Vec<Action> {
    let mut actions = Vec::new();
    while fp != root {
        let (parent, action) = &parents[&fp];
        actions.push(action.clone());
        fp = *parent;
    }
    actions.reverse();
    actions
}

/// Replays `actions` from `root`, describing each and the state after it, up to the first
/// broken invariant (returned beside the path).
pub(crate) fn replay(
    root: &World,
    actions: &[Action],
) -> (Vec<(String, String)>, Option<Violation>) {
    let mut w = root.clone();
    let mut path = vec![("start".to_owned(), w.summary())];
    for a in actions {
        let line = w.describe(a);
        let r = w.apply(a);
        path.push((line, w.summary()));
        if let Err(v) = r {
            return (path, Some(v));
        }
    }
    (path, None)
}
