//! Graph-file spec types: serde structs 1:1 with the YAML.
//!
//! Nothing here is checked beyond types; `validate` gives meaning to names
//! and `compile` turns a valid spec into what the executor runs. Every name a
//! diagnostic may point at is wrapped in [`Sp`] to keep its location.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::loc::{Loc, Sp};
use crate::units::Dur;

/// One graph file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSpec {
    /// The state type the graph runs on (e.g. `chat`).
    pub state: Sp<String>,
    /// The node(s) the first superstep runs.
    pub entry: Sp<Names>,
    /// What the graph is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Maximum supersteps before the run fails (default 25).
    #[serde(default)]
    pub recursion_limit: Option<Sp<u32>>,
    /// The nodes.
    pub nodes: Vec<Sp<NodeSpec>>,
    /// The edges.
    #[serde(default)]
    pub edges: Vec<Sp<EdgeSpec>>,
    /// State fields a chat turn starts with from the previous turn's final
    /// state (`POST /api/chat`); the request's own fields win.
    #[serde(default)]
    pub carry: Vec<Sp<String>>,
    /// Tools or partitions provided at run time by configuration (an MCP
    /// server), so the graph validates before, or without, them.
    #[serde(default)]
    pub external_tools: Vec<Sp<String>>,
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

/// One node.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique id within the graph.
    pub id: Sp<String>,
    /// Built-in kind or a registered Rust node.
    pub kind: Sp<String>,
    /// What the node is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Prompt template path under the prompts directory.
    #[serde(default)]
    pub prompt: Option<Sp<String>>,
    /// Model role (mapped to an endpoint and model in config).
    #[serde(default)]
    pub model: Option<Sp<String>>,
    /// Tools or tool partitions the node may use.
    #[serde(default)]
    pub tools: Vec<Sp<String>>,
    /// State fields the node writes (besides those its settings name).
    #[serde(default)]
    pub writes: Vec<Sp<String>>,
    /// UI surface for streamed output.
    #[serde(default)]
    pub surface: Option<Sp<Surface>>,
    /// Retry policy.
    #[serde(default)]
    pub retry: Option<Sp<RetrySpec>>,
    /// Time limit per attempt.
    #[serde(default)]
    pub timeout: Option<Sp<Dur>>,

    // ---- kind settings (each kind lists the ones it accepts) ----
    /// Field holding the input text (router, agent, llm).
    #[serde(default)]
    pub input: Option<Sp<String>>,
    /// Field the node's result is written to.
    #[serde(default)]
    pub output: Option<Sp<String>>,
    /// List-of-messages field given to the model as conversation history.
    #[serde(default)]
    pub history: Option<Sp<String>>,
    /// How many of the newest history messages to send.
    #[serde(default)]
    pub history_window: Option<Sp<u32>>,
    /// Router: the intents it may return.
    #[serde(default)]
    pub intents: Vec<Sp<String>>,
    /// Router: override tokens in the input text and the intent each forces.
    #[serde(default)]
    pub overrides: Option<SpMap>,
    /// Router: intent used when classification fails.
    #[serde(default)]
    pub fallback: Option<Sp<String>>,
    /// Router: field holding an intent forced by the caller.
    #[serde(default)]
    pub forced: Option<Sp<String>>,
    /// Router: field receiving reasoning, missing slots and language.
    #[serde(default)]
    pub details: Option<Sp<String>>,
    /// Router: field receiving the detected language.
    #[serde(default)]
    pub language: Option<Sp<String>>,
    /// Agent: maximum model calls.
    #[serde(default)]
    pub max_iterations: Option<Sp<u32>>,
    /// Agent: list field that receives a record of each tool call.
    #[serde(default)]
    pub trace: Option<Sp<String>>,
    /// Summarizer: first summary once history exceeds this many messages.
    #[serde(default)]
    pub first_after: Option<Sp<u32>>,
    /// Summarizer: re-summarize after this many new messages.
    #[serde(default)]
    pub every: Option<Sp<u32>>,
    /// Summarizer: messages sent to the model.
    #[serde(default)]
    pub window: Option<Sp<u32>>,
    /// Summarizer: field counting the messages the summary covers.
    #[serde(default)]
    pub covered: Option<Sp<String>>,
    /// Followup: how many questions (2 or 3).
    #[serde(default)]
    pub count: Option<Sp<u32>>,
    /// Subgraph: the graph to run.
    #[serde(default)]
    pub graph: Option<Sp<String>>,
    /// Subgraph: child field ← parent field.
    #[serde(default)]
    pub inputs: Option<SpMap>,
    /// Subgraph: parent field ← child field.
    #[serde(default)]
    pub outputs: Option<SpMap>,
    /// Noop: constant writes.
    #[serde(default)]
    pub set: Option<Sp<serde_json::Map<String, serde_json::Value>>>,
    /// Registered Rust nodes: free-form parameters.
    #[serde(default)]
    pub params: Option<Sp<serde_json::Value>>,
    /// Kinds that call a model: the role used when the `model` role's call
    /// fails before it has answered anything.
    #[serde(default)]
    pub fallback_model: Option<Sp<String>>,
    /// Tool: the tool to call.
    #[serde(default)]
    pub tool: Option<Sp<String>>,
    /// Tool: its arguments; string values are templates (`"{{ item }}"`).
    #[serde(default)]
    pub args: Option<Sp<serde_json::Map<String, serde_json::Value>>>,
    /// Tool: what a failed call does, `fail` (default) or `continue`.
    #[serde(default)]
    pub on_error: Option<Sp<String>>,
    /// Agent: entities to remember from tool results, by kind.
    #[serde(default)]
    pub entities: Option<EntityRules>,
    /// Agent: the field the entities are written to (default `entities`).
    #[serde(default)]
    pub entity_field: Option<Sp<String>>,
}

impl NodeSpec {
    /// Kind settings present on this node, with their locations, so a kind
    /// can reject settings that do not apply to it.
    pub fn present_settings(&self) -> Vec<(&'static str, Loc)> {
        fn opt<T>(out: &mut Vec<(&'static str, Loc)>, name: &'static str, v: &Option<Sp<T>>) {
            if let Some(v) = v {
                out.push((name, v.loc));
            }
        }
        let mut out = Vec::new();
        opt(&mut out, "input", &self.input);
        opt(&mut out, "output", &self.output);
        opt(&mut out, "history", &self.history);
        opt(&mut out, "history_window", &self.history_window);
        if let Some(first) = self.intents.first() {
            out.push(("intents", first.loc));
        }
        if let Some(m) = &self.overrides {
            out.push(("overrides", m.loc));
        }
        opt(&mut out, "fallback", &self.fallback);
        opt(&mut out, "forced", &self.forced);
        opt(&mut out, "details", &self.details);
        opt(&mut out, "language", &self.language);
        opt(&mut out, "max_iterations", &self.max_iterations);
        opt(&mut out, "trace", &self.trace);
        opt(&mut out, "first_after", &self.first_after);
        opt(&mut out, "every", &self.every);
        opt(&mut out, "window", &self.window);
        opt(&mut out, "covered", &self.covered);
        opt(&mut out, "count", &self.count);
        opt(&mut out, "graph", &self.graph);
        if let Some(m) = &self.inputs {
            out.push(("inputs", m.loc));
        }
        if let Some(m) = &self.outputs {
            out.push(("outputs", m.loc));
        }
        opt(&mut out, "set", &self.set);
        opt(&mut out, "params", &self.params);
        opt(&mut out, "fallback_model", &self.fallback_model);
        opt(&mut out, "tool", &self.tool);
        opt(&mut out, "args", &self.args);
        opt(&mut out, "on_error", &self.on_error);
        if let Some(e) = &self.entities {
            out.push(("entities", e.loc));
        }
        opt(&mut out, "entity_field", &self.entity_field);
        if let Some(first) = self.tools.first() {
            out.push(("tools", first.loc));
        }
        opt(&mut out, "prompt", &self.prompt);
        opt(&mut out, "model", &self.model);
        out
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
pub struct ScalarText(pub String);

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

/// `entities:` of an agent: per entity kind, which tool results name one
/// and where in them its id and name are.
#[derive(Clone, Debug, Default)]
pub struct EntityRules {
    /// Where the map starts.
    pub loc: Loc,
    /// Kind → rule, in file order.
    pub rules: Vec<(Sp<String>, Sp<EntityRule>)>,
}

/// How to read one kind of entity from tool results.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityRule {
    /// The tools whose (successful) results name an entity of this kind.
    pub from: Sp<Names>,
    /// JSON pointer (RFC 6901) to the id in the result, e.g. `/id`.
    pub id: Sp<String>,
    /// JSON pointer to the display name, e.g. `/name`.
    #[serde(default)]
    pub name: Option<Sp<String>>,
}

impl<'de> Deserialize<'de> for EntityRules {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rules(Vec<(Sp<String>, Sp<EntityRule>)>);
        impl<'de> Deserialize<'de> for Rules {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Rules;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a map of entity kinds to `{from: [tools], id: /pointer, name: /pointer}`")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Rules, A::Error> {
                        let mut out = Vec::new();
                        while let Some(k) = map.next_key::<Sp<String>>()? {
                            let v: Sp<EntityRule> = map.next_value()?;
                            out.push((k, v));
                        }
                        Ok(Rules(out))
                    }
                }
                d.deserialize_map(V)
            }
        }
        let s = serde_saphyr::Spanned::<Rules>::deserialize(d)?;
        Ok(EntityRules {
            loc: s.referenced.into(),
            rules: s.value.0,
        })
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
    Full(FullEdge),
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

/// Conditional routing on a state field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// The field whose value selects the target.
    pub on: Sp<String>,
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
    /// List field; one task per item, the item available as `item`.
    pub over: Sp<String>,
    /// The node that runs once per item.
    pub to: Sp<String>,
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
                    .map(EdgeSpec::Full)
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
        assert_eq!(route.on.loc, Loc::new(10, 11));
        let cases = route.cases.as_ref().unwrap();
        assert_eq!(cases.entries[1].0.value, "true");
        assert_eq!(cases.entries[1].1.loc, Loc::new(11, 27));
        assert!(matches!(&g.edges[0].value, EdgeSpec::Short { to, .. } if to.value == "END"));
        assert_eq!(g.edges[0].loc, Loc::new(7, 5));
    }
}
