//! Where devcluster's output goes: messages that scroll, and on a terminal the table kept under
//! them. The table is redrawn in place by clearing only its own lines, so a message (the
//! temporary directory, a kill, a demo task's result) stays on screen above it.
//!
//! A write that fails — a closed pipe, as in `devcluster | head` — closes the console instead
//! of panicking: later output is dropped, and the watch loop sees [`Console::is_closed`] and
//! stops the cluster as it would on Ctrl-C.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

/// devcluster's output, shared by the watch loop and the demo workload.
#[derive(Clone)]
pub(super) struct Console {
    state: Arc<Mutex<State>>,
}

struct State {
    out: Box<dyn Write + Send>,
    /// The table last drawn, redrawn under each message; empty when there is none on screen.
    table: String,
    closed: bool,
}

impl Console {
    /// Standard output.
    pub(super) fn stdout() -> Self {
        Self::to(Box::new(std::io::stdout()))
    }

    /// Any writer (the tests use a buffer, or one that fails).
    pub(super) fn to(out: Box<dyn Write + Send>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                out,
                table: String::new(),
                closed: false,
            })),
        }
    }

    /// Prints one message line above the table (if one is drawn).
    pub(super) fn say(&self, line: &str) {
        let mut s = self.lock();
        let table = s.table.clone();
        let text = frame(&table, &[line], &table);
        s.write(&text);
    }

    /// Draws `table` in place of the one on screen (under every message so far).
    pub(super) fn table(&self, table: &str) {
        let mut s = self.lock();
        let text = frame(&s.table, &[], table);
        s.write(&text);
        s.table = table.to_owned();
    }

    /// Leaves the table on screen as it is: what is printed next goes under it.
    pub(super) fn leave_table(&self) {
        self.lock().table.clear();
    }

    /// Whether a write has failed (the reader went away): nothing more can be shown.
    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while printing leaves nothing half-updated worth refusing to print over.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn write(&mut self, text: &str) {
        if self.closed {
            return;
        }
        if self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .is_err()
        {
            self.closed = true;
        }
    }
}

/// What to write to replace the table on screen (`drawn`, empty for none) by `messages` and
/// then `table`: the cursor goes back up to the old table's first line and clears from there
/// to the end of the screen — only the table's lines, never what scrolled above it.
pub(super) fn frame(drawn: &str, messages: &[&str], table: &str) -> String {
    let mut out = String::new();
    let lines = drawn.lines().count();
    if lines > 0 {
        out.push_str(&format!("\r\x1b[{lines}A\x1b[J"));
    }
    for m in messages {
        out.push_str(m);
        out.push('\n');
    }
    out.push_str(table);
    if !table.is_empty() && !table.ends_with('\n') {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer into a buffer the test keeps.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A reader that has gone away.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_redraw_clears_only_the_tables_own_lines() {
        assert_eq!(frame("", &["hello"], ""), "hello\n");
        assert_eq!(frame("", &[], "a\nb\n"), "a\nb\n");
        // Two lines drawn: up two, clear below, then the message and the table again.
        assert_eq!(
            frame("a\nb\n", &["demo: task 1 succeeded"], "a\nc\n"),
            "\r\x1b[2A\x1b[Jdemo: task 1 succeeded\na\nc\n"
        );
    }

    #[test]
    fn messages_stay_above_the_table_across_redraws() {
        let buf = Buffer::default();
        let console = Console::to(Box::new(buf.clone()));
        console.say("devcluster: 3 nodes in /tmp/chorus-devcluster-x");
        console.table("n0 follower\nn1 admin\n");
        console.say("devcluster: demo: task 1 succeeded");
        console.table("n0 follower\nn1 DOWN\n");
        console.leave_table();
        console.say("devcluster: stopped");
        let out = buf.text();
        // Never a clear of the whole screen, which would wipe the messages.
        assert!(!out.contains("\x1b[2J"), "{out:?}");
        assert!(!out.contains("\x1b[H"), "{out:?}");
        assert_eq!(
            out,
            "devcluster: 3 nodes in /tmp/chorus-devcluster-x\n\
             n0 follower\nn1 admin\n\
             \r\x1b[2A\x1b[Jdevcluster: demo: task 1 succeeded\nn0 follower\nn1 admin\n\
             \r\x1b[2A\x1b[Jn0 follower\nn1 DOWN\n\
             devcluster: stopped\n"
        );
        assert!(!console.is_closed());
    }

    #[test]
    fn a_closed_pipe_closes_the_console_without_a_panic() {
        let console = Console::to(Box::new(ClosedPipe));
        assert!(!console.is_closed());
        console.say("devcluster: 3 nodes in /tmp/x");
        assert!(console.is_closed());
        console.table("n0\n");
        console.say("more");
        assert!(console.is_closed());
    }
}
