//! The comparisons behind [`super::expect`]: routes, tool calls, state
//! fields, answers and sequences, each failing with both sides shown.

use serde_json::Value;

use super::expect::{Failure, arrow};
use super::jsonpath;
use super::matching::{contains, json_diff, pretty, text_diff};
use super::observe::{Call, Observation};
use super::spec::{AnswerExpect, CallExpect};
use crate::graph::loc::{Loc, Sp};

/// Whether `want` matches a chunk after the chunks matching `before`, in order.
pub(super) fn in_order(chunks: &[Value], before: &[&Value], want: &Value) -> bool {
    let mut i = 0;
    for b in before {
        match chunks[i..].iter().position(|c| contains(c, b)) {
            Some(p) => i += p + 1,
            None => return chunks.iter().any(|c| contains(c, want)),
        }
    }
    chunks[i..].iter().any(|c| contains(c, want))
}

pub(super) fn summary(chunks: &[Value]) -> String {
    let mut types: Vec<&str> = Vec::new();
    for c in chunks {
        let t = c["type"].as_str().unwrap_or("?");
        if types.last() != Some(&t) {
            types.push(t);
        }
    }
    types.join(", ")
}

pub(super) fn route(
    turn: usize,
    node: &Sp<String>,
    values: &Sp<Vec<String>>,
    o: &Observation,
) -> Option<Failure> {
    let got: Vec<String> = o
        .routes
        .iter()
        .filter(|(n, _)| *n == node.value)
        .map(|(_, v)| v.clone().unwrap_or_else(|| "(none)".into()))
        .collect();
    let matches = match values.value.as_slice() {
        [one] => got.last() == Some(one),
        many => got == many,
    };
    (!matches).then(|| {
        let msg = if got.is_empty() {
            format!("`{}` did not route in this turn", node.value)
        } else {
            format!("`{}` routed on another value", node.value)
        };
        Failure::at("routes", turn, values.loc, msg).pair(
            values.value.join(", "),
            if got.is_empty() {
                arrow(&o.path)
            } else {
                got.join(", ")
            },
        )
    })
}

pub(super) fn tool_calls(turn: usize, want: &Sp<Vec<CallExpect>>, got: &[Call]) -> Vec<Failure> {
    let shown = |calls: &[Call]| {
        calls
            .iter()
            .map(|c| format!("{}({})", c.name, c.args))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if want.value.is_empty() {
        return if got.is_empty() {
            Vec::new()
        } else {
            vec![
                Failure::at(
                    "tool_calls",
                    turn,
                    want.loc,
                    "tools were called, but the case expects none".into(),
                )
                .pair("(none)".into(), shown(got)),
            ]
        };
    }
    let mut out = Vec::new();
    let mut from = 0;
    for w in &want.value {
        let hit = got[from..].iter().position(|c| {
            c.name == w.name.value
                && w.node.as_ref().is_none_or(|n| n.value == c.node)
                && w.args.as_ref().is_none_or(|a| {
                    if w.exact {
                        c.args == a.value
                    } else {
                        contains(&c.args, &a.value)
                    }
                })
        });
        match hit {
            Some(p) => from += p + 1,
            None => {
                let args = w
                    .args
                    .as_ref()
                    .map_or_else(|| "…".to_owned(), |a| a.value.to_string());
                let same_tool: Vec<&Call> = got.iter().filter(|c| c.name == w.name.value).collect();
                let mut f = Failure::at(
                    "tool_calls",
                    turn,
                    w.loc,
                    format!(
                        "no call of `{}` matching {args}{}",
                        w.name.value,
                        if from > 0 {
                            " after the calls listed before it"
                        } else {
                            ""
                        }
                    ),
                )
                .pair(
                    format!("{}({args})", w.name.value),
                    if got.is_empty() {
                        "(no tool calls)".into()
                    } else {
                        shown(got)
                    },
                );
                if let (Some(a), [only]) = (&w.args, same_tool.as_slice()) {
                    f = f.diff(json_diff(&a.value, &only.args));
                }
                out.push(f);
            }
        }
    }
    out
}

pub(super) fn field_check(
    turn: usize,
    kind: &'static str,
    when: &str,
    state: &Value,
    field: &Sp<String>,
    want: &Sp<Value>,
) -> Option<Failure> {
    let got = state.get(&field.value).cloned().unwrap_or(Value::Null);
    if contains(&got, &want.value) {
        return None;
    }
    let f = Failure::at(
        kind,
        turn,
        want.loc,
        format!("`{}` {when} differs", field.value),
    );
    Some(match (&want.value, &got) {
        (Value::String(w), Value::String(g))
            if !w.contains('\n') && !g.contains('\n') && w.len() + g.len() < 160 =>
        {
            f.pair(pretty(&want.value), pretty(&got))
        }
        (Value::String(w), Value::String(g)) => f.diff(text_diff(w, g)),
        _ if pretty(&want.value).len() + pretty(&got).len() < 120
            && !pretty(&got).contains('\n') =>
        {
            f.pair(want.value.to_string(), got.to_string())
        }
        _ => f.diff(json_diff(&want.value, &got)),
    })
}

pub(super) fn answer(turn: usize, a: &Sp<AnswerExpect>, got: &str) -> Vec<Failure> {
    let mut out = Vec::new();
    let fail = |msg: String| Failure::at("answer", turn, a.loc, msg);
    if let Some(eq) = &a.value.equals
        && eq != got
    {
        out.push(fail("the answer differs".into()).diff(text_diff(eq, got)));
    }
    for c in &a.value.contains {
        if !got.contains(c.as_str()) {
            out.push(
                fail(format!("the answer does not contain {c:?}")).pair(c.clone(), got.to_owned()),
            );
        }
    }
    for c in &a.value.excludes {
        if got.contains(c.as_str()) {
            out.push(
                fail(format!("the answer contains {c:?}"))
                    .pair(format!("no {c:?}"), got.to_owned()),
            );
        }
    }
    if let Some(re) = &a.value.regex
        && !re.is_match(got)
    {
        out.push(
            fail(format!("the answer does not match /{}/", re.as_str()))
                .pair(re.as_str().to_owned(), got.to_owned()),
        );
    }
    if let Some((path, want)) = &a.value.json_path {
        let parsed: Option<Value> = serde_json::from_str(got.trim()).ok();
        let at = parsed
            .as_ref()
            .and_then(|v| jsonpath::parse(path).and_then(|p| jsonpath::select(v, &p)));
        match (parsed.as_ref(), at) {
            (None, _) => out.push(
                fail(format!(
                    "the answer is not JSON, so `{path}` cannot be read"
                ))
                .pair(want.to_string(), got.to_owned()),
            ),
            (Some(_), None) => out.push(
                fail(format!("the answer has nothing at `{path}`"))
                    .pair(want.to_string(), got.to_owned()),
            ),
            (Some(_), Some(v)) if !contains(v, want) => out.push(
                fail(format!("the answer's `{path}` differs"))
                    .pair(want.to_string(), v.to_string()),
            ),
            _ => {}
        }
    }
    out
}

/// Each of `want` matches an item of `got`, in order.
pub(super) fn sequence(
    turn: usize,
    kind: &'static str,
    loc: Loc,
    want: &[Value],
    got: &[Value],
    m: impl Fn(&Value, &Value) -> bool,
) -> Vec<Failure> {
    let mut from = 0;
    let mut out = Vec::new();
    for w in want {
        match got[from..].iter().position(|g| m(g, w)) {
            Some(p) => from += p + 1,
            None => out.push(
                Failure::at(kind, turn, loc, format!("nothing matches {w}")).diff(json_diff(
                    &Value::Array(want.to_vec()),
                    &Value::Array(got.to_vec()),
                )),
            ),
        }
    }
    out
}
