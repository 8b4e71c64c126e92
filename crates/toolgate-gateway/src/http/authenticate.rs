//! The credential check in front of `/v1` and `/mcp`, as a tower layer (see
//! [`crate::identity`]).
//!
//! An API key (a SHA-256 and constant-time comparisons) and a token signed with a cached
//! key are checked synchronously, so the layer answers 401 itself or calls the route
//! directly: no boxed future and no copy of the route per request, as a `from_fn`
//! middleware would make. Only a token whose key must first be fetched from the issuer, a
//! wrong credential (counted, maybe on Redis) and a console session's cookie (looked up,
//! maybe on Redis) take a boxed future.

use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::{ArcSwap, Guard};
use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, Either};
use tower_layer::Layer;
use tower_service::Service;

use toolgate_core::secret::Secret;
use toolgate_mcp::CallerAccessToken;

use super::Caller;
use super::body::{closing_if, has_body};
use crate::config::CredentialKind;
use crate::console::{comes_with_session, session_user};
use crate::gateway::Gateway;
use crate::identity::{Outcome, Route};

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

/// Answers 401 (or 403, or 503) to a request without a valid `Authorization: Bearer …`;
/// hands the others to the route with their [`Caller`] in the request's extensions.
#[derive(Clone)]
pub(super) struct Authenticate<S> {
    inner: S,
    current: Arc<ArcSwap<Gateway>>,
}

/// What the credential of a request comes to, on the configuration current now.
enum Checked {
    Caller(Caller),
    Refused(Response),
    /// A wrong credential, refused with the response once the gateway has counted it
    /// (`identity.failed_credentials`, on Redis when the replicas share the count).
    Wrong(Arc<Gateway>, Response),
    /// A token whose key is not cached: the gateway to fetch the keys on.
    FetchKeys(Arc<Gateway>, Route),
    /// A console session's cookie, to be looked up (on Redis, when the replicas share the
    /// sessions).
    Session(Arc<Gateway>),
}

/// The request's `Authorization` header, when it is text.
fn authorization(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// The caller's access token, kept for the invocation when an upstream exchanges it.
fn caller_token(
    gateway: &Gateway,
    kind: CredentialKind,
    request: &Request,
) -> Option<CallerAccessToken> {
    if kind != CredentialKind::Oauth || !gateway.exchanges_tokens {
        return None;
    }
    let token = authorization(request).and_then(crate::identity::bearer)?;
    Some(CallerAccessToken::new(Secret::new(token)))
}

fn check(current: &ArcSwap<Gateway>, request: &Request) -> Checked {
    // The configuration is read through a guard; the caller takes a reference to it only
    // when the credential is good.
    // A credential header sent twice is refused before either value is looked at (and is
    // not a wrong credential: nothing is counted).
    if let Some(refusal) = crate::identity::repeated_credential(request.headers()) {
        return Checked::Refused(refusal.into_response());
    }
    let gateway = current.load();
    let route = Route::of_path(request.uri().path());
    // A console session: its cookie instead of `Authorization`, on `/v1` only.
    if route == Route::V1 && comes_with_session(&gateway, request.headers()) {
        return Checked::Session(Guard::into_inner(gateway));
    }
    let credential = authorization(request);
    // A client past its allowance of wrong credentials is refused before its credential
    // is looked at (a request without one tries nothing, and is not held to it).
    let client = || gateway.client_address(request.extensions().get(), request.headers());
    if credential.is_some()
        && let Some(response) = gateway.credential_limit.refusal(client)
    {
        return Checked::Refused(response);
    }
    match gateway
        .identity
        .authenticate(route, credential, &gateway.keys)
    {
        Outcome::Caller(user, kind) => Checked::Caller(Caller {
            token: caller_token(&gateway, kind, request),
            user,
            gateway: Guard::into_inner(gateway),
        }),
        Outcome::Refused(refusal) => {
            let response = gateway.identity.refusal(route, &refusal);
            if refusal.is_wrong_credential() {
                Checked::Wrong(Guard::into_inner(gateway), response)
            } else {
                Checked::Refused(response)
            }
        }
        Outcome::FetchKeys => Checked::FetchKeys(Guard::into_inner(gateway), route),
    }
}

/// A refusal of a request that came with a body, marked `Connection: close`. The body is
/// not read for a refusal, and hyper keeps such a connection only when the whole body
/// happened to be read with the head; otherwise it closes it after the answer. A client
/// that is not told may send its next request (the retry with a token, after a 401
/// challenge) on the connection being closed, and gets no answer at all.
fn closing_if_body_unread(request: &Request, response: Response) -> Response {
    closing_if(has_body(request.headers()), response)
}

impl<S: Clone> Authenticate<S> {
    /// The service that was made ready, to go with a request answered later; a fresh clone
    /// stays for the next one (tower's rule for services called later).
    fn take_ready(&mut self) -> S {
        let fresh = self.inner.clone();
        std::mem::replace(&mut self.inner, fresh)
    }
}

impl<S> Service<Request> for Authenticate<S>
where
    S: Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<
        Either<std::future::Ready<Result<Response, S::Error>>, S::Future>,
        BoxFuture<'static, Result<Response, S::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match check(&self.current, &request) {
            Checked::Caller(caller) => {
                request.extensions_mut().insert(caller);
                Either::Left(Either::Right(self.inner.call(request)))
            }
            Checked::Refused(response) => Either::Left(Either::Left(std::future::ready(Ok(
                closing_if_body_unread(&request, response),
            )))),
            Checked::Wrong(gateway, response) => Either::Right(Box::pin(async move {
                let client = gateway.client_address(request.extensions().get(), request.headers());
                gateway.credential_limit.failed(client).await;
                Ok(closing_if_body_unread(&request, response))
            })),
            Checked::Session(gateway) => {
                let mut inner = self.take_ready();
                Either::Right(Box::pin(async move {
                    let peer = request.extensions().get();
                    let user = session_user(&gateway, request.method(), request.headers(), peer);
                    match user.await {
                        Ok(user) => {
                            request.extensions_mut().insert(Caller {
                                user,
                                token: None,
                                gateway,
                            });
                            inner.call(request).await
                        }
                        Err(response) => Ok(closing_if_body_unread(&request, response)),
                    }
                }))
            }
            Checked::FetchKeys(gateway, route) => {
                let mut inner = self.take_ready();
                Either::Right(Box::pin(async move {
                    match gateway
                        .identity
                        .authenticate_after_fetch(route, authorization(&request), &gateway.keys)
                        .await
                    {
                        Ok(user) => {
                            let token = caller_token(&gateway, CredentialKind::Oauth, &request);
                            request.extensions_mut().insert(Caller {
                                user,
                                token,
                                gateway,
                            });
                            inner.call(request).await
                        }
                        Err(refusal) => {
                            if refusal.is_wrong_credential() {
                                let client = gateway
                                    .client_address(request.extensions().get(), request.headers());
                                gateway.credential_limit.failed(client).await;
                            }
                            Ok(closing_if_body_unread(
                                &request,
                                gateway.identity.refusal(route, &refusal),
                            ))
                        }
                    }
                }))
            }
        }
    }
}
