//! `agent`: a model with tools, looping tool calls → results → model until
//! it answers or reaches its iteration cap.
//!
//! The node only offers, and the registry only executes, the tools the graph
//! file lists for it. A failed tool call is given back to the model as
//! structured data so it can correct itself. The cap counts model calls; the
//! last allowed call is made without tools, so the model has to answer.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::Reported;
use super::entities::EntityRules;
use super::{BuildCx, NodeContext, NodeError, PromptRef, history};
use crate::events::{EventKind, ToolCallRecord};
use crate::llm::{ChatMessage, ChatRequest};
use crate::state::{FieldId, Patch, Reducer};
use crate::tools::{failure_payload, parse_arguments};

const SETTINGS: &[&str] = &[
    "prompt",
    "model",
    "tools",
    "input",
    "output",
    "history",
    "history_window",
    "max_iterations",
    "trace",
    "entities",
    "entity_field",
    "fallback_model",
];

/// Default cap on model calls.
const DEFAULT_MAX_ITERATIONS: u32 = 5;

/// A tool-using model loop.
#[derive(Debug)]
pub struct Agent {
    prompt: PromptRef,
    role: Arc<str>,
    input: Option<FieldId>,
    history: (Option<FieldId>, usize),
    /// Tool and partition names from the graph file, expanded per run.
    tools: Vec<String>,
    max_iterations: u32,
    output: Arc<str>,
    trace: Option<Arc<str>>,
    /// Entities to remember from tool results (`entities`).
    entities: Option<EntityRules>,
}

impl Agent {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let prompt = cx.prompt(true);
        let tools = cx.tools();
        let entities = match &tools {
            Ok(t) => EntityRules::build(cx, t),
            Err(Reported) => Err(Reported),
        };
        let input = match &n.input {
            Some(_) => cx.input(&n.input, "query").map(Some).ok_or(Reported),
            None => Ok(None),
        };
        let history = cx.history(12);
        let output = cx.output(&n.output, "answer", "a text field", |f| f.ty.is_string());
        let trace = cx.optional_output(&n.trace, "a list field with the append reducer", |f| {
            f.ty.is_list() && f.reducer == Reducer::Append
        });
        let max_iterations = n
            .max_iterations
            .as_ref()
            .map_or(DEFAULT_MAX_ITERATIONS, |m| m.value);
        if max_iterations == 0 || max_iterations > 100 {
            let loc = n.max_iterations.as_ref().map_or(n.kind.loc, |m| m.loc);
            cx.error(
                loc,
                "invalid-setting",
                "`max_iterations` must be between 1 and 100",
                None,
            );
            return None;
        }
        output?;
        Some(Self {
            prompt: prompt.ok()??,
            role: cx.role(),
            input: input.ok()?,
            history: history.ok()?,
            tools: tools.ok()?,
            max_iterations,
            output: n
                .output
                .as_ref()
                .map_or("answer", |o| o.value.as_str())
                .into(),
            trace: trace
                .ok()?
                .and(n.trace.as_ref())
                .map(|t| t.value.as_str().into()),
            entities: entities.ok()?,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut messages = vec![ChatMessage::System {
            content: self.prompt.render(&cx)?,
        }];
        messages.extend(history(cx.state, self.history.0, self.history.1));
        if let Some(text) = self.input.and_then(|f| cx.state.text(f))
            && !matches!(messages.last(), Some(ChatMessage::User { content }) if content == text)
        {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        let allowed = cx.services.tools.expand(&self.tools);
        let defs = cx.services.tools.defs(&allowed);
        let mut request = ChatRequest {
            messages,
            tools: defs,
            ..Default::default()
        };
        let mut trace = Vec::new();
        let mut entities = Vec::new();
        let mut answer = String::new();
        for call in 0..self.max_iterations {
            let last = call + 1 == self.max_iterations;
            if last && call > 0 {
                cx.events
                    .thinking(format!(
                        "Reached the iteration cap ({} model calls); asking for a final answer without tools.",
                        self.max_iterations
                    ))
                    .await;
            }
            if last {
                request.tools.clear();
            }
            let reply = cx.llm(&self.role, call, &request).await?;
            let out = reply.output();
            if out.tool_calls.is_empty() || last {
                answer = out.text.clone();
                break;
            }
            let results = futures::future::join_all(
                out.tool_calls
                    .iter()
                    .map(|tc| self.execute(&cx, tc, &allowed)),
            )
            .await;
            request.messages.push(ChatMessage::Assistant {
                content: out.text.clone(),
                tool_calls: out.tool_calls.clone(),
            });
            let mut shown = Vec::new();
            for (tc, (content, record, display)) in out.tool_calls.iter().zip(results) {
                if let Some(text) = display {
                    shown.push(text);
                }
                if let (Some(rules), Some(output)) = (&self.entities, record.get("output")) {
                    entities.extend(rules.extract(&tc.name, output));
                }
                request.messages.push(ChatMessage::Tool {
                    call_id: tc.id.clone(),
                    content,
                });
                trace.push(record);
            }
            if !shown.is_empty() {
                // Pass-through results are the answer, verbatim: the model
                // does not restate them.
                answer = shown.join("\n\n");
                break;
            }
        }
        let mut patch = Patch::new().set(Arc::clone(&self.output), answer);
        if let Some(field) = &self.trace
            && !trace.is_empty()
        {
            patch.insert(Arc::clone(field), Value::Array(trace));
        }
        if let (Some(rules), false) = (&self.entities, entities.is_empty()) {
            // In mention order: the field's reducer keeps the last of a kind.
            let value = serde_json::to_value(&entities).unwrap_or(Value::Null);
            cx.events.custom("entities", value.clone()).await;
            patch.insert(Arc::clone(rules.field()), value);
        }
        Ok(patch)
    }

    /// Runs one tool call; returns the content for the model, a trace
    /// record and, for a pass-through tool, the text shown to the user.
    async fn execute(
        &self,
        cx: &NodeContext<'_>,
        tc: &ToolCallRecord,
        allowed: &[String],
    ) -> (String, Value, Option<String>) {
        let started = Instant::now();
        let result = match parse_arguments(&tc.arguments) {
            Ok(args) => {
                cx.events
                    .emit(EventKind::ToolCallReady {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        args: args.clone(),
                    })
                    .await;
                cx.tool(&tc.id, &tc.name, args.clone(), allowed)
                    .await
                    .map(|out| (args, out))
            }
            Err(e) => Err(e),
        };
        match result {
            Ok((args, outcome)) => {
                let content = outcome.output.to_string();
                let display = outcome.display.then(|| match &outcome.output {
                    Value::String(s) => s.clone(),
                    other => serde_json::to_string_pretty(other).unwrap_or_default(),
                });
                cx.events
                    .emit(EventKind::ToolResult {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        output: outcome.output.clone(),
                        cached: outcome.cached,
                        display: outcome.display,
                        duration_us: started.elapsed().as_micros() as u64,
                    })
                    .await;
                let record = json!({ "node": &**cx.events.node(), "tool": tc.name, "args": args, "output": outcome.output });
                (content, record, display)
            }
            Err(e) => {
                let failure = e.to_failure();
                let payload = failure_payload(&failure);
                cx.events
                    .emit(EventKind::ToolError {
                        call_id: tc.id.clone(),
                        tool: tc.name.clone(),
                        error: failure,
                    })
                    .await;
                (
                    payload.to_string(),
                    json!({ "node": &**cx.events.node(), "tool": tc.name, "error": payload }),
                    None,
                )
            }
        }
    }
}
