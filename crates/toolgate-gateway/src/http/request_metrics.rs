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

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::{Method, StatusCode};
use metrics::{Counter, Histogram, Recorder};

/// The metric handles of the requests seen so far.
#[derive(Default)]
pub(super) struct RequestMetrics {
    handles: ArcSwap<Handles>,
}

/// The handles registered with one recorder.
#[derive(Default)]
struct Handles {
    /// The address of the recorder they were registered with: another recorder (a test's
    /// local one, or a global one installed after the first request) gets its own.
    recorder: usize,
    entries: Vec<Entry>,
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

/// The address of the recorder metrics go to on this thread now.
fn current_recorder() -> usize {
    metrics::with_recorder(|recorder| {
        std::ptr::from_ref::<dyn Recorder>(recorder)
            .cast::<()>()
            .addr()
    })
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
        let recorder = current_recorder();
        {
            let handles = self.handles.load();
            if handles.recorder == recorder
                && let Some(entry) = handles
                    .entries
                    .iter()
                    .find(|e| e.matches(route, method, status))
            {
                entry.record(elapsed);
                return;
            }
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
        self.handles.rcu(|handles| {
            let mut entries = if handles.recorder == recorder {
                handles.entries.clone()
            } else {
                Vec::new()
            };
            if !entries.iter().any(|e| e.matches(route, method, status)) {
                entries.push(entry.clone());
            }
            Arc::new(Handles { recorder, entries })
        });
    }
}
