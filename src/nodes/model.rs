//! What the kinds that call a model share: their model roles, the
//! conversation history they send, and the settings that describe both.

use std::sync::Arc;

use super::{BuildCx, Roles};
use crate::graph::kinds::schema;
use crate::graph::{Reported, SettingDoc};
use crate::llm::ChatMessage;
use crate::state::{DynState, FieldId, Message};

/// `model` and `fallback_model`.
pub(super) const ROLE_SETTINGS: [SettingDoc; 2] = [
    SettingDoc::new(
        "model",
        schema::STRING,
        "model role (mapped to an endpoint and model in config; default `chat`)",
    ),
    SettingDoc::new(
        "fallback_model",
        schema::STRING,
        "model role that answers when `model` fails before answering anything",
    ),
];

/// `quiet_replies` (`llm` and `agent`).
pub(super) const QUIET: SettingDoc = SettingDoc::new(
    "quiet_replies",
    schema::NAMES,
    "replies that signal the graph, not the user (`[PROCEED]`): held back while the text could still become one, never streamed when it is one; written to the output for a route to read",
);

/// `prompt`.
pub(super) const PROMPT: SettingDoc = SettingDoc::new(
    "prompt",
    schema::STRING,
    "prompt template under the prompts directory (minijinja)",
);

/// `history` and `history_window`.
pub(super) const HISTORY_SETTINGS: [SettingDoc; 2] = [
    SettingDoc::new(
        "history",
        schema::FIELD,
        "field of type messages sent as the conversation",
    ),
    SettingDoc::new(
        "history_window",
        schema::INTEGER,
        "how many of the newest history messages to send",
    ),
];

/// `input`.
pub(super) const INPUT: SettingDoc = SettingDoc::new(
    "input",
    schema::FIELD,
    "string field sent as the user's message",
);

/// The node's model roles.
///
/// # Errors
/// `fallback_model` names the node's own role, or a setting is not a
/// string (reported).
pub(super) fn roles(cx: &mut BuildCx<'_>) -> Result<Roles, Reported> {
    let role = cx.role();
    let fallback = cx.string("fallback_model")?;
    if let Some(f) = &fallback
        && *f.value == *role
    {
        cx.error(
            f.loc,
            "invalid-setting",
            format!("`fallback_model` names the node's own model role `{role}`"),
            Some("name another role (configured in [llm.roles])".into()),
        );
        return Err(Reported);
    }
    let quiet = cx.names("quiet_replies")?;
    Ok(Roles {
        role,
        fallback: fallback.map(|f| Arc::from(f.value.as_str())),
        quiet: quiet.into_iter().map(|q| q.value).collect(),
    })
}

/// Whether the history sent already ends with the user's message `text`
/// (as typed, or with files attached after it — a text file's content
/// follows a `[file: …]` line), so the input is not sent twice.
pub(super) fn ends_with_input(messages: &[ChatMessage], text: &str) -> bool {
    messages
        .last()
        .and_then(ChatMessage::user_text)
        .is_some_and(|c| {
            c == text
                || c.strip_prefix(text)
                    .is_some_and(|rest| rest.starts_with("\n\n[file: "))
        })
}

/// The newest `window` messages of a history field as model messages
/// (a window never starts with tool results whose call it cut off).
pub(super) fn history(
    state: &dyn DynState,
    field: Option<FieldId>,
    window: usize,
) -> Vec<ChatMessage> {
    let Some(msgs) = field.and_then(|f| state.messages(f)) else {
        return Vec::new();
    };
    let all: Vec<&Message> = msgs.iter().collect();
    let start = super::convo::window_start(&all, super::convo::Trim::Last(window));
    all[start..]
        .iter()
        .map(|m| super::convo::to_chat(m))
        .collect()
}
