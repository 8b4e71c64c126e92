//! The credentials the gateway holds, and the one scrubber that keeps them out of
//! answers, audit records and logs.
//!
//! What the gateway holds: each upstream's credential (`credential_env`) and per-caller
//! credentials (`as_caller`: the token exchange's client secret, fixed credentials), the
//! credentials an upstream's configuration holds by name or by shape (environment values
//! and program arguments, passwords in URLs and connection strings:
//! [`UpstreamConfig::secrets`](toolgate_mcp::UpstreamConfig::secrets)), the redaction
//! salt, the audit hash key, the approval webhooks' secrets and addresses, the password of the Redis URL and the OTLP exporter's
//! header values and endpoint password. Every upstream's answers are
//! scrubbed of all of them before the pipeline sees them (an upstream may come by another's
//! credential: [`UpstreamConfig::scrub_also`](toolgate_mcp::UpstreamConfig::scrub_also)),
//! and the scrubber made here covers every credential in the audit records and in every
//! log line.

use std::sync::OnceLock;

use toolgate_core::secret::Secret;
use toolgate_hooks::fingerprint::random_key;
use toolgate_hooks::secrets::Scrubber;

use crate::config::{Config, StateUrl, TelemetryConfig};

/// Every credential `config` holds (read from the environment where the configuration
/// names a variable).
pub fn held(config: &Config) -> Vec<Secret> {
    let mut held = Vec::new();
    for (i, entry) in config.upstreams.iter().enumerate() {
        if let Ok(upstream) = entry.upstream_config(i) {
            held.extend(upstream.secrets());
        }
        if let Some(as_caller) = &entry.as_caller {
            let exchange = as_caller.token_exchange.iter();
            held.extend(exchange.map(|e| Secret::new(e.client_secret.0.clone())));
            let fixed = as_caller.fixed_credentials();
            held.extend(fixed.map(|(_, _, credential)| Secret::new(credential.0.clone())));
        }
    }
    if let Some(salt) = config
        .policies
        .redaction
        .as_ref()
        .and_then(|r| r.salt.as_ref())
    {
        held.push(Secret::new(salt.0.clone()));
    }
    // A webhook's address is held too: some receivers (Slack's) put their token in it.
    for webhook in config.policies.approval.iter().flat_map(|a| &a.webhooks) {
        held.push(Secret::new(webhook.secret.0.clone()));
        held.push(Secret::new(webhook.url.0.clone()));
    }
    if let Some(key) = config.audit.as_ref().and_then(|a| a.hash_key()) {
        held.push(Secret::new(key.0.clone()));
    }
    if let Some(key) = &config.server.mcp_state_key {
        held.push(Secret::new(key.0.clone()));
    }
    if let Some(telemetry) = &config.telemetry {
        held.extend(exporter_held(telemetry));
    }
    let redis_urls = match config.state.target() {
        StateUrl::Memory => Vec::new(),
        StateUrl::Redis(url) => vec![url],
        StateUrl::Cluster(nodes) => nodes.urls().to_vec(),
    };
    for url in redis_urls {
        if let Ok(url) = url::Url::parse(&url)
            && let Some(password) = url.password()
        {
            held.push(Secret::new(password.to_owned()));
        }
    }
    held
}

/// The credentials of the OTLP exporter `telemetry` starts: its headers' values and its
/// endpoint's password. The exporter runs for the whole process, so a reload that changes
/// or removes `telemetry` leaves these in use (and in the exporter's own log lines).
pub fn exporter_held(telemetry: &TelemetryConfig) -> Vec<Secret> {
    let mut held: Vec<Secret> = (telemetry.otlp.headers.values())
        .map(|value| Secret::new(value.0.clone()))
        .collect();
    if let Ok(url) = url::Url::parse(&telemetry.otlp.endpoint.0)
        && let Some(password) = url.password()
    {
        held.push(Secret::new(password.to_owned()));
    }
    held
}

/// A scrubber for every credential `config` holds.
pub fn scrubber(config: &Config) -> Scrubber {
    Scrubber::for_secrets(&held(config))
}

/// The key that seals MCP request states when the configuration sets none: random, made
/// once per process, so that rounds answered before a reload open after it.
pub(crate) fn mcp_state_key(config: &Config) -> Vec<u8> {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    match &config.server.mcp_state_key {
        Some(key) => key.0.as_bytes().to_vec(),
        None => KEY.get_or_init(random_key).to_vec(),
    }
}

/// The audit fingerprint key when the configuration sets none: random, made once per
/// process, so that records before and after a reload still correlate.
pub(crate) fn process_audit_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(random_key)
}
