//! Reading a test file: YAML with a place for every part, then the
//! shapes of [`super::spec`], every mistake a diagnostic `file:line:col`.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::expect_read::expect;
use super::read::{Reader, get, json};
use super::spec::{
    Case, InputSpec, ResumeSpec, STUB_ERRORS, Start, Stub, StubOutcome, TestFile, TurnSpec,
};
use crate::graph::diagnostic::{Diagnostic, Diagnostics};
use crate::graph::loc::{Loc, Sp};
use crate::graph::source::read_capped;
use crate::graph::value::{SpEntry, SpValue};
use crate::llm::reply::Reply;

/// Largest test file read (4 MiB: recorded cases carry tool results).
pub(crate) const MAX_TEST_FILE_BYTES: u64 = 4 * 1024 * 1024;

const FILE_KEYS: &[&str] = &["graph", "description", "tools", "cases"];
const CASE_KEYS: &[&str] = &[
    "name",
    "description",
    "graph",
    "input",
    "resume",
    "models",
    "tools",
    "real_tools",
    "expect",
    "turns",
];
const TURN_KEYS: &[&str] = &["input", "resume", "models", "tools", "expect"];
const INPUT_KEYS: &[&str] = &["message", "messages", "state"];
const STUB_KEYS: &[&str] = &[
    "name",
    "args",
    "result",
    "error",
    "partition",
    "node",
    "schema",
];

/// Reads and parses a test file.
///
/// # Errors
/// Every problem found, as diagnostics.
pub fn load_test_file(path: &Path) -> Result<TestFile, Vec<Diagnostic>> {
    let display: Arc<str> = path.display().to_string().into();
    match read_capped(path, MAX_TEST_FILE_BYTES) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => parse_test_file(path, &text),
            Err(_) => Err(one(
                display,
                "invalid-utf8",
                "test file is not valid UTF-8".into(),
            )),
        },
        Err(e) => Err(one(
            display,
            e.code(),
            format!("cannot read test file: {e}"),
        )),
    }
}

fn one(file: Arc<str>, code: &'static str, message: String) -> Vec<Diagnostic> {
    let mut d = Diagnostics::new(file);
    d.error(Loc::new(1, 1), code, message, None);
    d.into_vec()
}

/// Parses test-file text.
///
/// # Errors
/// Every problem found, as diagnostics.
pub(crate) fn parse_test_file(path: &Path, text: &str) -> Result<TestFile, Vec<Diagnostic>> {
    let display: Arc<str> = path.display().to_string().into();
    let mut d = Diagnostics::new(Arc::clone(&display));
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.strict_booleans = true;
    options.reject_unsupported_tags = true;
    let root: Sp<SpValue> = match serde_saphyr::from_str_with_options(text, options) {
        Ok(v) => v,
        Err(e) => {
            let loc = e
                .location()
                .map(Loc::from)
                .filter(Loc::is_known)
                .unwrap_or(Loc::new(1, 1));
            let message = e.to_string();
            let message = message.split(" at line ").next().unwrap_or(&message);
            d.error(loc, "yaml", format!("not valid YAML: {message}"), None);
            return Err(d.into_vec());
        }
    };
    let mut r = Reader { d: &mut d };
    let file = read_file(&mut r, &root, path, display);
    if d.has_errors() {
        Err(d.into_vec())
    } else {
        Ok(file)
    }
}

fn read_file(r: &mut Reader<'_>, root: &Sp<SpValue>, path: &Path, display: Arc<str>) -> TestFile {
    let mut file = TestFile {
        path: path.to_owned(),
        display,
        graph: None,
        cases: Vec::new(),
    };
    let Some(top) = r.map(root, "a test file", FILE_KEYS) else {
        return file;
    };
    file.graph = get(&top, "graph").and_then(|g| r.string(g, "`graph`"));
    let Some(cases) = get(&top, "cases") else {
        r.error(
            root.loc,
            "missing-key",
            "a test file needs `cases:`, a list of cases".into(),
            Some("see docs/testing.md".into()),
        );
        return file;
    };
    let shared = get(&top, "tools").map_or_else(Vec::new, |t| stubs(r, t));
    for c in r.seq(cases, "`cases`") {
        if let Some(mut case) = read_case(r, c, file.graph.as_ref()) {
            for t in &mut case.turns {
                t.tools.extend(shared.iter().cloned());
            }
            if let Some(first) = file.cases.iter().find(|o| o.name.value == case.name.value) {
                r.error(
                    case.name.loc,
                    "duplicate-case",
                    format!(
                        "a case named `{}` is already at line {}",
                        case.name.value, first.name.loc.line
                    ),
                    Some("give each case its own name".into()),
                );
            }
            file.cases.push(case);
        }
    }
    file
}

fn read_case(
    r: &mut Reader<'_>,
    v: &Sp<SpValue>,
    default_graph: Option<&Sp<String>>,
) -> Option<Case> {
    let entries = r.map(v, "a case", CASE_KEYS)?;
    let name = match get(&entries, "name") {
        Some(n) => r.string(n, "`name`")?,
        None => {
            r.error(v.loc, "missing-key", "a case needs `name`".into(), None);
            return None;
        }
    };
    let graph = match get(&entries, "graph").and_then(|g| r.string(g, "`graph`")) {
        Some(g) => g,
        None => match default_graph {
            Some(g) => g.clone(),
            None => {
                r.error(
                    name.loc,
                    "missing-key",
                    format!("case `{}` names no graph", name.value),
                    Some("write `graph:` at the top of the file or in the case".into()),
                );
                return None;
            }
        },
    };
    let real_tools =
        get(&entries, "real_tools").map_or_else(Vec::new, |t| r.names(t, "`real_tools`"));
    let shared_tools = get(&entries, "tools").map_or_else(Vec::new, |t| stubs(r, t));
    let turns = match get(&entries, "turns") {
        Some(turns) => {
            for k in ["input", "resume", "expect"] {
                if let Some(e) = entries.iter().find(|e| e.0.value == k) {
                    r.error(
                        e.0.loc,
                        "misplaced-key",
                        format!("a case with `turns` has no `{k}` of its own"),
                        Some(format!("move `{k}` into its turn")),
                    );
                }
            }
            let mut out: Vec<TurnSpec> = r
                .seq(turns, "`turns`")
                .iter()
                .filter_map(|t| {
                    let e = r.map(t, "a turn", TURN_KEYS)?;
                    turn(r, &e, t.loc)
                })
                .collect();
            if let (Some(first), Some(models)) = (out.first_mut(), get(&entries, "models")) {
                // Replies written on the case serve any turn, after the turn's own.
                first.models.extend(models_of(r, models));
            }
            out
        }
        None => turn(r, &entries, v.loc).into_iter().collect(),
    };
    if let Some(first) = turns.first()
        && matches!(first.start, Start::Resume(_))
    {
        r.error(
            first.loc,
            "invalid-value",
            "the first turn cannot `resume`: nothing has paused yet".into(),
            Some("start with `input:`".into()),
        );
    }
    let mut turns = turns;
    for t in &mut turns {
        t.tools.extend(shared_tools.iter().cloned());
    }
    Some(Case {
        name,
        graph,
        real_tools,
        turns,
        loc: v.loc,
    })
}

fn turn(r: &mut Reader<'_>, entries: &[&SpEntry], loc: Loc) -> Option<TurnSpec> {
    let start = match (get(entries, "input"), get(entries, "resume")) {
        (Some(_), Some(_)) => {
            r.error(
                loc,
                "invalid-value",
                "a turn has `input` or `resume`, not both".into(),
                None,
            );
            return None;
        }
        (Some(i), None) => Start::Input(input(r, i)?),
        (None, Some(res)) => Start::Resume(resume(r, res)?),
        (None, None) => {
            r.error(
                loc,
                "missing-key",
                "a turn needs `input:` (or `resume:` after a pause)".into(),
                Some("e.g. `input: { message: \"hello\" }`".into()),
            );
            return None;
        }
    };
    let models = get(entries, "models").map_or_else(Vec::new, |m| models_of(r, m));
    let tools = get(entries, "tools").map_or_else(Vec::new, |t| stubs(r, t));
    let expect = get(entries, "expect")
        .map(|e| expect(r, e))
        .unwrap_or_default();
    Some(TurnSpec {
        start,
        models,
        tools,
        expect,
        loc,
    })
}

fn input(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<InputSpec> {
    let e = r.map(v, "`input`", INPUT_KEYS)?;
    let mut out = InputSpec {
        loc: v.loc,
        ..InputSpec::default()
    };
    out.message = get(&e, "message").and_then(|m| r.string(m, "`input.message`"));
    if let Some(m) = get(&e, "messages") {
        let items: Vec<Value> = r
            .seq(m, "`input.messages`")
            .iter()
            .filter_map(|i| message_item(r, i))
            .collect();
        out.messages = Some(Sp::new(items, m.loc));
    }
    if let Some(s) = get(&e, "state") {
        out.state = r
            .named(s, "`input.state`")
            .into_iter()
            .map(|(k, v)| (k.clone(), json(v)))
            .collect();
    }
    let written = matches!(&v.value, SpValue::Map(m) if !m.is_empty());
    if out.message.is_none() && out.messages.is_none() && out.state.is_empty() && !written {
        r.error(
            v.loc,
            "missing-key",
            "`input` needs `message`, `messages` or `state`".into(),
            None,
        );
        return None;
    }
    Some(out)
}

fn message_item(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<Value> {
    let item = json(v).value;
    let role = item.get("role").and_then(Value::as_str);
    match role {
        Some("system" | "user" | "assistant" | "tool") => Some(item),
        _ => {
            r.error(
                v.loc,
                "invalid-value",
                "a message is `{role: user|assistant|system|tool, content: …}`".into(),
                None,
            );
            None
        }
    }
}

fn resume(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<Sp<ResumeSpec>> {
    let e = r.map(v, "`resume`", &["value", "answers"])?;
    let spec = match (get(&e, "value"), get(&e, "answers")) {
        (Some(val), None) => ResumeSpec::Value(json(val).value),
        (None, Some(a)) => ResumeSpec::Answers(
            r.named(a, "`resume.answers`")
                .into_iter()
                .map(|(k, v)| (k.value.clone(), json(v).value))
                .collect(),
        ),
        _ => {
            r.error(
                v.loc,
                "invalid-value",
                "`resume` has `value` (one interrupt) or `answers` (by interrupt id)".into(),
                None,
            );
            return None;
        }
    };
    Some(Sp::new(spec, v.loc))
}

/// `models:`: node → replies.
fn models_of(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Vec<(Sp<String>, Vec<Sp<Reply>>)> {
    r.named(v, "`models`")
        .into_iter()
        .map(|(node, replies)| {
            let list = match &replies.value {
                SpValue::Seq(items) => items.iter().collect::<Vec<_>>(),
                _ => vec![replies],
            };
            let parsed = list
                .into_iter()
                .filter_map(|item| match Reply::from_json(&item.value.to_json()) {
                    Ok(reply) => Some(Sp::new(reply, item.loc)),
                    Err(e) => {
                        r.error(item.loc, "invalid-reply", e, None);
                        None
                    }
                })
                .collect();
            (node.clone(), parsed)
        })
        .collect()
}

fn stubs(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Vec<Stub> {
    r.seq(v, "`tools`")
        .iter()
        .filter_map(|s| stub(r, s))
        .collect()
}

fn stub(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<Stub> {
    let e = r.map(v, "a tool stub", STUB_KEYS)?;
    let Some(name) = get(&e, "name").and_then(|n| r.string(n, "a stub's `name`")) else {
        r.error(
            v.loc,
            "missing-key",
            "a tool stub needs `name`".into(),
            None,
        );
        return None;
    };
    let outcome = match (get(&e, "result"), get(&e, "error")) {
        (Some(res), None) => StubOutcome::Result(json(res).value),
        (None, Some(err)) => stub_error(r, err)?,
        _ => {
            r.error(
                v.loc,
                "invalid-value",
                format!(
                    "the stub of `{}` needs `result` or `error` (one of them)",
                    name.value
                ),
                None,
            );
            return None;
        }
    };
    let args = get(&e, "args").map(json);
    if let Some(a) = &args
        && !a.value.is_object()
    {
        r.error(
            a.loc,
            "invalid-value",
            "a stub's `args` is a mapping".into(),
            None,
        );
    }
    let schema = get(&e, "schema").map(json);
    if let Some(sc) = &schema
        && !sc.value.is_object()
    {
        r.error(
            sc.loc,
            "invalid-value",
            "a stub's `schema` is the tool's argument JSON Schema, a mapping".into(),
            None,
        );
    }
    Some(Stub {
        name,
        args,
        schema,
        outcome,
        partition: get(&e, "partition").and_then(|p| r.string(p, "`partition`")),
        node: get(&e, "node").and_then(|n| r.string(n, "`node`")),
        loc: v.loc,
    })
}

fn stub_error(r: &mut Reader<'_>, v: &Sp<SpValue>) -> Option<StubOutcome> {
    let e = r.map(v, "a stub's `error`", &["type", "message"])?;
    let kind = get(&e, "type").map_or(Some(Sp::new("execution_error".to_owned(), v.loc)), |t| {
        r.string(t, "`error.type`")
    })?;
    if !STUB_ERRORS.contains(&kind.value.as_str()) {
        r.error(
            kind.loc,
            "invalid-value",
            format!("unknown failure type `{}`", kind.value),
            Some(format!("one of {}", STUB_ERRORS.join(", "))),
        );
        return None;
    }
    let message = get(&e, "message")
        .and_then(|m| r.string(m, "`error.message`"))
        .map_or_else(|| format!("stubbed {}", kind.value), |m| m.value);
    Some(StubOutcome::Error {
        kind: kind.value,
        message,
    })
}
