//! The database fixture: a store of each backend for one test.
//!
//! PostgreSQL runs on 127.0.0.1:5432 (trust auth); each test gets a
//! database of its own (`stategraph_test_<random>`), dropped afterwards, so
//! tests run in parallel and repeatedly. SQLite lives in a temporary
//! directory that goes with the fixture.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

use futures::FutureExt;
use stategraph::internals::store::memory::MemoryStore;
use stategraph::internals::store::{PostgresStore, SqliteStore, Store};
use uuid::Uuid;

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A connection to the server's `postgres` database, to create and drop
/// test databases.
pub async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(ADMIN_URL, tokio_postgres::NoTls).await.unwrap_or_else(|e| {
        panic!("PostgreSQL must run on 127.0.0.1:5432 (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): {e}")
    });
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A PostgreSQL database of one test's own.
pub struct PgDb {
    name: String,
}

impl PgDb {
    /// A fresh, empty database (drop it with [`PgDb::drop_db`], or use
    /// [`PgDb::with`], which always does).
    pub async fn create() -> Self {
        let name = format!("stategraph_test_{}", Uuid::new_v4().simple());
        admin()
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        Self { name }
    }

    /// Its connection URL.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }

    /// Drops it, closing whatever connections are left.
    pub async fn drop_db(self) {
        admin()
            .await
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .unwrap();
    }

    /// Runs `f` with a store of `pool` connections on a fresh database,
    /// dropped afterwards even if `f` fails.
    pub async fn with_store<Fut: Future<Output = ()>>(
        pool: usize,
        f: impl FnOnce(Arc<dyn Store>) -> Fut,
    ) {
        Self::with(|url| async move {
            let store = PostgresStore::connect(&url, pool).await.unwrap();
            f(Arc::new(store)).await;
        })
        .await;
    }

    /// Runs `f` with the database's URL, dropping it afterwards even if `f`
    /// fails.
    pub async fn with<Fut: Future<Output = ()>>(f: impl FnOnce(String) -> Fut) {
        let db = Self::create().await;
        let result = AssertUnwindSafe(f(db.url())).catch_unwind().await;
        db.drop_db().await;
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}

/// A SQLite store in a temporary directory, removed with the fixture.
pub struct SqliteDb {
    dir: tempfile::TempDir,
}

impl SqliteDb {
    /// A fresh directory for the database file.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The database file (created by the first [`SqliteDb::open`]).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("data").join("stategraph.db")
    }

    /// A store on the file; every call opens another one on the same file
    /// (as a second instance would).
    pub async fn open(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(self.path()).await.unwrap())
    }
}

/// A store backend.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    /// The in-memory store (the reference).
    Memory,
    /// SQLite in a temporary directory.
    Sqlite,
    /// PostgreSQL in a database of the test's own.
    Postgres,
}

/// Runs `check` with a fresh store of `backend`, removing its files or
/// database afterwards (even if `check` fails).
pub async fn with_store<Fut: Future<Output = ()>>(
    backend: Backend,
    check: impl FnOnce(Arc<dyn Store>) -> Fut,
) {
    match backend {
        Backend::Memory => check(Arc::new(MemoryStore::new())).await,
        Backend::Sqlite => {
            let db = SqliteDb::new();
            check(db.open().await).await;
        }
        Backend::Postgres => PgDb::with_store(4, check).await,
    }
}
