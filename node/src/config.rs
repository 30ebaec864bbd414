//! The node's configuration: a TOML file (every key optional, unknown keys refused), command-line
//! flags that override it, embedded defaults for everything, and validation that names the
//! offending key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use chorus_core::ADMIN_ELECTION;
use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};

/// How logs are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Everything `chorus run` needs. In TOML, the protocol settings live in a `[protocol]` table
/// whose keys are those of [`chorus_core::Config`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the identity key and the event log live.
    pub data_dir: PathBuf,
    /// libp2p listen addresses.
    pub listen: Vec<String>,
    /// The HTTP API address (host:port).
    pub http: String,
    /// Peers dialled on start and re-dialled while disconnected.
    pub bootstrap: Vec<String>,
    /// Capabilities advertised; `admin_election` makes the node a voter.
    pub capabilities: Vec<String>,
    /// A private network's pre-shared key file; nodes without the key cannot connect.
    pub psk_file: Option<PathBuf>,
    /// Discover peers on the local network with mDNS.
    pub mdns: bool,
    /// Log format.
    pub log_format: LogFormat,
    /// Seeds the core's RNG together with the node id.
    pub cluster_seed: u64,
    /// Snapshot the core state after this many logged events.
    pub snapshot_every_events: u64,
    /// Protocol timings and thresholds.
    pub protocol: chorus_core::Config,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data_dir: PathBuf::from("./chorus-data"),
            listen: vec!["/ip4/0.0.0.0/tcp/7946".to_owned()],
            http: "127.0.0.1:7070".to_owned(),
            bootstrap: Vec::new(),
            capabilities: vec![ADMIN_ELECTION.to_owned()],
            psk_file: None,
            mdns: true,
            log_format: LogFormat::Human,
            cluster_seed: 0,
            snapshot_every_events: 1_024,
            protocol: chorus_core::Config::default(),
        }
    }
}

/// Command-line overrides of [`NodeConfig`] (`chorus run`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RunFlags {
    /// TOML config file; flags override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (identity key, event log) [default: ./chorus-data].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// libp2p listen multiaddr (repeatable) [default: /ip4/0.0.0.0/tcp/7946].
    #[arg(long, value_name = "MULTIADDR")]
    pub listen: Vec<String>,
    /// HTTP API address [default: 127.0.0.1:7070].
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// Bootstrap peer multiaddr (repeatable).
    #[arg(long, value_name = "MULTIADDR")]
    pub bootstrap: Vec<String>,
    /// Admin-eligible nodes to discover before the first election [default: 1].
    #[arg(long, value_name = "N")]
    pub bootstrap_expect: Option<u32>,
    /// Cluster id [default: chorus].
    #[arg(long, value_name = "ID")]
    pub cluster_id: Option<String>,
    /// Pre-shared network key file (private network).
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// Capability to advertise (repeatable; replaces the default `admin_election`).
    #[arg(long, value_name = "NAME")]
    pub capability: Vec<String>,
    /// Heartbeat interval in ms [default: 15000].
    #[arg(long, value_name = "MS")]
    pub heartbeat_ms: Option<u64>,
    /// Election timeout window in ms, `MIN..MAX` [default: 30000..45000].
    #[arg(long, value_name = "MIN..MAX")]
    pub election_timeout_ms: Option<String>,
    /// Discovery timeout in ms [default: 15000].
    #[arg(long, value_name = "MS")]
    pub discovery_timeout_ms: Option<u64>,
    /// Log format [default: human].
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Disable mDNS discovery.
    #[arg(long)]
    pub no_mdns: bool,
    /// Cluster seed for the core's RNG [default: 0].
    #[arg(long, value_name = "N")]
    pub cluster_seed: Option<u64>,
}

/// A config checked and parsed into the types the node uses.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The config as given (after overrides).
    pub config: NodeConfig,
    /// Parsed listen addresses.
    pub listen: Vec<Multiaddr>,
    /// Parsed bootstrap addresses.
    pub bootstrap: Vec<Multiaddr>,
    /// Parsed HTTP address.
    pub http: SocketAddr,
}

impl NodeConfig {
    /// Reads `path` as TOML. Errors name the file, the line and the key.
    pub fn from_file(path: &Path) -> anyhow::Result<NodeConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        NodeConfig::from_toml(&text).map_err(|e| anyhow!("config file {}: {e}", path.display()))
    }

    /// Parses TOML text; the error is one line with the line number.
    pub fn from_toml(text: &str) -> anyhow::Result<NodeConfig> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().trim().replace('\n', " ");
            match line {
                Some(line) => anyhow!("line {line}: {message}"),
                None => anyhow!("{message}"),
            }
        })
    }

    /// Applies command-line overrides.
    pub fn apply(&mut self, flags: &RunFlags) -> anyhow::Result<()> {
        if let Some(v) = &flags.data_dir {
            self.data_dir = v.clone();
        }
        if !flags.listen.is_empty() {
            self.listen = flags.listen.clone();
        }
        if let Some(v) = &flags.http {
            self.http = v.clone();
        }
        if !flags.bootstrap.is_empty() {
            self.bootstrap = flags.bootstrap.clone();
        }
        if let Some(v) = flags.bootstrap_expect {
            self.protocol.bootstrap_expect = v;
        }
        if let Some(v) = &flags.cluster_id {
            self.protocol.cluster_id = v.clone();
        }
        if let Some(v) = &flags.psk_file {
            self.psk_file = Some(v.clone());
        }
        if !flags.capability.is_empty() {
            self.capabilities = flags.capability.clone();
        }
        if let Some(v) = flags.heartbeat_ms {
            self.protocol.heartbeat_interval_ms = v;
        }
        if let Some(v) = &flags.election_timeout_ms {
            let (min, max) = parse_range(v).with_context(|| {
                format!("invalid flag `--election-timeout-ms`: {v:?} is not MIN..MAX")
            })?;
            self.protocol.election_timeout_min_ms = min;
            self.protocol.election_timeout_max_ms = max;
        }
        if let Some(v) = flags.discovery_timeout_ms {
            self.protocol.discovery_timeout_ms = v;
        }
        if let Some(v) = flags.log_format {
            self.log_format = v;
        }
        if flags.no_mdns {
            self.mdns = false;
        }
        if let Some(v) = flags.cluster_seed {
            self.cluster_seed = v;
        }
        Ok(())
    }

    /// Checks every value, naming the key of the first bad one.
    pub fn resolve(self) -> anyhow::Result<Resolved> {
        self.protocol
            .validate()
            .map_err(|e| anyhow!("invalid config `protocol.{}`: {}", e.key, e.reason))?;
        let addrs = |key: &str, values: &[String]| -> anyhow::Result<Vec<Multiaddr>> {
            values
                .iter()
                .map(|v| {
                    v.parse::<Multiaddr>().map_err(|e| {
                        anyhow!("invalid config `{key}`: {v:?} is not a multiaddr: {e}")
                    })
                })
                .collect()
        };
        let listen = addrs("listen", &self.listen)?;
        let bootstrap = addrs("bootstrap", &self.bootstrap)?;
        let http: SocketAddr = self.http.parse().map_err(|e| {
            anyhow!(
                "invalid config `http`: {:?} is not HOST:PORT: {e}",
                self.http
            )
        })?;
        if self.data_dir.as_os_str().is_empty() {
            bail!("invalid config `data_dir`: must not be empty");
        }
        if self.capabilities.iter().any(|c| c.is_empty()) {
            bail!("invalid config `capabilities`: a capability name is empty");
        }
        if self.snapshot_every_events == 0 {
            bail!("invalid config `snapshot_every_events`: must be at least 1");
        }
        Ok(Resolved {
            config: self,
            listen,
            bootstrap,
            http,
        })
    }
}

fn parse_range(v: &str) -> anyhow::Result<(u64, u64)> {
    let (min, max) = v.split_once("..").context("missing `..`")?;
    Ok((min.trim().parse()?, max.trim().parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_elect_alone() {
        let r = NodeConfig::default().resolve().unwrap();
        assert_eq!(r.config.protocol.bootstrap_expect, 1);
        assert!(r.config.capabilities.iter().any(|c| c == ADMIN_ELECTION));
        assert_eq!(r.http.to_string(), "127.0.0.1:7070");
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = NodeConfig::from_toml("http = \"127.0.0.1:1\"\nheartbeat = 5\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("line 2"), "{text}");
        assert!(text.contains("heartbeat"), "{text}");
        assert!(!text.contains('\n'), "{text}");
        let err = NodeConfig::from_toml("[protocol]\nheartbeat_ms = 5\n").unwrap_err();
        assert!(err.to_string().contains("heartbeat_ms"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let c = NodeConfig::from_toml("[protocol]\nheartbeat_interval_ms = 40000\n").unwrap();
        let text = c.resolve().unwrap_err().to_string();
        assert!(text.contains("protocol.heartbeat_interval_ms"), "{text}");
        let c = NodeConfig::from_toml("listen = [\"nonsense\"]\n").unwrap();
        assert!(c.resolve().unwrap_err().to_string().contains("`listen`"));
    }

    #[test]
    fn flags_override_the_file() {
        let mut c = NodeConfig::from_toml(
            "http = \"127.0.0.1:1\"\n[protocol]\nheartbeat_interval_ms = 2000\n",
        )
        .unwrap();
        c.apply(&RunFlags {
            heartbeat_ms: Some(1_000),
            election_timeout_ms: Some("3000..4500".into()),
            no_mdns: true,
            ..RunFlags::default()
        })
        .unwrap();
        assert_eq!(c.http, "127.0.0.1:1");
        assert_eq!(c.protocol.heartbeat_interval_ms, 1_000);
        assert_eq!(c.protocol.election_timeout_min_ms, 3_000);
        assert_eq!(c.protocol.election_timeout_max_ms, 4_500);
        assert!(!c.mdns);
    }
}
