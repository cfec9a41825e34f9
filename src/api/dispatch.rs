//! The innermost service: calls to `authz.v1.Authorizer` (the hot path) go straight to its
//! tonic service; everything else goes through the axum router.
//!
//! The router would give the Authorizer's calls the same answer: tonic registers a service as
//! the route `/authz.v1.Authorizer/*rest`, and this module matches the same prefix. What the
//! detour costs, per call, is the router's path match, its URL-parameter extension, a boxed
//! route service cloned and dropped, and the request body boxed into axum's body type.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tonic::server::NamedService;

/// Sends the calls whose path starts with `/{S::NAME}/` to `service`, the rest to `router`.
#[derive(Clone)]
pub struct ServiceFirst<S> {
    service: S,
    router: axum::Router,
}

impl<S: NamedService> ServiceFirst<S> {
    pub fn new(service: S, router: axum::Router) -> Self {
        Self { service, router }
    }

    fn is_for_service(path: &str) -> bool {
        path.strip_prefix('/')
            .and_then(|path| path.strip_prefix(S::NAME))
            .is_some_and(|rest| rest.starts_with('/'))
    }
}

impl<S, B> tower::Service<http::Request<B>> for ServiceFirst<S>
where
    S: NamedService
        + tower::Service<
            http::Request<B>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        >,
    axum::Router: tower::Service<
        http::Request<B>,
        Response = http::Response<axum::body::Body>,
        Error = Infallible,
    >,
{
    type Response = http::Response<axum::body::Body>;
    type Error = Infallible;
    type Future =
        Dispatched<S::Future, Pin<Box<<axum::Router as tower::Service<http::Request<B>>>::Future>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both are always ready (a tonic service and an axum router hold no capacity); ask
        // both anyway, as the contract wants before `call`.
        match self.service.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                tower::Service::<http::Request<B>>::poll_ready(&mut self.router, cx)
            }
            other => other,
        }
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if Self::is_for_service(request.uri().path()) {
            Dispatched::Service {
                future: self.service.call(request),
            }
        } else {
            // Boxed: the router's future is 320 bytes against the service's 16, and every
            // layer above holds (and moves) whichever is larger, on the hot path too.
            Dispatched::Router {
                future: Box::pin(self.router.call(request)),
            }
        }
    }
}

pin_project! {
    /// The response of whichever service took the call.
    #[project = DispatchedProject]
    pub enum Dispatched<S, R> {
        Service { #[pin] future: S },
        Router { #[pin] future: R },
    }
}

impl<S, R> Future for Dispatched<S, R>
where
    S: Future<Output = Result<http::Response<tonic::body::Body>, Infallible>>,
    R: Future<Output = Result<http::Response<axum::body::Body>, Infallible>>,
{
    type Output = Result<http::Response<axum::body::Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            DispatchedProject::Service { future } => future
                .poll(cx)
                .map(|result| result.map(|response| response.map(axum::body::Body::new))),
            DispatchedProject::Router { future } => future.poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::wire::service::authorizer_server::AuthorizerServer;

    type Authorizer = ServiceFirst<AuthorizerServer<crate::api::grpc::GrpcApi>>;

    /// Every layer above the dispatch holds its future and moves it on each call; it stays the
    /// size of the service's boxed future, not the router's.
    #[test]
    fn the_dispatched_future_stays_small() {
        type Dispatch =
            <Authorizer as tower::Service<http::Request<hyper::body::Incoming>>>::Future;
        assert!(std::mem::size_of::<Dispatch>() <= 32);
    }

    #[test]
    fn only_the_services_own_paths_skip_the_router() {
        assert!(Authorizer::is_for_service("/authz.v1.Authorizer/Authorize"));
        assert!(Authorizer::is_for_service("/authz.v1.Authorizer/Unknown"));
        for other in [
            "/authz.v1.AccessReview/SubjectAccessReview",
            "/authz.v1.AuthorizerX/Authorize",
            "/authz.v1.Authorizer",
            "authz.v1.Authorizer/Authorize",
            "/healthz",
            "/",
        ] {
            assert!(!Authorizer::is_for_service(other), "{other}");
        }
    }
}
