//! Reading policy files: parsed, named, split by mode, and validated against the schema
//! made from the tools, with every error placed at its file, line and column.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{Effect, PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::Diagnostic;

/// A policy file's text and the name its errors are reported against.
#[derive(Clone, Debug)]
pub struct PolicySource {
    /// The file name (or any name, for text that came from elsewhere).
    pub name: String,
    /// The Cedar text.
    pub text: String,
}

impl PolicySource {
    /// Text named `name`.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        PolicySource {
            name: name.into(),
            text: text.into(),
        }
    }

    /// The file at `path`, named by its path as given.
    ///
    /// # Errors
    ///
    /// [`PolicyLoadError`] when it cannot be read.
    pub fn file(path: impl AsRef<Path>) -> Result<Self, PolicyLoadError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PolicyLoadError {
            problems: vec![Problem {
                source: name.clone(),
                at: None,
                message: format!("cannot be read ({e}): check the path in the configuration"),
            }],
        })?;
        Ok(PolicySource { name, text })
    }
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
fn location(text: &str, offset: usize) -> Location {
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
    };
    let mut ids = BTreeSet::new();
    for source in sources {
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
                loaded.reasons.push((id.clone(), reason.to_owned()));
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
        Ok(loaded)
    } else {
        Err(PolicyLoadError { problems })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns_in_characters() {
        let text = "permit(\n  principal,\n  é x";
        assert_eq!(location(text, 0), Location { line: 1, column: 1 });
        assert_eq!(location(text, 10), Location { line: 2, column: 3 });
        let x = text.find('x').unwrap();
        assert_eq!(location(text, x), Location { line: 3, column: 5 });
    }
}
