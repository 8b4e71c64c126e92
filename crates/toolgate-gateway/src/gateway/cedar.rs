//! Loading the Cedar policies of `policies.cedar`: read, measured, parsed and validated on
//! a thread of their own, so that a large policy set never holds the runtime (calls and
//! health checks are served while a reload loads one), and with a stack on which the
//! deepest expression let through can never overflow.

use std::sync::Arc;

use toolgate_core::registry::ToolRegistry;
use toolgate_core::tool::ToolDefinition;
use toolgate_hooks::policy::{CedarPolicies, PolicySource};

use super::GatewayError;
use crate::config::Config;

/// The stack the policies are loaded on: Cedar's parser recurses once per level of an
/// expression, and the levels are bounded ([`toolgate_hooks::policy::MAX_DEPTH`]), so this
/// is many times what the deepest text needs, in a debug build too. Only what is used of it
/// is ever backed by memory.
const LOAD_STACK_BYTES: usize = 64 << 20;

/// The Cedar policies of `policies.cedar`, loaded for the tools of `registry`, and the
/// configuration generation: that of the `policies:` section, with the policy files'
/// text folded in, so that approvals for a retry are bound to the policies as they were.
pub(super) async fn cedar_policies(
    config: &Config,
    registry: &ToolRegistry,
) -> Result<(Option<Arc<CedarPolicies>>, String), GatewayError> {
    let Some(cedar) = &config.policies.cedar else {
        return Ok((None, config.generation.clone()));
    };
    let files = cedar.files.clone();
    let tools: Vec<ToolDefinition> = registry.definitions().cloned().collect();
    let generation = config.generation.clone();
    // The thread logs (a policy warning) where the caller would.
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let (send, receive) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("cedar-load".to_owned())
        .stack_size(LOAD_STACK_BYTES)
        .spawn(move || {
            let loaded =
                tracing::dispatcher::with_default(&dispatch, || load(&files, &tools, &generation));
            // The reload that asked may have been given up: then nobody wants them.
            let _ = send.send(loaded);
        })
        .map_err(|e| {
            GatewayError::Io(format!(
                "policies.cedar: no thread could be started to load the policies ({e}); try again"
            ))
        })?;
    let (policies, generation) = receive.await.map_err(|_| {
        GatewayError::Pipeline("loading the Cedar policies stopped half way".to_owned())
    })??;
    Ok((Some(Arc::new(policies)), generation))
}

/// The policies of `files` for `tools`, and the generation with their text folded in.
fn load(
    files: &[String],
    tools: &[ToolDefinition],
    generation: &str,
) -> Result<(CedarPolicies, String), GatewayError> {
    let mut builder = CedarPolicies::builder()
        .action_group("prompt", toolgate_mcp::PROMPT_TAG)
        .action_group("resources", toolgate_mcp::RESOURCES_TAG)
        .completion_requests(
            "complete",
            [toolgate_mcp::PROMPT_TAG, toolgate_mcp::RESOURCES_TAG],
        );
    let mut texts = Vec::new();
    for file in files {
        let source = PolicySource::file(file)?;
        texts.push(serde_json::json!([source.name, source.text]));
        builder = builder.source(source);
    }
    let policies = builder.build(tools)?;
    let generation = toolgate_core::approval::digest(&serde_json::json!([generation, texts]));
    Ok((policies, generation))
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A log whose first line waits until the runtime has served something else: the
    /// loader's warning holds the loader until then.
    struct HeldLog(Arc<std::sync::Mutex<mpsc::Receiver<()>>>);

    impl std::io::Write for HeldLog {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // Only a bound for the failure: a loader on the runtime's thread never sees
            // the go-ahead, and the test fails here rather than hanging.
            let served = self.0.lock().unwrap().recv_timeout(Duration::from_secs(30));
            assert!(
                served.is_ok(),
                "the runtime served nothing while the policies loaded"
            );
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_runtime_serves_other_tasks_while_the_policies_load() {
        let dir = tempfile::tempdir().unwrap();
        // No policy: the loader warns, and the warning waits for the runtime.
        let file = dir.path().join("empty.cedar");
        std::fs::write(&file, "").unwrap();
        let config = crate::config::parse(&format!(
            "tools:\n  builtin: [echo]\npolicies:\n  cedar:\n    files: [{}]\n",
            file.display()
        ))
        .expect("the configuration");
        let (served, wait) = mpsc::channel();
        let wait = Arc::new(std::sync::Mutex::new(wait));
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || HeldLog(wait.clone()))
            .finish();
        let _log = tracing::subscriber::set_default(subscriber);
        // One thread: a load on it would hold every other task of the runtime.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (policies, _) = runtime.block_on(async {
            let registry = ToolRegistry::new();
            let other = tokio::spawn(async move {
                // Another task of the runtime (a call, a health check) is served.
                served.send(()).unwrap();
            });
            let loaded = cedar_policies(&config, &registry).await.expect("loaded");
            other.await.unwrap();
            loaded
        });
        assert!(policies.is_some());
    }
}
