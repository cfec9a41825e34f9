//! `authzd proxy` in front of an authzd frozen with SIGSTOP (its kernel still accepts
//! connections; nothing answers): a request authzd must decide is answered 500 within the
//! proxy's `--authzd-timeout` — whether its local cache never held the answer or its proof
//! ran out — and once authzd resumes the same requests are decided again, so the 500 was
//! never kept. docs/proxy.md §2, step 5.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::server::{Frozen, Server, BIN};
use crate::support::tools::{tool_or_skip, CURL};

/// The proxy's identity at authzd (it asks about others and follows the invalidation stream).
const AUTHZD_TOKENS: &str = "proxy-token,authzd-proxy,uid-p,system:masters\n";
/// The caller, granted `get /metrics` by tests/fixtures/metrics-url.yaml.
const CALLER_TOKENS: &str =
    "sa-token,system:serviceaccount:default:default,uid-sa,system:serviceaccounts\n";
const AUTHORIZATION: &str = "Authorization: Bearer sa-token";

/// `authzd proxy`, its stderr kept for failure messages; killed when dropped.
struct Proxy {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Proxy {
    fn start(mut command: Command) -> Proxy {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start authzd proxy");
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("authzd proxy listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!("the proxy announced no address:\n{}", log.lock().unwrap());
        };
        Proxy { child, addr, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that answers every request `200 upstream`, on threads of its own (the test
/// blocks on curl).
fn upstream() -> std::net::SocketAddr {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nupstream",
                );
            });
        }
    });
    addr
}

/// curl's status and body for a GET as the caller, and how long it took (curl gives up after
/// 60 s: a proxy that waits that long has no deadline).
fn get(curl: &PathBuf, url: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let output = Command::new(curl)
        .args([
            "-s",
            "--max-time",
            "60",
            "-w",
            "\n%{http_code}",
            "-H",
            AUTHORIZATION,
            url,
        ])
        .output()
        .expect("run curl");
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_string(), took)
}

#[tokio::test]
async fn a_frozen_authzd_is_answered_500_within_the_proxys_timeout() {
    let Some(curl) = tool_or_skip(&CURL) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy");
    std::fs::create_dir(&policy).unwrap();
    std::fs::write(
        policy.join("metrics-url.yaml"),
        crate::support::fixture("metrics-url.yaml"),
    )
    .unwrap();
    let authzd_tokens = dir.path().join("authzd-tokens.csv");
    std::fs::write(&authzd_tokens, AUTHZD_TOKENS).unwrap();
    let callers = dir.path().join("callers.csv");
    std::fs::write(&callers, CALLER_TOKENS).unwrap();
    let authzd = Server::start_serving(
        &policy,
        &[
            "--token-auth-file",
            authzd_tokens.to_str().unwrap(),
            "--no-watch",
        ],
    )
    .await;
    let upstream = upstream();
    let mut command = Command::new(BIN);
    command
        .arg("proxy")
        .arg("--insecure-listen-address=127.0.0.1:0")
        .arg(format!("--upstream=http://{upstream}/"))
        .arg(format!("--authzd-server={}", authzd.url()))
        .arg(format!("--token-auth-file={}", callers.display()))
        .arg("--authzd-timeout=2s")
        .arg("--max-staleness=1s")
        .env("AUTHZD_TOKEN", "proxy-token")
        .env("RUST_LOG", "info");
    let proxy = Proxy::start(command);
    let allowed = format!("http://{}/metrics", proxy.addr);
    let refused = format!("http://{}/other", proxy.addr);
    let (status, body, _) = get(&curl, &allowed);
    assert_eq!(
        (status, body.as_str()),
        (200, "upstream"),
        "{}",
        proxy.log()
    );

    let frozen = Frozen::new(authzd.pid());
    // `/other` was never asked: only authzd can decide it. `/metrics` the local cache holds,
    // until its proof runs out (--max-staleness 1s) with nothing from the frozen server.
    std::thread::sleep(Duration::from_millis(1500));
    for url in [&refused, &allowed] {
        let (status, body, took) = get(&curl, url);
        assert_eq!(status, 500, "{url}: {body}\n{}", proxy.log());
        assert!(
            body.starts_with("Authorization error (user=system:serviceaccount:default:default"),
            "{body}"
        );
        // The deadline, plus a loaded machine's scheduling; not the 60 s curl waits.
        assert!(
            took + Duration::from_millis(50) >= Duration::from_secs(2)
                && took <= Duration::from_secs(10),
            "{url} took {took:?} with --authzd-timeout 2s\n{}",
            proxy.log()
        );
    }
    assert!(
        proxy
            .log()
            .contains(&format!("no answer from {} within 2s", authzd.url())),
        "the proxy's log names the server and the deadline:\n{}",
        proxy.log()
    );

    drop(frozen);
    let decided = crate::support::wait::eventually_blocking(
        Duration::from_secs(20),
        || {
            format!(
                "`/metrics` allowed again once authzd resumed:\n{}",
                proxy.log()
            )
        },
        || {
            let (status, body, _) = get(&curl, &allowed);
            (status == 200).then_some(body)
        },
    );
    assert_eq!(decided, "upstream");
    let (status, body, _) = get(&curl, &refused);
    assert_eq!(status, 403, "{body}");
}
