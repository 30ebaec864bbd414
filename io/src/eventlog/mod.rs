//! Durable event logs: the production [`SledLog`] (sled 0.34), and the metadata a log carries so a
//! data directory says whose it is, in which format, and with which configuration it was created.
//!
//! The in-memory log for tests and the simulator is [`crate::runtime::MemoryLog`].

mod sled;

pub use self::sled::{
    ClockAnchor, LogMeta, NoticeRecorder, RecordedNotice, ReplayBasis, SledLog, SledLogOptions,
    FORMAT_VERSION, MARKER_FILE,
};
