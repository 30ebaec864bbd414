//! A real browser for the web console's end-to-end test: headless Chromium (Debian's
//! `chromium`) driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: requests
//! in on fd 3, answers out on fd 4, each a JSON object ended by a NUL byte). No WebSocket and
//! no crate: the child is started through `sh`, which moves the pipes of its stdin and stdout
//! to fds 3 and 4 before it execs the browser.
//!
//! A machine without Chromium fails the test that asks for one (never skips it): `.ci/run`
//! installs it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one DevTools command may take before the test fails (a loaded machine's bound,
/// not a performance figure).
const COMMAND_BOUND: Duration = Duration::from_secs(30);

/// The browser programs looked for on `PATH`, in order (`CHROMIUM` names another).
const NAMES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// A headless browser with one page open.
pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: Receiver<Value>,
    next_id: u64,
    session: String,
    /// Its profile and its stderr log (`chromium.log`), removed with it.
    profile: tempfile::TempDir,
}

/// The browser to run: `CHROMIUM`, else the first of [`NAMES`] on `PATH`. Panics, saying how
/// to install one, when there is none.
pub fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in NAMES {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no Chromium on PATH (looked for {NAMES:?}, or set CHROMIUM): this test drives a real \
         browser; install Debian's package: apt-get install -y chromium"
    );
}

impl Browser {
    /// Starts headless Chromium with a fresh profile and opens one blank page of
    /// `width`×`height` CSS pixels.
    pub fn launch(width: u32, height: u32) -> Browser {
        let bin = chromium();
        let profile = tempfile::Builder::new()
            .prefix("chorus-chromium-")
            .tempdir()
            .expect("profile dir");
        let log = std::fs::File::create(profile.path().join("chromium.log")).expect("log");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg(&bin)
            .args([
                "--headless",
                // The tests run as root, where Chromium's own sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--mute-audio",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let to = child.stdin.take().expect("piped stdin");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        let mut browser = Browser {
            child,
            to,
            from,
            next_id: 0,
            session: String::new(),
            profile,
        };
        let target = browser.command("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = browser.command(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser.command("Page.enable", json!({}));
        browser.command(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        browser
    }

    /// Sends one command (to the page once attached) and waits for its answer's `result`;
    /// fails the test on an error answer or none within [`COMMAND_BOUND`].
    pub fn command(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = Value::String(self.session.clone());
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        if let Err(e) = self.to.write_all(&bytes).and_then(|()| self.to.flush()) {
            panic!("the browser is gone ({e}): {}", self.log());
        }
        let deadline = Instant::now() + COMMAND_BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                // Events (no id) and other answers are not waited for.
                Ok(v) if v["id"].as_u64() == Some(id) => {
                    if let Some(error) = v.get("error") {
                        panic!("{method} failed: {error}");
                    }
                    return v["result"].clone();
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{method}: no answer within {COMMAND_BOUND:?}: {}",
                        self.log()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{method}: the browser exited: {}", self.log())
                }
            }
        }
    }

    /// Opens `url` in the page and waits until it has loaded.
    pub fn navigate(&mut self, url: &str) {
        let answer = self.command("Page.navigate", json!({ "url": url }));
        if let Some(error) = answer.get("errorText") {
            panic!("cannot open {url}: {error}");
        }
        self.wait_for("document.readyState === 'complete' || null", COMMAND_BOUND)
            .unwrap_or_else(|| panic!("{url} did not finish loading within {COMMAND_BOUND:?}"));
    }

    /// The value of a JavaScript expression in the page (`null` when it throws).
    pub fn eval(&mut self, expression: &str) -> Value {
        let answer = self.command(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        if answer.get("exceptionDetails").is_some() {
            return Value::Null;
        }
        answer["result"]["value"].clone()
    }

    /// Evaluates `expression` every 100 ms until it gives something other than `null`,
    /// `false` or nothing; that value, or `None` after `timeout`.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expression);
            if !(v.is_null() || v == Value::Bool(false)) {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves a PNG of the page as it is drawn now.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.command("Page.captureScreenshot", json!({ "format": "png" }));
        let data = shot["data"].as_str().expect("base64 image data");
        let png = base64_decode(data).expect("the screenshot is base64");
        std::fs::write(path, png)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// The browser's own log (its stderr), for a failure message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("chromium.log")).unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (with padding), as DevTools sends images.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|c| *c != b'=').collect();
        if data.len() < 2 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in data.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let full = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&full[..data.len() - 1]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes_what_devtools_sends() {
        assert_eq!(super::base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(super::base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(super::base64_decode("YWJj").unwrap(), b"abc");
        assert!(super::base64_decode("a").is_none());
    }
}
