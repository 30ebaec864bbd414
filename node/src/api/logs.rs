//! `GET /tasks/{id}/logs?offset=N[&stream=stdout|stderr][&attempt=A][&follow=true]` at the
//! worker that ran a task: the bytes of one stream of its output (`stdout` unless asked) from
//! `offset` in that stream, as the command wrote them (at most 1 MiB an answer), from the
//! worker's log store (`chorus_io::sandbox::tasks::logs`). Same role as reading a task
//! (`read`).
//!
//! Follow mode is a long poll: with `follow=true` an answer with nothing new waits until the
//! run has new output on **either** stream (or ends, or [`FOLLOW_WAIT`] passed), then answers
//! with what its stream has, possibly nothing. So a client following both streams with one
//! request each is woken by either and never waits on one while the other has news. Every
//! answer says where the stream stands in its headers, so a client resumes at `offset + body
//! length` after a dropped connection: `chorus-log-stream`, `chorus-log-attempt`,
//! `chorus-log-offset`, `chorus-log-size` (bytes kept so far), `chorus-log-finished` (`true`
//! once the run ended), and, when the stream was cut, `chorus-log-cut-at` (its length) and
//! `chorus-log-dropped` (bytes not kept, or `unknown`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_io::sandbox::tasks::logs::{LogChunk, LogError};
use chorus_io::sandbox::tasks::LogStore;
use chorus_io::sandbox::OutputStream;

use crate::daemon::shared::SharedState;

/// The most bytes one answer carries.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// How long a follow request waits for something new before it answers with nothing.
pub const FOLLOW_WAIT: Duration = Duration::from_secs(20);

/// The query of a logs request.
#[derive(Debug, PartialEq, Eq)]
pub struct LogQuery {
    pub offset: u64,
    pub stream: OutputStream,
    pub attempt: Option<u32>,
    pub follow: bool,
}

/// Parses the query; the error says which parameter is wrong.
pub fn parse_query(query: &BTreeMap<String, String>) -> Result<LogQuery, String> {
    let mut q = LogQuery {
        offset: 0,
        stream: OutputStream::Stdout,
        attempt: None,
        follow: false,
    };
    for (k, v) in query {
        match k.as_str() {
            "offset" => {
                q.offset = v
                    .parse()
                    .map_err(|_| format!("offset {v:?} is not a number"))?
            }
            "stream" => {
                q.stream = OutputStream::from_name(v)
                    .ok_or_else(|| format!("stream {v:?} is not stdout or stderr"))?
            }
            "attempt" => {
                q.attempt = Some(
                    v.parse()
                        .map_err(|_| format!("attempt {v:?} is not a number"))?,
                )
            }
            "follow" => {
                q.follow = match v.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(format!("follow {v:?} is not true or false")),
                }
            }
            _ => {
                return Err(format!(
                    "unknown parameter `{k}`: offset, stream, attempt, follow"
                ))
            }
        }
    }
    Ok(q)
}

/// `GET /tasks/{id}/logs`.
#[utoipa::path(
    get,
    path = "/tasks/{id}/logs",
    tag = "tasks",
    summary = "A run's output",
    description = "Asked of the worker that ran the task (its id is the result's or the task's \
        `worker`): the bytes of one stream of the run's output from `offset`, as the command \
        wrote them, at most 1 MiB an answer. With `follow=true`, an answer with nothing new \
        waits (at most 20 s) until the run has new output on either stream, or ends. The \
        headers say where the stream stands: resume at `offset` + the body's length.",
    params(
        ("id" = String, Path, description = "The task's id, `ORIGIN-SEQ`"),
        ("offset" = Option<u64>, Query, description = "Where to start in the stream, bytes (default 0)"),
        ("stream" = Option<String>, Query, description = "`stdout` (default) or `stderr`"),
        ("attempt" = Option<u32>, Query, description = "The run (default: the latest)"),
        ("follow" = Option<bool>, Query, description = "Wait for new output (long poll)"),
    ),
    responses(
        (status = 200, description = "The bytes", content_type = "application/octet-stream", body = Vec<u8>,
            headers(
                ("chorus-log-stream" = String, description = "`stdout` or `stderr`"),
                ("chorus-log-attempt" = u32, description = "The run"),
                ("chorus-log-offset" = u64, description = "Where the body starts in the stream"),
                ("chorus-log-size" = u64, description = "Bytes of the stream kept so far"),
                ("chorus-log-finished" = bool, description = "`true` once the run ended"),
                ("chorus-log-cut-at" = u64, description = "When the stream was cut: its length"),
                ("chorus-log-dropped" = String, description = "When the stream was cut: bytes not kept, or `unknown`"),
            )
        ),
        (status = 400, description = "A bad parameter, task id or offset", body = crate::api::openapi::Refusal),
        (status = 404, description = "No output of this task (or run) is kept on this node", body = crate::api::openapi::Refusal),
        (status = 500, description = "The log store failed", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn task_logs(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let store = shared.lock().logs.clone();
    answer(store, id, query, FOLLOW_WAIT).await
}

/// The answer to a logs request for `id` from `store`, waiting at most `wait` in follow mode.
pub async fn answer(
    store: Option<Arc<LogStore>>,
    id: String,
    query: BTreeMap<String, String>,
    wait: Duration,
) -> Response {
    let q = match parse_query(&query) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let Some(store) = store else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no output of task {id} is kept on this node: it runs no tasks, or keeps no \
                 output (`[tasks] log_cap_mb = 0`)"
            ),
        );
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut attempt = q.attempt;
    // Woken once (either stream grew, or the run ended): the next read answers, even empty.
    let mut woken = false;
    loop {
        // Subscribed before the read: a write after the read wakes the wait below.
        let watch = attempt.and_then(|a| store.watch(&id, a));
        let read = {
            let (store, id) = (Arc::clone(&store), id.clone());
            tokio::task::spawn_blocking(move || {
                store.read(&id, attempt, q.stream, q.offset, MAX_ANSWER_BYTES)
            })
            .await
        };
        let chunk = match read {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return log_error(e),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let idle = chunk.data.is_empty() && !chunk.progress.finished;
        if !(q.follow && idle) || woken || tokio::time::Instant::now() >= deadline {
            return bytes(chunk);
        }
        // Not subscribed yet (the run was not named, or it ended meanwhile): again, on it.
        let Some(mut watch) = watch else {
            attempt = Some(chunk.attempt);
            continue;
        };
        if tokio::time::timeout_at(deadline, watch.changed())
            .await
            .is_err()
        {
            return bytes(chunk);
        }
        woken = true;
    }
}

/// 200 with the bytes and where the log stands.
fn bytes(c: LogChunk) -> Response {
    let p = c.progress;
    let mut headers = vec![
        ("chorus-log-stream", c.stream.name().to_owned()),
        ("chorus-log-attempt", c.attempt.to_string()),
        ("chorus-log-offset", c.offset.to_string()),
        ("chorus-log-size", p.kept_bytes.to_string()),
        ("chorus-log-finished", p.finished.to_string()),
    ];
    if let Some(at) = p.cut_at() {
        headers.push(("chorus-log-cut-at", at.to_string()));
        headers.push((
            "chorus-log-dropped",
            p.dropped_bytes
                .map_or("unknown".to_owned(), |d| d.to_string()),
        ));
    }
    let mut response = (StatusCode::OK, c.data).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    response
}

fn log_error(e: LogError) -> Response {
    let code = match &e {
        LogError::BadId(_) | LogError::BadOffset { .. } => StatusCode::BAD_REQUEST,
        LogError::NotFound(_) => StatusCode::NOT_FOUND,
        LogError::Refused(_) | LogError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(code, e.to_string())
}

fn error(code: StatusCode, text: String) -> Response {
    (code, Json(serde_json::json!({ "error": text }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    const TASK: &str = "n1-3";

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    async fn parts(r: Response) -> (u16, BTreeMap<String, String>, Vec<u8>) {
        let code = r.status().as_u16();
        let headers = r
            .headers()
            .iter()
            .filter(|(k, _)| k.as_str().starts_with("chorus-log-"))
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap().to_owned()))
            .collect();
        let body = to_bytes(r.into_body(), usize::MAX).await.unwrap().to_vec();
        (code, headers, body)
    }

    fn store(dir: &std::path::Path, cap: u64) -> Arc<LogStore> {
        Arc::new(LogStore::open(dir, cap, 8).unwrap())
    }

    #[test]
    fn queries_are_checked() {
        assert_eq!(
            parse_query(&q(&[("offset", "5"), ("follow", "true"), ("attempt", "2")])).unwrap(),
            LogQuery {
                offset: 5,
                stream: OutputStream::Stdout,
                attempt: Some(2),
                follow: true
            }
        );
        assert_eq!(
            parse_query(&q(&[("stream", "stderr")])).unwrap().stream,
            OutputStream::Stderr
        );
        assert_eq!(
            parse_query(&q(&[("stream", "stdout")])).unwrap().stream,
            OutputStream::Stdout
        );
        for (bad, named) in [
            (("offset", "-1"), "offset"),
            (("follow", "yes"), "follow"),
            (("tail", "1"), "tail"),
            (("stream", "both"), "stream"),
            (("stream", "STDERR"), "stream"),
            (("stream", ""), "stream"),
        ] {
            let e = parse_query(&q(&[bad])).unwrap_err();
            assert!(e.contains(named), "{bad:?}: {e}");
        }
    }

    /// Each stream is served alone, from its own offset, its headers naming it; a bad stream is
    /// a 400 naming the parameter.
    #[tokio::test]
    async fn each_stream_is_served_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20);
        let mut w = s.create(&TASK.parse().unwrap(), 1).unwrap();
        w.push(OutputStream::Stdout, b"out\n");
        w.push(OutputStream::Stderr, b"err1\n");
        w.push(OutputStream::Stderr, b"err2\n");
        let ask = |query| answer(Some(s.clone()), TASK.into(), query, FOLLOW_WAIT);
        let (_, h, body) = parts(ask(q(&[])).await).await;
        assert_eq!(
            (body.as_slice(), h["chorus-log-stream"].as_str()),
            (&b"out\n"[..], "stdout")
        );
        let (_, h, body) = parts(ask(q(&[("stream", "stderr"), ("offset", "5")])).await).await;
        assert_eq!(
            (body.as_slice(), h["chorus-log-stream"].as_str()),
            (&b"err2\n"[..], "stderr")
        );
        assert_eq!(h["chorus-log-size"], "10");
        let (code, _, body) = parts(ask(q(&[("stream", "all")])).await).await;
        let text = String::from_utf8(body).unwrap();
        assert!(code == 400 && text.contains("stream"), "{code} {text}");
    }

    /// A follow request on one stream is woken by output on the other, and answers (with
    /// nothing of its own) rather than waiting on: a client following both is never held.
    #[tokio::test]
    async fn a_follow_request_is_woken_by_the_other_stream() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20);
        let mut w = s.create(&TASK.parse().unwrap(), 1).unwrap();
        let waiting = tokio::spawn(answer(
            Some(s.clone()),
            TASK.into(),
            q(&[("stream", "stderr"), ("follow", "true"), ("attempt", "1")]),
            Duration::from_secs(30),
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "nothing new yet");
        let started = std::time::Instant::now();
        w.push(OutputStream::Stdout, b"out\n");
        let (code, h, body) = parts(waiting.await.unwrap()).await;
        assert_eq!((code, body.len()), (200, 0));
        assert_eq!(
            (
                h["chorus-log-stream"].as_str(),
                h["chorus-log-finished"].as_str()
            ),
            ("stderr", "false")
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "answered when stdout grew"
        );
    }

    /// Bytes as written from an offset, where the log stands in the headers, the cut stated.
    #[tokio::test]
    async fn the_log_is_served_from_an_offset_with_its_state_and_its_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 8);
        let mut w = s.create(&TASK.parse().unwrap(), 1).unwrap();
        w.push(OutputStream::Stdout, b"ab\x1bcd");
        let (code, h, body) = parts(
            answer(
                Some(s.clone()),
                TASK.into(),
                q(&[("offset", "1")]),
                FOLLOW_WAIT,
            )
            .await,
        )
        .await;
        assert_eq!((code, body.as_slice()), (200, &b"b\x1bcd"[..]));
        assert_eq!(h["chorus-log-finished"], "false");
        assert_eq!(
            (
                h["chorus-log-size"].as_str(),
                h["chorus-log-attempt"].as_str()
            ),
            ("5", "1")
        );
        assert!(!h.contains_key("chorus-log-cut-at"));
        w.push(OutputStream::Stdout, b"efghij");
        w.finish();
        let (_, h, body) = parts(
            answer(
                Some(s.clone()),
                TASK.into(),
                q(&[("offset", "5")]),
                FOLLOW_WAIT,
            )
            .await,
        )
        .await;
        assert_eq!(body, b"efg");
        assert_eq!(h["chorus-log-finished"], "true");
        assert_eq!(
            (
                h["chorus-log-cut-at"].as_str(),
                h["chorus-log-dropped"].as_str()
            ),
            ("8", "3")
        );
    }

    #[tokio::test]
    async fn bad_ids_offsets_and_unknown_tasks_are_said() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 8);
        s.create(&TASK.parse().unwrap(), 1)
            .unwrap()
            .push(OutputStream::Stdout, b"abc");
        let ask = |id: &str, query| answer(Some(s.clone()), id.into(), query, FOLLOW_WAIT);
        assert_eq!(parts(ask("..-1", q(&[])).await).await.0, 400);
        assert_eq!(parts(ask(TASK, q(&[("offset", "9")])).await).await.0, 400);
        assert_eq!(parts(ask("n1-4", q(&[])).await).await.0, 404);
        let none = answer(None, TASK.into(), q(&[]), FOLLOW_WAIT).await;
        assert_eq!(none.status().as_u16(), 404);
    }

    /// A follow request with nothing new waits for it, and one at the end of a finished log
    /// answers at once.
    #[tokio::test]
    async fn a_follow_request_waits_for_new_output_and_not_past_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20);
        let mut w = s.create(&TASK.parse().unwrap(), 1).unwrap();
        w.push(OutputStream::Stdout, b"one\n");
        let waiting = tokio::spawn(answer(
            Some(s.clone()),
            TASK.into(),
            q(&[("offset", "4"), ("follow", "true")]),
            Duration::from_secs(30),
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "nothing new yet");
        w.push(OutputStream::Stdout, b"two\n");
        let (_, h, body) = parts(waiting.await.unwrap()).await;
        assert_eq!(
            (body.as_slice(), h["chorus-log-finished"].as_str()),
            (&b"two\n"[..], "false")
        );
        w.finish();
        let started = std::time::Instant::now();
        let (_, h, body) = parts(
            answer(
                Some(s.clone()),
                TASK.into(),
                q(&[("offset", "8"), ("follow", "true")]),
                Duration::from_secs(30),
            )
            .await,
        )
        .await;
        assert!(body.is_empty() && h["chorus-log-finished"] == "true");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "answered at once"
        );
        // Nothing new within the wait: an empty answer, the log still going.
        let tmp2 = tempfile::tempdir().unwrap();
        let s2 = store(tmp2.path(), 1 << 20);
        let _going = s2.create(&TASK.parse().unwrap(), 1).unwrap();
        let (code, h, body) = parts(
            answer(
                Some(s2),
                TASK.into(),
                q(&[("follow", "true"), ("attempt", "1")]),
                Duration::from_millis(50),
            )
            .await,
        )
        .await;
        assert_eq!(
            (code, body.len(), h["chorus-log-finished"].as_str()),
            (200, 0, "false")
        );
    }
}
