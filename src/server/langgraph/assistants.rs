//! Assistants: one per served graph, its id the UUID v5 LangGraph gives a
//! graph's default assistant (`ids::assistant_id`); the graph name is
//! accepted wherever an assistant id is.
//!
//! `POST /assistants/search`, `POST /assistants/count`, `GET
//! /assistants/{id}`, `GET /assistants/{id}/graph` (nodes with `__start__`
//! and `__end__`, edges), `GET /assistants/{id}/schemas` (the declared
//! state as JSON Schema), `GET /assistants/{id}/subgraphs` (none).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::AppState;
use super::super::auth::User;
use super::super::error::ApiError;
use super::{Body, ids, iso};
use crate::nodes::Graph;

/// The graph an assistant id (or a graph name) names.
pub(super) fn graph_of(state: &AppState, id: &str) -> Result<Arc<Graph>, ApiError> {
    if let Some(g) = state.graphs.get(id) {
        return Ok(g);
    }
    let catalog = state.graphs.catalog();
    catalog
        .graphs
        .values()
        .find(|g| ids::assistant_id(&g.id).to_string() == id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("Assistant {id} not found")))
}

/// When this process first served an assistant: the creation time of a
/// graph with no file (built from sources), rather than the 1970 epoch.
fn served_since() -> u64 {
    static SINCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SINCE.get_or_init(crate::events::now_micros)
}

/// An assistant as the API shows it.
pub(super) fn assistant_json(g: &Graph) -> Value {
    // A graph has no creation time of its own; its file's is the closest.
    let at = std::fs::metadata(&g.file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(served_since, |d| d.as_micros() as u64);
    json!({
        "assistant_id": ids::assistant_id(&g.id),
        "graph_id": g.id.as_ref(),
        "name": g.id.as_ref(),
        "description": g.description,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "version": 1,
        "created_at": iso(at),
        "updated_at": iso(at),
    })
}

/// `POST /assistants/search` body (LangGraph's `AssistantSearchRequest`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Search {
    #[serde(default)]
    graph_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

fn matching(state: &AppState, s: &Search) -> Vec<Value> {
    let catalog = state.graphs.catalog();
    catalog
        .graphs
        .values()
        .filter(|g| s.graph_id.as_deref().is_none_or(|id| id == &*g.id))
        .filter(|g| s.name.as_deref().is_none_or(|n| g.id.contains(n)))
        .map(|g| assistant_json(g))
        .filter(|a| {
            s.metadata
                .iter()
                .flatten()
                .all(|(k, v)| a["metadata"].get(k) == Some(v))
        })
        .collect()
}

/// `POST /assistants/search`.
pub(super) async fn search(
    State(state): State<Arc<AppState>>,
    _user: User,
    body: Body<Search>,
) -> Json<Value> {
    let s = body.0.unwrap_or_default();
    let all = matching(&state, &s);
    let page: Vec<Value> = all
        .into_iter()
        .skip(s.offset.unwrap_or(0))
        .take(s.limit.unwrap_or(10))
        .collect();
    Json(Value::Array(page))
}

/// `POST /assistants/count`.
pub(super) async fn count(
    State(state): State<Arc<AppState>>,
    _user: User,
    body: Body<Search>,
) -> Json<Value> {
    Json(json!(matching(&state, &body.0.unwrap_or_default()).len()))
}

/// `GET /assistants/{id}`.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    _user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let g = graph_of(&state, &id)?;
    Ok(Json(assistant_json(&g)))
}

/// `GET /assistants/{id}/graph`: the drawable graph as LangGraph's
/// `Graph.to_json()` writes it.
pub(super) async fn graph(
    State(state): State<Arc<AppState>>,
    _user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let g = graph_of(&state, &id)?;
    let mut nodes = vec![json!({"id": "__start__", "type": "schema", "data": "__start__"})];
    for n in &g.nodes {
        nodes.push(json!({
            "id": n.id.as_ref(),
            "type": "runnable",
            "data": {"id": ["stategraph", n.kind.as_ref()], "name": n.id.as_ref()},
        }));
    }
    nodes.push(json!({"id": "__end__", "type": "schema", "data": "__end__"}));
    let mut edges: Vec<Value> = g
        .entry
        .iter()
        .map(|&e| json!({"source": "__start__", "target": g.nodes[e as usize].id.as_ref()}))
        .collect();
    for e in crate::graph::mermaid::edges(&g) {
        let mut edge = json!({"source": e.from, "target": e.to});
        if matches!(e.kind, "case" | "default") {
            edge["conditional"] = json!(true);
        }
        if let Some(label) = e.label {
            edge["data"] = json!(label);
        }
        edges.push(edge);
    }
    Ok(Json(json!({"nodes": nodes, "edges": edges})))
}

/// The declared state as a JSON Schema object.
pub(super) fn state_schema(g: &Graph) -> Value {
    let schema = &g.state.schema;
    let mut props = Map::new();
    for f in &schema.fields {
        let mut s = f.ty.json_schema();
        if !f.doc.is_empty() {
            s["description"] = json!(f.doc);
        }
        props.insert(f.name.to_string(), s);
    }
    json!({"title": schema.name.as_ref(), "type": "object", "properties": props})
}

/// `GET /assistants/{id}/schemas`.
pub(super) async fn schemas(
    State(state): State<Arc<AppState>>,
    _user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let g = graph_of(&state, &id)?;
    let s = state_schema(&g);
    Ok(Json(json!({
        "graph_id": g.id.as_ref(),
        "input_schema": s,
        "output_schema": s,
        "state_schema": s,
        "config_schema": {"title": "Configurable", "type": "object", "properties": {}},
        "context_schema": null,
    })))
}

/// `GET /assistants/{id}/subgraphs`: none are exposed.
pub(super) async fn subgraphs(
    State(state): State<Arc<AppState>>,
    _user: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    graph_of(&state, &id)?;
    Ok(Json(json!({})))
}
