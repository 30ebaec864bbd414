//! `chorus mcp` through an MCP client (issue 55): rmcp's client starts `chorus mcp` as an
//! agent's host would (a child process speaking MCP on stdio, the token in CHORUS_TOKEN) against
//! a three-node Docker cluster, and calls its tools as an agent would.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use chorus_tests::task_cluster::{token, TaskCluster};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use super::BIN;

/// One `chorus mcp` process and everything its tools answered.
struct Mcp {
    client: RunningService<RoleClient, ()>,
    /// Every answer, as the host received it (JSON), to look for the token in.
    answers: Vec<String>,
}

impl Mcp {
    /// `chorus mcp --addr 127.0.0.1:PORT` with `token` in its environment, its stderr (the log)
    /// into `log`.
    async fn start(http_port: u16, token: &str, log: &Path) -> Mcp {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["mcp", "--addr", &format!("127.0.0.1:{http_port}")])
            .env("CHORUS_TOKEN", token)
            .env("RUST_LOG", "info")
            .env_remove("CHORUS_TOKEN_FILE")
            .env_remove("CHORUS_ADDR");
        let log = std::fs::File::create(log).expect("the log file");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(log))
            .spawn()
            .expect("chorus mcp starts");
        let client = ().serve(transport).await.expect("the MCP handshake");
        Mcp {
            client,
            answers: Vec::new(),
        }
    }

    /// Calls `tool`: its answer, which must be a tool's answer (a protocol error fails).
    async fn call_result(&mut self, tool: &str, args: Value) -> CallToolResult {
        let params = CallToolRequestParams::new(tool.to_owned())
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        let result = self
            .client
            .call_tool(params)
            .await
            .unwrap_or_else(|e| panic!("{tool}: a protocol error, not a tool's answer: {e}"));
        self.answers
            .push(serde_json::to_string(&result).expect("an answer serializes"));
        result
    }

    /// Calls `tool`, which must succeed: its structured answer.
    async fn call(&mut self, tool: &str, args: Value) -> Value {
        let result = self.call_result(tool, args).await;
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
        let text = text_of(&result);
        result
            .structured_content
            .unwrap_or_else(|| panic!("{tool}: no structured answer: {text}"))
    }

    /// Calls `tool`, which must fail as a tool: its text.
    async fn call_error(&mut self, tool: &str, args: Value) -> String {
        let result = self.call_result(tool, args).await;
        assert_eq!(result.is_error, Some(true), "{tool}: {result:?}");
        text_of(&result)
    }
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 55's MCP part, done when: an MCP client lists the tools, creates a sandbox on a
/// three-node cluster, runs a command, writes and reads a file, and closes it; a killed worker
/// shows as a tool error that says so. Besides: long output is cut with a note, a refusal and a
/// closed sandbox are tool errors with the reason, tasks are submitted and followed, the list
/// spans nodes, and the token is in no answer and no log line — not even when a command prints
/// it.
#[test]
fn an_agent_uses_the_cluster_through_chorus_mcp() {
    let mut t = TaskCluster::start(BIN);
    let (_, _, admin) = t.c.wait_agreed(Duration::from_secs(30));
    // The node the agent's server asks, and the worker that will be killed.
    let via = (admin + 2) % 3;
    let worker = (admin + 1) % 3;
    let submit = token(&t.c, "submit");
    let logs = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut a = Mcp::start(
            t.c.nodes[via].http_port,
            &submit,
            &logs.path().join("a.log"),
        )
        .await;
        let tools = a.client.list_all_tools().await.expect("tools/list");
        let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
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

        // Made through the node asked (its id, its live task's, names it) on the worker the
        // admin placed it on (which the answer names).
        let made = a
            .call(
                "sandbox_create",
                json!({ "idle_timeout_s": 300, "key": "mcp-1" }),
            )
            .await;
        let id = made["id"].as_str().expect("an id").to_owned();
        assert!(id.starts_with(&t.ids[via]), "{made}");
        assert!(
            t.ids
                .contains(&made["worker"].as_str().unwrap_or_default().to_owned()),
            "{made}"
        );
        assert_eq!(made["new"], true, "{made}");
        assert!(
            made["deadline_unix"].as_u64().unwrap() > 1_700_000_000,
            "{made}"
        );
        // Retried as it was: the same sandbox.
        let again = a
            .call(
                "sandbox_create",
                json!({ "idle_timeout_s": 300, "key": "mcp-1" }),
            )
            .await;
        assert_eq!((&again["id"], &again["new"]), (&made["id"], &json!(false)));

        // A command: its output and exit code (a non-zero one is a result, not an error).
        let ran = a
            .call(
                "sandbox_exec",
                json!({ "id": id, "shell": "echo hello; echo oops >&2; exit 3" }),
            )
            .await;
        assert_eq!(ran["exit_code"], 3, "{ran}");
        assert_eq!(ran["stdout"], "hello\n", "{ran}");
        assert_eq!(ran["stderr"], "oops\n", "{ran}");
        assert!(ran["duration_ms"].is_u64(), "{ran}");
        let ran = a
            .call(
                "sandbox_exec",
                json!({ "id": id, "argv": ["sh", "-c", "cat; pwd"], "stdin": "in\n",
                        "cwd": "/tmp", "env": { "X": "1" } }),
            )
            .await;
        assert_eq!(ran["stdout"], "in\n/tmp\n", "{ran}");
        // Long output: cut to 64 KiB, start and end kept, the cut said.
        let ran = a
            .call(
                "sandbox_exec",
                json!({ "id": id, "shell": "head -c 200000 /dev/zero | tr '\\0' x; echo END" }),
            )
            .await;
        assert_eq!(
            ran["stdout_cut_bytes"],
            200_004 - 65_536,
            "{}",
            ran["notes"]
        );
        let stdout = ran["stdout"].as_str().unwrap();
        assert!(stdout.ends_with("xxEND\n") && stdout.starts_with("xxx"));
        assert!(ran["notes"][0]
            .as_str()
            .unwrap()
            .contains("cut to 65536 bytes"));
        // Even a command that prints the token shows none of it.
        let ran = a
            .call(
                "sandbox_exec",
                json!({ "id": id, "shell": "echo \"t=$T\"", "env": { "T": submit } }),
            )
            .await;
        assert_eq!(ran["stdout"], "t=[token]\n", "{ran}");
        // A refusal is a tool error with the reason.
        let why = a
            .call_error(
                "sandbox_exec",
                json!({ "id": id, "argv": ["true"], "shell": "true" }),
            )
            .await;
        assert!(why.starts_with("refused: give one of argv"), "{why}");
        let why = a
            .call_error(
                "sandbox_exec",
                json!({ "id": id, "argv": ["true"], "cwd": "rel" }),
            )
            .await;
        assert!(why.starts_with("refused: path: an absolute path"), "{why}");

        // Files: text back as text, bytes back as base64, listed.
        let wrote = a
            .call(
                "sandbox_write_file",
                json!({ "id": id, "path": "/workspace/app/hello.txt", "content": "grüße\n" }),
            )
            .await;
        assert_eq!(wrote["size"], 8, "{wrote}");
        let read = a
            .call(
                "sandbox_read_file",
                json!({ "id": id, "path": "/workspace/app/hello.txt" }),
            )
            .await;
        assert_eq!(
            (&read["content"], &read["encoding"], &read["size"]),
            (&json!("grüße\n"), &json!("utf8"), &json!(8)),
            "{read}"
        );
        a.call(
            "sandbox_write_file",
            json!({ "id": id, "path": "/workspace/app/run.sh", "content": "/wABAg==",
                    "encoding": "base64", "mode": "755" }),
        )
        .await;
        let read = a
            .call(
                "sandbox_read_file",
                json!({ "id": id, "path": "/workspace/app/run.sh", "offset": 1, "max_bytes": 2 }),
            )
            .await;
        assert_eq!(
            (&read["content"], &read["encoding"], &read["next_offset"]),
            (&json!("AAE="), &json!("base64"), &json!(3)),
            "{read}"
        );
        let listed = a
            .call(
                "sandbox_list_files",
                json!({ "id": id, "path": "/workspace/app" }),
            )
            .await;
        let listing = listed["listing"].as_str().unwrap();
        assert!(listing.contains("hello.txt"), "{listing}");
        assert!(
            listing.contains("-rwxr-xr-x") && listing.contains("run.sh"),
            "{listing}"
        );
        let why = a
            .call_error(
                "sandbox_read_file",
                json!({ "id": id, "path": "/workspace/none" }),
            )
            .await;
        assert!(!why.is_empty());

        // No repository in it: nothing to carry back, and the tool error says so.
        let why = a.call_error("sandbox_sync", json!({ "id": id })).await;
        assert!(why.contains("no read-write repository"), "{why}");

        let mine = a.call("sandbox_list", json!({})).await;
        assert!(mine.to_string().contains(&id), "{mine}");

        // Closed: the next call is a tool error that says so.
        let closed = a.call("sandbox_close", json!({ "id": id })).await;
        assert_eq!(closed["closed"], true, "{closed}");
        let why = a
            .call_error("sandbox_exec", json!({ "id": id, "argv": ["true"] }))
            .await;
        assert!(why.starts_with("the sandbox was closed"), "{why}");
        let why = a
            .call_error(
                "sandbox_exec",
                json!({ "id": format!("{}.nosuch-1", t.ids[via]), "argv": ["true"] }),
            )
            .await;
        assert!(
            why.contains("worker was lost") || why.starts_with("not found"),
            "{why}"
        );

        let status = a.call("cluster_status", json!({})).await;
        assert_eq!(
            status["nodes"].as_array().map(Vec::len),
            Some(3),
            "{status}"
        );

        // A task, submitted and waited for, then read again and its output read.
        let done = a
            .call(
                "task_submit",
                json!({ "shell": "echo task-out; echo task-err >&2", "wait_s": 120 }),
            )
            .await;
        assert_eq!(done["result"]["status"], "succeeded", "{done}");
        assert_eq!(done["result"]["stdout"], "task-out\n", "{done}");
        let task = done["task"].as_str().expect("a task id").to_owned();
        let got = a.call("task_get", json!({ "id": task })).await;
        assert_eq!(got["phase"], "done", "{got}");
        let out = a.call("task_logs", json!({ "id": task })).await;
        assert_eq!(out["stdout"]["text"], "task-out\n", "{out}");
        assert_eq!(out["stderr"]["text"], "task-err\n", "{out}");
        assert_eq!(out["stdout"]["finished"], true, "{out}");
        let why = a.call_error("task_get", json!({ "id": "nosuch-1" })).await;
        assert!(!why.is_empty());

        // A worker killed under its sandbox: made through a server asking that worker, used
        // through the first (another node, forwarded), then the worker is killed.
        let mut b = Mcp::start(
            t.c.nodes[worker].http_port,
            &submit,
            &logs.path().join("b.log"),
        )
        .await;
        // Placed by the admin on the least loaded worker: made again (the others kept, so
        // the next goes elsewhere) until it is placed on a node other than the first's.
        let mut there = b.call("sandbox_create", json!({})).await;
        for _ in 0..3 {
            if there["worker"] != t.ids[via] {
                break;
            }
            there = b.call("sandbox_create", json!({})).await;
        }
        let lost = there["id"].as_str().unwrap().to_owned();
        let worker = t.index_of(there["worker"].as_str().unwrap());
        assert_ne!(worker, via, "{there}");
        let ran = a
            .call(
                "sandbox_exec",
                json!({ "id": lost, "argv": ["echo", "there"] }),
            )
            .await;
        assert_eq!(ran["stdout"], "there\n", "{ran}");
        let mine = a.call("sandbox_list", json!({})).await;
        assert!(
            mine.to_string().contains(&lost),
            "the list spans the nodes: {mine}"
        );
        t.c.kill(worker);
        let why = a
            .call_error("sandbox_exec", json!({ "id": lost, "argv": ["true"] }))
            .await;
        eprintln!("the next exec after the worker's kill: {why}");
        assert!(
            why.starts_with("the sandbox's worker was lost")
                || (why.starts_with("the sandbox's worker is unreachable")
                    && why.contains(&t.ids[worker])),
            "{why}"
        );

        // The token: in no answer, and in no line of either server's log.
        for answer in a.answers.iter().chain(&b.answers) {
            assert!(
                !answer.contains(&submit),
                "the token in an answer: {answer}"
            );
        }
        b.client.cancel().await.ok();
        a.client.cancel().await.ok();
    });
    // Give the servers a moment to write their last lines.
    std::thread::sleep(Duration::from_millis(300));
    for name in ["a.log", "b.log"] {
        let log = std::fs::read_to_string(logs.path().join(name)).unwrap();
        assert!(log.contains("call answered"), "{name}: {log}");
        assert!(!log.contains(&submit), "the token in {name}");
    }
}

/// One HTTP/1.1 exchange on a new connection, read to its close (bounded): the status line and
/// headers, and the body (chunked framing left in: the test looks for text in it).
fn exchange(port: u16, session: Option<&str>, body: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the MCP endpoint");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let session = session.map_or(String::new(), |s| format!("Mcp-Session-Id: {s}\r\n"));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (head.to_owned(), body.to_owned())
}

/// `chorus mcp --http`: streamable HTTP on loopback — a session is initialized, its tools
/// listed, and a tool that cannot reach its node answers a tool error that says so (not a
/// protocol error); an address other machines may reach is refused unless `--http-public`.
#[test]
fn chorus_mcp_serves_streamable_http_on_loopback_only() {
    let refused = std::process::Command::new(BIN)
        .args(["mcp", "--http", "0.0.0.0:0", "--addr", "127.0.0.1:1"])
        .env("CHORUS_TOKEN", "x")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not a loopback address"),
        "{refused:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("mcp-http.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let server = chorus_tests::ChildGuard(Some(
        std::process::Command::new(BIN)
            .args(["mcp", "--http", "127.0.0.1:0", "--addr", "127.0.0.1:1"])
            .env("CHORUS_TOKEN", "chorus_v1_submit_not-a-real-token")
            .env_remove("CHORUS_ADDR")
            .stderr(log)
            .spawn()
            .unwrap(),
    ));
    let port: u16 =
        chorus_tests::wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
            let text = std::fs::read_to_string(&log_path).ok()?;
            let at = text.split("streamable HTTP at http://127.0.0.1:").nth(1)?;
            at.split('/').next()?.parse().ok()
        })
        .expect("chorus mcp --http says where it listens");

    let (head, body) = exchange(
        port,
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains(r#""serverInfo":{"name":"chorus""#), "{body}");
    let session = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l[15..].trim().to_owned())
        })
        .expect("a session id");
    let (head, _) = exchange(
        port,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    let (_, body) = exchange(
        port,
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
    );
    for tool in [
        "sandbox_create",
        "sandbox_exec",
        "task_submit",
        "cluster_status",
    ] {
        assert!(
            body.contains(&format!(r#""name":"{tool}""#)),
            "{tool}: {body}"
        );
    }
    let (_, body) = exchange(
        port,
        Some(&session),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}"#,
    );
    assert!(body.contains(r#""isError":true"#), "a tool error: {body}");
    assert!(
        !body.contains(r#""error":{"code""#),
        "not a protocol error: {body}"
    );
    assert!(
        !body.contains("not-a-real-token"),
        "the token in an answer: {body}"
    );
    drop(server);
}
