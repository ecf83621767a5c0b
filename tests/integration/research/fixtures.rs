//! Stand-ins for the web: a SearXNG-compatible search engine and the pages
//! it finds, on 127.0.0.1, recording what they were asked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};
use stategraph::config::Dur;
use stategraph::tools::ToolRegistry;
use stategraph::tools::http::{self, HttpFetchConfig};
use stategraph::tools::search::{self, SearchConfig};

use super::{COST, EFFICIENCY, GAP_FOUND, NOISE};

pub(super) async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The web: one server per page (a site each, so the per-site cap of the
/// selection does not interfere); records every path fetched.
pub(super) struct Web {
    urls: BTreeMap<&'static str, String>,
    pub(super) fetched: Arc<Mutex<Vec<String>>>,
}

impl Web {
    pub(super) async fn start() -> Self {
        let pages: [(&str, StatusCode, &str, &str); 6] = [
            (
                "efficiency",
                StatusCode::OK,
                "Heat pump efficiency explained",
                "<p>Heat pump efficiency is measured as the coefficient of performance (COP).</p>\
                 <p>A modern air-source unit reaches a seasonal COP of 3 to 4.</p>",
            ),
            (
                "overview",
                StatusCode::OK,
                "Heat pumps: an overview",
                "<p>Heat pumps move warmth from the outside air or the ground into a building.</p>\
                 <p>Installation takes two to three days.</p>",
            ),
            (
                "costs",
                StatusCode::OK,
                "What a heat pump costs",
                "<p>The installation cost of an air-source heat pump is 8,000 to 15,000 euros.</p>",
            ),
            (
                "broken",
                StatusCode::INTERNAL_SERVER_ERROR,
                "Error",
                "<p>Internal error</p>",
            ),
            (
                "forum",
                StatusCode::OK,
                "Garden forum",
                "<p>Which tomato varieties grow well on a balcony?</p>",
            ),
            (
                "noise",
                StatusCode::OK,
                "How loud is a heat pump?",
                "<p>Outdoor units produce noise levels of 40 to 60 decibels at one metre.</p>",
            ),
        ];
        let fetched = Arc::new(Mutex::new(Vec::new()));
        let mut urls = BTreeMap::new();
        for (name, status, title, body) in pages {
            let log = Arc::clone(&fetched);
            let html = format!(
                "<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
            );
            let app = Router::new().route(
                &format!("/{name}"),
                get(move || {
                    log.lock().unwrap().push(name.to_owned());
                    let html = html.clone();
                    async move {
                        (
                            status,
                            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                            html,
                        )
                    }
                }),
            );
            let addr = serve(app).await;
            urls.insert(name, format!("http://{addr}/{name}"));
        }
        Self { urls, fetched }
    }

    pub(super) fn url(&self, name: &str) -> String {
        self.urls[name].clone()
    }

    pub(super) fn fetches(&self, name: &str) -> usize {
        self.fetched
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

#[derive(serde::Deserialize)]
struct SearchParams {
    q: String,
    format: String,
}

/// The search engine: fixed result lists per query (none for others); the
/// cost query fails with 503 on its first two calls. Each answer takes
/// 100 ms, and the most searches in flight at once is kept.
pub(super) struct Engine {
    addr: SocketAddr,
    pub(super) queries: Arc<Mutex<Vec<String>>>,
    pub(super) max_in_flight: Arc<AtomicUsize>,
}

impl Engine {
    pub(super) async fn start(web: &Web) -> Self {
        let lists: BTreeMap<&str, Vec<String>> = [
            (EFFICIENCY, vec![web.url("efficiency"), web.url("overview")]),
            (
                COST,
                vec![web.url("costs"), web.url("overview"), web.url("broken")],
            ),
            (NOISE, vec![web.url("forum")]),
            (GAP_FOUND, vec![web.url("noise"), web.url("efficiency")]),
        ]
        .into_iter()
        .collect();
        let lists = Arc::new(lists);
        let queries = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let (log, now, max) = (
            Arc::clone(&queries),
            Arc::clone(&in_flight),
            Arc::clone(&max_in_flight),
        );
        let app = Router::new().route(
            "/search",
            get(move |Query(p): Query<SearchParams>| {
                let (lists, log, now, max) = (
                    Arc::clone(&lists),
                    Arc::clone(&log),
                    Arc::clone(&now),
                    Arc::clone(&max),
                );
                async move {
                    assert_eq!(p.format, "json");
                    let calls = {
                        let mut log = log.lock().unwrap();
                        log.push(p.q.clone());
                        log.iter().filter(|q| **q == p.q).count()
                    };
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    if p.q == COST && calls <= 2 {
                        return (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
                    }
                    let results: Vec<Value> = lists
                        .get(p.q.as_str())
                        .into_iter()
                        .flatten()
                        .map(|u| json!({"url": u, "title": format!("Result for {}", p.q), "content": "snippet"}))
                        .collect();
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        json!({"query": p.q, "results": results}).to_string(),
                    )
                        .into_response()
                }
            }),
        );
        Self {
            addr: serve(app).await,
            queries,
            max_in_flight,
        }
    }

    pub(super) fn searches(&self, q: &str) -> usize {
        self.queries
            .lock()
            .unwrap()
            .iter()
            .filter(|x| *x == q)
            .count()
    }
}

/// The built-in tools plus the web tools pointed at the fixtures.
pub(super) fn web_tools(engine: &Engine) -> Arc<ToolRegistry> {
    let r = ToolRegistry::with_builtins();
    search::register(
        &r,
        &SearchConfig {
            url: format!("http://{}", engine.addr),
            max_results: 5,
            timeout: Dur(Duration::from_secs(5)),
        },
    )
    .unwrap();
    http::register(
        &r,
        &HttpFetchConfig {
            allow: vec!["127.0.0.1".into()],
            timeout: Dur(Duration::from_secs(5)),
            ..HttpFetchConfig::default()
        },
    )
    .unwrap();
    Arc::new(r)
}
