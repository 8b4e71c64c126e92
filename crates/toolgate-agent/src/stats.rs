//! Usage statistics per tool, kept in a JSON file that survives a restart.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::persist::{self, Loaded};
use crate::{ToolResult, ToolStatus};

/// How many recent durations per tool the percentiles are computed over.
const DURATION_WINDOW: usize = 1_000;

/// The usage of one tool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolUsage {
    /// Calls that reached the tool system for this tool (every status).
    pub calls: u64,
    /// Calls that ended with an output.
    pub successes: u64,
    /// Calls that ended with an error, by error code.
    pub failures: BTreeMap<String, u64>,
    /// Calls that were suspended to wait for a person.
    pub suspensions: u64,
    /// When the tool was first used, in milliseconds since the Unix epoch.
    pub first_used_ms: u64,
    /// When the tool was last used, in milliseconds since the Unix epoch.
    pub last_used_ms: u64,
    /// The mean duration of finished calls (success or error), in milliseconds.
    pub mean_ms: f64,
    /// The median duration over the recent window, in milliseconds.
    pub p50_ms: u64,
    /// The 95th percentile duration over the recent window, in milliseconds.
    pub p95_ms: u64,
    /// Recent durations, oldest first (kept so percentiles survive a restart).
    #[serde(default)]
    pub recent_ms: VecDeque<u64>,
}

impl ToolUsage {
    /// Failures of every code (at most `u64::MAX`).
    pub fn failure_count(&self) -> u64 {
        self.failures
            .values()
            .fold(0, |total, count| total.saturating_add(*count))
    }

    /// Counts one call. The counts come from a file that may have been edited: they stop
    /// at `u64::MAX` rather than overflow (a panic in a debug build, a count back to zero
    /// and a mean divided by zero otherwise), and a window of durations longer than
    /// [`DURATION_WINDOW`] is cut back to it rather than sorted whole at every call.
    fn record(&mut self, status: ToolStatus, code: Option<&str>, duration_ms: u64, now_ms: u64) {
        if self.calls == 0 {
            self.first_used_ms = now_ms;
        }
        self.calls = self.calls.saturating_add(1);
        self.last_used_ms = now_ms;
        match status {
            ToolStatus::Success => self.successes = self.successes.saturating_add(1),
            ToolStatus::Error => {
                let count = self
                    .failures
                    .entry(code.unwrap_or("unknown").to_owned())
                    .or_default();
                *count = count.saturating_add(1);
            }
            ToolStatus::Suspended => {
                self.suspensions = self.suspensions.saturating_add(1);
                return;
            }
        }
        // At least 1: one of the two was just counted, and neither wraps.
        let finished = self.successes.saturating_add(self.failure_count());
        self.mean_ms += (duration_ms as f64 - self.mean_ms) / finished as f64;
        while self.recent_ms.len() >= DURATION_WINDOW {
            self.recent_ms.pop_front();
        }
        self.recent_ms.push_back(duration_ms);
        let mut sorted: Vec<u64> = self.recent_ms.iter().copied().collect();
        sorted.sort_unstable();
        self.p50_ms = percentile(&sorted, 50);
        self.p95_ms = percentile(&sorted, 95);
    }
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Why statistics could not be loaded or saved: the file is already open in another
/// [`UsageStats`] ([`is_in_use`](Self::is_in_use)), or the file system refused it.
#[derive(Debug, thiserror::Error)]
#[error("{}", persist::describe("the usage statistics file", .path, .source, "give each process its own statistics file, or close the other store first"))]
pub struct StatsError {
    /// The file.
    pub path: PathBuf,
    /// What the file system said; of kind
    /// [`ErrorKind::WouldBlock`](std::io::ErrorKind::WouldBlock) when the file is already open in
    /// another [`UsageStats`].
    #[source]
    pub source: std::io::Error,
}

impl StatsError {
    /// Whether the file is already open in another [`UsageStats`], in this process or
    /// another (`source.kind()` is
    /// [`ErrorKind::WouldBlock`](std::io::ErrorKind::WouldBlock)): give each process its own file,
    /// or drop the other statistics first.
    pub fn is_in_use(&self) -> bool {
        persist::in_use(&self.source)
    }
}

/// Usage statistics of every tool, saved to a JSON file.
///
/// Loaded at [`open`](Self::open); saved atomically (write, then rename) by
/// [`save`](Self::save), on an interval by [`autosave`](Self::autosave), and a last time at
/// [`StatsSaver::shutdown`]. A file that cannot be read is moved aside with a warning and
/// statistics start afresh: never a crash, never a silent overwrite.
///
/// One [`UsageStats`] owns one file: [`open`](Self::open) claims it with a lock on
/// `<path>.lock` (created beside it and never removed), held until the statistics are
/// dropped (with every [`Arc`] and [`StatsSaver`] of them). A second one on the same file,
/// in this process or another, is refused with a [`StatsError`] whose
/// [`is_in_use`](StatsError::is_in_use) is true, instead of overwriting the first one's
/// counts. On a file system that cannot lock, they open without the lock, with a warning.
///
/// # Examples
///
/// ```
/// use toolgate_agent::{ToolResult, UsageStats};
/// use serde_json::json;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let stats = UsageStats::open(dir.path().join("stats.json"))?;
/// stats.record(&ToolResult::success("c1", "search", json!([])));
/// stats.save()?;
/// assert!(UsageStats::open(dir.path().join("stats.json")).unwrap_err().is_in_use());
/// drop(stats);
/// assert_eq!(UsageStats::open(dir.path().join("stats.json"))?.tool("search").unwrap().calls, 1);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct UsageStats {
    path: PathBuf,
    /// Held as long as the statistics live: no other [`UsageStats`] opens the file
    /// meanwhile.
    claim: persist::Claim,
    moved_aside: Option<PathBuf>,
    tools: Mutex<BTreeMap<String, ToolUsage>>,
}

impl UsageStats {
    /// Loads the statistics at `path`, or starts empty when there are none (or they were
    /// corrupt and moved aside). The file is claimed before it is read, and stays claimed
    /// until the statistics are dropped.
    ///
    /// # Errors
    ///
    /// [`StatsError`] when another [`UsageStats`] (in this process or another) has the
    /// file open ([`StatsError::is_in_use`]), when the lock file beside it cannot be
    /// created, when the file exists but cannot be read or moved aside, or when the path
    /// is not a regular file (a directory, a pipe, a device).
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, StatsError> {
        let path = path.into();
        let claim = match persist::claim(&path) {
            Ok(claim) => claim,
            Err(source) => return Err(StatsError { path, source }),
        };
        let (tools, moved_aside) = match persist::load(&path) {
            Ok(Loaded::Found(tools)) => (tools, None),
            Ok(Loaded::Missing) => (BTreeMap::new(), None),
            Ok(Loaded::MovedAside(aside)) => (BTreeMap::new(), Some(aside)),
            Err(source) => return Err(StatsError { path, source }),
        };
        Ok(UsageStats {
            path,
            claim,
            moved_aside,
            tools: Mutex::new(tools),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path` names this statistics' file, however it is spelled: through `..`, a
    /// linked directory, or relative to the working directory. A host that reopens
    /// statistics when its configuration changes asks this first: opening the same file
    /// again while these statistics hold it is refused ([`StatsError::is_in_use`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use toolgate_agent::UsageStats;
    ///
    /// let stats = UsageStats::open(dir.path().join("stats.json")).unwrap();
    /// assert!(stats.is_file(&dir.path().join(".").join("stats.json")));
    /// assert!(!stats.is_file(&dir.path().join("other.json")));
    /// ```
    pub fn is_file(&self, path: &Path) -> bool {
        self.claim.covers(&self.path, path)
    }

    /// Where the file was moved when it could not be read at open, if it was.
    pub fn moved_aside(&self) -> Option<&Path> {
        self.moved_aside.as_deref()
    }

    /// Counts one result. A result for a tool the registry does not know
    /// (`unknown_tool`) is not counted: names a model or a caller made up would grow the
    /// statistics, and the file they are saved to, without bound.
    pub fn record(&self, result: &ToolResult) {
        if result.error_code() == Some("unknown_tool") {
            return;
        }
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(result.tool_name.clone())
            .or_default()
            .record(
                result.status,
                result.error_code(),
                result.metadata.duration_ms,
                now_ms,
            );
    }

    /// The usage of one tool.
    pub fn tool(&self, name: &str) -> Option<ToolUsage> {
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// The usage of every tool, by name.
    pub fn snapshot(&self) -> BTreeMap<String, ToolUsage> {
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes the statistics to the file atomically.
    ///
    /// # Errors
    ///
    /// [`StatsError`] when the file cannot be written.
    pub fn save(&self) -> Result<(), StatsError> {
        let snapshot = self.snapshot();
        persist::write_atomic(&self.path, &snapshot).map_err(|source| StatsError {
            path: self.path.clone(),
            source,
        })
    }

    /// Saves every `interval` on a background task until [`StatsSaver::shutdown`], which
    /// saves a last time. A failed save is logged and retried at the next tick.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or when `interval` is zero.
    pub fn autosave(self: &Arc<Self>, interval: Duration) -> StatsSaver {
        let stats = Arc::clone(self);
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {
                        if let Err(e) = stats.save() {
                            tracing::warn!(error = %e, "saving usage statistics failed; will retry");
                        }
                    }
                    _ = &mut stopped => break,
                }
            }
        });
        StatsSaver {
            stats: Arc::clone(self),
            stop: Some(stop),
            task: Some(task),
        }
    }
}

/// The background saver of [`UsageStats::autosave`]. Call [`shutdown`](Self::shutdown) to
/// stop it and save a last time; dropping it stops it without the last save.
#[derive(Debug)]
pub struct StatsSaver {
    stats: Arc<UsageStats>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl StatsSaver {
    /// Stops the interval saves and saves a last time.
    ///
    /// # Errors
    ///
    /// [`StatsError`] when the last save fails.
    pub async fn shutdown(mut self) -> Result<(), StatsError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.stats.save()
    }
}

impl Drop for StatsSaver {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50);
        assert_eq!(percentile(&values, 95), 95);
        assert_eq!(percentile(&[7], 95), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn results_for_tools_nobody_registered_are_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        let stats = UsageStats::open(dir.path().join("stats.json")).unwrap();
        for n in 0..100 {
            let name = format!("made_up_{n}");
            let error = toolgate_core::ToolError::UnknownTool { name: name.clone() };
            stats.record(&ToolResult::error("c1", &name, &error));
        }
        stats.record(&ToolResult::success("c2", "search", serde_json::json!([])));
        assert_eq!(stats.snapshot().keys().collect::<Vec<_>>(), ["search"]);
    }

    #[test]
    fn suspensions_do_not_count_as_durations() {
        let mut usage = ToolUsage::default();
        usage.record(ToolStatus::Success, None, 10, 1);
        usage.record(ToolStatus::Error, Some("timeout"), 30, 2);
        usage.record(ToolStatus::Suspended, None, 999, 3);
        assert_eq!((usage.calls, usage.successes, usage.suspensions), (3, 1, 1));
        assert_eq!(usage.failures["timeout"], 1);
        assert!((usage.mean_ms - 20.0).abs() < 1e-9);
        assert_eq!((usage.first_used_ms, usage.last_used_ms), (1, 3));
    }
}
