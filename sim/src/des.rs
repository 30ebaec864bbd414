//! The discrete-event engine (being built).

use crate::scenario::Scenario;
use crate::sink::Sink;

/// Runs `scenario` on the discrete-event engine.
pub fn run(_scenario: &Scenario, _seed: u64, _sink: &mut Sink) -> anyhow::Result<()> {
    anyhow::bail!("the discrete-event engine is not built yet")
}
