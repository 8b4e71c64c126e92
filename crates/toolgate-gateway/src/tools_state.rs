//! The agent layer's thread state for the gateway: every tool is enabled in every thread,
//! and the authorization policy decides who may call what.

use toolgate_agent::{StateError, StateManager, ThreadConfig, async_trait};

/// Every thread gets the same configuration.
pub struct AllTools(ThreadConfig);

impl AllTools {
    /// Every thread with `config`.
    pub fn new(config: ThreadConfig) -> Self {
        AllTools(config)
    }
}

#[async_trait]
impl StateManager for AllTools {
    async fn thread_config(&self, _thread: &str) -> Result<ThreadConfig, StateError> {
        Ok(self.0.clone())
    }
}
