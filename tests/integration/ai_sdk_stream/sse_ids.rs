//! Every SSE chunk has its own id, and a resume after ANY of them loses
//! nothing (issue 31): a text part's `text-start` and its first
//! `text-delta` come from one event and used to share its id, so a client
//! cut off between them and resuming with that `Last-Event-ID` lost the
//! first delta. Through the real server: one short answer, then a resume
//! (`GET /api/chat/{id}/stream` with `Last-Event-ID`) at every cut point,
//! each answering exactly the rest of the original stream.

use std::collections::HashSet;

use stategraph::internals::llm::scripted::{ScriptedModel, Turn};

use crate::support::server::TestServer;
use crate::support::{aisdk_validate, chat_body, post_json};

/// The SSE events of a stream: (id, the whole frame).
fn frames(sse: &str) -> Vec<(Option<String>, String)> {
    sse.split_inclusive("\n\n")
        .map(|f| {
            let id = f
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(str::to_owned);
            (id, f.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_any_id_sends_exactly_the_rest() {
    let model = ScriptedModel::from_fn(|_| Turn::text("Paris is the capital.")).shared();
    let server = TestServer::start(model, |_| {}).await;
    let client = reqwest::Client::new();
    let mut body = chat_body("ids", "Capital of France?");
    body["graph"] = serde_json::json!("tools");
    let resp = post_json(&client, &server.url("/api/chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let whole = resp.text().await.unwrap();
    let (ok, report) = aisdk_validate(&whole);
    assert!(ok, "{report}\n{whole}");
    let frames = frames(&whole);
    let ids: Vec<&str> = frames.iter().filter_map(|(id, _)| id.as_deref()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "every chunk has its own id: {ids:?}"
    );
    // The case of the issue: `text-start` and the first `text-delta`.
    let start = frames
        .iter()
        .position(|(_, f)| f.contains(r#""type":"text-start""#))
        .expect("a text part");
    assert!(frames[start + 1].1.contains(r#""type":"text-delta""#));
    assert_ne!(frames[start].0, frames[start + 1].0);

    for (i, (id, _)) in frames.iter().enumerate() {
        let Some(id) = id else { continue };
        let resumed = client
            .get(server.url("/api/chat/ids/stream"))
            .header("last-event-id", id.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(resumed.status(), 200, "after {id}");
        let rest = resumed.text().await.unwrap();
        let want: String = frames[i + 1..].iter().map(|(_, f)| f.as_str()).collect();
        // Keep-alive comments are not part of the stream's content.
        let got: String = rest
            .split_inclusive("\n\n")
            .filter(|f| !f.starts_with(':'))
            .collect();
        assert_eq!(got, want, "resumed after {id}");
    }
    // An id this stream never sent is refused, with its code.
    let bad = client
        .get(server.url("/api/chat/ids/stream"))
        .header("last-event-id", "7.x")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("invalid_last_event_id"));
    server.shutdown().await;
}
