//! Reading the top level of a JSON object without parsing it whole, so that a message too
//! long (or too deep) to parse, or the start of one, can still be read for its `id` and
//! `method`. Values are delimited, not checked (a missing one is empty), objects and arrays
//! by counting brackets, so any depth costs no stack; the work is linear in the text.

use std::ops::Range;

/// `at`, moved past JSON whitespace in `text`.
pub(crate) fn skip_space(text: &[u8], mut at: usize) -> usize {
    while text.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The top-level members of the JSON object `text` starts with (after whitespace); `None`
/// when it starts with no `{`.
pub(crate) fn members(text: &[u8]) -> Option<Members<'_>> {
    let open = skip_space(text, 0);
    if text.get(open) != Some(&b'{') {
        return None;
    }
    let key = skip_space(text, open + 1);
    let closed = text.get(key) == Some(&b'}');
    let key = (!closed).then_some(key);
    Some(Members { text, key, closed })
}

/// The members of an object, in order: each key as written between its quotes (escapes not
/// undone) and where its value is in the text, `None` when the value does not end there
/// (the text is cut short; it is the last member). They end at the object's closing brace,
/// or at the first thing that is no next member: a key cut short or not a string, no `:`,
/// a trailing `,`, junk after a value.
pub(crate) struct Members<'a> {
    text: &'a [u8],
    /// Where the next member's key should start, while there may be one.
    key: Option<usize>,
    /// Whether the closing brace was reached: once all members are read, whether the
    /// object was whole and well-formed at its top level.
    pub(crate) closed: bool,
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a [u8], Option<Range<usize>>);

    fn next(&mut self) -> Option<Self::Item> {
        let text = self.text;
        let at = self.key.take()?;
        let key_end = string_end(text, at)?;
        let colon = skip_space(text, key_end);
        if text.get(colon) != Some(&b':') {
            return None;
        }
        let key = &text[at + 1..key_end - 1];
        let start = skip_space(text, colon + 1);
        let Some(end) = value_end(text, start) else {
            return Some((key, None));
        };
        let after = skip_space(text, end);
        match text.get(after) {
            Some(b',') => self.key = Some(skip_space(text, after + 1)),
            Some(b'}') => self.closed = true,
            _ => {}
        }
        Some((key, Some(start..end)))
    }
}

/// Where the string starting at `at` ends (past its closing quote), if it does in `text`.
fn string_end(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Where the JSON value starting at `at` ends, if it does in `text`.
fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < text.len() {
                match text[i] {
                    b'"' => {
                        i = string_end(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            // A number or a literal: it ends where a delimiter is, which must be in `text`.
            let end = at
                + text[at..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())?;
            Some(end)
        }
    }
}

/// What makes `text` — JSON by its grammar — unreadable as a message, in plain words: a
/// number too large for a 64-bit float (`1e400`), or a `\u` escape of half a UTF-16
/// surrogate pair without the other half (`"\ud800"`), which is no Unicode character.
/// RFC 8259 allows both in JSON text and leaves their meaning to the reader; serde_json
/// (and so rmcp) refuses them. `None` when neither is in `text`.
///
/// Not `toolgate_core::json::check_whole_numbers`, which looks for what serde_json reads
/// but changes (a whole number past 64 bits, rounded to a float) in every message read; this
/// looks, only once serde_json has refused a message, for what it cannot read at all — which
/// takes looking inside strings, at their escapes, where that one only skips them.
pub(crate) fn unrepresentable(text: &[u8]) -> Option<String> {
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] != b'\\' {
                        i += 1;
                        continue;
                    }
                    if text.get(i + 1) != Some(&b'u') {
                        i += 2;
                        continue;
                    }
                    let unit = hex4(text, i + 2);
                    match unit {
                        Some(0xD800..=0xDBFF)
                            if text.get(i + 6..i + 8) == Some(&b"\\u"[..])
                                && matches!(hex4(text, i + 8), Some(0xDC00..=0xDFFF)) =>
                        {
                            i += 12;
                        }
                        Some(unit @ 0xD800..=0xDFFF) => {
                            return Some(format!(
                                "a string in the message has the escape `\\u{unit:04x}`, half of a UTF-16 surrogate pair without its other half, which is no character: strings must be valid Unicode"
                            ));
                        }
                        _ => i += 6,
                    }
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let end = text[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(text.len(), |n| i + n);
                let literal = std::str::from_utf8(&text[i..end]).unwrap_or_default();
                if literal.parse::<f64>().is_ok_and(f64::is_infinite) {
                    let shown: String = literal.chars().take(40).collect();
                    let cut = if shown.len() < literal.len() {
                        "…"
                    } else {
                        ""
                    };
                    return Some(format!(
                        "a number in the message is too large to read (`{shown}{cut}`): numbers must be within the range of a 64-bit float, about ±1.8e308"
                    ));
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    None
}

/// The four hex digits at `at` in `text`, as a number.
fn hex4(text: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(text.get(at..at + 4)?).ok()?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The members of an object, each value as text (`None` when cut), and whether the
    /// object closed.
    type Read<'a> = (Vec<(&'a str, Option<&'a str>)>, bool);

    /// What [`members`] reads of `text`.
    fn read(text: &str) -> Option<Read<'_>> {
        let mut members = members(text.as_bytes())?;
        let read = members
            .by_ref()
            .map(|(key, value)| {
                let key = std::str::from_utf8(key).unwrap();
                (key, value.map(|value| &text[value]))
            })
            .collect();
        Some((read, members.closed))
    }

    #[test]
    fn an_object_s_members_come_in_order_with_their_values() {
        assert_eq!(
            read(
                " { \"id\" : 7 ,\"method\":\"ping\",\"params\":{},\"x\":[1, \"]\"],\"y\":null\t}\n"
            ),
            Some((
                vec![
                    ("id", Some("7")),
                    ("method", Some("\"ping\"")),
                    ("params", Some("{}")),
                    ("x", Some("[1, \"]\"]")),
                    ("y", Some("null")),
                ],
                true
            ))
        );
        assert_eq!(read("{}"), Some((vec![], true)));
        assert_eq!(read(" {\n} "), Some((vec![], true)));
        // Duplicate keys come each time: which counts is the caller's to say.
        assert_eq!(
            read(r#"{"id":1,"id":2}"#),
            Some((vec![("id", Some("1")), ("id", Some("2"))], true))
        );
    }

    #[test]
    fn keys_come_as_written_escapes_and_all() {
        assert_eq!(
            read(r#"{"i\"d":1,"\u0069d":"a\"}","\\":2}"#),
            Some((
                vec![
                    (r#"i\"d"#, Some("1")),
                    (r#"\u0069d"#, Some(r#""a\"}""#)),
                    (r#"\\"#, Some("2")),
                ],
                true
            ))
        );
    }

    #[test]
    fn nested_values_are_skipped_whole() {
        assert_eq!(
            read(r#"{"params":{"id":5,"a":[{"method":"}"}]},"id":6}"#),
            Some((
                vec![
                    ("params", Some(r#"{"id":5,"a":[{"method":"}"}]}"#)),
                    ("id", Some("6"))
                ],
                true
            ))
        );
    }

    #[test]
    fn a_text_cut_short_gives_what_came_before_the_cut() {
        let cases = [
            ("{", vec![]),
            (r#"{"id":1,"#, vec![("id", Some("1"))]),
            (r#"{"id":1,"meth"#, vec![("id", Some("1"))]),
            (r#"{"id":1,"method""#, vec![("id", Some("1"))]),
            (
                r#"{"id":1,"method":"#,
                vec![("id", Some("1")), ("method", None)],
            ),
            (
                r#"{"id":1,"method":"pi"#,
                vec![("id", Some("1")), ("method", None)],
            ),
            (r#"{"result":{"id":2,"x":[1,"#, vec![("result", None)]),
            // A number at the very end may go on past the cut.
            (
                r#"{"a":"x","id":12"#,
                vec![("a", Some("\"x\"")), ("id", None)],
            ),
            (r#"{"id":12 "#, vec![("id", Some("12"))]),
        ];
        for (text, members) in cases {
            assert_eq!(read(text), Some((members, false)), "{text}");
        }
    }

    #[test]
    fn malformed_members_end_the_reading_there() {
        let cases = [
            // No colon.
            (r#"{"id" 1,"method":"x"}"#, vec![]),
            (r#"{"a":1,"id","method":"x"}"#, vec![("a", Some("1"))]),
            // A trailing comma.
            (r#"{"a":1,}"#, vec![("a", Some("1"))]),
            // A key that is no string, and junk after a value.
            (r#"{id:1}"#, vec![]),
            (r#"{"a":1 "b":2}"#, vec![("a", Some("1"))]),
            (r#"{"a":"x"]"#, vec![("a", Some("\"x\""))]),
            (r#"{,"a":1}"#, vec![]),
        ];
        for (text, members) in cases {
            assert_eq!(read(text), Some((members, false)), "{text}");
        }
        // A missing value is an empty one: values are delimited, not checked.
        assert_eq!(
            read(r#"{"a":,"b":}"#),
            Some((vec![("a", Some("")), ("b", Some(""))], true))
        );
        for text in ["", "  ", "[{\"id\":1}]", "\"{\"", "7", "x{}"] {
            assert_eq!(read(text), None, "{text}");
        }
    }

    #[test]
    fn values_of_any_depth_are_skipped_without_recursing() {
        let deep = format!("{}{}", "[{\"a\":".repeat(200_000), "}]".repeat(200_000));
        let text = format!(r#"{{"x":{deep},"id":"z"}}"#);
        let (members, closed) = read(&text).unwrap();
        assert_eq!(members, [("x", Some(deep.as_str())), ("id", Some("\"z\""))]);
        assert!(closed);
        // Cut short at any depth, the value is cut.
        let cut = &text[..text.len() / 2];
        assert_eq!(read(cut), Some((vec![("x", None)], false)));
    }

    #[test]
    fn numbers_too_large_and_lone_surrogates_are_named() {
        let said = |text: &str| unrepresentable(text.as_bytes());
        assert!(said(r#"{"id":1,"x":1e400}"#).unwrap().contains("`1e400`"));
        assert!(said(r#"{"x":-1E+999}"#).unwrap().contains("too large"));
        assert!(said(r#"{"x":"\ud800"}"#).unwrap().contains("`\\ud800`"));
        assert!(said(r#"{"x":"a\udc00b"}"#).unwrap().contains("`\\udc00`"));
        assert!(said(r#"{"x":"\ud800\u0041"}"#).is_some());
        // What serde_json reads is not named.
        assert_eq!(
            said(r#"{"x":"\ud83d\ude00","y":1e300,"z":-0.5e-400}"#),
            None
        );
        assert_eq!(said(r#"{"x":"1e400 \\ud800","y":"\\"}"#), None);
        assert_eq!(said(r#"{"x":99999999999999999999}"#), None);
    }
}
