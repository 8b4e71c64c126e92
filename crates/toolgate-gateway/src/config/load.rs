//! Reading the file: YAML → [`Config`], with errors that name the field path and line, then
//! the checks that span several fields.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toolgate_core::error::hides_text;

use super::paths::io_in_words;
use super::{AuditConfig, Config};

/// The shortest `server.mcp_state_key` accepted (what the seal needs: 256 bits).
const MIN_MCP_STATE_KEY_BYTES: usize = 32;

/// The shortest `audit.hash_key` accepted.
const MIN_AUDIT_KEY_CHARS: usize = 16;

/// The configuration could not be used. The gateway refuses to start (or, on reload, keeps
/// the configuration it has) rather than run with a half-understood policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {}", path.display(), io_in_words(source))]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A value is malformed, misspelt or of the wrong type.
    #[error("{}", Located { origin, line: *line, column: *column, field, message })]
    Parse {
        /// The file, or `<config>` for text given directly.
        origin: String,
        /// The 1-based line, when known.
        line: Option<usize>,
        /// The 1-based column, when known.
        column: Option<usize>,
        /// The field path, e.g. `policies.rate_limits[0].rate`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Values that are fine alone but not together (duplicates, unknown tool names, …).
    #[error("{}", Located { origin, line: None, column: None, field, message })]
    Invalid {
        /// The file, or `<config>`.
        origin: String,
        /// The field path.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A file the configuration names cannot be used the way the gateway will use it: a
    /// directory where a file belongs, or a file in a directory that does not exist or
    /// cannot be written. Found by looking at the file system ([`Config::check_paths`],
    /// which `toolgate check` runs), never by reading the text alone.
    #[error("{}", Located { origin, line: None, column: None, field, message })]
    Path {
        /// The file, or `<config>`.
        origin: String,
        /// The field path, e.g. `stats.path`.
        field: String,
        /// The path the field gives (after `${VAR}` expansion).
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl ConfigError {
    /// The field path the error is about (empty for a read error or the document as a
    /// whole).
    pub fn field(&self) -> &str {
        match self {
            ConfigError::Read { .. } => "",
            ConfigError::Parse { field, .. }
            | ConfigError::Invalid { field, .. }
            | ConfigError::Path { field, .. } => field,
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            origin: "<config>".to_owned(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error with its field path under `prefix`: `rate` under
    /// `policies.rate_limits[0]` is `policies.rate_limits[0].rate` (a section's own checks
    /// name its fields from the section).
    #[must_use]
    pub(crate) fn within(mut self, prefix: &str) -> Self {
        if let ConfigError::Parse { field, .. }
        | ConfigError::Invalid { field, .. }
        | ConfigError::Path { field, .. } = &mut self
        {
            *field = if field.is_empty() {
                prefix.to_owned()
            } else {
                format!("{prefix}.{field}")
            };
        }
        self
    }

    /// The same error, reported against `file` (for errors found after reading it, such
    /// as a policy naming a tool that does not exist).
    #[must_use]
    pub fn in_file(mut self, file: &Path) -> Self {
        if let ConfigError::Parse { origin, .. }
        | ConfigError::Invalid { origin, .. }
        | ConfigError::Path { origin, .. } = &mut self
        {
            *origin = file.display().to_string();
        }
        self
    }
}

/// An error at a place of a file: `origin:line:column: `field`: message`.
pub(crate) struct Located<'a> {
    pub origin: &'a str,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub field: &'a str,
    pub message: &'a str,
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if self.field.is_empty() || self.field == "." {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": `{}`: {}", self.field, self.message)
        }
    }
}

/// Reads and checks a configuration file, at a command's start: a regular file, or a pipe
/// that something writes to (`--config <(envsubst < gateway.yaml)`), read once. A pipe
/// nothing writes to, a device or a directory is refused at once.
///
/// # Errors
///
/// [`ConfigError`] naming the file, field path and (for malformed values) line.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    load_text(path, toolgate_core::file::read_text_file_or_pipe(path))
}

/// Reads and checks a configuration file again, on a reload: only a regular file. A pipe
/// read again would wait for a writer for ever (its text was read at the start), and a
/// device such as `/dev/zero` would fill memory.
///
/// # Errors
///
/// As [`load_file`].
pub fn reload_file(path: &Path) -> Result<Config, ConfigError> {
    load_text(path, toolgate_core::file::read_text_file(path))
}

/// The configuration in `read`, the text of `path`, or why not.
fn load_text(
    path: &Path,
    read: Result<String, toolgate_core::file::TextFileError>,
) -> Result<Config, ConfigError> {
    let text = read.map_err(|e| ConfigError::Read {
        path: path.to_owned(),
        source: read_error(e),
    })?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// Why a configuration file could not be read, in words: not a regular file (a pipe or a
/// device would keep a reload waiting, or fill memory), over
/// [`MAX_TEXT_FILE_BYTES`](toolgate_core::file::MAX_TEXT_FILE_BYTES), or not UTF-8.
fn read_error(e: toolgate_core::file::TextFileError) -> std::io::Error {
    use toolgate_core::file::TextFileError;
    match e {
        TextFileError::Unreadable(e) => e,
        TextFileError::NotAFile { what } => std::io::Error::other(format!(
            "it is {what}, not a file: name the configuration file itself"
        )),
        other => std::io::Error::other(other.to_string()),
    }
}

/// How deep a configuration's lists and maps written in flow style (`[a, [b]]`, `{a: {b:
/// c}}`) or as a run of `- ` on one line may nest: far more than any configuration. The
/// YAML parser slows down more than linearly with depth, so deeper text is refused before
/// it is parsed.
const MAX_FLOW_DEPTH: usize = 256;

/// The line (from 1) where `text` nests deeper than [`MAX_FLOW_DEPTH`], if it does.
/// Brackets inside quotes and comments are not counted; a bracket in a plain or block
/// text may be, which can only overcount.
fn too_deep(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (n, line) in text.lines().enumerate() {
        // A run of `- ` (or `? `) at the start of a line nests a list in a list.
        let dashes = line
            .trim_start()
            .as_bytes()
            .chunks(2)
            .take_while(|pair| matches!(pair, [b'-' | b'?', b' ']))
            .count();
        let mut quote = None;
        let mut previous = b' ';
        let mut deepest = depth;
        for &byte in line.as_bytes() {
            match (quote, byte) {
                (Some(b'"'), b'\\') if previous == b'\\' => {
                    previous = b' ';
                    continue;
                }
                (Some(open), _) if byte == open && !(open == b'"' && previous == b'\\') => {
                    quote = None;
                }
                (Some(_), _) => {}
                // A quote opens a quoted text only where a value starts (or, for `''`,
                // right after the quote it escapes).
                (None, b'"' | b'\'')
                    if matches!(previous, b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'\'') =>
                {
                    quote = Some(byte);
                }
                (None, b'#') if previous.is_ascii_whitespace() => break,
                (None, b'[' | b'{') => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                (None, b']' | b'}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = byte;
        }
        if deepest + dashes > MAX_FLOW_DEPTH {
            return Some(n + 1);
        }
    }
    None
}

/// Parses and checks configuration text.
///
/// # Errors
///
/// [`ConfigError::Parse`] for malformed values (with line and column),
/// [`ConfigError::Invalid`] for inconsistent ones.
///
/// # Examples
///
/// ```
/// use toolgate_gateway::config::parse;
///
/// let config = parse("tools:\n  builtin: [echo, calculator]\n")?;
/// assert_eq!(config.tools.builtin.len(), 2);
///
/// let error = parse("policies:\n  rate_limits:\n    - name: a\n      rate: lots\n").unwrap_err();
/// assert_eq!(error.field(), "policies.rate_limits[0].rate");
/// assert!(error.to_string().starts_with("<config>:4:"));
/// # Ok::<(), toolgate_gateway::config::ConfigError>(())
/// ```
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    if let Some(line) = too_deep(text) {
        return Err(ConfigError::Parse {
            origin: "<config>".to_owned(),
            line: Some(line),
            column: None,
            field: String::new(),
            message: format!(
                "lists and maps nest more than {MAX_FLOW_DEPTH} deep here: a configuration needs a few levels"
            ),
        });
    }
    let mut config: Config = if text.trim().is_empty() {
        Config::default()
    } else {
        let deserializer = yaml_serde::Deserializer::from_str(text);
        serde_path_to_error::deserialize(deserializer).map_err(|error| {
            let field = error.path().to_string();
            let inner = error.into_inner();
            let location = inner.location();
            let message = in_plain_words(&strip_location(&inner.to_string(), &field));
            ConfigError::Parse {
                origin: "<config>".to_owned(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
                field,
                message,
            }
        })?
    };
    check(&config)?;
    config.generation = generation_of(text);
    Ok(config)
}

/// The digest of the `policies:` section of configuration text that parsed: what
/// [`Config::generation`] holds.
fn generation_of(text: &str) -> String {
    let policies = yaml_serde::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|mut root| root.get_mut("policies").map(serde_json::Value::take))
        .unwrap_or(serde_json::Value::Null);
    toolgate_core::approval::digest(&policies)
}

// The YAML error's text starts with (part of) the field path and ends with the position,
// which the error reports separately.
pub(crate) fn strip_location(message: &str, field: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(at) => &message[..at],
        None => message,
    };
    match message.split_once(": ") {
        Some((prefix, rest)) if !prefix.contains(' ') && field.starts_with(prefix) => {
            rest.to_owned()
        }
        _ => message.to_owned(),
    }
}

/// The deserializer names Rust types (`expected u32`); a reader of a YAML file knows
/// numbers, lists and addresses. Numbers and objects are said as they are to every caller
/// ([`in_json_words`](toolgate_core::error::in_json_words)); the rest in YAML's words.
pub(crate) fn in_plain_words(message: &str) -> String {
    const WORDS: [(&str, &str); 3] = [
        ("expected a boolean", "expected `true` or `false`"),
        (
            "expected a sequence",
            "expected a list (`[a, b]`, or one `- item` per line)",
        ),
        (
            "invalid socket address syntax",
            "expected an address and a port, such as `127.0.0.1:8080`, `0.0.0.0:8080` or \
             `[::1]:8080` (a host name is not accepted)",
        ),
    ];
    let mut message = toolgate_core::error::in_json_words(message);
    for (rust, plain) in WORDS {
        // Whole words only: `expected u8` must not rewrite `expected u8x`.
        if let Some(at) = message.find(rust)
            && !message[at + rust.len()..].starts_with(|c: char| c.is_alphanumeric())
        {
            message.replace_range(at..at + rust.len(), plain);
        }
    }
    message
}

/// What is wrong with `name` as a user id or a tenant in `users:`, if anything: the rule a
/// token's subject and tenant claim meet too (at most 256 bytes, nothing that could forge
/// or hide text where the name is quoted), and not blank.
pub(crate) fn name_fault(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("may not be empty")
    } else if name.len() > 256 {
        Some("is at most 256 bytes")
    } else if name.chars().any(hides_text) {
        Some(
            "may not hold control characters (a line break, an escape) or invisible formatting characters (a zero-width space, a bidirectional override)",
        )
    } else {
        None
    }
}

/// Checks that need several fields at once. Tool names are checked later, once the tools
/// of upstream servers are known.
fn check(config: &Config) -> Result<(), ConfigError> {
    let mut ids = BTreeSet::new();
    let mut hashes = BTreeSet::new();
    for (i, user) in config.users.iter().enumerate() {
        if let Some(fault) = name_fault(&user.id) {
            return Err(ConfigError::invalid(
                format!("users[{i}].id"),
                format!("a user id {fault}: it is written in logs, audit records and messages"),
            ));
        }
        if let Some(fault) = user.tenant.as_deref().and_then(name_fault) {
            return Err(ConfigError::invalid(
                format!("users[{i}].tenant"),
                format!(
                    "a tenant {fault}: it is written in logs, audit records and messages; leave `tenant:` out for a user of no tenant"
                ),
            ));
        }
        // Who a caller is, is a user id in a tenant: `ann` of `acme` and `ann` of `globex`
        // (or of no tenant) are different users, and may both be configured.
        if !ids.insert((user.tenant.as_deref(), user.id.as_str())) {
            return Err(ConfigError::invalid(
                format!("users[{i}].id"),
                format!(
                    "user {} is defined twice: merge the two entries",
                    user.user().named()
                ),
            ));
        }
        if !hashes.insert(user.key_sha256.0) {
            return Err(ConfigError::invalid(
                format!("users[{i}].key_sha256"),
                "two users have the same API key: give every user their own key",
            ));
        }
    }
    config.identity.check()?;
    let mut names = BTreeSet::new();
    for (i, upstream) in config.upstreams.iter().enumerate() {
        if !names.insert(upstream.name.as_str()) {
            return Err(ConfigError::invalid(
                format!("upstreams[{i}].name"),
                format!("upstream `{}` is defined twice", upstream.name),
            ));
        }
        if upstream.command.is_some() == upstream.url.is_some() {
            return Err(ConfigError::invalid(
                format!("upstreams[{i}]"),
                "set exactly one of `command` (a stdio MCP server) or `url` (a streamable HTTP MCP server)",
            ));
        }
        if let Some(url) = &upstream.url
            && !matches!(url::Url::parse(&url.0), Ok(url) if matches!(url.scheme(), "http" | "https"))
        {
            // The address is not quoted: it may carry a token.
            return Err(ConfigError::invalid(
                format!("upstreams[{i}].url"),
                "the address of a streamable HTTP MCP server is a URL that starts with `http://` or `https://`, such as `https://mcp.example.com/mcp`",
            ));
        }
        upstream.check(i)?;
        if let Some(as_caller) = &upstream.as_caller {
            as_caller.check(i, upstream.url.is_some(), config.identity.oauth.is_some())?;
        }
    }
    if let Some(AuditConfig::File {
        checkpoint_every,
        rotate_bytes,
        ..
    }) = &config.audit
    {
        if *checkpoint_every == Some(0) {
            return Err(ConfigError::invalid(
                "audit.checkpoint_every",
                "a checkpoint after every 0 records is none: give at least 1 (the default is 1000)",
            ));
        }
        if rotate_bytes.is_some_and(|size| size.0 == 0) {
            return Err(ConfigError::invalid(
                "audit.rotate_bytes",
                "a file of 0 bytes would be rotated at every record: give a size such as `100MiB`",
            ));
        }
    }
    if !super::MAX_HEADER_BYTES_RANGE.contains(&config.server.max_header_bytes.0) {
        return Err(ConfigError::invalid(
            "server.max_header_bytes",
            "the headers' limit must be from `1KiB` to `256KiB`, e.g. `64KiB` (the default)",
        ));
    }
    if config.server.body_limit.0 == 0 {
        return Err(ConfigError::invalid(
            "server.body_limit",
            "a body limit of zero would refuse every request with a body: give a size such as `1MiB`",
        ));
    }
    config.policies.check()?;
    if config.state.deadline.is_some_and(|d| d.is_zero()) {
        return Err(ConfigError::invalid(
            "state.deadline",
            "a Redis deadline of zero would fail every call: use e.g. `100ms` (or leave it out for the default)",
        ));
    }
    if config.state.cluster.is_some() && config.state.url != super::StateUrl::Memory {
        return Err(ConfigError::invalid(
            "state.cluster",
            "`url` and `cluster` both say where the state lives: keep one (`cluster` lists a Redis Cluster's nodes, as `url: redis+cluster://…` does)",
        ));
    }
    if let Some(telemetry) = &config.telemetry {
        if !(0.0..=1.0).contains(&telemetry.sample_ratio) {
            return Err(ConfigError::invalid(
                "telemetry.sample_ratio",
                "must be between 0 and 1 (1 records every trace, 0.1 one in ten)",
            ));
        }
        let endpoint = &telemetry.otlp.endpoint.0;
        if !matches!(url::Url::parse(endpoint), Ok(url) if matches!(url.scheme(), "http" | "https"))
        {
            return Err(ConfigError::invalid(
                "telemetry.otlp.endpoint",
                "must be the collector's http:// or https:// OTLP/HTTP address, e.g. `http://localhost:4318`",
            ));
        }
        for (name, value) in &telemetry.otlp.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(ConfigError::invalid(
                    format!("telemetry.otlp.headers.{name}"),
                    "is not a valid HTTP header name",
                ));
            }
            // The value is a secret: the message never quotes it.
            if http::HeaderValue::from_str(&value.0).is_err() {
                return Err(ConfigError::invalid(
                    format!("telemetry.otlp.headers.{name}"),
                    "the value (not shown: it may be a secret) has characters an HTTP header cannot carry, such as a line break",
                ));
            }
        }
        if let Some(logs) = &telemetry.logs {
            if logs.max_queue == 0 {
                return Err(ConfigError::invalid(
                    "telemetry.logs.max_queue",
                    "must be at least 1 (default 2048): the records waiting for export, past which new ones are dropped",
                ));
            }
            if logs.audit && !matches!(config.audit, Some(AuditConfig::File { .. })) {
                return Err(ConfigError::invalid(
                    "telemetry.logs.audit",
                    "exports the lines of the chained audit file: configure it with `audit: { sink: file, path: … }`, or remove `telemetry.logs.audit`",
                ));
            }
        }
    }
    if let Some(prefix) = &config.state.key_prefix
        && matches!(config.state.target(), super::StateUrl::Cluster(_))
        && prefix.contains(['{', '}'])
    {
        return Err(ConfigError::invalid(
            "state.key_prefix",
            "may not hold `{` or `}` on a Redis Cluster: toolgate gives its keys hash tags of their own after the prefix, so that they spread over the cluster's slots and each script's keys share one; a brace in the prefix would put every key in one slot, or split a script's keys over two. Choose a prefix without braces",
        ));
    }
    if config.state.down_after_failures == Some(0) {
        return Err(ConfigError::invalid(
            "state.down_after_failures",
            "must be at least 1 (3 keeps one slow reply from marking Redis down)",
        ));
    }
    if config.state.cache_caller_window == Some(Duration::ZERO) {
        return Err(ConfigError::invalid(
            "state.cache_caller_window",
            "is zero, so the bound on what each caller caches would never hold: give the longest TTL of the cached tools (default 5m), or turn the bound off with `cache_max_bytes_per_caller: 0`",
        ));
    }
    if let Some(key) = config.audit.as_ref().and_then(AuditConfig::hash_key)
        && key.0.chars().count() < MIN_AUDIT_KEY_CHARS
    {
        return Err(ConfigError::invalid(
            "audit.hash_key",
            format!(
                "the key must be at least {MIN_AUDIT_KEY_CHARS} characters long (32 random characters is right): generate one with `openssl rand -hex 32` and set it from a secret, `hash_key: ${{AUDIT_HASH_KEY}}`"
            ),
        ));
    }
    if let Some(key) = config.audit.as_ref().and_then(AuditConfig::signing_key)
        && let Err(e) = toolgate_hooks::audit::CheckpointKey::from_base64(&key.0)
    {
        return Err(ConfigError::invalid(
            "audit.signing_key",
            format!("{e}; set it from a secret, `signing_key: ${{AUDIT_SIGNING_KEY}}`"),
        ));
    }
    if let Some(key) = &config.server.mcp_state_key
        && key.0.len() < MIN_MCP_STATE_KEY_BYTES
    {
        return Err(ConfigError::invalid(
            "server.mcp_state_key",
            format!(
                "the key must be at least {MIN_MCP_STATE_KEY_BYTES} characters long: generate one with `openssl rand -hex 32` and set it from a secret, `mcp_state_key: ${{MCP_STATE_KEY}}`"
            ),
        ));
    }
    if let Some(key) = &config.state.suspensions_key {
        if config.state.target() == super::StateUrl::Memory {
            return Err(ConfigError::invalid(
                "state.suspensions_key",
                "waiting calls are encrypted where they are stored on Redis, and this `state` keeps them in memory: remove the key, or set `state.url` to a Redis URL",
            ));
        }
        // The form only: the store reads the key itself (`with_encryption_key`).
        let hex = key.0.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConfigError::invalid(
                "state.suspensions_key",
                "the key must be 64 hexadecimal characters (32 bytes): make one with `openssl rand -hex 32` and set it from a secret, `suspensions_key: ${SUSPENSIONS_KEY}`",
            ));
        }
    }
    if let Some(pins) = &config.pins {
        match (&pins.path, pins.shared) {
            (Some(_), true) => {
                return Err(ConfigError::invalid(
                    "pins",
                    "give either `path` (a pin file of this gateway's own) or `shared: true` (pins on Redis with the policies' state), not both",
                ));
            }
            (None, false) => {
                return Err(ConfigError::invalid(
                    "pins",
                    "say where the pins are kept: `path: FILE`, or `shared: true` to keep them on Redis with the policies' state",
                ));
            }
            (None, true) if config.state.target() == super::StateUrl::Memory => {
                return Err(ConfigError::invalid(
                    "pins.shared",
                    "shared pins are kept on Redis with the policies' state, and this `state` is in memory: set `state.url` to a Redis URL, or keep the pins in a file with `path: FILE`",
                ));
            }
            _ => {}
        }
    }
    if let Some(stats) = &config.stats
        && stats.autosave.is_zero()
    {
        return Err(ConfigError::invalid(
            "stats.autosave",
            "the autosave interval must be longer than zero, e.g. `30s`",
        ));
    }
    if let Some(console) = &config.console {
        if console.session_ttl.is_zero() {
            return Err(ConfigError::invalid(
                "console.session_ttl",
                "a console session must last longer than zero, e.g. `8h`",
            ));
        }
        if console.oauth.is_some() && config.identity.oauth.is_none() {
            return Err(ConfigError::invalid(
                "console.oauth",
                "signing in through an issuer needs `identity.oauth` (the issuer, and how its tokens are checked): set it, or leave out `console.oauth` to sign in with API keys",
            ));
        }
        if console.max_sessions == 0 || console.max_sessions_per_user == 0 {
            return Err(ConfigError::invalid(
                "console",
                "`max_sessions` and `max_sessions_per_user` must be at least 1 (to turn the console off, leave out `console:`)",
            ));
        }
    }
    let failed = &config.identity.failed_credentials;
    if failed.max > 0 && (failed.per / failed.max).is_zero() {
        return Err(ConfigError::invalid(
            "identity.failed_credentials.per",
            "the time a burst of wrong credentials takes to come back must be longer than zero, e.g. `1m` (to turn the limit off, set `max: 0`)",
        ));
    }
    if failed.max > 0 && failed.max_addresses == 0 {
        return Err(ConfigError::invalid(
            "identity.failed_credentials.max_addresses",
            "must be at least 1, e.g. `100000` (to turn the limit off, set `max: 0`)",
        ));
    }
    if config.server.batch_concurrency == 0 || config.server.max_batch == 0 {
        return Err(ConfigError::invalid(
            "server",
            "`batch_concurrency` and `max_batch` must be at least 1",
        ));
    }
    let server = &config.server;
    for (field, timeout) in [
        ("header_timeout", server.header_timeout),
        ("body_timeout", server.body_timeout),
        ("idle_timeout", server.idle_timeout),
    ] {
        if timeout.is_zero() {
            return Err(ConfigError::invalid(
                format!("server.{field}"),
                "a connection timeout must be longer than zero, e.g. `10s`",
            ));
        }
    }
    let level = config.logging.level.trim();
    if !level.is_empty() && tracing_subscriber::EnvFilter::try_new(level).is_err() {
        return Err(ConfigError::invalid(
            "logging.level",
            format!(
                "`{}` is not a log filter: write a level (`error`, `warn`, `info`, `debug` or `trace`), or directives such as `info,toolgate=debug`",
                toolgate_core::error::shown_text(level, 64)
            ),
        ));
    }
    if server.request_timeout.is_zero() {
        return Err(ConfigError::invalid(
            "server.request_timeout",
            "a call's deadline must be longer than zero, e.g. `30s`",
        ));
    }
    if server.max_connections == 0 {
        return Err(ConfigError::invalid(
            "server.max_connections",
            "the gateway needs at least 1 connection to serve anything, e.g. `10000`",
        ));
    }
    if server.max_connections_per_address == 0 {
        return Err(ConfigError::invalid(
            "server.max_connections_per_address",
            "each client needs at least 1 connection to send anything, e.g. `1000`",
        ));
    }
    let sessions = &server.mcp_sessions;
    for (field, bound) in [("per_user", sessions.per_user), ("max", sessions.max)] {
        if bound == 0 {
            return Err(ConfigError::invalid(
                format!("server.mcp_sessions.{field}"),
                "MCP clients need at least 1 session each to call anything, e.g. `32` per user and `4096` in all (to turn `/mcp` off, set `server.mcp: false`)",
            ));
        }
    }
    if sessions.listens_per_user == 0 {
        return Err(ConfigError::invalid(
            "server.mcp_sessions.listens_per_user",
            "must be at least 1, e.g. `8`: a client listens to resources with one open request per stream it shows",
        ));
    }
    if sessions.idle_timeout.is_zero() {
        return Err(ConfigError::invalid(
            "server.mcp_sessions.idle_timeout",
            "an MCP session must be kept longer than zero between requests, e.g. `5m`",
        ));
    }
    if server.metrics_idle_timeout < Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            "server.metrics_idle_timeout",
            "a series must be kept at least `1s` without updates, and longer than Prometheus scrapes, e.g. `1h`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_refused_with_their_path_and_line() {
        let error = parse("server:\n  listen: 127.0.0.1:1\n  lisen: 2\n").unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("<config>:3:"), "{text}");
        assert!(text.contains("unknown field `lisen`"), "{text}");
    }

    #[test]
    fn type_errors_are_said_in_plain_words_with_an_example() {
        let negative = parse("server:\n  batch_concurrency: -3\n").unwrap_err();
        assert_eq!(negative.field(), "server.batch_concurrency");
        assert!(
            negative
                .to_string()
                .contains("expected a whole number, 0 or more"),
            "{negative}"
        );
        assert!(!negative.to_string().contains("usize"), "{negative}");

        let host = parse("server:\n  listen: localhost\n").unwrap_err();
        assert!(host.to_string().contains("`127.0.0.1:8080`"), "{host}");
    }

    #[test]
    fn an_empty_file_is_the_default_config() {
        let config = parse("").unwrap();
        assert!(config.users.is_empty());
    }

    #[test]
    fn the_state_s_redis_deadline_and_failures_before_down_are_refused_at_zero() {
        let config =
            parse("state:\n  url: redis://127.0.0.1:6379\n  down_after_failures: 5\n").unwrap();
        assert_eq!(config.state.down_after_failures, Some(5));

        let zero = parse("state:\n  url: redis://127.0.0.1:6379\n  deadline: 0s\n").unwrap_err();
        assert_eq!(zero.field(), "state.deadline");
        assert!(zero.to_string().contains("zero"), "{zero}");
        let never_down = parse("state:\n  url: memory\n  down_after_failures: 0\n").unwrap_err();
        assert_eq!(never_down.field(), "state.down_after_failures");
    }

    #[test]
    fn a_key_prefix_with_a_brace_is_refused_on_a_cluster_only() {
        for prefix in ["'{tg}'", "'tg{'", "'tg}x'"] {
            let cluster = parse(&format!(
                "state:\n  url: redis+cluster://127.0.0.1:7000\n  key_prefix: {prefix}\n"
            ))
            .unwrap_err();
            assert_eq!(cluster.field(), "state.key_prefix", "{prefix}");
            assert!(cluster.to_string().contains("one slot"), "{cluster}");
            // One Redis has one slot for every key: a brace changes nothing there, and a
            // prefix kept by an earlier version keeps its state.
            let one = format!("state:\n  url: redis://127.0.0.1:6379\n  key_prefix: {prefix}\n");
            assert!(parse(&one).is_ok(), "{prefix}");
        }
        let plain = "state:\n  url: redis+cluster://127.0.0.1:7000\n  key_prefix: tg-prod\n";
        assert!(parse(plain).is_ok());
    }

    #[test]
    fn the_bound_on_what_each_caller_caches_is_read_and_its_window_refused_at_zero() {
        let config = parse(
            "state:\n  url: redis://127.0.0.1:6379\n  cache_max_bytes_per_caller: 4MiB\n  cache_caller_window: 10m\n",
        )
        .unwrap();
        assert_eq!(
            config.state.cache_max_bytes_per_caller,
            Some(crate::config::values::ByteSize(4 * 1024 * 1024))
        );
        assert_eq!(
            config.state.cache_caller_window,
            Some(Duration::from_secs(600))
        );
        let never = parse("state:\n  url: memory\n  cache_caller_window: 0s\n").unwrap_err();
        assert_eq!(never.field(), "state.cache_caller_window");
    }

    #[test]
    fn an_upstream_called_as_each_caller_is_checked() {
        let upstream = |source: &str, as_caller: &str| {
            format!("upstreams:\n  - {{ name: crm, {source}, as_caller: {as_caller} }}\n")
        };
        let http = "url: \"http://127.0.0.1:9/mcp\"";
        let fixed = "{ credentials: { ann: token-of-ann } }";
        let exchange =
            "{ token_exchange: { audience: \"https://crm\", client_id: gw, client_secret: s } }";
        let oauth = "identity:\n  oauth: { issuer: \"https://id.example\", resource: \"https://tools.example\" }\n";

        let config = parse(&upstream(http, fixed)).expect("fixed credentials over HTTP");
        assert!(config.upstreams[0].as_caller.is_some());
        parse(&format!("{oauth}{}", upstream(http, exchange))).expect("an exchange with OAuth");

        let cases = [
            (
                upstream("command: demo", fixed),
                "upstreams[0].as_caller",
                "HTTP",
            ),
            (
                upstream(http, exchange),
                "upstreams[0].as_caller.token_exchange",
                "identity.oauth",
            ),
            (
                upstream(http, "{ max_sessions: 3 }"),
                "upstreams[0].as_caller",
                "exactly one",
            ),
            (
                upstream(http, "{ credentials: { ann: \"\" } }"),
                "upstreams[0].as_caller.credentials.ann",
                "empty",
            ),
            (
                upstream(http, "{ credentials: { ann: t }, max_sessions: 0 }"),
                "upstreams[0].as_caller.max_sessions",
                "at least one",
            ),
            (
                upstream(http, "{ credentials: { ann: t }, idle: 0s }"),
                "upstreams[0].as_caller.idle",
                "zero",
            ),
        ];
        for (text, field, words) in cases {
            let error = parse(&text).unwrap_err();
            assert_eq!(error.field(), field, "{text}");
            assert!(error.to_string().contains(words), "{error}");
        }
    }

    #[test]
    fn duplicate_users_are_refused() {
        let hash = "ab".repeat(32);
        let other = "cd".repeat(32);
        let text = format!(
            "users:\n  - {{id: a, key_sha256: \"{hash}\"}}\n  - {{id: a, key_sha256: \"{other}\"}}\n"
        );
        let refused = parse(&text).unwrap_err();
        assert_eq!(refused.field(), "users[1].id");
        assert!(
            refused
                .to_string()
                .contains("user `a` is defined twice: merge the two entries"),
            "{refused}"
        );
    }

    #[test]
    fn the_same_user_id_in_two_tenants_is_two_users_each_with_their_own_key() {
        use crate::auth::{ApiKeys, hash_key};
        let text = format!(
            "users:\n  - {{id: ann, key_sha256: \"{}\", tenant: acme, roles: [analyst]}}\n  - {{id: ann, key_sha256: \"{}\", tenant: globex, roles: [intern]}}\n  - {{id: ann, key_sha256: \"{}\", roles: [admin]}}\n",
            hash_key("tg_ann_acme"),
            hash_key("tg_ann_globex"),
            hash_key("tg_ann"),
        );
        let config = parse(&text).expect("ann in two tenants and in none");
        let keys = ApiKeys::new(&config.users);
        for (key, tenant, role) in [
            ("tg_ann_acme", Some("acme"), "analyst"),
            ("tg_ann_globex", Some("globex"), "intern"),
            ("tg_ann", None, "admin"),
        ] {
            let ann = keys.authenticate(key).expect(key);
            assert_eq!(ann.id, "ann");
            assert_eq!(ann.tenant.as_deref(), tenant, "{key}");
            assert_eq!(ann.roles, [role], "{key}");
        }
    }

    #[test]
    fn the_same_user_id_twice_in_one_tenant_is_refused_naming_the_tenant() {
        let hash = "ab".repeat(32);
        let other = "cd".repeat(32);
        let third = "ef".repeat(32);
        let text = format!(
            "users:\n  - {{id: ann, key_sha256: \"{hash}\", tenant: acme}}\n  - {{id: ann, key_sha256: \"{other}\", tenant: globex}}\n  - {{id: ann, key_sha256: \"{third}\", tenant: acme}}\n"
        );
        let refused = parse(&text).unwrap_err();
        assert_eq!(refused.field(), "users[2].id");
        assert!(
            refused
                .to_string()
                .contains("user `ann` of tenant `acme` is defined twice: merge the two entries"),
            "{refused}"
        );
    }

    #[test]
    fn a_key_stays_unique_across_users_of_different_tenants() {
        let hash = "ab".repeat(32);
        let text = format!(
            "users:\n  - {{id: ann, key_sha256: \"{hash}\", tenant: acme}}\n  - {{id: ann, key_sha256: \"{hash}\", tenant: globex}}\n"
        );
        assert_eq!(parse(&text).unwrap_err().field(), "users[1].key_sha256");
    }

    #[test]
    fn zero_connection_limits_are_refused_with_their_field() {
        for (text, field) in [
            ("server:\n  header_timeout: 0s\n", "server.header_timeout"),
            ("server:\n  body_timeout: 0s\n", "server.body_timeout"),
            ("server:\n  idle_timeout: 0ms\n", "server.idle_timeout"),
            ("server:\n  request_timeout: 0s\n", "server.request_timeout"),
            ("logging:\n  level: \"nope[[[\"\n", "logging.level"),
            ("server:\n  max_connections: 0\n", "server.max_connections"),
            (
                "server:\n  max_connections_per_address: 0\n",
                "server.max_connections_per_address",
            ),
            (
                "server:\n  mcp_sessions:\n    per_user: 0\n",
                "server.mcp_sessions.per_user",
            ),
            (
                "server:\n  mcp_sessions:\n    max: 0\n",
                "server.mcp_sessions.max",
            ),
            (
                "server:\n  mcp_sessions:\n    idle_timeout: 0s\n",
                "server.mcp_sessions.idle_timeout",
            ),
            (
                "server:\n  metrics_idle_timeout: 500ms\n",
                "server.metrics_idle_timeout",
            ),
        ] {
            assert_eq!(parse(text).unwrap_err().field(), field, "{text}");
        }
    }

    #[test]
    fn a_number_past_64_bits_is_refused_in_words_with_its_range() {
        let error = parse("server:\n  max_connections: 99999999999999999999\n").unwrap_err();
        assert_eq!(error.field(), "server.max_connections");
        let message = error.to_string();
        assert!(
            message.contains(
                "the number 99999999999999999999, expected a whole number from 0 to 4294967295"
            ),
            "{message}"
        );
        assert!(
            !message.contains("u128") && !message.contains("`,"),
            "{message}"
        );
    }

    #[test]
    fn listens_per_user_defaults_to_eight_and_zero_is_refused_saying_at_least_one() {
        let config = parse("server:\n  mcp_sessions:\n    per_user: 16\n").unwrap();
        assert_eq!(config.server.mcp_sessions.listens_per_user, 8);
        let config = parse("server:\n  mcp_sessions:\n    listens_per_user: 2\n").unwrap();
        assert_eq!(config.server.mcp_sessions.listens_per_user, 2);

        let zero = parse("server:\n  mcp_sessions:\n    listens_per_user: 0\n").unwrap_err();
        assert_eq!(zero.field(), "server.mcp_sessions.listens_per_user");
        assert!(zero.to_string().contains("must be at least 1"), "{zero}");
    }

    #[test]
    fn text_nested_past_the_bound_is_refused_before_it_is_parsed() {
        let deep = format!("server: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        let refused = parse(&deep).unwrap_err().to_string();
        assert!(refused.contains("nest more than 256 deep"), "{refused}");
        assert!(refused.starts_with("<config>:1"), "{refused}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let dashes = format!("tools:\n  builtin:\n    {}echo\n", "- ".repeat(300));
        assert!(
            parse(&dashes)
                .unwrap_err()
                .to_string()
                .contains("nest more")
        );
        // Brackets in quotes and comments, and a few real levels, are fine.
        let fine = "tools:\n  builtin: [echo] # [[[[\nusers:\n  - id: \"[[[[[[\"\n    key_sha256: 'a''[[['\n";
        let deep_quoted = format!("{fine}# {}\n", "[".repeat(1000));
        for text in [fine.to_owned(), deep_quoted] {
            let error = parse(&text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(!error.contains("nest more"), "{error}");
        }
    }

    #[test]
    fn a_file_past_the_size_bound_or_not_utf8_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        let line = format!("# {}\n", "x".repeat(1022));
        std::fs::write(&big, line.repeat(16 * 1024 + 1)).unwrap();
        let refused = load_file(&big).unwrap_err().to_string();
        assert!(refused.contains("over 16 MiB"), "{refused}");
        let binary = dir.path().join("binary.yaml");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        let refused = load_file(&binary).unwrap_err().to_string();
        assert!(refused.contains("not UTF-8"), "{refused}");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_or_a_device_in_the_configs_place_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("gateway.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for (path, what) in [
            (fifo.as_path(), "a pipe"),
            (Path::new("/dev/zero"), "a device"),
        ] {
            let refused = reload_file(path).unwrap_err().to_string();
            assert_eq!(
                refused,
                format!(
                    "cannot read config file {}: it is {what}, not a file: name the configuration file itself",
                    path.display()
                )
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn at_start_a_pipe_nothing_writes_to_or_a_device_is_refused_at_once() {
        use crate::config::paths::{make_fifo, within};
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("gateway.yaml");
        make_fifo(&fifo);
        let refused = within("load_file of a pipe", {
            let fifo = fifo.clone();
            move || load_file(&fifo).unwrap_err().to_string()
        });
        assert_eq!(
            refused,
            format!(
                "cannot read config file {}: it is a pipe nothing writes to (or whose writer wrote nothing): write the configuration to it first, or name the configuration file itself",
                fifo.display()
            )
        );
        let refused = within("load_file of /dev/zero", || {
            load_file(Path::new("/dev/zero")).unwrap_err().to_string()
        });
        assert!(refused.contains("it is a device, not a file"), "{refused}");
    }

    #[cfg(unix)]
    #[test]
    fn at_start_a_pipe_with_a_writer_is_read_to_its_end() {
        use crate::config::paths::{make_fifo, within};
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("gateway.yaml");
        make_fifo(&fifo);
        // The writer waits in its open until the configuration is read: `cat > fifo`.
        let writer = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::write(&fifo, "tools:\n  builtin: [echo]\n")
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        let config = within("load_file of a written pipe", move || load_file(&fifo));
        assert_eq!(config.unwrap().tools.builtin.len(), 1);
        writer.join().unwrap().unwrap();
    }

    #[test]
    fn a_header_limit_out_of_range_is_refused_with_its_field() {
        for size in ["1023", "257KiB", "1MiB", "0"] {
            let yaml = format!("server:\n  max_header_bytes: {size}\n");
            let refused = parse(&yaml).unwrap_err();
            assert_eq!(refused.field(), "server.max_header_bytes", "{size}");
            assert!(refused.to_string().contains("`256KiB`"), "{refused}");
        }
        for size in ["1KiB", "128KiB", "256KiB"] {
            let yaml = format!("server:\n  max_header_bytes: {size}\n");
            assert!(parse(&yaml).is_ok(), "{size}");
        }
    }

    #[test]
    fn an_upstream_url_that_is_not_http_and_a_zero_body_limit_are_refused() {
        for url in ["file:///etc/passwd", "javascript:alert(1)", "not a url"] {
            let yaml = format!("upstreams:\n  - name: x\n    url: \"{url}\"\n");
            let refused = parse(&yaml).unwrap_err();
            assert_eq!(refused.field(), "upstreams[0].url");
            assert!(!refused.to_string().contains(url), "{refused}");
        }
        let refused = parse("server:\n  body_limit: 0\n").unwrap_err();
        assert_eq!(refused.field(), "server.body_limit");
        for (setting, field) in [
            ("checkpoint_every: 0", "audit.checkpoint_every"),
            ("rotate_bytes: 0", "audit.rotate_bytes"),
        ] {
            let yaml = format!("audit:\n  sink: file\n  path: /tmp/a.jsonl\n  {setting}\n");
            assert_eq!(parse(&yaml).unwrap_err().field(), field);
        }
        for name in [
            "''",
            "\"a\\nwill_authorize x\"",
            "\"\\e]0;title\\a\"",
            "\"per\\u200Bcaller\"",
        ] {
            let yaml = format!("policies:\n  rate_limits:\n    - {{name: {name}, rate: 1/s}}\n");
            let refused = parse(&yaml).unwrap_err();
            assert_eq!(refused.field(), "policies.rate_limits[0].name", "{name}");
        }
        let hash = "ab".repeat(32);
        for id in [
            "\"a\\e[31mb\"",
            &"x".repeat(300),
            "\"ad\\u200Bmin\"",
            "\"nna\\u202E\"",
            "\"\\uFEFFann\"",
        ] {
            let yaml = format!("users:\n  - id: {id}\n    key_sha256: {hash}\n");
            assert_eq!(parse(&yaml).unwrap_err().field(), "users[0].id", "{id}");
        }
    }

    #[test]
    fn a_users_tenant_is_a_printable_name_or_left_out() {
        let hash = "ab".repeat(32);
        for tenant in [
            "''",
            "\"  \"",
            "\"acme\\nwill_authorize x\"",
            &"t".repeat(257),
            "\"ac\\u200Dme\"",
            "\"emca\\u202E\"",
        ] {
            let yaml =
                format!("users:\n  - id: ann\n    key_sha256: {hash}\n    tenant: {tenant}\n");
            let refused = parse(&yaml).unwrap_err();
            assert_eq!(refused.field(), "users[0].tenant", "{tenant}");
            assert!(
                refused.to_string().contains("leave `tenant:` out"),
                "{refused}"
            );
        }
        let yaml = format!("users:\n  - id: ann\n    key_sha256: {hash}\n    tenant: acme\n");
        assert_eq!(
            parse(&yaml).expect("a tenant").users[0].tenant.as_deref(),
            Some("acme")
        );
    }

    #[test]
    fn unset_environment_variables_are_named() {
        let text = "state: ${TOOLGATE_TEST_SURELY_UNSET}\n";
        let error = parse(text).unwrap_err().to_string();
        assert!(error.contains("TOOLGATE_TEST_SURELY_UNSET"), "{error}");
        assert!(error.contains("`state`"), "{error}");
    }

    #[test]
    fn a_suspensions_key_is_64_hex_characters_and_only_with_redis() {
        let with = |url: &str, key: &str| {
            parse(&format!(
                "state:\n  url: {url}\n  suspensions_key: \"{key}\"\n"
            ))
        };
        let key = "ab".repeat(32);

        assert!(with("redis://127.0.0.1:6379", &key).is_ok());
        for bad in ["abcd".to_owned(), "zz".repeat(32), "a".repeat(32)] {
            let refused = with("redis://127.0.0.1:6379", &bad).unwrap_err();
            assert_eq!(refused.field(), "state.suspensions_key", "{bad}");
            assert!(
                refused.to_string().contains("openssl rand -hex 32"),
                "{refused}"
            );
        }
        let memory = with("memory", &key).unwrap_err();
        assert_eq!(memory.field(), "state.suspensions_key");
    }

    #[test]
    fn pins_are_kept_in_a_file_or_shared_on_redis_and_said_which() {
        let with = |state: &str, pins: &str| parse(&format!("state: {state}\npins: {pins}\n"));
        let file = with("memory", "{path: /tmp/pins.json}").unwrap();
        assert!(file.pins.as_ref().unwrap().path.is_some());
        let shared = with("redis://127.0.0.1:6379", "{shared: true}").unwrap();
        assert!(shared.pins.as_ref().unwrap().shared);

        let both = with(
            "redis://127.0.0.1:6379",
            "{path: /tmp/p.json, shared: true}",
        );
        assert!(both.unwrap_err().to_string().contains("not both"));
        let neither = with("memory", "{}").unwrap_err();
        assert!(neither.to_string().contains("`path: FILE`"), "{neither}");
        let in_memory = with("memory", "{shared: true}").unwrap_err();
        assert_eq!(in_memory.field(), "pins.shared");
        assert!(in_memory.to_string().contains("state.url"), "{in_memory}");
    }

    #[test]
    fn the_generation_follows_the_policies_section_only() {
        let base = parse("users: []\npolicies:\n  approval:\n    tools: [sleep]\n").unwrap();
        let reordered =
            parse("policies: {approval: {tools: [sleep]}}\nserver:\n  request_timeout: 9s\n")
                .unwrap();
        let changed = parse("policies:\n  approval:\n    tools: [echo]\n").unwrap();

        assert!(
            base.generation.starts_with("sha256:"),
            "{}",
            base.generation
        );
        assert_eq!(base.generation, reordered.generation);
        assert_ne!(base.generation, changed.generation);
    }
}
