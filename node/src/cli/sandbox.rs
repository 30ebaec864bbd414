//! `chorus sandbox`: a thin command line over `chorus_io::sandbox` (the Docker provider).
//!
//! Repositories: `--repo PATH` is taken literally (a folder named `x:rw` is a folder, not a
//! mode; read-write is `--rw`). It must lie inside `--repo-root` (default: the current
//! directory), be given without symlinks or `..` anywhere in it, and is mounted read-only, or
//! for `--rw` copied into the sandbox and synced back when the command ends.
//!
//! Ownership: every run owns its sandbox as its own process (pid + start time + boot id in the
//! labels) and gives it a deadline of the timeout plus a minute; `chorus sandbox reap` removes
//! only sandboxes whose owning process is gone or whose deadline passed, so it never touches
//! another user's live run.
//!
//! The node (`chorus run --docker`) uses the same provider: at start it removes what its earlier
//! runs left behind (`daemon::sandboxes::reap_on_start`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use chorus_io::sandbox::docker::DockerProvider;
use chorus_io::sandbox::repo::RepoRoots;
use chorus_io::sandbox::{
    image, ExecOutput, ExecRequest, ExecutionSandbox, RepoMount, SandboxPolicy, SandboxProvider,
    SandboxSpec,
};

/// The node id CLI sandboxes are labelled with (each run is still its own owner).
pub const CLI_NODE: &str = "chorus-cli";

/// How long a CLI sandbox may outlive its command's timeout before its deadline.
const DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// The sandbox subcommands.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Run one command in a fresh sandbox, print its output, exit with its exit code.
    ///
    /// Exit codes (the same as `chorus task submit --wait`'s for the same endings): the
    /// command's own exit code when it exited; 128+N killed by signal N; 124 timed out (killed
    /// at --timeout); 137 out of memory; 125 the sandbox could not run it (a missing image, a
    /// failed create or start, no Docker Engine); 1 any other error.
    Run {
        /// The image (never pulled; see `chorus sandbox image build`).
        #[arg(long)]
        image: String,
        /// A repository to show at /workspace, read-only unless `--rw`. Taken literally, inside
        /// `--repo-root`, with no symlink or `..` in it.
        #[arg(long, value_name = "PATH")]
        repo: Option<PathBuf>,
        /// Work on a copy of the repository and sync the changes back afterwards (never
        /// `.git/hooks`, never symlinks made inside).
        #[arg(long, requires = "repo")]
        rw: bool,
        /// The only directory repositories may come from (default: the current directory).
        #[arg(long, value_name = "DIR")]
        repo_root: Option<PathBuf>,
        /// Give the sandbox network access: a dedicated network without inter-container
        /// traffic, from which the host and private/link-local addresses are dropped.
        #[arg(long)]
        network: bool,
        /// Kill the command after this many seconds.
        #[arg(long, value_name = "S", default_value_t = 600)]
        timeout: u64,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Make a live sandbox on a node: kept across commands (`exec`, `cp`, `env`) until it is
    /// closed, idle for --idle seconds, or --lifetime seconds old. Prints its id.
    ///
    /// A live sandbox belongs to the token that made it (others see "no such sandbox"; an
    /// `operate` token may list and close any). Ask the node that holds it (its id begins
    /// with that node's id); once it ended, every call says why (closed, idle, expired, lost).
    Create {
        /// The HTTP API of a node that runs Docker sandboxes.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// The image [default: the node's sandbox image, `chorus/sandbox:latest`].
        #[arg(long)]
        image: Option<String>,
        /// An environment variable for every command (repeat it).
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::live::key_value)]
        env: Vec<(String, String)>,
        /// End it after this many seconds without a call [default: 600, the most].
        #[arg(long, value_name = "S")]
        idle: Option<u64>,
        /// End it this many seconds after it was made, whatever it does [default: 14400, the most].
        #[arg(long, value_name = "S")]
        lifetime: Option<u64>,
        /// An idempotency key: a create retried with it answers the same sandbox, once.
        #[arg(long)]
        key: Option<String>,
        /// Memory limit, MiB [default: the node's].
        #[arg(long, value_name = "MIB", default_value_t = 0)]
        memory_mb: u32,
        /// CPU limit, millicores [default: the node's].
        #[arg(long, value_name = "MILLIS", default_value_t = 0)]
        cpu_millis: u32,
        /// Give it network access (to install packages), within the worker's egress rules: no
        /// host, no cluster, no private ranges [default: none, only loopback].
        #[arg(long)]
        network: bool,
        /// A capability its worker must offer (`gpu`, `repo:NAME`, …; repeat it).
        #[arg(long = "require", value_name = "CAP")]
        requires: Vec<String>,
        /// A repository from the worker's `[repos]` at /workspace, `NAME:ro` (bind-mounted
        /// read-only) or `NAME:rw` (a copy that `sandbox sync` and the close carry back,
        /// never its `.git`); the admin places it on a worker that has it.
        #[arg(long, value_name = "NAME[:ro|:rw]", value_parser = super::taskfile::parse_repo)]
        repo: Option<chorus_core::task::RepoMount>,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a live sandbox; prints its output and exits with its exit code (124
    /// timed out, 137 out of memory, 1 the sandbox is gone or the node refused). What it
    /// leaves running stays; start servers with --background.
    Exec {
        /// The live sandbox's id.
        id: String,
        /// The HTTP API of the node that holds it.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// The working directory inside the sandbox [default: /workspace].
        #[arg(long)]
        cwd: Option<String>,
        /// An environment variable for this command only (repeat it).
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::live::key_value)]
        env: Vec<(String, String)>,
        /// Kill the command after this many seconds [default: 600].
        #[arg(long, value_name = "S")]
        timeout: Option<u64>,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
        /// Start it in the background, in a session of its own, its output in a log file in
        /// the sandbox; prints its pid and the log's path (`ps`, `kill`, and `cp` the log).
        #[arg(long)]
        background: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// List the processes running in a live sandbox (pid, process group, seconds, command).
    Ps {
        /// The live sandbox's id.
        id: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Kill a process of a live sandbox, with its process group (a background command's).
    Kill {
        /// The live sandbox's id.
        id: String,
        /// The process id (`ps` lists them).
        pid: u32,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
    /// Copy a file into (`cp FILE ID:/path`, with its permission bits) or out of (`cp ID:/path
    /// FILE`) a live sandbox; a local folder into one (`cp DIR ID:/dir`: its folders and
    /// regular files, sent as they are read); with --tar, a folder of the sandbox out as a tar
    /// archive (`cp --tar ID:/dir out.tar`, `-` for stdout) or an archive unpacked into one
    /// (`cp --tar in.tar ID:/dir`). Files and folders stream: up to the worker's bound (1 GiB
    /// of file bytes by default) in one call.
    Cp {
        /// From: a local file or folder, or ID:/path.
        src: String,
        /// To: ID:/path, or a local file.
        dst: String,
        /// Move a folder as a tar archive (its folders, regular files and hard links among
        /// them; symbolic links left out).
        #[arg(long)]
        tar: bool,
        /// The HTTP API of the node that holds the sandbox.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
    /// List a folder of a live sandbox (`ls ID:/path`: kind, mode, size, name), or show one
    /// file.
    Ls {
        /// ID:/path.
        target: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Remove a file or a folder (with what is under it) in a live sandbox (`rm ID:/path`).
    Rm {
        /// ID:/path.
        target: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
    /// Keep a live sandbox from idling out: its idle clock starts again (its lifetime stays).
    Keepalive {
        /// The live sandbox's id.
        id: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
    /// Set environment variables for every later command in a live sandbox.
    Env {
        /// The live sandbox's id.
        id: String,
        /// NAME=VALUE (repeat it).
        #[arg(required = true, value_parser = super::live::key_value)]
        vars: Vec<(String, String)>,
        /// The HTTP API of the node that holds it.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
    /// List your live sandboxes (an `operate` token: every one): those the node holds and
    /// those made through it; with --cluster, every connected node's too.
    List {
        /// The node's HTTP API.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Ask every node connected to it too (a node that does not answer is named).
        #[arg(long)]
        cluster: bool,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Carry a live sandbox's read-write repository (`create --repo NAME:rw`) back to its
    /// worker's copy of it now: changed and new files written, deleted ones deleted, nothing
    /// under `.git`. Exits 1 when something was not carried (listed).
    Sync {
        /// The live sandbox's id.
        id: String,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Close a live sandbox (it is removed at once; a read-write repository is synced back
    /// first, and what was not carried is listed).
    Close {
        /// The live sandbox's id.
        id: String,
        /// The HTTP API of the node that holds it.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
    },
    /// Image management.
    Image {
        #[command(subcommand)]
        command: ImageCmd,
    },
    /// Remove sandboxes whose owner process is gone or whose deadline passed (never a live
    /// run's).
    Reap {
        /// Only sandboxes of this node id (default: every node's).
        #[arg(long)]
        node: Option<String>,
    },
}

/// `chorus sandbox image …`.
#[derive(clap::Subcommand)]
pub enum ImageCmd {
    /// Build the sandbox image from the host's own programs (no registry, nothing to install).
    Build,
}

/// Runs a sandbox subcommand; the exit code is the command's for `run`, and its other endings
/// have the codes of `task submit --wait` ([`ending`]).
pub async fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    let is_run = matches!(cmd, Cmd::Run { .. });
    match run_cmd(cmd).await {
        Err(e) if is_run => match ending(&e) {
            Some((code, words)) => {
                eprintln!("chorus: {words}");
                Ok(ExitCode::from(code))
            }
            None => Err(e),
        },
        other => other,
    }
}

/// The exit code and the words for a `sandbox run` that did not end with the command's own
/// exit: `None` for an error that is not the sandbox's (exit 1).
pub fn ending(e: &anyhow::Error) -> Option<(u8, String)> {
    use crate::exit::{EXIT_ERROR, EXIT_OUT_OF_MEMORY, EXIT_TIMED_OUT};
    use chorus_io::sandbox::{ErrorCategory, SandboxError};
    let text = crate::exit::one_line(e);
    let Some(sandbox) = e.chain().find_map(|c| c.downcast_ref::<SandboxError>()) else {
        return text.starts_with(NO_ENGINE).then(|| {
            (
                EXIT_ERROR,
                format!("the sandbox could not run the command: {text}"),
            )
        });
    };
    Some(match sandbox.category {
        ErrorCategory::Timeout => (
            EXIT_TIMED_OUT,
            format!("the command timed out: it ran past its timeout and was killed ({text})"),
        ),
        ErrorCategory::ResourceLimit => (
            EXIT_OUT_OF_MEMORY,
            format!(
                "the command ran out of memory: the kernel killed it at its memory limit ({text})"
            ),
        ),
        _ => (
            EXIT_ERROR,
            format!("the sandbox could not run the command: {text}"),
        ),
    })
}

/// How an unreachable Docker Engine is said.
const NO_ENGINE: &str = "cannot reach the Docker Engine";

async fn run_cmd(cmd: Cmd) -> anyhow::Result<ExitCode> {
    use super::live;
    // Live sandboxes go through a node's API: no Docker Engine here.
    let cmd = match cmd {
        Cmd::Create {
            addr,
            image,
            env,
            idle,
            lifetime,
            key,
            memory_mb,
            cpu_millis,
            network,
            requires,
            repo,
            json,
        } => {
            let opts = live::CreateOpts {
                image,
                env,
                idle_s: idle,
                lifetime_s: lifetime,
                key,
                memory_mb,
                cpu_millis,
                network,
                requires,
                repo,
                json,
            };
            return live::create(&addr, opts).await;
        }
        Cmd::Exec {
            id,
            addr,
            cwd,
            env,
            timeout,
            json,
            background,
            command,
        } => {
            let run = live::Run {
                argv: command,
                cwd,
                env,
                timeout_s: timeout,
                background,
            };
            return live::exec(&addr, &id, run, json).await;
        }
        Cmd::Ps { id, addr, json } => return live::ps(&addr, &id, json).await,
        Cmd::Kill { id, pid, addr } => return live::kill(&addr, &id, pid).await,
        Cmd::Cp {
            src,
            dst,
            addr,
            tar,
        } => return live::cp(&addr, &src, &dst, tar).await,
        Cmd::Ls { target, addr, json } => return live::ls(&addr, &target, json).await,
        Cmd::Rm { target, addr } => return live::rm(&addr, &target).await,
        Cmd::Keepalive { id, addr } => return live::keep_alive(&addr, &id).await,
        Cmd::Env { id, vars, addr } => return live::env(&addr, &id, vars).await,
        Cmd::List {
            addr,
            cluster,
            json,
        } => return live::list(&addr, cluster, json).await,
        Cmd::Sync { id, addr, json } => return live::sync(&addr, &id, json).await,
        Cmd::Close { id, addr } => return live::close(&addr, &id).await,
        local => local,
    };
    let provider = DockerProvider::connect().await.context(NO_ENGINE)?;
    match cmd {
        Cmd::Image {
            command: ImageCmd::Build,
        } => {
            let tag = image::ensure_sandbox_image(provider.docker()).await?;
            println!("{tag}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Reap { node } => {
            let n = match &node {
                Some(node) => provider.reap(node).await?,
                None => provider.reap_stale().await?,
            };
            println!("removed {n} orphaned or expired sandbox(es)");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Create { .. }
        | Cmd::Exec { .. }
        | Cmd::Ps { .. }
        | Cmd::Kill { .. }
        | Cmd::Cp { .. }
        | Cmd::Ls { .. }
        | Cmd::Rm { .. }
        | Cmd::Keepalive { .. }
        | Cmd::Env { .. }
        | Cmd::List { .. }
        | Cmd::Sync { .. }
        | Cmd::Close { .. } => Ok(ExitCode::from(crate::exit::EXIT_REFUSED)),
        Cmd::Run {
            image,
            repo,
            rw,
            repo_root,
            network,
            timeout,
            command,
        } => {
            let root = match repo_root {
                Some(r) => r,
                None => std::env::current_dir().context("the current directory")?,
            };
            let provider = provider.with_repo_roots(RepoRoots::new([&root])?);
            let mut spec = SandboxSpec::new(CLI_NODE, format!("cli-{}", std::process::id()), image);
            spec.lifetime = Duration::from_secs(timeout) + DEADLINE_MARGIN;
            if let Some(repo) = repo {
                spec = spec.with_workspace(repo_mount(&repo, rw)?);
            }
            let mut policy = SandboxPolicy::default();
            policy.network.enabled = network;
            let out = run_once(&provider, &spec, &policy, command, timeout).await?;
            let limit = policy.output_limit_bytes;
            report(
                &out,
                limit,
                &mut std::io::stdout().lock(),
                &mut std::io::stderr().lock(),
            )?;
            let code = u8::try_from(out.exit_code.clamp(0, 255)).unwrap_or(1);
            Ok(ExitCode::from(code))
        }
    }
}

/// Creates, starts, runs and removes one sandbox; removal (and a read-write repository's sync
/// back) happens whatever the command did, and the command's error is reported first.
async fn run_once(
    provider: &DockerProvider,
    spec: &SandboxSpec,
    policy: &SandboxPolicy,
    command: Vec<String>,
    timeout_s: u64,
) -> anyhow::Result<ExecOutput> {
    let sandbox = provider.create(spec, policy).await?;
    let result = async {
        sandbox.start().await?;
        sandbox
            .exec(ExecRequest::new(command).timeout(Duration::from_secs(timeout_s)))
            .await
    }
    .await;
    let removed = sandbox.remove().await;
    let out = result?;
    removed?;
    Ok(out)
}

/// Writes the command's output, then says on stderr what the sandbox changed about it: output
/// cut at the cap, processes killed after the command.
pub fn report(
    out: &ExecOutput,
    limit_bytes: usize,
    stdout: &mut impl Write,
    stderr: &mut impl Write,
) -> std::io::Result<()> {
    stdout.write_all(&out.stdout)?;
    stdout.flush()?;
    stderr.write_all(&out.stderr)?;
    for (name, cut) in [
        ("stdout", out.stdout_truncated),
        ("stderr", out.stderr_truncated),
    ] {
        if cut {
            writeln!(
                stderr,
                "chorus: {name} truncated at {limit_bytes} bytes (the rest was dropped)"
            )?;
        }
    }
    if out.stray_processes_killed > 0 {
        writeln!(
            stderr,
            "chorus: killed {} process(es) the command left running",
            out.stray_processes_killed
        )?;
    }
    Ok(())
}

/// The repository mount for `--repo PATH [--rw]`. The path is taken literally (no `:mode`
/// suffix); a relative path is taken from the current directory, without resolving anything —
/// the provider refuses it if it is not already resolved.
fn repo_mount(path: &Path, rw: bool) -> anyhow::Result<RepoMount> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    Ok(if rw {
        RepoMount::read_write(path)
    } else {
        RepoMount::read_only(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    /// Issue 16 case 8: a folder whose name ends in `:rw` is a folder, read-only.
    /// Issue 35: `sandbox run` ends with the codes `task submit --wait` has for the same
    /// endings.
    #[test]
    fn sandbox_endings_have_the_task_exit_codes() {
        use crate::cli::outcome::exit_code;
        use chorus_core::{TaskResult, TaskStatus};
        use chorus_io::sandbox::{ErrorCategory, SandboxError};
        let task = |status| {
            exit_code(&TaskResult {
                status,
                exit_code: None,
                signal: None,
                worker: "w".into(),
                attempt: 1,
                duration_ms: 1,
                usage: Default::default(),
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated_bytes: 0,
                stderr_truncated_bytes: 0,
                error: None,
                timings: Default::default(),
            })
        };
        let sandbox = |category| {
            let e = anyhow::Error::new(SandboxError::new(category, "x")).context("running");
            ending(&e).unwrap()
        };
        let (code, words) = sandbox(ErrorCategory::Timeout);
        assert_eq!(code, task(TaskStatus::TimedOut));
        assert!(words.contains("timed out"), "{words}");
        let (code, words) = sandbox(ErrorCategory::ResourceLimit);
        assert_eq!(code, task(TaskStatus::OutOfMemory));
        assert!(words.contains("out of memory"), "{words}");
        for category in [
            ErrorCategory::Image,
            ErrorCategory::Create,
            ErrorCategory::Start,
            ErrorCategory::DaemonUnavailable,
        ] {
            assert_eq!(sandbox(category).0, task(TaskStatus::Error));
        }
        let no_engine = anyhow::anyhow!("refused").context(NO_ENGINE);
        assert_eq!(ending(&no_engine).unwrap().0, task(TaskStatus::Error));
        assert!(ending(&anyhow::anyhow!("the current directory")).is_none());
    }

    #[test]
    fn a_repo_named_like_a_mode_is_a_path() {
        let cli = Cli::try_parse_from([
            "x",
            "run",
            "--image",
            "i",
            "--repo",
            "/r/name:rw",
            "--",
            "true",
        ])
        .unwrap();
        let Cmd::Run { repo, rw, .. } = cli.cmd else {
            panic!("not run")
        };
        let mount = repo_mount(&repo.unwrap(), rw).unwrap();
        assert_eq!(mount.host_path, PathBuf::from("/r/name:rw"));
        assert!(mount.read_only);
        let cli = Cli::try_parse_from([
            "x", "run", "--image", "i", "--repo", "/r/a", "--rw", "--", "true",
        ])
        .unwrap();
        let Cmd::Run { repo, rw, .. } = cli.cmd else {
            panic!("not run")
        };
        assert!(!repo_mount(&repo.unwrap(), rw).unwrap().read_only);
    }

    /// A live sandbox's `--repo` names a `[repos]` entry with its access (`ro` unless `:rw`);
    /// another mode is refused at the command line.
    #[test]
    fn a_live_sandbox_repo_is_a_name_and_its_access() {
        let create = |repo: &str| Cli::try_parse_from(["x", "create", "--repo", repo]);
        for (arg, writable) in [("src", false), ("src:ro", false), ("src:rw", true)] {
            let Cmd::Create { repo, .. } = create(arg).unwrap().cmd else {
                panic!("not create")
            };
            let repo = repo.unwrap();
            assert_eq!(
                (repo.name.as_str(), repo.writable),
                ("src", writable),
                "{arg}"
            );
        }
        let Err(err) = create("src:wr") else {
            panic!("src:wr taken")
        };
        let err = err.to_string();
        assert!(err.contains("ro or rw"), "{err}");
    }

    /// Issue 16 case 6, on the real Docker Engine: output over the cap is flagged in the result
    /// and the CLI says so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn truncated_output_is_flagged_and_printed() {
        let provider = DockerProvider::connect()
            .await
            .expect("this test needs a reachable Docker Engine");
        let image = image::ensure_sandbox_image(provider.docker())
            .await
            .expect("sandbox image");
        let node = format!("test-cli-trunc-{}", std::process::id());
        let spec = SandboxSpec::new(&node, "t", image);
        let policy = SandboxPolicy::default();
        let cap = policy.output_limit_bytes;
        let out = run_once(
            &provider,
            &spec,
            &policy,
            ["sh", "-c", "head -c 2000000 /dev/zero; echo fine >&2"]
                .map(String::from)
                .to_vec(),
            60,
        )
        .await
        .unwrap();
        assert_eq!(out.exit_code, 0);
        assert!(out.stdout_truncated && !out.stderr_truncated);
        let (mut o, mut e) = (Vec::new(), Vec::new());
        report(&out, cap, &mut o, &mut e).unwrap();
        assert_eq!(o.len(), cap);
        let e = String::from_utf8(e).unwrap();
        assert_eq!(
            e,
            format!("fine\nchorus: stdout truncated at {cap} bytes (the rest was dropped)\n")
        );
    }
}
