//! Helpers shared by the simulator's integration tests (each test file includes this module and
//! uses what it needs).
#![allow(dead_code)]

use chorus_sim::scenario::Scenario;
use chorus_sim::sweep::{sweep, Job};

/// A scenario from TOML text that must parse and validate.
pub fn parse(text: &str) -> Scenario {
    let s: Scenario = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    s.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    s
}

/// The error a scenario text must be refused with (by the parser or by validation).
pub fn error_of(text: &str) -> String {
    match toml::from_str::<Scenario>(text) {
        Err(e) => e.to_string(),
        Ok(s) => s
            .validate()
            .err()
            .unwrap_or_else(|| panic!("accepted:\n{text}")),
    }
}

/// Runs `all` (checking determinism too when asked); fails listing every failing run with its
/// failures and the command that reproduces it.
pub fn assert_clean(all: &[Job], determinism: bool) {
    let results = sweep(all, 2, determinism, &|_, _| {});
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.failures.is_empty())
        .map(|r| {
            let j = &r.job;
            format!(
                "{} seed {} ({}): {}\n  reproduce: {}",
                j.name,
                j.seed,
                j.engine.as_str(),
                r.failures.join("; "),
                chorus_sim::run::repro_command(&j.name, &j.scenario, j.seed, j.engine)
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} runs failed:\n{}",
        failed.len(),
        results.len(),
        failed.join("\n")
    );
}
