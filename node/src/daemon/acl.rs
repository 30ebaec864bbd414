//! The node's API token key on disk: `acl.key` in the data directory (or the shared
//! `acl_key_file`), and the management token written beside it the first time (issue 33). What
//! tokens are and who may do what is in [`crate::api::auth`].

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context};

use crate::access::AclKey;
use crate::daemon::config::NodeConfig;

/// The key file inside the data directory, when `acl_key_file` is not given.
pub const KEY_FILE: &str = "acl.key";

/// The management token's file inside the data directory, written once (mode 0600).
pub const MANAGEMENT_TOKEN_FILE: &str = "management.token";

/// The key this node checks tokens with, and the management token when this start is the
/// first to write it (the caller prints it once).
pub fn load_or_create(config: &NodeConfig) -> anyhow::Result<(AclKey, Option<String>)> {
    let key = match &config.acl_key_file {
        Some(path) => read_key(path).with_context(|| {
            format!(
                "invalid config `{}`",
                config
                    .from_flags
                    .get("acl_key_file")
                    .copied()
                    .unwrap_or("acl_key_file")
            )
        })?,
        None => {
            let path = config.data_dir.join(KEY_FILE);
            if path.exists() {
                read_key(&path)?
            } else {
                let key = AclKey::generate()?;
                write_private(&path, &format!("{}\n", key.to_hex()))?;
                key
            }
        }
    };
    let token_path = config.data_dir.join(MANAGEMENT_TOKEN_FILE);
    let token = key.management_token();
    let stored = std::fs::read_to_string(&token_path).ok();
    if stored.as_deref().map(str::trim) == Some(token.as_str()) {
        return Ok((key, None));
    }
    // First start, or the key changed (a shared key given later): the old token is dead.
    if stored.is_some() {
        std::fs::remove_file(&token_path)
            .with_context(|| format!("cannot replace {}", token_path.display()))?;
    }
    write_private(&token_path, &format!("{token}\n"))?;
    Ok((key, Some(token)))
}

/// Reads a key file, refusing one that others than its owner may read.
pub fn read_key(path: &Path) -> anyhow::Result<AclKey> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read the ACL key {}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "the ACL key {} is readable by others (mode {mode:o}): chmod 600 it",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the ACL key {}", path.display()))?;
    AclKey::from_hex(&text).map_err(|e| anyhow::anyhow!("the ACL key {}: {e}", path.display()))
}

/// Writes a new file only its owner may read (never through an existing file or link).
pub fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_start_makes_a_private_key_and_token_once() {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig {
            data_dir: dir.path().to_path_buf(),
            ..NodeConfig::default()
        };
        let (key, token) = load_or_create(&config).unwrap();
        let token = token.expect("printed on the first start");
        assert_eq!(key.check(&token).unwrap().role, crate::access::Role::Manage);
        for f in [KEY_FILE, MANAGEMENT_TOKEN_FILE] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let (again, none) = load_or_create(&config).unwrap();
        assert!(none.is_none(), "shown once");
        assert_eq!(again.to_hex(), key.to_hex());
    }

    #[test]
    fn a_shared_key_must_be_private_and_replaces_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared.key");
        std::fs::write(&shared, format!("{}\n", "7f".repeat(32))).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut config = NodeConfig {
            data_dir: dir.path().join("data"),
            acl_key_file: Some(shared.clone()),
            ..NodeConfig::default()
        };
        std::fs::create_dir(&config.data_dir).unwrap();
        let err = format!("{:#}", load_or_create(&config).unwrap_err());
        assert!(
            err.contains("chmod 600") && err.contains("acl_key_file"),
            "{err}"
        );
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (key, token) = load_or_create(&config).unwrap();
        assert_eq!(key.to_hex(), "7f".repeat(32));
        assert_eq!(token.unwrap(), key.management_token());
        config.acl_key_file = None;
        let (own, token) = load_or_create(&config).unwrap();
        assert_ne!(own.to_hex(), key.to_hex());
        assert_eq!(
            token.unwrap(),
            own.management_token(),
            "the file follows the key"
        );
    }
}
