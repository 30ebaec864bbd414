//! `chorus config example` prints a commented configuration (every key, its default, what it
//! does); `chorus config validate FILE` checks a file as `chorus run --config FILE` would —
//! every key, every value, the files it names — without starting anything.

use std::path::Path;

use crate::daemon::config::NodeConfig;

/// The commented example, kept valid by a test.
pub const EXAMPLE: &str = include_str!("config.example.toml");

/// Checks `path` (`-`: standard input) as `chorus run --config` does. `Ok` holds a summary of
/// what the node would do.
pub fn validate(path: &Path) -> anyhow::Result<String> {
    let config = if path == Path::new("-") {
        use anyhow::Context;
        let text = std::io::read_to_string(std::io::stdin())
            .context("cannot read the configuration from standard input")?;
        NodeConfig::from_toml(&text).map_err(|e| anyhow::anyhow!("standard input: {e}"))?
    } else {
        NodeConfig::from_file(path)?
    };
    let resolved = config.resolve()?;
    let c = &resolved.config;
    let listen: Vec<String> = resolved.listen.iter().map(ToString::to_string).collect();
    let mut out = format!(
        "{}: valid\n  cluster {}, {} voter(s) expected at the first election\n  p2p on {}; \
         HTTP API on {}{}\n  data in {}\n  runs {} task(s) at once{}\n",
        if path == Path::new("-") {
            "standard input".into()
        } else {
            path.display().to_string()
        },
        c.protocol.cluster_id,
        c.protocol.bootstrap_expect,
        listen.join(", "),
        resolved.http,
        if resolved.http_tls.is_some() {
            " (TLS)"
        } else {
            ""
        },
        c.data_dir.display(),
        c.task_slots(),
        if c.sandbox.docker {
            " in Docker sandboxes"
        } else {
            ""
        },
    );
    for w in &resolved.warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_is_a_valid_configuration_of_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("chorus.toml");
        std::fs::write(&file, EXAMPLE).unwrap();
        let said = validate(&file).expect("the example validates");
        assert!(
            said.contains("valid") && said.contains("cluster chorus"),
            "{said}"
        );
        // It shows the defaults: read alone, it is the default configuration.
        let mut example = NodeConfig::from_toml(EXAMPLE).unwrap();
        assert!(example.expect_given, "it says bootstrap_expect");
        example.expect_given = false;
        assert_eq!(example, NodeConfig::default());
    }

    /// Every key of a configuration file (`key`, `section.key`), read from the types
    /// themselves: a derived `Deserialize` names its struct's fields to the deserializer, so a
    /// probe that stops there lists them — a key added to a struct is in this list at once.
    fn every_key() -> Vec<String> {
        use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
        use serde::Deserialize;
        use std::cell::Cell;

        type Fields = Option<&'static [&'static str]>;
        /// Walks down `path` (one field a struct) and notes the fields of the struct there.
        struct Probe<'a> {
            path: &'a [&'static str],
            found: &'a Cell<Fields>,
        }
        impl<'de> de::Deserializer<'de> for Probe<'_> {
            type Error = de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not a table"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                visitor: V,
            ) -> Result<V::Value, Self::Error> {
                match self.path.split_first() {
                    None => {
                        self.found.set(Some(fields));
                        Err(de::Error::custom("found"))
                    }
                    Some((key, rest)) => visitor.visit_map(One {
                        key: Some(key),
                        value: Some(Probe {
                            path: rest,
                            found: self.found,
                        }),
                    }),
                }
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        /// A table of one key.
        struct One<'a> {
            key: Option<&'static str>,
            value: Option<Probe<'a>>,
        }
        impl<'de> MapAccess<'de> for One<'_> {
            type Error = de::value::Error;
            fn next_key_seed<K: DeserializeSeed<'de>>(
                &mut self,
                seed: K,
            ) -> Result<Option<K::Value>, Self::Error> {
                self.key
                    .take()
                    .map(|k| seed.deserialize(k.into_deserializer()))
                    .transpose()
            }
            fn next_value_seed<V: DeserializeSeed<'de>>(
                &mut self,
                seed: V,
            ) -> Result<V::Value, Self::Error> {
                let value = self
                    .value
                    .take()
                    .ok_or_else(|| de::Error::custom("no value"))?;
                seed.deserialize(value)
            }
        }
        let fields_at = |path: &[&'static str]| {
            let found = Cell::new(None);
            let _ = NodeConfig::deserialize(Probe {
                path,
                found: &found,
            });
            found.get()
        };
        let mut keys = Vec::new();
        for &top in fields_at(&[]).expect("NodeConfig is a table") {
            match fields_at(&[top]) {
                Some(inner) => keys.extend(inner.iter().map(|k| format!("{top}.{k}"))),
                None => keys.push(top.to_owned()),
            }
        }
        keys
    }

    /// The keys the example shows, set or commented out (`# key = value`), and its tables.
    fn keys_in_example() -> std::collections::BTreeSet<String> {
        let mut section = String::new();
        let mut keys = std::collections::BTreeSet::new();
        for line in EXAMPLE.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                keys.insert(section.clone());
                continue;
            }
            let line = line.strip_prefix("# ").unwrap_or(line);
            let Some((key, _)) = line.split_once(" = ") else {
                continue;
            };
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                keys.insert(match section.as_str() {
                    "" => key.to_owned(),
                    s => format!("{s}.{key}"),
                });
            }
        }
        keys
    }

    /// Issue 54, item 9: `chorus config example` claims every key; it shows every key of the
    /// config types (but `cluster_seed`, for reproducing a run in tests), and no key they do
    /// not have.
    #[test]
    fn the_example_shows_every_key_of_the_config_types() {
        let keys = every_key();
        assert!(
            keys.contains(&"protocol.autopilot".to_owned()) && keys.contains(&"data_dir".into()),
            "{keys:?}"
        );
        let shown = keys_in_example();
        let missing: Vec<&String> = keys
            .iter()
            .filter(|k| !shown.contains(*k) && k.as_str() != "cluster_seed")
            .collect();
        assert!(missing.is_empty(), "the example leaves out {missing:?}");
        let unknown: Vec<&String> = shown
            .iter()
            .filter(|k| !keys.contains(*k) && !k.starts_with("repos"))
            .filter(|k| !["protocol", "sandbox", "tasks"].contains(&k.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "the example shows unknown keys {unknown:?}"
        );
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "[protocol]\nheartbeat_interval_ms = 0\n").unwrap();
        let err = format!("{:#}", validate(&file).unwrap_err());
        assert!(err.contains("protocol.heartbeat_interval_ms"), "{err}");
        let open = "listen = [\"/ip4/0.0.0.0/tcp/7946\"]\n[protocol]\nbootstrap_expect = 3\n";
        std::fs::write(&file, open).unwrap();
        let err = format!("{:#}", validate(&file).unwrap_err());
        assert!(err.contains("psk_file"), "{err}");
    }
}
