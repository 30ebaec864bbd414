//! Fuzz-style checks: no byte string, random or a mangled valid message, panics the decoder.

use chorus_core::codec::{decode, encode, MAX_MESSAGE_BYTES};
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
