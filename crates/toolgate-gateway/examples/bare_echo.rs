//! The load benchmark's baseline: a bare axum handler doing the same echo as the gateway's
//! `POST /v1/tools/echo/invoke` — parse `{"text": …}`, answer `{"output": {"text": …}}` —
//! with no auth, no policies and no pipeline. `benches/load.sh` runs it next to the
//! gateway.
//!
//! ```text
//! cargo run --release -p toolgate-gateway --example bare_echo -- 127.0.0.1:8090
//! ```

use axum::Json;
use axum::routing::post;
use serde::{Deserialize, Serialize};

// The same allocator as the `toolgate` binary, so the comparison is of the work done.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Deserialize, Serialize)]
struct Echo {
    text: String,
}

async fn echo(Json(input): Json<Echo>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "output": input }))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8090".to_owned());
    let app = axum::Router::new().route("/v1/tools/echo/invoke", post(echo));
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("bare echo listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
