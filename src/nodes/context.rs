//! What a running node may call: its [`NodeContext`], the [`Services`]
//! (models, tools) behind it, and the two traits the layers above plug in
//! through — [`Playback`] (replay serves recorded model and tool results)
//! and [`SubgraphRunner`] (the executor runs a nested graph). Defined here,
//! where nodes are, so nodes depend on nothing above them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Graph, NodeError};
use crate::events::{EventKind, NodeEvents};
use crate::graph::PromptRef;
use crate::graph::prompts::Prompts;
use crate::llm::fallback::is_answer;
use crate::llm::{
    CallRecorder, ChatRequest, ChunkStream, LlmError, LlmReply, ModelCall, Models, ToolDef,
    stream_call,
};
use crate::state::DynState;
use crate::tools::{ToolError, ToolOutcome, ToolRegistry};

/// Recorded model and tool results, served instead of calling them when a
/// run is re-executed or resumed after a crash (`crate::replay` implements
/// it). Keys: node name, step, task and call number / tool call id.
pub trait Playback: Send + Sync + fmt::Debug {
    /// The recorded stream of a model call and the model that answered.
    fn llm(&self, node: &str, step: u32, task: u32, call: u32) -> Option<(String, ChunkStream)>;
    /// As [`Playback::llm`], seeing the request the node is about to send:
    /// a playback that serves a call only while the request is unchanged
    /// (`stategraph eval`) decides here. By default, [`Playback::llm`].
    fn llm_for(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call: u32,
        request: &ChatRequest,
    ) -> Option<(String, ChunkStream)> {
        let _ = request;
        self.llm(node, step, task, call)
    }
    /// The recorded result of a tool call.
    fn tool(
        &self,
        node: &str,
        step: u32,
        task: u32,
        call_id: &str,
    ) -> Option<Result<ToolOutcome, ToolError>>;
    /// Whether the recorded call was made past the agent's time budget
    /// (offered no tools), so a re-execution decides as the run did.
    fn past_budget(&self, node: &str, step: u32, task: u32, call: u32) -> bool {
        let _ = (node, step, task, call);
        false
    }
    /// The tools a task offered its model, if recorded.
    fn tools_offered(&self, node: &str, step: u32, task: u32) -> Option<Vec<ToolDef>> {
        let _ = (node, step, task);
        None
    }
    /// The answer a person gave to interrupt `id`, if the recording has
    /// one (a re-execution passes through the run's pauses).
    fn answer(&self, id: &str) -> Option<Value> {
        let _ = id;
        None
    }
}

/// Runs a graph inside a node (`kind: subgraph`); the executor implements it.
pub trait SubgraphRunner: Send + Sync {
    /// Runs `graph` on `state` to its end; its events go to the parent's
    /// stream under `prefix/node` names.
    ///
    /// # Errors
    /// The nested run failed; the message says why.
    fn run_subgraph<'a>(
        &'a self,
        graph: Arc<Graph>,
        state: Box<dyn DynState>,
        cx: &'a NodeContext<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn DynState>, String>>;
}

/// What nodes can call at run time.
#[derive(Debug, Clone)]
pub struct Services {
    /// Models by role.
    pub models: Models,
    /// Tools.
    pub tools: Arc<ToolRegistry>,
    /// Model outputs and tool results served instead of calling them
    /// (re-execution, crash recovery).
    pub playback: Option<Arc<dyn Playback>>,
    /// Answers to the interrupts a resumed run paused at, by interrupt id.
    pub answers: Option<Arc<std::collections::BTreeMap<String, Value>>>,
    /// The user the run acts for (the API key's user of a chat request),
    /// read by bound tool arguments as `user.id`; recorded in
    /// `run_started` so a re-execution acts for the same user.
    pub user: Option<Arc<str>>,
    /// Hears each model call's request as it starts (the server stores
    /// them: `GET /api/runs/{id}/calls`); `None` records nothing.
    pub calls: Option<Arc<dyn CallRecorder>>,
}

impl Services {
    /// Live models and tools.
    pub fn new(models: Models, tools: Arc<ToolRegistry>) -> Self {
        Self {
            models,
            tools,
            playback: None,
            answers: None,
            user: None,
            calls: None,
        }
    }

    /// The same services acting for `user`.
    pub fn for_user(&self, user: &str) -> Self {
        Self {
            user: Some(Arc::from(user)),
            ..self.clone()
        }
    }
}

/// The model roles of a node: `model` (default `chat`) and, optionally,
/// `fallback_model`, which answers when the first fails before answering.
#[derive(Clone, Debug)]
pub struct Roles {
    /// The role that answers.
    pub role: Arc<str>,
    /// The role that answers when `role` fails before streaming anything.
    pub fallback: Option<Arc<str>>,
    /// Replies that signal the graph rather than answer the user
    /// (`quiet_replies`): never streamed as text.
    pub quiet: Arc<[String]>,
}

/// What a running node sees.
#[derive(Clone, Copy)]
pub struct NodeContext<'a> {
    /// The state as of the start of the superstep.
    pub state: &'a dyn DynState,
    /// The map item, for map fan-out tasks.
    pub item: Option<&'a Value>,
    /// Where the node's events go.
    pub events: &'a NodeEvents,
    /// Models and tools.
    pub services: &'a Services,
    /// The graph's prompt templates.
    pub prompts: &'a Prompts,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Cancelled when the run is stopped.
    pub cancel: &'a CancellationToken,
    /// Runs nested graphs.
    pub subgraphs: &'a dyn SubgraphRunner,
}

impl NodeContext<'_> {
    /// The answer a person gave to interrupt `id`: given with this resume,
    /// or recorded (a re-execution passes through the run's pauses).
    pub fn answer(&self, id: &str) -> Option<Value> {
        self.services
            .answers
            .as_ref()
            .and_then(|a| a.get(id).cloned())
            .or_else(|| self.services.playback.as_ref().and_then(|p| p.answer(id)))
    }

    /// An interrupt of this task asking `ask`, lapsing `expires_after`
    /// from now.
    pub fn interrupt(
        &self,
        id: String,
        ask: crate::events::Ask,
        expires_after: Option<std::time::Duration>,
    ) -> crate::events::Interrupt {
        crate::events::Interrupt {
            id,
            node: self.events.node().to_string(),
            step: self.events.step(),
            task: self.events.task(),
            expires_at: expires_after.map(|d| crate::events::now_micros() + d.as_micros() as u64),
            ask,
        }
    }

    /// Renders a prompt with the state (and the map item).
    ///
    /// # Errors
    /// The template failed at render time.
    pub fn render(&self, prompt: &PromptRef) -> Result<String, NodeError> {
        prompt
            .render(self.prompts, self.state, self.item)
            .map_err(|e| NodeError::Prompt {
                prompt: prompt.name().to_owned(),
                message: e.to_string(),
            })
    }

    /// Calls the model for `roles` (call number `call` within this task),
    /// streaming its events — or serves the call from the recording when
    /// the run is being re-executed or resumed.
    ///
    /// With a fallback role, a call that fails before the model has
    /// answered anything (no text, reasoning or tool call streamed) is made
    /// again, with the same call number, for the fallback role, after a
    /// thinking note; the events show both calls (`llm_failed`, then a
    /// second `llm_started`), and a recording serves them in that order.
    /// A call that fails after it streamed part of an answer is not
    /// repeated: the client has seen that text.
    ///
    /// # Errors
    /// The model failed (emitted as `llm_failed`), and so did the fallback.
    pub async fn llm(
        &self,
        roles: &Roles,
        call: u32,
        request: &ChatRequest,
    ) -> Result<LlmReply, LlmError> {
        let role = &roles.role;
        let Some(fallback) = roles.fallback.as_ref().filter(|f| *f != role) else {
            return self.llm_as(role, call, request, None, &roles.quiet).await;
        };
        let answered = Arc::new(AtomicBool::new(false));
        match self
            .llm_as(role, call, request, Some(&answered), &roles.quiet)
            .await
        {
            Err(error) if !answered.load(Ordering::Relaxed) => {
                tracing::warn!(node = %self.events.node(), %role, %fallback, %error, "model failed before answering; calling the fallback role");
                self.events
                    .thinking(format!(
                        "The `{role}` model failed before answering; the fallback model (`{fallback}`) answers instead."
                    ))
                    .await;
                self.llm_as(fallback, call, request, None, &roles.quiet)
                    .await
            }
            other => other,
        }
    }

    /// One model call for `role`; sets `answered` once an answer chunk
    /// (text, reasoning, a tool call) has streamed.
    async fn llm_as(
        &self,
        role: &Arc<str>,
        call: u32,
        request: &ChatRequest,
        answered: Option<&Arc<AtomicBool>>,
        quiet: &[String],
    ) -> Result<LlmReply, LlmError> {
        let watch = |stream: ChunkStream| match answered {
            None => stream,
            Some(flag) => {
                let flag = Arc::clone(flag);
                stream
                    .inspect(move |c| {
                        if matches!(c, Ok(chunk) if is_answer(chunk)) {
                            flag.store(true, Ordering::Relaxed);
                        }
                    })
                    .boxed()
            }
        };
        let recorder = self.services.calls.as_deref();
        let cx = |endpoint| ModelCall {
            events: self.events,
            role,
            call,
            quiet,
            recorder,
            endpoint,
        };
        if let Some(rec) = &self.services.playback
            && let Some((model, stream)) = rec.llm_for(
                self.events.node(),
                self.events.step(),
                self.events.task(),
                call,
                request,
            )
        {
            return stream_call(&model, watch(stream), cx("recording"), request).await;
        }
        let model = self.services.models.for_role(role);
        // Described only when someone records it (once per call).
        let endpoint = recorder.map(|_| model.describe()).unwrap_or_default();
        stream_call(
            model.name(),
            watch(model.stream(request)),
            cx(&endpoint),
            request,
        )
        .await
    }

    /// The definitions of the tools `allowed` to offer the model, each
    /// shaped by `shape` (bound arguments removed), recorded as
    /// `tools_offered`; when re-executing, the recorded ones (the tools'
    /// providers, an MCP server say, need not be running). Call once per
    /// task, before the first model call.
    pub async fn offer_tools(
        &self,
        allowed: &[String],
        shape: impl Fn(&mut ToolDef),
    ) -> Vec<ToolDef> {
        let recorded = self.services.playback.as_ref().and_then(|p| {
            p.tools_offered(self.events.node(), self.events.step(), self.events.task())
        });
        let defs = recorded.unwrap_or_else(|| {
            let mut defs = self.services.tools.defs(allowed);
            defs.iter_mut().for_each(shape);
            defs
        });
        if !defs.is_empty() {
            self.events
                .emit(EventKind::ToolsOffered {
                    tools: defs.clone(),
                })
                .await;
        }
        defs
    }

    /// Calls a tool on behalf of this node (allowed: `allowed`) — or serves
    /// the result from the recording.
    ///
    /// # Errors
    /// The structured failure for the model.
    pub async fn tool(
        &self,
        call_id: &str,
        name: &str,
        args: Value,
        allowed: &[String],
    ) -> Result<ToolOutcome, ToolError> {
        if let Some(rec) = &self.services.playback
            && let Some(r) = rec.tool(
                self.events.node(),
                self.events.step(),
                self.events.task(),
                call_id,
            )
        {
            return r;
        }
        self.services.tools.call(name, args, allowed).await
    }
}

impl fmt::Debug for NodeContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeContext")
            .field("node", self.events.node())
            .field("attempt", &self.attempt)
            .finish()
    }
}
