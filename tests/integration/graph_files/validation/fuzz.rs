//! Bad input: whatever a graph file holds — nothing, not-YAML, the wrong
//! types, 10 MB, deep nesting, odd Unicode, random bytes, a mangled
//! chat.yaml — the loader answers with diagnostics placed in the file,
//! never a panic.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use stategraph::internals::graph::Diagnostic;
use stategraph::internals::graph::load::parse;

use crate::support::root;

/// Every diagnostic is placed: line and column from 1 and, for those about
/// the graph file itself (named `graph`), on a line the file has, at most
/// one column past its end.
fn assert_placed(diags: &[Diagnostic], graph: &str, source: &[u8]) -> Result<(), TestCaseError> {
    // YAML breaks lines at `\n`, `\r\n` and a lone `\r` (as editors do).
    let text = String::from_utf8_lossy(source)
        .replace("\r\n", "\n")
        .replace('\r', "\n");
    let lines: Vec<&str> = text.split('\n').collect();
    for d in diags {
        prop_assert!(d.line >= 1 && d.column >= 1, "unplaced: {}", d);
        if &*d.file == graph {
            let line = lines.get(d.line as usize - 1);
            prop_assert!(
                line.is_some(),
                "line past the end: {} ({} lines)",
                d,
                lines.len()
            );
            let width = line.map_or(0, |l| l.chars().count()) as u32;
            prop_assert!(
                d.column <= width + 1,
                "column past the end of the line: {} (line is {:?})",
                d,
                line
            );
        }
        let _ = d.to_string();
    }
    Ok(())
}

/// Parses `bytes` as `f.yaml`; when that succeeds, compiles it from a real
/// file against the shipped prompts.
fn load_anything(bytes: &[u8]) -> Result<(), TestCaseError> {
    match parse(Path::new("f.yaml"), "f", bytes) {
        Err(diags) => {
            prop_assert!(
                diags.iter().any(Diagnostic::is_error),
                "a failed parse says why"
            );
            assert_placed(&diags, "f.yaml", bytes)
        }
        Ok(_) => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.yaml");
            std::fs::write(&path, bytes).unwrap();
            let cat = crate::support::registries()
                .load_files(std::slice::from_ref(&path), &root().join("prompts"));
            assert_placed(&cat.diagnostics, &path.display().to_string(), bytes)?;
            prop_assert_eq!(cat.graphs.contains_key("f"), !cat.has_errors());
            prop_assert_eq!(cat.failed.contains("f"), cat.has_errors());
            Ok(())
        }
    }
}

#[test]
fn bad_input_is_always_a_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let node = "state: chat\nentry: a\nnodes:\n  - id: a\n    kind: noop\n    params:";
    let deep_flow = format!("{node} {}1{}\n", "[".repeat(5000), "]".repeat(5000));
    let deep_block: String = (0..200)
        .map(|i| format!("{}- k{i}:\n", " ".repeat(6 + 4 * i)))
        .collect();
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        ("empty", Vec::new(), "empty-file", "graph file is empty"),
        ("blank", b"\n   \n\t\n".to_vec(), "empty-file", "graph file is empty"),
        ("binary", vec![0, 159, 146, 150, 255, 0, 1], "invalid-utf8", "not valid UTF-8"),
        ("ten_mb", format!("state: chat\n{}", "# padding\n".repeat(1024 * 1024)).into_bytes(), "file-too-large", "10.5 MB"),
        ("deep_flow", deep_flow.into_bytes(), "yaml", "nesting is deeper than 32 levels"),
        ("deep_block", format!("{node}\n{deep_block}").into_bytes(), "yaml", "nesting is deeper than 32 levels"),
        ("scalar", b"just a sentence".to_vec(), "yaml", "expected a mapping"),
        ("list", b"- state: chat\n".to_vec(), "yaml", "expected a mapping"),
        ("tabs", b"state: chat\n\tentry: a\n".to_vec(), "yaml", "tab"),
        ("nul", b"state: chat\0\nentry: a\n".to_vec(), "yaml", "unexpected character"),
        (
            "unicode",
            "state: chat\nentry: \"\u{202e}evil\"\nnodes:\n  - id: \"\u{202e}evil\"\n    kind: noop\n  - id: 日本\n    kind: ノップ\nedges:\n  - \"\u{202e}evil -> 日本\"\n  - 日本 -> END\n".into(),
            "invalid-node-id",
            "node id `\\u{202e}evil`",
        ),
    ];
    for (name, bytes, code, message) in cases {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, &bytes).unwrap();
        let cat = crate::support::registries()
            .load_files(std::slice::from_ref(&path), &root().join("prompts"));
        assert!(
            cat.has_errors() && cat.failed.contains(name),
            "{name}: {:#?}",
            cat.diagnostics
        );
        // These say what to do about it, too.
        let hinted =
            matches!(code, "file-too-large" | "empty-file") || message.starts_with("nesting");
        assert!(
            cat.diagnostics.iter().any(|d| d.code == code
                && d.message.contains(message)
                && (d.hint.is_some() || !hinted)),
            "{name}: expected {code} `{message}`: {:#?}",
            cat.diagnostics
        );
        assert!(
            cat.diagnostics.iter().all(|d| d.line >= 1 && d.column >= 1),
            "{name}: {:#?}",
            cat.diagnostics
        );
    }
    let missing = dir.path().join("absent.yaml");
    let cat = crate::support::registries()
        .load_files(std::slice::from_ref(&missing), &root().join("prompts"));
    assert_eq!(
        cat.diagnostics
            .iter()
            .map(|d| (d.code, d.line, d.column))
            .collect::<Vec<_>>(),
        [("io", 1, 1)]
    );
}

#[test]
fn locations_follow_yaml_line_breaks() {
    // Lone `\r` (old Mac) and `\r\n` break lines for the parser, so they do
    // for every diagnostic: the parser's, the loader's and the compiler's.
    let cases: [(&[u8], &str); 3] = [
        (b"state: chat\rentry: a\rnodes:\r  - id: a\r    kind: nop\redges:\r  - \"a -> b\"\r", "5:11 unknown-kind, 7:11 unknown-node"),
        (b"state: chat\r\nentry: a\r\nnodes:\r\n  - id: a\r\n    kind: noop\r\nedges:\r\n  - a -> b\r\n", "7:10 unknown-node"),
        (b"state: chat\rentry: a\r  \xff", "3:3 invalid-utf8"),
    ];
    for (bytes, want) in cases {
        let got = match parse(Path::new("f.yaml"), "f", bytes) {
            Err(d) => d,
            Ok(_) => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("f.yaml");
                std::fs::write(&path, bytes).unwrap();
                crate::support::registries()
                    .load_files(&[path], &root().join("prompts"))
                    .diagnostics
            }
        };
        let got: Vec<String> = got
            .iter()
            .map(|d| format!("{}:{} {}", d.line, d.column, d.code))
            .collect();
        assert_eq!(got.join(", "), want, "{:?}", String::from_utf8_lossy(bytes));
    }
}

// ---- the fuzzer's grammar ---------------------------------------------------

/// Keys of the graph itself, of a node, of an edge and of a retry policy.
#[rustfmt::skip]
const GRAPH_KEYS: &[&str] = &["state", "entry", "description", "recursion_limit", "nodes", "edges"];
#[rustfmt::skip]
const NODE_KEYS: &[&str] = &[
    "id", "kind", "description", "prompt", "model", "tools", "writes", "surface", "retry", "timeout", "input",
    "output", "history", "history_window", "intents", "overrides", "fallback", "forced", "details", "language",
    "max_iterations", "trace", "first_after", "every", "window", "covered", "count", "graph", "inputs", "outputs",
    "set", "params",
];
#[rustfmt::skip]
const EDGE_KEYS: &[&str] = &["from", "to", "route", "on", "cases", "default", "map", "over"];
#[rustfmt::skip]
const RETRY_KEYS: &[&str] = &["attempts", "backoff", "max_backoff"];

#[rustfmt::skip]
const KINDS: &[&str] = &["noop", "llm", "router", "agent", "subgraph", "summarizer", "followup"];

/// Names settings plausibly hold: fields, prompts, tools, intents.
#[rustfmt::skip]
const NAMES: &[&str] = &[
    "intent", "query", "messages", "followups", "language", "answer", "summary", "routing", "findings",
    "tool_results", "summarized_count", "forced_intent", "basic", "calculator", "chat/router.md",
    "chat/direct.md", "chat/narrator.md", "QUICK_ANSWER", "RESEARCH", "DIRECT", "hidden", "f",
];

/// Scalars that are odd somewhere in a graph file.
#[rustfmt::skip]
const ODD: &[&str] = &[
    "END", "START", "a -> b", "b -> END", "a -> END", "->", "0", "1", "3", "true", "30s", "-1", "99999999999",
    "1.5", "false", "~", "null", "\"\"", "''", "{{ item }}", "&x", "*x", "!!str", "é", "\u{200b}", "\u{202e}",
    "日本", "🦀", "a: b", "- c", "#", "\"quoted\\u00e9\"", "'it''s'", "|", ">-", "\r",
];

fn any_key() -> impl Strategy<Value = String> {
    prop::sample::select(&[GRAPH_KEYS, NODE_KEYS, EDGE_KEYS, RETRY_KEYS][..])
        .prop_flat_map(prop::sample::select)
        .prop_map(str::to_owned)
}

fn select(words: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(words).prop_map(str::to_owned)
}

/// A YAML-ish value from the grammar: scalar, list or map.
#[derive(Clone, Debug)]
enum Yaml {
    Scalar(String),
    Seq(Vec<Yaml>, bool),
    Map(Vec<(String, Yaml)>, bool),
}

impl Yaml {
    /// Whether the value goes on the same line as its key or dash.
    fn inline(&self) -> bool {
        match self {
            Yaml::Scalar(_) | Yaml::Seq(_, true) | Yaml::Map(_, true) => true,
            Yaml::Seq(items, false) => items.is_empty(),
            Yaml::Map(pairs, false) => pairs.is_empty(),
        }
    }

    /// Block style, or flow where the value asks for it.
    fn render(&self, indent: usize, out: &mut String) {
        if self.inline() {
            out.push_str(&self.flow());
            out.push('\n');
            return;
        }
        let pad = " ".repeat(indent);
        let mut entry = |head: &str, value: &Yaml| {
            out.push_str(&pad);
            out.push_str(head);
            out.push(if value.inline() { ' ' } else { '\n' });
            value.render(indent + 2, out);
        };
        match self {
            Yaml::Seq(items, _) => items.iter().for_each(|item| entry("-", item)),
            Yaml::Map(pairs, _) => pairs.iter().for_each(|(k, v)| entry(&format!("{k}:"), v)),
            Yaml::Scalar(_) => {}
        }
    }

    fn flow(&self) -> String {
        match self {
            Yaml::Scalar(s) => s.clone(),
            Yaml::Seq(items, _) => format!(
                "[{}]",
                items.iter().map(Yaml::flow).collect::<Vec<_>>().join(", ")
            ),
            Yaml::Map(pairs, _) => {
                format!(
                    "{{{}}}",
                    pairs
                        .iter()
                        .map(|(k, v)| format!("{k}: {}", v.flow()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        }
    }
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(NAMES),
        3 => select(ODD),
        1 => select(KINDS),
        1 => any_key(),
        1 => "[a-z_]{1,8}",
        1 => any::<String>().prop_map(|s| s.chars().take(8).collect()),
        1 => any::<u32>().prop_map(|n| n.to_string()),
    ]
}

fn key_word() -> impl Strategy<Value = String> {
    prop_oneof![8 => any_key(), 1 => word()]
}

fn yaml_value() -> impl Strategy<Value = Yaml> {
    word()
        .prop_map(Yaml::Scalar)
        .prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..5), any::<bool>())
                    .prop_map(|(v, f)| Yaml::Seq(v, f)),
                (
                    prop::collection::vec((key_word(), inner), 0..6),
                    any::<bool>()
                )
                    .prop_map(|(v, f)| Yaml::Map(v, f)),
            ]
        })
}

fn node_key() -> impl Strategy<Value = String> {
    // Settings besides `id` and `kind`, which every node map starts with.
    prop_oneof![15 => select(&NODE_KEYS[2..]), 1 => key_word()]
}

/// A value of the type `key` takes (a name, a number, a list, a map),
/// from the plausible pools; one in eight is anything at all.
fn setting_value(key: &str) -> BoxedStrategy<Yaml> {
    let name = || select(NAMES).prop_map(Yaml::Scalar);
    let typed = match key {
        "history_window" | "max_iterations" | "first_after" | "every" | "window" | "count"
        | "attempts" => select(&["0", "1", "2", "3", "30", "100000"])
            .prop_map(Yaml::Scalar)
            .boxed(),
        "timeout" | "backoff" => select(&["30s", "0", "500ms", "1h", "soon", "-1"])
            .prop_map(Yaml::Scalar)
            .boxed(),
        "surface" => select(&["answer", "thinking", "hidden", "loud"])
            .prop_map(Yaml::Scalar)
            .boxed(),
        "tools" | "writes" | "intents" => prop::collection::vec(name(), 0..3)
            .prop_map(|v| Yaml::Seq(v, true))
            .boxed(),
        "overrides" | "inputs" | "outputs" | "set" => {
            prop::collection::vec((select(NAMES), name()), 0..3)
                .prop_map(|v| Yaml::Map(v, true))
                .boxed()
        }
        "retry" => select(&["1", "0", "3"])
            .prop_map(|n| Yaml::Map(vec![("attempts".into(), Yaml::Scalar(n))], true))
            .boxed(),
        "params" => yaml_value().boxed(),
        _ => name().boxed(),
    };
    prop_oneof![7 => typed, 1 => yaml_value()].boxed()
}

/// A node map: an id and a kind, then settings.
fn node_spec() -> impl Strategy<Value = Yaml> {
    let setting = node_key().prop_flat_map(|k| (Just(k.clone()), setting_value(&k)));
    let settings = prop::collection::vec(setting, 0..4);
    (
        select(&["a", "b", "c", "é", "END"]),
        select(KINDS),
        settings,
        any::<bool>(),
    )
        .prop_map(|(id, kind, mut settings, flow)| {
            settings.insert(0, ("id".into(), Yaml::Scalar(id)));
            settings.insert(1, ("kind".into(), Yaml::Scalar(kind)));
            Yaml::Map(settings, flow)
        })
}

fn edge_spec() -> impl Strategy<Value = Yaml> {
    let name = || select(&["a", "b", "c", "END", "é", "zz"]).prop_map(Yaml::Scalar);
    let field = || prop_oneof![4 => select(NAMES), 1 => word()];
    let map = |pairs: Vec<(&str, Yaml)>, flow| {
        Yaml::Map(
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            flow,
        )
    };
    prop_oneof![
        4 => (name(), name()).prop_map(|(a, b)| Yaml::Scalar(format!("{} -> {}", a.flow(), b.flow()))),
        2 => (name(), prop::collection::vec(name(), 1..3)).prop_map(move |(f, t)| map(vec![("from", f), ("to", Yaml::Seq(t, true))], false)),
        2 => (prop::collection::vec(name(), 1..3), name()).prop_map(move |(f, t)| map(vec![("from", Yaml::Seq(f, true)), ("to", t)], false)),
        3 => (name(), field(), prop::collection::vec((field(), name()), 0..3), prop::option::of(name())).prop_map(
            move |(f, on, cases, default)| {
                let mut route = vec![("on", Yaml::Scalar(on)), ("cases", Yaml::Map(cases, true))];
                route.extend(default.map(|d| ("default", d)));
                map(vec![("from", f), ("route", map(route, false))], false)
            }
        ),
        1 => (name(), field(), name()).prop_map(move |(f, over, to)| {
            map(vec![("from", f), ("map", map(vec![("over", Yaml::Scalar(over)), ("to", to)], true))], false)
        }),
        1 => yaml_value(),
    ]
}

/// A whole graph document: mostly the right shape, with random parts.
fn graph_doc() -> impl Strategy<Value = String> {
    (
        prop::option::weighted(0.95, prop_oneof![8 => Just("chat".to_owned()), 1 => word()]),
        prop::option::weighted(
            0.95,
            prop::sample::select(&["a", "b", "[a, b]", "[]", "END"][..]),
        ),
        prop::collection::vec(node_spec(), 0..5),
        prop::collection::vec(edge_spec(), 0..6),
        prop::option::weighted(0.1, (key_word(), yaml_value())),
    )
        .prop_map(|(state, entry, nodes, edges, extra)| {
            let mut top = Vec::new();
            if let Some(s) = state {
                top.push(("state".to_owned(), Yaml::Scalar(s)));
            }
            if let Some(e) = entry {
                top.push(("entry".to_owned(), Yaml::Scalar(e.to_owned())));
            }
            top.push(("nodes".to_owned(), Yaml::Seq(nodes, false)));
            top.push(("edges".to_owned(), Yaml::Seq(edges, false)));
            top.extend(extra);
            let mut out = String::new();
            Yaml::Map(top, false).render(0, &mut out);
            out
        })
}

/// An edit to an existing file.
#[derive(Clone, Debug)]
enum Mutation {
    Delete(prop::sample::Index),
    Duplicate(prop::sample::Index),
    Swap(prop::sample::Index, prop::sample::Index),
    Insert(prop::sample::Index, prop::sample::Index, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<prop::sample::Index>;
    prop_oneof![
        3 => at().prop_map(Mutation::Delete),
        1 => at().prop_map(Mutation::Duplicate),
        1 => (at(), at()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        2 => (at(), at(), prop_oneof![word(), "[ \t\r:#\\-\\[\\]{}'\"&*!|>%@`,]{1,3}", any::<char>().prop_map(String::from)])
            .prop_map(|(l, c, s)| Mutation::Insert(l, c, s)),
    ]
}

fn mutate(source: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = source.lines().map(str::to_owned).collect();
    for m in mutations {
        if lines.is_empty() {
            break;
        }
        match m {
            Mutation::Delete(i) => {
                lines.remove(i.index(lines.len()));
            }
            Mutation::Duplicate(i) => {
                let i = i.index(lines.len());
                lines.insert(i, lines[i].clone());
            }
            Mutation::Swap(a, b) => {
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
            }
            Mutation::Insert(l, c, s) => {
                let n = lines.len();
                let line = &mut lines[l.index(n)];
                let at = line
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(c.index(line.chars().count() + 1))
                    .unwrap_or(line.len());
                line.insert_str(at, s);
            }
        }
    }
    lines.join("\n") + "\n"
}

fn chat_yaml() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| std::fs::read_to_string(root().join("graphs/chat.yaml")).unwrap())
}

/// Input for the loader: random bytes, a document from the grammar, or an
/// edited chat.yaml.
fn anything() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..256),
        1 => any::<String>().prop_map(String::into_bytes),
        1 => yaml_value().prop_map(|y| {
            let mut out = String::new();
            y.render(0, &mut out);
            out.into_bytes()
        }),
        3 => graph_doc().prop_map(String::into_bytes),
        4 => prop::collection::vec(mutation(), 1..4).prop_map(|m| mutate(chat_yaml(), &m).into_bytes()),
    ]
}

proptest! {
    #![proptest_config(Config { cases: 256, failure_persistence: Some(Box::new(FileFailurePersistence::Off)), ..Config::default() })]

    #[test]
    fn the_loader_never_panics_and_places_every_diagnostic(bytes in anything()) {
        load_anything(&bytes)?;
    }
}
