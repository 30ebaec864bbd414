//! The node's persistent libp2p identity and the private network's pre-shared key, both read
//! from files in the data directory.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use libp2p::identity::Keypair;
use libp2p::pnet::{KeyParseError, PreSharedKey};

use super::TransportError;

/// Loads the ed25519 keypair stored at `path` (protobuf encoding, as libp2p writes it), or
/// creates one and stores it with mode 0600, so the node's peer id is stable across restarts.
///
/// A new key is written to a temporary file, synced and renamed into place, so a crash never
/// leaves a truncated key behind.
pub fn load_or_create_identity(path: &Path) -> Result<Keypair, TransportError> {
    let io_err = |e: std::io::Error| TransportError::Identity(format!("{}: {e}", path.display()));
    match fs::read(path) {
        Ok(bytes) => {
            let mode = fs::metadata(path).map_err(io_err)?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    mode = format_args!("{mode:o}"),
                    "identity key file is readable by others; it should be 0600"
                );
            }
            Keypair::from_protobuf_encoding(&bytes).map_err(|e| {
                TransportError::Identity(format!("{}: not a libp2p keypair: {e}", path.display()))
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let keypair = Keypair::generate_ed25519();
            let bytes = keypair
                .to_protobuf_encoding()
                .map_err(|e| TransportError::Identity(format!("encoding a new key: {e}")))?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::create_dir_all(dir).map_err(io_err)?;
            }
            let tmp = path.with_extension("tmp");
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io_err)?;
            file.write_all(&bytes).map_err(io_err)?;
            file.sync_all().map_err(io_err)?;
            drop(file);
            fs::rename(&tmp, path).map_err(io_err)?;
            tracing::info!(
                path = %path.display(),
                peer_id = %keypair.public().to_peer_id(),
                "created a new node identity"
            );
            Ok(keypair)
        }
        Err(e) => Err(io_err(e)),
    }
}

/// Reads a pre-shared network key in the standard `/key/swarm/psk/1.0.0/` file format
/// (as written by `ipfs-swarm-key-gen`): that line, `/base16/`, then 64 hex digits.
pub fn load_psk(path: &Path) -> Result<PreSharedKey, TransportError> {
    let text = fs::read_to_string(path)
        .map_err(|e| TransportError::Config(format!("{}: {e}", path.display())))?;
    // libp2p's parser slices the hex by byte offsets; refuse non-ASCII text before it sees it.
    if !text.is_ascii() {
        return Err(TransportError::Config(format!(
            "{}: not a swarm key file: non-ASCII content",
            path.display()
        )));
    }
    text.parse::<PreSharedKey>().map_err(|e| {
        TransportError::Config(format!(
            "{}: not a swarm key file: {} (one is three lines: /key/swarm/psk/1.0.0/, /base16/, \
             64 hex digits; `chorus psk generate FILE` writes one)",
            path.display(),
            psk_error_words(&e)
        ))
    })
}

/// What is wrong with a key file, in words (libp2p's error displays its Rust variant name).
fn psk_error_words(e: &KeyParseError) -> &'static str {
    match e {
        KeyParseError::InvalidKeyFile => "it does not have the three lines of one",
        KeyParseError::InvalidKeyType => "its first line is not /key/swarm/psk/1.0.0/",
        KeyParseError::InvalidKeyEncoding => "its second line is not /base16/",
        KeyParseError::InvalidKeyLength => "its key is not 64 hex digits",
        KeyParseError::InvalidKeyChar(_) => "its key has a character that is not a hex digit",
    }
}
