//! `GET /api/graphs`, `GET /api/graphs/{name}`, `POST /api/graphs/reload`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::auth::User;
use super::error::ApiError;
use crate::graph::load::MAX_GRAPH_FILE_BYTES;
use crate::graph::mermaid::{edges, mermaid};
use crate::graph::source::read_capped;

/// Every graph served, with the diagnostics of files that failed.
pub(super) async fn list(State(state): State<Arc<AppState>>, _user: User) -> Json<Value> {
    let cat = state.graphs.catalog();
    let graphs: Vec<Value> = cat
        .graphs
        .values()
        .map(|g| {
            json!({
                "id": g.id.as_ref(),
                "version": g.version,
                "description": g.description,
                "state": g.state.schema.name,
                "nodes": g.nodes.len(),
                "stale": cat.failed.contains(g.id.as_ref()),
            })
        })
        .collect();
    Json(json!({
        "graphs": graphs,
        "failed": cat.failed,
        "diagnostics": cat.diagnostics,
        "embedded": state.graphs.embedded,
    }))
}

/// One graph: its state's fields with their types, its nodes (kind,
/// settings, tools, prompt and its text, subgraph), its edges (as a list and
/// as Mermaid) and its source.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    _user: User,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let g = state
        .graphs
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no graph `{name}`")))?;
    let nodes: Vec<Value> = g
        .nodes
        .iter()
        .map(|n| {
            json!({
                "id": n.id.as_ref(),
                "kind": n.kind.as_ref(),
                "surface": n.surface,
                "description": n.description,
                "writes": n.writes.iter().map(|f| &*g.state.schema.spec(*f).name).collect::<Vec<_>>(),
                "tools": n.tools,
                "settings": n.settings,
                "prompt": n.prompt.as_ref().map(|name| json!({
                    "name": name,
                    "text": g.prompts.get(name).map(|p| &p.source),
                })),
                "subgraph": n.subgraph.as_ref().map(|s| s.id.as_ref()),
                "retry": {"attempts": n.retry.attempts, "backoffMs": n.retry.backoff.as_millis() as u64},
                "timeoutMs": n.timeout.map(|t| t.as_millis() as u64),
            })
        })
        .collect();
    // The file as it is now (it may have changed since it compiled), read
    // with the loader's limits: a FIFO or device put in its place cannot
    // hang or flood the request.
    let source = read_capped(&g.file, MAX_GRAPH_FILE_BYTES as u64)
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    Ok(Json(json!({
        "id": g.id.as_ref(),
        "version": g.version,
        "description": g.description,
        "state": g.state.schema,
        "entry": g.entry.iter().map(|e| g.nodes[*e as usize].id.as_ref()).collect::<Vec<_>>(),
        "recursionLimit": g.recursion_limit,
        "nodes": nodes,
        "edges": edges(&g),
        "mermaid": mermaid(&g),
        "source": source,
    })))
}

/// Reloads graph files and prompts now. 200 when every file is valid, 422
/// (with diagnostics) when some were rejected — the valid ones are live
/// either way and the rejected ones keep their previous version.
pub(super) async fn reload(
    State(state): State<Arc<AppState>>,
    _user: User,
) -> (StatusCode, Json<Value>) {
    let graphs = Arc::clone(&state.graphs);
    let report = tokio::task::spawn_blocking(move || graphs.reload()).await;
    match report {
        Ok(report) => {
            let status = if report.rejected.is_empty() {
                StatusCode::OK
            } else {
                StatusCode::UNPROCESSABLE_ENTITY
            };
            (
                status,
                Json(serde_json::to_value(&report).unwrap_or(Value::Null)),
            )
        }
        Err(e) => {
            let err = ApiError::internal(e);
            (
                err.status,
                Json(json!({"error": {"code": err.code.as_str(), "message": err.message}})),
            )
        }
    }
}
