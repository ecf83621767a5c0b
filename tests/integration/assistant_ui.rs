//! assistant-ui on `POST /api/chat`, in Chromium (issue 34 item 4): a real
//! `stategraph serve` with the shipped graphs on the offline model, and
//! tests/assistant-ui/assistant-ui.test.mjs driving a small React page
//! built on `@assistant-ui/react` and `@assistant-ui/react-ai-sdk` (pinned
//! by tests/assistant-ui/package-lock.json, bundled with esbuild): three
//! messages, a reload that shows the stored thread again, the thinking and
//! follow-up data parts rendered, and nothing thrown by assistant-ui (it
//! iterates `metadata.steps`: a number there blanked the thread after the
//! first answer, "steps is not iterable").

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::studio::{artifacts, copy_shipped_graphs, serve_binary};
use crate::support::root;

#[tokio::test]
async fn assistant_ui_renders_a_chat_and_its_reload_in_chromium() {
    let node = std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("node"))
                .find(|p| p.is_file())
        })
        .expect("the assistant-ui test needs Node.js (`node` on PATH)");
    let chromium = std::env::var_os("CHROMIUM_PATH")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()))
        .expect("the assistant-ui test needs Chromium: `apt-get install -y chromium` (tests/run.sh does), or set CHROMIUM_PATH");
    let test_dir = root().join("tests/assistant-ui");
    assert!(
        test_dir
            .join("node_modules/@assistant-ui/react-ai-sdk")
            .is_dir(),
        "the assistant-ui test's packages are not installed: run `npm ci` in {} (tests/run.sh does)",
        test_dir.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    copy_shipped_graphs(&graphs);
    let (mut server, base) = serve_binary(dir.path(), &graphs).await;
    let art = artifacts().join("assistant-ui");
    let out = tokio::process::Command::new(node)
        .arg("assistant-ui.test.mjs")
        .current_dir(&test_dir)
        .env("AUI_URL", &base)
        .env("AUI_ARTIFACTS", &art)
        .env("CHROMIUM_PATH", chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), out)
        .await
        .expect("the browser test finished within 10 minutes")
        .unwrap();
    let _ = server.kill().await;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{report}");
    assert!(
        out.status.success(),
        "the assistant-ui browser test failed:\n{report}"
    );
    assert!(report.contains("ok assistant-ui"), "{report}");
    for shot in ["assistant-ui-live", "assistant-ui-reloaded"] {
        assert!(
            art.join(format!("{shot}.png")).is_file(),
            "no screenshot {shot}"
        );
    }
}
