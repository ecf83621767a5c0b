//! The smallest instance of a JSON Schema, as the emulators answer a
//! structured request: what a provider in strict mode would send when the
//! model says as little as the schema allows (`null` wherever it may,
//! the first enum value, `minItems` items, the lower bound of numbers).

use serde_json::{Map, Value, json};

/// A minimal value of `schema` (`root` resolves `$ref`s).
pub fn minimal(schema: &Value, root: &Value) -> Value {
    let Some(obj) = schema.as_object() else {
        return Value::Null;
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        let path = r.trim_start_matches("#/").split('/');
        let target = path.fold(root, |v, key| &v[key]);
        return minimal(target, root);
    }
    if let Some(c) = obj.get("const") {
        return c.clone();
    }
    if let Some(Value::Array(values)) = obj.get("enum") {
        return values.first().cloned().unwrap_or(Value::Null);
    }
    if let Some(Value::Array(variants)) = obj.get("anyOf") {
        let null = variants.iter().find(|v| v["type"] == "null");
        return minimal(null.or(variants.first()).unwrap_or(&Value::Null), root);
    }
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if types.contains(&"null") {
        return Value::Null;
    }
    let number = |integer: bool| {
        let lo = obj
            .get("minimum")
            .and_then(Value::as_f64)
            .or_else(|| {
                obj.get("exclusiveMinimum")
                    .and_then(Value::as_f64)
                    .map(|x| x + 1.0)
            })
            .unwrap_or(0.0);
        if integer {
            json!(lo.ceil() as i64)
        } else {
            json!(lo)
        }
    };
    match types.first().copied() {
        Some("object") => {
            let required: Vec<&str> = obj
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Map::new();
            for (k, v) in obj
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if required.contains(&k.as_str()) {
                    out.insert(k.clone(), minimal(v, root));
                }
            }
            Value::Object(out)
        }
        Some("array") => {
            let n = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = obj
                .get("items")
                .map(|i| minimal(i, root))
                .unwrap_or(Value::Null);
            Value::Array((0..n).map(|_| item.clone()).collect())
        }
        Some("string") => json!("x"),
        Some("integer") => number(true),
        Some("number") => number(false),
        Some("boolean") => json!(false),
        _ => Value::Null,
    }
}
