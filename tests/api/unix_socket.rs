//! A `unix://` listener next to the TCP one: gRPC (Authorize, health) over the socket with a
//! tonic client using a Unix-socket connector; stale socket files are replaced, other files
//! are never deleted, and the socket file is removed on shutdown. The socket file's mode is
//! `--unix-socket-mode` (0600) whatever the server's umask, and a mode that lets every local
//! user connect is refused without authentication.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::os::unix::fs::PermissionsExt as _;
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

/// The permission bits of the file at `path`.
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

/// The umask the kernel reports for process `pid`.
fn umask_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Umask:"))
        .expect("a Umask line")
        .trim()
        .to_string()
}

/// Under `umask 000` a socket bound with the umask's mode is 0777: every local user could
/// connect and be the local identity, `system:admin`. The server's socket is 0600 instead, and
/// it serves over it; `--unix-socket-mode 0660` is exactly 0660 even under a umask (077) that
/// would strip the group's bits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_file_has_its_mode_whatever_the_umask() {
    let policy = sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("authzd.sock");
    let listen = socket_arg(&socket);
    let server = Server::start_with_umask(policy.path(), &["--listen", &listen], "000");
    server.wait_serving().await;
    assert_eq!(
        umask_of(server.pid()),
        "0000",
        "the server runs under umask 000"
    );
    assert_eq!(mode(&socket), 0o600, "{}", server.stderr());
    let health = HealthClient::new(unix_channel(&socket).await)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);
    drop(server);

    let group = dir.path().join("group.sock");
    let listen = socket_arg(&group);
    let server = Server::start_with_umask(
        policy.path(),
        &["--listen", &listen, "--unix-socket-mode", "0660"],
        "077",
    );
    server.wait_serving().await;
    assert_eq!(umask_of(server.pid()), "0077");
    assert_eq!(mode(&group), 0o660, "{}", server.stderr());
}

/// A mode with write for others lets every user of the machine connect: without
/// authentication each would be the local identity, so the server refuses to start, as for a
/// non-loopback address, naming the flag; with a token file (callers must authenticate) or the
/// insecure flag it starts, and the socket is 0666 as asked.
#[tokio::test]
async fn a_socket_every_user_may_connect_to_needs_authentication() {
    let policy = sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("open.sock");
    let listen = socket_arg(&socket);
    let open = ["--listen", listen.as_str(), "--unix-socket-mode", "0666"];
    let refused = run_bin(
        &["serve", "--policy", policy.path().to_str().unwrap()]
            .iter()
            .chain(&open)
            .map(std::ffi::OsStr::new)
            .collect::<Vec<_>>(),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--unix-socket-mode 0666 lets every local user connect"),
        "{stderr}"
    );
    assert!(!socket.exists(), "nothing was bound");

    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "t,olga,u1\n").unwrap();
    for extra in [
        &["--token-auth-file", tokens.to_str().unwrap()][..],
        &["--insecure-allow-unauthenticated-remote"][..],
    ] {
        let args: Vec<&str> = open.iter().chain(extra).copied().collect();
        let server = Server::start_serving(policy.path(), &args).await;
        assert!(
            server
                .stderr()
                .contains(&format!("authzd listening on {listen}")),
            "{extra:?}: {}",
            server.stderr()
        );
        assert_eq!(mode(&socket), 0o666);
    }
}
