//! `stategraph new NAME`: a minimal graph that checks and runs.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The graph file `new` writes; `{name}` is the graph id.
const GRAPH: &str = r#"# A chat graph: one model call answers the conversation.
# Check it:  stategraph check graphs/{name}.yaml
# Run it:    stategraph run {name} "hello"
# Serve it:  stategraph serve   (then POST /api/chat with "graph": "{name}")
# Reference: docs/graph-files.md
description: Answers the user's message.
entry: answer

state:
  fields:
    messages: { type: messages }   # the conversation; POST /api/chat fills it
    query:    { type: string }     # the newest user message
    answer:   { type: string }     # the reply

nodes:
  - id: answer
    kind: llm
    prompt: {name}/answer.md
    history: messages
    input: query
    output: answer
    surface: answer                # stream the text to the chat UI

edges:
  - answer -> END
"#;

/// The prompt `new` writes (a minijinja template; the system message).
const PROMPT: &str =
    "You are a helpful assistant. Answer the user's message briefly and clearly.\n";

/// Writes `graphs/NAME.yaml` and `prompts/NAME/answer.md`; returns the
/// paths written.
///
/// # Errors
/// An invalid name, a file that exists (without `force`), or a write failed.
pub fn new_graph(
    name: &str,
    graphs_dir: &Path,
    prompts_dir: &Path,
    force: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    if !crate::graph::load::valid_id(name) {
        bail!(
            "`{name}` cannot be a graph id: use ASCII letters, digits, `_` and `-`, starting with a letter (64 at most)"
        );
    }
    let files = [
        (
            graphs_dir.join(format!("{name}.yaml")),
            GRAPH.replace("{name}", name),
        ),
        (prompts_dir.join(name).join("answer.md"), PROMPT.to_owned()),
    ];
    if let Some((p, _)) = files.iter().find(|(p, _)| p.exists() && !force) {
        bail!("{} exists (use --force to replace it)", p.display());
    }
    for (path, text) in &files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}
