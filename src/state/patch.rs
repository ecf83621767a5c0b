//! Patches: what a node returns instead of mutating state.
//!
//! A patch is an ordered map from field name to a JSON value. The executor
//! checks every field against the node's declared `writes` and the state
//! schema, then applies it with the field's reducer. Patches are also what
//! checkpoints store, so they serialize as a plain JSON object.

use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Field writes produced by one node execution.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Patch {
    writes: Vec<(Arc<str>, Value)>,
}

impl Patch {
    /// An empty patch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a write, replacing an earlier write to the same field in this
    /// patch (a patch is a map).
    pub fn set(mut self, field: impl Into<Arc<str>>, value: impl Into<Value>) -> Self {
        self.insert(field, value);
        self
    }

    /// Adds a write in place; see [`Patch::set`].
    pub fn insert(&mut self, field: impl Into<Arc<str>>, value: impl Into<Value>) {
        let field = field.into();
        let value = value.into();
        match self.writes.iter_mut().find(|(f, _)| *f == field) {
            Some(slot) => slot.1 = value,
            None => self.writes.push((field, value)),
        }
    }

    /// Whether the patch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Number of fields written.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// The writes in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.writes.iter().map(|(f, v)| (&**f, v))
    }

    /// The value written to `field`, if any.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.writes
            .iter()
            .find(|(f, _)| &**f == field)
            .map(|(_, v)| v)
    }
}

impl Serialize for Patch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.writes.len()))?;
        for (field, value) in &self.writes {
            map.serialize_entry(&**field, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Patch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PatchVisitor;
        impl<'de> Visitor<'de> for PatchVisitor {
            type Value = Patch;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of field names to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Patch, A::Error> {
                let mut patch = Patch::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    patch.insert(k, v);
                }
                Ok(patch)
            }
        }
        deserializer.deserialize_map(PatchVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patch_is_an_ordered_map_that_round_trips() {
        let p = Patch::new().set("b", 1).set("a", "x").set("b", 2);
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"b":2,"a":"x"}"#);
        let back: Patch = serde_json::from_value(json!({"b": 2, "a": "x"})).unwrap();
        assert_eq!(back.get("a"), Some(&json!("x")));
        assert_eq!(back.len(), 2);
    }
}
