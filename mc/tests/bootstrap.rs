//! Bootstrap's Paxos under random walks from a cold start: the `paxos` and `genesis` invariants
//! (`mc/src/check.rs`) judge every step. Each model here kills one or more of the hand-made
//! semantic mutants of `core/src/bootstrap.rs` that the rest of the suite let through
//! (docs/mutants.md, semantic mutants).

use chorus_mc::{walks, Limits, Model, Start};

/// `nodes` eligible nodes, `expect` of them found the cluster; single deliveries only when
/// `settle` is off (settling delivers in order, which hides the reorderings a proposer's bug
/// needs: the first-accepted mutant survived 20,000 settling walks).
fn cold(nodes: usize, expect: u32, settle: bool) -> Model {
    let mut model = Model::small(nodes, expect);
    model.start = Start::Cold;
    model.settle = settle;
    model.limits = Limits {
        crashes: 2,
        drops: 3,
        dups: 3,
        changes: 0,
        splits: 3,
        fires: 60,
        handovers: 0,
    };
    model
}

fn walk_clean(model: &Model, seeds: std::ops::Range<u64>) {
    let report = walks(model, seeds, 150, |_, _| {}).expect("the model starts");
    if let Some(f) = report.failure {
        let lines: Vec<String> = (f.path.iter())
            .map(|(a, s)| format!("{a}\n    {s}"))
            .collect();
        panic!(
            "{} nodes expecting {}, seed {}: {}\n{}",
            model.nodes,
            model.expect,
            f.seed,
            f.violation,
            lines.join("\n")
        );
    }
}

/// Four nodes, any three found: walks with every fault and `settle` keep Paxos's invariants.
/// Kills the own-promisers mutant (a proposer proposing the nodes that promised instead of the
/// highest acceptance they report), the forgotten-promise mutant (a restart clears the
/// acceptor's promise) and the accept-without-promise mutant (an accept does not raise the
/// promise).
#[test]
fn bootstrap_walks_of_four_expecting_three_keep_paxos() {
    walk_clean(&cold(4, 3, true), 0..1_000);
}

/// Three nodes, any two found, one message delivered at a time: kills the first-accepted
/// mutant (a proposer taking the first acceptance its promises report, by node id, instead of
/// the highest), which needs two proposals accepted on different ballots and a third that
/// hears of both.
#[test]
fn bootstrap_walks_of_three_expecting_two_one_delivery_at_a_time_keep_paxos() {
    walk_clean(&cold(3, 2, false), 0..1_000);
    walk_clean(&cold(4, 3, false), 0..1_000);
}
