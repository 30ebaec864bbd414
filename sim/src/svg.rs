//! An SVG timeline of a trace: one row per node coloured by role (grey while down), shaded bands
//! while the network is partitioned or cut, and a red mark at each crash.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::trace::{Header, Line, Record};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 60.0;
const ROW: f64 = 14.0;
const TOP: f64 = 40.0;
/// Rows beyond this are left out (a note says so): a picture of 10 000 rows helps nobody.
const MAX_ROWS: usize = 200;

fn colour(state: &str) -> &'static str {
    match state {
        "admin" => "#d62728",
        "candidate" => "#ff7f0e",
        "pre_candidate" => "#ffd27f",
        "follower" => "#9ecae1",
        _ => "#dddddd",
    }
}

/// Renders the timeline.
pub fn render(header: &Header, lines: &[Line]) -> String {
    let rows = header.nodes.min(MAX_ROWS);
    let end = header
        .duration_ms
        .max(lines.last().map_or(1, |l| l.t))
        .max(1);
    let x = |t: u64| LEFT + (WIDTH - LEFT - 10.0) * t as f64 / end as f64;
    let height = TOP + rows as f64 * ROW + 40.0;
    // Per node: (since, state) of the open segment, and closed segments.
    let mut open: BTreeMap<usize, (u64, String)> = BTreeMap::new();
    let mut segments: Vec<(usize, u64, u64, String)> = Vec::new();
    let mut bands: Vec<(u64, u64)> = Vec::new();
    let mut band_since: Option<u64> = None;
    let mut crashes: Vec<(usize, u64)> = Vec::new();
    let node_ix = |n: &str| n.strip_prefix('n').and_then(|i| i.parse::<usize>().ok());
    let mut set = |node: &str, t: u64, state: &str, open: &mut BTreeMap<usize, (u64, String)>| {
        let Some(i) = node_ix(node).filter(|i| *i < rows) else {
            return;
        };
        if let Some((since, old)) = open.insert(i, (t, state.to_owned())) {
            segments.push((i, since, t, old));
        }
    };
    for l in lines {
        match &l.record {
            Record::Role { node, role, .. } => set(node, l.t, role, &mut open),
            Record::Restart { node } => set(node, l.t, "follower", &mut open),
            Record::Crash { node } => {
                set(node, l.t, "down", &mut open);
                if let Some(i) = node_ix(node).filter(|i| *i < rows) {
                    crashes.push((i, l.t));
                }
            }
            Record::Partition { .. } | Record::Cut { .. } => {
                band_since.get_or_insert(l.t);
            }
            Record::Heal => {
                if let Some(since) = band_since.take() {
                    bands.push((since, l.t));
                }
            }
            _ => {}
        }
    }
    for (i, (since, state)) in open {
        segments.push((i, since, end, state));
    }
    if let Some(since) = band_since {
        bands.push((since, end));
    }

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" font-size="10">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="16" font-size="12">{} · {} · seed {} · {} nodes · {} ms</text>"#,
        header.scenario, header.engine, header.seed, header.nodes, end
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="30">admin <tspan fill="{}">■</tspan> candidate <tspan fill="{}">■</tspan> pre-candidate <tspan fill="{}">■</tspan> follower <tspan fill="{}">■</tspan> down <tspan fill="{}">■</tspan> · shaded: partition/cut · red line: crash</text>"#,
        colour("admin"),
        colour("candidate"),
        colour("pre_candidate"),
        colour("follower"),
        colour("down")
    );
    for (i, a, b, state) in segments {
        let y = TOP + i as f64 * ROW;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
            x(a),
            y + 1.0,
            (x(b) - x(a)).max(0.5),
            ROW - 2.0,
            colour(&state)
        );
    }
    // Bands go over the rows so they stay visible.
    for (a, b) in bands {
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#000" opacity="0.18"/>"##,
            x(a),
            (x(b) - x(a)).max(1.0),
            rows as f64 * ROW
        );
    }
    for i in 0..rows {
        let _ = writeln!(
            s,
            r#"<text x="4" y="{:.1}">n{i}</text>"#,
            TOP + i as f64 * ROW + ROW - 3.0
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
    if header.nodes > rows {
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}">({} more nodes not drawn)</text>"#,
            TOP + rows as f64 * ROW + 16.0,
            header.nodes - rows
        );
    }
    s.push_str("</svg>\n");
    s
}
