//! State: fields with a type and a reducer, patched by nodes.
//!
//! A state is either declared in the graph file (`state: {fields: …}`,
//! JSON-Schema types, a reducer per field; see [`DeclaredState`]) or a Rust
//! type declared with [`crate::state!`] and registered through the public
//! API, optionally extended with declared fields. Either way its
//! [`StateSchema`] is what graph files are checked against, and the executor
//! works through the object-safe [`DynState`]: nodes return [`Patch`]es, the
//! executor applies them with each field's reducer ([`apply_step`]), and every
//! write is checked against the field's type.

mod declared;
mod merge;
mod message;
mod patch;
pub mod reduce;
mod schema;
mod types;

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use declared::{DeclaredState, ExtendedState};
pub use merge::{TaskPatch, apply_step};
pub use message::{Message, MessageToolCall, Role};
pub use patch::Patch;
pub use schema::{BUILTIN_REDUCERS, FieldId, FieldSpec, ReduceFn, Reducer, Reducers, StateSchema};
pub use types::{FieldValue, Mismatch, TypeKind, TypeSpec, describe_value};

/// Errors from applying writes to state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A patch named a field the state does not have.
    #[error("node `{node}` wrote unknown field `{field}` (state `{state}` has no such field)")]
    UnknownField {
        /// The writing task.
        node: String,
        /// The field it named.
        field: String,
        /// The state.
        state: String,
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
    #[error("node `{node}` wrote field `{field}` with a value of the wrong type: {mismatch}")]
    Type {
        /// The writing task.
        node: String,
        /// The field.
        field: String,
        /// Where, what was expected and what came (boxed: errors stay
        /// small to move).
        mismatch: Box<Mismatch>,
    },
    /// An initial state or snapshot did not decode.
    #[error("state `{state}` could not be decoded: {message}")]
    Decode {
        /// The state.
        state: String,
        /// Why.
        message: String,
    },
}

/// A Rust state type. Implemented by [`crate::state!`]; see there.
pub trait State:
    Clone + Default + fmt::Debug + Send + Sync + Serialize + DeserializeOwned + 'static
{
    /// The schema graph files are checked against.
    fn static_schema() -> &'static Arc<StateSchema>;

    /// Applies one write to `field` with its reducer.
    ///
    /// # Errors
    /// The value does not decode as the field's type; the field is unchanged.
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), serde_json::Error>;

    /// The field's value as JSON.
    fn get(&self, field: FieldId) -> Value;

    /// The field's value for prompt templates and expressions.
    fn template_value(&self, field: FieldId) -> minijinja::Value;

    /// The field itself, for typed reads without a JSON round trip
    /// (see [`DynState::text`] and [`DynState::messages`]).
    fn field_ref(&self, field: FieldId) -> &dyn Any;
}

/// The object-safe face of a state, used by the executor and nodes.
pub trait DynState: Send + Sync + fmt::Debug {
    /// The schema.
    fn schema(&self) -> &StateSchema;
    /// Applies one write to `field` with its reducer.
    ///
    /// # Errors
    /// The value does not have the field's type; the field is unchanged.
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), Mismatch>;
    /// The field's value as JSON.
    fn get(&self, field: FieldId) -> Value;
    /// The field's value for prompt templates and expressions.
    fn template_value(&self, field: FieldId) -> minijinja::Value;
    /// A text field's value without copying; `None` for other types.
    fn text(&self, field: FieldId) -> Option<&str>;
    /// A chat-messages field without copying; `None` for other types.
    fn messages(&self, field: FieldId) -> Option<&[Message]>;
    /// The whole state as JSON (snapshots, run output).
    fn to_json(&self) -> Value;
    /// A deep copy.
    fn clone_box(&self) -> Box<dyn DynState>;
}

impl<S: State> DynState for S {
    fn schema(&self) -> &StateSchema {
        S::static_schema()
    }
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), Mismatch> {
        State::apply(self, field, value).map_err(|e| {
            let spec = S::static_schema().spec(field);
            // The declared type names what was expected; serde says where.
            match spec.ty.check(value) {
                Err(m) => m,
                Ok(()) => Mismatch {
                    path: String::new(),
                    expected: format!("{} ({e})", spec.ty.describe()),
                    got: describe_value(value),
                },
            }
        })
    }
    fn get(&self, field: FieldId) -> Value {
        State::get(self, field)
    }
    fn template_value(&self, field: FieldId) -> minijinja::Value {
        State::template_value(self, field)
    }
    fn text(&self, field: FieldId) -> Option<&str> {
        let any = self.field_ref(field);
        match any.downcast_ref::<String>() {
            Some(s) => Some(s),
            None => any
                .downcast_ref::<Option<String>>()
                .and_then(Option::as_deref),
        }
    }
    fn messages(&self, field: FieldId) -> Option<&[Message]> {
        self.field_ref(field)
            .downcast_ref::<Vec<Message>>()
            .map(Vec::as_slice)
    }
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn clone_box(&self) -> Box<dyn DynState> {
        Box::new(self.clone())
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

type MakeFn = dyn Fn(&Value) -> Result<Box<dyn DynState>, StateError> + Send + Sync;

/// A state type a graph runs on: its schema and how to build one from JSON.
#[derive(Clone)]
pub struct StateType {
    /// The schema.
    pub schema: Arc<StateSchema>,
    make: Arc<MakeFn>,
}

impl fmt::Debug for StateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateType")
            .field("name", &self.schema.name)
            .finish()
    }
}

impl StateType {
    /// The entry for the Rust state `S`.
    pub fn of<S: State>() -> Self {
        Self {
            schema: Arc::clone(S::static_schema()),
            make: Arc::new(|v: &Value| {
                let s = S::deserialize(v).map_err(|e| StateError::Decode {
                    state: S::static_schema().name.to_string(),
                    message: e.to_string(),
                })?;
                Ok(Box::new(s) as Box<dyn DynState>)
            }),
        }
    }

    /// A state declared by its schema (a graph file's `state: {fields}`).
    pub fn declared(schema: StateSchema) -> Self {
        let schema = Arc::new(schema);
        let for_make = Arc::clone(&schema);
        Self {
            schema,
            make: Arc::new(move |v: &Value| {
                DeclaredState::from_json(Arc::clone(&for_make), v)
                    .map(|s| Box::new(s) as Box<dyn DynState>)
            }),
        }
    }

    /// `base` with more fields declared after its own (`state: {type:
    /// chat, fields: …}`); the combined state is called `name`.
    pub fn extended(base: &StateType, name: &str, extra: Vec<crate::state::FieldSpec>) -> Self {
        let mut fields = base.schema.fields.clone();
        fields.extend(extra.iter().cloned());
        let schema = Arc::new(StateSchema::new(name, fields));
        let extra = Arc::new(StateSchema::new(name, extra));
        let (base, for_make) = (base.clone(), Arc::clone(&schema));
        Self {
            schema,
            make: Arc::new(move |v: &Value| {
                let b = base.from_json(v)?;
                let e = DeclaredState::from_json(Arc::clone(&extra), v)?;
                Ok(Box::new(ExtendedState::new(Arc::clone(&for_make), b, e)) as Box<dyn DynState>)
            }),
        }
    }

    /// Builds a state from JSON; missing fields take their initial values.
    ///
    /// # Errors
    /// The JSON does not decode as this state.
    pub fn from_json(&self, value: &Value) -> Result<Box<dyn DynState>, StateError> {
        (self.make)(value)
    }

    /// The state with every field at its initial value.
    pub fn default_state(&self) -> Box<dyn DynState> {
        match (self.make)(&Value::Object(Default::default())) {
            Ok(s) => s,
            // A hand-written Rust `State` that refuses `{}`: the same fields,
            // declared, at their initial values.
            Err(_) => Box::new(DeclaredState::new(Arc::clone(&self.schema))),
        }
    }
}

/// The Rust state types graph files can name, by name (registered by the
/// embedding application; the engine ships none: graph files declare
/// their states).
#[derive(Clone, Debug, Default)]
pub struct StateTypes {
    types: BTreeMap<String, StateType>,
}

impl StateTypes {
    /// Adds (or replaces) a Rust state type.
    pub fn register<S: State>(&mut self) -> &mut Self {
        self.types
            .insert(S::static_schema().name.to_string(), StateType::of::<S>());
        self
    }

    /// Looks a type up by the name graph files use.
    pub fn get(&self, name: &str) -> Option<StateType> {
        self.types.get(name).cloned()
    }

    /// Registered names, for hints.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.types.keys().map(String::as_str)
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
/// assert_eq!(Counter::static_schema().fields.len(), 2);
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
            fn static_schema() -> &'static ::std::sync::Arc<$crate::state::StateSchema> {
                static SCHEMA: ::std::sync::LazyLock<::std::sync::Arc<$crate::state::StateSchema>> =
                    ::std::sync::LazyLock::new(|| {
                        ::std::sync::Arc::new($crate::state::StateSchema::new($tyname, vec![$(
                            $crate::state::FieldSpec {
                                name: stringify!($field).into(),
                                ty: <$fty as $crate::state::FieldValue>::type_spec(),
                                reducer: $crate::state::reduce::$reducer::reducer(),
                                default: None,
                                doc: concat!($($doc),*).trim().to_owned(),
                            },
                        )*]))
                    });
                &SCHEMA
            }

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
