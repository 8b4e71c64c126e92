//! `toolgate_http_requests_total{route, method, status}` and
//! `toolgate_http_request_duration_seconds{route}`, recorded for every request through
//! metric handles kept per route, method and status.
//!
//! Looking a metric up in the recorder's registry on every request means building its key
//! (owned label strings), hashing it and taking the registry's lock. The handles the
//! recorder hands out are cheap to keep and to update, so each distinct (route, method,
//! status) is registered once and later requests only find its handles in a short list
//! (the routes are the router's, a few statuses each). The list is read without a lock and
//! replaced, copy on write, when a new combination appears.
//!
//! [`RecordRequestsLayer`] wraps the router's routes: it reads the route and method before
//! the request goes in and the status as the answer comes out, without boxing the route's
//! future or copying the route as a `from_fn` middleware would.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use metrics::{Counter, Histogram};
use toolgate_hooks::metrics::PerRecorder;
use tower_layer::Layer;
use tower_service::Service;

/// How many (route, method, status) combinations the list keeps.
const MAX_ENTRIES: usize = 256;

/// The metric handles of the requests seen so far, registered with the current recorder.
#[derive(Default)]
pub(super) struct RequestMetrics {
    entries: PerRecorder<Vec<Entry>>,
}

#[derive(Clone)]
struct Entry {
    route: Box<str>,
    method: Method,
    status: StatusCode,
    requests: Counter,
    duration: Histogram,
}

impl Entry {
    fn matches(&self, route: &str, method: &Method, status: StatusCode) -> bool {
        self.status == status && self.method == method && *self.route == *route
    }

    fn record(&self, elapsed: Duration) {
        self.requests.increment(1);
        self.duration.record(elapsed.as_secs_f64());
    }
}

impl RequestMetrics {
    /// Counts a request to `route` (its matched path, or `unmatched`) answered with
    /// `status` after `elapsed`.
    pub(super) fn record(
        &self,
        route: &str,
        method: &Method,
        status: StatusCode,
        elapsed: Duration,
    ) {
        let (recorded, known) = self.entries.with_current(|entries| {
            let entries = entries.map_or(&[][..], Vec::as_slice);
            let entry = entries.iter().find(|e| e.matches(route, method, status));
            if let Some(entry) = entry {
                entry.record(elapsed);
            }
            (entry.is_some(), entries.len())
        });
        if recorded {
            return;
        }
        let entry = Entry {
            route: route.into(),
            method: method.clone(),
            status,
            requests: metrics::counter!(
                "toolgate_http_requests_total",
                "route" => route.to_owned(),
                "method" => method.as_str().to_owned(),
                "status" => status.as_str().to_owned()
            ),
            duration: metrics::histogram!(
                "toolgate_http_request_duration_seconds",
                "route" => route.to_owned()
            ),
        };
        entry.record(elapsed);
        if known >= MAX_ENTRIES {
            // Clients choose methods, so the combinations have no bound: past this many,
            // new ones are registered on each request, as without the list.
            return;
        }
        self.entries.update(|entries| {
            if !entries.iter().any(|e| e.matches(route, method, status)) {
                entries.push(entry.clone());
            }
        });
    }
}

/// Wraps routes in [`RecordRequests`].
#[derive(Clone, Default)]
pub(super) struct RecordRequestsLayer {
    metrics: Arc<RequestMetrics>,
}

impl<S> Layer<S> for RecordRequestsLayer {
    type Service = RecordRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RecordRequests {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Counts each request and times it, by route (its matched path, or `unmatched`), method
/// and status.
#[derive(Clone)]
pub(super) struct RecordRequests<S> {
    inner: S,
    metrics: Arc<RequestMetrics>,
}

impl<S> Service<Request> for RecordRequests<S>
where
    S: Service<Request, Response = Response>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Recorded<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let pending = Pending {
            metrics: self.metrics.clone(),
            route: request.extensions().get::<MatchedPath>().cloned(),
            method: request.method().clone(),
            started: Instant::now(),
        };
        Recorded {
            inner: self.inner.call(request),
            pending: Some(pending),
        }
    }
}

/// What is known of a request before its answer.
struct Pending {
    metrics: Arc<RequestMetrics>,
    route: Option<MatchedPath>,
    method: Method,
    started: Instant,
}

/// The route's future; records the request when its answer is ready.
pub(super) struct Recorded<F> {
    inner: F,
    pending: Option<Pending>,
}

impl<F, E> Future for Recorded<F>
where
    F: Future<Output = Result<Response, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let result = ready!(Pin::new(&mut this.inner).poll(cx));
        if let (Ok(response), Some(pending)) = (&result, this.pending.take()) {
            pending.metrics.record(
                pending
                    .route
                    .as_ref()
                    .map_or("unmatched", MatchedPath::as_str),
                &pending.method,
                response.status(),
                pending.started.elapsed(),
            );
        }
        Poll::Ready(result)
    }
}
