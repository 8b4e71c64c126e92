//! Reading a JSON-RPC message: a client's from a request body, and an upstream's answer to a
//! `tools/call` from its stream; rmcp's untagged reading against toolgate's
//! (`src/server/message.rs` and `src/client/message.rs`, compiled in here as they are), in
//! one run.
//!
//! ```sh
//! cargo bench -p toolgate-mcp --bench message          # in time (criterion)
//! # in instructions (callgrind; deterministic, load does not matter): 10,000 readings of
//! # one message (`call`, `list` or `answer`) by one reader (`rmcp` or `toolgate`)
//! MESSAGE_READS=call/rmcp valgrind --tool=callgrind --collect-atstart=no \
//!     --toggle-collect='*collected_reads*' target/release/deps/message-<hash>
//! ```

use std::hint::black_box;

use criterion::Criterion;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};

#[path = "../src/server/message.rs"]
#[allow(dead_code)]
mod message;

#[path = "../src/client/message.rs"]
#[allow(dead_code)]
mod answer;

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello from the load generator"}}}"#;
const LIST: &[u8] = br#"{"jsonrpc":"2.0","id":18,"method":"tools/list","params":{}}"#;
/// The demo upstream's answer to [`CALL`], as it sends it.
const ANSWER: &str = r#"{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"hello from the load generator"}],"isError":false}}"#;

/// One way of reading a message.
type Reader = fn(&[u8]) -> ClientJsonRpcMessage;

fn rmcp_answer(text: &str) -> ServerJsonRpcMessage {
    serde_json::from_str(text).expect("an answer")
}

fn toolgate_answer(text: &str) -> ServerJsonRpcMessage {
    answer::read(text).expect("an answer")
}

fn rmcp(bytes: &[u8]) -> ClientJsonRpcMessage {
    serde_json::from_slice(bytes).expect("a message")
}

fn toolgate(bytes: &[u8]) -> ClientJsonRpcMessage {
    message::read(bytes).expect("a message")
}

fn reading(c: &mut Criterion) {
    let mut group = c.benchmark_group("read a message");
    for (name, bytes) in [("tools/call", CALL), ("tools/list", LIST)] {
        group.bench_function(format!("{name}, rmcp"), |b| {
            b.iter(|| rmcp(black_box(bytes)))
        });
        group.bench_function(format!("{name}, toolgate"), |b| {
            b.iter(|| toolgate(black_box(bytes)))
        });
    }
    group.bench_function("tools/call answer, rmcp", |b| {
        b.iter(|| rmcp_answer(black_box(ANSWER)))
    });
    group.bench_function("tools/call answer, toolgate", |b| {
        b.iter(|| toolgate_answer(black_box(ANSWER)))
    });
    group.finish();
}

/// The readings callgrind counts: only this function is collected.
#[inline(never)]
fn collected_reads<I: ?Sized, M>(read: fn(&I) -> M, input: &I) {
    for _ in 0..10_000 {
        black_box(read(black_box(input)));
    }
}

fn main() {
    if let Ok(which) = std::env::var("MESSAGE_READS") {
        let (bytes, read): (&[u8], Reader) = match which.as_str() {
            "call/rmcp" => (CALL, rmcp),
            "call/toolgate" => (CALL, toolgate),
            "list/rmcp" => (LIST, rmcp),
            "list/toolgate" => (LIST, toolgate),
            "answer/rmcp" => return collected_reads(rmcp_answer, ANSWER),
            "answer/toolgate" => return collected_reads(toolgate_answer, ANSWER),
            _ => panic!(
                "MESSAGE_READS is one of call/rmcp, call/toolgate, list/rmcp, list/toolgate, answer/rmcp, answer/toolgate"
            ),
        };
        collected_reads(read, bytes);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    reading(&mut criterion);
    criterion.final_summary();
}
