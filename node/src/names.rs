//! How a node id is shortened for people: one form wherever a table or a one-line summary has
//! no room for the whole id (`chorus status --cluster`, `chorus task list` and `submit --wait`,
//! devcluster). Where an id is to be copied (`chorus status`, `chorus members`, the logs) it is
//! shown whole; where one is typed (`chorus members add|remove|transfer`), the short form will
//! do ([`resolve_id`]).

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

/// The node id among `known` that `given` names: the id itself, or the end of exactly one id
/// (the short form the tables print, or more of it). `Ok(None)`: no known id ends so — the
/// caller passes `given` on as it is (a member may be gone from the list it read). Several
/// ends are refused, naming them, so a short id never picks a node by chance.
pub fn resolve_id<'a>(
    given: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Result<Option<&'a str>, String> {
    let mut ends: Vec<&'a str> = Vec::new();
    for id in known {
        if id == given {
            return Ok(Some(id));
        }
        if !given.is_empty() && id.ends_with(given) && !ends.contains(&id) {
            ends.push(id);
        }
    }
    match ends.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        several => Err(format!(
            "{given:?} is the end of {} node ids ({}): give more of it",
            several.len(),
            several.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 54, item 9: the 8-character ids the tables print name their node; an end two
    /// ids share is refused, naming both.
    #[test]
    fn a_short_id_names_the_one_node_whose_id_ends_so() {
        let a = "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz123456789abcdefUAaUDifh";
        let b = "12D3KooWZzZzEfGhIjKlMnOpQrStUvWxYz123456789abcdefXXaUDifh";
        let known = [a, b];
        assert_eq!(resolve_id(a, known), Ok(Some(a)));
        assert_eq!(resolve_id(short_id(a), known), Ok(Some(a)));
        assert_eq!(resolve_id("XXaUDifh", known), Ok(Some(b)));
        let err = resolve_id("aUDifh", known).unwrap_err();
        assert!(
            err.contains(a) && err.contains(b) && err.contains("2 node ids"),
            "{err}"
        );
        assert_eq!(resolve_id("nosuch", known), Ok(None));
        assert_eq!(resolve_id("", known), Ok(None));
    }

    #[test]
    fn a_node_id_is_shortened_to_its_last_8_characters() {
        let id = "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz123456789abcdefUAaUDifh";
        assert_eq!(short_id(id), "UAaUDifh");
        assert_eq!(short_id("n0"), "n0");
        assert_eq!(short_id("12345678"), "12345678");
        assert_eq!(short_id("ééééééééé"), "éééééééé");
    }
}
