use toolgate_core::{ToolError, tool_fn};

fn main() {
    // A bare `String` is not a tool's input: the error says to put it in a struct.
    let _ = tool_fn("shout", "Shouts the text.", |text: String| async move {
        Ok::<_, ToolError>(text.to_uppercase())
    });
}
