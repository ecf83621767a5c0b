//! A model script: a scripted model reachable from the configuration
//! (`[llm] script = "models.yaml"`) and the command line
//! (`--model-script FILE`), so the branches of a graph can be tried with
//! `run`, `serve` or `eval` without a key and without writing a mock server.
//!
//! The first rule whose `when` holds answers the request; every condition
//! given must hold (substrings are matched as written):
//!
//! ```yaml
//! rules:
//!   - when: { system: "You classify", user: "population" }   # system prompt, newest user message
//!     reply: { json: { intent: billing } }
//!   - when: { tools: true, tool_results: false }              # an agent's first call
//!     reply: { tool_calls: [{ name: get_data, args: { country: FRA } }] }
//!   - when: { contains: "Paris" }                             # any message
//!     replies: ["first time", "every later time"]             # in turn; the last repeats
//!   - reply: "Hello!"                                         # no `when`: any request
//! ```
//!
//! Other conditions: `format` (the structured-output schema's name, or
//! `true` for any), `tool` (a tool of that name is offered). Replies are
//! written as in test files ([`super::reply`]).

use std::path::Path;
use std::sync::Mutex;
use std::sync::PoisonError;

use futures::StreamExt;
use serde_json::Value;

use super::reply::Reply;
use super::{ChatMessage, ChatModel, ChatRequest, ChunkStream, LlmError};

/// What a rule asks of a request.
#[derive(Clone, Debug, Default, PartialEq)]
struct When {
    system: Option<String>,
    user: Option<String>,
    contains: Option<String>,
    format: Option<Value>,
    tools: Option<bool>,
    tool_results: Option<bool>,
    tool: Option<String>,
}

const WHEN_KEYS: &[&str] = &[
    "system",
    "user",
    "contains",
    "format",
    "tools",
    "tool_results",
    "tool",
];

impl When {
    fn read(v: &Value) -> Result<Self, String> {
        let Some(map) = v.as_object() else {
            return Err("`when` is a mapping of conditions".into());
        };
        if let Some(k) = map.keys().find(|k| !WHEN_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown condition `{k}` (conditions: {})",
                WHEN_KEYS.join(", ")
            ));
        }
        let text = |k: &str| -> Result<Option<String>, String> {
            match map.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{k}` is a string")),
            }
        };
        let flag = |k: &str| -> Result<Option<bool>, String> {
            match map.get(k) {
                None => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(format!("`{k}` is true or false")),
            }
        };
        Ok(Self {
            system: text("system")?,
            user: text("user")?,
            contains: text("contains")?,
            format: map.get("format").cloned(),
            tools: flag("tools")?,
            tool_results: flag("tool_results")?,
            tool: text("tool")?,
        })
    }

    fn holds(&self, req: &ChatRequest) -> bool {
        let system: String = req
            .messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::System { content } => Some(content.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let user = req
            .messages
            .iter()
            .rev()
            .find_map(ChatMessage::user_text)
            .unwrap_or("");
        let has = |needle: &Option<String>, hay: &str| {
            needle.as_ref().is_none_or(|n| hay.contains(n.as_str()))
        };
        let any_message = |n: &str| req.messages.iter().any(|m| content(m).contains(n));
        let format = match (&self.format, &req.response_format) {
            (None, _) => true,
            (Some(Value::Bool(want)), f) => *want == f.is_some(),
            (Some(Value::String(name)), Some(f)) => f.name == *name,
            _ => false,
        };
        let tool_results = req
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { .. }));
        has(&self.system, &system)
            && has(&self.user, user)
            && self.contains.as_deref().is_none_or(any_message)
            && format
            && self.tools.is_none_or(|t| t != req.tools.is_empty())
            && self.tool_results.is_none_or(|t| t == tool_results)
            && self
                .tool
                .as_ref()
                .is_none_or(|t| req.tools.iter().any(|d| d.name == *t))
    }
}

fn content(m: &ChatMessage) -> &str {
    match m {
        ChatMessage::System { content }
        | ChatMessage::User { content }
        | ChatMessage::UserWithImages { content, .. }
        | ChatMessage::Assistant { content, .. }
        | ChatMessage::Tool { content, .. } => content,
    }
}

/// One rule: a condition and the replies it gives, in turn.
#[derive(Debug)]
struct Rule {
    when: When,
    replies: Vec<Reply>,
    used: Mutex<usize>,
}

/// A model answering from a script's rules.
#[derive(Debug)]
pub struct ScriptModel {
    name: String,
    rules: Vec<Rule>,
}

impl ScriptModel {
    /// Reads a script file.
    ///
    /// # Errors
    /// The file cannot be read or a rule is malformed; the message names
    /// the file and the rule.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("model script {}: {e}", path.display()))?;
        let name = format!(
            "scripted:{}",
            path.file_stem().unwrap_or_default().to_string_lossy()
        );
        Self::parse(&name, &text).map_err(|e| format!("model script {}: {e}", path.display()))
    }

    /// Reads a script from its text.
    ///
    /// # Errors
    /// The text is not YAML or a rule is malformed.
    pub fn parse(name: &str, text: &str) -> Result<Self, String> {
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        let rules = doc
            .get("rules")
            .and_then(Value::as_array)
            .ok_or("a model script is `rules:`, a list of `{when, reply}`")?;
        if let Some(k) = doc
            .as_object()
            .and_then(|m| m.keys().find(|k| *k != "rules"))
        {
            return Err(format!("unknown key `{k}` (a model script has `rules`)"));
        }
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| rule(r).map_err(|e| format!("rule {}: {e}", i + 1)))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            name: name.to_owned(),
            rules,
        })
    }
}

fn rule(v: &Value) -> Result<Rule, String> {
    let Some(map) = v.as_object() else {
        return Err("a rule is a mapping with `when` and `reply` (or `replies`)".into());
    };
    if let Some(k) = map
        .keys()
        .find(|k| !["when", "reply", "replies"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown key `{k}` (a rule has `when`, `reply`, `replies`)"
        ));
    }
    let when = map
        .get("when")
        .map(When::read)
        .transpose()?
        .unwrap_or_default();
    let replies = match (map.get("reply"), map.get("replies")) {
        (Some(r), None) => vec![Reply::from_json(r)?],
        (None, Some(Value::Array(rs))) if !rs.is_empty() => {
            rs.iter().map(Reply::from_json).collect::<Result<_, _>>()?
        }
        (None, Some(_)) => return Err("`replies` is a non-empty list".into()),
        (Some(_), Some(_)) => return Err("a rule has `reply` or `replies`, not both".into()),
        (None, None) => return Err("a rule needs `reply` or `replies`".into()),
    };
    Ok(Rule {
        when,
        replies,
        used: Mutex::new(0),
    })
}

impl ChatModel for ScriptModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        let Some(rule) = self.rules.iter().find(|r| r.when.holds(request)) else {
            let user = request
                .messages
                .iter()
                .rev()
                .find_map(ChatMessage::user_text)
                .unwrap_or("");
            let err = LlmError::Scripted(format!(
                "no rule of `{}` matches this request (newest user message: {user:?})",
                self.name
            ));
            return futures::stream::iter([Err(err)]).boxed();
        };
        let reply = {
            let mut used = rule.used.lock().unwrap_or_else(PoisonError::into_inner);
            let i = (*used).min(rule.replies.len() - 1);
            *used += 1;
            rule.replies[i].clone()
        };
        let prompt = request
            .messages
            .iter()
            .map(|m| content(m).len() as u64 / 4)
            .sum();
        futures::stream::iter(reply.chunks(prompt, 0)).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{JsonSchemaFormat, LlmChunk};

    fn text(m: &ScriptModel, req: &ChatRequest) -> Result<String, LlmError> {
        let chunks = futures::executor::block_on(m.stream(req).collect::<Vec<_>>());
        let mut out = String::new();
        for c in chunks {
            if let LlmChunk::Text(t) = c? {
                out.push_str(&t);
            }
        }
        Ok(out)
    }

    fn req(system: &str, user: &str) -> ChatRequest {
        ChatRequest {
            messages: vec![
                ChatMessage::System {
                    content: system.into(),
                },
                ChatMessage::User {
                    content: user.into(),
                },
            ],
            ..ChatRequest::default()
        }
    }

    #[test]
    fn the_first_matching_rule_answers_and_replies_go_in_turn() {
        let m = ScriptModel::parse(
            "s",
            r#"
rules:
  - when: { system: "classify", user: "population" }
    reply: { json: { intent: billing } }
  - when: { format: route }
    reply: { json: { intent: DIRECT } }
  - when: { contains: "Paris" }
    replies: ["one", "two"]
"#,
        )
        .unwrap();
        assert_eq!(
            text(&m, &req("You classify", "population of Kenya")).unwrap(),
            r#"{"intent":"billing"}"#
        );
        let mut r = req("You classify", "hello");
        r.response_format = Some(JsonSchemaFormat::new("route", serde_json::json!({})));
        assert_eq!(text(&m, &r).unwrap(), r#"{"intent":"DIRECT"}"#);
        let paris = req("x", "Paris?");
        assert_eq!(text(&m, &paris).unwrap(), "one");
        assert_eq!(text(&m, &paris).unwrap(), "two");
        assert_eq!(text(&m, &paris).unwrap(), "two");
        let err = text(&m, &req("x", "Rome")).unwrap_err();
        assert!(err.to_string().contains("no rule of `s` matches"), "{err}");
    }

    #[test]
    fn malformed_scripts_say_where() {
        let e =
            ScriptModel::parse("s", "rules:\n  - when: { sytem: a }\n    reply: hi\n").unwrap_err();
        assert!(e.contains("rule 1: unknown condition `sytem`"), "{e}");
        let e = ScriptModel::parse("s", "rules: [{reply: {txt: a}}]").unwrap_err();
        assert!(e.contains("unknown reply key `txt`"), "{e}");
        let e = ScriptModel::parse("s", "replies: []").unwrap_err();
        assert!(e.contains("`rules:`"), "{e}");
    }
}
