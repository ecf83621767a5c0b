//! Cases written from stored runs (`stategraph test --from-run`,
//! docs/testing.md): a run stored by `stategraph run` with a model script
//! becomes a case that passes unchanged on the same graph, and fails after
//! a prompt edit that changes the route — with `--live`, the configured
//! model answers the changed request and the report shows the new path.

use serde_json::Value;

use crate::support::process::{run_id, sg_in, shown, workdir};

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
