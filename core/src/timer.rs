//! The core's timers: a small table indexed by an enum. The core keeps the deadlines so stale
//! firings are recognised; the adapter owns the actual timers.

use serde::{Deserialize, Serialize};

use crate::Command;

/// The election timer's meaning when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ElectionPhase {
    /// The admin (or the round) has been silent for the minimum election timeout: draw the
    /// rank-biased delay.
    Suspect,
    /// The delay has passed: stand.
    Stand,
}

/// The core's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timer {
    /// Resend WHOAMI and, when no admin turned up, arm the election.
    Discovery,
    /// Suspect a silent admin, then stand after the rank-biased delay.
    Election,
    /// Admin: send the next heartbeat.
    Heartbeat,
    /// Admin: the lease runs out (check-quorum).
    Lease,
    /// Bootstrap: propose an initial electorate, or retry a proposal that stalled.
    Bootstrap,
    /// Tasks: resend results, offer again, place after a backoff.
    Tasks,
}

impl Timer {
    /// All timers, in table order.
    pub const ALL: [Timer; 6] = [
        Timer::Discovery,
        Timer::Election,
        Timer::Heartbeat,
        Timer::Lease,
        Timer::Bootstrap,
        Timer::Tasks,
    ];
}

/// Deadlines of armed timers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerTable(#[serde(with = "table")] [Option<u64>; 6]);

impl TimerTable {
    /// Arms `timer` at `at_ms` and tells the adapter.
    pub fn set(&mut self, timer: Timer, at_ms: u64, out: &mut Vec<Command>) {
        self.0[timer as usize] = Some(at_ms);
        out.push(Command::SetTimer { timer, at_ms });
    }

    /// Disarms `timer` (telling the adapter only if it was armed).
    pub fn cancel(&mut self, timer: Timer, out: &mut Vec<Command>) {
        if self.0[timer as usize].take().is_some() {
            out.push(Command::CancelTimer { timer });
        }
    }

    /// Disarms everything without telling the adapter (its timers died with the process).
    pub fn clear(&mut self) {
        self.0 = [None; 6];
    }

    /// Consumes a firing: true if `timer` was armed and due at `now_ms`.
    pub fn fire(&mut self, timer: Timer, now_ms: u64) -> bool {
        match self.0[timer as usize] {
            Some(at) if now_ms >= at => {
                self.0[timer as usize] = None;
                true
            }
            _ => false,
        }
    }

    /// The deadline of `timer`, if armed.
    pub fn deadline(&self, timer: Timer) -> Option<u64> {
        self.0[timer as usize]
    }

    /// The earliest armed deadline and its timer (ties: table order).
    pub fn next(&self) -> Option<(u64, Timer)> {
        Timer::ALL
            .iter()
            .filter_map(|t| self.0[*t as usize].map(|at| (at, *t)))
            .min()
    }
}

/// Serde for the table: a list, so a state saved before a timer was added still loads (the new
/// timers start disarmed).
mod table {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    type Table = [Option<u64>; 6];

    pub(super) fn serialize<S: Serializer>(t: &Table, s: S) -> Result<S::Ok, S::Error> {
        t.as_slice().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Table, D::Error> {
        let list = Vec::<Option<u64>>::deserialize(d)?;
        let mut t = Table::default();
        if list.len() > t.len() {
            return Err(serde::de::Error::invalid_length(
                list.len(),
                &"at most 6 timers",
            ));
        }
        t[..list.len()].copy_from_slice(&list);
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state saved before a timer was added loads with the new timers disarmed; a table
    /// with more timers than this build knows is refused, not a panic.
    #[test]
    fn a_saved_table_loads_shorter_and_is_refused_longer() {
        let t: TimerTable = serde_json::from_str("[10, null, 30, null, 50]").unwrap();
        assert_eq!(t.deadline(Timer::Discovery), Some(10));
        assert_eq!(t.deadline(Timer::Heartbeat), Some(30));
        assert_eq!(t.deadline(Timer::Bootstrap), Some(50));
        assert_eq!(t.deadline(Timer::Tasks), None);
        let full: TimerTable = serde_json::from_str("[1, 2, 3, 4, 5, 6]").unwrap();
        assert_eq!(full.deadline(Timer::Tasks), Some(6));
        assert_eq!(serde_json::to_string(&full).unwrap(), "[1,2,3,4,5,6]");
        let err = serde_json::from_str::<TimerTable>("[1, 2, 3, 4, 5, 6, 7]").unwrap_err();
        assert!(err.to_string().contains("at most 6 timers"), "{err}");
    }
}
