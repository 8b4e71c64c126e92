//! The signature of a webhook, and its verification on the receiving side.
//!
//! The scheme is that of Standard Webhooks (<https://www.standardwebhooks.com>) with our own
//! header names: the HMAC-SHA-256, under the shared secret, of `{id}.{timestamp}.{body}`,
//! sent as `v1=` and its lowercase hex digits.

use std::time::{Duration, SystemTime};

use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

/// The event's id: the same on every attempt, so that a receiver can drop a repeat.
pub const ID_HEADER: &str = "toolgate-webhook-id";

/// When this attempt was signed, in seconds since the Unix epoch.
pub const TIMESTAMP_HEADER: &str = "toolgate-webhook-timestamp";

/// `v1=<hex>`: the signature of this attempt (several, separated by spaces, may be sent).
pub const SIGNATURE_HEADER: &str = "toolgate-webhook-signature";

/// How far a receiver should let a timestamp be from its own clock (5 minutes): an attempt
/// outside it may be a replay.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The value of [`SIGNATURE_HEADER`] for one attempt: `v1=` and the hex HMAC-SHA-256,
/// under `secret`, of `{id}.{timestamp}.{body}`.
///
/// # Examples
///
/// ```
/// use toolgate_gateway::webhooks::sign;
///
/// let signature = sign(b"whsec-0123456789abcdef", "evt_1", 1_700_000_000, br#"{"a":1}"#);
/// assert!(signature.starts_with("v1="));
/// assert_eq!(signature.len(), 3 + 64);
/// ```
pub fn sign(secret: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let digest = mac(secret, id, timestamp, body).finalize().into_bytes();
    let mut out = String::with_capacity(3 + 2 * digest.len());
    out.push_str("v1=");
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn mac(secret: &[u8], id: &str, timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Why a webhook was not accepted by [`verify`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookVerifyError {
    /// A header the signature needs is missing or not text.
    #[error("missing or unreadable `{0}` header: refuse the request")]
    MissingHeader(&'static str),
    /// The timestamp is not a whole number of seconds.
    #[error("the timestamp is not a number of seconds since the Unix epoch: refuse the request")]
    BadTimestamp,
    /// The timestamp is further from now than the window allows: a replay, or a clock far
    /// off.
    #[error(
        "the timestamp is {off_by:?} away from now, more than the replay window allows: refuse the request (and check both clocks if it keeps happening)"
    )]
    OutsideWindow {
        /// How far from now it is.
        off_by: Duration,
    },
    /// No signature matches the body under this secret.
    #[error(
        "no signature matches: the body or headers were changed, or the secret differs from the gateway's"
    )]
    BadSignature,
}

/// Checks a webhook as its receiver got it: the headers, the body's exact bytes, the
/// receiver's clock and the replay window it allows (use [`REPLAY_WINDOW`]).
///
/// Verify before parsing the body, and answer 2xx only for an event you accept: the
/// gateway retries anything else (but 4xx other than 408 and 429). The same
/// [`ID_HEADER`] may come more than once (a retry after a lost answer): keep the ids you
/// have seen for as long as the window to act once per event.
///
/// # Errors
///
/// [`WebhookVerifyError`]: a header is missing, the timestamp is malformed or outside
/// the window, or no `v1=` signature matches (compared in constant time).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, HeaderValue};
/// use toolgate_gateway::webhooks::{self, WebhookVerifyError, REPLAY_WINDOW};
///
/// let secret = b"whsec-0123456789abcdef";
/// let body = br#"{"type":"suspension.waiting"}"#;
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let mut headers = HeaderMap::new();
/// headers.insert(webhooks::ID_HEADER, HeaderValue::from_static("evt_1"));
/// headers.insert(webhooks::TIMESTAMP_HEADER, HeaderValue::from_static("1700000000"));
/// let signature = webhooks::sign(secret, "evt_1", 1_700_000_000, body);
/// headers.insert(webhooks::SIGNATURE_HEADER, signature.parse().unwrap());
///
/// assert_eq!(webhooks::verify(secret, &headers, body, now, REPLAY_WINDOW), Ok(()));
/// let tampered = br#"{"type":"suspension.decided"}"#;
/// assert_eq!(
///     webhooks::verify(secret, &headers, tampered, now, REPLAY_WINDOW),
///     Err(WebhookVerifyError::BadSignature)
/// );
/// let much_later = now + Duration::from_secs(3600);
/// assert!(matches!(
///     webhooks::verify(secret, &headers, body, much_later, REPLAY_WINDOW),
///     Err(WebhookVerifyError::OutsideWindow { .. })
/// ));
/// ```
pub fn verify(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
    window: Duration,
) -> Result<(), WebhookVerifyError> {
    let header = |name: &'static str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or(WebhookVerifyError::MissingHeader(name))
    };
    let id = header(ID_HEADER)?;
    let timestamp: u64 = header(TIMESTAMP_HEADER)?
        .trim()
        .parse()
        .map_err(|_| WebhookVerifyError::BadTimestamp)?;
    let signatures = header(SIGNATURE_HEADER)?;
    let since_epoch = Duration::from_secs(timestamp);
    // A timestamp past what the clock can hold (`18446744073709551615`, say) is as far
    // outside the window as a timestamp can be, not a reason to panic.
    let off_by = match SystemTime::UNIX_EPOCH.checked_add(since_epoch) {
        Some(sent) => match now.duration_since(sent) {
            Ok(behind) => behind,
            Err(ahead) => ahead.duration(),
        },
        None => since_epoch.saturating_sub(
            now.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        ),
    };
    if off_by > window {
        return Err(WebhookVerifyError::OutsideWindow { off_by });
    }
    let expected = mac(secret, id, timestamp, body);
    let matches = signatures
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1="))
        .filter_map(from_hex)
        .any(|digest| expected.clone().verify_slice(&digest).is_ok());
    if matches {
        Ok(())
    } else {
        Err(WebhookVerifyError::BadSignature)
    }
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    const SECRET: &[u8] = b"whsec-0123456789abcdef";

    fn signed(id: &str, timestamp: u64, body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ID_HEADER, HeaderValue::from_str(id).unwrap());
        headers.insert(TIMESTAMP_HEADER, HeaderValue::from(timestamp));
        let signature = sign(SECRET, id, timestamp, body);
        headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(&signature).unwrap());
        headers
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn the_signature_is_the_hmac_of_id_timestamp_and_body() {
        // printf 'evt_1.1700000000.{}' | openssl dgst -sha256 -hmac whsec-0123456789abcdef
        assert_eq!(
            sign(SECRET, "evt_1", 1_700_000_000, b"{}"),
            "v1=68ec0c5d59584c3eed47e4f60fe5c3a00ebb7999978ecf8ad089fe076739429f"
        );
    }

    #[test]
    fn a_changed_id_timestamp_body_or_secret_fails() {
        let body = b"{\"type\":\"suspension.waiting\"}";
        let headers = signed("evt_1", 1000, body);
        assert_eq!(
            verify(SECRET, &headers, body, at(1000), REPLAY_WINDOW),
            Ok(())
        );

        let mut other_id = headers.clone();
        other_id.insert(ID_HEADER, HeaderValue::from_static("evt_2"));
        let mut other_time = headers.clone();
        other_time.insert(TIMESTAMP_HEADER, HeaderValue::from(1001u64));
        for (headers, body, secret) in [
            (&headers, &b"{\"type\":\"suspension.expired\"}"[..], SECRET),
            (&other_id, &body[..], SECRET),
            (&other_time, &body[..], SECRET),
            (&headers, &body[..], &b"another-secret-of-16+"[..]),
        ] {
            assert_eq!(
                verify(secret, headers, body, at(1000), REPLAY_WINDOW),
                Err(WebhookVerifyError::BadSignature)
            );
        }
    }

    #[test]
    fn a_timestamp_outside_the_window_either_way_fails() {
        let headers = signed("evt_1", 10_000, b"x");
        let window = Duration::from_secs(300);
        assert!(verify(SECRET, &headers, b"x", at(10_300), window).is_ok());
        assert!(verify(SECRET, &headers, b"x", at(9_700), window).is_ok());
        assert_eq!(
            verify(SECRET, &headers, b"x", at(10_301), window),
            Err(WebhookVerifyError::OutsideWindow {
                off_by: Duration::from_secs(301)
            })
        );
        assert!(matches!(
            verify(SECRET, &headers, b"x", at(9_000), window),
            Err(WebhookVerifyError::OutsideWindow { .. })
        ));
    }

    #[test]
    fn a_timestamp_past_what_a_clock_holds_is_outside_the_window_not_a_panic() {
        let body = b"{}";
        for timestamp in [u64::MAX, i64::MAX as u64, u64::MAX / 2] {
            let headers = signed("evt_1", timestamp, body);
            let refused = verify(SECRET, &headers, body, at(1_700_000_000), REPLAY_WINDOW);
            assert!(
                matches!(refused, Err(WebhookVerifyError::OutsideWindow { off_by }) if off_by > Duration::from_secs(1 << 40)),
                "{timestamp}: {refused:?}"
            );
        }
    }

    #[test]
    fn any_of_several_signatures_may_match_and_missing_headers_are_named() {
        let mut headers = signed("evt_1", 1000, b"x");
        let good = headers[SIGNATURE_HEADER].to_str().unwrap().to_owned();
        let both = format!("v1={} v1=zz {good}", "00".repeat(32));
        headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(&both).unwrap());
        assert!(verify(SECRET, &headers, b"x", at(1000), REPLAY_WINDOW).is_ok());

        headers.insert(TIMESTAMP_HEADER, HeaderValue::from_static("soon"));
        assert_eq!(
            verify(SECRET, &headers, b"x", at(1000), REPLAY_WINDOW),
            Err(WebhookVerifyError::BadTimestamp)
        );
        headers.remove(ID_HEADER);
        assert_eq!(
            verify(SECRET, &headers, b"x", at(1000), REPLAY_WINDOW),
            Err(WebhookVerifyError::MissingHeader(ID_HEADER))
        );
    }
}
