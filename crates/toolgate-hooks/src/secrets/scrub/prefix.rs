//! Prefixes of secrets: how many leading characters of a secret are scrubbed wherever they
//! appear, and how far a match of them reaches into the rest of the secret.
//!
//! Servers and libraries print the start of a credential to help whoever debugs them
//! (`invalid token upsecretZq8v...`): that much of the secret is as good as its whole to
//! someone guessing the rest, and is scrubbed like it. A prefix is found in the forms the
//! whole secret is found in but base64: raw, hex, percent- and JSON-escaped, in any ASCII
//! case; and every match is carried on as far as the text goes on with the secret, so that
//! what follows the shortest scrubbed prefix is scrubbed with it.

use super::escape_at;

/// The fewest leading characters of a secret that are scrubbed as a prefix of it: 8
/// characters of a random token carry about 48 bits, which ordinary text holds by chance
/// about never, as for [base64 cores](super::MIN_BASE64_CORE). A secret of this many
/// characters or fewer is scrubbed only whole.
pub(super) const MIN_PREFIX_CHARS: usize = 8;

/// The shortest run of `raw`'s leading characters that is scrubbed wherever it appears:
/// its first half (rounded up), and at least [`MIN_PREFIX_CHARS`] characters; all of
/// `raw` when that is as many as it has.
///
/// Half, for a long secret, because a credential's first characters are the ones most
/// often shared with others: a vendor's tag (`sk-ant-api03-`, `github_pat_`), a JWT's
/// header (`eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.`, the same in every HS256 token), PEM
/// armour. A fixed eight characters would replace them in every token of the kind that
/// passes; half of a token is past them, into what only this one holds. A prefix shorter
/// than half leaves more than half of the secret unknown, which is not found (see the
/// [module docs](self)).
pub(super) fn head(raw: &str) -> &str {
    let chars = raw.chars().count();
    let needed = chars.div_ceil(2).max(MIN_PREFIX_CHARS);
    match raw.char_indices().nth(needed) {
        Some((end, _)) => &raw[..end],
        None => raw,
    }
}

/// Where a match that ends at `at` in `hay`, of the first `matched` bytes of `form` (a
/// [literal form](super::literal_forms) of a secret, matched in any ASCII case), ends once
/// carried on: as long as `hay` goes on with the rest of `form`, in any ASCII case, up to
/// the end of `form`, and on one of its character boundaries.
pub(super) fn reach_in_form(hay: &[u8], at: usize, form: &str, matched: usize) -> usize {
    let rest = &form.as_bytes()[matched..];
    let mut same = hay[at..]
        .iter()
        .zip(rest)
        .take_while(|(h, f)| h.eq_ignore_ascii_case(f))
        .count();
    while !form.is_char_boundary(matched + same) {
        same -= 1;
    }
    at + same
}

/// How many bytes of `hay` from `at` read as leading characters of `raw`, and how many
/// bytes of `raw` they are (both ending with a whole character of `raw`): each character
/// written as [`escaped_pattern`](super::escaped_pattern) matches it — raw or percent-escaped
/// byte by byte, JSON-escaped (`\u00XX`, a short escape, or the `\uXXXX` of its UTF-16
/// code units outside ASCII), a space as `+`, letters and hex digits in any case.
///
/// A text reads one way only unless the secret has a `%` or a `\`, which may be raw or
/// begin an escape: then every reading is followed, as the regex's backtracking does
/// (`\\u0030` is a raw `\` and an escaped `0` as well as an escaped `\` and `u0030`), and
/// of the longest run of `raw` the longest run of `hay` is taken.
pub(super) fn escaped_run(hay: &[u8], at: usize, raw: &str) -> (usize, usize) {
    if raw.bytes().any(|b| matches!(b, b'%' | b'\\')) {
        return every_reading(hay, at, raw);
    }
    let (mut pos, mut read, mut longest) = (at, 0, (0, 0));
    loop {
        if raw.is_char_boundary(read) {
            longest = (pos - at, read);
        }
        match steps(hay, pos, raw, read).into_iter().flatten().next() {
            Some((next_read, next_pos)) => (read, pos) = (next_read, next_pos),
            None => return longest,
        }
    }
}

/// [`escaped_run`] for a secret with a `%` or a `\`, which a text may read several ways.
#[inline(never)]
fn every_reading(hay: &[u8], at: usize, raw: &str) -> (usize, usize) {
    // Per byte of `raw` read so far, the places in `hay` a reading of them ends at. Two
    // readings differ only where a `%` or `\` of the secret is read raw rather than as
    // the start of an escape, so these stay few.
    let mut ends: Vec<Vec<usize>> = vec![Vec::new(); raw.len() + 1];
    ends[0].push(at);
    let mut longest = (0, 0);
    // The most bytes of `raw` some reading has got to: none gets past it.
    let mut furthest = 0;
    for read in 0..=raw.len() {
        if read > furthest {
            break;
        }
        let mut here = std::mem::take(&mut ends[read]);
        if here.is_empty() {
            continue;
        }
        here.sort_unstable();
        here.dedup();
        if raw.is_char_boundary(read) {
            longest = (here[here.len() - 1] - at, read);
        }
        for &pos in &here {
            for (next_read, next_pos) in steps(hay, pos, raw, read).into_iter().flatten() {
                ends[next_read].push(next_pos);
                furthest = furthest.max(next_read);
            }
        }
    }
    longest
}

/// The ways `hay` at `pos` goes on with `raw` after its first `read` bytes, each as the
/// bytes of `raw` and the place in `hay` after it: the `\uXXXX` escapes of a character
/// outside ASCII, an escape of the byte, the byte raw (or `+` for a space).
fn steps(hay: &[u8], pos: usize, raw: &str, read: usize) -> [Option<(usize, usize)>; 3] {
    let Some(&want) = raw.as_bytes().get(read) else {
        return [None; 3];
    };
    let utf16 = raw
        .get(read..)
        .and_then(|rest| rest.chars().next())
        .filter(|c| !c.is_ascii())
        .and_then(|c| Some((read + c.len_utf8(), pos + utf16_escape_at(hay, pos, c)?)));
    let escaped = escape_at(hay, pos)
        .filter(|(got, _)| got.eq_ignore_ascii_case(&want))
        .map(|(_, len)| (read + 1, pos + len));
    let plain = hay
        .get(pos)
        .filter(|&&got| got.eq_ignore_ascii_case(&want) || want == b' ' && got == b'+')
        .map(|_| (read + 1, pos + 1));
    [utf16, escaped, plain]
}

/// The length of `c` (outside ASCII) written at `at` in `hay` as JSON's `\uXXXX` escapes
/// of its UTF-16 code units (hex digits in either case), if it is so written.
fn utf16_escape_at(hay: &[u8], at: usize, c: char) -> Option<usize> {
    let mut len = 0;
    for unit in c.encode_utf16(&mut [0; 2]) {
        let escape = format!("\\u{unit:04X}");
        let found = hay.get(at + len..at + len + escape.len())?;
        let same = found[..2] == escape.as_bytes()[..2]
            && found[2..].eq_ignore_ascii_case(&escape.as_bytes()[2..]);
        if !same {
            return None;
        }
        len += escape.len();
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::super::tests::scrubbed;
    use super::super::{SCRUBBED, Scrubber};
    use super::*;

    /// The credential of the finding: a server printed its first 12 characters.
    const TOKEN: &str = "upsecretZq8vN3kLp2Xw7RtY";

    #[test]
    fn the_half_of_a_credential_a_server_prints_in_its_401_is_scrubbed() {
        let scrubber = Scrubber::for_values([TOKEN]);
        let body = "invalid token upsecretZq8v...";
        let reason = format!("unexpected server response: HTTP 401 Unauthorized: {body}");
        assert_eq!(
            scrubbed(&scrubber, &reason),
            format!(
                "unexpected server response: HTTP 401 Unauthorized: invalid token {SCRUBBED}..."
            )
        );
        // In a JSON log line, which has a `\` to read as well.
        let line = serde_json::json!({"level": "WARN", "fields": {"reason": reason, "q": "\\"}});
        let clean = scrubbed(&scrubber, &line.to_string());
        assert!(
            clean.contains(&format!("invalid token {SCRUBBED}...")),
            "{clean}"
        );
        // Escaped, re-cased, in hex, and longer: as much of the secret as follows goes too.
        for (printed, after) in [
            ("upsecret%5Aq8v", "..."),
            (r"upsecret\u005aQ8V", "..."),
            ("UPSECRETZQ8VN3K", "..."),
            ("7570736563726574 5a713876", ""),
            ("upsecretZq8vN3kLp2Xw", "-and-more"),
            ("upsecretZq8vN3kLp2Xw7RtY", "Y"),
        ] {
            let printed = printed.replace(' ', "");
            assert_eq!(
                scrubbed(&scrubber, &format!("token={printed}{after}!")),
                format!("token={SCRUBBED}{after}!"),
                "{printed}"
            );
        }
    }

    #[test]
    fn a_prefix_shorter_than_half_the_secret_or_eight_characters_is_left_alone() {
        let scrubber = Scrubber::for_values([TOKEN]);
        for text in [
            "invalid token upsecretZq8...",
            "upsecret",
            "UPSECRET%5aQ8",
            "vN3kLp2Xw7RtY",
        ] {
            assert_eq!(scrubber.scrub_text(text), None, "{text}");
        }
        // A secret of 8 characters or fewer is found only whole; one of 9, by its first 8.
        let eight = Scrubber::for_values(["pw4Kx9Lm"]);
        assert_eq!(eight.scrub_text("pw4Kx9L..."), None);
        assert_eq!(scrubbed(&eight, "pw4Kx9Lm"), SCRUBBED);
        let nine = Scrubber::for_values(["pw4Kx9Lm2"]);
        assert_eq!(scrubbed(&nine, "pw4Kx9Lm..."), format!("{SCRUBBED}..."));
    }

    #[test]
    fn what_tokens_of_a_kind_share_at_their_start_is_left_alone() {
        // An HS256 JWT as the credential: another HS256 JWT (another subject) starts with
        // the same 48 characters, and is left whole; this one's first half is not.
        let header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
        let jwt = format!(
            "{header}.eyJzdWIiOiJ1cHN0cmVhbS0xIiwiaWF0IjoxNzY3MjI1NjAwLCJleHAiOjE3NjcyMjkyMDB9\
             .AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA"
        );
        let other = format!(
            "{header}.eyJzdWIiOiJzb21lb25lLWVsc2UiLCJpYXQiOjE3NjcyMjU3MDAsImV4cCI6MTc2NzIyOTMwMH0\
             .ZWZnaGlqa2xtbm9wcXJzdHV2d3h5ent8fX5_gIGCg4Q"
        );
        let scrubber = Scrubber::for_values([jwt.as_str()]);
        assert_eq!(scrubber.scrub_text(&format!("Bearer {other}")), None);
        let half = &jwt[..jwt.len().div_ceil(2)];
        assert_eq!(
            scrubbed(&scrubber, &format!("Bearer {half}...")),
            format!("Bearer {SCRUBBED}...")
        );
    }

    #[test]
    fn the_head_is_half_the_secret_and_at_least_eight_characters() {
        assert_eq!(head("upsecretZq8vN3kLp2Xw7RtY"), "upsecretZq8v");
        assert_eq!(head("tok-alpha-0001"), "tok-alph");
        assert_eq!(head("abcdefghi"), "abcdefgh");
        // Eight characters or fewer: only whole.
        assert_eq!(head("abcdefgh"), "abcdefgh");
        assert_eq!(head("tok1"), "tok1");
        // Counted in characters, cut on one's boundary.
        assert_eq!(head("pässwörd-€-𝄞-12345"), "pässwörd-");
    }

    #[test]
    fn a_match_is_carried_on_as_far_as_the_text_goes_on_with_the_form() {
        let hay = b"token UPSECRETZq8vN3k... more";
        assert_eq!(reach_in_form(hay, 18, "upsecretZq8vN3kLp2Xw7RtY", 12), 21);
        // Not past the end of the form.
        assert_eq!(reach_in_form(b"abcdefghij", 8, "abcdefghi", 8), 9);
        // Not into half a character.
        assert_eq!(reach_in_form("abcdefghä".as_bytes(), 8, "abcdefghå", 8), 8);
    }

    #[test]
    fn an_escaped_run_reads_every_mix_of_escapes_the_regex_matches() {
        let raw = "tok~>>?ver Secret-€";
        for hay in [
            r"tok~>>?ver Secret-€!".to_owned(),
            r"TOK%7e%3E>?ver+sECRET-%E2%82%AC!".to_owned(),
            r"tok\u007E\u003e>?ver\u0020Secret-\u20ac!".to_owned(),
        ] {
            let (len, read) = escaped_run(hay.as_bytes(), 0, raw);
            assert_eq!((len, read), (hay.len() - 1, raw.len()), "{hay}");
        }
        // A raw `\` before an escape, which reads as an escaped `\` too.
        assert_eq!(escaped_run(br"a \\u0030!", 0, r"a \0"), (9, 4));
        // Stops at the first character that differs, on a whole character of the secret.
        assert_eq!(escaped_run(b"tok%7E>>?vex", 0, raw), (11, 9));
        assert_eq!(escaped_run(b"x", 0, raw), (0, 0));
        // Half a character of the secret is not read as one.
        assert_eq!(
            escaped_run("Secret-%E2%82".as_bytes(), 0, "Secret-€"),
            (7, 7)
        );
    }

    /// `c` as a URL or JSON may write it, by `choice`: raw, re-cased, `%XX`, `\u00XX`.
    fn escaped(c: char, choice: u8) -> String {
        match choice {
            1 if c.is_ascii_uppercase() => c.to_ascii_lowercase().to_string(),
            1 => c.to_ascii_uppercase().to_string(),
            2 => format!("%{:02X}", u32::from(c)),
            3 => format!("\\u{:04x}", u32::from(c)),
            _ => c.to_string(),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 128,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Any printable ASCII secret of 9 to 40 characters, any prefix of it at least as
        /// long as its head, each character raw, re-cased or escaped at random: the prefix
        /// is replaced whole, and the text around it kept.
        #[test]
        fn any_prefix_as_long_as_the_head_is_replaced_whole_in_any_mix_of_escapes(
            secret in "[ -~]{9,40}",
            extra in 0usize..40,
            choices in proptest::collection::vec(0u8..4, 1..16),
        ) {
            let needed = head(&secret).len();
            let printed = &secret[..(needed + extra).min(secret.len())];
            let mut choices = choices.iter().cycle();
            let text: String = printed
                .chars()
                .map(|c| escaped(c, *choices.next().unwrap_or(&0)))
                .collect();
            let scrubber = Scrubber::for_values([secret.as_str()]);
            let clean = scrubber.scrub_text(&format!("«{text}»")).unwrap_or_default();
            let inner = clean.strip_prefix('«').and_then(|c| c.strip_suffix('»'));
            proptest::prop_assert!(
                inner.is_some_and(|i| !i.is_empty() && i.replace(SCRUBBED, "").is_empty()),
                "{} gave {}", text, clean
            );
        }
    }
}
