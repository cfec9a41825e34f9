//! The test file: its format, and loading it into [`TestFile`] with every problem named as
//! `file:line: message`.
//!
//! ```yaml
//! description: what these cases hold the policy to        # optional
//! policy: [../policy]       # optional: files or directories, relative to this file
//! modes: [RBAC, ABAC]       # optional (or "RBAC,ABAC"); default RBAC,ABAC
//! super_users: []           # optional; default none
//! super_groups: []          # optional; default [system:masters]
//! cases:
//!   - name: jane reads pods in default          # unique within the file
//!     user: jane                                # or service_account: NS/NAME; groups: [...]
//!     groups: [devs]
//!     resource: {namespace: default, verb: get, group: "", resource: pods,
//!                subresource: "", name: ""}
//!     # or non_resource: {path: /healthz, verb: get}
//!     content:                                  # optional: what rules over content read
//!       object: {metadata: {labels: {app: web}}}
//!       old_object: {metadata: {labels: {}}}
//!       # or changed_paths: [".metadata.labels"]
//!       field_selector: "spec.nodeName=node-1"  # KEP-4601, as kubectl writes them
//!       label_selector: "tier in (web)"
//!     expect:
//!       decision: allow                         # allow | deny | no_opinion
//!       allowed_by: "RBAC RoleBinding/default/read-pods -> Role/default/pod-reader rule 0"
//!       denied_by: []                           # [] = none; absent = not checked
//!       users: [jane]                           # who can do the action: exactly these
//!       groups_including: [system:masters]      # ... or at least these
//! ```
//!
//! A case with a subject (`user`, `service_account` or `groups`) asks for a decision and must
//! expect one; who-can expectations (`users`, `groups`, `denied_users`, `denied_groups` exactly,
//! `users_including`, `groups_including` at least) ask who can do the case's action, whoever
//! its subject is, so a case may have no subject and expect only those.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::engine::{Decision, Mode};
use crate::request::selector::{parse_field_selector, parse_label_selector};
use crate::request::{
    Action, Content, NonResourceAttributes, Request, ResourceAttributes, UserInfo,
};

/// The largest test file read: a file of 10,000 cases is about 2 MB.
pub const MAX_TEST_FILE_BYTES: u64 = 64 << 20;

/// Nesting allowed in a test file (objects under `content` included): as deep as serde_json
/// decodes content.
const MAX_DEPTH: usize = 128;

/// A problem that stops a test file from loading, or from running (its policy does not load).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    pub file: String,
    /// 1-based; 0 when the problem is the whole file (unreadable, empty).
    pub line: u64,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

/// A loaded test file (`Default`: one that names nothing, so every setting is the command
/// line's or the default).
#[derive(Debug, Default)]
pub struct TestFile {
    /// The path as it was given, for reports.
    pub path: PathBuf,
    pub description: String,
    /// `policy`, each resolved against the file's directory; `None` when the file names none.
    pub policy: Option<Vec<PathBuf>>,
    pub modes: Option<Vec<Mode>>,
    pub super_users: Option<Vec<String>>,
    pub super_groups: Option<Vec<String>>,
    pub cases: Vec<Case>,
}

/// One case: a request and what is expected of it.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    /// Where the case starts in its file.
    pub line: u64,
    /// The subject and action. A case that asks only who can has the empty subject; it is
    /// never asked for a decision.
    pub request: Request,
    pub content: Option<Content>,
    pub expect: Expect,
}

/// What a case expects; at least one of the two is set.
#[derive(Debug)]
pub struct Expect {
    pub decision: Option<DecisionExpect>,
    pub who_can: Option<WhoCanExpect>,
}

#[derive(Debug)]
pub struct DecisionExpect {
    pub decision: Decision,
    /// Rule references (see [`super::run`] for how they are matched); `Some(vec![])`: none.
    pub allowed_by: Option<Vec<String>>,
    pub denied_by: Option<Vec<String>>,
}

/// Who can do the case's action: `Some` lists exactly (as sets), `*_including` at least.
#[derive(Debug, Default)]
pub struct WhoCanExpect {
    pub users: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
    pub denied_users: Option<Vec<String>>,
    pub denied_groups: Option<Vec<String>>,
    pub users_including: Vec<String>,
    pub groups_including: Vec<String>,
}

// ---- the format, as serde reads it -------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    description: String,
    #[serde(default)]
    policy: Option<StringOrList>,
    #[serde(default)]
    modes: Option<StringOrList>,
    #[serde(default)]
    super_users: Option<Vec<String>>,
    #[serde(default)]
    super_groups: Option<Vec<String>>,
    #[serde(default)]
    cases: Vec<Spanned<CaseSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSpec {
    name: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    service_account: Option<String>,
    #[serde(default)]
    resource: Option<ResourceSpec>,
    #[serde(default)]
    non_resource: Option<NonResourceSpec>,
    #[serde(default)]
    content: Option<ContentSpec>,
    expect: ExpectSpec,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ResourceSpec {
    namespace: String,
    verb: String,
    /// The API group (`""`: the core group), as SubjectAccessReview's resourceAttributes
    /// names it.
    #[serde(alias = "api_group")]
    group: String,
    version: String,
    resource: String,
    subresource: String,
    name: String,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NonResourceSpec {
    path: String,
    verb: String,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ContentSpec {
    object: Option<serde_json::Value>,
    #[serde(alias = "oldObject")]
    old_object: Option<serde_json::Value>,
    changed_paths: Vec<String>,
    field_selector: Option<String>,
    label_selector: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ExpectSpec {
    decision: Option<String>,
    allowed_by: Option<StringOrList>,
    denied_by: Option<StringOrList>,
    users: Option<Vec<String>>,
    groups: Option<Vec<String>>,
    denied_users: Option<Vec<String>>,
    denied_groups: Option<Vec<String>>,
    users_including: Option<Vec<String>>,
    groups_including: Option<Vec<String>>,
}

/// One string or a list of them (`policy: ../policy` and `policy: [a, b]` alike).
struct StringOrList(Vec<String>);

impl<'de> Deserialize<'de> for StringOrList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Strings;
        impl<'de> Visitor<'de> for Strings {
            type Value = StringOrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(StringOrList(vec![value.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    items.push(item);
                }
                Ok(StringOrList(items))
            }
        }
        deserializer.deserialize_any(Strings)
    }
}

// ---- loading -----------------------------------------------------------------------------

/// Reads and checks one test file. Every problem found is returned, not just the first.
pub fn load_file(path: &Path) -> Result<TestFile, Vec<FileError>> {
    let file = path.display().to_string();
    let whole = |message: String| {
        vec![FileError {
            file: file.clone(),
            line: 0,
            message,
        }]
    };
    let text = read_bounded(path).map_err(whole)?;
    if text.trim().is_empty() {
        return Err(whole("is empty: a test file lists `cases`".to_string()));
    }
    let spec = parse(&text).map_err(|(line, message)| {
        vec![FileError {
            file: file.clone(),
            line,
            message,
        }]
    })?;
    let base = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    check(path, &file, &base, spec)
}

fn read_bounded(path: &Path) -> Result<String, String> {
    let opened = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut bytes = Vec::new();
    opened
        .take(MAX_TEST_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_TEST_FILE_BYTES {
        return Err(format!(
            "is larger than {MAX_TEST_FILE_BYTES} bytes: split it into several test files"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())
}

/// The YAML, deserialized; `Err((line, message))` (line 0 when the parser gives none).
fn parse(text: &str) -> Result<FileSpec, (u64, String)> {
    let options = serde_saphyr::Options {
        budget: Some(serde_saphyr::Budget {
            // One document; a file of many thousands of cases, each a few dozen nodes.
            max_documents: 1,
            max_events: 20_000_000,
            max_nodes: 8_000_000,
            max_depth: MAX_DEPTH,
            ..serde_saphyr::Budget::default()
        }),
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        // Alias bombs: the same bound as policy files (a test file rarely uses aliases).
        alias_limits: serde_saphyr::options::AliasLimits {
            max_total_replayed_events: 1_000_000,
            max_replay_stack_depth: 8,
            ..serde_saphyr::options::AliasLimits::default()
        },
        // YAML 1.2: only `true`/`false` are booleans, so `yes` in an object stays a string.
        strict_booleans: true,
        with_snippet: false,
        crop_radius: 0,
        ..serde_saphyr::Options::default()
    };
    serde_saphyr::from_str_with_options::<FileSpec>(text, options).map_err(|err| {
        let err = err.without_snippet();
        let mut message = err.to_string();
        let mut line = 0;
        if let Some(location) = err.location() {
            // The line goes in front (`file:line:`); the column stays in the message.
            let suffix = format!(" at line {}, column {}", location.line(), location.column());
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = format!("{stripped} (column {})", location.column());
            }
            line = location.line();
        }
        // serde-saphyr places an unknown key of a case at the case's first line (the case is
        // read through `Spanned`); the key itself is the first line from there that holds it.
        if let Some(key) = unknown_key(&message) {
            if let Some(found) = line_of_key(text, line, key) {
                if found != line {
                    line = found;
                    message = message
                        .rsplit_once(" (column ")
                        .map_or(message.clone(), |(head, _)| head.to_string());
                }
            }
        }
        (line, message)
    })
}

/// `unknown field `KEY`, expected ...` -> `KEY`.
fn unknown_key(message: &str) -> Option<&str> {
    message
        .strip_prefix("unknown field `")?
        .split_once('`')
        .map(|(key, _)| key)
}

/// The first line at or after `from` (1-based) where `key` is written as a mapping key: at
/// the start of the line's content, or after `{`, `,` or `- `, followed by `:`.
fn line_of_key(text: &str, from: u64, key: &str) -> Option<u64> {
    let skip = usize::try_from(from.saturating_sub(1)).unwrap_or(usize::MAX);
    text.lines()
        .enumerate()
        .skip(skip)
        .find(|(_, line)| {
            line.match_indices(key).any(|(at, _)| {
                let before = line[..at].trim_end();
                let after = line[at + key.len()..].trim_start();
                after.starts_with(':')
                    && (before.is_empty()
                        || before.ends_with(['{', ',', '-'])
                        || before.ends_with(['\'', '"']))
            })
        })
        .and_then(|(index, _)| u64::try_from(index + 1).ok())
}

/// Everything serde cannot check: each case's subject, action, content and expectations.
fn check(path: &Path, file: &str, base: &Path, spec: FileSpec) -> Result<TestFile, Vec<FileError>> {
    let mut errors = Vec::new();
    let mut error = |line: u64, message: String| {
        errors.push(FileError {
            file: file.to_string(),
            line,
            message,
        })
    };
    if spec.cases.is_empty() {
        error(0, "has no `cases`".to_string());
    }
    let modes = match spec.modes.map(|list| parse_modes(&list.0)).transpose() {
        Ok(modes) => modes,
        Err(message) => {
            error(0, format!("modes: {message}"));
            None
        }
    };
    let policy = spec
        .policy
        .map(|list| list.0.iter().map(|p| base.join(p)).collect::<Vec<_>>());
    if policy.as_ref().is_some_and(Vec::is_empty) {
        error(
            0,
            "policy: an empty list names no policy (leave it out for the default)".to_string(),
        );
    }
    let mut first_line: HashMap<String, u64> = HashMap::new();
    let mut cases = Vec::with_capacity(spec.cases.len());
    for spanned in spec.cases {
        let line = spanned.referenced.line();
        let case = spanned.value;
        if case.name.trim().is_empty() {
            error(line, "a case needs a `name`".to_string());
        } else if let Some(first) = first_line.get(&case.name) {
            error(
                line,
                format!(
                    "case `{}`: the name is already used by the case at line {first}",
                    case.name
                ),
            );
        } else {
            first_line.insert(case.name.clone(), line);
        }
        let name = case.name.clone();
        match build_case(case, line) {
            Ok(case) => cases.push(case),
            Err(problems) => {
                for problem in problems {
                    error(line, format!("case `{name}`: {problem}"));
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(TestFile {
        path: path.to_path_buf(),
        description: spec.description,
        policy,
        modes,
        super_users: spec.super_users,
        super_groups: spec.super_groups,
        cases,
    })
}

/// `RBAC,ABAC` or `[RBAC, ABAC]`; a Webhook is refused (offline, nothing asks one).
fn parse_modes(entries: &[String]) -> Result<Vec<Mode>, String> {
    if entries.is_empty() {
        return Err("an empty chain decides nothing (leave `modes` out for RBAC,ABAC)".to_string());
    }
    let joined = entries.join(",");
    let modes = Mode::parse_chain(&joined)?;
    if modes.iter().any(|mode| matches!(mode, Mode::Webhook(_))) {
        return Err(
            "Webhook cannot be tested offline: a test asks the local policy only".to_string(),
        );
    }
    Ok(modes)
}

/// `allow`, `deny`, `no_opinion`, in any case, with `_`, `-` or a space.
fn parse_decision(text: &str) -> Option<Decision> {
    let normal: String = text
        .trim()
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    match normal.as_str() {
        "allow" => Some(Decision::Allow),
        "deny" => Some(Decision::Deny),
        "noopinion" => Some(Decision::NoOpinion),
        _ => None,
    }
}

/// `NAMESPACE/NAME`: the user a service account authenticates as, and the groups the service
/// account authenticator gives it (`system:serviceaccounts`, `system:serviceaccounts:NS`).
fn service_account(text: &str) -> Result<UserInfo, String> {
    let Some((namespace, name)) = text.split_once('/') else {
        return Err(format!(
            "service_account `{text}` is not `NAMESPACE/NAME` (or write the user \
             `system:serviceaccount:NS:NAME` as `user`)"
        ));
    };
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(format!("service_account `{text}` is not `NAMESPACE/NAME`"));
    }
    Ok(UserInfo {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        groups: vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
        ],
        ..UserInfo::default()
    })
}

fn build_case(case: CaseSpec, line: u64) -> Result<Case, Vec<String>> {
    let mut problems = Vec::new();

    let has_subject =
        case.user.is_some() || case.service_account.is_some() || !case.groups.is_empty();
    let mut user = match (&case.user, &case.service_account) {
        (Some(_), Some(_)) => {
            problems.push("give `user` or `service_account`, not both".to_string());
            UserInfo::default()
        }
        (Some(name), None) => UserInfo {
            name: name.clone(),
            ..UserInfo::default()
        },
        (None, Some(account)) => service_account(account).unwrap_or_else(|problem| {
            problems.push(problem);
            UserInfo::default()
        }),
        (None, None) => UserInfo::default(),
    };
    user.groups.extend(case.groups);

    let action = match (case.resource, case.non_resource) {
        (Some(r), None) => {
            if r.verb.is_empty() || r.resource.is_empty() {
                problems.push("`resource` needs at least `verb` and `resource`".to_string());
            }
            Action::Resource(ResourceAttributes {
                namespace: r.namespace,
                verb: r.verb,
                group: r.group,
                version: r.version,
                resource: r.resource,
                subresource: r.subresource,
                name: r.name,
            })
        }
        (None, Some(n)) => {
            if n.verb.is_empty() || n.path.is_empty() {
                problems.push("`non_resource` needs `path` and `verb`".to_string());
            }
            Action::NonResource(NonResourceAttributes {
                path: n.path,
                verb: n.verb,
            })
        }
        _ => {
            problems.push("give exactly one of `resource` and `non_resource`".to_string());
            Action::NonResource(NonResourceAttributes::default())
        }
    };

    let content = match case.content {
        None => None,
        Some(_) if matches!(action, Action::NonResource(_)) => {
            problems.push("`content` is for resource requests only".to_string());
            None
        }
        Some(spec) => match build_content(spec) {
            Ok(content) => Some(content),
            Err(problem) => {
                problems.push(problem);
                None
            }
        },
    };

    let expect = case.expect;
    let who_can = WhoCanExpect {
        users: expect.users,
        groups: expect.groups,
        denied_users: expect.denied_users,
        denied_groups: expect.denied_groups,
        users_including: expect.users_including.unwrap_or_default(),
        groups_including: expect.groups_including.unwrap_or_default(),
    };
    let asks_who_can = who_can.users.is_some()
        || who_can.groups.is_some()
        || who_can.denied_users.is_some()
        || who_can.denied_groups.is_some()
        || !who_can.users_including.is_empty()
        || !who_can.groups_including.is_empty();

    let decision = match expect.decision.as_deref().map(|d| (d, parse_decision(d))) {
        Some((_, Some(decision))) => Some(decision),
        Some((text, None)) => {
            problems.push(format!(
                "decision `{text}` is not one of allow, deny, no_opinion"
            ));
            None
        }
        None => None,
    };
    if has_subject && expect.decision.is_none() {
        problems.push(
            "a case with a subject expects a `decision` (allow, deny or no_opinion)".to_string(),
        );
    }
    if !has_subject && expect.decision.is_some() {
        problems
            .push("`decision` needs a subject: `user`, `service_account` or `groups`".to_string());
    }
    if (expect.allowed_by.is_some() || expect.denied_by.is_some()) && expect.decision.is_none() {
        problems.push("`allowed_by` / `denied_by` go with a `decision`".to_string());
    }
    if expect.decision.is_none() && !asks_who_can {
        problems.push(
            "`expect` expects nothing: give a `decision` or a who-can list (`users`, `groups`, \
             `users_including`, ...)"
                .to_string(),
        );
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Case {
        name: case.name,
        line,
        request: Request { user, action },
        content,
        expect: Expect {
            decision: decision.map(|decision| DecisionExpect {
                decision,
                allowed_by: expect.allowed_by.map(|list| list.0),
                denied_by: expect.denied_by.map(|list| list.0),
            }),
            who_can: asks_who_can.then_some(who_can),
        },
    })
}

fn build_content(spec: ContentSpec) -> Result<Content, String> {
    if !spec.changed_paths.is_empty() && (spec.object.is_some() || spec.old_object.is_some()) {
        return Err(
            "content: give `object` / `old_object` or `changed_paths`, not both".to_string(),
        );
    }
    let json = |value: Option<serde_json::Value>, key: &str| -> Result<Option<Vec<u8>>, String> {
        value
            .map(|v| serde_json::to_vec(&v).map_err(|e| format!("content.{key}: {e}")))
            .transpose()
    };
    let mut content = Content::default();
    content.object = json(spec.object, "object")?;
    content.old_object = json(spec.old_object, "old_object")?;
    content.changed_paths = spec.changed_paths;
    if let Some(raw) = spec.field_selector {
        content.field_selector = parse_field_selector(&raw)
            .map_err(|e| format!("content.field_selector `{raw}`: {e}"))?;
    }
    if let Some(raw) = spec.label_selector {
        content.label_selector = parse_label_selector(&raw)
            .map_err(|e| format!("content.label_selector `{raw}`: {e}"))?;
    }
    Ok(content)
}

/// The test files that `paths` name: a file as it is, a directory as its `*.yaml` and `*.yml`
/// files (sorted; not its subdirectories). A directory that cannot be read, or holds none, is
/// an error of its own.
pub fn expand(paths: &[PathBuf]) -> Vec<Result<PathBuf, FileError>> {
    let mut out = Vec::new();
    for path in paths {
        if !path.is_dir() {
            out.push(Ok(path.clone()));
            continue;
        }
        let error = |message: String| FileError {
            file: path.display().to_string(),
            line: 0,
            message,
        };
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                out.push(Err(error(format!("cannot read the directory: {e}"))));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        if files.is_empty() {
            out.push(Err(error(
                "holds no test files (`*.yaml`, `*.yml`)".to_string(),
            )));
        }
        out.extend(files.into_iter().map(Ok));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<TestFile, Vec<FileError>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, text).unwrap();
        load_file(&path)
    }

    fn messages(errors: &[FileError]) -> Vec<String> {
        errors
            .iter()
            .map(|e| format!("{}: {}", e.line, e.message))
            .collect()
    }

    #[test]
    fn a_case_reads_its_subject_action_and_expectations() {
        let file = load_text(
            "policy: ../p\nmodes: RBAC\ncases:\n\
             - name: sa reads pods\n  service_account: kube-system/builder\n  groups: [extra]\n\
             \x20 resource: {namespace: ns, verb: get, resource: pods}\n\
             \x20 expect: {decision: No Opinion, denied_by: [], users_including: [x]}\n",
        )
        .unwrap();
        assert_eq!(file.modes, Some(vec![Mode::Rbac]));
        let policy = file.policy.unwrap();
        assert!(policy[0].ends_with("../p"), "{policy:?}");
        let case = &file.cases[0];
        assert_eq!(case.line, 4);
        assert_eq!(
            case.request.user.name,
            "system:serviceaccount:kube-system:builder"
        );
        assert_eq!(
            case.request.user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "extra"
            ]
        );
        let decision = case.expect.decision.as_ref().unwrap();
        assert_eq!(decision.decision, Decision::NoOpinion);
        assert_eq!(decision.denied_by, Some(vec![]));
        assert_eq!(decision.allowed_by, None);
        assert_eq!(case.expect.who_can.as_ref().unwrap().users_including, ["x"]);
    }

    #[test]
    fn an_unknown_key_names_its_line() {
        let errors = load_text(
            "cases:\n- name: a\n  user: u\n  resource: {verb: get, resource: pods}\n  expect:\n    decison: allow\n",
        )
        .unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].line, 6, "{errors:?}");
        assert!(
            errors[0].message.contains("unknown field `decison`"),
            "{errors:?}"
        );
    }

    #[test]
    fn an_unknown_key_of_a_case_or_of_the_file_names_its_own_line() {
        let errors = load_text(
            "cases:\n- name: a\n  resource: {verb: get, resource: pods}\n\n  usr: u\n  expect: {decision: allow}\n",
        )
        .unwrap_err();
        assert_eq!((errors[0].line, errors.len()), (5, 1), "{errors:?}");
        assert!(
            errors[0].message.starts_with("unknown field `usr`"),
            "{errors:?}"
        );
        let errors = load_text(
            "cases:\n- {name: a, user: u, resource: {verb: get, resource: pods}, expect: {decision: allow}}\npolicies: [x]\n",
        )
        .unwrap_err();
        assert_eq!(errors[0].line, 3, "{errors:?}");
    }

    #[test]
    fn every_problem_of_every_case_is_named_with_its_line() {
        let errors = load_text(
            "cases:\n\
             - name: one\n  user: u\n  resource: {verb: get, resource: pods}\n  expect: {decision: maybe}\n\
             - name: one\n  non_resource: {path: /x, verb: get}\n  expect: {}\n\
             - name: three\n  groups: [g]\n  resource: {verb: get, resource: pods}\n  non_resource: {path: /x, verb: get}\n  expect: {users: []}\n",
        )
        .unwrap_err();
        let got = messages(&errors);
        assert_eq!(
            got,
            [
                "2: case `one`: decision `maybe` is not one of allow, deny, no_opinion",
                "6: case `one`: the name is already used by the case at line 2",
                "6: case `one`: `expect` expects nothing: give a `decision` or a who-can list (`users`, `groups`, `users_including`, ...)",
                "9: case `three`: give exactly one of `resource` and `non_resource`",
                "9: case `three`: a case with a subject expects a `decision` (allow, deny or no_opinion)",
            ]
        );
    }

    #[test]
    fn syntax_errors_and_empty_files_do_not_load() {
        let errors = load_text("cases:\n- name: a\n  user: [unclosed\n").unwrap_err();
        assert!(errors[0].line >= 3, "{errors:?}");
        assert_eq!(load_text("  \n").unwrap_err()[0].line, 0);
        assert!(load_text("cases: []\n").unwrap_err()[0]
            .message
            .contains("has no `cases`"));
        assert!(load_text("- just a list\n").is_err());
        let errors = load_text("modes: []\ncases: []\n").unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.message.contains("modes: an empty chain")),
            "{errors:?}"
        );
        let errors = load_text("modes: [RBAC, Webhook]\ncases: []\n").unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.message.contains("modes: Webhook cannot")),
            "{errors:?}"
        );
    }

    #[test]
    fn content_is_checked_when_the_file_loads() {
        let errors = load_text(
            "cases:\n- name: a\n  user: u\n  resource: {verb: list, resource: pods}\n\
             \x20 content: {label_selector: 'a in (', object: {a: 1}}\n  expect: {decision: allow}\n",
        )
        .unwrap_err();
        assert!(
            errors[0]
                .message
                .contains("content.label_selector `a in (`"),
            "{errors:?}"
        );
        let file = load_text(
            "cases:\n- name: a\n  user: u\n  resource: {verb: update, resource: pods}\n\
             \x20 content: {object: {metadata: {name: x}}, oldObject: {metadata: {name: y}}, field_selector: 'spec.nodeName=n1'}\n  expect: {decision: allow}\n",
        )
        .unwrap();
        let content = file.cases[0].content.as_ref().unwrap();
        assert_eq!(
            content.object.as_deref(),
            Some(br#"{"metadata":{"name":"x"}}"#.as_slice())
        );
        assert_eq!(content.field_selector[0].key, "spec.nodeName");
    }

    #[test]
    fn the_error_display_is_file_colon_line() {
        let e = FileError {
            file: "t.yaml".into(),
            line: 3,
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "t.yaml:3: bad");
        let whole = FileError { line: 0, ..e };
        assert_eq!(whole.to_string(), "t.yaml: bad");
    }
}
