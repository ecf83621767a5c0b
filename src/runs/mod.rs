//! The run lifecycle in one place: start (a chat turn, a fork), execute,
//! stream, stop, finish, and recover after a crash.
//!
//! [`Runs`] owns everything a run needs around the executor: its record and
//! lease in the store, its checkpointer, a slot of the concurrency limit (a
//! semaphore permit held by the run's task, so a panic cannot leak it), its
//! [`RunHub`] for live streams, and the bookkeeping when it ends (status,
//! usage, the assistant message of a chat turn, the chat's active run).
//! The HTTP handlers, the CLI and crash recovery all call it; none of them
//! builds a run record or drives the executor itself.
//!
//! - [`turn`]: a chat turn, started atomically with the chat's new messages;
//! - [`fork`]: a new run from a checkpoint of another, with edited state;
//! - [`recover`]: leases, orphaned runs, stop requests across instances;
//! - [`follow`]: streaming a run another instance executes;
//! - `drive`: executing one run and recording how it ended;
//! - [`calls`]: storing each model call's request, and expiring it.

pub(crate) mod breaks;
pub(crate) mod calls;
mod checkpointer;
mod drive;
mod end;
mod finished;
pub(crate) mod follow;
pub(crate) mod fork;
mod held;
mod hub;
mod idle;
pub(crate) mod recover;
pub(crate) mod resume;
pub(crate) mod start;
pub(crate) mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

pub use checkpointer::LogCheckpointer;
pub(crate) use fork::{ForkError, ForkRequest};
pub(crate) use hub::{Next, Progress, RunHub, Subscription};
pub use resume::{ResumeError, ResumeRequest};
pub(crate) use start::{RunStart, Started};
pub(crate) use turn::{ChatTurn, TurnError, TurnFrom, TurnRequest};

use crate::config::{OnDisconnect, ServerConfig, StreamDurability};
use crate::engine::Graphs;
use crate::events::{Event, EventKind, ForkOrigin, Usage, now_micros};
use crate::nodes::{Graph, Services};
use crate::runtime::{Durability, Resume, RunStatus};
use crate::sse::BridgeConfig;
use crate::store::{RunRecord, Store, StoreError};
use held::{Held, Hold};
use hub::HubInit;

/// What the lifecycle needs from the server configuration.
#[derive(Clone, Debug)]
pub struct RunsConfig {
    /// A dead instance's runs are taken over after this.
    pub lease: Duration,
    /// How often orphans are looked for (0: never; leases are renewed
    /// every third of `lease` whenever runs execute).
    pub recover_interval: Duration,
    /// Whether this process takes over other instances' orphaned runs
    /// (a server does; a one-shot CLI command only keeps its own leases).
    pub claim_orphans: bool,
    /// Runs executing at once (beyond: refused).
    pub max_concurrent_runs: usize,
    /// How long a finished run's stream stays resumable from memory.
    pub linger: Duration,
    /// What a run does when its last client leaves.
    pub on_disconnect: OnDisconnect,
    /// When steps are stored.
    pub durability: Durability,
    /// How long store writes are retried before the run fails.
    pub store_outage_limit: Duration,
    /// Which events clients may see (stored ones only, by default).
    pub stream_durability: StreamDurability,
    /// The longest an event waits to be written with the ones after it.
    pub stream_flush: Duration,
    /// How long after the last activity an idle process keeps handing
    /// memory back (`idle`); zero: never.
    pub memory_release: Duration,
}

impl From<&ServerConfig> for RunsConfig {
    fn from(c: &ServerConfig) -> Self {
        Self {
            lease: c.lease.0,
            recover_interval: c.recover_interval.0,
            claim_orphans: true,
            max_concurrent_runs: c.max_concurrent_runs,
            linger: c.linger.0,
            on_disconnect: c.on_disconnect,
            durability: c.durability,
            store_outage_limit: c.store_outage_limit.0,
            stream_durability: c.stream_durability,
            stream_flush: c.stream_flush.0,
            memory_release: c.memory_release.0,
        }
    }
}

/// Hears about runs (metrics).
pub trait RunObserver: Send + Sync {
    /// Every event of every run this process executes.
    fn event(&self, graph: &str, event: &Event);
    /// A run ended: `finished`, `failed` or `cancelled`.
    fn finished(&self, graph: &str, outcome: &str);
    /// A run's client saw its first part this long after the run started.
    fn first_visible(&self, graph: &str, seconds: f64) {
        let _ = (graph, seconds);
    }
    /// A run of `user` ended having used `usage`, which the store now
    /// records (a cached view of the user's spending is out of date).
    fn spent(&self, user: &str, usage: Usage) {
        let _ = (user, usage);
    }
}

/// An observer that hears nothing.
#[derive(Debug, Default)]
pub(crate) struct NoObserver;

impl RunObserver for NoObserver {
    fn event(&self, _: &str, _: &Event) {}
    fn finished(&self, _: &str, _: &str) {}
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The chat already has a run in flight.
    #[error("this chat is already answering")]
    Busy,
    /// The concurrency limit is reached.
    #[error("the server is at its run limit")]
    Full,
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The assistant message a chat run produces, and where it goes.
#[derive(Clone, Debug)]
pub struct ChatLink {
    /// The chat.
    pub chat_id: String,
    /// The assistant message's id.
    pub message_id: String,
    /// Its position in the chat.
    pub position: i64,
}

/// A fork attached to a chat: its answer becomes an alternative of an
/// assistant message (see [`fork`]).
#[derive(Debug, Clone)]
pub(crate) struct Alternative {
    /// The chat.
    pub chat_id: String,
    /// The assistant message it is an alternative of.
    pub of: String,
    /// The alternative's own message id.
    pub id: String,
}

/// How a run begins.
#[derive(Debug)]
pub(crate) enum Begin {
    /// From its input state.
    Fresh(Value),
    /// From its input again: crash recovery of a run that never
    /// checkpointed (`history`: what it logged, replayed silently).
    Again {
        /// The input state.
        input: Value,
        /// Events already in the log.
        history: Vec<Event>,
    },
    /// From a checkpoint: crash recovery (`history` are its stored events,
    /// which the stored message must include) or a fork (no history).
    Resumed {
        /// State and frontier.
        from: Resume,
        /// Events already in the log.
        history: Vec<Event>,
    },
    /// A paused run continuing with the answers to its interrupts (see
    /// [`resume`]): from its checkpoint, the step it paused in runs again,
    /// what it did before the pause served from `history`.
    Continued {
        /// State and frontier.
        from: Resume,
        /// Events already in the log.
        history: Vec<Event>,
        /// Interrupt id → answer.
        answers: std::collections::BTreeMap<String, Value>,
        /// The answer goes into a new assistant message (a question
        /// answered by the next user message), not the paused one.
        new_message: bool,
    },
}

/// A run to execute (its record is in the store already).
#[derive(Debug)]
struct Launch {
    run_id: Uuid,
    user_id: String,
    request_id: String,
    graph: Arc<Graph>,
    chat: Option<ChatLink>,
    /// A fork attached to a chat (`chat` is then `None`: the fork's answer
    /// does not take a place in the conversation).
    alternative: Option<Alternative>,
    metadata: Value,
    begin: Begin,
    forked_from: Option<ForkOrigin>,
    /// Also sends every event here (a CLI printing them), waiting for room.
    tap: Option<tokio::sync::mpsc::Sender<Arc<Event>>>,
    /// This process answers for the run until this drops (`held`).
    hold: Hold,
    /// The store admitted the run as its chat's only running one (a chat
    /// turn, `ChatStore::begin_turn`): a hub still open here for the chat
    /// is a follower's or that of a run whose end is recorded already
    /// (between recording it and closing its hub), and gives way.
    admitted: bool,
    /// The run's breakpoints, and whether they are new with this execution
    /// (recorded in its log) rather than read back from it.
    breakpoints: (crate::events::Breakpoints, bool),
}

impl Launch {
    /// The hub's key: the chat, or the run itself when it has no chat.
    fn key(&self) -> String {
        self.chat
            .as_ref()
            .map_or_else(|| format!("run:{}", self.run_id), |c| c.chat_id.clone())
    }
}

/// The run lifecycle of one process.
pub struct Runs {
    store: Arc<dyn Store>,
    services: Arc<Services>,
    graphs: Arc<Graphs>,
    instance: String,
    config: RunsConfig,
    observer: Arc<dyn RunObserver>,
    hubs: Mutex<HashMap<String, Arc<RunHub>>>,
    /// Chats whose last run finished within `linger` (`finished`).
    finished: Mutex<HashMap<String, finished::Finished>>,
    permits: Arc<Semaphore>,
    /// The runs this process answers for (see `held`).
    held: Arc<Held>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs")
            .field("instance", &self.instance)
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

impl Runs {
    /// The lifecycle over `store`, running `graphs` with `services`;
    /// `instance` names this process in leases.
    pub fn new(
        store: Arc<dyn Store>,
        services: Arc<Services>,
        graphs: Arc<Graphs>,
        instance: String,
        config: RunsConfig,
        observer: Arc<dyn RunObserver>,
    ) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(config.max_concurrent_runs)),
            store,
            services,
            graphs,
            instance,
            config,
            observer,
            hubs: Mutex::new(HashMap::new()),
            finished: Mutex::new(HashMap::new()),
            held: Arc::default(),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// This process's id in leases.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Runs executing now.
    pub fn running(&self) -> usize {
        self.config.max_concurrent_runs - self.permits.available_permits()
    }

    /// The chat's current (or lingering) hub.
    pub fn for_chat(&self, chat_id: &str) -> Option<Arc<RunHub>> {
        self.hubs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(chat_id)
            .cloned()
    }

    /// Cancels the run if this process executes it; false otherwise.
    pub fn cancel_run(&self, run_id: Uuid) -> bool {
        let hubs = self.hubs.lock().unwrap_or_else(PoisonError::into_inner);
        match hubs
            .values()
            .find(|h| h.run_id == run_id && !h.follower && !h.is_done())
        {
            Some(h) => {
                h.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Stops the chat's run: here, or through a stop request the executing
    /// instance acts on. Returns the run stopped (and whether elsewhere).
    ///
    /// # Errors
    /// The store failed.
    pub async fn stop_chat(
        self: &Arc<Self>,
        chat_id: &str,
        active: Option<Uuid>,
    ) -> Result<Option<(Uuid, bool)>, StoreError> {
        if let Some(hub) = self
            .for_chat(chat_id)
            .filter(|h| !h.is_done() && !h.follower)
        {
            hub.cancel.cancel();
            return Ok(Some((hub.run_id, false)));
        }
        let Some(run) = active else {
            return Ok(None);
        };
        // Executed nowhere (stranded here, or its instance died): it runs
        // here now, and stops here.
        match self.take_over(run).await {
            Ok(Some(hub)) => {
                hub.cancel.cancel();
                return Ok(Some((run, false)));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(run_id = %run, error = %e, "could not take over a run nobody executes")
            }
        }
        // Held here but not executing yet: this process is starting it (the
        // lease upkeep's take-over, a resume) and will see the request on
        // its own runs within `STOP_POLL`; it stops here, not elsewhere.
        let here = self.held.contains(run);
        if self.store.request_stop(run).await? {
            Ok(Some((run, !here)))
        } else {
            Ok(None)
        }
    }

    /// Stops accepting runs, waits up to `grace` for the running ones to
    /// finish, then suspends the rest: each keeps its last checkpoint and
    /// gives up its lease, so another instance (or this one, restarted)
    /// resumes it.
    pub async fn shutdown(&self, grace: Duration) {
        self.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let hubs: Vec<Arc<RunHub>> = self
                .hubs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .cloned()
                .collect();
            tracing::warn!(
                runs = hubs.len(),
                "shutdown grace period over; suspending runs still in flight at their last checkpoint"
            );
            for h in hubs {
                h.suspend.cancel();
            }
            self.tracker.wait().await;
        }
    }

    /// A new run record: running, leased to this process.
    fn record(
        &self,
        launch: &Launch,
        input: Value,
        parent: Option<ForkOrigin>,
        last_step: u32,
    ) -> RunRecord {
        RunRecord {
            id: launch.run_id,
            chat_id: launch
                .chat
                .as_ref()
                .map(|c| c.chat_id.clone())
                .or_else(|| launch.alternative.as_ref().map(|a| a.chat_id.clone())),
            user_id: launch.user_id.clone(),
            graph: launch.graph.id.to_string(),
            graph_version: launch.graph.version.clone(),
            status: RunStatus::Running,
            input,
            created_at: now_micros(),
            finished_at: None,
            error: None,
            usage: Default::default(),
            parent,
            request_id: Some(launch.request_id.clone()).filter(|r| !r.is_empty()),
            message_id: launch
                .chat
                .as_ref()
                .map(|c| c.message_id.clone())
                .or_else(|| launch.alternative.as_ref().map(|a| a.id.clone())),
            last_seq: 0,
            last_step,
        }
    }

    /// The end of a lease taken now.
    fn lease_until(&self) -> u64 {
        now_micros() + self.config.lease.as_micros() as u64
    }

    /// A slot of the concurrency limit, held by a run's task.
    ///
    /// # Errors
    /// The limit is reached, or shutdown began.
    fn permit(&self) -> Result<OwnedSemaphorePermit, StartError> {
        if self.shutdown.is_cancelled() {
            return Err(StartError::ShuttingDown);
        }
        Arc::clone(&self.permits)
            .try_acquire_owned()
            .map_err(|_| StartError::Full)
    }

    /// Holds a new run for this process (see `held`).
    ///
    /// # Errors
    /// It is held already: this process executes it.
    fn hold(&self, run: Uuid) -> Result<Hold, StartError> {
        self.held.hold(run).ok_or(StartError::Busy)
    }

    /// Runs `work` — which writes a run and then launches it — in a task
    /// of its own, so that dropping the caller cannot separate the two: an
    /// HTTP client going away drops its handler mid-await, and a run
    /// written but never launched would sit `running` with this process's
    /// lease until the upkeep noticed. A panic in `work` is the caller's.
    async fn whole<V, E>(
        &self,
        work: impl std::future::Future<Output = Result<V, E>> + Send + 'static,
    ) -> Result<V, E>
    where
        V: Send + 'static,
        E: From<StartError> + Send + 'static,
    {
        // In the caller's span: the run's span stays in the request's trace.
        match self.tracker.spawn(work.in_current_span()).await {
            Ok(r) => r,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Aborted: the runtime is shutting down.
                Err(_) => Err(StartError::ShuttingDown.into()),
            },
        }
    }

    /// Executes a run whose record is stored, with its permit: registers
    /// its hub and drives it in the background.
    ///
    /// # Errors
    /// The chat has a live hub, or shutdown began.
    fn launch(
        self: &Arc<Self>,
        launch: Launch,
        permit: OwnedSemaphorePermit,
    ) -> Result<Arc<RunHub>, StartError> {
        if self.shutdown.is_cancelled() {
            return Err(StartError::ShuttingDown);
        }
        let key = launch.key();
        let mut hubs = self.hubs.lock().unwrap_or_else(PoisonError::into_inner);
        // A hub that only follows the log of this very run (it executed
        // elsewhere until now) gives way; its subscribers keep following.
        if !launch.admitted
            && hubs
                .get(&key)
                .is_some_and(|h| !h.is_done() && (!h.follower || h.run_id != launch.run_id))
        {
            return Err(StartError::Busy);
        }
        let hub = Arc::new(RunHub::new(self.hub_init(&launch, key.clone())));
        hubs.insert(key, Arc::clone(&hub));
        drop(hubs);
        let span = tracing::info_span!(
            "run",
            run_id = %launch.run_id,
            request_id = %launch.request_id,
            chat_id = launch.chat.as_ref().map_or("", |c| c.chat_id.as_str()),
            user = %launch.user_id,
            graph = %launch.graph.id,
        );
        self.tracker.spawn(
            drive::drive(Arc::clone(self), Arc::clone(&hub), launch, permit).instrument(span),
        );
        Ok(hub)
    }

    fn hub_init(&self, launch: &Launch, key: String) -> HubInit {
        let fresh =
            || BridgeConfig::for_graph(&launch.graph, message_id(launch), launch.metadata.clone());
        let (bridge, stored, recovered_at) = match &launch.begin {
            Begin::Fresh(_) => (fresh(), 0, None),
            Begin::Again { history, .. } => {
                let recorded = recorded_bridge(history);
                let last = history.last().map_or(0, |e| e.seq);
                (recorded.unwrap_or_else(fresh), last, None)
            }
            Begin::Continued { from, history, .. } => {
                let mut bridge = recorded_bridge(history).unwrap_or_else(fresh);
                // A new assistant message (a question answered by a new
                // user message) takes the id the turn gave it.
                bridge.message_id = message_id(launch);
                (bridge, from.last_seq, None)
            }
            Begin::Resumed { from, history } => {
                let recorded = recorded_bridge(history);
                // With visible durability every event a client saw is in
                // the log, so a resume continues from its Last-Event-ID.
                let recovered = (!history.is_empty()
                    && self.config.stream_durability == StreamDurability::Step)
                    .then_some(from.last_seq);
                (recorded.unwrap_or_else(fresh), from.last_seq, recovered)
            }
        };
        let resumed = match &launch.begin {
            Begin::Continued { from, .. } => from.last_seq,
            _ => 0,
        };
        HubInit {
            run_id: launch.run_id,
            chat_id: key,
            bridge,
            follower: false,
            recovered_at,
            resumed,
            stored,
            durable: self.config.stream_durability == StreamDurability::Visible,
            on_disconnect: self.config.on_disconnect,
        }
    }

    fn remove(&self, hub: &Arc<RunHub>) {
        let mut hubs = self.hubs.lock().unwrap_or_else(PoisonError::into_inner);
        if hubs.get(&hub.chat_id).is_some_and(|h| Arc::ptr_eq(h, hub)) {
            hubs.remove(&hub.chat_id);
        }
    }
}

/// The stream settings a run recorded in `run_started`.
fn recorded_bridge(history: &[Event]) -> Option<BridgeConfig> {
    history.iter().find_map(|e| match &e.event {
        EventKind::RunStarted(start) => start.stream.as_ref().and_then(BridgeConfig::from_json),
        _ => None,
    })
}

/// The assistant message id of a run (made up for runs without a chat).
fn message_id(launch: &Launch) -> String {
    match (&launch.chat, &launch.alternative) {
        (Some(c), _) => c.message_id.clone(),
        (None, Some(a)) => a.id.clone(),
        (None, None) => turn::answer_message_id(launch.run_id, None),
    }
}

/// `start.messageMetadata` of a run's stream.
pub(crate) fn stream_metadata(
    services: &Services,
    run_id: Uuid,
    request_id: &str,
    chat_id: &str,
    graph: &Graph,
) -> Value {
    let offline = services.models.any_offline();
    let mut metadata = json!({
        "runId": run_id,
        "requestId": request_id,
        "chatId": chat_id,
        "graph": graph.id.as_ref(),
        "graphVersion": graph.version,
        "offlineModel": offline,
    });
    if offline {
        metadata["notice"] =
            json!("answered by stategraph's built-in offline model, not a real LLM");
    }
    metadata
}
