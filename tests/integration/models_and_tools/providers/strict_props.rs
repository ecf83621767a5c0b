//! Property tests of the strict-schema transform: for generated declared
//! output shapes (nested objects, arrays, optional, nullable and enum
//! fields), the transformed schema passes OpenAI's strict-mode rules (the
//! emulator's checker, `openai_rules::strict_violation`), and the
//! emulator's minimal instance of it, mapped back (`null`s of optional
//! fields to absent), is a valid value of the declared type.

use proptest::prelude::*;
use stategraph::internals::llm::JsonSchemaFormat;
use stategraph::state::{TypeKind, TypeSpec};

use super::instance::minimal;
use super::openai_rules::strict_violation;

fn leaf() -> impl Strategy<Value = TypeSpec> {
    prop_oneof![
        (proptest::option::of(1u64..50)).prop_map(|max_length| TypeSpec::of(TypeKind::String {
            values: None,
            max_length
        })),
        proptest::collection::vec("[A-Z]{1,6}", 1..4).prop_map(|v| TypeSpec::of(
            TypeKind::String {
                values: Some(v),
                max_length: None
            }
        )),
        (
            proptest::option::of(-5i32..5),
            proptest::option::of(5i32..50)
        )
            .prop_map(|(lo, hi)| {
                TypeSpec::of(TypeKind::Integer {
                    minimum: lo.map(f64::from),
                    maximum: hi.map(f64::from),
                })
            }),
        Just(TypeSpec::number()),
        Just(TypeSpec::boolean()),
    ]
}

fn object(inner: impl Strategy<Value = TypeSpec>) -> impl Strategy<Value = TypeSpec> {
    (
        proptest::collection::vec((inner, any::<bool>()), 1..5),
        any::<bool>(),
    )
        .prop_map(|(fields, additional)| {
            let properties: Vec<(String, TypeSpec)> = fields
                .iter()
                .enumerate()
                .map(|(i, (t, _))| (format!("f{i}"), t.clone()))
                .collect();
            let required = fields
                .iter()
                .enumerate()
                .filter(|(_, (_, req))| *req)
                .map(|(i, _)| format!("f{i}"))
                .collect();
            TypeSpec::of(TypeKind::Object {
                properties,
                required,
                additional,
            })
        })
}

fn shape() -> impl Strategy<Value = TypeSpec> {
    let nested = leaf().prop_recursive(3, 32, 4, |inner| {
        prop_oneof![
            (inner.clone(), proptest::option::of(1u64..4)).prop_map(|(items, max_items)| {
                TypeSpec::of(TypeKind::Array {
                    items: Box::new(items),
                    max_items,
                })
            }),
            object(inner.clone()),
        ]
        .prop_flat_map(|t| (Just(t), any::<bool>()))
        .prop_map(|(t, nullable)| if nullable { t.nullable() } else { t })
    });
    object(nested)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn transformed_schemas_pass_strict_mode_and_answers_map_back(declared in shape()) {
        let schema = declared.json_schema();
        let format = JsonSchemaFormat::new("answer", schema.clone());
        let strict = format.strict.schema().cloned();
        prop_assert!(strict.is_some(), "typed shapes are always strict: {:?}", format.strict);
        let strict = strict.unwrap();
        prop_assert_eq!(strict_violation(&strict), None, "{}", strict);
        let mut answer = minimal(&strict, &strict);
        format.restore(&mut answer);
        prop_assert!(declared.check(&answer).is_ok(), "{} does not fit {}: {:?}", answer, schema, declared.check(&answer));
    }
}
