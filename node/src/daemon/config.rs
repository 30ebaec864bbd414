//! The node's configuration: a TOML file (every key optional, unknown keys refused), command-line
//! flags that override it, embedded defaults for everything, and validation that names the
//! offending key — or the flag, when the value came from one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use chorus_core::ADMIN_ELECTION;
use libp2p::pnet::PreSharedKey;
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

/// Whether the HTTP API speaks TLS (`http_tls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum HttpTls {
    /// TLS when the API listens off loopback (or a certificate is given), plain HTTP on
    /// loopback.
    #[default]
    Auto,
    /// Always TLS: the given certificate, else one made and kept in the data directory.
    On,
    /// Never TLS, off loopback too (behind a TLS proxy on a trusted network): tokens and task
    /// output then cross the network in the clear.
    Off,
}

/// The capability names this build gives a meaning to. Others are advertised as they are (a
/// task may require them), but one that looks like a known name is probably a typo.
pub const KNOWN_CAPABILITIES: [&str; 2] = [ADMIN_ELECTION, DOCKER];

/// The capability of a node that runs tasks in Docker sandboxes.
pub const DOCKER: &str = "docker";

/// The default libp2p listen address: loopback only, so a node started without configuration
/// is a local demo that no other machine can reach.
pub const DEFAULT_LISTEN: &str = "/ip4/127.0.0.1/tcp/7946";

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
    /// Peer ids allowed to connect (besides this node); empty: any peer holding the
    /// pre-shared key. Pins a cluster to known machines.
    pub allowed_peers: Vec<String>,
    /// The key API tokens are made and checked with (64 hex digits, mode 0600). Give every
    /// node the same file and a token is good on all of them; default: `acl.key` in the data
    /// directory, made at first start.
    pub acl_key_file: Option<PathBuf>,
    /// DNS names the HTTP API answers to (its `Host` header), besides IP addresses and
    /// `localhost`: a request for any other name is refused (DNS rebinding).
    pub http_names: Vec<String>,
    /// Whether the HTTP API speaks TLS.
    pub http_tls: HttpTls,
    /// The API's TLS certificate chain (PEM); with `http_tls_key`. Default: one made at first
    /// start in `DATA_DIR/http-tls/`, its SHA-256 fingerprint printed for clients to pin.
    pub http_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `http_tls_cert`.
    pub http_tls_key: Option<PathBuf>,
    /// Serve the web console at `/ui` (and send browsers asking for `/` there). It reads the
    /// same endpoints as the CLI, with the same tokens; `false` leaves the API without it.
    pub http_ui: bool,
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
    /// The task sandbox (`[sandbox]`).
    pub sandbox: SandboxConfig,
    /// Running tasks (`[tasks]`).
    pub tasks: TasksConfig,
    /// Repositories tasks may mount, by name (`[repos] name = "/path"`); each is advertised as
    /// the capability `repo:NAME`.
    pub repos: BTreeMap<String, PathBuf>,
    /// The keys whose value came from a command-line flag, and that flag, so an error names
    /// what the user typed.
    #[serde(skip)]
    pub from_flags: BTreeMap<&'static str, &'static str>,
    /// Whether `bootstrap_expect` was given (file or flag) rather than defaulted.
    #[serde(skip)]
    pub expect_given: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data_dir: PathBuf::from("./chorus-data"),
            listen: vec![DEFAULT_LISTEN.to_owned()],
            http: "127.0.0.1:7070".to_owned(),
            bootstrap: Vec::new(),
            capabilities: vec![ADMIN_ELECTION.to_owned()],
            psk_file: None,
            allowed_peers: Vec::new(),
            acl_key_file: None,
            http_names: Vec::new(),
            http_tls: HttpTls::Auto,
            http_tls_cert: None,
            http_tls_key: None,
            http_ui: true,
            mdns: false,
            log_format: LogFormat::Human,
            cluster_seed: 0,
            snapshot_every_events: 1_024,
            protocol: chorus_core::Config::default(),
            sandbox: SandboxConfig::default(),
            tasks: TasksConfig::default(),
            repos: BTreeMap::new(),
            from_flags: BTreeMap::new(),
            expect_given: false,
        }
    }
}

/// The `[sandbox]` table: where the node runs tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Use the local Docker Engine (`DOCKER_HOST` or `/var/run/docker.sock`) for task sandboxes.
    /// At start the node connects to it — and does not start when it does not answer — and
    /// removes the sandboxes earlier runs of this node left behind (owner gone or deadline
    /// passed). Off by default, so a node needs no Docker unless asked.
    pub docker: bool,
    /// Live sandboxes (`/sandboxes`) kept created and started for the default shape (the
    /// sandbox image, default limits), so a create takes one instead of starting a container.
    /// Default [`DEFAULT_LIVE_WARM`]; 0: none; at most [`MAX_LIVE_WARM`].
    pub live_warm: Option<u32>,
    /// Live sandboxes this worker holds at once (default [`DEFAULT_LIVE_MAX`], at most
    /// [`MAX_LIVE_MAX`]); a create past it is refused (429). Each also holds a task slot and
    /// counts its memory and CPU against `[tasks] max_memory_mb` / `max_cpu_millis`.
    pub live_max: Option<u32>,
    /// Live sandboxes one token holds on this worker at once (default
    /// [`DEFAULT_LIVE_PER_OWNER`], at most `live_max`).
    pub live_per_owner: Option<u32>,
    /// The most one streamed file read or write of a live sandbox moves, MiB (default and at
    /// most [`MAX_LIVE_FILE_MB`]: what a node relays); 413 past it.
    pub live_file_max_mb: Option<u32>,
}

/// The `[tasks]` table: how many tasks this node runs at once, and its warm sandboxes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// Tasks run at once. Default: [`DEFAULT_TASK_SLOTS`] when the Docker sandbox is on
    /// (`--docker`), else 0. 0: this node runs no tasks (it still accepts submissions and, as
    /// admin, places them on others).
    pub slots: Option<u32>,
    /// Warm (created and started) sandboxes kept per task shape (image, limits, network), so a
    /// task does not wait for a container to start. Default [`DEFAULT_POOL_SIZE`]; 0: none.
    pub pool_size: Option<u32>,
    /// Images whose default shape is kept warm from the start (default: none; the first task of
    /// a shape makes its pool).
    pub warm_images: Vec<String>,
    /// Reuse a pooled sandbox for the next task of the same submitter (its node and API token)
    /// and shape, after a reset that kills every process its task left and empties every
    /// place it could write, and only when that reset vouches for it (default true; false:
    /// every run's sandbox is removed after it).
    pub reuse_sandboxes: Option<bool>,
    /// The most memory one task may ask for, MiB (default: half the host's memory).
    pub max_memory_mb: Option<u32>,
    /// The most CPU one task may ask for, millicores (default: every CPU of the host).
    pub max_cpu_millis: Option<u32>,
    /// The most processes one task may ask for (default [`DEFAULT_MAX_PIDS`]).
    pub max_pids: Option<u32>,
    /// The longest timeout one task may ask for, ms (default [`DEFAULT_MAX_TIMEOUT_MS`]).
    pub max_timeout_ms: Option<u64>,
    /// Output of each stream of one run kept on disk for `chorus task logs`, MiB (default
    /// [`DEFAULT_LOG_CAP_MB`]; 0: none, only the result's tails; at most [`MAX_LOG_CAP_MB`]).
    pub log_cap_mb: Option<u32>,
    /// Finished runs' logs kept; older ones are removed (default [`DEFAULT_LOGS_KEPT`]).
    pub logs_kept: Option<u32>,
    /// How often, in seconds, this node removes the stale sandboxes of any node on its host
    /// (owner gone or deadline passed; default [`DEFAULT_REAP_PERIOD_S`], from 1 to
    /// [`MAX_REAP_PERIOD_S`]).
    pub reap_period_s: Option<u32>,
}

/// Seconds between periodic reaps unless `[tasks] reap_period_s` says otherwise.
pub const DEFAULT_REAP_PERIOD_S: u32 = 15;

/// The most `[tasks] reap_period_s` may say (a day).
pub const MAX_REAP_PERIOD_S: u32 = 86_400;

/// Output kept per stream of a run unless `[tasks] log_cap_mb` says otherwise.
pub const DEFAULT_LOG_CAP_MB: u32 = 16;

/// The most `[tasks] log_cap_mb` may say.
pub const MAX_LOG_CAP_MB: u32 = 4_096;

/// Finished logs kept unless `[tasks] logs_kept` says otherwise.
pub const DEFAULT_LOGS_KEPT: u32 = 64;

/// The most `[tasks] logs_kept` may say.
pub const MAX_LOGS_KEPT: u32 = 100_000;

/// A `/proc/meminfo` field (`MemTotal`, `MemAvailable`) in MiB, when the host has one.
pub fn meminfo_mb(field: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.split(':').next() == Some(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((kb / 1024).min(u64::from(u32::MAX)) as u32)
}

/// Processes one task may ask for unless `[tasks] max_pids` says otherwise: far below a
/// host's `pid_max` (32,768 on many), so one task cannot take every pid.
pub const DEFAULT_MAX_PIDS: u32 = 4_096;

/// The longest timeout a task may ask for unless `[tasks] max_timeout_ms` says otherwise: a day.
pub const DEFAULT_MAX_TIMEOUT_MS: u64 = 24 * 3_600_000;

impl TasksConfig {
    /// The ceilings on one task's limits (issue 33): the configured ones, else defaults from
    /// this host — half its memory, all its CPUs — so one task cannot exhaust it.
    pub fn ceilings(&self) -> chorus_io::sandbox::tasks::Ceilings {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let half_the_host = meminfo_mb("MemTotal").map(|mb| mb / 2);
        chorus_io::sandbox::tasks::Ceilings {
            memory_mb: self.max_memory_mb.or(half_the_host),
            cpu_millis: Some(self.max_cpu_millis.unwrap_or(cpus.saturating_mul(1_000))),
            pids: Some(self.max_pids.unwrap_or(DEFAULT_MAX_PIDS)),
            timeout_ms: Some(self.max_timeout_ms.unwrap_or(DEFAULT_MAX_TIMEOUT_MS)),
        }
    }
}

/// Task slots of a node with the Docker sandbox on, unless `[tasks] slots` says otherwise.
pub const DEFAULT_TASK_SLOTS: u32 = 2;

/// Warm sandboxes per task shape, unless `[tasks] pool_size` says otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 2;

/// Warm live sandboxes, unless `[sandbox] live_warm` says otherwise.
pub const DEFAULT_LIVE_WARM: u32 = 2;

/// The most warm live sandboxes a node keeps.
pub const MAX_LIVE_WARM: u32 = 16;

/// Live sandboxes a worker holds, unless `[sandbox] live_max` says otherwise.
pub const DEFAULT_LIVE_MAX: u32 = 64;

/// The most `[sandbox] live_max` may say (as many as task slots may be).
pub const MAX_LIVE_MAX: u32 = MAX_TASK_SLOTS;

/// Live sandboxes one token holds on a worker, unless `[sandbox] live_per_owner` says otherwise.
pub const DEFAULT_LIVE_PER_OWNER: u32 = 8;

/// The most `[sandbox] live_file_max_mb` may say, and its default: the 1 GiB a node relays.
pub const MAX_LIVE_FILE_MB: u32 = (chorus_io::sandbox::live::DEFAULT_MAX_STREAM_BYTES >> 20) as u32;

impl SandboxConfig {
    /// The live-sandbox bounds these settings give.
    pub fn live_limits(&self) -> chorus_io::sandbox::live::LiveLimits {
        chorus_io::sandbox::live::LiveLimits {
            warm: self.live_warm.unwrap_or(DEFAULT_LIVE_WARM) as usize,
            total: self.live_max.unwrap_or(DEFAULT_LIVE_MAX) as usize,
            per_owner: self.live_per_owner.unwrap_or(DEFAULT_LIVE_PER_OWNER) as usize,
            max_stream_bytes: u64::from(self.live_file_max_mb.unwrap_or(MAX_LIVE_FILE_MB)) << 20,
            ..chorus_io::sandbox::live::LiveLimits::default()
        }
    }
}

/// The most task slots a node may offer (what a worker's report may claim).
pub const MAX_TASK_SLOTS: u32 = 1_024;

impl NodeConfig {
    /// The task slots this node offers: `[tasks] slots`, or [`DEFAULT_TASK_SLOTS`] with the
    /// Docker sandbox on and 0 without.
    pub fn task_slots(&self) -> u32 {
        self.tasks.slots.unwrap_or(if self.sandbox.docker {
            DEFAULT_TASK_SLOTS
        } else {
            0
        })
    }

    /// The capabilities advertised: the configured ones, plus `sandbox` when the node runs
    /// tasks and `repo:NAME` for each repository it offers.
    pub fn advertised_capabilities(&self) -> Vec<String> {
        let mut caps = self.capabilities.clone();
        let mut add = |c: String| {
            if !caps.contains(&c) {
                caps.push(c);
            }
        };
        if self.task_slots() > 0 {
            add(chorus_core::task::SANDBOX_CAPABILITY.to_owned());
            for name in self.repos.keys() {
                add(format!(
                    "{}{name}",
                    chorus_core::task::REPO_CAPABILITY_PREFIX
                ));
            }
        }
        caps
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
    /// libp2p listen multiaddr (repeatable) [default: /ip4/127.0.0.1/tcp/7946, loopback only;
    /// use /ip4/0.0.0.0/tcp/7946 to let other machines connect].
    #[arg(long, value_name = "MULTIADDR")]
    pub listen: Vec<String>,
    /// HTTP API address [default: 127.0.0.1:7070].
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// Bootstrap peer multiaddr (repeatable).
    #[arg(long, value_name = "MULTIADDR")]
    pub bootstrap: Vec<String>,
    /// Admin-eligible nodes to discover before the first election: the same N on each voter
    /// that starts the cluster (3 for three voters). Required when other machines can reach
    /// the node (listening off loopback, --bootstrap, mDNS); a node only this machine reaches
    /// may leave it out and founds a one-node cluster.
    #[arg(long, value_name = "N")]
    pub bootstrap_expect: Option<u32>,
    /// Cluster id [default: chorus]. A data directory keeps the id it was made with: a start
    /// under another is refused (use the old id, or a fresh --data-dir).
    #[arg(long, value_name = "ID")]
    pub cluster_id: Option<String>,
    /// Pre-shared network key file (private network).
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// A peer id allowed to connect (repeatable; config `allowed_peers`); given any, every
    /// other peer is refused even with the pre-shared key.
    #[arg(long, value_name = "PEER_ID")]
    pub allow_peer: Vec<String>,
    /// The API token key file, shared by the nodes whose tokens should be good everywhere
    /// (config `acl_key_file`) [default: DATA_DIR/acl.key, made at first start].
    #[arg(long, value_name = "FILE")]
    pub acl_key_file: Option<PathBuf>,
    /// A DNS name the HTTP API answers to (repeatable; config `http_names`); IP addresses and
    /// `localhost` always work, other names are refused (DNS rebinding).
    #[arg(long, value_name = "NAME")]
    pub http_name: Vec<String>,
    /// TLS for the HTTP API (config `http_tls`) [default: auto, TLS when it listens off
    /// loopback or a certificate is given; a certificate is made in DATA_DIR/http-tls/ when
    /// none is given, and its fingerprint printed for `chorus --tls-fingerprint`].
    #[arg(long, value_enum, value_name = "WHEN")]
    pub http_tls: Option<HttpTls>,
    /// The HTTP API's certificate chain, PEM (config `http_tls_cert`; with --http-tls-key).
    #[arg(long, value_name = "FILE", requires = "http_tls_key")]
    pub http_tls_cert: Option<PathBuf>,
    /// The private key of --http-tls-cert, PEM (config `http_tls_key`).
    #[arg(long, value_name = "FILE", requires = "http_tls_cert")]
    pub http_tls_key: Option<PathBuf>,
    /// Do not serve the web console at /ui (config `http_ui = false`); the API is unchanged.
    #[arg(long)]
    pub no_http_ui: bool,
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
    /// Discover peers on the local network with mDNS (off by default).
    #[arg(long, conflicts_with = "no_mdns")]
    pub mdns: bool,
    /// Disable mDNS discovery (the default; overrides `mdns = true` in the config file).
    #[arg(long)]
    pub no_mdns: bool,
    /// Run task sandboxes on the local Docker Engine (DOCKER_HOST or /var/run/docker.sock;
    /// config `sandbox.docker`, off by default). At start the node removes the sandboxes its
    /// earlier runs left behind (owner gone or deadline passed; never a live process's, never
    /// another node's), and it does not start when Docker does not answer.
    #[arg(long, conflicts_with = "no_docker")]
    pub docker: bool,
    /// Do not use Docker (the default; overrides `sandbox.docker = true` in the config file).
    #[arg(long)]
    pub no_docker: bool,
    /// Start even though the data directory holds this node's identity but no event log. The
    /// log holds the node's term and vote: without it the node could vote twice in a term, so
    /// only pass this once the cluster has moved past the terms the node may have voted in
    /// (or it never ran), e.g. after restoring a lost disk.
    #[arg(long)]
    pub accept_log_reset: bool,
    /// Stop gracefully when the parent process exits (used by `chorus devcluster`).
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
    /// Cluster seed for the core's RNG [default: 0]: for reproducing a recorded run in tests,
    /// not for operators (hidden from --help).
    #[arg(long, value_name = "N", hide = true)]
    pub cluster_seed: Option<u64>,
    /// Tasks this node runs at once (config `tasks.slots`) [default: 2 with --docker, else 0;
    /// 0: it runs none].
    #[arg(long, value_name = "N")]
    pub task_slots: Option<u32>,
    /// A repository tasks may mount, `NAME=/path` (repeatable; config `[repos]`). Advertised as
    /// the capability `repo:NAME`.
    #[arg(long, value_name = "NAME=PATH")]
    pub repo: Vec<String>,
    /// An image to keep warm sandboxes of from the start (repeatable; config
    /// `tasks.warm_images`).
    #[arg(long, value_name = "IMAGE")]
    pub warm_image: Vec<String>,
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
    /// Where the HTTP API's TLS certificate comes from, if it speaks TLS.
    pub http_tls: Option<TlsSource>,
    /// The private network's key, read from `psk_file`.
    pub psk: Option<PreSharedKey>,
    /// The peers allowed to connect (`allowed_peers`), when pinned.
    pub allowlist: Option<BTreeSet<libp2p::PeerId>>,
    /// Things that are allowed but probably not meant (logged at start, once logging is up).
    pub warnings: Vec<String>,
    /// Start even when the identity was kept but the event log is gone (`--accept-log-reset`).
    pub accept_log_reset: bool,
    /// Stop when the parent process exits (`--exit-with-parent`).
    pub exit_with_parent: bool,
}

/// The HTTP API's certificate and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// Given by the operator (PEM files).
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
    /// Made at first start and kept in `DATA_DIR/http-tls/`.
    Generated,
}

impl NodeConfig {
    /// Reads `path` as TOML. Errors name the file, the line and the key.
    pub fn from_file(path: &Path) -> anyhow::Result<NodeConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        NodeConfig::from_toml(&text).map_err(|e| anyhow!("config file {}: {e}", path.display()))
    }

    /// Parses TOML text; the error is one line with the line number and the key.
    pub fn from_toml(text: &str) -> anyhow::Result<NodeConfig> {
        let mut config = NodeConfig::parse_toml(text)?;
        config.expect_given = text
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get("protocol")?.get("bootstrap_expect").cloned())
            .is_some();
        Ok(config)
    }

    fn parse_toml(text: &str) -> anyhow::Result<NodeConfig> {
        // `http` is the API's address, so an `[http]` table (as other daemons configure their
        // HTTP server) cannot be: say where its keys live instead of a bare type error.
        let table = text.parse::<toml::Table>().ok();
        if table
            .as_ref()
            .and_then(|t| t.get("http"))
            .is_some_and(toml::Value::is_table)
        {
            bail!(
                "invalid config `http`: it is the API's address (\"HOST:PORT\"), not a table; \
                 the API's other settings are top-level keys: http_ui, http_names, http_tls, \
                 http_tls_cert, http_tls_key"
            );
        }
        toml::from_str(text).map_err(|e| toml_error(text, &e))
    }

    /// Applies command-line overrides.
    pub fn apply(&mut self, flags: &RunFlags) -> anyhow::Result<()> {
        if let Some(v) = &flags.data_dir {
            self.data_dir = v.clone();
            self.from_flags.insert("data_dir", "--data-dir");
        }
        if !flags.listen.is_empty() {
            self.listen = flags.listen.clone();
            self.from_flags.insert("listen", "--listen");
        }
        if let Some(v) = &flags.http {
            self.http = v.clone();
            self.from_flags.insert("http", "--http");
        }
        if !flags.bootstrap.is_empty() {
            self.bootstrap = flags.bootstrap.clone();
            self.from_flags.insert("bootstrap", "--bootstrap");
        }
        if let Some(v) = flags.bootstrap_expect {
            self.protocol.bootstrap_expect = v;
            self.expect_given = true;
            self.from_flags
                .insert("protocol.bootstrap_expect", "--bootstrap-expect");
        }
        if let Some(v) = &flags.cluster_id {
            self.protocol.cluster_id = v.clone();
            self.from_flags
                .insert("protocol.cluster_id", "--cluster-id");
        }
        if let Some(v) = &flags.psk_file {
            self.psk_file = Some(v.clone());
            self.from_flags.insert("psk_file", "--psk-file");
        }
        if !flags.allow_peer.is_empty() {
            self.allowed_peers = flags.allow_peer.clone();
            self.from_flags.insert("allowed_peers", "--allow-peer");
        }
        if let Some(v) = &flags.acl_key_file {
            self.acl_key_file = Some(v.clone());
            self.from_flags.insert("acl_key_file", "--acl-key-file");
        }
        if !flags.http_name.is_empty() {
            self.http_names = flags.http_name.clone();
            self.from_flags.insert("http_names", "--http-name");
        }
        if let Some(v) = flags.http_tls {
            self.http_tls = v;
            self.from_flags.insert("http_tls", "--http-tls");
        }
        if let Some(v) = &flags.http_tls_cert {
            self.http_tls_cert = Some(v.clone());
            self.from_flags.insert("http_tls_cert", "--http-tls-cert");
        }
        if let Some(v) = &flags.http_tls_key {
            self.http_tls_key = Some(v.clone());
            self.from_flags.insert("http_tls_key", "--http-tls-key");
        }
        if flags.no_http_ui {
            self.http_ui = false;
        }
        if !flags.capability.is_empty() {
            self.capabilities = flags.capability.clone();
            self.from_flags.insert("capabilities", "--capability");
        }
        if let Some(v) = flags.heartbeat_ms {
            self.protocol.heartbeat_interval_ms = v;
            self.from_flags
                .insert("protocol.heartbeat_interval_ms", "--heartbeat-ms");
        }
        if let Some(v) = &flags.election_timeout_ms {
            let (min, max) = parse_range(v).with_context(|| {
                format!("invalid flag `--election-timeout-ms`: {v:?} is not MIN..MAX")
            })?;
            self.protocol.election_timeout_min_ms = min;
            self.protocol.election_timeout_max_ms = max;
            for key in [
                "protocol.election_timeout_min_ms",
                "protocol.election_timeout_max_ms",
            ] {
                self.from_flags.insert(key, "--election-timeout-ms");
            }
        }
        if let Some(v) = flags.discovery_timeout_ms {
            self.protocol.discovery_timeout_ms = v;
            self.from_flags
                .insert("protocol.discovery_timeout_ms", "--discovery-timeout-ms");
        }
        if let Some(v) = flags.log_format {
            self.log_format = v;
        }
        if flags.mdns {
            self.mdns = true;
        }
        if flags.no_mdns {
            self.mdns = false;
        }
        if flags.docker {
            self.sandbox.docker = true;
        }
        if flags.no_docker {
            self.sandbox.docker = false;
        }
        if let Some(v) = flags.cluster_seed {
            self.cluster_seed = v;
        }
        if let Some(v) = flags.task_slots {
            self.tasks.slots = Some(v);
            self.from_flags.insert("tasks.slots", "--task-slots");
        }
        for r in &flags.repo {
            let (name, path) = r
                .split_once('=')
                .ok_or_else(|| anyhow!("invalid flag `--repo`: {r:?} is not NAME=PATH"))?;
            self.repos.insert(name.to_owned(), PathBuf::from(path));
            self.from_flags.insert("repos", "--repo");
        }
        if !flags.warm_image.is_empty() {
            self.tasks.warm_images = flags.warm_image.clone();
        }
        Ok(())
    }

    /// Checks every value, naming the key (or the flag) of the first bad one, and reads the
    /// pre-shared key file.
    pub fn resolve(self) -> anyhow::Result<Resolved> {
        if let Err(e) = self.protocol.validate() {
            let key = format!("protocol.{}", e.key);
            return Err(self.invalid(&key, &e.reason));
        }
        let addrs = |key: &str, values: &[String]| -> anyhow::Result<Vec<Multiaddr>> {
            values
                .iter()
                .map(|v| {
                    v.parse::<Multiaddr>()
                        .map_err(|e| self.invalid(key, &format!("{v:?} is not a multiaddr: {e}")))
                })
                .collect()
        };
        let listen = addrs("listen", &self.listen)?;
        let bootstrap = addrs("bootstrap", &self.bootstrap)?;
        self.check_founding(&listen, &bootstrap)?;
        self.check_admission(&listen, &bootstrap)?;
        let mut allowlist = BTreeSet::new();
        for p in &self.allowed_peers {
            let id = p
                .parse::<libp2p::PeerId>()
                .map_err(|e| self.invalid("allowed_peers", &format!("{p:?} is no peer id: {e}")))?;
            allowlist.insert(id);
        }
        let allowlist = (!allowlist.is_empty()).then_some(allowlist);
        let http: SocketAddr = self
            .http
            .parse()
            .map_err(|e| self.invalid("http", &format!("{:?} is not HOST:PORT: {e}", self.http)))?;
        if self.data_dir.as_os_str().is_empty() {
            return Err(self.invalid("data_dir", "must not be empty"));
        }
        if self.capabilities.iter().any(|c| c.is_empty()) {
            return Err(self.invalid("capabilities", "a capability name is empty"));
        }
        let advertised = self.advertised_capabilities().len();
        if advertised > chorus_core::MAX_CAPABILITIES {
            return Err(self.invalid(
                "capabilities",
                &format!(
                    "{advertised} capabilities (with `sandbox` and one `repo:NAME` per \
                     repository) are more than the {} a peer keeps",
                    chorus_core::MAX_CAPABILITIES
                ),
            ));
        }
        if self.snapshot_every_events == 0 {
            bail!("invalid config `snapshot_every_events`: must be at least 1");
        }
        if self.sandbox.live_warm.is_some_and(|n| n > MAX_LIVE_WARM) {
            return Err(self.invalid(
                "sandbox.live_warm",
                &format!("at most {MAX_LIVE_WARM} warm live sandboxes"),
            ));
        }
        let live_max = self.sandbox.live_max.unwrap_or(DEFAULT_LIVE_MAX);
        if !(1..=MAX_LIVE_MAX).contains(&live_max) {
            return Err(self.invalid(
                "sandbox.live_max",
                &format!("1 to {MAX_LIVE_MAX} live sandboxes"),
            ));
        }
        let per_owner = self
            .sandbox
            .live_per_owner
            .unwrap_or(DEFAULT_LIVE_PER_OWNER);
        if per_owner == 0 || per_owner > live_max {
            return Err(self.invalid(
                "sandbox.live_per_owner",
                &format!("1 to live_max ({live_max}) live sandboxes"),
            ));
        }
        let psk = match &self.psk_file {
            Some(path) => Some(
                chorus_io::transport::load_psk(path)
                    .map_err(|e| self.invalid("psk_file", &e.to_string()))?,
            ),
            None => None,
        };
        let slots = self.task_slots();
        if slots > MAX_TASK_SLOTS {
            return Err(self.invalid("tasks.slots", &format!("at most {MAX_TASK_SLOTS}")));
        }
        if self.tasks.log_cap_mb.is_some_and(|mb| mb > MAX_LOG_CAP_MB) {
            return Err(self.invalid("tasks.log_cap_mb", &format!("at most {MAX_LOG_CAP_MB}")));
        }
        if let Some(kept) = self.tasks.logs_kept {
            if kept == 0 || kept > MAX_LOGS_KEPT {
                return Err(self.invalid("tasks.logs_kept", &format!("from 1 to {MAX_LOGS_KEPT}")));
            }
        }
        if let Some(mb) = self.sandbox.live_file_max_mb {
            if mb == 0 || mb > MAX_LIVE_FILE_MB {
                return Err(self.invalid(
                    "sandbox.live_file_max_mb",
                    &format!("from 1 to {MAX_LIVE_FILE_MB} MiB"),
                ));
            }
        }
        if let Some(period) = self.tasks.reap_period_s {
            if period == 0 || period > MAX_REAP_PERIOD_S {
                return Err(self.invalid(
                    "tasks.reap_period_s",
                    &format!("from 1 to {MAX_REAP_PERIOD_S} seconds"),
                ));
            }
        }
        if slots > 0 && !self.sandbox.docker {
            return Err(self.invalid(
                "tasks.slots",
                "tasks run in Docker sandboxes: turn the sandbox on (--docker, or `docker = \
                 true` in `[sandbox]`) or set 0",
            ));
        }
        let mut this = self;
        this.repos = this.resolved_repos()?;
        let mut warnings = capability_warnings(&this.capabilities);
        if this.capabilities.iter().any(|c| c == DOCKER) && !this.sandbox.docker {
            warnings.push(
                "capability \"docker\" is advertised, but the Docker sandbox is off: this node \
                 neither connects to Docker nor reaps the sandboxes it left (pass --docker or \
                 set `docker = true` in `[sandbox]`)"
                    .to_owned(),
            );
        }
        let http_tls = this.http_tls_source(http)?;
        if http_tls.is_none() && !http.ip().is_loopback() {
            warnings.push(format!(
                "the HTTP API listens on {http} without TLS (http_tls = \"off\"): tokens and \
                 task output cross the network in the clear; keep it behind a TLS proxy on a \
                 trusted network"
            ));
        }
        Ok(Resolved {
            config: this,
            listen,
            bootstrap,
            http,
            http_tls,
            psk,
            allowlist,
            warnings,
            accept_log_reset: false,
            exit_with_parent: false,
        })
    }

    /// A voter left at the default `bootstrap_expect` of 1 founds a one-node cluster the moment
    /// it starts. That is right for a node only this machine can reach, and a mistake for one
    /// that can meet others (several such nodes would found several clusters): there it must
    /// be asked for.
    fn check_founding(&self, listen: &[Multiaddr], bootstrap: &[Multiaddr]) -> anyhow::Result<()> {
        let voter = self.capabilities.iter().any(|c| c == ADMIN_ELECTION);
        if !voter || self.expect_given || self.protocol.bootstrap_expect != 1 {
            return Ok(());
        }
        let reachable = listen.iter().any(|a| !is_loopback(a));
        let why = if reachable {
            "it listens on an address other machines can reach"
        } else if !bootstrap.is_empty() {
            "it has bootstrap peers"
        } else if self.mdns {
            "mDNS is on"
        } else {
            return Ok(());
        };
        Err(self.invalid(
            "protocol.bootstrap_expect",
            &format!(
                "not set, and {why}: a voter would found a one-node cluster of its own at once. \
                 Set it (--bootstrap-expect N) to the number of admin-eligible nodes that start \
                 the cluster together — the same on each, more than half of them — or to 1 to \
                 found a one-node cluster on purpose"
            ),
        ))
    }

    /// A node that can meet other machines — listening off loopback, dialling a peer off
    /// loopback, or discovering with mDNS — admits only peers holding the cluster's pre-shared
    /// key: without it, anyone who reaches the port joins, votes when made a voter, and is
    /// handed other users' tasks (issue 33).
    fn check_admission(&self, listen: &[Multiaddr], bootstrap: &[Multiaddr]) -> anyhow::Result<()> {
        if self.psk_file.is_some() {
            return Ok(());
        }
        let why = if let Some(a) = listen.iter().find(|a| !is_loopback(a)) {
            format!("it listens on {a}, which other machines can reach")
        } else if let Some(a) = bootstrap.iter().find(|a| !is_loopback(a)) {
            format!("it dials {a}, another machine")
        } else if self.mdns {
            "mDNS is on".to_owned()
        } else {
            return Ok(());
        };
        Err(self.invalid(
            "psk_file",
            &format!(
                "not set, and {why}: without the cluster's pre-shared key any peer that reaches \
                 it could join. Make one with `chorus psk generate swarm.key`, copy it to every \
                 node (mode 0600) and pass --psk-file swarm.key"
            ),
        ))
    }

    /// Where the API's certificate comes from: off loopback TLS is the default, since tokens
    /// and task output would otherwise cross the network readable (issue 33).
    fn http_tls_source(&self, http: SocketAddr) -> anyhow::Result<Option<TlsSource>> {
        let files = match (&self.http_tls_cert, &self.http_tls_key) {
            (Some(cert), Some(key)) => Some(TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(self.invalid("http_tls_key", "not set, but http_tls_cert is"))
            }
            (None, Some(_)) => {
                return Err(self.invalid("http_tls_cert", "not set, but http_tls_key is"))
            }
        };
        let wanted = match self.http_tls {
            HttpTls::On => true,
            HttpTls::Off => {
                if files.is_some() {
                    return Err(self.invalid(
                        "http_tls",
                        "\"off\", but a certificate is given (http_tls_cert): drop one of them",
                    ));
                }
                false
            }
            HttpTls::Auto => files.is_some() || !http.ip().is_loopback(),
        };
        Ok(wanted.then(|| files.unwrap_or(TlsSource::Generated)))
    }

    /// The repositories, each resolved (canonical, so no symlink in a mounted path can lead
    /// elsewhere later) and checked to be a directory; names as a task spec allows them.
    fn resolved_repos(&self) -> anyhow::Result<BTreeMap<String, PathBuf>> {
        let mut out = BTreeMap::new();
        for (name, path) in &self.repos {
            let key = format!("repos.{name}");
            let bad_name = name.is_empty()
                || name.len() > chorus_core::task::bounds::NAME
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if bad_name {
                return Err(self.invalid(
                    "repos",
                    &format!("{name:?} is not a repository name (letters, digits, `-`, `_`, `.`)"),
                ));
            }
            let resolved = path.canonicalize().map_err(|e| {
                self.invalid_key(&key, "repos", &format!("{}: {e}", path.display()))
            })?;
            if !resolved.is_dir() {
                return Err(self.invalid_key(
                    &key,
                    "repos",
                    &format!("{} is not a directory", path.display()),
                ));
            }
            out.insert(name.clone(), resolved);
        }
        Ok(out)
    }

    /// An error about `key`, named as the flag when `flag_key`'s value came from one.
    fn invalid_key(&self, key: &str, flag_key: &str, reason: &str) -> anyhow::Error {
        match self.from_flags.get(flag_key) {
            Some(flag) => anyhow!("invalid flag `{flag}` (config `{key}`): {reason}"),
            None => anyhow!("invalid config `{key}`: {reason}"),
        }
    }

    /// An error about `key`, named as the user set it: the flag when it came from one.
    fn invalid(&self, key: &str, reason: &str) -> anyhow::Error {
        match self.from_flags.get(key) {
            Some(flag) => anyhow!("invalid flag `{flag}` (config `{key}`): {reason}"),
            None => anyhow!("invalid config `{key}`: {reason}"),
        }
    }
}

/// Whether a listen address is loopback-only (127.0.0.0/8 or ::1).
fn is_loopback(addr: &Multiaddr) -> bool {
    use libp2p::multiaddr::Protocol;
    addr.iter().any(|p| match p {
        Protocol::Ip4(ip) => ip.is_loopback(),
        Protocol::Ip6(ip) => ip.is_loopback(),
        _ => false,
    })
}

/// Warnings for capability names that look like a known one but are not (`admin-election`,
/// `Admin_Election`, `admin_electon`): such a node silently is not what was meant.
pub fn capability_warnings(capabilities: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for c in capabilities {
        if KNOWN_CAPABILITIES.contains(&c.as_str()) {
            continue;
        }
        let normal: String = c
            .trim()
            .to_ascii_lowercase()
            .chars()
            .map(|ch| if ch == '-' || ch == ' ' { '_' } else { ch })
            .collect();
        let near = KNOWN_CAPABILITIES
            .iter()
            .find(|k| normal == **k || edit_distance(&normal, k) <= 2);
        if let Some(known) = near {
            let effect =
                if *known == ADMIN_ELECTION && !capabilities.iter().any(|x| x == ADMIN_ELECTION) {
                    " — as given, this node is NOT admin-eligible (not a voter)"
                } else {
                    ""
                };
            out.push(format!(
                "capability {c:?} is not a known name; did you mean {known:?}?{effect}"
            ));
        }
    }
    out
}

/// Levenshtein distance, for short names only.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// A TOML parse error of `text` as one line naming the line and the key (`line 3:
/// `protocol.heartbeat_interval_ms`: invalid type…`); shared by every TOML file the CLI reads.
pub fn toml_error(text: &str, e: &toml::de::Error) -> anyhow::Error {
    let message = e.message().trim().replace('\n', " ");
    let Some(span) = e.span() else {
        return anyhow!("{message}");
    };
    let start = span.start.min(text.len());
    let line = text[..start].matches('\n').count() + 1;
    match key_at(text, start) {
        Some(key) if !message.contains(&format!("`{key}`")) => {
            anyhow!("line {line}: `{key}`: {message}")
        }
        _ => anyhow!("line {line}: {message}"),
    }
}

/// The dotted key of the TOML line holding byte `offset`: the `key = …` on that line, inside the
/// last `[table]` header above it.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && !l.starts_with("[["))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_owned());
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_owned(),
    })
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
        for (toml, key) in [
            ("[tasks]\nlog_cap_mb = 5000\n", "`tasks.log_cap_mb`"),
            ("[tasks]\nlogs_kept = 0\n", "`tasks.logs_kept`"),
            ("[tasks]\nreap_period_s = 0\n", "`tasks.reap_period_s`"),
            (
                "[sandbox]\nlive_file_max_mb = 0\n",
                "`sandbox.live_file_max_mb`",
            ),
            (
                "[sandbox]\nlive_file_max_mb = 1025\n",
                "`sandbox.live_file_max_mb`",
            ),
            ("[tasks]\nreap_period_s = 86401\n", "`tasks.reap_period_s`"),
            ("[sandbox]\nlive_max = 0\n", "`sandbox.live_max`"),
            ("[sandbox]\nlive_max = 1025\n", "`sandbox.live_max`"),
            (
                "[sandbox]\nlive_per_owner = 0\n",
                "`sandbox.live_per_owner`",
            ),
            (
                "[sandbox]\nlive_max = 4\nlive_per_owner = 5\n",
                "`sandbox.live_per_owner`",
            ),
        ] {
            let text = NodeConfig::from_toml(toml)
                .unwrap()
                .resolve()
                .unwrap_err()
                .to_string();
            assert!(text.contains(key), "{text}");
        }
        let ok = NodeConfig::from_toml("[tasks]\nlog_cap_mb = 0\nlogs_kept = 1\n").unwrap();
        assert!(ok.resolve().is_ok(), "0 turns the logs off");
        let live =
            NodeConfig::from_toml("[sandbox]\nlive_max = 100\nlive_per_owner = 100\n").unwrap();
        assert!(live.clone().resolve().is_ok());
        let limits = live.sandbox.live_limits();
        assert_eq!((limits.total, limits.per_owner), (100, 100));
        assert_eq!(limits.max_stream_bytes, 1 << 30);
        let small = NodeConfig::from_toml("[sandbox]\nlive_file_max_mb = 2\n").unwrap();
        assert!(small.clone().resolve().is_ok());
        assert_eq!(small.sandbox.live_limits().max_stream_bytes, 2 << 20);
        let default = NodeConfig::default().sandbox.live_limits();
        assert_eq!((default.total, default.per_owner, default.warm), (64, 8, 2));
    }

    /// Issue 37: the web console is on unless `http_ui = false` or `--no-http-ui`.
    #[test]
    fn the_console_is_on_unless_turned_off() {
        assert!(NodeConfig::default().resolve().unwrap().config.http_ui);
        let off = NodeConfig::from_toml("http_ui = false\n").unwrap();
        assert!(!off.resolve().unwrap().config.http_ui);
        let mut on = NodeConfig::from_toml("http_ui = true\n").unwrap();
        on.apply(&RunFlags {
            no_http_ui: true,
            ..RunFlags::default()
        })
        .unwrap();
        assert!(!on.http_ui);
        let err = NodeConfig::from_toml("http_ui = \"off\"\n").unwrap_err();
        assert!(err.to_string().contains("http_ui"), "{err}");
        let err = NodeConfig::from_toml("[http]\nui = false\n").unwrap_err();
        assert!(err.to_string().contains("http_ui"), "{err}");
    }

    #[test]
    fn a_type_error_names_the_key() {
        let err = NodeConfig::from_toml(
            "http = \"127.0.0.1:1\"\n[protocol]\nheartbeat_interval_ms = \"fast\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("`protocol.heartbeat_interval_ms`"), "{err}");
        assert!(err.contains("fast"), "{err}");
    }

    #[test]
    fn a_bad_flag_is_named_as_typed() {
        let mut c = NodeConfig::default();
        c.apply(&RunFlags {
            heartbeat_ms: Some(0),
            ..RunFlags::default()
        })
        .unwrap();
        let err = c.resolve().unwrap_err().to_string();
        assert!(err.contains("`--heartbeat-ms`"), "{err}");
        // The same value from the file names the key.
        let c = NodeConfig::from_toml("[protocol]\nheartbeat_interval_ms = 0\n").unwrap();
        let err = c.resolve().unwrap_err().to_string();
        assert!(
            err.starts_with("invalid config `protocol.heartbeat_interval_ms`"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_psk_file_names_the_key() {
        let c = NodeConfig::from_toml("psk_file = \"/nonexistent/swarm.key\"\n").unwrap();
        let err = c.resolve().unwrap_err().to_string();
        assert!(err.contains("`psk_file`"), "{err}");
        assert!(err.contains("/nonexistent/swarm.key"), "{err}");
        let mut c = NodeConfig::default();
        c.apply(&RunFlags {
            psk_file: Some("/nonexistent/k".into()),
            ..RunFlags::default()
        })
        .unwrap();
        let err = c.resolve().unwrap_err().to_string();
        assert!(err.contains("`--psk-file`"), "{err}");
    }

    /// Issue 54, item 9: a bad key file is said in words, never as libp2p's Rust variant
    /// (`InvalidKeyFile`).
    #[test]
    fn a_bad_psk_file_is_said_in_words() {
        let dir = tempfile::tempdir().unwrap();
        for (text, words) in [
            ("hello\n", "three lines"),
            ("/key/swarm/psk/1.0.0/\n/base16/\nabc\n", "64 hex digits"),
            ("/key/swarm/psk/1.0.0/\n/base64/\nabc\n", "/base16/"),
        ] {
            let file = dir.path().join("swarm.key");
            std::fs::write(&file, text).unwrap();
            let c = NodeConfig {
                psk_file: Some(file),
                ..NodeConfig::default()
            };
            let err = format!("{:#}", c.resolve().unwrap_err());
            assert!(
                err.contains(words) && err.contains("chorus psk generate"),
                "{err}"
            );
            assert!(!err.contains("Invalid"), "{err}");
        }
    }

    #[test]
    fn capability_typos_are_warned_about() {
        let w = capability_warnings(&["admin-election".into()]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("\"admin_election\"") && w[0].contains("NOT admin-eligible"));
        assert_eq!(capability_warnings(&["admin_electon".into()]).len(), 1);
        assert_eq!(capability_warnings(&["Docker".into()]).len(), 1);
        assert!(capability_warnings(&["admin_election".into(), "gpu".into()]).is_empty());
    }

    #[test]
    fn the_default_listens_on_loopback_without_mdns() {
        let r = NodeConfig::default().resolve().unwrap();
        assert_eq!(r.listen[0].to_string(), DEFAULT_LISTEN);
        assert!(!r.config.mdns);
    }

    // Issue 10, case 3: three voters started with the defaults but reachable founded three
    // clusters. A voter others can reach founds alone only when asked to.
    #[test]
    fn a_reachable_voter_must_be_told_how_many_found_the_cluster() {
        let reachable = [
            (vec!["/ip4/0.0.0.0/tcp/7946"], vec![], false),
            (vec![DEFAULT_LISTEN], vec!["/ip4/10.0.0.1/tcp/7946"], false),
            (vec![DEFAULT_LISTEN], vec![], true),
        ];
        let dir = tempfile::tempdir().unwrap();
        let psk = dir.path().join("swarm.key");
        crate::cli::psk::generate(&psk).unwrap();
        for (listen, bootstrap, mdns) in reachable {
            let config = NodeConfig {
                listen: listen.iter().map(|s| s.to_string()).collect(),
                bootstrap: bootstrap.iter().map(|s| s.to_string()).collect(),
                mdns,
                psk_file: Some(psk.clone()),
                ..NodeConfig::default()
            };
            let err = config.clone().resolve().unwrap_err().to_string();
            assert!(err.contains("protocol.bootstrap_expect"), "{err}");
            assert!(err.contains("--bootstrap-expect"), "{err}");
            // Said on purpose (flag or file), or any other number, or a worker: fine.
            let mut flagged = config.clone();
            flagged
                .apply(&RunFlags {
                    bootstrap_expect: Some(1),
                    ..RunFlags::default()
                })
                .unwrap();
            flagged.resolve().unwrap();
            let mut three = config.clone();
            three.protocol.bootstrap_expect = 3;
            three.resolve().unwrap();
            let worker = NodeConfig {
                capabilities: vec!["docker".into()],
                ..config.clone()
            };
            worker.resolve().unwrap();
        }
        let file = NodeConfig::from_toml(&format!(
            "listen = [\"/ip4/0.0.0.0/tcp/7946\"]\npsk_file = {:?}\n[protocol]\n\
             bootstrap_expect = 1\n",
            psk.display().to_string()
        ))
        .unwrap();
        file.resolve().unwrap();
        let file = NodeConfig::from_toml("listen = [\"/ip4/0.0.0.0/tcp/7946\"]\n").unwrap();
        assert!(file.resolve().is_err());
    }

    /// Issue 33: a node that can meet other machines admits only holders of the cluster key;
    /// a pinned node only the peers it names.
    #[test]
    fn a_node_other_machines_reach_needs_the_cluster_key() {
        let reachable = [
            (vec!["/ip4/0.0.0.0/tcp/7946"], vec![], false, "listens on"),
            (
                vec![DEFAULT_LISTEN],
                vec!["/ip4/10.0.0.1/tcp/7946"],
                false,
                "dials",
            ),
            (vec![DEFAULT_LISTEN], vec![], true, "mDNS"),
        ];
        for (listen, bootstrap, mdns, why) in reachable {
            let mut config = NodeConfig {
                listen: listen.iter().map(|s| s.to_string()).collect(),
                bootstrap: bootstrap.iter().map(|s| s.to_string()).collect(),
                mdns,
                ..NodeConfig::default()
            };
            config.protocol.bootstrap_expect = 3;
            let err = config.resolve().unwrap_err().to_string();
            assert!(err.contains("`psk_file`") && err.contains(why), "{err}");
            assert!(err.contains("chorus psk generate"), "{err}");
        }
        // Loopback only: a local node needs none.
        NodeConfig::default().resolve().unwrap();
        let pinned = NodeConfig {
            allowed_peers: vec!["12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".into()],
            ..NodeConfig::default()
        };
        assert_eq!(pinned.resolve().unwrap().allowlist.unwrap().len(), 1);
        let mut bad = NodeConfig::default();
        bad.apply(&RunFlags {
            allow_peer: vec!["n1".into()],
            ..RunFlags::default()
        })
        .unwrap();
        let err = bad.resolve().unwrap_err().to_string();
        assert!(
            err.contains("--allow-peer") && err.contains("no peer id"),
            "{err}"
        );
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

    #[test]
    fn docker_is_off_unless_asked_for() {
        let r = NodeConfig::default().resolve().unwrap();
        assert!(!r.config.sandbox.docker);
        let mut c = NodeConfig::from_toml("[sandbox]\ndocker = true\n").unwrap();
        assert!(c.sandbox.docker);
        c.apply(&RunFlags {
            no_docker: true,
            ..RunFlags::default()
        })
        .unwrap();
        assert!(!c.sandbox.docker);
        c.apply(&RunFlags {
            docker: true,
            ..RunFlags::default()
        })
        .unwrap();
        assert!(c.sandbox.docker);
        let err = NodeConfig::from_toml("[sandbox]\ndokcer = true\n").unwrap_err();
        assert!(err.to_string().contains("dokcer"), "{err}");
    }

    #[test]
    fn the_docker_capability_without_docker_is_warned_about() {
        let mut c = NodeConfig::from_toml("capabilities = [\"docker\"]\n").unwrap();
        let w = c.clone().resolve().unwrap().warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("--docker"), "{w:?}");
        c.sandbox.docker = true;
        assert!(c.resolve().unwrap().warnings.is_empty());
    }

    #[test]
    fn task_slots_follow_docker_and_repos_are_resolved_and_advertised() {
        let r = NodeConfig::default().resolve().unwrap();
        assert_eq!(r.config.task_slots(), 0);
        assert_eq!(r.config.advertised_capabilities(), [ADMIN_ELECTION]);
        let c = NodeConfig::from_toml("[sandbox]\ndocker = true\n").unwrap();
        assert_eq!(c.task_slots(), DEFAULT_TASK_SLOTS);
        let err = NodeConfig::from_toml("[tasks]\nslots = 3\n")
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`tasks.slots`") && err.contains("--docker"),
            "{err}"
        );
        let off = NodeConfig::from_toml("[sandbox]\ndocker = true\n[tasks]\nslots = 0\n").unwrap();
        assert_eq!(off.task_slots(), 0);

        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut c = NodeConfig::from_toml("[sandbox]\ndocker = true\n").unwrap();
        c.apply(&RunFlags {
            repo: vec![format!("src={}", link.display())],
            ..RunFlags::default()
        })
        .unwrap();
        let r = c.resolve().unwrap();
        assert_eq!(
            r.config.repos["src"],
            real.canonicalize().unwrap(),
            "symlinks resolved"
        );
        let caps = r.config.advertised_capabilities();
        assert!(caps.contains(&"sandbox".to_owned()) && caps.contains(&"repo:src".to_owned()));
        let mut missing = NodeConfig::from_toml("[sandbox]\ndocker = true\n").unwrap();
        missing.repos.insert("gone".into(), dir.path().join("nope"));
        let err = missing.resolve().unwrap_err().to_string();
        assert!(err.contains("`repos.gone`"), "{err}");
        let mut bad = NodeConfig::default();
        bad.repos.insert("a/b".into(), real);
        assert!(bad
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("repository name"));
    }
}
