//! Conformance checks for chats, messages and runs.

use super::*;

pub(super) async fn chats_are_ensured_listed_and_deleted(store: Arc<dyn Store>) {
    let first = store.ensure_chat(chat("c1", "alice", 10)).await.unwrap();
    assert_eq!(first, chat("c1", "alice", 10));
    let mut again = chat("c1", "alice", 99);
    again.title = "another title".into();
    assert_eq!(
        store.ensure_chat(again).await.unwrap(),
        first,
        "ensure_chat keeps and returns the stored chat"
    );
    store.ensure_chat(chat("c3", "alice", 30)).await.unwrap();
    store.ensure_chat(chat("c2", "alice", 20)).await.unwrap();
    store.ensure_chat(chat("b1", "bob", 40)).await.unwrap();
    let ids = |v: Vec<ChatRecord>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_chats("alice", 10).await.unwrap()),
        ["c3", "c2", "c1"]
    );
    assert_eq!(
        ids(store.list_chats("alice", 2).await.unwrap()),
        ["c3", "c2"]
    );
    assert_eq!(ids(store.list_chats("bob", 10).await.unwrap()), ["b1"]);
    assert!(store.list_chats("nobody", 10).await.unwrap().is_empty());
    assert_eq!(
        store.get_chat("c2").await.unwrap(),
        Some(chat("c2", "alice", 20))
    );
    assert_eq!(store.get_chat("nope").await.unwrap(), None);

    store
        .replace_messages_from(
            "c1",
            0,
            vec![
                message("c1", "m0", 0, "hi"),
                message("c1", "m1", 1, "hello"),
            ],
        )
        .await
        .unwrap();
    store
        .replace_messages_from("c2", 0, vec![message("c2", "m0", 0, "other chat")])
        .await
        .unwrap();
    let r = run(Some("c1"), 5);
    store.create_run(r.clone()).await.unwrap();
    assert!(store.delete_chat("c1").await.unwrap());
    assert_eq!(store.get_chat("c1").await.unwrap(), None);
    assert!(
        store.messages("c1").await.unwrap().is_empty(),
        "deleting a chat deletes its messages"
    );
    assert_eq!(
        store.messages("c2").await.unwrap().len(),
        1,
        "other chats keep theirs"
    );
    assert_eq!(
        store.get_run(r.id).await.unwrap(),
        Some(r),
        "runs outlive their chat"
    );
    assert!(!store.delete_chat("c1").await.unwrap());
    assert_eq!(
        ids(store.list_chats("alice", 10).await.unwrap()),
        ["c2", "c3"],
        "writing messages bumped c2"
    );
}

pub(super) async fn active_run_is_set_and_cleared(store: Arc<dyn Store>) {
    store.ensure_chat(chat("c1", "alice", 10)).await.unwrap();
    let id = Uuid::now_v7();
    store.set_active_run("c1", Some(id)).await.unwrap();
    let c = store.get_chat("c1").await.unwrap().unwrap();
    assert_eq!(c.active_run, Some(id));
    assert!(c.updated_at > 10);
    store.set_active_run("c1", None).await.unwrap();
    let cleared = store.get_chat("c1").await.unwrap().unwrap();
    assert_eq!(cleared.active_run, None);
    assert!(
        cleared.updated_at > c.updated_at,
        "every change bumps updated_at"
    );
    assert!(matches!(
        store.set_active_run("nope", Some(id)).await,
        Err(StoreError::NotFound(_))
    ));
}

pub(super) async fn messages_append_regenerate_edit_and_upsert(store: Arc<dyn Store>) {
    store.ensure_chat(chat("c1", "alice", 10)).await.unwrap();
    let texts = |v: Vec<MessageRecord>| {
        v.into_iter()
            .map(|m| (m.id, m.parts[0]["text"].as_str().unwrap_or("").to_owned()))
            .collect::<Vec<_>>()
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    store
        .replace_messages_from(
            "c1",
            0,
            vec![
                message("c1", "u0", 0, "hi"),
                message("c1", "a1", 1, "hello"),
            ],
        )
        .await
        .unwrap();
    // Append a turn.
    store
        .replace_messages_from(
            "c1",
            2,
            vec![
                message("c1", "u2", 2, "why 42?"),
                message("c1", "a3", 3, "because"),
            ],
        )
        .await
        .unwrap();
    let all = store.messages("c1").await.unwrap();
    assert_eq!(
        all,
        vec![
            message("c1", "u0", 0, "hi"),
            message("c1", "a1", 1, "hello"),
            message("c1", "u2", 2, "why 42?"),
            message("c1", "a3", 3, "because")
        ]
    );
    assert!(store.get_chat("c1").await.unwrap().unwrap().updated_at > 10);
    // Regenerate the last answer under the same id.
    store
        .replace_messages_from("c1", 3, vec![message("c1", "a3", 3, "because 6×7 ✓")])
        .await
        .unwrap();
    assert_eq!(
        texts(store.messages("c1").await.unwrap()),
        [
            pair("u0", "hi"),
            pair("a1", "hello"),
            pair("u2", "why 42?"),
            pair("a3", "because 6×7 ✓")
        ]
    );
    // Edit the second question: everything after it goes.
    store
        .replace_messages_from("c1", 2, vec![message("c1", "u2b", 2, "why 43? 日本語")])
        .await
        .unwrap();
    assert_eq!(
        texts(store.messages("c1").await.unwrap()),
        [
            pair("u0", "hi"),
            pair("a1", "hello"),
            pair("u2b", "why 43? 日本語")
        ]
    );
    // Upsert: replace in place by id, then add the streamed answer.
    let before = store.get_chat("c1").await.unwrap().unwrap().updated_at;
    store
        .upsert_message(message("c1", "a1", 1, "hello again"))
        .await
        .unwrap();
    store
        .upsert_message(message("c1", "a3", 3, "the answer"))
        .await
        .unwrap();
    let all = store.messages("c1").await.unwrap();
    assert_eq!(
        texts(all.clone()),
        [
            pair("u0", "hi"),
            pair("a1", "hello again"),
            pair("u2b", "why 43? 日本語"),
            pair("a3", "the answer")
        ]
    );
    assert_eq!(
        all[1],
        message("c1", "a1", 1, "hello again"),
        "metadata and times round-trip"
    );
    assert!(store.get_chat("c1").await.unwrap().unwrap().updated_at > before);
    assert!(store.messages("other").await.unwrap().is_empty());
}

pub(super) async fn runs_are_created_listed_and_finished(store: Arc<dyn Store>) {
    let (a, b, c) = (
        run(Some("c1"), 100),
        run(Some("c1"), 300),
        run(Some("c1"), 200),
    );
    let mut loose = run(None, 400);
    // A fork's record keeps its mode, node(s), edit and attachment.
    loose.parent = Some(ForkOrigin {
        run_id: a.id,
        step: 3,
        mode: Some(stategraph::internals::events::ForkMode::After),
        nodes: vec!["router".into()],
        set: json!({"intent": "EXPLAIN", "n": 2})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        alternative_of: Some("m-7".into()),
    });
    loose.request_id = None;
    for r in [&a, &b, &c, &loose] {
        store.create_run(r.clone()).await.unwrap();
    }
    assert_eq!(store.get_run(loose.id).await.unwrap(), Some(loose.clone()));
    assert_eq!(store.get_run(Uuid::now_v7()).await.unwrap(), None);
    let ids = |v: Vec<RunRecord>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store
            .list_runs(&RunQuery::newest(10).of_chat("c1"))
            .await
            .unwrap()),
        [b.id, c.id, a.id]
    );
    assert_eq!(
        ids(store.list_runs(&RunQuery::newest(2)).await.unwrap()),
        [loose.id, b.id]
    );
    assert!(
        store
            .list_runs(&RunQuery::newest(10).of_chat("c9"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        matches!(
            store.create_run(a.clone()).await,
            Err(StoreError::Conflict(_))
        ),
        "a duplicate run is a conflict"
    );

    let error = ErrorInfo {
        code: "recursion_limit".into(),
        message: "too many steps — «loop»".into(),
    };
    let usage = Usage {
        prompt_tokens: 1234,
        completion_tokens: 56,
        ..Default::default()
    };
    store
        .finish_run(a.id, RunStatus::Failed, Some(error.clone()), usage)
        .await
        .unwrap();
    let done = store.get_run(a.id).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.error, done.usage),
        (RunStatus::Failed, Some(error), usage)
    );
    assert!(done.finished_at.is_some());
    assert!(matches!(
        store
            .finish_run(Uuid::now_v7(), RunStatus::Finished, None, usage)
            .await,
        Err(StoreError::NotFound(_))
    ));
}

/// One user's many runs never crowd another's out of a page: the filters
/// (user, chat, graph, status, time) are applied by the store, and pages
/// continue by cursor without repeats or gaps.
pub(super) async fn runs_are_filtered_and_paged_in_the_store(store: Arc<dyn Store>) {
    let mut bobs = Vec::new();
    for i in 0..3u64 {
        let mut r = run(Some("bob-chat"), 10 + i);
        r.user_id = "bob".into();
        r.graph = "research".into();
        if i == 1 {
            r.status = RunStatus::Finished;
        }
        store.create_run(r.clone()).await.unwrap();
        bobs.push(r.id);
    }
    // Alice makes many more runs, all newer than Bob's.
    for i in 0..60u64 {
        store
            .create_run(run(Some("a-chat"), 1_000 + i))
            .await
            .unwrap();
    }
    let ids = |v: Vec<RunRecord>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let bob = RunQuery::newest(10).of_user("bob");
    assert_eq!(
        ids(store.list_runs(&bob).await.unwrap()),
        [bobs[2], bobs[1], bobs[0]]
    );
    let mut finished = bob.clone();
    finished.status = Some(RunStatus::Finished);
    assert_eq!(ids(store.list_runs(&finished).await.unwrap()), [bobs[1]]);
    let mut graph = RunQuery::newest(100);
    graph.graph = Some("research".into());
    assert_eq!(store.list_runs(&graph).await.unwrap().len(), 3);
    let mut since = bob.clone();
    since.since = Some(11);
    assert_eq!(
        ids(store.list_runs(&since).await.unwrap()),
        [bobs[2], bobs[1]]
    );
    // Alice's 60 runs in pages of 25: 25 + 25 + 10, no repeats.
    let mut page = RunQuery::newest(25).of_user("alice");
    let mut seen = Vec::new();
    loop {
        let got = store.list_runs(&page).await.unwrap();
        let Some(last) = got.last() else { break };
        page.before = Some(RunCursor::after(last));
        seen.extend(got.iter().map(|r| r.id));
    }
    assert_eq!(seen.len(), 60);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 60, "pages never repeat a run");
}

/// The daily token quota's and cost cap's query: the usage (tokens and
/// cost) of one user's runs created since a time, recorded when they ended
/// — other users', older runs and runs still in flight count nothing.
pub(super) async fn usage_is_summed_per_user_since_a_time(store: Arc<dyn Store>) {
    // Each run's cost differs from its tokens, so a sum of the wrong column
    // shows.
    let spend = |p: u64, c: u64| Usage {
        prompt_tokens: p,
        completion_tokens: c,
        cached_tokens: 0,
        reasoning_tokens: 0,
        cache_write_tokens: 0,
        cost_nano_usd: p * 1_000 + c * 7,
    };
    assert_eq!(
        store.usage_since("alice", 0).await.unwrap(),
        Usage::default()
    );
    let old = run(None, 100);
    let (today, failed, running) = (run(None, 1_000), run(None, 2_000), run(None, 3_000));
    let mut bobs = run(None, 1_500);
    bobs.user_id = "bob".into();
    for r in [&old, &today, &failed, &running, &bobs] {
        store.create_run(r.clone()).await.unwrap();
    }
    let ended = [
        (old.id, RunStatus::Finished, spend(1_000, 1_000)),
        (today.id, RunStatus::Finished, spend(300, 20)),
        (failed.id, RunStatus::Failed, spend(50, 5)),
        (bobs.id, RunStatus::Finished, spend(7_000, 7)),
    ];
    for (id, status, usage) in ended {
        store.finish_run(id, status, None, usage).await.unwrap();
        let stored = store.get_run(id).await.unwrap().unwrap().usage;
        assert_eq!(
            (
                stored.prompt_tokens,
                stored.completion_tokens,
                stored.cost_nano_usd
            ),
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cost_nano_usd
            ),
            "the run record keeps its tokens and cost"
        );
    }
    assert_eq!(
        store.usage_since("alice", 1_000).await.unwrap(),
        spend(350, 25)
    );
    assert_eq!(
        store.usage_since("alice", 0).await.unwrap(),
        spend(1_350, 1_025)
    );
    assert_eq!(
        store.usage_since("alice", 3_001).await.unwrap(),
        Usage::default()
    );
    assert_eq!(
        store.usage_since("bob", 1_000).await.unwrap(),
        spend(7_000, 7)
    );
    assert_eq!(
        store.usage_since("carol", 0).await.unwrap(),
        Usage::default()
    );
}

/// The end of a chat turn in one call: the assistant message, the run's end
/// and the chat's active run cleared — except for a paused run, a newer
/// turn's run, or a chat deleted meanwhile (which stays deleted).
pub(super) async fn a_turn_ends_with_its_message_its_run_and_its_chat(store: Arc<dyn Store>) {
    store.ensure_chat(chat("c1", "alice", 10)).await.unwrap();
    store
        .upsert_message(message("c1", "m0", 0, "why 42?"))
        .await
        .unwrap();
    let end = |r: &RunRecord, chat: &str, status: RunStatus, release: bool| store::TurnEnd {
        run_id: r.id,
        status,
        error: None,
        usage: Usage {
            prompt_tokens: 3,
            completion_tokens: 5,
            cost_nano_usd: 1_234_567,
            ..Usage::default()
        },
        message: message(chat, &format!("a-{}", r.id), 1, "because"),
        release,
    };
    let r = run(Some("c1"), 1);
    store.create_run(r.clone()).await.unwrap();
    store.set_active_run("c1", Some(r.id)).await.unwrap();
    let before = store.get_chat("c1").await.unwrap().unwrap();
    store
        .end_turn(end(&r, "c1", RunStatus::Finished, true))
        .await
        .unwrap();
    let after = store.get_chat("c1").await.unwrap().unwrap();
    assert_eq!(after.active_run, None, "the chat is free");
    assert!(after.updated_at > before.updated_at);
    let texts: Vec<_> = store
        .messages("c1")
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.id, m.role, m.parts))
        .collect();
    assert_eq!(
        texts,
        [
            (
                "m0".into(),
                "user".into(),
                json!([{"type": "text", "text": "why 42?"}])
            ),
            (
                format!("a-{}", r.id),
                "assistant".into(),
                json!([{"type": "text", "text": "because"}])
            ),
        ]
    );
    let stored = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Finished);
    assert!(stored.finished_at.is_some());
    assert_eq!(
        (
            stored.usage.prompt_tokens,
            stored.usage.completion_tokens,
            stored.usage.cost_nano_usd
        ),
        (3, 5, 1_234_567)
    );

    // A paused run stays the chat's active run.
    let paused = run(Some("c1"), 2);
    store.create_run(paused.clone()).await.unwrap();
    store.set_active_run("c1", Some(paused.id)).await.unwrap();
    store
        .end_turn(end(&paused, "c1", RunStatus::Interrupted, false))
        .await
        .unwrap();
    assert_eq!(
        store.get_chat("c1").await.unwrap().unwrap().active_run,
        Some(paused.id)
    );
    assert_eq!(
        store.get_run(paused.id).await.unwrap().unwrap().status,
        RunStatus::Interrupted
    );

    // A newer turn's run stays active.
    let old = run(Some("c1"), 3);
    store.create_run(old.clone()).await.unwrap();
    store
        .end_turn(end(&old, "c1", RunStatus::Cancelled, true))
        .await
        .unwrap();
    assert_eq!(
        store.get_chat("c1").await.unwrap().unwrap().active_run,
        Some(paused.id),
        "only the chat's own active run is cleared"
    );

    // A chat deleted while its run answered stays deleted; the run ends.
    store.ensure_chat(chat("c2", "alice", 10)).await.unwrap();
    let orphan = run(Some("c2"), 4);
    store.create_run(orphan.clone()).await.unwrap();
    store.set_active_run("c2", Some(orphan.id)).await.unwrap();
    assert!(store.delete_chat("c2").await.unwrap());
    store
        .end_turn(end(&orphan, "c2", RunStatus::Finished, true))
        .await
        .unwrap();
    assert_eq!(store.get_chat("c2").await.unwrap(), None);
    assert!(store.messages("c2").await.unwrap().is_empty());
    assert_eq!(
        store.get_run(orphan.id).await.unwrap().unwrap().status,
        RunStatus::Finished
    );

    // An unknown run is NotFound; the message is still stored.
    let ghost = run(Some("c1"), 5);
    let err = store
        .end_turn(end(&ghost, "c1", RunStatus::Finished, true))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    assert_eq!(store.messages("c1").await.unwrap().len(), 5);
}

/// A chat's metadata (schema version 10: the LangGraph API's thread
/// metadata) is stored as given, read per user, replaced, and goes with
/// its chat.
pub(super) async fn chat_metadata_is_stored_per_user_and_goes_with_its_chat(store: Arc<dyn Store>) {
    store.ensure_chat(chat("m1", "alice", 10)).await.unwrap();
    store.ensure_chat(chat("m2", "alice", 20)).await.unwrap();
    store.ensure_chat(chat("m3", "bob", 30)).await.unwrap();
    assert!(
        store.chats_metadata("alice").await.unwrap().is_empty(),
        "none yet"
    );
    let tagged = serde_json::json!({"tags": ["eval", "smoke"], "owner": "a", "n": 1.5, "deep": {"x": [null, true]}});
    assert!(store.set_chat_metadata("m1", tagged.clone()).await.unwrap());
    assert!(
        store
            .set_chat_metadata("m3", serde_json::json!({"tags": ["b"]}))
            .await
            .unwrap()
    );
    assert!(
        !store
            .set_chat_metadata("nope", tagged.clone())
            .await
            .unwrap(),
        "no such chat"
    );
    let alice = store.chats_metadata("alice").await.unwrap();
    assert_eq!(alice.len(), 1, "only chats with metadata: {alice:?}");
    assert_eq!(alice["m1"], tagged);
    assert_eq!(
        store.chats_metadata("bob").await.unwrap()["m3"]["tags"][0],
        "b"
    );
    assert!(
        store.get_chat("m1").await.unwrap().unwrap().updated_at > 10,
        "a metadata change updates the chat"
    );
    store
        .set_chat_metadata("m1", serde_json::json!({"owner": "z"}))
        .await
        .unwrap();
    assert_eq!(
        store.chats_metadata("alice").await.unwrap()["m1"],
        serde_json::json!({"owner": "z"}),
        "replaced, not merged"
    );
    store
        .set_chat_metadata("m1", serde_json::json!({}))
        .await
        .unwrap();
    assert!(
        store.chats_metadata("alice").await.unwrap().is_empty(),
        "emptied"
    );
    store
        .set_chat_metadata("m2", serde_json::json!({"k": "v"}))
        .await
        .unwrap();
    store.delete_chat("m2").await.unwrap();
    store.ensure_chat(chat("m2", "alice", 40)).await.unwrap();
    assert!(
        store.chats_metadata("alice").await.unwrap().is_empty(),
        "deleted with its chat"
    );
}

/// `newest_run_status_by_chat`: the status of each of a user's chats'
/// newest run (what a thread search shows), another user's and chat-less
/// runs left out.
pub(super) async fn newest_run_status_by_chat_reads_each_chats_newest_run(store: Arc<dyn Store>) {
    for (id, user) in [("c1", "alice"), ("c2", "alice"), ("b1", "bob")] {
        store.ensure_chat(chat(id, user, 1)).await.unwrap();
    }
    let failed = |id| {
        let store = Arc::clone(&store);
        async move {
            let e = ErrorInfo {
                code: "boom".into(),
                message: "it broke".into(),
            };
            let (s, u) = (RunStatus::Failed, Usage::default());
            store.finish_run(id, s, Some(e), u).await.unwrap();
        }
    };
    let older = run(Some("c1"), 5);
    let newer = run(Some("c1"), 7);
    let other = run(Some("c2"), 9);
    let mut bobs = run(Some("b1"), 11);
    bobs.user_id = "bob".into();
    for r in [&newer, &older, &other, &bobs, &run(None, 20)] {
        store.create_run(r.clone()).await.unwrap();
    }
    failed(older.id).await;
    failed(other.id).await;
    let got = store.newest_run_status_by_chat("alice").await.unwrap();
    let want = [
        ("c1".to_owned(), RunStatus::Running),
        ("c2".to_owned(), RunStatus::Failed),
    ];
    assert_eq!(got, want.into_iter().collect());
    let bob = store.newest_run_status_by_chat("bob").await.unwrap();
    assert_eq!(bob.get("b1"), Some(&RunStatus::Running));
    assert!(
        store
            .newest_run_status_by_chat("nobody")
            .await
            .unwrap()
            .is_empty()
    );
}
