//! A gateway killed with `SIGKILL` closes nothing: on Linux its stdio upstreams' programs
//! die with it all the same (their parent-death signal), rather than run on as orphans —
//! even a program that does not stop when its stdin ends.

#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Gateway, python, user_yaml};

/// A stdio MCP server of plain Python (no SDK): it writes its process id to the file its
/// argument names once initialized, answers `initialize` and the lists, and, once its stdin ends, sleeps on
/// instead of stopping.
const STAYS_ON: &str = r#"
import json, os, sys, time

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        if message.get("method") == "notifications/initialized":
            with open(sys.argv[1] + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        continue
    method = message["method"]
    if method == "initialize":
        result = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stays-on", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": "noop", "inputSchema": {"type": "object"}}]}
    elif method.endswith("/list"):
        result = {method.split("/")[0]: []}
    else:
        # `server/discover` (2026-07-28) among them: the client falls back to `initialize`.
        error = {"code": -32601, "message": "method not found"}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)

while True:
    time.sleep(1000)
"#;

/// Polls `check` every 50 ms for up to `limit`; whether it held.
fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The state and the parent of process `pid`, from `/proc/<pid>/stat`; `None` once it is
/// gone.
fn state_and_parent(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command's name, in parentheses, may hold anything: the fields after it.
    let (_, fields) = stat.rsplit_once(") ")?;
    let mut fields = fields.split_ascii_whitespace();
    let state = fields.next()?.to_owned();
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Whether process `pid` runs: a zombie (dead, not yet reaped by whoever adopted it) does
/// not.
fn running(pid: u32) -> bool {
    state_and_parent(pid).is_some_and(|(state, _)| state != "Z" && state != "X")
}

/// Whether `python3` runs here; if not, says why the test is skipped (a failure on CI).
fn python_runs(test: &str) -> bool {
    let runs = std::process::Command::new(python())
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|status| status.success());
    if !runs {
        let reason = format!("cannot run `{}`", python());
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
    }
    runs
}

#[tokio::test]
async fn a_gateway_killed_with_sigkill_takes_its_stdio_upstreams_program_with_it() {
    let test = "a_gateway_killed_with_sigkill_takes_its_stdio_upstreams_program_with_it";
    if !python_runs(test) || !Path::new("/proc/self").exists() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("stays_on.py");
    std::fs::write(&script, STAYS_ON).unwrap();
    let pid_file = dir.path().join("upstream.pid");
    let yaml = format!(
        "upstreams:\n  - name: stays\n    command: {python}\n    args: [{script:?}, {pid_file:?}]\n\
users:\n{alice}",
        python = python(),
        script = script.display().to_string(),
        pid_file = pid_file.display().to_string(),
        alice = user_yaml("alice", &["admin"]),
    );
    let mut gateway = Gateway::start(&yaml);

    let connected = eventually(Duration::from_secs(60), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.trim().parse::<u32>().is_ok())
    });
    assert!(
        connected,
        "the upstream never connected:\n{}",
        gateway.stderr()
    );
    let program: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (_, parent) = state_and_parent(program).expect("the upstream's program runs");
    assert_eq!(parent, gateway.pid(), "the program is the gateway's child");

    gateway.signal("KILL");
    let killed = gateway.wait_exit(Duration::from_secs(30)).await;
    // Generous: a loaded machine may be slow to deliver the signal and run the exit.
    let gone = eventually(Duration::from_secs(20), || !running(program));
    if !gone {
        // Not left behind by a failing test: the process is this test's own.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &program.to_string()])
            .status();
    }
    assert!(killed.is_some(), "the gateway did not die of SIGKILL");
    assert!(
        gone,
        "the stdio upstream's program (pid {program}) outlived the gateway killed with SIGKILL"
    );
}
