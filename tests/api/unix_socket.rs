//! A `unix://` listener next to the TCP one: gRPC (Authorize, health) over the socket with a
//! tonic client using a Unix-socket connector; stale socket files are replaced, other files
//! are never deleted, and the socket file is removed on shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::server::{run_bin, sample_policy, Server};
use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{Action, AuthorizeRequest, ResourceAttributes, UserInfo};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn unix_channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    // The URI is required by the API and ignored: every connection goes to the socket.
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect over the Unix socket")
}

fn authorize(user: &str, verb: &str) -> AuthorizeRequest {
    AuthorizeRequest {
        user: Some(UserInfo {
            name: user.into(),
            ..Default::default()
        }),
        action: Some(Action {
            kind: Some(Kind::ResourceAttributes(ResourceAttributes {
                verb: verb.into(),
                resource: "pods".into(),
                ..Default::default()
            })),
        }),
        ..Default::default()
    }
}

fn socket_arg(path: &Path) -> String {
    format!("unix://{}", path.display())
}

// Multi-threaded: the clients' connection tasks must keep running (answering the server's
// GOAWAY) while the test thread blocks waiting for the process to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_health_over_a_unix_socket() {
    let policy = sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let socket: PathBuf = dir.path().join("authzd.sock");
    // A socket file left by a killed server: replaced, not an error.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());

    let listen = socket_arg(&socket);
    let mut server = Server::start_serving(policy.path(), &["--listen", &listen]).await;
    assert!(
        server
            .stderr()
            .contains(&format!("authzd listening on {listen}")),
        "{}",
        server.stderr()
    );

    let channel = unix_channel(&socket).await;
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: "authz.v1.Authorizer".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let mut client = AuthorizerClient::new(channel);
    let allowed = client.authorize(authorize("alice", "get")).await.unwrap();
    assert!(allowed.get_ref().allowed);
    let refused = client
        .authorize(authorize("alice", "delete"))
        .await
        .unwrap();
    assert!(!refused.get_ref().allowed);

    // The TCP listener serves the same process alongside.
    let mut tcp = AuthorizerClient::new(server.channel().await);
    assert!(
        tcp.authorize(authorize("alice", "get"))
            .await
            .unwrap()
            .get_ref()
            .allowed
    );

    assert!(
        server.terminate(Duration::from_secs(20)),
        "no graceful exit"
    );
    assert!(!socket.exists(), "the socket file is removed on shutdown");
}

#[test]
fn a_file_that_is_not_a_socket_is_never_deleted() {
    let policy = sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precious.txt");
    std::fs::write(&path, "keep me").unwrap();
    let output = run_bin(
        &[
            "serve".as_ref(),
            "--policy".as_ref(),
            policy.path().as_os_str(),
            "--listen".as_ref(),
            socket_arg(&path).as_ref(),
        ],
        Duration::from_secs(20),
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
}

#[test]
fn relative_socket_paths_are_a_usage_error() {
    let output = run_bin(
        &[
            "serve".as_ref(),
            "--listen".as_ref(),
            "unix://relative.sock".as_ref(),
        ],
        Duration::from_secs(20),
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("absolute path"), "{stderr}");
}
