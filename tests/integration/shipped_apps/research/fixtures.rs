//! Stand-ins for the web on 127.0.0.1 (port 0): a SearXNG-compatible
//! search engine whose results depend on the query, and a page server
//! (pages that answer, one that 404s, slow ones). Both record what they
//! were asked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// One page: its status, how long it takes to answer, its title and
/// paragraphs (one `<p>` each, so one line each in the fetched text).
#[derive(Clone, Debug)]
pub(crate) struct Page {
    pub name: &'static str,
    pub status: StatusCode,
    pub delay: Duration,
    pub title: String,
    pub paragraphs: Vec<String>,
}

impl Page {
    /// A page that answers 200 at once.
    pub(crate) fn ok(name: &'static str, title: &str, paragraphs: &[&str]) -> Self {
        Self {
            name,
            status: StatusCode::OK,
            delay: Duration::ZERO,
            title: title.to_owned(),
            paragraphs: paragraphs.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    /// The same page, answered after `delay`.
    pub(crate) fn slow(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same page with another status.
    pub(crate) fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// The visible text `http_fetch` extracts: one line per paragraph.
    pub(crate) fn text(&self) -> String {
        self.paragraphs.join("\n")
    }

    fn html(&self) -> String {
        let body: String = self
            .paragraphs
            .iter()
            .map(|p| format!("<p>{p}</p>"))
            .collect();
        format!(
            "<!doctype html><html><head><title>{}</title></head><body>{body}</body></html>",
            self.title
        )
    }
}

/// The pages, served under `/p/{name}`; every request is logged.
pub(crate) struct Web {
    addr: SocketAddr,
    pages: BTreeMap<&'static str, Page>,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Web {
    pub(crate) async fn start(pages: Vec<Page>) -> Self {
        let map: BTreeMap<&'static str, Page> = pages.into_iter().map(|p| (p.name, p)).collect();
        let shared = Arc::new(map.clone());
        let hits = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&hits);
        let app = Router::new().route(
            "/p/{name}",
            get(move |Path(name): Path<String>| {
                let (pages, log) = (Arc::clone(&shared), Arc::clone(&log));
                async move {
                    log.lock().unwrap().push(name.clone());
                    let Some(page) = pages.get(name.as_str()) else {
                        return (StatusCode::NOT_FOUND, "no such page").into_response();
                    };
                    tokio::time::sleep(page.delay).await;
                    (
                        page.status,
                        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                        page.html(),
                    )
                        .into_response()
                }
            }),
        );
        Self {
            addr: serve(app).await,
            pages: map,
            hits,
        }
    }

    pub(crate) fn url(&self, name: &str) -> String {
        assert!(self.pages.contains_key(name), "no fixture page {name}");
        format!("http://{}/p/{name}", self.addr)
    }

    pub(crate) fn page(&self, name: &str) -> &Page {
        &self.pages[name]
    }

    /// The page name of one of our URLs.
    pub(crate) fn name_of(&self, url: &str) -> String {
        url.rsplit('/').next().unwrap_or_default().to_owned()
    }

    /// How often `name` was requested.
    pub(crate) fn hits(&self, name: &str) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

type Results = dyn Fn(&str) -> Vec<String> + Send + Sync;

/// The search engine: `GET /search?q=…&format=json` answers the result
/// list `results(q)` gives, after `delay`; it logs each query and keeps
/// the most searches it had in flight at once.
pub(crate) struct Engine {
    addr: SocketAddr,
    queries: Arc<Mutex<Vec<String>>>,
    max_in_flight: Arc<AtomicUsize>,
}

#[derive(serde::Deserialize)]
struct SearchParams {
    q: String,
    format: String,
}

impl Engine {
    pub(crate) async fn start(
        delay: Duration,
        results: impl Fn(&str) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        let results: Arc<Results> = Arc::new(results);
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
                let (results, log, now, max) = (
                    Arc::clone(&results),
                    Arc::clone(&log),
                    Arc::clone(&now),
                    Arc::clone(&max),
                );
                async move {
                    log.lock().unwrap().push(p.q.clone());
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    if p.format != "json" {
                        return (StatusCode::BAD_REQUEST, "format=json only").into_response();
                    }
                    let list: Vec<Value> = results(&p.q)
                        .into_iter()
                        .enumerate()
                        .map(|(i, url)| {
                            json!({
                                "url": url,
                                "title": format!("Result {} for {}", i + 1, p.q),
                                "content": format!("A snippet about {}", p.q),
                            })
                        })
                        .collect();
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        json!({"query": p.q, "results": list}).to_string(),
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

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every query received, in order.
    pub(crate) fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }

    /// The most searches that were in flight at once.
    pub(crate) fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}
