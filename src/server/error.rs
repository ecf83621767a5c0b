//! The one HTTP error type: a stable code, a status and a safe message.
//!
//! Handlers return `Result<_, ApiError>`. The body is always
//! `{"error": {"code": "...", "message": "..."}}`; internal failures are
//! logged with a reference id and answered with that id only.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::codes::Code;

/// An error answered as JSON.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status (the code's, but for the framework's own rejections).
    pub status: StatusCode,
    /// Stable machine-readable code, from the catalog.
    pub code: Code,
    /// Human-readable, safe to show.
    pub message: String,
    /// Seconds after which asking again may succeed (`retry-after`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error of the catalog's `code` (its status with it).
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            status: code.status(),
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A rejection by the HTTP framework (a body it cannot read): its
    /// status kept, under the catalog's code for that status.
    pub fn framework(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            ..Self::new(Code::for_status(status), message)
        }
    }

    /// An error whose code a lower layer spelled (`EditError::code`,
    /// `BreakpointError::code`, `ForkError::code`); every such spelling is
    /// in the catalog (a test in `codes` checks).
    pub fn coded(code: &str, message: impl Into<String>) -> Self {
        Self::new(Code::named(code).unwrap_or(Code::InvalidRequest), message)
    }

    /// A 429 with a `retry-after` of `seconds` (at least 1: a client told 0
    /// would ask again at once).
    pub fn too_many(code: Code, message: impl Into<String>, seconds: u64) -> Self {
        Self {
            retry_after: Some(seconds.max(1)),
            ..Self::new(code, message)
        }
    }

    /// 404 `not_found`.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(Code::NotFound, what)
    }

    /// 500: logs `detail` with a fresh reference id, answers only the id.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        let reference = uuid::Uuid::new_v4().simple().to_string();
        tracing::error!(reference = %reference, error = %detail, "internal error");
        Self::new(
            Code::Internal,
            format!("internal error (reference {reference})"),
        )
    }

    /// 503 `unavailable` (a dependency is down); logged, not detailed.
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        let reference = uuid::Uuid::new_v4().simple().to_string();
        tracing::warn!(reference = %reference, error = %detail, "dependency unavailable");
        Self::new(
            Code::Unavailable,
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
                Code::TooManyRuns,
                "the server is at its run limit; retry shortly",
                1,
            ),
            StartError::ShuttingDown => {
                Self::new(Code::ShuttingDown, "the server is shutting down")
            }
            StartError::Busy => Self::new(Code::RunInProgress, "this chat is already answering"),
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
            TurnError::Busy => Self::new(Code::RunInProgress, e.to_string()),
            TurnError::NotOwner => Self::not_found("no such chat"),
            TurnError::UnknownGraph(why) => Self::new(Code::UnknownGraph, why),
            TurnError::UnknownMessage(_) => Self::new(Code::UnknownMessage, e.to_string()),
            TurnError::InvalidInput(why) => Self::new(Code::InvalidInput, why),
            TurnError::Breakpoints(e) => Self::coded(e.code(), e.to_string()),
            TurnError::Start(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (
            self.status,
            Json(json!({ "error": { "code": self.code.as_str(), "message": self.message } })),
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
    let mut out = ApiError::framework(status, message).into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}
