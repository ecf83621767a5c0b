//! Graph files come with their tests: cases declared in YAML beside the
//! graphs (`graphs/tests/*.yaml`, or `tests/` beside any graph directory),
//! run by `stategraph test` with scripted model replies and stubbed tools,
//! and checked against the path, routes, tool calls, state, answer and
//! stream of each turn (docs/testing.md has the format).
//!
//! The pieces, in the order a case goes through them:
//!
//! | module | what it does |
//! |---|---|
//! | [`spec`] | the test-file types, each part with its place |
//! | `read`, `parse`, `expect_read` | YAML → [`spec`], every mistake a diagnostic `file:line:col` |
//! | `check` | names and values checked against the graphs (`stategraph check`) |
//! | `script` | the scripted replies (through the runtime's `Playback` hook) and the stub registry |
//! | `exec` | a case's turns run as chat turns: input, `carry:`, resumes |
//! | `observe` | what a turn did, from its events and checkpoints |
//! | `expect` | expectations against that, with expected/actual and diffs |
//! | `judge` | judged expectations, put to a judge model when one is configured |
//! | [`aisdk`] | whether a stream keeps the AI SDK's rules |
//! | `record` | a case written from a stored run (`--from-run`, the studio) |
//! | [`eval`], `eval_report` | stored chats run again against the graphs now, and what changed |
//! | `verdicts` | an evaluation's judge verdicts, as the store keeps them with their runs |
//! | `save` | such a case added to a test file |
//! | `report` | terminal text, JUnit XML, JSON |
//! | `schema` | the test file's JSON Schema |
//!
//! Nothing a case does leaves the process unless it names a real tool:
//! a model call is answered from the script or fails, a tool is a stub or
//! is not offered.

pub(crate) mod aisdk;
mod check;
mod compare;
pub(crate) mod eval;
mod eval_report;
mod exec;
mod expect;
mod expect_read;
mod jsonpath;
mod judge;
mod matching;
mod observe;
mod parse;
mod read;
mod record;
mod report;
mod save;
mod schema;
mod script;
pub(crate) mod spec;
mod verdicts;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use check::check_test_file;
pub(crate) use eval::{EvalEnv, RunEval, StoredRun, eval_all};
pub(crate) use eval_report::{json as eval_json, summary as eval_summary, text as eval_text};
pub(crate) use exec::CaseResult;
pub use exec::{Env, run_case};
pub(crate) use expect::Failure;
pub(crate) use judge::Judge;
pub use parse::load_test_file;
pub(crate) use record::file_header;
pub(crate) use report::{json as json_report, junit, text as text_report};
pub(crate) use save::{add_case, case_from_store, default_case_file};
pub(crate) use schema::test_file_schema;
pub(crate) use spec::TestFile;
pub(crate) use verdicts::verdict_records;

/// The directory test files live in, beside a graph directory's files.
pub(crate) const TESTS_DIR: &str = "tests";

/// Whether `path` is a test file: a `*.yaml`/`*.yml` file in a directory
/// called `tests`.
pub(crate) fn is_test_file(path: &Path) -> bool {
    crate::graph::catalog::is_graph_file(path)
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == TESTS_DIR)
}

/// The test files at `path`: the file itself, or, under a directory, every
/// `tests/*.yaml` (the directory's own when it is a `tests` directory),
/// looking a few levels down, sorted.
pub fn find_test_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_owned()];
    }
    let mut out = Vec::new();
    walk(path, &mut out, 0);
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            let skip = name == "node_modules"
                || name == "target"
                || name.to_string_lossy().starts_with('.');
            if depth < 6 && !skip {
                walk(&p, out, depth + 1);
            }
        } else if is_test_file(&p) {
            out.push(p);
        }
    }
}

/// The graph directory a test file's cases run against: the directory
/// holding its `tests` directory when that has graph files, else
/// `fallback` (the configured one).
pub(crate) fn graphs_dir_of(test_file: &Path, fallback: &Path) -> PathBuf {
    let dir = test_file.parent().and_then(Path::parent);
    let has_graphs = |d: &Path| {
        std::fs::read_dir(d).is_ok_and(|rd| {
            rd.flatten()
                .any(|e| crate::graph::catalog::is_graph_file(&e.path()) && e.path().is_file())
        })
    };
    match dir {
        Some(d) if has_graphs(d) => d.to_owned(),
        _ => fallback.to_owned(),
    }
}

/// The prompt directory beside a graph directory: `DIR/prompts`, else
/// `DIR/../prompts`, else `fallback`.
pub(crate) fn prompts_dir_of(graphs_dir: &Path, fallback: &Path) -> PathBuf {
    let own = graphs_dir.join("prompts");
    if own.is_dir() {
        return own;
    }
    match graphs_dir.parent().map(|p| p.join("prompts")) {
        Some(p) if p.is_dir() => p,
        _ => fallback.to_owned(),
    }
}

/// Whether a case is selected by `filter`: its name, file or graph
/// contains the text (case-insensitively).
pub(crate) fn selected(file: &TestFile, case: &spec::Case, filter: Option<&str>) -> bool {
    filter.is_none_or(|f| {
        let f = f.to_lowercase();
        [
            case.name.value.as_str(),
            &file.display,
            case.graph.value.as_str(),
        ]
        .iter()
        .any(|s| s.to_lowercase().contains(&f))
    })
}

/// Runs the selected cases of `files`, at most `jobs` at a time (each on
/// the runtime's worker threads), and returns their results in file
/// order.
pub(crate) async fn run_all(
    env: Arc<Env>,
    files: Vec<Arc<TestFile>>,
    filter: Option<&str>,
    jobs: usize,
) -> Vec<CaseResult> {
    let permits = Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    let mut handles = Vec::new();
    for file in &files {
        for (i, case) in file.cases.iter().enumerate() {
            if !selected(file, case, filter) {
                continue;
            }
            let (env, file, permits) = (Arc::clone(&env), Arc::clone(file), Arc::clone(&permits));
            let what = (
                Arc::clone(&file.display),
                case.name.value.clone(),
                case.graph.value.clone(),
                case.loc,
            );
            handles.push((
                what,
                tokio::spawn(async move {
                    let _permit = permits.acquire_owned().await;
                    run_case(&env, &file, &file.cases[i]).await
                }),
            ));
        }
    }
    let mut out = Vec::with_capacity(handles.len());
    for ((file, name, graph, loc), h) in handles {
        out.push(match h.await {
            Ok(r) => r,
            Err(e) => CaseResult {
                file,
                name,
                graph,
                loc,
                failures: vec![Failure::at(
                    "run",
                    0,
                    loc,
                    format!("the case's task failed: {e}"),
                )],
                turns: Vec::new(),
                judged: Vec::new(),
                duration: std::time::Duration::ZERO,
            },
        });
    }
    out
}
