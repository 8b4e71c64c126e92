//! `toolgate_http_requests_total{route, method, status}` and
//! `toolgate_http_request_duration_seconds{route}`, recorded for every request through
//! metric handles kept per route, method and status.
//!
//! Clients choose methods and paths, so neither becomes a label as sent: the route is the
//! router's template (`/v1/tools/{name}/invoke`, or `unmatched`), the method one of the
//! standard ones or `other`. Past [`MAX_ENTRIES`] combinations, every new one is counted
//! under `route="other", method="other", status="other"`: the number of series has a
//! hard bound, whatever clients send.
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

/// How many (route, method, status) combinations get series of their own.
const MAX_ENTRIES: usize = 256;

/// The label of every value folded into one bucket.
const OTHER: &str = "other";

/// The label of a request's method: the standard methods by name, any other `other`.
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [(Method, &str); 9] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::PATCH, "PATCH"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    STANDARD
        .iter()
        .find_map(|(standard, label)| (standard == method).then_some(*label))
        .unwrap_or(OTHER)
}

/// The metric handles of the requests seen so far, registered with the current recorder.
#[derive(Default)]
pub(super) struct RequestMetrics {
    entries: PerRecorder<Table>,
}

/// The combinations seen so far, and the bucket of those past the bound.
#[derive(Clone, Default)]
struct Table {
    entries: Vec<Entry>,
    other: Option<Entry>,
}

#[derive(Clone)]
struct Entry {
    route: Box<str>,
    method: &'static str,
    status: StatusCode,
    requests: Counter,
    duration: Histogram,
}

impl Entry {
    fn matches(&self, route: &str, method: &str, status: StatusCode) -> bool {
        self.status == status && self.method == method && *self.route == *route
    }

    fn record(&self, elapsed: Duration) {
        self.requests.increment(1);
        self.duration.record(elapsed.as_secs_f64());
    }

    /// Registers the series of one combination with the current recorder.
    fn register(route: &str, method: &'static str, status: StatusCode) -> Entry {
        Entry {
            route: route.into(),
            method,
            status,
            requests: metrics::counter!(
                "toolgate_http_requests_total",
                "route" => route.to_owned(),
                "method" => method,
                "status" => status.as_str().to_owned()
            ),
            duration: metrics::histogram!(
                "toolgate_http_request_duration_seconds",
                "route" => route.to_owned()
            ),
        }
    }

    /// Registers the bucket of the combinations past [`MAX_ENTRIES`].
    fn register_other() -> Entry {
        Entry {
            route: OTHER.into(),
            method: OTHER,
            status: StatusCode::default(),
            requests: metrics::counter!(
                "toolgate_http_requests_total",
                "route" => OTHER,
                "method" => OTHER,
                "status" => OTHER
            ),
            duration: metrics::histogram!(
                "toolgate_http_request_duration_seconds",
                "route" => OTHER
            ),
        }
    }
}

impl Table {
    /// The entry a request is counted in, if it is registered: its own, or the bucket of
    /// those past the bound once the table is full.
    fn find(&self, route: &str, method: &str, status: StatusCode) -> Option<&Entry> {
        let own = self
            .entries
            .iter()
            .find(|e| e.matches(route, method, status));
        if own.is_some() || self.entries.len() < MAX_ENTRIES {
            own
        } else {
            self.other.as_ref()
        }
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
        let method = method_label(method);
        let recorded = self.entries.with_current(|table| {
            let entry = table.and_then(|table| table.find(route, method, status));
            if let Some(entry) = entry {
                entry.record(elapsed);
            }
            entry.is_some()
        });
        if recorded {
            return;
        }
        // Registered under the table's update, so that a combination is registered once
        // and the table never holds more than the bound (the update may run more than once
        // when requests race; registering a series twice gives the same series).
        self.entries.update(|table| {
            if table.find(route, method, status).is_some() {
                return;
            }
            if table.entries.len() < MAX_ENTRIES {
                table.entries.push(Entry::register(route, method, status));
            } else {
                table.other = Some(Entry::register_other());
            }
        });
        self.entries.with_current(|table| {
            if let Some(entry) = table.and_then(|table| table.find(route, method, status)) {
                entry.record(elapsed);
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
