//! `web_search` (partition `web`): web search through a SearXNG-compatible
//! JSON endpoint the operator runs.
//!
//! The endpoint is configuration, never model input: the model only gives
//! the query. It asks `GET {url}/search?q=…&format=json` and keeps, of each
//! result, what a model needs to decide what to read next — title, URL and
//! a short snippet — at most `max_results` of them. Search results change
//! slowly and searches cost, so results are cached for an hour by default
//! (the research document's search cache; `[tools.policy.web_search]`
//! `cache_ttl` changes it). Failures (unreachable endpoint, HTTP error, a body that is not
//! the expected JSON) are `execution_error`s the model can report or work
//! around.
//!
//! ```toml
//! [tools.search]
//! url = "http://127.0.0.1:8888"
//! max_results = 5
//! timeout = "10s"
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{PARTITION, SetupError, client, read_limited, request_error};
use super::{Tool, ToolError, ToolPolicy, ToolRegistry, ToolSpec};
use crate::units::Dur;

/// How long results are cached by default: an hour (search results change
/// slowly; the research document caches them this long).
pub(crate) const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(3600);

/// Largest search response read.
const MAX_RESPONSE_BYTES: usize = 2 * 1024 * 1024;

/// Characters of a snippet kept.
const MAX_SNIPPET_CHARS: usize = 500;

/// `[tools.search]`: the search endpoint.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// Base URL of a SearXNG-compatible instance (`/search` is appended).
    pub url: String,
    /// Results returned at most.
    pub max_results: usize,
    /// Time limit of one search.
    pub timeout: Dur,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8888".into(),
            max_results: 5,
            timeout: Dur(Duration::from_secs(10)),
        }
    }
}

/// Registers `web_search` (partition `web`).
///
/// # Errors
/// An invalid URL, a client that cannot be built, or a name already taken
/// in the registry.
pub fn register(registry: &ToolRegistry, cfg: &SearchConfig) -> Result<(), SetupError> {
    registry.register(Arc::new(WebSearch::new(cfg)?))?;
    Ok(())
}

/// Searches the web through the configured endpoint.
#[derive(Debug)]
pub(crate) struct WebSearch {
    spec: ToolSpec,
    endpoint: Url,
    client: reqwest::Client,
    max_results: usize,
    timeout: Duration,
}

impl WebSearch {
    /// A search tool for `cfg`.
    ///
    /// # Errors
    /// The URL is not an http(s) URL, or the client cannot be built.
    pub(crate) fn new(cfg: &SearchConfig) -> Result<Self, SetupError> {
        let bad = |message: String| SetupError::Url {
            url: cfg.url.clone(),
            message,
        };
        let mut endpoint = Url::parse(&cfg.url).map_err(|e| bad(e.to_string()))?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(bad("use an http or https URL".into()));
        }
        endpoint
            .path_segments_mut()
            .map_err(|()| bad("the URL cannot have a path".into()))?
            .pop_if_empty()
            .push("search");
        let max_results = cfg.max_results.clamp(1, 50);
        let timeout = cfg.timeout.0;
        Ok(Self {
            spec: ToolSpec {
                name: "web_search".into(),
                description: format!(
                    "Search the web. Returns {{query, results: [{{title, url, snippet}}]}}, at most {max_results} results."
                ),
                input_schema: Arc::new(json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "minLength": 1, "maxLength": 500, "description": "What to search for."},
                        "max_results": {"type": "integer", "minimum": 1, "description": format!("Fewer results (at most {max_results}).")}
                    },
                    "required": ["query"],
                    "additionalProperties": false
                })),
                output_schema: Some(Arc::new(output_schema())),
                partition: PARTITION.into(),
                policy: ToolPolicy {
                    timeout: timeout + Duration::from_secs(5),
                    cache_ttl: Some(DEFAULT_CACHE_TTL),
                    ..ToolPolicy::default()
                },
            },
            endpoint,
            client: client(timeout)?,
            max_results,
            timeout,
        })
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Value, ToolError> {
        let mut url = self.endpoint.clone();
        url.query_pairs_mut()
            .append_pair("q", query)
            .append_pair("format", "json");
        let mut resp = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| request_error(&e, &url, self.timeout))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(ToolError::Execution(format!(
                "the search service answered HTTP {}; try again later",
                status.as_u16()
            )));
        }
        let (body, cut) = read_limited(&mut resp, MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| request_error(&e, &url, self.timeout))?;
        if cut {
            return Err(ToolError::Execution(
                "the search service sent an oversized response".into(),
            ));
        }
        let parsed: Value = serde_json::from_slice(&body).map_err(|_| {
            ToolError::Execution("the search service did not answer with JSON".into())
        })?;
        let Some(items) = parsed.get("results").and_then(Value::as_array) else {
            return Err(ToolError::Execution(
                "the search service's answer has no `results` list".into(),
            ));
        };
        let results: Vec<Value> = items.iter().filter_map(result).take(limit).collect();
        Ok(json!({ "query": query, "results": results }))
    }
}

/// What `web_search` returns: `{query, results: [{title, url, snippet}]}`
/// (a result's text is `snippet`, not `content`).
pub(crate) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "The query as searched."},
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "description": "The page's title (its URL when it has none)."},
                        "url": {"type": "string", "description": "The page's address."},
                        "snippet": {"type": "string", "description": "The search engine's excerpt of the page, whitespace collapsed, at most 500 characters (and `…` when cut)."}
                    },
                    "required": ["title", "url", "snippet"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["query", "results"],
        "additionalProperties": false
    })
}

/// `{title, url, snippet}` of one SearXNG result; `None` without a URL.
fn result(item: &Value) -> Option<Value> {
    let url = item
        .get("url")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())?;
    let title = item.get("title").and_then(Value::as_str).unwrap_or(url);
    let snippet = item
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let snippet = match snippet.char_indices().nth(MAX_SNIPPET_CHARS) {
        Some((i, _)) => format!("{}…", &snippet[..i]),
        None => snippet,
    };
    Some(json!({ "title": title.trim(), "url": url, "snippet": snippet }))
}

impl Tool for WebSearch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let query = args["query"].as_str().unwrap_or_default().trim().to_owned();
            if query.is_empty() {
                return Err(ToolError::Validation {
                    message: "the query is empty".into(),
                    details: json!({ "query": query }),
                });
            }
            let limit = args["max_results"]
                .as_u64()
                .map_or(self.max_results, |n| (n as usize).min(self.max_results));
            match tokio::time::timeout(self.timeout, self.search(&query, limit)).await {
                Ok(r) => r,
                Err(_) => Err(ToolError::Timeout(self.timeout)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_gets_search_appended_once() {
        for base in ["http://h:1", "http://h:1/", "http://h:1/searx/"] {
            let t = WebSearch::new(&SearchConfig {
                url: base.into(),
                ..SearchConfig::default()
            })
            .unwrap();
            assert!(
                t.endpoint.as_str().ends_with("/search")
                    && !t.endpoint.as_str().contains("//search"),
                "{}",
                t.endpoint
            );
        }
        assert!(
            WebSearch::new(&SearchConfig {
                url: "ftp://h".into(),
                ..SearchConfig::default()
            })
            .is_err()
        );
        assert!(
            WebSearch::new(&SearchConfig {
                url: "not a url".into(),
                ..SearchConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn results_keep_title_url_and_a_short_snippet() {
        let long = "word ".repeat(400);
        let r = result(&json!({"title": " T ", "url": "http://x", "content": long})).unwrap();
        assert_eq!(r["title"], "T");
        assert!(r["snippet"].as_str().unwrap().chars().count() <= MAX_SNIPPET_CHARS + 1);
        assert!(result(&json!({"title": "no url"})).is_none());
    }
}
