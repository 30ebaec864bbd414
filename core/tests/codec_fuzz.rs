//! Fuzz-style checks: no byte string, random or a mangled valid message, panics the decoder.

use chorus_core::codec::{
    cluster_tag, decode, encode, encode_compact, COMPACT_MAGIC, MAX_MESSAGE_BYTES,
};
use chorus_core::Message;
use proptest::prelude::*;

fn valid() -> Vec<Vec<u8>> {
    [
        Message::Whoami {
            electorate_version: 3,
            electorate_term: 0,
            electorate_stamp: 0,
        },
        Message::Heartbeat {
            term: 9,
            beat: 100,
            membership_version: 1,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        },
        Message::VoteRequest {
            term: 2,
            electorate_version: 1,
            electorate_hash: 99,
            electorate_term: 0,
            electorate_stamp: 0,
            transfer: true,
        },
        Message::TimeoutNow { term: 2 },
        Message::PreVoteReply {
            term: 2,
            granted: true,
        },
    ]
    .iter()
    .map(|m| encode("c", m).unwrap())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode("c", &bytes);
    }

    #[test]
    fn mangled_messages_never_panic(
        which in 0usize..4,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = valid()[which].clone();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let _ = decode("c", &bytes);
        let _ = decode("c", &bytes[..cut.index(bytes.len())]);
    }

    /// Compact frames (`codec/compact.rs`): random bodies behind a valid head, and mangled or
    /// cut valid frames, are refused or decoded, never a panic; a frame that decodes encodes
    /// back to the same bytes (one value, one encoding).
    #[test]
    fn compact_frames_never_panic_and_decode_only_their_own_encoding(
        kind in 0u8..4,
        body in prop::collection::vec(any::<u8>(), 0..96),
        term in any::<u64>(),
        beat in any::<u64>(),
        sig in prop::option::of(prop::collection::vec(any::<u8>(), 0..=64)),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut head = vec![COMPACT_MAGIC, kind];
        head.extend_from_slice(&cluster_tag("c"));
        let random = [&head[..], &body[..]].concat();
        let ack = Message::HeartbeatAck {
            term,
            beat,
            promise_ms: 900,
            holds: sig.is_some(),
            endorsement: sig.map(|s| chorus_core::Signature::from_bytes(&s)),
            certified: 1,
        };
        let mut mangled = encode_compact("c", &ack).unwrap();
        prop_assert_eq!(decode("c", &mangled), Ok(ack));
        for (at, b) in edits {
            let i = at.index(mangled.len());
            mangled[i] = b;
        }
        let n = cut.index(mangled.len() + 1);
        for bytes in [&random[..], &mangled[..], &mangled[..n]] {
            if let Ok(msg) = decode("c", bytes) {
                if bytes.first() == Some(&COMPACT_MAGIC) {
                    let again = encode_compact("c", &msg);
                    prop_assert_eq!(again.as_deref(), Some(bytes));
                }
            }
        }
    }

    #[test]
    fn oversized_input_is_rejected_before_parsing(extra in 1usize..1024) {
        let bytes = vec![b'['; MAX_MESSAGE_BYTES + extra];
        prop_assert!(matches!(decode("c", &bytes), Err(chorus_core::codec::CodecError::TooLarge(_))));
    }
}

#[test]
fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
    let deep = "[".repeat(60_000);
    assert!(decode("c", deep.as_bytes()).is_err());
}
