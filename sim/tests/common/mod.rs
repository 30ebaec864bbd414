//! Helpers shared by the simulator's integration tests (each test file includes this module and
//! uses what it needs).
#![allow(dead_code)]

use chorus_sim::scenario::Scenario;

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
