//! Tools a model may call: the [`Tool`] trait and the [`ToolRegistry`].
//!
//! The registry is where the runtime's rules for tool calls live: a node may
//! only call the tools its graph file lists, arguments are checked against
//! the tool's JSON schema before anything runs, every call has a time limit,
//! and every failure comes back as structured data
//! (`{error: true, type, message, details}`) for the model to correct itself
//! — a failing tool never fails the run.

pub mod builtin;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::events::ToolFailure;
use crate::llm::ToolDef;

/// Default time limit of a tool call.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a tool is, as the registry and the model see it.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    /// Unique name.
    pub name: String,
    /// What it does (shown to the model).
    pub description: String,
    /// JSON schema of its arguments.
    pub input_schema: Arc<Value>,
    /// The partition it belongs to (`basic`, `data`, `viz`, …).
    pub partition: String,
    /// Time limit per call (default [`DEFAULT_TOOL_TIMEOUT`]).
    pub timeout: Option<Duration>,
}

/// Why a tool call failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not match the schema (or are not JSON).
    #[error("invalid arguments: {message}")]
    Validation {
        /// Summary.
        message: String,
        /// Each violation.
        details: Value,
    },
    /// The tool, or something it looked for, does not exist.
    #[error("{message}")]
    NotFound {
        /// Summary.
        message: String,
        /// E.g. the available choices.
        details: Value,
    },
    /// The call took too long.
    #[error("tool call timed out after {0:?}")]
    Timeout(Duration),
    /// The node may not call this tool.
    #[error("tool `{tool}` is not available to this node")]
    NotAllowed {
        /// The tool asked for.
        tool: String,
        /// The tools the node may call.
        allowed: Vec<String>,
    },
    /// The tool ran and failed.
    #[error("{0}")]
    Execution(String),
}

impl ToolError {
    /// The structured failure given back to the model.
    pub fn to_failure(&self) -> ToolFailure {
        let (kind, details) = match self {
            ToolError::Validation { details, .. } => ("validation_error", details.clone()),
            ToolError::NotFound { details, .. } => ("not_found", details.clone()),
            ToolError::Timeout(d) => ("timeout", json!({ "timeout_ms": d.as_millis() as u64 })),
            ToolError::NotAllowed { allowed, .. } => ("not_allowed", json!({ "available": allowed })),
            ToolError::Execution(_) => ("execution_error", Value::Null),
        };
        ToolFailure { kind: kind.into(), message: self.to_string(), details }
    }
}

/// The payload a model sees for a failure: `{error: true, type, message, details}`.
pub fn failure_payload(f: &ToolFailure) -> Value {
    let mut v = json!({ "error": true, "type": f.kind, "message": f.message });
    if !f.details.is_null() {
        v["details"] = f.details.clone();
    }
    v
}

/// A callable tool.
pub trait Tool: Send + Sync {
    /// Its spec.
    fn spec(&self) -> &ToolSpec;

    /// Runs it with arguments already checked against the schema.
    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>>;
}

struct Entry {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

/// Errors registering a tool.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Two tools (or a tool and a partition) share a name.
    #[error("tool name `{0}` is already taken by a tool or partition")]
    Duplicate(String),
    /// The input schema is not a valid JSON schema.
    #[error("tool `{tool}` has an invalid input schema: {message}")]
    Schema {
        /// The tool.
        tool: String,
        /// Why.
        message: String,
    },
}

/// All tools, by name, grouped into partitions.
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Entry>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry").field("tools", &self.tools.keys().collect::<Vec<_>>()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with the built-in tools ([`builtin`]).
    pub fn with_builtins() -> Self {
        let mut r = Self::new();
        for tool in builtin::all() {
            // Built-in names are distinct and their schemas are valid.
            if let Err(e) = r.register(tool) {
                tracing::error!(error = %e, "built-in tool rejected");
            }
        }
        r
    }

    /// Adds a tool.
    ///
    /// # Errors
    /// Its name is taken (by a tool or a partition) or its schema is invalid.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        let name = spec.name.clone();
        if self.tools.contains_key(&name) || self.partitions().contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        if self.tools.values().any(|e| e.tool.spec().partition == name) {
            return Err(RegistryError::Duplicate(name));
        }
        let validator = jsonschema::validator_for(&spec.input_schema)
            .map_err(|e| RegistryError::Schema { tool: name.clone(), message: e.to_string() })?;
        self.tools.insert(name, Entry { tool, validator });
        Ok(())
    }

    /// Tool names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Partition → tool names.
    pub fn partitions(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, e) in &self.tools {
            out.entry(e.tool.spec().partition.clone()).or_default().push(name.clone());
        }
        out
    }

    /// The tools a graph-file entry names: itself if it is a tool, all of
    /// its tools if it is a partition, `None` if it is neither.
    pub fn expand(&self, entry: &str) -> Option<Vec<String>> {
        if self.tools.contains_key(entry) {
            return Some(vec![entry.to_owned()]);
        }
        self.partitions().remove(entry)
    }

    /// The spec of a tool.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|e| e.tool.spec())
    }

    /// Definitions to offer the model.
    pub fn defs(&self, names: &[String]) -> Vec<ToolDef> {
        names
            .iter()
            .filter_map(|n| self.tools.get(n))
            .map(|e| {
                let s = e.tool.spec();
                ToolDef { name: s.name.clone(), description: s.description.clone(), parameters: Arc::clone(&s.input_schema) }
            })
            .collect()
    }

    /// Calls `name` with `args` on behalf of a node allowed to use `allowed`.
    ///
    /// # Errors
    /// A [`ToolError`] for the model: not allowed, not found, invalid
    /// arguments, timeout or the tool's own failure.
    pub async fn call(&self, name: &str, args: Value, allowed: &[String]) -> Result<Value, ToolError> {
        if !allowed.iter().any(|a| a == name) {
            return Err(ToolError::NotAllowed { tool: name.to_owned(), allowed: allowed.to_vec() });
        }
        let Some(entry) = self.tools.get(name) else {
            return Err(ToolError::NotFound {
                message: format!("no tool named `{name}`"),
                details: json!({ "available": allowed }),
            });
        };
        if !entry.validator.is_valid(&args) {
            let problems: Vec<Value> = entry
                .validator
                .iter_errors(&args)
                .map(|e| json!({ "path": e.instance_path().to_string(), "message": e.to_string() }))
                .collect();
            let first = problems.first().and_then(|p| p["message"].as_str()).unwrap_or("invalid").to_owned();
            return Err(ToolError::Validation { message: first, details: json!({ "errors": problems }) });
        }
        let limit = entry.tool.spec().timeout.unwrap_or(DEFAULT_TOOL_TIMEOUT);
        match tokio::time::timeout(limit, entry.tool.call(args)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout(limit)),
        }
    }
}

/// Parses a model's argument text; empty text means `{}`.
///
/// # Errors
/// The text is not JSON.
pub fn parse_arguments(text: &str) -> Result<Value, ToolError> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(text).map_err(|e| ToolError::Validation {
        message: format!("arguments are not valid JSON: {e}"),
        details: json!({ "arguments": text }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_are_checked_and_failures_are_structured() {
        let r = ToolRegistry::with_builtins();
        let allowed = r.expand("basic").unwrap();
        assert!(allowed.contains(&"calculator".to_owned()));
        let ok = r.call("calculator", json!({"expression": "2 * (3 + 4)"}), &allowed).await.unwrap();
        assert_eq!(ok["result"], 14);
        let bad = r.call("calculator", json!({"expr": 1}), &allowed).await.unwrap_err();
        assert_eq!(bad.to_failure().kind, "validation_error");
        let denied = r.call("calculator", json!({"expression": "1"}), &[]).await.unwrap_err();
        assert_eq!(denied.to_failure().kind, "not_allowed");
        let missing = r.call("nope", json!({}), &["nope".into()]).await.unwrap_err();
        assert_eq!(missing.to_failure().kind, "not_found");
        let payload = failure_payload(&bad.to_failure());
        assert_eq!(payload["error"], true);
        assert!(payload["details"]["errors"].is_array());
    }
}
