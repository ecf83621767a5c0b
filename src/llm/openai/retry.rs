//! Retrying failed HTTP attempts: a tower layer installed under
//! async-openai's client with `Client::with_http_service`.
//!
//! async-openai's built-in retry layer is replaced rather than configured: it
//! ignores `retry-after-ms`, `x-should-retry`, 408 and 409, adds no jitter,
//! has no cap on a server-requested delay, does not parse 5xx bodies and
//! loses the status of 4xx bodies it cannot parse. This layer also shares
//! one attempt budget with the stream-level retries of the same call, so a
//! call never makes more requests than its policy allows, and it never
//! sleeps past the call's deadline.
//!
//! Every non-success response ends here: the last one becomes an
//! [`HttpFailure`] (boxed into `OpenAIError::Boxed`) carrying the status and
//! the message from the body, so nothing above has to parse error bodies.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use reqwest::Response;
use reqwest::header::HeaderMap;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::RetryPolicy;
use super::error_body::ErrorInfo;

/// The attempts one model call may make, over HTTP and stream retries.
#[derive(Debug)]
pub(super) struct Attempts {
    max: u32,
    used: AtomicU32,
}

impl Attempts {
    /// A budget of `max` attempts (at least one).
    pub(super) fn new(max: u32) -> Self {
        Self {
            max: max.max(1),
            used: AtomicU32::new(0),
        }
    }

    /// Records the start of an attempt; returns its number, from 1.
    fn begin(&self) -> u32 {
        self.used.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Attempts started so far.
    pub(super) fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether another attempt is allowed.
    pub(super) fn left(&self) -> bool {
        self.used() < self.max
    }

    /// The budget.
    pub(super) fn max(&self) -> u32 {
        self.max
    }
}

/// The final HTTP error of a call, after retries.
#[derive(Debug, Clone, thiserror::Error)]
#[error("HTTP {status}: {message}")]
pub(super) struct HttpFailure {
    /// Status code.
    pub(super) status: u16,
    /// Message from the error body.
    pub(super) message: String,
    /// The provider refused under its content policy.
    pub(super) content_policy: bool,
}

/// Retries one call's HTTP attempts (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct RetryLayer {
    policy: RetryPolicy,
    attempts: Arc<Attempts>,
    deadline: Instant,
    model: Arc<str>,
}

impl RetryLayer {
    /// Retries under `policy`, drawing on `attempts`, never waiting past `deadline`.
    pub(super) fn new(
        policy: RetryPolicy,
        attempts: Arc<Attempts>,
        deadline: Instant,
        model: Arc<str>,
    ) -> Self {
        Self {
            policy,
            attempts,
            deadline,
            model,
        }
    }

    /// The wait before the next attempt, or `None` to give up.
    fn delay(&self, retryable: bool, retry_after: Option<Duration>) -> Option<Duration> {
        if !retryable || !self.attempts.left() {
            return None;
        }
        let delay = match retry_after {
            Some(d) if d > self.policy.max_retry_after => {
                tracing::warn!(
                    model = %self.model,
                    retry_after_ms = d.as_millis() as u64,
                    "server asks to wait longer than max_retry_after; not retrying"
                );
                return None;
            }
            Some(d) => d,
            None => self.policy.backoff(self.attempts.used()),
        };
        (super::call::after(Instant::now(), delay) < self.deadline).then_some(delay)
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`RetryLayer`].
#[derive(Clone, Debug)]
pub(super) struct RetryService<S> {
    inner: S,
    layer: RetryLayer,
}

/// Why an attempt failed.
enum Failure {
    Http {
        failure: HttpFailure,
        retry_after: Option<Duration>,
        retryable: bool,
    },
    Connection(reqwest::Error),
}

impl<S> Service<HttpRequestFactory> for RetryService<S>
where
    S: Service<HttpRequestFactory, Response = Response, Error = OpenAIError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = OpenAIError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, OpenAIError>> + Send + 'static>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each attempt drives a clone of the inner service to readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: HttpRequestFactory) -> Self::Future {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        Box::pin(async move {
            loop {
                let attempt = layer.attempts.begin();
                let failure = match inner.clone().oneshot(request.clone()).await {
                    Ok(response) if response.status().is_success() => return Ok(response),
                    Ok(response) => http_failure(response).await,
                    Err(OpenAIError::Reqwest(e)) if is_connection_error(&e) => {
                        Failure::Connection(e)
                    }
                    Err(e) => return Err(e),
                };
                let (retryable, retry_after) = match &failure {
                    Failure::Http {
                        retryable,
                        retry_after,
                        ..
                    } => (*retryable, *retry_after),
                    Failure::Connection(_) => (true, None),
                };
                let Some(delay) = layer.delay(retryable, retry_after) else {
                    return Err(match failure {
                        Failure::Http { failure, .. } => OpenAIError::Boxed(Box::new(failure)),
                        Failure::Connection(e) => OpenAIError::Reqwest(e),
                    });
                };
                let error = match &failure {
                    Failure::Http { failure, .. } => failure.to_string(),
                    Failure::Connection(e) => super::call::error_chain(e),
                };
                tracing::warn!(
                    model = %layer.model,
                    attempt,
                    max_attempts = layer.attempts.max(),
                    delay_ms = delay.as_millis() as u64,
                    %error,
                    "model request failed; retrying"
                );
                tokio::time::sleep(delay).await;
            }
        })
    }
}

/// Reads a non-success response into a [`Failure`].
async fn http_failure(mut response: Response) -> Failure {
    const MAX_BODY: usize = 16 * 1024;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    // The body only feeds the error message; a broken or huge one is cut short.
    while body.len() < MAX_BODY {
        match response.chunk().await {
            Ok(Some(bytes)) => body.extend_from_slice(&bytes),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_BODY);
    let info = ErrorInfo::from_body(&body, status);
    let retryable = match should_retry_header(&headers) {
        Some(told) => told,
        None => is_retryable_status(status) && !info.is_insufficient_quota(),
    };
    Failure::Http {
        retry_after: retry_after(&headers),
        retryable,
        failure: HttpFailure {
            status,
            content_policy: info.is_content_policy(),
            message: info.message,
        },
    }
}

/// 408, 409, 429 and 5xx may succeed when asked again.
pub(super) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..600).contains(&status)
}

fn is_connection_error(e: &reqwest::Error) -> bool {
    e.is_connect() || e.is_request() || e.is_timeout()
}

/// OpenAI's explicit `x-should-retry: true|false`.
fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The delay a server asks for: `retry-after-ms` (milliseconds) or
/// `retry-after` (seconds). An HTTP-date `retry-after` is ignored and the
/// normal backoff applies.
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let v: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    let secs = number("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| number("retry-after"))?;
    Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn retry_after_prefers_milliseconds_and_ignores_dates() {
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "250"), ("retry-after", "3")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1.5")])),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            None
        );
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "-5")])), None);
        assert_eq!(
            should_retry_header(&headers(&[("x-should-retry", "false")])),
            Some(false)
        );
    }

    #[test]
    fn delay_respects_budget_cap_and_deadline() {
        let policy = RetryPolicy {
            attempts: 2,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(5),
        };
        let attempts = Arc::new(Attempts::new(2));
        let far = Instant::now() + Duration::from_secs(60);
        let layer = RetryLayer::new(policy.clone(), Arc::clone(&attempts), far, "m".into());
        attempts.begin();
        assert_eq!(layer.delay(false, None), None, "not retryable");
        assert_eq!(
            layer.delay(true, Some(Duration::from_secs(6))),
            None,
            "above the cap"
        );
        assert_eq!(
            layer.delay(true, Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        let d = layer.delay(true, None).unwrap();
        assert!(
            d >= Duration::from_millis(75) && d <= Duration::from_millis(100),
            "{d:?}"
        );
        let near = RetryLayer::new(
            policy,
            Arc::clone(&attempts),
            Instant::now() + Duration::from_millis(50),
            "m".into(),
        );
        assert_eq!(near.delay(true, None), None, "would pass the deadline");
        attempts.begin();
        assert_eq!(layer.delay(true, None), None, "budget spent");
    }

    #[test]
    fn retryable_statuses() {
        for s in [408, 409, 429, 500, 502, 503, 504] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!is_retryable_status(s), "{s}");
        }
    }
}
