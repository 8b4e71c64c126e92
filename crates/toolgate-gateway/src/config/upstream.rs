//! One upstream MCP server under `upstreams`, and the settings it gives the MCP client.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toolgate_mcp::UpstreamConfig;

use super::{AsCallerConfig, ConfigError, EnvString, policies, values};

/// One upstream MCP server: exactly one of `command` (stdio) or `url` (streamable HTTP).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEntry {
    /// The upstream's name (used in logs and errors).
    pub name: String,
    /// The program to start, for a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment for the program.
    #[serde(default)]
    pub env: BTreeMap<String, EnvString>,
    /// The URL of a streamable HTTP server.
    pub url: Option<EnvString>,
    /// The environment variable holding the bearer credential sent upstream.
    pub credential_env: Option<String>,
    /// A prefix for the imported tools' names (needed when two upstreams share names).
    pub prefix: Option<String>,
    /// The deadline of one upstream call (default 30 s).
    #[serde(default, with = "values::opt_duration")]
    pub call_timeout: Option<Duration>,
    /// How long connecting may take (default 10 s).
    #[serde(default, with = "values::opt_duration")]
    pub connect_timeout: Option<Duration>,
    /// Check arguments against each imported tool's input schema before the call leaves
    /// (default true).
    #[serde(default = "policies::yes")]
    pub validate_arguments: bool,
    /// Ask the upstream for MCP 2026-07-28 first (`server/discover`), falling back to
    /// 2025-11-25 (default true). `false` for a server that never answers unknown methods.
    #[serde(default = "policies::yes")]
    pub discover: bool,
    /// Call the upstream as each caller, with a credential of the caller's own (HTTP
    /// upstreams only).
    pub as_caller: Option<AsCallerConfig>,
}

impl UpstreamEntry {
    /// The upstream's settings for the MCP client, `index` being its place under
    /// `upstreams` (for errors). Without the per-caller part, which needs the identity
    /// provider's keys.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when neither or both of `command` and `url` are set.
    pub fn upstream_config(&self, index: usize) -> Result<UpstreamConfig, ConfigError> {
        let mut config = match (&self.command, &self.url) {
            (Some(command), None) => {
                UpstreamConfig::stdio(self.name.clone(), command.clone(), self.args.clone())
            }
            (None, Some(url)) => UpstreamConfig::http(self.name.clone(), url.0.clone()),
            _ => {
                return Err(ConfigError::invalid(
                    format!("upstreams[{index}]"),
                    "set exactly one of `command` (a stdio MCP server) or `url` (a streamable HTTP MCP server)",
                ));
            }
        };
        for (key, value) in &self.env {
            config = config.env(key.clone(), value.0.clone());
        }
        if let Some(var) = &self.credential_env {
            config = config.credential_env(var.clone());
        }
        if let Some(prefix) = &self.prefix {
            config = config.prefix(prefix.clone());
        }
        if let Some(timeout) = self.call_timeout {
            config = config.call_timeout(timeout);
        }
        if let Some(timeout) = self.connect_timeout {
            config = config.connect_timeout(timeout);
        }
        Ok(config
            .validate_arguments(self.validate_arguments)
            .discover(self.discover))
    }
}
