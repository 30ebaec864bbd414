//! End to end: real `chorus run` processes over libp2p on loopback (docs/design.md §4, §8).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chorus_tests::{wait_until, Cluster, Join, Timings};

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

/// A liveness bound on a failover after a crash, not a performance figure: the protocol needs
/// about one maximum election timeout plus a round trip (the silent admin is suspected after
/// the minimum timeout, the best-ranked survivor stands within the window, one pre-vote + vote
/// round follows). Three times that plus 5 s keeps the test meaningful (a node that never
/// fails over still fails it) without flaking on two loaded cores. The real figure is measured
/// by `chorus devcluster --nodes 5 --kill-admin-after 5 --kills 20` (README, Status).
fn crash_failover_bound(t: Timings) -> Duration {
    Duration::from_millis(3 * (t.election_max_ms + 2 * t.heartbeat_ms) + 5_000)
}

/// docs/design.md §4: five nodes elect one admin that every node agrees on; a crashed admin is replaced
/// within the bound; the old admin restarted rejoins as a follower without raising the term; a
/// gracefully stopped admin hands over well within one election timeout; and `chorus replay`
/// of the stopped node's data directory reproduces what it recorded.
#[test]
fn five_nodes_elect_fail_over_and_rejoin() {
    let t = Timings::FAST;
    let mut c = Cluster::start(BIN, 5, t);
    let (admin, term, a) = c.wait_agreed(Duration::from_secs(20));
    assert!(term >= 1);
    // Exactly one node says it is admin.
    let admins: Vec<usize> = (0..5)
        .filter(|i| c.status(*i).is_some_and(|s| s["role"] == "admin"))
        .collect();
    assert_eq!(admins, vec![a], "one admin");
    // Readiness follows from a known admin.
    assert_eq!(
        chorus_tests::http_get(c.nodes[a].http_port, "/readyz")
            .unwrap()
            .0,
        200
    );

    // Crash the admin.
    let killed_at = Instant::now();
    c.kill(a);
    let (new_admin, new_term, b) =
        wait_until(crash_failover_bound(t), Duration::from_millis(20), || {
            c.agreement()
                .filter(|(id, term, _)| *id != admin && *term > 0)
        })
        .unwrap_or_else(|| panic!("no new admin within {:?}", crash_failover_bound(t)));
    let failover = killed_at.elapsed();
    eprintln!("crash failover: {failover:?} (term {term} -> {new_term})");
    assert!(new_term > term);
    assert_ne!(b, a);
    // The new admin says how much of the electorate it reaches: 3 of the 4 others (the dead
    // one's connection is gone once the transport notices).
    let reach = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let v = c.status(b)?["voters_connected"].clone();
        (v["connected"] == 3).then_some(v)
    })
    .unwrap_or_else(|| panic!("voters_connected: {:?}", c.status(b)));
    assert_eq!(reach["others"], 4, "{reach}");

    // The old admin comes back: it follows, and the term does not move.
    c.start_node(a);
    let rejoined = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let s = c.status(a)?;
        (s["role"] == "follower" && s["admin"] == new_admin.as_str()).then_some(s)
    })
    .expect("the old admin rejoins as a follower");
    assert_eq!(rejoined["term"].as_u64(), Some(new_term));
    // Let three heartbeats reach the rejoined node (counted, not slept), then check that
    // nothing was disrupted.
    let beat = rejoined["beat"].as_u64().unwrap();
    wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
        c.status(a)?["beat"].as_u64().filter(|b| *b >= beat + 3)
    })
    .expect("heartbeats reach the rejoined node");
    let (still, same_term, _) = c.wait_agreed(Duration::from_secs(5));
    assert_eq!(
        (still.as_str(), same_term),
        (new_admin.as_str(), new_term),
        "no disruption"
    );

    // Stop the admin gracefully: it steps down and says so, so the others elect at once. That
    // it was a handover, not a timeout, is checked from the stopped node's log (the reason of
    // its step-down) rather than from the wall clock; the time is printed for the record.
    let stopped_at = Instant::now();
    c.signal_term(b);
    let (_, graceful_term, _) =
        wait_until(crash_failover_bound(t), Duration::from_millis(20), || {
            (0..5).filter(|i| *i != b).find_map(|i| {
                let s = c.status(i)?;
                (s["role"] == "admin" && s["term"].as_u64()? > new_term).then(|| {
                    (
                        s["node_id"].as_str().map(str::to_owned),
                        s["term"].as_u64(),
                        i,
                    )
                })
            })
        })
        .expect("a new admin after the graceful stop");
    let graceful = stopped_at.elapsed();
    eprintln!("graceful failover: {graceful:?}");
    assert!(graceful_term.is_some());
    let status = c
        .wait_exit(b, Duration::from_secs(10))
        .expect("the stopped node exits");
    assert!(status.success(), "graceful exit: {status:?}");

    // Replay the stopped node's log: the decisions match what it recorded as it ran.
    let dir = c.nodes[b].data_dir.clone();
    let trace = c.root().join("trace.jsonl");
    let out = c.chorus(&[
        "replay",
        "--data-dir",
        dir.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "replay failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("check     OK"), "{stdout}");
    assert!(
        stdout.contains(&format!("became admin of term {new_term}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("stepped down from term {new_term} (shutdown)")),
        "the admin handed over on SIGTERM: {stdout}"
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    let mut lines = trace.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["kind"], "header");
    assert_eq!(header["version"], 1);
    let kinds: Vec<String> = lines
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(kinds.iter().any(|k| k == "became_admin"));
    assert!(kinds.iter().any(|k| k == "voted"));
}

/// docs/design.md §3: a node killed right after it voted, and restarted, does not vote again in that
/// term (its log made the vote durable before the reply left).
#[test]
fn crash_right_after_voting_does_not_vote_twice() {
    let t = Timings::FAST;
    let mut c = Cluster::start(BIN, 3, t);
    let (_, term, a) = c.wait_agreed(Duration::from_secs(20));
    c.kill(a);
    // Catch a follower the moment it has voted in a newer term, and crash it.
    let (voter, vote_term, candidate) =
        wait_until(crash_failover_bound(t), Duration::from_millis(5), || {
            (0..3).filter(|i| *i != a).find_map(|i| {
                let s = c.status(i)?;
                let vt = s["term"].as_u64()?;
                let voted = s["voted_for"].as_str()?;
                (vt > term && s["role"] == "follower" && voted != s["node_id"])
                    .then(|| (i, vt, voted.to_owned()))
            })
        })
        .expect("a follower votes in a new term");
    c.kill(voter);
    c.start_node(voter);
    let s = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        c.status(voter)
    })
    .expect("the voter restarts");
    let restarted_term = s["term"].as_u64().unwrap();
    assert!(restarted_term >= vote_term, "term survives the crash");
    if restarted_term == vote_term {
        assert_eq!(
            s["voted_for"].as_str(),
            Some(candidate.as_str()),
            "vote survives"
        );
    }
    // Let the cluster settle, then read the voter's whole history.
    c.wait_agreed(Duration::from_secs(15));
    let exit = c.terminate(voter).expect("the voter stops");
    assert!(exit.success());
    let dir = c.nodes[voter].data_dir.clone();
    let out = c.chorus(&["replay", "--data-dir", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains("VOTE SAFETY"), "{stdout}");
    // Votes as the node reported them ("voted for <id> in term <t>") and as it sent them
    // ("granted its vote to <id> in term <t>"): one candidate per term, judged from both.
    let mut votes: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut grants = 0;
    for line in stdout.lines() {
        let rest = line.split("voted for ").nth(1).or_else(|| {
            let r = line.split("granted its vote to ").nth(1);
            grants += usize::from(r.is_some());
            r
        });
        if let Some(rest) = rest {
            let (who, t) = rest.split_once(" in term ").unwrap();
            let candidates = votes.entry(t.trim().parse().unwrap()).or_default();
            if !candidates.iter().any(|c| c == who) {
                candidates.push(who.to_owned());
            }
        }
    }
    assert!(grants >= 1, "the vote left as a granted reply: {stdout}");
    assert!(
        votes
            .get(&vote_term)
            .is_some_and(|v| v.contains(&candidate)),
        "the vote is in the log: {votes:?}"
    );
    for (term, who) in &votes {
        assert_eq!(who.len(), 1, "one vote in term {term}: {who:?}");
    }
    assert!(
        stdout.lines().filter(|l| l.ends_with(" started")).count() >= 2,
        "{stdout}"
    );
}

/// How long nodes that were given one address may take to meet the others through it: a
/// liveness bound (identify, one Kademlia lookup, one dial), not a performance figure.
const MESH_BOUND: Duration = Duration::from_secs(30);

/// The node ids node `i` has as peers (`/status` `peers`), if it answers.
fn peer_ids(c: &Cluster, i: usize) -> Option<Vec<String>> {
    let s = c.status(i)?;
    Some(
        s["peers"]
            .as_array()?
            .iter()
            .filter_map(|p| p.as_str().map(str::to_owned))
            .collect(),
    )
}

/// Issue 35: one join address is enough. Nodes given only n0's address meet each other through
/// its Kademlia table, so losing n0 (kill -9) leaves a connected majority that keeps an admin;
/// a node restarted with no bootstrap address at all finds the cluster from its peers file.
#[test]
fn one_join_address_is_enough() {
    let t = Timings::FAST;
    let mut c = Cluster::start_joining_first(BIN, 3, t);
    let started = Instant::now();
    let ids: Vec<String> = (0..3)
        .map(|i| {
            wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
                Some(c.status(i)?["node_id"].as_str()?.to_owned())
            })
            .expect("node id")
        })
        .collect();
    let meshed = |c: &Cluster, i: usize, want: &[usize]| {
        peer_ids(c, i).is_some_and(|p| want.iter().all(|j| p.contains(&ids[*j])))
    };
    wait_until(MESH_BOUND, Duration::from_millis(50), || {
        (meshed(&c, 0, &[1, 2]) && meshed(&c, 1, &[0, 2]) && meshed(&c, 2, &[0, 1])).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "not meshed within {MESH_BOUND:?}: {:?}",
            (0..3).map(|i| peer_ids(&c, i)).collect::<Vec<_>>()
        )
    });
    eprintln!("n1 and n2 met through n0 in {:?}", started.elapsed());
    let (_, _, admin_before) = c.wait_agreed(Duration::from_secs(20));

    // n1 keeps the peers it met (atomically rewritten, at most every few seconds).
    let file = c.nodes[1].data_dir.join("peers.json");
    wait_until(Duration::from_secs(15), Duration::from_millis(100), || {
        let text = std::fs::read_to_string(&file).ok()?;
        (text.contains(&ids[0]) && text.contains(&ids[2])).then_some(())
    })
    .unwrap_or_else(|| panic!("{} does not name n0 and n2", file.display()));

    c.kill(0);
    let killed = Instant::now();
    // n1 and n2 stay connected to each other and agree on an admin among themselves.
    let bound = crash_failover_bound(t);
    let (admin, _, a) = c.wait_agreed(bound);
    assert_ne!(a, 0);
    assert!(meshed(&c, 1, &[2]) && meshed(&c, 2, &[1]));
    eprintln!(
        "after n0's kill (admin before: n{admin_before}), n1 and n2 agreed on n{a} ({admin}) in {:?}",
        killed.elapsed()
    );

    // n1 restarted without any bootstrap address: its peers file leads it back to n2.
    c.kill(1);
    c.join = Join::None;
    c.start_node(1);
    let restarted = Instant::now();
    wait_until(MESH_BOUND, Duration::from_millis(50), || {
        (meshed(&c, 1, &[2]) && meshed(&c, 2, &[1])).then_some(())
    })
    .unwrap_or_else(|| panic!("restarted n1 did not reconnect: {:?}", peer_ids(&c, 1)));
    let (_, _, a) = c.wait_agreed(bound);
    assert_ne!(a, 0);
    eprintln!(
        "n1 restarted with no bootstrap address reconnected in {:?}",
        restarted.elapsed()
    );
}

/// The `(y, x, width)` of each lease band of a timeline SVG.
fn lease_bands(svg: &str) -> Vec<(f64, f64, f64)> {
    let attr = |line: &str, name: &str| -> f64 {
        let rest = line.split(&format!(" {name}=\"")).nth(1).unwrap();
        rest.split('"').next().unwrap().parse().unwrap()
    };
    svg.lines()
        .filter(|l| l.contains(r#"class="lease""#))
        .map(|l| (attr(l, "y"), attr(l, "x"), attr(l, "width")))
        .collect()
}

/// Issue 35: `chorus-sim svg` of a real cluster's merged trace (`chorus replay` of its data
/// directories) draws the cluster: a row per node named by its peer id, host time, no seed, and
/// the killed admin's lease band ends before the new admin's begins.
#[test]
fn a_merged_trace_of_a_failover_draws_peer_rows_and_leases_one_after_the_other() {
    let t = Timings::FAST;
    let mut c = Cluster::start(BIN, 3, t);
    let (old_id, _, a) = c.wait_agreed(Duration::from_secs(20));
    let ids: Vec<String> = (0..3)
        .map(|i| {
            c.status(i).expect("status")["node_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let journal = c.root().join("faults.jsonl");
    let crash = serde_json::json!({
        "at_monotonic_ms": chorus_tests::netns::monotonic_ms(),
        "kind": "crash",
        "node": old_id,
    });
    std::fs::write(&journal, format!("{crash}\n")).unwrap();
    c.kill(a);
    let (new_id, _, b) = c.wait_agreed(crash_failover_bound(t));
    assert_ne!(b, a);
    for i in (0..3).filter(|i| *i != a) {
        c.terminate(i);
    }
    let dirs: Vec<std::path::PathBuf> = c.nodes.iter().map(|n| n.data_dir.clone()).collect();
    let trace = c.root().join("merged.jsonl");
    let mut out = Vec::new();
    chorus_node::merge::replay_merged(&dirs, Some(&journal), Some(&trace), None, &mut out)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", String::from_utf8_lossy(&out)));
    let (header, lines) =
        chorus_sim::trace::read(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let svg = chorus_sim::svg::render(&header, &lines);
    assert_eq!(
        svg,
        chorus_sim::svg::render(&header, &lines),
        "deterministic"
    );
    assert!(svg.contains(">host time</text>"), "{svg}");
    assert!(!svg.contains("seed "), "{svg}");
    // Each node's row: its label's baseline, by peer id.
    let mut row_y = BTreeMap::new();
    for id in &ids {
        let label = svg
            .lines()
            .find(|l| l.contains(&format!("<title>{id}</title>")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{svg}"));
        let y: f64 = label
            .split(" y=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        row_y.insert(id.clone(), y);
    }
    // A lease band sits 1 px above its row's label baseline.
    let bands = lease_bands(&svg);
    let on = |id: &str| -> Vec<(f64, f64)> {
        bands
            .iter()
            .filter(|(y, _, _)| (y + 1.0 - row_y[id]).abs() < 0.01)
            .map(|(_, x, w)| (*x, x + w))
            .collect()
    };
    let (old, new) = (on(&old_id), on(&new_id));
    assert!(!old.is_empty() && !new.is_empty(), "{bands:?}\n{svg}");
    let old_end = old.iter().map(|b| b.1).fold(f64::MIN, f64::max);
    let new_start = new.iter().map(|b| b.0).fold(f64::MAX, f64::min);
    assert!(old_end <= new_start + 0.1, "{old:?} then {new:?}");
}

/// Issue 54, item 6: while a follower still names an admin that is gone (until its own
/// election timeout), its `/status` says the admin is not heard (`admin_silent`, with how long
/// ago it was) — what `chorus status` and the console show instead of "held by the admin"
/// (their text: the unit tests of `cli/status.rs`) — and a follower of a live admin never says
/// so.
#[test]
fn a_follower_says_its_admin_is_not_heard_until_the_next_one_is() {
    let t = Timings::FAST;
    let mut c = Cluster::start_with(BIN, 3, t, &[]);
    let (admin, _, a) = c.wait_agreed(Duration::from_secs(30));
    let f = (a + 1) % 3;
    // A live admin, heard every heartbeat: never silent, over a few beats.
    for _ in 0..10 {
        let s = c.status(f).expect("the follower answers");
        assert_eq!(s["admin_silent"], false, "{s}");
        assert!(s["admin_heard_ms"].as_u64().is_some(), "{s}");
        std::thread::sleep(Duration::from_millis(2 * t.heartbeat_ms / 5));
    }
    c.kill(a);
    // Past two heartbeats without one, before the election ends: named, and said silent.
    let silent = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
        let s = c.status(f)?;
        (s["admin_silent"] == true).then_some(s)
    })
    .expect("the follower says its admin is not heard");
    assert_eq!(silent["admin"], admin.as_str(), "{silent}");
    assert!(
        silent["admin_heard_ms"].as_u64() > Some(2 * t.heartbeat_ms),
        "{silent}"
    );
    // A new admin: heard again.
    let (new_admin, _, b) = wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
        c.agreement().filter(|(id, _, _)| *id != admin)
    })
    .expect("a new admin");
    let follower = (0..3).find(|i| *i != a && *i != b).unwrap();
    let s = c.status(follower).expect("the follower answers");
    assert_eq!(s["admin"], new_admin.as_str(), "{s}");
    assert_eq!(s["admin_silent"], false, "{s}");
}
