//! Starting the real `toolgate` binary on a free loopback port, and talking to it.
//!
//! Every test writes its own configuration into a temporary directory, starts the binary
//! with `--listen 127.0.0.1:0`, and reads the one stdout line that tells the port. The
//! [`Gateway`] guard kills the process when dropped, so a failing test leaks nothing.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use toolgate_gateway::auth::hash_key;

/// How long a gateway may take to start on a loaded machine (the first start may also
/// wait for the binary to be paged in).
pub const STARTUP: Duration = Duration::from_secs(60);

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// The shipped example configuration.
pub const EXAMPLE_CONFIG: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/gateway.yaml");

/// Test users: their API keys are `tg_test_<id>_key`.
pub fn key(id: &str) -> String {
    format!("tg_test_{id}_key")
}

/// A `users:` entry for `id` with `roles`.
pub fn user_yaml(id: &str, roles: &[&str]) -> String {
    format!(
        "  - {{ id: {id}, key_sha256: \"{}\", roles: [{}] }}\n",
        hash_key(&key(id)),
        roles.join(", ")
    )
}

/// A running `toolgate serve`; killed on drop.
pub struct Gateway {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The configuration file it was started with (rewrite it and send SIGHUP to reload).
    pub config: PathBuf,
    stderr: Arc<Mutex<String>>,
    /// The thread reading stderr: done once the process and every copy of its stderr are
    /// closed.
    stderr_reader: std::thread::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    /// Writes `yaml` into a fresh temporary directory and serves it.
    pub fn start(yaml: &str) -> Gateway {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("gateway.yaml");
        std::fs::write(&config, yaml).expect("writing the config");
        let mut gateway = Gateway::start_file(&config);
        gateway._dir = Some(dir);
        gateway
    }

    /// [`start`](Self::start), with these environment variables set for the process.
    pub fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("gateway.yaml");
        std::fs::write(&config, yaml).expect("writing the config");
        let mut gateway = Gateway::spawn(&config, env);
        gateway._dir = Some(dir);
        gateway
    }

    /// [`start`](Self::start), listening on `listen` (`127.0.0.1:PORT`): for a
    /// configuration that names its own address.
    pub fn start_listening(yaml: &str, listen: &str) -> Gateway {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("gateway.yaml");
        std::fs::write(&config, yaml).expect("writing the config");
        let mut gateway = Gateway::spawn_on(&config, &[], listen);
        gateway._dir = Some(dir);
        gateway
    }

    /// Serves the configuration file at `path`.
    pub fn start_file(path: &Path) -> Gateway {
        Gateway::spawn(path, &[])
    }

    /// Serves `yaml` written on a pipe, which can be read once (`--config /dev/stdin`).
    pub fn start_piped(yaml: &str) -> Gateway {
        Gateway::spawn_with(Path::new("/dev/stdin"), &[], "127.0.0.1:0", Some(yaml))
    }

    fn spawn(path: &Path, env: &[(&str, &str)]) -> Gateway {
        Gateway::spawn_on(path, env, "127.0.0.1:0")
    }

    fn spawn_on(path: &Path, env: &[(&str, &str)], listen: &str) -> Gateway {
        Gateway::spawn_with(path, env, listen, None)
    }

    /// Starts the binary; `input`, when given, is written on its stdin, then closed.
    fn spawn_with(path: &Path, env: &[(&str, &str)], listen: &str, input: Option<&str>) -> Gateway {
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(path)
            .args(["--listen", listen])
            .env_remove("RUST_LOG")
            .env_remove("TOOLGATE_CONFIG")
            .env_remove("ALICE_KEY_SHA256")
            .envs(env.iter().copied())
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the toolgate binary");
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use std::io::Write;
            stdin.write_all(input.as_bytes()).expect("writing stdin");
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader = collect(child.stderr.take().expect("piped stderr"), stderr.clone());
        let (lines_tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut gateway = Gateway {
            child,
            base: String::new(),
            config: path.to_owned(),
            stderr,
            stderr_reader,
            _dir: None,
        };
        match lines.recv_timeout(STARTUP) {
            Ok(line) => {
                let base = line
                    .strip_prefix("toolgate listening on ")
                    .unwrap_or_else(|| {
                        panic!(
                            "unexpected first stdout line {line:?}; stderr:\n{}",
                            gateway.stderr()
                        )
                    });
                gateway.base = base.trim().to_owned();
            }
            Err(reason) => {
                // Stdout closed: the process is exiting; let it finish so that its status
                // and last stderr lines show.
                let status = match reason {
                    mpsc::RecvTimeoutError::Disconnected => gateway.child.wait().ok(),
                    mpsc::RecvTimeoutError::Timeout => gateway.child.try_wait().ok().flatten(),
                };
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "toolgate did not print its listening line within {STARTUP:?} (exit: {status:?}); stderr:\n{}",
                    gateway.stderr()
                );
            }
        }
        gateway
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// What `GET /metrics` answers now.
    pub async fn metrics(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics")
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends `signal` (`TERM`, `HUP`, …) with `kill`.
    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Waits up to `limit` for the process to exit, and then (a few seconds at most) for
    /// its last stderr lines to be read: a loaded machine may run the reading thread well
    /// after the process ended.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for toolgate") {
                let read_by = Instant::now() + Duration::from_secs(10);
                while !self.stderr_reader.is_finished() && Instant::now() < read_by {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends SIGHUP and waits until the log has said `times` times in all that the
    /// configuration was reloaded (a minute at most, for a loaded machine).
    pub async fn reload(&self, times: usize) {
        self.signal("HUP");
        self.wait_for_log("configuration reloaded", times, Duration::from_secs(60))
            .await;
    }

    /// Polls until stderr contains `text` `times` times, or panics after `limit`.
    pub async fn wait_for_log(&self, text: &str, times: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.stderr().matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "stderr did not mention {text:?} {times} time(s) within {limit:?}:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn collect(
    mut from: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = from.read(&mut buffer) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    })
}

/// The audit signing key (its 32-byte seed, base64) the audit tests sign with.
pub const AUDIT_SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The public key `toolgate audit public-key` prints for [`AUDIT_SEED`], asked with a
/// configuration written into `dir`.
pub fn audit_public_key(dir: &Path) -> String {
    let config = dir.join("key.yaml");
    std::fs::write(
        &config,
        format!(
            "tools:\n  builtin: [echo]\naudit:\n  sink: file\n  path: {}\n  signing_key: {AUDIT_SEED}\n",
            dir.join("unused.jsonl").display()
        ),
    )
    .unwrap();
    let (status, stdout, stderr) = run(
        &["audit", "public-key", "--config", config.to_str().unwrap()],
        "",
    );
    assert!(status.success(), "{stderr}");
    stdout.trim().to_owned()
}

/// `toolgate check` of the configuration `yaml` (written to a temporary file); (status,
/// stdout, stderr).
pub fn check(yaml: &str) -> (ExitStatus, String, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).expect("writing the config");
    run(
        &["check", "--config", path.to_str().expect("a UTF-8 path")],
        "",
    )
}

/// Runs the binary to completion with `args` and `stdin`; (status, stdout, stderr).
pub fn run(args: &[&str], stdin: &str) -> (ExitStatus, String, String) {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("TOOLGATE_CONFIG")
        .env_remove("ALICE_KEY_SHA256")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the toolgate binary");
    let mut input = child.stdin.take().expect("piped stdin");
    input.write_all(stdin.as_bytes()).expect("writing stdin");
    drop(input);
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output();
        let _ = tx.send(());
        output
    });
    rx.recv_timeout(STARTUP)
        .unwrap_or_else(|_| panic!("toolgate {args:?} did not finish within {STARTUP:?}"));
    let output = waiter.join().unwrap().expect("toolgate output");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// An HTTP client with a bound on every request, so a hung gateway fails the test.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// A client that opens a new connection for every request.
pub fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTP client")
}

/// A response's status and JSON body.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// Reads a whole response.
    pub async fn read(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("reading the response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            headers,
            body,
        }
    }

    /// `error.code` of an error answer.
    pub fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// `error.message` of an error answer.
    pub fn error_message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    /// The header `name`, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// `POST` JSON as the user `id` (no key when `None`).
pub async fn post(client: &reqwest::Client, url: &str, id: Option<&str>, body: &Value) -> Answer {
    post_with(client, url, id.map(key).as_deref(), body, &[]).await
}

/// `POST` JSON with a raw key (`None`: no `Authorization` header) and extra headers.
pub async fn post_with(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
    body: &Value,
    headers: &[(&str, &str)],
) -> Answer {
    let mut request = client.post(url).json(body);
    if let Some(api_key) = api_key {
        request = request.bearer_auth(api_key);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Answer::read(request.send().await.expect("sending the request")).await
}

/// `GET` as the user `id` (no key when `None`).
pub async fn get(client: &reqwest::Client, url: &str, id: Option<&str>) -> Answer {
    let mut request = client.get(url);
    if let Some(id) = id {
        request = request.bearer_auth(key(id));
    }
    Answer::read(request.send().await.expect("sending the request")).await
}

/// Invokes `tool` with `input` as the user `id`.
pub async fn invoke(gateway: &Gateway, id: &str, tool: &str, input: Value) -> Answer {
    post(
        &client(),
        &gateway.url(&format!("/v1/tools/{tool}/invoke")),
        Some(id),
        &input,
    )
    .await
}

/// One JSON-RPC request in MCP `session` as `user`, which must be answered 200: the
/// answer's `result`, or the whole answer when it is an error.
pub async fn mcp_rpc(
    gateway: &Gateway,
    user: &str,
    session: &str,
    method: &str,
    params: Value,
) -> Value {
    let request =
        serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (status, _, body) = mcp(gateway, Method::POST, user, Some(session), Some(request)).await;
    assert_eq!(status, 200, "{method}: {body}");
    let answer = rpc_answer(&body);
    if answer.get("error").is_some() {
        answer
    } else {
        answer["result"].clone()
    }
}

/// One stateless MCP 2026-07-28 request to `/mcp` as `user` (no session): the
/// per-request `_meta` (protocol version, no client capabilities unless `params` brings
/// its own `_meta`) and the `Mcp-Method` / `Mcp-Name` headers are added. The HTTP status
/// and the JSON-RPC answer.
pub async fn mcp_2026(
    gateway: &Gateway,
    user: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> (u16, Value) {
    if params.get("_meta").is_none() {
        params["_meta"] = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "toolgate-tests", "version": "0"},
        });
    }
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    let mut request = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(key(user))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = request
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("the answer's body");
    (status, rpc_answer(&text))
}

/// Sends `body` (or nothing) to `/mcp` as `user`, in `session` if given; the status, the
/// session id the answer carries and the answer's text.
pub async fn mcp(
    gateway: &Gateway,
    method: Method,
    user: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> (u16, Option<String>, String) {
    mcp_with(gateway, method, &key(user), session, body).await
}

/// [`mcp`] with `bearer` (an API key or an access token) as the credential.
pub async fn mcp_with(
    gateway: &Gateway,
    method: Method,
    bearer: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> (u16, Option<String>, String) {
    let accept = "application/json, text/event-stream";
    let request = mcp_request(gateway, method, bearer, accept, session, body);
    let response = request.send().await.expect("the gateway answers");
    let status = response.status().as_u16();
    let issued = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.expect("the answer's body");
    (status, issued, text)
}

/// A request to `/mcp` with `bearer`, `accept` and the 2025-06-18 revision's header, in
/// `session` if given, with the JSON `body` if given.
pub fn mcp_request(
    gateway: &Gateway,
    method: Method,
    bearer: &str,
    accept: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> reqwest::RequestBuilder {
    let mut request = client()
        .request(method, gateway.url("/mcp"))
        .bearer_auth(bearer)
        .header("accept", accept)
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    request
}

/// A request with the console session cookie `session` and these headers.
pub async fn with_cookie(
    method: reqwest::Method,
    url: &str,
    session: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Answer {
    let mut request = client()
        .request(method, url)
        .header("cookie", format!("toolgate_console={session}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    Answer::read(request.send().await.expect("a response")).await
}

/// `user` signs in to the console of `gateway` with their key: the answer, whatever it is.
pub async fn console_sign_in(gateway: &Gateway, user: &str) -> Answer {
    let request = client()
        .post(gateway.url("/console/session"))
        .json(&json!({ "key": key(user) }));
    Answer::read(request.send().await.expect("signing in")).await
}

/// The value of the console session cookie `answer` sets, if it sets one.
pub fn session_cookie(answer: &Answer) -> Option<String> {
    let cookie = answer.headers.get("set-cookie")?.to_str().ok()?;
    let value = cookie
        .strip_prefix("toolgate_console=")?
        .split(';')
        .next()?;
    Some(value.to_owned())
}

/// Opens a session as `user`; its id.
pub async fn open_session(gateway: &Gateway, user: &str) -> String {
    open_session_declaring(gateway, user, json!({})).await
}

/// Opens a session as `user` whose client declares `capabilities`; its id.
pub async fn open_session_declaring(gateway: &Gateway, user: &str, capabilities: Value) -> String {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities,
                   "clientInfo": {"name": "test", "version": "0"}}
    });
    let (status, issued, text) = mcp(gateway, Method::POST, user, None, Some(initialize)).await;
    assert_eq!(status, 200, "{text}");
    let session = issued.expect("initialize issues a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, text) = mcp(
        gateway,
        Method::POST,
        user,
        Some(&session),
        Some(initialized),
    )
    .await;
    assert!((200..300).contains(&status), "({status}) {text}");
    session
}

/// Polls `check` every 20 ms until it holds, or panics with `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Parses Prometheus text: the value of the sample named `name` whose labels include all of
/// `labels` (summed when several samples match; 0 when none does).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let has = |k: &str, v: &str| {
            series_labels
                .split(',')
                .any(|pair| pair == format!("{k}=\"{v}\""))
        };
        if labels.iter().all(|(k, v)| has(k, v)) {
            total += value.parse::<f64>().expect("a numeric sample value");
        }
    }
    total
}

/// The Python interpreter the tests use (`TOOLGATE_PYTHON`, else `python3`).
pub fn python() -> String {
    std::env::var("TOOLGATE_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A Python SDK upstream serving streamable HTTP on a free loopback port; stopped when
/// dropped.
pub struct HttpUpstream {
    child: std::process::Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl HttpUpstream {
    /// Runs `script` with `args` and `env`, and reads the URL from the line it prints.
    pub fn start(script: &str, args: &[&str], env: &[(&str, &str)]) -> HttpUpstream {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python())
            .arg(script)
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python runs");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the upstream says where it listens");
        let url = line.trim().rsplit(' ').next().expect("a URL").to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        HttpUpstream { child, url }
    }
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the Python MCP SDK can be imported. Outside CI a test that needs it prints
/// why it is skipped and returns `false`; with `CI=true` a missing SDK fails the test.
pub fn python_mcp_available(test: &str) -> bool {
    let probe = Command::new(python())
        .args(["-c", "import mcp.server.mcpserver"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let reason = match probe {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!(
            "the Python MCP SDK is not importable ({}): install it with `python3 -m pip install mcp`",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("no output")
        ),
        Err(e) => format!("cannot run `{}`: {e}", python()),
    };
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    // Straight to stderr: libtest captures `println!`, and never shows a passing
    // test's captured output.
    {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
    }
    false
}

/// The JSON-RPC answer in the body of an `/mcp` answer, plain JSON or server-sent events
/// (skipping the empty event that primes a stream).
pub fn rpc_answer(body: &str) -> Value {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(body))
        .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in: {body}"))
}

/// `REDIS_URL` (default the local Redis) when it answers PING. Outside CI a missing Redis
/// skips the test with the reason printed; with `CI=true` it fails it.
pub fn redis_or_skip(test: &str) -> Option<String> {
    use std::io::Write;
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match ping(&url) {
        Ok(answer) if answer.starts_with("+PONG") => Some(url),
        outcome => {
            let reason = format!("{outcome:?}");
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: Redis at {url} is required in CI ({reason})");
            }
            // Straight to stderr: libtest captures `eprintln!`, and a passing test's
            // captured output is never shown.
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED {test}: no Redis at {url} ({reason}); set REDIS_URL to run it"
            );
            None
        }
    }
}

/// What the Redis at `url` answers to PING (`+PONG` when it runs).
fn ping(url: &str) -> std::io::Result<String> {
    use std::io::Write;
    let mut stream = redis_stream(url)?;
    stream.write_all(b"PING\r\n")?;
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// A plain connection to the Redis at `url` (no password, no TLS), with a 2 s timeout.
fn redis_stream(url: &str) -> std::io::Result<std::net::TcpStream> {
    let address = url
        .trim_start_matches("redis://")
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default();
    let address = address
        .parse()
        .map_err(|_| std::io::Error::other(format!("`{address}` is not host:port")))?;
    let stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(stream)
}

/// Removes every key under `prefix` from the Redis at `url`: for what a test leaves that
/// never expires (pins). Best effort: a failure is printed, not raised.
#[allow(dead_code)]
pub fn redis_remove_keys_under(url: &str, prefix: &str) {
    use std::io::Write;
    let script =
        "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 0";
    let pattern = format!("{prefix}:*");
    let mut request = b"*4\r\n".to_vec();
    for part in ["EVAL", script, "0", &pattern] {
        request.extend_from_slice(format!("${}\r\n{part}\r\n", part.len()).as_bytes());
    }
    let removed = redis_stream(url).and_then(|mut stream| {
        stream.write_all(&request)?;
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    });
    match removed {
        Ok(answer) if &answer == b":0\r\n" => {}
        other => eprintln!("the keys under {prefix} were not removed: {other:?}"),
    }
}

/// A random number for a key prefix no other run shares (std's randomly seeded hasher).
pub fn random_u32() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) as u32
}

/// A `redis-server` of a test's own on a free loopback port, which the test can hang
/// (SIGSTOP: connections are accepted by the kernel and nothing answers, as a Redis stuck
/// in a long command or a network that drops packets) and resume. Stopped when dropped.
pub struct OwnRedis {
    child: Child,
    /// Its URL.
    pub url: String,
}

impl OwnRedis {
    /// A fresh `redis-server`, or `None` (the test skipped, with the reason printed) when
    /// the program is not installed outside CI; with `CI=true` its absence fails the test.
    pub fn start_or_skip(test: &str) -> Option<OwnRedis> {
        use std::io::Write;
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().unwrap().port()
        };
        let started = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match started {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    !std::env::var("CI").is_ok_and(|v| v == "true"),
                    "{test}: `redis-server` is required in CI ({e})"
                );
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "SKIPPED {test}: `redis-server` cannot be started ({e})"
                );
                return None;
            }
        };
        let own = OwnRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(&own.url).is_ok_and(|answer| answer.starts_with("+PONG")) {
            assert!(
                Instant::now() < deadline,
                "{test}: redis-server on {port} did not answer within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(own)
    }

    /// Hangs it: it answers nothing until [`resume`](Self::resume)d.
    pub fn hang(&self) {
        self.signal("STOP");
    }

    /// Resumes it after [`hang`](Self::hang).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        send_signal(self.child.id(), name);
    }
}

/// Sends the signal `name` (`HUP`, `STOP`…) to the process `pid`.
fn send_signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{name} failed: {status}");
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        // A stopped process does not act on SIGKILL's exit until it is continued.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The RS256 key of `benches/keys/rs256.pem`, which the tests' issuers sign tokens with.
pub fn signing_key() -> jsonwebtoken::EncodingKey {
    let pem = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/keys/rs256.pem"
    ))
    .expect("the RS256 test key");
    jsonwebtoken::EncodingKey::from_rsa_pem(&pem).expect("an RSA key")
}

/// The key set such an issuer serves: the public half of [`signing_key`], under `kid`.
pub fn key_set(kid: &str) -> Value {
    use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
    let mut jwk =
        Jwk::from_encoding_key(&signing_key(), jsonwebtoken::Algorithm::RS256).expect("a JWK");
    jwk.common.key_id = Some(kid.to_owned());
    jwk.common.public_key_use = Some(PublicKeyUse::Signature);
    json!(JwkSet { keys: vec![jwk] })
}

/// Seconds since the Unix epoch, as token claims count them.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
