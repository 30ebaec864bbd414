//! The wire codec: a versioned JSON envelope with the cluster id, at most 64 KiB. Decoding never
//! panics; every failure is a typed [`CodecError`] the caller counts and drops. A message that
//! carries an electorate may be larger: it travels in parts ([`encode_parts`], [`Reassembler`]).
//!
//! The format is specified for other implementations in `docs/wire-format.md`.

use serde::{Deserialize, Serialize};

use crate::Message;

mod compact;
mod parts;

pub use compact::{cluster_tag, decode_compact, encode_compact, COMPACT_MAGIC};

pub use parts::{encode_parts, Reassembler, MAX_ASSEMBLED_BYTES, MAX_PARTIAL_SENDERS};

/// The wire format version this build speaks.
pub const WIRE_VERSION: u32 = 1;

/// Largest encoded message accepted or produced.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Why bytes were not a message for us.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// Over [`MAX_MESSAGE_BYTES`]; rejected before any parsing.
    #[error("message of {0} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(usize),
    /// Not a well-formed envelope or message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A wire version this build does not speak.
    #[error("unsupported wire version {0} (this build speaks {WIRE_VERSION})")]
    Version(u32),
    /// A message for another cluster.
    #[error("message for cluster {0:?}")]
    WrongCluster(String),
    /// A part of a larger message that cannot be one (see [`Reassembler`]).
    #[error("bad part: {0}")]
    BadPart(&'static str),
}

impl CodecError {
    /// A short, stable label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            CodecError::TooLarge(_) => "too_large",
            CodecError::Malformed(_) => "malformed",
            CodecError::Version(_) => "version",
            CodecError::WrongCluster(_) => "wrong_cluster",
            CodecError::BadPart(_) => "bad_part",
        }
    }
}

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    v: u32,
    cluster: &'a str,
    msg: &'a Message,
}

/// An envelope as received: a whole message, or a part of a larger one.
#[derive(Deserialize)]
struct EnvelopeIn {
    v: u32,
    cluster: String,
    #[serde(default)]
    msg: Option<serde_json::Value>,
    #[serde(default)]
    part: Option<serde_json::Value>,
}

fn encode_unbounded(cluster: &str, msg: &Message) -> Result<Vec<u8>, CodecError> {
    serde_json::to_vec(&EnvelopeOut {
        v: WIRE_VERSION,
        cluster,
        msg,
    })
    .map_err(|e| CodecError::Malformed(e.to_string()))
}

/// Encodes `msg` for `cluster` as one frame. Fails only if the result would exceed the size
/// limit; [`encode_parts`] sends a larger message that carries an electorate.
pub fn encode(cluster: &str, msg: &Message) -> Result<Vec<u8>, CodecError> {
    let bytes = encode_unbounded(cluster, msg)?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(CodecError::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// How many bytes `value` takes encoded as the codec encodes a message (serde_json, compact):
/// the measure of everything that must fit a frame. Nothing is kept but the count.
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Plain data with string keys always serializes, and the count never fails to write; were
    // either to fail, the count so far is a lower bound and `encode` still refuses the message.
    let _ = serde_json::to_writer(&mut n, value);
    n.0
}

/// How many bytes `c` takes inside a JSON string as serde_json writes it: `"`, `\` and the
/// control characters with a short escape take two, the other control characters six
/// (`\u0001`), anything else its UTF-8 length (non-ASCII is not escaped).
pub(crate) fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{08}' | '\u{0c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Decodes one frame received for `cluster`. The version and cluster are checked before the
/// body is interpreted, so a future version's message is reported as such rather than as
/// garbage. A part of a larger message is refused here: a [`Reassembler`] takes those.
pub fn decode(cluster: &str, bytes: &[u8]) -> Result<Message, CodecError> {
    decode_whole(cluster, bytes, MAX_MESSAGE_BYTES)
}

fn decode_whole(cluster: &str, bytes: &[u8], limit: usize) -> Result<Message, CodecError> {
    if bytes.len() > limit {
        return Err(CodecError::TooLarge(bytes.len()));
    }
    if bytes.first() == Some(&COMPACT_MAGIC) {
        return decode_compact(cluster, bytes);
    }
    match envelope(cluster, bytes)? {
        EnvelopeIn {
            msg: Some(msg),
            part: None,
            ..
        } => message_from(msg),
        _ => Err(CodecError::Malformed(
            "not one whole message (`msg` alone)".into(),
        )),
    }
}

/// Parses an envelope (its size already checked) and checks its version and cluster.
fn envelope(cluster: &str, bytes: &[u8]) -> Result<EnvelopeIn, CodecError> {
    let env: EnvelopeIn =
        serde_json::from_slice(bytes).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if env.v != WIRE_VERSION {
        return Err(CodecError::Version(env.v));
    }
    if env.cluster != cluster {
        return Err(CodecError::WrongCluster(env.cluster));
    }
    Ok(env)
}

fn message_from(msg: serde_json::Value) -> Result<Message, CodecError> {
    serde_json::from_value(msg).map_err(|e| CodecError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Electorate, NodeId};

    fn samples() -> Vec<Message> {
        let e = Arc::new(Electorate::new(1, vec!["a".into(), "b".into()]));
        vec![
            Message::Whoami {
                electorate_version: 0,
                electorate_term: 0,
                electorate_stamp: 0,
            },
            Message::WhoamiReply {
                admin: Some(NodeId::from("a")),
                term: 3,
                membership_version: 1,
                beat: 9,
                eligible: true,
                uptime_s: 3600,
                resources: crate::Resources {
                    cpu_millicores: 2000,
                    mem_free_mb: 512,
                    ..Default::default()
                },
                electorate: Some(e.clone()),
                genesis: e.genesis,
                electorate_stamp: 2,
            },
            Message::WhoamiReply {
                admin: None,
                term: 0,
                membership_version: 0,
                beat: 0,
                eligible: false,
                uptime_s: 0,
                resources: Default::default(),
                electorate: None,
                genesis: 0,
                electorate_stamp: 0,
            },
            Message::PreVoteRequest {
                term: 4,
                electorate_version: 1,
                electorate_hash: u64::MAX,
                electorate_term: 0,
                electorate_stamp: 0,
            },
            Message::PreVoteReply {
                term: 4,
                granted: true,
            },
            Message::VoteRequest {
                term: 4,
                electorate_version: 1,
                electorate_hash: 7,
                electorate_term: 0,
                electorate_stamp: 0,
                transfer: false,
            },
            Message::VoteReply {
                term: 4,
                granted: false,
                promise_ms: 0,
            },
            Message::Heartbeat {
                term: 4,
                beat: 10,
                membership_version: 1,
                genesis: 0,
                electorate: None,
                membership_term: 0,
                certified: 0,
            },
            Message::HeartbeatAck {
                term: 4,
                beat: 10,
                promise_ms: 30_000,
                holds: false,
                endorsement: None,
                certified: 0,
            },
            Message::StepDown {
                term: 4,
                successor: None,
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let bytes = encode("c1", &m).unwrap();
            assert_eq!(decode("c1", &bytes).unwrap(), m);
        }
    }

    #[test]
    fn the_envelope_is_the_documented_one() {
        let bytes = encode(
            "c1",
            &Message::Heartbeat {
                term: 4,
                beat: 10,
                membership_version: 1,
                genesis: 0,
                electorate: None,
                membership_term: 0,
                certified: 0,
            },
        )
        .unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"v":1,"cluster":"c1","msg":{"type":"heartbeat","term":4,"beat":10,"membership_version":1}}"#
        );
    }

    #[test]
    fn rejections_are_typed() {
        let hb = encode(
            "c1",
            &Message::StepDown {
                term: 1,
                successor: None,
            },
        )
        .unwrap();
        assert!(matches!(decode("c2", &hb), Err(CodecError::WrongCluster(c)) if c == "c1"));
        let v2 = br#"{"v":2,"cluster":"c1","msg":{"type":"step_down","term":1}}"#;
        assert_eq!(decode("c1", v2), Err(CodecError::Version(2)));
        let unknown = br#"{"v":1,"cluster":"c1","msg":{"type":"launch_missiles"}}"#;
        assert!(matches!(
            decode("c1", unknown),
            Err(CodecError::Malformed(_))
        ));
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            decode("c1", &big),
            Err(CodecError::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
        assert!(matches!(
            decode("c1", b"\xff\x00{"),
            Err(CodecError::Malformed(_))
        ));
    }

    /// The labels are a contract with dashboards (`chorus_decode_errors_total{reason=…}`).
    #[test]
    fn every_error_has_its_documented_label() {
        let labels: Vec<&str> = [
            CodecError::TooLarge(1),
            CodecError::Malformed(String::new()),
            CodecError::Version(2),
            CodecError::WrongCluster(String::new()),
            CodecError::BadPart(""),
        ]
        .iter()
        .map(CodecError::kind)
        .collect();
        assert_eq!(
            labels,
            [
                "too_large",
                "malformed",
                "version",
                "wrong_cluster",
                "bad_part"
            ]
        );
    }

    #[test]
    fn oversized_messages_are_not_encoded() {
        let members = (0..5000)
            .map(|i| NodeId::from(format!("12D3KooW{i:044}")))
            .collect();
        let m = Message::WhoamiReply {
            admin: None,
            term: 0,
            membership_version: 1,
            beat: 0,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: Some(Arc::new(Electorate::new(1, members))),
            genesis: 0,
            electorate_stamp: 0,
        };
        assert!(matches!(encode("c", &m), Err(CodecError::TooLarge(_))));
    }
}
