//! Validation and compilation of one graph file.
//!
//! One pass resolves every name (state, nodes, fields, prompts, tools,
//! subgraphs, expressions) and records every problem as a diagnostic; the
//! structural rules then run on the resolved topology. Only a graph without
//! errors becomes a [`CompiledGraph`]. Compilation is generic over the node
//! kinds ([`NodeKinds`]): what a node runs is theirs to decide.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use super::build::BuildCx;
use super::compiled::{CompiledGraph, CompiledNode, NodeIdx, RetryPolicy, Route, Selector};
use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean, name_hint};
use super::edges::EdgeBuilder;
use super::kinds::NodeKinds;
use super::load::{GraphFile, valid_id};
use super::loc::{Loc, Sp};
use super::prompts::Prompts;
use super::rules::{self, Shape};
use super::spec::{NodeSpec, RouteSpec};
use super::state_decl::{self, StateEnv};
use crate::state::{FieldId, Reducers, StateSchema, StateTypes};
use crate::tools::ToolRegistry;

/// Default recursion limit (supersteps).
pub(crate) const DEFAULT_RECURSION_LIMIT: u32 = 25;

/// What compilation checks names against.
pub struct CompileEnv<'a, K: NodeKinds> {
    /// Registered Rust state types.
    pub states: &'a StateTypes,
    /// Reducers declared fields may name.
    pub reducers: &'a Reducers,
    /// Node kinds.
    pub kinds: &'a K,
    /// Tools.
    pub tools: &'a ToolRegistry,
    /// Prompt templates.
    pub prompts: &'a Arc<Prompts>,
    /// Graphs already compiled (subgraphs must come first).
    pub graphs: &'a BTreeMap<String, Arc<CompiledGraph<K::Node>>>,
}

/// A compiled graph and the warnings its file produced.
pub(crate) type Compiled<N> = (CompiledGraph<N>, Vec<Diagnostic>);

/// Validates and compiles a graph file.
///
/// On success, also returns warnings.
///
/// # Errors
/// Every problem found, as diagnostics (errors and warnings).
pub fn compile<K: NodeKinds>(
    file: &GraphFile,
    env: &CompileEnv<'_, K>,
) -> Result<Compiled<K::Node>, Vec<Diagnostic>> {
    let mut d = Diagnostics::new(Arc::clone(&file.display));
    let spec = &file.spec;
    let state_env = StateEnv {
        states: env.states,
        reducers: env.reducers,
    };
    let state = state_decl::resolve(&spec.state, &file.id, state_env, &mut d);
    let schema = state.as_ref().map(|s| &*s.schema);
    let recursion_limit = recursion_limit(file, &mut d);
    let chat = super::settings::chat_io(spec.chat.as_ref(), schema, spec.state.loc, &mut d);
    let external_tools = super::settings::external_tools(&spec.external_tools, &mut d);
    let config = super::settings::graph_config(spec.config.as_ref(), &mut d);
    let (index, duplicates) = node_index(file, env.kinds, &mut d);

    let mut edges = EdgeBuilder::new(spec.nodes.len(), &index, schema, &mut d);
    let entry = entry(file, &mut edges);
    for edge in &spec.edges {
        edges.add(edge);
    }
    let ids: Vec<&str> = spec.nodes.iter().map(|n| &*n.value.id.value).collect();
    edges.warn_repeats(&ids);
    let EdgeBuilder {
        topo,
        out,
        joins,
        join_locs,
        routes,
        map_targets,
        map_items,
        resolved,
        ..
    } = edges;

    let mut prompts_used = BTreeSet::new();
    let compiled: Vec<_> = (0..spec.nodes.len())
        .map(|i| {
            let cx = NodeEnv {
                schema,
                is_map_target: map_targets.contains(&(i as NodeIdx)),
                external_tools: &external_tools,
                config: config.as_ref(),
                item: map_items.get(&(i as NodeIdx)).cloned().flatten(),
                out: &out[i],
            };
            build_node(&spec.nodes[i].value, env, cx, &mut prompts_used, &mut d)
        })
        .collect();
    if let Some(schema) = schema {
        let nodes = (&compiled[..], &spec.nodes[..]);
        for (src, route, spec_route) in &routes {
            check_route_values(*src, route, spec_route, schema, nodes, &mut d);
        }
    }
    // The structural rules need every name to resolve to exactly one node
    // and an entry to start from; otherwise they only repeat the problem
    // (every node "unreachable", a duplicate never reached).
    if resolved && !duplicates && !entry.is_empty() {
        check_shape(file, &topo, &entry, &out, &joins, &join_locs, &mut d);
    }

    let Some(state) = state.filter(|_| !d.has_errors() && compiled.iter().all(Option::is_some))
    else {
        return Err(failed(d, file));
    };
    let nodes: Vec<CompiledNode<K::Node>> = compiled.into_iter().flatten().collect();
    let optional_tools =
        super::settings::optional_tools(&spec.optional_tools, &external_tools, &nodes, &mut d);
    if d.has_errors() {
        return Err(failed(d, file));
    }
    let version = version_hash(file, env, &prompts_used, &nodes);
    let graph = CompiledGraph {
        id: file.id.as_str().into(),
        version,
        description: spec.description.clone(),
        state,
        entry,
        joins,
        recursion_limit,
        topology: topo,
        prompts: Arc::clone(env.prompts),
        file: file.path.clone(),
        chat,
        external_tools,
        optional_tools,
        node_surfaces: per_node(&nodes, |n| n.surface),
        node_kinds: per_node(&nodes, |n| n.kind.to_string()),
        nodes,
    };
    Ok((graph, d.into_vec()))
}

/// A value of each node, by node id (the graph's surfaces and kinds).
fn per_node<N, T>(
    nodes: &[CompiledNode<N>],
    f: impl Fn(&CompiledNode<N>) -> T,
) -> Arc<HashMap<String, T>> {
    Arc::new(nodes.iter().map(|n| (n.id.to_string(), f(n))).collect())
}

/// The structural rules (reachability, END reachable, joins, cycles) on
/// the resolved topology.
fn check_shape(
    file: &GraphFile,
    topo: &super::compiled::Topology,
    entry: &[NodeIdx],
    out: &[Vec<super::compiled::Transition>],
    joins: &[super::compiled::Join],
    join_locs: &[Loc],
    d: &mut Diagnostics,
) {
    let nodes = &file.spec.nodes;
    let ids: Vec<&str> = nodes.iter().map(|n| n.value.id.value.as_str()).collect();
    let locs: Vec<Loc> = nodes.iter().map(|n| n.value.id.loc).collect();
    let shape = Shape {
        topo,
        entry,
        out,
        joins,
        ids: &ids,
        locs: &locs,
        join_locs,
    };
    rules::check(&shape, d);
}

/// The diagnostics of a graph that does not compile (never empty of errors).
fn failed(d: Diagnostics, file: &GraphFile) -> Vec<Diagnostic> {
    let mut diags = d.into_vec();
    if !diags.iter().any(Diagnostic::is_error) {
        // A node failed to build without saying why; never compile it.
        diags.push(Diagnostic {
            severity: super::diagnostic::Severity::Error,
            file: Arc::clone(&file.display),
            line: 1,
            column: 1,
            code: "invalid-graph",
            message: "graph could not be compiled".into(),
            hint: None,
        });
    }
    diags
}

fn recursion_limit(file: &GraphFile, d: &mut Diagnostics) -> u32 {
    let spec = &file.spec;
    let limit = spec
        .recursion_limit
        .as_ref()
        .map_or(DEFAULT_RECURSION_LIMIT, |l| l.value);
    if !(1..=10_000).contains(&limit) {
        let loc = spec
            .recursion_limit
            .as_ref()
            .map_or(Loc::new(1, 1), |l| l.loc);
        d.error(
            loc,
            "invalid-setting",
            "`recursion_limit` must be between 1 and 10000",
            None,
        );
    }
    limit
}

/// Node ids by name, checked (reserved, valid, unique) with their kinds;
/// also whether a duplicate was found.
fn node_index<'f, K: NodeKinds>(
    file: &'f GraphFile,
    kinds: &K,
    d: &mut Diagnostics,
) -> (HashMap<&'f str, NodeIdx>, bool) {
    let mut index: HashMap<&str, NodeIdx> = HashMap::new();
    let mut duplicates = false;
    for (i, node) in file.spec.nodes.iter().enumerate() {
        let id = &node.value.id;
        let place = |loc: Loc| if loc.is_known() { loc } else { node.loc };
        if id.value.is_empty() {
            d.error(
                place(id.loc),
                "missing-setting",
                "a node needs an `id`",
                misspelt(&node.value, "id"),
            );
        } else if id.value == "END" || id.value == "START" {
            d.error(
                id.loc,
                "reserved-node-id",
                format!("`{}` is reserved and cannot be a node id", id.value),
                None,
            );
        } else if !valid_id(&id.value) {
            d.error(
                id.loc,
                "invalid-node-id",
                format!("node id `{}` must start with a letter or `_` and use only ASCII letters, digits, `_`, `-` (max 64)", id.value.escape_debug()),
                None,
            );
        }
        if let Some(&first) = index.get(id.value.as_str()) {
            duplicates = true;
            let first_loc = file.spec.nodes[first as usize].value.id.loc;
            d.error(
                id.loc,
                "duplicate-node",
                format!(
                    "node `{}` is already defined at line {}",
                    id.value, first_loc.line
                ),
                Some("node ids must be unique; rename one".into()),
            );
        } else {
            index.insert(&id.value, i as NodeIdx);
        }
        let kind = &node.value.kind;
        if kind.value.is_empty() {
            d.error(
                place(kind.loc),
                "missing-setting",
                format!("node `{}` needs a `kind`", id.value),
                misspelt(&node.value, "kind")
                    .or_else(|| Some(format!("one of: {}", kinds.names().join(", ")))),
            );
        } else if kinds.info(&kind.value).is_none() {
            d.error(
                kind.loc,
                "unknown-kind",
                format!("unknown node kind `{}`", kind.value),
                name_hint(&kind.value, kinds.names()),
            );
        }
    }
    (index, duplicates)
}

/// "`knd` looks like a misspelt `kind`", when a key of the node does.
fn misspelt(node: &NodeSpec, key: &str) -> Option<String> {
    node.settings
        .iter()
        .find(|(k, _)| did_you_mean(&k.value, [key]).is_some())
        .map(|(k, _)| format!("`{}` looks like a misspelt `{key}`", k.value))
}

/// The entry nodes; an entry named twice is an error (the node would run
/// twice in the first step and conflict with itself).
fn entry(file: &GraphFile, edges: &mut EdgeBuilder<'_, '_>) -> Vec<NodeIdx> {
    let spec = &file.spec;
    let mut entry: Vec<NodeIdx> = Vec::new();
    for e in spec.entry.items() {
        if let Some(i) = edges.source(&e) {
            if entry.contains(&i) {
                edges.d.error(
                    e.loc,
                    "duplicate-entry",
                    format!("`{}` is listed twice in `entry`", e.value),
                    None,
                );
                edges.resolved = false;
            } else {
                entry.push(i);
            }
        }
    }
    if entry.is_empty() && spec.entry.value.0.is_empty() {
        edges.d.error(
            spec.entry.loc,
            "missing-entry",
            "`entry` names no node",
            None,
        );
    }
    entry
}

/// A map target runs once per item, all in one superstep: every field it
/// writes must combine the writes (`append`, `merge_by_id`, a registered
/// reducer); a `last` field would fail at run time as soon as the list has
/// two items.
fn map_writes_combine(
    node: &NodeSpec,
    schema: &StateSchema,
    writes: &[FieldId],
    d: &mut Diagnostics,
) {
    for &w in writes {
        let spec = schema.spec(w);
        if matches!(spec.reducer, crate::state::Reducer::Last) {
            d.error(
                node.id.loc,
                "map-write-last",
                format!(
                    "node `{}` runs once per item of a map edge, in parallel, and writes `{}`, whose reducer is `last`: two items would write it in one superstep",
                    node.id.value, spec.name
                ),
                Some(format!(
                    "give `{}` a reducer that combines the writes (`reducer: append`, or `merge_by_id` for items with an id), or write a list field",
                    spec.name
                )),
            );
        }
    }
}

/// What building one node needs besides the environment.
struct NodeEnv<'a> {
    schema: Option<&'a StateSchema>,
    is_map_target: bool,
    external_tools: &'a [String],
    config: Option<&'a serde_json::Value>,
    item: Option<crate::state::TypeSpec>,
    out: &'a [super::compiled::Transition],
}

/// Builds one node: its kind's settings, its `writes`, and the settings
/// every node has (retry, timeout, surface).
fn build_node<K: NodeKinds>(
    node: &NodeSpec,
    env: &CompileEnv<'_, K>,
    ne: NodeEnv<'_>,
    prompts_used: &mut BTreeSet<String>,
    d: &mut Diagnostics,
) -> Option<CompiledNode<K::Node>> {
    let info = env.kinds.info(&node.kind.value);
    let mut cx = BuildCx::new(
        node,
        ne.schema,
        env.prompts,
        env.tools,
        env.graphs,
        ne.is_map_target,
        ne.external_tools,
        d,
    );
    cx.config = ne.config;
    cx.item_type = ne.item;
    let mut writes: Vec<FieldId> = node
        .writes
        .iter()
        .filter_map(|w| cx.field(w, "a field", |_| true))
        .collect();
    let imp = info.and_then(|_| env.kinds.build(&node.kind.value, &mut cx));
    let status = node.status.as_ref().map(|s| {
        let v = Sp::new(super::value::SpValue::Str(s.value.clone()), s.loc);
        cx.value_expr(&v, "`status`", &[])
    });
    if let Some(info) = info {
        report_unknown(node, info.settings, cx.diagnostics());
    }
    for w in std::mem::take(&mut cx.writes) {
        if !writes.contains(&w) {
            writes.push(w);
        }
    }
    if ne.is_map_target
        && let Some(schema) = ne.schema
    {
        map_writes_combine(node, schema, &writes, cx.diagnostics());
    }
    prompts_used.append(&mut cx.prompts_used);
    let (declared, subgraph, tools, client_tools) = (
        cx.declared.take(),
        cx.subgraph.take(),
        std::mem::take(&mut cx.tools_used),
        std::mem::take(&mut cx.client_tools),
    );
    let preferred = cx.surface;
    let prompt = node
        .settings
        .iter()
        .find(|(k, _)| k.value == "prompt")
        .and_then(|(_, v)| v.value.as_name());
    drop(cx);
    let retry = retry_policy(node.retry.as_ref(), d);
    check_timeout(node, d);
    let info = info?;
    let status = match status {
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => return None,
        None => None,
    };
    Some(CompiledNode {
        id: node.id.value.as_str().into(),
        kind: node.kind.value.as_str().into(),
        imp: imp?,
        writes,
        surface: node
            .surface
            .as_ref()
            .map(|s| s.value)
            .or(preferred)
            .unwrap_or(info.default_surface),
        retry,
        timeout: node.timeout.as_ref().map(|t| t.value.0),
        out: ne.out.to_vec(),
        description: node.description.clone(),
        tools,
        client_tools,
        subgraph,
        declared,
        settings: settings_json(node),
        prompt,
        status,
    })
}

/// A node's kind settings as written (for the API and the studio).
fn settings_json(node: &NodeSpec) -> serde_json::Value {
    serde_json::Value::Object(
        node.settings
            .iter()
            .map(|(k, v)| (k.value.clone(), v.value.to_json()))
            .collect(),
    )
}

/// `timeout:` must be positive.
fn check_timeout(node: &NodeSpec, d: &mut Diagnostics) {
    if let Some(t) = &node.timeout
        && t.value.0.is_zero()
    {
        d.error(
            t.loc,
            "invalid-setting",
            "`timeout` must be greater than zero",
            None,
        );
    }
}

/// Every key the kind does not declare is not one of its settings.
fn report_unknown(node: &NodeSpec, accepted: &[super::kinds::SettingDoc], d: &mut Diagnostics) {
    let kind = node.kind.value.as_str();
    let unknown = node
        .settings
        .iter()
        .filter(|(k, _)| !accepted.iter().any(|s| s.name == k.value))
        .map(|(k, _)| (k.value.as_str(), k.loc));
    for (name, loc) in unknown {
        let names = accepted.iter().map(|s| s.name);
        let hint = did_you_mean(name, names.clone()).unwrap_or_else(|| {
            let all: Vec<&str> = names.collect();
            if all.is_empty() {
                format!("kind `{kind}` takes no settings besides the common ones")
            } else {
                format!("kind `{kind}` accepts: {}", all.join(", "))
            }
        });
        d.error(
            loc,
            "setting-not-applicable",
            format!("`{name}` is not a setting of kind `{kind}`"),
            Some(hint),
        );
    }
}

fn retry_policy(spec: Option<&Sp<super::spec::RetrySpec>>, d: &mut Diagnostics) -> RetryPolicy {
    let Some(spec) = spec else {
        return RetryPolicy::default();
    };
    let r = &spec.value;
    if !(1..=20).contains(&r.attempts) {
        d.error(
            spec.loc,
            "invalid-setting",
            "`retry.attempts` must be between 1 and 20",
            None,
        );
    }
    let default = RetryPolicy::default();
    RetryPolicy {
        attempts: r.attempts.clamp(1, 20),
        backoff: r.backoff.map_or(default.backoff, |b| b.0),
        max_backoff: r.max_backoff.map_or(default.max_backoff, |b| b.0),
    }
}

/// The version of a compiled graph: a hash (xxh3-128: versions identify
/// content, they do not protect it) of its file, its prompts and the versions
/// of its subgraphs.
fn version_hash<K: NodeKinds>(
    file: &GraphFile,
    env: &CompileEnv<'_, K>,
    prompts: &BTreeSet<String>,
    nodes: &[CompiledNode<K::Node>],
) -> String {
    let mut h = Xxh3::new();
    h.update(file.source.as_bytes());
    h.update(&[0]);
    env.prompts.hash_into(prompts, &mut h);
    for node in nodes {
        if let Some(sub) = &node.subgraph {
            h.update(sub.version.as_bytes());
        }
    }
    format!("{:032x}", h.digest128())
}

/// A route on a field: every value the field can take (its type's, or the
/// ones the routers writing it declare) has a case, and every case is such
/// a value; a field that can take any value needs a `default`.
fn check_route_values<N>(
    src: NodeIdx,
    route: &Route,
    spec_route: &Sp<RouteSpec>,
    schema: &StateSchema,
    (compiled, spec_nodes): (&[Option<CompiledNode<N>>], &[Sp<NodeSpec>]),
    d: &mut Diagnostics,
) {
    let Selector::Field(route_field) = &*route.on else {
        check_expr_route(route, spec_route, d);
        return;
    };
    let field = schema.spec(*route_field);
    let declared = field
        .ty
        .finite_values()
        .map(|v| (v, format!("the type of `{}`", field.name)))
        .or_else(|| declared_by_routers(src, *route_field, compiled, spec_nodes));
    let r = &spec_route.value;
    let on_loc =
        r.on.as_ref()
            .or(r.expr.as_ref())
            .map_or(spec_route.loc, |s| s.loc);
    let cases = r
        .cases
        .as_ref()
        .map(|c| c.entries.as_slice())
        .unwrap_or_default();
    match declared {
        Some((values, by)) => {
            if r.default.is_none() {
                for v in values
                    .iter()
                    .filter(|v| !cases.iter().any(|(k, _)| &k.value == *v))
                {
                    d.error(
                        on_loc,
                        "route-unmapped-value",
                        format!(
                            "route on `{}` has no target for `{v}` (declared by {by})",
                            route.field_name
                        ),
                        Some(format!("add `{v}: <node>` under `cases`, or a `default`")),
                    );
                }
            }
            for (k, _) in cases.iter().filter(|(k, _)| !values.contains(&k.value)) {
                d.error(
                    k.loc,
                    "route-unknown-value",
                    format!(
                        "`{}` is never a value of `{}` (declared by {by})",
                        k.value, route.field_name
                    ),
                    name_hint(&k.value, values.iter().map(String::as_str)),
                );
            }
        }
        None if r.default.is_none() => d.error(
            on_loc,
            "route-needs-default",
            format!(
                "`{}` can take any value, so the route needs a `default` target",
                route.field_name
            ),
            Some("add `default: <node or END>`, or route on a field a router writes".into()),
        ),
        None => {}
    }
}

/// The values routers declare for `field` (the source node's first), and
/// who declares them.
fn declared_by_routers<N>(
    src: NodeIdx,
    field: FieldId,
    compiled: &[Option<CompiledNode<N>>],
    spec_nodes: &[Sp<NodeSpec>],
) -> Option<(Vec<String>, String)> {
    let mut values: Vec<String> = Vec::new();
    let mut writers = Vec::new();
    let order =
        std::iter::once(src as usize).chain((0..compiled.len()).filter(|&i| i != src as usize));
    for i in order {
        if let Some(Some((f, vals))) = compiled
            .get(i)
            .map(|c| c.as_ref().and_then(|c| c.declared.as_ref()))
            && *f == field
        {
            writers.push(spec_nodes[i].value.id.value.clone());
            for v in vals {
                if !values.contains(v) {
                    values.push(v.clone());
                }
            }
        }
    }
    (!writers.is_empty()).then(|| (values, format!("router `{}`", writers.join("`, `"))))
}

/// A route on an expression: a boolean one must map both values (or have
/// a default), any other needs a default.
fn check_expr_route(route: &Route, spec_route: &Sp<RouteSpec>, d: &mut Diagnostics) {
    let r = &spec_route.value;
    if r.default.is_some() {
        return;
    }
    let loc = r.expr.as_ref().map_or(spec_route.loc, |e| e.loc);
    let keys: Vec<&str> = route.cases.iter().map(|(k, _)| k.as_str()).collect();
    let boolean = !keys.is_empty() && keys.iter().all(|k| *k == "true" || *k == "false");
    if boolean {
        for v in ["true", "false"] {
            if !keys.contains(&v) {
                d.error(
                    loc,
                    "route-unmapped-value",
                    format!("route on `{}` has no target for `{v}`", route.field_name),
                    Some(format!("add `{v}: <node>` under `cases`, or a `default`")),
                );
            }
        }
    } else {
        d.error(
            loc,
            "route-needs-default",
            format!(
                "`{}` can take any value, so the route needs a `default` target",
                route.field_name
            ),
            Some("add `default: <node or END>`, or map `true` and `false` for a condition".into()),
        );
    }
}
