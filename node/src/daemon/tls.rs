//! The HTTP API's TLS identity: the operator's certificate, or one this node makes at first
//! start and keeps in `DATA_DIR/http-tls/` (so its fingerprint stays the same across restarts
//! and clients can pin it). Off loopback the API speaks TLS unless told not to (issue 33): a
//! bearer token sent in the clear is a token given away.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::acl::write_private;
use super::config::TlsSource;
use crate::pki::{fingerprint, provider};

/// The directory (under the data directory) of a generated certificate.
pub const GENERATED_DIR: &str = "http-tls";
const CERT_FILE: &str = "cert.pem";
const KEY_FILE: &str = "key.pem";

/// What the API serves with.
pub struct HttpTlsIdentity {
    /// The server configuration (ring provider, TLS 1.2 and 1.3, HTTP/1.1).
    pub config: Arc<rustls::ServerConfig>,
    /// SHA-256 of the leaf certificate's DER, lowercase hex: what `--tls-fingerprint` pins.
    pub fingerprint: String,
    /// The certificate file (for the start message).
    pub cert_path: PathBuf,
    /// Whether this start made the certificate.
    pub generated_now: bool,
}

/// Loads the operator's certificate, or the generated one (making it at first start; its names
/// are `localhost`, the loopback addresses, the API's own IP when it is not a wildcard, and
/// the `http_names`).
pub fn identity(
    source: &TlsSource,
    data_dir: &Path,
    http: std::net::SocketAddr,
    http_names: &[String],
) -> anyhow::Result<HttpTlsIdentity> {
    let (cert_path, key_path, generated_now) = match source {
        TlsSource::Files { cert, key } => (cert.clone(), key.clone(), false),
        TlsSource::Generated => {
            let dir = data_dir.join(GENERATED_DIR);
            let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
            let made = !cert.exists() || !key.exists();
            if made {
                generate(&dir, &cert, &key, http, http_names)?;
            }
            (cert, key, made)
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(Iterator::collect)
        .map_err(|e| anyhow::anyhow!("cannot read the certificate {}: {e}", cert_path.display()))?;
    let leaf = certs
        .first()
        .with_context(|| format!("{} holds no certificate", cert_path.display()))?;
    let fingerprint = fingerprint(leaf);
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| anyhow::anyhow!("cannot read the private key {}: {e}", key_path.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "the certificate {} and the key {} do not make a TLS identity",
                cert_path.display(),
                key_path.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(HttpTlsIdentity {
        config: Arc::new(config),
        fingerprint,
        cert_path,
        generated_now,
    })
}

fn generate(
    dir: &Path,
    cert: &Path,
    key: &Path,
    http: std::net::SocketAddr,
    http_names: &[String],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !http.ip().is_unspecified() && !http.ip().is_loopback() {
        names.push(http.ip().to_string());
    }
    names.extend(http_names.iter().cloned());
    let made = rcgen::generate_simple_self_signed(names)
        .context("cannot make a certificate for the HTTP API")?;
    // The key first and private; a crash between the two writes leaves no certificate, so the
    // next start makes both again.
    let _ = std::fs::remove_file(key);
    write_private(key, &made.key_pair.serialize_pem())?;
    std::fs::write(cert, made.cert.pem())
        .with_context(|| format!("cannot write {}", cert.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_identity_is_kept_and_its_fingerprint_stays() {
        let dir = tempfile::tempdir().unwrap();
        let addr = "0.0.0.0:7070".parse().unwrap();
        let first = identity(&TlsSource::Generated, dir.path(), addr, &[]).unwrap();
        assert!(first.generated_now);
        assert_eq!(first.fingerprint.len(), 64);
        let again = identity(&TlsSource::Generated, dir.path(), addr, &[]).unwrap();
        assert!(!again.generated_now);
        assert_eq!(first.fingerprint, again.fingerprint);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(GENERATED_DIR).join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_certificate_without_its_key_is_refused_with_the_paths() {
        let dir = tempfile::tempdir().unwrap();
        let addr = "127.0.0.1:7070".parse().unwrap();
        identity(&TlsSource::Generated, dir.path(), addr, &[]).unwrap();
        let other = tempfile::tempdir().unwrap();
        identity(&TlsSource::Generated, other.path(), addr, &[]).unwrap();
        let mismatched = TlsSource::Files {
            cert: dir.path().join(GENERATED_DIR).join(CERT_FILE),
            key: other.path().join(GENERATED_DIR).join(KEY_FILE),
        };
        let err = identity(&mismatched, dir.path(), addr, &[])
            .err()
            .expect("a key of another certificate");
        assert!(
            format!("{err:#}").contains("do not make a TLS identity"),
            "{err:#}"
        );
        let missing = TlsSource::Files {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope.key"),
        };
        let err = identity(&missing, dir.path(), addr, &[]).err().unwrap();
        assert!(format!("{err:#}").contains("nope.pem"), "{err:#}");
    }
}
