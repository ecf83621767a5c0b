//! `talk`: a one-agent graph with its prompt written to disk, for tests of
//! the model calls a run stores (and the studio's view of them).

use std::path::Path;

/// One agent node with a prompt and the `basic` tools: one model call per
/// turn, offered two tools, sent the whole conversation.
pub const TALK: &str = r#"
description: Talks, with a calculator at hand.
entry: talk
state:
  fields:
    messages: { type: messages }
    query:    { type: string }
    answer:   { type: string }
chat:
  text: query
  answer: answer
nodes:
  - id: talk
    kind: agent
    prompt: talk/system.md
    model: chat
    surface: answer
    tools: [basic]
    input: query
    history: messages
    history_window: 1000
    output: answer
edges: [talk -> END]
"#;

/// The system prompt's template: the rendered prompt names the graph's
/// field, so the studio can show both.
pub const TALK_PROMPT: &str =
    "You are a patient tutor. Answer the question in one short paragraph.\nKeep secrets secret.";

/// Graph and prompt directories holding `talk`.
pub fn talk_dirs(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let graphs = root.join("graphs");
    let prompts = root.join("prompts");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::create_dir_all(prompts.join("talk")).unwrap();
    std::fs::write(graphs.join("talk.yaml"), TALK).unwrap();
    std::fs::write(prompts.join("talk/system.md"), TALK_PROMPT).unwrap();
    (graphs, prompts)
}
