//! The studio's Model calls tab in Chromium (tests/studio/calls.test.mjs):
//! a chat run's model call shows its rendered system prompt next to the
//! prompt file it came from, the tools it was offered and its answer.

use std::sync::Arc;
use std::time::Duration;

use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::store::memory::MemoryStore;

use crate::support::browser::{artifacts, browser};
use crate::support::server::TestServer;
use crate::support::talk::{TALK_PROMPT, talk_dirs};

#[tokio::test]
async fn studio_shows_a_chat_runs_model_call_with_its_prompt_and_tools() {
    let b = browser();
    let dir = tempfile::tempdir().unwrap();
    let (graphs, prompts) = talk_dirs(dir.path());
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Turn::text(
            "The derivative of x^2 is 2x: the power rule brings the exponent down and lowers it by one.",
        )
    }));
    let server = TestServer::start_with_store(model, Arc::new(MemoryStore::new()), |c| {
        c.paths.graphs = graphs;
        c.paths.prompts = prompts;
        c.server.default_graph = "talk".into();
    })
    .await;
    let base = server.url("");
    let art = artifacts().join("calls");
    let (ok, report) = b
        .run(
            "calls.test.mjs",
            &[
                ("STUDIO_URL", base.as_ref()),
                ("STUDIO_ARTIFACTS", art.as_os_str()),
                ("STUDIO_GRAPH", "talk".as_ref()),
                (
                    "EXPECT_SYSTEM",
                    TALK_PROMPT.lines().next().unwrap().as_ref(),
                ),
                ("EXPECT_TOOLS", "calculator,current_time".as_ref()),
            ],
            Duration::from_secs(180),
        )
        .await;
    server.shutdown().await;
    assert!(ok, "the model calls browser test failed:\n{report}");
    assert!(art.join("calls.png").is_file());
}
