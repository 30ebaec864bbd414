//! End to end: `chorus members` on real `chorus run` processes — a standby that joined late is
//! added as a voter through a follower (which forwards to the admin), a voter is removed, a
//! bad request fails with the admin's reason, and the forwarding node's log replays.

use std::time::Duration;

use chorus_tests::{wait_until, Cluster, Timings, Value};

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");

/// Generous: a change commits after one heartbeat round (300 ms here); this bounds liveness
/// on two loaded cores, it is not a performance figure.
const SETTLE: Duration = Duration::from_secs(20);

fn addr(c: &Cluster, i: usize) -> String {
    format!("127.0.0.1:{}", c.nodes[i].http_port)
}

fn id(c: &Cluster, i: usize) -> String {
    c.status(i).expect("status")["node_id"]
        .as_str()
        .expect("node id")
        .to_owned()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits until every running node holds an electorate of `version` with exactly `members`.
fn wait_electorate(c: &Cluster, version: u64, members: &[String]) {
    let mut want = members.to_vec();
    want.sort();
    let agreed = wait_until(SETTLE, Duration::from_millis(50), || {
        (0..c.nodes.len())
            .filter(|i| c.is_up(*i))
            .all(|i| {
                c.status(i).is_some_and(|s| {
                    let got: Vec<String> = s["electorate"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    s["electorate_version"] == version && got == want
                })
            })
            .then_some(())
    });
    assert!(
        agreed.is_some(),
        "not every node holds version {version} {want:?}: {:?}",
        (0..c.nodes.len())
            .map(|i| c
                .status(i)
                .map(|s| (s["electorate_version"].clone(), s["electorate"].clone())))
            .collect::<Vec<_>>()
    );
}

/// Issue 10: a real cluster adds and removes a voter through `chorus members`.
#[test]
fn members_add_and_remove_a_voter_through_any_node() {
    let mut c = Cluster::start(BIN, 3, Timings::FAST);
    let (admin, _, a) = c.wait_agreed(Duration::from_secs(20));
    let ids: Vec<String> = (0..3).map(|i| id(&c, i)).collect();
    wait_electorate(&c, 1, &ids);

    // A fourth voter starts late: it joins as a standby, never founds its own cluster.
    let d = c.add_node();
    let d_id = id(&c, d);
    let listed = wait_until(SETTLE, Duration::from_millis(100), || {
        let out = c.chorus(&["members", "--addr", &addr(&c, a), "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        v["members"]
            .as_array()?
            .iter()
            .any(|m| {
                m["node_id"] == d_id.as_str() && m["role"] == "standby" && m["reachable"] == true
            })
            .then_some(v)
    });
    assert!(
        listed.is_some(),
        "the late node is not listed as a reachable standby"
    );
    let table = c.chorus(&["members", "--addr", &addr(&c, a)]);
    let table_text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{}", text(&table));
    assert!(
        table_text.contains("electorate version 1 (agreed at bootstrap)"),
        "{table_text}"
    );
    assert!(
        table_text.contains(admin.as_str()) && table_text.contains("voter*"),
        "{table_text}"
    );

    // Added through a follower, which forwards to the admin and answers once it committed.
    let f = (0..3).find(|i| *i != a).expect("a follower");
    let out = c.chorus(&["members", "--addr", &addr(&c, f), "add", &d_id]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("committed: the electorate is now version 2"),
        "{}",
        text(&out)
    );
    let mut four = ids.clone();
    four.push(d_id.clone());
    wait_electorate(&c, 2, &four);

    // A name that is no node id is refused as such (exit 1).
    let out = c.chorus(&["members", "--addr", &addr(&c, f), "add", "no-such-node"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a node id: \"no-such-node\""),
        "{}",
        text(&out)
    );
    // A node id no one here knows fails with the admin's reason (exit 1).
    let stranger = "12D3KooWLJu94BJSujZvmyLfAv2iiboi2skJPVNamQpZcUkLpuft";
    let out = c.chorus(&["members", "--addr", &addr(&c, f), "add", stranger]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not connected to the admin"),
        "{}",
        text(&out)
    );
    let out = c.chorus(&["members", "--addr", &addr(&c, d), "add", &ids[f]]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a voter already"),
        "{}",
        text(&out)
    );

    // Removed through the new voter: the follower that forwarded before leaves the electorate.
    let out = c.chorus(&["members", "--addr", &addr(&c, d), "remove", &ids[f]]);
    assert!(out.status.success(), "{}", text(&out));
    let remaining: Vec<String> = four.iter().filter(|m| **m != ids[f]).cloned().collect();
    wait_electorate(&c, 3, &remaining);
    // The cluster keeps one admin throughout; the removed node follows as a standby.
    let (admin_after, _, _) = c.wait_agreed(SETTLE);
    assert_eq!(admin_after, admin, "no election was needed");
    let s = c.status(f).expect("status");
    assert_eq!(s["role"], "follower");

    // The forwarding node's log replays to the decisions it recorded (request ids included).
    c.terminate(f).expect("stops");
    let data_dir = c.nodes[f].data_dir.to_string_lossy().into_owned();
    let out = c.chorus(&["replay", "--data-dir", &data_dir]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Issue 10: a cluster that lost its quorum for good comes back only through the loudly named
/// operator action on one survivor, and grows again with `chorus members add`.
#[test]
fn a_lost_quorum_comes_back_only_by_force_new_cluster() {
    let t = Timings::FAST;
    let mut c = Cluster::start(BIN, 3, t);
    let (_, _, a) = c.wait_agreed(Duration::from_secs(20));
    // Two of three voters are gone for good, the admin among them.
    let s = (0..3).find(|i| *i != a).expect("a survivor");
    for i in (0..3).filter(|i| *i != s) {
        c.kill(i);
    }
    // The survivor alone never elects: wait out several election bounds.
    let bound = Duration::from_millis(3 * (t.election_max_ms + 2 * t.heartbeat_ms));
    let elected = wait_until(bound, Duration::from_millis(100), || {
        c.status(s).filter(|st| st["role"] == "admin")
    });
    assert!(elected.is_none(), "one voter of three elected itself");

    let data_dir = c.nodes[s].data_dir.to_string_lossy().into_owned();
    // Not while it runs, and not without saying so.
    let out = c.chorus(&["recover", "--data-dir", &data_dir, "--force-new-cluster"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("is running") && said.contains("stop it first") && !said.contains("copy"),
        "{}",
        text(&out)
    );
    c.terminate(s).expect("stops");
    let out = c.chorus(&["recover", "--data-dir", &data_dir]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    let out = c.chorus(&["recover", "--data-dir", &data_dir, "--force-new-cluster"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("FORCED A NEW ELECTORATE") && said.contains("WARNING"),
        "{said}"
    );

    // Started again, it elects itself with the one-node electorate, version 2.
    c.start_node(s);
    let st = chorus_tests::wait_admin(
        c.nodes[s].http_port,
        Duration::from_secs(20),
        &c.nodes[s].log,
    );
    assert_eq!(st["electorate_version"], 2);
    assert_eq!(st["electorate"].as_array().map(Vec::len), Some(1));

    // A new voter joins as a standby and is added back.
    let n = c.add_node();
    let new_id = id(&c, n);
    let added = wait_until(SETTLE, Duration::from_millis(200), || {
        let out = c.chorus(&["members", "--addr", &addr(&c, s), "add", &new_id]);
        out.status.success().then_some(())
    });
    assert!(added.is_some(), "the new node was never added");
    wait_electorate(&c, 3, &[id(&c, s), new_id]);

    // The survivor's log, forced event included, replays to what it recorded.
    c.terminate(s).expect("stops");
    let out = c.chorus(&["replay", "--data-dir", &data_dir]);
    assert!(out.status.success(), "{}", text(&out));
}

/// `chorus members transfer`: asked through a follower (which names the admin's HTTP address,
/// where the CLI asks again), the named voter becomes admin in the next term within well under
/// one election timeout; the admin's pick works the same; a name that is no voter is refused
/// with the reason. Then a graceful stop of the admin hands over as fast: no node waits out a
/// timeout (issue 36: 0.36 s at 3 s timeouts before handover).
#[test]
fn members_transfer_moves_the_admin_at_once_and_a_graceful_stop_hands_over() {
    let t = Timings::FAST;
    let c = Cluster::start(BIN, 3, t);
    let (_, term, a) = c.wait_agreed(SETTLE);
    let (f1, f2) = ((a + 1) % 3, (a + 2) % 3);
    let target = id(&c, f2);
    let asked = std::time::Instant::now();
    let out = c.chorus(&["members", "--addr", &addr(&c, f1), "transfer", &target]);
    let took = asked.elapsed();
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains(&target) && said.contains("admin of term"),
        "{said}"
    );
    let (now, new_term, _) = c.wait_agreed(SETTLE);
    assert_eq!((now.as_str(), new_term), (target.as_str(), term + 1));
    eprintln!("members transfer: {took:?} for the CLI round trip ({said})");
    // Well inside the minimum election timeout: a handover, not an election after a timeout.
    assert!(took < Duration::from_millis(t.election_min_ms), "{took:?}");

    // A well-formed id of no node of this cluster.
    let out = c.chorus(&[
        "members",
        "--addr",
        &addr(&c, f2),
        "transfer",
        "12D3KooWLJu94BJSujZvmyLfAv2iiboi2skJPVNamQpZcUkLpuft",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not another voter"),
        "{}",
        text(&out)
    );

    // The admin's pick.
    let out = c.chorus(&["members", "--addr", &addr(&c, f2), "transfer"]);
    assert!(out.status.success(), "{}", text(&out));
    let (picked, picked_term, p) = c.wait_agreed(SETTLE);
    assert_ne!(picked, target);
    assert_eq!(picked_term, term + 2);

    // A graceful stop of the admin: the two others agree on a new admin quickly.
    let stopped = std::time::Instant::now();
    c.signal_term(p);
    let handed = wait_until(SETTLE, Duration::from_millis(5), || {
        let others: Vec<usize> = (0..3).filter(|i| *i != p).collect();
        let seen: Vec<(String, u64)> = others
            .iter()
            .filter_map(|i| {
                let s = c.status(*i)?;
                Some((s["admin"].as_str()?.to_owned(), s["term"].as_u64()?))
            })
            .collect();
        (seen.len() == 2 && seen[0] == seen[1] && seen[0].1 > picked_term).then(|| seen[0].clone())
    })
    .expect("a new admin after the graceful stop");
    let graceful = stopped.elapsed();
    eprintln!("graceful stop: {graceful:?} to {handed:?}");
    assert_eq!(handed.1, picked_term + 1, "one election, in the next term");
    assert!(
        graceful < Duration::from_millis(t.election_min_ms),
        "{graceful:?}"
    );
}

/// Every running node's electorate as `/status` says: (version, members sorted).
fn electorates(c: &Cluster) -> Vec<(u64, Vec<String>)> {
    (0..c.nodes.len())
        .filter(|i| c.is_up(*i))
        .filter_map(|i| {
            let s = c.status(i)?;
            let mut m: Vec<String> = s["electorate"]
                .as_array()?
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect();
            m.sort();
            Some((s["electorate_version"].as_u64()?, m))
        })
        .collect()
}

/// Issue 54: an operator's `members remove` of a live voter stands. Autopilot (stabilization
/// shortened to 600 ms, so it would promote a stable standby within about a second) leaves the
/// removed node out for ten stabilization times, through a handover to another admin, and
/// through the admin retiring itself with `members leave` — which commits, answers, and stops
/// that node with exit 0. Only `members add` brings the removed node back.
///
/// Fails on the old code: autopilot made the removed node a voter again (version 3) within the
/// first wait.
#[test]
fn a_removed_live_voter_stays_out_and_leave_retires_the_admin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("chorus.toml");
    std::fs::write(
        &config,
        "[protocol]\nstabilization_time_ms = 600\ndead_voter_timeout_ms = 120000\n",
    )
    .expect("config");
    let config = config.to_string_lossy().into_owned();
    let mut c = Cluster::start_with(BIN, 4, Timings::FAST, &["--config", &config]);
    let (_, _, a) = c.wait_agreed(SETTLE);
    let ids: Vec<String> = (0..4).map(|i| id(&c, i)).collect();
    wait_electorate(&c, 1, &ids);
    let stable = Duration::from_millis(10 * 600);

    // The operator removes a live follower, through another follower.
    let f = (a + 1) % 4;
    let via = (a + 2) % 4;
    let out = c.chorus(&["members", "--addr", &addr(&c, via), "remove", &ids[f]]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("committed"),
        "{}",
        text(&out)
    );
    let three: Vec<String> = ids.iter().filter(|m| **m != ids[f]).cloned().collect();
    wait_electorate(&c, 2, &three);
    std::thread::sleep(stable);
    let mut sorted = three.clone();
    sorted.sort();
    assert!(
        electorates(&c).iter().all(|e| *e == (2, sorted.clone())),
        "autopilot undid the operator's removal: {:?}",
        electorates(&c)
    );
    let listed = c.chorus(&["members", "--addr", &addr(&c, a), "--json"]);
    let v: Value = serde_json::from_slice(&listed.stdout).expect("members JSON");
    assert_eq!(v["removed"], serde_json::json!([ids[f].clone()]), "{v}");
    let table = c.chorus(&["members", "--addr", &addr(&c, a)]);
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.contains("removed by an operator") && table.contains(&ids[f]),
        "{table}"
    );

    // The admin changes: the new one leaves the removed node out too.
    let next = (a + 3) % 4;
    let out = c.chorus(&["members", "--addr", &addr(&c, a), "transfer", &ids[next]]);
    assert!(out.status.success(), "{}", text(&out));
    let (admin, _, b) = c.wait_agreed(SETTLE);
    assert_eq!(admin, ids[next]);
    std::thread::sleep(stable);
    assert!(
        electorates(&c).iter().all(|e| *e == (2, sorted.clone())),
        "the new admin's autopilot undid the removal: {:?}",
        electorates(&c)
    );

    // The admin retires itself: the removal commits, the CLI says so, the node exits 0 and the
    // two voters left elect one of them.
    let out = c.chorus(&["members", "--addr", &addr(&c, b), "leave"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains("left the cluster") && said.contains("stops now"),
        "{said}"
    );
    let status = c.wait_exit(b, SETTLE).expect("the node that left stops");
    assert!(status.success(), "{status:?}");
    let two: Vec<String> = three.iter().filter(|m| **m != ids[b]).cloned().collect();
    wait_electorate(&c, 3, &two);
    let (admin, _, _) = c.wait_agreed(SETTLE);
    assert!(two.contains(&admin), "{admin} is no voter left");
    std::thread::sleep(stable);
    let mut sorted_two = two.clone();
    sorted_two.sort();
    assert!(
        electorates(&c)
            .iter()
            .all(|e| *e == (3, sorted_two.clone())),
        "autopilot brought back a node an operator removed: {:?}",
        electorates(&c)
    );

    // `leave` at a node that is no voter: nothing to remove, it stops all the same.
    let out = c.chorus(&["members", "--addr", &addr(&c, f), "leave"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not a voter"),
        "{}",
        text(&out)
    );
    assert!(c.wait_exit(f, SETTLE).is_some_and(|s| s.success()));

    // Restarted with its data dir, the removed node stays out; the operator's add brings it
    // back.
    c.start_node(f);
    std::thread::sleep(stable);
    assert!(
        electorates(&c)
            .iter()
            .all(|e| *e == (3, sorted_two.clone())),
        "a restart undid the operator's removal: {:?}",
        electorates(&c)
    );
    let (_, _, now) = c.wait_agreed(SETTLE);
    let added = wait_until(SETTLE, Duration::from_millis(200), || {
        let out = c.chorus(&["members", "--addr", &addr(&c, now), "add", &ids[f]]);
        out.status.success().then_some(())
    });
    assert!(added.is_some(), "the removed node was never added back");
    let mut back = two.clone();
    back.push(ids[f].clone());
    wait_electorate(&c, 4, &back);
}

/// Issue 51, finding 11: a cluster founded alone (`--bootstrap-expect 1`) grows by autopilot.
/// Voters started later with another `--bootstrap-expect` (3, then 2: an operator's value for
/// nodes that join) take the founder's electorate, join as standbys and are promoted, one at
/// a time, by the same admin.
///
/// Fails on the old code: the first joiner refused the founder's version-1 electorate of one
/// as `settings_mismatch`, held none, and version 2 never came.
#[test]
fn a_cluster_founded_alone_grows_by_autopilot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("chorus.toml");
    std::fs::write(&config, "[protocol]\nstabilization_time_ms = 600\n").expect("config");
    let config = config.to_string_lossy().into_owned();
    let mut c = Cluster::start_with(BIN, 1, Timings::FAST, &["--config", &config]);
    let (admin, _, _) = c.wait_agreed(SETTLE);
    let mut ids = vec![id(&c, 0)];
    assert_eq!(admin, ids[0]);
    wait_electorate(&c, 1, &ids);

    // One joiner at a time, each expecting more voters than join with it.
    for (expect, version) in [(3, 2), (2, 3)] {
        c.expect = expect;
        let j = c.add_node();
        ids.push(id(&c, j));
        wait_electorate(&c, version, &ids);
    }
    let (after, _, _) = c.wait_agreed(SETTLE);
    assert_eq!(after, admin, "no election was needed");
    for i in 0..c.nodes.len() {
        let log = std::fs::read_to_string(&c.nodes[i].log).unwrap_or_default();
        assert!(!log.contains("settings_mismatch"), "n{i}:\n{log}");
    }
}
