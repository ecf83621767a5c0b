//! The event → UI message stream bridge on real runs of the chat graph,
//! checked with the AI SDK's own parser.

use std::sync::Arc;

use serde_json::{Value, json};
use stategraph::internals::events::{Event, EventKind};
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmError};
use stategraph::internals::runtime::{self, RunOptions};
use stategraph::internals::sse::{self, Assembler, Bridge, BridgeConfig, Chunk};
use tokio::sync::mpsc;

use crate::support::{aisdk_validate, report_json, services, shipped_catalog};

fn responder(fail_narrator: bool) -> ScriptedModel {
    ScriptedModel::from_fn(move |req: &ChatRequest| {
        let system = match req.messages.first() {
            Some(ChatMessage::System { content }) => content.clone(),
            _ => String::new(),
        };
        if req
            .response_format
            .as_ref()
            .is_some_and(|f| f.name == "intent_classification")
        {
            return Turn::json(
                json!({"intent": "RESEARCH", "reasoning": "needs data", "missing_slots": [], "detected_language": "en"}),
            );
        }
        if req
            .response_format
            .as_ref()
            .is_some_and(|f| f.name == "followups")
        {
            return Turn::json(json!({"questions": ["Why?", "How?"]}));
        }
        if !req.tools.is_empty()
            && !req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }))
        {
            return Turn::tool("calculator", json!({"expression": "2+2"}));
        }
        if system.contains("You write the answer") {
            if fail_narrator {
                return Turn::Fail(LlmError::Http {
                    status: 400,
                    message: "bad request".into(),
                });
            }
            return Turn::text("The answer is **4**, as computed.");
        }
        Turn::text("found: 4")
    })
}

pub(crate) async fn chat_events(fail_narrator: bool) -> Vec<Event> {
    let cat = shipped_catalog();
    let graph = Arc::clone(cat.get("chat").unwrap());
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(64);
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some(e) = rx.recv().await {
            v.push((*e).clone());
        }
        v
    });
    let input = json!({"messages": [{"id": "u1", "role": "user", "content": "what is 2+2?"}], "query": "what is 2+2?"});
    let _ = runtime::run(
        graph,
        services(Arc::new(responder(fail_narrator))),
        input,
        RunOptions {
            events: Some(tx),
            ..Default::default()
        },
    )
    .await;
    collect.await.unwrap()
}

fn config() -> BridgeConfig {
    let cat = shipped_catalog();
    BridgeConfig::for_graph(
        cat.get("chat").unwrap(),
        "msg-1".into(),
        json!({"runId": "run-1"}),
    )
}

#[tokio::test]
async fn a_research_run_streams_a_valid_ui_message() {
    let events = chat_events(false).await;
    let text = sse::render(config(), &events, 0);
    let (ok, report) = aisdk_validate(&text);
    assert!(ok, "{report}\n{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    // The answer node streams text; the research node's work is in the thinking panel.
    assert!(text.contains(r#""type":"text-delta""#));
    assert!(text.contains(r#""type":"data-thinking""#) && text.contains(r#""node":"research""#));
    assert!(text.contains(r#""type":"data-followups""#));
    assert!(text.contains(r#""type":"data-usage""#));
    // assistant-ui iterates `metadata.steps` as its steps (@assistant-ui/ai-sdk,
    // convertMessage.ts THREAD_METADATA_KEYS): ours is `stepCount`.
    let finish = text
        .lines()
        .find(|l| l.contains(r#""type":"finish""#))
        .expect("a finish chunk");
    let finish: Value = serde_json::from_str(finish.trim_start_matches("data: ")).unwrap();
    assert!(
        finish["messageMetadata"]["stepCount"].as_u64().unwrap() > 0,
        "{finish}"
    );
    assert_eq!(finish["messageMetadata"].get("steps"), None, "{finish}");
    assert!(
        !text.contains(r#""type":"tool-input-start""#),
        "the research node is a thinking surface: its tools show in the panel"
    );
    let report = report_json(&report);
    let parts = report["message"]["parts"]
        .as_array()
        .expect("assembled message");
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "The answer is **4**, as computed.");
}

#[tokio::test]
async fn a_failing_run_ends_with_one_error_then_finish_and_done() {
    let events = chat_events(true).await;
    assert!(matches!(
        events.last().unwrap().event,
        EventKind::RunFailed { .. }
    ));
    let text = sse::render(config(), &events, 0);
    let (ok, report) = aisdk_validate(&text);
    assert!(ok, "{report}\n{text}");
    let tail: Vec<&str> = text.trim_end().rsplit("\n\n").take(3).collect();
    assert_eq!(tail[0], "data: [DONE]");
    assert!(
        tail[1].ends_with(
            r#"{"type":"finish","finishReason":"error","messageMetadata":{"node":"narrator","reference":"run-1"}}"#
        ),
        "{tail:?}"
    );
    assert_eq!(text.matches(r#""type":"error""#).count(), 1);
    assert!(
        text.contains("reference run-1") && !text.contains("bad request"),
        "no internals in the error chunk"
    );
}

#[tokio::test]
async fn resuming_after_any_event_gives_exactly_the_rest() {
    let events = chat_events(false).await;
    let full = sse::render(config(), &events, 0);
    let frames: Vec<&str> = full.split_inclusive("\n\n").collect();
    let id = |f: &str| {
        f.split('\n')
            .next()
            .and_then(|l| l.strip_prefix("id: "))
            .map(str::to_owned)
    };
    // After a whole event: the chunks of later events (an id `SEQ.N` is
    // chunk N of event SEQ).
    for cut in [
        1u64,
        5,
        17,
        events.len() as u64 / 2,
        events.len() as u64 - 1,
    ] {
        let rest = sse::render(config(), &events, cut);
        let expected: String = frames
            .iter()
            .filter(|f| {
                f.starts_with("data: [DONE]")
                    || id(f)
                        .and_then(|n| n.split('.').next()?.parse::<u64>().ok())
                        .is_some_and(|n| n > cut)
            })
            .copied()
            .collect();
        assert_eq!(rest, expected, "resume after {cut}");
    }
    // After any chunk's id (issue 31: `text-start` and the first
    // `text-delta` come from one event): exactly the frames after it.
    let mut seen = std::collections::HashSet::new();
    for (i, f) in frames.iter().enumerate() {
        let Some(id) = id(f) else { continue };
        assert!(seen.insert(id.clone()), "id {id} is sent twice");
        let after = sse::After::parse(&id).unwrap();
        let rest = sse::render(config(), &events, after);
        assert_eq!(rest, frames[i + 1..].concat(), "resume after {id}");
    }
}

#[tokio::test]
async fn the_assembled_message_matches_what_the_client_builds() {
    let events = chat_events(false).await;
    let mut bridge = Bridge::new(config());
    let mut asm = Assembler::new();
    let mut chunks = Vec::new();
    for e in &events {
        chunks.clear();
        bridge.on_event(e, &mut chunks);
        chunks.iter().for_each(|c| asm.push(c));
    }
    assert_eq!(asm.message_id(), Some("msg-1"));
    let text: String = asm
        .parts()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "The answer is **4**, as computed.");
    assert!(
        asm.parts().iter().all(|p| p["state"] != "streaming"),
        "every part is closed"
    );
    let thinking: Vec<&Value> = asm
        .parts()
        .iter()
        .filter(|p| p["type"] == "data-thinking")
        .collect();
    assert!(thinking.iter().any(|p| {
        p["data"]["node"] == "router"
            && p["data"]["text"]
                .as_str()
                .unwrap()
                .starts_with("Intent: RESEARCH")
    }));
    let research = thinking
        .iter()
        .find(|p| p["data"]["node"] == "research")
        .unwrap();
    assert_eq!(research["data"]["status"], "done");
    assert_eq!(
        research["data"]["toolCalls"][0]["state"],
        "output-available"
    );
    assert_eq!(research["data"]["toolCalls"][0]["output"]["result"], 4);
    assert_eq!(asm.metadata()["finishReason"], "stop");
    // And it is exactly what the AI SDK's own client assembles.
    let (ok, report) = aisdk_validate(&sse::render(config(), &events, 0));
    assert!(ok);
    assert_eq!(
        Value::Array(asm.parts().to_vec()),
        report_json(&report)["message"]["parts"]
    );
    let _ = Chunk::StartStep;
}

/// A graph whose answer is computed (a `set` node, no model) still shows
/// it: the `chat.answer` field's final value becomes one text part.
#[tokio::test]
async fn a_computed_answer_is_sent_as_text() {
    const GRAPH: &str = "
state:
  fields:
    query: { type: string }
    answer: { type: string }
entry: reply
nodes:
  - id: reply
    kind: set
    set:
      answer: \"{{ 'You wrote: ' ~ query }}\"
edges:
  - reply -> END
";
    let reg = crate::support::registries();
    let prompts = stategraph::internals::graph::prompts::Prompts::from_sources(
        std::path::Path::new("prompts"),
        [],
    );
    let cat = reg.from_sources(&[("echo", GRAPH)], prompts);
    let graph = Arc::clone(
        cat.get("echo")
            .unwrap_or_else(|| panic!("{:?}", cat.diagnostics)),
    );
    let (tx, mut rx) = mpsc::channel::<Arc<Event>>(64);
    let opts = RunOptions {
        events: Some(tx),
        ..Default::default()
    };
    let model = Arc::new(ScriptedModel::new(Vec::<Turn>::new()));
    let run = tokio::spawn(runtime::run(
        Arc::clone(&graph),
        services(model),
        json!({"query": "hi there"}),
        opts,
    ));
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push((*e).clone());
    }
    run.await.unwrap().unwrap();
    let cfg = BridgeConfig::for_graph(&graph, "msg-1".into(), json!({}));
    let text = sse::render(cfg.clone(), &events, 0);
    let (ok, report) = aisdk_validate(&text);
    assert!(ok, "{report}\n{text}");
    let parts = &report_json(&report)["message"]["parts"];
    let texts: Vec<&Value> = parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .collect();
    assert_eq!(texts.len(), 1, "{parts}");
    assert_eq!(texts[0]["text"], "You wrote: hi there");
    // Recorded and restored with the run, so replays send it too.
    let restored = BridgeConfig::from_json(&cfg.to_json()).unwrap();
    assert_eq!(sse::render(restored, &events, 0), text);
}
