//! `[tools]`: which built-in tool families are configured, and per-tool
//! policy overrides.
//!
//! ```toml
//! [tools.http]
//! allow = ["en.wikipedia.org", "*.example.com"]
//! [tools.search]
//! url = "http://127.0.0.1:8888"          # a SearXNG-compatible JSON endpoint
//! [tools.sql]
//! database_url = "postgres://reader@127.0.0.1/analytics"
//! [tools.sql.sources.fi_reporting]
//! table = "fi_reporting"
//! dimensions = ["company", "period", "account"]
//! measures = ["amount"]
//! [tools.policy.web_search]
//! cache_ttl = "5m"
//! [tools.policy.current_time]
//! cache_ttl = "0s"                        # never cached
//! [tools.policy.render_table]
//! pass_through = true                     # shown to the user verbatim
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::http::HttpFetchConfig;
use super::search::SearchConfig;
#[cfg(feature = "postgres")]
use super::sql::SqlConfig;
use super::{PolicyOverride, ToolRegistry};
use crate::units::{Bytes, Dur};

/// Overrides of one tool's [`ToolPolicy`](super::ToolPolicy).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Time limit per call.
    pub timeout: Option<Dur>,
    /// Cache results this long (`0s` = never).
    pub cache_ttl: Option<Dur>,
    /// Cut results beyond this size.
    pub max_output_bytes: Option<Bytes>,
    /// Show results to the user verbatim.
    pub pass_through: Option<bool>,
}

/// The `[tools]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// `http_fetch` (partition `web`).
    pub http: Option<HttpFetchConfig>,
    /// `web_search` (partition `web`).
    pub search: Option<SearchConfig>,
    /// SQL sources (partition `data`).
    #[cfg(feature = "postgres")]
    pub sql: Option<SqlConfig>,
    /// MCP servers.
    pub mcp: super::mcp::McpConfig,
    /// Per-tool policy overrides, by tool name.
    pub policy: BTreeMap<String, PolicyConfig>,
}

impl ToolsConfig {
    /// Registers the configured families and applies the policy overrides
    /// (MCP servers are started separately; they connect in the background).
    ///
    /// # Errors
    /// A configuration mistake, described.
    pub fn apply(&self, registry: &ToolRegistry) -> Result<(), String> {
        if let Some(c) = &self.http {
            super::http::register(registry, c).map_err(|e| format!("[tools.http]: {e}"))?;
        }
        if let Some(c) = &self.search {
            super::search::register(registry, c).map_err(|e| format!("[tools.search]: {e}"))?;
        }
        #[cfg(feature = "postgres")]
        if let Some(c) = &self.sql {
            super::sql::register(registry, c).map_err(|e| format!("[tools.sql]: {e}"))?;
        }
        for (tool, p) in &self.policy {
            registry.set_policy(
                tool,
                PolicyOverride {
                    timeout: p.timeout.map(|t| t.0),
                    cache_ttl: p
                        .cache_ttl
                        .map(|ttl| (ttl.0 > Duration::ZERO).then_some(ttl.0)),
                    max_output_bytes: p.max_output_bytes.map(|b| b.0),
                    pass_through: p.pass_through,
                },
            );
        }
        Ok(())
    }
}
