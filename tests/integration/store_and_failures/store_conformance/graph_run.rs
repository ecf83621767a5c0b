//! A real graph run checkpointed through `LogCheckpointer` into each store,
//! also with appends failing on the way (lost replies, a short outage).

use super::flaky::{Fault, Flaky};
use super::*;

/// Saves every batch to the store and to memory.
struct Tee(LogCheckpointer, Arc<MemoryCheckpointer>);

impl Checkpointer for Tee {
    fn save(&self, batch: StepBatch) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(async move {
            self.1.save(batch.clone()).await?;
            self.0.save(batch).await
        })
    }
}

pub(super) async fn a_real_graph_run_checkpoints_through_the_store(store: Arc<dyn Store>) {
    graph_run(Arc::clone(&store), store).await;
}

pub(super) async fn a_real_graph_run_survives_lost_replies_and_outages(store: Arc<dyn Store>) {
    let flaky = Flaky::new(Arc::clone(&store));
    flaky.inject([
        Fault::Pass,
        Fault::ReplyLost,
        Fault::Unavailable,
        Fault::Unavailable,
        Fault::Pass,
        Fault::ReplyLost,
        Fault::ReplyLost,
    ]);
    graph_run(flaky.clone(), store).await;
    assert!(
        flaky.attempts() > 7,
        "the faults were met: {} appends",
        flaky.attempts()
    );
}

/// Runs the chat graph checkpointing through `checkpoints` (the store, or a
/// wrapper around it) and checks what `store` holds afterwards.
async fn graph_run(checkpoints: Arc<dyn Store>, store: Arc<dyn Store>) {
    use stategraph::internals::llm::ChatMessage;
    use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
    let model = ScriptedModel::from_fn(|req| {
        let system = match req.messages.first() {
            Some(ChatMessage::System { content }) => content.as_str(),
            _ => "",
        };
        let used_tool = req
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::Tool { .. }));
        if system.contains("You classify the user's latest message") {
            Turn::json(
                json!({"intent": "RESEARCH", "reasoning": "facts", "missing_slots": [], "detected_language": "en"}),
            )
        } else if system.contains("You suggest follow-up questions") {
            Turn::json(json!({"questions": ["Why 42?", "Und 43?", "Is 41 close?"]}))
        } else if system.contains("research the user's question")
            && !req.tools.is_empty()
            && !used_tool
        {
            Turn::tool("calculator", json!({"expression": "6*7"}))
        } else {
            Turn::text("The answer is 42 — «quarante-deux» ✓ 四十二.")
        }
    });
    // Only the chat graph: other shipped graphs are not this suite's concern.
    let root = crate::support::root();
    let catalog = crate::support::registries()
        .load_files(&[root.join("graphs/chat.yaml")], &root.join("prompts"));
    assert!(!catalog.has_errors(), "{:#?}", catalog.diagnostics);
    let graph = Arc::clone(catalog.get("chat").unwrap());
    let memory = Arc::new(MemoryCheckpointer::new());
    let opts = RunOptions {
        checkpointer: Some(Arc::new(Tee(
            LogCheckpointer::new(checkpoints),
            Arc::clone(&memory),
        ))),
        snapshot_every: 2,
        ..Default::default()
    };
    let run_id = opts.run_id;
    store
        .create_run(RunRecord {
            id: run_id,
            ..run(Some("c1"), 1)
        })
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(e) = rx.recv().await {
            all.push(e);
        }
        all
    });
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "What is 6×7?"}], "query": "What is 6×7?"});
    let out = runtime::run(
        graph.clone(),
        crate::support::services(Arc::new(model)),
        input,
        RunOptions {
            events: Some(tx),
            ..opts
        },
    )
    .await
    .unwrap();
    let live = collector.await.unwrap();
    assert!(
        live.len() > 20,
        "a real run emits many events ({})",
        live.len()
    );
    assert!(
        live.iter()
            .any(|e| matches!(e.event, EventKind::ToolResult(_)))
    );

    let stored = all_events(&*store, run_id).await;
    assert_eq!(
        stored,
        owned(&live),
        "the stored log is exactly what was streamed"
    );
    let record = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.last_seq, record.last_step),
        (RunStatus::Finished, live.len() as u64, out.steps)
    );

    let batches: Vec<StepBatch> = store
        .checkpoints(run_id, u32::MAX)
        .await
        .unwrap()
        .iter()
        .map(|c| c.to_batch(run_id))
        .collect();
    for step in 0..=out.steps {
        let from_store = rebuild_state(&batches, &graph.state, step)
            .unwrap()
            .to_json();
        let from_memory = memory
            .state_at(run_id, &graph.state, step)
            .unwrap()
            .to_json();
        assert_eq!(from_store, from_memory, "state after step {step}");
    }
    assert_eq!(
        rebuild_state(&batches, &graph.state, out.steps)
            .unwrap()
            .to_json(),
        out.state.to_json()
    );
}
