//! TLS and mTLS on TCP listeners (kube-apiserver's `--tls-cert-file`, `--tls-private-key-file`,
//! `--client-ca-file`), with the files reloaded when they change.
//!
//! With `--client-ca-file`, a client certificate is verified against it when one is presented
//! (a certificate that does not verify fails the handshake), and its subject's CommonNames and
//! Organizations go with the connection ([`certificate_identity`]) for authentication to name
//! the caller from (CN = user, each O = a group; `api::authn::certificate_user`). A client
//! that presents none still completes the handshake, as with
//! kube-apiserver, so that bearer tokens work on the same port; with authentication configured
//! it then has no identity and every call is `UNAUTHENTICATED`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use thiserror::Error;
use tokio_rustls::TlsAcceptor;

use super::ClientIdentity;

/// The longest a TLS handshake may take; a peer that stalls longer is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the certificate, key and CA files are checked for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// The TLS files, as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Verify client certificates against these CAs.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(self.cert.as_path()), Some(self.key.as_path())]
            .into_iter()
            .chain(std::iter::once(self.client_ca.as_deref()))
            .flatten()
    }
}

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("`{path}`: {problem}")]
    Pem { path: String, problem: String },
    #[error("`{path}` holds no {what}")]
    Empty { path: String, what: &'static str },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The current server configuration, swapped whole when the files change; every new
/// connection takes the configuration in force when it arrives.
pub struct TlsServer {
    files: TlsFiles,
    current: ArcSwap<ServerConfig>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsServer({:?})", self.files)
    }
}

impl TlsServer {
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let config = server_config(&files)?;
        Ok(Self {
            files,
            current: ArcSwap::from_pointee(config),
        })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Completes the server side of a handshake on `io`; returns the TLS stream and the
    /// identity of a verified client certificate, if one was presented.
    pub async fn accept<IO>(
        &self,
        io: IO,
    ) -> std::io::Result<(tokio_rustls::server::TlsStream<IO>, Option<ClientIdentity>)>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let acceptor = TlsAcceptor::from(self.current.load_full());
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })??;
        let identity = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| certificate_identity(leaf.as_ref()));
        Ok((stream, identity))
    }

    /// Re-reads the files; on success the new configuration serves every later connection,
    /// on failure the one in force stays (and the error is returned for the log).
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.files)?;
        self.current.store(Arc::new(config));
        Ok(())
    }

    /// Polls the files every [`RELOAD_INTERVAL`] and reloads when any of them changed
    /// (modification time or size; a rename into place counts). Stops with the runtime.
    pub fn spawn_reloader(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut seen = self.stamps();
            let mut ticks = tokio::time::interval(RELOAD_INTERVAL);
            loop {
                ticks.tick().await;
                let now = self.stamps();
                if now == seen {
                    continue;
                }
                seen = now;
                match self.reload() {
                    Ok(()) => tracing::info!(files = ?self.files, "TLS files reloaded"),
                    Err(error) => tracing::error!(
                        %error,
                        "TLS files changed but do not load; the previous certificate stays in force"
                    ),
                }
            }
        })
    }

    fn stamps(&self) -> Vec<Option<(SystemTime, u64)>> {
        self.files
            .paths()
            .map(|path| {
                std::fs::metadata(path)
                    .ok()
                    .and_then(|m| Some((m.modified().ok()?, m.len())))
            })
            .collect()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let certs = read_certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| pem_error(&files.key, e))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for ca in read_certificates(path)? {
                roots.add(ca).map_err(|e| TlsError::Pem {
                    path: path.display().to_string(),
                    problem: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(format!("{}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError::Config(format!(
            "{} and {} do not make a usable certificate and key: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    // gRPC needs HTTP/2; HTTP/1.1 serves the JSON endpoints.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn pem_error(path: &Path, error: rustls::pki_types::pem::Error) -> TlsError {
    match error {
        rustls::pki_types::pem::Error::Io(source) => TlsError::Read {
            path: path.display().to_string(),
            source,
        },
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            path: path.display().to_string(),
            what: "PEM private key",
        },
        other => TlsError::Pem {
            path: path.display().to_string(),
            problem: other.to_string(),
        },
    }
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.display().to_string(),
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

/// The subject of a verified client certificate, read whole: every CommonName and every
/// Organization, in the certificate's order (a multi-valued RDN's attributes in its set's
/// order), and those whose value is not text read here. Nothing is chosen or dropped: which
/// CommonName is the user is authentication's question, and readers disagree on it (Go's
/// `pkix.Name.FillFromRDNSequence` keeps the last: golang/go `src/crypto/x509/pkix/pkix.go`), so a
/// reader that kept only one would hide the ambiguity from it. `None` only for bytes that are
/// not a certificate (rustls verified them, so not in practice).
pub fn certificate_identity(der: &[u8]) -> Option<ClientIdentity> {
    use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut identity = ClientIdentity::default();
    for attribute in certificate.subject().iter_attributes() {
        let (name, values) = if *attribute.attr_type() == OID_X509_COMMON_NAME {
            ("CN", &mut identity.common_names)
        } else if *attribute.attr_type() == OID_X509_ORGANIZATION_NAME {
            ("O", &mut identity.organizations)
        } else {
            continue;
        };
        match attribute.as_str() {
            Ok(text) => values.push(text.to_string()),
            Err(_) => identity
                .unreadable
                .push(format!("{name} ({})", attribute.attr_value().tag())),
        }
    }
    Some(identity)
}

#[cfg(test)]
mod tests {
    use rcgen::string::BmpString;
    use rcgen::{CertificateParams, DnType, DnValue, KeyPair};

    use super::*;

    /// A self-signed certificate whose subject holds `attributes`, in this order.
    fn subject(attributes: Vec<(DnType, DnValue)>) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in attributes {
            params.distinguished_name.push(kind, value);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    /// rcgen keeps one value per attribute type, so a second CN or O goes in under its OID
    /// spelled as a custom type: on the wire, a second attribute of the same type.
    fn second_cn() -> DnType {
        DnType::CustomDnType(vec![2, 5, 4, 3])
    }

    fn second_o() -> DnType {
        DnType::CustomDnType(vec![2, 5, 4, 10])
    }

    #[test]
    fn every_common_name_and_organization_is_read_in_order() {
        let der = subject(vec![
            (DnType::CommonName, "root".into()),
            (DnType::OrganizationName, "ops".into()),
            (second_cn(), "eve".into()),
            (second_o(), "".into()),
        ]);
        assert_eq!(
            certificate_identity(&der),
            Some(ClientIdentity {
                common_names: vec!["root".into(), "eve".into()],
                organizations: vec!["ops".into(), "".into()],
                unreadable: vec![],
            })
        );
    }

    /// Go reads a BMPString (UCS-2) as text; this reader does not, and says so rather than
    /// leave the value out (a group left out could be one a deny rule names).
    #[test]
    fn values_that_are_not_read_as_text_are_named() {
        let der = subject(vec![
            (DnType::CommonName, "carla".into()),
            (
                DnType::OrganizationName,
                DnValue::BmpString(BmpString::try_from("interns").unwrap()),
            ),
        ]);
        let identity = certificate_identity(&der).unwrap();
        assert_eq!(identity.common_names, ["carla"]);
        assert!(identity.organizations.is_empty());
        assert_eq!(identity.unreadable, ["O (BmpString)"]);
    }
}
