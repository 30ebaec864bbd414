//! The sled event log (docs/design.md §3): durable appends, snapshots + tail, reopening, and clear errors
//! for corrupt records, foreign data directories and other formats.

use chorus_core::{Config, Core, Event, NodeId, PeerInfo, Timer, ADMIN_ELECTION};
use chorus_io::eventlog::{LogMeta, RecordedNotice, SledLog, SledLogOptions};
use chorus_io::runtime::{EventLog, LogError};

fn meta(id: &str) -> LogMeta {
    LogMeta::new(
        NodeId::from(id),
        Config {
            bootstrap_expect: 1,
            ..Config::default()
        },
        vec![ADMIN_ELECTION.to_owned()],
        7,
    )
}

fn events() -> Vec<(u64, Event)> {
    vec![
        (0, Event::Started),
        (5, Event::peer_up("b".into(), PeerInfo::default())),
        (
            15_000,
            Event::TimerFired {
                timer: Timer::Discovery,
            },
        ),
        (15_001, Event::PeerDown { peer: "b".into() }),
    ]
}

/// The log's sled database opened directly, to damage it.
fn raw_db(dir: &std::path::Path) -> sled::Db {
    when_unlocked(dir, || sled::open(dir))
}

/// `open`'s answer once the database at `dir` is free: sled releases its file lock from a
/// background thread a moment after the log is dropped (and a runtime's last flush can hold it
/// a moment after `run` returns), so retry, bounded, while the lock is still held.
fn when_unlocked<T, E: std::fmt::Debug>(
    dir: &std::path::Path,
    mut open: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Ok(db) => return db,
            Err(e) if std::time::Instant::now() < deadline && format!("{e:?}").contains("lock") => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("cannot open {}: {e:?}", dir.display()),
        }
    }
}

fn open(dir: &std::path::Path, id: &str) -> Result<SledLog, LogError> {
    SledLog::open(dir, meta(id), SledLogOptions::default())
}

#[test]
fn append_sync_recover_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), "a").unwrap();
    assert!(log.recover().unwrap().is_empty());
    for (now, ev) in events() {
        log.append(now, &ev).unwrap();
    }
    log.sync().unwrap();
    let r = log.recover().unwrap();
    assert_eq!(r.snapshot, None);
    assert_eq!(r.tail, events());
    assert_eq!(log.next_seq(), 5);
}

#[test]
fn reopen_after_drop_keeps_synced_events_and_numbering() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), "a").unwrap();
        for (now, ev) in events() {
            log.append(now, &ev).unwrap();
        }
        log.sync().unwrap();
    }
    let mut log = open(dir.path(), "a").unwrap();
    assert_eq!(log.recover().unwrap().tail, events());
    assert_eq!(log.next_seq(), 5);
    log.append(20_000, &Event::Shutdown).unwrap();
    log.sync().unwrap();
    drop(log);
    let mut log = open(dir.path(), "a").unwrap();
    let tail = log.recover().unwrap().tail;
    assert_eq!(tail.len(), 5);
    assert_eq!(tail[4], (20_000, Event::Shutdown));
    assert_eq!(log.meta().node_id, NodeId::from("a"));
}

#[test]
fn snapshot_then_tail_and_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = SledLog::open(
        dir.path(),
        meta("a"),
        SledLogOptions {
            keep_snapshots: 1,
            ..SledLogOptions::default()
        },
    )
    .unwrap();
    let mut core = meta("a").fresh_core().unwrap();
    let evs = events();
    for (now, ev) in &evs[..2] {
        log.append(*now, ev).unwrap();
        core.step(*now, ev.clone(), &mut Vec::new());
    }
    log.snapshot(&core).unwrap();
    for (now, ev) in &evs[2..] {
        log.append(*now, ev).unwrap();
        core.step(*now, ev.clone(), &mut Vec::new());
    }
    log.sync().unwrap();
    drop(log);

    let mut log = open(dir.path(), "a").unwrap();
    let r = log.recover().unwrap();
    assert_eq!(r.tail, evs[2..].to_vec());
    // Snapshot + tail folds to the same state as the whole history.
    let mut restored = Core::restore(r.snapshot.as_deref().unwrap()).unwrap();
    for (now, ev) in r.tail {
        restored.step(now, ev, &mut Vec::new());
    }
    assert_eq!(restored, core);
    // The covered events were pruned; the replay basis is the snapshot.
    let basis = log.replay_basis().unwrap();
    assert_eq!(basis.snapshot.as_ref().map(|s| s.0), Some(2));
    assert_eq!(basis.events.first().map(|e| e.0), Some(3));
    assert_eq!(log.next_seq(), 5);
}

#[test]
fn two_snapshots_kept_by_default_so_replay_reaches_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), "a").unwrap();
    let mut core = meta("a").fresh_core().unwrap();
    for (i, (now, ev)) in events().into_iter().enumerate() {
        log.append(now, &ev).unwrap();
        core.step(now, ev, &mut Vec::new());
        if i == 1 || i == 3 {
            log.snapshot(&core).unwrap();
        }
    }
    // The first snapshot is the replay basis; recovery starts from the second (nothing after).
    let basis = log.replay_basis().unwrap();
    assert_eq!(basis.snapshot.as_ref().map(|s| s.0), Some(2));
    assert_eq!(basis.events.len(), 2);
    let r = log.recover().unwrap();
    assert!(r.tail.is_empty());
    assert_eq!(Core::restore(&r.snapshot.unwrap()).unwrap(), core);
}

#[test]
fn notices_are_recorded_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "a").unwrap();
    let rec = log.notice_recorder();
    let n = RecordedNotice {
        seq: 3,
        now_ms: 10,
        notice: chorus_core::Notice::Voted {
            term: 1,
            candidate: "a".into(),
        },
    };
    rec.record(0, &n).unwrap();
    rec.flush().unwrap();
    assert_eq!(log.notices().unwrap(), vec![n]);
}

fn error_text(result: Result<impl std::fmt::Debug, LogError>) -> String {
    format!("{}", result.expect_err("an error"))
}

#[test]
fn corrupt_record_is_a_clear_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), "a").unwrap();
        for (now, ev) in events() {
            log.append(now, &ev).unwrap();
        }
        log.sync().unwrap();
    }
    {
        // Garbage under an event key, written through sled itself.
        let db = raw_db(dir.path());
        let events = db.open_tree("events").unwrap();
        events
            .insert(3u64.to_be_bytes(), &b"\xff\x00garbage"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let mut log = open(dir.path(), "a").unwrap();
    let err = log.recover().unwrap_err();
    assert!(matches!(err, LogError::Corrupt(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    assert!(text.contains("event 3"), "{text}");
}

#[test]
fn gap_in_the_sequence_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), "a").unwrap();
        for (now, ev) in events() {
            log.append(now, &ev).unwrap();
        }
        log.sync().unwrap();
    }
    {
        let db = raw_db(dir.path());
        db.open_tree("events")
            .unwrap()
            .remove(2u64.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let text = error_text(open(dir.path(), "a").unwrap().recover());
    assert!(text.contains("event 2 is missing"), "{text}");
}

#[test]
fn version_mismatch_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), "a").unwrap());
    {
        let db = raw_db(dir.path());
        let meta_tree = db.open_tree("meta").unwrap();
        let mut marker: serde_json::Value =
            serde_json::from_slice(&meta_tree.get("meta").unwrap().unwrap()).unwrap();
        marker["format"] = 99.into();
        meta_tree
            .insert("meta", serde_json::to_vec(&marker).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let text = error_text(open(dir.path(), "a"));
    assert!(text.contains("format 99"), "{text}");
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    let text = error_text(SledLog::open_existing(dir.path()));
    assert!(text.contains("format 99"), "{text}");
}

#[test]
fn another_nodes_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), "a").unwrap());
    let text = error_text(open(dir.path(), "b"));
    assert!(text.contains("belongs to node a, not b"), "{text}");
}

#[test]
fn events_without_a_version_marker_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = raw_db(dir.path());
        db.open_tree("events")
            .unwrap()
            .insert(1u64.to_be_bytes(), &b"[0,{\"kind\":\"started\"}]"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let text = error_text(open(dir.path(), "a"));
    assert!(text.contains("no version marker"), "{text}");
}

#[test]
fn open_existing_reads_the_marker_and_refuses_empty_dirs() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), "a").unwrap());
    let log = SledLog::open_existing(dir.path()).unwrap();
    assert_eq!(log.meta().node_id, NodeId::from("a"));
    assert_eq!(log.meta().config.bootstrap_expect, 1);
    let empty = tempfile::tempdir().unwrap();
    let text = error_text(SledLog::open_existing(empty.path()));
    assert!(text.contains("no event log here"), "{text}");
}

/// The runtime loop over a real sled log: a lone voter elects itself, shuts down, and a restart
/// recovers term and vote.
#[tokio::test]
async fn runtime_over_sled_recovers_term_and_vote() {
    use chorus_io::runtime::{Runtime, TokioClock, Transport, TransportEvent};
    struct Silent;
    impl Transport for Silent {
        fn send(&mut self, _: &NodeId, _: &chorus_core::Message) {}
        fn broadcast(&mut self, _: &chorus_core::Message) {}
        async fn next(&mut self) -> TransportEvent {
            std::future::pending().await
        }
        fn sign(&self, signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
            chorus_core::certificate::simulated_signature(signer, digest)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let fast = Config {
        heartbeat_interval_ms: 20,
        election_timeout_min_ms: 60,
        election_timeout_max_ms: 90,
        discovery_timeout_ms: 30,
        ..Config::default()
    };
    /// Says when the node first becomes admin, so the run stops on an event, not a timer.
    struct Elected(Option<tokio::sync::oneshot::Sender<()>>);
    impl chorus_io::runtime::Observer for Elected {
        fn on_role_changed(&mut self, _: u64, role: chorus_core::Role, _: u64, _: Option<u64>) {
            if role == chorus_core::Role::Admin {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
    }
    let m = LogMeta::new("a".into(), fast, vec![ADMIN_ELECTION.to_owned()], 1);
    let log = SledLog::open(dir.path(), m.clone(), SledLogOptions::default()).unwrap();
    let (tx, elected) = tokio::sync::oneshot::channel();
    // A generous liveness bound (the election itself takes ~100 ms): the run ends as soon as the
    // node is admin, and a node that never wins fails the test instead of hanging it.
    let stop = async {
        tokio::time::timeout(std::time::Duration::from_secs(30), elected)
            .await
            .expect("the lone voter becomes admin")
            .unwrap();
    };
    let core = Runtime::new(
        m.fresh_core().unwrap(),
        Silent,
        log,
        TokioClock::new(),
        Elected(Some(tx)),
    )
    .run(stop)
    .await
    .unwrap();
    assert_eq!(core.term(), 1);
    // CI on a loaded machine found the lock still held here.
    let log = when_unlocked(dir.path(), || {
        SledLog::open(dir.path(), m.clone(), SledLogOptions::default())
    });
    let core = Runtime::new(m.fresh_core().unwrap(), Silent, log, TokioClock::new(), ())
        .run(async {})
        .await
        .unwrap();
    assert!(core.term() >= 1);
    assert!(core.voted_for().is_some());
}

/// A damaged record that the latest snapshot already covers still stops recovery: the log is
/// checked whole, not just its tail.
#[test]
fn corrupt_record_under_a_snapshot_is_found_at_recovery() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), "a").unwrap();
        let mut core = meta("a").fresh_core().unwrap();
        for (now, ev) in events() {
            log.append(now, &ev).unwrap();
            core.step(now, ev, &mut Vec::new());
        }
        log.snapshot(&core).unwrap();
    }
    {
        let db = raw_db(dir.path());
        db.open_tree("events")
            .unwrap()
            .insert(2u64.to_be_bytes(), &b"{"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let text = error_text(open(dir.path(), "a").unwrap().recover());
    assert!(text.contains("event 2 does not decode"), "{text}");
}

/// A store that lost its contents (files replaced or emptied) is not taken for a new log: the
/// marker file outside sled says a log was created here.
#[test]
fn emptied_store_is_damage_not_a_fresh_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), "a").unwrap();
        log.append(0, &Event::Started).unwrap();
        log.sync().unwrap();
    }
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name().unwrap() != chorus_io::eventlog::MARKER_FILE {
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
    let text = error_text(open(dir.path(), "a"));
    assert!(text.contains("damaged"), "{text}");
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
}
