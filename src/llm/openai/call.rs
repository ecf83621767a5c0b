//! One call in progress on an HTTP model endpoint — the machinery every
//! HTTP client shares (OpenAI, Azure, Anthropic): a [`Prepared`] request is
//! sent with the retry layer under it, its SSE events are read by the
//! provider's [`EventParser`], and the call's deadlines and attempt budget
//! decide what a failure becomes (see the parent module's docs).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_openai::error::{OpenAIError, StreamError};
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use eventsource_stream::{Event, EventStream};
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::HeaderMap;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use super::EndpointInner;
use super::retry::{Attempts, HttpFailure, RetryLayer};
use super::stream::StreamFault;
use crate::llm::profile::Price;
use crate::llm::spans::GenAiSpan;
use crate::llm::{LlmChunk, LlmError};

/// A request ready to go: where, with which headers and body, and how its
/// streamed events are read.
pub(crate) struct Prepared {
    /// The full URL.
    pub(crate) url: String,
    /// Headers besides `content-type`.
    pub(crate) headers: HeaderMap,
    /// Query parameters.
    pub(crate) query: Vec<(String, String)>,
    /// The JSON body.
    pub(crate) body: Vec<u8>,
    /// A fresh parser (one per attempt).
    pub(crate) parser: Box<dyn Fn() -> Box<dyn EventParser> + Send + Sync>,
}

/// Reads a provider's SSE events into chunks.
pub(crate) trait EventParser: Send {
    /// Reads one event, appending what it carries to `out`; `Ok(true)`
    /// when the event ends the stream (`[DONE]`).
    ///
    /// # Errors
    /// The event is an error event or malformed.
    fn push(&mut self, event: &Event, out: &mut Vec<LlmChunk>) -> Result<bool, StreamFault>;

    /// Whether the answer is complete (a finish reason arrived).
    fn finished(&self) -> bool;

    /// Whether any answer (text, reasoning or a tool call) was produced.
    fn produced_output(&self) -> bool;

    /// The model the provider says answered, once known.
    fn response_model(&self) -> Option<&str> {
        None
    }
}

/// The message of a chunk that is not what it should be.
pub(crate) fn malformed(e: &serde_json::Error, data: &str) -> String {
    let content: String = data.chars().take(200).collect();
    format!("malformed chunk ({e}): {content}")
}

/// Waiting this long after `finish_reason` for the usage chunk and the end
/// of the stream; a server that then stalls does not fail a finished answer.
const AFTER_FINISH_GRACE: Duration = Duration::from_secs(5);

/// One call in progress: a small state machine polled by the chunk stream.
pub(super) struct Call {
    endpoint: Arc<EndpointInner>,
    model: Arc<str>,
    prepared: Arc<Prepared>,
    attempts: Arc<Attempts>,
    total_deadline: Instant,
    first_token_deadline: Instant,
    finish_deadline: Option<Instant>,
    stream: Option<BoxStream<'static, Result<Event, OpenAIError>>>,
    parser: Box<dyn EventParser>,
    pending: VecDeque<LlmChunk>,
    done: bool,
    span: GenAiSpan,
    pub(super) price: Option<Price>,
}

impl Call {
    pub(super) fn new(
        endpoint: Arc<EndpointInner>,
        model: Arc<str>,
        prepared: Prepared,
        span: GenAiSpan,
    ) -> Self {
        let now = Instant::now();
        let attempts = Arc::new(Attempts::new(endpoint.retry.attempts));
        let parser = (prepared.parser)();
        Self {
            total_deadline: after(now, endpoint.timeouts.total),
            first_token_deadline: after(now, endpoint.timeouts.first_token),
            finish_deadline: None,
            attempts,
            endpoint,
            model,
            prepared: Arc::new(prepared),
            stream: None,
            parser,
            pending: VecDeque::new(),
            done: false,
            span,
            price: None,
        }
    }

    /// The next chunk, error, or the end, recorded on the call's span.
    pub(super) async fn next(&mut self) -> Option<Result<LlmChunk, LlmError>> {
        let mut item = self.next_inner().await;
        if let (Some(Ok(LlmChunk::Usage(u))), Some(price)) = (&mut item, &self.price) {
            u.cost_nano_usd = price.cost_nano_usd(u);
        }
        if let Some(model) = self.parser.response_model() {
            self.span.response_model(model);
        }
        if let Some(item) = &item {
            self.span.chunk(item);
        }
        item
    }

    /// The deadline that applies now, and its name for [`LlmError::Timeout`].
    fn deadline(&self) -> (Instant, &'static str) {
        if let Some(d) = self.finish_deadline {
            return (d.min(self.total_deadline), "total");
        }
        if !self.parser.produced_output() && self.first_token_deadline < self.total_deadline {
            (self.first_token_deadline, "first token")
        } else {
            (self.total_deadline, "total")
        }
    }

    async fn next_inner(&mut self) -> Option<Result<LlmChunk, LlmError>> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Some(Ok(chunk));
            }
            if self.done {
                return None;
            }
            let (deadline, which) = self.deadline();
            let Some(stream) = self.stream.as_mut() else {
                let opening = open(
                    &self.endpoint,
                    &self.model,
                    &self.prepared,
                    &self.attempts,
                    deadline,
                );
                match tokio::time::timeout_at(deadline, opening).await {
                    Ok(Ok(stream)) => self.stream = Some(stream),
                    // The retry layer has already retried what deserved it.
                    Ok(Err(e)) => return self.fail(open_error(e)),
                    Err(_) => return self.fail(LlmError::Timeout(which)),
                }
                continue;
            };
            let event = match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(event) => event,
                Err(_) if self.finish_deadline.is_some() => return self.end(),
                Err(_) => return self.fail(LlmError::Timeout(which)),
            };
            let (error, retryable) = match event {
                Some(Ok(event)) => {
                    let mut out = Vec::new();
                    match self.parser.push(&event, &mut out) {
                        Ok(last) => {
                            if self.parser.finished() && self.finish_deadline.is_none() {
                                self.finish_deadline =
                                    Some(after(Instant::now(), AFTER_FINISH_GRACE));
                            }
                            self.pending.extend(out);
                            if !last {
                                continue;
                            }
                            if self.parser.finished() {
                                return self.end();
                            }
                            (
                                LlmError::Stream("the stream ended before a finish_reason".into()),
                                true,
                            )
                        }
                        Err(fault) => (LlmError::Stream(fault.message), fault.retryable),
                    }
                }
                Some(Err(e)) => (stream_error(e), true),
                None if self.parser.finished() => return self.end(),
                None => (
                    LlmError::Stream("the stream ended before a finish_reason".into()),
                    true,
                ),
            };
            if self.parser.finished() {
                // The answer is complete; only the usage chunk can be missing.
                tracing::warn!(model = %self.model, %error, "model stream broke after finish_reason; keeping the answer");
                return self.end();
            }
            if !retryable || self.parser.produced_output() || !self.attempts.left() {
                return self.fail(error);
            }
            let delay = self.endpoint.retry.backoff(self.attempts.used());
            if after(Instant::now(), delay) >= self.total_deadline {
                return self.fail(error);
            }
            tracing::warn!(
                model = %self.model,
                attempt = self.attempts.used(),
                max_attempts = self.attempts.max(),
                delay_ms = delay.as_millis() as u64,
                %error,
                "model stream failed before any output; retrying"
            );
            self.stream = None;
            self.pending.clear();
            self.parser = (self.prepared.parser)();
            tokio::time::sleep(delay).await;
            self.first_token_deadline = after(Instant::now(), self.endpoint.timeouts.first_token);
        }
    }

    fn fail(&mut self, error: LlmError) -> Option<Result<LlmChunk, LlmError>> {
        self.done = true;
        self.stream = None;
        Some(Err(error))
    }

    fn end(&mut self) -> Option<Result<LlmChunk, LlmError>> {
        self.done = true;
        self.stream = None;
        self.pending.pop_front().map(Ok)
    }
}

/// `from + d`, saturating: a configured `Duration::MAX` means "no limit",
/// not a panic.
pub(super) fn after(from: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    from.checked_add(d.min(CENTURY)).unwrap_or(from)
}

/// Sends the request (with HTTP-level retries) and returns the event stream.
///
/// async-openai builds the request's URL and headers and carries the retry
/// layer, but the response's SSE is parsed here, in the task that reads the
/// chunks: async-openai's stream spawns a task per call that parses and
/// forwards each event through an unbounded channel, which cost a task wake
/// per token and ~10 KB per open stream (the channel's blocks; heaptrack,
/// 1,000 paced chats).
async fn open(
    ep: &EndpointInner,
    model: &Arc<str>,
    prepared: &Arc<Prepared>,
    attempts: &Arc<Attempts>,
    deadline: Instant,
) -> Result<BoxStream<'static, Result<Event, OpenAIError>>, OpenAIError> {
    let layer = RetryLayer::new(
        ep.retry.clone(),
        Arc::clone(attempts),
        deadline,
        Arc::clone(model),
    );
    // The connection for this attempt (and the retry layer's, before a
    // response); held by the body, so the call counts until it ends.
    let lease = ep.http.lease();
    let (http, prepared) = (ep.http.any().clone(), Arc::clone(prepared));
    // Called once per attempt.
    let factory = HttpRequestFactory::new(move || {
        let request = http
            .post(&prepared.url)
            .query(&prepared.query)
            .headers(prepared.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(prepared.body.clone())
            .build();
        async move { request.map_err(OpenAIError::Reqwest) }
    });
    let response = layer
        .layer(ReqwestService::new(lease.client().clone()))
        .oneshot(factory)
        .await?;
    let bytes = response
        .bytes_stream()
        .map(|r| r.map_err(std::io::Error::other));
    Ok(EventStream::new(bytes)
        .map(move |event| {
            let _held = &lease;
            event.map_err(|e| {
                OpenAIError::StreamError(Box::new(StreamError::EventStream(e.to_string())))
            })
        })
        .boxed())
}

/// An error before the stream started.
fn open_error(e: OpenAIError) -> LlmError {
    match e {
        OpenAIError::Boxed(b) => match b.downcast::<HttpFailure>() {
            Ok(h) if h.content_policy => LlmError::ContentPolicy(h.message),
            Ok(h) => LlmError::Http {
                status: h.status,
                message: h.message,
            },
            Err(other) => LlmError::Connect(other.to_string()),
        },
        OpenAIError::Reqwest(e) if e.is_connect() && e.is_timeout() => LlmError::Timeout("connect"),
        OpenAIError::Reqwest(e) => LlmError::Connect(error_chain(&e)),
        OpenAIError::ApiError(a) => LlmError::Http {
            status: a.status_code.as_u16(),
            message: a.api_error.message,
        },
        other => stream_error(other),
    }
}

/// An error after the stream started.
fn stream_error(e: OpenAIError) -> LlmError {
    match e {
        OpenAIError::JSONDeserialize(e, content) => {
            let content: String = content.chars().take(200).collect();
            LlmError::Stream(format!("malformed chunk ({e}): {content}"))
        }
        OpenAIError::StreamError(s) => match *s {
            StreamError::EventStream(msg) => LlmError::Connect(format!("the stream broke: {msg}")),
            other => LlmError::Stream(other.to_string()),
        },
        OpenAIError::Reqwest(e) => LlmError::Connect(error_chain(&e)),
        other => LlmError::Stream(other.to_string()),
    }
}

/// An error with its causes (`reqwest` hides the useful part in them).
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
