//! TLS and mTLS against the real server, with certificates made in the test (rcgen): the
//! caller of a verified client certificate is CN (user) with each O as a group; without a
//! certificate (and no token) every call is UNAUTHENTICATED; a certificate from another CA is
//! refused at the handshake; the server's certificate is reloaded when its files change.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::ca::Ca;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::server::Server;
use authzd::proto::access_review_client::AccessReviewClient;
use authzd::proto::action::Kind;
use authzd::proto::{
    Action, PersonalSubjectAccessReviewRequest, ResourceAttributes, SubjectAccessReviewRequest,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

/// Group `reviewers` may create SubjectAccessReviews; group `ops` reads pods; every
/// authenticated caller reads configmaps.
const POLICY: &str = include_str!("../fixtures/tls.yaml");

/// Writes `content` by rename, as an operator (or cert-manager) replaces a certificate.
fn replace(path: &Path, content: &str) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, content).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    server: Server,
    ca: Ca,
}

impl Fixture {
    /// A server with TLS (certificate for `localhost` from a fresh CA), verifying client
    /// certificates from the same CA.
    fn start() -> Fixture {
        Fixture::start_with(&[])
    }

    /// [`Fixture::start`] with more `serve` arguments.
    fn start_with(extra: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy");
        std::fs::create_dir(&policy).unwrap();
        std::fs::write(policy.join("rbac.yaml"), POLICY).unwrap();
        let ca = Ca::new("authzd test CA");
        let (cert, key) = ca.leaf(&["localhost"], "authzd", &[]).pem_pair();
        replace(&dir.path().join("server.crt"), &cert);
        replace(&dir.path().join("server.key"), &key);
        replace(&dir.path().join("ca.crt"), &ca.pem);
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
        let mut args = vec![
            "--tls-cert-file".to_string(),
            path("server.crt"),
            "--tls-private-key-file".to_string(),
            path("server.key"),
            "--client-ca-file".to_string(),
            path("ca.crt"),
            "--no-watch".to_string(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start(&policy, &args);
        Fixture { dir, server, ca }
    }

    /// A TLS channel trusting `server_ca`, presenting `client` (cert, key) if given.
    async fn connect(
        &self,
        server_ca: &str,
        client: Option<&(String, String)>,
    ) -> Result<Channel, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(server_ca))
            .domain_name("localhost");
        if let Some((cert, key)) = client {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        Channel::from_shared(format!("https://127.0.0.1:{}", self.server.addr.port()))
            .unwrap()
            .tls_config(tls)?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
    }
}

fn personal(verb: &str, resource: &str) -> PersonalSubjectAccessReviewRequest {
    PersonalSubjectAccessReviewRequest {
        action: Some(Action {
            kind: Some(Kind::ResourceAttributes(ResourceAttributes {
                namespace: "default".into(),
                verb: verb.into(),
                resource: resource.into(),
                ..Default::default()
            })),
        }),
        min_revision: 0,
        content: None,
    }
}

#[tokio::test]
async fn a_verified_client_certificate_is_the_caller() {
    let f = Fixture::start();
    let client = f.ca.leaf(&[], "carla", &["reviewers", "ops"]).pem_pair();
    let channel = f.connect(&f.ca.pem, Some(&client)).await.unwrap();
    crate::support::server::wait_until_serving(&channel, || f.server.stderr()).await;
    let mut reviews = AccessReviewClient::new(channel);

    // O = ops: carla reads pods through the group binding.
    let pods = reviews
        .personal_subject_access_review(personal("list", "pods"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        pods.allowed && pods.reason.contains("ops-read-pods"),
        "{pods:?}"
    );
    // system:authenticated is added.
    let configmaps = reviews
        .personal_subject_access_review(personal("get", "configmaps"))
        .await
        .unwrap()
        .into_inner();
    assert!(configmaps.allowed, "{configmaps:?}");
    // O = reviewers: the cluster review privilege.
    let review = reviews
        .subject_access_review(SubjectAccessReviewRequest {
            action: personal("get", "pods").action,
            user: "someone".into(),
            groups: vec!["ops".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(review.allowed, "{review:?}");

    // CN is the user: a certificate for "dan" without groups lacks the privilege, by name.
    let dan = f.ca.leaf(&[], "dan", &[]).pem_pair();
    let mut reviews = AccessReviewClient::new(f.connect(&f.ca.pem, Some(&dan)).await.unwrap());
    let refused = reviews
        .subject_access_review(SubjectAccessReviewRequest {
            action: personal("get", "pods").action,
            user: "someone".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().starts_with("user \"dan\" cannot create"),
        "{refused:?}"
    );
}

/// `/CN=root/CN=eve`, signed by the trusted CA: kube-apiserver (Go's crypto/x509) would take
/// `eve`, a first-match reader `root`. The server takes neither: every call on the connection is
/// UNAUTHENTICATED naming both, a valid bearer token beside it does not stand in for it, and
/// the same CA's single-CN certificate is still the caller.
#[tokio::test]
async fn a_client_certificate_with_two_common_names_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "ops-token,olga,u1,ops\n").unwrap();
    let f = Fixture::start_with(&["--token-auth-file", tokens.to_str().unwrap()]);
    let two =
        f.ca.leaf_with_common_names(&[], &["root", "eve"], &["ops"])
            .pem_pair();
    let channel = f.connect(&f.ca.pem, Some(&two)).await.unwrap();
    crate::support::server::wait_until_serving(&channel, || f.server.stderr()).await;
    let mut reviews = AccessReviewClient::new(channel);

    // O = ops would read pods, whichever CN were the user.
    let refused = reviews
        .personal_subject_access_review(personal("list", "pods"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().contains("names 2 users (`root`, `eve`)")
            && refused.message().contains("exactly one CN"),
        "{refused:?}"
    );

    let mut with_token = tonic::Request::new(personal("list", "pods"));
    with_token
        .metadata_mut()
        .insert("authorization", "Bearer ops-token".parse().unwrap());
    let refused = reviews
        .personal_subject_access_review(with_token)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");

    let one = f.ca.leaf(&[], "eve", &["ops"]).pem_pair();
    let mut reviews = AccessReviewClient::new(f.connect(&f.ca.pem, Some(&one)).await.unwrap());
    let pods = reviews
        .personal_subject_access_review(personal("list", "pods"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        pods.allowed && pods.reason.contains("ops-read-pods"),
        "{pods:?}"
    );
}

#[tokio::test]
async fn no_certificate_or_a_foreign_one_gets_nothing() {
    let f = Fixture::start();
    // TLS without a client certificate: the handshake completes (tokens could still be used),
    // but the caller has no identity.
    let channel = f.connect(&f.ca.pem, None).await.unwrap();
    crate::support::server::wait_until_serving(&channel, || f.server.stderr()).await;
    let mut reviews = AccessReviewClient::new(channel);
    let refused = reviews
        .personal_subject_access_review(personal("get", "pods"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(refused.message().contains("no credentials"), "{refused:?}");

    // A certificate from another CA fails the handshake: no call gets through.
    let stranger = Ca::new("someone else's CA")
        .leaf(&[], "carla", &["reviewers"])
        .pem_pair();
    let result = match f.connect(&f.ca.pem, Some(&stranger)).await {
        Err(error) => Err(error.to_string()),
        Ok(channel) => AccessReviewClient::new(channel)
            .personal_subject_access_review(personal("get", "pods"))
            .await
            .map(|_| ())
            .map_err(|status| status.to_string()),
    };
    assert!(result.is_err(), "a foreign certificate was accepted");

    // Plaintext to the TLS port gets nothing either.
    let plain = Channel::from_shared(f.server.url())
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(channel) = plain {
        let call = AccessReviewClient::new(channel)
            .personal_subject_access_review(personal("get", "pods"))
            .await;
        assert!(call.is_err(), "plaintext was answered: {call:?}");
    }
}

#[tokio::test]
async fn the_server_certificate_is_reloaded_when_its_files_change() {
    let f = Fixture::start();
    let client = f.ca.leaf(&[], "carla", &["reviewers"]).pem_pair();
    let channel = f.connect(&f.ca.pem, Some(&client)).await.unwrap();
    crate::support::server::wait_until_serving(&channel, || f.server.stderr()).await;

    // A new server certificate from a new CA: clients trusting only the new CA cannot connect
    // until the server picks it up.
    let next = Ca::new("next CA");
    let works_with_next = || async {
        match f.connect(&next.pem, Some(&client)).await {
            Ok(channel) => AccessReviewClient::new(channel)
                .personal_subject_access_review(personal("get", "pods"))
                .await
                .is_ok(),
            Err(_) => false,
        }
    };
    assert!(
        !works_with_next().await,
        "the new CA is trusted before any change"
    );
    let (cert, key) = next.leaf(&["localhost"], "authzd", &[]).pem_pair();
    replace(&f.dir.path().join("server.key"), &key);
    replace(&f.dir.path().join("server.crt"), &cert);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !works_with_next().await {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served; stderr:\n{}",
            f.server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The old one is gone for new connections.
    assert!(
        f.connect(&f.ca.pem, Some(&client)).await.is_err() || {
            let channel = f.connect(&f.ca.pem, Some(&client)).await.unwrap();
            AccessReviewClient::new(channel)
                .personal_subject_access_review(personal("get", "pods"))
                .await
                .is_err()
        }
    );
    assert!(f.server.stderr().contains("TLS files reloaded"));
}

#[test]
fn bad_tls_files_stop_the_server() {
    let policy = crate::support::server::sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("server.crt");
    std::fs::write(&cert, "not a certificate\n").unwrap();
    let key = dir.path().join("server.key");
    std::fs::write(&key, "").unwrap();
    let out = crate::support::server::run_bin(
        &[
            "serve".as_ref(),
            "--policy".as_ref(),
            policy.path().as_os_str(),
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--tls-cert-file".as_ref(),
            cert.as_os_str(),
            "--tls-private-key-file".as_ref(),
            key.as_os_str(),
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "bad TLS files: `{}` holds no PEM certificate",
            cert.display()
        )),
        "{stderr}"
    );
    // --client-ca-file alone is a usage error.
    let out = crate::support::server::run_bin(
        &[
            "serve".as_ref(),
            "--policy".as_ref(),
            policy.path().as_os_str(),
            "--client-ca-file".as_ref(),
            cert.as_os_str(),
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--tls-cert-file"), "{stderr}");
}

#[tokio::test]
async fn a_bearer_token_works_over_tls_without_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "ops-token,olga,u1,ops\n").unwrap();
    let f = Fixture::start_with(&["--token-auth-file", tokens.to_str().unwrap()]);
    let channel = f.connect(&f.ca.pem, None).await.unwrap();
    crate::support::server::wait_until_serving(&channel, || f.server.stderr()).await;
    let mut reviews = AccessReviewClient::new(channel);
    let mut request = tonic::Request::new(personal("list", "pods"));
    request
        .metadata_mut()
        .insert("authorization", "Bearer ops-token".parse().unwrap());
    let answer = reviews
        .personal_subject_access_review(request)
        .await
        .unwrap()
        .into_inner();
    assert!(
        answer.allowed && answer.reason.contains("ops-read-pods"),
        "{answer:?}"
    );
    // Without the token (and without a certificate) the same connection gets nothing.
    let refused = reviews
        .personal_subject_access_review(personal("list", "pods"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
}

#[tokio::test]
async fn the_cli_talks_https_with_a_client_certificate() {
    let f = Fixture::start();
    let channel = f.connect(&f.ca.pem, None).await.unwrap();
    crate::support::server::wait_until_serving(&channel, || f.server.stderr()).await;
    let (cert, key) = f.ca.leaf(&[], "root", &["system:masters"]).pem_pair();
    let write = |name: &str, content: &str| {
        let path = f.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (cert, key) = (write("root.crt", &cert), write("root.key", &key));
    let ca = f.dir.path().join("ca.crt").to_str().unwrap().to_string();
    let url = format!("https://localhost:{}", f.server.addr.port());
    let status = |extra: &[&str]| {
        let mut command = std::process::Command::new(crate::support::server::BIN);
        command
            .args(["status", "--server", &url])
            .args(extra)
            .env_remove("AUTHZD_TOKEN");
        crate::support::server::run_with_timeout(command, Duration::from_secs(30))
    };

    let out = status(&[
        "--certificate-authority",
        &ca,
        "--client-certificate",
        &cert,
        "--client-key",
        &key,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("revision"));

    // Without a certificate the server does not know who is asking.
    let out = status(&["--certificate-authority", &ca]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("Unauthenticated: no credentials"),
        "{stderr}"
    );
    // https without a CA is refused before connecting.
    let out = status(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--certificate-authority"), "{stderr}");
}
