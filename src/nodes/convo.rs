//! Conversations as state, for the kinds that talk to a model in turns
//! (`llm`, `agent`): which messages field they read as the conversation,
//! how it is trimmed, and which one they append their turn to.
//!
//! ```yaml
//! - id: agent
//!   kind: agent
//!   messages: messages            # read as the conversation, the turn appended
//!   history: { tokens: 3000 }     # or { last: 20 }, or a field name
//! ```
//!
//! With `messages: F`, the node reads `F` as its conversation (unless
//! `history` names another field) and appends what it did: an `llm` its
//! reply; an `agent` each assistant message with its tool calls, each tool
//! result (`role: tool`, with the call's id), and its final answer. That is
//! LangGraph's `add_messages`: a ReAct loop, a reflection loop or a
//! supervisor keep their conversation without bookkeeping nodes, and
//! because the field is state, the turns survive into the next chat turn.
//!
//! Trimming never splits a turn: a window that would start with tool
//! results (their assistant call cut off) starts after them, since a
//! provider refuses a tool result whose call it has not seen.
//!
//! Appended messages get ids made from the node, the map task and their
//! place in the list (`agent-7`), so a re-execution writes the same state
//! and a later turn's messages never take an earlier one's id.

use std::sync::Arc;

use serde_json::Value;

use super::{BuildCx, NodeContext};
use crate::events::{LlmOutput, ToolCallRecord};
use crate::graph::loc::Sp;
use crate::graph::value::SpValue;
use crate::graph::{Reported, SettingDoc};
use crate::llm::ChatMessage;
use crate::state::{DynState, FieldId, FieldSpec, Message, MessageToolCall, Patch, Reducer, Role};

/// The settings: `history`, `history_window`, `messages`.
pub(super) const SETTINGS: [SettingDoc; 3] = [
    SettingDoc::new(
        "history",
        r#"{"oneOf":[{"type":"string"},{"type":"object","properties":{"field":{"type":"string"},"last":{"type":"integer","minimum":0},"tokens":{"type":"integer","minimum":1},"swap_roles":{"type":"boolean"}},"additionalProperties":false}]}"#,
        "the conversation sent: a messages field, or {field, last | tokens, swap_roles} (field defaults to `messages:`)",
    ),
    SettingDoc::new(
        "history_window",
        crate::graph::kinds::schema::INTEGER,
        "how many of the newest history messages to send (same as `history: {last: N}`)",
    ),
    SettingDoc::new(
        "messages",
        crate::graph::kinds::schema::FIELD,
        "messages field (append or merge_by_id) the node appends its turn to; also read as the conversation",
    ),
];

/// `reply_as` (`llm` only: an agent's reply is its answer).
pub(super) const REPLY_AS: SettingDoc = SettingDoc::new(
    "reply_as",
    r#"{"enum":["assistant","user"]}"#,
    "role of the reply appended to `messages` (default assistant; `user` for a critic in a reflection loop)",
);

/// Longest window by count, and the largest token budget.
const MAX_LAST: i64 = 1000;
const MAX_TOKENS: i64 = 1_000_000;

/// How the history is cut to a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trim {
    /// The newest N messages.
    Last(usize),
    /// The newest messages whose estimated tokens fit N.
    Tokens(usize),
}

/// A node's conversation settings, compiled.
#[derive(Debug)]
pub(super) struct Conversation {
    /// The messages field read as the conversation.
    read: Option<FieldId>,
    trim: Trim,
    /// Sent with user and assistant swapped (a critic reads the answer as
    /// the user's); tool turns are left out then.
    swap: bool,
    /// The messages field the node appends its turn to.
    append: Option<(FieldId, Arc<str>)>,
    /// The role of the appended reply.
    reply_as: Role,
}

impl Conversation {
    /// Reads the settings; `default_window` is the kind's default count.
    ///
    /// # Errors
    /// A wrong field, window or role (reported).
    pub(super) fn build(cx: &mut BuildCx<'_>, default_window: u32) -> Result<Self, Reported> {
        let append = append_field(cx)?;
        let reply_as = match cx.string("reply_as")? {
            None => Role::Assistant,
            Some(r) if r.value == "assistant" => Role::Assistant,
            Some(r) if r.value == "user" => Role::User,
            Some(r) => {
                cx.error(
                    r.loc,
                    "invalid-setting",
                    format!("`reply_as` is `assistant` or `user`, not `{}`", r.value),
                    None,
                );
                return Err(Reported);
            }
        };
        if reply_as == Role::User
            && append.is_none()
            && let Some(v) = cx.setting("reply_as")
        {
            cx.error(
                v.loc,
                "invalid-setting",
                "`reply_as` is the role of the reply appended to `messages`, which is not set",
                Some("name the messages field the reply goes to: `messages: messages`".into()),
            );
            return Err(Reported);
        }
        let window = cx.integer("history_window", 0..=MAX_LAST, i64::from(default_window))?;
        let mut conv = Self {
            read: append.as_ref().map(|a| a.0),
            trim: Trim::Last(window as usize),
            swap: false,
            append,
            reply_as,
        };
        let Some(v) = cx.setting("history") else {
            return Ok(conv);
        };
        match &v.value {
            SpValue::Str(name) => {
                conv.read = Some(read_field(cx, &Sp::new(name.clone(), v.loc))?);
            }
            SpValue::Map(entries) => conv.history_map(cx, v.loc, entries)?,
            other => {
                cx.error(
                    v.loc,
                    "invalid-setting",
                    format!(
                        "`history` is a messages field or a mapping {{field, last | tokens}}, not {}",
                        other.kind()
                    ),
                    None,
                );
                return Err(Reported);
            }
        }
        Ok(conv)
    }

    /// `history: {field, last | tokens, swap_roles}`.
    fn history_map(
        &mut self,
        cx: &mut BuildCx<'_>,
        loc: crate::graph::loc::Loc,
        entries: &[crate::graph::value::SpEntry],
    ) -> Result<(), Reported> {
        let mut trims = 0;
        for (k, val) in entries {
            match (k.value.as_str(), &val.value) {
                ("field", SpValue::Str(name)) => {
                    self.read = Some(read_field(cx, &Sp::new(name.clone(), val.loc))?);
                }
                ("last", SpValue::Int(n)) if (0..=MAX_LAST).contains(n) => {
                    self.trim = Trim::Last(*n as usize);
                    trims += 1;
                }
                ("tokens", SpValue::Int(n)) if (1..=MAX_TOKENS).contains(n) => {
                    self.trim = Trim::Tokens(*n as usize);
                    trims += 1;
                }
                ("swap_roles", SpValue::Bool(b)) => self.swap = *b,
                (key @ ("field" | "last" | "tokens" | "swap_roles"), _) => {
                    let expected = match key {
                        "field" => "a messages field".to_owned(),
                        "last" => format!("a whole number from 0 to {MAX_LAST}"),
                        "tokens" => format!("a whole number from 1 to {MAX_TOKENS}"),
                        _ => "true or false".to_owned(),
                    };
                    cx.error(
                        val.loc,
                        "invalid-setting",
                        format!("`history.{key}` must be {expected}"),
                        None,
                    );
                    return Err(Reported);
                }
                (key, _) => {
                    cx.error(
                        k.loc,
                        "invalid-setting",
                        format!("`history` has no key `{key}`"),
                        Some("use `field`, `last`, `tokens` or `swap_roles`".into()),
                    );
                    return Err(Reported);
                }
            }
        }
        if trims > 1 || (trims == 1 && cx.setting("history_window").is_some()) {
            cx.error(
                loc,
                "invalid-setting",
                "the window is given twice: `history` has one of `last` or `tokens`, and then no `history_window`",
                None,
            );
            return Err(Reported);
        }
        if self.read.is_none() {
            cx.error(
                loc,
                "missing-setting",
                "`history` needs the messages field it reads: `field: messages`, or the node's `messages:`",
                None,
            );
            return Err(Reported);
        }
        Ok(())
    }

    /// The conversation sent to the model: the window of the history
    /// field, as model messages.
    pub(super) fn history(&self, state: &dyn DynState) -> Vec<ChatMessage> {
        let Some(msgs) = self.read.and_then(|f| state.messages(f)) else {
            return Vec::new();
        };
        if self.swap {
            // A critic: plain text turns, the roles swapped.
            let plain: Vec<&Message> = msgs
                .iter()
                .filter(|m| {
                    matches!(m.role, Role::User | Role::Assistant) && m.tool_calls.is_empty()
                })
                .collect();
            let start = window_start(&plain, self.trim);
            return plain[start..]
                .iter()
                .map(|m| {
                    let role = if m.role == Role::User {
                        Role::Assistant
                    } else {
                        Role::User
                    };
                    to_chat(&Message::new("", role, m.content.clone()))
                })
                .collect();
        }
        let all: Vec<&Message> = msgs.iter().collect();
        let start = window_start(&all, self.trim);
        all[start..].iter().map(|m| to_chat(m)).collect()
    }

    /// Appends the answer a failed node keeps (the part of it the user
    /// read, a refusal, a fallback) to `patch` as the node's reply, as a
    /// normal reply is: the next turn's prompt sees what the user saw.
    pub(super) fn keep(&self, cx: &NodeContext<'_>, patch: &mut Patch, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        if let Some(mut turn) = self.turn(cx) {
            turn.reply(text, None);
            turn.write(patch);
        }
    }

    /// A recorder of the messages this task appends, if it appends any.
    pub(super) fn turn(&self, cx: &NodeContext<'_>) -> Option<Turn> {
        let (field, name) = self.append.as_ref()?;
        let len = cx.state.messages(*field).map_or(0, <[Message]>::len);
        let node = cx.events.node();
        let base = match cx.events.task() {
            0 => node.to_string(),
            t => format!("{node}.{t}"),
        };
        Some(Turn {
            field: Arc::clone(name),
            base,
            next: len,
            reply_as: self.reply_as,
            node: node.to_string(),
            out: Vec::new(),
        })
    }
}

/// The field `messages:` names: of type messages, with a reducer that
/// appends (a `last` field would lose the conversation at every write).
fn append_field(cx: &mut BuildCx<'_>) -> Result<Option<(FieldId, Arc<str>)>, Reported> {
    let Some(name) = cx.string("messages")? else {
        return Ok(None);
    };
    let ok = |f: &FieldSpec| {
        f.ty.is_messages()
            && match &f.reducer {
                Reducer::Append => true,
                Reducer::MergeById { key } => &**key == "id",
                _ => false,
            }
    };
    let Some(id) = cx.field(
        &name,
        "a field of type messages with the append or merge_by_id reducer",
        ok,
    ) else {
        return Err(Reported);
    };
    cx.writes(id);
    Ok(Some((id, name.value.as_str().into())))
}

/// A messages field the node reads.
fn read_field(cx: &mut BuildCx<'_>, name: &Sp<String>) -> Result<FieldId, Reported> {
    cx.field(name, "a field of type messages", |f| f.ty.is_messages())
        .ok_or(Reported)
}

/// A rough token count of a message (four characters a token, plus the
/// message's own overhead), for trimming by tokens. Rough on purpose: a
/// budget is a ceiling for cost and context, not a billing figure.
fn estimated_tokens(m: &Message) -> usize {
    let chars = m.content.chars().count()
        + m.tool_calls
            .iter()
            .map(|c| c.name.len() + c.args.to_string().len())
            .sum::<usize>();
    chars.div_ceil(4) + 4
}

/// Where the window of `msgs` starts: the newest messages that fit, then
/// past any tool results whose call was cut off.
pub(super) fn window_start(msgs: &[&Message], trim: Trim) -> usize {
    let mut start = match trim {
        Trim::Last(n) => msgs.len().saturating_sub(n),
        Trim::Tokens(budget) => {
            let mut used = 0;
            let mut start = msgs.len();
            for (i, m) in msgs.iter().enumerate().rev() {
                used += estimated_tokens(m);
                if used > budget {
                    break;
                }
                start = i;
            }
            start
        }
    };
    while start < msgs.len() && msgs[start].role == Role::Tool {
        start += 1;
    }
    start
}

/// A stored message as the model gets it.
pub(super) fn to_chat(m: &Message) -> ChatMessage {
    match m.role {
        Role::System => ChatMessage::System {
            content: m.content.clone(),
        },
        Role::User if !m.images.is_empty() => ChatMessage::UserWithImages {
            content: m.content.clone(),
            images: m.images.clone(),
        },
        Role::User => ChatMessage::User {
            content: m.content.clone(),
        },
        Role::Assistant => ChatMessage::Assistant {
            content: m.content.clone(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| ToolCallRecord {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: match &c.args {
                        Value::String(text) => text.clone(),
                        Value::Null => "{}".to_owned(),
                        v => v.to_string(),
                    },
                })
                .collect(),
        },
        Role::Tool => ChatMessage::Tool {
            call_id: m.tool_call_id.clone().unwrap_or_default(),
            content: m.content.clone(),
        },
    }
}

/// The messages one task appends, in order, with their ids.
#[derive(Debug)]
pub(super) struct Turn {
    field: Arc<str>,
    base: String,
    /// The place of the next message in the list.
    next: usize,
    reply_as: Role,
    node: String,
    out: Vec<Message>,
}

impl Turn {
    fn push(&mut self, mut m: Message) {
        m.id = format!("{}-{}", self.base, self.next);
        self.next += 1;
        self.out.push(m);
    }

    /// An assistant message that made tool calls (its text, reasoning and
    /// the calls as the model wrote them).
    pub(super) fn calls(&mut self, out: &LlmOutput) {
        let mut m = Message::assistant("", out.text.clone());
        m.reasoning = Some(out.reasoning.clone()).filter(|r| !r.is_empty());
        m.name = Some(self.node.clone());
        m.tool_calls = out
            .tool_calls
            .iter()
            .map(|tc| MessageToolCall {
                id: tc.id.clone(),
                name: tc.name.clone(),
                args: serde_json::from_str(&tc.arguments)
                    .unwrap_or_else(|_| Value::String(tc.arguments.clone())),
            })
            .collect();
        self.push(m);
    }

    /// A tool result answering `call_id`.
    pub(super) fn result(&mut self, call_id: &str, tool: &str, content: String) {
        self.push(Message::tool("", call_id, tool, content));
    }

    /// The node's reply (as `reply_as`), with the model's reasoning.
    pub(super) fn reply(&mut self, text: &str, reasoning: Option<&str>) {
        let mut m = Message::new("", self.reply_as, text);
        m.reasoning = reasoning.filter(|r| !r.is_empty()).map(str::to_owned);
        m.name = Some(self.node.clone());
        self.push(m);
    }

    /// Adds the messages to `patch` (nothing when there are none).
    pub(super) fn write(self, patch: &mut Patch) {
        if self.out.is_empty() {
            return;
        }
        let items = self
            .out
            .into_iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect();
        patch.insert(self.field, Value::Array(items));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, content: &str) -> Message {
        Message::new("", role, content)
    }

    #[test]
    fn a_window_never_starts_with_tool_results_cut_from_their_call() {
        let mut call = msg(Role::Assistant, "");
        call.tool_calls.push(MessageToolCall {
            id: "c1".into(),
            name: "lookup".into(),
            args: serde_json::json!({"q": "x"}),
        });
        let msgs = [
            msg(Role::User, "question"),
            call,
            Message::tool("", "c1", "lookup", "{\"a\":1}"),
            Message::tool("", "c2", "lookup", "{\"a\":2}"),
            msg(Role::Assistant, "answer"),
            msg(Role::User, "next"),
        ];
        let refs: Vec<&Message> = msgs.iter().collect();
        // The last 4 would start at a tool result: the window starts after.
        assert_eq!(window_start(&refs, Trim::Last(4)), 4);
        assert_eq!(window_start(&refs, Trim::Last(5)), 1);
        assert_eq!(window_start(&refs, Trim::Last(0)), 6);
        assert_eq!(window_start(&refs, Trim::Last(100)), 0);
    }

    #[test]
    fn a_token_budget_keeps_the_newest_messages_that_fit() {
        let long = "x".repeat(400); // 100 tokens + 4
        let msgs = [
            msg(Role::User, &long),
            msg(Role::Assistant, &long),
            msg(Role::User, "short"), // 2 + 4
        ];
        let refs: Vec<&Message> = msgs.iter().collect();
        assert_eq!(window_start(&refs, Trim::Tokens(6)), 2);
        assert_eq!(window_start(&refs, Trim::Tokens(5)), 3, "nothing fits");
        assert_eq!(window_start(&refs, Trim::Tokens(109)), 2);
        assert_eq!(window_start(&refs, Trim::Tokens(110)), 1);
        assert_eq!(window_start(&refs, Trim::Tokens(213)), 1);
        assert_eq!(window_start(&refs, Trim::Tokens(214)), 0);
    }

    #[test]
    fn stored_tool_turns_go_back_to_the_model_as_tool_turns() {
        let mut call = msg(Role::Assistant, "let me look");
        call.tool_calls = vec![
            MessageToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                args: serde_json::json!({"q": "x"}),
            },
            MessageToolCall {
                id: "c2".into(),
                name: "lookup".into(),
                args: Value::String("{not json".into()),
            },
        ];
        match to_chat(&call) {
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                assert_eq!(content, "let me look");
                assert_eq!(tool_calls[0].arguments, r#"{"q":"x"}"#);
                assert_eq!(
                    tool_calls[1].arguments, "{not json",
                    "kept as the model sent it"
                );
            }
            other => panic!("{other:?}"),
        }
        match to_chat(&Message::tool("t", "c1", "lookup", "{\"a\":1}")) {
            ChatMessage::Tool { call_id, content } => {
                assert_eq!((call_id.as_str(), content.as_str()), ("c1", "{\"a\":1}"));
            }
            other => panic!("{other:?}"),
        }
    }
}
