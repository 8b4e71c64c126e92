//! Reading a client's JSON-RPC message from a request body: rmcp's untagged reading against
//! toolgate's (`src/server/message.rs`, compiled in here as it is), in one run.
//!
//! ```sh
//! cargo bench -p toolgate-mcp --bench message          # in time (criterion)
//! # in instructions (callgrind; deterministic, load does not matter): 10,000 readings of
//! # one message (`call` or `list`) by one reader (`rmcp` or `toolgate`)
//! MESSAGE_READS=call/rmcp valgrind --tool=callgrind --collect-atstart=no \
//!     --toggle-collect='*collected_reads*' target/release/deps/message-<hash>
//! ```

use std::hint::black_box;

use criterion::Criterion;
use rmcp::model::ClientJsonRpcMessage;

#[path = "../src/server/message.rs"]
#[allow(dead_code)]
mod message;

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello from the load generator"}}}"#;
const LIST: &[u8] = br#"{"jsonrpc":"2.0","id":18,"method":"tools/list","params":{}}"#;

/// One way of reading a message.
type Reader = fn(&[u8]) -> ClientJsonRpcMessage;

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
    group.finish();
}

/// The readings callgrind counts: only this function is collected.
#[inline(never)]
fn collected_reads(read: Reader, bytes: &[u8]) {
    for _ in 0..10_000 {
        black_box(read(black_box(bytes)));
    }
}

fn main() {
    if let Ok(which) = std::env::var("MESSAGE_READS") {
        let (bytes, read): (&[u8], Reader) = match which.as_str() {
            "call/rmcp" => (CALL, rmcp),
            "call/toolgate" => (CALL, toolgate),
            "list/rmcp" => (LIST, rmcp),
            "list/toolgate" => (LIST, toolgate),
            _ => {
                panic!("MESSAGE_READS is one of call/rmcp, call/toolgate, list/rmcp, list/toolgate")
            }
        };
        collected_reads(read, bytes);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    reading(&mut criterion);
    criterion.final_summary();
}
