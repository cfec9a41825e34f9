//! `envoy.service.auth.v3.Authorization/Check` against the real server binary, with the tonic
//! client envoy-types generates (what Envoy's ext_authz filter sends, field for field).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::HashMap;

use crate::support::server::{write_policy, Server};
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use tonic::transport::Channel;

/// The sample policy plus non-resource grants: `/hello` for alice and group `greeters`, and
/// a user named by a SPIFFE ID (the peer principal mode).
const NON_RESOURCE: &str = include_str!("../fixtures/envoy-hello.yaml");

fn policy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_policy(dir.path());
    std::fs::write(dir.path().join("hello.yaml"), NON_RESOURCE).unwrap();
    dir
}

/// What Envoy sends for `METHOD PATH` with `headers` (lower-case keys, repeated headers
/// comma-joined, as in Envoy's default header map).
fn check_request(method: &str, path: &str, headers: &[(&str, &str)]) -> CheckRequest {
    let mut map: HashMap<String, String> = HashMap::new();
    for (key, value) in headers {
        map.entry(key.to_string())
            .and_modify(|v| {
                v.push(',');
                v.push_str(value)
            })
            .or_insert_with(|| value.to_string());
    }
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: method.into(),
                    path: path.into(),
                    host: "example.test".into(),
                    headers: map,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

async fn client(server: &Server) -> AuthorizationClient<Channel> {
    AuthorizationClient::new(server.channel().await)
}

async fn check(client: &mut AuthorizationClient<Channel>, request: CheckRequest) -> CheckResponse {
    client.check(request).await.expect("Check").into_inner()
}

/// The gRPC code Envoy reads (0 = OK, 7 = PERMISSION_DENIED, 16 = UNAUTHENTICATED, 3 = INVALID).
fn code(response: &CheckResponse) -> i32 {
    response.status.as_ref().expect("status set").code
}

fn header<'a>(
    headers: &'a [envoy_types::ext_authz::v3::pb::HeaderValueOption],
    key: &str,
) -> Option<&'a str> {
    headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}

/// `(http status, reason header, body)` of a refusal; panics on an allow.
fn denial(response: &CheckResponse) -> (i32, String, String) {
    match &response.http_response {
        Some(HttpResponse::DeniedResponse(denied)) => (
            denied.status.as_ref().expect("http status").code,
            header(&denied.headers, "x-authzd-reason")
                .expect("reason header")
                .to_string(),
            denied.body.clone(),
        ),
        other => panic!("expected a denied response, got {other:?}"),
    }
}

fn assert_allowed(response: &CheckResponse) {
    assert_eq!(code(response), 0, "{response:?}");
    assert!(
        matches!(response.http_response, Some(HttpResponse::OkResponse(_))),
        "{response:?}"
    );
}

#[tokio::test]
async fn allowed_and_denied_non_resource_requests() {
    let policy = policy();
    let server = Server::start_serving(policy.path(), &["--envoy-allowed-by-header"]).await;
    let mut client = client(&server).await;

    // The query string is not part of the path the policy sees.
    let allowed = check(
        &mut client,
        check_request("GET", "/hello/world?lang=en", &[("x-remote-user", "alice")]),
    )
    .await;
    assert_allowed(&allowed);
    let Some(HttpResponse::OkResponse(ok)) = &allowed.http_response else {
        unreachable!()
    };
    let allowed_by = header(&ok.headers, "x-authzd-allowed-by").expect("allowed-by header");
    assert!(
        allowed_by.contains("ClusterRoleBinding/hello-readers"),
        "{allowed_by}"
    );

    let denied = check(
        &mut client,
        check_request("GET", "/hello", &[("x-remote-user", "bob")]),
    )
    .await;
    assert_eq!(code(&denied), 7, "{denied:?}");
    let (status, reason, body) = denial(&denied);
    assert_eq!(status, 403);
    assert!(
        reason.starts_with(r#"user "bob" cannot get path "/hello""#),
        "{reason}"
    );
    assert_eq!(body.trim_end(), reason);

    // The verb is the lower-case method: alice may only get.
    let posted = check(
        &mut client,
        check_request("POST", "/hello", &[("x-remote-user", "alice")]),
    )
    .await;
    let (status, reason, _) = denial(&posted);
    assert_eq!(status, 403);
    assert!(reason.contains(r#"cannot post path "/hello""#), "{reason}");
}

#[tokio::test]
async fn groups_come_repeated_or_comma_separated() {
    let policy = policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = client(&server).await;

    for headers in [
        vec![
            ("x-remote-user", "zed"),
            ("x-remote-group", "staff, greeters"),
        ],
        vec![
            ("x-remote-user", "zed"),
            ("x-remote-group", "staff"),
            ("x-remote-group", "greeters"),
        ],
        // A group alone is a subject.
        vec![("x-remote-group", "greeters")],
    ] {
        let response = check(&mut client, check_request("GET", "/hello", &headers)).await;
        assert_allowed(&response);
    }

    // Envoy's raw header list (`encode_raw_headers: true`) keeps repeated headers apart.
    let mut raw = check_request("GET", "/hello", &[]);
    let http = raw
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
        .unwrap();
    http.header_map = Some(HeaderMap {
        headers: [
            ("x-remote-user", "zed"),
            ("x-remote-group", "staff"),
            ("x-remote-group", "greeters"),
        ]
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.into(),
            raw_value: value.as_bytes().to_vec(),
            ..Default::default()
        })
        .collect(),
    });
    assert_allowed(&check(&mut client, raw).await);

    let staff_only = check(
        &mut client,
        check_request(
            "GET",
            "/hello",
            &[("x-remote-user", "zed"), ("x-remote-group", "staff")],
        ),
    )
    .await;
    assert_eq!(denial(&staff_only).0, 403);
}

#[tokio::test]
async fn no_subject_is_unauthenticated_and_bad_input_is_400() {
    let policy = policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = client(&server).await;

    let anonymous = check(&mut client, check_request("GET", "/hello", &[])).await;
    assert_eq!(code(&anonymous), 16, "{anonymous:?}");
    let (status, reason, _) = denial(&anonymous);
    assert_eq!(status, 401);
    assert!(reason.contains("no authenticated subject"), "{reason}");
    assert!(reason.contains("x-remote-user"), "{reason}");

    let empty = check(&mut client, CheckRequest::default()).await;
    assert_eq!(code(&empty), 3, "{empty:?}");
    let (status, reason, _) = denial(&empty);
    assert_eq!(status, 400);
    assert!(reason.contains("no HTTP request attributes"), "{reason}");

    let long_user = "u".repeat(100_000);
    let oversized = check(
        &mut client,
        check_request("GET", "/hello", &[("x-remote-user", long_user.as_str())]),
    )
    .await;
    assert_eq!(code(&oversized), 3);
    assert_eq!(denial(&oversized).0, 400);
}

#[tokio::test]
async fn header_names_are_configurable() {
    let policy = policy();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--envoy-user-header",
            "X-Auth-Request-User",
            "--envoy-group-header",
            "x-auth-request-groups",
        ],
    )
    .await;
    let mut client = client(&server).await;

    let configured = check(
        &mut client,
        check_request("GET", "/hello", &[("x-auth-request-user", "alice")]),
    )
    .await;
    assert_allowed(&configured);
    let by_group = check(
        &mut client,
        check_request("GET", "/hello", &[("x-auth-request-groups", "greeters")]),
    )
    .await;
    assert_allowed(&by_group);

    // The defaults are no longer read.
    let default_header = check(
        &mut client,
        check_request("GET", "/hello", &[("x-remote-user", "alice")]),
    )
    .await;
    assert_eq!(code(&default_header), 16);
    assert!(denial(&default_header).1.contains("x-auth-request-user"));
}

#[tokio::test]
async fn peer_principal_is_the_subject_when_configured() {
    let policy = policy();
    let server =
        Server::start_serving(policy.path(), &["--envoy-subject-from", "peer-principal"]).await;
    let mut client = client(&server).await;

    let mut from_peer = check_request("GET", "/hello", &[("x-remote-user", "bob")]);
    from_peer.attributes.as_mut().unwrap().source = Some(Peer {
        principal: "spiffe://cluster.local/ns/web/sa/frontend".into(),
        ..Default::default()
    });
    assert_allowed(&check(&mut client, from_peer).await);

    // Headers are not read in this mode: alice's header is no subject at all.
    let header_only = check(
        &mut client,
        check_request("GET", "/hello", &[("x-remote-user", "alice")]),
    )
    .await;
    assert_eq!(code(&header_only), 16);
    assert!(denial(&header_only).1.contains("peer principal"));
}

#[tokio::test]
async fn path_templates_map_to_resource_attributes() {
    let policy = policy();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--envoy-path-template",
            "/api/v1/namespaces/{namespace}/{resource}/{name}",
            "--envoy-path-template",
            "/api/v1/namespaces/{namespace}/{resource}",
            "--envoy-path-template",
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}",
        ],
    )
    .await;
    let mut client = client(&server).await;
    let alice = [("x-remote-user", "alice")];

    // pod-reader: get, list, watch on pods, cluster-wide.
    for path in [
        "/api/v1/namespaces/dev/pods/web-1",
        "/api/v1/namespaces/dev/pods",
        "/api/v1/namespaces/dev/pods?watch=true",
    ] {
        assert_allowed(&check(&mut client, check_request("GET", path, &alice)).await);
    }
    for (method, path, says) in [
        (
            "DELETE",
            "/api/v1/namespaces/dev/pods/web-1",
            r#"cannot delete resource "pods""#,
        ),
        (
            "POST",
            "/api/v1/namespaces/dev/pods",
            r#"cannot create resource "pods""#,
        ),
        (
            "GET",
            "/api/v1/namespaces/dev/secrets/db",
            r#"cannot get resource "secrets""#,
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/dev/deployments/web",
            r#"cannot get resource "deployments" in API group "apps" in namespace "dev""#,
        ),
    ] {
        let response = check(&mut client, check_request(method, path, &alice)).await;
        let (status, reason, _) = denial(&response);
        assert_eq!(status, 403);
        assert!(reason.contains(says), "{method} {path}: {reason}");
    }

    // dev-editor (`*` on pods and secrets in dev) for devs; interns are denied secrets by a
    // deny rule even though they are devs; DELETE without a name is deletecollection.
    let dev = [("x-remote-user", "dan"), ("x-remote-group", "devs")];
    assert_allowed(
        &check(
            &mut client,
            check_request("DELETE", "/api/v1/namespaces/dev/secrets", &dev),
        )
        .await,
    );
    let intern = [("x-remote-user", "ian"), ("x-remote-group", "devs,interns")];
    let denied = check(
        &mut client,
        check_request("DELETE", "/api/v1/namespaces/dev/secrets", &intern),
    )
    .await;
    let (status, reason, _) = denial(&denied);
    assert_eq!(status, 403);
    assert!(
        reason.contains(r#"cannot deletecollection resource "secrets""#),
        "{reason}"
    );
    // Outside the namespace devs have nothing.
    let elsewhere = check(
        &mut client,
        check_request("DELETE", "/api/v1/namespaces/prod/secrets", &dev),
    )
    .await;
    assert_eq!(denial(&elsewhere).0, 403);

    // A path no template matches stays a non-resource request.
    assert_allowed(&check(&mut client, check_request("GET", "/hello", &alice)).await);
}

#[tokio::test]
async fn bad_templates_stop_the_server_with_a_usage_error() {
    let policy = policy();
    let output = crate::support::server::run_bin(
        &[
            "serve".as_ref(),
            "--policy".as_ref(),
            policy.path().as_os_str(),
            "--envoy-path-template".as_ref(),
            "/api/{kind}".as_ref(),
        ],
        std::time::Duration::from_secs(30),
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown placeholder `{kind}`"), "{stderr}");
}

/// `check_request` with `body` as Envoy's `with_request_body` sends it: as text in `body`, or
/// as bytes in `raw_body` (`pack_as_bytes`).
fn with_body(mut request: CheckRequest, body: &str, as_bytes: bool) -> CheckRequest {
    let http = request
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
        .unwrap();
    if as_bytes {
        http.raw_body = body.as_bytes().to_vec();
    } else {
        http.body = body.into();
    }
    request
}

#[tokio::test]
async fn bodies_are_the_object_with_the_flag_bounded_and_whole() {
    let policy = policy();
    let server = Server::start_serving(
        policy.path(),
        &["--envoy-body-as-object", "--max-content-bytes", "64"],
    )
    .await;
    let mut envoy = client(&server).await;
    // The super-group: allowed whatever it asks, so a refusal can only be the body's.
    let admin = [
        ("x-remote-user", "root"),
        ("x-remote-group", "system:masters"),
    ];
    let pod = r#"{"kind":"Pod","metadata":{"name":"web"}}"#;

    // Within the bound, as text or bytes: decided as without a body (no rule reads it).
    for method in ["POST", "PUT", "PATCH"] {
        for as_bytes in [false, true] {
            let request = with_body(check_request(method, "/objects", &admin), pod, as_bytes);
            assert_allowed(&check(&mut envoy, request).await);
        }
    }

    // Over --max-content-bytes: refused (400), not decided, naming where the body was.
    let large = format!(r#"{{"data":"{}"}}"#, "x".repeat(64));
    for (as_bytes, field) in [
        (false, "attributes.request.http.body"),
        (true, "attributes.request.http.raw_body"),
    ] {
        let request = with_body(check_request("PUT", "/objects", &admin), &large, as_bytes);
        let refused = check(&mut envoy, request).await;
        assert_eq!(code(&refused), 3, "{refused:?}");
        let (status, reason, _) = denial(&refused);
        assert_eq!(status, 400);
        assert_eq!(
            reason,
            format!("{field}: is {} bytes long; the limit is 64", large.len())
        );
    }

    // A body Envoy cut short (allow_partial_message) is never read as the whole object.
    let mut partial_headers = admin.to_vec();
    partial_headers.push(("x-envoy-auth-partial-body", "true"));
    let request = with_body(
        check_request("POST", "/objects", &partial_headers),
        pod,
        false,
    );
    let refused = check(&mut envoy, request).await;
    assert_eq!(code(&refused), 3, "{refused:?}");
    let (status, reason, _) = denial(&refused);
    assert_eq!(status, 400);
    assert!(reason.contains("only part of the body"), "{reason}");

    // Other methods' bodies are not objects: neither bounded nor read.
    for method in ["GET", "DELETE"] {
        let request = with_body(check_request(method, "/objects", &admin), &large, false);
        assert_allowed(&check(&mut envoy, request).await);
    }

    // Without the flag, no body is read.
    let plain =
        Server::start_serving(policy.path(), &["--max-content-bytes", "64", "--read-only"]).await;
    let mut plain_client = client(&plain).await;
    let request = with_body(check_request("POST", "/objects", &admin), &large, false);
    assert_allowed(&check(&mut plain_client, request).await);
}
