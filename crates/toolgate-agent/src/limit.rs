//! Result size limits: outputs longer than the limit are cut on a character boundary and
//! end with a marker that gives the original size.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::ToolError;
use toolgate_core::error::{InputViolations, grouped};

use crate::ResultError;

/// The limit when neither the instance, the thread nor the call sets one: 60,000
/// characters.
pub const DEFAULT_RESULT_MAX_CHARS: usize = 60_000;

/// What was cut from an output, recorded in [`ResultMetadata::truncation`](crate::ResultMetadata::truncation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncation {
    /// The size of the output before the cut, in characters (of the JSON text when the
    /// output was not a string).
    pub original_chars: usize,
    /// The characters kept from the original, before the marker.
    pub kept_chars: usize,
    /// The limit in force.
    pub limit: usize,
}

/// The marker appended to a cut output.
fn marker(original_chars: usize, kept_chars: usize) -> String {
    format!(
        "\n[truncated: the result was {original_chars} characters; the first {kept_chars} are shown]"
    )
}

/// The marker of an output cut to a limit too small for [`marker`]: as much of it as fits.
const SHORT_MARKER: &str = "[truncated]";

/// Cuts `output` to at most `max_chars` characters, marker included.
///
/// A limit too small for the marker (under about 70 characters) keeps nothing of the
/// output: it becomes as much of `[truncated]` as fits, an empty string at a limit of 0.
///
/// A string output is cut as it is. Any other value that is too long is rendered as JSON
/// text and that text is cut, so the output becomes a string. An output within the limit
/// is returned untouched with `None`.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_agent::truncate_output;
///
/// let (cut, truncation) = truncate_output(json!("é".repeat(200)), 100);
/// let text = cut.as_str().unwrap();
/// assert!(text.chars().count() <= 100);
/// assert!(text.ends_with("the result was 200 characters; the first 32 are shown]"));
/// assert_eq!(truncation.unwrap().original_chars, 200);
/// ```
pub fn truncate_output(output: Value, max_chars: usize) -> (Value, Option<Truncation>) {
    let text = match &output {
        Value::String(s) => {
            if s.len() <= max_chars || s.chars().count() <= max_chars {
                return (output, None);
            }
            s.as_str()
        }
        _ => {
            let json = output.to_string();
            if json.chars().count() <= max_chars {
                return (output, None);
            }
            return cut(&json, max_chars, true);
        }
    };
    cut(text, max_chars, false)
}

/// Cuts `text` to `max_chars`, marker included; `json` when the text is JSON, so that the
/// cut never splits one of its escapes (`\"`, `\n`, `\u001b`) and leaves half of it.
fn cut(text: &str, max_chars: usize, json: bool) -> (Value, Option<Truncation>) {
    let original_chars = text.chars().count();
    // The marker's own length depends on the number kept; one pass with the widest count
    // is enough, as `kept` only shrinks the marker.
    let marker_len = marker(original_chars, original_chars).chars().count();
    if marker_len > max_chars {
        // A limit too small for the marker: as much of a short marker as fits, and nothing
        // of the output, so the result still stays within the limit.
        let short: String = SHORT_MARKER.chars().take(max_chars).collect();
        return (
            Value::String(short),
            Some(Truncation {
                original_chars,
                kept_chars: 0,
                limit: max_chars,
            }),
        );
    }
    let mut kept_chars = max_chars - marker_len;
    let mut end = text
        .char_indices()
        .nth(kept_chars)
        .map_or(text.len(), |(i, _)| i);
    if json {
        // An escape is ASCII: moving back over it takes one character per byte.
        let whole = escape_boundary(text.as_bytes(), end);
        kept_chars -= end - whole;
        end = whole;
    }
    let mut cut = String::with_capacity(end + marker_len);
    cut.push_str(&text[..end]);
    cut.push_str(&marker(original_chars, kept_chars));
    (
        Value::String(cut),
        Some(Truncation {
            original_chars,
            kept_chars,
            limit: max_chars,
        }),
    )
}

/// `end`, or the start of the JSON escape that `json[..end]` would cut in two.
fn escape_boundary(json: &[u8], end: usize) -> usize {
    // Whether the backslash at `at` starts an escape: an even number of backslashes
    // before it (each pair is one escaped backslash).
    let starts_escape =
        |at: usize| json[..at].iter().rev().take_while(|b| **b == b'\\').count() % 2 == 0;
    // `\` and its escaped character: cut after the backslash.
    if end > 0 && json[end - 1] == b'\\' && starts_escape(end - 1) {
        return end - 1;
    }
    // `\uXXXX`: cut within its six bytes.
    for at in end.saturating_sub(5)..end.saturating_sub(1) {
        if json[at] == b'\\' && json[at + 1] == b'u' && starts_escape(at) {
            return at;
        }
    }
    end
}

/// Cuts an error's message to `max_chars` characters, as an output would be, and answers
/// what was cut (`None` when nothing was).
///
/// The message of an invalid-input error lists its violations. Cut, it keeps the first
/// ones that fit whole and says how many it leaves out (`… and 9,990 more`), and the
/// error's list keeps the same ones: a model that sends 10,000 bad fields reads the first
/// of them whole, within the limit, in every format. When not even the first one fits,
/// the message is cut like any other and the list keeps none.
pub(crate) fn cut_error(error: &mut ResultError, max_chars: usize) -> Option<Truncation> {
    let original_chars = error.message.chars().count();
    if original_chars <= max_chars {
        return None;
    }
    if let Some((message, kept, kept_chars)) = fit_violations(error, max_chars) {
        error.message = message;
        error.violations.truncate(kept);
        return Some(Truncation {
            original_chars,
            kept_chars,
            limit: max_chars,
        });
    }
    error.violations.clear();
    match truncate_output(Value::String(std::mem::take(&mut error.message)), max_chars) {
        (Value::String(message), truncation) => {
            error.message = message;
            truncation
        }
        (other, truncation) => {
            error.message = other.to_string();
            truncation
        }
    }
}

/// The message of `error` listing as many of its violations as fit in `max_chars` with
/// the count of the others, how many it lists (at least one) and the characters kept from
/// the original message; `None` when the message is not the error's list of violations or
/// not even one of them fits.
fn fit_violations(error: &ResultError, max_chars: usize) -> Option<(String, usize, usize)> {
    if error.violations.is_empty() {
        return None;
    }
    // The message as the error renders it: the list, and the words before it — rendered
    // whole, as a caller's message is cut to a bound and this is what cuts it.
    let rendered = ToolError::InvalidInput(InputViolations(error.violations.clone())).to_string();
    if rendered != error.message {
        return None;
    }
    let total = error.violations.len();
    // With `kept` of them: the message, and its length with the count of the others. The
    // length grows with `kept` (an entry and its separator take two characters or more;
    // the count loses one digit at most), so the most that fit are found by bisection.
    let with = |kept: usize| {
        let listed =
            ToolError::InvalidInput(InputViolations(error.violations[..kept].to_vec())).to_string();
        let more = format!("; … and {} more", grouped((total - kept) as u64));
        let chars = listed.chars().count();
        (listed, more, chars)
    };
    let fits = |kept: usize| {
        let (_, more, chars) = with(kept);
        chars + more.chars().count() <= max_chars
    };
    if !fits(1) {
        return None;
    }
    // `fits(low)` holds, and every count past `high` is the whole list, which does not fit.
    let (mut low, mut high) = (1, total - 1);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if fits(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let (listed, more, chars) = with(low);
    Some((listed + &more, low, chars))
}

/// Picks the limit in force: the call's, else the thread's, else the instance's.
pub(crate) fn effective_limit(
    call: Option<usize>,
    thread: Option<usize>,
    instance: usize,
) -> usize {
    call.or(thread).unwrap_or(instance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_within_the_limit_is_untouched() {
        let (out, t) = truncate_output(json!({"a": 1}), 100);
        assert_eq!(out, json!({"a": 1}));
        assert!(t.is_none());
    }

    #[test]
    fn multibyte_text_is_cut_on_a_character_boundary_within_the_limit() {
        let (out, t) = truncate_output(json!("日本語".repeat(1000)), 500);
        let text = out.as_str().unwrap();
        assert!(text.chars().count() <= 500);
        let t = t.unwrap();
        assert_eq!(t.original_chars, 3000);
        assert!(text.starts_with(&"日本語".repeat(t.kept_chars / 3)));
        assert!(text.contains("the result was 3000 characters"));
    }

    #[test]
    fn a_large_object_becomes_cut_json_text() {
        let big = json!({ "items": vec!["x"; 1000] });
        let (out, t) = truncate_output(big.clone(), 200);
        let text = out.as_str().unwrap();
        assert!(text.starts_with("{\"items\":[\"x\""));
        assert_eq!(t.unwrap().original_chars, big.to_string().len());
    }

    #[test]
    fn an_escape_is_never_cut_in_two() {
        assert_eq!(escape_boundary(br#"ab\"#, 3), 2);
        assert_eq!(escape_boundary(br#"ab\\"#, 4), 4);
        assert_eq!(escape_boundary(br#"ab\u00"#, 6), 2);
        assert_eq!(escape_boundary(br#"ab\u001f"#, 8), 8);
        assert_eq!(escape_boundary(br#"ab\\u00"#, 7), 7);
    }

    #[test]
    fn call_wins_over_thread_over_instance() {
        assert_eq!(effective_limit(Some(1), Some(2), 3), 1);
        assert_eq!(effective_limit(None, Some(2), 3), 2);
        assert_eq!(effective_limit(None, None, 3), 3);
    }
}
