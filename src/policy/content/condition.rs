//! CEL conditions on rules (docs/policy.md §6): `condition: <CEL>` on a rule is
//! one more content clause, a predicate over the request and its objects, named as in
//! ValidatingAdmissionPolicy: `object`, `oldObject` (null when the request does not carry
//! it), `request` (`verb`, `apiGroup`, `apiVersion`, `resource`, `subresource`, `name`,
//! `namespace`, `userInfo {username, groups}`, `fieldSelector`, `labelSelector`),
//! `changedPaths`, and `context` (the environment of an AuthZEN request, docs/authzen.md §2;
//! null when the request carries none).
//!
//! **Bounded by construction.** Only a subset of CEL loads ([`SUBSET`]): field selection,
//! index, `has()`, comparisons, `in`, `&&` `||` `!`, `?:`, `size()`, the string methods
//! `startsWith` `endsWith` `contains` `matches` (its pattern a literal, compiled at load),
//! list and map literals, and one level of `all` `exists` `exists_one` `filter` `map`
//! whose body reads only its own variable, literals and `request`. No arithmetic, no
//! conversions, no nested comprehension: an accepted expression's work is linear in its
//! length times the size of the content it reads, so no expression can run unbounded on a
//! hot path (the worst cases are measured in `benches/content.rs`).
//!
//! **One program per text.** Conditions are interned by their text for the life of the
//! process: every binding of a role, and every role that repeats a condition, shares one
//! compiled program (a reload recompiles nothing it already has).
//!
//! **Behind a trait.** The CEL implementation (cel-rust, pinned exactly: it breaks its API
//! every few months) is confined to [`cel_rust`]; the rest of authzd sees [`Condition`] and
//! [`Program`].

mod cel_rust;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;

use crate::request::SelectorRequirement;

/// The longest condition accepted, in bytes.
pub const MAX_LENGTH: usize = 4096;

/// The accepted subset, as the refusal of anything else states it.
pub const SUBSET: &str = "field selection, index, has(), == != < <= > >=, in, && || !, ?:, size(), startsWith/endsWith/contains/matches (a literal pattern), list and map literals, and one level of all/exists/exists_one/filter/map";

/// Which inputs a condition reads: a condition that reads none of the objects is decided
/// without content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    pub object: bool,
    pub old_object: bool,
    pub changed_paths: bool,
    pub request: bool,
    /// `request.fieldSelector` or `request.labelSelector`: carried with the content.
    pub selectors: bool,
    /// `context`: the environment an AuthZEN request carries (docs/authzen.md §2).
    pub context: bool,
}

impl Reads {
    /// Whether the condition reads the request's content (either object, or the changes).
    pub fn content(&self) -> bool {
        self.object || self.old_object || self.changed_paths
    }

    /// Whether its value can change with what a request carries beside its attributes
    /// (objects, changes, selectors).
    pub fn depends_on_content(&self) -> bool {
        self.content() || self.selectors || self.context
    }
}

/// The request as a condition sees it (`request` in CEL), borrowed from the request.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestInput<'a> {
    pub verb: &'a str,
    pub api_group: &'a str,
    pub api_version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub username: &'a str,
    pub groups: &'a [&'a str],
    pub field_selector: &'a [SelectorRequirement],
    pub label_selector: &'a [SelectorRequirement],
}

/// Everything a condition may read, for one evaluation.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub request: RequestInput<'a>,
    pub changed_paths: &'a [String],
    /// The request's `context` (AuthZEN), if it carries one.
    pub context: Option<&'a Value>,
}

/// A compiled condition, as the CEL implementation provides it.
pub trait Program: Send + Sync + fmt::Debug {
    /// The condition's value for `input`: `Err` carries CEL's message (a missing field, a
    /// type mismatch, a result that is not a bool).
    fn evaluate(&self, input: &Input<'_>) -> Result<bool, String>;

    /// What the condition reads.
    fn reads(&self) -> Reads;
}

/// A rule's `condition`: its text and its compiled program. Equal when their texts are.
#[derive(Clone)]
pub struct Condition {
    text: Arc<str>,
    program: Arc<dyn Program>,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Condition({:?})", &*self.text)
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Condition {}

/// Compiled programs by text, held weakly: a program lives as long as a rule uses it.
type Interned = HashMap<Arc<str>, Weak<dyn Program>>;

static INTERNED: std::sync::LazyLock<Mutex<Interned>> =
    std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));

impl Condition {
    /// Compiles `text`, or returns the program already compiled for the same text. `Err`
    /// says why it does not load: a syntax error, a construct outside [`SUBSET`], an unknown
    /// variable, a pattern that is no regular expression, or a text over [`MAX_LENGTH`].
    pub fn compile(text: &str) -> Result<Condition, String> {
        if text.len() > MAX_LENGTH {
            return Err(format!(
                "is {} bytes long; a condition may be at most {MAX_LENGTH}",
                text.len()
            ));
        }
        if text.trim().is_empty() {
            return Err("is empty".into());
        }
        // A poisoned lock only means another load panicked mid-insert: the map is still a
        // valid cache (each entry is inserted whole).
        let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((text, program)) = interned
            .get_key_value(text)
            .and_then(|(t, p)| Some((t.clone(), p.upgrade()?)))
        {
            return Ok(Condition { text, program });
        }
        let program: Arc<dyn Program> = Arc::new(cel_rust::CelProgram::compile(text)?);
        let text: Arc<str> = Arc::from(text);
        if interned.len() > 1024 {
            interned.retain(|_, p| p.strong_count() > 0);
        }
        interned.insert(text.clone(), Arc::downgrade(&program));
        Ok(Condition { text, program })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn reads(&self) -> Reads {
        self.program.reads()
    }

    pub fn evaluate(&self, input: &Input<'_>) -> Result<bool, String> {
        self.program.evaluate(input)
    }

    /// Whether `self` and `other` share one compiled program (interning).
    pub fn same_program(&self, other: &Condition) -> bool {
        Arc::ptr_eq(&self.program, &other.program)
    }
}

#[cfg(test)]
mod tests;
