//! Graph tests (`stategraph test`, docs/testing.md): the shipped graphs'
//! test files pass through the binary as CI runs them; a fixture of
//! deliberately failing cases fails with a readable report for each kind of
//! expectation; every diagnostic of a test file points at its place; the
//! test-file JSON Schema describes the files; and the runner's own check of
//! the AI SDK stream agrees with the AI SDK's parser.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stategraph::internals::testing::{self, Env};

use crate::support::{aisdk_validate, registries, root, shipped_catalog};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stategraph")
}

/// `stategraph ARGS` in the repository root.
fn sg(args: &[&str]) -> Output {
    std::process::Command::new(bin())
        .current_dir(root())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// CI runs the shipped graphs' tests exactly so: `stategraph test` with
/// JUnit XML and JSON reports.
#[test]
fn the_shipped_graphs_tests_pass() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let json = dir.path().join("report.json");
    let out = sg(&[
        "test",
        "--junit",
        junit.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["failed"], 0, "{shown}");
    let cases = report["cases"].as_array().unwrap();
    // Every shipped graph comes with its tests, each route and documented
    // degradation a case (graphs/tests/GRAPH.yaml).
    for graph in ["chat", "research", "analyst", "assistant"] {
        let n = cases.iter().filter(|c| c["graph"] == graph).count();
        assert!(n >= 4, "graph `{graph}` has {n} cases: {shown}");
    }
    assert!(
        shown.contains(&format!("{} passed, 0 failed", cases.len())),
        "{shown}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains(&format!("tests=\"{}\" failures=\"0\"", cases.len())),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), cases.len());
}

fn failing_fixture() -> PathBuf {
    root().join("tests/fixtures/testfiles/failing/tests/broken.yaml")
}

/// The failures of one case of the JSON report.
fn failures<'a>(report: &'a Value, case: &str) -> Vec<&'a Value> {
    let c = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == case)
        .unwrap_or_else(|| panic!("no case {case:?} in {report:#}"));
    assert_eq!(c["passed"], false, "{case} must fail");
    c["failures"].as_array().unwrap().iter().collect()
}

fn find<'a>(fs: &[&'a Value], kind: &str, message: &str) -> &'a Value {
    fs.iter()
        .find(|f| f["kind"] == kind && f["message"].as_str().unwrap().contains(message))
        .unwrap_or_else(|| panic!("no `{kind}` failure saying {message:?} in {fs:#?}"))
}

/// Each kind of expectation, broken on purpose, fails with where it is
/// written, what was expected and what happened (and a diff for values).
#[test]
fn deliberately_failing_cases_fail_with_a_readable_report() {
    let fixture = failing_fixture();
    let out = sg(&["test", fixture.to_str().unwrap(), "--json", "-"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["passed"], 0);
    assert_eq!(report["failed"], 6);

    let f = failures(&report, "the wrong path, nodes and route");
    let path = find(&f, "path", "the path differs");
    assert_eq!(path["expected"], "summarizer → router → clarifier");
    assert_eq!(path["actual"], "summarizer → router → direct");
    assert_eq!(
        (path["line"].as_u64(), path["column"].as_u64()),
        (Some(14), Some(13))
    );
    find(&f, "nodes", "the set of nodes run differs");
    find(&f, "nodes", "`narrator` did not run");
    find(&f, "nodes", "`direct` ran, but should not have");
    let route = find(&f, "routes", "`router` routed on another value");
    assert_eq!(
        (route["expected"].as_str(), route["actual"].as_str()),
        (Some("CLARIFY"), Some("DIRECT"))
    );

    let f = failures(&report, "the wrong tool call, state and state after a node");
    let call = find(&f, "tool_calls", "no call of `data360_get_data` matching");
    assert!(
        call["diff"]
            .as_str()
            .unwrap()
            .contains("-   \"country_code\": \"UGA\"\n+   \"country_code\": \"KEN\""),
        "{call:#}"
    );
    let intent = find(&f, "state", "`intent` after the turn differs");
    assert_eq!(
        (intent["expected"].as_str(), intent["actual"].as_str()),
        (Some("\"RESEARCH\""), Some("\"QUICK_ANSWER\""))
    );
    find(&f, "state", "`followups` after the turn differs");
    let after = find(&f, "after", "`intent` after `router` differs");
    assert_eq!(after["actual"], "\"QUICK_ANSWER\"");

    let f = failures(&report, "the wrong answer");
    let eq = find(&f, "answer", "the answer differs");
    assert_eq!(
        eq["diff"],
        "- Hello!\n+ {\"greeting\": \"Hi\", \"lang\": \"en\"}\n"
    );
    find(&f, "answer", "does not contain \"Bonjour\"");
    find(&f, "answer", "contains \"Hi\"");
    find(&f, "answer", "does not match /^Hey/");
    let jp = find(&f, "answer", "the answer's `$.lang` differs");
    assert_eq!(
        (jp["expected"].as_str(), jp["actual"].as_str()),
        (Some("\"fr\""), Some("\"en\""))
    );

    let f = failures(&report, "the wrong status and error");
    let st = find(&f, "status", "the turn ended `completed`");
    assert_eq!(
        (st["expected"].as_str(), st["actual"].as_str()),
        (Some("failed"), Some("completed"))
    );
    find(&f, "error", "the run's error does not contain");

    let f = failures(&report, "the wrong stream and interrupts");
    find(
        &f,
        "stream",
        "the stream has no chunk matching {\"type\":\"data-followups\"}",
    );
    find(
        &f,
        "stream",
        "the stream has a chunk matching {\"type\":\"text-delta\"}",
    );
    find(&f, "aisdk_valid", "the stream is valid for the AI SDK");
    find(&f, "interrupts", "nothing matches {\"type\":\"approval\"}");

    let f = failures(&report, "a script that does not fit the run");
    find(
        &f,
        "script",
        "`data360_get_data` was called with {\"country_code\":\"FRA\"}, which no stub matches",
    );
    find(
        &f,
        "script",
        "node `narrator` called the model, but the case has no scripted reply left",
    );
    let unused = find(
        &f,
        "unused",
        "this scripted reply for `suggester` was never used",
    );
    assert_eq!(unused["line"], 78);

    // The same, for a person: each failure with its place, the two sides
    // and the diff, then the path the run took.
    let out = sg(&["test", fixture.to_str().unwrap()]);
    let shown = text(&out);
    let file = fixture
        .strip_prefix(root())
        .unwrap_or(&fixture)
        .display()
        .to_string();
    let _ = file;
    for line in [
        "FAIL ",
        "› the wrong path, nodes and route (graph chat)",
        "  ✗ path at ",
        "broken.yaml:14:13: the path differs",
        "      expected: summarizer → router → clarifier",
        "      actual:   summarizer → router → direct",
        "      diff (- expected, + actual):",
        "     the run: summarizer → router → direct (completed)",
        "0 passed, 6 failed (6 cases in ",
    ] {
        assert!(shown.contains(line), "missing {line:?} in\n{shown}");
    }
}

/// One `# expect:` (or `# hint:`) line of a fixture.
fn expectations(fixture: &Path, marker: &str) -> Vec<(u32, u32, String, String)> {
    std::fs::read_to_string(fixture)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(marker))
        .map(|spec| {
            let (place, rest) = spec.trim().split_once(' ').unwrap();
            let (line, col) = place.split_once(':').unwrap();
            let (code, text) = rest.split_once(": ").unwrap();
            (
                line.parse().unwrap(),
                col.parse().unwrap(),
                code.to_owned(),
                text.to_owned(),
            )
        })
        .collect()
}

/// Every mistake in a test file is a diagnostic at its `file:line:col`,
/// exactly those the fixture lists (and through `stategraph check`).
#[test]
fn test_file_mistakes_are_diagnostics_at_their_place() {
    let catalog = shipped_catalog();
    let reg = registries();
    let dir = root().join("tests/fixtures/testfiles/invalid/tests");
    let fixtures = testing::find_test_files(&dir);
    assert!(fixtures.len() >= 3);
    for f in &fixtures {
        let diags = match testing::load_test_file(f) {
            Ok(file) => testing::check_test_file(&file, &catalog, &reg.tools),
            Err(d) => d,
        };
        let got: Vec<(u32, u32, String, String)> = diags
            .iter()
            .map(|d| (d.line, d.column, d.code.to_owned(), d.message.clone()))
            .collect();
        let want = expectations(f, "# expect:");
        assert_eq!(
            got.len(),
            want.len(),
            "{}: got {:#?}",
            f.display(),
            diags.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
        for (w, g) in want.iter().zip(&got) {
            assert_eq!((w.0, w.1, &w.2), (g.0, g.1, &g.2), "{}: {g:?}", f.display());
            assert!(
                g.3.contains(&w.3),
                "{}: {:?} lacks {:?}",
                f.display(),
                g.3,
                w.3
            );
        }
        for h in expectations(f, "# hint:") {
            let d = diags
                .iter()
                .find(|d| (d.line, d.column) == (h.0, h.1))
                .unwrap();
            assert!(
                d.hint.as_deref().unwrap_or("").contains(&h.3),
                "{}: {d}",
                f.display()
            );
        }
    }
    // `check` finds them too, and fails.
    let out = sg(&["check", dir.join("names.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out);
    assert!(
        shown.contains("names.yaml:8:7: error[unknown-node]: graph `chat` has no node `routr`"),
        "{shown}"
    );
    assert!(
        shown.contains("checked 1 test file(s): 14 error(s), 0 warning(s)"),
        "{shown}"
    );
}

fn yaml_json(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `stategraph schema test` prints the test-file JSON Schema: every
/// shipped and fixture test file that `check` accepts conforms; shape
/// mistakes do not.
#[test]
fn the_test_file_schema_describes_test_files() {
    let out = sg(&["schema", "test"]);
    assert!(out.status.success(), "{}", text(&out));
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["title"], "stategraph test file");
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut good = testing::find_test_files(&root().join("graphs"));
    good.push(failing_fixture());
    good.push(judged_fixture());
    for f in &good {
        let doc = yaml_json(f);
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", f.display());
    }
    let bad = yaml_json(&root().join("tests/fixtures/testfiles/invalid/tests/shapes.yaml"));
    for (i, case) in bad["cases"].as_array().unwrap().iter().enumerate() {
        let doc = serde_json::json!({"graph": "chat", "cases": [case]});
        assert!(
            !validator.is_valid(&doc),
            "shapes.yaml case {i} passes the schema: {case}"
        );
    }
    // The graph-file schema is still the default.
    let out = sg(&["schema"]);
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["title"], "stategraph graph file");
}

/// The runner's own check of a stream (`aisdk_valid`) gives the verdict
/// of the AI SDK's parser (tests/tools/aisdk-validate, ai 6.0.326) on the
/// streams the shipped cases produce and on broken variants of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_check_agrees_with_the_ai_sdk() {
    let env = Arc::new(Env {
        catalog: Arc::new(shipped_catalog()),
        tools: Arc::clone(&registries().tools),
        turn_timeout: Duration::from_secs(30),
        live: None,
        judge: None,
    });
    let file = testing::load_test_file(&root().join("graphs/tests/chat.yaml")).unwrap();
    let mut streams = Vec::new();
    for case in file.cases.iter().take(3) {
        let r = testing::run_case(&env, &file, case).await;
        streams.extend(r.turns.iter().map(|t| t.sse.clone()));
    }
    assert!(!streams.is_empty());
    let base = streams[0].clone();
    let frames: Vec<&str> = base.split("\n\n").filter(|f| !f.is_empty()).collect();
    let without = |pred: &dyn Fn(&str) -> bool| {
        let kept: Vec<&str> = frames.iter().copied().filter(|f| !pred(f)).collect();
        format!("{}\n\n", kept.join("\n\n"))
    };
    // Broken on purpose: a text part never started, no `[DONE]`, no
    // `finish`, a data part without `data`, an unknown chunk type.
    streams.push(without(&|f| f.contains("\"type\":\"text-start\"")));
    streams.push(without(&|f| f.contains("[DONE]")));
    streams.push(without(&|f| f.contains("\"type\":\"finish\"")));
    streams.push(base.replacen("\"type\":\"start-step\"", "\"type\":\"data-x\"", 1));
    streams.push(base.replacen("\"type\":\"start-step\"", "\"type\":\"begin-step\"", 1));
    let mut verdicts = Vec::new();
    for s in &streams {
        let ours = testing::aisdk::check_stream(s);
        let (theirs, report) = aisdk_validate(s);
        assert_eq!(
            ours.valid(),
            theirs,
            "the runner says {:?}, the AI SDK says {theirs}:\n{report}\n{s}",
            ours.errors
        );
        verdicts.push(theirs);
    }
    assert!(verdicts.iter().any(|v| *v) && verdicts.iter().any(|v| !*v));
}

fn judged_fixture() -> PathBuf {
    root().join("tests/fixtures/testfiles/judged/tests/judged.yaml")
}

/// The verdicts of one case of the JSON report, by criterion.
fn verdicts(report: &Value) -> Vec<(String, String, String)> {
    report["cases"][0]["judged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let s = |k: &str| j[k].as_str().unwrap().to_owned();
            (s("criterion"), s("verdict"), s("reason"))
        })
        .collect()
}

/// Judged expectations are off by default: without a judge model they
/// are reported as not judged (never passed silently) and the case
/// passes on what was checked; with a (scripted) judge, each criterion
/// gets its verdict and reason, and a failing one fails the case in the
/// text, JUnit and JSON reports.
#[test]
fn judged_expectations_are_judged_only_with_a_judge_model() {
    let fixture = judged_fixture();
    let out = sg(&["test", fixture.to_str().unwrap()]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("judged/tests/judged.yaml:16:11: “the answer is polite” (no judge model"),
        "{shown}"
    );
    assert!(
        shown.contains("1 passed, 0 failed")
            && shown.contains("2 judged expectation(s) not judged"),
        "{shown}"
    );
    let out = sg(&["test", fixture.to_str().unwrap(), "--json", "-"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["not_judged"], 2);
    assert!(
        verdicts(&report).iter().all(|(_, v, _)| v == "skipped"),
        "{report:#}"
    );

    // The offline model would make up a verdict that fits the schema: it
    // is refused as a judge, not trusted.
    let out = sg(&["test", fixture.to_str().unwrap(), "--judge", "judge"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("its model is the offline model, which cannot judge"),
        "{}",
        text(&out)
    );

    let script = root().join("tests/fixtures/testfiles/judge-script.yaml");
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let judged = |extra: &[&str]| {
        let mut args = vec![
            "--model-script",
            script.to_str().unwrap(),
            "test",
            fixture.to_str().unwrap(),
            "--judge",
            "judge",
        ];
        args.extend_from_slice(extra);
        sg(&args)
    };
    let out = judged(&["--junit", junit.to_str().unwrap()]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("judged/tests/judged.yaml:17:11: the judge (role judge, model scripted:judge-script) says the answer does not meet “the answer cites a source”: The answer names no source."),
        "{shown}"
    );
    assert!(
        shown.contains("  ✓ judged “the answer is polite”: It greets the user and offers help. (judged by role judge, model scripted:judge-script)"),
        "{shown}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<failure type=\"judge\" message=\"the judge (role judge, model scripted:judge-script) says the answer does not meet “the answer cites a source”: The answer names no source.\""),
        "{xml}"
    );
    assert!(
        xml.contains("judge pass: “the answer is polite”: It greets the user and offers help."),
        "{xml}"
    );
    let out = judged(&["--json", "-"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failed"], 1);
    assert_eq!(report["not_judged"], 0);
    assert_eq!(
        verdicts(&report),
        [
            (
                "the answer is polite".into(),
                "pass".into(),
                "It greets the user and offers help.".into()
            ),
            (
                "the answer cites a source".into(),
                "fail".into(),
                "The answer names no source.".into()
            ),
        ]
    );
    let f = failures(&report, "small talk is judged");
    assert_eq!(f.len(), 1, "{f:#?}");
    find(&f, "judge", "The answer names no source.");
}
