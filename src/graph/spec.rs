//! Graph-file spec types: serde structs 1:1 with the YAML.
//!
//! Nothing here is checked beyond types; `validate` gives meaning to names
//! and `compile` turns a valid spec into what the executor runs. Every name a
//! diagnostic may point at is wrapped in [`Sp`] to keep its location.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::loc::{Loc, Sp};
use super::value::SpValue;
use crate::units::Dur;

/// One graph file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSpec {
    /// The state: a registered Rust state's name (`chat`), or fields
    /// declared here (`{fields: …}`, optionally `{type: chat, fields: …}`
    /// to extend a Rust state).
    pub state: Sp<StateSpec>,
    /// The node(s) the first superstep runs.
    pub entry: Sp<Names>,
    /// What the graph is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Maximum supersteps before the run fails (default 25).
    #[serde(default)]
    pub recursion_limit: Option<Sp<u32>>,
    /// How `POST /api/chat` fills the state (defaults need nothing).
    #[serde(default)]
    pub chat: Option<Sp<ChatSpec>>,
    /// The nodes.
    pub nodes: Vec<Sp<NodeSpec>>,
    /// The edges.
    #[serde(default)]
    pub edges: Vec<Sp<EdgeSpec>>,
    /// Tools or partitions provided at run time by configuration (an MCP
    /// server), so the graph validates before, or without, them.
    #[serde(default)]
    pub external_tools: Vec<Sp<String>>,
    /// Values the graph's bound tool arguments read as `config.NAME`
    /// (a tenant, a region): set by the file, never by a request.
    #[serde(default)]
    pub config: Option<Sp<SpValue>>,
    /// Tools or partitions the graph works without (charts, say): while
    /// they are missing `/api/tools/health` says `degraded`, not down.
    #[serde(default)]
    pub optional_tools: Vec<Sp<String>>,
}

/// `state:`: a registered state's name, or declared fields.
#[derive(Debug)]
pub enum StateSpec {
    /// `state: chat`.
    Named(String),
    /// `state: {fields: …}` or `state: {type: chat, fields: …}`.
    Declared(DeclaredStateSpec),
}

/// Fields declared in the graph file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredStateSpec {
    /// A registered Rust state these fields extend.
    #[serde(rename = "type", default)]
    pub base: Option<Sp<String>>,
    /// The fields, in file order.
    pub fields: SpPairs<TypeDecl>,
}

impl<'de> Deserialize<'de> for StateSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StateSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a state name, or `fields:` declaring the state")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StateSpec, E> {
                Ok(StateSpec::Named(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StateSpec, A::Error> {
                DeclaredStateSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(StateSpec::Declared)
            }
        }
        d.deserialize_any(V)
    }
}

/// The declaration of a field's type (JSON-Schema keywords), with its
/// reducer and default when it declares a state field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeDecl {
    /// `string`, `integer`, `number`, `boolean`, `array`, `object`,
    /// `messages`, `any` — or a list with `"null"` for a nullable type.
    #[serde(rename = "type", default)]
    pub ty: Option<Sp<Names>>,
    /// The allowed values of a string.
    #[serde(rename = "enum", default)]
    pub values: Option<Sp<Vec<serde_json::Value>>>,
    /// The items' type of an array.
    #[serde(default)]
    pub items: Option<Box<Sp<TypeDecl>>>,
    /// The properties of an object.
    #[serde(default)]
    pub properties: Option<SpPairs<TypeDecl>>,
    /// Properties an object must have.
    #[serde(default)]
    pub required: Vec<Sp<String>>,
    /// Whether an object may have undeclared properties (default true).
    #[serde(rename = "additionalProperties", default)]
    pub additional_properties: Option<bool>,
    /// Whether `null` is allowed.
    #[serde(default)]
    pub nullable: Option<bool>,
    /// Lower bound of a number.
    #[serde(default)]
    pub minimum: Option<Sp<f64>>,
    /// Upper bound of a number.
    #[serde(default)]
    pub maximum: Option<Sp<f64>>,
    /// Longest string.
    #[serde(rename = "maxLength", default)]
    pub max_length: Option<Sp<u64>>,
    /// Longest array.
    #[serde(rename = "maxItems", default)]
    pub max_items: Option<Sp<u64>>,
    /// What the field is for.
    #[serde(default)]
    pub description: Option<String>,
    /// State fields only: the value it starts with.
    #[serde(default)]
    pub default: Option<Sp<serde_json::Value>>,
    /// State fields only: how writes combine (`last`, `append`,
    /// `merge_by_id`, or one the application registers).
    #[serde(default)]
    pub reducer: Option<Sp<String>>,
    /// State fields only: the merge key of `merge_by_id` (default `id`).
    #[serde(default)]
    pub key: Option<Sp<String>>,
}

/// `chat:`: how `POST /api/chat` fills the state and reads the answer.
/// Every key has a default, so the simple case needs nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSpec {
    /// The field receiving the conversation (default: the one field of
    /// type `messages`).
    #[serde(default)]
    pub history: Option<Sp<String>>,
    /// The field receiving the newest user message's text (default: a
    /// string field called `query`, if there is one).
    #[serde(default)]
    pub text: Option<Sp<String>>,
    /// The field holding the turn's answer (default: a string field
    /// called `answer`, if there is one).
    #[serde(default)]
    pub answer: Option<Sp<String>>,
    /// Fields a turn takes over from the previous turn's final state.
    #[serde(default)]
    pub carry: Vec<Sp<String>>,
    /// Request body keys that may set a field (`{forced_intent:
    /// forced_intent}`: the body's `forced_intent` sets that field).
    #[serde(default)]
    pub inputs: Option<SpMap>,
}

/// Where a node's streamed output goes in the chat UI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// Streamed as the answer text.
    Answer,
    /// Shown in the collapsible thinking panel.
    Thinking,
    /// Not shown.
    Hidden,
}

/// One node: the keys every kind shares, typed, and the kind's own
/// settings, kept with their locations until the kind reads them.
#[derive(Debug)]
pub struct NodeSpec {
    /// Unique id within the graph.
    pub id: Sp<String>,
    /// Built-in kind or a registered Rust node.
    pub kind: Sp<String>,
    /// What the node is for.
    pub description: Option<String>,
    /// State fields the node writes (besides those its settings name).
    pub writes: Vec<Sp<String>>,
    /// UI surface for streamed output.
    pub surface: Option<Sp<Surface>>,
    /// Retry policy.
    pub retry: Option<Sp<RetrySpec>>,
    /// Time limit per attempt.
    pub timeout: Option<Sp<Dur>>,
    /// What the node is doing, shown as progress (`data-stage`) when it
    /// starts: text, or a template over the state.
    pub status: Option<Sp<String>>,
    /// Every other key, for the kind.
    pub settings: Vec<(Sp<String>, Sp<SpValue>)>,
}

/// The keys every node has, whatever its kind.
#[cfg(feature = "server")]
pub(crate) const COMMON_NODE_KEYS: &[&str] = &[
    "id",
    "kind",
    "description",
    "writes",
    "surface",
    "retry",
    "timeout",
    "status",
];

impl<'de> Deserialize<'de> for NodeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NodeSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a node: a mapping with `id`, `kind` and its settings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodeSpec, A::Error> {
                let (mut id, mut kind, mut description) = (None, None, None);
                let (mut writes, mut surface, mut retry, mut timeout) =
                    (Vec::new(), None, None, None);
                let mut status = None;
                let mut settings = Vec::new();
                while let Some(key) = map.next_key::<Sp<String>>()? {
                    match key.value.as_str() {
                        "id" => id = Some(map.next_value()?),
                        "kind" => kind = Some(map.next_value()?),
                        "description" => description = map.next_value()?,
                        "writes" => writes = map.next_value()?,
                        "surface" => surface = Some(map.next_value()?),
                        "retry" => retry = Some(map.next_value()?),
                        "timeout" => timeout = Some(map.next_value()?),
                        "status" => status = Some(map.next_value()?),
                        _ => settings.push((key, map.next_value()?)),
                    }
                }
                // A missing `id` or `kind` is left empty for compilation to
                // report with the node's other problems (and, when a key
                // looks like a misspelling of it, at that key).
                let near = |name: &str| {
                    settings
                        .iter()
                        .find(|(k, _): &&(Sp<String>, Sp<SpValue>)| {
                            super::diagnostic::did_you_mean(&k.value, [name]).is_some()
                        })
                        .map_or(Loc::default(), |(k, _)| k.loc)
                };
                let id = id.unwrap_or_else(|| Sp::new(String::new(), near("id")));
                let kind = kind.unwrap_or_else(|| Sp::new(String::new(), near("kind")));
                Ok(NodeSpec {
                    id,
                    kind,
                    description,
                    writes,
                    surface,
                    retry,
                    timeout,
                    status,
                    settings,
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// Retry policy for a node.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Total attempts, including the first (default 3).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// Delay before the first retry (default 250ms); doubles each time.
    #[serde(default)]
    pub backoff: Option<Dur>,
    /// Upper bound on the delay (default 10s).
    #[serde(default)]
    pub max_backoff: Option<Dur>,
}

fn default_attempts() -> u32 {
    3
}

/// One name or a list of names (`from: a` or `from: [a, b]`).
#[derive(Clone, Debug, Default)]
pub struct Names(pub Vec<Sp<String>>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a node name or a list of node names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Names, E> {
                // The enclosing `Sp<Names>` knows where this scalar is.
                Ok(Names(vec![Sp::new(v.to_owned(), Loc::default())]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
                let mut out = Vec::new();
                while let Some(n) = seq.next_element::<Sp<String>>()? {
                    out.push(n);
                }
                Ok(Names(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Sp<Names> {
    /// The names, each with a known location (a scalar takes the location of
    /// the whole value).
    pub fn items(&self) -> Vec<Sp<String>> {
        self.value
            .0
            .iter()
            .map(|n| {
                Sp::new(
                    n.value.clone(),
                    if n.loc.is_known() { n.loc } else { self.loc },
                )
            })
            .collect()
    }
}

/// An ordered map of names to names, each with its location.
#[derive(Clone, Debug, Default)]
pub struct SpMap {
    /// Where the map starts.
    pub loc: Loc,
    /// Entries in file order.
    pub entries: Vec<(Sp<String>, Sp<String>)>,
}

impl<'de> Deserialize<'de> for SpMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<Pairs>::deserialize(d)?;
        Ok(SpMap {
            loc: s.referenced.into(),
            entries: s.value.0,
        })
    }
}

/// The entries of a [`SpMap`], read in file order.
struct Pairs(Vec<(Sp<String>, Sp<String>)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of names to names")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<Sp<ScalarText>>()? {
                    let v: Sp<ScalarText> = map.next_value()?;
                    out.push((Sp::new(k.value.0, k.loc), Sp::new(v.value.0, v.loc)));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Scalars used as names: strings, and booleans or numbers written bare
/// (`true: next` in a route on a boolean field).
#[derive(Clone, Debug)]
pub(crate) struct ScalarText(pub String);

impl<'de> Deserialize<'de> for ScalarText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ScalarText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name (string, boolean or integer)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A mapping of names to values of `T`, in file order, each with its place.
#[derive(Debug)]
pub struct SpPairs<T>(pub Vec<(Sp<String>, Sp<T>)>);

impl<T> Default for SpPairs<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for SpPairs<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = SpPairs<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SpPairs<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<Sp<String>>()? {
                    let v: Sp<T> = map.next_value()?;
                    out.push((k, v));
                }
                Ok(SpPairs(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// One edge: `a -> b` or a map with `from` and one of `to`, `route`, `map`.
#[derive(Debug)]
pub enum EdgeSpec {
    /// `from -> to`. Offsets are character offsets of the two names within
    /// the scalar; the loader turns them into locations.
    Short {
        /// Source node.
        from: Sp<String>,
        /// Target node or `END`.
        to: Sp<String>,
    },
    /// The map form.
    Full(Box<FullEdge>),
}

/// The map form of an edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FullEdge {
    /// Source node(s); several sources make `to` a join that waits for all.
    pub from: Sp<Names>,
    /// Plain target(s); several targets fan out in parallel.
    #[serde(default)]
    pub to: Option<Sp<Names>>,
    /// Conditional routing.
    #[serde(default)]
    pub route: Option<Sp<RouteSpec>>,
    /// Map fan-out: one task of `to` per item of a list field.
    #[serde(default)]
    pub map: Option<Sp<MapSpec>>,
}

/// Conditional routing on a state field or an expression.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// The field whose value selects the target.
    #[serde(default)]
    pub on: Option<Sp<String>>,
    /// Or an expression over the state whose value selects it
    /// (`coverage < 0.7 and iteration < 3` routes on `true` / `false`).
    #[serde(default)]
    pub expr: Option<Sp<String>>,
    /// Value → target (node or `END`).
    #[serde(default)]
    pub cases: Option<SpMap>,
    /// Target for values not in `cases`.
    #[serde(default)]
    pub default: Option<Sp<String>>,
}

/// Map fan-out (LangGraph's `Send`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapSpec {
    /// A list field, or an expression giving a list; one task per item,
    /// the item available as `item`.
    pub over: Sp<String>,
    /// The node that runs once per item.
    pub to: Sp<String>,
    /// What an empty list does: `skip` (default) or `fail`.
    #[serde(default)]
    pub on_empty: Option<Sp<String>>,
}

impl<'de> Deserialize<'de> for EdgeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EdgeSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an edge: `from -> to`, or a map with `from` and `to`, `route` or `map`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EdgeSpec, E> {
                parse_short_edge(v).ok_or_else(|| {
                    E::custom(format!(
                        "edge `{v}` must look like `from -> to` (use END as the target to finish)"
                    ))
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<EdgeSpec, A::Error> {
                FullEdge::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|f| EdgeSpec::Full(Box::new(f)))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses `from -> to`; the names' locations hold their character offsets
/// within the text in `column` (line 0) until the loader places them.
fn parse_short_edge(text: &str) -> Option<EdgeSpec> {
    let (a, b) = text.split_once("->")?;
    let from = a.trim();
    let to = b.trim();
    if from.is_empty() || to.is_empty() || to.contains("->") {
        return None;
    }
    let from_off = a.chars().take_while(|c| c.is_whitespace()).count();
    let to_off = a.chars().count() + 2 + b.chars().take_while(|c| c.is_whitespace()).count();
    Some(EdgeSpec::Short {
        from: Sp::new(from.to_owned(), Loc::new(0, from_off as u32)),
        to: Sp::new(to.to_owned(), Loc::new(0, to_off as u32)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_survive_nested_specs() {
        let yaml = "state: chat\nentry: a\nnodes:\n  - id: a\n    kind: noop\nedges:\n  - a -> END\n  - from: [a, b]\n    route:\n      on: intent\n      cases: {X: a, true: END}\n";
        let g: GraphSpec = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(g.state.loc, Loc::new(1, 8));
        assert_eq!(g.nodes[0].value.id.loc, Loc::new(4, 9));
        assert_eq!(g.nodes[0].value.kind.loc, Loc::new(5, 11));
        let EdgeSpec::Full(full) = &g.edges[1].value else {
            panic!("full edge")
        };
        assert_eq!(full.from.items()[1].loc, Loc::new(8, 15));
        let route = full.route.as_ref().unwrap();
        assert_eq!(route.on.as_ref().unwrap().loc, Loc::new(10, 11));
        let cases = route.cases.as_ref().unwrap();
        assert_eq!(cases.entries[1].0.value, "true");
        assert_eq!(cases.entries[1].1.loc, Loc::new(11, 27));
        assert!(matches!(&g.edges[0].value, EdgeSpec::Short { to, .. } if to.value == "END"));
        assert_eq!(g.edges[0].loc, Loc::new(7, 5));
    }

    #[test]
    fn declared_state_and_kind_settings_keep_their_places() {
        let yaml = "state:\n  fields:\n    ticket: { type: string }\n    tags: { type: array, items: { type: string }, reducer: append }\nentry: a\nnodes:\n  - id: a\n    kind: llm\n    prompt: p.md\n    timeout: 5s\n";
        let g: GraphSpec = serde_saphyr::from_str(yaml).unwrap();
        let StateSpec::Declared(d) = &g.state.value else {
            panic!("declared")
        };
        assert_eq!(d.fields.0[1].0.value, "tags");
        assert_eq!(
            d.fields.0[1].1.value.reducer.as_ref().unwrap().loc,
            Loc::new(4, 60)
        );
        let node = &g.nodes[0].value;
        assert_eq!(node.settings.len(), 1);
        assert_eq!(node.settings[0].0.value, "prompt");
        assert_eq!(node.settings[0].1.loc, Loc::new(9, 13));
        assert!(node.timeout.is_some());
    }
}
