//! Reading `expect:`: every kind of expectation a turn may state.

use serde_json::Value;

use super::read::{Reader, get, json};
use super::spec::{AnswerExpect, CallExpect, Expect, NodesExpect, Status, StreamExpect};
use crate::graph::loc::Sp;
use crate::graph::value::SpValue;

const EXPECT_KEYS: &[&str] = &[
    "path",
    "nodes",
    "routes",
    "tool_calls",
    "state",
    "after",
    "answer",
    "status",
    "error",
    "interrupts",
    "stream",
    "aisdk_valid",
    "judge",
];
const ANSWER_KEYS: &[&str] = &[
    "equals",
    "contains",
    "excludes",
    "regex",
    "json_path",
    "value",
];

/// Reads `expect:`.
pub(super) fn expect(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Expect {
    let Some(e) = r.map(v, "`expect`", EXPECT_KEYS) else {
        return Expect::default();
    };
    let mut out = Expect {
        path: get(&e, "path").map(|p| Sp::new(r.names(p, "`path`"), p.loc)),
        ..Expect::default()
    };
    if let Some(n) = get(&e, "nodes") {
        out.nodes = nodes(r, n);
    }
    if let Some(routes) = get(&e, "routes") {
        out.routes = r
            .named(routes, "`routes`")
            .into_iter()
            .map(|(node, values)| {
                let vals = r.names(values, "a route value");
                (
                    node.clone(),
                    Sp::new(vals.into_iter().map(|v| v.value).collect(), values.loc),
                )
            })
            .collect();
    }
    if let Some(calls) = get(&e, "tool_calls") {
        let items = r.seq(calls, "`tool_calls`");
        let list = items.iter().filter_map(|c| call(r, c)).collect();
        out.tool_calls = Some(Sp::new(list, calls.loc));
    }
    if let Some(s) = get(&e, "state") {
        out.state = fields(r, s, "`state`");
    }
    if let Some(a) = get(&e, "after") {
        out.after = r
            .named(a, "`after`")
            .into_iter()
            .map(|(node, f)| (node.clone(), fields(r, f, "a node's state in `after`")))
            .collect();
    }
    out.answer = get(&e, "answer").and_then(|a| answer(r, a));
    out.status = get(&e, "status").and_then(|s| status(r, s));
    out.error = get(&e, "error").and_then(|s| r.string(s, "`error`"));
    if let Some(i) = get(&e, "interrupts") {
        let list = r
            .seq(i, "`interrupts`")
            .iter()
            .map(|v| json(v).value)
            .collect();
        out.interrupts = Some(Sp::new(list, i.loc));
    }
    if let Some(s) = get(&e, "stream") {
        out.stream = stream(r, s);
    }
    out.aisdk_valid =
        get(&e, "aisdk_valid").and_then(|b| Some(Sp::new(r.bool(b, "`aisdk_valid`")?, b.loc)));
    if let Some(j) = get(&e, "judge") {
        out.judge = criteria(r, j);
    }
    out
}

/// `judge:`: criteria in words, one or a list.
fn criteria(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Vec<Sp<String>> {
    let items = match &v.value {
        SpValue::Seq(items) => items.as_slice(),
        _ => std::slice::from_ref(v),
    };
    let mut out = Vec::new();
    for item in items {
        let Some(c) = r.string(item, "a `judge` criterion") else {
            continue;
        };
        if c.value.trim().is_empty() {
            r.error(
                c.loc,
                "invalid-value",
                "a `judge` criterion says what the answer must do, e.g. \"the answer is polite\""
                    .into(),
                None,
            );
        } else {
            out.push(c);
        }
    }
    out
}

fn fields(r: &mut Reader<'_>, v: &Sp<SpValue>, what: &str) -> Vec<(Sp<String>, Sp<Value>)> {
    r.named(v, what)
        .into_iter()
        .map(|(k, v)| (k.clone(), json(v)))
        .collect()
}

fn nodes(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<NodesExpect> {
    let e = r.map(v, "`nodes`", &["set", "includes", "excludes"])?;
    Some(NodesExpect {
        set: get(&e, "set").map(|s| Sp::new(r.names(s, "`nodes.set`"), s.loc)),
        includes: get(&e, "includes").map_or_else(Vec::new, |s| r.names(s, "`nodes.includes`")),
        excludes: get(&e, "excludes").map_or_else(Vec::new, |s| r.names(s, "`nodes.excludes`")),
    })
}

fn call(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<CallExpect> {
    let e = r.map(
        v,
        "an expected tool call",
        &["name", "args", "exact", "node"],
    )?;
    let Some(name) = get(&e, "name").and_then(|n| r.string(n, "a tool call's `name`")) else {
        r.error(
            v.loc,
            "missing-key",
            "an expected tool call needs `name`".into(),
            None,
        );
        return None;
    };
    let args = get(&e, "args").map(json);
    if let Some(a) = &args
        && !a.value.is_object()
    {
        r.error(
            a.loc,
            "invalid-value",
            "a tool call's `args` is a mapping".into(),
            None,
        );
    }
    Some(CallExpect {
        name,
        args,
        exact: get(&e, "exact")
            .and_then(|x| r.bool(x, "`exact`"))
            .unwrap_or(false),
        node: get(&e, "node").and_then(|n| r.string(n, "`node`")),
        loc: v.loc,
    })
}

fn answer(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<Sp<AnswerExpect>> {
    if let SpValue::Str(s) = &v.value {
        let a = AnswerExpect {
            equals: Some(s.clone()),
            ..AnswerExpect::default()
        };
        return Some(Sp::new(a, v.loc));
    }
    let e = r.map(v, "`answer`", ANSWER_KEYS)?;
    let texts = |r: &mut Reader<'_>, k: &str| {
        get(&e, k).map_or_else(Vec::new, |t| {
            r.names(t, &format!("`answer.{k}`"))
                .into_iter()
                .map(|s| s.value)
                .collect()
        })
    };
    let mut a = AnswerExpect {
        equals: get(&e, "equals")
            .and_then(|s| r.string(s, "`answer.equals`"))
            .map(|s| s.value),
        contains: texts(r, "contains"),
        excludes: texts(r, "excludes"),
        ..AnswerExpect::default()
    };
    if let Some(re) = get(&e, "regex").and_then(|s| r.string(s, "`answer.regex`")) {
        match regex::Regex::new(&re.value) {
            Ok(compiled) => a.regex = Some(compiled),
            Err(err) => {
                // The library's message draws the pattern; its last line says why.
                let text = err.to_string();
                let why = text
                    .lines()
                    .last()
                    .unwrap_or(&text)
                    .trim_start_matches("error: ")
                    .to_owned();
                r.error(
                    re.loc,
                    "invalid-regex",
                    format!("not a regular expression: {why}"),
                    None,
                );
            }
        }
    }
    match (get(&e, "json_path"), get(&e, "value")) {
        (Some(p), Some(val)) => {
            if let Some(path) = r.string(p, "`answer.json_path`") {
                if super::jsonpath::parse(&path.value).is_none() {
                    r.error(
                        path.loc,
                        "invalid-json-path",
                        format!("`{}` is not a JSON path this runner reads", path.value),
                        Some("write `$.field`, `$.list[0].field` or `$[\"odd key\"]`".into()),
                    );
                }
                a.json_path = Some((path.value, json(val).value));
            }
        }
        (Some(p), None) => r.error(
            p.loc,
            "missing-key",
            "`json_path` needs `value:` beside it".into(),
            None,
        ),
        (None, Some(val)) => r.error(
            val.loc,
            "missing-key",
            "`value` needs `json_path:` beside it".into(),
            None,
        ),
        (None, None) => {}
    }
    Some(Sp::new(a, v.loc))
}

fn status(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<Sp<Status>> {
    let s = r.string(v, "`status`")?;
    let st = match s.value.as_str() {
        "completed" => Status::Completed,
        "failed" => Status::Failed,
        "interrupted" => Status::Interrupted,
        other => {
            r.error(
                s.loc,
                "invalid-value",
                format!("unknown status `{other}`"),
                Some("one of completed, failed, interrupted".into()),
            );
            return None;
        }
    };
    Some(Sp::new(st, s.loc))
}

fn stream(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<StreamExpect> {
    let e = r.map(v, "`stream`", &["includes", "excludes"])?;
    let chunks = |r: &mut Reader<'_>, k: &str| -> Vec<Sp<Value>> {
        get(&e, k).map_or_else(Vec::new, |list| {
            r.seq(list, &format!("`stream.{k}`"))
                .iter()
                .filter(|c| {
                    let ok = matches!(&c.value, SpValue::Map(m) if m.iter().any(|(k, _)| k.value == "type"));
                    if !ok {
                        r.error(
                            c.loc,
                            "invalid-value",
                            "a stream chunk is a mapping with at least `type`".into(),
                            Some("e.g. `{ type: data-followups }`".into()),
                        );
                    }
                    ok
                })
                .map(json)
                .collect()
        })
    };
    Some(StreamExpect {
        includes: chunks(r, "includes"),
        excludes: chunks(r, "excludes"),
    })
}
