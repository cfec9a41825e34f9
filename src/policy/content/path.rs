//! Field paths in structured-merge-diff syntax (seed 004: `.metadata.labels['app']`), the
//! patterns rules write over them, and the change set of an object computed server-side.
//!
//! Without a schema a JSON object's members are all alike: `.name` and `['name']` name the
//! same member. Lists are atomic unless the [`DiffConfig`] says they are sets (elements
//! `[="x"]`) or keyed lists (elements `[type="Ready"]`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

/// The longest pattern or path text accepted, in bytes.
pub const MAX_PATH_TEXT: usize = 4096;
/// The deepest nesting the diff walks; deeper content is refused, not truncated.
pub const MAX_DEPTH: usize = 64;
/// The most changed paths one request may produce or carry.
pub const MAX_PATHS: usize = 10_000;

/// One step of a concrete path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// A member of a JSON object (a struct field or a map key).
    Member(String),
    /// An element of a set list, by its value as canonical JSON.
    Value(String),
    /// An element of a keyed list, by its key fields (name, canonical JSON value), sorted.
    Keyed(Vec<(String, String)>),
}

/// A concrete path from the object's root; empty is the root (`.`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(pub Vec<Step>);

/// One step of a pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PatternStep {
    /// A member by exact name.
    Member(String),
    /// A member whose name starts with the prefix (`['team.example.com/*']`).
    MemberPrefix(String),
    Value(String),
    Keyed(Vec<(String, String)>),
    /// `[*]`: any member or element.
    Any,
}

/// A path pattern as rules write it. A pattern covers a path when it names the path or one of
/// its ancestors: `.metadata.labels` covers `.metadata.labels['app']`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PathPattern {
    steps: Vec<PatternStep>,
    text: String,
}

impl PathPattern {
    /// Parses `.a.b['k']`, `['prefix*']`, `[="v"]`, `[k="v",k2=1]` and `[*]`; `.` alone is
    /// the root (it covers every path).
    pub fn parse(text: &str) -> Result<PathPattern, String> {
        let steps = parse_steps(text, true)?;
        Ok(PathPattern {
            steps,
            text: text.to_string(),
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn steps(&self) -> &[PatternStep] {
        &self.steps
    }

    /// Whether this pattern names `path` or an ancestor of it.
    pub fn covers(&self, path: &FieldPath) -> bool {
        self.steps.len() <= path.0.len()
            && self
                .steps
                .iter()
                .zip(&path.0)
                .all(|(pattern, step)| step_matches(pattern, step))
    }

    /// Whether this pattern names exactly `path` (for list and ignore configuration).
    pub fn names(&self, path: &FieldPath) -> bool {
        self.steps.len() == path.0.len() && self.covers(path)
    }

    /// Whether a change at `path` may change what this pattern names: the pattern covers the
    /// path, or the path is an ancestor of paths the pattern names (a whole member replaced,
    /// an atomic list, a caller's coarse `changed_paths`).
    pub fn touched_by(&self, path: &FieldPath) -> bool {
        self.steps
            .iter()
            .zip(&path.0)
            .all(|(pattern, step)| step_matches(pattern, step))
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn step_matches(pattern: &PatternStep, step: &Step) -> bool {
    match (pattern, step) {
        (PatternStep::Any, _) => true,
        (PatternStep::Member(a), Step::Member(b)) => a == b,
        (PatternStep::MemberPrefix(prefix), Step::Member(b)) => b.starts_with(prefix.as_str()),
        (PatternStep::Value(a), Step::Value(b)) => a == b,
        (PatternStep::Keyed(a), Step::Keyed(b)) => a == b,
        _ => false,
    }
}

impl FieldPath {
    pub const ROOT: FieldPath = FieldPath(Vec::new());

    /// Parses a concrete path (the pattern syntax without `*` and `[*]`), as callers that
    /// diffed themselves send them.
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        let steps = parse_steps(text, false)?;
        Ok(FieldPath(
            steps
                .into_iter()
                .map(|step| match step {
                    PatternStep::Member(name) => Step::Member(name),
                    PatternStep::Value(value) => Step::Value(value),
                    PatternStep::Keyed(keys) => Step::Keyed(keys),
                    // parse_steps refuses these when globs are not allowed.
                    PatternStep::MemberPrefix(name) => Step::Member(name),
                    PatternStep::Any => Step::Member("*".into()),
                })
                .collect(),
        ))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str(".");
        }
        for step in &self.0 {
            match step {
                Step::Member(name) if is_identifier(name) => write!(f, ".{name}")?,
                Step::Member(name) => write_quoted_key(f, name)?,
                Step::Value(value) => write!(f, "[={value}]")?,
                Step::Keyed(keys) => {
                    f.write_str("[")?;
                    for (i, (k, v)) in keys.iter().enumerate() {
                        if i > 0 {
                            f.write_str(",")?;
                        }
                        write!(f, "{k}={v}")?;
                    }
                    f.write_str("]")?;
                }
            }
        }
        Ok(())
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// `['name']`, with `'` and `\\` escaped: written in runs, no string built.
fn write_quoted_key(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    f.write_str("['")?;
    let mut rest = name;
    while let Some(at) = rest.find(['\'', '\\']) {
        f.write_str(&rest[..at])?;
        f.write_str("\\")?;
        f.write_str(&rest[at..at + 1])?;
        rest = &rest[at + 1..];
    }
    f.write_str(rest)?;
    f.write_str("']")
}

/// The parser shared by patterns and concrete paths.
fn parse_steps(text: &str, globs: bool) -> Result<Vec<PatternStep>, String> {
    if text.len() > MAX_PATH_TEXT {
        return Err(format!("is longer than {MAX_PATH_TEXT} bytes"));
    }
    if text == "." {
        return Ok(Vec::new());
    }
    if !text.starts_with(['.', '[']) {
        return Err("must start with `.` or `[` (a path from the object's root)".into());
    }
    let bytes = text.as_bytes();
    let mut steps = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'.' => {
                let start = at + 1;
                let end = text[start..]
                    .find(['.', '['])
                    .map_or(text.len(), |i| start + i);
                let name = &text[start..end];
                if name.is_empty() {
                    return Err(format!("has an empty field name at byte {at}"));
                }
                if name.contains([']', '\'', '"', ' ', '=', '*']) {
                    return Err(format!(
                        "has field name `{name}`, which needs the bracket form ['{name}']"
                    ));
                }
                steps.push(PatternStep::Member(name.to_string()));
                at = end;
            }
            b'[' => {
                let (step, next) = parse_bracket(text, at, globs)?;
                steps.push(step);
                at = next;
            }
            _ => {
                return Err(format!(
                    "has an unexpected `{}` at byte {at}",
                    &text[at..=at]
                ))
            }
        }
    }
    Ok(steps)
}

/// One `[...]` step starting at `at`; returns the step and the byte after `]`.
fn parse_bracket(text: &str, at: usize, globs: bool) -> Result<(PatternStep, usize), String> {
    let rest = &text[at + 1..];
    if let Some(after) = rest.strip_prefix("*]") {
        if !globs {
            return Err("has `[*]`, which only patterns may use".into());
        }
        return Ok((PatternStep::Any, text.len() - after.len()));
    }
    if rest.starts_with(['\'', '"']) {
        let (key, after) = quoted(rest)?;
        let after = after
            .strip_prefix(']')
            .ok_or_else(|| format!("has an unclosed `[` at byte {at}"))?;
        let next = text.len() - after.len();
        if let Some(prefix) = key.strip_suffix('*') {
            if !globs {
                return Err("has a key prefix `*`, which only patterns may use".into());
            }
            if prefix.contains('*') {
                return Err(format!("has key `{key}`: `*` may only end a key"));
            }
            return Ok((PatternStep::MemberPrefix(prefix.to_string()), next));
        }
        if key.contains('*') {
            return Err(format!("has key `{key}`: `*` may only end a key"));
        }
        return Ok((PatternStep::Member(key), next));
    }
    if let Some(value) = rest.strip_prefix('=') {
        let (json, after) = json_value(value)?;
        let after = after
            .strip_prefix(']')
            .ok_or_else(|| format!("has an unclosed `[` at byte {at}"))?;
        return Ok((PatternStep::Value(json), text.len() - after.len()));
    }
    // Keyed element: name=value pairs, comma-separated.
    let mut keys = Vec::new();
    let mut rest = rest;
    loop {
        let eq = rest.find('=').ok_or_else(|| {
            format!("has a `[` at byte {at} that is not a key, value or keyed element")
        })?;
        let name = rest[..eq].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("has a keyed element with key field `{name}`"));
        }
        let (json, after) = json_value(&rest[eq + 1..])?;
        keys.push((name.to_string(), json));
        if let Some(after) = after.strip_prefix(',') {
            rest = after;
            continue;
        }
        let after = after
            .strip_prefix(']')
            .ok_or_else(|| format!("has an unclosed `[` at byte {at}"))?;
        keys.sort();
        if keys.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err("has a keyed element naming a key field twice".into());
        }
        return Ok((PatternStep::Keyed(keys), text.len() - after.len()));
    }
}

/// A quoted key (`'k'` or `"k"`, backslash escapes) and what follows it.
fn quoted(text: &str) -> Result<(String, &str), String> {
    let mut chars = text.char_indices();
    let Some((_, quote)) = chars.next() else {
        return Err("has an empty key".into());
    };
    let mut key = String::new();
    let mut escaped = false;
    for (i, c) in chars {
        if escaped {
            key.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == quote {
            return Ok((key, &text[i + c.len_utf8()..]));
        } else {
            key.push(c);
        }
    }
    Err("has an unclosed quote".into())
}

/// A JSON scalar (string, number, boolean, null) at the start of `text`, as canonical JSON.
fn json_value(text: &str) -> Result<(String, &str), String> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value)) if !value.is_object() && !value.is_array() => {
            let used = stream.byte_offset();
            Ok((value.to_string(), &text[used..]))
        }
        _ => Err(format!(
            "has an element value that is not a JSON string, number, boolean or null: `{}`",
            text.chars().take(40).collect::<String>()
        )),
    }
}

/// How a list is compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Elements are compared by value; each added or removed element is a changed path.
    Set,
    /// Elements are matched by these key fields and compared field by field.
    Keyed(Vec<String>),
}

/// What the diff ignores, how it compares lists and which paths are protected (a
/// `FieldPolicy` document adds to it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffConfig {
    /// Paths whose changes are not changes a rule must cover (server-maintained fields).
    pub ignored: Vec<PathPattern>,
    /// Lists compared per element; every other list is atomic.
    pub lists: Vec<(PathPattern, ListKind)>,
    /// Paths a write may change only under an allow that names them in a `fields` clause
    /// (seed 004 designs 6 and 7); none by default.
    pub protected: Vec<Protected>,
}

/// A protected path (`FieldPolicy` `spec.protected`): on create, update and patch of the
/// resources it names, an allow without a `fields` clause does not cover a change that
/// touches it. Deny rules are unaffected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protected {
    pub pattern: PathPattern,
    /// `(apiGroup, resource)` pairs, `*` for any; empty means every resource.
    pub resources: Vec<(String, String)>,
}

impl Protected {
    /// Whether the path is protected on `resource` in `group`.
    pub fn applies_to(&self, group: &str, resource: &str) -> bool {
        self.resources.is_empty()
            || self
                .resources
                .iter()
                .any(|(g, r)| (r == "*" || r == resource) && (g == "*" || g == group))
    }
}

impl Default for DiffConfig {
    /// Kubernetes' server-maintained metadata is ignored; finalizers are a set, owner
    /// references are keyed by `uid` and conditions by `type`, as their schemas declare
    /// (`+listType=set`, `+listMapKey`).
    fn default() -> Self {
        let pattern = |text: &str| {
            PathPattern::parse(text).unwrap_or_else(|_| PathPattern {
                steps: Vec::new(),
                text: text.to_string(),
            })
        };
        let ignored = [
            ".metadata.managedFields",
            ".metadata.resourceVersion",
            ".metadata.generation",
            ".metadata.creationTimestamp",
            ".metadata.uid",
            ".metadata.selfLink",
        ]
        .into_iter()
        .map(pattern)
        .collect();
        let lists = vec![
            (pattern(".metadata.finalizers"), ListKind::Set),
            (
                pattern(".metadata.ownerReferences"),
                ListKind::Keyed(vec!["uid".into()]),
            ),
            (
                pattern(".status.conditions"),
                ListKind::Keyed(vec!["type".into()]),
            ),
        ];
        DiffConfig {
            ignored,
            lists,
            protected: Vec::new(),
        }
    }
}

impl DiffConfig {
    /// Whether any FieldPolicy protects a path (so plain allows of writes may hold only in
    /// part).
    pub fn protects_paths(&self) -> bool {
        !self.protected.is_empty()
    }

    /// Whether a write of `action` may touch a protected path: false for every other verb
    /// and non-resource action, and when no FieldPolicy protects anything (the one check a
    /// plain request pays).
    pub fn protects(&self, action: crate::request::ActionRef<'_>) -> bool {
        !self.protected.is_empty() && !self.protected_for(action).is_empty()
    }

    /// The protected paths a write of `action` must not touch under a plain allow (see
    /// [`Protected`]); none for every other verb and for non-resource actions.
    pub fn protected_for(
        &self,
        action: crate::request::ActionRef<'_>,
    ) -> smallvec::SmallVec<[&PathPattern; 2]> {
        match action {
            crate::request::ActionRef::Resource(r)
                if !self.protected.is_empty()
                    && matches!(r.verb, "create" | "update" | "patch") =>
            {
                self.protected
                    .iter()
                    .filter(|p| p.applies_to(r.group, r.resource))
                    .map(|p| &p.pattern)
                    .collect()
            }
            _ => smallvec::SmallVec::new(),
        }
    }

    fn ignores(&self, path: &FieldPath) -> bool {
        self.ignored.iter().any(|p| p.covers(path))
    }

    fn list_kind(&self, path: &FieldPath) -> Option<&ListKind> {
        self.lists
            .iter()
            .find(|(p, _)| p.names(path))
            .map(|(_, kind)| kind)
    }
}

/// The paths where `new` differs from `old`: maps per key, configured lists per element,
/// everything else as a whole. With no `old` (a create) every path present in `new`.
/// Refused (with the reason) when the content nests deeper than [`MAX_DEPTH`] or changes
/// more than [`MAX_PATHS`] paths.
pub fn changed_paths(
    old: Option<&Value>,
    new: Option<&Value>,
    config: &DiffConfig,
) -> Result<BTreeSet<FieldPath>, String> {
    let mut out = BTreeSet::new();
    // One path, pushed and popped as the walk descends: a path is copied only when emitted.
    let mut path = FieldPath::default();
    // Two objects are compared member by member below (a whole-tree comparison first would
    // walk every unchanged member twice); anything else is compared here.
    let objects = old.is_some_and(Value::is_object) && new.is_some_and(Value::is_object);
    if objects || old != new {
        diff(&mut path, old, new, config, &mut out)?;
    }
    Ok(out)
}

fn emit(out: &mut BTreeSet<FieldPath>, path: &FieldPath) -> Result<(), String> {
    if out.len() >= MAX_PATHS {
        return Err(format!("changes more than {MAX_PATHS} paths"));
    }
    out.insert(path.clone());
    Ok(())
}

/// [`diff`] one step below `path`, when the two values differ (the step is made only then).
fn diff_child(
    path: &mut FieldPath,
    step: impl FnOnce() -> Step,
    (old, new): (Option<&Value>, Option<&Value>),
    config: &DiffConfig,
    out: &mut BTreeSet<FieldPath>,
) -> Result<(), String> {
    let unchanged = match (old, new) {
        // Two objects are compared member by member by `diff` itself: comparing them whole
        // first would walk a changed object twice at every level above the change.
        (Some(Value::Object(_)), Some(Value::Object(_))) => false,
        (Some(a), Some(b)) => same(a, b),
        (a, b) => a == b,
    };
    if unchanged {
        return Ok(());
    }
    path.0.push(step());
    let result = diff(path, old, new, config, out);
    path.0.pop();
    result
}

fn diff(
    path: &mut FieldPath,
    old: Option<&Value>,
    new: Option<&Value>,
    config: &DiffConfig,
    out: &mut BTreeSet<FieldPath>,
) -> Result<(), String> {
    if path.0.len() > MAX_DEPTH {
        return Err(format!("nests deeper than {MAX_DEPTH} levels"));
    }
    // The caller compared the values: they differ.
    if !path.0.is_empty() && config.ignores(path) {
        return Ok(());
    }
    match (old, new) {
        (None | Some(Value::Object(_)), None | Some(Value::Object(_))) => {
            let empty = serde_json::Map::new();
            let o = old.and_then(Value::as_object).unwrap_or(&empty);
            let n = new.and_then(Value::as_object).unwrap_or(&empty);
            if o.is_empty() && n.is_empty() {
                // `{}` appearing or disappearing is a change of the member itself; two empty
                // objects (the root, compared here unchecked) are no change.
                return match (old, new) {
                    (Some(_), Some(_)) => Ok(()),
                    _ => emit(out, path),
                };
            }
            // Members in the same order in both (the usual case: one serializer wrote both)
            // are paired without a lookup; from the first difference in order on, the old
            // object's remaining keys (changed or removed), then keys only the new one has.
            let (mut old_rest, mut new_rest) = (o.iter(), n.iter());
            while let (Some((ko, vo)), Some((kn, vn))) =
                (old_rest.clone().next(), new_rest.clone().next())
            {
                if ko != kn {
                    break;
                }
                old_rest.next();
                new_rest.next();
                diff_child(
                    path,
                    || Step::Member(ko.clone()),
                    (Some(vo), Some(vn)),
                    config,
                    out,
                )?;
            }
            for (key, value) in old_rest {
                let pair = (Some(value), n.get(key));
                diff_child(path, || Step::Member(key.clone()), pair, config, out)?;
            }
            for (key, value) in new_rest {
                if !o.contains_key(key) {
                    diff_child(
                        path,
                        || Step::Member(key.clone()),
                        (None, Some(value)),
                        config,
                        out,
                    )?;
                }
            }
            Ok(())
        }
        (None | Some(Value::Array(_)), None | Some(Value::Array(_))) => {
            match config.list_kind(path) {
                Some(kind) => diff_list(path, old, new, kind, config, out),
                None => {
                    // An atomic list changes as a whole; its depth is bounded all the same.
                    for value in [old, new].into_iter().flatten() {
                        check_depth(value, path.0.len())?;
                    }
                    emit(out, path)
                }
            }
        }
        _ => {
            // A scalar changed, or a member changed type: the member as a whole, checked
            // for depth all the same so a deep new value cannot slip past the bound.
            for value in [old, new].into_iter().flatten() {
                check_depth(value, path.0.len())?;
            }
            emit(out, path)
        }
    }
}

/// `a == b`, pairing the members of two objects by position while their keys agree: JSON
/// equality of objects looks every key up (a hash per key), which the diff of two objects one
/// serializer wrote never needs.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            let mut pairs = x.iter().zip(y.iter());
            for ((kx, vx), (ky, vy)) in pairs.by_ref() {
                if kx != ky {
                    // Another order: equal only as maps.
                    return a == b;
                }
                if !same(vx, vy) {
                    return false;
                }
            }
            true
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(vx, vy)| same(vx, vy))
        }
        _ => a == b,
    }
}

fn check_depth(value: &Value, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nests deeper than {MAX_DEPTH} levels"));
    }
    match value {
        Value::Object(map) => map.values().try_for_each(|v| check_depth(v, depth + 1)),
        Value::Array(items) => items.iter().try_for_each(|v| check_depth(v, depth + 1)),
        _ => Ok(()),
    }
}

fn diff_list(
    path: &mut FieldPath,
    old: Option<&Value>,
    new: Option<&Value>,
    kind: &ListKind,
    config: &DiffConfig,
    out: &mut BTreeSet<FieldPath>,
) -> Result<(), String> {
    let empty = Vec::new();
    let old_items = old.and_then(Value::as_array).unwrap_or(&empty);
    let new_items = new.and_then(Value::as_array).unwrap_or(&empty);
    match kind {
        ListKind::Set => {
            let depth = path.0.len() + 1;
            let set = |items: &[Value]| -> Result<BTreeSet<String>, String> {
                items
                    .iter()
                    .map(|v| check_depth(v, depth).map(|()| v.to_string()))
                    .collect()
            };
            let (o, n) = (set(old_items)?, set(new_items)?);
            for value in o.symmetric_difference(&n) {
                path.0.push(Step::Value(value.clone()));
                let result = emit(out, path);
                path.0.pop();
                result?;
            }
            Ok(())
        }
        ListKind::Keyed(fields) => {
            // A list whose elements do not all carry their keys, or repeat one, is atomic.
            let (Some(o), Some(n)) = (keyed(old_items, fields), keyed(new_items, fields)) else {
                return emit(out, path);
            };
            let keys: BTreeSet<&Vec<(String, String)>> = o.keys().chain(n.keys()).collect();
            for key in keys {
                let pair = (o.get(key).copied(), n.get(key).copied());
                diff_child(path, || Step::Keyed(key.clone()), pair, config, out)?;
            }
            Ok(())
        }
    }
}

/// A keyed list's elements by their key fields; `None` when an element lacks one or a key
/// repeats.
fn keyed<'v>(
    items: &'v [Value],
    fields: &[String],
) -> Option<BTreeMap<Vec<(String, String)>, &'v Value>> {
    let mut map = BTreeMap::new();
    for item in items {
        let object = item.as_object()?;
        let mut key: Vec<(String, String)> = fields
            .iter()
            .map(|f| object.get(f).map(|v| (f.clone(), v.to_string())))
            .collect::<Option<_>>()?;
        key.sort();
        if map.insert(key, item).is_some() {
            return None;
        }
    }
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(old: Option<Value>, new: Option<Value>) -> Vec<String> {
        changed_paths(old.as_ref(), new.as_ref(), &DiffConfig::default())
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn patterns_parse_and_cover_descendants() {
        let labels = PathPattern::parse(".metadata.labels").unwrap();
        let app = FieldPath::parse(".metadata.labels['app']").unwrap();
        assert!(labels.covers(&app));
        assert!(!labels.covers(&FieldPath::parse(".metadata").unwrap()));
        assert!(!labels.covers(&FieldPath::ROOT));
        assert!(PathPattern::parse(".").unwrap().covers(&FieldPath::ROOT));
        let team = PathPattern::parse(".metadata.labels['team.example.com/*']").unwrap();
        assert!(
            team.covers(&FieldPath::parse(".metadata.labels['team.example.com/owner']").unwrap())
        );
        assert!(!team.covers(&FieldPath::parse(".metadata.labels['other/owner']").unwrap()));
        let finalizer = PathPattern::parse(".metadata.finalizers[=\"x\"]").unwrap();
        assert!(finalizer.covers(&FieldPath::parse(".metadata.finalizers[=\"x\"]").unwrap()));
        assert!(!finalizer.covers(&FieldPath::parse(".metadata.finalizers[=\"y\"]").unwrap()));
        let ready = PathPattern::parse(".status.conditions[type=\"Ready\"]").unwrap();
        assert!(
            ready.covers(&FieldPath::parse(".status.conditions[type=\"Ready\"].status").unwrap())
        );
        let any = PathPattern::parse(".spec[*].image").unwrap();
        assert!(any.covers(&FieldPath::parse(".spec.x.image").unwrap()));
        // `.name` and `['name']` are the same member.
        assert!(PathPattern::parse("['metadata'].labels")
            .unwrap()
            .covers(&app));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for bad in [
            "",
            "metadata",
            ".",
            "..a",
            ".a[",
            ".a['x",
            ".a[x]",
            ".a['x*y']",
            ".a[=]",
            ".a[={}]",
            ".a b",
            ".a[k=\"v\",k=\"w\"]",
            ".a]",
        ] {
            if bad == "." {
                continue;
            }
            assert!(PathPattern::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(FieldPath::parse(".a[*]").is_err());
        assert!(FieldPath::parse(".a['p*']").is_err());
        assert!(PathPattern::parse(&".a".repeat(3000)).is_err());
    }

    #[test]
    fn display_round_trips() {
        for text in [
            ".metadata.labels['team.example.com/x']",
            ".metadata.finalizers[=\"a\"]",
            ".status.conditions[type=\"Ready\"].status",
            ".",
            ".spec.replicas",
        ] {
            let path = FieldPath::parse(text).unwrap();
            assert_eq!(path.to_string(), text);
            assert_eq!(FieldPath::parse(&path.to_string()).unwrap(), path);
        }
    }

    #[test]
    fn update_diffs_maps_per_key_and_sets_per_element() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "1",
            "labels": {"app": "x", "keep": "y"}, "finalizers": ["f1", "f2"]},
            "spec": {"replicas": 1, "ports": [1, 2]}});
        let mut new = old.clone();
        new["metadata"]["labels"]["app"] = json!("z");
        new["metadata"]["resourceVersion"] = json!("2");
        new["metadata"]["finalizers"] = json!(["f2", "f3"]);
        assert_eq!(
            paths(Some(old.clone()), Some(new)),
            vec![
                ".metadata.finalizers[=\"f1\"]",
                ".metadata.finalizers[=\"f3\"]",
                ".metadata.labels.app"
            ]
        );
        let mut ports = old.clone();
        ports["spec"]["ports"] = json!([2, 1]);
        assert_eq!(paths(Some(old.clone()), Some(ports)), vec![".spec.ports"]);
        assert!(paths(Some(old.clone()), Some(old)).is_empty());
    }

    #[test]
    fn keyed_lists_diff_per_element_and_fall_back_to_atomic() {
        let old = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Synced", "status": "True"}]}});
        let mut new = old.clone();
        new["status"]["conditions"][0]["status"] = json!("True");
        assert_eq!(
            paths(Some(old.clone()), Some(new)),
            vec![".status.conditions[type=\"Ready\"].status"]
        );
        let mut keyless = old.clone();
        keyless["status"]["conditions"] = json!([{"status": "x"}]);
        assert_eq!(paths(Some(old), Some(keyless)), vec![".status.conditions"]);
    }

    #[test]
    fn a_change_touches_a_protected_pattern_at_it_below_it_or_above_it() {
        let pattern = PathPattern::parse(".metadata.finalizers").unwrap();
        let path = |t: &str| FieldPath::parse(t).unwrap();
        assert!(pattern.touched_by(&path(".metadata.finalizers[=\"a\"]")));
        assert!(pattern.touched_by(&path(".metadata.finalizers")));
        // A whole `.metadata` replaced (or a coarse caller diff) may change the finalizers.
        assert!(pattern.touched_by(&path(".metadata")));
        assert!(pattern.touched_by(&FieldPath::ROOT));
        assert!(!pattern.touched_by(&path(".metadata.labels.a")));
        assert!(!pattern.touched_by(&path(".spec")));
    }

    #[test]
    fn create_lists_every_path_present() {
        let new = json!({"metadata": {"name": "a", "labels": {}}, "data": {"k": "v"}});
        assert_eq!(
            paths(None, Some(new)),
            vec![".data.k", ".metadata.labels", ".metadata.name"]
        );
    }

    #[test]
    fn depth_and_count_are_bounded() {
        let mut deep = json!("leaf");
        for _ in 0..(MAX_DEPTH + 5) {
            deep = json!({ "a": deep });
        }
        assert!(changed_paths(None, Some(&deep), &DiffConfig::default())
            .unwrap_err()
            .contains("deeper"));
        let mut old_deep = json!({"x": deep.clone()});
        old_deep["x"] = json!(1);
        assert!(changed_paths(
            Some(&old_deep),
            Some(&json!({"x": deep})),
            &DiffConfig::default()
        )
        .is_err());
        let wide: serde_json::Map<String, Value> = (0..MAX_PATHS + 1)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect();
        assert!(
            changed_paths(None, Some(&Value::Object(wide)), &DiffConfig::default())
                .unwrap_err()
                .contains("more than")
        );
    }

    proptest::proptest! {
        /// Pattern fuzz: any text is parsed or refused with a reason, never a panic; a parsed
        /// concrete path reads back from its own display.
        #[test]
        fn any_text_parses_or_is_refused(text in "[.\\[\\]'\"=*a-z0-9_/ ,{}-]{0,40}") {
            let _ = PathPattern::parse(&text);
            if let Ok(path) = FieldPath::parse(&text) {
                let shown = path.to_string();
                proptest::prop_assert_eq!(FieldPath::parse(&shown), Ok(path), "{}", shown);
            }
        }

        /// Every path a create lists exists in the object, and an object compared with itself
        /// changes nothing.
        #[test]
        fn create_paths_exist_and_self_diffs_are_empty(object in json_object()) {
            let config = DiffConfig::default();
            let paths = changed_paths(None, Some(&object), &config).unwrap();
            for path in &paths {
                proptest::prop_assert!(lookup(&object, path).is_some(), "{}", path);
            }
            proptest::prop_assert!(changed_paths(Some(&object), Some(&object), &config).unwrap().is_empty());
        }

        /// The positional comparison is JSON equality, and the diff does not depend on the
        /// order members were written in.
        #[test]
        fn member_order_changes_nothing(a in json_object(), b in json_object()) {
            let config = DiffConfig::default();
            for (x, y) in [(&a, &b), (&a, &a), (&b, &b)] {
                let y_reordered = reversed(y);
                proptest::prop_assert_eq!(same(x, y), x == y);
                proptest::prop_assert_eq!(same(x, &y_reordered), x == y);
                proptest::prop_assert_eq!(
                    changed_paths(Some(x), Some(&y_reordered), &config),
                    changed_paths(Some(x), Some(y), &config)
                );
            }
        }
    }

    /// `value` with every object's members in reverse order.
    fn reversed(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, v) in map.iter().rev() {
                    out.insert(k.clone(), reversed(v));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }

    fn json_object() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z'\\.\\[\\] ]{0,6}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z'. ]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        proptest::collection::btree_map("[a-z]{1,3}", value, 1..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// The value at a concrete path (members and set elements only: what these objects have).
    fn lookup<'v>(value: &'v Value, path: &FieldPath) -> Option<&'v Value> {
        let mut at = value;
        for step in &path.0 {
            at = match step {
                Step::Member(name) => at.get(name)?,
                Step::Value(_) | Step::Keyed(_) => return Some(at),
            };
        }
        Some(at)
    }

    /// A JSON bomb is refused where it is read: nesting beyond serde_json's limit fails to
    /// decode (a `ContentError` naming the field), nesting within it but beyond the diff's
    /// bound fails the diff.
    #[test]
    fn json_bombs_are_refused() {
        let mut content = crate::request::Content::default();
        content.object =
            Some(format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes());
        let err =
            crate::policy::content::decoded(&content, crate::request::Which::Object).unwrap_err();
        assert_eq!(err.field, "content.object");
        assert!(err.problem.contains("recursion limit"), "{}", err.problem);

        let nested = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
        let value: Value = serde_json::from_str(&nested).unwrap();
        let err = changed_paths(None, Some(&value), &DiffConfig::default()).unwrap_err();
        assert!(err.contains("deeper"), "{err}");

        // A huge key is one path, shown whole; the size bound is the API's.
        let key = "k".repeat(1 << 20);
        let value = json!({ key.clone(): 1 });
        let paths = changed_paths(None, Some(&value), &DiffConfig::default()).unwrap();
        assert_eq!(paths.len(), 1);
    }
}
