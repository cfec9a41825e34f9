//! Why the serving core refuses a call: the one error its verbs return. Every adapter maps it
//! into its protocol's refusal in one place (`api::error`'s `From<Refusal>`), so a call refused
//! here is refused alike over gRPC, HTTP and Envoy.

use thiserror::Error;

use crate::engine::content::ContentError;

#[derive(Debug, Error)]
pub enum Refusal {
    /// No policy has compiled yet; health says `NOT_SERVING` meanwhile.
    #[error("no policy is loaded yet; retry when health reports SERVING")]
    NotReady,

    /// The request asked for a policy revision the server has not reached in time.
    #[error("server is at revision {current}, behind the requested min_revision {requested}")]
    RevisionNotReached { requested: u64, current: u64 },

    /// A call pinned to a revision (a later page of an AuthZEN search) whose snapshot is no
    /// longer retained (`serving::RETAINED_SNAPSHOTS`): the search must start again.
    #[error("the page token is pinned to policy revision {revision}, which this server no longer holds (the oldest it holds is {oldest}); start the search again without a token")]
    RevisionGone { revision: u64, oldest: u64 },

    /// The caller lacks the privilege the call needs; the message says which.
    #[error("{0}")]
    PermissionDenied(String),

    /// etcd mode: this replica cannot prove its policy current, and the answer was an allow
    /// (or a list of who is allowed).
    #[error("{0}")]
    Fenced(String),

    /// A bound on open streams (subscribers) is reached; retry later.
    #[error("{0}")]
    Exhausted(String),

    /// A field of the call the serving core itself bounds (a subscriber's id).
    #[error("{field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },

    /// Content a rule needed and could not read: the request is refused naming the field,
    /// never decided.
    #[error(transparent)]
    Content(#[from] ContentError),
}
