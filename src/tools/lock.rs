//! The tool lock file, `graphs/tools.lock.json`: the tools each configured
//! MCP server lists, written by `stategraph tools lock` (which starts the
//! servers) and committed beside the graphs.
//!
//! `check` cannot start servers (it runs in CI, offline, in an editor), so
//! it reads this file instead: with it, an agent's `tools`, its bound
//! arguments, `approve:` and `fill_args` are checked against the tools the
//! graph will really have, "did you mean" included, and `approve:` accepts
//! any tool of a locked partition. `serve` compares each server's live list
//! with the lock and warns when they differ (the lock is then stale: run
//! `stategraph tools lock` again and commit it).
//!
//! ```json
//! {"version": 1, "servers": {"business": {"partition": "business",
//!   "tools": [{"name": "find_customer", "description": "…", "input_schema": {…}}]}}}
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The file's name, in the graph directory.
pub(crate) const LOCK_FILE: &str = "tools.lock.json";

/// The format version written.
const VERSION: u32 = 1;

/// The lock file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolLock {
    /// Format version (1).
    pub version: u32,
    /// Server name (as configured) → what it listed.
    pub servers: BTreeMap<String, LockedServer>,
}

/// What one server listed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedServer {
    /// The partition its tools form.
    pub partition: String,
    /// Its tools, by name.
    pub tools: Vec<LockedTool>,
}

/// One locked tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedTool {
    /// Name.
    pub name: String,
    /// Description, as the server gave it.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Arc<Value>,
    /// JSON Schema of its result (the MCP `outputSchema`: the tool returns
    /// `structuredContent` of this shape), when it declares one: `check`
    /// types the templates that read the result with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Arc<Value>>,
}

impl ToolLock {
    /// A lock of `servers`' tools, names sorted so the file diffs well.
    pub fn new(servers: BTreeMap<String, LockedServer>) -> Self {
        let mut servers = servers;
        for s in servers.values_mut() {
            s.tools.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Self {
            version: VERSION,
            servers,
        }
    }

    /// Reads the lock in `dir`, if there is one.
    ///
    /// # Errors
    /// It exists but cannot be read or is not a lock file (the message says
    /// why, for a diagnostic).
    pub fn read_in(dir: &Path) -> Result<Option<Self>, String> {
        let path = dir.join(LOCK_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read it: {e}")),
        };
        let lock: Self = serde_json::from_str(&text).map_err(|e| {
            format!("not a tool lock file ({e}); write it again with `stategraph tools lock`")
        })?;
        if lock.version != VERSION {
            return Err(format!(
                "version {} is not one this stategraph reads ({VERSION}); write it again with `stategraph tools lock`",
                lock.version
            ));
        }
        Ok(Some(lock))
    }

    /// The file's text (pretty JSON, ending with a newline).
    pub fn to_text(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Every locked tool with its partition.
    pub fn tools(&self) -> impl Iterator<Item = (&str, &LockedTool)> {
        self.servers
            .values()
            .flat_map(|s| s.tools.iter().map(move |t| (s.partition.as_str(), t)))
    }

    /// What makes the lock ambiguous about where a tool comes from:
    /// servers sharing a partition (configuration forbids it, so the lock
    /// is stale or was edited) and tool names more than one server lists
    /// (at run time only the server that starts first registers such a
    /// name). Each names the servers.
    pub fn ambiguities(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut by_partition: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut by_tool: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, s) in &self.servers {
            by_partition.entry(&s.partition).or_default().push(name);
            for t in &s.tools {
                by_tool.entry(&t.name).or_default().push(name);
            }
        }
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(" and ")
        };
        for (p, servers) in by_partition.iter().filter(|(_, v)| v.len() > 1) {
            out.push(format!(
                "servers {} share partition `{p}`; each server needs its own partition (run `stategraph tools lock` again)",
                list(servers)
            ));
        }
        for (t, servers) in by_tool.iter().filter(|(_, v)| v.len() > 1) {
            out.push(format!(
                "tool `{t}` is listed by servers {}; only the first to start would register it — give one server a `prefix`",
                list(servers)
            ));
        }
        out
    }

    /// How a server's live tool list differs from the lock: tools missing,
    /// tools added, tools whose schema changed. Empty when they agree.
    pub fn differences(&self, server: &str, live: &[LockedTool]) -> Vec<String> {
        let Some(locked) = self.servers.get(server) else {
            return vec![format!(
                "server `{server}` is not in {LOCK_FILE} (run `stategraph tools lock`)"
            )];
        };
        let mut out = Vec::new();
        for t in &locked.tools {
            match live.iter().find(|l| l.name == t.name) {
                None => out.push(format!(
                    "`{}` is locked but the server no longer lists it",
                    t.name
                )),
                Some(l) if l.input_schema != t.input_schema => {
                    out.push(format!(
                        "`{}` takes different arguments than locked",
                        t.name
                    ));
                }
                Some(l) if l.output_schema != t.output_schema => {
                    out.push(format!(
                        "`{}` returns a different shape than locked",
                        t.name
                    ));
                }
                Some(_) => {}
            }
        }
        for l in live {
            if !locked.tools.iter().any(|t| t.name == l.name) {
                out.push(format!(
                    "`{}` is listed by the server but not locked",
                    l.name
                ));
            }
        }
        out
    }
}

/// The tools registered in `partition` right now, as a lock lists them.
#[cfg(feature = "server")]
pub(crate) fn live(registry: &super::ToolRegistry, partition: &str) -> Vec<LockedTool> {
    let members = registry.partitions().remove(partition).unwrap_or_default();
    members
        .iter()
        .filter_map(|n| registry.spec(n))
        .map(|s| LockedTool {
            name: s.name,
            description: s.description,
            input_schema: s.input_schema,
            output_schema: s.output_schema,
        })
        .collect()
}

/// Warns (log) about every way the live tool lists of `servers` (name,
/// partition) differ from the lock in `dir`, if there is one (`serve`
/// calls it once the servers are up); returns the warnings, as
/// `(server, difference)`.
#[cfg(feature = "server")]
pub(crate) fn warn_if_stale(
    registry: &super::ToolRegistry,
    dir: &Path,
    servers: &[(String, String)],
) -> Vec<(String, String)> {
    let lock = match ToolLock::read_in(dir) {
        Ok(Some(lock)) => lock,
        Ok(None) => return Vec::new(),
        Err(why) => {
            tracing::warn!(file = %dir.join(LOCK_FILE).display(), %why, "the tool lock file cannot be used");
            return vec![(String::new(), why)];
        }
    };
    let mut out = Vec::new();
    for (name, partition) in servers {
        for diff in lock.differences(name, &live(registry, partition)) {
            tracing::warn!(server = %name, difference = %diff, "MCP server's live tools differ from {LOCK_FILE}; run `stategraph tools lock` and commit it");
            out.push((name.clone(), diff));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value) -> LockedTool {
        LockedTool {
            name: name.into(),
            description: String::new(),
            input_schema: Arc::new(schema),
            output_schema: None,
        }
    }

    /// A tool as an MCP server registers it (only its spec matters here).
    struct Listed(crate::tools::ToolSpec);

    impl crate::tools::Tool for Listed {
        fn spec(&self) -> &crate::tools::ToolSpec {
            &self.0
        }
        fn call(
            &self,
            _: Value,
        ) -> futures::future::BoxFuture<'_, Result<Value, crate::tools::ToolError>> {
            Box::pin(async { Ok(Value::Null) })
        }
    }

    #[test]
    fn serve_warns_when_a_live_list_differs_from_the_lock() {
        let registry = crate::tools::ToolRegistry::new();
        let spec = |name: &str, output: Option<Value>| crate::tools::ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: Arc::new(json!({"type": "object"})),
            output_schema: output.map(Arc::new),
            partition: "kb".into(),
            policy: crate::tools::ToolPolicy::default(),
        };
        let live_tools: Vec<Arc<dyn crate::tools::Tool>> = vec![
            Arc::new(Listed(spec("search", Some(json!({"type": "object"}))))),
            Arc::new(Listed(spec("open_ticket", None))),
        ];
        registry.set_partition("kb", live_tools).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let servers = [("docs".to_owned(), "kb".to_owned())];
        assert!(
            warn_if_stale(&registry, dir.path(), &servers).is_empty(),
            "no lock, nothing to compare"
        );
        // The lock as `stategraph tools lock` writes it from the live list: no warning.
        let fresh = ToolLock::new(BTreeMap::from([(
            "docs".to_owned(),
            LockedServer {
                partition: "kb".into(),
                tools: live(&registry, "kb"),
            },
        )]));
        std::fs::write(dir.path().join(LOCK_FILE), fresh.to_text()).unwrap();
        assert_eq!(warn_if_stale(&registry, dir.path(), &servers), []);
        // A lock from before the server changed: each difference is warned.
        let mut stale = fresh.clone();
        let docs = stale.servers.get_mut("docs").unwrap();
        docs.tools.retain(|t| t.name != "open_ticket");
        docs.tools[0].output_schema = None;
        docs.tools
            .push(tool("close_ticket", json!({"type": "object"})));
        std::fs::write(dir.path().join(LOCK_FILE), stale.to_text()).unwrap();
        let warned: Vec<String> = warn_if_stale(&registry, dir.path(), &servers)
            .into_iter()
            .map(|(server, diff)| format!("{server}: {diff}"))
            .collect();
        assert_eq!(
            warned,
            [
                "docs: `search` returns a different shape than locked",
                "docs: `close_ticket` is locked but the server no longer lists it",
                "docs: `open_ticket` is listed by the server but not locked",
            ]
        );
    }

    #[test]
    fn ambiguous_locks_name_the_servers() {
        let server = |partition: &str, tools: &[&str]| LockedServer {
            partition: partition.into(),
            tools: tools
                .iter()
                .map(|t| tool(t, json!({"type": "object"})))
                .collect(),
        };
        let lock = ToolLock::new(BTreeMap::from([
            ("docs".to_owned(), server("kb", &["search"])),
            ("tickets".to_owned(), server("kb", &["search", "open"])),
            ("time".to_owned(), server("time", &["now"])),
        ]));
        assert_eq!(
            lock.ambiguities(),
            [
                "servers `docs` and `tickets` share partition `kb`; each server needs its own partition (run `stategraph tools lock` again)",
                "tool `search` is listed by servers `docs` and `tickets`; only the first to start would register it — give one server a `prefix`",
            ]
        );
        let registry = crate::tools::ToolRegistry::new();
        registry.add_locked(&lock);
        assert_eq!(
            registry.lock_conflict("search"),
            Some(vec!["docs".to_owned(), "tickets".to_owned()])
        );
        assert_eq!(registry.lock_conflict("open"), None);
        assert_eq!(
            registry.origin_at_check("now").as_deref(),
            Some("MCP server `time`, per tools.lock.json")
        );
    }

    #[test]
    fn a_lock_round_trips_and_names_what_changed() {
        let lock = ToolLock::new(BTreeMap::from([(
            "business".to_owned(),
            LockedServer {
                partition: "business".into(),
                tools: vec![
                    tool("b", json!({"type": "object"})),
                    tool("a", json!({"type": "object"})),
                ],
            },
        )]));
        assert_eq!(lock.servers["business"].tools[0].name, "a", "sorted");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), lock.to_text()).unwrap();
        assert_eq!(ToolLock::read_in(dir.path()).unwrap(), Some(lock.clone()));
        let live = [
            tool("a", json!({"type": "object", "properties": {"x": {}}})),
            tool("c", json!({"type": "object"})),
        ];
        assert_eq!(
            lock.differences("business", &live),
            [
                "`a` takes different arguments than locked",
                "`b` is locked but the server no longer lists it",
                "`c` is listed by the server but not locked"
            ]
        );
        assert!(lock.differences("other", &live)[0].contains("not in tools.lock.json"));
        std::fs::write(
            dir.path().join(LOCK_FILE),
            "{\"version\": 9, \"servers\": {}}",
        )
        .unwrap();
        assert!(
            ToolLock::read_in(dir.path())
                .unwrap_err()
                .contains("version 9")
        );
        assert_eq!(ToolLock::read_in(&dir.path().join("none")).unwrap(), None);
    }
}
