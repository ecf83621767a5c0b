//! Structural rules on the resolved topology: what LangGraph lets slip.
//!
//! Every node must be reachable from the entry and able to reach END; a
//! cycle must have a conditional way out; a join's sources must be able to
//! all arrive in one run.

use std::collections::HashSet;

use petgraph::Direction;
use petgraph::algo::tarjan_scc;
use petgraph::graph::NodeIndex;
use petgraph::visit::{Bfs, EdgeRef, Reversed};

use super::compiled::{Join, NodeIdx, Slot, Target, Topology, Transition};
use super::diagnostic::Diagnostics;
use super::loc::Loc;

/// What the rules need to know about the graph.
pub(crate) struct Shape<'a> {
    pub topo: &'a Topology,
    pub entry: &'a [NodeIdx],
    pub out: &'a [Vec<Transition>],
    pub joins: &'a [Join],
    pub ids: &'a [&'a str],
    pub locs: &'a [Loc],
    pub join_locs: &'a [Loc],
}

impl Shape<'_> {
    fn end(&self) -> NodeIndex {
        NodeIndex::new(self.ids.len())
    }
}

/// Runs every structural rule.
pub(crate) fn check(shape: &Shape<'_>, d: &mut Diagnostics) {
    reachability(shape, d);
    cycles(shape, d);
    joins(shape, d);
}

fn reachability(s: &Shape<'_>, d: &mut Diagnostics) {
    let n = s.ids.len();
    let mut reached = vec![false; n + 1];
    for &e in s.entry {
        let mut bfs = Bfs::new(s.topo, NodeIndex::new(e as usize));
        while let Some(x) = bfs.next(s.topo) {
            reached[x.index()] = true;
        }
    }
    let mut to_end = vec![false; n + 1];
    let rev = Reversed(s.topo);
    let mut bfs = Bfs::new(rev, s.end());
    while let Some(x) = bfs.next(rev) {
        to_end[x.index()] = true;
    }
    for i in 0..n {
        if !reached[i] {
            d.error(
                s.locs[i],
                "unreachable-node",
                format!("node `{}` is unreachable from the entry", s.ids[i]),
                Some("add an edge to it, or remove the node".into()),
            );
        } else if !to_end[i] {
            let dead_end = s
                .topo
                .edges_directed(NodeIndex::new(i), Direction::Outgoing)
                .next()
                .is_none();
            let (message, hint) = if dead_end {
                (
                    format!("node `{}` has no outgoing edge", s.ids[i]),
                    format!("add `{} -> END` or an edge to the next node", s.ids[i]),
                )
            } else {
                (
                    format!("node `{}` has no path to END", s.ids[i]),
                    "every path must be able to finish; add a route to END".into(),
                )
            };
            d.error(s.locs[i], "no-path-to-end", message, Some(hint));
        }
    }
}

fn cycles(s: &Shape<'_>, d: &mut Diagnostics) {
    for scc in tarjan_scc(s.topo) {
        let members: HashSet<NodeIndex> = scc.iter().copied().collect();
        let is_cycle = scc.len() > 1 || s.topo.edges_connecting(scc[0], scc[0]).next().is_some();
        if !is_cycle || members.contains(&s.end()) {
            continue;
        }
        let has_exit = scc.iter().any(|&x| {
            s.topo
                .edges_directed(x, Direction::Outgoing)
                .any(|e| e.weight().is_conditional() && !members.contains(&e.target()))
        });
        if !has_exit {
            let mut nodes: Vec<usize> = scc.iter().map(|x| x.index()).collect();
            nodes.sort_unstable();
            let path: Vec<&str> = nodes
                .iter()
                .map(|&i| s.ids[i])
                .chain([s.ids[nodes[0]]])
                .collect();
            d.error(
                s.locs[nodes[0]],
                "cycle-without-exit",
                format!("the cycle {} has no conditional exit", path.join(" → ")),
                Some("route out of the cycle on a state field (a conditional edge with a target outside it, or END)".into()),
            );
        }
    }
}

/// A set of join sources, by position.
type Bits = Vec<u64>;

fn bit(b: &Bits, i: usize) -> bool {
    b[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(b: &mut Bits, i: usize) {
    b[i / 64] |= 1 << (i % 64);
}

fn or_into(dst: &mut Bits, src: &Bits) {
    dst.iter_mut().zip(src).for_each(|(d, s)| *d |= s);
}

/// Targets of one transition (a route's alternatives are one group).
fn targets(t: &Transition, joins: &[Join]) -> Vec<usize> {
    let node = |t: &Target| match t {
        Target::Node(n) => Some(*n as usize),
        Target::End => None,
    };
    match t {
        Transition::Goto(t) => node(t).into_iter().collect(),
        Transition::Route(r) => r
            .cases
            .iter()
            .map(|(_, t)| t)
            .chain(r.default.iter())
            .filter_map(node)
            .collect(),
        Transition::Map { to, .. } => vec![*to as usize],
        Transition::Join(j) => vec![joins[*j].target as usize],
    }
}

/// Checks that every pair of a join's sources can run in one execution:
/// one reaches the other, or a fork — two different transitions of one
/// node, all of which fire, or two entry nodes — leads to each. Pairs of
/// sources that are only alternatives of a route can never both arrive.
/// Bitsets over the sources keep this linear enough for 1,000-way joins.
fn joins(s: &Shape<'_>, d: &mut Diagnostics) {
    for (j, join) in s.joins.iter().enumerate() {
        let k = join.sources.len();
        let mut reach = Reach::new(s, join);
        let mut co: Vec<Bits> = vec![vec![0u64; reach.words]; k];
        for (a, &src) in join.sources.iter().enumerate() {
            let r = reach.from(src as usize);
            for b in 0..k {
                if b != a && bit(&r, b) {
                    set_bit(&mut co[a], b);
                    set_bit(&mut co[b], a);
                }
            }
        }
        forks_run_together(s, &mut reach, &mut co);
        'pairs: for (a, co_a) in co.iter().enumerate().take(k) {
            for b in a + 1..k {
                if !bit(co_a, b) {
                    let (na, nb) = (join.sources[a] as usize, join.sources[b] as usize);
                    d.error(
                        s.join_locs[j],
                        "join-never-fires",
                        format!(
                            "join into `{}` waits for `{}` and `{}`, which can never both run (they are alternatives)",
                            s.ids[join.target as usize], s.ids[na], s.ids[nb]
                        ),
                        Some("join only branches that run in parallel (a fan-out or several entry nodes)".into()),
                    );
                    break 'pairs;
                }
            }
        }
    }
}

/// Marks in `co` the pairs of a join's sources that a fork runs together:
/// each source reached from one group of a fork (one transition of a node
/// with several, or one entry node) runs with every source reached from
/// the fork's other groups.
fn forks_run_together(s: &Shape<'_>, reach: &mut Reach<'_, '_>, co: &mut [Bits]) {
    let (skip, words, k) = (reach.skip, reach.words, co.len());
    let mut forks: Vec<Vec<Vec<usize>>> = s
        .out
        .iter()
        .enumerate()
        .filter(|(f, ts)| *f != skip && ts.len() >= 2)
        .map(|(_, ts)| ts.iter().map(|t| targets(t, s.joins)).collect())
        .collect();
    if s.entry.len() >= 2 {
        forks.push(s.entry.iter().map(|&e| vec![e as usize]).collect());
    }
    for groups in forks {
        let sets: Vec<Bits> = groups
            .iter()
            .map(|xs| {
                let mut b = vec![0u64; words];
                for &x in xs {
                    or_into(&mut b, &reach.from(x));
                }
                b
            })
            .collect();
        // others[i] = union of every other group's sources.
        let m = sets.len();
        let mut suffix = vec![vec![0u64; words]; m + 1];
        for i in (0..m).rev() {
            let mut u = suffix[i + 1].clone();
            or_into(&mut u, &sets[i]);
            suffix[i] = u;
        }
        let mut prefix = vec![0u64; words];
        for i in 0..m {
            let mut others = prefix.clone();
            or_into(&mut others, &suffix[i + 1]);
            for a in (0..k).filter(|&a| bit(&sets[i], a)) {
                or_into(&mut co[a], &others);
            }
            or_into(&mut prefix, &sets[i]);
        }
    }
}

/// Which of a join's sources each node reaches without passing the join,
/// as bitsets over the sources (cached per node).
struct Reach<'a, 's> {
    s: &'a Shape<'s>,
    /// The join's target, never passed.
    skip: usize,
    /// Words per bitset.
    words: usize,
    /// Node → its position among the sources.
    pos: std::collections::HashMap<usize, usize>,
    cache: std::collections::HashMap<usize, Bits>,
}

impl<'a, 's> Reach<'a, 's> {
    fn new(s: &'a Shape<'s>, join: &Join) -> Self {
        Self {
            s,
            skip: join.target as usize,
            words: join.sources.len().div_ceil(64),
            pos: join
                .sources
                .iter()
                .enumerate()
                .map(|(i, &n)| (n as usize, i))
                .collect(),
            cache: std::collections::HashMap::new(),
        }
    }

    /// Sources reachable from `from` (inclusive) without passing the join.
    fn from(&mut self, from: usize) -> Bits {
        if let Some(b) = self.cache.get(&from) {
            return b.clone();
        }
        let mut bits = vec![0u64; self.words];
        let mut seen = vec![false; self.s.ids.len() + 1];
        let mut stack = vec![from];
        if from != self.skip {
            seen[from] = true;
        } else {
            stack.clear();
        }
        while let Some(x) = stack.pop() {
            if let Some(&p) = self.pos.get(&x) {
                set_bit(&mut bits, p);
            }
            for e in self
                .s
                .topo
                .edges_directed(NodeIndex::new(x), Direction::Outgoing)
            {
                let t = e.target().index();
                if t != self.skip && !seen[t] {
                    seen[t] = true;
                    stack.push(t);
                }
            }
        }
        self.cache.insert(from, bits.clone());
        bits
    }
}

/// The slot of a node index, for building the topology.
pub(crate) fn slot(i: usize, n: usize) -> Slot {
    if i == n {
        Slot::End
    } else {
        Slot::Node(i as NodeIdx)
    }
}
