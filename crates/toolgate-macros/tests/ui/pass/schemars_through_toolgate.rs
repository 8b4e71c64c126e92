// This crate (the macros' tests) has no `schemars` dependency of its own: the derive
// works through toolgate's re-export with the `crate` attribute.
use toolgate_core::external::schemars::{self, JsonSchema};

#[derive(JsonSchema)]
#[schemars(crate = "toolgate_core::external::schemars")]
#[allow(dead_code)]
struct Forecast {
    /// Days ahead.
    #[schemars(range(min = 1, max = 14))]
    days: u32,
}

fn main() {
    let schema = schemars::schema_for!(Forecast);
    let days = &schema.as_value()["properties"]["days"];
    assert_eq!(days["maximum"], 14);
}
