//! `chorus mcp`: a Model Context Protocol server (issue 55) that an agent's host starts over
//! stdio — or talks to over streamable HTTP with `--http` — whose tools reach a CHORUS cluster
//! through one node's HTTP API with the operator's token, exactly as the CLI does: the same
//! client ([`super::http`], address, token, pinned TLS), the same calls ([`super::live`] for
//! live sandboxes, [`super::across`] and [`super::logs`] for tasks).
//!
//! What a tool answers is JSON (as text, and as the result's structured content). Long output
//! is cut to a bound with a note saying how many bytes were cut and where; a file that is not
//! UTF-8 comes back in base64. Every failure — a node's refusal, a gone sandbox, an unreachable
//! node — is a *tool error* (`is_error`) with a plain reason, never a protocol error, so the
//! model reads it and acts. The token never appears in a tool's output ([`super::http::redact`]
//! runs over all of it) nor in a log line (a call is logged by tool name, outcome and time,
//! never with its arguments). Logs go to stderr: in stdio mode stdout is the protocol.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::across::{at_owner, http_of, members, whereabouts};
use super::http::{redact, request, request_peer};
use super::live::{self, Refusal};
use super::logs;
use super::taskfile::{cpus_to_millis, seconds_to_ms};
use crate::exit::one_line;

/// What `chorus mcp` takes.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The HTTP API of any node of the cluster: `HOST:PORT`, or `https://HOST:PORT#sha256=FP`
    /// for one served over TLS (or give --tls-fingerprint / CHORUS_TLS_FINGERPRINT).
    #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
    pub addr: String,
    /// Serve MCP over streamable HTTP at this address (endpoint `/mcp`) instead of stdio; port 0
    /// picks a free one (the address is said on stderr). Loopback only unless --http-public.
    #[arg(long, value_name = "IP:PORT")]
    pub http: Option<SocketAddr>,
    /// Let --http listen on an address other machines can reach. The MCP endpoint has no login
    /// of its own: whoever reaches it acts with this process's token.
    #[arg(long, requires = "http")]
    pub http_public: bool,
}

/// The longest help text, for `chorus mcp --help`.
pub const LONG_ABOUT: &str = "\
Serve CHORUS to an AI agent's host as Model Context Protocol (MCP) tools: live sandboxes \
(create, exec, write/read/list files, close, list), tasks (submit, get, logs) and the \
cluster's status, through the node at --addr with the token of CHORUS_TOKEN (or --token, \
--token-file), as the other commands do. Give an agent a `submit` token \
(`chorus acl token create --role submit`), never a manage one. The token never appears in a \
tool's output or in the log (stderr).

By default MCP is spoken over stdio: the host starts `chorus mcp` itself. A host's config \
(Claude Desktop, and most hosts' `mcpServers`):

  {\"mcpServers\": {\"chorus\": {
     \"command\": \"chorus\",
     \"args\": [\"mcp\", \"--addr\", \"https://10.0.0.1:7070#sha256=<fingerprint>\"],
     \"env\": {\"CHORUS_TOKEN\": \"<a submit token>\"}}}}

With --http 127.0.0.1:PORT it serves streamable HTTP at http://127.0.0.1:PORT/mcp for hosts \
that connect to a running server (`{\"url\": \"http://127.0.0.1:PORT/mcp\"}`). That endpoint \
has no login of its own — whoever can reach it acts with the token — so it listens on \
loopback only; a non-loopback address is refused unless --http-public says every machine that \
can reach it may.";

/// Each output stream of a command (and a file's part, and a log's) is cut to this by default.
pub const OUTPUT_LIMIT: usize = 64 << 10;

/// The most a call may ask for, per stream or per file part.
pub const MAX_OUTPUT_LIMIT: usize = 1 << 20;

/// How long a call other than a command may take (a node gives a forwarded call 30 s).
const CALL_WAIT: Duration = Duration::from_secs(90);

/// How long a sync (or a close, which syncs a read-write repository) may take: a workspace
/// read back whole (a node waits up to 2 min for its worker).
const SYNC_WAIT: Duration = Duration::from_secs(150);

/// How long a command may take beyond its own timeout (forwarding, the sandbox's exec).
const EXEC_MARGIN: Duration = Duration::from_secs(60);

/// A command's timeout when the call names none, as the node's (seconds).
const DEFAULT_EXEC_TIMEOUT_S: u64 = 600;

/// The longest a command or `task_submit`'s `wait_s` may ask (seconds).
const MAX_EXEC_TIMEOUT_S: u64 = 3600;

/// How long one node gets to list its sandboxes in `sandbox_list`.
const LIST_WAIT: Duration = Duration::from_secs(5);

/// Serves MCP until the host closes stdin (stdio) or the process is stopped (HTTP).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let server = Chorus::new(args.addr.clone());
    let Some(at) = args.http else {
        tracing::info!(addr = %args.addr, "chorus mcp: MCP over stdio, to the node at addr");
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP host did not start a session")?;
        running.waiting().await.context("the MCP session failed")?;
        return Ok(());
    };
    check_http_address(at, args.http_public).map_err(anyhow::Error::msg)?;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let mut config = StreamableHttpServerConfig::default();
    if args.http_public {
        // Asked by whatever name reaches this machine; the operator said any may.
        config = config.disable_allowed_hosts();
    }
    let service: StreamableHttpService<Chorus, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("cannot listen on {at}"))?;
    let bound = listener.local_addr()?;
    // Said plainly (the log may be filtered): a test or a script reads the port here.
    eprintln!("chorus mcp: MCP over streamable HTTP at http://{bound}/mcp");
    tracing::info!(%bound, addr = %args.addr, "chorus mcp: serving streamable HTTP");
    let router = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("the MCP HTTP server failed")
}

/// Refuses an `--http` address other machines may reach unless `public`, saying why.
pub fn check_http_address(at: SocketAddr, public: bool) -> Result<(), String> {
    if at.ip().is_loopback() || public {
        return Ok(());
    }
    Err(format!(
        "--http {at} is not a loopback address: the MCP endpoint has no login of its own, and \
         whoever reaches it acts with this process's CHORUS token. Serve it on 127.0.0.1 (from \
         another machine, through an SSH tunnel), or add --http-public if every machine that \
         can reach {at} may use the token"
    ))
}

/// The MCP server: the node it asks, and its tools.
#[derive(Clone)]
pub struct Chorus {
    addr: String,
    tool_router: ToolRouter<Self>,
}

/// How a file's content is given or returned.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Text, as UTF-8.
    #[default]
    #[serde(alias = "utf-8", alias = "text")]
    Utf8,
    /// Bytes, in standard base64.
    Base64,
}

/// `sandbox_create`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CreateParams {
    /// The image (default: chorus/sandbox:latest, a small toolbox: sh, bash, coreutils, sed,
    /// awk, grep, find, tar, and the host's interpreters where it has them). It must exist on
    /// the workers; nothing is pulled.
    pub image: Option<String>,
    /// Environment variables every command in the sandbox gets.
    pub env: Option<BTreeMap<String, String>>,
    /// Seconds without a call before the sandbox is closed (default and most: 600).
    pub idle_timeout_s: Option<u64>,
    /// Seconds the sandbox lives at most, busy or not (default and most: 14400, 4 hours).
    pub lifetime_s: Option<u64>,
    /// An idempotency key (1 to 128 bytes): creating again with the same key returns the same
    /// sandbox instead of a second one (safe to retry).
    pub key: Option<String>,
    /// Memory limit in MiB (default: the worker's, 512).
    pub memory_mb: Option<u32>,
    /// CPU limit in CPUs, e.g. 0.5 (default: the worker's, 1).
    pub cpus: Option<f64>,
    /// Process limit (default: the worker's, 256).
    pub pids: Option<u32>,
    /// Network access, e.g. to install packages (default: none, only loopback). The worker's
    /// egress rules hold: no host, no cluster, no private addresses.
    pub network: Option<bool>,
    /// A repository from the workers' configuration at /workspace: "NAME:ro" (read-only) or
    /// "NAME:rw" (a copy; sandbox_sync and sandbox_close carry the changed files back, never
    /// .git). The sandbox goes to a worker that has it.
    pub repo: Option<String>,
}

/// `sandbox_exec`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ExecParams {
    /// The sandbox's id, as sandbox_create returned it.
    pub id: String,
    /// The command and its arguments, run without a shell, e.g. ["python3", "-m", "pytest"].
    /// Give this or `shell`, not both.
    pub argv: Option<Vec<String>>,
    /// A shell script, run as `sh -c SCRIPT` (pipes, redirections, `&&`), e.g.
    /// "cd /workspace && make test 2>&1 | tail -n 50". Give this or `argv`, not both.
    pub shell: Option<String>,
    /// The working directory, an absolute path (default: /workspace).
    pub cwd: Option<String>,
    /// Environment variables for this command only.
    pub env: Option<BTreeMap<String, String>>,
    /// Text given to the command on its standard input.
    pub stdin: Option<String>,
    /// Seconds before the command is killed (default 600, most 3600).
    pub timeout_s: Option<u64>,
    /// Start it in the background and return at once with its pid and the log file its output
    /// goes to (read it with sandbox_read_file; stop it with `kill PID`). For servers and
    /// watchers.
    #[serde(default)]
    pub background: bool,
    /// The most bytes of each of stdout and stderr returned (default 65536, most 1048576);
    /// past it the middle is cut and a note says how much.
    pub max_output_bytes: Option<usize>,
}

/// `sandbox_write_file`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct WriteParams {
    /// The sandbox's id.
    pub id: String,
    /// An absolute path in the sandbox, e.g. /workspace/app.py (parent directories are made;
    /// an existing file is replaced).
    pub path: String,
    /// The file's content: text, or with encoding "base64" the bytes in base64.
    pub content: String,
    /// "utf8" (the default: content is the text) or "base64" (content is base64 of the bytes).
    #[serde(default)]
    pub encoding: Encoding,
    /// Permission bits in octal, e.g. "755" for a script (default "644").
    pub mode: Option<String>,
}

/// `sandbox_read_file`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ReadParams {
    /// The sandbox's id.
    pub id: String,
    /// An absolute path in the sandbox.
    pub path: String,
    /// The byte to start at (default 0): to read a long file in parts, give the previous
    /// answer's next_offset.
    pub offset: Option<usize>,
    /// The most bytes returned (default 65536, most 1048576).
    pub max_bytes: Option<usize>,
}

/// `sandbox_list_files`' arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ListFilesParams {
    /// The sandbox's id.
    pub id: String,
    /// An absolute path: a directory to list, or a file (default: /workspace).
    pub path: Option<String>,
    /// Also list every directory below it (`ls -laR`).
    #[serde(default)]
    pub recursive: bool,
}

/// The arguments of a call about one sandbox.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct IdParams {
    /// The sandbox's id, as sandbox_create returned it.
    pub id: String,
}

/// `task_submit`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct SubmitParams {
    /// The command and its arguments, e.g. ["make", "test"]. Give this or `shell`.
    pub argv: Option<Vec<String>>,
    /// A shell script, run as `sh -c SCRIPT`. Give this or `argv`.
    pub shell: Option<String>,
    /// The image (default chorus/sandbox:latest; it must exist on the workers).
    pub image: Option<String>,
    /// Environment variables.
    pub env: Option<BTreeMap<String, String>>,
    /// The working directory in the sandbox (default /workspace).
    pub workdir: Option<String>,
    /// Seconds before the run is killed (default 600).
    pub timeout_s: Option<f64>,
    /// Memory limit in MiB (default: the worker's, 512).
    pub memory_mb: Option<u32>,
    /// CPU limit in CPUs, e.g. 0.5 (default: the worker's, 1).
    pub cpus: Option<f64>,
    /// Process limit (default: the worker's, 256).
    pub pids: Option<u32>,
    /// Give the sandbox a (firewalled) network (default: none).
    #[serde(default)]
    pub network: bool,
    /// Capabilities the worker must advertise.
    pub requires: Option<Vec<String>>,
    /// An idempotency key: submitting again with the same key (and spec) names the same task.
    pub key: Option<String>,
    /// Seconds to wait for the result before answering (default 0: answer with the id at
    /// once; most 3600). Without the result, follow it with task_get or task_logs.
    pub wait_s: Option<u64>,
}

/// The arguments of a call about one task.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct TaskParams {
    /// The task's id (ORIGIN-SEQ, as task_submit returned it).
    pub id: String,
}

/// `task_logs`' arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct LogsParams {
    /// The task's id.
    pub id: String,
    /// The byte of stdout to start at (default 0): the previous answer's stdout.next_offset.
    pub stdout_offset: Option<u64>,
    /// The byte of stderr to start at (default 0): the previous answer's stderr.next_offset.
    pub stderr_offset: Option<u64>,
    /// The most bytes returned of each stream (default 65536, most 1048576).
    pub max_bytes: Option<usize>,
}

#[tool_router]
impl Chorus {
    /// A server asking the node at `addr`.
    pub fn new(addr: String) -> Chorus {
        Chorus {
            addr,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Create a live sandbox: a container kept across calls (files persist \
        between commands), without network, on a worker of the cluster. Returns its id (give it \
        to every other sandbox_* tool), the worker that holds it, and when it ends: after \
        idle_timeout_s without a call (default 600 s) or at its deadline (lifetime, default 4 \
        h), whichever comes first. Close it with sandbox_close when done. At most 8 live \
        sandboxes per token.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_create(&self, Parameters(p): Parameters<CreateParams>) -> CallToolResult {
        self.answer("sandbox_create", self.create(p)).await
    }

    #[tool(
        description = "Run a command in a live sandbox and wait for it: returns exit_code (null \
        if it was killed at its timeout: timed_out true), stdout, stderr and duration_ms. Give \
        `argv` (no shell) or `shell` (an sh script). Each of stdout and stderr is cut to \
        max_output_bytes (default 64 KiB) by keeping its start and end; a note says how many \
        bytes were cut — pipe long output through `tail`, or into a file and read it in parts. \
        A non-zero exit code is a result, not an error. Timeout: timeout_s (default 600, most \
        3600). With background true it returns at once with the pid and a log path.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_exec(&self, Parameters(p): Parameters<ExecParams>) -> CallToolResult {
        self.answer("sandbox_exec", self.exec(p)).await
    }

    #[tool(
        description = "Write a file in a live sandbox (an absolute path; parent directories are \
        made, an existing file replaced). content is the text, or with encoding \"base64\" the \
        bytes in base64. mode: octal permission bits, e.g. \"755\" (default \"644\"). Returns the \
        path and size in bytes. Files up to 64 MiB.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true
        )
    )]
    async fn sandbox_write_file(&self, Parameters(p): Parameters<WriteParams>) -> CallToolResult {
        self.answer("sandbox_write_file", self.write_file(p)).await
    }

    #[tool(
        description = "Read a file of a live sandbox (an absolute path). Returns content: the \
        text when the file is UTF-8 (encoding \"utf8\"), else its bytes in base64 (encoding \
        \"base64\"); at most max_bytes (default 64 KiB, most 1 MiB) from offset. size is the \
        file's whole size; when more is left, next_offset says where to read on. Files up to \
        4 MiB can be read.",
        annotations(read_only_hint = true)
    )]
    async fn sandbox_read_file(&self, Parameters(p): Parameters<ReadParams>) -> CallToolResult {
        self.answer("sandbox_read_file", self.read_file(p)).await
    }

    #[tool(
        description = "List a directory of a live sandbox (`ls -la`, or `ls -laR` with \
        recursive): names, sizes, permissions, times, as text. Default path: /workspace. \
        Cut to 64 KiB with a note.",
        annotations(read_only_hint = true)
    )]
    async fn sandbox_list_files(
        &self,
        Parameters(p): Parameters<ListFilesParams>,
    ) -> CallToolResult {
        self.answer("sandbox_list_files", self.list_files(p)).await
    }

    #[tool(
        description = "Close a live sandbox: its container and files are removed at once (a \
        read-write repository is synced back first: `sync` says what came back). Closing frees \
        one of the token's 8 sandboxes.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true
        )
    )]
    async fn sandbox_close(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        self.answer("sandbox_close", self.close(p)).await
    }

    #[tool(
        description = "Carry the files of a sandbox made with repo \"NAME:rw\" back to the \
        repository on its worker now: changed and new files written, deleted ones deleted, \
        nothing under .git (commits stay in the sandbox). Returns how many were written and \
        deleted and the paths not carried (refused, kept); complete is true when everything \
        came back. sandbox_close does the same before it closes.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true
        )
    )]
    async fn sandbox_sync(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        self.answer("sandbox_sync", self.sync(p)).await
    }

    #[tool(
        description = "List this token's live sandboxes on every node of the cluster: id, \
        worker, seconds left before the idle timeout and before the end of the lifetime. Nodes \
        that could not be asked are named.",
        annotations(read_only_hint = true)
    )]
    async fn sandbox_list(&self) -> CallToolResult {
        self.answer("sandbox_list", self.list()).await
    }

    #[tool(
        description = "Submit a task: one command in a fresh sandbox on a worker the cluster \
        chooses, kept and retried by the cluster (unlike a live sandbox, nothing of it stays). \
        Give argv or shell. Returns the task id; with wait_s > 0 it waits up to that many \
        seconds for the result (status, exit_code, the last 8 KiB of stdout and stderr). Follow \
        a task with task_get and task_logs.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn task_submit(&self, Parameters(p): Parameters<SubmitParams>) -> CallToolResult {
        self.answer("task_submit", self.submit(p)).await
    }

    #[tool(
        description = "A task's state: phase (submitted, queued, placed, finished, done), the \
        worker, why it waits if it does, and once done its result: status (succeeded, failed, \
        timed_out, out_of_memory, cancelled, error, unschedulable), exit_code, duration_ms and \
        the last 8 KiB of stdout and stderr.",
        annotations(read_only_hint = true)
    )]
    async fn task_get(&self, Parameters(p): Parameters<TaskParams>) -> CallToolResult {
        self.answer("task_get", self.task(p)).await
    }

    #[tool(
        description = "A task's output so far, from the worker that runs or ran it: up to \
        max_bytes (default 64 KiB) of each of stdout and stderr from the offsets given. It \
        does not wait: call again with stdout_offset / stderr_offset set to the next_offset \
        returned to read on; a stream is whole when finished is true and next_offset equals \
        size.",
        annotations(read_only_hint = true)
    )]
    async fn task_logs(&self, Parameters(p): Parameters<LogsParams>) -> CallToolResult {
        self.answer("task_logs", self.logs(p)).await
    }

    #[tool(
        description = "The cluster's status as the node asked sees it: every node it knows, \
        whether it is connected, and each one's own view (role, term, admin, lease, electorate, \
        version), or why it could not be asked.",
        annotations(read_only_hint = true)
    )]
    async fn cluster_status(&self) -> CallToolResult {
        self.answer("cluster_status", self.status()).await
    }
}

#[tool_handler(router = self.tool_router, name = "chorus", instructions = "Tools of a CHORUS cluster: live sandboxes (Docker containers kept across calls, without network) to write files in, run commands in and read results from; and one-shot tasks. A typical loop: sandbox_create, sandbox_write_file, sandbox_exec (read exit_code, stdout, stderr), fix, sandbox_exec again, sandbox_close. A sandbox closes itself after its idle timeout (10 min by default) and at the end of its lifetime; an error that says it is gone (lost, closed, expired) means make a new one.")]
impl ServerHandler for Chorus {}

impl Chorus {
    /// Runs one tool's work: its answer as JSON, or its failure as a tool error with a plain
    /// reason; the token taken out of either; one log line (no arguments, no output).
    async fn answer(
        &self,
        tool: &str,
        work: impl Future<Output = anyhow::Result<Value>>,
    ) -> CallToolResult {
        let start = Instant::now();
        let result = work.await;
        let ms = start.elapsed().as_millis() as u64;
        match result {
            Ok(value) => {
                tracing::info!(tool, ms, "chorus mcp: call answered");
                CallToolResult::structured(redact_value(value))
            }
            Err(e) => {
                let reason = redact(&reason_of(&e));
                tracing::info!(tool, ms, reason = %reason, "chorus mcp: call failed");
                CallToolResult::error(vec![ContentBlock::text(reason)])
            }
        }
    }

    /// A sandbox call through the node asked, bounded by `wait`.
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        wait: Duration,
    ) -> anyhow::Result<super::http::RawAnswer> {
        let sent = live::answer(&self.addr, method, path, body);
        match tokio::time::timeout(wait, sent).await {
            Ok(answer) => answer,
            Err(_) => anyhow::bail!(
                "no answer from the chorus node at {} within {} s",
                self.addr,
                wait.as_secs()
            ),
        }
    }

    /// A sandbox call's answer as JSON.
    async fn call_json(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        wait: Duration,
    ) -> anyhow::Result<Value> {
        let answer = self.call(method, path, body, wait).await?;
        serde_json::from_slice(&answer.body).with_context(|| {
            format!(
                "the node at {} answered something that is not JSON",
                self.addr
            )
        })
    }

    async fn create(&self, p: CreateParams) -> anyhow::Result<Value> {
        let cpu_millis = match p.cpus {
            None => 0,
            Some(c) => cpus_to_millis(c).context("cpus: a positive number of CPUs")?,
        };
        let body = json!({
            "image": p.image,
            "env": p.env.unwrap_or_default(),
            "idle_timeout_ms": p.idle_timeout_s.map(|s| s.saturating_mul(1000)),
            "lifetime_ms": p.lifetime_s.map(|s| s.saturating_mul(1000)),
            "key": p.key,
            "memory_mb": p.memory_mb.unwrap_or(0),
            "cpu_millis": cpu_millis,
            "pids": p.pids.unwrap_or(0),
            "network": p.network.unwrap_or(false),
            "repo": p
                .repo
                .as_deref()
                .map(super::taskfile::parse_repo)
                .transpose()
                .map_err(|e| anyhow::anyhow!("repo: {e}"))?,
        });
        let answer = self
            .call("POST", "/sandboxes", Some(&body), CALL_WAIT)
            .await?;
        let made: Value = serde_json::from_slice(&answer.body)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let secs = |k: &str| made[k].as_u64().unwrap_or(0) / 1000;
        Ok(json!({
            "id": made["id"],
            "worker": made["worker"],
            "new": answer.code == 201,
            "idle_timeout_left_s": secs("idle_left_ms"),
            "lifetime_left_s": secs("lifetime_left_ms"),
            "deadline_unix": now + secs("lifetime_left_ms"),
            "note": "it ends after idle_timeout_left_s without a call (each call starts that \
                     again) or at deadline_unix, whichever comes first",
        }))
    }

    async fn exec(&self, p: ExecParams) -> anyhow::Result<Value> {
        let argv = match (p.argv, p.shell) {
            (Some(argv), None) if !argv.is_empty() => argv,
            (None, Some(script)) => vec!["sh".into(), "-c".into(), script],
            _ => anyhow::bail!("refused: give one of argv (a non-empty list) and shell (a script)"),
        };
        let timeout_s = p.timeout_s.unwrap_or(DEFAULT_EXEC_TIMEOUT_S);
        if timeout_s == 0 || timeout_s > MAX_EXEC_TIMEOUT_S {
            anyhow::bail!("refused: timeout_s: 1 to {MAX_EXEC_TIMEOUT_S} seconds");
        }
        let limit = output_limit(p.max_output_bytes);
        let body = json!({
            "argv": argv,
            "cwd": p.cwd,
            "env": p.env.unwrap_or_default(),
            "stdin": p.stdin,
            "timeout_ms": timeout_s * 1000,
            "background": p.background,
        });
        let path = format!("{}/exec", live::id_path(&p.id)?);
        let wait = Duration::from_secs(timeout_s) + EXEC_MARGIN;
        let out = self.call_json("POST", &path, Some(&body), wait).await?;
        if p.background {
            return Ok(json!({
                "pid": out["pid"],
                "log": out["log"],
                "note": "started in the background; its stdout and stderr go to the log file \
                         (read it with sandbox_read_file); stop it with sandbox_exec `kill PID`",
            }));
        }
        Ok(exec_result(&out, limit, timeout_s))
    }

    async fn write_file(&self, p: WriteParams) -> anyhow::Result<Value> {
        let mode = match &p.mode {
            None => None,
            Some(m) => Some(
                u32::from_str_radix(m.trim_start_matches("0o"), 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .with_context(|| {
                        format!("refused: mode {m:?} is not octal bits like \"644\"")
                    })?,
            ),
        };
        let mut body = json!({ "path": p.path, "mode": mode });
        match p.encoding {
            Encoding::Utf8 => body["content"] = Value::String(p.content),
            Encoding::Base64 => body["content_b64"] = Value::String(p.content),
        }
        let path = format!("{}/files", live::id_path(&p.id)?);
        self.call_json("PUT", &path, Some(&body), CALL_WAIT).await
    }

    async fn read_file(&self, p: ReadParams) -> anyhow::Result<Value> {
        let query = format!(
            "{}/files?path={}",
            live::id_path(&p.id)?,
            live::percent_encode(&p.path)
        );
        let answer = self.call("GET", &query, None, CALL_WAIT).await?;
        let declared: Option<usize> = answer.header("content-length").and_then(|n| n.parse().ok());
        if declared.is_some_and(|n| n > answer.body.len()) {
            anyhow::bail!(
                "the file {} is {} bytes: more than this server reads of a file (4 MiB); read \
                 parts of it with sandbox_exec (e.g. `head -c`, `tail -c`, `split`)",
                p.path,
                declared.unwrap_or_default()
            );
        }
        let part = file_part(
            &answer.body,
            p.offset.unwrap_or(0),
            output_limit(p.max_bytes),
        );
        let mut out = json!({
            "path": p.path,
            "size": answer.body.len(),
            "offset": part.offset,
            "encoding": if part.base64 { "base64" } else { "utf8" },
            "content": part.content,
        });
        if part.next_offset < answer.body.len() {
            out["next_offset"] = json!(part.next_offset);
            out["note"] = json!(format!(
                "only bytes {} to {} of {} are here; read on from next_offset",
                part.offset,
                part.next_offset,
                answer.body.len()
            ));
        }
        Ok(out)
    }

    async fn list_files(&self, p: ListFilesParams) -> anyhow::Result<Value> {
        let dir = p.path.unwrap_or_else(|| "/workspace".into());
        let flags = if p.recursive { "-laR" } else { "-la" };
        let body = json!({ "argv": ["ls", flags, "--", &dir], "timeout_ms": 30_000 });
        let path = format!("{}/exec", live::id_path(&p.id)?);
        let out = self
            .call_json("POST", &path, Some(&body), CALL_WAIT)
            .await?;
        if out["exit_code"].as_i64() != Some(0) {
            let err = out["stderr"].as_str().unwrap_or_default().trim();
            anyhow::bail!("cannot list {dir}: {}", cut_middle(err, OUTPUT_LIMIT).0);
        }
        let (listing, cut) = cut_middle(out["stdout"].as_str().unwrap_or_default(), OUTPUT_LIMIT);
        let mut answer = json!({ "path": dir, "listing": listing });
        if cut > 0 {
            answer["note"] = json!(format!(
                "the listing was cut to {OUTPUT_LIMIT} bytes: {cut} bytes in its middle were \
                 left out; list a smaller directory"
            ));
        }
        Ok(answer)
    }

    async fn close(&self, p: IdParams) -> anyhow::Result<Value> {
        let path = live::id_path(&p.id)?;
        self.call_json("DELETE", &path, None, SYNC_WAIT).await
    }

    async fn sync(&self, p: IdParams) -> anyhow::Result<Value> {
        let path = format!("{}/sync", live::id_path(&p.id)?);
        self.call_json("POST", &path, Some(&json!({})), SYNC_WAIT)
            .await
    }

    async fn list(&self) -> anyhow::Result<Value> {
        let known = members(&self.addr)
            .await
            .with_context(|| format!("cannot ask the node at {} whom it knows", self.addr))?;
        let mut seen = BTreeMap::new();
        let mut not_asked = Vec::new();
        for (node, peer) in known {
            let Some(peer) = peer else {
                not_asked.push(json!({ "node": node, "why": "not reachable from the node asked" }));
                continue;
            };
            let asked = request_peer(&peer, "GET", "/sandboxes", None, true);
            let why = match tokio::time::timeout(LIST_WAIT, asked).await {
                Ok(Ok(a)) if a.code == 200 => {
                    let v: Value = serde_json::from_slice(&a.body).unwrap_or_default();
                    for s in v["sandboxes"].as_array().into_iter().flatten() {
                        let id = s["id"].as_str().unwrap_or_default().to_owned();
                        // Its worker's entry (times left) over its node of record's (where).
                        let held = s["state"].as_str().is_none_or(|st| st == "live");
                        if !held && seen.contains_key(&id) {
                            continue;
                        }
                        let left = |k: &str| s[k].as_u64().map(|ms| ms / 1000);
                        seen.insert(
                            id.clone(),
                            json!({
                                "id": id,
                                "worker": s["worker"],
                                "state": s["state"],
                                "idle_timeout_left_s": left("idle_left_ms"),
                                "lifetime_left_s": left("lifetime_left_ms"),
                            }),
                        );
                    }
                    continue;
                }
                Ok(Ok(a)) => Refusal::of(&peer.http, &a).to_string(),
                Ok(Err(e)) => one_line(&e),
                Err(_) => format!("no answer within {} s", LIST_WAIT.as_secs()),
            };
            not_asked.push(json!({ "node": node, "why": why }));
        }
        let mut out = json!({ "sandboxes": seen.into_values().collect::<Vec<_>>() });
        if !not_asked.is_empty() {
            out["nodes_not_listed"] = Value::Array(not_asked);
        }
        Ok(out)
    }

    async fn submit(&self, p: SubmitParams) -> anyhow::Result<Value> {
        let command = match (p.argv, p.shell) {
            (Some(argv), None) if !argv.is_empty() => argv,
            (None, Some(script)) => vec!["sh".into(), "-c".into(), script],
            _ => anyhow::bail!("refused: give one of argv (a non-empty list) and shell (a script)"),
        };
        let timeout_ms = match p.timeout_s {
            None => super::task::DEFAULT_TIMEOUT_MS,
            Some(t) => seconds_to_ms(t).context("refused: timeout_s: a positive number")?,
        };
        let cpu_millis = match p.cpus {
            None => 0,
            Some(c) => cpus_to_millis(c).context("refused: cpus: a positive number of CPUs")?,
        };
        let wait_s = p.wait_s.unwrap_or(0);
        if wait_s > MAX_EXEC_TIMEOUT_S {
            anyhow::bail!("refused: wait_s: at most {MAX_EXEC_TIMEOUT_S} seconds");
        }
        let spec = chorus_core::TaskSpec {
            image: p
                .image
                .unwrap_or_else(|| chorus_io::sandbox::image::SANDBOX_IMAGE.into()),
            command,
            env: p.env.unwrap_or_default(),
            workdir: p.workdir,
            timeout_ms,
            memory_mb: p.memory_mb.unwrap_or(0),
            cpu_millis,
            pids: p.pids.unwrap_or(0),
            network: p.network,
            requires: p.requires.unwrap_or_default(),
            repo: None,
            submitter: None,
            live: false,
            idle_ms: 0,
        };
        let mut body = serde_json::to_value(&spec)?;
        if let Some(k) = p.key {
            body["key"] = Value::String(k);
        }
        let body = body.to_string();
        let sent = request(&self.addr, "POST", "/tasks", Some(&body));
        let (code, text) = tokio::time::timeout(CALL_WAIT, sent)
            .await
            .map_err(|_| anyhow::anyhow!("no answer from the node at {}", self.addr))?
            .with_context(|| format!("cannot reach a chorus node at {}", self.addr))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let id = match (code, value["task"].as_str()) {
            (200 | 201, Some(id)) => id.to_owned(),
            _ => return Err(refusal(&self.addr, code, value, &text).into()),
        };
        let give_up = Instant::now() + Duration::from_secs(wait_s);
        let mut pause = Duration::from_millis(100);
        loop {
            if Instant::now() >= give_up {
                return Ok(json!({
                    "task": id,
                    "note": if wait_s == 0 { "submitted; follow it with task_get and task_logs".to_owned() }
                            else { format!("no result within {wait_s} s; it goes on: follow it with task_get and task_logs") },
                }));
            }
            let view = tokio::time::timeout(CALL_WAIT, logs::view(&self.addr, &id))
                .await
                .map_err(|_| anyhow::anyhow!("no answer from the node at {}", self.addr))??;
            if view.result.is_some() {
                return Ok(task_json(&serde_json::to_value(&view)?, OUTPUT_LIMIT));
            }
            tokio::time::sleep(pause.min(give_up.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    async fn task(&self, p: TaskParams) -> anyhow::Result<Value> {
        let path = format!("/tasks/{}", task_id(&p.id)?);
        let a = tokio::time::timeout(CALL_WAIT, at_owner(&self.addr, "GET", &path))
            .await
            .map_err(|_| anyhow::anyhow!("no answer from the node at {}", self.addr))??;
        if a.code == 200 {
            return Ok(task_json(&a.value, OUTPUT_LIMIT));
        }
        if a.code == 404 && a.value["owner_connected"] == false {
            // Its node is out of reach: what the worker holding its result, or the admin,
            // knows of it.
            let owner = a.value["owner"].clone();
            let found = whereabouts(&self.addr, &p.id).await;
            if let Some((worker, result)) = found.held {
                let mut r = serde_json::to_value(result)?;
                cut_result(&mut r, OUTPUT_LIMIT);
                return Ok(json!({
                    "task": p.id, "owner": owner, "held_by": worker, "result": r,
                    "note": "its node is out of reach; this worker holds its result until it is back",
                }));
            }
            if let Some((admin, view)) = found.at_admin {
                return Ok(json!({
                    "task": p.id, "owner": owner, "admin": admin, "at_admin": view,
                    "note": "its node is out of reach; this is what the admin knows of it",
                }));
            }
        }
        Err(refusal(&a.addr, a.code, a.value, &a.body).into())
    }

    async fn logs(&self, p: LogsParams) -> anyhow::Result<Value> {
        let id = task_id(&p.id)?;
        let limit = output_limit(p.max_bytes);
        let view = tokio::time::timeout(CALL_WAIT, logs::view(&self.addr, id))
            .await
            .map_err(|_| anyhow::anyhow!("no answer from the node at {}", self.addr))??;
        let Some(run) = logs::run_of(&view) else {
            return Ok(json!({
                "task": id, "phase": view.phase,
                "note": format!("it has not run yet (it is {}); no output", view.phase),
            }));
        };
        let Some(http) = http_of(&self.addr, &run.worker).await else {
            anyhow::bail!(
                "unreachable: the output of task {id} is on worker {}, which the node at {} does \
                 not reach now; task_get shows its result's tails once it is done",
                run.worker,
                self.addr
            );
        };
        let mut out = json!({
            "task": id, "phase": view.phase, "worker": run.worker, "run": run.attempt,
        });
        use chorus_io::sandbox::OutputStream;
        for (stream, offset) in [
            (OutputStream::Stdout, p.stdout_offset.unwrap_or(0)),
            (OutputStream::Stderr, p.stderr_offset.unwrap_or(0)),
        ] {
            let a = logs::read(&http, id, run.attempt, stream, offset, false).await?;
            if a.code != 200 {
                return Err(Refusal::of(&http.http, &a).into());
            }
            let size: u64 = a
                .header("chorus-log-size")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let taken = utf8_prefix(&a.body, limit);
            let next = offset + taken as u64;
            let mut part = json!({
                "text": String::from_utf8_lossy(&a.body[..taken]),
                "offset": offset,
                "next_offset": next,
                "size": size,
                "finished": a.header("chorus-log-finished") == Some("true"),
            });
            if next < size {
                part["note"] = json!(format!(
                    "{} bytes more are kept: read on from next_offset",
                    size - next
                ));
            }
            if let Some(cut) = logs::cut_statement(stream, &a) {
                part["cut"] = json!(cut);
            }
            out[stream.name()] = part;
        }
        Ok(out)
    }

    async fn status(&self) -> anyhow::Result<Value> {
        let sent = request(&self.addr, "GET", "/cluster/status", None);
        let (code, text) = tokio::time::timeout(CALL_WAIT, sent)
            .await
            .map_err(|_| anyhow::anyhow!("no answer from the node at {}", self.addr))?
            .with_context(|| format!("cannot reach a chorus node at {}", self.addr))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if code != 200 {
            return Err(refusal(&self.addr, code, value, &text).into());
        }
        Ok(value)
    }
}

/// A task id as it may go into a path.
fn task_id(id: &str) -> anyhow::Result<&str> {
    let fits = !id.is_empty()
        && id.len() <= 256
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    anyhow::ensure!(fits, "{id:?} is not a task id");
    Ok(id)
}

/// A node's answer other than the one hoped for, as a [`Refusal`].
fn refusal(addr: &str, code: u16, body: Value, text: &str) -> Refusal {
    Refusal {
        addr: addr.to_owned(),
        code,
        body,
        text: text.trim().to_owned(),
    }
}

/// A bound asked for, or the default, within [`MAX_OUTPUT_LIMIT`].
fn output_limit(asked: Option<usize>) -> usize {
    asked.unwrap_or(OUTPUT_LIMIT).clamp(1, MAX_OUTPUT_LIMIT)
}

/// The plain reason a tool's failure is told with: a node's refusal in words an agent acts on
/// (see [`refusal_reason`]), anything else on one line.
pub fn reason_of(e: &anyhow::Error) -> String {
    match e.downcast_ref::<Refusal>() {
        Some(r) => refusal_reason(r),
        None => one_line(e),
    }
}

/// A node's refusal in plain words: what happened, with the node's own reason.
pub fn refusal_reason(r: &Refusal) -> String {
    let why = r.why();
    match r.code {
        410 => {
            let gone = &r.body["gone"];
            let detail = gone["detail"].as_str().unwrap_or(why);
            let kind =
                gone["reason"]
                    .as_str()
                    .unwrap_or(if why.contains("lost") { "lost" } else { "" });
            match kind {
                "lost" => format!(
                    "the sandbox's worker was lost ({detail}): the sandbox and its files are \
                     gone; create a new sandbox"
                ),
                "closed" => format!("the sandbox was closed ({detail}); create a new sandbox"),
                "idle" => "the sandbox expired: it was idle for longer than its idle timeout; \
                           create a new sandbox"
                    .to_owned(),
                "expired" => "the sandbox expired: it reached the end of its lifetime; create \
                              a new sandbox"
                    .to_owned(),
                "failed" => {
                    format!("the sandbox could not be made ({detail}); create a new sandbox")
                }
                _ => format!("gone: {why}"),
            }
        }
        404 => format!(
            "not found: {why} (one made with another token looks the same: each token sees \
             only its own)"
        ),
        503 if why.contains("not connected") || why.contains("did not answer") => format!(
            "the sandbox's worker is unreachable — {why}. If it is down, the sandbox is lost \
             with it; if it is only cut off from the node asked ({}), try again later",
            r.addr
        ),
        503 => format!("unavailable: {why}"),
        429 => match r.body["reason"].as_str() {
            Some(limit) => format!("refused by a limit ({limit}): {why}"),
            None => format!("refused by a limit: {why}"),
        },
        401 | 403 => format!(
            "refused: {why} (the token chorus mcp was started with — CHORUS_TOKEN — may not do \
             this; an agent needs a submit token)"
        ),
        400 | 422 => format!("refused: {why}"),
        504 => format!("timed out: {why}"),
        code => format!("{} answered {code}: {why}", r.addr),
    }
}

/// `text` within `limit` bytes: whole when it fits, else its start and its end (split at
/// character boundaries) around a line saying how many bytes were cut there; and that count.
pub fn cut_middle(text: &str, limit: usize) -> (String, usize) {
    if text.len() <= limit {
        return (text.to_owned(), 0);
    }
    let mut head = limit / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (limit - limit / 2);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let cut = tail - head;
    let kept = format!(
        "{}\n[... {cut} bytes cut here by chorus mcp ...]\n{}",
        &text[..head],
        &text[tail..]
    );
    (kept, cut)
}

/// How many bytes of `bytes` to take, at most `limit`, not ending inside a UTF-8 character
/// (unless the bytes are not UTF-8 there anyway).
fn utf8_prefix(bytes: &[u8], limit: usize) -> usize {
    if bytes.len() <= limit {
        return bytes.len();
    }
    // A character is at most 4 bytes: back off over continuation bytes (0b10xxxxxx).
    let mut end = limit;
    while end > 0 && limit - end < 3 && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    if end == 0 {
        limit
    } else {
        end
    }
}

/// A part of a file as a tool returns it.
#[derive(Debug, PartialEq, Eq)]
pub struct FilePart {
    /// Where it starts.
    pub offset: usize,
    /// Where the next part starts (the file's size when this is its end).
    pub next_offset: usize,
    /// Its bytes in base64 (the file is not UTF-8), else its text.
    pub base64: bool,
    pub content: String,
}

/// At most `limit` bytes of `data` from `offset`: text when the whole file is UTF-8 (the part
/// starting and ending at character boundaries), else base64.
pub fn file_part(data: &[u8], offset: usize, limit: usize) -> FilePart {
    let start = offset.min(data.len());
    match std::str::from_utf8(data) {
        Ok(text) => {
            let mut start = start;
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + limit).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            if end == start && start < text.len() {
                // A limit smaller than one character: that character whole.
                end = start + 1;
                while !text.is_char_boundary(end) {
                    end += 1;
                }
            }
            FilePart {
                offset: start,
                next_offset: end,
                base64: false,
                content: text[start..end].to_owned(),
            }
        }
        Err(_) => {
            let end = (start + limit).min(data.len());
            FilePart {
                offset: start,
                next_offset: end,
                base64: true,
                content: base64::engine::general_purpose::STANDARD.encode(&data[start..end]),
            }
        }
    }
}

/// An exec's answer as the tool returns it: each stream cut to `limit`, every cut and ending
/// said in `notes`.
pub fn exec_result(out: &Value, limit: usize, timeout_s: u64) -> Value {
    let mut notes = Vec::new();
    let mut answer = json!({
        "exit_code": out["exit_code"],
        "duration_ms": out["duration_ms"],
    });
    for name in ["stdout", "stderr"] {
        let (text, cut) = cut_middle(out[name].as_str().unwrap_or_default(), limit);
        answer[name] = Value::String(text);
        if cut > 0 {
            answer[format!("{name}_cut_bytes")] = json!(cut);
            notes.push(format!(
                "{name} was cut to {limit} bytes: {cut} bytes in its middle were left out (its \
                 start and end are kept); send long output to a file and read it in parts"
            ));
        }
        if out[format!("{name}_truncated")] == true {
            notes.push(format!(
                "{name}: the sandbox keeps only the first 1 MiB of a command's output; the rest \
                 was not kept"
            ));
        }
    }
    if out["timed_out"] == true {
        answer["timed_out"] = json!(true);
        notes.push(format!(
            "the command ran past its timeout ({timeout_s} s) and was killed: no exit code"
        ));
    }
    if out["oom"] == true {
        answer["out_of_memory"] = json!(true);
        notes.push("the command ran out of memory: the kernel killed it at its limit".into());
    }
    if !notes.is_empty() {
        answer["notes"] = json!(notes);
    }
    answer
}

/// A task's document with its result's output tails cut to `limit`.
fn task_json(view: &Value, limit: usize) -> Value {
    let mut view = view.clone();
    if let Some(r) = view.get_mut("result").filter(|r| r.is_object()) {
        cut_result(r, limit);
    }
    view
}

/// A result's stdout and stderr cut to `limit`, with notes.
fn cut_result(r: &mut Value, limit: usize) {
    let mut notes = Vec::new();
    for name in ["stdout", "stderr"] {
        let (text, cut) = cut_middle(r[name].as_str().unwrap_or_default(), limit);
        r[name] = Value::String(text);
        if cut > 0 {
            notes.push(format!("{name}: {cut} bytes in its middle were cut here"));
        }
        let earlier = r[format!("{name}_truncated_bytes")].as_u64().unwrap_or(0);
        if earlier > 0 {
            notes.push(format!(
                "{name}: only its last part is kept in the result; {earlier} earlier bytes were \
                 cut (task_logs reads the whole output)"
            ));
        }
    }
    if !notes.is_empty() {
        r["notes"] = json!(notes);
    }
}

/// `value` with [`redact`] over every string in it (keys too).
pub fn redact_value(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(redact(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(redact_value).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (redact(&k), redact_value(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, body: Value) -> Refusal {
        Refusal {
            addr: "127.0.0.1:7070".into(),
            code,
            text: body.to_string(),
            body,
        }
    }

    #[test]
    fn output_within_the_bound_is_whole_and_past_it_keeps_start_and_end() {
        assert_eq!(cut_middle("abc", 3), ("abc".into(), 0));
        let text = format!("{}{}", "a".repeat(100), "z".repeat(100));
        let (kept, cut) = cut_middle(&text, 20);
        assert_eq!(cut, 180);
        assert!(kept.starts_with(&"a".repeat(10)), "{kept}");
        assert!(kept.ends_with(&"z".repeat(10)), "{kept}");
        assert!(kept.contains("[... 180 bytes cut here by chorus mcp ...]"));
        // Characters are never split: the head ends before, the tail starts after one.
        let text = "é".repeat(50); // 100 bytes, 2 each
        let (kept, cut) = cut_middle(&text, 11);
        assert_eq!(kept.matches('é').count() * 2 + cut, 100);
        assert!(kept.starts_with("éé\n["), "{kept}");
        // Counted: every byte is either kept or said cut.
        let (kept, cut) = cut_middle(&"x".repeat(OUTPUT_LIMIT * 3), OUTPUT_LIMIT);
        assert_eq!(kept.matches('x').count(), OUTPUT_LIMIT);
        assert_eq!(cut, OUTPUT_LIMIT * 2);
    }

    #[test]
    fn an_exec_answer_says_each_cut_and_ending() {
        let out = json!({
            "exit_code": 3, "duration_ms": 12,
            "stdout": "o".repeat(100), "stderr": "short",
            "stdout_truncated": true, "stderr_truncated": false,
        });
        let a = exec_result(&out, 40, 600);
        assert_eq!(a["exit_code"], 3);
        assert_eq!(a["stdout_cut_bytes"], 60);
        assert_eq!(a["stderr"], "short");
        assert!(a.get("stderr_cut_bytes").is_none());
        let notes = a["notes"].to_string();
        assert!(
            notes.contains("stdout was cut to 40 bytes: 60 bytes"),
            "{notes}"
        );
        assert!(notes.contains("first 1 MiB"), "{notes}");
        let timed_out = json!({ "exit_code": null, "timed_out": true, "signal": 9 });
        let a = exec_result(&timed_out, 40, 5);
        assert_eq!(a["timed_out"], true);
        assert!(a["exit_code"].is_null());
        assert!(a["notes"][0].as_str().unwrap().contains("timeout (5 s)"));
        let a = exec_result(
            &json!({ "exit_code": 0, "stdout": "", "stderr": "" }),
            40,
            5,
        );
        assert!(a.get("notes").is_none(), "{a}");
    }

    #[test]
    fn a_file_is_text_when_utf8_else_base64_and_read_in_parts() {
        let p = file_part(b"hello world", 0, 5);
        assert_eq!(
            (p.content.as_str(), p.next_offset, p.base64),
            ("hello", 5, false)
        );
        let p = file_part(b"hello world", 5, 100);
        assert_eq!((p.content.as_str(), p.next_offset), (" world", 11));
        let p = file_part(b"hi", 10, 5);
        assert_eq!((p.offset, p.next_offset, p.content.as_str()), (2, 2, ""));
        // UTF-8 parts start and end at characters.
        let text = "aé€b".as_bytes(); // 1 + 2 + 3 + 1
        let p = file_part(text, 0, 4);
        assert_eq!((p.content.as_str(), p.next_offset), ("aé", 3));
        let p = file_part(text, 2, 4); // inside é: from its start
        assert_eq!((p.offset, p.content.as_str()), (1, "é"));
        let p = file_part(text, 3, 1); // a limit under one character: that character
        assert_eq!(p.content, "€");
        // Not UTF-8: base64 of the bytes asked for.
        let p = file_part(&[0xff, 0x00, 0x01, 0x02], 1, 2);
        assert!(p.base64);
        assert_eq!(p.content, "AAE=");
        assert_eq!(p.next_offset, 3);
        assert_eq!(utf8_prefix("aé".as_bytes(), 2), 1);
        assert_eq!(utf8_prefix(b"abc", 2), 2);
    }

    #[test]
    fn refusals_are_told_in_plain_words_with_the_nodes_reason() {
        let lost = refused(
            410,
            json!({ "error": "the sandbox is gone: lost, its node n2 is down (connection refused)",
                    "gone": { "reason": "lost", "detail": "node n2 is down" } }),
        );
        let text = refusal_reason(&lost);
        assert!(
            text.starts_with("the sandbox's worker was lost (node n2 is down)"),
            "{text}"
        );
        // A restarted node's own answer has no `gone`: its words say lost.
        let restarted = refused(
            410,
            json!({ "error": "the sandbox is gone: lost, its node restarted since it was made" }),
        );
        assert!(refusal_reason(&restarted).contains("worker was lost"));
        for (kind, words) in [
            ("expired", "reached the end of its lifetime"),
            ("idle", "idle for longer than its idle timeout"),
            ("closed", "was closed"),
        ] {
            let r = refused(
                410,
                json!({ "error": "gone", "gone": { "reason": kind, "detail": "d" } }),
            );
            assert!(refusal_reason(&r).contains(words), "{kind}");
        }
        let limit = refused(
            429,
            json!({ "error": "8 live sandboxes per token", "reason": "per_owner" }),
        );
        assert_eq!(
            refusal_reason(&limit),
            "refused by a limit (per_owner): 8 live sandboxes per token"
        );
        let bad = refused(400, json!({ "error": "timeout_ms: 1 to 3600000" }));
        assert_eq!(refusal_reason(&bad), "refused: timeout_ms: 1 to 3600000");
        let cut_off = refused(
            503,
            json!({ "error": "the sandbox's node n2 is not connected" }),
        );
        assert!(refusal_reason(&cut_off)
            .starts_with("the sandbox's worker is unreachable — the sandbox's node n2"));
        let none = refused(503, json!({ "error": "this node runs no sandboxes" }));
        assert_eq!(
            refusal_reason(&none),
            "unavailable: this node runs no sandboxes"
        );
        let nobody = refused(404, json!({ "error": "no such sandbox" }));
        assert!(refusal_reason(&nobody).starts_with("not found: no such sandbox"));
        // A body that is not JSON is the reason as it came.
        let odd = Refusal {
            addr: "a:1".into(),
            code: 500,
            body: Value::Null,
            text: "boom".into(),
        };
        assert_eq!(refusal_reason(&odd), "a:1 answered 500: boom");
        // Through anyhow, as the tools see it; another error is its one line.
        assert!(reason_of(&lost.into()).contains("worker was lost"));
        let other = anyhow::anyhow!("io").context("cannot reach a chorus node at a:1");
        assert_eq!(reason_of(&other), "cannot reach a chorus node at a:1: io");
    }

    #[test]
    fn http_off_loopback_needs_the_public_flag() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let lo6: SocketAddr = "[::1]:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(check_http_address(lo, false).is_ok());
        assert!(check_http_address(lo6, false).is_ok());
        let why = check_http_address(any, false).unwrap_err();
        assert!(why.contains("no login of its own"), "{why}");
        assert!(why.contains("--http-public"), "{why}");
        assert!(check_http_address(any, true).is_ok());
    }

    #[test]
    fn every_tool_has_a_schema_and_a_description() {
        let tools = Chorus::new("127.0.0.1:1".into()).tool_router.list_all();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "cluster_status",
                "sandbox_close",
                "sandbox_create",
                "sandbox_exec",
                "sandbox_list",
                "sandbox_list_files",
                "sandbox_read_file",
                "sandbox_sync",
                "sandbox_write_file",
                "task_get",
                "task_logs",
                "task_submit",
            ]
        );
        for t in &tools {
            assert!(
                t.description.as_deref().is_some_and(|d| d.len() > 80),
                "{}",
                t.name
            );
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
        }
        let exec = tools.iter().find(|t| t.name == "sandbox_exec").unwrap();
        let props = exec.input_schema["properties"].as_object().unwrap();
        for field in ["id", "argv", "shell", "cwd", "env", "stdin", "timeout_s"] {
            assert!(props.contains_key(field), "sandbox_exec takes {field}");
        }
        assert!(props["timeout_s"]["description"]
            .as_str()
            .unwrap()
            .contains("default 600"));
    }
}
