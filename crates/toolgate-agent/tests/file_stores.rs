//! One store owns one file: a second store on the suspension file or the statistics file,
//! in this process or another, is refused while the first is open, and opens once it is
//! gone, with the first one's content.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{
    ExecuteOptions, JsonFileSuspensionStore, SuspensionLimits, ToolCall, ToolResult, ToolStatus,
    UsageStats,
};

/// Suspends `n` transfers in `store`, through a tool system that is dropped afterwards.
async fn suspend_transfers(store: &Arc<JsonFileSuspensionStore>, n: usize) -> Vec<String> {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(Arc::clone(store) as _)
        .build()
        .unwrap();
    let calls = (0..n)
        .map(|i| {
            ToolCall::new(
                format!("t{i}"),
                "transfer",
                json!({ "text": format!("{i} EUR") }),
            )
        })
        .collect();
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    results
        .iter()
        .map(|result| {
            assert_eq!(result.status, ToolStatus::Suspended, "{result:?}");
            result.suspension_id().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_second_suspension_store_on_the_same_file_is_refused_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    let first =
        Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
    let ids = suspend_transfers(&first, 2).await;

    let refused = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap_err();
    assert!(refused.is_in_use(), "{refused:?}");
    assert_eq!(refused.source.kind(), std::io::ErrorKind::WouldBlock);
    assert_eq!(refused.path, path);
    let message = refused.to_string();
    assert!(
        message.contains("another store (in this process or another) already has")
            && message.contains(&path.display().to_string())
            && message
                .contains("give each process its own file, or share calls through the Redis store"),
        "{message}"
    );
    assert_eq!(first.len(), 2, "the refused store changed nothing");

    drop(first);
    let second =
        once_released(|| JsonFileSuspensionStore::open(&path, SuspensionLimits::default()));
    assert_eq!(second.len(), 2, "the first store's calls are in the file");
    for id in &ids {
        assert!(
            toolgate_agent::SuspensionStore::get(&second, id)
                .await
                .unwrap()
                .is_some(),
            "{id} is kept"
        );
    }
    assert!(
        path.with_file_name("suspensions.json.lock").exists(),
        "the lock file is kept"
    );
}

#[test]
fn a_second_statistics_store_on_the_same_file_is_refused_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.json");
    let first = UsageStats::open(&path).unwrap();
    first.record(&ToolResult::success("c1", "search", json!([])));
    first.save().unwrap();

    let refused = UsageStats::open(&path).unwrap_err();
    assert!(refused.is_in_use(), "{refused:?}");
    assert_eq!(refused.source.kind(), std::io::ErrorKind::WouldBlock);
    let message = refused.to_string();
    assert!(
        message.contains("another store (in this process or another) already has")
            && message.contains(&path.display().to_string())
            && message.contains("give each process its own statistics file"),
        "{message}"
    );

    drop(first);
    let second = once_released(|| UsageStats::open(&path));
    assert_eq!(second.tool("search").unwrap().calls, 1);
}

#[test]
fn a_file_store_error_that_is_not_contention_is_not_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("suspensions.json");
    let error = JsonFileSuspensionStore::open(&missing, SuspensionLimits::default()).unwrap_err();
    assert!(!error.is_in_use(), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("check that its directory exists and is writable"),
        "{message}"
    );
    let error = UsageStats::open(dir.path().join("no-such-dir").join("stats.json")).unwrap_err();
    assert!(!error.is_in_use(), "{error:?}");
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_planted_at_the_lock_file_is_refused_and_its_target_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "not yours").unwrap();
    let path = dir.path().join("stats.json");
    std::os::unix::fs::symlink(&target, dir.path().join("stats.json.lock")).unwrap();

    let refused = UsageStats::open(&path).unwrap_err();
    assert!(!refused.is_in_use(), "{refused:?}");
    let message = refused.to_string();
    assert!(
        message.contains("stats.json.lock is a symbolic link: remove the link"),
        "{message}"
    );
    let refused =
        JsonFileSuspensionStore::open(dir.path().join("stats.json"), SuspensionLimits::default())
            .unwrap_err();
    assert!(
        refused.to_string().contains("is a symbolic link"),
        "{refused}"
    );

    // A missing target is not created either.
    std::fs::remove_file(&target).unwrap();
    UsageStats::open(&path).unwrap_err();
    assert!(!target.exists(), "the link's target was created");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the link"
    );
}

/// Broken before: a store opened through a symbolic link locked beside the link, not the
/// file, so a second store on the file's own name opened too, and a call approved in both
/// ran twice; and its first write replaced the link, leaving the file behind, stale.
#[cfg(unix)]
#[tokio::test]
async fn a_store_path_that_is_a_symbolic_link_is_refused_and_the_file_it_names_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("suspensions.json");
    let store =
        Arc::new(JsonFileSuspensionStore::open(&real, SuspensionLimits::default()).unwrap());
    suspend_transfers(&store, 1).await;
    let saved = std::fs::read(&real).unwrap();

    let link = dir.path().join("linked.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let refused = JsonFileSuspensionStore::open(&link, SuspensionLimits::default()).unwrap_err();
    assert!(!refused.is_in_use(), "{refused:?}");
    let message = refused.to_string();
    assert!(
        message.contains(
            "is not a regular file but a symbolic link: give the path of the file itself"
        ),
        "{message}"
    );
    // The statistics' file too.
    std::os::unix::fs::symlink(&real, dir.path().join("stats.json")).unwrap();
    let refused = UsageStats::open(dir.path().join("stats.json")).unwrap_err();
    assert!(refused.to_string().contains("symbolic link"), "{refused}");

    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read(&real).unwrap(),
        saved,
        "the file is untouched"
    );
    assert_eq!(store.len(), 1);
}

#[cfg(unix)]
#[test]
fn statistics_know_their_file_however_its_path_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("linked")).unwrap();
    let stats = UsageStats::open(real.join("stats.json")).unwrap();

    assert!(stats.is_file(&real.join("stats.json")));
    assert!(stats.is_file(&dir.path().join("linked").join("stats.json")));
    assert!(stats.is_file(&real.join("..").join("real").join("stats.json")));
    assert!(!stats.is_file(&real.join("other.json")));
    assert!(!stats.is_file(&dir.path().join("stats.json")));
    // Each spelling that is the same file would be refused as in use.
    let again = UsageStats::open(dir.path().join("linked").join("stats.json")).unwrap_err();
    assert!(again.is_in_use(), "{again:?}");
}

/// Set (to `<kind>:<path>`) in the child process that holds a store for the parent.
const HOLD: &str = "TOOLGATE_TEST_HOLD_STORE";

/// Not a test of its own: in a child process started by a test below (with [`HOLD`] set),
/// opens a store on the given path, prints `ready`, and keeps it open until its standard
/// input closes. Without [`HOLD`], it returns at once.
#[test]
fn child_process_holds_a_store_open_until_its_stdin_closes() {
    let Ok(what) = std::env::var(HOLD) else {
        return;
    };
    let (kind, path) = what.split_once(':').unwrap();
    let held: Box<dyn std::any::Any> = match kind {
        "suspensions" => {
            Box::new(JsonFileSuspensionStore::open(path, SuspensionLimits::default()).unwrap())
        }
        "stats" => Box::new(UsageStats::open(path).unwrap()),
        other => panic!("unknown kind {other}"),
    };
    let mut stdout = std::io::stdout();
    // On a line of its own: the test harness has printed the test's name without one.
    writeln!(stdout, "\nready").unwrap();
    stdout.flush().unwrap();
    let mut rest = String::new();
    while std::io::stdin().read_line(&mut rest).unwrap_or(0) > 0 {}
    drop(held);
}

/// A child process of this test binary holding a store; killed when dropped.
struct Holder {
    child: Child,
}

impl Holder {
    /// Starts the child on `path` and waits (up to 60 s) until it says it holds the store.
    fn start(kind: &str, path: &Path) -> Holder {
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process_holds_a_store_open_until_its_stdin_closes",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOLD, format!("{kind}:{}", path.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut holder = Holder { child };
        let stdout = holder.child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_until_ready(stdout, &tx));
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(true) => holder,
            Ok(false) => panic!("the child process ended without holding the store"),
            Err(_) => panic!("the child process did not hold the store within 60 s"),
        }
    }

    /// Ends the child and waits until it is gone (its lock with it).
    fn end(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `true` when the child prints `ready`, `false` when its output ends first.
fn read_until_ready(stdout: ChildStdout, ready: &mpsc::Sender<bool>) {
    for line in BufReader::new(stdout).lines() {
        match line {
            Ok(line) if line.trim() == "ready" => {
                let _ = ready.send(true);
                return;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = ready.send(false);
}

/// `open` once the lock a dropped store held is free. A test of this binary that starts a
/// child process can hold a copy of the lock file's descriptor between the fork and the
/// exec (which closes it): a moment, but one a loaded machine can stretch.
fn once_released<T, E: std::fmt::Debug>(open: impl Fn() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open() {
            Ok(store) => return store,
            Err(error) if std::time::Instant::now() > deadline => {
                panic!("the lock was not released: {error:?}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn suspension_file(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("suspensions.json")
}

#[tokio::test]
async fn a_suspension_file_held_by_another_process_is_refused_until_that_process_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = suspension_file(&dir);
    let ids = {
        let store =
            Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
        suspend_transfers(&store, 1).await
    };

    let holder = Holder::start("suspensions", &path);
    let refused = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap_err();
    assert!(refused.is_in_use(), "{refused:?}");
    assert!(
        refused
            .to_string()
            .contains("share calls through the Redis store"),
        "{refused}"
    );
    holder.end();

    let store = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap();
    assert_eq!(store.len(), 1);
    assert!(
        toolgate_agent::SuspensionStore::get(&store, &ids[0])
            .await
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_statistics_file_held_by_another_process_is_refused_until_that_process_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.json");
    let holder = Holder::start("stats", &path);
    let refused = UsageStats::open(&path).unwrap_err();
    assert!(refused.is_in_use(), "{refused:?}");
    holder.end();
    UsageStats::open(&path).unwrap();
}
