//! `router`: intent classification that never crashes.
//!
//! Order: an override token in the user's text (case-insensitive, no model
//! call) → a forced intent from the input → a model call in JSON-schema mode
//! returning `{intent, reasoning, missing_slots, detected_language}`. Invalid
//! JSON, a model failure or an intent outside the list all give the
//! configured fallback. The decision and its reasoning are emitted as
//! thinking, and written to the `details` field when one is configured.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::bounds::{Failure, GENERATION_SETTINGS, Generation, ON_ERROR, OnError, Recovery};
use super::model::{self, HISTORY_SETTINGS, INPUT, PROMPT, ROLE_SETTINGS};
use super::structured::extract_json;
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
            "object field receiving reasoning, missing slots and language",
        ),
        SettingDoc::new(
            "language",
            schema::FIELD,
            "string field receiving the detected language",
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
    format: JsonSchemaFormat,
    generation: Generation,
    on_error: OnError,
}

/// Default `max_tokens`: the classification is a small JSON object.
const MAX_TOKENS: u32 = 256;

#[derive(Deserialize)]
struct Classification {
    intent: String,
    #[serde(default)]
    reasoning: String,
    #[serde(default)]
    missing_slots: Vec<String>,
    #[serde(default)]
    detected_language: String,
}

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
        let mut check_intent = |cx: &mut BuildCx<'_>, sp: &Sp<String>, what: &str| {
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
                check_intent(cx, intent, "override intent");
                overrides.push((token.value.to_lowercase(), intent.value.clone()));
            }
        }
        let fallback = cx.require_string("fallback");
        if let Ok(f) = &fallback {
            check_intent(cx, f, "fallback");
        }
        let prompt = cx.prompt(true);
        let input = cx.text_input("input").ok()?.or_else(|| {
            cx.field(
                &Sp::new("query".into(), cx.kind_loc()),
                "a string field",
                |f| f.ty.is_string(),
            )
        });
        let history = cx.history(6);
        let forced = cx.text_input("forced");
        let roles = model::roles(cx);
        let generation = Generation::build(cx, MAX_TOKENS);
        // A router never crashes the run: timeouts and failures after its
        // retries take the fallback intent unless the file says otherwise.
        let on_error = OnError::build(cx, OnError::Fallback, true);
        let output = cx.output("output", "intent", "a string field", |f| f.ty.is_string());
        let details = cx.optional_output("details", "an object field", |f| f.ty.holds_objects());
        let language = cx.optional_output("language", "a string field", |f| f.ty.is_string());
        if let Some((field, name)) = &output {
            // An enum output field must accept every intent the router writes.
            let allowed = cx.schema.and_then(|s| s.spec(*field).ty.finite_values());
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
            cx.declare_values(*field, intents.clone());
        }
        if !ok {
            return None;
        }
        Some(Self {
            format: schema_for(&intents),
            prompt: prompt.ok()??,
            roles: roles.ok()?,
            input: input?,
            history: history.ok()?,
            forced: forced.ok()?,
            intents,
            overrides,
            fallback: fallback.ok()?.value,
            output: output?.1,
            generation: generation.ok()?,
            on_error: on_error.ok()?,
            details: details.ok()?.map(|d| d.1),
            language: language.ok()?.map(|l| l.1),
        })
    }
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

/// The structured-output schema of a classification.
fn schema_for(intents: &[String]) -> JsonSchemaFormat {
    JsonSchemaFormat {
        name: "intent_classification".into(),
        schema: Arc::new(json!({
            "type": "object",
            "properties": {
                "intent": {"type": "string", "enum": intents},
                "reasoning": {"type": "string", "maxLength": 400},
                "missing_slots": {"type": "array", "items": {"type": "string", "maxLength": 60}},
                "detected_language": {"type": "string", "maxLength": 12}
            },
            "required": ["intent", "reasoning", "missing_slots", "detected_language"],
            "additionalProperties": false
        })),
    }
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
        if let (Some(field), Some(lang)) = (&self.language, details["detected_language"].as_str())
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
        messages.extend(model::history(cx.state, self.history.0, self.history.1));
        if !matches!(messages.last(), Some(ChatMessage::User { content }) if content == text) {
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
        let parsed: Classification = match serde_json::from_str(extract_json(&reply.output().text))
        {
            Ok(c) => c,
            Err(e) => {
                return Ok(fallback(format!(
                    "the model's answer was not valid JSON ({e}); using the fallback intent"
                )));
            }
        };
        let intent = parsed.intent.trim().to_uppercase();
        let Some(intent) = self.intents.iter().find(|i| i.to_uppercase() == intent) else {
            return Ok(fallback(format!(
                "the model chose unknown intent `{}`; using the fallback intent",
                parsed.intent
            )));
        };
        let details = json!({
            "reasoning": parsed.reasoning,
            "missing_slots": parsed.missing_slots,
            "detected_language": parsed.detected_language,
        });
        Ok((intent.clone(), Source::Model, details))
    }
}
