//! Policy: the data model, its loaders, its matching semantics and its compilation.

pub mod abac;
pub mod aggregate;
pub mod compile;
pub mod content;
pub mod delta;
pub mod describe;
pub mod impact;
pub mod index;
pub mod load;
pub mod model;
pub mod namespace_map;
pub mod rbac;
pub mod render;
