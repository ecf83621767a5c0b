//! Typed state: a Rust type with per-field reducers, patched by nodes.
//!
//! A state type is declared with [`crate::state!`], which generates the
//! struct, its static [`StateSchema`] (what graph files are checked against)
//! and the field dispatch the executor uses to apply [`Patch`]es. The runtime
//! itself works through the object-safe [`DynState`], so one executor serves
//! every state type a graph file can name.

mod chat;
mod entity;
mod merge;
mod message;
mod patch;
pub mod reduce;
mod research;
mod schema;

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use chat::ChatState;
pub use entity::Entity;
pub use merge::{TaskPatch, apply_step};
pub use message::{Message, Role};
pub use patch::Patch;
pub use research::{Citation, Fact, Passage, ResearchState, Source};
pub use schema::{FieldId, FieldSpec, FieldType, FieldValue, Reducer, StateSchema};

/// Errors from applying writes to state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A patch named a field the state type does not have.
    #[error("node `{node}` wrote unknown field `{field}` (state `{state}` has no such field)")]
    UnknownField {
        /// The writing task.
        node: String,
        /// The field it named.
        field: String,
        /// The state type.
        state: &'static str,
    },
    /// A patch wrote a field its node does not declare in `writes`.
    #[error("node `{node}` wrote field `{field}`, which is not in its `writes` list")]
    Undeclared {
        /// The writing task.
        node: String,
        /// The field.
        field: String,
    },
    /// Two tasks of one superstep wrote the same last-value field.
    #[error(
        "nodes `{first}` and `{second}` both wrote last-value field `{field}` in the same step; \
         give the field an append reducer or route the branches so only one writes it"
    )]
    Conflict {
        /// The field.
        field: String,
        /// The task that wrote first in task order.
        first: String,
        /// The other task.
        second: String,
    },
    /// A written value does not have the field's type.
    #[error("node `{node}` wrote field `{field}` with a value of the wrong type: {source}")]
    Type {
        /// The writing task.
        node: String,
        /// The field.
        field: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// An initial state or snapshot did not decode.
    #[error("state `{state}` could not be decoded: {source}")]
    Decode {
        /// The state type.
        state: &'static str,
        /// The decoding error.
        source: serde_json::Error,
    },
}

/// A state type. Implemented by [`crate::state!`]; see there.
pub trait State:
    Clone + Default + fmt::Debug + Send + Sync + Serialize + DeserializeOwned + 'static
{
    /// The static schema graph files are checked against.
    const SCHEMA: &'static StateSchema;

    /// Applies one write to `field` with its reducer.
    ///
    /// # Errors
    /// The value does not decode as the field's type; the field is unchanged.
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), serde_json::Error>;

    /// The field's value as JSON.
    fn get(&self, field: FieldId) -> Value;

    /// The field's value for prompt templates.
    fn template_value(&self, field: FieldId) -> minijinja::Value;

    /// The field itself, for typed reads without a JSON round trip
    /// (see `text` and `messages` on `dyn DynState`).
    fn field_ref(&self, field: FieldId) -> &dyn Any;
}

/// The object-safe face of a [`State`], used by the executor.
pub trait DynState: Send + Sync + fmt::Debug {
    /// The schema of the concrete type.
    fn schema(&self) -> &'static StateSchema;
    /// See [`State::apply`].
    ///
    /// # Errors
    /// See [`State::apply`].
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), serde_json::Error>;
    /// See [`State::get`].
    fn get(&self, field: FieldId) -> Value;
    /// See [`State::template_value`].
    fn template_value(&self, field: FieldId) -> minijinja::Value;
    /// See [`State::field_ref`].
    fn field_ref(&self, field: FieldId) -> &dyn Any;
    /// The whole state as JSON (snapshots, run output).
    fn to_json(&self) -> Value;
    /// A deep copy.
    fn clone_box(&self) -> Box<dyn DynState>;
}

impl<S: State> DynState for S {
    fn schema(&self) -> &'static StateSchema {
        S::SCHEMA
    }
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), serde_json::Error> {
        State::apply(self, field, value)
    }
    fn get(&self, field: FieldId) -> Value {
        State::get(self, field)
    }
    fn template_value(&self, field: FieldId) -> minijinja::Value {
        State::template_value(self, field)
    }
    fn field_ref(&self, field: FieldId) -> &dyn Any {
        State::field_ref(self, field)
    }
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn clone_box(&self) -> Box<dyn DynState> {
        Box::new(self.clone())
    }
}

impl dyn DynState + '_ {
    /// A text field's value without copying; `None` for other types.
    pub fn text(&self, field: FieldId) -> Option<&str> {
        let any = self.field_ref(field);
        match any.downcast_ref::<String>() {
            Some(s) => Some(s),
            None => any
                .downcast_ref::<Option<String>>()
                .and_then(Option::as_deref),
        }
    }

    /// A list-of-messages field without copying; `None` for other types.
    pub fn messages(&self, field: FieldId) -> Option<&[Message]> {
        self.field_ref(field)
            .downcast_ref::<Vec<Message>>()
            .map(Vec::as_slice)
    }
}

impl Clone for Box<dyn DynState> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// The value a conditional edge routes on: strings as themselves, booleans
/// and integers as their JSON text, `null` as no value.
pub fn route_key(state: &dyn DynState, field: FieldId) -> Option<String> {
    if let Some(s) = state.text(field) {
        return Some(s.to_owned());
    }
    match state.get(field) {
        Value::String(s) => Some(s),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A field's value for prompt templates. Text converts directly; other
/// types go through serde.
#[doc(hidden)]
pub fn to_template<T: Serialize + 'static>(value: &T) -> minijinja::Value {
    match (value as &dyn Any).downcast_ref::<String>() {
        Some(s) => minijinja::Value::from(s.as_str()),
        None => minijinja::Value::from(minijinja::value::Serde(value)),
    }
}

/// A registered state type: its schema and how to build one from JSON.
#[derive(Clone, Copy)]
pub struct StateType {
    /// The schema.
    pub schema: &'static StateSchema,
    from_json: fn(&Value) -> Result<Box<dyn DynState>, StateError>,
}

impl fmt::Debug for StateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateType")
            .field("name", &self.schema.name)
            .finish()
    }
}

impl StateType {
    /// The entry for `S`.
    pub fn of<S: State>() -> Self {
        fn from_json<S: State>(v: &Value) -> Result<Box<dyn DynState>, StateError> {
            let s = S::deserialize(v).map_err(|source| StateError::Decode {
                state: S::SCHEMA.name,
                source,
            })?;
            Ok(Box::new(s))
        }
        Self {
            schema: S::SCHEMA,
            from_json: from_json::<S>,
        }
    }

    /// Builds a state from JSON; missing fields take their defaults.
    ///
    /// # Errors
    /// The JSON does not decode as this state type.
    pub fn from_json(&self, value: &Value) -> Result<Box<dyn DynState>, StateError> {
        (self.from_json)(value)
    }

    /// The default (empty) state.
    pub fn default_state(&self) -> Box<dyn DynState> {
        // An empty object always decodes: every generated state is `#[serde(default)]`.
        match (self.from_json)(&Value::Object(Default::default())) {
            Ok(s) => s,
            Err(_) => unreachable_default(self.schema.name),
        }
    }
}

#[cold]
fn unreachable_default(name: &str) -> Box<dyn DynState> {
    // `state!` types are `#[serde(default)]`; a hand-written `State` that
    // rejects `{}` gets the chat state rather than a panic.
    tracing::error!(
        state = name,
        "state type does not decode from {{}}; using an empty chat state"
    );
    Box::new(ChatState::default())
}

/// The state types graph files can name, by name.
#[derive(Clone, Debug)]
pub struct StateTypes {
    types: BTreeMap<&'static str, StateType>,
}

impl Default for StateTypes {
    /// The built-in types: `chat` and `research`.
    fn default() -> Self {
        let mut t = Self {
            types: BTreeMap::new(),
        };
        t.register::<ChatState>();
        t.register::<ResearchState>();
        t
    }
}

impl StateTypes {
    /// Adds (or replaces) a state type.
    pub fn register<S: State>(&mut self) -> &mut Self {
        self.types.insert(S::SCHEMA.name, StateType::of::<S>());
        self
    }

    /// Looks a type up by the name graph files use.
    pub fn get(&self, name: &str) -> Option<StateType> {
        self.types.get(name).copied()
    }

    /// Registered names, for hints.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.types.keys().copied()
    }
}

/// Declares a state type: a struct whose fields each name a reducer.
///
/// ```
/// stategraph::state! {
///     /// A tiny state.
///     pub struct Counter as "counter" {
///         /// Items seen so far.
///         items: Vec<String> => append,
///         /// The latest verdict.
///         verdict: String => last,
///     }
/// }
/// use stategraph::state::State;
/// assert_eq!(Counter::SCHEMA.fields.len(), 2);
/// ```
///
/// Reducers: `last` (replace), `append` (extend a list), `merge_by_id`
/// (a list of items implementing [`reduce::HasId`]).
#[macro_export]
macro_rules! state {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident as $tyname:literal {
            $( $(#[doc = $doc:literal])* $field:ident : $fty:ty => $reducer:ident ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(default)]
        $vis struct $name {
            $( $(#[doc = $doc])* pub $field: $fty, )*
        }

        impl $crate::state::State for $name {
            const SCHEMA: &'static $crate::state::StateSchema = &$crate::state::StateSchema {
                    name: $tyname,
                    fields: &[$(
                        $crate::state::FieldSpec {
                            name: stringify!($field),
                            ty: <$fty as $crate::state::FieldValue>::TYPE,
                            nullable: <$fty as $crate::state::FieldValue>::NULLABLE,
                            reducer: $crate::state::reduce::$reducer::KIND,
                            doc: concat!($($doc),*),
                        },
                    )*],
                };

            #[allow(unused_assignments)]
            fn apply(
                &mut self,
                field: $crate::state::FieldId,
                value: &$crate::__private::serde_json::Value,
            ) -> ::std::result::Result<(), $crate::__private::serde_json::Error> {
                let mut i = 0u16;
                $(
                    if field.0 == i {
                        return $crate::state::reduce::$reducer::apply(&mut self.$field, value);
                    }
                    i += 1;
                )*
                Ok(())
            }

            #[allow(unused_assignments)]
            fn get(&self, field: $crate::state::FieldId) -> $crate::__private::serde_json::Value {
                let mut i = 0u16;
                $(
                    if field.0 == i {
                        return $crate::__private::serde_json::to_value(&self.$field).unwrap_or($crate::__private::serde_json::Value::Null);
                    }
                    i += 1;
                )*
                $crate::__private::serde_json::Value::Null
            }

            #[allow(unused_assignments)]
            fn field_ref(&self, field: $crate::state::FieldId) -> &dyn ::std::any::Any {
                let mut i = 0u16;
                $(
                    if field.0 == i {
                        return &self.$field;
                    }
                    i += 1;
                )*
                &()
            }

            #[allow(unused_assignments)]
            fn template_value(&self, field: $crate::state::FieldId) -> $crate::__private::minijinja::Value {
                let mut i = 0u16;
                $(
                    if field.0 == i {
                        return $crate::state::to_template(&self.$field);
                    }
                    i += 1;
                )*
                $crate::__private::minijinja::Value::UNDEFINED
            }
        }
    };
}
