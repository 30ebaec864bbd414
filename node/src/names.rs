//! How a node id is shortened for people: one form wherever a table or a one-line summary has
//! no room for the whole id (`chorus status --cluster`, `chorus task list` and `submit --wait`,
//! devcluster). Where an id is to be copied (`chorus status`, `chorus members`, the logs) it is
//! shown whole.

/// How many characters of a node id its short form keeps: the last 8. A libp2p peer id is 52
/// characters, and its first ones (`12D3KooW`) are the same for every Ed25519 key.
pub const SHORT_ID_CHARS: usize = 8;

/// The last [`SHORT_ID_CHARS`] characters of a node id (the whole of a shorter one).
pub fn short_id(id: &str) -> &str {
    match id.char_indices().rev().nth(SHORT_ID_CHARS - 1) {
        Some((at, _)) => &id[at..],
        None => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_id_is_shortened_to_its_last_8_characters() {
        let id = "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz123456789abcdefUAaUDifh";
        assert_eq!(short_id(id), "UAaUDifh");
        assert_eq!(short_id("n0"), "n0");
        assert_eq!(short_id("12345678"), "12345678");
        assert_eq!(short_id("ééééééééé"), "éééééééé");
    }
}
