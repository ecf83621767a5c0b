//! Judge verdicts in SQLite (`run_verdicts`, schema version 11).

use futures::future::BoxFuture;
use rusqlite::{Row, params};
use uuid::Uuid;

use super::SqliteStore;
use super::rows::text;
use crate::store::{StoreError, StoreResult, VerdictRecord, Verdicts, sql};

const COLS: &str =
    "id, run_id, criterion, verdict, reason, judge, model, answer, source, created_at";

impl Verdicts for SqliteStore {
    fn add_verdicts(&self, verdicts: Vec<VerdictRecord>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(self.writer.write(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "INSERT INTO run_verdicts ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ))?;
            for v in &verdicts {
                stmt.execute(params![
                    v.id.to_string(),
                    v.run_id.to_string(),
                    v.criterion,
                    v.verdict,
                    v.reason,
                    v.judge,
                    v.model,
                    v.answer,
                    v.source,
                    sql::i64_of(v.created_at, "time")?,
                ])?;
            }
            Ok(())
        }))
    }

    fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<VerdictRecord>>> {
        Box::pin(self.readers.run(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLS} FROM run_verdicts WHERE run_id = ?1 ORDER BY created_at, id"
            ))?;
            let mut rows = stmt.query([run.to_string()])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(verdict_of(r)?);
            }
            Ok(out)
        }))
    }
}

fn verdict_of(r: &Row<'_>) -> StoreResult<VerdictRecord> {
    let id = |i: usize| {
        Uuid::parse_str(text(r, i)?)
            .map_err(|e| StoreError::Backend(format!("stored verdict id: {e}")))
    };
    Ok(VerdictRecord {
        id: id(0)?,
        run_id: id(1)?,
        criterion: text(r, 2)?.to_owned(),
        verdict: text(r, 3)?.to_owned(),
        reason: text(r, 4)?.to_owned(),
        judge: text(r, 5)?.to_owned(),
        model: text(r, 6)?.to_owned(),
        answer: text(r, 7)?.to_owned(),
        source: text(r, 8)?.to_owned(),
        created_at: sql::u64_of(r.get(9)?, "time")?,
    })
}
