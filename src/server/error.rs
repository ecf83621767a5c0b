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
    /// Seconds after which asking again may succeed (`retry-after`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 429 with a code, and a `retry-after` of `seconds` (at least 1: a
    /// client told 0 would ask again at once).
    pub fn too_many(code: &'static str, message: impl Into<String>, seconds: u64) -> Self {
        Self {
            retry_after: Some(seconds.max(1)),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, code, message)
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

/// A run that could not start, as every endpoint that starts one answers
/// it (chat turns, resumes, forks).
impl From<crate::runs::StartError> for ApiError {
    fn from(e: crate::runs::StartError) -> Self {
        use crate::runs::StartError;
        match e {
            StartError::Full => Self::too_many(
                "too_many_runs",
                "the server is at its run limit; retry shortly",
                1,
            ),
            StartError::ShuttingDown => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the server is shutting down",
            ),
            StartError::Busy => Self::new(
                StatusCode::CONFLICT,
                "run_in_progress",
                "this chat is already answering",
            ),
            StartError::Store(e) => e.into(),
        }
    }
}

/// A refused turn, as every endpoint that starts one answers it (the
/// LangGraph API words a busy thread and a missing one its own way first).
impl From<crate::runs::TurnError> for ApiError {
    fn from(e: crate::runs::TurnError) -> Self {
        use crate::runs::TurnError;
        match e {
            TurnError::Busy => Self::new(StatusCode::CONFLICT, "run_in_progress", e.to_string()),
            TurnError::NotOwner => Self::not_found("no such chat"),
            TurnError::UnknownGraph(why) => Self::bad_request("unknown_graph", why),
            TurnError::UnknownMessage(_) => Self::bad_request("unknown_message", e.to_string()),
            TurnError::InvalidInput(why) => Self::bad_request("invalid_input", why),
            TurnError::Breakpoints(e) => Self::bad_request(e.code(), e.to_string()),
            TurnError::Start(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (
            self.status,
            Json(json!({ "error": { "code": self.code, "message": self.message } })),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        resp
    }
}

/// Makes every error response the documented JSON, whoever produced it:
/// axum's extractor rejections (a bad query string, a path that is not
/// UTF-8, a body over the limit) answer plain text, which a client parsing
/// `{"error": …}` cannot read. Their status is kept; their text becomes the
/// message under a stable code for the status.
pub(super) async fn json_errors(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 16 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut out = ApiError::new(status, code_for(status), message).into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// The stable code of a status whose producer gave none.
fn code_for(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "unauthorized",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "timeout",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        429 => "too_many_requests",
        431 => "headers_too_large",
        503 => "unavailable",
        504 => "timeout",
        500..=599 => "internal",
        _ => "invalid_request",
    }
}
