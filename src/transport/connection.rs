//! What every request learns about the connection it arrived on, and the per-connection
//! handshake seam.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::ListenAddr;

/// The connection a request arrived on. Inserted into every request's `http::Extensions`
/// (and so into every `tonic::Request`'s extensions) by the accept loop.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The bound address of the listener that accepted the connection (with the real port
    /// when `:0` was asked for).
    pub listener: Arc<ListenAddr>,
    /// The caller's address; `None` on a Unix socket.
    pub remote_addr: Option<SocketAddr>,
    /// Our end of a TCP connection; `None` on a Unix socket.
    pub local_addr: Option<SocketAddr>,
    /// The identity from a verified client certificate. Always `None` until a TLS handshake
    /// in [`handshake`] fills it; authenticators must treat `None` as "no certificate".
    pub client_identity: Option<ClientIdentity>,
}

/// A verified client certificate's identity, as kube-apiserver's x509 authenticator reads it:
/// the subject CommonName is the user, each Organization a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// Any byte stream a connection can run over (TCP, Unix socket, later TLS on top of either).
pub trait ConnectionIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ConnectionIo for T {}

pub type BoxedIo = Box<dyn ConnectionIo>;

/// The per-connection handshake, run on the connection's own task (never on the accept loop,
/// so a slow peer cannot stall accepting). Today it passes the stream through; TLS plugs in
/// here: wrap `io` in the TLS stream, fill `info.client_identity` from the verified client
/// certificate, and return an error to drop a connection whose handshake failed.
pub async fn handshake(
    io: BoxedIo,
    info: ConnectionInfo,
) -> std::io::Result<(BoxedIo, ConnectionInfo)> {
    Ok((io, info))
}
