//! The request passed on to the one upstream, as Go's `httputil.NewSingleHostReverseProxy`
//! passes it (kube-rbac-proxy's forwarder): the upstream's scheme and host, its path joined
//! with the request's clean path (`request_path.rs`; one slash between), the queries joined,
//! the caller's address appended to `X-Forwarded-For`, hop-by-hop headers dropped from the
//! answer, and 502 when the upstream cannot be reached. The request's own hop-by-hop headers
//! are dropped by the proxy before it sets the caller's identity (`Proxy::pass_on`), so that
//! a `Connection` header cannot name that identity away.

use std::net::SocketAddr;

use axum::body::Body;
use http::header::{HeaderName, CONNECTION};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;

use super::request_path::CleanPath;
use crate::webhook::{outbound_client, OutboundClient};

/// Hop-by-hop headers (RFC 9110 §7.6.1; Go's `hopHeaders`), never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub struct Upstream {
    client: OutboundClient<Incoming>,
    target: Uri,
    h2c: bool,
}

impl Upstream {
    /// `target` is `--upstream`; `tls` verifies an `https` upstream (`--upstream-ca-file`,
    /// `--upstream-client-cert-file`); `h2c` speaks HTTP/2 without TLS.
    pub fn new(target: Uri, tls: Option<std::sync::Arc<rustls::ClientConfig>>, h2c: bool) -> Self {
        Upstream {
            client: outbound_client(tls, h2c),
            target,
            h2c,
        }
    }

    /// Passes `request` on for `path`, the path it was authorized for (its own URI gives
    /// only the query); its headers go as they are, hop-by-hop ones already removed.
    pub async fn forward(
        &self,
        mut request: Request<Incoming>,
        path: &CleanPath,
        remote: Option<SocketAddr>,
    ) -> Response<Body> {
        let uri = match upstream_uri(&self.target, path, request.uri().query()) {
            Ok(uri) => uri,
            Err(error) => return bad_gateway(&error),
        };
        *request.uri_mut() = uri;
        *request.version_mut() = if self.h2c {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        if let Some(remote) = remote {
            append_forwarded_for(request.headers_mut(), remote);
        }
        match self.client.request(request).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                remove_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Err(error) => {
                tracing::warn!(upstream = %self.target, error = %crate::caller::connect::error_chain(&error), "upstream request failed");
                bad_gateway("the upstream did not answer")
            }
        }
    }
}

/// The URI a request for `path` with `query` goes to, as Go's `rewriteRequestURL` builds it:
/// scheme and authority of `target` (`--upstream`), `joinURLPath` of its path and `path`
/// (escaped as the client escaped it), and the queries joined with `&`, the request's as it
/// came.
pub fn upstream_uri(target: &Uri, path: &CleanPath, query: Option<&str>) -> Result<Uri, String> {
    let base = target.path();
    let path = path.escaped();
    let joined = match (base.ends_with('/'), path.starts_with('/')) {
        (true, true) => format!("{base}{}", &path[1..]),
        (false, false) => format!("{base}/{path}"),
        _ => format!("{base}{path}"),
    };
    let query = match (target.query(), query) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => format!("?{a}&{b}"),
        (Some(a), _) if !a.is_empty() => format!("?{a}"),
        (_, Some(b)) if !b.is_empty() => format!("?{b}"),
        _ => String::new(),
    };
    Uri::builder()
        .scheme(target.scheme_str().unwrap_or("http"))
        .authority(target.authority().map(|a| a.as_str()).unwrap_or_default())
        .path_and_query(format!("{joined}{query}"))
        .build()
        .map_err(|e| format!("cannot build the upstream URL: {e}"))
}

/// Whether `name` is hop-by-hop whatever the `Connection` header says.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

/// Drops the headers that concern one connection only: those `Connection` names and the
/// fixed list (RFC 9110 §7.6.1).
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Headers the Connection header names are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        // Go keeps `TE: trailers` (gRPC needs it).
        if name == "te"
            && headers
                .get(name)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"))
        {
            continue;
        }
        headers.remove(name);
    }
}

fn append_forwarded_for(headers: &mut HeaderMap, remote: SocketAddr) {
    const FORWARDED_FOR: &str = "x-forwarded-for";
    let prior: Vec<&str> = headers
        .get_all(FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let ip = remote.ip().to_string();
    let value = if prior.is_empty() {
        ip
    } else {
        format!("{}, {ip}", prior.join(", "))
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(FORWARDED_FOR, value);
    }
}

fn bad_gateway(message: &str) -> Response<Body> {
    super::text(StatusCode::BAD_GATEWAY, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(target: &str, incoming: &str) -> String {
        let incoming: Uri = incoming.parse().unwrap();
        let path = CleanPath::of(&incoming).unwrap();
        upstream_uri(&target.parse().unwrap(), &path, incoming.query())
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_upstream_url_joins_paths_and_queries_as_go() {
        assert_eq!(
            joined("http://127.0.0.1:8081/", "/metrics?a=1"),
            "http://127.0.0.1:8081/metrics?a=1"
        );
        assert_eq!(joined("http://u:1/base", "/x"), "http://u:1/base/x");
        assert_eq!(
            joined("http://u:1/base?k=v", "/x?a=1"),
            "http://u:1/base/x?k=v&a=1"
        );
        // The clean path, the query as it came.
        assert_eq!(
            joined("http://u:1/base/", "/a//./b/../c%20d?x=%2e%2e/&y"),
            "http://u:1/base/a/c%20d?x=%2e%2e/&y"
        );
    }

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", "close, x-secret".parse().unwrap());
        headers.insert("x-secret", "1".parse().unwrap());
        headers.insert("te", "trailers".parse().unwrap());
        headers.insert("upgrade", "h2c".parse().unwrap());
        headers.insert("x-kept", "1".parse().unwrap());
        remove_hop_by_hop(&mut headers);
        let mut left: Vec<_> = headers.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(left, ["te", "x-kept"]);
    }
}
