//! Local emulators of OpenAI (classic and reasoning families), Azure
//! OpenAI and Anthropic, on one axum server at 127.0.0.1:0.
//!
//! Every request is validated by the provider's rules (`openai_rules`,
//! `anthropic_rules`, each rule with its source); a violation is answered
//! as the provider answers it and recorded as rejected. A valid request is
//! answered from the test's script, or else automatically: structured
//! requests with the smallest instance of their schema, others with a
//! short text; streamed in the provider's wire format:
//! - OpenAI: `data: {chat.completion.chunk}` events, every chunk with
//!   `"usage": null` and one `choices: []` usage chunk before `data:
//!   [DONE]` (`stream_options.include_usage`), as the official SDK's
//!   `chat_completion_chunk.py` types them and PROTOCOLS.md §2.2 shows;
//! - Anthropic: named events `message_start`, `content_block_start`,
//!   `ping`, `content_block_delta` (`text_delta`, `input_json_delta`,
//!   `thinking_delta`, `signature_delta`), `content_block_stop`,
//!   `message_delta` (`stop_reason`, cumulative `usage`), `message_stop`,
//!   as the official SDK's `raw_message_stream_event.py` types them.
//!
//! Routes: `/openai/v1/chat/completions`, Azure's
//! `/azure/openai/deployments/{deployment}/chat/completions?api-version=…`
//! (`api-key` header; deployment `reasoning-prod` serves gpt-5.1, any
//! other the model of its name), `/anthropic/v1/messages`; and a small web
//! for the research graph: `/search?q=…&format=json` answers as a SearXNG
//! instance does (`{"results": [{title, url, content}]}`), with three
//! results on `/page/{n}`, which serve short HTML pages.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::anthropic_rules;
use super::instance::minimal;
use super::openai_rules::{self, Rejection, is_reasoning};

/// What the emulator answers to one valid request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A short text, or the minimal instance of a structured request.
    Auto,
    /// This text.
    Text(String),
    /// These tool calls (name, arguments), in parallel.
    Tools(Vec<(String, Value)>),
    /// Thinking, then the reply.
    Thinking(String, Box<Reply>),
    /// An error status with its body and headers.
    Status(u16, Value, Vec<(&'static str, &'static str)>),
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct Received {
    /// `openai`, `azure` or `anthropic`.
    pub api: &'static str,
    /// The body.
    pub body: Value,
    /// The headers.
    pub headers: HeaderMap,
    /// The rejection, if it was rejected.
    pub rejected: Option<Rejection>,
}

#[derive(Default)]
struct Shared {
    script: VecDeque<Reply>,
    /// Tools a model calls whenever they are offered (see
    /// [`Emulator::prefer_tools`]).
    preferred: Vec<(String, Value)>,
    received: Vec<Received>,
    cached_prefixes: HashSet<String>,
}

/// A running emulator.
pub struct Emulator {
    /// Its address.
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type AppState = Arc<Mutex<Shared>>;

impl Emulator {
    /// Starts the emulator.
    pub async fn start() -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let app = Router::new()
            .route("/openai/v1/chat/completions", post(openai))
            .route(
                "/azure/openai/deployments/{deployment}/chat/completions",
                post(azure),
            )
            .route("/anthropic/v1/messages", post(anthropic))
            .route("/search", get(search))
            .route("/page/{n}", get(page))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// Base URLs for the endpoint configs.
    pub fn url(&self, api: &str) -> String {
        match api {
            "openai" => format!("http://{}/openai/v1", self.addr),
            "azure" => format!("http://{}/azure", self.addr),
            "web" => format!("http://{}", self.addr),
            _ => format!("http://{}/anthropic/v1", self.addr),
        }
    }

    /// Queues replies for the next valid requests.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.lock().unwrap().script.extend(replies);
    }

    /// Makes the automatic answer call these tools (name, arguments over
    /// the minimal instance of the tool's parameters) whenever a request
    /// offers them and no tool result has come back in it yet — all that
    /// are offered, in parallel — instead of the first offered tool.
    pub fn prefer_tools(&self, tools: impl IntoIterator<Item = (String, Value)>) {
        self.shared.lock().unwrap().preferred = tools.into_iter().collect();
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.lock().unwrap().received.clone()
    }

    /// The rejected requests so far, with why.
    pub fn rejected(&self) -> Vec<(Value, Rejection)> {
        self.received()
            .into_iter()
            .filter_map(|r| r.rejected.map(|why| (r.body, why)))
            .collect()
    }
}

fn record(
    state: &AppState,
    api: &'static str,
    headers: &HeaderMap,
    body: &Value,
    rejected: Option<Rejection>,
) -> Reply {
    let mut s = state.lock().unwrap();
    s.received.push(Received {
        api,
        body: body.clone(),
        headers: headers.clone(),
        rejected: rejected.clone(),
    });
    match rejected {
        Some(_) => Reply::Auto,
        None => match s.script.pop_front() {
            Some(reply) => reply,
            None => preferred_calls(&s.preferred, api, body).unwrap_or(Reply::Auto),
        },
    }
}

/// The calls of preferred tools a request offers (see
/// [`Emulator::prefer_tools`]), unless its tools already answered or a
/// tool is forced.
fn preferred_calls(preferred: &[(String, Value)], api: &str, body: &Value) -> Option<Reply> {
    let anthropic = api == "anthropic";
    let forced = if anthropic {
        body["tool_choice"]["type"] == "tool"
    } else {
        body["tool_choice"].is_object()
    };
    let answered = if anthropic {
        body["messages"].to_string().contains("\"tool_result\"")
    } else {
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["role"] == "tool")
    };
    if forced || answered {
        return None;
    }
    let offered = body["tools"].as_array()?;
    let calls: Vec<(String, Value)> = preferred
        .iter()
        .filter_map(|(name, args)| {
            let tool = offered.iter().find(|t| {
                let n = if anthropic {
                    &t["name"]
                } else {
                    &t["function"]["name"]
                };
                n == name.as_str()
            })?;
            let params = if anthropic {
                &tool["input_schema"]
            } else {
                &tool["function"]["parameters"]
            };
            let mut call = minimal(params, params);
            if let (Some(call), Some(given)) = (call.as_object_mut(), args.as_object()) {
                call.extend(given.clone());
            }
            Some((name.clone(), call))
        })
        .collect();
    (!calls.is_empty()).then_some(Reply::Tools(calls))
}

/// `GET /search?q=…&format=json`, as SearXNG answers: three results on
/// this server's pages.
async fn search(
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let q = query.get("q").cloned().unwrap_or_default();
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned();
    let results: Vec<Value> = (1..=3)
        .map(|n| {
            json!({"title": format!("{q}: source {n}"), "url": format!("http://{host}/page/{n}"),
                "content": format!("What source {n} says about {q}."), "engine": "emulated"})
        })
        .collect();
    json_response(200, &json!({"query": q, "results": results}), &[])
}

/// `GET /page/{n}`: a short article.
async fn page(Path(n): Path<u32>) -> Response {
    Response::builder()
        .status(200)
        .header("content-type", "text/html; charset=utf-8")
        .body(Body::from(format!(
            "<html><head><title>Source {n}</title></head><body><h1>Source {n}</h1>\
             <p>Heat pumps move heat instead of making it; source {n} measures a seasonal \
             coefficient of performance near 3.</p></body></html>"
        )))
        .unwrap()
}

fn json_response(status: u16, body: &Value, headers: &[(&str, &str)]) -> Response {
    let mut r = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::from(body.to_string())).unwrap()
}

fn sse(events: Vec<String>) -> Response {
    let stream = futures::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, std::convert::Infallible>(Bytes::from(e))),
    );
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn parse(body: &Bytes) -> Result<Value, Rejection> {
    serde_json::from_slice(body).map_err(|_| {
        (400, json!({"error": {"message": "We could not parse the JSON body of your request.", "type": "invalid_request_error", "param": null, "code": null}}))
    })
}

async fn openai(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let body = parse(&body).unwrap_or(Value::Null);
    let check = if !headers
        .get("authorization")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("Bearer "))
    {
        Err((
            401,
            json!({"error": {"message": "You didn't provide an API key.", "type": "invalid_request_error", "param": null, "code": null}}),
        ))
    } else {
        let model = body["model"].as_str().unwrap_or_default().to_owned();
        openai_rules::check(&body, &model)
    };
    openai_answer(
        &state,
        "openai",
        &headers,
        &body,
        check,
        body["model"].as_str().unwrap_or_default(),
    )
}

async fn azure(
    State(state): State<AppState>,
    Path(deployment): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = parse(&body).unwrap_or(Value::Null);
    // The deployment decides the model; `reasoning-prod` is a name that
    // says nothing of its family.
    let model = if deployment == "reasoning-prod" {
        "gpt-5.1".to_owned()
    } else {
        deployment
    };
    let check = if headers.get("api-key").is_none() {
        Err((
            401,
            json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}),
        ))
    } else if !query.contains_key("api-version") {
        Err((
            404,
            json!({"error": {"code": "404", "message": "Resource not found"}}),
        ))
    } else {
        openai_rules::check(&body, &model)
    };
    openai_answer(&state, "azure", &headers, &body, check, &model)
}

fn openai_answer(
    state: &AppState,
    api: &'static str,
    headers: &HeaderMap,
    body: &Value,
    check: Result<(), Rejection>,
    model: &str,
) -> Response {
    let reply = record(state, api, headers, body, check.clone().err());
    if let Err((status, err)) = check {
        return json_response(status, &err, &[]);
    }
    let mut out = Vec::new();
    let chunk = |choices: Value, usage: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-emu", "object": "chat.completion.chunk", "created": 1_730_000_000, "model": model, "system_fingerprint": null, "choices": choices, "usage": usage})
        )
    };
    let delta = |d: Value, finish: Value| json!([{"index": 0, "delta": d, "logprobs": null, "finish_reason": finish}]);
    out.push(chunk(
        delta(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        ),
        Value::Null,
    ));
    let reply = match reply {
        Reply::Thinking(_, r) => *r,
        other => other,
    };
    let reply = match reply {
        Reply::Auto => auto_openai(body),
        other => other,
    };
    let finish = match reply {
        Reply::Status(status, err, hdrs) => return json_response(status, &err, &hdrs),
        Reply::Text(text) => {
            for piece in split(&text) {
                out.push(chunk(
                    delta(json!({"content": piece}), Value::Null),
                    Value::Null,
                ));
            }
            "stop"
        }
        Reply::Tools(calls) => {
            for (i, (name, args)) in calls.iter().enumerate() {
                out.push(chunk(delta(json!({"tool_calls": [{"index": i, "id": format!("call_emu_{i}"), "type": "function", "function": {"name": name, "arguments": ""}}]}), Value::Null), Value::Null));
                for piece in split(&args.to_string()) {
                    out.push(chunk(
                        delta(
                            json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                            Value::Null,
                        ),
                        Value::Null,
                    ));
                }
            }
            // A forced function call ends with `stop`, a chosen one with `tool_calls`.
            if body["tool_choice"].is_object() {
                "stop"
            } else {
                "tool_calls"
            }
        }
        Reply::Auto | Reply::Thinking(..) => unreachable!(),
    };
    out.push(chunk(delta(json!({}), json!(finish)), Value::Null));
    let reasoning = if is_reasoning(model) { 16 } else { 0 };
    let prompt = body.to_string().len() as u64 / 4;
    out.push(chunk(json!([]), json!({"prompt_tokens": prompt, "completion_tokens": 20 + reasoning, "total_tokens": prompt + 20 + reasoning,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})));
    out.push("data: [DONE]\n\n".into());
    sse(out)
}

/// The automatic OpenAI answer: a structured request's minimal instance
/// (as content, or as the forced function's arguments), else a text.
fn auto_openai(body: &Value) -> Reply {
    if let Some(name) = body["tool_choice"]["function"]["name"].as_str() {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let params = tools
            .iter()
            .find(|t| t["function"]["name"] == name)
            .map(|t| t["function"]["parameters"].clone())
            .unwrap_or(json!({}));
        return Reply::Tools(vec![(name.to_owned(), minimal(&params, &params))]);
    }
    let answered = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| m["role"] == "tool");
    if let (Some(tool), false) = (body["tools"].as_array().and_then(|t| t.first()), answered) {
        // A model offered tools calls one first, so tool loops run too.
        let params = &tool["function"]["parameters"];
        let name = tool["function"]["name"].as_str().unwrap_or_default();
        return Reply::Tools(vec![(name.to_owned(), minimal(params, params))]);
    }
    match body["response_format"]["type"].as_str() {
        Some("json_schema") => {
            let schema = &body["response_format"]["json_schema"]["schema"];
            Reply::Text(minimal(schema, schema).to_string())
        }
        Some("json_object") => Reply::Text("{}".into()),
        _ => Reply::Text(format!(
            "Emulated answer from {}.",
            body["model"].as_str().unwrap_or("?")
        )),
    }
}

/// Text in a few pieces, as a model streams it.
fn split(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(7).map(|c| c.iter().collect()).collect()
}

async fn anthropic(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let body = parse(&body).unwrap_or(Value::Null);
    let check =
        anthropic_rules::check_headers(&headers).and_then(|()| anthropic_rules::check(&body));
    let reply = record(&state, "anthropic", &headers, &body, check.clone().err());
    if let Err((status, err)) = check {
        return json_response(status, &err, &[]);
    }
    let (cache_write, cache_read) = cache_usage(&state, &body);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let prompt = body.to_string().len() as u64 / 4;
    let mut out = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_emu", "type": "message", "role": "assistant", "content": [], "model": model, "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": prompt.saturating_sub(cache_write + cache_read), "cache_creation_input_tokens": cache_write, "cache_read_input_tokens": cache_read, "output_tokens": 1}}}),
    )];
    let mut index = 0;
    let (thinking, reply) = match reply {
        Reply::Thinking(t, r) => (Some(t), *r),
        other => (None, other),
    };
    let thinking = thinking.or_else(|| {
        (body["thinking"]["type"] == "enabled").then(|| "Let me think about this.".to_owned())
    });
    let mut thinking_tokens = 0;
    if let Some(t) = thinking {
        out.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
        for piece in split(&t) {
            out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}})));
        }
        out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": "EmuSig=="}})));
        out.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
        thinking_tokens = 12;
    }
    out.push(event("ping", json!({"type": "ping"})));
    let reply = match reply {
        Reply::Auto => auto_anthropic(&body),
        other => other,
    };
    let stop = match reply {
        Reply::Status(status, err, hdrs) => return json_response(status, &err, &hdrs),
        Reply::Text(text) => {
            out.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
            for piece in split(&text) {
                out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
            }
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
            "end_turn"
        }
        Reply::Tools(calls) => {
            for (i, (name, input)) in calls.iter().enumerate() {
                let at = index + i;
                out.push(event("content_block_start", json!({"type": "content_block_start", "index": at, "content_block": {"type": "tool_use", "id": format!("toolu_emu_{at}"), "name": name, "input": {}}})));
                out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": at, "delta": {"type": "input_json_delta", "partial_json": ""}})));
                for piece in split(&input.to_string()) {
                    out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": at, "delta": {"type": "input_json_delta", "partial_json": piece}})));
                }
                out.push(event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": at}),
                ));
            }
            "tool_use"
        }
        Reply::Auto | Reply::Thinking(..) => unreachable!(),
    };
    out.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 20 + thinking_tokens, "output_tokens_details": {"thinking_tokens": thinking_tokens}}})));
    out.push(event("message_stop", json!({"type": "message_stop"})));
    sse(out)
}

/// A forced tool's minimal input, else a text.
fn auto_anthropic(body: &Value) -> Reply {
    if body["tool_choice"]["type"] == "tool" {
        let name = body["tool_choice"]["name"].as_str().unwrap_or_default();
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let schema = tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["input_schema"].clone())
            .unwrap_or(json!({}));
        return Reply::Tools(vec![(name.to_owned(), minimal(&schema, &schema))]);
    }
    let answered = body["messages"].to_string().contains("\"tool_result\"");
    if let (Some(tool), false) = (body["tools"].as_array().and_then(|t| t.first()), answered) {
        // A model offered tools calls one first, so tool loops run too.
        let schema = &tool["input_schema"];
        let name = tool["name"].as_str().unwrap_or_default();
        return Reply::Tools(vec![(name.to_owned(), minimal(schema, schema))]);
    }
    Reply::Text(format!(
        "Emulated answer from {}.",
        body["model"].as_str().unwrap_or("?")
    ))
}

/// Prompt caching: the prefix up to the last `cache_control` breakpoint
/// (tools, then system) is written on first sight and read after.
fn cache_usage(state: &AppState, body: &Value) -> (u64, u64) {
    let tools = body["tools"].to_string();
    let system = body["system"].to_string();
    if !tools.contains("cache_control") && !system.contains("cache_control") {
        return (0, 0);
    }
    let prefix = format!("{}{tools}{system}", body["model"]);
    let tokens = (tools.len() + system.len()) as u64 / 4;
    let mut s = state.lock().unwrap();
    if s.cached_prefixes.insert(prefix) {
        (tokens, 0)
    } else {
        (0, tokens)
    }
}
