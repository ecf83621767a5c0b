//! `http2 = true` on an endpoint: the OpenAI-compatible client speaks h2c
//! (HTTP/2 with prior knowledge) to a plain-http server, and concurrent
//! calls share one connection. The server here is hyper's HTTP/2 alone (it
//! would refuse HTTP/1.1), streams OpenAI's chunks (PROTOCOLS.md) and
//! counts the connections it accepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use futures::StreamExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmChunk, LlmConfig};
use tokio::sync::Barrier;

/// Calls made at once.
const CALLS: usize = 8;

fn chunk(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}],\"usage\":null}}\n\n"
    )
}

/// Streams the user's words back, one chunk each, after every call of the
/// batch has arrived: a client that made them one after another, or on
/// connections of their own beyond the count, is caught.
async fn answer(req: Request<Incoming>, all: Arc<Barrier>) -> Result<Response<Body>, Infallible> {
    let body = axum::body::to_bytes(Body::new(req.into_body()), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["stream"], true);
    let question = body["messages"][0]["content"].as_str().unwrap().to_owned();
    all.wait().await;
    let mut parts = vec![chunk(r#"{"role":"assistant","content":""}"#, "null")];
    for word in question.split_inclusive(' ') {
        parts.push(chunk(&json!({ "content": word }).to_string(), "null"));
    }
    parts.push(chunk("{}", "\"stop\""));
    parts.push("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n".to_owned());
    parts.push("data: [DONE]\n\n".to_owned());
    let frames = futures::stream::iter(parts).then(|p| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok::<_, Infallible>(p)
    });
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(frames))
        .unwrap())
}

/// An h2c-only server; returns its base URL and its accepted connections.
async fn h2c_server() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (count, all) = (Arc::clone(&accepted), Arc::new(Barrier::new(CALLS)));
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let all = Arc::clone(&all);
            let service = hyper::service::service_fn(move |r| answer(r, Arc::clone(&all)));
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), service),
            );
        }
    });
    (format!("http://{addr}/v1"), accepted)
}

fn config(base_url: &str, http2: &str) -> Result<LlmConfig, toml::de::Error> {
    toml::from_str(&format!(
        "[endpoints.default]\nbase_url = \"{base_url}\"\napi_key = \"k\"\n{http2}\n[roles.chat]\nmodel = \"m\"\n"
    ))
}

#[tokio::test]
async fn concurrent_calls_share_one_h2c_connection_and_answer_right() {
    let (url, accepted) = h2c_server().await;
    let models = config(&url, "http2 = true")
        .unwrap()
        .build_models_with(|_| None)
        .unwrap();
    let model = models.for_role("chat");
    let calls = (0..CALLS).map(|i| {
        let model = Arc::clone(model);
        async move {
            let request = ChatRequest {
                messages: vec![ChatMessage::User {
                    content: format!("call {i} over h2"),
                }],
                ..Default::default()
            };
            let chunks: Vec<_> = model.stream(&request).collect().await;
            let text: String = chunks
                .iter()
                .map(|c| match c {
                    Ok(LlmChunk::Text(t)) => t.as_str(),
                    Ok(_) => "",
                    Err(e) => panic!("call {i}: {e}"),
                })
                .collect();
            (i, text)
        }
    });
    let answers = tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(calls))
        .await
        .expect("the calls run at once (the server waits for all of them)");
    for (i, text) in answers {
        assert_eq!(text, format!("call {i} over h2"));
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for every call"
    );
}

#[test]
fn http2_takes_a_boolean_and_says_so() {
    let error = config("http://127.0.0.1:1/v1", "http2 = \"yes\"")
        .expect_err("a string is refused")
        .to_string();
    assert!(
        error.contains("http2") && error.contains("boolean"),
        "{error}"
    );
    assert!(config("http://127.0.0.1:1/v1", "http2 = false").is_ok());
}
