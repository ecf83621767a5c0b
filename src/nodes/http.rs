//! `http`: custom logic in any language without recompiling — the node
//! sends a declared slice of the state to an HTTP endpoint and applies the
//! JSON object it answers as a patch.
//!
//! ```yaml
//! - id: score
//!   kind: http
//!   url: http://127.0.0.1:9000/score     # a template may build it from the state
//!   send: [ticket, category]             # the body: {"ticket": …, "category": …}
//!   writes: [priority]                   # what the answer may set
//!   headers: { authorization: "Bearer ${SCORER_TOKEN}" }   # ${VAR}: environment, at load
//!   timeout: 5s
//!   retry: { attempts: 3 }
//! ```
//!
//! The answer must be a JSON object whose keys are fields in `writes`;
//! each value is checked against its field's type when the step is applied
//! (a wrong key or type fails the node, naming both). Timeouts, connection
//! failures, 429 and 5xx are transient (`retry` repeats them); other
//! statuses fail at once. The exchange is recorded like a tool call (tool
//! `http`), so a re-executed run reuses the recorded answer instead of
//! calling the endpoint again.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::{BuildCx, Kind, Node, NodeContext, NodeError};
use crate::events::{EventKind, ToolFailure, ToolFault, ToolReady, ToolReturn};
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};
use crate::state::{FieldId, Patch};
use crate::tools::ToolError;

/// Largest answer accepted.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// One client for every `http` node (connection pooling).
static CLIENT: LazyLock<reqwest::Client> = LazyLock::new(|| {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()
        .unwrap_or_default()
});

/// The kind.
pub(super) fn kind() -> Kind {
    Kind::new(
        "http",
        "Sends a slice of the state to an HTTP endpoint and applies the JSON object it answers as a patch.",
        &[
            SettingDoc::new(
                "url",
                schema::STRING,
                "the endpoint (a template may build it from the state)",
            ),
            SettingDoc::new(
                "method",
                r#"{"enum":["GET","POST","PUT","PATCH","DELETE"]}"#,
                "HTTP method (default POST)",
            ),
            SettingDoc::new(
                "send",
                schema::NAMES,
                "fields sent as the JSON body `{field: value}`",
            ),
            SettingDoc::new(
                "headers",
                schema::MAP,
                "request headers; `${VAR}` is read from the environment at load",
            ),
        ],
        Surface::Hidden,
        |cx| HttpNode::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// A node calling an endpoint.
#[derive(Debug)]
struct HttpNode {
    url: ValueExpr,
    method: reqwest::Method,
    send: Vec<(Arc<str>, FieldId)>,
    headers: Vec<(String, String)>,
}

impl HttpNode {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let url = match cx.setting("url") {
            Some(v) => cx.value_expr(v, "`url`", &[]).ok(),
            None => {
                let id = cx.id().to_owned();
                cx.error(
                    cx.kind_loc(),
                    "missing-setting",
                    format!("node `{id}` of kind `http` needs `url`"),
                    None,
                );
                None
            }
        };
        let method = match cx.string("method") {
            Ok(None) => Some(reqwest::Method::POST),
            Ok(Some(m)) => match m.value.to_ascii_uppercase().as_str() {
                "GET" => Some(reqwest::Method::GET),
                "POST" => Some(reqwest::Method::POST),
                "PUT" => Some(reqwest::Method::PUT),
                "PATCH" => Some(reqwest::Method::PATCH),
                "DELETE" => Some(reqwest::Method::DELETE),
                other => {
                    cx.error(
                        m.loc,
                        "invalid-setting",
                        format!("`method` is `{other}`; write GET, POST, PUT, PATCH or DELETE"),
                        None,
                    );
                    None
                }
            },
            Err(_) => None,
        };
        let mut send = Vec::new();
        let mut ok = true;
        for name in cx.names("send").unwrap_or_default() {
            match cx.field(&name, "a field", |_| true) {
                Some(f) => send.push((Arc::<str>::from(name.value.as_str()), f)),
                None => ok = false,
            }
        }
        let headers = headers(cx);
        if cx.node.writes.is_empty() {
            let id = cx.id().to_owned();
            cx.warning(
                cx.kind_loc(),
                "http-writes-nothing",
                format!("node `{id}` lists no `writes`, so any field its endpoint answers fails the node"),
                Some("list the fields the endpoint may set: `writes: [field]`".into()),
            );
        }
        let (url, method, headers) = (url?, method?, headers.ok()?);
        ok.then_some(Self {
            url,
            method,
            send,
            headers,
        })
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let extra: Vec<(&str, minijinja::Value)> = cx
            .item
            .map(|i| vec![("item", from_json(i))])
            .unwrap_or_default();
        let url = match self.url.eval(cx.state, &extra)? {
            Value::String(u) => u,
            other => {
                return Err(NodeError::Failed(format!(
                    "`url` evaluated to {other}, not a string"
                )));
            }
        };
        let body: Map<String, Value> = self
            .send
            .iter()
            .map(|(n, f)| (n.to_string(), cx.state.get(*f)))
            .collect();
        let call_id = format!(
            "http:{}:{}:{}:{}",
            cx.events.node(),
            cx.events.step(),
            cx.events.task(),
            cx.attempt
        );
        let args = json!({ "method": self.method.as_str(), "url": url, "body": body });
        cx.events
            .emit(EventKind::ToolCallReady(Box::new(ToolReady {
                call_id: call_id.clone(),
                tool: "http".into(),
                args,
            })))
            .await;
        let started = Instant::now();
        let recorded = cx.services.playback.as_ref().and_then(|p| {
            p.tool(
                cx.events.node(),
                cx.events.step(),
                cx.events.task(),
                &call_id,
            )
        });
        let result = match recorded {
            Some(Ok(outcome)) => Ok(outcome.output),
            Some(Err(e)) => Err(recorded_error(&url, &e)),
            None => self.exchange(&url, &body).await,
        };
        match result {
            Ok(answer) => {
                cx.events
                    .emit(EventKind::ToolResult(Box::new(ToolReturn {
                        call_id,
                        tool: "http".into(),
                        output: answer.clone(),
                        cached: false,
                        display: false,
                        duration_us: started.elapsed().as_micros() as u64,
                    })))
                    .await;
                patch_from(&url, answer)
            }
            Err(e) => {
                let kind = if e.is_transient() {
                    "execution_error"
                } else {
                    "validation_error"
                };
                cx.events
                    .emit(EventKind::ToolError(Box::new(ToolFault {
                        call_id,
                        tool: "http".into(),
                        error: ToolFailure {
                            kind: kind.into(),
                            message: e.to_string(),
                            details: Value::Null,
                        },
                    })))
                    .await;
                Err(e)
            }
        }
    }

    /// One request; the JSON it answers.
    async fn exchange(&self, url: &str, body: &Map<String, Value>) -> Result<Value, NodeError> {
        let fail = |message: String, transient: bool| NodeError::Http {
            url: url.to_owned(),
            message,
            transient,
        };
        let mut req = CLIENT
            .request(self.method.clone(), url)
            .header(reqwest::header::ACCEPT, "application/json");
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if self.method != reqwest::Method::GET {
            let bytes = serde_json::to_vec(body).map_err(|e| fail(e.to_string(), false))?;
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let resp = req.send().await.map_err(|e| fail(e.to_string(), true))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| fail(e.to_string(), true))?;
        if !status.is_success() {
            let transient = status.is_server_error() || status.as_u16() == 429;
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            return Err(fail(format!("status {status}: {text}"), transient));
        }
        if bytes.len() > MAX_RESPONSE_BYTES {
            return Err(fail(
                format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes"),
                false,
            ));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(json!({}));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| fail(format!("the answer is not JSON: {e}"), false))
    }
}

impl Node for HttpNode {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }
}

/// The patch an answer makes: its keys and values (checked when applied).
fn patch_from(url: &str, answer: Value) -> Result<Patch, NodeError> {
    match answer {
        Value::Object(map) => Ok(map.into_iter().fold(Patch::new(), |p, (k, v)| p.set(k, v))),
        other => Err(NodeError::Http {
            url: url.to_owned(),
            message: format!(
                "the answer must be a JSON object of fields, got {}",
                crate::state::describe_value(&other)
            ),
            transient: false,
        }),
    }
}

/// The node's error again, from its recorded failure: the recording keeps
/// the error as displayed (`HTTP call to URL failed: …`), so the prefix is
/// taken off before it is put back — a replayed error reads exactly as the
/// original, and a re-execution does not diverge on it.
fn recorded_error(url: &str, e: &ToolError) -> NodeError {
    let shown = e.to_string();
    let prefix = format!("HTTP call to {url} failed: ");
    NodeError::Http {
        url: url.to_owned(),
        message: shown.strip_prefix(&prefix).unwrap_or(&shown).to_owned(),
        transient: crate::nodes::tool::is_transient(e),
    }
}

/// `headers`, with `${VAR}` taken from the environment now.
fn headers(cx: &mut BuildCx<'_>) -> Result<Vec<(String, String)>, Reported> {
    let Some(entries) = cx.mapping("headers")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (k, v) in entries {
        let SpValue::Str(text) = &v.value else {
            cx.error(
                v.loc,
                "invalid-setting",
                format!("header `{}` must be a string", k.value),
                None,
            );
            return Err(Reported);
        };
        match substitute_env(text) {
            Ok(value) => out.push((k.value.clone(), value)),
            Err(var) => {
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!(
                        "header `{}` uses `${{{var}}}`, which is not set in the environment",
                        k.value
                    ),
                    None,
                );
                return Err(Reported);
            }
        }
    }
    Ok(out)
}

/// `text` with each `${NAME}` replaced by that environment variable.
fn substitute_env(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(&std::env::var(name).map_err(|_| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
