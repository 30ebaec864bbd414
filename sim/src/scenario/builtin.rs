//! The built-in scenarios: TOML files under `sim/scenarios/`, written as users write theirs and
//! embedded in the binary (`chorus-sim scenarios --show NAME` prints one); the groups of them
//! the test sweeps run; and how a scenario name resolves — a built-in, `NAME+tasks`, or a file.

use std::path::Path;

use super::{Scenario, TaskWorkload};

/// `NAME+tasks` names the scenario NAME with [`TaskWorkload::background`] added when it has no
/// workload of its own: every built-in can carry tasks, and a failing run reproduces by name.
pub const WITH_TASKS: &str = "+tasks";

/// Names of the built-in scenarios.
pub const BUILTINS: &[&str] = &[
    "steady",
    "admin-crash",
    "partition",
    "asymmetric",
    "flapping",
    "lossy",
    "storm",
    "churn",
    "drift",
    "hostile",
    "uneven-bootstrap",
    "late-voters",
    "mixed-timeouts",
    "replace",
    "replace-manual",
    "change-interrupted",
    "remove-live",
    "tasks",
];

/// The built-ins with a task workload (issue 11), swept for invariant 7 by
/// `sim/tests/tasks.rs`.
pub const TASKS: &[&str] = &["tasks", "churn", "flapping", "drift", "asymmetric"];

/// The built-ins of issue 10: those that reproduced its bootstrap and mixed-settings bugs
/// (uneven bootstrap, late voters, mixed settings), swept over more seeds than the general CI
/// sweep by `sim/tests/bootstrap.rs`, and those that exercise membership changes (`MEMBERSHIP`,
/// swept by `sim/tests/membership.rs`). Both engines check them for determinism.
pub const REPRODUCERS: &[&str] = &[
    "uneven-bootstrap",
    "late-voters",
    "mixed-timeouts",
    "replace",
    "replace-manual",
    "change-interrupted",
    "remove-live",
];

/// The built-ins that change the electorate while the cluster runs: a voter lost for good and
/// replaced by autopilot or by hand, changes cut short by a crash or a partition, and a live
/// voter an operator removed, which autopilot must leave out.
pub const MEMBERSHIP: &[&str] = &[
    "replace",
    "replace-manual",
    "change-interrupted",
    "remove-live",
];

/// Each built-in's file, in [`BUILTINS`] order.
const FILES: &[(&str, &str)] = &[
    ("steady", include_str!("../../scenarios/steady.toml")),
    (
        "admin-crash",
        include_str!("../../scenarios/admin-crash.toml"),
    ),
    ("partition", include_str!("../../scenarios/partition.toml")),
    (
        "asymmetric",
        include_str!("../../scenarios/asymmetric.toml"),
    ),
    ("flapping", include_str!("../../scenarios/flapping.toml")),
    ("lossy", include_str!("../../scenarios/lossy.toml")),
    ("storm", include_str!("../../scenarios/storm.toml")),
    ("churn", include_str!("../../scenarios/churn.toml")),
    ("drift", include_str!("../../scenarios/drift.toml")),
    ("hostile", include_str!("../../scenarios/hostile.toml")),
    (
        "uneven-bootstrap",
        include_str!("../../scenarios/uneven-bootstrap.toml"),
    ),
    (
        "late-voters",
        include_str!("../../scenarios/late-voters.toml"),
    ),
    (
        "mixed-timeouts",
        include_str!("../../scenarios/mixed-timeouts.toml"),
    ),
    ("replace", include_str!("../../scenarios/replace.toml")),
    (
        "replace-manual",
        include_str!("../../scenarios/replace-manual.toml"),
    ),
    (
        "change-interrupted",
        include_str!("../../scenarios/change-interrupted.toml"),
    ),
    (
        "remove-live",
        include_str!("../../scenarios/remove-live.toml"),
    ),
    ("tasks", include_str!("../../scenarios/tasks.toml")),
];

/// A built-in scenario's TOML as written, comments included.
pub fn builtin_text(name: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// A built-in scenario by name.
pub fn builtin(name: &str) -> Option<Scenario> {
    let text = builtin_text(name)?;
    // The built-ins are tested to parse and validate.
    Some(toml::from_str(text).expect("built-in scenario parses"))
}

impl Scenario {
    /// A built-in scenario by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> anyhow::Result<Scenario> {
        if let Some(base) = name_or_path.strip_suffix(WITH_TASKS) {
            let mut s = Scenario::load(base)?;
            if s.tasks.is_none() {
                s.tasks = Some(TaskWorkload::background());
            }
            s.name = name_or_path.to_owned();
            s.validate()
                .map_err(|e| anyhow::anyhow!("{name_or_path}: {e}"))?;
            return Ok(s);
        }
        if let Some(s) = builtin(name_or_path) {
            return Ok(s);
        }
        let path = Path::new(name_or_path);
        if path.exists() {
            return Scenario::from_file(path);
        }
        anyhow::bail!(
            "unknown scenario {name_or_path:?}: not a built-in ({}) and no such file",
            BUILTINS.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_has_its_file() {
        let files: Vec<&str> = FILES.iter().map(|(n, _)| *n).collect();
        assert_eq!(files, BUILTINS);
    }
}
