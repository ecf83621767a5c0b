//! `state:` of a graph file: a registered Rust state by name, or fields
//! declared in the file (optionally extending a Rust state), checked like
//! everything else — types, defaults and reducers — with their places.

use super::diagnostic::{Diagnostics, name_hint};
use super::loc::{Loc, Sp};
use super::spec::{DeclaredStateSpec, StateSpec, TypeDecl};
use crate::state::{
    FieldSpec, Reducer, Reducers, StateSchema, StateType, StateTypes, TypeKind, TypeSpec,
};

/// The type names a declaration may use.
const TYPE_NAMES: &[&str] = &[
    "string", "integer", "number", "boolean", "array", "object", "messages", "any",
];

/// Field names expressions and settings use for something else.
const RESERVED: &[&str] = &["item", "result", "args", "tool", "loop", "state"];

/// What state declarations are checked against.
#[derive(Clone, Copy)]
pub(super) struct StateEnv<'a> {
    pub states: &'a StateTypes,
    pub reducers: &'a Reducers,
}

/// Resolves `state:`; the declared state of graph `graph_id` is named after it.
pub(super) fn resolve(
    spec: &Sp<StateSpec>,
    graph_id: &str,
    env: StateEnv<'_>,
    d: &mut Diagnostics,
) -> Option<StateType> {
    match &spec.value {
        StateSpec::Named(name) => named(name, spec.loc, env, d),
        StateSpec::Declared(decl) => declared(decl, spec.loc, graph_id, env, d),
    }
}

/// `state: NAME`: a registered state type.
fn named(name: &str, loc: Loc, env: StateEnv<'_>, d: &mut Diagnostics) -> Option<StateType> {
    let found = env.states.get(name);
    if found.is_none() {
        let hint = name_hint(name, env.states.names()).or_else(|| {
            Some(
                "declare the state in the file instead: `state: {fields: {name: {type: string}}}`"
                    .into(),
            )
        });
        d.error(
            loc,
            "unknown-state",
            format!("unknown state type `{name}`"),
            hint,
        );
    }
    found
}

/// `state: {fields: …}`, extending a registered state with `type:`. Every
/// field is checked (all problems reported) before any is accepted.
fn declared(
    decl: &DeclaredStateSpec,
    loc: Loc,
    graph_id: &str,
    env: StateEnv<'_>,
    d: &mut Diagnostics,
) -> Option<StateType> {
    let base = match &decl.base {
        None => None,
        Some(b) => match env.states.get(&b.value) {
            Some(t) => Some(t),
            None => {
                d.error(
                    b.loc,
                    "unknown-state",
                    format!("`type: {}` names no registered state to extend", b.value),
                    name_hint(&b.value, env.states.names()),
                );
                return None;
            }
        },
    };
    let mut ok = true;
    let mut fields: Vec<FieldSpec> = Vec::new();
    for (name, field) in &decl.fields.0 {
        if !field_name_ok(name, base.as_ref(), d) {
            ok = false;
            continue;
        }
        match field_spec(name, field, env.reducers, d) {
            Some(f) => fields.push(f),
            None => ok = false,
        }
    }
    if fields.is_empty() && ok && base.is_none() {
        d.error(
            loc,
            "empty-state",
            "the state declares no fields",
            Some("add `fields:` with at least one field".into()),
        );
        return None;
    }
    if !ok {
        return None;
    }
    Some(match base {
        Some(b) => StateType::extended(&b, graph_id, fields),
        None => StateType::declared(StateSchema::new(graph_id, fields)),
    })
}

/// Whether a declared field's name may be used: well formed, not reserved
/// and not already a field of the state it extends (reported if not).
fn field_name_ok(name: &Sp<String>, base: Option<&StateType>, d: &mut Diagnostics) -> bool {
    if !valid_field_name(&name.value) {
        d.error(name.loc, "invalid-field-name", format!("`{}` is not a valid field name: use ASCII letters, digits and `_`, starting with a letter", name.value.escape_debug()), None);
        return false;
    }
    if RESERVED.contains(&name.value.as_str()) {
        d.error(
            name.loc,
            "invalid-field-name",
            format!(
                "`{}` is reserved (expressions use it for something else)",
                name.value
            ),
            Some("choose another name".into()),
        );
        return false;
    }
    if base.is_some_and(|b| b.schema.field(&name.value).is_some()) {
        d.error(
            name.loc,
            "duplicate-field",
            format!(
                "`{}` is already a field of the state this one extends",
                name.value
            ),
            None,
        );
        return false;
    }
    true
}

fn valid_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

/// One declared field: its type, reducer and default, checked.
fn field_spec(
    name: &Sp<String>,
    decl: &Sp<TypeDecl>,
    reducers: &Reducers,
    d: &mut Diagnostics,
) -> Option<FieldSpec> {
    let ty = type_spec(decl, true, d)?;
    let reducer = reducer(decl, &ty, reducers, d)?;
    let default = match &decl.value.default {
        None => None,
        Some(v) => {
            if let Err(m) = ty.check(&v.value) {
                d.error(
                    v.loc,
                    "bad-default",
                    format!(
                        "the default of `{}` does not have its type: {m}",
                        name.value
                    ),
                    None,
                );
                return None;
            }
            Some(v.value.clone())
        }
    };
    Some(FieldSpec {
        name: name.value.as_str().into(),
        ty,
        reducer,
        default,
        doc: decl.value.description.clone().unwrap_or_default(),
    })
}

fn reducer(
    decl: &Sp<TypeDecl>,
    ty: &TypeSpec,
    reducers: &Reducers,
    d: &mut Diagnostics,
) -> Option<Reducer> {
    let key = decl.value.key.as_ref();
    let Some(name) = &decl.value.reducer else {
        if let Some(k) = key {
            d.error(
                k.loc,
                "bad-type",
                "`key` only applies to `reducer: merge_by_id`",
                None,
            );
            return None;
        }
        return Some(if ty.is_messages() {
            Reducer::merge_by_id()
        } else {
            Reducer::Last
        });
    };
    let Some(r) = reducers.get(&name.value, key.map(|k| k.value.as_str())) else {
        d.error(
            name.loc,
            "unknown-reducer",
            format!("unknown reducer `{}`", name.value),
            name_hint(&name.value, reducers.names()),
        );
        return None;
    };
    if let (Some(k), false) = (key, matches!(r, Reducer::MergeById { .. })) {
        d.error(
            k.loc,
            "bad-type",
            "`key` only applies to `reducer: merge_by_id`",
            None,
        );
        return None;
    }
    let fits = match &r {
        Reducer::Append => ty.is_list(),
        Reducer::MergeById { key } => {
            ty.is_messages() && &**key == "id"
                || ty.items().is_some_and(|items| items.holds_objects())
        }
        Reducer::Last | Reducer::Custom { .. } => true,
    };
    if !fits {
        d.error(
            name.loc,
            "reducer-type",
            format!("reducer `{}` does not fit a field of type {}", name.value, ty.describe()),
            Some(match r {
                Reducer::Append => "`append` needs an array (`type: array, items: …`)".into(),
                _ => "`merge_by_id` needs an array of objects that carry the key (or `messages`, keyed by `id`)".into(),
            }),
        );
        return None;
    }
    Some(r)
}

/// The type a declaration describes; `top` for a state field (which may
/// carry `reducer`, `default` and `key`).
fn type_spec(decl: &Sp<TypeDecl>, top: bool, d: &mut Diagnostics) -> Option<TypeSpec> {
    let t = &decl.value;
    if !top && field_keys_on_nested_type(decl, d) {
        return None;
    }
    let (name, mut nullable) = type_name(decl, d)?;
    if let Some(n) = t.nullable {
        nullable |= n;
    }
    if !keys_fit_type(decl, name, d) {
        return None;
    }
    let kind = match name {
        "string" => TypeKind::String {
            values: enum_values(t, d)?,
            max_length: t.max_length.as_ref().map(|m| m.value),
        },
        "integer" | "number" => numeric_kind(decl, name == "integer", d)?,
        "boolean" => TypeKind::Boolean,
        "array" => TypeKind::Array {
            items: Box::new(match &t.items {
                Some(items) => type_spec(items, false, d)?,
                None => TypeSpec::any(),
            }),
            max_items: t.max_items.as_ref().map(|m| m.value),
        },
        "object" => object_kind(t, d)?,
        "messages" => TypeKind::Messages,
        _ => TypeKind::Any,
    };
    Some(TypeSpec { kind, nullable })
}

/// Reports (and says whether) a nested type carries a key that only a
/// state field may: `reducer`, `default` or `key`.
fn field_keys_on_nested_type(decl: &Sp<TypeDecl>, d: &mut Diagnostics) -> bool {
    let t = &decl.value;
    for (present, key) in [
        (t.reducer.is_some(), "reducer"),
        (t.default.is_some(), "default"),
        (t.key.is_some(), "key"),
    ] {
        if present {
            d.error(
                decl.loc,
                "bad-type",
                format!("`{key}` belongs on a state field, not on a nested type"),
                None,
            );
            return true;
        }
    }
    false
}

/// Whether every constraint the declaration sets applies to its type
/// `name`; each one that does not is reported.
fn keys_fit_type(decl: &Sp<TypeDecl>, name: &str, d: &mut Diagnostics) -> bool {
    let t = &decl.value;
    let numeric = matches!(name, "integer" | "number");
    let object = name == "object";
    let checks = [
        (
            t.values.is_some() && name != "string",
            "enum",
            "`type: string`",
        ),
        (
            t.items.is_some() && name != "array",
            "items",
            "`type: array`",
        ),
        (
            t.max_items.is_some() && name != "array",
            "maxItems",
            "`type: array`",
        ),
        (
            t.max_length.is_some() && name != "string",
            "maxLength",
            "`type: string`",
        ),
        (
            (t.minimum.is_some() || t.maximum.is_some()) && !numeric,
            "minimum/maximum",
            "`type: integer` or `number`",
        ),
        (
            (t.properties.is_some() || !t.required.is_empty() || t.additional_properties.is_some())
                && !object,
            "properties/required",
            "`type: object`",
        ),
    ];
    let mut ok = true;
    for (misplaced, key, needs) in checks {
        if misplaced {
            d.error(
                decl.loc,
                "bad-type",
                format!("`{key}` applies to {needs}, not to `{name}`"),
                None,
            );
            ok = false;
        }
    }
    ok
}

/// An `integer` or `number` with its bounds, which must be in order.
fn numeric_kind(decl: &Sp<TypeDecl>, integer: bool, d: &mut Diagnostics) -> Option<TypeKind> {
    let t = &decl.value;
    let (minimum, maximum) = (
        t.minimum.as_ref().map(|m| m.value),
        t.maximum.as_ref().map(|m| m.value),
    );
    if let (Some(lo), Some(hi)) = (minimum, maximum)
        && lo > hi
    {
        d.error(
            decl.loc,
            "bad-type",
            format!("`minimum` ({lo}) is greater than `maximum` ({hi})"),
            None,
        );
        return None;
    }
    Some(if integer {
        TypeKind::Integer { minimum, maximum }
    } else {
        TypeKind::Number { minimum, maximum }
    })
}

/// The type's name and whether `"null"` was listed with it.
fn type_name(decl: &Sp<TypeDecl>, d: &mut Diagnostics) -> Option<(&'static str, bool)> {
    let t = &decl.value;
    let Some(names) = &t.ty else {
        // `enum:` alone means a string; nothing at all means any value.
        return Some((if t.values.is_some() { "string" } else { "any" }, false));
    };
    let mut nullable = false;
    let mut found: Option<&'static str> = None;
    for n in names.items() {
        if n.value == "null" {
            nullable = true;
            continue;
        }
        let Some(known) = TYPE_NAMES.iter().find(|k| **k == n.value) else {
            d.error(
                n.loc,
                "bad-type",
                format!("unknown type `{}`", n.value),
                name_hint(&n.value, TYPE_NAMES.iter().copied()),
            );
            return None;
        };
        if found.is_some() {
            d.error(
                n.loc,
                "bad-type",
                "a field has one type (list `\"null\"` beside it to allow null)",
                None,
            );
            return None;
        }
        found = Some(known);
    }
    match found {
        Some(k) => Some((k, nullable)),
        None => {
            d.error(names.loc, "bad-type", "`type` names no type", None);
            None
        }
    }
}

fn enum_values(t: &TypeDecl, d: &mut Diagnostics) -> Option<Option<Vec<String>>> {
    let Some(values) = &t.values else {
        return Some(None);
    };
    let mut out = Vec::new();
    for v in &values.value {
        match v {
            serde_json::Value::String(s) if !out.contains(s) => out.push(s.clone()),
            serde_json::Value::String(s) => {
                d.error(
                    values.loc,
                    "bad-type",
                    format!("`{s}` is listed twice in `enum`"),
                    None,
                );
                return None;
            }
            other => {
                d.error(
                    values.loc,
                    "bad-type",
                    format!("`enum` values must be strings; `{other}` is not"),
                    Some("quote it".into()),
                );
                return None;
            }
        }
    }
    if out.is_empty() {
        d.error(values.loc, "bad-type", "`enum` lists no values", None);
        return None;
    }
    Some(Some(out))
}

fn object_kind(t: &TypeDecl, d: &mut Diagnostics) -> Option<TypeKind> {
    let mut properties = Vec::new();
    for (name, decl) in t
        .properties
        .as_ref()
        .map(|p| p.0.as_slice())
        .unwrap_or_default()
    {
        properties.push((name.value.clone(), type_spec(decl, false, d)?));
    }
    let mut required = Vec::new();
    for r in &t.required {
        if !properties.iter().any(|(n, _)| *n == r.value) {
            d.error(
                r.loc,
                "bad-type",
                format!(
                    "`required` names `{}`, which is not among the `properties`",
                    r.value
                ),
                None,
            );
            return None;
        }
        required.push(r.value.clone());
    }
    Some(TypeKind::Object {
        properties,
        required,
        additional: t.additional_properties.unwrap_or(true),
    })
}
