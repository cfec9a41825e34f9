//! The one accept loop: every listener (TCP and Unix sockets), HTTP/1.1 and h2c on the same
//! port, one axum router holding the gRPC services and the HTTP/JSON endpoints.
//!
//! Per connection: accept → [`handshake`] (the TLS seam) → hyper-util's `auto` builder
//! (detects the HTTP/2 preface, else HTTP/1.1) → the router, with the connection's
//! [`ConnectionInfo`] (one `Arc` per connection, holding the addresses) in every request's
//! extensions. Shutdown: stop accepting, ask every connection to finish gracefully (HTTP/2
//! GOAWAY, HTTP/1.1 close after the current response), wait for in-flight requests.

mod addr;
mod connection;
pub mod tls;
mod unix_socket;

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, UnixListener};
use tower::ServiceExt as _;

pub use addr::ListenAddr;
use connection::CoalescedWrites;
pub use connection::{handshake, BoxedIo, ClientIdentity, ConnectionInfo, ConnectionIo};
pub use unix_socket::SocketMode;

/// A bound listener, ready to serve.
pub struct Listener {
    kind: ListenerKind,
    /// The bound address (the real port when `:0` was asked for).
    addr: Arc<ListenAddr>,
    /// TLS for every connection, when configured (TCP listeners only).
    tls: Option<Arc<tls::TlsServer>>,
}

enum ListenerKind {
    Tcp(TcpListener),
    Unix {
        listener: UnixListener,
        _socket_file: SocketFile,
    },
}

/// Removes the socket file when the listener goes away, so a clean shutdown leaves nothing
/// behind for the next start to trip over.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.0) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.0.display(), %error, "cannot remove the socket file");
            }
        }
    }
}

impl Listener {
    /// Binds `addr`. For a Unix socket, a stale socket file at the path (left by a process
    /// that was killed) is removed first; any other kind of file there is an error, never
    /// deleted. The socket file gets `unix_mode`, whatever the umask, from the moment it
    /// exists (`unix_socket.rs`).
    pub async fn bind(addr: &ListenAddr, unix_mode: SocketMode) -> io::Result<Listener> {
        match addr {
            ListenAddr::Tcp(socket_addr) => {
                let listener = TcpListener::bind(socket_addr).await?;
                let bound = ListenAddr::Tcp(listener.local_addr()?);
                Ok(Listener {
                    kind: ListenerKind::Tcp(listener),
                    addr: Arc::new(bound),
                    tls: None,
                })
            }
            ListenAddr::Unix(path) => {
                remove_stale_socket(path)?;
                let listener = unix_socket::bind(path, unix_mode)?;
                Ok(Listener {
                    kind: ListenerKind::Unix {
                        listener,
                        _socket_file: SocketFile(path.clone()),
                    },
                    addr: Arc::new(addr.clone()),
                    tls: None,
                })
            }
        }
    }

    pub fn local_addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// Serves TLS on a TCP listener. A Unix socket stays plaintext: it is reached only
    /// through the file system, whose permissions guard it.
    pub fn with_tls(mut self, tls: Option<Arc<tls::TlsServer>>) -> Self {
        if matches!(self.kind, ListenerKind::Tcp(_)) {
            self.tls = tls;
        }
        self
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    async fn accept(&self, tcp_keepalive: Duration) -> io::Result<(BoxedIo, ConnectionInfo)> {
        let info = |remote_addr, local_addr| ConnectionInfo {
            listener: Arc::clone(&self.addr),
            remote_addr,
            local_addr,
            client_identity: None,
        };
        match &self.kind {
            ListenerKind::Tcp(listener) => {
                let (stream, remote) = accept_tcp(listener, tcp_keepalive).await?;
                let local = stream.local_addr().ok();
                Ok((Box::new(stream), info(Some(remote), local)))
            }
            ListenerKind::Unix { listener, .. } => {
                let (stream, _) = listener.accept().await?;
                Ok((Box::new(stream), info(None, None)))
            }
        }
    }
}

/// Accepts one TCP connection and sets it up for gRPC: no Nagle delay, and TCP keepalive, so
/// the kernel finds a client that vanished without closing (its probes cost no work per
/// request, unlike HTTP/2 pings).
async fn accept_tcp(
    listener: &TcpListener,
    keepalive_idle: Duration,
) -> io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    let (stream, remote) = listener.accept().await?;
    // gRPC is many small messages: never wait to coalesce them (Nagle).
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(keepalive_idle)
        .with_interval(TCP_KEEPALIVE_PROBE_INTERVAL)
        .with_retries(TCP_KEEPALIVE_PROBES);
    if let Err(error) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!(%error, "cannot set TCP keepalive");
    }
    Ok((stream, remote))
}

/// After `--tcp-keepalive` of silence, the kernel probes this often, and closes the connection
/// when this many probes go unanswered (so a vanished client is found within the idle time
/// plus 30 s).
const TCP_KEEPALIVE_PROBE_INTERVAL: Duration = Duration::from_secs(10);
const TCP_KEEPALIVE_PROBES: u32 = 3;

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// What one connection may hold (README "Limits").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// HTTP/2 streams (concurrent requests) one connection may open.
    pub http2_max_concurrent_streams: u32,
    /// The largest header list (headers and gRPC metadata) one request may send.
    pub http2_max_header_list_size: u32,
    /// How often an idle HTTP/2 connection is pinged (`None`: never), and how long the answer
    /// may take.
    pub http2_keepalive_interval: Option<Duration>,
    pub http2_keepalive_timeout: Duration,
    /// Silence on a TCP connection before the kernel's keepalive probes start.
    pub tcp_keepalive: Duration,
    /// Close each connection gracefully after this long (clients reconnect).
    pub max_connection_age: Option<Duration>,
    /// Open connections across all listeners; past it, a new connection is closed at once.
    pub max_connections: usize,
    /// Serve HTTP/1.1 only (`authzd proxy --http2-disable`).
    pub http1_only: bool,
}

/// How long in-flight requests may finish on a connection closed for its age.
const CONNECTION_AGE_GRACE: Duration = Duration::from_secs(10);

/// What the accept loop serves: the whole HTTP stack (the router inside its layers), cloned
/// for each request as hyper-util's tower adapter does.
pub trait HttpService:
    tower::Service<
        http::Request<hyper::body::Incoming>,
        Response = http::Response<axum::body::Body>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> HttpService for S where
    S: tower::Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<axum::body::Body>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Serves `service` on every listener until `shutdown` completes, then stops accepting and
/// waits for the open connections' in-flight requests to finish. Socket files are removed
/// on return.
pub async fn serve(
    listeners: Vec<Listener>,
    service: impl HttpService,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let connection_slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let mut accept_loops = tokio::task::JoinSet::new();
    for listener in listeners {
        accept_loops.spawn(accept_loop(
            listener,
            service.clone(),
            limits,
            Arc::clone(&connection_slots),
            stopped.clone(),
        ));
    }
    shutdown.await;
    let _ = stop.send(true);
    // Each accept loop stops accepting, drops its listener (and socket file), then waits for
    // its own connections to finish their in-flight requests.
    while accept_loops.join_next().await.is_some() {}
}

async fn accept_loop(
    listener: Listener,
    service: impl HttpService,
    limits: ConnectionLimits,
    connection_slots: Arc<tokio::sync::Semaphore>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if limits.http1_only {
        builder = builder.http1_only();
    }
    // With a timer, hyper enforces its HTTP/1.1 header read timeout (30 s), so a client that
    // opens a connection and never finishes its headers does not hold it forever.
    builder.http1().timer(TokioTimer::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_header_list_size(limits.http2_max_header_list_size)
        // Pings find clients that vanished without closing, through proxies that answer TCP
        // keepalive themselves. Opt-in: with them on, hyper records every frame for the ping
        // timer (1.4% to 1.7% of an Authorize's instructions in two scripts/profile.sh runs).
        .keep_alive_interval(limits.http2_keepalive_interval)
        .keep_alive_timeout(limits.http2_keepalive_timeout);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = stop_requested(&mut stopped) => break,
            accepted = listener.accept(limits.tcp_keepalive) => accepted,
        };
        // Reap finished connections so the set holds only live ones.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((io, info)) => {
                let Ok(slot) = Arc::clone(&connection_slots).try_acquire_owned() else {
                    // At --max-connections: refuse fast (closing is the only answer a
                    // protocol-less peer understands) rather than queue.
                    tracing::debug!(listener = %listener.addr, "connection refused: --max-connections reached");
                    drop(io);
                    continue;
                };
                let connection = serve_connection(
                    builder.clone(),
                    io,
                    info,
                    listener.tls.clone(),
                    service.clone(),
                    limits.max_connection_age,
                    stopped.clone(),
                );
                connections.spawn(async move {
                    connection.await;
                    drop(slot);
                });
            }
            Err(error) => {
                // Out of file descriptors and the like: keep serving the connections we have
                // and retry shortly rather than spin or exit.
                tracing::warn!(listener = %listener.addr, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    if !connections.is_empty() {
        tracing::info!(connections = connections.len(), "draining open connections");
    }
    while connections.join_next().await.is_some() {}
}

/// One connection: handshake, then HTTP/1.1 or HTTP/2 until the peer closes it or shutdown
/// asks it to finish (HTTP/2 GOAWAY, HTTP/1.1 close after the current response).
async fn serve_connection(
    builder: auto::Builder<TokioExecutor>,
    io: BoxedIo,
    info: ConnectionInfo,
    tls: Option<Arc<tls::TlsServer>>,
    service: impl HttpService,
    max_age: Option<Duration>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let (io, info) = match handshake(io, info, tls.as_deref()).await {
        Ok(done) => done,
        Err(error) => {
            tracing::debug!(%error, "handshake failed");
            return;
        }
    };
    // Shared by the connection's requests: each gets a reference count, not a copy (a client
    // certificate's names would otherwise be copied for every request). It is the only
    // extension inserted: it holds the addresses tonic's `TcpConnectInfo` would.
    let info = Arc::new(info);
    let service = hyper::service::service_fn(move |mut request: http::Request<_>| {
        request.extensions_mut().insert(Arc::clone(&info));
        service.clone().oneshot(request)
    });
    let connection = builder.serve_connection(TokioIo::new(CoalescedWrites::new(io)), service);
    let mut connection = std::pin::pin!(connection);
    let aged = async {
        match max_age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop_requested(&mut stopped) => {
            connection.as_mut().graceful_shutdown();
            connection.as_mut().await
        }
        () = aged => {
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(CONNECTION_AGE_GRACE, connection.as_mut()).await {
                Ok(result) => result,
                // Past its grace: dropping the connection closes it.
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// Resolves once shutdown is asked for (or the sender is gone, which means the same).
async fn stop_requested(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    fn limits(http2_keepalive_interval: Option<Duration>) -> ConnectionLimits {
        ConnectionLimits {
            http2_max_concurrent_streams: 16,
            http2_max_header_list_size: 16 * 1024,
            http2_keepalive_interval,
            http2_keepalive_timeout: Duration::from_secs(10),
            tcp_keepalive: Duration::from_secs(30),
            max_connection_age: None,
            max_connections: 16,
            http1_only: false,
        }
    }

    #[tokio::test]
    async fn accepted_tcp_connections_keep_alive() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = accept_tcp(&listener, Duration::from_secs(45))
            .await
            .unwrap();
        let socket = socket2::SockRef::from(&stream);
        assert!(socket.keepalive().unwrap());
        assert_eq!(
            socket.tcp_keepalive_time().unwrap(),
            Duration::from_secs(45)
        );
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            TCP_KEEPALIVE_PROBE_INTERVAL
        );
        assert_eq!(
            socket.tcp_keepalive_retries().unwrap(),
            TCP_KEEPALIVE_PROBES
        );
        assert!(stream.nodelay().unwrap());
    }

    /// Opens an HTTP/2 connection to a server with these limits, sends nothing after the
    /// preface, and says whether the server pinged it within `within`.
    async fn pinged(limits: ConnectionLimits, within: Duration) -> bool {
        const PING: u8 = 0x6;
        let listener = Listener::bind(
            &ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            SocketMode::DEFAULT,
        )
        .await
        .unwrap();
        let ListenAddr::Tcp(addr) = listener.local_addr().clone() else {
            panic!("not tcp")
        };
        let service = tower::service_fn(|_: http::Request<hyper::body::Incoming>| async {
            Ok::<_, Infallible>(http::Response::new(axum::body::Body::empty()))
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(vec![listener], service, limits, async {
            let _ = stopped.await;
        }));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The client preface and an empty SETTINGS frame.
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let read_frames = async {
            loop {
                let mut header = [0u8; 9];
                stream.read_exact(&mut header).await.unwrap();
                let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
                let mut payload = vec![0u8; len];
                stream.read_exact(&mut payload).await.unwrap();
                if header[3] == PING {
                    return;
                }
            }
        };
        let pinged = tokio::time::timeout(within, read_frames).await.is_ok();
        drop(stream);
        stop.send(()).unwrap();
        server.await.unwrap();
        pinged
    }

    /// A stream that says it takes vectored writes, as TCP does, and counts the writes that
    /// reach it.
    struct CountedWrites {
        io: tokio::io::DuplexStream,
        writes: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl CountedWrites {
        fn counted(&self, written: &std::task::Poll<io::Result<usize>>) {
            if matches!(written, std::task::Poll::Ready(Ok(n)) if *n > 0) {
                self.writes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    impl tokio::io::AsyncRead for CountedWrites {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl tokio::io::AsyncWrite for CountedWrites {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let written = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
            self.counted(&written);
            written
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> std::task::Poll<io::Result<usize>> {
            // The duplex pipe has no vectored write: gather, as the kernel would.
            let gathered: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let written = std::pin::Pin::new(&mut self.io).poll_write(cx, &gathered);
            self.counted(&written);
            written
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::pin::Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    /// Answers a little over h2's 256-byte chain threshold (an Authorize answer naming an etcd
    /// key as its source is one) to many streams at once share the connection's writes, as
    /// smaller answers do, instead of costing one write each.
    #[tokio::test]
    async fn answers_over_256_bytes_share_writes() {
        use http_body_util::BodyExt as _;
        const STREAMS: usize = 64;
        const ANSWER: usize = 300;
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let service = tower::service_fn(|_: http::Request<hyper::body::Incoming>| async {
            Ok::<_, Infallible>(http::Response::new(axum::body::Body::from(vec![
                b'x';
                ANSWER
            ])))
        });
        let info = ConnectionInfo {
            listener: Arc::new(ListenAddr::Tcp("127.0.0.1:1".parse().unwrap())),
            remote_addr: None,
            local_addr: None,
            client_identity: None,
        };
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve_connection(
            auto::Builder::new(TokioExecutor::new()),
            Box::new(CountedWrites {
                io: server_end,
                writes: Arc::clone(&writes),
            }),
            info,
            None,
            service,
            None,
            stopped,
        ));
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client_end))
                .await
                .unwrap();
        let client = tokio::spawn(connection);
        let before = writes.load(std::sync::atomic::Ordering::Relaxed);
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..STREAMS {
            let mut sender = sender.clone();
            streams.spawn(async move {
                let request = http::Request::post("/")
                    .body(axum::body::Body::empty())
                    .unwrap();
                let response = sender.send_request(request).await.unwrap();
                response
                    .into_body()
                    .collect()
                    .await
                    .unwrap()
                    .to_bytes()
                    .len()
            });
        }
        while let Some(length) = streams.join_next().await {
            assert_eq!(length.unwrap(), ANSWER);
        }
        let used = writes.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(
            used <= STREAMS / 4,
            "{STREAMS} answers of {ANSWER} bytes took {used} writes"
        );
        drop(sender);
        client.abort();
        server.abort();
    }

    #[tokio::test]
    async fn http2_pings_only_when_asked_for() {
        let interval = Duration::from_millis(100);
        assert!(pinged(limits(Some(interval)), Duration::from_secs(5)).await);
        assert!(!pinged(limits(None), interval * 10).await);
    }
}
