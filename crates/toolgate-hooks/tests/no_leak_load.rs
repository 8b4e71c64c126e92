//! No leaks under load: invocations at 64-way concurrency through quota + concurrency +
//! timeout + retry, a third of them cancelled at random points (caller deadlines, caller
//! tokens, dropped futures) and 1% panicking in the tool. Afterwards every permit is back,
//! no quota unit is in use, and the run has finished (no deadlock).
//!
//! The default size runs in the normal suite; `TOOLGATE_LOAD_INVOCATIONS=100000` or the
//! ignored `no_leaks_under_full_load` runs the full 100 000.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use toolgate_core::external::CancellationToken;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{InvokeOptions, Pipeline, ToolError, User, tool_fn};
use toolgate_hooks::concurrency::{Concurrency, InMemoryConcurrency};
use toolgate_hooks::partition::Partition;
use toolgate_hooks::quota::{InMemoryQuota, Quota, Rate};
use toolgate_hooks::retry::{Retry, RetryBudget};
use toolgate_hooks::timeout::Timeout;

#[derive(serde::Deserialize, garde::Validate, schemars::JsonSchema)]
struct Work {
    #[garde(skip)]
    seed: u64,
}

const PANIC_MESSAGE: &str = "load-test tool panic";
const CONCURRENCY: usize = 64;

fn silence_tool_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            if message != Some(PANIC_MESSAGE) {
                default(info);
            }
        }));
    });
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    rate_limited: AtomicU64,
    overloaded: AtomicU64,
    timeout: AtomicU64,
    cancelled: AtomicU64,
    dropped: AtomicU64,
    internal: AtomicU64,
    gave_up: AtomicU64,
    other: AtomicU64,
}

impl Tally {
    fn count(&self, outcome: &Result<serde_json::Value, ToolError>) {
        let slot = match outcome {
            Ok(_) => &self.ok,
            Err(e) => match e.code() {
                "rate_limited" => &self.rate_limited,
                "overloaded" => &self.overloaded,
                "timeout" => &self.timeout,
                "cancelled" => &self.cancelled,
                "internal" => &self.internal,
                "tool_error" => &self.gave_up,
                _ => &self.other,
            },
        };
        slot.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        write!(
            f,
            "ok {}, rate_limited {}, overloaded {}, timeout {}, cancelled {}, dropped {}, internal (panics) {}, tool_error (retries spent) {}, other {}",
            l(&self.ok),
            l(&self.rate_limited),
            l(&self.overloaded),
            l(&self.timeout),
            l(&self.cancelled),
            l(&self.dropped),
            l(&self.internal),
            l(&self.gave_up),
            l(&self.other)
        )
    }
}

async fn run_load(invocations: u64) {
    silence_tool_panics();
    let quota = InMemoryQuota::default();
    let permits = InMemoryConcurrency::default();
    let pipeline = Pipeline::builder()
        .tool(
            tool_fn(
                "work",
                "Sometimes slow, flaky or panicking.",
                |work: Work| async move {
                    let seed = work.seed;
                    let mut rng = fastrand::Rng::with_seed(seed);
                    let roll = rng.u32(0..100);
                    if roll == 0 {
                        panic!("{}", PANIC_MESSAGE);
                    }
                    match roll {
                        1..=5 => return Err(ToolError::transient("flaky upstream")),
                        6..=8 => tokio::time::sleep(Duration::from_millis(20)).await, // past the attempt timeout
                        9..=50 => tokio::time::sleep(Duration::from_millis(1)).await,
                        _ => tokio::task::yield_now().await,
                    }
                    Ok::<_, ToolError>(seed)
                },
            )
            .annotations(ToolAnnotations {
                idempotent: true,
                ..ToolAnnotations::default()
            }),
        )
        .hook(
            // 2,400 calls a second across the eight users, plus their bursts: below what even
            // a loaded machine runs here (6,650 a second seen at load 7, debug build), so
            // the limit always takes part, while a few thousand calls still get through.
            Quota::builder(Rate::per_second(300).unwrap().with_burst(50).unwrap())
                .partition(Partition::User)
                .backend(Arc::new(quota.clone()))
                .build(),
        )
        .hook(
            Concurrency::builder(4)
                .unwrap()
                .partition(Partition::User)
                .wait(Duration::from_millis(1))
                .backend(Arc::new(permits.clone()))
                .build(),
        )
        .hook(Timeout::per_call(Duration::from_millis(50)))
        .hook(Timeout::per_attempt(Duration::from_millis(5)))
        .hook(
            Retry::builder()
                .max_attempts(3)
                .base_delay(Duration::from_millis(1))
                .max_delay(Duration::from_millis(4))
                .budget(RetryBudget::new(0.2, 100, 1000).unwrap())
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();

    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let run = futures::stream::iter(0..invocations).for_each_concurrent(CONCURRENCY, |i| {
        let pipeline = pipeline.clone();
        let tally = Arc::clone(&tally);
        async move {
            let mut rng = fastrand::Rng::with_seed(i ^ 0x5eed);
            let options = InvokeOptions::new().user(User::new(format!("user-{}", i % 8)));
            let input = json!({ "seed": i });
            // A third are cancelled, in four ways, at random points.
            if i % 3 != 0 {
                tally.count(&pipeline.invoke("work", input, options).await);
                return;
            }
            let at = Duration::from_micros(rng.u64(0..3_000));
            match rng.u8(0..4) {
                0 => tally.count(&pipeline.invoke("work", input, options.timeout(at)).await),
                1 => {
                    let token = CancellationToken::new();
                    let cancel = token.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(at).await;
                        cancel.cancel();
                    });
                    tally.count(
                        &pipeline
                            .invoke("work", input, options.cancellation(token))
                            .await,
                    );
                }
                2 => {
                    match tokio::time::timeout(at, pipeline.invoke("work", input, options)).await {
                        Ok(outcome) => tally.count(&outcome),
                        Err(_) => {
                            tally.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                _ => {
                    // Dropped after a random number of polls.
                    let mut call = Box::pin(pipeline.invoke("work", input, options));
                    let polls = rng.u32(1..6);
                    let mut finished = None;
                    for _ in 0..polls {
                        if let Some(outcome) = futures::FutureExt::now_or_never(&mut call) {
                            finished = Some(outcome);
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                    match finished {
                        Some(outcome) => tally.count(&outcome),
                        None => {
                            tally.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the load run finished: no deadlock");
    let ran_for = started.elapsed();

    // Dropped invocations finish their tail in spawned tasks; give them a moment.
    let settle = Instant::now();
    while (permits.in_flight() > 0 || quota.in_use() > 0)
        && settle.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!(
        "{invocations} invocations at {CONCURRENCY}-way concurrency in {ran_for:?} ({:.0} per second): {tally}",
        invocations as f64 / ran_for.as_secs_f64()
    );
    assert_eq!(permits.in_flight(), 0, "every concurrency permit is back");
    assert_eq!(
        permits.key_count(),
        0,
        "every semaphore is back to full and dropped"
    );
    assert_eq!(quota.in_use(), 0, "no quota unit is held");
    assert_eq!(
        tally.other.load(Ordering::Relaxed),
        0,
        "only the expected outcomes: {tally}"
    );
    assert!(
        tally.internal.load(Ordering::Relaxed) > 0,
        "some tools panicked: {tally}"
    );
    // How many calls the rate limit admits depends on how fast this machine runs the
    // load, so only require that every kind of outcome took part (the rate is set below
    // any throughput seen here, so that it does on a loaded machine too).
    assert!(
        tally.ok.load(Ordering::Relaxed) > 0,
        "some calls still succeed: {tally}"
    );
    assert!(
        tally.rate_limited.load(Ordering::Relaxed) > 0,
        "the rate limit took part: {tally}"
    );
}

fn invocations_from_env(default: u64) -> u64 {
    std::env::var("TOOLGATE_LOAD_INVOCATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leaks_under_load() {
    run_load(invocations_from_env(20_000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the full size: 100 000 invocations; run with --ignored"]
async fn no_leaks_under_full_load() {
    run_load(100_000).await;
}
