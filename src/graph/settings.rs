//! Graph-level settings besides nodes and edges: `chat` (how a chat request
//! fills the state and which fields carry over between turns) and
//! `external_tools` (tools that only configuration provides).

use std::sync::Arc;

use super::compiled::ChatIo;
use super::diagnostic::{Diagnostics, name_hint};
use super::loc::Sp;
use super::spec::ChatSpec;
use crate::state::StateSchema;

/// Body keys of `POST /api/chat` itself; `chat.inputs` cannot claim them.
const BODY_KEYS: &[&str] = &["id", "messages", "trigger", "messageId", "graph"];

/// Checks `chat:` against the state and fills in its defaults.
pub(super) fn chat_io(
    spec: Option<&Sp<ChatSpec>>,
    schema: Option<&StateSchema>,
    state_loc: crate::graph::loc::Loc,
    d: &mut Diagnostics,
) -> ChatIo {
    let empty = ChatSpec::default();
    let c = spec.map_or(&empty, |s| &s.value);
    let Some(schema) = schema else {
        return ChatIo::default();
    };
    let string_named = |name: &str| {
        schema
            .field(name)
            .filter(|f| schema.spec(*f).ty.is_string())
            .map(|_| Arc::<str>::from(name))
    };
    let history = match &c.history {
        Some(h) => chat_field(
            schema,
            d,
            h,
            "history",
            &|t| t.is_messages(),
            "a field of type messages",
        ),
        None => schema
            .messages_field()
            .map(|f| Arc::clone(&schema.spec(f).name)),
    };
    let string = |d: &mut Diagnostics, sp: &Sp<String>, what: &str| {
        chat_field(schema, d, sp, what, &|t| t.is_string(), "a string field")
    };
    let text = match &c.text {
        Some(t) => string(d, t, "text"),
        None => string_named("query"),
    };
    let answer = match &c.answer {
        Some(a) => string(d, a, "answer"),
        None => string_named("answer"),
    };
    if history.is_none() && text.is_none() && c.history.is_none() && c.text.is_none() {
        d.warning(
            spec.map_or(state_loc, |s| s.loc),
            "chat-input-unused",
            format!(
                "a chat request's message lands nowhere: state `{}` has no field of type messages and no string field `query`",
                schema.name
            ),
            Some(
                "declare `messages: { type: messages }` (the conversation) or `query: { type: string }`, or set `chat: { text: FIELD }`; a graph no chat request runs can ignore this".into(),
            ),
        );
    }
    let request: Vec<&str> = history.iter().chain(text.iter()).map(|f| &**f).collect();
    let carry = carry(&c.carry, schema, &request, d);
    let inputs = inputs(c, schema, d);
    ChatIo {
        history,
        text,
        answer,
        carry,
        inputs,
    }
}

/// The state field a `chat.{what}` setting names, if it exists and its
/// type is `ok`; otherwise the error says what it `needs`.
fn chat_field(
    schema: &StateSchema,
    d: &mut Diagnostics,
    sp: &Sp<String>,
    what: &str,
    ok: &dyn Fn(&crate::state::TypeSpec) -> bool,
    needs: &str,
) -> Option<Arc<str>> {
    match schema.field(&sp.value) {
        Some(f) if ok(&schema.spec(f).ty) => Some(sp.value.as_str().into()),
        Some(f) => {
            d.error(
                sp.loc,
                "field-type",
                format!(
                    "`chat.{what}` is `{}`, which is {}; it needs {needs}",
                    sp.value,
                    schema.spec(f).ty.describe()
                ),
                None,
            );
            None
        }
        None => {
            d.error(
                sp.loc,
                "unknown-field",
                format!(
                    "`chat.{what}` names `{}`, but state `{}` has no such field",
                    sp.value, schema.name
                ),
                name_hint(&sp.value, schema.names()),
            );
            None
        }
    }
}

/// Checks `chat.inputs`: body keys of the request, each into a field.
fn inputs(c: &ChatSpec, schema: &StateSchema, d: &mut Diagnostics) -> Vec<(String, Arc<str>)> {
    let mut inputs = Vec::new();
    for (key, target) in c
        .inputs
        .as_ref()
        .map(|m| m.entries.as_slice())
        .unwrap_or_default()
    {
        if BODY_KEYS.contains(&key.value.as_str()) {
            d.error(
                key.loc,
                "invalid-setting",
                format!(
                    "`{}` is part of every chat request; `chat.inputs` cannot use it",
                    key.value
                ),
                None,
            );
            continue;
        }
        let what = format!("inputs.{}", key.value);
        if let Some(f) = chat_field(schema, d, target, &what, &|_| true, "a field") {
            inputs.push((key.value.clone(), f));
        }
    }
    inputs
}

/// Checks `chat.carry`; `request` are the fields every request sets.
fn carry(
    entries: &[Sp<String>],
    schema: &StateSchema,
    request: &[&str],
    d: &mut Diagnostics,
) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = Vec::new();
    for e in entries {
        let name = e.value.as_str();
        if out.iter().any(|f| &**f == name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` is listed twice in `carry`"),
                None,
            );
            continue;
        }
        if request.contains(&name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` comes with every chat request, so carrying it has no effect"),
                Some("carry what nodes derive, such as `entities` or `summary`".into()),
            );
            continue;
        }
        if schema.field(name).is_none() {
            d.error(
                e.loc,
                "unknown-field",
                format!(
                    "`carry` names `{name}`, but state `{}` has no such field",
                    schema.name
                ),
                name_hint(name, schema.names()),
            );
            continue;
        }
        out.push(name.into());
    }
    out
}

/// Checks `config:` (a mapping of names to literal values); returns it as
/// a JSON object, or `None` when the graph has none.
pub(super) fn graph_config(
    config: Option<&Sp<super::value::SpValue>>,
    d: &mut Diagnostics,
) -> Option<serde_json::Value> {
    let config = config?;
    let super::value::SpValue::Map(entries) = &config.value else {
        d.error(
            config.loc,
            "invalid-setting",
            format!("`config` maps names to values, not {}", config.value.kind()),
            Some("write `config: { tenant: acme }`".into()),
        );
        return None;
    };
    for (k, v) in entries {
        if let super::value::SpValue::Str(s) = &v.value
            && (s.contains("{{") || s.contains("{%"))
        {
            d.error(
                v.loc,
                "invalid-setting",
                format!("`config.{}` is a template; config values are written as they are", k.value),
                Some("config holds constants; read the state in a bound argument as `{{ state.FIELD }}`".into()),
            );
        }
    }
    Some(config.value.to_json())
}

/// Checks `external_tools:`; returns the names.
pub(super) fn external_tools(entries: &[Sp<String>], d: &mut Diagnostics) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let name = e.value.as_str();
        let valid = !name.is_empty()
            && name.len() <= 128
            && !name.chars().any(|c| c.is_whitespace() || c.is_control());
        if !valid {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{}` is not a tool or partition name", name.escape_debug()),
                None,
            );
        } else if out.iter().any(|n| n == name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` is listed twice in `external_tools`"),
                None,
            );
        } else {
            out.push(name.to_owned());
        }
    }
    out
}

/// Checks `optional_tools:`: each name is one the graph uses (in
/// `external_tools` or a node's `tools`), listed once.
pub(super) fn optional_tools<N>(
    entries: &[Sp<String>],
    external: &[String],
    nodes: &[super::compiled::CompiledNode<N>],
    d: &mut Diagnostics,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let name = e.value.as_str();
        let used = external.iter().any(|x| x == name)
            || nodes.iter().any(|n| n.tools.iter().any(|t| t == name));
        if !used {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` is in `optional_tools` but no node's `tools` and no `external_tools` entry names it"),
                Some("list tools or partitions the graph uses; an optional one is still declared where it is used".into()),
            );
        } else if out.iter().any(|n| n == name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` is listed twice in `optional_tools`"),
                None,
            );
        } else {
            out.push(name.to_owned());
        }
    }
    out
}
