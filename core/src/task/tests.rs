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
    ];
    for (what, s) in cases {
        assert!(s.check().is_err(), "{what} passed");
    }
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
