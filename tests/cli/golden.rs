//! The golden corpus: `tests/golden/*.yaml`.
//!
//! Each file covers one theme and holds one or more YAML documents (`---`). Each document is a
//! *suite*: a policy bundle, an engine configuration, and the questions asked of it:
//!
//! ```yaml
//! description: what this covers and where it comes from
//! modes: [RBAC, ABAC]          # optional; default RBAC,ABAC
//! super_users: []              # optional
//! super_groups: []             # optional
//! policy:                      # files handed to the loader, by name
//!   - file: roles.yaml
//!     content: |
//!       ...
//! expect_load_error: "roles.yaml:3: substring"   # optional: the bundle must be rejected
//! authorize:
//!   - name: unique within the file
//!     user: alice
//!     groups: [g1]
//!     resource: {namespace: ns, verb: get, group: "", version: v1, resource: pods,
//!                subresource: "", name: ""}
//!     # or non_resource: {path: /healthz, verb: get}
//!     content:                 # optional (docs/api.md §4): what the request carries
//!       object: {metadata: {labels: {a: b}}}       # the object as it will be stored
//!       old_object: {...}                          # the stored object
//!       object_text: "not json"                    # raw text instead of `object`
//!       changed_paths: [".metadata.labels"]        # the caller's own diff
//!       field_selector: ["spec.nodeName In n1"]    # KEP-4601: `key Op v1,v2`
//!       label_selector: ["tier Exists"]
//!     expect:
//!       decision: ALLOW | DENY | NO_OPINION        # required, written by hand;
//!                                                  # INVALID_ARGUMENT: unreadable content
//!       reason: "exact reason"                     # optional; exact
//!       allowed_by: ["RBAC ClusterRoleBinding/b -> ClusterRole/r rule 0"]  # optional; exact
//!       denied_by: []                              # optional; exact
//!       evaluation_error: "exact"                  # optional; "...part..." = substring;
//!                                                  # ABSENT = no errors
//! who_can:
//!   - name: ...
//!     resource: {...}          # or non_resource
//!     expect: {users: [], groups: [], denied_users: [], denied_groups: [],
//!              evaluation_error: "..."}            # absent list = empty; absent error = none
//! ```
//!
//! Rule references are written as `RuleRef`'s `Display` without the binding's source:
//! `RBAC ClusterRoleBinding/NAME -> ClusterRole/NAME rule N`, `RBAC RoleBinding/NS/NAME ->
//! Role/NS/NAME rule N`; for ABAC, super-users and AlwaysAllow the source is the identity:
//! `ABAC file.jsonl:LINE`, `SuperUser NAME`, `AlwaysAllow`.
//!
//! Every case is checked against both the serving [`Engine`] and the [`ReferenceEvaluator`]; the
//! two must return identical responses. Who-can answers are also checked against `Authorize`
//! (docs/semantics.md §7): each listed user is allowed asking alone, each listed group is allowed for a user
//! bound nowhere, and likewise for the denied lists. Every mismatch of every file is reported,
//! not just the first.
//!
//! `AUTHZD_GOLDEN_UPDATE=1` rewrites `reason`, `allowed_by`, `denied_by` and `evaluation_error`
//! from the engine's answer, in place, keeping the rest of the file (comments included). It never
//! writes a decision or a who-can list: those are written by hand from the semantics documents
//! and are the point of the corpus. A case whose decision is wrong is not rewritten.

// Test code: a panic is a test failure, which is what we want.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use authzd::engine::content::ContentError;
use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{AllowedSubjects, Decision, Engine, EngineConfig, Mode, Response, RuleRef};
use authzd::policy::load::{load_sources, LoadError, LoadErrors, LoadOptions};
use authzd::policy::model::PolicySet;
use authzd::request::{
    Action, Content, NonResourceAttributes, Request, ResourceAttributes, SelectorOperator,
    SelectorRequirement, UserInfo,
};
use serde::Deserialize;

const UPDATE_ENV: &str = "AUTHZD_GOLDEN_UPDATE";
/// A user name no golden policy binds, for checking who-can group answers.
const PROBE_USER: &str = "golden:who-can-probe";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    description: String,
    #[serde(default)]
    modes: Option<Vec<String>>,
    #[serde(default)]
    super_users: Vec<String>,
    #[serde(default)]
    super_groups: Vec<String>,
    #[serde(default)]
    policy: Vec<PolicyFile>,
    #[serde(default)]
    expect_load_error: Option<String>,
    #[serde(default)]
    authorize: Vec<AuthorizeCase>,
    #[serde(default)]
    who_can: Vec<WhoCanCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    file: String,
    content: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ResourceSpec {
    namespace: String,
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NonResourceSpec {
    path: String,
    verb: String,
}

/// What a request carries beyond its deciding fields (docs/api.md §4): objects as YAML, the
/// caller's own changed paths, and KEP-4601 selectors as `key op value` strings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ContentSpec {
    object: Option<serde_json::Value>,
    old_object: Option<serde_json::Value>,
    /// The object as raw text (for unreadable content); replaces `object`.
    object_text: Option<String>,
    changed_paths: Vec<String>,
    field_selector: Vec<String>,
    label_selector: Vec<String>,
}

impl ContentSpec {
    fn build(&self) -> Result<Content, String> {
        let mut content = Content::default();
        content.object = match (&self.object_text, &self.object) {
            (Some(text), _) => Some(text.clone().into_bytes()),
            (None, Some(v)) => Some(serde_json::to_vec(v).map_err(|e| e.to_string())?),
            (None, None) => None,
        };
        content.old_object = match &self.old_object {
            Some(v) => Some(serde_json::to_vec(v).map_err(|e| e.to_string())?),
            None => None,
        };
        content.changed_paths = self.changed_paths.clone();
        content.field_selector = self
            .field_selector
            .iter()
            .map(|r| requirement(r))
            .collect::<Result<_, _>>()?;
        content.label_selector = self
            .label_selector
            .iter()
            .map(|r| requirement(r))
            .collect::<Result<_, _>>()?;
        Ok(content)
    }
}

/// `key In a,b`, `key NotIn a`, `key Exists`, `key DoesNotExist`.
fn requirement(text: &str) -> Result<SelectorRequirement, String> {
    let mut parts = text.split_whitespace();
    let (Some(key), Some(op)) = (parts.next(), parts.next()) else {
        return Err(format!(
            "selector requirement `{text}`: want `key Op [values]`"
        ));
    };
    let operator = SelectorOperator::parse(op).ok_or_else(|| format!("unknown operator `{op}`"))?;
    let values = parts
        .next()
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    Ok(SelectorRequirement {
        key: key.to_string(),
        operator,
        values,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthorizeCase {
    name: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    resource: Option<ResourceSpec>,
    #[serde(default)]
    non_resource: Option<NonResourceSpec>,
    #[serde(default)]
    content: Option<ContentSpec>,
    expect: AuthorizeExpect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthorizeExpect {
    /// `ALLOW`, `DENY`, `NO_OPINION`, or `INVALID_ARGUMENT` for content a rule needed and
    /// could not read (then `evaluation_error` holds the refusal).
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    allowed_by: Option<Vec<String>>,
    #[serde(default)]
    denied_by: Option<Vec<String>>,
    #[serde(default)]
    evaluation_error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WhoCanCase {
    name: String,
    #[serde(default)]
    resource: Option<ResourceSpec>,
    #[serde(default)]
    non_resource: Option<NonResourceSpec>,
    #[serde(default)]
    content: Option<ContentSpec>,
    expect: WhoCanExpect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct WhoCanExpect {
    users: Vec<String>,
    groups: Vec<String>,
    denied_users: Vec<String>,
    denied_groups: Vec<String>,
    evaluation_error: Option<String>,
}

/// Which list a case is in, for reports and in-place updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Section {
    Authorize,
    WhoCan,
}

impl Section {
    fn key(self) -> &'static str {
        match self {
            Section::Authorize => "authorize",
            Section::WhoCan => "who_can",
        }
    }
}

/// Replacement expectation lines (`key: value`, unindented) for one case, by
/// (document index, section, case name).
type Updates = BTreeMap<(usize, Section, String), Vec<String>>;

#[derive(Default)]
struct Report {
    /// `AUTHZD_GOLDEN_UPDATE`: explanation mismatches of rewritten cases are not failures.
    update: bool,
    files: usize,
    suites: usize,
    cases: usize,
    failures: Vec<String>,
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

#[test]
fn golden_corpus() {
    let update = std::env::var(UPDATE_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("tests/golden exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no golden files in {:?}", golden_dir());

    let mut report = Report {
        update,
        ..Report::default()
    };
    for path in &paths {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(path).expect("readable golden file");
        report.files += 1;
        let updates = run_file(&file, &text, &mut report);
        if update && !updates.is_empty() {
            let rewritten = rewrite(&text, &updates);
            if rewritten != text {
                std::fs::write(path, rewritten).expect("writable golden file");
                eprintln!("golden: rewrote explanations in {file}");
            }
        }
    }

    eprintln!(
        "golden: {} files, {} suites, {} cases, {} failures",
        report.files,
        report.suites,
        report.cases,
        report.failures.len()
    );
    if !report.failures.is_empty() {
        let mut msg = format!("{} golden case(s) failed:\n", report.failures.len());
        for f in &report.failures {
            let _ = writeln!(msg, "\n{f}");
        }
        panic!("{msg}");
    }
}

/// Runs every suite of one file; returns the explanation rewrites `AUTHZD_GOLDEN_UPDATE` would
/// make (only for cases whose decision is right).
fn run_file(file: &str, text: &str, report: &mut Report) -> Updates {
    let mut updates = Updates::new();
    let suites: Vec<Suite> = match serde_saphyr::from_multiple(text) {
        Ok(s) => s,
        Err(e) => {
            report
                .failures
                .push(format!("{file}: not a valid golden file: {e}"));
            return updates;
        }
    };
    let mut names = BTreeMap::new();
    for (doc, suite) in suites.iter().enumerate() {
        for (section, name) in suite
            .authorize
            .iter()
            .map(|c| (Section::Authorize, &c.name))
            .chain(suite.who_can.iter().map(|c| (Section::WhoCan, &c.name)))
        {
            if let Some(prev) = names.insert((section, name.clone()), doc) {
                report.failures.push(format!(
                    "{file}: {} case `{name}` appears in documents {prev} and {doc}; names must be unique per file",
                    section.key()
                ));
            }
        }
    }
    for (doc, suite) in suites.iter().enumerate() {
        report.suites += 1;
        run_suite(file, doc, suite, report, &mut updates);
    }
    updates
}

fn run_suite(file: &str, doc: usize, suite: &Suite, report: &mut Report, updates: &mut Updates) {
    let at = format!("{file}[doc {doc}]");
    if suite.description.trim().is_empty() {
        report.failures.push(format!("{at}: empty description"));
    }
    let modes = match &suite.modes {
        None => EngineConfig::default().modes,
        Some(list) => match list.iter().map(|m| m.parse::<Mode>()).collect() {
            Ok(modes) => modes,
            Err(e) => {
                report.failures.push(format!("{at}: {e}"));
                return;
            }
        },
    };
    let config = EngineConfig {
        modes,
        super_users: suite.super_users.clone(),
        super_groups: suite.super_groups.clone(),
    };
    let sources: Vec<(String, String)> = suite
        .policy
        .iter()
        .map(|p| (p.file.clone(), p.content.clone()))
        .collect();
    let loaded = load(&sources);

    if let Some(expected) = &suite.expect_load_error {
        report.cases += 1;
        match &loaded {
            Ok(_) => report.failures.push(format!(
                "{at} expect_load_error: the policy loaded, expected error `{expected}`"
            )),
            Err(errors) if !load_error_matches(expected, errors) => report.failures.push(format!(
                "{at} expect_load_error: expected `{expected}`, got:\n{}",
                indent(&errors.to_string())
            )),
            Err(_) => {}
        }
        if !suite.authorize.is_empty() || !suite.who_can.is_empty() {
            report.failures.push(format!(
                "{at}: a suite that expects a load error cannot ask questions"
            ));
        }
        return;
    }
    let policy = match loaded {
        Ok(policy) => policy,
        Err(errors) => {
            report.failures.push(format!(
                "{at}: policy failed to load ({} case(s) not run):\n{}",
                suite.authorize.len() + suite.who_can.len(),
                indent(&errors.to_string())
            ));
            return;
        }
    };

    let engine = Engine::new(&policy, config.clone());
    let reference = ReferenceEvaluator::new(&policy, &config);

    for case in &suite.authorize {
        report.cases += 1;
        let what = format!("{at} authorize `{}`", case.name);
        let action = match action(case.resource.as_ref(), case.non_resource.as_ref()) {
            Ok(a) => a,
            Err(e) => {
                report.failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        let request = Request {
            user: UserInfo {
                name: case.user.clone(),
                groups: case.groups.clone(),
                ..Default::default()
            },
            action,
        };
        let content = match case.content.as_ref().map(ContentSpec::build).transpose() {
            Ok(c) => c,
            Err(e) => {
                report.failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        let refused = |e: ContentError| Response {
            decision: Decision::NoOpinion,
            reason: "INVALID_ARGUMENT".into(),
            allowed_by: Vec::new(),
            denied_by: Vec::new(),
            errors: vec![e.to_string()],
            encoded: Default::default(),
            recorded: Default::default(),
            plan: Default::default(),
        };
        let got = engine
            .authorize_content(request.with_content(content.as_ref()))
            .unwrap_or_else(refused);
        let oracle = reference
            .authorize_content(&request, content.as_ref())
            .unwrap_or_else(refused);
        if got != oracle {
            report.failures.push(format!(
                "{what}: engine and reference evaluator disagree\n  engine:    {}\n  reference: {}",
                show_response(&got),
                show_response(&oracle)
            ));
        }
        let decision = if got.reason == "INVALID_ARGUMENT" {
            "INVALID_ARGUMENT"
        } else {
            got.decision.as_str()
        };
        let mut problems = check_authorize(&case.expect, &got);
        let decision_ok = decision == case.expect.decision;
        if decision_ok {
            updates.insert(
                (doc, Section::Authorize, case.name.clone()),
                authorize_lines(&got),
            );
            if report.update {
                problems.clear();
            }
        }
        if !problems.is_empty() {
            report.failures.push(format!(
                "{what}:\n{}\n  got: {}",
                problems.join("\n"),
                show_response(&got)
            ));
        }
    }

    for case in &suite.who_can {
        report.cases += 1;
        let what = format!("{at} who_can `{}`", case.name);
        let action = match action(case.resource.as_ref(), case.non_resource.as_ref()) {
            Ok(a) => a,
            Err(e) => {
                report.failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        let content = match case.content.as_ref().map(ContentSpec::build).transpose() {
            Ok(c) => c,
            Err(e) => {
                report.failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        let unreadable = |e: ContentError| AllowedSubjects {
            errors: vec![format!("INVALID_ARGUMENT {e}")],
            ..Default::default()
        };
        let got = engine
            .allowed_subjects_content(&action, content.as_ref())
            .unwrap_or_else(unreadable);
        let oracle = reference
            .allowed_subjects_content(&action, content.as_ref())
            .unwrap_or_else(unreadable);
        if got != oracle {
            report.failures.push(format!(
                "{what}: engine and reference evaluator disagree\n  engine:    {got:?}\n  reference: {oracle:?}"
            ));
        }
        let mut problems = check_who_can(&case.expect, &got);
        let lists_ok = problems.iter().all(|p| p.starts_with("  evaluation_error"));
        if lists_ok {
            updates.insert(
                (doc, Section::WhoCan, case.name.clone()),
                who_can_lines(&got),
            );
            if report.update {
                problems.clear();
            }
        }
        problems.extend(who_can_agrees_with_authorize(
            &engine,
            &action,
            content.as_ref(),
            &got,
        ));
        if !problems.is_empty() {
            report
                .failures
                .push(format!("{what}:\n{}\n  got: {got:?}", problems.join("\n")));
        }
    }
}

/// Hands the files to the loader exactly as named.
fn load(sources: &[(String, String)]) -> Result<PolicySet, LoadErrors> {
    load_sources(sources, &LoadOptions::default())
}

/// `file:line: substring` matches an error in that file and line whose message contains the
/// substring; anything else must be a substring of the whole error text.
fn load_error_matches(expected: &str, errors: &LoadErrors) -> bool {
    let parsed = expected.split_once(": ").and_then(|(location, message)| {
        let (file, line) = location.rsplit_once(':')?;
        Some((file, line.parse::<u32>().ok()?, message))
    });
    match parsed {
        Some((file, line, message)) => errors
            .0
            .iter()
            .any(|e: &LoadError| e.file == file && e.line == line && e.message.contains(message)),
        None => errors.to_string().contains(expected),
    }
}

fn action(
    resource: Option<&ResourceSpec>,
    non_resource: Option<&NonResourceSpec>,
) -> Result<Action, String> {
    match (resource, non_resource) {
        (Some(r), None) => Ok(Action::Resource(ResourceAttributes {
            namespace: r.namespace.clone(),
            verb: r.verb.clone(),
            group: r.group.clone(),
            version: r.version.clone(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            name: r.name.clone(),
        })),
        (None, Some(n)) => Ok(Action::NonResource(NonResourceAttributes {
            path: n.path.clone(),
            verb: n.verb.clone(),
        })),
        _ => Err("exactly one of `resource` and `non_resource` must be given".to_string()),
    }
}

/// A rule reference as the corpus writes it: `Display` without the binding's source.
fn rule_ref(r: &RuleRef) -> String {
    if r.binding.is_empty() {
        format!("{} {}", r.authorizer, r.source)
            .trim_end()
            .to_string()
    } else {
        format!(
            "{} {} -> {} rule {}",
            r.authorizer, r.binding, r.role, r.rule_index
        )
    }
}

fn rule_refs(refs: &[RuleRef]) -> Vec<String> {
    refs.iter().map(rule_ref).collect()
}

fn show_response(r: &Response) -> String {
    format!(
        "{} reason={:?} allowed_by={:?} denied_by={:?} evaluation_error={:?}",
        r.decision,
        r.reason,
        rule_refs(&r.allowed_by),
        rule_refs(&r.denied_by),
        r.evaluation_error()
    )
}

fn check_authorize(expect: &AuthorizeExpect, got: &Response) -> Vec<String> {
    let mut problems = Vec::new();
    let known = ["ALLOW", "DENY", "NO_OPINION", "INVALID_ARGUMENT"];
    let decision = if got.reason == "INVALID_ARGUMENT" {
        "INVALID_ARGUMENT"
    } else {
        got.decision.as_str()
    };
    if !known.contains(&expect.decision.as_str()) {
        problems.push(format!(
            "  decision: `{}` is not ALLOW, DENY, NO_OPINION or INVALID_ARGUMENT",
            expect.decision
        ));
    } else if decision != expect.decision {
        problems.push(format!(
            "  decision: expected {}, got {decision}",
            expect.decision
        ));
    }
    if let Some(reason) = &expect.reason {
        if *reason != got.reason {
            problems.push(format!(
                "  reason: expected {reason:?}, got {:?}",
                got.reason
            ));
        }
    }
    for (key, expected, actual) in [
        ("allowed_by", &expect.allowed_by, &got.allowed_by),
        ("denied_by", &expect.denied_by, &got.denied_by),
    ] {
        if let Some(expected) = expected {
            let actual = rule_refs(actual);
            if *expected != actual {
                problems.push(format!("  {key}: expected {expected:?}, got {actual:?}"));
            }
        }
    }
    problems.extend(check_error(
        expect.evaluation_error.as_deref(),
        &got.evaluation_error(),
    ));
    problems
}

/// Absent or `""`: no error. `...text...` (leading and/or trailing `...`): the joined errors
/// contain `text`. Otherwise the joined errors exactly.
fn check_error(expected: Option<&str>, actual: &str) -> Option<String> {
    let expected = expected.unwrap_or("");
    let inner = expected.strip_prefix("...").unwrap_or(expected);
    let inner = inner.strip_suffix("...").unwrap_or(inner);
    let ok = if inner.len() < expected.len() {
        actual.contains(inner)
    } else {
        actual == expected
    };
    (!ok).then(|| format!("  evaluation_error: expected {expected:?}, got {actual:?}"))
}

fn check_who_can(expect: &WhoCanExpect, got: &AllowedSubjects) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, expected, actual) in [
        ("users", &expect.users, &got.users),
        ("groups", &expect.groups, &got.groups),
        ("denied_users", &expect.denied_users, &got.denied_users),
        ("denied_groups", &expect.denied_groups, &got.denied_groups),
    ] {
        let mut expected = expected.clone();
        expected.sort();
        let mut actual = actual.clone();
        actual.sort();
        if expected != actual {
            problems.push(format!("  {key}: expected {expected:?}, got {actual:?}"));
        }
    }
    problems.extend(check_error(
        expect.evaluation_error.as_deref(),
        &got.evaluation_error(),
    ));
    problems
}

/// docs/semantics.md §7: every listed user is allowed asking alone; every listed group is allowed for a user
/// bound nowhere; the denied lists are denied the same way.
fn who_can_agrees_with_authorize(
    engine: &Engine,
    action: &Action,
    content: Option<&Content>,
    got: &AllowedSubjects,
) -> Vec<String> {
    let ask = |name: &str, groups: Vec<String>| {
        let request = Request {
            user: UserInfo {
                name: name.to_string(),
                groups,
                ..Default::default()
            },
            action: action.clone(),
        };
        engine
            .authorize_content(request.with_content(content))
            .map_or(Decision::NoOpinion, |r| r.decision)
    };
    let mut problems = Vec::new();
    for (list, expected) in [
        (&got.users, Decision::Allow),
        (&got.denied_users, Decision::Deny),
    ] {
        for user in list.iter().filter(|u| *u != "*") {
            let decision = ask(user, Vec::new());
            if decision != expected {
                problems.push(format!(
                    "  who-can lists user {user:?} ({expected}) but authorize as that user says {decision}"
                ));
            }
        }
    }
    for (list, expected) in [
        (&got.groups, Decision::Allow),
        (&got.denied_groups, Decision::Deny),
    ] {
        for group in list.iter().filter(|g| *g != "*") {
            let decision = ask(PROBE_USER, vec![group.clone()]);
            if decision != expected {
                problems.push(format!(
                    "  who-can lists group {group:?} ({expected}) but authorize as a member says {decision}"
                ));
            }
        }
    }
    problems
}

/// A YAML quoted scalar: single-quoted when that needs no escapes but `''` (easier to read for
/// reasons full of `"`), else double-quoted (JSON's escapes are valid YAML).
fn quote(s: &str) -> String {
    if s.contains('"') && !s.chars().any(char::is_control) {
        format!("'{}'", s.replace('\'', "''"))
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

fn quote_list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", items.join(", "))
}

fn authorize_lines(r: &Response) -> Vec<String> {
    let mut lines = vec![
        format!("reason: {}", quote(&r.reason)),
        format!("allowed_by: {}", quote_list(&rule_refs(&r.allowed_by))),
        format!("denied_by: {}", quote_list(&rule_refs(&r.denied_by))),
    ];
    let error = r.evaluation_error();
    if !error.is_empty() {
        lines.push(format!("evaluation_error: {}", quote(&error)));
    }
    lines
}

fn who_can_lines(a: &AllowedSubjects) -> Vec<String> {
    let error = a.evaluation_error();
    if error.is_empty() {
        Vec::new()
    } else {
        vec![format!("evaluation_error: {}", quote(&error))]
    }
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// Keys `AUTHZD_GOLDEN_UPDATE` owns inside an `expect:` block.
const REWRITTEN_KEYS: [&str; 4] = ["reason", "allowed_by", "denied_by", "evaluation_error"];

fn key_of(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let t = t.strip_prefix("- ").unwrap_or(t);
    let (key, _) = t.split_once(':')?;
    (!key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(key)
}

/// Rewrites, in place, the explanation keys of every case in `updates`, keeping everything
/// else. For `authorize` cases the new keys go right after `decision:`; for `who_can` cases at
/// the end of the `expect:` block.
fn rewrite(text: &str, updates: &Updates) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut doc = 0usize;
    let mut doc_has_content = false;
    let mut section: Option<Section> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line == "---" {
            if doc_has_content {
                doc += 1;
                doc_has_content = false;
            }
            section = None;
            out.push(line.to_string());
            i += 1;
            continue;
        }
        if !is_blank_or_comment(line) {
            doc_has_content = true;
        }
        if indentation(line) == 0 && !is_blank_or_comment(line) {
            section = match key_of(line) {
                Some("authorize") => Some(Section::Authorize),
                Some("who_can") => Some(Section::WhoCan),
                _ => None,
            };
        }
        let case_name = section.and_then(|_| {
            let t = line.trim_start().strip_prefix("- name:")?;
            serde_saphyr::from_str::<String>(t.trim()).ok()
        });
        let (Some(sec), Some(name)) = (section, case_name) else {
            out.push(line.to_string());
            i += 1;
            continue;
        };
        // The case runs until the next line indented at most as far as its `- `.
        let item_indent = indentation(line);
        let mut end = i + 1;
        while end < lines.len()
            && (is_blank_or_comment(lines[end]) || indentation(lines[end]) > item_indent)
            && lines[end] != "---"
        {
            end += 1;
        }
        match updates.get(&(doc, sec, name)) {
            Some(new_lines) => out.extend(rewrite_case(&lines[i..end], sec, new_lines)),
            None => out.extend(lines[i..end].iter().map(|l| l.to_string())),
        }
        i = end;
    }
    let mut result = out.join("\n");
    if text.ends_with('\n') {
        result.push('\n');
    }
    result
}

fn rewrite_case(case: &[&str], section: Section, new_lines: &[String]) -> Vec<String> {
    let Some(expect_at) = case.iter().position(|l| key_of(l) == Some("expect")) else {
        return case.iter().map(|l| l.to_string()).collect();
    };
    let expect_indent = indentation(case[expect_at]);
    let mut block_end = expect_at + 1;
    while block_end < case.len()
        && (is_blank_or_comment(case[block_end]) || indentation(case[block_end]) > expect_indent)
    {
        block_end += 1;
    }
    // Trailing blank lines and comments belong after the block.
    while block_end > expect_at + 1 && is_blank_or_comment(case[block_end - 1]) {
        block_end -= 1;
    }
    let body = &case[expect_at + 1..block_end];
    let Some(child_indent) = body
        .iter()
        .find(|l| !is_blank_or_comment(l))
        .map(|l| indentation(l))
    else {
        return case.iter().map(|l| l.to_string()).collect();
    };
    let pad = " ".repeat(child_indent);
    let mut kept: Vec<String> = Vec::new();
    let mut skipping = false;
    let mut insert_at = None;
    for line in body {
        if !is_blank_or_comment(line) && indentation(line) == child_indent {
            let key = key_of(line);
            skipping = key.is_some_and(|k| REWRITTEN_KEYS.contains(&k));
            if skipping {
                continue;
            }
            kept.push(line.to_string());
            if section == Section::Authorize && key == Some("decision") {
                insert_at = Some(kept.len());
            }
            continue;
        }
        // Continuation lines of a rewritten key go with it; comments and blank lines stay.
        if skipping && !is_blank_or_comment(line) && indentation(line) > child_indent {
            continue;
        }
        kept.push(line.to_string());
    }
    let insert_at = insert_at.unwrap_or(kept.len());
    let fresh: Vec<String> = new_lines.iter().map(|l| format!("{pad}{l}")).collect();
    kept.splice(insert_at..insert_at, fresh);

    let mut out: Vec<String> = case[..=expect_at].iter().map(|l| l.to_string()).collect();
    out.extend(kept);
    out.extend(case[block_end..].iter().map(|l| l.to_string()));
    out
}
