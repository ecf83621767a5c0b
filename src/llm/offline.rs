//! The built-in offline model: deterministic, needs no key, never mistaken
//! for a real model.
//!
//! It lets the whole pipeline run on a fresh machine. Every answer says what
//! it is, its name is `stategraph-offline`, and the server announces it in
//! the startup log and in each response's metadata. Structured-output calls
//! get JSON that satisfies the requested schema, so routing, follow-ups and
//! summaries work. An enum value (a router's intent) is picked by the
//! keywords the graph file gives it (a router's `keywords`, carried by the
//! request's format), or by its name in the user's text: the model knows
//! no app's values.

use futures::StreamExt;
use serde_json::{Map, Value, json};

use super::scripted::tokens;
use super::{ChatMessage, ChatModel, ChatRequest, ChunkStream, LlmChunk, ValueKeywords};
use crate::events::Usage;

/// The offline model.
#[derive(Debug, Default, Clone, Copy)]
pub struct OfflineModel {
    /// Delay before each streamed chunk (to try a UI or load-test at a
    /// realistic generation speed); none by default.
    pub token_delay: Option<std::time::Duration>,
    /// Pad or cut text answers to exactly this many tokens.
    pub answer_tokens: Option<usize>,
}

/// Name reported for the offline model.
pub(crate) const OFFLINE_MODEL_NAME: &str = "stategraph-offline";

impl OfflineModel {
    /// The user's question: the newest user message, or the `Question:`
    /// line a prompt quotes it on (follow-up prompts do).
    fn last_user(req: &ChatRequest) -> &str {
        let last = req
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                ChatMessage::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("");
        last.lines()
            .find_map(|l| l.strip_prefix("Question:"))
            .map_or(last, str::trim)
    }

    fn answer(&self, req: &ChatRequest) -> Vec<LlmChunk> {
        let user = Self::last_user(req);
        if let Some(format) = &req.response_format {
            let v = fill(&format.schema, user, &format.name, &format.keywords);
            return tokens(&v.to_string())
                .into_iter()
                .map(LlmChunk::Text)
                .collect();
        }
        let has_tool_result = req
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { .. }));
        if !has_tool_result {
            // One tool call, with arguments it can fill: none required, or
            // a `url` taken from the user's text (so a demo can fetch a page).
            let url = user
                .split_whitespace()
                .find(|w| w.starts_with("http://") || w.starts_with("https://"));
            // A tool the user names ("delete record 42" → `delete_record`)
            // whose required arguments are numbers the text gives; else the
            // first tool needing nothing, or a `url` the text has.
            let call = req
                .tools
                .iter()
                .find_map(|t| named_call(t, user))
                .or_else(|| {
                    req.tools
                        .iter()
                        .find_map(|t| match (required(&t.parameters).as_slice(), url) {
                            ([], _) => Some((t, "{}".to_owned())),
                            (["url"], Some(u)) => Some((
                                t,
                                json!({ "url": u.trim_end_matches(['.', ',', ')']) }).to_string(),
                            )),
                            _ => None,
                        })
                });
            if let Some((tool, args)) = call {
                return vec![
                    LlmChunk::ToolCallStart {
                        index: 0,
                        id: "call_offline_0".into(),
                        name: tool.name.clone(),
                    },
                    LlmChunk::ToolCallArgs {
                        index: 0,
                        delta: args,
                    },
                    LlmChunk::Finish("tool_calls".into()),
                ];
            }
        }
        let short: String = user.chars().take(120).collect();
        let text = format!(
            "[offline model] You asked: \u{201c}{short}\u{201d}. This is stategraph's built-in offline \
             model, which answers deterministically without an LLM. Set OPENAI_BASE_URL and \
             OPENAI_API_KEY (or configure [llm] in stategraph.toml) to use a real model."
        );
        let mut toks = tokens(&text);
        if let Some(n) = self.answer_tokens {
            let filler = [" and", " so", " on"];
            let mut i = 0;
            while toks.len() < n {
                toks.push(filler[i % filler.len()].to_owned());
                i += 1;
            }
            toks.truncate(n);
        }
        toks.into_iter().map(LlmChunk::Text).collect()
    }
}

/// A call of `tool` when the user's text names it (its words, `_` and `-`
/// read as spaces) and gives its required arguments — numbers, taken in
/// order from the text after the name. Tools needing nothing are left to
/// the general rule.
fn named_call<'t>(tool: &'t super::ToolDef, user: &str) -> Option<(&'t super::ToolDef, String)> {
    let required = required(&tool.parameters);
    if required.is_empty() {
        return None;
    }
    let name = tool.name.replace(['_', '-'], " ").to_lowercase();
    let text = user.to_lowercase();
    let at = text.find(&name)?;
    let mut numbers = text[at + name.len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter(|w| !w.is_empty())
        .filter_map(|w| w.parse::<f64>().ok());
    let mut args = Map::new();
    for key in required {
        let ty = tool.parameters["properties"][key]["type"].as_str();
        let n = numbers.next()?;
        let v = match ty {
            Some("integer") if n.fract() == 0.0 => json!(n as i64),
            Some("number") => json!(n),
            _ => return None,
        };
        args.insert(key.to_owned(), v);
    }
    Some((tool, Value::Object(args).to_string()))
}

fn required(schema: &Value) -> Vec<&str> {
    schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Builds a value satisfying `schema`, choosing enum values by keyword.
fn fill(schema: &Value, user: &str, name: &str, keywords: &ValueKeywords) -> Value {
    if let Some(options) = schema["enum"].as_array() {
        return pick(options, user, keywords);
    }
    // `type: [T, "null"]` answers as T.
    let ty = match &schema["type"] {
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        other => other.as_str(),
    };
    match ty {
        Some("object") => {
            let mut out = Map::new();
            if let Some(props) = schema["properties"].as_object() {
                for (k, s) in props {
                    out.insert(k.clone(), fill(s, user, k, keywords));
                }
            }
            Value::Object(out)
        }
        Some("array") => {
            // Lists the caller asks to be filled (questions) get items; optional lists stay empty.
            let wanted = schema["minItems"].as_u64().unwrap_or(0);
            if wanted == 0 {
                return json!([]);
            }
            let n = wanted.max(2).min(schema["maxItems"].as_u64().unwrap_or(3));
            let topic: String = user
                .split_whitespace()
                .take(6)
                .collect::<Vec<_>>()
                .join(" ");
            let items = &schema["items"];
            Value::Array(
                (0..n)
                    .map(|i| match items["type"].as_str() {
                        Some("string") | None => {
                            json!(format!("(offline) follow-up {} on: {topic}", i + 1))
                        }
                        _ => fill(items, user, name, keywords),
                    })
                    .collect(),
            )
        }
        Some("boolean") => json!(false),
        // The lowest allowed value (0 when unbounded below).
        Some("integer") | Some("number") => match schema["minimum"].as_f64() {
            Some(lo) if lo > 0.0 && ty == Some("integer") => json!(lo.ceil() as i64),
            Some(lo) if lo > 0.0 => json!(lo),
            _ => json!(0),
        },
        _ => json!(match name {
            "detected_language" | "language" => "en",
            "reasoning" => "offline model: intent chosen by keyword match",
            "summary" => "(offline model) summary of the earlier conversation",
            _ => "offline",
        }),
    }
}

/// An enum value for the user's text: the first whose keywords (from the
/// graph file, see [`ValueKeywords`]) match the trimmed text; for a value
/// without keywords, the first whose name the text contains; else the first
/// value. The model knows no value names of its own.
fn pick(options: &[Value], user: &str, keywords: &ValueKeywords) -> Value {
    let text = user.trim();
    let lower = text.to_lowercase();
    let chosen = |o: &str| {
        keywords
            .matches(o, text)
            .unwrap_or_else(|| lower.contains(&o.to_lowercase()))
    };
    options
        .iter()
        .find(|o| o.as_str().is_some_and(chosen))
        .or(options.first())
        .cloned()
        .unwrap_or(Value::Null)
}

impl ChatModel for OfflineModel {
    fn name(&self) -> &str {
        OFFLINE_MODEL_NAME
    }

    fn is_offline(&self) -> bool {
        true
    }

    fn stream(&self, request: &ChatRequest) -> ChunkStream {
        let mut chunks = self.answer(request);
        let completion = chunks.len() as u64;
        if !chunks.iter().any(|c| matches!(c, LlmChunk::Finish(_))) {
            chunks.push(LlmChunk::Finish("stop".into()));
        }
        chunks.push(LlmChunk::Usage(Usage {
            prompt_tokens: 0,
            completion_tokens: completion,
            ..Usage::default()
        }));
        let items = futures::stream::iter(chunks.into_iter().map(Ok));
        match self.token_delay {
            None => items.boxed(),
            Some(delay) => items
                .then(move |c| async move {
                    tokio::time::sleep(delay).await;
                    c
                })
                .boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::JsonSchemaFormat;

    async fn ask(text: &str, format: JsonSchemaFormat) -> Value {
        let req = ChatRequest {
            messages: vec![ChatMessage::User {
                content: text.into(),
            }],
            response_format: Some(format),
            ..Default::default()
        };
        let chunks: Vec<_> = OfflineModel::default().stream(&req).collect().await;
        let text: String = chunks
            .iter()
            .filter_map(|c| match c {
                Ok(LlmChunk::Text(t)) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        serde_json::from_str(&text).unwrap()
    }

    fn route_format() -> JsonSchemaFormat {
        JsonSchemaFormat::new(
            "route",
            json!({"type": "object", "properties": {
                "intent": {"type": "string", "enum": ["alpha", "beta", "gamma"]},
                "missing_slots": {"type": "array", "items": {"type": "string"}}}}),
        )
    }

    #[tokio::test]
    async fn structured_answers_satisfy_the_schema_and_pick_by_the_formats_keywords() {
        let re = |p: &str| {
            regex::RegexBuilder::new(p)
                .case_insensitive(true)
                .build()
                .unwrap()
        };
        let keywords = ValueKeywords::new(vec![
            ("beta".into(), re("moon|night")),
            ("gamma".into(), re("^hi$")),
        ]);
        let format = route_format().with_keywords(keywords);
        let v = ask("The MOON tonight", format.clone()).await;
        assert_eq!(v["intent"], "beta");
        assert!(v["missing_slots"].is_array());
        assert_eq!(ask("  hi ", format.clone()).await["intent"], "gamma");
        // `gamma` has keywords, so its name alone does not choose it.
        assert_eq!(ask("gamma rays", format.clone()).await["intent"], "alpha");
    }

    #[tokio::test]
    async fn without_keywords_a_named_value_or_the_first_is_picked() {
        assert_eq!(ask("go gamma", route_format()).await["intent"], "gamma");
        assert_eq!(
            ask("The moon tonight", route_format()).await["intent"],
            "alpha"
        );
    }
}
