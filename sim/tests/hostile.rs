//! Hostile peers (issue 9): two of seven nodes lie to random nodes — forged heartbeats for live
//! terms, extreme terms, unasked replies with made-up electorates, replays — on top of every
//! built-in scenario's faults. The checker judges the honest nodes: invariants 1–5 must hold.

use chorus_sim::scenario::{Scenario, BUILTINS};
use chorus_sim::sweep::{jobs, sweep, EngineChoice, Job};

fn with_liars(name: &str) -> anyhow::Result<Scenario> {
    let mut s = Scenario::load(name)?;
    if s.hostile.is_off() {
        s.nodes = 7;
        s.voters = Some(5);
        s.late_joiners = s.late_joiners.min(1);
        s.hostile.nodes = 2;
    }
    s.validate().map_err(anyhow::Error::msg)?;
    Ok(s)
}

fn failures(all: &[Job]) -> Vec<String> {
    sweep(all, 2, false, &|_, _| {})
        .into_iter()
        .filter(|r| !r.failures.is_empty())
        .map(|r| {
            let j = &r.job;
            format!(
                "{} seed {}: {}\n  reproduce: {}",
                j.name,
                j.seed,
                r.failures.join("; "),
                chorus_sim::run::repro_command(&j.name, &j.scenario, j.seed, j.engine)
            )
        })
        .collect()
}

#[test]
fn liars_break_no_invariant_in_any_scenario() {
    let names: Vec<&str> = BUILTINS.to_vec();
    let all = jobs(&names.join(","), 0..24, EngineChoice::Des, with_liars).unwrap();
    assert_eq!(all.len(), 24 * names.len());
    assert!(all.iter().all(|j| j.scenario.hostile.nodes == 2));
    let failed = failures(&all);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn the_hostile_scenario_holds_over_many_seeds() {
    let all = jobs("hostile", 1_000..1_200, EngineChoice::Des, Scenario::load).unwrap();
    let failed = failures(&all);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn lying_is_deterministic_and_refused_by_reason() {
    let s = Scenario::load("hostile").unwrap();
    let run = || chorus_sim::run::run_to_bytes(&s, 7, chorus_sim::run::Engine::Des, false).unwrap();
    let (a, fa) = run();
    let (b, _) = run();
    assert_eq!(a, b, "same seed, same bytes");
    // Every kind of refusal a liar provokes is seen, and the honest nodes still elect. The
    // liars announce newer certified electorates and answer the nodes that ask with forged
    // links (issue 32): refused as `bad_certificate`, and never taken (below).
    for reason in [
        "not_member",
        "out_of_range",
        "unsolicited",
        "bad_certificate",
    ] {
        assert!(
            fa.stats.refused.get(reason).is_some_and(|n| *n > 0),
            "{reason}: {:?}",
            fa.stats.refused
        );
    }
    assert!(fa.stats.elections >= 1);
    let (_, lines) = chorus_sim::trace::read(&String::from_utf8(a).unwrap()).unwrap();
    let liars: Vec<String> = (0..s.nodes)
        .filter(|i| s.is_hostile(*i))
        .map(|i| format!("n{i}"))
        .collect();
    let mut changes = 0;
    for l in &lines {
        if let chorus_sim::trace::Record::ElectorateChanged { members, .. } = &l.record {
            changes += 1;
            assert!(
                !members.iter().any(|m| liars.contains(&m.to_string())),
                "a forged electorate was taken: {l:?}"
            );
        }
    }
    assert!(
        changes > 0,
        "the run changes no electorate: the check above says nothing"
    );
}

#[test]
fn hostile_nodes_are_workers_and_des_only() {
    let mut s = Scenario::load("steady").unwrap();
    s.hostile.nodes = 1;
    assert!(s.validate().unwrap_err().contains("never voters"));
    s.voters = Some(4);
    s.validate().unwrap();
    let err = chorus_sim::run::run_to_bytes(&s, 1, chorus_sim::run::Engine::Turmoil, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("discrete-event engine only"), "{err}");
}

/// Issue 52: liars forge results of tasks they never ran — to the task's origin, and to the
/// admin to relay, naming any node as the worker — and acknowledgements, to workers and to
/// the admin naming a worker. Under the task scenario's load and faults every one is refused
/// (`not_owner` is theirs alone: no honest node sends another's acknowledgement), no
/// submitter takes a forged result (`hostile.rs` marks them), and invariant 7 holds: no
/// worker forgot a result its submitter never had.
#[test]
fn forged_task_results_and_acknowledgements_are_refused() {
    use chorus_sim::hostile::FORGED_STDOUT_PREFIX;
    let s = with_liars("tasks").unwrap();
    let liars: Vec<String> = (0..s.nodes)
        .filter(|i| s.is_hostile(*i))
        .map(|i| format!("n{i}"))
        .collect();
    assert_eq!(liars, ["n5", "n6"]);
    for seed in 0..6 {
        let (bytes, fa) =
            chorus_sim::run::run_to_bytes(&s, seed, chorus_sim::run::Engine::Des, false).unwrap();
        assert!(fa.violations.is_empty(), "seed {seed}: {:?}", fa.violations);
        for reason in ["not_owner", "unsolicited"] {
            assert!(
                fa.stats.refused.get(reason).is_some_and(|n| *n > 20),
                "seed {seed}: {reason}: {:?}",
                fa.stats.refused
            );
        }
        assert!(fa.stats.tasks_accepted > 100, "seed {seed}");
        // A liar's word counts for a task an admin placed on it (its honest core ran it): those
        // are left out.
        let (_, lines) = chorus_sim::trace::read(&String::from_utf8(bytes).unwrap()).unwrap();
        let on_liars: std::collections::BTreeSet<String> = lines
            .iter()
            .filter_map(|l| match &l.record {
                chorus_sim::trace::Record::TaskPlaced { task, worker, .. }
                    if liars.contains(worker) =>
                {
                    Some(task.clone())
                }
                _ => None,
            })
            .collect();
        let cores = chorus_sim::des::cores_at(&s, seed, s.duration_ms).unwrap();
        let mut done = 0;
        for (i, core) in cores.iter().enumerate() {
            let Some(core) = core.as_ref().filter(|_| !s.is_hostile(i)) else {
                continue;
            };
            for (task, t) in core.owned_tasks() {
                let Some(result) = &t.result else { continue };
                done += 1;
                assert!(
                    !result.stdout.starts_with(FORGED_STDOUT_PREFIX)
                        || on_liars.contains(&task.to_string()),
                    "seed {seed}: n{i} took a forged result of {task}: {result:?}"
                );
            }
        }
        assert!(done > 50, "seed {seed}: {done} results to look at");
    }
}

/// What a run with the full step trace shows of the liars' reshaped links (issue 52): read as
/// the trace is written, keeping only the lines that matter.
#[derive(Default)]
struct LinkWatch {
    liars: std::collections::BTreeSet<String>,
    /// The links honest nodes handed on, by version: the genuine ones.
    genuine: std::collections::BTreeMap<u64, std::sync::Arc<chorus_core::Link>>,
    /// Per shape: delivered to an honest node, refused as `bad_certificate`, as `unsolicited`.
    shapes: std::collections::BTreeMap<chorus_sim::hostile::LinkShape, [u64; 3]>,
    /// Electorates an honest admin proposed (its own `electorate_changed` in its term), and
    /// the admins by term.
    proposed: std::collections::BTreeSet<(u64, u64, Vec<String>)>,
    admins: std::collections::BTreeSet<(String, u64)>,
    /// Every electorate an honest node took: (node, version, term, members).
    adopted: Vec<(String, u64, u64, Vec<String>)>,
    /// Reshaped links an honest node took.
    taken: Vec<String>,
    partial: Vec<u8>,
}

impl LinkWatch {
    fn line(&mut self, bytes: &[u8]) {
        use chorus_core::{Command, Event, Message, Refusal};
        use chorus_sim::hostile::{link_shape, LinkShape};
        use chorus_sim::trace::{Line, Record};
        let text = std::str::from_utf8(bytes).expect("utf-8 trace");
        let step = text.contains(r#""kind":"step""#);
        if step && !text.contains(r#""links""#) {
            return;
        }
        let Ok(line) = serde_json::from_str::<Line>(text) else {
            return; // the header
        };
        match line.record {
            Record::BecameAdmin { node, term, .. } => {
                self.admins.insert((node, term));
            }
            Record::ElectorateChanged {
                node,
                version,
                term,
                members,
            } if !self.liars.contains(&node) => {
                let members: Vec<String> = members.to_vec();
                if version == 1 || self.admins.contains(&(node.clone(), term)) {
                    self.proposed.insert((version, term, members.clone()));
                }
                self.adopted.push((node, version, term, members));
            }
            Record::Step {
                node,
                event,
                commands,
            } if !self.liars.contains(&node) => {
                let event: Event = serde_json::from_value(event).expect("an event");
                // Notices serialize flat (their own `kind` in place of the command's), so
                // commands are read as JSON.
                let commands = match commands {
                    serde_json::Value::Array(c) => c,
                    _ => Vec::new(),
                };
                let kind = |c: &serde_json::Value| c["kind"].as_str().unwrap_or("").to_owned();
                for c in commands.iter().filter(|c| kind(c) == "send") {
                    let Ok(Command::Send {
                        msg: Message::Chain { links },
                        ..
                    }) = serde_json::from_value(c.clone())
                    else {
                        continue;
                    };
                    for l in links {
                        self.genuine.entry(l.electorate.version).or_insert(l);
                    }
                }
                let Event::Message {
                    from,
                    msg: Message::Chain { links },
                } = event
                else {
                    return;
                };
                if !self.liars.contains(from.as_str()) {
                    return;
                }
                let Some((shape, lie)) = links
                    .iter()
                    .find_map(|l| link_shape(l, &self.genuine).map(|s| (s, l)))
                else {
                    return;
                };
                let refused = |reason: Refusal| {
                    commands.iter().any(|c| {
                        kind(c) == "refused"
                            && c["message"] == "chain"
                            && c["reason"] == reason.as_str()
                    })
                };
                let counts = self.shapes.entry(shape).or_default();
                counts[0] += 1;
                if refused(Refusal::BadCertificate) {
                    counts[1] += 1;
                } else if refused(Refusal::Unsolicited) {
                    counts[2] += 1;
                } else if shape != LinkShape::SkippedVersion {
                    // Not refused: skipped as no newer than the node's anchor, or taken. A
                    // forged electorate taken shows as the node's new electorate.
                    let e = &lie.electorate;
                    let took = commands.iter().any(|c| {
                        kind(c) == "electorate_changed"
                            && c["version"] == e.version
                            && c["term"] == e.term
                            && c["members"] == serde_json::json!(e.members())
                    });
                    if took
                        && (e.genesis != self.genuine[&e.version].electorate.genesis
                            || e.term != self.genuine[&e.version].electorate.term)
                    {
                        self.taken
                            .push(format!("{node} took {shape:?} at {}: {lie:?}", line.t));
                    }
                }
            }
            _ => {}
        }
    }
}

#[derive(Clone, Default)]
struct Watched(std::rc::Rc<std::cell::RefCell<LinkWatch>>);

impl std::io::Write for Watched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut w = self.0.borrow_mut();
        for &b in buf {
            if b == b'\n' {
                let line = std::mem::take(&mut w.partial);
                w.line(&line);
            } else {
                w.partial.push(b);
            }
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Issue 52: liars keep the certified links they hear and hand them on reshaped — one signer
/// twice side by side, half of an even predecessor's signers, the electorate under another
/// term, of another genesis, a link that skips a version — to the nodes that ask them, and to
/// nodes they provoke into asking (a heartbeat announcing newer links, the reshaped link right
/// behind it). Through the membership scenarios' changes, each shape reaches honest nodes and
/// is refused as `bad_certificate` (by its rule alone: every other check passes), no
/// invariant breaks, and every electorate an honest node takes is one an honest admin
/// proposed. Fails when a link rule of `Link::check` is weakened: the shape it alone refused
/// is then taken instead.
#[test]
fn reshaped_links_are_refused_and_counted() {
    use chorus_sim::hostile::{LinkShape, LINK_SHAPES};
    let mut totals: std::collections::BTreeMap<_, [u64; 3]> = Default::default();
    let mut adopted = 0;
    for name in [
        "replace",
        "change-interrupted",
        "churn",
        "replace-manual",
        "late-voters",
    ] {
        let s = with_liars(name).unwrap();
        for seed in 0..24 {
            let watch = Watched::default();
            watch.0.borrow_mut().liars = (0..s.nodes)
                .filter(|i| s.is_hostile(*i))
                .map(|i| format!("n{i}"))
                .collect();
            let trace = Box::new(watch.clone());
            let fa =
                chorus_sim::run::run(&s, seed, chorus_sim::run::Engine::Des, Some(trace), true)
                    .unwrap();
            assert!(
                fa.violations.is_empty(),
                "{name} seed {seed}: {:?}",
                fa.violations
            );
            let w = watch.0.borrow();
            assert!(w.taken.is_empty(), "{name} seed {seed}: {:?}", w.taken);
            for (node, version, term, members) in &w.adopted {
                assert!(
                    w.proposed.contains(&(*version, *term, members.clone())),
                    "{name} seed {seed}: {node} took v{version} of term {term} {members:?}, \
                     which no honest admin proposed"
                );
                adopted += 1;
            }
            for (shape, c) in &w.shapes {
                let t = totals.entry(*shape).or_default();
                for i in 0..3 {
                    t[i] += c[i];
                }
            }
        }
    }
    eprintln!("reshaped links (delivered, bad_certificate, unsolicited): {totals:?}");
    assert!(adopted > 0);
    for shape in LINK_SHAPES {
        let [delivered, refused, _] = totals.get(&shape).copied().unwrap_or_default();
        // A skipped version is checked only at a node two versions behind the link, and the
        // liars, who learn a link when the nodes catching up do, never find one here: it is
        // sent, never taken, and pinned by `core/tests/link_rules.rs`.
        // The others are checked only at a node one version behind the link. Since a change
        // commits only once a majority holds its link (issue 51, finding 9) the admin names a
        // new link at once and followers are behind for a round trip, not a heartbeat
        // interval, so few lies find such a node (20 or more per shape before; 1 to 7 now):
        // each shape must still be refused somewhere, and `core/tests/link_rules.rs` pins
        // each one's refusal rule by rule.
        let wanted = if shape == LinkShape::SkippedVersion {
            0
        } else {
            1
        };
        assert!(
            delivered > 0 && refused >= wanted,
            "{shape:?}: {delivered} delivered, {refused} refused as bad_certificate: {totals:?}"
        );
    }
}
