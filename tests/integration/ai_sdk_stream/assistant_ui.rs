//! assistant-ui on `POST /api/chat`, in Chromium (issue 34 item 4): a real
//! `stategraph serve` with the shipped graphs on the offline model, and
//! tests/assistant-ui/assistant-ui.test.mjs driving a small React page
//! built on `@assistant-ui/react` and `@assistant-ui/react-ai-sdk` (pinned
//! by tests/assistant-ui/package-lock.json, bundled with esbuild): three
//! messages, a reload that shows the stored thread again, the thinking and
//! follow-up data parts rendered, and nothing thrown by assistant-ui (it
//! iterates `metadata.steps`: a number there blanked the thread after the
//! first answer, "steps is not iterable").

use std::time::Duration;

use crate::support::browser::{artifacts, browser_in};
use crate::support::process::{copy_shipped_graphs, serve_binary};
use crate::support::root;

#[tokio::test]
async fn assistant_ui_renders_a_chat_and_its_reload_in_chromium() {
    let test_dir = root().join("tests/assistant-ui");
    assert!(
        test_dir
            .join("node_modules/@assistant-ui/react-ai-sdk")
            .is_dir(),
        "the assistant-ui test's packages are not installed: run `npm ci` in {} (tests/run.sh does)",
        test_dir.display()
    );
    let b = browser_in(test_dir);
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    copy_shipped_graphs(&graphs);
    let (mut server, base) = serve_binary(dir.path(), &graphs).await;
    let art = artifacts().join("assistant-ui");
    let (ok, report) = b
        .run(
            "assistant-ui.test.mjs",
            &[
                ("AUI_URL", base.as_ref()),
                ("AUI_ARTIFACTS", art.as_os_str()),
            ],
            Duration::from_secs(600),
        )
        .await;
    let _ = server.kill().await;
    assert!(ok, "the assistant-ui browser test failed:\n{report}");
    assert!(report.contains("ok assistant-ui"), "{report}");
    for shot in ["assistant-ui-live", "assistant-ui-reloaded"] {
        assert!(
            art.join(format!("{shot}.png")).is_file(),
            "no screenshot {shot}"
        );
    }
}
