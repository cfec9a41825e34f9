//! A PolicyAdmin write whose objects live in two files is all or nothing across `kill -9`
//! (docs/policy.md §2, "How the directory store commits"): the real `authzd serve --policy
//! DIR` takes a tight loop of such writes and is killed at random instants of them, again and
//! again, and every restart serves one whole write — never the binding of one write beside
//! the role of another.
//!
//! Each write is the escalation the store once let through half-made: the ClusterRoleBinding
//! `wide-users` (in `bindings.yaml`) and the ClusterRole `wide` it binds (in `roles.yaml`),
//! changed together. In odd generations eve is bound and `wide` is narrowed to reading pods;
//! in even ones admin is bound and `wide` grants everything. Whole, eve can never delete
//! secrets; half of one write beside half of the next, she can.
//!
//! Each file also opens with what a person wrote and no write touches ([`ROLES_PREFIX`],
//! [`BINDINGS_PREFIX`]: comments, a `v1alpha1` bystander object, a comment framing the written
//! document): after every kill and restart each file still starts with it byte for byte
//! (docs/policy.md §2, "What a write changes in a file").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::server::{resource_request, Server};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{
    action::Kind, Action, ApplyRequest, AuthorizeRequest, GetRequest, NonResourceAttributes,
    ObjectRef, UserInfo,
};
use tonic::transport::Channel;

const ROLES_FILE: &str = "roles.yaml";
const BINDINGS_FILE: &str = "bindings.yaml";
/// The store's commit journal (`JOURNAL_NAME` in src/store/journal.rs), spelt out so that
/// this test also builds, and counts, against a store without one.
const JOURNAL: &str = ".authzd-commit-journal";
/// Kills at least; more (up to [`MAX_KILLS`]) until [`MIN_MID_WRITE`] of them caught a commit
/// half-made on disk, so that the run proves something however the machine's timing falls.
const KILLS: usize = 32;
const MAX_KILLS: usize = 64;
const MIN_MID_WRITE: usize = 3;
/// A kill comes this long at most after the round's first acknowledged write.
const MAX_DELAY_MS: u64 = 40;

/// The ClusterRole `wide` of generation `g`: narrow (get pods) when odd, everything when
/// even, and in both the marker rule `get /generation/G`.
fn role(g: u64) -> String {
    let grant = if g % 2 == 1 {
        r#"{apiGroups: [""], resources: [pods], verbs: [get]}"#
    } else {
        r#"{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}"#
    };
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: wide\nrules:\n- {grant}\n- {{nonResourceURLs: [\"/generation/{g}\"], verbs: [get]}}\n"
    )
}

/// The ClusterRoleBinding `wide-users` of generation `g`: eve when odd, admin when even, and
/// in both the marker user `generation-G`.
fn binding(g: u64) -> String {
    let user = if g % 2 == 1 { "eve" } else { "admin" };
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: wide-users\nsubjects:\n- {{kind: User, name: {user}, apiGroup: rbac.authorization.k8s.io}}\n- {{kind: User, name: generation-{g}, apiGroup: rbac.authorization.k8s.io}}\nroleRef: {{kind: ClusterRole, name: wide, apiGroup: rbac.authorization.k8s.io}}\n"
    )
}

/// What `roles.yaml` holds before the written ClusterRole, and must keep byte for byte.
const ROLES_PREFIX: &str = "# Roles of the kill -9 test: what a person wrote, which no write may change.\n---\n# bystander: never written\nkind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1alpha1\nmetadata:\n  name: \"bystander\"   # quoted on purpose\nrules: []\n---\n# wide: every write replaces the document below this comment\n";
/// The same for `bindings.yaml`: the written binding comes first, the bystander after.
const BINDINGS_PREFIX: &str = "# Bindings of the kill -9 test.\n---\n";
const BINDINGS_SUFFIX: &str = "# trailing: kept\n---\n# bystander binding, never written\nkind: ClusterRoleBinding\napiVersion: rbac.authorization.k8s.io/v1beta1\nmetadata: {name: bystander}\nsubjects: [{kind: User, name: nobody}]\nroleRef: {kind: ClusterRole, name: bystander}\n";

/// What a person wrote around the written documents, if either file lost any of it.
fn frames_lost(dir: &Path) -> Option<String> {
    let roles = std::fs::read_to_string(dir.join(ROLES_FILE)).unwrap_or_default();
    let bindings = std::fs::read_to_string(dir.join(BINDINGS_FILE)).unwrap_or_default();
    let lost = !roles.starts_with(ROLES_PREFIX)
        || !bindings.starts_with(BINDINGS_PREFIX)
        || !bindings.ends_with(BINDINGS_SUFFIX);
    lost.then(|| format!("the files lost what a person wrote:\n{roles}\n{bindings}"))
}

/// The number after the first `marker` in `text`.
fn marked(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)? + marker.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The generations the two files hold (role, binding).
fn generations_on_disk(dir: &Path) -> (Option<u64>, Option<u64>) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    (
        marked(&read(ROLES_FILE), "/generation/"),
        marked(&read(BINDINGS_FILE), "generation-"),
    )
}

/// Whether the store's journal (or its unfinished temporary file) is in the directory.
fn journal_on_disk(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        name == JOURNAL || name.starts_with(&format!(".{JOURNAL}.tmp-"))
    })
}

/// A small deterministic generator for the kill delays; its seed is printed.
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % (MAX_DELAY_MS + 1)
    }
}

/// Applies generation after generation from `next` on, one write at a time, until the server
/// is gone; `sent` and `acked` are the last generation sent and acknowledged.
async fn write_until_killed(
    channel: Channel,
    next: u64,
    sent: Arc<AtomicU64>,
    acked: Arc<AtomicU64>,
) {
    let mut admin = PolicyAdminClient::new(channel);
    for g in next.. {
        sent.store(g, Ordering::SeqCst);
        let applied = admin
            .apply(ApplyRequest {
                manifest: format!("{}---\n{}", role(g), binding(g)),
                dry_run: false,
                ..Default::default()
            })
            .await;
        match applied {
            Ok(_) => acked.store(g, Ordering::SeqCst),
            // The server is gone.
            Err(_) => return,
        }
    }
}

fn non_resource_request(user: &str, path: &str) -> AuthorizeRequest {
    AuthorizeRequest {
        user: Some(UserInfo {
            name: user.into(),
            ..Default::default()
        }),
        action: Some(Action {
            kind: Some(Kind::NonResourceAttributes(NonResourceAttributes {
                path: path.into(),
                verb: "get".into(),
            })),
        }),
        ..Default::default()
    }
}

async fn allowed(authz: &mut AuthorizerClient<Channel>, request: AuthorizeRequest) -> bool {
    authz.authorize(request).await.unwrap().into_inner().allowed
}

/// What a restarted server serves against generation `g` whole (`None`: the files hold no
/// one generation): the generation of each object it holds, and answers only that whole
/// policy gives. Eve may delete secrets in no whole generation. Each mismatch, described.
async fn served_mismatches(server: &Server, g: Option<u64>) -> Vec<String> {
    let channel = server.channel().await;
    let mut admin = PolicyAdminClient::new(channel.clone());
    let mut authz = AuthorizerClient::new(channel);
    let mut mismatches = Vec::new();
    let eve = resource_request("eve", &[], "default", "delete", "secrets");
    if allowed(&mut authz, eve).await {
        mismatches.push("eve may delete secrets".into());
    }
    let Some(g) = g else {
        return mismatches;
    };
    for (kind, name, marker) in [
        ("ClusterRole", "wide", "/generation/"),
        ("ClusterRoleBinding", "wide-users", "generation-"),
    ] {
        let manifest = admin
            .get(GetRequest {
                object: Some(ObjectRef {
                    kind: kind.into(),
                    namespace: String::new(),
                    name: name.into(),
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .manifest;
        let served = marked(&manifest, marker);
        if served != Some(g) {
            mismatches.push(format!("serves {kind} `{name}` of generation {served:?}"));
        }
    }
    let admin = resource_request("admin", &[], "default", "delete", "secrets");
    let admin_allowed = allowed(&mut authz, admin).await;
    if admin_allowed != (g % 2 == 0) {
        mismatches.push(format!("admin may delete secrets: {admin_allowed}"));
    }
    let marker_user = format!("generation-{g}");
    let marker = non_resource_request(&marker_user, &format!("/generation/{g}"));
    if !allowed(&mut authz, marker).await {
        mismatches.push(format!("{marker_user} may not get /generation/{g}"));
    }
    mismatches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_two_files_is_whole_after_any_kill_9() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(ROLES_FILE),
        format!("{ROLES_PREFIX}{}", role(0)),
    )
    .unwrap();
    std::fs::write(
        dir.path().join(BINDINGS_FILE),
        format!("{BINDINGS_PREFIX}{}{BINDINGS_SUFFIX}", binding(0)),
    )
    .unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut delays = Delays(seed);
    let (sent, acked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));

    let mut server = Server::start_serving(dir.path(), &[]).await;
    let (mut kills, mut mid_write, mut in_flight) = (0, 0, 0);
    let (mut rolled_forward, mut rolled_back) = (0, 0);
    let mut partial: Vec<String> = Vec::new();
    while kills < KILLS || (mid_write < MIN_MID_WRITE && kills < MAX_KILLS) {
        let round_start = acked.load(Ordering::SeqCst);
        let writer = tokio::spawn(write_until_killed(
            server.channel().await,
            sent.load(Ordering::SeqCst) + 1,
            Arc::clone(&sent),
            Arc::clone(&acked),
        ));
        // Writes are flowing once one is acknowledged; then a random instant of the next ones.
        let deadline = Instant::now() + Duration::from_secs(30);
        while acked.load(Ordering::SeqCst) == round_start {
            assert!(
                Instant::now() < deadline,
                "no write acknowledged; stderr:\n{}",
                server.stderr()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let delay = delays.next_ms();
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.kill();
        kills += 1;
        tokio::time::timeout(Duration::from_secs(30), writer)
            .await
            .expect("the writer stops once the server is gone")
            .unwrap();
        let (sent_now, acked_now) = (sent.load(Ordering::SeqCst), acked.load(Ordering::SeqCst));
        if sent_now > acked_now {
            in_flight += 1;
        }
        // As the kill left it: a commit half-made is a journal (the store's own temporary
        // file or the journal itself) or, without one, files of two generations.
        let (role_g, binding_g) = generations_on_disk(dir.path());
        if journal_on_disk(dir.path()) || role_g != binding_g {
            mid_write += 1;
        }

        server = Server::start_serving(dir.path(), &[]).await;
        let log = server.stderr();
        rolled_forward += usize::from(log.contains("rolled forward"));
        rolled_back += usize::from(log.contains("rolled back"));
        let mut wrong = Vec::new();
        let (role_g, binding_g) = generations_on_disk(dir.path());
        let whole = match (role_g, binding_g) {
            (Some(r), Some(b)) if r == b => {
                if r < acked_now || r > sent_now {
                    wrong.push(format!(
                        "the files hold generation {r}, outside acknowledged {acked_now} ..= sent {sent_now}"
                    ));
                }
                Some(r)
            }
            _ => {
                wrong.push(format!(
                    "the files are of two writes: {ROLES_FILE} of generation {role_g:?}, {BINDINGS_FILE} of {binding_g:?}"
                ));
                None
            }
        };
        wrong.extend(frames_lost(dir.path()));
        wrong.extend(served_mismatches(&server, whole).await);
        if journal_on_disk(dir.path()) {
            wrong.push("the journal is still there after the restart".into());
        }
        if !wrong.is_empty() {
            partial.push(format!(
                "kill {kills} ({delay} ms after a write was acknowledged; acknowledged {acked_now}, sent {sent_now}): {}",
                wrong.join("; ")
            ));
        }
    }
    println!(
        "{kills} kills (seed {seed}, up to {MAX_DELAY_MS} ms after a write): {in_flight} with a write in flight, {mid_write} with a commit half-made on disk; restarts rolled {rolled_forward} forward and {rolled_back} back; {} partial states; {} writes acknowledged in {:.1?}",
        partial.len(),
        acked.load(Ordering::SeqCst),
        started.elapsed()
    );
    assert!(
        partial.is_empty(),
        "{} of {kills} restarts served part of a write:\n{}",
        partial.len(),
        partial.join("\n")
    );
    assert!(
        mid_write >= MIN_MID_WRITE,
        "only {mid_write} of {kills} kills caught a commit half-made on disk: the test did not reach the window it is about"
    );
}
