//! Policy loading: files and directories of RBAC objects, seed-003 documents and ABAC lines
//! into one [`PolicySet`], with every problem reported as `file:line: message`.
//!
//! # Formats, by file extension
//!
//! * `*.yaml`, `*.yml`: one or more YAML documents (`---`), each a Kubernetes RBAC object
//!   (module `kube`) or a seed-003 `role` / `roleBinding` document (module `seed003`);
//! * `*.json`: one JSON value, or several concatenated (seed 003 writes objects one after
//!   another), with the same content;
//! * `*.jsonl`: ABAC policy lines, v1beta1 or v0 (module `abac`).
//!
//! # Strictness (a deliberate choice)
//!
//! Upstream Kubernetes decodes leniently in places (unknown fields dropped, v0 ABAC fallback on
//! any decode problem). authzd refuses instead, because in an authorization policy a silently
//! dropped field changes access: a typo'd `verb:` leaves a rule with no verbs, a typo'd `usr`
//! in a v0 ABAC line turns "alice may" into "every authenticated user may", a dropped `deny`
//! widens access. So:
//!
//! * unknown fields are errors everywhere except inside `metadata` (where the usual
//!   server-written fields such as `uid`, `resourceVersion`, `annotations`, `managedFields` are
//!   ignored), in list metadata, and inside `attributeRestrictions` (free-form, kept verbatim);
//! * duplicate keys are errors (YAML and JSON alike);
//! * values must have the documented type: YAML `name: 1.10` is not the string `"1.10"`;
//! * `metadata.name` is required: authzd never generates names;
//! * rules are validated as upstream's API server validates them (`verbs` not empty; resource
//!   rules need `apiGroups` and `resources`; `nonResourceURLs` only in ClusterRoles and not mixed
//!   with resources), plus checks on seed 003's negation: a bare `-`, a list of only negated
//!   entries (it matches nothing, so a deny rule written that way would silently deny nothing),
//!   and a `-` prefix in `apiGroups`, `resourceNames` or `nonResourceURLs` (negation is not
//!   supported there, so it would be read as a literal name) are errors;
//! * subjects get upstream's defaulting (`apiGroup` `rbac.authorization.k8s.io` for `User` and
//!   `Group`) and validation.
//!
//! Any error rejects the whole load; every error found is reported, not only the first. Within a
//! file, a syntax error stops reading that file (what follows cannot be trusted).
//!
//! # Objects of other API groups
//!
//! Objects outside the API groups policy lives in (a Helm chart's ServiceAccount, Deployment,
//! CRD, ...), at the top level or inside a `List`, are skipped and counted ([`Skipped`], from
//! [`load_paths_reporting`]); a misspelt kind inside a policy group, an object without
//! `apiVersion` or `kind`, and a group that looks like a misspelt policy group are still
//! refused (module `other_kinds`). [`parse_manifest`], which reads writes, refuses them all.
//!
//! # Files and directories
//!
//! A directory is read recursively in sorted (byte-wise) name order; entries whose name starts
//! with `.` are skipped (editor and atomic-write temporaries, and Kubernetes ConfigMap volumes'
//! `..data` link farm), as are files with other extensions. A file named explicitly must have a
//! known extension. Symbolic links are followed; a file reached twice (say through a directory
//! and by name) is read once. Files over `LoadOptions::max_file_bytes` ([`MAX_FILE_BYTES`]
//! by default) are refused.

mod abac;
mod change_gate;
mod field_policy;

pub use field_policy::API_VERSION as FIELD_POLICY_API_VERSION;
mod kube;
mod node;
mod other_kinds;
mod rules;
mod seed003;

pub use other_kinds::{Skipped, SkippedObject, POLICY_GROUPS};

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::policy::model::{PolicyObject, PolicySet, Source};

use node::{Node, Problems, Value};

/// The seed-003 document kinds, read by `seed003` only when the document has no `apiVersion`
/// (with one, `kube` reads it and names seed 003 in its error).
const SEED003_KINDS: [&str; 4] = ["role", "roleBinding", "Policy", "PolicyBinding"];

/// Largest policy file authzd reads unless `--max-policy-file-bytes` says otherwise (16 MiB).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// How deep directories may nest (guards against symbolic-link loops).
const MAX_DIR_DEPTH: usize = 32;

/// Options that change how documents are read.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Seed 003's master namespace: roles and bindings in it are cluster-scoped.
    pub master_namespace: String,
    /// Largest policy file (or manifest) read, in bytes (`--max-policy-file-bytes`): a bound on
    /// memory, raised for a large cluster's export (`kubectl get rolebindings -A -o yaml`).
    pub max_file_bytes: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            master_namespace: "master".to_string(),
            max_file_bytes: MAX_FILE_BYTES,
        }
    }
}

/// One problem in one place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub file: String,
    /// 1-based; 0 when the problem concerns the whole file.
    pub line: u32,
    pub message: String,
}

impl fmt::Display for LoadError {
    /// `FILE:LINE: message`, or `FILE: message` for what is about the whole file (line 0: an
    /// unsupported extension, a file too large, an unreadable commit journal), which no line
    /// of it would locate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

/// Every problem found; a policy with any error is rejected whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadErrors(pub Vec<LoadError>);

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadErrors {}

/// What a file holds, chosen by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `*.yaml`, `*.yml`: YAML documents.
    Yaml,
    /// `*.json`: concatenated JSON values.
    Json,
    /// `*.jsonl`: ABAC lines.
    AbacLines,
}

impl Format {
    /// The format of a file name (ASCII case-insensitive extension), if it is a policy file.
    pub fn from_name(name: &str) -> Option<Format> {
        let ext = Path::new(name).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            "jsonl" => Some(Format::AbacLines),
            _ => None,
        }
    }
}

const UNKNOWN_EXTENSION: &str =
    "unsupported file extension (expected `.yaml`, `.yml`, `.json` or `.jsonl`)";

/// A load's policy, and the objects of other API groups it skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    pub policy: PolicySet,
    pub skipped: Skipped,
}

/// Loads every file and directory in `paths` into one canonical policy set.
pub fn load_paths(paths: &[PathBuf], options: &LoadOptions) -> Result<PolicySet, LoadErrors> {
    load_paths_reporting(paths, options).map(|loaded| loaded.policy)
}

/// [`load_paths`], with the objects of other API groups it skipped (for `authzd lint` and the
/// server's load log).
pub fn load_paths_reporting(
    paths: &[PathBuf],
    options: &LoadOptions,
) -> Result<Loaded, LoadErrors> {
    load_paths_observing(paths, options, &mut |_, _| {})
}

/// [`load_paths_reporting`], showing `observe` each file's name and the exact text it read,
/// before parsing it: the directory store keeps a digest of what it loaded, so that it never
/// rewrites a file that changed since (src/store/dir.rs).
pub fn load_paths_observing(
    paths: &[PathBuf],
    options: &LoadOptions,
    observe: &mut dyn FnMut(&str, &str),
) -> Result<Loaded, LoadErrors> {
    let mut errors = Vec::new();
    let mut files = Vec::new();
    let mut seen = HashSet::new();
    for path in paths {
        collect_files(path, true, 0, &mut files, &mut seen, &mut errors);
    }
    let mut loader = Loader::new(options);
    loader.errors = errors;
    for (path, format) in files {
        let name = path.display().to_string();
        match read_file(&path, options.max_file_bytes) {
            Ok(text) => {
                observe(&name, &text);
                loader.add(&name, &text, format)
            }
            Err(message) => loader.errors.push(LoadError {
                file: name,
                line: 0,
                message,
            }),
        }
    }
    loader.finish()
}

/// The policy files `path` names, in the order [`load_paths`] reads them: the file itself, or
/// a directory's files (recursively, in sorted name order, dot-entries and other extensions
/// skipped).
pub fn policy_files(path: &Path) -> Result<Vec<(PathBuf, Format)>, LoadErrors> {
    let (mut files, mut errors) = (Vec::new(), Vec::new());
    collect_files(path, true, 0, &mut files, &mut HashSet::new(), &mut errors);
    if errors.is_empty() {
        Ok(files)
    } else {
        Err(LoadErrors(errors))
    }
}

/// Same, from in-memory (file name, content) pairs; the format is chosen by the name's
/// extension.
pub fn load_sources(
    sources: &[(String, String)],
    options: &LoadOptions,
) -> Result<PolicySet, LoadErrors> {
    load_sources_reporting(sources, options).map(|loaded| loaded.policy)
}

/// [`load_sources`], with the objects of other API groups it skipped.
pub fn load_sources_reporting(
    sources: &[(String, String)],
    options: &LoadOptions,
) -> Result<Loaded, LoadErrors> {
    let mut loader = Loader::new(options);
    for (name, text) in sources {
        match Format::from_name(name) {
            None => loader.errors.push(LoadError {
                file: name.clone(),
                line: 0,
                message: UNKNOWN_EXTENSION.to_owned(),
            }),
            Some(_) if text.len() as u64 > options.max_file_bytes => {
                loader.errors.push(LoadError {
                    file: name.clone(),
                    line: 0,
                    message: too_large(text.len() as u64, options.max_file_bytes),
                })
            }
            Some(format) => loader.add(name, text, format),
        }
    }
    loader.finish()
}

/// The objects of other API groups a policy file's text holds, whether or not its policy
/// loads (an admin write must not rewrite such a file: they would be lost). Empty for ABAC
/// lines, for a name without a policy file's extension, and past a YAML or JSON syntax error.
pub fn skipped_in(name: &str, text: &str, options: &LoadOptions) -> Skipped {
    let mut cx = Cx::new(name, options);
    match Format::from_name(name) {
        Some(format @ (Format::Yaml | Format::Json)) => parse_documents(text, format, &mut cx),
        Some(Format::AbacLines) | None => {}
    }
    cx.skipped
}

/// A rule's clauses from their JSON form (`policy::render::clauses_to_value`, a conditional
/// answer's `authzd.io/clauses`): every clause checked as when a Role is loaded; `Err` names
/// what is wrong.
pub fn clauses_from_json(text: &str) -> Result<crate::policy::content::Clauses, String> {
    let node = node::parse_json_value(text).map_err(|e| e.message)?;
    let mut problems = node::Problems(Vec::new());
    let mut clauses = node::Fields::new(&node, "", false, &mut problems).map(|mut f| {
        let mut clauses =
            rules::content_clauses(&mut f, "clauses", &mut problems).unwrap_or_default();
        if let Some(same) = f.take("sameNode", &mut problems) {
            clauses.same_node = node::boolean(same, "sameNode", &mut problems);
        }
        if let Some(what) = f.take("unevaluable", &mut problems) {
            clauses.unevaluable = Some(node::string(what, "unevaluable", &mut problems));
        }
        f.finish(&mut problems);
        clauses
    });
    if let Some((_, problem)) = problems.0.first() {
        return Err(problem.clone());
    }
    clauses
        .take()
        .ok_or_else(|| "must be a JSON object".to_string())
}

/// Parse one manifest (YAML or JSON, one or more objects) into roles, bindings and
/// FieldPolicies (an admin write), in document order. A `.json` name means concatenated JSON,
/// `.yaml` or `.yml` YAML; with any other name, text starting with `{` or `[` is read as JSON,
/// anything else as YAML. Duplicates within the manifest are errors, and so are objects of
/// other API groups: a write names policy objects only.
pub fn parse_manifest(
    source_name: &str,
    text: &str,
    options: &LoadOptions,
) -> Result<Vec<PolicyObject>, LoadErrors> {
    let error = |message: String| {
        Err(LoadErrors(vec![LoadError {
            file: source_name.to_owned(),
            line: 0,
            message,
        }]))
    };
    if text.len() as u64 > options.max_file_bytes {
        return error(too_large(text.len() as u64, options.max_file_bytes));
    }
    let format = match Format::from_name(source_name) {
        Some(Format::AbacLines) => {
            return error("ABAC lines are not a manifest of roles and bindings".to_owned())
        }
        Some(format) => format,
        None if text.trim_start().starts_with(['{', '[']) => Format::Json,
        None => Format::Yaml,
    };
    let mut cx = Cx::new(source_name, options);
    parse_documents(text, format, &mut cx);
    let mut errors = cx.errors;
    for other in &cx.skipped.0 {
        errors.push(LoadError {
            file: other.source.file.to_string(),
            line: other.source.line,
            message: format!(
                "`{}` (apiVersion `{}`) is not a policy object: a write holds only Roles, ClusterRoles, RoleBindings, ClusterRoleBindings and FieldPolicies",
                other.kind, other.api_version
            ),
        });
    }
    let mut objects = cx.objects;
    objects.extend(cx.field_policies.into_iter().map(PolicyObject::FieldPolicy));
    let mut first_seen = HashMap::new();
    for object in &objects {
        check_duplicate(object, &mut first_seen, &mut errors);
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(LoadErrors(errors))
    }
}

// ---- loading -------------------------------------------------------------------------------

/// Accumulates objects, ABAC rules and errors over many files.
struct Loader<'a> {
    options: &'a LoadOptions,
    set: PolicySet,
    skipped: Skipped,
    first_seen: HashMap<(&'static str, String, String), Source>,
    errors: Vec<LoadError>,
}

impl<'a> Loader<'a> {
    fn new(options: &'a LoadOptions) -> Self {
        Self {
            options,
            set: PolicySet::default(),
            skipped: Skipped::default(),
            first_seen: HashMap::new(),
            errors: Vec::new(),
        }
    }

    fn add(&mut self, name: &str, text: &str, format: Format) {
        let mut cx = Cx::new(name, self.options);
        match format {
            Format::AbacLines => abac::parse_lines(text, &mut cx),
            Format::Yaml | Format::Json => parse_documents(text, format, &mut cx),
        }
        self.errors.append(&mut cx.errors);
        self.skipped.0.append(&mut cx.skipped.0);
        self.set.abac.append(&mut cx.abac);
        for policy in cx.field_policies {
            let key = ("FieldPolicy", String::new(), policy.name.clone());
            match self.first_seen.get(&key) {
                Some(first) => self.errors.push(LoadError {
                    file: policy.source.file.to_string(),
                    line: policy.source.line,
                    message: format!(
                        "duplicate FieldPolicy `{}`: already defined at {first}",
                        policy.name
                    ),
                }),
                None => {
                    self.first_seen.insert(key, policy.source.clone());
                    self.set.field_policies.push(policy);
                }
            }
        }
        for object in cx.objects {
            if check_duplicate(&object, &mut self.first_seen, &mut self.errors) {
                match object {
                    PolicyObject::Role(r) => self.set.roles.push(r.into()),
                    PolicyObject::Binding(b) => self.set.bindings.push(b.into()),
                    // Parsed into `cx.field_policies` (above), never into `cx.objects`.
                    PolicyObject::FieldPolicy(f) => self.set.field_policies.push(f),
                    PolicyObject::ChangeGate(g) => self.set.gates.push(g),
                }
            }
        }
    }

    fn finish(mut self) -> Result<Loaded, LoadErrors> {
        if !self.errors.is_empty() {
            return Err(LoadErrors(self.errors));
        }
        self.set.canonicalize();
        Ok(Loaded {
            policy: self.set,
            skipped: self.skipped,
        })
    }
}

/// Records the object; reports it (and returns false) if one of the same kind, namespace and
/// name was seen before.
fn check_duplicate(
    object: &PolicyObject,
    first_seen: &mut HashMap<(&'static str, String, String), Source>,
    errors: &mut Vec<LoadError>,
) -> bool {
    let key = (
        object.kind(),
        object.namespace().to_owned(),
        object.name().to_owned(),
    );
    let source = object.source();
    match first_seen.get(&key) {
        Some(first) => {
            errors.push(LoadError {
                file: source.file.to_string(),
                line: source.line,
                message: format!(
                    "duplicate {}: already defined at {first}",
                    label(object.kind(), object.namespace(), object.name())
                ),
            });
            false
        }
        None => {
            first_seen.insert(key, source.clone());
            true
        }
    }
}

/// What parsing one file produces.
pub(crate) struct Cx<'a> {
    pub file: Arc<str>,
    pub options: &'a LoadOptions,
    pub objects: Vec<PolicyObject>,
    pub abac: Vec<crate::policy::model::AbacRule>,
    pub field_policies: Vec<crate::policy::model::FieldPolicy>,
    /// Objects of other API groups (module `other_kinds`).
    pub skipped: Skipped,
    pub errors: Vec<LoadError>,
}

impl<'a> Cx<'a> {
    fn new(file: &str, options: &'a LoadOptions) -> Self {
        Self {
            file: Arc::from(file),
            options,
            objects: Vec::new(),
            abac: Vec::new(),
            field_policies: Vec::new(),
            skipped: Skipped::default(),
            errors: Vec::new(),
        }
    }

    pub fn source(&self, line: u32) -> Source {
        Source::new(self.file.clone(), line)
    }

    /// Turns one object's problems into errors, each prefixed with the object's label.
    pub fn report(&mut self, label: &str, problems: Problems) {
        for (line, message) in problems.0 {
            let message = if label.is_empty() {
                message
            } else {
                format!("{label}: {message}")
            };
            self.errors.push(LoadError {
                file: self.file.to_string(),
                line,
                message,
            });
        }
    }
}

/// How objects are named in messages: `` `Role` `ns/name` ``, `` `ClusterRole` `name` ``.
pub(crate) fn label(kind: &str, namespace: &str, name: &str) -> String {
    match (name.is_empty(), namespace.is_empty()) {
        (true, true) => format!("`{kind}` with no name"),
        (true, false) => format!("`{kind}` with no name in namespace `{namespace}`"),
        (false, true) => format!("`{kind}` `{name}`"),
        (false, false) => format!("`{kind}` `{namespace}/{name}`"),
    }
}

/// Parses a YAML or JSON file's objects into `cx`.
fn parse_documents(text: &str, format: Format, cx: &mut Cx<'_>) {
    let parsed = match format {
        Format::Json => node::parse_json_stream(text),
        _ => node::parse_yaml(text),
    };
    match parsed {
        Ok(nodes) => {
            for node in &nodes {
                parse_object(node, cx);
            }
        }
        Err(e) => cx.errors.push(LoadError {
            file: cx.file.to_string(),
            line: e.line,
            message: e.message,
        }),
    }
}

/// One top-level object: a seed-003 document (kind `role`, `roleBinding`, `Policy` or
/// `PolicyBinding` with no apiVersion; keys matched case-insensitively), an object of another
/// API group (skipped and counted), a FieldPolicy or a Kubernetes RBAC object.
fn parse_object(node: &Node, cx: &mut Cx<'_>) {
    let mut kind = None;
    if let Value::Map(entries) = &node.value {
        let found = entries
            .iter()
            .find(|(k, _)| k == "kind")
            .or_else(|| entries.iter().find(|(k, _)| k.eq_ignore_ascii_case("kind")));
        let has_api_version = entries.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("apiVersion")
                && !matches!(&v.value, Value::Null)
                && !matches!(&v.value, Value::String(s) if s.is_empty())
        });
        if let Some((
            _,
            Node {
                value: Value::String(found),
                ..
            },
        )) = found
        {
            if !has_api_version && SEED003_KINDS.contains(&found.as_str()) {
                seed003::parse(node, found, cx);
                return;
            }
            kind = Some(found.as_str());
        }
    }
    if !other_kinds::sift(node, cx, kube::reads_kind) {
        return;
    }
    if !parse_authzd_kind(node, kind.unwrap_or_default(), cx) {
        kube::parse(node, cx);
    }
}

/// One of authzd's own kinds (FieldPolicy, ChangeGate), at the top of a document or an item
/// of a `List`; false for any other kind.
fn parse_authzd_kind(node: &Node, kind: &str, cx: &mut Cx<'_>) -> bool {
    match kind {
        crate::policy::model::FIELD_POLICY_KIND => field_policy::parse(node, cx),
        crate::policy::model::CHANGE_GATE_KIND => change_gate::parse(node, cx),
        _ => return false,
    }
    true
}

// ---- files -----------------------------------------------------------------------------------

fn io_message(prefix: &str, err: &std::io::Error) -> String {
    let text = err.to_string();
    let mut chars = text.chars();
    let lowered = match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    };
    format!("{prefix}: {lowered}")
}

fn too_large(len: u64, limit: u64) -> String {
    format!(
        "file is too large ({len} bytes; the limit is {limit} bytes: raise it with --max-policy-file-bytes)"
    )
}

/// Adds the policy files under `path` to `files`, in load order.
fn collect_files(
    path: &Path,
    explicit: bool,
    depth: usize,
    files: &mut Vec<(PathBuf, Format)>,
    seen: &mut HashSet<PathBuf>,
    errors: &mut Vec<LoadError>,
) {
    let name = path.display().to_string();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let error = |message: String| LoadError {
        file: name.clone(),
        line: 0,
        message,
    };
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(err) => {
            // A dangling link with an unrelated name inside a directory is not a policy file.
            if explicit || Format::from_name(&file_name).is_some() {
                errors.push(error(io_message("cannot read", &err)));
            }
            return;
        }
    };
    if meta.is_dir() {
        if depth >= MAX_DIR_DEPTH {
            errors.push(error(format!(
                "directories nest deeper than {MAX_DIR_DEPTH} levels (a symbolic link loop?)"
            )));
            return;
        }
        let entries = match fs::read_dir(path) {
            Ok(entries) => entries,
            Err(err) => {
                errors.push(error(io_message("cannot read directory", &err)));
                return;
            }
        };
        let mut children = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => children.push(entry.file_name()),
                Err(err) => errors.push(error(io_message("cannot read directory", &err))),
            }
        }
        children.sort();
        for child in children {
            if child.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            collect_files(&path.join(child), false, depth + 1, files, seen, errors);
        }
        return;
    }
    let format = match Format::from_name(&file_name) {
        Some(format) => format,
        None if explicit => {
            errors.push(error(UNKNOWN_EXTENSION.to_owned()));
            return;
        }
        None => return,
    };
    if !meta.is_file() {
        if explicit {
            errors.push(error("not a regular file or directory".to_owned()));
        }
        return;
    }
    let identity = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if seen.insert(identity) {
        files.push((path.to_path_buf(), format));
    }
}

/// Reads a policy file, refusing more than `limit` bytes and non-UTF-8 content.
fn read_file(path: &Path, limit: u64) -> Result<String, String> {
    let file = fs::File::open(path).map_err(|e| io_message("cannot read", &e))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_message("cannot read", &e))?;
    if bytes.len() as u64 > limit {
        let len = fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(too_large(len, limit));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "file is not valid utf-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests;
