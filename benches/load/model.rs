//! A paced OpenAI-compatible model on 127.0.0.1, for the server to call as
//! its LLM endpoint: `POST /v1/chat/completions`, streaming.
//!
//! Every call streams exactly [`Pace::tokens`] chunks, one every
//! [`Pace::every`] (scheduled from the call's start, so they do not drift):
//! text answers as that many tokens; structured-output calls as their JSON
//! (filled from the requested schema) cut into that many pieces; calls that
//! offer tools and have no tool result yet as text tokens and then one call
//! of a tool without required arguments.
//!
//! Each text token is `@<µs since the epoch> `: the time the chunk was
//! made, just before it is written to the socket. A client finding the
//! token in the server's SSE subtracts it from the time it read it — the
//! whole path from the model's socket to the client's, on one machine and
//! one clock.
//!
//! It speaks HTTP/1.1 and h2c (HTTP/2 with prior knowledge, for endpoints
//! set `http2 = true`): over h2 every call of a server is a stream of one
//! connection, and [`MAX_STREAMS`] of them may be open at once — beyond
//! hyper's default of 200 a client would queue the rest.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use stategraph::internals::events::now_micros;

/// Concurrent h2 streams per connection: more than the chats of any mode.
const MAX_STREAMS: u32 = 100_000;

/// How a call streams.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Chunks per call.
    pub tokens: usize,
    /// Time between chunks.
    pub every: Duration,
}

/// Serves the model until the process ends; returns its base URL (`…/v1`).
pub async fn start(pace: Pace) -> String {
    start_paced(pace, pace).await
}

/// Like [`start`], with plain text answers (a call that offers no tool, or
/// has its tool's result: the answer a user reads) paced by `answer`, and
/// every other call (routing, tool calls, structured output) by `pace`.
pub async fn start_paced(pace: Pace, answer: Pace) -> String {
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(Arc::new((pace, answer)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the model");
    let addr = listener.local_addr().expect("model address");
    tokio::spawn(serve(listener, app));
    format!("http://{addr}/v1")
}

/// Serves each connection as HTTP/1.1 or h2c, whichever its first bytes say.
async fn serve(listener: tokio::net::TcpListener, app: Router) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(MAX_STREAMS);
    let builder = Arc::new(builder);
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            // Out of descriptors, say: try again rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = socket.set_nodelay(true);
        let (builder, service) = (Arc::clone(&builder), TowerToHyperService::new(app.clone()));
        tokio::spawn(async move {
            let _ = builder
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

/// What one call answers, before it is cut into chunks.
enum Answer {
    /// Stamped text tokens.
    Text,
    /// JSON text, in pieces.
    Json(String),
    /// Stamped text tokens, then a tool call.
    Tool(String),
}

async fn complete(State(paces): State<Arc<(Pace, Pace)>>, body: String) -> Response {
    let req: Value = serde_json::from_str(&body).unwrap_or_default();
    let answer = if let Some(schema) = req.pointer("/response_format/json_schema/schema") {
        Answer::Json(fill(schema).to_string())
    } else {
        let has_result = req["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        let tool = req["tools"].as_array().and_then(|tools| {
            tools.iter().find_map(|t| {
                let f = &t["function"];
                let required = f["parameters"]["required"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty());
                (!required).then(|| f["name"].as_str().unwrap_or_default().to_owned())
            })
        });
        match tool {
            Some(name) if !has_result => Answer::Tool(name),
            _ => Answer::Text,
        }
    };
    let Pace { tokens, every } = match answer {
        Answer::Text => paces.1,
        Answer::Json(_) | Answer::Tool(_) => paces.0,
    };
    let start = tokio::time::Instant::now();
    let answer = Arc::new(answer);
    let frames = futures::stream::unfold(0usize, move |k| {
        let answer = Arc::clone(&answer);
        async move {
            if k >= tokens + 3 {
                return None;
            }
            if k < tokens {
                tokio::time::sleep_until(start + every * (k as u32 + 1)).await;
            }
            let frame = Bytes::from(frame(&answer, k, tokens));
            Some((Ok::<_, Infallible>(frame), k + 1))
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(frames))
        .unwrap_or_default()
}

/// Frame `k` of a call: `tokens` content chunks, then finish, usage, `[DONE]`.
fn frame(answer: &Answer, k: usize, tokens: usize) -> String {
    if k == tokens + 2 {
        return "data: [DONE]\n\n".to_owned();
    }
    if k == tokens + 1 {
        return chunk(
            "[]",
            &format!(
                r#"{{"prompt_tokens":100,"completion_tokens":{tokens},"total_tokens":{}}}"#,
                tokens + 100
            ),
        );
    }
    if k == tokens {
        let reason = if matches!(answer, Answer::Tool(_)) {
            "tool_calls"
        } else {
            "stop"
        };
        return chunk(
            &format!(r#"[{{"index":0,"delta":{{}},"finish_reason":"{reason}"}}]"#),
            "null",
        );
    }
    let content = match answer {
        Answer::Json(text) => {
            let chars: Vec<char> = text.chars().collect();
            let per = chars.len().div_ceil(tokens);
            chars.iter().skip(k * per).take(per).collect()
        }
        Answer::Tool(name) if k + 1 == tokens => {
            let call = json!([{"index": 0, "id": "call_0", "type": "function",
                "function": {"name": name, "arguments": "{}"}}]);
            return chunk(
                &format!(r#"[{{"index":0,"delta":{{"tool_calls":{call}}},"finish_reason":null}}]"#),
                "null",
            );
        }
        Answer::Text | Answer::Tool(_) => format!("@{} ", now_micros()),
    };
    let role = if k == 0 { r#""role":"assistant","# } else { "" };
    chunk(
        &format!(
            r#"[{{"index":0,"delta":{{{role}"content":{}}},"finish_reason":null}}]"#,
            Value::String(content)
        ),
        "null",
    )
}

/// One `chat.completion.chunk` event.
fn chunk(choices: &str, usage: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"bench\",\"choices\":{choices},\"usage\":{usage}}}\n\n"
    )
}

/// A value satisfying `schema` (enums choose `RESEARCH` when offered, lists
/// with a minimum get that many strings).
fn fill(schema: &Value) -> Value {
    if let Some(options) = schema["enum"].as_array() {
        return options
            .iter()
            .find(|o| *o == "RESEARCH")
            .or(options.first())
            .cloned()
            .unwrap_or(Value::Null);
    }
    match schema["type"].as_str() {
        Some("object") => Value::Object(
            schema["properties"]
                .as_object()
                .map(|p| p.iter().map(|(k, s)| (k.clone(), fill(s))).collect())
                .unwrap_or_default(),
        ),
        Some("array") => {
            let n = schema["minItems"].as_u64().unwrap_or(0);
            (0..n)
                .map(|i| json!(format!("A follow-up question {i}?")))
                .collect()
        }
        Some("boolean") => json!(false),
        Some("integer" | "number") => json!(0),
        _ => json!("en"),
    }
}
