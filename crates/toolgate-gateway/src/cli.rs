//! The `toolgate` command line.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use toolgate_agent::format::{anthropic, gemini, mcp, openai};
use toolgate_core::User;

use crate::Extensions;
use crate::config::{AuditConfig, LogFormat, StateConfig, StateUrl, io_in_words, load_file};
use crate::gateway::Gateway;
use crate::pins::{PinFile, PinStore};
use crate::process::Process;
use crate::serve::{ServeOptions, serve, stop_signal};
use crate::state::Backends;
use crate::telemetry::Telemetry;

/// toolgate: a gateway every tool call of an AI agent passes through.
///
/// Put it in front of your tools and MCP servers, write the policies in one YAML file
/// (see docs/gateway.md), and point agents at its HTTP API or its MCP endpoint.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about, long_about)]
pub struct Cli {
    /// Log format (overrides `logging.format`).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API, /mcp, /metrics and health checks.
    ///
    /// SIGHUP reloads the file (a broken file is refused and the old one kept); SIGTERM
    /// or Ctrl-C stops accepting, lets calls in flight finish, and saves statistics.
    Serve {
        /// The configuration file.
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: PathBuf,
        /// Listen here instead of `server.listen` (e.g. 127.0.0.1:0 for any free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Serve MCP over stdin/stdout, for desktop MCP clients.
    Mcp {
        /// The configuration file.
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: PathBuf,
        /// The configured user the client acts as (default: anonymous, with no roles).
        #[arg(long)]
        user: Option<String>,
        /// The tenant of `--user`, when users of several tenants have that id (default: the
        /// user of no tenant, or the only user of that id).
        #[arg(long, requires = "user")]
        tenant: Option<String>,
    },
    /// Check the file and print, for each tool, which hooks run at which stage in order.
    Check {
        /// The configuration file.
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: PathBuf,
    },
    /// Print the tool definitions in a model provider's format.
    Tools {
        /// The configuration file.
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: PathBuf,
        /// The format.
        #[arg(long, value_enum, default_value_t = ToolFormat::Openai)]
        format: ToolFormat,
        /// Only the tools this configured user may call.
        #[arg(long)]
        user: Option<String>,
        /// The tenant of `--user`, when users of several tenants have that id (default: the
        /// user of no tenant, or the only user of that id).
        #[arg(long, requires = "user")]
        tenant: Option<String>,
    },
    /// Show the pinned tool definitions and the changes waiting (`pins:` in the file: its
    /// pin file, or the pins shared on Redis); `accept NAME…` accepts changes (a running
    /// gateway serves them after SIGHUP), `forget NAME…` removes the pins of tools gone for
    /// good.
    Pins {
        /// The configuration file.
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: PathBuf,
        /// What to do: nothing (show), `accept`, `forget` or `import`.
        #[command(subcommand)]
        action: Option<PinsAction>,
    },
    /// Check a chained audit file (`audit: {sink: file}`), or print the public key its
    /// checkpoints are signed with.
    Audit {
        /// What to do.
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Test Cedar policies and authorization rules: `test FILE` runs a table of calls
    /// and the decisions expected for them (docs/policies.md, "Testing policies").
    Policy {
        /// What to do.
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Print the SHA-256 of an API key (read from stdin) for `users[].key_sha256`.
    HashKey {
        /// Make a new random key, print it and its hash.
        #[arg(long)]
        generate: bool,
    },
}

/// What `toolgate pins` does.
#[derive(Debug, Subcommand)]
pub enum PinsAction {
    /// Accept the changed definitions of these tools (or of all of them).
    Accept {
        /// The tools.
        tools: Vec<String>,
        /// Every change waiting.
        #[arg(long, conflicts_with = "tools")]
        all: bool,
    },
    /// Forget the pins of these tools, and any change waiting for them: for tools gone
    /// for good, as pins never expire. A tool of that name offered again is pinned afresh,
    /// trusted on first use.
    Forget {
        /// The tools.
        #[arg(required = true)]
        tools: Vec<String>,
    },
    /// Bring the pins of a pin file to the shared pins (`pins: { shared: true }`), so that
    /// moving to them trusts nothing afresh: a tool pinned otherwise on Redis, and a change
    /// waiting in the file, wait there for an approver.
    Import {
        /// The pin file.
        #[arg(long)]
        from: PathBuf,
    },
}

/// What `toolgate policy` does.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Run a table of calls (who, which tool, which arguments, which transport) through
    /// the configured pipeline without running any tool, and compare each decision with
    /// the one expected: a line per case, and a non-zero exit when one fails.
    Test {
        /// The table (YAML).
        file: PathBuf,
        /// The configuration file (default: the table's `config:`).
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: Option<PathBuf>,
    },
}

/// What `toolgate audit` does.
#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Check the files' chains and checkpoints: report the first changed, missing,
    /// reordered or cut record by file, line and seq, and exit 2.
    ///
    /// With `--key`, a record counts as the gateway's only when a checkpoint with a valid
    /// signature covers it; records no signed checkpoint covers are listed, with exit 1
    /// (a running gateway signs its latest records within `checkpoint_after`). Exit 1 too
    /// when the files hold no record. Records the gateway could not write (a full disk)
    /// and declared by a gap marker in the chain are listed, with exit 3 when nothing
    /// else is wrong. Files whose chain starts past seq 1 (a rotated-out segment, an
    /// excerpt) are checked from there on and reported as an excerpt, with the hash of the
    /// record before that could not be checked, and exit 4 when nothing else is wrong. 0
    /// when every record is signed (or, without `--key`, when the hashes link up) and
    /// every chain starts at seq 1. Files are read a line at a time; a line longer than
    /// 64 MiB is refused.
    Verify {
        /// The files, a rotated series oldest first.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The public key (base64) that checks the checkpoints' signatures; without it
        /// only the hashes are checked, which anyone can recompute.
        #[arg(long)]
        key: Option<String>,
    },
    /// Print the public key of `audit.signing_key`, for `verify --key`.
    PublicKey {
        /// The configuration file.
        #[arg(long, short, env = "TOOLGATE_CONFIG")]
        config: PathBuf,
    },
}

/// Tool definition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ToolFormat {
    /// OpenAI chat completions `tools`.
    Openai,
    /// OpenAI responses `tools` (`openai_responses` is accepted too, as in the HTTP API).
    #[value(alias = "openai_responses")]
    OpenaiResponses,
    /// Anthropic messages `tools`.
    Anthropic,
    /// Gemini `tools`.
    Gemini,
    /// MCP `tools/list` result.
    Mcp,
}

/// Runs the command line; the process's exit code.
pub fn main() -> ExitCode {
    main_with(Extensions::default())
}

/// The `toolgate` command line with hooks of your own: every subcommand builds its
/// pipeline with them (see [`Extensions`]). A `main.rs` of three lines makes your own
/// `toolgate` binary.
pub fn main_with(extensions: Extensions) -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            complain(format_args!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, extensions)) {
        Ok(code) => code,
        Err(message) => {
            complain(format_args!("{message}"));
            ExitCode::from(2)
        }
    }
}

/// Runs `work` — a command's start of its upstreams, or all of a short command — unless a
/// stop signal (Ctrl-C, SIGTERM) comes first: then `work` is dropped, with the upstreams
/// it started and the programs they started (each program's process group ends with its
/// connection), and the command fails saying so. Without this, the signal's default ended
/// the process at once, and a stdio upstream's program, in a process group of its own,
/// was left to notice its stdin closing.
async fn until_stopped<T, E: std::fmt::Display>(
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    tokio::select! {
        done = work => done.map_err(|e| e.to_string()),
        () = stop_signal() => Err("stopped by a signal before it finished".to_owned()),
    }
}

async fn run(cli: Cli, extensions: Extensions) -> Result<ExitCode, String> {
    let done = match cli.command {
        Command::Serve { config, listen } => {
            let file = load_file(&config).map_err(|e| e.to_string())?;
            let telemetry = start_telemetry(&file)?;
            crate::logging::init(
                cli.log_format.unwrap_or(file.logging.format),
                &file.logging.level,
                telemetry.as_ref().map(Telemetry::tracer),
            );
            let served = serve(
                file,
                ServeOptions {
                    config,
                    listen,
                    extensions,
                },
            )
            .await
            .map_err(|e| e.to_string());
            if let Some(telemetry) = telemetry {
                telemetry.shutdown().await;
            }
            served
        }
        Command::Mcp {
            config,
            user,
            tenant,
        } => {
            let file = load_file(&config).map_err(|e| e.to_string())?;
            let telemetry = start_telemetry(&file)?;
            crate::logging::init(
                cli.log_format.unwrap_or(file.logging.format),
                &file.logging.level,
                telemetry.as_ref().map(Telemetry::tracer),
            );
            // Without `--user`, calls are the anonymous user's, as `McpServer` has it.
            let user = match user.as_deref() {
                Some(id) => Some(configured_user(&file, id, tenant.as_deref())?),
                None => None,
            };
            for warning in file.warnings() {
                tracing::warn!("{warning}");
            }
            let served = async {
                let gateway = Process::start(file, extensions)
                    .await
                    .map_err(|e| e.in_file(&config).to_string())?
                    .current();
                let server = toolgate_mcp::McpServer::new(gateway.pipeline().clone())
                    .server_info("toolgate", env!("CARGO_PKG_VERSION"));
                let server = match user {
                    Some(user) => server.default_user(user),
                    None => server,
                };
                server.serve_stdio().await.map_err(|e| e.to_string())
            };
            // A stop signal ends the server as its client closing stdin does: the
            // upstreams are dropped, and the programs they started with them.
            let served = tokio::select! {
                served = served => served,
                () = stop_signal() => Ok(()),
            };
            if let Some(telemetry) = telemetry {
                telemetry.shutdown().await;
            }
            served
        }
        Command::Check { config } => until_stopped(check(&config, &extensions)).await,
        Command::Tools {
            config,
            format,
            user,
            tenant,
        } => {
            let mut file = load_file(&config).map_err(|e| e.to_string())?;
            // Listing needs no shared state: do not connect to Redis for it.
            file.state = StateConfig::default();
            let user = match user {
                Some(id) => Some(configured_user(&file, &id, tenant.as_deref())?),
                None => None,
            };
            let started = async {
                Process::start(file, extensions)
                    .await
                    .map_err(|e| e.in_file(&config).to_string())
            };
            let gateway = until_stopped(started).await?.current();
            for warning in gateway.tool_warnings() {
                complain(format_args!("warning: {warning}"));
            }
            let tools = match &user {
                Some(user) => gateway.visible_tools(user),
                None => gateway.pipeline().definitions().cloned().collect(),
            };
            let listed = match format {
                ToolFormat::Openai => openai::chat_tools(&tools),
                ToolFormat::OpenaiResponses => openai::responses_tools(&tools),
                ToolFormat::Anthropic => anthropic::tools(&tools),
                ToolFormat::Gemini => gemini::tools(&tools),
                ToolFormat::Mcp => mcp::tools_list(&tools),
            };
            print_json(&listed)
        }
        Command::Pins { config, action } => pins(&config, action).await,
        Command::Audit { action } => return audit(action),
        Command::Policy { action } => return policy(action, &extensions).await,
        Command::HashKey { generate } => hash_key(generate),
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// `toolgate policy test`: exit 1 when a case fails, 2 (an error) when the table or the
/// configuration cannot be used.
async fn policy(action: PolicyAction, extensions: &Extensions) -> Result<ExitCode, String> {
    let PolicyAction::Test { file, config } = action;
    let report = crate::policy_test::run_table(&file, config.as_deref(), extensions)
        .await
        .map_err(|e| e.to_string())?;
    say(format_args!("{report}"));
    Ok(if report.failed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The trace exporter, when the configuration has a `telemetry` section.
fn start_telemetry(config: &crate::config::Config) -> Result<Option<Telemetry>, String> {
    (config.telemetry.as_ref())
        .map(Telemetry::start)
        .transpose()
        .map_err(|e| e.to_string())
}

/// The user of `--user` and `--tenant`: a user id is unique only within its tenant.
fn configured_user(
    config: &crate::config::Config,
    id: &str,
    tenant: Option<&str>,
) -> Result<User, String> {
    config
        .user_named(id, tenant)
        .map(crate::config::UserEntry::user)
        .map_err(|e| match e {
            crate::config::UserNotFound::Unknown { .. } => e.to_string(),
            _ => format!("{e} (`--tenant`)"),
        })
}

async fn check(path: &std::path::Path, extensions: &Extensions) -> Result<(), String> {
    let mut file = load_file(path).map_err(|e| e.to_string())?;
    file.check_paths()
        .map_err(|e| e.in_file(path).to_string())?;
    let mut warnings = file.warnings();
    // The statistics file is the running gateway's: check neither reads it into a gateway
    // nor moves a damaged one aside.
    file.stats = None;
    // So is the audit file, which the gateway serving it holds locked: check builds the
    // audit hook with the same options on the log sink, and never opens the file.
    if let Some(AuditConfig::File {
        include_values,
        stage_timings,
        hash_key,
        ..
    }) = file.audit.take()
    {
        file.audit = Some(AuditConfig::Log {
            include_values,
            stage_timings,
            hash_key,
        });
    }
    let shared_state = file.state.target() != StateUrl::Memory;
    let state = match file.state.target() {
        StateUrl::Memory => "memory".to_owned(),
        target => format!("{} (not contacted by check)", target.describe()),
    };
    file.state = StateConfig::default();
    let pins = pins_summary(file.pins.as_ref());
    if file.pins.as_ref().is_some_and(|p| p.shared) {
        // Shared pins are on the state's Redis, which check does not contact.
        file.pins = None;
    }
    let gateway = Process::start(file, extensions.clone())
        .await
        .map_err(|e| e.in_file(path).to_string())?
        .current();
    warnings.extend(crate::gateway::unreadable_outcomes_warning(&gateway));
    if let Some(cedar) = gateway.cedar_policies() {
        warnings.extend(cedar.warnings().iter().cloned());
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{}: OK — {}, {}, state: {state}\n",
        path.display(),
        counted(gateway.pipeline().registry().len(), "tool"),
        counted(gateway.keys.len(), "user")
    ));
    out.push_str(&pins);
    out.push_str(&identity_summary(&gateway, shared_state));
    for (tool, plan) in gateway.plans() {
        let definition = gateway
            .pipeline()
            .registry()
            .get(&tool)
            .map(|r| r.definition.clone());
        let tags = definition
            .as_ref()
            .map(|d| d.tags.join(", "))
            .unwrap_or_default();
        out.push_str(&format!("\n{tool}"));
        if !tags.is_empty() {
            out.push_str(&format!("  [{tags}]"));
        }
        out.push('\n');
        match gateway.checks_arguments(&tool) {
            Some(true) => out.push_str(
                "  arguments checked against the upstream's input schema before the call leaves\n",
            ),
            Some(false) => out.push_str(
                "  arguments NOT checked before the call leaves (validate_arguments is off, or the upstream's schema is not a valid JSON Schema)\n",
            ),
            None => {}
        }
        for (stage, hooks) in plan {
            out.push_str(&format!("  {:<27} {}\n", stage.name(), hooks.join(" → ")));
        }
        for line in crate::gateway::describe_budgets(&gateway.config.policies.budgets, &tool) {
            out.push_str(&format!("  {line}\n"));
        }
        out.push_str(&crate::policy_test::check_lines(&gateway, &tool));
    }
    say(format_args!("{}", out.trim_end_matches('\n')));
    for warning in warnings {
        complain(format_args!("warning: {warning}"));
    }
    for warning in gateway.tool_warnings() {
        complain(format_args!("warning: {warning}"));
    }
    Ok(())
}

/// Where the pins of imported tools are kept: a line of `toolgate check`, so that an
/// operator of several replicas sees whether they share their pins.
fn pins_summary(pins: Option<&crate::config::PinsConfig>) -> String {
    match pins.map(|p| &p.path) {
        None => String::new(),
        Some(Some(path)) => format!(
            "  pins: in {}, this gateway's own (replicas that do not share the file pin, hold back and accept on their own)\n",
            path.0.display()
        ),
        Some(None) => "  pins: shared on Redis with the policies' state, not contacted by check (a change is held back by every replica, and accepted once for all)\n".to_owned(),
    }
}

/// The limit on wrong credentials, and how a request's client is told: a line of
/// `toolgate check`, so that an operator behind a load balancer sees whether the clients
/// will be told apart or all share the balancer's allowance; `shared_state` when the
/// configuration's `state` is on Redis (which check itself does not contact).
fn failed_credentials_summary(config: &crate::config::Config, shared_state: bool) -> String {
    let failed = &config.identity.failed_credentials;
    if failed.max == 0 {
        return "  wrong credentials: not limited (identity.failed_credentials.max is 0)\n"
            .to_owned();
    }
    let proxies = &config.server.trusted_proxies;
    let clients = if proxies.is_empty() {
        "the client is the connection's peer (no server.trusted_proxies)".to_owned()
    } else {
        let list: Vec<String> = proxies.iter().map(ToString::to_string).collect();
        format!(
            "the client is the connection's peer, or, from {}, the address X-Forwarded-For names",
            list.join(", ")
        )
    };
    let shared = if shared_state {
        ", counted together by every replica on the state's Redis"
    } else {
        ""
    };
    format!(
        "  wrong credentials: {} per client address in a burst, then one every {}{shared}; {clients}\n",
        failed.max,
        humantime::format_duration(failed.per / failed.max)
    )
}

/// The console's sign-in and where its sessions are kept: a line of `toolgate check`, so
/// that an operator sees whether a restart signs everyone out (in this process) or every
/// replica shares the sessions (`shared_state`: `state` on Redis).
fn console_summary(gateway: &Gateway, shared_state: bool) -> String {
    use crate::config::CredentialKind;
    use crate::identity::Route;

    let Some(console) = &gateway.config.console else {
        return "  console: off\n".to_owned();
    };
    // The console signs a person in as `/v1` would take them.
    let identity = &gateway.identity;
    let mut ways = Vec::new();
    if identity.accepts(Route::V1, CredentialKind::ApiKey) {
        ways.push("API keys".to_owned());
    }
    if let (Some(client), Some(oauth)) = (&console.oauth, identity.oauth()) {
        ways.push(format!(
            "through {} as client `{}`",
            oauth.issuer.0, client.client_id
        ));
    }
    let sign_in = if ways.is_empty() {
        "but nobody can sign in (`/v1` takes no API key and `console.oauth` is not set)".to_owned()
    } else {
        format!("sign-in with {}", ways.join(", or "))
    };
    let kept = if shared_state {
        "kept on Redis with the policies' state (every replica shares them, and a restart signs nobody out)"
    } else {
        "kept in this process's memory (a restart signs everyone out)"
    };
    format!(
        "  console: /console, {sign_in}; sessions last {}, at most {} ({} per user), {kept}\n",
        humantime::format_duration(console.session_ttl),
        console.max_sessions,
        console.max_sessions_per_user,
    )
}

/// `count` and `noun`, plural unless it is one: "1 user", "2 users", "0 users".
fn counted(count: usize, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}

/// Which credentials each route accepts, and what each upstream receives: the identity
/// part of `toolgate check` (`shared_state`: the configuration's `state` is on Redis).
fn identity_summary(gateway: &Gateway, shared_state: bool) -> String {
    use crate::config::CredentialKind;
    use crate::identity::{Route, metadata};

    let identity = &gateway.identity;
    let mut out = String::from("\nidentity\n");
    for (route, path) in [(Route::V1, "/v1"), (Route::Mcp, "/mcp")] {
        if route == Route::Mcp && gateway.mcp.is_none() {
            out.push_str("  /mcp   not served (server.mcp is off)\n");
            continue;
        }
        let mut kinds = Vec::new();
        for kind in identity.accepted(route) {
            match (kind, identity.oauth()) {
                (CredentialKind::ApiKey, _) => {
                    kinds.push(format!(
                        "API keys ({})",
                        counted(gateway.keys.len(), "user")
                    ));
                }
                (CredentialKind::Oauth, Some(oauth)) => {
                    let required = match route {
                        Route::V1 => &oauth.required_scopes.v1,
                        Route::Mcp => &oauth.required_scopes.mcp,
                    };
                    let mut text = format!(
                        "OAuth tokens from {} for {} ({})",
                        oauth.issuer.0,
                        metadata::resource(oauth, route),
                        oauth
                            .algorithms
                            .iter()
                            .map(|a| format!("{:?}", a.0))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    if !required.is_empty() {
                        text.push_str(&format!(", scopes required: {}", required.join(" ")));
                    }
                    kinds.push(text);
                }
                (CredentialKind::Oauth, None) => {}
            }
        }
        out.push_str(&format!("  {path:<6} {}\n", kinds.join("; or ")));
    }
    if let Some(oauth) = identity.oauth() {
        out.push_str(&format!(
            "  metadata: {} and {}\n",
            metadata::metadata_url(oauth, Route::V1),
            metadata::metadata_url(oauth, Route::Mcp)
        ));
    }
    out.push_str(&failed_credentials_summary(&gateway.config, shared_state));
    out.push_str(&console_summary(gateway, shared_state));
    for upstream in &gateway.config.upstreams {
        let shared = match &upstream.credential_env {
            Some(var) => format!("a static bearer credential from ${var}"),
            None => "no credential".to_owned(),
        };
        let credential = match upstream.as_caller.as_ref() {
            None => format!("{shared}, the same for every caller"),
            Some(as_caller) => {
                let each = match &as_caller.token_exchange {
                    Some(exchange) => format!(
                        "the caller's token exchanged at the issuer for one with audience {}",
                        exchange.audience.0
                    ),
                    None => {
                        let fixed: Vec<_> = as_caller.fixed_credentials().collect();
                        let tenanted = fixed.iter().filter(|(t, _, _)| t.is_some()).count();
                        format!(
                            "a fixed credential per user ({}, {tenanted} of them in a tenant; a caller gets only an entry of its own tenant, others are refused)",
                            counted(fixed.len(), "user")
                        )
                    }
                };
                format!(
                    "as each caller: {each}, on a connection per caller; discovery with {shared}"
                )
            }
        };
        out.push_str(&format!(
            "  upstream {}: {credential}; a caller's own token is never forwarded\n",
            upstream.name
        ));
        let refused: Vec<&str> = gateway
            .refused_waiting
            .iter()
            .filter(|(_, of)| **of == upstream.name)
            .map(|(tool, _)| tool.as_str())
            .collect();
        if !refused.is_empty() {
            out.push_str(&format!(
                "    refused instead of waiting for approval (a waiting call keeps no token to exchange): {}\n",
                refused.join(", ")
            ));
        }
    }
    out
}

async fn pins(path: &std::path::Path, action: Option<PinsAction>) -> Result<(), String> {
    let file = load_file(path).map_err(|e| e.to_string())?;
    let config = file
        .pins
        .as_ref()
        .ok_or("the configuration has no `pins:` section: add `pins: { path: … }` (or `pins: { shared: true }` with `state` on Redis) to pin imported tool definitions")?;
    let store = match &config.path {
        Some(path) => PinStore::File(path.0.clone()),
        None => Backends::connect(&file.state, 1)
            .await
            .map_err(|e| e.to_string())?
            .pin_store(config)
            .map_err(|e| e.to_string())?,
    };
    if let Some(PinsAction::Import { from }) = &action {
        let file = PinFile::load(from).map_err(|e| e.to_string())?;
        let imported = store.import(&file).await.map_err(|e| e.to_string())?;
        say(format_args!("{imported}"));
        return Ok(());
    }
    if let Some(PinsAction::Forget { tools }) = &action {
        for tool in tools {
            store.forget(tool).await.map_err(|e| e.to_string())?;
            say(format_args!("forgotten: {tool}"));
        }
        say(format_args!(
            "a tool of that name offered again is pinned afresh (trust on first use) at a running gateway's next reload"
        ));
        return Ok(());
    }
    let list = store.read().await.map_err(|e| e.to_string())?;
    if let Some(PinsAction::Accept { tools, all }) = action {
        let tools: Vec<String> = if all {
            list.pending.keys().cloned().collect()
        } else {
            tools
        };
        if tools.is_empty() {
            return Err("name the tools to accept, or give --all".to_owned());
        }
        for tool in &tools {
            store.accept(tool).await.map_err(|e| e.to_string())?;
            say(format_args!("accepted: {tool}"));
        }
        say(format_args!(
            "a running gateway serves them after a reload (SIGHUP)"
        ));
        return Ok(());
    }
    say(format_args!(
        "{}: {} pinned, {} changed",
        store.describe(),
        list.pins.len(),
        list.pending.len()
    ));
    for (tool, pin) in &list.pins {
        say(format_args!("PINNED {tool}: {}", pin.fingerprint));
    }
    for (tool, change) in &list.pending {
        say(format_args!(
            "\nCHANGED {tool}: {} -> {}",
            change.pinned, change.offered
        ));
        let before = list.pins.get(tool).map(|p| &p.definition);
        for (field, now) in change.definition.as_object().into_iter().flatten() {
            let was = before.and_then(|b| b.get(field));
            if was != Some(now) {
                say(format_args!(
                    "  {field}:\n    was: {}\n    now: {now}",
                    was.map_or("(absent)".to_owned(), ToString::to_string)
                ));
            }
        }
    }
    Ok(())
}

/// `toolgate audit`. `verify` exits 0 when the chains are unbroken (and, with `--key`,
/// every record is covered by a signed checkpoint), 1 when they are unbroken but records
/// are left unsigned or there are none, 3 when they are unbroken and signed but hold gaps
/// the gateway declared (records lost to a full disk), 4 when they are unbroken, signed
/// and without gaps but some chain starts past seq 1 (an excerpt: its first link not
/// checked), 2 (an error) when a record was changed, removed, reordered or cut, a gap
/// marker was forged, or a file cannot be read.
fn audit(action: AuditAction) -> Result<ExitCode, String> {
    use toolgate_hooks::audit::CheckpointPublicKey;
    use toolgate_hooks::audit::verify::Verifier;
    match action {
        AuditAction::Verify { files, key } => {
            let key = key
                .map(|k| CheckpointPublicKey::from_base64(&k))
                .transpose()
                .map_err(|e| format!("--key: {e}"))?;
            // A line at a time: a file of any size, never all of it in memory.
            let mut verifier = Verifier::new(key.as_ref());
            for path in &files {
                let cannot = |e: std::io::Error| {
                    format!("cannot read `{}`: {}", path.display(), io_in_words(&e))
                };
                let file = std::fs::File::open(path).map_err(cannot)?;
                verifier
                    .read(
                        path.display().to_string(),
                        std::io::BufReader::with_capacity(1 << 16, file),
                    )
                    .map_err(cannot)?;
            }
            let verified = verifier.finish().map_err(|e| e.to_string())?;
            let code = if verified.records == 0 || !verified.unsigned.is_empty() {
                1
            } else if !verified.gaps.is_empty() {
                3
            } else if !verified.excerpts.is_empty() {
                4
            } else {
                0
            };
            // The verdict is the exit code, whether the report is read to its end or not
            // (`| head`).
            say_else_exit(format_args!("{verified}"), code);
            Ok(ExitCode::from(code))
        }
        AuditAction::PublicKey { config } => {
            let file = load_file(&config).map_err(|e| e.to_string())?;
            let seed = file
                .audit
                .as_ref()
                .and_then(crate::config::AuditConfig::signing_key)
                .ok_or_else(|| {
                    format!(
                        "{} has no `audit.signing_key`: add one to the `file` sink to sign checkpoints",
                        config.display()
                    )
                })?;
            let key = toolgate_hooks::audit::CheckpointKey::from_base64(&seed.0)
                .map_err(|e| format!("audit.signing_key: {e}"))?;
            say(format_args!("{}", key.public_key()));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn hash_key(generate: bool) -> Result<(), String> {
    let key = if generate {
        let key = crate::auth::generate_key().map_err(|e| format!("cannot generate a key: {e}"))?;
        say(format_args!("key:        {key}"));
        key
    } else {
        // A key is a line of a few dozen characters: what is past 64 KiB is not one.
        let mut line = String::new();
        std::io::Read::take(std::io::stdin().lock(), 64 * 1024)
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the key from stdin: {e}"))?;
        if line.len() >= 64 * 1024 {
            return Err(
                "the key on stdin is longer than 64 KiB: give the key itself, on one line"
                    .to_owned(),
            );
        }
        let key = line.trim().to_owned();
        if key.is_empty() {
            return Err(
                "give the key on stdin, e.g. `echo -n $KEY | toolgate hash-key`".to_owned(),
            );
        }
        key
    };
    let hash = crate::auth::hash_key(&key);
    if generate {
        say(format_args!("key_sha256: {hash}"));
    } else {
        say(format_args!("{hash}"));
    }
    Ok(())
}

fn print_json(value: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    say(format_args!("{text}"));
    Ok(())
}

/// Writes `text` and a line feed to stdout. When the reader went away (`toolgate tools |
/// head`), the command ends there, quietly and successfully, as Unix tools do; when stdout
/// fails otherwise, it ends with the reason on stderr.
fn say(text: std::fmt::Arguments<'_>) {
    say_else_exit(text, 0);
}

/// [`say`], exiting with `closed` when the reader of the output has gone (a broken pipe):
/// for a command whose exit code is its answer.
fn say_else_exit(text: std::fmt::Arguments<'_>, closed: u8) {
    let written = writeln!(std::io::stdout().lock(), "{}", visible(text));
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(closed));
        }
        complain(format_args!("cannot write the output: {e}"));
        std::process::exit(2);
    }
}

/// Writes `toolgate: {text}` to stderr; nothing when stderr is gone too.
fn complain(text: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "toolgate: {}", visible(text));
}

/// `text` with its control characters escaped, line by line (`\u001b` for an escape), as
/// the log's are: a name from a file or an upstream cannot move the cursor, recolour or
/// retitle the terminal, or forge a line.
fn visible(text: std::fmt::Arguments<'_>) -> String {
    let text = text.to_string();
    let lines: Vec<String> = text
        .split('\n')
        .map(
            |line| match crate::logging::escape_controls(line.as_bytes(), false) {
                Some(escaped) => String::from_utf8_lossy(&escaped).into_owned(),
                None => line.to_owned(),
            },
        )
        .collect();
    lines.join("\n")
}
