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
//! - **JSON for hyper's own errors**: a request hyper cannot parse — a
//!   malformed request line, header, `Content-Length` or
//!   `Transfer-Encoding` (400), a URI too long (414), a head over its buffer
//!   or with more than 100 fields (431) — never reaches the router; hyper
//!   answers it itself with an empty body and has no hook for that. The
//!   connection's writes go through [`JsonErrors`], which turns exactly
//!   those answers into the documented `{"error": {code, message}}`.
//!
//! Shutdown: once `shutdown` resolves no connection is accepted, every open
//! one is told to finish its current response and close, and the loop
//! returns when the last has closed.

use crate::server::Code;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::Request;
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
        let conn = builder.serve_connection(TokioIo::new(JsonErrors::new(stream)), service);
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
            Code::HeadersTooLarge,
            format!("the request head is {head} bytes; at most {limit} are accepted"),
        )
        .into_response();
    }
    next.run(req).await
}

/// A connection's socket whose writes are passed through, except hyper's
/// own answers to requests it could not parse (see the module docs),
/// which become the documented JSON error. Those are recognised by shape:
/// a whole `HTTP/1.1 4xx` head with `content-length: 0` and no
/// `content-type`, written on its own — every error the router answers
/// has a JSON body (`error::json_errors`).
struct JsonErrors<T> {
    io: T,
    /// The rewritten answer, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> JsonErrors<T> {
    fn new(io: T) -> Self {
        Self { io, pending: None }
    }
}

/// The JSON answer for hyper's bodiless `head`, if that is what it is.
fn rewritten(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?;
    if !text.ends_with("\r\n\r\n") || text.matches("\r\n\r\n").count() != 1 {
        return None;
    }
    let status: u16 = rest.get(..3)?.parse().ok()?;
    let lower = text.to_ascii_lowercase();
    if !(400..500).contains(&status)
        || !lower.contains("\r\ncontent-length: 0\r\n")
        || lower.contains("\r\ncontent-type:")
    {
        return None;
    }
    let (code, message) = match status {
        414 => (Code::UriTooLong, "the request URI is too long"),
        431 => (
            Code::HeadersTooLarge,
            "the request head is too large or has too many header fields (at most 100)",
        ),
        _ => (
            Code::MalformedRequest,
            "the request could not be parsed: its request line or a header (Content-Length, Transfer-Encoding, …) is malformed",
        ),
    };
    let body =
        serde_json::json!({"error": {"code": code.as_str(), "message": message}}).to_string();
    let status_line = text.split("\r\n").next()?;
    let date = text
        .split("\r\n")
        .find(|l| l.to_ascii_lowercase().starts_with("date:"));
    let mut out = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(date) = date {
        out.push_str(date);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    Some(out.into_bytes())
}

impl<T: tokio::io::AsyncWrite + Unpin> JsonErrors<T> {
    /// Writes what is pending of a rewritten answer.
    fn drain(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        while let Some((bytes, done)) = &mut self.pending {
            if *done == bytes.len() {
                self.pending = None;
                break;
            }
            match std::pin::Pin::new(&mut self.io).poll_write(cx, &bytes[*done..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for JsonErrors<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for JsonErrors<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        if buf.starts_with(b"HTTP/1.1 4")
            && let Some(answer) = rewritten(buf)
        {
            self.pending = Some((answer, 0));
            // Taken whole; written by this and the following calls.
            let _ = self.drain(cx)?;
            return std::task::Poll::Ready(Ok(buf.len()));
        }
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty());
        let whole = bufs.iter().filter(|b| !b.is_empty()).count() == 1;
        match first {
            Some(b) if whole && b.starts_with(b"HTTP/1.1 4") => self.poll_write(cx, b),
            _ => {
                std::task::ready!(self.drain(cx))?;
                std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_error_heads_are_rewritten() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(rewritten(hyper).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "));
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("date: Thu, 01 Jan 2026"));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "headers_too_large");
        // Our own answers (a JSON body, or a 2xx/5xx) pass untouched.
        let ours = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert!(rewritten(ours).is_none());
        assert!(rewritten(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(rewritten(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nextra").is_none());
    }
}
