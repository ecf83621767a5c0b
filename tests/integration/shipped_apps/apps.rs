//! Applications built on the public API: the `custom_kind` example (a Rust
//! node kind registered next to the built-in ones, a graph file using it,
//! the whole command line over it) as its README says to run it, and the
//! `approval` example (human in the loop) as docs/human-in-the-loop.md does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

use crate::support::process::example;
use crate::support::{aisdk_validate, chat_body, root, spawn_serving};

/// The example's binary, built when the test run did not build it (e.g.
/// `cargo nextest run --test integration`).
fn example_bin() -> PathBuf {
    example("custom_kind")
}

/// `--graphs DIR --prompts DIR` of an example in this checkout: the
/// directories an example finds by itself are those of the checkout that
/// built it.
fn example_dirs(name: &str) -> [String; 4] {
    let base = root().join("examples").join(name);
    [
        "--graphs".into(),
        base.join("graphs").to_string_lossy().into_owned(),
        "--prompts".into(),
        base.join("prompts").to_string_lossy().into_owned(),
    ]
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let dirs = if args.contains(&"--graphs") {
        Vec::new()
    } else {
        example_dirs("custom_kind").to_vec()
    };
    Command::new(example_bin())
        .args(dirs)
        .args(args)
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("STATEGRAPH_CONFIG")
        .env_remove("STATEGRAPH_GRAPHS")
        .env_remove("STATEGRAPH_PROMPTS")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_example_checks_and_runs_its_custom_kind() {
    let dir = tempfile::tempdir().unwrap();
    let check = run(dir.path(), &["check"]);
    assert!(check.status.success(), "{}", stdout(&check));
    assert!(stdout(&check).contains("1 valid, 0 error(s)"));
    // Its kind is in the schema editors use.
    assert!(stdout(&run(dir.path(), &["schema"])).contains("\"lexicon\""));

    let unhappy = run(
        dir.path(),
        &[
            "run",
            "feedback",
            "Late again and the box was broken",
            "--no-store",
        ],
    );
    assert!(unhappy.status.success(), "{unhappy:?}");
    let text = stdout(&unhappy);
    assert!(
        text.contains(r#"data-lexicon: {"score":-1.0,"words":["late","broken"]}"#),
        "{text}"
    );
    assert!(
        text.contains("▶ apologise") && !text.contains("▶ thank"),
        "{text}"
    );

    let happy = run(
        dir.path(),
        &["run", "feedback", "Great and fast, thanks", "--no-store"],
    );
    let text = stdout(&happy);
    assert!(
        text.contains(r#""score":1.0"#) && text.contains("▶ thank"),
        "{text}"
    );
    assert!(
        text.contains("answer: Thank you for the kind words"),
        "{text}"
    );
}

/// The custom kind's settings are checked at load like a built-in's.
#[test]
fn the_custom_kind_reports_wrong_settings_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    let file = root().join("examples/custom_kind/graphs/feedback.yaml");
    let yaml = std::fs::read_to_string(file).unwrap();
    // `output: query` names a string field; the kind needs a number.
    let bad = yaml.replacen("    output: score\n", "    output: query\n", 1);
    assert_ne!(bad, yaml);
    std::fs::write(graphs.join("feedback.yaml"), bad).unwrap();
    let prompts = root().join("examples/custom_kind/prompts");
    let out = run(
        dir.path(),
        &[
            "--graphs",
            "graphs",
            "--prompts",
            prompts.to_str().unwrap(),
            "check",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("graphs/feedback.yaml:18:13: error[field-type]: field `query` is string but `score` needs a number field"),
        "{text}"
    );
}

/// `cargo run --example custom_kind -- serve`: the graph with the custom
/// kind streams a valid UI message, its data part included.
#[tokio::test]
async fn the_example_serves_its_graph() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(example_bin());
    cmd.args(example_dirs("custom_kind"))
        .arg("serve")
        .current_dir(dir.path());
    let (_child, base) = spawn_serving(cmd).await;
    let mut body = chat_body("fb-1", "The parcel was late");
    body["graph"] = json!("feedback");
    let text = reqwest::Client::new()
        .post(format!("{base}/api/chat"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (ok, report) = aisdk_validate(&text);
    assert!(ok, "{report}\n{text}");
    assert!(text.contains(r#""type":"data-lexicon""#), "{text}");
    assert!(text.contains(r#""type":"text-delta""#), "{text}");
}

/// The approval example as its docs run it: `delete record 42` pauses at
/// `delete_record`; denied, nothing is deleted; approved, it runs once; a
/// second answer is refused.
#[test]
fn the_approval_example_pauses_and_resumes_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = root().join("examples/approval/stategraph.toml");
    let config = config.to_str().unwrap();
    let approval = |args: &[&str]| {
        let out = Command::new(example("approval"))
            .args(["--config", config])
            .args(example_dirs("approval"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = approval(&["check"]);
    assert!(ok && text.contains("1 valid, 0 error(s)"), "{text}");
    let paused_run = || {
        let (_, text) = approval(&["run", "approval", "delete record 42"]);
        assert!(
            text.contains(r#"run paused, waiting for approval-"#)
                && text.contains(r#"approval of delete_record({"id":42})"#),
            "{text}"
        );
        text.split("stategraph resume ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .expect("the resume command is printed")
            .to_owned()
    };

    let denied = paused_run();
    let (ok, text) = approval(&["resume", &denied, "--value", r#"{"approved": false}"#]);
    assert!(ok, "{text}");
    assert!(text.contains("DENIED"), "{text}");
    assert!(!text.contains("tool delete_record ok"), "{text}");

    let approved = paused_run();
    let (ok, text) = approval(&["resume", &approved, "--value", r#"{"approved": true}"#]);
    assert!(ok, "{text}");
    assert_eq!(text.matches("tool delete_record ok").count(), 1, "{text}");
    assert!(text.contains("status Finished"), "{text}");
    let (ok, text) = approval(&["resume", &approved, "--value", r#"{"approved": true}"#]);
    assert!(!ok && text.contains("not waiting"), "{text}");
}
