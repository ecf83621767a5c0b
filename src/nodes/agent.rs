//! `agent`: a model with tools, looping tool calls → results → model until
//! it answers or reaches its iteration cap.
//!
//! The node only offers, and the registry only executes, the tools the graph
//! file lists for it. A failed tool call is given back to the model as
//! structured data so it can correct itself. The cap counts model calls; the
//! last allowed call is made without tools, so the model has to answer.
//!
//! Three settings keep an agent honest about its tools:
//! - `tools_if`: an expression; when false the node offers no tools (a
//!   writer in a quick mode, say).
//! - `require_tool` (+ `reminder`): an answer given before that tool was
//!   called gets one reminder and another try — e.g. an explanation must
//!   rest on the indicator's metadata.
//! - `data_tools` + `no_data`: when none of the data tools is offered (the
//!   server providing them is down or not configured), `no_data` is written
//!   as the output without calling the model; when the model called none of
//!   them successfully, `no_data` replaces its answer. Numbers never come
//!   from the model's memory.
//!
//! And two shape its tool calls (see [`passthrough`](super::passthrough)
//! and [`fill`](super::fill)):
//! - `pass_through`: results whose content says they are display-ready
//!   (`<table>`, a `[DISPLAY_VERBATIM]` marker, …) are the answer, verbatim.
//! - `fill_args`: arguments the model left out, filled from the state (the
//!   active customer's id, say).
//!
//! Before either, a `null` the model sent for an optional parameter whose
//! schema does not take `null` becomes an absent argument: strict tools
//! (OpenAI) make every parameter required and the optional ones nullable.
//!
//! A tool call's run — its checks, bound and omitted arguments, gates,
//! `once`, result and failure — is in `calls`.
//!
//! Each tool call logs its steps (executing, arguments parsed; the registry
//! adds started, finished or failed) inside the run's span, so every line
//! carries the request's correlation id.

use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;

use super::bind::{self, Bindings};
use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::convo::{self, Conversation, Turn};
use super::extract::{self, Extract};
use super::fill::{self, Fill};
use super::model::{self, INPUT, PROMPT, QUIET, ROLE_SETTINGS};
use super::passthrough::{self, PassThrough};
use super::pauses::{self, Pauses};
use super::{BuildCx, Kind, Node, NodeContext, NodeError, Roles};

mod calls;
use crate::graph::expr::Expr;
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::{PromptRef, Reported, SettingDoc};
use crate::llm::{ChatMessage, ChatRequest, ToolDef};
use crate::state::{FieldId, Patch, Reducer};

/// Default cap on model calls.
const DEFAULT_MAX_ITERATIONS: i64 = 5;

/// The kind.
pub(super) fn kind() -> Kind {
    let mut settings = vec![
        PROMPT,
        INPUT,
        bind::SETTING,
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
        passthrough::SETTING,
        fill::SETTING,
        SettingDoc::new(
            "tools_if",
            schema::STRING,
            "expression; when false the node offers no tools",
        ),
        SettingDoc::new(
            "require_tool",
            schema::STRING,
            "a tool the model must call before answering: an answer without it gets one reminder",
        ),
        SettingDoc::new(
            "reminder",
            schema::STRING,
            "the message sent with that reminder",
        ),
        SettingDoc::new(
            "data_tools",
            schema::NAMES,
            "tools and partitions whose results are the node's data (for `no_data`)",
        ),
        SettingDoc::new(
            "not_data_tools",
            schema::NAMES,
            "tools among `data_tools` whose results are not data (a search, a list of indicators): calling only them leaves the node with no data",
        ),
        SettingDoc::new(
            "no_data",
            schema::STRING,
            "output written without a model call when no data tool is offered, and instead of the answer when none succeeded",
        ),
    ];
    settings.extend(pauses::SETTINGS);
    settings.extend(ROLE_SETTINGS);
    settings.push(QUIET);
    settings.extend(convo::SETTINGS);
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
    conversation: Conversation,
    /// Tool and partition names from the graph file, expanded per run.
    tools: Vec<String>,
    max_iterations: u32,
    /// After this, the next call is the last (no tools).
    answer_by: Option<std::time::Duration>,
    output: Arc<str>,
    trace: Option<Arc<str>>,
    /// Values to remember from tool results.
    extract: Extract,
    /// Results shown verbatim by their content.
    pass_through: PassThrough,
    /// Arguments filled from the state.
    fill: Fill,
    /// Arguments bound by the graph, never the model's.
    bindings: Bindings,
    /// Bounds of each model call.
    generation: Generation,
    on_error: OnError,
    /// Offer tools only when this holds.
    tools_if: Option<Expr>,
    /// (tool, reminder) an answer must not come before.
    require: Option<(String, String)>,
    /// Data tools and what to write when they give nothing.
    no_data: Option<NoData>,
    /// Calls that wait for a person (approvals, client-side tools).
    pauses: Pauses,
}

/// `data_tools` + `no_data`.
#[derive(Debug)]
struct NoData {
    /// Tool and partition names.
    tools: Vec<String>,
    /// Tool names among them whose results are not data.
    except: Vec<String>,
    /// Written instead of an answer.
    packet: String,
}

impl NoData {
    /// Whether an offered tool is a data tool (by name, or by the
    /// partition recorded with it).
    fn covers(&self, def: &ToolDef) -> bool {
        !self.except.contains(&def.name)
            && self
                .tools
                .iter()
                .any(|t| *t == def.name || def.partition.as_deref() == Some(t))
    }
}

/// The reminder sent when `reminder` is not set.
fn default_reminder(tool: &str) -> String {
    format!("Before answering, call `{tool}`: the answer must rest on what it returns.")
}

/// What a loop of model calls produced.
#[derive(Default)]
struct Outcome {
    answer: String,
    trace: Vec<Value>,
    extracted: Vec<(Arc<str>, Value, bool)>,
    /// Pass-through results were shown as the answer.
    shown: bool,
    /// The messages appended to `messages:` (with that setting).
    turn: Option<Turn>,
    /// The reasoning of the final model call.
    reasoning: String,
}

/// How the thinking note before a call past the time budget begins (a
/// recording finds such calls by it).
pub(crate) const BUDGET_NOTE: &str = "Used the time budget";

/// Default `max_tokens` of each model call.
const MAX_TOKENS: u32 = 1024;

impl Agent {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let prompt = cx.prompt(true);
        let tools = bind::read(cx).and_then(|(names, bindings)| {
            let names = cx.check_tools(&names)?;
            Ok((names, bindings))
        });
        let (tools, bindings) = match tools {
            Ok((t, b)) => (Ok(t), Some(b)),
            Err(r) => (Err(r), None),
        };
        let extract = match &tools {
            Ok(t) => Extract::build(cx, t),
            Err(r) => Err(*r),
        };
        let pauses = match &tools {
            Ok(t) => Pauses::build(cx, t),
            Err(r) => Err(*r),
        };
        let pass_through = PassThrough::build(cx);
        let fill = match &tools {
            Ok(t) => fill::check_against(cx, t).and_then(|()| Fill::build(cx)),
            Err(_) => Fill::build(cx),
        };
        let input = cx.text_input("input");
        let conversation = Conversation::build(cx, 12);
        let roles = model::roles(cx);
        let output = cx.output("output", "answer", "a string field", |f| f.ty.is_string());
        let trace = cx.optional_output("trace", "a list field with the append reducer", |f| {
            f.ty.is_list() && f.reducer == Reducer::Append
        });
        let max_iterations = cx.integer("max_iterations", 1..=100, DEFAULT_MAX_ITERATIONS);
        let answer_by = cx.duration("answer_by");
        let tools_if = cx.expr("tools_if", &[]);
        let require = Self::require(cx);
        let no_data = Self::no_data(cx);
        let generation = Generation::build(cx, MAX_TOKENS);
        // An answer cut short keeps what it streamed (see `bounds`).
        let on_error = OnError::build(cx, OnError::Fallback, true);
        Some(Self {
            generation: generation.ok()?,
            on_error: on_error.ok()?,
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            input: input.ok()?,
            conversation: conversation.ok()?,
            tools: tools.ok()?,
            bindings: bindings?,
            max_iterations: max_iterations.ok()? as u32,
            answer_by: answer_by.ok()?.map(|d| d.value),
            output: output?.1,
            trace: trace.ok()?.map(|t| t.1),
            extract: extract.ok()?,
            pass_through: pass_through.ok()?,
            fill: fill.ok()?,
            tools_if: tools_if.ok()?,
            require: require.ok()?,
            no_data: no_data.ok()?,
            pauses: pauses.ok()?,
        })
    }

    fn require(cx: &mut BuildCx<'_>) -> Result<Option<(String, String)>, Reported> {
        let tool = cx.string("require_tool")?;
        let reminder = cx.string("reminder")?;
        match (tool, reminder) {
            (Some(t), r) => {
                let r = r.map_or_else(|| default_reminder(&t.value), |r| r.value);
                Ok(Some((t.value, r)))
            }
            (None, Some(r)) => {
                cx.error(
                    r.loc,
                    "invalid-setting",
                    "`reminder` is sent only with `require_tool`, which is not set".to_owned(),
                    Some("name the tool the model must call: `require_tool: NAME`".into()),
                );
                Err(Reported)
            }
            (None, None) => Ok(None),
        }
    }

    fn no_data(cx: &mut BuildCx<'_>) -> Result<Option<NoData>, Reported> {
        let tools = cx.names("data_tools")?;
        let except = cx.names("not_data_tools")?;
        let packet = cx.string("no_data")?;
        if let Some(first) = except.first()
            && tools.is_empty()
        {
            cx.error(
                first.loc,
                "invalid-setting",
                "`not_data_tools` narrows `data_tools`, which is not set".to_owned(),
                Some("name the data tools or partitions: `data_tools: [NAME]`".into()),
            );
            return Err(Reported);
        }
        match (tools.is_empty(), packet) {
            (false, Some(p)) => Ok(Some(NoData {
                tools: tools.into_iter().map(|t| t.value).collect(),
                except: except.into_iter().map(|t| t.value).collect(),
                packet: p.value,
            })),
            (true, None) => Ok(None),
            (empty, packet) => {
                let loc = packet
                    .map(|p| p.loc)
                    .or_else(|| tools.first().map(|t| t.loc))
                    .unwrap_or(cx.kind_loc());
                let missing = if empty { "data_tools" } else { "no_data" };
                cx.error(
                    loc,
                    "missing-setting",
                    format!("`data_tools` and `no_data` go together; `{missing}` is missing"),
                    None,
                );
                Err(Reported)
            }
        }
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let mut messages = vec![ChatMessage::System {
            content: cx.render(&self.prompt)?,
        }];
        messages.extend(self.conversation.history(cx.state));
        if let Some(text) = self.input.and_then(|f| cx.state.text(f))
            && !model::ends_with_input(&messages, text)
        {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        let offers = match &self.tools_if {
            Some(e) => e.eval(cx.state, &[])?.is_true(),
            None => true,
        };
        let allowed = if offers {
            cx.services.tools.expand(&self.tools)
        } else {
            Vec::new()
        };
        let mut defs = cx.offer_tools(&allowed, |d| self.bindings.strip(d)).await;
        if offers {
            defs.extend(self.pauses.client_defs().iter().cloned());
        }
        // Decided from what was offered (recorded with each tool's
        // partition), so a re-execution decides the same with no server.
        let data: Vec<String> = match &self.no_data {
            Some(no_data) => defs
                .iter()
                .filter(|d| no_data.covers(d))
                .map(|d| d.name.clone())
                .collect(),
            None => Vec::new(),
        };
        if let Some(no_data) = &self.no_data
            && data.is_empty()
        {
            cx.events
                .thinking("No data tools are available; not answering from memory.")
                .await;
            let mut patch = Patch::new().set(Arc::clone(&self.output), no_data.packet.clone());
            if let Some(mut turn) = self.conversation.turn(&cx) {
                turn.reply(&no_data.packet, None);
                turn.write(&mut patch);
            }
            return Ok(patch);
        }
        let mut request = self.generation.request(messages);
        request.tools = defs;
        let mut done = self.converse(&cx, request, &allowed).await?;
        if let Some(no_data) = &self.no_data
            && !done.shown
            // A trace record with an `output` is a call that returned a result.
            && !done.trace.iter().any(|r| {
                r.get("output").is_some() && data.iter().any(|d| r["tool"] == d.as_str())
            })
        {
            cx.events
                .thinking("None of the data tools returned data; not answering from memory.")
                .await;
            done.answer = no_data.packet.clone();
        }
        let mut patch = Patch::new();
        if let Some(mut turn) = done.turn.take() {
            turn.reply(&done.answer, Some(&done.reasoning));
            turn.write(&mut patch);
        }
        patch.insert(Arc::clone(&self.output), done.answer);
        if let Some(field) = &self.trace
            && !done.trace.is_empty()
        {
            patch.insert(Arc::clone(field), Value::Array(done.trace));
        }
        for (field, value) in extract::writes(done.extracted) {
            // In mention order: the field's reducer keeps the last of a kind.
            cx.events.custom(field.to_string(), value.clone()).await;
            patch.insert(field, value);
        }
        Ok(patch)
    }

    /// The loop: model calls, tool calls, results back, until an answer.
    async fn converse(
        &self,
        cx: &NodeContext<'_>,
        mut request: ChatRequest,
        allowed: &[String],
    ) -> Result<Outcome, NodeError> {
        let mut done = Outcome {
            turn: self.conversation.turn(cx),
            ..Outcome::default()
        };
        let mut reminded = false;
        let mut ran_once = std::collections::HashSet::new();
        let started = std::time::Instant::now();
        for call in 0..self.max_iterations {
            let last = self.is_last(cx, call, started).await;
            if last {
                request.tools.clear();
            }
            let reply = cx.llm(&self.roles, call, &request).await?;
            let out = reply.output();
            if out.tool_calls.is_empty() || last {
                if !last && !reminded && self.remind(&mut request, &done.trace, &out.text) {
                    reminded = true;
                    continue;
                }
                done.answer = out.text.clone();
                done.reasoning = out.reasoning.clone();
                if out.finish_reason == "length" {
                    super::llm::truncated(cx, "length").await;
                }
                break;
            }
            let results = self
                .run_calls(cx, &out.tool_calls, allowed, &request.tools, &mut ran_once)
                .await;
            // Calls that wait for a person pause the run once the others
            // are done (their results are logged, and served on resume).
            let waiting: Vec<_> = results
                .iter()
                .filter_map(|r| r.as_ref().err())
                .cloned()
                .collect();
            if !waiting.is_empty() {
                return Err(NodeError::Interrupted(waiting));
            }
            let results = results.into_iter().flatten();
            if let Some(turn) = &mut done.turn {
                turn.calls(out);
            }
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
                    done.extracted.extend(self.extract.apply(
                        cx.state,
                        cx.item,
                        &tc.name,
                        &record["args"],
                        output,
                    ));
                }
                if let Some(turn) = &mut done.turn {
                    turn.result(&tc.id, &tc.name, content.clone());
                }
                request.messages.push(ChatMessage::Tool {
                    call_id: tc.id.clone(),
                    content,
                });
                done.trace.push(record);
            }
            if !shown.is_empty() {
                // Pass-through results are the answer, verbatim: the model
                // does not restate them.
                done.answer = shown.join("\n\n");
                done.shown = true;
                break;
            }
        }
        Ok(done)
    }

    /// When `require_tool` is offered but was not called, the answer goes
    /// back with the reminder; says whether it did.
    fn remind(&self, request: &mut ChatRequest, trace: &[Value], answer: &str) -> bool {
        let Some((tool, reminder)) = &self.require else {
            return false;
        };
        let offered = request.tools.iter().any(|d| d.name == *tool);
        if !offered || trace.iter().any(|r| r["tool"] == tool.as_str()) {
            return false;
        }
        request.messages.push(ChatMessage::Assistant {
            content: answer.to_owned(),
            tool_calls: Vec::new(),
        });
        request.messages.push(ChatMessage::User {
            content: reminder.clone(),
        });
        true
    }

    /// Whether model call `call` is the last (made without tools): the
    /// iteration cap, or the time budget spent. Says why in the thinking.
    async fn is_last(&self, cx: &NodeContext<'_>, call: u32, started: Instant) -> bool {
        let capped = call + 1 == self.max_iterations;
        // A re-execution decides as the recorded run did, whatever the clock.
        let late = match &cx.services.playback {
            Some(p) => p.past_budget(cx.events.node(), cx.events.step(), cx.events.task(), call),
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
        last
    }
}

impl Agent {
    /// A data node whose last attempt failed has no data: it writes its
    /// `no_data` packet, so what follows says so instead of presenting
    /// half an answer, or a model's memory, as figures.
    fn no_data_recovery(&self, failure: &Failure<'_>) -> Option<Recovery> {
        let no_data = self.no_data.as_ref()?;
        Some(Recovery {
            patch: Patch::new().set(Arc::clone(&self.output), no_data.packet.clone()),
            note: format!(
                "`{}` failed ({}); it has no data, so nothing it wrote is used.",
                failure.node, failure.error
            ),
            truncated: None,
            refused: None,
        })
    }
}

impl Node for Agent {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }

    fn recover<'a>(
        &'a self,
        cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move {
            let mut r = Recovery::refusal(&self.output, &failure).or_else(|| {
                Recovery::decide(self.on_error, &failure, || {
                    Recovery::partial_text(&failure).or_else(|| self.no_data_recovery(&failure))
                })
            })?;
            // A kept answer is the node's reply in its conversation too:
            // the refusal, the part the user read, or the no-data packet.
            let kept = if r.refused.is_some() {
                Some(super::bounds::REFUSAL)
            } else if r.truncated.is_some() {
                Some(failure.streamed)
            } else {
                // The no-data fallback (not a skip, which writes nothing).
                r.patch.get(&self.output).and_then(Value::as_str)
            };
            if let Some(text) = kept.map(str::to_owned) {
                self.conversation.keep(&cx, &mut r.patch, &text);
            }
            Some(r)
        })
    }
}
