//! The last bytes of each output stream of a run, kept while it streams (a result carries
//! tails, not heads: the end of a log says why a command failed).

use super::super::{OutputChunk, OutputStream};

/// Keeps the last `cap` bytes of stdout and of stderr.
#[derive(Debug, Clone)]
pub struct Tails {
    cap: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Tails {
    /// Tails of at most `cap` bytes each.
    pub fn new(cap: usize) -> Self {
        Tails {
            cap,
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    /// Adds a chunk of output.
    pub fn push(&mut self, chunk: &OutputChunk) {
        let buf = match chunk.stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        };
        keep_tail(buf, &chunk.data, self.cap);
    }

    /// Stdout's tail as text (invalid UTF-8 replaced).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr's tail as text (invalid UTF-8 replaced).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Appends `data` to `buf` and drops from the front whatever exceeds `cap`.
fn keep_tail(buf: &mut Vec<u8>, data: &[u8], cap: usize) {
    if data.len() >= cap {
        buf.clear();
        buf.extend_from_slice(&data[data.len() - cap..]);
        return;
    }
    buf.extend_from_slice(data);
    if buf.len() > cap {
        let excess = buf.len() - cap;
        buf.drain(..excess);
    }
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
}
