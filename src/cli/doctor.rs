//! `stategraph doctor`: one tiny request per configured role, so a new
//! user learns on day one — not from a failed chat — whether each model
//! answers, streams, calls tools and returns structured output, and what
//! the provider and family rules change in its requests.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::llm::{
    ChatMessage, ChatModel, ChatRequest, JsonSchemaFormat, LlmChunk, LlmError, Models, ToolDef,
};

/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// What one call produced.
#[derive(Debug, Default)]
struct Probe {
    text: String,
    text_chunks: usize,
    tool: Option<String>,
    finish: Option<String>,
    error: Option<String>,
    took: Duration,
}

async fn probe(model: &dyn ChatModel, request: &ChatRequest) -> Probe {
    let started = Instant::now();
    let mut out = Probe::default();
    let mut stream = model.stream(request);
    let run = async {
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(LlmChunk::Text(t)) => {
                    out.text.push_str(&t);
                    out.text_chunks += 1;
                }
                Ok(LlmChunk::ToolCallStart { name, .. }) => out.tool = Some(name),
                Ok(LlmChunk::Finish(f)) => out.finish = Some(f),
                Ok(_) => {}
                Err(e) => {
                    out.error = Some(e.to_string());
                    break;
                }
            }
        }
    };
    if tokio::time::timeout(PROBE_TIMEOUT, run).await.is_err() {
        out.error = Some(LlmError::Timeout("doctor probe").to_string());
    }
    out.took = started.elapsed();
    out
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::System {
                content: "You are being checked by a health probe. Answer briefly.".into(),
            },
            ChatMessage::User {
                content: text.into(),
            },
        ],
        max_tokens: Some(64),
        temperature: Some(0.0),
        ..Default::default()
    }
}

/// The probes: a text answer (streamed), a tool call, structured output.
fn probes() -> [(&'static str, ChatRequest); 3] {
    let tools = ChatRequest {
        tools: vec![ToolDef {
            name: "get_time".into(),
            description: "The current time. Call it to answer.".into(),
            parameters: Arc::new(json!({"type": "object", "properties": {}})),
            partition: None,
        }],
        ..request("What time is it? Call the get_time tool.")
    };
    let structured = ChatRequest {
        response_format: Some(JsonSchemaFormat::new(
            "doctor",
            json!({"type": "object", "properties": {"answer": {"type": "string",
                "description": "the word ok"}}, "required": ["answer"]}),
        )),
        ..request("Answer with JSON whose `answer` is the word ok.")
    };
    [
        ("answers and streams", request("Say the word ok.")),
        ("calls tools", tools),
        ("structured output", structured),
    ]
}

/// One role's report; whether every probe passed.
async fn check_role(
    role: &str,
    model: &dyn ChatModel,
    out: &mut dyn Write,
) -> std::io::Result<bool> {
    writeln!(out, "role `{role}`: {}", model.describe())?;
    let mut ok = true;
    for (what, request) in probes() {
        let p = probe(model, &request).await;
        let (passed, detail) = match (&p.error, what) {
            (Some(e), _) => (false, e.clone()),
            (None, "answers and streams") => (
                !p.text.trim().is_empty(),
                format!("{:?} in {} chunks", p.text.trim(), p.text_chunks),
            ),
            (None, "calls tools") => match &p.tool {
                Some(name) => (true, format!("called `{name}`")),
                None => (
                    false,
                    format!("answered without calling the tool: {:?}", p.text.trim()),
                ),
            },
            (None, _) => {
                let parsed = serde_json::from_str::<Value>(json_object(&p.text));
                match parsed {
                    Ok(v) if v.get("answer").is_some_and(Value::is_string) => (true, v.to_string()),
                    _ => (
                        false,
                        format!("not the JSON asked for: {:?}", p.text.trim()),
                    ),
                }
            }
        };
        ok &= passed;
        let mark = if passed { "ok  " } else { "FAIL" };
        writeln!(
            out,
            "  {mark} {what:<20} {detail} ({} ms)",
            p.took.as_millis()
        )?;
    }
    let changes = model.adjustments(&probes()[0].1);
    if changes.is_empty() {
        writeln!(out, "  rules: requests go as written")?;
    }
    for c in changes {
        writeln!(out, "  rules: {c}")?;
    }
    Ok(ok)
}

/// The JSON object in an answer (prose or code fences around it tolerated).
fn json_object(text: &str) -> &str {
    match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if b > a => &text[a..=b],
        _ => text,
    }
}

/// Probes the default model and every configured role; `Ok(false)` when
/// any probe failed.
///
/// # Errors
/// Writing the report failed.
pub(super) async fn doctor(models: &Models, out: &mut dyn Write) -> std::io::Result<bool> {
    if models.any_offline() {
        writeln!(
            out,
            "no LLM endpoint is configured: every role uses the built-in offline model.\n\
             Set OPENAI_API_KEY (and STATEGRAPH_MODEL), or [llm.endpoints] in stategraph.toml (docs/models.md)."
        )?;
        return Ok(true);
    }
    let mut ok = check_role("default", &**models.for_role("default"), out).await?;
    for role in models.roles().map(str::to_owned).collect::<Vec<_>>() {
        if role == "default" {
            continue;
        }
        writeln!(out)?;
        ok &= check_role(&role, &**models.for_role(&role), out).await?;
    }
    Ok(ok)
}
