//! Unit tests of the task types: ids, spec bounds, tails. The protocol is tested across nodes
//! in `core/tests/tasks.rs`.

use super::*;

fn spec() -> TaskSpec {
    TaskSpec {
        image: "chorus/sandbox:latest".into(),
        command: vec!["true".into()],
        timeout_ms: 1_000,
        ..Default::default()
    }
}

#[test]
fn task_ids_print_and_parse_as_origin_dash_seq() {
    let id = TaskId {
        origin: "12D3KooWabc".into(),
        seq: 17,
    };
    assert_eq!(id.to_string(), "12D3KooWabc-17");
    assert_eq!("12D3KooWabc-17".parse::<TaskId>().unwrap(), id);
    for bad in [
        "",
        "abc",
        "abc-",
        "-3",
        "abc-0",
        "abc-x",
        "abc-18446744073709551616",
    ] {
        assert!(bad.parse::<TaskId>().is_err(), "{bad}");
    }
}

#[test]
fn a_spec_within_its_bounds_passes_and_each_bound_is_checked() {
    assert_eq!(spec().check(), Ok(()));
    let cases: Vec<(&str, TaskSpec)> = vec![
        (
            "empty image",
            TaskSpec {
                image: String::new(),
                ..spec()
            },
        ),
        (
            "long image",
            TaskSpec {
                image: "x".repeat(bounds::IMAGE + 1),
                ..spec()
            },
        ),
        (
            "a newline in the image (forged log lines)",
            TaskSpec {
                image: "img\nINFO forged".into(),
                ..spec()
            },
        ),
        (
            "an escape in an environment name",
            TaskSpec {
                env: [("K\u{1b}[2J".to_owned(), "v".to_owned())].into(),
                ..spec()
            },
        ),
        (
            "no command",
            TaskSpec {
                command: vec![],
                ..spec()
            },
        ),
        (
            "many args",
            TaskSpec {
                command: vec!["a".into(); bounds::ARGS + 1],
                ..spec()
            },
        ),
        (
            "long command",
            TaskSpec {
                command: vec!["a".repeat(bounds::COMMAND_BYTES + 1)],
                ..spec()
            },
        ),
        (
            "zero timeout",
            TaskSpec {
                timeout_ms: 0,
                ..spec()
            },
        ),
        (
            "long timeout",
            TaskSpec {
                timeout_ms: bounds::TIMEOUT_MS + 1,
                ..spec()
            },
        ),
        (
            "relative workdir",
            TaskSpec {
                workdir: Some("work".into()),
                ..spec()
            },
        ),
        (
            "memory",
            TaskSpec {
                memory_mb: bounds::MEMORY_MB + 1,
                ..spec()
            },
        ),
        (
            "env key with =",
            TaskSpec {
                env: [("A=B".into(), "c".into())].into(),
                ..spec()
            },
        ),
        (
            "env NUL",
            TaskSpec {
                env: [("A".into(), "c\0".into())].into(),
                ..spec()
            },
        ),
        (
            "many requires",
            TaskSpec {
                requires: vec!["gpu".into(); bounds::REQUIRES + 1],
                ..spec()
            },
        ),
        (
            "repo name with /",
            TaskSpec {
                repo: Some(RepoMount {
                    name: "../etc".into(),
                    writable: false,
                }),
                ..spec()
            },
        ),
        (
            "an idle timeout on a task",
            TaskSpec {
                idle_ms: 10,
                ..spec()
            },
        ),
        (
            "a live sandbox idle for longer than it lives",
            TaskSpec {
                live: true,
                command: vec![],
                idle_ms: 1_001,
                ..spec()
            },
        ),
    ];
    for (what, s) in cases {
        assert!(s.check().is_err(), "{what} passed");
    }
    let live = TaskSpec {
        live: true,
        command: vec![],
        idle_ms: 1_000,
        ..spec()
    };
    assert_eq!(live.check(), Ok(()));
    let text = serde_json::to_string(&live).unwrap();
    assert!(text.contains("\"idle_ms\":1000"), "{text}");
    assert_eq!(serde_json::from_str::<TaskSpec>(&text).unwrap(), live);
}

#[test]
fn a_spec_fits_a_node_with_its_capabilities_and_repository() {
    let caps: Vec<String> = vec!["gpu".into(), "repo:site".into()];
    assert!(spec().fits(&caps));
    assert!(TaskSpec {
        requires: vec!["gpu".into()],
        ..spec()
    }
    .fits(&caps));
    assert!(!TaskSpec {
        requires: vec!["tpu".into()],
        ..spec()
    }
    .fits(&caps));
    let repo = |name: &str| TaskSpec {
        repo: Some(RepoMount {
            name: name.into(),
            writable: true,
        }),
        ..spec()
    };
    assert!(repo("site").fits(&caps));
    assert!(!repo("other").fits(&caps));
    assert!(!repo("site").fits(&["site".into()]));
}

/// The tail of at most `max` bytes, whatever its encoded length.
fn tail(s: String, max: usize) -> String {
    wire::wire_tail(s, max, usize::MAX).0
}

#[test]
fn tails_keep_the_last_bytes_at_a_character_boundary() {
    assert_eq!(tail("hello".into(), 10), "hello");
    assert_eq!(tail("hello".into(), 3), "llo");
    // "é" is two bytes: a cut inside it moves forward.
    assert_eq!(tail("aéb".into(), 2), "b");
    assert_eq!(tail("aéb".into(), 3), "éb");
}

#[test]
fn a_result_from_the_wire_is_bounded() {
    let ok = TaskResult::without_run(TaskStatus::Succeeded, "w".into(), 1);
    assert_eq!(ok.check(), Ok(()));
    let long = TaskResult {
        stdout: "x".repeat(MAX_TAIL_BYTES + 1),
        ..ok.clone()
    };
    assert!(long.check().is_err());
    let zero = TaskResult { attempt: 0, ..ok };
    assert!(zero.check().is_err());
}

/// The bound a submitter waits for a result: the liveness bound, every attempt of the longest
/// run, and two re-offer periods (ten task ticks each; a tick is the heartbeat interval within
/// 10 ms to 1 s). For a task the admin said no worker can run: 61 ticks and two re-offers.
#[test]
fn the_result_bound_adds_the_liveness_bound_every_attempt_and_two_reoffers() {
    // 200 ms ticks: a re-offer every 2 s.
    assert_eq!(
        result_bound_ms(200, 5_000, 7_000),
        5_000 + 3 * 7_000 + 2 * 2_000
    );
    // The tick is clamped: 5 ms counts as 10 ms, 5 s as 1 s.
    assert_eq!(result_bound_ms(5, 0, 0), 2 * 100);
    assert_eq!(result_bound_ms(5_000, 0, 0), 2 * 10_000);
    // Saturates instead of wrapping.
    assert_eq!(result_bound_ms(200, u64::MAX, 1), u64::MAX);
    assert_eq!(unschedulable_bound_ms(200), 81 * 200);
    assert_eq!(unschedulable_bound_ms(15_000), 81 * 1_000);
    assert_eq!(unschedulable_bound_ms(5), 81 * 10);
}

/// Every bound of a spec passes at its value and is refused one past it; the exact figures
/// are the documented ones (they keep an offer within a 64 KiB frame).
#[test]
fn each_spec_bound_passes_at_its_edge_and_is_refused_one_past_it() {
    assert_eq!(bounds::COMMAND_BYTES, 8_192);
    assert_eq!(bounds::ENV_BYTES, 8_192);
    assert_eq!(MAX_TAIL_BYTES, 8_192);
    assert_eq!(
        (bounds::MEMORY_MB, bounds::CPU_MILLIS, bounds::PIDS),
        (1_048_576, 1_048_576, 1_048_576)
    );
    let at_and_past = |what: &str, at: TaskSpec, past: TaskSpec| {
        assert_eq!(at.check(), Ok(()), "{what} at its bound");
        assert!(past.check().is_err(), "{what} past its bound");
    };
    let image = |n: usize| TaskSpec {
        image: "i".repeat(n),
        ..spec()
    };
    at_and_past("image", image(bounds::IMAGE), image(bounds::IMAGE + 1));
    let args = |n: usize| TaskSpec {
        command: vec!["a".into(); n],
        ..spec()
    };
    at_and_past("arguments", args(bounds::ARGS), args(bounds::ARGS + 1));
    // Two arguments whose bytes add up to the bound: their lengths are summed.
    let command = |n: usize| TaskSpec {
        command: vec!["a".repeat(bounds::COMMAND_BYTES / 2), "b".repeat(n)],
        ..spec()
    };
    at_and_past(
        "command bytes",
        command(bounds::COMMAND_BYTES / 2),
        command(bounds::COMMAND_BYTES / 2 + 1),
    );
    let env = |n: usize| TaskSpec {
        env: (0..n).map(|i| (format!("K{i}"), String::new())).collect(),
        ..spec()
    };
    at_and_past("variables", env(bounds::ENV), env(bounds::ENV + 1));
    // Keys and values both count, over every variable.
    let env_bytes = |value: usize| TaskSpec {
        env: [
            ("A".to_string(), "a".repeat(bounds::ENV_BYTES / 2 - 1)),
            ("B".to_string(), "b".repeat(value)),
        ]
        .into(),
        ..spec()
    };
    at_and_past(
        "environment bytes",
        env_bytes(bounds::ENV_BYTES / 2 - 1),
        env_bytes(bounds::ENV_BYTES / 2),
    );
    let workdir = |n: usize| TaskSpec {
        workdir: Some(format!("/{}", "w".repeat(n - 1))),
        ..spec()
    };
    at_and_past("workdir", workdir(bounds::NAME), workdir(bounds::NAME + 1));
    let timeout = |ms: u64| TaskSpec {
        timeout_ms: ms,
        ..spec()
    };
    at_and_past(
        "timeout",
        timeout(bounds::TIMEOUT_MS),
        timeout(bounds::TIMEOUT_MS + 1),
    );
    assert_eq!(timeout(1).check(), Ok(()), "a 1 ms timeout");
    let limits = |m: u32, c: u32, p: u32| TaskSpec {
        memory_mb: m,
        cpu_millis: c,
        pids: p,
        ..spec()
    };
    let (m, c, p) = (bounds::MEMORY_MB, bounds::CPU_MILLIS, bounds::PIDS);
    assert_eq!(limits(m, c, p).check(), Ok(()), "every limit at its bound");
    for (what, past) in [
        ("memory", limits(m + 1, c, p)),
        ("cpu", limits(m, c + 1, p)),
        ("pids", limits(m, c, p + 1)),
    ] {
        assert!(past.check().is_err(), "{what} past its bound");
    }
    let requires = |n: usize| TaskSpec {
        requires: (0..n).map(|i| format!("c{i}")).collect(),
        ..spec()
    };
    at_and_past(
        "required capabilities",
        requires(bounds::REQUIRES),
        requires(bounds::REQUIRES + 1),
    );
    let capability = |n: usize| TaskSpec {
        requires: vec!["c".repeat(n)],
        ..spec()
    };
    at_and_past(
        "a capability's name",
        capability(bounds::NAME),
        capability(bounds::NAME + 1),
    );
    let repo = |name: String| TaskSpec {
        repo: Some(RepoMount {
            name,
            writable: false,
        }),
        ..spec()
    };
    at_and_past(
        "a repository's name",
        repo("r".repeat(bounds::NAME)),
        repo("r".repeat(bounds::NAME + 1)),
    );
    assert_eq!(repo("my-repo_1.2".into()).check(), Ok(()));
}

/// Each field the checks read is refused on its own: an empty name, a control character, a
/// relative workdir, an empty or NUL-holding environment key, an empty capability or repo name.
#[test]
fn each_malformed_field_is_refused_on_its_own() {
    let refused = [
        (
            "empty workdir",
            TaskSpec {
                workdir: Some(String::new()),
                ..spec()
            },
        ),
        (
            "control in workdir",
            TaskSpec {
                workdir: Some("/a\nb".into()),
                ..spec()
            },
        ),
        (
            "empty env key",
            TaskSpec {
                env: [(String::new(), "v".into())].into(),
                ..spec()
            },
        ),
        (
            "NUL in env key",
            TaskSpec {
                env: [("A\0".into(), "v".into())].into(),
                ..spec()
            },
        ),
        (
            "empty capability",
            TaskSpec {
                requires: vec![String::new()],
                ..spec()
            },
        ),
        (
            "control in capability",
            TaskSpec {
                requires: vec!["g\tpu".into()],
                ..spec()
            },
        ),
        (
            "empty repo name",
            TaskSpec {
                repo: Some(RepoMount {
                    name: String::new(),
                    writable: true,
                }),
                ..spec()
            },
        ),
    ];
    for (what, s) in refused {
        let e = s.check().expect_err(what);
        assert!(!e.to_string().is_empty(), "{what}: the error says why");
    }
    // A good environment passes (its key and value checked, not refused wholesale).
    assert_eq!(
        TaskSpec {
            env: [("PATH".into(), "/bin".into())].into(),
            ..spec()
        }
        .check(),
        Ok(())
    );
    assert_eq!(
        TaskSpec {
            workdir: Some("/work".into()),
            ..spec()
        }
        .check(),
        Ok(())
    );
}

/// A result's tails, error message and run number are bounded at their edges.
#[test]
fn result_bounds_pass_at_their_edge_and_are_refused_one_past_it() {
    let ok = TaskResult::without_run(TaskStatus::Failed, "w".into(), 1);
    let at = TaskResult {
        stdout: "o".repeat(MAX_TAIL_BYTES),
        stderr: "e".repeat(MAX_TAIL_BYTES),
        error: Some("x".repeat(MAX_TAIL_BYTES)),
        duration_ms: crate::MAX_WIRE_INT,
        timings: super::RunTimings {
            cleanup_ms: crate::MAX_WIRE_INT,
            ..Default::default()
        },
        ..ok.clone()
    };
    assert_eq!(at.check(), Ok(()));
    for (what, past) in [
        (
            "stdout",
            TaskResult {
                stdout: "o".repeat(MAX_TAIL_BYTES + 1),
                ..ok.clone()
            },
        ),
        (
            "stderr",
            TaskResult {
                stderr: "e".repeat(MAX_TAIL_BYTES + 1),
                ..ok.clone()
            },
        ),
        (
            "error",
            TaskResult {
                error: Some("x".repeat(MAX_TAIL_BYTES + 1)),
                ..ok.clone()
            },
        ),
        (
            "duration",
            TaskResult {
                duration_ms: crate::MAX_WIRE_INT + 1,
                ..ok.clone()
            },
        ),
        (
            "attempt",
            TaskResult {
                attempt: 0,
                ..ok.clone()
            },
        ),
        (
            "a stage's time",
            TaskResult {
                timings: super::RunTimings {
                    release_ms: crate::MAX_WIRE_INT + 1,
                    ..Default::default()
                },
                ..ok.clone()
            },
        ),
    ] {
        assert!(past.check().is_err(), "{what} past its bound");
    }
    // A result without a run is numbered from 1 whatever it was given.
    assert_eq!(
        TaskResult::without_run(TaskStatus::Error, "w".into(), 0).attempt,
        1
    );
    assert_eq!(
        TaskResult::without_run(TaskStatus::Error, "w".into(), 3).attempt,
        3
    );
    assert_eq!(ok.worker, NodeId::new("w"));
    assert_eq!(ok.status, TaskStatus::Failed);
}

/// The names the API, metrics and traces print.
#[test]
fn statuses_and_spec_errors_print_their_names() {
    let names: Vec<String> = TaskStatus::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        names,
        [
            "succeeded",
            "failed",
            "out_of_memory",
            "timed_out",
            "cancelled",
            "error",
            "unschedulable",
            "lost"
        ]
    );
    assert_eq!(
        SpecError("image must be 1 to 256 bytes".into()).to_string(),
        "image must be 1 to 256 bytes"
    );
    let id = TaskId {
        origin: "n1".into(),
        seq: 4,
    };
    assert_eq!(format!("{id:?}"), "n1-4");
    // On the wire a task id is its string form, and it reads back.
    assert_eq!(serde_json::to_string(&id).unwrap(), "\"n1-4\"");
    assert_eq!(serde_json::from_str::<TaskId>("\"n1-4\"").unwrap(), id);
    assert!(serde_json::from_str::<TaskId>("\"n1\"").is_err());
    // An origin may hold a `-`: the number is after the last one.
    let dashed: TaskId = "a-b-9".parse().unwrap();
    assert_eq!((dashed.origin.as_str(), dashed.seq), ("a-b", 9));
}

/// The wire form of a spec leaves out the fields at their defaults (docs/wire-format.md), and
/// every field set survives the round trip.
#[test]
fn a_spec_on_the_wire_omits_its_defaults_and_round_trips() {
    assert_eq!(
        serde_json::to_string(&spec()).unwrap(),
        r#"{"image":"chorus/sandbox:latest","command":["true"],"timeout_ms":1000}"#
    );
    let full = TaskSpec {
        env: [("A".into(), "1".into())].into(),
        workdir: Some("/w".into()),
        memory_mb: 64,
        cpu_millis: 500,
        pids: 32,
        network: true,
        requires: vec!["gpu".into()],
        repo: Some(RepoMount {
            name: "site".into(),
            writable: true,
        }),
        ..spec()
    };
    let text = serde_json::to_string(&full).unwrap();
    for field in [
        "\"memory_mb\":64",
        "\"cpu_millis\":500",
        "\"pids\":32",
        "\"network\":true",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
    assert_eq!(serde_json::from_str::<TaskSpec>(&text).unwrap(), full);
}

/// A tail cut inside a multi-byte character moves forward to the next boundary, byte by byte.
#[test]
fn a_tail_cut_inside_a_long_character_moves_to_the_next_boundary() {
    // "😀" is four bytes: cuts one, two and three bytes into it all move past it.
    let s = "a😀b".to_string();
    assert_eq!(tail(s.clone(), 6), "a😀b");
    assert_eq!(tail(s.clone(), 5), "😀b");
    assert_eq!(tail(s.clone(), 4), "b");
    assert_eq!(tail(s.clone(), 3), "b");
    assert_eq!(tail(s.clone(), 2), "b");
    assert_eq!(tail(s, 1), "b");
    assert_eq!(tail("abc".into(), 0), "");
}

/// Issue 33's new fields have defaults: what an older build logged or sent — a queued state
/// without `pending`, an offer without `attempt` and `unplaceable_ms`, a report without
/// `capacity` and `partial`, resources without `task_capacity` — still reads, as before; and
/// written without them, the new fields change nothing on the wire.
#[test]
fn what_an_older_build_wrote_still_reads() {
    use crate::{Message, Resources};
    let queued: OfferState = serde_json::from_str(r#"{"state":"queued"}"#).unwrap();
    assert_eq!(queued, OfferState::Queued { pending: None });
    assert_eq!(
        serde_json::to_string(&queued).unwrap(),
        r#"{"state":"queued"}"#
    );
    let offer: Message = serde_json::from_str(
        r#"{"type":"task_offer","task":"n1-1","spec":{"image":"i","command":["true"],"timeout_ms":1}}"#,
    )
    .unwrap();
    assert!(matches!(
        offer,
        Message::TaskOffer {
            attempt: 0,
            unplaceable_ms: 0,
            cancel: false,
            ..
        }
    ));
    let report: Message = serde_json::from_str(
        r#"{"type":"worker_report","term":1,"seen":0,"slots":2,"running":[],"finished":[]}"#,
    )
    .unwrap();
    assert!(matches!(
        report,
        Message::WorkerReport { partial: false, capacity, .. } if capacity.is_unset()
    ));
    let r: Resources =
        serde_json::from_str(r#"{"cpu_millicores":1000,"mem_free_mb":512,"task_slots":3}"#)
            .unwrap();
    assert!(r.task_capacity.is_unset());
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"cpu_millicores":1000,"mem_free_mb":512,"task_slots":3}"#
    );
    let unplaceable = OfferState::Queued {
        pending: Some(Pending::Unplaceable {
            reason: "no worker offers gpu (1 worker checked)".into(),
            for_ms: 1_500,
        }),
    };
    assert_eq!(
        serde_json::to_string(&unplaceable).unwrap(),
        r#"{"state":"queued","pending":{"why":"unplaceable","reason":"no worker offers gpu (1 worker checked)","for_ms":1500}}"#
    );
}

/// A pending reason names capabilities of up to 256 bytes each: cut to 1 KiB at a character
/// boundary, so a submitter takes it.
#[test]
fn a_pending_reason_is_cut_to_its_bound() {
    let short = "no worker offers gpu (1 worker checked)".to_owned();
    assert_eq!(place::bounded_reason(short.clone()), short);
    let long = format!("no worker offers {} together", "é".repeat(2_000));
    let cut = place::bounded_reason(long.clone());
    assert!(cut.len() <= MAX_PENDING_BYTES && cut.len() > MAX_PENDING_BYTES - 4);
    assert!(cut.ends_with('…') && long.starts_with(cut.trim_end_matches('…')));
}
