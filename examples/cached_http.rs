//! An HTTP service that authorizes every request with authzd, answering repeated questions from
//! a decision cache in its own process (docs/caller-cache.md §5).
//!
//! ```sh
//! authzd serve &                                   # the shipped policy
//! cargo run --example cached_http -- http://127.0.0.1:50051 127.0.0.1:8080 &
//! curl -H 'X-Remote-User: jane' http://127.0.0.1:8080/healthz
//! ```
//!
//! The request's user comes from `X-Remote-User` (a trusted front proxy would set it), its
//! groups from `X-Remote-Group`; the path is asked about as a non-resource URL with the verb
//! kube-apiserver uses for the method.

use std::convert::Infallible;

use authzd::caller::{AuthorizeLayer, Client, Endpoint, LocalCacheConfig};
use authzd::request::{Action, NonResourceAttributes, Request, UserInfo};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;

/// The attributes of an HTTP request: who (from the headers) asks to do what (the method's
/// verb on the path).
fn attributes<B>(request: &http::Request<B>) -> Result<Request, String> {
    let header = |name: &str| {
        request
            .headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let user = header("x-remote-user")
        .into_iter()
        .next()
        .ok_or("no X-Remote-User header")?;
    let verb = match request.method().as_str() {
        "GET" | "HEAD" => "get",
        "POST" => "post",
        "PUT" => "put",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => return Err(format!("method {other} is not served")),
    };
    Ok(Request {
        user: UserInfo {
            name: user,
            groups: header("x-remote-group"),
            ..Default::default()
        },
        action: Action::NonResource(NonResourceAttributes {
            path: request.uri().path().to_string(),
            verb: verb.to_string(),
        }),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let server = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let client = Client::connect(&Endpoint::new(server))
        .await?
        .with_local_cache(LocalCacheConfig::new("cached-http-example"));
    let service = tower::ServiceBuilder::new()
        .layer(AuthorizeLayer::new(client, attributes))
        .service_fn(|_request: http::Request<hyper::body::Incoming>| async {
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                b"hello\n",
            ))))
        });
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("serving on {listen}");
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
