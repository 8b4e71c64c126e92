//! Detectors: what counts as personal data or a credential in a piece of text.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::RedactionError;

/// A check that a regex match really is what the detector looks for (a Luhn check for
/// cards, mod-97 for IBANs): given the whole text and the match's range.
type Check = fn(&str, Range<usize>) -> bool;

/// Finds one kind of sensitive value in text: a regex, and optionally a check that
/// weeds out look-alikes.
///
/// ```
/// use toolgate_hooks::redaction::Detector;
/// let card = Detector::card();
/// assert_eq!(card.find("paid with 4111 1111 1111 1111 today").len(), 1);
/// assert!(card.find("order 4111 1111 1111 1112").is_empty()); // fails the Luhn check
/// ```
#[derive(Clone)]
pub struct Detector {
    name: Cow<'static, str>,
    regex: Regex,
    check: Option<Check>,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

macro_rules! builtin {
    ($(#[$doc:meta])* $fn:ident, $name:literal, $pattern:literal, $check:expr) => {
        $(#[$doc])*
        pub fn $fn() -> Detector {
            static REGEX: LazyLock<Regex> =
                LazyLock::new(|| Regex::new($pattern).expect("built-in detector patterns are valid"));
            Detector {
                name: Cow::Borrowed($name),
                regex: REGEX.clone(),
                check: $check,
            }
        }
    };
}

impl Detector {
    builtin!(
        /// Email addresses (`name@example.com`; not `user@localhost`).
        email,
        "email",
        r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
        None
    );
    builtin!(
        /// Phone numbers: `+` and 8–15 digits, or 9–15 digits in two or three separated
        /// groups (`(555) 123-4567`, `020 7946 0958`). Dates, versions, IP addresses and
        /// digit runs that continue past the match are not phones.
        phone,
        "phone",
        r"\+[1-9]\d{7,14}\b|(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)|\b\d{2,4})[ .-]?\d{3,4}[ .-]\d{3,4}\b",
        Some(phone_check)
    );
    builtin!(
        /// Payment card numbers: 13–19 digits, optionally in groups, passing the Luhn check.
        card,
        "card",
        r"\b(?:\d[ -]?){12,18}\d\b",
        Some(card_check)
    );
    builtin!(
        /// IBANs, compact or in groups of four, passing the mod-97 check.
        iban,
        "iban",
        r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
        Some(iban_check)
    );
    builtin!(
        /// AWS access key ids (`AKIA…`, `ASIA…`: 20 upper-case characters).
        aws_access_key,
        "aws_access_key",
        r"\b(?:AKIA|ASIA|AROA|AIDA)[A-Z0-9]{16}\b",
        None
    );
    builtin!(
        /// `Bearer` tokens: 12 characters or more with a digit or symbol among them (not
        /// "the bearer of bad news", not "bearer authentication").
        bearer_token,
        "bearer_token",
        r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{12,}=*",
        Some(bearer_check)
    );
    builtin!(
        /// JSON Web Tokens: three base64url parts, the first two JSON objects (`eyJ…`).
        jwt,
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
        None
    );
    builtin!(
        /// PEM private keys, from `-----BEGIN … PRIVATE KEY-----` to its end line (or to the
        /// end of the text, when the key was cut off).
        private_key,
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)",
        None
    );

    /// Every built-in detector, in the order they run: the longest, most specific
    /// patterns first, so a card inside a private key is redacted as the key.
    pub fn builtins() -> Vec<Detector> {
        vec![
            Detector::private_key(),
            Detector::jwt(),
            Detector::bearer_token(),
            Detector::aws_access_key(),
            Detector::card(),
            Detector::iban(),
            Detector::email(),
            Detector::phone(),
        ]
    }

    /// A detector from a user pattern.
    ///
    /// ```
    /// use toolgate_hooks::redaction::Detector;
    /// let ticket = Detector::pattern("ticket", r"\bTCK-\d{6}\b")?;
    /// assert_eq!(ticket.find("see TCK-123456").len(), 1);
    /// # Ok::<(), toolgate_hooks::redaction::RedactionError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`RedactionError::InvalidPattern`] when `pattern` is not a valid regex, or matches
    /// the empty text (`''`, `x*`): it would find something between every two characters.
    /// A pattern that matches an empty stretch only in places (`\b`) finds only its
    /// non-empty matches.
    pub fn pattern(name: impl Into<String>, pattern: &str) -> Result<Detector, RedactionError> {
        let name = name.into();
        let regex = Regex::new(pattern).map_err(|e| RedactionError::InvalidPattern {
            name: name.clone(),
            reason: e.to_string(),
        })?;
        if regex.is_match("") {
            return Err(RedactionError::InvalidPattern {
                name,
                reason: "it matches the empty text, so it would find something between every two characters; make it match at least one character".to_owned(),
            });
        }
        Ok(Detector {
            name: Cow::Owned(name),
            regex,
            check: None,
        })
    }

    /// The detector's name, used in placeholders (`[REDACTED:email]`) and counts.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The detector's regular expression, as written.
    pub fn pattern_str(&self) -> &str {
        self.regex.as_str()
    }

    /// The byte ranges of `text` this detector finds, in order.
    pub fn find(&self, text: &str) -> Vec<Range<usize>> {
        self.regex
            .find_iter(text)
            .filter(|m| !m.is_empty())
            .map(|m| m.range())
            .filter(|r| self.check.is_none_or(|check| check(text, r.clone())))
            .collect()
    }
}

fn digits(s: &str) -> impl Iterator<Item = u32> + '_ {
    s.chars().filter_map(|c| c.to_digit(10))
}

/// Whether a string of digits (separators ignored) passes the Luhn check.
///
/// ```
/// assert!(toolgate_hooks::redaction::luhn_valid("4111 1111 1111 1111"));
/// assert!(!toolgate_hooks::redaction::luhn_valid("4111 1111 1111 1112"));
/// ```
pub fn luhn_valid(number: &str) -> bool {
    let mut sum = 0;
    let mut count = 0;
    for (i, d) in digits(number)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .enumerate()
    {
        count += 1;
        sum += if i % 2 == 1 {
            let doubled = d * 2;
            if doubled > 9 { doubled - 9 } else { doubled }
        } else {
            d
        };
    }
    count > 0 && sum % 10 == 0
}

/// Whether a string (spaces ignored) is an IBAN with a valid mod-97 check.
///
/// ```
/// assert!(toolgate_hooks::redaction::iban_valid("DE89 3704 0044 0532 0130 00"));
/// assert!(!toolgate_hooks::redaction::iban_valid("DE89 3704 0044 0532 0130 01"));
/// ```
pub fn iban_valid(iban: &str) -> bool {
    let compact: Vec<char> = iban.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let rearranged = compact[4..].iter().chain(&compact[..4]);
    let mut remainder: u32 = 0;
    for c in rearranged {
        let value = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        remainder = if value < 10 {
            (remainder * 10 + value) % 97
        } else {
            (remainder * 100 + value) % 97
        };
    }
    remainder == 1
}

fn card_check(text: &str, range: Range<usize>) -> bool {
    let number = &text[range];
    let count = digits(number).count();
    (13..=19).contains(&count) && luhn_valid(number)
}

fn bearer_check(text: &str, range: Range<usize>) -> bool {
    let found = &text[range];
    let token = found.split_whitespace().nth(1).unwrap_or_default();
    token.chars().any(|c| !c.is_ascii_alphabetic())
}

fn iban_check(text: &str, range: Range<usize>) -> bool {
    iban_valid(&text[range])
}

fn phone_check(text: &str, range: Range<usize>) -> bool {
    let found = &text[range.clone()];
    let count = digits(found).count();
    let min = if found.starts_with('+') { 8 } else { 9 };
    if !(min..=15).contains(&count) {
        return false;
    }
    // A digit run that goes on past the match (a card, an IP address, a longer id) is
    // not a phone number.
    let before = text[..range.start]
        .chars()
        .rev()
        .take(2)
        .collect::<Vec<_>>();
    let after = text[range.end..].chars().take(2).collect::<Vec<_>>();
    let continues = |near: &[char]| match near {
        [c, ..] if c.is_ascii_digit() => true,
        [sep, d, ..] if matches!(sep, ' ' | '.' | '-') && d.is_ascii_digit() => true,
        _ => false,
    };
    !continues(&before) && !continues(&after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_that_matches_the_empty_text_is_refused_and_empty_matches_are_not_found() {
        for pattern in ["", "x*", "(a|)"] {
            let refused = Detector::pattern("t", pattern).err();
            assert!(
                refused.is_some_and(|e| e.to_string().contains("matches the empty text")),
                "{pattern:?}"
            );
        }
        // A pattern that can match an empty stretch only between words finds nothing
        // there, and its real matches still.
        let edges = Detector::pattern("edge", r"\b(TCK-\d+)?").unwrap();
        let found = edges.find("see TCK-12 now");
        assert_eq!((found.len(), found.first()), (1, Some(&(4..10))));
    }
}
