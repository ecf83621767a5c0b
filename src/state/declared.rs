//! States declared in a graph file (`state: {fields: …}`), and Rust states
//! extended with declared fields (`state: {type: chat, fields: …}`).
//!
//! A declared state keeps one JSON value per field, except chat-message
//! fields, which keep typed [`Message`]s so model nodes read their history
//! without decoding it. Every write goes through the field's reducer and is
//! checked against the field's declared type first ([`apply_value`]): a
//! wrong-typed write fails the node with the field, what was expected and
//! what came, and leaves the field as it was.

use std::sync::Arc;

use serde::Deserialize as _;
use serde_json::{Map, Value};

use super::reduce::{self, apply_value};
use super::types::{Mismatch, describe_value};
use super::{DynState, FieldId, Message, Reducer, StateError, StateSchema};

/// The value of one declared field.
#[derive(Clone, Debug)]
enum Slot {
    Json(Value),
    Messages(Vec<Message>),
}

/// A state whose fields a graph file declares.
#[derive(Clone, Debug)]
pub struct DeclaredState {
    schema: Arc<StateSchema>,
    slots: Vec<Slot>,
}

impl DeclaredState {
    /// A state with every field at its initial value.
    pub fn new(schema: Arc<StateSchema>) -> Self {
        let slots = schema
            .fields
            .iter()
            .map(|f| {
                if f.ty.is_messages() {
                    Slot::Messages(serde_json::from_value(f.initial()).unwrap_or_default())
                } else {
                    Slot::Json(f.initial())
                }
            })
            .collect();
        Self { schema, slots }
    }

    /// A state from a JSON object: the fields it names (checked against
    /// their types), the initial values for the rest. Keys the schema does
    /// not know are ignored, so a snapshot written before a field was
    /// removed still loads.
    ///
    /// # Errors
    /// The value is not an object, or a field's value has the wrong type.
    pub fn from_json(schema: Arc<StateSchema>, value: &Value) -> Result<Self, StateError> {
        let mut state = Self::new(schema);
        let map = match value {
            Value::Object(map) => map,
            Value::Null => return Ok(state),
            other => {
                return Err(StateError::Decode {
                    state: state.schema.name.to_string(),
                    message: format!("expected an object, got {}", describe_value(other)),
                });
            }
        };
        for (i, spec) in state.schema.fields.iter().enumerate() {
            let Some(v) = map.get(&*spec.name) else {
                continue;
            };
            let slot = if spec.ty.is_messages() {
                // From the borrowed value: `from_value` would need a deep
                // copy of it first (a fifth of a chat run's instructions).
                Vec::<Message>::deserialize(v)
                    .map(Slot::Messages)
                    .map_err(|e| e.to_string())
            } else if *v == spec.ty.zero() {
                // "Unset" (see `TypeSpec::zero`): a snapshot of a state whose
                // enum or bounded field was never written.
                Ok(Slot::Json(v.clone()))
            } else {
                spec.ty
                    .check(v)
                    .map(|()| Slot::Json(v.clone()))
                    .map_err(|m| m.to_string())
            };
            state.slots[i] = slot.map_err(|why| StateError::Decode {
                state: state.schema.name.to_string(),
                message: format!("field `{}`: {why}", spec.name),
            })?;
        }
        Ok(state)
    }
}

impl DynState for DeclaredState {
    fn schema(&self) -> &StateSchema {
        &self.schema
    }

    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), Mismatch> {
        let spec = self.schema.spec(field);
        match &mut self.slots[usize::from(field.0)] {
            Slot::Json(slot) => apply_value(&spec.reducer, &spec.ty, slot, value),
            Slot::Messages(list) => {
                let typed = match &spec.reducer {
                    Reducer::Last => reduce::last::apply(list, value),
                    Reducer::Append => reduce::append::apply(list, value),
                    Reducer::MergeById { .. } => reduce::merge_by_id::apply(list, value),
                    Reducer::Custom { .. } => {
                        let mut current = serde_json::to_value(&*list).unwrap_or_default();
                        apply_value(&spec.reducer, &spec.ty, &mut current, value)?;
                        serde_json::from_value(current).map(|new| *list = new)
                    }
                };
                typed.map_err(|_| Mismatch {
                    path: String::new(),
                    expected: "chat messages ({id, role, content})".into(),
                    got: describe_value(value),
                })
            }
        }
    }

    fn get(&self, field: FieldId) -> Value {
        match &self.slots[usize::from(field.0)] {
            Slot::Json(v) => v.clone(),
            Slot::Messages(m) => serde_json::to_value(m).unwrap_or_default(),
        }
    }

    fn template_value(&self, field: FieldId) -> minijinja::Value {
        match &self.slots[usize::from(field.0)] {
            Slot::Json(Value::String(s)) => minijinja::Value::from(s.as_str()),
            Slot::Json(v) => minijinja::Value::from(minijinja::value::Serde(v)),
            Slot::Messages(m) => minijinja::Value::from(minijinja::value::Serde(m)),
        }
    }

    fn text(&self, field: FieldId) -> Option<&str> {
        match self.slots.get(usize::from(field.0))? {
            Slot::Json(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    fn messages(&self, field: FieldId) -> Option<&[Message]> {
        match self.slots.get(usize::from(field.0))? {
            Slot::Messages(m) => Some(m),
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .schema
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.to_string(), self.get(FieldId(i as u16))))
            .collect();
        Value::Object(map)
    }

    fn clone_box(&self) -> Box<dyn DynState> {
        Box::new(self.clone())
    }
}

/// A Rust state with more fields declared in the graph file: the Rust
/// fields keep their ids, the declared ones follow.
#[derive(Clone, Debug)]
pub struct ExtendedState {
    schema: Arc<StateSchema>,
    base: Box<dyn DynState>,
    extra: DeclaredState,
}

impl ExtendedState {
    /// `base` plus `extra` (whose schema holds only the declared fields),
    /// described together by `schema`.
    pub(super) fn new(
        schema: Arc<StateSchema>,
        base: Box<dyn DynState>,
        extra: DeclaredState,
    ) -> Self {
        Self {
            schema,
            base,
            extra,
        }
    }

    fn split(&self, field: FieldId) -> Result<FieldId, FieldId> {
        let n = self.base.schema().fields.len() as u16;
        if field.0 < n {
            Ok(field)
        } else {
            Err(FieldId(field.0 - n))
        }
    }
}

impl DynState for ExtendedState {
    fn schema(&self) -> &StateSchema {
        &self.schema
    }
    fn apply(&mut self, field: FieldId, value: &Value) -> Result<(), Mismatch> {
        match self.split(field) {
            Ok(f) => self.base.apply(f, value),
            Err(f) => self.extra.apply(f, value),
        }
    }
    fn get(&self, field: FieldId) -> Value {
        match self.split(field) {
            Ok(f) => self.base.get(f),
            Err(f) => self.extra.get(f),
        }
    }
    fn template_value(&self, field: FieldId) -> minijinja::Value {
        match self.split(field) {
            Ok(f) => self.base.template_value(f),
            Err(f) => self.extra.template_value(f),
        }
    }
    fn text(&self, field: FieldId) -> Option<&str> {
        match self.split(field) {
            Ok(f) => self.base.text(f),
            Err(f) => self.extra.text(f),
        }
    }
    fn messages(&self, field: FieldId) -> Option<&[Message]> {
        match self.split(field) {
            Ok(f) => self.base.messages(f),
            Err(f) => self.extra.messages(f),
        }
    }
    fn to_json(&self) -> Value {
        let mut out = self.base.to_json();
        if let (Value::Object(out), Value::Object(extra)) = (&mut out, self.extra.to_json()) {
            out.extend(extra);
        }
        out
    }
    fn clone_box(&self) -> Box<dyn DynState> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{FieldSpec, TypeKind, TypeSpec};
    use serde_json::json;

    fn triage() -> Arc<StateSchema> {
        let mut notes = FieldSpec::new("notes", TypeSpec::array(TypeSpec::string()));
        notes.reducer = Reducer::Append;
        let mut messages = FieldSpec::new("messages", TypeSpec::messages());
        messages.reducer = Reducer::merge_by_id();
        let mut priority = FieldSpec::new(
            "priority",
            TypeSpec::of(TypeKind::Integer {
                minimum: Some(1.0),
                maximum: Some(5.0),
            }),
        );
        priority.default = Some(json!(3));
        Arc::new(StateSchema::new(
            "triage",
            vec![
                messages,
                FieldSpec::new("ticket", TypeSpec::string()),
                FieldSpec::new(
                    "category",
                    TypeSpec::of(TypeKind::String {
                        values: Some(vec!["BILLING".into(), "BUG".into()]),
                        max_length: None,
                    }),
                ),
                priority,
                notes,
            ],
        ))
    }

    #[test]
    fn declared_fields_start_at_their_defaults_and_check_every_write() {
        let schema = triage();
        let mut s = DeclaredState::from_json(
            Arc::clone(&schema),
            &json!({"ticket": "refund please", "messages": [{"id": "m1", "role": "user", "content": "hi"}], "extra": 1}),
        )
        .unwrap();
        let f = |n: &str| schema.field(n).unwrap();
        assert_eq!(s.get(f("priority")), json!(3));
        assert_eq!(s.get(f("category")), json!(""));
        // A snapshot of it (the enum unset) loads again.
        let again = DeclaredState::from_json(Arc::clone(&schema), &s.to_json()).unwrap();
        assert_eq!(again.to_json(), s.to_json());
        assert_eq!(s.text(f("ticket")), Some("refund please"));
        assert_eq!(s.messages(f("messages")).unwrap()[0].content, "hi");
        s.apply(f("category"), &json!("BUG")).unwrap();
        let e = s.apply(f("category"), &json!("SPAM")).unwrap_err();
        assert_eq!(e.expected, "one of BILLING, BUG");
        assert_eq!(
            s.get(f("category")),
            json!("BUG"),
            "a refused write changes nothing"
        );
        assert!(s.apply(f("priority"), &json!(9)).is_err());
        s.apply(f("notes"), &json!("a")).unwrap();
        s.apply(f("notes"), &json!(["b", "c"])).unwrap();
        assert!(s.apply(f("notes"), &json!(["d", 4])).is_err());
        assert_eq!(s.get(f("notes")), json!(["a", "b", "c"]));
        s.apply(
            f("messages"),
            &json!({"id": "m1", "role": "user", "content": "hello"}),
        )
        .unwrap();
        assert_eq!(s.messages(f("messages")).unwrap().len(), 1);
        assert!(
            DeclaredState::from_json(Arc::clone(&schema), &json!({"priority": "high"})).is_err()
        );
    }

    #[test]
    fn merge_keys_and_custom_reducers_apply_to_declared_fields() {
        let mut reducers = crate::state::Reducers::default();
        reducers.register("max", |cur, new| {
            Ok(json!(
                cur.as_f64()
                    .unwrap_or(0.0)
                    .max(new.as_f64().ok_or("not a number")?)
            ))
        });
        let mut best = FieldSpec::new("best", TypeSpec::number());
        best.reducer = reducers.get("max", None).unwrap();
        let mut entities = FieldSpec::new("entities", TypeSpec::array(TypeSpec::object()));
        entities.reducer = reducers.get("merge_by_id", Some("kind")).unwrap();
        let schema = Arc::new(StateSchema::new("s", vec![best, entities]));
        let mut s = DeclaredState::new(schema);
        s.apply(FieldId(0), &json!(2.5)).unwrap();
        s.apply(FieldId(0), &json!(1.0)).unwrap();
        assert_eq!(s.get(FieldId(0)), json!(2.5));
        assert!(s.apply(FieldId(0), &json!("x")).is_err());
        s.apply(
            FieldId(1),
            &json!([{"kind": "customer", "id": "C-1"}, {"kind": "invoice", "id": "I-1"}]),
        )
        .unwrap();
        s.apply(FieldId(1), &json!({"kind": "customer", "id": "C-2"}))
            .unwrap();
        assert_eq!(
            s.get(FieldId(1)),
            json!([{"kind": "customer", "id": "C-2"}, {"kind": "invoice", "id": "I-1"}])
        );
        let e = s.apply(FieldId(1), &json!({"id": "C-3"})).unwrap_err();
        assert!(e.expected.contains("`kind`"), "{e}");
    }
}
