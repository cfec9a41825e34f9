//! The request passed on to the one upstream, as Go's `httputil.NewSingleHostReverseProxy`
//! passes it (kube-rbac-proxy's forwarder): the upstream's scheme and host, its path joined
//! with the request's (one slash between), the queries joined, hop-by-hop headers dropped
//! both ways, the caller's address appended to `X-Forwarded-For`, and 502 when the upstream
//! cannot be reached.

use std::net::SocketAddr;

use axum::body::Body;
use http::header::{HeaderName, CONNECTION};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;

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

    pub async fn forward(
        &self,
        mut request: Request<Incoming>,
        remote: Option<SocketAddr>,
    ) -> Response<Body> {
        let uri = match self.uri(request.uri()) {
            Ok(uri) => uri,
            Err(error) => return bad_gateway(&error),
        };
        *request.uri_mut() = uri;
        *request.version_mut() = if self.h2c {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        let headers = request.headers_mut();
        remove_hop_by_hop(headers);
        if let Some(remote) = remote {
            append_forwarded_for(headers, remote);
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

    /// Go's `rewriteRequestURL`: scheme and authority of the target, `joinURLPath`, and the
    /// queries joined with `&`.
    fn uri(&self, incoming: &Uri) -> Result<Uri, String> {
        let base = self.target.path();
        let path = incoming.path();
        let joined = match (base.ends_with('/'), path.starts_with('/')) {
            (true, true) => format!("{base}{}", &path[1..]),
            (false, false) => format!("{base}/{path}"),
            _ => format!("{base}{path}"),
        };
        let query = match (self.target.query(), incoming.query()) {
            (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => format!("?{a}&{b}"),
            (Some(a), _) if !a.is_empty() => format!("?{a}"),
            (_, Some(b)) if !b.is_empty() => format!("?{b}"),
            _ => String::new(),
        };
        Uri::builder()
            .scheme(self.target.scheme_str().unwrap_or("http"))
            .authority(
                self.target
                    .authority()
                    .map(|a| a.as_str())
                    .unwrap_or_default(),
            )
            .path_and_query(format!("{joined}{query}"))
            .build()
            .map_err(|e| format!("cannot build the upstream URL: {e}"))
    }
}

fn remove_hop_by_hop(headers: &mut HeaderMap) {
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
        let upstream = Upstream::new(target.parse().unwrap(), None, false);
        upstream
            .uri(&incoming.parse().unwrap())
            .unwrap()
            .to_string()
    }

    #[tokio::test]
    async fn the_upstream_url_joins_paths_and_queries_as_go() {
        assert_eq!(
            joined("http://127.0.0.1:8081/", "/metrics?a=1"),
            "http://127.0.0.1:8081/metrics?a=1"
        );
        assert_eq!(joined("http://u:1/base", "/x"), "http://u:1/base/x");
        assert_eq!(
            joined("http://u:1/base?k=v", "/x?a=1"),
            "http://u:1/base/x?k=v&a=1"
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
