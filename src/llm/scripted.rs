//! A scripted model for tests and benchmarks: answers from a list of turns
//! (or a function of the request), streamed as real chunks would be.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::{ChatModel, ChatRequest, ChunkStream, LlmChunk, LlmError};
use crate::events::Usage;

/// One scripted response.
#[derive(Clone, Debug)]
pub enum Turn {
    /// Stream this text, split into word tokens.
    Text(String),
    /// Ask for these tool calls: (tool name, arguments).
    ToolCalls(Vec<(String, Value)>),
    /// Answer raw text that is meant to be JSON (may be invalid on purpose).
    Raw(String),
    /// Fail with this error before streaming anything.
    Fail(LlmError),
    /// Stream these chunks exactly, then fail with the error if given.
    Chunks(Vec<LlmChunk>, Option<LlmError>),
}

impl Turn {
    /// A text turn.
    pub fn text(s: impl Into<String>) -> Self {
        Turn::Text(s.into())
    }

    /// A JSON answer (for structured-output calls).
    pub fn json(v: Value) -> Self {
        Turn::Raw(v.to_string())
    }

    /// One tool call.
    pub fn tool(name: impl Into<String>, args: Value) -> Self {
        Turn::ToolCalls(vec![(name.into(), args)])
    }
}

type Responder = dyn Fn(&ChatRequest) -> Turn + Send + Sync;

/// A model that plays a script.
pub struct ScriptedModel {
    name: String,
    turns: Mutex<VecDeque<Turn>>,
    responder: Option<Box<Responder>>,
    requests: Option<Mutex<Vec<ChatRequest>>>,
    token_delay: Option<Duration>,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ScriptedModel {
    /// Plays `turns` in order; a call after the last turn fails.
    pub fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self {
            name: "scripted".into(),
            turns: Mutex::new(turns.into_iter().collect()),
            responder: None,
            requests: Some(Mutex::new(Vec::new())),
            token_delay: None,
        }
    }

    /// Answers every request with `f(request)`; keeps no request log.
    pub fn from_fn(f: impl Fn(&ChatRequest) -> Turn + Send + Sync + 'static) -> Self {
        Self {
            name: "scripted".into(),
            turns: Mutex::new(VecDeque::new()),
            responder: Some(Box::new(f)),
            requests: None,
            token_delay: None,
        }
    }

    /// Reports `name` as its model name (default `scripted`): two models
    /// of a test are told apart in events and recordings.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Waits this long before each streamed chunk (simulated generation speed).
    pub fn with_token_delay(mut self, delay: Duration) -> Self {
        self.token_delay = Some(delay);
        self
    }

    /// Wraps in an `Arc` for [`super::Models`].
    pub fn shared(self) -> Arc<Self> {
        Arc::new(self)
    }

    /// Requests received so far (empty for [`ScriptedModel::from_fn`]).
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests
            .as_ref()
            .map(|r| r.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .unwrap_or_default()
    }

    /// Turns not yet played.
    pub fn remaining(&self) -> usize {
        self.turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn next_turn(&self, request: &ChatRequest) -> Turn {
        if let Some(f) = &self.responder {
            return f(request);
        }
        if let Some(log) = &self.requests {
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request.clone());
        }
        self.turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .unwrap_or_else(|| Turn::Fail(LlmError::Scripted("no scripted turn left".into())))
    }
}

/// Splits text into word tokens that keep their leading whitespace, the way
/// model tokens usually look (`"Hello"`, `" world"`).
pub(crate) fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() && in_word {
            out.push(text[start..i].to_owned());
            start = i;
            in_word = false;
        } else if !c.is_whitespace() {
            in_word = true;
        }
    }
    if start < text.len() {
        out.push(text[start..].to_owned());
    }
    out
}

fn chunks_for(turn: Turn, prompt_tokens: u64) -> (Vec<LlmChunk>, Option<LlmError>) {
    let mut completion = 0u64;
    let (mut chunks, finish, err) = match turn {
        Turn::Text(text) | Turn::Raw(text) => {
            let toks: Vec<LlmChunk> = tokens(&text).into_iter().map(LlmChunk::Text).collect();
            completion = toks.len() as u64;
            (toks, "stop", None)
        }
        Turn::ToolCalls(calls) => {
            let mut out = Vec::new();
            for (i, (name, args)) in calls.into_iter().enumerate() {
                let text = args.to_string();
                let mid = text
                    .char_indices()
                    .nth(text.chars().count() / 2)
                    .map(|(i, _)| i)
                    .unwrap_or(0);
                out.push(LlmChunk::ToolCallStart {
                    index: i as u32,
                    id: format!("call_{i}_{name}"),
                    name,
                });
                out.push(LlmChunk::ToolCallArgs {
                    index: i as u32,
                    delta: text[..mid].to_owned(),
                });
                out.push(LlmChunk::ToolCallArgs {
                    index: i as u32,
                    delta: text[mid..].to_owned(),
                });
                completion += 8;
            }
            (out, "tool_calls", None)
        }
        Turn::Fail(e) => return (Vec::new(), Some(e)),
        Turn::Chunks(chunks, err) => return (chunks, err),
    };
    chunks.push(LlmChunk::Finish(finish.into()));
    chunks.push(LlmChunk::Usage(Usage {
        prompt_tokens,
        completion_tokens: completion,
        ..Usage::default()
    }));
    (chunks, err)
}

impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        let turn = self.next_turn(request);
        let prompt_tokens = request
            .messages
            .iter()
            .map(|m| match m {
                super::ChatMessage::System { content }
                | super::ChatMessage::User { content }
                | super::ChatMessage::UserWithImages { content, .. }
                | super::ChatMessage::Assistant { content, .. }
                | super::ChatMessage::Tool { content, .. } => content.len() as u64 / 4,
            })
            .sum();
        let (chunks, err) = chunks_for(turn, prompt_tokens);
        let items = chunks.into_iter().map(Ok).chain(err.map(Err));
        match self.token_delay {
            None => futures::stream::iter(items).boxed(),
            Some(delay) => futures::stream::iter(items)
                .then(move |item| async move {
                    tokio::time::sleep(delay).await;
                    item
                })
                .boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_whitespace_and_rejoin_exactly() {
        let text = "Hello  world,\nthis is  it ";
        let t = tokens(text);
        assert_eq!(t[0], "Hello");
        assert_eq!(t[1], "  world,");
        assert_eq!(t.concat(), text);
        assert!(tokens("").is_empty());
    }

    #[tokio::test]
    async fn plays_turns_in_order_then_fails() {
        let m = ScriptedModel::new([
            Turn::text("a b"),
            Turn::tool("calc", serde_json::json!({"x": 1})),
        ]);
        let first: Vec<_> = m.stream(&ChatRequest::default()).collect().await;
        assert_eq!(first[0].as_ref().unwrap(), &LlmChunk::Text("a".into()));
        let second: Vec<_> = m.stream(&ChatRequest::default()).collect().await;
        let args: String = second
            .iter()
            .filter_map(|c| match c {
                Ok(LlmChunk::ToolCallArgs { delta, .. }) => Some(delta.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(args, r#"{"x":1}"#);
        let third: Vec<_> = m.stream(&ChatRequest::default()).collect().await;
        assert!(matches!(third[0], Err(LlmError::Scripted(_))));
        assert_eq!(m.requests().len(), 3);
    }
}
