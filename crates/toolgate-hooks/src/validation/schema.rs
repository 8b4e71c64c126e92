//! Compiled JSON Schemas, cached per tool, and their errors as input violations.

use std::sync::Arc;

use dashmap::DashMap;
use jsonschema::Validator;
use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use serde_json::Value;
use toolgate_core::ToolError;
use toolgate_core::error::{InputViolation, InputViolations};

/// Compiled validators, keyed by tool name, tool version and which schema (input or
/// output). A schema that does not compile is remembered as such, so a broken schema
/// costs one compile, not one per call.
#[derive(Default)]
pub struct SchemaCache {
    compiled: DashMap<(String, String, bool), Result<Arc<Validator>, String>>,
}

impl SchemaCache {
    /// The compiled validator of `schema` for this tool (`output` picks the output
    /// schema's slot), compiling it on first use.
    ///
    /// # Errors
    ///
    /// [`ToolError::Internal`] naming the tool when the schema is not a valid JSON Schema:
    /// fix the tool's declared schema.
    pub fn get(
        &self,
        tool: &str,
        version: &str,
        output: bool,
        schema: &Value,
    ) -> Result<Arc<Validator>, ToolError> {
        let key = (tool.to_owned(), version.to_owned(), output);
        let compiled = match self.compiled.get(&key) {
            Some(found) => found.clone(),
            None => {
                let compiled = jsonschema::validator_for(schema)
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                self.compiled.insert(key, compiled.clone());
                compiled
            }
        };
        compiled.map_err(|e| {
            let which = if output { "output" } else { "input" };
            ToolError::internal(format!(
                "the {which} schema of tool `{tool}` is not a valid JSON Schema ({e}): fix the tool's declared schema"
            ))
        })
    }

    /// How many schemas are compiled.
    pub fn len(&self) -> usize {
        self.compiled.len()
    }

    /// Whether no schema is compiled yet.
    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }
}

/// Every way `instance` fails `validator`, as violations with paths in the core's style
/// (`items[0].name`); empty when it passes. Messages never quote the value.
///
/// ```
/// use serde_json::json;
/// use toolgate_hooks::validation::violations_for;
/// let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["q"]});
/// let validator = jsonschema::validator_for(&schema).unwrap();
/// let found = violations_for(&validator, &json!({"n": "secret@example.com"}));
/// let text: Vec<String> = found.iter().map(ToString::to_string).collect();
/// assert_eq!(text, ["argument `n`: the value is not of type \"integer\"", "argument `q`: is required"]);
/// ```
pub fn violations_for(validator: &Validator, instance: &Value) -> Vec<InputViolation> {
    let mut found: Vec<InputViolation> = validator
        .iter_errors(instance)
        .map(|error| {
            let mut path = String::new();
            for segment in error.instance_path().segments() {
                match segment {
                    LocationSegment::Property(name) => {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(&name);
                    }
                    LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
                }
            }
            let message = match error.kind() {
                ValidationErrorKind::Required { property } => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(property.as_str().unwrap_or_default());
                    "is required".to_owned()
                }
                _ => error.masked_with("the value").to_string(),
            };
            InputViolation { path, message }
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Turns violations into the caller's error, or `Ok` when there are none.
pub(crate) fn into_result(violations: Vec<InputViolation>) -> Result<(), ToolError> {
    if violations.is_empty() {
        Ok(())
    } else {
        Err(ToolError::InvalidInput(InputViolations(violations)))
    }
}
