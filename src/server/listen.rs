//! The accept loop: HTTP/1.1 connections served by hyper, with what
//! `axum::serve` does not set.
//!
//! - **TCP_NODELAY** on every accepted socket. Without it the last small
//!   write of a response (an SSE event, the end of a chunked body) waits for
//!   the client's delayed ACK: one chat at a time on a keep-alive connection
//!   took ~44 ms instead of ~3 ms.
//! - **A header-read timeout**: a client must send a request's whole head
//!   within `server.header_timeout`, or its connection is closed (a client
//!   trickling half a header line held a connection for minutes).
//! - **A head size limit**: heads over `server.max_header_bytes` get the
//!   documented JSON 431 from [`head_limit`]; hyper's own buffer stops far
//!   larger ones (also 431) before they are read whole.
//!
//! Shutdown: once `shutdown` resolves no connection is accepted, every open
//! one is told to finish its current response and close, and the loop
//! returns when the last has closed.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::error::ApiError;

/// Limits on one connection's requests.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConnLimits {
    /// Time allowed for a request head.
    pub header_timeout: Duration,
    /// Largest request head answered normally.
    pub max_header_bytes: usize,
}

impl ConnLimits {
    /// hyper's read buffer: room for a head well past the limit (so that
    /// [`head_limit`] answers it in JSON), bounded so a huge head is cut
    /// off early. hyper refuses less than 8 KiB.
    fn buffer(&self) -> usize {
        (self.max_header_bytes.saturating_mul(4)).clamp(64 * 1024, 1024 * 1024)
    }
}

/// Serves `router` on `listener` until `shutdown` resolves and the open
/// connections have finished.
///
/// # Errors
/// None today (a failed accept is logged and retried); the signature keeps
/// room for fatal listener errors.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every connection task holds a clone; `closed()` resolves when all
    // are gone.
    let (open_tx, open_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let conn = Connection {
            router: router.clone(),
            peer,
            limits,
            stop: stop_rx.clone(),
            _open: open_rx.clone(),
        };
        tokio::spawn(conn.run(stream));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}

/// One accepted connection.
struct Connection {
    router: Router,
    peer: SocketAddr,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    /// Dropped when the connection ends (see [`serve`]).
    _open: watch::Receiver<()>,
}

impl Connection {
    async fn run(mut self, stream: tokio::net::TcpStream) {
        let (router, peer) = (self.router.clone(), self.peer);
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let router = router.clone();
            async move { tower::ServiceExt::oneshot(router, req.map(Body::new)).await }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_timeout)
            .max_buf_size(self.limits.buffer());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let mut conn = std::pin::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => log_end(r),
            () = stopped(&mut self.stop) => {
                conn.as_mut().graceful_shutdown();
                log_end(conn.await);
            }
        }
    }
}

/// Resolves once shutdown is signalled.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Answers a request whose head (request line and headers) is over
/// `limit` bytes with the documented JSON 431.
pub(super) async fn head_limit(limit: usize, req: Request, next: Next) -> Response {
    let head = req.uri().to_string().len()
        + req
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head > limit {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("the request head is {head} bytes; at most {limit} are accepted"),
        )
        .into_response();
    }
    next.run(req).await
}
