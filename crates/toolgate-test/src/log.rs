//! [`StageLog`]: the shared record of which hook ran at which stage, in order.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use toolgate_core::Stage;

/// One line of a [`StageLog`]: a stage and the label of the hook that ran at it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The stage.
    pub stage: Stage,
    /// The label of the hook (see [`RecordingHook::new`](crate::RecordingHook::new)).
    pub hook: Arc<str>,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.hook, self.stage)
    }
}

/// A log of stage calls shared by every hook that records into it, in the exact order the
/// pipeline made them. Cheap to clone: clones share the same log.
///
/// # Examples
///
/// ```
/// use toolgate_core::Stage;
/// use toolgate_test::StageLog;
///
/// let log = StageLog::new();
/// log.record(Stage::WillAuthorize, "auth");
/// log.record(Stage::WillFinalizeInvoke, "auth");
/// assert_eq!(log.stages(), [Stage::WillAuthorize, Stage::WillFinalizeInvoke]);
/// assert_eq!(log.count(Stage::WillAuthorize), 1);
/// ```
#[derive(Clone, Default)]
pub struct StageLog {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: Mutex<Vec<Entry>>,
    changed: Notify,
}

impl StageLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an entry. Recording hooks call this; a hand-written test hook may too.
    pub fn record(&self, stage: Stage, hook: impl Into<Arc<str>>) {
        let entry = Entry {
            stage,
            hook: hook.into(),
        };
        self.lock().push(entry);
        self.inner.changed.notify_waiters();
    }

    /// Every entry so far, in order.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().clone()
    }

    /// The stages of every entry so far, in order.
    pub fn stages(&self) -> Vec<Stage> {
        self.lock().iter().map(|e| e.stage).collect()
    }

    /// The stages at which the hook labelled `hook` ran, in order.
    ///
    /// ```
    /// use toolgate_core::Stage;
    /// use toolgate_test::StageLog;
    ///
    /// let log = StageLog::new();
    /// log.record(Stage::WillAuthorize, "a");
    /// log.record(Stage::WillAuthorize, "b");
    /// assert_eq!(log.stages_of("b"), [Stage::WillAuthorize]);
    /// ```
    pub fn stages_of(&self, hook: &str) -> Vec<Stage> {
        self.lock()
            .iter()
            .filter(|e| &*e.hook == hook)
            .map(|e| e.stage)
            .collect()
    }

    /// The labels of the hooks that ran at `stage`, in the order they ran.
    ///
    /// ```
    /// use toolgate_core::Stage;
    /// use toolgate_test::StageLog;
    ///
    /// let log = StageLog::new();
    /// log.record(Stage::WillAuthorize, "high");
    /// log.record(Stage::WillAuthorize, "low");
    /// assert_eq!(log.hooks_at(Stage::WillAuthorize), ["high", "low"]);
    /// ```
    pub fn hooks_at(&self, stage: Stage) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|e| e.stage == stage)
            .map(|e| e.hook.to_string())
            .collect()
    }

    /// How many times `stage` was recorded (by any hook).
    pub fn count(&self, stage: Stage) -> usize {
        self.lock().iter().filter(|e| e.stage == stage).count()
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets every entry (to reuse a pipeline for a second call).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Waits until `stage` has been recorded at least once, or `timeout` passes. Returns
    /// whether it was recorded.
    ///
    /// This is how a test waits for the part of an invocation that runs after its future
    /// was dropped (the pipeline finishes the release and end stages on a spawned task).
    /// Under a paused tokio clock the timeout costs no real time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolgate_core::Stage;
    /// use toolgate_test::StageLog;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let log = StageLog::new();
    /// let writer = log.clone();
    /// tokio::spawn(async move { writer.record(Stage::WillFinalizeInvoke, "h") });
    /// assert!(log.wait_for(Stage::WillFinalizeInvoke, Duration::from_secs(1)).await);
    /// # }
    /// ```
    pub async fn wait_for(&self, stage: Stage, timeout: Duration) -> bool {
        let seen = async {
            loop {
                let changed = self.inner.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.lock().iter().any(|e| e.stage == stage) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, seen).await.is_ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for StageLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.lock().iter().map(ToString::to_string))
            .finish()
    }
}
