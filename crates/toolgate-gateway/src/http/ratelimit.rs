//! The `RateLimit-Policy` and `RateLimit` response header fields of the IETF draft
//! (draft-ietf-httpapi-ratelimit-headers, revisions 09 and 10: Structured Field lists).
//!
//! Every limit a call met — a budget or a rate limit — is one member of
//! `RateLimit-Policy`: `"daily";q=1000;w=86400` (quota `q` per window `w` seconds). A limit
//! that knows how much is left is also a member of `RateLimit`: `"daily";r=12;t=3600`
//! (`r` units left, back in full after `t` seconds). A rate limit (GCRA) tells what is
//! left only when it refuses (`r=0`, `t` the wait).

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use toolgate_hooks::budget::LimitState;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Sets both fields on `headers` from `states`; sets nothing for no limits.
pub fn insert(headers: &mut HeaderMap, states: &[LimitState]) {
    let policies: Vec<String> = states
        .iter()
        .map(|s| {
            format!(
                "{};q={};w={}",
                sf_string(&s.policy),
                s.quota,
                whole_seconds(s.window)
            )
        })
        .collect();
    let current: Vec<String> = states
        .iter()
        .filter_map(|s| {
            let remaining = s.remaining?;
            let mut member = format!("{};r={remaining}", sf_string(&s.policy));
            if let Some(resets_in) = s.resets_in {
                member.push_str(&format!(";t={}", whole_seconds(resets_in)));
            }
            Some(member)
        })
        .collect();
    for (name, members) in [(RATELIMIT_POLICY, policies), (RATELIMIT, current)] {
        if let Ok(value) = HeaderValue::from_str(&members.join(", "))
            && !members.is_empty()
        {
            headers.insert(name, value);
        }
    }
}

/// Seconds, rounded up (a client that waits `t` is never early).
fn whole_seconds(duration: std::time::Duration) -> u64 {
    duration.as_millis().div_ceil(1000) as u64
}

/// A Structured Field string: quoted, `"` and `\` escaped, anything outside printable
/// ASCII replaced by `?`.
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn budgets_and_rate_limits_are_members_of_the_fields() {
        let mut headers = HeaderMap::new();
        insert(
            &mut headers,
            &[
                LimitState {
                    policy: "daily".into(),
                    quota: 1000,
                    window: Duration::from_secs(86_400),
                    remaining: Some(12),
                    resets_in: Some(Duration::from_millis(3_599_001)),
                },
                LimitState {
                    policy: "per \"user\"".into(),
                    quota: 60,
                    window: Duration::from_secs(60),
                    remaining: None,
                    resets_in: None,
                },
            ],
        );
        assert_eq!(
            headers[RATELIMIT_POLICY],
            "\"daily\";q=1000;w=86400, \"per \\\"user\\\"\";q=60;w=60"
        );
        assert_eq!(headers[RATELIMIT], "\"daily\";r=12;t=3600");
    }

    #[test]
    fn no_limits_no_fields() {
        let mut headers = HeaderMap::new();
        insert(&mut headers, &[]);
        assert!(headers.is_empty());
    }
}
