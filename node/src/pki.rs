//! The TLS pieces both the API server (`daemon::tls`) and its clients (`cli::http`) use: one
//! crypto provider and one way to name a certificate.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

/// The one crypto provider of this program (ring: libp2p's noise builds it already).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// SHA-256 of a certificate's DER, lowercase hex: what `--tls-fingerprint` pins.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    hex::encode(Sha256::digest(cert.as_ref()))
}
