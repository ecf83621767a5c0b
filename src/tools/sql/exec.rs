//! Running generated statements: the pool, the read-only transaction and
//! the translation of database errors into messages a model may see.
//!
//! Every statement runs inside `BEGIN READ ONLY` with `SET LOCAL
//! statement_timeout`, so even a source query that tries to write, or one
//! that runs away, is stopped by PostgreSQL itself. Errors never carry the
//! SQL text or connection details: a database error keeps its SQLSTATE and
//! PostgreSQL's own message; a connection problem only says the database is
//! unavailable (the cause goes to the log).

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::build::{Param, Statement};
use super::{SetupError, SqlSources};
use crate::tools::ToolError;

/// Builds the pool; connects lazily, on the first call.
pub(super) fn pool(url: &str, size: usize) -> Result<Pool, SetupError> {
    if url.trim().is_empty() {
        return Err(SetupError::Url(
            "it is empty; write e.g. postgres://reader@127.0.0.1:5432/reporting".into(),
        ));
    }
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| SetupError::Url(e.to_string()))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    if config.get_application_name().is_none() {
        config.application_name("stategraph-tools");
    }
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| SetupError::Setting(format!("cannot build the connection pool: {e}")))
}

impl SqlSources {
    /// Runs `stmt` in a read-only transaction with the statement timeout.
    pub(super) async fn run(&self, stmt: &Statement) -> Result<Vec<Row>, ToolError> {
        let mut client = self.pool.get().await.map_err(|e| {
            tracing::warn!(error = %e, "sql tools: no database connection");
            unavailable()
        })?;
        let timeout = self.statement_timeout;
        let fail = |e: tokio_postgres::Error| db_error(&e, timeout);
        let tx = client
            .build_transaction()
            .read_only(true)
            .start()
            .await
            .map_err(fail)?;
        // An integer, not model input.
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = {}",
            timeout.as_millis().max(1)
        ))
        .await
        .map_err(fail)?;
        let params: Vec<&(dyn ToSql + Sync)> = stmt
            .params
            .iter()
            .map(|p| match p {
                Param::Text(t) => t as &(dyn ToSql + Sync),
                Param::List(l) => l as &(dyn ToSql + Sync),
            })
            .collect();
        let rows = tx.query(stmt.sql.as_str(), &params).await.map_err(fail)?;
        tx.rollback().await.map_err(fail)?;
        Ok(rows)
    }
}

fn unavailable() -> ToolError {
    ToolError::Execution("the database is unavailable; try again later".into())
}

/// A database failure as the model sees it.
fn db_error(e: &tokio_postgres::Error, timeout: Duration) -> ToolError {
    let Some(db) = e.as_db_error() else {
        tracing::warn!(error = %e, "sql tools: database connection failed");
        return unavailable();
    };
    let code = db.code();
    if *code == SqlState::QUERY_CANCELED {
        ToolError::Timeout(timeout)
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        ToolError::Execution(
            "sources are read-only: this source's query tried to modify data".into(),
        )
    } else {
        tracing::debug!(
            code = code.code(),
            message = db.message(),
            "sql tools: statement failed"
        );
        ToolError::Execution(format!(
            "the database rejected the query ({}): {}",
            code.code(),
            db.message()
        ))
    }
}
