//! Tools a model may call: the [`Tool`] trait and the [`ToolRegistry`].
//!
//! The registry is where the runtime's rules for tool calls live: a node may
//! only call the tools its graph file lists, arguments are checked against
//! the tool's JSON schema before anything runs, every call has a time limit,
//! and every failure comes back as structured data
//! (`{error: true, type, message, details}`) for the model to correct itself
//! — a failing tool never fails the run.

pub(crate) mod builtin;
mod cache;
pub(crate) mod config;
pub(crate) mod http;
pub(crate) mod lock;
pub(crate) mod mcp;
mod registry;
pub(crate) mod search;
#[cfg(feature = "postgres")]
pub(crate) mod sql;

pub(crate) use registry::RegistryError;
pub use registry::{ToolOutcome, ToolRegistry};

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::events::ToolFailure;

/// Default time limit of a tool call.
pub(crate) const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// Default limit on a tool result given to the model.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// How the registry treats calls to a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Time limit per call.
    pub timeout: Duration,
    /// Results are cached this long, keyed by tool and arguments (none:
    /// never cached — clocks, writes).
    pub cache_ttl: Option<Duration>,
    /// Results longer than this (as JSON text) are cut, with a marker.
    pub max_output_bytes: usize,
    /// The result is display-ready (a table, a chart): it goes to the user
    /// verbatim instead of through the model.
    pub pass_through: bool,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TOOL_TIMEOUT,
            cache_ttl: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            pass_through: false,
        }
    }
}

/// A partial [`ToolPolicy`] from config: only the fields it sets replace
/// the tool's own. Kept partial in the registry because tools (MCP ones)
/// may register after config is applied, and an override of one field must
/// not reset the others to defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyOverride {
    /// Replaces [`ToolPolicy::timeout`].
    pub timeout: Option<Duration>,
    /// Replaces [`ToolPolicy::cache_ttl`] (`Some(None)`: never cache).
    pub cache_ttl: Option<Option<Duration>>,
    /// Replaces [`ToolPolicy::max_output_bytes`].
    pub max_output_bytes: Option<usize>,
    /// Replaces [`ToolPolicy::pass_through`].
    pub pass_through: Option<bool>,
}

impl PolicyOverride {
    /// `base` with this override's fields applied.
    pub fn apply(&self, mut base: ToolPolicy) -> ToolPolicy {
        if let Some(t) = self.timeout {
            base.timeout = t;
        }
        if let Some(ttl) = self.cache_ttl {
            base.cache_ttl = ttl;
        }
        if let Some(b) = self.max_output_bytes {
            base.max_output_bytes = b;
        }
        if let Some(p) = self.pass_through {
            base.pass_through = p;
        }
        base
    }
}

/// What a tool is, as the registry and the model see it.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    /// Unique name.
    pub name: String,
    /// What it does (shown to the model).
    pub description: String,
    /// JSON schema of its arguments.
    pub input_schema: Arc<Value>,
    /// JSON schema of what it returns, when it declares one (built-in
    /// tools do; an MCP server's `outputSchema`, whose calls return that
    /// `structuredContent`). `check` types the templates that read a
    /// result with it: `result.results[0].content` of `web_search` is an
    /// error, its results have `snippet`.
    pub output_schema: Option<Arc<Value>>,
    /// The partition it belongs to (`basic`, `data`, `viz`, …).
    pub partition: String,
    /// How calls are treated (config may override per tool).
    pub policy: ToolPolicy,
}

/// The output schema of a built-in tool that registers only once
/// configured (`web_search` with `[tools.search]`, `http_fetch` with
/// `[tools.http]`): `check` knows their shapes without the configuration.
pub(crate) fn configurable_output_schema(name: &str) -> Option<Value> {
    match name {
        "web_search" => Some(search::output_schema()),
        "http_fetch" => Some(http::output_schema()),
        _ => None,
    }
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
    /// A failure served from a recording, exactly as it was.
    #[error("{}", .0.message)]
    Recorded(ToolFailure),
}

impl ToolError {
    /// The failure type: `validation_error`, `not_found`, `timeout`,
    /// `not_allowed` or `execution_error`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Validation { .. } => "validation_error",
            ToolError::NotFound { .. } => "not_found",
            ToolError::Timeout(_) => "timeout",
            ToolError::NotAllowed { .. } => "not_allowed",
            ToolError::Execution(_) => "execution_error",
            ToolError::Recorded(_) => "recorded",
        }
    }

    /// The structured failure given back to the model.
    pub fn to_failure(&self) -> ToolFailure {
        if let ToolError::Recorded(f) = self {
            return f.clone();
        }
        let (kind, details) = match self {
            ToolError::Validation { details, .. } => ("validation_error", details.clone()),
            ToolError::NotFound { details, .. } => ("not_found", details.clone()),
            ToolError::Timeout(d) => ("timeout", json!({ "timeout_ms": d.as_millis() as u64 })),
            ToolError::NotAllowed { allowed, .. } => {
                ("not_allowed", json!({ "available": allowed }))
            }
            ToolError::Execution(_) | ToolError::Recorded(_) => ("execution_error", Value::Null),
        };
        ToolFailure {
            kind: kind.into(),
            message: self.to_string(),
            details,
        }
    }
}

/// The payload a model sees for a failure: `{error: true, type, message, details}`.
pub(crate) fn failure_payload(f: &ToolFailure) -> Value {
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

/// Parses a model's argument text; empty text means `{}`.
///
/// # Errors
/// The text is not JSON.
pub(crate) fn parse_arguments(text: &str) -> Result<Value, ToolError> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(text).map_err(|e| ToolError::Validation {
        message: format!("arguments are not valid JSON: {e}"),
        details: json!({ "arguments": text }),
    })
}
