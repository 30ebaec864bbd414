//! `vs-etcd --chorus-only`: one round of each measure prints the three CHORUS rows with finite
//! numbers, and the idle traffic rows (payload, IP bytes) a byte rate each (the comparison with etcd itself is run by
//! hand; see docs/measurements.md).

use std::process::Command;

#[test]
fn chorus_only_round_prints_three_finite_rows() {
    let out = Command::new(env!("CARGO_BIN_EXE_vs-etcd"))
        .args(["--rounds", "1", "--timeouts", "0.9", "--chorus-only"])
        .args(["--idle-secs", "2"])
        .arg("--chorus")
        .arg(env!("CARGO_BIN_EXE_chorus-e2e"))
        .output()
        .expect("vs-etcd runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vs-etcd failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (idle, rows): (Vec<&str>, Vec<&str>) = text
        .lines()
        .filter(|l| l.contains("| 0.9 s |"))
        .partition(|l| l.starts_with("| TCP payload") || l.starts_with("| IP bytes"));
    assert_eq!(rows.len(), 3, "three rows expected:\n{text}");
    // Idle traffic counted twice: TCP payload (`ss -ti`) and IP bytes (nftables).
    assert_eq!(idle.len(), 2, "two idle traffic rows expected:\n{text}");
    for row in idle {
        let bytes = row.split('|').nth(4).expect("a CHORUS column").trim();
        let rate: f64 = bytes
            .split_whitespace()
            .next()
            .and_then(|b| b.parse().ok())
            .unwrap_or(0.0);
        assert!(rate > 0.0, "members exchange bytes while idle: {row}");
    }
    for row in rows {
        let chorus = row.split('|').nth(4).expect("a CHORUS column").trim();
        let numbers: Vec<f64> = chorus
            .trim_end_matches(" s")
            .split(" / ")
            .map(|x| x.trim().parse().unwrap_or(f64::NAN))
            .collect();
        assert_eq!(numbers.len(), 3, "p50 / p90 / max in {row}");
        assert!(
            numbers.iter().all(|x| x.is_finite() && *x > 0.0),
            "finite times in {row}"
        );
    }
}
