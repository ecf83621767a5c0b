//! The shape of a state, as graph files see it: fields with a type, a
//! reducer and a default.
//!
//! A schema comes from a graph file's `state: {fields: …}` or from a Rust
//! type declared with [`crate::state!`]; either way the validator checks
//! every name and type a graph file uses against it before a graph can run,
//! and every write is checked against it while one runs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::types::TypeSpec;

/// Index of a field within its [`StateSchema`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FieldId(pub u16);

/// A reducer an application registers (see [`Reducers::register`]): takes
/// the current value and the written one, returns the new value.
pub type ReduceFn = dyn Fn(&Value, &Value) -> Result<Value, String> + Send + Sync;

/// How concurrent and successive writes to a field combine.
#[derive(Clone)]
pub enum Reducer {
    /// The write replaces the value. Two tasks writing it in one superstep is
    /// an error, because the result would depend on completion order.
    Last,
    /// The written items are appended (in task order within a superstep).
    Append,
    /// Items carry a key (`id` unless declared otherwise); an item with a
    /// known key replaces it in place, others are appended.
    MergeById {
        /// The key property.
        key: Arc<str>,
    },
    /// A reducer registered by the embedding application.
    Custom {
        /// Its name in graph files.
        name: Arc<str>,
        /// The function.
        f: Arc<ReduceFn>,
    },
}

impl Reducer {
    /// `merge_by_id` on `id`.
    pub fn merge_by_id() -> Self {
        Reducer::MergeById { key: "id".into() }
    }

    /// The name used in graph files and diagnostics.
    pub fn name(&self) -> &str {
        match self {
            Reducer::Last => "last",
            Reducer::Append => "append",
            Reducer::MergeById { .. } => "merge_by_id",
            Reducer::Custom { name, .. } => name,
        }
    }

    /// Whether two writes in one superstep conflict (only `last` cares:
    /// the others combine writes in task order).
    pub fn is_last(&self) -> bool {
        matches!(self, Reducer::Last)
    }
}

impl PartialEq for Reducer {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Reducer::MergeById { key: a }, Reducer::MergeById { key: b }) => a == b,
            (Reducer::Custom { name: a, .. }, Reducer::Custom { name: b, .. }) => a == b,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

impl fmt::Debug for Reducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reducer::MergeById { key } if &**key != "id" => write!(f, "merge_by_id({key})"),
            other => f.write_str(other.name()),
        }
    }
}

impl Serialize for Reducer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Reducers graph files can name: the built-in ones and those registered
/// by the embedding application.
#[derive(Clone, Default)]
pub struct Reducers {
    custom: BTreeMap<String, Arc<ReduceFn>>,
}

impl fmt::Debug for Reducers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.custom.keys()).finish()
    }
}

/// Names of the built-in reducers.
pub const BUILTIN_REDUCERS: &[&str] = &["last", "append", "merge_by_id"];

impl Reducers {
    /// Registers (or replaces) a reducer under `name`. The function gets the
    /// field's current value and the written value and returns the new
    /// value, which is then checked against the field's type.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        f: impl Fn(&Value, &Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> &mut Self {
        self.custom.insert(name.into(), Arc::new(f));
        self
    }

    /// The reducer called `name` (`key` is the merge key of `merge_by_id`).
    pub fn get(&self, name: &str, key: Option<&str>) -> Option<Reducer> {
        match name {
            "last" => Some(Reducer::Last),
            "append" => Some(Reducer::Append),
            "merge_by_id" => Some(Reducer::MergeById {
                key: key.unwrap_or("id").into(),
            }),
            other => self.custom.get(other).map(|f| Reducer::Custom {
                name: other.into(),
                f: Arc::clone(f),
            }),
        }
    }

    /// Every name, for hints.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        BUILTIN_REDUCERS
            .iter()
            .copied()
            .chain(self.custom.keys().map(String::as_str))
    }
}

/// One field of a state.
#[derive(Clone, Debug, Serialize)]
pub struct FieldSpec {
    /// The field name graph files use.
    pub name: Arc<str>,
    /// Its type.
    #[serde(rename = "type", serialize_with = "declared")]
    pub ty: TypeSpec,
    /// How writes combine.
    pub reducer: Reducer,
    /// The value it starts with (the type's empty value when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// What it is for.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub doc: String,
}

fn declared<S: Serializer>(ty: &TypeSpec, s: S) -> Result<S::Ok, S::Error> {
    ty.to_declared().serialize(s)
}

impl FieldSpec {
    /// A field with the `last` reducer and no default.
    pub fn new(name: impl Into<Arc<str>>, ty: TypeSpec) -> Self {
        Self {
            name: name.into(),
            ty,
            reducer: Reducer::Last,
            default: None,
            doc: String::new(),
        }
    }

    /// The value the field starts with.
    pub fn initial(&self) -> Value {
        self.default.clone().unwrap_or_else(|| self.ty.zero())
    }
}

/// The description of a state.
#[derive(Clone, Debug, Serialize)]
pub struct StateSchema {
    /// The name graph files use in `state:` (the graph id for a state
    /// declared in its own file).
    pub name: Arc<str>,
    /// Fields in declaration order; a [`FieldId`] indexes this list.
    pub fields: Vec<FieldSpec>,
}

impl StateSchema {
    /// A schema.
    pub fn new(name: impl Into<Arc<str>>, fields: Vec<FieldSpec>) -> Self {
        Self {
            name: name.into(),
            fields,
        }
    }

    /// Looks a field up by name.
    pub fn field(&self, name: &str) -> Option<FieldId> {
        self.fields
            .iter()
            .position(|f| &*f.name == name)
            .map(|i| FieldId(i as u16))
    }

    /// The spec of a field.
    ///
    /// A `FieldId` only comes from this schema, so it is always in range.
    pub fn spec(&self, id: FieldId) -> &FieldSpec {
        &self.fields[usize::from(id.0)]
    }

    /// Names of all fields, for "did you mean" hints.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.fields.iter().map(|f| &*f.name)
    }

    /// The one field holding chat messages, if exactly one does.
    pub fn messages_field(&self) -> Option<FieldId> {
        let mut found = self
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.ty.is_messages());
        match (found.next(), found.next()) {
            (Some((i, _)), None) => Some(FieldId(i as u16)),
            _ => None,
        }
    }
}
