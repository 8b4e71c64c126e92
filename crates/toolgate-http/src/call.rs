//! From an HTTP request to [`InvokeOptions`]: the caller your authentication put in the
//! request's extensions, the session and the request id from headers.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;
use http::{HeaderMap, HeaderName, StatusCode};
use toolgate_core::context::RequestId;
use toolgate_core::{InvokeOptions, User};

use crate::HttpError;

/// `x-request-id`: the caller's id of the request (at most 128 bytes), echoed in the answer.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `x-session-id`: the session the call belongs to.
pub const X_SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");

/// The longest `x-request-id` taken from a client.
const MAX_REQUEST_ID: usize = 128;

/// The `x-request-id` a client sent, when it is usable (not empty, at most 128 bytes,
/// visible ASCII).
///
/// ```
/// use http::HeaderMap;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-request-id", "req-7".parse().unwrap());
/// assert_eq!(toolgate_http::request_id(&headers), Some("req-7"));
/// ```
pub fn request_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID)
}

/// The `x-session-id` a client sent, if any.
///
/// ```
/// use http::HeaderMap;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-session-id", "chat-42".parse().unwrap());
/// assert_eq!(toolgate_http::session_id(&headers), Some("chat-42"));
/// ```
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(X_SESSION_ID).and_then(|v| v.to_str().ok())
}

/// Who is calling: your authentication middleware inserts one in the request's extensions
/// (`request.extensions_mut().insert(Caller::new(user))`), and [`CallOptions`] makes it the
/// invocation's [`User`], which policies and `#[requires]` read.
///
/// ```
/// use toolgate_core::User;
/// use toolgate_http::Caller;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Caller::new(User::new("alice")));
/// assert_eq!(request.extensions().get::<Caller>().unwrap().user().id, "alice");
/// ```
#[derive(Clone, Debug)]
pub struct Caller(Arc<User>);

impl Caller {
    /// The caller this user is.
    pub fn new(user: impl Into<Arc<User>>) -> Self {
        Caller(user.into())
    }

    /// The user.
    pub fn user(&self) -> &Arc<User> {
        &self.0
    }
}

/// An axum extractor: the [`InvokeOptions`] of a request.
///
/// - the user: the [`Caller`] in the request's extensions (a request without one is
///   answered 401 `unauthenticated`: put your authentication middleware in front of the
///   route);
/// - the session: `x-session-id`, when sent;
/// - the request id: `x-request-id` when usable, a generated one otherwise (it is in
///   [`request_id`](Self::request_id) too, to echo in the answer).
///
/// Add what is yours to [`options`](Self::options) before invoking: a deadline,
/// cancellation, values for the tool's context with
/// [`provide`](InvokeOptions::provide).
///
/// ```
/// use axum::{Json, extract::State, response::Response};
/// use serde_json::Value;
/// use toolgate_core::Pipeline;
/// use toolgate_http::{CallOptions, invocation_response};
///
/// async fn search(
///     State(pipeline): State<Pipeline>,
///     call: CallOptions,
///     Json(input): Json<Value>,
/// ) -> Response {
///     let options = call.options.timeout(std::time::Duration::from_secs(5));
///     invocation_response(&pipeline.invoke_detailed("search", input, options).await)
/// }
/// # let _ = axum::routing::post(search).with_state::<()>(Pipeline::builder().build().unwrap());
/// ```
#[derive(Debug)]
pub struct CallOptions {
    /// The options to invoke with.
    pub options: InvokeOptions,
    /// The request's id: the client's `x-request-id` or a generated one.
    pub request_id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for CallOptions {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, HttpError> {
        let Some(caller) = parts.extensions.get::<Caller>() else {
            return Err(HttpError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this route needs an authenticated caller: send your credentials",
            ));
        };
        let request_id = request_id(&parts.headers)
            .map(str::to_owned)
            .unwrap_or_else(|| RequestId::generate().to_string());
        let mut options = InvokeOptions::new()
            .user(Arc::clone(&caller.0))
            .request_id(request_id.clone());
        if let Some(session) = session_id(&parts.headers) {
            options = options.session(session);
        }
        Ok(CallOptions {
            options,
            request_id,
        })
    }
}
