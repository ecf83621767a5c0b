//! Running one task: attempts, retry with backoff, timeout.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Services;
use crate::events::{Event, EventKind, NodeEvents};
use crate::graph::CompiledNode;
use crate::graph::prompts::Prompts;
use crate::nodes::{NodeContext, NodeError};
use crate::state::DynState;

/// Everything a task needs besides its node.
#[derive(Clone, Copy)]
pub(super) struct TaskEnv<'a> {
    pub state: &'a dyn DynState,
    pub services: &'a Services,
    pub prompts: &'a Prompts,
    pub cancel: &'a CancellationToken,
}

/// Runs a task until it succeeds, fails for good or runs out of attempts.
/// Returns the `node_finished` event, whose patch the step applies.
pub(super) async fn run_task(
    node: &CompiledNode,
    env: TaskEnv<'_>,
    events: NodeEvents,
    item: Option<&Value>,
) -> Result<Arc<Event>, NodeError> {
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
            fallback_model: node.fallback_model.as_ref(),
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
