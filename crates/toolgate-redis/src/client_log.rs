//! [`ClientLogLimit`]: the Redis client's own log lines, held to one per node and interval.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter};

/// The target of the summary lines.
const SUMMARY_TARGET: &str = "toolgate_redis::client_log";

/// Past this many nodes, lines about further ones share one window: a bound on the table
/// that no quantity of addresses in log lines can grow.
const MAX_NODES: usize = 64;

/// The key of lines that name no node (a slot refresh, a reconnect to the seeds), and of
/// nodes past [`MAX_NODES`].
const NO_NODE: &str = "the cluster";

/// A per-layer [`Filter`] that holds the Redis client's log lines to the first about each
/// node per interval, and counts the rest; [`summarize`](Self::summarize) then logs one
/// line per node with the count.
///
/// redis-rs logs through the `log` crate (which `tracing-subscriber` bridges into `tracing`
/// by default), under targets `redis::…`. While a primary fails over it logs a line for
/// nearly every request it re-routes — about a thousand warnings in two seconds on each
/// replica — and the lines that matter scroll away. Lines of other targets, and the
/// client's `debug` and `trace` lines (the level filter decides those), pass untouched.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tracing_subscriber::layer::SubscriberExt;
/// use tracing_subscriber::util::SubscriberInitExt;
/// use tracing_subscriber::{EnvFilter, Layer};
/// use toolgate_redis::ClientLogLimit;
///
/// let limit = ClientLogLimit::new(Duration::from_secs(10));
/// let subscriber = tracing_subscriber::registry().with(
///     tracing_subscriber::fmt::layer()
///         .with_filter(limit.clone())
///         .with_filter(EnvFilter::new("info")),
/// );
/// # let _ = subscriber;
/// // In a tokio runtime: one summary line per node every 10 s.
/// // let summaries = limit.summarize_every_interval();
/// ```
#[derive(Clone)]
pub struct ClientLogLimit {
    inner: Arc<Inner>,
}

struct Inner {
    interval: Duration,
    nodes: Mutex<HashMap<String, Window>>,
}

/// One node's current interval.
struct Window {
    opened: Instant,
    /// Lines held since the last summary.
    held: u64,
}

impl ClientLogLimit {
    /// Lets through the first line about each node every `interval`.
    pub fn new(interval: Duration) -> Self {
        ClientLogLimit {
            inner: Arc::new(Inner {
                interval,
                nodes: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.inner.interval
    }

    /// Logs one warning per node about which lines were held since the last summary —
    /// "the Redis client logged 412 more lines about 10.0.0.7:7000 …" — and forgets nodes
    /// that have been quiet for an interval. Returns what it reported, by node.
    pub fn summarize(&self) -> Vec<(String, u64)> {
        let held: Vec<(String, u64)> = {
            let mut nodes = self.lock();
            let interval = self.inner.interval;
            nodes.retain(|_, window| window.held > 0 || window.opened.elapsed() < interval);
            nodes
                .iter_mut()
                .filter(|(_, window)| window.held > 0)
                .map(|(node, window)| (node.clone(), std::mem::take(&mut window.held)))
                .collect()
        };
        for (node, lines) in &held {
            tracing::warn!(
                target: SUMMARY_TARGET,
                node = %node,
                held = lines,
                "the Redis client logged {lines} more lines about {node} (the first of each {:?} is shown)",
                self.inner.interval
            );
        }
        held
    }

    /// Runs [`summarize`](Self::summarize) every interval on the current tokio runtime,
    /// until the returned task is aborted.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn summarize_every_interval(&self) -> tokio::task::JoinHandle<()> {
        let limit = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(limit.inner.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                limit.summarize();
            }
        })
    }

    /// Whether a line about `node` is shown now (the first of its interval) or held.
    fn admit(&self, node: &str) -> bool {
        let mut nodes = self.lock();
        let key = if nodes.contains_key(node) || nodes.len() < MAX_NODES {
            node
        } else {
            NO_NODE
        };
        let now = Instant::now();
        match nodes.get_mut(key) {
            Some(window) if now.duration_since(window.opened) < self.inner.interval => {
                window.held += 1;
                false
            }
            Some(window) => {
                window.opened = now;
                true
            }
            None => {
                nodes.insert(
                    key.to_owned(),
                    Window {
                        opened: now,
                        held: 0,
                    },
                );
                true
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Window>> {
        // A panic elsewhere while the table was held leaves counts, nothing inconsistent.
        self.inner
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for ClientLogLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientLogLimit")
            .field("interval", &self.inner.interval)
            .finish_non_exhaustive()
    }
}

impl<S: Subscriber> Filter<S> for ClientLogLimit {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        // Decided per line, by its text.
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        let metadata = event.metadata();
        // `debug` and `trace` are more verbose than `info`: the level filter's business.
        if *metadata.level() > Level::INFO {
            return true;
        }
        // Lines bridged from `log` carry their real target in a field.
        if metadata.target() != "log" && !is_client(metadata.target()) {
            return true;
        }
        let mut line = Line::default();
        event.record(&mut line);
        let target = line.target.as_deref().unwrap_or(metadata.target());
        if !is_client(target) {
            return true;
        }
        self.admit(node_in(&line.message).unwrap_or(NO_NODE))
    }
}

fn is_client(target: &str) -> bool {
    target == "redis" || target.starts_with("redis::")
}

#[derive(Default)]
struct Line {
    message: String,
    target: Option<String>,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "log.target" => self.target = Some(value.to_owned()),
            "message" => self.message = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

/// The first `host:port` in `message` (the client names nodes that way), if any.
fn node_in(message: &str) -> Option<&str> {
    message
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '`' | '"' | '(' | ')'))
        .find(|word| {
            let Some((host, port)) = word.rsplit_once(':') else {
                return false;
            };
            let host_ok = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
            host_ok && port.parse::<u16>().is_ok_and(|port| port > 0)
        })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::{ClientLogLimit, node_in};

    /// What the subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_flood_of_client_lines_shows_one_per_node_and_a_summary_with_the_count() {
        let written = Written::default();
        let limit = ClientLogLimit::new(Duration::from_secs(3600));
        let sink = written.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || sink.clone())
                .with_filter(limit.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..500 {
                tracing::warn!(target: "redis::cluster_async", "Failed to connect to node: 10.0.0.1:7000, due to: refused");
                tracing::warn!(target: "redis::cluster_async", "connection to 10.0.0.2:7000 lost; repairing in background");
                tracing::warn!(target: "redis::cluster_async", "async cluster client recovery: beginning slot refresh");
                tracing::warn!(target: "toolgate_redis::link", "Redis is unavailable");
            }
            let mut held = limit.summarize();
            held.sort();
            assert_eq!(
                held,
                [
                    ("10.0.0.1:7000".to_owned(), 499),
                    ("10.0.0.2:7000".to_owned(), 499),
                    ("the cluster".to_owned(), 499)
                ]
            );
            assert!(
                limit.summarize().is_empty(),
                "each held line is reported once"
            );
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        assert_eq!(count("Failed to connect to node: 10.0.0.1:7000"), 1);
        assert_eq!(count("connection to 10.0.0.2:7000 lost"), 1);
        assert_eq!(count("beginning slot refresh"), 1);
        assert_eq!(
            count("Redis is unavailable"),
            500,
            "other targets pass untouched"
        );
        assert_eq!(
            count("the Redis client logged 499 more lines about 10.0.0.1:7000"),
            1
        );
        assert_eq!(count("more lines about the cluster"), 1);
    }

    #[test]
    fn the_node_is_the_first_host_and_port_of_the_line() {
        assert_eq!(
            node_in("Failed to connect to node: 127.0.0.1:7001, due to: refused"),
            Some("127.0.0.1:7001")
        );
        assert_eq!(
            node_in("ClusterConnInner: connection to redis-3.internal:6379 lost; repairing"),
            Some("redis-3.internal:6379")
        );
        assert_eq!(node_in("connection to [::1]:7002 lost"), Some("[::1]:7002"));
        assert_eq!(
            node_in("async cluster client recovery: beginning slot refresh"),
            None
        );
    }
}
