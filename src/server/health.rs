//! `GET /healthz` (the process answers), `GET /readyz` (the store answers
//! and takes writes — see `store::Watched`: a disk that filled up, or a
//! database that refuses writes, makes it 503 while reads still work — and
//! every graph file is valid) and `GET /metrics`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::AppState;

/// Liveness.
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: 200 when ready, 503 with the failing checks otherwise.
pub(super) async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Value>) {
    let store =
        match tokio::time::timeout(std::time::Duration::from_secs(2), state.store.ping()).await {
            Ok(Ok(())) => json!({"ok": true, "backend": state.store.backend()}),
            Ok(Err(e)) => {
                json!({"ok": false, "backend": state.store.backend(), "error": e.to_string()})
            }
            Err(_) => json!({"ok": false, "backend": state.store.backend(), "error": "timed out"}),
        };
    let cat = state.graphs.catalog();
    let graphs = json!({"ok": cat.failed.is_empty() && !cat.graphs.is_empty(), "served": cat.graphs.len(), "failed": cat.failed});
    let ready = store["ok"] == true && graphs["ok"] == true;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(
            json!({"ready": ready, "store": store, "graphs": graphs, "offlineModel": state.services.models.any_offline(), "runsInFlight": state.runs.running()}),
        ),
    )
}

/// Prometheus metrics.
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
