//! The HTTP server: the AI SDK chat endpoint and everything around it.
//!
//! [`app`] builds the router (testable with `oneshot`), [`serve`] runs it on
//! a listener until shutdown. Routes:
//! - `POST /api/chat`, `GET /api/chat/{id}/stream`, `POST /api/chat/{id}/stop`
//! - `GET /api/chats`, `GET|DELETE /api/chat/{id}`
//! - `GET /api/runs`, `GET /api/runs/{id}`, `GET /api/runs/{id}/events`,
//!   `GET /api/runs/{id}/state?step=N`, `POST /api/runs/{id}/fork`,
//!   `GET /api/runs/{id}/timeline`, `POST /api/runs/{id}/reexecute`
//! - `GET /api/graphs`, `GET /api/graphs/{name}`, `POST /api/graphs/reload`
//! - `GET /api/tools`, `GET /api/tools/health`
//! - `GET /healthz`, `GET /readyz`, `GET /metrics`
//! - the studio: `GET /studio`, `GET /studio/{file}`, `GET /` (a redirect)
//! - the LangGraph Agent Server API: `/assistants/…`, `/threads/…`,
//!   `/runs/…`, `/info` (see `server/langgraph/`)
//!
//! Every `/api/` route (and every LangGraph API route) counts against the caller's request rate
//! (`[limits]`, see `server/limits.rs`).
//!
//! Every request gets a correlation id (`x-request-id`, accepted or made
//! up), which is on its log lines and spans, its run's, the response header
//! and the stream's `start` metadata.

mod auth;
mod boot;
mod calls_api;
mod chat;
mod codes;
mod error;
mod eval_api;
mod graphs;
mod health;
mod langgraph;
mod limits;
mod listen;
mod metrics;
mod paused;
mod refuse;
mod runs_api;
mod stream;
mod studio;
mod test_case;
mod tools;
mod ui;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tracing::Instrument;

use crate::config::Config;
use crate::engine::{Engine, Graphs};
use crate::runs::{RunObserver, Runs, RunsConfig};
use crate::runtime::Services;
use crate::store::Store;
use crate::tools::mcp::McpManager;

pub(crate) use auth::User;
pub use boot::build_state;
pub(crate) use codes::Code;
pub(crate) use error::ApiError;
pub(crate) use limits::Limits;
pub(crate) use metrics::Metrics;

/// The correlation id of a request.
#[derive(Clone, Debug)]
pub(crate) struct RequestId(pub String);

/// Everything handlers share.
pub struct AppState {
    /// Configuration.
    pub config: Config,
    /// Persistence.
    pub store: Arc<dyn Store>,
    /// Graphs served.
    pub graphs: Arc<Graphs>,
    /// Models and tools.
    pub services: Arc<Services>,
    /// The run lifecycle: runs in flight, recovery.
    pub runs: Arc<Runs>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Per-user request rate and token quota.
    pub limits: Arc<Limits>,
    /// The MCP servers' connections, when any are configured.
    pub mcp: Option<Arc<McpManager>>,
    /// The LangGraph API's queued runs (`multitask_strategy: enqueue`).
    pub(crate) queue: langgraph::queue::Queue,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store.backend())
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// The served graph a stored run ran: 400 `unknown_graph` when it is
    /// not served here (any more), for every endpoint that acts on a run
    /// (the same failure as a request naming a graph not served).
    pub(crate) fn graph_of(
        &self,
        run: &crate::store::RunRecord,
    ) -> Result<Arc<crate::nodes::Graph>, ApiError> {
        self.graphs.get(&run.graph).ok_or_else(|| {
            ApiError::new(
                Code::UnknownGraph,
                format!("graph `{}` is not served here", run.graph),
            )
        })
    }

    /// State from an engine (graphs, models, tools) and a store, without
    /// MCP servers.
    pub fn new(config: Config, store: Arc<dyn Store>, engine: &Engine) -> Arc<Self> {
        Self::with_mcp(config, store, engine, None)
    }

    /// State from its parts, with the manager of the MCP servers whose
    /// partitions the engine's tools hold (stopped when the server stops).
    pub fn with_mcp(
        config: Config,
        store: Arc<dyn Store>,
        engine: &Engine,
        mcp: Option<McpManager>,
    ) -> Arc<Self> {
        // Readiness knows whether the store takes writes (`store::Watched`).
        let store: Arc<dyn Store> = Arc::new(crate::store::Watched::new(store));
        let metrics = Arc::new(Metrics::default());
        let limits = Arc::new(Limits::new(&config.limits));
        let observer = limits::ServerObserver {
            metrics: Arc::clone(&metrics),
            limits: Arc::clone(&limits),
        };
        let instance = format!("{}-{}", hostname(), uuid::Uuid::now_v7().simple());
        let services = recorded_services(&engine.services, &store, &config);
        let runs = Runs::new(
            Arc::clone(&store),
            Arc::clone(&services),
            Arc::clone(&engine.graphs),
            instance,
            RunsConfig::from(&config.server),
            Arc::new(observer) as Arc<dyn RunObserver>,
        );
        Arc::new(Self {
            config,
            store,
            graphs: Arc::clone(&engine.graphs),
            services,
            runs,
            metrics,
            limits,
            mcp: mcp.map(Arc::new),
            queue: Default::default(),
        })
    }
}

/// The engine's services, recording each model call's request into
/// `store` as `[calls]` says (an embedding's own recorder, already set,
/// stays).
fn recorded_services(
    engine: &Arc<Services>,
    store: &Arc<dyn Store>,
    config: &Config,
) -> Arc<Services> {
    if engine.calls.is_some() {
        return Arc::clone(engine);
    }
    match crate::runs::calls::recording(engine, Arc::clone(store), &config.calls, None) {
        Ok((services, _)) => Arc::new(services),
        Err(e) => {
            // Checked when the config was read; a rule that slipped past
            // records nothing rather than store what it should hide.
            tracing::error!(error = %e, "model calls are not recorded");
            Arc::clone(engine)
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "stategraph".into())
}

/// The router.
pub(crate) fn app(state: Arc<AppState>) -> Router {
    let body_limit = state.config.server.body_limit.0;
    let head_limit = state.config.server.max_header_bytes.0;
    let api = Router::new()
        .route("/api/chat", post(chat::post))
        .route("/api/chat/{id}/stream", get(chat::resume))
        .route("/api/chat/{id}/stop", post(chat::stop))
        .route("/api/chats", get(chat::list))
        .route("/api/chat/{id}", get(chat::get).delete(chat::delete))
        .route("/api/runs", get(runs_api::list))
        .route("/api/runs/{id}", get(runs_api::get))
        .route("/api/runs/{id}/events", get(runs_api::events))
        .route("/api/runs/{id}/state", get(runs_api::state_at))
        .route("/api/runs/{id}/fork", post(runs_api::fork))
        .route("/api/runs/{id}/resume", post(paused::resume))
        .route("/api/runs/{id}/timeline", get(runs_api::timeline))
        .route("/api/runs/{id}/reexecute", post(runs_api::reexecute))
        .route("/api/runs/{id}/test-case", get(test_case::get))
        .route("/api/runs/{id}/verdicts", get(eval_api::verdicts))
        .route("/api/runs/{id}/calls", get(calls_api::list))
        .route("/api/runs/{id}/calls/{n}", get(calls_api::one))
        .route("/api/eval", post(eval_api::post))
        .route("/api/tools", get(tools::list))
        .route("/api/tools/health", get(tools::health))
        .route("/api/graphs", get(graphs::list))
        .route("/api/graphs/reload", post(graphs::reload))
        .route("/api/graphs/{name}", get(graphs::get))
        // The LangGraph Agent Server API (server/langgraph/).
        .merge(langgraph::routes())
        // Only the routes above count against a user's request rate.
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            limits::rate_limit,
        ))
        // The studio's files are public (see server/studio.rs); its data
        // comes from the API above.
        .route("/", get(studio::root))
        .route("/studio", get(studio::index))
        .route("/studio/", get(studio::index))
        .route("/studio/{file}", get(studio::asset))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), observe))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(Code::MethodNotAllowed, "method not allowed here")
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(move |req, next| {
            refuse::unstorable(body_limit, req, next)
        }))
        .layer(middleware::from_fn(error::json_errors))
        // After `json_errors`: LangGraph clients read `{detail}`.
        .layer(middleware::from_fn(langgraph::detail_errors))
        .layer(middleware::from_fn(move |req, next| {
            listen::head_limit(head_limit, req, next)
        }))
        .layer(middleware::from_fn(request_id));
    let router = match cors(&state.config.server.cors_origins) {
        Some(c) => api.layer(c),
        None => api,
    };
    router.with_state(state)
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::from(Any)
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PATCH,
                Method::DELETE,
                Method::OPTIONS,
            ])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                "x-api-key".parse().unwrap_or(header::ACCEPT),
                "x-request-id".parse().unwrap_or(header::ACCEPT),
                "last-event-id".parse().unwrap_or(header::ACCEPT),
            ])
            .expose_headers(["x-request-id".parse().unwrap_or(header::ACCEPT)]),
    )
}

/// Accepts or creates the correlation id and returns it as a header.
async fn request_id(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.chars().all(|c| c.is_ascii_graphic()))
        .map_or_else(|| uuid::Uuid::now_v7().simple().to_string(), str::to_owned);
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// Span, time limit and metrics for matched routes.
async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let id = req
        .extensions()
        .get::<RequestId>()
        .map_or_else(String::new, |r| r.0.clone());
    let method = req.method().clone();
    let span = tracing::info_span!("request", request_id = %id, method = %method, route = %route);
    let started = Instant::now();
    let limit = state.config.server.request_timeout.0;
    let resp = match tokio::time::timeout(limit, next.run(req).instrument(span.clone())).await {
        Ok(r) => r,
        Err(_) => ApiError::new(Code::Timeout, "the request took too long").into_response(),
    };
    let status = resp.status().as_u16();
    span.in_scope(|| {
        tracing::debug!(
            status,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "request"
        )
    });
    state.metrics.request(
        method.as_str(),
        &route,
        status,
        started.elapsed().as_secs_f64(),
    );
    resp
}

/// Serves until `shutdown` resolves, then finishes (or, past the grace
/// period, cancels) the runs in flight.
///
/// # Errors
/// The listener failed.
pub async fn serve(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reload = spawn_reloader(Arc::clone(&state));
    let recover = state.runs.spawn_upkeep();
    let expiry = crate::runs::calls::spawn_expiry(
        Arc::clone(&state.store),
        state.config.calls.retention.0,
        tokio_util::sync::CancellationToken::new(),
    );
    let draining = Arc::new(tokio::sync::Notify::new());
    let (stop_state, stop_notify) = (Arc::clone(&state), Arc::clone(&draining));
    let stopper = tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: no new requests; finishing runs in flight");
        stop_notify.notify_waiters();
        stop_state
            .runs
            .shutdown(stop_state.config.server.shutdown_grace.0)
            .await;
    });
    let wait = Arc::clone(&draining);
    let limits = listen::ConnLimits {
        header_timeout: state.config.server.header_timeout.0,
        max_header_bytes: state.config.server.max_header_bytes.0,
    };
    let result = listen::serve(listener, app(Arc::clone(&state)), limits, async move {
        wait.notified().await;
    })
    .await;
    let _ = stopper.await;
    if let Some(mcp) = &state.mcp {
        mcp.shutdown().await;
    }
    if let Some(r) = reload {
        r.abort();
    }
    recover.abort();
    if let Some(e) = expiry {
        e.abort();
    }
    result
}

fn spawn_reloader(state: Arc<AppState>) -> Option<tokio::task::JoinHandle<()>> {
    let every = state.config.server.reload_interval.0;
    if every.is_zero() || state.graphs.embedded {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let graphs = Arc::clone(&state.graphs);
            if let Ok(Some(report)) =
                tokio::task::spawn_blocking(move || graphs.reload_if_changed()).await
            {
                tracing::info!(updated = ?report.updated, rejected = ?report.rejected, "graph files changed");
            }
        }
    }))
}
