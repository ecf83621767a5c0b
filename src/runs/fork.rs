//! Forks: a new run from a step of another, with an edit — after a node
//! (routed again from the edit) or before one (run again on edited input);
//! see [`crate::replay::fork_point`].
//!
//! The fork is a run like any other — counted against the concurrency
//! limit, stoppable, drained at shutdown, recovered after a crash — whose
//! record names its parent, the step, the mode, the node(s) and the edit.
//! It is detached from any chat unless asked to attach: then its answer,
//! once it finishes, is stored as an alternative of the parent's assistant
//! message (in that message's `metadata.alternatives`), which a front end
//! can show next to the original and switch to.

use std::sync::Arc;

use uuid::Uuid;

use super::{Alternative, Begin, Launch, RunHub, Runs, StartError};
use crate::events::ForkOrigin;
use crate::replay::{self, Edit, EditError, ReplayError};
use crate::store::{RunRecord, StoreError};

/// A fork to start.
#[derive(Debug, Clone)]
pub struct ForkRequest {
    /// The run forked.
    pub parent: RunRecord,
    /// Who asks (the fork's user).
    pub user_id: String,
    /// The step, the node and the edit.
    pub edit: Edit,
    /// Attach the fork's answer to the parent's chat as an alternative of
    /// its assistant message.
    pub attach: bool,
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
    /// The step, node or edit was refused.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The recording cannot be forked (its state no longer fits the graph).
    #[error("{0}")]
    Invalid(String),
    /// `attach` was asked of a run with no chat message to attach to.
    #[error("{0}")]
    NotAttachable(String),
    /// The run could not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl ForkError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ForkError::UnknownGraph(_) => "unknown_graph",
            ForkError::Edit(e) => e.code(),
            ForkError::Invalid(_) => "invalid_fork",
            ForkError::NotAttachable(_) => "not_attachable",
            ForkError::Start(_) => "unavailable",
        }
    }
}

impl From<ReplayError> for ForkError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Store(s) => ForkError::Start(StartError::Store(s)),
            ReplayError::Edit(e) => ForkError::Edit(e),
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
    /// Starts a fork: checks the edit, then runs from the fork point.
    ///
    /// # Errors
    /// The graph is gone, the edit is refused, the fork cannot attach, or
    /// the run could not start; nothing was written then.
    pub async fn fork(self: &Arc<Self>, req: ForkRequest) -> Result<ForkStarted, ForkError> {
        let runs = Arc::clone(self);
        self.whole(async move { runs.start_fork(req).await }).await
    }

    async fn start_fork(self: &Arc<Self>, req: ForkRequest) -> Result<ForkStarted, ForkError> {
        let graph = self
            .graphs
            .get(&req.parent.graph)
            .ok_or_else(|| ForkError::UnknownGraph(req.parent.graph.clone()))?;
        let point = replay::fork_point(&*self.store, &graph, req.parent.id, &req.edit).await?;
        let run_id = Uuid::now_v7();
        let alternative = if req.attach {
            Some(self.attachable(&req.parent, run_id).await?)
        } else {
            None
        };
        let permit = self.permit()?;
        let hold = self.hold(run_id)?;
        let mut origin = point.origin;
        origin.alternative_of = alternative.as_ref().map(|a| a.of.clone());
        let from = point.resume;
        let step = from.step;
        let input = from.state.to_json();
        let chat_id = alternative.as_ref().map_or("", |a| a.chat_id.as_str());
        let launch = Launch {
            run_id,
            user_id: req.user_id,
            request_id: req.request_id.clone(),
            metadata: super::stream_metadata(
                &self.services,
                run_id,
                &req.request_id,
                chat_id,
                &graph,
            ),
            graph,
            chat: None,
            alternative,
            begin: Begin::Resumed {
                from,
                history: Vec::new(),
            },
            forked_from: Some(origin.clone()),
            tap: None,
            hold,
            admitted: false,
            breakpoints: Default::default(),
        };
        let record = self.record(&launch, input, Some(origin.clone()), step);
        self.store
            .create_leased_run(record, &self.instance, self.lease_until())
            .await?;
        launch.hold.leased();
        let hub = self.launch(launch, permit)?;
        Ok(ForkStarted {
            run_id,
            hub,
            origin,
        })
    }

    /// Where a fork of `parent` attaches: its chat's assistant message.
    async fn attachable(&self, parent: &RunRecord, run_id: Uuid) -> Result<Alternative, ForkError> {
        let (Some(chat_id), Some(of)) = (&parent.chat_id, &parent.message_id) else {
            return Err(ForkError::NotAttachable(format!(
                "run {} answered no chat; only a chat turn's fork can attach",
                parent.id
            )));
        };
        // The parent may itself be an attached fork: attach to the message
        // it is an alternative of.
        let of = parent
            .parent
            .as_ref()
            .and_then(|p| p.alternative_of.clone())
            .unwrap_or_else(|| of.clone());
        let messages = self.store.messages(chat_id).await?;
        if !messages.iter().any(|m| m.id == of && m.role == "assistant") {
            return Err(ForkError::NotAttachable(format!(
                "chat `{chat_id}` no longer has the assistant message `{of}` of run {}",
                parent.id
            )));
        }
        Ok(Alternative {
            chat_id: chat_id.clone(),
            of,
            id: super::turn::answer_message_id(run_id, None),
        })
    }
}
