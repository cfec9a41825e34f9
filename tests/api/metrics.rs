//! `/metrics` end to end: the real server is scraped over HTTP on its gRPC port, the
//! exposition parses, and the counters move exactly as this test's requests predict. With
//! authentication configured a scrape needs `get` on `/metrics` (401 without credentials, 403
//! without the privilege); without it the page is open, as the tests above scrape it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;

use crate::support::server::{http_get_with, resource_request, sample_policy, Server};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;

/// `GET /metrics` over HTTP/1.1; the parsed samples, `name{labels}` → value.
fn scrape(server: &Server) -> HashMap<String, f64> {
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: authzd\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    parse_exposition(body)
}

/// Prometheus text format: `# HELP`/`# TYPE` comments, then `series value` lines. Every
/// non-comment line must parse.
fn parse_exposition(body: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    for line in body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample line: {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number in {line:?}"));
        samples.insert(series.to_string(), value);
    }
    samples
}

fn get(samples: &HashMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("{series} missing from /metrics"))
}

#[tokio::test]
async fn counters_move_as_the_requests_predict() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let before = scrape(&server);
    assert_eq!(get(&before, "authzd_policy_revision"), 1.0);
    let allow = r#"authzd_decisions_total{api="authorize",decision="allow"}"#;
    let deny = r#"authzd_decisions_total{api="authorize",decision="deny"}"#;
    let no_opinion = r#"authzd_decisions_total{api="authorize",decision="no_opinion"}"#;
    let authorize_requests = r#"authzd_requests_total{route="authorize"}"#;
    assert_eq!(get(&before, allow), 0.0);

    let mut client = AuthorizerClient::new(server.channel().await);
    // alice reads pods (allow), twice: the second answer comes from the cache.
    for _ in 0..2 {
        let answer = client
            .authorize(resource_request("alice", &[], "dev", "get", "pods"))
            .await
            .unwrap()
            .into_inner();
        assert!(answer.allowed);
    }
    // An intern in dev is denied secrets by a deny rule.
    let answer = client
        .authorize(resource_request(
            "ivan",
            &["interns"],
            "dev",
            "get",
            "secrets",
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.allowed);
    // Nobody granted mallory anything.
    let answer = client
        .authorize(resource_request("mallory", &[], "dev", "delete", "nodes"))
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.allowed);

    let after = scrape(&server);
    let moved = |series: &str| get(&after, series) - before.get(series).copied().unwrap_or(0.0);
    assert_eq!(moved(allow), 2.0);
    assert_eq!(moved(deny), 1.0);
    assert_eq!(moved(no_opinion), 1.0);
    assert_eq!(moved(authorize_requests), 4.0);
    assert_eq!(moved("authzd_cache_hits_total"), 1.0);
    assert_eq!(moved("authzd_cache_misses_total"), 3.0);
    assert_eq!(get(&after, "authzd_cache_entries"), 3.0);
    assert_eq!(
        get(
            &after,
            r#"authzd_request_duration_seconds_count{route="authorize"}"#
        ),
        4.0
    );
    // The scrape in flight counts itself.
    assert_eq!(get(&after, "authzd_requests_in_flight"), 1.0);

    // A batch counts each of its decisions under its own API, by outcome.
    let batch = authzd::proto::BatchAuthorizeRequest {
        requests: vec![
            resource_request("alice", &[], "dev", "get", "pods"),
            resource_request("alice", &[], "dev", "get", "pods"),
            resource_request("alice", &[], "dev", "get", "pods"),
            resource_request("ivan", &["interns"], "dev", "get", "secrets"),
            resource_request("mallory", &[], "dev", "delete", "nodes"),
        ],
    };
    let answers = client.batch_authorize(batch).await.unwrap().into_inner();
    assert_eq!(answers.responses.len(), 5);
    let batched = scrape(&server);
    let batch_moved = |decision: &str| {
        let series =
            format!(r#"authzd_decisions_total{{api="batch_authorize",decision="{decision}"}}"#);
        get(&batched, &series) - after.get(&series).copied().unwrap_or(0.0)
    };
    assert_eq!(batch_moved("allow"), 3.0);
    assert_eq!(batch_moved("deny"), 1.0);
    assert_eq!(batch_moved("no_opinion"), 1.0);
    assert_eq!(
        get(&batched, allow),
        get(&after, allow),
        "a batch is not Authorize"
    );

    // A policy change moves the revision and invalidates what it could affect.
    let mut admin = PolicyAdminClient::new(server.channel().await);
    admin
        .delete(authzd::proto::DeleteRequest {
            object: Some(authzd::proto::ObjectRef {
                kind: "ClusterRoleBinding".into(),
                namespace: String::new(),
                name: "read-pods".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let changed = scrape(&server);
    assert_eq!(get(&changed, "authzd_policy_revision"), 2.0);
    assert!(get(&changed, "authzd_cache_invalidations_total") >= 1.0);
    assert_eq!(get(&changed, "authzd_policy_reload_errors_total"), 0.0);
}

/// The subscriber table as `/metrics` shows it, with two real subscribers: the library's
/// cache (confirming every change) and one on the wire that never confirms and probes once.
/// A write waits for the first and, once the second's proof has expired, counts it fenced;
/// the series then say two connected, one behind by the whole revision and without a proof,
/// two confirmations and one fenced; the stalled one gone, one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_table_is_exported() {
    use authzd::caller::{Client, Endpoint, LocalCacheConfig};
    use authzd::proto::InvalidationsRequest;

    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &["--max-staleness", "1s"]).await;
    let before = scrape(&server);
    for series in [
        "authzd_subscribers",
        "authzd_subscribers_connected",
        "authzd_subscribers_behind",
        "authzd_subscribers_max_lag_revisions",
        "authzd_subscribers_without_proof",
        "authzd_subscribers_confirmations_total",
        "authzd_subscribers_fenced_total",
    ] {
        assert_eq!(get(&before, series), 0.0, "{series}");
    }

    let client = Client::connect(&Endpoint::new(server.url()))
        .await
        .unwrap()
        .with_local_cache(LocalCacheConfig::new("metrics-cache"));
    let alice = authzd::request::Request {
        user: authzd::request::UserInfo {
            name: "alice".into(),
            ..Default::default()
        },
        action: authzd::request::Action::Resource(authzd::request::ResourceAttributes {
            namespace: "dev".into(),
            verb: "get".into(),
            resource: "pods".into(),
            ..Default::default()
        }),
    };
    crate::support::wait::eventually(
        std::time::Duration::from_secs(10),
        || "alice answered from the local cache".to_string(),
        || async {
            client
                .authorize(&alice)
                .await
                .unwrap()
                .from_local_cache
                .then_some(())
        },
    )
    .await;

    // Stalled: subscribes, probes once (one proof, then none), confirms nothing.
    let (outgoing, requests) = tokio::sync::mpsc::channel(4);
    for request in [
        InvalidationsRequest {
            subscriber_id: "stalled".into(),
            ..Default::default()
        },
        InvalidationsRequest {
            probe: 1,
            ..Default::default()
        },
    ] {
        outgoing.send(request).await.unwrap();
    }
    let mut events = AuthorizerClient::new(server.channel().await)
        .watch_invalidations(tokio_stream::wrappers::ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    while let Some(event) = events.message().await.unwrap() {
        if matches!(
            event.event,
            Some(authzd::proto::invalidation_event::Event::Heartbeat(_))
        ) {
            break;
        }
    }

    let mut admin = PolicyAdminClient::new(server.channel().await);
    let deleted = admin
        .delete(authzd::proto::DeleteRequest {
            object: Some(authzd::proto::ObjectRef {
                kind: "ClusterRoleBinding".into(),
                namespace: String::new(),
                name: "read-pods".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.revision, 2);
    assert_eq!(
        (deleted.subscribers_confirmed, deleted.subscribers_fenced),
        (1, 1),
        "{deleted:?}"
    );
    let table = scrape(&server);
    for (series, value) in [
        ("authzd_subscribers", 2.0),
        ("authzd_subscribers_connected", 2.0),
        ("authzd_subscribers_behind", 1.0),
        // The stalled one confirmed nothing: the whole revision behind.
        ("authzd_subscribers_max_lag_revisions", 2.0),
        ("authzd_subscribers_without_proof", 1.0),
        // The cache's: the first policy, then the delete.
        ("authzd_subscribers_confirmations_total", 2.0),
        ("authzd_subscribers_fenced_total", 1.0),
    ] {
        assert_eq!(get(&table, series), value, "{series}");
    }

    drop((outgoing, events));
    crate::support::wait::eventually(
        std::time::Duration::from_secs(10),
        || "the stalled subscriber gone from /metrics".to_string(),
        || async {
            let left = scrape(&server);
            (get(&left, "authzd_subscribers") == 1.0).then_some(left)
        },
    )
    .await;
    let left = scrape(&server);
    assert_eq!(get(&left, "authzd_subscribers_connected"), 1.0);
    assert_eq!(get(&left, "authzd_subscribers_behind"), 0.0);
    assert_eq!(get(&left, "authzd_subscribers_max_lag_revisions"), 0.0);
    assert_eq!(get(&left, "authzd_subscribers_without_proof"), 0.0);
}

/// Who may scrape: `prometheus` (a ClusterRole with `get` on the non-resource URL `/metrics`,
/// as Kubernetes' monitoring roles grant it) and nobody else.
const METRICS_READER: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: metrics-reader}
rules:
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-reads-metrics}
subjects: [{kind: User, name: prometheus, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: ClusterRole, name: metrics-reader, apiGroup: rbac.authorization.k8s.io}
";

/// With `--token-auth-file`, `/metrics` is a call like the reviews: no credentials is a 401
/// `Status`, a bad token too, a token whose user lacks `get /metrics` a 403 naming it, and
/// `prometheus`'s token the page. The probes answer without credentials all along.
#[tokio::test]
async fn with_authentication_a_scrape_needs_get_on_metrics() {
    let policy = sample_policy();
    std::fs::write(policy.path().join("metrics.yaml"), METRICS_READER).unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let tokens = secrets.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "scrape-token,prometheus,u1\nalice-token,alice,u2\n",
    )
    .unwrap();
    let server = Server::start_serving(
        policy.path(),
        &["--token-auth-file", tokens.to_str().unwrap()],
    )
    .await;
    let scrape_as = |headers: &'static [(&'static str, &'static str)]| {
        http_get_with(server.addr, "/metrics", headers)
    };
    let status = |body: &str| -> serde_json::Value {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not a Status ({e}): {body}"))
    };

    let (code, body) = scrape_as(&[]).await;
    assert_eq!(code, 401, "{body}");
    let refusal = status(&body);
    assert_eq!(
        (&refusal["kind"], &refusal["reason"]),
        (&"Status".into(), &"Unauthorized".into()),
        "{body}"
    );
    assert!(!body.contains("authzd_"), "no figure leaks: {body}");

    let (code, body) = scrape_as(&[("Authorization", "Bearer not-a-token")]).await;
    assert_eq!(code, 401, "{body}");

    let (code, body) = scrape_as(&[("Authorization", "Bearer alice-token")]).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        status(&body)["message"],
        "user \"alice\" cannot get path \"/metrics\"",
        "{body}"
    );

    let (code, body) = scrape_as(&[("Authorization", "Bearer scrape-token")]).await;
    assert_eq!(code, 200, "{body}");
    let samples = parse_exposition(&body);
    assert_eq!(get(&samples, "authzd_policy_revision"), 1.0);

    for probe in ["/healthz", "/readyz"] {
        let (code, body) = http_get_with(server.addr, probe, &[]).await;
        assert_eq!((code, body.as_str()), (200, "ok"), "{probe}");
    }
}
