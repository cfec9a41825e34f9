//! A small, format-neutral document tree with line numbers, and a strict field reader over it.
//!
//! YAML and JSON are both parsed into [`Node`]s first, so that every policy format is validated
//! by one piece of code that can report *all* problems of an object (serde's derive stops at
//! the first one) and can match seed-003 keys case-insensitively.
//!
//! YAML nodes carry their own line (via serde-saphyr's span support); JSON nodes carry the line
//! where their top-level value starts (serde_json does not expose positions of nested values).
//! Duplicate keys are rejected in both formats: with last-wins, a second `verbs:` hidden further
//! down an object would silently replace the first.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Nesting limit for YAML (serde_json has its own limit of 128).
const MAX_DEPTH: usize = 128;

/// Parser events that aliases may replay in one YAML stream (see [`parse_yaml`]).
pub(crate) const MAX_ALIAS_REPLAYED_EVENTS: usize = 20_000;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    /// 1-based line where the node starts; never 0 once parsing finished.
    pub line: u32,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    /// A number JSON cannot represent (YAML `.nan`, `.inf`), kept as text.
    OtherNumber(String),
    String(String),
    Seq(Vec<Node>),
    /// Entries in document order; keys are unique (exactly).
    Map(Vec<(String, Node)>),
}

impl Node {
    /// What the node is, for "must be a string, found a list" messages.
    pub fn describe(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) | Value::OtherNumber(_) => "a number",
            Value::String(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "an object",
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// The node as a `serde_json::Value` (object keys sorted, so its serialization is canonical).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::OtherNumber(s) | Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => {
                // Sorted explicitly: serde_json's `preserve_order` feature may be on.
                let mut sorted: Vec<&(String, Node)> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(
                    sorted
                        .into_iter()
                        .map(|(k, v)| (k.clone(), v.to_json()))
                        .collect(),
                )
            }
        }
    }

    /// Gives every node without a known line (JSON) the line of its nearest ancestor.
    fn fill_lines(&mut self, parent: u32) {
        if self.line == 0 {
            self.line = parent;
        }
        let line = self.line;
        match &mut self.value {
            Value::Seq(items) => items.iter_mut().for_each(|n| n.fill_lines(line)),
            Value::Map(entries) => entries.iter_mut().for_each(|(_, n)| n.fill_lines(line)),
            _ => {}
        }
    }
}

/// A syntax error: line (0 if unknown) and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub line: u32,
    pub message: String,
}

/// Every YAML document of `text` that is not empty, in order.
pub(crate) fn parse_yaml(text: &str) -> Result<Vec<Node>, SyntaxError> {
    // The budget bounds the work per byte read. It is set for a file of the default size limit
    // (16 MiB of small objects: many documents); a larger file — the limit is a flag,
    // `--max-policy-file-bytes`, raised for a large cluster's export — gets it in proportion.
    let scale = (text.len() as u64).div_ceil(super::MAX_FILE_BYTES).max(1) as usize;
    let options = serde_saphyr::Options {
        budget: Some(serde_saphyr::Budget {
            max_documents: 100_000 * scale,
            max_events: 20_000_000 * scale,
            max_nodes: 8_000_000 * scale,
            max_depth: MAX_DEPTH,
            ..serde_saphyr::Budget::default()
        }),
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        // Alias bombs ("billion laughs"): serde-saphyr replays an alias's events each time it
        // is used, up to a million by default (seconds of work and hundreds of MB for one
        // small file). Policy manifests use aliases rarely and shallowly; this bound refuses a
        // bomb after a few milliseconds while leaving room for honest reuse of a rule list.
        alias_limits: serde_saphyr::options::AliasLimits {
            max_total_replayed_events: MAX_ALIAS_REPLAYED_EVENTS,
            max_replay_stack_depth: 8,
            ..serde_saphyr::options::AliasLimits::default()
        },
        // YAML 1.2: only `true`/`false` are booleans, so `yes` stays a string.
        strict_booleans: true,
        with_snippet: false,
        crop_radius: 0,
        ..serde_saphyr::Options::default()
    };
    match serde_saphyr::from_multiple_with_options::<YamlNode>(text, options) {
        Ok(docs) => Ok(docs
            .into_iter()
            .map(|YamlNode(mut n)| {
                n.fill_lines(1);
                n
            })
            .collect()),
        Err(err) => {
            let err = err.without_snippet();
            let location = err.location();
            let mut message = err.to_string();
            let mut line = 0;
            if let Some(loc) = location {
                let suffix = format!(" at line {}, column {}", loc.line(), loc.column());
                if let Some(stripped) = message.strip_suffix(&suffix) {
                    message = format!("{stripped} (column {})", loc.column());
                }
                line = u32::try_from(loc.line()).unwrap_or(u32::MAX);
            }
            Err(SyntaxError {
                line,
                message: format!("invalid yaml: {message}"),
            })
        }
    }
}

/// Every JSON value of `text`: one value, or several concatenated (whitespace-separated).
pub(crate) fn parse_json_stream(text: &str) -> Result<Vec<Node>, SyntaxError> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<JsonNode>();
    let mut nodes = Vec::new();
    // Where the previous value ended, and the line there (counted incrementally, so that many
    // small values do not make this quadratic).
    let mut start = 0;
    let mut line: u32 = 1;
    while let Some(next) = stream.next() {
        match next {
            Ok(JsonNode(mut node)) => {
                let rest = text.get(start..).unwrap_or_default();
                let skipped = rest.find(|c: char| !c.is_whitespace()).unwrap_or(0);
                let end = stream.byte_offset();
                let (gap, value) = rest.split_at(skipped);
                line = line.saturating_add(newlines(gap));
                node.fill_lines(line);
                nodes.push(node);
                let value_len = end.saturating_sub(start + skipped);
                line = line.saturating_add(newlines(value.get(..value_len).unwrap_or_default()));
                start = end;
            }
            Err(err) => return Err(json_error(&err)),
        }
    }
    Ok(nodes)
}

/// Exactly one JSON value (an ABAC line).
pub(crate) fn parse_json_value(text: &str) -> Result<Node, SyntaxError> {
    match serde_json::from_str::<JsonNode>(text) {
        Ok(JsonNode(mut node)) => {
            node.fill_lines(1);
            Ok(node)
        }
        Err(err) => Err(json_error(&err)),
    }
}

fn json_error(err: &serde_json::Error) -> SyntaxError {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let message = match full.strip_suffix(&suffix) {
        Some(m) if err.line() > 0 => format!("{m} (column {})", err.column()),
        _ => full,
    };
    SyntaxError {
        line: u32::try_from(err.line()).unwrap_or(u32::MAX),
        message: format!("invalid json: {message}"),
    }
}

fn newlines(text: &str) -> u32 {
    let count = text.bytes().filter(|b| *b == b'\n').count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

// ---- deserialization -------------------------------------------------------------------------

struct YamlNode(Node);
struct JsonNode(Node);

impl<'de> serde::Deserialize<'de> for YamlNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeSeed { spanned: true }.deserialize(d).map(YamlNode)
    }
}

impl<'de> serde::Deserialize<'de> for JsonNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeSeed { spanned: false }.deserialize(d).map(JsonNode)
    }
}

/// `spanned`: ask serde-saphyr for each node's location (its `Spanned` protocol); only valid
/// with the serde-saphyr deserializer.
#[derive(Clone, Copy)]
struct NodeSeed {
    spanned: bool,
}

impl<'de> DeserializeSeed<'de> for NodeSeed {
    type Value = Node;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        if self.spanned {
            d.deserialize_newtype_struct("__yaml_spanned", SpannedVisitor)
        } else {
            let value = d.deserialize_any(ValueVisitor { spanned: false })?;
            Ok(Node { line: 0, value })
        }
    }
}

struct SpannedVisitor;

impl<'de> Visitor<'de> for SpannedVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a yaml node")
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_struct(
            "Spanned",
            &["value", "referenced", "defined"],
            SpannedReprVisitor,
        )
    }
}

struct SpannedReprVisitor;

impl<'de> Visitor<'de> for SpannedReprVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a yaml node with its location")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut value = None;
        let mut line = 0;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "value" => value = Some(map.next_value_seed(ValueSeed { spanned: true })?),
                "referenced" => {
                    let loc: serde_saphyr::Location = map.next_value()?;
                    line = u32::try_from(loc.line()).unwrap_or(u32::MAX);
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let value = value.ok_or_else(|| de::Error::missing_field("value"))?;
        Ok(Node { line, value })
    }
}

#[derive(Clone, Copy)]
struct ValueSeed {
    spanned: bool,
}

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor {
            spanned: self.spanned,
        })
    }
}

struct ValueVisitor {
    spanned: bool,
}

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(match serde_json::Number::from_f64(v) {
            Some(n) => Value::Number(n),
            None => Value::OtherNumber(v.to_string()),
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let seed = NodeSeed {
            spanned: self.spanned,
        };
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(seed)? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let seed = NodeSeed {
            spanned: self.spanned,
        };
        let mut entries: Vec<(String, Node)> = Vec::new();
        // A set, not a scan of `entries`: a huge object must not make parsing quadratic.
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            let value = map.next_value_seed(seed)?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

// ---- strict field reading --------------------------------------------------------------------

/// Problems found in one object: (line, message).
#[derive(Debug, Default)]
pub(crate) struct Problems(pub Vec<(u32, String)>);

impl Problems {
    pub fn push(&mut self, line: u32, message: impl Into<String>) {
        self.0.push((line, message.into()));
    }
}

/// `prefix.key`, or `key` at the top level.
pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Reads the fields of one object; whatever is not read is an unknown field.
pub(crate) struct Fields<'a> {
    node: &'a Node,
    entries: &'a [(String, Node)],
    used: Vec<bool>,
    /// Match keys ASCII-case-insensitively, like Go's encoding/json (seed 003).
    case_insensitive: bool,
    /// Path of this object in messages (`rules[0]`), empty at the top level.
    pub path: String,
}

impl<'a> Fields<'a> {
    /// `None` (and a problem) when `node` is not an object.
    pub fn new(
        node: &'a Node,
        path: &str,
        case_insensitive: bool,
        problems: &mut Problems,
    ) -> Option<Self> {
        match &node.value {
            Value::Map(entries) => Some(Self {
                node,
                entries,
                used: vec![false; entries.len()],
                case_insensitive,
                path: path.to_owned(),
            }),
            _ => {
                let what = if path.is_empty() {
                    "a document".to_owned()
                } else {
                    format!("`{path}`")
                };
                problems.push(
                    node.line,
                    format!("{what} must be an object, found {}", node.describe()),
                );
                None
            }
        }
    }

    pub fn line(&self) -> u32 {
        self.node.line
    }

    fn matches(&self, written: &str, key: &str) -> bool {
        if self.case_insensitive {
            written.eq_ignore_ascii_case(key)
        } else {
            written == key
        }
    }

    /// Whether the key is present (even as null), without consuming it.
    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| self.matches(k, key))
    }

    /// The value of `key`, `None` when absent or null. Marks it as read.
    pub fn take(&mut self, key: &str, problems: &mut Problems) -> Option<&'a Node> {
        let mut found: Option<(&'a str, &'a Node)> = None;
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if self.matches(k, key) {
                self.used[i] = true;
                if let Some((first, _)) = found {
                    problems.push(
                        v.line,
                        format!(
                            "duplicate field `{}`: also written as `{}`",
                            join(&self.path, k),
                            join(&self.path, first)
                        ),
                    );
                    continue;
                }
                found = Some((k, v));
            }
        }
        found.map(|(_, v)| v).filter(|v| !v.is_null())
    }

    /// Marks keys as read without looking at them.
    pub fn ignore(&mut self, keys: &[&str]) {
        for (i, (k, _)) in self.entries.iter().enumerate() {
            if keys.iter().any(|key| self.matches(k, key)) {
                self.used[i] = true;
            }
        }
    }

    /// Reports every field that was not read.
    pub fn finish(self, problems: &mut Problems) {
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if !self.used[i] {
                problems.push(v.line, format!("unknown field `{}`", join(&self.path, k)));
            }
        }
    }

    pub fn string(&mut self, key: &str, problems: &mut Problems) -> String {
        let path = join(&self.path, key);
        self.take(key, problems)
            .map(|n| string(n, &path, problems))
            .unwrap_or_default()
    }

    pub fn strings(&mut self, key: &str, problems: &mut Problems) -> Vec<String> {
        let path = join(&self.path, key);
        self.take(key, problems)
            .map(|n| strings(n, &path, problems))
            .unwrap_or_default()
    }

    pub fn boolean(&mut self, key: &str, problems: &mut Problems) -> bool {
        let path = join(&self.path, key);
        self.take(key, problems)
            .map(|n| boolean(n, &path, problems))
            .unwrap_or_default()
    }

    /// The items of a list field (empty when absent or null).
    pub fn list(&mut self, key: &str, problems: &mut Problems) -> &'a [Node] {
        let path = join(&self.path, key);
        match self.take(key, problems) {
            None => &[],
            Some(n) => list(n, &path, problems),
        }
    }
}

/// A string value; null reads as empty. Other types are errors: YAML `name: 1.10` would
/// otherwise become `1.1`.
pub(crate) fn string(node: &Node, path: &str, problems: &mut Problems) -> String {
    match &node.value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        _ => {
            problems.push(
                node.line,
                format!("`{path}` must be a string, found {}", node.describe()),
            );
            String::new()
        }
    }
}

pub(crate) fn boolean(node: &Node, path: &str, problems: &mut Problems) -> bool {
    match &node.value {
        Value::Bool(b) => *b,
        Value::Null => false,
        _ => {
            problems.push(
                node.line,
                format!("`{path}` must be a boolean, found {}", node.describe()),
            );
            false
        }
    }
}

pub(crate) fn list<'a>(node: &'a Node, path: &str, problems: &mut Problems) -> &'a [Node] {
    match &node.value {
        Value::Seq(items) => items,
        Value::Null => &[],
        _ => {
            problems.push(
                node.line,
                format!("`{path}` must be a list, found {}", node.describe()),
            );
            &[]
        }
    }
}

pub(crate) fn strings(node: &Node, path: &str, problems: &mut Problems) -> Vec<String> {
    let mut out = Vec::new();
    for (i, item) in list(node, path, problems).iter().enumerate() {
        match &item.value {
            Value::String(s) => out.push(s.clone()),
            _ => problems.push(
                item.line,
                format!("`{path}[{i}]` must be a string, found {}", item.describe()),
            ),
        }
    }
    out
}

/// A map of strings to strings (labels, matchLabels).
pub(crate) fn string_map(
    node: &Node,
    path: &str,
    problems: &mut Problems,
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    match &node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                match &v.value {
                    Value::String(s) => {
                        out.insert(k.clone(), s.clone());
                    }
                    _ => problems.push(
                        v.line,
                        format!("`{path}.{k}` must be a string, found {}", v.describe()),
                    ),
                }
            }
        }
        Value::Null => {}
        _ => problems.push(
            node.line,
            format!("`{path}` must be an object, found {}", node.describe()),
        ),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file over the default size limit (allowed by a raised `--max-policy-file-bytes`) gets
    /// a budget in proportion: 160,000 documents in 16.8 MB parse, where a file of the default
    /// limit's budget stops at 100,000.
    #[test]
    fn a_larger_file_gets_a_larger_budget() {
        let document = format!("k: {}\n---\n", "x".repeat(97));
        let text = document.repeat(160_000);
        assert!(text.len() as u64 > crate::policy::load::MAX_FILE_BYTES);
        assert_eq!(parse_yaml(&text).map(|nodes| nodes.len()), Ok(160_000));
        // The same documents in a file under the limit: the default budget.
        let small = "k: v\n---\n".repeat(100_001);
        let refused = parse_yaml(&small).err().map(|e| e.message);
        assert!(
            refused.as_deref().is_some_and(|m| m.contains("budget")),
            "{refused:?}"
        );
    }

    /// "Billion laughs": ten levels of ten aliases, 10^10 nodes if expanded.
    fn alias_bomb() -> String {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn an_alias_bomb_is_refused_at_our_replay_bound() {
        let error = parse_yaml(&alias_bomb()).unwrap_err();
        // Refused at this parser's bound, not at serde-saphyr's default of a million
        // replayed events (which costs about a second and 200 MB first).
        assert!(
            error
                .message
                .contains(&format!("> {MAX_ALIAS_REPLAYED_EVENTS}")),
            "{error:?}"
        );
    }

    #[test]
    fn honest_aliases_still_work() {
        let text = "common: &verbs [get, list, watch]\nrules:\n- verbs: *verbs\n- verbs: *verbs\n";
        let docs = parse_yaml(text).unwrap();
        assert_eq!(docs.len(), 1);
    }

    #[test]
    fn yaml_nodes_carry_their_lines() {
        let text = "# comment\n---\nkind: Role\nrules:\n  - verbs: [get]\n    resources:\n      - pods\n---\n\n---\na: 1\n";
        let docs = parse_yaml(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].line, 3);
        let Value::Map(entries) = &docs[0].value else {
            panic!("not a map")
        };
        assert_eq!(entries[1].1.line, 5);
        let Value::Seq(rules) = &entries[1].1.value else {
            panic!("not a list")
        };
        assert_eq!(rules[0].line, 5);
        assert_eq!(docs[1].line, 11);
    }

    #[test]
    fn yaml_scalars_keep_their_types() {
        let docs = parse_yaml("a: yes\nb: true\nc: 1.10\nd: ~\ne: '1'\n").unwrap();
        let Value::Map(e) = &docs[0].value else {
            panic!("not a map")
        };
        assert_eq!(e[0].1.value, Value::String("yes".into()));
        assert_eq!(e[1].1.value, Value::Bool(true));
        assert!(matches!(e[2].1.value, Value::Number(_)));
        assert_eq!(e[3].1.value, Value::Null);
        assert_eq!(e[4].1.value, Value::String("1".into()));
    }

    #[test]
    fn yaml_errors_have_lines() {
        let err = parse_yaml("a: 1\nb: [\n").unwrap_err();
        assert!(err.line >= 2, "{err:?}");
        assert!(err.message.starts_with("invalid yaml: "), "{err:?}");
        let dup = parse_yaml("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(dup.line, 3, "{dup:?}");
        assert!(dup.message.contains("duplicate"), "{dup:?}");
    }

    #[test]
    fn json_stream_lines() {
        let text = "{\"a\": 1}\n\n  {\n \"b\": [1, 2]\n}{\"c\": {}}\n";
        let nodes = parse_json_stream(text).unwrap();
        assert_eq!(
            nodes.iter().map(|n| n.line).collect::<Vec<_>>(),
            vec![1, 3, 5]
        );
        let Value::Map(e) = &nodes[1].value else {
            panic!("not a map")
        };
        assert_eq!(e[0].1.line, 3);
        assert!(parse_json_stream("").unwrap().is_empty());
    }

    #[test]
    fn json_errors() {
        let err = parse_json_stream("{\"a\": 1}\n{\"b\": 1,}\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.message.starts_with("invalid json: "), "{err:?}");
        let dup = parse_json_value("{\"a\": 1, \"a\": 2}").unwrap_err();
        assert!(dup.message.contains("duplicate field `a`"), "{dup:?}");
    }

    #[test]
    fn to_json_is_canonical() {
        let n = parse_json_value("{\"b\": [1, true, null], \"a\": \"x\"}").unwrap();
        assert_eq!(
            serde_json::to_string(&n.to_json()).unwrap(),
            "{\"a\":\"x\",\"b\":[1,true,null]}"
        );
    }

    #[test]
    fn fields_report_unknown_and_case_insensitive_duplicates() {
        let n = parse_json_value("{\"Verbs\": [\"get\"], \"verbs\": [], \"x\": 1}").unwrap();
        let mut p = Problems::default();
        let mut f = Fields::new(&n, "rules[0]", true, &mut p).unwrap();
        assert_eq!(f.strings("verbs", &mut p), vec!["get".to_string()]);
        f.finish(&mut p);
        let messages: Vec<_> = p.0.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(
            messages,
            vec![
                "duplicate field `rules[0].verbs`: also written as `rules[0].Verbs`",
                "unknown field `rules[0].x`"
            ]
        );
    }
}
