//! Compact frames: the two messages of an idle cluster — the admin's heartbeat and its
//! acknowledgements — in a few bytes instead of a JSON envelope (issue 54, item 10: a 145-byte
//! heartbeat is 27 bytes here, an acknowledgement 129 → 18). Every other message, and a heartbeat
//! that carries an electorate, is JSON as before.
//!
//! Who sends what: a node writes compact frames only on a link negotiated as
//! `/chorus/link/2.0.0`, which only a node that reads them accepts; a receiver takes either
//! form on any path. So a cluster of old and new nodes keeps talking (an old node is offered
//! link/2, refuses it, and gets JSON on link/1). Layout in `docs/wire-format.md`.
//!
//! Decoding never panics and never reads past the frame: every length and value is checked,
//! and a frame with bytes left over is refused.

use super::CodecError;
use crate::{Message, Signature};

/// The first byte of a compact frame. A JSON envelope starts with `{` (or whitespace), never
/// with this byte, so one byte tells the two forms apart.
pub const COMPACT_MAGIC: u8 = 0xC1;

const KIND_HEARTBEAT: u8 = 1;
const KIND_HEARTBEAT_ACK: u8 = 2;

const FLAG_HOLDS: u8 = 1;
const FLAG_ENDORSEMENT: u8 = 2;

/// The cluster a compact frame is for: FNV-1a (64 bits) of the cluster id, big-endian. It
/// stands in for the envelope's `cluster` string; the link carrying it was only opened with a
/// peer that identified as a node of this cluster.
pub fn cluster_tag(cluster: &str) -> [u8; 8] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in cluster.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.to_be_bytes()
}

/// `msg` as a compact frame for `cluster`, if it is a message that has one: a heartbeat
/// without an electorate, or a heartbeat acknowledgement.
pub fn encode_compact(cluster: &str, msg: &Message) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(32);
    out.push(COMPACT_MAGIC);
    match msg {
        Message::Heartbeat {
            term,
            beat,
            membership_version,
            membership_term,
            genesis,
            electorate: None,
            certified,
        } => {
            out.push(KIND_HEARTBEAT);
            out.extend_from_slice(&cluster_tag(cluster));
            for v in [
                *term,
                *beat,
                *membership_version,
                *membership_term,
                *genesis,
                *certified,
            ] {
                put_varint(&mut out, v);
            }
        }
        Message::HeartbeatAck {
            term,
            beat,
            promise_ms,
            holds,
            endorsement,
            certified,
        } => {
            out.push(KIND_HEARTBEAT_ACK);
            out.extend_from_slice(&cluster_tag(cluster));
            for v in [*term, *beat, *promise_ms, *certified] {
                put_varint(&mut out, v);
            }
            let mut flags = 0;
            if *holds {
                flags |= FLAG_HOLDS;
            }
            if endorsement.is_some() {
                flags |= FLAG_ENDORSEMENT;
            }
            out.push(flags);
            if let Some(sig) = endorsement {
                let bytes = sig.as_bytes();
                if bytes.len() > crate::certificate::MAX_SIGNATURE_BYTES {
                    return None; // never made here; the JSON form refuses it the same way
                }
                out.push(bytes.len() as u8);
                out.extend_from_slice(bytes);
            }
        }
        _ => return None,
    }
    Some(out)
}

/// Decodes a compact frame (its first byte [`COMPACT_MAGIC`]) received for `cluster`.
pub fn decode_compact(cluster: &str, bytes: &[u8]) -> Result<Message, CodecError> {
    let mut r = Reader { bytes, at: 0 };
    if r.byte()? != COMPACT_MAGIC {
        return Err(malformed("not a compact frame"));
    }
    let kind = r.byte()?;
    let tag = r.take(8)?;
    if tag != cluster_tag(cluster) {
        return Err(CodecError::WrongCluster(format!(
            "compact tag {}",
            tag.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )));
    }
    let msg = match kind {
        KIND_HEARTBEAT => Message::Heartbeat {
            term: r.varint()?,
            beat: r.varint()?,
            membership_version: r.varint()?,
            membership_term: r.varint()?,
            genesis: r.varint()?,
            electorate: None,
            certified: r.varint()?,
        },
        KIND_HEARTBEAT_ACK => {
            let (term, beat, promise_ms, certified) =
                (r.varint()?, r.varint()?, r.varint()?, r.varint()?);
            let flags = r.byte()?;
            if flags & !(FLAG_HOLDS | FLAG_ENDORSEMENT) != 0 {
                return Err(malformed("unknown flags"));
            }
            let endorsement = if flags & FLAG_ENDORSEMENT != 0 {
                let len = usize::from(r.byte()?);
                if len > crate::certificate::MAX_SIGNATURE_BYTES {
                    return Err(malformed("signature longer than 64 bytes"));
                }
                Some(Signature::from_bytes(r.take(len)?))
            } else {
                None
            };
            Message::HeartbeatAck {
                term,
                beat,
                promise_ms,
                holds: flags & FLAG_HOLDS != 0,
                endorsement,
                certified,
            }
        }
        _ => return Err(malformed("unknown compact kind")),
    };
    if r.at != bytes.len() {
        return Err(malformed("bytes after the message"));
    }
    Ok(msg)
}

fn malformed(why: &str) -> CodecError {
    CodecError::Malformed(format!("compact frame: {why}"))
}

/// Unsigned LEB128: seven bits a byte, least significant first, the high bit set on every byte
/// but the last.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, CodecError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| malformed("truncated"))?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| malformed("truncated"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// A varint of at most 10 bytes whose value fits 64 bits, in its shortest form (one value,
    /// one encoding: a frame cannot be padded).
    fn varint(&mut self) -> Result<u64, CodecError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.byte()?;
            let low = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(malformed("varint over 64 bits"));
            }
            v |= low << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(malformed("varint not in its shortest form"));
                }
                return Ok(v);
            }
        }
        Err(malformed("varint over 10 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(term: u64, beat: u64, genesis: u64, certified: u64) -> Message {
        Message::Heartbeat {
            term,
            beat,
            membership_version: certified,
            membership_term: 0,
            genesis,
            electorate: None,
            certified,
        }
    }

    fn ack(endorsement: Option<Signature>) -> Message {
        Message::HeartbeatAck {
            term: 12,
            beat: 123_456,
            promise_ms: 900,
            holds: true,
            endorsement,
            certified: 1,
        }
    }

    #[test]
    fn the_hot_messages_round_trip_and_are_small() {
        let cases = [
            (heartbeat(12, 123_456, 0x8234_5678_9012_3456, 1), 27),
            (heartbeat(0, 0, 0, 0), 16),
            (
                heartbeat(u64::MAX, u64::MAX, u64::MAX, u64::MAX),
                10 + 5 * 10 + 1,
            ),
            (ack(None), 18),
            (ack(Some(Signature::from_bytes(&[7; 64]))), 18 + 65),
            (ack(Some(Signature::from_bytes(&[]))), 19),
        ];
        for (msg, len) in cases {
            let bytes = encode_compact("chorus-dev", &msg).expect("has a compact form");
            assert_eq!(bytes.len(), len, "{msg:?}");
            assert_eq!(decode_compact("chorus-dev", &bytes), Ok(msg.clone()));
            // The codec's own entry point takes it too, as a whole frame or a part's.
            assert_eq!(super::super::decode("chorus-dev", &bytes), Ok(msg));
        }
    }

    #[test]
    fn other_messages_and_a_heartbeat_with_an_electorate_have_none() {
        let e = std::sync::Arc::new(crate::Electorate::new(1, vec!["a".into()]));
        let with = Message::Heartbeat {
            term: 1,
            beat: 1,
            membership_version: 1,
            membership_term: 0,
            genesis: e.genesis,
            electorate: Some(e),
            certified: 1,
        };
        assert_eq!(encode_compact("c", &with), None);
        assert_eq!(
            encode_compact("c", &Message::ChainRequest { after: 1 }),
            None
        );
    }

    /// Every malformed shape is refused by name, never a panic, never a message.
    #[test]
    fn malformed_frames_are_refused() {
        let good = encode_compact("c", &ack(Some(Signature::from_bytes(&[1; 64])))).unwrap();
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![COMPACT_MAGIC], "truncated"),
            (vec![COMPACT_MAGIC, 9], "truncated"),
            ([&good[..], &[0]].concat(), "bytes after"),
            (
                {
                    let mut b = good.clone();
                    b[1] = 3;
                    b
                },
                "unknown compact kind",
            ),
            (
                {
                    let mut b = good.clone();
                    b[17] = 0x80 | FLAG_HOLDS;
                    b
                },
                "unknown flags",
            ),
            (
                {
                    let mut b = good.clone();
                    b[18] = 65;
                    b
                },
                "longer than 64",
            ),
        ];
        for n in 0..good.len() {
            cases.push((good[..n].to_vec(), if n == 0 { "truncated" } else { "" }));
        }
        let mut long = vec![COMPACT_MAGIC, KIND_HEARTBEAT];
        long.extend_from_slice(&cluster_tag("c"));
        let over = [&long[..], &[0xff; 9], &[0x02]].concat();
        cases.push((over, "over 64 bits"));
        let eleven = [&long[..], &[0x80; 10], &[0x00]].concat();
        cases.push((eleven, "over 64 bits"));
        let padded = [&long[..], &[0x81, 0x00]].concat();
        cases.push((padded, "shortest form"));
        for (bytes, why) in cases {
            match decode_compact("c", &bytes) {
                Err(CodecError::Malformed(m)) => assert!(m.contains(why), "{bytes:?}: {m}"),
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
        assert!(matches!(
            decode_compact("another", &good),
            Err(CodecError::WrongCluster(_))
        ));
    }
}
