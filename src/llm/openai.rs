//! The production model client: any OpenAI-compatible chat-completions
//! endpoint (OpenAI, Azure's OpenAI-compatible path, Ollama, vLLM,
//! llama.cpp server), streamed.
//!
//! It is built on async-openai's `byot` API with lenient types of our own
//! (module `wire`), because compatible servers break async-openai's closed types
//! (numeric error codes, unknown finish reasons, error events mid-stream).
//! Reliability lives in two places:
//!
//! * before a response arrives, module `retry` (a tower layer under the client)
//!   retries 408/409/429/5xx and connection errors with backoff and jitter,
//!   honouring `retry-after(-ms)`;
//! * after HTTP 200, an error event, a malformed chunk or a broken body ends
//!   the call with [`LlmError::Stream`] / [`LlmError::Connect`] — unless no
//!   answer chunk has been streamed yet, in which case the call is quietly
//!   made again.
//!
//! Both draw on one attempt budget per call, and on its deadlines: the
//! first-token timeout (from the start of each attempt to the first text,
//! reasoning or tool-call chunk, retry waits included) and the total timeout.
//! A call never panics; every failure arrives as an error in the stream.

mod call;
mod conns;
mod error_body;
mod retry;
mod stream;
mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_openai::config::{Config as _, OpenAIConfig};
use eventsource_stream::Event;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value};

use super::profile::{Api, ModelRules, Price, Structured};
use super::spans::GenAiSpan;
use super::{ChatModel, ChatRequest, ChunkStream, LlmChunk, LlmError};
use stream::{ChunkParser, WireChunk};
use wire::WireRequest;

use call::{Call, error_chain};
pub(crate) use call::{EventParser, Prepared, malformed};
pub(crate) use error_body::ErrorInfo;
pub(crate) use stream::StreamFault;

pub(crate) use wire::RESERVED_FIELDS;

/// How long a call may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing a TCP/TLS connection (default 10 s).
    pub connect: Duration,
    /// From the start of an attempt to the first text, reasoning or
    /// tool-call chunk, retry waits included (default 60 s).
    pub first_token: Duration,
    /// The whole call, retries included (default 10 min, as OpenAI's SDK).
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_token: Duration::from_secs(60),
            total: Duration::from_secs(600),
        }
    }
}

/// When and how often a call is made again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per call, the first included (default 3; 1 = no retry).
    pub attempts: u32,
    /// Wait before the first retry (default 500 ms); doubles each time,
    /// minus up to 25 % jitter.
    pub backoff: Duration,
    /// Upper bound on the computed wait (default 8 s).
    pub max_backoff: Duration,
    /// Longest `retry-after` honoured (default 60 s); a server asking for
    /// more is not retried, so the error (and any fallback) comes at once.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (from 1): exponential, capped at
    /// `max_backoff`, minus up to 25 % random jitter so that many clients
    /// failing together do not come back together.
    pub fn backoff(&self, retry: u32) -> Duration {
        let doubling = 2u32.saturating_pow(retry.saturating_sub(1));
        let base = self.backoff.saturating_mul(doubling).min(self.max_backoff);
        base.mul_f64(1.0 - 0.25 * fastrand::f64())
    }
}

/// Where an endpoint is and how calls to it behave.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EndpointSettings {
    /// Base URL including the version path, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; `None` for local servers that need none.
    pub api_key: Option<String>,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Retries.
    pub retry: RetryPolicy,
    /// The API it speaks.
    pub api: Api,
    /// Azure's `api-version` (with it, requests go to the deployment URL
    /// `{base}/openai/deployments/{model}/chat/completions`; without it, to
    /// Azure's v1 path `{base}/chat/completions`).
    pub api_version: Option<String>,
    /// HTTP/2 only (prior knowledge: h2c on `http://`): a connection
    /// carries many concurrent calls' streams. Without it `https://`
    /// endpoints still get h2 when the server picks it (ALPN).
    pub http2: bool,
    /// Calls in flight per HTTP/2 connection before another connection is
    /// opened ([`DEFAULT_H2_STREAMS_PER_CONNECTION`] when 0). Counted over
    /// HTTP/1.1 too, where it only spreads calls over more connection pools.
    pub http2_streams_per_connection: u32,
}

/// Calls per HTTP/2 connection by default. A connection the server ends
/// (GOAWAY, e.g. h2's `too_many_data_frames` guard, or a restart) loses
/// every call on it: at 10,000 slow streams this bounds the loss to a
/// tenth, for ten sockets. h2 serializes a connection's frames under one
/// lock, so several connections also spread the reading over cores. It is
/// above what most servers allow per connection (hyper 200, nginx 128,
/// Go 250): reqwest does not expose the server's
/// `SETTINGS_MAX_CONCURRENT_STREAMS`, and calls beyond it wait in the client
/// for a stream to end, so set the cap to the server's limit when lower.
pub const DEFAULT_H2_STREAMS_PER_CONNECTION: u32 = 1_000;

impl fmt::Debug for EndpointSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeouts", &self.timeouts)
            .field("retry", &self.retry)
            .field("api", &self.api)
            .field("api_version", &self.api_version)
            .field("http2", &self.http2)
            .field(
                "http2_streams_per_connection",
                &self.http2_streams_per_connection,
            )
            .finish()
    }
}

/// Why an endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The base URL does not parse or is not http(s).
    #[error("base URL `{url}` is not a valid http(s) URL: {reason}")]
    BaseUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The key cannot be sent in an HTTP header.
    #[error(
        "the API key contains characters that cannot be sent in an HTTP header (a stray newline?)"
    )]
    ApiKey,
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// Idle connections an endpoint keeps for the next calls. A load of many
/// concurrent streams would otherwise leave one idle connection (and its
/// buffers: tens of KB with TLS) per stream for reqwest's default 90 s;
/// this many still serve a chat's next call and a steady trickle of chats
/// without a new handshake.
const POOL_MAX_IDLE: usize = 64;

/// How long an idle connection is kept: well within the 30 s after a load
/// in which a server's memory should be back near its idle size, and
/// longer than the pause between one chat's model calls.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// HTTP/2 flow control: what one call may have received and not yet read.
/// A model streams a few KB a second, so this is seconds of tokens; a run
/// behind on reading (its store is slow) holds at most this much before
/// the model's side waits. At 100 ms round trip it still passes 160 KB/s.
/// Small on purpose: unread data is memory (16 KB × 10,000 streams is
/// 160 MB; the former 256 KB allowed 2.5 GB) and spends h2's budget for
/// small DATA frames (see [`h2_connection_window`]).
const H2_STREAM_WINDOW: u32 = 16 * 1024;

/// What all the calls on one HTTP/2 connection may have received and not
/// yet read: 4 × `streams` × [`H2_STREAM_WINDOW`] (62.5 MiB for 1,000
/// streams), at least hyper's 5 MB, at most h2's 2³¹ − 1.
///
/// It is sized for h2's guard against buffered small DATA frames (h2
/// 0.4.20 `proto/streams/counts.rs` `Counts::record_data_frame`): every
/// DATA frame received and not yet read by the application whose payload
/// `p` is under 256 bytes spends `256 − p` of a per-connection budget
/// (given back when the frame is read, `Streams::poll_data`); spent out,
/// the connection gets GOAWAY `ENHANCE_YOUR_CALM` "too_many_data_frames"
/// and every call on it dies. The budget is half the target connection
/// window (`DataFrameBudget::resolve` in `proto/connection.rs`; reqwest
/// and hyper leave it on auto). What is unread is at most `streams` ×
/// stream window, so with this window the budget is never spent while
/// frames carry at least 86 bytes: (256 − 86) / 86 ≤ 2. An OpenAI chunk
/// (`chat.completion.chunk` JSON with id, model and `created`) is over
/// 100 bytes, one SSE event per frame. Before, 256 KB per stream against a
/// 32 MB budget let ~200 streams backed up with 140-byte chunks kill the
/// one connection every call shared (the 10,000-stream run of Nov 28).
fn h2_connection_window(streams: usize) -> u32 {
    let window = (streams as u64)
        .saturating_mul(4 * u64::from(H2_STREAM_WINDOW))
        .clamp(5 * 1024 * 1024, (1 << 31) - 1);
    u32::try_from(window).unwrap_or(u32::MAX >> 1)
}

/// One OpenAI-compatible endpoint: a connection pool, credentials and
/// policies shared by every model served from it. Cheap to clone.
#[derive(Clone)]
pub struct OpenAiEndpoint {
    inner: Arc<EndpointInner>,
}

struct EndpointInner {
    http: conns::Connections,
    config: OpenAIConfig,
    base_url: String,
    timeouts: Timeouts,
    retry: RetryPolicy,
    api: Api,
    api_version: Option<String>,
    /// The key, for APIs that send it in a header of their own.
    key: String,
}

impl fmt::Debug for OpenAiEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEndpoint")
            .field("base_url", &self.inner.base_url)
            .finish_non_exhaustive()
    }
}

impl OpenAiEndpoint {
    /// Sets up an endpoint (no request is made).
    ///
    /// # Errors
    /// The base URL is invalid, the key cannot be a header value, or the
    /// HTTP client cannot be built.
    pub fn new(settings: EndpointSettings) -> Result<Self, EndpointError> {
        let base_url = settings.base_url.trim().trim_end_matches('/').to_owned();
        let bad_url = |reason: String| EndpointError::BaseUrl {
            url: settings.base_url.clone(),
            reason,
        };
        let url = reqwest::Url::parse(&base_url).map_err(|e| bad_url(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad_url(format!(
                "scheme `{}` is not http or https",
                url.scheme()
            )));
        }
        let key = settings.api_key.unwrap_or_default();
        // async-openai builds the Authorization header with `unwrap`; check first.
        if reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
            return Err(EndpointError::ApiKey);
        }
        let cap = match settings.http2_streams_per_connection {
            0 => DEFAULT_H2_STREAMS_PER_CONNECTION as usize,
            n => n as usize,
        };
        let (http2, connect) = (settings.http2, settings.timeouts.connect);
        let connection_window = h2_connection_window(cap);
        let builder = move || {
            let http = reqwest::Client::builder()
                .connect_timeout(connect)
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_max_idle_per_host(POOL_MAX_IDLE)
                .http2_initial_stream_window_size(H2_STREAM_WINDOW)
                .http2_initial_connection_window_size(connection_window);
            if http2 {
                http.http2_prior_knowledge().build()
            } else {
                http.build()
            }
        };
        let http = conns::Connections::new(cap, Box::new(builder))
            .map_err(|e| EndpointError::Http(error_chain(&e)))?;
        // Organisation and project stay empty: async-openai would otherwise
        // read them from the environment and `unwrap` them into headers.
        let config = OpenAIConfig::new()
            .with_api_base(base_url.clone())
            .with_api_key(key.clone())
            .with_org_id("")
            .with_project_id("");
        Ok(Self {
            inner: Arc::new(EndpointInner {
                http,
                config,
                base_url,
                timeouts: settings.timeouts,
                retry: settings.retry,
                api: settings.api,
                api_version: settings.api_version,
                key,
            }),
        })
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// The API the endpoint speaks.
    pub fn api(&self) -> Api {
        self.inner.api
    }

    /// The host requests go to (the `server.address` of spans).
    pub(crate) fn host(&self) -> &str {
        let rest = self
            .inner
            .base_url
            .split_once("://")
            .map_or(self.inner.base_url.as_str(), |(_, r)| r);
        rest.split(['/', ':']).next().unwrap_or(rest)
    }

    /// A model served by this endpoint.
    pub fn model(&self, name: impl Into<String>) -> OpenAiModel {
        let name = name.into();
        OpenAiModel {
            endpoint: self.clone(),
            rules: Arc::new(ModelRules::new("default", &name, None)),
            name: Arc::from(name),
            extra: None,
            max_tokens: None,
            price: None,
        }
    }

    /// Where a chat-completions call for `model` goes, with its headers.
    fn chat_target(&self, model: &str) -> (String, HeaderMap, Vec<(String, String)>) {
        let ep = &self.inner;
        match ep.api {
            Api::Azure => {
                let mut headers = HeaderMap::new();
                if let Ok(v) = HeaderValue::from_str(&ep.key) {
                    headers.insert("api-key", v);
                }
                match &ep.api_version {
                    Some(version) => (
                        format!(
                            "{}/openai/deployments/{model}/chat/completions",
                            ep.base_url
                        ),
                        headers,
                        vec![("api-version".to_owned(), version.clone())],
                    ),
                    None => (
                        format!("{}/chat/completions", ep.base_url),
                        headers,
                        Vec::new(),
                    ),
                }
            }
            Api::Openai | Api::Anthropic => (
                ep.config.url("/chat/completions"),
                ep.config.headers(),
                Vec::new(),
            ),
        }
    }

    /// The key, for clients that send it in a header of their own.
    pub(crate) fn key(&self) -> &str {
        &self.inner.key
    }

    /// Starts a call of `prepared` on this endpoint (the shared machinery
    /// of every HTTP model client: retries, deadlines, SSE parsing).
    pub(crate) fn call(
        &self,
        model: Arc<str>,
        prepared: Prepared,
        span: GenAiSpan,
        price: Option<Price>,
    ) -> ChunkStream {
        let mut call = Call::new(self.inner.clone(), model, prepared, span);
        call.price = price;
        futures::stream::unfold(call, |mut call| async move {
            call.next().await.map(|item| (item, call))
        })
        .boxed()
    }
}

/// OpenAI's chunks: `data: {chat.completion.chunk}` … `data: [DONE]`.
struct OpenAiEvents(ChunkParser);

impl EventParser for OpenAiEvents {
    fn push(&mut self, event: &Event, out: &mut Vec<LlmChunk>) -> Result<bool, StreamFault> {
        if event.data == "[DONE]" {
            return Ok(true);
        }
        if event.event == "keepalive" {
            return Ok(false);
        }
        let chunk = serde_json::from_str::<WireChunk>(&event.data).map_err(|e| StreamFault {
            message: malformed(&e, &event.data),
            retryable: true,
        })?;
        self.0.push(chunk, out)?;
        Ok(false)
    }

    fn finished(&self) -> bool {
        self.0.finished()
    }

    fn produced_output(&self) -> bool {
        self.0.produced_output()
    }

    fn response_model(&self) -> Option<&str> {
        self.0.response_model()
    }
}

/// A chat model on an OpenAI-compatible endpoint.
#[derive(Clone, Debug)]
pub struct OpenAiModel {
    endpoint: OpenAiEndpoint,
    name: Arc<str>,
    extra: Option<Arc<Map<String, Value>>>,
    max_tokens: Option<u32>,
    rules: Arc<ModelRules>,
    price: Option<Price>,
}

impl OpenAiModel {
    /// A model on a new endpoint of its own (see [`OpenAiEndpoint::model`]
    /// to share one endpoint between models).
    ///
    /// # Errors
    /// As [`OpenAiEndpoint::new`].
    pub fn new(settings: EndpointSettings, name: impl Into<String>) -> Result<Self, EndpointError> {
        Ok(OpenAiEndpoint::new(settings)?.model(name))
    }

    /// The endpoint serving this model.
    pub fn endpoint(&self) -> &OpenAiEndpoint {
        &self.endpoint
    }

    /// Sends `extra` as additional request-body fields on every call: what
    /// a server needs beyond the request (llama.cpp's `cache_prompt`, stop
    /// sequences for its chat template, `top_k`, a `seed`, …). They fill in
    /// what the request leaves unset: a request's own `temperature` or
    /// `max_tokens` wins, and the fields the client always writes
    /// (`model`, `messages`, `stream`, `stream_options`, `tools`,
    /// `response_format`) are never replaced — [`crate::llm::LlmConfig`]
    /// rejects them.
    pub fn with_extra(mut self, extra: Map<String, Value>) -> Self {
        self.extra = (!extra.is_empty()).then(|| Arc::new(extra));
        self
    }

    /// Caps every call's `max_tokens` at `cap` (a call that asks for none
    /// gets `cap`): an operator's bound for a slow or costly model, over
    /// whatever the graph's nodes ask for.
    pub fn with_max_tokens(mut self, cap: Option<u32>) -> Self {
        self.max_tokens = cap;
        self
    }

    /// The extra request-body fields (see [`OpenAiModel::with_extra`]).
    pub fn extra(&self) -> Option<&Map<String, Value>> {
        self.extra.as_deref()
    }

    /// Prices its calls' usage (see [`Price`]).
    pub fn with_price(mut self, price: Option<Price>) -> Self {
        self.price = price;
        self
    }

    /// Applies a role's family rules (see [`crate::llm::profile`]).
    pub fn with_rules(mut self, rules: ModelRules) -> Self {
        self.rules = Arc::new(rules);
        self
    }

    /// The family rules in force.
    pub fn rules(&self) -> &ModelRules {
        &self.rules
    }

    /// The request body a call of `request` sends, and what the family
    /// rules changed in it.
    pub fn body(&self, request: &ChatRequest) -> (Value, Vec<String>) {
        let request = self.capped(request);
        let (body, changes) =
            WireRequest::new(&self.name, &request, self.extra.as_deref(), &self.rules);
        (serde_json::to_value(&body).unwrap_or(Value::Null), changes)
    }

    fn capped(&self, request: &ChatRequest) -> ChatRequest {
        let mut request = request.clone();
        if let Some(cap) = self.max_tokens {
            request.max_tokens = Some(request.max_tokens.map_or(cap, |m| m.min(cap)));
        }
        request
    }
}

impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        let family = if self.rules.family_configured {
            "configured"
        } else {
            "detected"
        };
        format!(
            "{} on {} ({}, {} family, {family})",
            self.name,
            self.endpoint.base_url(),
            self.endpoint.api().as_str(),
            self.rules.family.as_str()
        )
    }

    fn adjustments(&self, request: &ChatRequest) -> Vec<String> {
        self.body(request).1
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        let request = self.capped(request);
        let (body, changes) =
            WireRequest::new(&self.name, &request, self.extra.as_deref(), &self.rules);
        self.rules.warn_once(&self.name, &changes);
        let body = match serde_json::to_vec(&body) {
            Ok(body) => body,
            Err(e) => {
                let e = LlmError::Stream(format!("failed to serialize the request: {e}"));
                return futures::stream::once(async move { Err(e) }).boxed();
            }
        };
        let (url, headers, query) = self.endpoint.chat_target(&self.name);
        let forced: Option<Arc<str>> = request
            .response_format
            .as_ref()
            .filter(|_| self.rules.structured == Structured::Tool)
            .map(|f| Arc::from(f.name.as_str()));
        let prepared = Prepared {
            url,
            headers,
            query,
            body,
            parser: Box::new(move || Box::new(OpenAiEvents(ChunkParser::new(forced.clone())))),
        };
        let provider = match self.endpoint.api() {
            Api::Azure => "azure.ai.openai",
            _ => "openai",
        };
        let span = GenAiSpan::start(provider, &self.name, self.endpoint.host(), &request);
        self.endpoint
            .call(Arc::clone(&self.name), prepared, span, self.price)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters_down() {
        let p = RetryPolicy {
            backoff: Duration::from_millis(400),
            max_backoff: Duration::from_secs(1),
            ..Default::default()
        };
        for _ in 0..50 {
            let first = p.backoff(1);
            assert!(
                first > Duration::from_millis(299) && first <= Duration::from_millis(400),
                "{first:?}"
            );
            let second = p.backoff(2);
            assert!(
                second > Duration::from_millis(599) && second <= Duration::from_millis(800),
                "{second:?}"
            );
            assert!(p.backoff(30) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn connection_window_covers_h2s_small_frame_budget_for_the_cap() {
        // h2 budgets half the connection window; the cap's streams, each
        // with a full window of 86-byte frames, spend (256 - 86) / 86 < 2
        // per byte of it.
        for cap in [1, 200, 1_000, 5_000] {
            let budget = u64::from(h2_connection_window(cap)) / 2;
            let unread = cap as u64 * u64::from(H2_STREAM_WINDOW);
            assert!(unread * (256 - 86) / 86 <= budget, "cap {cap}");
        }
        assert_eq!(h2_connection_window(1_000), 1_000 * 64 * 1024);
        assert_eq!(h2_connection_window(1), 5 * 1024 * 1024);
        assert_eq!(h2_connection_window(usize::MAX), (1 << 31) - 1);
    }

    #[test]
    fn endpoint_rejects_bad_urls_and_keys_without_panicking() {
        let settings = |url: &str, key: &str| EndpointSettings {
            base_url: url.into(),
            api_key: Some(key.into()),
            ..Default::default()
        };
        assert!(matches!(
            OpenAiEndpoint::new(settings("not a url", "k")),
            Err(EndpointError::BaseUrl { .. })
        ));
        assert!(matches!(
            OpenAiEndpoint::new(settings("ftp://x/v1", "k")),
            Err(EndpointError::BaseUrl { .. })
        ));
        assert!(matches!(
            OpenAiEndpoint::new(settings("http://x/v1", "k\n")),
            Err(EndpointError::ApiKey)
        ));
        let ep = OpenAiEndpoint::new(settings("http://127.0.0.1:1/v1/", "k")).unwrap();
        assert_eq!(ep.base_url(), "http://127.0.0.1:1/v1");
        assert_eq!(ep.model("m").name(), "m");
        assert!(!format!("{:?}", settings("http://x", "secret")).contains("secret"));
    }
}
