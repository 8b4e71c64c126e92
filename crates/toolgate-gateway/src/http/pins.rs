//! `GET /v1/admin/pins` and `POST /v1/admin/pins/{tool}/accept`: the pinned tool
//! definitions and the changes waiting, for users with an approver role.

use axum::Json;
use axum::extract::{Extension, Path};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, Caller};
use crate::pins::{PinError, PinFile};

fn pin_file(caller: &Caller) -> Result<std::path::PathBuf, ApiError> {
    if !caller.gateway.may_approve(&caller.user) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_an_approver",
            "only users with an approver role (`policies.approval.approver_roles`) may see or accept pins",
        ));
    }
    caller
        .gateway
        .config
        .pins
        .as_ref()
        .map(|p| p.path.0.clone())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "pins_off",
                "this gateway does not pin tool definitions (no `pins:` in its configuration)",
            )
        })
}

fn unavailable(e: PinError) -> ApiError {
    tracing::error!(error = %e, "the pin file cannot be used");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "pins_unavailable",
        "the pin file cannot be read or written right now: see the gateway's log",
    )
}

/// The pins and the changes waiting.
pub async fn list(Extension(caller): Extension<Caller>) -> Result<Json<Value>, ApiError> {
    let path = pin_file(&caller)?;
    let pins = PinFile::load(&path).map_err(unavailable)?;
    Ok(Json(json!({ "pins": pins.pins, "pending": pins.pending })))
}

/// Accepts the change waiting for a tool; it is served after the next reload.
pub async fn accept(
    Extension(caller): Extension<Caller>,
    Path(tool): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let path = pin_file(&caller)?;
    let mut pins = PinFile::load(&path).map_err(unavailable)?;
    match pins.accept(&tool) {
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
    pins.save(&path).map_err(unavailable)?;
    tracing::warn!(target: "toolgate::pins", tool, by = %caller.user.id, "tool definition change accepted");
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "accepted": tool,
            "by": caller.user.id,
            "note": "the tool is served after the next reload (SIGHUP)",
        })),
    ))
}
