//! Runs without a chat: `stategraph run`, API and embedding use.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::{Begin, Launch, RunHub, Runs, StartError};
use crate::events::Event;
use crate::nodes::Graph;

/// A run to start on its own.
#[derive(Debug)]
pub struct RunStart {
    /// The graph.
    pub graph: Arc<Graph>,
    /// Its input state.
    pub input: Value,
    /// Who runs it.
    pub user_id: String,
    /// A correlation id (may be empty).
    pub request_id: String,
    /// Also sends every event here as it happens.
    pub tap: Option<mpsc::Sender<Arc<Event>>>,
    /// Where it pauses between steps (checked: see [`super::breaks::check`]).
    pub breakpoints: crate::events::Breakpoints,
}

/// A started run.
#[derive(Debug)]
pub struct Started {
    /// Its id.
    pub run_id: Uuid,
    /// Its hub (wait for it, stream it, stop it).
    pub hub: Arc<RunHub>,
}

impl Runs {
    /// Stores and starts a run with no chat.
    ///
    /// # Errors
    /// The limit is reached, shutdown began, or the store failed.
    pub async fn start(self: &Arc<Self>, start: RunStart) -> Result<Started, StartError> {
        let runs = Arc::clone(self);
        self.whole(async move { runs.start_alone(start).await })
            .await
    }

    async fn start_alone(self: &Arc<Self>, start: RunStart) -> Result<Started, StartError> {
        let permit = self.permit()?;
        let run_id = Uuid::now_v7();
        let hold = self.hold(run_id)?;
        let launch = Launch {
            run_id,
            user_id: start.user_id,
            request_id: start.request_id.clone(),
            metadata: super::stream_metadata(
                &self.services,
                run_id,
                &start.request_id,
                "",
                &start.graph,
            ),
            graph: start.graph,
            chat: None,
            begin: Begin::Fresh(start.input.clone()),
            alternative: None,
            forked_from: None,
            tap: start.tap,
            hold,
            admitted: false,
            breakpoints: {
                let new = !start.breakpoints.is_empty();
                (start.breakpoints, new)
            },
        };
        let record = self.record(&launch, start.input, None, 0);
        self.store
            .create_leased_run(record, &self.instance, self.lease_until())
            .await?;
        launch.hold.leased();
        let hub = self.launch(launch, permit)?;
        Ok(Started { run_id, hub })
    }
}

impl RunHub {
    /// Waits until the run is over.
    pub async fn wait(&self) {
        let mut watch = self.watch();
        while !watch.borrow().done {
            if watch.changed().await.is_err() {
                break;
            }
        }
    }
}
