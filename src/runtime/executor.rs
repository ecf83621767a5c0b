//! The superstep loop.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

mod pauses;

use super::breaks::Breaks;
use super::routing::{Scratch, Task, join_progress, joins_of, pending, route, tasks_of};
use super::task::{TaskEnv, run_task};
use super::{
    CheckpointError, Checkpointer, Durability, PendingTask, RunError, RunOptions, RunOutcome,
    RunStatus, SNAPSHOT_FACTOR, Services, StepBatch, TaskWrite, input_state, json_weight,
};
use crate::events::{EVENT_FORMAT, Event, EventKind, EventSink, Frontier, NodeEvents};
use crate::graph::NodeIdx;
use crate::nodes::{Graph, NodeContext, NodeError, SubgraphRunner};
use crate::state::{DynState, TaskPatch, apply_step};
use pauses::record_breakpoints;

/// How many recent steps the recursion-limit error looks at.
const TRAIL: usize = 64;

/// Where a run continues from: a checkpoint's state and frontier.
#[derive(Debug)]
pub struct Resume {
    /// State after `step`.
    pub state: Box<dyn DynState>,
    /// The last completed step.
    pub step: u32,
    /// Tasks of the next step.
    pub next: Vec<PendingTask>,
    /// Per join, sources that have arrived.
    pub joins: Vec<Vec<String>>,
    /// Last event seq already in the log.
    pub last_seq: u64,
}

/// The run's sink: numbering after `last_seq` and after the events
/// `opts.logged` holds, which are replayed silently.
fn sink_for(opts: &RunOptions, last_seq: u64, keep: bool) -> EventSink {
    let last = opts.logged.last().map_or(0, |e| e.seq).max(last_seq);
    EventSink::new(opts.run_id, opts.events.clone(), last, keep)
        .with_logged(opts.logged.iter().cloned())
        .with_usage(opts.spent_before)
}

/// Runs `graph` on `input` until END, failure or cancellation.
///
/// # Errors
/// The run failed or was cancelled; the failure was emitted as
/// `run_failed` / `run_cancelled`.
pub async fn run(
    graph: Arc<Graph>,
    services: Arc<Services>,
    input: impl Into<Arc<Value>>,
    opts: RunOptions,
) -> Result<RunOutcome, RunError> {
    let input: Arc<Value> = input.into();
    let keep = opts.checkpointer.is_some();
    let sink = Arc::new(sink_for(&opts, 0, keep));
    let state = match input_state(&graph, &input) {
        Ok(s) => s,
        Err(e) => {
            sink.emit(0, None, 0, EventKind::RunFailed { error: e.info() })
                .await;
            return Err(e);
        }
    };
    sink.emit(
        0,
        None,
        0,
        EventKind::RunStarted(Box::new(crate::events::RunStart {
            graph: graph.id.to_string(),
            graph_version: graph.version.clone(),
            input,
            format: EVENT_FORMAT,
            forked_from: opts.forked_from.clone(),
            frontier: None,
            stream: opts.stream.clone(),
            user: services.user.as_deref().map(str::to_owned),
        })),
    )
    .await;
    record_breakpoints(&sink, &opts, 0).await;
    let tasks = graph
        .entry
        .iter()
        .map(|&n| Task {
            node: n,
            item: None,
            order: (n, 0),
        })
        .collect();
    let mut exec = Exec::new(
        &graph,
        &services,
        sink,
        &opts.cancel,
        String::new(),
        state,
        tasks,
        opts.checkpointer.clone(),
        opts.snapshot_every,
    );
    exec.durability = opts.durability;
    exec.breaks = Breaks::new(opts.breakpoints.clone(), false, false);
    exec.checkpoint(Vec::new(), true)
        .await
        .map_err(RunError::Checkpoint)?;
    let result = exec_result(&mut exec).await;
    exec.finish(result, opts.run_id).await
}

/// Continues a run from a checkpoint (crash recovery, forks).
///
/// A fork starts here, and so does a run started at given nodes of an
/// empty thread (the LangGraph API's `goto` or state edit with no run
/// before it: `opts.forked_from` is then `None`): with nothing of the run
/// logged yet (`from.last_seq` 0), it emits `run_started` (the state as its
/// input, the frontier it starts from) and stores that as its first
/// checkpoint (step `from.step`, a snapshot) before the first step, so the
/// run can itself be replayed, re-executed, recovered and forked.
///
/// # Errors
/// As [`run`]; also a frontier naming nodes the graph no longer has.
pub async fn resume(
    graph: Arc<Graph>,
    services: Arc<Services>,
    from: Resume,
    opts: RunOptions,
) -> Result<RunOutcome, RunError> {
    let keep = opts.checkpointer.is_some();
    let sink = Arc::new(sink_for(&opts, from.last_seq, keep));
    let tasks = tasks_of(&graph, &from.next)?;
    // A paused run continuing: the answers are recorded as part of the step
    // they continue (so a crash during it finds them in that step's log)
    // and given to the nodes.
    let services = match &opts.answers {
        Some(answers) => {
            sink.emit(
                from.step + 1,
                None,
                0,
                EventKind::RunResumed {
                    answers: answers.clone(),
                },
            )
            .await;
            let mut s = (*services).clone();
            s.answers = Some(Arc::new(answers.clone()));
            Arc::new(s)
        }
        None => services,
    };
    record_breakpoints(&sink, &opts, from.step + 1).await;
    let starts_fork = from.last_seq == 0;
    if starts_fork {
        sink.emit(
            from.step,
            None,
            0,
            EventKind::RunStarted(Box::new(crate::events::RunStart {
                graph: graph.id.to_string(),
                graph_version: graph.version.clone(),
                input: Arc::new(from.state.to_json()),
                format: EVENT_FORMAT,
                forked_from: opts.forked_from.clone(),
                frontier: Some(Frontier {
                    step: from.step,
                    next: from.next.clone(),
                    joins: from.joins.clone(),
                }),
                stream: opts.stream.clone(),
                user: services.user.as_deref().map(str::to_owned),
            })),
        )
        .await;
    }
    let mut exec = Exec::new(
        &graph,
        &services,
        sink,
        &opts.cancel,
        String::new(),
        from.state,
        tasks,
        opts.checkpointer.clone(),
        opts.snapshot_every,
    );
    exec.durability = opts.durability;
    exec.breaks = Breaks::new(opts.breakpoints.clone(), opts.answers.is_some(), false);
    exec.step = from.step;
    exec.joins = joins_of(&graph, &from.joins);
    if starts_fork {
        exec.checkpoint(Vec::new(), true)
            .await
            .map_err(RunError::Checkpoint)?;
        exec.store_deferred().await.map_err(RunError::Checkpoint)?;
    }
    let result = exec_result(&mut exec).await;
    exec.finish(result, opts.run_id).await
}

/// Runs a graph inside a node (a subgraph): events go to the parent's sink
/// under `prefix/node` names; no run events, no checkpoints.
///
/// # Errors
/// As [`run`].
pub(crate) async fn run_nested(
    graph: Arc<Graph>,
    services: &Services,
    state: Box<dyn DynState>,
    sink: Arc<EventSink>,
    prefix: &str,
    cancel: &CancellationToken,
) -> Result<Box<dyn DynState>, RunError> {
    let tasks = graph
        .entry
        .iter()
        .map(|&n| Task {
            node: n,
            item: None,
            order: (n, 0),
        })
        .collect();
    let mut exec = Exec::new(
        &graph,
        services,
        sink,
        cancel,
        format!("{prefix}/"),
        state,
        tasks,
        None,
        0,
    );
    exec_result(&mut exec).await?;
    Ok(exec.state)
}

/// Runs subgraph nodes' graphs: the executor's side of
/// [`SubgraphRunner`].
struct Nested;

impl SubgraphRunner for Nested {
    fn run_subgraph<'a>(
        &'a self,
        graph: Arc<Graph>,
        state: Box<dyn DynState>,
        cx: &'a NodeContext<'a>,
    ) -> futures::future::BoxFuture<'a, Result<Box<dyn DynState>, String>> {
        Box::pin(async move {
            let prefix = cx.events.node().to_string();
            run_nested(
                graph,
                cx.services,
                state,
                Arc::clone(cx.events.sink()),
                &prefix,
                cx.cancel,
            )
            .await
            .map_err(|e| e.to_string())
        })
    }
}

async fn exec_result(exec: &mut Exec<'_>) -> Result<(), RunError> {
    while !exec.tasks.is_empty() {
        exec.step().await?;
    }
    exec.at_end().await
}

struct Exec<'a> {
    graph: &'a Graph,
    services: &'a Services,
    sink: Arc<EventSink>,
    cancel: &'a CancellationToken,
    /// Node names as they appear in events.
    names: Vec<Arc<str>>,
    state: Box<dyn DynState>,
    step: u32,
    tasks: Vec<Task>,
    /// Per join, per source: arrived since the join last fired.
    joins: Vec<Vec<bool>>,
    trail: VecDeque<(NodeIdx, u32)>,
    checkpointer: Option<Arc<dyn Checkpointer>>,
    durability: Durability,
    /// The step being saved in the background (async durability).
    in_flight: Option<(u32, tokio::task::JoinHandle<Result<(), CheckpointError>>)>,
    snapshot_every: u32,
    /// Weight of the last snapshot, and of the patches written since it
    /// (the snapshot rule of the checkpoint module).
    snapshot_weight: usize,
    weight_since: usize,
    /// The last step's writes when it led to END: they travel in the final
    /// batch with `run_finished`, one write instead of two.
    last_writes: Option<Vec<TaskWrite>>,
    /// The input checkpoint (step 0, with `run_started`), stored together
    /// with the first superstep's batch rather than on its own: one write
    /// less per run. Nothing is lost by waiting: until then the run's only
    /// stored progress would be its input, which the run record holds, and
    /// a run that dies before its first checkpoint is restarted from that
    /// input (what resuming from step 0 would do).
    deferred: Option<StepBatch>,
    /// Scratch space of the routing.
    scratch: Scratch,
    /// The previous step's task list, kept for its allocation.
    spare: Vec<Task>,
    /// Breakpoints (`breaks`).
    breaks: Breaks,
    /// The state was edited at a breakpoint: the next stored batch carries
    /// a snapshot (an edit replaces fields, which no write can express).
    edited: bool,
}

impl<'a> Exec<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        graph: &'a Graph,
        services: &'a Services,
        sink: Arc<EventSink>,
        cancel: &'a CancellationToken,
        prefix: String,
        state: Box<dyn DynState>,
        tasks: Vec<Task>,
        checkpointer: Option<Arc<dyn Checkpointer>>,
        snapshot_every: u32,
    ) -> Self {
        let names = graph
            .nodes
            .iter()
            .map(|n| {
                if prefix.is_empty() {
                    Arc::clone(&n.id)
                } else {
                    Arc::from(format!("{prefix}{}", n.id))
                }
            })
            .collect();
        Self {
            graph,
            services,
            sink,
            cancel,
            names,
            state,
            step: 0,
            tasks,
            joins: graph
                .joins
                .iter()
                .map(|j| vec![false; j.sources.len()])
                .collect(),
            trail: VecDeque::new(),
            checkpointer,
            durability: Durability::Sync,
            in_flight: None,
            snapshot_every: snapshot_every.max(1),
            snapshot_weight: 0,
            weight_since: 0,
            last_writes: None,
            deferred: None,
            scratch: Scratch::new(graph),
            spare: Vec::new(),
            breaks: Breaks::new(None, false, !prefix.is_empty()),
            edited: false,
        }
    }

    async fn step(&mut self) -> Result<(), RunError> {
        self.step += 1;
        if self.trail.len() == TRAIL {
            self.trail.pop_front();
        }
        // The trail keeps the first node of each step and how many ran.
        self.trail.push_back((
            self.tasks.first().map_or(0, |t| t.node),
            self.tasks.len() as u32,
        ));
        if self.step > self.graph.recursion_limit {
            return Err(RunError::RecursionLimit {
                limit: self.graph.recursion_limit,
                path: self.looping_path(),
            });
        }
        self.at_breakpoint()?;
        let finished = self.run_tasks().await?;
        let any_writes = finished.iter().any(
            |ev| matches!(&ev.event, EventKind::NodeFinished { patch, .. } if !patch.is_empty()),
        );
        let writes = if any_writes {
            self.apply(&finished)?
        } else {
            Vec::new()
        };
        drop(finished);
        self.route()?;
        if self.tasks.is_empty() && self.checkpointer.is_some() {
            // END: this step is stored with the run's final batch.
            self.last_writes = Some(writes);
            return Ok(());
        }
        self.checkpoint(writes, false)
            .await
            .map_err(RunError::Checkpoint)?;
        Ok(())
    }

    /// Applies the step's patches; returns them for the checkpoint.
    fn apply(&mut self, finished: &[Arc<Event>]) -> Result<Vec<TaskWrite>, RunError> {
        let labels: Vec<Cow<'_, str>> = self
            .tasks
            .iter()
            .map(|t| match t.order.1 {
                0 => Cow::Borrowed(&*self.graph.nodes[t.node as usize].id),
                k => Cow::Owned(format!(
                    "{}[{}]",
                    self.graph.nodes[t.node as usize].id,
                    k - 1
                )),
            })
            .collect();
        let mut patches: Vec<TaskPatch<'_>> = Vec::with_capacity(finished.len());
        for (i, ev) in finished.iter().enumerate() {
            if let EventKind::NodeFinished { patch, .. } = &ev.event
                && !patch.is_empty()
            {
                let t = &self.tasks[i];
                patches.push(TaskPatch {
                    order: t.order,
                    label: &labels[i],
                    writes: &self.graph.nodes[t.node as usize].writes,
                    patch,
                });
            }
        }
        apply_step(&mut *self.state, &mut patches).map_err(RunError::State)?;
        Ok(if self.checkpointer.is_some() {
            patches
                .iter()
                .map(|p| TaskWrite {
                    node: p.label.to_owned(),
                    task: p.order.1,
                    patch: p.patch.clone(),
                })
                .collect()
        } else {
            Vec::new()
        })
    }

    /// Runs the current tasks; returns their `node_finished` events in task order.
    async fn run_tasks(&self) -> Result<Vec<Arc<Event>>, RunError> {
        let env = TaskEnv {
            state: &*self.state,
            services: self.services,
            prompts: &self.graph.prompts,
            cancel: self.cancel,
            subgraphs: &Nested,
        };
        let task_future = |i: usize| {
            let t = &self.tasks[i];
            let node = &self.graph.nodes[t.node as usize];
            let events = NodeEvents::new(
                Arc::clone(&self.sink),
                self.step,
                Arc::clone(&self.names[t.node as usize]),
                i as u32,
            );
            // Progress once per node and step, not per map task.
            let first = i == 0 || self.tasks[i - 1].node != t.node;
            async move { (i, run_task(node, env, events, t.item.as_ref(), first).await) }
        };
        let fail = |i: usize, e| RunError::Node {
            node: self.names[self.tasks[i].node as usize].to_string(),
            source: e,
        };
        if self.tasks.len() == 1 {
            return tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Err(RunError::Cancelled),
                (i, r) = task_future(0) => match r {
                    Ok(ev) => Ok(vec![ev]),
                    Err(NodeError::Interrupted(asks)) => Err(RunError::Interrupted(asks)),
                    Err(e) => Err(fail(i, e)),
                },
            };
        }
        let mut running: FuturesUnordered<_> = (0..self.tasks.len()).map(task_future).collect();
        let mut done: Vec<Option<Arc<Event>>> = vec![None; self.tasks.len()];
        // A task that waits for a person does not stop the others: what
        // they do is logged, and served from the log when the step runs
        // again after the answers.
        let mut waiting = Vec::new();
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(RunError::Cancelled),
                next = running.next() => match next {
                    Some((i, Ok(ev))) => done[i] = Some(ev),
                    Some((_, Err(NodeError::Interrupted(mut asks)))) => waiting.append(&mut asks),
                    Some((i, Err(e))) => return Err(fail(i, e)),
                    None => break,
                },
            }
        }
        if !waiting.is_empty() {
            return Err(RunError::Interrupted(waiting));
        }
        Ok(done.into_iter().flatten().collect())
    }

    /// Evaluates the finished tasks' transitions into the next step's tasks
    /// (replacing `self.tasks`).
    fn route(&mut self) -> Result<(), RunError> {
        std::mem::swap(&mut self.tasks, &mut self.spare);
        self.breaks.ran(self.spare.iter().map(|t| t.node));
        let names = &self.names;
        let result = route(
            self.graph,
            &*self.state,
            |n| Cow::Borrowed(&*names[n as usize]),
            &self.spare,
            &mut self.joins,
            &mut self.scratch,
            &mut self.tasks,
        );
        self.spare.clear();
        result
    }

    /// Stores the deferred input checkpoint now rather than with the first
    /// step's (a fork's start, which a recovery must find).
    async fn store_deferred(&mut self) -> Result<(), CheckpointError> {
        if let (Some(cp), Some(batch)) = (self.checkpointer.clone(), self.deferred.take()) {
            let step = batch.step;
            cp.save_steps(vec![batch]).await?;
            self.sink
                .emit(
                    step,
                    None,
                    0,
                    EventKind::CheckpointSaved { checkpoint: step },
                )
                .await;
        }
        Ok(())
    }

    /// Waits for the step being saved in the background, then says so.
    async fn settle(&mut self) -> Result<(), CheckpointError> {
        if let Some((step, handle)) = self.in_flight.take() {
            handle
                .await
                .map_err(|e| CheckpointError(format!("checkpoint task failed: {e}")))??;
            self.sink
                .emit(
                    step,
                    None,
                    0,
                    EventKind::CheckpointSaved { checkpoint: step },
                )
                .await;
        }
        Ok(())
    }

    /// Hands the step to the checkpointer (if any): waits for the write
    /// (sync durability) or starts it in the background after the previous
    /// one has landed (async durability: at most one step behind).
    async fn checkpoint(
        &mut self,
        writes: Vec<TaskWrite>,
        initial: bool,
    ) -> Result<(), CheckpointError> {
        let Some(cp) = self.checkpointer.clone() else {
            return Ok(());
        };
        let forced = initial || std::mem::take(&mut self.edited);
        let snapshot = self.snapshot_for(
            &writes,
            initial || self.step.is_multiple_of(self.snapshot_every),
            forced,
        );
        let batch = StepBatch {
            run_id: self.sink.run_id(),
            step: self.step,
            writes,
            events: self.sink.take_pending(),
            next: self.pending(),
            joins: self.join_progress(),
            snapshot,
            status: RunStatus::Running,
        };
        if initial {
            self.deferred = Some(batch);
            return Ok(());
        }
        let batches = self.with_deferred(batch);
        if self.durability == Durability::Sync {
            self.settle().await?;
            cp.save_steps(batches).await?;
            self.sink
                .emit(
                    self.step,
                    None,
                    0,
                    EventKind::CheckpointSaved {
                        checkpoint: self.step,
                    },
                )
                .await;
        } else {
            self.settle().await?;
            self.in_flight = Some((
                self.step,
                tokio::spawn(async move { cp.save_steps(batches).await }),
            ));
        }
        Ok(())
    }

    /// `batch`, after the input checkpoint if that is still waiting for
    /// its ride (see [`Exec::deferred`]). Every batch after the input is of
    /// step 1 or later: a graph always has an entry node, so a run ends in
    /// a superstep, never at step 0.
    ///
    /// A pause in the first step stores step 0 itself: the input checkpoint's
    /// events then ride in that batch, which replaces it.
    fn with_deferred(&mut self, mut batch: StepBatch) -> Vec<StepBatch> {
        match self.deferred.take() {
            Some(mut first) if first.step == batch.step => {
                first.events.append(&mut batch.events);
                batch.events = first.events;
                vec![batch]
            }
            first => {
                debug_assert!(first.as_ref().is_none_or(|f| f.step < batch.step));
                first.into_iter().chain([batch]).collect()
            }
        }
    }

    /// The snapshot for a batch with `writes`, if the snapshot rule takes
    /// one: `forced`, or at a `candidate` step when the patches since the
    /// last snapshot weigh [`SNAPSHOT_FACTOR`] times as much as it.
    fn snapshot_for(
        &mut self,
        writes: &[TaskWrite],
        candidate: bool,
        forced: bool,
    ) -> Option<Value> {
        self.weight_since += writes
            .iter()
            .flat_map(|w| w.patch.iter())
            .map(|(field, value)| field.len() + 4 + json_weight(value))
            .sum::<usize>();
        let outweighed = self.weight_since >= SNAPSHOT_FACTOR * self.snapshot_weight;
        if !(forced || candidate && outweighed) {
            return None;
        }
        let snapshot = self.state.to_json();
        self.snapshot_weight = json_weight(&snapshot);
        self.weight_since = 0;
        Some(snapshot)
    }

    fn pending(&self) -> Vec<PendingTask> {
        pending(self.graph, &self.tasks)
    }

    fn join_progress(&self) -> Vec<Vec<String>> {
        join_progress(self.graph, &self.joins)
    }

    /// Emits the run's last event, stores the final batch and returns the outcome.
    async fn finish(
        &mut self,
        result: Result<(), RunError>,
        run_id: uuid::Uuid,
    ) -> Result<RunOutcome, RunError> {
        let event = match &result {
            Ok(()) => EventKind::RunFinished {
                steps: self.step,
                usage: self.sink.usage(),
            },
            Err(RunError::Cancelled) => EventKind::RunCancelled {
                reason: "cancelled".into(),
            },
            Err(RunError::Interrupted(asks)) => EventKind::RunInterrupted {
                interrupts: asks.clone(),
            },
            Err(e) => EventKind::RunFailed { error: e.info() },
        };
        let settled = self.settle().await;
        let (result, event) = match (result, settled) {
            (Ok(()), Err(e)) => {
                let e = RunError::Checkpoint(e);
                let event = EventKind::RunFailed { error: e.info() };
                (Err(e), event)
            }
            (result, _) => (result, event),
        };
        let status = match &result {
            Ok(()) => RunStatus::Finished,
            Err(RunError::Cancelled) => RunStatus::Cancelled,
            Err(RunError::Interrupted(_)) => RunStatus::Interrupted,
            Err(_) => RunStatus::Failed,
        };
        self.sink.emit(self.step, None, 0, event).await;
        if let Some(cp) = self.checkpointer.clone() {
            let batch = self.final_batch(status, run_id);
            let batches = self.with_deferred(batch);
            if let Err(e) = cp.save_steps(batches).await {
                tracing::error!(run_id = %run_id, error = %e, "could not store the final batch");
                if result.is_ok() {
                    return Err(RunError::Checkpoint(e));
                }
            }
        }
        result?;
        let state = std::mem::replace(&mut self.state, self.graph.state.default_state());
        Ok(RunOutcome {
            run_id,
            state,
            steps: self.step,
            usage: self.sink.usage(),
        })
    }

    /// The run's last batch: its last step's writes (when it reached END)
    /// or the whole state, its last events and how it ended.
    fn final_batch(&mut self, status: RunStatus, run_id: uuid::Uuid) -> StepBatch {
        // With the last step's writes the weight rule decides; without
        // them this batch replaces a stored step's writes with none, so it
        // must carry the whole state.
        let (writes, snapshot) = match self.last_writes.take() {
            Some(writes) => {
                let forced = std::mem::take(&mut self.edited);
                let snapshot = self.snapshot_for(&writes, true, forced);
                (writes, snapshot)
            }
            None => (Vec::new(), Some(self.state.to_json())),
        };
        // A pause stores the state before the step it stopped in, with that
        // step's tasks next: the step runs again, under the same number,
        // when the run continues (so its log matches).
        let step = if status == RunStatus::Interrupted {
            self.step.saturating_sub(1)
        } else {
            self.step
        };
        StepBatch {
            run_id,
            step,
            writes,
            events: self.sink.take_pending(),
            next: if status == RunStatus::Finished {
                Vec::new()
            } else {
                self.pending()
            },
            joins: self.join_progress(),
            snapshot,
            status,
        }
    }

    /// The repeating part of the recent path, e.g. `a → b → c → a`.
    fn looping_path(&self) -> String {
        let label = |&(first, count): &(NodeIdx, u32)| -> String {
            let id = &*self.graph.nodes[first as usize].id;
            if count > 1 {
                format!("{id}+{} more", count - 1)
            } else {
                id.to_owned()
            }
        };
        let steps: Vec<String> = self.trail.iter().map(label).collect();
        let len = steps.len();
        for period in 1..=len / 2 {
            if (0..period).all(|i| steps[len - 1 - i] == steps[len - 1 - i - period]) {
                let cycle = &steps[len - period..];
                return cycle
                    .iter()
                    .chain(std::iter::once(&cycle[0]))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" → ");
            }
        }
        steps[len.saturating_sub(12)..].join(" → ")
    }
}
