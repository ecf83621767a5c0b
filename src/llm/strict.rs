//! Strict structured output: the JSON Schema a node declares (portable,
//! with its descriptions and optional fields) turned into the subset that
//! OpenAI's strict mode accepts, and the answer mapped back. Tools' parameters
//! get the same transform in strict mode (`openai/wire.rs`), and their
//! arguments the same mapping back (`nodes/agent.rs`).
//!
//! The rules, from OpenAI's structured-output guide ("Supported schemas")
//! and the official Python SDK's own transform (`openai/lib/_pydantic.py`,
//! `_ensure_strict_json_schema`):
//! - every object has `additionalProperties: false` and lists every
//!   property in `required`; an optional field is sent as required and
//!   nullable, and the model answers `null` for it;
//! - the root is an object; every schema has a `type` (or is an `enum`,
//!   `const`, `anyOf` or `$ref`) — a free-form value cannot be strict;
//! - only some keywords are supported: `pattern` and some `format`s on
//!   strings, `multipleOf`/`minimum`/`maximum`/`exclusive*` on numbers,
//!   `minItems`/`maxItems` on arrays. Others (`maxLength`, `minLength`,
//!   `uniqueItems`, `default`, …) are dropped and written into the
//!   description, so the model still reads them, and the node's own check
//!   of the answer still enforces them.
//!
//! Descriptions are kept: they are how a graph steers its structured
//! output. A schema that cannot be made strict is sent with `strict:
//! false` (see [`StrictSchema::Loose`]), never rejected at call time.

use serde_json::{Map, Value, json};

/// Keywords strict mode accepts (besides the structural ones handled
/// below).
const SUPPORTED: &[&str] = &[
    "type",
    "description",
    "title",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "pattern",
    "format",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
];

/// String formats strict mode accepts.
const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords dropped without a trace: they say nothing to the model.
const SILENT: &[&str] = &["$schema", "$id", "$comment", "nullable"];

/// What a portable schema becomes for a strict provider.
#[derive(Clone, Debug, PartialEq)]
pub enum StrictSchema {
    /// The strict form, with what was changed on the way (one note each).
    Strict {
        /// The schema to send with `strict: true`.
        schema: Value,
        /// What was dropped or moved into a description.
        notes: Vec<String>,
    },
    /// The schema cannot be strict (a free-form value somewhere): it goes
    /// as it is, with `strict: false`.
    Loose {
        /// Why.
        reason: String,
    },
}

impl StrictSchema {
    /// Transforms `schema` (see the module docs).
    pub fn of(schema: &Value) -> Self {
        let mut notes = Vec::new();
        match strict_node(schema, "", false, &mut notes) {
            Ok(schema) if schema.get("type") == Some(&json!("object")) => {
                StrictSchema::Strict { schema, notes }
            }
            Ok(_) => StrictSchema::Loose {
                reason: "the root is not an object".into(),
            },
            Err(reason) => StrictSchema::Loose { reason },
        }
    }

    /// The strict schema, if there is one.
    pub fn schema(&self) -> Option<&Value> {
        match self {
            StrictSchema::Strict { schema, .. } => Some(schema),
            StrictSchema::Loose { .. } => None,
        }
    }

    /// What the transform changed or why it could not (for a load-time note).
    pub fn notes(&self) -> Vec<String> {
        match self {
            StrictSchema::Strict { notes, .. } => notes.clone(),
            StrictSchema::Loose { reason } => vec![format!(
                "sent without strict mode: {reason} (strict mode needs every value typed)"
            )],
        }
    }
}

fn place(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

/// One schema node in strict form; `optional` makes it nullable.
fn strict_node(
    schema: &Value,
    path: &str,
    optional: bool,
    notes: &mut Vec<String>,
) -> Result<Value, String> {
    let Value::Object(src) = schema else {
        return Err(format!("{}: a schema must be an object", place(path)));
    };
    let mut out = Map::new();
    let mut moved = Vec::new();
    let mut nullable = src.get("nullable").and_then(Value::as_bool) == Some(true);
    for (key, value) in src {
        let key = key.as_str();
        if key == "oneOf" {
            // Exactly-one is not supported; any-of is the nearest it accepts.
            out.insert("anyOf".into(), value.clone());
            notes.push(format!("{}: `oneOf` sent as `anyOf`", place(path)));
        } else if key == "format" && !value.as_str().is_some_and(|f| FORMATS.contains(&f)) {
            moved.push(format!("format: {value}"));
        } else if SUPPORTED.contains(&key) {
            out.insert(key.to_owned(), value.clone());
        } else if !SILENT.contains(&key) {
            moved.push(format!("{key}: {value}"));
        }
    }
    if !moved.is_empty() {
        notes.push(format!(
            "{}: {} not supported in strict mode; moved into the description",
            place(path),
            moved.join(", ")
        ));
        let text = moved.join("; ");
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) if !d.is_empty() => format!("{d} ({text})"),
            _ => format!("({text})"),
        };
        out.insert("description".into(), Value::String(description));
    }
    if !["type", "enum", "const", "anyOf", "$ref"]
        .iter()
        .any(|k| out.contains_key(*k))
    {
        return Err(format!("{} accepts any value", place(path)));
    }
    let types: Vec<String> = type_names(out.get("type"))
        .into_iter()
        .map(str::to_owned)
        .collect();
    if types.iter().any(|t| t == "object") {
        strict_object(&mut out, path, notes)?;
    }
    if types.iter().any(|t| t == "array") {
        let Some(items) = out.get("items") else {
            return Err(format!("{}: an array without `items`", place(path)));
        };
        let items = strict_node(items, &format!("{path}/items"), false, notes)?;
        out.insert("items".into(), items);
    }
    if let Some(Value::Array(variants)) = out.get("anyOf") {
        let variants = variants
            .iter()
            .enumerate()
            .map(|(i, v)| strict_node(v, &format!("{path}/anyOf/{i}"), false, notes))
            .collect::<Result<Vec<_>, _>>()?;
        nullable |= variants.iter().any(allows_null);
        out.insert("anyOf".into(), Value::Array(variants));
    }
    for defs in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = out.get(defs) {
            let mut done = Map::new();
            for (name, s) in d {
                done.insert(
                    name.clone(),
                    strict_node(s, &format!("{path}/{defs}/{name}"), false, notes)?,
                );
            }
            out.insert(defs.into(), Value::Object(done));
        }
    }
    nullable |= type_names(out.get("type")).contains(&"null");
    if optional || nullable {
        Ok(make_nullable(out))
    } else {
        Ok(Value::Object(out))
    }
}

/// `properties`, `required` and `additionalProperties` of an object.
fn strict_object(
    out: &mut Map<String, Value>,
    path: &str,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some(Value::Object(props)) = out.get("properties") else {
        return Err(format!("{}: an object without `properties`", place(path)));
    };
    let required: Vec<&str> = out
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut done = Map::new();
    for (name, s) in props {
        let optional = !required.contains(&name.as_str());
        let sub = strict_node(s, &format!("{path}/properties/{name}"), optional, notes)?;
        done.insert(name.clone(), sub);
    }
    let all: Vec<Value> = done.keys().cloned().map(Value::String).collect();
    match out.get("additionalProperties") {
        None | Some(Value::Bool(false)) => {}
        Some(other) => notes.push(format!(
            "{}: `additionalProperties: {other}` sent as false (strict mode allows no other keys)",
            place(path)
        )),
    }
    out.insert("properties".into(), Value::Object(done));
    out.insert("required".into(), Value::Array(all));
    out.insert("additionalProperties".into(), Value::Bool(false));
    Ok(())
}

/// The `type` names of a schema.
fn type_names(t: Option<&Value>) -> Vec<&str> {
    match t {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The schema, also accepting `null` (in its `type` and its `enum`, or as
/// a union with `null`).
fn make_nullable(mut out: Map<String, Value>) -> Value {
    if let Some(Value::Array(values)) = out.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    match out.get("type").cloned() {
        Some(Value::String(t)) if t != "null" => {
            out.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(mut a)) if !a.contains(&json!("null")) => {
            a.push(json!("null"));
            out.insert("type".into(), Value::Array(a));
        }
        Some(_) => {}
        None if out.contains_key("enum") || allows_null(&Value::Object(out.clone())) => {}
        None => {
            // `const`, `anyOf` or `$ref` without a type: a union with null,
            // the description kept outside where the model reads it.
            let description = out.remove("description");
            let mut wrapped = Map::new();
            if let Some(d) = description {
                wrapped.insert("description".into(), d);
            }
            wrapped.insert(
                "anyOf".into(),
                json!([Value::Object(out), {"type": "null"}]),
            );
            return Value::Object(wrapped);
        }
    }
    Value::Object(out)
}

/// Whether a schema accepts `null` (a schema without any type does).
pub(crate) fn allows_null(schema: &Value) -> bool {
    let Value::Object(m) = schema else {
        return false;
    };
    if let Some(Value::Array(values)) = m.get("enum") {
        // The enum has the last word: `type` and `enum` both apply.
        return values.contains(&Value::Null);
    }
    if m.get("nullable").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    if let Some(t) = m.get("type") {
        return type_names(Some(t)).contains(&"null");
    }
    if let Some(c) = m.get("const") {
        return c.is_null();
    }
    if let Some(Value::Array(variants)) = m.get("anyOf").or_else(|| m.get("oneOf")) {
        return variants.iter().any(allows_null);
    }
    !m.contains_key("$ref")
}

/// Maps the `null`s a strict answer carries for optional fields back to
/// absent fields, as the declared (portable) `schema` has them: a property
/// that is not required and whose own schema does not accept `null`.
pub(crate) fn restore_absent(schema: &Value, answer: &mut Value) {
    match answer {
        Value::Object(map) => {
            let Some(Value::Object(props)) = schema.get("properties") else {
                return;
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for (name, sub) in props {
                let optional = !required.contains(&name.as_str());
                match map.get_mut(name) {
                    Some(Value::Null) if optional && !allows_null(sub) => {
                        map.remove(name);
                    }
                    Some(v) => restore_absent(sub, v),
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for v in items {
                    restore_absent(item, v);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn optional_fields_become_required_and_nullable_with_descriptions_kept() {
        let portable = json!({
            "type": "object",
            "description": "a ticket",
            "properties": {
                "category": {"type": "string", "enum": ["BUG", "OTHER"], "description": "what kind"},
                "note": {"type": "string", "maxLength": 80, "description": "short"},
                "tags": {"type": "array", "items": {"type": "object",
                    "properties": {"name": {"type": "string"}}, "additionalProperties": true}},
            },
            "required": ["category"],
            "additionalProperties": true,
        });
        let StrictSchema::Strict { schema, notes } = StrictSchema::of(&portable) else {
            panic!("not strict");
        };
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "description": "a ticket",
                "properties": {
                    "category": {"type": "string", "enum": ["BUG", "OTHER"], "description": "what kind"},
                    "note": {"type": ["string", "null"], "description": "short (maxLength: 80)"},
                    "tags": {"type": ["array", "null"], "items": {"type": "object",
                        "properties": {"name": {"type": ["string", "null"]}},
                        "required": ["name"], "additionalProperties": false}},
                },
                "required": ["category", "note", "tags"],
                "additionalProperties": false,
            })
        );
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].contains("/properties/note: maxLength: 80"),
            "{notes:?}"
        );
    }

    #[test]
    fn optional_enums_accept_null_and_untyped_unions_are_wrapped() {
        let portable = json!({"type": "object", "properties": {
            "level": {"enum": ["low", "high"]},
            "pick": {"description": "one of", "oneOf": [{"type": "string"}, {"type": "integer"}]},
        }});
        let schema = StrictSchema::of(&portable).schema().cloned().unwrap();
        assert_eq!(
            schema["properties"]["level"],
            json!({"enum": ["low", "high", null]})
        );
        assert_eq!(
            schema["properties"]["pick"],
            json!({"description": "one of", "anyOf": [
                {"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]})
        );
    }

    #[test]
    fn free_form_values_are_sent_loose_with_the_reason() {
        for (schema, why) in [
            (
                json!({"type": "object", "properties": {"x": {}}}),
                "/properties/x accepts any value",
            ),
            (
                json!({"type": "object"}),
                "/: an object without `properties`",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "array"}}}),
                "an array without `items`",
            ),
        ] {
            match StrictSchema::of(&schema) {
                StrictSchema::Loose { reason } => assert!(reason.contains(why), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn nulls_for_optional_fields_become_absent() {
        let portable = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": ["string", "null"]},
            "c": {"type": "integer"},
            "list": {"type": "array", "items": {"type": "object",
                "properties": {"x": {"type": "string"}}}},
        }, "required": ["c"]});
        let mut answer = json!({"a": null, "b": null, "c": null,
            "list": [{"x": null}, {"x": "y"}]});
        restore_absent(&portable, &mut answer);
        assert_eq!(
            answer,
            json!({"b": null, "c": null, "list": [{}, {"x": "y"}]})
        );
    }
}
