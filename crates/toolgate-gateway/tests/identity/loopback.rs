//! An issuer served by the test itself on loopback, for tokens the provider would never
//! issue (claims of the wrong type, subjects with line breaks) and for an issuer that is
//! down and comes back: a discovery document and a key set holding the public half of
//! `benches/keys/rs256.pem`, and tokens signed with that key. It answers 503 while it is
//! down. Stopped with the test's runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::{Algorithm, Header};
use serde_json::{Value, json};

use crate::RESOURCE;
use crate::common::{key_set, signing_key, unix_now as now};

const KID: &str = "loopback-1";

/// The issuer's address, and a switch that takes it down and brings it back.
pub struct Issuer {
    /// Its identifier (`http://127.0.0.1:<port>`).
    pub url: String,
    up: Arc<AtomicBool>,
}

impl Issuer {
    /// An issuer on a free loopback port, up (`up`) or down from the start.
    pub async fn serve(up: bool) -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let up = Arc::new(AtomicBool::new(up));
        let keys = key_set(KID);
        let discovery = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "token_endpoint": format!("{url}/token"),
        });
        let answer = |up: Arc<AtomicBool>, document: Value| {
            move || {
                let answer: Response = if up.load(Ordering::SeqCst) {
                    Json(document.clone()).into_response()
                } else {
                    StatusCode::SERVICE_UNAVAILABLE.into_response()
                };
                std::future::ready(answer)
            }
        };
        let router = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(answer(Arc::clone(&up), discovery)),
            )
            .route("/jwks", get(answer(Arc::clone(&up), keys)));
        tokio::spawn(async move {
            axum::serve(listener, router)
                .await
                .expect("the issuer serves");
        });
        Issuer { url, up }
    }

    /// Brings it back up.
    pub fn come_back(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// Claims it would issue for `/v1` to the reader `agent-7`, valid for five minutes.
    pub fn claims(&self) -> Value {
        json!({
            "iss": self.url, "aud": RESOURCE, "sub": "agent-7", "roles": ["reader"],
            "iat": now(), "exp": now() + 300,
        })
    }

    /// `claims` signed with its key.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(KID.to_owned());
        jsonwebtoken::encode(&header, claims, &signing_key()).expect("a signed token")
    }

    /// Its usual claims with `change` applied, signed.
    pub fn token_with(&self, change: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
        let mut claims = self.claims();
        change(claims.as_object_mut().expect("claims are an object"));
        self.sign(&claims)
    }
}
