//! `summarizer`: a rolling summary of long conversations.
//!
//! Defaults: the first summary once the history holds more than 20
//! messages; a new one after 8 or more further messages; the newest 30
//! messages go to the model (with the previous summary, which the prompt can
//! use). Below the thresholds the node returns an empty patch without
//! calling the model. The summary lands in state, where later nodes' prompts
//! read it.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::model::{self, PROMPT, ROLE_SETTINGS};
use super::{BuildCx, Kind, Node, NodeContext, NodeError, Roles};
use crate::graph::kinds::schema;
use crate::graph::loc::Sp;
use crate::graph::spec::Surface;
use crate::graph::{PromptRef, SettingDoc};
use crate::llm::ChatMessage;
use crate::state::{FieldId, Patch, TypeKind};

/// The kind.
pub(super) fn kind() -> Kind {
    let mut settings = vec![
        PROMPT,
        SettingDoc::new(
            "history",
            schema::FIELD,
            "messages field to summarize (default `messages`)",
        ),
        SettingDoc::new(
            "output",
            schema::FIELD,
            "string field receiving the summary (default `summary`)",
        ),
        SettingDoc::new(
            "covered",
            schema::FIELD,
            "integer field counting the messages summarized (default `summarized_count`)",
        ),
        SettingDoc::new(
            "first_after",
            schema::INTEGER,
            "first summary once the history exceeds this many messages (default 20)",
        ),
        SettingDoc::new(
            "every",
            schema::INTEGER,
            "re-summarize after this many new messages (default 8)",
        ),
        SettingDoc::new(
            "window",
            schema::INTEGER,
            "messages sent to the model (default 30)",
        ),
    ];
    settings.extend(ROLE_SETTINGS);
    settings.extend(GENERATION_SETTINGS);
    settings.push(ON_ERROR);
    Kind::new(
        "summarizer",
        "A rolling summary of long conversations, written only when due.",
        &settings,
        Surface::Hidden,
        |cx| Summarizer::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// Rolling-summary node.
#[derive(Debug)]
struct Summarizer {
    prompt: PromptRef,
    roles: Roles,
    history: FieldId,
    output: (FieldId, Arc<str>),
    covered: (FieldId, Arc<str>),
    first_after: usize,
    every: usize,
    window: usize,
    generation: Generation,
    on_error: OnError,
}

impl Summarizer {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let prompt = cx.prompt(true);
        let history_name = match cx.string("history") {
            Ok(h) => h.unwrap_or_else(|| Sp::new("messages".into(), cx.kind_loc())),
            Err(_) => return None,
        };
        let history = cx.field(&history_name, "a field of type messages", |f| {
            f.ty.is_messages()
        });
        let output = cx.output("output", "summary", "a string field", |f| f.ty.is_string());
        let covered = cx.output("covered", "summarized_count", "an integer field", |f| {
            matches!(f.ty.kind, TypeKind::Integer { .. })
        });
        let first_after = cx.integer("first_after", 0..=100_000, 20);
        let every = cx.integer("every", 1..=100_000, 8);
        let window = cx.integer("window", 1..=100_000, 30);
        let roles = model::roles(cx);
        let generation = Generation::build(cx, 512);
        // Without a new summary the conversation still answers: skip.
        let on_error = OnError::build(cx, OnError::Skip, false);
        Some(Self {
            generation: generation.ok()?,
            on_error: on_error.ok()?,
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            history: history?,
            output: output?,
            covered: covered?,
            first_after: first_after.ok()? as usize,
            every: every.ok()? as usize,
            window: window.ok()? as usize,
        })
    }

    /// Whether a (new) summary is due for `len` messages when `covered` are
    /// already summarized (`has_summary` tells if a summary exists).
    fn due(&self, len: usize, covered: usize, has_summary: bool) -> bool {
        if !has_summary || covered == 0 {
            len > self.first_after
        } else {
            len >= covered + self.every
        }
    }

    async fn call(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let msgs = cx.state.messages(self.history).unwrap_or_default();
        let covered = cx.state.get(self.covered.0).as_u64().unwrap_or(0) as usize;
        let has_summary = cx.state.text(self.output.0).is_some_and(|s| !s.is_empty());
        if !self.due(msgs.len(), covered, has_summary) {
            return Ok(Patch::new());
        }
        let start = msgs.len().saturating_sub(self.window);
        // `role: content` lines, pushed rather than `writeln!`: the format
        // machinery cost ~430 instructions a line (~9,000 a chat run).
        let lines = &msgs[start..];
        let size = lines.iter().map(|m| m.content.len() + 12).sum();
        let mut transcript = String::with_capacity(size);
        for m in lines {
            transcript.push_str(m.role.as_str());
            transcript.push_str(": ");
            transcript.push_str(&m.content);
            transcript.push('\n');
        }
        let messages = vec![
            ChatMessage::System {
                content: cx.render(&self.prompt)?,
            },
            ChatMessage::User {
                content: transcript,
            },
        ];
        let reply = cx
            .llm(&self.roles, 0, &self.generation.request(messages))
            .await?;
        let summary = reply.output().text.trim();
        Ok(Patch::new()
            .set(Arc::clone(&self.output.1), summary)
            .set(Arc::clone(&self.covered.1), msgs.len()))
    }
}

impl Node for Summarizer {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.call(cx).boxed()
    }

    fn recover<'a>(
        &'a self,
        _cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move { Recovery::decide(self.on_error, &failure, || None) })
    }
}
