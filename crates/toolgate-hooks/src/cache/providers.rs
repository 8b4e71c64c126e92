//! What the cache does with the per-call providers a tool reads: a result that depends on
//! values of one request or one session is not another's to reuse, so it is stored only
//! under a key that holds those values, or when its owner says it does not depend on them.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};
use toolgate_core::ToolInvokeContext;
use toolgate_core::external::TypeMapKey;
use toolgate_core::provider::ProviderRequirement;

/// Writes the value of one provider into the key, from a call's context.
type KeyValue = Arc<dyn Fn(&ToolInvokeContext) -> Value + Send + Sync>;

/// The cache's rules for per-call providers.
#[derive(Clone, Default)]
pub(super) struct ProviderRules {
    /// Providers whose values are part of every key, by key name.
    in_key: Vec<(ProviderRequirement, KeyValue)>,
    /// Providers the owner declared results independent of.
    independent: Vec<ProviderRequirement>,
}

impl ProviderRules {
    pub fn key_includes<K>(&mut self)
    where
        K: TypeMapKey,
        K::Value: Serialize,
    {
        let requirement = ProviderRequirement::of::<K>();
        let value: KeyValue = Arc::new(|ctx: &ToolInvokeContext| {
            ctx.try_get::<K>()
                .and_then(|v| serde_json::to_value(&*v).ok())
                .unwrap_or(Value::Null)
        });
        self.in_key.retain(|(r, _)| *r != requirement);
        self.in_key.push((requirement, value));
    }

    pub fn independent_of<K: TypeMapKey>(&mut self) {
        let requirement = ProviderRequirement::of::<K>();
        if !self.independent.contains(&requirement) {
            self.independent.push(requirement);
        }
    }

    /// The values of the providers in the key, by key name (`None` when there are none,
    /// so keys stay what they were without this rule).
    pub fn key_values(&self, ctx: &ToolInvokeContext) -> Option<Value> {
        if self.in_key.is_empty() {
            return None;
        }
        let values: Map<String, Value> = self
            .in_key
            .iter()
            .map(|(r, value)| (r.key().to_owned(), value(ctx)))
            .collect();
        Some(Value::Object(values))
    }

    /// The first per-call provider the tool read that neither is in the key nor was
    /// declared irrelevant: its result is not to be stored.
    pub fn unkeyed_read(&self, ctx: &ToolInvokeContext) -> Option<ProviderRequirement> {
        ctx.tool_provider_reads().into_iter().find(|read| {
            !self.independent.contains(read) && !self.in_key.iter().any(|(r, _)| r == read)
        })
    }
}
