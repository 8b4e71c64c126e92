//! The agent layer's thread state for the gateway: every tool is enabled in every thread,
//! and the authorization policy decides who may call what.

use futures::future::BoxFuture;
use toolgate_agent::{StateError, StateManager, ThreadConfig};

/// Every thread gets the same configuration.
pub struct AllTools(ThreadConfig);

impl AllTools {
    /// Every thread with `config`.
    pub fn new(config: ThreadConfig) -> Self {
        AllTools(config)
    }
}

impl StateManager for AllTools {
    fn thread_config<'a>(
        &'a self,
        _thread: &'a str,
    ) -> BoxFuture<'a, Result<ThreadConfig, StateError>> {
        Box::pin(std::future::ready(Ok(self.0.clone())))
    }
}
