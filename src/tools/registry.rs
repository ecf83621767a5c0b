//! The tool registry: every tool by name, grouped into partitions, and the
//! rules every call goes through.
//!
//! Tools come and go while the server runs (MCP servers are discovered and
//! refreshed), so the registry is shared and updated in place; a call takes a
//! snapshot of the tool's entry and holds no lock while it runs. A graph
//! file names tools or partitions; a node may call exactly the tools its
//! entries expand to at call time. A call is: allowed? → known? → arguments
//! match the schema? → cached? → run with the time limit → output cut to the
//! size limit → cached. Each call is a `tool` span inside the run's span,
//! with a log line when it starts (its arguments valid) and when it
//! finishes (cached or not) or fails (with the failure's type).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Value, json};
use tracing::Instrument;

use super::cache::{ToolCache, key};
use super::{PolicyOverride, Tool, ToolError, ToolPolicy, ToolSpec, builtin};
use crate::llm::ToolDef;

mod at_check;

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

/// A successful call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutcome {
    /// The result (cut to the size limit).
    pub output: Value,
    /// Served from the cache.
    pub cached: bool,
    /// Display-ready: goes to the user verbatim.
    pub display: bool,
}

struct Entry {
    tool: Arc<dyn Tool>,
    validator: Arc<jsonschema::Validator>,
    def: ToolDef,
}

#[derive(Default)]
struct Inner {
    tools: BTreeMap<String, Arc<Entry>>,
    /// Partitions known before their tools are (MCP servers not yet up).
    declared: BTreeSet<String>,
    /// Per-tool policy overrides from config, merged onto the tool's own
    /// policy at call time (the tool may register later).
    policies: BTreeMap<String, PolicyOverride>,
    /// Tools the lock file lists, by name: known to `check`, never
    /// called (see [`crate::tools::lock`] and `at_check`).
    locked: BTreeMap<String, at_check::Locked>,
    /// Tool names more than one locked server lists, with the servers.
    lock_conflicts: BTreeMap<String, Vec<String>>,
}

/// All tools.
#[derive(Default)]
pub struct ToolRegistry {
    inner: RwLock<Inner>,
    cache: ToolCache,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .finish()
    }
}

fn entry(tool: Arc<dyn Tool>) -> Result<Entry, RegistryError> {
    let spec = tool.spec();
    let validator =
        jsonschema::validator_for(&spec.input_schema).map_err(|e| RegistryError::Schema {
            tool: spec.name.clone(),
            message: e.to_string(),
        })?;
    let def = ToolDef {
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters: Arc::clone(&spec.input_schema),
        partition: Some(spec.partition.clone()),
    };
    Ok(Entry {
        tool,
        validator: Arc::new(validator),
        def,
    })
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with the built-in tools (`builtin`), and the partitions
    /// of the configurable built-in tool families declared (`data`: SQL
    /// sources, `web`: fetch and search), so graphs naming them validate
    /// before (or without) that configuration; `GET /api/tools/health`
    /// reports them while empty. Partitions only an MCP server provides are
    /// declared by the graph files that use them (`external_tools:`).
    pub fn with_builtins() -> Self {
        let r = Self::new();
        for tool in builtin::all() {
            if let Err(e) = r.register(tool) {
                tracing::error!(error = %e, "built-in tool rejected");
            }
        }
        // SQL sources ([tools.sql]) or MCP servers fill it.
        r.declare_partition("data");
        r.declare_partition(crate::tools::http::PARTITION);
        r
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a tool.
    ///
    /// # Errors
    /// Its name is taken (by a tool or a partition) or its schema is invalid.
    pub fn register(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let e = entry(tool)?;
        let name = e.def.name.clone();
        let mut g = self.write();
        let partition_names: BTreeSet<&String> = g
            .tools
            .values()
            .map(|t| &t.tool.spec().partition)
            .chain(&g.declared)
            .collect();
        if g.tools.contains_key(&name)
            || partition_names.contains(&name)
            || g.tools.contains_key(&e.tool.spec().partition)
        {
            return Err(RegistryError::Duplicate(name));
        }
        g.tools.insert(name, Arc::new(e));
        Ok(())
    }

    /// Replaces every tool of `partition` with `tools` (an MCP server's tools
    /// after discovery or refresh); an empty list leaves the partition known
    /// but empty (its server is down).
    ///
    /// # Errors
    /// A tool name collides with another partition's tool, or a schema is
    /// invalid; the partition is then left as it was.
    pub fn set_partition(
        &self,
        partition: &str,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Result<(), RegistryError> {
        let entries: Vec<Entry> = tools.into_iter().map(entry).collect::<Result<_, _>>()?;
        let mut g = self.write();
        for e in &entries {
            if let Some(existing) = g.tools.get(&e.def.name)
                && existing.tool.spec().partition != partition
            {
                return Err(RegistryError::Duplicate(e.def.name.clone()));
            }
        }
        g.tools.retain(|_, t| t.tool.spec().partition != partition);
        for e in entries {
            g.tools.insert(e.def.name.clone(), Arc::new(e));
        }
        g.declared.insert(partition.to_owned());
        Ok(())
    }

    /// Makes a partition known before its tools are (graph files may name it).
    pub fn declare_partition(&self, partition: &str) {
        self.write().declared.insert(partition.to_owned());
    }

    /// Whether `partition` was declared (its tools come from configuration,
    /// so a tool it does not hold yet may still be provided by it).
    pub fn is_declared(&self, partition: &str) -> bool {
        self.read().declared.contains(partition)
    }

    /// Overrides fields of a tool's policy (from config), whether or not
    /// the tool is registered yet; applies to later calls.
    pub fn set_policy(&self, tool: &str, policy: PolicyOverride) {
        self.write().policies.insert(tool.to_owned(), policy);
    }

    /// Tool names.
    pub fn names(&self) -> Vec<String> {
        self.read().tools.keys().cloned().collect()
    }

    /// Partition → tool names (declared partitions included, maybe empty).
    pub fn partitions(&self) -> BTreeMap<String, Vec<String>> {
        let g = self.read();
        let mut out: BTreeMap<String, Vec<String>> =
            g.declared.iter().map(|p| (p.clone(), Vec::new())).collect();
        for (name, e) in &g.tools {
            out.entry(e.tool.spec().partition.clone())
                .or_default()
                .push(name.clone());
        }
        out
    }

    /// Whether a graph-file entry names a tool or a partition.
    pub fn knows(&self, entry: &str) -> bool {
        let g = self.read();
        g.tools.contains_key(entry)
            || g.declared.contains(entry)
            || g.tools.values().any(|t| t.tool.spec().partition == entry)
    }

    /// The tools the entries name right now (partitions expanded).
    pub fn expand(&self, entries: &[String]) -> Vec<String> {
        let g = self.read();
        let mut out: Vec<String> = Vec::new();
        for entry in entries {
            if g.tools.contains_key(entry) {
                if !out.contains(entry) {
                    out.push(entry.clone());
                }
                continue;
            }
            for (name, t) in &g.tools {
                if &t.tool.spec().partition == entry && !out.contains(name) {
                    out.push(name.clone());
                }
            }
        }
        out
    }

    /// A registered tool itself (`stategraph test` lends the tools a case
    /// names in `real_tools` to the registry of its stubs).
    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.read().tools.get(name).map(|e| Arc::clone(&e.tool))
    }

    /// The spec of a tool.
    pub fn spec(&self, name: &str) -> Option<ToolSpec> {
        self.read().tools.get(name).map(|e| e.tool.spec().clone())
    }

    /// What dispatch could never execute as offered, by tool: a schema
    /// the model is shown that is not an object schema (calls carry a JSON
    /// object of arguments; MCP servers take nothing else), and policies
    /// configured for a tool no source provides (yet).
    pub fn dispatch_problems(&self) -> Vec<(String, String)> {
        let inner = self.read();
        let mut out = Vec::new();
        for (name, e) in &inner.tools {
            let schema = &*e.def.parameters;
            let object = schema.get("type").is_none_or(|t| t == "object") && schema.is_object();
            if !object {
                out.push((
                    name.clone(),
                    format!(
                        "its input schema is not an object schema (type {}): the arguments of a call are a JSON object",
                        schema.get("type").unwrap_or(&Value::Null)
                    ),
                ));
            }
        }
        for name in inner.policies.keys() {
            if !inner.tools.contains_key(name) {
                out.push((
                    name.clone(),
                    "a policy is configured for it, but no source provides a tool of that name"
                        .to_owned(),
                ));
            }
        }
        out
    }

    /// The policy a call to `name` follows.
    pub fn policy(&self, name: &str) -> ToolPolicy {
        let g = self.read();
        let base = g
            .tools
            .get(name)
            .map(|e| e.tool.spec().policy.clone())
            .unwrap_or_default();
        match g.policies.get(name) {
            Some(o) => o.apply(base),
            None => base,
        }
    }

    /// Definitions to offer the model.
    pub fn defs(&self, names: &[String]) -> Vec<ToolDef> {
        let g = self.read();
        names
            .iter()
            .filter_map(|n| g.tools.get(n))
            .map(|e| e.def.clone())
            .collect()
    }

    /// Calls `name` with `args` on behalf of a node allowed to use `allowed`.
    ///
    /// # Errors
    /// A [`ToolError`] for the model: not allowed, not found, invalid
    /// arguments, timeout or the tool's own failure.
    pub async fn call(
        &self,
        name: &str,
        args: Value,
        allowed: &[String],
    ) -> Result<ToolOutcome, ToolError> {
        // With the OpenTelemetry GenAI attributes of a tool execution span.
        let span = tracing::info_span!(
            "tool",
            tool = %name,
            otel.name = %format!("execute_tool {name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name,
            gen_ai.tool.type = "function",
            outcome = tracing::field::Empty,
            cached = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let result = self
            .call_inner(name, args, allowed)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.kind(),
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        span.record("outcome", outcome);
        span.record("duration_ms", duration_ms);
        span.in_scope(|| match &result {
            Ok(o) => {
                span.record("cached", o.cached);
                tracing::info!(cached = o.cached, duration_ms, "tool finished");
            }
            Err(e) => {
                span.record("error.type", e.kind());
                tracing::warn!(error_type = e.kind(), error = %e, duration_ms, "tool failed")
            }
        });
        result
    }

    async fn call_inner(
        &self,
        name: &str,
        args: Value,
        allowed: &[String],
    ) -> Result<ToolOutcome, ToolError> {
        if !allowed.iter().any(|a| a == name) {
            return Err(ToolError::NotAllowed {
                tool: name.to_owned(),
                allowed: allowed.to_vec(),
            });
        }
        let Some(entry) = self.read().tools.get(name).cloned() else {
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
            let first = problems
                .first()
                .and_then(|p| p["message"].as_str())
                .unwrap_or("invalid")
                .to_owned();
            return Err(ToolError::Validation {
                message: first,
                details: json!({ "errors": problems, "schema": *entry.def.parameters }),
            });
        }
        // Arguments carry what users typed (and can be large): logged only at
        // debug. The event log keeps them in full for replay.
        tracing::info!("tool started");
        tracing::debug!(args = %args, "tool arguments");
        let policy = self.policy(name);
        let cache_key = policy.cache_ttl.map(|_| key(name, &args));
        if let Some(k) = &cache_key
            && let Some(output) = self.cache.get(k)
        {
            return Ok(ToolOutcome {
                output,
                cached: true,
                display: policy.pass_through,
            });
        }
        let output = match tokio::time::timeout(policy.timeout, entry.tool.call(args)).await {
            Ok(r) => r?,
            Err(_) => return Err(ToolError::Timeout(policy.timeout)),
        };
        let output = limit(output, policy.max_output_bytes);
        if let (Some(k), Some(ttl)) = (cache_key, policy.cache_ttl) {
            self.cache.put(k, output.clone(), ttl);
        }
        Ok(ToolOutcome {
            output,
            cached: false,
            display: policy.pass_through,
        })
    }
}

/// Cuts a result to `max` bytes of JSON text, leaving a marker.
fn limit(output: Value, max: usize) -> Value {
    let text = match &output {
        Value::String(s) => {
            if s.len() <= max {
                return output;
            }
            s.clone()
        }
        other => {
            let t = other.to_string();
            if t.len() <= max {
                return output;
            }
            t
        }
    };
    let mut cut = max.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let omitted = text.len() - cut;
    Value::String(format!(
        "{}…[truncated: {omitted} more bytes]",
        &text[..cut]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::failure_payload;
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    struct Counting {
        spec: ToolSpec,
        calls: AtomicU32,
    }

    impl Tool for Counting {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }
        fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
            Box::pin(async move {
                let n = self.calls.fetch_add(1, Ordering::SeqCst);
                if args["sleep"].as_bool() == Some(true) {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok(json!({"n": n, "big": "x".repeat(args["size"].as_u64().unwrap_or(0) as usize)}))
            })
        }
    }

    fn counting(name: &str, policy: ToolPolicy) -> Arc<Counting> {
        Arc::new(Counting {
            spec: ToolSpec {
                name: name.into(),
                description: "counts".into(),
                input_schema: Arc::new(json!({"type": "object"})),
                output_schema: None,
                partition: "test".into(),
                policy,
            },
            calls: AtomicU32::new(0),
        })
    }

    #[tokio::test]
    async fn a_config_override_set_before_the_tool_registers_changes_only_its_fields() {
        let r = ToolRegistry::new();
        r.set_policy(
            "late",
            crate::tools::PolicyOverride {
                pass_through: Some(true),
                ..Default::default()
            },
        );
        let own = ToolPolicy {
            cache_ttl: Some(Duration::from_secs(300)),
            timeout: Duration::from_secs(7),
            ..Default::default()
        };
        r.register(counting("late", own.clone())).unwrap();
        let p = r.policy("late");
        assert!(p.pass_through);
        assert_eq!(
            p.cache_ttl, own.cache_ttl,
            "the tool's own cache TTL is kept"
        );
        assert_eq!(p.timeout, own.timeout);
        let allowed = vec!["late".to_owned()];
        let first = r.call("late", json!({}), &allowed).await.unwrap();
        let second = r.call("late", json!({}), &allowed).await.unwrap();
        assert!(first.display && !first.cached);
        assert!(second.cached, "still cached after the override");
    }

    #[tokio::test]
    async fn calls_are_checked_and_failures_are_structured() {
        let r = ToolRegistry::with_builtins();
        let allowed = r.expand(&["basic".to_owned()]);
        assert!(allowed.contains(&"calculator".to_owned()));
        let ok = r
            .call("calculator", json!({"expression": "2 * (3 + 4)"}), &allowed)
            .await
            .unwrap();
        assert_eq!(ok.output["result"], 14);
        let bad = r
            .call("calculator", json!({"expr": 1}), &allowed)
            .await
            .unwrap_err();
        assert_eq!(bad.to_failure().kind, "validation_error");
        let denied = r
            .call("calculator", json!({"expression": "1"}), &[])
            .await
            .unwrap_err();
        assert_eq!(denied.to_failure().kind, "not_allowed");
        let missing = r
            .call("nope", json!({}), &["nope".into()])
            .await
            .unwrap_err();
        assert_eq!(missing.to_failure().kind, "not_found");
        let payload = failure_payload(&bad.to_failure());
        assert_eq!(payload["error"], true);
        assert!(payload["details"]["errors"].is_array());
    }

    #[tokio::test(start_paused = true)]
    async fn results_are_cached_per_arguments_until_the_ttl_expires() {
        let r = ToolRegistry::new();
        let t = counting(
            "search",
            ToolPolicy {
                cache_ttl: Some(Duration::from_secs(300)),
                ..Default::default()
            },
        );
        r.register(t.clone()).unwrap();
        let allowed = vec!["search".to_owned()];
        let first = r.call("search", json!({"q": "a"}), &allowed).await.unwrap();
        let again = r.call("search", json!({"q": "a"}), &allowed).await.unwrap();
        assert!(!first.cached && again.cached);
        assert_eq!(first.output, again.output);
        let other = r.call("search", json!({"q": "b"}), &allowed).await.unwrap();
        assert!(!other.cached, "other arguments, other entry");
        tokio::time::advance(Duration::from_secs(301)).await;
        let expired = r.call("search", json!({"q": "a"}), &allowed).await.unwrap();
        assert!(!expired.cached);
        assert_eq!(t.calls.load(Ordering::SeqCst), 3);
        // A tool without a TTL is never cached.
        let clock = counting("clock", ToolPolicy::default());
        r.register(clock.clone()).unwrap();
        let allowed = vec!["clock".to_owned()];
        r.call("clock", json!({}), &allowed).await.unwrap();
        assert!(!r.call("clock", json!({}), &allowed).await.unwrap().cached);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_tools_time_out_and_big_results_are_cut() {
        let r = ToolRegistry::new();
        r.register(counting(
            "slow",
            ToolPolicy {
                timeout: Duration::from_millis(100),
                max_output_bytes: 200,
                ..Default::default()
            },
        ))
        .unwrap();
        let allowed = vec!["slow".to_owned()];
        let err = r
            .call("slow", json!({"sleep": true}), &allowed)
            .await
            .unwrap_err();
        assert_eq!(err.to_failure().kind, "timeout");
        let big = r
            .call("slow", json!({"size": 1000}), &allowed)
            .await
            .unwrap();
        let text = big.output.as_str().unwrap();
        assert!(text.len() < 260 && text.contains("[truncated:"), "{text}");
    }

    #[test]
    fn partitions_are_replaced_whole_and_can_be_declared_early() {
        let r = ToolRegistry::new();
        r.declare_partition("data");
        assert!(r.knows("data"));
        assert!(r.expand(&["data".into()]).is_empty());
        let mk = |n: &str| -> Arc<dyn Tool> {
            Arc::new(Counting {
                spec: ToolSpec {
                    name: n.into(),
                    description: String::new(),
                    input_schema: Arc::new(json!({})),
                    output_schema: None,
                    partition: "data".into(),
                    policy: ToolPolicy::default(),
                },
                calls: AtomicU32::new(0),
            })
        };
        r.set_partition("data", vec![mk("a"), mk("b")]).unwrap();
        assert_eq!(r.expand(&["data".into()]), ["a", "b"]);
        r.set_partition("data", vec![mk("c")]).unwrap();
        assert_eq!(r.expand(&["data".into()]), ["c"]);
        assert!(r.register(mk("c")).is_err(), "names are unique");
    }
}
