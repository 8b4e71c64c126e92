//! Thread state: which tools a thread may call, and its result size limit.

use std::collections::{BTreeSet, HashMap};
use std::sync::{PoisonError, RwLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The tool configuration of one conversation thread.
///
/// Either every registered tool ([`ThreadConfig::all_tools`], what an
/// [`InMemoryStateManager`] gives a thread nobody configured) or the tools listed in
/// `enabled_tools` ([`ThreadConfig::enabling`]).
///
/// ```
/// use toolgate_agent::ThreadConfig;
///
/// assert!(ThreadConfig::all_tools().is_enabled("anything_registered"));
/// let listed = ThreadConfig::enabling(["search"]);
/// assert!(listed.is_enabled("search") && !listed.is_enabled("delete_account"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadConfig {
    /// Whether the thread may call every registered tool; `enabled_tools` is then not
    /// consulted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_tools: bool,
    /// The tools the thread may call, by name. A tool not listed gets an error result
    /// with code `tool_disabled` (unless `all_tools` is set).
    #[serde(default)]
    pub enabled_tools: BTreeSet<String>,
    /// The result size limit for the thread's calls, in characters (a call's own limit
    /// wins over it; it wins over the tool system's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_max_chars: Option<usize>,
}

impl ThreadConfig {
    /// A configuration that enables these tools.
    pub fn enabling<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ThreadConfig {
            all_tools: false,
            enabled_tools: tools.into_iter().map(Into::into).collect(),
            result_max_chars: None,
        }
    }

    /// A configuration that enables every tool registered in the tool system.
    pub fn all_tools() -> Self {
        ThreadConfig {
            all_tools: true,
            ..ThreadConfig::default()
        }
    }

    /// The same configuration with a result size limit.
    #[must_use]
    pub fn with_result_max_chars(mut self, max_chars: usize) -> Self {
        self.result_max_chars = Some(max_chars);
        self
    }

    /// Whether the thread may call `tool`.
    pub fn is_enabled(&self, tool: &str) -> bool {
        self.all_tools || self.enabled_tools.contains(tool)
    }
}

/// Why a thread's configuration could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Nothing is configured for this thread, and the store has no default.
    #[error(
        "thread `{thread}` has no tool configuration: configure it (enable its tools) before running tools in it, or give the state manager a default configuration"
    )]
    UnknownThread {
        /// The thread id.
        thread: String,
    },
    /// The backing store failed.
    #[error("the thread state store failed: {0}")]
    Store(String),
}

/// Where thread configurations live. The tool system reads a thread's configuration
/// once per batch; when that fails, every call of the batch gets an error result saying so.
///
/// Object safe: the tool system holds an `Arc<dyn StateManager>`. Write `thread_config`
/// as an `async fn` under [`#[async_trait]`](crate::async_trait), re-exported here so that
/// an implementer needs no dependency of their own.
///
/// # Examples
///
/// Configurations derived from the thread id, with no table to keep: the support desk's
/// threads may search the knowledge base, and no other thread is known.
///
/// ```
/// use std::sync::Arc;
/// use toolgate_agent::{async_trait, StateError, StateManager, ThreadConfig};
///
/// struct SupportDesk;
///
/// #[async_trait]
/// impl StateManager for SupportDesk {
///     async fn thread_config(&self, thread: &str) -> Result<ThreadConfig, StateError> {
///         if thread.starts_with("support-") {
///             Ok(ThreadConfig::enabling(["search_kb"]).with_result_max_chars(8_000))
///         } else {
///             Err(StateError::UnknownThread { thread: thread.to_owned() })
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), StateError> {
/// let state: Arc<dyn StateManager> = Arc::new(SupportDesk);
/// assert!(state.thread_config("support-42").await?.is_enabled("search_kb"));
/// let unknown = state.thread_config("sales-7").await;
/// assert!(matches!(unknown, Err(StateError::UnknownThread { .. })));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait StateManager: Send + Sync + 'static {
    /// The configuration of `thread`.
    ///
    /// # Errors
    ///
    /// [`StateError::UnknownThread`] when nothing is configured for it,
    /// [`StateError::Store`] when the store fails.
    async fn thread_config(&self, thread: &str) -> Result<ThreadConfig, StateError>;
}

/// Thread configurations in memory.
///
/// A thread nobody configured gets the default configuration: every registered tool
/// ([`ThreadConfig::all_tools`]) unless set otherwise with
/// [`default_config`](Self::default_config); [`refusing_unknown_threads`](Self::refusing_unknown_threads)
/// makes such a thread's calls fail with `thread_config_unavailable` instead.
///
/// ```
/// use toolgate_agent::{InMemoryStateManager, ThreadConfig};
///
/// let state = InMemoryStateManager::new();
/// state.set_config("thread-1", ThreadConfig::enabling(["search", "calculator"]));
/// state.enable_tool("thread-1", "weather");
/// assert!(state.config("thread-1").unwrap().is_enabled("weather"));
/// assert!(!state.config("thread-1").unwrap().is_enabled("delete_account"));
/// // Not configured: every tool.
/// assert!(state.config("thread-2").is_none());
/// ```
#[derive(Debug)]
pub struct InMemoryStateManager {
    threads: RwLock<HashMap<String, ThreadConfig>>,
    default: Option<ThreadConfig>,
}

impl Default for InMemoryStateManager {
    fn default() -> Self {
        InMemoryStateManager {
            threads: RwLock::new(HashMap::new()),
            default: Some(ThreadConfig::all_tools()),
        }
    }
}

impl InMemoryStateManager {
    /// No thread configured; a thread nobody configured may call every registered tool.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store, giving `config` to every thread nobody configured.
    #[must_use]
    pub fn default_config(mut self, config: ThreadConfig) -> Self {
        self.default = Some(config);
        self
    }

    /// The same store with no default: the calls of a thread nobody configured get error
    /// results with code `thread_config_unavailable` until it is configured.
    #[must_use]
    pub fn refusing_unknown_threads(mut self) -> Self {
        self.default = None;
        self
    }

    /// Sets a thread's configuration, replacing any earlier one.
    pub fn set_config(&self, thread: impl Into<String>, config: ThreadConfig) {
        self.threads
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(thread.into(), config);
    }

    /// Enables a tool for a thread. A thread nobody configured gets a list of just this
    /// tool, which replaces the default configuration for it.
    pub fn enable_tool(&self, thread: &str, tool: impl Into<String>) {
        self.threads
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(thread.to_owned())
            .or_default()
            .enabled_tools
            .insert(tool.into());
    }

    /// Disables a tool for a thread. Returns whether it was enabled by name; a thread that
    /// may call every tool ([`ThreadConfig::all_tools`]) or nobody configured is left as
    /// it is (give it a list with [`set_config`](Self::set_config) first).
    pub fn disable_tool(&self, thread: &str, tool: &str) -> bool {
        self.threads
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(thread)
            .is_some_and(|c| c.enabled_tools.remove(tool))
    }

    /// A copy of a thread's own configuration (`None` for a thread nobody configured,
    /// which gets the default).
    pub fn config(&self, thread: &str) -> Option<ThreadConfig> {
        self.threads
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(thread)
            .cloned()
    }

    /// Forgets a thread. Returns whether it was configured.
    pub fn remove_thread(&self, thread: &str) -> bool {
        self.threads
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(thread)
            .is_some()
    }
}

#[async_trait]
impl StateManager for InMemoryStateManager {
    async fn thread_config(&self, thread: &str) -> Result<ThreadConfig, StateError> {
        self.config(thread)
            .or_else(|| self.default.clone())
            .ok_or_else(|| StateError::UnknownThread {
                thread: thread.to_owned(),
            })
    }
}
