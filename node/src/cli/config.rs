//! `chorus config example` prints a commented configuration (every key, its default, what it
//! does); `chorus config validate FILE` checks a file as `chorus run --config FILE` would —
//! every key, every value, the files it names — without starting anything.

use std::path::Path;

use crate::daemon::config::NodeConfig;

/// The commented example, kept valid by a test.
pub const EXAMPLE: &str = include_str!("config.example.toml");

/// Checks `path` as `chorus run --config` does. `Ok` holds a summary of what the node would do.
pub fn validate(path: &Path) -> anyhow::Result<String> {
    let resolved = NodeConfig::from_file(path)?.resolve()?;
    let c = &resolved.config;
    let listen: Vec<String> = resolved.listen.iter().map(ToString::to_string).collect();
    let mut out = format!(
        "{}: valid\n  cluster {}, {} voter(s) expected at the first election\n  p2p on {}; \
         HTTP API on {}{}\n  data in {}\n  runs {} task(s) at once{}\n",
        path.display(),
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
