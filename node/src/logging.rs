//! The node's log on stderr: human lines, or one JSON object a line (`log_format = "json"`).
//!
//! JSON lines are written by [`JsonLines`] rather than tracing-subscriber's own JSON format,
//! which leaves an unrecorded optional value out and can only write a list as text. Here a
//! field the event declares but did not record (an `Option` that was `None`) is `null`, and a
//! list recorded through `chorus_io::log_fields` is an array — the convention is written down
//! there. The line's shape is otherwise the one tracing-subscriber writes: `timestamp`,
//! `level`, `fields` (`message` among them), `target`, and `span`/`spans` inside spans.

use std::fmt;

use chorus_io::log_fields::json_of;
use serde::ser::{SerializeMap, Serializer as _};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormattedFields, MakeWriter, SubscriberBuilder};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::daemon::config::LogFormat;

/// What is logged unless `RUST_LOG` says otherwise. Kademlia's warnings are about its own
/// routing table ("Failed to trigger bootstrap: No known peers" on every cluster's first node,
/// record replication CHORUS never uses): noise at that level, errors only.
const DEFAULT_FILTER: &str = "info,libp2p=warn,libp2p_kad=error,libp2p_gossipsub=error,sled=warn";

/// Sets the process's log: `format` on stderr, filtered by `RUST_LOG`.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    match format {
        // Colour codes only for a person at a terminal, never into a file or a pipe.
        LogFormat::Human => human(
            filter,
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::io::stderr,
        )
        .init(),
        LogFormat::Json => json(filter, std::io::stderr).init(),
    }
}

/// Human lines to `writer`.
fn human<W>(
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> SubscriberBuilder<format::DefaultFields, format::Format, EnvFilter, W>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer)
}

/// JSON lines to `writer`.
fn json<W>(filter: EnvFilter, writer: W) -> SubscriberBuilder<JsonFields, JsonLines, EnvFilter, W>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(writer)
        .fmt_fields(JsonFields::new())
        .event_format(JsonLines)
}

/// Writes an event as one JSON object. See the [module docs](self).
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut visitor = Fields {
            values: vec![None; meta.fields().len()],
        };
        event.record(&mut visitor);
        // A `log` record comes as an event of target `log` with its own target among the
        // fields (`log.target`, `log.file`, …): its target is that one, the rest is left out.
        let mut target = meta.target().to_owned();
        let mut fields = Vec::new();
        for (field, value) in meta.fields().iter().zip(visitor.values) {
            let name = field.name();
            if let Some(log_field) = name.strip_prefix("log.") {
                if let (true, "target", Some(Value::String(t))) =
                    (meta.target() == "log", log_field, &value)
                {
                    target = t.clone();
                }
                continue;
            }
            let name = name.strip_prefix("r#").unwrap_or(name);
            fields.push((name, value.unwrap_or(Value::Null)));
        }
        let spans: Vec<Value> = ctx
            .event_scope()
            .into_iter()
            .flat_map(|scope| scope.from_root())
            .map(|span| {
                let mut object = span
                    .extensions()
                    .get::<FormattedFields<N>>()
                    .and_then(|f| serde_json::from_str::<serde_json::Map<String, Value>>(f).ok())
                    .unwrap_or_default();
                object.insert("name".into(), span.name().into());
                Value::Object(object)
            })
            .collect();

        let mut line = Vec::new();
        let mut ser = serde_json::Serializer::new(&mut line);
        let mut map = ser.serialize_map(None).map_err(|_| fmt::Error)?;
        put(&mut map, "timestamp", &timestamp)?;
        put(&mut map, "level", meta.level().as_str())?;
        put(&mut map, "fields", &Ordered(&fields))?;
        put(&mut map, "target", &target)?;
        if let Some(last) = spans.last() {
            put(&mut map, "span", last)?;
            put(&mut map, "spans", &spans)?;
        }
        map.end().map_err(|_| fmt::Error)?;
        let line = String::from_utf8(line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{line}")
    }
}

/// An event's fields, in the order the event declares them.
struct Ordered<'a>(&'a [(&'a str, Value)]);

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

fn put<M, V>(map: &mut M, key: &str, value: &V) -> fmt::Result
where
    M: SerializeMap,
    V: serde::Serialize + ?Sized,
{
    map.serialize_entry(key, value).map_err(|_| fmt::Error)
}

/// An event's values as JSON, by field index; `None`: not recorded.
struct Fields {
    values: Vec<Option<Value>>,
}

impl Fields {
    fn set(&mut self, field: &Field, value: Value) {
        if let Some(slot) = self.values.get_mut(field.index()) {
            *slot = Some(value);
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field, json_of(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, value.into());
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let v = i64::try_from(value).map_or_else(|_| value.to_string().into(), Value::from);
        self.set(field, v);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let v = u64::try_from(value).map_or_else(|_| value.to_string().into(), Value::from);
        self.set(field, v);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.set(field, value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use chorus_io::log_fields::{list, quoted};
    use serde_json::json;

    use super::*;

    /// What a log writes, kept for the test to read.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl Write for Kept {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Kept {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// The events of the test, as the node records them: an option that is `None`, one that
    /// is `Some`, lists, and a peer's text that looks like JSON.
    fn events() {
        let lease: Option<u64> = None;
        let voted_for = Some("n1");
        let addrs = ["/ip4/10.0.0.1/tcp/7000", "/ip4/10.0.0.2/tcp/7000"];
        tracing::info!(
            term = 3,
            voted_for = voted_for.map(tracing::field::display),
            lease_until_ms = lease,
            "role changed"
        );
        tracing::info!(
            listen = %list(addrs),
            repos = %list(Vec::<String>::new()),
            command = %quoted(["sh", "-c", "echo a, b"]),
            "started"
        );
        let from_a_peer = r#"["not", "a list"]"#;
        tracing::warn!(lease_until_ms = Some(46141u64), reason = %from_a_peer, "refused");
    }

    /// Issue 54, item 3: the first node of a cluster logs no Kademlia "No known peers"
    /// warning by default; other libp2p warnings still reach the log.
    #[test]
    fn the_default_filter_drops_kademlias_warnings_only() {
        let kept = Kept::default();
        let out = kept.clone();
        let subscriber = json(EnvFilter::new(DEFAULT_FILTER), move || out.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "libp2p_kad::behaviour", "Failed to trigger bootstrap: No known peers.");
            tracing::error!(target: "libp2p_kad::behaviour", "kademlia broke");
            tracing::warn!(target: "libp2p_swarm", "a swarm warning");
        });
        let text = kept.text();
        assert!(!text.contains("No known peers"), "{text}");
        assert!(text.contains("kademlia broke"), "{text}");
        assert!(text.contains("a swarm warning"), "{text}");
    }

    #[test]
    fn json_lines_carry_a_missing_value_as_null_and_a_list_as_an_array() {
        let kept = Kept::default();
        let out = kept.clone();
        let subscriber = json(EnvFilter::new("info"), move || out.clone()).finish();
        tracing::subscriber::with_default(subscriber, events);
        let text = kept.text();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(
            lines[0]["fields"],
            json!({ "message": "role changed", "term": 3, "voted_for": "n1",
                    "lease_until_ms": null })
        );
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains(r#""lease_until_ms":null"#),
            "written, not left out"
        );
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(lines[0]["target"], module_path!());
        assert!(lines[0]["timestamp"].is_string());
        assert_eq!(
            lines[1]["fields"]["listen"],
            json!(["/ip4/10.0.0.1/tcp/7000", "/ip4/10.0.0.2/tcp/7000"])
        );
        assert_eq!(lines[1]["fields"]["repos"], json!([]));
        assert_eq!(
            lines[1]["fields"]["command"],
            json!(["sh", "-c", "echo a, b"])
        );
        assert_eq!(lines[2]["fields"]["lease_until_ms"], 46141);
        assert_eq!(
            lines[2]["fields"]["reason"],
            json!(r#"["not", "a list"]"#),
            "a peer's text stays text"
        );
        assert_eq!(lines[2]["level"], "WARN");
    }

    #[test]
    fn human_lines_say_the_same_as_plain_values() {
        let kept = Kept::default();
        let out = kept.clone();
        let subscriber = human(EnvFilter::new("info"), false, move || out.clone()).finish();
        tracing::subscriber::with_default(subscriber, events);
        let text = kept.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].ends_with("role changed term=3 voted_for=n1"),
            "a missing value left out: {text}"
        );
        assert!(
            lines[1].ends_with(
                r#"started listen=/ip4/10.0.0.1/tcp/7000, /ip4/10.0.0.2/tcp/7000 repos= command=["sh", "-c", "echo a, b"]"#
            ),
            "{text}"
        );
        assert!(
            lines[2].ends_with(r#"refused lease_until_ms=46141 reason=["not", "a list"]"#),
            "{text}"
        );
        assert!(!text.contains("null") && !text.contains("Some("), "{text}");
    }
}
