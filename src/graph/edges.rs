//! Resolving a graph file's edges into transitions and the petgraph
//! topology: plain edges, joins, conditional routes (on a field or an
//! expression) and map fan-out (over a field or an expression).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use petgraph::graph::NodeIndex;

use super::compiled::{EdgeKind, Join, NodeIdx, Route, Selector, Target, Topology, Transition};
use super::diagnostic::{Diagnostics, name_hint};
use super::expr::{Expr, Scope};
use super::loc::{Loc, Sp};
use super::rules;
use super::spec::{EdgeSpec, RouteSpec};
use crate::state::StateSchema;

/// Resolves edges into transitions and the petgraph topology.
pub(super) struct EdgeBuilder<'a, 'd> {
    n: usize,
    index: &'a HashMap<&'a str, NodeIdx>,
    schema: Option<&'a StateSchema>,
    pub(super) d: &'d mut Diagnostics,
    pub(super) topo: Topology,
    pub(super) out: Vec<Vec<Transition>>,
    pub(super) joins: Vec<Join>,
    pub(super) join_locs: Vec<Loc>,
    pub(super) routes: Vec<(NodeIdx, Route, &'a Sp<RouteSpec>)>,
    pub(super) map_targets: HashSet<NodeIdx>,
    /// The type of one `item` of each map target, where every map edge to
    /// it fans out over items of one known type (`check` types the
    /// target's `item.x` reads with it).
    pub(super) map_items: std::collections::HashMap<NodeIdx, Option<crate::state::TypeSpec>>,
    /// No name failed to resolve (structural rules can run).
    pub(super) resolved: bool,
    /// Plain edges added, as (source, target slot).
    plain: HashSet<(NodeIdx, usize)>,
    /// Plain edges given again: where first, and how many more times.
    repeated: HashMap<(NodeIdx, usize), (Loc, usize)>,
}

impl<'a, 'd> EdgeBuilder<'a, 'd> {
    pub(super) fn new(
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
            map_items: std::collections::HashMap::new(),
            resolved: true,
            plain: HashSet::new(),
            repeated: HashMap::new(),
        }
    }

    /// Adds the plain edge `src -> t` (written at `loc`) unless it is there
    /// already: a repeat adds nothing at run time and is reported once per
    /// pair by [`EdgeBuilder::warn_repeats`].
    fn goto(&mut self, src: NodeIdx, t: Target, loc: Loc) {
        let slot = match t {
            Target::Node(i) => i as usize,
            Target::End => self.n,
        };
        if !self.plain.insert((src, slot)) {
            self.repeated.entry((src, slot)).or_insert((loc, 0)).1 += 1;
            return;
        }
        self.out[src as usize].push(Transition::Goto(t));
        self.edge(src, t, EdgeKind::Plain);
    }

    /// Warns about plain edges given more than once (`duplicate-edge`),
    /// one warning per source and target however often it repeats.
    pub(super) fn warn_repeats(&mut self, names: &[&str]) {
        let mut repeats: Vec<_> = self.repeated.drain().collect();
        repeats.sort_by_key(|(_, (loc, _))| (loc.line, loc.column));
        for ((src, slot), (loc, more)) in repeats {
            let from = names.get(src as usize).copied().unwrap_or("?");
            let to = names.get(slot).copied().unwrap_or("END");
            let times = if more == 1 {
                "again".to_owned()
            } else {
                format!("{more} more times")
            };
            self.d.warning(
                loc,
                "duplicate-edge",
                format!("the edge `{from} -> {to}` is given {times}; a repeat adds nothing"),
                Some(format!("list `{to}` once among `{from}`'s targets")),
            );
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

    pub(super) fn source(&mut self, name: &Sp<String>) -> Option<NodeIdx> {
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

    pub(super) fn add(&mut self, edge: &'a Sp<EdgeSpec>) {
        match &edge.value {
            EdgeSpec::Short { from, to } => {
                let (s, t) = (self.source(from), self.target(to));
                if let (Some(s), Some(t)) = (s, t) {
                    self.goto(s, t, to.loc);
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
                    self.add_map(sources[0], map);
                }
            }
        }
    }

    fn add_map(&mut self, src: Option<NodeIdx>, map: &'a Sp<super::spec::MapSpec>) {
        let over = self.list(&map.value.over);
        let to = self.target(&map.value.to);
        let fail_on_empty = match &map.value.on_empty {
            None => false,
            Some(v) if v.value == "skip" => false,
            Some(v) if v.value == "fail" => true,
            Some(v) => {
                self.resolved = false;
                self.d.error(
                    v.loc,
                    "edge-form",
                    format!("`on_empty` is `skip` or `fail`, not `{}`", v.value),
                    None,
                );
                false
            }
        };
        if let Some(Target::End) = to {
            self.resolved = false;
            self.d.error(
                map.value.to.loc,
                "edge-form",
                "a map edge must lead to a node, not END",
                None,
            );
        }
        // The edge exists even when `over` is wrong (already reported), so
        // the structural rules see the target.
        if let (Some(src), Some(Target::Node(to))) = (src, to) {
            if let Some(over) = over {
                self.out[src as usize].push(Transition::Map {
                    over: Arc::new(over),
                    to,
                    fail_on_empty,
                });
            }
            self.map_targets.insert(to);
            let item = self.item_type(&map.value.over);
            self.map_items
                .entry(to)
                .and_modify(|known| {
                    if *known != item {
                        *known = None;
                    }
                })
                .or_insert(item);
            self.edge(
                src,
                Target::Node(to),
                EdgeKind::Map(map.value.over.value.clone()),
            );
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
                for (t, name) in targets.into_iter().zip(to.items()) {
                    if let Some(t) = t {
                        self.goto(src, t, name.loc);
                    }
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

    /// The type of one item of a map's `over` (a list field, or an
    /// expression over the state), when the declared types say.
    fn item_type(&self, over: &Sp<String>) -> Option<crate::state::TypeSpec> {
        let schema = self.schema?;
        let list = match schema.field(&over.value) {
            Some(f) => schema.spec(f).ty.clone(),
            None => super::typecheck::expression_type(
                &over.value,
                super::typecheck::TypeScope {
                    schema: Some(schema),
                    typed: &[],
                },
            )?,
        };
        list.item_type()
    }

    /// A map edge's `over`: a list field by name, or an expression.
    fn list(&mut self, over: &Sp<String>) -> Option<Selector> {
        let schema = self.schema?;
        if let Some(f) = schema.field(&over.value) {
            if schema.spec(f).ty.is_list() {
                return Some(Selector::Field(f));
            }
            self.d.error(
                over.loc,
                "field-type",
                format!(
                    "map fan-out needs a list field; `{}` is not a list",
                    over.value
                ),
                None,
            );
            return None;
        }
        if is_identifier(&over.value) {
            self.d.error(
                over.loc,
                "unknown-field",
                format!("state `{}` has no field `{}`", schema.name, over.value),
                name_hint(&over.value, schema.names()),
            );
            return None;
        }
        let scope = Scope {
            schema: Some(schema),
            extra: &[],
            typed: &[],
        };
        Expr::compile(over, "map `over`", scope, self.d).map(Selector::Expr)
    }

    /// A route's `on` (a routable field) or `expr`.
    fn route_on(&mut self, route: &'a Sp<RouteSpec>) -> Option<(Selector, Arc<str>)> {
        let r = &route.value;
        let schema = self.schema?;
        match (&r.on, &r.expr) {
            (Some(on), None) => match schema.field(&on.value) {
                Some(f) if schema.spec(f).ty.routable() => {
                    Some((Selector::Field(f), on.value.as_str().into()))
                }
                Some(f) => {
                    self.d.error(
                        on.loc,
                        "field-type",
                        format!("cannot route on `{}`: it is {}; route on a string, boolean or integer field, or use `expr`", on.value, schema.spec(f).ty.describe()),
                        None,
                    );
                    None
                }
                None => {
                    self.d.error(
                        on.loc,
                        "unknown-field",
                        format!(
                            "route on `{}`, but state `{}` has no such field",
                            on.value, schema.name
                        ),
                        name_hint(&on.value, schema.names()),
                    );
                    None
                }
            },
            (None, Some(expr)) => {
                let scope = Scope {
                    schema: Some(schema),
                    extra: &[],
                    typed: &[],
                };
                Expr::compile(expr, "route `expr`", scope, self.d)
                    .map(|e| (Selector::Expr(e), expr.value.as_str().into()))
            }
            _ => {
                self.d.error(
                    route.loc,
                    "edge-form",
                    "a route needs exactly one of `on` (a field) or `expr` (an expression)",
                    None,
                );
                None
            }
        }
    }

    fn add_route(&mut self, src: NodeIdx, route: &'a Sp<RouteSpec>) {
        let r = &route.value;
        let on = self.route_on(route);
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
        let (Some((on, name)), true) = (on, ok) else {
            return;
        };
        let route_t = Route {
            on: Arc::new(on),
            field_name: name,
            cases,
            default,
        };
        self.out[src as usize].push(Transition::Route(route_t.clone()));
        self.routes.push((src, route_t, route));
    }
}

/// Whether `s` is a plain name (a field reference rather than an expression).
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
