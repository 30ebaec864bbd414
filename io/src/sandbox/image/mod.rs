//! The project's own small image, built locally from what the host already has: no registry,
//! no package to install by hand.
//!
//! No registry is reachable where CHORUS runs its tests, so nothing is ever pulled, and a
//! fresh machine of the kind CHORUS runs on (Debian with gcc, Rust and a Docker Engine without
//! images) has no ready-made static toolbox either. [`ensure_sandbox_image`] therefore builds
//! [`SANDBOX_IMAGE`] `FROM scratch` out of the host's own programs:
//!
//! - the commands the sandbox itself runs ([`REQUIRED_COMMANDS`]: the exec wrapper, file
//!   transfer, the post-exec cleanup, the main process and its deadline) and the everyday ones
//!   tasks, tests and the docs use ([`TOOL_COMMANDS`], each included when the host has it), each
//!   copied from the host with the shared libraries and ELF interpreter `ldd` lists for it (see
//!   [`rootfs`]);
//! - a small `nc` (`nc.c` here, busybox's flags) compiled with the host's gcc, for network
//!   probes — hosts have no netcat by default — and `chorus-agent` (`agent.c`), which runs a
//!   live sandbox's commands without an Engine call each; without gcc the image is built
//!   without them (and live sandboxes run commands through the Engine);
//! - a two-line `/etc/passwd` and `/etc/group` (so `id` and git can name uid 65534), an
//!   `/etc/nsswitch.conf`, `/tmp` and `/workspace` mount points.
//!
//! The image suits the sandbox's hardening: it runs as any uid (files are root's, readable and
//! executable by all; the policy's non-root user and the supervisor user need no entry), under
//! a read-only root filesystem (nothing in it is written to; `/tmp` and the workspace are
//! tmpfs), and without network.
//!
//! Building is idempotent and cheap when the image is current: the image carries a fingerprint
//! label of its recipe and of every host file in it (path, size, change time, inode), and the
//! list of its libraries in another label, so the check is a few `stat`s and one inspect. A
//! package upgrade on the host changes the fingerprint and the next call rebuilds. A cold build
//! (`ldd`, gcc, a tar context of about 17 MB, `docker build` of one `COPY`) takes a few seconds.
//!
//! Why not Debian's static busybox, as before: it is not installed on a fresh machine, and an
//! image recipe that depends on what happens to be installed would test a different image on
//! CI than on a developer's machine. One recipe, from programs every such host has.

pub mod rootfs;

use std::collections::HashMap;
use std::path::Path;

use bollard::query_parameters::BuildImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::Mutex;

use self::rootfs::{find_program, Rootfs};
use super::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};

/// The tag of the sandbox image.
pub const SANDBOX_IMAGE: &str = "chorus/sandbox:latest";

/// The label holding the fingerprint of the image's recipe and host files.
pub const FINGERPRINT_LABEL: &str = "io.chorus.image-fingerprint";

/// The label listing the image's libraries (newline-separated host paths), so that checking
/// the fingerprint needs no `ldd` run.
pub const LIBRARIES_LABEL: &str = "io.chorus.image-libraries";

/// Commands the sandbox's own code runs: it cannot work without them, so a host without one
/// cannot build the image.
pub const REQUIRED_COMMANDS: &[&str] = &[
    "sh", "cat", "mkdir", "chmod", "dirname", "tar", "timeout", "sleep", "tr", "grep",
    // A file write is one `install` (docker/files.rs).
    "install",
];

/// Everyday commands for tasks, tests and the docs' examples, included when the host has them.
pub const TOOL_COMMANDS: &[&str] = &[
    "bash",
    "echo",
    "printf",
    "true",
    "false",
    "test",
    "[",
    "env",
    "id",
    "whoami",
    "ls",
    "head",
    "tail",
    "dd",
    "wc",
    "stat",
    "find",
    "ps",
    "setsid",
    "rm",
    "rmdir",
    "cp",
    "mv",
    "ln",
    "touch",
    "sed",
    "awk",
    "cut",
    "sort",
    "uniq",
    "seq",
    "basename",
    "readlink",
    "realpath",
    "pwd",
    "xargs",
    "date",
    "uname",
    "mktemp",
    "tee",
    "nproc",
    "du",
    "expr",
    "yes",
    "od",
    "base64",
    "sha256sum",
    "md5sum",
    "cmp",
    "diff",
    "gzip",
    "hostname",
    // System V IPC (util-linux): the reset's check for objects a run left is tested with them.
    "ipcmk",
    "ipcs",
];

/// The source of the image's `nc`.
pub const NC_SOURCE: &str = include_str!("nc.c");

/// The source of the image's `chorus-agent`, which runs a live sandbox's commands
/// (`docker/agent.rs`).
pub const AGENT_SOURCE: &str = include_str!("agent.c");

/// The programs compiled with the host's gcc for the image: name, source.
const COMPILED: &[(&str, &str)] = &[("nc", NC_SOURCE), ("chorus-agent", AGENT_SOURCE)];

/// The Dockerfile of the build context.
const DOCKERFILE: &str = "FROM scratch\n\
                          COPY rootfs/ /\n\
                          ENV PATH=/usr/bin:/bin\n\
                          CMD [\"sleep\", \"infinity\"]\n";

/// Fixed files of the image: path, contents.
const ETC_FILES: &[(&str, &str)] = &[
    (
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n",
    ),
    ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
    // glibc's defaults without this file differ between versions; say it.
    (
        "etc/nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files dns\n",
    ),
];

/// Bump when the recipe changes in a way the fingerprint does not see.
const RECIPE_VERSION: &str = "chorus-sandbox-image 1";

/// Builds [`SANDBOX_IMAGE`] unless it is current; returns the tag.
pub async fn ensure_sandbox_image(docker: &Docker) -> SandboxResult<String> {
    ensure_sandbox_image_as(docker, SANDBOX_IMAGE).await
}

/// Builds the sandbox image as `tag` unless an image with that tag and the current
/// fingerprint exists; returns the tag.
pub async fn ensure_sandbox_image_as(docker: &Docker, tag: &str) -> SandboxResult<String> {
    // One build at a time in this process: parallel tests would otherwise all build at once.
    static BUILD_LOCK: Mutex<()> = Mutex::const_new(());
    let _guard = BUILD_LOCK.lock().await;

    let existing = unless_answered(
        docker.inspect_image(tag).await,
        &[404],
        ErrorCategory::Image,
        "inspect image",
    )?;
    let labels = existing
        .and_then(|image| image.config)
        .and_then(|c| c.labels)
        .unwrap_or_default();
    if is_current(&labels).await? {
        return Ok(tag.to_string());
    }
    let started = std::time::Instant::now();
    let (context, fingerprint, libraries) = blocking(build_context).await?;
    build(docker, tag, context, &fingerprint, &libraries).await?;
    tracing::info!(tag, took = ?started.elapsed(), "built the sandbox image");
    Ok(tag.to_string())
}

/// Whether an image with these labels was built from the host's current files and recipe.
async fn is_current(labels: &HashMap<String, String>) -> SandboxResult<bool> {
    let (Some(fingerprint), Some(libraries)) =
        (labels.get(FINGERPRINT_LABEL), labels.get(LIBRARIES_LABEL))
    else {
        return Ok(false);
    };
    let libraries = libraries.clone();
    let now = blocking(move || {
        let mut rootfs = host_rootfs()?;
        rootfs.libraries = libraries.lines().map(str::to_string).collect();
        Ok(fingerprint_of(&rootfs))
    })
    .await?;
    Ok(&now == fingerprint)
}

/// The host's programs for the image, without libraries yet.
fn host_rootfs() -> SandboxResult<Rootfs> {
    Rootfs::from_host_commands(REQUIRED_COMMANDS, TOOL_COMMANDS)
}

/// The fingerprint of `rootfs` and the recipe: this file's constants, the sources of the
/// compiled programs and the host's gcc (which compiles them, and without which they are left
/// out).
fn fingerprint_of(rootfs: &Rootfs) -> String {
    let gcc = find_program("gcc").map(|p| gcc_identity(&p));
    let etc: Vec<u8> = ETC_FILES
        .iter()
        .flat_map(|(p, c)| [p.as_bytes(), c.as_bytes()].concat())
        .collect();
    rootfs.fingerprint(&[
        RECIPE_VERSION.as_bytes(),
        DOCKERFILE.as_bytes(),
        &etc,
        NC_SOURCE.as_bytes(),
        AGENT_SOURCE.as_bytes(),
        gcc.as_deref().unwrap_or("no gcc").as_bytes(),
    ])
}

fn gcc_identity(gcc: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(gcc).map(|m| (m.len(), m.ctime(), m.ino()));
    format!("{} {meta:?}", gcc.display())
}

/// Assembles the build context: finds the programs and their libraries, compiles `nc`, and
/// packs it all. Returns the context, its fingerprint and the libraries label.
fn build_context() -> SandboxResult<(Vec<u8>, String, String)> {
    let mut rootfs = host_rootfs()?;
    let scratch = tempfile::tempdir().map_err(|e| SandboxError::io("making a temp dir", e))?;
    // The fingerprint covers the host's programs, not the compiled ones (new files every
    // time): those are covered by their sources and the compiler.
    let mut with_nc = rootfs.clone();
    for (name, source) in COMPILED {
        if let Some(program) = compile(scratch.path(), name, source) {
            with_nc.add_program(name, program);
        }
    }
    with_nc.add_libraries_from_ldd()?;
    rootfs.libraries = with_nc.libraries.clone();
    if !rootfs.missing.is_empty() {
        tracing::info!(
            missing = %crate::log_fields::list(&rootfs.missing),
            "the host lacks some optional image commands"
        );
    }
    let fingerprint = fingerprint_of(&rootfs);
    let context = pack_context(&with_nc)
        .map_err(|e| SandboxError::io("building the image's tar context", e))?;
    let libraries = rootfs
        .libraries
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    Ok((context, fingerprint, libraries))
}

/// Compiles `source` with the host's gcc into `dir` as `name`; `None` (with a warning) without
/// gcc or when it fails.
fn compile(dir: &Path, name: &str, source: &str) -> Option<std::path::PathBuf> {
    let source_file = dir.join(format!("{name}.c"));
    let program = dir.join(name);
    std::fs::write(&source_file, source).ok()?;
    let out = std::process::Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(&source_file)
        .output();
    match out {
        Ok(out) if out.status.success() => Some(program),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            tracing::warn!(name, %stderr, "cannot compile a program of the image; building without it");
            None
        }
        Err(e) => {
            tracing::warn!(name, error = %e, "no gcc to compile a program of the image; building without it");
            None
        }
    }
}

/// The tar build context: the Dockerfile and a `rootfs/` with the programs in `/usr/bin`
/// (aliases as links), `/bin` linking there, the libraries at their host paths, the fixed
/// files of [`ETC_FILES`] and the mount points.
pub fn pack_context(rootfs: &Rootfs) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    append_file(&mut tar, "Dockerfile", DOCKERFILE.as_bytes(), 0o644)?;
    let mut dirs = std::collections::BTreeSet::from([
        "rootfs/etc".to_string(),
        "rootfs/usr".to_string(),
        "rootfs/usr/bin".to_string(),
        "rootfs/workspace".to_string(),
    ]);
    for lib in &rootfs.libraries {
        let mut dir = Path::new(lib.trim_start_matches('/')).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(format!("rootfs/{}", d.display()));
            dir = d.parent();
        }
    }
    for dir in &dirs {
        append_dir(&mut tar, dir, 0o755)?;
    }
    append_dir(&mut tar, "rootfs/tmp", 0o1777)?;
    append_symlink(&mut tar, "rootfs/bin", "usr/bin")?;
    for (name, host) in &rootfs.programs {
        append_host_file(&mut tar, &format!("rootfs/usr/bin/{name}"), host)?;
    }
    for (alias, target) in &rootfs.aliases {
        append_symlink(&mut tar, &format!("rootfs/usr/bin/{alias}"), target)?;
    }
    for lib in &rootfs.libraries {
        let path = format!("rootfs/{}", lib.trim_start_matches('/'));
        append_host_file(&mut tar, &path, Path::new(lib))?;
    }
    for (path, contents) in ETC_FILES {
        append_file(
            &mut tar,
            &format!("rootfs/{path}"),
            contents.as_bytes(),
            0o644,
        )?;
    }
    tar.into_inner()
}

/// Sends the context to the Engine and waits for the build.
async fn build(
    docker: &Docker,
    tag: &str,
    context: Vec<u8>,
    fingerprint: &str,
    libraries: &str,
) -> SandboxResult<()> {
    let labels: HashMap<&str, &str> = [
        (FINGERPRINT_LABEL, fingerprint),
        (LIBRARIES_LABEL, libraries),
    ]
    .into();
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .labels(&labels)
        .build();
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = stream.next().await {
        step.map_err(|e| SandboxError::from_bollard(ErrorCategory::Image, "build image", e))?;
    }
    Ok(())
}

/// Runs blocking file and process work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> SandboxResult<T> + Send + 'static,
) -> SandboxResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SandboxError::new(ErrorCategory::Image, format!("image task: {e}")))?
}

/// A host file, with its permission bits kept but never more than `0o755` (no set-id bits,
/// nothing writable by others).
fn append_host_file(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    host: &Path,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let data = std::fs::read(host)?;
    let mode = std::fs::metadata(host)?.permissions().mode() & 0o755;
    append_file(tar, path, &data, mode)
}

fn append_file(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    data: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(mode);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, data)
}

fn append_dir(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(mode);
    header.set_entry_type(tar::EntryType::Directory);
    tar.append_data(&mut header, path, std::io::empty())
}

fn append_symlink(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    target: &str,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(0o777);
    header.set_entry_type(tar::EntryType::Symlink);
    tar.append_link(&mut header, path, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_has_dockerfile_programs_aliases_libraries_and_etc() {
        let mut rootfs = Rootfs::default();
        let sh = find_program("sh").expect("a host shell");
        rootfs.add_program("sh", sh.clone());
        rootfs.add_libraries_from_ldd().unwrap();
        assert!(!rootfs.libraries.is_empty(), "the host's sh is dynamic");
        let ctx = pack_context(&rootfs).unwrap();
        let mut archive = tar::Archive::new(ctx.as_slice());
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            if name == "rootfs/bin" {
                let target = entry.link_name().unwrap().unwrap();
                assert_eq!(target.display().to_string(), "usr/bin");
            }
            if entry.header().entry_type() == tar::EntryType::Regular {
                let mode = entry.header().mode().unwrap();
                assert_eq!(mode & !0o755, 0, "{name}: mode {mode:o}");
            }
            names.push(name);
        }
        let real = sh.file_name().unwrap().to_string_lossy().into_owned();
        let mut want = vec![
            "Dockerfile".to_string(),
            "rootfs/bin".into(),
            "rootfs/tmp".into(),
            "rootfs/workspace".into(),
            "rootfs/etc/passwd".into(),
            "rootfs/etc/group".into(),
            format!("rootfs/usr/bin/{real}"),
            "rootfs/usr/bin/sh".into(),
        ];
        want.extend(rootfs.libraries.iter().map(|l| format!("rootfs{l}")));
        for want in want {
            assert!(names.contains(&want), "{want} missing in {names:?}");
        }
    }

    #[test]
    fn the_required_commands_are_on_this_host() {
        // What a fresh machine of the kind CHORUS runs on has; the image cannot do without.
        let rootfs = host_rootfs().unwrap();
        for command in REQUIRED_COMMANDS {
            let name = rootfs
                .aliases
                .get(*command)
                .map_or(*command, String::as_str);
            assert!(rootfs.programs.contains_key(name), "{command}");
        }
    }

    #[test]
    fn nc_compiles_with_the_hosts_gcc() {
        let dir = tempfile::tempdir().unwrap();
        let nc = compile(dir.path(), "nc", NC_SOURCE).expect("gcc compiles nc.c");
        let out = std::process::Command::new(&nc).output().unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage: nc"));
    }

    /// The agent compiled (as the test above checks it) at `dir/agent`.
    fn compiled_agent(dir: &std::path::Path) -> std::path::PathBuf {
        let source = dir.join("agent.c");
        std::fs::write(&source, AGENT_SOURCE).unwrap();
        let out = std::process::Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(dir.join("agent"))
            .arg(&source)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        dir.join("agent")
    }

    /// A frame to the agent: `u32 len, u8 type, u32 id, payload`.
    fn frame(kind: u8, id: u32, body: &[u8]) -> Vec<u8> {
        let mut f = ((5 + body.len()) as u32).to_le_bytes().to_vec();
        f.push(kind);
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(body);
        f
    }

    /// A RUN frame's payload: argv, no environment, cwd `/`, stdin wanted or not.
    fn run_body(argv: &[&str], stdin: bool) -> Vec<u8> {
        let mut b = (argv.len() as u32).to_le_bytes().to_vec();
        for a in argv {
            b.extend_from_slice(&(a.len() as u32).to_le_bytes());
            b.extend_from_slice(a.as_bytes());
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(b'/');
        b.push(u8::from(stdin));
        b
    }

    /// The frames the agent wrote, as (type, id, payload).
    fn frames_of(mut out: &[u8]) -> Vec<(u8, u32, Vec<u8>)> {
        let mut frames = Vec::new();
        while out.len() >= 9 {
            let len = u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
            let id = u32::from_le_bytes(out[5..9].try_into().unwrap());
            frames.push((out[4], id, out[9..4 + len].to_vec()));
            out = &out[4 + len..];
        }
        frames
    }

    /// Flow control of a command's stdin (TAKEN): the agent says how many of the stdin bytes
    /// it was sent it has written to the command, so the node can keep a window of them in
    /// flight instead of the agent holding an upload whole. Every byte sent is said taken once
    /// — written to a command that reads them all, and dropped with the stdin of one that
    /// closed it and runs on, so a node that waits for the window never waits for bytes
    /// nobody will take. The slow reader (`sleep`, then `wc -c`) gets all 8 MiB.
    #[test]
    fn the_agent_says_how_much_of_a_commands_stdin_it_took() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let agent = compiled_agent(dir.path());
        let chunk = vec![7u8; 65_536];
        let mut input = Vec::new();
        input.extend(frame(
            1,
            1,
            &run_body(&["sh", "-c", "sleep 0.3; wc -c"], true),
        ));
        input.extend(frame(
            1,
            2,
            &run_body(&["sh", "-c", "exec 0<&-; sleep 0.5"], true),
        ));
        for _ in 0..128 {
            input.extend(frame(2, 1, &chunk));
            input.extend(frame(2, 2, &chunk));
        }
        input.extend(frame(2, 1, &[]));
        input.extend(frame(2, 2, &[]));
        let mut child = std::process::Command::new(&agent)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&input).unwrap();
        // The agent ends with its stdin; give the commands time to end first.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let frames = frames_of(&out.stdout);
        let taken = |id: u32| -> u64 {
            frames
                .iter()
                .filter(|f| f.1 == id && f.0 == 5)
                .map(|f| u64::from(u32::from_le_bytes(f.2[..4].try_into().unwrap())))
                .sum()
        };
        let sent = 128 * 65_536u64;
        assert_eq!(
            taken(1),
            sent,
            "every byte written to the reader is said taken"
        );
        assert_eq!(
            taken(2),
            sent,
            "bytes dropped with a closed stdin are said taken too"
        );
        let stdout = |id: u32| -> String {
            frames
                .iter()
                .filter(|f| f.1 == id && f.0 == 2 && f.2[0] == 1)
                .map(|f| String::from_utf8_lossy(&f.2[1..]).into_owned())
                .collect()
        };
        assert_eq!(stdout(1).trim(), sent.to_string());
    }

    /// The agent's own file commands (issue 53: a file call costs no process in the sandbox):
    /// a write makes the folders, takes the bytes of several stdin frames and the mode whatever
    /// the umask; a read gives a regular file's bytes up to its limit; a folder, a missing file
    /// and a write under a file each end 1 with the reason on stderr, as `cat` and `install`
    /// would. None is a process: a KILL for an unfinished write ends it without signalling
    /// anything (a pid of 0 would be the agent's own group).
    #[test]
    fn the_agents_own_file_commands_read_and_write_without_a_process() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let agent = compiled_agent(dir.path());
        let root = dir.path().join("w");
        let file = root.join("a/b/f.bin");
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut input = Vec::new();
        let path = file.to_str().unwrap();
        input.extend(frame(
            1,
            1,
            &run_body(&["chorus-agent:write", "640", path], true),
        ));
        for part in big.chunks(65_536) {
            input.extend(frame(2, 1, part));
        }
        input.extend(frame(2, 1, &[]));
        input.extend(frame(
            1,
            2,
            &run_body(&["chorus-agent:read", path, "1000000"], false),
        ));
        input.extend(frame(
            1,
            3,
            &run_body(&["chorus-agent:read", path, "10"], false),
        ));
        let folder = root.join("a").to_str().unwrap().to_owned();
        input.extend(frame(
            1,
            4,
            &run_body(&["chorus-agent:read", &folder, "10"], false),
        ));
        let under = format!("{path}/x");
        input.extend(frame(
            1,
            5,
            &run_body(&["chorus-agent:write", "644", &under], true),
        ));
        input.extend(frame(
            1,
            6,
            &run_body(&["chorus-agent:write", "600", &format!("{folder}/k")], true),
        ));
        input.extend(frame(3, 6, &9u32.to_le_bytes()));
        let mut child = std::process::Command::new(&agent)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let frames = frames_of(&out.stdout);
        let of = |id: u32, kind: u8| -> Vec<u8> {
            frames
                .iter()
                .filter(|f| f.1 == id && f.0 == kind)
                .flat_map(|f| f.2.clone())
                .collect()
        };
        let exit = |id: u32| of(id, 3);
        // Written whole, with its mode; no process was started for it.
        assert_eq!(std::fs::read(&file).unwrap(), big);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(exit(1), [0, 0, 0, 0, 0]);
        assert!(
            of(1, 1).is_empty() && of(2, 1).is_empty(),
            "no STARTED for its own commands"
        );
        // Read back whole, and cut at its limit.
        let stdout = |id: u32| -> Vec<u8> {
            frames
                .iter()
                .filter(|f| f.1 == id && f.0 == 2 && f.2[0] == 1)
                .flat_map(|f| f.2[1..].to_vec())
                .collect()
        };
        assert_eq!(stdout(2), big);
        assert_eq!(exit(2), [0, 0, 0, 0, 0]);
        assert_eq!(stdout(3), big[..10]);
        // Refused as the commands would refuse, the reason on stderr.
        let stderr = |id: u32| -> String {
            frames
                .iter()
                .filter(|f| f.1 == id && f.0 == 2 && f.2[0] == 2)
                .map(|f| String::from_utf8_lossy(&f.2[1..]).into_owned())
                .collect()
        };
        assert_eq!(exit(4), [1, 0, 0, 0, 0]);
        assert!(stderr(4).contains("Is a directory"), "{}", stderr(4));
        assert_eq!(exit(5), [1, 0, 0, 0, 0]);
        assert!(stderr(5).contains("Not a directory"), "{}", stderr(5));
        // A KILL ends an unfinished write, and the agent lives on to answer.
        assert_eq!(exit(6), [1, 0, 0, 0, 0]);
    }

    /// The agent compiles without a warning, and says HELLO (version 3) on its stdout at once,
    /// then ends when its stdin does.
    #[test]
    fn the_agent_compiles_cleanly_and_says_hello() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("agent.c");
        std::fs::write(&source, AGENT_SOURCE).unwrap();
        let out = std::process::Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(dir.path().join("agent"))
            .arg(&source)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = std::process::Command::new(dir.path().join("agent"))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, [9, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]);
    }
}
