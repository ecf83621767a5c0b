//! The one HTTP error type: a stable code, a status and a safe message.
//!
//! Handlers return `Result<_, ApiError>`. The body is always
//! `{"error": {"code": "...", "message": "..."}}`; internal failures are
//! logged with a reference id and answered with that id only.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered as JSON.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable, safe to show.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 `not_found`.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// 500: logs `detail` with a fresh reference id, answers only the id.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        let reference = uuid::Uuid::new_v4().simple().to_string();
        tracing::error!(reference = %reference, error = %detail, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error (reference {reference})"),
        )
    }

    /// 503 `unavailable` (a dependency is down); logged, not detailed.
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        let reference = uuid::Uuid::new_v4().simple().to_string();
        tracing::warn!(reference = %reference, error = %detail, "dependency unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("temporarily unavailable (reference {reference})"),
        )
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        if e.is_transient() {
            Self::unavailable(e)
        } else {
            Self::internal(e)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": { "code": self.code, "message": self.message } })),
        )
            .into_response()
    }
}
