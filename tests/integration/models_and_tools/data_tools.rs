//! Built-in tools that reach real data: `http_fetch` and `web_search`
//! against local fixture servers, the SQL tools against the local
//! PostgreSQL (one throwaway database per test, seeded from
//! tests/fixtures/sql/demo.sql), and graphs/analyst.yaml end to end with a
//! scripted model that corrects its own mistake. Nothing leaves 127.0.0.1.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use stategraph::internals::config::{Bytes, Dur};
use stategraph::internals::events::EventKind;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, Models};
use stategraph::internals::runtime::{self, RunOptions, Services};
use stategraph::internals::tools::http::{self, HttpFetchConfig};
use stategraph::internals::tools::search::{self, SearchConfig};
use stategraph::internals::tools::sql::{self, SourceConfig, SqlConfig};
use stategraph::internals::tools::{ToolError, ToolOutcome, ToolRegistry};
use tokio::sync::mpsc;
use tokio_postgres::NoTls;

use crate::support::db::PgDb;
use crate::support::root;

// ---------------------------------------------------------------- fixtures

/// Serves `app` on 127.0.0.1:0 for the rest of the test.
async fn serve(listener: tokio::net::TcpListener, app: Router) -> SocketAddr {
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

const PAGE: &str = r#"<!doctype html>
<html><head><title>Quarterly report</title>
<style>.secret { color: red }</style><script>var secret = "<p>tracking</p>";</script></head>
<body><nav><a href="/">Home</a> <a href="/about">About us</a></nav>
<h1>Q1 results</h1>
<p>Revenue    grew
   by 5&nbsp;% to 125,000 &#8364; &#x2014; a record.</p>
<p>Costs fell &amp; margins rose.</p>
</body></html>"#;

/// A web server with pages, redirects and a page that never ends; records
/// the `Host` of every request.
async fn web_fixture() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = listener().await;
    let port = l.local_addr().unwrap().port();
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&hosts);
    let app = Router::new()
        .route(
            "/page",
            get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }),
        )
        .route(
            "/plain",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    "just   text\nkept as is",
                )
            }),
        )
        .route(
            "/data.json",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"amount": 125000}"#,
                )
            }),
        )
        .route("/moved", get(|| async { redirect("/page") }))
        .route(
            "/out",
            get(move || async move { redirect(&format!("http://localhost:{port}/page")) }),
        )
        .route(
            "/endless",
            get(|| async {
                // Never ends: only a reader that stops at its limit finishes.
                let chunk =
                    bytes::Bytes::from("<p>".to_owned() + &"lorem ipsum ".repeat(700) + "</p>\n");
                let stream =
                    futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
                (
                    [(header::CONTENT_TYPE, "text/html")],
                    Body::from_stream(stream),
                )
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        )
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let seen = Arc::clone(&seen);
                async move {
                    let host = req
                        .headers()
                        .get(header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    seen.lock()
                        .unwrap()
                        .push(format!("{host}{}", req.uri().path()));
                    next.run(req).await
                }
            },
        ));
    (serve(l, app).await, hosts)
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_owned())]).into_response()
}

fn fetch_registry(cfg: HttpFetchConfig) -> ToolRegistry {
    let r = ToolRegistry::new();
    http::register(&r, &cfg).unwrap();
    r
}

async fn call(r: &ToolRegistry, tool: &str, args: Value) -> Result<ToolOutcome, ToolError> {
    r.call(tool, args, &r.names()).await
}

// ------------------------------------------------------------- http_fetch

#[tokio::test]
async fn http_fetch_reads_allowed_pages_as_text() {
    let (addr, _) = web_fixture().await;
    let r = fetch_registry(HttpFetchConfig {
        allow: vec!["127.0.0.1".into()],
        ..HttpFetchConfig::default()
    });
    assert_eq!(
        r.spec("http_fetch").unwrap().policy.cache_ttl,
        Some(std::time::Duration::from_secs(24 * 3600)),
        "pages are cached a day by default (the research document's TTL)"
    );
    let out = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/page")}),
    )
    .await
    .unwrap()
    .output;
    assert_eq!(out["status"], 200);
    assert_eq!(out["title"], "Quarterly report");
    assert_eq!(out["truncated"], false);
    let text = out["text"].as_str().unwrap();
    assert_eq!(
        text,
        "Q1 results\nRevenue grew by 5 % to 125,000 € — a record.\nCosts fell & margins rose."
    );
    for hidden in ["secret", "tracking", "Home", "About us"] {
        assert!(!text.contains(hidden), "{hidden} must be dropped: {text}");
    }
    // Plain text and JSON pass through unchanged.
    let plain = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/plain")}),
    )
    .await
    .unwrap()
    .output;
    assert_eq!(plain["text"], "just   text\nkept as is");
    assert_eq!(plain["title"], Value::Null);
    let data = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/data.json")}),
    )
    .await
    .unwrap()
    .output;
    assert_eq!(data["text"], r#"{"amount": 125000}"#);
    // A redirect within the allowed host is followed; the result names where it ended.
    let moved = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/moved")}),
    )
    .await
    .unwrap()
    .output;
    assert_eq!(moved["url"], format!("http://{addr}/page"));
    assert_eq!(moved["title"], "Quarterly report");
}

#[tokio::test]
async fn http_fetch_refuses_other_hosts_and_redirects_to_them() {
    let (addr, hosts) = web_fixture().await;
    let r = fetch_registry(HttpFetchConfig {
        allow: vec!["127.0.0.1".into(), "*.example.com".into()],
        ..HttpFetchConfig::default()
    });
    // `localhost` reaches the same server, but it is not on the list.
    let e = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://localhost:{}/page", addr.port())}),
    )
    .await
    .unwrap_err()
    .to_failure();
    assert_eq!(e.kind, "validation_error");
    assert_eq!(e.details["host"], "localhost");
    assert_eq!(
        e.details["allowed_hosts"],
        json!(["127.0.0.1", "*.example.com"])
    );
    // A redirect from an allowed host to another one is refused before it is followed.
    let e = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/out")}),
    )
    .await
    .unwrap_err()
    .to_failure();
    assert_eq!(e.kind, "validation_error");
    assert_eq!(e.details["redirected_from"], format!("http://{addr}/out"));
    assert_eq!(
        e.details["url"],
        format!("http://localhost:{}/page", addr.port())
    );
    let e = call(&r, "http_fetch", json!({"url": "file:///etc/passwd"}))
        .await
        .unwrap_err()
        .to_failure();
    assert_eq!(e.kind, "validation_error");
    let e = call(&r, "http_fetch", json!({"url": "not a url"}))
        .await
        .unwrap_err()
        .to_failure();
    assert_eq!(e.kind, "validation_error");
    let seen = hosts.lock().unwrap().clone();
    assert_eq!(
        seen,
        [format!("127.0.0.1:{}/out", addr.port())],
        "only the allowed host was ever asked"
    );
}

#[tokio::test]
async fn http_fetch_stops_reading_at_the_size_limit_and_times_out() {
    let (addr, _) = web_fixture().await;
    let r = fetch_registry(HttpFetchConfig {
        allow: vec!["127.0.0.1".into()],
        max_bytes: Bytes(64 * 1024),
        timeout: Dur(Duration::from_secs(5)),
    });
    let started = Instant::now();
    let out = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/endless")}),
    )
    .await
    .unwrap()
    .output;
    assert_eq!(out["truncated"], true);
    let text = out["text"].as_str().unwrap();
    assert!(
        text.starts_with("lorem ipsum") && text.len() <= 64 * 1024,
        "{} bytes",
        text.len()
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "an endless body must not be read to the end"
    );

    let r = fetch_registry(HttpFetchConfig {
        allow: vec!["127.0.0.1".into()],
        timeout: Dur(Duration::from_millis(300)),
        ..HttpFetchConfig::default()
    });
    let e = call(
        &r,
        "http_fetch",
        json!({"url": format!("http://{addr}/slow")}),
    )
    .await
    .unwrap_err()
    .to_failure();
    assert_eq!(e.kind, "timeout");
}

// ------------------------------------------------------------- web_search

#[derive(serde::Deserialize)]
struct SearchParams {
    q: String,
    format: String,
}

/// A SearXNG-like endpoint: eight results for any query, 503 for `boom`,
/// HTML for `html`; counts requests.
async fn search_fixture() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    let app = Router::new().route(
        "/search",
        get(move |Query(p): Query<SearchParams>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(p.format, "json");
                match p.q.as_str() {
                    "boom" => (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response(),
                    "html" => ([(header::CONTENT_TYPE, "text/html")], "<html>captcha</html>").into_response(),
                    q => {
                        let results: Vec<Value> = (1..=8)
                            .map(|i| json!({"title": format!("{q} result {i}"), "url": format!("https://example.com/{i}"), "content": format!("About   {q}, part {i}."), "engine": "x"}))
                            .chain([json!({"title": "no url"})])
                            .collect();
                        ([(header::CONTENT_TYPE, "application/json")], json!({"query": q, "results": results}).to_string()).into_response()
                    }
                }
            }
        }),
    );
    (serve(listener().await, app).await, hits)
}

#[tokio::test]
async fn web_search_returns_limited_results_and_structured_failures() {
    let (addr, hits) = search_fixture().await;
    let r = ToolRegistry::new();
    search::register(
        &r,
        &SearchConfig {
            url: format!("http://{addr}/"),
            max_results: 3,
            timeout: Dur(Duration::from_secs(5)),
        },
    )
    .unwrap();
    assert_eq!(
        r.spec("web_search").unwrap().policy.cache_ttl,
        Some(Duration::from_secs(3600)),
        "search results are cached an hour by default (the research document's TTL)"
    );
    let out = call(&r, "web_search", json!({"query": "revenue & costs 2024"}))
        .await
        .unwrap();
    assert_eq!(out.output["query"], "revenue & costs 2024");
    let results = out.output["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "limited to max_results");
    assert_eq!(
        results[0],
        json!({"title": "revenue & costs 2024 result 1", "url": "https://example.com/1", "snippet": "About revenue & costs 2024, part 1."})
    );
    // The same query again is served from the cache.
    assert!(
        call(&r, "web_search", json!({"query": "revenue & costs 2024"}))
            .await
            .unwrap()
            .cached
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // Fewer on request, never more than configured.
    let two = call(&r, "web_search", json!({"query": "q", "max_results": 2}))
        .await
        .unwrap();
    assert_eq!(two.output["results"].as_array().unwrap().len(), 2);
    let many = call(&r, "web_search", json!({"query": "q2", "max_results": 50}))
        .await
        .unwrap();
    assert_eq!(many.output["results"].as_array().unwrap().len(), 3);
    for (q, expect) in [("boom", "HTTP 503"), ("html", "JSON")] {
        let e = call(&r, "web_search", json!({"query": q}))
            .await
            .unwrap_err()
            .to_failure();
        assert_eq!(e.kind, "execution_error", "{q}");
        assert!(e.message.contains(expect), "{q}: {}", e.message);
    }
    assert_eq!(
        call(&r, "web_search", json!({"query": ""}))
            .await
            .unwrap_err()
            .to_failure()
            .kind,
        "validation_error"
    );
    // An endpoint that is down.
    let closed = listener().await.local_addr().unwrap();
    let r = ToolRegistry::new();
    search::register(
        &r,
        &SearchConfig {
            url: format!("http://{closed}"),
            ..SearchConfig::default()
        },
    )
    .unwrap();
    let e = call(&r, "web_search", json!({"query": "x"}))
        .await
        .unwrap_err()
        .to_failure();
    assert_eq!(e.kind, "execution_error");
}

// ------------------------------------------------------------------- SQL

/// A database seeded with demo.sql, dropped afterwards.
struct DemoDb {
    url: String,
    client: tokio_postgres::Client,
}

impl DemoDb {
    /// Runs `f` with a fresh demo database, dropping it even if `f` fails.
    async fn with<Fut: Future<Output = ()>>(f: impl FnOnce(DemoDb) -> Fut) {
        PgDb::with(|url| async move {
            let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
            tokio::spawn(conn);
            let seed = std::fs::read_to_string(root().join("tests/fixtures/sql/demo.sql")).unwrap();
            client.batch_execute(&seed).await.unwrap();
            f(DemoDb { url, client }).await;
        })
        .await;
    }

    async fn count(&self, table: &str) -> i64 {
        self.client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    fn config(&self) -> SqlConfig {
        let table = |t: &str, description: &str| SourceConfig {
            table: Some(t.into()),
            description: description.into(),
            dimensions: ["company", "period", "account", "currency"]
                .map(String::from)
                .to_vec(),
            measures: vec!["amount".into()],
            ..SourceConfig::default()
        };
        let mut cfg = SqlConfig {
            database_url: self.url.clone(),
            row_limit: 50,
            ..SqlConfig::default()
        };
        cfg.sources
            .insert("fi_reporting".into(), table("fi_reporting", "FI actuals"));
        cfg.sources.insert(
            "bpc_reporting".into(),
            table("bpc_reporting", "BPC consolidation"),
        );
        cfg.sources.insert(
            "fi_totals".into(),
            SourceConfig {
                query: Some("SELECT company, period, sum(amount) AS amount FROM fi_reporting GROUP BY company, period;".into()),
                description: "FI totals per company and period".into(),
                dimensions: vec!["company".into(), "period".into()],
                measures: vec!["amount".into()],
                ..SourceConfig::default()
            },
        );
        cfg
    }

    fn registry(&self, cfg: &SqlConfig) -> Arc<ToolRegistry> {
        let r = Arc::new(ToolRegistry::with_builtins());
        sql::register(&r, cfg).unwrap();
        r
    }
}

fn rows(out: &Value) -> Vec<Value> {
    out["rows"].as_array().unwrap().clone()
}

#[tokio::test]
async fn sql_list_sources_describes_every_source() {
    DemoDb::with(|db| async move {
        let r = db.registry(&db.config());
        assert_eq!(r.expand(&["data".into()]), ["compare_sources", "list_sources", "query_source"]);
        let out = call(&r, "list_sources", json!({})).await.unwrap().output;
        let names: Vec<&str> = out["sources"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["bpc_reporting", "fi_reporting", "fi_totals"]);
        assert_eq!(
            out["sources"][1],
            json!({"name": "fi_reporting", "kind": "table", "description": "FI actuals", "dimensions": ["company", "period", "account", "currency"], "measures": ["amount"]})
        );
        assert_eq!(out["sources"][2]["kind"], "query");
        assert!(out["sources"][2].get("query").is_none(), "the SQL itself is not shown");
        assert_eq!(out["row_limit"], 50);
    })
    .await;
}

#[tokio::test]
async fn sql_query_filters_groups_and_aggregates() {
    DemoDb::with(|db| async move {
        let r = db.registry(&db.config());
        let out = call(
            &r,
            "query_source",
            json!({"source": "fi_reporting", "filters": {"company": 1001}, "group_by": ["period"],
                   "measures": [{"column": "amount", "agg": "sum"}, {"column": "amount", "agg": "count"}, {"column": "amount", "agg": "min"}]}),
        )
        .await
        .unwrap()
        .output;
        assert_eq!(out["columns"], json!(["period", "sum_amount", "count_amount", "min_amount"]));
        assert_eq!(
            rows(&out),
            [
                json!({"period": "2024-01", "sum_amount": 30800.0, "count_amount": 7, "min_amount": -60000.0}),
                json!({"period": "2024-02", "sum_amount": 68000.0, "count_amount": 2, "min_amount": -62000.0})
            ]
        );
        // A list filter, string values for an integer column, and ordering by a measure.
        let out = call(
            &r,
            "query_source",
            json!({"source": "bpc_reporting", "filters": {"company": ["1001", "1002"], "period": "2024-01", "account": "400000"},
                   "group_by": ["company"], "measures": [{"column": "amount", "agg": "sum"}], "order_by": [{"column": "sum_amount", "direction": "desc"}]}),
        )
        .await
        .unwrap()
        .output;
        assert_eq!(rows(&out), [json!({"company": 1001, "sum_amount": 125000.0}), json!({"company": 1002, "sum_amount": 95000.0})]);
        // Plain rows, cut at the limit.
        let out = call(&r, "query_source", json!({"source": "fi_reporting", "filters": {"company": 1001, "account": "600000"}, "limit": 1})).await.unwrap().output;
        assert_eq!(out["row_count"], 1);
        assert_eq!(out["truncated"], true);
        assert_eq!(out["columns"], json!(["company", "period", "account", "currency", "amount"]));
        assert_eq!(rows(&out)[0]["account"], "600000");
        assert!(out["note"].as_str().unwrap().contains("first 1 rows"));
        // A query source works like a table.
        let out = call(&r, "query_source", json!({"source": "fi_totals", "filters": {"company": "1002"}})).await.unwrap().output;
        assert_eq!(rows(&out), [json!({"company": 1002, "period": "2024-01", "amount": 39000.0}), json!({"company": 1002, "period": "2024-02", "amount": 82000.0})]);
    })
    .await;
}

#[tokio::test]
async fn sql_writes_are_rejected_and_injection_is_only_data() {
    DemoDb::with(|db| async move {
        // A source query that writes is refused when configured...
        for query in ["SELECT * FROM fi_reporting; DROP TABLE bpc_reporting", "DELETE FROM bpc_reporting RETURNING *"] {
            let mut cfg = db.config();
            cfg.sources.insert("bad".into(), SourceConfig { query: Some(query.into()), measures: vec!["amount".into()], ..SourceConfig::default() });
            let e = sql::register(&ToolRegistry::new(), &cfg).unwrap_err();
            assert!(e.to_string().contains("tools.sql.sources.bad"), "{e}");
        }
        // ...and one that hides a write fails at run time: a data-modifying
        // CTE cannot be a subquery, and a function that writes meets the
        // read-only transaction.
        db.client
            .batch_execute("CREATE FUNCTION purge_bpc() RETURNS integer LANGUAGE plpgsql AS $$ BEGIN DELETE FROM bpc_reporting; RETURN 1; END $$")
            .await
            .unwrap();
        let mut cfg = db.config();
        for (name, query) in [
            ("cte", "WITH gone AS (DELETE FROM bpc_reporting RETURNING *) SELECT * FROM gone"),
            ("purge", "SELECT company, amount, purge_bpc() AS purged FROM fi_reporting"),
        ] {
            let source = SourceConfig { query: Some(query.into()), dimensions: vec!["company".into()], measures: vec!["amount".into()], ..SourceConfig::default() };
            cfg.sources.insert(name.into(), source);
        }
        let r = db.registry(&cfg);
        let e = call(&r, "query_source", json!({"source": "cte"})).await.unwrap_err().to_failure();
        assert_eq!(e.kind, "execution_error");
        let e = call(&r, "query_source", json!({"source": "purge"})).await.unwrap_err().to_failure();
        assert_eq!(e.kind, "execution_error");
        assert!(e.message.contains("read-only"), "{}", e.message);
        // Injection in filter values is compared as data: no rows.
        for value in [json!("1001; DROP TABLE fi_reporting; --"), json!("1001' OR '1'='1"), json!(["1001'); DROP TABLE bpc_reporting; --"])] {
            let out = call(&r, "query_source", json!({"source": "fi_reporting", "filters": {"company": value}})).await.unwrap().output;
            assert_eq!(out["row_count"], 0, "{value}");
        }
        // Injection in names is refused with the valid columns.
        let e = call(&r, "query_source", json!({"source": "fi_reporting", "group_by": ["company\"; DROP TABLE fi_reporting; --"]}))
            .await
            .unwrap_err()
            .to_failure();
        assert_eq!(e.kind, "validation_error");
        assert_eq!(e.details["dimensions"], json!(["company", "period", "account", "currency"]));
        assert_eq!(db.count("fi_reporting").await, 12);
        assert_eq!(db.count("bpc_reporting").await, 11);
    })
    .await;
}

#[tokio::test]
async fn sql_mistakes_name_the_valid_choices() {
    DemoDb::with(|db| async move {
        let r = db.registry(&db.config());
        let e = call(&r, "query_source", json!({"source": "fi_report"})).await.unwrap_err().to_failure();
        assert_eq!(e.kind, "not_found");
        assert_eq!(e.details["available"], json!(["bpc_reporting", "fi_reporting", "fi_totals"]));
        assert_eq!(e.details["did_you_mean"], "fi_reporting");
        let e = call(&r, "compare_sources", json!({"left": "fi_reporting", "right": "bpc", "measure": "amount"})).await.unwrap_err().to_failure();
        assert_eq!(e.kind, "not_found");
        // `account` is not a dimension of fi_totals.
        let e = call(&r, "compare_sources", json!({"left": "fi_reporting", "right": "fi_totals", "on": ["account"], "measure": "amount"}))
            .await
            .unwrap_err()
            .to_failure();
        assert_eq!(e.kind, "validation_error");
        assert_eq!((e.details["source"].as_str(), e.details["dimensions"].clone()), (Some("fi_totals"), json!(["company", "period"])));
        let e = call(&r, "query_source", json!({"source": "fi_reporting", "measures": [{"column": "period", "agg": "sum"}]})).await.unwrap_err().to_failure();
        assert_eq!((e.kind.as_str(), e.details["measures"].clone()), ("validation_error", json!(["amount"])));
        let e = call(&r, "query_source", json!({"source": "fi_reporting", "measures": [{"column": "amount", "agg": "median"}]})).await.unwrap_err().to_failure();
        assert_eq!(e.kind, "validation_error", "the schema refuses unknown aggregations");
    })
    .await;
}

#[tokio::test]
async fn sql_compare_classifies_differences_as_computed_by_hand() {
    DemoDb::with(|db| async move {
        let r = db.registry(&db.config());
        let args = json!({"left": "fi_reporting", "right": "bpc_reporting", "on": ["period", "account"], "measure": "amount", "filters": {"company": 1001}});
        let out = call(&r, "compare_sources", args).await.unwrap().output;
        assert_eq!(
            out["summary"],
            json!({"keys": 9, "match": 4, "minor": 2, "major": 3, "only_in_left": 1, "only_in_right": 1,
                   "left_total": 98800.0, "right_total": 102150.0, "difference_total": 3350.0, "max_abs_difference": 2500.0})
        );
        let classes: Vec<(String, String)> = rows(&out)
            .iter()
            .map(|r| (format!("{}/{}", r["key"]["period"].as_str().unwrap(), r["key"]["account"].as_str().unwrap()), r["class"].as_str().unwrap().to_owned()))
            .collect();
        let expected = [
            ("2024-01/400000", "match"),
            ("2024-01/410000", "major"),
            ("2024-01/500000", "match"),
            ("2024-01/600000", "minor"),
            ("2024-01/610000", "match"),
            ("2024-01/700000", "major"),
            ("2024-01/800000", "major"),
            ("2024-02/400000", "minor"),
            ("2024-02/500000", "match"),
        ];
        assert_eq!(classes, expected.map(|(k, c)| (k.to_owned(), c.to_owned())));
        let personnel = &rows(&out)[3];
        assert_eq!((personnel["left"].clone(), personnel["right"].clone()), (json!(-25000.0), json!(-25400.0)));
        assert_eq!((personnel["difference"].clone(), personnel["difference_pct"].clone()), (json!(-400.0), json!(-1.6)));
        let only_bpc = &rows(&out)[1];
        assert_eq!((only_bpc["left"].clone(), only_bpc["only_in"].clone()), (Value::Null, json!("bpc_reporting")));
        let top: Vec<&str> = out["top_differences"].as_array().unwrap().iter().map(|r| r["key"]["account"].as_str().unwrap()).collect();
        assert_eq!(top, ["410000", "800000", "400000", "700000", "600000"]);
        // Per period only: 2024-01 differs by 2700 on 30800 (8.77 %: major), 2024-02 by 650 on 68000 (0.96 %: minor).
        let out = call(&r, "compare_sources", json!({"left": "fi_reporting", "right": "bpc_reporting", "on": ["period"], "measure": "amount", "filters": {"company": 1001}}))
            .await
            .unwrap()
            .output;
        assert_eq!(rows(&out)[0]["class"], "major");
        assert_eq!(rows(&out)[0]["difference_pct"], 8.7662);
        assert_eq!(rows(&out)[1]["class"], "minor");
        // Looser thresholds change the classes, not the numbers.
        let mut cfg = db.config();
        cfg.thresholds = sql::Thresholds { minor_pct: 1.0, major_pct: 10.0 };
        let r = db.registry(&cfg);
        let out = call(&r, "compare_sources", json!({"left": "fi_reporting", "right": "bpc_reporting", "on": ["period"], "measure": "amount", "filters": {"company": 1001}}))
            .await
            .unwrap()
            .output;
        assert_eq!((rows(&out)[0]["class"].as_str(), rows(&out)[1]["class"].as_str()), (Some("minor"), Some("match")));
        // Company 1002 on every key: only January revenue differs.
        let out = call(&r, "compare_sources", json!({"left": "fi_reporting", "right": "bpc_reporting", "on": ["period", "account"], "measure": "amount", "filters": {"company": [1002]}}))
            .await
            .unwrap()
            .output;
        assert_eq!((out["summary"]["match"].as_u64(), out["summary"]["major"].as_u64()), (Some(2), Some(1)));
        assert_eq!(out["top_differences"][0]["difference_pct"], 18.75);
    })
    .await;
}

#[tokio::test]
async fn sql_slow_and_unreachable_databases_fail_as_data() {
    DemoDb::with(|db| async move {
        let mut cfg = db.config();
        cfg.statement_timeout = Dur(Duration::from_millis(200));
        cfg.sources.insert(
            "slow".into(),
            SourceConfig {
                query: Some("SELECT company, amount FROM fi_reporting CROSS JOIN (SELECT pg_sleep(5)) AS pause".into()),
                dimensions: vec!["company".into()],
                measures: vec!["amount".into()],
                ..SourceConfig::default()
            },
        );
        let r = db.registry(&cfg);
        let started = Instant::now();
        let e = call(&r, "query_source", json!({"source": "slow"})).await.unwrap_err().to_failure();
        assert_eq!(e.kind, "timeout");
        assert!(started.elapsed() < Duration::from_secs(4));
        // The pool's connection is still usable afterwards.
        assert!(call(&r, "query_source", json!({"source": "fi_totals"})).await.is_ok());
    })
    .await;
    let closed = listener().await.local_addr().unwrap();
    let cfg = SqlConfig {
        database_url: format!("postgres://postgres@{closed}/nope"),
        ..SqlConfig::default()
    };
    let r = ToolRegistry::new();
    sql::register(&r, &cfg).unwrap();
    let e = call(&r, "query_source", json!({"source": "x"}))
        .await
        .unwrap_err()
        .to_failure();
    assert_eq!(e.kind, "not_found", "no sources configured");
    let mut cfg = cfg;
    cfg.sources.insert(
        "x".into(),
        SourceConfig {
            table: Some("x".into()),
            measures: vec!["v".into()],
            ..SourceConfig::default()
        },
    );
    let r = ToolRegistry::new();
    sql::register(&r, &cfg).unwrap();
    let e = call(&r, "query_source", json!({"source": "x"}))
        .await
        .unwrap_err()
        .to_failure();
    assert_eq!(e.kind, "execution_error");
    assert_eq!(
        e.message, "the database is unavailable; try again later",
        "no connection details leak"
    );
}

// ------------------------------------------------------------ analyst.yaml

#[test]
fn the_analyst_graph_validates_once_the_data_partition_is_declared() {
    let reg = crate::support::registries();
    sql::declare(&reg.tools);
    let cat = reg.load_files(
        &[root().join("graphs/analyst.yaml")],
        &root().join("prompts"),
    );
    assert!(cat.diagnostics.is_empty(), "{:#?}", cat.diagnostics);
    assert!(cat.get("analyst").is_some());
}

#[tokio::test]
async fn the_analyst_recovers_from_a_wrong_source_name_and_answers() {
    DemoDb::with(|db| async move {
        let reg = crate::support::registries();
        sql::register(&reg.tools, &db.config()).unwrap();
        let cat = reg.load_files(&[root().join("graphs/analyst.yaml")], &root().join("prompts"));
        assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
        let graph = Arc::clone(cat.get("analyst").unwrap());
        let answer = "Company 1001: 4 keys match, 2 differ slightly and 3 strongly; BPC is 3350.00 EUR higher overall.";
        let model = Arc::new(ScriptedModel::new([
            Turn::tool("query_source", json!({"source": "fi_report", "filters": {"company": 1001}})),
            Turn::tool(
                "compare_sources",
                json!({"left": "fi_reporting", "right": "bpc_reporting", "on": ["period", "account"], "measure": "amount", "filters": {"company": 1001}}),
            ),
            Turn::text(answer),
        ]));
        let services = Arc::new(Services::new(Models::single(model.clone()), Arc::clone(&reg.tools)));
        let (tx, mut rx) = mpsc::channel(256);
        let collector = tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(e) = rx.recv().await {
                all.push(e);
            }
            all
        });
        let query = "compare amount between fi_reporting and bpc_reporting for company 1001";
        let input = json!({"messages": [{"id": "u1", "role": "user", "content": query}], "query": query});
        let out = runtime::run(Arc::clone(&graph), services, input, RunOptions { events: Some(tx), ..Default::default() }).await.unwrap();
        let events = collector.await.unwrap();

        // The wrong name failed as data, listing the sources; then the right call succeeded.
        let error_at = events
            .iter()
            .position(|e| matches!(&e.event, EventKind::ToolError(f)
                if f.tool == "query_source" && f.error.kind == "not_found" && f.error.details["available"] == json!(["bpc_reporting", "fi_reporting", "fi_totals"])))
            .expect("a not_found tool error listing the sources");
        let result_at = events
            .iter()
            .position(|e| matches!(&e.event, EventKind::ToolResult(r) if r.tool == "compare_sources" && r.output["summary"]["major"] == 3))
            .expect("a compare_sources result");
        assert!(error_at < result_at, "the error came first, then the corrected call");

        // The model saw the error payload before its corrected call.
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        let offered: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(offered, ["compare_sources", "list_sources", "query_source"], "only the data partition");
        let fed_back = requests[1].messages.iter().rev().find_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(serde_json::from_str::<Value>(content).unwrap()),
            _ => None,
        });
        let fed_back = fed_back.expect("a tool message");
        assert_eq!((fed_back["error"].as_bool(), fed_back["type"].as_str()), (Some(true), Some("not_found")));
        assert_eq!(fed_back["details"]["did_you_mean"], "fi_reporting");

        let state = out.state.to_json();
        assert_eq!(state["answer"], answer);
        let trace = state["tool_results"].as_array().unwrap();
        assert_eq!(trace.len(), 2);
        assert_eq!(trace[0]["error"]["type"], "not_found");
        assert_eq!(trace[1]["output"]["summary"]["difference_total"], 3350.0);
        assert!(matches!(events.last().unwrap().event, EventKind::RunFinished { .. }));
        // Re-executed with no database and no model: the offered tools and
        // every result come from the recording.
        let offline = Services::new(
            Models::single(Arc::new(ScriptedModel::new([]))),
            Arc::new(stategraph::internals::tools::ToolRegistry::with_builtins()),
        );
        let recorded: Vec<_> = events.iter().map(|e| (**e).clone()).collect();
        let r = stategraph::internals::replay::reexecute(graph, offline, &recorded).await.unwrap();
        assert!(r.divergence.is_none(), "{}", r.report());
    })
    .await;
}
