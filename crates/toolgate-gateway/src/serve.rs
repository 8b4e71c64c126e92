//! `toolgate serve`: the HTTP server, with reload on SIGHUP and a graceful drain on
//! SIGTERM / SIGINT (see [`serve`] for the drain, step by step).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[cfg(not(unix))]
use no_unix_signals::{Signal, SignalKind, signal};
use tokio::net::TcpListener;
#[cfg(unix)]
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Extensions;
use crate::config::{Config, reload_file};
use crate::connections::{self, ConnectionLimits, Phase};
use crate::console::counters::FLUSH_EVERY;
use crate::drain::{Drain, ExplainCut};
use crate::gateway::GatewayError;
use crate::http::{AppState, router};
use crate::process::Process;
use crate::prometheus::{self, Upkeep};

/// Where there are no Unix signals (Windows): no SIGTERM or SIGHUP ever arrives, so the
/// gateway stops on Ctrl-C only, and a new configuration takes a restart.
#[cfg(not(unix))]
mod no_unix_signals {
    /// A signal that never arrives.
    pub(super) struct Signal;

    impl Signal {
        pub(super) async fn recv(&mut self) -> Option<()> {
            std::future::pending().await
        }
    }

    pub(super) struct SignalKind;

    impl SignalKind {
        pub(super) fn terminate() -> Self {
            Self
        }

        pub(super) fn hangup() -> Self {
            Self
        }
    }

    pub(super) fn signal(_: SignalKind) -> std::io::Result<Signal> {
        Ok(Signal)
    }
}

/// What `serve` needs besides the configuration.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The file the configuration was read from: named in errors, and read again on
    /// SIGHUP.
    pub config: PathBuf,
    /// Overrides `server.listen`.
    pub listen: Option<SocketAddr>,
    /// Hooks of your own beside the configured policies (kept across reloads).
    pub extensions: Extensions,
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration could not be used.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The address could not be bound, or the server failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl From<crate::config::ConfigError> for ServeError {
    fn from(e: crate::config::ConfigError) -> Self {
        ServeError::Gateway(GatewayError::Config(e))
    }
}

/// Runs the gateway of `config`, read from the file `options.config`, until SIGTERM or
/// SIGINT, then drains and exits.
///
/// The file is not read again before a SIGHUP: the caller reads it once, and starts its
/// logging and telemetry exporter from the same `config`, so that a file rewritten
/// during the start (a deploy) cannot give the process its telemetry from one version
/// and the rest from another — and a file that can be read only once (a pipe, such as
/// `<(envsubst < gateway.yaml)`) can be served.
///
/// Signals are listened for from the start: a SIGHUP that comes while the gateway starts
/// (connecting to Redis and its upstreams) reloads the file once it has started, and a
/// SIGTERM or SIGINT then stops the start and returns `Ok`.
///
/// The drain, in order:
///
/// 1. **Drain starts.** `/readyz` answers 503 `{"status": "draining"}` so that load
///    balancers and Kubernetes stop sending; connections are still accepted, so that
///    `/healthz` and `/readyz` stay reachable (the connection cap and timeouts still
///    hold). New requests to `/v1` and `/mcp` are refused at once with 503
///    `shutting_down` and `Retry-After: 1`: the caller should go to another replica.
///    Every answer from now on carries `Connection: close`, and idle kept-alive
///    connections are closed, so that clients move away. Calls in flight go on.
/// 2. **The calls in flight finish**, for up to `server.shutdown_grace`. When the last one
///    has been answered, the gateway goes on to step 4 at once.
/// 3. **The grace ends with calls still running.** Each is cancelled through its pipeline
///    cancellation token, so its tail runs — `on_error`, the audit record, the releases —
///    and its caller is answered 503 `shutting_down` ("the gateway shut down before the
///    call finished: it may or may not have had effects…"), without `Retry-After`; an MCP
///    `tools/call` gets a tool result with `isError: true` saying the same. The gateway
///    waits up to 2 s for those answers to be sent.
/// 4. **Stop.** No more connections are accepted; open ones close once their answer is
///    sent (for at most 2 s more). The audit sinks are flushed, the approval webhooks
///    still queued get up to 2 s to be delivered, the usage statistics saved, and the
///    function returns `Ok` (the process exits 0).
///
/// # Errors
///
/// [`ServeError`] when the configuration cannot be used at start or the address cannot be
/// bound. Errors in a configuration read on SIGHUP are logged and the old configuration is
/// kept.
pub async fn serve(config: Config, options: ServeOptions) -> Result<(), ServeError> {
    // What `check` finds on the file system stops the start too: statistics that could
    // never be saved would otherwise be lost at the first shutdown, said only then.
    config
        .check_paths()
        .map_err(|e| e.in_file(&options.config))?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let idle_timeout = config.server.metrics_idle_timeout;
    let metrics = prometheus::install(idle_timeout);
    // Stops with this function, on every path out of it.
    let _upkeep = metrics
        .clone()
        .map(|handle| Upkeep::start(handle, prometheus::UPKEEP_INTERVAL, idle_timeout));
    // The drain's hook goes with the extensions, so that every configuration has it.
    let drain_state = Drain::new();
    let extensions = options
        .extensions
        .clone()
        .hook(ExplainCut(drain_state.clone()));
    // Listen for signals before anything else: a start connects to Redis and to every
    // upstream, which can take their `connect_timeout`s, and a SIGHUP sent meanwhile (a
    // configuration push to every replica) must not meet the default action, which ends
    // the process. It is kept, and reloads the file once the start is done; a SIGTERM
    // (or Ctrl-C) stops the start.
    let mut term = signal(SignalKind::terminate());
    let hangups = signal(SignalKind::hangup());
    let started = tokio::select! {
        started = Process::start(config, extensions) => started,
        () = wait_for_stop(&mut term) => {
            tracing::info!("stopped while starting");
            return Ok(());
        }
    };
    let process = Arc::new(started.map_err(|e| e.in_file(&options.config))?);
    let gateway = process.current();
    let listen = options.listen.unwrap_or(gateway.config.server.listen);
    let grace = gateway.config.server.shutdown_grace;
    let limits = ConnectionLimits::from(&gateway.config.server);
    let trusted_proxies = gateway.config.server.trusted_proxies.clone();
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Io {
            what: format!("cannot listen on {listen} (set `server.listen` or `--listen`)"),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| ServeError::Io {
        what: "reading the listening address".to_owned(),
        source,
    })?;
    let stop_saving = CancellationToken::new();
    let saving = tokio::spawn(save_stats(Arc::clone(&process), stop_saving.clone()));
    tracing::info!(
        address = %local,
        tools = gateway.pipeline().registry().len(),
        users = gateway.keys.len(),
        "toolgate gateway listening"
    );
    // A stable line on stdout for scripts and tests that start the gateway on port 0.
    println!("toolgate listening on http://{local}");

    drop(gateway);
    let state = AppState::new(&process, metrics, drain_state);
    let reloads = tokio::spawn(reload_on_hangup(
        hangups,
        options.config.clone(),
        Arc::clone(&process),
    ));
    let stop_sharing = CancellationToken::new();
    let sharing = tokio::spawn(share_counters(Arc::clone(&process), stop_sharing.clone()));

    let (phase, phases) = watch::channel(Phase::Serving);
    let server = tokio::spawn(connections::serve(
        listener,
        router(state.clone()),
        limits,
        trusted_proxies,
        phases,
    ));
    wait_for_stop(&mut term).await;
    drain(&state.drain, &phase, grace).await;
    stop(server, &phase).await;
    reloads.abort();
    // Stopped between two additions, never in one: the last is then made here.
    stop_sharing.cancel();
    let _ = sharing.await;
    process.current().share_counters().await;
    process.current().flush_audit().await;
    let shared = process.shared().await;
    // Decisions taken during the drain are still told, if their receivers answer soon.
    shared.notifications.shutdown(ANSWER_WAIT).await;
    stop_saving.cancel();
    let _ = saving.await;
    if let Some(stats) = &shared.stats
        && let Err(e) = stats.save()
    {
        tracing::warn!(error = %e, "saving usage statistics at shutdown failed");
    }
    tracing::info!("toolgate gateway stopped");
    Ok(())
}

/// How long the callers of the calls cut at the end of the grace have to get their
/// answers, and then how long open connections have to close.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Steps 1 to 3 of the drain (see [`serve`]): returns when every call in flight has been
/// answered, or [`ANSWER_WAIT`] after the grace ended without it.
async fn drain(drain: &Drain, phase: &watch::Sender<Phase>, grace: Duration) {
    drain.start();
    phase.send_replace(Phase::Draining);
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        calls = drain.calls_in_flight(),
        "shutting down: refusing new calls, letting the calls in flight finish"
    );
    if tokio::time::timeout(grace, drain.calls_finished())
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        calls = drain.calls_in_flight(),
        "shutdown grace expired: cancelling the calls still in flight"
    );
    drain.cut();
    if tokio::time::timeout(ANSWER_WAIT, drain.calls_finished())
        .await
        .is_err()
    {
        tracing::warn!(
            calls = drain.calls_in_flight(),
            wait_ms = ANSWER_WAIT.as_millis() as u64,
            "calls cut at shutdown were not answered in time; closing their connections"
        );
    }
}

/// Step 4 of the drain: stops accepting, and gives the open connections up to
/// [`ANSWER_WAIT`] to close (those still open then close with the process).
async fn stop(server: JoinHandle<()>, phase: &watch::Sender<Phase>) {
    phase.send_replace(Phase::Closing);
    if tokio::time::timeout(ANSWER_WAIT, server).await.is_err() {
        tracing::warn!(
            wait_ms = ANSWER_WAIT.as_millis() as u64,
            "connections still open at shutdown are closed"
        );
    }
}

/// Waits for SIGTERM or SIGINT (Ctrl-C), listening for both from its first poll: the
/// stop of the commands other than `serve` that start upstreams (`mcp`, `tools`, `check`).
pub(crate) async fn stop_signal() {
    wait_for_stop(&mut signal(SignalKind::terminate())).await;
}

async fn wait_for_stop(term: &mut std::io::Result<Signal>) {
    let term = match term {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

async fn reload_on_hangup(hangups: std::io::Result<Signal>, path: PathBuf, process: Arc<Process>) {
    let mut hangups = match hangups {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP; configuration reload is off");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        tracing::info!(config = %path.display(), "SIGHUP received: reloading the configuration");
        match reload(&path, &process).await {
            Ok(()) => {
                tracing::info!("configuration reloaded; calls in flight finish on the old one");
            }
            Err(e) => tracing::error!(
                error = %e,
                "the new configuration was refused; still serving with the previous one"
            ),
        }
    }
}

/// Adds this replica's per-tool counters to every replica's, now and then, with the state
/// on Redis (whichever configuration serves).
async fn share_counters(process: Arc<Process>, stop: CancellationToken) {
    let mut every = tokio::time::interval(FLUSH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => process.current().share_counters().await,
            () = stop.cancelled() => return,
        }
    }
}

/// Saves the usage statistics every `stats.autosave` until `stop`, both as the gateway is
/// configured now: after a reload that moved `stats.path`, the new file is the one saved
/// (the old one had its last save when the reload let go of it).
async fn save_stats(process: Arc<Process>, stop: CancellationToken) {
    // How soon to look again while statistics are off: a reload may turn them on.
    const WHILE_OFF: Duration = Duration::from_secs(30);
    loop {
        let every = process
            .current()
            .config
            .stats
            .as_ref()
            .map_or(WHILE_OFF, |stats| stats.autosave);
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        if let Some(stats) = &process.shared().await.stats
            && let Err(e) = stats.save()
        {
            tracing::warn!(error = %e, "saving usage statistics failed; will retry");
        }
    }
}

/// Reads the file at `path` again, and swaps in the gateway built from it.
async fn reload(path: &Path, process: &Process) -> Result<(), ServeError> {
    let config = reload_file(path)?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let (new, old) = (&config.server, &process.current().config.server);
    if new.listen != old.listen
        || new.body_limit != old.body_limit
        || new.max_header_bytes != old.max_header_bytes
        || new.max_connections != old.max_connections
        || new.max_connections_per_address != old.max_connections_per_address
        || new.trusted_proxies != old.trusted_proxies
        || new.header_timeout != old.header_timeout
        || new.body_timeout != old.body_timeout
        || new.idle_timeout != old.idle_timeout
    {
        tracing::warn!(
            "`server.listen`, `body_limit`, `max_header_bytes`, `max_connections`, \
             `max_connections_per_address` and the connection timeouts take effect on \
             restart only (and `trusted_proxies`, for the connections exempt from \
             `max_connections_per_address`)"
        );
    }
    let exports_alike = match (process.exporting(), &config.telemetry) {
        (Some(running), Some(new)) => running.exports_like(new),
        (running, new) => running.is_none() && new.is_none(),
    };
    if !exports_alike {
        tracing::warn!(
            "`telemetry` takes effect on restart only, but for `capture_arguments`, \
             `capture_results` and `stage_spans`: traces and audit logs are still exported \
             as the gateway started (collector, headers, sampling, `logs`)"
        );
    }
    process.reload(config).await.map_err(|e| e.in_file(path))?;
    Ok(())
}
