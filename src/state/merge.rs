//! Applying one superstep's patches: validation, conflicts, deterministic order.
//!
//! Tasks of a superstep run concurrently and finish in any order. Their
//! patches are sorted by task order (node declaration order, then map item
//! index) before anything is applied, so the resulting state never depends on
//! completion order. Everything is checked before the first write lands.

use super::{DynState, FieldId, Patch, StateError};

/// One task's patch, with what the merge needs to know about the task.
#[derive(Debug)]
pub struct TaskPatch<'a> {
    /// Position in task order: (node index, map item index).
    pub order: (u32, u32),
    /// How the task is named in errors: `node` or `node[item]`.
    pub label: &'a str,
    /// Fields the node declares it writes.
    pub writes: &'a [FieldId],
    /// The patch.
    pub patch: &'a Patch,
}

/// Applies the patches of one superstep to `state`.
///
/// # Errors
/// An unknown or undeclared field, two tasks writing one last-value field,
/// or a value of the wrong type. On a type error the state may hold the
/// writes that came before it in task order; the executor fails the run.
pub fn apply_step(
    state: &mut dyn DynState,
    patches: &mut [TaskPatch<'_>],
) -> Result<(), StateError> {
    patches.sort_by_key(|p| p.order);
    let resolved = resolve(&*state, patches)?;
    let mut failure = None;
    for (t, field, value) in resolved {
        if let Err(mismatch) = state.apply(field, value) {
            failure = Some((t, field, mismatch));
            break;
        }
    }
    match failure {
        None => Ok(()),
        Some((t, field, mismatch)) => Err(StateError::Type {
            node: patches[t].label.to_owned(),
            field: state.schema().spec(field).name.to_string(),
            mismatch: Box::new(mismatch),
        }),
    }
}

/// Checks every write of the step (known, declared, no last-value
/// conflict) and returns them in task order.
fn resolve<'p>(
    state: &dyn DynState,
    patches: &'p [TaskPatch<'_>],
) -> Result<Vec<(usize, FieldId, &'p serde_json::Value)>, StateError> {
    let schema = state.schema();
    let mut resolved: Vec<(usize, FieldId, &serde_json::Value)> = Vec::new();
    // (field, task) of last-value writes; a step writes few fields, so a
    // linear scan beats a map.
    let mut last_writer: Vec<(FieldId, usize)> = Vec::new();
    for (t, task) in patches.iter().enumerate() {
        for (name, value) in task.patch.iter() {
            let Some(field) = schema.field(name) else {
                return Err(StateError::UnknownField {
                    node: task.label.to_owned(),
                    field: name.to_owned(),
                    state: schema.name.to_string(),
                });
            };
            if !task.writes.contains(&field) {
                return Err(StateError::Undeclared {
                    node: task.label.to_owned(),
                    field: name.to_owned(),
                });
            }
            if schema.spec(field).reducer.is_last() {
                if let Some(&(_, first)) = last_writer.iter().find(|(f, _)| *f == field)
                    && first != t
                {
                    return Err(StateError::Conflict {
                        field: name.to_owned(),
                        first: patches[first].label.to_owned(),
                        second: task.label.to_owned(),
                    });
                }
                last_writer.push((field, t));
            }
            resolved.push((t, field, value));
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{State, message::Message};
    use proptest::prelude::*;
    use serde_json::json;

    crate::state! {
        /// A state for these tests.
        struct TestState as "test" {
            /// Chat history.
            messages: Vec<Message> => merge_by_id,
            /// A last-value field.
            answer: String => last,
            /// Another.
            summary: String => last,
            /// Appended records.
            tool_results: Vec<serde_json::Value> => append,
            /// A list replaced whole.
            followups: Vec<String> => last,
        }
    }

    fn f(name: &str) -> FieldId {
        TestState::static_schema().field(name).unwrap()
    }

    #[test]
    fn conflicting_last_value_writes_name_both_nodes() {
        let mut s = TestState::default();
        let w = [f("answer")];
        let (a, b) = (
            Patch::new().set("answer", "x"),
            Patch::new().set("answer", "y"),
        );
        let mut ps = [
            TaskPatch {
                order: (2, 0),
                label: "beta",
                writes: &w,
                patch: &b,
            },
            TaskPatch {
                order: (1, 0),
                label: "alpha",
                writes: &w,
                patch: &a,
            },
        ];
        let err = apply_step(&mut s, &mut ps).unwrap_err().to_string();
        assert!(err.contains("`alpha` and `beta`"), "{err}");
        assert_eq!(s.answer, "", "nothing is applied when the step is rejected");
    }

    #[test]
    fn unknown_and_undeclared_fields_are_errors() {
        let mut s = TestState::default();
        let w = [f("answer")];
        let p = Patch::new().set("answr", "x");
        let err = apply_step(
            &mut s,
            &mut [TaskPatch {
                order: (0, 0),
                label: "n",
                writes: &w,
                patch: &p,
            }],
        );
        assert!(matches!(err, Err(StateError::UnknownField { .. })));
        let p = Patch::new().set("summary", "x");
        let err = apply_step(
            &mut s,
            &mut [TaskPatch {
                order: (0, 0),
                label: "n",
                writes: &w,
                patch: &p,
            }],
        );
        assert!(matches!(err, Err(StateError::Undeclared { .. })));
    }

    proptest! {
        /// Whatever order the tasks finish in, the merged state is the same.
        #[test]
        fn merge_is_independent_of_completion_order(
            items in proptest::collection::vec("[a-z]{0,4}", 1..12),
            seed in any::<u64>(),
        ) {
            let w = [f("tool_results"), f("followups"), f("messages")];
            let patches: Vec<Patch> = items.iter().enumerate().map(|(i, it)| {
                let mut p = Patch::new().set("tool_results", json!([{ "i": i, "v": it }]));
                p.insert("messages", json!({"id": format!("m{}", i % 3), "role": "user", "content": it}));
                if i == 0 { p.insert("followups", json!([it])); }
                p
            }).collect();
            let labels: Vec<String> = (0..items.len()).map(|i| format!("t{i}")).collect();
            let run = |order: &[usize]| {
                let mut s = TestState::default();
                let mut ps: Vec<TaskPatch<'_>> = order.iter().map(|&i| TaskPatch {
                    order: (1, i as u32), label: &labels[i], writes: &w, patch: &patches[i],
                }).collect();
                apply_step(&mut s, &mut ps).unwrap();
                s
            };
            let forward: Vec<usize> = (0..items.len()).collect();
            let mut shuffled = forward.clone();
            fastrand::Rng::with_seed(seed).shuffle(&mut shuffled);
            prop_assert_eq!(run(&forward), run(&shuffled));
        }
    }
}
