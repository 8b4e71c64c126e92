//! [`Cost`]: what one call costs.

use serde_json::Value;

/// What one call costs, in the budget's units.
///
/// Costs are read before the input is validated and repaired (capacity comes before the
/// input stages), so an argument that prices a call is checked here, in every form the
/// tool can get it in ([`before_repaired_call`](Self::before_repaired_call)): absent, it
/// is priced at the default the tool's schema gives it (filled in later, so read ahead),
/// or counts as zero without one; present, it must be a number of zero or more, or the
/// call is refused
/// (`invalid_cost_argument`, 422) — a caller never makes a call cheaper by sending a
/// string, a JSON string that repair parses, or a negative number.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Cost {
    /// The same number of units for every call.
    Fixed(u64),
    /// `base + per_unit × value`, where the value is the number at `pointer` (a JSON
    /// Pointer, `/rows`) in the call's arguments, rounded up to a whole unit.
    Argument {
        /// Where the number is in the arguments (`/rows`, `/options/pages`).
        pointer: String,
        /// Units per unit of the argument.
        per_unit: u64,
        /// Units every call costs on top.
        base: u64,
    },
    /// What the tool reports in its output, at `pointer` (`/usage/units`). The estimate is
    /// charged before the call; after it, the difference to the reported cost is charged
    /// or given back. An output without a number there keeps the estimate.
    Reported {
        /// Where the cost is in the output.
        pointer: String,
        /// What is charged before the call.
        estimate: u64,
    },
}

/// A call whose cost cannot be read from its arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CostError {
    /// The argument that prices the call is not a number of zero or more.
    #[error("argument `{pointer}` prices this call and must be a number of zero or more: send one")]
    NotACount {
        /// The argument's JSON Pointer.
        pointer: String,
    },
}

impl Cost {
    /// What a call with `arguments`, as they are, is charged before it runs.
    ///
    /// The [`Budget`](super::Budget) hook prices with
    /// [`before_repaired_call`](Self::before_repaired_call), which also reads the arguments
    /// as [`ArgumentRepair`](crate::repair::ArgumentRepair) will hand them to the tool.
    ///
    /// # Errors
    ///
    /// [`CostError::NotACount`] when the pricing argument is present but not a number of
    /// zero or more.
    pub fn before_call(&self, arguments: &Value) -> Result<u64, CostError> {
        match self {
            Cost::Fixed(units) => Ok(*units),
            Cost::Reported { estimate, .. } => Ok(*estimate),
            Cost::Argument {
                pointer,
                per_unit,
                base,
            } => argument_units(pointer, *per_unit, *base, arguments.pointer(pointer)),
        }
    }

    /// What a call is charged before it runs, for a tool whose input schema is
    /// `input_schema`: the most that the pricing argument reads in any form the arguments
    /// can reach the tool in — as sent, and as
    /// [`ArgumentRepair`](crate::repair::ArgumentRepair) repairs them (a JSON string that
    /// becomes an object, `"500"` that becomes `500`, a value wrapped in an array), and,
    /// when the caller leaves it out, as the schema's `default` for it. The budget charges
    /// before the input stages, so without this a caller would buy a cheap call by sending
    /// `{"options": "{\"pages\": 500}"}`, or nothing where the default is 500.
    ///
    /// # Errors
    ///
    /// [`CostError::NotACount`] when the argument, with every repair made, is present but
    /// not a number of zero or more: that is what the tool would get.
    pub fn before_repaired_call(
        &self,
        arguments: &Value,
        input_schema: &Value,
    ) -> Result<u64, CostError> {
        let Cost::Argument {
            pointer,
            per_unit,
            base,
        } = self
        else {
            return self.before_call(arguments);
        };
        let mut most = 0;
        let mut repaired = Ok(0);
        crate::repair::readings_at(arguments, input_schema, pointer, &mut |value, fully| {
            match argument_units(pointer, *per_unit, *base, value) {
                Ok(units) => most = most.max(units),
                // A form that is not a count (`"500"` before it becomes `500`) is priced
                // by the repaired reading; only that one decides a refusal.
                Err(error) if fully => repaired = Err(error),
                Err(_) => {}
            }
        });
        repaired.map(|_| most)
    }

    /// What the tool reported in `output`, if this cost is reported and the output holds a
    /// number of zero or more there (rounded up).
    pub fn reported(&self, output: &Value) -> Option<u64> {
        let Cost::Reported { pointer, .. } = self else {
            return None;
        };
        let units = output.pointer(pointer)?.as_f64()?;
        (units.is_finite() && units >= 0.0).then(|| units.ceil() as u64)
    }

    /// A short description for `toolgate check` and messages: `3`, `2 + 1 × /rows`,
    /// `reported at /usage/units (estimate 10)`.
    pub fn describe(&self) -> String {
        match self {
            Cost::Fixed(units) => units.to_string(),
            Cost::Argument {
                pointer,
                per_unit,
                base,
            } => format!("{base} + {per_unit} × {pointer}"),
            Cost::Reported { pointer, estimate } => {
                format!("reported at {pointer} (estimate {estimate})")
            }
        }
    }
}

/// `base + per_unit × value`, rounded up, for a [`Cost::Argument`] whose pointer reads
/// `value` (`None` when it finds nothing).
fn argument_units(
    pointer: &str,
    per_unit: u64,
    base: u64,
    value: Option<&Value>,
) -> Result<u64, CostError> {
    let count = match value {
        None | Some(Value::Null) => 0.0,
        Some(value) => value
            .as_f64()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| CostError::NotACount {
                pointer: pointer.to_owned(),
            })?,
    };
    let units = (count * per_unit as f64).ceil();
    // Past u64::MAX the saturating cast keeps the call unaffordable.
    Ok(base.saturating_add(units as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows() -> Cost {
        Cost::Argument {
            pointer: "/rows".into(),
            per_unit: 2,
            base: 1,
        }
    }

    #[test]
    fn an_argument_prices_the_call_rounded_up() {
        assert_eq!(rows().before_call(&json!({"rows": 10})), Ok(21));
        assert_eq!(rows().before_call(&json!({"rows": 0.2})), Ok(2));
        assert_eq!(rows().before_call(&json!({})), Ok(1));
    }

    #[test]
    fn a_pricing_argument_that_is_not_a_count_is_refused() {
        for bad in [
            json!({"rows": -1}),
            json!({"rows": "1000"}),
            json!({"rows": [1]}),
        ] {
            assert!(rows().before_call(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_count_is_read_as_sent_and_as_the_repair_makes_it() {
        let schema = json!({"type": "object", "properties": {"rows": {"type": "integer"}}});
        let priced = |input: Value| rows().before_repaired_call(&input, &schema);
        assert_eq!(priced(json!({"rows": 10})), Ok(21));
        assert_eq!(priced(json!({"rows": "10"})), Ok(21));
        assert_eq!(priced(json!("{\"rows\": 10}")), Ok(21));
        assert!(priced(json!({"rows": "-1"})).is_err());
        // Without a schema that says it is a number, a string stays a string.
        assert!(
            rows()
                .before_repaired_call(&json!({"rows": "10"}), &json!({}))
                .is_err()
        );
    }

    #[test]
    fn a_reported_cost_is_read_from_the_output() {
        let cost = Cost::Reported {
            pointer: "/usage/units".into(),
            estimate: 10,
        };
        assert_eq!(cost.before_call(&json!({})), Ok(10));
        assert_eq!(cost.reported(&json!({"usage": {"units": 3.5}})), Some(4));
        assert_eq!(cost.reported(&json!({"usage": {}})), None);
        assert_eq!(cost.reported(&json!({"usage": {"units": -3}})), None);
    }
}
