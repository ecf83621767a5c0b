//! `multitask_strategy: "enqueue"`: a run asked for on a busy thread is
//! created `pending` and answered at once, as LangGraph's server does; it
//! starts when the runs before it on the thread have started and the
//! thread is free, in the order they were asked for.
//!
//! Why an in-process queue keyed by a reserved run id, not a queued run
//! record in the store: a run record is the run — every reader of runs
//! (the runs list, the studio, replay, re-execution, recovery after a
//! restart) takes one as a run that started, with its events and
//! checkpoints, and the store's `begin_turn` is what makes a chat busy.
//! A queued run has none of that yet, and its input is only known when it
//! starts (the thread's state then, with the request's input written
//! over it). So the queue holds the request and the id given out for it;
//! the run is started under that id (`ChatTurn::run_id`) and from then on
//! is an ordinary run. Until then the LangGraph API alone shows it: `GET
//! …/runs` and `…/runs/{rid}` as `pending`, its stream, `wait` and `join`
//! wait for it to start, and cancelling it takes it off the queue (it is
//! then `interrupted`, remembered by this process).
//!
//! The queue is this process's: queued runs are lost when it stops, and
//! two instances behind one store each keep their own order.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::watch;
use uuid::Uuid;

use super::super::auth::User;
use super::super::error::ApiError;
use super::super::{AppState, RequestId};
use super::start::{self, RunBody};
use super::{assistants, ids, iso};
use crate::runtime::RunStatus;
use crate::server::Code;

/// Queued runs given up (cancelled, or refused when their turn came)
/// remembered for `GET …/runs/{rid}`, at most.
const GONE_KEPT: usize = 1000;

/// Where a queued run is.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Status {
    /// Waiting for its turn.
    Pending,
    /// Started: from now on an ordinary run, in the store.
    Started,
    /// Cancelled before it started.
    Cancelled,
    /// Its turn came and it could not start (why).
    Failed(String),
}

/// A run waiting for its thread.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) run_id: Uuid,
    pub(super) thread_id: String,
    pub(super) user_id: String,
    pub(super) graph: String,
    created_at: u64,
    status: watch::Sender<Status>,
}

impl Queued {
    /// Its status as it changes.
    pub(super) fn watch(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// As the API shows a run.
    pub(super) fn json(&self) -> Value {
        let status = match *self.status.borrow() {
            Status::Pending => "pending",
            Status::Started => "running",
            Status::Cancelled | Status::Failed(_) => "interrupted",
        };
        json!({
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": ids::assistant_id(&self.graph),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.created_at),
            "status": status,
            "metadata": {"graph_id": self.graph},
            "kwargs": {},
            "multitask_strategy": "enqueue",
        })
    }
}

/// The queued runs of every thread (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    threads: Mutex<HashMap<String, VecDeque<Arc<Queued>>>>,
    /// Bumped whenever a run leaves a queue: the next may go.
    moved: watch::Sender<u64>,
    gone: Mutex<VecDeque<Arc<Queued>>>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Arc<Queued>>>> {
        self.threads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The thread's queued runs, oldest first.
    pub(super) fn of_thread(&self, tid: &str) -> Vec<Arc<Queued>> {
        self.lock()
            .get(tid)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The queued (or given up) run `rid` of `user` on thread `tid`.
    pub(super) fn find(&self, user: &User, tid: &str, rid: Uuid) -> Option<Arc<Queued>> {
        let queued = self.lock().get(tid).and_then(|q| {
            q.iter()
                .find(|r| r.run_id == rid && r.user_id == user.0)
                .cloned()
        });
        queued.or_else(|| {
            self.gone
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .find(|r| r.run_id == rid && r.thread_id == tid && r.user_id == user.0)
                .cloned()
        })
    }

    fn is_front(&self, q: &Queued) -> bool {
        self.lock()
            .get(&q.thread_id)
            .and_then(|l| l.front())
            .is_some_and(|f| f.run_id == q.run_id)
    }

    /// Takes `q` off its thread's queue, as `status`.
    fn leave(&self, q: &Arc<Queued>, status: Status) {
        {
            let mut threads = self.lock();
            if let Some(list) = threads.get_mut(&q.thread_id) {
                list.retain(|r| r.run_id != q.run_id);
                if list.is_empty() {
                    threads.remove(&q.thread_id);
                }
            }
        }
        let gone = status != Status::Started;
        q.status.send_replace(status);
        if gone {
            let mut kept = self.gone.lock().unwrap_or_else(|p| p.into_inner());
            kept.push_back(Arc::clone(q));
            while kept.len() > GONE_KEPT {
                kept.pop_front();
            }
        }
        self.moved.send_modify(|n| *n += 1);
    }

    /// Cancels the queued run `q`: `false` when it is no longer waiting.
    pub(super) fn cancel(&self, q: &Arc<Queued>) -> bool {
        if *q.status.borrow() != Status::Pending {
            return false;
        }
        self.leave(q, Status::Cancelled);
        true
    }

    /// Cancels every run queued on thread `tid` (it is being deleted).
    pub(super) fn cancel_thread(&self, tid: &str) {
        for q in self.of_thread(tid) {
            self.cancel(&q);
        }
    }
}

/// Whether run request `b` on thread `tid` is to be queued: it asks to
/// enqueue, it starts a new run (not one that continues a pause: that
/// keeps the paused run's id), and the thread is busy or has runs queued.
pub(super) async fn wanted(state: &AppState, tid: &str, b: &RunBody) -> Result<bool, ApiError> {
    let new_run = b.input.as_ref().is_some_and(|i| !i.is_null())
        || b.command.as_ref().is_some_and(|c| c.goto.is_some());
    if b.multitask_strategy.as_deref() != Some("enqueue") || !new_run {
        return Ok(false);
    }
    if !state.queue.of_thread(tid).is_empty() {
        return Ok(true);
    }
    let Some(chat) = state.store.get_chat(tid).await? else {
        return Ok(false);
    };
    let Some(active) = chat.active_run else {
        return Ok(false);
    };
    Ok(state
        .store
        .get_run(active)
        .await?
        .is_some_and(|r| r.status == RunStatus::Running))
}

/// Queues run request `b` on thread `tid` (the caller's: checked) and
/// starts the task that starts it when its turn comes.
pub(super) async fn enqueue(
    state: &Arc<AppState>,
    user: &User,
    request_id: &RequestId,
    tid: &str,
    mut b: RunBody,
) -> Result<Arc<Queued>, ApiError> {
    super::owned_thread(state, user, tid).await?;
    let graph = assistants::graph_of(state, &b.assistant_id)?;
    let run_id = Uuid::now_v7();
    b.run_id = Some(run_id);
    let queued = Arc::new(Queued {
        run_id,
        thread_id: tid.to_owned(),
        user_id: user.0.clone(),
        graph: graph.id.to_string(),
        created_at: crate::events::now_micros(),
        status: watch::channel(Status::Pending).0,
    });
    state
        .queue
        .lock()
        .entry(tid.to_owned())
        .or_default()
        .push_back(Arc::clone(&queued));
    let task = Waiter {
        state: Arc::clone(state),
        user: user.clone(),
        request_id: request_id.clone(),
        body: b,
        queued: Arc::clone(&queued),
    };
    tokio::spawn(task.run());
    Ok(queued)
}

/// The task of one queued run.
struct Waiter {
    state: Arc<AppState>,
    user: User,
    request_id: RequestId,
    body: RunBody,
    queued: Arc<Queued>,
}

impl Waiter {
    async fn run(self) {
        let queue = &self.state.queue;
        let mut status = self.queued.watch();
        let cancelled = async move { status.wait_for(|s| *s != Status::Pending).await.is_ok() };
        tokio::select! {
            outcome = self.start() => match outcome {
                Ok(()) => queue.leave(&self.queued, Status::Started),
                Err(e) => queue.leave(&self.queued, Status::Failed(e.message)),
            },
            _ = cancelled => self.undo().await,
        }
    }

    /// Waits for its turn, then starts the run under its reserved id: a
    /// thread taken meanwhile by a run not queued is waited for again.
    async fn start(&self) -> Result<(), ApiError> {
        let queue = &self.state.queue;
        let mut moved = queue.moved.subscribe();
        while !queue.is_front(&self.queued) {
            if moved.changed().await.is_err() {
                return Err(ApiError::internal("the run queue is gone"));
            }
        }
        let tid = &self.queued.thread_id;
        loop {
            let begun =
                start::begin(&self.state, &self.user, &self.request_id, tid, &self.body).await;
            match begun {
                Ok(_) => return Ok(()),
                // `enqueue` waited for the thread up to the request
                // timeout: wait again.
                Err(e) if e.code == Code::RunInProgress => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Cancelled while starting: a run that started all the same (its
    /// turn was being stored) is stopped.
    async fn undo(&self) {
        let id = self.queued.run_id;
        if let Ok(Some(_)) = self.state.store.get_run(id).await {
            let _ = self
                .state
                .runs
                .stop_chat(&self.queued.thread_id, Some(id))
                .await;
        }
    }
}
