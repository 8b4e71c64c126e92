//! What a stdio upstream's program gets from toolgate, and what it leaves behind
//! (`tests/python/wayward_stdio.py`): it starts with none of the host's environment but
//! what any program needs and what its configuration names, and what it starts ends
//! with its connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{self, within};
use serde_json::{Value, json};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_mcp::{McpError, Upstream, UpstreamConfig};

const WAYWARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/wayward_stdio.py");

async fn pipeline(config: UpstreamConfig) -> (Upstream, Pipeline) {
    let upstream = within(30, "import", Upstream::connect(config))
        .await
        .expect("imported");
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    (upstream, pipeline)
}

async fn call(pipeline: &Pipeline, tool: &str) -> Value {
    within(
        30,
        "a call",
        pipeline.invoke(tool, json!({}), InvokeOptions::new()),
    )
    .await
    .expect("answered")
}

/// The environment the program of `config` was started with, as its `env` tool answers.
async fn environment_of(config: UpstreamConfig) -> String {
    let (_upstream, pipeline) = pipeline(config).await;
    call(&pipeline, "env").await.to_string()
}

#[tokio::test]
async fn a_stdio_upstream_gets_a_variable_of_the_hosts_environment_only_when_named() {
    // Cargo sets it in this test's environment: it stands for the host's own secrets.
    let secret = "CARGO_MANIFEST_DIR";
    let wayward = || UpstreamConfig::stdio("wayward", "python3", [WAYWARD, "serve"]);

    let plain = environment_of(wayward().env("SET_FOR_IT", "yes")).await;
    assert!(
        !plain.contains(secret),
        "the host's variable leaked: {plain}"
    );
    assert!(plain.contains("SET_FOR_IT"), "{plain}");
    assert!(plain.contains("PATH"), "{plain}");

    let named = environment_of(wayward().inherit_env([secret])).await;
    assert!(named.contains(secret), "{named}");
    assert!(named.contains(env!("CARGO_MANIFEST_DIR")), "{named}");
}

/// What the host behind a proxy that inspects TLS names its certificates to trust by.
const TRUST_STORE_PATHS: [&str; 4] = [
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
];

#[tokio::test]
async fn a_stdio_upstream_gets_the_hosts_paths_of_certificates_to_trust_unnamed() {
    // Setting a variable of this process's own environment is `unsafe`: the test runs
    // again, alone, in a process of its own started with them set.
    let marked = "TOOLGATE_TEST_TRUST_STORE_PATHS";
    let path = |name: &str| format!("/etc/trusted/{name}");
    if std::env::var_os(marked).is_none() {
        let this = std::env::current_exe().expect("the test binary");
        let again = std::process::Command::new(this)
            .arg("--exact")
            .arg(common::test_name(
                module_path!(),
                "a_stdio_upstream_gets_the_hosts_paths_of_certificates_to_trust_unnamed",
            ))
            .env(marked, "1")
            .envs(TRUST_STORE_PATHS.map(|name| (name, path(name))))
            .output()
            .expect("the test runs again");
        let said = String::from_utf8_lossy(&again.stdout);
        assert!(again.status.success(), "{said}");
        assert!(said.contains("1 passed"), "{said}");
        return;
    }
    let wayward = UpstreamConfig::stdio("wayward", "python3", [WAYWARD, "serve"]);
    let plain = environment_of(wayward).await;
    for name in TRUST_STORE_PATHS {
        assert!(
            plain.contains(&path(name)),
            "{name} was not passed: {plain}"
        );
    }
}

#[tokio::test]
async fn a_name_to_pass_on_that_cannot_be_a_variables_is_refused() {
    let config = UpstreamConfig::stdio("wayward", "python3", [WAYWARD, "serve"])
        .inherit_env(["GITHUB_TOKEN", "NOT A NAME"]);
    let Err(refused) = Upstream::connect(config).await else {
        panic!("connected");
    };
    assert!(matches!(refused, McpError::Config(_)), "{refused}");
    assert!(refused.to_string().contains("`NOT A NAME`"), "{refused}");
}

#[tokio::test]
async fn a_variable_to_set_whose_name_cannot_be_a_variables_is_refused() {
    // `A=B` would set `A` to `B=…` in the program's environment; an empty name sets none.
    for name in ["PATH=/tmp/elsewhere", "", "TWO WORDS"] {
        let config = UpstreamConfig::stdio("wayward", "python3", [WAYWARD, "serve"])
            .discover(false)
            .env("OK", "yes")
            .env(name, "x");
        let Err(refused) = within(30, "refused", Upstream::connect(config)).await else {
            panic!("connected with `{name}` to set");
        };
        assert!(matches!(refused, McpError::Config(_)), "{refused}");
        assert!(
            refused.to_string().contains(&format!("`{name}`")),
            "{refused}"
        );
    }
}

/// Whether process `pid` is still running (a zombie nobody reaps is not).
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command's name, which is in parentheses.
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.trim_start());
    !state.is_some_and(|s| s.starts_with('Z'))
}

/// A launcher that starts a long-lived process of its own (whose id it writes to
/// `pid_file`), then the fixture in `mode` in its place. The process does not hold the
/// server's stdout, so the connection ends when the server exits.
fn launcher(mode: &str, pid_file: &Path) -> UpstreamConfig {
    let script = format!(
        "sleep 1000 > /dev/null 2>&1 & echo $! > '{}'; exec python3 '{WAYWARD}' {mode}",
        pid_file.display()
    );
    UpstreamConfig::stdio("launched", "sh", ["-c", script.as_str()]).discover(false)
}

/// A file of this test's own for the launcher to write its child's id in.
fn pid_file(test: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("launched-{}-{test}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The id of the process the launcher started, once it is running.
fn launched(pid_file: &Path) -> u32 {
    let pid = std::fs::read_to_string(pid_file)
        .expect("the launcher wrote its child's id")
        .trim()
        .parse()
        .expect("a process id");
    assert!(running(pid), "the launcher's child runs");
    pid
}

/// Waits (10 s at most: the machine may be loaded) for process `pid` to end.
async fn ends(pid: u32, what: &str) {
    within(10, what, async {
        while running(pid) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn what_a_launcher_started_ends_when_its_connection_is_dropped() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let pid_file = pid_file("dropped");
    let (upstream, pipeline) = pipeline(launcher("serve", &pid_file)).await;
    call(&pipeline, "echo").await;
    let launched = launched(&pid_file);

    drop(pipeline);
    drop(upstream);
    ends(launched, "the launcher's child ends with its connection").await;
    let _ = std::fs::remove_file(&pid_file);
}

#[tokio::test]
async fn what_a_launcher_started_ends_when_the_launched_server_exits() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let pid_file = pid_file("exits");
    let (_upstream, pipeline) = pipeline(launcher("dies-after-init", &pid_file)).await;
    let launched = launched(&pid_file);
    let died = within(
        30,
        "a call",
        pipeline.invoke("echo", json!({}), InvokeOptions::new()),
    )
    .await;
    assert!(died.is_err(), "the server exits at its first call");
    // The upstream is still held: the connection that ended is closed, not dropped.
    ends(launched, "the launcher's child ends with the connection").await;
    let _ = std::fs::remove_file(&pid_file);
}

#[tokio::test]
async fn what_a_launcher_started_is_signalled_while_the_exited_launcher_still_holds_the_groups_id()
{
    if !Path::new("/proc/self").exists() {
        return;
    }
    // A process the launcher starts notes, when asked to stop, the state of the launcher
    // (the group's leader, by then exited): a zombie keeps the group's id the group's; a
    // leader already reaped has freed it for any new group to take.
    let ready = pid_file("zombie-ready");
    let noted = pid_file("zombie-noted");
    let script = format!(
        r#"leader=$$
( trap 'state=$(sed "s/.*) //" /proc/$leader/stat 2>/dev/null | cut -c1); echo "${{state:-reaped}}" > "{noted}"; exit 0' TERM
  echo ready > "{ready}"; sleep 1000 & wait ) > /dev/null 2>&1 &
exec python3 '{WAYWARD}' dies-after-init"#,
        noted = noted.display(),
        ready = ready.display(),
    );
    let config = UpstreamConfig::stdio("launched", "sh", ["-c", script.as_str()]).discover(false);
    let (_upstream, pipeline) = pipeline(config).await;
    within(10, "the launcher's child is ready", async {
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    let died = within(
        30,
        "a call",
        pipeline.invoke("echo", json!({}), InvokeOptions::new()),
    )
    .await;
    assert!(died.is_err(), "the server exits at its first call");
    let state = within(10, "the launcher's child is asked to stop", async {
        loop {
            match std::fs::read_to_string(&noted) {
                Ok(state) if state.ends_with('\n') => break state,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await;
    assert_eq!(state.trim(), "Z", "the leader when its group was signalled");
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&noted);
}

const LEFTOVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/python/leftover_stdio.py"
);

/// The server of `tests/python/leftover_stdio.py` in `mode`, which leaves a process behind
/// holding its stdout (its id written to `pid_file`) and exits at its first call; every
/// start of it is noted in `starts`.
fn leftover(mode: &str, pid_file: &Path, starts: &Path) -> UpstreamConfig {
    let pid_file = pid_file.display().to_string();
    UpstreamConfig::stdio("leftover", "python3", [LEFTOVER, mode, pid_file.as_str()])
        .env("LEFTOVER_STARTS", starts.display().to_string())
        .call_timeout(Duration::from_secs(30))
        .discover(false)
}

/// The id of the process the server left behind, once written, and removes its file.
fn left_behind(pid_file: &Path) -> u32 {
    let pid = std::fs::read_to_string(pid_file)
        .expect("the server wrote its leftover's id")
        .trim()
        .parse()
        .expect("a process id");
    let _ = std::fs::remove_file(pid_file);
    pid
}

fn starts_of(starts: &Path) -> usize {
    std::fs::read_to_string(starts).map_or(0, |text| text.lines().count())
}

/// Calls `echo` until an answer comes (20 s at most), through the failures of calls that
/// found their connection closing: what a caller who retries when told to sees.
async fn answered(pipeline: &Pipeline, input: Value) -> Value {
    within(20, "an answer", async {
        loop {
            match pipeline
                .invoke("echo", input.clone(), InvokeOptions::new())
                .await
            {
                Ok(answer) => break answer,
                Err(e) if e.code() == "upstream_unavailable" => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("not the connection's failure: {e}"),
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_call_fails_at_once_when_the_server_exits_though_a_process_it_left_holds_its_stdout() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let starts = pid_file("leftover-exits-starts");
    let pid_file = pid_file("leftover-exits");
    let (_upstream, pipeline) = pipeline(leftover("exits-at-call", &pid_file, &starts)).await;

    let started = std::time::Instant::now();
    let failed = within(
        60,
        "a call to a server that exits",
        pipeline.invoke("echo", json!({}), InvokeOptions::new()),
    )
    .await
    .expect_err("the server exits at the call without answering it");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the call waited {took:?} (its deadline is 30 s): {failed}"
    );
    // What a call on a connection that closed under it is told.
    assert_eq!(failed.code(), "upstream_unavailable", "{failed}");
    assert!(failed.is_retryable(), "{failed}");
    // The process left behind, which held the connection's stdout, goes with it.
    ends(
        left_behind(&pid_file),
        "the process the server left ends with its connection",
    )
    .await;

    // The connection is not taken to be alive: the next calls start the server again.
    within(20, "the server is started again", async {
        while starts_of(&starts) < 2 {
            let _ = pipeline
                .invoke("echo", json!({}), InvokeOptions::new())
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    within(10, "the second leftover's id", async {
        while !pid_file.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    ends(
        left_behind(&pid_file),
        "the process the second server left ends with its connection",
    )
    .await;
    let _ = std::fs::remove_file(&starts);
}

#[tokio::test]
async fn a_servers_last_answer_reaches_its_caller_though_a_process_it_left_holds_its_stdout() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let starts = pid_file("leftover-answers-starts");
    let pid_file = pid_file("leftover-answers");
    let (_upstream, pipeline) = pipeline(leftover("answers-then-exits", &pid_file, &starts)).await;

    // Each server answers one call, its connection's last, and exits at once.
    for attempt in 1..=3 {
        let answer = answered(&pipeline, json!({ "attempt": attempt })).await;
        assert!(answer.to_string().contains("attempt"), "{answer}");
        ends(
            left_behind(&pid_file),
            "the process the server left ends with its connection",
        )
        .await;
    }
    // A server started for a call whose answer was lost would be one more.
    assert_eq!(starts_of(&starts), 3, "a server an answer");
    let _ = std::fs::remove_file(&starts);
}

/// A server that stops reading its stdin, leaves a process behind holding it (and its
/// stdout), and exits: a request written meanwhile waits in the full pipe, which nobody
/// will read. The connection ends all the same — its calls fail at once, not at the
/// stall limit (their deadline), and the process left behind ends with it then.
#[tokio::test]
async fn a_server_that_exits_with_a_write_to_it_waiting_ends_at_once_with_what_it_left() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let starts = pid_file("leftover-unread-starts");
    let pid_file = pid_file("leftover-unread");
    let config = leftover("stops-reading-then-exits", &pid_file, &starts);
    let (_upstream, pipeline) = pipeline(config).await;

    let started = std::time::Instant::now();
    let first = tokio::spawn({
        let pipeline = pipeline.clone();
        async move {
            pipeline
                .invoke("echo", json!({}), InvokeOptions::new())
                .await
        }
    });
    within(10, "the leftover's id", async {
        while !pid_file.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let leftover = left_behind(&pid_file);
    // Far more than the pipe holds: its write waits until the connection ends.
    let big = json!({ "text": "x".repeat(512 * 1024) });
    let second = tokio::spawn({
        let pipeline = pipeline.clone();
        async move { pipeline.invoke("echo", big, InvokeOptions::new()).await }
    });
    for call in [first, second] {
        let failed = within(60, "a call to a server that exits", call)
            .await
            .expect("joined")
            .expect_err("the server exits without answering");
        assert_eq!(failed.code(), "upstream_unavailable", "{failed}");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the calls waited {took:?} (their deadline is 30 s)"
    );
    ends(
        leftover,
        "the process the server left ends with its connection",
    )
    .await;
    let _ = std::fs::remove_file(&starts);
}
