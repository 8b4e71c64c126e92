//! Your own `toolgate` binary: the shipped command line with a hook of your own.
//!
//! ```text
//! cargo run -p toolgate-gateway --example custom_hooks -- check --config examples/gateway.yaml
//! cargo run -p toolgate-gateway --example custom_hooks -- serve --config examples/gateway.yaml
//! ```
//!
//! `check` lists `office_hours` at `will_authorize` for every tool; `serve` refuses calls
//! from users with the `contractor` role outside office hours (UTC).

use std::time::{SystemTime, UNIX_EPOCH};

use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};
use toolgate_gateway::Extensions;

/// Contractors may call tools from 08:00 to 18:00 UTC.
struct OfficeHours;

#[hook]
impl Hook for OfficeHours {
    fn name(&self) -> &str {
        "office_hours"
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let hour = (seconds / 3600) % 24;
        if ctx.user().has_role("contractor") && !(8..18).contains(&hour) {
            return ctx.abort(
                "contractors may call tools from 08:00 to 18:00 UTC",
                "forbidden",
                403,
            );
        }
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    toolgate_gateway::cli::main_with(Extensions::new().hook(OfficeHours))
}
