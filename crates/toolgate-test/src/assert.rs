//! Stage-order assertions with a readable diff on failure.

use std::fmt::Write as _;

use toolgate_core::Stage;

use crate::StageLog;

/// Asserts that `log` holds exactly the stages `expected`, in order (whichever hooks
/// recorded them).
///
/// # Panics
///
/// When the sequences differ, with a side-by-side listing that marks every differing row:
///
/// ```text
/// stage sequence differs (expected 3 entries, got 2); first difference at #1
///        #  expected              actual
///        0  will_authorize        will_authorize
///   !    1  did_release_quota     will_finalize_invoke
///   !    2  will_finalize_invoke  -
/// ```
///
/// # Examples
///
/// ```
/// use toolgate_core::Stage;
/// use toolgate_test::{assert_stages, StageLog};
///
/// let log = StageLog::new();
/// log.record(Stage::WillAuthorize, "auth");
/// log.record(Stage::WillFinalizeInvoke, "auth");
/// assert_stages(&log, &[Stage::WillAuthorize, Stage::WillFinalizeInvoke]);
/// ```
///
/// ```should_panic
/// use toolgate_core::Stage;
/// use toolgate_test::{assert_stages, StageLog};
///
/// let log = StageLog::new();
/// log.record(Stage::WillAuthorize, "auth");
/// assert_stages(&log, &[Stage::WillAuthorize, Stage::WillFinalizeInvoke]);
/// ```
#[track_caller]
pub fn assert_stages(log: &StageLog, expected: &[Stage]) {
    let actual = log.stages();
    if actual != expected {
        let actual: Vec<String> = actual.iter().map(ToString::to_string).collect();
        let expected: Vec<String> = expected.iter().map(ToString::to_string).collect();
        panic!("{}", diff("stage sequence", &expected, &actual));
    }
}

/// Asserts that the hook labelled `hook` ran at exactly the stages `expected`, in order.
///
/// # Panics
///
/// When the sequences differ, with the same diff as [`assert_stages`].
///
/// # Examples
///
/// ```
/// use toolgate_core::Stage;
/// use toolgate_test::{assert_stages_of, StageLog};
///
/// let log = StageLog::new();
/// log.record(Stage::WillAuthorize, "auth");
/// log.record(Stage::WillAuthorize, "quota");
/// assert_stages_of(&log, "auth", &[Stage::WillAuthorize]);
/// ```
#[track_caller]
pub fn assert_stages_of(log: &StageLog, hook: &str, expected: &[Stage]) {
    let actual = log.stages_of(hook);
    if actual != expected {
        let actual: Vec<String> = actual.iter().map(ToString::to_string).collect();
        let expected: Vec<String> = expected.iter().map(ToString::to_string).collect();
        panic!(
            "{}",
            diff(&format!("stages of hook `{hook}`"), &expected, &actual)
        );
    }
}

/// Asserts that `log` holds exactly these `(stage, hook label)` entries, in order: the
/// assertion for ordering between hooks.
///
/// # Panics
///
/// When the entries differ, with a diff of `hook@stage` lines.
///
/// # Examples
///
/// ```
/// use toolgate_core::Stage;
/// use toolgate_test::{assert_entries, StageLog};
///
/// let log = StageLog::new();
/// log.record(Stage::WillAcquireQuota, "outer");
/// log.record(Stage::WillAcquireQuota, "inner");
/// assert_entries(&log, &[(Stage::WillAcquireQuota, "outer"), (Stage::WillAcquireQuota, "inner")]);
/// ```
#[track_caller]
pub fn assert_entries(log: &StageLog, expected: &[(Stage, &str)]) {
    let actual: Vec<String> = log.entries().iter().map(ToString::to_string).collect();
    let expected: Vec<String> = expected
        .iter()
        .map(|(stage, hook)| format!("{hook}@{stage}"))
        .collect();
    if actual != expected {
        panic!("{}", diff("log entries", &expected, &actual));
    }
}

/// Renders two sequences side by side, marking the rows that differ with `!`.
fn diff(what: &str, expected: &[String], actual: &[String]) -> String {
    let first = expected
        .iter()
        .zip(actual)
        .position(|(e, a)| e != a)
        .unwrap_or(expected.len().min(actual.len()));
    let width = expected
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("expected".len());
    let mut out = format!(
        "{what} differs (expected {} entries, got {}); first difference at #{first}\n",
        expected.len(),
        actual.len()
    );
    let _ = writeln!(out, "       #  {:<width$}  actual", "expected");
    for i in 0..expected.len().max(actual.len()) {
        let e = expected.get(i).map_or("-", String::as_str);
        let a = actual.get(i).map_or("-", String::as_str);
        let mark = if e == a { ' ' } else { '!' };
        let _ = writeln!(out, "  {mark} {i:>3}  {e:<width$}  {a}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_marks_only_the_rows_that_differ() {
        let expected = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let actual = ["a".to_owned(), "x".to_owned()];
        let text = diff("seq", &expected, &actual);
        assert!(text.contains("first difference at #1"), "{text}");
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert!(rows[0].starts_with("    "), "{text}");
        assert!(rows[1].trim_start().starts_with('!'), "{text}");
        assert!(rows[2].contains('-'), "{text}");
    }
}
