//! Who is calling: a bearer API key (or the same key as `x-api-key`, as
//! LangGraph's SDKs send it) mapped to a user in the config, or —
//! without a key, directly from a loopback address, and only while no API
//! keys are configured (unless `local_with_keys`) — the configured local
//! user. A request that came through a proxy (it carries a forwarding
//! header) is never the local user: behind a reverse proxy on the same host
//! every visitor would otherwise share one account. An `Authorization`
//! header that is present but not a valid bearer key (including one that
//! is not ASCII) is refused, never read as "no key".
//! Every chat and run is scoped to its user; another user's gets a 404.

use crate::server::Code;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;

/// Headers a forwarding proxy adds; their presence means the peer address
/// is the proxy's, not the caller's.
const PROXY_HEADERS: [&str; 6] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "via",
];

/// The authenticated user id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct User(pub String);

impl FromRequestParts<Arc<AppState>> for User {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let auth = &state.config.auth;
        // `x-api-key` is how LangGraph's SDKs send a key (`Client({apiKey})`).
        let bearer = parts.headers.get(axum::http::header::AUTHORIZATION);
        let raw = bearer.or_else(|| parts.headers.get("x-api-key"));
        if let Some(raw) = raw {
            let value = raw.to_str().unwrap_or("");
            let key = if bearer.is_some() {
                value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
                    .unwrap_or("")
            } else {
                value
            }
            .trim();
            return match auth.api_keys.get(key) {
                Some(user) if !key.is_empty() => Ok(User(user.clone())),
                _ => Err(ApiError::new(Code::Unauthorized, "invalid API key")),
            };
        }
        let loopback = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .is_none_or(|c| c.0.ip().is_loopback());
        let proxied = PROXY_HEADERS.iter().any(|h| parts.headers.contains_key(*h));
        if loopback
            && !proxied
            && let Some(local) = auth.local()
        {
            return Ok(User(local.to_owned()));
        }
        Err(ApiError::new(
            Code::Unauthorized,
            "an API key is required (Authorization: Bearer <key>)",
        ))
    }
}
