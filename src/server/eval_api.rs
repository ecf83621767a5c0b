//! `POST /api/eval`: the studio's evaluation page — `stategraph eval` over
//! the caller's stored chat turns, against the graphs as served now
//! (recorded model outputs wherever a node still asks what it asked then,
//! the configured model elsewhere; docs/testing.md). With `criteria` and a
//! judge model each run's answer now is judged too, and the verdicts are
//! stored with the runs they judge; `GET /api/runs/{id}/verdicts` reads
//! them back. Nothing else is stored.

use crate::server::Code;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

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
    /// Criteria the judge checks each answer now against (at most
    /// [`MAX_CRITERIA`], each non-empty).
    #[serde(default)]
    criteria: Vec<String>,
    /// The `[llm]` role whose model judges (default: `[testing] judge`);
    /// without one the criteria are reported as not judged.
    judge: Option<String>,
}

/// The most criteria one request judges against.
const MAX_CRITERIA: usize = 10;

/// `POST /api/eval` → the report `stategraph eval --json` writes:
/// `{summary, headline, elapsed_ms, runs: [{run, chat, graph, input, before,
/// after, changes, answer_diff, recorded_calls, live_calls, judged}]}`,
/// and `verdicts_stored`.
pub(super) async fn post(
    State(state): State<Arc<AppState>>,
    user: User,
    body: Option<Json<EvalRequest>>,
) -> Result<Json<Value>, ApiError> {
    let req = body.map(|Json(b)| b).unwrap_or_default();
    let judge = judge_of(&state, &req)?;
    let limit = req.limit.unwrap_or(MAX_RUNS);
    if limit == 0 || limit > MAX_RUNS {
        return Err(ApiError::new(
            Code::InvalidLimit,
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
        judge: judge.clone(),
        criteria: req.criteria,
    });
    let started = Instant::now();
    let evals = testing::eval_all(env, runs, 4).await;
    let mut report = testing::eval_json(&evals, started.elapsed());
    let verdicts = judge
        .map(|j| testing::verdict_records(&evals, &j, "studio"))
        .unwrap_or_default();
    report["verdicts_stored"] = verdicts.len().into();
    if !verdicts.is_empty() {
        state.store.add_verdicts(verdicts).await?;
    }
    Ok(Json(report))
}

/// The judge a request asks for, checked: criteria are short non-empty
/// texts, and the judge's model is not the offline one.
fn judge_of(state: &AppState, req: &EvalRequest) -> Result<Option<testing::Judge>, ApiError> {
    let bad = |code: Code, msg: String| ApiError::new(code, msg);
    if req.criteria.len() > MAX_CRITERIA {
        return Err(bad(
            Code::InvalidCriteria,
            format!("at most {MAX_CRITERIA} `criteria`"),
        ));
    }
    if let Some(i) = req
        .criteria
        .iter()
        .position(|c| c.trim().is_empty() || c.len() > 1000)
    {
        return Err(bad(
            Code::InvalidCriteria,
            format!("criterion {} is empty or longer than 1000 bytes", i + 1),
        ));
    }
    let role = req
        .judge
        .clone()
        .or_else(|| state.config.testing.judge.clone());
    match role {
        Some(role) if !req.criteria.is_empty() => {
            testing::Judge::of_role(&state.services.models, &role)
                .map(Some)
                .map_err(|e| bad(Code::JudgeUnavailable, e))
        }
        _ => Ok(None),
    }
}

/// `GET /api/runs/{id}/verdicts` → `{verdicts: [{id, criterion, verdict,
/// reason, judge, model, answer, source, createdAt}]}`: what a judge said
/// of the run's answer, oldest first (the caller's runs only).
pub(super) async fn verdicts(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = super::runs_api::owned_run(&state, &user, &id).await?;
    Ok(Json(
        json!({ "verdicts": verdicts_json(&*state.store, run.id).await? }),
    ))
}

/// A run's stored verdicts as the API shows them (times in ms).
pub(super) async fn verdicts_json(
    store: &dyn crate::store::Store,
    run: uuid::Uuid,
) -> Result<Value, ApiError> {
    let list = store.verdicts(run).await?;
    Ok(list
        .iter()
        .map(|v| {
            json!({
                "id": v.id,
                "criterion": v.criterion,
                "verdict": v.verdict,
                "reason": v.reason,
                "judge": v.judge,
                "model": v.model,
                "answer": v.answer,
                "source": v.source,
                "createdAt": v.created_at / 1000,
            })
        })
        .collect())
}
