//! `chorus psk generate FILE`: a new pre-shared key for a private network, in the swarm key
//! format libp2p reads (`--psk-file`), written mode 0600 and never over an existing file.

use std::path::Path;

use anyhow::Context;

/// Writes a new random swarm key to `path` (which must not exist).
pub fn generate(path: &Path) -> anyhow::Result<()> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let text = format!("/key/swarm/psk/1.0.0/\n/base16/\n{}\n", hex::encode(key));
    crate::daemon::acl::write_private(path, &text).context("the key file must not exist yet")?;
    // What the node will read: the file must parse as it does.
    chorus_io::transport::load_psk(path)?;
    eprintln!(
        "wrote a new cluster key to {} (mode 0600): copy it to every node and pass \
         --psk-file {}",
        path.display(),
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_generated_key_is_private_readable_and_never_overwrites() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swarm.key");
        super::generate(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(super::generate(&path).is_err(), "no overwrite");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
        let other = dir.path().join("other.key");
        super::generate(&other).unwrap();
        assert_ne!(std::fs::read_to_string(&other).unwrap(), first);
    }
}
