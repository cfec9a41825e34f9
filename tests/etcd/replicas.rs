//! Replicas on etcd (docs/etcd.md §11) with the real thing: a 3-member etcd cluster on loopback (data
//! on tmpfs) and three real authzd replicas sharing one prefix.
//!
//! etcd comes from `AUTHZD_E2E_ETCD` (set by `scripts/test.sh`, which installs Debian's
//! `etcd-server`), else `etcd` on PATH. Without one the tests are skipped with a message, unless
//! `CI=true`, where a missing etcd is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::time::{Duration, Instant};

use crate::support::etcd::{etcd_binary, etcdctl_binary, unique_prefix, Cluster, Replica};
use crate::support::server::resource_request;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{ApplyRequest, DeleteRequest, ObjectRef, StatusRequest};
use tonic::transport::Channel;

const READER: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
"#;

fn grant(name: &str, user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {name}}}\nsubjects: [{{kind: User, name: {user}}}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}}\n"
    )
}

/// A grant on one replica is an allow on the others at once, a revocation a deny at once: no
/// `min_revision`, no sleep. Revisions are etcd's, the same on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_acknowledged_on_one_replica_holds_on_every_replica_at_once() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let mut a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    let mut c = Replica::start(&cluster, &prefix, "c", &[]).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");

    // An empty prefix is an empty policy.
    assert!(!b.ask(&frank).await.unwrap().allowed);

    a.apply(READER).await;
    for round in 0..5 {
        let granted = a.apply(&grant("frank-read", "frank")).await;
        let mut confirmed = granted.replicas_confirmed.clone();
        confirmed.sort();
        if round == 0 {
            assert_eq!(confirmed, ["a", "b", "c"], "{granted:?}");
            assert!(granted.replicas_fenced.is_empty(), "{granted:?}");
        }
        for replica in [&mut b, &mut c] {
            let answer = replica.ask(&frank).await.unwrap();
            assert!(answer.allowed, "grant not seen at once: {answer:?}");
            assert_eq!(answer.revision, granted.revision, "revisions are etcd's");
        }
        let revoked = a.delete_binding("frank-read").await;
        assert!(revoked.revision > granted.revision);
        for replica in [&mut b, &mut c] {
            let answer = replica.ask(&frank).await.unwrap();
            assert!(!answer.allowed, "stale allow after revocation: {answer:?}");
            assert_eq!(answer.revision, revoked.revision);
        }
    }

    // A min_revision from one replica holds on another (a local acknowledgement, then ask B).
    let granted = a
        .admin
        .apply(ApplyRequest {
            manifest: grant("frank-read", "frank"),
            ack: authzd::proto::Ack::Local as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut waiting = frank.clone();
    waiting.min_revision = granted.revision;
    let answer = c.ask(&waiting).await.unwrap();
    assert!(
        answer.allowed && answer.revision >= granted.revision,
        "{answer:?}"
    );

    let status = b.admin.status(StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.store, "etcd");
    assert_eq!(status.replica_id, "b");
    assert!(!status.fenced, "{status:?}");
    let ids: Vec<&str> = status.replicas.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "{status:?}");
}

/// FieldPolicies live in etcd too (etcd mode has no policy files): one applied on one replica
/// protects its paths on every replica at once, a replica that starts later reads it from its
/// listing, and deleting it on another replica opens the paths again everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_policy_written_on_one_replica_holds_on_every_replica_at_once() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("fields");
    let mut a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    let dora = resource_request("dora", &[], "dev", "update", "secrets");
    let folded = |answer: &authzd::proto::AuthorizeResponse| {
        !answer.allowed
            && !answer.denied
            && answer
                .evaluation_error
                .contains("may change protected paths (.data)")
    };

    a.apply("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: secret-editor}\nrules:\n- {apiGroups: [\"\"], resources: [secrets], verbs: [update]}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: dora-edits}\nsubjects: [{kind: User, name: dora}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: secret-editor}\n").await;
    for _ in 0..2 {
        assert!(b.ask(&dora).await.unwrap().allowed, "warming the cache");
    }
    let protected = a
        .apply("apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {name: special}\nspec:\n  protected:\n  - {path: \".data\", resources: [secrets]}\n")
        .await;
    let mut confirmed = protected.replicas_confirmed.clone();
    confirmed.sort();
    assert_eq!(confirmed, ["a", "b"], "{protected:?}");
    let answer = b.ask(&dora).await.unwrap();
    assert!(
        folded(&answer),
        "the cached plain allow survived: {answer:?}"
    );
    assert_eq!(answer.revision, protected.revision);

    let mut c = Replica::start(&cluster, &prefix, "c", &[]).await;
    let answer = c.ask(&dora).await.unwrap();
    assert!(folded(&answer), "a replica started later: {answer:?}");
    let listed = c
        .admin
        .list(authzd::proto::ListRequest {
            kind: "fieldpolicies".into(),
            namespace: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.manifests.len(), 1, "{listed:?}");
    assert!(listed.manifests[0].contains("name: special"), "{listed:?}");

    let opened = c
        .admin
        .delete(DeleteRequest {
            object: Some(ObjectRef {
                kind: "FieldPolicy".into(),
                namespace: String::new(),
                name: "special".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for replica in [&mut a, &mut b] {
        let answer = replica.ask(&dora).await.unwrap();
        assert!(
            answer.allowed,
            "still protected after the delete: {answer:?}"
        );
        assert_eq!(answer.revision, opened.revision);
    }
}

/// ABAC lines are not kept in etcd: a replica reads them from `--authorization-policy-file`
/// (as kube-apiserver does) and answers them beside etcd's objects; a replica without the file
/// does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abac_lines_come_from_a_file_beside_etcd() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("abac");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("abac.jsonl");
    std::fs::write(
        &file,
        r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"user": "ann", "namespace": "*", "resource": "pods", "apiGroup": "*", "readonly": true}}"#,
    )
    .unwrap();
    let path = file.display().to_string();
    let mut a = Replica::start(
        &cluster,
        &prefix,
        "a",
        &["--authorization-policy-file", &path],
    )
    .await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    let ann = resource_request("ann", &[], "default", "get", "pods");

    let answer = a.ask(&ann).await.unwrap();
    assert!(answer.allowed, "{answer:?}");
    assert!(
        answer
            .allowed_by
            .iter()
            .any(|r| r.source.contains("abac.jsonl:1")),
        "{answer:?}"
    );
    assert!(!b.ask(&ann).await.unwrap().allowed);
    // etcd's objects apply beside the lines, and a change leaves the lines in force.
    a.apply(READER).await;
    a.apply(&grant("frank-read", "frank")).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");
    assert!(a.ask(&frank).await.unwrap().allowed);
    assert!(a.ask(&ann).await.unwrap().allowed);
    let write = resource_request("ann", &[], "default", "delete", "pods");
    assert!(!a.ask(&write).await.unwrap().allowed, "readonly line");
}

/// Writers on different replicas at once never lose an update: each write catches up and
/// retries on a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_on_different_replicas_lose_nothing() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let mut a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    a.apply(READER).await;
    const EACH: usize = 10;
    let write = |mut admin: PolicyAdminClient<Channel>, side: &'static str| async move {
        let mut revisions = Vec::new();
        for i in 0..EACH {
            let manifest = grant(&format!("{side}-{i}"), &format!("{side}-user-{i}"));
            let response = admin
                .apply(ApplyRequest {
                    manifest,
                    ack: authzd::proto::Ack::Local as i32,
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|e| panic!("{side}-{i}: {e:?}"))
                .into_inner();
            revisions.push(response.revision);
        }
        revisions
    };
    let (left, right) = tokio::join!(
        write(a.admin.clone(), "left"),
        write(b.admin.clone(), "right")
    );
    let mut all: Vec<u64> = left.into_iter().chain(right).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 2 * EACH, "two writes share a revision: {all:?}");
    // Every grant is there, on both replicas.
    let last = *all.last().unwrap();
    for side in ["left", "right"] {
        for i in 0..EACH {
            let mut ask =
                resource_request(&format!("{side}-user-{i}"), &[], "default", "get", "pods");
            ask.min_revision = last;
            assert!(a.ask(&ask).await.unwrap().allowed, "{side}-{i} lost on a");
            assert!(b.ask(&ask).await.unwrap().allowed, "{side}-{i} lost on b");
        }
    }
}

/// A replica frozen (SIGSTOP) during a revocation: the write returns within --max-staleness
/// plus a margin, naming it fenced, and its first answer after SIGCONT is no stale allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_delays_a_write_at_most_max_staleness_and_wakes_fenced() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let staleness = ["--max-staleness", "1s"];
    let mut a = Replica::start(&cluster, &prefix, "a", &staleness).await;
    let mut c = Replica::start(&cluster, &prefix, "c", &staleness).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");
    a.apply(READER).await;
    a.apply(&grant("frank-read", "frank")).await;
    assert!(c.ask(&frank).await.unwrap().allowed);

    c.signal("STOP");
    let started = Instant::now();
    let revoked = a.delete_binding("frank-read").await;
    let took = started.elapsed();
    // Questions sent while it is still frozen: answered the moment it wakes, while it applies
    // the revocation from its watch and proves itself current.
    let asks: Vec<_> = (0..32)
        .map(|_| {
            let (mut authz, frank) = (c.authz.clone(), frank.clone());
            tokio::spawn(async move { authz.authorize(frank).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.signal("CONT");
    assert!(
        took < Duration::from_millis(1100 + 500),
        "the write waited {took:?} for a frozen replica"
    );
    assert_eq!(revoked.replicas_fenced, ["c"], "{revoked:?}");
    assert_eq!(revoked.replicas_confirmed, ["a"], "{revoked:?}");
    // The frozen replica's first answers: each a deny (computed after it caught up) or
    // UNAVAILABLE (fenced), never the allow it held when it froze.
    for ask in asks {
        match ask.await.unwrap() {
            Ok(answer) => {
                let answer = answer.into_inner();
                assert!(!answer.allowed, "stale allow after SIGCONT: {answer:?}");
            }
            Err(status) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}"),
        }
    }
    // And it recovers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(answer) = c.ask(&frank).await {
            assert!(!answer.allowed);
            assert_eq!(answer.revision, revoked.revision);
            break;
        }
        assert!(Instant::now() < deadline, "the replica never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Quorum lost (two members frozen): writes fail with a clear UNAVAILABLE, replicas fence
/// after --max-staleness (allows refused, denies still answered), and recover with quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_quorum_fails_writes_and_fences_replicas_until_it_returns() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let staleness = ["--max-staleness", "1s"];
    let mut a = Replica::start(&cluster, &prefix, "a", &staleness).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");
    let nobody = resource_request("nobody", &[], "default", "get", "pods");
    a.apply(READER).await;
    a.apply(&grant("frank-read", "frank")).await;
    assert!(a.ask(&frank).await.unwrap().allowed);

    cluster.signal(1, "STOP");
    cluster.signal(2, "STOP");
    let refused = a
        .admin
        .apply(ApplyRequest {
            manifest: grant("other", "other"),
            ..Default::default()
        })
        .await
        .expect_err("a write without quorum");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("etcd"), "{refused:?}");

    // Fenced once its last proof is older than --max-staleness: waited for, not slept.
    let deadline = Instant::now() + Duration::from_secs(10);
    let fenced = loop {
        match a.ask(&frank).await {
            Err(status) => break status,
            Ok(answer) => assert!(answer.allowed, "before the fence: {answer:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "never fenced\n{}",
            a.server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(fenced.code(), tonic::Code::Unavailable, "{fenced:?}");
    assert!(fenced.message().contains("fenced"), "{fenced:?}");
    let deny = a.ask(&nobody).await.expect("denies are still answered");
    assert!(!deny.allowed);

    cluster.signal(1, "CONT");
    cluster.signal(2, "CONT");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(answer) = a.ask(&frank).await {
            assert!(answer.allowed);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never unfenced\n{}",
            a.server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Importing is explicit: `authzd apply -f FILE` against one replica, a file larger than one
/// etcd transaction applied in chunks, and every object on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_import_through_one_replica_reaches_every_replica() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("export.yaml");
    let mut text = READER.to_string();
    for i in 0..300 {
        text.push_str("---\n");
        text.push_str(&grant(&format!("import-{i}"), &format!("imported-{i}")));
    }
    std::fs::write(&file, text).unwrap();
    let url = a.server.url();
    // `authzd apply -f FILE` against A: its output, once it succeeded.
    let apply_file = |file: &std::path::Path| -> String {
        let out = crate::support::server::run_bin(
            &[
                "apply".as_ref(),
                "-f".as_ref(),
                file.as_os_str(),
                "--server".as_ref(),
                url.as_ref(),
            ],
            // A guard against a hang, not a measure: the 4 MiB export below has taken over
            // 60 s of a debug build on 2 loaded cores (a cold CI run beside other builds).
            Duration::from_secs(240),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let first = apply_file(&file);
    let stdout = &first;
    assert_eq!(stdout.matches(" applied").count(), 301, "{stdout}");
    for i in [0, 150, 299] {
        let ask = resource_request(&format!("imported-{i}"), &[], "default", "get", "pods");
        assert!(
            b.ask(&ask).await.unwrap().allowed,
            "imported-{i} missing on b"
        );
    }

    // Few objects, but more bytes than one etcd transaction takes (1 MiB of objects): chunked
    // by size.
    let verbs: Vec<String> = (0..40_000).map(|v| format!("verb{v}")).collect();
    let large: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: large-{i}}}\nrules: [{{apiGroups: [\"\"], resources: [pods], verbs: [{}]}}]\n",
                verbs.join(", ")
            )
        })
        .collect();
    let file = dir.path().join("large.yaml");
    std::fs::write(&file, large.join("---\n")).unwrap();
    let stdout = apply_file(&file);
    assert_eq!(stdout.matches(" applied").count(), 4, "{stdout}");
    let revision = |out: &str| -> u64 {
        let line = out.lines().find(|l| l.starts_with("revision ")).unwrap();
        line["revision ".len()..].trim().parse().unwrap()
    };
    let before = revision(&first);
    assert!(
        revision(&stdout) >= before + 2,
        "one commit of 2 MB? {stdout}"
    );
    let listed = b
        .admin
        .list(authzd::proto::ListRequest {
            kind: "ClusterRole".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let names = listed.manifests.join("\n");
    assert!(
        (0..4).all(|i| names.contains(&format!("large-{i}"))),
        "large roles missing on b"
    );

    // An export larger than one request may be (4 MiB): sent in chunks from the start, not
    // refused whole.
    let members: Vec<String> = (0..40)
        .map(|m| format!("{{kind: User, name: exported-member-{m:02}-with-a-long-enough-name}}"))
        .collect();
    let export: Vec<String> = (0..1_600)
        .map(|i| {
            format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: exported-{i}}}\nsubjects: [{}, {{kind: User, name: exported-{i}}}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}}\n",
                members.join(", ")
            )
        })
        .collect();
    let export = export.join("---\n");
    assert!(export.len() > 4 * 1024 * 1024, "{} bytes", export.len());
    let file = dir.path().join("export-large.yaml");
    std::fs::write(&file, export).unwrap();
    let stdout = apply_file(&file);
    assert_eq!(stdout.matches(" applied").count(), 1_600, "{stdout}");
    for i in [0, 777, 1_599] {
        let ask = resource_request(&format!("exported-{i}"), &[], "default", "get", "pods");
        assert!(
            b.ask(&ask).await.unwrap().allowed,
            "exported-{i} missing on b"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The hammer across replicas.

const HAMMER_FOR: Duration = Duration::from_secs(10);

/// One answer an asker got: when its request started and ended, and what it said (`None`:
/// refused, e.g. `UNAVAILABLE` from a fenced replica, which is never stale).
struct Sample {
    start: Instant,
    end: Instant,
    allowed: Option<bool>,
}

/// One acknowledged write: when it was sent, when it returned, and the access it leaves.
struct Write {
    sent: Instant,
    acked: Instant,
    granted: bool,
}

/// The etcd member that is the raft leader now, read from each member's `/metrics`.
fn leader(cluster: &Cluster) -> Option<usize> {
    use std::io::{Read, Write as _};
    cluster.members.iter().position(|member| {
        let addr = member.client_url.trim_start_matches("http://");
        let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut body = String::new();
        let _ = stream.read_to_string(&mut body);
        body.lines()
            .any(|line| line.trim() == "etcd_server_is_leader 1")
    })
}

/// Askers on B and C, a writer on A toggling a grant, for [`HAMMER_FOR`]: every answer to a
/// request that started after a write was acknowledged, and ended before the next write was
/// sent, must show that write's access. With `kill_leader`, the etcd leader is killed
/// (`kill -9`) a third of the way in and restarted a third later.
async fn hammer(cache_size: &str, kill_leader: bool) {
    let Some(binary) = etcd_binary() else { return };
    let mut cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let args = ["--cache-size", cache_size];
    let mut a = Replica::start(&cluster, &prefix, "a", &args).await;
    let b = Replica::start(&cluster, &prefix, "b", &args).await;
    let c = Replica::start(&cluster, &prefix, "c", &args).await;
    a.apply(READER).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut askers = Vec::new();
    for replica in [&b, &c] {
        for _ in 0..4 {
            let mut client = replica.authz.clone();
            let (stop, frank) = (std::sync::Arc::clone(&stop), frank.clone());
            askers.push(tokio::spawn(async move {
                let mut samples = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let start = Instant::now();
                    let answer = client.authorize(frank.clone()).await;
                    samples.push(Sample {
                        start,
                        end: Instant::now(),
                        allowed: answer.ok().map(|a| a.into_inner().allowed),
                    });
                }
                samples
            }));
        }
    }

    let began = Instant::now();
    let mut writes = Vec::new();
    let mut granted = false;
    let mut killed: Option<usize> = None;
    let mut restarted = false;
    while began.elapsed() < HAMMER_FOR {
        if kill_leader && killed.is_none() && began.elapsed() > HAMMER_FOR / 3 {
            if let Some(i) = leader(&cluster) {
                if let Some(child) = &mut cluster.members[i].child {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                killed = Some(i);
            }
        }
        if let (Some(i), false) = (killed, restarted) {
            if began.elapsed() > HAMMER_FOR * 2 / 3 {
                cluster.start_member(i);
                restarted = true;
            }
        }
        granted = !granted;
        let sent = Instant::now();
        // A write etcd could not confirm is retried until it is (retrying is safe; a delete
        // that did happen answers NOT_FOUND the second time).
        loop {
            let outcome = if granted {
                a.admin
                    .apply(ApplyRequest {
                        manifest: grant("frank-read", "frank"),
                        ..Default::default()
                    })
                    .await
                    .map(|_| ())
            } else {
                a.admin
                    .delete(DeleteRequest {
                        object: Some(ObjectRef {
                            kind: "ClusterRoleBinding".into(),
                            namespace: String::new(),
                            name: "frank-read".into(),
                        }),
                        ..Default::default()
                    })
                    .await
                    .map(|_| ())
            };
            match outcome {
                Ok(()) => break,
                Err(status) if status.code() == tonic::Code::NotFound && !granted => break,
                Err(status) if status.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(status) => panic!("write failed: {status:?}"),
            }
        }
        writes.push(Write {
            sent,
            acked: Instant::now(),
            granted,
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut samples = Vec::new();
    for asker in askers {
        samples.extend(asker.await.unwrap());
    }

    let mut checked = 0;
    let mut refused = 0;
    let mut stale = Vec::new();
    for sample in &samples {
        let Some(allowed) = sample.allowed else {
            refused += 1;
            continue;
        };
        // The last write acknowledged before the request started; checked only if the next
        // one had not been sent before the answer came back.
        let Some(k) = writes.iter().rposition(|w| w.acked <= sample.start) else {
            continue;
        };
        if writes.get(k + 1).is_some_and(|next| next.sent < sample.end) {
            continue;
        }
        checked += 1;
        if allowed != writes[k].granted {
            stale.push(format!(
                "write {k} ({}) acknowledged {:?} before the request, answered {allowed}",
                writes[k].granted,
                sample.start - writes[k].acked
            ));
        }
    }
    eprintln!(
        "hammer (cache {cache_size}, kill leader {kill_leader}): {} answers, {checked} checked, {refused} refused, {} writes, {} stale",
        samples.len(),
        writes.len(),
        stale.len()
    );
    assert!(writes.len() >= 20, "only {} writes", writes.len());
    assert!(checked >= 100, "only {checked} answers checked");
    assert!(stale.is_empty(), "stale answers: {stale:#?}");
    if kill_leader {
        assert!(killed.is_some(), "no leader found to kill");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hammer_across_replicas_finds_no_stale_answer_cache_on() {
    hammer("100000", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hammer_across_replicas_finds_no_stale_answer_cache_off() {
    hammer("0", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hammer_across_replicas_while_the_etcd_leader_is_killed_and_restarted() {
    hammer("100000", true).await;
}

/// etcd compacts its history while a replica's watch is behind (the replica frozen while much
/// changed): the replica lists again and publishes the difference; cache entries the
/// difference does not reach stay warm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_a_watch_is_behind_relists_precisely() {
    use authzd::store::etcd::client::rpc;
    use authzd::store::etcd::{EtcdClient, EtcdConfig};
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let mut a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    a.apply(READER).await;
    a.apply(&grant("stay-read", "stay")).await;
    a.apply(&grant("frank-read", "frank")).await;
    let stay = resource_request("stay", &[], "default", "get", "pods");
    let frank = resource_request("frank", &[], "default", "get", "pods");
    assert!(b.ask(&stay).await.unwrap().allowed);
    assert!(b.ask(&stay).await.unwrap().cached);

    b.signal("STOP");
    // Much more than a watch stream buffers, written straight into etcd: the frozen replica's
    // watcher falls behind.
    let client = EtcdClient::new(EtcdConfig {
        endpoints: cluster.endpoints().split(',').map(str::to_string).collect(),
        ca_file: None,
        cert_file: None,
        key_file: None,
        timeout: Duration::from_secs(5),
    })
    .unwrap();
    let keys = authzd::store::etcd::Keys::new(&prefix);
    let subjects: String = (0..200)
        .map(|i| format!("{{kind: User, name: bulk-user-with-a-long-name-{i}}},"))
        .collect();
    let mut last = 0;
    for round in 0..16 {
        let success = (0..50)
            .map(|i| {
                let manifest = format!(
                    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: bulk-{round}-{i}}}\nsubjects: [{subjects}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}}\n"
                );
                let object = authzd::policy::load::parse_manifest(
                    "bulk.yaml",
                    &manifest,
                    &Default::default(),
                )
                .unwrap()
                .remove(0);
                rpc::RequestOp {
                    request: Some(rpc::request_op::Request::RequestPut(rpc::PutRequest {
                        key: keys
                            .object(&authzd::store::ObjectRef::of(&object))
                            .into_bytes(),
                        value: authzd::store::etcd::encode(&object),
                        lease: 0,
                    })),
                }
            })
            .collect();
        let response = client
            .txn(rpc::TxnRequest {
                compare: Vec::new(),
                success,
                failure: Vec::new(),
            })
            .await
            .unwrap();
        last = response.header.unwrap().revision;
    }
    let revoked = a
        .admin
        .delete(DeleteRequest {
            object: Some(ObjectRef {
                kind: "ClusterRoleBinding".into(),
                namespace: String::new(),
                name: "frank-read".into(),
            }),
            ack: authzd::proto::Ack::Local as i32,
        })
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", a.server.stderr()))
        .into_inner();
    assert!(revoked.revision as i64 > last);
    client.compact(revoked.revision as i64).await.unwrap();
    b.signal("CONT");

    let mut waiting = frank.clone();
    waiting.min_revision = revoked.revision;
    // Catching up means a relist of everything written meanwhile: on a busy machine it may
    // take longer than one request's wait for its revision.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        match b.ask(&waiting).await {
            Ok(answer) => break answer,
            Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                assert!(
                    Instant::now() < deadline,
                    "{status:?}\n{}",
                    b.server.stderr()
                );
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    assert!(!answer.allowed, "{answer:?}");
    assert!(
        b.server.stderr().contains("listing the policy again"),
        "the replica did not relist:\n{}",
        b.server.stderr()
    );
    // Fenced until its next proof (it slept through --max-staleness), then current again.
    let deadline = Instant::now() + Duration::from_secs(15);
    while b
        .admin
        .status(StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .fenced
    {
        assert!(Instant::now() < deadline, "still fenced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Unrelated to everything that changed: still warm after the relist.
    let again = b.ask(&stay).await.unwrap();
    assert!(again.allowed && again.cached, "{again:?}");
    let bulk = resource_request(
        "bulk-user-with-a-long-name-7",
        &[],
        "default",
        "get",
        "pods",
    );
    assert!(b.ask(&bulk).await.unwrap().allowed);
}

/// etcd restored from a snapshot (disaster recovery, `etcdctl snapshot restore`): the revision
/// goes back to the snapshot's. Every replica relists and serves the restored policy — a
/// grant revoked after the snapshot is back, one made after it is gone — at the restored
/// revision, and writes work on top of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_from_a_snapshot_takes_the_revision_back_and_replicas_relist() {
    let Some(binary) = etcd_binary() else { return };
    let Some(etcdctl) = etcdctl_binary() else {
        return;
    };
    let mut cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let mut a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");
    let gina = resource_request("gina", &[], "default", "get", "pods");
    a.apply(READER).await;
    let snapshotted = a.apply(&grant("frank-read", "frank")).await.revision;
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snapshot.db");
    cluster.snapshot(&etcdctl, &snapshot);
    a.apply(&grant("gina-read", "gina")).await;
    a.delete_binding("frank-read").await;
    let mut last = 0;
    for i in 0..5 {
        last = a.apply(&grant(&format!("x-{i}"), "x")).await.revision;
    }
    assert!(b.ask(&gina).await.unwrap().allowed && !b.ask(&frank).await.unwrap().allowed);

    cluster.restore(&etcdctl, &snapshot);
    // Each replica comes back to the snapshot's policy, at a revision before `last`.
    for replica in [&mut a, &mut b] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (f, g) = (replica.ask(&frank).await, replica.ask(&gina).await);
            if let (Ok(f), Ok(g)) = (&f, &g) {
                if f.allowed && !g.allowed {
                    assert!(f.revision < last, "{} >= {last}", f.revision);
                    assert!(f.revision >= snapshotted, "{} < {snapshotted}", f.revision);
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "never served the restored policy: frank {f:?}, gina {g:?}\n{}",
                replica.server.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // A write on top of the restored state reaches both (retried while etcd settles).
    let hank = resource_request("hank", &[], "default", "get", "pods");
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = loop {
        let applied = a
            .admin
            .apply(ApplyRequest {
                manifest: grant("hank-read", "hank"),
                ..Default::default()
            })
            .await;
        match applied {
            Ok(response) => break response.into_inner(),
            Err(status) => assert!(Instant::now() < deadline, "{status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(written.replicas_fenced, Vec::<String>::new());
    let answer = b.ask(&hank).await.unwrap();
    assert!(answer.allowed && answer.revision == written.revision);
}

/// The etcd member a replica streams from is frozen (SIGSTOP: connections stay open, nothing
/// answers): its proofs fail while the head moves on elsewhere, and it fails over to another
/// member, watches again and catches up. Writes through it fail over too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_etcd_member_is_left_for_another() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("test");
    let mut a = Replica::start(&cluster, &prefix, "a", &[]).await;
    let mut b = Replica::start(&cluster, &prefix, "b", &[]).await;
    let frank = resource_request("frank", &[], "default", "get", "pods");
    a.apply(READER).await;
    let status = |replica: &mut Replica| {
        let mut admin = replica.admin.clone();
        async move { admin.status(StatusRequest {}).await.unwrap().into_inner() }
    };
    // Both stream from the first endpoint given.
    let frozen = cluster.members[0].client_url.clone();
    assert_eq!(status(&mut b).await.etcd_endpoint, frozen);
    cluster.signal(0, "STOP");
    // A write through A: its commit to the frozen member times out, and is retried elsewhere.
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = loop {
        let applied = a
            .admin
            .apply(ApplyRequest {
                manifest: grant("frank-read", "frank"),
                ack: authzd::proto::Ack::Committed as i32,
                ..Default::default()
            })
            .await;
        match applied {
            Ok(response) => break response.into_inner(),
            Err(status) => assert!(Instant::now() < deadline, "{status:?}"),
        }
    };
    // B's watch went silent while the head moved: it leaves the member and catches up.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(answer) = b.ask(&frank).await {
            if answer.allowed {
                assert!(answer.revision >= written.revision);
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "b never caught up\n{}",
            b.server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(status(&mut b).await.etcd_endpoint, frozen);
    cluster.signal(0, "CONT");
}
