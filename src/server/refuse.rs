//! What every request is checked for before any handler sees it.
//!
//! - **NUL** (U+0000) anywhere in the request — its path (`%00`), its query,
//!   its body (a raw NUL byte or a JSON `\u0000` escape) — is refused with
//!   400 `invalid_character`. PostgreSQL cannot hold a NUL in `TEXT` or
//!   `JSONB` at all (`/api/chat/%00`, `/api/runs?chat=%00` and a fork's
//!   `set` value with `\u0000` were each a 500), SQLite's text functions end
//!   a string at it, and no identifier, filter or chat message needs one.
//!   Refusing it here, whatever the endpoint, keeps it from reaching any
//!   store. (A header cannot carry one: hyper refuses the request.)
//! - **A body over `server.body_limit`** is refused with 413 at once when
//!   its `Content-Length` says so, before it is read — which also keeps
//!   hyper from answering `Expect: 100-continue` with `100 Continue` and
//!   inviting a 50 MB upload it would refuse. A body without a length is
//!   read up to the limit.
//!
//! A body is read here (every endpoint's body is a small JSON document)
//! and handed on as it was.

use crate::server::Code;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::error::ApiError;

/// Checks the request (see the module docs) and hands it on.
pub(super) async fn unstorable(limit: usize, req: Request, next: Next) -> Response {
    let uri = req.uri();
    if has_nul_escape(uri.path()) || uri.query().is_some_and(has_nul_escape) {
        return nul("the request's path or query contains %00");
    }
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(limit);
    }
    let (parts, body) = req.into_parts();
    let mut bytes = Vec::new();
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else {
            return ApiError::new(
                Code::MalformedBody,
                "the request body could not be read (a malformed chunked encoding, or it broke off)",
            )
            .into_response();
        };
        if bytes.len() + chunk.len() > limit {
            return too_large(limit);
        }
        bytes.extend_from_slice(&chunk);
    }
    if has_nul(&bytes) {
        return nul("the request body contains a NUL character");
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn nul(what: &str) -> Response {
    ApiError::new(
        Code::InvalidCharacter,
        format!("{what}; a NUL character (U+0000) is not accepted anywhere in a request"),
    )
    .into_response()
}

fn too_large(limit: usize) -> Response {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("request body is too large (at most {limit} bytes)"),
    )
    .into_response()
}

/// `%00` in a URL component (the only way a URL carries a NUL).
fn has_nul_escape(s: &str) -> bool {
    s.as_bytes().windows(3).any(|w| w == b"%00")
}

/// A NUL byte, or a JSON `\u0000` escape (a `u0000` after an odd run of
/// backslashes: `\\u0000` is a backslash and the text `u0000`).
fn has_nul(body: &[u8]) -> bool {
    if body.contains(&0) {
        return true;
    }
    let mut at = 0;
    while let Some(i) = find(&body[at..], b"u0000") {
        let start = at + i;
        let slashes = body[..start]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        if slashes % 2 == 1 {
            return true;
        }
        at = start + 1;
    }
    false
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_escapes_are_told_from_escaped_backslashes() {
        assert!(has_nul(br#"{"a":"x\u0000y"}"#));
        assert!(has_nul(br#"{"a\u0000":1}"#));
        assert!(has_nul(br#"{"a":"\\\u0000"}"#));
        assert!(has_nul(b"{\"a\":\"\0\"}"));
        assert!(!has_nul(br#"{"a":"\\u0000"}"#));
        assert!(!has_nul(br#"{"a":"u0000 \u0001"}"#));
        assert!(has_nul_escape("/api/chat/a%00b"));
        assert!(!has_nul_escape("/api/chat/100%2500"));
        assert!(!has_nul_escape("/api/chat/%20"));
    }
}
