//! What the executor runs: a compiled graph.
//!
//! Compilation resolves every name to an index, so the executor never
//! consults spec types or does string lookups on its hot path. The petgraph
//! [`Topology`] is the graph itself (used for validation, drawing and
//! analysis); each node's outgoing [`Transition`]s are the same edges grouped
//! by decision, in the form the executor evaluates after every step.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use petgraph::graph::DiGraph;

use super::expr::Expr;
use super::prompts::Prompts;
use super::spec::Surface;
use crate::state::{DynState, FieldId, StateType, route_key};

/// Index of a node in [`CompiledGraph::nodes`].
pub(crate) type NodeIdx = u32;

/// Where an edge leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A node.
    Node(NodeIdx),
    /// The end of the graph.
    End,
}

/// One decision taken after a node finishes.
#[derive(Clone, Debug)]
pub enum Transition {
    /// Always go there.
    Goto(Target),
    /// Go where the field's value says.
    Route(Route),
    /// One task of `to` per item of the list `over` gives.
    Map {
        /// The list.
        over: Arc<Selector>,
        /// The node run per item.
        to: NodeIdx,
        /// An empty list fails the run (`on_empty: fail`) instead of
        /// skipping `to`: the run goes on from `to`'s edges as if it had
        /// run with nothing to do (`on_empty: skip`, the default).
        fail_on_empty: bool,
    },
    /// Count towards join number `.0`.
    Join(usize),
}

/// What a route or a map edge reads: a state field or an expression.
#[derive(Debug)]
pub enum Selector {
    /// The field's value.
    Field(FieldId),
    /// The expression's value.
    Expr(Expr),
}

impl Selector {
    /// The value routed on: strings as themselves, booleans and integers as
    /// their JSON text, `null` as no value (the route's `default`).
    ///
    /// # Errors
    /// The expression failed: the run fails rather than route silently.
    pub fn key(&self, state: &dyn DynState) -> Result<Option<String>, super::expr::ExprError> {
        Ok(match self {
            Selector::Field(f) => route_key(state, *f),
            Selector::Expr(e) => match e.eval_json(state, &[])? {
                serde_json::Value::String(s) => Some(s),
                serde_json::Value::Bool(b) => Some(b.to_string()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            },
        })
    }

    /// The list a map edge fans out over (empty when it is not a list).
    ///
    /// # Errors
    /// The expression failed.
    pub fn list(
        &self,
        state: &dyn DynState,
    ) -> Result<Vec<serde_json::Value>, super::expr::ExprError> {
        let v = match self {
            Selector::Field(f) => state.get(*f),
            Selector::Expr(e) => e.eval_json(state, &[])?,
        };
        Ok(match v {
            serde_json::Value::Array(items) => items,
            _ => Vec::new(),
        })
    }
}

/// A conditional edge.
#[derive(Clone, Debug)]
pub struct Route {
    /// What it routes on.
    pub on: Arc<Selector>,
    /// The field or expression, for errors.
    pub field_name: Arc<str>,
    /// Value → target.
    pub cases: Vec<(String, Target)>,
    /// Target for other values.
    pub default: Option<Target>,
}

impl Route {
    /// The target for a value, if any.
    pub fn target(&self, value: Option<&str>) -> Option<Target> {
        value
            .and_then(|v| self.cases.iter().find(|(k, _)| k == v).map(|(_, t)| *t))
            .or(self.default)
    }
}

/// A node that waits for several sources.
#[derive(Clone, Debug)]
pub struct Join {
    /// The node that runs when all sources have finished.
    pub target: NodeIdx,
    /// The sources.
    pub sources: Vec<NodeIdx>,
}

/// When and how often to retry a failing node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts (1 = no retry).
    pub attempts: u32,
    /// Delay before the first retry; doubles each time.
    pub backoff: Duration,
    /// Upper bound on the delay.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 1,
            backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Delay after failed attempt `attempt` (1-based), with ±20 % jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_backoff);
        base.mul_f64(0.8 + fastrand::f64() * 0.4)
    }
}

/// A compiled node; `N` is what it runs (`crate::nodes` decides).
#[derive(Debug)]
pub struct CompiledNode<N> {
    /// Id from the graph file.
    pub id: Arc<str>,
    /// Kind name.
    pub kind: Arc<str>,
    /// Behaviour.
    pub imp: N,
    /// Fields it may write.
    pub writes: Vec<FieldId>,
    /// UI surface for its streamed output.
    pub surface: Surface,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// Time limit per attempt.
    pub timeout: Option<Duration>,
    /// What happens after it finishes.
    pub out: Vec<Transition>,
    /// Description from the file.
    pub description: Option<String>,
    /// The tools and partitions it calls (expanded per call; kept here so
    /// health checks can compare them with what is provided).
    pub tools: Vec<String>,
    /// Client-side tools it offers: the front end runs them and sends
    /// their output back (see [`BuildCx::client_tool`](super::BuildCx::client_tool)).
    pub client_tools: Vec<String>,
    /// The graph it runs, for a subgraph node.
    pub subgraph: Option<Arc<CompiledGraph<N>>>,
    /// The values it writes to a field, when it declares them (a router's
    /// intents).
    pub declared: Option<(FieldId, Vec<String>)>,
    /// Its kind settings as written (for the API and the studio).
    pub settings: serde_json::Value,
    /// The prompt template it renders, if any.
    pub prompt: Option<String>,
    /// Progress shown when it starts (`status:`).
    pub status: Option<super::expr::ValueExpr>,
}

/// Node weights of the petgraph topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// A node (same index as in [`CompiledGraph::nodes`]).
    Node(NodeIdx),
    /// END.
    End,
}

/// Edge weights of the petgraph topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// Unconditional.
    Plain,
    /// Conditional, taken for this value.
    Case(String),
    /// Conditional default.
    Default,
    /// Map fan-out over this field.
    Map(String),
    /// Into a join.
    Join,
}

impl EdgeKind {
    /// Whether the edge is taken only for some values.
    pub fn is_conditional(&self) -> bool {
        matches!(self, EdgeKind::Case(_) | EdgeKind::Default)
    }
}

/// The graph as petgraph sees it: node `i` is node `i` of the graph, the
/// last node is END.
pub(crate) type Topology = DiGraph<Slot, EdgeKind>;

/// A graph ready to run; `N` is what its nodes run.
#[derive(Debug)]
pub struct CompiledGraph<N> {
    /// Graph id (file stem).
    pub id: Arc<str>,
    /// Content hash of the graph file and its prompts.
    pub version: String,
    /// Description from the file.
    pub description: Option<String>,
    /// The state type.
    pub state: StateType,
    /// Nodes in file order.
    pub nodes: Vec<CompiledNode<N>>,
    /// Nodes of the first superstep.
    pub entry: Vec<NodeIdx>,
    /// Joins.
    pub joins: Vec<Join>,
    /// Maximum supersteps.
    pub recursion_limit: u32,
    /// The petgraph graph.
    pub topology: Topology,
    /// The prompts the nodes render.
    pub prompts: Arc<Prompts>,
    /// Source file.
    pub file: PathBuf,
    /// How `POST /api/chat` fills the state (`chat:`).
    pub chat: ChatIo,
    /// Tools or partitions the file says configuration provides
    /// (`external_tools:`); they may resolve to nothing.
    pub external_tools: Vec<String>,
    /// Tools or partitions the graph works without (`optional_tools:`):
    /// health reports them missing as `degraded`.
    pub optional_tools: Vec<String>,
    /// Each node's surface by id, shared by every run's stream settings
    /// (`sse::BridgeConfig`) rather than copied into each: a finished run's
    /// stream lingers for resumes, and after a load a thousand copies of
    /// these maps kept megabytes of allocator pages resident.
    pub node_surfaces: Arc<HashMap<String, Surface>>,
    /// Each node's kind by id, shared the same way.
    pub node_kinds: Arc<HashMap<String, String>>,
}

/// How a chat request maps onto the state (`chat:` in the graph file).
#[derive(Clone, Debug, Default)]
pub struct ChatIo {
    /// The field receiving the conversation.
    pub history: Option<Arc<str>>,
    /// The field receiving the newest user message's text.
    pub text: Option<Arc<str>>,
    /// The field holding the turn's answer.
    pub answer: Option<Arc<str>>,
    /// Fields a turn takes over from the previous turn's final state.
    pub carry: Vec<Arc<str>>,
    /// Request body key → field it may set.
    pub inputs: Vec<(String, Arc<str>)>,
}

impl<N> CompiledGraph<N> {
    /// A node's index by id.
    pub fn node_index(&self, id: &str) -> Option<NodeIdx> {
        self.nodes
            .iter()
            .position(|n| &*n.id == id)
            .map(|i| i as NodeIdx)
    }

    /// The surface of a node (by id), `hidden` for unknown ids.
    pub fn surface(&self, id: &str) -> Surface {
        self.node_index(id)
            .map_or(Surface::Hidden, |i| self.nodes[i as usize].surface)
    }

    /// `(node id, tool or partition name)` for every tool entry of every
    /// node, subgraphs included (their node ids prefixed `sub/`).
    pub fn tool_refs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for node in &self.nodes {
            for t in &node.tools {
                out.push((node.id.to_string(), t.clone()));
            }
            if let Some(sub) = &node.subgraph {
                for (n, t) in sub.tool_refs() {
                    out.push((format!("{}/{n}", node.id), t));
                }
            }
        }
        out
    }
}
