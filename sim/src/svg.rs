//! An SVG timeline of a trace: one row per node coloured by role (grey while down), a labelled
//! time axis, shading on the rows of the nodes a partition or cut separated (one shade per side),
//! a red mark at each crash, and a mark with the term at each election won.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::trace::{Header, Line, Record};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const ROW: f64 = 16.0;
const TOP: f64 = 48.0;
/// Room under the rows for the time axis.
const AXIS: f64 = 28.0;
/// Rows beyond this are left out (a note says so): a picture of 10 000 rows helps nobody.
const MAX_ROWS: usize = 200;
/// Least horizontal room, px, between two term labels on one row (closer ones are left out).
const LABEL_GAP: f64 = 34.0;
/// The shades of the sides of a partition, in turn.
const SIDE_SHADES: [&str; 3] = ["#000000", "#5b2a86", "#1b6e3a"];

fn colour(state: &str) -> &'static str {
    match state {
        "admin" => "#d62728",
        "candidate" => "#ff7f0e",
        "pre_candidate" => "#ffd27f",
        "follower" => "#9ecae1",
        _ => "#dddddd",
    }
}

/// A shaded stretch of one row: (row, from, to, side).
type Band = (usize, u64, u64, usize);

/// Renders the timeline.
pub fn render(header: &Header, lines: &[Line]) -> String {
    let rows = header.nodes.min(MAX_ROWS);
    let end = header
        .duration_ms
        .max(lines.last().map_or(1, |l| l.t))
        .max(1);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |t: u64| LEFT + plot * t as f64 / end as f64;
    let bottom = TOP + rows as f64 * ROW;
    let height = bottom + AXIS + if header.nodes > rows { 20.0 } else { 6.0 };
    let node_ix = |n: &str| {
        n.strip_prefix('n')
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < rows)
    };

    // Per node: (since, state) of the open segment, and closed segments.
    let mut open: BTreeMap<usize, (u64, String)> = BTreeMap::new();
    let mut segments: Vec<(usize, u64, u64, String)> = Vec::new();
    // Open shading: row -> (since, side); a new partition replaces the old one, a heal ends all.
    let mut shaded: BTreeMap<usize, (u64, usize)> = BTreeMap::new();
    let mut bands: Vec<Band> = Vec::new();
    let mut crashes: Vec<(usize, u64)> = Vec::new();
    let mut elections: Vec<(usize, u64, u64)> = Vec::new();
    let mut set = |node: &str, t: u64, state: &str, open: &mut BTreeMap<usize, (u64, String)>| {
        let Some(i) = node_ix(node) else {
            return;
        };
        if let Some((since, old)) = open.insert(i, (t, state.to_owned())) {
            segments.push((i, since, t, old));
        }
    };
    let close_all = |t: u64, shaded: &mut BTreeMap<usize, (u64, usize)>, bands: &mut Vec<Band>| {
        for (row, (since, side)) in std::mem::take(shaded) {
            bands.push((row, since, t, side));
        }
    };
    for l in lines {
        match &l.record {
            Record::Role { node, role, .. } => set(node, l.t, role, &mut open),
            Record::Restart { node } => set(node, l.t, "follower", &mut open),
            Record::Crash { node } => {
                set(node, l.t, "down", &mut open);
                if let Some(i) = node_ix(node) {
                    crashes.push((i, l.t));
                }
            }
            Record::BecameAdmin { node, term, .. } => {
                if let Some(i) = node_ix(node) {
                    elections.push((i, l.t, *term));
                }
            }
            Record::Partition { groups } => {
                close_all(l.t, &mut shaded, &mut bands);
                for (side, group) in cut_off_sides(groups) {
                    for node in group {
                        if let Some(i) = node_ix(node) {
                            shaded.insert(i, (l.t, side));
                        }
                    }
                }
            }
            Record::Cut { from, to } => {
                // Both ends of a one-way cut are affected; each side gets its own shade.
                for (side, group) in [from, to].into_iter().enumerate() {
                    for node in group {
                        if let Some(i) = node_ix(node) {
                            shaded.entry(i).or_insert((l.t, side));
                        }
                    }
                }
            }
            Record::Heal => close_all(l.t, &mut shaded, &mut bands),
            _ => {}
        }
    }
    for (i, (since, state)) in open {
        segments.push((i, since, end, state));
    }
    close_all(end, &mut shaded, &mut bands);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" font-family="monospace" font-size="10">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{WIDTH}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="16" font-size="12">{} · {} · seed {} · {} nodes · {}</text>"#,
        header.scenario,
        header.engine,
        header.seed,
        header.nodes,
        duration_label(end)
    );
    legend(&mut s);

    for (i, a, b, state) in &segments {
        let y = TOP + *i as f64 * ROW;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
            x(*a),
            y + 1.0,
            (x(*b) - x(*a)).max(0.5),
            ROW - 2.0,
            colour(state)
        );
    }
    // Bands go over the rows they cover so they stay visible, and only over those rows.
    for (i, a, b, side) in bands {
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{ROW}" fill="{}" opacity="0.22"/>"#,
            x(a),
            TOP + i as f64 * ROW,
            (x(b) - x(a)).max(1.0),
            SIDE_SHADES[side % SIDE_SHADES.len()]
        );
    }
    for i in 0..rows {
        let _ = writeln!(
            s,
            r#"<text x="4" y="{:.1}">n{i}</text>"#,
            TOP + i as f64 * ROW + ROW - 4.0
        );
    }
    for (i, t) in crashes {
        let y = TOP + i as f64 * ROW;
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#b00" stroke-width="2"/>"##,
            x(t),
            y,
            y + ROW
        );
    }
    elections_marks(&mut s, &elections, &x);
    axis(&mut s, end, bottom, &x);
    if header.nodes > rows {
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}">({} more nodes not drawn)</text>"#,
            bottom + AXIS + 12.0,
            header.nodes - rows
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The sides of a partition that are cut off: every group but the one strictly largest (the
/// side that keeps a majority); with no strictly largest group, every group. Numbered in turn.
fn cut_off_sides(groups: &[Vec<String>]) -> Vec<(usize, &Vec<String>)> {
    let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
    let at_largest = groups.iter().filter(|g| g.len() == largest).count();
    groups
        .iter()
        .filter(|g| at_largest > 1 || g.len() < largest)
        .enumerate()
        .collect()
}

/// The legend: each swatch before its label.
fn legend(s: &mut String) {
    let y = 26.0;
    let mut x = LEFT;
    let mut item = |s: &mut String, swatch: &str, label: &str| {
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{y}" width="10" height="10" {swatch}/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            x + 13.0,
            y + 9.0
        );
        x += 13.0 + label.chars().count() as f64 * 6.1 + 14.0;
    };
    for role in ["admin", "candidate", "pre_candidate", "follower", "down"] {
        let label = role.replace('_', "-");
        item(s, &format!(r#"fill="{}""#, colour(role)), &label);
    }
    item(
        s,
        &format!(r#"fill="{}" opacity="0.35""#, SIDE_SHADES[0]),
        "cut off: side 1",
    );
    item(
        s,
        &format!(r#"fill="{}" opacity="0.35""#, SIDE_SHADES[1]),
        "side 2",
    );
    item(s, r##"fill="#b00""##, "crash");
    item(s, r##"fill="#000""##, "T: elected admin of term T");
}

/// A black tick at each election won, with the term beside it where there is room.
fn elections_marks(s: &mut String, elections: &[(usize, u64, u64)], x: &impl Fn(u64) -> f64) {
    let mut last_label: BTreeMap<usize, f64> = BTreeMap::new();
    let mut rows_seen = BTreeSet::new();
    for &(i, t, term) in elections {
        let y = TOP + i as f64 * ROW;
        let px = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#000" stroke-width="2"/>"##,
            y,
            y + ROW
        );
        rows_seen.insert(i);
        let room = last_label.get(&i).is_none_or(|prev| px - prev >= LABEL_GAP);
        if room {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="9" font-weight="bold" fill="#000">T{term}</text>"##,
                px + 3.0,
                y + ROW - 4.0
            );
            last_label.insert(i, px);
        }
    }
}

/// The time axis under the rows: a line, ticks at a round step, labels, light grid lines.
fn axis(s: &mut String, end: u64, bottom: f64, x: &impl Fn(u64) -> f64) {
    let step = tick_step(end);
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#444"/>"##,
        x(end)
    );
    let mut t = 0;
    while t <= end {
        let px = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{bottom:.1}" stroke="#000" stroke-opacity="0.08"/><line x1="{px:.1}" y1="{bottom:.1}" x2="{px:.1}" y2="{:.1}" stroke="#444"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bottom + 4.0,
            bottom + 15.0,
            duration_label(t)
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">simulated time</text>"#,
        x(end),
        bottom + 26.0
    );
}

/// A round tick step giving at most about a dozen ticks.
fn tick_step(end: u64) -> u64 {
    const STEPS: [u64; 22] = [
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000,
        120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| end / s <= 12)
        .unwrap_or(end.div_ceil(12).max(1))
}

/// `750ms`, `12s`, `1.5s`, `2m`, `2m30s`, `1h5m`.
fn duration_label(ms: u64) -> String {
    if ms == 0 {
        return "0".to_owned();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        return if ms % 1_000 == 0 {
            format!("{}s", ms / 1_000)
        } else {
            format!("{:.1}s", ms as f64 / 1_000.0)
        };
    }
    let (h, m, sec) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1_000 % 60);
    match (h, sec) {
        (0, 0) => format!("{m}m"),
        (0, _) => format!("{m}m{sec}s"),
        (_, _) => format!("{h}h{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ticks_read_well() {
        assert_eq!(duration_label(0), "0");
        assert_eq!(duration_label(500), "500ms");
        assert_eq!(duration_label(12_000), "12s");
        assert_eq!(duration_label(90_000), "1m30s");
        assert_eq!(duration_label(600_000), "10m");
        assert_eq!(tick_step(600_000), 60_000);
        assert_eq!(tick_step(10_000), 1_000);
        assert!(600_000 / tick_step(600_000) <= 12);
    }

    #[test]
    fn only_the_cut_off_sides_are_shaded() {
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let groups = vec![g(&["n0", "n1", "n2", "n3"]), g(&["n4", "n5", "n6"])];
        let sides = cut_off_sides(&groups);
        assert_eq!(sides.len(), 1);
        assert_eq!(sides[0].1, &groups[1]);
        // No side keeps a majority: both are cut off, each its own side.
        let even = vec![g(&["n0", "n1"]), g(&["n2", "n3"])];
        let sides = cut_off_sides(&even);
        assert_eq!(sides.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [0, 1]);
    }
}
