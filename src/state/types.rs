//! Field types: the JSON-Schema subset a state field, a structured model
//! output or a tool argument is checked against.
//!
//! Graph files declare fields with the ecosystem's convention (`type:
//! string`, `enum: […]`, `items:`, `properties:`, `minimum:`, `maxLength:`,
//! `nullable: true`); Rust state types get theirs from [`FieldValue`]. One
//! type serves three purposes: load-time checks of every reference (can a
//! route switch on it? is it a list a map edge can fan out over?), run-time
//! checks of every write ([`TypeSpec::check`]), and the JSON Schema sent to a
//! model that must answer in that shape ([`TypeSpec::json_schema`]).

use std::fmt;

use serde_json::{Map, Value, json};

/// The type of a field (or of a part of one).
#[derive(Clone, Debug, PartialEq)]
pub struct TypeSpec {
    /// The shape.
    pub kind: TypeKind,
    /// Whether `null` is a valid value.
    pub nullable: bool,
}

/// The shape of a value.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeKind {
    /// Any JSON value.
    Any,
    /// A string, optionally one of `values`, at most `max_length` characters.
    String {
        /// The allowed values (`enum:`), if restricted.
        values: Option<Vec<String>>,
        /// Longest allowed value, in characters (`maxLength:`).
        max_length: Option<u64>,
    },
    /// A whole number within the bounds.
    Integer {
        /// `minimum:`.
        minimum: Option<f64>,
        /// `maximum:`.
        maximum: Option<f64>,
    },
    /// A number within the bounds.
    Number {
        /// `minimum:`.
        minimum: Option<f64>,
        /// `maximum:`.
        maximum: Option<f64>,
    },
    /// `true` or `false`.
    Boolean,
    /// A list of items of one type.
    Array {
        /// The items' type.
        items: Box<TypeSpec>,
        /// Longest allowed list (`maxItems:`).
        max_items: Option<u64>,
    },
    /// An object with known properties (others allowed unless closed).
    Object {
        /// Declared properties, in order.
        properties: Vec<(String, TypeSpec)>,
        /// Properties that must be present.
        required: Vec<String>,
        /// Whether properties not declared are allowed.
        additional: bool,
    },
    /// Chat messages (`{id, role, content}`), merged by id: the history
    /// type model nodes read and `POST /api/chat` fills.
    Messages,
}

/// Why a value does not have a type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Where in the value (`""` for the value itself, `/items/2/name`).
    pub path: String,
    /// What the type wants there.
    pub expected: String,
    /// What was found.
    pub got: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "expected {}, got {}", self.expected, self.got)
        } else {
            write!(
                f,
                "at {}: expected {}, got {}",
                self.path, self.expected, self.got
            )
        }
    }
}

impl TypeSpec {
    /// A non-nullable type of this kind.
    pub const fn of(kind: TypeKind) -> Self {
        Self {
            kind,
            nullable: false,
        }
    }

    /// Any JSON value.
    pub const fn any() -> Self {
        Self {
            kind: TypeKind::Any,
            nullable: true,
        }
    }

    /// An unrestricted string.
    pub const fn string() -> Self {
        Self::of(TypeKind::String {
            values: None,
            max_length: None,
        })
    }

    /// An unbounded integer.
    pub const fn integer() -> Self {
        Self::of(TypeKind::Integer {
            minimum: None,
            maximum: None,
        })
    }

    /// An unbounded number.
    pub const fn number() -> Self {
        Self::of(TypeKind::Number {
            minimum: None,
            maximum: None,
        })
    }

    /// A boolean.
    pub const fn boolean() -> Self {
        Self::of(TypeKind::Boolean)
    }

    /// A list of `items`.
    pub fn array(items: TypeSpec) -> Self {
        Self::of(TypeKind::Array {
            items: Box::new(items),
            max_items: None,
        })
    }

    /// An open object with no declared properties.
    pub fn object() -> Self {
        Self::of(TypeKind::Object {
            properties: Vec::new(),
            required: Vec::new(),
            additional: true,
        })
    }

    /// Chat messages.
    pub const fn messages() -> Self {
        Self::of(TypeKind::Messages)
    }

    /// The same type, also allowing `null`.
    pub fn nullable(mut self) -> Self {
        self.nullable = true;
        self
    }

    /// Whether values are strings.
    pub fn is_string(&self) -> bool {
        matches!(self.kind, TypeKind::String { .. })
    }

    /// Whether values are lists (chat messages included).
    pub fn is_list(&self) -> bool {
        matches!(self.kind, TypeKind::Array { .. } | TypeKind::Messages)
    }

    /// The type of one item of a list (of one message for chat
    /// messages); `None` for what is not a list.
    pub fn item_type(&self) -> Option<TypeSpec> {
        match &self.kind {
            TypeKind::Array { items, .. } => Some((**items).clone()),
            TypeKind::Messages => Some(message_type()),
            _ => None,
        }
    }

    /// Whether values are chat messages.
    pub fn is_messages(&self) -> bool {
        matches!(self.kind, TypeKind::Messages)
    }

    /// Whether values are numbers (integers included).
    pub fn is_number(&self) -> bool {
        matches!(
            self.kind,
            TypeKind::Integer { .. } | TypeKind::Number { .. }
        )
    }

    /// Whether the type can hold an arbitrary JSON object (records, details).
    pub fn holds_objects(&self) -> bool {
        matches!(self.kind, TypeKind::Any | TypeKind::Object { .. })
    }

    /// Whether a conditional edge can switch on values of this type.
    pub fn routable(&self) -> bool {
        matches!(
            self.kind,
            TypeKind::String { .. } | TypeKind::Integer { .. } | TypeKind::Boolean
        )
    }

    /// The values a field of this type can take, when there are few:
    /// booleans and enums (a route on it must map each).
    pub fn finite_values(&self) -> Option<Vec<String>> {
        match &self.kind {
            TypeKind::Boolean => Some(vec!["true".into(), "false".into()]),
            TypeKind::String {
                values: Some(v), ..
            } => Some(v.clone()),
            _ => None,
        }
    }

    /// The items' type of a list.
    pub fn items(&self) -> Option<TypeSpec> {
        match &self.kind {
            TypeKind::Array { items, .. } => Some((**items).clone()),
            TypeKind::Messages => Some(message_type()),
            _ => None,
        }
    }

    /// The value a field of this type starts with when the graph declares
    /// no `default`: `null` when nullable, otherwise the type's empty value
    /// (`""`, `0`, `false`, `[]`, `{}`), as a Rust state's `Default` would.
    /// The empty value means "unset" and is not checked against `enum` or
    /// bounds; every write is.
    pub fn zero(&self) -> Value {
        if self.nullable {
            return Value::Null;
        }
        match &self.kind {
            TypeKind::Any => Value::Null,
            TypeKind::String { .. } => Value::String(String::new()),
            TypeKind::Integer { .. } => json!(0),
            TypeKind::Number { .. } => json!(0.0),
            TypeKind::Boolean => Value::Bool(false),
            TypeKind::Array { .. } | TypeKind::Messages => Value::Array(Vec::new()),
            TypeKind::Object { .. } => Value::Object(Map::new()),
        }
    }

    /// A short description for messages: `string`, `list of integer`,
    /// `one of A, B`.
    pub fn describe(&self) -> String {
        let base = match &self.kind {
            TypeKind::Any => return "any value".into(),
            TypeKind::String {
                values: Some(v), ..
            } => format!("one of {}", v.join(", ")),
            TypeKind::String { .. } => "string".into(),
            TypeKind::Integer { .. } => "integer".into(),
            TypeKind::Number { .. } => "number".into(),
            TypeKind::Boolean => "boolean".into(),
            TypeKind::Array { items, .. } => format!("list of {}", items.describe()),
            TypeKind::Object { .. } => "object".into(),
            TypeKind::Messages => "chat messages".into(),
        };
        if self.nullable {
            format!("{base} or null")
        } else {
            base
        }
    }

    /// Checks a value against the type.
    ///
    /// # Errors
    /// The first place where the value does not fit.
    pub fn check(&self, value: &Value) -> Result<(), Mismatch> {
        self.check_at(value, &mut String::new())
    }

    fn check_at(&self, value: &Value, path: &mut String) -> Result<(), Mismatch> {
        if value.is_null() && (self.nullable || matches!(self.kind, TypeKind::Any)) {
            return Ok(());
        }
        let fail = |path: &str, expected: String| Mismatch {
            path: path.to_owned(),
            expected,
            got: describe_value(value),
        };
        match &self.kind {
            TypeKind::Any => Ok(()),
            TypeKind::String { values, max_length } => {
                let Value::String(s) = value else {
                    return Err(fail(path, self.describe()));
                };
                if let Some(values) = values
                    && !values.iter().any(|v| v == s)
                {
                    return Err(fail(path, self.describe()));
                }
                if let Some(max) = max_length
                    && s.chars().count() as u64 > *max
                {
                    return Err(fail(path, format!("a string of at most {max} characters")));
                }
                Ok(())
            }
            TypeKind::Integer { minimum, maximum } => {
                let n = value
                    .as_f64()
                    .filter(|n| n.fract() == 0.0)
                    .ok_or_else(|| fail(path, self.describe()))?;
                check_bounds(n, *minimum, *maximum).map_err(|e| fail(path, e))
            }
            TypeKind::Number { minimum, maximum } => {
                let n = value.as_f64().ok_or_else(|| fail(path, self.describe()))?;
                check_bounds(n, *minimum, *maximum).map_err(|e| fail(path, e))
            }
            TypeKind::Boolean => match value {
                Value::Bool(_) => Ok(()),
                _ => Err(fail(path, self.describe())),
            },
            TypeKind::Array { items, max_items } => {
                let Value::Array(list) = value else {
                    return Err(fail(path, self.describe()));
                };
                if let Some(max) = max_items
                    && list.len() as u64 > *max
                {
                    return Err(fail(path, format!("a list of at most {max} items")));
                }
                check_items(items, list, path)
            }
            TypeKind::Messages => {
                let Value::Array(list) = value else {
                    return Err(fail(path, self.describe()));
                };
                check_items(&message_type(), list, path)
            }
            TypeKind::Object {
                properties,
                required,
                additional,
            } => {
                let Value::Object(map) = value else {
                    return Err(fail(path, self.describe()));
                };
                check_object(map, properties, required, *additional, path)
            }
        }
    }

    /// The JSON Schema of the type, as sent to a model for structured
    /// output and shown by the API.
    pub fn json_schema(&self) -> Value {
        let mut schema = match &self.kind {
            TypeKind::Any => return json!({}),
            TypeKind::String { values, max_length } => {
                let mut s = json!({"type": "string"});
                if let Some(v) = values {
                    s["enum"] = json!(v);
                }
                if let Some(m) = max_length {
                    s["maxLength"] = json!(m);
                }
                s
            }
            TypeKind::Integer { minimum, maximum } => {
                bounds(json!({"type": "integer"}), *minimum, *maximum)
            }
            TypeKind::Number { minimum, maximum } => {
                bounds(json!({"type": "number"}), *minimum, *maximum)
            }
            TypeKind::Boolean => json!({"type": "boolean"}),
            TypeKind::Array { items, max_items } => {
                let mut s = json!({"type": "array", "items": items.json_schema()});
                if let Some(m) = max_items {
                    s["maxItems"] = json!(m);
                }
                s
            }
            TypeKind::Messages => json!({"type": "array", "items": message_type().json_schema()}),
            TypeKind::Object {
                properties,
                required,
                additional,
            } => {
                let props: Map<String, Value> = properties
                    .iter()
                    .map(|(k, t)| (k.clone(), t.json_schema()))
                    .collect();
                json!({
                    "type": "object",
                    "properties": props,
                    "required": required,
                    "additionalProperties": additional,
                })
            }
        };
        if self.nullable
            && let Some(t) = schema.get("type").cloned()
        {
            schema["type"] = json!([t, "null"]);
        }
        schema
    }

    /// The type a JSON Schema describes (the subset this module knows:
    /// `type` (one, or a list with `"null"`), `enum`, `items`, `properties`,
    /// `required`, `additionalProperties`, `minimum`, `maximum`,
    /// `maxLength`, `maxItems`; other keywords are ignored).
    ///
    /// # Errors
    /// What is not a schema, with the place (`/properties/x`).
    pub fn from_json_schema(schema: &Value) -> Result<Self, String> {
        from_schema(schema, "")
    }

    /// The declared type written the way a graph file writes it (for the
    /// API and the studio): the JSON Schema, with `messages` named.
    pub fn to_declared(&self) -> Value {
        match self.kind {
            TypeKind::Messages => json!({"type": "messages"}),
            _ => self.json_schema(),
        }
    }
}

fn from_schema(schema: &Value, at: &str) -> Result<TypeSpec, String> {
    let Value::Object(m) = schema else {
        return Err(format!("{at}: a schema must be an object"));
    };
    let mut nullable = m.get("nullable").and_then(Value::as_bool).unwrap_or(false);
    let names: Vec<&str> = match m.get("type") {
        None => Vec::new(),
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        Some(other) => return Err(format!("{at}/type: `{other}` is not a type name")),
    };
    let mut main = None;
    for n in names {
        if n == "null" {
            nullable = true;
        } else if main.replace(n).is_some() {
            return Err(format!("{at}/type: one type (and \"null\") only"));
        }
    }
    let num = |k: &str| m.get(k).and_then(Value::as_f64);
    let uint = |k: &str| m.get(k).and_then(Value::as_u64);
    let kind = match main.unwrap_or(if m.contains_key("enum") {
        "string"
    } else {
        "any"
    }) {
        "string" => TypeKind::String {
            values: match m.get("enum") {
                None => None,
                Some(Value::Array(vs)) => Some(
                    vs.iter()
                        .map(|v| {
                            v.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| format!("{at}/enum: values must be strings"))
                        })
                        .collect::<Result<_, _>>()?,
                ),
                Some(_) => return Err(format!("{at}/enum: must be a list")),
            },
            max_length: uint("maxLength"),
        },
        "integer" => TypeKind::Integer {
            minimum: num("minimum"),
            maximum: num("maximum"),
        },
        "number" => TypeKind::Number {
            minimum: num("minimum"),
            maximum: num("maximum"),
        },
        "boolean" => TypeKind::Boolean,
        "array" => TypeKind::Array {
            items: Box::new(match m.get("items") {
                Some(i) => from_schema(i, &format!("{at}/items"))?,
                None => TypeSpec::any(),
            }),
            max_items: uint("maxItems"),
        },
        "object" => {
            let mut properties = Vec::new();
            if let Some(Value::Object(props)) = m.get("properties") {
                for (k, v) in props {
                    properties.push((k.clone(), from_schema(v, &format!("{at}/properties/{k}"))?));
                }
            }
            let required = m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            TypeKind::Object {
                properties,
                required,
                additional: m
                    .get("additionalProperties")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            }
        }
        "messages" => TypeKind::Messages,
        "any" => TypeKind::Any,
        other => return Err(format!("{at}/type: unknown type `{other}`")),
    };
    Ok(TypeSpec { kind, nullable })
}

/// Each item of a list against `item`, at `path/i`.
fn check_items(item: &TypeSpec, list: &[Value], path: &mut String) -> Result<(), Mismatch> {
    for (i, v) in list.iter().enumerate() {
        let len = path.len();
        path.push_str(&format!("/{i}"));
        item.check_at(v, path)?;
        path.truncate(len);
    }
    Ok(())
}

/// An object's required properties, then each property against its type
/// (one not declared only when `additional`).
fn check_object(
    map: &Map<String, Value>,
    properties: &[(String, TypeSpec)],
    required: &[String],
    additional: bool,
    path: &mut String,
) -> Result<(), Mismatch> {
    for name in required {
        if !map.contains_key(name) {
            return Err(Mismatch {
                path: format!("{path}/{name}"),
                expected: "a value (required)".into(),
                got: "nothing".into(),
            });
        }
    }
    for (key, v) in map {
        let len = path.len();
        path.push('/');
        path.push_str(key);
        match properties.iter().find(|(k, _)| k == key) {
            Some((_, ty)) => ty.check_at(v, path)?,
            None if additional => {}
            None => {
                return Err(Mismatch {
                    path: path.clone(),
                    expected: "no such property".into(),
                    got: describe_value(v),
                });
            }
        }
        path.truncate(len);
    }
    Ok(())
}

fn check_bounds(n: f64, minimum: Option<f64>, maximum: Option<f64>) -> Result<(), String> {
    match (minimum, maximum) {
        (Some(lo), _) if n < lo => Err(format!("a number ≥ {lo}")),
        (_, Some(hi)) if n > hi => Err(format!("a number ≤ {hi}")),
        _ => Ok(()),
    }
}

fn bounds(mut schema: Value, minimum: Option<f64>, maximum: Option<f64>) -> Value {
    let num = |n: f64| {
        if n.fract() == 0.0 && n.abs() < 9e15 {
            json!(n as i64)
        } else {
            json!(n)
        }
    };
    if let Some(lo) = minimum {
        schema["minimum"] = num(lo);
    }
    if let Some(hi) = maximum {
        schema["maximum"] = num(hi);
    }
    schema
}

/// The type of one chat message.
fn message_type() -> TypeSpec {
    TypeSpec::of(TypeKind::Object {
        properties: vec![
            ("id".into(), TypeSpec::string()),
            (
                "role".into(),
                TypeSpec::of(TypeKind::String {
                    values: Some(vec![
                        "system".into(),
                        "user".into(),
                        "assistant".into(),
                        "tool".into(),
                    ]),
                    max_length: None,
                }),
            ),
            ("content".into(), TypeSpec::string()),
            (
                "images".into(),
                TypeSpec::of(TypeKind::Array {
                    items: Box::new(TypeSpec::string()),
                    max_items: None,
                }),
            ),
            ("reasoning".into(), TypeSpec::string()),
            (
                "tool_calls".into(),
                TypeSpec::of(TypeKind::Array {
                    items: Box::new(tool_call_type()),
                    max_items: None,
                }),
            ),
            ("tool_call_id".into(), TypeSpec::string()),
            ("name".into(), TypeSpec::string()),
        ],
        required: vec!["role".into()],
        additional: true,
    })
}

/// The type of one tool call of an assistant message.
fn tool_call_type() -> TypeSpec {
    TypeSpec::of(TypeKind::Object {
        properties: vec![
            ("id".into(), TypeSpec::string()),
            ("name".into(), TypeSpec::string()),
            ("args".into(), TypeSpec::any()),
        ],
        required: vec!["id".into(), "name".into()],
        additional: false,
    })
}

/// What a JSON value is, for messages: `string "abc"`, `number 3.5`,
/// `list of 2 items`, `object`, `null`.
pub fn describe_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let short: String = s.chars().take(40).collect();
            if short.len() < s.len() {
                format!("string \"{short}…\"")
            } else {
                format!("string \"{short}\"")
            }
        }
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// Maps a Rust field type to its [`TypeSpec`]; implemented for the types a
/// Rust state may hold. Implement it for your own item types (returning
/// [`TypeSpec::object`] or a precise object type).
pub trait FieldValue {
    /// The type of values of this Rust type.
    fn type_spec() -> TypeSpec;
}

macro_rules! field_value {
    ($ty:ty => $spec:expr $(, $($gen:tt)*)?) => {
        impl $(<$($gen)*>)? FieldValue for $ty {
            fn type_spec() -> TypeSpec {
                $spec
            }
        }
    };
}

field_value!(String => TypeSpec::string());
field_value!(bool => TypeSpec::boolean());
field_value!(i64 => TypeSpec::integer());
field_value!(i32 => TypeSpec::integer());
field_value!(u32 => TypeSpec::of(TypeKind::Integer { minimum: Some(0.0), maximum: Some(f64::from(u32::MAX)) }));
field_value!(u64 => TypeSpec::of(TypeKind::Integer { minimum: Some(0.0), maximum: None }));
field_value!(usize => TypeSpec::of(TypeKind::Integer { minimum: Some(0.0), maximum: None }));
field_value!(f64 => TypeSpec::number());
field_value!(serde_json::Value => TypeSpec::any());
field_value!(std::collections::BTreeMap<K, V> => TypeSpec::object(), K, V);
field_value!(super::Message => message_type());

impl<T: FieldValue + 'static> FieldValue for Vec<T> {
    fn type_spec() -> TypeSpec {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<super::Message>() {
            TypeSpec::messages()
        } else {
            TypeSpec::array(T::type_spec())
        }
    }
}

impl<T: FieldValue> FieldValue for Option<T> {
    fn type_spec() -> TypeSpec {
        T::type_spec().nullable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enum_of(values: &[&str]) -> TypeSpec {
        TypeSpec::of(TypeKind::String {
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
            max_length: None,
        })
    }

    #[test]
    fn checks_name_the_place_what_was_expected_and_what_came() {
        let t = TypeSpec::array(TypeSpec::of(TypeKind::Object {
            properties: vec![("n".into(), TypeSpec::integer())],
            required: vec!["n".into()],
            additional: false,
        }));
        assert!(t.check(&json!([{"n": 1}, {"n": 2.0}])).is_ok());
        let e = t.check(&json!([{"n": 1}, {"n": 1.5}])).unwrap_err();
        assert_eq!(e.path, "/1/n");
        assert_eq!(e.expected, "integer");
        assert_eq!(e.got, "number 1.5");
        let e = t.check(&json!([{"m": 1}])).unwrap_err();
        assert_eq!(e.path, "/0/n", "{e}");
        assert!(t.check(&json!("x")).is_err());
        assert!(enum_of(&["A", "B"]).check(&json!("B")).is_ok());
        let e = enum_of(&["A", "B"]).check(&json!("C")).unwrap_err();
        assert_eq!(e.to_string(), "expected one of A, B, got string \"C\"");
        let bounded = TypeSpec::of(TypeKind::Integer {
            minimum: Some(1.0),
            maximum: Some(5.0),
        });
        assert!(bounded.check(&json!(3)).is_ok());
        assert!(bounded.check(&json!(6)).is_err());
        assert!(bounded.check(&Value::Null).is_err());
        assert!(bounded.clone().nullable().check(&Value::Null).is_ok());
    }

    #[test]
    fn json_schema_follows_the_declaration() {
        let t = TypeSpec::of(TypeKind::Object {
            properties: vec![
                ("category".into(), enum_of(&["BUG", "OTHER"])),
                (
                    "priority".into(),
                    TypeSpec::of(TypeKind::Integer {
                        minimum: Some(1.0),
                        maximum: Some(5.0),
                    }),
                ),
            ],
            required: vec!["category".into(), "priority".into()],
            additional: false,
        });
        assert_eq!(
            t.json_schema(),
            json!({"type": "object", "properties": {
                "category": {"type": "string", "enum": ["BUG", "OTHER"]},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["category", "priority"], "additionalProperties": false})
        );
        assert_eq!(
            TypeSpec::string().nullable().json_schema(),
            json!({"type": ["string", "null"]})
        );
        assert_eq!(
            <Vec<super::super::Message>>::type_spec(),
            TypeSpec::messages()
        );
        assert_eq!(<Option<u32>>::type_spec().zero(), Value::Null);
        assert_eq!(<Vec<String>>::type_spec().zero(), json!([]));
    }
}
