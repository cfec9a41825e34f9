//! The client commands (`apply`, `delete`, `get`, `watch`, `status`, `ask`) as a person runs
//! them: the real `authzd` binary as the client, against the real binary serving a temp policy
//! directory. Output, stderr and exit codes (0 done, 1 server/connection error, 2 usage error);
//! `--timeout` against a server frozen with SIGSTOP.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::server::{run_bin, run_with_timeout, sample_policy, Frozen, Server, BIN};

const TIMEOUT: Duration = Duration::from_secs(60);

/// `authzd ARGS... --server URL`.
fn client(server: &Server, args: &[&str]) -> Output {
    let url = server.url();
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.extend([OsStr::new("--server"), OsStr::new(&url)]);
    run_bin(&all, TIMEOUT)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// The server's revision, from `authzd status`.
fn revision(server: &Server) -> u64 {
    let out = client(server, &["status"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    text.lines()
        .find_map(|l| l.strip_prefix("revision: "))
        .unwrap_or_else(|| panic!("no revision line in:\n{text}"))
        .parse()
        .unwrap()
}

fn cluster_role(name: &str, verb: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [\"{verb}\"]\n"
    )
}

fn role_binding(namespace: &str, name: &str, role: &str, user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n  \
         namespace: {namespace}\nsubjects:\n- kind: User\n  name: {user}\n  \
         apiGroup: rbac.authorization.k8s.io\nroleRef:\n  kind: ClusterRole\n  name: {role}\n  \
         apiGroup: rbac.authorization.k8s.io\n"
    )
}

/// A manifest file outside the policy directory (the server writes into that one).
fn manifest_file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn apply_get_list_delete_round_trip() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let files = tempfile::tempdir().unwrap();
    assert_eq!(revision(&server), 1);

    let manifest = format!(
        "{}---\n{}",
        cluster_role("cm-reader", "get"),
        role_binding("dev", "read-cm", "cm-reader", "zed")
    );
    let file = manifest_file(&files, "cm.yaml", &manifest);
    let out = client(&server, &["apply", "-f", &file]);
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "ClusterRole/cm-reader applied\nRoleBinding/dev/read-cm applied\nrevision 2\n"
    );
    assert_eq!(revision(&server), 2);

    let out = client(&server, &["get", "clusterrole", "cm-reader"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("kind: ClusterRole\n"), "{text}");
    assert!(text.contains("name: cm-reader\n"), "{text}");
    assert!(text.contains("configmaps"), "{text}");
    assert!(!text.contains("---"), "one object, one document:\n{text}");

    let out = client(&server, &["get", "rolebinding", "read-cm", "-n", "dev"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("namespace: dev\n"), "{text}");
    assert!(text.contains("name: zed"), "{text}");

    // Listing: the shipped pod-reader and the new one, as one YAML stream.
    let out = client(&server, &["get", "clusterroles"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let documents: Vec<&str> = text.split("---\n").collect();
    assert_eq!(documents.len(), 2, "{text}");
    assert!(
        documents.iter().any(|d| d.contains("name: cm-reader")),
        "{text}"
    );
    assert!(
        documents.iter().any(|d| d.contains("name: pod-reader")),
        "{text}"
    );
    // Namespaced kinds list every namespace, or the one asked for.
    let out = client(&server, &["get", "rolebindings"]);
    assert_eq!(stdout(&out).matches("kind: RoleBinding").count(), 4);
    let out = client(&server, &["get", "rb", "-n", "dev"]);
    assert_exit(&out, 2); // `rb` is not a kind name
    let out = client(&server, &["get", "RoleBindings", "-n", "default"]);
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "");
    assert!(stderr(&out).contains("no RoleBinding objects found in namespace default"));

    let out = client(&server, &["delete", "clusterroles", "cm-reader"]);
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "deleted at revision 3\n");
    assert_eq!(revision(&server), 3);

    let out = client(&server, &["get", "clusterrole", "cm-reader"]);
    assert_exit(&out, 1);
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out).trim_end(),
        "error: NotFound: ClusterRole `cm-reader` not found"
    );
    let out = client(&server, &["delete", "clusterrole", "cm-reader"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).starts_with("error: NotFound: "),
        "{}",
        stderr(&out)
    );

    // Re-applying an unchanged object is not a change.
    let out = client(&server, &["apply", "-f", &file]);
    assert_exit(&out, 0);
    assert!(stdout(&out).ends_with("revision 4\n"), "{}", stdout(&out)); // cm-reader is back
    let out = client(&server, &["apply", "-f", &file]);
    assert!(stdout(&out).ends_with("revision 4\n"), "{}", stdout(&out));
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let files = tempfile::tempdir().unwrap();
    let file = manifest_file(&files, "r.yaml", &cluster_role("tentative", "list"));

    let out = client(&server, &["apply", "--dry-run", "-f", &file]);
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "ClusterRole/tentative applied (dry run)\nrevision 1 (dry run)\nno access changes\n\
         traffic: 0 of 0 cached requests would flip\n"
    );
    assert_eq!(revision(&server), 1);
    let out = client(&server, &["get", "clusterrole", "tentative"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("NotFound"), "{}", stderr(&out));
    // The policy's two files, and the writer's lock taken at startup (docs/policy.md §2).
    let names: Vec<String> = std::fs::read_dir(policy.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != authzd::store::lock::LOCK_NAME)
        .collect();
    assert_eq!(
        names.len(),
        2,
        "nothing written to the policy directory: {names:?}"
    );

    // A dry run still validates.
    let bad = manifest_file(&files, "bad.yaml", "kind: ClusterRole\nmetadata: {}\n");
    let out = client(&server, &["apply", "--dry-run", "-f", &bad]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).starts_with("error: InvalidArgument: "),
        "{}",
        stderr(&out)
    );
}

/// Runs `authzd ARGS... --server URL` with `input` on stdin.
fn client_with_stdin(server: &Server, args: &[&str], input: &str) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .arg("--server")
        .arg(server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let deadline = Instant::now() + TIMEOUT;
    while !waiter.is_finished() {
        assert!(Instant::now() < deadline, "authzd did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().unwrap()
}

#[tokio::test]
async fn apply_several_files_and_stdin_in_order() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let files = tempfile::tempdir().unwrap();
    let first = manifest_file(&files, "a.yaml", &cluster_role("a", "get"));
    let out = client_with_stdin(
        &server,
        &["apply", "-f", &first, "-f", "-"],
        &role_binding("dev", "b", "a", "yan"),
    );
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "ClusterRole/a applied\nrevision 2\nRoleBinding/dev/b applied\nrevision 3\n"
    );

    // A file that cannot be read is a usage error, and nothing is sent, not even the good file.
    let second = manifest_file(&files, "c.yaml", &cluster_role("c", "get"));
    let missing = files.path().join("missing.yaml").display().to_string();
    let out = client(&server, &["apply", "-f", &second, "-f", &missing]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).starts_with(&format!("error: cannot read {missing}: ")),
        "{}",
        stderr(&out)
    );
    assert_eq!(revision(&server), 3);

    // A later file the server refuses stops there; the earlier ones stay applied.
    let bad = manifest_file(&files, "bad.yaml", "kind: Nope\n");
    let out = client(&server, &["apply", "-f", &second, "-f", &bad]);
    assert_exit(&out, 1);
    assert_eq!(stdout(&out), "ClusterRole/c applied\nrevision 4\n");
    assert!(
        stderr(&out).starts_with(&format!("error: InvalidArgument: {bad}: manifest:")),
        "{}",
        stderr(&out)
    );

    // AUTHZD_SERVER stands in for --server.
    let mut command = Command::new(BIN);
    command.arg("status").env("AUTHZD_SERVER", server.url());
    let out = run_with_timeout(command, TIMEOUT);
    assert_exit(&out, 0);
    assert!(stdout(&out).starts_with("revision: 4\nlast error: none\n"));
}

#[tokio::test]
async fn a_bad_manifest_is_refused_naming_its_line() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let files = tempfile::tempdir().unwrap();
    // Line 14 (the second document's `rules`) is not a list.
    let text = format!(
        "{}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: x\nrules: 7\n",
        cluster_role("fine", "get")
    );
    assert_eq!(text.lines().position(|l| l == "rules: 7"), Some(13));
    let bad = manifest_file(&files, "bad.yaml", &text);
    let out = client(&server, &["apply", "-f", &bad]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("error: InvalidArgument: {bad}: manifest:")),
        "{err}"
    );
    assert!(err.contains("manifest:14"), "{err}");
    assert_eq!(stdout(&out), "");
    // All or nothing: the good object before it was not applied either.
    assert_eq!(revision(&server), 1);

    let broken = manifest_file(&files, "broken.yaml", "kind: ClusterRole\nrules: [\n");
    let out = client(&server, &["apply", "-f", &broken]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("manifest:2"), "{}", stderr(&out));
}

/// `authzd watch ...` running in the background, its stdout collected as it comes.
struct Watch {
    child: Child,
    stdout: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Watch {
    fn start(server: &Server, args: &[&str]) -> Watch {
        let mut child = Command::new(BIN)
            .arg("watch")
            .args(args)
            .arg("--server")
            .arg(server.url())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stdout.take().unwrap();
        let sink = Arc::clone(&stdout);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Watch {
            child,
            stdout,
            reader: Some(reader),
        }
    }

    fn output(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until the output contains every line of `lines`.
    fn wait_for(&mut self, lines: &[&str]) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let out = self.output();
            if lines.iter().all(|l| out.lines().any(|got| got == *l)) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("watch exited ({status}) before printing {lines:?}; it printed:\n{out}");
            }
            assert!(
                Instant::now() < deadline,
                "watch did not print {lines:?}; it printed:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the watcher and returns everything it printed.
    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.output()
    }

    /// Waits for the watcher to exit by itself; returns its exit code and stderr.
    fn wait_exit(mut self) -> (Option<i32>, String, String) {
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "watch did not exit; it printed:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            pipe.read_to_string(&mut err).unwrap();
        }
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status.code(), err, self.output())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn watch_from_a_revision_prints_earlier_and_later_writes() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let files = tempfile::tempdir().unwrap();

    // Revision 2 happens before the watch starts: it comes from the server's history.
    let before = manifest_file(&files, "before.yaml", &cluster_role("early", "get"));
    assert_exit(&client(&server, &["apply", "-f", &before]), 0);

    let mut watch = Watch::start(&server, &["--from-revision", "1", "--manifests"]);
    watch.wait_for(&["2 ADDED ClusterRole/early"]);

    // Writes made meanwhile arrive live, in order.
    let during = manifest_file(
        &files,
        "during.yaml",
        &format!(
            "{}---\n{}",
            cluster_role("early", "list"),
            role_binding("dev", "late", "early", "kim")
        ),
    );
    assert_exit(&client(&server, &["apply", "-f", &during]), 0);
    assert_exit(
        &client(&server, &["delete", "rolebinding", "late", "-n", "dev"]),
        0,
    );
    watch.wait_for(&["4 DELETED RoleBinding/dev/late"]);

    let out = watch.kill();
    let events: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(
        events,
        [
            "2 ADDED ClusterRole/early",
            "3 MODIFIED ClusterRole/early",
            "3 ADDED RoleBinding/dev/late",
            "4 DELETED RoleBinding/dev/late",
        ],
        "{out}"
    );
    // --manifests: each event's manifest, indented under its line.
    assert!(out.contains("\n  kind: ClusterRole\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("  ") && l.trim() == "- list"),
        "the modified rule:\n{out}"
    );

    // From now on (the default), without manifests: only what happens after it starts.
    let mut watch = Watch::start(&server, &[]);
    // The watcher may subscribe after the first write below; keep writing until it sees one.
    let mut verb = 0;
    let mut expected = String::new();
    let deadline = Instant::now() + TIMEOUT;
    while !watch.output().contains("MODIFIED ClusterRole/early") {
        assert!(Instant::now() < deadline, "{}", watch.output());
        verb += 1;
        let file = manifest_file(
            &files,
            "v.yaml",
            &cluster_role("early", &format!("v{verb}")),
        );
        let out = client(&server, &["apply", "-f", &file]);
        assert_exit(&out, 0);
        expected = stdout(&out);
        std::thread::sleep(Duration::from_millis(100));
    }
    let last_revision = expected.trim_end().rsplit(' ').next().unwrap().to_string();
    watch.wait_for(&[&format!("{last_revision} MODIFIED ClusterRole/early")]);
    let out = watch.kill();
    assert!(
        out.lines()
            .all(|l| l.ends_with(" MODIFIED ClusterRole/early")),
        "only events, no manifests, nothing from before:\n{out}"
    );
}

#[tokio::test]
async fn watch_ends_with_the_servers_message_on_a_stream_error() {
    // 1500 ClusterRoles, all modified by one apply: more events at once than the server
    // buffers for a watcher (1024), so the stream ends with DATA_LOSS.
    const ROLES: usize = 1500;
    let policy = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let many = |verb: &str| {
        let mut text = String::new();
        for i in 0..ROLES {
            let _ = write!(text, "---\n{}", cluster_role(&format!("r{i}"), verb));
        }
        text
    };
    std::fs::write(policy.path().join("many.yaml"), many("get")).unwrap();
    let server = Server::start_serving(policy.path(), &[]).await;

    // Subscribed once revision 2's event (from history) is printed.
    let one = manifest_file(&files, "one.yaml", &cluster_role("marker", "get"));
    assert_exit(&client(&server, &["apply", "-f", &one]), 0);
    let mut watch = Watch::start(&server, &["--from-revision", "1"]);
    watch.wait_for(&["2 ADDED ClusterRole/marker"]);

    let all = manifest_file(&files, "all.yaml", &many("list"));
    assert_exit(&client(&server, &["apply", "-f", &all]), 0);
    let (code, err, out) = watch.wait_exit();
    assert_eq!(
        code,
        Some(1),
        "stderr:\n{err}\nstdout (tail):\n{}",
        tail(&out)
    );
    assert!(
        err.starts_with("error: DataLoss: watch fell behind by "),
        "stderr:\n{err}"
    );
    assert!(err.contains("list again"), "{err}");
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

#[test]
fn an_unreachable_server_exits_one_saying_so() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    for args in [&["status"][..], &["get", "clusterroles"], &["watch"]] {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--server", &url]);
        let all: Vec<&OsStr> = all.iter().map(OsStr::new).collect();
        let out = run_bin(&all, TIMEOUT);
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("error: Unavailable: cannot connect to {url}: ")),
            "{err}"
        );
        assert!(err.contains("onnection refused"), "{err}");
        assert_eq!(stdout(&out), "");
    }
}

#[test]
fn a_server_that_never_answers_times_out() {
    // Accepts connections and says nothing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let _held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().map_while(Result::ok) {
            open.push(stream);
        }
    });
    let started = Instant::now();
    let out = run_bin(
        &[
            OsStr::new("status"),
            OsStr::new("--server"),
            OsStr::new(&url),
            OsStr::new("--timeout"),
            OsStr::new("500ms"),
        ],
        TIMEOUT,
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).starts_with("error: DeadlineExceeded: "),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("within 500ms"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn usage_errors_exit_two_without_contacting_a_server() {
    let cases: &[(&[&str], &str)] = &[
        (&["get", "role", "x"], "a Role is namespaced"),
        (
            &["delete", "clusterrole", "x", "-n", "dev"],
            "cluster-scoped",
        ),
        (&["get", "widgets"], "unknown kind `widgets`"),
        (&["delete", "role"], "required"),
        (&["apply"], "--filename"),
        (&["apply", "-f", "-", "-f", "-"], "only once"),
        (&["status", "--server", "ftp://x:1"], "scheme `ftp`"),
        (&["status", "--client-key", "k.pem"], "--client-certificate"),
        (&["status", "--timeout", "10"], "needs a unit"),
        (&["watch", "--from-revision=-1"], "--from-revision"),
    ];
    // Unreachable on purpose: a usage error must be reported before any connection.
    for (args, message) in cases {
        let mut all: Vec<&str> = args.to_vec();
        if !all.contains(&"--server") {
            all.extend(["--server", "http://127.0.0.1:1"]);
        }
        let all: Vec<&OsStr> = all.iter().map(OsStr::new).collect();
        let out = run_bin(&all, TIMEOUT);
        assert_exit(&out, 2);
        assert!(
            stderr(&out).contains(message),
            "{args:?}: expected {message:?} in:\n{}",
            stderr(&out)
        );
    }
    let missing = Path::new("/nonexistent/authzd-test/missing.yaml");
    let out = run_bin(
        &[
            OsStr::new("apply"),
            OsStr::new("-f"),
            missing.as_os_str(),
            OsStr::new("--server"),
            OsStr::new("http://127.0.0.1:1"),
        ],
        TIMEOUT,
    );
    assert_exit(&out, 2);
    assert!(
        stderr(&out).starts_with("error: cannot read /nonexistent/authzd-test/missing.yaml: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let out = run_bin(&[OsStr::new("--help")], TIMEOUT);
    assert_exit(&out, 0);
    let text = stdout(&out);
    for command in ["apply", "delete", "get", "watch", "status"] {
        assert!(text.contains(&format!("  {command} ")), "{text}");
    }
    assert!(text.contains("Exit codes:"), "{text}");
    let out = run_bin(&[OsStr::new("get"), OsStr::new("--help")], TIMEOUT);
    let text = stdout(&out);
    assert!(text.contains("error: CODE: MESSAGE"), "{text}");
    assert!(text.contains("AUTHZD_SERVER"), "{text}");
}

/// `apply -f DIR` applies a directory's manifests as the policy loader reads the directory
/// (recursively, sorted, dot-files and other extensions skipped), each file one request; ABAC
/// lines files are skipped, and said so on stderr.
#[tokio::test]
async fn apply_takes_a_directory() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let files = tempfile::tempdir().unwrap();
    let dir = files.path();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a.yaml"), cluster_role("dir-reader", "get")).unwrap();
    std::fs::write(
        dir.join("sub/b.yaml"),
        role_binding("dev", "dir-read", "dir-reader", "zed"),
    )
    .unwrap();
    std::fs::write(dir.join(".hidden.yaml"), cluster_role("hidden", "get")).unwrap();
    std::fs::write(dir.join("notes.txt"), "not policy").unwrap();
    std::fs::write(
        dir.join("c.jsonl"),
        r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"user": "zed", "namespace": "*", "resource": "*", "apiGroup": "*"}}"#,
    )
    .unwrap();

    let out = client(&server, &["apply", "-f", dir.to_str().unwrap()]);
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "ClusterRole/dir-reader applied\nrevision 2\nRoleBinding/dev/dir-read applied\nrevision 3\n"
    );
    assert!(
        stderr(&out).contains(&format!(
            "authzd: skipping {}: ABAC lines",
            dir.join("c.jsonl").display()
        )),
        "{}",
        stderr(&out)
    );
    assert_exit(
        &client(&server, &["get", "rolebinding", "dir-read", "-n", "dev"]),
        0,
    );
    assert_exit(&client(&server, &["get", "clusterrole", "hidden"]), 1);

    let missing = dir.join("nonexistent");
    let out = client(&server, &["apply", "-f", missing.to_str().unwrap()]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).starts_with("error: cannot read "),
        "{}",
        stderr(&out)
    );
}

/// The subscriber lines of `authzd status` (under `subscribers:`, header first), or
/// `subscribers: none`.
fn subscriber_lines(server: &Server) -> Vec<String> {
    let out = client(server, &["status"]);
    assert_exit(&out, 0);
    stdout(&out)
        .lines()
        .skip_while(|line| !line.starts_with("subscribers:"))
        .map(str::to_string)
        .collect()
}

/// `authzd status` lists the callers' caches subscribed to the server, one line each: a real
/// `authzd ask --local-cache` process at the server's revision with a recent heartbeat, then,
/// killed, disconnected until its proof has expired, then none.
#[tokio::test]
async fn status_lists_the_subscribers_one_line_each() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &["--max-staleness", "1s"]).await;
    assert_eq!(subscriber_lines(&server), ["subscribers: none"]);

    let mut ask = Command::new(BIN)
        .args(["ask", "--server", &server.url(), "--local-cache"])
        .args(["--subscriber-id", "cli-cache"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listed = crate::support::wait::eventually_blocking(
        Duration::from_secs(10),
        || {
            format!(
                "`cli-cache` listed with a heartbeat: {:?}",
                subscriber_lines(&server)
            )
        },
        || {
            let lines = subscriber_lines(&server);
            (lines.len() == 3 && lines[2].contains(" ago")).then_some(lines)
        },
    );
    assert_eq!(
        listed[..2],
        ["subscribers:", "  SUBSCRIBER  APPLIED  HEARTBEAT  NOTE"]
    );
    let fields: Vec<&str> = listed[2].split_whitespace().collect();
    assert_eq!(fields[..2], ["cli-cache", "1"], "{listed:?}");
    assert_eq!(
        fields.len(),
        4,
        "no note for a current subscriber: {listed:?}"
    );
    assert!(fields[2].ends_with('s') && fields[3] == "ago", "{listed:?}");

    // A write waits for the subscriber, and `apply` says so.
    let files = tempfile::tempdir().unwrap();
    let file = manifest_file(&files, "r.yaml", &cluster_role("while-subscribed", "list"));
    let out = client(&server, &["apply", "-f", &file]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).ends_with("caller caches: 1 confirmed\n"),
        "{}",
        stdout(&out)
    );

    let _ = ask.kill();
    let _ = ask.wait();
    crate::support::wait::eventually_blocking(
        Duration::from_secs(10),
        || {
            format!(
                "`cli-cache` listed disconnected: {:?}",
                subscriber_lines(&server)
            )
        },
        || {
            let lines = subscriber_lines(&server);
            (lines.len() == 3 && lines[2].ends_with("disconnected")).then_some(())
        },
    );
    crate::support::wait::eventually_blocking(
        Duration::from_secs(10),
        || format!("no subscriber listed: {:?}", subscriber_lines(&server)),
        || (subscriber_lines(&server) == ["subscribers: none"]).then_some(()),
    );
}

/// A server frozen with SIGSTOP (its kernel still accepts connections; nothing answers):
/// `authzd ask --timeout 2s`, with and without its local cache, and `authzd status` each exit 1
/// a few seconds after the deadline at most, naming the server and the deadline. Resumed, the
/// server answers `ask` again.
#[tokio::test]
async fn client_commands_give_up_on_a_frozen_server_at_their_timeout() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let expected = format!(
        "error: DeadlineExceeded: no answer from {} within 2s",
        server.url()
    );
    let question = ["alice", "get", "pods", "default"];
    let frozen = Frozen::new(server.pid());
    for command in [&["ask"][..], &["ask", "--local-cache"], &["status"]] {
        let mut args = command.to_vec();
        if command[0] == "ask" {
            args.extend(question);
        }
        args.extend(["--timeout", "2s"]);
        let started = Instant::now();
        let out = client(&server, &args);
        let took = started.elapsed();
        assert_exit(&out, 1);
        assert!(
            stderr(&out).lines().any(|line| line == expected),
            "{args:?}: expected {expected:?} in:\n{}",
            stderr(&out)
        );
        // The deadline, plus a loaded machine's start-up and scheduling; not 600 s.
        assert!(
            took + Duration::from_millis(50) >= Duration::from_secs(2)
                && took <= Duration::from_secs(10),
            "{args:?} took {took:?} with --timeout 2s"
        );
    }
    drop(frozen);
    let mut args = vec!["ask"];
    args.extend(question);
    let out = client(&server, &args);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).starts_with("allow remote "),
        "{}",
        stdout(&out)
    );
}

/// `ask` spells a decision as test files and JSON answers do: `no_opinion`, not `noopinion`.
#[tokio::test]
async fn ask_says_no_opinion_as_everything_else_does() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let out = client(&server, &["ask", "nobody", "get", "pods", "default"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("no_opinion remote "), "{text}");
}
