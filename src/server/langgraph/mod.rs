//! The LangGraph Agent Server API (the classic protocol LangGraph's SDKs
//! and `useStream` speak by default), served beside `/api/chat` over the
//! same runs, event log, checkpoints, interrupts and API keys.
//!
//! The mapping (docs/langgraph-api.md): an assistant is a served graph; a
//! thread is a chat (its state is the final state of its newest run); a
//! LangGraph run is one of our runs, started as a chat turn
//! (`Runs::begin_turn`) or continued from its pause (`Runs::resume`). The
//! handlers only translate HTTP to that machinery and back:
//! - `assistants`: search, get, graph, schemas;
//! - `threads`: create, get, patch, delete, search;
//! - `state`: a thread's state and history; `edit`: updating it;
//! - `frontier`: runs that start elsewhere than the entry (`goto`, a
//!   checkpoint, an edit);
//! - `runs`, `start`: starting, waiting for, joining and cancelling runs;
//! - `wire`: our events as LangGraph's stream events, `pump` feeding them;
//! - `messages`: LangChain message dicts to and from our messages;
//! - `ids`: assistant, checkpoint and stream event ids.
//!
//! Errors are LangGraph's `{"detail": …}` (with our stable `code` beside
//! it), with its status codes: 404 for what does not exist or is another
//! key's, 409 for a busy thread, 422 for a body that does not validate.

mod assistants;
mod edit;
mod frontier;
mod ids;
mod messages;
mod patient;
mod pump;
pub(crate) mod queue;
mod runs;
mod start;
mod state;
mod threads;
mod wire;

use crate::server::Code;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::AppState;
use super::auth::User;
use super::error::ApiError;
use crate::runs::TurnError;
use crate::store::ChatRecord;

/// The routes (merged into the server's router, under its rate limit).
pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/info", get(info))
        .route("/ok", get(ok))
        .route("/assistants/search", post(assistants::search))
        .route("/assistants/count", post(assistants::count))
        .route("/assistants/{id}", get(assistants::get))
        .route("/assistants/{id}/graph", get(assistants::graph))
        .route("/assistants/{id}/schemas", get(assistants::schemas))
        .route("/assistants/{id}/subgraphs", get(assistants::subgraphs))
        .route("/threads", post(threads::create))
        .route("/threads/search", post(threads::search))
        .route("/threads/count", post(threads::count))
        .route(
            "/threads/{tid}",
            get(threads::get)
                .patch(threads::patch)
                .delete(threads::delete),
        )
        .route("/threads/{tid}/state", get(state::get).post(edit::update))
        .route("/threads/{tid}/state/{cid}", get(state::get_at))
        .route(
            "/threads/{tid}/history",
            post(state::history).get(state::history_get),
        )
        .route("/threads/{tid}/runs", post(runs::create).get(runs::list))
        .route("/threads/{tid}/runs/stream", post(runs::stream))
        .route("/threads/{tid}/runs/wait", post(runs::wait))
        .route("/threads/{tid}/runs/{rid}", get(runs::get))
        .route("/threads/{tid}/runs/{rid}/join", get(runs::join))
        .route("/threads/{tid}/runs/{rid}/stream", get(runs::join_stream))
        .route("/threads/{tid}/runs/{rid}/cancel", post(runs::cancel))
        .route("/runs/stream", post(runs::stream_stateless))
        .route("/runs/wait", post(runs::wait_stateless))
        .route("/runs", post(runs::create_stateless))
        .route("/runs/{rid}", get(runs::get_stateless))
        .route("/runs/{rid}/stream", get(runs::join_stream_stateless))
}

/// Whether `path` is under the LangGraph API (whose errors are `{detail}`).
fn is_langgraph_path(path: &str) -> bool {
    ["/assistants", "/threads", "/runs", "/info", "/ok"]
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
}

/// `GET /info`: what this server is and which optional parts it has.
async fn info() -> axum::Json<Value> {
    axum::Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "langgraph_py_version": null,
        "flags": {"assistants": true, "crons": false, "langsmith": false, "store": false},
        "metadata": {"server": "stategraph"},
    }))
}

/// `GET /ok`.
async fn ok() -> axum::Json<Value> {
    axum::Json(json!({"ok": true}))
}

/// Rewrites our error body (`{"error": {code, message}}`, from any layer:
/// auth, rate limits (429), body limits, unknown paths under the API's
/// prefixes, handlers) as LangGraph's `{"detail": message}`, for requests
/// to the LangGraph API; the server applies it outside every other layer.
pub(super) async fn detail_errors(req: Request, next: Next) -> Response {
    if !is_langgraph_path(req.uri().path()) {
        return next.run(req).await;
    }
    let resp = next.run(req).await;
    if !(resp.status().is_client_error() || resp.status().is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let detail = v["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
    let out = json!({"detail": detail, "code": v["error"]["code"]});
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(out.to_string()))
}

/// A JSON body, optional (an empty body is `None`), that must validate:
/// 422 with the reason otherwise, as LangGraph answers.
pub(super) struct Body<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::framework(e.status(), e.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        serde_json::from_slice(&bytes)
            .map(|v| Self(Some(v)))
            .map_err(|e| invalid(format!("invalid request body: {e}")))
    }
}

/// 422, LangGraph's answer to a body or parameter that does not validate.
pub(super) fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationError, message)
}

/// A time (µs since the epoch) as LangGraph writes times (ISO 8601, UTC).
pub(super) fn iso(micros: u64) -> String {
    let base = crate::tools::builtin::rfc3339(micros / 1_000_000);
    format!(
        "{}.{:06}+00:00",
        base.trim_end_matches('Z'),
        micros % 1_000_000
    )
}

/// The thread (chat) if it exists and is `user`'s: another key's thread is
/// 404, as a missing one is.
pub(super) async fn owned_thread(
    state: &AppState,
    user: &User,
    id: &str,
) -> Result<ChatRecord, ApiError> {
    match state.runs.owned_chat(&user.0, id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) | Err(TurnError::NotOwner) => {
            Err(ApiError::not_found(format!("Thread {id} not found")))
        }
        Err(e) => Err(e.into()),
    }
}

/// A 409 as LangGraph words a busy thread.
pub(super) fn busy() -> ApiError {
    ApiError::new(
        Code::RunInProgress,
        "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.",
    )
}
