//! Forks: a new run from a checkpoint of another, with edited state.
//!
//! The fork is a run like any other — counted against the concurrency
//! limit, stoppable, drained at shutdown, recovered after a crash — whose
//! record names its parent and the step it started from.

use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use super::{Begin, Launch, RunHub, Runs, StartError};
use crate::events::ForkOrigin;
use crate::replay::{self, ReplayError};
use crate::store::{RunRecord, StoreError};

/// A fork to start.
#[derive(Debug, Clone)]
pub struct ForkRequest {
    /// The run forked.
    pub parent: RunRecord,
    /// Who asks (the fork's user).
    pub user_id: String,
    /// The checkpoint step it starts from.
    pub at: u32,
    /// Fields to replace, checked against their types.
    pub set: Vec<(String, Value)>,
    /// The request's correlation id.
    pub request_id: String,
}

/// A started fork.
#[derive(Debug)]
pub struct ForkStarted {
    /// The new run.
    pub run_id: Uuid,
    /// Its hub (stream it, stop it).
    pub hub: Arc<RunHub>,
    /// Where it came from.
    pub origin: ForkOrigin,
}

/// Why a fork did not start.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The parent's graph is no longer served.
    #[error("graph `{0}` is no longer served")]
    UnknownGraph(String),
    /// The step or the edit is invalid (no checkpoint, unknown field, wrong
    /// type).
    #[error("{0}")]
    Invalid(String),
    /// The run could not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl From<ReplayError> for ForkError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Store(s) => ForkError::Start(StartError::Store(s)),
            other => ForkError::Invalid(other.to_string()),
        }
    }
}

impl From<StoreError> for ForkError {
    fn from(e: StoreError) -> Self {
        ForkError::Start(StartError::Store(e))
    }
}

impl Runs {
    /// Starts a fork (detached from any chat).
    ///
    /// # Errors
    /// The graph is gone, the edit is invalid, or the run could not start;
    /// nothing was written then.
    pub async fn fork(self: &Arc<Self>, req: ForkRequest) -> Result<ForkStarted, ForkError> {
        let graph = self
            .graphs
            .get(&req.parent.graph)
            .ok_or_else(|| ForkError::UnknownGraph(req.parent.graph.clone()))?;
        let from =
            replay::fork_point(&*self.store, &graph, req.parent.id, req.at, &req.set).await?;
        let permit = self.permit()?;
        let run_id = Uuid::now_v7();
        let origin = replay::origin(req.parent.id, req.at);
        let input = from.state.to_json();
        let launch = Launch {
            run_id,
            user_id: req.user_id,
            request_id: req.request_id.clone(),
            metadata: super::stream_metadata(&self.services, run_id, &req.request_id, "", &graph),
            graph,
            chat: None,
            begin: Begin::Resumed {
                from,
                history: Vec::new(),
            },
            forked_from: Some(origin.clone()),
            tap: None,
        };
        let record = self.record(&launch, input, Some(origin.clone()), req.at);
        self.store
            .create_leased_run(record, &self.instance, self.lease_until())
            .await?;
        let hub = self.launch(launch, permit)?;
        Ok(ForkStarted {
            run_id,
            hub,
            origin,
        })
    }
}
