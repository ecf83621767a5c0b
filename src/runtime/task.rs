//! Running one task: attempts, retry with backoff, timeout.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventKind, NodeEvents};
use crate::graph::CompiledNode;
use crate::graph::prompts::Prompts;
use crate::nodes::{Node, NodeContext, NodeError, Services, SubgraphRunner};
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

/// Runs a task until it succeeds, fails for good or runs out of attempts.
/// Returns the `node_finished` event, whose patch the step applies.
pub(super) async fn run_task(
    node: &CompiledNode<Arc<dyn Node>>,
    env: TaskEnv<'_>,
    events: NodeEvents,
    item: Option<&Value>,
    first_of_node: bool,
) -> Result<Arc<Event>, NodeError> {
    if let Some(status) = &node.status
        && first_of_node
    {
        let extra: Vec<(&str, minijinja::Value)> = item
            .map(|i| vec![("item", crate::graph::expr::from_json(i))])
            .unwrap_or_default();
        match status.eval(env.state, &extra) {
            Ok(serde_json::Value::String(text)) if !text.is_empty() => events.stage(text).await,
            Ok(_) => {}
            Err(e) => tracing::warn!(node = %events.node(), error = %e, "status failed to render"),
        }
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
        let cx = NodeContext {
            state: env.state,
            item,
            events: &events,
            services: env.services,
            prompts: env.prompts,
            attempt,
            cancel: env.cancel,
            subgraphs: env.subgraphs,
        };
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
            Err(e) if e.is_transient() && attempt < node.retry.attempts => {
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
            Err(e) => {
                let _ = events
                    .emit(EventKind::NodeFailed {
                        attempts: attempt,
                        error: e.to_string(),
                    })
                    .await;
                return Err(e);
            }
        }
    }
}
