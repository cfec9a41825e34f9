use proptest::prelude::*;

use super::*;
use crate::policy::load::parse_manifest;
use crate::store::{ObjectKind, ObjectView};

const SEED001: &str = include_str!("../../../policy/seed001-rbac.yaml");
const SEED003: &str = include_str!("../../../policy/seed003-roles.json");

fn options() -> LoadOptions {
    LoadOptions::default()
}

fn object(kind: ObjectKind, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// The stored form of the one object of `manifest`.
fn value_of(manifest: &str) -> (ObjectRef, Value) {
    let objects = parse_manifest("w.yaml", manifest, &options()).unwrap();
    let [object] = objects.as_slice() else {
        panic!("one object expected in {manifest}");
    };
    (ObjectRef::of(object), ObjectView::from(object).to_value())
}

fn texts<'a>(text: &'a str, documents: &[Document]) -> Vec<&'a str> {
    documents.iter().map(|d| &text[d.start..d.end]).collect()
}

#[test]
fn yaml_documents_cover_the_text_and_start_at_their_markers() {
    let documents = split_yaml(SEED001);
    assert_eq!(texts(SEED001, &documents).concat(), SEED001);
    assert_eq!(documents.len(), 7);
    // The file's header comment: a document with no body.
    assert_eq!(
        (
            documents[0].marked,
            documents[0].body,
            documents[0].last_line
        ),
        (false, None, 1)
    );
    let read_pods = &SEED001[documents[3].start..documents[3].end];
    assert!(read_pods.starts_with("---\n# This role binding allows \"jane\""));
    let (body_start, body_end) = documents[3].body.unwrap();
    assert!(SEED001[body_start..body_end].starts_with("kind: RoleBinding\n"));
    assert!(
        SEED001[body_start..body_end].ends_with("apiVersion: rbac.authorization.k8s.io/v1alpha1\n")
    );
    assert!(documents[1..].iter().all(|d| d.marked));
}

#[test]
fn yaml_markers_follow_yaml_rules() {
    // `---` with content or a comment on its line, `...` ending a document, a bare document
    // after it, CRLF line ends, a byte-order mark, and dashes that are not markers.
    let text = "\u{FEFF}--- {kind: A}\r\n...\r\n# after the end\r\nb: 1\r\n--- # a comment\r\nc: \"---\"\r\n----\r\n  ---\r\nd: |\r\n  x\r\n---";
    let documents = split_yaml(text);
    assert_eq!(texts(text, &documents).concat(), text);
    let bodies: Vec<Option<&str>> = documents
        .iter()
        .map(|d| d.body.map(|(s, e)| &text[s..e]))
        .collect();
    assert_eq!(
        bodies,
        vec![
            Some("\u{FEFF}--- {kind: A}\r\n"),
            Some("b: 1\r\n"),
            Some("c: \"---\"\r\n----\r\n  ---\r\nd: |\r\n  x\r\n"),
            None,
        ]
    );
    assert!(documents[0].body_on_marker && !documents[2].body_on_marker);
    assert_eq!(
        documents
            .iter()
            .map(|d| (d.first_line, d.last_line))
            .collect::<Vec<_>>(),
        vec![(1, 2), (3, 4), (5, 10), (11, 11)]
    );
}

#[test]
fn json_documents_are_the_values_of_the_concatenation() {
    let text = "{\"a\": 1}\n\n  {\"b\":\n [2]}\n{\"c\": 3}";
    let documents = split_json(text).unwrap();
    let bodies: Vec<&str> = documents
        .iter()
        .map(|d| &text[d.body.unwrap().0..d.body.unwrap().1])
        .collect();
    assert_eq!(bodies, vec!["{\"a\": 1}", "{\"b\":\n [2]}", "{\"c\": 3}"]);
    assert_eq!(
        documents.iter().map(|d| d.first_line).collect::<Vec<_>>(),
        vec![1, 3, 5]
    );
    assert!(split_json("{\"a\": ").is_err());
}

/// One `authzd delete` of a seed-001 binding removes its document (its `---` and its comment)
/// and nothing else: the other five objects keep their `v1alpha1`, comments and layout.
#[test]
fn a_delete_removes_its_document_only() {
    let documents = split_yaml(SEED001);
    let edit = FileEdit {
        delete: vec![object(ObjectKind::RoleBinding, "default", "read-pods")],
        ..FileEdit::default()
    };
    let edited = edit_file("seed001-rbac.yaml", SEED001, &edit, &options()).unwrap();
    let expected = format!(
        "{}{}",
        &SEED001[..documents[3].start],
        &SEED001[documents[3].end..]
    );
    assert_eq!(edited.text.unwrap(), expected);
    assert_eq!(edited.policy.bindings.len(), 2);
}

/// A replaced object's body becomes its new rendering; the comment above it stays, and so does
/// every other byte of the file.
#[test]
fn a_replace_rewrites_its_body_only() {
    let documents = split_yaml(SEED001);
    let (r, value) = value_of(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: read-pods, namespace: default}\nsubjects: [{kind: User, name: joan, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}\n",
    );
    let mut edit = FileEdit::default();
    edit.replace.insert(r, value.clone());
    let edited = edit_file("seed001-rbac.yaml", SEED001, &edit, &options()).unwrap();
    let (body_start, body_end) = documents[3].body.unwrap();
    let expected = format!(
        "{}{}{}",
        &SEED001[..body_start],
        render_body(&value, Format::Yaml),
        &SEED001[body_end..]
    );
    assert_eq!(edited.text.unwrap(), expected);
}

/// The first document without `---`: deleting it keeps the comment above it (it may be the
/// file's header); a new object is a document at the end.
#[test]
fn the_first_document_keeps_the_comments_above_it_and_new_objects_go_last() {
    let text = "# the team's roles\nkind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: a}\nrules: []\n# trailing\n---\nkind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: b}\nrules: []";
    let (added, value) = value_of(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: c}\n",
    );
    let edit = FileEdit {
        delete: vec![object(ObjectKind::ClusterRole, "", "a")],
        add: vec![(added, value.clone())],
        ..FileEdit::default()
    };
    let edited = edit_file("roles.yaml", text, &edit, &options()).unwrap();
    assert_eq!(
        edited.text.unwrap(),
        format!(
            "# the team's roles\n---\nkind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {{name: b}}\nrules: []\n---\n{}",
            render_body(&value, Format::Yaml)
        )
    );
    // The last object deleted: only blank space left, the file goes; comments keep it.
    let edit = FileEdit {
        delete: vec![object(ObjectKind::ClusterRole, "", "c")],
        ..FileEdit::default()
    };
    let one = format!("---\n{}", render_body(&value, Format::Yaml));
    assert_eq!(
        edit_file("c.yaml", &one, &edit, &options()).unwrap().text,
        None
    );
    let commented = format!("# keep me\n{one}");
    assert_eq!(
        edit_file("c.yaml", &commented, &edit, &options())
            .unwrap()
            .text
            .as_deref(),
        Some("# keep me\n")
    );
}

/// Seed 003's concatenated JSON: the `Policy` and `PolicyBinding` containers (no objects) and
/// every other value stay as written; a deleted value goes with the space after it.
#[test]
fn json_values_are_edited_alone() {
    let documents = split_json(SEED003).unwrap();
    let editors = documents
        .iter()
        .position(|d| SEED003[d.start..d.end].contains("\"Editors\""))
        .unwrap();
    let edit = FileEdit {
        delete: vec![object(ObjectKind::RoleBinding, "hammer", "Editors")],
        ..FileEdit::default()
    };
    let edited = edit_file("seed003-roles.json", SEED003, &edit, &options()).unwrap();
    let expected = format!(
        "{}{}",
        &SEED003[..documents[editors].start],
        &SEED003[documents[editors + 1].start..]
    );
    assert_eq!(edited.text.unwrap(), expected);

    let (r, value) = value_of(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: Editors, namespace: hammer}\nsubjects: [{kind: User, name: Edith, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {kind: ClusterRole, name: edit, apiGroup: rbac.authorization.k8s.io}\n",
    );
    let mut edit = FileEdit::default();
    edit.replace.insert(r, value);
    let edited = edit_file("seed003-roles.json", SEED003, &edit, &options())
        .unwrap()
        .text
        .unwrap();
    let (start, end) = documents[editors].body.unwrap();
    assert!(edited.starts_with(&SEED003[..start]));
    assert!(edited.ends_with(&SEED003[end..]));
    assert!(edited.contains("Edith") && edited.contains("\"PolicyBinding\""));
}

const LIST: &str = "# exported\napiVersion: v1\nkind: List\nitems:\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: ClusterRole\n  metadata: {name: a}\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: ClusterRole\n  metadata: {name: b}\n";

/// A `List` document is re-rendered with what it keeps; one that also holds objects authzd
/// does not read is refused (they would be dropped).
#[test]
fn a_list_is_rendered_again_unless_it_holds_other_kinds() {
    let tail = "---\n# other\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: z}\n";
    let text = format!("{LIST}{tail}");
    let edit = FileEdit {
        delete: vec![object(ObjectKind::ClusterRole, "", "a")],
        ..FileEdit::default()
    };
    let edited = edit_file("l.yaml", &text, &edit, &options())
        .unwrap()
        .text
        .unwrap();
    assert!(edited.starts_with("# exported\n"), "{edited}");
    assert!(edited.ends_with(tail), "{edited}");
    assert!(edited.contains("kind: List") && !edited.contains("name: a"));

    let mixed = LIST.replace(
        "items:\n",
        "items:\n- {apiVersion: v1, kind: ServiceAccount, metadata: {name: s, namespace: n}}\n",
    );
    let refused = edit_file("l.yaml", &mixed, &edit, &options()).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("l.yaml:1: this document holds ClusterRole `a`")
            && refused.to_string().contains("objects authzd does not read"),
        "{refused}"
    );
}

#[test]
fn abac_lines_are_never_edited() {
    let edit = FileEdit {
        delete: vec![object(ObjectKind::ClusterRole, "", "a")],
        ..FileEdit::default()
    };
    assert!(edit_file("a.jsonl", "", &edit, &options()).is_err());
}

// ---- the property: untouched documents stay byte for byte -----------------------------------

/// One generated document: its frame and body as separate strings, so that the test knows
/// what an edit must leave.
#[derive(Clone, Debug)]
struct Doc {
    marker: String,
    leading: String,
    /// The ClusterRole it holds (its index), or `None` for a ServiceAccount.
    role: Option<usize>,
    body: String,
    trailing: String,
}

fn comment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("# a comment\n".to_string()),
        Just("\n".to_string()),
        Just("  # indented: --- not a marker\n\n".to_string()),
    ]
}

fn role_body(index: usize, version: &str, order: usize, quoted: bool) -> String {
    let name = if quoted {
        format!("\"r{index}\"")
    } else {
        format!("r{index}")
    };
    let mut keys = [
        format!("apiVersion: rbac.authorization.k8s.io/{version}\n"),
        "kind: ClusterRole\n".to_string(),
        format!("metadata:\n  # why this name\n  name: {name}\n"),
        "rules:\n- apiGroups: ['']\n  resources: [pods]   # pods only\n  verbs: [\"get\"]\n"
            .to_string(),
    ];
    keys.rotate_left(order % 4);
    keys.concat()
}

fn doc(index: usize) -> impl Strategy<Value = Doc> {
    (
        prop_oneof![Just("---\n"), Just("--- # next\n")],
        comment(),
        comment(),
        prop::sample::select(vec!["v1", "v1beta1", "v1alpha1"]),
        0usize..4,
        any::<bool>(),
        prop::bool::weighted(0.8),
    )
        .prop_map(
            move |(marker, leading, trailing, version, order, quoted, is_role)| Doc {
                marker: marker.to_string(),
                leading,
                role: is_role.then_some(index),
                body: if is_role {
                    role_body(index, version, order, quoted)
                } else {
                    format!("apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: s{index}, namespace: n}}\n")
                },
                trailing,
            },
        )
}

/// What the write does to each role: kept, replaced or deleted.
#[derive(Clone, Copy, Debug)]
enum Action {
    Keep,
    Replace,
    Delete,
}

fn file() -> impl Strategy<Value = (String, bool, Vec<(Doc, Action)>, bool)> {
    (
        comment(),
        any::<bool>(),
        (1usize..7).prop_flat_map(|n| {
            (0..n)
                .map(|i| {
                    (
                        doc(i),
                        prop_oneof![
                            2 => Just(Action::Keep),
                            1 => Just(Action::Replace),
                            1 => Just(Action::Delete),
                        ],
                    )
                })
                .collect::<Vec<_>>()
        }),
        any::<bool>(),
    )
}

fn replacement(index: usize) -> (ObjectRef, Value) {
    value_of(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: r{index}}}\nrules: [{{apiGroups: [''], resources: [secrets], verbs: [list]}}]\n"
    ))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the comments, key orders, quoting, apiVersions and objects of other groups
    /// around them, a write of some documents leaves every other byte as it was: the edited
    /// text is exactly the original with the written documents' bodies replaced (their
    /// frames kept), the deleted documents cut out whole, and a new one appended.
    #[test]
    fn untouched_documents_stay_byte_for_byte(
        (header, implicit_first, docs, add) in file()
    ) {
        let mut text = header.clone();
        let mut expected = header;
        let mut edit = FileEdit::default();
        for (at, (doc, action)) in docs.iter().enumerate() {
            // The first document may go without `---` when nothing precedes it.
            let marker = if at == 0 && implicit_first && text.is_empty() { "" } else { doc.marker.as_str() };
            text.push_str(&format!("{marker}{}{}{}", doc.leading, doc.body, doc.trailing));
            let action = if doc.role.is_some() { *action } else { Action::Keep };
            match (action, doc.role) {
                (Action::Keep, _) | (_, None) => {
                    expected.push_str(&format!("{marker}{}{}{}", doc.leading, doc.body, doc.trailing));
                }
                (Action::Replace, Some(i)) => {
                    let (r, value) = replacement(i);
                    expected.push_str(&format!(
                        "{marker}{}{}{}",
                        doc.leading,
                        render_body(&value, Format::Yaml),
                        doc.trailing
                    ));
                    edit.replace.insert(r, value);
                }
                (Action::Delete, Some(i)) => {
                    if marker.is_empty() {
                        expected.push_str(&doc.leading);
                    }
                    edit.delete.push(object(ObjectKind::ClusterRole, "", &format!("r{i}")));
                }
            }
        }
        if add {
            let (r, value) = replacement(99);
            if !expected.is_empty() && !expected.ends_with('\n') {
                expected.push('\n');
            }
            expected.push_str("---\n");
            expected.push_str(&render_body(&value, Format::Yaml));
            edit.add.push((r, value));
        }
        let edited = edit_file("p.yaml", &text, &edit, &options()).unwrap();
        match edited.text {
            Some(out) => prop_assert_eq!(out, expected),
            None => prop_assert!(expected.trim().is_empty(), "{expected:?}"),
        }
    }
}

/// A document whose content starts on its `---` line gets its `---` back with the new body;
/// two JSON values on one line cannot be told apart, so a write to either is refused.
#[test]
fn inline_documents_and_shared_lines() {
    let text = "--- {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: a}}\n# after a\n--- {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: b}}\n";
    let (r, value) = value_of(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: a}\nrules: [{apiGroups: [''], resources: [pods], verbs: [get]}]\n",
    );
    let mut edit = FileEdit::default();
    edit.replace.insert(r, value.clone());
    let edited = edit_file("i.yaml", text, &edit, &options())
        .unwrap()
        .text
        .unwrap();
    assert_eq!(
        edited,
        format!(
            "---\n{}# after a\n--- {{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {{name: b}}}}\n",
            render_body(&value, Format::Yaml)
        )
    );

    let json = "{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"ClusterRole\", \"metadata\": {\"name\": \"a\"}} {\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"ClusterRole\", \"metadata\": {\"name\": \"b\"}}\n";
    let edit = FileEdit {
        delete: vec![object(ObjectKind::ClusterRole, "", "b")],
        ..FileEdit::default()
    };
    let refused = edit_file("two.json", json, &edit, &options()).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("two.json:1: several documents start on this line"),
        "{refused}"
    );
}

/// `authzd apply` of an object as it already is leaves its document as written: seed 001's
/// `v1alpha1` Role, applied in its `v1` form, keeps every byte.
#[test]
fn an_object_applied_unchanged_keeps_its_document() {
    let (r, value) = value_of(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: pod-reader, namespace: default}\nrules: [{apiGroups: [''], resources: [pods], verbs: [get, watch, list]}]\n",
    );
    let mut edit = FileEdit::default();
    edit.replace.insert(r, value);
    let edited = edit_file("seed001-rbac.yaml", SEED001, &edit, &options()).unwrap();
    assert_eq!(edited.text.as_deref(), Some(SEED001));
}

/// A file with CRLF line ends keeps them in what a write puts in it.
#[test]
fn crlf_files_keep_their_line_ends() {
    let text = SEED001.replace('\n', "\r\n");
    let (r, value) = value_of(&read_pods("joan"));
    let (added, new) = value_of(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: c}\n",
    );
    let mut edit = FileEdit {
        add: vec![(added, new)],
        ..FileEdit::default()
    };
    edit.replace.insert(r, value);
    let edited = edit_file("seed001-rbac.yaml", &text, &edit, &options())
        .unwrap()
        .text
        .unwrap();
    assert!(edited.contains("joan") && edited.contains("name: c"));
    assert_eq!(edited.matches('\n').count(), edited.matches("\r\n").count());
}

fn read_pods(user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: read-pods, namespace: default}}\nsubjects: [{{kind: User, name: {user}, apiGroup: rbac.authorization.k8s.io}}]\nroleRef: {{kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}}\n"
    )
}
