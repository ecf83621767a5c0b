//! Cases written from stored runs (`stategraph test --from-run`,
//! docs/testing.md): a run stored by `stategraph run` with a model script
//! becomes a case that passes unchanged on the same graph, and fails after
//! a prompt edit that changes the route — with `--live`, the configured
//! model answers the changed request and the report shows the new path.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::support::root;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stategraph")
}

/// `stategraph ARGS` in `dir` (its `graphs/`, `prompts/`, `data/`).
pub(crate) fn sg_in(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(bin())
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("STATEGRAPH_CONFIG")
        .env_remove("STATEGRAPH_MODEL_SCRIPT")
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn shown(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A working directory with the shipped graphs (without their tests) and
/// prompts, and a model script: the router classifies a greeting as
/// DIRECT — unless its prompt says to ask back and the user mentions the
/// weather, then as CLARIFY.
pub(crate) fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_dir(&root().join("prompts"), &d.join("prompts"));
    std::fs::create_dir_all(d.join("graphs")).unwrap();
    for e in std::fs::read_dir(root().join("graphs")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, d.join("graphs").join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        d.join("models.yaml"),
        r#"rules:
  - when: { system: "You route questions", contains: "ASK BACK FIRST", user: "weather" }
    reply: { json: { intent: CLARIFY, reasoning: "asked to ask back", missing_slots: [country], detected_language: en } }
  - when: { system: "You route questions", user: "population" }
    reply: { json: { intent: QUICK_ANSWER, reasoning: "a figure", missing_slots: [], detected_language: en } }
  - when: { system: "You route questions" }
    reply: { json: { intent: DIRECT, reasoning: "small talk", missing_slots: [], detected_language: en } }
  - reply: "Hello! Ask me about development data."
"#,
    )
    .unwrap();
    dir
}

/// The run id `stategraph run` prints on stderr.
pub(crate) fn run_id(o: &Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("run ")?.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id on stderr: {}", shown(o)))
        .to_owned()
}

#[test]
fn a_case_from_a_run_passes_unchanged_and_fails_after_a_prompt_edit_that_changes_the_route() {
    let dir = workdir();
    let d = dir.path();
    let run = sg_in(
        d,
        &[
            "--model-script",
            "models.yaml",
            "run",
            "chat",
            "hi there! nice weather today",
        ],
    );
    assert!(run.status.success(), "{}", shown(&run));
    let id = run_id(&run);

    let case_file = d.join("graphs/tests/chat_recorded.yaml");
    let write = sg_in(d, &["test", "--from-run", &id, "--name", "a greeting"]);
    assert!(write.status.success(), "{}", shown(&write));
    assert!(
        shown(&write).contains("wrote case \"a greeting\" to graphs/tests/chat_recorded.yaml"),
        "{}",
        shown(&write)
    );
    let yaml = std::fs::read_to_string(&case_file).unwrap();
    // The run's model outputs are the script, each with the fingerprint of
    // the request it answered; its path, route and answer the expectations.
    assert!(yaml.contains("intent\":\"DIRECT\""), "{yaml}");
    assert!(yaml.contains("\"request\":\""), "{yaml}");
    assert!(
        yaml.contains("path: [\"summarizer\",\"router\",\"direct\"]"),
        "{yaml}"
    );
    assert!(yaml.contains("routes: {\"router\":\"DIRECT\"}"), "{yaml}");
    assert!(
        yaml.contains("answer: \"Hello! Ask me about development data.\""),
        "{yaml}"
    );

    // Unchanged, on the same graph: it passes (no model reached).
    let file = case_file.to_str().unwrap();
    let pass = sg_in(d, &["test", file]);
    assert!(pass.status.success(), "{}\n{yaml}", shown(&pass));
    assert!(
        shown(&pass).contains("1 passed, 0 failed"),
        "{}",
        shown(&pass)
    );

    // A second case from the same run gets a new name; both pass.
    let again = sg_in(d, &["test", "--from-run", &id, "--name", "a greeting"]);
    assert!(
        shown(&again).contains("\"a greeting (2)\""),
        "{}",
        shown(&again)
    );
    let both = sg_in(d, &["test", file]);
    assert!(
        shown(&both).contains("2 passed, 0 failed"),
        "{}",
        shown(&both)
    );

    // The router's prompt is edited so that the model routes the greeting
    // elsewhere.
    let prompt = d.join("prompts/chat/router.md");
    let mut text = std::fs::read_to_string(&prompt).unwrap();
    text.push_str("\nASK BACK FIRST: when in doubt, ask the user what they mean.\n");
    std::fs::write(&prompt, text).unwrap();

    // Offline, the recorded reply no longer answers the router's request:
    // the case fails and says why.
    let fail = sg_in(
        d,
        &["test", file, "--filter", "a greeting (2)", "--json", "-"],
    );
    assert_eq!(fail.status.code(), Some(1), "{}", shown(&fail));
    let report: Value = serde_json::from_slice(&fail.stdout).unwrap();
    assert_eq!(report["failed"], 1, "{report:#}");
    let failures = report["cases"][0]["failures"].as_array().unwrap();
    assert!(
        failures.iter().any(|f| f["kind"] == "script"
            && f["message"].as_str().unwrap().contains(
                "node `router` sent another request than the one its recorded reply answered"
            )),
        "{report:#}"
    );

    // With the configured model asked for what changed, the new route shows.
    let live = sg_in(
        d,
        &[
            "--model-script",
            "models.yaml",
            "test",
            file,
            "--filter",
            "a greeting (2)",
            "--live",
            "--json",
            "-",
        ],
    );
    assert_eq!(live.status.code(), Some(1), "{}", shown(&live));
    let report: Value = serde_json::from_slice(&live.stdout).unwrap();
    let failures = report["cases"][0]["failures"].as_array().unwrap();
    let path = failures
        .iter()
        .find(|f| f["kind"] == "path")
        .unwrap_or_else(|| panic!("no path failure: {report:#}"));
    assert_eq!(path["expected"], "summarizer → router → direct");
    assert_eq!(path["actual"], "summarizer → router → clarifier");
    let route = failures
        .iter()
        .find(|f| f["kind"] == "routes")
        .unwrap_or_else(|| panic!("no route failure: {report:#}"));
    assert_eq!(
        (route["expected"].as_str(), route["actual"].as_str()),
        (Some("DIRECT"), Some("CLARIFY"))
    );
}
