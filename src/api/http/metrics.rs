//! `GET /metrics`: the Prometheus exposition, guarded as kube-apiserver guards its own
//! `/metrics` (docs/observability.md §1).
//!
//! With authentication configured (`--token-auth-file` or `--client-ca-file`), a scrape is a
//! call like any other: the authenticator chain names the caller (a token, a client
//! certificate, impersonation headers), and the policy must allow it `get` on the
//! non-resource URL `/metrics`, the rule Kubernetes has a scraper hold for its own components'
//! `/metrics` (<https://kubernetes.io/docs/concepts/cluster-administration/system-metrics/>),
//! or the answer is the 401 or 403 `Status` every other endpoint answers. The
//! figures are operational, not policy, but they say how busy the server is, which APIs are
//! used and how often they allow, which a caller who may ask nothing should not learn.
//!
//! Without authentication every caller is the local identity on a local listener (or, with the
//! insecure flag, anyone), so there is no one to tell apart: the page is answered to every
//! caller, before the first policy too, as it always was (`scripts/profile.sh` and local
//! scrapers read it that way). The probes, `/healthz` and `/readyz`, stay open either way: a
//! kubelet probe carries no credentials.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use tonic::metadata::MetadataMap;

use super::{status, HttpApi};
use crate::api::error::Result;
use crate::api::grpc::Review;
use crate::api::limits::ContentLimits;
use crate::serving::{Call, Privilege};

/// Prometheus' text format, version 0.0.4.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Who may read `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsAccess {
    /// Every caller: no authentication is configured, so every caller is the local identity.
    Open,
    /// An authenticated caller the policy allows `get` on `/metrics`.
    Authorized,
}

/// The `/metrics` endpoint: what renders the page (the composition root knows where every
/// figure lives) and who may read it.
#[derive(Clone)]
pub struct MetricsEndpoint {
    render: Arc<dyn Fn() -> String + Send + Sync>,
    access: MetricsAccess,
}

impl MetricsEndpoint {
    pub fn new(render: impl Fn() -> String + Send + Sync + 'static, access: MetricsAccess) -> Self {
        Self {
            render: Arc::new(render),
            access,
        }
    }
}

/// A scrape as a call through `GrpcApi::serve`, for its authentication and admission: nothing
/// to convert, the privilege `get /metrics`, and the page rendered by the handler.
struct Scrape;

impl Review for Scrape {
    type Asked = ();
    type Reply = ();

    fn convert(self, _limits: &ContentLimits) -> Result<((), u64)> {
        Ok(((), 0))
    }

    fn privilege(_asked: &()) -> Privilege<'_> {
        Privilege::METRICS
    }

    async fn answer(_call: &Call<'_>, _asked: ()) -> Result<()> {
        Ok(())
    }
}

/// `GET /metrics`: the page, once `endpoint`'s access admits the caller.
pub(super) async fn scrape(api: HttpApi, endpoint: MetricsEndpoint, request: Request) -> Response {
    if endpoint.access == MetricsAccess::Authorized {
        let (parts, _body) = request.into_parts();
        let call = tonic::Request::from_parts(
            MetadataMap::from_headers(parts.headers),
            parts.extensions,
            Scrape,
        );
        if let Err(error) = api.grpc.serve(call).await {
            return status::refusal(&error);
        }
    }
    let mut response = Response::new(Body::from((endpoint.render)()));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(CONTENT_TYPE),
    );
    response
}
