//! Reading policy files: parsed, named, split by mode, and validated against the schema
//! made from the tools, with every error placed at its file, line and column.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{Effect, PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::Diagnostic;
use toolgate_core::file::MAX_TEXT_FILE_BYTES;

use super::depth::{BRACKET, IF, MAX_DEPTH, evaluation_levels, too_deep};

/// A policy file's text and the name its errors are reported against.
#[derive(Clone, Debug)]
pub struct PolicySource {
    /// The file name (or any name, for text that came from elsewhere).
    pub name: String,
    /// The Cedar text.
    pub text: String,
}

impl PolicySource {
    /// Text named `name` (a byte order mark at its start is left out).
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let mut text = text.into();
        if text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        PolicySource {
            name: name.into(),
            text,
        }
    }

    /// The file at `path`, named by its path as given.
    ///
    /// Only a regular file is read, and at most [`MAX_TEXT_FILE_BYTES`] of it: a pipe
    /// or a device could keep the reader waiting, or filling memory, for ever.
    ///
    /// # Errors
    ///
    /// [`PolicyLoadError`] when it cannot be read, is not a regular file, is over
    /// [`MAX_TEXT_FILE_BYTES`] or is not UTF-8 text.
    pub fn file(path: impl AsRef<Path>) -> Result<Self, PolicyLoadError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = read_text(path).map_err(|message| PolicyLoadError::one(&name, message))?;
        Ok(PolicySource::new(name, text))
    }
}

/// The text of the regular file at `path`, or what is wrong with it, in a reader's words.
fn read_text(path: &Path) -> Result<String, String> {
    use toolgate_core::file::{TextFileError, read_text_file};
    read_text_file(path).map_err(|e| match e {
        TextFileError::Unreadable(e) => {
            format!("cannot be read ({e}): check the path in the configuration")
        }
        TextFileError::NotAFile { what } => {
            format!("is {what}, not a file: name the policy file itself")
        }
        TextFileError::TooLarge => format!(
            "is over {} MiB, far more than any policies: is this the right file?",
            MAX_TEXT_FILE_BYTES >> 20
        ),
        TextFileError::NotUtf8 { valid_up_to } => {
            format!("is not UTF-8 text (from byte {valid_up_to} on): save it as UTF-8")
        }
        other => other.to_string(),
    })
}

/// Where in a file a problem is: 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column (in characters), from 1.
    pub column: usize,
}

/// One thing wrong with the policies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file (the source's name).
    pub source: String,
    /// Where in it, when known.
    pub at: Option<Location>,
    /// What is wrong, and how to fix it when that can be said.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(
                f,
                "{}:{}:{}: {}",
                self.source, at.line, at.column, self.message
            ),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

/// The policies could not be loaded: every problem found, each with its file and, where
/// there is one, its line and column.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.problems.iter().map(Problem::to_string).collect::<Vec<_>>().join("\n"))]
pub struct PolicyLoadError {
    /// What is wrong, in file order.
    pub problems: Vec<Problem>,
}

impl PolicyLoadError {
    pub(crate) fn one(source: &str, message: impl Into<String>) -> Self {
        PolicyLoadError {
            problems: vec![Problem {
                source: source.to_owned(),
                at: None,
                message: message.into(),
            }],
        }
    }
}

/// The line and column of byte `offset` in `text`.
pub(crate) fn location(text: &str, offset: usize) -> Location {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Location {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

/// A Cedar diagnostic as our problem: its message and help, placed at its first label.
fn problem(source: &PolicySource, diagnostic: &dyn Diagnostic) -> Problem {
    let at = diagnostic
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| location(&source.text, label.offset()));
    let mut message = diagnostic.to_string();
    if let Some(help) = diagnostic.help() {
        message.push_str(&format!(" ({help})"));
    }
    Problem {
        source: source.name.clone(),
        at,
        message,
    }
}

/// The policies of every source, enforced and shadow apart, with the ids they go by.
pub(crate) struct Loaded {
    /// The enforced policies.
    pub enforced: PolicySet,
    /// Every policy, enforced and shadow: what would apply were the shadow ones enforced.
    pub all: PolicySet,
    /// The ids of the shadow policies.
    pub shadow: BTreeSet<String>,
    /// The `@reason` of each `forbid` that has one: what a caller it refuses is told.
    pub reasons: Vec<(String, String)>,
    /// The source each policy came from, by id.
    pub origins: Vec<(String, String)>,
    /// What the operator should know of policies that load: `toolgate check` prints it.
    pub warnings: Vec<String>,
    /// How many levels of Cedar's evaluator the deepest expression takes
    /// ([`evaluation_levels`]).
    pub evaluation_levels: usize,
}

/// Parses, names, splits and validates the policies of `sources` against `schema`.
pub(crate) fn load(sources: &[PolicySource], schema: &Schema) -> Result<Loaded, PolicyLoadError> {
    let validator = Validator::new(schema.clone());
    let mut problems = Vec::new();
    let mut loaded = Loaded {
        enforced: PolicySet::new(),
        all: PolicySet::new(),
        shadow: BTreeSet::new(),
        reasons: Vec::new(),
        origins: Vec::new(),
        warnings: Vec::new(),
        evaluation_levels: 0,
    };
    let mut ids = BTreeSet::new();
    for source in sources {
        // Deeper text would overflow the stack of Cedar's parser, which aborts the process.
        if let Some(offset) = too_deep(&source.text) {
            problems.push(Problem {
                source: source.name.clone(),
                at: Some(location(&source.text, offset)),
                message: format!(
                    "nested too deep: a bracket counts {BRACKET} levels, an `if` {IF}, and each `&&`, `||`, `.` and other operator 1, at most {MAX_DEPTH} in all: write it flatter, say with a set and `.contains` in place of a long chain of `||`, or as several policies"
                ),
            });
            continue;
        }
        loaded.evaluation_levels = (loaded.evaluation_levels).max(evaluation_levels(&source.text));
        let set = match PolicySet::from_str(&source.text) {
            Ok(set) => set,
            Err(errors) => {
                problems.extend(errors.iter().map(|e| problem(source, e)));
                continue;
            }
        };
        // Nothing links a template to a principal or a resource, so Cedar would never
        // evaluate it: a `forbid` written as one would forbid nothing.
        for template in set.templates() {
            let id = template.annotation("id").map_or_else(
                || {
                    let n = template.id().to_string();
                    let n = n.trim_start_matches("policy").parse::<usize>().unwrap_or(0);
                    format!("{}#{}", source.name, n + 1)
                },
                str::to_owned,
            );
            problems.push(Problem {
                source: source.name.clone(),
                at: None,
                message: format!(
                    "policy `{id}` is a template (it has `?principal` or `?resource`), which nothing links, so it would never apply: write the user, tenant or tool it is for in place of the slot"
                ),
            });
        }
        // Cedar numbers the policies of a text `policy0`, `policy1`… in order.
        let mut policies: Vec<_> = set.policies().collect();
        policies.sort_by_key(|p| {
            p.id()
                .to_string()
                .trim_start_matches("policy")
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        let named: Vec<(String, String)> = policies
            .iter()
            .enumerate()
            .map(|(n, p)| {
                let id = p
                    .annotation("id")
                    .map_or_else(|| format!("{}#{}", source.name, n + 1), str::to_owned);
                (format!("policy `{}`", p.id()), format!("policy `{id}`"))
            })
            .collect();
        // Cedar's messages name its own ids; ours are the ones a reader knows.
        let renamed = |mut problem: Problem| {
            if let Some((cedar, ours)) = named
                .iter()
                .find(|(cedar, _)| problem.message.contains(cedar.as_str()))
            {
                problem.message = problem.message.replace(cedar.as_str(), ours);
            }
            problem
        };
        let validation = validator.validate(&set, ValidationMode::Strict);
        problems.extend(
            validation
                .validation_errors()
                .map(|e| renamed(problem(source, e))),
        );
        for warning in validation.validation_warnings() {
            let warning = renamed(problem(source, warning));
            tracing::warn!(policy_file = %source.name, %warning, "policy warning");
        }
        for (n, policy) in policies.into_iter().enumerate() {
            let id = policy
                .annotation("id")
                .map_or_else(|| format!("{}#{}", source.name, n + 1), str::to_owned);
            if !ids.insert(id.clone()) {
                problems.push(Problem {
                    source: source.name.clone(),
                    at: None,
                    message: format!(
                        "two policies have the id `{id}`: give each its own `@id(\"…\")`"
                    ),
                });
                continue;
            }
            let shadow = match policy.annotation("mode") {
                None | Some("enforce") => false,
                Some("shadow") => true,
                Some(other) => {
                    problems.push(Problem {
                        source: source.name.clone(),
                        at: None,
                        message: format!("policy `{id}` has `@mode(\"{other}\")`: write `@mode(\"enforce\")` or `@mode(\"shadow\")`"),
                    });
                    continue;
                }
            };
            if let (Effect::Forbid, Some(reason)) = (policy.effect(), policy.annotation("reason")) {
                // The policy file's words, repeated to a caller: nothing in them may forge
                // a line or turn the text around.
                let reason = toolgate_core::error::escaped_text(reason).into_owned();
                loaded.reasons.push((id.clone(), reason));
            }
            loaded.origins.push((id.clone(), source.name.clone()));
            let policy = policy.new_id(PolicyId::new(id.clone()));
            // The ids are unique, so adding cannot fail.
            let _ = loaded.all.add(policy.clone());
            if shadow {
                loaded.shadow.insert(id);
            } else {
                let _ = loaded.enforced.add(policy);
            }
        }
    }
    if problems.is_empty() {
        if loaded.enforced.policies().next().is_none() {
            let files = sources.iter().map(|s| s.name.as_str()).collect::<Vec<_>>();
            tracing::warn!(
                policy_files = %files.join(", "),
                "the policy files hold no enforced policy: every call they decide is denied until a `permit` is added"
            );
            loaded.warnings.push(format!(
                "the policy files ({}) hold no enforced policy: every call they decide is denied until a `permit` is added",
                files.join(", ")
            ));
        }
        Ok(loaded)
    } else {
        Err(PolicyLoadError { problems })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::from_cedarschema_str("action call;")
            .expect("a schema")
            .0
    }

    fn file_problem(path: &Path) -> String {
        PolicySource::file(path)
            .expect_err("refused")
            .problems
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn a_policy_nested_too_deep_is_refused_at_its_place_before_cedar_parses_it() {
        // Far deeper than Cedar's parser survives on any stack this test runs on.
        let text = format!(
            "permit(principal, action, resource);\nforbid(principal, action, resource) when {{ {}context.x == \"boom\"{} }};\n",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        let source = PolicySource::new("deep.cedar", text);
        let Err(error) = load(&[source], &schema()) else {
            panic!("loaded")
        };
        let [problem] = &error.problems[..] else {
            panic!("{error}")
        };
        assert_eq!(
            problem.at,
            Some(Location {
                line: 2,
                column: 75
            }),
            "{error}"
        );
        assert!(
            problem
                .to_string()
                .starts_with("deep.cedar:2:75: nested too deep: a bracket counts 64 levels"),
            "{error}"
        );
        assert!(problem.message.contains("write it flatter"), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn a_pipe_or_a_device_is_refused_without_waiting_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("policies.cedar");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for (path, what) in [
            (fifo.as_path(), "a pipe"),
            (Path::new("/dev/zero"), "a device"),
            (dir.path(), "a directory"),
        ] {
            let message = file_problem(path);
            assert!(
                message.contains(&format!("is {what}, not a file")),
                "{message}"
            );
        }
    }

    #[test]
    fn a_file_over_the_bound_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.cedar");
        // Sparse: nothing is written.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_TEXT_FILE_BYTES + 1)
            .unwrap();
        let message = file_problem(&big);
        assert!(message.contains("is over 16 MiB"), "{message}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped_and_other_encodings_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let bom = dir.path().join("bom.cedar");
        std::fs::write(&bom, "\u{feff}permit(principal, action, resource);\n").unwrap();
        let source = PolicySource::file(&bom).expect("read");
        assert!(source.text.starts_with("permit"));
        assert!(load(&[source], &schema()).is_ok());

        let latin1 = dir.path().join("latin1.cedar");
        std::fs::write(
            &latin1,
            b"// caf\xe9\npermit(principal, action, resource);\n",
        )
        .unwrap();
        let message = file_problem(&latin1);
        assert!(message.contains("is not UTF-8 text"), "{message}");
        assert!(!message.contains("check the path"), "{message}");
    }

    #[test]
    fn policy_files_without_a_policy_load_with_a_warning() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Log(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Log {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let sources = [
                PolicySource::new("empty.cedar", ""),
                PolicySource::new("comments.cedar", "// nothing yet\n"),
            ];
            let loaded = load(&sources, &schema()).expect("loaded");
            assert_eq!(
                loaded.warnings,
                [
                    "the policy files (empty.cedar, comments.cedar) hold no enforced policy: every call they decide is denied until a `permit` is added"
                ]
            );
        });
        let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("hold no enforced policy"), "{log}");
        assert!(log.contains("empty.cedar, comments.cedar"), "{log}");
    }

    #[test]
    fn a_reason_that_could_disguise_the_refusal_is_repeated_escaped() {
        let text = "@reason(\"no\u{202e}txt.exe\\nINFO allowed \u{1b}[2J\u{85}\")\nforbid(principal, action, resource);\n";
        let loaded = load(&[PolicySource::new("reason.cedar", text)], &schema()).expect("loaded");
        assert_eq!(
            loaded.reasons,
            [(
                "reason.cedar#1".to_owned(),
                "no\\u{202e}txt.exe\\nINFO allowed \\u{1b}[2J\\u{85}".to_owned()
            )]
        );
    }

    #[test]
    fn offsets_become_lines_and_columns_in_characters() {
        let text = "permit(\n  principal,\n  é x";
        assert_eq!(location(text, 0), Location { line: 1, column: 1 });
        assert_eq!(location(text, 10), Location { line: 2, column: 3 });
        let x = text.find('x').unwrap();
        assert_eq!(location(text, x), Location { line: 3, column: 5 });
    }
}
