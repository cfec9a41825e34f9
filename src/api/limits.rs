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

/// Most conditions one EvaluateConditions call may carry (a conditional answer holds one per
/// rule its request meets with content clauses).
pub const MAX_CONDITIONS: usize = 1024;

/// Largest gRPC request message the server decodes (4 MiB, gRPC's usual default, stated
/// explicitly so it is a decision rather than an accident). Responses are not capped: their
/// size is bounded by the policy (who-can lists), not by the caller.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// Default of `--max-content-bytes`, the largest object (`content.object`,
/// `content.old_object`) one request may carry: 3 MiB, kube-apiserver's own request body limit
/// (`MaxRequestBodyBytes` in k8s.io/apiserver/pkg/server/config.go), so any object Kubernetes
/// stores fits. Both objects of one request still travel in one message of at most
/// [`MAX_REQUEST_BYTES`].
pub const DEFAULT_MAX_CONTENT_BYTES: usize = 3 * 1024 * 1024;

/// Entries of `content.changed_paths`.
pub const MAX_CHANGED_PATHS: usize = 1024;

/// Bytes in one changed path.
pub const MAX_CHANGED_PATH_BYTES: usize = 4 * 1024;

/// Requirements of one field or label selector (a raw selector: the requirements it parses
/// into).
pub const MAX_SELECTOR_REQUIREMENTS: usize = 64;

/// Values of one selector requirement.
pub const MAX_SELECTOR_VALUES: usize = 64;

/// Bytes in a selector requirement's key or in one of its values.
pub const MAX_SELECTOR_STRING_BYTES: usize = 1024;

/// Bytes in a raw selector (`rawSelector`), checked before it is parsed. Real selectors are a
/// few dozen bytes; this leaves room for long `in (...)` sets.
pub const MAX_RAW_SELECTOR_BYTES: usize = 64 * 1024;

/// The content limits that are settings rather than constants (`serve --max-content-bytes`),
/// as the adapters that read content apply them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentLimits {
    /// Bytes in one object (`content.object`, `content.old_object`, an Envoy request body).
    pub max_object_bytes: usize,
}

impl Default for ContentLimits {
    fn default() -> Self {
        Self {
            max_object_bytes: DEFAULT_MAX_CONTENT_BYTES,
        }
    }
}

/// Results in one page of an AuthZEN search when the request sets no `page.limit`
/// (docs/authzen.md §5).
pub const DEFAULT_SEARCH_PAGE: usize = 100;

/// The largest `page.limit` an AuthZEN search takes.
pub const MAX_SEARCH_PAGE: usize = 1000;
