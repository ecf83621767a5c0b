//! `POST /api/eval`: the studio's evaluation page — `stategraph eval` over
//! the caller's stored chat turns, against the graphs as served now
//! (recorded model outputs wherever a node still asks what it asked then,
//! the configured model elsewhere; docs/testing.md). Nothing is stored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use super::auth::User;
use super::error::ApiError;
use crate::store::RunQuery;
use crate::testing::{self, EvalEnv};

/// The most runs one request evaluates.
const MAX_RUNS: usize = 200;

/// The body: which stored runs (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EvalRequest {
    /// Only runs of this graph.
    graph: Option<String>,
    /// Only runs created at or after this time (ms since the epoch).
    since: Option<u64>,
    /// Only the runs of these chats.
    #[serde(default)]
    chats: Vec<String>,
    /// At most this many (default and cap 200), the newest.
    limit: Option<usize>,
}

/// `POST /api/eval` → the report `stategraph eval --json` writes:
/// `{summary, headline, elapsed_ms, runs: [{run, chat, graph, input, before,
/// after, changes, answer_diff, recorded_calls, live_calls}]}`.
pub(super) async fn post(
    State(state): State<Arc<AppState>>,
    user: User,
    body: Option<Json<EvalRequest>>,
) -> Result<Json<Value>, ApiError> {
    let req = body.map(|Json(b)| b).unwrap_or_default();
    let limit = req.limit.unwrap_or(MAX_RUNS);
    if limit == 0 || limit > MAX_RUNS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_limit",
            format!("`limit` is 1 to {MAX_RUNS}"),
        ));
    }
    let query = |chat: Option<String>| RunQuery {
        user: Some(user.0.clone()),
        chat,
        graph: req.graph.clone(),
        since: req.since.map(|ms| ms.saturating_mul(1000)),
        ..RunQuery::newest(limit)
    };
    let mut records = Vec::new();
    if req.chats.is_empty() {
        records = state.store.list_runs(&query(None)).await?;
    } else {
        for c in &req.chats {
            records.extend(state.store.list_runs(&query(Some(c.clone()))).await?);
        }
    }
    records.sort_by_key(|r| (r.created_at, r.id));
    records.dedup_by_key(|r| r.id);
    records.truncate(limit);
    let runs = testing::eval::stored_runs(&*state.store, records)
        .await
        .map_err(ApiError::internal)?;
    let env = Arc::new(EvalEnv {
        catalog: state.graphs.catalog(),
        models: state.services.models.clone(),
        tools: Arc::clone(&state.services.tools),
        timeout: Duration::from_secs(120),
        judge: None,
        criteria: Vec::new(),
    });
    let started = Instant::now();
    let evals = testing::eval_all(env, runs, 4).await;
    Ok(Json(testing::eval_json(&evals, started.elapsed())))
}
