//! The turmoil engine: every host runs the real runtime loop over a turmoil transport (to be
//! built; see issue #4).

use crate::scenario::Scenario;
use crate::sink::Sink;

/// Runs `scenario` on turmoil.
pub fn run(_scenario: &Scenario, _seed: u64, _sink: &mut Sink) -> anyhow::Result<()> {
    anyhow::bail!("the turmoil engine is not built yet")
}
