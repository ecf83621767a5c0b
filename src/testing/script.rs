//! What a case's graph talks to instead of models and tools: the scripted
//! replies, served per node through the runtime's [`Playback`] hook, and a
//! registry holding the case's tool stubs and the real tools it names.
//!
//! Nothing else is reachable: a model call without a reply fails with a
//! clear error, a tool neither stubbed nor named in `real_tools` is not
//! offered, and an `http` node without a stub gets an error result. What
//! went unmatched is noted and reported as the case's failure.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::matching::contains;
use super::spec::{Stub, StubOutcome};
use crate::graph::loc::{Loc, Sp};
use crate::llm::reply::Reply;
use crate::llm::{ChatMessage, ChatRequest, ChunkStream, LlmError};
use crate::nodes::Playback;
use crate::tools::{PolicyOverride, Tool, ToolError, ToolOutcome, ToolRegistry, ToolSpec};

/// Something a case's run reached that its script does not cover.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Miss {
    /// What was missing, as a sentence.
    pub message: String,
}

type Notes = Arc<Mutex<Vec<Miss>>>;

fn note(notes: &Notes, message: String) {
    notes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Miss { message });
}

/// The scripted replies of a case, by node (`*`: any node).
#[derive(Debug, Default)]
pub(super) struct Script {
    queues: Mutex<HashMap<String, VecDeque<Sp<Reply>>>>,
    http: Mutex<Vec<Stub>>,
    calls: Mutex<u32>,
    notes: Notes,
    /// Calls the script does not answer go to the configured model
    /// (`stategraph test --live`) instead of failing.
    live: bool,
}

impl Script {
    /// An empty script noting misses into `notes`; with `live`, a call
    /// without a fitting reply goes to the configured model.
    pub(super) fn new(notes: Notes, live: bool) -> Self {
        Self {
            notes,
            live,
            ..Self::default()
        }
    }

    /// A turn begins: its replies come before what is left of earlier
    /// ones, and its `http` stubs replace the previous turn's.
    pub(super) fn begin_turn(&self, models: &[(Sp<String>, Vec<Sp<Reply>>)], stubs: &[Stub]) {
        let mut q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        for (node, replies) in models {
            let queue = q.entry(node.value.clone()).or_default();
            for r in replies.iter().rev() {
                queue.push_front(r.clone());
            }
        }
        *self.http.lock().unwrap_or_else(PoisonError::into_inner) = stubs
            .iter()
            .filter(|s| s.name.value == "http")
            .cloned()
            .collect();
    }

    /// Replies never played: (node, where the reply is written).
    pub(super) fn unused(&self) -> Vec<(String, Loc)> {
        let q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(String, Loc)> = q
            .iter()
            .flat_map(|(n, replies)| replies.iter().map(move |r| (n.clone(), r.loc)))
            .collect();
        out.sort_by_key(|(_, loc)| *loc);
        out
    }

    fn next(&self, node: &str) -> Option<Reply> {
        let mut q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let short = node.rsplit('/').next().unwrap_or(node);
        [node, short, "*"]
            .iter()
            .find_map(|k| q.get_mut(*k).and_then(VecDeque::pop_front))
            .map(|r| r.value)
    }
}

impl Playback for Script {
    fn llm(&self, node: &str, step: u32, task: u32, call: u32) -> Option<(String, ChunkStream)> {
        self.llm_for(node, step, task, call, &ChatRequest::default())
    }

    fn llm_for(
        &self,
        node: &str,
        _step: u32,
        _task: u32,
        _call: u32,
        request: &ChatRequest,
    ) -> Option<(String, ChunkStream)> {
        let n = {
            let mut c = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            *c += 1;
            *c
        };
        let items = match self.next(node) {
            Some(reply)
                if reply
                    .request
                    .as_ref()
                    .is_some_and(|r| *r != request.fingerprint()) =>
            {
                if self.live {
                    return None;
                }
                let message = format!(
                    "node `{node}` sent another request than the one its recorded reply answered (a prompt, the graph or the input changed since the recording), so the reply was not used: run `stategraph test --live` to ask the configured model, or record the case again"
                );
                note(&self.notes, message.clone());
                vec![Err(LlmError::Scripted(message))]
            }
            Some(reply) => reply.chunks(prompt_tokens(request), n),
            None if self.live => return None,
            None => {
                let message = format!(
                    "node `{node}` called the model, but the case has no scripted reply left for it"
                );
                note(&self.notes, message.clone());
                vec![Err(LlmError::Scripted(message))]
            }
        };
        Some(("scripted".to_owned(), futures::stream::iter(items).boxed()))
    }

    fn tool(
        &self,
        node: &str,
        _step: u32,
        _task: u32,
        call_id: &str,
    ) -> Option<Result<ToolOutcome, ToolError>> {
        // Only an `http` node's request comes here; tool calls go to the
        // stub registry (their arguments are matched there).
        if !call_id.starts_with("http:") {
            return None;
        }
        let stubs = self.http.lock().unwrap_or_else(PoisonError::into_inner);
        let stub = stubs
            .iter()
            .find(|s| s.node.as_ref().is_none_or(|n| n.value == node));
        Some(match stub {
            Some(s) => outcome(&s.outcome),
            None => {
                let message = format!(
                    "the `http` node `{node}` made a request, but the case stubs none for it (add `{{name: http, node: {node}, result: …}}` to `tools`)"
                );
                note(&self.notes, message.clone());
                Err(ToolError::Execution(message))
            }
        })
    }
}

fn prompt_tokens(request: &ChatRequest) -> u64 {
    request
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::System { content }
            | ChatMessage::User { content }
            | ChatMessage::UserWithImages { content, .. }
            | ChatMessage::Assistant { content, .. }
            | ChatMessage::Tool { content, .. } => content.len() as u64 / 4,
        })
        .sum()
}

fn outcome(o: &StubOutcome) -> Result<ToolOutcome, ToolError> {
    match o {
        StubOutcome::Result(v) => Ok(ToolOutcome {
            output: v.clone(),
            cached: false,
            display: false,
        }),
        StubOutcome::Error { kind, message } => Err(stub_error(kind, message)),
    }
}

fn stub_error(kind: &str, message: &str) -> ToolError {
    match kind {
        "timeout" => ToolError::Timeout(std::time::Duration::from_secs(30)),
        "not_found" => ToolError::NotFound {
            message: message.to_owned(),
            details: Value::Null,
        },
        "validation_error" => ToolError::Validation {
            message: message.to_owned(),
            details: Value::Null,
        },
        _ => ToolError::Execution(message.to_owned()),
    }
}

/// A tool answering from a case's stubs.
struct StubTool {
    spec: ToolSpec,
    stubs: Vec<(Option<Value>, StubOutcome)>,
    notes: Notes,
}

impl Tool for StubTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        let found = self
            .stubs
            .iter()
            .find(|(want, _)| want.as_ref().is_none_or(|w| contains(&args, w)));
        let result = match found {
            Some((_, StubOutcome::Result(v))) => Ok(v.clone()),
            Some((_, StubOutcome::Error { kind, message })) => Err(stub_error(kind, message)),
            None => {
                let wanted: Vec<&Value> =
                    self.stubs.iter().filter_map(|(a, _)| a.as_ref()).collect();
                let message = format!(
                    "`{}` was called with {args}, which no stub matches (stubbed arguments: {})",
                    self.spec.name,
                    serde_json::to_string(&wanted).unwrap_or_default()
                );
                note(&self.notes, message.clone());
                Err(ToolError::NotFound {
                    message,
                    details: json!({ "args": args }),
                })
            }
        };
        Box::pin(async move { result })
    }
}

/// The registry a case's graph sees: a tool per stubbed name (its schema
/// and partition from the real tool when one is registered, else from the
/// stub) and the real tools (or partitions) named in `real_tools`, with
/// their configured policies.
///
/// # Errors
/// A stub's name collides with another tool or partition.
pub(super) fn registry(
    real: &ToolRegistry,
    stubs: &[Stub],
    real_tools: &[String],
    notes: &Notes,
) -> Result<ToolRegistry, String> {
    let reg = ToolRegistry::new();
    let mut by_name: Vec<(String, Vec<&Stub>)> = Vec::new();
    for s in stubs.iter().filter(|s| s.name.value != "http") {
        match by_name.iter_mut().find(|(n, _)| *n == s.name.value) {
            Some((_, list)) => list.push(s),
            None => by_name.push((s.name.value.clone(), vec![s])),
        }
    }
    for (name, list) in by_name {
        let known = real.spec(&name);
        let partition = list
            .iter()
            .find_map(|s| s.partition.as_ref().map(|p| p.value.clone()))
            .or_else(|| known.as_ref().map(|k| k.partition.clone()))
            .unwrap_or_else(|| name.clone());
        let spec = ToolSpec {
            name: name.clone(),
            description: known
                .as_ref()
                .map_or_else(|| format!("{name} (stubbed)"), |k| k.description.clone()),
            input_schema: match (&known, list.iter().find_map(|s| s.schema.as_ref())) {
                (Some(k), _) => Arc::clone(&k.input_schema),
                (None, Some(sc)) => Arc::new(sc.value.clone()),
                (None, None) => Arc::new(json!({"type": "object"})),
            },
            output_schema: known.as_ref().and_then(|k| k.output_schema.clone()),
            partition,
            policy: real.policy(&name),
        };
        let tool = StubTool {
            spec,
            stubs: list
                .iter()
                .map(|s| (s.args.as_ref().map(|a| a.value.clone()), s.outcome.clone()))
                .collect(),
            notes: Arc::clone(notes),
        };
        reg.register(Arc::new(tool)).map_err(|e| e.to_string())?;
    }
    for name in real.expand(real_tools) {
        if reg.spec(&name).is_some() {
            continue;
        }
        if let Some(tool) = real.tool(&name) {
            let p = real.policy(&name);
            reg.set_policy(
                &name,
                PolicyOverride {
                    timeout: Some(p.timeout),
                    cache_ttl: Some(p.cache_ttl),
                    max_output_bytes: Some(p.max_output_bytes),
                    pass_through: Some(p.pass_through),
                },
            );
            reg.register(tool).map_err(|e| e.to_string())?;
        }
    }
    Ok(reg)
}
