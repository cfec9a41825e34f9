//! Where the server is and how to reach it: `http://` or `https://` (a CA, optionally a client
//! certificate and key) or `unix:///path/to/socket`, with an optional bearer token sent on
//! every call, and the deadline of the connection and of each call ([`super::deadline`]).

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity, Uri};

use super::deadline::{format_duration, DEFAULT_TIMEOUT};

/// How to reach one server.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `http://HOST:PORT`, `https://HOST:PORT` or `unix:///PATH`.
    pub url: String,
    /// `https://`: the PEM CA(s) the server's certificate must chain to.
    pub certificate_authority: Option<PathBuf>,
    /// `https://` servers that verify clients: a PEM certificate and its key.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// Sent as `authorization: Bearer TOKEN` (a server with `--token-auth-file`).
    pub token: Option<String>,
    /// How long connecting may take, and then each call
    /// ([`Deadline`](super::deadline::Deadline)). Default: [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
}

impl Endpoint {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            certificate_authority: None,
            client_identity: None,
            token: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("`{url}`: {problem}")]
    Url { url: String, problem: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the token is not a valid header value (visible ASCII, no spaces)")]
    Token,
    #[error("cannot connect to {url}: {detail}")]
    Connect { url: String, detail: String },
    #[error("no connection to {url} within {}", format_duration(*.timeout))]
    TimedOut { url: String, timeout: Duration },
}

/// As the client commands report a connection that failed: `DEADLINE_EXCEEDED` when it was not
/// made in time, else `UNAVAILABLE`.
impl From<ConnectError> for tonic::Status {
    fn from(error: ConnectError) -> Self {
        match error {
            ConnectError::TimedOut { .. } => tonic::Status::deadline_exceeded(error.to_string()),
            other => tonic::Status::unavailable(other.to_string()),
        }
    }
}

/// Adds the bearer token, when there is one, to every call.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    authorization: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|source| ConnectError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// A connected channel and the credentials every call carries, within the endpoint's timeout:
/// tonic's `connect_timeout` bounds the TCP connect alone, and a frozen server whose kernel
/// still accepts would hold the TLS handshake forever.
pub async fn connect(endpoint: &Endpoint) -> Result<(Channel, Credentials), ConnectError> {
    tokio::time::timeout(endpoint.timeout, connect_unbounded(endpoint))
        .await
        .unwrap_or_else(|_| {
            Err(ConnectError::TimedOut {
                url: endpoint.url.clone(),
                timeout: endpoint.timeout,
            })
        })
}

async fn connect_unbounded(endpoint: &Endpoint) -> Result<(Channel, Credentials), ConnectError> {
    let credentials = Credentials {
        authorization: match &endpoint.token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| ConnectError::Token)?,
            ),
            None => None,
        },
    };
    let url = &endpoint.url;
    let failed = |detail: String| ConnectError::Connect {
        url: url.clone(),
        detail,
    };
    let channel = if let Some(path) = url.strip_prefix("unix://") {
        let path = PathBuf::from(path);
        // The URI is a placeholder: the connector ignores it and dials the socket.
        tonic::transport::Endpoint::from_static("http://localhost")
            .connect_timeout(endpoint.timeout)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|e| failed(error_chain(&e)))?
    } else {
        let mut tonic_endpoint = tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|e| ConnectError::Url {
                url: url.clone(),
                problem: e.to_string(),
            })?
            .connect_timeout(endpoint.timeout)
            .tcp_nodelay(true);
        if url.starts_with("https://") {
            let Some(ca) = &endpoint.certificate_authority else {
                return Err(ConnectError::Url {
                    url: url.clone(),
                    problem: "https needs the CA the server's certificate chains to".into(),
                });
            };
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
            if let Some((cert, key)) = &endpoint.client_identity {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            tonic_endpoint = tonic_endpoint
                .tls_config(tls)
                .map_err(|e| failed(error_chain(&e)))?;
        } else if !url.starts_with("http://") {
            return Err(ConnectError::Url {
                url: url.clone(),
                problem: "use http://HOST:PORT, https://HOST:PORT or unix:///PATH".into(),
            });
        }
        tonic_endpoint
            .connect()
            .await
            .map_err(|e| failed(error_chain(&e)))?
    };
    Ok((channel, credentials))
}

/// `transport error: tcp connect error: Connection refused (os error 111)`: tonic's top-level
/// message alone ("transport error") says nothing.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
