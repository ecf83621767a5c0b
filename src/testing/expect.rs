//! Checking a turn's expectations against what it did. Each failure says
//! what was expected and what happened, with a diff where the two are
//! texts or values, and points at the line of the expectation.

use serde::Serialize;
use serde_json::Value;

use super::compare::{answer, field_check, in_order, route, sequence, summary, tool_calls};
use super::matching::{contains, json_diff};
use super::observe::Observation;
use super::spec::Expect;
use crate::graph::loc::Loc;

/// One expectation that did not hold.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    /// Which kind: `path`, `nodes`, `routes`, `tool_calls`, `state`,
    /// `after`, `answer`, `status`, `error`, `interrupts`, `stream`,
    /// `aisdk_valid`, or `script` / `unused` / `run` / `tools` / `graph`
    /// for problems of the case itself.
    pub kind: &'static str,
    /// The turn (0-based).
    pub turn: usize,
    /// Where the expectation is written.
    pub line: u32,
    /// Its column.
    pub column: u32,
    /// What went wrong, in a sentence.
    pub message: String,
    /// What was expected, when it is short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// What happened, when it is short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
    /// A line diff (`- expected`, `+ actual`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl Failure {
    /// A failure with a message only.
    pub fn at(kind: &'static str, turn: usize, loc: Loc, message: String) -> Self {
        Self {
            kind,
            turn,
            line: loc.line,
            column: loc.column,
            message,
            expected: None,
            actual: None,
            diff: None,
        }
    }

    pub(super) fn pair(mut self, expected: String, actual: String) -> Self {
        self.expected = Some(expected);
        self.actual = Some(actual);
        self
    }

    pub(super) fn diff(mut self, diff: String) -> Self {
        self.diff = Some(diff);
        self
    }
}

pub(super) fn arrow(nodes: &[String]) -> String {
    if nodes.is_empty() {
        "(no node)".into()
    } else {
        nodes.join(" → ")
    }
}

/// The failures of turn `turn`.
pub(super) fn check(turn: usize, e: &Expect, o: &Observation) -> Vec<Failure> {
    let mut out = Vec::new();
    nodes_run(turn, e, o, &mut out);
    for (node, values) in &e.routes {
        out.extend(route(turn, node, values, o));
    }
    if let Some(calls) = &e.tool_calls {
        out.extend(tool_calls(turn, calls, &o.tool_calls));
    }
    for (field, want) in &e.state {
        out.extend(field_check(
            turn,
            "state",
            "after the turn",
            &o.state,
            field,
            want,
        ));
    }
    for (node, fields) in &e.after {
        match o.after.get(&node.value) {
            None => out.push(
                Failure::at(
                    "after",
                    turn,
                    node.loc,
                    format!("`{}` did not finish in this turn", node.value),
                )
                .pair(node.value.clone(), arrow(&o.path)),
            ),
            Some(state) => {
                for (field, want) in fields {
                    let when = format!("after `{}`", node.value);
                    out.extend(field_check(turn, "after", &when, state, field, want));
                }
            }
        }
    }
    if let Some(a) = &e.answer {
        out.extend(answer(turn, a, &o.answer));
    }
    ending(turn, e, o, &mut out);
    stream(turn, e, o, &mut out);
    out
}

/// `path` and `nodes`.
fn nodes_run(turn: usize, e: &Expect, o: &Observation, out: &mut Vec<Failure>) {
    let fail = |kind, loc: Loc, msg: String| Failure::at(kind, turn, loc, msg);
    if let Some(path) = &e.path {
        let want: Vec<String> = path.value.iter().map(|n| n.value.clone()).collect();
        if want != o.path {
            out.push(
                fail("path", path.loc, "the path differs".into())
                    .pair(arrow(&want), arrow(&o.path)),
            );
        }
    }
    let Some(nodes) = &e.nodes else { return };
    if let Some(set) = &nodes.set {
        let mut want: Vec<&str> = set.value.iter().map(|n| n.value.as_str()).collect();
        let mut got: Vec<&str> = o.path.iter().map(String::as_str).collect();
        want.sort_unstable();
        want.dedup();
        got.sort_unstable();
        got.dedup();
        if want != got {
            out.push(
                fail("nodes", set.loc, "the set of nodes run differs".into())
                    .pair(want.join(", "), got.join(", ")),
            );
        }
    }
    for n in &nodes.includes {
        if !o.path.contains(&n.value) {
            out.push(
                fail("nodes", n.loc, format!("`{}` did not run", n.value))
                    .pair(n.value.clone(), arrow(&o.path)),
            );
        }
    }
    for n in &nodes.excludes {
        if o.path.contains(&n.value) {
            out.push(
                fail(
                    "nodes",
                    n.loc,
                    format!("`{}` ran, but should not have", n.value),
                )
                .pair(format!("not {}", n.value), arrow(&o.path)),
            );
        }
    }
}

/// `status`, `error` and `interrupts`.
fn ending(turn: usize, e: &Expect, o: &Observation, out: &mut Vec<Failure>) {
    let fail = |kind, loc: Loc, msg: String| Failure::at(kind, turn, loc, msg);
    if let Some(s) = &e.status {
        let got = o.status.map_or("unknown", |s| s.as_str());
        if Some(s.value) != o.status {
            let why = o
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            out.push(
                fail("status", s.loc, format!("the turn ended `{got}`{why}"))
                    .pair(s.value.as_str().into(), got.into()),
            );
        }
    }
    if let Some(err) = &e.error {
        let got = o.error.clone().unwrap_or_default();
        if !got.contains(&err.value) {
            let got = if got.is_empty() {
                "(no error)".into()
            } else {
                got
            };
            out.push(
                fail(
                    "error",
                    err.loc,
                    "the run's error does not contain the expected text".into(),
                )
                .pair(err.value.clone(), got),
            );
        }
    }
    if let Some(want) = &e.interrupts {
        out.extend(sequence(
            turn,
            "interrupts",
            want.loc,
            &want.value,
            &o.interrupts,
            contains,
        ));
        if want.value.is_empty() && !o.interrupts.is_empty() {
            let diff = json_diff(&Value::Array(vec![]), &Value::Array(o.interrupts.clone()));
            out.push(
                fail(
                    "interrupts",
                    want.loc,
                    "the run paused, but no interrupt was expected".into(),
                )
                .diff(diff),
            );
        }
    }
}

/// `stream` and `aisdk_valid`.
fn stream(turn: usize, e: &Expect, o: &Observation, out: &mut Vec<Failure>) {
    let fail = |kind, loc: Loc, msg: String| Failure::at(kind, turn, loc, msg);
    if let Some(s) = &e.stream {
        for (i, want) in s.includes.iter().enumerate() {
            let before: Vec<&Value> = s.includes[..i].iter().map(|w| &w.value).collect();
            if !in_order(&o.stream.chunks, &before, &want.value) {
                let msg = format!(
                    "the stream has no chunk matching {} (after those listed before it)",
                    want.value
                );
                out.push(
                    fail("stream", want.loc, msg)
                        .pair(want.value.to_string(), summary(&o.stream.chunks)),
                );
            }
        }
        for want in &s.excludes {
            if let Some(c) = o.stream.chunks.iter().find(|c| contains(c, &want.value)) {
                let msg = format!("the stream has a chunk matching {}", want.value);
                out.push(
                    fail("stream", want.loc, msg).pair(format!("no {}", want.value), c.to_string()),
                );
            }
        }
    }
    if let Some(v) = &e.aisdk_valid
        && v.value != o.stream.valid()
    {
        let msg = if v.value {
            format!(
                "the stream breaks the AI SDK's rules: {}",
                o.stream.errors.join("; ")
            )
        } else {
            "the stream is valid for the AI SDK, which the case says it is not".into()
        };
        out.push(fail("aisdk_valid", v.loc, msg));
    }
}
