//! What `check` knows of tools: the registered ones and those the lock
//! file says the configured MCP servers list (`graphs/tools.lock.json`,
//! see [`crate::tools::lock`]). Locked tools are never called; they let
//! `check` name a tool's server, its arguments and its output shape, and
//! see a name two servers both list (at run time only the first server up
//! would register it).

use std::sync::Arc;

use serde_json::Value;

use super::ToolRegistry;
use crate::tools::lock::{LOCK_FILE, ToolLock};

/// One tool a lock file lists.
#[derive(Clone, Debug)]
pub(super) struct Locked {
    /// The server that lists it (its name in the configuration).
    server: String,
    /// The partition its tools form.
    partition: String,
    /// Its argument schema.
    input_schema: Arc<Value>,
    /// Its output schema, if it declares one.
    output_schema: Option<Arc<Value>>,
}

impl ToolRegistry {
    /// Adds the tools of a lock file to what `check` knows (they are not
    /// callable: the live servers provide the tools a run calls). A name
    /// another locked server (or a registered tool) already has is kept
    /// as a conflict, for [`ToolRegistry::lock_conflict`].
    pub fn add_locked(&self, lock: &ToolLock) {
        let mut g = self.write();
        for (server, s) in &lock.servers {
            for t in &s.tools {
                let owners: Vec<String> = match g.locked.get(&t.name) {
                    Some(l) if l.server != *server => vec![l.server.clone()],
                    None if g.tools.contains_key(&t.name) => {
                        vec!["(registered in this process)".into()]
                    }
                    _ => Vec::new(),
                };
                if !owners.is_empty() {
                    let list = g.lock_conflicts.entry(t.name.clone()).or_default();
                    for o in owners.into_iter().chain([server.clone()]) {
                        if !list.contains(&o) {
                            list.push(o);
                        }
                    }
                }
                g.locked.insert(
                    t.name.clone(),
                    Locked {
                        server: server.clone(),
                        partition: s.partition.clone(),
                        input_schema: Arc::clone(&t.input_schema),
                        output_schema: t.output_schema.clone(),
                    },
                );
            }
        }
    }

    /// The servers (and a registered tool) that all list `name` in the
    /// lock, when more than one does: which one a run calls depends on
    /// which starts first, so a graph must not name it.
    pub fn lock_conflict(&self, name: &str) -> Option<Vec<String>> {
        self.read().lock_conflicts.get(name).cloned()
    }

    /// Where `check` knows a tool from, for diagnostics: "MCP server
    /// `airline`, per tools.lock.json" for a locked tool, `None` for a
    /// registered one or an unknown name.
    pub fn origin_at_check(&self, name: &str) -> Option<String> {
        let g = self.read();
        if g.tools.contains_key(name) {
            return None;
        }
        g.locked
            .get(name)
            .map(|l| format!("MCP server `{}`, per {LOCK_FILE}", l.server))
    }

    /// [`ToolRegistry::knows`], locked tools and partitions included: what
    /// a graph file may name.
    pub fn knows_at_check(&self, entry: &str) -> bool {
        self.knows(entry) || {
            let g = self.read();
            g.locked.contains_key(entry) || g.locked.values().any(|l| l.partition == entry)
        }
    }

    /// The partition of a tool known only from the lock (not registered in
    /// this process): what `check` knows of an MCP tool it did not start.
    pub fn locked_partition(&self, name: &str) -> Option<String> {
        let g = self.read();
        if g.tools.contains_key(name) {
            return None;
        }
        g.locked.get(name).map(|l| l.partition.clone())
    }

    /// Tool and partition names a graph file may use (locked ones
    /// included), for "did you mean".
    pub fn names_at_check(&self) -> Vec<String> {
        let mut out = self.names();
        out.extend(self.partitions().into_keys());
        let g = self.read();
        out.extend(g.locked.keys().cloned());
        out.extend(g.locked.values().map(|l| l.partition.clone()));
        out.sort();
        out.dedup();
        out
    }

    /// The argument schema of a tool, registered or locked.
    pub fn schema_at_check(&self, name: &str) -> Option<Arc<Value>> {
        let g = self.read();
        g.tools
            .get(name)
            .map(|e| Arc::clone(&e.tool.spec().input_schema))
            .or_else(|| g.locked.get(name).map(|l| Arc::clone(&l.input_schema)))
    }

    /// The output schema of a tool, registered or locked, when it declares
    /// one; a configurable built-in's (`web_search`) also when it is not
    /// configured in this process.
    pub fn output_schema_at_check(&self, name: &str) -> Option<Arc<Value>> {
        let g = self.read();
        match g.tools.get(name) {
            Some(e) => e.tool.spec().output_schema.clone(),
            None => match g.locked.get(name) {
                Some(l) => l.output_schema.clone(),
                None => crate::tools::configurable_output_schema(name).map(Arc::new),
            },
        }
    }

    /// The tools a graph-file entry offers, as far as `check` can know:
    /// `None` when it is a partition whose tools are unknown until a server
    /// lists them (declared, not locked).
    pub fn members_at_check(&self, entry: &str) -> Option<Vec<String>> {
        let g = self.read();
        if g.tools.contains_key(entry) || g.locked.contains_key(entry) {
            return Some(vec![entry.to_owned()]);
        }
        let mut out: Vec<String> = g
            .tools
            .iter()
            .filter(|(_, e)| e.tool.spec().partition == entry)
            .map(|(n, _)| n.clone())
            .collect();
        out.extend(
            g.locked
                .iter()
                .filter(|(_, l)| l.partition == entry)
                .map(|(n, _)| n.clone()),
        );
        out.sort();
        out.dedup();
        (!out.is_empty()).then_some(out)
    }
}
