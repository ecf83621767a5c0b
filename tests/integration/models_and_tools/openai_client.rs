//! The OpenAI-compatible client over real HTTP: a mock chat-completions
//! server (axum on 127.0.0.1:0) plays scripted replies — exact SSE bytes,
//! error statuses, delays — and records every request it receives, so each
//! test can check what the client sent, what it streamed back and how many
//! requests its retries made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};
use stategraph::internals::events::{EventKind, EventSink, NodeEvents, ToolCallRecord, Usage};
use stategraph::internals::llm::{
    ChatMessage, ChatModel, ChatRequest, EndpointSettings, FallbackModel, JsonSchemaFormat,
    LlmChunk, LlmConfig, LlmError, ModelCall, OpenAiModel, RetryPolicy, Timeouts, ToolDef,
    call_model,
};
use tokio::sync::mpsc;
use uuid::Uuid;

// ---------------------------------------------------------------- SSE bytes

/// One `chat.completion.chunk` event, as OpenAI frames it.
fn chunk(choices: &str, usage: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":{choices},\"usage\":{usage}}}\n\n"
    )
}

fn role() -> String {
    chunk(
        r#"[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]"#,
        "null",
    )
}

fn text(t: &str) -> String {
    chunk(
        &format!(
            r#"[{{"index":0,"delta":{{"content":{}}},"logprobs":null,"finish_reason":null}}]"#,
            json!(t)
        ),
        "null",
    )
}

fn finish(reason: &str) -> String {
    chunk(
        &format!(r#"[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"{reason}"}}]"#),
        "null",
    )
}

fn usage(prompt: u64, completion: u64) -> String {
    chunk(
        "[]",
        &format!(
            r#"{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":0,"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}}"#,
            prompt + completion
        ),
    )
}

const DONE: &str = "data: [DONE]\n\n";

/// The canonical two-call tool stream of PROTOCOLS.md §2.2, byte for byte.
const TOOL_CALLS: &[&str] = &[
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_W1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"ci\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\": \\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_T2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"{}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":31,\"completion_tokens\":17,\"total_tokens\":48}}\n\n",
    "data: [DONE]\n\n",
];

const ERROR_EVENT: &str = "data: {\"error\":{\"message\":\"upstream disconnected\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n";

/// A complete text answer.
fn answer(words: &[&str]) -> Reply {
    let mut parts = vec![role()];
    parts.extend(words.iter().map(|w| text(w)));
    parts.extend([
        finish("stop"),
        usage(9, words.len() as u64),
        DONE.to_owned(),
    ]);
    Reply::sse(parts)
}

// ---------------------------------------------------------------- the mock

/// One scripted response: status, headers and body parts sent with delays.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    parts: Vec<(Duration, String)>,
}

impl Reply {
    fn sse(parts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::timed(parts.into_iter().map(|p| (Duration::ZERO, p.into())))
    }

    fn timed(parts: impl IntoIterator<Item = (Duration, String)>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream")],
            parts: parts.into_iter().collect(),
        }
    }

    fn error(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json")],
            parts: vec![(Duration::ZERO, body.to_owned())],
        }
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// A request as the mock received it.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    authorization: Option<String>,
    body: Value,
}

#[derive(Default)]
struct MockState {
    replies: Mutex<VecDeque<Reply>>,
    received: Mutex<Vec<Received>>,
}

/// A mock OpenAI-compatible server.
struct Mock {
    base_url: String,
    state: Arc<MockState>,
}

impl Mock {
    async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let state = Arc::new(MockState {
            replies: Mutex::new(replies.into_iter().collect()),
            ..Default::default()
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.state.received.lock().unwrap().len()
    }

    /// Settings with fast retries and short timeouts.
    fn settings(&self) -> EndpointSettings {
        EndpointSettings {
            base_url: self.base_url.clone(),
            api_key: Some("test-key".into()),
            timeouts: Timeouts {
                connect: Duration::from_secs(1),
                first_token: Duration::from_secs(2),
                total: Duration::from_secs(5),
            },
            retry: RetryPolicy {
                attempts: 3,
                backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(50),
                max_retry_after: Duration::from_secs(2),
            },
            ..Default::default()
        }
    }

    fn model(&self) -> OpenAiModel {
        OpenAiModel::new(self.settings(), "mock-model").unwrap()
    }
}

async fn handle(
    State(state): State<Arc<MockState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = state.replies.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        return Response::builder()
            .status(500)
            .body(Body::from("mock: no reply scripted"))
            .unwrap();
    };
    let mut response = Response::builder().status(StatusCode::from_u16(reply.status).unwrap());
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    let body = futures::stream::iter(reply.parts).then(|(delay, part)| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(Bytes::from(part))
    });
    response.body(Body::from_stream(body)).unwrap()
}

// ---------------------------------------------------------------- helpers

fn ask(question: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::User {
            content: question.into(),
        }],
        ..Default::default()
    }
}

async fn run(model: &dyn ChatModel, request: ChatRequest) -> Vec<Result<LlmChunk, LlmError>> {
    model.stream(&request).collect().await
}

fn text_of(chunks: &[Result<LlmChunk, LlmError>]) -> String {
    chunks
        .iter()
        .filter_map(|c| match c {
            Ok(LlmChunk::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn errors(chunks: &[Result<LlmChunk, LlmError>]) -> Vec<&LlmError> {
    chunks.iter().filter_map(|c| c.as_ref().err()).collect()
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn streams_text_finish_and_usage() {
    let mock = Mock::start([answer(&["Hello", ",", " world"])]).await;
    let out = run(&mock.model(), ask("hi")).await;
    let chunks: Vec<LlmChunk> = out.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        chunks,
        vec![
            LlmChunk::Text("Hello".into()),
            LlmChunk::Text(",".into()),
            LlmChunk::Text(" world".into()),
            LlmChunk::Finish("stop".into()),
            LlmChunk::Usage(Usage {
                prompt_tokens: 9,
                completion_tokens: 3,
                ..Default::default()
            }),
        ]
    );
    let received = mock.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(
        received[0].authorization.as_deref(),
        Some("Bearer test-key")
    );
}

/// The stream is parsed by this crate (not async-openai's task): comments,
/// `keepalive` events, CRLF line ends and events split across reads must
/// all come out as the same answer.
#[tokio::test]
async fn comments_keepalives_and_events_split_across_reads_are_parsed() {
    let hello = text("Hello");
    let (head, tail) = hello.split_at(hello.len() / 2);
    let world = text(" world").replace('\n', "\r\n");
    let ms = Duration::from_millis(20);
    let mock = Mock::start([Reply::timed([
        (Duration::ZERO, ": an SSE comment\n\n".to_owned()),
        (Duration::ZERO, role()),
        (ms, head.to_owned()),
        (ms, tail.to_owned()),
        (ms, "event: keepalive\ndata: {}\n\n".to_owned()),
        (ms, world),
        (Duration::ZERO, finish("stop")),
        (Duration::ZERO, usage(9, 2)),
        (Duration::ZERO, DONE.to_owned()),
    ])])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(errors(&out).is_empty(), "{out:?}");
    assert_eq!(text_of(&out), "Hello world");
    assert!(
        out.iter()
            .any(|c| matches!(c, Ok(LlmChunk::Finish(f)) if f == "stop")),
        "{out:?}"
    );
}

#[tokio::test]
async fn streams_two_parallel_tool_calls() {
    let mock = Mock::start([Reply::sse(TOOL_CALLS.iter().copied())]).await;
    let out = run(&mock.model(), ask("weather and time in Paris?")).await;
    let chunks: Vec<LlmChunk> = out.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        chunks,
        vec![
            LlmChunk::ToolCallStart {
                index: 0,
                id: "call_W1".into(),
                name: "get_weather".into()
            },
            LlmChunk::ToolCallArgs {
                index: 0,
                delta: "{\"ci".into()
            },
            LlmChunk::ToolCallArgs {
                index: 0,
                delta: "ty\": \"Paris\"}".into()
            },
            LlmChunk::ToolCallStart {
                index: 1,
                id: "call_T2".into(),
                name: "get_time".into()
            },
            LlmChunk::ToolCallArgs {
                index: 1,
                delta: "{}".into()
            },
            LlmChunk::Finish("tool_calls".into()),
            LlmChunk::Usage(Usage {
                prompt_tokens: 31,
                completion_tokens: 17,
                ..Default::default()
            }),
        ]
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test]
async fn accepts_reasoning_and_a_nonstandard_finish_reason() {
    let mock = Mock::start([Reply::sse([
        chunk(r#"[{"index":0,"delta":{"role":"assistant","reasoning_content":"Think."},"finish_reason":null}]"#, "null"),
        text("42"),
        finish("eos"),
        DONE.to_owned(),
    ])])
    .await;
    let chunks: Vec<LlmChunk> = run(&mock.model(), ask("?"))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        chunks,
        vec![
            LlmChunk::Reasoning("Think.".into()),
            LlmChunk::Text("42".into()),
            LlmChunk::Finish("eos".into())
        ]
    );
}

#[tokio::test]
async fn sends_the_request_body_with_tools_schema_and_stream_options() {
    let mock = Mock::start([answer(&["{\"city\":\"Paris\"}"])]).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
    let params =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let request = ChatRequest {
        messages: vec![
            ChatMessage::System {
                content: "Be brief.".into(),
            },
            ChatMessage::User {
                content: "Weather?".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCallRecord {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                }],
            },
            ChatMessage::Tool {
                call_id: "call_1".into(),
                content: "{\"temp\":21}".into(),
            },
        ],
        tools: vec![ToolDef {
            name: "get_weather".into(),
            description: "Weather by city".into(),
            parameters: params.clone().into(),
            partition: None,
        }],
        response_format: Some(JsonSchemaFormat::new("place", schema.clone())),
        temperature: Some(0.25),
        max_tokens: Some(100),
        stop: vec!["END".into()],
        reasoning_effort: None,
    };
    let out = run(&mock.model(), request).await;
    assert_eq!(text_of(&out), "{\"city\":\"Paris\"}");
    let body = &mock.received()[0].body;
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": true}})
    );
    // A tool goes in strict mode, its parameters in strict form (see
    // tests/integration/models_and_tools/providers/strict_tools.rs).
    let mut strict_params = params.clone();
    strict_params["additionalProperties"] = json!(false);
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather by city", "parameters": strict_params, "strict": true}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}"},
        ])
    );
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["max_tokens"], 100);
}

/// llama.cpp answers a history whose tool-call arguments are not JSON with
/// a 500 (`Failed to parse tool call arguments as JSON`), so a model cut
/// off mid-call would fail every later call of an agent — after retries.
#[tokio::test]
async fn broken_tool_arguments_in_the_history_are_sent_as_an_empty_object() {
    let mock = Mock::start([answer(&["ok"])]).await;
    let request = ChatRequest {
        messages: vec![
            ChatMessage::User {
                content: "Weather?".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCallRecord {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        arguments: "{\"city\": \"Par".into(),
                    },
                    ToolCallRecord {
                        id: "call_2".into(),
                        name: "get_weather".into(),
                        arguments: "{\"city\": \"Rome\"}".into(),
                    },
                ],
            },
            ChatMessage::Tool {
                call_id: "call_1".into(),
                content: "{\"error\":true,\"type\":\"validation_error\"}".into(),
            },
            ChatMessage::Tool {
                call_id: "call_2".into(),
                content: "{\"temp\":21}".into(),
            },
        ],
        ..Default::default()
    };
    let out = run(&mock.model(), request).await;
    assert!(errors(&out).is_empty(), "{out:?}");
    let body = &mock.received()[0].body;
    let sent: Vec<&str> = body["messages"][1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(sent, ["{}", "{\"city\": \"Rome\"}"]);
}

#[tokio::test]
async fn a_role_extra_table_adds_body_fields_without_overriding_the_request() {
    let mock = Mock::start([answer(&["ok"]), answer(&["ok"])]).await;
    let config: LlmConfig = toml::from_str(&format!(
        r#"
        [endpoints.default]
        base_url = "{}"
        [roles.tools]
        model = "local"
        [roles.tools.extra]
        stop = ["</tool_call>"]
        cache_prompt = false
        temperature = 0.5
        max_tokens = 64
        "#,
        mock.base_url
    ))
    .unwrap();
    let models = config.build_models_with(|_| None).unwrap();
    let mut request = ask("hi");
    request.temperature = Some(0.0);
    let out = run(&**models.for_role("tools"), request).await;
    assert!(errors(&out).is_empty(), "{out:?}");
    run(&**models.for_role("chat"), ask("hi")).await;
    let received = mock.received();
    let body = &received[0].body;
    assert_eq!(body["model"], "local");
    assert_eq!(body["stop"], json!(["</tool_call>"]));
    assert_eq!(body["cache_prompt"], false);
    assert_eq!(body["temperature"], 0.0, "the request's temperature wins");
    assert_eq!(body["max_tokens"], 64, "the role's default fills in");
    assert_eq!(body["stream"], true);
    let other = received[1].body.as_object().unwrap();
    assert!(
        !other.contains_key("stop") && !other.contains_key("cache_prompt"),
        "another role sends none of it: {other:?}"
    );
}

#[tokio::test]
async fn retries_429_after_the_retry_after_delay() {
    let limited = Reply::error(
        429,
        r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
    )
    .header("retry-after-ms", "300");
    let mock = Mock::start([limited, answer(&["ok"])]).await;
    let started = Instant::now();
    let out = run(&mock.model(), ask("hi")).await;
    let waited = started.elapsed();
    assert!(errors(&out).is_empty(), "{out:?}");
    assert_eq!(text_of(&out), "ok");
    assert_eq!(mock.count(), 2);
    assert!(
        waited >= Duration::from_millis(300),
        "retried after {waited:?}, before retry-after-ms"
    );
}

#[tokio::test]
async fn a_retry_after_above_the_cap_is_not_retried() {
    let limited = Reply::error(
        429,
        r#"{"error":{"message":"Slow down","type":"tokens","code":"rate_limit_exceeded"}}"#,
    )
    .header("retry-after", "30");
    let mock = Mock::start([limited, answer(&["unused"])]).await;
    let started = Instant::now();
    let out = run(&mock.model(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Http { status: 429, message })] if message == "Slow down"),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn retries_500_then_succeeds() {
    let mock = Mock::start([
        Reply::error(500, "Internal Server Error"),
        answer(&["fine"]),
    ])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(errors(&out).is_empty(), "{out:?}");
    assert_eq!(text_of(&out), "fine");
    assert_eq!(mock.count(), 2);
}

#[tokio::test]
async fn gives_up_on_503_after_the_configured_attempts() {
    let overloaded = || {
        Reply::error(
            503,
            r#"{"error":{"message":"The engine is currently overloaded","type":"server_error"}}"#,
        )
    };
    let mock = Mock::start([
        overloaded(),
        overloaded(),
        overloaded(),
        answer(&["too late"]),
    ])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Http { status: 503, message })] if message == "The engine is currently overloaded"),
        "{out:?}"
    );
    assert_eq!(mock.count(), 3);
}

#[tokio::test]
async fn insufficient_quota_is_not_retried() {
    let quota = Reply::error(
        429,
        r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
    );
    let mock = Mock::start([quota, answer(&["unused"])]).await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Http { status: 429, message })] if message == "You exceeded your current quota"),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test]
async fn a_400_with_a_numeric_code_keeps_its_message_and_is_not_retried() {
    let bad = Reply::error(
        400,
        r#"{"object":"error","message":"maximum context length is 8192 tokens","type":"BadRequestError","param":null,"code":400}"#,
    );
    let mock = Mock::start([bad]).await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Http { status: 400, message })] if message == "maximum context length is 8192 tokens"),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test]
async fn a_slow_first_token_times_out() {
    let slow = Reply::timed([
        (Duration::ZERO, role()),
        (Duration::from_millis(1500), text("late")),
    ]);
    let mock = Mock::start([slow]).await;
    let mut settings = mock.settings();
    settings.timeouts.first_token = Duration::from_millis(300);
    let started = Instant::now();
    let out = run(
        &OpenAiModel::new(settings, "mock-model").unwrap(),
        ask("hi"),
    )
    .await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Timeout("first token"))]),
        "{out:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(1),
        "{took:?}"
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test]
async fn a_stalled_stream_hits_the_total_timeout_after_its_text() {
    let stalled = Reply::timed([
        (Duration::ZERO, role()),
        (Duration::ZERO, text("partial")),
        (Duration::from_secs(3), text("x")),
    ]);
    let mock = Mock::start([stalled]).await;
    let mut settings = mock.settings();
    settings.timeouts.total = Duration::from_millis(400);
    let out = run(
        &OpenAiModel::new(settings, "mock-model").unwrap(),
        ask("hi"),
    )
    .await;
    assert!(
        matches!(out.as_slice(), [Ok(LlmChunk::Text(t)), Err(LlmError::Timeout("total"))] if t == "partial"),
        "{out:?}"
    );
}

#[tokio::test]
async fn an_error_event_after_text_ends_the_call_with_a_stream_error() {
    let mock = Mock::start([
        Reply::sse([role(), text("Hel"), text("lo"), ERROR_EVENT.to_owned()]),
        answer(&["unused"]),
    ])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(text_of(&out), "Hello");
    assert!(
        matches!(&out[2], Err(LlmError::Stream(m)) if m.contains("upstream disconnected")),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1, "text was streamed, so no retry");
}

#[tokio::test]
async fn an_error_event_before_any_content_is_retried_transparently() {
    let mock = Mock::start([
        Reply::sse([role(), ERROR_EVENT.to_owned()]),
        answer(&["second", " try"]),
    ])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(errors(&out).is_empty(), "{out:?}");
    assert_eq!(text_of(&out), "second try");
    assert_eq!(
        out.iter()
            .filter(|c| matches!(c, Ok(LlmChunk::Finish(_))))
            .count(),
        1
    );
    assert_eq!(mock.count(), 2);
    assert_eq!(
        mock.received()[0].body,
        mock.received()[1].body,
        "the same request again"
    );
}

#[tokio::test]
async fn a_malformed_chunk_ends_the_call_cleanly() {
    let mock = Mock::start([Reply::sse([
        role(),
        text("Hi"),
        "data: {\"choices\":[{\"delta\":\n\n".to_owned(),
        text("never"),
    ])])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(text_of(&out), "Hi");
    assert!(
        matches!(&out[1], Err(LlmError::Stream(m)) if m.starts_with("malformed chunk")),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test]
async fn a_stream_cut_off_after_text_is_an_error_not_a_short_answer() {
    let mock = Mock::start([Reply::sse([role(), text("half an")]), answer(&["unused"])]).await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Ok(LlmChunk::Text(t)), Err(LlmError::Stream(m))]
            if t == "half an" && m.contains("before a finish_reason")),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test]
async fn http_and_stream_retries_share_one_attempt_budget() {
    let mock = Mock::start([
        Reply::error(503, "busy"),
        Reply::sse(["data: not json\n\n"]),
        Reply::error(503, "still busy"),
        answer(&["unused"]),
    ])
    .await;
    let out = run(&mock.model(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Http { status: 503, message })] if message == "still busy"),
        "{out:?}"
    );
    assert_eq!(mock.count(), 3, "attempts = 3 in all");
}

#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let settings = EndpointSettings {
        base_url: format!("http://{addr}/v1"),
        api_key: None,
        timeouts: Timeouts::default(),
        retry: RetryPolicy {
            attempts: 2,
            backoff: Duration::from_millis(10),
            ..Default::default()
        },
        ..Default::default()
    };
    let started = Instant::now();
    let out = run(&OpenAiModel::new(settings, "m").unwrap(), ask("hi")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::Connect(_))]),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn the_fallback_answers_after_the_primary_exhausts_its_retries() {
    let primary = Mock::start([
        Reply::error(502, "bad gateway"),
        Reply::error(502, "bad gateway"),
        Reply::error(502, "bad gateway"),
    ])
    .await;
    let fallback = Mock::start([answer(&["from", " backup"])]).await;
    let model = FallbackModel::new(Arc::new(primary.model()), Arc::new(fallback.model()));
    let out = run(&model, ask("hi")).await;
    assert!(errors(&out).is_empty(), "{out:?}");
    assert_eq!(text_of(&out), "from backup");
    assert_eq!((primary.count(), fallback.count()), (3, 1));
    assert_eq!(
        primary.received()[0].body["messages"],
        fallback.received()[0].body["messages"]
    );
}

#[tokio::test]
async fn call_model_turns_the_stream_into_run_events() {
    let mut parts = vec![role(), text("Checking.")];
    parts.extend(TOOL_CALLS[1..].iter().map(|s| (*s).to_owned()));
    let mock = Mock::start([Reply::sse(parts)]).await;
    let (tx, mut rx) = mpsc::channel(64);
    let events = NodeEvents::new(
        Arc::new(EventSink::new(Uuid::nil(), Some(tx), 0, false)),
        1,
        "agent".into(),
        0,
    );
    let role: Arc<str> = "chat".into();
    let cx = ModelCall {
        events: &events,
        role: &role,
        call: 0,
        quiet: &[],
        recorder: None,
        endpoint: "",
    };
    let reply = call_model(&mock.model(), cx, &ask("weather?"))
        .await
        .unwrap();
    let (output, used) = (reply.output().clone(), reply.usage());
    let calls = vec![
        ToolCallRecord {
            id: "call_W1".into(),
            name: "get_weather".into(),
            arguments: "{\"city\": \"Paris\"}".into(),
        },
        ToolCallRecord {
            id: "call_T2".into(),
            name: "get_time".into(),
            arguments: "{}".into(),
        },
    ];
    assert_eq!(output.text, "Checking.");
    assert_eq!(output.tool_calls, calls);
    assert_eq!(output.finish_reason, "tool_calls");
    assert_eq!(
        used,
        Usage {
            prompt_tokens: 31,
            completion_tokens: 17,
            ..Default::default()
        }
    );
    let mut kinds = Vec::new();
    while let Ok(event) = rx.try_recv() {
        kinds.push(event.event.clone());
    }
    assert!(
        matches!(&kinds[0], EventKind::LlmStarted(s) if &*s.role == "chat" && s.model == "mock-model")
    );
    assert!(matches!(&kinds[1], EventKind::TextDelta { delta, .. } if delta == "Checking."));
    assert!(
        matches!(&kinds[2], EventKind::ToolCallStarted { call_id, tool } if call_id == "call_W1" && tool == "get_weather")
    );
    let deltas: Vec<&str> = kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::ToolCallDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["{\"ci", "ty\": \"Paris\"}", "{}"]);
    assert!(
        matches!(kinds.last(), Some(EventKind::LlmFinished(f)) if f.output.tool_calls == calls && f.usage.total() == 48)
    );
    assert_eq!(kinds.len(), 8);
}

/// A role's `max_tokens` caps what nodes ask for, and bounds calls that
/// ask for nothing.
#[tokio::test]
async fn a_role_cap_bounds_max_tokens() {
    let mock = Mock::start([answer(&["a"]), answer(&["b"]), answer(&["c"])]).await;
    let model = mock.model().with_max_tokens(Some(50));
    for asked in [Some(1024), None, Some(10)] {
        let mut request = ask("hi");
        request.max_tokens = asked;
        run(&model, request).await;
    }
    let sent: Vec<Value> = mock
        .received()
        .iter()
        .map(|r| r.body["max_tokens"].clone())
        .collect();
    assert_eq!(sent, [json!(50), json!(50), json!(10)]);
}

#[tokio::test]
async fn a_content_policy_refusal_is_its_own_error_and_not_retried() {
    let azure = Reply::error(
        400,
        r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}"#,
    );
    let mock = Mock::start([azure, answer(&["unused"])]).await;
    let out = run(&mock.model(), ask("something the provider refuses")).await;
    assert!(
        matches!(out.as_slice(), [Err(LlmError::ContentPolicy(m))] if m.contains("content management policy")),
        "{out:?}"
    );
    assert_eq!(mock.count(), 1);
}

/// Through the server: a refusal is a clear answer with a `data-refusal`
/// part and finish reason `content-filter`, the run finishes (not a
/// generic error), and the stored message says the same.
#[tokio::test]
async fn a_content_policy_refusal_reaches_the_user_as_a_refusal() {
    let refused = Reply::error(
        400,
        r#"{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}"#,
    );
    let mock = Mock::start([refused]).await;
    let server = crate::support::server::TestServer::start(Arc::new(mock.model()), |_| {}).await;
    let mut body = crate::support::chat_body("refused", "something the provider refuses");
    body["forced_intent"] = json!("DIRECT");
    let http = reqwest::Client::new();
    let resp = crate::support::post_json(&http, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let (ok, report) = crate::support::aisdk_validate(&sse);
    assert!(ok, "{report}\n{sse}");
    let chunks: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    assert!(chunks.iter().all(|c| c["type"] != "error"), "{sse}");
    let refusal = chunks
        .iter()
        .find(|c| c["type"] == "data-refusal")
        .expect("a refusal part");
    assert_eq!(refusal["data"]["node"], "direct");
    assert!(
        refusal["data"]["message"]
            .as_str()
            .unwrap()
            .contains("safety system")
    );
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect();
    assert!(text.contains("content policy"), "{text}");
    let finish = chunks.iter().find(|c| c["type"] == "finish").unwrap();
    assert_eq!(finish["finishReason"], "content-filter", "{finish}");
    let stored: Value = http
        .get(server.url("/api/chat/refused"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = &stored["messages"][1];
    assert!(
        answer["parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["type"] == "text" && p["text"].as_str().unwrap().contains("content policy")),
        "{answer}"
    );
    assert_eq!(mock.count(), 1, "a refusal is not retried");
    server.shutdown().await;
}

/// Files attached to the user's message reach the model over the wire: a
/// CSV (base64 `data:` URL) and a markdown file (percent-encoded) as text
/// under `[file: …]` lines, an image as an `image_url` content part, a PDF
/// named but not read.
#[tokio::test]
async fn file_parts_of_the_user_message_reach_the_model() {
    let mock = Mock::start([answer(&["Read", " them."])]).await;
    let server = crate::support::server::TestServer::start(Arc::new(mock.model()), |_| {}).await;
    let csv = "country,value\nKEN,55.1\nNGA,218.5\n";
    let body = json!({
        "id": "files",
        "forced_intent": "DIRECT",
        "messages": [{"id": "u1", "role": "user", "parts": [
            {"type": "text", "text": "What do these files say?"},
            {"type": "file", "mediaType": "text/csv", "filename": "pop.csv",
             "url": format!("data:text/csv;base64,{}", base64_of(csv))},
            {"type": "file", "mediaType": "text/markdown", "filename": "notes.md",
             "url": "data:text/markdown,%23%20Notes%0Agrowth%20is%20up"},
            {"type": "file", "mediaType": "image/png", "filename": "chart.png",
             "url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "file", "mediaType": "application/pdf", "filename": "report.pdf",
             "url": "data:application/pdf;base64,JVBERi0="}
        ]}]
    });
    let http = reqwest::Client::new();
    let resp = crate::support::post_json(&http, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    assert!(sse.contains("them."), "{sse}");
    let sent = &mock.received()[0].body;
    let users: Vec<&Value> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "the question is sent once: {sent}");
    let parts = users[0]["content"].as_array().expect("content parts");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("What do these files say?\n\n[file: pop.csv (text/csv)]\n"),
        "{text}"
    );
    assert!(text.contains(csv), "{text}");
    assert!(
        text.contains("[file: notes.md (text/markdown)]\n# Notes\ngrowth is up"),
        "{text}"
    );
    assert!(
        text.contains(
            "[file: report.pdf (application/pdf)]\n(attached; its content cannot be read here)"
        ),
        "{text}"
    );
    assert_eq!(
        parts[1],
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
    );
    assert_eq!(parts.len(), 2);
    server.shutdown().await;
}

/// Standard base64 (the test's own, so it checks the server's decoder).
fn base64_of(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
