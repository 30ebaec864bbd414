//! The CHORUS simulator: two engines (a discrete-event engine over the pure core for thousands of
//! nodes; a turmoil harness running the real runtime loop for tens) behind one scenario, trace and
//! checker interface.

pub mod checker;
pub mod des;
pub mod driver;
pub mod failover;
pub mod generate;
pub mod hostile;
mod prefetch;
pub mod run;
pub mod sandbox;
pub mod scale;
pub mod scenario;
pub mod sink;
pub mod svg;
pub mod sweep;
mod timequeue;
pub mod timing;
pub mod trace;
pub mod turmoil_engine;
