//! The Redis the console's unit tests use, when there is one.

/// The Redis of `REDIS_URL` (or 127.0.0.1:6379), under a key prefix of the test's own
/// starting `prefix`, for the console's unit tests; `None` (said on stderr) without Redis
/// outside CI, a failed test in CI.
pub(super) async fn redis_or_skip(test: &str, prefix: &str) -> Option<toolgate_redis::RedisState> {
    use std::io::Write;
    use toolgate_redis::{RedisConfig, RedisState};
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("{prefix}{}x{}", std::process::id(), fastrand::u32(..));
    let config = RedisConfig::builder().key_prefix(prefix).build();
    match RedisState::connect(&url, config).await {
        Ok(state) => Some(state),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: Redis at {url} is required in CI ({e})")
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED {test}: no Redis at {url} ({e})"
            );
            None
        }
    }
}
