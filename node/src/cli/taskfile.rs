//! The task spec file of `chorus task submit -f task.toml`: what the submit flags say, as TOML.
//! Every key is optional, unknown keys are refused, and every value is checked while it is
//! read, so an error names the line and the key (as `chorus run --config` does for its config).
//! Flags given beside `-f` override the file's values ([`super::task::SubmitArgs`]).
//!
//! ```toml
//! image = "chorus/sandbox:latest"
//! command = ["sh", "-c", "make test"]
//! workdir = "/workspace"
//! repo = "src:ro"              # NAME:ro or NAME:rw, from the worker's [repos]
//! network = false
//! requires = ["docker"]        # capabilities the worker must advertise
//! key = "build-1234"           # idempotency key
//! secret_env = ["API_TOKEN"]   # values taken from the submitting shell's environment
//!
//! [env]
//! RUST_LOG = "info"
//!
//! [limits]
//! timeout = 600                # seconds, fractions allowed
//! memory = "512m"              # k, m or g; a bare number is MiB
//! cpus = 1.5
//! pids = 256
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::{anyhow, Context};
use chorus_core::RepoMount;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::daemon::config::toml_error;

/// A task spec file, read and checked.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskFile {
    /// The image (it must exist on the workers; nothing is pulled).
    pub image: Option<String>,
    /// The command and its arguments (an array: nothing is split by a shell).
    #[serde(deserialize_with = "command")]
    pub command: Option<Vec<String>>,
    /// Working directory inside the sandbox.
    pub workdir: Option<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Names of secret environment variables, their values taken from the submitting
    /// command's own environment.
    pub secret_env: Vec<String>,
    /// `NAME:ro` or `NAME:rw` (a bare `NAME` is read-only).
    #[serde(deserialize_with = "repo")]
    pub repo: Option<RepoMount>,
    /// Whether the sandbox gets a (firewalled) network.
    pub network: Option<bool>,
    /// Capabilities the worker must advertise.
    pub requires: Vec<String>,
    /// The idempotency key.
    pub key: Option<String>,
    /// The limits of one run (`[limits]`).
    pub limits: Limits,
}

/// The `[limits]` table; each one absent means the default (the worker's, or 600 s).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Seconds (fractions allowed), as ms.
    #[serde(deserialize_with = "timeout_ms")]
    pub timeout: Option<u64>,
    /// `64m`, `1g`, `512k`, or a number of MiB, as MiB.
    #[serde(deserialize_with = "memory_mb")]
    pub memory: Option<u32>,
    /// CPUs (`0.5`), as millicores.
    #[serde(deserialize_with = "cpu_millis")]
    pub cpus: Option<u32>,
    /// Processes.
    pub pids: Option<u32>,
}

impl TaskFile {
    /// Reads `path`. Errors name the file, the line and the key.
    pub fn from_file(path: &Path) -> anyhow::Result<TaskFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read task file {}", path.display()))?;
        TaskFile::from_toml(&text).map_err(|e| anyhow!("task file {}: {e}", path.display()))
    }

    /// Parses TOML text; the error is one line with the line number and the key.
    pub fn from_toml(text: &str) -> anyhow::Result<TaskFile> {
        toml::from_str(text).map_err(|e| toml_error(text, &e))
    }
}

/// A timeout in seconds (`1.5`, `600`) as milliseconds; `None` when it is not positive.
pub fn seconds_to_ms(seconds: f64) -> Option<u64> {
    (seconds.is_finite() && seconds > 0.0).then(|| ((seconds * 1_000.0).round() as u64).max(1))
}

/// CPUs (`0.5`) as millicores; `None` when it is not positive.
pub fn cpus_to_millis(cpus: f64) -> Option<u32> {
    (cpus.is_finite() && cpus > 0.0).then(|| ((cpus * 1_000.0).round() as u32).max(1))
}

/// `NAME:ro`, `NAME:rw` or `NAME` (read-only).
pub fn parse_repo(text: &str) -> Result<RepoMount, String> {
    let (name, mode) = text.rsplit_once(':').unwrap_or((text, "ro"));
    let writable = match mode {
        "ro" => false,
        "rw" => true,
        other => return Err(format!("{text:?}: the mode is ro or rw, not {other:?}")),
    };
    Ok(RepoMount {
        name: name.to_owned(),
        writable,
    })
}

/// `64m` → 64, `1g` → 1024, `512k` → 1 (rounded up), `100` → 100 (MiB).
pub fn memory_size_mb(text: &str) -> Result<u32, String> {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, kib_per_unit) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64),
        Some('m') => (&t[..t.len() - 1], 1_024),
        Some('g') => (&t[..t.len() - 1], 1_024 * 1_024),
        _ => (t, 1_024),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 64m or 1g"))?;
    let mb = n.saturating_mul(kib_per_unit).div_ceil(1_024);
    if mb == 0 || mb > u64::from(chorus_core::task::bounds::MEMORY_MB) {
        return Err(format!(
            "{text:?} is out of range (1 MiB to {} MiB)",
            chorus_core::task::bounds::MEMORY_MB
        ));
    }
    Ok(mb as u32)
}

fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    if argv.is_empty() {
        return Err(de::Error::custom(
            "the command needs at least the program: [\"sh\", \"-c\", \"…\"]",
        ));
    }
    Ok(Some(argv))
}

fn repo<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RepoMount>, D::Error> {
    let text = String::deserialize(d)?;
    parse_repo(&text).map(Some).map_err(de::Error::custom)
}

fn timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = d.deserialize_any(Number)?;
    seconds_to_ms(s)
        .map(Some)
        .ok_or_else(|| de::Error::custom(format!("{s} is not a positive number of seconds")))
}

fn cpu_millis<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let c = d.deserialize_any(Number)?;
    cpus_to_millis(c)
        .map(Some)
        .ok_or_else(|| de::Error::custom(format!("{c} is not a positive number of CPUs")))
}

fn memory_mb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    d.deserialize_any(Memory).map(Some)
}

/// An integer or a float, as f64 (TOML tells `600` from `600.0`; a timeout takes both).
struct Number;

impl Visitor<'_> for Number {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
}

/// A size string (`"64m"`) or a whole number of MiB (`512`).
struct Memory;

impl Visitor<'_> for Memory {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size like \"64m\" or \"1g\", or a number of MiB")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        memory_size_mb(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        memory_size_mb(&v.to_string()).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        memory_size_mb(&v.to_string()).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        let e = TaskFile::from_toml(text).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        e
    }

    #[test]
    fn a_full_file_reads() {
        let f = TaskFile::from_toml(
            r#"
image = "img"
command = ["sh", "-c", "echo hi"]
workdir = "/w"
repo = "src:rw"
network = true
requires = ["gpu"]
key = "k1"
secret_env = ["TOKEN"]

[env]
A = "1"

[limits]
timeout = 1.5
memory = "64m"
cpus = 0.5
pids = 9
"#,
        )
        .unwrap();
        assert_eq!(f.image.as_deref(), Some("img"));
        assert_eq!(f.command.unwrap(), ["sh", "-c", "echo hi"]);
        assert_eq!(f.env["A"], "1");
        assert_eq!(
            f.repo,
            Some(RepoMount {
                name: "src".into(),
                writable: true
            })
        );
        assert_eq!(f.network, Some(true));
        assert_eq!(f.requires, ["gpu"]);
        assert_eq!(f.key.as_deref(), Some("k1"));
        assert_eq!(f.secret_env, ["TOKEN"]);
        assert_eq!(
            f.limits,
            Limits {
                timeout: Some(1_500),
                memory: Some(64),
                cpus: Some(500),
                pids: Some(9)
            }
        );
        // A whole number of seconds and of MiB.
        let f = TaskFile::from_toml("[limits]\ntimeout = 600\nmemory = 512\n").unwrap();
        assert_eq!(
            (f.limits.timeout, f.limits.memory),
            (Some(600_000), Some(512))
        );
        assert_eq!(TaskFile::from_toml("").unwrap(), TaskFile::default());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let e = err("image = \"img\"\nimage_name = \"x\"\n");
        assert!(e.contains("line 2") && e.contains("image_name"), "{e}");
        let e = err("image = \"img\"\n[limits]\nmemory_mb = 5\n");
        assert!(e.contains("line 3") && e.contains("memory_mb"), "{e}");
        // The flag's name is not a key: the file says `requires`.
        let e = err("require = [\"gpu\"]\n");
        assert!(e.contains("line 1") && e.contains("require"), "{e}");
    }

    #[test]
    fn a_bad_value_names_its_key_and_line() {
        let cases = [
            (
                "image = \"i\"\n[limits]\nmemory = \"lots\"\n",
                "line 3",
                "`limits.memory`",
                "not a size",
            ),
            (
                "[limits]\ntimeout = -1\n",
                "line 2",
                "`limits.timeout`",
                "positive number of seconds",
            ),
            (
                "[limits]\ncpus = 0\n",
                "line 2",
                "`limits.cpus`",
                "positive number of CPUs",
            ),
            (
                "[limits]\npids = \"many\"\n",
                "line 2",
                "`limits.pids`",
                "invalid type",
            ),
            ("repo = \"src:wr\"\n", "line 1", "`repo`", "ro or rw"),
            (
                "command = \"make test\"\n",
                "line 1",
                "`command`",
                "invalid type",
            ),
            (
                "command = []\n",
                "line 1",
                "`command`",
                "at least the program",
            ),
            ("network = \"yes\"\n", "line 1", "`network`", "invalid type"),
            ("\n[env]\nA = 1\n", "line 3", "`env.A`", "invalid type"),
        ];
        for (text, line, key, words) in cases {
            let e = err(text);
            assert!(
                e.contains(line) && e.contains(key) && e.contains(words),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = TaskFile::from_file(Path::new("/nonexistent/task.toml")).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/task.toml"), "{e:#}");
    }
}
