//! The `stategraph` binary hands memory back once it goes quiet
//! (`stategraph::memory`, with mimalloc's and glibc's calls installed):
//! after chats end it releases (SQLite's page caches, every thread's free
//! pages), loses nothing by it, serves on, and stops releasing while it
//! stays idle. How much memory comes back is a figure of the load bench
//! (`cargo bench --bench load -- report`), not of a test.

use std::time::Duration;

use serde_json::Value;

use crate::support::process::{Server, config, start};
use crate::support::text_of_parts;
use crate::support::{chat_body, post_json, root};

async fn releases(server: &Server) -> u64 {
    let text = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("stategraph_memory_releases_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the releases counter in /metrics")
}

/// Polls until the counter passes `above` (a release within a few of the
/// upkeep's 2 s looks).
async fn released_after(server: &Server, above: u64) -> u64 {
    for _ in 0..100 {
        let n = releases(server).await;
        if n > above {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no memory release within 20 s of the chats ending (still {above})");
}

async fn chat(server: &Server, id: &str) {
    let client = reqwest::Client::new();
    let resp = post_json(
        &client,
        &format!("{}/api/chat", server.base),
        &chat_body(id, "what is the population of Kenya?"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(
        body.contains("\"type\":\"finish\"") && body.ends_with("data: [DONE]\n\n"),
        "{body}\n{}",
        server.log_tail(60)
    );
}

async fn stored_answer(server: &Server, id: &str) -> String {
    let chat: Value = reqwest::get(format!("{}/api/chat/{id}", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages = chat["messages"].as_array().expect("messages");
    // The stream's `[DONE]` waits (up to 5 s) for the turn's end to be
    // stored; the log says whether that wait ran out or the run was
    // suspended, lost or recovered meanwhile.
    assert_eq!(messages.len(), 2, "{chat}\n{}", server.log_tail(60));
    text_of_parts(&messages[1]["parts"])
}

#[tokio::test]
async fn a_quiet_server_releases_memory_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "[store]\nbackend = \"sqlite\"\ndata_dir = \"{}\"\n",
        dir.path().join("data").display()
    );
    // A short linger, so the finished runs' streams drop away soon, and a
    // short release tail (60 s by default), so the test need not wait long.
    let cfg = config(&store).replace(
        "linger = \"30s\"",
        "linger = \"1s\"\nmemory_release = \"3s\"",
    );
    let server = start(dir.path(), &cfg, &root().join("graphs")).await;
    assert_eq!(releases(&server).await, 0, "nothing to release at start");

    let ids: Vec<String> = (0..6).map(|i| format!("mem-{i}")).collect();
    futures::future::join_all(ids.iter().map(|id| chat(&server, id))).await;
    let mut answers = Vec::new();
    for id in &ids {
        answers.push(stored_answer(&server, id).await);
    }
    assert!(
        answers.iter().all(|a| !a.is_empty()),
        "{answers:?}\n{}",
        server.log_tail(60)
    );
    released_after(&server, 0).await;

    // Past the lingering streams and the tail, an idle server stops
    // releasing.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let settled = releases(&server).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        releases(&server).await,
        settled,
        "an idle server keeps releasing"
    );

    // Nothing stored changed, and the server (and its store) serves on.
    for (id, answer) in ids.iter().zip(&answers) {
        assert_eq!(&stored_answer(&server, id).await, answer);
    }
    chat(&server, "mem-after").await;
    assert!(!stored_answer(&server, "mem-after").await.is_empty());
    released_after(&server, settled).await;
}
