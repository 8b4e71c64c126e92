//! `calculator`: arithmetic on a sandboxed expression evaluator.

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::error::InputViolations;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{Tool, ToolError, tool_fn};

/// The calculator's input.
#[derive(Deserialize, Serialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalculatorInput {
    /// An arithmetic expression, e.g. `(2 + 3) * 4 / 5` or `2 ^ 10`.
    #[garde(length(min = 1, max = 1000))]
    pub expression: String,
}

/// The calculator's output.
#[derive(Deserialize, Serialize, JsonSchema)]
pub struct CalculatorOutput {
    /// The value of the expression.
    pub result: serde_json::Number,
}

/// Evaluates an arithmetic expression: numbers, `+ - * / % ^`, parentheses, comparisons and
/// the evaluator's math functions (`math::sqrt`, `math::ln`, …). Nothing outside the
/// expression is reachable: no variables of the host, no I/O.
///
/// # Errors
///
/// A message saying why the expression has no numeric value. (The test
/// `evaluates_arithmetic_and_nothing_else` below shows what it takes.)
pub fn evaluate(expression: &str) -> Result<serde_json::Number, String> {
    use evalexpr::Value;
    match evalexpr::eval(expression) {
        Ok(Value::Int(i)) => Ok(i.into()),
        Ok(Value::Float(f)) => serde_json::Number::from_f64(f)
            .ok_or_else(|| format!("`{expression}` has no finite value")),
        Ok(other) => {
            let what = match other {
                Value::String(_) => "text",
                Value::Boolean(_) => "true or false",
                Value::Tuple(values) if !values.is_empty() => "a list of values",
                Value::Tuple(_) | Value::Empty => "nothing",
                _ => "not a number",
            };
            Err(format!(
                "`{expression}` is not arithmetic (its value is {what}): write an expression of numbers"
            ))
        }
        Err(e) => Err(format!("cannot evaluate `{expression}`: {}", in_words(&e))),
    }
}

/// The evaluator's error in words a caller knows: its own messages name its types
/// (`Expected a Value::Boolean, but got Int(1)`) and its internals ("Variable identifier is
/// not bound to anything by context", "Error modulating 1 % 0").
fn in_words(error: &evalexpr::EvalexprError) -> String {
    use evalexpr::EvalexprError as E;
    use evalexpr::Value;
    const WRITE: &str = "write an expression of numbers";
    let needed = match error {
        E::ExpectedString { .. } => "text",
        E::ExpectedInt { .. } => "a whole number",
        E::ExpectedFloat { .. } | E::ExpectedNumber { .. } => "a number",
        E::ExpectedNumberOrString { .. } => "a number or text",
        E::ExpectedBoolean { .. } => "true or false",
        E::ExpectedTuple { .. }
        | E::ExpectedFixedLengthTuple { .. }
        | E::ExpectedRangedLengthTuple { .. } => "a list of values",
        E::ExpectedEmpty { .. } => "nothing",
        E::TypeError { .. } | E::WrongTypeCombination { .. } => {
            return format!("its operands are of kinds that do not go together: {WRITE}");
        }
        E::VariableIdentifierNotFound(name) => {
            return format!(
                "`{name}` is no number, and the calculator has no value of that name: {WRITE}"
            );
        }
        E::FunctionIdentifierNotFound(name) => {
            return format!(
                "the calculator has no function `{name}` (it has `math::sqrt`, `math::ln`, `min`, `max` and the like)"
            );
        }
        E::WrongOperatorArgumentAmount { .. } => {
            return format!("an operator there is missing an operand: {WRITE}");
        }
        E::WrongFunctionArgumentAmount { .. } => {
            return "a function there is given the wrong number of arguments".to_owned();
        }
        E::UnmatchedLBrace => return "a `(` is never closed".to_owned(),
        E::UnmatchedRBrace => return "a `)` closes nothing".to_owned(),
        E::UnmatchedDoubleQuote => return "a `\"` is never closed".to_owned(),
        E::MissingOperatorOutsideOfBrace => {
            return "an operator is missing next to a parenthesis: write `2 * (3 + 4)`, not `2(3 + 4)`".to_owned();
        }
        E::DivisionError { divisor, .. } | E::ModulationError { divisor, .. }
            if matches!(divisor, Value::Int(0)) =>
        {
            return "it divides by zero".to_owned();
        }
        E::AdditionError { .. }
        | E::SubtractionError { .. }
        | E::NegationError { .. }
        | E::MultiplicationError { .. }
        | E::DivisionError { .. }
        | E::ModulationError { .. } => {
            return "its value is too large for a whole number: write a number of it with a decimal point (`2.0`) to compute in decimals".to_owned();
        }
        _ => return format!("it is not an expression the calculator reads: {WRITE}"),
    };
    format!("an operand there must be {needed}: {WRITE}")
}

pub(super) fn tool() -> impl Tool {
    tool_fn(
        "calculator",
        "Evaluates an arithmetic expression (numbers, + - * / % ^, parentheses, math::sqrt and similar) and returns its value.",
        |input: CalculatorInput| async move {
            // An expression without a value (a typo, a division by zero, an overflow) is
            // the caller's mistake: `invalid_input`, 400, naming the field.
            evaluate(&input.expression)
                .map(|result| CalculatorOutput { result })
                .map_err(|why| ToolError::InvalidInput(InputViolations::one("expression", why)))
        },
    )
    .annotations(ToolAnnotations::READ_ONLY)
}

#[cfg(test)]
mod tests {
    use super::evaluate;

    #[test]
    fn evaluates_arithmetic_and_nothing_else() {
        assert_eq!(evaluate("(2 + 3) * 4").unwrap().to_string(), "20");
        assert_eq!(evaluate("7 / 2.0").unwrap().to_string(), "3.5");
        assert!(evaluate("1 / 0").is_err());
        assert!(evaluate("rm -rf /").is_err());
        assert_eq!(
            evaluate("()").unwrap_err(),
            "`()` is not arithmetic (its value is nothing): write an expression of numbers"
        );
        assert!(evaluate("1 == 1").unwrap_err().contains("true or false"));
        for expression in [
            "if(1,2,3)",
            "!1",
            "1 && 2",
            "1+true",
            "\"a\"*2",
            "min()",
            "len(1)",
        ] {
            let error = evaluate(expression).unwrap_err();
            assert!(
                !error.contains("Value::") && !error.contains("Int(") && !error.contains("Empty"),
                "{expression}: {error}"
            );
        }
    }

    #[test]
    fn the_evaluators_own_wording_never_reaches_the_caller() {
        for (expression, said) in [
            ("a", "`a` is no number"),
            ("1 % 0", "divides by zero"),
            ("1 / 0", "divides by zero"),
            ("9223372036854775807 + 1", "too large for a whole number"),
            ("(1 + 2", "a `(` is never closed"),
            ("1 + 2)", "a `)` closes nothing"),
            ("nope(1)", "no function `nope`"),
            ("2(3)", "an operator is missing next to a parenthesis"),
            ("1 +", "missing an operand"),
        ] {
            let error = evaluate(expression).unwrap_err();
            assert!(error.contains(said), "{expression}: {error}");
            for theirs in [
                "Variable identifier",
                "context",
                "modulating",
                "Error ",
                "Found an",
            ] {
                assert!(!error.contains(theirs), "{expression}: {error}");
            }
        }
    }
}
