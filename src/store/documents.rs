//! Where each object's document is in a policy file, and an edit of those documents alone.
//!
//! An admin write must leave every byte it did not mean to change as the user wrote it:
//! comments, key order, quoting, the `apiVersion`s of other objects and every other document
//! (ENGINEERING.md, habit L). So the directory store never re-renders a file: it finds the
//! documents of the objects it writes and splices their new rendering in ([`edit_file`]).
//!
//! # Documents
//!
//! * **YAML** ([`split_yaml`]): a document starts at a `---` line (column 0, then nothing, a
//!   space or a tab) and runs to the next one; a `...` line ends one, and what follows it
//!   before the next `---` is a document of its own. This is YAML's own rule: neither marker
//!   may begin a line of a block or quoted scalar, so no content is mistaken for one. What a
//!   document's `---` line is followed by up to its first line of content (comments, blank
//!   lines) and after its last (trailing comments, `...`) is its frame; the lines between are
//!   its body.
//! * **JSON** (`*.json`, [`split_json`]): each top-level value of the concatenation is a
//!   document; its body is the value's text.
//!
//! An object is placed in its document by its line (the loader's `source.line`, read afresh
//! from the same text), so the text is parsed once, as the loader parses it.
//!
//! # Edits
//!
//! * a replaced object: its document's body becomes the object's new rendering; the frame (a
//!   comment about the object above it, trailing comments) stays;
//! * a deleted object: its document goes whole, with its `---` line and the comments after
//!   it; a first document without `---` keeps the comments above its body (they may be the
//!   file's header);
//! * a new object: a document appended at the end of the file;
//! * a document holding several objects (a `List`) is re-rendered whole as a `List` of what
//!   it keeps, unless it also holds objects authzd does not read (they would be dropped):
//!   then the write is refused, naming the file and line.
//!
//! Every edited text is parsed back and must hold exactly the objects the write means, with
//! every other object unchanged; otherwise the write is refused and nothing is written.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::policy::load::{load_sources_reporting, Format, LoadError, LoadErrors, LoadOptions};
use crate::policy::model::PolicySet;
use crate::policy::render;
use crate::store::{objects, ObjectRef, Result, StoreError};

/// One document of a file: byte offsets into its text, and the lines it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Document {
    /// The whole document: from its `---` line (or the start of the text) to the next
    /// document.
    pub start: usize,
    pub end: usize,
    /// Its content, `None` when it holds only comments and blank lines.
    pub body: Option<(usize, usize)>,
    /// Whether it starts with a `---` line (the first document of a file may not).
    pub marked: bool,
    /// The content starts on the `---` line itself (`--- {kind: Role, ...}`): a new body
    /// must bring its own `---`.
    pub body_on_marker: bool,
    /// 1-based lines of `start` and of the document's last line.
    pub first_line: u32,
    pub last_line: u32,
}

/// A marker line: `marker` at column 0, then the end of the line, a space or a tab.
fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Whether a line holds content: not blank, not a comment, not a directive.
fn is_content(line: &str) -> bool {
    let trimmed = line.trim_start();
    !(trimmed.is_empty() || trimmed.starts_with('#') || line.starts_with('%'))
}

/// What follows `---` on its line is content (not a comment or nothing).
fn content_after_marker(line: &str) -> bool {
    let rest = line.get(3..).unwrap_or_default().trim();
    !(rest.is_empty() || rest.starts_with('#'))
}

/// The documents of a YAML text, in order, covering it whole (see the module documentation).
pub(super) fn split_yaml(text: &str) -> Vec<Document> {
    let mut documents = Vec::new();
    let mut current: Option<Document> = None;
    let mut offset = 0;
    let mut line_no: u32 = 0;
    for raw in text.split_inclusive('\n') {
        line_no += 1;
        let line_start = offset;
        offset += raw.len();
        // A byte-order mark may precede the first marker.
        let line = if line_start == 0 {
            raw.strip_prefix('\u{FEFF}').unwrap_or(raw)
        } else {
            raw
        };
        let line = line.trim_end_matches(['\n', '\r']);
        if is_marker(line, "---") {
            if let Some(done) = current.take() {
                documents.push(done);
            }
            let inline = content_after_marker(line);
            current = Some(Document {
                start: line_start,
                end: offset,
                body: inline.then_some((line_start, offset)),
                marked: true,
                body_on_marker: inline,
                first_line: line_no,
                last_line: line_no,
            });
            continue;
        }
        let document = current.get_or_insert(Document {
            start: line_start,
            end: line_start,
            body: None,
            marked: false,
            body_on_marker: false,
            first_line: line_no,
            last_line: line_no,
        });
        document.end = offset;
        document.last_line = line_no;
        if is_marker(line, "...") {
            // The end of the document; whatever follows is the next one.
            if let Some(done) = current.take() {
                documents.push(done);
            }
            continue;
        }
        if is_content(line) {
            document.body = Some(match document.body {
                Some((body_start, _)) => (body_start, offset),
                None => (line_start, offset),
            });
        }
    }
    if let Some(done) = current.take() {
        documents.push(done);
    }
    documents
}

/// 1-based line of byte `at` in `text`, counting from `from` (at line `line`).
fn line_at(text: &str, from: usize, line: u32, at: usize) -> u32 {
    let counted = text.get(from..at).unwrap_or_default();
    line.saturating_add(counted.bytes().filter(|b| *b == b'\n').count() as u32)
}

/// The documents (top-level values) of a concatenated JSON text. Each document runs from its
/// value's first byte to the next value's (the last one to the end of the text); its body is
/// the value itself.
pub(super) fn split_json(text: &str) -> std::result::Result<Vec<Document>, String> {
    let bom = if text.starts_with('\u{FEFF}') { 3 } else { 0 };
    let body_text = text.get(bom..).unwrap_or_default();
    let mut stream =
        serde_json::Deserializer::from_str(body_text).into_iter::<serde::de::IgnoredAny>();
    let mut documents: Vec<Document> = Vec::new();
    let mut previous_end = bom;
    let mut line = 1;
    let mut counted_to = 0;
    while let Some(next) = stream.next() {
        next.map_err(|e| format!("invalid json: {e}"))?;
        let end = bom + stream.byte_offset();
        let gap = text.get(previous_end..end).unwrap_or_default();
        let start = previous_end + (gap.len() - gap.trim_start().len());
        line = line_at(text, counted_to, line, start);
        counted_to = start;
        let last_line = line_at(text, start, line, end);
        if let Some(before) = documents.last_mut() {
            before.end = start;
        }
        documents.push(Document {
            start,
            end: text.len(),
            body: Some((start, end)),
            marked: false,
            body_on_marker: false,
            first_line: line,
            last_line,
        });
        previous_end = end;
    }
    Ok(documents)
}

/// What a write does to one file: objects replaced (by their new form), removed, and added.
#[derive(Default)]
pub(super) struct FileEdit {
    pub replace: BTreeMap<ObjectRef, Value>,
    pub delete: Vec<ObjectRef>,
    pub add: Vec<(ObjectRef, Value)>,
}

/// An object's rendering as a document body of `format`, ending with a newline.
fn render_body(value: &Value, format: Format) -> String {
    let mut out = match format {
        // A `serde_json::Value` always serializes.
        Format::Json => serde_json::to_string_pretty(value).unwrap_or_default(),
        _ => render::to_yaml(value),
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn refusal(file: &str, line: u32, message: String) -> StoreError {
    StoreError::Invalid(LoadErrors(vec![LoadError {
        file: file.to_string(),
        line,
        message,
    }]))
}

/// What becomes of one document.
enum Splice {
    Remove,
    Body(String),
}

/// The objects of `text` (a policy file named `file`) as their stored form, with the line
/// each starts on; and the lines of the objects of other API groups it holds.
struct Parsed {
    held: BTreeMap<ObjectRef, (u32, Value)>,
    skipped: Vec<u32>,
    policy: PolicySet,
}

fn parse(file: &str, text: &str, options: &LoadOptions) -> Result<Parsed> {
    let loaded = load_sources_reporting(&[(file.to_string(), text.to_string())], options)
        .map_err(StoreError::Invalid)?;
    let held = objects(&loaded.policy)
        .into_iter()
        .map(|(r, v)| (r, (v.source().line, v.to_value())))
        .collect();
    let skipped = loaded.skipped.0.iter().map(|s| s.source.line).collect();
    Ok(Parsed {
        held,
        skipped,
        policy: loaded.policy,
    })
}

/// A file as a write leaves it.
#[derive(Debug)]
pub(super) struct Edited {
    /// Its new text; `None`: the file is removed.
    pub text: Option<String>,
    /// The policy objects it then holds, as the loader reads them (with their new lines).
    pub policy: PolicySet,
}

/// `text` (the file `file` as it is on disk, which the store checked is what it loaded) with
/// `edit` made to the documents of its objects and to nothing else; `None` when nothing but
/// blank space is left (the file is then removed). See the module documentation.
pub(super) fn edit_file(
    file: &str,
    text: &str,
    edit: &FileEdit,
    options: &LoadOptions,
) -> Result<Edited> {
    let format = match Format::from_name(file) {
        Some(format @ (Format::Yaml | Format::Json)) => format,
        // ABAC lines are not objects: no admin write names one.
        _ => return Err(refusal(
            file,
            0,
            "an admin write cannot change this file: it holds ABAC lines, which are edited by hand"
                .to_string(),
        )),
    };
    let Parsed { held, skipped, .. } = parse(file, text, options)?;
    let documents = match format {
        Format::Json => split_json(text).map_err(|e| refusal(file, 0, e))?,
        _ => split_yaml(text),
    };
    // Documents are in line order, so an object's is found by binary search: a file of many
    // objects (a cluster's export) must not cost a scan of every document per object.
    let document_of = |line: u32| -> Result<usize> {
        let after = documents.partition_point(|d| d.first_line <= line);
        let found = after.checked_sub(1).filter(|at| match format {
            Format::Json => documents[*at].first_line == line,
            _ => line <= documents[*at].last_line,
        });
        let shared = found
            .and_then(|at| at.checked_sub(1))
            .is_some_and(|before| documents[before].first_line == line);
        match found {
            Some(_) if shared => Err(refusal(
                file,
                line,
                "several documents start on this line, so authzd cannot tell which one to edit: put each on a line of its own".to_string(),
            )),
            Some(at) => Ok(at),
            None => Err(refusal(
                file,
                line,
                "authzd cannot find the document of the object on this line".to_string(),
            )),
        }
    };
    let deleted: BTreeSet<&ObjectRef> = edit.delete.iter().collect();

    // Which objects (and how many of other groups) each document holds, in line order.
    let mut members: BTreeMap<usize, Vec<(u32, &ObjectRef)>> = BTreeMap::new();
    for (object, (line, _)) in &held {
        members
            .entry(document_of(*line)?)
            .or_default()
            .push((*line, object));
    }
    let mut foreign: BTreeMap<usize, u32> = BTreeMap::new();
    for line in &skipped {
        // An object of another group always sits in a document; one that cannot be placed
        // leaves its document unknown, which a List edit below then refuses.
        if let Ok(at) = document_of(*line) {
            *foreign.entry(at).or_default() += 1;
        }
    }

    let mut splices: BTreeMap<usize, Splice> = BTreeMap::new();
    // An object applied as it already is keeps its document as written (its `apiVersion`,
    // comments and layout): re-rendering it would change bytes and nothing else.
    let changed = edit
        .replace
        .iter()
        .filter(|(r, value)| held.get(*r).is_none_or(|(_, held)| held != *value))
        .map(|(r, _)| r);
    for object in changed.chain(edit.delete.iter()) {
        let Some((line, _)) = held.get(object) else {
            return Err(StoreError::Unavailable(format!(
                "{object} is not in `{file}` as authzd loaded it; reload the policy (SIGHUP) and retry"
            )));
        };
        let at = document_of(*line)?;
        if splices.contains_key(&at) {
            continue;
        }
        let mut in_document = members.get(&at).cloned().unwrap_or_default();
        in_document.sort();
        let keep: Vec<Value> = in_document
            .iter()
            .filter(|(_, r)| !deleted.contains(r))
            .map(|(_, r)| {
                edit.replace
                    .get(*r)
                    .or_else(|| held.get(*r).map(|(_, v)| v))
                    .cloned()
                    .unwrap_or(Value::Null)
            })
            .collect();
        let others = foreign.get(&at).copied().unwrap_or(0);
        let splice = match (in_document.len(), keep.as_slice()) {
            (_, []) if others == 0 => Splice::Remove,
            (1, [one]) if others == 0 => Splice::Body(render_body(one, format)),
            _ if others > 0 => {
                return Err(refusal(
                    file,
                    documents[at].first_line,
                    format!("this document holds {object} beside objects authzd does not read, which rewriting it would drop: move the policy objects to documents of their own, or edit it by hand"),
                ))
            }
            // A `List`: re-rendered with what it keeps (its comments inside are lost; the
            // other documents are not touched).
            _ => Splice::Body(render_body(
                &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": keep}),
                format,
            )),
        };
        splices.insert(at, splice);
    }

    // A file written with CRLF line ends gets them in what the write adds too (a parser
    // normalizes line breaks in scalars, and JSON strings escape theirs, so content is the
    // same; the parse-back below checks it).
    let crlf = text
        .split_inclusive('\n')
        .next()
        .is_some_and(|line| line.ends_with("\r\n"));
    let line_ends = |s: String| if crlf { s.replace('\n', "\r\n") } else { s };

    // Spliced from the end, so that earlier offsets stay valid.
    let mut out = text.to_string();
    for (at, splice) in splices.iter().rev() {
        let document = &documents[*at];
        match splice {
            Splice::Remove => {
                let range = match format {
                    Format::Json => json_removal(&documents, *at, text.len()),
                    // A first document without `---` keeps the comments above its body.
                    _ if !document.marked => {
                        document.body.map_or(document.start, |(s, _)| s)..document.end
                    }
                    _ => document.start..document.end,
                };
                out.replace_range(range, "");
            }
            Splice::Body(new) => {
                let Some((start, end)) = document.body else {
                    continue;
                };
                let new = if document.body_on_marker {
                    format!("---\n{new}")
                } else {
                    new.clone()
                };
                // A JSON value's text ends without its newline; keep what followed it.
                let new = match format {
                    Format::Json => new.trim_end_matches('\n').to_string(),
                    _ => new,
                };
                out.replace_range(start..end, &line_ends(new));
            }
        }
    }
    for (_, value) in &edit.add {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(&line_ends("\n".to_string()));
        }
        if format == Format::Yaml {
            out.push_str(&line_ends("---\n".to_string()));
        }
        out.push_str(&line_ends(render_body(value, format)));
    }

    // What the edited text holds must be exactly what the write means.
    let mut expected: BTreeMap<ObjectRef, Value> = held
        .iter()
        .filter(|(r, _)| !deleted.contains(r))
        .map(|(r, (_, v))| (r.clone(), edit.replace.get(r).unwrap_or(v).clone()))
        .collect();
    expected.extend(edit.add.iter().cloned());
    if out.trim().is_empty() {
        return if expected.is_empty() && skipped.is_empty() {
            Ok(Edited {
                text: None,
                policy: PolicySet::default(),
            })
        } else {
            Err(refusal(file, 0, "authzd could not edit the documents of this write alone (the edited file would be empty); edit it by hand".to_string()))
        };
    }
    let parsed = parse(file, &out, options)?;
    let after: BTreeMap<&ObjectRef, &Value> =
        parsed.held.iter().map(|(r, (_, v))| (r, v)).collect();
    let expected: BTreeMap<&ObjectRef, &Value> = expected.iter().collect();
    if after != expected || parsed.skipped.len() != skipped.len() {
        return Err(refusal(
            file,
            0,
            "authzd could not edit the documents of this write alone (parsed back, the file would change other objects); edit it by hand".to_string(),
        ));
    }
    Ok(Edited {
        text: Some(out),
        policy: parsed.policy,
    })
}

/// The bytes a deleted JSON document takes with it: its value and the space up to the next
/// one; the last one, the space before it instead (so the file keeps its final newline).
fn json_removal(documents: &[Document], at: usize, len: usize) -> std::ops::Range<usize> {
    let document = &documents[at];
    match (at, documents.get(at + 1)) {
        (_, Some(next)) => document.start..next.start,
        (0, None) => document.start..len,
        (_, None) => {
            let previous_end = documents[at - 1].body.map_or(document.start, |(_, e)| e);
            previous_end..document.body.map_or(document.end, |(_, e)| e)
        }
    }
}

#[cfg(test)]
mod tests;
