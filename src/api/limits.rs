//! Input limits, all in one place. Anything larger is refused with `INVALID_ARGUMENT` naming
//! the field (or, for whole messages, `RESOURCE_EXHAUSTED`), before any evaluation. They bound the work and memory one request can demand; no real
//! Kubernetes name, path or group list comes near them.

/// Bytes in any one string attribute: user, uid, group, extra key or value, verb, namespace,
/// API group, version, resource, subresource, name, review namespace.
pub const MAX_STRING_BYTES: usize = 4 * 1024;

/// Bytes in a non-resource `path` (URLs may carry long query-free paths).
pub const MAX_PATH_BYTES: usize = 8 * 1024;

/// Groups of one subject.
pub const MAX_GROUPS: usize = 256;

/// Keys of one subject's `extra` map.
pub const MAX_EXTRA_KEYS: usize = 64;

/// Values of one `extra` key.
pub const MAX_EXTRA_VALUES: usize = 64;

/// Requests in one `BatchAuthorize`.
pub const MAX_BATCH: usize = 1000;

/// Largest gRPC request message the server decodes (4 MiB, gRPC's usual default, stated
/// explicitly so it is a decision rather than an accident). Responses are not capped: their
/// size is bounded by the policy (who-can lists), not by the caller.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
