//! An SVG timeline of a trace — a simulation's, or a real cluster's merged one (`chorus replay`
//! of several data directories): one row per node coloured by role (grey while down), each
//! admin's lease as a dark band along the bottom of its row (an admin holding no lease drawn
//! pale, so an old admin cut off from the cluster and the new one do not both look like the
//! admin), a labelled time axis (simulated time, or host time for a real cluster), partitions,
//! cuts and heals labelled above the rows, a hatch on the rows of the nodes a partition or cut
//! separated (one hatch per side, never the crash colour), a red mark at each crash, and a mark
//! with the term at each election won.
//!
//! A simulation's rows are `n0`, `n1`, …; a real cluster's are its peer ids (the eligible ones
//! first, in the header's order, then the others as they appear), each labelled by its last 8
//! characters with the whole id as its tooltip. The same trace always gives the same bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::trace::{Header, Line, Record};

const WIDTH: f64 = 1200.0;
/// The least room left of the plot for the row names.
const LEFT_MIN: f64 = 60.0;
const RIGHT: f64 = 20.0;
const ROW: f64 = 16.0;
/// The top of the first row: under the title, the legend and the lane of fault labels.
const TOP: f64 = 70.0;
/// Room under the rows for the time axis.
const AXIS: f64 = 28.0;
/// Rows beyond this are left out (a note says so): a picture of 10 000 rows helps nobody.
const MAX_ROWS: usize = 200;
/// Least horizontal room, px, between two term labels on one row (closer ones are left out).
const LABEL_GAP: f64 = 34.0;
/// The width of a character of the 10 px monospace font, px (for laying out labels).
const CHAR: f64 = 6.1;
/// The colours of the hatches of the sides of a partition, in turn.
const SIDE_SHADES: [&str; 3] = ["#000000", "#5b2a86", "#1b6e3a"];
/// The crash mark's colour.
const CRASH: &str = "#b00";
/// The lease band's colour and height, px.
const LEASE: &str = "#5a0000";
const LEASE_HEIGHT: f64 = 4.0;
/// The characters of a real node's id shown as its row name.
const SHORT_ID: usize = 8;

fn colour(state: &str) -> &'static str {
    match state {
        "admin" => "#d62728",
        // An admin by its own account, holding no lease: no longer the cluster's admin.
        "admin_unleased" => "#f4b6b6",
        "candidate" => "#ff7f0e",
        "pre_candidate" => "#ffd27f",
        "follower" => "#9ecae1",
        _ => "#dddddd",
    }
}

/// A hatched stretch of one row: (row, from, to, side).
type Band = (usize, u64, u64, usize);

/// The rows: which node each one draws, and the row of a node id.
struct Rows {
    /// Each row's node id.
    names: Vec<String>,
    index: BTreeMap<String, usize>,
    /// Nodes in the trace beyond the rows drawn.
    hidden: usize,
    /// A real cluster's trace: peer ids as names, host time.
    real: bool,
}

impl Rows {
    fn new(header: &Header, lines: &[Line]) -> Rows {
        let real = header.engine == "real";
        let mut names: Vec<String> = Vec::new();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        if real {
            let mut add = |id: &str| {
                if seen.insert(id.to_owned()) {
                    names.push(id.to_owned());
                }
            };
            for id in header.eligible.iter().flatten() {
                add(id);
            }
            for l in lines {
                match &l.record {
                    Record::Partition { groups } => groups.iter().flatten().for_each(|id| add(id)),
                    Record::Cut { from, to } => from.iter().chain(to).for_each(|id| add(id)),
                    r => {
                        if let Some(id) = node_of(r) {
                            add(id);
                        }
                    }
                }
            }
        } else {
            names = (0..header.nodes).map(|i| format!("n{i}")).collect();
        }
        let total = names.len().max(header.nodes);
        names.truncate(MAX_ROWS);
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        Rows {
            hidden: total - names.len(),
            names,
            index,
            real,
        }
    }

    fn of(&self, node: &str) -> Option<usize> {
        self.index.get(node).copied()
    }

    /// A row's name as drawn: a simulated node's id, or a peer id's last characters.
    fn label(&self, i: usize) -> &str {
        let name = &self.names[i];
        if self.real {
            let cut = name
                .char_indices()
                .rev()
                .nth(SHORT_ID - 1)
                .map_or(0, |(at, _)| at);
            &name[cut..]
        } else {
            name
        }
    }
}

/// The node a record is about, for the records that place a real cluster's nodes in rows.
fn node_of(record: &Record) -> Option<&str> {
    match record {
        Record::BecameAdmin { node, .. }
        | Record::LeaseRenewed { node, .. }
        | Record::LeaseExpired { node, .. }
        | Record::SteppedDown { node, .. }
        | Record::Voted { node, .. }
        | Record::VoteGranted { node, .. }
        | Record::AdminKnown { node, .. }
        | Record::Role { node, .. }
        | Record::Crash { node }
        | Record::Restart { node } => Some(node),
        _ => None,
    }
}

/// What the picture shows, in trace time.
#[derive(Default)]
struct Timeline {
    /// (row, from, to, state).
    segments: Vec<(usize, u64, u64, String)>,
    /// (row, from, to): the time a lease covered, as its admin held it.
    leases: Vec<(usize, u64, u64)>,
    bands: Vec<Band>,
    crashes: Vec<(usize, u64)>,
    /// (row, t, term).
    elections: Vec<(usize, u64, u64)>,
    /// (t, label) of each partition, cut and heal.
    faults: Vec<(u64, String)>,
}

impl Timeline {
    fn new(rows: &Rows, lines: &[Line], end: u64) -> Timeline {
        let mut tl = Timeline::default();
        // Per row: (since, state) of the open segment.
        let mut open: BTreeMap<usize, (u64, String)> = BTreeMap::new();
        // Per row: (since, until) of the lease held; ended early by a step-down or a crash, as
        // the checker ends it.
        let mut lease: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
        // Open hatching: row -> (since, side); a new partition replaces the old one, a heal
        // ends all.
        let mut shaded: BTreeMap<usize, (u64, usize)> = BTreeMap::new();
        let set = |i: usize,
                   t: u64,
                   state: &str,
                   open: &mut BTreeMap<usize, (u64, String)>,
                   segments: &mut Vec<(usize, u64, u64, String)>| {
            if let Some((since, old)) = open.insert(i, (t, state.to_owned())) {
                segments.push((i, since, t, old));
            }
        };
        let end_lease = |i: usize,
                         t: u64,
                         lease: &mut BTreeMap<usize, (u64, u64)>,
                         leases: &mut Vec<(usize, u64, u64)>| {
            if let Some((since, until)) = lease.remove(&i) {
                leases.push((i, since, until.min(t)));
            }
        };
        let close_all =
            |t: u64, shaded: &mut BTreeMap<usize, (u64, usize)>, bands: &mut Vec<Band>| {
                for (row, (since, side)) in std::mem::take(shaded) {
                    bands.push((row, since, t, side));
                }
            };
        for l in lines {
            let t = l.t;
            let row = node_of(&l.record).and_then(|n| rows.of(n));
            match (&l.record, row) {
                (Record::Role { role, .. }, Some(i)) => {
                    set(i, t, role, &mut open, &mut tl.segments)
                }
                (Record::Restart { .. }, Some(i)) => {
                    set(i, t, "follower", &mut open, &mut tl.segments)
                }
                (Record::Crash { .. }, Some(i)) => {
                    set(i, t, "down", &mut open, &mut tl.segments);
                    end_lease(i, t, &mut lease, &mut tl.leases);
                    tl.crashes.push((i, t));
                }
                (
                    Record::BecameAdmin {
                        term, lease_until, ..
                    },
                    Some(i),
                ) => {
                    end_lease(i, t, &mut lease, &mut tl.leases);
                    lease.insert(i, (t, (*lease_until).max(t)));
                    tl.elections.push((i, t, *term));
                }
                (Record::LeaseRenewed { lease_until, .. }, Some(i)) => {
                    let held = lease.entry(i).or_insert((t, t));
                    held.1 = held.1.max(*lease_until);
                }
                (Record::LeaseExpired { .. } | Record::SteppedDown { .. }, Some(i)) => {
                    end_lease(i, t, &mut lease, &mut tl.leases)
                }
                (Record::Partition { groups }, _) => {
                    close_all(t, &mut shaded, &mut tl.bands);
                    for (side, group) in cut_off_sides(groups) {
                        for i in group.iter().filter_map(|n| rows.of(n)) {
                            shaded.insert(i, (t, side));
                        }
                    }
                    let sizes: Vec<String> = groups.iter().map(|g| g.len().to_string()).collect();
                    tl.faults
                        .push((t, format!("partition {}", sizes.join("|"))));
                }
                (Record::Cut { from, to }, _) => {
                    // Both ends of a one-way cut are affected; each side gets its own hatch.
                    for (side, group) in [from, to].into_iter().enumerate() {
                        for i in group.iter().filter_map(|n| rows.of(n)) {
                            shaded.entry(i).or_insert((t, side));
                        }
                    }
                    tl.faults
                        .push((t, format!("cut {}→{}", from.len(), to.len())));
                }
                (Record::Heal, _) => {
                    close_all(t, &mut shaded, &mut tl.bands);
                    tl.faults.push((t, "heal".to_owned()));
                }
                _ => {}
            }
        }
        for (i, (since, state)) in open {
            tl.segments.push((i, since, end, state));
        }
        for i in lease.keys().copied().collect::<Vec<_>>() {
            end_lease(i, end, &mut lease, &mut tl.leases);
        }
        tl.leases.sort_unstable();
        close_all(end, &mut shaded, &mut tl.bands);
        tl.segments = unleased_admins(tl.segments, &tl.leases);
        tl
    }
}

/// The admin segments split where their node held no lease: those stretches are drawn as
/// `admin_unleased`.
fn unleased_admins(
    segments: Vec<(usize, u64, u64, String)>,
    leases: &[(usize, u64, u64)],
) -> Vec<(usize, u64, u64, String)> {
    let mut out = Vec::with_capacity(segments.len());
    for (i, a, b, state) in segments {
        if state != "admin" || a == b {
            out.push((i, a, b, state));
            continue;
        }
        let mut at = a;
        for &(_, from, to) in leases.iter().filter(|l| l.0 == i && l.2 > a && l.1 < b) {
            let (from, to) = (from.max(a), to.min(b));
            if from > at {
                out.push((i, at, from, "admin_unleased".to_owned()));
            }
            if to > from {
                out.push((i, from, to, "admin".to_owned()));
            }
            at = at.max(to);
        }
        if at < b {
            out.push((i, at, b, "admin_unleased".to_owned()));
        }
    }
    out
}

/// Renders the timeline.
pub fn render(header: &Header, lines: &[Line]) -> String {
    let rows = Rows::new(header, lines);
    let end = header
        .duration_ms
        .max(lines.last().map_or(1, |l| l.t))
        .max(1);
    let widest = (0..rows.names.len())
        .map(|i| rows.label(i).chars().count())
        .max()
        .unwrap_or(0);
    let left = LEFT_MIN.max(widest as f64 * CHAR + 10.0);
    let plot = WIDTH - left - RIGHT;
    let x = |t: u64| left + plot * t as f64 / end as f64;
    let bottom = TOP + rows.names.len() as f64 * ROW;
    let height = bottom + AXIS + if rows.hidden > 0 { 20.0 } else { 6.0 };
    let tl = Timeline::new(&rows, lines, end);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" font-family="monospace" font-size="10">"#
    );
    hatches(&mut s);
    let _ = writeln!(
        s,
        r##"<rect width="{WIDTH}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let title = if rows.real {
        format!(
            "{} · {} · {} nodes (rows: peer ids, last {SHORT_ID} characters) · {}",
            escape(&header.scenario),
            escape(&header.engine),
            rows.names.len() + rows.hidden,
            duration_label(end)
        )
    } else {
        format!(
            "{} · {} · seed {} · {} nodes · {}",
            escape(&header.scenario),
            escape(&header.engine),
            header.seed,
            header.nodes,
            duration_label(end)
        )
    };
    let _ = writeln!(
        s,
        r#"<text x="{left:.1}" y="16" font-size="12">{title}</text>"#
    );
    legend(&mut s, left);

    for (i, a, b, state) in &tl.segments {
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
    // Hatches go over the rows they cover so they stay visible, and only over those rows.
    for (i, a, b, side) in &tl.bands {
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{ROW}" fill="url(#side{})"/>"#,
            x(*a),
            TOP + *i as f64 * ROW,
            (x(*b) - x(*a)).max(1.0),
            side % SIDE_SHADES.len()
        );
    }
    for (i, a, b) in &tl.leases {
        let _ = writeln!(
            s,
            r#"<rect class="lease" x="{:.1}" y="{:.1}" width="{:.1}" height="{LEASE_HEIGHT}" fill="{LEASE}"/>"#,
            x(*a),
            TOP + (*i + 1) as f64 * ROW - 1.0 - LEASE_HEIGHT,
            (x(*b) - x(*a)).max(0.5),
        );
    }
    for i in 0..rows.names.len() {
        let y = TOP + i as f64 * ROW + ROW - 4.0;
        if rows.real {
            let _ = writeln!(
                s,
                r#"<text x="4" y="{y:.1}"><title>{}</title>{}</text>"#,
                escape(&rows.names[i]),
                escape(rows.label(i))
            );
        } else {
            let _ = writeln!(s, r#"<text x="4" y="{y:.1}">{}</text>"#, rows.names[i]);
        }
    }
    for (i, t) in &tl.crashes {
        let y = TOP + *i as f64 * ROW;
        let _ = writeln!(
            s,
            r#"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="{CRASH}" stroke-width="2"/>"#,
            x(*t),
            y,
            y + ROW
        );
    }
    elections_marks(&mut s, &tl.elections, &x);
    fault_labels(&mut s, &tl.faults, bottom, &x);
    axis(
        &mut s,
        end,
        bottom,
        left,
        if rows.real {
            "host time"
        } else {
            "simulated time"
        },
        &x,
    );
    if rows.hidden > 0 {
        let _ = writeln!(
            s,
            r#"<text x="{left:.1}" y="{:.1}">({} more nodes not drawn)</text>"#,
            bottom + AXIS + 12.0,
            rows.hidden
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Text for SVG: `&`, `<`, `>` and `"` escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The hatch of each side of a partition: diagonal stripes that leave the role's colour
/// showing between them (a cut-off admin stays an admin's red, striped, never a crash's).
fn hatches(s: &mut String) {
    s.push_str("<defs>\n");
    for (side, shade) in SIDE_SHADES.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<pattern id="side{side}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate({})"><rect width="2" height="6" fill="{shade}" opacity="0.55"/></pattern>"#,
            if side % 2 == 0 { 45 } else { -45 }
        );
    }
    s.push_str("</defs>\n");
}

/// Each partition, cut and heal: a dashed line down the rows, and its label above them (in one
/// of two lanes; a label with no room in either is left out, its line stays).
fn fault_labels(s: &mut String, faults: &[(u64, String)], bottom: f64, x: &impl Fn(u64) -> f64) {
    let mut lanes_free_from = [f64::MIN; 2];
    for (t, label) in faults {
        let px = x(*t);
        let _ = writeln!(
            s,
            r##"<line class="fault" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{bottom:.1}" stroke="#5b2a86" stroke-dasharray="3,2"/>"##,
            TOP - 8.0
        );
        let width = label.chars().count() as f64 * CHAR;
        if let Some(lane) = lanes_free_from.iter().position(|free| px >= *free) {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#5b2a86">{}</text>"##,
                px + 2.0,
                TOP - 12.0 - lane as f64 * 10.0,
                escape(label)
            );
            lanes_free_from[lane] = px + width + 6.0;
        }
    }
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
fn legend(s: &mut String, left: f64) {
    let y = 26.0;
    let mut x = left;
    let mut item = |s: &mut String, swatch: &str, label: &str| {
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{y}" width="10" height="10" {swatch}/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            x + 13.0,
            y + 9.0
        );
        x += 13.0 + label.chars().count() as f64 * CHAR + 14.0;
    };
    for role in ["admin", "candidate", "pre_candidate", "follower", "down"] {
        let label = role.replace('_', "-");
        item(s, &format!(r#"fill="{}""#, colour(role)), &label);
    }
    item(
        s,
        &format!(r#"fill="{}""#, colour("admin_unleased")),
        "admin, no lease",
    );
    item(s, &format!(r#"fill="{LEASE}""#), "lease");
    item(s, r#"fill="url(#side0)""#, "cut off: side 1");
    item(s, r#"fill="url(#side1)""#, "side 2");
    item(s, &format!(r#"fill="{CRASH}""#), "crash");
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
fn axis(s: &mut String, end: u64, bottom: f64, left: f64, clock: &str, x: &impl Fn(u64) -> f64) {
    let step = tick_step(end);
    let _ = writeln!(
        s,
        r##"<line x1="{left:.1}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#444"/>"##,
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
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{clock}</text>"#,
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
        return if ms.is_multiple_of(1_000) {
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

    /// A real cluster's merged trace, as `chorus replay` of three data directories writes it:
    /// peer ids, no `spec`, host time; the old admin `…AAAAAAAA` cut off, its lease running
    /// out before the new admin `…BBBBBBBB` is elected, then stepping down.
    const MERGED: &str = r#"{"kind":"header","seed":0,"scenario":"real: 3 nodes' logs merged","engine":"real","nodes":3,"version":1,"voters":3,"duration_ms":20000,"steps":false,"liveness_bound_ms":60000,"eligible":["12D3KooWAAAAAAAA","12D3KooWBBBBBBBB","12D3KooWCCCCCCCC"],"clock":{"source":"monotonic","origin_ms":5},"data_dirs":["a","b","c"]}
{"t":0,"kind":"restart","node":"12D3KooWAAAAAAAA"}
{"t":0,"kind":"restart","node":"12D3KooWBBBBBBBB"}
{"t":0,"kind":"restart","node":"12D3KooWCCCCCCCC"}
{"t":1000,"kind":"role","node":"12D3KooWAAAAAAAA","role":"admin","term":1}
{"t":1000,"kind":"became_admin","node":"12D3KooWAAAAAAAA","term":1,"lease_until":4000}
{"t":3000,"kind":"lease_renewed","node":"12D3KooWAAAAAAAA","term":1,"lease_until":6000}
{"t":5000,"kind":"partition","groups":[["12D3KooWAAAAAAAA"],["12D3KooWBBBBBBBB","12D3KooWCCCCCCCC"]]}
{"t":9000,"kind":"role","node":"12D3KooWBBBBBBBB","role":"admin","term":2}
{"t":9000,"kind":"became_admin","node":"12D3KooWBBBBBBBB","term":2,"lease_until":12000}
{"t":11000,"kind":"stepped_down","node":"12D3KooWAAAAAAAA","term":1,"reason":"check_quorum"}
{"t":11000,"kind":"role","node":"12D3KooWAAAAAAAA","role":"follower","term":1}
{"t":14000,"kind":"heal"}
{"t":16000,"kind":"crash","node":"12D3KooWCCCCCCCC"}
"#;

    fn merged() -> (Header, Vec<Line>) {
        crate::trace::read(MERGED).unwrap()
    }

    /// The `(x, width)` of each lease band.
    fn lease_bands(svg: &str) -> Vec<(f64, f64)> {
        svg.lines()
            .filter(|l| l.contains(r#"class="lease""#))
            .map(|l| {
                let attr = |name: &str| -> f64 {
                    let rest = l.split(&format!(" {name}=\"")).nth(1).unwrap();
                    rest.split('"').next().unwrap().parse().unwrap()
                };
                (attr("x"), attr("width"))
            })
            .collect()
    }

    #[test]
    fn a_merged_trace_names_its_peers_and_says_host_time() {
        let (header, lines) = merged();
        let svg = render(&header, &lines);
        for id in ["12D3KooWAAAAAAAA", "12D3KooWBBBBBBBB", "12D3KooWCCCCCCCC"] {
            // The whole id as the row's tooltip, its last characters as the row's name.
            assert!(
                svg.contains(&format!("<title>{id}</title>{}</text>", &id[8..])),
                "{id}"
            );
        }
        assert!(svg.contains(">host time</text>"), "{svg}");
        assert!(!svg.contains("simulated time"));
        // A real cluster has no seed to show, and its rows are not n0, n1, …
        assert!(!svg.contains("seed"), "{svg}");
        assert!(!svg.contains(">n0</text>"));
        // The roles are drawn: the picture is not empty.
        assert!(svg.contains(&format!(r#"fill="{}""#, colour("follower"))));
    }

    #[test]
    fn leases_are_bands_on_the_admins_row_and_never_overlap_across_a_failover() {
        let (header, lines) = merged();
        let svg = render(&header, &lines);
        let bands = lease_bands(&svg);
        // The old admin's lease (1 s to 6 s, as renewed), the new admin's (9 s to 12 s).
        assert_eq!(bands.len(), 2, "{svg}");
        let (old, new) = (bands[0], bands[1]);
        assert!(old.0 + old.1 < new.0, "{bands:?}");
        let left = LEFT_MIN.max(8.0 * CHAR + 10.0);
        let x = |t: f64| left + (WIDTH - left - RIGHT) * t / 20_000.0;
        assert!((old.0 - x(1_000.0)).abs() < 0.1 && (old.0 + old.1 - x(6_000.0)).abs() < 0.2);
        assert!((new.0 - x(9_000.0)).abs() < 0.1 && (new.0 + new.1 - x(12_000.0)).abs() < 0.2);
        // Between its lease's end and its step-down the old admin is drawn as an admin without a
        // lease, not as the admin.
        let row0 = TOP + 1.0;
        let unleased = format!(
            r#"<rect x="{:.1}" y="{row0:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
            x(6_000.0),
            x(11_000.0) - x(6_000.0),
            ROW - 2.0,
            colour("admin_unleased")
        );
        assert!(svg.contains(&unleased), "{unleased}\n{svg}");
        // The new admin's lease runs out at 12 s with no renewal in the trace: pale from there.
        let new_row = TOP + ROW + 1.0;
        assert!(svg.contains(&format!(
            r#"<rect x="{:.1}" y="{new_row:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
            x(12_000.0),
            x(20_000.0) - x(12_000.0),
            ROW - 2.0,
            colour("admin_unleased")
        )));
    }

    #[test]
    fn partitions_are_labelled_and_a_cut_off_admin_is_hatched_not_crash_coloured() {
        let (header, lines) = merged();
        let svg = render(&header, &lines);
        assert!(svg.contains(">partition 1|2</text>"), "{svg}");
        assert!(svg.contains(">heal</text>"), "{svg}");
        // The cut-off side (the old admin's row) is hatched with a pattern of its own.
        let hatched: Vec<&str> = svg.lines().filter(|l| l.contains("url(#side0)")).collect();
        assert_eq!(
            hatched.len(),
            2,
            "the legend's swatch and the old admin's row: {svg}"
        );
        assert!(hatched.iter().all(|l| !l.contains(CRASH)));
        assert!(svg.contains(r#"<pattern id="side0""#));
        let pattern = svg
            .lines()
            .find(|l| l.contains(r#"<pattern id="side0""#))
            .unwrap();
        assert!(!pattern.contains(CRASH), "{pattern}");
        // The crash is its own red mark.
        assert_eq!(svg.matches(&format!(r#"stroke="{CRASH}""#)).count(), 1);
    }

    #[test]
    fn the_same_trace_draws_the_same_bytes() {
        let (header, lines) = merged();
        assert_eq!(render(&header, &lines), render(&header, &lines));
        let (header2, lines2) = merged();
        assert_eq!(render(&header, &lines), render(&header2, &lines2));
    }

    #[test]
    fn a_simulation_keeps_its_seed_node_names_and_simulated_time() {
        let scenario = crate::scenario::Scenario::unspecified();
        let mut header = Header::new(&scenario, 42, "des", false);
        header.nodes = 2;
        header.duration_ms = 10_000;
        let lines = vec![
            Line {
                t: 0,
                record: Record::Restart { node: "n0".into() },
            },
            Line {
                t: 500,
                record: Record::BecameAdmin {
                    node: "n1".into(),
                    term: 1,
                    lease_until: 3_000,
                },
            },
        ];
        let svg = render(&header, &lines);
        assert!(svg.contains("seed 42"), "{svg}");
        assert!(svg.contains(">n0</text>") && svg.contains(">n1</text>"));
        assert!(svg.contains(">simulated time</text>"));
        assert_eq!(lease_bands(&svg).len(), 1);
        assert_eq!(svg, render(&header, &lines));
    }

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
