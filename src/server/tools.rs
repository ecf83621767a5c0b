//! `GET /api/tools` (every tool's schema and policy, by partition) and
//! `GET /api/tools/health` (what the graphs reference against what the
//! registry and the MCP servers provide right now, and each tool's schema
//! against what dispatch accepts).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::auth::User;
use crate::nodes::GraphCatalog;
use crate::tools::ToolRegistry;
use crate::tools::mcp::Missing;

/// Every partition with its tools: name, description, input schema and
/// the policy calls follow (config overrides applied).
pub(super) async fn list(State(state): State<Arc<AppState>>, _user: User) -> Json<Value> {
    let tools = &state.services.tools;
    let partitions: BTreeMap<String, Vec<Value>> = tools
        .partitions()
        .into_iter()
        .map(|(p, names)| (p, names.iter().filter_map(|n| describe(tools, n)).collect()))
        .collect();
    let servers = state.mcp.as_ref().map(|m| m.status()).unwrap_or_default();
    Json(json!({"partitions": partitions, "servers": servers}))
}

fn describe(tools: &ToolRegistry, name: &str) -> Option<Value> {
    let spec = tools.spec(name)?;
    let policy = tools.policy(name);
    Some(json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": *spec.input_schema,
        "policy": {
            "timeoutMs": policy.timeout.as_millis() as u64,
            "cacheTtlMs": policy.cache_ttl.map(|t| t.as_millis() as u64),
            "maxOutputBytes": policy.max_output_bytes,
            "passThrough": policy.pass_through,
        },
    }))
}

/// Every tool or partition a served graph names, with the tools it
/// resolves to now, the names that resolve to nothing (and why), and what
/// dispatch could never execute as offered (a tool's schema against what a
/// call carries).
///
/// `status` is `healthy` (200) when everything resolves; `degraded` (200)
/// when what is missing is optional (`optional_tools:` of every graph using
/// it) or provided by nothing configured here (an app this install does not
/// run); `down` (503) when something a graph requires is expected from a
/// configured MCP server that does not provide it, or cannot be dispatched.
/// A monitor can poll it like `/readyz`, which does not fail on tools.
pub(super) async fn health(
    State(state): State<Arc<AppState>>,
    _user: User,
) -> (StatusCode, Json<Value>) {
    let tools = &state.services.tools;
    let refs = Refs::of(&state.graphs.catalog());
    let names: Vec<String> = refs.by_name.keys().cloned().collect();
    let (missing, servers_down, servers) = match &state.mcp {
        Some(m) => {
            let h = m.health(&names);
            (h.missing, h.servers_down, h.servers)
        }
        None => (registry_missing(tools, &names), Vec::new(), Vec::new()),
    };
    let referenced: Vec<Value> = refs
        .by_name
        .iter()
        .map(|(name, users)| {
            json!({
                "name": name,
                "usedBy": users,
                "provides": tools.expand(std::slice::from_ref(name)),
                "optional": !refs.required.contains_key(name),
            })
        })
        .collect();
    let mut down = false;
    let missing: Vec<Value> = missing
        .into_iter()
        .map(|m| refs.missing(m, &mut down))
        .collect();
    let dispatch = refs.dispatch(tools, &mut down);
    let ok = missing.is_empty() && dispatch.is_empty();
    let (status, word) = match (ok, down) {
        (true, _) => (StatusCode::OK, "healthy"),
        (false, false) => (StatusCode::OK, "degraded"),
        (false, true) => (StatusCode::SERVICE_UNAVAILABLE, "down"),
    };
    (
        status,
        Json(json!({
            "status": word,
            "ok": ok,
            "referenced": referenced,
            "missing": missing,
            "dispatch": dispatch,
            "serversDown": servers_down,
            "servers": servers,
        })),
    )
}

/// The tool names the served graphs reference.
struct Refs {
    /// Name → the `graph.node`s that use it.
    by_name: BTreeMap<String, Vec<String>>,
    /// Name → the graphs that declare it in `external_tools`.
    external: BTreeMap<String, Vec<String>>,
    /// Name → the graphs that need it (do not list it in `optional_tools`).
    required: BTreeMap<String, Vec<String>>,
}

impl Refs {
    fn of(cat: &GraphCatalog) -> Self {
        let mut refs = Self {
            by_name: BTreeMap::new(),
            external: BTreeMap::new(),
            required: BTreeMap::new(),
        };
        for g in cat.graphs.values() {
            let optional = |name: &str| g.optional_tools.iter().any(|o| o == name);
            for (node, name) in g.tool_refs() {
                if !optional(&name) {
                    let users = refs.required.entry(name.clone()).or_default();
                    if !users.contains(&g.id.to_string()) {
                        users.push(g.id.to_string());
                    }
                }
                refs.by_name
                    .entry(name)
                    .or_default()
                    .push(format!("{}.{node}", g.id));
            }
            for name in &g.external_tools {
                refs.external
                    .entry(name.clone())
                    .or_default()
                    .push(g.id.to_string());
            }
        }
        refs
    }

    /// A missing name as reported, and whether it takes the server `down`
    /// (required by a graph and expected from a configured server).
    fn missing(&self, m: Missing, down: &mut bool) -> Value {
        let users = self.by_name.get(&m.name).cloned().unwrap_or_default();
        let optional = !self.required.contains_key(&m.name);
        let configured = m.server.is_some();
        *down |= !optional && configured;
        let reason = match (self.external.get(&m.name), &m.server) {
            // Declared by the graph file, expected from a server that is
            // not configured here.
            (Some(graphs), None) => format!(
                "declared in `external_tools` of {} and provided by no configured server: add an MCP server with partition = \"{}\" (or tools of that name)",
                graphs.join(", "),
                m.name
            ),
            _ => m.reason,
        };
        json!({"name": m.name, "kind": m.kind, "server": m.server, "reason": reason,
            "usedBy": users, "optional": optional, "configured": configured,
            "requiredBy": self.required.get(&m.name).cloned().unwrap_or_default()})
    }

    /// Each tool's schema against what dispatch accepts; a problem of a
    /// tool a graph requires takes the server `down`.
    fn dispatch(&self, tools: &ToolRegistry, down: &mut bool) -> Vec<Value> {
        tools
            .dispatch_problems()
            .into_iter()
            .map(|(tool, problem)| {
                let needed = tools.spec(&tool).is_some_and(|s| {
                    self.required.contains_key(&tool) || self.required.contains_key(&s.partition)
                });
                *down |= needed && tools.spec(&tool).is_some();
                json!({"tool": tool, "problem": problem, "requiredByAGraph": needed})
            })
            .collect()
    }
}

/// Without MCP servers: the names the registry cannot expand.
fn registry_missing(tools: &ToolRegistry, names: &[String]) -> Vec<Missing> {
    names
        .iter()
        .filter(|n| tools.expand(std::slice::from_ref(n)).is_empty())
        .map(|n| {
            let partition = tools.knows(n);
            Missing {
                name: n.clone(),
                kind: if partition { "partition" } else { "tool" },
                server: None,
                reason: if partition {
                    "the partition has no tools: configure the tools that form it ([tools.sql], [tools.http], [tools.search] or an MCP server with this partition)".to_owned()
                } else {
                    "no tool or partition has this name".to_owned()
                },
            }
        })
        .collect()
}
