//! YAML values with the location of every part, for node settings.
//!
//! A node's common keys (`id`, `kind`, `retry`, …) are typed in the spec;
//! everything else belongs to its kind and is kept as an [`SpValue`] tree
//! until the kind reads it, so a kind is one file that names its own
//! settings and every diagnostic about them still points at the exact place.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::loc::Sp;

/// One entry of a mapping: the key and the value, each with its place.
pub(crate) type SpEntry = (Sp<String>, Sp<SpValue>);

/// A YAML value whose parts know where they were written.
#[derive(Clone, Debug, PartialEq)]
pub enum SpValue {
    /// `null` or `~`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    Seq(Vec<Sp<SpValue>>),
    /// A mapping, in file order.
    Map(Vec<SpEntry>),
}

impl SpValue {
    /// The value as JSON (locations dropped).
    pub fn to_json(&self) -> Value {
        match self {
            SpValue::Null => Value::Null,
            SpValue::Bool(b) => Value::Bool(*b),
            SpValue::Int(i) => Value::from(*i),
            SpValue::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            SpValue::Str(s) => Value::String(s.clone()),
            SpValue::Seq(items) => Value::Array(items.iter().map(|i| i.value.to_json()).collect()),
            SpValue::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.value.clone(), v.value.to_json()))
                    .collect(),
            ),
        }
    }

    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            SpValue::Null => "null",
            SpValue::Bool(_) => "a boolean",
            SpValue::Int(_) | SpValue::Float(_) => "a number",
            SpValue::Str(_) => "a string",
            SpValue::Seq(_) => "a list",
            SpValue::Map(_) => "a mapping",
        }
    }

    /// The text of a scalar written as a name: strings, and booleans or
    /// numbers written bare (`true: next` in a route on a boolean field).
    pub fn as_name(&self) -> Option<String> {
        match self {
            SpValue::Str(s) => Some(s.clone()),
            SpValue::Bool(b) => Some(b.to_string()),
            SpValue::Int(i) => Some(i.to_string()),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for SpValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SpValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a YAML value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<SpValue, E> {
                Ok(SpValue::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<SpValue, E> {
                Ok(SpValue::Null)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<SpValue, E> {
                Ok(SpValue::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SpValue, E> {
                Ok(SpValue::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SpValue, E> {
                Ok(i64::try_from(v).map_or(SpValue::Float(v as f64), SpValue::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<SpValue, E> {
                Ok(SpValue::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SpValue, E> {
                Ok(SpValue::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<SpValue, E> {
                Ok(SpValue::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SpValue, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<Sp<SpValue>>()? {
                    out.push(item);
                }
                Ok(SpValue::Seq(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SpValue, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<Sp<Key>>()? {
                    let v: Sp<SpValue> = map.next_value()?;
                    out.push((Sp::new(k.value.0, k.loc), v));
                }
                Ok(SpValue::Map(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A mapping key: a string, or a boolean or number written bare.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match SpValue::deserialize(d)? {
            v @ (SpValue::Str(_) | SpValue::Bool(_) | SpValue::Int(_)) => {
                Ok(Key(v.as_name().unwrap_or_default()))
            }
            other => Err(de::Error::custom(format!(
                "a mapping key must be a name, not {}",
                other.kind()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::loc::Loc;

    #[test]
    fn every_part_keeps_its_place() {
        let v: Sp<SpValue> =
            serde_saphyr::from_str("a: 1\nb:\n  - x\n  - {c: true, 3: nope}\n").unwrap();
        let SpValue::Map(entries) = &v.value else {
            panic!("{v:?}")
        };
        assert_eq!(entries[0].0.value, "a");
        assert_eq!(entries[1].0.loc, Loc::new(2, 1));
        let SpValue::Seq(items) = &entries[1].1.value else {
            panic!()
        };
        assert_eq!(items[0].loc, Loc::new(3, 5));
        assert_eq!(
            v.value.to_json(),
            serde_json::json!({"a": 1, "b": ["x", {"c": true, "3": "nope"}]})
        );
    }
}
