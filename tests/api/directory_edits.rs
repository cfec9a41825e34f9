//! The directory store keeps what people wrote (docs/policy.md §2, "What a write changes in a
//! file"), against the real `authzd serve --policy DIR` on a copy of the repository's own
//! `policy/` (comments, `v1alpha1` objects, seed 003's concatenated JSON, ABAC lines):
//!
//! * a hand edit the server has not loaded — valid or half-written — is never overwritten: an
//!   `Apply` to another object of the same file is refused (`FAILED_PRECONDITION`, naming the
//!   file), the file stays byte for byte and the served policy as it was;
//! * an `Apply` or `Delete` changes only the documents of the objects it writes: every other
//!   byte of every file stays, and a restart serves what was acknowledged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::server::{resource_request, Server};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{ApplyRequest, DeleteRequest, GetRequest, ObjectRef};
use tonic::transport::Channel;

const RBAC: &str = "seed001-rbac.yaml";
const SEED003: &str = "seed003-roles.json";

/// A copy of the repository's `policy/` (its `*.md` left out: not policy).
fn policy_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy");
    std::fs::create_dir(&path).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    for entry in std::fs::read_dir(shipped).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".md") {
            std::fs::copy(entry.path(), path.join(&name)).unwrap();
        }
    }
    (dir, path)
}

/// Every file of `dir`, by name, as bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

/// RoleBinding `default/read-pods` (seed 001's, jane's) given to `user` instead.
fn read_pods_for(user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: read-pods, namespace: default}}\nsubjects: [{{kind: User, name: {user}, apiGroup: rbac.authorization.k8s.io}}]\nroleRef: {{kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}}\n"
    )
}

async fn apply(channel: &Channel, manifest: &str) -> Result<u64, tonic::Status> {
    PolicyAdminClient::new(channel.clone())
        .apply(ApplyRequest {
            manifest: manifest.to_string(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().revision)
}

fn object(kind: &str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

async fn delete(channel: &Channel, object: ObjectRef) -> u64 {
    PolicyAdminClient::new(channel.clone())
        .delete(DeleteRequest {
            object: Some(object),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .revision
}

async fn get(channel: &Channel, object: ObjectRef) -> Option<String> {
    match PolicyAdminClient::new(channel.clone())
        .get(GetRequest {
            object: Some(object),
        })
        .await
    {
        Ok(found) => Some(found.into_inner().manifest),
        Err(status) if status.code() == tonic::Code::NotFound => None,
        Err(status) => panic!("get: {status:?}"),
    }
}

async fn may(
    channel: &Channel,
    user: &str,
    groups: &[&str],
    ns: &str,
    verb: &str,
    what: &str,
) -> bool {
    AuthorizerClient::new(channel.clone())
        .authorize(resource_request(user, groups, ns, verb, what))
        .await
        .unwrap()
        .into_inner()
        .allowed
}

fn sighup(server: &Server) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Dana's Role, appended to seed001-rbac.yaml by hand: `verb:` for `verbs:` while half-written.
fn hand_edit(original: &str, finished: bool) -> String {
    let verbs = if finished { "verbs" } else { "verb" };
    format!(
        "{original}---\n# Dana's role: being written by hand\nkind: Role\napiVersion: rbac.authorization.k8s.io/v1alpha1\nmetadata:\n  namespace: default\n  name: dana\nrules:\n  - apiGroups: [\"\"]\n    resources: [\"configmaps\"]\n    {verbs}: [\"get\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_the_server_has_not_loaded_is_never_overwritten() {
    let (_dir, policy) = policy_copy();
    // Without the watcher, the server loads an edit only on SIGHUP: the write comes first.
    let server = Server::start_serving(&policy, &["--no-watch"]).await;
    let channel = server.channel().await;
    let original = read(&policy, RBAC);
    assert!(may(&channel, "jane", &[], "default", "get", "pods").await);

    for finished in [false, true] {
        let edited = hand_edit(&original, finished);
        std::fs::write(policy.join(RBAC), &edited).unwrap();
        let before = snapshot(&policy);
        let refused = apply(&channel, &read_pods_for("joan")).await.unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::FailedPrecondition,
            "{refused:?}"
        );
        let expected = format!(
            "{}` was changed on disk since authzd loaded it",
            policy.join(RBAC).display()
        );
        assert!(
            refused.message().contains(&expected),
            "{}",
            refused.message()
        );
        assert!(
            refused.message().contains("nothing was written"),
            "{}",
            refused.message()
        );
        assert_eq!(
            authzd::api::error::ErrorReason::of(&refused).map(|r| r.as_str()),
            Some("POLICY_FILE_CHANGED")
        );
        assert_eq!(snapshot(&policy), before, "a refused write changed a file");
        // The served policy is as it was: jane still reads pods, joan does not, Dana's role
        // is not served.
        assert!(may(&channel, "jane", &[], "default", "get", "pods").await);
        assert!(!may(&channel, "joan", &[], "default", "get", "pods").await);
        assert!(get(&channel, object("Role", "default", "dana"))
            .await
            .is_none());
    }

    // The half-written edit, reloaded: rejected (the last good policy stays), and writes to
    // its file are still refused.
    let half = hand_edit(&original, false);
    std::fs::write(policy.join(RBAC), &half).unwrap();
    sighup(&server);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !server.stderr().contains("policy reload rejected") {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload error logged:\n{}",
            server.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let refused = apply(&channel, &read_pods_for("joan")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(read(&policy, RBAC), half);

    // Finished and reloaded: the write goes through, editing its own document and keeping
    // Dana's, the comments and the other v1alpha1 objects.
    let finished = hand_edit(&original, true);
    std::fs::write(policy.join(RBAC), &finished).unwrap();
    sighup(&server);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while get(&channel, object("Role", "default", "dana"))
        .await
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the edit was not reloaded:\n{}",
            server.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    apply(&channel, &read_pods_for("joan")).await.unwrap();
    let written = read(&policy, RBAC);
    assert!(written.ends_with(&finished[original.len()..]), "{written}");
    assert!(may(&channel, "joan", &[], "default", "get", "pods").await);
    assert!(!may(&channel, "jane", &[], "default", "get", "pods").await);
}

/// The byte range of the document of seed-001's `name` object: from its `---` line to the
/// next one (or the end).
fn document_range(text: &str, starts_with: &str) -> std::ops::Range<usize> {
    let start = text.find(starts_with).unwrap();
    let end = text[start + 4..]
        .find("\n---\n")
        .map_or(text.len(), |at| start + 4 + at + 1);
    start..end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_keep_comments_and_every_other_document() {
    let (_dir, policy) = policy_copy();
    let server = Server::start_serving(&policy, &[]).await;
    let channel = server.channel().await;
    let shipped = snapshot(&policy);
    let rbac = read(&policy, RBAC);

    // An object applied as it already is (seed 001's v1alpha1 Role, in its v1 form): no byte
    // of any file changes.
    apply(
        &channel,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: pod-reader, namespace: default}\nrules: [{apiGroups: [''], resources: [pods], verbs: [get, watch, list]}]\n",
    )
    .await
    .unwrap();
    assert_eq!(snapshot(&policy), shipped);

    // Apply: only the body of read-pods' document changes; the comment above it, every other
    // document (with its `v1alpha1`, quoting and comments) stays.
    apply(&channel, &read_pods_for("joan")).await.unwrap();
    let range = document_range(&rbac, "---\n# This role binding allows \"jane\"");
    let body_start = range.start + rbac[range.clone()].find("kind: RoleBinding").unwrap();
    let after_apply = read(&policy, RBAC);
    assert!(
        after_apply.starts_with(&rbac[..body_start]),
        "{after_apply}"
    );
    assert!(after_apply.ends_with(&rbac[range.end..]), "{after_apply}");
    let middle = &after_apply[body_start..after_apply.len() - (rbac.len() - range.end)];
    assert!(
        middle.contains("joan") && !middle.contains("jane"),
        "{middle}"
    );
    assert_eq!(
        after_apply.matches("v1alpha1").count(),
        rbac.matches("v1alpha1").count() - 2
    );

    // Delete: the ClusterRoleBinding's document goes with its `---` and its comment; nothing
    // else moves.
    delete(&channel, object("ClusterRoleBinding", "", "read-secrets")).await;
    let gone = document_range(
        &after_apply,
        "---\n# This cluster role binding allows anyone",
    );
    let after_delete = read(&policy, RBAC);
    assert_eq!(
        after_delete,
        format!("{}{}", &after_apply[..gone.start], &after_apply[gone.end..])
    );

    // Seed 003's concatenated JSON: one value replaced, the others (the Policy and
    // PolicyBinding containers authzd ignores among them) as written.
    let seed003 = read(&policy, SEED003);
    apply(
        &channel,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: Editors, namespace: hammer}\nsubjects: [{kind: User, name: Edith, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {kind: ClusterRole, name: edit, apiGroup: rbac.authorization.k8s.io}\n",
    )
    .await
    .unwrap();
    let value_start = seed003
        .find("{\n\t\"kind\": \"roleBinding\",\n\t\"name\": \"Editors\"")
        .unwrap();
    let value_end = value_start + seed003[value_start..].find("\n}").unwrap() + 2;
    let after_json = read(&policy, SEED003);
    assert!(after_json.starts_with(&seed003[..value_start]));
    assert!(after_json.ends_with(&seed003[value_end..]));
    assert!(after_json.contains("Edith"));
    assert_eq!(
        after_json.matches("Edgar").count(),
        seed003.matches("Edgar").count() - 1
    );

    // A new object: a file of its own; no other file touched.
    let before_new = snapshot(&policy);
    apply(
        &channel,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: fresh}\nrules: [{apiGroups: [''], resources: [configmaps], verbs: [list]}]\n",
    )
    .await
    .unwrap();
    let mut after_new = snapshot(&policy);
    let created = after_new
        .remove("clusterrole.fresh.yaml")
        .expect("the new object's file");
    assert!(String::from_utf8(created).unwrap().contains("name: fresh"));
    assert_eq!(after_new, before_new);

    // The ABAC lines were never touched, and a restart serves every acknowledged write.
    for name in ["seed001-abac.jsonl", "seed002-abac.jsonl"] {
        assert_eq!(after_new[name], shipped[name], "{name}");
    }
    let mut server = server;
    server.kill();
    let server = Server::start_serving(&policy, &[]).await;
    let channel = server.channel().await;
    assert!(may(&channel, "joan", &[], "default", "get", "pods").await);
    assert!(!may(&channel, "jane", &[], "default", "get", "pods").await);
    assert!(
        !may(
            &channel,
            "someone",
            &["manager"],
            "default",
            "get",
            "secrets"
        )
        .await
    );
    assert!(may(&channel, "Edith", &[], "hammer", "create", "pods").await);
    assert!(get(&channel, object("ClusterRole", "", "fresh"))
        .await
        .is_some());
}

/// The generation of read-pods' subject `gen-N` in `text` (0: seed 001's jane).
fn generation(text: &str) -> Option<u64> {
    match text.find("gen-") {
        None if text.contains("jane") => Some(0),
        None => None,
        Some(at) => text[at + 4..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok(),
    }
}

const WRITES: u64 = 50;

/// 50 writes to seed-001's file (one file: its rename is the commit), the server killed with
/// SIGKILL at random instants of them and restarted: every time, each file parses (the server
/// starts on it), seed001-rbac.yaml holds the old or an acknowledged generation of read-pods
/// between what a person wrote, byte for byte, every other file is as shipped, and the server
/// serves that generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_writes_killed_at_random_keep_every_file_whole() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let (_dir, policy) = policy_copy();
    let rbac = read(&policy, RBAC);
    let range = document_range(&rbac, "---\n# This role binding allows \"jane\"");
    let body_start = range.start + rbac[range.clone()].find("kind: RoleBinding").unwrap();
    let (prefix, suffix) = (&rbac[..body_start], &rbac[range.end..]);
    let mut others = snapshot(&policy);
    others.remove(RBAC);

    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let initial_seed = seed;
    let (sent, acked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (mut kills, mut problems) = (0, Vec::new());
    loop {
        let server = Server::start_serving(&policy, &[]).await;
        let (sent_now, acked_now) = (sent.load(Ordering::SeqCst), acked.load(Ordering::SeqCst));
        let text = read(&policy, RBAC);
        let on_disk = generation(&text[prefix.len().min(text.len())..]);
        if !text.starts_with(prefix) || !text.ends_with(suffix) {
            problems.push(format!(
                "after kill {kills}: what a person wrote changed:\n{text}"
            ));
        }
        match on_disk {
            Some(g) if acked_now <= g && g <= sent_now => {
                let channel = server.channel().await;
                let user = if g == 0 { "jane".to_string() } else { format!("gen-{g}") };
                if !may(&channel, &user, &[], "default", "get", "pods").await {
                    problems.push(format!("after kill {kills}: generation {g} on disk is not served"));
                }
            }
            other => problems.push(format!(
                "after kill {kills}: generation {other:?} on disk, outside acknowledged {acked_now} ..= sent {sent_now}"
            )),
        }
        let mut now = snapshot(&policy);
        now.remove(RBAC);
        now.retain(|name, _| !name.starts_with('.'));
        if now != others {
            problems.push(format!("after kill {kills}: another file changed"));
        }
        if acked_now == WRITES {
            break;
        }

        let channel = server.channel().await;
        let (sent_w, acked_w) = (Arc::clone(&sent), Arc::clone(&acked));
        let writer = tokio::spawn(async move {
            for g in acked_w.load(Ordering::SeqCst) + 1..=WRITES {
                sent_w.store(g, Ordering::SeqCst);
                match apply(&channel, &read_pods_for(&format!("gen-{g}"))).await {
                    Ok(_) => acked_w.store(g, Ordering::SeqCst),
                    Err(_) => return,
                }
            }
        });
        // A random instant within the next few writes (xorshift; the seed is printed).
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(std::time::Duration::from_millis(seed % 25)).await;
        let mut server = server;
        server.kill();
        kills += 1;
        writer.await.unwrap();
    }
    println!("{WRITES} writes, {kills} kills (seed {initial_seed})");
    assert!(
        problems.is_empty(),
        "seed {initial_seed}:\n{}",
        problems.join("\n")
    );
    assert!(kills >= 2, "the writes were never interrupted");
}

/// With the watcher on (the default), a hand edit races the next write: whichever comes
/// first, the edit is never lost. Each round appends a Role to seed001-rbac.yaml by hand and
/// at once applies a change to read-pods in the same file: the write is refused until the
/// watcher has loaded the edit, then goes through, and the file keeps every hand edit so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_racing_a_write_is_never_lost() {
    let (_dir, policy) = policy_copy();
    let server = Server::start_serving(&policy, &[]).await;
    let channel = server.channel().await;
    let (mut refused, mut rounds) = (0, 0);
    for round in 1..=8 {
        let text = read(&policy, RBAC);
        let edit = format!(
            "---\n# added by hand, round {round}\nkind: Role\napiVersion: rbac.authorization.k8s.io/v1alpha1\nmetadata: {{namespace: default, name: hand-{round}}}\nrules: [{{apiGroups: [\"\"], resources: [\"configmaps\"], verbs: [\"get\"]}}]\n"
        );
        std::fs::write(policy.join(RBAC), format!("{text}{edit}")).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match apply(&channel, &read_pods_for(&format!("gen-{round}"))).await {
                Ok(_) => break,
                Err(status) => {
                    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
                    refused += 1;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the edit was never loaded"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        rounds += 1;
        let now = read(&policy, RBAC);
        for earlier in 1..=round {
            assert!(
                now.contains(&format!("# added by hand, round {earlier}\n")),
                "round {round} lost the hand edit of round {earlier}:\n{now}"
            );
        }
        assert!(get(
            &channel,
            object("Role", "default", &format!("hand-{round}"))
        )
        .await
        .is_some());
        assert!(
            may(
                &channel,
                &format!("gen-{round}"),
                &[],
                "default",
                "get",
                "pods"
            )
            .await
        );
    }
    println!("{rounds} rounds, {refused} writes refused until the watcher loaded the edit");
}
