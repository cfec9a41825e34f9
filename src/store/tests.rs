use std::path::PathBuf;
use std::sync::Mutex as StdMutex;

use super::dir::DirectoryBackend;
use super::*;
use crate::policy::load::{load_paths, parse_manifest, LoadOptions};

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

fn setup() -> (tempfile::TempDir, PathBuf, Arc<Recorder>, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("roles.yaml"), ROLES).unwrap();
    let recorder = Arc::new(Recorder::default());
    let backend = DirectoryBackend::new(vec![path.clone()], LoadOptions::default());
    let store = Store::open(Box::new(backend), recorder.clone()).unwrap();
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
        .apply(objects_of(&binding("bob-reads", "bob")), false, None)
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
        .apply(objects_of(&binding("bob-reads", "bob")), false, None)
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
    let (revision, _) = store
        .apply(objects_of(&replaced), false, None)
        .await
        .unwrap();
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
    let (revision, _) = store
        .apply(objects_of(&binding("x", "bob")), true, None)
        .await
        .unwrap();
    assert_eq!(revision, 1);
    assert_eq!(files(&path), vec!["roles.yaml"]);

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

#[tokio::test]
async fn watch_replays_kept_changes_and_streams_new_ones() {
    let (_dir, _path, _recorder, store) = setup();
    store
        .apply(objects_of(&binding("a", "bob")), false, None)
        .await
        .unwrap();
    store
        .apply(objects_of(&binding("a", "carol")), false, None)
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
    let store = Store::open(Box::new(backend), Arc::new(Recorder::default())).unwrap();
    assert!(matches!(
        store
            .apply(objects_of(&binding("x", "bob")), false, None)
            .await,
        Err(StoreError::ReadOnly)
    ));
}

#[test]
fn stale_temp_files_of_a_crashed_writer_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("roles.yaml"), ROLES).unwrap();
    let stale = dir.path().join(".roles.yaml.tmp-4242-7");
    std::fs::write(&stale, "half a fi").unwrap();
    let editor_swap = dir.path().join(".roles.yaml.swp");
    std::fs::write(&editor_swap, "").unwrap();
    let _backend = DirectoryBackend::new(vec![dir.path().to_path_buf()], LoadOptions::default());
    assert!(!stale.exists());
    assert!(
        editor_swap.exists(),
        "other dotfiles are not ours to remove"
    );
}

/// A sink that is never reached: these tests feed the watch side only.
struct NoSink;

#[tonic::async_trait]
impl RemoteSink for NoSink {
    async fn commit(
        &self,
        _: u64,
        _: &[PolicyObject],
        _: &[ObjectRef],
    ) -> std::result::Result<u64, CommitError> {
        Err(CommitError::Refused("not in this test".into()))
    }
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
    let store = Store::open_remote(
        PolicySet::default(),
        1,
        Arc::new(NoSink),
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
        match o {
            PolicyObject::Role(r) => full.roles.push(r),
            PolicyObject::Binding(b) => full.bindings.push(b),
        }
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
