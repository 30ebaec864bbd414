//! How the node's log records optional values and lists: plain text for a person, JSON (`null`,
//! an array) in a JSON log line. The one place this convention is written down; the JSON
//! format (`chorus_node::logging`) reads it.
//!
//! - **An optional value** is recorded as an `Option` (`lease_until_ms = lease`, or
//!   `from = from.map(tracing::field::display)`), never as its debug text (`Some(46141)`).
//!   `None` records nothing: the human format leaves the field out, and the JSON format writes
//!   every field an event declares but did not record as `null`.
//! - **A list** is recorded through [`list`] (or [`quoted`], for items that may hold a comma or
//!   a space, as a command's words) with `%`: `addrs = %list(&addrs)`. A person reads
//!   `a, b` (or `["sh", "-c"]`); the JSON format writes an array of strings.
//!
//! - **A value from outside the node** — from a request, a peer, a task's author — is recorded
//!   through [`outside`]: `name = %outside(&name)`, `from = %outside(from)`. Its control
//!   characters (newline, carriage return, ESC, the C1 set) are written as escapes by
//!   [`escape_controls`], the one escaping function for such text: no value can end a log line
//!   and forge the next, or send a terminal commands. A message that quotes such a value
//!   takes it through [`outside`] as well.
//!
//! How the JSON format tells a list from other text: it formats each value through
//! [`json_of`], which raises a flag of this thread while it formats; a [`List`] that sees the
//! flag writes its items as a JSON array and counts the bytes it wrote. Only when one list
//! wrote the whole of a value's text is that text taken as JSON. Any other text (a peer's
//! address, a task's error) is never parsed, whatever it looks like: it stays a JSON string.

use std::cell::Cell;
use std::fmt;

thread_local! {
    /// Raised while [`json_of`] formats a value.
    static JSON_WANTED: Cell<bool> = const { Cell::new(false) };
    /// Lists that wrote JSON while the flag was up, and how many bytes they wrote.
    static JSON_WRITTEN: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// A list for a log field. See the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub struct List {
    items: Vec<String>,
    quoted: bool,
}

/// A list a person reads as `a, b, c`.
pub fn list<I>(items: I) -> List
where
    I: IntoIterator,
    I::Item: fmt::Display,
{
    List {
        items: items.into_iter().map(|i| i.to_string()).collect(),
        quoted: false,
    }
}

/// A list a person reads with each item quoted, `["sh", "-c", "echo a, b"]`: for items that
/// may hold a comma or a space.
pub fn quoted<I>(items: I) -> List
where
    I: IntoIterator,
    I::Item: fmt::Display,
{
    List {
        quoted: true,
        ..list(items)
    }
}

impl fmt::Display for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if JSON_WANTED.get() {
            let json = serde_json::to_string(&self.items).map_err(|_| fmt::Error)?;
            let (lists, bytes) = JSON_WRITTEN.get();
            JSON_WRITTEN.set((lists + 1, bytes + json.len()));
            return f.write_str(&json);
        }
        if self.quoted {
            write!(f, "{:?}", self.items)
        } else {
            f.write_str(&self.items.join(", "))
        }
    }
}

/// The same as its `Display`: `?list(…)` and `%list(…)` record the same.
impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `text` with every control character shown as an escape (`\x0a`, `\x1b`, `\u{9b}`): what came
/// from outside reaches a log line or a terminal as text, never as a line break or a command.
/// With `keep_lines`, newline and tab stay as they are (a task's output shown on a terminal,
/// line by line); in a log line nothing stays. The one escaping function of the project: the
/// CLI's `escape_controls` and [`outside`] are this.
pub fn escape_controls(text: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' if keep_lines => out.push(c),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A value from outside the node, for a log field or message. See the [module docs](self).
pub fn outside<T: fmt::Display>(value: T) -> Outside<T> {
    Outside(value)
}

/// A value from outside, written through [`escape_controls`]; see [`outside`].
#[derive(Clone, Copy)]
pub struct Outside<T>(T);

impl<T: fmt::Display> fmt::Display for Outside<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape_controls(&self.0.to_string(), false))
    }
}

/// The same as its `Display`: `?outside(…)` and `%outside(…)` record the same.
impl<T: fmt::Display> fmt::Debug for Outside<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Lowers the flag when formatting ends, a panic included.
struct Wanted {
    before: bool,
}

impl Wanted {
    fn raise() -> Wanted {
        JSON_WRITTEN.set((0, 0));
        Wanted {
            before: JSON_WANTED.replace(true),
        }
    }
}

impl Drop for Wanted {
    fn drop(&mut self) {
        JSON_WANTED.set(self.before);
    }
}

/// A field's value for a JSON log line: the array when the value is a [`List`] and nothing
/// else, otherwise its text as a string.
pub fn json_of(value: &dyn fmt::Debug) -> serde_json::Value {
    let text = {
        let _wanted = Wanted::raise();
        format!("{value:?}")
    };
    let (lists, bytes) = JSON_WRITTEN.replace((0, 0));
    if lists == 1 && bytes == text.len() {
        if let Ok(json) = serde_json::from_str(&text) {
            return json;
        }
    }
    if lists > 0 {
        // A list inside other text: all of it as a person reads it.
        return serde_json::Value::String(format!("{value:?}"));
    }
    serde_json::Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tracing::field::display;

    #[test]
    fn a_value_from_outside_cannot_break_a_line_or_reach_a_terminal() {
        let forged = "PATH\n2099-01-01T00:00:00Z  WARN forged\r\x1b[31mred\u{9b}2J\tx\0";
        let written = outside(forged).to_string();
        assert_eq!(
            written,
            "PATH\\x0a2099-01-01T00:00:00Z  WARN forged\\x0d\\x1b[31mred\\u{9b}2J\\x09x\\x00"
        );
        assert!(!written.chars().any(char::is_control), "{written}");
        assert_eq!(format!("{:?}", outside(forged)), written);
        // Text without control characters is as it was, UTF-8 included.
        assert_eq!(outside("n1 — ok").to_string(), "n1 — ok");
        // On a terminal, a task's lines stay lines.
        assert_eq!(escape_controls("a\tb\nc\x1b", true), "a\tb\nc\\x1b");
        // A JSON line carries the escaped text as a string.
        assert_eq!(json_of(&outside("a\nb")), json!("a\\x0ab"));
    }

    #[test]
    fn a_person_reads_a_list_as_text() {
        assert_eq!(list(["a", "b"]).to_string(), "a, b");
        assert_eq!(list(Vec::<String>::new()).to_string(), "");
        assert_eq!(
            quoted(["sh", "-c", "echo a, b"]).to_string(),
            r#"["sh", "-c", "echo a, b"]"#
        );
        assert_eq!(format!("{:?}", display(list([1, 2]))), "1, 2");
    }

    #[test]
    fn a_json_line_reads_a_list_as_an_array_and_any_other_text_as_a_string() {
        assert_eq!(json_of(&display(list(["a", "b"]))), json!(["a", "b"]));
        assert_eq!(json_of(&quoted(["x y"])), json!(["x y"]));
        assert_eq!(json_of(&display(list(Vec::<u8>::new()))), json!([]));
        // Text that looks like JSON, from a peer or a task, stays text.
        for text in [r#"["a","b"]"#, "null", "{}", "7"] {
            assert_eq!(json_of(&display(text)), json!(text), "{text}");
        }
        // A list inside other text: the text as a person reads it, never half JSON.
        assert_eq!(
            json_of(&format_args!("{} and more", list(["a", "b"]))),
            json!("a, b and more")
        );
        assert_eq!(
            json_of(&format_args!("{}{}", list(["a"]), list(["b"]))),
            json!("ab")
        );
        // The flag is down again: a list outside formats for a person.
        assert_eq!(list(["a", "b"]).to_string(), "a, b");
    }
}
