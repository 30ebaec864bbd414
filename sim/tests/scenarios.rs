//! The built-in scenarios as the simulator reads them, pinned: a built-in that moves (from a
//! string in the code to a file under `sim/scenarios/`, say) must stay the same scenario, field
//! for field — the JSON here is what a trace header's `spec` holds and `replay` re-runs.

use chorus_sim::scenario::{builtin, BUILTINS};

#[test]
fn every_builtin_is_pinned() {
    let mut out = String::new();
    for name in BUILTINS {
        let s = builtin(name).unwrap();
        out.push_str(&format!("{name}: {}\n", serde_json::to_string(&s).unwrap()));
    }
    insta::assert_snapshot!(out);
}
