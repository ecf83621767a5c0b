//! Validation and compilation of one graph file.
//!
//! One pass resolves every name (nodes, fields, prompts, tools, subgraphs)
//! and records every problem as a diagnostic; the structural rules then run
//! on the resolved topology. Only a graph without errors becomes a
//! [`CompiledGraph`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use petgraph::graph::NodeIndex;
use xxhash_rust::xxh3::Xxh3;

use super::compiled::{
    CompiledGraph, CompiledNode, EdgeKind, Join, NodeIdx, RetryPolicy, Route, Target, Topology,
    Transition,
};
use super::diagnostic::{Diagnostic, Diagnostics, name_hint};
use super::load::{GraphFile, valid_id};
use super::loc::{Loc, Sp};
use super::prompts::Prompts;
use super::rules::{self, Shape};
use super::spec::{EdgeSpec, RouteSpec, Surface};
use crate::nodes::{self, BuildCx, NodeRegistry};
use crate::state::{StateSchema, StateTypes};
use crate::tools::ToolRegistry;

/// Default recursion limit (supersteps).
pub const DEFAULT_RECURSION_LIMIT: u32 = 25;

/// What compilation checks names against.
#[derive(Clone, Copy)]
pub struct CompileEnv<'a> {
    /// State types.
    pub states: &'a StateTypes,
    /// Registered Rust node kinds.
    pub kinds: &'a NodeRegistry,
    /// Tools.
    pub tools: &'a ToolRegistry,
    /// Prompt templates.
    pub prompts: &'a Arc<Prompts>,
    /// Graphs already compiled (subgraphs must come first).
    pub graphs: &'a BTreeMap<String, Arc<CompiledGraph>>,
}

/// Validates and compiles a graph file.
///
/// On success, also returns warnings.
///
/// # Errors
/// Every problem found, as diagnostics (errors and warnings).
pub fn compile(
    file: &GraphFile,
    env: &CompileEnv<'_>,
) -> Result<(CompiledGraph, Vec<Diagnostic>), Vec<Diagnostic>> {
    let mut d = Diagnostics::new(Arc::clone(&file.display));
    let spec = &file.spec;
    let state = env.states.get(&spec.state.value);
    if state.is_none() {
        d.error(
            spec.state.loc,
            "unknown-state",
            format!("unknown state type `{}`", spec.state.value),
            name_hint(&spec.state.value, env.states.names()),
        );
    }
    let schema = state.as_ref().map(|s| &*s.schema);
    let recursion_limit = spec
        .recursion_limit
        .as_ref()
        .map_or(DEFAULT_RECURSION_LIMIT, |l| l.value);
    if !(1..=10_000).contains(&recursion_limit) {
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

    let carry = super::settings::carry(&spec.carry, schema, &mut d);
    let external_tools = super::settings::external_tools(&spec.external_tools, &mut d);

    // Node ids and kinds.
    let n = spec.nodes.len();
    let mut index: HashMap<&str, NodeIdx> = HashMap::new();
    let mut duplicates = false;
    for (i, node) in spec.nodes.iter().enumerate() {
        let id = &node.value.id;
        if id.value == "END" || id.value == "START" {
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
            let first_loc = spec.nodes[first as usize].value.id.loc;
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
        if !nodes::kind_exists(&kind.value, env.kinds) {
            d.error(
                kind.loc,
                "unknown-kind",
                format!("unknown node kind `{}`", kind.value),
                name_hint(
                    &kind.value,
                    nodes::BUILTIN_KINDS
                        .iter()
                        .copied()
                        .chain(env.kinds.names()),
                ),
            );
        }
    }

    // Edges.
    let mut edges = EdgeBuilder::new(n, &index, schema, &mut d);
    let entry: Vec<NodeIdx> = spec
        .entry
        .items()
        .iter()
        .filter_map(|e| edges.source(e))
        .collect();
    if entry.is_empty() && spec.entry.value.0.is_empty() {
        edges.d.error(
            spec.entry.loc,
            "missing-entry",
            "`entry` names no node",
            None,
        );
    }
    for edge in &spec.edges {
        edges.add(edge);
    }
    let EdgeBuilder {
        topo,
        out,
        joins,
        join_locs,
        routes,
        map_targets,
        resolved,
        ..
    } = edges;

    // Nodes.
    let mut compiled: Vec<Option<CompiledNode>> = Vec::with_capacity(n);
    let mut prompts_used = BTreeSet::new();
    for (i, node) in spec.nodes.iter().enumerate() {
        let node = &node.value;
        let kind = node.kind.value.as_str();
        let mut cx = BuildCx::new(
            node,
            schema,
            env.prompts,
            env.tools,
            env.graphs,
            env.states,
            map_targets.contains(&(i as NodeIdx)),
            &mut d,
        );
        cx.external_tools = &external_tools;
        let mut writes = Vec::new();
        for w in &node.writes {
            if let Some(f) = cx.field(w, "a field", |_| true) {
                writes.push(f);
            }
        }
        let imp = if nodes::kind_exists(kind, env.kinds) {
            nodes::build(kind, &mut cx, env.kinds)
        } else {
            None
        };
        for w in std::mem::take(&mut cx.writes) {
            if !writes.contains(&w) {
                writes.push(w);
            }
        }
        prompts_used.append(&mut cx.prompts_used);
        let retry = retry_policy(node.retry.as_ref(), &mut d);
        let timeout = node.timeout.as_ref().map(|t| t.value.0);
        let fallback_model = node.fallback_model.as_ref().map(|f| {
            let role = node.model.as_ref().map_or("chat", |m| m.value.as_str());
            if f.value == role {
                d.error(
                    f.loc,
                    "invalid-setting",
                    format!("`fallback_model` names the node's own model role `{role}`"),
                    Some("name another role (configured in [llm.roles])".into()),
                );
            }
            Arc::<str>::from(f.value.as_str())
        });
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
        let default_surface = if matches!(kind, "llm" | "agent") {
            Surface::Answer
        } else {
            Surface::Hidden
        };
        compiled.push(imp.map(|imp| {
            CompiledNode {
                id: node.id.value.as_str().into(),
                kind: kind.into(),
                imp,
                writes,
                surface: node.surface.as_ref().map_or(default_surface, |s| s.value),
                retry,
                timeout,
                fallback_model,
                out: out[i].clone(),
                description: node.description.clone(),
                tools: node
                    .tools
                    .iter()
                    .chain(node.tool.iter())
                    .map(|t| t.value.clone())
                    .fold(Vec::new(), |mut all, t| {
                        if !all.contains(&t) {
                            all.push(t);
                        }
                        all
                    }),
            }
        }));
    }

    // Conditional edges map every value their field can take.
    if let Some(schema) = schema {
        for (src, route, spec_route) in &routes {
            check_route_values(
                *src,
                route,
                spec_route,
                schema,
                &compiled,
                &spec.nodes,
                &mut d,
            );
        }
    }

    // The structural rules need every name to resolve to exactly one node
    // and an entry to start from; otherwise they only repeat the problem
    // (every node "unreachable", a duplicate never reached).
    if resolved && !duplicates && !entry.is_empty() {
        let ids: Vec<&str> = spec
            .nodes
            .iter()
            .map(|n| n.value.id.value.as_str())
            .collect();
        let locs: Vec<Loc> = spec.nodes.iter().map(|n| n.value.id.loc).collect();
        let shape = Shape {
            topo: &topo,
            entry: &entry,
            out: &out,
            joins: &joins,
            ids: &ids,
            locs: &locs,
            join_locs: &join_locs,
        };
        rules::check(&shape, &mut d);
    }

    if d.has_errors() || compiled.iter().any(Option::is_none) || state.is_none() {
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
        return Err(diags);
    }
    let nodes: Vec<CompiledNode> = compiled.into_iter().flatten().collect();
    let version = version_hash(file, env, &prompts_used, &nodes);
    let graph = CompiledGraph {
        id: file.id.as_str().into(),
        version,
        description: spec.description.clone(),
        state: state.unwrap_or_else(crate::state::StateType::of::<crate::state::ChatState>),
        nodes,
        entry,
        joins,
        recursion_limit,
        topology: topo,
        prompts: Arc::clone(env.prompts),
        file: file.path.clone(),
        carry,
        external_tools,
    };
    Ok((graph, d.into_vec()))
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
fn version_hash(
    file: &GraphFile,
    env: &CompileEnv<'_>,
    prompts: &BTreeSet<String>,
    nodes: &[CompiledNode],
) -> String {
    let mut h = Xxh3::new();
    h.update(file.source.as_bytes());
    h.update(&[0]);
    env.prompts.hash_into(prompts, &mut h);
    for node in nodes {
        if let Some(sub) = node.imp.subgraph() {
            h.update(sub.version.as_bytes());
        }
    }
    format!("{:032x}", h.digest128())
}

fn check_route_values(
    src: NodeIdx,
    route: &Route,
    spec_route: &Sp<RouteSpec>,
    schema: &StateSchema,
    compiled: &[Option<CompiledNode>],
    spec_nodes: &[Sp<super::spec::NodeSpec>],
    d: &mut Diagnostics,
) {
    let field = schema.spec(route.field);
    // Values the field can take: booleans, or what the routers writing it declare.
    let mut declared: Option<(Vec<String>, String)> = field
        .ty
        .finite_values()
        .map(|v| (v, format!("the type of `{}`", field.name)));
    if declared.is_none() {
        let mut values = Vec::new();
        let mut writers = Vec::new();
        // The source node first, then any other node declaring values for the field.
        let order =
            std::iter::once(src as usize).chain((0..compiled.len()).filter(|&i| i != src as usize));
        for i in order {
            if let Some(Some((f, vals))) = compiled
                .get(i)
                .map(|c| c.as_ref().and_then(|c| c.imp.declared_values()))
                && f == route.field
            {
                writers.push(spec_nodes[i].value.id.value.clone());
                for v in vals {
                    if !values.contains(v) {
                        values.push(v.clone());
                    }
                }
            }
        }
        if !writers.is_empty() {
            declared = Some((values, format!("router `{}`", writers.join("`, `"))));
        }
    }
    let r = &spec_route.value;
    let cases = r
        .cases
        .as_ref()
        .map(|c| c.entries.as_slice())
        .unwrap_or_default();
    match declared {
        Some((values, by)) => {
            if r.default.is_none() {
                for v in &values {
                    if !cases.iter().any(|(k, _)| &k.value == v) {
                        d.error(
                            r.on.loc,
                            "route-unmapped-value",
                            format!(
                                "route on `{}` has no target for `{v}` (declared by {by})",
                                r.on.value
                            ),
                            Some(format!("add `{v}: <node>` under `cases`, or a `default`")),
                        );
                    }
                }
            }
            for (k, _) in cases {
                if !values.contains(&k.value) {
                    d.error(
                        k.loc,
                        "route-unknown-value",
                        format!(
                            "`{}` is never a value of `{}` (declared by {by})",
                            k.value, r.on.value
                        ),
                        name_hint(&k.value, values.iter().map(String::as_str)),
                    );
                }
            }
        }
        None if r.default.is_none() => d.error(
            r.on.loc,
            "route-needs-default",
            format!(
                "`{}` can take any value, so the route needs a `default` target",
                r.on.value
            ),
            Some("add `default: <node or END>`, or route on a field a router writes".into()),
        ),
        None => {}
    }
}

/// Resolves edges into transitions and the petgraph topology.
struct EdgeBuilder<'a, 'd> {
    n: usize,
    index: &'a HashMap<&'a str, NodeIdx>,
    schema: Option<&'a StateSchema>,
    d: &'d mut Diagnostics,
    topo: Topology,
    out: Vec<Vec<Transition>>,
    joins: Vec<Join>,
    join_locs: Vec<Loc>,
    routes: Vec<(NodeIdx, Route, &'a Sp<RouteSpec>)>,
    map_targets: HashSet<NodeIdx>,
    /// No name failed to resolve (structural rules can run).
    resolved: bool,
}

impl<'a, 'd> EdgeBuilder<'a, 'd> {
    fn new(
        n: usize,
        index: &'a HashMap<&'a str, NodeIdx>,
        schema: Option<&'a StateSchema>,
        d: &'d mut Diagnostics,
    ) -> Self {
        let mut topo = Topology::new();
        for i in 0..=n {
            topo.add_node(rules::slot(i, n));
        }
        Self {
            n,
            index,
            schema,
            d,
            topo,
            out: vec![Vec::new(); n],
            joins: Vec::new(),
            join_locs: Vec::new(),
            routes: Vec::new(),
            map_targets: HashSet::new(),
            resolved: true,
        }
    }

    fn unknown(&mut self, name: &Sp<String>) {
        self.resolved = false;
        let hint = name_hint(&name.value, self.index.keys().copied().chain(["END"]));
        self.d.error(
            name.loc,
            "unknown-node",
            format!("no node named `{}`", name.value),
            hint,
        );
    }

    fn source(&mut self, name: &Sp<String>) -> Option<NodeIdx> {
        if name.value == "END" {
            self.resolved = false;
            self.d
                .error(name.loc, "end-as-source", "END cannot start an edge", None);
            return None;
        }
        let found = self.index.get(name.value.as_str()).copied();
        if found.is_none() {
            self.unknown(name);
        }
        found
    }

    fn target(&mut self, name: &Sp<String>) -> Option<Target> {
        if name.value == "END" {
            return Some(Target::End);
        }
        let found = self
            .index
            .get(name.value.as_str())
            .map(|&i| Target::Node(i));
        if found.is_none() {
            self.unknown(name);
        }
        found
    }

    fn edge(&mut self, src: NodeIdx, t: Target, kind: EdgeKind) {
        let to = match t {
            Target::Node(i) => i as usize,
            Target::End => self.n,
        };
        self.topo
            .add_edge(NodeIndex::new(src as usize), NodeIndex::new(to), kind);
    }

    fn add(&mut self, edge: &'a Sp<EdgeSpec>) {
        match &edge.value {
            EdgeSpec::Short { from, to } => {
                let (s, t) = (self.source(from), self.target(to));
                if let (Some(s), Some(t)) = (s, t) {
                    self.out[s as usize].push(Transition::Goto(t));
                    self.edge(s, t, EdgeKind::Plain);
                }
            }
            EdgeSpec::Full(f) => {
                let forms = usize::from(f.to.is_some())
                    + usize::from(f.route.is_some())
                    + usize::from(f.map.is_some());
                if forms != 1 {
                    self.resolved = false;
                    self.d.error(
                        edge.loc,
                        "edge-form",
                        "an edge needs exactly one of `to`, `route` or `map`",
                        None,
                    );
                    return;
                }
                let froms = f.from.items();
                if froms.is_empty() {
                    self.resolved = false;
                    self.d
                        .error(f.from.loc, "edge-form", "`from` names no node", None);
                    return;
                }
                if froms.len() > 1 && f.to.is_none() {
                    self.resolved = false;
                    self.d.error(
                        f.from.loc,
                        "edge-form",
                        "only a plain `to` edge can have several sources (a join)",
                        None,
                    );
                    return;
                }
                let sources: Vec<Option<NodeIdx>> = froms.iter().map(|s| self.source(s)).collect();
                if let Some(to) = &f.to {
                    self.add_to(&froms, &sources, to, edge.loc);
                } else if let Some(route) = &f.route {
                    if let Some(src) = sources[0] {
                        self.add_route(src, route);
                    }
                } else if let Some(map) = &f.map {
                    let over = self.list_field(&map.value.over);
                    let to = self.target(&map.value.to);
                    if let Some(Target::End) = to {
                        self.resolved = false;
                        self.d.error(
                            map.value.to.loc,
                            "edge-form",
                            "a map edge must lead to a node, not END",
                            None,
                        );
                    }
                    // The edge exists even when `over` is wrong (already
                    // reported), so the structural rules see the target.
                    if let (Some(src), Some(Target::Node(to))) = (sources[0], to) {
                        if let Some(over) = over {
                            self.out[src as usize].push(Transition::Map { over, to });
                        }
                        self.map_targets.insert(to);
                        self.edge(
                            src,
                            Target::Node(to),
                            EdgeKind::Map(map.value.over.value.clone()),
                        );
                    }
                }
            }
        }
    }

    fn add_to(
        &mut self,
        froms: &[Sp<String>],
        sources: &[Option<NodeIdx>],
        to: &Sp<super::spec::Names>,
        loc: Loc,
    ) {
        let targets: Vec<Option<Target>> = to.items().iter().map(|t| self.target(t)).collect();
        if froms.len() == 1 {
            if let Some(src) = sources[0] {
                for t in targets.into_iter().flatten() {
                    self.out[src as usize].push(Transition::Goto(t));
                    self.edge(src, t, EdgeKind::Plain);
                }
            }
            return;
        }
        // A join.
        if targets.len() != 1 {
            self.resolved = false;
            self.d.error(
                to.loc,
                "edge-form",
                "a join (several `from` nodes) has exactly one target",
                None,
            );
            return;
        }
        let target = match targets[0] {
            Some(Target::Node(t)) => t,
            Some(Target::End) => {
                self.resolved = false;
                self.d.error(
                    to.loc,
                    "edge-form",
                    "a join must lead to a node, not END",
                    Some("join into a `noop` node that goes to END".into()),
                );
                return;
            }
            None => return,
        };
        let mut srcs: Vec<NodeIdx> = Vec::new();
        for (name, s) in froms.iter().zip(sources) {
            let Some(s) = *s else { continue };
            if srcs.contains(&s) {
                self.d.error(
                    name.loc,
                    "duplicate-join-source",
                    format!("`{}` is listed twice in this join", name.value),
                    None,
                );
                continue;
            }
            srcs.push(s);
        }
        if srcs.len() != froms.len() {
            self.resolved = false;
            return;
        }
        let j = self.joins.len();
        for &s in &srcs {
            self.out[s as usize].push(Transition::Join(j));
            self.edge(s, Target::Node(target), EdgeKind::Join);
        }
        self.joins.push(Join {
            target,
            sources: srcs,
        });
        self.join_locs.push(loc);
    }

    fn list_field(&mut self, name: &Sp<String>) -> Option<crate::state::FieldId> {
        let schema = self.schema?;
        match schema.field(&name.value) {
            Some(f) if schema.spec(f).ty.is_list() => Some(f),
            Some(_) => {
                self.d.error(
                    name.loc,
                    "field-type",
                    format!(
                        "map fan-out needs a list field; `{}` is not a list",
                        name.value
                    ),
                    None,
                );
                None
            }
            None => {
                self.d.error(
                    name.loc,
                    "unknown-field",
                    format!("state `{}` has no field `{}`", schema.name, name.value),
                    name_hint(&name.value, schema.names()),
                );
                None
            }
        }
    }

    fn add_route(&mut self, src: NodeIdx, route: &'a Sp<RouteSpec>) {
        let r = &route.value;
        let field = self.schema.and_then(|schema| match schema.field(&r.on.value) {
            Some(f) if schema.spec(f).ty.routable() => Some(f),
            Some(f) => {
                self.d.error(
                    r.on.loc,
                    "field-type",
                    format!("cannot route on `{}`: it is {}; route on a string, boolean or integer field", r.on.value, schema.spec(f).ty.describe()),
                    None,
                );
                None
            }
            None => {
                self.d.error(
                    r.on.loc,
                    "unknown-field",
                    format!("route on `{}`, but state `{}` has no such field", r.on.value, schema.name),
                    name_hint(&r.on.value, schema.names()),
                );
                None
            }
        });
        let mut cases: Vec<(String, Target)> = Vec::new();
        let mut ok = true;
        for (value, target) in r
            .cases
            .as_ref()
            .map(|c| c.entries.as_slice())
            .unwrap_or_default()
        {
            if cases.iter().any(|(v, _)| v == &value.value) {
                self.d.error(
                    value.loc,
                    "duplicate-case",
                    format!("value `{}` is mapped twice", value.value),
                    None,
                );
                ok = false;
                continue;
            }
            match self.target(target) {
                Some(t) => cases.push((value.value.clone(), t)),
                None => ok = false,
            }
        }
        let default = match &r.default {
            Some(t) => match self.target(t) {
                Some(t) => Some(t),
                None => {
                    ok = false;
                    None
                }
            },
            None => None,
        };
        if cases.is_empty() && r.default.is_none() {
            self.d.error(
                route.loc,
                "edge-form",
                "a route needs `cases` or a `default`",
                None,
            );
            ok = false;
        }
        for (v, t) in &cases {
            self.edge(src, *t, EdgeKind::Case(v.clone()));
        }
        if let Some(t) = default {
            self.edge(src, t, EdgeKind::Default);
        }
        let (Some(field), true) = (field, ok) else {
            return;
        };
        let route_t = Route {
            field,
            field_name: r.on.value.as_str().into(),
            cases,
            default,
        };
        self.out[src as usize].push(Transition::Route(route_t.clone()));
        self.routes.push((src, route_t, route));
    }
}
