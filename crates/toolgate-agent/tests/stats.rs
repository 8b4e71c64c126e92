//! Usage statistics: counted per tool, saved atomically on an interval and at shutdown,
//! loaded at start, a corrupt file moved aside.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{ExecuteOptions, ToolCall, UsageStats};

#[tokio::test(start_paused = true)]
async fn calls_successes_failures_and_durations_are_counted_per_tool() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(UsageStats::open(dir.path().join("stats.json")).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).stats(stats.clone()).build().unwrap();
    let calls = vec![
        ToolCall::new("a", "sleep", json!({ "ms": 10 })),
        ToolCall::new("b", "sleep", json!({ "ms": 20 })),
        ToolCall::new("c", "sleep", json!({ "ms": 30 })),
        ToolCall::new("d", "sleep", json!({ "ms": 1_000_000 })),
        ToolCall::new("e", "transfer", json!({ "text": "1" })),
        ToolCall::new("f", "made_up_tool", json!({})),
    ];
    system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;

    let sleep = stats.tool("sleep").unwrap();
    assert_eq!((sleep.calls, sleep.successes), (4, 3));
    assert_eq!(sleep.failures.get("invalid_input"), Some(&1));
    assert_eq!((sleep.p50_ms, sleep.p95_ms), (10, 30));
    assert!(
        sleep.mean_ms >= 15.0 && sleep.mean_ms <= 16.0,
        "{}",
        sleep.mean_ms
    );
    assert!(sleep.first_used_ms > 0 && sleep.last_used_ms >= sleep.first_used_ms);
    assert_eq!(stats.tool("transfer").unwrap().suspensions, 1);
    assert!(
        stats.tool("made_up_tool").is_none(),
        "unknown names are not counted"
    );
}

#[tokio::test(start_paused = true)]
async fn stats_are_saved_on_the_interval_and_at_shutdown_and_loaded_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.json");
    let stats = Arc::new(UsageStats::open(&path).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).stats(stats.clone()).build().unwrap();
    let saver = stats.autosave(Duration::from_secs(60));

    system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("a", "echo", json!({ "text": "1" }))],
            ExecuteOptions::new(),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        !path.exists(),
        "nothing is written before the first interval"
    );
    tokio::time::sleep(Duration::from_secs(31)).await;
    // The statistics still own the file: it is read as it is, not opened a second time.
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["echo"]["calls"], 1);

    system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("b", "echo", json!({ "text": "2" }))],
            ExecuteOptions::new(),
        )
        .await;
    saver.shutdown().await.unwrap();
    // A restart: the statistics are dropped (with the system that holds them) first.
    drop((system, stats));
    let reloaded = UsageStats::open(&path).unwrap();
    assert_eq!(
        reloaded.tool("echo").unwrap().calls,
        2,
        "shutdown saves the last calls"
    );
    assert_eq!(
        reloaded.tool("echo").unwrap().recent_ms.len(),
        2,
        "percentile windows survive a restart"
    );
}

#[test]
fn corrupt_stats_file_is_moved_aside_with_its_content_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.json");
    std::fs::write(&path, b"{\"echo\": {\"calls\": tru").unwrap();
    let stats = UsageStats::open(&path).unwrap();
    assert!(stats.snapshot().is_empty());
    let aside = stats.moved_aside().unwrap().to_owned();
    assert!(
        aside
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("stats.json.corrupt-")
    );
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        b"{\"echo\": {\"calls\": tru"
    );
    stats.save().unwrap();
    assert!(
        path.exists() && aside.exists(),
        "saving starts a new file beside the old one"
    );
}

#[test]
fn save_leaves_no_temporary_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let stats = UsageStats::open(dir.path().join("stats.json")).unwrap();
    stats.record(&toolgate_agent::ToolResult::success(
        "c",
        "echo",
        json!("x"),
    ));
    stats.save().unwrap();
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["stats.json", "stats.json.lock"],
        "only the file and its lock file, which is kept"
    );
}

/// A statistics file for `echo` with `usage` merged into an ordinary entry.
fn edited_stats_file(dir: &tempfile::TempDir, usage: serde_json::Value) -> std::path::PathBuf {
    let path = dir.path().join("stats.json");
    let mut echo = json!({
        "calls": 1, "successes": 1, "failures": {}, "suspensions": 0,
        "first_used_ms": 1, "last_used_ms": 1, "mean_ms": 5.0, "p50_ms": 5, "p95_ms": 5,
        "recent_ms": [5],
    });
    for (key, value) in usage.as_object().unwrap() {
        echo[key] = value.clone();
    }
    std::fs::write(&path, json!({ "echo": echo }).to_string()).unwrap();
    path
}

#[test]
fn counts_read_back_at_their_maximum_stay_there_instead_of_overflowing() {
    let dir = tempfile::tempdir().unwrap();
    let path = edited_stats_file(
        &dir,
        json!({ "calls": u64::MAX, "successes": u64::MAX, "suspensions": u64::MAX,
                "failures": { "timeout": u64::MAX, "tool_error": u64::MAX } }),
    );
    let stats = UsageStats::open(&path).unwrap();
    let error = toolgate_core::ToolError::Timeout {
        after: Duration::from_secs(1),
    };
    stats.record(&toolgate_agent::ToolResult::success(
        "a",
        "echo",
        json!("x"),
    ));
    stats.record(&toolgate_agent::ToolResult::error("b", "echo", &error));

    let echo = stats.tool("echo").unwrap();
    assert_eq!(
        (echo.calls, echo.successes, echo.failures["timeout"]),
        (u64::MAX, u64::MAX, u64::MAX)
    );
    assert_eq!(echo.failure_count(), u64::MAX);
    assert!(echo.mean_ms.is_finite(), "{}", echo.mean_ms);
    stats.save().unwrap();
    drop(stats);
    assert!(
        UsageStats::open(&path).unwrap().moved_aside().is_none(),
        "the saved file reads back"
    );
}

#[test]
fn a_duration_window_read_back_longer_than_the_window_is_cut_back_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = edited_stats_file(&dir, json!({ "recent_ms": vec![7; 5_000] }));
    let stats = UsageStats::open(&path).unwrap();
    stats.record(&toolgate_agent::ToolResult::success(
        "a",
        "echo",
        json!("x"),
    ));
    let echo = stats.tool("echo").unwrap();
    assert_eq!(echo.recent_ms.len(), 1_000);
    assert_eq!(echo.recent_ms.back(), Some(&0));
}
