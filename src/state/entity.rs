//! Entities a conversation is about (the customer, the order), remembered
//! in state so a later message can say "their invoices".
//!
//! Agents extract them from tool results (the `entities` setting, see
//! `nodes/entities.rs`); a graph carries them from one chat turn to the
//! next (`carry:`). The merge key is the kind, so a list of entities with
//! the `merge_by_id` reducer holds one *active* entity per kind: the one
//! mentioned last.

use serde::{Deserialize, Serialize};

use super::reduce::HasId;

/// One active entity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    /// What it is (`customer`), as the graph file names it; the merge key.
    pub kind: String,
    /// Its id in the system the tools talk to.
    pub id: String,
    /// A name to show and to resolve references by (may be empty).
    #[serde(default)]
    pub name: String,
    /// The tool whose result named it.
    #[serde(default)]
    pub source: String,
}

impl HasId for Entity {
    /// The kind: a newer entity of the same kind replaces the older one.
    #[allow(clippy::misnamed_getters)] // the merge key, not the entity's own id
    fn id(&self) -> &str {
        &self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::reduce::merge_by_id;
    use serde_json::json;

    #[test]
    fn the_latest_entity_of_a_kind_is_the_active_one() {
        let mut v: Vec<Entity> = Vec::new();
        merge_by_id::apply(
            &mut v,
            &json!([
                {"kind": "customer", "id": "C-1", "name": "Acme", "source": "find_customer"},
                {"kind": "invoice", "id": "I-9", "name": ""}
            ]),
        )
        .unwrap();
        merge_by_id::apply(
            &mut v,
            &json!({"kind": "customer", "id": "C-2", "name": "Globex"}),
        )
        .unwrap();
        let ids: Vec<(&str, &str)> = v.iter().map(|e| (e.kind.as_str(), e.id.as_str())).collect();
        assert_eq!(ids, [("customer", "C-2"), ("invoice", "I-9")]);
        assert!(
            merge_by_id::apply(&mut v, &json!({"kind": "customer"})).is_err(),
            "an entity needs an id"
        );
    }
}

impl super::FieldValue for Entity {
    fn type_spec() -> super::TypeSpec {
        super::TypeSpec::object()
    }
}
