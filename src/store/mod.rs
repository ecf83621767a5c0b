//! Persistence: chats, messages, runs, the event log and checkpoints.
//!
//! Three narrow traits, one per concern, and one conformance suite that
//! every backend passes (`tests/integration/store_and_failures/store_conformance.rs`):
//! - [`ChatStore`]: chats and their messages (UI parts as JSON);
//! - [`RunStore`]: runs — graph, version, status, timings, usage, leases;
//! - [`EventLog`]: the append-only event log and the checkpoints, written
//!   together one superstep at a time ([`StepBatch`]), which is what resume,
//!   replay and the debugging API read;
//! - [`Leases`]: which instance executes a running run, so that after a
//!   crash exactly one surviving instance picks it up (no cluster protocol:
//!   a lease is two columns of the run, renewed while the run executes);
//! - [`Maintenance`]: pruning old runs and chats, and notifications of new
//!   events so an instance can stream a run another instance executes;
//! - [`Verdicts`]: a judge model's verdicts on a run's answer;
//! - [`Calls`]: model calls as they were sent, content stored by address.
//!
//! Backends: [`memory`] (tests), [`sqlite`] (the embedded default) and
//! [`postgres`]; [`config`] picks one and [`open`]s it. A [`Store`] is
//! anything implementing all of them. `runs::LogCheckpointer` connects a
//! store to the executor and rides out database outages (it lives with the
//! run lifecycle: the store imports nothing from the runtime); [`Watched`]
//! notes whether a store takes writes (readiness).

pub(crate) mod calls;
pub(crate) mod config;
pub(crate) mod memory;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod pages;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod query;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod verdicts;
#[cfg(feature = "server")]
mod watched;

pub use calls::{CallPart, CallRecord, CallStorage};
pub use calls::{Calls, ExpiredCalls};
pub use config::{StoreConfig, open};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use query::{RunCursor, RunQuery};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use verdicts::{VerdictRecord, Verdicts};
#[cfg(feature = "server")]
pub(crate) use watched::Watched;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::events::{ErrorInfo, Event, ForkOrigin, Usage};
use crate::events::{RunStatus, StepBatch};

/// What a call to `migrate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub struct MigrationReport {
    /// Schema version before (0 for a new database).
    pub from: u32,
    /// Schema version now.
    pub to: u32,
    /// Versions applied by this call, in order (empty when up to date).
    pub applied: Vec<u32>,
}

/// Errors from a store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The backend could not be reached (retrying may help).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A record that must exist does not.
    #[error("not found: {0}")]
    NotFound(String),
    /// A write conflicts with existing data (e.g. a duplicate event seq).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data could not be decoded, or another backend failure.
    #[error("store error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether retrying the operation may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// Result of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// A chat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRecord {
    /// Chat id (chosen by the client).
    pub id: String,
    /// Owner.
    pub user_id: String,
    /// Title (the first user message, shortened).
    pub title: String,
    /// Creation time, µs since the epoch.
    pub created_at: u64,
    /// Last change, µs since the epoch.
    pub updated_at: u64,
    /// The run currently streaming for this chat, if any.
    pub active_run: Option<Uuid>,
}

/// A stored message: what `useChat` shows, as UI parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// The chat.
    pub chat_id: String,
    /// Message id.
    pub id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// UI message parts (JSON array).
    pub parts: Value,
    /// UI message metadata (JSON object or null).
    pub metadata: Value,
    /// Position in the chat, from 0.
    pub position: i64,
    /// Creation time, µs since the epoch.
    pub created_at: u64,
}

/// A run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Run id.
    pub id: Uuid,
    /// The chat it answers, if any.
    pub chat_id: Option<String>,
    /// Who started it.
    pub user_id: String,
    /// Graph id.
    pub graph: String,
    /// Content hash of the graph and prompts it ran with.
    pub graph_version: String,
    /// Status.
    pub status: RunStatus,
    /// The input state.
    pub input: Value,
    /// Start time, µs since the epoch.
    pub created_at: u64,
    /// End time, µs since the epoch.
    pub finished_at: Option<u64>,
    /// Why it failed.
    pub error: Option<ErrorInfo>,
    /// Tokens used.
    pub usage: Usage,
    /// Set for forks.
    pub parent: Option<ForkOrigin>,
    /// Correlation id of the request that started it.
    pub request_id: Option<String>,
    /// The assistant message this run produces (chat runs).
    pub message_id: Option<String>,
    /// Highest event seq stored.
    pub last_seq: u64,
    /// Highest step checkpointed.
    pub last_step: u32,
}

/// One stored checkpoint (a [`StepBatch`] without its events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// The step.
    pub step: u32,
    /// Patches applied in the step.
    pub writes: Vec<crate::events::TaskWrite>,
    /// Tasks of the next step.
    pub next: Vec<crate::events::PendingTask>,
    /// Join progress.
    pub joins: Vec<Vec<String>>,
    /// Full state, every few steps.
    pub snapshot: Option<Value>,
}

impl CheckpointRecord {
    /// The checkpoint part of a batch.
    pub fn from_batch(b: &StepBatch) -> Self {
        Self {
            step: b.step,
            writes: b.writes.clone(),
            next: b.next.clone(),
            joins: b.joins.clone(),
            snapshot: b.snapshot.clone(),
        }
    }

    /// Back to a batch (without events), for the runtime's `rebuild_state`.
    pub fn to_batch(&self, run_id: Uuid) -> StepBatch {
        StepBatch {
            run_id,
            step: self.step,
            writes: self.writes.clone(),
            events: Vec::new(),
            next: self.next.clone(),
            joins: self.joins.clone(),
            snapshot: self.snapshot.clone(),
            status: RunStatus::Running,
        }
    }
}

/// Everything a chat turn starts with, stored together by
/// [`ChatStore::begin_turn`].
#[derive(Clone, Debug)]
pub struct TurnStart {
    /// The chat (created if new; its `active_run` is ignored).
    pub chat: ChatRecord,
    /// The conversation as the client has it: replaces every stored message.
    pub messages: Vec<MessageRecord>,
    /// The run answering it.
    pub run: RunRecord,
    /// The instance that executes the run (its lease).
    pub owner: String,
    /// Until when the lease holds.
    pub lease_until: u64,
}

/// How a chat turn's run ended, stored together by [`ChatStore::end_turn`].
#[derive(Clone, Debug)]
pub struct TurnEnd {
    /// The run.
    pub run_id: Uuid,
    /// How it ended.
    pub status: RunStatus,
    /// Why it failed, for a failed run.
    pub error: Option<ErrorInfo>,
    /// The tokens it spent.
    pub usage: Usage,
    /// The assistant message it answered with (its `chat_id` is the chat).
    pub message: MessageRecord,
    /// Whether the run stops being the chat's active run (a paused run
    /// stays: the chat's next request answers it).
    pub release: bool,
}

/// What [`ChatStore::begin_turn`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnOutcome {
    /// Everything stored: the chat as it now is.
    Started(ChatRecord),
    /// The chat already has a run in flight (here or on another instance):
    /// nothing was written.
    Busy(Uuid),
    /// The chat belongs to another user: nothing was written.
    NotOwner,
}

/// Chats and messages.
pub trait ChatStore: Send + Sync {
    /// Starts a chat turn atomically: creates the chat if it is new, and —
    /// only if it belongs to the turn's user and has no run in flight (its
    /// active run is not `running`) — replaces its messages, creates the run
    /// with its lease and makes it the chat's active run, all in one
    /// transaction. Concurrent turns of one chat, on any number of
    /// instances, start exactly one run; the refused ones write nothing.
    fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>>;
    /// Creates the chat unless it exists; returns the stored chat.
    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>>;
    /// A chat by id.
    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>>;
    /// A user's chats, most recently updated first.
    fn list_chats(
        &self,
        user_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>>;
    /// Deletes a chat with its messages (runs and events stay until pruned).
    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>>;
    /// Sets (or clears) the chat's active run; bumps `updated_at`.
    fn set_active_run(&self, chat_id: &str, run: Option<Uuid>) -> BoxFuture<'_, StoreResult<()>>;
    /// Clears the chat's active run if it still is `run` (a newer turn's
    /// run stays); bumps `updated_at` when it clears.
    fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>>;
    /// Replaces the messages from `position` on with `messages` (one
    /// transaction): appending, editing and regenerating are all this.
    fn replace_messages_from(
        &self,
        chat_id: &str,
        position: i64,
        messages: Vec<MessageRecord>,
    ) -> BoxFuture<'_, StoreResult<()>>;
    /// Inserts or replaces one message (by chat and id).
    fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>>;
    /// A chat's messages in order.
    fn messages(&self, chat_id: &str) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>>;
    /// Ends a chat turn in one transaction: stores the assistant message
    /// (unless the chat was deleted meanwhile: it stays deleted), records
    /// how the run ended as [`RunStore::finish_run`] does and, when
    /// `release`, clears the chat's active run as
    /// [`ChatStore::release_chat`] does.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the run does not exist (the message and
    /// the chat are still written); a backend error writes nothing.
    fn end_turn(&self, end: TurnEnd) -> BoxFuture<'_, StoreResult<()>>;
    /// The metadata (a JSON object) of each of `user_id`'s chats that has
    /// any, by chat id: the LangGraph API's thread metadata. A backend
    /// that keeps none (a test double) has none.
    fn chats_metadata(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, Value>>> {
        let _ = user_id;
        Box::pin(async { Ok(std::collections::HashMap::new()) })
    }
    /// Replaces a chat's metadata (a JSON object); false when there is no
    /// such chat.
    fn set_chat_metadata(
        &self,
        chat_id: &str,
        metadata: Value,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let _ = (chat_id, metadata);
        Box::pin(async {
            Err(StoreError::Backend(
                "this store keeps no chat metadata".into(),
            ))
        })
    }
}

/// Runs.
pub trait RunStore: Send + Sync {
    /// Records a new run.
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>>;
    /// A run by id.
    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>>;
    /// A page of runs, newest first, filtered as `query` says.
    fn list_runs(&self, query: &RunQuery) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>>;
    /// The status of the newest run (by `created_at`, then id) of each chat
    /// that `user_id`'s runs belong to, by chat id, in one query: the
    /// LangGraph API's thread statuses for a search. This default reads
    /// the user's runs; the backends ask for the newest per chat.
    fn newest_run_status_by_chat(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, RunStatus>>> {
        let query = RunQuery::newest(usize::MAX).of_user(user_id);
        Box::pin(async move {
            let mut out = std::collections::HashMap::new();
            for r in self.list_runs(&query).await? {
                if let Some(chat) = r.chat_id {
                    out.entry(chat).or_insert(r.status);
                }
            }
            Ok(out)
        })
    }
    /// Records how a run ended.
    fn finish_run(
        &self,
        id: Uuid,
        status: RunStatus,
        error: Option<ErrorInfo>,
        usage: Usage,
    ) -> BoxFuture<'_, StoreResult<()>>;
    /// The tokens `user`'s runs created at or after `since` (µs) used, as
    /// recorded when they ended (a running run counts 0 until then): the
    /// daily token quota. One indexed range scan (`runs_usage_by_user`).
    fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>>;
}

/// The event log and checkpoints.
pub trait EventLog: Send + Sync {
    /// Stores consecutive steps — their events and checkpoints — atomically
    /// (one transaction; one round trip where the backend has round trips),
    /// and advances the run's `last_seq` / `last_step` (and status, when the
    /// last batch is final). The executor sends two at once when the input
    /// checkpoint (step 0) rides with the first superstep's.
    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>>;
    /// Stores events of a run without a checkpoint (events a client may see
    /// before their step ends: the run's pump writes them first, see
    /// `server.stream_durability`), advancing the run's `last_seq`. Seqs
    /// must follow the stored ones, as for [`EventLog::append_steps`].
    fn append_events(
        &self,
        run: Uuid,
        events: &[std::sync::Arc<Event>],
    ) -> BoxFuture<'_, StoreResult<()>>;
    /// Stores one step: [`EventLog::append_steps`] of one batch.
    fn append(&self, batch: &StepBatch) -> BoxFuture<'_, StoreResult<()>> {
        self.append_steps(std::slice::from_ref(batch))
    }
    /// Events of a run with `seq > after`, in order, at most `limit`.
    fn events(&self, run: Uuid, after: u64, limit: usize)
    -> BoxFuture<'_, StoreResult<Vec<Event>>>;
    /// Checkpoints of a run with `step <= upto`, in order.
    fn checkpoints(
        &self,
        run: Uuid,
        upto: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<CheckpointRecord>>>;
}

/// Who executes a running run, and until when (µs since the epoch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The instance holding it (an id the instance chose, e.g. host and pid).
    pub owner: String,
    /// When it expires unless renewed.
    pub until: u64,
}

/// Run leases: which instance executes a running run.
///
/// An instance takes the lease when it starts (or resumes) a run, renews all
/// its leases periodically, and releases them when it stops. A run whose
/// lease expired belongs to an instance that died: another instance claims
/// it with [`Leases::claim_orphans`] and resumes it from its checkpoint. A
/// lease ends with the run: [`RunStore::finish_run`] and a final batch
/// (status other than running) clear it.
///
/// A running run that never had a lease is an orphan at once, so a new run
/// must be leased right after it is created; one that has no lease by the
/// time another instance claims orphans gets executed there.
///
/// Times are µs since the epoch, passed in by the caller, so one clock (the
/// caller's) decides expiry and tests need no sleeping; instances' clocks
/// should agree to well within the lease length.
pub trait Leases: Send + Sync {
    /// Records a new run with its lease already held by `owner` until
    /// `until` — one write, so there is no moment when the run exists
    /// without a lease and a recovery pass (this instance's or another's)
    /// takes it for an orphan and executes it a second time.
    fn create_leased_run(
        &self,
        run: RunRecord,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<()>>;
    /// Takes or extends the lease of `run` until `until`: true when the run
    /// is running and its lease is unset, expired (it ended before `now`) or
    /// already `owner`'s; false when another owner holds it or the run is
    /// over (or unknown). Check the answer: false means another instance
    /// executes the run.
    fn acquire_lease(
        &self,
        run: Uuid,
        owner: &str,
        now: u64,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>>;
    /// Extends every lease `owner` holds on running runs to `until`; returns
    /// those runs (a run missing from the answer was lost: another instance
    /// claimed it, or it ended). One statement.
    fn renew_leases(&self, owner: &str, until: u64) -> BoxFuture<'_, StoreResult<Vec<Uuid>>>;
    /// Takes the leases of up to `limit` running runs whose lease expired
    /// before `now` or was never set, oldest runs first, and returns them.
    /// Concurrent callers (other instances) never get the same run.
    fn claim_orphans(
        &self,
        owner: &str,
        now: u64,
        until: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>>;
    /// Gives up the lease of `run` if `owner` holds it (otherwise does nothing).
    fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>>;
    /// The lease of `run`, if one is set (for diagnostics; expired leases
    /// are reported too).
    fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<Lease>>>;
    /// Asks whichever instance executes `run` to stop it (a stop request
    /// that reached another instance): true when the run is running. The
    /// executor learns of it through [`Leases::stop_requests`].
    fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>>;
    /// The running runs `owner` holds the lease of whose stop was
    /// requested, sorted. Polled by every instance with runs in flight.
    fn stop_requests(&self, owner: &str) -> BoxFuture<'_, StoreResult<Vec<Uuid>>>;
    /// Takes a run paused at an interrupt: if it is `interrupted`, makes it
    /// `running` again with `owner`'s lease until `until` and returns true;
    /// otherwise (running, over, unknown) changes nothing and returns false.
    /// One conditional update, so of concurrent resumes — on any number of
    /// instances — exactly one gets the run.
    fn claim_interrupted(
        &self,
        run: Uuid,
        owner: &str,
        until: u64,
    ) -> BoxFuture<'_, StoreResult<bool>>;
}

/// What [`Maintenance::prune`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Runs.
    pub runs: u64,
    /// Events of those runs.
    pub events: u64,
    /// Checkpoints of those runs.
    pub checkpoints: u64,
    /// Chats.
    pub chats: u64,
    /// Messages of those chats.
    pub messages: u64,
}

impl std::ops::AddAssign for PruneReport {
    fn add_assign(&mut self, part: Self) {
        self.runs += part.runs;
        self.events += part.events;
        self.checkpoints += part.checkpoints;
        self.chats += part.chats;
        self.messages += part.messages;
    }
}

/// A committed append: the run and the highest event seq stored for it.
pub type Appended = (Uuid, u64);

/// How many [`Appended`] notifications a subscriber may fall behind before
/// it sees [`broadcast::error::RecvError::Lagged`].
pub(crate) const NOTIFY_CAPACITY: usize = 4096;

/// Housekeeping and change notifications.
pub trait Maintenance: Send + Sync {
    /// Deletes runs that are over (not running) and were created before
    /// `before`, with their events and checkpoints; with `chats`, also the
    /// chats not updated since `before` that have no running run, with their
    /// messages. Works in bounded batches (each its own transaction), so a
    /// large prune never holds up appends for long.
    fn prune(&self, before: u64, chats: bool) -> BoxFuture<'_, StoreResult<PruneReport>>;
    /// Notifications `(run, last_seq)` after every committed
    /// [`EventLog::append`], where `last_seq` is the highest seq stored for
    /// the run. On PostgreSQL they come from every instance sharing the
    /// database; on SQLite and memory from this store only.
    ///
    /// Notifications are a hint to read the log, never the log itself: they
    /// can be lost (a subscriber lagging behind, PostgreSQL's listening
    /// connection reconnecting), so a subscriber must still poll
    /// [`EventLog::events`] now and then.
    fn subscribe(&self) -> broadcast::Receiver<Appended>;
    /// Lets go of caches the store keeps for speed (SQLite's page caches)
    /// and, on threads of its own, hands their free memory back
    /// ([`crate::memory::idle_point`]). Called when the process goes idle;
    /// the next reads warm the caches again. Nothing by default.
    fn release_memory(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Rows deleted per statement by [`Maintenance::prune`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const PRUNE_BATCH: usize = 500;

/// A complete store.
pub trait Store: ChatStore + RunStore + EventLog + Leases + Maintenance + Verdicts + Calls {
    /// Backend name for logs and `/readyz`.
    fn backend(&self) -> &'static str;
    /// Checks that the backend answers.
    fn ping(&self) -> BoxFuture<'_, StoreResult<()>>;
    /// Checks that the backend takes a write: one that changes nothing a
    /// reader sees, yet writes (readiness while writes have failed, see
    /// `Watched`). By default a [`Store::ping`].
    fn probe_write(&self) -> BoxFuture<'_, StoreResult<()>> {
        self.ping()
    }
}
