//! Outgoing HTTP clients, and https:// through rustls.
//!
//! With the `tls` feature (on by default) reqwest is built with rustls and
//! no crypto provider of its own: this crate makes `ring` the process's
//! provider, so one provider serves the MCP client, the webhooks and
//! PostgreSQL (sqlx uses ring too). Certificates are checked against the
//! system's roots, read by `rustls-native-certs`: `SSL_CERT_FILE` /
//! `SSL_CERT_DIR`, when set, replace the system store.

/// Makes `ring` the process's rustls crypto provider, once. A provider the
/// embedding program installed earlier is kept. reqwest refuses to build a
/// client (it panics) when no provider is installed, so every client this
/// crate builds goes through here; a program that builds its own reqwest
/// clients calls it first. Without the `tls` feature it does nothing.
pub fn install_crypto_provider() {
    #[cfg(feature = "tls")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // Err means a provider is already installed: that one is used.
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
    }
}

/// Builds the client `make` describes. When it cannot be built because the
/// system has no CA certificates at all (a slim container without the
/// ca-certificates package, or `SSL_CERT_FILE` naming a missing file), the
/// client is built anyway: http:// keeps working and every https:// request
/// fails saying that no CA certificates were found.
pub fn build_http_client(
    make: impl Fn() -> reqwest::ClientBuilder,
) -> Result<reqwest::Client, reqwest::Error> {
    install_crypto_provider();
    let error = match make().build() {
        Ok(client) => return Ok(client),
        Err(e) => e,
    };
    #[cfg(feature = "tls")]
    if let Ok(client) = make()
        .tls_backend_preconfigured(no_roots::client_config())
        .build()
    {
        tracing::warn!("https:// will fail: {} ({error})", no_roots::NO_ROOTS);
        return Ok(client);
    }
    Err(error)
}

#[cfg(feature = "tls")]
mod no_roots {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    pub(super) const NO_ROOTS: &str = "no trusted CA certificates were found on this system (install the ca-certificates package, or point SSL_CERT_FILE at a PEM file of the CAs to trust)";

    pub(super) fn client_config() -> rustls::ClientConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let schemes = provider
            .signature_verification_algorithms
            .supported_schemes();
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoRoots(schemes)))
            .with_no_client_auth()
    }

    /// Trusts nothing, and says why.
    #[derive(Debug)]
    struct NoRoots(Vec<SignatureScheme>);

    fn refuse<T>() -> Result<T, rustls::Error> {
        Err(rustls::Error::General(NO_ROOTS.to_string()))
    }

    impl ServerCertVerifier for NoRoots {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            refuse()
        }

        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            refuse()
        }

        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            refuse()
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.clone()
        }
    }
}

/// Why a TLS handshake failed, in plain words, if `e`'s chain holds a rustls
/// error (I/O errors are looked into: rustls' errors travel inside them).
pub(crate) fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    #[cfg(feature = "tls")]
    if let Some(tls) = find_rustls(e) {
        return Some(describe(tls));
    }
    let _ = e;
    None
}

/// The rustls error in `e`'s chain. An I/O error's `source()` skips the
/// error it wraps (and hyper wraps rustls' I/O error in another), so
/// wrapped errors are looked into as well.
#[cfg(feature = "tls")]
fn find_rustls<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(e);
    while let Some(err) = current {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && let Some(tls) = find_rustls(inner)
        {
            return Some(tls);
        }
        current = err.source();
    }
    None
}

#[cfg(feature = "tls")]
fn describe(e: &rustls::Error) -> String {
    use rustls::{CertificateError, Error};
    const TRUST: &str =
        "if it is self-signed, add its CA to the system store or point SSL_CERT_FILE at it";
    match e {
        Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => format!(
                "the server's certificate is not trusted (issued by a CA this host does not know); {TRUST}"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the server's certificate is not valid for this host name (use the name the certificate was issued for in the URL, or reissue it)".to_string()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired (renew it on the server)".to_string()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet (check the clocks of both hosts)"
                    .to_string()
            }
            CertificateError::Revoked => "the server's certificate is revoked".to_string(),
            other => format!("the server's certificate is not trusted ({other}); {TRUST}"),
        },
        Error::General(text) => text.clone(),
        // A plain-HTTP server answers a TLS hello with HTTP text.
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => {
            "the server did not answer in TLS (an http:// server? then use http:// in the URL)"
                .to_string()
        }
        Error::AlertReceived(alert) => format!(
            "the server refused the TLS handshake ({alert:?}; check that it accepts TLS 1.2 or 1.3 and needs no client certificate)"
        ),
        other => format!("the TLS handshake failed: {other}"),
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;
    use std::io;

    /// hyper wraps rustls' I/O error in another I/O error: the cause is
    /// found through both, and said without Rust names.
    #[test]
    fn an_untrusted_certificate_is_found_and_said_plainly() {
        let rustls_error =
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let nested = io::Error::other(io::Error::new(io::ErrorKind::InvalidData, rustls_error));
        let said = tls_failure(&nested).expect("the rustls error is found");
        assert!(
            said.contains("certificate is not trusted") && said.contains("SSL_CERT_FILE"),
            "{said}"
        );
        assert!(!said.contains("UnknownIssuer"), "{said}");
        assert_eq!(tls_failure(&io::Error::other("plain")), None);
    }
}
