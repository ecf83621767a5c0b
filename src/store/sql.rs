//! What the two SQL backends share: migration bookkeeping and the encoding
//! of records into column values.
//!
//! Both backends store the same columns for chats, runs and checkpoints (the
//! event log differs: a row per event on SQLite, a row per append on
//! PostgreSQL — see `postgres::pages`), so the conversions live here once:
//! unsigned Rust integers become signed SQL integers (checked, never
//! wrapping), [`RunStatus`] becomes its snake_case name, and JSON is
//! serialized straight from the typed value to text. The last point matters:
//! a [`crate::state::Patch`] is an *ordered* map, so JSON must be stored
//! verbatim (SQLite `TEXT`, PostgreSQL `json`, never `jsonb`) and must not
//! pass through [`serde_json::Value`], whose maps sort their keys.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::{StoreError, StoreResult};
use crate::events::{Event, EventKind};
use crate::runtime::{RunStatus, StepBatch};

/// One numbered schema change, embedded in the binary.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    /// Version it brings the schema to (1, 2, …, without gaps).
    pub(crate) version: u32,
    /// Short name, recorded with the version.
    pub(crate) name: &'static str,
    /// The SQL, applied in one transaction with the version row.
    pub(crate) sql: &'static str,
}

/// What a call to `migrate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationReport {
    /// Schema version before (0 for a new database).
    pub from: u32,
    /// Schema version now.
    pub to: u32,
    /// Versions applied by this call, in order (empty when up to date).
    pub applied: Vec<u32>,
}

/// The newest version in `migrations`.
pub(crate) fn latest(migrations: &[Migration]) -> u32 {
    migrations.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Refuses a database written by a newer build: its tables may mean
/// something this build does not know, so reading or writing them is unsafe.
pub(crate) fn check_not_newer(
    found: u32,
    migrations: &[Migration],
    backend: &str,
) -> StoreResult<()> {
    let known = latest(migrations);
    if found > known {
        return Err(StoreError::Backend(format!(
            "{backend} database schema version {found} is newer than this build of stategraph supports \
             (version {known}); upgrade stategraph or point it at another database"
        )));
    }
    Ok(())
}

/// The migrations after `found`, in order.
pub(crate) fn pending(found: u32, migrations: &[Migration]) -> impl Iterator<Item = &Migration> {
    migrations.iter().filter(move |m| m.version > found)
}

/// `u64` → SQL `BIGINT`.
pub(crate) fn i64_of(v: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(v)
        .map_err(|_| StoreError::Backend(format!("{what} {v} does not fit a signed 64-bit column")))
}

/// SQL `BIGINT` → `u64`.
pub(crate) fn u64_of(v: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Backend(format!("stored {what} {v} is negative")))
}

/// `u32` → SQL `INTEGER` (PostgreSQL's is signed 32-bit).
pub(crate) fn i32_of(v: u32, what: &str) -> StoreResult<i32> {
    i32::try_from(v)
        .map_err(|_| StoreError::Backend(format!("{what} {v} does not fit a signed 32-bit column")))
}

/// SQL `INTEGER` → `u32`.
pub(crate) fn u32_of(v: i64, what: &str) -> StoreResult<u32> {
    u32::try_from(v).map_err(|_| StoreError::Backend(format!("stored {what} {v} is out of range")))
}

/// `usize` limit → SQL `LIMIT` (saturating: "everything" stays everything).
pub(crate) fn limit_of(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The stored name of a status.
pub(crate) fn status_name(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Running => "running",
        RunStatus::Finished => "finished",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
    }
}

/// A status from its stored name.
pub(crate) fn status_of(name: &str) -> StoreResult<RunStatus> {
    Ok(match name {
        "running" => RunStatus::Running,
        "finished" => RunStatus::Finished,
        "failed" => RunStatus::Failed,
        "cancelled" => RunStatus::Cancelled,
        other => return Err(StoreError::Backend(format!("unknown run status `{other}`"))),
    })
}

/// Serializes to JSON text.
pub(crate) fn to_json<T: Serialize + ?Sized>(v: &T, what: &str) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(format!("cannot encode {what}: {e}")))
}

/// Parses JSON text.
pub(crate) fn from_json<T: DeserializeOwned>(text: &str, what: &str) -> StoreResult<T> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Backend(format!("cannot decode stored {what}: {e}")))
}

/// The `type` tag of a serialized [`EventKind`], for the `kind` column.
///
/// serde writes an internally tagged enum's tag first, so this is a prefix
/// read; the fallback parses the object for any other shape.
fn kind_tag(payload: &str) -> String {
    if let Some(rest) = payload.strip_prefix("{\"type\":\"")
        && let Some(end) = rest.find('"')
    {
        return rest[..end].to_owned();
    }
    serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The checkpoint of a [`StepBatch`] and the run progress it records, as
/// column values (both backends store these columns alike).
#[derive(Debug)]
pub(crate) struct EncodedCheckpoint {
    pub(crate) run_id: Uuid,
    pub(crate) step: i32,
    pub(crate) writes: String,
    pub(crate) next: String,
    pub(crate) joins: String,
    pub(crate) snapshot: Option<String>,
    pub(crate) status: &'static str,
    /// `finished_at` for a final batch.
    pub(crate) now: i64,
}

impl EncodedCheckpoint {
    /// Encodes the checkpoint part of `b`.
    pub(crate) fn new(b: &StepBatch) -> StoreResult<Self> {
        Ok(Self {
            run_id: b.run_id,
            step: i32_of(b.step, "step")?,
            writes: to_json(&b.writes, "checkpoint writes")?,
            next: to_json(&b.next, "checkpoint frontier")?,
            joins: to_json(&b.joins, "checkpoint joins")?,
            snapshot: b
                .snapshot
                .as_ref()
                .map(|s| to_json(s, "snapshot"))
                .transpose()?,
            status: status_name(b.status),
            now: i64_of(crate::events::now_micros(), "time")?,
        })
    }
}

/// A [`StepBatch`] as column values, one event per row (SQLite binds row by
/// row from it).
///
/// Encoding happens on the caller's task, before the batch is queued, so the
/// batch need not outlive the call and the SQLite writer thread does nothing
/// but SQL.
#[derive(Debug)]
pub(crate) struct EncodedBatch {
    pub(crate) cp: EncodedCheckpoint,
    pub(crate) seq: Vec<i64>,
    pub(crate) at: Vec<i64>,
    pub(crate) event_step: Vec<i32>,
    pub(crate) node: Vec<Option<Arc<str>>>,
    pub(crate) task: Vec<i32>,
    pub(crate) kind: Vec<String>,
    pub(crate) payload: Vec<String>,
    /// The highest seq in the batch, if it has events.
    pub(crate) max_seq: Option<i64>,
}

impl EncodedBatch {
    /// Encodes `b`.
    pub(crate) fn new(b: &StepBatch) -> StoreResult<Self> {
        let n = b.events.len();
        let mut out = Self {
            cp: EncodedCheckpoint::new(b)?,
            seq: Vec::with_capacity(n),
            at: Vec::with_capacity(n),
            event_step: Vec::with_capacity(n),
            node: Vec::with_capacity(n),
            task: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            max_seq: None,
        };
        for e in &b.events {
            let payload = to_json(&e.event, "event")?;
            out.seq.push(i64_of(e.seq, "event seq")?);
            out.at.push(i64_of(e.at, "event time")?);
            out.event_step.push(i32_of(e.step, "event step")?);
            out.node.push(e.node.clone());
            out.task.push(i32_of(e.task, "event task")?);
            out.kind.push(kind_tag(&payload));
            out.payload.push(payload);
        }
        out.max_seq = out.seq.iter().copied().max();
        Ok(out)
    }
}

/// The columns of one `run_events` row, as read back.
#[derive(Debug)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) at: i64,
    pub(crate) step: i64,
    pub(crate) node: Option<String>,
    pub(crate) task: i64,
}

impl EventRow {
    /// The event, with its decoded kind.
    pub(crate) fn into_event(self, run_id: Uuid, event: EventKind) -> StoreResult<Event> {
        Ok(Event {
            run_id,
            seq: u64_of(self.seq, "event seq")?,
            at: u64_of(self.at, "event time")?,
            step: u32_of(self.step, "event step")?,
            node: self.node.map(Arc::from),
            task: u32_of(self.task, "event task")?,
            event,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const M: &[Migration] = &[
        Migration {
            version: 1,
            name: "a",
            sql: "",
        },
        Migration {
            version: 2,
            name: "b",
            sql: "",
        },
    ];

    #[test]
    fn newer_schemas_are_refused_and_pending_follows_the_found_version() {
        assert!(check_not_newer(2, M, "x").is_ok());
        let e = check_not_newer(3, M, "SQLite").unwrap_err().to_string();
        assert!(
            e.contains("version 3 is newer") && e.contains("(version 2)"),
            "{e}"
        );
        assert_eq!(pending(1, M).map(|m| m.version).collect::<Vec<_>>(), [2]);
        assert_eq!(pending(0, M).count(), 2);
    }

    #[test]
    fn kind_tags_come_from_the_serialized_event() {
        let text = to_json(
            &EventKind::TextDelta {
                call: 0,
                delta: "hi".into(),
            },
            "e",
        )
        .unwrap();
        assert_eq!(kind_tag(&text), "text_delta");
        assert_eq!(
            kind_tag(&to_json(&EventKind::Unknown, "e").unwrap()),
            "unknown"
        );
        assert_eq!(kind_tag(r#"{"beam":1,"type":"hologram"}"#), "hologram");
        assert_eq!(
            status_of(status_name(RunStatus::Cancelled)).unwrap(),
            RunStatus::Cancelled
        );
        assert!(i64_of(u64::MAX, "seq").is_err() && u64_of(-1, "seq").is_err());
    }
}
