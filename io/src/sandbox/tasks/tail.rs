//! The last bytes of each output stream of a run, kept while it streams (a result carries
//! tails, not heads: the end of a log says why a command failed).

use super::super::{OutputChunk, OutputStream};

/// Keeps the last `cap` bytes of stdout and of stderr, and counts the bytes dropped before them.
#[derive(Debug, Clone)]
pub struct Tails {
    cap: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_dropped: u64,
    stderr_dropped: u64,
}

impl Tails {
    /// Tails of at most `cap` bytes each.
    pub fn new(cap: usize) -> Self {
        Tails {
            cap,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_dropped: 0,
            stderr_dropped: 0,
        }
    }

    /// Adds a chunk of output.
    pub fn push(&mut self, chunk: &OutputChunk) {
        let (buf, dropped) = match chunk.stream {
            OutputStream::Stdout => (&mut self.stdout, &mut self.stdout_dropped),
            OutputStream::Stderr => (&mut self.stderr, &mut self.stderr_dropped),
        };
        let n = keep_tail(buf, &chunk.data, self.cap);
        *dropped = dropped.saturating_add(n as u64);
    }

    /// Stdout's tail as text (invalid UTF-8 replaced).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr's tail as text (invalid UTF-8 replaced).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Bytes of stdout dropped before its tail.
    pub fn stdout_dropped(&self) -> u64 {
        self.stdout_dropped
    }

    /// Bytes of stderr dropped before its tail.
    pub fn stderr_dropped(&self) -> u64 {
        self.stderr_dropped
    }
}

/// Appends `data` to `buf` and drops from the front whatever exceeds `cap`; returns how many
/// bytes were dropped.
fn keep_tail(buf: &mut Vec<u8>, data: &[u8], cap: usize) -> usize {
    if data.len() >= cap {
        let dropped = buf.len() + data.len() - cap;
        buf.clear();
        buf.extend_from_slice(&data[data.len() - cap..]);
        return dropped;
    }
    buf.extend_from_slice(data);
    let excess = buf.len().saturating_sub(cap);
    buf.drain(..excess);
    excess
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(stream: OutputStream, data: &[u8]) -> OutputChunk {
        OutputChunk {
            stream,
            data: data.to_vec(),
        }
    }

    #[test]
    fn only_the_last_bytes_of_each_stream_are_kept() {
        let mut t = Tails::new(4);
        t.push(&chunk(OutputStream::Stdout, b"ab"));
        t.push(&chunk(OutputStream::Stderr, b"xyz"));
        assert_eq!(t.stdout(), "ab");
        t.push(&chunk(OutputStream::Stdout, b"cdef"));
        assert_eq!(t.stdout(), "cdef");
        t.push(&chunk(OutputStream::Stdout, b"g"));
        assert_eq!(t.stdout(), "defg");
        t.push(&chunk(OutputStream::Stdout, b"0123456789"));
        assert_eq!(t.stdout(), "6789");
        assert_eq!(t.stderr(), "xyz");
    }

    /// What went before a tail is counted, so the result can say it is not all of the output.
    #[test]
    fn the_bytes_dropped_before_each_tail_are_counted() {
        let mut t = Tails::new(4);
        t.push(&chunk(OutputStream::Stdout, b"ab"));
        t.push(&chunk(OutputStream::Stderr, b"xyz"));
        assert_eq!((t.stdout_dropped(), t.stderr_dropped()), (0, 0));
        // "ab" + "cdef": "ab" dropped.
        t.push(&chunk(OutputStream::Stdout, b"cdef"));
        assert_eq!(t.stdout_dropped(), 2);
        // "cdef" + "g": "c" dropped.
        t.push(&chunk(OutputStream::Stdout, b"g"));
        assert_eq!(t.stdout_dropped(), 3);
        // A chunk longer than the tail: the old tail and the chunk's head dropped.
        t.push(&chunk(OutputStream::Stdout, b"0123456789"));
        assert_eq!(t.stdout_dropped(), 3 + 4 + 6);
        assert_eq!(t.stdout(), "6789");
        assert_eq!(t.stderr_dropped(), 0);
    }
}
