//! What of a task fits a frame (issue 33, finding 5). Every message is at most
//! [`MAX_MESSAGE_BYTES`] once encoded, and JSON writes a control character as six bytes
//! (`\u0001`), so bounds on the lengths of fields are not enough: 8 KiB of `\x01` is 48 KiB on
//! the wire. Sizes here are measured on the encoded bytes ([`codec::encoded_len`], the encoder
//! the transport uses):
//!
//! * a spec is refused (at submit, and by the admin and the worker) when it is over
//!   [`MAX_SPEC_WIRE_BYTES`] encoded, which leaves [`ENVELOPE_RESERVE_BYTES`] for the widest
//!   `task_offer` or `task_place` around it;
//! * a result's stdout and stderr tails are cut, from the front at a character boundary, to at
//!   most [`MAX_TAIL_BYTES`] of text and [`MAX_TAIL_WIRE_BYTES`] encoded each, its error message
//!   to [`MAX_ERROR_WIRE_BYTES`], so the result is at most [`MAX_RESULT_WIRE_BYTES`] and its
//!   `task_result` fits whatever the run printed. What was cut is counted in
//!   `stdout_truncated_bytes` / `stderr_truncated_bytes`.

use super::{TaskResult, MAX_TAIL_BYTES};
use crate::codec::{self, MAX_MESSAGE_BYTES};
use crate::MAX_WIRE_INT;

/// Room left in a frame for the message around a spec or a result: the envelope, the message's
/// other fields, a cluster id of 128 bytes and node ids of [`MAX_ID_BYTES`](crate::MAX_ID_BYTES),
/// every byte of them escaped to six, and numbers at their widest (about 1.5 KiB; a test
/// measures it).
pub const ENVELOPE_RESERVE_BYTES: usize = 4 * 1024;

/// The largest spec, encoded: its `task_offer` and `task_place` fit a frame.
pub const MAX_SPEC_WIRE_BYTES: usize = MAX_MESSAGE_BYTES - ENVELOPE_RESERVE_BYTES;

/// The largest result, encoded: its `task_result` fits a frame.
pub const MAX_RESULT_WIRE_BYTES: usize = MAX_MESSAGE_BYTES - ENVELOPE_RESERVE_BYTES;

/// The most a worker report's lists (`running`, `finished`, `released`) take together, encoded
/// with the commas between entries: the rest of the report — the envelope and its other fields
/// at their widest — fits the same reserve as a spec's (`task/work.rs`, rule 7).
pub const MAX_REPORT_LISTS_WIRE_BYTES: usize = MAX_MESSAGE_BYTES - ENVELOPE_RESERVE_BYTES;

/// Encoded bytes of the stdout tail, and of the stderr tail, a result keeps (inside the
/// quotes): three times [`MAX_TAIL_BYTES`], so a tail of ordinary text — with newlines, tabs
/// and quotes escaped to two bytes — is never cut for its encoding, only one of control
/// characters.
pub const MAX_TAIL_WIRE_BYTES: usize = 3 * MAX_TAIL_BYTES;

/// Encoded bytes of the error message a result keeps.
pub const MAX_ERROR_WIRE_BYTES: usize = MAX_TAIL_BYTES;

/// Encoded bytes of a result besides its tails and error message: field names, a worker id of
/// `MAX_ID_BYTES` escaped to six each, numbers at their widest (about 900 bytes; a test
/// measures it).
const RESULT_FIXED_BYTES: usize = 2 * 1024;

// A result of full tails and error message still fits.
const _: () = assert!(
    2 * MAX_TAIL_WIRE_BYTES + MAX_ERROR_WIRE_BYTES + RESULT_FIXED_BYTES <= MAX_RESULT_WIRE_BYTES
);

/// The longest tail of `s` that is at most `max_bytes` bytes of text and at most
/// `max_wire_bytes` encoded (inside its quotes), cut at a character boundary, and how many
/// bytes of `s` were cut.
pub(crate) fn wire_tail(mut s: String, max_bytes: usize, max_wire_bytes: usize) -> (String, u64) {
    let (mut bytes, mut wire) = (0, 0);
    let mut start = s.len();
    for (i, c) in s.char_indices().rev() {
        bytes += c.len_utf8();
        wire += codec::escaped_len(c);
        if bytes > max_bytes || wire > max_wire_bytes {
            break;
        }
        start = i;
    }
    s.drain(..start);
    (s, start as u64)
}

/// Cuts `r`'s tails and error message to their bounds, adding what was cut of the tails to their
/// `*_truncated_bytes`. A no-op on a result that fits already, so a result kept by an older
/// build can be fitted again.
pub(crate) fn fit_result(r: &mut TaskResult) {
    for (tail, truncated) in [
        (&mut r.stdout, &mut r.stdout_truncated_bytes),
        (&mut r.stderr, &mut r.stderr_truncated_bytes),
    ] {
        let (kept, cut) = wire_tail(std::mem::take(tail), MAX_TAIL_BYTES, MAX_TAIL_WIRE_BYTES);
        *tail = kept;
        *truncated = truncated.saturating_add(cut).min(MAX_WIRE_INT);
    }
    if let Some(e) = r.error.take() {
        r.error = Some(wire_tail(e, MAX_TAIL_BYTES, MAX_ERROR_WIRE_BYTES).0);
    }
    // Holds for a worker id of at most MAX_ID_BYTES, the one field not cut here (the const
    // assertion above and the test of the fixed part).
    debug_assert!(codec::encoded_len(r) <= MAX_RESULT_WIRE_BYTES);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::task::{TaskId, TaskSpec, TaskStatus, Usage};
    use crate::{Message, MAX_ID_BYTES};

    /// The widest cluster id a config accepts and the widest node id taken from the wire, every
    /// byte escaped to six.
    fn wide(n: usize) -> String {
        "\u{1}".repeat(n)
    }

    fn wide_task() -> TaskId {
        TaskId {
            origin: wide(MAX_ID_BYTES).into(),
            seq: MAX_WIRE_INT,
        }
    }

    /// Bytes of the encoded `msg` around its spec or result (`inner`).
    fn around(msg: &Message, inner: usize) -> usize {
        codec::encode(&wide(128), msg).expect("fits").len() - inner
    }

    #[test]
    fn the_widest_envelope_of_a_spec_or_a_result_is_within_its_reserve() {
        let spec = Arc::new(TaskSpec::default());
        let inner = codec::encoded_len(&*spec);
        let offer = Message::TaskOffer {
            task: wide_task(),
            spec: spec.clone(),
            cancel: true,
            attempt: u32::MAX,
            unplaceable_ms: crate::MAX_WIRE_INT,
        };
        let place = Message::TaskPlace {
            term: u64::MAX,
            task: wide_task(),
            attempt: u32::MAX,
            seq: u64::MAX,
            spec,
        };
        let result = widest_fixed_result();
        let msg = Message::TaskResult {
            task: wide_task(),
            result: Box::new(result.clone()),
        };
        let report = Message::WorkerReport {
            term: MAX_WIRE_INT,
            seen: MAX_WIRE_INT,
            slots: u32::MAX,
            capacity: crate::TaskCapacity {
                memory_mb: u32::MAX,
                cpu_millis: u32::MAX,
                task_memory_mb: u32::MAX,
                task_cpu_millis: u32::MAX,
                default_memory_mb: u32::MAX,
                default_cpu_millis: u32::MAX,
            },
            running: vec![],
            finished: vec![],
            released: vec![],
            partial: true,
        };
        let widest = [
            around(&offer, inner),
            around(&place, inner),
            around(&msg, codec::encoded_len(&result)),
            around(&report, 0),
        ];
        assert!(
            widest.iter().all(|&n| n <= ENVELOPE_RESERVE_BYTES),
            "{widest:?}"
        );
        assert!(
            widest.iter().any(|&n| n > ENVELOPE_RESERVE_BYTES / 4),
            "the widest is measured: {widest:?}"
        );
    }

    /// A result with empty tails and error message, every other field at its widest.
    fn widest_fixed_result() -> TaskResult {
        TaskResult {
            status: TaskStatus::OutOfMemory,
            exit_code: Some(i32::MIN),
            signal: Some(i32::MIN),
            worker: wide(MAX_ID_BYTES).into(),
            attempt: u32::MAX,
            duration_ms: MAX_WIRE_INT,
            usage: Usage {
                cpu_ms: u64::MAX,
                peak_memory_kb: u64::MAX,
            },
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated_bytes: MAX_WIRE_INT,
            stderr_truncated_bytes: MAX_WIRE_INT,
            error: Some(String::new()),
            timings: crate::task::RunTimings {
                acquire_ms: MAX_WIRE_INT,
                arm_ms: MAX_WIRE_INT,
                exec_ms: MAX_WIRE_INT,
                cleanup_ms: MAX_WIRE_INT,
                release_ms: MAX_WIRE_INT,
            },
        }
    }

    #[test]
    fn the_fixed_part_of_a_result_is_within_its_reserve() {
        let n = codec::encoded_len(&widest_fixed_result());
        // The quotes of the three strings are in it.
        assert!(n <= RESULT_FIXED_BYTES, "{n} bytes");
    }

    #[test]
    fn a_result_of_full_tails_and_error_fits_and_is_not_cut_again() {
        let mut r = TaskResult {
            stdout: "\u{1}".repeat(MAX_TAIL_BYTES),
            stderr: "\"".repeat(MAX_TAIL_BYTES),
            error: Some("\u{2}".repeat(MAX_TAIL_BYTES)),
            ..widest_fixed_result()
        };
        r.stdout_truncated_bytes = 0;
        r.stderr_truncated_bytes = 0;
        fit_result(&mut r);
        assert_eq!(r.stdout.len(), MAX_TAIL_WIRE_BYTES / 6);
        assert_eq!(
            r.stdout_truncated_bytes,
            (MAX_TAIL_BYTES - r.stdout.len()) as u64
        );
        // `"` takes two: a whole 8 KiB tail of them is kept.
        assert_eq!(
            (r.stderr.len(), r.stderr_truncated_bytes),
            (MAX_TAIL_BYTES, 0)
        );
        assert_eq!(
            r.error.as_ref().map(String::len),
            Some(MAX_ERROR_WIRE_BYTES / 6)
        );
        assert!(codec::encoded_len(&r) <= MAX_RESULT_WIRE_BYTES);
        let again = {
            let mut a = r.clone();
            fit_result(&mut a);
            a
        };
        assert_eq!(again, r);
    }

    #[test]
    fn tails_are_cut_by_their_encoded_length_too() {
        let t = |s: &str, max, wire| wire_tail(s.into(), max, wire);
        assert_eq!(t("hello", 10, 10), ("hello".into(), 0));
        assert_eq!(t("hello", 3, 10), ("llo".into(), 2));
        assert_eq!(t("aéb", 2, 10), ("b".into(), 3));
        // Encoded, `\u0001` is six bytes, `\n` two, `é` two (not escaped).
        assert_eq!(t("ab\u{1}c", 10, 7), ("\u{1}c".into(), 2));
        assert_eq!(t("ab\u{1}c", 10, 6), ("c".into(), 3));
        assert_eq!(t("a\n\n", 10, 4), ("\n\n".into(), 1));
        assert_eq!(t("aéé", 10, 4), ("éé".into(), 1));
        assert_eq!(t("abc", 0, 0), (String::new(), 3));
    }

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            prop::collection::vec(any::<u8>(), 0..64)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            prop::collection::vec(
                prop_oneof![
                    (0u8..0x20).prop_map(char::from),
                    Just('"'),
                    Just('\\'),
                    Just('é')
                ],
                0..64
            )
            .prop_map(String::from_iter),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// The escaped length of each character adds up to what serde_json writes.
        #[test]
        fn escaped_lengths_add_up_to_the_encoding(s in any_text()) {
            let counted: usize = s.chars().map(codec::escaped_len).sum();
            prop_assert_eq!(counted + 2, codec::encoded_len(&s));
        }

        /// The tail is a suffix within both bounds, and one more character would break one.
        #[test]
        fn a_tail_is_the_longest_suffix_within_both_bounds(
            s in any_text(),
            max in 0usize..80,
            wire in 0usize..120,
        ) {
            let (t, cut) = wire_tail(s.clone(), max, wire);
            prop_assert!(s.ends_with(&t));
            prop_assert_eq!(cut as usize, s.len() - t.len());
            prop_assert!(t.len() <= max && codec::encoded_len(&t) - 2 <= wire);
            if let Some(c) = s[..cut as usize].chars().next_back() {
                let longer = format!("{c}{t}");
                prop_assert!(longer.len() > max || codec::encoded_len(&longer) - 2 > wire);
            }
        }
    }
}
