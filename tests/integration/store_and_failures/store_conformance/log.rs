//! Conformance checks for the event log and checkpoints.

use super::*;
use stategraph::internals::events::{
    CustomData, LlmFailure, LlmFinish, LlmStart, ToolFault, ToolReady, ToolReturn,
};

pub(super) async fn events_page_and_checkpoints_filter_by_step(store: Arc<dyn Store>) {
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    let mut all = Vec::new();
    let mut seq = 0;
    for step in 0..4u32 {
        let events: Vec<_> = (0..5)
            .map(|_| {
                seq += 1;
                text(r.id, seq, step)
            })
            .collect();
        all.extend(events.iter().cloned());
        store.append(&batch(r.id, step, events)).await.unwrap();
    }
    let all = owned(&all);
    assert_eq!(all_events(&*store, r.id).await, all);
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = store.events(r.id, after, 3).await.unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = last.seq;
        paged.extend(page);
    }
    assert_eq!(paged, all);
    assert_eq!(store.events(r.id, 17, 100).await.unwrap(), all[17..]);
    assert!(store.events(r.id, 20, 100).await.unwrap().is_empty());
    assert!(store.events(r.id, 0, 0).await.unwrap().is_empty());
    assert!(
        store
            .events(Uuid::now_v7(), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let cps = store.checkpoints(r.id, 2).await.unwrap();
    let expected: Vec<CheckpointRecord> = (0..=2)
        .map(|s| CheckpointRecord::from_batch(&batch(r.id, s, Vec::new())))
        .collect();
    assert_eq!(
        cps, expected,
        "checkpoints round-trip, patches keep their field order"
    );
    assert_eq!(
        cps[1].writes[0]
            .patch
            .iter()
            .map(|(f, _)| f.to_owned())
            .collect::<Vec<_>>(),
        ["answer", "findings"]
    );
    assert_eq!(store.checkpoints(r.id, u32::MAX).await.unwrap().len(), 4);
    let stored = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.last_seq, stored.last_step, stored.status),
        (20, 3, RunStatus::Running)
    );
}

pub(super) async fn a_duplicate_seq_conflicts_and_stores_nothing_of_its_batch(
    store: Arc<dyn Store>,
) {
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    let first: Vec<_> = (1..=3).map(|s| text(r.id, s, 1)).collect();
    store.append(&batch(r.id, 1, first.clone())).await.unwrap();
    let clash = vec![text(r.id, 4, 2), text(r.id, 5, 2), text(r.id, 3, 2)];
    let err = store.append(&batch(r.id, 2, clash)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert!(!err.is_transient());
    assert_eq!(
        all_events(&*store, r.id).await,
        owned(&first),
        "no event of the failed batch is stored"
    );
    assert_eq!(
        store.checkpoints(r.id, 10).await.unwrap().len(),
        1,
        "nor its checkpoint"
    );
    let stored = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.last_seq, stored.last_step),
        (3, 1),
        "nor the run's progress"
    );
    let retry = vec![text(r.id, 4, 2), text(r.id, 5, 2)];
    store.append(&batch(r.id, 2, retry)).await.unwrap();
    assert_eq!(all_events(&*store, r.id).await.len(), 5);
}

/// Two steps in one append (the input checkpoint riding with the first
/// superstep's): both checkpoints and all events land, or — when one event
/// clashes — nothing of either does.
pub(super) async fn steps_appended_together_land_together(store: Arc<dyn Store>) {
    let r = run(None, 1);
    store.create_run(r.clone()).await.unwrap();
    let first = batch(r.id, 0, vec![text(r.id, 1, 0)]);
    let mut last = batch(r.id, 1, vec![text(r.id, 2, 1), text(r.id, 3, 1)]);
    last.status = RunStatus::Finished;
    let clash = batch(r.id, 1, vec![text(r.id, 1, 1)]);
    let err = store
        .append_steps(&[first.clone(), clash])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert!(
        all_events(&*store, r.id).await.is_empty(),
        "nothing of the failed append"
    );
    assert!(store.checkpoints(r.id, 10).await.unwrap().is_empty());
    store
        .append_steps(&[first.clone(), last.clone()])
        .await
        .unwrap();
    let mut events = first.events.clone();
    events.extend(last.events.iter().cloned());
    assert_eq!(all_events(&*store, r.id).await, owned(&events));
    assert_eq!(
        store.events(r.id, 1, 1).await.unwrap(),
        owned(&events[1..2]),
        "read back from the middle of an append"
    );
    let steps: Vec<u32> = store
        .checkpoints(r.id, 10)
        .await
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, [0, 1]);
    let stored = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.last_seq, stored.last_step, stored.status),
        (3, 1, RunStatus::Finished)
    );
}

pub(super) async fn the_final_batch_sets_the_status(store: Arc<dyn Store>) {
    let r = run(Some("c1"), 1);
    store.create_run(r.clone()).await.unwrap();
    store
        .append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
        .await
        .unwrap();
    store
        .append(&batch(r.id, 1, vec![text(r.id, 2, 1)]))
        .await
        .unwrap();
    let mid = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!((mid.status, mid.finished_at), (RunStatus::Running, None));
    // The final batch repeats the last step: its checkpoint replaces it.
    let mut last = batch(
        r.id,
        1,
        vec![event(
            r.id,
            3,
            1,
            EventKind::RunFinished {
                steps: 1,
                usage: Usage::default(),
            },
        )],
    );
    last.writes.clear();
    last.next.clear();
    last.snapshot = Some(json!({"answer": "answer 1"}));
    last.status = RunStatus::Finished;
    store.append(&last).await.unwrap();
    let done = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.last_seq, done.last_step),
        (RunStatus::Finished, 3, 1)
    );
    assert!(done.finished_at.is_some());
    let cps = store.checkpoints(r.id, 1).await.unwrap();
    assert_eq!(cps.len(), 2);
    assert_eq!(cps[1], CheckpointRecord::from_batch(&last));
}

/// Chat-state batches: a snapshot at 0 and 4, patches in between.
fn chat_batches(run: Uuid) -> Vec<StepBatch> {
    let ty = StateType::of::<ChatState>();
    let patches = [
        Patch::new()
            .set("summary", "short")
            .set("summarized_count", 2),
        Patch::new().set("intent", "RESEARCH").set(
            "routing",
            json!({"why": "looks like research", "score": 0.75}),
        ),
        Patch::new()
            .set("tool_results", json!([{"tool": "calculator", "out": 42}]))
            .set("findings", "42"),
        Patch::new().set(
            "tool_results",
            json!([{"tool": "search", "out": "ünïcode"}]),
        ),
        Patch::new().set("answer", "The answer is 42 ✓").set(
            "messages",
            json!([{"id": "a1", "role": "assistant", "content": "42"}]),
        ),
        Patch::new().set("followups", json!(["Why?", "How?"])),
    ];
    let mut batches = vec![StepBatch {
        snapshot: Some(ty.default_state().to_json()),
        ..batch(run, 0, Vec::new())
    }];
    for (i, patch) in patches.into_iter().enumerate() {
        let step = i as u32 + 1;
        let mut b = StepBatch {
            snapshot: None,
            ..batch(run, step, Vec::new())
        };
        b.writes = vec![TaskWrite {
            node: format!("node{step}"),
            task: 0,
            patch,
        }];
        if step == 4 {
            b.snapshot = Some(
                rebuild_state(&[batches.as_slice(), &[b.clone()]].concat(), &ty, 4)
                    .unwrap()
                    .to_json(),
            );
        }
        batches.push(b);
    }
    batches
}

pub(super) async fn state_rebuilt_from_stored_checkpoints_matches_memory(store: Arc<dyn Store>) {
    let ty = StateType::of::<ChatState>();
    let id = Uuid::now_v7();
    let batches = chat_batches(id);
    for b in &batches {
        store.append(b).await.unwrap();
    }
    let stored: Vec<StepBatch> = store
        .checkpoints(id, u32::MAX)
        .await
        .unwrap()
        .iter()
        .map(|c| c.to_batch(id))
        .collect();
    assert_eq!(stored.len(), batches.len());
    for step in 0..batches.len() as u32 {
        let from_store = rebuild_state(&stored, &ty, step).unwrap().to_json();
        let from_memory = rebuild_state(&batches, &ty, step).unwrap().to_json();
        assert_eq!(from_store, from_memory, "state after step {step}");
    }
    let last = rebuild_state(&stored, &ty, 6).unwrap().to_json();
    assert_eq!(last["answer"], "The answer is 42 ✓");
    assert_eq!(last["tool_results"].as_array().map(Vec::len), Some(2));
}

fn every_kind() -> Vec<EventKind> {
    vec![
        EventKind::RunStarted(Box::new(stategraph::internals::events::RunStart {
            graph: "chat".into(),
            graph_version: "abc123".into(),
            input: Arc::new(
                json!({"query": "¿por qué? 🤔", "big": u64::MAX, "neg": i64::MIN, "f": 0.1}),
            ),
            format: 1,
            forked_from: Some(ForkOrigin {
                run_id: Uuid::nil(),
                step: 2,
                mode: Some(stategraph::internals::events::ForkMode::Before),
                nodes: vec!["narrator".into()],
                set: json!({"query": "why?"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                alternative_of: None,
            }),
            frontier: Some(stategraph::internals::events::Frontier {
                step: 2,
                next: vec![stategraph::internals::events::PendingTask {
                    node: "narrator".into(),
                    item: None,
                }],
                joins: vec![vec!["a".into()]],
            }),
            stream: Some(json!({"messageId": "m1"})),
            user: Some("alice".into()),
        })),
        EventKind::NodeStarted {
            attempt: 1,
            item: Some(json!({"i": 0})),
        },
        EventKind::NodeRetrying {
            attempt: 1,
            error: "timeout".into(),
            delay_ms: 250,
        },
        EventKind::LlmStarted(Box::new(LlmStart {
            call: 0,
            role: "chat".into(),
            model: "gpt-x".into(),
            request: "f00d".into(),
        })),
        EventKind::ReasoningDelta {
            call: 0,
            delta: "hmm…".into(),
        },
        EventKind::TextDelta {
            call: 0,
            delta: "quotes \" backslash \\ newline \n tab \t nul \u{0} emoji 😀 rtl שלום".into(),
        },
        EventKind::ToolCallStarted {
            call_id: "call_1".into(),
            tool: "calculator".into(),
        },
        EventKind::ToolCallDelta {
            call_id: "call_1".into(),
            delta: "{\"expr".into(),
        },
        EventKind::ToolCallReady(Box::new(ToolReady {
            call_id: "call_1".into(),
            tool: "calculator".into(),
            args: json!({"expression": "6*7"}),
        })),
        EventKind::ToolResult(Box::new(ToolReturn {
            call_id: "call_1".into(),
            tool: "calculator".into(),
            output: json!(42),
            cached: true,
            display: false,
            duration_us: 9,
        })),
        EventKind::ToolError(Box::new(ToolFault {
            call_id: "call_2".into(),
            tool: "search".into(),
            error: ToolFailure {
                kind: "not_found".into(),
                message: "no such tool".into(),
                details: json!({"choices": ["a", "b"]}),
            },
        })),
    ]
    .into_iter()
    .chain(call_ends_and_run_ends())
    .collect()
}

/// The second half of [`every_kind`]: model calls ending, thinking, custom
/// data, node and run ends, checkpoints and a kind from a newer build.
fn call_ends_and_run_ends() -> Vec<EventKind> {
    let patch = Patch::new()
        .set("zeta", 1)
        .set("alpha", json!({"nested": [1, 2.5, null, true]}));
    vec![
        EventKind::LlmFinished(Box::new(LlmFinish {
            call: 0,
            output: LlmOutput {
                text: "42".into(),
                reasoning: "because".into(),
                tool_calls: vec![ToolCallRecord {
                    id: "call_1".into(),
                    name: "calculator".into(),
                    arguments: "{not json".into(),
                }],
                finish_reason: "tool_calls".into(),
            },
            usage: Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                ..Default::default()
            },
            duration_us: 1500,
        })),
        EventKind::LlmFailed(Box::new(LlmFailure {
            call: 1,
            error: "rate limited".into(),
            usage: Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
                cached_tokens: 0,
                reasoning_tokens: 0,
                cache_write_tokens: 0,
                cost_nano_usd: 0,
            },
        })),
        EventKind::Thinking {
            text: "Looking things up…".into(),
        },
        EventKind::Custom(Box::new(CustomData {
            name: "sources".into(),
            data: json!([{"url": "https://example.com/ü", "title": "Ü"}]),
            id: None,
            transient: false,
        })),
        EventKind::NodeFinished {
            patch,
            duration_us: 77,
        },
        EventKind::NodeFailed {
            attempts: 3,
            error: "boom".into(),
        },
        EventKind::CheckpointSaved { checkpoint: 1 },
        EventKind::Unknown,
        EventKind::RunFailed {
            error: ErrorInfo {
                code: "node_failed".into(),
                message: "boom".into(),
            },
        },
        EventKind::RunCancelled {
            reason: "stop requested".into(),
        },
        EventKind::RunFinished {
            steps: 3,
            usage: Usage {
                prompt_tokens: 1,
                completion_tokens: 2,
                ..Default::default()
            },
        },
    ]
}

pub(super) async fn large_unicode_and_every_kind_of_event_round_trip(store: Arc<dyn Store>) {
    let id = Uuid::now_v7();
    let mut events: Vec<Arc<Event>> = every_kind()
        .into_iter()
        .enumerate()
        .map(|(i, k)| event(id, i as u64 + 1, 1, k))
        .collect();
    let big: String = "héllo wörld ✓ 🚀 ".repeat(6_000);
    assert!(big.len() > 100_000);
    let n = events.len() as u64;
    events.push(event(
        id,
        n + 1,
        2,
        EventKind::TextDelta {
            call: 0,
            delta: big.clone(),
        },
    ));
    events.push(Arc::new(Event {
        node: Some("узел/子ノード".into()),
        ..(*event(
            id,
            n + 2,
            2,
            EventKind::Custom(Box::new(CustomData {
                name: "blob".into(),
                data: json!({"text": big, "list": vec![1; 5000]}),
                id: None,
                transient: false,
            })),
        ))
        .clone()
    }));
    store.append(&batch(id, 1, events.clone())).await.unwrap();
    let back = all_events(&*store, id).await;
    assert_eq!(back.len(), events.len());
    for (got, want) in back.iter().zip(&events) {
        assert_eq!(got, &**want, "event {} round-trips", want.seq);
    }
    // Patches inside events keep their field order.
    let Some(EventKind::NodeFinished { patch, .. }) = back
        .iter()
        .map(|e| &e.event)
        .find(|k| matches!(k, EventKind::NodeFinished { .. }))
    else {
        panic!("no node_finished event")
    };
    assert_eq!(
        patch.iter().map(|(f, _)| f.to_owned()).collect::<Vec<_>>(),
        ["zeta", "alpha"]
    );
}

pub(super) async fn concurrent_appends_to_different_runs_all_land(store: Arc<dyn Store>) {
    let runs: Vec<RunRecord> = (0..24)
        .map(|i| run(Some(&format!("c{}", i % 3)), i))
        .collect();
    for r in &runs {
        store.create_run(r.clone()).await.unwrap();
    }
    let tasks: Vec<_> = runs
        .iter()
        .map(|r| {
            let (store, id) = (Arc::clone(&store), r.id);
            tokio::spawn(async move {
                for step in 0..8u32 {
                    let events = (1..=25)
                        .map(|i| text(id, u64::from(step) * 25 + i, step))
                        .collect();
                    store.append(&batch(id, step, events)).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    for r in &runs {
        let events = all_events(&*store, r.id).await;
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=200).collect::<Vec<_>>()
        );
        assert!(events.iter().all(|e| e.run_id == r.id));
        let stored = store.get_run(r.id).await.unwrap().unwrap();
        assert_eq!((stored.last_seq, stored.last_step), (200, 7));
        assert_eq!(store.checkpoints(r.id, u32::MAX).await.unwrap().len(), 8);
    }
    store.ping().await.unwrap();
    assert!(["memory", "sqlite", "postgres"].contains(&store.backend()));
}

/// Events stored as they stream (before their step's checkpoint), then the
/// checkpoint alone: the log reads as if the step had been appended whole,
/// and a repeated event is a conflict that stores nothing.
pub(super) async fn events_stored_ahead_of_their_checkpoint_read_as_one_log(store: Arc<dyn Store>) {
    let r = run(Some("c1"), 1);
    store.create_run(r.clone()).await.unwrap();
    store
        .append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
        .await
        .unwrap();
    let streamed: Vec<_> = (2..=4).map(|s| text(r.id, s, 1)).collect();
    store.append_events(r.id, &streamed[..2]).await.unwrap();
    store.append_events(r.id, &streamed[2..]).await.unwrap();
    assert_eq!(store.get_run(r.id).await.unwrap().unwrap().last_seq, 4);
    assert!(matches!(
        store.append_events(r.id, &streamed[2..]).await,
        Err(StoreError::Conflict(_))
    ));
    store.append(&batch(r.id, 1, Vec::new())).await.unwrap();
    let events = all_events(&*store, r.id).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(events[1..], owned(&streamed)[..]);
    let cps = store.checkpoints(r.id, 10).await.unwrap();
    assert_eq!(cps.iter().map(|c| c.step).collect::<Vec<_>>(), [0, 1]);
    let rec = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!((rec.last_seq, rec.last_step), (4, 1));
}

/// `last_seq` of `run` as `get_run` and `list_runs` (filtered) report it.
async fn reported_last_seq(store: &dyn Store, run: Uuid) -> [u64; 2] {
    let got = store.get_run(run).await.unwrap().unwrap();
    let listed = store
        .list_runs(&RunQuery::newest(10).of_chat("c1"))
        .await
        .unwrap();
    let listed = listed.iter().find(|r| r.id == run).unwrap();
    [got.last_seq, listed.last_seq]
}

/// Streamed events (no checkpoint, one append per token as the server's
/// pump writes them) advance a running run's `last_seq` exactly as every
/// read reports it — `get_run`, `list_runs`, `claim_orphans` — and as the
/// notification does, also for a page stored out of order; and it stays
/// exact when the run ends by its final batch or by `finish_run`.
pub(super) async fn streamed_events_advance_the_runs_last_seq_everywhere(store: Arc<dyn Store>) {
    let mut rx = store.subscribe();
    let r = run(Some("c1"), 1);
    store.create_run(r.clone()).await.unwrap();
    store
        .append(&batch(r.id, 0, vec![text(r.id, 1, 0)]))
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, (r.id, 1));
    for seq in 2..=6 {
        store
            .append_events(r.id, &[text(r.id, seq, 1)])
            .await
            .unwrap();
        assert_eq!(next(&mut rx).await, (r.id, seq));
        assert_eq!(reported_last_seq(&*store, r.id).await, [seq; 2]);
    }
    // 9..=10 ahead of 7..=8: the later append still reports the highest.
    let (late, early): (Vec<_>, Vec<_>) = (
        (9..=10).map(|s| text(r.id, s, 1)).collect(),
        (7..=8).map(|s| text(r.id, s, 1)).collect(),
    );
    store.append_events(r.id, &late).await.unwrap();
    assert_eq!(next(&mut rx).await, (r.id, 10));
    store.append_events(r.id, &early).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        (r.id, 10),
        "the run's highest stored seq, not the page's"
    );
    assert_eq!(reported_last_seq(&*store, r.id).await, [10; 2]);
    let claimed = store.claim_orphans("me", 100, 500, 10).await.unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|c| (c.id, c.last_seq))
            .collect::<Vec<_>>(),
        [(r.id, 10)],
        "recovery resumes after the streamed events"
    );

    // A checkpoint without events, then the final batch without events.
    store.append(&batch(r.id, 1, Vec::new())).await.unwrap();
    assert_eq!(next(&mut rx).await, (r.id, 10));
    let mut last = batch(r.id, 2, Vec::new());
    last.status = RunStatus::Finished;
    store.append(&last).await.unwrap();
    assert_eq!(next(&mut rx).await, (r.id, 10));
    let done = store.get_run(r.id).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.last_seq, done.last_step),
        (RunStatus::Finished, 10, 2)
    );
    assert_eq!(store.lease(r.id).await.unwrap(), None);

    // A run ended by `finish_run` (a turn's end) after streamed events.
    let f = run(Some("c1"), 2);
    store.create_run(f.clone()).await.unwrap();
    store
        .append(&batch(f.id, 0, vec![text(f.id, 1, 0)]))
        .await
        .unwrap();
    let streamed: Vec<_> = (2..=4).map(|s| text(f.id, s, 1)).collect();
    store.append_events(f.id, &streamed).await.unwrap();
    store
        .finish_run(f.id, RunStatus::Cancelled, None, Usage::default())
        .await
        .unwrap();
    assert_eq!(reported_last_seq(&*store, f.id).await, [4; 2]);
    assert_eq!(
        store.get_run(f.id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
}

/// Many runs' streamed events appended at once (SQLite commits them as one
/// group): each lands, and a page that repeats a stored seq fails alone.
pub(super) async fn concurrent_event_appends_land_and_a_conflict_fails_alone(
    store: Arc<dyn Store>,
) {
    let runs: Vec<_> = (0..20u64).map(|i| run(None, i)).collect();
    for r in &runs {
        store.create_run(r.clone()).await.unwrap();
        store
            .append_events(r.id, &[text(r.id, 1, 0)])
            .await
            .unwrap();
    }
    let appends = runs.iter().enumerate().map(|(i, r)| {
        let store = Arc::clone(&store);
        // Run 0 repeats its stored seq 1; the others append seq 2.
        let seq = if i == 0 { 1 } else { 2 };
        let events = vec![text(r.id, seq, 0)];
        let id = r.id;
        async move { store.append_events(id, &events).await }
    });
    let results = futures::future::join_all(appends).await;
    assert!(
        matches!(results[0], Err(StoreError::Conflict(_))),
        "{:?}",
        results[0]
    );
    for (r, res) in runs.iter().zip(&results).skip(1) {
        assert!(res.is_ok(), "{res:?}");
        let seqs: Vec<u64> = all_events(&*store, r.id)
            .await
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
    }
    assert_eq!(all_events(&*store, runs[0].id).await.len(), 1);
}
