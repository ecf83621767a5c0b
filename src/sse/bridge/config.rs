//! What the bridge knows of the graph and the response: each node's
//! surface and kind, the answer field, the client-side tools. Recorded in
//! `run_started.stream`, so a replay renders with the settings the run
//! streamed with.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::graph::spec::Surface;

/// What the bridge needs to know about the graph and the response.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// The assistant message id (fresh per response).
    pub message_id: String,
    /// `start.messageMetadata`: run id, request id, graph, model facts.
    pub metadata: Value,
    /// Surface by node id (shared with the graph and its other runs).
    pub surfaces: Arc<HashMap<String, Surface>>,
    /// Kind by node id (shown in thinking parts).
    pub kinds: Arc<HashMap<String, String>>,
    /// Minimum event time between text-only updates of a thinking part.
    pub thinking_interval_us: u64,
    /// The field holding the answer (`chat.answer`). When the run streamed
    /// no answer text (the answer was computed, not generated), its final
    /// value is sent as one text part before `finish`, so the user sees it.
    pub answer: Option<String>,
    /// Client-side tools (the front end runs them): their parts are
    /// `tool-<name>`, not `dynamic-tool`, so `onToolCall` / `addToolOutput`
    /// address them by name.
    pub client_tools: Vec<String>,
}

impl BridgeConfig {
    /// Surfaces and kinds taken from a compiled graph.
    pub fn for_graph(graph: &crate::nodes::Graph, message_id: String, metadata: Value) -> Self {
        Self {
            message_id,
            metadata,
            surfaces: Arc::clone(&graph.node_surfaces),
            kinds: Arc::clone(&graph.node_kinds),
            thinking_interval_us: 250_000,
            answer: graph.chat.answer.as_deref().map(str::to_owned),
            client_tools: graph
                .nodes
                .iter()
                .flat_map(|n| n.client_tools.iter().cloned())
                .collect(),
        }
    }

    /// The settings as recorded in `run_started.stream`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "messageId": self.message_id,
            "metadata": self.metadata,
            "surfaces": self.surfaces,
            "kinds": self.kinds,
            "thinkingIntervalUs": self.thinking_interval_us,
        });
        // Absent in runs recorded before answers were sent, which then
        // replay as they streamed.
        if let Some(a) = &self.answer {
            v["answer"] = json!(a);
        }
        if !self.client_tools.is_empty() {
            v["clientTools"] = json!(self.client_tools);
        }
        v
    }

    /// Settings recorded with [`BridgeConfig::to_json`].
    pub fn from_json(v: &Value) -> Option<Self> {
        Some(Self {
            message_id: v["messageId"].as_str()?.to_owned(),
            metadata: v["metadata"].clone(),
            surfaces: serde_json::from_value(v["surfaces"].clone()).ok()?,
            kinds: serde_json::from_value(v["kinds"].clone()).ok()?,
            thinking_interval_us: v["thinkingIntervalUs"].as_u64().unwrap_or(250_000),
            answer: v["answer"].as_str().map(str::to_owned),
            client_tools: serde_json::from_value(v["clientTools"].clone()).unwrap_or_default(),
        })
    }

    /// A node's surface; nested subgraph nodes (`parent/child`) take their
    /// parent's.
    pub(super) fn surface(&self, node: &str) -> Surface {
        let top = node.split('/').next().unwrap_or(node);
        self.surfaces.get(top).copied().unwrap_or(Surface::Hidden)
    }

    /// Whether a tool's parts are `dynamic-tool` (it runs on the server).
    pub(super) fn dynamic(&self, tool: &str) -> bool {
        !self.client_tools.iter().any(|t| t == tool)
    }

    pub(super) fn kind(&self, node: &str) -> &str {
        let top = node.split('/').next().unwrap_or(node);
        self.kinds.get(top).map_or("node", String::as_str)
    }
}
