//! Judge verdicts in PostgreSQL (`run_verdicts`, schema version 11).

use futures::future::BoxFuture;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::PostgresStore;
use crate::store::{StoreResult, VerdictRecord, Verdicts, sql};

const COLS: &str =
    "id, run_id, criterion, verdict, reason, judge, model, answer, source, created_at";

impl Verdicts for PostgresStore {
    fn add_verdicts(&self, verdicts: Vec<VerdictRecord>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let stmt = tx
                .prepare_cached(&format!(
                    "INSERT INTO run_verdicts ({COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                ))
                .await?;
            for v in &verdicts {
                let at = sql::i64_of(v.created_at, "time")?;
                let params: [&(dyn ToSql + Sync); 10] = [
                    &v.id,
                    &v.run_id,
                    &v.criterion,
                    &v.verdict,
                    &v.reason,
                    &v.judge,
                    &v.model,
                    &v.answer,
                    &v.source,
                    &at,
                ];
                tx.execute(&stmt, &params).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<VerdictRecord>>> {
        Box::pin(async move {
            let rows = self
                .query(
                    &format!(
                        "SELECT {COLS} FROM run_verdicts WHERE run_id = $1 ORDER BY created_at, id"
                    ),
                    &[&run],
                )
                .await?;
            rows.iter().map(verdict_of).collect()
        })
    }
}

fn verdict_of(r: &Row) -> StoreResult<VerdictRecord> {
    Ok(VerdictRecord {
        id: r.try_get(0)?,
        run_id: r.try_get(1)?,
        criterion: r.try_get(2)?,
        verdict: r.try_get(3)?,
        reason: r.try_get(4)?,
        judge: r.try_get(5)?,
        model: r.try_get(6)?,
        answer: r.try_get(7)?,
        source: r.try_get(8)?,
        created_at: sql::u64_of(r.try_get(9)?, "time")?,
    })
}
