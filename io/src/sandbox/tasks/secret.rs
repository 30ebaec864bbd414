//! Secret environment values (`--secret-env K`): sealed by the node that accepts the task,
//! opened only by the worker that runs it, so the value is never in an event log, a message or
//! an API answer in plain text — only the command's environment holds it. A sealed value sits
//! in the spec's `env` under its own name, as `chorus-sealed-v1:HEX`; the API refuses a plain
//! value of that form (a sealed value copied from elsewhere would be opened into the copier's
//! task) and shows sealed ones as `<secret>` to everyone.
//!
//! The key is derived from the cluster's pre-shared key (`psk_file`), which every admitted node
//! holds and nothing else does; a cluster without one cannot take secret values. Sealing is
//! XChaCha20-Poly1305 with the variable's name as associated data (a value cannot be moved to
//! another name) and a nonce derived from the name and value (HMAC-SHA256), so a retried submit
//! seals to the same text and its idempotency key still matches; what that reveals is only that
//! two sealed values are equal.

use std::collections::BTreeMap;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What a sealed value starts with (the version of the scheme).
pub const SEALED_PREFIX: &str = "chorus-sealed-v1:";

/// A cluster's key for secret environment values.
#[derive(Clone)]
pub struct SecretKey {
    seal: [u8; 32],
    nonce: [u8; 32],
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// Why a sealed value could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not `chorus-sealed-v1:` followed by hex.
    #[error("not a sealed value")]
    Malformed,
    /// Sealed under another key (another cluster's), for another name, or altered.
    #[error("sealed under another cluster's key, for another name, or altered")]
    Forged,
}

impl SecretKey {
    /// Derives the key from the pre-shared key's file text (what every node's `psk_file` holds).
    pub fn from_psk(psk_file_text: &str) -> SecretKey {
        SecretKey {
            seal: derive(psk_file_text, b"chorus secret-env v1: seal"),
            nonce: derive(psk_file_text, b"chorus secret-env v1: nonce"),
        }
    }

    /// Seals `value` for the variable `name`.
    pub fn seal(&self, name: &str, value: &str) -> String {
        let mut mac = <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(&self.nonce)
            .expect("HMAC takes a key of any length");
        mac.update(name.as_bytes());
        mac.update(&[0]);
        mac.update(value.as_bytes());
        let tag = mac.finalize().into_bytes();
        let nonce = XNonce::from_slice(&tag[..24]);
        let cipher = XChaCha20Poly1305::new((&self.seal).into());
        let sealed = cipher
            .encrypt(
                nonce,
                Payload {
                    msg: value.as_bytes(),
                    aad: name.as_bytes(),
                },
            )
            .expect("encrypting a bounded value in memory cannot fail");
        let mut out = String::with_capacity(SEALED_PREFIX.len() + 2 * (24 + sealed.len()));
        out.push_str(SEALED_PREFIX);
        out.push_str(&hex::encode(nonce));
        out.push_str(&hex::encode(sealed));
        out
    }

    /// Opens a value sealed for `name`.
    pub fn open(&self, name: &str, sealed: &str) -> Result<String, OpenError> {
        let bytes = sealed
            .strip_prefix(SEALED_PREFIX)
            .and_then(|h| hex::decode(h).ok())
            .filter(|b| b.len() >= 24 + 16)
            .ok_or(OpenError::Malformed)?;
        let (nonce, body) = bytes.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.seal).into());
        let plain = cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: name.as_bytes(),
                },
            )
            .map_err(|_| OpenError::Forged)?;
        String::from_utf8(plain).map_err(|_| OpenError::Forged)
    }
}

/// The environment a run gets: every sealed value opened with `key`. Refused (with the
/// variable's name) when a value does not open, or when there are sealed values and this
/// worker has no key.
pub fn open_env(
    env: &BTreeMap<String, String>,
    key: Option<&SecretKey>,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = env.clone();
    for (name, value) in out.iter_mut() {
        if !is_sealed(value) {
            continue;
        }
        let Some(key) = key else {
            return Err(format!(
                "secret environment variable `{name}`: this worker holds no cluster key \
                 (psk_file) to open it"
            ));
        };
        *value = key
            .open(name, value)
            .map_err(|e| format!("secret environment variable `{name}`: {e}"))?;
    }
    Ok(out)
}

/// Whether an environment value is a sealed one.
pub fn is_sealed(value: &str) -> bool {
    value.starts_with(SEALED_PREFIX)
}

fn derive(psk_file_text: &str, label: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(psk_file_text.trim().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(label);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_under_its_key_and_name() {
        let key = SecretKey::from_psk("/key/swarm/psk/1.0.0/\n/base16/\naa");
        let sealed = key.seal("TOKEN", "hunter2");
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("hunter2"));
        assert_eq!(key.open("TOKEN", &sealed).unwrap(), "hunter2");
        // Deterministic: a retried submit seals to the same text.
        assert_eq!(key.seal("TOKEN", "hunter2"), sealed);
        assert_ne!(key.seal("TOKEN", "hunter3"), sealed);
        // Another name, another cluster, a flipped bit, garbage: refused.
        assert_eq!(key.open("OTHER", &sealed), Err(OpenError::Forged));
        let other = SecretKey::from_psk("/key/swarm/psk/1.0.0/\n/base16/\nbb");
        assert_eq!(other.open("TOKEN", &sealed), Err(OpenError::Forged));
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(key.open("TOKEN", &flipped), Err(OpenError::Forged));
        for bad in ["hunter2", "chorus-sealed-v1:zz", "chorus-sealed-v1:00"] {
            assert_eq!(key.open("TOKEN", bad), Err(OpenError::Malformed), "{bad}");
        }
        assert!(!format!("{key:?}").contains(|c: char| c.is_ascii_digit()));
    }

    #[test]
    fn a_run_gets_its_secrets_opened_or_is_refused_naming_the_variable() {
        let key = SecretKey::from_psk("k");
        let env: BTreeMap<String, String> = [
            ("PLAIN".to_owned(), "v".to_owned()),
            ("S".to_owned(), key.seal("S", "s3cret")),
        ]
        .into();
        let opened = open_env(&env, Some(&key)).unwrap();
        assert_eq!(opened["S"], "s3cret");
        assert_eq!(opened["PLAIN"], "v");
        let err = open_env(&env, None).unwrap_err();
        assert!(err.contains("`S`") && err.contains("psk_file"), "{err}");
        let err = open_env(&env, Some(&SecretKey::from_psk("other"))).unwrap_err();
        assert!(err.contains("another cluster"), "{err}");
    }
}
