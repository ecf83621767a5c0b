//! Structured model output into fields: one model call answers as JSON,
//! checked against a type, and the answer is written to fields.
//!
//! Two forms:
//! - `outputs: [category, priority]`: the schema sent to the model (OpenAI
//!   `response_format: json_schema`) is derived from the fields the node
//!   writes — an object with one required property per field, each with the
//!   field's type (enums, bounds and `maxLength` included) — and each
//!   property is written to its field;
//! - `schema: {…}` with `outputs: {field: "{{ expression }}"}`: the model
//!   answers the declared JSON Schema, and each field gets its expression
//!   over `result` (the answer) and, on map targets, `item` — so a map task
//!   can attach its item's URL to the facts it extracted.
//!
//! The answer is taken from the text (code fences and prose around the
//! object are tolerated) and checked against the type. An invalid answer is
//! sent back to the model with what was wrong, up to `retries` more times;
//! after that the node uses its declared `fallback` answer (values under
//! the value rule, so `"{{ item.text | chunks(400) }}"` can stand in for
//! extraction), or fails with the last problem — never a silent coercion.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{BuildCx, NodeContext, NodeError, Roles};
use crate::graph::Reported;
use crate::graph::SettingDoc;
use crate::graph::expr::{ValueExpr, from_json};
use crate::graph::kinds::schema;
use crate::graph::value::SpValue;
use crate::llm::{ChatMessage, ChatRequest, JsonSchemaFormat};
use crate::state::{Patch, TypeKind, TypeSpec};

/// `outputs`, `schema`, `retries` and `fallback`.
pub(super) const SETTINGS: [SettingDoc; 4] = [
    SettingDoc::new(
        "outputs",
        r#"{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}},{"type":"object"}]}"#,
        "structured output: fields the model answers as JSON (schema from their types), or field → expression over `result` with `schema`",
    ),
    SettingDoc::new(
        "schema",
        schema::MAP,
        "the JSON Schema the model answers (with `outputs` as a mapping)",
    ),
    SettingDoc::new(
        "retries",
        schema::INTEGER,
        "how often an invalid structured answer is sent back (0–5, default 2)",
    ),
    SettingDoc::new(
        "fallback",
        schema::MAP,
        "the answer used when the model's stays invalid (default: the node fails)",
    ),
];

/// How the answer becomes writes.
#[derive(Debug)]
enum Mapping {
    /// Each property into the field of the same name.
    Fields(Vec<Arc<str>>),
    /// Each field from an expression over `result` (and `item`).
    Exprs(Vec<(Arc<str>, ValueExpr)>),
}

/// The structured-output part of a node.
#[derive(Debug)]
pub(super) struct Structured {
    answer: TypeSpec,
    mapping: Mapping,
    format: JsonSchemaFormat,
    retries: u32,
    fallback: Option<Vec<(String, ValueExpr)>>,
}

impl Structured {
    /// Reads `outputs`, `schema`, `retries` and `fallback`; `Ok(None)` when
    /// the node has no `outputs`.
    pub(super) fn build(cx: &mut BuildCx<'_>, name: &str) -> Result<Option<Self>, Reported> {
        let Some(outputs) = cx.setting("outputs") else {
            for other in ["schema", "retries", "fallback"] {
                if let Some(v) = cx.setting(other) {
                    cx.error(
                        v.loc,
                        "invalid-setting",
                        format!("`{other}` only applies with `outputs` (structured output)"),
                        None,
                    );
                    return Err(Reported);
                }
            }
            return Ok(None);
        };
        let (answer, mapping, sent) = match &outputs.value {
            SpValue::Map(entries) => {
                let (answer, sent) = declared_schema(cx)?;
                let mut exprs = Vec::new();
                for (field, value) in entries {
                    let id = cx
                        .field(field, "a field", |f| !f.ty.is_messages())
                        .ok_or(Reported)?;
                    cx.writes(id);
                    // `result` is the answer, of the declared schema.
                    let typed = [("result", answer.clone())];
                    let e = cx.value_expr_typed(
                        value,
                        &format!("`outputs.{}`", field.value),
                        &["result"],
                        &typed,
                    )?;
                    exprs.push((Arc::<str>::from(field.value.as_str()), e));
                }
                (answer, Mapping::Exprs(exprs), sent)
            }
            _ => {
                if let Some(v) = cx.setting("schema") {
                    cx.error(v.loc, "invalid-setting", "`schema` goes with `outputs` as a mapping (field: expression over `result`)", None);
                    return Err(Reported);
                }
                field_outputs(cx)?
            }
        };
        let retries = cx.integer("retries", 0..=5, 2)? as u32;
        let fallback = match cx.mapping("fallback")? {
            None => None,
            Some(entries) => {
                let mut out = Vec::new();
                for (k, v) in entries {
                    let TypeKind::Object { properties, .. } = &answer.kind else {
                        break;
                    };
                    if !properties.iter().any(|(p, _)| *p == k.value) {
                        let known: Vec<&str> = properties.iter().map(|(p, _)| p.as_str()).collect();
                        cx.error(
                            k.loc,
                            "invalid-setting",
                            format!(
                                "`fallback` sets `{}`, which the answer does not have",
                                k.value
                            ),
                            crate::graph::diagnostic::name_hint(&k.value, known),
                        );
                        return Err(Reported);
                    }
                    out.push((
                        k.value.clone(),
                        cx.value_expr(v, &format!("`fallback.{}`", k.value), &[])?,
                    ));
                }
                Some(out)
            }
        };
        cx.default_surface(crate::graph::spec::Surface::Hidden);
        let format = JsonSchemaFormat::new(schema_name(name), sent);
        for note in format.strict.notes() {
            tracing::info!(
                node = name,
                "structured output for strict providers: {note}"
            );
        }
        Ok(Some(Self {
            answer,
            mapping,
            format,
            retries,
            fallback,
        }))
    }

    /// Asks the model (with `request`'s messages) until the answer fits,
    /// then returns its writes.
    ///
    /// # Errors
    /// The model failed, an output expression failed, or the answer stayed
    /// invalid and there is no fallback.
    pub(super) async fn call(
        &self,
        cx: &NodeContext<'_>,
        roles: &Roles,
        mut request: ChatRequest,
    ) -> Result<Patch, NodeError> {
        request.response_format = Some(self.format.clone());
        let mut problem = String::new();
        for call in 0..=self.retries {
            let reply = cx.llm(roles, call, &request).await?;
            let text = reply.output().text.clone();
            match self.parse(&text) {
                Ok(answer) => return self.writes(cx, answer),
                Err(why) => {
                    problem = why;
                    request.messages.push(ChatMessage::Assistant {
                        content: text,
                        tool_calls: Vec::new(),
                    });
                    request.messages.push(ChatMessage::User {
                        content: format!(
                            "That answer is not valid: {problem}. Answer again with only a JSON object matching the schema."
                        ),
                    });
                }
            }
        }
        if self.fallback.is_none() {
            return Err(NodeError::Structured {
                attempts: self.retries + 1,
                message: problem,
            });
        }
        cx.events
            .thinking(format!(
                "The model's answer stayed invalid ({problem}); using the node's fallback."
            ))
            .await;
        self.fallback_writes(cx).unwrap_or_else(|| Ok(Patch::new()))
    }

    /// Whether the node declares `fallback` values.
    pub(super) fn has_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    /// The writes of the declared `fallback` answer, if there is one.
    pub(super) fn fallback_writes(&self, cx: &NodeContext<'_>) -> Option<Result<Patch, NodeError>> {
        let fallback = self.fallback.as_ref()?;
        let extra = item(cx);
        let mut answer = Map::new();
        for (k, v) in fallback {
            match v.eval(cx.state, &extra) {
                Ok(value) => answer.insert(k.clone(), value),
                Err(e) => return Some(Err(e.into())),
            };
        }
        Some(self.writes(cx, Value::Object(answer)))
    }

    /// The answer as a checked JSON value (the `null`s a strict provider
    /// sends for optional fields read as absent).
    fn parse(&self, text: &str) -> Result<Value, String> {
        let mut value: Value = serde_json::from_str(extract_json(text))
            .map_err(|e| format!("not a JSON object ({e})"))?;
        self.format.restore(&mut value);
        self.answer.check(&value).map_err(|m| m.to_string())?;
        Ok(value)
    }

    /// The writes an answer makes.
    fn writes(&self, cx: &NodeContext<'_>, answer: Value) -> Result<Patch, NodeError> {
        let mut patch = Patch::new();
        match &self.mapping {
            Mapping::Fields(fields) => {
                for f in fields {
                    if let Some(v) = answer.get(&**f) {
                        patch.insert(Arc::clone(f), v.clone());
                    }
                }
            }
            Mapping::Exprs(exprs) => {
                let mut extra = item(cx);
                extra.push(("result", from_json(&answer)));
                for (f, e) in exprs {
                    patch.insert(Arc::clone(f), e.eval(cx.state, &extra)?);
                }
            }
        }
        Ok(patch)
    }
}

/// The map item, for expressions on map targets.
fn item(cx: &NodeContext<'_>) -> Vec<(&'static str, minijinja::Value)> {
    cx.item
        .map(|i| vec![("item", from_json(i))])
        .unwrap_or_default()
}

/// `outputs: [fields]`: the answer is an object of those fields; the
/// schema sent carries each field's `description`.
fn field_outputs(cx: &mut BuildCx<'_>) -> Result<(TypeSpec, Mapping, Value), Reported> {
    let names = cx.names("outputs")?;
    if names.is_empty() {
        cx.error(
            cx.kind_loc(),
            "invalid-setting",
            "`outputs` names no field",
            None,
        );
        return Err(Reported);
    }
    let mut props = Vec::new();
    let mut fields = Vec::new();
    let mut docs = Vec::new();
    for out in &names {
        let id = cx
            .field(out, "a field", |f| !f.ty.is_messages())
            .ok_or(Reported)?;
        cx.writes(id);
        let (ty, doc) = cx
            .schema
            .map(|s| (s.spec(id).ty.clone(), s.spec(id).doc.clone()))
            .unwrap_or_else(|| (TypeSpec::any(), String::new()));
        props.push((out.value.clone(), ty));
        docs.push(doc);
        fields.push(Arc::<str>::from(out.value.as_str()));
    }
    let required = props.iter().map(|(n, _)| n.clone()).collect();
    let answer = TypeSpec::of(TypeKind::Object {
        properties: props,
        required,
        additional: false,
    });
    let mut sent = answer.json_schema();
    if let Some(Value::Object(sent_props)) = sent.get_mut("properties") {
        for (name, doc) in names.iter().zip(docs) {
            if let (false, Some(Value::Object(p))) =
                (doc.is_empty(), sent_props.get_mut(&name.value))
            {
                p.insert("description".into(), Value::String(doc));
            }
        }
    }
    Ok((answer, Mapping::Fields(fields), sent))
}

/// `schema:`, a JSON Schema of an object: the type answers are checked
/// against, and the schema as written (descriptions and all) to send.
fn declared_schema(cx: &mut BuildCx<'_>) -> Result<(TypeSpec, Value), Reported> {
    let Some(v) = cx.setting("schema") else {
        cx.error(
            cx.kind_loc(),
            "missing-setting",
            "`outputs` as a mapping needs `schema` (the JSON Schema the model answers)",
            None,
        );
        return Err(Reported);
    };
    let written = v.value.to_json();
    match TypeSpec::from_json_schema(&written) {
        Ok(t) if matches!(t.kind, TypeKind::Object { .. }) => Ok((t, written)),
        Ok(_) => {
            cx.error(
                v.loc,
                "bad-type",
                "`schema` must describe an object (`type: object`)",
                None,
            );
            Err(Reported)
        }
        Err(why) => {
            cx.error(
                v.loc,
                "bad-type",
                format!("`schema` is not a schema: {why}"),
                None,
            );
            Err(Reported)
        }
    }
}

/// A schema name the OpenAI API accepts (`[a-zA-Z0-9_-]{1,64}`).
fn schema_name(node: &str) -> String {
    let name: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "output".into()
    } else {
        name
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
