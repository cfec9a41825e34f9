//! A real 3-member etcd cluster on loopback, its data on tmpfs, each member a process of its
//! own; and authzd replicas on it. Shared by the etcd tests and the etcd benchmark.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use tonic::transport::Channel;

use super::server::Server;
use super::tools::{tool_or_skip, ETCD, ETCDCTL};

/// etcd from `AUTHZD_E2E_ETCD` (set by `scripts/test.sh`), else `etcd` on PATH; `None` (and
/// why, on stderr) without one, except under `CI=true`, where a missing etcd is a failure.
pub fn etcd_binary() -> Option<PathBuf> {
    tool_or_skip(&ETCD)
}

/// etcdctl from `AUTHZD_E2E_ETCDCTL` (set by `scripts/test.sh`), else `etcdctl` on PATH; as
/// [`etcd_binary`], missing is a failure under `CI=true` and a skip otherwise.
pub fn etcdctl_binary() -> Option<PathBuf> {
    tool_or_skip(&ETCDCTL)
}

/// A free port below the kernel's ephemeral range (32768 and up on Linux), for etcd members:
/// a member restarted on its port (a restore, a killed leader) must find it free, and a port
/// from the ephemeral range can meanwhile be taken by any `:0` listener or outgoing connection
/// of a test running beside it (seen once: a restore then hung with no member up).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Spread processes apart (each test binary runs in its own process), then walk.
    let start = std::process::id().wrapping_mul(2_654_435_761) % 12_000;
    for _ in 0..12_000 {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + ((start + step.wrapping_mul(7)) % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// One etcd member, as a process of its own.
pub struct Member {
    pub name: String,
    pub child: Option<Child>,
    pub client_url: String,
    pub peer_url: String,
    pub dir: PathBuf,
}

/// A 3-member etcd cluster on loopback, its data on tmpfs.
pub struct Cluster {
    binary: PathBuf,
    pub members: Vec<Member>,
    initial: String,
    _root: tempfile::TempDir,
}

impl Cluster {
    pub fn start(binary: PathBuf) -> Cluster {
        let tmpfs = std::path::Path::new("/dev/shm");
        let root = if tmpfs.is_dir() {
            tempfile::tempdir_in(tmpfs).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                child: None,
                client_url: format!("http://127.0.0.1:{}", free_port()),
                peer_url: format!("http://127.0.0.1:{}", free_port()),
                dir: root.path().join(format!("m{i}")),
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            binary,
            members,
            initial,
            _root: root,
        };
        for i in 0..3 {
            cluster.start_member(i);
        }
        cluster
    }

    pub fn start_member(&mut self, i: usize) {
        let member = &mut self.members[i];
        let child = Command::new(&self.binary)
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&member.dir)
            .args(["--listen-client-urls", &member.client_url])
            .args(["--advertise-client-urls", &member.client_url])
            .args(["--listen-peer-urls", &member.peer_url])
            .args(["--initial-advertise-peer-urls", &member.peer_url])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "authzd-test"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        member.child = Some(child);
    }

    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client_url.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Saves a snapshot of the cluster's data (through member 0) to `file` with `etcdctl`.
    pub fn snapshot(&self, etcdctl: &std::path::Path, file: &std::path::Path) {
        let out = Command::new(etcdctl)
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &self.members[0].client_url,
                "snapshot",
                "save",
            ])
            .arg(file)
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Disaster recovery as etcd documents it: every member stopped, its data restored from
    /// `file` into a new data directory (`etcdctl snapshot restore`), and started again at the
    /// same addresses. The revision goes back to the snapshot's.
    pub fn restore(&mut self, etcdctl: &std::path::Path, file: &std::path::Path) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for i in 0..self.members.len() {
            let member = &mut self.members[i];
            member.dir = member.dir.with_extension("restored");
            let out = Command::new(etcdctl)
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(file)
                .args(["--name", &member.name])
                .arg("--data-dir")
                .arg(&member.dir)
                .args(["--initial-cluster", &self.initial])
                .args(["--initial-cluster-token", "authzd-test"])
                .args(["--initial-advertise-peer-urls", &member.peer_url])
                .output()
                .expect("run etcdctl");
            assert!(
                out.status.success(),
                "etcdctl snapshot restore: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            self.start_member(i);
        }
    }

    pub fn signal(&self, i: usize, signal: &str) {
        if let Some(child) = &self.members[i].child {
            signal_process(child.id(), signal);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(child) = &mut member.child {
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(child.id().to_string())
                    .status();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Sends `signal` to `pid`; for `STOP`, returns once every thread of the process is stopped
/// (the kill returns before the stop takes effect, and a replica could still apply a change
/// in between).
pub fn signal_process(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status();
    if signal != "STOP" {
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let stopped = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.flatten().all(|task| {
                    std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                        // The state follows the command name in parentheses.
                        stat.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
                    })
                })
            })
            .unwrap_or(true);
        if stopped {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// One authzd replica in etcd mode (a real `authzd serve --etcd-servers` process) and its
/// clients.
pub struct Replica {
    pub server: Server,
    pub authz: AuthorizerClient<Channel>,
    pub admin: PolicyAdminClient<Channel>,
}

impl Replica {
    pub async fn start(cluster: &Cluster, prefix: &str, id: &str, extra: &[&str]) -> Replica {
        let endpoints = cluster.endpoints();
        let mut args = vec![
            "--etcd-servers",
            &endpoints,
            "--etcd-prefix",
            prefix,
            "--replica-id",
            id,
        ];
        args.extend_from_slice(extra);
        let server = Server::start_without_policy(&args);
        server.wait_serving().await;
        let channel = server.channel().await;
        Replica {
            authz: AuthorizerClient::new(channel.clone()),
            admin: PolicyAdminClient::new(channel),
            server,
        }
    }

    pub async fn ask(
        &mut self,
        request: &authzd::proto::AuthorizeRequest,
    ) -> Result<authzd::proto::AuthorizeResponse, tonic::Status> {
        self.authz
            .authorize(request.clone())
            .await
            .map(tonic::Response::into_inner)
    }

    pub async fn apply(&mut self, manifest: &str) -> authzd::proto::ApplyResponse {
        self.admin
            .apply(authzd::proto::ApplyRequest {
                manifest: manifest.into(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("apply: {e:?}\n{}", self.server.stderr()))
            .into_inner()
    }

    pub async fn delete_binding(&mut self, name: &str) -> authzd::proto::DeleteResponse {
        self.admin
            .delete(authzd::proto::DeleteRequest {
                object: Some(authzd::proto::ObjectRef {
                    kind: "ClusterRoleBinding".into(),
                    namespace: String::new(),
                    name: name.into(),
                }),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("delete: {e:?}\n{}", self.server.stderr()))
            .into_inner()
    }

    pub fn signal(&self, signal: &str) {
        signal_process(self.server.pid(), signal);
    }
}

/// A key prefix no other run uses: `/authzd-TAG-PID-NANOS/`.
pub fn unique_prefix(tag: &str) -> String {
    format!(
        "/authzd-{tag}-{}-{}/",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}
