//! What the two SQL backends share: migration bookkeeping and the encoding
//! of records into column values.
//!
//! Both backends store the same columns (the event log as pages: the
//! `pages` module), so the conversions live here once:
//! unsigned Rust integers become signed SQL integers (checked, never
//! wrapping), [`RunStatus`] becomes its snake_case name, and JSON is
//! serialized straight from the typed value to text. The last point matters:
//! a [`crate::state::Patch`] is an *ordered* map, so JSON must be stored
//! verbatim (SQLite `TEXT`, PostgreSQL `json`, never `jsonb`) and must not
//! pass through [`serde_json::Value`], whose maps sort their keys.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{StoreError, StoreResult};
use crate::events::{RunStatus, StepBatch};

/// One numbered schema change, embedded in the binary.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    /// Version it brings the schema to (1, 2, …; in order, and a number
    /// another change reserved may be missing until it lands).
    pub(crate) version: u32,
    /// Short name, recorded with the version.
    pub(crate) name: &'static str,
    /// The SQL, applied in one transaction with the version row.
    pub(crate) sql: &'static str,
}

pub(crate) use super::MigrationReport;

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
    s.as_str()
}

/// A status from its stored name.
pub(crate) fn status_of(name: &str) -> StoreResult<RunStatus> {
    Ok(match name {
        "running" => RunStatus::Running,
        "finished" => RunStatus::Finished,
        "failed" => RunStatus::Failed,
        "cancelled" => RunStatus::Cancelled,
        "interrupted" => RunStatus::Interrupted,
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

/// The checkpoint of a [`StepBatch`] as column values (both backends store
/// these columns alike).
#[derive(Debug)]
pub(crate) struct EncodedCheckpoint {
    pub(crate) step: i32,
    pub(crate) writes: String,
    pub(crate) next: String,
    pub(crate) joins: String,
    pub(crate) snapshot: Option<String>,
}

impl EncodedCheckpoint {
    /// Encodes the checkpoint part of `b`.
    pub(crate) fn new(b: &StepBatch) -> StoreResult<Self> {
        Ok(Self {
            step: i32_of(b.step, "step")?,
            writes: to_json(&b.writes, "checkpoint writes")?,
            next: to_json(&b.next, "checkpoint frontier")?,
            joins: to_json(&b.joins, "checkpoint joins")?,
            snapshot: b
                .snapshot
                .as_ref()
                .map(|s| to_json(s, "snapshot"))
                .transpose()?,
        })
    }
}

/// A write that changes nothing a reader sees, yet writes a page (SQLite) or
/// a row version (PostgreSQL): the newest migration's row rewritten as it
/// is. [`Store::probe_write`](super::Store::probe_write) of both backends.
pub(crate) const PROBE_WRITE: &str = "UPDATE schema_migrations SET applied_at = applied_at
     WHERE version = (SELECT max(version) FROM schema_migrations)";

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
    fn statuses_round_trip_by_name() {
        assert_eq!(
            status_of(status_name(RunStatus::Cancelled)).unwrap(),
            RunStatus::Cancelled
        );
        assert!(i64_of(u64::MAX, "seq").is_err() && u64_of(-1, "seq").is_err());
    }
}
