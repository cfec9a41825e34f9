//! The no-op server: the same `authz.v1.Authorizer` service on the same tonic stack, answering
//! every call at once with an empty message. The same request bytes are decoded the way authzd
//! decodes them (`api::wire`: borrowed in the plain shape, else by prost), an empty response
//! goes back: the physical limit of gRPC on this machine, measured in the same run.
//!
//! It runs on its own multi-threaded runtime (its own threads, as authzd has in its process),
//! so the load generator's client runtime does not also serve it.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::oneshot;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use super::LoadgenError;
use crate::api::limits::MAX_REQUEST_BYTES;
use crate::api::wire::service::authorizer_server::{Authorizer, AuthorizerServer};
use crate::api::wire::{AuthorizeCall, AuthorizeReply, BatchAuthorizeCall, BatchAuthorizeReply};
use crate::proto;

/// Where the no-op server listens.
#[derive(Clone, Debug)]
pub enum Listen {
    /// `127.0.0.1:0`.
    Tcp,
    /// A Unix domain socket at this path (created; removed when the server stops).
    Unix(PathBuf),
}

struct Noop;

#[tonic::async_trait]
impl Authorizer for Noop {
    async fn authorize(
        &self,
        request: Request<AuthorizeCall>,
    ) -> Result<Response<AuthorizeReply>, Status> {
        // Decoded as authzd decodes it, then dropped.
        std::hint::black_box(request.into_inner().decode()?);
        Ok(Response::new(AuthorizeReply::empty()))
    }

    async fn batch_authorize(
        &self,
        request: Request<BatchAuthorizeCall>,
    ) -> Result<Response<BatchAuthorizeReply>, Status> {
        let call = request.into_inner();
        let decoded = call.decode()?;
        std::hint::black_box(decoded.len());
        Ok(Response::new(BatchAuthorizeReply::default()))
    }

    async fn get_allowed_subjects(
        &self,
        _request: Request<proto::GetAllowedSubjectsRequest>,
    ) -> Result<Response<proto::GetAllowedSubjectsResponse>, Status> {
        Ok(Response::new(proto::GetAllowedSubjectsResponse::default()))
    }

    async fn evaluate_conditions(
        &self,
        _request: Request<proto::EvaluateConditionsRequest>,
    ) -> Result<Response<proto::AuthorizeResponse>, Status> {
        Ok(Response::new(proto::AuthorizeResponse::default()))
    }

    type WatchInvalidationsStream = crate::api::invalidations::InvalidationStream;

    async fn watch_invalidations(
        &self,
        _request: Request<tonic::Streaming<proto::InvalidationsRequest>>,
    ) -> Result<Response<Self::WatchInvalidationsStream>, Status> {
        Err(Status::unimplemented(
            "the no-op server has no policy to follow",
        ))
    }
}

/// A running no-op server; stopped (and its socket file removed) by [`NoopServer::stop`] or
/// on drop.
pub struct NoopServer {
    endpoint: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
    socket: Option<PathBuf>,
}

impl NoopServer {
    pub fn start(listen: Listen) -> Result<NoopServer, LoadgenError> {
        if let Listen::Unix(path) = &listen {
            if path.exists() {
                return Err(LoadgenError::Usage(format!(
                    "`{}` already exists; remove it or choose another --unix path",
                    path.display()
                )));
            }
        }
        let socket = match &listen {
            Listen::Unix(path) => Some(path.clone()),
            Listen::Tcp => None,
        };
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("noop-server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("noop-server")
                    .build()
                    .map_err(|e| format!("cannot start the no-op server's runtime: {e}"));
                match runtime {
                    Ok(runtime) => runtime.block_on(serve(listen, ready_tx, stop_rx)),
                    Err(message) => {
                        let _ = ready_tx.send(Err(message.clone()));
                        Err(message)
                    }
                }
            })
            .map_err(|source| LoadgenError::Io {
                what: "cannot start the no-op server thread".into(),
                source,
            })?;
        let mut server = NoopServer {
            endpoint: String::new(),
            stop: Some(stop_tx),
            thread: Some(thread),
            socket,
        };
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(endpoint)) => {
                server.endpoint = endpoint;
                Ok(server)
            }
            Ok(Err(message)) => Err(LoadgenError::Noop(message)),
            Err(_) => Err(LoadgenError::Noop("the no-op server did not start".into())),
        }
    }

    /// `http://127.0.0.1:PORT` or `unix:PATH`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops the server and waits for it; reports an error it failed with.
    pub fn stop(mut self) -> Result<(), LoadgenError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), LoadgenError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(message))) => Err(LoadgenError::Noop(message)),
            Some(Err(_)) => Err(LoadgenError::Noop("the no-op server thread failed".into())),
            Some(Ok(Ok(()))) | None => Ok(()),
        };
        if let Some(path) = self.socket.take() {
            let _ = std::fs::remove_file(path);
        }
        result
    }
}

impl Drop for NoopServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

async fn serve(
    listen: Listen,
    ready: mpsc::Sender<Result<String, String>>,
    stop: oneshot::Receiver<()>,
) -> Result<(), String> {
    let router = Server::builder()
        .add_service(AuthorizerServer::new(Noop).max_decoding_message_size(MAX_REQUEST_BYTES));
    let shutdown = async {
        let _ = stop.await;
    };
    let fail = |ready: &mpsc::Sender<Result<String, String>>, message: String| {
        let _ = ready.send(Err(message.clone()));
        Err(message)
    };
    let served = match listen {
        Listen::Tcp => {
            let listener = match TcpListener::bind("127.0.0.1:0").await {
                Ok(listener) => listener,
                Err(e) => return fail(&ready, format!("cannot listen on 127.0.0.1:0: {e}")),
            };
            let addr = match listener.local_addr() {
                Ok(addr) => addr,
                Err(e) => return fail(&ready, format!("no local address: {e}")),
            };
            let _ = ready.send(Ok(format!("http://{addr}")));
            router
                .serve_with_incoming_shutdown(
                    TcpIncoming::from(listener).with_nodelay(Some(true)),
                    shutdown,
                )
                .await
        }
        Listen::Unix(path) => {
            let listener = match UnixListener::bind(&path) {
                Ok(listener) => listener,
                Err(e) => {
                    return fail(
                        &ready,
                        format!("cannot listen on `{}`: {e}", path.display()),
                    )
                }
            };
            let _ = ready.send(Ok(format!("unix:{}", path.display())));
            router
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await
        }
    };
    served.map_err(|e| format!("the no-op server failed: {e}"))
}
