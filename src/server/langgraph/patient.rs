//! `wait` and `join` answers that no request timeout cuts: a run may take
//! longer than the server's `request_timeout`, which bounds how long a
//! handler takes to answer (a 504 otherwise). The answer starts at once —
//! 200 and `application/json` — with a newline every `keep_alive` while the
//! run goes on (JSON allows leading whitespace; a proxy sees the connection
//! alive), then the JSON: the final values, or `{"__error__": {…}}`, as
//! LangGraph's server answers `runs/wait`.

use std::future::Future;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Answers with `work`'s JSON once it is done, keeping the connection
/// alive meanwhile (see the module docs). A client that leaves stops the
/// waiting (not the run).
pub(super) fn answer(
    keep_alive: std::time::Duration,
    work: impl Future<Output = Result<Value, String>> + Send + 'static,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(2);
    tokio::spawn(async move {
        let mut work = std::pin::pin!(work);
        let mut beat = tokio::time::interval(keep_alive.max(std::time::Duration::from_millis(100)));
        beat.tick().await;
        let value = loop {
            tokio::select! {
                v = &mut work => break v,
                _ = beat.tick() => {
                    if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                        return;
                    }
                }
            }
        };
        let body = value.unwrap_or_else(
            |message| json!({"__error__": {"error": "internal_error", "message": message}}),
        );
        let _ = tx.send(Bytes::from(body.to_string())).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    (
        [(CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}
