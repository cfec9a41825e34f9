//! What the server writes down, when the file refuses it: the audit log and the decision
//! records on `/dev/full` (every write fails with ENOSPC, as on a full disk), on a real server
//! under real requests. Every request is still answered at once; every entry and record lost
//! is counted (PolicyAdmin.Status `audit_dropped` and `audit_write_failed`,
//! `authzd_audit_dropped_total{reason}`, `authzd_decision_records_dropped_total{reason}`),
//! none is counted written, a warning is logged each time the audit log's loss reaches a power
//! of two, and nothing panics (docs/records.md §1, docs/security.md §5).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::server::{
    authorize_concurrently, metric, resource_request, sample_policy, Server,
};
use crate::support::wait::eventually;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::StatusRequest;
use tonic::transport::Channel;

/// Requests sent, each one decision (so one audit entry, one decision record).
const REQUESTS: usize = 300;

/// `REQUESTS` Authorize calls from 6 clients at once; all must be answered within a minute,
/// whatever the disk does.
async fn authorize_all(channel: &Channel) {
    assert!(
        authorize_concurrently(channel, REQUESTS, 6, 40, Duration::from_secs(60)).await,
        "requests waited on a full disk"
    );
}

/// The series' values, in order (`None` for a series not exposed).
async fn metrics(addr: SocketAddr, series: &[&str]) -> Vec<Option<f64>> {
    let mut values = Vec::new();
    for name in series {
        values.push(metric(addr, name).await);
    }
    values
}

/// The audit log on a full disk, the decision records written into it: each of the requests
/// is one audit entry and one record the file refuses. The Status counts and the metrics say
/// every one was lost and none written, the records apart from the audit entries; the warning
/// comes once per power of two; requests never wait.
#[tokio::test]
async fn audit_entries_the_disk_refuses_are_counted_and_warned_of() {
    let policy = sample_policy();
    let server = Server::start_serving(
        policy.path(),
        &["--audit-log", "/dev/full", "--decision-records", "audit"],
    )
    .await;
    let channel = server.channel().await;
    authorize_all(&channel).await;

    let admin = PolicyAdminClient::new(channel);
    let n = REQUESTS as u64;
    let status = eventually(
        Duration::from_secs(20),
        || format!("audit_dropped = {REQUESTS}; stderr:\n{}", server.stderr()),
        || {
            let mut admin = admin.clone();
            async move {
                let status = admin.status(StatusRequest {}).await.unwrap().into_inner();
                (status.audit_dropped >= n).then_some(status)
            }
        },
    )
    .await;
    assert_eq!(
        (status.audit_dropped, status.audit_write_failed),
        (n, n),
        "every entry lost to the disk, counted once"
    );
    let figures = metrics(
        server.addr,
        &[
            "authzd_audit_written_total",
            r#"authzd_audit_dropped_total{reason="queue_full"}"#,
            r#"authzd_audit_dropped_total{reason="write_failed"}"#,
            "authzd_decision_records_total",
            "authzd_decision_records_written_total",
            r#"authzd_decision_records_dropped_total{reason="write_failed"}"#,
        ],
    )
    .await;
    let (n, zero) = (Some(REQUESTS as f64), Some(0.0));
    assert_eq!(figures, [zero, zero, n, n, zero, n]);

    // Still counting, not stuck: more requests, more losses.
    let more = resource_request("alice", &[], "dev", "get", "pods");
    AuthorizerClient::new(server.channel().await)
        .authorize(more)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        || "one more entry counted".into(),
        || {
            let mut admin = admin.clone();
            async move {
                let status = admin.status(StatusRequest {}).await.unwrap().into_inner();
                (status.audit_dropped == REQUESTS as u64 + 1).then_some(())
            }
        },
    )
    .await;

    // A warning as the count reaches a power of two (one for a burst that passes several):
    // each names a count past a new power of two, and the last one reached, 256, is named.
    let log = server.stderr();
    let warned: Vec<u64> = log
        .lines()
        .filter(|line| line.contains("audit entries lost"))
        .map(|line| {
            let (_, after) = line.split_once("lost=").unwrap();
            after.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    let powers: Vec<u32> = warned.iter().map(|lost| lost.ilog2()).collect();
    assert!(
        !warned.is_empty() && powers.windows(2).all(|w| w[0] < w[1]),
        "one warning per power of two: {warned:?}\n{log}"
    );
    assert_eq!(powers.last(), Some(&8), "256 reached: {warned:?}");
    assert!(!log.contains("panicked"), "{log}");
    server.stop_gracefully().await;
}

/// Decision records into a file on a full disk: none is counted written, every one is
/// counted `write_failed`, and the requests never wait.
#[tokio::test]
async fn decision_records_the_disk_refuses_are_never_counted_written() {
    let policy = sample_policy();
    let server =
        Server::start_serving(policy.path(), &["--decision-records", "file:/dev/full"]).await;
    let channel = server.channel().await;
    authorize_all(&channel).await;

    let lost = eventually(
        Duration::from_secs(20),
        || format!("{REQUESTS} records lost; stderr:\n{}", server.stderr()),
        || async {
            let lost = metric(
                server.addr,
                r#"authzd_decision_records_dropped_total{reason="write_failed"}"#,
            )
            .await?;
            (lost >= REQUESTS as f64).then_some(lost)
        },
    )
    .await;
    assert_eq!(lost, REQUESTS as f64);
    let figures = metrics(
        server.addr,
        &[
            "authzd_decision_records_total",
            "authzd_decision_records_written_total",
            r#"authzd_decision_records_dropped_total{reason="queue_full"}"#,
        ],
    )
    .await;
    assert_eq!(figures, [Some(REQUESTS as f64), Some(0.0), Some(0.0)]);
    let log = server.stderr();
    assert!(!log.contains("panicked"), "{log}");
    server.stop_gracefully().await;
}
