//! `Accept` on `/mcp`, read as RFC 9110 reads it.
//!
//! The MCP library answers a `POST` only when `Accept` names both `application/json` and
//! `text/event-stream`, and a `GET` only when it names `text/event-stream`: literally. Yet
//! `*/*` (curl's default, and many HTTP libraries'), `application/*, text/*`, or no
//! `Accept` at all accept those types too (RFC 9110 §12.5.1). [`name_accepted_types`] hands
//! the library an `Accept` that names them whenever the client's accepts them.
//!
//! A type is accepted when the most specific media range that matches it (`type/subtype`,
//! then `type/*`, then `*/*`) has a weight above 0; when several equally specific ranges
//! match, one of weight 0 refuses it. Parameters other than the weight are read but not
//! weighed: the answers carry none. Empty items (`*/*, ,`) are skipped, as RFC 9110 §5.6.1
//! has a recipient do. Anything else — a header that is not text, that does not parse, that
//! names no range at all, or that is longer than [`MOST_BYTES`] — is left as it came, and
//! the library answers it as it would have.

use std::iter;

use axum::http::{HeaderMap, HeaderValue, Method, Request, header};

/// The longest `Accept` (all its lines together) that is read; a longer one is left as it
/// came. No client needs anything near this much to name what it takes.
const MOST_BYTES: usize = 4096;

/// A media type an answer may have: type and subtype, lower case.
type MediaType = (&'static str, &'static str);

const JSON: MediaType = ("application", "json");
const EVENT_STREAM: MediaType = ("text", "event-stream");

/// Replaces the request's `Accept` with one naming the media types its method is answered
/// with (`POST`: `application/json` and `text/event-stream`; `GET`: `text/event-stream`)
/// when the client's `Accept` accepts them all, or is absent. Any other method, and any
/// `Accept` that refuses one of them or cannot be read, is left as it came.
pub(super) fn name_accepted_types<B>(request: &mut Request<B>) {
    let named = match *request.method() {
        Method::POST => accepts(request.headers(), [JSON, EVENT_STREAM])
            .then_some("application/json, text/event-stream"),
        Method::GET => accepts(request.headers(), [EVENT_STREAM]).then_some("text/event-stream"),
        _ => None,
    };
    if let Some(named) = named {
        request
            .headers_mut()
            .insert(header::ACCEPT, HeaderValue::from_static(named));
    }
}

/// Whether `headers` accept each of `wanted`: `false` when one is refused, or when the
/// `Accept` lines cannot be read.
fn accepts<const N: usize>(headers: &HeaderMap, wanted: [MediaType; N]) -> bool {
    // For each wanted type, the most specific match so far and whether a range that
    // specific refuses it.
    let mut best: [Option<(Specificity, bool)>; N] = [None; N];
    if !headers.contains_key(header::ACCEPT) {
        // No `Accept`: any type.
        return true;
    }
    let mut read = 0;
    for line in headers.get_all(header::ACCEPT) {
        read += line.len();
        let Ok(line) = line.to_str() else {
            return false;
        };
        if read > MOST_BYTES {
            return false;
        }
        for item in split_unquoted(line, ',') {
            if item.trim_matches(is_ows).is_empty() {
                continue;
            }
            let Some(range) = MediaRange::parse(item) else {
                return false;
            };
            for (best, wanted) in best.iter_mut().zip(wanted) {
                let Some(specificity) = range.matches(wanted) else {
                    continue;
                };
                let refused = range.weight == 0;
                match *best {
                    Some((known, _)) if known > specificity => {}
                    Some((known, was_refused)) if known == specificity => {
                        *best = Some((known, was_refused || refused));
                    }
                    _ => *best = Some((specificity, refused)),
                }
            }
        }
    }
    best.iter().all(|best| matches!(best, Some((_, false))))
}

/// How closely a media range names a type: `*/*`, `type/*`, `type/subtype`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Specificity {
    Any,
    Subtypes,
    Exact,
}

/// One item of `Accept`.
struct MediaRange<'a> {
    kind: &'a str,
    subtype: &'a str,
    /// The weight in thousandths: 0 to 1000.
    weight: u16,
}

impl<'a> MediaRange<'a> {
    /// `type/subtype` with optional parameters (`q` among them at most once), as RFC 9110
    /// writes them; `None` for anything else.
    fn parse(item: &'a str) -> Option<Self> {
        let mut parts = split_unquoted(item, ';');
        let (kind, subtype) = parts.next()?.trim_matches(is_ows).split_once('/')?;
        if !is_token(kind) || !is_token(subtype) || (kind == "*" && subtype != "*") {
            return None;
        }
        let mut weight = None;
        for parameter in parts.map(|parameter| parameter.trim_matches(is_ows)) {
            // `text/plain;;charset=utf-8`: the grammar lets a parameter be empty.
            if parameter.is_empty() {
                continue;
            }
            let (name, value) = parameter.split_once('=')?;
            if !is_token(name) || !(is_token(value) || is_quoted_string(value)) {
                return None;
            }
            if name.eq_ignore_ascii_case("q") && weight.replace(qvalue(value)?).is_some() {
                return None;
            }
        }
        Some(MediaRange {
            kind,
            subtype,
            weight: weight.unwrap_or(1000),
        })
    }

    /// How specifically this range names `wanted`, if it does.
    fn matches(&self, (kind, subtype): MediaType) -> Option<Specificity> {
        if self.kind == "*" {
            Some(Specificity::Any)
        } else if !self.kind.eq_ignore_ascii_case(kind) {
            None
        } else if self.subtype == "*" {
            Some(Specificity::Subtypes)
        } else {
            self.subtype
                .eq_ignore_ascii_case(subtype)
                .then_some(Specificity::Exact)
        }
    }
}

/// A weight (`0`, `0.5`, `1.000`, at most three decimals) in thousandths.
fn qvalue(text: &str) -> Option<u16> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|digit| digit.is_ascii_digit()) {
        return None;
    }
    let thousandths = fraction
        .bytes()
        .chain(iter::repeat(b'0'))
        .take(3)
        .fold(0, |sum, digit| sum * 10 + u16::from(digit - b'0'));
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// `text` split at each `delimiter` outside a quoted string.
fn split_unquoted(text: &str, delimiter: char) -> impl Iterator<Item = &str> {
    let (mut quoted, mut escaped) = (false, false);
    text.split(move |c| {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else {
            return !quoted && c == delimiter;
        }
        false
    })
}

/// Space or tab.
fn is_ows(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// A token of RFC 9110 §5.6.2.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A quoted string of RFC 9110 §5.6.4 (header text is visible ASCII, space and tab).
fn is_quoted_string(text: &str) -> bool {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return false;
    };
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return false,
            _ => {}
        }
    }
    !escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `Accept` rmcp sees for a `method` request that came with `lines`.
    fn handed_on(method: Method, lines: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut request = Request::builder().method(method);
        for line in lines {
            request = request.header(header::ACCEPT, HeaderValue::from_bytes(line).unwrap());
        }
        let mut request = request.body(()).unwrap();
        name_accepted_types(&mut request);
        request
            .headers()
            .get_all(header::ACCEPT)
            .iter()
            .map(|value| value.as_bytes().to_vec())
            .collect()
    }

    /// `lines` as header bytes.
    fn bytes<'a>(lines: &[&'a str]) -> Vec<&'a [u8]> {
        lines.iter().map(|line| line.as_bytes()).collect()
    }

    fn post(lines: &[&str]) -> Vec<Vec<u8>> {
        handed_on(Method::POST, &bytes(lines))
    }

    fn get(lines: &[&str]) -> Vec<Vec<u8>> {
        handed_on(Method::GET, &bytes(lines))
    }

    const BOTH: &[u8] = b"application/json, text/event-stream";

    /// Whether a `POST` with `lines` is handed on with both types named.
    fn post_named(lines: &[&str]) -> bool {
        post(lines) == [BOTH]
    }

    /// Whether a `POST` with `lines` is handed on exactly as it came.
    fn post_untouched(lines: &[&str]) -> bool {
        post(lines) == bytes(lines)
    }

    #[test]
    fn wildcards_that_accept_both_types_are_named_for_a_post() {
        for accept in [
            "*/*",
            "application/*, text/*",
            "application/json, text/*",
            "text/event-stream, */*;q=0.1",
            "text/html, */*;q=0.8",
            "*/*;q=0.001",
            "application/json, text/event-stream",
        ] {
            assert!(post_named(&[accept]), "{accept}");
        }
    }

    #[test]
    fn a_get_is_handed_text_event_stream_alone() {
        assert_eq!(get(&["*/*"]), [b"text/event-stream"]);
        assert_eq!(get(&["text/*;q=0.5"]), [b"text/event-stream"]);
        assert_eq!(get(&[]), [b"text/event-stream"]);
        assert_eq!(get(&["application/json"]), [b"application/json"]);
        assert_eq!(
            get(&["*/*, text/event-stream;q=0"]),
            [b"*/*, text/event-stream;q=0"]
        );
    }

    #[test]
    fn no_accept_at_all_accepts_anything() {
        assert_eq!(post(&[]), [BOTH]);
    }

    #[test]
    fn a_type_weighted_zero_is_refused_and_the_header_left_for_rmcp() {
        for accept in [
            "*/*, text/event-stream;q=0",
            "*/*, application/json;q=0.000",
            "text/event-stream, application/*;q=0, */*",
            "*/*;q=0",
            "application/json, text/event-stream;q=0.",
            // Equally specific ranges that disagree: the refusal wins.
            "*/*, text/event-stream;q=0, text/event-stream",
        ] {
            assert!(post_untouched(&[accept]), "{accept}");
        }
    }

    #[test]
    fn a_type_not_covered_is_left_for_rmcp() {
        for accept in ["application/json", "text/*", "application/*", "text/html"] {
            assert!(post_untouched(&[accept]), "{accept}");
        }
    }

    #[test]
    fn types_parameter_names_and_weights_are_read_without_regard_to_case() {
        for accept in [
            "APPLICATION/JSON, Text/Event-Stream",
            "*/*;Q=1",
            "Application/*;q=0.9, TEXT/*;q=1.000",
        ] {
            assert!(post_named(&[accept]), "{accept}");
        }
        assert!(post_untouched(&["*/*, TEXT/EVENT-STREAM;Q=0"]));
    }

    #[test]
    fn parameters_are_allowed_and_quoted_commas_do_not_split_items() {
        for accept in [
            "application/json;charset=utf-8, text/event-stream;charset=\"utf-8\"",
            "*/* ; q=0.5",
            "text/plain;;format=flowed, */*",
            r#"application/json;profile="a,b;q=0", text/*"#,
            r#"*/*;note="say \"hi\", twice""#,
        ] {
            assert!(post_named(&[accept]), "{accept}");
        }
    }

    #[test]
    fn all_accept_lines_are_read_together() {
        assert!(post_named(&["application/json", "text/event-stream"]));
        assert!(post_named(&["application/*", "text/*;q=0.2"]));
        assert!(post_untouched(&["*/*", "text/event-stream;q=0"]));
    }

    #[test]
    fn empty_items_are_skipped() {
        for accept in ["*/*, ,", "*/*,", ", application/json ,, text/event-stream"] {
            assert!(post_named(&[accept]), "{accept:?}");
        }
        assert!(post_untouched(&["*/*, , text/event-stream;q=0"]));
    }

    #[test]
    fn garbage_is_left_as_it_came() {
        for accept in [
            "",
            ", ,",
            "*",
            "json",
            "*/json",
            "*/*;q=2",
            "*/*;q=0.5000",
            "*/*;q=.5",
            "*/*;q=abc",
            "*/*;q=1;q=0",
            "*/*;q",
            "*/* ;q = 1",
            "text /html",
            r#"*/*;a="unterminated"#,
            "application/json(, text/event-stream",
        ] {
            assert!(post_untouched(&[accept]), "{accept:?}");
        }
    }

    #[test]
    fn a_header_that_is_not_text_is_left_as_it_came() {
        let odd: &[u8] = b"*/*;x=\xff\xfe";
        assert_eq!(handed_on(Method::POST, &[odd]), [odd]);
        assert_eq!(handed_on(Method::POST, &[b"*/*", odd]), [b"*/*", odd]);
    }

    #[test]
    fn a_header_longer_than_any_client_sends_is_left_as_it_came() {
        let long = format!("*/*{}", ", text/html".repeat(MOST_BYTES / 10));
        assert!(post_untouched(&[&long]));
        let many = vec!["*/*"; MOST_BYTES];
        assert!(post_untouched(&many));
    }

    #[test]
    fn other_methods_are_left_as_they_came() {
        for method in [Method::DELETE, Method::PUT, Method::OPTIONS] {
            assert_eq!(
                handed_on(method.clone(), &[b"*/*".as_slice()]),
                [b"*/*"],
                "{method}"
            );
            assert!(handed_on(method, &[]).is_empty());
        }
    }

    #[test]
    fn weights_are_read_in_thousandths() {
        assert_eq!(qvalue("0"), Some(0));
        assert_eq!(qvalue("0."), Some(0));
        assert_eq!(qvalue("0.000"), Some(0));
        assert_eq!(qvalue("0.001"), Some(1));
        assert_eq!(qvalue("0.5"), Some(500));
        assert_eq!(qvalue("1"), Some(1000));
        assert_eq!(qvalue("1.000"), Some(1000));
        for bad in ["1.001", "2", "-0", "0.0001", "", ".", "0,5", "0.x"] {
            assert_eq!(qvalue(bad), None, "{bad:?}");
        }
    }
}
