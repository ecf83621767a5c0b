//! `router`: intent classification that never crashes.
//!
//! Order: an override token in the user's text (case-insensitive, no model
//! call) → a forced intent from the input → a model call in JSON-schema mode
//! returning `{intent, reasoning, missing_slots, detected_language}`. Invalid
//! JSON, a model failure or an intent outside the list all give the
//! configured fallback. The decision and its reasoning are emitted as
//! thinking, and written to the `details` field when one is configured.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::Reported;
use super::{BuildCx, NodeContext, NodeError, PromptRef, history};
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat};
use crate::state::{FieldId, Patch};

const SETTINGS: &[&str] = &[
    "prompt",
    "model",
    "input",
    "output",
    "intents",
    "overrides",
    "fallback",
    "forced",
    "details",
    "language",
    "history",
    "history_window",
    "fallback_model",
];

/// An intent classifier.
#[derive(Debug)]
pub struct Router {
    prompt: PromptRef,
    role: Arc<str>,
    input: FieldId,
    history: (Option<FieldId>, usize),
    forced: Option<FieldId>,
    intents: Vec<String>,
    /// (lower-cased token, intent)
    overrides: Vec<(String, String)>,
    fallback: String,
    output: (FieldId, Arc<str>),
    details: Option<Arc<str>>,
    language: Option<Arc<str>>,
    format: JsonSchemaFormat,
}

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
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        let n = cx.node;
        cx.accept(SETTINGS);
        let mut ok = true;
        let intents: Vec<String> = n.intents.iter().map(|i| i.value.clone()).collect();
        if intents.is_empty() {
            cx.error(
                n.kind.loc,
                "missing-setting",
                format!("router `{}` needs `intents`", n.id.value),
                None,
            );
            ok = false;
        }
        for (i, intent) in n.intents.iter().enumerate() {
            if n.intents[..i].iter().any(|o| o.value == intent.value) {
                cx.error(
                    intent.loc,
                    "duplicate-intent",
                    format!("intent `{}` is listed twice", intent.value),
                    None,
                );
                ok = false;
            }
        }
        let mut check_intent =
            |cx: &mut BuildCx<'_>, sp: &crate::graph::loc::Sp<String>, what: &str| {
                if !intents.is_empty() && !intents.contains(&sp.value) {
                    cx.error(
                        sp.loc,
                        "unknown-intent",
                        format!("{what} `{}` is not one of the router's intents", sp.value),
                        crate::graph::diagnostic::name_hint(
                            &sp.value,
                            intents.iter().map(String::as_str),
                        ),
                    );
                    ok = false;
                }
            };
        let mut overrides = Vec::new();
        if let Some(map) = &n.overrides {
            for (token, intent) in &map.entries {
                check_intent(cx, intent, "override intent");
                overrides.push((token.value.to_lowercase(), intent.value.clone()));
            }
        }
        let fallback = cx.require(&n.fallback, "fallback").cloned();
        if let Some(f) = &fallback {
            check_intent(cx, f, "fallback");
        }
        let prompt = cx.prompt(true);
        let input = cx.input(&n.input, "query");
        let history = cx.history(6);
        let forced = match &n.forced {
            Some(name) => cx
                .field(name, "a text field", |f| f.ty.is_string())
                .map(Some)
                .ok_or(Reported),
            None => Ok(None),
        };
        let output = cx.output(&n.output, "intent", "a text field", |f| f.ty.is_string());
        let details = cx.optional_output(&n.details, "a JSON field", |f| f.ty.holds_objects());
        let language = cx.optional_output(&n.language, "a text field", |f| f.ty.is_string());
        let name = |o: &Option<crate::graph::loc::Sp<String>>, d: &str| -> Arc<str> {
            o.as_ref().map_or(d, |v| v.value.as_str()).into()
        };
        if !ok {
            return None;
        }
        let format = schema_for(&intents);
        Some(Self {
            format,
            prompt: prompt.ok()??,
            role: cx.role(),
            input: input?,
            history: history.ok()?,
            forced: forced.ok()?,
            intents,
            overrides,
            fallback: fallback?.value,
            output: (output?, name(&n.output, "intent")),
            details: details.ok()?.map(|_| name(&n.details, "")),
            language: language.ok()?.map(|_| name(&n.language, "")),
        })
    }

    pub(super) fn declared_values(&self) -> (FieldId, &[String]) {
        (self.output.0, &self.intents)
    }
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

impl Router {
    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let text = cx.state.text(self.input).unwrap_or_default();
        let lower = text.to_lowercase();
        let (intent, source, mut details) = if let Some((token, intent)) = self
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
        details["intent"] = json!(intent);
        details["source"] = json!(source.as_str());
        let mut patch = Patch::new().set(Arc::clone(&self.output.1), intent);
        if let (Some(field), Some(lang)) = (&self.language, details["detected_language"].as_str())
            && !lang.is_empty()
        {
            patch.insert(Arc::clone(field), lang.to_owned());
        }
        if let Some(field) = &self.details {
            patch.insert(Arc::clone(field), details);
        }
        Ok(patch)
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
            content: self.prompt.render(cx)?,
        }];
        messages.extend(history(cx.state, self.history.0, self.history.1));
        if !matches!(messages.last(), Some(ChatMessage::User { content }) if content == text) {
            messages.push(ChatMessage::User {
                content: text.to_owned(),
            });
        }
        let request = ChatRequest {
            messages,
            response_format: Some(self.format.clone()),
            temperature: Some(0.0),
            ..Default::default()
        };
        let fallback = |why: String| {
            (
                self.fallback.clone(),
                Source::Fallback,
                json!({ "reasoning": why }),
            )
        };
        let reply = match cx.llm(&self.role, 0, &request).await {
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

/// The JSON object in a model answer, tolerating code fences and prose
/// around it.
pub(crate) fn extract_json(text: &str) -> &str {
    match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if b > a => &text[a..=b],
        _ => text,
    }
}
