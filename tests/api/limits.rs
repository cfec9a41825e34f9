//! Overload protection and the audit log, against the real `authzd` binary:
//!
//! * with `--max-concurrent-requests 2` and two slow requests in flight (each waiting for a
//!   `min_revision` the server never reaches), a third is refused at once with
//!   `RESOURCE_EXHAUSTED` naming the flag (while health checks still answer), and admitted
//!   again once the slow ones end;
//! * open Watch streams do not use up request slots;
//! * `--request-timeout` abandons a slow request with `DEADLINE_EXCEEDED`, and cuts off a
//!   client that sends its headers but never its request, freeing the slot;
//! * `--max-watches` bounds open Watch streams, and a closed stream gives its slot back;
//! * request headers over `--http2-max-header-list-size` are refused;
//! * every audit entry is either written or counted in Status `audit_dropped`, and dropping
//!   never fails a request;
//! * `--audit-log` records a review and a policy write (applied and refused) with their
//!   caller, request, decision and revision; Status reports no drops.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::support::server::{resource_request, sample_policy, Server, POD_READER};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{
    ApplyRequest, Decision, DeleteRequest, ObjectRef, StatusRequest, WatchRequest,
};
use tonic::Code;

/// A request that waits (up to `--max-revision-wait`) for a revision the server never reaches.
fn slow_request() -> authzd::proto::AuthorizeRequest {
    let mut request = resource_request("alice", &[], "dev", "get", "pods");
    request.min_revision = 1_000_000;
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_request_is_refused_at_once_while_the_limit_is_in_use() {
    let policy = sample_policy();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--max-concurrent-requests",
            "2",
            "--max-revision-wait",
            "4s",
        ],
    )
    .await;
    let channel = server.channel().await;

    let slow: Vec<_> = (0..2)
        .map(|_| {
            let mut client = AuthorizerClient::new(channel.clone());
            tokio::spawn(async move { client.authorize(slow_request()).await })
        })
        .collect();
    // Both slow requests are in flight once the server has had a moment to admit them; the
    // refusal below is asserted by its code, so an early probe only retries.
    let mut client = AuthorizerClient::new(channel.clone());
    let deadline = Instant::now() + Duration::from_secs(3);
    let refusal = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = client
            .authorize(resource_request("alice", &[], "dev", "get", "pods"))
            .await;
        match answer {
            Err(status) => break status,
            Ok(_) if Instant::now() < deadline => continue,
            Ok(_) => panic!("the third request was admitted while two slow ones were in flight"),
        }
    };
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    assert!(
        refusal.message().contains("--max-concurrent-requests"),
        "{refusal:?}"
    );
    assert!(
        slow.iter().all(|task| !task.is_finished()),
        "the refusal came while both slow requests were still in flight"
    );
    // Health checks are never shed: a busy server is still alive.
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // The slow ones end with their own answer (revision not reached), freeing the slots.
    for task in slow {
        let status = task.await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    }
    let answer = client
        .authorize(resource_request("alice", &[], "dev", "get", "pods"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.decision, Decision::Allow as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_watch_streams_do_not_hold_request_slots() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &["--max-concurrent-requests", "2"]).await;
    let channel = server.channel().await;
    let mut streams = Vec::new();
    for _ in 0..4 {
        let stream = PolicyAdminClient::new(channel.clone())
            .watch(WatchRequest { from_revision: 0 })
            .await
            .unwrap()
            .into_inner();
        streams.push(stream);
    }
    let mut client = AuthorizerClient::new(channel.clone());
    for _ in 0..5 {
        let answer = client
            .authorize(resource_request("alice", &[], "dev", "get", "pods"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.decision, Decision::Allow as i32);
    }
    drop(streams);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_have_their_own_limit() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &["--max-watches", "2"]).await;
    let channel = server.channel().await;
    let mut admin = PolicyAdminClient::new(channel.clone());
    let first = admin
        .watch(WatchRequest { from_revision: 0 })
        .await
        .unwrap();
    let second = admin
        .watch(WatchRequest { from_revision: 0 })
        .await
        .unwrap();
    let refused = admin
        .watch(WatchRequest { from_revision: 0 })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("--max-watches"), "{refused:?}");
    // A stream that ends gives its slot back (the server notices the reset at once, but
    // asynchronously: retry briefly).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match admin.watch(WatchRequest { from_revision: 0 }).await {
            Ok(_third) => break,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    Instant::now() < deadline,
                    "the closed stream's slot never came back"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_timeout_is_abandoned() {
    let policy = sample_policy();
    let server = Server::start_serving(
        policy.path(),
        &["--request-timeout", "300ms", "--max-revision-wait", "20s"],
    )
    .await;
    let mut client = AuthorizerClient::new(server.channel().await);
    let status = client.authorize(slow_request()).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("--request-timeout"), "{status:?}");
    // Fast requests are unaffected.
    let answer = client
        .authorize(resource_request("alice", &[], "dev", "get", "pods"))
        .await
        .unwrap();
    assert_eq!(answer.into_inner().decision, Decision::Allow as i32);
}

/// The audit log's lines, once `count` of them are there (the writer is asynchronous).
async fn audit_lines(path: &std::path::Path, count: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("each audit line is JSON"))
            .collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "audit log has {} of {count} lines:\n{text}",
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_reviews_and_writes() {
    let policy = sample_policy();
    let audit = tempfile::tempdir().unwrap();
    let path = audit.path().join("audit.jsonl");
    let server =
        Server::start_serving(policy.path(), &["--audit-log", path.to_str().unwrap()]).await;
    let channel = server.channel().await;

    let answer = AuthorizerClient::new(channel.clone())
        .authorize(resource_request(
            "mallory",
            &["devs"],
            "dev",
            "delete",
            "secrets",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.decision, Decision::Allow as i32);

    let mut admin = PolicyAdminClient::new(channel.clone());
    let applied = admin
        .apply(ApplyRequest {
            manifest: POD_READER.replace("pod-reader", "audited-reader"),
            dry_run: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let refused = admin
        .delete(DeleteRequest {
            object: Some(ObjectRef {
                kind: "ClusterRole".into(),
                namespace: String::new(),
                name: "no-such-role".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::NotFound);

    let lines = audit_lines(&path, 3).await;
    assert_eq!(lines.len(), 3, "{lines:#?}");

    let review = &lines[0];
    assert_eq!(review["rpc"], "Authorize");
    assert_eq!(review["caller"]["user"], "system:admin");
    assert_eq!(review["caller"]["groups"][0], "system:masters");
    assert_eq!(review["request"]["user"]["name"], "mallory");
    assert_eq!(review["request"]["user"]["groups"][0], "devs");
    assert_eq!(review["request"]["action"]["verb"], "delete");
    assert_eq!(review["request"]["action"]["resource"], "secrets");
    assert_eq!(review["decision"]["decision"], "ALLOW");
    assert_eq!(review["revision"], answer.revision);
    assert!(review["time"].as_str().unwrap().ends_with('Z'));

    let write = &lines[1];
    assert_eq!(write["rpc"], "Apply");
    assert_eq!(write["caller"]["user"], "system:admin");
    assert!(write["request"]["manifest"]
        .as_str()
        .unwrap()
        .contains("audited-reader"));
    assert_eq!(
        write["result"]["applied"][0],
        "ClusterRole `audited-reader`"
    );
    assert_eq!(write["revision"], applied.revision);

    let refusal = &lines[2];
    assert_eq!(refusal["rpc"], "Delete");
    assert_eq!(refusal["request"]["name"], "no-such-role");
    assert!(
        refusal["error"].as_str().unwrap().starts_with("NotFound"),
        "{refusal}"
    );

    let status = admin.status(StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.audit_dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_sends_its_request_is_cut_off_and_frees_its_slot() {
    let policy = sample_policy();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--max-concurrent-requests",
            "1",
            "--request-timeout",
            "500ms",
        ],
    )
    .await;
    let channel = server.channel().await;
    // Headers sent, then nothing: the request body never comes (a slowloris client).
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let never = tokio_stream::pending::<authzd::proto::AuthorizeRequest>();
    let status = tokio::time::timeout(
        Duration::from_secs(30),
        grpc.client_streaming(
            tonic::Request::new(never),
            tonic::codegen::http::uri::PathAndQuery::from_static("/authz.v1.Authorizer/Authorize"),
            tonic_prost::ProstCodec::<
                authzd::proto::AuthorizeRequest,
                authzd::proto::AuthorizeResponse,
            >::default(),
        ),
    )
    .await
    .expect("the server held the silent client past its request timeout")
    .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // Its one slot is free again.
    let answer = AuthorizerClient::new(channel)
        .authorize(resource_request("alice", &[], "dev", "get", "pods"))
        .await
        .unwrap();
    assert_eq!(answer.into_inner().decision, Decision::Allow as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_headers_are_refused_and_the_server_carries_on() {
    let policy = sample_policy();
    let server =
        Server::start_serving(policy.path(), &["--http2-max-header-list-size", "16384"]).await;
    let ask = |metadata_bytes: usize| {
        let url = server.url();
        async move {
            // A fresh connection each time: a refused header block may cost the connection.
            let channel = tonic::transport::Channel::from_shared(url)
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut request =
                tonic::Request::new(resource_request("alice", &[], "dev", "get", "pods"));
            request
                .metadata_mut()
                .insert("x-padding", "p".repeat(metadata_bytes).parse().unwrap());
            AuthorizerClient::new(channel).authorize(request).await
        }
    };
    let refused = ask(64 * 1024).await.unwrap_err();
    assert_ne!(refused.code(), Code::Ok);
    println!("64 KiB of metadata: {refused:?}");
    let answer = ask(4 * 1024).await.unwrap().into_inner();
    assert_eq!(answer.decision, Decision::Allow as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_audit_entry_is_either_written_or_counted_as_dropped() {
    let policy = sample_policy();
    let audit = tempfile::tempdir().unwrap();
    let path = audit.path().join("audit.jsonl");
    let server = Server::start_serving(
        policy.path(),
        &["--audit-log", path.to_str().unwrap(), "--audit-queue", "1"],
    )
    .await;
    let channel = server.channel().await;
    // One batch: 1000 entries queued back to back by one handler, into a queue of one.
    let batch = authzd::proto::BatchAuthorizeRequest {
        requests: (0..1000)
            .map(|i| resource_request(&format!("user{i}"), &[], "dev", "get", "pods"))
            .collect(),
    };
    let answers = AuthorizerClient::new(channel.clone())
        .batch_authorize(batch)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answers.responses.len(),
        1000,
        "dropping never fails a request"
    );

    let mut admin = PolicyAdminClient::new(channel);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (written, dropped) = loop {
        let dropped = admin
            .status(StatusRequest {})
            .await
            .unwrap()
            .into_inner()
            .audit_dropped;
        let written = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .count() as u64;
        if written + dropped >= 1000 || Instant::now() > deadline {
            break (written, dropped);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("audit queue of 1, 1000 entries: {written} written, {dropped} dropped");
    assert_eq!(written + dropped, 1000);
}

/// Whether the server closed `stream` (EOF or reset) within `within`, without us sending
/// anything.
async fn closed_by_server(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_closed_at_once_and_slots_come_back() {
    let policy = sample_policy();
    // Started without waiting for SERVING: a readiness probe would hold a connection the
    // server notices closed only later, and the limit counts exactly the three below.
    let server = Server::start(policy.path(), &["--max-connections", "2"]);
    let mut first = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    assert!(
        closed_by_server(&mut third, Duration::from_secs(5)).await,
        "a third connection must be closed at once with --max-connections 2"
    );
    // The two within the limit are held open (idle, but not refused).
    assert!(!closed_by_server(&mut first, Duration::from_millis(300)).await);
    assert!(!closed_by_server(&mut second, Duration::from_millis(300)).await);
    drop(first);
    drop(second);
    // Their slots come back: a real client is served again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let attempt = async {
            let mut client = AuthorizerClient::new(server.channel().await);
            client
                .authorize(resource_request("alice", &[], "dev", "get", "pods"))
                .await
        };
        match tokio::time::timeout(Duration::from_secs(2), attempt).await {
            Ok(Ok(answer)) => {
                assert!(answer.into_inner().allowed);
                break;
            }
            _ if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("the freed slots were not reused: {other:?}"),
        }
    }
}
