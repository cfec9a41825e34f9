//! TLS and mTLS on TCP listeners (kube-apiserver's `--tls-cert-file`, `--tls-private-key-file`,
//! `--client-ca-file`), with the files reloaded when they change.
//!
//! With `--client-ca-file`, a client certificate is verified against it when one is presented
//! (a certificate that does not verify fails the handshake) and gives the caller: CN = user,
//! each O = a group. A client that presents none still completes the handshake, as with
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

/// CN = user, each O = a group (kube-apiserver's x509 authenticator). A certificate without a
/// CommonName names no user, as upstream: the caller is then not authenticated by it.
pub fn certificate_identity(der: &[u8]) -> Option<ClientIdentity> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = certificate.subject();
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())?
        .to_string();
    let organizations = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect();
    Some(ClientIdentity {
        common_name,
        organizations,
    })
}
