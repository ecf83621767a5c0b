//! Node kinds: one file per kind, one enum dispatches.
//!
//! A kind has two halves. `build` reads the node's settings from the graph
//! file, resolves every field, prompt and tool it names (reporting problems
//! as diagnostics) and returns the compiled node. `run` executes it against a
//! state snapshot and returns a [`Patch`]. A new kind is one file plus one
//! arm in [`NodeImpl`] and [`build`]; application code can also register
//! Rust nodes by name ([`NodeRegistry`]).

mod agent;
mod build;
mod entities;
mod followup;
mod llm;
mod noop;
mod research;
mod router;
mod subgraph;
mod summarizer;
mod tool;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::events::NodeEvents;
use crate::graph::prompts::Prompts;
use crate::llm::fallback::is_answer;
use crate::llm::{
    ChatMessage, ChatRequest, ChunkStream, LlmError, LlmReply, ModelCall, stream_call,
};
use crate::runtime::Services;
use crate::state::{DynState, FieldId, Message, Patch, Role};
use crate::tools::{ToolError, ToolOutcome};

pub use build::{BuildCx, PromptRef, Reported};

/// The built-in kinds.
pub const BUILTIN_KINDS: &[&str] = &[
    "agent",
    "followup",
    "llm",
    "noop",
    "research_facts",
    "research_passages",
    "research_plan",
    "research_reflect",
    "research_score",
    "research_select",
    "research_synthesize",
    "router",
    "subgraph",
    "summarizer",
    "tool",
];

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
    /// The role that answers when a model call fails before answering
    /// (the node's `fallback_model`); see [`NodeContext::llm`].
    pub fallback_model: Option<&'a Arc<str>>,
}

impl NodeContext<'_> {
    /// Calls the model for `role` (call number `call` within this task),
    /// streaming its events — or serves the call from the recording when
    /// the run is being re-executed or resumed.
    ///
    /// With a `fallback_model`, a call that fails before the model has
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
        role: &Arc<str>,
        call: u32,
        request: &ChatRequest,
    ) -> Result<LlmReply, LlmError> {
        let Some(fallback) = self.fallback_model.filter(|f| *f != role) else {
            return self.llm_as(role, call, request, None).await;
        };
        let answered = Arc::new(AtomicBool::new(false));
        match self.llm_as(role, call, request, Some(&answered)).await {
            Err(error) if !answered.load(Ordering::Relaxed) => {
                tracing::warn!(node = %self.events.node(), %role, %fallback, %error, "model failed before answering; calling the fallback role");
                self.events
                    .thinking(format!(
                        "The `{role}` model failed before answering; the fallback model (`{fallback}`) answers instead."
                    ))
                    .await;
                self.llm_as(fallback, call, request, None).await
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
        let cx = ModelCall {
            events: self.events,
            role,
            call,
        };
        if let Some(rec) = &self.services.recording
            && let Some((model, stream)) = rec.llm(
                self.events.node(),
                self.events.step(),
                self.events.task(),
                call,
            )
        {
            return stream_call(&model, watch(stream), cx, request).await;
        }
        let model = self.services.models.for_role(role);
        stream_call(model.name(), watch(model.stream(request)), cx, request).await
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
        if let Some(rec) = &self.services.recording
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

/// Why a node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A model call failed.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// A prompt failed to render.
    #[error("prompt `{prompt}` failed to render: {message}")]
    Prompt {
        /// The template.
        prompt: String,
        /// Why.
        message: String,
    },
    /// The attempt exceeded the node's timeout.
    #[error("node timed out after {0:?}")]
    Timeout(Duration),
    /// A subgraph run failed.
    #[error("subgraph `{graph}` failed: {message}")]
    Subgraph {
        /// The subgraph.
        graph: String,
        /// Its error.
        message: String,
    },
    /// The node's own failure.
    #[error("{0}")]
    Failed(String),
    /// A tool the node calls itself (kind `tool`) failed.
    #[error("tool `{tool}` failed: {error}")]
    Tool {
        /// The tool.
        tool: String,
        /// Its structured failure (boxed: errors stay small to move).
        error: Box<ToolError>,
    },
}

impl NodeError {
    /// Whether a retry may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            NodeError::Llm(e) => e.is_transient(),
            NodeError::Timeout(_) => true,
            NodeError::Tool { error, .. } => tool::is_transient(error),
            NodeError::Prompt { .. } | NodeError::Subgraph { .. } | NodeError::Failed(_) => false,
        }
    }
}

/// A node implemented in Rust and registered by name.
pub trait Node: Send + Sync {
    /// Runs the node.
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>>;
}

type Factory = dyn Fn(&Value) -> Result<Arc<dyn Node>, String> + Send + Sync;

/// Rust node kinds available to graph files, by kind name.
#[derive(Clone, Default)]
pub struct NodeRegistry {
    kinds: BTreeMap<String, Arc<Factory>>,
}

impl fmt::Debug for NodeRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl NodeRegistry {
    /// Registers `kind`; `factory` gets the node's `params` (or `null`) and
    /// returns the node or a message explaining what is wrong with them.
    pub fn register(
        &mut self,
        kind: impl Into<String>,
        factory: impl Fn(&Value) -> Result<Arc<dyn Node>, String> + Send + Sync + 'static,
    ) -> &mut Self {
        self.kinds.insert(kind.into(), Arc::new(factory));
        self
    }

    /// Registered kind names.
    pub fn names(&self) -> impl Iterator<Item = &str> + Clone {
        self.kinds.keys().map(String::as_str)
    }

    fn get(&self, kind: &str) -> Option<&Arc<Factory>> {
        self.kinds.get(kind)
    }
}

/// A compiled node's behaviour.
pub enum NodeImpl {
    /// Does nothing, or writes constants.
    Noop(noop::Noop),
    /// One prompt, streamed into a field.
    Llm(llm::LlmNode),
    /// Intent classification.
    Router(router::Router),
    /// Model with tools in a loop.
    Agent(agent::Agent),
    /// Rolling summary of history.
    Summarizer(summarizer::Summarizer),
    /// Suggested follow-up questions.
    Followup(followup::Followup),
    /// Runs another graph.
    Subgraph(subgraph::Subgraph),
    /// Calls one tool.
    Tool(tool::ToolNode),
    /// A step of the research pipeline.
    Research(research::Research),
    /// A registered Rust node.
    Custom(Arc<dyn Node>),
}

impl fmt::Debug for NodeImpl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeImpl::Noop(_) => "noop",
            NodeImpl::Llm(_) => "llm",
            NodeImpl::Router(_) => "router",
            NodeImpl::Agent(_) => "agent",
            NodeImpl::Summarizer(_) => "summarizer",
            NodeImpl::Followup(_) => "followup",
            NodeImpl::Subgraph(_) => "subgraph",
            NodeImpl::Tool(_) => "tool",
            NodeImpl::Research(r) => r.kind(),
            NodeImpl::Custom(_) => "custom",
        })
    }
}

impl NodeImpl {
    /// Runs the node once.
    ///
    /// # Errors
    /// The node failed; see [`NodeError::is_transient`].
    pub async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        match self {
            NodeImpl::Noop(n) => Ok(n.run()),
            NodeImpl::Llm(n) => n.run(cx).await,
            NodeImpl::Router(n) => n.run(cx).await,
            NodeImpl::Agent(n) => n.run(cx).await,
            NodeImpl::Summarizer(n) => n.run(cx).await,
            NodeImpl::Followup(n) => n.run(cx).await,
            NodeImpl::Subgraph(n) => n.run(cx).await,
            NodeImpl::Tool(n) => n.run(cx).await,
            NodeImpl::Research(n) => n.run(cx).await,
            NodeImpl::Custom(n) => n.run(cx).await,
        }
    }

    /// The values this node can write to a field, when it declares them
    /// (a router's intents): conditional edges on that field must map them.
    pub fn declared_values(&self) -> Option<(FieldId, &[String])> {
        match self {
            NodeImpl::Router(r) => Some(r.declared_values()),
            _ => None,
        }
    }

    /// The subgraph this node runs, if any.
    pub fn subgraph(&self) -> Option<&Arc<crate::graph::CompiledGraph>> {
        match self {
            NodeImpl::Subgraph(s) => Some(s.graph()),
            _ => None,
        }
    }
}

/// Builds the node `cx.node` of kind `kind`.
pub fn build(kind: &str, cx: &mut BuildCx<'_>, registry: &NodeRegistry) -> Option<NodeImpl> {
    match kind {
        "noop" => noop::Noop::build(cx).map(NodeImpl::Noop),
        "llm" => llm::LlmNode::build(cx).map(NodeImpl::Llm),
        "router" => router::Router::build(cx).map(NodeImpl::Router),
        "agent" => agent::Agent::build(cx).map(NodeImpl::Agent),
        "summarizer" => summarizer::Summarizer::build(cx).map(NodeImpl::Summarizer),
        "followup" => followup::Followup::build(cx).map(NodeImpl::Followup),
        "subgraph" => subgraph::Subgraph::build(cx).map(NodeImpl::Subgraph),
        "tool" => tool::ToolNode::build(cx).map(NodeImpl::Tool),
        k if research::KINDS.contains(&k) => {
            research::Research::build(k, cx).map(NodeImpl::Research)
        }
        other => {
            let factory = registry.get(other)?;
            cx.accept(&["params"]);
            let params = cx
                .node
                .params
                .as_ref()
                .map(|p| p.value.clone())
                .unwrap_or(Value::Null);
            match factory(&params) {
                Ok(node) => Some(NodeImpl::Custom(node)),
                Err(message) => {
                    let loc = cx
                        .node
                        .params
                        .as_ref()
                        .map(|p| p.loc)
                        .unwrap_or(cx.node.kind.loc);
                    cx.error(
                        loc,
                        "invalid-params",
                        format!("node `{}` of kind `{other}`: {message}", cx.node.id.value),
                        None,
                    );
                    None
                }
            }
        }
    }
}

/// Whether `kind` names a built-in or registered kind.
pub fn kind_exists(kind: &str, registry: &NodeRegistry) -> bool {
    BUILTIN_KINDS.contains(&kind) || registry.get(kind).is_some()
}

/// The newest `window` messages of a history field as model messages.
pub(crate) fn history(
    state: &dyn DynState,
    field: Option<FieldId>,
    window: usize,
) -> Vec<ChatMessage> {
    let Some(msgs) = field.and_then(|f| state.messages(f)) else {
        return Vec::new();
    };
    let start = msgs.len().saturating_sub(window);
    msgs[start..].iter().map(to_chat).collect()
}

fn to_chat(m: &Message) -> ChatMessage {
    match m.role {
        Role::System => ChatMessage::System {
            content: m.content.clone(),
        },
        Role::User => ChatMessage::User {
            content: m.content.clone(),
        },
        Role::Assistant => ChatMessage::Assistant {
            content: m.content.clone(),
            tool_calls: Vec::new(),
        },
    }
}
