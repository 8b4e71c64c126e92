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
    /// Environment variables set for the program. It starts with a cleared environment:
    /// it gets only these, the few any program needs
    /// ([`STDIO_PASSED_ENV`](toolgate_mcp::STDIO_PASSED_ENV): `PATH`, `HOME`, the locale…),
    /// those `inherit_env` names, and the `credential_env` variable.
    #[serde(default)]
    pub env: BTreeMap<String, EnvString>,
    /// Variables of the gateway's own environment passed on to the program, when set
    /// (e.g. `[GITHUB_TOKEN]`): nothing else of it is, so that a third party's server
    /// does not read the gateway's secrets.
    #[serde(default)]
    pub inherit_env: Vec<String>,
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
    /// The most requests in flight to an HTTP upstream at once, hence the most
    /// connections used for them (default
    /// [`DEFAULT_MAX_CONNECTIONS`](toolgate_mcp::DEFAULT_MAX_CONNECTIONS), 256); a call
    /// past it waits, until its deadline at most
    /// ([`UpstreamConfig::max_connections`]).
    pub max_connections: Option<usize>,
    /// The most of those requests one caller (an authenticated user, in its tenant) may
    /// have in flight at once (default: half of `max_connections`, rounded up — 128); a
    /// caller's request past it waits for one of the caller's own to finish, until its
    /// deadline at most, and then fails with 503 `upstream_share_used`
    /// ([`UpstreamConfig::max_connections_per_caller`]).
    pub max_connections_per_caller: Option<usize>,
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
    /// Checks what can be checked of the entry alone, `index` being its place under
    /// `upstreams` (for errors).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when a name under `inherit_env` or `env`, or a `command`'s
    /// `credential_env`, cannot be a variable's, `inherit_env` is set for an HTTP
    /// server, or `max_connections` or `max_connections_per_caller` is 0 or set for a stdio
    /// one, or `max_connections_per_caller` is above `max_connections`.
    pub(crate) fn check(&self, index: usize) -> Result<(), ConfigError> {
        match self.max_connections {
            Some(0) => {
                return Err(ConfigError::invalid(
                    format!("upstreams[{index}].max_connections"),
                    format!(
                        "0 would let no request reach the server: set at least 1, or leave it out for the default ({})",
                        toolgate_mcp::DEFAULT_MAX_CONNECTIONS
                    ),
                ));
            }
            Some(_) if self.command.is_some() => {
                return Err(ConfigError::invalid(
                    format!("upstreams[{index}].max_connections"),
                    "a program started over stdio (`command`) is spoken to on one pipe: remove `max_connections`, which bounds an HTTP server's connections",
                ));
            }
            _ => {}
        }
        let max = self
            .max_connections
            .unwrap_or(toolgate_mcp::DEFAULT_MAX_CONNECTIONS);
        match self.max_connections_per_caller {
            Some(0) => {
                return Err(ConfigError::invalid(
                    format!("upstreams[{index}].max_connections_per_caller"),
                    "0 would let no caller's request reach the server: set at least 1, or leave it out for the default (half of `max_connections`)",
                ));
            }
            Some(_) if self.command.is_some() => {
                return Err(ConfigError::invalid(
                    format!("upstreams[{index}].max_connections_per_caller"),
                    "a program started over stdio (`command`) is spoken to on one pipe: remove `max_connections_per_caller`, which shares out an HTTP server's connections among callers",
                ));
            }
            Some(share) if share > max => {
                return Err(ConfigError::invalid(
                    format!("upstreams[{index}].max_connections_per_caller"),
                    format!(
                        "{share} is more than the {max} requests in flight `max_connections` allows the server in all: set at most {max} (one caller may then hold every place), or raise `max_connections`"
                    ),
                ));
            }
            _ => {}
        }
        if self.url.is_some() && !self.inherit_env.is_empty() {
            return Err(ConfigError::invalid(
                format!("upstreams[{index}].inherit_env"),
                "only a program started over stdio (`command`) gets environment variables: remove `inherit_env` from an HTTP server",
            ));
        }
        let not_a_name = |field: String, name: &str| {
            ConfigError::invalid(
                field,
                format!(
                    "`{name}` is not an environment variable's name: use letters, digits and `_`, not starting with a digit"
                ),
            )
        };
        for (at, name) in self.inherit_env.iter().enumerate() {
            if !toolgate_mcp::is_env_name(name) {
                return Err(not_a_name(
                    format!("upstreams[{index}].inherit_env[{at}]"),
                    name,
                ));
            }
        }
        // `A=B: x` would set `A` to `B=x` in the program's environment.
        if let Some(name) = self
            .env
            .keys()
            .find(|name| !toolgate_mcp::is_env_name(name))
        {
            return Err(not_a_name(format!("upstreams[{index}].env"), name));
        }
        if self.command.is_some()
            && let Some(name) = &self.credential_env
            && !toolgate_mcp::is_env_name(name)
        {
            return Err(not_a_name(
                format!("upstreams[{index}].credential_env"),
                name,
            ));
        }
        Ok(())
    }

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
        config = config.inherit_env(self.inherit_env.iter().cloned());
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
        if let Some(max) = self.max_connections {
            config = config.max_connections(max);
        }
        if let Some(share) = self.max_connections_per_caller {
            config = config.max_connections_per_caller(share);
        }
        Ok(config
            .validate_arguments(self.validate_arguments)
            .discover(self.discover))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ConfigError, parse};

    fn refused(yaml: &str) -> ConfigError {
        parse(yaml).expect_err("refused")
    }

    #[test]
    fn max_connections_is_given_to_an_http_upstream() {
        let config = parse(
            "upstreams:\n  - { name: crm, url: \"http://127.0.0.1:1/mcp\", max_connections: 8 }\n",
        )
        .unwrap();
        assert_eq!(
            config.upstreams[0]
                .upstream_config(0)
                .unwrap()
                .max_connections,
            Some(8)
        );
        let config =
            parse("upstreams:\n  - { name: crm, url: \"http://127.0.0.1:1/mcp\" }\n").unwrap();
        let upstream = config.upstreams[0].upstream_config(0).unwrap();
        assert_eq!(upstream.max_connections, None, "left at the default");
        assert_eq!(
            upstream.max_in_flight(),
            toolgate_mcp::DEFAULT_MAX_CONNECTIONS
        );
    }

    #[test]
    fn max_connections_of_0_or_for_a_stdio_program_is_refused_in_plain_words() {
        let error = refused(
            "upstreams:\n  - { name: crm, url: \"http://127.0.0.1:1/mcp\", max_connections: 0 }\n",
        );
        assert_eq!(error.field(), "upstreams[0].max_connections", "{error}");
        let text = error.to_string();
        assert!(
            text.contains("0 would let no request reach the server") && text.contains("at least 1"),
            "{text}"
        );
        // The default's value too: set, it is set where no bound applies.
        for max in [4, toolgate_mcp::DEFAULT_MAX_CONNECTIONS] {
            let error = refused(&format!(
                "upstreams:\n  - {{ name: gh, command: npx, max_connections: {max} }}\n"
            ));
            assert_eq!(error.field(), "upstreams[0].max_connections", "{error}");
            assert!(
                error.to_string().contains("remove `max_connections`"),
                "{error}"
            );
        }
    }

    #[test]
    fn max_connections_per_caller_is_given_to_an_http_upstream_or_defaults_to_half() {
        let config = parse(
            "upstreams:\n  - { name: crm, url: \"http://127.0.0.1:1/mcp\", max_connections: 8, max_connections_per_caller: 3 }\n",
        )
        .unwrap();
        let upstream = config.upstreams[0].upstream_config(0).unwrap();
        assert_eq!(upstream.max_connections_per_caller, Some(3));
        assert_eq!(upstream.max_in_flight_per_caller(), 3);
        let config = parse(
            "upstreams:\n  - { name: crm, url: \"http://127.0.0.1:1/mcp\", max_connections: 5 }\n",
        )
        .unwrap();
        let upstream = config.upstreams[0].upstream_config(0).unwrap();
        assert_eq!(
            upstream.max_connections_per_caller, None,
            "left at the default"
        );
        assert_eq!(
            upstream.max_in_flight_per_caller(),
            3,
            "half of 5, rounded up"
        );
    }

    #[test]
    fn max_connections_per_caller_of_0_above_the_bound_or_for_a_stdio_program_is_refused_in_plain_words()
     {
        let field = "upstreams[0].max_connections_per_caller";
        for (entry, words) in [
            (
                "url: \"http://127.0.0.1:1/mcp\", max_connections_per_caller: 0",
                "0 would let no caller's request reach the server",
            ),
            (
                "url: \"http://127.0.0.1:1/mcp\", max_connections: 4, max_connections_per_caller: 5",
                "5 is more than the 4 requests in flight `max_connections` allows",
            ),
            (
                "url: \"http://127.0.0.1:1/mcp\", max_connections_per_caller: 257",
                "more than the 256 requests in flight",
            ),
            (
                "command: npx, max_connections_per_caller: 2",
                "remove `max_connections_per_caller`",
            ),
        ] {
            let error = refused(&format!("upstreams:\n  - {{ name: crm, {entry} }}\n"));
            assert_eq!(error.field(), field, "{error}");
            assert!(error.to_string().contains(words), "{words:?} in {error}");
        }
        // The whole bound is a share: one caller may hold every place.
        parse(
            "upstreams:\n  - { name: crm, url: \"http://127.0.0.1:1/mcp\", max_connections: 4, max_connections_per_caller: 4 }\n",
        )
        .unwrap();
    }

    #[test]
    fn variables_to_pass_on_are_given_to_the_stdio_program() {
        let config =
            parse("upstreams:\n  - { name: gh, command: npx, inherit_env: [GITHUB_TOKEN, _X1] }\n")
                .unwrap();
        let upstream = config.upstreams[0].upstream_config(0).unwrap();
        assert!(
            matches!(&upstream.transport, toolgate_mcp::UpstreamTransport::Stdio { inherit_env, .. } if inherit_env == &["GITHUB_TOKEN", "_X1"])
        );
    }

    #[test]
    fn a_name_to_pass_on_that_cannot_be_a_variables_is_refused_in_plain_words() {
        for name in ["\"A=B\"", "\"1X\"", "\"\"", "\"TWO WORDS\""] {
            let yaml = format!(
                "upstreams:\n  - {{ name: gh, command: npx, inherit_env: [OK, {name}] }}\n"
            );
            let error = refused(&yaml);
            assert_eq!(error.field(), "upstreams[0].inherit_env[1]", "{error}");
            assert!(
                error
                    .to_string()
                    .contains("not an environment variable's name"),
                "{error}"
            );
        }
        for (entry, field) in [
            ("env: { OK: x, \"A=B\": y }", "upstreams[0].env"),
            ("env: { \"\": y }", "upstreams[0].env"),
            ("credential_env: \"A=B\"", "upstreams[0].credential_env"),
        ] {
            let yaml = format!("upstreams:\n  - {{ name: gh, command: npx, {entry} }}\n");
            let error = refused(&yaml);
            assert_eq!(error.field(), field, "{error}");
            assert!(
                error
                    .to_string()
                    .contains("not an environment variable's name"),
                "{error}"
            );
        }
        let error = refused(
            "upstreams:\n  - { name: gh, url: \"http://127.0.0.1:1/mcp\", inherit_env: [X] }\n",
        );
        assert_eq!(error.field(), "upstreams[0].inherit_env", "{error}");
    }
}
