//! What compilation needs from node kinds, without knowing them.
//!
//! The graph layer parses and checks files and owns the compiled form; the
//! kinds themselves (and what a compiled node runs) live in `crate::nodes`,
//! which implements [`NodeKinds`] over its kind table. Compilation is
//! generic over the compiled node type, so this module never names it and
//! dependencies point one way: nodes → graph.

use super::build::BuildCx;
use super::spec::Surface;

/// One setting a kind accepts: its name, its JSON Schema (for `stategraph
/// schema` and editors) and what it does.
#[derive(Clone, Copy, Debug)]
pub struct SettingDoc {
    /// The key in the node's mapping.
    pub name: &'static str,
    /// Its JSON Schema, as JSON text.
    pub schema: &'static str,
    /// What it does.
    pub doc: &'static str,
}

impl SettingDoc {
    /// A setting.
    pub const fn new(name: &'static str, schema: &'static str, doc: &'static str) -> Self {
        Self { name, schema, doc }
    }
}

/// JSON Schema snippets for common setting types.
pub mod schema {
    /// A string.
    pub const STRING: &str = r#"{"type":"string"}"#;
    /// A state field name.
    pub const FIELD: &str = r#"{"type":"string","description":"a state field"}"#;
    /// A list of names (or one).
    pub const NAMES: &str =
        r#"{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}}]}"#;
    /// A whole number.
    pub const INTEGER: &str = r#"{"type":"integer"}"#;
    /// A number.
    pub const NUMBER: &str = r#"{"type":"number"}"#;
    /// A boolean.
    pub const BOOLEAN: &str = r#"{"type":"boolean"}"#;
    /// A mapping of names to names.
    pub const NAME_MAP: &str =
        r#"{"type":"object","additionalProperties":{"type":["string","boolean","integer"]}}"#;
    /// A mapping of names to values.
    pub const MAP: &str = r#"{"type":"object"}"#;
    /// A duration.
    pub const DURATION: &str = r#"{"oneOf":[{"type":"integer","minimum":0},{"type":"string","pattern":"^[0-9.]+(ms|s|m|h|d)?$"}]}"#;
    /// Anything.
    pub const ANY: &str = "{}";
}

/// A kind as compilation sees it.
#[derive(Clone, Copy, Debug)]
pub struct KindInfo<'a> {
    /// The name graph files use in `kind:`.
    pub name: &'a str,
    /// What the kind does.
    pub doc: &'a str,
    /// The settings it accepts.
    pub settings: &'a [SettingDoc],
    /// Where its streamed output goes unless `surface:` says otherwise.
    pub default_surface: Surface,
}

/// The node kinds graph files can use: built in and registered.
pub trait NodeKinds {
    /// What a compiled node is.
    type Node;

    /// The kind called `name`, if there is one.
    fn info(&self, name: &str) -> Option<KindInfo<'_>>;

    /// Every kind's name, for hints.
    fn names(&self) -> Vec<&str>;

    /// Builds a node of kind `name` (which [`NodeKinds::info`] knows);
    /// `None` when its settings are wrong (reported through `cx`).
    fn build(&self, name: &str, cx: &mut BuildCx<'_, Self::Node>) -> Option<Self::Node>;
}
