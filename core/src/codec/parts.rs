//! Messages over 64 KiB, carried in parts.
//!
//! Only a message that carries an electorate may be larger than one frame (an electorate of
//! [`MAX_MEMBERS`](crate::MAX_MEMBERS) members is several MiB). Such a message is encoded whole,
//! then its bytes are cut into parts, each sent as an envelope of its own that fits in
//! [`MAX_MESSAGE_BYTES`]:
//!
//! ```json
//! {"v":1,"cluster":"c1","part":{"id":123,"index":0,"count":3,"data":"{\"v\":1,…"}}
//! ```
//!
//! `data` is a piece of the whole envelope's text; `id` is a checksum of the whole (FNV-1a, 53
//! bits), so the receiver can tell one message's parts from another's and knows the assembled
//! text is the one that was sent. Parts may arrive in any order (gossipsub relays them on
//! different paths, request-response sends each on its own stream) and twice.
//!
//! A receiver holds what it has of at most one message per sender, and of at most
//! [`MAX_PARTIAL_SENDERS`] senders at once (the one heard from least recently is forgotten), so a
//! peer can make it hold at most [`MAX_ASSEMBLED_BYTES`] and all peers together a bounded amount.
//! A lost part loses the message, as a lost frame does: every message that carries an
//! electorate is sent again by the protocol until it is answered.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{decode_whole, escaped_len, CodecError, EnvelopeIn, MAX_MESSAGE_BYTES, WIRE_VERSION};
use crate::electorate::Fnv;
use crate::{Message, MAX_WIRE_INT};

/// Largest message accepted or produced in parts (its whole envelope's bytes). An electorate of
/// `MAX_MEMBERS` ids of `MAX_ID_BYTES`, even with every character escaped, fits.
pub const MAX_ASSEMBLED_BYTES: usize = 16 * 1024 * 1024;

/// Most senders whose partly received messages a [`Reassembler`] holds at once.
pub const MAX_PARTIAL_SENDERS: usize = 8;

/// Most parts one message may be cut into: every part but the last carries at least a quarter
/// of a frame (a byte escapes to at most two, the envelope around it is small).
const MAX_PARTS: u32 = (MAX_ASSEMBLED_BYTES / (MAX_MESSAGE_BYTES / 4)) as u32;

// Every character of an id escapes to at most two bytes in JSON (`"` and `\`; the core's ids
// hold no control characters worth more, and a hostile one just makes the message too large).
const _: () = assert!(
    (crate::MAX_MEMBERS + crate::MAX_RETIRED) * (2 * crate::MAX_ID_BYTES + 3) + MAX_MESSAGE_BYTES
        <= MAX_ASSEMBLED_BYTES
);

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(super) struct Part {
    id: u64,
    index: u32,
    count: u32,
    data: String,
}

#[derive(Serialize)]
struct PartEnvelopeOut<'a> {
    v: u32,
    cluster: &'a str,
    part: &'a Part,
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.write(bytes);
    h.0 & MAX_WIRE_INT
}

/// Encodes `msg` for `cluster` as one frame or, when it carries an electorate and is larger
/// than a frame, as parts of at most [`MAX_MESSAGE_BYTES`] each. Fails when the message is too
/// large for either.
pub fn encode_parts(cluster: &str, msg: &Message) -> Result<Vec<Vec<u8>>, CodecError> {
    let whole = super::encode_unbounded(cluster, msg)?;
    if whole.len() <= MAX_MESSAGE_BYTES {
        return Ok(vec![whole]);
    }
    if !msg.carries_electorate() || whole.len() > MAX_ASSEMBLED_BYTES {
        return Err(CodecError::TooLarge(whole.len()));
    }
    let budget = MAX_MESSAGE_BYTES.saturating_sub(part_overhead(cluster)?);
    if budget < MAX_MESSAGE_BYTES / 2 {
        // Only a cluster id of tens of KiB leaves so little room.
        return Err(CodecError::TooLarge(whole.len()));
    }
    let text = std::str::from_utf8(&whole).map_err(|e| CodecError::Malformed(e.to_string()))?;
    let mut pieces = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, c) in text.char_indices() {
        let n = escaped_len(c);
        if used + n > budget {
            pieces.push(&text[start..i]);
            (start, used) = (i, 0);
        }
        used += n;
    }
    pieces.push(&text[start..]);
    let count = u32::try_from(pieces.len()).map_err(|_| CodecError::TooLarge(whole.len()))?;
    let id = checksum(&whole);
    pieces
        .into_iter()
        .zip(0..)
        .map(|(data, index)| {
            part_envelope(
                cluster,
                &Part {
                    id,
                    index,
                    count,
                    data: data.to_owned(),
                },
            )
        })
        .collect()
}

/// The bytes of a part's envelope around its data, at their most (numbers at their widest).
fn part_overhead(cluster: &str) -> Result<usize, CodecError> {
    let widest = Part {
        id: MAX_WIRE_INT,
        index: MAX_PARTS,
        count: MAX_PARTS,
        data: String::new(),
    };
    Ok(part_envelope(cluster, &widest)?.len())
}

fn part_envelope(cluster: &str, part: &Part) -> Result<Vec<u8>, CodecError> {
    serde_json::to_vec(&PartEnvelopeOut {
        v: WIRE_VERSION,
        cluster,
        part,
    })
    .map_err(|e| CodecError::Malformed(e.to_string()))
}

/// What a sender has sent so far of one message.
#[derive(Debug)]
struct Partial {
    id: u64,
    count: u32,
    parts: BTreeMap<u32, String>,
    bytes: usize,
    /// When this sender was last heard from, in parts received by the reassembler.
    heard: u64,
}

/// Puts messages sent in parts back together, per sender, within fixed bounds (see the module
/// documentation). `K` names a sender: the authenticated peer the bytes came from.
#[derive(Debug)]
pub struct Reassembler<K> {
    partial: BTreeMap<K, Partial>,
    /// Parts received so far: orders senders by when they were last heard from.
    clock: u64,
}

impl<K> Default for Reassembler<K> {
    fn default() -> Self {
        Reassembler {
            partial: BTreeMap::new(),
            clock: 0,
        }
    }
}

impl<K: Ord + Clone> Reassembler<K> {
    /// A reassembler holding nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one frame from `from`: a whole message, or a part of one — `Ok(None)` until the
    /// last part is in. Every failure is a [`CodecError`] to count and drop, as for
    /// [`decode`](super::decode); a bad part also forgets what `from` had sent of its message.
    pub fn decode(
        &mut self,
        cluster: &str,
        from: &K,
        bytes: &[u8],
    ) -> Result<Option<Message>, CodecError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(CodecError::TooLarge(bytes.len()));
        }
        if bytes.first() == Some(&super::COMPACT_MAGIC) {
            return super::decode_compact(cluster, bytes).map(Some);
        }
        let env = super::envelope(cluster, bytes)?;
        let part = match env {
            EnvelopeIn {
                msg: Some(msg),
                part: None,
                ..
            } => return super::message_from(msg).map(Some),
            EnvelopeIn {
                msg: None,
                part: Some(part),
                ..
            } => part,
            _ => {
                return Err(CodecError::Malformed(
                    "an envelope holds either `msg` or `part`".into(),
                ))
            }
        };
        let part: Part =
            serde_json::from_value(part).map_err(|e| CodecError::Malformed(e.to_string()))?;
        let whole = match self.add(from, part) {
            Ok(Some(whole)) => whole,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.partial.remove(from);
                return Err(e);
            }
        };
        let msg = decode_whole(cluster, &whole, MAX_ASSEMBLED_BYTES)?;
        if !msg.carries_electorate() {
            // Every other message fits in a frame: one sent in parts is not from this protocol.
            return Err(CodecError::TooLarge(whole.len()));
        }
        Ok(Some(msg))
    }

    /// How many senders have a message partly received.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Bytes held for partly received messages.
    pub fn held_bytes(&self) -> usize {
        self.partial.values().map(|p| p.bytes).sum()
    }

    /// Forgets what `from` had sent (say, when its connection closed).
    pub fn forget(&mut self, from: &K) {
        self.partial.remove(from);
    }

    fn add(&mut self, from: &K, part: Part) -> Result<Option<Vec<u8>>, CodecError> {
        if part.count < 2 || part.count > MAX_PARTS || part.index >= part.count {
            return Err(CodecError::BadPart("index or count out of range"));
        }
        if part.id > MAX_WIRE_INT {
            return Err(CodecError::BadPart("id out of range"));
        }
        self.clock += 1;
        let heard = self.clock;
        let fresh = || Partial {
            id: part.id,
            count: part.count,
            parts: BTreeMap::new(),
            bytes: 0,
            heard,
        };
        let p = self.partial.entry(from.clone()).or_insert_with(fresh);
        if p.id != part.id || p.count != part.count {
            // The sender moved on to another message: the one before is given up.
            *p = fresh();
        }
        p.heard = heard;
        if p.parts.contains_key(&part.index) {
            return Ok(None); // A duplicate.
        }
        p.bytes += part.data.len();
        if p.bytes > MAX_ASSEMBLED_BYTES {
            return Err(CodecError::TooLarge(p.bytes));
        }
        p.parts.insert(part.index, part.data);
        if p.parts.len() == p.count as usize {
            let p = self.partial.remove(from).expect("just used");
            let mut whole = Vec::with_capacity(p.bytes);
            for data in p.parts.into_values() {
                whole.extend_from_slice(data.as_bytes());
            }
            if checksum(&whole) != p.id {
                return Err(CodecError::BadPart("checksum does not match the parts"));
            }
            return Ok(Some(whole));
        }
        if self.partial.len() > MAX_PARTIAL_SENDERS {
            let stalest = self
                .partial
                .iter()
                .min_by_key(|(_, p)| p.heard)
                .map(|(k, _)| k.clone())
                .expect("not empty");
            self.partial.remove(&stalest);
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Ballot, Electorate, NodeId};

    fn ids(n: usize) -> Vec<NodeId> {
        // The length of a libp2p ed25519 peer id.
        (0..n)
            .map(|i| NodeId::from(format!("12D3KooW{i:044}")))
            .collect()
    }

    fn whoami_reply(members: usize) -> Message {
        let e = Arc::new(Electorate::new(1, ids(members)));
        Message::WhoamiReply {
            admin: None,
            term: 7,
            membership_version: 1,
            beat: 0,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            genesis: e.genesis,
            electorate: Some(e),
            electorate_stamp: 0,
        }
    }

    fn assemble(r: &mut Reassembler<u8>, from: u8, frames: &[Vec<u8>]) -> Vec<Message> {
        frames
            .iter()
            .filter_map(|f| r.decode("c", &from, f).unwrap())
            .collect()
    }

    #[test]
    fn a_message_that_fits_is_one_frame_as_before() {
        let m = whoami_reply(3);
        let frames = encode_parts("c", &m).unwrap();
        assert_eq!(frames, vec![super::super::encode("c", &m).unwrap()]);
        assert!(assemble(&mut Reassembler::new(), 1, &frames) == vec![m]);
    }

    #[test]
    fn an_electorate_of_ten_thousand_travels_in_frames_that_fit() {
        let m = whoami_reply(10_000);
        let frames = encode_parts("c", &m).unwrap();
        assert!(frames.len() >= 9, "{} frames", frames.len());
        assert!(frames.iter().all(|f| f.len() <= MAX_MESSAGE_BYTES));
        // Nearly full frames: the cut is by escaped length, not a fixed share.
        assert!(
            frames[0].len() > MAX_MESSAGE_BYTES - 64,
            "{}",
            frames[0].len()
        );
        let mut r = Reassembler::new();
        assert!(assemble(&mut r, 1, &frames) == vec![m.clone()]);
        assert_eq!((r.pending(), r.held_bytes()), (0, 0));

        // In any order, with duplicates: one message, once.
        let mut shuffled: Vec<Vec<u8>> = frames.iter().rev().cloned().collect();
        shuffled.insert(3, frames[2].clone());
        shuffled.push(frames[0].clone());
        assert!(assemble(&mut r, 1, &shuffled) == vec![m]);
        // The late duplicate of a part of a finished message starts a partial of its own, held
        // until the sender's next message replaces it.
        assert_eq!(r.pending(), 1);
    }

    #[test]
    fn parts_of_two_senders_do_not_mix_and_a_new_message_replaces_an_unfinished_one() {
        let (a, b) = (whoami_reply(3_000), whoami_reply(3_001));
        let (fa, fb) = (
            encode_parts("c", &a).unwrap(),
            encode_parts("c", &b).unwrap(),
        );
        let mut r = Reassembler::new();
        // Interleaved from two senders.
        let mut got = Vec::new();
        for i in 0..fa.len().max(fb.len()) {
            if let Some(f) = fa.get(i) {
                got.extend(r.decode("c", &1, f).unwrap().map(|m| (1, m)));
            }
            if let Some(f) = fb.get(i) {
                got.extend(r.decode("c", &2, f).unwrap().map(|m| (2, m)));
            }
        }
        assert!(got == vec![(1, a.clone()), (2, b.clone())]);
        // Sender 1 sends half of `a`, then all of `b`: only `b` comes out, and nothing is held.
        assert!(assemble(&mut r, 1, &fa[..fa.len() / 2]).is_empty());
        assert_eq!(r.pending(), 1);
        assert!(assemble(&mut r, 1, &fb) == vec![b]);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn at_most_eight_senders_are_held_the_least_recently_heard_forgotten() {
        let m = whoami_reply(3_000);
        let frames = encode_parts("c", &m).unwrap();
        let mut r = Reassembler::new();
        for from in 0..=MAX_PARTIAL_SENDERS as u8 {
            assert!(r.decode("c", &from, &frames[0]).unwrap().is_none());
        }
        assert_eq!(r.pending(), MAX_PARTIAL_SENDERS);
        // Sender 1 was kept.
        assert!(assemble(&mut r, 1, &frames[1..]) == vec![m]);
        // Sender 0 was forgotten: the rest of its parts complete nothing.
        assert!(assemble(&mut r, 0, &frames[1..]).is_empty());
    }

    fn part_frame(part: &Part) -> Vec<u8> {
        part_envelope("c", part).unwrap()
    }

    #[test]
    fn bad_parts_are_refused_and_forget_the_senders_partial() {
        let frames = encode_parts("c", &whoami_reply(3_000)).unwrap();
        let mut r = Reassembler::new();
        let part = |id, index, count, data: &str| Part {
            id,
            index,
            count,
            data: data.into(),
        };
        for (bad, why) in [
            (part(1, 0, 1, "x"), "index or count out of range"),
            (part(1, 2, 2, "x"), "index or count out of range"),
            (
                part(1, 0, MAX_PARTS + 1, "x"),
                "index or count out of range",
            ),
            (part(MAX_WIRE_INT + 1, 0, 2, "x"), "id out of range"),
        ] {
            assert!(r.decode("c", &1, &frames[0]).unwrap().is_none());
            assert!(r.decode("c", &1, &part_frame(&bad)) == Err(CodecError::BadPart(why)));
            assert_eq!(r.pending(), 0);
        }
        // Parts whose text is not what the checksum says.
        let f = |p: &Part| part_frame(p);
        assert!(r.decode("c", &1, &f(&part(5, 0, 2, "{\"v\":1,"))) == Ok(None));
        assert!(
            r.decode("c", &1, &f(&part(5, 1, 2, "\"x\":2}")))
                == Err(CodecError::BadPart("checksum does not match the parts"))
        );
        // A part for another cluster, or an envelope with both or neither.
        assert!(matches!(
            r.decode("d", &1, &frames[0]),
            Err(CodecError::WrongCluster(_))
        ));
        for text in [
            r#"{"v":1,"cluster":"c"}"#,
            r#"{"v":1,"cluster":"c","msg":{"type":"step_down","term":1},"part":{"id":1,"index":0,"count":2,"data":""}}"#,
        ] {
            assert!(matches!(
                r.decode("c", &1, text.as_bytes()),
                Err(CodecError::Malformed(_))
            ));
        }
    }

    /// Parts that assemble, checksum and all, into a message that has no business being large.
    #[test]
    fn only_messages_that_carry_an_electorate_may_come_in_parts() {
        let refused = Message::BootstrapRefused {
            ballot: Ballot {
                round: 1,
                node: NodeId::from("x".repeat(70_000).as_str()),
            },
            promised: None,
            formed: false,
        };
        assert!(matches!(
            encode_parts("c", &refused),
            Err(CodecError::TooLarge(_))
        ));
        let whole = super::super::encode_unbounded("c", &refused).unwrap();
        let text = std::str::from_utf8(&whole).unwrap();
        let half = text.len() / 2;
        let id = checksum(&whole);
        let frames: Vec<Vec<u8>> = [&text[..half], &text[half..]]
            .iter()
            .zip(0..)
            .map(|(d, index)| {
                part_frame(&Part {
                    id,
                    index,
                    count: 2,
                    data: (*d).into(),
                })
            })
            .collect();
        let mut r = Reassembler::new();
        assert!(r.decode("c", &1, &frames[0]) == Ok(None));
        assert!(r.decode("c", &1, &frames[1]) == Err(CodecError::TooLarge(whole.len())));
    }

    #[test]
    fn text_that_escapes_is_cut_by_its_escaped_length() {
        // Ids full of quotes double in size inside a part's `data`.
        let members = (0..2_000)
            .map(|i| NodeId::from(format!("{i:04}{}", "\"".repeat(40)).as_str()))
            .collect();
        let e = Arc::new(Electorate::new(1, members));
        let m = Message::BootstrapChosen { electorate: e };
        let frames = encode_parts("c", &m).unwrap();
        assert!(frames.iter().all(|f| f.len() <= MAX_MESSAGE_BYTES));
        assert!(assemble(&mut Reassembler::new(), 1, &frames) == vec![m]);
    }

    /// A whoami reply whose whole envelope is exactly `len` bytes: members of 52-byte ids and
    /// one more padded to make up the difference (the electorate's fingerprint, written in
    /// decimal, may change length with it: adjusted until exact).
    fn reply_of_exactly(len: usize) -> Message {
        let size = |m: &Message| super::super::encode_unbounded("c", m).unwrap().len();
        let n = (len - size(&whoami_reply(1))) / 55 - 2;
        let with_pad = |pad: usize| {
            let mut members = ids(n);
            members.push(NodeId::from("z".repeat(pad).as_str()));
            let e = Arc::new(Electorate::new(1, members));
            Message::WhoamiReply {
                admin: None,
                term: 7,
                membership_version: 1,
                beat: 0,
                eligible: true,
                uptime_s: 0,
                resources: Default::default(),
                genesis: 0,
                electorate: Some(e),
                electorate_stamp: 0,
            }
        };
        let mut pad = 1;
        for _ in 0..20 {
            let m = with_pad(pad);
            match size(&m) {
                got if got == len => return m,
                got => pad = (pad + len).saturating_sub(got).max(1),
            }
        }
        panic!("no reply of exactly {len} bytes");
    }

    /// The frame limit at its edge: a message of exactly 64 KiB is one frame, one byte more
    /// goes in parts; a frame of exactly 64 KiB is read, one byte more is refused unread.
    #[test]
    fn a_message_of_exactly_one_frame_is_one_frame() {
        let m = reply_of_exactly(MAX_MESSAGE_BYTES);
        let frames = encode_parts("c", &m).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].len(), MAX_MESSAGE_BYTES);
        assert_eq!(super::super::encode("c", &m).as_ref(), Ok(&frames[0]));
        assert!(super::super::decode("c", &frames[0]) == Ok(m.clone()));
        let mut r = Reassembler::new();
        assert!(r.decode("c", &1, &frames[0]).unwrap() == Some(m));
        let m = reply_of_exactly(MAX_MESSAGE_BYTES + 1);
        let frames = encode_parts("c", &m).unwrap();
        assert_eq!(frames.len(), 2);
        assert!(assemble(&mut r, 1, &frames) == vec![m]);
        let mut big = frames[0].clone();
        big.resize(MAX_MESSAGE_BYTES + 1, b' ');
        assert_eq!(
            r.decode("c", &1, &big),
            Err(CodecError::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
    }

    /// Every part but the last is filled to within one escaped character of the frame, whatever
    /// the text: an escape counted too long would waste frames, too short would overflow one.
    #[test]
    fn parts_are_filled_to_the_frame_whatever_escapes_the_text_holds() {
        let budget = MAX_MESSAGE_BYTES - part_overhead("c").unwrap();
        for pad in [" ", "\"", "\\", "\n", "\t", "\u{1}", "é", "\u{7f}", "𝄞"] {
            let members = (0..2_500)
                .map(|i| NodeId::from(format!("{i:05}{}", pad.repeat(20)).as_str()))
                .collect();
            let m = Message::BootstrapChosen {
                electorate: Arc::new(Electorate::new(1, members)),
            };
            let frames = encode_parts("c", &m).unwrap();
            assert!(frames.len() >= 2, "{pad:?}");
            for f in &frames[..frames.len() - 1] {
                assert!(
                    f.len() <= MAX_MESSAGE_BYTES && f.len() + 6 >= MAX_MESSAGE_BYTES - 60,
                    "{pad:?}: a part of {} bytes",
                    f.len()
                );
            }
            // Each part's data is the longest piece that fits the budget: the next character
            // would not.
            let datas: Vec<String> = frames
                .iter()
                .map(|f| {
                    let v: serde_json::Value = serde_json::from_slice(f).unwrap();
                    v["part"]["data"].as_str().unwrap().to_owned()
                })
                .collect();
            for pair in datas.windows(2) {
                let used: usize = pair[0].chars().map(escaped_len).sum();
                let next = escaped_len(pair[1].chars().next().unwrap());
                assert!(
                    used <= budget && used + next > budget,
                    "{pad:?}: {used} + {next}"
                );
            }
            assert!(
                assemble(&mut Reassembler::new(), 1, &frames) == vec![m],
                "{pad:?}"
            );
        }
    }

    /// The bounds of a part at their edge: the most parts and the largest id are taken, and a
    /// sender may hold exactly `MAX_ASSEMBLED_BYTES`, not one byte more.
    #[test]
    fn part_bounds_are_checked_at_their_edge() {
        let part = |id, index, count, data: String| {
            part_frame(&Part {
                id,
                index,
                count,
                data,
            })
        };
        let mut r = Reassembler::new();
        assert_eq!(
            r.decode("c", &1, &part(MAX_WIRE_INT, 0, 2, "x".into())),
            Ok(None)
        );
        assert_eq!(
            r.decode("c", &1, &part(7, MAX_PARTS - 1, MAX_PARTS, "x".into())),
            Ok(None)
        );
        assert_eq!(r.pending(), 1);
        // 16 MiB in parts of 64,000 bytes and one of the rest: held; one byte more: refused.
        let chunk = 64_000;
        let full = MAX_ASSEMBLED_BYTES / chunk;
        for index in 0..full as u32 {
            assert_eq!(
                r.decode("c", &2, &part(9, index, MAX_PARTS, "y".repeat(chunk))),
                Ok(None)
            );
        }
        let rest = MAX_ASSEMBLED_BYTES - full * chunk;
        assert_eq!(
            r.decode("c", &2, &part(9, full as u32, MAX_PARTS, "y".repeat(rest))),
            Ok(None)
        );
        assert_eq!(r.held_bytes(), MAX_ASSEMBLED_BYTES + 1);
        assert_eq!(
            r.decode("c", &2, &part(9, full as u32 + 1, MAX_PARTS, "y".into())),
            Err(CodecError::TooLarge(MAX_ASSEMBLED_BYTES + 1))
        );
        assert_eq!(r.pending(), 1, "sender 2's partial is forgotten");
    }

    /// Forgetting goes by when a sender was last heard from, not by its name.
    #[test]
    fn the_sender_forgotten_is_the_one_heard_from_least_recently() {
        let frames = encode_parts("c", &whoami_reply(3_000)).unwrap();
        let mut r = Reassembler::new();
        for from in 0..MAX_PARTIAL_SENDERS as u8 {
            assert!(r.decode("c", &from, &frames[0]).unwrap().is_none());
        }
        // Sender 0 is heard from again: now sender 1 is the stalest.
        assert!(r.decode("c", &0, &frames[1]).unwrap().is_none());
        assert!(r.decode("c", &99, &frames[0]).unwrap().is_none());
        assert_eq!(r.pending(), MAX_PARTIAL_SENDERS);
        assert!(
            assemble(&mut r, 0, &frames[2..]).len() == 1,
            "sender 0 was kept"
        );
        assert!(
            assemble(&mut r, 1, &frames[1..]).is_empty(),
            "sender 1 was forgotten"
        );
        r.forget(&99);
        assert!(
            assemble(&mut r, 99, &frames[1..]).is_empty(),
            "sender 99 was forgotten"
        );
    }

    /// `id` is FNV-1a of the whole envelope, masked to 53 bits (docs/wire-format.md), and a
    /// part altered on the way is caught by it even when the text still parses.
    #[test]
    fn the_id_checks_the_whole_text() {
        let m = whoami_reply(3_000);
        let whole = super::super::encode_unbounded("c", &m).unwrap();
        let mut h = Fnv::new();
        h.write(&whole);
        let frames = encode_parts("c", &m).unwrap();
        let parts: Vec<Part> = frames
            .iter()
            .map(|f| {
                let v: serde_json::Value = serde_json::from_slice(f).unwrap();
                serde_json::from_value(v["part"].clone()).unwrap()
            })
            .collect();
        assert!(parts.iter().all(|p| p.id == h.0 & MAX_WIRE_INT));
        // One member id changed in the second part: still valid JSON, another electorate.
        let mut altered = parts[1].clone();
        let at = altered.data.find("12D3KooW").expect("an id in the part") + 8;
        altered.data.replace_range(at..at + 1, "9");
        let mut r = Reassembler::new();
        let mut got = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let p = if i == 1 { &altered } else { p };
            got.push(r.decode("c", &1, &part_frame(p)));
        }
        assert!(
            got.last()
                == Some(&Err(CodecError::BadPart(
                    "checksum does not match the parts"
                ))),
            "{:?}",
            got.last()
                .map(|g| g.as_ref().map(|m| m.as_ref().map(Message::kind)))
        );
    }

    /// A cluster id so long that a part would hold less than half a frame of data is refused;
    /// one that leaves exactly half is not.
    #[test]
    fn a_cluster_id_that_leaves_no_room_for_parts_is_refused() {
        let m = whoami_reply(3_000);
        let around = part_overhead("").unwrap();
        let half = "c".repeat(MAX_MESSAGE_BYTES / 2 - around);
        let frames = encode_parts(&half, &m).unwrap();
        assert!(frames.iter().all(|f| f.len() <= MAX_MESSAGE_BYTES));
        let mut r = Reassembler::new();
        let got: Vec<Message> = frames
            .iter()
            .filter_map(|f| r.decode(&half, &1, f).unwrap())
            .collect();
        assert!(got == vec![m.clone()]);
        let over = format!("{half}c");
        assert!(matches!(
            encode_parts(&over, &m),
            Err(CodecError::TooLarge(_))
        ));
    }

    /// The whole at its bound: exactly 16 MiB is sent in parts, one byte more is not.
    #[test]
    fn a_message_of_exactly_the_assembled_limit_is_encoded() {
        let m = reply_of_exactly(MAX_ASSEMBLED_BYTES);
        let frames = encode_parts("c", &m).unwrap();
        assert!(frames.len() <= MAX_PARTS as usize);
        assert!(assemble(&mut Reassembler::new(), 1, &frames) == vec![m.clone()]);
        // The same message for a cluster id one byte longer.
        assert_eq!(
            encode_parts("cc", &m).err(),
            Some(CodecError::TooLarge(MAX_ASSEMBLED_BYTES + 1))
        );
    }

    #[test]
    fn a_message_over_the_assembled_limit_is_not_encoded() {
        let m = whoami_reply(MAX_ASSEMBLED_BYTES / 50);
        assert!(matches!(
            encode_parts("c", &m),
            Err(CodecError::TooLarge(_))
        ));
    }
}
