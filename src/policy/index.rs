//! The immutable compiled index.
