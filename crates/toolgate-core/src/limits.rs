//! Bounds on input: size and nesting depth, checked before any hook runs.

use serde_json::Value;

use crate::error::{InputViolations, ToolError};

/// Which limit a walk went past.
enum Exceeded {
    Depth,
    Size,
}

/// How large and how deep an input may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// The most bytes of JSON (exact for text input, estimated for parsed JSON: each
    /// string and key counted as serialized, escapes included — a control character is
    /// 6 bytes as `\u0001` — and each number as 8 bytes).
    pub max_bytes: usize,
    /// The deepest nesting of arrays and objects.
    pub max_depth: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_bytes: 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// The bytes an escape adds to a byte of a string when it is serialized: 1 for `"` and
/// `\` (written `\"`, `\\`) and for the five control characters with a short escape
/// (`\b`, `\t`, `\n`, `\f`, `\r`), 5 for every other control character (`\u0001`), 0 for
/// the rest.
const ESCAPE_EXTRA: [u8; 256] = {
    let mut extra = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        extra[b] = 5;
        b += 1;
    }
    extra[0x08] = 1;
    extra[0x09] = 1;
    extra[0x0a] = 1;
    extra[0x0c] = 1;
    extra[0x0d] = 1;
    extra[b'"' as usize] = 1;
    extra[b'\\' as usize] = 1;
    extra
};

/// The bytes the escapes of `s` add when it is serialized (serde_json escapes only control
/// characters, `"` and `\`). A first pass counts the bytes that need an escape — a
/// branch-free count the compiler vectorizes — and only text with such bytes is read a
/// second time to price them.
fn escapes_in(s: &str) -> usize {
    let bytes = s.as_bytes();
    let escaped = bytes
        .iter()
        .filter(|&&b| b < 0x20 || b == b'"' || b == b'\\')
        .count();
    if escaped == 0 {
        return 0;
    }
    bytes
        .iter()
        .map(|&b| usize::from(ESCAPE_EXTRA[usize::from(b)]))
        .sum()
}

/// The bytes the escapes of every string and key in `value` add when it is serialized.
/// Called only on an input the walk passed, so its depth is bounded.
fn escapes_within(value: &Value) -> usize {
    match value {
        Value::String(s) => escapes_in(s),
        Value::Array(items) => items.iter().map(escapes_within).sum(),
        Value::Object(fields) => fields
            .iter()
            .map(|(key, item)| escapes_in(key) + escapes_within(item))
            .sum(),
        _ => 0,
    }
}

/// The estimated JSON size of a scalar (a string without its escapes, which
/// [`InputLimits::check`] adds only where they could matter).
#[inline]
fn scalar_size(scalar: &Value) -> usize {
    match scalar {
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        _ => 5,
    }
}

impl InputLimits {
    /// Checks a parsed input.
    ///
    /// # Errors
    ///
    /// [`ToolError::InputTooDeep`] or [`ToolError::InputTooLarge`].
    #[inline]
    pub fn check(&self, input: &Value) -> Result<(), ToolError> {
        let mut size = 0usize;
        match self.walk(input, 1, &mut size) {
            // Escapes add at most five bytes to each byte of a string (`\u0001` for one),
            // so an estimate under a sixth of the limit passes whatever they are: only a
            // larger input has them counted.
            Ok(()) if size.saturating_mul(6) <= self.max_bytes => Ok(()),
            Ok(()) => self.check_escapes(input, size),
            Err(exceeded) => Err(self.exceeded(exceeded, size)),
        }
    }

    /// The size check of a large input, with the escapes of its strings and keys counted:
    /// `size` is the walk's count without them.
    #[cold]
    fn check_escapes(&self, input: &Value, size: usize) -> Result<(), ToolError> {
        let size = size.saturating_add(escapes_within(input));
        if size > self.max_bytes {
            return Err(self.exceeded(Exceeded::Size, size));
        }
        Ok(())
    }

    /// The error for an input over a limit (`size`: as far as the walk counted).
    #[cold]
    fn exceeded(&self, exceeded: Exceeded, size: usize) -> ToolError {
        match exceeded {
            Exceeded::Depth => ToolError::InputTooDeep {
                limit: self.max_depth,
            },
            Exceeded::Size => ToolError::InputTooLarge {
                size,
                limit: self.max_bytes,
            },
        }
    }

    /// Adds the estimated size of `value` to `size`. The error is one byte wide, so the
    /// recursion passes no `ToolError` around. Scalars inside a container are counted in
    /// its loop (no call each), and the size is compared once per container: a parsed
    /// input is already in memory, so only the verdict matters, not stopping early.
    ///
    /// In place for the input itself, which every call checks; a container inside it is
    /// walked by [`walk_nested`](Self::walk_nested).
    #[inline]
    fn walk(&self, value: &Value, depth: usize, size: &mut usize) -> Result<(), Exceeded> {
        match value {
            Value::Array(items) => {
                if depth > self.max_depth {
                    return Err(Exceeded::Depth);
                }
                *size += 2 + items.len();
                for item in items {
                    self.walk_item(item, depth, size)?;
                }
            }
            Value::Object(fields) => {
                if depth > self.max_depth {
                    return Err(Exceeded::Depth);
                }
                *size += 2;
                for (key, item) in fields {
                    *size += key.len() + 4;
                    self.walk_item(item, depth, size)?;
                }
            }
            scalar => *size += scalar_size(scalar),
        }
        if *size > self.max_bytes {
            return Err(Exceeded::Size);
        }
        Ok(())
    }

    /// One item of a container at `depth`: a scalar is counted here, a container walked.
    #[inline]
    fn walk_item(&self, item: &Value, depth: usize, size: &mut usize) -> Result<(), Exceeded> {
        match item {
            Value::Array(_) | Value::Object(_) => self.walk_nested(item, depth + 1, size),
            scalar => {
                *size += scalar_size(scalar);
                Ok(())
            }
        }
    }

    /// A container inside another, walked out of line: the walk recurses here.
    #[inline(never)]
    fn walk_nested(&self, value: &Value, depth: usize, size: &mut usize) -> Result<(), Exceeded> {
        self.walk(value, depth, size)
    }

    /// Parses JSON text within the limits.
    ///
    /// # Errors
    ///
    /// [`ToolError::InputTooLarge`], [`ToolError::InputTooDeep`], or
    /// [`ToolError::InvalidInput`] when the text is not JSON.
    pub fn parse(&self, json: &str) -> Result<Value, ToolError> {
        if json.len() > self.max_bytes {
            return Err(ToolError::InputTooLarge {
                size: json.len(),
                limit: self.max_bytes,
            });
        }
        let value: Value = serde_json::from_str(json).map_err(|e| {
            if e.to_string().starts_with("recursion limit exceeded") {
                ToolError::InputTooDeep {
                    limit: self.max_depth,
                }
            } else {
                ToolError::InvalidInput(InputViolations::one(
                    "",
                    format!("the arguments are not valid JSON: {e}"),
                ))
            }
        })?;
        self.check(&value)?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!(1), |v, _| json!([v]))
    }

    #[test]
    fn depth_at_the_limit_passes_and_one_more_fails() {
        let limits = InputLimits {
            max_bytes: 1 << 20,
            max_depth: 8,
        };
        assert!(limits.check(&nested(8)).is_ok());
        assert_eq!(
            limits.check(&nested(9)),
            Err(ToolError::InputTooDeep { limit: 8 })
        );
    }

    #[test]
    fn text_deeper_than_serde_allows_is_too_deep_not_a_panic() {
        let text = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            InputLimits::default().parse(&text),
            Err(ToolError::InputTooDeep { .. })
        ));
    }

    #[test]
    fn large_input_is_refused() {
        let limits = InputLimits {
            max_bytes: 100,
            max_depth: 8,
        };
        let big = json!({ "text": "x".repeat(200) });
        assert!(matches!(
            limits.check(&big),
            Err(ToolError::InputTooLarge { .. })
        ));
        assert!(matches!(
            limits.parse(&big.to_string()),
            Err(ToolError::InputTooLarge { .. })
        ));
    }

    #[test]
    fn a_megabyte_of_control_characters_is_refused_under_a_one_mebibyte_limit() {
        let input = json!({ "v": "\u{1}".repeat(1_000_000) });
        assert_eq!(serde_json::to_string(&input).unwrap().len(), 6_000_008);

        let refused = InputLimits::default().check(&input);

        assert!(
            matches!(refused, Err(ToolError::InputTooLarge { size, .. }) if size >= 6_000_000),
            "{refused:?}"
        );
    }

    #[test]
    fn a_string_is_counted_as_serialized_escapes_included_and_a_key_too() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        let input = json!(format!("{every_ascii}\"\\ plain é ✓"));
        let serialized = serde_json::to_string(&input).unwrap().len();
        let key = json!({ "\u{1}".repeat(1000): 1 });
        let exact = InputLimits {
            max_bytes: serialized,
            max_depth: 8,
        };
        let one_less = InputLimits {
            max_bytes: serialized - 1,
            ..exact
        };

        assert_eq!(exact.check(&input), Ok(()));
        assert!(matches!(
            one_less.check(&input),
            Err(ToolError::InputTooLarge { .. })
        ));
        assert!(matches!(
            InputLimits {
                max_bytes: 5000,
                ..exact
            }
            .check(&key),
            Err(ToolError::InputTooLarge { .. })
        ));
    }
}
