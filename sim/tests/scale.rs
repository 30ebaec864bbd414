//! `chorus-sim scale` end to end: each size in a child process, rows, JSON, picture, and a size
//! that does not fit failing alone.

use std::process::Command;

use chorus_sim::scale::Row;

fn scale(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_chorus-sim"))
        .arg("scale")
        .args(args)
        .output()
        .expect("chorus-sim runs")
}

#[test]
fn every_size_runs_in_its_own_process_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (json, svg) = (dir.path().join("s.json"), dir.path().join("s.svg"));
    let out = scale(&[
        "--nodes",
        "20,60",
        "--memory-limit-gib",
        "4",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Row> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(rows.iter().map(|r| r.nodes).collect::<Vec<_>>(), [20, 60]);
    for r in &rows {
        assert_eq!((r.voters, r.violations, &r.failed), (5, 0, &None), "{r:?}");
        assert!(r.elections >= 1 && r.peak_mb > 0.0, "{r:?}");
        assert!(stdout.contains(&r.digest), "{stdout}");
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(picture.matches("<circle").count(), 2 * 4);
}

#[test]
fn a_size_over_the_memory_limit_fails_alone_and_says_so() {
    let out = scale(&["--nodes", "20", "--memory-limit-gib", "0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("did not fit in 0 GiB"), "{stdout}");
}
