use std::path::PathBuf;
use std::sync::Mutex as StdMutex;

use super::dir::DirectoryBackend;
use super::*;
use crate::policy::load::{load_paths, load_sources, parse_manifest, LoadOptions};

/// Records what was published, in order.
#[derive(Default)]
struct Recorder {
    published: StdMutex<Vec<(u64, usize, bool)>>,
}

impl Publisher for Recorder {
    fn publish(
        &self,
        policy: &PolicySet,
        revision: u64,
        impact: &Impact,
        _: ChangeCause,
        _: Option<&[crate::policy::delta::ChangedObject]>,
    ) {
        self.published
            .lock()
            .unwrap()
            .push((revision, policy.bindings.len(), impact.is_empty()));
    }
}

const ROLES: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
rules:
- apiGroups: [\"\"]
  resources: [pods]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: readers
subjects:
- kind: User
  name: alice
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: reader
";

fn binding(name: &str, user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {name}
  namespace: team-a
subjects:
- kind: User
  name: {user}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: reader
"
    )
}

fn setup() -> (tempfile::TempDir, PathBuf, Arc<Recorder>, Arc<Store>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("roles.yaml"), ROLES).unwrap();
    let recorder = Arc::new(Recorder::default());
    let backend = DirectoryBackend::new(vec![path.clone()], LoadOptions::default());
    let store = Store::open_directory(backend, recorder.clone()).unwrap();
    (dir, path, recorder, store)
}

fn objects_of(text: &str) -> Vec<PolicyObject> {
    parse_manifest("request", text, &LoadOptions::default()).unwrap()
}

fn files(path: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn apply_creates_a_file_and_a_revision() {
    let (_dir, path, recorder, store) = setup();
    assert_eq!(store.revision(), 1);
    let (revision, applied) = store
        .apply(objects_of(&binding("bob-reads", "bob")), None)
        .await
        .unwrap();
    assert_eq!(revision, 2);
    assert_eq!(applied[0].to_string(), "RoleBinding `team-a/bob-reads`");
    assert_eq!(
        files(&path),
        vec!["rolebinding.team-a.bob-reads.yaml", "roles.yaml"]
    );
    // The directory alone reproduces the store's policy: it is the source of truth.
    assert_eq!(
        load_paths(std::slice::from_ref(&path), &LoadOptions::default()).unwrap(),
        *store.policy()
    );
    assert_eq!(
        recorder.published.lock().unwrap().last(),
        Some(&(2, 2, false))
    );

    // The same content again changes nothing and publishes nothing.
    let (again, _) = store
        .apply(objects_of(&binding("bob-reads", "bob")), None)
        .await
        .unwrap();
    assert_eq!(again, 2);
    assert_eq!(recorder.published.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn apply_replaces_in_place_and_delete_removes() {
    let (_dir, path, _recorder, store) = setup();
    let replaced = ROLES
        .split("---\n")
        .nth(1)
        .unwrap()
        .replace("alice", "carol");
    let (revision, _) = store.apply(objects_of(&replaced), None).await.unwrap();
    assert_eq!(revision, 2);
    assert_eq!(files(&path), vec!["roles.yaml"]);
    let text = std::fs::read_to_string(path.join("roles.yaml")).unwrap();
    assert!(text.contains("carol") && !text.contains("alice"), "{text}");
    assert!(
        text.contains("reader"),
        "the other object of the file is kept: {text}"
    );

    let readers = ObjectRef {
        kind: ObjectKind::ClusterRoleBinding,
        namespace: String::new(),
        name: "readers".into(),
    };
    assert_eq!(store.delete(&readers, None).await.unwrap(), 3);
    assert!(store.get(&readers).is_none());
    assert!(matches!(
        store.delete(&readers, None).await,
        Err(StoreError::NotFound(_))
    ));
    let role = ObjectRef {
        kind: ObjectKind::ClusterRole,
        namespace: String::new(),
        name: "reader".into(),
    };
    store.delete(&role, None).await.unwrap();
    assert!(files(&path).is_empty(), "an emptied file is removed");
}

#[tokio::test]
async fn dry_run_and_rejected_reload_change_nothing() {
    let (_dir, path, _recorder, store) = setup();
    let before = store.policy();
    let preview = store
        .preview(objects_of(&binding("x", "bob")), None)
        .await
        .unwrap();
    assert_eq!(preview.revision, 1);
    assert_eq!(preview.before, before);
    assert_eq!(preview.changed.len(), 1);
    assert_eq!(preview.after.bindings.len(), before.bindings.len() + 1);
    assert_eq!(files(&path), vec!["roles.yaml"]);
    assert_eq!(store.revision(), 1);
    assert_eq!(store.policy(), before);

    std::fs::write(path.join("broken.yaml"), "kind: Role\nmetadata: {}\n").unwrap();
    let before = store.policy();
    let errors = store.reload().await.unwrap_err();
    assert!(errors.to_string().contains("broken.yaml:"), "{errors}");
    assert_eq!(store.revision(), 1);
    assert_eq!(store.policy(), before);
    assert!(store.last_error().unwrap().contains("broken.yaml"));

    std::fs::remove_file(path.join("broken.yaml")).unwrap();
    assert_eq!(store.reload().await.unwrap(), None, "nothing changed");
    assert!(store.last_error().is_none());

    std::fs::write(path.join("more.yaml"), binding("dave-reads", "dave")).unwrap();
    assert_eq!(store.reload().await.unwrap(), Some(2));
}

/// A Helm chart's rendered file: its ServiceAccount is skipped on load, and a write edits
/// only the documents of the objects it writes, so the ServiceAccount's document stays byte
/// for byte; a change to it alone is no new revision.
#[tokio::test]
async fn a_file_holding_objects_of_other_groups_keeps_them() {
    let (_dir, path, _recorder, store) = setup();
    let service_account =
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: app, namespace: team-a}\n---\n";
    std::fs::remove_file(path.join("roles.yaml")).unwrap();
    let chart = format!("{service_account}{ROLES}");
    std::fs::write(path.join("chart.yaml"), &chart).unwrap();
    assert_eq!(
        store.reload().await.unwrap(),
        Some(2),
        "same policy, new file"
    );

    let replaced = ROLES
        .split("---\n")
        .nth(1)
        .unwrap()
        .replace("alice", "carol");
    store.apply(objects_of(&replaced), None).await.unwrap();
    let written = std::fs::read_to_string(path.join("chart.yaml")).unwrap();
    assert!(written.starts_with(service_account), "{written}");
    assert!(
        written.contains("carol") && !written.contains("alice"),
        "{written}"
    );
    let readers = ObjectRef {
        kind: ObjectKind::ClusterRoleBinding,
        namespace: String::new(),
        name: "readers".into(),
    };
    store.delete(&readers, None).await.unwrap();
    let written = std::fs::read_to_string(path.join("chart.yaml")).unwrap();
    assert_eq!(
        written,
        format!("{service_account}{}", ROLES.split("---\n").next().unwrap())
    );

    // A new object's file name taken by a file of other kinds only: the object is a new
    // document after them.
    let config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: team-a}\n";
    std::fs::write(path.join("rolebinding.team-a.x.yaml"), config_map).unwrap();
    assert_eq!(store.reload().await.unwrap(), None, "no policy changed");
    store
        .apply(objects_of(&binding("x", "bob")), None)
        .await
        .unwrap();
    let written = std::fs::read_to_string(path.join("rolebinding.team-a.x.yaml")).unwrap();
    assert!(
        written.starts_with(&format!("{config_map}---\n")),
        "{written}"
    );
    assert!(written.contains("bob"), "{written}");
}

#[tokio::test]
async fn watch_replays_kept_changes_and_streams_new_ones() {
    let (_dir, _path, _recorder, store) = setup();
    store
        .apply(objects_of(&binding("a", "bob")), None)
        .await
        .unwrap();
    store
        .apply(objects_of(&binding("a", "carol")), None)
        .await
        .unwrap();
    let (backlog, mut live) = store.watch(1).await.unwrap();
    let kinds: Vec<_> = backlog.iter().map(|e| (e.kind, e.revision)).collect();
    assert_eq!(kinds, vec![(EventType::Added, 2), (EventType::Modified, 3)]);
    assert!(backlog[1].manifest.contains("carol"));

    let gone = ObjectRef {
        kind: ObjectKind::RoleBinding,
        namespace: "team-a".into(),
        name: "a".into(),
    };
    store.delete(&gone, None).await.unwrap();
    let event = live.recv().await.unwrap();
    assert_eq!((event.kind, event.revision), (EventType::Deleted, 4));
}

#[tokio::test]
async fn a_store_without_a_directory_is_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("roles.yaml");
    std::fs::write(&file, ROLES).unwrap();
    let backend = DirectoryBackend::new(vec![file], LoadOptions::default());
    let store = Store::open_directory(backend, Arc::new(Recorder::default())).unwrap();
    assert!(matches!(
        store.apply(objects_of(&binding("x", "bob")), None).await,
        Err(StoreError::ReadOnly)
    ));
}

/// A follower (`--read-only`, an unwritable directory) writes nothing: not the write, and not
/// the writer's housekeeping (a stale temporary file stays); it says why on every write.
#[tokio::test]
async fn a_read_only_directory_refuses_every_write_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("roles.yaml"), ROLES).unwrap();
    std::fs::write(dir.path().join(".roles.yaml.tmp-1-1"), "half").unwrap();
    // A killed writer's journal (unreadable, even): a writer would refuse to start on it; a
    // follower reads the files as they are and leaves the journal to the writer.
    std::fs::write(dir.path().join(journal::JOURNAL_NAME), "junk").unwrap();
    let listing = |dir: &std::path::Path| {
        let mut names: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        names.sort();
        names
    };
    let before = listing(dir.path());
    let backend = DirectoryBackend::with_read_only(
        vec![dir.path().to_path_buf()],
        LoadOptions::default(),
        Some("started with --read-only".into()),
    );
    let store = Store::open_directory(backend, Arc::new(Recorder::default())).unwrap();
    assert_eq!(store.read_only(), Some("started with --read-only"));
    let applied = store.apply(objects_of(&binding("x", "bob")), None).await;
    assert!(
        matches!(&applied, Err(StoreError::ReadOnlyStore(why)) if why == "started with --read-only"),
        "{applied:?}"
    );
    let gone = ObjectRef {
        kind: ObjectKind::RoleBinding,
        namespace: "team-a".into(),
        name: "a".into(),
    };
    assert!(matches!(
        store.delete(&gone, None).await,
        Err(StoreError::ReadOnlyStore(_))
    ));
    assert_eq!(store.revision(), 1);
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn stale_temp_files_of_a_crashed_writer_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("roles.yaml"), ROLES).unwrap();
    let stale = dir.path().join(".roles.yaml.tmp-4242-7");
    std::fs::write(&stale, "half a fi").unwrap();
    let editor_swap = dir.path().join(".roles.yaml.swp");
    std::fs::write(&editor_swap, "").unwrap();
    let backend = DirectoryBackend::new(vec![dir.path().to_path_buf()], LoadOptions::default());
    assert!(stale.exists(), "nothing is touched before the store opens");
    Store::open_directory(backend, Arc::new(Recorder::default())).unwrap();
    assert!(!stale.exists());
    assert!(
        editor_swap.exists(),
        "other dotfiles are not ours to remove"
    );
}

/// The ClusterRole `reader` of `roles.yaml` narrowed to `verb`, and the RoleBinding
/// `team-a/bob-reads` of `bob.yaml` binding `user` to it: one write of two files.
fn narrowing(verb: &str, user: &str) -> String {
    let role = ROLES
        .split("---\n")
        .next()
        .unwrap()
        .replace("[get]", &format!("[{verb}]"));
    format!("{role}---\n{}", binding("bob-reads", user))
}

/// A policy directory where a write of `reader` and `bob-reads` (two files) was cut short
/// after its journal and its first file: `roles.yaml` new, `bob.yaml` old. The whole write
/// in the files, for comparison.
fn interrupt_a_write_of_two_files(path: &std::path::Path) -> PolicySet {
    let roles = path.join("roles.yaml");
    let bob = path.join("bob.yaml");
    let new_roles = format!(
        "{}---\n{}",
        ROLES
            .split("---\n")
            .next()
            .unwrap()
            .replace("[get]", "[list]"),
        ROLES.split("---\n").nth(1).unwrap()
    );
    let new_bob = binding("bob-reads", "eve");
    let journal = super::journal::Journal::new(path, &[path.to_path_buf()]);
    let writes = [(roles.clone(), new_roles.clone()), (bob, new_bob.clone())]
        .into_iter()
        .map(|(file, text)| super::journal::FileWrite::read(file, Some(text)).unwrap())
        .collect::<Vec<_>>();
    journal.write_journal(&writes).unwrap();
    std::fs::write(&roles, &new_roles).unwrap();
    load_sources(
        &[
            (roles.display().to_string(), new_roles),
            (path.join("bob.yaml").display().to_string(), new_bob),
        ],
        &LoadOptions::default(),
    )
    .unwrap()
}

/// A write whose objects live in two files is made in both, and leaves no journal.
#[tokio::test]
async fn a_write_of_two_files_is_made_in_both() {
    let (_dir, path, _recorder, store) = setup();
    std::fs::write(path.join("bob.yaml"), binding("bob-reads", "bob")).unwrap();
    assert_eq!(store.reload().await.unwrap(), Some(2));
    let (revision, _) = store
        .apply(objects_of(&narrowing("list", "eve")), None)
        .await
        .unwrap();
    assert_eq!(revision, 3);
    assert_eq!(files(&path), vec!["bob.yaml", "roles.yaml"]);
    let roles = std::fs::read_to_string(path.join("roles.yaml")).unwrap();
    let bob = std::fs::read_to_string(path.join("bob.yaml")).unwrap();
    assert!(roles.contains("list") && !roles.contains("get"), "{roles}");
    assert!(bob.contains("eve") && !bob.contains("name: bob\n"), "{bob}");
    assert_eq!(
        load_paths(std::slice::from_ref(&path), &LoadOptions::default()).unwrap(),
        *store.policy()
    );
}

/// A reload (the directory watcher, SIGHUP) that finds a write cut short finishes it before
/// reading: it publishes the whole write, never the half of it the files held.
#[tokio::test]
async fn a_reload_finishes_an_interrupted_write_before_reading() {
    let (_dir, path, _recorder, store) = setup();
    std::fs::write(path.join("bob.yaml"), binding("bob-reads", "bob")).unwrap();
    assert_eq!(store.reload().await.unwrap(), Some(2));
    let whole = interrupt_a_write_of_two_files(&path);
    assert_eq!(store.reload().await.unwrap(), Some(3));
    assert_eq!(*store.policy(), whole);
    assert_eq!(
        files(&path),
        vec!["bob.yaml", "roles.yaml"],
        "the journal is gone"
    );
}

/// At startup, a write cut short is finished before the first policy is read; a journal that
/// cannot be read stops the store from opening, naming it.
#[test]
fn startup_finishes_an_interrupted_write_and_refuses_an_unreadable_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    std::fs::write(path.join("roles.yaml"), ROLES).unwrap();
    std::fs::write(path.join("bob.yaml"), binding("bob-reads", "bob")).unwrap();
    let whole = interrupt_a_write_of_two_files(&path);
    let open = || {
        let backend = DirectoryBackend::new(vec![path.clone()], LoadOptions::default());
        Store::open_directory(backend, Arc::new(Recorder::default()))
    };
    assert_eq!(*open().unwrap().policy(), whole);

    let journal = path.join(super::journal::JOURNAL_NAME);
    std::fs::write(
        &journal,
        "authzd-commit-journal 1 999 sha256:00\n{\"files\":[",
    )
    .unwrap();
    let errors = open().err().unwrap().to_string();
    assert!(
        errors.starts_with(&format!(
            "{}: this commit journal cannot be read (truncated",
            journal.display()
        )),
        "{errors}"
    );
    assert!(journal.exists());
}

/// etcd mode's applier: revisions of changes applied one by one give the policy a full load
/// of the same objects gives (canonical order kept by the binary-search edits), one event per
/// changed object, and an impact that reaches exactly the subjects the change touched.
#[tokio::test]
async fn applied_changes_equal_a_full_load_of_the_same_objects() {
    let options = LoadOptions::default();
    let object = |text: &str| parse_manifest("m.yaml", text, &options).unwrap();
    let mut objects = object(ROLES);
    for (name, user) in [("b", "bob"), ("a", "ann"), ("c", "cid")] {
        objects.extend(object(&binding(name, user)));
    }
    let recorder = Arc::new(Recorder::default());
    let store = Store::open(
        Arc::new(FeedOnly),
        PolicySet::default(),
        1,
        Arc::clone(&recorder) as Arc<dyn Publisher>,
    );
    let (_, mut events) = store.watch(0).await.unwrap();
    // Objects arrive out of canonical order, one revision each; then one is replaced and one
    // deleted in a single revision.
    let mut revision = 1;
    for o in objects.iter().rev() {
        revision += 1;
        store
            .apply_changes(revision, vec![(ObjectRef::of(o), Some(o.clone()))])
            .await;
    }
    let replaced = object(&binding("a", "amy")).remove(0);
    let deleted = ObjectRef::of(&object(&binding("c", "cid")).remove(0));
    store
        .apply_changes(
            revision + 1,
            vec![
                (ObjectRef::of(&replaced), Some(replaced.clone())),
                (deleted.clone(), None),
            ],
        )
        .await;
    assert_eq!(store.revision(), revision + 1);

    let mut expected: Vec<PolicyObject> = objects
        .into_iter()
        .filter(|o| ObjectRef::of(o) != deleted && ObjectRef::of(o) != ObjectRef::of(&replaced))
        .collect();
    expected.push(replaced);
    let mut full = PolicySet::default();
    for o in expected {
        full.push(o)
    }
    full.canonicalize();
    assert_eq!(*store.policy(), full);

    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push((event.revision, event.kind, event.object.name.clone()));
    }
    let last = revision + 1;
    assert_eq!(seen.len(), 5 + 2, "{seen:?}");
    assert_eq!(
        seen[5..],
        [
            (last, EventType::Modified, "a".to_string()),
            (last, EventType::Deleted, "c".to_string())
        ]
    );
    // The last publish reached only the subjects of the changed bindings.
    let published = recorder.published.lock().unwrap().last().copied();
    assert_eq!(published, Some((last, 3, false)));
    // An old or repeated revision changes nothing.
    store.apply_changes(last, Vec::new()).await;
    assert_eq!(store.revision(), last);
}

/// A sink standing in for etcd in the group-commit tests: a compare-and-swap on its head,
/// every commit recorded, and each commit handed back to the store the way the watch would
/// (from another task, after the commit returned).
struct LoopbackSink {
    store: std::sync::OnceLock<std::sync::Weak<Store>>,
    /// The head revision (the last commit's).
    head: StdMutex<u64>,
    /// The objects of each commit, in order.
    commits: StdMutex<Vec<Vec<ObjectRef>>>,
    /// Commits with more objects than this are refused as too large (as etcd's request
    /// size limit would), though `max_objects` does not say so.
    refuse_above: usize,
    /// Commits to refuse as a conflict first, each after another writer's revision.
    conflicts: std::sync::atomic::AtomicUsize,
}

impl LoopbackSink {
    fn new(refuse_above: usize, conflicts: usize) -> Arc<Self> {
        Arc::new(LoopbackSink {
            store: std::sync::OnceLock::new(),
            head: StdMutex::new(1),
            commits: StdMutex::default(),
            refuse_above,
            conflicts: std::sync::atomic::AtomicUsize::new(conflicts),
        })
    }

    fn deliver(&self, revision: u64, changes: Vec<(ObjectRef, Option<PolicyObject>)>) {
        let store = self.store.get().and_then(std::sync::Weak::upgrade).unwrap();
        tokio::spawn(async move { store.apply_changes(revision, changes).await });
    }
}

#[tonic::async_trait]
impl Backend for LoopbackSink {
    async fn commit(
        &self,
        _store: &Store,
        commit: Commit<'_>,
    ) -> std::result::Result<u64, CommitError> {
        let (validated, upserts, deletes) = (commit.expected, commit.upserts, commit.deletes);
        // A round trip's worth of time, for writes to queue behind this commit.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let objects: Vec<ObjectRef> = upserts
            .iter()
            .map(ObjectRef::of)
            .chain(deletes.iter().cloned())
            .collect();
        if objects.len() > self.refuse_above {
            return Err(CommitError::TooLarge("too large".into()));
        }
        let revision = {
            let mut head = self.head.lock().unwrap();
            let conflict = self
                .conflicts
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| n.checked_sub(1),
                )
                .is_ok();
            if conflict {
                // Another replica's writer committed first (an empty change of its own).
                *head += 1;
                self.deliver(*head, Vec::new());
            }
            if *head != validated {
                return Err(CommitError::Conflict(*head));
            }
            *head += 1;
            *head
        };
        self.commits.lock().unwrap().push(objects);
        let changes = upserts
            .iter()
            .map(|o| (ObjectRef::of(o), Some(o.clone())))
            .chain(deletes.iter().map(|r| (r.clone(), None)))
            .collect();
        self.deliver(revision, changes);
        Ok(revision)
    }

    async fn reload(&self, _: &Store) -> std::result::Result<Option<u64>, LoadErrors> {
        Ok(None)
    }

    fn max_objects(&self) -> usize {
        64
    }
}

fn loopback_store(sink: &Arc<LoopbackSink>) -> Arc<Store> {
    let options = LoadOptions::default();
    let mut roles = PolicySet::default();
    for object in parse_manifest("roles.yaml", ROLES, &options).unwrap() {
        edit::put_object(&mut roles, object.into());
    }
    let store = Store::open(
        Arc::clone(sink) as Arc<dyn Backend>,
        roles,
        1,
        Arc::new(Recorder::default()),
    );
    sink.store.set(Arc::downgrade(&store)).unwrap();
    store
}

/// Applies `manifests` concurrently; each write's answer.
async fn apply_concurrently(store: &Arc<Store>, manifests: Vec<String>) -> Vec<Result<u64>> {
    let writes: Vec<_> = manifests
        .into_iter()
        .map(|manifest| {
            let store = Arc::clone(store);
            tokio::spawn(async move {
                let objects = parse_manifest("m.yaml", &manifest, &LoadOptions::default()).unwrap();
                store.apply(objects, None).await.map(|(r, _)| r)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for write in writes {
        answers.push(write.await.unwrap());
    }
    answers
}

/// Writes that arrive while a commit is in flight share the next one; each is answered with
/// the revision at which this store has applied it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_remote_writes_are_committed_together() {
    let sink = LoopbackSink::new(usize::MAX, 0);
    let store = loopback_store(&sink);
    let manifests = (0..40).map(|i| binding(&format!("b{i}"), &format!("u{i}")));
    let answers = apply_concurrently(&store, manifests.collect()).await;
    let commits = sink.commits.lock().unwrap().clone();
    assert!(
        commits.len() < 40,
        "40 concurrent writes took {} commits",
        commits.len()
    );
    assert_eq!(commits.iter().map(Vec::len).sum::<usize>(), 40);
    for answer in answers {
        let revision = answer.unwrap();
        assert!(revision >= 2 && revision <= store.revision());
    }
    assert_eq!(store.policy().bindings.len(), 40 + 1);
}

/// Writes of the same object never share a commit (each would otherwise have been checked
/// against a state without the other); every write is still made, in some order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_one_object_never_share_a_commit() {
    let sink = LoopbackSink::new(usize::MAX, 0);
    let store = loopback_store(&sink);
    let users: Vec<String> = (0..12).map(|i| format!("u{i}")).collect();
    let manifests = users.iter().map(|user| binding("same", user)).collect();
    let answers = apply_concurrently(&store, manifests).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let commits = sink.commits.lock().unwrap().clone();
    for objects in &commits {
        let distinct: std::collections::HashSet<_> = objects.iter().collect();
        assert_eq!(distinct.len(), objects.len(), "{commits:?}");
    }
    // The last commit's write is the one in force.
    let policy = store.policy();
    let same = policy.bindings.iter().find(|b| b.name == "same").unwrap();
    assert_eq!(same.subjects.len(), 1);
    assert!(users.contains(&same.subjects[0].name));
}

/// A combined commit the sink finds too large is retried one write per commit; a write that
/// meets another replica's commit catches up and is committed after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_combined_commits_split_and_conflicts_retry() {
    let sink = LoopbackSink::new(1, 2);
    let store = loopback_store(&sink);
    let manifests = (0..10).map(|i| binding(&format!("b{i}"), &format!("u{i}")));
    let answers = apply_concurrently(&store, manifests.collect()).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let commits = sink.commits.lock().unwrap().clone();
    assert_eq!(commits.len(), 10);
    assert!(commits.iter().all(|c| c.len() == 1));
    assert_eq!(sink.conflicts.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(store.policy().bindings.len(), 10 + 1);
}

/// One write refused by its guard, or deleting what is not there, does not stop the writes
/// it would have shared a commit with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_leaves_the_rest_of_its_commit() {
    struct RefuseBob;
    impl WriteGuard for RefuseBob {
        fn check(
            &self,
            _: &PolicySet,
            objects: &[PolicyObject],
        ) -> std::result::Result<(), String> {
            let bob = objects.iter().any(|o| ObjectRef::of(o).name == "bob");
            if bob {
                Err("no bob".into())
            } else {
                Ok(())
            }
        }
    }
    let sink = LoopbackSink::new(usize::MAX, 0);
    let store = loopback_store(&sink);
    let guard: Arc<dyn WriteGuard> = Arc::new(RefuseBob);
    let mut writes = Vec::new();
    for name in ["ann", "bob", "cid"] {
        let (store, guard) = (Arc::clone(&store), Arc::clone(&guard));
        writes.push(tokio::spawn(async move {
            let objects =
                parse_manifest("m.yaml", &binding(name, name), &LoadOptions::default()).unwrap();
            store.apply(objects, Some(guard)).await.map(|(r, _)| r)
        }));
    }
    let gone = ObjectRef {
        kind: ObjectKind::RoleBinding,
        namespace: "team-a".into(),
        name: "never".into(),
    };
    let missing = store.delete(&gone, None).await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
    let mut answers = Vec::new();
    for write in writes {
        answers.push(write.await.unwrap());
    }
    assert!(answers[0].is_ok() && answers[2].is_ok(), "{answers:?}");
    assert!(matches!(&answers[1], Err(StoreError::Forbidden(m)) if m == "no bob"));
    let names: Vec<String> = store
        .policy()
        .bindings
        .iter()
        .map(|b| b.name.clone())
        .collect();
    assert!(names.contains(&"ann".to_string()) && names.contains(&"cid".to_string()));
    assert!(!names.contains(&"bob".to_string()));
}

/// Every kind parses from its name and from its plural resource name, in any case, and
/// nothing else parses.
#[test]
fn object_kinds_parse_from_their_names() {
    for kind in ObjectKind::ALL {
        for spelling in [
            kind.as_str().to_string(),
            kind.plural().to_string(),
            kind.as_str().to_ascii_lowercase(),
            kind.plural().to_ascii_uppercase(),
        ] {
            assert_eq!(spelling.parse::<ObjectKind>(), Ok(kind), "{spelling}");
        }
    }
    for wrong in ["", "fieldpolicie", "bindings", "Policy"] {
        assert!(wrong.parse::<ObjectKind>().is_err(), "{wrong}");
    }
}

/// etcd holds no ABAC lines: a relist keeps the ones the store was opened with
/// (`--authorization-policy-file`), and so does applying a change.
#[tokio::test]
async fn a_relist_keeps_the_abac_lines_the_store_was_opened_with() {
    let abac = load_sources(
        &[(
            "abac.jsonl".into(),
            r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"user": "ann", "namespace": "*", "resource": "*", "apiGroup": "*"}}"#.into(),
        )],
        &LoadOptions::default(),
    )
    .unwrap()
    .abac;
    assert_eq!(abac.len(), 1);
    let policy = PolicySet {
        abac: abac.clone(),
        ..PolicySet::default()
    };
    let store = Store::open(
        LoopbackSink::new(usize::MAX, 0) as Arc<dyn Backend>,
        policy,
        1,
        Arc::new(Recorder::default()),
    );
    let objects =
        parse_manifest("m.yaml", &binding("bob", "bob"), &LoadOptions::default()).unwrap();
    let change = objects
        .into_iter()
        .map(|o| (ObjectRef::of(&o), Some(o)))
        .collect();
    store.apply_changes(2, change).await;
    assert_eq!(store.policy().abac, abac);
    assert_eq!(store.policy().bindings.len(), 1);
    store.replace(PolicySet::default(), 3).await;
    assert_eq!(
        store.policy().abac,
        abac,
        "the relist dropped the ABAC lines"
    );
    assert!(store.policy().bindings.is_empty());
}

/// A hand edit the store has not loaded — valid or not — is never overwritten: a write that
/// would replace its file is refused (`FileChanged`, naming the file), the file stays byte
/// for byte and the policy as it was; once a reload takes the edit in, the write goes
/// through and keeps it.
#[tokio::test]
async fn a_write_never_replaces_a_file_it_did_not_load() {
    let (_dir, path, _recorder, store) = setup();
    let roles = path.join("roles.yaml");
    let carol = ROLES
        .split("---\n")
        .nth(1)
        .unwrap()
        .replace("alice", "carol");
    let before = store.policy();

    // Half-written (`verb:` for `verbs:`), then finished.
    let half = format!("{ROLES}---\n# Dana's role, being written\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: dana, namespace: team-a}}\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verb: [get]\n");
    let finished = half.replace("verb: [get]", "verbs: [get]");
    for edit in [&half, &finished] {
        std::fs::write(&roles, edit).unwrap();
        let refusal = store.apply(objects_of(&carol), None).await.unwrap_err();
        let StoreError::FileChanged(message) = &refusal else {
            panic!("{refusal:?}");
        };
        assert!(
            message.contains(&format!("`{}` was changed on disk", roles.display())),
            "{message}"
        );
        assert_eq!(std::fs::read_to_string(&roles).unwrap(), *edit);
        assert_eq!((store.revision(), store.policy()), (1, before.clone()));
    }
    // The invalid edit rejected by a reload: still protected.
    std::fs::write(&roles, &half).unwrap();
    assert!(store.reload().await.is_err());
    assert!(matches!(
        store.apply(objects_of(&carol), None).await,
        Err(StoreError::FileChanged(_))
    ));
    assert_eq!(std::fs::read_to_string(&roles).unwrap(), half);

    // Finished and reloaded: the write edits its own document and keeps Dana's.
    std::fs::write(&roles, &finished).unwrap();
    assert_eq!(store.reload().await.unwrap(), Some(2));
    store.apply(objects_of(&carol), None).await.unwrap();
    let written = std::fs::read_to_string(&roles).unwrap();
    assert!(written.contains("carol") && !written.contains("alice"));
    assert!(written.ends_with(&finished[finished.find("---\n# Dana's").unwrap()..]));

    // A file removed by hand, or one created by hand under a new object's name.
    std::fs::remove_file(&roles).unwrap();
    assert!(matches!(
        store
            .apply(objects_of(&carol.replace("carol", "erin")), None)
            .await,
        Err(StoreError::FileChanged(_))
    ));
    assert!(!roles.exists());
    let new_file = path.join("rolebinding.team-a.x.yaml");
    std::fs::write(&new_file, "# mine\n").unwrap();
    assert!(matches!(
        store.apply(objects_of(&binding("x", "bob")), None).await,
        Err(StoreError::FileChanged(_))
    ));
    assert_eq!(std::fs::read_to_string(&new_file).unwrap(), "# mine\n");
}

/// An edit that changes no policy (a comment added at the end) is no new revision, but the
/// store takes in its bytes: the next write to that file goes through and keeps the comment.
#[tokio::test]
async fn a_reload_that_changes_no_policy_still_takes_in_the_file() {
    let (_dir, path, _recorder, store) = setup();
    let roles = path.join("roles.yaml");
    let commented = format!("{ROLES}# reviewed by the platform team\n");
    std::fs::write(&roles, &commented).unwrap();
    assert_eq!(store.reload().await.unwrap(), None, "no policy changed");
    let carol = ROLES
        .split("---\n")
        .nth(1)
        .unwrap()
        .replace("alice", "carol");
    store.apply(objects_of(&carol), None).await.unwrap();
    let written = std::fs::read_to_string(&roles).unwrap();
    assert!(written.contains("carol"), "{written}");
    assert!(
        written.ends_with("# reviewed by the platform team\n"),
        "{written}"
    );
}
