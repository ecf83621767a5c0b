//! `router`: intent classification that never crashes.
//!
//! Order: an override token in the user's text (case-insensitive, no model
//! call) → a forced intent from the input → a model call in JSON-schema mode
//! returning the intent and the fields the graph file declares (`fields`;
//! by default a `reasoning`). The decision and its reasoning are emitted as
//! thinking, and written to the `details` field when one is configured.
//! `keywords` (a regular expression per intent) are how the built-in
//! offline model chooses; a real model reads the prompt.
//!
//! A usable answer is never thrown away: the model's JSON (code-fenced or
//! padded with prose too) is read field by field ([`answer::normalise`]) —
//! an intent in another case or with spaces, a string where a list is
//! expected, a missing or null language (→ `default_language`), padded
//! reasoning. Only an answer with no recognisable intent, or a model
//! failure, gives the configured fallback.
//!
//! Earlier assistant messages can carry status lines a front end showed
//! while routing ("Understanding your question…"); lines starting with one
//! of `strip_lines` are removed from them before classifying, so the model
//! classifies what was said, not the app's own chrome.

mod answer;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::model::{self, HISTORY_SETTINGS, INPUT, PROMPT, ROLE_SETTINGS};
use super::{BuildCx, Kind, Node, NodeContext, NodeError, Roles};
use crate::graph::diagnostic::name_hint;
use crate::graph::kinds::schema;
use crate::graph::loc::Sp;
use crate::graph::spec::Surface;
use crate::graph::{PromptRef, Reported, SettingDoc};
use crate::llm::{ChatMessage, JsonSchemaFormat};
use crate::state::{FieldId, Patch};

/// The kind.
pub(super) fn kind() -> Kind {
    let mut settings = vec![
        PROMPT,
        INPUT,
        SettingDoc::new(
            "output",
            schema::FIELD,
            "string field receiving the intent (default `intent`)",
        ),
        SettingDoc::new("intents", schema::NAMES, "the intents it may return"),
        SettingDoc::new(
            "fields",
            schema::MAP,
            "what the model answers besides the intent: field → JSON Schema (default: `reasoning`, and `detected_language` with `language`)",
        ),
        SettingDoc::new(
            "keywords",
            r#"{"type":"object","additionalProperties":{"type":"string"}}"#,
            "per intent, a regular expression over the user's text by which the offline model picks it (case-insensitive)",
        ),
        SettingDoc::new(
            "overrides",
            schema::NAME_MAP,
            "tokens in the input text and the intent each forces, without a model call",
        ),
        SettingDoc::new(
            "fallback",
            schema::STRING,
            "intent used when classification fails",
        ),
        SettingDoc::new(
            "forced",
            schema::FIELD,
            "string field holding an intent forced by the caller",
        ),
        SettingDoc::new(
            "details",
            schema::FIELD,
            "object field receiving the answer's `fields` and the decision's source",
        ),
        SettingDoc::new(
            "language",
            schema::FIELD,
            "string field receiving the detected language",
        ),
        SettingDoc::new(
            "default_language",
            schema::STRING,
            "language written when the model gives none (default `en`)",
        ),
        SettingDoc::new(
            "strip_lines",
            schema::NAMES,
            "line prefixes removed from earlier assistant messages before classifying",
        ),
    ];
    settings.extend(ROLE_SETTINGS);
    settings.extend(HISTORY_SETTINGS);
    settings.extend(GENERATION_SETTINGS);
    settings.push(ON_ERROR);
    Kind::new(
        "router",
        "Intent classification that never crashes: overrides, forced intents, a model in JSON mode, a fallback.",
        &settings,
        Surface::Hidden,
        |cx| Router::build(cx).map(|n| Arc::new(n) as Arc<dyn Node>),
    )
}

/// An intent classifier.
#[derive(Debug)]
struct Router {
    prompt: PromptRef,
    roles: Roles,
    input: FieldId,
    history: (Option<FieldId>, usize),
    forced: Option<FieldId>,
    intents: Vec<String>,
    /// (lower-cased token, intent)
    overrides: Vec<(String, String)>,
    fallback: String,
    output: Arc<str>,
    details: Option<Arc<str>>,
    language: Option<Arc<str>>,
    default_language: String,
    strip_lines: Vec<String>,
    /// The answer's fields besides the intent (from `fields`).
    fields: answer::Fields,
    format: JsonSchemaFormat,
    generation: Generation,
    on_error: OnError,
}

/// Default `max_tokens`: the classification is a small JSON object.
const MAX_TOKENS: u32 = 256;

/// Default `history_window`: the newest ten messages, as the routing
/// models of chat apps are usually given.
const HISTORY_WINDOW: u32 = 10;

/// How the intent was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Override,
    Forced,
    Model,
    Fallback,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Override => "override",
            Source::Forced => "forced",
            Source::Model => "llm",
            Source::Fallback => "fallback",
        }
    }
}

impl Router {
    fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let (intents, mut ok) = match intents(cx) {
            Ok(i) => (i, true),
            Err((i, _)) => (i, false),
        };
        let (overrides, fallback) = match decisions(cx, &intents) {
            Ok(d) => d,
            Err(Reported) => {
                ok = false;
                (Vec::new(), String::new())
            }
        };
        let prompt = cx.prompt(true);
        let input = cx.text_input("input").ok()?.or_else(|| {
            cx.field(
                &Sp::new("query".into(), cx.kind_loc()),
                "a string field",
                |f| f.ty.is_string(),
            )
        });
        let history = cx.history(HISTORY_WINDOW);
        let forced = cx.text_input("forced");
        let roles = model::roles(cx);
        let generation = Generation::build(cx, MAX_TOKENS);
        // A router never crashes the run: timeouts and failures after its
        // retries take the fallback intent unless the file says otherwise.
        let on_error = OnError::build(cx, OnError::Fallback, true);
        let output = cx.output("output", "intent", "a string field", |f| f.ty.is_string());
        let details = cx.optional_output("details", "an object field", |f| f.ty.holds_objects());
        let language = cx.optional_output("language", "a string field", |f| f.ty.is_string());
        let default_language = cx
            .string("default_language")
            .map(|l| l.map_or_else(|| "en".to_owned(), |l| l.value));
        let strip_lines = cx
            .names("strip_lines")
            .map(|l| l.into_iter().map(|s| s.value).collect::<Vec<_>>());
        let writes_language = matches!(language, Ok(Some(_)));
        let fields = answer::fields(cx, writes_language);
        let keywords = answer::keywords(cx, &intents);
        if let Some((field, name)) = &output {
            ok &= output_takes(cx, *field, name, &intents);
        }
        if !ok {
            return None;
        }
        let fields = fields.ok()?;
        Some(Self {
            format: answer::format(&intents, &fields, keywords.ok()?),
            fields,
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            input: input?,
            history: history.ok()?,
            forced: forced.ok()?,
            intents,
            overrides,
            fallback,
            output: output?.1,
            generation: generation.ok()?,
            on_error: on_error.ok()?,
            details: details.ok()?.map(|d| d.1),
            language: language.ok()?.map(|l| l.1),
            default_language: default_language.ok()?,
            strip_lines: strip_lines.ok()?,
        })
    }
}

/// `overrides` (lower-cased token, intent) and `fallback`, each intent
/// checked against `intents` (unless those could not be read).
fn decisions(
    cx: &mut BuildCx<'_>,
    intents: &[String],
) -> Result<(Vec<(String, String)>, String), Reported> {
    let mut ok = true;
    let mut check = |cx: &mut BuildCx<'_>, sp: &Sp<String>, what: &str| {
        if !intents.is_empty() && !intents.contains(&sp.value) {
            cx.error(
                sp.loc,
                "unknown-intent",
                format!("{what} `{}` is not one of the router's intents", sp.value),
                name_hint(&sp.value, intents.iter().map(String::as_str)),
            );
            ok = false;
        }
    };
    let mut overrides = Vec::new();
    if let Ok(Some(map)) = cx.name_map("overrides") {
        for (token, intent) in &map.entries {
            check(cx, intent, "override intent");
            overrides.push((token.value.to_lowercase(), intent.value.clone()));
        }
    }
    let fallback = cx.require_string("fallback");
    if let Ok(f) = &fallback {
        check(cx, f, "fallback");
    }
    let fallback = fallback?.value;
    if ok {
        Ok((overrides, fallback))
    } else {
        Err(Reported)
    }
}

/// Whether the output field takes every intent (an enum field must list
/// them all); declares the intents as the values it may hold.
fn output_takes(cx: &mut BuildCx<'_>, field: FieldId, name: &str, intents: &[String]) -> bool {
    let mut ok = true;
    let allowed = cx.schema.and_then(|s| s.spec(field).ty.finite_values());
    if let Some(allowed) = allowed {
        for intent in intents.iter().filter(|i| !allowed.contains(i)) {
            let loc = cx.setting("intents").map_or(cx.kind_loc(), |v| v.loc);
            cx.error(
                loc,
                "unknown-intent",
                format!(
                    "intent `{intent}` is not a value of field `{name}` (one of {})",
                    allowed.join(", ")
                ),
                None,
            );
            ok = false;
        }
    }
    cx.declare_values(field, intents.to_vec());
    ok
}

/// `intents`: at least one, each once. On a problem (reported), the
/// intents that could be read, so the other settings are still checked.
fn intents(cx: &mut BuildCx<'_>) -> Result<Vec<String>, (Vec<String>, Reported)> {
    let listed = cx.names("intents").map_err(|r| (Vec::new(), r))?;
    if listed.is_empty() {
        let id = cx.id().to_owned();
        cx.error(
            cx.kind_loc(),
            "missing-setting",
            format!("router `{id}` needs `intents`"),
            None,
        );
        return Err((Vec::new(), Reported));
    }
    let mut out: Vec<String> = Vec::new();
    let mut ok = true;
    for intent in &listed {
        if out.contains(&intent.value) {
            cx.error(
                intent.loc,
                "duplicate-intent",
                format!("intent `{}` is listed twice", intent.value),
                None,
            );
            ok = false;
            continue;
        }
        out.push(intent.value.clone());
    }
    if ok { Ok(out) } else { Err((out, Reported)) }
}

impl Node for Router {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        self.route(cx).boxed()
    }

    fn recover<'a>(
        &'a self,
        _cx: NodeContext<'a>,
        failure: Failure<'a>,
    ) -> BoxFuture<'a, Option<Recovery>> {
        Box::pin(async move {
            let fallback = || {
                let why = format!(
                    "classification failed ({}); using the fallback intent",
                    failure.error
                );
                Some(Recovery {
                    patch: self.decided(
                        self.fallback.clone(),
                        Source::Fallback,
                        json!({ "reasoning": why }),
                    ),
                    note: format!("Intent: {} (fallback). {why}", self.fallback),
                    truncated: None,
                    refused: None,
                })
            };
            Recovery::decide(self.on_error, &failure, fallback)
        })
    }
}

impl Router {
    async fn route(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let text = cx.state.text(self.input).unwrap_or_default();
        let lower = text.to_lowercase();
        let (intent, source, details) = if let Some((token, intent)) = self
            .overrides
            .iter()
            .find(|(token, _)| lower.contains(token.as_str()))
        {
            (
                intent.clone(),
                Source::Override,
                json!({ "reasoning": format!("override token `{token}` in the message") }),
            )
        } else if let Some(forced) = self.forced_intent(&cx).await {
            (
                forced,
                Source::Forced,
                json!({ "reasoning": "intent forced by the caller" }),
            )
        } else {
            self.classify(&cx, text).await?
        };
        let reasoning = details["reasoning"].as_str().unwrap_or_default().to_owned();
        cx.events
            .thinking(
                format!("Intent: {intent} ({}). {reasoning}", source.as_str())
                    .trim_end()
                    .to_owned(),
            )
            .await;
        Ok(self.decided(intent, source, details))
    }

    /// The writes of a decision: the intent, the language, the details.
    fn decided(&self, intent: String, source: Source, mut details: Value) -> Patch {
        details["intent"] = json!(intent);
        details["source"] = json!(source.as_str());
        let mut patch = Patch::new().set(Arc::clone(&self.output), intent);
        if let (Some(field), Some(lang)) = (&self.language, details[answer::LANGUAGE].as_str())
            && !lang.is_empty()
        {
            patch.insert(Arc::clone(field), lang.to_owned());
        }
        if let Some(field) = &self.details {
            patch.insert(Arc::clone(field), details);
        }
        patch
    }

    async fn forced_intent(&self, cx: &NodeContext<'_>) -> Option<String> {
        let forced = self
            .forced
            .and_then(|f| cx.state.text(f))
            .filter(|s| !s.is_empty())?;
        if self.intents.iter().any(|i| i == forced) {
            return Some(forced.to_owned());
        }
        cx.events
            .thinking(format!(
                "Ignoring forced intent `{forced}`: not one of {}",
                self.intents.join(", ")
            ))
            .await;
        None
    }

    async fn classify(
        &self,
        cx: &NodeContext<'_>,
        text: &str,
    ) -> Result<(String, Source, Value), NodeError> {
        let mut messages = vec![ChatMessage::System {
            content: cx.render(&self.prompt)?,
        }];
        messages.extend(
            model::history(cx.state, self.history.0, self.history.1)
                .into_iter()
                .filter_map(|m| strip(m, &self.strip_lines)),
        );
        if !model::ends_with_input(&messages, text) {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        let mut request = self.generation.request(messages);
        request.response_format = Some(self.format.clone());
        request.temperature.get_or_insert(0.0);
        let fallback = |why: String| {
            (
                self.fallback.clone(),
                Source::Fallback,
                json!({ "reasoning": why }),
            )
        };
        let reply = match cx.llm(&self.roles, 0, &request).await {
            Ok(reply) => reply,
            Err(e) => {
                return Ok(fallback(format!(
                    "classification failed ({e}); using the fallback intent"
                )));
            }
        };
        match answer::normalise(
            &reply.output().text,
            &self.intents,
            &self.fields,
            &self.default_language,
        ) {
            Ok((intent, details)) => Ok((intent, Source::Model, details)),
            Err(why) => Ok(fallback(format!("{why}; using the fallback intent"))),
        }
    }
}

/// An earlier assistant message without the lines starting with one of
/// `prefixes` (`None` when nothing is left of it).
fn strip(m: ChatMessage, prefixes: &[String]) -> Option<ChatMessage> {
    let ChatMessage::Assistant {
        content,
        tool_calls,
    } = m
    else {
        return Some(m);
    };
    if prefixes.is_empty() {
        return Some(ChatMessage::Assistant {
            content,
            tool_calls,
        });
    }
    let kept: Vec<&str> = content
        .lines()
        .filter(|l| {
            !prefixes
                .iter()
                .any(|p| l.trim_start().starts_with(p.as_str()))
        })
        .collect();
    let content = kept.join("\n").trim().to_owned();
    (!content.is_empty()).then_some(ChatMessage::Assistant {
        content,
        tool_calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_stripped_from_assistant_messages_only() {
        let prefixes = vec!["Understanding".to_owned()];
        let m = ChatMessage::Assistant {
            content: "Understanding your question…\nKenya had 55 m people.".into(),
            tool_calls: Vec::new(),
        };
        let Some(ChatMessage::Assistant { content, .. }) = strip(m, &prefixes) else {
            panic!("kept")
        };
        assert_eq!(content, "Kenya had 55 m people.");
        let only = ChatMessage::Assistant {
            content: "  Understanding your question…".into(),
            tool_calls: Vec::new(),
        };
        assert!(strip(only, &prefixes).is_none());
        let user = ChatMessage::User {
            content: "Understanding is hard".into(),
        };
        assert!(matches!(
            strip(user, &prefixes),
            Some(ChatMessage::User { .. })
        ));
    }
}
