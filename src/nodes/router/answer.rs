//! What a router's model answers: the intent plus the fields the graph file
//! declares (`fields`), the schema sent for it (with the `keywords` the
//! offline model chooses by), and reading an answer back field by field.
//!
//! Nothing here knows an application: the intents, the answer's fields and
//! the keywords all come from the graph file.

use regex::RegexBuilder;
use serde_json::{Map, Value, json};

use super::super::BuildCx;
use super::super::structured::extract_json;
use crate::graph::Reported;
use crate::graph::diagnostic::name_hint;
use crate::llm::{JsonSchemaFormat, ValueKeywords};
use crate::state::TypeSpec;

/// The answer field the `language` setting is filled from (a model may
/// also call it `language`).
pub(super) const LANGUAGE: &str = "detected_language";

/// The answer's fields besides `intent`, each with its JSON Schema.
pub(super) type Fields = Vec<(String, Value)>;

/// `fields`: the answer's fields besides `intent` (name → JSON Schema).
/// Without it: a one-sentence `reasoning`, and [`LANGUAGE`] when the router
/// writes a language.
pub(super) fn fields(cx: &mut BuildCx<'_>, writes_language: bool) -> Result<Fields, Reported> {
    let Some(entries) = cx.mapping("fields")? else {
        let mut out = vec![(
            "reasoning".to_owned(),
            json!({"type": "string", "maxLength": 400}),
        )];
        if writes_language {
            out.push((
                LANGUAGE.to_owned(),
                json!({"type": "string", "maxLength": 12}),
            ));
        }
        return Ok(out);
    };
    let mut out = Vec::new();
    let mut ok = true;
    for (name, schema) in entries {
        let schema_json = schema.value.to_json();
        let problem = if name.value == "intent" {
            Some("`intent` is the router's own field (its values are `intents`)".to_owned())
        } else {
            TypeSpec::from_json_schema(&schema_json)
                .err()
                .map(|why| format!("`fields.{}` is not a schema: {why}", name.value))
        };
        if let Some(problem) = problem {
            cx.error(name.loc, "invalid-setting", problem, None);
            ok = false;
            continue;
        }
        out.push((name.value.clone(), schema_json));
    }
    if ok && writes_language && !out.iter().any(|(n, _)| n == LANGUAGE) {
        let loc = cx.setting("fields").map_or(cx.kind_loc(), |v| v.loc);
        cx.error(
            loc,
            "invalid-setting",
            format!("`language` is written from the answer's `{LANGUAGE}`, which `fields` lacks"),
            None,
        );
        ok = false;
    }
    if ok { Ok(out) } else { Err(Reported) }
}

/// `keywords`: per intent, a regular expression (case-insensitive, over
/// the user's trimmed text) by which the offline model chooses it.
pub(super) fn keywords(
    cx: &mut BuildCx<'_>,
    intents: &[String],
) -> Result<ValueKeywords, Reported> {
    let Some(map) = cx.name_map("keywords")? else {
        return Ok(ValueKeywords::default());
    };
    let mut out = Vec::new();
    let mut ok = true;
    for (intent, pattern) in &map.entries {
        if !intents.is_empty() && !intents.contains(&intent.value) {
            cx.error(
                intent.loc,
                "unknown-intent",
                format!(
                    "keywords for `{}`, which is not one of the router's intents",
                    intent.value
                ),
                name_hint(&intent.value, intents.iter().map(String::as_str)),
            );
            ok = false;
            continue;
        }
        match RegexBuilder::new(&pattern.value)
            .case_insensitive(true)
            .build()
        {
            Ok(re) => out.push((intent.value.clone(), re)),
            Err(e) => {
                cx.error(
                    pattern.loc,
                    "invalid-setting",
                    format!(
                        "`keywords.{}` is not a regular expression: {e}",
                        intent.value
                    ),
                    None,
                );
                ok = false;
            }
        }
    }
    if ok {
        Ok(ValueKeywords::new(out))
    } else {
        Err(Reported)
    }
}

/// The structured-output format of a classification: `intent` (one of
/// `intents`) and the declared fields, all required.
pub(super) fn format(
    intents: &[String],
    fields: &Fields,
    keywords: ValueKeywords,
) -> JsonSchemaFormat {
    let mut properties = Map::new();
    properties.insert("intent".into(), json!({"type": "string", "enum": intents}));
    for (name, schema) in fields {
        properties.insert(name.clone(), schema.clone());
    }
    let required: Vec<&str> = std::iter::once("intent")
        .chain(fields.iter().map(|(n, _)| n.as_str()))
        .collect();
    JsonSchemaFormat::new(
        "intent_classification",
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        }),
    )
    .with_keywords(keywords)
}

/// Reads a classification field by field from the model's text: the
/// intent (any case, spaces or hyphens for underscores, or a bare intent
/// instead of an object), then each declared field by its type — a string
/// trimmed with whitespace collapsed (missing: empty), a list from a list
/// or from one string split at commas (missing: empty), [`LANGUAGE`] (or
/// `language`; missing, null or blank → `default_language`), anything
/// else as given.
///
/// # Errors
/// Why no intent could be read (the caller takes the fallback).
pub(super) fn normalise(
    text: &str,
    intents: &[String],
    fields: &Fields,
    default_language: &str,
) -> Result<(String, Value), String> {
    let raw = extract_json(text);
    let value: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        // A bare intent name, quoted or not.
        Err(_) if !raw.trim().is_empty() => Value::String(raw.trim().trim_matches('"').to_owned()),
        Err(e) => return Err(format!("the model's answer was not valid JSON ({e})")),
    };
    let (said, answer) = match &value {
        Value::Object(o) => (o.get("intent").cloned().unwrap_or(Value::Null), Some(o)),
        Value::String(_) => (value.clone(), None),
        other => return Err(format!("the model answered {other} instead of an object")),
    };
    let Some(said) = said.as_str().map(str::trim).filter(|s| !s.is_empty()) else {
        return Err("the model's answer has no intent".into());
    };
    let key = |s: &str| s.to_uppercase().replace([' ', '-'], "_");
    let Some(intent) = intents.iter().find(|i| key(i) == key(said)) else {
        return Err(format!("the model chose unknown intent `{said}`"));
    };
    let get = |k: &str| answer.and_then(|o| o.get(k)).unwrap_or(&Value::Null);
    let mut details = Map::new();
    for (name, schema) in fields {
        let v = if name == LANGUAGE {
            json!(language(
                &[get(LANGUAGE), get("language")],
                default_language
            ))
        } else {
            field(get(name), schema)
        };
        details.insert(name.clone(), v);
    }
    Ok((intent.clone(), Value::Object(details)))
}

/// One answer field as its declared type wants it.
fn field(v: &Value, schema: &Value) -> Value {
    let ty = match &schema["type"] {
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        other => other.as_str(),
    };
    match ty {
        Some("string") => json!(match v {
            Value::Null => String::new(),
            Value::String(s) => s.split_whitespace().collect::<Vec<_>>().join(" "),
            other => other.to_string(),
        }),
        Some("array") => {
            let item = |v: &Value| match v {
                Value::String(s) => Some(s.trim().to_owned()),
                Value::Null => None,
                other => Some(other.to_string()),
            };
            let items: Vec<String> = match v {
                Value::Array(items) => items.iter().filter_map(item).collect(),
                Value::String(s) => s.split([',', ';']).map(|p| p.trim().to_owned()).collect(),
                other => item(other).into_iter().collect(),
            };
            json!(
                items
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            )
        }
        _ => v.clone(),
    }
}

/// The first non-blank language given, else `default_language`.
fn language(given: &[&Value], default_language: &str) -> String {
    given
        .iter()
        .find_map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty()))
        .map_or_else(|| default_language.to_owned(), language_as_given)
}

/// A language as the model gave it: a bare code (`FR`) in lower case, as
/// codes are written; a name (`French`, `Français`) exactly as given — it
/// reaches the state and the prompts that say "answer in {{ language }}".
fn language_as_given(language: &str) -> String {
    if (2..=3).contains(&language.len()) && language.chars().all(|c| c.is_ascii_alphabetic()) {
        language.to_ascii_lowercase()
    } else {
        language.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn intents() -> Vec<String> {
        ["ALPHA", "BETA", "GAMMA"].map(String::from).to_vec()
    }

    /// Fields as a graph file might declare them.
    fn declared() -> Fields {
        vec![
            ("reasoning".into(), json!({"type": "string"})),
            (
                "missing_slots".into(),
                json!({"type": "array", "items": {"type": "string"}}),
            ),
            (LANGUAGE.into(), json!({"type": "string"})),
        ]
    }

    fn read(text: &str) -> Result<(String, Value), String> {
        normalise(text, &intents(), &declared(), "en")
    }

    #[test]
    fn odd_fields_are_normalised_not_thrown_away() {
        let (intent, d) = read(
            r#"{"intent": "gamma", "reasoning": "  needs\n a  country ", "missing_slots": "country, year", "detected_language": null}"#,
        )
        .unwrap();
        assert_eq!(intent, "GAMMA");
        assert_eq!(
            d,
            json!({"reasoning": "needs a country", "missing_slots": ["country", "year"], "detected_language": "en"})
        );
        let (intent, d) =
            read("```json\n{\"intent\": \"Alpha\", \"language\": \"FR\"}\n```").unwrap();
        assert_eq!(intent, "ALPHA");
        assert_eq!(d["detected_language"], "fr");
        // A name is kept as written (issue 31: "French" became `french`).
        let (_, d) = read(r#"{"intent": "BETA", "detected_language": " French "}"#).unwrap();
        assert_eq!(d["detected_language"], "French");
        assert_eq!(d["missing_slots"], json!([]));
        assert_eq!(d["reasoning"], "");
        let (intent, d) = read(r#"{"intent": "BETA", "missing_slots": [1, null, " x "]}"#).unwrap();
        assert_eq!(intent, "BETA");
        assert_eq!(d["missing_slots"], json!(["1", "x"]));
        assert_eq!(read("\"beta\"").unwrap().0, "BETA");
    }

    #[test]
    fn only_the_declared_fields_are_read() {
        let fields = vec![("score".into(), json!({"type": "integer"}))];
        let (_, d) = normalise(
            r#"{"intent": "ALPHA", "score": 3, "reasoning": "x"}"#,
            &intents(),
            &fields,
            "en",
        )
        .unwrap();
        assert_eq!(d, json!({"score": 3}));
        let f = format(&intents(), &fields, ValueKeywords::default());
        assert_eq!(f.schema["required"], json!(["intent", "score"]));
        assert_eq!(
            f.schema["properties"]["intent"]["enum"],
            json!(["ALPHA", "BETA", "GAMMA"])
        );
    }

    #[test]
    fn no_usable_intent_is_an_error() {
        assert!(
            read(r#"{"intent": "DANCE"}"#)
                .unwrap_err()
                .contains("DANCE")
        );
        assert!(read(r#"{"reasoning": "x"}"#).is_err());
        assert!(read("").is_err());
        assert!(read("[1, 2]").is_err());
    }
}
