//! End to end: the web console (`/ui`, issue 37) of a three-node cluster, in a real browser —
//! headless Chromium driven over the DevTools protocol ([`chorus_tests::browser`]). The page is
//! loaded at a node that is not the admin, and kept open: it shows the admin, and every other
//! node as that node reports itself (the other follower a follower in the admin's term, the
//! admin with its lease); a task submitted to that node shows its output (as text: markup in
//! it stays text); after `kill -9` of the admin the same page shows the new admin within the
//! failover bound, draws the new term on its timeline, and shows the killed node not reached,
//! then reached again once it restarts. A page opened after all that draws, at once, the
//! earlier admin's band from before it opened (the node keeps its history).
//!
//! Needs Chromium and a running Docker Engine (the task runs in a sandbox); fails, never
//! skips, without them. With `CHORUS_CONSOLE_SCREENSHOT=FILE` the page's last state is saved
//! there as a PNG (else in the cluster's temporary directory, removed with it).

use std::time::{Duration, Instant};

use chorus_tests::browser::Browser;
use chorus_tests::task_cluster::{TaskCluster, IMAGE};
use chorus_tests::{http_exact, http_request, test_token, Timings, Value};

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

/// How long the page may take to show what the node already says: a few of its one-second
/// polls on two loaded cores.
const SHOW_BOUND: Duration = Duration::from_secs(20);

/// A task's result on two loaded cores (a liveness bound, as in e2e_tasks).
const RESULT_BOUND: Duration = Duration::from_secs(120);

/// A crashed admin replaced (e2e_cluster's bound: three election rounds and the heartbeats
/// that notice the silence, plus slack) and then shown by the page (one poll, and slack).
fn failover_shown_bound(t: Timings) -> Duration {
    Duration::from_millis(3 * (t.election_max_ms + 2 * t.heartbeat_ms) + 5_000 + 3_000)
}

/// JavaScript: the text of the element with `id`, or `null`.
fn text_of(id: &str) -> String {
    format!("(document.getElementById('{id}') || {{}}).textContent || null")
}

#[test]
fn the_console_shows_the_admin_a_task_output_and_a_failover_live() {
    let mut cluster = TaskCluster::start(BIN);
    let ids = cluster.ids.clone();
    let c = &mut cluster.c;
    let (admin, term, a) = c.wait_agreed(Duration::from_secs(60));
    // The page is opened at a node that survives the admin's crash.
    let s = (a + 1) % 3;
    let port = c.nodes[s].http_port;

    // A browser asking for `/` is sent to the console; curl still gets the endpoint list.
    let host = format!("127.0.0.1:{port}");
    let (code, _) = http_exact(
        port,
        "GET",
        "/",
        &[("Host", &host), ("Accept", "text/html")],
        "",
    )
    .expect("the node answers");
    assert_eq!(code, 303, "a browser is redirected to /ui");
    let (code, list) =
        http_exact(port, "GET", "/", &[("Host", &host), ("Accept", "*/*")], "").unwrap();
    assert!(code == 200 && list.contains("/healthz"), "{code}: {list}");

    let mut b = Browser::launch(1280, 1400);
    // The token rides in the fragment, which the browser never sends: the page keeps it in
    // sessionStorage and takes it out of the address.
    b.navigate(&format!("http://{host}/ui#token={}", test_token()));
    let shown = b.wait_for(
        &format!("{} === '{admin}' || null", text_of("admin")),
        SHOW_BOUND,
    );
    assert!(
        shown.is_some(),
        "the console shows the admin {admin}; it shows {:?} ({:?})",
        b.eval(&text_of("admin")),
        b.eval(&text_of("conn"))
    );
    assert_eq!(b.eval("location.hash"), Value::String(String::new()));
    // The nodes' table is drawn from its own answer, which may come after the admin's.
    let rows = "document.querySelectorAll('#nodes tbody tr').length";
    assert!(
        b.wait_for(&format!("{rows} === 3 || null"), SHOW_BOUND)
            .is_some(),
        "a row per node; {:?} rows",
        b.eval(rows)
    );
    assert_eq!(b.eval(&text_of("term")), Value::String(term.to_string()));

    // Every node as it reports itself, asked by the node serving the page: the other follower
    // says it follows in the admin's term; the admin shows the lease only it knows.
    let f = (a + 2) % 3;
    let cell = |node: &str, class: &str| {
        format!(
            "(document.querySelector('#nodes tr[data-node=\"{node}\"] td.{class}') || {{}}).textContent || null"
        )
    };
    let follower = format!(
        "{} === 'follower' && {} === '{term}' || null",
        cell(&ids[f], "role-cell"),
        cell(&ids[f], "term")
    );
    assert!(
        b.wait_for(&follower, SHOW_BOUND).is_some(),
        "the other follower {} is shown as it reports itself: role {:?}, term {:?}",
        ids[f],
        b.eval(&cell(&ids[f], "role-cell")),
        b.eval(&cell(&ids[f], "term"))
    );
    let lease = format!(
        "/^[0-9.]+ m?s$/.test({}) && {} === 'admin' || null",
        cell(&admin, "lease"),
        cell(&admin, "role-cell")
    );
    assert!(
        b.wait_for(&lease, SHOW_BOUND).is_some(),
        "the admin's row shows its own role and lease: {:?} / {:?}",
        b.eval(&cell(&admin, "role-cell")),
        b.eval(&cell(&admin, "lease"))
    );

    // A task submitted to this node: its output appears, markup in it as text.
    let spec = serde_json::json!({
        "image": IMAGE,
        "command": ["sh", "-c", "echo console-task-ok; echo '<b id=\"injected\">not markup</b>'"],
        "timeout_ms": 60_000,
    });
    let (code, body) = http_request(port, "POST", "/tasks", Some(&spec.to_string())).unwrap();
    assert_eq!(code, 201, "{body}");
    let task = serde_json::from_str::<Value>(&body).unwrap()["task"]
        .as_str()
        .unwrap()
        .to_owned();
    let row = format!("document.querySelector('#tasks tr[data-task=\"{task}\"]')");
    assert!(
        b.wait_for(&format!("{row} !== null || null"), SHOW_BOUND)
            .is_some(),
        "the task {task} is listed: {:?}",
        b.eval(&text_of("tasks-state"))
    );
    b.eval(&format!("{row}.click(), true"));
    let output = b.wait_for(
        &format!(
            "({t}||'').includes('console-task-ok') ? {t} : null",
            t = text_of("task-stdout")
        ),
        RESULT_BOUND,
    );
    let output = output.unwrap_or_else(|| {
        panic!(
            "the task's output is shown: {:?} / {:?}",
            b.eval(&text_of("task-fields")),
            b.eval(&text_of("task-stdout"))
        )
    });
    assert!(
        output
            .as_str()
            .unwrap()
            .contains("<b id=\"injected\">not markup</b>"),
        "{output}"
    );
    assert_eq!(
        b.eval("document.getElementById('injected') === null"),
        true,
        "task output is text, never markup"
    );
    let status = format!("{row}.children[2].textContent");
    assert!(
        b.wait_for(&format!("{status} === 'succeeded' || null"), SHOW_BOUND)
            .is_some(),
        "the list says the task succeeded: {:?}",
        b.eval(&status)
    );

    // kill -9 of the admin: the same page shows the new one within the bound.
    let killed_at = Instant::now();
    c.kill(a);
    let bound = failover_shown_bound(Timings::FAST);
    let new_admin = b.wait_for(
        &format!(
            "(a => a && a !== '{admin}' && a !== 'none known' && a !== '—' ? a : null)({})",
            text_of("admin")
        ),
        bound,
    );
    let new_admin = new_admin
        .unwrap_or_else(|| {
            panic!(
                "no new admin shown within {bound:?}; the page says {:?}",
                b.eval(&text_of("admin"))
            )
        })
        .as_str()
        .unwrap()
        .to_owned();
    let shown_after = killed_at.elapsed();
    let (agreed, new_term, _) = c.wait_agreed(Duration::from_secs(20));
    assert_eq!(
        new_admin, agreed,
        "the page shows the admin the cluster agrees on"
    );
    assert!(new_term > term);
    eprintln!(
        "console: admin {admin} (term {term}) killed; the page showed {new_admin} (term \
         {new_term}) after {:.2} s (bound {bound:?})",
        shown_after.as_secs_f64()
    );
    // The timeline marks the new term on the new admin's row, and draws the old admin's row
    // as not reached.
    let term_mark = format!("T{new_term}");
    assert!(
        b.wait_for(
            &format!(
                "[...document.querySelectorAll('#timeline text.term')].some(e => e.textContent === '{term_mark}') || null"
            ),
            SHOW_BOUND
        )
        .is_some(),
        "the timeline marks {term_mark}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#timeline rect.band[data-state=\"down\"]').length > 0"),
        true,
        "the killed admin's row turns grey"
    );
    // Reachability: the killed node's row says it is not reached, and reached again once it
    // restarts and rejoins (as a follower of the new admin).
    let reached = cell(&admin, "reach");
    assert!(
        b.wait_for(&format!("{reached} === 'no' || null"), SHOW_BOUND)
            .is_some(),
        "the killed node is shown not reached: {:?}",
        b.eval(&reached)
    );
    c.start_node(a);
    assert!(
        b.wait_for(
            &format!("{reached} === 'yes' || null"),
            Duration::from_secs(30)
        )
        .is_some(),
        "the restarted node is shown reached again: {:?}",
        b.eval(&reached)
    );
    assert_eq!(b.eval(&text_of("admin")), Value::String(new_admin.clone()));

    // A page opened now, after the failover, draws what the node saw before it opened: the
    // earlier admin's band (left of the line where the page opened) and its term's mark.
    b.navigate(&format!("http://{host}/ui?reopened"));
    let earlier = format!(
        "(() => {{ \
           const opened = document.querySelector('#timeline line.opened'); \
           const bands = [...document.querySelectorAll('#timeline rect.band[data-node=\"{admin}\"][data-state=\"admin\"]')]; \
           const mark = [...document.querySelectorAll('#timeline text.term[data-node=\"{admin}\"]')].some(e => e.textContent === 'T{term}'); \
           return opened && mark && bands.some(r => +r.getAttribute('x') < +opened.getAttribute('x1')) || null; \
         }})()"
    );
    assert!(
        b.wait_for(&earlier, SHOW_BOUND).is_some(),
        "a page opened after the failover shows the earlier admin {admin}'s band and T{term}: \
         bands {:?}",
        b.eval("[...document.querySelectorAll('#timeline rect.band')].map(r => r.dataset.node.slice(-8) + ':' + r.dataset.state).join(' ')")
    );
    // A few more polls, so the picture shows some time after the rejoin.
    std::thread::sleep(Duration::from_secs(2));
    let shot = std::env::var_os("CHORUS_CONSOLE_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| c.root().join("console.png"));
    b.screenshot(&shot);
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG at {}", shot.display());
    eprintln!("console: screenshot {}", shot.display());
    assert!(ids.contains(&new_admin));
}
