//! Graph-file validation: every rule proven by a fixture, and a fuzzer
//! showing that bad input is a diagnostic, never a panic.
//!
//! Each fixture under `tests/fixtures/invalid` states its own expectations
//! in comment lines, one per diagnostic:
//!
//! ```text
//! # expect: 12:9 unknown-node: no node named `revew`
//! # expect: tests/fixtures/prompts/bad_var.md:3:14 prompt-variable: uses `querry`
//! # hint: 12:9 unknown-node: did you mean `review`?
//! ```
//!
//! An `expect` line is `[path:]line:col code: message substring` (the path,
//! relative to the crate root, defaults to the fixture itself); a `hint`
//! line has the same form and checks the diagnostic's hint. A fixture
//! asserts all its diagnostics and nothing else. Files directly in the
//! directory are loaded one at a time; the files of each subdirectory are
//! loaded together (subgraphs, duplicate graph ids).
//!
//! [`fuzz`] covers what no fixture can hold (10 MB, random bytes) and fuzzes
//! the loader; [`special_files`] builds what git cannot hold either (FIFOs,
//! symlinks to `/dev/zero`, directories named `x.yaml`) and checks that
//! every loader reports them and finishes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use stategraph::internals::graph::Diagnostic;
use stategraph::internals::nodes::Registries;
use stategraph::internals::nodes::{Node, NodeContext, NodeError};
use stategraph::state::Patch;

use crate::support::root;

mod fuzz;
#[cfg(unix)]
mod special_files;

fn fixtures() -> PathBuf {
    root().join("tests/fixtures")
}

fn fixture_prompts() -> PathBuf {
    fixtures().join("prompts")
}

/// Diagnostic codes in the compiler's source (src/graph and src/nodes, with
/// their subdirectories): string literals of lowercase words joined by `-`,
/// such as `"unknown-node"`.
fn codes_in_source() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    let mut files = Vec::new();
    let mut dirs = vec![root().join("src/graph"), root().join("src/nodes")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, _) in text.match_indices('"') {
            let word: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            if word.starts_with(|c: char| c.is_ascii_lowercase())
                && word.contains('-')
                && text[i + 1 + word.len()..].starts_with('"')
            {
                codes.insert(word);
            }
        }
    }
    codes
}

/// Codes whose diagnostics always carry a hint.
const HINTED: &[&str] = &[
    "duplicate-edge",
    "duplicate-graph",
    "duplicate-node",
    "cycle-without-exit",
    "empty-file",
    "file-too-large",
    "invalid-graph-id",
    "join-never-fires",
    "missing-prompt",
    "no-path-to-end",
    "not-a-file",
    "route-needs-default",
    "route-unmapped-value",
    "setting-not-applicable",
    "unknown-graph",
    "unknown-kind",
    "unknown-node",
    "unknown-state",
    "unknown-tag",
    "unknown-tool",
    "unreachable-node",
];

/// One `# expect:` or `# hint:` line.
#[derive(Clone, Debug)]
struct Expect {
    warning: bool,
    file: PathBuf,
    line: u32,
    column: u32,
    code: String,
    text: String,
}

impl Expect {
    fn key(&self) -> (PathBuf, u32, u32, String) {
        (self.file.clone(), self.line, self.column, self.code.clone())
    }

    fn prefix(&self) -> String {
        format!(
            "{}:{}:{}: {}[{}]",
            self.file.display(),
            self.line,
            self.column,
            if self.warning { "warning" } else { "error" },
            self.code
        )
    }
}

fn key(d: &Diagnostic) -> (PathBuf, u32, u32, String) {
    (PathBuf::from(&*d.file), d.line, d.column, d.code.to_owned())
}

/// Parses `[path:]line:col code: text` (after the `# expect:` marker).
fn parse_expect(fixture: &Path, spec: &str) -> Expect {
    let (place, rest) = spec
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("{}: bad expectation `{spec}`", fixture.display()));
    let (code, text) = rest.split_once(": ").unwrap_or((rest, ""));
    let mut parts = place.rsplitn(3, ':');
    let column = parts.next().and_then(|c| c.parse().ok());
    let line = parts.next().and_then(|l| l.parse().ok());
    let (Some(line), Some(column)) = (line, column) else {
        panic!("{}: bad place in `{spec}`", fixture.display())
    };
    let file = parts
        .next()
        .map_or_else(|| fixture.to_owned(), |f| root().join(f));
    Expect {
        warning: false,
        file,
        line,
        column,
        code: code.trim().to_owned(),
        text: text.trim().to_owned(),
    }
}

/// The `expect` and `hint` lines of a fixture.
fn expectations(fixture: &Path) -> (Vec<Expect>, Vec<Expect>) {
    let bytes = std::fs::read(fixture).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let (mut expects, mut hints) = (Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(spec) = line.strip_prefix("# expect:") {
            expects.push(parse_expect(fixture, spec));
        } else if let Some(spec) = line.strip_prefix("# warning:") {
            expects.push(Expect {
                warning: true,
                ..parse_expect(fixture, spec)
            });
        } else if let Some(spec) = line.strip_prefix("# hint:") {
            hints.push(parse_expect(fixture, spec));
        }
    }
    (expects, hints)
}

fn graph_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(graph_files(&p));
        } else if p.extension().is_some_and(|e| e == "yaml") {
            out.push(p);
        }
    }
    out
}

/// The fixture groups under `invalid/`: each top-level file alone, each
/// subdirectory's files together. `registered/` needs its own registry.
fn invalid_cases() -> Vec<(String, Vec<PathBuf>)> {
    let dir = fixtures().join("invalid");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    entries
        .into_iter()
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            if p.is_dir() {
                (name(&p), graph_files(&p))
            } else {
                (name(&p), vec![p])
            }
        })
        .collect()
}

/// Registries with one Rust kind, `strict`, that accepts `level` up to 10.
fn registries_with_strict() -> Registries {
    #[derive(Debug)]
    struct Nothing;
    impl Node for Nothing {
        fn run<'a>(&'a self, _cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
            Box::pin(async { Ok(Patch::new()) })
        }
    }
    let mut reg = crate::support::registries();
    reg.kinds
        .register_fn("strict", |params| match params["level"].as_u64() {
            Some(level) if level > 10 => Err(format!("`level` is {level}; the most is 10")),
            _ => Ok(Arc::new(Nothing) as Arc<dyn Node>),
        });
    reg
}

fn registries_for(case: &str) -> Registries {
    if case == "registered" {
        registries_with_strict()
    } else {
        crate::support::registries()
    }
}

/// Loads a fixture group and compares its diagnostics with its expectations;
/// returns a description of every mismatch.
fn check_case(
    case: &str,
    files: &[PathBuf],
) -> (stategraph::internals::nodes::GraphCatalog, Vec<String>) {
    let cat = registries_for(case).load_files(files, &fixture_prompts());
    let mut problems = Vec::new();
    let (mut expects, mut hints) = (Vec::new(), Vec::new());
    for f in files {
        let (e, h) = expectations(f);
        expects.extend(e);
        hints.extend(h);
    }
    let mut want: Vec<_> = expects.iter().map(Expect::key).collect();
    let mut got: Vec<_> = cat.diagnostics.iter().map(key).collect();
    want.sort();
    got.sort();
    if want != got {
        let shown: Vec<String> = cat.diagnostics.iter().map(|d| format!("    {d}")).collect();
        let missing: Vec<String> = expects
            .iter()
            .filter(|e| !got.contains(&e.key()))
            .map(|e| format!("    {}", e.prefix()))
            .collect();
        problems.push(format!(
            "{case}: diagnostics differ from expectations\n  missing:\n{}\n  got:\n{}",
            missing.join("\n"),
            shown.join("\n")
        ));
    }
    // Each expectation claims its own diagnostic (several may share a place).
    let mut claimed = vec![false; cat.diagnostics.len()];
    for e in &expects {
        let found = cat.diagnostics.iter().enumerate().position(|(i, d)| {
            !claimed[i]
                && key(d) == e.key()
                && d.to_string().starts_with(&e.prefix())
                && d.message.contains(&e.text)
        });
        match found {
            Some(i) => claimed[i] = true,
            None if got.contains(&e.key()) => problems.push(format!(
                "{case}: no diagnostic `{}: …{}…` in {:#?}",
                e.prefix(),
                e.text,
                cat.diagnostics
            )),
            None => {}
        }
    }
    for h in &hints {
        let found = cat.diagnostics.iter().any(|d| {
            key(d) == h.key() && d.hint.as_deref().is_some_and(|hint| hint.contains(&h.text))
        });
        if !found {
            let hints: Vec<_> = cat
                .diagnostics
                .iter()
                .filter(|d| key(d) == h.key())
                .map(|d| &d.hint)
                .collect();
            problems.push(format!(
                "{case}: expected hint `{}` at {}, got {hints:?}",
                h.text,
                h.prefix()
            ));
        }
    }
    (cat, problems)
}

#[test]
fn every_invalid_fixture_reports_exactly_its_expected_diagnostics() {
    let mut problems = Vec::new();
    for (case, files) in invalid_cases() {
        let (expects, _): (Vec<Vec<Expect>>, Vec<_>) =
            files.iter().map(|f| expectations(f)).unzip();
        assert!(
            expects.iter().any(|e| !e.is_empty()),
            "{case}: an invalid fixture must expect a diagnostic"
        );
        let (cat, p) = check_case(&case, &files);
        problems.extend(p);
        let warned = expects.iter().flatten().filter(|e| e.warning).count();
        if cat.diagnostics.iter().filter(|d| !d.is_error()).count() != warned {
            problems.push(format!("{case}: unexpected warnings {:?}", cat.diagnostics));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n\n"));
}

#[test]
fn every_diagnostic_code_is_proven_by_a_fixture() {
    let mut expected = BTreeSet::new();
    for (_, files) in invalid_cases() {
        for f in files {
            expected.extend(expectations(&f).0.into_iter().map(|e| e.code));
        }
    }
    let source = codes_in_source();
    // `file-too-large` and `not-a-file` need files this repository cannot
    // hold (fuzz::bad_input_is_always_a_diagnostic, special_files);
    // `invalid-graph` only guards against a kind failing without saying why.
    let elsewhere = ["file-too-large", "not-a-file", "invalid-graph"];
    let missing: Vec<&String> = source
        .iter()
        .filter(|c| !expected.contains(*c) && !elsewhere.contains(&c.as_str()))
        .collect();
    assert!(missing.is_empty(), "codes without a fixture: {missing:?}");
    // `yaml` (from the parser) has no hyphen to find it by.
    let unknown: Vec<&String> = expected
        .iter()
        .filter(|c| !source.contains(*c) && *c != "yaml")
        .collect();
    assert!(
        unknown.is_empty(),
        "fixtures expect codes the source lacks: {unknown:?}"
    );
    assert!(
        source.len() >= 35 && expected.contains("yaml"),
        "{source:?}"
    );
}

#[test]
fn hinted_codes_always_carry_a_hint() {
    let mut seen = BTreeSet::new();
    for (case, files) in invalid_cases() {
        let cat = registries_for(&case).load_files(&files, &fixture_prompts());
        for d in &cat.diagnostics {
            if HINTED.contains(&d.code) {
                seen.insert(d.code);
                assert!(
                    d.hint.as_deref().is_some_and(|h| !h.trim().is_empty()),
                    "{case}: no hint on {d}"
                );
                assert!(
                    d.to_string().contains("\n  hint: "),
                    "{case}: hint not printed: {d}"
                );
            }
        }
    }
    // Every hinted code but those no fixture can produce occurs
    // (special_files checks their hints).
    let unseen: Vec<&&str> = HINTED
        .iter()
        .filter(|c| !seen.contains(**c) && !["file-too-large", "not-a-file"].contains(*c))
        .collect();
    assert!(
        unseen.is_empty(),
        "hinted codes no fixture produced: {unseen:?}"
    );
}

#[test]
fn a_file_with_many_problems_reports_them_all_at_once() {
    let file = fixtures().join("invalid/multi_error.yaml");
    let (cat, problems) = check_case("multi_error.yaml", std::slice::from_ref(&file));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let codes: BTreeSet<&str> = cat.diagnostics.iter().map(|d| d.code).collect();
    assert!(codes.len() >= 4, "only {codes:?}");
    assert!(cat.failed.contains("multi_error") && cat.graphs.is_empty());
}

#[test]
fn valid_fixtures_compile() {
    let files = graph_files(&fixtures().join("valid"));
    let cat = crate::support::registries().load_files(&files, &fixture_prompts());
    assert!(cat.diagnostics.is_empty(), "{:#?}", cat.diagnostics);
    let ids: Vec<&str> = cat.graphs.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        ["map_fanout", "parallel_join", "routed", "runs_subgraph"]
    );
    let join = &cat.graphs["parallel_join"];
    assert_eq!(join.joins.len(), 1);
    assert_eq!(join.joins[0].sources.len(), 2);
    let runner = &cat.graphs["runs_subgraph"];
    assert!(Arc::ptr_eq(
        runner.nodes[0].subgraph.as_ref().unwrap(),
        join
    ));
}

#[test]
fn check_command_prints_every_problem_and_fails() {
    let invalid = fixtures().join("invalid");
    let mut out = Vec::new();
    let ok = stategraph::cli::check(
        std::slice::from_ref(&invalid),
        &fixture_prompts(),
        &crate::support::registries(),
        stategraph::cli::CheckFormat::Text,
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!ok, "{text}");
    // Top-level files only (the command does not descend into directories).
    let (mut expected, mut warned) = (0, 0);
    for f in std::fs::read_dir(&invalid)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
    {
        for e in expectations(&f).0 {
            expected += usize::from(!e.warning);
            warned += usize::from(e.warning);
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&e.prefix()) && l.contains(&e.text)),
                "`{}` not printed in:\n{text}",
                e.prefix()
            );
        }
    }
    let printed = text.lines().filter(|l| l.contains(": error[")).count();
    assert_eq!(printed, expected, "{text}");
    assert!(
        text.trim_end().ends_with(&format!(
            "0 valid, {expected} error(s), {warned} warning(s)"
        )),
        "{text}"
    );

    let mut out = Vec::new();
    let ok = stategraph::cli::check(
        &[root().join("graphs")],
        &root().join("prompts"),
        &crate::support::registries(),
        stategraph::cli::CheckFormat::Text,
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(ok, "{text}");
    let shipped = std::fs::read_dir(root().join("graphs"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    let tests = stategraph::internals::testing::find_test_files(&root().join("graphs/tests")).len();
    assert_eq!(
        text.trim_end(),
        format!(
            "checked {shipped} graph file(s): {shipped} valid, 0 error(s), 0 warning(s)\nchecked {tests} test file(s): 0 error(s), 0 warning(s)"
        )
    );
}
