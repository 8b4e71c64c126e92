//! The command line: `serve` refusing a bad file, `check`, `tools`, `pins` and `hash-key`.

mod common;

use common::{EXAMPLE_CONFIG, run};
use serde_json::Value;
use toolgate_gateway::auth::hash_key;

/// Writes `yaml` to a file and runs `toolgate serve` on it, expecting a refusal.
fn refused(yaml: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).unwrap();
    let path = path.to_str().unwrap().to_owned();
    let (status, stdout, stderr) =
        run(&["serve", "--config", &path, "--listen", "127.0.0.1:0"], "");
    assert_eq!(
        status.code(),
        Some(2),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stdout.contains("listening"), "{stdout}");
    (path, stderr)
}

#[test]
fn serve_refuses_a_misspelt_field_naming_its_path_and_line() {
    let (path, stderr) = refused(
        "tools:\n  builtin: [calculator]\npolicies:\n  rate_limits:\n    - { name: a, rate: 60/minute, brust: 3 }\n",
    );
    assert!(stderr.contains(&format!("{path}:5:")), "{stderr}");
    assert!(
        stderr.contains("`policies.rate_limits[0].brust`"),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field `brust`"), "{stderr}");
}

#[test]
fn serve_without_its_redis_says_what_to_check_in_the_configurations_words() {
    // Port 1: nothing listens there, so the connection is refused at once.
    let (_, stderr) = refused("state: redis://127.0.0.1:1\ntools:\n  builtin: [echo]\n");
    assert!(
        stderr.contains("Redis at redis://127.0.0.1:1 could not be reached within"),
        "{stderr}"
    );
    assert!(stderr.contains("`state`"), "{stderr}");
    assert!(stderr.contains("`state.deadline`"), "{stderr}");
    // What a program using the Redis crate would call is no help to a gateway's operator.
    assert!(!stderr.contains("RedisState"), "{stderr}");
    assert!(!stderr.contains("connect_lazy"), "{stderr}");
}

#[test]
fn serve_refuses_a_policy_naming_an_unknown_tool() {
    let (_, stderr) = refused(
        "tools:\n  builtin: [calculator]\npolicies:\n  approval:\n    tools: [calculater]\n",
    );
    assert!(stderr.contains("`policies.approval.tools[0]`"), "{stderr}");
    assert!(stderr.contains("calculater"), "{stderr}");
}

#[test]
fn serve_refuses_an_unset_environment_variable_naming_it() {
    let (_, stderr) =
        refused("users:\n  - id: a\n    key_sha256: ${TOOLGATE_IT_SURELY_UNSET_VARIABLE}\n");
    assert!(
        stderr.contains("TOOLGATE_IT_SURELY_UNSET_VARIABLE"),
        "{stderr}"
    );
    assert!(stderr.contains("`users[0].key_sha256`"), "{stderr}");
}

#[test]
fn check_prints_every_tool_with_its_stages_in_order() {
    let (status, stdout, stderr) = run(&["check", "--config", EXAMPLE_CONFIG], "");
    assert!(status.success(), "{stderr}");
    // The four built-in tools, and `toolgate.outcome` (the file configures approval).
    assert!(stdout.contains("OK — 5 tools, 2 users"), "{stdout}");
    // Then which credentials each route accepts, then the tools.
    let sections: Vec<&str> = stdout.split("\n\n").skip(1).collect();
    assert_eq!(
        sections[0],
        "identity\n  /v1    API keys (2 users)\n  /mcp   API keys (2 users)\n  \
         wrong credentials: 30 per client address in a burst, then one every 2s; the client is \
         the connection's peer, or, from 127.0.0.0/8, ::1, the address X-Forwarded-For names\n  \
         console: off",
        "{stdout}"
    );
    let tools: Vec<&str> = sections[1..]
        .iter()
        .map(|s| s.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(
        tools,
        [
            "calculator",
            "echo",
            "current_time",
            "sleep",
            "toolgate.outcome"
        ],
        "{stdout}"
    );
    for section in &sections[1..] {
        let at = |stage: &str| {
            section
                .lines()
                .position(|line| line.trim_start().starts_with(stage))
                .unwrap_or_else(|| panic!("no `{stage}` line in:\n{section}"))
        };
        let order = [
            at("will_authorize"),
            at("will_acquire_quota"),
            at("will_acquire_semaphore"),
            at("on_metrics"),
            at("did_release_quota"),
        ];
        assert!(order.is_sorted(), "stages out of order in:\n{section}");
    }
}

#[test]
fn check_says_where_the_pins_are_kept_without_contacting_redis() {
    let dir = tempfile::tempdir().unwrap();
    let check = |pins: &str| {
        let path = dir.path().join("gateway.yaml");
        let yaml = format!(
            "state: redis://127.0.0.1:1
tools:
  builtin: [echo]
pins: {pins}
"
        );
        std::fs::write(&path, yaml).unwrap();
        let (status, stdout, stderr) = run(&["check", "--config", path.to_str().unwrap()], "");
        assert!(status.success(), "{stderr}");
        stdout.lines().nth(1).unwrap_or_default().to_owned()
    };
    let shared = check("{ shared: true }");
    assert!(
        shared.starts_with("  pins: shared on Redis with the policies' state, not contacted"),
        "{shared}"
    );
    let file = dir.path().join("pins.json");
    let own = check(&format!("{{ path: {} }}", file.display()));
    assert!(own.starts_with("  pins: in "), "{own}");
    assert!(own.contains("this gateway's own"), "{own}");
}

#[test]
fn check_lists_for_each_tool_only_the_hooks_that_run_for_it() {
    let (status, stdout, stderr) = run(&["check", "--config", EXAMPLE_CONFIG], "");
    assert!(status.success(), "{stderr}");
    let section = |tool: &str| {
        stdout
            .split("\n\n")
            .find(|s| s.split_whitespace().next() == Some(tool))
            .unwrap_or_else(|| panic!("no section for `{tool}` in:\n{stdout}"))
            .to_owned()
    };
    // The hooks listed on a stage's line, in order.
    let hooks_at = |section: &str, stage: &str| -> Vec<String> {
        section
            .lines()
            .find_map(|line| line.trim_start().strip_prefix(stage))
            .map(|hooks| hooks.trim().split(" → ").map(str::to_owned).collect())
            .unwrap_or_default()
    };

    // The file asks approval for `sleep` alone, and retries idempotent tools (`calculator`
    // is read-only; `sleep` is not idempotent).
    let sleep = section("sleep");
    let calculator = section("calculator");
    assert_eq!(
        hooks_at(&sleep, "will_check_consent"),
        ["consent"],
        "{sleep}"
    );
    assert!(
        hooks_at(&calculator, "will_check_consent").is_empty(),
        "{calculator}"
    );
    assert!(
        hooks_at(&calculator, "around_execute").contains(&"retry".to_owned()),
        "{calculator}"
    );
    assert!(
        !hooks_at(&sleep, "around_execute").contains(&"retry".to_owned()),
        "{sleep}"
    );
}

/// `toolgate check` on `yaml`: its status is success; what it printed on stderr.
fn check_stderr(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).unwrap();
    let (status, stdout, stderr) = run(&["check", "--config", path.to_str().unwrap()], "");
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    stderr
}

#[test]
fn check_warns_when_callers_whose_calls_wait_may_not_read_their_outcomes() {
    let users = format!(
        "users:\n  - {{ id: alice, key_sha256: \"{}\", roles: [admin] }}\n  \
         - {{ id: bob, key_sha256: \"{}\", roles: [analyst], tenant: acme }}\n",
        hash_key("tg_cli_alice_key"),
        hash_key("tg_cli_bob_key"),
    );
    let policies = "policies:\n  approval:\n    tools: [sleep]\n  authorization:\n    rules:\n      \
         - { effect: allow, roles: [admin] }\n      \
         - { effect: allow, roles: [analyst], tools: [sleep, echo] }\n";
    let yaml = format!("tools:\n  builtin: [echo, sleep]\n{users}{policies}");

    let warned = check_stderr(&yaml);
    let warning = warned
        .lines()
        .find(|line| line.contains("`toolgate.outcome` is not allowed"))
        .unwrap_or_else(|| panic!("no warning about toolgate.outcome:\n{warned}"));
    assert!(warning.contains("warning: "), "{warning}");
    // bob, not alice (an admin may call everything), and the tool that waits.
    assert!(
        warning.contains(
            "to user `bob` of tenant `acme`, who may call tools that wait for approval (`sleep`)"
        ),
        "{warning}"
    );
    assert!(warning.contains("tasks/get"), "{warning}");
    assert!(
        warning.contains("`- { effect: allow, tools: [toolgate.outcome] }`"),
        "what to add: {warning}"
    );

    // Allowed the outcome tool, or allowed no tool that waits: nothing to warn of.
    let allowed = yaml.replace(
        "tools: [sleep, echo]",
        "tools: [sleep, echo, toolgate.outcome]",
    );
    let never_waits = yaml.replace("tools: [sleep, echo]", "tools: [echo]");
    for yaml in [allowed, never_waits] {
        let quiet = check_stderr(&yaml);
        assert!(!quiet.contains("toolgate.outcome"), "{yaml}\n{quiet}");
    }
}

#[test]
fn the_example_configuration_lets_every_caller_whose_calls_wait_read_their_outcomes() {
    let (status, stdout, stderr) = run(&["check", "--config", EXAMPLE_CONFIG], "");
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stdout}\n{stderr}");
}

#[test]
fn tools_prints_the_definitions_as_anthropic_json() {
    let (status, stdout, stderr) = run(
        &["tools", "--config", EXAMPLE_CONFIG, "--format", "anthropic"],
        "",
    );
    assert!(status.success(), "{stderr}");
    let tools: Value = serde_json::from_str(&stdout).expect("valid JSON on stdout");
    let tools = tools.as_array().expect("an array of tools");
    assert_eq!(tools.len(), 5, "{stdout}");
    for tool in tools {
        assert!(tool["name"].is_string(), "{tool}");
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
    }
}

#[test]
fn tools_for_a_user_id_of_two_tenants_lists_what_the_user_of_the_tenant_named_may_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "tools:\n  builtin: [echo, sleep]\nusers:\n  - {{ id: ann, tenant: acme, key_sha256: \"{}\", roles: [analyst] }}\n  - {{ id: ann, tenant: globex, key_sha256: \"{}\", roles: [intern] }}\npolicies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, roles: [analyst], tenants: [acme] }}\n      - {{ effect: allow, roles: [intern], tenants: [globex], tools: [echo] }}\n",
            hash_key("tg_ann_acme"),
            hash_key("tg_ann_globex"),
        ),
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let listed = |tenant: &str| {
        let args = [
            "tools", "--config", path, "--format", "mcp", "--user", "ann", "--tenant", tenant,
        ];
        let (status, stdout, stderr) = run(&args, "");
        assert!(status.success(), "{stderr}");
        let tools: Value = serde_json::from_str(&stdout).expect(&stdout);
        let mut names: Vec<String> = (tools["tools"].as_array().expect(&stdout).iter())
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listed("acme"), ["echo", "sleep"]);
    assert_eq!(listed("globex"), ["echo"]);

    let (status, _, stderr) = run(
        &[
            "tools", "--config", path, "--format", "mcp", "--user", "ann",
        ],
        "",
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tenant `acme` and tenant `globex`") && stderr.contains("`--tenant`"),
        "{stderr}"
    );
}

#[test]
fn tools_accepts_the_openai_responses_format_in_both_spellings() {
    let mut outputs = Vec::new();
    for spelling in ["openai-responses", "openai_responses"] {
        let (status, stdout, stderr) = run(
            &["tools", "--config", EXAMPLE_CONFIG, "--format", spelling],
            "",
        );
        assert!(status.success(), "{spelling}: {stderr}");
        let tools: Value = serde_json::from_str(&stdout).expect("valid JSON on stdout");
        assert_eq!(tools.as_array().map(Vec::len), Some(5), "{stdout}");
        outputs.push(stdout);
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn serve_refuses_a_host_name_as_listen_address_with_an_example() {
    let (_, stderr) = refused("server:\n  listen: localhost\n");
    assert!(stderr.contains("server.listen"), "{stderr}");
    assert!(stderr.contains("`127.0.0.1:8080`"), "{stderr}");
}

#[test]
fn serve_refuses_a_header_limit_out_of_range_naming_the_field() {
    for size in ["512", "1MiB"] {
        let (_, stderr) = refused(&format!("server:\n  max_header_bytes: {size}\n"));
        assert!(stderr.contains("server.max_header_bytes"), "{stderr}");
        assert!(stderr.contains("from `1KiB` to `256KiB`"), "{stderr}");
    }
}

#[test]
fn hash_key_prints_the_sha256_of_the_key_on_stdin() {
    let (status, stdout, stderr) = run(&["hash-key"], "tg_demo_bob_analyst_key\n");
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout.trim(), hash_key("tg_demo_bob_analyst_key"));
    // The example's comment says this is bob's key.
    assert_eq!(
        stdout.trim(),
        "5a2053b491a22b51c129b5e2d031e5f43a6eaaa5ec578af3163c1726300d8976"
    );
}

#[test]
fn hash_key_refuses_an_empty_key() {
    let (status, _, stderr) = run(&["hash-key"], "");
    assert!(!status.success());
    assert!(stderr.contains("stdin"), "{stderr}");
}

#[test]
fn a_short_audit_hash_key_is_refused_with_how_to_make_one() {
    let (_, stderr) = refused("audit:\n  sink: log\n  hash_key: short\n");
    assert!(
        stderr.contains("audit.hash_key") && stderr.contains("openssl rand -hex 32"),
        "{stderr}"
    );
}

#[test]
fn pins_import_brings_a_pin_file_to_the_shared_pins_once() {
    let test = "pins_import_brings_a_pin_file_to_the_shared_pins_once";
    let Some(redis) = common::redis_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("tgimport{}x{:x}", std::process::id(), common::random_u32());
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        format!("state:\n  url: {redis}\n  key_prefix: {prefix}\npins: {{ shared: true }}\n"),
    )
    .unwrap();
    let file = dir.path().join("pins.json");
    let pin = |fingerprint: &str, description: &str| serde_json::json!({"fingerprint": fingerprint, "definition": {"description": description}});
    let pins = serde_json::json!({
        "pins": {"add": pin("sha256:1", "Adds."), "mul": pin("sha256:2", "Multiplies.")},
        "pending": {"mul": {"pinned": "sha256:2", "offered": "sha256:3",
                            "definition": {"description": "Multiplies and mails."}}},
    });
    std::fs::write(&file, pins.to_string()).unwrap();
    let config = config.to_str().unwrap();
    let import = || {
        let (status, stdout, stderr) = run(
            &[
                "pins",
                "--config",
                config,
                "import",
                "--from",
                file.to_str().unwrap(),
            ],
            "",
        );
        assert!(status.success(), "{stdout}{stderr}");
        stdout
    };

    let first = import();
    assert!(
        first.contains("imported: 2 pinned, 0 pinned alike already, 1 changes waiting"),
        "{first}"
    );
    let (status, listed, stderr) = run(&["pins", "--config", config], "");
    assert!(status.success(), "{stderr}");
    assert!(
        listed.starts_with("the pins shared on Redis: 2 pinned, 1 changed"),
        "{listed}"
    );
    assert!(
        listed.contains("CHANGED mul: sha256:2 -> sha256:3"),
        "{listed}"
    );
    assert!(
        listed.contains("PINNED add: sha256:1\nPINNED mul: sha256:2\n"),
        "{listed}"
    );
    assert!(listed.contains("Multiplies and mails."), "{listed}");
    let again = import();
    assert!(
        again.contains("imported: 0 pinned, 2 pinned alike already, 1 changes waiting"),
        "{again}"
    );

    // A configuration whose pins are a file has nothing to import into.
    let own = dir.path().join("own.yaml");
    std::fs::write(&own, format!("pins: {{ path: {} }}\n", file.display())).unwrap();
    let (status, _, stderr) = run(
        &[
            "pins",
            "--config",
            own.to_str().unwrap(),
            "import",
            "--from",
            file.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("keeps its pins in a file already"),
        "{stderr}"
    );
    common::redis_remove_keys_under(&redis, &prefix);
}

/// `toolgate pins accept` run by many people at once on one pin file (or beside a gateway
/// that reloads) keeps every acceptance: each process changes the file under its lock.
/// `toolgate pins forget` then removes pins, and says so of one it does not know.
#[test]
fn pins_accepted_by_many_processes_at_once_are_all_kept_and_forgotten_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pins.json");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(&config, format!("pins: {{ path: {} }}\n", file.display())).unwrap();
    let tools: Vec<String> = (0..24).map(|n| format!("tool{n}")).collect();
    let pin = |fingerprint: &str| serde_json::json!({"fingerprint": fingerprint, "definition": {"description": fingerprint}});
    let pins: serde_json::Map<String, Value> =
        tools.iter().map(|t| (t.clone(), pin("sha256:1"))).collect();
    let pending: serde_json::Map<String, Value> = tools
        .iter()
        .map(|t| {
            let change = serde_json::json!({"pinned": "sha256:1", "offered": "sha256:2",
                                            "definition": {"description": "sha256:2"}});
            (t.clone(), change)
        })
        .collect();
    std::fs::write(
        &file,
        serde_json::json!({"pins": pins, "pending": pending}).to_string(),
    )
    .unwrap();

    let config = config.to_str().unwrap().to_owned();
    let accepting: Vec<_> = tools
        .iter()
        .map(|tool| {
            let (config, tool) = (config.clone(), tool.clone());
            std::thread::spawn(move || run(&["pins", "--config", &config, "accept", &tool], ""))
        })
        .collect();
    for accepted in accepting {
        let (status, stdout, stderr) = accepted.join().unwrap();
        assert!(status.success(), "{stdout}{stderr}");
    }

    let kept: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(kept["pending"], serde_json::json!({}), "{kept}");
    for tool in &tools {
        assert_eq!(kept["pins"][tool]["fingerprint"], "sha256:2", "{kept}");
    }
    let accepted = kept["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "accepted")
        .count();
    assert_eq!(accepted, tools.len(), "{kept}");

    // Tools gone for good are forgotten, once.
    let forget = |tools: &[&str]| {
        let mut args = vec!["pins", "--config", &config, "forget"];
        args.extend_from_slice(tools);
        run(&args, "")
    };
    let (status, stdout, stderr) = forget(&["tool0", "tool1"]);
    assert!(status.success(), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("forgotten: tool0\nforgotten: tool1\n"),
        "{stdout}"
    );
    let (status, _, stderr) = forget(&["tool0"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`tool0` is not pinned"), "{stderr}");
    let (_, listed, _) = run(&["pins", "--config", &config], "");
    assert!(listed.contains(": 22 pinned, 0 changed"), "{listed}");
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    // `toolgate tools | head -1`: stdout's reader is gone before the output is written.
    let mut child = std::process::Command::new(common::BIN)
        .args(["tools", "--config", EXAMPLE_CONFIG])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the toolgate binary");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("toolgate's output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn check_shows_control_characters_escaped_and_refuses_them_in_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    std::fs::write(
        &path,
        "tools:\n  builtin: [echo]\n  labels:\n    echo: { tags: [\"x\\e]0;pwned\\a\"] }\n",
    )
    .unwrap();
    let (_, stdout, stderr) = run(&["check", "--config", path.to_str().unwrap()], "");
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
    }
    let (_, stderr) = refused(
        "tools:\n  builtin: [echo]\npolicies:\n  rate_limits:\n    - {name: \"a\\nwill_authorize  x\", rate: 1/s}\n",
    );
    assert!(
        stderr.contains("`policies.rate_limits[0].name`"),
        "{stderr}"
    );
}

#[test]
fn hash_key_refuses_a_key_longer_than_any_key_without_reading_it_all() {
    let (status, stdout, stderr) = run(&["hash-key"], &"k".repeat(100_000));
    assert_eq!(status.code(), Some(2), "{stdout}");
    assert!(stderr.contains("longer than 64 KiB"), "{stderr}");
}

#[test]
fn check_says_why_an_upstream_could_not_be_reached() {
    let (_, stderr) =
        refused("upstreams:\n  - name: gone\n    command: /nonexistent/toolgate-test-server\n");
    assert!(
        stderr.contains("cannot start `/nonexistent/toolgate-test-server`"),
        "{stderr}"
    );
    assert!(!stderr.contains("retry after"), "{stderr}");
}

/// Writes `yaml` to a file and runs `toolgate check` on it, expecting a refusal: the file
/// and `check`'s stderr.
fn check_refused(yaml: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).unwrap();
    let path = path.to_str().unwrap().to_owned();
    let (status, stdout, stderr) = run(&["check", "--config", &path], "");
    assert_eq!(
        status.code(),
        Some(2),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stdout.contains("OK"), "{stdout}");
    assert!(!stderr.contains("os error"), "{stderr}");
    (path, stderr)
}

#[test]
fn check_refuses_a_redis_url_that_serve_could_not_use_without_showing_it() {
    for (state, field, reason) in [
        (
            "\"redis://:s3cret-pw@127.0.0.1:99999\"",
            "`state`",
            "invalid port number",
        ),
        (
            "{ url: \"redis://:s3cret-pw@127.0.0.1:6379/abc\" }",
            "`state.url`",
            "the database after the host is not a number",
        ),
        ("\"redis://:s3cret-pw@\"", "`state`", "empty host"),
        ("{ url: \"redis://\" }", "`state.url`", "it names no host"),
    ] {
        let (path, stderr) = check_refused(&format!("tools:\n  builtin: [echo]\nstate: {state}\n"));
        assert!(stderr.contains(&format!("{path}:3:")), "{stderr}");
        assert!(stderr.contains(field), "{stderr}");
        assert!(stderr.contains(reason), "{stderr}");
        assert!(
            stderr.contains("the Redis URL (not shown: it may hold a password) cannot be used: ")
                && stderr.contains("such as `redis://127.0.0.1:6379`"),
            "{stderr}"
        );
        assert!(!stderr.contains("s3cret-pw"), "{stderr}");
        assert!(!stderr.contains("InvalidClientConfig"), "{stderr}");
    }
    // `serve` refuses it the same way, before contacting anything.
    let (_, stderr) = refused("state: \"redis://127.0.0.1:99999\"\n");
    assert!(
        stderr.contains("the Redis URL (not shown: it may hold a password) cannot be used: "),
        "{stderr}"
    );
}

#[test]
fn check_refuses_a_stats_path_that_is_a_directory_or_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let stats = |path: &std::path::Path| format!("stats:\n  path: {}\n", path.display());

    let (path, stderr) = check_refused(&stats(dir.path()));
    assert!(
        stderr.contains(&format!("{path}: `stats.path`: ")),
        "{stderr}"
    );
    assert!(
        stderr.contains("is a directory: give the path of a file, such as"),
        "{stderr}"
    );

    let missing = dir.path().join("not-made/stats.json");
    let (_, stderr) = check_refused(&stats(&missing));
    assert!(stderr.contains("`stats.path`"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the directory {} does not exist: create it (`mkdir -p {0}`)",
            dir.path().join("not-made").display()
        )),
        "{stderr}"
    );

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A directory this user cannot write in; root writes in any, but not in /sys.
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        let unwritable = if std::fs::File::create(locked.join("try")).is_err() {
            Some(locked.clone())
        } else {
            std::fs::remove_file(locked.join("try")).unwrap();
            Some(std::path::PathBuf::from("/sys")).filter(|sys| sys.is_dir())
        };
        if let Some(unwritable) = unwritable {
            let (_, stderr) = check_refused(&stats(&unwritable.join("stats.json")));
            assert!(stderr.contains("`stats.path`"), "{stderr}");
            assert!(
                stderr.contains(&format!(
                    "the gateway cannot write in the directory {} (permission denied)",
                    unwritable.display()
                )),
                "{stderr}"
            );
        }
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // A file that is there, even damaged, is left as it was, and nothing is added beside it.
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    let file = kept.join("stats.json");
    std::fs::write(&file, "{ not json").unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        format!("tools:\n  builtin: [echo]\n{}", stats(&file)),
    )
    .unwrap();
    let (status, stdout, stderr) = run(&["check", "--config", config.to_str().unwrap()], "");
    assert!(status.success(), "{stdout}\n{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "{ not json");
    assert_eq!(
        std::fs::read_dir(&kept).unwrap().count(),
        1,
        "something was left in {kept:?}"
    );
}

#[test]
fn check_refuses_a_redaction_salt_shorter_than_16_bytes_with_how_to_make_one() {
    let redaction = |salt: &str| {
        format!(
            "tools:\n  builtin: [echo]\npolicies:\n  redaction:\n    mode: hash\n    salt: \"{salt}\"\n"
        )
    };
    let (path, stderr) = check_refused(&redaction("pepper"));
    assert!(
        stderr.contains(&format!("{path}: `policies.redaction.salt`: ")),
        "{stderr}"
    );
    assert!(stderr.contains("at least 16 bytes"), "{stderr}");
    assert!(stderr.contains("openssl rand -hex 16"), "{stderr}");
    assert!(!stderr.contains("pepper"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(&config, redaction("0123456789abcdef")).unwrap();
    let (status, _, stderr) = run(&["check", "--config", config.to_str().unwrap()], "");
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_file_that_cannot_be_read_is_said_in_words_without_the_os_error_number() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let (status, _, stderr) = run(&["check", "--config", missing.to_str().unwrap()], "");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot read config file {}: no such file",
            missing.display()
        )),
        "{stderr}"
    );
    let (_, _, stderr) = run(&["check", "--config", dir.path().to_str().unwrap()], "");
    assert!(
        stderr.contains(": it is a directory, not a file"),
        "{stderr}"
    );
    let (status, _, stderr) = run(&["audit", "verify", missing.to_str().unwrap()], "");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no such file"), "{stderr}");
    assert!(!stderr.contains("os error"), "{stderr}");
}

/// Whether process `pid` is running (not gone, nor a zombie).
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command's name, which is in parentheses.
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.trim_start());
    !state.is_some_and(|s| s.starts_with('Z'))
}

/// Polls `done` every 50 ms for up to `seconds` (generous: a loaded machine).
fn eventually(seconds: u64, mut done: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while std::time::Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    done()
}

/// `toolgate mcp` stopped by Ctrl-C (SIGINT) or SIGTERM ends what its stdio upstreams
/// started: a launcher's own process, in the program's process group, does not outlive
/// the gateway. Before, the signal's default ended the gateway at once and left it running.
#[test]
fn mcp_stopped_by_a_signal_ends_what_its_stdio_upstreams_started() {
    use std::process::{Command, Stdio};

    let test = "mcp_stopped_by_a_signal_ends_what_its_stdio_upstreams_started";
    if !common::python_mcp_available(test) || !std::path::Path::new("/proc/self").exists() {
        return;
    }
    for signal in ["INT", "TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("launched.pid");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
        // The launcher starts a long-lived process of its own, then becomes the server.
        let launcher = format!(
            "sleep 1000 > /dev/null 2>&1 & echo $! > {pid}; exec {python} {script}",
            pid = pid_file.display(),
            python = common::python(),
        );
        let config = dir.path().join("toolgate.yaml");
        std::fs::write(
            &config,
            format!(
                "upstreams:\n  - name: shapes\n    command: sh\n    args: [\"-c\", {launcher:?}]\n\
users:\n{alice}",
                alice = common::user_yaml("alice", &["admin"]),
            ),
        )
        .unwrap();
        let mut gateway = Command::new(common::BIN)
            .args([
                "mcp",
                "--config",
                config.to_str().unwrap(),
                "--user",
                "alice",
            ])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the toolgate binary");
        let launched = eventually(60, || {
            std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.trim().parse::<u32>().is_ok())
        });
        assert!(launched, "SIG{signal}: the launcher never ran");
        let launched: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(running(launched), "SIG{signal}: the launched process runs");
        // Let the gateway finish starting (its upstream connected), as a client would.
        std::thread::sleep(std::time::Duration::from_millis(500));

        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &gateway.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal}");
        let stopped = eventually(30, || gateway.try_wait().unwrap().is_some());
        let gone = eventually(15, || !running(launched));
        if !gone {
            let _ = Command::new("kill")
                .args(["-KILL", &launched.to_string()])
                .status();
        }
        if !stopped {
            let _ = gateway.kill();
        }
        assert!(stopped, "SIG{signal}: toolgate mcp did not stop");
        assert!(
            gone,
            "SIG{signal}: the process the launcher started outlived toolgate mcp"
        );
    }
}
