//! The node's end of `chorus-agent` (`image/agent.c`): one long-lived exec per live sandbox that
//! runs its commands, so a command costs a frame each way on an open stream instead of three
//! Engine calls (create, start and inspect an exec). The frames are said in `agent.c`.
//!
//! Who is trusted for what: the agent runs as the commands' user, so a command may kill it, or
//! take its place (same uid) and say anything on its stdout. What it says is checked like any
//! other sandbox output: a frame longer than [`MAX_FRAME`], an unknown type or a short payload
//! ends the agent (its callers fail; the next command starts another); an id nobody waits for
//! is dropped; output is capped by the caller as any command's is.
//! It is a speed path, never a boundary: an image without it runs commands through the Engine.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::OutputStream;

/// Where the sandbox image has the agent (`image/mod.rs` puts it there).
pub const AGENT_PATH: &str = "/usr/bin/chorus-agent";

/// The agent's protocol version (its HELLO).
const VERSION: u32 = 3;

/// The longest frame the agent may send: its output comes in reads of 64 KiB.
const MAX_FRAME: usize = 1 << 20;

/// How long a new agent has to say HELLO before the sandbox runs commands through the Engine.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// Events of one command held for its caller. Past it the reader waits for the caller, and
/// with it the agent and the sandbox's other commands (their output stays in pipes): a command
/// whose output outruns its reader (a slow streaming client) holds at most this many frames
/// of 64 KiB here, never an unbounded queue.
const EVENTS_BUFFERED: usize = 16;

/// Stdin goes to the agent in frames of at most this.
const STDIN_CHUNK: usize = 64 * 1024;

/// Stdin bytes of one command sent to the agent and not yet written to the command (its TAKEN
/// frames say how far it got): past it the upload waits for the command, so a command that
/// reads slowly holds back the caller's body, not the agent's memory (which closes a command's
/// stdin past 64 MiB held). Four times the pipe's and the frames' 64 KiB keeps one pipe full.
pub(super) const STDIN_WINDOW: u64 = 4 << 20;

/// What the agent says of one command.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event {
    Started {
        pid: u32,
    },
    Output(OutputStream, Vec<u8>),
    /// `code` is the exit code, or 128 + the signal that killed it.
    Exit {
        code: i64,
        signaled: bool,
    },
    /// It did not start: `stage` 1 its working directory, 3 no room (errno `errno`).
    Failed {
        stage: u8,
        errno: u32,
    },
    /// This many more of its stdin bytes were written to it (or dropped with its stdin).
    Taken(u32),
}

/// One command's request.
pub(super) struct Run<'a> {
    pub argv: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: &'a str,
    pub stdin: Option<&'a [u8]>,
    /// Its stdin comes later, frame by frame ([`Agent::feed`]): a streamed upload.
    pub fed: bool,
}

/// A streamed upload into a command's stdin: the chunks `source` yields, an empty one ending
/// it (see `ExecutionSandbox::write_file_streaming`), at most `limit` bytes.
pub(super) struct Feed {
    pub source: mpsc::Receiver<Vec<u8>>,
    pub limit: u64,
    /// Bytes sent so far.
    pub fed: u64,
    /// Of those, the bytes the agent has not yet said it wrote to the command.
    pub in_flight: u64,
    /// The end was sent.
    pub done: bool,
    /// What it writes, for its errors.
    pub what: String,
}

impl Feed {
    /// A feed of `source`, at most `limit` bytes, writing `what`.
    pub(super) fn new(source: mpsc::Receiver<Vec<u8>>, limit: u64, what: String) -> Feed {
        Feed {
            source,
            limit,
            fed: 0,
            in_flight: 0,
            done: false,
            what,
        }
    }

    /// Whether another chunk may go: the end not sent yet, and room in the window.
    pub(super) fn wants_more(&self) -> bool {
        !self.done && self.in_flight < STDIN_WINDOW
    }

    /// The agent wrote `n` more bytes to the command.
    pub(super) fn taken(&mut self, n: u32) {
        self.in_flight = self.in_flight.saturating_sub(u64::from(n));
    }

    /// Sends on one chunk of the source (`None`: the source closed), or says why the upload
    /// must end.
    pub(super) async fn take(
        &mut self,
        chunk: Option<Vec<u8>>,
        agent: &Agent,
        id: u32,
    ) -> SandboxResult<()> {
        let Some(chunk) = chunk else {
            return Err(crate::sandbox::upload_broken_off(&self.what));
        };
        if chunk.is_empty() {
            self.done = true;
            return self.sent(agent.feed(id, &[]).await);
        }
        self.fed = self.fed.saturating_add(chunk.len() as u64);
        self.in_flight = self.in_flight.saturating_add(chunk.len() as u64);
        if self.fed > self.limit {
            return Err(crate::sandbox::upload_over(&self.what, self.limit));
        }
        for part in chunk.chunks(STDIN_CHUNK) {
            self.sent(agent.feed(id, part).await)?;
        }
        Ok(())
    }

    fn sent(&self, sent: bool) -> SandboxResult<()> {
        match sent {
            true => Ok(()),
            false => Err(agent_ended(&self.what)),
        }
    }
}

/// The error of a command (`what`) whose agent ended under it.
pub(super) fn agent_ended(what: &str) -> SandboxError {
    SandboxError::new(
        ErrorCategory::Exec,
        format!("{what}: the sandbox's command agent ended"),
    )
}

type Waiting = Arc<Mutex<BTreeMap<u32, mpsc::Sender<Event>>>>;

/// A running agent.
pub(super) struct Agent {
    input: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    waiting: Waiting,
    next_id: AtomicU32,
    alive: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A command running in the agent: its events, and its id for stdin and signals.
pub(super) struct Running {
    pub id: u32,
    pub events: mpsc::Receiver<Event>,
    waiting: Waiting,
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.waiting).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Agent {
    /// Starts the agent in container `name` as `user` (the commands' user); `None` when it does not say
    /// HELLO in time (an image without it, a sandbox that will not run it).
    pub(super) async fn start(
        docker: &bollard::Docker,
        name: &str,
        user: Option<String>,
    ) -> Option<Agent> {
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(vec![AGENT_PATH.to_owned()]),
            user,
            working_dir: Some("/".to_owned()),
            ..Default::default()
        };
        let exec = docker.create_exec(name, config).await.ok()?;
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(256 * 1024),
                }),
            )
            .await
            .ok()?;
        let StartExecResults::Attached { mut output, input } = started else {
            return None;
        };
        let mut frames = Frames::default();
        let hello = tokio::time::timeout(HELLO_WAIT, async {
            while let Some(Ok(item)) = output.next().await {
                if let LogOutput::StdOut { message } = item {
                    frames.push(&message);
                    if let Some(frame) = frames.next() {
                        return Some(frame);
                    }
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        match hello {
            Some(Ok((0, 0, body))) if body == VERSION.to_le_bytes() => {}
            other => {
                tracing::debug!(sandbox = %name, ?other,
                    "no command agent in this sandbox; commands go through the Engine");
                return None;
            }
        }
        let waiting: Waiting = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let reader = tokio::spawn(read_events(
            name.to_owned(),
            output,
            frames,
            waiting.clone(),
            alive.clone(),
        ));
        Some(Agent {
            input: tokio::sync::Mutex::new(input),
            waiting,
            next_id: AtomicU32::new(1),
            alive,
            reader,
        })
    }

    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Starts `run`; its events follow on the answer's receiver, which ends (without an exit)
    /// if the agent does.
    pub(super) async fn run(&self, run: Run<'_>) -> Option<Running> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, events) = mpsc::channel(EVENTS_BUFFERED);
        lock(&self.waiting).insert(id, tx);
        let running = Running {
            id,
            events,
            waiting: self.waiting.clone(),
        };
        let mut body = Vec::new();
        strings(&mut body, run.argv.iter().map(String::as_bytes));
        let env: Vec<String> = run.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        strings(&mut body, env.iter().map(String::as_bytes));
        strings_one(&mut body, run.cwd.as_bytes());
        body.push(u8::from(run.stdin.is_some() || run.fed));
        let mut input = self.input.lock().await;
        let mut sent = write_frame(&mut input, 1, id, &body).await;
        if let Some(data) = run.stdin {
            for part in data.chunks(STDIN_CHUNK) {
                sent = sent && write_frame(&mut input, 2, id, part).await;
            }
            sent = sent && write_frame(&mut input, 2, id, &[]).await;
        }
        sent.then_some(running)
    }

    /// One frame of command `id`'s stdin (empty: its end).
    pub(super) async fn feed(&self, id: u32, data: &[u8]) -> bool {
        let mut input = self.input.lock().await;
        write_frame(&mut input, 2, id, data).await
    }

    /// Sends `signal` to the process group of command `id`.
    pub(super) async fn kill(&self, id: u32, signal: u32) -> bool {
        let mut input = self.input.lock().await;
        write_frame(&mut input, 3, id, &signal.to_le_bytes()).await
    }
}

/// The sandbox's agent as far as its container knows it.
#[derive(Default)]
pub(super) enum AgentSlot {
    /// Not started yet, or ended: the next command starts one.
    #[default]
    Untried,
    Running(Arc<Agent>),
    /// This sandbox has none (its image lacks it, or it would not start): commands go through
    /// the Engine.
    Unavailable,
}

impl std::fmt::Debug for AgentSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AgentSlot::Untried => "Untried",
            AgentSlot::Running(_) => "Running",
            AgentSlot::Unavailable => "Unavailable",
        })
    }
}

async fn write_frame(
    input: &mut Pin<Box<dyn AsyncWrite + Send>>,
    kind: u8,
    id: u32,
    body: &[u8],
) -> bool {
    let Ok(len) = u32::try_from(5 + body.len()) else {
        return false;
    };
    let mut frame = Vec::with_capacity(9 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.push(kind);
    frame.extend_from_slice(&id.to_le_bytes());
    frame.extend_from_slice(body);
    input.write_all(&frame).await.is_ok() && input.flush().await.is_ok()
}

fn strings_one(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s);
}

fn strings<'a>(out: &mut Vec<u8>, items: impl ExactSizeIterator<Item = &'a [u8]>) {
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for s in items {
        strings_one(out, s);
    }
}

/// Reads the agent's frames until its output ends or it breaks the protocol, passing each
/// command's events to whoever waits for them; then every waiter's receiver ends.
async fn read_events(
    sandbox: String,
    mut output: Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    mut frames: Frames,
    waiting: Waiting,
    alive: Arc<AtomicBool>,
) {
    'read: loop {
        loop {
            match frames.next() {
                None => break,
                Some(Ok((kind, id, body))) => {
                    let Some(event) = decode(kind, &body) else {
                        tracing::warn!(%sandbox, kind, "the command agent broke its protocol");
                        break 'read;
                    };
                    let to = lock(&waiting).get(&id).cloned();
                    let ended = matches!(event, Event::Exit { .. } | Event::Failed { .. });
                    if let Some(to) = to {
                        let _ = to.send(event).await;
                    }
                    if ended {
                        lock(&waiting).remove(&id);
                    }
                }
                Some(Err(len)) => {
                    tracing::warn!(%sandbox, len, "the command agent sent an oversized frame");
                    break 'read;
                }
            }
        }
        match output.next().await {
            Some(Ok(LogOutput::StdOut { message })) => frames.push(&message),
            Some(Ok(LogOutput::StdErr { message })) => {
                tracing::debug!(%sandbox, said = %String::from_utf8_lossy(&message),
                    "the command agent");
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break,
        }
    }
    alive.store(false, Ordering::Relaxed);
    lock(&waiting).clear();
}

/// An event from a frame's type and payload; `None` for one the protocol does not allow.
fn decode(kind: u8, body: &[u8]) -> Option<Event> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    match kind {
        1 if body.len() == 4 => Some(Event::Started { pid: u32_at(0)? }),
        2 => {
            let stream = match body.first()? {
                1 => OutputStream::Stdout,
                2 => OutputStream::Stderr,
                _ => return None,
            };
            Some(Event::Output(stream, body[1..].to_vec()))
        }
        3 if body.len() == 5 => Some(Event::Exit {
            code: i64::from(u32_at(0)? as i32),
            signaled: body[4] == 1,
        }),
        4 if body.len() == 5 => Some(Event::Failed {
            stage: body[0],
            errno: u32_at(1)?,
        }),
        5 if body.len() == 4 => Some(Event::Taken(u32_at(0)?)),
        _ => None,
    }
}

/// One whole frame: type, id, payload.
type Frame = (u8, u32, Vec<u8>);

/// Frames from the agent's stdout as it comes (a chunk may end anywhere in a frame).
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame (type, id, payload); `Err(len)` for one longer than allowed.
    fn next(&mut self) -> Option<Result<Frame, usize>> {
        let len = u32::from_le_bytes(self.buf.get(..4)?.try_into().ok()?) as usize;
        if !(5..=MAX_FRAME).contains(&len) {
            return Some(Err(len));
        }
        if self.buf.len() < 4 + len {
            return None;
        }
        let kind = self.buf[4];
        let id = u32::from_le_bytes(self.buf[5..9].try_into().ok()?);
        let body = self.buf[9..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Some(Ok((kind, id, body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, id: u32, body: &[u8]) -> Vec<u8> {
        let mut f = ((5 + body.len()) as u32).to_le_bytes().to_vec();
        f.push(kind);
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let mut all = frame(2, 7, b"\x01hello");
        all.extend(frame(3, 7, &[0, 0, 0, 0, 0]));
        for cut in 0..all.len() {
            let mut f = Frames::default();
            f.push(&all[..cut]);
            let mut got = Vec::new();
            while let Some(x) = f.next() {
                got.push(x.unwrap());
            }
            f.push(&all[cut..]);
            while let Some(x) = f.next() {
                got.push(x.unwrap());
            }
            assert_eq!(
                got,
                vec![(2, 7, b"\x01hello".to_vec()), (3, 7, vec![0, 0, 0, 0, 0])],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_oversized_or_short_frame_and_malformed_events_are_refused() {
        let mut f = Frames::default();
        f.push(&((MAX_FRAME + 1) as u32).to_le_bytes());
        assert_eq!(f.next(), Some(Err(MAX_FRAME + 1)));
        let mut f = Frames::default();
        f.push(&3u32.to_le_bytes());
        assert_eq!(f.next(), Some(Err(3)));
        assert_eq!(decode(1, &[1, 2, 3]), None, "a short pid");
        assert_eq!(decode(2, &[9, b'x']), None, "an unknown stream");
        assert_eq!(decode(2, &[]), None, "no stream");
        assert_eq!(decode(3, &[0; 4]), None, "a short exit");
        assert_eq!(decode(9, &[]), None, "an unknown type");
        assert_eq!(
            decode(3, &[137, 0, 0, 0, 1]),
            Some(Event::Exit {
                code: 137,
                signaled: true
            })
        );
        assert_eq!(
            decode(2, b"\x02oops"),
            Some(Event::Output(OutputStream::Stderr, b"oops".to_vec()))
        );
    }
}
