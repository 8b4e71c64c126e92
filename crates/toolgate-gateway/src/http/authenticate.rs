//! The API-key check in front of `/v1` and `/mcp`, as a tower layer.
//!
//! The check is synchronous (a SHA-256 and constant-time comparisons), so the layer
//! answers 401 itself or calls the route directly: no boxed future and no copy of the
//! route per request, as a `from_fn` middleware would make.

use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::{ArcSwap, Guard};
use axum::extract::Request;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use futures::future::Either;
use tower_layer::Layer;
use tower_service::Service;

use super::{ApiError, Caller};
use crate::gateway::Gateway;

/// Wraps routes in [`Authenticate`].
#[derive(Clone)]
pub(super) struct AuthenticateLayer {
    current: Arc<ArcSwap<Gateway>>,
}

impl AuthenticateLayer {
    /// Checks keys against the users of the current configuration.
    pub(super) fn new(current: Arc<ArcSwap<Gateway>>) -> Self {
        AuthenticateLayer { current }
    }
}

impl<S> Layer<S> for AuthenticateLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticate {
            inner,
            current: self.current.clone(),
        }
    }
}

/// Answers 401 to a request without a valid `Authorization: Bearer <key>`; hands the
/// others to the route with their [`Caller`] in the request's extensions.
#[derive(Clone)]
pub(super) struct Authenticate<S> {
    inner: S,
    current: Arc<ArcSwap<Gateway>>,
}

/// The caller behind the request's key, on the configuration current now.
fn caller(current: &ArcSwap<Gateway>, headers: &HeaderMap) -> Option<Caller> {
    // The configuration is read through a guard; the caller takes a reference to it only
    // when the key is good.
    let gateway = current.load();
    let user = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| gateway.keys.authenticate_header(v))?;
    Some(Caller {
        user,
        gateway: Guard::into_inner(gateway),
    })
}

impl<S> Service<Request> for Authenticate<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match caller(&self.current, request.headers()) {
            Some(caller) => {
                request.extensions_mut().insert(caller);
                Either::Right(self.inner.call(request))
            }
            None => Either::Left(std::future::ready(Ok(
                ApiError::unauthenticated().into_response()
            ))),
        }
    }
}
