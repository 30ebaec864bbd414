//! Which log directory an offline command (`chorus replay`, `chorus recover`) opens for a
//! stopped node's data directory: checked to hold a log, copied first when it is read-only, and
//! a locked log said for what it means (the node is running).

use std::path::{Path, PathBuf};

use super::LOG_DIR;

/// The log directory `chorus replay` should open for `data_dir`: checked to exist and hold a
/// log, and copied to a temporary directory (returned, to keep it alive) when it is read-only,
/// since opening a log may write to it.
pub fn replay_source(data_dir: &Path) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    use anyhow::bail;
    match std::fs::metadata(data_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("{} is not a directory", data_dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no such directory: {}", data_dir.display())
        }
        Err(e) => bail!("cannot read {}: {e}", data_dir.display()),
    }
    let nested = data_dir.join(LOG_DIR);
    let log_dir = if nested.is_dir() {
        nested
    } else {
        data_dir.to_path_buf()
    };
    if !log_dir.join("db").exists() && !log_dir.join("conf").exists() {
        bail!(
            "{} holds no event log (a node's data directory has it in `{}/`)",
            data_dir.display(),
            LOG_DIR
        );
    }
    if !is_read_only(&log_dir) {
        return Ok((log_dir, None));
    }
    let copy = tempfile::Builder::new()
        .prefix("chorus-replay-")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("cannot create a temporary copy of a read-only log: {e}"))?;
    copy_dir(&log_dir, copy.path()).map_err(|e| {
        anyhow::anyhow!(
            "cannot copy the read-only log {} to a temporary directory: {e}",
            log_dir.display()
        )
    })?;
    eprintln!(
        "chorus: {} is read-only; replaying a temporary copy",
        log_dir.display()
    );
    Ok((copy.path().to_path_buf(), Some(copy)))
}

/// Whether the log directory or its files cannot (or should not) be written.
fn is_read_only(dir: &Path) -> bool {
    let read_only = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().readonly());
    if read_only(dir) || read_only(&dir.join("db")) || read_only(&dir.join("conf")) {
        return true;
    }
    // A read-only mount shows writable permission bits; only a write tells.
    tempfile::tempfile_in(dir).is_err()
}

/// Copies a directory tree (a sled log: files and a few subdirectories), writable.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Whether opening an event log failed because another process holds its lock (sled's
/// `WouldBlock`).
pub fn log_locked(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::WouldBlock)
    }) || text.contains("WouldBlock")
        || text.contains("os error 11")
        || text.contains("temporarily unavailable")
}

/// Says what a recovery failure means when the cause is a known situation: a locked log is a
/// running node, which must be stopped first (a copy would not do: recovery writes to the log
/// the node itself starts from).
pub fn recover_error(e: anyhow::Error, data_dir: &Path) -> anyhow::Error {
    if log_locked(&e) {
        anyhow::anyhow!(
            "the node using {} is running (its event log is locked): stop it first; recovery \
             writes to the event log of a stopped node",
            data_dir.display()
        )
    } else {
        e
    }
}

/// Says what a replay failure means when the cause is a known situation.
pub fn replay_error(e: anyhow::Error, data_dir: &Path) -> anyhow::Error {
    if log_locked(&e) {
        anyhow::anyhow!(
            "the node using {} is running (its event log is locked); stop it, or copy the data \
             directory and replay the copy",
            data_dir.display()
        )
    } else {
        e
    }
}
