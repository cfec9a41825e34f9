//! `--spawn`: write the synthetic policy as manifests to a temporary directory and start
//! `authzd serve` on it, the way the integration tests do: read `authzd listening on ADDR`
//! from its stderr, then wait for health `SERVING` (the policy has compiled).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tonic::transport::Endpoint;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::LoadgenError;
use crate::policy::render::policy_to_multi_yaml;
use crate::synth::{self, Shape};

/// How long authzd may take to print its address, and then to compile the policy.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const SERVING_TIMEOUT: Duration = Duration::from_secs(120);
/// Stderr lines kept to explain a failure.
const KEPT_LINES: usize = 20;

/// The authzd binary: `AUTHZD_BIN`, else `authzd` next to this executable.
pub fn authzd_binary() -> Result<PathBuf, LoadgenError> {
    if let Some(path) = std::env::var_os("AUTHZD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|source| LoadgenError::Io {
        what: "cannot find this executable".into(),
        source,
    })?;
    let bin = exe
        .parent()
        .map(|dir| dir.join(format!("authzd{}", std::env::consts::EXE_SUFFIX)));
    match bin {
        Some(bin) if bin.is_file() => Ok(bin),
        _ => Err(LoadgenError::Spawn(format!(
            "no `authzd` next to `{}`: build it (`cargo build --release --bins`) or set AUTHZD_BIN",
            exe.display()
        ))),
    }
}

/// Writes the synthetic policy of `shape` (seed `seed`) as `synthetic.yaml` into `dir`.
pub fn write_policy(dir: &Path, shape: &Shape, seed: u64) -> Result<PathBuf, LoadgenError> {
    let policy = synth::policy(shape, seed);
    let file = dir.join("synthetic.yaml");
    std::fs::write(&file, policy_to_multi_yaml(&policy)).map_err(|source| LoadgenError::Io {
        what: format!("cannot write `{}`", file.display()),
        source,
    })?;
    Ok(file)
}

/// A directory removed (with its contents) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, LoadgenError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("authzd-loadgen-{}-{nanos:09}", std::process::id()));
        std::fs::create_dir(&path).map_err(|source| LoadgenError::Io {
            what: format!("cannot create `{}`", path.display()),
            source,
        })?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How authzd is asked to listen, and how to reach it once it does.
pub enum Listen {
    /// `--listen 127.0.0.1:0`; reached at the address it prints.
    Tcp,
    /// `--listen unix://PATH`; reached at `unix:PATH`.
    Unix(PathBuf),
}

/// A spawned authzd; killed (and reaped) on drop, its policy directory removed.
pub struct Authzd {
    child: Child,
    pub endpoint: String,
    log: Arc<Mutex<VecDeque<String>>>,
    _policy: TempDir,
}

/// What came of starting authzd.
pub enum Started {
    Running(Authzd),
    /// authzd exited before listening when asked for a listener it does not support.
    Unsupported(String),
}

fn log_tail(log: &Mutex<VecDeque<String>>) -> String {
    log.lock()
        .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

impl Authzd {
    /// Writes the policy, starts `authzd serve` and waits for its address. Blocking.
    pub fn start(
        bin: &Path,
        listen: &Listen,
        shape: &Shape,
        seed: u64,
        cache_size: Option<usize>,
    ) -> Result<Started, LoadgenError> {
        let dir = TempDir::new()?;
        write_policy(&dir.0, shape, seed)?;
        let listen_arg = match listen {
            Listen::Tcp => "127.0.0.1:0".to_string(),
            Listen::Unix(path) => format!("unix://{}", path.display()),
        };
        let mut command = Command::new(bin);
        command
            .arg("serve")
            .arg("--listen")
            .arg(&listen_arg)
            .arg("--policy")
            .arg(&dir.0);
        if let Some(size) = cache_size {
            command.arg("--cache-size").arg(size.to_string());
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| LoadgenError::Io {
                what: format!("cannot start `{}`", bin.display()),
                source,
            })?;
        let log = Arc::new(Mutex::new(VecDeque::with_capacity(KEPT_LINES)));
        let (tx, rx) = mpsc::channel();
        if let Some(pipe) = child.stderr.take() {
            let log = Arc::clone(&log);
            // Keeps draining stderr so authzd never blocks on a full pipe.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Some(addr) = line.strip_prefix("authzd listening on ") {
                        let _ = tx.send(addr.trim().to_string());
                    }
                    if let Ok(mut log) = log.lock() {
                        if log.len() == KEPT_LINES {
                            log.pop_front();
                        }
                        log.push_back(line);
                    }
                }
            });
        }
        let mut authzd = Authzd {
            child,
            endpoint: String::new(),
            log,
            _policy: dir,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => {
                authzd.endpoint = match listen {
                    Listen::Tcp => format!("http://{addr}"),
                    Listen::Unix(path) => format!("unix:{}", path.display()),
                };
                Ok(Started::Running(authzd))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Stderr closed without an address: authzd exited (or is about to).
                let status = authzd
                    .child
                    .wait()
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                let log = log_tail(&authzd.log);
                match listen {
                    Listen::Unix(_) => Ok(Started::Unsupported(format!(
                        "`authzd serve --listen {listen_arg}` exited ({status}): {}",
                        log.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
                    ))),
                    Listen::Tcp => Err(LoadgenError::Spawn(format!(
                        "authzd exited ({status}) before listening on `{listen_arg}`:\n{log}"
                    ))),
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(LoadgenError::Spawn(format!(
                "authzd did not report its address within {START_TIMEOUT:?}:\n{}",
                log_tail(&authzd.log)
            ))),
        }
    }

    /// Waits until health says `SERVING` (the policy compiled), or authzd exits.
    pub async fn wait_serving(&mut self) -> Result<(), LoadgenError> {
        let deadline = Instant::now() + SERVING_TIMEOUT;
        let endpoint = Endpoint::from_shared(self.endpoint.clone()).map_err(|source| {
            LoadgenError::Connect {
                target: self.endpoint.clone(),
                source,
            }
        })?;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(LoadgenError::Spawn(format!(
                    "authzd exited ({status}) before serving:\n{}",
                    log_tail(&self.log)
                )));
            }
            let last = match endpoint.connect().await {
                Ok(channel) => {
                    let answer = HealthClient::new(channel)
                        .check(HealthCheckRequest {
                            service: String::new(),
                        })
                        .await;
                    match answer {
                        Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => {
                            return Ok(())
                        }
                        Ok(r) => format!("health status {}", r.get_ref().status),
                        Err(status) => status.to_string(),
                    }
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(LoadgenError::Spawn(format!(
                    "authzd was not SERVING within {SERVING_TIMEOUT:?} ({last}):\n{}",
                    log_tail(&self.log)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Authzd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
