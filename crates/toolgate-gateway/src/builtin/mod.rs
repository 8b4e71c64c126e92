//! The tools compiled into the gateway: `calculator`, `echo`, `current_time` and `sleep`.

mod calculator;
mod clock;
mod echo;
mod sleep;

use std::sync::Arc;

use toolgate_core::registry::ToolRegistry;
use toolgate_core::tool::ErasedTool;

use crate::config::BuiltinTool;

/// The built-in tool `which`, type-erased for the registry.
pub fn tool(which: BuiltinTool) -> Arc<dyn ErasedTool> {
    let mut registry = ToolRegistry::new();
    let name = match which {
        BuiltinTool::Calculator => registry
            .register(calculator::tool())
            .map(|r| r.name().to_owned()),
        BuiltinTool::Echo => registry.register(echo::tool()).map(|r| r.name().to_owned()),
        BuiltinTool::CurrentTime => registry
            .register(clock::tool())
            .map(|r| r.name().to_owned()),
        BuiltinTool::Sleep => registry
            .register(sleep::tool())
            .map(|r| r.name().to_owned()),
    }
    .expect("a built-in tool registers in an empty registry");
    registry
        .get(&name)
        .map(|r| r.tool.clone())
        .expect("the tool just registered")
}
