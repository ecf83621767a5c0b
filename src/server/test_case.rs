//! `GET /api/runs/{id}/test-case?name=NAME`: the studio's "save as test".
//! A stored run written as a test case (docs/testing.md): its model and tool
//! outputs become the script, its path, routes, tool calls and answer the
//! expectations — what `stategraph test --from-run` appends to a file. The
//! body is a whole test file (YAML) holding that one case, ready to be saved
//! as `graphs/tests/NAME.yaml`, or its `cases:` item pasted into a file.

use crate::server::Code;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::auth::User;
use super::error::ApiError;
use super::runs_api::owned_run;
use crate::runtime::RunStatus;
use crate::testing;

/// `?name=`: the case's name (default: the run's id and the user's message).
#[derive(Debug, Deserialize)]
pub(super) struct CaseQuery {
    name: Option<String>,
}

/// The longest case name taken (a name is one line of a test file).
const MAX_NAME: usize = 200;

/// `GET /api/runs/{id}/test-case`: `application/yaml`, with the case's
/// name in `x-stategraph-case` and a file name in `content-disposition`.
/// 409 `running` while the run has not ended; 404 when its graph is no
/// longer served; 400 `invalid_name` for a name with a line break or over
/// 200 characters.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    user: User,
    Path(id): Path<String>,
    Query(q): Query<CaseQuery>,
) -> Result<Response, ApiError> {
    let run = owned_run(&state, &user, &id).await?;
    if run.status == RunStatus::Running {
        return Err(ApiError::new(
            Code::Running,
            format!(
                "run {} is still running; save it as a test when it has ended",
                run.id
            ),
        ));
    }
    let name = q
        .name
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    if let Some(n) = &name
        && (n.chars().count() > MAX_NAME || n.chars().any(char::is_control))
    {
        return Err(ApiError::new(
            Code::InvalidName,
            format!("a case name is one line of at most {MAX_NAME} characters"),
        ));
    }
    let catalog = state.graphs.catalog();
    if catalog.get(&run.graph).is_none() {
        return Err(ApiError::not_found(format!(
            "graph `{}` is no longer served, so its run cannot be written as a case",
            run.graph
        )));
    }
    let case = testing::case_from_store(
        &*state.store,
        &catalog,
        &state.services.tools,
        run.id,
        name.as_deref(),
    )
    .await
    .map_err(ApiError::internal)?;
    let body = format!("{}{}", testing::file_header(&case.graph), case.yaml);
    let file = format!("{}_recorded.yaml", case.graph);
    let mut resp = (
        [(header::CONTENT_TYPE, "application/yaml; charset=utf-8")],
        body,
    )
        .into_response();
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("inline; filename=\"{file}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    // Header values are visible ASCII: the name goes percent-encoded.
    if let Ok(v) = HeaderValue::from_str(&percent(&case.name)) {
        headers.insert("x-stategraph-case", v);
    }
    Ok(resp)
}

fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~ :()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
