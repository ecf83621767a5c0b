//! Storing model calls as they were sent (issue 35), and expiring their
//! content.
//!
//! [`StoreRecorder`] is the [`CallRecorder`] a server or CLI run installs:
//! when a call starts it redacts the request, cuts it into parts (each
//! message, tool definition and the response format, as JSON), hashes
//! each part and hands the record and the parts to the store on a task of
//! its own — the node goes on streaming. The store keeps each part once,
//! so a chat's history, sent again with every turn, is stored once.
//!
//! ```toml
//! [calls]
//! record = true            # store each model call's request (default)
//! retention = "7d"         # keep call content this long ("0s": as long as runs)
//! [[calls.redact]]         # applied to every text before it is stored
//! pattern = "sk-[A-Za-z0-9]{20,}"
//! replace = "[redacted]"
//! ```

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::CallsConfig;
use crate::events::now_micros;
use crate::llm::{CallRecorder, CallStart, NoRedaction, Redact, RegexRedactor};
use crate::nodes::Services;
use crate::store::{CallPart, CallRecord, Store};

/// Call records being written at once; beyond, a record is dropped (with a
/// warning) rather than queued without bound behind a slow store.
const IN_FLIGHT: usize = 256;

/// Records model calls into a store (see the module docs).
pub struct StoreRecorder {
    store: Arc<dyn Store>,
    redact: Arc<dyn Redact>,
    slots: Arc<Semaphore>,
    writes: TaskTracker,
}

impl std::fmt::Debug for StoreRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreRecorder")
            .field("store", &self.store.backend())
            .field("redact", &self.redact)
            .field("writing", &self.writes.len())
            .finish()
    }
}

impl StoreRecorder {
    /// Records into `store`, through `redact`.
    pub fn new(store: Arc<dyn Store>, redact: Arc<dyn Redact>) -> Self {
        Self {
            store,
            redact,
            slots: Arc::new(Semaphore::new(IN_FLIGHT)),
            writes: TaskTracker::new(),
        }
    }

    /// Waits until the records handed over so far are written (a CLI
    /// command before it exits; tests).
    pub async fn flush(&self) {
        self.writes.close();
        self.writes.wait().await;
        self.writes.reopen();
    }
}

impl CallRecorder for StoreRecorder {
    fn record(&self, call: CallStart<'_>) {
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            tracing::warn!(run_id = %call.run_id, "too many model call records waiting to be written; this one is not recorded");
            return;
        };
        let (record, parts) = encode(&call, &*self.redact, now_micros());
        let store = Arc::clone(&self.store);
        self.writes.spawn(async move {
            if let Err(e) = store.add_call(record, parts).await {
                tracing::warn!(error = %e, "could not store a model call record");
            }
            drop(slot);
        });
    }
}

/// `services` recording their model calls into `store` as `config` says
/// (unchanged when it says not to), and the recorder.
///
/// # Errors
/// A redaction pattern is invalid.
pub(crate) fn recording(
    services: &Services,
    store: Arc<dyn Store>,
    config: &CallsConfig,
    redact: Option<Arc<dyn Redact>>,
) -> Result<(Services, Option<Arc<StoreRecorder>>), String> {
    if !config.record {
        return Ok((services.clone(), None));
    }
    let redact: Arc<dyn Redact> = match redact {
        Some(r) => r,
        None if config.redact.is_empty() => Arc::new(NoRedaction),
        None => Arc::new(RegexRedactor::new(&config.redact)?),
    };
    let recorder = Arc::new(StoreRecorder::new(store, redact));
    let mut s = services.clone();
    s.calls = Some(Arc::clone(&recorder) as Arc<dyn CallRecorder>);
    Ok((s, Some(recorder)))
}

/// The record of `call` and its parts: every string of the request
/// redacted, each part JSON text under its xxh3-128 hash.
pub(crate) fn encode(
    call: &CallStart<'_>,
    redact: &dyn Redact,
    at: u64,
) -> (CallRecord, Vec<CallPart>) {
    let r = call.request;
    let mut parts = Vec::with_capacity(r.messages.len() + r.tools.len() + 1);
    let mut redactions = 0u64;
    let mut put = |mut v: Value| {
        redactions += scrub(&mut v, redact);
        let body = v.to_string();
        let hash = hash_of(&body);
        parts.push(CallPart {
            hash: hash.clone(),
            body,
        });
        hash
    };
    // The messages as a chain of links `{prev, message}` ending at `tail`:
    // a call that repeats an earlier call's conversation and adds a turn
    // shares every link of it, so a record stays the same size however
    // long the chat grows (a list of hashes would grow with it).
    let mut tail = String::new();
    for m in &r.messages {
        let message = put(json!(m));
        tail = put(json!({ "prev": tail, "message": message }));
    }
    let tools: Vec<String> = r.tools.iter().map(|t| put(json!(t))).collect();
    let format = r.response_format.as_ref().map(|f| put(json!(f)));
    let request = json!({
        "node": call.node,
        "step": call.step,
        "task": call.task,
        "call": call.call,
        "role": call.role,
        "model": call.model,
        "endpoint": call.endpoint,
        "messages": { "tail": tail, "count": r.messages.len() },
        "tools": tools,
        "tool_names": r.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
        "response_format": format,
        "response_format_name": r.response_format.as_ref().map(|f| &f.name),
        "settings": {
            "temperature": r.temperature,
            "max_tokens": r.max_tokens,
            "stop": r.stop,
            "reasoning_effort": r.reasoning_effort,
        },
        "redactions": redactions,
    });
    let record = CallRecord {
        run_id: call.run_id,
        seq: call.seq,
        created_at: at,
        expired: false,
        request,
    };
    (record, parts)
}

/// 32 hex digits of xxh3-128 (a part's address).
pub fn hash_of(body: &str) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(body.as_bytes()))
}

/// Redacts every string in `v`; how many changed.
fn scrub(v: &mut Value, redact: &dyn Redact) -> u64 {
    match v {
        Value::String(s) => match redact.redact(s) {
            std::borrow::Cow::Owned(clean) => {
                *s = clean;
                1
            }
            std::borrow::Cow::Borrowed(_) => 0,
        },
        Value::Array(items) => items.iter_mut().map(|i| scrub(i, redact)).sum(),
        Value::Object(map) => map.values_mut().map(|i| scrub(i, redact)).sum(),
        _ => 0,
    }
}

/// Expires call content older than `retention` now and then (every
/// quarter of it, at most hourly), until `shutdown`. Nothing for a zero
/// retention (content lives as long as its run).
pub(crate) fn spawn_expiry(
    store: Arc<dyn Store>,
    retention: Duration,
    shutdown: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if retention.is_zero() {
        return None;
    }
    let every = (retention / 4).clamp(Duration::from_millis(100), Duration::from_secs(3600));
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => break,
            }
            let before = now_micros().saturating_sub(retention.as_micros() as u64);
            match store.expire_calls(before).await {
                Ok(r) if r.calls + r.parts > 0 => {
                    tracing::info!(
                        calls = r.calls,
                        parts = r.parts,
                        "model call content expired"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not expire model call content"),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::HashSet;

    use super::*;
    use crate::llm::{ChatMessage, ChatRequest};

    /// An embedding's own redaction (the trait, not the config rules).
    #[derive(Debug)]
    struct Card;

    impl Redact for Card {
        fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
            if text.contains("4111") {
                Cow::Owned(text.replace("4111 1111 1111 1111", "<card>"))
            } else {
                Cow::Borrowed(text)
            }
        }
    }

    fn start(request: &ChatRequest) -> CallStart<'_> {
        CallStart {
            run_id: uuid::Uuid::nil(),
            seq: 3,
            step: 1,
            node: "talk",
            task: 0,
            call: 0,
            role: "chat",
            model: "m",
            endpoint: "e",
            request,
        }
    }

    #[test]
    fn a_longer_conversation_shares_every_part_of_the_shorter_and_secrets_never_reach_a_part() {
        let user = |c: &str| ChatMessage::User { content: c.into() };
        let mut request = ChatRequest {
            messages: vec![
                ChatMessage::System {
                    content: "Be brief.".into(),
                },
                user("pay with 4111 1111 1111 1111"),
            ],
            ..ChatRequest::default()
        };
        let (first, first_parts) = encode(&start(&request), &Card, 10);
        assert_eq!(first.request["redactions"], 1);
        assert_eq!(first.request["messages"]["count"], 2);
        assert!(first_parts.iter().all(|p| !p.body.contains("4111")));
        assert!(
            first_parts
                .iter()
                .any(|p| p.body.contains("pay with <card>"))
        );
        request.messages.push(ChatMessage::Assistant {
            content: "Done.".into(),
            tool_calls: Vec::new(),
        });
        request.messages.push(user("thanks"));
        let (second, second_parts) = encode(&start(&request), &Card, 20);
        let old: HashSet<&str> = first_parts.iter().map(|p| p.hash.as_str()).collect();
        let new: Vec<&CallPart> = second_parts
            .iter()
            .filter(|p| !old.contains(p.hash.as_str()))
            .collect();
        // Two new messages and two new links: nothing of the first call's
        // conversation is new.
        assert_eq!(new.len(), 4, "{new:?}");
        assert_ne!(
            first.request["messages"]["tail"],
            second.request["messages"]["tail"]
        );
        assert!(second_parts.iter().all(|p| p.hash == hash_of(&p.body)));
    }
}
