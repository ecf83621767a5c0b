//! Reducers: how one write combines with a field's current value.
//!
//! For Rust states, each reducer is a module with a `reducer` function (for
//! the schema) and a typed `apply` (for the generated
//! [`crate::state::State::apply`]), so the [`crate::state!`] macro can name
//! it by the identifier written in the state declaration. For declared
//! states, [`apply_value`] does the same on JSON values, checking every
//! write against the field's type. Either way the whole write is decoded and
//! checked before the field is touched: a write that fails leaves the field
//! unchanged.

use std::any::Any;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Reducer;
use super::types::{Mismatch, TypeSpec, describe_value};

/// Items merged by [`merge_by_id`] expose a stable id.
pub trait HasId {
    /// The id; items with equal ids are the same item.
    fn id(&self) -> &str;
}

fn decode<T: DeserializeOwned + 'static>(value: &Value) -> Result<T, serde_json::Error> {
    // JSON and text fields take a plain clone, much cheaper than going
    // through `Deserialize` for a `&Value`.
    let mut out: Option<T> = None;
    let any = &mut out as &mut dyn Any;
    if let Some(slot) = any.downcast_mut::<Option<Value>>() {
        *slot = Some(value.clone());
    } else if let (Some(slot), Value::String(s)) = (any.downcast_mut::<Option<String>>(), value) {
        *slot = Some(s.clone());
    }
    match out {
        Some(v) => Ok(v),
        None => T::deserialize(value),
    }
}

/// Decodes a write for a list field: a JSON array is a list of items, any
/// other value is a single item.
fn decode_items<T: DeserializeOwned + 'static>(value: &Value) -> Result<Vec<T>, serde_json::Error> {
    match value {
        Value::Array(items) => items.iter().map(decode).collect(),
        single => Ok(vec![decode(single)?]),
    }
}

/// The write replaces the value.
pub mod last {
    use super::*;

    /// The reducer, for the schema.
    pub fn reducer() -> crate::state::Reducer {
        crate::state::Reducer::Last
    }

    /// Replaces `slot` with the decoded value.
    ///
    /// # Errors
    /// The value does not decode as `T`.
    pub fn apply<T: DeserializeOwned + 'static>(
        slot: &mut T,
        value: &Value,
    ) -> Result<(), serde_json::Error> {
        *slot = decode(value)?;
        Ok(())
    }
}

/// The written items are appended.
pub mod append {
    use super::*;

    /// The reducer, for the schema.
    pub fn reducer() -> crate::state::Reducer {
        crate::state::Reducer::Append
    }

    /// Appends the decoded items (an array) or item (anything else).
    ///
    /// # Errors
    /// An item does not decode as `T`.
    pub fn apply<T: DeserializeOwned + 'static>(
        slot: &mut Vec<T>,
        value: &Value,
    ) -> Result<(), serde_json::Error> {
        let items = decode_items(value)?;
        slot.extend(items);
        Ok(())
    }
}

/// Items replace the item with the same id, or are appended.
pub mod merge_by_id {
    use super::*;

    /// The reducer, for the schema.
    pub fn reducer() -> crate::state::Reducer {
        crate::state::Reducer::merge_by_id()
    }

    /// Merges the decoded items into `slot` by id.
    ///
    /// # Errors
    /// An item does not decode as `T`.
    pub fn apply<T: DeserializeOwned + HasId + 'static>(
        slot: &mut Vec<T>,
        value: &Value,
    ) -> Result<(), serde_json::Error> {
        for item in decode_items::<T>(value)? {
            match slot
                .iter_mut()
                .find(|old| !item.id().is_empty() && old.id() == item.id())
            {
                Some(old) => *old = item,
                None => slot.push(item),
            }
        }
        Ok(())
    }
}

/// Applies one write to a declared field's JSON value with its reducer,
/// checking it against the field's type first.
///
/// # Errors
/// The write (or, for `append` and `merge_by_id`, one of its items) does
/// not have the field's type, or a custom reducer refused it; the value is
/// unchanged.
pub fn apply_value(
    reducer: &Reducer,
    ty: &TypeSpec,
    slot: &mut Value,
    write: &Value,
) -> Result<(), Mismatch> {
    match reducer {
        Reducer::Last => {
            ty.check(write)?;
            *slot = write.clone();
        }
        Reducer::Append | Reducer::MergeById { .. } => {
            let item_ty = ty.items().unwrap_or_else(TypeSpec::any);
            let items: Vec<&Value> = match write {
                Value::Array(items) => items.iter().collect(),
                single => vec![single],
            };
            for (i, item) in items.iter().enumerate() {
                item_ty.check(item).map_err(|mut m| {
                    if matches!(write, Value::Array(_)) {
                        m.path = format!("/{i}{}", m.path);
                    }
                    m
                })?;
            }
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            let Value::Array(list) = slot else {
                return Ok(());
            };
            match reducer {
                Reducer::MergeById { key } => {
                    for item in &items {
                        if item.get(&**key).is_none_or(Value::is_null) {
                            return Err(Mismatch {
                                path: format!("/{key}"),
                                expected: format!("an item with a `{key}` (the merge key)"),
                                got: describe_value(item),
                            });
                        }
                    }
                    for item in items {
                        let k = &item[&**key];
                        match list.iter_mut().find(|old| &old[&**key] == k) {
                            Some(old) => *old = item.clone(),
                            None => list.push(item.clone()),
                        }
                    }
                }
                _ => list.extend(items.into_iter().cloned()),
            }
        }
        Reducer::Custom { name, f } => {
            let new = f(slot, write).map_err(|why| Mismatch {
                path: String::new(),
                expected: format!("a value reducer `{name}` accepts ({why})"),
                got: describe_value(write),
            })?;
            ty.check(&new)?;
            *slot = new;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Message;
    use serde_json::json;

    #[test]
    fn last_replaces_and_keeps_old_value_on_bad_input() {
        let mut s = String::from("old");
        last::apply(&mut s, &json!("new")).unwrap();
        assert_eq!(s, "new");
        assert!(last::apply(&mut s, &json!(3)).is_err());
        assert_eq!(s, "new");
    }

    #[test]
    fn append_accepts_items_or_one_item_and_is_atomic() {
        let mut v: Vec<u32> = vec![1];
        append::apply(&mut v, &json!([2, 3])).unwrap();
        append::apply(&mut v, &json!(4)).unwrap();
        assert_eq!(v, [1, 2, 3, 4]);
        assert!(append::apply(&mut v, &json!([5, "x"])).is_err());
        assert_eq!(
            v,
            [1, 2, 3, 4],
            "a failed write must not leave half its items"
        );
    }

    #[test]
    fn merge_by_id_replaces_in_place_and_appends_new() {
        let mut v = vec![Message::user("a", "hi"), Message::assistant("b", "yo")];
        merge_by_id::apply(
            &mut v,
            &json!([
                {"id": "b", "role": "assistant", "content": "hello"},
                {"id": "c", "role": "user", "content": "more"}
            ]),
        )
        .unwrap();
        let ids: Vec<_> = v
            .iter()
            .map(|m| (m.id.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(ids, [("a", "hi"), ("b", "hello"), ("c", "more")]);
    }
}
