//! The [`SecretInjection`] hook and its builder.

use std::collections::HashMap;
use std::sync::Arc;

use toolgate_core::hook::{HookFuture, Interest};
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::SecretSource;
use super::scrub::Scrubber;

/// The tag prefix by which a tool declares a secret it needs: a tool tagged
/// `secret:github-token` gets the secret `github-token`.
pub const SECRET_TAG_PREFIX: &str = "secret:";

/// The priority of [`SecretInjection`]: above [redaction](crate::redaction) and the result
/// cache, so at `will_write_cache` secrets are scrubbed before anything else sees the
/// output.
pub const SECRET_PRIORITY: i32 = 200;

/// Injects the secrets a tool declares into the context's secret slot at
/// `will_inject_secrets`, and scrubs their values (raw, URL-encoded or escaped in any ASCII
/// case, their first half too; base64 exactly) from the output at `will_write_cache` and `will_redact_output`, and from the error at
/// `on_error`. See the [module docs](super).
pub struct SecretInjection {
    sources: Vec<Arc<dyn SecretSource>>,
    per_tool: HashMap<String, Vec<String>>,
}

/// Builds a [`SecretInjection`]. Sources are asked in the order they are added.
#[derive(Default)]
pub struct SecretInjectionBuilder {
    sources: Vec<Arc<dyn SecretSource>>,
    per_tool: HashMap<String, Vec<String>>,
}

impl SecretInjectionBuilder {
    /// Adds a source (asked after those added before it).
    #[must_use]
    pub fn source(mut self, source: impl SecretSource) -> Self {
        self.sources.push(Arc::new(source));
        self
    }

    /// Declares secrets a tool needs (in addition to its `secret:` tags).
    #[must_use]
    pub fn tool<I, S>(mut self, tool: impl Into<String>, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.per_tool
            .entry(tool.into())
            .or_default()
            .extend(secrets.into_iter().map(Into::into));
        self
    }

    /// The hook.
    pub fn build(self) -> SecretInjection {
        SecretInjection {
            sources: self.sources,
            per_tool: self.per_tool,
        }
    }
}

impl SecretInjection {
    /// A builder.
    pub fn builder() -> SecretInjectionBuilder {
        SecretInjectionBuilder::default()
    }

    /// The secrets `ctx`'s tool declares, by its tags and by this hook's configuration.
    pub fn declared(&self, ctx: &ToolInvokeContext) -> Vec<String> {
        self.declared_by(ctx.tool())
    }

    /// The secrets `tool` declares, by its tags and by this hook's configuration.
    fn declared_by(&self, tool: &ToolDefinition) -> Vec<String> {
        let mut names: Vec<String> = tool
            .tags
            .iter()
            .filter_map(|t| t.strip_prefix(SECRET_TAG_PREFIX))
            .map(str::to_owned)
            .collect();
        if let Some(more) = self.per_tool.get(&tool.name) {
            names.extend(more.iter().cloned());
        }
        names.sort();
        names.dedup();
        names
    }

    fn scrub_output(ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.secrets().is_empty() {
            return Ok(());
        }
        let scrubber = Scrubber::for_slot(ctx.secrets());
        if let Some(output) = ctx.output() {
            let mut output = output.clone();
            if scrubber.scrub_value(&mut output) > 0 {
                tracing::warn!("the output contained an injected secret; it was scrubbed");
                ctx.set_output(output);
            }
        }
        Ok(())
    }
}

#[hook]
impl Hook for SecretInjection {
    fn name(&self) -> &str {
        "secret_injection"
    }

    fn priority(&self) -> i32 {
        SECRET_PRIORITY
    }

    /// In the plan of a tool that declares a secret only: no other tool's call is given a
    /// secret, so none has one to scrub from its output or error.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(!self.declared_by(tool).is_empty())
    }

    // The trait's form: ready at once for a tool that declares no secret, boxed only to fetch.
    fn will_inject_secrets<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let names = self.declared(ctx);
        if names.is_empty() {
            return HookFuture::ok();
        }
        HookFuture::new(async move {
            'names: for name in names {
                for source in &self.sources {
                    match source.fetch(&name).await {
                        Ok(Some(secret)) => {
                            ctx.secrets_mut().insert(name, secret);
                            continue 'names;
                        }
                        Ok(None) => {}
                        Err(e) => return Err(ToolError::internal(e.to_string()).into()),
                    }
                }
                return Err(ToolError::abort(
                    format!("secret `{name}` needed by tool `{}` is not available: configure it in one of the secret sources", ctx.tool_name()),
                    "missing_secret",
                    500,
                )
                .into());
            }
            Ok(())
        })
    }

    fn will_write_cache(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        Self::scrub_output(ctx)
    }

    fn will_redact_output(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        Self::scrub_output(ctx)
    }

    fn on_error(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.secrets().is_empty() {
            return Ok(());
        }
        let scrubber = Scrubber::for_slot(ctx.secrets());
        if let Some(error) = ctx.error_mut() {
            scrubber.scrub_error(error);
        }
        Ok(())
    }
}
