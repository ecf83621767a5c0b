//! `GET /api/runs/{id}/calls` and `GET /api/runs/{id}/calls/{n}`: a run's
//! model calls — what each was asked (messages after templating, tools,
//! response format, settings, model and endpoint) and what it answered.
//!
//! The list gives each call with its request summarized (counts, tool
//! names): a long chat's calls each carry its whole history, so the list
//! would grow with the square of its length. One call (`/calls/{n}`, `n`
//! its `index` from 0) comes whole, with the template of its node's prompt
//! as the graph now has it, next to the rendered messages.
//!
//! Errors: 404 `not_found` (no such run of the caller's), 400
//! `bad_call_index` (`n` is not a number), 404 `no_call` (the run has no
//! call `n`).

use crate::server::Code;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::runs_api::owned_run;
use super::{ApiError, AppState, User};
use crate::replay::{self, CallView};
use crate::store::RunRecord;

/// `GET /api/runs/{id}/calls`.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (run, calls) = load(&state, &user, &id).await?;
    let calls: Vec<Value> = calls.iter().map(summary).collect();
    Ok(Json(
        json!({ "run": run.id, "graph": run.graph, "calls": calls }),
    ))
}

/// `GET /api/runs/{id}/calls/{n}`.
pub(super) async fn one(
    State(state): State<Arc<AppState>>,
    user: User,
    Path((id, n)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let index: usize = n.parse().map_err(|_| {
        ApiError::new(
            Code::BadCallIndex,
            format!("`{n}` is not a call index (a number from 0)"),
        )
    })?;
    let (run, calls) = load(&state, &user, &id).await?;
    let mut call = calls.into_iter().nth(index).ok_or_else(|| {
        ApiError::new(
            Code::NoCall,
            format!("run `{}` has no model call {index}", run.id),
        )
    })?;
    replay::expand(&*state.store, &mut call, &mut replay::Parts::default()).await?;
    let template = template(&state, &run.graph, &call.node);
    let mut out = json!(call);
    out["template"] = template;
    Ok(Json(out))
}

/// The run and its calls, if it is the caller's.
async fn load(
    state: &AppState,
    user: &User,
    id: &str,
) -> Result<(RunRecord, Vec<CallView>), ApiError> {
    let run = owned_run(state, user, id).await?;
    let (_, events) = replay::load(&*state.store, run.id)
        .await
        .map_err(ApiError::internal)?;
    let calls = replay::calls(&*state.store, run.id, &events).await?;
    Ok((run, calls))
}

/// A call without its content: counts and tool names (from the record:
/// no content is read).
fn summary(c: &CallView) -> Value {
    let mut out = json!(c);
    if let Some(r) = c.request.as_ref() {
        out["request"] = json!({
            "endpoint": r["endpoint"],
            "settings": r["settings"],
            "messages": r["messages"]["count"],
            "tools": r["tool_names"],
            "response_format": r["response_format_name"],
            "redactions": r["redactions"],
        });
    }
    out
}

/// The prompt template of `node` in `graph` (name and text), as loaded
/// now; `null` for a node without one.
fn template(state: &AppState, graph: &str, node: &str) -> Value {
    let Some(g) = state.graphs.get(graph) else {
        return Value::Null;
    };
    let Some(n) = g.nodes.iter().find(|n| &*n.id == node) else {
        return Value::Null;
    };
    match &n.prompt {
        Some(name) => json!({
            "name": name,
            "text": g.prompts.get(name).map(|p| &p.source),
        }),
        None => Value::Null,
    }
}
