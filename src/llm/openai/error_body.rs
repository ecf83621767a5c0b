//! What an OpenAI-compatible server's error says — an HTTP error body or
//! an error event mid-stream, in the shapes the servers use — and whether
//! another attempt could succeed.

use serde_json::Value;

/// What an error object (an HTTP error body or a mid-stream error event) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorInfo {
    /// The human-readable message.
    pub(crate) message: String,
    /// `type` or string `code`, e.g. `rate_limit_exceeded`.
    pub(super) kind: Option<String>,
    /// A numeric `code`, as vLLM-style servers send.
    pub(super) status: Option<u16>,
}

impl ErrorInfo {
    /// Reads an error object: `{"error":{message,type,code}}`, `{"error":"…"}`,
    /// `{"object":"error","message":…,"code":400}` or `{"detail":…}`.
    pub(crate) fn from_value(v: &Value) -> Self {
        let obj = v.get("error").filter(|e| !e.is_null()).unwrap_or(v);
        let text = |x: &Value| match x {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        };
        let message = obj
            .get("message")
            .and_then(text)
            .or_else(|| obj.as_str().map(str::to_owned))
            .or_else(|| obj.get("detail").and_then(text))
            .or_else(|| v.get("detail").and_then(text))
            .unwrap_or_else(|| truncate(&v.to_string()));
        let code = obj.get("code");
        let kind = obj
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .or_else(|| code.and_then(Value::as_str))
            .map(str::to_owned);
        let status = code
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok());
        let mut info = Self {
            message,
            kind,
            status,
        };
        // Codes that say more than the type beside them.
        if let Some(c @ (INSUFFICIENT_QUOTA | "content_filter" | "content_policy_violation")) =
            code.and_then(Value::as_str)
        {
            info.kind = Some(c.to_owned());
        }
        info
    }

    /// Reads an HTTP error body: JSON if it is JSON, else its text.
    pub(super) fn from_body(body: &[u8], status: u16) -> Self {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            return Self::from_value(&v);
        }
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        let message = if text.is_empty() {
            http_reason(status).to_owned()
        } else {
            truncate(text)
        };
        Self {
            message,
            kind: None,
            status: None,
        }
    }

    /// A refusal under the provider's content policy: Azure's
    /// `content_filter`, OpenAI's `content_policy_violation`, or a message
    /// naming the policy.
    pub(super) fn is_content_policy(&self) -> bool {
        let lower = self.message.to_ascii_lowercase();
        matches!(
            self.kind.as_deref(),
            Some("content_filter" | "content_policy_violation")
        ) || lower.contains("content management policy")
            || lower.contains("content policy")
    }

    /// OpenAI's permanent 429: the account has no credit left.
    pub(super) fn is_insufficient_quota(&self) -> bool {
        self.kind.as_deref() == Some(INSUFFICIENT_QUOTA)
    }

    /// Whether asking again could help (for error events in a stream).
    pub(crate) fn is_retryable(&self) -> bool {
        let permanent_status = self
            .status
            .is_some_and(|s| (400..500).contains(&s) && !matches!(s, 408 | 409 | 429));
        let permanent_kind = matches!(
            self.kind.as_deref(),
            Some(
                INSUFFICIENT_QUOTA
                    | "invalid_request_error"
                    | "context_length_exceeded"
                    | "invalid_api_key"
            )
        );
        !(permanent_status || permanent_kind)
    }
}

const INSUFFICIENT_QUOTA: &str = "insufficient_quota";

fn truncate(s: &str) -> String {
    const MAX: usize = 500;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn http_reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("no error message")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_give_their_message() {
        let quota = ErrorInfo::from_body(
            br#"{"error":{"message":"no credit","type":"insufficient_quota"}}"#,
            429,
        );
        assert!(quota.is_insufficient_quota());
        assert_eq!(quota.message, "no credit");
        let vllm = ErrorInfo::from_body(br#"{"object":"error","message":"bad","code":400}"#, 400);
        assert_eq!((vllm.message.as_str(), vllm.status), ("bad", Some(400)));
        assert_eq!(
            ErrorInfo::from_body(br#"{"detail":"Not Found"}"#, 404).message,
            "Not Found"
        );
        assert_eq!(
            ErrorInfo::from_body(b"  upstream down \n", 502).message,
            "upstream down"
        );
        assert_eq!(
            ErrorInfo::from_body(b"", 503).message,
            "Service Unavailable"
        );
    }
}
