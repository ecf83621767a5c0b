//! `http2 = true` on an endpoint: the OpenAI-compatible client speaks h2c
//! (HTTP/2 with prior knowledge) to a plain-http server, and concurrent
//! calls share one connection up to the endpoint's stream cap
//! (`http2_streams_per_connection`), then another; a connection the server
//! kills fails only its own calls. The server here is hyper's HTTP/2 alone (it
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
use stategraph::internals::llm::{ChatMessage, ChatModel, ChatRequest, LlmChunk, LlmConfig};
use tokio::sync::{Barrier, Notify};

/// Calls made at once.
const CALLS: usize = 8;

fn chunk(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}],\"usage\":null}}\n\n"
    )
}

/// Streams the user's words back, one chunk each. After the first word it
/// waits until every call of the batch has come that far: a client that
/// made them one after another, or on connections of their own beyond the
/// count, is caught. Then, on a connection to be killed, it tells the
/// connection to go (the calls on it have an answer begun, so they fail
/// rather than retry) and streams no more.
async fn answer(
    req: Request<Incoming>,
    all: Arc<Barrier>,
    kill: Option<Arc<Notify>>,
) -> Result<Response<Body>, Infallible> {
    let body = axum::body::to_bytes(Body::new(req.into_body()), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["stream"], true);
    let question = body["messages"][0]["content"].as_str().unwrap().to_owned();
    let mut parts = vec![chunk(r#"{"role":"assistant","content":""}"#, "null")];
    for word in question.split_inclusive(' ') {
        parts.push(chunk(&json!({ "content": word }).to_string(), "null"));
    }
    parts.push(chunk("{}", "\"stop\""));
    parts.push("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n".to_owned());
    parts.push("data: [DONE]\n\n".to_owned());
    let frames = futures::stream::iter(parts.into_iter().enumerate()).then(move |(k, p)| {
        let (all, kill) = (Arc::clone(&all), kill.clone());
        async move {
            if k == 2 {
                all.wait().await;
                if let Some(kill) = kill {
                    kill.notify_one();
                    std::future::pending::<()>().await;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, Infallible>(p)
        }
    });
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(frames))
        .unwrap())
}

/// An h2c-only server for a batch of `calls` made at once; returns its base
/// URL and its accepted connections. With `kill_first`, the first
/// connection is closed (its socket dropped, no GOAWAY) once every call
/// has begun its answer.
async fn h2c_server(calls: usize, kill_first: bool) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (count, all) = (Arc::clone(&accepted), Arc::new(Barrier::new(calls)));
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let first = count.fetch_add(1, Ordering::SeqCst) == 0;
            let kill = (kill_first && first).then(|| Arc::new(Notify::new()));
            let (all, killed) = (Arc::clone(&all), kill.clone());
            let service =
                hyper::service::service_fn(move |r| answer(r, Arc::clone(&all), kill.clone()));
            let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(socket), service);
            tokio::spawn(async move {
                match killed {
                    Some(killed) => {
                        tokio::select! {
                            _ = connection => {}
                            () = killed.notified() => {}
                        }
                    }
                    None => {
                        let _ = connection.await;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/v1"), accepted)
}

/// Makes `calls` calls at once on `model`; each call's text or error.
async fn call_all(model: &Arc<dyn ChatModel>, calls: usize) -> Vec<Result<String, String>> {
    let calls = (0..calls).map(|i| {
        let model = Arc::clone(model);
        async move {
            let request = ChatRequest {
                messages: vec![ChatMessage::User {
                    content: format!("call {i} over h2"),
                }],
                ..Default::default()
            };
            let mut text = String::new();
            let mut chunks = model.stream(&request);
            while let Some(chunk) = chunks.next().await {
                match chunk {
                    Ok(LlmChunk::Text(t)) => text.push_str(&t),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(text)
        }
    });
    tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(calls))
        .await
        .expect("the calls run at once (the server waits for all of them)")
}

fn config(base_url: &str, http2: &str) -> Result<LlmConfig, toml::de::Error> {
    toml::from_str(&format!(
        "[endpoints.default]\nbase_url = \"{base_url}\"\napi_key = \"k\"\n{http2}\n[roles.chat]\nmodel = \"m\"\n"
    ))
}

/// Makes [`CALLS`] calls at once with the endpoint `settings`, asserts every
/// answer, and returns how many connections the server accepted.
async fn connections_for(settings: &str) -> usize {
    let (url, accepted) = h2c_server(CALLS, false).await;
    let models = config(&url, settings)
        .unwrap()
        .build_models_with(|_| None)
        .unwrap();
    let answers = call_all(models.for_role("chat"), CALLS).await;
    for (i, text) in answers.into_iter().enumerate() {
        assert_eq!(text.unwrap(), format!("call {i} over h2"));
    }
    accepted.load(Ordering::SeqCst)
}

#[tokio::test]
async fn concurrent_calls_share_one_h2c_connection_and_answer_right() {
    assert_eq!(
        connections_for("http2 = true").await,
        1,
        "one connection for every call"
    );
}

#[tokio::test]
async fn calls_beyond_the_stream_cap_open_another_connection() {
    assert_eq!(
        connections_for("http2 = true\nhttp2_streams_per_connection = 3").await,
        CALLS.div_ceil(3),
        "8 calls at 3 per connection"
    );
}

#[tokio::test]
async fn a_killed_connection_fails_only_its_own_calls() {
    let (url, accepted) = h2c_server(CALLS, true).await;
    let models = config(&url, "http2 = true\nhttp2_streams_per_connection = 4")
        .unwrap()
        .build_models_with(|_| None)
        .unwrap();
    let answers = call_all(models.for_role("chat"), CALLS).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    let (ok, failed): (Vec<_>, Vec<_>) = answers
        .into_iter()
        .enumerate()
        .partition(|(_, a)| a.is_ok());
    assert_eq!(failed.len(), 4, "the killed connection's calls: {failed:?}");
    assert_eq!(ok.len(), 4, "the other connection's calls complete");
    for (i, text) in ok {
        assert_eq!(text.unwrap(), format!("call {i} over h2"));
    }
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
