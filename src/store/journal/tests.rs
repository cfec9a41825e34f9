use std::path::{Path, PathBuf};

use super::*;
use crate::policy::load::{load_paths, LoadOptions};
use crate::policy::model::PolicySet;

fn role(name: &str, verb: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [{verb}]\n"
    )
}

/// A policy directory of three files (`a`, `b`, `c`) and the commit that rewrites `a` and
/// `b`, removes `c` and creates `d`: every kind of file change one commit makes.
struct Scene {
    _temp: tempfile::TempDir,
    dir: PathBuf,
    journal: Journal,
    writes: Vec<FileWrite>,
}

impl Scene {
    fn new() -> Scene {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("policy");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), role("a", "get")).unwrap();
        std::fs::write(dir.join("b.yaml"), role("b", "get")).unwrap();
        std::fs::write(dir.join("c.yaml"), role("c", "get")).unwrap();
        let journal = Journal::new(&dir, std::slice::from_ref(&dir));
        let writes = [
            ("a.yaml", Some(role("a", "list"))),
            ("b.yaml", Some(role("b", "list"))),
            ("c.yaml", None),
            ("d.yaml", Some(role("d", "list"))),
        ]
        .into_iter()
        .map(|(name, after)| FileWrite::read(dir.join(name), after).unwrap())
        .collect();
        Scene {
            _temp: temp,
            dir,
            journal,
            writes,
        }
    }

    fn policy(&self) -> PolicySet {
        load_paths(std::slice::from_ref(&self.dir), &LoadOptions::default()).unwrap()
    }

    /// The policy before the commit and after it, each whole.
    fn old_and_new(&self) -> (PolicySet, PolicySet) {
        let load = |files: Vec<(&str, String)>| {
            let sources: Vec<(String, String)> = files
                .into_iter()
                .map(|(name, text)| (self.dir.join(name).display().to_string(), text))
                .collect();
            crate::policy::load::load_sources(&sources, &LoadOptions::default()).unwrap()
        };
        let old = load(vec![
            ("a.yaml", role("a", "get")),
            ("b.yaml", role("b", "get")),
            ("c.yaml", role("c", "get")),
        ]);
        let new = load(vec![
            ("a.yaml", role("a", "list")),
            ("b.yaml", role("b", "list")),
            ("d.yaml", role("d", "list")),
        ]);
        (old, new)
    }

    fn journal_exists(&self) -> bool {
        self.dir.join(JOURNAL_NAME).exists()
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// A commit cut short at every step it takes — its journal half-written, then in place with
/// 0, 1, 2, 3 or all 4 files written, then done — recovers to the whole old policy (before
/// the journal was complete: rolled back) or the whole new one (after: rolled forward), and
/// leaves no journal. While the journal is in place the directory loads without reading it.
#[test]
fn a_commit_cut_at_any_step_recovers_whole() {
    // The journal's own temporary file, half-written: the commit never began.
    let scene = Scene::new();
    let (old, _) = scene.old_and_new();
    let journal = scene.journal.encode(&scene.writes);
    let unfinished = scene
        .dir
        .join(format!("{}4242-7", temp_prefix(JOURNAL_NAME)));
    std::fs::write(&unfinished, &journal[..journal.len() / 2]).unwrap();
    assert_eq!(
        scene.journal.recover().unwrap(),
        Recovery::RolledBack { unfinished: 1 }
    );
    assert_eq!(scene.policy(), old);
    assert_eq!(scene.names(), ["a.yaml", "b.yaml", "c.yaml"]);

    for written in 0..=scene.writes.len() {
        let scene = Scene::new();
        let (_, new) = scene.old_and_new();
        scene.journal.write_journal(&scene.writes).unwrap();
        for file in &scene.writes[..written] {
            file.apply().unwrap();
        }
        // The journal is never policy: the directory loads (a mix, here), one role per file.
        let files = scene
            .names()
            .iter()
            .filter(|n| n.ends_with(".yaml"))
            .count();
        assert_eq!(
            scene.policy().roles.len(),
            files,
            "cut after {written} files"
        );
        assert!(scene.journal_exists());
        assert_eq!(
            scene.journal.recover().unwrap(),
            Recovery::RolledForward {
                files: 4,
                written: 4 - written
            },
            "cut after {written} files"
        );
        assert_eq!(scene.policy(), new, "cut after {written} files");
        assert!(!scene.journal_exists());
        assert_eq!(scene.journal.recover().unwrap(), Recovery::Clean);
    }

    // The whole commit, and a recovery after it that finds nothing to do.
    let scene = Scene::new();
    let (_, new) = scene.old_and_new();
    scene.journal.write_files(&scene.writes).unwrap();
    assert_eq!(scene.policy(), new);
    assert_eq!(scene.names(), ["a.yaml", "b.yaml", "d.yaml"]);
    assert_eq!(scene.journal.recover().unwrap(), Recovery::Clean);
}

/// A commit whose third file cannot be written (its directory was removed) puts the two
/// files it wrote back as they were, removes its journal and answers the write's error.
#[test]
fn a_commit_that_fails_half_way_is_undone() {
    let mut scene = Scene::new();
    let (old, _) = scene.old_and_new();
    let gone = scene.dir.join("gone").join("x.yaml");
    scene.writes.insert(
        2,
        FileWrite::read(gone.clone(), Some(role("x", "get"))).unwrap(),
    );
    let error = scene.journal.write_files(&scene.writes).unwrap_err();
    assert!(matches!(error, StoreError::Io { .. }), "{error:?}");
    assert!(error.to_string().contains(".x.yaml.tmp-"), "{error}");
    assert!(!scene.journal_exists());
    assert!(!scene.journal.unfinished());
    assert_eq!(scene.policy(), old);
    assert_eq!(scene.names(), ["a.yaml", "b.yaml", "c.yaml"]);
    assert_eq!(scene.journal.recover().unwrap(), Recovery::Clean);
}

/// Writes `journal` where a commit writes its journal.
fn plant(scene: &Scene, journal: &[u8]) {
    std::fs::write(scene.dir.join(JOURNAL_NAME), journal).unwrap();
}

/// A journal that is empty, truncated (in its header or its body), corrupt, of another
/// format or version, or naming a file outside the policy paths stops recovery with an
/// error naming the journal and saying what to do; nothing in the directory changes.
#[test]
fn a_journal_that_cannot_be_read_stops_recovery() {
    let scene = Scene::new();
    let (old, _) = scene.old_and_new();
    let journal = scene.journal.encode(&scene.writes);
    let newline = journal.iter().position(|b| *b == b'\n').unwrap();
    let mut flipped = journal.clone();
    let last = flipped.len() - 3;
    flipped[last] ^= 0x20;
    let outside = {
        let body = br#"{"files":[{"path":"../elsewhere.yaml","before":null,"after":"x"},{"path":"a.yaml","before":null,"after":"x"}]}"#;
        let mut out = format!(
            "{MAGIC} {VERSION} {} sha256:{}\n",
            body.len(),
            sha256_hex(body)
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    let absolute_outside = {
        let body = br#"{"files":[{"path":"/etc/authzd/token.yaml","before":null,"after":"x"}]}"#;
        let mut out = format!(
            "{MAGIC} {VERSION} {} sha256:{}\n",
            body.len(),
            sha256_hex(body)
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "it is empty"),
        (
            "cut in its header",
            journal[..newline / 2].to_vec(),
            "truncated: its header line is incomplete",
        ),
        (
            "cut in its body",
            journal[..journal.len() - 10].to_vec(),
            "truncated: its header announces",
        ),
        (
            "a byte flipped",
            flipped,
            "corrupt: its content does not match its checksum",
        ),
        (
            "another file",
            b"apiVersion: v1\nkind: ConfigMap\n".to_vec(),
            "is not a journal's",
        ),
        (
            "another version",
            String::from_utf8_lossy(&journal)
                .replacen(&format!("{MAGIC} {VERSION} "), &format!("{MAGIC} 9 "), 1)
                .into_bytes(),
            "format version 9",
        ),
        (
            "a file outside the policy paths",
            outside,
            "names `../elsewhere.yaml`, which is not a policy file under the policy paths",
        ),
        (
            "an absolute path outside the policy paths",
            absolute_outside,
            "names `/etc/authzd/token.yaml`",
        ),
    ];
    for (case, bytes, reason) in cases {
        plant(&scene, &bytes);
        let error = scene.journal.recover().unwrap_err();
        assert!(
            matches!(&error, JournalError::Unreadable { .. }),
            "{case}: {error:?}"
        );
        let reported = error.into_load_errors().to_string();
        let journal_path = scene.dir.join(JOURNAL_NAME).display().to_string();
        assert!(
            reported.starts_with(&format!(
                "{journal_path}: this commit journal cannot be read ("
            )),
            "{case}: {reported}"
        );
        assert!(reported.contains(reason), "{case}: {reported}");
        assert!(
            reported.contains("then remove this journal and start authzd again"),
            "{case}: {reported}"
        );
        assert_eq!(scene.policy(), old, "{case}");
        assert_eq!(
            std::fs::read(scene.dir.join(JOURNAL_NAME)).unwrap(),
            bytes,
            "{case}: the journal was changed"
        );
    }
}

/// A file the journal names that holds neither its old content nor the journal's (edited by
/// hand after the crash) stops recovery, naming it, before any file is written.
#[test]
fn a_file_changed_since_the_interrupted_commit_stops_recovery() {
    let scene = Scene::new();
    scene.journal.write_journal(&scene.writes).unwrap();
    let edited = role("b", "watch");
    std::fs::write(scene.dir.join("b.yaml"), &edited).unwrap();
    let error = scene.journal.recover().unwrap_err();
    let JournalError::Diverged { file, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(Path::new(file), scene.dir.join("b.yaml"));
    assert!(
        error.to_string().contains("it was changed since"),
        "{error}"
    );
    // Nothing was written: `a` is still old, `d` was not created, the journal is kept.
    assert_eq!(
        std::fs::read_to_string(scene.dir.join("a.yaml")).unwrap(),
        role("a", "get")
    );
    assert_eq!(
        scene.names(),
        [JOURNAL_NAME, "a.yaml", "b.yaml", "c.yaml"],
        "the journal is kept"
    );
}

/// Files under the journal's directory are named relative to it, so that a directory moved
/// with its journal (a volume mounted elsewhere) is still recovered; a file under another
/// policy path is named by its absolute path, and recovered there.
#[test]
fn a_moved_directory_is_recovered_and_other_roots_are_absolute() {
    let scene = Scene::new();
    let other_root = scene.dir.parent().unwrap().join("other");
    std::fs::create_dir(&other_root).unwrap();
    let mut writes = scene.writes.clone();
    writes.push(FileWrite::read(other_root.join("e.yaml"), Some(role("e", "list"))).unwrap());
    let journal = Journal::new(&scene.dir, &[scene.dir.clone(), other_root.clone()]);
    let text = String::from_utf8(journal.encode(&writes)).unwrap();
    assert!(text.contains(r#""path":"a.yaml""#), "{text}");
    assert!(
        text.contains(&format!(
            r#""path":"{}""#,
            other_root.join("e.yaml").display()
        )),
        "{text}"
    );
    journal.write_journal(&writes).unwrap();

    let moved = scene.dir.parent().unwrap().join("moved");
    std::fs::rename(&scene.dir, &moved).unwrap();
    let journal = Journal::new(&moved, &[moved.clone(), other_root.clone()]);
    assert_eq!(
        journal.recover().unwrap(),
        Recovery::RolledForward {
            files: 5,
            written: 5
        }
    );
    assert_eq!(
        std::fs::read_to_string(moved.join("a.yaml")).unwrap(),
        role("a", "list")
    );
    assert_eq!(
        std::fs::read_to_string(other_root.join("e.yaml")).unwrap(),
        role("e", "list")
    );
}

/// A file changed by someone else after the commit read it — here `c.yaml`, which the commit
/// removes, saved by hand after `a` and `b` were replaced — is not overwritten: the commit
/// fails with `FileChanged`, the files it had replaced are put back, the journal is gone and
/// the hand edit stays.
#[test]
fn a_file_changed_while_the_commit_is_made_is_not_overwritten() {
    let scene = Scene::new();
    let (old, _) = scene.old_and_new();
    let hand = format!("# saved by hand\n{}", role("c", "watch"));
    std::fs::write(scene.dir.join("c.yaml"), &hand).unwrap();
    let refused = scene.journal.write_files(&scene.writes).unwrap_err();
    assert!(
        matches!(&refused, StoreError::FileChanged(m) if m.contains("c.yaml")),
        "{refused:?}"
    );
    assert!(!scene.journal_exists());
    assert_eq!(
        std::fs::read_to_string(scene.dir.join("c.yaml")).unwrap(),
        hand
    );
    for name in ["a.yaml", "b.yaml"] {
        let kept = std::fs::read_to_string(scene.dir.join(name)).unwrap();
        assert!(kept.ends_with("verbs: [get]\n"), "{name}: {kept}");
    }
    assert!(!scene.dir.join("d.yaml").exists());
    let mut now = scene.policy();
    now.roles.retain(|r| r.name != "c");
    let mut expected = old;
    expected.roles.retain(|r| r.name != "c");
    assert_eq!(now, expected);

    // One file, written without a journal: the same last check.
    let write = FileWrite::read(scene.dir.join("a.yaml"), Some(role("a", "list"))).unwrap();
    std::fs::write(scene.dir.join("a.yaml"), &hand).unwrap();
    assert!(matches!(
        scene.journal.write_files(std::slice::from_ref(&write)),
        Err(StoreError::FileChanged(_))
    ));
    assert_eq!(
        std::fs::read_to_string(scene.dir.join("a.yaml")).unwrap(),
        hand
    );
    assert_eq!(scene.names(), vec!["a.yaml", "b.yaml", "c.yaml"]);
}
