//! Every message that carries task data fits the 64 KiB frame, whatever the task's spec and
//! output hold (issue 33, finding 5). Sizes are measured the way the transport measures them:
//! `codec::encode`, the JSON envelope it sends. The envelope is at its widest here — a cluster
//! id of 128 control characters, node ids of `MAX_ID_BYTES` control characters, numbers at their
//! largest — since JSON writes each control character as six bytes (`\u0001`).

use crate::one_core;

use std::sync::Arc;

use chorus_core::codec::{encode, MAX_MESSAGE_BYTES};
use chorus_core::{
    Command, Config, Core, Event, Message, Notice, TaskId, TaskResult, TaskSpec, Timer,
    MAX_ID_BYTES, MAX_SPEC_WIRE_BYTES, MAX_WIRE_INT,
};
use one_core::{from, heartbeat, voter_with};
use proptest::prelude::*;

/// The widest cluster id a config accepts: 128 quotes, each escaped to two bytes (control
/// characters, which escape to six, are refused since issue 33).
fn cluster() -> String {
    "\"".repeat(128)
}

/// The widest node id accepted from the wire, every byte escaped to six.
fn wide_id(c: char) -> String {
    format!("{c}{}", "\u{1}".repeat(MAX_ID_BYTES - 1))
}

fn config() -> Config {
    Config {
        cluster_id: cluster(),
        ..Config::default()
    }
}

fn spec() -> TaskSpec {
    TaskSpec {
        image: "img".into(),
        command: vec!["true".into()],
        timeout_ms: 1_000,
        ..Default::default()
    }
}

/// The encoded size of `msg` as the transport sends it; panics (with the kind) when it does not
/// fit.
fn frame_len(msg: &Message) -> usize {
    match encode(&cluster(), msg) {
        Ok(bytes) => {
            assert!(bytes.len() <= MAX_MESSAGE_BYTES);
            bytes.len()
        }
        Err(e) => panic!("{} does not fit: {e}", msg.kind()),
    }
}

/// Every message `out` sends fits a frame.
fn assert_sends_fit(out: &[Command]) {
    for c in out {
        if let Command::Send { msg, .. } | Command::Broadcast { msg } = c {
            frame_len(msg);
        }
    }
}

/// The offer and the placement of `spec`, with the widest envelope around it.
fn carriers(spec: &TaskSpec) -> [Message; 2] {
    let spec = Arc::new(spec.clone());
    let task = TaskId {
        origin: wide_id('s').into(),
        seq: MAX_WIRE_INT,
    };
    [
        Message::TaskOffer {
            task: task.clone(),
            spec: spec.clone(),
            cancel: true,
            attempt: u32::MAX,
            unplaceable_ms: MAX_WIRE_INT,
        },
        Message::TaskPlace {
            term: u64::MAX,
            task,
            attempt: u32::MAX,
            seq: u64::MAX,
            spec,
        },
    ]
}

/// A worker with the widest id, following admin `b` (term 1), with a slot.
fn worker() -> (Core, String) {
    let me = wide_id('w');
    let mut w = voter_with(&me, &["b", "c", &me], config());
    w.step_vec(
        50,
        Event::ResourcesSampled {
            resources: chorus_core::Resources {
                task_slots: 4,
                ..Default::default()
            },
        },
    );
    w.step_vec(100, from("b", heartbeat(1, 1)));
    (w, me)
}

/// `s-1` (with the widest submitter id) placed on `w`, run 1.
fn placed(w: &mut Core) -> TaskId {
    let task = TaskId {
        origin: wide_id('s').into(),
        seq: 1,
    };
    let msg = Message::TaskPlace {
        term: 1,
        task: task.clone(),
        attempt: 1,
        seq: 1,
        spec: Arc::new(spec()),
    };
    let out = w.step_vec(100, from("b", msg));
    assert!(out
        .iter()
        .any(|c| matches!(c, Command::StartSandbox { .. })));
    task
}

/// The results `out` sends.
fn results(out: &[Command]) -> Vec<TaskResult> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send {
                msg: Message::TaskResult { result, .. },
                ..
            } => Some((**result).clone()),
            _ => None,
        })
        .collect()
}

/// 9 KB of `\x01` on stdout and on stderr: 8 KiB tails of them were a 98 KB `task_result` that
/// could never be sent. The worker cuts each tail to fit, from the front, and sends a result
/// that fits — at once and at every resend, across a restart too.
#[test]
fn a_result_of_control_characters_is_cut_to_fit_its_frame() {
    let (mut w, _) = worker();
    let task = placed(&mut w);
    let exit = chorus_core::SandboxExit {
        exit_code: Some(0),
        stdout: format!("start{}end", "\u{1}".repeat(9_000)),
        stderr: "\u{1}".repeat(9_000),
        stdout_truncated_bytes: 100,
        ..Default::default()
    };
    let out = w.step_vec(
        200,
        Event::SandboxExited {
            task: task.clone(),
            attempt: 1,
            exit,
        },
    );
    assert_sends_fit(&out);
    let [r] = &results(&out)[..] else {
        panic!("one result sent");
    };
    // Each tail is what fits in 24 KiB encoded: `end` and 4,095 `\u0001` (3 + 6 × 4,095 bytes),
    // 4,096 `\u0001` on stderr. What went is counted, with what the runtime dropped before.
    let ones = |s: &str| s.chars().filter(|&c| c == '\u{1}').count();
    assert!(r.stdout.ends_with("end") && !r.stdout.contains("start"));
    assert_eq!((ones(&r.stdout), r.stdout.len()), (4_095, 4_098));
    assert_eq!(r.stdout_truncated_bytes, 100 + 9_008 - 4_098);
    assert_eq!((ones(&r.stderr), r.stderr.len()), (4_096, 4_096));
    assert_eq!(r.stderr_truncated_bytes, 9_000 - 4_096);
    // Resent at every tick until acknowledged: each copy fits.
    let mut now = 200;
    for _ in 0..3 {
        let (at, timer) = w.next_deadline().expect("a tick is armed");
        now = at.max(now);
        assert_sends_fit(&w.step_vec(now, Event::TimerFired { timer }));
    }
    let out = w.step_vec(now + 1, Event::Started);
    assert_sends_fit(&out);
    assert_eq!(w.unacknowledged_results().len(), 1);
}

/// A submitter with the widest id, in the widest cluster, following admin `b`.
fn submitter() -> Core {
    let me = wide_id('s');
    let mut s = voter_with(&me, &["b", "c", &me], config());
    s.step_vec(100, from("b", heartbeat(1, 1)));
    s
}

fn submit(s: &mut Core, spec: &TaskSpec, request: u64) -> (Vec<Command>, Result<(), String>) {
    let now = s.now_ms() + 1;
    let out = s.step_vec(
        now,
        Event::SubmitTask {
            spec: Arc::new(spec.clone()),
            key: None,
            owner: None,
            request,
        },
    );
    let refused = out.iter().find_map(|c| match c {
        Command::Notice(Notice::TaskRefused { reason, .. }) => Some(reason.clone()),
        _ => None,
    });
    (out, refused.map_or(Ok(()), Err))
}

/// 8 KB of `\x01` in a spec's command and 8 KB in its environment (each within its 8 KiB) was
/// a 96 KB `task_offer` that could never be sent: the task never ended and could not be
/// cancelled. It is refused at submit, the reason naming its size and the bound.
#[test]
fn a_spec_that_cannot_fit_its_frame_is_refused_at_submit() {
    let mut s = submitter();
    let wide = TaskSpec {
        command: vec!["\u{1}".repeat(8_000)],
        env: [("K".to_owned(), "\u{1}".repeat(8_000))].into(),
        ..spec()
    };
    let (out, refused) = submit(&mut s, &wide, 1);
    let reason = refused.expect_err("refused");
    let encoded = serde_json::to_vec(&wide).unwrap().len();
    assert!(encoded > 90_000);
    assert!(
        reason.contains(&format!("{encoded} bytes")) && reason.contains("65536-byte frame"),
        "{reason}"
    );
    assert!(s.owned_tasks().is_empty());
    assert_sends_fit(&out);
    // The same in plain text is accepted, and its offer fits.
    let plain = TaskSpec {
        command: vec!["a".repeat(8_000)],
        env: [("K".to_owned(), "a".repeat(8_000))].into(),
        ..spec()
    };
    let (out, accepted) = submit(&mut s, &plain, 2);
    assert_eq!(accepted, Ok(()));
    assert!(out.iter().any(|c| matches!(
        c,
        Command::Send {
            msg: Message::TaskOffer { .. },
            ..
        }
    )));
    assert_sends_fit(&out);
}

/// The bound is on the encoded spec: one of exactly `MAX_SPEC_WIRE_BYTES` is accepted and its
/// offer and placement fit with the widest envelope; one byte more is refused.
#[test]
fn a_spec_at_its_encoded_bound_is_accepted_and_one_byte_more_is_not() {
    let with_env = |value: String| TaskSpec {
        command: vec!["\u{1}".repeat(8_000)],
        env: [("K".to_owned(), value)].into(),
        ..spec()
    };
    let base = serde_json::to_vec(&with_env(String::new())).unwrap().len();
    let room = MAX_SPEC_WIRE_BYTES - base;
    let value = "\u{1}".repeat(room / 6) + &"a".repeat(room % 6);
    let at = with_env(value.clone());
    assert_eq!(serde_json::to_vec(&at).unwrap().len(), MAX_SPEC_WIRE_BYTES);
    assert_eq!(at.check(), Ok(()));
    for m in carriers(&at) {
        frame_len(&m);
    }
    let mut s = submitter();
    let (out, accepted) = submit(&mut s, &at, 1);
    assert_eq!(accepted, Ok(()));
    assert_sends_fit(&out);
    let past = with_env(value + "a");
    assert!(past.check().is_err());
    assert!(submit(&mut s, &past, 2).1.is_err());
}

/// State an older build kept — a result whose tails encode past the frame, a task whose spec
/// does too — is made to fit at the next start: the result is cut (and says so) before it is
/// sent again; the task, which could never be offered, ends as an error saying why.
#[test]
fn what_an_older_build_kept_is_fitted_at_restart() {
    // An older build's state: plain text where it had control characters, swapped in the
    // snapshot's JSON.
    let older = |c: &Core| {
        let text = String::from_utf8(c.snapshot()).unwrap();
        let swapped = text.replace(&"a".repeat(8_000), &"\\u0001".repeat(8_000));
        assert_ne!(swapped, text);
        Core::restore(swapped.as_bytes()).unwrap()
    };
    let (mut w, _) = worker();
    let task = placed(&mut w);
    let exit = chorus_core::SandboxExit {
        exit_code: Some(0),
        stdout: "a".repeat(8_000),
        stderr: "a".repeat(8_000),
        ..Default::default()
    };
    w.step_vec(
        200,
        Event::SandboxExited {
            task: task.clone(),
            attempt: 1,
            exit,
        },
    );
    let mut w = older(&w);
    assert!(encode(
        &cluster(),
        &Message::TaskResult {
            task: task.clone(),
            result: Box::new(w.unacknowledged_results()[&task].clone()),
        }
    )
    .is_err());
    let mut out = w.step_vec(300, Event::Started);
    let (at, timer) = w.next_deadline().expect("a tick is armed");
    out.extend(w.step_vec(at, Event::TimerFired { timer }));
    assert_sends_fit(&out);
    let sent = results(&out);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].stdout_truncated_bytes, 8_000 - 4_096);

    let mut s = submitter();
    let plain = TaskSpec {
        command: vec!["a".repeat(8_000)],
        env: [("K".to_owned(), "a".repeat(8_000))].into(),
        ..spec()
    };
    assert_eq!(submit(&mut s, &plain, 1).1, Ok(()));
    let mut s = older(&s);
    let out = s.step_vec(400, Event::Started);
    assert!(out.iter().any(|c| matches!(
        c,
        Command::Notice(Notice::TaskCompleted {
            status: chorus_core::TaskStatus::Error,
            ..
        })
    )));
    let t = s.owned_tasks().values().next().expect("the task");
    let error = t
        .result
        .as_ref()
        .and_then(|r| r.error.clone())
        .unwrap_or_default();
    assert!(error.contains("can never be offered"), "{error}");
    assert_sends_fit(&out);
}

/// The worker reports in `out`: (running, finished, released, partial).
type ReportSeen = (Vec<TaskId>, Vec<TaskId>, Vec<TaskId>, bool);

fn reports(out: &[Command]) -> Vec<ReportSeen> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send {
                msg:
                    msg @ Message::WorkerReport {
                        running,
                        finished,
                        released,
                        partial,
                        ..
                    },
                ..
            } => {
                frame_len(msg);
                let tasks = |l: &[(TaskId, u32)]| l.iter().map(|(t, _)| t.clone()).collect();
                Some((tasks(running), finished.clone(), tasks(released), *partial))
            }
            _ => None,
        })
        .collect()
}

/// Issue 33: a worker report listed up to 1,024 runs, 1,024 finished tasks and 1,024 released
/// placements, ~70 bytes each with ordinary peer ids (~200 KB) and ~600 with the widest task
/// ids (~1.8 MB): it could never be sent, and the admin never heard of the worker again. Here
/// every list is full, every id at its widest: each report fits its frame, says it is partial,
/// and the follow-ups (one a tick) report every entry of every list — none starved by the
/// others — and then stop.
#[test]
fn a_worker_report_of_full_lists_is_cut_to_fit_and_every_entry_is_reported_in_turn() {
    const N: u64 = chorus_core::task::MAX_REPORTED as u64;
    let me = wide_id('w');
    let mut w = voter_with(&me, &["b", "c", &me], config());
    w.step_vec(
        50,
        Event::ResourcesSampled {
            resources: chorus_core::Resources {
                task_slots: N as u32,
                ..Default::default()
            },
        },
    );
    w.step_vec(100, from("b", heartbeat(1, 1)));
    let origin = wide_id('s');
    let id = |k: u64| TaskId {
        origin: origin.as_str().into(),
        seq: MAX_WIRE_INT - k,
    };
    let mut seq = 0;
    let mut place = |w: &mut Core, k: u64| {
        seq += 1;
        let msg = Message::TaskPlace {
            term: 1,
            task: id(k),
            attempt: u32::MAX,
            seq,
            spec: Arc::new(spec()),
        };
        reports(&w.step_vec(200, from("b", msg)));
    };
    // 1,024 run, finish and are acknowledged; 1,024 run and finish, their results held;
    // 1,024 run; 1,024 more find no free slot and are released.
    for k in 0..2 * N {
        place(&mut w, k);
        let exit = chorus_core::SandboxExit {
            exit_code: Some(0),
            ..Default::default()
        };
        let event = Event::SandboxExited {
            task: id(k),
            attempt: u32::MAX,
            exit,
        };
        reports(&w.step_vec(200, event));
        if k < N {
            let ack = Message::TaskResultAck {
                task: id(k),
                worker: None,
            };
            reports(&w.step_vec(200, from(&origin, ack)));
        }
    }
    for k in 2 * N..4 * N {
        place(&mut w, k);
    }
    assert_eq!(
        (w.running_tasks().len(), w.unacknowledged_results().len()),
        (N as usize, N as usize)
    );
    // A new term: the report to its admin starts a round from the start of every list.
    let mut now = 300;
    let mut seen = reports(&w.step_vec(now, from("b", heartbeat(2, 2))));
    assert_eq!(seen.len(), 1);
    // Follow-ups, one a tick, until a tick sends none: the round is over. The admin's
    // heartbeats keep coming (every 10 ticks), so the worker follows it throughout.
    let tick = |w: &mut Core, now: &mut u64| {
        let mut out = vec![];
        loop {
            let (at, timer) = w.next_deadline().expect("a tick is armed");
            *now = at.max(*now);
            out.extend(w.step_vec(*now, Event::TimerFired { timer }));
            if timer == Timer::Tasks {
                return reports(&out);
            }
        }
    };
    let mut beat = 2;
    for ticks in 1.. {
        assert!(ticks < 200, "the round never ends");
        if ticks % 10 == 0 {
            beat += 1;
            seen.extend(reports(&w.step_vec(now, from("b", heartbeat(2, beat)))));
        }
        let more = tick(&mut w, &mut now);
        if more.is_empty() {
            break;
        }
        seen.extend(more);
    }
    assert!(
        seen.len() > 4 && seen.iter().all(|r| r.3),
        "{} reports",
        seen.len()
    );
    let all = |pick: fn(&ReportSeen) -> &Vec<TaskId>| -> std::collections::BTreeSet<TaskId> {
        seen.iter().flat_map(|r| pick(r).iter().cloned()).collect()
    };
    let range = |from: u64, to: u64| {
        (from..to)
            .map(id)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let same = |got: std::collections::BTreeSet<TaskId>,
                want: std::collections::BTreeSet<TaskId>,
                what: &str| {
        let missing = want.difference(&got).count();
        let extra = got.difference(&want).count();
        assert_eq!((missing, extra), (0, 0), "{what}: missing, extra");
    };
    same(all(|r| &r.0), range(2 * N, 3 * N), "every run");
    same(
        all(|r| &r.1),
        range(0, 2 * N),
        "every result and acknowledgement",
    );
    same(all(|r| &r.2), range(3 * N, 4 * N), "every release");
    // Each list had its share of every report but the last.
    for r in &seen[..seen.len() - 1] {
        assert!(!r.0.is_empty() && !r.1.is_empty() && !r.2.is_empty());
    }
    // The worker is back to its cadence (no report at the next ticks).
    for _ in 0..3 {
        assert!(tick(&mut w, &mut now).is_empty());
    }
}

// ---- Properties ----------------------------------------------------------------------------------

/// Characters that JSON escapes (to two or six bytes), non-ASCII ones, and plain ones.
fn nasty_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => (0u8..0x20).prop_map(char::from),
        1 => Just('"'),
        1 => Just('\\'),
        1 => Just('\u{7f}'),
        1 => Just('é'),
        1 => Just('\u{2028}'),
        1 => Just('😀'),
        1 => Just('\u{fffd}'),
        1 => any::<char>(),
        2 => prop::char::range('a', 'z'),
    ]
}

/// Text up to `max` characters: made of `nasty_char`s, or arbitrary bytes (invalid UTF-8 among
/// them) read the way the runtime reads output (each bad byte becomes U+FFFD, three bytes).
fn nasty_text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(nasty_char(), 0..max).prop_map(String::from_iter),
        prop::collection::vec(any::<u8>(), 0..max)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        (nasty_char(), 0..max).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
}

/// Text mostly of control characters (six bytes each encoded), up to `max`.
fn heavy_text(max: usize) -> impl Strategy<Value = String> {
    (nasty_text(20), (1u8..0x20).prop_map(char::from), 0..max)
        .prop_map(|(head, c, n)| head + &std::iter::repeat_n(c, n).collect::<String>())
}

/// Specs of nasty text, mostly within the bounds on lengths (so the encoded bound decides),
/// some not.
fn nasty_spec() -> impl Strategy<Value = TaskSpec> {
    let text = |max| prop_oneof![nasty_text(max), heavy_text(max)];
    let key = nasty_text(40).prop_map(|s: String| format!("K{}", s.replace(['=', '\0'], "_")));
    (
        nasty_text(60).prop_map(|s| format!("i{s}")),
        prop::collection::vec(text(4_000), 1..4),
        prop::collection::btree_map(key, text(4_000).prop_map(|s| s.replace('\0', "0")), 0..4),
        prop::option::of("[a-z/]{0,100}".prop_map(|w| format!("/{w}"))),
        prop::collection::vec("[a-z:]{1,100}", 0..4),
    )
        .prop_map(|(image, command, env, workdir, requires)| TaskSpec {
            image,
            command,
            env,
            workdir,
            timeout_ms: 1_000,
            requires,
            ..Default::default()
        })
}

/// Specs near the encoded bound: thousands of control characters in the command and in the
/// environment, each within its bound on length.
fn heavy_spec() -> impl Strategy<Value = TaskSpec> {
    (
        (1u8..0x20).prop_map(char::from),
        5_000usize..8_000,
        0usize..8_000,
        nasty_text(100),
    )
        .prop_map(|(c, n, m, tail)| TaskSpec {
            command: vec![std::iter::repeat_n(c, n).collect(), tail],
            env: [("K".to_owned(), std::iter::repeat_n(c, m).collect())].into(),
            ..spec()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// A spec the core accepts fits its offer and its placement with the widest envelope; a
    /// submitter (with the widest id, in the widest cluster) that accepts it sends only what fits.
    #[test]
    fn a_spec_that_passes_its_check_fits_every_message_that_carries_it(
        spec in prop_oneof![nasty_spec(), heavy_spec()],
    ) {
        if spec.check().is_ok() {
            for m in carriers(&spec) {
                frame_len(&m);
            }
        }
        let mut s = submitter();
        let (out, accepted) = submit(&mut s, &spec, 1);
        assert_sends_fit(&out);
        prop_assert_eq!(accepted.is_ok(), spec.check().is_ok());
        let task = TaskId { origin: s.id().clone(), seq: 1 };
        let out = s.step_vec(300, Event::CancelTask { task, request: 2 });
        assert_sends_fit(&out);
    }

    /// Whatever a run printed (or the error a sandbox gave), the result the worker sends fits.
    #[test]
    fn a_result_fits_its_frame_whatever_the_output(
        stdout in nasty_text(40_000),
        stderr in nasty_text(40_000),
        error in nasty_text(40_000),
        failed in any::<bool>(),
        code in any::<i32>(),
    ) {
        let (mut w, _) = worker();
        let task = placed(&mut w);
        let event = if failed {
            Event::SandboxFailed { task, attempt: 1, error, retryable: false }
        } else {
            let exit = chorus_core::SandboxExit {
                exit_code: Some(code),
                signal: Some(i32::MIN),
                duration_ms: u64::MAX,
                usage: chorus_core::Usage { cpu_ms: u64::MAX, peak_memory_kb: u64::MAX },
                stdout,
                stderr,
                ..Default::default()
            };
            Event::SandboxExited { task, attempt: 1, exit }
        };
        let out = w.step_vec(200, event);
        assert_sends_fit(&out);
        prop_assert_eq!(results(&out).len(), 1);
    }
}
