//! Graph-level settings besides nodes and edges: `carry` (state kept from
//! one chat turn to the next) and `external_tools` (tools that only
//! configuration provides).

use std::sync::Arc;

use super::diagnostic::{Diagnostics, name_hint};
use super::loc::Sp;
use crate::state::StateSchema;

/// Fields every chat request sets itself (`src/server/ui.rs`): carrying them
/// would have no effect, so naming one is a mistake worth reporting.
const REQUEST_FIELDS: &[&str] = &["messages", "query"];

/// Checks `carry:` against the state; returns the field names in file order.
pub(super) fn carry(
    entries: &[Sp<String>],
    schema: Option<&StateSchema>,
    d: &mut Diagnostics,
) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = Vec::new();
    for e in entries {
        let name = e.value.as_str();
        if out.iter().any(|f| &**f == name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` is listed twice in `carry`"),
                None,
            );
            continue;
        }
        if REQUEST_FIELDS.contains(&name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` comes with every chat request, so carrying it has no effect"),
                Some("carry what nodes derive, such as `entities` or `summary`".into()),
            );
            continue;
        }
        if let Some(schema) = schema
            && schema.field(name).is_none()
        {
            d.error(
                e.loc,
                "unknown-field",
                format!(
                    "`carry` names `{name}`, but state `{}` has no such field",
                    schema.name
                ),
                name_hint(name, schema.names()),
            );
            continue;
        }
        out.push(name.into());
    }
    out
}

/// Checks `external_tools:`; returns the names.
pub(super) fn external_tools(entries: &[Sp<String>], d: &mut Diagnostics) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let name = e.value.as_str();
        let valid = !name.is_empty()
            && name.len() <= 128
            && !name.chars().any(|c| c.is_whitespace() || c.is_control());
        if !valid {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{}` is not a tool or partition name", name.escape_debug()),
                None,
            );
        } else if out.iter().any(|n| n == name) {
            d.error(
                e.loc,
                "invalid-setting",
                format!("`{name}` is listed twice in `external_tools`"),
                None,
            );
        } else {
            out.push(name.to_owned());
        }
    }
    out
}
