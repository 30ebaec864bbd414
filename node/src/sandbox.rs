//! `chorus sandbox`: a thin command line over `chorus_io::sandbox` (the Docker provider).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use chorus_io::sandbox::docker::DockerProvider;
use chorus_io::sandbox::{
    image, ExecRequest, ExecutionSandbox, RepoMount, SandboxPolicy, SandboxProvider, SandboxSpec,
};

/// The sandbox subcommands.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Run one command in a fresh sandbox, print its output, exit with its exit code.
    Run {
        /// The image (never pulled; see `chorus sandbox image build`).
        #[arg(long)]
        image: String,
        /// A repository to mount at /workspace: `PATH`, `PATH:ro` (default) or `PATH:rw`.
        #[arg(long, value_name = "PATH[:ro|:rw]")]
        repo: Option<String>,
        /// Give the sandbox network access (default bridge).
        #[arg(long)]
        network: bool,
        /// Kill the command after this many seconds.
        #[arg(long, value_name = "S", default_value_t = 600)]
        timeout: u64,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Image management.
    Image {
        #[command(subcommand)]
        command: ImageCmd,
    },
    /// Remove sandboxes a node left behind.
    Reap {
        /// The node id whose sandboxes to remove.
        #[arg(long, default_value = "chorus-cli")]
        node: String,
    },
}

/// `chorus sandbox image …`.
#[derive(clap::Subcommand)]
pub enum ImageCmd {
    /// Build the busybox image from Debian's static busybox (no registry needed).
    Build,
}

/// Runs a sandbox subcommand; the exit code is the command's for `run`.
pub async fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    let provider = DockerProvider::connect()
        .await
        .context("cannot reach the Docker Engine")?;
    match cmd {
        Cmd::Image {
            command: ImageCmd::Build,
        } => {
            let tag = image::ensure_busybox_image(provider.docker()).await?;
            println!("{tag}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Reap { node } => {
            let n = provider.reap(&node).await?;
            println!("removed {n} sandbox(es) of node {node}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            image,
            repo,
            network,
            timeout,
            command,
        } => {
            let task = format!("cli-{}", std::process::id());
            let mut spec = SandboxSpec::new("chorus-cli", task, image);
            if let Some(repo) = repo {
                spec = spec.with_workspace(parse_repo(&repo)?);
            }
            let mut policy = SandboxPolicy::default();
            policy.network.enabled = network;
            let sandbox = provider.create(&spec, &policy).await?;
            let result = async {
                sandbox.start().await?;
                sandbox
                    .exec(ExecRequest::new(command).timeout(Duration::from_secs(timeout)))
                    .await
            }
            .await;
            // Remove the sandbox whatever happened; report the command's error first.
            let removed = sandbox.remove().await;
            let out = result?;
            removed?;
            use std::io::Write;
            std::io::stdout().write_all(&out.stdout)?;
            std::io::stderr().write_all(&out.stderr)?;
            let code = u8::try_from(out.exit_code.clamp(0, 255)).unwrap_or(1);
            Ok(ExitCode::from(code))
        }
    }
}

fn parse_repo(text: &str) -> anyhow::Result<RepoMount> {
    let (path, mode) = match text.rsplit_once(':') {
        Some((p, m @ ("ro" | "rw"))) => (p, m),
        _ => (text, "ro"),
    };
    let path = PathBuf::from(path);
    if !path.is_dir() {
        bail!("--repo {}: not a directory", path.display());
    }
    let path = path.canonicalize()?;
    Ok(match mode {
        "rw" => RepoMount::read_write(path),
        _ => RepoMount::read_only(path),
    })
}
