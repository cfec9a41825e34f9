//! Who writes a policy directory, with real `authzd serve` processes:
//! one writer per directory (a second refuses to start, naming the holder), read-only
//! followers (`--read-only`, a directory the server cannot write) that load changes and refuse
//! writes while changing nothing, concurrent writes on the writer all kept, and `serve`
//! without `--policy` serving the embedded example read-only from any working directory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use authzd::api::error::ErrorReason;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{ApplyRequest, DeleteRequest, GetRequest, ListRequest, ObjectRef};
use tonic::transport::Channel;

use crate::support::server::{cluster_role_binding, run_bin, sample_policy, Server};

/// The lock file a writer holds in its directory (`store::lock::LOCK_NAME`).
const LOCK: &str = ".authzd-lock";

/// Every file of `dir` (dotfiles too) and its bytes: what "changes nothing" compares.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

fn binding_ref(name: &str) -> ObjectRef {
    ObjectRef {
        kind: "ClusterRoleBinding".into(),
        namespace: String::new(),
        name: name.into(),
    }
}

async fn apply(channel: &Channel, manifest: String) -> Result<u64, tonic::Status> {
    PolicyAdminClient::new(channel.clone())
        .apply(ApplyRequest {
            manifest,
            dry_run: false,
            ..Default::default()
        })
        .await
        .map(|response| response.into_inner().revision)
}

async fn delete(channel: &Channel, object: ObjectRef) -> Result<u64, tonic::Status> {
    PolicyAdminClient::new(channel.clone())
        .delete(DeleteRequest {
            object: Some(object),
            ..Default::default()
        })
        .await
        .map(|response| response.into_inner().revision)
}

async fn exists(channel: &Channel, object: ObjectRef) -> bool {
    match PolicyAdminClient::new(channel.clone())
        .get(GetRequest {
            object: Some(object),
        })
        .await
    {
        Ok(_) => true,
        Err(status) if status.code() == tonic::Code::NotFound => false,
        Err(status) => panic!("Get: {status:?}"),
    }
}

/// Waits (up to 20 s: the watcher's debounce, a loaded machine) until `object` exists on the
/// server behind `channel`.
async fn wait_for(channel: &Channel, object: ObjectRef, stderr: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !exists(channel, object.clone()).await {
        assert!(
            Instant::now() < deadline,
            "{object:?} never appeared; stderr:\n{}",
            stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A refusal of a write by a read-only server: FAILED_PRECONDITION, reason STORE_READ_ONLY,
/// a message saying the store is read-only and `why`.
fn assert_read_only(result: Result<u64, tonic::Status>, why: &str) {
    let status = result.expect_err("a read-only server accepted a write");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert_eq!(
        ErrorReason::of(&status),
        Some(ErrorReason::StoreReadOnly),
        "{status:?}"
    );
    assert!(
        status.message().contains("the policy store is read-only")
            && status.message().contains(why),
        "{}",
        status.message()
    );
}

/// The startup line (`authzd serving revision R from SOURCE: COUNTS; WRITES`).
fn startup_line(server: &Server) -> String {
    server
        .stderr()
        .lines()
        .find(|line| line.starts_with("authzd serving revision "))
        .unwrap_or_else(|| panic!("no startup line:\n{}", server.stderr()))
        .to_string()
}

fn sample_binding(name: &str, user: &str) -> String {
    cluster_role_binding(name, "pod-reader", &[("User", user)])
}

#[tokio::test]
async fn a_second_writer_refuses_to_start_naming_the_holder() {
    let dir = sample_policy();
    let writer = Server::start_serving(dir.path(), &[]).await;
    let before = snapshot(dir.path());

    let second = run_bin(
        &[
            OsStr::new("serve"),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--policy"),
            dir.path().as_os_str(),
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    // Exit 1, as a listen address in use: the server could not start as asked.
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another authzd already writes the policy directory"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("pid {}", writer.pid())),
        "{stderr}"
    );
    assert!(stderr.contains(&writer.addr.to_string()), "{stderr}");
    assert!(stderr.contains("--read-only"), "{stderr}");
    // It never served: no listening line, and the directory is as it was.
    assert!(!stderr.contains("authzd listening on"), "{stderr}");
    assert_eq!(snapshot(dir.path()), before);

    // The writer still writes.
    let channel = writer.channel().await;
    apply(&channel, sample_binding("after-refusal", "bob"))
        .await
        .unwrap();

    // The lock dies with its holder, however it dies: after `kill -9` the next writer starts,
    // and records itself.
    let mut writer = writer;
    writer.kill();
    let next = Server::start_serving(dir.path(), &[]).await;
    let lock = std::fs::read_to_string(dir.path().join(LOCK)).unwrap();
    assert!(lock.contains(&format!("pid {}", next.pid())), "{lock}");
    assert!(lock.contains(&format!("listen {}", next.addr)), "{lock}");
    assert!(exists(&next.channel().await, binding_ref("after-refusal")).await);
}

/// The lock is taken before anything is bound: a refused second writer naming the holder's
/// Unix socket does not replace the holder's socket file (binding a Unix socket removes
/// whatever socket is at its path).
#[tokio::test]
async fn a_refused_writer_binds_nothing_of_the_holders() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = sample_policy();
    let sockets = tempfile::tempdir().unwrap();
    let socket = sockets.path().join("authzd.sock");
    let listen = format!("unix://{}", socket.display());
    let writer = Server::start_serving(dir.path(), &["--listen", &listen]).await;
    let inode = std::fs::metadata(&socket).unwrap().ino();

    let second = run_bin(
        &[
            OsStr::new("serve"),
            OsStr::new("--listen"),
            OsStr::new(&listen),
            OsStr::new("--policy"),
            dir.path().as_os_str(),
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    // The holder's record names every listener it bound, the socket too.
    assert!(
        stderr.contains(&format!("pid {}", writer.pid())) && stderr.contains(&listen),
        "{stderr}"
    );
    assert_eq!(
        std::fs::metadata(&socket).map(|m| m.ino()).ok(),
        Some(inode),
        "the holder's socket was replaced"
    );
    tokio::net::UnixStream::connect(&socket)
        .await
        .expect("the holder still answers on its socket");
}

#[tokio::test]
async fn a_read_only_follower_loads_the_writers_changes_and_refuses_writes() {
    let dir = sample_policy();
    let writer = Server::start_serving(dir.path(), &[]).await;
    // Beside the writer, without conflict: a follower takes no lock.
    let follower = Server::start_serving(dir.path(), &["--read-only"]).await;
    let line = startup_line(&follower);
    assert!(
        line.contains("read-only, refuses writes: started with --read-only"),
        "{line}"
    );

    let (writes, reads) = (writer.channel().await, follower.channel().await);
    apply(&writes, sample_binding("from-the-writer", "bob"))
        .await
        .unwrap();
    wait_for(&reads, binding_ref("from-the-writer"), || follower.stderr()).await;

    // Writes on the follower: refused, saying why, and nothing on disk changes.
    let before = snapshot(dir.path());
    assert_read_only(
        apply(&reads, sample_binding("on-the-follower", "mallory")).await,
        "started with --read-only",
    );
    assert_read_only(
        delete(&reads, binding_ref("from-the-writer")).await,
        "started with --read-only",
    );
    assert_read_only(
        delete(&reads, binding_ref("read-pods")).await,
        "started with --read-only",
    );
    assert_eq!(snapshot(dir.path()), before);
    assert!(exists(&reads, binding_ref("from-the-writer")).await);
    assert!(!exists(&reads, binding_ref("on-the-follower")).await);
    assert!(!exists(&writes, binding_ref("on-the-follower")).await);
}

/// Whether this test process runs as root (whose writes no directory mode stops): a file it
/// creates is owned by its effective user.
fn running_as_root(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let probe = dir.join("probe");
    std::fs::write(&probe, "").unwrap();
    let root = std::fs::metadata(&probe).unwrap().uid() == 0;
    std::fs::remove_file(&probe).unwrap();
    root
}

#[tokio::test]
async fn an_unwritable_directory_is_followed_read_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = sample_policy();
    let root = running_as_root(dir.path());
    // Readable by everyone, writable by its owner only: as root, the server runs as `nobody`;
    // otherwise the owner's write bit goes too.
    let mode = if root { 0o755 } else { 0o555 };
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    let before = snapshot(dir.path());
    let follower = if root {
        Server::start_as_user(dir.path(), &[], 65534, 65534)
    } else {
        Server::start(dir.path(), &[])
    };
    follower.wait_serving().await;
    let line = startup_line(&follower);
    assert!(
        line.contains("read-only, refuses writes:") && line.contains("is not writable"),
        "{line}"
    );

    let channel = follower.channel().await;
    assert_read_only(
        apply(&channel, sample_binding("refused", "mallory")).await,
        "is not writable by this process's user",
    );
    assert_read_only(
        delete(&channel, binding_ref("read-pods")).await,
        "is not writable",
    );
    // Nothing written, and no lock file either.
    assert_eq!(snapshot(dir.path()), before);
    assert!(!dir.path().join(LOCK).exists());

    // Whoever may write the directory (here, this test) changes it: the follower loads it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("added.yaml"),
        sample_binding("added-by-hand", "bob"),
    )
    .unwrap();
    wait_for(&channel, binding_ref("added-by-hand"), || follower.stderr()).await;
    assert!(!exists(&channel, binding_ref("refused")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_on_the_writer_are_all_kept() {
    const CLIENTS: usize = 8;
    const EACH: usize = 10;
    let dir = sample_policy();
    let mut writer = Server::start_serving(dir.path(), &[]).await;
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        // A connection each, so that the writes meet in the server, not in one channel.
        let channel = writer.channel().await;
        clients.push(tokio::spawn(async move {
            for n in 0..EACH {
                let name = format!("c{client}-{n}");
                apply(&channel, sample_binding(&name, &format!("user-{name}")))
                    .await
                    .unwrap_or_else(|e| panic!("apply {name}: {e:?}"));
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let names = |manifests: Vec<String>| -> Vec<String> {
        manifests
            .iter()
            .filter_map(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("  name: "))
                    .map(|n| n.trim().to_string())
            })
            .filter(|n| n.starts_with('c'))
            .collect()
    };
    let list = |channel: Channel| async move {
        PolicyAdminClient::new(channel)
            .list(ListRequest {
                kind: "ClusterRoleBinding".into(),
                namespace: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .manifests
    };
    let served = names(list(writer.channel().await).await);
    assert_eq!(served.len(), CLIENTS * EACH, "{served:?}");

    // And on disk: a restart on the directory serves every one.
    writer.kill();
    let restarted = Server::start_serving(dir.path(), &[]).await;
    let reloaded = names(list(restarted.channel().await).await);
    assert_eq!(reloaded.len(), CLIENTS * EACH, "{reloaded:?}");
    for client in 0..CLIENTS {
        for n in 0..EACH {
            assert!(
                reloaded.contains(&format!("c{client}-{n}")),
                "c{client}-{n}"
            );
        }
    }
}

#[tokio::test]
async fn serve_without_policy_serves_the_embedded_example_read_only_from_anywhere() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    let expected = authzd::store::served::Counts::of(
        &authzd::policy::load::load_paths(&[shipped], &Default::default()).unwrap(),
    );
    // A working directory with a `policy/` of its own, which must not be served (nor the
    // build tree's).
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join("policy")).unwrap();
    std::fs::write(
        cwd.path().join("policy/decoy.yaml"),
        sample_binding("decoy", "mallory"),
    )
    .unwrap();
    let before = snapshot(&cwd.path().join("policy"));

    let server = Server::start_in(cwd.path(), &[]);
    server.wait_serving().await;
    let line = startup_line(&server);
    assert!(
        line.contains("from the example policy embedded in the binary")
            && line.contains(&expected.to_string())
            && line.contains("read-only, refuses writes"),
        "{line}"
    );

    let channel = server.channel().await;
    let read_pods = ObjectRef {
        kind: "RoleBinding".into(),
        namespace: "default".into(),
        name: "read-pods".into(),
    };
    assert!(exists(&channel, read_pods.clone()).await);
    assert!(!exists(&channel, binding_ref("decoy")).await);
    assert_read_only(
        apply(&channel, sample_binding("refused", "mallory")).await,
        "--policy DIR",
    );
    assert_read_only(delete(&channel, read_pods.clone()).await, "--policy DIR");
    assert!(exists(&channel, read_pods).await);
    // Nothing written anywhere it could reach: the working directory, its `policy/`, the
    // source tree's `policy/` (git-tracked files).
    assert_eq!(snapshot(&cwd.path().join("policy")), before);
    assert!(!cwd.path().join(LOCK).exists());
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    assert!(!source_tree.join(LOCK).exists());
}

#[tokio::test]
async fn the_startup_line_names_the_directory_its_counts_and_that_it_writes() {
    let dir = sample_policy();
    let expected = authzd::store::served::Counts::of(
        &authzd::policy::load::load_paths(&[dir.path().to_path_buf()], &Default::default())
            .unwrap(),
    );
    // The sample: 1 ClusterRole, 2 Roles, 1 ClusterRoleBinding, 3 RoleBindings.
    assert_eq!(
        (
            expected.cluster_roles,
            expected.roles,
            expected.cluster_role_bindings,
            expected.role_bindings
        ),
        (1, 2, 1, 3)
    );
    let server = Server::start_serving(dir.path(), &[]).await;
    let line = startup_line(&server);
    assert_eq!(
        line,
        format!(
            "authzd serving revision 1 from the policy directory {}: {expected}; accepts writes",
            dir.path().display()
        )
    );
    // The structured event carries the same, field by field.
    let stderr = server.stderr();
    let event = stderr
        .lines()
        .find(|l| l.contains("policy loaded; serving"))
        .unwrap_or_else(|| panic!("{stderr}"));
    for field in [
        "source=\"directory\"",
        "cluster_roles=1",
        "roles=2",
        "cluster_role_bindings=1",
        "role_bindings=3",
        "writes=true",
    ] {
        assert!(event.contains(field), "{field} missing: {event}");
    }
}
