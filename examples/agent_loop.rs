//! An agent loop in miniature: a scripted model that answers in OpenAI chat-completions
//! tool-call format drives two rounds of tool calls through the toolgate tool system, and
//! the whole conversation is printed. No network: the "model" is a list of canned turns.
//!
//! Run it with `cargo run --example agent_loop`.

use std::sync::Arc;

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::agent::format::openai;
use toolgate::agent::{ExecuteOptions, InMemoryStateManager, ToolSystem};
use toolgate::prelude::*;

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// Which city to forecast.
struct Forecast {
    /// The city, e.g. `Lisbon`.
    #[garde(length(min = 1, max = 40))]
    city: String,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// A temperature to convert.
struct Celsius {
    /// Degrees Celsius.
    #[garde(range(min = -90.0, max = 60.0))]
    celsius: f64,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// What to pack for.
struct Packing {
    /// The expected weather, e.g. `rain`.
    #[garde(length(min = 1, max = 40))]
    weather: String,
}

/// The scripted model: each turn is what a chat-completions API would answer, given the
/// conversation so far. A real loop sends `messages` and `tools` to the provider here.
fn scripted_model(turn: usize, _messages: &[Value], _tools: &Value) -> Value {
    match turn {
        0 => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [
                { "id": "call_1", "type": "function",
                  "function": { "name": "get_forecast", "arguments": "{\"city\":\"Lisbon\"}" } },
                { "id": "call_2", "type": "function",
                  "function": { "name": "get_forecast", "arguments": "{\"city\":\"Porto\"" } }
            ]
        }),
        1 => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [
                { "id": "call_3", "type": "function",
                  "function": { "name": "get_forecast", "arguments": "{\"city\":\"Porto\"}" } },
                { "id": "call_4", "type": "function",
                  "function": { "name": "to_fahrenheit", "arguments": "{\"celsius\":19.5}" } },
                { "id": "call_5", "type": "function",
                  "function": { "name": "packing_list", "arguments": "{\"weather\":\"rain\"}" } }
            ]
        }),
        _ => json!({
            "role": "assistant",
            "content": "Lisbon: sunny, 19.5 °C (67.1 °F). Porto: rain, 14 °C — pack an umbrella and a light jacket."
        }),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pipeline = Pipeline::builder()
        .tool(tool_fn(
            "get_forecast",
            "Today's forecast for a city.",
            |f: Forecast| async move {
                let (sky, temp_c) = if f.city == "Porto" {
                    ("rain", 14.0)
                } else {
                    ("sunny", 19.5)
                };
                Ok::<_, ToolError>(json!({ "city": f.city, "sky": sky, "temp_c": temp_c }))
            },
        ))
        .tool(tool_fn(
            "to_fahrenheit",
            "Converts Celsius to Fahrenheit.",
            |c: Celsius| async move {
                Ok::<_, ToolError>(((c.celsius * 9.0 / 5.0 + 32.0) * 10.0).round() / 10.0)
            },
        ))
        .tool(tool_fn(
            "packing_list",
            "What to pack for some weather.",
            |p: Packing| async move {
                let items = if p.weather == "rain" {
                    vec!["umbrella", "light jacket"]
                } else {
                    vec!["sunglasses"]
                };
                Ok::<_, ToolError>(items)
            },
        ));

    // A thread nobody configured may call every registered tool; `state.set_config(thread,
    // ThreadConfig::enabling([...]))` narrows one thread to some of them.
    let state = Arc::new(InMemoryStateManager::new());
    let system = ToolSystem::builder(pipeline, state).build()?;
    let tools = openai::chat_tools(&system.enabled_definitions("trip-thread").await?);

    let mut messages = vec![
        json!({ "role": "user", "content": "Weather in Lisbon and Porto today, and what should I pack?" }),
    ];
    for turn in 0.. {
        let answer = scripted_model(turn, &messages, &tools);
        let calls = openai::parse_chat_tool_calls(&answer)?;
        messages.push(answer);
        if calls.is_empty() {
            break;
        }
        let options = ExecuteOptions::new()
            .user(User::new("traveller"))
            .trace_id(format!("trip-{turn}"));
        let results = system.execute_tools("trip-thread", calls, options).await;
        messages.extend(results.iter().map(openai::chat_tool_message));
    }

    for message in &messages {
        let role = message["role"].as_str().unwrap_or("?");
        match (
            message.get("tool_calls").and_then(Value::as_array),
            &message["content"],
        ) {
            (Some(calls), _) => {
                for call in calls {
                    println!(
                        "{role:>9}: calls {}({})",
                        call["function"]["name"].as_str().unwrap_or("?"),
                        call["function"]["arguments"].as_str().unwrap_or("")
                    );
                }
            }
            (None, Value::String(content)) if role == "tool" => {
                println!(
                    "{role:>9}: [{}] {content}",
                    message["tool_call_id"].as_str().unwrap_or("?")
                );
            }
            (None, content) => println!("{role:>9}: {}", content.as_str().unwrap_or_default()),
        }
    }
    Ok(())
}
