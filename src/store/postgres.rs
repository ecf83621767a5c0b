//! The PostgreSQL backend: what several stateless instances share.
//!
//! A deadpool pool of tokio-postgres connections built from a URL
//! (`postgres://postgres@127.0.0.1:5432/stategraph`); statements are prepared
//! once per connection and cached. Opening runs the migrations under an
//! advisory lock, so instances starting together migrate once.
//!
//! # One round trip per step
//! [`EventLog::append`] is the hot path: the executor waits for it at the
//! end of every superstep. It is **one SQL statement**: the step's events go
//! in as one row, a *page* holding them as a JSON array (the `store::pages`
//! module says why and how they are read back), the checkpoint is upserted and the
//! run's `last_seq` / `last_step` / status advanced, all as data-modifying
//! CTEs of that statement. A statement is its own transaction, so the batch is
//! atomic (a duplicate seq stores nothing), and with the statement cached it
//! is one Bind/Execute/Sync exchange: one round trip, however many events.
//! Appends of different runs waiting at the same time share one such
//! statement (the `group` module: cross-run group commit). A chat turn's
//! start and end are one statement each too (the `turns` module), so a
//! chat run costs one round trip per superstep plus those two.
//!
//! JSON columns are `json`, not `jsonb`: the text serde wrote is kept
//! verbatim, so patches (ordered maps) keep their key order, and every
//! string serde can write is accepted. Connections are plain TCP (`NoTls`):
//! the database is expected on a private network or a local socket.
//!
//! # Notifications
//! After an append commits, the store sends `pg_notify('stategraph_events',
//! '<run>:<last_seq>')`, delivered to every session listening on the
//! database. Not from the append statement itself: PostgreSQL serializes
//! the commits of notifying transactions, WAL flush included, which divided
//! append throughput by 8 with 16 writers on the development machine
//! (whole chat runs, 64 at a time: 49 runs/s, 266 without). A background
//! task sends the notifications queued since its last statement in one
//! statement of their own, on a connection outside the pool (the `notify`
//! module has the measurements); the append stays one round trip. Each store also keeps
//! one dedicated connection outside the pool that `LISTEN`s and feeds
//! [`Maintenance::subscribe`](super::Maintenance::subscribe) (the `listen`
//! module says how it reconnects and what is lost meanwhile).
//!
//! # Outages
//! Connection failures, pool timeouts, shutdowns and restarts (57P01…57P03),
//! resource exhaustion and serialization failures are
//! [`StoreError::Unavailable`] (transient); unique violations are
//! [`StoreError::Conflict`]. After the server comes back the pool heals by
//! itself: a connection the server closed is detected when it is next taken
//! from the pool and replaced by a new one. Connections use TCP keepalives
//! (30 s idle) and a TCP user timeout (30 s) unless the URL sets them, so a
//! server that vanished without closing its sockets is noticed too.

mod calls;
mod group;
mod listen;
mod notify;
mod rows;
mod turns;
mod upkeep;
mod verdicts;

use std::time::Duration;

use deadpool_postgres::{
    ClientWrapper, Hook, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use futures::future::BoxFuture;
use tokio::sync::broadcast;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{NoTls, Row};
use tokio_util::sync::DropGuard;
use uuid::Uuid;

use super::query::SqlParam;
use super::sql::{self, Migration, MigrationReport};
use super::{
    Appended, ChatRecord, ChatStore, CheckpointRecord, EventLog, MessageRecord, NOTIFY_CAPACITY,
    RunQuery, RunRecord, RunStore, Store, StoreError, StoreResult, TurnEnd, TurnOutcome, TurnStart,
};
use crate::events::{ErrorInfo, Event, Usage, now_micros};
use crate::events::{PendingTask, RunStatus, StepBatch, TaskWrite};

use super::pages::{self, EVENTS_AFTER, EncodedPage};
use rows::{
    CHAT_COLS, MESSAGE_COLS, MessageColumns, RUN_COLS, RunColumns, UPSERT_MESSAGES, chat_of,
    message_of, run_of,
};

/// The schema, in order. Append new files; never edit an applied one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("migrations/postgres/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "leases",
        sql: include_str!("migrations/postgres/0002_leases.sql"),
    },
    Migration {
        version: 3,
        name: "stop_requests",
        sql: include_str!("migrations/postgres/0003_stop_requests.sql"),
    },
    Migration {
        version: 4,
        name: "event_pages",
        sql: include_str!("migrations/postgres/0004_event_pages.sql"),
    },
    Migration {
        version: 5,
        name: "runs_by_user",
        sql: include_str!("migrations/postgres/0005_runs_by_user.sql"),
    },
    Migration {
        version: 6,
        name: "usage_by_user",
        sql: include_str!("migrations/postgres/0006_usage_by_user.sql"),
    },
    Migration {
        version: 7,
        name: "fork_detail",
        sql: include_str!("migrations/postgres/0007_fork_detail.sql"),
    },
    Migration {
        version: 8,
        name: "interrupts",
        sql: include_str!("migrations/postgres/0008_interrupts.sql"),
    },
    Migration {
        version: 9,
        name: "run_cost",
        sql: include_str!("migrations/postgres/0009_run_cost.sql"),
    },
    Migration {
        version: 10,
        name: "chat_metadata",
        sql: include_str!("migrations/postgres/0010_chat_metadata.sql"),
    },
    Migration {
        version: 11,
        name: "verdicts",
        sql: include_str!("migrations/postgres/0011_verdicts.sql"),
    },
    Migration {
        version: 12,
        name: "runs_by_status",
        sql: include_str!("migrations/postgres/0012_runs_by_status.sql"),
    },
    Migration {
        version: 13,
        name: "model_calls",
        sql: include_str!("migrations/postgres/0013_model_calls.sql"),
    },
];

/// Advisory lock key serializing migrations across instances ("stgraph").
const MIGRATION_LOCK: i64 = 0x0073_7467_7261_7068;

/// Default pool size.
pub(crate) const DEFAULT_POOL_SIZE: usize = 16;

/// A store in a PostgreSQL database.
pub struct PostgresStore {
    pool: Pool,
    /// Fed by the listening connection.
    notify: broadcast::Sender<Appended>,
    /// Notifications of committed appends, to send.
    outbox: notify::Outbox,
    /// Appends, grouped across runs.
    appender: group::Appender,
    /// Model call records, grouped.
    calls: calls::Writer,
    /// Stops the listening task when the store is dropped.
    _listener: DropGuard,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PostgresStore {
    /// Connects to `url` with a pool of at most `pool_size` connections
    /// (plus one listening for notifications and one sending them, opened
    /// when the first append commits) and applies pending
    /// migrations. Returns once the listening connection is listening, so
    /// [`Maintenance::subscribe`](super::Maintenance::subscribe) hears every
    /// append committed after this.
    ///
    /// # Errors
    /// An invalid URL, an unreachable server ([`StoreError::Unavailable`]),
    /// a failed migration, or a database with a newer schema than this
    /// build knows.
    pub async fn connect(url: &str, pool_size: usize) -> StoreResult<Self> {
        let config = config(url)?;
        let pool = pool(config.clone(), pool_size)?;
        let mut client = pool.get().await.map_err(pool_error)?;
        apply_migrations(&mut client).await?;
        drop(client);
        let notify = broadcast::channel(NOTIFY_CAPACITY).0;
        // The notifications go out on a connection of their own, so they
        // never wait for a pooled one behind the appends.
        let outbox = notify::Outbox::start(self::pool(config.clone(), 1)?);
        let listener = listen::start(config, notify.clone()).await?;
        Ok(Self {
            outbox,
            appender: group::Appender::start(pool.clone()),
            calls: calls::Writer::start(pool.clone()),
            pool,
            notify,
            _listener: listener,
        })
    }

    /// The connection pool (for tools and benchmarks).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    async fn client(&self) -> StoreResult<Object> {
        self.pool.get().await.map_err(pool_error)
    }

    /// One append: a page of events and/or checkpoints, grouped with the
    /// appends of other runs waiting at the same time (the `group` module).
    fn append_page(&self, encoded: StoreResult<EncodedPage>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let b = encoded?;
            let run = b.run_id;
            let last_seq = self.appender.append(b).await?;
            self.outbox.send((run, sql::u64_of(last_seq, "event seq")?));
            Ok(())
        })
    }

    /// Runs a cached statement on a pooled connection; the rows.
    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<Vec<Row>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.query(&stmt, params).await?)
    }

    /// As [`PostgresStore::query`], for at most one row.
    async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Option<Row>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.query_opt(&stmt, params).await?)
    }

    /// As [`PostgresStore::query`]; the number of rows changed.
    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.execute(&stmt, params).await?)
    }
}

/// Brings the database at `url` to the schema this build knows;
/// `stategraph migrate` calls this.
///
/// # Errors
/// As [`PostgresStore::connect`].
pub async fn migrate(url: &str) -> StoreResult<MigrationReport> {
    let pool = pool(config(url)?, 1)?;
    let mut client = pool.get().await.map_err(pool_error)?;
    apply_migrations(&mut client).await
}

/// The connection settings: the URL's, with defaults for what it leaves out.
fn config(url: &str) -> StoreResult<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::Backend(format!("invalid PostgreSQL URL: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    if config.get_application_name().is_none() {
        config.application_name("stategraph");
    }
    // tokio-postgres' default idle time before keepalive probes is 2 hours:
    // a pooled or listening connection to a server that vanished without
    // closing it would look alive that long.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(Duration::from_secs(30));
    }
    // A request sent to a vanished server fails after this, not after the
    // kernel's ~15 minutes of retransmissions.
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(30));
    }
    Ok(config)
}

/// Run on every new connection.
///
/// Generic plans: the store's statements are few, prepared once per
/// connection and executed thousands of times with parameters that never
/// change the best plan (equality on keys). By default PostgreSQL plans
/// each execution anew while it compares custom plans with the generic one,
/// and for the append statement's CTEs it keeps doing so: forcing the
/// generic plan took the chat path's server CPU from 3.8 to 3.3 ms per run
/// on the development machine. A session setting, not a startup option, so
/// connection poolers that refuse unknown startup options still work.
pub(crate) const SESSION_SETUP: &str = "SET plan_cache_mode = force_generic_plan";

fn pool(config: tokio_postgres::Config, size: usize) -> StoreResult<Pool> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .post_create(Hook::async_fn(|client: &mut ClientWrapper, _| {
            Box::pin(async move {
                // Tuning, not correctness: a server that refuses it still
                // serves the connection.
                if let Err(e) = client.batch_execute(SESSION_SETUP).await {
                    tracing::warn!(error = %e, "could not tune a PostgreSQL session");
                }
                Ok(())
            })
        }))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| StoreError::Backend(format!("cannot build the PostgreSQL pool: {e}")))
}

/// Applies pending migrations in one transaction, holding an advisory lock.
async fn apply_migrations(client: &mut Object) -> StoreResult<MigrationReport> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .await?;
    let found: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await?
        .try_get(0)?;
    let found = sql::u32_of(i64::from(found), "schema version")?;
    sql::check_not_newer(found, MIGRATIONS, "PostgreSQL")?;
    let mut applied = Vec::new();
    for m in sql::pending(found, MIGRATIONS) {
        tx.batch_execute(m.sql).await.map_err(|e| {
            StoreError::Backend(format!(
                "PostgreSQL migration {} ({}) failed: {}",
                m.version,
                m.name,
                describe(&e)
            ))
        })?;
        let version = sql::i32_of(m.version, "schema version")?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            &[&version, &m.name, &sql::i64_of(now_micros(), "time")?],
        )
        .await?;
        applied.push(m.version);
    }
    tx.commit().await?;
    Ok(MigrationReport {
        from: found,
        to: found.max(sql::latest(MIGRATIONS)),
        applied,
    })
}

/// The server's message for a database error, the client's otherwise.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_owned(),
        },
        None => e.to_string(),
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if let Some(db) = e.as_db_error() {
            let code = db.code().code();
            let text = describe(&e);
            return match code {
                // Unique and exclusion violations (a stored seq again).
                "23505" | "23P01" => StoreError::Conflict(text),
                // Connection exceptions, insufficient resources, shutdowns,
                // serialization failures and deadlocks: retrying may help.
                c if c.starts_with("08")
                    || c.starts_with("53")
                    || c.starts_with("57P")
                    || c == "40001"
                    || c == "40P01" =>
                {
                    StoreError::Unavailable(format!("{code}: {text}"))
                }
                _ => StoreError::Backend(format!("{code}: {text}")),
            };
        }
        // tokio-postgres keeps its error kinds private: a closed connection,
        // an I/O error underneath, a failed connect or a timeout all mean
        // the server could not be reached.
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        let text = e.to_string();
        if e.is_closed()
            || io
            || text.starts_with("error connecting")
            || text.starts_with("timeout")
        {
            StoreError::Unavailable(format!("PostgreSQL: {text}"))
        } else {
            StoreError::Backend(format!("PostgreSQL: {text}"))
        }
    }
}

fn pool_error(e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => e.into(),
        PoolError::NoRuntimeSpecified => {
            StoreError::Backend("PostgreSQL pool has no runtime".into())
        }
        other => StoreError::Unavailable(format!("PostgreSQL pool: {other}")),
    }
}

impl ChatStore for PostgresStore {
    fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>> {
        Box::pin(async move { turns::begin_turn(self, &turn).await })
    }

    fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
        Box::pin(async move {
            let (created, updated) = (
                sql::i64_of(chat.created_at, "chat time")?,
                sql::i64_of(chat.updated_at, "chat time")?,
            );
            let insert = format!(
                "WITH inserted AS (
                     INSERT INTO chats ({CHAT_COLS}) VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (id) DO NOTHING RETURNING {CHAT_COLS})
                 SELECT {CHAT_COLS} FROM inserted UNION ALL SELECT {CHAT_COLS} FROM chats WHERE id = $1 LIMIT 1"
            );
            let params: [&(dyn ToSql + Sync); 6] = [
                &chat.id,
                &chat.user_id,
                &chat.title,
                &created,
                &updated,
                &chat.active_run,
            ];
            if let Some(row) = self.query_opt(&insert, &params).await? {
                return chat_of(&row);
            }
            // Another transaction inserted it after this statement's snapshot
            // was taken: it has committed now, so a new statement sees it.
            match self.get_chat(&chat.id).await? {
                Some(stored) => Ok(stored),
                None => Err(StoreError::NotFound(format!("chat {}", chat.id))),
            }
        })
    }

    fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
        let id = id.to_owned();
        Box::pin(async move {
            let row = self
                .query_opt(
                    &format!("SELECT {CHAT_COLS} FROM chats WHERE id = $1"),
                    &[&id],
                )
                .await?;
            row.as_ref().map(chat_of).transpose()
        })
    }

    fn list_chats(
        &self,
        user_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
        let user = user_id.to_owned();
        Box::pin(async move {
            let sql = format!(
                "SELECT {CHAT_COLS} FROM chats WHERE user_id = $1 ORDER BY updated_at DESC, id DESC LIMIT $2"
            );
            self.query(&sql, &[&user, &sql::limit_of(limit)])
                .await?
                .iter()
                .map(chat_of)
                .collect()
        })
    }

    fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = id.to_owned();
        Box::pin(async move {
            let sql = "WITH gone AS (DELETE FROM messages WHERE chat_id = $1) DELETE FROM chats WHERE id = $1";
            Ok(self.execute(sql, &[&id]).await? > 0)
        })
    }

    fn chats_metadata(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, serde_json::Value>>> {
        let user = user_id.to_owned();
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT id, metadata FROM chats WHERE user_id = $1 AND metadata <> '{}'::jsonb",
                    &[&user],
                )
                .await?;
            let mut out = std::collections::HashMap::new();
            for r in &rows {
                let id: String = r.try_get(0)?;
                let Json(v): Json<serde_json::Value> = r.try_get(1)?;
                out.insert(id, v);
            }
            Ok(out)
        })
    }

    fn set_chat_metadata(
        &self,
        chat_id: &str,
        metadata: serde_json::Value,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let chat = chat_id.to_owned();
        Box::pin(async move {
            let sql = "UPDATE chats SET metadata = $2, updated_at = GREATEST($3, updated_at + 1) WHERE id = $1";
            let n = self
                .execute(
                    sql,
                    &[&chat, &Json(&metadata), &sql::i64_of(now_micros(), "time")?],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>> {
        let chat = chat_id.to_owned();
        Box::pin(async move {
            self.execute(
                RELEASE_CHAT,
                &[&chat, &run, &sql::i64_of(now_micros(), "time")?],
            )
            .await?;
            Ok(())
        })
    }

    fn set_active_run(&self, chat_id: &str, run: Option<Uuid>) -> BoxFuture<'_, StoreResult<()>> {
        let chat = chat_id.to_owned();
        Box::pin(async move {
            let sql = "UPDATE chats SET active_run = $2, updated_at = greatest($3, updated_at + 1) WHERE id = $1";
            match self
                .execute(sql, &[&chat, &run, &sql::i64_of(now_micros(), "time")?])
                .await?
            {
                0 => Err(StoreError::NotFound(format!("chat {chat}"))),
                _ => Ok(()),
            }
        })
    }

    fn replace_messages_from(
        &self,
        chat_id: &str,
        position: i64,
        messages: Vec<MessageRecord>,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let chat = chat_id.to_owned();
        Box::pin(async move {
            let cols = MessageColumns::new(&chat, &messages)?;
            let mut client = self.client().await?;
            let delete = client
                .prepare_cached("DELETE FROM messages WHERE chat_id = $1 AND position >= $2")
                .await?;
            let upsert = client.prepare_cached(UPSERT_MESSAGES).await?;
            let tx = client.transaction().await?;
            // Two statements (an upsert must not touch rows its own
            // statement deletes), pipelined: sent together, run in order.
            let (delete_params, upsert_params): ([&(dyn ToSql + Sync); 2], _) =
                ([&chat, &position], cols.params());
            futures::try_join!(
                tx.execute(&delete, &delete_params),
                tx.execute(&upsert, &upsert_params)
            )?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let cols = MessageColumns::new(&message.chat_id, std::slice::from_ref(&message))?;
            self.execute(UPSERT_MESSAGES, &cols.params()).await?;
            Ok(())
        })
    }

    fn messages(&self, chat_id: &str) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>> {
        let chat = chat_id.to_owned();
        Box::pin(async move {
            let sql = format!(
                "SELECT {MESSAGE_COLS} FROM messages WHERE chat_id = $1 ORDER BY position, id"
            );
            self.query(&sql, &[&chat])
                .await?
                .iter()
                .map(message_of)
                .collect()
        })
    }

    fn end_turn(&self, end: TurnEnd) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move { turns::end_turn(self, &end).await })
    }
}

/// Records how run `$1` ended (and drops its lease).
const FINISH_RUN: &str = "UPDATE runs SET status = $2, error = $3, prompt_tokens = $4, completion_tokens = $5, finished_at = $6,
        cost_nano_usd = $7, lease_owner = NULL, lease_until = NULL
    WHERE id = $1";

/// Clears the chat `$1`'s active run if it still is `$2`.
const RELEASE_CHAT: &str =
    "UPDATE chats SET active_run = NULL, updated_at = greatest($3, updated_at + 1)
    WHERE id = $1 AND active_run = $2";

impl RunStore for PostgresStore {
    fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let cols = RunColumns::new(&run)?;
            let sql = format!(
                "INSERT INTO runs ({RUN_COLS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
            );
            match self.execute(&sql, &cols.params()).await {
                Err(StoreError::Conflict(_)) => {
                    Err(StoreError::Conflict(format!("run {} exists", run.id)))
                }
                other => other.map(|_| ()),
            }
        })
    }

    fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
        Box::pin(async move {
            let row = self
                .query_opt(
                    &format!("SELECT {RUN_COLS} FROM runs WHERE id = $1"),
                    &[&id],
                )
                .await?;
            row.as_ref().map(run_of).transpose()
        })
    }

    fn list_runs(&self, query: &RunQuery) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
        let (sql, params) = super::query::select(RUN_COLS, query, |n| format!("${n}"));
        Box::pin(async move {
            let owned: Vec<Box<dyn ToSql + Sync + Send>> = params
                .into_iter()
                .map(|p| -> Box<dyn ToSql + Sync + Send> {
                    match p {
                        SqlParam::Text(t) => Box::new(t),
                        SqlParam::Int(i) => Box::new(i),
                        SqlParam::Id(id) => Box::new(id),
                    }
                })
                .collect();
            let refs: Vec<&(dyn ToSql + Sync)> = owned
                .iter()
                .map(|b| b.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let rows = self.query(&sql, &refs).await?;
            rows.iter().map(run_of).collect()
        })
    }

    fn newest_run_status_by_chat(
        &self,
        user_id: &str,
    ) -> BoxFuture<'_, StoreResult<std::collections::HashMap<String, RunStatus>>> {
        let user = user_id.to_owned();
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT chat_id, status FROM (SELECT chat_id, status, ROW_NUMBER() OVER \
             (PARTITION BY chat_id ORDER BY created_at DESC, id DESC) AS n \
             FROM runs WHERE user_id = $1 AND chat_id IS NOT NULL) AS newest WHERE n = 1",
                    &[&user],
                )
                .await?;
            let mut out = std::collections::HashMap::new();
            for r in &rows {
                let status: String = r.try_get(1)?;
                out.insert(r.try_get(0)?, sql::status_of(&status)?);
            }
            Ok(out)
        })
    }

    fn finish_run(
        &self,
        id: Uuid,
        status: RunStatus,
        error: Option<ErrorInfo>,
        usage: Usage,
    ) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let sql = FINISH_RUN;
            let (prompt, completion, cost) = (
                sql::i64_of(usage.prompt_tokens, "token count")?,
                sql::i64_of(usage.completion_tokens, "token count")?,
                sql::i64_of(usage.cost_nano_usd, "cost")?,
            );
            let now = sql::i64_of(now_micros(), "time")?;
            let params: [&(dyn ToSql + Sync); 7] = [
                &id,
                &sql::status_name(status),
                &error.as_ref().map(Json),
                &prompt,
                &completion,
                &now,
                &cost,
            ];
            match self.execute(sql, &params).await? {
                0 => Err(StoreError::NotFound(format!("run {id}"))),
                _ => Ok(()),
            }
        })
    }
    fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>> {
        let user = user.to_owned();
        Box::pin(async move {
            let since = sql::i64_of(since, "time")?;
            // sum(bigint) is numeric: cast back (a user's tokens and
            // nano-dollars of a day fit i64).
            let row = self
                .query_opt(
                    "SELECT coalesce(sum(prompt_tokens), 0)::BIGINT, coalesce(sum(completion_tokens), 0)::BIGINT,
                         coalesce(sum(cost_nano_usd), 0)::BIGINT
                     FROM runs WHERE user_id = $1 AND created_at >= $2",
                    &[&user, &since],
                )
                .await?;
            let (prompt, completion, cost): (i64, i64, i64) = match row {
                Some(r) => (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?),
                None => (0, 0, 0),
            };
            Ok(Usage {
                prompt_tokens: u64::try_from(prompt).unwrap_or(0),
                completion_tokens: u64::try_from(completion).unwrap_or(0),
                cost_nano_usd: u64::try_from(cost).unwrap_or(0),
                ..Usage::default()
            })
        })
    }
}

impl EventLog for PostgresStore {
    fn append_steps(&self, batches: &[StepBatch]) -> BoxFuture<'_, StoreResult<()>> {
        self.append_page(EncodedPage::new(batches))
    }

    fn append_events(
        &self,
        run: Uuid,
        events: &[std::sync::Arc<Event>],
    ) -> BoxFuture<'_, StoreResult<()>> {
        self.append_page(EncodedPage::events_only(run, events))
    }

    fn events(
        &self,
        run: Uuid,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<Event>>> {
        Box::pin(async move {
            let Ok(after_sql) = i64::try_from(after) else {
                return Ok(Vec::new());
            };
            let rows = self
                .query(EVENTS_AFTER, &[&run, &after_sql, &sql::limit_of(limit)])
                .await?;
            let mut out = Vec::new();
            for r in &rows {
                pages::read_page(run, r.try_get(0)?, after, limit, &mut out)?;
            }
            Ok(out)
        })
    }

    fn checkpoints(
        &self,
        run: Uuid,
        upto: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<CheckpointRecord>>> {
        Box::pin(async move {
            let upto = i32::try_from(upto).unwrap_or(i32::MAX);
            let sql = "SELECT step, writes, next, joins, snapshot FROM checkpoints WHERE run_id = $1 AND step <= $2 ORDER BY step";
            let rows = self.query(sql, &[&run, &upto]).await?;
            rows.iter()
                .map(|r| {
                    let step: i32 = r.try_get(0)?;
                    let Json(writes): Json<Vec<TaskWrite>> = r.try_get(1)?;
                    let Json(next): Json<Vec<PendingTask>> = r.try_get(2)?;
                    let Json(joins): Json<Vec<Vec<String>>> = r.try_get(3)?;
                    let step = sql::u32_of(i64::from(step), "checkpoint step")?;
                    Ok(CheckpointRecord {
                        step,
                        writes,
                        next,
                        joins,
                        snapshot: r.try_get(4)?,
                    })
                })
                .collect()
        })
    }
}

impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            self.client().await?.batch_execute("SELECT 1").await?;
            Ok(())
        })
    }

    fn probe_write(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            self.execute(sql::PROBE_WRITE, &[]).await?;
            Ok(())
        })
    }
}
