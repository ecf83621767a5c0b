//! `agent`: a model with tools, looping tool calls → results → model until
//! it answers or reaches its iteration cap.
//!
//! The node only offers, and the registry only executes, the tools the graph
//! file lists for it. A failed tool call is given back to the model as
//! structured data so it can correct itself. The cap counts model calls; the
//! last allowed call is made without tools, so the model has to answer.

use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::extract::{self, Extract};
use super::model::{self, HISTORY_SETTINGS, INPUT, PROMPT, ROLE_SETTINGS};
use super::{BuildCx, Kind, Node, NodeContext, NodeError, Roles};
use crate::events::{EventKind, ToolCallRecord};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::{PromptRef, SettingDoc};
use crate::llm::ChatMessage;
use crate::state::{FieldId, Patch, Reducer};
use crate::tools::{failure_payload, parse_arguments};

/// Default cap on model calls.
const DEFAULT_MAX_ITERATIONS: i64 = 5;

/// The kind.
pub(super) fn kind() -> Kind {
    let mut settings = vec![
        PROMPT,
        INPUT,
        SettingDoc::new(
            "tools",
            schema::NAMES,
            "tools and tool partitions it may call",
        ),
        SettingDoc::new(
            "output",
            schema::FIELD,
            "string field receiving the answer (default `answer`)",
        ),
        SettingDoc::new(
            "max_iterations",
            schema::INTEGER,
            "cap on model calls (1–100, default 5)",
        ),
        SettingDoc::new(
            "answer_by",
            schema::DURATION,
            "time budget: once this long has passed, the next model call gets no tools and must answer (default: none)",
        ),
        SettingDoc::new(
            "trace",
            schema::FIELD,
            "list field (append reducer) receiving a record of each tool call",
        ),
        extract::SETTING,
    ];
    settings.extend(ROLE_SETTINGS);
    settings.extend(HISTORY_SETTINGS);
    settings.extend(GENERATION_SETTINGS);
    settings.push(ON_ERROR);
    Kind::new(
        "agent",
        "A model with tools in a loop: tool calls, results back to the model, until it answers or reaches its cap.",
        &settings,
        Surface::Answer,
        |cx| Agent::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// A tool-using model loop.
#[derive(Debug)]
struct Agent {
    prompt: PromptRef,
    roles: Roles,
    input: Option<FieldId>,
    history: (Option<FieldId>, usize),
    /// Tool and partition names from the graph file, expanded per run.
    tools: Vec<String>,
    max_iterations: u32,
    /// After this, the next call is the last (no tools).
    answer_by: Option<std::time::Duration>,
    output: Arc<str>,
    trace: Option<Arc<str>>,
    /// Values to remember from tool results.
    extract: Extract,
    /// Bounds of each model call.
    generation: Generation,
    on_error: OnError,
}

/// How the thinking note before a call past the time budget begins (a
/// recording finds such calls by it).
pub const BUDGET_NOTE: &str = "Used the time budget";

/// Default `max_tokens` of each model call.
const MAX_TOKENS: u32 = 1024;

impl Agent {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let prompt = cx.prompt(true);
        let tools = cx.tools();
        let extract = match &tools {
            Ok(t) => Extract::build(cx, t),
            Err(r) => Err(*r),
        };
        let input = cx.text_input("input");
        let history = cx.history(12);
        let roles = model::roles(cx);
        let output = cx.output("output", "answer", "a string field", |f| f.ty.is_string());
        let trace = cx.optional_output("trace", "a list field with the append reducer", |f| {
            f.ty.is_list() && f.reducer == Reducer::Append
        });
        let max_iterations = cx.integer("max_iterations", 1..=100, DEFAULT_MAX_ITERATIONS);
        let answer_by = cx.duration("answer_by");
        let generation = Generation::build(cx, MAX_TOKENS);
        // An answer cut short keeps what it streamed (see `bounds`).
        let on_error = OnError::build(cx, OnError::Fallback, true);
        Some(Self {
            generation: generation.ok()?,
            on_error: on_error.ok()?,
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            input: input.ok()?,
            history: history.ok()?,
            tools: tools.ok()?,
            max_iterations: max_iterations.ok()? as u32,
            answer_by: answer_by.ok()?.map(|d| d.value),
            output: output?.1,
            trace: trace.ok()?.map(|t| t.1),
            extract: extract.ok()?,
        })
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut messages = vec![ChatMessage::System {
            content: cx.render(&self.prompt)?,
        }];
        messages.extend(model::history(cx.state, self.history.0, self.history.1));
        if let Some(text) = self.input.and_then(|f| cx.state.text(f))
            && !matches!(messages.last(), Some(ChatMessage::User { content }) if content == text)
        {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        let allowed = cx.services.tools.expand(&self.tools);
        let defs = cx.offer_tools(&allowed).await;
        let mut request = self.generation.request(messages);
        request.tools = defs;
        let mut trace = Vec::new();
        let mut extracted: Vec<(Arc<str>, Value, bool)> = Vec::new();
        let mut answer = String::new();
        let started = std::time::Instant::now();
        for call in 0..self.max_iterations {
            let capped = call + 1 == self.max_iterations;
            // A re-execution decides as the recorded run did, whatever the clock.
            let late = match &cx.services.playback {
                Some(p) => {
                    p.past_budget(cx.events.node(), cx.events.step(), cx.events.task(), call)
                }
                None => self.answer_by.is_some_and(|b| started.elapsed() >= b),
            };
            let last = capped || (late && call > 0);
            if last && call > 0 {
                let why = if capped {
                    format!(
                        "Reached the iteration cap ({} model calls)",
                        self.max_iterations
                    )
                } else {
                    format!("{BUDGET_NOTE} ({:?})", self.answer_by.unwrap_or_default())
                };
                cx.events
                    .thinking(format!("{why}; asking for a final answer without tools."))
                    .await;
            }
            if last {
                request.tools.clear();
            }
            let reply = cx.llm(&self.roles, call, &request).await?;
            let out = reply.output();
            if out.tool_calls.is_empty() || last {
                answer = out.text.clone();
                if out.finish_reason == "length" {
                    super::llm::truncated(&cx, "length").await;
                }
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
                if let (false, Some(output)) = (self.extract.is_empty(), record.get("output")) {
                    extracted.extend(self.extract.apply(
                        cx.state,
                        cx.item,
                        &tc.name,
                        &record["args"],
                        output,
                    ));
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
        for (field, value) in extract::writes(extracted) {
            // In mention order: the field's reducer keeps the last of a kind.
            cx.events.custom(field.to_string(), value.clone()).await;
            patch.insert(field, value);
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

impl Node for Agent {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }

    fn recover<'a>(
        &'a self,
        _cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move {
            Recovery::decide(self.on_error, &failure, || {
                Recovery::partial_text(&self.output, &failure)
            })
        })
    }
}
