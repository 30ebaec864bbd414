//! `--demo-tasks N`: a workload submitted through a node that is not the admin, each result
//! printed as it comes, then a count per worker.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::console::Console;
use super::report::short;
use crate::cli::http::request;

/// The demo workload: `count` short tasks submitted through the node at `http` (n`index`),
/// each result printed as it comes, then how many ran on each worker.
pub(super) async fn demo(console: Console, http: String, index: usize, count: usize) {
    console.say(&format!(
        "devcluster: demo: submitting {count} task(s) through n{index}"
    ));
    let mut ids = Vec::new();
    for n in 0..count {
        let spec = serde_json::json!({
            "image": chorus_io::sandbox::image::SANDBOX_IMAGE,
            "command": ["sh", "-c", format!("sleep 0.{}; echo task {n} on $(hostname)", n % 10)],
            "timeout_ms": 60_000,
        });
        match request(&http, "POST", "/tasks", Some(&spec.to_string())).await {
            Ok((201, body)) => match serde_json::from_str::<Value>(&body) {
                Ok(v) => ids.push(v["task"].as_str().unwrap_or_default().to_owned()),
                Err(e) => console.say(&format!("devcluster: demo: bad answer to a submit: {e}")),
            },
            Ok((code, body)) => console.say(&format!(
                "devcluster: demo: submit refused ({code}): {body}"
            )),
            Err(e) => console.say(&format!("devcluster: demo: submit failed: {e}")),
        }
    }
    let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut open: Vec<String> = ids;
    while !open.is_empty() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut still = Vec::new();
        for id in open {
            let path = format!("/tasks/{id}");
            let result = match request(&http, "GET", &path, None).await {
                Ok((200, body)) => serde_json::from_str::<Value>(&body)
                    .ok()
                    .map(|v| v["result"].clone())
                    .filter(|r| !r.is_null()),
                _ => None,
            };
            match result {
                Some(r) => {
                    let worker = r["worker"].as_str().unwrap_or("?").to_owned();
                    console.say(&format!(
                        "devcluster: demo: task {} {} on {} (run {}): {}",
                        short(&id),
                        r["status"].as_str().unwrap_or("?"),
                        short(&worker),
                        r["attempt"],
                        r["stdout"].as_str().unwrap_or_default().trim()
                    ));
                    *per_worker.entry(short(&worker).to_owned()).or_default() += 1;
                }
                None => still.push(id),
            }
        }
        open = still;
    }
    let per_worker: Vec<String> = per_worker
        .iter()
        .map(|(worker, n)| format!("{worker} {n}"))
        .collect();
    console.say(&format!(
        "devcluster: demo: all {count} task(s) done; per worker: {}",
        per_worker.join(", ")
    ));
}
