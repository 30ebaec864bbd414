//! Event-log throughput: appends made durable in batches, as the runtime loop does (many
//! `append`s, one `sync`), for a few batch sizes. Prints events per second.
//!
//! `cargo bench -p chorus-io --bench eventlog` (set `EVENTLOG_BENCH_EVENTS` to change the count).

use std::time::Instant;

use chorus_core::{Config, Event, Message, NodeId, ADMIN_ELECTION};
use chorus_io::eventlog::{LogMeta, SledLog, SledLogOptions};
use chorus_io::runtime::EventLog;

fn main() {
    let total: u64 = std::env::var("EVENTLOG_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // A typical steady-state input: a heartbeat acknowledgement from a peer.
    let event = Event::Message {
        from: NodeId::from("12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"),
        msg: Message::HeartbeatAck {
            term: 7,
            beat: 123_456,
            promise_ms: 30_000,
            holds: false,
            endorsement: None,
            certified: 0,
        },
    };
    println!("eventlog bench: {total} events per run");
    for batch in [1u64, 16, 64, 256] {
        let events = if batch == 1 { total / 20 } else { total };
        let dir = tempfile::tempdir().expect("temp dir");
        let meta = LogMeta::new(
            "bench".into(),
            Config::default(),
            vec![ADMIN_ELECTION.to_owned()],
            0,
        );
        let mut log = SledLog::open(dir.path(), meta, SledLogOptions::default()).expect("open");
        let started = Instant::now();
        let mut now = 0;
        let mut written = 0;
        while written < events {
            for _ in 0..batch {
                log.append(now, &event).expect("append");
                written += 1;
            }
            log.sync().expect("sync");
            now += 1;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "batch {batch:>4}: {written:>7} events in {secs:>6.2} s = {:>9.0} events/s ({:>7.0} syncs/s)",
            written as f64 / secs,
            (written / batch) as f64 / secs
        );
    }
}
