//! The [`FeatureFlags`] hook at `will_check_feature_flags`.

use std::sync::Arc;

use toolgate_core::hook::HookFuture;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, ToolError, ToolInvokeContext, hook};

use super::FlagProvider;
use crate::quota::OnBackendError;

/// Switches tools off through a [`FlagProvider`].
///
/// Each tool is gated by the flags that apply to it: its own flag (named
/// `<prefix><tool name>`, prefix `tool.` by default) and the flag of every tag mapped with
/// [`tag`](FeatureFlagsBuilder::tag) or tool mapped with [`tool`](FeatureFlagsBuilder::tool).
/// A flag that is off stops the call: code `feature_disabled`, HTTP 403. An unset flag
/// counts as [`when_unset`](FeatureFlagsBuilder::when_unset) (on by default: flags are kill
/// switches). A provider error refuses the call (fail closed, code
/// `feature_flags_unavailable`, HTTP 503) unless set to fail open.
///
/// # Examples
///
/// ```
/// use toolgate_hooks::feature_flags::{FeatureFlags, InMemoryFlags};
///
/// let flags = InMemoryFlags::new();
/// let hook = FeatureFlags::builder(flags.clone()).tag("beta", "beta-tools").build();
/// flags.set("beta-tools", false); // every tool tagged `beta` is now off
/// flags.set("tool.search", false); // and so is `search`
/// # let _ = hook;
/// ```
#[derive(Clone)]
pub struct FeatureFlags {
    provider: Arc<dyn FlagProvider>,
    prefix: Option<String>,
    tools: Vec<(String, String)>,
    tags: Vec<(String, String)>,
    when_unset: bool,
    on_error: OnBackendError,
}

/// Builds a [`FeatureFlags`] hook.
pub struct FeatureFlagsBuilder {
    inner: FeatureFlags,
}

impl FeatureFlagsBuilder {
    /// Gates `tool` by `flag` too.
    #[must_use]
    pub fn tool(mut self, tool: impl Into<String>, flag: impl Into<String>) -> Self {
        self.inner.tools.push((tool.into(), flag.into()));
        self
    }

    /// Gates every tool tagged `tag` by `flag`.
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>, flag: impl Into<String>) -> Self {
        self.inner.tags.push((tag.into(), flag.into()));
        self
    }

    /// The prefix of each tool's own flag (default `tool.`); `None` turns per-tool flags
    /// off, leaving only the mapped ones.
    #[must_use]
    pub fn tool_flag_prefix(mut self, prefix: Option<String>) -> Self {
        self.inner.prefix = prefix;
        self
    }

    /// What an unset flag counts as (default: on).
    #[must_use]
    pub fn when_unset(mut self, on: bool) -> Self {
        self.inner.when_unset = on;
        self
    }

    /// What a provider failure means (default: fail closed).
    #[must_use]
    pub fn on_provider_error(mut self, mode: OnBackendError) -> Self {
        self.inner.on_error = mode;
        self
    }

    /// The hook.
    pub fn build(self) -> FeatureFlags {
        self.inner
    }
}

impl FeatureFlags {
    /// A builder over `provider`, with per-tool flags `tool.<name>`.
    pub fn builder(provider: impl FlagProvider) -> FeatureFlagsBuilder {
        FeatureFlagsBuilder {
            inner: FeatureFlags {
                provider: Arc::new(provider),
                prefix: Some("tool.".to_owned()),
                tools: Vec::new(),
                tags: Vec::new(),
                when_unset: true,
                on_error: OnBackendError::FailClosed,
            },
        }
    }

    /// The flags that gate `tool`, in the order they are checked.
    pub fn flags_for(&self, tool: &ToolDefinition) -> Vec<String> {
        let own = self.prefix.as_ref().map(|p| format!("{p}{}", tool.name));
        let mapped_tools = self
            .tools
            .iter()
            .filter(|(t, _)| *t == tool.name)
            .map(|(_, f)| f.clone());
        let mapped_tags = self
            .tags
            .iter()
            .filter(|(t, _)| tool.has_tag(t))
            .map(|(_, f)| f.clone());
        own.into_iter()
            .chain(mapped_tools)
            .chain(mapped_tags)
            .collect()
    }
}

#[hook]
impl Hook for FeatureFlags {
    fn name(&self) -> &str {
        "feature_flags"
    }

    // The trait's form: ready at once for a tool without flags, boxed only to ask the provider.
    fn will_check_feature_flags<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let flags = self.flags_for(ctx.tool());
        if flags.is_empty() {
            return HookFuture::ok();
        }
        HookFuture::new(async move {
            for flag in &flags {
                match self.provider.is_enabled(flag, ctx.user()).await {
                    Ok(value) if value.unwrap_or(self.when_unset) => {}
                    Ok(_) => {
                        return ctx.abort(
                            format!(
                                "`{}` is switched off (feature flag `{flag}`): use another tool",
                                ctx.tool_name()
                            ),
                            "feature_disabled",
                            403,
                        );
                    }
                    Err(error) => match self.on_error {
                        OnBackendError::FailOpen => {
                            tracing::warn!(%flag, %error, "flag provider failed; flag taken as on (fail open)");
                        }
                        OnBackendError::FailClosed => {
                            tracing::error!(%flag, %error, "flag provider failed; call refused (fail closed)");
                            return Err(ToolError::abort(
                                format!("whether `{}` is switched on could not be checked, so the call was not run: try again later", ctx.tool_name()),
                                "feature_flags_unavailable",
                                503,
                            )
                            .into());
                        }
                    },
                }
            }
            Ok(())
        })
    }
}
