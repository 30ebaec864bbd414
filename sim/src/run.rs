//! Running one simulation: build the header and sink, run an engine, finish the checks.

use std::io::Write;

use crate::scenario::Scenario;
use crate::sink::{Finished, Sink};
use crate::trace::Header;

/// Which engine runs the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Discrete-event engine over the pure cores (thousands of nodes).
    Des,
    /// turmoil running the real runtime loop and codec (tens of nodes).
    Turmoil,
}

impl Engine {
    /// The name written in trace headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Des => "des",
            Engine::Turmoil => "turmoil",
        }
    }

    /// Parses a trace header's engine name.
    pub fn parse(s: &str) -> Option<Engine> {
        match s {
            "des" => Some(Engine::Des),
            "turmoil" => Some(Engine::Turmoil),
            _ => None,
        }
    }
}

/// Runs `scenario` with `seed` on `engine`, writing the trace to `trace` if given.
pub fn run(
    scenario: &Scenario,
    seed: u64,
    engine: Engine,
    trace: Option<Box<dyn Write>>,
    steps: bool,
) -> anyhow::Result<Finished> {
    run_with(scenario, seed, engine, trace, steps, |_| {})
}

/// [`run`], with a chance to configure the sink first (e.g. [`Sink::stop_when`]).
pub fn run_with(
    scenario: &Scenario,
    seed: u64,
    engine: Engine,
    trace: Option<Box<dyn Write>>,
    steps: bool,
    configure: impl FnOnce(&mut Sink),
) -> anyhow::Result<Finished> {
    scenario
        .validate()
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", scenario.name))?;
    let header = Header::new(scenario, seed, engine.as_str(), steps);
    let mut sink = Sink::new(&header, trace)?;
    configure(&mut sink);
    match engine {
        Engine::Des => crate::des::run(scenario, seed, &mut sink)?,
        Engine::Turmoil => crate::turmoil_engine::run(scenario, seed, &mut sink)?,
    }
    let end = if sink.stopped() {
        sink.now()
    } else {
        scenario.duration_ms
    };
    Ok(sink.finish(end)?)
}

/// The one command that reproduces a run.
pub fn repro_command(name: &str, scenario: &Scenario, seed: u64, engine: Engine) -> String {
    let mut cmd = format!(
        "cargo run --release -p chorus-sim -- run --scenario {name} --nodes {} --seed {seed} --engine {} --duration {}",
        scenario.nodes,
        engine.as_str(),
        crate::scenario::format_ms(scenario.duration_ms)
    );
    if let Some(v) = scenario.voters {
        cmd.push_str(&format!(" --voters {v}"));
    }
    if scenario.peering == crate::scenario::Peering::Voters {
        cmd.push_str(" --peering voters");
    }
    if !scenario.hostile.is_off() {
        cmd.push_str(&format!(" --hostile {}", scenario.hostile.nodes));
    }
    cmd.push_str(&format!(" --trace /tmp/chorus-{seed}.jsonl"));
    cmd
}

/// [`run`] into memory: the trace bytes and the outcome (tests, `replay`, snapshot logs).
pub fn run_to_bytes(
    scenario: &Scenario,
    seed: u64,
    engine: Engine,
    steps: bool,
) -> anyhow::Result<(Vec<u8>, Finished)> {
    let buf = SharedBuf::default();
    let finished = run(scenario, seed, engine, Some(Box::new(buf.clone())), steps)?;
    Ok((buf.take(), finished))
}

/// An in-memory trace sink that can be read back after the run (the sink owns its writer).
#[derive(Clone, Default)]
struct SharedBuf(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl SharedBuf {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.0.borrow_mut())
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
