//! `GET /v1/admin/pins`, `POST /v1/admin/pins/{tool}/accept` and
//! `DELETE /v1/admin/pins/{tool}`: the pinned tool definitions and the changes waiting, for
//! users with an approver role and no tenant (the pins decide what every tenant runs).

use axum::Json;
use axum::extract::{Extension, Path};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, Caller};
use crate::pins::{PinError, PinStore};

fn pin_store(caller: &Caller) -> Result<&PinStore, ApiError> {
    super::admin::operators_only(caller, "the pins")?;
    caller.gateway.pins.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "pins_off",
            "this gateway does not pin tool definitions (no `pins:` in its configuration)",
        )
    })
}

fn unavailable(e: PinError) -> ApiError {
    tracing::error!(error = %e, "the pins cannot be used");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "pins_unavailable",
        "the pins cannot be read or written right now: see the gateway's log",
    )
}

/// The pins and the changes waiting, and which pinned tools this gateway's upstreams no
/// longer offer (`gone`: the ones to [forget](forget) once they are gone for good).
pub async fn list(Extension(caller): Extension<Caller>) -> Result<Json<Value>, ApiError> {
    let pins = pin_store(&caller)?.read().await.map_err(unavailable)?;
    let registry = caller.gateway.pipeline().registry();
    let gone: Vec<&String> = pins
        .pins
        .keys()
        .filter(|tool| registry.get(tool).is_none())
        .collect();
    Ok(Json(
        json!({ "pins": pins.pins, "pending": pins.pending, "gone": gone }),
    ))
}

/// Accepts the change waiting for a tool; it is served after the next reload (of every
/// replica, when the pins are shared).
pub async fn accept(
    Extension(caller): Extension<Caller>,
    Path(tool): Path<String>,
    // Read, so that the connection stays usable after the answer; what it says is not used.
    _body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let store = pin_store(&caller)?;
    match store.accept(&tool).await {
        Ok(()) => {}
        Err(e @ PinError::NothingPending { .. }) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "nothing_pending",
                e.to_string(),
            ));
        }
        Err(e) => return Err(unavailable(e)),
    }
    tracing::warn!(target: "toolgate::pins", tool, by = %caller.user.id, "tool definition change accepted");
    let note = match store {
        PinStore::File(_) => "the tool is served after the next reload (SIGHUP)",
        PinStore::Shared(_) => "the tool is served by each replica after its next reload (SIGHUP)",
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "accepted": tool,
            "by": caller.user.id,
            "note": note,
        })),
    ))
}

/// Forgets the pin of a tool gone for good, and any change waiting for it: a tool of that
/// name offered again is pinned afresh (trust on first use) at the next reload.
pub async fn forget(
    Extension(caller): Extension<Caller>,
    Path(tool): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match pin_store(&caller)?.forget(&tool).await {
        Ok(()) => {}
        Err(e @ PinError::NotPinned { .. }) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_pinned",
                e.to_string(),
            ));
        }
        Err(e) => return Err(unavailable(e)),
    }
    tracing::warn!(target: "toolgate::pins", tool, by = %caller.user.id, "tool definition pin forgotten");
    Ok(Json(json!({
        "forgotten": tool,
        "by": caller.user.id,
        "note": "a tool of this name offered again is pinned afresh, trusted on first use, at the next reload",
    })))
}
