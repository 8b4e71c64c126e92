//! `toolgate policy test FILE` and the Cedar part of `toolgate check`, in the real binary:
//! the shipped example table passes, a wrong expectation fails with a line saying what
//! differs and a non-zero exit, a malformed table is refused at its line and column, the
//! `authorization` rules decide as they do when serving, and no tool runs.

mod common;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;

use common::{BIN, STARTUP, user_yaml};

/// The repository root: the example's paths are relative to it.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Runs the binary in `dir` with `args`; a run that takes longer than [`STARTUP`] is
/// killed and fails the test (a tool that ran would take ten minutes).
fn toolgate(dir: &Path, args: &[&str]) -> (ExitStatus, String, String) {
    let child = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("TOOLGATE_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the toolgate binary");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let Ok(output) = rx.recv_timeout(STARTUP) else {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("toolgate {args:?} did not finish within {STARTUP:?}");
    };
    let output = output.expect("toolgate output");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const POLICIES: &str = r#"@id("staff-echo")
permit(principal, action == Action::"echo", resource)
when { principal.roles.contains("staff") };

@id("no-drop")
@reason("`echo` never repeats SQL that drops a table")
forbid(principal, action == Action::"echo", resource)
when { context.arguments.text like "*DROP TABLE*" };

@id("naps")
permit(principal, action == Action::"sleep", resource);
"#;

/// A directory with `echo.cedar`, a configuration naming it (plus `extra` at the end),
/// and `table` as `table.yaml`.
fn fixture(extra: &str, table: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("echo.cedar"), POLICIES).unwrap();
    std::fs::write(
        dir.path().join("gateway.yaml"),
        format!(
            "tools:\n  builtin: [echo, sleep, calculator]\nusers:\n{}{}policies:\n  cedar:\n    files: [echo.cedar]\n{extra}",
            user_yaml("alice", &["staff"]),
            user_yaml("carol", &[]),
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("table.yaml"), table).unwrap();
    dir
}

#[test]
fn the_shipped_example_table_passes() {
    let (status, stdout, stderr) = toolgate(
        Path::new(ROOT),
        &["policy", "test", "examples/policies/tests.yaml"],
    );
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(
        stdout.contains("PASS") && stdout.contains("11 cases, 11 passed, 0 failed"),
        "{stdout}"
    );
    // What decided is on each line: the determining policy, the refusal, the shadow.
    assert!(
        stdout.contains("no role, no echo: deny — cedar: no policy permits it — user `carol` may not call `echo`"),
        "{stdout}"
    );
    assert!(stdout.contains("shadow: deny (watch-mcp-echo)"), "{stdout}");
    // The shadow decision is shown where it differs, not on every line.
    assert!(
        stdout.contains("PASS    1  staff echo: allow — cedar: staff-echo\n"),
        "{stdout}"
    );
}

#[test]
fn a_wrong_expectation_fails_its_case_with_what_differs_and_exits_non_zero() {
    let dir = fixture(
        "",
        r#"config: gateway.yaml
cases:
  - name: right
    principal: { user: alice }
    tool: echo
    arguments: { text: hello }
    expect: allow
    policies: [staff-echo]
  - name: wrong decision
    principal: { user: carol }
    tool: echo
    arguments: { text: hello }
    expect: allow
  - name: wrong policy and reason
    principal: { user: alice }
    tool: echo
    arguments: { text: "DROP TABLE t" }
    expect: deny
    reason: too long
    policies: [staff-echo]
  - name: unknown tool
    principal: { user: alice }
    tool: ecko
    expect: allow
"#,
    );
    let (status, stdout, stderr) = toolgate(dir.path(), &["policy", "test", "table.yaml"]);
    assert_eq!(
        status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("PASS    1  right: allow — cedar: staff-echo"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("FAIL    2  wrong decision: expected allow; got deny"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("FAIL    3  wrong policy and reason: "),
        "{stdout}"
    );
    assert!(
        lines[2].contains("expected a refusal saying \"too long\"")
            && lines[2].contains("expected the determining policies [staff-echo], not [no-drop]"),
        "{stdout}"
    );
    assert!(
        lines[3].contains("no tool `ecko` in the configuration (it has: calculator, echo, sleep)"),
        "{stdout}"
    );
    assert_eq!(
        lines[4], "table.yaml: 4 cases, 1 passed, 3 failed",
        "{stdout}"
    );
}

#[test]
fn a_malformed_table_is_refused_at_its_line_and_column() {
    let dir = fixture(
        "",
        "cases:\n  - principal: { user: alice }\n    tool: echo\n    expect: allowed\n",
    );
    let (status, stdout, stderr) = toolgate(
        dir.path(),
        &["policy", "test", "table.yaml", "--config", "gateway.yaml"],
    );
    assert_eq!(
        status.code(),
        Some(2),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("table.yaml:4:13: `cases[0].expect`: unknown value `allowed`"),
        "{stderr}"
    );
    let dir = fixture(
        "",
        "cases:\n  - principal: { user: alice }\n    tool: echo\n    expect: allow\n    argumnets: {}\n",
    );
    let (status, _, stderr) = toolgate(
        dir.path(),
        &["policy", "test", "table.yaml", "--config", "gateway.yaml"],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("table.yaml:5:"), "{stderr}");
    assert!(stderr.contains("argumnets"), "{stderr}");

    // Without a configuration to run against, the error says how to name one.
    let dir = fixture(
        "",
        "cases:\n  - { principal: { user: alice }, tool: echo, expect: allow }\n",
    );
    let (status, _, stderr) = toolgate(dir.path(), &["policy", "test", "table.yaml"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--config FILE"), "{stderr}");
}

#[test]
fn the_authorization_rules_and_the_tools_schema_decide_as_when_serving() {
    let dir = fixture(
        "  authorization:\n    default: deny\n    rules:\n      - { effect: allow, roles: [staff] }\n",
        r#"config: gateway.yaml
cases:
  - name: the rules refuse before Cedar is asked
    principal: { id: dave, roles: [] }
    tool: sleep
    arguments: { ms: 1 }
    expect: deny
    policies: []
  - name: invalid arguments
    principal: { user: alice }
    tool: sleep
    arguments: { ms: -5 }
    expect: deny
"#,
    );
    let (status, stdout, stderr) = toolgate(dir.path(), &["policy", "test", "table.yaml"]);
    assert_eq!(
        status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    // Cedar's `naps` permits everyone, but the rules refused dave first: no Cedar
    // decision was made, and the case says so.
    assert!(lines[0].starts_with("FAIL    1"), "{stdout}");
    assert!(lines[0].contains("no Cedar policy decided"), "{stdout}");
    assert!(lines[0].contains("got deny"), "{stdout}");
    assert!(
        lines[1].starts_with("PASS    2  invalid arguments: deny (invalid arguments)"),
        "{stdout}"
    );
    assert!(lines[1].contains("`ms`"), "{stdout}");
}

#[test]
fn a_token_caller_is_made_as_when_serving_its_scopes_grant_roles_and_tool_scopes_apply() {
    // When serving, a token's scopes grant the roles of `scope_roles`, and a tool's
    // `required_scopes` hold token callers (not API keys) to them: the table's token
    // callers are made the same way, or a case would pass where serving decides otherwise.
    let oauth = "identity:\n  oauth:\n    issuer: http://127.0.0.1:9\n    resource: http://127.0.0.1:8080\n    scope_roles: { \"tools:staff\": [staff] }\n    required_scopes:\n      tools: { sleep: [nap] }\n";
    let dir = fixture(
        oauth,
        r#"config: gateway.yaml
cases:
  - name: a scope that grants staff echoes
    principal: { id: agent, roles: [], claims: { scopes: ["tools:staff"] } }
    tool: echo
    arguments: { text: hi }
    expect: allow
    policies: [staff-echo]
  - name: a token without the nap scope does not sleep
    principal: { id: agent, claims: { scopes: [] } }
    tool: sleep
    arguments: { ms: 1 }
    expect: deny
    reason: lacks the scope `nap`
  - name: a token with it does
    principal: { id: agent, claims: { scopes: "nap other" } }
    tool: sleep
    arguments: { ms: 1 }
    expect: allow
  - name: an API key is not held to scopes
    principal: { id: keyed }
    tool: sleep
    arguments: { ms: 1 }
    expect: allow
"#,
    );
    let (status, stdout, stderr) = toolgate(dir.path(), &["policy", "test", "table.yaml"]);
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("4 cases, 4 passed"), "{stdout}");

    // A claim that never reaches a policy when serving describes no caller that exists.
    std::fs::write(
        dir.path().join("table.yaml"),
        "cases:\n  - { principal: { id: agent, claims: { team: [red] } }, tool: echo, expect: deny }\n",
    )
    .unwrap();
    let (status, _, stderr) = toolgate(
        dir.path(),
        &["policy", "test", "table.yaml", "--config", "gateway.yaml"],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("claim `team` never reaches a policy"),
        "{stderr}"
    );
}

#[test]
fn no_tool_runs_and_nothing_is_charged() {
    // A one-call-a-minute rate limit, and calls of a tool that would sleep ten minutes.
    let case = "  - principal: { user: alice }\n    tool: sleep\n    arguments: { ms: 600000 }\n    expect: allow\n";
    let dir = fixture(
        "  rate_limits:\n    - { name: tight, rate: 1/minute, partition: user }\n",
        &format!("config: gateway.yaml\ncases:\n{}", case.repeat(3)),
    );
    let (status, stdout, stderr) = toolgate(dir.path(), &["policy", "test", "table.yaml"]);
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("3 cases, 3 passed"), "{stdout}");
}

#[test]
fn a_budget_neither_decides_a_case_nor_is_spent_by_the_table() {
    // A budget of one unit a day per user: were it in the table's pipeline, the first case
    // would spend it and every later case of that user would end `budget_exhausted`,
    // undecided, whatever the policies say.
    let case = "  - principal: { user: alice }\n    tool: echo\n    arguments: { text: hi }\n    expect: allow\n    policies: [staff-echo]\n";
    let dir = fixture(
        "  budgets:\n    - { name: daily, limit: 1, window: 1d, partition: user }\n",
        &format!("config: gateway.yaml\ncases:\n{}", case.repeat(3)),
    );
    let (status, stdout, stderr) = toolgate(dir.path(), &["policy", "test", "table.yaml"]);
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("3 cases, 3 passed"), "{stdout}");
}

#[test]
fn check_prints_the_cedar_policies_that_could_apply_to_each_tool() {
    let dir = fixture("", "cases: []\n");
    let (status, stdout, stderr) = toolgate(dir.path(), &["check", "--config", "gateway.yaml"]);
    assert!(status.success(), "{stderr}");
    let section = |tool: &str| -> String {
        stdout
            .split("\n\n")
            .find(|s| s.starts_with(tool))
            .unwrap_or_else(|| panic!("no section for {tool}:\n{stdout}"))
            .to_owned()
    };
    let echo = section("echo");
    assert!(
        echo.contains("  cedar policies that could apply:\n    permit staff-echo  [echo.cedar]\n    forbid no-drop  [echo.cedar]"),
        "{echo}"
    );
    assert!(!echo.contains("naps"), "{echo}");
    assert!(
        section("sleep").contains("    permit naps (every call)  [echo.cedar]"),
        "{stdout}"
    );
    assert!(
        section("calculator").contains("(no enforced permit: every call is denied)"),
        "{stdout}"
    );
}
