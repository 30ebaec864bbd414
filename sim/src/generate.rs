//! Scenario generation and shrinking (`chorus-sim fuzz`): from a seed, a whole [`Scenario`] —
//! nodes, per-node settings, faults, membership changes, a task workload — run on the
//! discrete-event engine with the checker; a failing one is shrunk to a small scenario that
//! still breaks the same invariant on the same seed, and written as TOML.
//!
//! Everything is drawn from the seed on a stream of its own, so the same seed (and options)
//! gives the same scenario, and so the same trace.

use chorus_core::rng::below;
use chorus_core::Config;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::run::{run, Engine};
use crate::scenario::{
    Action, Network, NodeRef, NodeSettings, Scenario, Scheduled, Target, TaskWorkload,
};

/// What the generator may draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Operator `add`/`remove` actions, standbys joining, and autopilot (on or off by seed).
    pub membership: bool,
    /// Per-node heartbeat intervals up to just below the node's own lease, beside other nodes'
    /// shorter election timeouts (issue 32, finding 3). Off: every heartbeat interval is at
    /// most a third of the shortest minimum election timeout of any node.
    pub mixed_timing: bool,
    /// A small task workload on some seeds.
    pub tasks: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            membership: true,
            mixed_timing: false,
            tasks: true,
        }
    }
}

impl Options {
    /// The options as `chorus-sim fuzz` flags (for the header of a saved scenario).
    pub fn flags(&self) -> String {
        let mut out = Vec::new();
        if !self.membership {
            out.push("--no-membership");
        }
        if self.mixed_timing {
            out.push("--mixed-timing");
        }
        if !self.tasks {
            out.push("--no-tasks");
        }
        out.join(" ")
    }
}

/// The generator's own stream, apart from every stream the run draws from the same seed.
const STREAM: u64 = 0x6e7e_4a7e_5eed_0006;

/// Uniform in `[lo, hi]`.
/// The stream of the live-sandbox share of a generated workload (apart from `STREAM`).
const LIVE_STREAM: u64 = 0x11fe_5a4d_b0c5_0009;

fn range(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    lo + below(rng, hi.saturating_sub(lo) + 1)
}

/// True with probability `num / den`.
fn chance(rng: &mut ChaCha8Rng, num: u64, den: u64) -> bool {
    below(rng, den) < num
}

fn node(i: usize) -> NodeRef {
    NodeRef::One(i)
}

/// The stream of the grow-from-one draws, apart from [`STREAM`] so that every seed that does
/// not draw that history keeps the scenario it had before there was one.
const GROW_STREAM: u64 = 0x6e7e_4a7e_5eed_0051;

/// Draws the scenario of `seed`.
pub fn generate(seed: u64, opts: &Options) -> Scenario {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ STREAM);
    let grow_rng = &mut ChaCha8Rng::seed_from_u64(seed ^ GROW_STREAM);
    // A cluster founded alone (`bootstrap_expect` 1) and grown by autopilot: its standbys are
    // started with other values, as an operator starts a node that joins (issue 51, finding
    // 11: they refused the founder's electorate for good).
    let grow = opts.membership && chance(grow_rng, 1, 8);
    let nodes = range(rng, 3, 7) as usize;
    // The first electorate (bootstrap_expect), the standbys beside it (eligible, joining
    // late), and workers for the rest.
    let founders = range(rng, 3, nodes.min(5) as u64) as usize;
    // Fewer standbys than founders: bootstrap's operator promise is that `bootstrap_expect` is
    // more than half of the eligible nodes that start (`core/src/bootstrap.rs`). Without it,
    // standbys starting while every founder is away found a second cluster, as designed
    // (`reproducers/late-standbys-second-cluster.toml`): not a scenario the checker should
    // judge as a bug.
    let standbys = if opts.membership {
        range(rng, 0, (nodes - founders).min(founders - 1) as u64) as usize
    } else {
        0
    };
    // Growing from one, the promise is kept another way: every standby expects more nodes
    // than there are standbys, so standbys started while the founder is away found nothing
    // and wait for it.
    let (founders, standbys) = if grow {
        (1, range(grow_rng, 1, (nodes as u64 - 1).min(4)) as usize)
    } else {
        (founders, standbys)
    };
    let eligible = founders + standbys;

    // Second-scale timings, so a few simulated minutes hold many faults and elections.
    let min_ms = range(rng, 1_000, 4_000);
    let max_ms = min_ms + range(rng, 500, 3_000);
    let mut config = Config {
        heartbeat_interval_ms: range(rng, (min_ms / 6).max(100), min_ms / 3),
        election_timeout_min_ms: min_ms,
        election_timeout_max_ms: max_ms,
        discovery_timeout_ms: range(rng, 500, 3_000),
        autopilot: opts.membership && chance(rng, 1, 2) || grow,
        dead_voter_timeout_ms: range(rng, 5_000, 30_000),
        stabilization_time_ms: range(rng, 2_000, 10_000),
        ..Config::default()
    };
    if chance(rng, 1, 4) {
        config.confirmations = range(rng, 1, 3) as u32;
    }

    // Per-node settings: some nodes get election timeouts of their own (and, with mixed
    // timing, heartbeat intervals near their own lease).
    let mut node_settings = Vec::new();
    if chance(rng, 1, 2) {
        for i in 0..nodes {
            if !chance(rng, 1, 2) {
                continue;
            }
            let min_i = range(rng, 1_000, 4_000);
            let max_i = min_i + range(rng, 500, 3_000);
            node_settings.push(NodeSettings {
                nodes: vec![node(i)],
                election_timeout_min_ms: Some(min_i),
                election_timeout_max_ms: Some(max_i),
                heartbeat_interval_ms: if !opts.mixed_timing {
                    None
                } else if chance(rng, 1, 2) {
                    let lease = config.lease_for(min_i);
                    Some(range(rng, min_i / 3, lease * 95 / 100))
                } else {
                    Some(config.heartbeat_interval_ms.min(min_i / 3))
                },
                ..NodeSettings::default()
            });
        }
    }
    if !opts.mixed_timing && !node_settings.is_empty() {
        // Every heartbeat interval well below the shortest promise any voter gives.
        let shortest = node_settings
            .iter()
            .filter_map(|s| s.election_timeout_min_ms)
            .chain([min_ms])
            .min()
            .unwrap_or(min_ms);
        config.heartbeat_interval_ms = config.heartbeat_interval_ms.min(shortest / 3);
    }

    let mut bootstrap_expect = founders as u32;
    if grow {
        // The standbys' expectation, each above the standbys' count; a few get one of their
        // own. The founder alone expects itself.
        let above = |rng: &mut ChaCha8Rng| range(rng, standbys as u64 + 1, standbys as u64 + 3);
        bootstrap_expect = above(grow_rng) as u32;
        node_settings.push(NodeSettings {
            nodes: vec![node(0)],
            bootstrap_expect: Some(1),
            ..NodeSettings::default()
        });
        for i in 1..=standbys {
            if chance(grow_rng, 1, 2) {
                node_settings.push(NodeSettings {
                    nodes: vec![node(i)],
                    bootstrap_expect: Some(above(grow_rng) as u32),
                    ..NodeSettings::default()
                });
            }
        }
    }

    let mut network = Network::default();
    let lossy = chance(rng, 1, 3);
    if lossy {
        network.loss_ppm = range(rng, 0, 20_000) as u32;
        network.duplicate_ppm = range(rng, 0, 30_000) as u32;
        network.reorder_ppm = range(rng, 0, 50_000) as u32;
    }
    if chance(rng, 1, 3) {
        network.drift_ppm = range(rng, 1, u64::from(config.max_clock_drift_ppm)) as u32;
        network.drift_at_bound = chance(rng, 1, 2);
    }
    network.latency_ms = (range(rng, 1, 10), range(rng, 10, 60));

    let duration_ms = range(rng, 90, 180) * 1_000;
    let late: Vec<NodeRef> = (founders..eligible).map(node).collect();
    let mut events = Vec::new();
    let at =
        |rng: &mut ChaCha8Rng| range(rng, 5, duration_ms / 1_000 - 50) * 1_000 + below(rng, 1_000);
    for i in founders..eligible {
        events.push(Scheduled {
            at: range(rng, 3, 40) * 1_000,
            every: None,
            until: None,
            action: Action::Join {
                count: 0,
                nodes: vec![node(i)],
            },
        });
    }
    let faults = range(rng, 4, 14);
    for _ in 0..faults {
        let t = at(rng);
        for (dt, action) in fault(rng, nodes, (founders, eligible), opts) {
            events.push(Scheduled {
                at: t + dt,
                every: None,
                until: None,
                action,
            });
        }
    }
    // A fault-free tail: everything healed, the network clean, the crashed back.
    let tail = duration_ms - 45_000;
    for action in [
        Action::Heal,
        Action::Network {
            loss_ppm: 0,
            duplicate_ppm: 0,
            reorder_ppm: 0,
        },
        Action::Restart {
            target: Target::Crashed,
        },
    ] {
        events.push(Scheduled {
            at: tail,
            every: None,
            until: None,
            action,
        });
    }
    events.sort_by_key(|s| s.at);

    let tasks = (opts.tasks && chance(rng, 1, 3)).then(|| TaskWorkload {
        rate_per_s: Some(range(rng, 1, 10) as f64 / 10.0),
        duration_min: 100,
        duration_max: range(rng, 200, 3_000),
        timeout: 5_000,
        fail_ppm: 50_000,
        retryable_ppm: 50_000,
        slots: 2,
        // Cancels, at the submitter or (while it is down, and now and then anyway) through
        // another node, which keeps them for it (`chorus_core::task::ask`).
        cancel_ppm: range(rng, 0, 500_000) as u32,
        cancel_within: range(rng, 100, 30_000),
        // Live sandboxes (§4.8, invariant 9) in half the workloads, up to a third of the
        // submissions: drawn on a stream of their own, so every other draw is as it was.
        live_ppm: {
            let live = &mut ChaCha8Rng::seed_from_u64(seed ^ LIVE_STREAM);
            if chance(live, 1, 2) {
                range(live, 50_000, 330_000) as u32
            } else {
                0
            }
        },
        ..TaskWorkload::default()
    });

    let mut s = Scenario {
        name: format!("fuzz-{seed}"),
        description: format!(
            "Generated by chorus-sim fuzz from seed {seed}{}",
            match opts.flags() {
                f if f.is_empty() => String::new(),
                f => format!(" ({f})"),
            }
        ),
        nodes,
        voters: Some(eligible),
        duration_ms,
        config,
        bootstrap_expect: Some(bootstrap_expect),
        node_settings,
        network,
        equal_scores: chance(rng, 1, 4),
        peering: Default::default(),
        late_joiners: 0,
        late,
        start_spread: if chance(rng, 1, 4) {
            range(rng, 0, 5_000)
        } else {
            0
        },
        link_spread: if chance(rng, 1, 4) {
            range(rng, 0, 2_000)
        } else {
            0
        },
        apart_at_start: Vec::new(),
        hostile: Default::default(),
        events,
        tasks,
        liveness_bound_ms: None,
    };
    let lossy = lossy
        || s.events
            .iter()
            .any(|e| matches!(e.action, Action::Network { loss_ppm, .. } if loss_ppm > 0));
    if lossy {
        // Loss costs whole election rounds: the default bound has no term for it.
        s.liveness_bound_ms = Some(2 * s.liveness_bound());
    }
    debug_assert_eq!(s.validate(), Ok(()), "seed {seed}");
    s
}

/// One fault (or repair, or operator request) at a time `dt` ms after the first of its actions.
fn fault(
    rng: &mut ChaCha8Rng,
    nodes: usize,
    (founders, eligible): (usize, usize),
    opts: &Options,
) -> Vec<(u64, Action)> {
    let any = |rng: &mut ChaCha8Rng| below(rng, nodes as u64) as usize;
    let some_target = |rng: &mut ChaCha8Rng| match below(rng, 4) {
        0 => Target::Admin,
        1 => Target::Random,
        2 => Target::RandomFollower,
        _ => Target::Node(below(rng, nodes as u64) as usize),
    };
    // An operator's change: mostly a standby added or a voter removed (the founders are the
    // first voters), at the admin or through another node.
    let change = |rng: &mut ChaCha8Rng| {
        let target = if chance(rng, 2, 3) {
            Target::Admin
        } else {
            Target::Random
        };
        if chance(rng, 1, 2) {
            let node =
                node(range(rng, founders.min(eligible - 1) as u64, eligible as u64 - 1) as usize);
            Action::Add {
                node,
                target,
                stop_after_commit: None,
                crash_after_commit: None,
            }
        } else {
            let node = node(below(rng, eligible as u64) as usize);
            Action::Remove {
                node,
                target,
                stop_after_commit: None,
                crash_after_commit: None,
            }
        }
    };
    // An operator's retirement script: `chorus members leave` at a voter, then stop it once
    // the removal is reported committed (issue 51, finding 9), sometimes after handing the
    // admin's office to it first (the worst case: the admin removes itself).
    let retire = |rng: &mut ChaCha8Rng| {
        let leaving = below(rng, eligible as u64) as usize;
        let mut out = Vec::new();
        let mut t = 0;
        if chance(rng, 1, 2) {
            out.push((
                0,
                Action::Transfer {
                    to: Some(node(leaving)),
                    target: Target::Admin,
                },
            ));
            t = range(rng, 1_000, 5_000);
        }
        let after = if chance(rng, 1, 2) {
            range(rng, 0, 200)
        } else {
            range(rng, 200, 3_000)
        };
        out.push((
            t,
            Action::Remove {
                node: node(leaving),
                target: Target::Node(leaving),
                stop_after_commit: Some(after),
                crash_after_commit: None,
            },
        ));
        out
    };
    // Kinds 0–8 are faults, 9–16 membership, 17–18 handovers, 19–21 operators' scripts and a
    // long absence (numbered after the others so the kinds older seeds drew keep their
    // numbers).
    let kinds = if opts.membership { 22 } else { 11 };
    let kind = match below(rng, kinds) {
        k if !opts.membership && k >= 9 => k + 8,
        k => k,
    };
    match kind {
        19 => retire(rng),
        20 => {
            // A change, and the admin that reports it committed killed within a heartbeat
            // or so, then started again or not.
            let mut change = change(rng);
            let after = if chance(rng, 1, 2) {
                range(rng, 0, 1_000)
            } else {
                range(rng, 1_000, 15_000)
            };
            match &mut change {
                Action::Add {
                    target,
                    crash_after_commit,
                    ..
                }
                | Action::Remove {
                    target,
                    crash_after_commit,
                    ..
                } => {
                    *target = Target::Admin;
                    *crash_after_commit = Some(after);
                }
                _ => {}
            }
            let mut out = vec![(0, change)];
            if chance(rng, 2, 3) {
                out.push((
                    after + range(rng, 1_000, 30_000),
                    Action::Restart {
                        target: Target::Crashed,
                    },
                ));
            }
            out
        }
        21 => {
            // A voter down across many changes — retirements and additions — started again
            // after them: all it knew may be gone by then.
            voter_absent(rng, eligible, (4, 9), |rng| {
                if chance(rng, 1, 2) {
                    (retire(rng), 5_000)
                } else {
                    (vec![(0, change(rng))], 0)
                }
            })
        }
        17 => {
            // A graceful stop (the admin, mostly: it hands over), started again later or not.
            let target = if chance(rng, 2, 3) {
                Target::Admin
            } else {
                some_target(rng)
            };
            let mut out = vec![(0, Action::Stop { target })];
            if chance(rng, 2, 3) {
                out.push((
                    range(rng, 100, 20_000),
                    Action::Restart {
                        target: Target::Crashed,
                    },
                ));
            }
            out
        }
        18 => {
            // An operator's handover, to a named node (a voter or not) or the admin's pick,
            // sometimes asked of another node, sometimes twice in a row.
            let transfer = |rng: &mut ChaCha8Rng| Action::Transfer {
                to: chance(rng, 1, 2).then(|| node(below(rng, eligible as u64) as usize)),
                target: if chance(rng, 4, 5) {
                    Target::Admin
                } else {
                    Target::Random
                },
            };
            let mut out = vec![(0, transfer(rng))];
            if chance(rng, 1, 3) {
                out.push((range(rng, 0, 300), transfer(rng)));
            }
            out
        }
        15 | 16 => {
            // The admin cut off with a minority, and a change asked of it just after: it may
            // still hold its lease, and propose to the few it reaches.
            let mut out = vec![
                (
                    0,
                    Action::Partition {
                        minority: None,
                        with_admin: true,
                    },
                ),
                (range(rng, 1, 500), change(rng)),
            ];
            if chance(rng, 2, 3) {
                out.push((range(rng, 5_000, 30_000), Action::Heal));
            }
            out
        }
        13 => {
            // Changes in a row, a few seconds apart.
            let mut t = 0;
            (0..range(rng, 2, 4))
                .map(|_| {
                    t += range(rng, 1_000, 8_000);
                    (t, change(rng))
                })
                .collect()
        }
        14 => {
            // A voter stopped while changes go on, started again later (a rolling replacement
            // that the stopped voter misses).
            voter_absent(rng, eligible, (1, 3), |rng| (vec![(0, change(rng))], 0))
        }
        11 | 12 => {
            // A split, and a change asked for just after it (the admin may be on either side).
            let mut out = fault_split(rng, nodes);
            out.insert(1, (range(rng, 1, 500), change(rng)));
            out
        }
        0 | 1 => fault_split(rng, nodes),
        2 => vec![
            (
                0,
                Action::Partition {
                    minority: None,
                    with_admin: chance(rng, 1, 2),
                },
            ),
            (range(rng, 2_000, 30_000), Action::Heal),
        ],
        3 => vec![
            (
                0,
                Action::OneWay {
                    from: some_target(rng),
                    to: some_target(rng),
                },
            ),
            (range(rng, 2_000, 30_000), Action::Heal),
        ],
        4 => vec![(
            0,
            Action::Bounce {
                target: some_target(rng),
                down_for: range(rng, 500, 30_000),
            },
        )],
        5 => {
            // A crash, with or without a restart.
            let target = some_target(rng);
            let mut out = vec![(0, Action::Crash { target })];
            if chance(rng, 1, 2) {
                out.push((
                    range(rng, 1_000, 40_000),
                    Action::Restart {
                        target: Target::Crashed,
                    },
                ));
            }
            out
        }
        6 => {
            let loss = range(rng, 0, 50_000) as u32;
            vec![
                (
                    0,
                    Action::Network {
                        loss_ppm: loss,
                        duplicate_ppm: range(rng, 0, 50_000) as u32,
                        reorder_ppm: range(rng, 0, 100_000) as u32,
                    },
                ),
                (
                    range(rng, 5_000, 30_000),
                    Action::Network {
                        loss_ppm: 0,
                        duplicate_ppm: 0,
                        reorder_ppm: 0,
                    },
                ),
            ]
        }
        7 => vec![(
            0,
            Action::Flap {
                period: range(rng, 500, 5_000),
                times: range(rng, 2, 8) as u32,
            },
        )],
        8 => vec![(
            0,
            Action::Crash {
                target: Target::Node(any(rng)),
            },
        )],
        _ => vec![(0, change(rng))],
    }
}

/// A voter (one of the first `eligible` nodes) crashed while `changes` (a range) operator
/// actions go on, 2-8 s apart, and started again 2-20 s after the last. `step` makes each: its
/// actions (offset from its start) and how much longer it takes.
fn voter_absent(
    rng: &mut ChaCha8Rng,
    eligible: usize,
    changes: (u64, u64),
    mut step: impl FnMut(&mut ChaCha8Rng) -> (Vec<(u64, Action)>, u64),
) -> Vec<(u64, Action)> {
    let stopped = below(rng, eligible as u64) as usize;
    let mut out = vec![(
        0,
        Action::Crash {
            target: Target::Node(stopped),
        },
    )];
    let mut t = 0;
    for _ in 0..range(rng, changes.0, changes.1) {
        t += range(rng, 2_000, 8_000);
        let (actions, took) = step(rng);
        out.extend(actions.into_iter().map(|(dt, a)| (t + dt, a)));
        t += took;
    }
    out.push((
        t + range(rng, 2_000, 20_000),
        Action::Restart {
            target: Target::Node(stopped),
        },
    ));
    out
}

/// A split into two or three groups of random nodes (some left out), healed later or not.
fn fault_split(rng: &mut ChaCha8Rng, nodes: usize) -> Vec<(u64, Action)> {
    let groups = range(rng, 2, 3) as usize;
    let mut g: Vec<Vec<NodeRef>> = vec![Vec::new(); groups];
    for i in 0..nodes {
        let k = below(rng, groups as u64 + 1) as usize;
        if k < groups {
            g[k].push(node(i));
        }
    }
    g.retain(|g| !g.is_empty());
    if g.len() < 2 {
        g = vec![vec![node(0)], (1..nodes).map(node).collect()];
    }
    let mut out = vec![(0, Action::Split { groups: g })];
    if chance(rng, 3, 4) {
        out.push((range(rng, 2_000, 30_000), Action::Heal));
    }
    out
}

/// The invariants a run of `s` on `seed` breaks (first violation first), or the run's error.
pub fn violated(s: &Scenario, seed: u64) -> anyhow::Result<Vec<(u8, String)>> {
    let f = run(s, seed, Engine::Des, None, false)?;
    Ok(f.violations
        .iter()
        .map(|v| (v.invariant, v.to_string()))
        .collect())
}

/// A shrunk failure.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest scenario found that still breaks `invariant` on the seed.
    pub scenario: Scenario,
    /// The invariant.
    pub invariant: u8,
    /// Its first violation in the shrunk scenario.
    pub message: String,
    /// How many runs the shrinking took.
    pub runs: usize,
}

/// At most this many runs per shrink, so a slow failure cannot hold a sweep for long.
const SHRINK_RUNS: usize = 400;

/// Shrinks `s`, which breaks `invariant` on `seed`: delta-debugs the event list (chunks, then
/// single events), then simplifies what is left (no loss, no per-node settings, no tasks, no
/// spreads, fewer nodes, a shorter run) while the same invariant still fails on the same seed.
pub fn shrink(s: &Scenario, seed: u64, invariant: u8) -> Shrunk {
    let mut runs = 0;
    let mut message = String::new();
    let mut fails = |c: &Scenario, message: &mut String| -> bool {
        if runs >= SHRINK_RUNS || c.validate().is_err() {
            return false;
        }
        runs += 1;
        match violated(c, seed) {
            Ok(v) => match v.into_iter().find(|(i, _)| *i == invariant) {
                Some((_, m)) => {
                    *message = m;
                    true
                }
                None => false,
            },
            Err(_) => false,
        }
    };
    let mut best = s.clone();
    fails(&best, &mut message);

    // Delta debugging over the events: remove chunks of n, doubling n while nothing goes.
    let mut n = 2;
    while best.events.len() >= 2 {
        let len = best.events.len();
        let chunk = len.div_ceil(n);
        let mut removed = false;
        for start in (0..len).step_by(chunk) {
            let mut c = best.clone();
            c.events.drain(start..(start + chunk).min(len));
            if fails(&c, &mut message) {
                best = c;
                n = (n - 1).max(2);
                removed = true;
                break;
            }
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            n = (n * 2).min(len);
        }
    }
    if best.events.len() == 1 {
        let mut c = best.clone();
        c.events.clear();
        if fails(&c, &mut message) {
            best = c;
        }
    }

    // Simplifications, each kept only if the invariant still fails.
    let simplifications: Vec<fn(&mut Scenario) -> bool> = vec![
        |c| std::mem::take(&mut c.tasks).is_some(),
        |c| {
            let was = c.network.clone();
            c.network.loss_ppm = 0;
            c.network.duplicate_ppm = 0;
            c.network.reorder_ppm = 0;
            c.network != was
        },
        |c| {
            let mut changed = false;
            for e in &mut c.events {
                if let Action::Network {
                    loss_ppm,
                    duplicate_ppm,
                    reorder_ppm,
                } = &mut e.action
                {
                    changed |= (*loss_ppm, *duplicate_ppm, *reorder_ppm) != (0, 0, 0);
                    (*loss_ppm, *duplicate_ppm, *reorder_ppm) = (0, 0, 0);
                }
            }
            changed
        },
        |c| std::mem::take(&mut c.network.drift_ppm) > 0,
        |c| !std::mem::take(&mut c.node_settings).is_empty(),
        |c| std::mem::take(&mut c.start_spread) > 0,
        |c| std::mem::take(&mut c.link_spread) > 0,
    ];
    for simplify in simplifications {
        let mut c = best.clone();
        if simplify(&mut c) && fails(&c, &mut message) {
            best = c;
        }
    }
    // Single per-node settings entries, when not all could go.
    let mut k = 0;
    while k < best.node_settings.len() {
        let mut c = best.clone();
        c.node_settings.remove(k);
        if fails(&c, &mut message) {
            best = c;
        } else {
            k += 1;
        }
    }
    // Fewer nodes: drop the highest while nothing names it.
    while best.nodes > 3 {
        match without_last_node(&best) {
            Some(c) if fails(&c, &mut message) => best = c,
            _ => break,
        }
    }
    // A shorter run: halve the time after the last event while it still fails.
    loop {
        let last = best.events.iter().map(|e| e.at).max().unwrap_or(0);
        let spare = best.duration_ms.saturating_sub(last + 1_000);
        if spare < 2_000 {
            break;
        }
        let mut c = best.clone();
        c.duration_ms -= spare / 2;
        if !fails(&c, &mut message) {
            break;
        }
        best = c;
    }
    // The message of the scenario kept (the last run may have been a rejected candidate).
    fails(&best, &mut message);
    Shrunk {
        scenario: best,
        invariant,
        message,
        runs,
    }
}

/// `s` without its highest-numbered node, if no event, group or setting names it.
fn without_last_node(s: &Scenario) -> Option<Scenario> {
    let last = s.nodes - 1;
    let names = |r: &NodeRef| *r.indices().end() >= last;
    let target_names =
        |t: &Target| matches!(t, Target::Node(i) | Target::Nodes(_, i) if *i >= last);
    for e in &s.events {
        let named = match &e.action {
            Action::Crash { target }
            | Action::Restart { target }
            | Action::Stop { target }
            | Action::Bounce { target, .. } => target_names(target),
            Action::Transfer { to, target } => {
                to.as_ref().is_some_and(names) || target_names(target)
            }
            Action::OneWay { from, to } => target_names(from) || target_names(to),
            Action::Add { node, target, .. } | Action::Remove { node, target, .. } => {
                names(node) || target_names(target)
            }
            Action::Split { groups } => groups.iter().flatten().any(names),
            Action::Join { nodes, .. } => nodes.iter().any(names),
            _ => false,
        };
        if named {
            return None;
        }
    }
    if s.node_settings.iter().flat_map(|n| &n.nodes).any(names) {
        return None;
    }
    let mut c = s.clone();
    c.nodes -= 1;
    c.late.retain(|r| !names(r));
    c.voters = c.voters.map(|v| v.min(c.nodes));
    let voters = c.voter_count() as u32;
    c.bootstrap_expect = c.bootstrap_expect.map(|b| b.min(voters));
    if let Some(t) = &mut c.tasks {
        t.workers.retain(|r| !names(r));
    }
    Some(c)
}

/// A shrunk scenario as a TOML file, with a header saying where it came from and how to run it.
pub fn to_toml(
    shrunk: &Shrunk,
    original: &Scenario,
    seed: u64,
    opts: &Options,
    file: &str,
) -> String {
    let s = &shrunk.scenario;
    let body = toml::to_string(s).expect("a scenario serializes");
    format!(
        "# Generated by `chorus-sim fuzz --seed {seed} --count 1{}` and shrunk ({} runs).\n\
         # Invariant {} fails on seed {seed}: {}\n\
         # Original: {} nodes, {} events, {}; shrunk: {} nodes, {} events, {}.\n\
         # Reproduce: chorus-sim run {file} --seed {seed}\n{body}",
        match opts.flags() {
            f if f.is_empty() => String::new(),
            f => format!(" {f}"),
        },
        shrunk.runs,
        shrunk.invariant,
        shrunk.message.replace('\n', " "),
        original.nodes,
        original.events.len(),
        crate::scenario::format_ms(original.duration_ms),
        s.nodes,
        s.events.len(),
        crate::scenario::format_ms(s.duration_ms),
    )
}

/// What fuzzing found for one seed.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The generated scenario.
    pub scenario: Scenario,
    /// The first violation (invariant, message), or the run's error (invariant 0).
    pub failure: Option<(u8, String)>,
    /// The failure shrunk, when asked.
    pub shrunk: Option<Shrunk>,
}

/// Generates and runs the scenario of each seed on `threads` threads, shrinking failures when
/// `shrink` is set; `progress` is called after each seed with (done, total, failures so far).
/// Outcomes come back in seed order.
pub fn fuzz(
    seeds: &[u64],
    opts: &Options,
    threads: usize,
    shrink_failures: bool,
    progress: &(dyn Fn(usize, usize, usize) + Sync),
) -> Vec<Outcome> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::with_capacity(seeds.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(k) else { break };
                let outcome = fuzz_one(seed, opts, shrink_failures);
                if outcome.failure.is_some() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                results
                    .lock()
                    .expect("no panics while holding the lock")
                    .push((k, outcome));
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(d, seeds.len(), failed.load(Ordering::Relaxed));
            });
        }
    });
    let mut results = results.into_inner().expect("threads joined");
    results.sort_by_key(|(k, _)| *k);
    results.into_iter().map(|(_, o)| o).collect()
}

/// One seed: generate, run, and shrink a failure if asked.
pub fn fuzz_one(seed: u64, opts: &Options, shrink_failure: bool) -> Outcome {
    let scenario = generate(seed, opts);
    let failure = match violated(&scenario, seed) {
        Ok(v) => v.into_iter().next(),
        Err(e) => Some((0, format!("run failed: {e:#}"))),
    };
    let shrunk = match &failure {
        Some((i, _)) if shrink_failure && *i > 0 => Some(shrink(&scenario, seed, *i)),
        _ => None,
    };
    Outcome {
        seed,
        scenario,
        failure,
        shrunk,
    }
}
