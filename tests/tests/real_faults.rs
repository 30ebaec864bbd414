//! Real clusters under real faults (issue 12): five `chorus run` processes, each in its own
//! network namespace, through partitions, one-way cuts, packet loss, a paused admin and killed
//! admins. Every test ends by merging the nodes' logs with the fault journal and checking the
//! result against docs/design.md §5 — the same checker as every simulation — and each node's log must
//! replay to the decisions it recorded.
//!
//! The tests run one at a time (five processes each on a 2-core machine) and print their
//! failover times; the bounds they assert are liveness bounds for a loaded machine, not
//! measurements (`chorus-real`, in this crate, measures).

use std::sync::Mutex;
use std::time::Duration;

use chorus_tests::netns::{NetCluster, NodeSetup};
use chorus_tests::{wait_until, Timings};

const BIN: &str = env!("CARGO_BIN_EXE_chorus-e2e");
/// 1 s heartbeats, the production default's shape scaled for tests: elections 1.5–3 s.
const TIMINGS: Timings = Timings {
    heartbeat_ms: 500,
    election_min_ms: 1_500,
    election_max_ms: 3_000,
    discovery_ms: 1_000,
};
/// How long a cluster may take to agree after a fault: a liveness bound for a loaded machine.
const AGREE: Duration = Duration::from_secs(30);

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn assert_clean(c: &mut NetCluster) {
    let (trace, problems) = c.stop_and_check();
    assert!(
        problems.is_empty(),
        "the merged history ({}) breaks:\n{}",
        trace.display(),
        problems.join("\n")
    );
}

#[test]
fn a_minority_admin_is_replaced_by_the_majority_and_rejoins_after_the_heal() {
    let _one = serial();
    let mut c = NetCluster::start(BIN, 5, TIMINGS);
    let ((_, term, admin), t) = c.wait_agreed(AGREE);
    eprintln!("cold start: admin n{admin} of term {term} after {t:?}");
    // The admin and one more on one side; three on the other.
    let buddy = (admin + 1) % 5;
    let minority = [admin, buddy];
    let majority: Vec<usize> = (0..5).filter(|i| !minority.contains(i)).collect();
    c.partition(&[&minority, &majority]);
    let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&majority, AGREE);
    assert!(majority.contains(&new_admin) && new_term > term);
    eprintln!("partition: majority elected n{new_admin} of term {new_term} after {failover:?}");
    std::thread::sleep(Duration::from_secs(3));
    c.heal();
    let ((_, _, healed_admin), t) = c.wait_agreed(AGREE);
    eprintln!("heal: all agree on n{healed_admin} after {t:?}");
    assert_clean(&mut c);
}

#[test]
fn a_bridge_node_keeps_the_admin_in_office_and_no_term_is_raised() {
    let _one = serial();
    let mut c = NetCluster::start(BIN, 5, TIMINGS);
    let ((admin_id, term, admin), _) = c.wait_agreed(AGREE);
    // The admin and one more on one side, two on the other; the bridge sees both sides.
    let bridge = (admin + 2) % 5;
    let side_a = [admin, (admin + 1) % 5];
    let side_b = [(admin + 3) % 5, (admin + 4) % 5];
    c.partition(&[&side_a, &side_b]);
    // The bridge node is in no group: it keeps every link (partition cuts only across groups).
    std::thread::sleep(Duration::from_millis(4 * TIMINGS.election_max_ms));
    // The admin still reaches a majority (itself, its side, the bridge): it stays, and side b's
    // pre-votes find no majority, so nobody raised the term.
    let s = c.status(admin).expect("the admin answers");
    assert_eq!(
        (s["role"].as_str(), s["term"].as_u64()),
        (Some("admin"), Some(term))
    );
    for i in side_b.iter().chain([&bridge]) {
        let s = c.status(*i).expect("answers");
        assert_eq!(s["term"].as_u64(), Some(term), "n{i} raised the term: {s}");
    }
    c.heal();
    let ((healed, healed_term, _), _) = c.wait_agreed(AGREE);
    assert_eq!((healed, healed_term), (admin_id, term));
    assert_clean(&mut c);
}

#[test]
fn an_admin_whose_outbound_links_are_cut_is_replaced() {
    let _one = serial();
    let mut c = NetCluster::start(BIN, 5, TIMINGS);
    let ((_, term, admin), _) = c.wait_agreed(AGREE);
    let others: Vec<usize> = (0..5).filter(|i| *i != admin).collect();
    // It still hears everyone; nobody hears it.
    c.cut(&[admin], &others);
    let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&others, AGREE);
    assert!(new_admin != admin && new_term > term);
    eprintln!("one-way cut of the admin: n{new_admin} of term {new_term} after {failover:?}");
    c.heal();
    c.wait_agreed(AGREE);
    assert_clean(&mut c);
}

#[test]
fn a_paused_admin_does_not_act_on_its_old_lease_when_it_wakes() {
    let _one = serial();
    let mut c = NetCluster::start(BIN, 5, TIMINGS);
    let ((_, term, admin), _) = c.wait_agreed(AGREE);
    let others: Vec<usize> = (0..5).filter(|i| *i != admin).collect();
    c.pause(admin);
    let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&others, AGREE);
    assert!(new_term > term);
    eprintln!("SIGSTOP of the admin: n{new_admin} of term {new_term} after {failover:?}");
    // Paused for well over its lease, then woken: it must learn, not lead.
    std::thread::sleep(Duration::from_millis(2 * TIMINGS.election_max_ms));
    c.resume(admin);
    let ((_, agreed_term, _), _) = c.wait_agreed(AGREE);
    assert!(agreed_term >= new_term);
    assert_clean(&mut c);
}

#[test]
fn a_cluster_losing_a_fifth_of_its_packets_with_50_to_150_ms_delays_keeps_an_admin() {
    let _one = serial();
    let mut c = NetCluster::start(BIN, 5, TIMINGS);
    c.wait_agreed(AGREE);
    let before = c.connect_time(0, 1);
    c.set_delay(50, 150);
    // Each way through the queue: a connection takes a delayed SYN and a delayed SYN-ACK.
    let during = c.connect_time(0, 1);
    assert!(
        during >= Duration::from_millis(100),
        "not delayed: {during:?} (before: {before:?})"
    );
    eprintln!("TCP connect between hosts: {before:?} before, {during:?} with 50-150 ms delays");
    c.set_loss(20);
    // TCP carries the loss as more delay (retransmits); elections may happen, but the cluster
    // must keep (or regain) an admin everyone knows.
    std::thread::sleep(Duration::from_secs(8));
    let ((_, term, admin), t) = c.wait_agreed(AGREE);
    eprintln!("20 % loss, 50-150 ms delay: agreed on n{admin} of term {term} ({t:?} after 8 s)");
    // Then the admin is killed under the same conditions.
    let others: Vec<usize> = (0..5).filter(|i| *i != admin).collect();
    c.kill(admin);
    let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&others, AGREE);
    assert!(new_term > term);
    eprintln!("kill -9 under loss and delay: n{new_admin} of term {new_term} after {failover:?}");
    c.restart(admin);
    c.wait_agreed(AGREE);
    // The delayer held packets all along and is still running (issue 39: it used to die on
    // the first late verdict while the run went on as if delayed).
    c.check_injectors().expect("the delayer kept delaying");
    let summary = c.injector_summary();
    eprintln!("{}", summary.join("\n"));
    // Its line first, then the loss's and the faults'; setting the loss with packets held
    // dropped none of them (no late verdict: the rules are rewritten without unregistering
    // their hook).
    assert!(
        summary[0].starts_with("delayer: ")
            && !summary[0].starts_with("delayer: 0 packets")
            && summary[0].contains(" 0 late verdicts"),
        "{summary:?}"
    );
    c.clear_delay();
    c.set_loss(0);
    c.wait_agreed(AGREE);
    assert_clean(&mut c);
}

/// Founding a cluster over slow, lossy links: before the bootstrap backoffs
/// (sim/reproducers/slow-links-bootstrap.toml) five nodes under 20 % loss and 50–150 ms delays
/// never agreed on an electorate; here 10 % loss, so the run stays short.
#[test]
fn five_nodes_found_a_cluster_over_slow_lossy_links() {
    let _one = serial();
    let mut c = NetCluster::hosts(BIN, 5, |_| NodeSetup::plain(TIMINGS));
    c.set_loss(10);
    c.set_delay(50, 150);
    c.start_nodes();
    let ((_, term, admin), t) = c.wait_agreed(Duration::from_secs(120));
    eprintln!("founded over 10 % loss, 50-150 ms: n{admin} of term {term} after {t:?}");
    c.clear_delay();
    c.set_loss(0);
    c.wait_agreed(AGREE);
    // Liveness judged with room for the links' latency (the default bound has none).
    let (trace, problems) = c.stop_and_check_within(Some(120_000));
    assert!(problems.is_empty(), "{}: {problems:?}", trace.display());
}

#[test]
fn five_killed_admins_are_each_replaced_and_come_back_as_followers() {
    let _one = serial();
    let mut c = NetCluster::start(BIN, 5, TIMINGS);
    let mut failovers = Vec::new();
    for round in 0..5 {
        let ((_, term, admin), _) = c.wait_agreed(AGREE);
        let others: Vec<usize> = (0..5).filter(|i| *i != admin).collect();
        c.kill(admin);
        let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&others, AGREE);
        assert!(new_term > term, "round {round}");
        eprintln!(
            "kill -9 #{round} of n{admin}: n{new_admin} of term {new_term} after {failover:?}"
        );
        failovers.push(failover);
        c.restart(admin);
    }
    c.wait_agreed(AGREE);
    failovers.sort();
    eprintln!(
        "kill -9 failovers: p50 {:?} max {:?}",
        failovers[failovers.len() / 2],
        failovers.last().expect("five")
    );
    assert_clean(&mut c);
}

/// An admin whose disk fills stops (it cannot make its decisions durable, so it must not act
/// on them), says why, and is replaced; with the space back it restarts on its log and follows.
#[test]
fn an_admin_whose_disk_fills_stops_is_replaced_and_recovers_once_freed() {
    let _one = serial();
    let mut c = NetCluster::start_with(BIN, 5, |_| NodeSetup {
        disk_mib: Some(16),
        ..NodeSetup::plain(TIMINGS)
    });
    let ((_, term, admin), _) = c.wait_agreed(AGREE);
    let others: Vec<usize> = (0..5).filter(|i| *i != admin).collect();
    c.fill_disk(admin);
    let status = c.wait_exit(admin, AGREE);
    assert!(!status.success(), "{status}");
    let log = chorus_tests::read(&c.nodes[admin].log);
    assert!(
        log.contains("event log storage failed") && log.contains("No space left on device"),
        "the node should say why it stopped:\n{log}"
    );
    let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&others, AGREE);
    assert!(new_term > term);
    eprintln!("full disk of the admin: n{new_admin} of term {new_term} after {failover:?}");
    c.free_disk(admin);
    c.restart(admin);
    c.wait_agreed(AGREE);
    assert_clean(&mut c);
}

/// The checker must catch a broken build: every node forges heartbeat acks (`CHORUS_FAULT`,
/// see node/src/fault.rs), so an admin cut off in a minority keeps renewing its lease while the
/// majority elects another — two leases at once. The same partition with an honest build is
/// `a_minority_admin_is_replaced_by_the_majority_and_rejoins_after_the_heal`.
#[test]
fn the_merged_history_catches_a_build_that_forges_heartbeat_acks() {
    let _one = serial();
    let mut c = NetCluster::start_with(BIN, 5, |_| NodeSetup {
        env: vec![("CHORUS_FAULT".into(), "forge-heartbeat-acks".into())],
        ..NodeSetup::plain(TIMINGS)
    });
    let ((_, _, admin), _) = c.wait_agreed(AGREE);
    let minority = [admin, (admin + 1) % 5];
    let majority: Vec<usize> = (0..5).filter(|i| !minority.contains(i)).collect();
    c.partition(&[&minority, &majority]);
    c.wait_agreed_among(&majority, AGREE);
    let (trace, problems) = c.stop_and_check();
    assert!(
        problems.iter().any(|p| p.contains("lease safety")),
        "the forged acks went unnoticed in {}: {problems:?}",
        trace.display()
    );
    eprintln!("caught: {}", problems[0]);
}

/// Invariant 7 on a real cluster: tasks submitted on both sides of a partition that cuts the
/// admin off — some running when it comes, some submitted in the minority, which cannot place
/// them until the heal — each get exactly one result, at their submitter, with the right
/// output. The merged logs are judged whole: one result per task, placements only under a
/// lease, and every result within the task bound once the cluster is healed (the header's
/// `task_bound_ms`, from the nodes' settings and the tasks' timeouts).
#[test]
fn tasks_submitted_on_both_sides_of_a_partition_of_the_admin_each_get_one_result() {
    const IMAGE: &str = "chorus/sandbox:latest";
    let _one = serial();
    let out = chorus_tests::run_chorus(BIN.as_ref(), &["sandbox", "image", "build"]);
    assert!(
        out.status.success(),
        "the test image builds (this test needs Docker): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = NetCluster::start_with(BIN, 5, |_| NodeSetup {
        args: ["--docker", "--warm-image", IMAGE]
            .map(String::from)
            .to_vec(),
        ..NodeSetup::plain(TIMINGS)
    });
    let ((_, term, admin), _) = c.wait_agreed(AGREE);
    let buddy = (admin + 1) % 5;
    let minority = [admin, buddy];
    let majority: Vec<usize> = (0..5).filter(|i| !minority.contains(i)).collect();
    let spec = |n: usize, secs: u32| {
        serde_json::json!({
            "image": IMAGE,
            "command": ["sh", "-c", format!("sleep {secs}; echo task-{n}")],
            "timeout_ms": 30_000,
        })
    };
    // (submitter, task id, its number)
    let mut tasks: Vec<(usize, String, usize)> = Vec::new();
    // Running when the partition comes: one on each of the five (the least loaded is picked),
    // so the minority runs tasks whose submitters are on the other side.
    for n in 0..5 {
        let at = majority[n % 3];
        tasks.push((at, c.submit(at, &spec(n, 6)), n));
    }
    wait_until(AGREE, Duration::from_millis(20), || {
        tasks
            .iter()
            .all(|(at, id, _)| {
                c.task(*at, id).is_some_and(|t| {
                    !["submitted", "queued"].contains(&t["phase"].as_str().unwrap_or("submitted"))
                })
            })
            .then_some(())
    })
    .expect("the first tasks are placed");
    c.partition(&[&minority, &majority]);
    for n in 5..8 {
        let at = majority[n % 3];
        tasks.push((at, c.submit(at, &spec(n, 2)), n));
    }
    // Accepted in the minority, whose admin's lease runs out: placed after the heal.
    for n in 8..10 {
        tasks.push((buddy, c.submit(buddy, &spec(n, 2)), n));
    }
    let ((_, new_term, new_admin), failover) = c.wait_agreed_among(&majority, AGREE);
    assert!(majority.contains(&new_admin) && new_term > term);
    eprintln!("partition with tasks: n{new_admin} of term {new_term} after {failover:?}");
    std::thread::sleep(Duration::from_secs(3));
    c.heal();
    c.wait_agreed(AGREE);
    for (at, id, n) in &tasks {
        let result = wait_until(Duration::from_secs(120), Duration::from_millis(100), || {
            c.task(*at, id)
                .and_then(|t| (!t["result"].is_null()).then(|| t["result"].clone()))
        })
        .unwrap_or_else(|| panic!("no result for {id} at n{at}: {:?}", c.task(*at, id)));
        assert_eq!(result["status"], "succeeded", "{id}: {result}");
        assert_eq!(result["stdout"], format!("task-{n}\n"), "{id}: {result}");
    }
    let (trace, problems) = c.stop_and_check();
    assert!(
        problems.is_empty(),
        "the merged history ({}) breaks:\n{}",
        trace.display(),
        problems.join("\n")
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(
        header["task_bound_ms"]
            .as_u64()
            .is_some_and(|b| b >= 90_000),
        "the header states the task bound (three 30 s attempts at least): {header}"
    );
    for (at, id, _) in &tasks {
        let result = format!(
            r#""kind":"task_result","node":"{}","task":"{id}""#,
            c.nodes[*at].id
        );
        assert_eq!(text.matches(&result).count(), 1, "one result for {id}");
    }
    // What the scenario is for: the minority ran a task of the majority's (its result could
    // only arrive after the heal, and the new admin may have run it again meanwhile).
    let ran_across = tasks.iter().take(5).any(|(_, id, _)| {
        minority.iter().any(|m| {
            text.contains(&format!(
                r#""kind":"task_started","node":"{}","task":"{id}""#,
                c.nodes[*m].id
            ))
        })
    });
    assert!(
        ran_across,
        "no task of the majority's ran in the minority: {}",
        trace.display()
    );
    // The timing half is judged, not skipped: the same history against a 1 s bound fails it
    // (the minority's tasks waited for the heal).
    let tight = trace.with_file_name("tight.jsonl");
    let (first, rest) = text.split_once('\n').unwrap();
    let mut header = header;
    header["task_bound_ms"] = 1_000.into();
    assert!(first.contains("task_bound_ms"));
    std::fs::write(&tight, format!("{header}\n{rest}")).unwrap();
    let checked = chorus_sim::checker::check_file(&tight, None).unwrap();
    assert!(
        checked.violations.iter().any(|v| v.invariant == 7),
        "{:?}",
        checked.violations
    );
}

/// Runs `f` on a thread of its own inside namespace `ns` (`setns` moves only that thread).
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("namespace file");
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

/// The UDP port of the echo server [`echo`] starts.
const ECHO_PORT: u16 = 9_000;

/// A UDP server at `addr` in namespace `ns` until `stop`: it answers a datagram starting with
/// `p` (a ping) and, for one starting with `f` (the flood), notes how long it took on the way
/// — it carries its sending time, µs after `base` — and returns those.
fn echo(
    ns: &str,
    addr: std::net::Ipv4Addr,
    base: std::time::Instant,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<Duration>> {
    let socket = std::sync::Arc::new(std::sync::Mutex::new(None));
    let bound = socket.clone();
    let server = in_ns(ns, move || {
        let s = std::net::UdpSocket::bind((addr, ECHO_PORT)).expect("echo binds");
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        *bound.lock().unwrap() = Some(());
        let mut one_way = Vec::new();
        let mut buf = [0u8; 64];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            match buf[..n] {
                [b'p', ..] => {
                    s.send_to(&buf[..n], from).expect("echo answers");
                }
                [b'f', ref sent @ ..] if sent.len() == 8 => {
                    let sent_us = u64::from_le_bytes(sent.try_into().unwrap());
                    let now_us = base.elapsed().as_micros() as u64;
                    one_way.push(Duration::from_micros(now_us.saturating_sub(sent_us)));
                }
                _ => {}
            }
        }
        one_way
    });
    // Bound before anyone sends to it.
    wait_until(Duration::from_secs(5), Duration::from_millis(5), || {
        *socket.lock().unwrap()
    })
    .expect("the echo server binds");
    server
}

/// `n` pings, one at a time, from namespace `ns` to the echo server at `to`: their round trips.
fn pings(ns: &str, to: std::net::Ipv4Addr, n: usize) -> Vec<Duration> {
    in_ns(ns, move || {
        let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).expect("binds");
        s.connect((to, ECHO_PORT)).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        (0..n)
            .map(|k| {
                let started = std::time::Instant::now();
                s.send(&[b'p', k as u8]).expect("ping");
                let mut buf = [0u8; 8];
                loop {
                    let got = s.recv(&mut buf).expect("an answer within 3 s");
                    // An answer to an earlier ping is not this one's.
                    if got == 2 && buf[1] == k as u8 {
                        break started.elapsed();
                    }
                }
            })
            .collect()
    })
    .join()
    .expect("pinger")
}

/// Sends `n` flood datagrams back to back from namespace `ns` to the echo server at `to`.
fn flood(ns: &str, to: std::net::Ipv4Addr, base: std::time::Instant, n: usize) {
    in_ns(ns, move || {
        let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).expect("binds");
        s.connect((to, ECHO_PORT)).expect("connects");
        for _ in 0..n {
            let mut d = [b'f'; 9];
            d[1..].copy_from_slice(&(base.elapsed().as_micros() as u64).to_le_bytes());
            // A full socket buffer only slows the flood down.
            while s.send(&d).is_err() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    })
    .join()
    .expect("flooder");
}

/// Issue 39: the delayer under a queue overflow keeps delaying. Two hosts (no nodes), every
/// packet between them held 50–60 ms by queues only 4 packets long. A flood overflows the
/// queue: the kernel lets the excess through undelayed (the queue fails open; it counts none
/// of those, so they are counted here as the queue rule's matches less the packets the
/// delayer read). Then a hook unregistered in the namespace makes the kernel drop the packets
/// it held (`nfqnl_nf_hook_drop`): the delayer's verdicts on them come back `ENOENT` — the
/// error that killed every delaying thread of the issue's run. Through both, the delayer stays
/// healthy, and pings afterwards still take two holds.
#[test]
fn a_delayer_whose_queue_overflows_keeps_delaying() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const MIN_MS: u64 = 50;
    let _one = serial();
    let mut c = NetCluster::hosts(BIN, 2, |_| NodeSetup::plain(TIMINGS));
    c.set_delay_with_queue_len(MIN_MS, MIN_MS + 10, 4);
    let (a, b) = (c.nodes[0].ns.clone(), c.nodes[1].ns.clone());
    let b_addr = c.nodes[1].addr;
    let base = std::time::Instant::now();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let server = echo(&b, b_addr, base, stop.clone());
    let two_holds = Duration::from_millis(2 * MIN_MS);

    let before = pings(&a, b_addr, 5);
    assert!(before.iter().all(|t| *t >= two_holds), "{before:?}");
    let held_before = c.delay_counts().unwrap().held;

    // The flood: far more than 4 packets at once.
    const FLOOD: usize = 5_000;
    flood(&a, b_addr, base, FLOOD);
    std::thread::sleep(Duration::from_millis(300));
    let passed = c.packets_passed_undelayed();
    eprintln!(
        "after a {FLOOD}-datagram flood into 4-packet queues: {:?}, {passed} passed undelayed",
        c.delay_counts().unwrap()
    );
    assert!(
        passed > 0,
        "a flood into a 4-packet queue passed nothing undelayed"
    );
    c.check_injectors()
        .expect("the delayer survives an overflowing queue");

    // The cuts' and losses' rules rewritten while packets are held drop none of them (the
    // harness flushes its chain, it never deletes it: see the next step).
    c.set_loss(0);
    flood(&a, b_addr, base, 4);
    c.set_loss(0);
    std::thread::sleep(Duration::from_millis(300));
    let counts = c.delay_counts().unwrap();
    assert_eq!(
        counts.late_verdicts, 0,
        "rewriting the rules dropped held packets"
    );

    // A hook registered and unregistered while packets are held: the kernel drops them.
    let nft = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &a, "nft"])
            .args(args)
            .output()
            .expect("nft runs");
        assert!(out.status.success(), "nft {args:?}: {out:?}");
    };
    nft(&["add", "table", "inet", "scratch"]);
    nft(&[
        "add", "chain", "inet", "scratch", "c", "{", "type", "filter", "hook", "output",
        "priority", "10", ";", "}",
    ]);
    flood(&a, b_addr, base, 4);
    nft(&["delete", "table", "inet", "scratch"]);
    std::thread::sleep(Duration::from_millis(300));
    let counts = c.delay_counts().unwrap();
    eprintln!("after a hook was unregistered with packets held: {counts:?}");
    assert!(
        counts.late_verdicts > 0,
        "no late verdict after the kernel dropped the held packets: {counts:?}"
    );
    c.check_injectors()
        .expect("the delayer survives late verdicts");

    let after = pings(&a, b_addr, 5);
    assert!(
        after.iter().all(|t| *t >= two_holds),
        "not delayed after the overflow: {after:?}"
    );
    let counts = c.delay_counts().unwrap();
    assert!(counts.held >= held_before + 10, "{counts:?}");
    stop.store(true, Ordering::Relaxed);
    let one_way = server.join().expect("echo server");
    let delayed = one_way
        .iter()
        .filter(|t| **t >= Duration::from_millis(MIN_MS))
        .count();
    eprintln!(
        "pings {before:?} before, {after:?} after; of {} flood datagrams received, {delayed} held",
        one_way.len()
    );
    assert!(
        delayed > 0 && delayed < one_way.len(),
        "{delayed} of {}",
        one_way.len()
    );
    for line in c.injector_summary() {
        eprintln!("{line}");
    }
    c.check_injectors().expect("still delaying");
}

/// Issue 39: a delaying thread killed mid-run (the test hook crashes it) is noticed: the
/// check names its namespace, and every wait on the cluster fails at once instead of going on
/// undelayed.
#[test]
fn a_killed_delayer_fails_the_check_and_every_wait_naming_its_namespace() {
    let _one = serial();
    let mut c = NetCluster::hosts(BIN, 2, |_| NodeSetup::plain(TIMINGS));
    c.set_delay(20, 30);
    c.check_injectors().expect("healthy at first");
    let ns = c.nodes[1].ns.clone();
    assert!(c.injector_kill_switch().unwrap().kill(&ns));
    let err = wait_until(Duration::from_secs(2), Duration::from_millis(5), || {
        c.check_injectors().err()
    })
    .expect("the killed delayer is noticed within 2 s");
    assert!(err.contains(&ns), "{err}");
    eprintln!("check_injectors: {err}");
    let started = std::time::Instant::now();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.wait_agreed_among(&[0, 1], AGREE)
    }));
    let panic = waited.expect_err("a wait with a dead injector fails");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("a fault injector stopped") && message.contains(&ns),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 39: `chorus-real` whose delayer is killed mid-run (its hidden test hook) exits
/// non-zero within seconds, saying which injector stopped — never a run that goes on
/// undelayed while its summary says otherwise.
#[test]
fn chorus_real_fails_at_once_when_its_delayer_is_killed_mid_run() {
    use std::io::BufRead;
    let _one = serial();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_chorus-real"))
        .args([
            "--bin", BIN, "--nodes", "3", "--fault", "kill", "--faults", "1000",
        ])
        .args([
            "--heartbeat-ms",
            "500",
            "--election-timeout-ms",
            "1500..3000",
        ])
        .args(["--delay-ms", "20..40", "--kill-injector-after-ms", "10000"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("chorus-real starts");
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, String)>();
    let readers: Vec<_> = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|pipe| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send((std::time::Instant::now(), line));
            }
        })
    })
    .collect();
    drop(tx);
    let status = wait_until(Duration::from_secs(120), Duration::from_millis(50), || {
        child.try_wait().expect("wait")
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let exited = std::time::Instant::now();
    for r in readers {
        r.join().expect("reader");
    }
    let lines: Vec<(std::time::Instant, String)> = rx.into_iter().collect();
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let status = status.unwrap_or_else(|| panic!("chorus-real ran on for 2 min:\n{text}"));
    let (killed_at, killed) = lines
        .iter()
        .find(|(_, l)| l.contains("test hook: killing the delayer of"))
        .unwrap_or_else(|| panic!("the hook never fired:\n{text}"));
    let ns = killed.rsplit(' ').next().unwrap();
    assert!(!status.success(), "{status}\n{text}");
    assert!(
        text.contains(&format!("a fault injector stopped: the delayer of {ns}")),
        "the failure does not name the injector:\n{text}"
    );
    let took = exited.duration_since(*killed_at);
    eprintln!("chorus-real exited ({status}) {took:?} after its delayer was killed");
    assert!(took < Duration::from_secs(5), "{took:?}:\n{text}");
    assert!(
        lines
            .iter()
            .any(|(t, l)| t < killed_at && l.starts_with("cold start")),
        "killed before the run was under way:\n{text}"
    );
    // The failed run kept its data for a post-mortem; this failure was the point.
    if let Some(kept) = text
        .lines()
        .find_map(|l| l.strip_prefix("netns cluster data kept in "))
    {
        let _ = std::fs::remove_dir_all(kept.trim());
    }
}

/// The short soak of issue 39, in CI: `chorus-real` for 3 minutes with every fault kind in
/// turn under 5 % loss and 20–80 ms delays (the 30-minute soak's conditions), tasks of every
/// ending submitted throughout, ending with the merged history checked, every log replayed,
/// every task ended as written with one result, and no sandbox container left. It must also say what each injector did, and
/// the delay must have held for the whole run: no packet passed undelayed, and no held packet
/// was dropped under the delayer (a late verdict; the rules' rewrites once did that at every
/// fault). ~3.2 min; `docs/soak.md` has the command and the longer runs.
#[test]
fn a_three_minute_soak_with_every_fault_kind_and_tasks_under_loss_and_delay_ends_clean() {
    let _one = serial();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_chorus-real"))
        .args([
            "--bin",
            BIN,
            "--fault",
            "all",
            "--duration",
            "3m",
            "--faults",
            "1000",
        ])
        .args([
            "--loss",
            "5",
            "--delay-ms",
            "20..80",
            "--liveness-bound-ms",
            "30000",
            "--tasks",
            "--sample-secs",
            "15",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("chorus-real runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "{}", out.status);
    assert!(text.contains("check: invariants 1-5 hold on the merged history"));
    let line = |start: &str| {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` line"))
            .to_owned()
    };
    let delayer = line("delayer:");
    assert!(!delayer.starts_with("delayer: 0 packets"), "{delayer}");
    assert!(
        delayer.contains(" 0 late verdicts") && delayer.contains("; 0 passed undelayed"),
        "{delayer}"
    );
    let faults = line("faults:");
    for kind in [
        "partitions",
        "one-way cuts",
        "heals",
        "pauses",
        "kills",
        "restarts",
    ] {
        assert!(!faults.contains(&format!(" 0 {kind}")), "{faults}");
    }
    assert!(!line("loss:").contains(", 0 dropped"), "{}", line("loss:"));
    // Tasks of every ending throughout, each ended as written (chorus-real fails the run
    // otherwise; the line must say so too), and no sandbox left behind.
    let tasks = line("tasks:");
    let count = |word: &str| -> usize {
        let before = tasks.split(word).next().unwrap_or_default();
        before
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let submitted = count(" submitted");
    assert!(submitted >= 50, "a task soak submits throughout: {tasks}");
    assert_eq!(count(" ended as written"), submitted, "{tasks}");
    for ending in [
        "succeeded",
        "failed",
        "timed_out",
        "out_of_memory",
        "cancelled",
    ] {
        assert!(
            !tasks.contains(&format!("(0 {ending}")) && !tasks.contains(&format!(" 0 {ending}")),
            "{tasks}"
        );
    }
    assert_eq!(
        line("sandbox containers left"),
        "sandbox containers left by the nodes: 0"
    );
    // Each node's footprint sampled through the run, with its slope.
    for i in 0..5 {
        let n = line(&format!("n{i}: rss"));
        assert!(n.contains("MiB/min") && n.contains("KiB/min"), "{n}");
    }
    eprintln!("soak took {:?}", started.elapsed());
    // chorus-real keeps its data for a post-mortem; a clean run's is not needed.
    if let Some(kept) = text
        .lines()
        .find_map(|l| l.strip_prefix("netns cluster data kept in "))
    {
        let _ = std::fs::remove_dir_all(kept.trim());
    }
}
