//! The client library of authzd (docs/caller-cache.md §5 in the authzd repository): a typed
//! async [`Client`] for every `Authorizer` and `AccessReview` call, a decision cache in the
//! caller's process that the server's invalidation stream keeps exact, and a `tower` layer.
//!
//! The code lives in the `authzd` crate's `caller` floor, because the `authzd` binary uses it
//! itself (`authzd ask`) and a crate cannot depend on one that depends on it; this crate is the
//! name callers depend on. The request floor (`Request`, `UserInfo`, `Action`) is re-exported
//! with it: the local cache is keyed on exactly the fields the server's cache is.

pub use authzd::caller::*;
pub use authzd::proto;
pub use authzd::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};
