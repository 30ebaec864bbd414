//! The per-node [`Observer`] of the turmoil engine: it stamps the core's outputs with global
//! simulated time and buffers them; the engine sorts and writes them after every tick.

use std::cell::RefCell;
use std::rc::Rc;

use chorus_core::Command;
use chorus_io::runtime::{Observer, StepInfo};

/// One buffered output of a node.
#[derive(Debug)]
pub(crate) enum Output {
    /// A traced command (notice, role change, granted vote reply), with the node time it was
    /// made at.
    Core { command: Command, local_ms: u64 },
    /// A full step record.
    Step {
        event: serde_json::Value,
        commands: serde_json::Value,
    },
}

/// Outputs of the current tick: (global ms, node index, sequence, output).
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    pub(crate) buffered: Vec<(u64, usize, u64, Output)>,
    seq: u64,
}

impl Outputs {
    fn push(&mut self, t: u64, node: usize, out: Output) {
        self.seq += 1;
        self.buffered.push((t, node, self.seq, out));
    }
}

pub(crate) struct SimObserver {
    pub(crate) node: usize,
    pub(crate) outputs: Rc<RefCell<Outputs>>,
    pub(crate) steps: bool,
}

impl Observer for SimObserver {
    fn on_step(&mut self, step: &StepInfo<'_>) {
        // Inside a host, turmoil's clock is exact to the millisecond within the tick.
        let t = turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64);
        let mut outputs = self.outputs.borrow_mut();
        if self.steps {
            // Plain data with string keys: serialization cannot fail.
            let event = serde_json::to_value(step.event).expect("event serializes");
            let commands = serde_json::to_value(step.commands).expect("commands serialize");
            outputs.push(t, self.node, Output::Step { event, commands });
        }
        for command in step.commands {
            if crate::sink::Sink::traced(command) {
                outputs.push(
                    t,
                    self.node,
                    Output::Core {
                        command: command.clone(),
                        local_ms: step.now_ms,
                    },
                );
            }
        }
    }
}
