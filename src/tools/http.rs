//! `http_fetch` (partition `web`): a model reads a web page, but only from
//! hosts the operator allowed.
//!
//! A model decides which URL to fetch, so the URL is untrusted input: the
//! host must match the configured allow-list (`docs.example.com` exactly, or
//! `*.example.com` for any subdomain), and so must every redirect, which is
//! followed by hand for that reason (a redirect is the classic way out of an
//! allow-list). The body is read only up to a size limit — the connection is
//! dropped past it — and the whole fetch, redirects included, has a time
//! limit. HTML is reduced to its title and visible text (the `html` submodule); plain
//! text and JSON are passed through. A refused URL is a `validation_error`
//! whose details list the allowed hosts, so the model can pick another.
//!
//! ```toml
//! [tools.http]
//! allow = ["docs.example.com", "*.wikipedia.org"]
//! max_bytes = "1MiB"
//! timeout = "15s"
//! ```

mod html;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, LOCATION};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RegistryError, Tool, ToolError, ToolPolicy, ToolRegistry, ToolSpec};
use crate::units::{Bytes, Dur};

/// The partition of the web tools (`http_fetch`, `web_search`).
pub(crate) const PARTITION: &str = "web";

/// How long fetched pages are cached by default: a day.
pub(crate) const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(24 * 3600);

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;

/// Characters of extracted text given to the model at most.
const MAX_TEXT_CHARS: usize = 20_000;

/// `[tools.http]`: what `http_fetch` may fetch.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpFetchConfig {
    /// Allowed hosts: exact names (`docs.example.com`, `127.0.0.1`) or
    /// `*.example.com` for any subdomain of `example.com` (not the domain
    /// itself). Empty allows nothing.
    pub allow: Vec<String>,
    /// Body bytes read at most; the rest is not downloaded.
    pub max_bytes: Bytes,
    /// Time limit of one fetch, redirects included.
    pub timeout: Dur,
}

impl Default for HttpFetchConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_bytes: Bytes(1024 * 1024),
            timeout: Dur(Duration::from_secs(15)),
        }
    }
}

/// Errors setting up the web tools.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// An allow-list entry is not a host name or `*.domain` pattern.
    #[error(
        "invalid allow-list entry `{0}`: write a host name such as `docs.example.com` or a pattern such as `*.example.com`"
    )]
    Pattern(String),
    /// A configured URL does not parse.
    #[error("invalid URL `{url}`: {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// The registry refused the tool.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Registers `http_fetch` (partition `web`).
///
/// # Errors
/// An invalid allow-list entry, a client that cannot be built, or a name
/// already taken in the registry.
pub fn register(registry: &ToolRegistry, cfg: &HttpFetchConfig) -> Result<(), SetupError> {
    registry.register(Arc::new(HttpFetch::new(cfg)?))?;
    Ok(())
}

/// The allowed hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AllowList {
    exact: Vec<String>,
    /// Domains whose subdomains are allowed (from `*.domain`).
    suffixes: Vec<String>,
}

impl AllowList {
    /// Parses entries (`host` or `*.domain`; case-insensitive).
    ///
    /// # Errors
    /// An entry that is neither.
    pub(crate) fn new(entries: &[String]) -> Result<Self, SetupError> {
        let mut list = Self {
            exact: Vec::new(),
            suffixes: Vec::new(),
        };
        for e in entries {
            let norm = e.trim().trim_end_matches('.').to_ascii_lowercase();
            let (host, wildcard) = match norm.strip_prefix("*.") {
                Some(rest) => (rest, true),
                None => (norm.as_str(), false),
            };
            // A name or IPv4 address, or a bracketed IPv6 address (as URLs
            // spell hosts); no scheme, port or path.
            let ipv6 = host.len() > 2
                && host.starts_with('[')
                && host.ends_with(']')
                && host[1..host.len() - 1]
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
            let name = host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            let valid = !host.is_empty() && !host.starts_with('.') && (name || (ipv6 && !wildcard));
            if !valid {
                return Err(SetupError::Pattern(e.clone()));
            }
            if wildcard {
                list.suffixes.push(host.to_owned())
            } else {
                list.exact.push(host.to_owned())
            }
        }
        Ok(list)
    }

    /// Whether `host` may be fetched.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.exact.contains(&host)
            || self.suffixes.iter().any(|d| {
                host.len() > d.len() + 1
                    && host.ends_with(d.as_str())
                    && host.as_bytes()[host.len() - d.len() - 1] == b'.'
            })
    }

    /// The entries, as configured (for error details).
    pub(crate) fn entries(&self) -> Vec<String> {
        self.exact
            .iter()
            .cloned()
            .chain(self.suffixes.iter().map(|d| format!("*.{d}")))
            .collect()
    }
}

/// Fetches a URL from an allowed host and returns its text.
#[derive(Debug)]
pub(crate) struct HttpFetch {
    spec: ToolSpec,
    allow: AllowList,
    client: reqwest::Client,
    max_bytes: usize,
    timeout: Duration,
}

impl HttpFetch {
    /// A fetcher for `cfg`.
    ///
    /// # Errors
    /// An invalid allow-list entry or a client that cannot be built.
    pub(crate) fn new(cfg: &HttpFetchConfig) -> Result<Self, SetupError> {
        let allow = AllowList::new(&cfg.allow)?;
        let timeout = cfg.timeout.0;
        let hosts = allow.entries().join(", ");
        Ok(Self {
            spec: ToolSpec {
                name: "http_fetch".into(),
                description: format!(
                    "Fetch a web page (GET) and return its title and readable text as {{url, status, title, text, truncated}}. \
                     Only these hosts are allowed: {}.",
                    if hosts.is_empty() { "none" } else { &hosts }
                ),
                input_schema: Arc::new(json!({
                    "type": "object",
                    "properties": {"url": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "An http or https URL on an allowed host."}},
                    "required": ["url"],
                    "additionalProperties": false
                })),
                output_schema: Some(Arc::new(output_schema())),
                partition: PARTITION.into(),
                policy: ToolPolicy {
                    timeout: timeout + Duration::from_secs(5),
                    // A page read once is reused for a day (the research
                    // document's crawl cache); `[tools.policy.http_fetch]`
                    // changes it.
                    cache_ttl: Some(DEFAULT_CACHE_TTL),
                    ..ToolPolicy::default()
                },
            },
            allow,
            client: client(timeout)?,
            max_bytes: cfg.max_bytes.0.max(1),
            timeout,
        })
    }

    /// Refuses URLs that are not http(s) on an allowed host.
    fn check(&self, url: &Url, redirected_from: Option<&Url>) -> Result<(), ToolError> {
        let host = url.host_str().unwrap_or_default();
        let scheme_ok = matches!(url.scheme(), "http" | "https");
        if scheme_ok && !host.is_empty() && self.allow.allows(host) {
            return Ok(());
        }
        let mut details =
            json!({ "url": url.as_str(), "host": host, "allowed_hosts": self.allow.entries() });
        let message = match redirected_from {
            Some(from) => {
                details["redirected_from"] = json!(from.as_str());
                format!("`{from}` redirects to `{url}`, whose host is not allowed")
            }
            None if !scheme_ok => format!(
                "only http and https URLs can be fetched, not `{}`",
                url.scheme()
            ),
            None => format!("host `{host}` is not allowed; use one of the allowed hosts"),
        };
        Err(ToolError::Validation { message, details })
    }

    async fn fetch(&self, start: Url) -> Result<Value, ToolError> {
        self.check(&start, None)?;
        let mut url = start;
        for hop in 0..=MAX_REDIRECTS {
            let mut resp = self
                .client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| request_error(&e, &url, self.timeout))?;
            let status = resp.status();
            if status.is_redirection()
                && let Some(location) = resp.headers().get(LOCATION).and_then(|l| l.to_str().ok())
            {
                if hop == MAX_REDIRECTS {
                    return Err(ToolError::Execution(format!(
                        "too many redirects (more than {MAX_REDIRECTS}) from `{url}`"
                    )));
                }
                let next = url.join(location).map_err(|e| {
                    ToolError::Execution(format!("`{url}` redirects to an invalid location: {e}"))
                })?;
                self.check(&next, Some(&url))?;
                url = next;
                continue;
            }
            let content_type = resp
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            let (body, cut) = read_limited(&mut resp, self.max_bytes)
                .await
                .map_err(|e| request_error(&e, &url, self.timeout))?;
            return page(&url, status.as_u16(), &content_type, &body, cut);
        }
        Err(ToolError::Execution(format!(
            "too many redirects (more than {MAX_REDIRECTS})"
        )))
    }
}

/// What `http_fetch` returns: `{url, status, title, text, truncated}`.
pub(crate) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The URL read."},
            "status": {"type": "integer", "description": "The HTTP status."},
            "title": {"type": ["string", "null"], "description": "The page's title (null when it has none)."},
            "text": {"type": "string", "description": "The page's readable text."},
            "truncated": {"type": "boolean", "description": "Whether the text was cut to the size limit."}
        },
        "required": ["url", "status", "title", "text", "truncated"],
        "additionalProperties": false
    })
}

impl Tool for HttpFetch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let raw = args["url"].as_str().unwrap_or_default().trim();
            let url = Url::parse(raw).map_err(|e| ToolError::Validation {
                message: format!("`{raw}` is not a valid URL: {e}"),
                details: json!({ "url": raw, "allowed_hosts": self.allow.entries() }),
            })?;
            match tokio::time::timeout(self.timeout, self.fetch(url)).await {
                Ok(r) => r,
                Err(_) => Err(ToolError::Timeout(self.timeout)),
            }
        })
    }
}

/// The client shared by the web tools: no automatic redirects (each is
/// checked), no proxies from the environment, a per-request time limit.
pub(crate) fn client(timeout: Duration) -> Result<reqwest::Client, SetupError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .user_agent(concat!("stategraph/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| SetupError::Client(e.to_string()))
}

/// Reads at most `max` body bytes; returns them and whether more were left
/// unread (the response is dropped, closing the connection).
pub(crate) async fn read_limited(
    resp: &mut reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A transport failure, as the model sees it (no internals).
pub(crate) fn request_error(e: &reqwest::Error, url: &Url, timeout: Duration) -> ToolError {
    if e.is_timeout() {
        return ToolError::Timeout(timeout);
    }
    tracing::debug!(error = %e, %url, "http request failed");
    let host = url.host_str().unwrap_or_default();
    if e.is_connect() {
        ToolError::Execution(format!("could not connect to `{host}`"))
    } else {
        ToolError::Execution(format!(
            "the request to `{host}` failed while reading the response"
        ))
    }
}

/// The result for a fetched body.
fn page(
    url: &Url,
    status: u16,
    content_type: &str,
    body: &[u8],
    cut: bool,
) -> Result<Value, ToolError> {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    let text = String::from_utf8_lossy(body);
    let is_html = mime == "text/html"
        || mime == "application/xhtml+xml"
        || (mime.is_empty()
            && text.trim_start().get(..15).is_some_and(|s| {
                s.to_ascii_lowercase().starts_with("<!doctype html")
                    || s.to_ascii_lowercase().starts_with("<html")
            }));
    let is_text = mime.is_empty()
        || mime.starts_with("text/")
        || mime == "application/json"
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || mime == "application/xml"
        || mime == "application/javascript";
    let (title, mut text) = if is_html {
        let e = html::extract(&text);
        (e.title, e.text)
    } else if is_text {
        (None, text.into_owned())
    } else {
        return Err(ToolError::Execution(format!(
            "`{url}` is `{mime}`, not text; only HTML, text and JSON can be read"
        )));
    };
    let mut truncated = cut;
    if let Some((i, _)) = text.char_indices().nth(MAX_TEXT_CHARS) {
        text.truncate(i);
        truncated = true;
    }
    Ok(
        json!({ "url": url.as_str(), "status": status, "title": title, "text": text, "truncated": truncated }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::new(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn hosts_match_exactly_or_as_subdomains_of_a_pattern() {
        let l = list(&["Docs.Example.com", "*.wiki.org", "127.0.0.1"]);
        assert!(l.allows("docs.example.com") && l.allows("DOCS.example.com."));
        assert!(
            !l.allows("example.com")
                && !l.allows("evil-docs.example.com")
                && !l.allows("docs.example.com.evil.net")
        );
        assert!(l.allows("en.wiki.org") && l.allows("a.b.wiki.org"));
        assert!(
            !l.allows("wiki.org"),
            "a pattern covers subdomains, not the domain itself"
        );
        assert!(!l.allows("notwiki.org") && !l.allows("wiki.org.evil.net"));
        assert!(l.allows("127.0.0.1") && !l.allows("localhost"));
        assert_eq!(l.entries(), ["docs.example.com", "127.0.0.1", "*.wiki.org"]);
        assert!(AllowList::new(&["https://x.com/path".into()]).is_err());
        assert!(AllowList::new(&["*.".into()]).is_err());
        assert!(
            AllowList::new(&["127.0.0.1:8080".into()]).is_err(),
            "ports are not part of a host"
        );
        assert!(list(&["[::1]"]).allows("[::1]"));
    }

    #[test]
    fn text_and_json_pass_through_and_binary_is_refused() {
        let url = Url::parse("http://h/x").unwrap();
        let v = page(
            &url,
            200,
            "application/json; charset=utf-8",
            br#"{"a": 1}"#,
            false,
        )
        .unwrap();
        assert_eq!(v["text"], r#"{"a": 1}"#);
        assert_eq!(v["title"], Value::Null);
        let v = page(
            &url,
            200,
            "",
            b"<!DOCTYPE html><title>T</title><p>x</p>",
            true,
        )
        .unwrap();
        assert_eq!(
            (
                v["title"].as_str(),
                v["text"].as_str(),
                v["truncated"].as_bool()
            ),
            (Some("T"), Some("x"), Some(true))
        );
        assert!(page(&url, 200, "image/png", b"\x89PNG", false).is_err());
    }
}
