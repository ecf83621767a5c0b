//! The studio's debugging views in Chromium (tests/studio/debug.test.mjs)
//! against the real binary: the path a run took on its graph, finished and
//! live; answering a paused run from the studio (a tool approval, a
//! question's option button, a client tool's output); a breakpoint before
//! the narrator, a state edit and continue; a chat as a thread with a fork.

use std::time::{Duration, Instant};

use crate::support::browser::{artifacts, browser};
use crate::support::process::{copy_shipped_graphs, serve_binary_with};

/// An agent whose `current_time` calls wait for approval (the offline model
/// calls the first tool that needs no arguments).
const APPROVE: &str = r#"
state:
  fields:
    messages: { type: messages }
    query:    { type: string }
    answer:   { type: string }
    summary:  { type: string }
    language: { type: string }
entry: assistant
nodes:
  - id: assistant
    kind: agent
    prompt: chat/direct.md
    history: messages
    input: query
    output: answer
    surface: answer
    tools: [current_time]
    approve: [current_time]
edges: [assistant -> END]
"#;

/// An agent with a client-side tool (`pick record 3` makes the offline
/// model call it with `{"count": 3}`).
const PICK: &str = r#"
state:
  fields:
    messages: { type: messages }
    query:    { type: string }
    answer:   { type: string }
    summary:  { type: string }
    language: { type: string }
entry: assistant
nodes:
  - id: assistant
    kind: agent
    prompt: chat/direct.md
    history: messages
    input: query
    output: answer
    surface: answer
    tools: [calculator]
    client_tools:
      pick_record:
        description: Let the user pick a record.
        parameters:
          type: object
          properties: { count: { type: integer } }
          required: [count]
edges: [assistant -> END]
"#;

/// A question with options, answered into an integer field.
const ASK: &str = r#"
state:
  fields:
    messages: { type: messages }
    query:    { type: string }
    copies:   { type: integer }
    answer:   { type: string }
entry: ask
nodes:
  - id: ask
    kind: interrupt
    question: "How many copies of {{ query }}?"
    output: copies
    options: [1, 2, 3]
  - id: done
    kind: set
    surface: answer
    set:
      answer: "Printing {{ copies }} copies."
edges: [ask -> done, done -> END]
"#;

/// The offline model streams its answers slowly enough to watch a run live
/// (120 tokens, 40 ms apart: about 5 s).
const CONFIG: &str = r#"
[llm.offline]
token_delay = "40ms"
answer_tokens = 120
"#;

#[tokio::test]
async fn studio_debugging_views_in_a_real_browser() {
    let b = browser();
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    copy_shipped_graphs(&graphs);
    for (name, yaml) in [("approve", APPROVE), ("pick", PICK), ("ask", ASK)] {
        std::fs::write(graphs.join(format!("{name}.yaml")), yaml).unwrap();
    }
    let config = dir.path().join("stategraph.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let config = config.to_str().unwrap().to_owned();
    let (mut server, base) = serve_binary_with(dir.path(), &graphs, &["--config", &config]).await;

    // Beside the studio test's directory, which that test empties.
    let art = artifacts().with_file_name("studio-debug-artifacts");
    let _ = std::fs::remove_dir_all(&art);
    let started = Instant::now();
    let (ok, report) = b
        .run(
            "debug.test.mjs",
            &[
                ("STUDIO_URL", base.as_ref()),
                ("STUDIO_ARTIFACTS", art.as_os_str()),
            ],
            Duration::from_secs(600),
        )
        .await;
    let _ = server.kill().await;
    println!("browser test took {:?}", started.elapsed());
    assert!(ok, "the studio debug browser test failed:\n{report}");
    for screen in [
        "run-path",
        "run-path-live",
        "run-waiting",
        "playground-question",
        "playground-client-tool",
        "playground-breakpoint",
        "chat-thread",
    ] {
        assert!(
            art.join(format!("{screen}.png")).is_file(),
            "no screenshot of {screen} in {}",
            art.display()
        );
    }
}
