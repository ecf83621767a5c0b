//! Running one task: attempts, retry with backoff, timeout, and — when the
//! last attempt fails — the node's own recovery (`on_error`).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::events::{CustomData, Event, EventKind, NodeEvents};
use crate::graph::CompiledNode;
use crate::graph::prompts::Prompts;
use crate::graph::spec::Surface;
use crate::nodes::{Failure, Node, NodeContext, NodeError, Recovery, Services, SubgraphRunner};
use crate::state::DynState;

/// Everything a task needs besides its node.
#[derive(Clone, Copy)]
pub(super) struct TaskEnv<'a> {
    pub state: &'a dyn DynState,
    pub services: &'a Services,
    pub prompts: &'a Prompts,
    pub cancel: &'a CancellationToken,
    pub subgraphs: &'a dyn SubgraphRunner,
}

impl<'a> TaskEnv<'a> {
    /// What the node's `run` (or `recover`) gets on `attempt`.
    fn context(
        &self,
        events: &'a NodeEvents,
        item: Option<&'a Value>,
        attempt: u32,
    ) -> NodeContext<'a> {
        NodeContext {
            state: self.state,
            item,
            events,
            services: self.services,
            prompts: self.prompts,
            attempt,
            cancel: self.cancel,
            subgraphs: self.subgraphs,
        }
    }
}

/// Runs a task until it succeeds, fails for good or runs out of attempts.
/// Returns the `node_finished` event, whose patch the step applies.
pub(super) async fn run_task(
    node: &CompiledNode<Arc<dyn Node>>,
    env: TaskEnv<'_>,
    events: NodeEvents,
    item: Option<&Value>,
    first_of_node: bool,
) -> Result<Arc<Event>, NodeError> {
    if first_of_node {
        show_status(node, env.state, &events, item).await;
    }
    let mut attempt = 1;
    loop {
        let _ = events
            .emit(EventKind::NodeStarted {
                attempt,
                item: item.cloned(),
            })
            .await;
        let started = Instant::now();
        events.take_streamed();
        let cx = env.context(&events, item, attempt);
        let result = match node.timeout {
            Some(limit) => match tokio::time::timeout(limit, node.imp.run(cx)).await {
                Ok(r) => r,
                Err(_) => Err(NodeError::Timeout(limit)),
            },
            None => node.imp.run(cx).await,
        };
        match result {
            Ok(patch) => {
                let duration_us = started.elapsed().as_micros() as u64;
                return Ok(events
                    .emit(EventKind::NodeFinished { patch, duration_us })
                    .await);
            }
            // An attempt that already streamed answer text is not
            // repeated: the user has read that text, and a second attempt
            // would write it again after it. The node's recovery decides.
            // Text that went to the thinking panel or nowhere was never
            // the answer: the attempt is repeated like any other.
            Err(e)
                if e.is_transient()
                    && attempt < node.retry.attempts
                    && !(node.surface == Surface::Answer && events.has_streamed()) =>
            {
                let delay = node.retry.delay(attempt);
                let _ = events
                    .emit(EventKind::NodeRetrying {
                        attempt,
                        error: e.to_string(),
                        delay_ms: delay.as_millis() as u64,
                    })
                    .await;
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            // Waiting for a person is not a failure: no retry, no recovery.
            Err(e @ NodeError::Interrupted(_)) => return Err(e),
            Err(e) => {
                let cx = env.context(&events, item, attempt);
                return failed_for_good(node, cx, e, started).await;
            }
        }
    }
}

/// The node's `status` line, shown once per node and step (a render error
/// is logged, never fatal).
async fn show_status(
    node: &CompiledNode<Arc<dyn Node>>,
    state: &dyn DynState,
    events: &NodeEvents,
    item: Option<&Value>,
) {
    let Some(status) = &node.status else {
        return;
    };
    let extra: Vec<(&str, minijinja::Value)> = item
        .map(|i| vec![("item", crate::graph::expr::from_json(i))])
        .unwrap_or_default();
    match status.eval(state, &extra) {
        Ok(serde_json::Value::String(text)) if !text.is_empty() => events.stage(text).await,
        Ok(_) => {}
        Err(e) => tracing::warn!(node = %events.node(), error = %e, "status failed to render"),
    }
}

/// The last attempt failed: the node's recovery (`on_error`) decides, or
/// `node_failed` is emitted and the error returned.
async fn failed_for_good(
    node: &CompiledNode<Arc<dyn Node>>,
    cx: NodeContext<'_>,
    e: NodeError,
    started: Instant,
) -> Result<Arc<Event>, NodeError> {
    let events = cx.events;
    let attempts = cx.attempt;
    let streamed = events.take_streamed();
    let failure = Failure {
        node: events.node(),
        error: &e,
        streamed: &streamed,
        shown: node.surface == Surface::Answer,
    };
    if let Some(recovery) = node.imp.recover(cx, failure).await {
        return Ok(recovered(events, recovery, started).await);
    }
    let _ = events
        .emit(EventKind::NodeFailed {
            attempts,
            error: e.to_string(),
        })
        .await;
    Err(e)
}

/// A failed node that recovered: its note, a `truncated` data part when an
/// answer was cut short, then `node_finished` with what it writes.
async fn recovered(events: &NodeEvents, r: Recovery, started: Instant) -> Arc<Event> {
    events.thinking(r.note).await;
    if let Some(message) = r.refused {
        let _ = events
            .emit(EventKind::Custom(Box::new(CustomData {
                name: crate::events::REFUSAL.into(),
                data: serde_json::json!({ "node": &**events.node(), "message": message }),
                id: None,
                transient: false,
            })))
            .await;
    }
    if let Some(reason) = r.truncated {
        let _ = events
            .emit(EventKind::Custom(Box::new(CustomData {
                name: crate::events::TRUNCATED.into(),
                data: serde_json::json!({ "node": &**events.node(), "reason": reason }),
                id: None,
                transient: false,
            })))
            .await;
    }
    let duration_us = started.elapsed().as_micros() as u64;
    events
        .emit(EventKind::NodeFinished {
            patch: r.patch,
            duration_us,
        })
        .await
}
