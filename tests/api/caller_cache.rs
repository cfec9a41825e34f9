//! The decision cache in the caller's process (docs/caller-cache.md) against the real server:
//!
//! * in-process, through the library (`authzd::caller`): a revocation reaches the local cache
//!   inside the write's acknowledgement (the response counts it), a change leaves unaffected
//!   entries warm, only cacheable answers are kept, `Status` lists the subscriber, and
//!   subscribing needs its own privilege;
//! * with real processes (`authzd ask --local-cache`, four of them, fed over pipes): the
//!   hammer — no question written after a write's acknowledgement is answered on the older
//!   policy; a subscriber frozen with SIGSTOP delays a write by at most `--max-staleness` and
//!   is reported fenced, and answers nothing stale once resumed; the server restarted on its
//!   Unix socket under the clients: no stale answer, and they answer from memory again;
//! * the server frozen with SIGSTOP under the library: every call, and the connection itself,
//!   fails at its deadline naming the server and the deadline, the server is told the deadline
//!   (`grpc-timeout`), and a local cache whose stream went silent answers nothing from memory,
//!   follows the server again once it resumes, and stays exact.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::server::{role_binding, Frozen, Server, BIN, POD_READER};
use crate::support::wait::{eventually, eventually_blocking};
use authzd::caller::{Client, Endpoint, LocalCacheConfig};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{
    ApplyRequest, ApplyResponse, DeleteRequest, DeleteResponse, InvalidationsRequest, ObjectRef,
    StatusRequest, StatusResponse,
};
use authzd::request::Request;
use tonic::transport::Channel;

/// `root` may do anything (system:masters); `alice` only what the policy grants her.
const TOKENS: &str = "root-token,root,uid-0,system:masters\nalice-token,alice,uid-1\n";
const MAX_STALENESS: &str = "1s";

fn alice_binding() -> String {
    role_binding(
        "team-a",
        "alice-reads",
        "ClusterRole",
        "pod-reader",
        &[("User", "alice")],
    )
}

/// Bob's grant shares nothing with alice's (role, binding, file): a write to hers leaves his
/// answers in place (an object rewritten or moved in its file invalidates what it grants: the
/// answers name its `file:line`).
fn bob_policy() -> String {
    let viewer = POD_READER.replace("name: pod-reader", "name: pod-viewer");
    let binding = role_binding(
        "team-b",
        "bob-reads",
        "ClusterRole",
        "pod-viewer",
        &[("User", "bob")],
    );
    format!("{viewer}---\n{binding}")
}

struct Fixture {
    dir: tempfile::TempDir,
    server: Server,
    channel: Channel,
}

impl Fixture {
    async fn start(extra: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy");
        std::fs::create_dir(&policy).unwrap();
        std::fs::write(
            policy.join("rbac.yaml"),
            format!("{POD_READER}---\n{}", alice_binding()),
        )
        .unwrap();
        std::fs::write(policy.join("bob.yaml"), bob_policy()).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let mut args = vec![
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--no-watch",
            "--max-staleness",
            MAX_STALENESS,
        ];
        args.extend_from_slice(extra);
        let server = Server::start_serving(&policy, &args).await;
        let channel = server.channel().await;
        Fixture {
            dir,
            server,
            channel,
        }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn admin(
        &self,
    ) -> PolicyAdminClient<tonic::service::interceptor::InterceptedService<Channel, Root>> {
        PolicyAdminClient::with_interceptor(self.channel.clone(), Root)
    }

    async fn client(&self, token: &str, id: &str) -> Client {
        let mut endpoint = Endpoint::new(self.url());
        endpoint.token = Some(token.into());
        Client::connect(&endpoint)
            .await
            .unwrap()
            .with_local_cache(LocalCacheConfig::new(id))
    }

    async fn status(&self) -> StatusResponse {
        self.admin()
            .status(StatusRequest {})
            .await
            .unwrap()
            .into_inner()
    }
}

/// Calls as `root`.
#[derive(Clone)]
struct Root;

impl tonic::service::Interceptor for Root {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", "Bearer root-token".parse().unwrap());
        Ok(request)
    }
}

fn get_pods(user: &str, namespace: &str) -> Request {
    crate::support::server::get_pods(user, &[], namespace)
}

fn binding_ref(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: "RoleBinding".into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// Asks until the answer comes from the local cache (the cache has its first proof and the
/// answer was kept), returning it.
async fn until_local(client: &Client, request: &Request) -> authzd::caller::Answer {
    eventually(
        Duration::from_secs(10),
        || format!("{request:?} answered from the local cache"),
        || async {
            let answer = client.authorize(request).await.unwrap();
            answer.from_local_cache.then_some(answer)
        },
    )
    .await
}

async fn delete(fixture: &Fixture, object: ObjectRef) -> DeleteResponse {
    fixture
        .admin()
        .delete(DeleteRequest {
            object: Some(object),
            ack: 0,
        })
        .await
        .unwrap()
        .into_inner()
}

async fn apply(fixture: &Fixture, manifest: String) -> ApplyResponse {
    fixture
        .admin()
        .apply(ApplyRequest {
            manifest,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn a_revocation_reaches_the_callers_cache_inside_the_acknowledgement() {
    let fixture = Fixture::start(&[]).await;
    let client = fixture.client("root-token", "in-process").await;
    let alice = get_pods("alice", "team-a");
    let bob = get_pods("bob", "team-b");
    assert!(until_local(&client, &alice).await.allowed());
    assert!(until_local(&client, &bob).await.allowed());

    let deleted = delete(&fixture, binding_ref("team-a", "alice-reads")).await;
    assert_eq!(
        (deleted.subscribers_confirmed, deleted.subscribers_fenced),
        (1, 0),
        "the write waits for the one subscriber's confirmation"
    );
    let after = client.authorize(&alice).await.unwrap();
    assert!(!after.allowed(), "revoked, yet {after:?}");
    // Precise: bob's answer stayed in the local cache.
    let bob_after = client.authorize(&bob).await.unwrap();
    assert!(
        bob_after.allowed() && bob_after.from_local_cache,
        "{bob_after:?}"
    );
    // A denial is kept too, and a grant removes it.
    assert!(!until_local(&client, &alice).await.allowed());
    let applied = apply(&fixture, alice_binding()).await;
    assert_eq!(
        (applied.subscribers_confirmed, applied.subscribers_fenced),
        (1, 0)
    );
    assert!(client.authorize(&alice).await.unwrap().allowed());

    let status = fixture.status().await;
    let [subscriber] = status.subscribers.as_slice() else {
        panic!("one subscriber, not {:?}", status.subscribers)
    };
    assert_eq!(subscriber.id, "in-process");
    assert!(subscriber.connected);
    assert_eq!(subscriber.applied_revision, applied.revision);
    let figures = client.local_cache().unwrap().figures();
    assert!(
        figures.hits >= 3 && figures.invalidations_applied >= 3,
        "{figures:?}"
    );
    assert!(figures.entries_invalidated >= 2, "{figures:?}");
}

/// Answers the server marks as not cacheable are never kept: here a request with more groups
/// than any cache keys, asked again and again.
#[tokio::test]
async fn only_cacheable_answers_are_kept() {
    let fixture = Fixture::start(&[]).await;
    let client = fixture.client("root-token", "bounds").await;
    until_local(&client, &get_pods("alice", "team-a")).await;
    let mut many = get_pods("alice", "team-a");
    many.user.groups = (0..100).map(|i| format!("group-{i}")).collect();
    for _ in 0..20 {
        let answer = client.authorize(&many).await.unwrap();
        assert!(answer.allowed());
        assert!(
            !answer.response.cacheable && !answer.from_local_cache,
            "{answer:?}"
        );
    }
}

/// Subscribing says whose access changed: it needs `watch` on `decisioninvalidations`.
#[tokio::test]
async fn subscribing_needs_its_own_privilege() {
    let fixture = Fixture::start(&[]).await;
    let subscribe = |token: &'static str| {
        let channel = fixture.channel.clone();
        async move {
            let mut client = AuthorizerClient::new(channel);
            let mut request = tonic::Request::new(tokio_stream::iter([InvalidationsRequest {
                subscriber_id: "x".into(),
                ..Default::default()
            }]));
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
            client.watch_invalidations(request).await.map(|_| ())
        }
    };
    let refused = subscribe("alice-token").await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("decisioninvalidations"),
        "{refused:?}"
    );
    subscribe("root-token").await.unwrap();
}

// --- Real processes --------------------------------------------------------------------------

/// One `authzd ask --local-cache` process, asked over its stdin; its answers are read on a
/// thread of their own, so a question can be given up on.
struct Asker {
    child: Child,
    stdin: ChildStdin,
    answers: std::sync::mpsc::Receiver<String>,
}

/// One answer: whether it allowed, and whether it came from the process's memory.
#[derive(Clone, Copy, Debug)]
struct Said {
    allowed: bool,
    local: bool,
    /// The policy revision the answer was decided at (for the failure messages).
    revision: u64,
}

fn said(line: &str) -> Said {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["allow", source, revision] | ["deny" | "no_opinion", source, revision] => Said {
            allowed: words[0] == "allow",
            local: *source == "local",
            revision: revision.parse().unwrap_or(0),
        },
        _ => panic!("`authzd ask` answered {line:?}"),
    }
}

impl Asker {
    fn start(url: &str, id: &str) -> Asker {
        let mut child = Command::new(BIN)
            .args([
                "ask",
                "--server",
                url,
                "--token",
                "root-token",
                "--local-cache",
            ])
            .args(["--subscriber-id", id, "--max-staleness", "5s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start authzd ask");
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Asker {
            child,
            stdin,
            answers,
        }
    }

    fn send(&mut self, question: &str) {
        writeln!(self.stdin, "{question}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn ask(&mut self, question: &str) -> Said {
        self.send(question);
        said(&self.answers.recv().expect("an answer"))
    }

    /// The answer if it comes within `within`.
    fn ask_within(&mut self, question: &str, within: Duration) -> Option<Said> {
        self.send(question);
        self.answers
            .recv_timeout(within)
            .ok()
            .map(|line| said(&line))
    }

    /// Asks until an answer comes from memory.
    fn until_local(&mut self, question: &str) -> Said {
        eventually_blocking(
            Duration::from_secs(10),
            || format!("`{question}` answered from `authzd ask`'s memory"),
            || {
                let said = self.ask(question);
                said.local.then_some(said)
            },
        )
    }

    fn signal(&self, signal: &str) {
        send_signal(signal, self.child.id());
    }
}

fn send_signal(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

impl Drop for Asker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const ALICE: &str = "alice get pods team-a";

/// A write and when it was sent and acknowledged; the policy allows alice after it or not.
#[derive(Clone, Copy, Debug)]
struct Change {
    sent: Instant,
    acknowledged: Instant,
    allows: bool,
    revision: u64,
}

/// Whether an answer to a question written at `asked` and read back at `answered` may say
/// `allowed`. The question overlapped every write sent before its answer came back, so it may
/// be answered on the policy of the last write acknowledged before it was asked, or on that of
/// any later write already sent by the time the answer was read (linearizability: CI once saw
/// a deny at the revision of a revoke sent 0.3 ms after the question, which is not stale).
fn possible(
    writes: &[Change],
    initial: bool,
    asked: Instant,
    answered: Instant,
    allowed: bool,
) -> bool {
    let acknowledged = writes.iter().rposition(|w| w.acknowledged <= asked);
    let state = acknowledged.map_or(initial, |i| writes[i].allows);
    let next = acknowledged.map_or(0, |i| i + 1);
    allowed == state
        || writes[next..]
            .iter()
            .take_while(|w| w.sent <= answered)
            .any(|w| w.allows == allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hammer_four_processes_no_stale_answer_after_an_acknowledged_change() {
    let fixture = Fixture::start(&[]).await;
    let url = fixture.url();
    let samples: Arc<Mutex<Vec<(Instant, Instant, Said)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut askers = Vec::new();
    for i in 0..4 {
        let (url, samples, stop) = (url.clone(), Arc::clone(&samples), Arc::clone(&stop));
        askers.push(std::thread::spawn(move || {
            let mut asker = Asker::start(&url, &format!("hammer-{i}"));
            asker.until_local(ALICE);
            let mut mine = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = Instant::now();
                let said = asker.ask(ALICE);
                mine.push((asked, Instant::now(), said));
            }
            samples.lock().unwrap().extend(mine);
        }));
    }
    // Every subscriber is confirmed before the hammer starts.
    eventually(
        Duration::from_secs(20),
        || "four subscribers".into(),
        || async { (fixture.status().await.subscribers.len() == 4).then_some(()) },
    )
    .await;
    let mut writes = Vec::new();
    let until = Instant::now() + crate::support::hammer_for();
    let mut allows = true;
    while Instant::now() < until {
        let sent = Instant::now();
        let (confirmed, fenced, revision) = if allows {
            let r = delete(&fixture, binding_ref("team-a", "alice-reads")).await;
            (r.subscribers_confirmed, r.subscribers_fenced, r.revision)
        } else {
            let r = apply(&fixture, alice_binding()).await;
            (r.subscribers_confirmed, r.subscribers_fenced, r.revision)
        };
        allows = !allows;
        writes.push(Change {
            sent,
            acknowledged: Instant::now(),
            allows,
            revision,
        });
        assert_eq!(
            (confirmed, fenced),
            (4, 0),
            "every live subscriber confirms"
        );
        // Time for the askers to answer a few from memory on the new policy.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for asker in askers {
        asker.join().unwrap();
    }
    let samples = samples.lock().unwrap();
    let stale: Vec<_> = samples
        .iter()
        .filter(|(asked, answered, said)| !possible(&writes, true, *asked, *answered, said.allowed))
        .collect();
    let local = samples.iter().filter(|(_, _, said)| said.local).count();
    assert!(
        stale.is_empty(),
        "{} of {} answers were on a policy older than an acknowledged write (took, allowed, \
         local, revision): {:?}; writes \
         around the first (revision, sent and acknowledged relative to it): {:?}",
        stale.len(),
        samples.len(),
        stale
            .iter()
            .take(5)
            .map(|(asked, answered, said)| (
                answered.saturating_duration_since(*asked),
                said.allowed,
                said.local,
                said.revision
            ))
            .collect::<Vec<_>>(),
        stale.first().map(|(asked, _, _)| writes
            .iter()
            .filter(|w| w.acknowledged + Duration::from_millis(200) >= *asked
                && w.sent <= *asked + Duration::from_millis(200))
            .map(|w| (
                w.revision,
                w.allows,
                w.sent.saturating_duration_since(*asked),
                w.acknowledged.saturating_duration_since(*asked)
            ))
            .collect::<Vec<_>>())
    );
    assert!(writes.len() >= 10, "only {} writes", writes.len());
    assert!(
        local * 2 > samples.len(),
        "most answers come from memory: {local} of {}",
        samples.len()
    );
}

#[tokio::test]
async fn a_frozen_subscriber_is_fenced_within_max_staleness_and_resumes_without_stale_answers() {
    let fixture = Fixture::start(&[]).await;
    let mut frozen = Asker::start(&fixture.url(), "frozen");
    let mut awake = Asker::start(&fixture.url(), "awake");
    assert!(frozen.until_local(ALICE).allowed);
    assert!(awake.until_local(ALICE).allowed);
    frozen.signal("-STOP");
    let sent = Instant::now();
    let deleted = delete(&fixture, binding_ref("team-a", "alice-reads")).await;
    let took = sent.elapsed();
    assert_eq!(
        (deleted.subscribers_confirmed, deleted.subscribers_fenced),
        (1, 1),
        "the awake subscriber confirms, the frozen one is fenced"
    );
    let max_staleness = Duration::from_secs(1);
    assert!(
        took <= max_staleness + Duration::from_secs(1),
        "the write took {took:?} with --max-staleness {max_staleness:?}"
    );
    assert!(!awake.ask(ALICE).allowed);
    // Resumed, it has missed the change: nothing it answers may be the old allow.
    frozen.signal("-CONT");
    for _ in 0..50 {
        let said = frozen.ask(ALICE);
        assert!(
            !said.allowed,
            "the resumed subscriber answered the revoked allow: {said:?}"
        );
    }
    assert!(!frozen.until_local(ALICE).allowed);
}

/// A subscriber answers from memory only while it holds a proof: with the server frozen (its
/// stream open, no heartbeat coming), it stops once `--max-staleness` has passed, and asks the
/// server instead — which answers once it is resumed.
#[tokio::test]
async fn a_subscriber_stops_answering_from_memory_when_its_proof_runs_out() {
    let fixture = Fixture::start(&[]).await;
    let mut asker = Asker::start(&fixture.url(), "proof");
    assert!(asker.until_local(ALICE).allowed);
    send_signal("-STOP", fixture.server.pid());
    // Past the proof (--max-staleness 1s, probes every 200 ms) with a margin.
    std::thread::sleep(Duration::from_millis(1500));
    let answered = asker.ask_within(ALICE, Duration::from_millis(500));
    send_signal("-CONT", fixture.server.pid());
    assert!(
        answered.is_none_or(|said| !said.local),
        "answered from memory without a proof: {answered:?}"
    );
    let late = said(&asker.answers.recv_timeout(Duration::from_secs(10)).unwrap());
    assert!(late.allowed && !late.local, "{late:?}");
    assert!(asker.until_local(ALICE).allowed);
}

#[tokio::test]
async fn the_server_restarted_under_its_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let socket: PathBuf = dir.path().join("authzd.sock");
    let listen = format!("unix://{}", socket.display());
    let fixture = Fixture::start(&["--listen", &listen]).await;
    let mut askers: Vec<Asker> = (0..2)
        .map(|i| Asker::start(&listen, &format!("restart-{i}")))
        .collect();
    for asker in &mut askers {
        assert!(asker.until_local(ALICE).allowed);
    }
    let Fixture {
        dir: policy_dir,
        mut server,
        ..
    } = fixture;
    server.kill();
    // The policy changes while the server is down: the askers must not keep the old allow.
    let policy = policy_dir.path().join("policy");
    std::fs::write(policy.join("rbac.yaml"), POD_READER).unwrap();
    let _ = std::fs::remove_file(&socket);
    let tokens = policy_dir.path().join("tokens.csv");
    let restarted = restart(&policy, &tokens, &listen).await;
    for asker in &mut askers {
        for _ in 0..20 {
            let said = asker.ask(ALICE);
            assert!(!said.allowed, "an answer from before the restart: {said:?}");
        }
        assert!(!asker.until_local(ALICE).allowed);
    }
    drop(restarted);
}

async fn restart(policy: &Path, tokens: &Path, listen: &str) -> Server {
    Server::start_serving(
        policy,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--no-watch",
            "--max-staleness",
            MAX_STALENESS,
            "--listen",
            listen,
        ],
    )
    .await
}

/// The tower layer in front of a service: allowed requests reach it, refused ones are answered
/// 403 with the reason (gRPC: `PERMISSION_DENIED` in a trailers-only answer), and one the
/// mapping function refuses 401.
#[tokio::test]
async fn the_tower_layer_answers_refusals_itself() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let fixture = Fixture::start(&[]).await;
    let client = fixture.client("root-token", "layer").await;
    let layer = authzd::caller::AuthorizeLayer::new(client, |request: &http::Request<String>| {
        let user = request
            .headers()
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| "no X-User".to_string())?;
        Ok(get_pods(user, "team-a"))
    });
    let service = tower::ServiceBuilder::new().layer(layer).service_fn(
        |_request: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new("reached".to_string()))
        },
    );
    let call = |user: Option<&str>, grpc: bool| {
        let service = service.clone();
        let mut request = http::Request::builder();
        if let Some(user) = user {
            request = request.header("x-user", user);
        }
        if grpc {
            request = request.header("content-type", "application/grpc");
        }
        async move {
            let response = service
                .oneshot(request.body(String::new()).unwrap())
                .await
                .unwrap();
            let (parts, body) = response.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            (parts, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let (allowed, body) = call(Some("alice"), false).await;
    assert_eq!(
        (allowed.status, body.as_str()),
        (http::StatusCode::OK, "reached")
    );
    let (refused, body) = call(Some("bob"), false).await;
    assert_eq!(refused.status, http::StatusCode::FORBIDDEN);
    assert!(
        !body.contains("reached") && !body.trim().is_empty(),
        "{body:?}"
    );
    let (grpc, _) = call(Some("bob"), true).await;
    assert_eq!(grpc.status, http::StatusCode::OK);
    assert_eq!(grpc.headers["grpc-status"], "7");
    let (anonymous, body) = call(None, false).await;
    assert_eq!(anonymous.status, http::StatusCode::UNAUTHORIZED);
    assert!(body.contains("no X-User"), "{body:?}");
}

/// The follower holds the cache only while it handles a message: once the last clone of the
/// client is gone, its subscription ends (within a probe period) even though the stream is
/// healthy, and the server no longer waits for it.
#[tokio::test]
async fn dropping_the_client_ends_its_subscription() {
    let fixture = Fixture::start(&[]).await;
    let client = fixture.client("root-token", "dropped").await;
    until_local(&client, &get_pods("alice", "team-a")).await;
    let connected = |status: StatusResponse| {
        status
            .subscribers
            .iter()
            .any(|s| s.id == "dropped" && s.connected)
    };
    assert!(connected(fixture.status().await));
    drop(client);
    eventually(
        Duration::from_secs(10),
        || "the dropped client's subscription ends".into(),
        || async { (!connected(fixture.status().await)).then_some(()) },
    )
    .await;
}

// --- A frozen server under the library --------------------------------------------------------

/// What a call returned and how long it took. A call still waiting after a minute has no
/// deadline (`authzd ask --timeout 2s` once waited 607 s on a frozen server).
async fn timed<T>(
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> (Result<T, tonic::Status>, Duration) {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .unwrap_or_else(|_| panic!("still waiting after 60 s: the call has no deadline"));
    (result, started.elapsed())
}

/// The call failed with DEADLINE_EXCEEDED naming `url` and the deadline, at the deadline (the
/// machine is loaded: up to 8 s late).
#[track_caller]
fn assert_gave_up<T: std::fmt::Debug>(
    what: &str,
    (result, took): (Result<T, tonic::Status>, Duration),
    url: &str,
    timeout: Duration,
    spelled: &str,
) {
    let status = result.expect_err(what);
    assert_eq!(
        status.code(),
        tonic::Code::DeadlineExceeded,
        "{what}: {status:?}"
    );
    assert_eq!(
        status.message(),
        format!("no answer from {url} within {spelled}"),
        "{what}"
    );
    assert!(
        took + Duration::from_millis(50) >= timeout && took <= timeout + Duration::from_secs(8),
        "{what} took {took:?} with a deadline of {timeout:?}"
    );
}

fn wire(request: &Request) -> authzd::proto::AuthorizeRequest {
    authzd::proto::AuthorizeRequest {
        user: Some(authzd::api::convert::user_info(&request.user)),
        action: Some(authzd::api::convert::wire_action(&request.action)),
        ..Default::default()
    }
}

/// Every call the library makes of a frozen server fails at the client's deadline (or the one
/// a clone was given), naming the server and the deadline; once the server resumes, the same
/// client is answered again.
#[tokio::test]
async fn every_call_to_a_frozen_server_fails_at_its_deadline() {
    let fixture = Fixture::start(&[]).await;
    let url = fixture.url();
    let mut endpoint = Endpoint::new(&url);
    endpoint.token = Some("root-token".into());
    endpoint.timeout = Duration::from_secs(2);
    let client = Client::connect(&endpoint).await.unwrap();
    let alice = get_pods("alice", "team-a");
    assert!(client.authorize(&alice).await.unwrap().allowed());

    let frozen = Frozen::new(fixture.server.pid());
    let two = Duration::from_secs(2);
    assert_gave_up(
        "Authorize",
        timed(client.authorize(&alice)).await,
        &url,
        two,
        "2s",
    );
    let batch = authzd::proto::BatchAuthorizeRequest {
        requests: vec![wire(&alice)],
    };
    assert_gave_up(
        "BatchAuthorize",
        timed(client.batch_authorize(batch)).await,
        &url,
        two,
        "2s",
    );
    let review = authzd::proto::SubjectAccessReviewRequest {
        action: Some(authzd::api::convert::wire_action(&alice.action)),
        user: "alice".into(),
        ..Default::default()
    };
    assert_gave_up(
        "SubjectAccessReview",
        timed(client.subject_access_review(review)).await,
        &url,
        two,
        "2s",
    );
    let who = authzd::proto::ResourceAccessReviewRequest {
        action: Some(authzd::api::convert::wire_action(&alice.action)),
        ..Default::default()
    };
    assert_gave_up(
        "ResourceAccessReview",
        timed(client.resource_access_review(who)).await,
        &url,
        two,
        "2s",
    );
    let hurried = client.clone().with_timeout(Duration::from_millis(500));
    assert_eq!(hurried.timeout(), Duration::from_millis(500));
    assert_gave_up(
        "Authorize with a shorter deadline",
        timed(hurried.authorize(&alice)).await,
        &url,
        Duration::from_millis(500),
        "500ms",
    );

    drop(frozen);
    let answered = eventually(
        Duration::from_secs(20),
        || "an answer once the server resumed".into(),
        || async { client.authorize(&alice).await.ok() },
    )
    .await;
    assert!(
        answered.allowed() && !answered.from_local_cache,
        "{answered:?}"
    );
}

/// The server is told the deadline (`grpc-timeout`): asked for a revision it has not reached,
/// it stops waiting before the caller's deadline (not after its own --max-revision-wait of
/// 5 s) and says why, instead of the caller's timer cutting it off.
#[tokio::test]
async fn the_server_is_told_the_deadline() {
    let fixture = Fixture::start(&[]).await;
    let mut endpoint = Endpoint::new(fixture.url());
    endpoint.token = Some("root-token".into());
    endpoint.timeout = Duration::from_secs(3);
    let client = Client::connect(&endpoint).await.unwrap();
    let ahead = authzd::proto::AuthorizeRequest {
        min_revision: 1_000_000,
        ..wire(&get_pods("alice", "team-a"))
    };
    let (result, took) = timed(client.authorize_request(ahead)).await;
    let status = result.expect_err("the revision is never reached");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(
        status
            .message()
            .contains("behind the requested min_revision 1000000"),
        "{status:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// Connecting carries the deadline too: a frozen TLS server's kernel accepts the connection,
/// and nothing answers the handshake.
#[tokio::test]
async fn connecting_to_a_frozen_server_fails_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy");
    std::fs::create_dir(&policy).unwrap();
    std::fs::write(policy.join("rbac.yaml"), POD_READER).unwrap();
    let ca = crate::support::ca::Ca::new("frozen-server-ca");
    let leaf = ca.leaf(&["127.0.0.1"], "authzd", &[]);
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (cert, key, ca_file) = (
        file("server.crt", &leaf.pem),
        file("server.key", &leaf.key_pem),
        file("ca.crt", &ca.pem),
    );
    let server = Server::start(
        &policy,
        &[
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-private-key-file",
            key.to_str().unwrap(),
            "--no-watch",
        ],
    );
    let url = format!("https://{}", server.addr);
    let mut endpoint = Endpoint::new(&url);
    endpoint.certificate_authority = Some(ca_file);
    endpoint.timeout = Duration::from_secs(2);
    // The server answers a connection before it is frozen.
    Client::connect(&endpoint).await.unwrap();

    let frozen = Frozen::new(server.pid());
    let started = Instant::now();
    let connected = tokio::time::timeout(Duration::from_secs(60), Client::connect(&endpoint))
        .await
        .unwrap_or_else(|_| panic!("still connecting after 60 s: the connection has no deadline"));
    let took = started.elapsed();
    let Err(error) = connected else {
        panic!("connected to a frozen server")
    };
    assert_eq!(
        error.to_string(),
        format!("no connection to {url} within 2s")
    );
    assert_eq!(
        tonic::Status::from(error).code(),
        tonic::Code::DeadlineExceeded
    );
    assert!(
        took + Duration::from_millis(50) >= Duration::from_secs(2)
            && took <= Duration::from_secs(10),
        "took {took:?}"
    );
    drop(frozen);
    eventually(
        Duration::from_secs(20),
        || "a connection once the server resumed".into(),
        || async { Client::connect(&endpoint).await.ok() },
    )
    .await;
}

/// A local cache whose server froze: once the proof runs out nothing comes from memory (a
/// question fails at its deadline instead), the follower gives up the silent stream; once the
/// server resumes it follows it again, answers from memory again, and a revocation then
/// acknowledged waits for it and is never answered stale.
#[tokio::test]
async fn a_cache_whose_server_froze_follows_it_again_and_stays_exact() {
    let fixture = Fixture::start(&[]).await;
    let url = fixture.url();
    let mut endpoint = Endpoint::new(&url);
    endpoint.token = Some("root-token".into());
    endpoint.timeout = Duration::from_secs(1);
    let client = Client::connect(&endpoint)
        .await
        .unwrap()
        .with_local_cache(LocalCacheConfig {
            max_staleness: Duration::from_secs(1),
            ..LocalCacheConfig::new("frozen-server")
        });
    let alice = get_pods("alice", "team-a");
    assert!(until_local(&client, &alice).await.allowed());

    let frozen = Frozen::new(fixture.server.pid());
    // Past the proof (1 s) and a silent probe's deadline (1 s), with a margin.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let figures = client.local_cache().unwrap().figures();
    assert!(
        !figures.fresh,
        "a proof outlived the frozen server: {figures:?}"
    );
    assert_gave_up(
        "Authorize without a proof",
        timed(client.authorize(&alice)).await,
        &url,
        Duration::from_secs(1),
        "1s",
    );
    drop(frozen);

    assert!(until_local(&client, &alice).await.allowed());
    let sent = Instant::now();
    let deleted = delete(&fixture, binding_ref("team-a", "alice-reads")).await;
    let took = sent.elapsed();
    // The stream given up still had probes queued in the frozen server, which it answers once
    // resumed: that stream may stay in its table, disconnected, until those proofs run out,
    // and a write meanwhile waits for them (at most --max-staleness) and counts it fenced.
    assert_eq!(
        deleted.subscribers_confirmed, 1,
        "the write waits for the cache that follows the server again: {deleted:?}"
    );
    assert!(deleted.subscribers_fenced <= 1, "{deleted:?}");
    assert!(took <= Duration::from_secs(5), "the write took {took:?}");
    for _ in 0..20 {
        let answer = client.authorize(&alice).await.unwrap();
        assert!(!answer.allowed(), "revoked, yet {answer:?}");
    }
    assert!(!until_local(&client, &alice).await.allowed());
}
