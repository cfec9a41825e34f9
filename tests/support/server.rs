//! The real `authzd` binary started on `127.0.0.1:0`, killed when dropped; the sample policy
//! (`tests/fixtures/sample/`); manifest and request builders.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

pub const BIN: &str = env!("CARGO_BIN_EXE_authzd");

/// RBAC: alice and group `readers` read pods cluster-wide; in `dev`, group `devs` may do
/// anything with pods and secrets, but group `interns` is denied secrets (a seed-003 deny
/// rule); eve's RoleBinding names a missing Role, which is reported as an evaluation error.
pub const RBAC_YAML: &str = include_str!("../fixtures/sample/rbac.yaml");

/// ABAC: carol may read configmaps in every namespace.
pub const ABAC_JSONL: &str = include_str!("../fixtures/sample/abac.jsonl");

/// Writes the sample policy into `dir`.
pub fn write_policy(dir: &Path) {
    std::fs::write(dir.join("rbac.yaml"), RBAC_YAML).unwrap();
    std::fs::write(dir.join("abac.jsonl"), ABAC_JSONL).unwrap();
}

/// A temp directory holding the sample policy.
pub fn sample_policy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_policy(dir.path());
    dir
}

/// Runs `command` to completion, killing it after `timeout` (a server that should have
/// refused to start, or a stuck client, must not hang the test run).
pub fn run_with_timeout(mut command: Command, timeout: Duration) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start process");
    // Drain both pipes while waiting, so a chatty child never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Runs `authzd ARGS...` with [`run_with_timeout`].
pub fn run_bin(args: &[&std::ffi::OsStr], timeout: Duration) -> std::process::Output {
    let mut command = Command::new(BIN);
    command.args(args);
    run_with_timeout(command, timeout)
}

/// A running `authzd serve`; killed (and reaped) on drop.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `authzd serve --listen 127.0.0.1:0 --policy DIR ARGS...` and waits for its
    /// `authzd listening on ADDR` line.
    pub fn start(policy: &Path, args: &[&str]) -> Server {
        Self::start_env(policy, args, &[])
    }

    /// [`Server::start`] with `env` set in the server's environment (and only there: a test
    /// never changes its own process's environment, which the tests beside it share).
    pub fn start_env(policy: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let policy = [std::ffi::OsStr::new("--policy"), policy.as_os_str()];
        Self::start_with(&policy, args, env)
    }

    /// Starts `authzd serve --listen 127.0.0.1:0 ARGS...` with no `--policy` (etcd mode).
    pub fn start_without_policy(args: &[&str]) -> Server {
        Self::start_with(&[], args, &[])
    }

    /// [`Server::start`] with the server's umask set to `umask` (octal, as the shell's `umask`
    /// takes it) by a shell that then execs the server, so the process (and its pid) is the
    /// server's. The test's own umask is shared by every test of the binary and not changed.
    pub fn start_with_umask(policy: &Path, args: &[&str], umask: &str) -> Server {
        let mut command = Command::new("sh");
        command.args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\""), BIN]);
        let policy = [std::ffi::OsStr::new("--policy"), policy.as_os_str()];
        Self::start_command(command, &policy, args)
    }

    /// Starts `authzd serve --listen 127.0.0.1:0 ARGS...` with no `--policy`, in `cwd`:
    /// what a binary started from some other directory serves.
    pub fn start_in(cwd: &Path, args: &[&str]) -> Server {
        let mut command = Command::new(BIN);
        command.current_dir(cwd);
        Self::start_command(command, &[], args)
    }

    /// [`Server::start`] as the user `uid` (group `gid`): a test run as root starts the
    /// server as a user that cannot write what root owns (root writes whatever the modes say).
    pub fn start_as_user(policy: &Path, args: &[&str], uid: u32, gid: u32) -> Server {
        use std::os::unix::process::CommandExt as _;
        let mut command = Command::new(BIN);
        command.uid(uid).gid(gid);
        let policy = [std::ffi::OsStr::new("--policy"), policy.as_os_str()];
        Self::start_command(command, &policy, args)
    }

    fn start_with(policy: &[&std::ffi::OsStr], args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(BIN);
        command.envs(env.iter().copied());
        Self::start_command(command, policy, args)
    }

    /// `command` (the binary, or what execs it) with `serve --listen 127.0.0.1:0 POLICY ARGS`.
    fn start_command(mut command: Command, policy: &[&std::ffi::OsStr], args: &[&str]) -> Server {
        let mut child = command
            .arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(policy)
            .args(args)
            // Info for the tests (the startup lines are read from it); a benchmark sets
            // AUTHZD_TEST_RUST_LOG=warn to measure the server as it is run.
            .env(
                "RUST_LOG",
                std::env::var("AUTHZD_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start authzd");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr piped");
        let log = Arc::clone(&stderr);
        // Keeps draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("authzd listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr.parse().expect("a socket address"),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "authzd did not report its address; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Server {
            child,
            addr,
            stderr,
        }
    }

    /// Starts the server and waits until health says SERVING.
    pub async fn start_serving(policy: &Path, args: &[&str]) -> Server {
        let server = Server::start(policy, args);
        server.wait_serving().await;
        server
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .expect("connect to authzd")
    }

    /// `kill -9` (std's `Child::kill` sends SIGKILL on Unix) and reap: no shutdown path runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (graceful shutdown) and waits up to `timeout` for the process to exit;
    /// returns whether it did.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// [`Self::terminate`] from an async test: waited for off the runtime, so that this
    /// process's own connections answer the server's drain, and the graceful shutdown must
    /// finish within a minute.
    pub async fn stop_gracefully(mut self) {
        let (exited, server) = tokio::task::spawn_blocking(move || {
            let exited = self.terminate(Duration::from_secs(60));
            (exited, self)
        })
        .await
        .unwrap();
        assert!(exited, "no graceful exit:\n{}", server.stderr());
    }

    /// The server's process id (to read its memory use from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub async fn wait_serving(&self) {
        wait_until_serving(&self.channel().await, || self.stderr()).await;
    }
}

/// Waits until gRPC health on `channel` says SERVING (the policy is loaded). Health needs no
/// credentials, so no refusal of the caller can be mistaken for readiness. `stderr` explains a
/// server that never gets there.
pub async fn wait_until_serving(channel: &Channel, stderr: impl Fn() -> String) {
    let mut health = HealthClient::new(channel.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| r.into_inner().status);
        if matches!(status, Ok(s) if s == ServingStatus::Serving as i32) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "authzd never became SERVING ({status:?}); stderr:\n{}",
            stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process stopped with SIGSTOP, as a frozen server looks to its clients (its kernel still
/// accepts connections and takes their bytes; nothing answers), until this is dropped
/// (SIGCONT) — a failed assertion thaws it too.
pub struct Frozen {
    pid: u32,
}

impl Frozen {
    /// Returns once every thread of `pid` is stopped: `kill` returns when the signal is sent,
    /// and a thread running on another core goes on until the kernel next interrupts it (it
    /// could still answer a request that arrives in between).
    pub fn new(pid: u32) -> Frozen {
        assert!(signal("-STOP", pid), "kill -STOP {pid} failed");
        let frozen = Frozen { pid };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "{pid} did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
        frozen
    }
}

/// Whether every thread of `pid` is in state `T` (stopped) in `/proc/PID/task/*/stat`.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.map_while(Result::ok).all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // `PID (COMM) STATE ...`: COMM may hold spaces and parentheses.
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
                .is_some_and(|state| state == 'T' || state == 't')
        })
    })
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // A process already gone (killed by the test) has nothing to resume.
        let _ = signal("-CONT", self.pid);
    }
}

fn signal(signal: &str, pid: u32) -> bool {
    Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `content` to `dir/name` the way a careful operator does (hidden temporary file, then
/// rename), so a watcher never sees a half-written policy file.
pub fn replace_file(dir: &Path, name: &str, content: &str) {
    let temp = dir.join(format!(".{name}.test-tmp"));
    std::fs::write(&temp, content).unwrap();
    std::fs::rename(&temp, dir.join(name)).unwrap();
}

/// `subjects:` of a binding: `("User" | "Group", name)` pairs.
pub fn subjects_yaml(subjects: &[(&str, &str)]) -> String {
    if subjects.is_empty() {
        return "subjects: []\n".to_string();
    }
    let mut out = String::from("subjects:\n");
    for (kind, name) in subjects {
        out.push_str(&format!(
            "- kind: {kind}\n  name: \"{name}\"\n  apiGroup: rbac.authorization.k8s.io\n"
        ));
    }
    out
}

/// A ClusterRoleBinding manifest.
pub fn cluster_role_binding(name: &str, cluster_role: &str, subjects: &[(&str, &str)]) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\n{}roleRef:\n  kind: ClusterRole\n  name: {cluster_role}\n  apiGroup: rbac.authorization.k8s.io\n",
        subjects_yaml(subjects)
    )
}

/// A RoleBinding manifest; `role_kind` is `Role` or `ClusterRole`.
pub fn role_binding(
    namespace: &str,
    name: &str,
    role_kind: &str,
    role: &str,
    subjects: &[(&str, &str)],
) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n  namespace: {namespace}\n{}roleRef:\n  kind: {role_kind}\n  name: {role}\n  apiGroup: rbac.authorization.k8s.io\n",
        subjects_yaml(subjects)
    )
}

/// ClusterRole `pod-reader`: get, list and watch pods.
pub const POD_READER: &str = include_str!("../fixtures/pod-reader.yaml");

/// `user` (in `groups`) getting pods in `namespace`: the request the caller-cache tests and
/// benches ask again and again.
pub fn get_pods(user: &str, groups: &[&str], namespace: &str) -> authzd::request::Request {
    use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
    Request {
        user: UserInfo {
            name: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: namespace.into(),
            verb: "get".into(),
            resource: "pods".into(),
            ..Default::default()
        }),
    }
}

/// `requests` Authorize calls (`get pods` in `dev`, by `users` distinct users in turn) from
/// `workers` clients at once on `channel`; whether every one was answered within `within`.
pub async fn authorize_concurrently(
    channel: &Channel,
    requests: usize,
    workers: usize,
    users: usize,
    within: Duration,
) -> bool {
    let all = async {
        let mut tasks = Vec::new();
        for worker in 0..workers {
            let mut client =
                authzd::proto::authorizer_client::AuthorizerClient::new(channel.clone());
            tasks.push(tokio::spawn(async move {
                for n in (worker..requests).step_by(workers) {
                    let user = format!("user-{}", n % users);
                    client
                        .authorize(resource_request(&user, &[], "dev", "get", "pods"))
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(within, all).await.is_ok()
}

/// An Authorize request for a resource action.
pub fn resource_request(
    user: &str,
    groups: &[&str],
    namespace: &str,
    verb: &str,
    resource: &str,
) -> authzd::proto::AuthorizeRequest {
    use authzd::proto::{action::Kind, Action, AuthorizeRequest, ResourceAttributes, UserInfo};
    AuthorizeRequest {
        user: Some(UserInfo {
            name: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }),
        action: Some(Action {
            kind: Some(Kind::ResourceAttributes(ResourceAttributes {
                namespace: namespace.into(),
                verb: verb.into(),
                resource: resource.into(),
                ..Default::default()
            })),
        }),
        ..Default::default()
    }
}

/// One JSON POST on a fresh HTTP/1.1 connection: the status and the JSON answer.
pub async fn post_json(
    addr: std::net::SocketAddr,
    path: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    use http_body_util::{BodyExt as _, Full};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .body(Full::new(hyper::body::Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

/// One GET on a fresh HTTP/1.1 connection: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_get_with(addr, path, &[]).await
}

/// [`http_get`] with `headers` (`("Authorization", "Bearer t")`) sent too.
pub async fn http_get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    raw_http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"),
    )
    .await
}

/// `request` written as it is on a fresh TCP connection (it should ask the server to close
/// it); the status code and the body.
pub async fn raw_http(addr: SocketAddr, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {response}"));
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_string());
    (code, body)
}

/// The value of the series `series` (labels as Prometheus prints them) on `/metrics`.
pub async fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let (code, text) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.trim().parse().ok())?
        })
}

/// Asserts an INVALID_ARGUMENT whose message starts with the field path.
pub fn assert_invalid<T: std::fmt::Debug>(result: Result<T, tonic::Status>, field: &str) {
    let status = result.expect_err("expected INVALID_ARGUMENT");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{field}: ")),
        "message {:?} does not name `{field}`",
        status.message()
    );
}
