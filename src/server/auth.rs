//! Who is calling: a bearer API key mapped to a user in the config, or —
//! without a key, from a loopback address — the configured local user.
//! Every chat and run is scoped to its user; another user's gets a 404.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;

/// The authenticated user id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User(pub String);

impl FromRequestParts<Arc<AppState>> for User {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let auth = &state.config.auth;
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if let Some(value) = header {
            let key = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .unwrap_or("")
                .trim();
            return match auth.api_keys.get(key) {
                Some(user) if !key.is_empty() => Ok(User(user.clone())),
                _ => Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "invalid API key",
                )),
            };
        }
        let loopback = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .is_none_or(|c| c.0.ip().is_loopback());
        if loopback && !auth.local_user.is_empty() {
            return Ok(User(auth.local_user.clone()));
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "an API key is required (Authorization: Bearer <key>)",
        ))
    }
}
