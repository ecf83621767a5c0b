//! A model with a stand-in: when the primary model fails before it has
//! answered anything, the same request goes to the fallback model.
//!
//! The primary has already used its own retries by the time it reports an
//! error, so a failure here means "this endpoint is not serving us now"
//! (outage, exhausted quota, bad key). Once the primary has streamed part of
//! an answer the fallback is no longer used: the caller has shown that text,
//! and a second answer from another model would not continue it.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::Fuse;

use super::{ChatModel, ChatRequest, ChunkStream, LlmChunk, LlmError};

/// Whether a chunk is part of the answer (text, reasoning, a tool call), as
/// opposed to bookkeeping (finish reason, usage).
pub(crate) fn is_answer(chunk: &LlmChunk) -> bool {
    matches!(
        chunk,
        LlmChunk::Text(_)
            | LlmChunk::Reasoning(_)
            | LlmChunk::ToolCallStart { .. }
            | LlmChunk::ToolCallArgs { .. }
    )
}

/// `primary`, or `fallback` when `primary` fails before answering.
#[derive(Clone, Debug)]
pub struct FallbackModel {
    /// The model normally used.
    pub primary: Arc<dyn ChatModel>,
    /// The model used when the primary fails before streaming anything.
    pub fallback: Arc<dyn ChatModel>,
}

impl FallbackModel {
    /// `primary` with `fallback` as its stand-in.
    pub fn new(primary: Arc<dyn ChatModel>, fallback: Arc<dyn ChatModel>) -> Self {
        Self { primary, fallback }
    }
}

impl ChatModel for FallbackModel {
    /// The primary's name: events name the model that was asked first; the
    /// switch to the fallback is logged.
    fn name(&self) -> &str {
        self.primary.name()
    }

    /// True if either model is the offline model, since either may answer.
    fn is_offline(&self) -> bool {
        self.primary.is_offline() || self.fallback.is_offline()
    }

    fn describe(&self) -> String {
        format!(
            "{}, falling back to {}",
            self.primary.describe(),
            self.fallback.describe()
        )
    }

    fn adjustments(&self, request: &ChatRequest) -> Vec<String> {
        self.primary.adjustments(request)
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        let state = State {
            stream: self.primary.stream(request).fuse(),
            held: VecDeque::new(),
            retry: Some((
                request.clone(),
                Arc::clone(&self.fallback),
                self.primary.name().to_owned(),
            )),
        };
        futures::stream::unfold(state, |mut s| async move {
            s.next().await.map(|item| (item, s))
        })
        .boxed()
    }
}

struct State {
    stream: Fuse<ChunkStream>,
    /// Bookkeeping chunks held back until the primary has answered something.
    held: VecDeque<LlmChunk>,
    /// What a switch needs; `None` once the primary is committed to.
    retry: Option<(ChatRequest, Arc<dyn ChatModel>, String)>,
}

impl State {
    async fn next(&mut self) -> Option<Result<LlmChunk, LlmError>> {
        loop {
            if self.retry.is_none() {
                if let Some(chunk) = self.held.pop_front() {
                    return Some(Ok(chunk));
                }
                return self.stream.next().await;
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => {
                    if is_answer(&chunk) {
                        self.retry = None;
                    }
                    self.held.push_back(chunk);
                }
                Some(Err(error)) => {
                    let Some((request, fallback, primary)) = self.retry.take() else {
                        continue;
                    };
                    tracing::warn!(
                        primary = %primary,
                        fallback = %fallback.name(),
                        %error,
                        "primary model failed before answering; using the fallback model"
                    );
                    self.held.clear();
                    self.stream = fallback.stream(&request).fuse();
                }
                // An empty answer is still the primary's answer.
                None => self.retry = None,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::llm::scripted::{ScriptedModel, Turn};

    async fn run(m: &FallbackModel) -> Vec<Result<LlmChunk, LlmError>> {
        m.stream(&ChatRequest::default()).collect().await
    }

    #[tokio::test]
    async fn failure_before_answering_goes_to_the_fallback() {
        let primary = ScriptedModel::new([Turn::Chunks(
            vec![LlmChunk::Finish("stop".into())],
            Some(LlmError::Http {
                status: 503,
                message: "down".into(),
            }),
        )])
        .shared();
        let fallback = ScriptedModel::new([Turn::text("from fallback")]).shared();
        let m = FallbackModel::new(primary.clone(), fallback.clone());
        let out = run(&m).await;
        assert_eq!(out[0].as_ref().unwrap(), &LlmChunk::Text("from".into()));
        assert!(out.iter().all(Result::is_ok));
        assert_eq!(
            out.iter()
                .filter(|c| matches!(c, Ok(LlmChunk::Finish(_))))
                .count(),
            1,
            "held chunks dropped"
        );
        assert_eq!((primary.remaining(), fallback.remaining()), (0, 0));
        assert_eq!(m.name(), "scripted");
    }

    #[tokio::test]
    async fn failure_after_answering_is_passed_on() {
        let primary = ScriptedModel::new([Turn::Chunks(
            vec![LlmChunk::Text("par".into())],
            Some(LlmError::Stream("broke".into())),
        )])
        .shared();
        let fallback = ScriptedModel::new([Turn::text("unused")]).shared();
        let out = run(&FallbackModel::new(primary, fallback.clone())).await;
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].as_ref().unwrap(), &LlmChunk::Text("par".into()));
        assert!(matches!(&out[1], Err(LlmError::Stream(m)) if m == "broke"));
        assert_eq!(fallback.remaining(), 1, "fallback never called");
    }

    #[tokio::test]
    async fn fallback_errors_are_passed_on() {
        let primary =
            ScriptedModel::new([Turn::Fail(LlmError::Connect("refused".into()))]).shared();
        let fallback = ScriptedModel::new([Turn::Fail(LlmError::Http {
            status: 401,
            message: "key".into(),
        })])
        .shared();
        let out = run(&FallbackModel::new(primary, fallback)).await;
        assert!(
            matches!(out.as_slice(), [Err(LlmError::Http { status: 401, .. })]),
            "{out:?}"
        );
    }
}
