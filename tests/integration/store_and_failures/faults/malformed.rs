//! A raw-socket corpus of requests a client library would never send —
//! what hyper refuses before routing (a malformed request line, header,
//! `Content-Length` or `Transfer-Encoding`; a URI too long; a head too
//! large or with too many fields), a broken chunked body, and
//! `Expect: 100-continue` over `body_limit` — each answered with the
//! documented JSON error (`{"error": {"code", "message"}}`), and the
//! `Expect` case with 413 at once, never `100 Continue`. Status codes are
//! RFC 9110/9112's (400, 413, 414, 431); the shapes come from real bytes
//! on a real socket.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::model::chat_model;
use crate::support::server::TestServer;

/// A case: name, request bytes, the status and error code expected.
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn case(name: &'static str, bytes: impl Into<Vec<u8>>, status: u16, code: &'static str) -> Case {
    Case {
        name,
        bytes: bytes.into(),
        status,
        code,
    }
}

fn corpus() -> Vec<Case> {
    let post = |headers: &str, body: &str| {
        format!(
            "POST /api/chat HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n{headers}\r\n{body}"
        )
    };
    let many_fields: String = (0..101).map(|i| format!("x-f{i}: v\r\n")).collect();
    vec![
        case(
            "content-length not a number",
            post("content-length: abc\r\n", "{}"),
            400,
            "malformed_request",
        ),
        case(
            "negative content-length",
            post("content-length: -1\r\n", "{}"),
            400,
            "malformed_request",
        ),
        case(
            "two different content-lengths",
            post("content-length: 2\r\ncontent-length: 3\r\n", "{}"),
            400,
            "malformed_request",
        ),
        case(
            "transfer-encoding not ending in chunked",
            post("transfer-encoding: gzip\r\n", "{}"),
            400,
            "malformed_request",
        ),
        case(
            "transfer-encoding of unknown codings",
            post("transfer-encoding: chunked, zz\r\n", "{}"),
            400,
            "malformed_request",
        ),
        case(
            "garbage request line",
            "GARBAGE\r\n\r\n",
            400,
            "malformed_request",
        ),
        case(
            "unknown HTTP version",
            "GET /healthz HTTP/9.9\r\nhost: t\r\n\r\n",
            400,
            "malformed_request",
        ),
        case(
            "space in a header name",
            "GET /healthz HTTP/1.1\r\nhost: t\r\nbad header: x\r\n\r\n",
            400,
            "malformed_request",
        ),
        case(
            "control byte in a header value",
            "GET /healthz HTTP/1.1\r\nhost: t\r\nx-a: a\x01b\r\n\r\n",
            400,
            "malformed_request",
        ),
        case(
            "URI over 64 KiB",
            format!("GET /{} HTTP/1.1\r\nhost: t\r\n\r\n", "a".repeat(70_000)),
            414,
            "uri_too_long",
        ),
        case(
            "head over hyper's buffer",
            format!(
                "GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: {}\r\n\r\n",
                "b".repeat(400_000)
            ),
            431,
            "headers_too_large",
        ),
        case(
            "more than 100 header fields",
            format!("GET /healthz HTTP/1.1\r\nhost: t\r\n{many_fields}\r\n"),
            431,
            "headers_too_large",
        ),
        case(
            "head over max_header_bytes",
            format!(
                "GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: {}\r\n\r\n",
                "b".repeat(70_000)
            ),
            431,
            "headers_too_large",
        ),
        case(
            "broken chunked body",
            post("transfer-encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"),
            400,
            "malformed_body",
        ),
        case(
            "expect 100-continue over body_limit",
            post("content-length: 52428800\r\nexpect: 100-continue\r\n", ""),
            413,
            "payload_too_large",
        ),
        case(
            "body over body_limit",
            post("content-length: 2000000\r\n", ""),
            413,
            "payload_too_large",
        ),
        case(
            "NUL in the path",
            "GET /api/chat/a%00b HTTP/1.1\r\nhost: t\r\n\r\n",
            400,
            "invalid_character",
        ),
    ]
}

/// Reads one response (head and `content-length` body), or what came
/// before the connection closed.
async fn read_response(s: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|n| body.len() >= n) {
                return text;
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return text,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_request_gets_a_json_error() {
    let server = TestServer::start(chat_model(false, None), |c| {
        c.server.max_header_bytes.0 = 64 * 1024;
    })
    .await;
    for c in corpus() {
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        // A peer that resets the connection while we write is answering too.
        let _ = s.write_all(&c.bytes).await;
        let text = read_response(&mut s).await;
        let name = c.name;
        assert!(!text.contains("100 Continue"), "{name}: {text}");
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{name}: no response: {text:?}"));
        let status: u16 = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {head}"));
        assert_eq!(status, c.status, "{name}: {head}\n{body}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{name}: {head}"
        );
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{name}: {e}: {body}"));
        assert_eq!(v["error"]["code"], c.code, "{name}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}: {v}"
        );
    }
    // The server is unharmed.
    let ok = reqwest::get(server.url("/healthz")).await.unwrap();
    assert_eq!(ok.status(), 200);
    server.shutdown().await;
}
